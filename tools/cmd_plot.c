/* rectrain plot: PNG charts of a run's metrics or of a table (plot.h). */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "rectrain/core.h"
#include "rectrain/plot.h"

static const char PLOT_USAGE[] =
    "usage: rectrain plot --metrics FILE --out DIR\n"
    "       rectrain plot --table FILE.tsv --out CHART.png [--lines] [--title T] [--ylabel Y]\n"
    "\n"
    "Draws PNG charts. --metrics: the JSON lines of train --metrics, as DIR/loss.png (training\n"
    "loss and samples/s against step), DIR/eval.png (AUC and logloss against step) and\n"
    "DIR/calibration.png (observed against predicted CTR of the final evaluation). --table: a\n"
    "bar chart of a TSV whose header names the label column and each numeric series (a bench's\n"
    "table, e.g. samples/s of rectrain and its peer per configuration); with --lines, a line\n"
    "chart of each series against the first column, which is then numeric (e.g. the losses of\n"
    "two runs against step).\n"
    "\n"
    "  --metrics FILE     a run's metrics (train --metrics FILE, or DIR/metrics.jsonl of --plot)\n"
    "  --table FILE       a TSV table with a header row\n"
    "  --out PATH         the charts' directory (--metrics) or the PNG (--table)\n"
    "  --lines            --table as lines against its first column instead of bars\n"
    "  --title T          the chart's title (--table; default: the file's name)\n"
    "  --ylabel Y         the value axis' label, with its unit (--table; default: \"value\")\n";

int cmd_plot(int argc, char **argv) {
    const char *cmd = "plot", *metrics = NULL, *table = NULL, *out = NULL, *title = NULL, *ylabel = "value";
    int lines = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = CLI_OK;
        if (cli_is_help(a)) { fputs(PLOT_USAGE, stdout); return CLI_OK; }
        else if (!strcmp(a, "--metrics")) rc = cli_str(cmd, argc, argv, &i, &metrics);
        else if (!strcmp(a, "--table")) rc = cli_str(cmd, argc, argv, &i, &table);
        else if (!strcmp(a, "--out")) rc = cli_str(cmd, argc, argv, &i, &out);
        else if (!strcmp(a, "--title")) rc = cli_str(cmd, argc, argv, &i, &title);
        else if (!strcmp(a, "--ylabel")) rc = cli_str(cmd, argc, argv, &i, &ylabel);
        else if (!strcmp(a, "--lines")) lines = 1;
        else rc = cli_usage(cmd, "unknown option '%s'", a);
        if (rc) return rc;
    }
    if (!metrics == !table) return cli_usage(cmd, "give --metrics FILE or --table FILE (one of them)");
    if (!out) return cli_usage(cmd, "--out is required (a directory for --metrics, a .png for --table)");
    rec_guard g = {0};
    rec_guard_in(&g, "--metrics", metrics);
    rec_guard_in(&g, "--table", table);
    if (metrics) rec_guard_dir(&g, "--out", out, rec_plot_files);
    else rec_guard_out(&g, "--out", out);
    rec_status s = rec_guard_check(&g);
    if (s) return cli_fail(cmd, s);
    if (table && (strlen(out) < 4 || strcmp(out + strlen(out) - 4, ".png")))
        return cli_usage(cmd, "--table draws one chart: --out names a .png file (got '%s')", out);
    if (metrics && (title || strcmp(ylabel, "value") || lines))
        return cli_usage(cmd, "--title, --ylabel and --lines are for --table");
    if (metrics) {
        s = rec_mkdir_p(out, "--out directory");
        if (!s) s = rec_plot_run(metrics, out, stderr);
    } else {
        s = (lines ? rec_plot_lines : rec_plot_bars)(table, out, title ? title : table, ylabel, stderr);
    }
    return s ? cli_fail(cmd, s) : CLI_OK;
}
