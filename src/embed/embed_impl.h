/* Internals of the embedding engine shared by embed.c (tables, init, shared checks), forward.c
 * and backward.c (the fused drivers), pooling.c (forward kernels), sched.c (schedules and
 * candidates), sched_io.c (plan files) and tune.c (the tuner). Not a public header. */
#ifndef RECTRAIN_EMBED_IMPL_H
#define RECTRAIN_EMBED_IMPL_H

#include "rectrain/embed.h"

/* One forward work item: bags [b0, b1) of table f. */
typedef struct embed_item {
    int64_t b0, b1;
    int32_t f;
} embed_item;

/* Forward work items [lo, hi) that two threads take from opposite ends, packed as
 * hi << 32 | lo so that one compare-and-swap claims an item from either end (forward.c,
 * walk_claim); one cache line each. */
typedef struct embed_walk {
    uint64_t v;
    char pad[56];
} embed_walk;

/* What a forward kernel needs for one table of one batch. out points at the table's first
 * column of batch row 0; row r's output is out + r * W. */
typedef struct pool_job {
    const void *T;         /* (R, E): float, or bf16 bits when b16 */
    int64_t R;
    int E, W;
    const int64_t *off;    /* (B+1) bag offsets */
    const void *idx;       /* ids: int64_t if wide, else int32_t */
    const float *w;        /* per-id weights or NULL */
    float *out;
    int mean, check, pf, wide;
    int one;               /* every bag of the range holds exactly one id */
    int b16;               /* the table is stored in bf16 */
} pool_job;

/* One table of the row pass (split ROW, embed.h): a one-hot feature of the batch, so bag r's
 * id is idx[r] and its weight w[r] (the pointers are at the feature's first offset). */
typedef struct row_table {
    const void *T;         /* (R, E), as the engine stores its tables (row_job.b16) */
    const void *idx;       /* int64_t if the class is wide, else int32_t */
    const float *w;        /* NULL unless the class is weighted */
    int64_t R;
    int32_t col, f;        /* column in out; table */
    int32_t pf;            /* prefetch distance in rows (the table's schedule's pf), 0 = none */
} row_table;

/* A class of the row pass: n tables of one dim, id width and weighting, pooled by one
 * specialised loop; far[0..nfar) index the tables with a prefetch distance. */
typedef struct row_job {
    const row_table *t;
    const int32_t *far;
    int n, nfar, E, wide, weighted, check, W;
    float *out;            /* (B, W) */
    int b16;               /* the engine's tables are stored in bf16 */
} row_job;

/* Rows [r0, r1) of the class, row by row (every table's slice of row r, then row r + 1),
 * each far table's row for batch row r + pf requested (below lim, >= r1) before row r is
 * pooled; cold: rows [r0, r0 + pf) were not requested by an earlier call, so first request
 * them. Returns -1, or (checked mode)
 * the index in j->t of a table with an id outside [0, R), *bad_row getting its row: the
 * first in that order, the steps before it written. */
int embed_pool_rows(const row_job *j, int64_t r0, int64_t r1, int64_t lim, int cold, int64_t *bad_row);

/* Pools bags [b0, b1) with the given kernel (rec_embed_kernel). Returns -1, or the position
 * of the first id outside [0, R) when j->check (the bags before its bag are written). */
int64_t embed_pool(const pool_job *j, int kernel, int64_t b0, int64_t b1);
/* Does `kernel` have a code path of its own for dim E (else it runs GENERIC)? */
int embed_kernel_native(int kernel, int E);
/* The dims compiled as constants: FIXED's kernels and the row pass (pooling.c), the backward's
 * register sums and dense scatter (backward.c). X(E) for each; every switch over them and
 * embed_kernel_native expand this one list. */
#define EMBED_FIXED_DIMS(X) X(1) X(2) X(4) X(8) X(16) X(32) X(64) X(128)

enum { EMBED_MIN_BAGS_PER_ITEM = 8 }; /* a SAMPLE item holds at least this many bags (or the rest) */

/* One id of the batch as the backward sees it: the row, the bag it came from and the factor
 * its bag's output gradient is multiplied by (w_k, or w_k / L for MEAN). */
typedef struct bag_pair {
    int32_t bag;
    float coef;
} bag_pair;
typedef struct bag_entry {
    int64_t id;
    bag_pair p;
} bag_entry;

/* First error of one table / thread: key = f * B + row orders errors as (feature, row);
 * kind 1 = id out of range (a = id), kind 2 = bad bag offsets (a, c = the offsets). */
typedef struct embed_err {
    int64_t key;
    int kind;
    int64_t a, c;
} embed_err;

typedef struct embed_tuner embed_tuner;

struct rec_embed {
    int F, W, max_batch, threads, trust;
    rec_pooling pooling;
    rec_sparse_opt_config opt;
    int64_t *rows;           /* (F) R_f */
    int *dims;               /* (F) E_f */
    int *col;                /* (F+1) column of feature f in out / dout */
    size_t *toff, *soff;     /* (F+1) float offsets of table f / its state */
    float *tables;           /* (sum_f R_f E_f), NULL when b16 */
    uint16_t *tables16;      /* (sum_f R_f E_f) bf16 bits when b16, else NULL */
    int b16;                 /* tables stored in bf16 */
    rec_embed_rounding rounding;
    uint64_t seed;           /* the init's; the stochastic rounding's hash key */
    int64_t updates;         /* backward calls that updated rows (the rounding's counter) */
    float *state;            /* (sum_f state_len_f), NULL for SGD */
    rec_embed_sched *sched;  /* (F) the plan */
    /* per-call mapping */
    embed_item *items;       /* forward work items of the current call (room for all, init) */
    embed_walk *walk;        /* ((nt + 1) / 2) the walks of the current call's items */
    int32_t *order;          /* (F) tables by estimated cost, largest first */
    int order_all;           /* order holds a permutation of all tables (the last call's) */
    double *cost;            /* (F) estimated cost of each active table in the current call */
    uint8_t *rowok;          /* (F) the current call's row pass: 0 not in it, 1 a candidate, 2 in a class */
    row_table *rtab;         /* (F) the row pass's tables, class by class */
    row_job *rjob;           /* (F) the row pass's classes */
    int32_t *rfar;           /* (F) the classes' prefetched tables, class by class */
    int n_rjob;
    /* backward scratch */
    bag_entry *ent;          /* (2 * ent_cap): entries, then the sorts' second buffer */
    int64_t ent_cap;
    int64_t grows;           /* times ent was grown by a batch */
    int64_t *ebase;          /* (F+1) first entry of table f in ent for the current batch */
    int64_t *maxid;          /* (F) largest id of table f in the current batch */
    int64_t *nent;           /* (F) ids of table f in the batch (RADIX: entries gathered) */
    uint8_t *bpath;          /* (F) backward path (rec_embed_sort) of table f for the batch */
    embed_err *err;          /* (F) first error of table f in the current batch */
    float *acc;              /* (nt, W) per-thread gradient rows being summed */
    uint32_t *hist;          /* (nt, hist_stride) COUNT sort histograms, or NULL */
    int64_t hist_stride;     /* largest table rows a COUNT sort serves + 2 */
    float *dacc;             /* (nt, dacc_stride) DENSE gradient rows, or NULL */
    uint32_t *dstamp;        /* (nt, drow_stride) DENSE: stamp of the pass that last touched a row */
    int32_t *dlist;          /* (nt, drow_stride) DENSE: touched rows in first-touch order */
    uint32_t *depoch;        /* (nt * 16) DENSE: each thread's pass counter (a cache line apart) */
    int64_t dacc_stride, drow_stride; /* largest R*E and R a DENSE pass serves */
    int nt;                  /* threads the scratch is sized for */
    /* profiling: per-thread seconds per table, ids per table */
    int profiling;
    double *prof_fwd, *prof_bwd; /* (nt, F) */
    double *prof_ids;            /* (2, F+1): forward ids per table, then backward ids */
    double last_fwd_s, last_bwd_s, last_ids; /* wall seconds and ids of the last calls */
    embed_tuner *tuner;
};

/* Table f's first row, as stored (float or bf16 bits). */
static inline void *embed_table_base(const rec_embed *e, int f) {
    return e->b16 ? (void *)(e->tables16 + e->toff[f]) : (void *)(e->tables + e->toff[f]);
}

/* Checks a call's batch size and feature range against the engine; who names the call. */
rec_status embed_check_call(const rec_embed *e, const char *who, const rec_batch *b, int first_feature);
/* Turns a recorded error into the status and message; feature = batch sparse index. */
rec_status embed_report(const rec_embed *e, const char *who, const embed_err *x, int64_t B, int first_feature);
/* Ids of table f in the batch, clamped to the feature's slots (corrupt offsets are reported
 * by the kernels' bag checks, not here). */
int64_t embed_table_nnz(const rec_batch *b, int first_feature, int f);
/* Table f's estimated cost in the call: floats of rows read plus floats of output written,
 * the same model as FBGEMM's bandwidth figure. */
double embed_table_cost(const rec_embed *e, const rec_batch *b, int first_feature, int f);

/* Is bag `row` of j a valid range of its id slots? */
static inline int embed_bag_ok(const rec_jagged *j, int64_t row) {
    const int64_t lo = j->offsets[row], hi = j->offsets[row + 1];
    return lo >= 0 && lo <= hi && hi <= j->nnz_cap;
}

/* Runs the fused forward (backward+update) of every table, or only of table `only` when it
 * is >= 0 (the others' outputs are left untouched), with the current plan. */
rec_status embed_forward_run(rec_embed *e, const rec_batch *b, int first_feature, float *out, int only);
rec_status embed_backward_run(rec_embed *e, const rec_batch *b, int first_feature, const float *dout, float lr,
                              int only);

/* Table f's schedule as it will actually run: kernel fallbacks applied, grain fixed for
 * TABLE, COUNT and DENSE -> RADIX above their size limits. Two schedules are the same candidate for f iff
 * their effective forms are equal. */
rec_embed_sched embed_sched_effective(const rec_embed *e, int f, rec_embed_sched s);
/* Can table f run backward schedule `sort` (rec_embed_sort)? COUNT and DENSE have size limits. */
int embed_sort_fits(const rec_embed *e, int f, int sort);
int embed_sched_equal(rec_embed_sched a, rec_embed_sched b);
/* Checks schedule s's fields and that table f can run its sort. */
rec_status embed_check_sched(const rec_embed *e, int f, rec_embed_sched s);

/* The candidate universes (sched.c): every forward (backward) member with base's other fields,
 * written to u (EMBED_MAX_FWD_U / EMBED_MAX_BWD_U); returns the count. */
enum { EMBED_MAX_FWD_U = 40, EMBED_MAX_BWD_U = 9 };
int embed_fwd_universe(rec_embed_sched base, rec_embed_sched *u);
int embed_bwd_universe(rec_embed_sched base, rec_embed_sched *u);
/* Table f's distinct effective candidates among the universe u (n): writes them to out (at
 * most cap) and, if map is not NULL, each universe member's candidate index to map. */
int embed_sched_distinct(const rec_embed *e, int f, const rec_embed_sched *u, int n, rec_embed_sched *out, int cap,
                         int16_t *map);

/* Tuner hooks called by rec_embed_forward / rec_embed_backward_update around each call. */
void embed_tune_before(rec_embed *e, int backward);
void embed_tune_after(rec_embed *e, int backward);
void embed_tuner_free(embed_tuner *t);

#endif
