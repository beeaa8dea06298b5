/* rectrain — embedding tables, pooled embedding bags and their sparse optimizers.
 *
 * A rec_embed holds the F tables a model looks its sparse features up in: table f is a flat
 * row-major (R_f, E_f) float block, all tables in ONE allocation (STYLE.md), and the optimizer
 * state likewise in one block (Adagrad: (R_f, E_f) per table; row-wise Adagrad: (R_f) per
 * table; SGD: none).
 *
 * Forward pools the rows each bag names: bag b of feature f is the ids
 * batch->sparse[f] ids[offsets[b] .. offsets[b+1]) (with optional per-id weights):
 *   SUM:  out = sum_k w_k T[id_k]          MEAN: out = (sum_k w_k T[id_k]) / L   (L = bag size)
 * (w_k = 1 when the batch has no weights). An empty bag gives zeros and receives no gradient.
 * The output of one row is the features' vectors side by side:
 *   out (B, sum_f E_f), feature f at column col_f = E_0 + ... + E_{f-1};
 * with equal dims that is (B, F, E), the layout the interaction layers read.
 *
 * Backward + update (one pass, no dense gradient of the model): the gradient of the row id
 * from bag b is g_b * w_k (SUM) or g_b * w_k / L (MEAN), g_b = dout's slice for (b, f). The
 * gradients of duplicate ids within the batch are summed first (in order of their position in
 * the batch, so the result does not depend on the thread count), and then the optimizer
 * updates each touched row once:
 *   SGD:              T[r] -= lr * g
 *   ADAGRAD:          S[r] += g*g (element-wise);  T[r] -= lr * g / (sqrt(S[r]) + eps)
 *                     (torch.optim.Adagrad on a sparse gradient, lr_decay 0)
 *   ROWWISE_ADAGRAD:  s[r] += mean_e(g_e^2);       T[r] -= lr * g / (sqrt(s[r]) + eps)
 *                     (FBGEMM's EXACT_ROWWISE_ADAGRAD)
 * Rows that no bag touched are left exactly as they were (their state too).
 *
 * Ids are checked by default: an id outside [0, R_f) fails with REC_EINVAL naming the feature,
 * the batch row and the id, and changes nothing. Fast mode (`trust_ids = 1`) skips those
 * checks; it is for ids already validated against the same table sizes (a `.rshard` that
 * `rectrain prep` wrote for these tables): an out-of-range id then reads or writes outside
 * the table (undefined behaviour). Threads: OpenMP, `threads` given at init (0 = OpenMP
 * default).
 *
 * Schedules (RecFlex §IV, on the CPU). Each table runs its own rec_embed_sched in one fused
 * pass over all tables (forward) and one fused pass that sorts, sums and updates (backward).
 * Every schedule does the same float operations in the same order for each output element
 * and each updated row (a bag's ids summed in groups of 4 in position order, fmaf for weighted
 * terms, one division for MEAN: pooling.c; gradients summed per row in position order), so
 * results are BITWISE identical for every schedule, every plan and every thread
 * count: a plan changes speed, never numbers. Work is mapped to threads per call from the
 * batch's real pooling factors (RecFlex's host-side mapping, §IV-B): each table's bags are cut
 * into work items of about 2^grain ids (or one item per table; or, for one-hot ROW tables,
 * pooled row by row over chunks of batch rows the threads claim); the forward's items, in
 * column order, are cut into walks of equal estimated cost that pairs of threads take from
 * both ends; the backward's tables go largest estimated cost first from a shared counter.
 *
 * Shape letters: see batch.h (B batch, F features, E dim, R rows, L bag size).
 */
#ifndef RECTRAIN_EMBED_H
#define RECTRAIN_EMBED_H

#include <stddef.h>
#include <stdint.h>

#include "rectrain/batch.h"
#include "rectrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rec_pooling { REC_POOL_SUM = 0, REC_POOL_MEAN = 1 } rec_pooling;

typedef enum rec_sparse_opt_kind {
    REC_SPARSE_SGD = 0,
    REC_SPARSE_ADAGRAD = 1,
    REC_SPARSE_ROWWISE_ADAGRAD = 2
} rec_sparse_opt_kind;

typedef struct rec_sparse_opt_config {
    rec_sparse_opt_kind kind;
    float lr;         /* base learning rate, > 0; each update is given lr * schedule scale */
    float eps;        /* Adagrad kinds, >= 0 (defaults: ADAGRAD 1e-10 as torch, ROWWISE 1e-8 as FBGEMM) */
    float init_acc;   /* initial value of the Adagrad state, >= 0 (default 0) */
} rec_sparse_opt_config;

/* The defaults for `kind` at learning rate lr. */
rec_sparse_opt_config rec_sparse_opt_defaults(rec_sparse_opt_kind kind, float lr);

/* Pools bags [0, B) of one feature from rows T (R, E) as rec_embed_forward pools them (the
 * canonical order above, so the same bits): bag b holds ids idx[off[b] .. off[b + 1]) with
 * weights w (NULL: 1), its output row at out + b * W. For rows kept outside a rec_embed (a
 * rank pools the rows it fetched from their owners). */
void rec_embed_pool_bags(const float *T, int64_t R, int E, rec_pooling pooling, const int64_t *off,
                         const int32_t *idx, const float *w, int64_t B, float *out, int W);
/* The backward of one bag pooled so: its output's gradient d (E) added onto the gradient rows
 * of its ids idx[lo .. hi) (id k's row at G + idx[k] * E, weights w or NULL: 1), each as
 * g = fmaf(d, coef, g) in position order, coef the weight (divided by the bag's length for
 * MEAN), as the backward sums a row, so that rows kept outside a rec_embed (a rank's fetched
 * rows, a cache's slots) get the one-process bits. The rows are accumulated into, not zeroed. */
void rec_embed_scatter_bag(const float *d, int E, rec_pooling pooling, const int32_t *idx, const float *w, int64_t lo,
                           int64_t hi, float *G);

/* The sparse optimizer's step of columns [c0, c1) of one row from the row's whole summed
 * gradient g (E), as the backward applies it: p (c1 - c0) the columns' values, st their
 * state (ADAGRAD: c1 - c0 floats; ROWWISE_ADAGRAD: the row's one float, whose mean square
 * is over all E columns; SGD: unused, may be NULL). For rows kept outside a rec_embed (the
 * owner of a sharded row applies every rank's summed gradient). */
void rec_sparse_opt_step(const rec_sparse_opt_config *o, float lr, const float *g, int E, int c0, int c1, float *p,
                         float *st);

/* ---- schedules ------------------------------------------------------------------------------
 * Forward fields:
 *   split   SAMPLE: the table's bags are cut into items of about 2^grain ids, any thread runs
 *                   any item (sample parallelism, TorchRec's mapping);
 *           TABLE:  the whole table is one item run by one thread (table parallelism: its rows
 *                   stay in one core's caches; HugeCTR's sample-block mapping in spirit);
 *           ROW:    for one-hot features (every bag of the batch holds exactly one id) with a
 *                   FIXED dim: the row pass, in which each thread takes its share of the
 *                   batch rows and writes every ROW table's slice of a row before the next
 *                   row (the output is written in order, a row's slices side by side); a
 *                   table's pf there requests its row for the batch row pf ahead, and pf 0
 *                   leaves its rows to the cache (for tables whose rows stay cached). A batch
 *                   whose feature is not one-hot runs the table as SAMPLE with the same
 *                   kernel, pf and grain; other dims always do.
 *   kernel  GENERIC: runtime-E loop accumulating in the output row;
 *           FIXED:   E known at compile time (E in {1,2,4,8,16,32,64,128}), the bag's sum in
 *                    registers (dim-specialised vector width); other E run GENERIC;
 *           BLOCKED: column blocks of 16 floats outside, the bag's ids inside (blocked
 *                    accumulation: a block's accumulator stays in two 8-wide registers for
 *                    any E; the bag's rows are read once per block, so it suits wide rows
 *                    and long bags); E < 16 runs GENERIC.
 *   pf      software prefetch distance in ids (0 = none): id k+pf's row (every cache line of
 *           it) is prefetched while id k is summed, across the bags of an item; and when bag
 *           r starts, the output lines of bag r+pf are prefetched for writing.
 *   grain   log2 of the target ids per work item under SAMPLE (6..16).
 * Backward fields:
 *   sort    RADIX: LSD radix sort of the table's (id, bag) entries, 8 bits a pass, as many
 *                  passes as the largest id needs;
 *           COUNT: one counting pass over an R-sized histogram (valid for R <= 2^17);
 *           DENSE: no sort: each id's gradient is accumulated straight from the batch into a
 *                  per-thread (R, E) scratch block (stamped rows, so only touched rows are
 *                  cleared and updated), then every touched row is updated, in id order when
 *                  most rows were touched, else in first-touch order (valid for
 *                  R * E <= 2^21). Reads each bag's output gradient once instead of once per
 *                  id: the schedule for multi-hot tables whose bags revisit the same rows.
 *   bpf     prefetch distance, in sorted entries, of the rows (and optimizer state) the
 *           update will write (0 = none). */
typedef enum rec_embed_split { REC_SPLIT_SAMPLE = 0, REC_SPLIT_TABLE = 1, REC_SPLIT_ROW = 2 } rec_embed_split;
typedef enum rec_embed_kernel { REC_KERN_GENERIC = 0, REC_KERN_FIXED = 1, REC_KERN_BLOCKED = 2 } rec_embed_kernel;
typedef enum rec_embed_sort { REC_SORT_RADIX = 0, REC_SORT_COUNT = 1, REC_SORT_DENSE = 2 } rec_embed_sort;
enum {
    REC_EMBED_COUNT_MAX_ROWS = 1 << 17,
    REC_EMBED_DENSE_MAX_FLOATS = 1 << 21,
    REC_EMBED_GRAIN_MIN = 6,
    REC_EMBED_GRAIN_MAX = 16
};

typedef struct rec_embed_sched {
    uint8_t split;   /* rec_embed_split */
    uint8_t kernel;  /* rec_embed_kernel */
    uint8_t pf;      /* forward prefetch distance, ids, <= 64 */
    uint8_t grain;   /* log2 target ids per SAMPLE item, REC_EMBED_GRAIN_MIN..MAX */
    uint8_t sort;    /* rec_embed_sort */
    uint8_t bpf;     /* backward prefetch distance, entries, <= 64 */
} rec_embed_sched;

/* The schedule every table starts with: ROW, FIXED, pf 0, grain 12, DENSE (RADIX on tables
 * too large for it), bpf 8, "row/fixed/pf0/g12+dense/pf8". Against the earlier default
 * "sample/fixed/pf8/g10+dense/pf8", forward, same batches, in turns (bench models, 2 threads):
 * Kaggle 0.176 / 0.214 ms, A 33.1 / 42.6, B 10.0 / 10.8, C 35.9 / 41.5, D 10.2 / 16.4, E
 * 22.4 / 29.4; within 4% of the best of table/fixed/pf0 and sample/fixed/pf0/g12 on each. */
rec_embed_sched rec_embed_sched_default(void);
/* "sample/fixed/pf8/g10+dense/pf8": the text form used in plans and reports; buf >= 48 bytes. */
const char *rec_embed_sched_name(rec_embed_sched s, char *buf, size_t cap);
/* Parses the text form; REC_EINVAL naming the bad part. */
rec_status rec_embed_sched_parse(const char *text, rec_embed_sched *out);

/* Table storage. FP32: float rows. BF16: rows stored as bfloat16 (half the bytes read and
 * written), widened exactly to fp32 by the forward (a bf16 table pools to the bits an fp32
 * table of the same values gives); the backward updates each touched row in fp32 from its bf16
 * values, the summed gradient and the fp32 optimizer state, and stores the new row rounded:
 *   STOCHASTIC (default): up with probability (dropped bits) / 2^16, from a counter-based hash
 *       of (seed, update count, table, row, column), so the bits do not depend on the thread
 *       count or the plan, and a resumed run (rec_embed_set_updates) continues them. Unbiased:
 *       an update smaller than half a bf16 step still moves the row in expectation, where
 *       rounding to nearest drops it every time (bf16 keeps 8 significant bits, so an update
 *       below |w| 2^-9 vanishes; FBGEMM's TBE rounds its fp16/bf16 rows stochastically too).
 *   NEAREST: to nearest, ties to even (what `bench/train_bf16.sh` sets beside STOCHASTIC). */
typedef enum rec_embed_rounding { REC_ROUND_STOCHASTIC = 0, REC_ROUND_NEAREST = 1 } rec_embed_rounding;

/* Where a bf16 row's update draws its rounding (above): the engine's seed and update count,
 * the row's table and index, and the table column that the step's gradient column 0 is. */
typedef struct rec_bf16_key {
    rec_embed_rounding mode;
    uint64_t seed;        /* the tables' seed (rec_embed_config.seed, rec_embed_seed) */
    int64_t updates;      /* updates applied before this one (rec_embed_updates) */
    int table;            /* f */
    int64_t row;
    int col;              /* the table column of g's column 0 (a part of a row: its first) */
} rec_bf16_key;

/* rec_sparse_opt_step for a row stored in bf16, as rec_embed steps a row of its bf16 tables
 * (the same function): p (c1 - c0) the columns' bits, widened, stepped with the float
 * operations of the fp32 step and stored rounded as r says; column c of g is table column
 * r->col + c. A row held elsewhere (an owner's rows, a part of a row split by columns, a
 * cache slot) thus gets the bits one process gives it. */
void rec_sparse_opt_step_bf16(const rec_sparse_opt_config *o, float lr, const float *g, int E, int c0, int c1,
                              uint16_t *p, float *st, const rec_bf16_key *r);

typedef struct rec_embed_config {
    int n_tables;                 /* F >= 0 */
    const int64_t *rows;          /* (F) R_f >= 1 */
    const int *dims;              /* (F) E_f >= 1 */
    rec_pooling pooling;
    rec_sparse_opt_config opt;
    int max_batch;                /* largest B given to forward/backward */
    int threads;                  /* OpenMP threads, 0 = OpenMP default */
    uint64_t seed;                /* table f row r drawn from rec_rng(seed, stream = f) */
    int trust_ids;                /* 1 = fast mode: ids are not range-checked (see above) */
    int bf16;                     /* 1 = tables stored in bf16 (above); 0 = fp32 */
    rec_embed_rounding rounding;  /* bf16: how updated rows are rounded */
} rec_embed_config;

typedef struct rec_embed rec_embed;

/* Validates the config (REC_EINVAL naming the bad field), allocates the tables and the
 * optimizer state, and initialises table f as facebookresearch/dlrm does:
 * uniform(-sqrt(1/R_f), sqrt(1/R_f)). On error *out is NULL and nothing leaks. */
rec_status rec_embed_init(rec_embed **out, const rec_embed_config *cfg);
void rec_embed_free(rec_embed *e);

int rec_embed_tables(const rec_embed *e);              /* F */
int64_t rec_embed_rows(const rec_embed *e, int f);     /* R_f */
int rec_embed_dim(const rec_embed *e, int f);          /* E_f */
int rec_embed_out_width(const rec_embed *e);           /* sum_f E_f */
float *rec_embed_table(rec_embed *e, int f);           /* (R_f, E_f); NULL for bf16 tables */
uint16_t *rec_embed_table_bf16(rec_embed *e, int f);   /* (R_f, E_f) bf16 bits; NULL for fp32 tables */
int rec_embed_is_bf16(const rec_embed *e);
/* bf16 tables: how updated rows round, and the stochastic rounding's key (the init's seed). */
rec_embed_rounding rec_embed_rounding_mode(const rec_embed *e);
uint64_t rec_embed_seed(const rec_embed *e);
/* Rows [r0, r0 + n) of table f as fp32 into out (n E_f), or from in, rounded to nearest for a
 * bf16 table (exact for values that are bf16 already, e.g. read back from it): for
 * checkpoints and exports, whatever the storage. REC_EINVAL for a range outside the table. */
rec_status rec_embed_read_rows(const rec_embed *e, int f, int64_t r0, int64_t n, float *out);
rec_status rec_embed_write_rows(rec_embed *e, int f, int64_t r0, int64_t n, const float *in);
/* Updates applied so far (the stochastic rounding's counter); settable for resume. */
int64_t rec_embed_updates(const rec_embed *e);
void rec_embed_set_updates(rec_embed *e, int64_t n);
/* Optimizer state of table f: (R_f, E_f) for ADAGRAD, (R_f) for ROWWISE_ADAGRAD, NULL for SGD. */
float *rec_embed_state(rec_embed *e, int f);
size_t rec_embed_state_len(const rec_embed *e, int f); /* floats in the state of table f */

/* out (B, sum_f E_f) is OVERWRITTEN with the pooled rows of batch features
 * first_feature .. first_feature + F - 1 (a model whose batch carries more sparse features
 * than it has tables uses a window; usually 0). B = b->n <= max_batch. */
rec_status rec_embed_forward(rec_embed *e, const rec_batch *b, int first_feature, float *out);

/* Backward of the pooling plus the optimizer step, in one pass, for the same batch and window
 * as the last forward: dout (B, sum_f E_f). lr is this step's learning rate. */
rec_status rec_embed_backward_update(rec_embed *e, const rec_batch *b, int first_feature,
                                     const float *dout, float lr);

/* ---- plans: a schedule per table -------------------------------------------------------- */

/* Sets table f's schedule (REC_EINVAL naming the field if it is out of range or, for COUNT
 * or DENSE, the table is too large). */
rec_status rec_embed_set_sched(rec_embed *e, int f, rec_embed_sched s);
rec_embed_sched rec_embed_get_sched(const rec_embed *e, int f);
/* Gives every table s, with the fallbacks a uniform schedule needs: COUNT and DENSE become
 * RADIX on tables too large for them (kernels fall back by themselves, see above). */
void rec_embed_set_uniform(rec_embed *e, rec_embed_sched s);

/* The forward (resp. backward) schedule candidates of table f, the forward fields varied
 * with the backward ones at the table's current values (resp. the other way round); only
 * the variants that differ for this table (no FIXED when E is not specialised, no BLOCKED
 * when E < 16, no COUNT or DENSE on tables too large for them). Writes at most cap,
 * returns the count; REC_EMBED_MAX_CANDIDATES always suffices. */
enum { REC_EMBED_MAX_CANDIDATES = 64 };
/* The whole candidate universe (the default schedule's other fields): what a uniform schedule
 * may be. Returns the count (40 forward, 9 backward). */
int rec_embed_fwd_universe(rec_embed_sched *out, int cap);
int rec_embed_bwd_universe(rec_embed_sched *out, int cap);
int rec_embed_fwd_candidates(const rec_embed *e, int f, rec_embed_sched *out, int cap);
int rec_embed_bwd_candidates(const rec_embed *e, int f, rec_embed_sched *out, int cap);

/* Hash of the tables' shapes (F, and each R_f, E_f) and a signature of a batch's data: per
 * table the mean ids per bag and the share of non-empty bags, bucketed to 2 bits per
 * octave, hashed. Plans are keyed by both. */
uint64_t rec_embed_shape_key(const rec_embed *e);
uint64_t rec_embed_data_key(const rec_embed *e, const rec_batch *b, int first_feature);

/* Writes the current plan as JSON ({"format": "rectrain-embed-plan", "version": 1,
 * "shape_key", "data_key", "tables": [{"rows", "dim", "sched"}...]}) to path (temp file +
 * rename). data_key is the one the plan was tuned for (0 = unknown). */
rec_status rec_embed_plan_save(const rec_embed *e, const char *path, uint64_t data_key);
/* Loads a plan written by rec_embed_plan_save for tables of the same shapes. Errors name the
 * file and JSON path: REC_EFORMAT when it is not a plan at all (not JSON, or another
 * "format"), REC_EINVAL when it is a malformed plan or one tuned for other tables (with what
 * to do). *data_key gets the plan's data key. Nothing changes on error. */
rec_status rec_embed_plan_load(rec_embed *e, const char *path, uint64_t *data_key);
/* The same for a plan's text already in memory (len bytes, no NUL needed); name labels the
 * messages (a path, say). */
rec_status rec_embed_plan_parse(rec_embed *e, const char *text, size_t len, const char *name, uint64_t *data_key);

/* ---- profiling (embed.c) and tuning (tune.c) ---------------------------------------------------
 * With profiling on, each forward (backward) adds the seconds spent on each table's work
 * items, summed over threads, to fwd_s[f] (bwd_s[f]) and the table's ids to fwd_ids[f]
 * (bwd_ids[f]). Any output pointer may be NULL. */
void rec_embed_profile(rec_embed *e, int on);
void rec_embed_profile_read(const rec_embed *e, double *fwd_s, double *bwd_s, double *fwd_ids, double *bwd_ids);
void rec_embed_profile_clear(rec_embed *e);

/* The tuner, RecFlex §IV-A's two stages adapted to a CPU, run on live batches: after
 * rec_embed_tune_begin, the next forward and backward calls ARE the tuning (the numbers are
 * unchanged since every schedule computes the same bits, so a trainer keeps training):
 *   local stage:  round r gives table f its candidate r mod N_f (all tables at once, so each
 *                 candidate is timed while the other tables run in the same fused pass:
 *                 interference; the tables with fewer candidates repeat theirs, RecFlex's
 *                 padding), `reps` times over; each table keeps the candidate with the least
 *                 time per id in its best round (eq. 3 and 5, with the minimum for the sum: on
 *                 a CPU shared with other work one slow call must not decide);
 *   global stage: the per-table plan, the plan with every table's split set to SAMPLE at
 *                 its tuned grain, the best uniform schedule of each split (by the local
 *                 times) and the plan tuning started from (left only for a plan measured
 *                 faster) are each timed over 3 x `reps` whole passes, taking turns; the
 *                 forward fields of the plan with the fastest forward calls (seconds per
 *                 id) and the backward fields of the one with the fastest backward calls
 *                 are kept (eq. 4).
 * Forward and backward tune side by side, each on its own calls. While tuning is not done
 * rec_embed_tuning returns 1. */
typedef struct rec_embed_tune_opts {
    int reps;          /* batches per candidate (>= 1; default 3) */
} rec_embed_tune_opts;
rec_status rec_embed_tune_begin(rec_embed *e, const rec_embed_tune_opts *o);
int rec_embed_tuning(const rec_embed *e);
/* After tuning: which global candidate gave the forward fields and which the backward ones
 * (0 per-table, 1 per-table all-SAMPLE, 2/3/4 the best uniform SAMPLE / TABLE / ROW
 * schedule, 5 the plan tuning started from) and the steps it took. */
enum { REC_EMBED_GLOBAL_CANDIDATES = 6 };
typedef struct rec_embed_tune_report {
    int winner, winner_bwd;
    int fwd_rounds, bwd_rounds;  /* local-stage rounds (calls) */
    int global_rounds;           /* global-stage calls, at most */
    /* least seconds per id, forward + backward, per global candidate (infinite if not run) */
    double global_s[REC_EMBED_GLOBAL_CANDIDATES];
} rec_embed_tune_report;
void rec_embed_tune_result(const rec_embed *e, rec_embed_tune_report *r);

/* RecFlex's straw man, "separately tuned": each table tuned alone (only its items run), over
 * the given batches, forward then backward (dout (B, W) for every batch, lr as the trainer's);
 * picks per table the fastest candidate and installs the plan. Updates tables as training
 * steps would. */
rec_status rec_embed_tune_separate(rec_embed *e, const rec_batch *const *batches, int n, int first_feature,
                                   const float *dout, float lr);

/* ---- scalar references (embed_ref.c), float64, plain loops ------------------------------- */

/* out (B, sum_f E_f) from tables given as float64 copies tables[f] (R_f, E_f). */
void rec_embed_forward_ref(int F, const int64_t *rows, const int *dims, rec_pooling pooling,
                           const rec_batch *b, int first_feature, const double *const *tables,
                           double *out);
/* Dense gradient of every table: grads[f] (R_f, E_f) OVERWRITTEN from dout (B, sum_f E_f).
 * Duplicates simply accumulate. What the optimizer sees before its update. */
void rec_embed_grad_ref(int F, const int64_t *rows, const int *dims, rec_pooling pooling,
                        const rec_batch *b, int first_feature, const double *dout,
                        double *const *grads);
/* Applies the optimizer to tables[f] and state[f] (same layouts as rec_embed_state) from
 * dense gradients grads[f], touching only rows whose `touched[f][r]` is non-zero. */
void rec_embed_update_ref(int F, const int64_t *rows, const int *dims,
                          const rec_sparse_opt_config *opt, float lr, const double *const *grads,
                          const uint8_t *const *touched, double *const *tables,
                          double *const *state);

#ifdef __cplusplus
}
#endif
#endif
