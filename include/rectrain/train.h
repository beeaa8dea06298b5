/* rectrain — training: data loading pipeline, evaluation metrics, checkpoints, .npy export,
 * and the trainer loop behind `rectrain train` / `rectrain eval`.
 */
#ifndef RECTRAIN_TRAIN_H
#define RECTRAIN_TRAIN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "rectrain/batch.h"
#include "rectrain/io.h"
#include "rectrain/model.h"
#include "rectrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- evaluation metrics -------------------------------------------------------------------
 * An accumulator of (logit, label) pairs over a whole evaluation set, then exact metrics:
 *   auc          ROC-AUC = P(score of a random positive > that of a random negative), ties
 *                counted 1/2 (the Mann-Whitney statistic over tie groups); NaN when the set
 *                has only one class
 *   logloss      mean BCE of sigmoid(logit) (the stable form of nn.h)
 *   ne           normalized entropy: logloss / H(ctr), H(p) = -p ln p - (1-p) ln(1-p)
 *                (He et al. 2014, "Practical lessons from predicting clicks on ads at Facebook")
 *   accuracy     share of rows with (sigmoid(logit) > 0.5) == (label > 0.5)
 *   calibration  mean predicted probability / mean label (1 = calibrated)
 * Labels are 0/1 (soft labels count as their value in logloss, ctr and calibration, as
 * label > 0.5 in auc and accuracy). */
typedef struct rec_metrics {
    int64_t n;
    double auc, logloss, ne, accuracy, calibration;
    double ctr;          /* mean label */
    double mean_pred;    /* mean predicted probability */
} rec_metrics;

typedef struct rec_eval_acc rec_eval_acc;

rec_status rec_eval_acc_init(rec_eval_acc **out, int64_t expected_rows);
void rec_eval_acc_free(rec_eval_acc *a);
void rec_eval_acc_reset(rec_eval_acc *a);
/* Appends n pairs (grows as needed; REC_ENOMEM on failure). */
rec_status rec_eval_acc_add(rec_eval_acc *a, int64_t n, const float *logits, const float *labels);
/* Computes the metrics of everything added since the last reset (sorts a copy; O(n log n)). */
rec_status rec_eval_acc_finish(rec_eval_acc *a, rec_metrics *out);
/* The same metrics from plain arrays, double precision, O(n^2) AUC: the reference. */
void rec_metrics_ref(int64_t n, const double *scores, const double *labels, rec_metrics *out);

/* ---- data sets and the loading pipeline ---------------------------------------------------
 * A data set is a preprocessed .rshard (memory-mapped) or a raw Criteo .tsv/.gz streamed
 * through a prep spec (parse + preprocessing run on the loader's thread, overlapping
 * training). Rows are numbered 0..N-1 in file order; for a TSV, N is found by a counting
 * pass on first request (rows = lines, less malformed ones in skip mode). */
typedef struct rec_dataset rec_dataset;

typedef struct rec_dataset_opts {
    const char *path;        /* .rshard, or .tsv / .gz */
    const char *spec_path;   /* TSV only: the prep spec (categorify specs need vocab_from) */
    const char *vocab_from;  /* TSV only: .rshard whose vocabularies the spec uses, or NULL */
    rec_tsv_opts tsv;        /* TSV only: has_label -1 detects; bad_rows */
    int prep_threads;        /* TSV only: threads of the prep engine (>= 1) */
} rec_dataset_opts;

rec_status rec_dataset_open(rec_dataset **out, const rec_dataset_opts *o);
void rec_dataset_close(rec_dataset *d);
const char *rec_dataset_path(const rec_dataset *d);
int rec_dataset_has_label(const rec_dataset *d);
int32_t rec_dataset_n_dense(const rec_dataset *d);          /* Dn */
int32_t rec_dataset_n_sparse(const rec_dataset *d);         /* F */
const int64_t *rec_dataset_table_rows(const rec_dataset *d);/* (F) */
/* N (may run the counting pass of a TSV: REC_EFORMAT etc. on a bad file). */
rec_status rec_dataset_rows(rec_dataset *d, int64_t *rows);

/* A loader streams rows [row0, row1) of a data set as batches of `batch` rows (the last one
 * shorter) in order. A background thread fills a ring of `depth` batches (>= 2) ahead of the
 * consumer and blocks when the ring is full (back-pressure); every buffer is allocated at
 * open, so the steady state allocates nothing. A read or preprocessing error is returned by
 * the rec_loader_next that would have delivered the failing batch. */
typedef struct rec_loader rec_loader;

rec_status rec_loader_open(rec_loader **out, rec_dataset *d, int64_t row0, int64_t row1,
                           int64_t batch, int depth);
/* The next batch, or *b = NULL at the end. The batch stays valid until the next call. */
rec_status rec_loader_next(rec_loader *l, const rec_batch **b);
/* Stops the thread and frees everything (also mid-stream). */
void rec_loader_close(rec_loader *l);
/* Seconds the consumer spent waiting in rec_loader_next (input-bound time). */
double rec_loader_wait_seconds(const rec_loader *l);

/* ---- .npy export --------------------------------------------------------------------------
 * Writes one float32 array in NumPy's .npy format (version 1.0, little-endian '<f4', C order),
 * which numpy.load and torch.from_numpy(numpy.load(...)) read. */
rec_status rec_npy_write(const char *path, const float *data, int ndim, const int64_t *shape);

/* ---- checkpoints --------------------------------------------------------------------------
 * A checkpoint file holds the model's canonical config JSON, the training position and every
 * named tensor of rec_model_tensors (parameters and optimizer state):
 *
 *   magic "RCKPT001" | u32 version | u32 header bytes | header: meta + config JSON + tensor
 *   directory (name, role, ndim, shape, file offset, bytes, CRC-32 per tensor) | CRC-32 of
 *   the header | tensor data, each 64-byte aligned | trailer magic "RCKPTEND"
 *
 * Saving writes PATH.tmp, fsyncs it, renames it over PATH and fsyncs the directory, so a
 * crash at any moment leaves either the previous checkpoint or the new one, never a mix.
 * Loading checks magic, version, sizes, every CRC, and that the names, roles and shapes match
 * the model's, refusing anything else with REC_EFORMAT / REC_EINVAL and a message naming the
 * file and the tensor. */
typedef struct rec_ckpt_meta {
    int64_t step;            /* optimizer steps taken */
    int64_t epoch;           /* epoch in progress (0-based) */
    int64_t row;             /* next training row of that epoch (relative to the train range) */
    int64_t rows_seen;       /* training rows processed in total */
    uint64_t seed;
} rec_ckpt_meta;

/* The checkpoint file inside a --ckpt directory: DIR/model.rckpt. Writes into buf (cap). */
void rec_ckpt_path(const char *dir, char *buf, size_t cap);
rec_status rec_ckpt_save(const char *path, const rec_model *m, const rec_ckpt_meta *meta);
/* Reads the config stored in a checkpoint (to build the model before loading). c is
 * overwritten; free with rec_model_config_free. */
rec_status rec_ckpt_read_config(const char *path, rec_model_config *c);
/* Loads a checkpoint into a model built from that config; checks everything first, so on
 * error the model is unchanged. */
rec_status rec_ckpt_load(const char *path, rec_model *m, rec_ckpt_meta *meta);
/* Writes every parameter as DIR/NAME.npy (creating DIR), plus DIR/config.json. */
rec_status rec_export_npy(const rec_model *m, const char *dir);

#ifdef __cplusplus
}
#endif
#endif
