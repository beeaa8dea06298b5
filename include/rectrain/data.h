/* rectrain — data sets (.rshard, .rraw, TSV through a spec) and the loading pipeline
 * that turns them into batches, in file or shuffled order, or staged for a GPU. */
#ifndef RECTRAIN_DATA_H
#define RECTRAIN_DATA_H

#include <stdint.h>

#include "rectrain/batch.h"
#include "rectrain/io.h"
#include "rectrain/offload.h"
#include "rectrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif
#endif
