/* rectrain — training: data loading pipeline, evaluation metrics, checkpoints, .npy export,
 * and the trainer loop behind `rectrain train` / `rectrain eval`.
 */
#ifndef RECTRAIN_TRAIN_H
#define RECTRAIN_TRAIN_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "rectrain/batch.h"
#include "rectrain/dist.h"
#include "rectrain/io.h"
#include "rectrain/model.h"
#include "rectrain/offload.h"
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
enum { REC_CALIB_BUCKETS = 10 };

typedef struct rec_metrics {
    int64_t n;
    double auc, logloss, ne, accuracy, calibration;
    double ctr;          /* mean label */
    double mean_pred;    /* mean predicted probability */
    /* the calibration curve: the rows in REC_CALIB_BUCKETS groups of equal size by predicted
     * probability, each with its mean prediction and observed CTR (rec_eval_acc_finish only) */
    int n_buckets;
    double bucket_pred[REC_CALIB_BUCKETS], bucket_ctr[REC_CALIB_BUCKETS];
    int64_t bucket_n[REC_CALIB_BUCKETS];
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
/* The click probability of a logit: 1 / (1 + e^-z), without overflow. */
double rec_sigmoid(double z);

/* ---- data sets and the loading pipeline ---------------------------------------------------
 * A data set is a preprocessed .rshard (memory-mapped) or a raw Criteo .tsv/.gz streamed
 * through a prep spec (parse + preprocessing run on the loader's thread, overlapping
 * training). Rows are numbered 0..N-1 in file order; for a TSV, N is found by a counting
 * pass on first request (rows = lines, less malformed ones in skip mode). */
typedef struct rec_dataset rec_dataset;

typedef struct rec_dataset_opts {
    const char *path;        /* .rshard, .rraw (rawcols.h), or .tsv / .gz */
    /* Or several files, read in order as one data set (n_paths > 0; path is then unused):
     * all .rshard, of one schema and the same vocabularies, all .rraw of one format, or all
     * TSV of one format. A .rraw is read as a shard is (any rows at once, the same shuffled
     * order), its rows preprocessed by the spec as they are read. */
    const char *const *paths;
    int n_paths;
    const char *spec_path;   /* TSV, .rraw: the prep spec (categorify specs need vocab_from) */
    const char *vocab_from;  /* TSV, .rraw: .rshard whose vocabularies the spec uses, or NULL */
    rec_tsv_opts tsv;        /* TSV only: has_label -1 detects; bad_rows */
    int prep_threads;        /* the loader's threads (>= 1): the TSV prep engine's, and a shuffled
                              * order's gather of each window's rows (features in parallel) */
    int prep_device;         /* TSV, .rraw: where the spec's ops run (rec_prep_device, prep.h):
                              * REC_PREP_CPU (0), or REC_PREP_CUDA: the GPU executor, a stream per
                              * prep thread (one for a .rraw), beside a GPU's training; the same
                              * rows either way. A .rshard has no ops to run and ignores it. */
    /* TSV in SKIP mode: record where every dropped row was among the input's lines
     * (rec_dataset_skips), 8 bytes per dropped row, for a caller that keeps one output line
     * per input line (predict). Without it only the count and the first locations are kept. */
    int map_skips;
    /* When not NULL: a signal number a handler stores to stop the work. The counting pass of a
     * TSV reads it after every chunk and, once set, ends with REC_ESTOPPED ("stopped by
     * SIGINT while counting the rows of FILE"). */
    const volatile sig_atomic_t *stop;
    /* Take .rshard files only: a TSV or .rraw is refused with a message that names no option
     * of the CLI (--spec, "prep_spec"), only rectrain prep, for readers in other languages. */
    int shards_only;
} rec_dataset_opts;

rec_status rec_dataset_open(rec_dataset **out, const rec_dataset_opts *o);
void rec_dataset_close(rec_dataset *d);
const char *rec_dataset_path(const rec_dataset *d);
int rec_dataset_has_label(const rec_dataset *d);
int rec_dataset_is_shard(const rec_dataset *d);            /* .rshard (1) or TSV / .rraw (0) */
/* TSV, .rraw: the spec its rows are preprocessed with, vocabularies bound (NULL: a .rshard). */
const struct rec_spec *rec_dataset_spec(const rec_dataset *d);
/* Loaders opened from now on run the spec's ops as the corun's plan says, beside a GPU's
 * training (prep.h); TSV or .rraw on the GPU executor only. NULL: ungated. c outlives them. */
typedef struct rec_corun rec_corun;
rec_status rec_dataset_set_corun(rec_dataset *d, rec_corun *c);
int32_t rec_dataset_n_dense(const rec_dataset *d);          /* Dn */
int32_t rec_dataset_n_sparse(const rec_dataset *d);         /* F */
const int64_t *rec_dataset_table_rows(const rec_dataset *d);/* (F) */
/* N (may run the counting pass of a TSV: REC_EFORMAT etc. on a bad file). */
rec_status rec_dataset_rows(rec_dataset *d, int64_t *rows);
/* The rows SKIP mode dropped (count and first locations), once the rows are counted
 * (rec_dataset_rows); an empty report before that, for a shard, and in FAIL mode. Callers
 * tell the user with rec_bad_report_print. */
const rec_bad_report *rec_dataset_bad(const rec_dataset *d);
/* With opts.map_skips, once the rows are counted: the positions of every dropped row among
 * the input's lines (0-based, the lines of the files one after another; an over-long line
 * counts as one), ascending, in (*pos)[0 .. *n); the data set's rows are the other lines, in
 * order. *n = 0 when nothing was dropped. Returns 0 when rows were dropped but not mapped
 * (opened without map_skips, or not counted yet), else 1. */
int rec_dataset_skips(const rec_dataset *d, const int64_t **pos, int64_t *n);

/* A loader streams rows [row0, row1) of a data set as batches of `batch` rows (the last one
 * shorter) in order. A background thread fills a ring of `depth` batches (>= 2) ahead of the
 * consumer and blocks when the ring is full (back-pressure); every buffer is allocated at
 * open, so the steady state allocates nothing. A read or preprocessing error is returned by
 * the rec_loader_next that would have delivered the failing batch. */
typedef struct rec_loader rec_loader;

rec_status rec_loader_open(rec_loader **out, rec_dataset *d, int64_t row0, int64_t row1,
                           int64_t batch, int depth);

/* Shuffled order (training rows only; evaluation reads in file order). An epoch's order is a
 * pure function of (seed, epoch, row0, row1, block_rows K, buffer_blocks W) — never of the
 * thread count, the ring depth or the timing — and never needs more than W blocks in memory:
 *
 *   blocks   rows [row0, row1) cut into blocks of K rows (the last one shorter), block i =
 *            [row0 + i*K, ...). A shard takes them in a random order: a Fisher-Yates
 *            permutation drawn from rec_rng(seed, stream = epoch << 32 | 0xffffffff). A TSV
 *            (streamed, no random access) takes them in file order.
 *   buffer   the block sequence is cut into windows of W consecutive blocks; window w is read
 *            whole (at most W*K rows) and its rows leave interleaved at random: its positions
 *            are dealt to its blocks by a Fisher-Yates permutation of the block labels (block
 *            i's label once per row it has) drawn from rec_rng(seed, stream = epoch << 32 | w),
 *            and each block gives its rows, in file order, to the positions dealt to it. A
 *            batch thus takes rows from every block of its window, W random places of the range.
 *            (A full permutation of the window's rows gathers each row from F columns at
 *            random, a cache miss per feature: 4.5x slower, and 25% off training's samples/s.)
 *   batches  the rows of window 0, then window 1, ... are cut into batches of `batch` rows
 *            (batches straddle windows; only the epoch's last batch is short).
 *
 * `skip` drops the first `skip` rows of that order (a resumed run's position within the epoch):
 * windows wholly before it are not read, and the loader yields exactly the batches the
 * unskipped one would after them when skip is a multiple of batch. Sizes: the trainer uses
 * REC_SHUFFLE_BLOCK_ROWS and REC_SHUFFLE_BUFFER_BLOCKS (a 64 Ki-row buffer, about 25 MB of
 * Criteo rows) and records them in its checkpoints. */
typedef struct rec_shuffle {
    uint64_t seed;           /* the config's train.seed */
    int64_t epoch;           /* 0-based: every epoch has its own order */
    int64_t block_rows;      /* K >= 1 */
    int64_t buffer_blocks;   /* W >= 1; W*K <= 2^31 */
} rec_shuffle;

#define REC_SHUFFLE_BLOCK_ROWS 4096
#define REC_SHUFFLE_BUFFER_BLOCKS 16

/* rec_loader_open in the shuffled order of `sh` (NULL: file order, as rec_loader_open), after
 * dropping its first `skip` rows (0 <= skip <= row1 - row0). Buffers for W blocks are
 * allocated here too. REC_EINVAL for sizes out of range. */
rec_status rec_loader_open_order(rec_loader **out, rec_dataset *d, int64_t row0, int64_t row1,
                                 int64_t batch, int depth, const rec_shuffle *sh, int64_t skip);
/* The next batch, or *b = NULL at the end. The batch stays valid until the next call. */
rec_status rec_loader_next(rec_loader *l, const rec_batch **b);

/* ---- staged batches: a GPU gathers them (rec_loader_open_staged) ---------------------------
 * A shuffled loader can hand each window it reads to a stager instead of gathering
 * its batches on the host: `stage` gets the window's blocks (its rows: block 0's, then block
 * 1's, ...; one[f]: every block holds one id a row in feature f; row0[i]: the data set row of
 * block i's first row) on the loader's thread, for staging slot `slot` (windows take slots
 * 0, 1, ..., n_slots - 1, 0, ... in turn). Batches then hold the same rows in the same order
 * as a gathering loader's, each as its staged position: slot * slot_rows + the row's place in
 * its window. A slot is staged again only after every batch with rows in it has been released
 * (the next rec_loader_next_staged call releases the batch of the one before); work the
 * consumer left running on a slot's rows (a GPU's gather) is the stager's to wait for. */
typedef struct rec_stager {
    rec_status (*stage)(void *ctx, int slot, const rec_batch *blocks, int nb, const uint8_t *one, const int64_t *row0);
    void *ctx;
    int n_slots;         /* >= rec_loader_stage_slots */
    int64_t slot_rows;   /* >= K x W; n_slots x slot_rows < 2^32 */
} rec_stager;

typedef struct rec_staged_batch {
    int64_t n;           /* rows */
    const uint32_t *pos; /* (n) staged positions */
} rec_staged_batch;

/* Slots a stager needs for batches of `batch` rows in windows of sh's K x W rows: a batch's
 * windows, one more for the part-full batch's next and one being staged. */
int rec_loader_stage_slots(int64_t batch, const rec_shuffle *sh);
/* rec_loader_open_order with the stager `st` (copied); REC_EINVAL for file order or too few or
 * too small slots. */
rec_status rec_loader_open_staged(rec_loader **out, rec_dataset *d, int64_t row0, int64_t row1, int64_t batch, int depth,
                                  const rec_shuffle *sh, int64_t skip, const rec_stager *st);
/* rec_loader_next for a staged loader: the next batch's positions, or *b = NULL at the end. */
rec_status rec_loader_next_staged(rec_loader *l, const rec_staged_batch **b);
/* Stops the thread and frees everything (also mid-stream). */
void rec_loader_close(rec_loader *l);
/* The rec_batch_digest of rows [0, min(row1, REC_CKPT_DIGEST_ROWS)) of d: what a checkpoint
 * keeps to recognise the data it was trained on (train --resume, eval). */
rec_status rec_dataset_digest(rec_dataset *d, int64_t row1, uint64_t *digest);
/* Offloading (offload.h): from now on the loaders of TSV data set d take their rows from
 * pieces made here and by the workers, split as rec_offload_set says (all here until then).
 * *out belongs to d. A shard is refused (it needs no preprocessing). */
rec_status rec_dataset_offload(rec_dataset *d, const rec_offload_opts *o, int64_t batch, rec_offload **out);
/* Seconds the consumer spent waiting in rec_loader_next (input-bound time). */
double rec_loader_wait_seconds(const rec_loader *l);

/* ---- .npy export --------------------------------------------------------------------------
 * Writes one float32 array in NumPy's .npy format (version 1.0, little-endian '<f4', C order),
 * which numpy.load and torch.from_numpy(numpy.load(...)) read: from data, or (data NULL) from
 * the bf16 values data16, widened exactly. */
rec_status rec_npy_write(const char *path, const float *data, const uint16_t *data16, int ndim, const int64_t *shape);

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
    /* What the run trained on, so that --resume refuses other data: the rows of its training
     * range and the rec_batch_digest of their first (up to REC_CKPT_DIGEST_ROWS) rows. Both 0
     * in a version-1 checkpoint, which did not record them. */
    int64_t train_rows;
    uint64_t data_digest;
    /* The order of the training rows (rec_shuffle): its K and W, both 0 for file order (and in
     * checkpoints of versions 1 and 2, which were all trained in file order). A resume in
     * another order would continue another sequence of rows, and is refused. */
    int64_t shuffle_block_rows;
    int64_t shuffle_buffer_blocks;
    /* A sharded save (under mpirun, dist.h; all 0 in a whole model's checkpoint and in those
     * of versions 1 to 3): the ranks that saved it, the save's id (which names its files), and
     * which file this is: 0 the main one (dense part), r + 1 rank r's shard of the tables. */
    int64_t shards;
    uint64_t shard_id;
    int64_t shard;
    /* The run's losses so far, so that a resumed run reports what the uninterrupted one does:
     * the sum of the losses of epoch `epoch`'s steps before `row` and their count (its mean is
     * the epoch's loss), and of the steps since the last training record of --metrics (the
     * next record's mean takes them in). A count of -1 (sum 0): not recorded, as in
     * checkpoints of versions 1 to 4. */
    double epoch_loss_sum;
    int64_t epoch_loss_steps;
    double record_loss_sum;
    int64_t record_loss_steps;
} rec_ckpt_meta;

/* Rows whose rec_batch_digest identifies a checkpoint's training data. */
#define REC_CKPT_DIGEST_ROWS 4096

/* The files a --ckpt directory's saves write, for the output guard (core.h): model.rckpt, and
 * under mpirun the sharded saves' model.ID.R-of-N.rckpt and model.ID.plan.json. NULL-ended. */
extern const char *const rec_ckpt_files[];
/* The first 8 bytes of a checkpoint file (docs/formats.md). */
#define REC_CKPT_MAGIC "RCKPT001"
/* The checkpoint file inside a --ckpt directory: DIR/model.rckpt. Writes into buf (cap). */
void rec_ckpt_path(const char *dir, char *buf, size_t cap);
rec_status rec_ckpt_save(const char *path, const rec_model *m, const rec_ckpt_meta *meta);
/* A checkpoint a run would save in `dir` (DIR/model.rckpt) exists: refused (REC_EINVAL) naming it, its model
 * and step, and `how` to go on ("add --overwrite to replace it"), as saving would silently
 * replace the work it holds. REC_OK where there is none. */
rec_status rec_ckpt_check_absent(const char *dir, const char *how);
/* Saves the given tensors (not a model's: a rank's shard of the tables) in the same format,
 * crash-safe alike, with config c and meta as they are. */
rec_status rec_ckpt_save_tensors(const char *path, const rec_model_config *c, const rec_ckpt_meta *meta,
                                 const rec_tensor *ts, int n);
/* Reads the config stored in a checkpoint (to build the model before loading) and, when meta
 * is not NULL, its meta. c is overwritten; free with rec_model_config_free. */
rec_status rec_ckpt_read_config(const char *path, rec_model_config *c, rec_ckpt_meta *meta);
/* Loads a checkpoint into a model built from that config; checks everything first, so on
 * error the model is unchanged. A sharded model (rec_model_init_sharded) takes the dense part
 * of a whole model's checkpoint and of a sharded save's main file; its tables are loaded by
 * the executor (rec_exec_load). A model with tables refuses a sharded save, naming it. */
rec_status rec_ckpt_load(const char *path, rec_model *m, rec_ckpt_meta *meta);
/* As rec_ckpt_load, but a sharded save's main file also loads into a model with tables,
 * leaving its tables as they are: rec_dist_ckpt_load (dist.h) fills them from the rank files. */
rec_status rec_ckpt_load_except_tables(const char *path, rec_model *m, rec_ckpt_meta *meta);

/* A checkpoint opened for reading tensors one by one (a sharded save's files, re-sharded). */
typedef struct rec_ckpt_reader rec_ckpt_reader;
/* Opens and maps path and checks its structure and header CRC (as rec_ckpt_load does). */
rec_status rec_ckpt_reader_open(rec_ckpt_reader **out, const char *path);
const rec_ckpt_meta *rec_ckpt_reader_meta(const rec_ckpt_reader *r);
/* The stored config, parsed into c (free with rec_model_config_free). */
rec_status rec_ckpt_reader_config(const rec_ckpt_reader *r, rec_model_config *c);
/* Tensor `name`'s numel floats, mapped read-only, its CRC-32 checked: REC_EINVAL when the
 * file has no such tensor or another size, REC_EFORMAT when it is corrupt, naming both. */
rec_status rec_ckpt_reader_tensor(rec_ckpt_reader *r, const char *name, int64_t numel, const float **data);
void rec_ckpt_reader_close(rec_ckpt_reader *r);
/* What a checkpoint holds, read without building its model (rectrain inspect). */
typedef struct rec_ckpt_tensor_info {
    char name[96];
    rec_tensor_role role;
    int ndim;                  /* 1 or 2 */
    int64_t shape[2];          /* shape[1] = 0 when ndim = 1 */
    uint64_t bytes;            /* 4 per float */
} rec_ckpt_tensor_info;

typedef struct rec_ckpt_info {
    uint32_t version;          /* format version of the file */
    uint64_t file_bytes;
    rec_ckpt_meta meta;
    rec_model_config config;   /* the stored config, tables bound */
    int n_tensors;
    rec_ckpt_tensor_info *tensors; /* (n_tensors), in file order */
} rec_ckpt_info;

/* Reads a checkpoint's header: the structure and header CRC are checked as rec_ckpt_load
 * checks them; with `verify`, every tensor's CRC-32 as well. Free with rec_ckpt_info_free
 * (also safe after a failure). */
rec_status rec_ckpt_inspect(const char *path, int verify, rec_ckpt_info *info);
void rec_ckpt_info_free(rec_ckpt_info *info);

/* Writes every parameter as DIR/NAME.npy plus DIR/config.json, and first the list of those
 * files as DIR/rectrain_export.json, whole or not at all: into DIR.tmp beside DIR (parents
 * made as needed), renamed to DIR once every file is written; on any failure DIR.tmp is
 * removed and DIR is left as it was. A DIR that holds files is refused (REC_EINVAL, saying to
 * add --overwrite) unless `overwrite`, and then replaced only when it holds nothing but the
 * files its own rectrain_export.json lists (a folder without that list is no export's and is
 * refused, naming a file in it, whatever the names). A DIR.tmp left by a killed export (its
 * list and listed files) is cleared; anything else there is refused. REC_EIO names the path
 * that could not be made, written or renamed. */
rec_status rec_export_npy(const rec_model *m, const char *dir, int overwrite);
/* Every check of rec_export_npy(dir, overwrite) that needs no model, writing nothing (DIR's
 * parents aside, which it makes): what a job calls before its work, so that an export that
 * cannot happen fails in the first second, not after the training it would keep. */
rec_status rec_export_check(const char *dir, int overwrite);

/* Where an ONNX export puts the parameters' values: in the model file while it stays under
 * protobuf's 2 GiB limit on one message and in PATH.data beside it (ONNX external data) for a
 * larger model (AUTO), or in PATH.data at any size (EXTERNAL). */
typedef enum { REC_ONNX_DATA_AUTO = 0, REC_ONNX_DATA_EXTERNAL = 1 } rec_onnx_data;
#define REC_ONNX_DATA_SUFFIX ".data" /* the side file: PATH followed by it */

/* Writes the model as an ONNX file (opset 17, fp32 initializers) that scores rows as
 * rec_predict does: inputs dense (batch, Dn) float32 and, per sparse feature f, ids_{f} (nnz)
 * and offsets_{f} (batch + 1) int64; outputs logit and probability (batch) float32 (graph in
 * src/train/onnx.c, for users in docs/commands.md). The parameters' values are in PATH or in
 * PATH.data as `data` says (the layout of onnx.save(..., save_as_external_data=True)). Each
 * file appears whole or not at all (rec_atomic_file), PATH.data first. REC_EUNSUPPORTED for
 * what rec_export_onnx_check refuses, REC_EIO naming the file that could not be written. */
rec_status rec_export_onnx(const rec_model *m, const char *path, rec_onnx_data data);
/* Whether rec_export_onnx(m, path, data) writes PATH.data (0 also for a model it refuses):
 * what a caller checks for an existing file before the export. */
int rec_export_onnx_external(const rec_model *m, const char *path, rec_onnx_data data);
/* The refusals of rec_export_onnx that need no file: a model whose products are bf16 (the
 * graph is fp32 and would not score as predict does) and a kind the graph cannot express. */
rec_status rec_export_onnx_check(const rec_model *m);
/* Writes the rows of d, in input order and in batches of `batch`, as the ONNX graph's inputs
 * (dense, and per feature ids and offsets) to one binary file (layout in src/train/feed.c),
 * whole or not at all: what `predict --feed-out` writes so that an ONNX server or a test
 * scores exactly the rows predict scores. REC_EIO names the file that could not be written. */
rec_status rec_feed_write(rec_dataset *d, int64_t batch, const char *path);

/* ---- the trainer ----------------------------------------------------------------------------
 * rec_train runs a whole job: open the data (or generate the embedded default), build or
 * resume the model, train epoch by epoch through a loader (reading and preprocessing overlap
 * the steps), evaluate periodically and at the end, checkpoint, export. Progress goes to
 * stderr on a terminal; each evaluation and epoch prints one line to `log` (NULL = quiet). */
enum { REC_DEVICE_CPU = 0, REC_DEVICE_CUDA = 1 };

typedef struct rec_train_opts {
    const char *config_path;   /* NULL: the small default DLRM (rec_model_config_default) */
    const char *data_path;     /* .rshard or .tsv/.gz; NULL: generate the embedded default */
    const char *eval_path;     /* separate evaluation set, or NULL */
    /* Several files read in order as one data set (rec_dataset_opts.paths): n_data > 0 lists
     * them all, data_path being the first; the same for the evaluation set. */
    const char *const *data_paths;
    int n_data;
    const char *const *eval_paths;
    int n_eval;
    double holdout;            /* without eval_path: the last `holdout` share of the rows (0 = none) */
    const char *spec_path;     /* TSV data: prep spec (default: the config's train.prep_spec; a TSV
                                  with neither is refused, naming both ways) */
    const char *vocab_from;    /* TSV data with categorify specs */
    rec_tsv_opts tsv;          /* TSV data: format and bad-row policy */
    const char *oracle_path;   /* true click probabilities (`gen --prob-out`), one line per row of
                                  the evaluated file: eval_path's rows, or with holdout the data's;
                                  another line count is refused before training */
    int epochs;                /* 0: the config's */
    int64_t batch;             /* 0: the config's */
    int threads;               /* 0: all CPUs */
    int device;                /* REC_DEVICE_CPU, or REC_DEVICE_CUDA: train a DLRM on the GPU (cuda.h;
                                  one process, the CPU model kept for checkpoints and export) */
    int prep_device;           /* TSV, .rraw data: where the spec's ops run (rec_dataset_opts) */
    const char *corun_capacity; /* --device cuda, prep_device cuda: the co-run's measured capacities
                                  (prep.h rec_cap_save): read if the file exists, else measured
                                  and written there */
    int device_profile;        /* time each part of the step (report.device_ms): GPU events with
                                  REC_DEVICE_CUDA, the wall clock (rec_model_profile) on the CPU */
    const char *precision;     /* NULL: the config's train.precision; "fp32" or "bf16": the dense
                                  products in bf16 with fp32 master weights (nn.h "precision") */
    int64_t eval_every;        /* -1: the config's; 0: at the end only */
    int64_t max_steps;         /* end the run at this step (0 = no limit): the run's total, so a
                                  resumed run ends where the uninterrupted one does */
    int shuffle;               /* order of the training rows: 1 shuffled (rec_shuffle, seeded by the
                                  config's train.seed, REC_SHUFFLE_* sizes), 0 file order, -1 the
                                  resumed checkpoint's order, or shuffled when not resuming. A
                                  resume in an order other than the checkpoint's is refused */
    const char *ckpt_dir;      /* save DIR/model.rckpt at every epoch end and every ckpt_every steps */
    int64_t ckpt_every;
    int resume;                /* continue from DIR/model.rckpt (which then must exist) */
    int overwrite;             /* start over where DIR/model.rckpt exists (without it, and without
                                  `resume`, an existing checkpoint is refused before any work), and
                                  replace an earlier export in npy_dir; not with `resume` */
    const char *npy_dir;       /* export the final parameters as .npy files (rec_export_npy) */
    const char *loss_log;      /* write "step loss" per step to this file; with `resume`, its lines
                                  after the resumed step are dropped first (a line that is not
                                  "STEP LOSS" is refused with its number) */
    const char *metrics_path;  /* JSON lines (rec_scalars): the training loss, learning rate and
                                  samples/s every log_every steps, every evaluation, and the final
                                  evaluation's calibration curve */
    const char *tensorboard_dir; /* the same scalars as a TensorBoard event file in DIR */
    const char *plot_dir;      /* at the end, PNG charts of them in DIR (plot.h), with the metrics
                                  in DIR/metrics.jsonl when metrics_path is NULL */
    int64_t log_every;         /* steps between training records (0: rec_log_every's default) */
    int64_t gen_rows;          /* embedded default: rows to generate (0 = 1M) */
    int tune;                  /* tune the embedding plan on the first steps (embed.h, tuner) */
    const char *plan_path;     /* embedding plan: load it if it exists and fits the tables (with
                                  `tune`: and the data's signature), else tune and write it here */
    /* When not NULL: a signal number that a handler stores to stop the run. It is read before
     * every step; once set, the run ends there as --steps would end it (a checkpoint keeps its
     * state when ckpt_dir is given), skips the final evaluation and export, and reports the
     * signal in rec_train_report.stopped_by. */
    const volatile sig_atomic_t *stop;
    /* Under mpirun (dist.h): the sharding plan to load (plan.h), or NULL to build one of
     * `shard_kind` (rec_plan_kind; -1: OPER, or with `resume` the plan of a save by as many
     * ranks) at the start from the training data's first global batches and bandwidths
     * measured on the running job; `alltoall` 1: fetch rows with the all-to-all-v baseline
     * instead of one-sided gets. */
    const char *plan_shards;
    int shard_kind;
    int alltoall;
    /* Preprocessing of TSV training data offloaded to workers (offload.h; `rectrain
     * prep-worker`): their endpoints; offload_ratio -1 auto (FastFlow's Algorithm 1 on profiled
     * metrics, or on those of offload_store), 0 off, else that share of the pieces, at
     * offload_point (REC_OFFLOAD_P*; 0: p'3, or the policy's with auto). */
    const char *const *workers;
    int n_workers;
    const char *workers_file;    /* endpoints listed in a file, read again every second */
    double offload_ratio;
    int offload_point;
    const char *offload_store;   /* NULL: rec_offload_store_default */
    double worker_timeout;       /* seconds; 0: 5 */
    FILE *log;
    rec_net_secure sec;          /* CURVE keys for the workers (net.h) */
} rec_train_opts;

/* --device cuda --prep-device cuda: RAP's co-run of the loader's preprocessing kernels. */
typedef struct rec_rap_result {
    int planned;                 /* a plan was made (the capacity search and the kernels' timing done) */
    int64_t probe_steps, steps;  /* the capacity search's steps; steps that followed the plan */
    double predicted_ms;         /* the plan's exposed latency a step */
    double exposed_ms;           /* measured: sum over stages of max(0, mean following the plan - without a probe) */
    double step_ms, base_ms;     /* the stages' sum: following the plan, and in the search's steps without a probe */
    int n_stages;
    double capacity_ms[8];       /* each stage's overlapping capacity, measured */
} rec_rap_result;

typedef struct rec_train_report {
    int64_t steps;             /* steps taken in this run */
    int64_t rows;              /* training rows processed in this run */
    double train_seconds;      /* wall time of the training loop, evaluations and checkpoints excluded */
    double ckpt_seconds;       /* wall time of the checkpoint saves */
    int ckpts;                 /* checkpoints saved */
    int stopped_by;            /* the signal that stopped the run (opts.stop), or 0 */
    int complete;              /* `resume` of a run that had ended (its epochs, or max_steps):
                                  nothing was trained or written (the log says so) */
    int64_t complete_step;     /* ... and the step its checkpoint holds */
    int64_t bad_rows;          /* TSV rows --bad-rows skip dropped from the training and evaluation
                                  data (logged with their first locations when counted) */
    double samples_per_s;
    double wait_seconds;       /* time the loop waited for input */
    double last_loss;          /* mean loss of the last 100 steps (the progress line's) */
    /* The mean loss of the last epoch trained: all its steps, those before a resume included
     * (NAN when it took none); with epoch_loss_partial, resumed from a checkpoint that does not
     * hold the epoch's earlier losses (version 4 or older), the mean of the steps since. */
    double epoch_loss;
    int epoch_loss_partial;
    int has_eval;
    rec_metrics eval;          /* final evaluation */
    int has_oracle;
    double oracle_auc;         /* AUC of the true probabilities on the evaluation rows */
    double gflops;             /* dense-layer GFLOP/s achieved */
    int threads;
    int64_t batch;
    char model[REC_MODEL_NAME_MAX];
    /* under mpirun: the job's ranks, this rank, the plan's kind and its predicted bytes sent
     * per step by this rank, and the executor's measured time split and bytes */
    int ranks, rank;
    char shard_plan[16];
    double plan_sent_bytes;
    double bw_p2p, bw_ar;        /* bytes/s the job measured between its ranks (plan.h's rec_plan_hw) */
    rec_exec_stats dist;
    /* with workers: the split trained with, the policy's decision and inputs (auto), and the
     * client's counters */
    int has_offload, offload_auto, offload_reused;
    int offload_redecisions;     /* decisions taken again after a drift (REC_OFFLOAD_DRIFT) */
    int offload_point;
    double offload_ratio;
    rec_offload_metrics offload_metrics;
    rec_offload_decision offload_decision;
    rec_offload_stats offload;
    /* An order-independent checksum of the rows trained in this run (the sum of a hash of each
     * row's label, dense values and ids): equal for equal multisets of rows. */
    uint64_t rows_checksum;
    /* With device_profile: milliseconds per step of each part (rec_cuda_part_name with
     * --device cuda, rec_model_part_name on the CPU), over device_steps steps */
    double device_ms[16];
    int64_t device_steps;
    double host_ms[4]; /* --device cuda with device_profile: the host's ms per step call by part
                          (rec_cuda_model_host_read: staging, enqueueing, waiting for the GPU) */
    int has_corun;
    rec_rap_result corun;
} rec_train_report;

/* Steps between training records: `asked` where > 0, else 100, or fewer for a run of `steps`
 * steps so that it still records about 100 points (a chart of a short run shows a curve). */
static inline int64_t rec_log_every(int64_t asked, int64_t steps) {
    if (asked > 0) return asked;
    const int64_t k = steps / 100;
    return k < 1 ? 1 : k > 100 ? 100 : k;
}
rec_status rec_train(const rec_train_opts *o, rec_train_report *rep);

/* The embedded default data: generates `rows` synthetic Criteo rows (rectrain gen, seed 1, the
 * given table scale) and their true probabilities into DIR/train.prob, writes the
 * facebookresearch/dlrm preprocessing spec for those table sizes to DIR/spec.json and preps
 * DIR/train.rshard (the TSV is removed). rec_synth_dataset_remove deletes all of it and DIR. */
rec_status rec_synth_dataset(const char *dir, int64_t rows, double scale, int threads, FILE *log);
void rec_synth_dataset_remove(const char *dir);

/* Metrics of the model on rows [row0, row1) of d, in batches of `batch` (<= the model's
 * max_batch). */
rec_status rec_evaluate(rec_model *m, rec_dataset *d, int64_t row0, int64_t row1, int64_t batch,
                        rec_metrics *out);

/* Opens the --loss-log of a run ("STEP LOSS" lines, line-buffered) into *out. Without `resume`
 * it is started afresh. With `resume` it continues the log of the run resumed at step
 * `resumed`: its lines up to that step are kept and the later ones dropped (steps a killed run
 * took after its last checkpoint, which the resumed run takes again), so that a run split by
 * stops and resumes leaves the log one uninterrupted run writes; a missing or empty file is
 * started. A file whose lines are not "STEP LOSS", or whose steps do not follow one another
 * up to `resumed` (another run's log: it starts after that step, jumps, or ends before it),
 * is refused with its line number and left as it was. */
rec_status rec_loss_log_open(const char *path, int resume, int64_t resumed, FILE **out);

/* ---- what a run reports as it goes ---------------------------------------------------------
 * Named scalars per step, written as they come to JSON lines (--metrics FILE: {"step": 100,
 * "group": "train", "loss": 0.45, ...}, a non-finite value as null) and to a TensorBoard event
 * file (--tensorboard DIR: DIR/events.out.tfevents.TIME.HOST, a scalar "GROUP/NAME" each, as
 * TensorFlow's summary writer frames them). Either may be absent. */
typedef struct rec_scalars rec_scalars;

/* Opens the JSON lines file (started afresh; with `keep`, an existing one is kept as it is
 * until rec_scalars_resume cuts it) and a new event file in tb_dir. */
rec_status rec_scalars_open(rec_scalars **out, const char *jsonl_path, const char *tb_dir, int keep);
/* A resumed run (--resume) continues the interrupted run's records: the JSON lines up to step
 * `resumed` (the checkpoint's) are kept and the later ones dropped, as --loss-log does, and so
 * are the records the interrupted run wrote at its end, which this run writes again at its
 * own: the final evaluation and its calibration curve at `resumed`, and with `end_train` (the
 * checkpoint carries steps since the last training record) the training record there. A line
 * that is not a metrics record, or whose step goes down, is refused with its number and the
 * file left as it was; a last line cut short by a kill is dropped. The event file gets a
 * SessionLog START at step resumed + 1, on which TensorBoard drops the interrupted run's
 * events of the steps this run takes again. */
rec_status rec_scalars_resume(rec_scalars *s, int64_t resumed, int end_train);
/* One record of step `step`: n scalars under `group` ("train", "eval"). */
rec_status rec_scalars_write(rec_scalars *s, int64_t step, const char *group, int n, const char *const *names,
                             const double *values);
/* A calibration curve (JSON lines only): {"step": S, "group": "calibration", "buckets":
 * [[mean predicted, observed CTR, rows], ...]}. */
rec_status rec_scalars_write_calibration(rec_scalars *s, int64_t step, const rec_metrics *m);
/* The event file's path ("" without one). */
const char *rec_scalars_tb_path(const rec_scalars *s);
/* Flushes and closes; REC_EIO naming the file when a write failed. NULL is a no-op. */
rec_status rec_scalars_close(rec_scalars *s);

/* rec_predict: every row's click probability P = rec_sigmoid(logit), rounded to float. */
typedef struct rec_predict_report {
    int64_t rows;            /* rows scored */
    int64_t skipped;         /* input lines --bad-rows skip dropped, written as REC_PREDICT_SKIPPED */
    int labelled;            /* the data has labels: `m` holds their metrics (as rec_evaluate's) */
    double mean_p;           /* NaN over no rows */
    rec_metrics m;           /* over no rows: NaN figures, n = 0 */
} rec_predict_report;

/* The line of an input line SKIP mode dropped ("nan", or "nan<TAB>nan" for labelled data): any
 * TSV or numeric reader takes it as a missing value, where an empty line would be skipped and
 * shift every later prediction onto the wrong row. */
#define REC_PREDICT_SKIPPED "nan"

/* Scores every row of d in order, in batches of `batch` (<= the model's max_batch), writing
 * exactly one line per input line to out: "P" or, for labelled data, "P<TAB>LABEL" (P printed
 * with %.9g, which reads back as the same float); a line the TSV reader dropped in SKIP mode
 * gets REC_PREDICT_SKIPPED in each column, in its place, so line k of out is always about
 * line k of the input (d must then be opened with map_skips: REC_EINVAL otherwise). Streams:
 * memory does not grow with the rows (but for the metrics of labelled data, 8 bytes a row).
 * `stop` (or NULL): a signal number a handler stores; it is read before every batch and ends
 * the work with REC_ESTOPPED, `out` then holding the lines written so far. A write to out
 * that fails (a full disk) ends the work with REC_EIO naming `out_name`. */
rec_status rec_predict(rec_model *m, rec_dataset *d, int64_t batch, FILE *out, const char *out_name,
                       const volatile sig_atomic_t *stop, rec_predict_report *rep);

#ifdef __cplusplus
}
#endif
#endif
