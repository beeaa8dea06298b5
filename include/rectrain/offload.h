/* rectrain — preprocessing offloaded to remote CPU workers (FastFlow, ../shared/papers/
 * 004-FastFlow-digest.md): the worker service behind `rectrain prep-worker`, the trainer's
 * client with its counter-based splitter, and the offloading policy (Algorithm 1).
 *
 * The unit of work is a *piece*: a run of whole lines of one TSV file. A data set's pieces
 * are fixed by a scan of its files (rec_pieces_build), so the trainer and every worker agree
 * on what piece j is, and the rows of an epoch are the rows of pieces 0, 1, ... in order,
 * whoever preprocessed each. Training is thus the same with offloading on or off, bit for bit:
 * a row's preprocessing is a pure function of its line, and the order of rows never changes.
 *
 * Offload points (FastFlow §4.2, Figure 5), for rectrain's pipeline read -> prep -> batch:
 *   p'1  the trainer reads the lines and sends them; workers preprocess (for workers that
 *        cannot reach the files, or read them slowly)
 *   p'2  workers read and preprocess fine-grained pieces ("elements": REC_OFFLOAD_ELEMENT_LINES
 *        lines); the trainer batches
 *   p'3  workers read, preprocess and batch: pieces of one batch's lines
 */
#ifndef RECTRAIN_OFFLOAD_H
#define RECTRAIN_OFFLOAD_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "rectrain/batch.h"
#include "rectrain/io.h"
#include "rectrain/net.h"
#include "rectrain/prep.h"
#include "rectrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- pieces ----------------------------------------------------------------------------------
 * The scan records where every REC_PIECE_GRID-th line of each file starts (one memchr pass,
 * no parsing); a piece is `cells` consecutive grid cells of one file (fewer at a file's end).
 * Gzip files cannot be read from an offset and are refused (gunzip them, or prep them). */
#define REC_PIECE_GRID 128
#define REC_OFFLOAD_ELEMENT_LINES REC_PIECE_GRID

typedef struct rec_piece {
    int32_t part;            /* file index */
    uint64_t offset, len;    /* its bytes */
    int64_t first_line;      /* 1-based line of its first line in the file */
    int64_t n_lines;
    int64_t line0;           /* lines of the data set before it (its first row in FAIL mode) */
} rec_piece;

typedef struct rec_grid rec_grid;

/* Scans the files (in order, one data set). Lines longer than tsv->max_line fail in FAIL mode,
 * as the reader fails them; in SKIP mode they stay in their piece, where the parser drops
 * them as malformed. */
rec_status rec_grid_build(rec_grid **out, const char *const *parts, int n_parts, const rec_tsv_opts *tsv);
void rec_grid_free(rec_grid *g);
int64_t rec_grid_lines(const rec_grid *g);
uint64_t rec_grid_bytes(const rec_grid *g, int part);
/* The pieces of `lines` lines each (rounded to grid cells, at least one). */
int64_t rec_grid_pieces(const rec_grid *g, int64_t lines);
void rec_grid_piece(const rec_grid *g, int64_t lines, int64_t j, rec_piece *p);

/* ---- the worker (`rectrain prep-worker`) ---------------------------------------------------- */

typedef struct rec_prep_worker_opts {
    const char *listen;      /* a ZeroMQ endpoint, e.g. tcp://127.0.0.1:5555 */
    int threads;             /* of the prep engine (>= 1) */
    const volatile sig_atomic_t *stop; /* set by a signal handler: the worker returns */
    FILE *log;               /* one line per job, refused frame or peer and error; NULL quiet */
    rec_net_secure sec;      /* CURVE keys and allow-list (net.h); none: plain text on loopback */
    int keep_mb;             /* MiB of answers kept for a job's other trainers (the ranks of an
                                mpirun ask for the same pieces): each made once; 0 keeps none */
} rec_prep_worker_opts;

/* Serves until *stop is set. Fails only when it cannot bind (REC_EIO, naming the endpoint), or
 * on options out of range (REC_EINVAL). */
rec_status rec_prep_worker_run(const rec_prep_worker_opts *o);

/* ---- the client (the trainer's side) --------------------------------------------------------- */

enum { REC_OFFLOAD_P1 = 1, REC_OFFLOAD_P2 = 2, REC_OFFLOAD_P3 = 3 }; /* offload points */
const char *rec_offload_point_name(int point); /* "p'1", ... */

typedef struct rec_offload_opts {
    const char *const *workers; /* endpoints of the workers (tcp://HOST:PORT) */
    int n_workers;
    /* Or (and) a file of endpoints, one per line ('#' comments), read again every second:
     * workers listed later join the job, workers no longer listed leave it. */
    const char *workers_file;
    double timeout_s;        /* a piece unanswered this long marks its worker down (0: 5 s) */
    int depth;               /* batches' worth of pieces in flight per worker (0: 4) */
    FILE *log;               /* workers going down and up; NULL quiet */
    rec_net_secure sec;      /* the trainer's keys as the workers' client (net.h) */
} rec_offload_opts;

/* What a job's pieces need (the data set's): its files, resolved TSV options, the spec's path,
 * the vocabularies' shard (or NULL), the compiled plan, the local engine's threads and batch. */
typedef struct rec_offload_data {
    const char *const *parts;
    int n_parts;
    const char *path;          /* the data set in messages */
    rec_tsv_opts tsv;          /* has_label resolved */
    const char *spec_path;
    const char *vocab_from;
    const rec_vocab_set *vocabs;
    const rec_prep_plan *plan;
    int32_t n_dense, n_sparse;
    const int64_t *table_rows;
    int prep_threads;
    int64_t batch;             /* p'1 and p'3 pieces hold a batch's lines */
} rec_offload_data;

typedef struct rec_offload rec_offload;

/* Scans the data (rec_grid_build), encodes the job and connects to the workers (without
 * waiting for them: a worker that is not up yet is asked again later). */
rec_status rec_offload_open(rec_offload **out, const rec_offload_opts *o, const rec_offload_data *d);
void rec_offload_close(rec_offload *x);
/* Lines of the data set (rows in FAIL mode). */
int64_t rec_offload_lines(const rec_offload *x);
/* The split from now on: `ratio` of the pieces (0..1) go to the workers at `point`. */
void rec_offload_set(rec_offload *x, int point, double ratio);
int rec_offload_point(const rec_offload *x);
double rec_offload_ratio(const rec_offload *x);
int rec_offload_workers(const rec_offload *x);
/* Waits up to `seconds` for every worker to answer a ping; returns how many did. */
int rec_offload_wait_workers(rec_offload *x, double seconds);

/* Counters since open. */
typedef struct rec_offload_stats {
    int64_t pieces_local, pieces_remote;  /* pieces made here, and by workers */
    int64_t redone;          /* remote pieces made here after their worker went down */
    int64_t late;            /* answers dropped: a piece already made elsewhere, or a stale stream */
    int64_t refused;         /* frames from workers that failed validation */
    int64_t worker_downs;    /* times a worker was marked down */
    uint64_t bytes_in, bytes_out;
} rec_offload_stats;
void rec_offload_get_stats(const rec_offload *x, rec_offload_stats *s);

/* A stream: the rows of pieces from the one holding line `line` on, in order, as runs of
 * preprocessed rows. One at a time per rec_offload (a loader's producer thread owns it). */
typedef struct rec_offload_stream rec_offload_stream;
/* *first_line: the data set line (= row in FAIL mode) where the stream starts (the piece's).
 * The stream ends with the piece holding line end_line - 1 (end_line < 0: the data's end). */
rec_status rec_offload_stream_open(rec_offload_stream **out, rec_offload *x, int64_t line, int64_t end_line,
                                   int64_t *first_line);
/* The next piece's rows as batches parts[0..n) (rows in order); n = 0 at the end. Valid until
 * the next call. */
rec_status rec_offload_stream_next(rec_offload_stream *s, const rec_batch *const **parts, int *n);
void rec_offload_stream_close(rec_offload_stream *s);

/* ---- the policy (FastFlow Algorithm 1) ------------------------------------------------------- */

/* Profiled metrics (Table 1), in rows per second, and CPU seconds per row for the cycles. */
typedef struct rec_offload_metrics {
    double gthp;             /* training alone (a cached batch): thp(M) */
    double lthp;             /* local pipeline + training: thp(P+M) */
    double pcycle;           /* local CPU seconds per row of the local pipeline alone */
    int have_remote;
    double rthp[4];          /* [point]: everything remote at that point + training */
    double ocycle[4];        /* [point]: local CPU seconds per row of that pipeline alone */
} rec_offload_metrics;

typedef struct rec_offload_decision {
    int offload;             /* 0: run locally */
    int point;               /* REC_OFFLOAD_P1..P3 */
    double ratio;            /* share of pieces sent to workers */
    double est;              /* the chosen pipeline's estimated throughput (rows/s) */
    double upper, lower;     /* Algorithm 1 lines 8-9 */
    char why[256];           /* one line: what decided it */
} rec_offload_decision;

/* A job's epochs training this share faster or slower than its first epoch after a decision
 * make `train --offload auto` decide again (the workers, their load or the network changed). */
#define REC_OFFLOAD_DRIFT 0.25

/* Default of Algorithm 1's SpeedUpThreshold on Gthp/Lthp (FastFlow §4.1: 10%). */
#define REC_OFFLOAD_SPEEDUP_THRESHOLD 1.1

/* Algorithm 1 on measured metrics. Pure. Without remote metrics (m->have_remote 0), decides
 * only whether there is a stall worth profiling the workers for (offload 1, point 0). */
void rec_offload_decide(const rec_offload_metrics *m, double threshold, rec_offload_decision *d);

/* The metric store (FastFlow §5.2, Table 2): a JSON file of records keyed by 64-bit hashes —
 * the model (Gthp), pipeline + model (Lthp, Pcycle), pipeline + model + workers (Rthp and
 * Ocycle of each point). A missing file is empty; a corrupt one is refused, naming it. */
typedef struct rec_offload_keys {
    uint64_t model, pipeline, remote;
} rec_offload_keys;
/* Fills what the store holds for the keys: *found bit 0 model, bit 1 pipeline, bit 2 remote. */
rec_status rec_offload_store_load(const char *path, const rec_offload_keys *k, rec_offload_metrics *m, int *found);
/* Writes the metrics under the keys (replacing older records of the same keys), atomically. */
rec_status rec_offload_store_save(const char *path, const rec_offload_keys *k, const rec_offload_metrics *m);
/* $REC_OFFLOAD_STORE, or $XDG_CACHE_HOME/rectrain/offload-metrics.json, or
 * ~/.cache/rectrain/offload-metrics.json. */
void rec_offload_store_default(char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
