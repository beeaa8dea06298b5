/* rectrain — charts (PNG, drawn with Cairo): a run's metrics, and tables such as the benches'.
 * Every chart has a title, labelled axes with units, and a legend when it has several series. */
#ifndef RECTRAIN_PLOT_H
#define RECTRAIN_PLOT_H

#include <stdio.h>

#include "rectrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The charts of a run's metrics (the JSON lines of train --metrics, rec_scalars) into DIR:
 *   loss.png         training loss against step (and samples/s on a second axis)
 *   eval.png         evaluation AUC and logloss against step, when the run evaluated
 *   calibration.png  observed against predicted CTR by bucket of the final evaluation, with
 *                    the diagonal of perfect calibration
 * Lines that are not records of the run are refused, naming the file and line. `log` gets a
 * line naming the files written. */
rec_status rec_plot_run(const char *metrics_jsonl, const char *dir, FILE *log);
/* Those three names, NULL-ended, for the output guard (core.h). */
extern const char *const rec_plot_files[];

/* A bar chart of a table into PNG: a TSV with a header row, the first column the labels of the
 * groups, every other column a numeric series (bars side by side, the header naming each in the
 * legend). */
rec_status rec_plot_bars(const char *tsv, const char *png, const char *title, const char *ylabel, FILE *log);
/* A line chart of a table into PNG: as rec_plot_bars, but the first column is the numeric x of
 * every row (the header naming the x axis) and each series is a line (e.g. two runs' losses
 * against step). */
rec_status rec_plot_lines(const char *tsv, const char *png, const char *title, const char *ylabel, FILE *log);

#ifdef __cplusplus
}
#endif
#endif
