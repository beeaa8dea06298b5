/* rectrain — preprocessing: operators (RAP Table 1 plus the Criteo standard ones), the
 * pipeline spec (a DAG of operator chains per output feature, read from JSON and validated),
 * vocabularies for Categorify, and the executor that turns raw blocks into Batches.
 *
 * Semantics of RAP's operators follow ../shared/papers/000-RAP-digest.md §3.8 (the artifact's
 * TorchArrow/Velox UDFs); each is restated at its reference function in src/prep/ops_ref.c.
 */
#ifndef RECTRAIN_PREP_H
#define RECTRAIN_PREP_H

#include <stdint.h>
#include <stdio.h>

#include "rectrain/batch.h"
#include "rectrain/io.h"
#include "rectrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- values ----------------------------------------------------------------------------
 * A value flowing along a chain is typed: f32 scalars (dense, or a vector of `width` after
 * Onehot), or i64 ids that are either one per row (scalar) or a list per row (multi-hot).
 * Any row may be null (missing) until FillNull removes nulls. */
typedef enum rec_dtype { REC_DT_F32 = 0, REC_DT_I64 = 1 } rec_dtype;

typedef struct rec_type {
    rec_dtype dtype;
    int is_list;     /* i64 only: rows hold 0..many ids */
    int width;       /* f32 only: values per row (1, or num_class after onehot) */
    int nullable;    /* rows may be missing */
    int64_t bound;   /* i64 only: every id is in [0, bound); -1 when unbounded */
} rec_type;

/* ---- operators --------------------------------------------------------------------------- */
typedef enum rec_op_kind {
    REC_OP_FILL_NULL = 0, /* RAP: null -> value */
    REC_OP_CAST,          /* RAP: i64 <-> f32 */
    REC_OP_LOGIT,         /* RAP: log(t/(1-t)), t = clamp(x, eps, 1-eps) */
    REC_OP_BOXCOX,        /* RAP: x>0: lambda==0 ? log x : (x^lambda-1)/lambda; else x */
    REC_OP_ONEHOT,        /* RAP: f32 scalar -> f32 vector of num_class */
    REC_OP_SIGRID_HASH,   /* RAP: hash_128_to_64(salt, twang_mix64(x)) floor-mod max_value */
    REC_OP_FIRSTX,        /* RAP: first min(x, len) ids of a list */
    REC_OP_CLAMP,         /* RAP: std::clamp(v, lo, hi), element-wise */
    REC_OP_BUCKETIZE,     /* RAP: index of x among sorted borders -> id in [0, |borders|] */
    REC_OP_NGRAM,         /* RAP: concatenated sliding windows of length min(n, len) */
    REC_OP_MAP_ID,        /* RAP: x >= |map| (or < 0) -> 0, else map[x] */
    REC_OP_LOG1P,         /* Criteo standard: log(1 + x) */
    REC_OP_MODULO,        /* Criteo standard: floor-mod by divisor (result in [0, divisor)) */
    REC_OP_CATEGORIFY,    /* Criteo standard: vocabulary index, 0 = rare/unseen */
    REC_OP_COUNT
} rec_op_kind;

/* JSON name of an op kind ("fill_null", ...), and back (-1 when unknown). */
const char *rec_op_name(rec_op_kind k);
int rec_op_kind_from_name(const char *name);

struct rec_vocab;

/* One operator with its parameters. Only the fields of its kind are meaningful. */
typedef struct rec_op {
    rec_op_kind kind;
    rec_type in;            /* the values it reads (set by validation) */
    double fvalue;          /* fill_null on f32 */
    int64_t ivalue;         /* fill_null on i64 */
    rec_dtype to;           /* cast */
    double eps;             /* logit */
    double lambda;          /* boxcox */
    double lo, hi;          /* clamp (either may be +-inf), onehot range */
    int32_t num_class;      /* onehot */
    int64_t salt;           /* sigrid_hash */
    int64_t max_value;      /* sigrid_hash */
    uint64_t multiplier;    /* sigrid_hash, from rec_sigrid_magic */
    int shift;              /* sigrid_hash */
    int32_t x;              /* firstx */
    int32_t n;              /* ngram */
    double *borders;        /* bucketize: (n_borders), non-decreasing; owned by the spec */
    int32_t n_borders;
    int64_t *map;           /* map_id: (map_len); owned by the spec */
    int64_t map_len;
    int64_t divisor;        /* modulo */
    int64_t min_count;      /* categorify: ids seen fewer times map to 0 */
    int32_t vocab_slot;     /* categorify: index into the vocabulary set */
} rec_op;

/* Reference (scalar, readable) definitions of the per-value operators. The fast executor is
 * tested against these. */
double rec_ref_logit(double x, double eps);
double rec_ref_boxcox(double x, double lambda);
double rec_ref_log1p(double x);
void rec_ref_onehot(double x, double lower, double upper, int32_t num_class, float *out);
int64_t rec_ref_bucketize(double x, const double *borders, int32_t n_borders);
int64_t rec_ref_modulo(int64_t x, int64_t divisor);
int64_t rec_ref_map_id(int64_t x, const int64_t *map, int64_t map_len);
uint64_t rec_twang_mix64(uint64_t k);
uint64_t rec_hash_128_to_64(uint64_t upper, uint64_t lower);
/* computeMultiperAndShift(max_value, precision 63) of the Velox sigrid_hash UDF. */
void rec_sigrid_magic(int64_t max_value, uint64_t *multiplier, int *shift);
int64_t rec_ref_sigrid_hash(int64_t x, int64_t salt, int64_t max_value);

/* ---- spec ---------------------------------------------------------------------------------
 * A spec lists output features. Each feature (and each named intermediate "node") reads one
 * or more inputs — raw columns (label excluded) or nodes — concatenating multiple inputs per
 * row, then applies a chain of ops. Together they form a DAG; validation orders it, infers
 * every type, and rejects what cannot run, naming the JSON path. */
typedef enum rec_feat_kind { REC_FEAT_NODE = 0, REC_FEAT_DENSE, REC_FEAT_SPARSE } rec_feat_kind;

enum { REC_NAME_MAX = 64, REC_MAX_INPUTS = 16 };

typedef struct rec_feature {
    char name[REC_NAME_MAX];
    rec_feat_kind kind;
    int n_inputs;
    int inputs[REC_MAX_INPUTS]; /* >= 0: index into spec->features; < 0: raw column -(c) */
    int n_ops;
    rec_op *ops;                /* (n_ops) */
    rec_type in_type;           /* after concatenating inputs */
    rec_type out_type;          /* after the chain */
    int table;                  /* sparse: index into spec->tables */
    int32_t dense_offset;       /* dense: first column in Batch.dense */
    int32_t sparse_index;       /* sparse: feature index in Batch.sparse */
} rec_feature;

typedef struct rec_table {
    char name[REC_NAME_MAX];
    int64_t rows;               /* R; -1 = "auto" (set by the vocabulary of a categorify) */
} rec_table;

typedef struct rec_spec {
    char name[REC_NAME_MAX];
    int n_features;
    rec_feature *features;      /* topologically ordered: inputs come before their users */
    int n_tables;
    rec_table *tables;
    int32_t n_dense;            /* Dn: sum of dense output widths */
    int32_t n_sparse;           /* F */
    int32_t n_vocabs;           /* categorify ops (each has its own vocabulary slot) */
} rec_spec;

/* Parses and validates a spec from JSON text. `origin` names it in messages (a path).
 * Errors are REC_EINVAL with "ORIGIN: $.sparse[3].ops[1].max_value: must be ...". */
rec_status rec_spec_parse(rec_spec **out, const char *json, size_t len, const char *origin);
rec_status rec_spec_load(rec_spec **out, const char *path);
void rec_spec_free(rec_spec *s);
/* Index of the sparse output feature with Batch index f. */
const rec_feature *rec_spec_sparse(const rec_spec *s, int32_t f);
/* Rows of the table that Batch sparse feature f feeds (after vocabularies are bound). */
int64_t rec_spec_table_rows(const rec_spec *s, int32_t f);
/* The name of that table (the spec's string, valid while the spec lives). */
const char *rec_spec_table_name(const rec_spec *s, int32_t f);
/* What each vocabulary slot counts, as a 64-bit signature: the raw columns and every op (with
 * its parameters) on the way to its categorify op, and that op's min_count. Two specs whose
 * slot k has the same signature build the same vocabulary from the same data; feature and
 * node names do not enter it. Fills sigs[0 .. n_vocabs), or returns REC_ENOMEM. */
rec_status rec_spec_vocab_sigs(const rec_spec *s, uint64_t *sigs);
/* The feature whose chain ends in the categorify op of vocabulary slot k (NULL if none). */
const rec_feature *rec_spec_vocab_feature(const rec_spec *s, int32_t k);
/* The categorify op that ends ft's chain (the only place one may stand), or NULL. */
static inline const rec_op *rec_feature_categorify(const rec_feature *ft) {
    return ft->n_ops > 0 && ft->ops[ft->n_ops - 1].kind == REC_OP_CATEGORIFY ? &ft->ops[ft->n_ops - 1] : NULL;
}

/* ---- vocabularies (Categorify) -------------------------------------------------------------
 * Built in a first pass over the data: every categorify op counts the ids reaching it; ids
 * seen at least min_count times get indices 1..V in order of decreasing count (ties by
 * increasing id), everything else maps to 0. The table the feature feeds then has V+1 rows. */
typedef struct rec_vocab rec_vocab;   /* one id -> index map */
typedef struct rec_vocab_set {
    int32_t n;
    rec_vocab **v;                     /* (n) one per categorify op, by vocab_slot */
} rec_vocab_set;

int64_t rec_vocab_size(const rec_vocab *v);           /* V, not counting the 0 slot */
int64_t rec_vocab_lookup(const rec_vocab *v, int64_t id); /* 0 when absent */
/* The ids in index order: ids[i] has index i+1. */
const int64_t *rec_vocab_ids(const rec_vocab *v);
rec_status rec_vocab_from_ids(rec_vocab **out, const int64_t *ids, int64_t n);
void rec_vocab_free(rec_vocab *v);
void rec_vocab_set_free(rec_vocab_set *vs);
/* Sets the rows of every "auto" table from the bound vocabularies (V+1) and the bounds of
 * the categorify outputs. */
rec_status rec_spec_bind_vocabs(rec_spec *s, const rec_vocab_set *vs);

/* ---- executor ------------------------------------------------------------------------------
 * rec_prep_plan is the compiled, immutable form of a validated spec: chains grouped for
 * fusion. Horizontal fusion (RAP §6.1 on the CPU): chains at the same DAG depth with the same
 * sequence of op kinds run as one kernel call over all their features, with per-feature
 * parameters. Vertical fusion: a chain runs op after op on a block of rows that stays in the
 * L1/L2 cache, with no intermediate written to memory. A workspace per thread holds the
 * block's columns; plan + workspace + raw block in, batch rows out. */
typedef struct rec_prep_plan rec_prep_plan;
typedef struct rec_prep_ws rec_prep_ws;

/* `vocabs` may be NULL when the spec has no categorify op, or for a plan used only for the
 * counting pass (rec_prep_count); otherwise the plan keeps a pointer to it (it must outlive
 * the plan) and rec_prep_run refuses to run without it. */
rec_status rec_prep_plan_init(rec_prep_plan **out, const rec_spec *spec,
                              const rec_vocab_set *vocabs);
void rec_prep_plan_free(rec_prep_plan *p);
/* Fusion groups of the plan, for `rectrain prep --explain` and tests. */
int rec_prep_plan_groups(const rec_prep_plan *p);
void rec_prep_plan_describe(const rec_prep_plan *p, FILE *out);

/* ---- horizontal fusion for the GPU executor (RAP §6.1-6.2) ---------------------------------
 * Every op of every feature is an op instance. Instances of one kind reading one layout (dtype,
 * list or not) with no path between them can run as one fused kernel. The plan puts each
 * instance at a time step after every instance it reads from and maximises the sum, over
 * (kind, layout, step), of the squared number of instances fused (RAP eq. 1-4). That is a MILP
 * with a quadratic objective; the plan linearises the square (a unary encoding of the degree)
 * and solves it with GLPK. */
typedef struct rec_fused_kernel {
    int step;
    rec_op_kind kind;
    rec_dtype dtype;
    int is_list;
    int n;                      /* instances fused */
    const int *members;         /* (n) indices into rec_fusion.ops */
} rec_fused_kernel;

typedef struct rec_fusion_op {
    int feature, op;            /* spec->features[feature].ops[op] */
    int step;
} rec_fusion_op;

typedef struct rec_fusion {
    int n_ops;
    rec_fusion_op *ops;         /* (n_ops) features in spec order, each chain in order */
    int n_kernels;
    rec_fused_kernel *kernels;  /* (n_kernels) by step, then kind and layout */
    int n_steps;                /* steps with a kernel */
    int depth;                  /* the longest chain of instances: the fewest steps possible */
    int64_t objective;          /* the sum of squared fusion degrees (n_ops: no fusion) */
    int optimal;                /* 1: proven optimal; 0: the best found in the time limit */
    double seconds;             /* solver time */
    int *members_;              /* owned storage of the kernels' members */
} rec_fusion;

typedef struct rec_fusion_opts {
    int steps;                  /* time steps the MILP may use; 0: max(8, depth) as RAP's artifact */
    double time_limit;          /* seconds for GLPK; 0: 10 */
} rec_fusion_opts;

/* Plans the fusion of `spec` (opts may be NULL). Fails only on allocation or a GLPK failure. */
rec_status rec_prep_fuse(const rec_spec *spec, const rec_fusion_opts *opts, rec_fusion *out);
/* f with each kernel of more than `most` instances sharded into kernels of `most` (the last of
 * what is left), in the same steps: less fused plans, for measuring (RAP §6.2's sharding). */
rec_status rec_fusion_shard(const rec_fusion *f, int most, rec_fusion *out);
void rec_fusion_free(rec_fusion *f);
/* The kernels step by step, with their features, for `rectrain prep --explain`. */
void rec_fusion_describe(const rec_fusion *f, const rec_spec *spec, FILE *out);

/* ---- co-running the fused kernels with training (RAP §5.3, §6.2, Algorithm 1) ----------------
 * Training stages (in execution order) each have an overlapping capacity: how much
 * preprocessing, in standalone kernel latency, runs beside the stage without lengthening it.
 * The schedule takes the stages of highest capacity until they hold the kernels' total
 * latency, then fills them in execution order with the kernels in plan order; a kernel larger
 * than what is left of a stage is sharded (its first members, as many as fit, run there; the
 * rest go on). What no chosen stage holds goes to the last stage. Kernels keep their order,
 * so every instance still runs after those it reads. */
typedef struct rec_corun_piece {
    int kernel;                 /* index into rec_fusion.kernels */
    int first, n;               /* its members [first, first + n) */
    double latency;             /* predicted, standalone */
} rec_corun_piece;

typedef struct rec_corun_plan {
    int n_stages, n_pieces;
    int *at;                    /* (n_stages + 1) stage s runs pieces[at[s] .. at[s + 1]) */
    rec_corun_piece *pieces;    /* in launch order */
    double *load;               /* (n_stages) predicted latency placed on each stage */
    double exposed;             /* sum over stages of max(0, load - capacity): RAP's T_delta */
    int overflow;               /* 1: the chosen stages could not hold every kernel */
} rec_corun_plan;

/* The predicted standalone latency of members [first, first + n) of kernel k, fused. */
typedef double (*rec_latency_fn)(const rec_fused_kernel *k, int first, int n, void *ctx);

rec_status rec_corun_schedule(const rec_fusion *f, const double *capacity, int n_stages, rec_latency_fn latency,
                              void *ctx, rec_corun_plan *out);
void rec_corun_plan_free(rec_corun_plan *p);
/* REC_EINVAL naming the piece unless p's pieces run every member of every kernel of f once, in
 * the kernels' order, members in order (what an executor needs to follow it). */
rec_status rec_corun_plan_check(const rec_corun_plan *p, const rec_fusion *f);
rec_status rec_corun_plan_copy(rec_corun_plan *dst, const rec_corun_plan *src);

/* Co-running in training: what joins the training loop to the loader's GPU executors. The
 * training model records an event (a cudaEvent_t, opaque here) at the start of each of its
 * stages in every step; an executor that follows a plan queues, before the pieces of stage s,
 * a wait for stage s's event: they run beside that stage of the newest step the training has
 * queued (a wait takes the event's latest record; one never recorded does not wait). Before a
 * plan is set the executors run their kernels whole and ungated (CUDA streams' co-running,
 * RAP's baseline). Thread-safe: the plan may be set while executors run; each block follows
 * the plan current at its start. */
typedef struct rec_corun rec_corun;
rec_status rec_corun_new(rec_corun **out, int n_stages, void *const *events);
void rec_corun_free(rec_corun *c);
int rec_corun_stages(const rec_corun *c);
/* Rows a step trains: an executor following a plan runs its blocks in pieces of at most this
 * many rows, each gated on the newest step then (RAP: a batch's preprocessing beside the step
 * before). Before any executor runs; 0 (the default): whole blocks. */
void rec_corun_set_step_rows(rec_corun *c, int64_t rows);
int64_t rec_corun_step_rows(const rec_corun *c);
void *rec_corun_event(const rec_corun *c, int stage);
/* Replaces the plan (copied; p->n_stages must be the corun's). */
rec_status rec_corun_set_plan(rec_corun *c, const rec_corun_plan *p);
/* Where the plan changed since *version: copies it into *out (freeing what out held), sets
 * *version and *changed = 1. */
rec_status rec_corun_take(rec_corun *c, uint64_t *version, rec_corun_plan *out, int *changed);
/* The predictor's inputs from the running executors: the first executor to ask (claim returns
 * 1 to it alone) times its next block's fused kernels alone (rec_gexec_measure) and leaves
 * the samples and the values each fusion instance read a row (by rec_fusion.ops index) here:
 * X (n x REC_LAT_FEATURES) and ms are malloc'd and become the corun's (freed here on failure
 * too); values_per_row is copied. rec_corun_measured: 1 once they are here (the arrays stay
 * the corun's). */
int rec_corun_claim_measure(rec_corun *c);
rec_status rec_corun_put_measured(rec_corun *c, const double *values_per_row, int n_ops, int64_t rows, float *X,
                                  double *ms, int64_t n);
int rec_corun_measured(rec_corun *c, const double **values_per_row, int64_t *rows, const float **X,
                       const double **ms, int64_t *n);

/* Overlapping capacity measured on the running model (RAP §5.1: the most preprocessing, in
 * standalone latency, that runs beside a stage without lengthening it). A probe of known
 * standalone latency runs beside one stage of a step; the stage's time is compared with the
 * same stage in the steps between, which run without it. For each stage, a bisection over
 * the probe's latency as a share of the stage's own time (a standalone kernel occupies the
 * whole GPU, so no stage holds more than its own time): a probe fits when the stage is
 * lengthened by at most `tol` of its time. The search is this state machine; the training
 * loop runs the steps it asks for. */
enum { REC_CAP_ROUNDS = 5, REC_CAP_REPS = 3 };
typedef struct rec_cap_search {
    int n_stages, stage;          /* the stage being searched; n_stages: done */
    double tol;
    double *base_ms;              /* (n_stages) each stage without a probe: median of the baseline steps */
    double *capacity;             /* (n_stages) ms of standalone latency: the result */
    double lo, hi;                /* the bisection's share of the stage's time: lo fits, hi does not */
    int round, rep, phase;        /* phase 0: baseline steps; 1: probed steps */
    int asked;                    /* steps asked for in this round (or baseline) */
    double *samples;              /* (n_stages x REC_CAP_REPS) baseline, or probed stage times */
    int64_t steps;                /* steps asked for so far */
} rec_cap_search;
rec_status rec_cap_search_init(rec_cap_search *c, int n_stages, double tol);
void rec_cap_search_free(rec_cap_search *c);
/* The next step's probe: its stage (-1: a step without probe) and standalone latency in ms.
 * Returns 1 for a step to measure, 2 for one not to (the round's steps are all asked for and
 * the next depends on their times: run it without probe and do not record it), 0 once every
 * stage is measured. */
int rec_cap_search_next(rec_cap_search *c, int *stage, double *probe_ms);
/* A measured step's stage times (ms, n_stages of them, as the model measured them), in the
 * order they were asked for. */
void rec_cap_search_record(rec_cap_search *c, const double *stage_ms);
/* Measured capacities kept for later runs of the same training (`train --corun-capacity`), as
 * RAP's artifact keeps them per GPU, model and batch: {"format": "rectrain-corun-capacity",
 * "version": 1, "key": KEY, "stages": [{"name", "capacity_ms", "base_ms"}...]}, where KEY
 * names what they were measured on. Load refuses a file of another key (the JSON path, and
 * what to do) or of other stages; it fills c as a finished search. */
rec_status rec_cap_save(const rec_cap_search *c, const char *path, const char *key, const char *const *names);
rec_status rec_cap_parse(rec_cap_search *c, const char *text, size_t len, const char *path, const char *key,
                         const char *const *names);

/* ---- the latency predictor of fused kernels (RAP §5.2) -------------------------------------
 * Gradient-boosted trees (XGBoost) from a kernel's features to its standalone latency, trained
 * on measured kernels. The features of members [first, first + n) of a kernel, for a batch of
 * `batch` rows whose instances read values_per_row[i] values a row (by rec_fusion.ops index):
 *   kind, dtype, list, members, values read (batch x the sum), the most values of one member,
 *   the op's size parameter (ngram n, firstx x, onehot classes, bucketize borders, map_id
 *   length; mean over members; 0 for the others), batch. */
enum { REC_LAT_FEATURES = 8 };
void rec_lat_features(const rec_fusion *f, const rec_spec *spec, int kernel, int first, int n,
                      const double *values_per_row, int64_t batch, float x[REC_LAT_FEATURES]);

typedef struct rec_lat_model rec_lat_model;
/* Trains on n measured kernels (features X, n x REC_LAT_FEATURES, and latencies ms > 0): the
 * trees fit log(ms), so errors are relative (RAP's parameters: depth 5, rate 0.05, 300 rounds). */
rec_status rec_lat_train(const float *X, const double *ms, int64_t n, rec_lat_model **out);
rec_status rec_lat_predict(const rec_lat_model *m, const float *X, int64_t n, double *ms);
rec_status rec_lat_save(const rec_lat_model *m, const char *path);
rec_status rec_lat_load(const char *path, rec_lat_model **out);
void rec_lat_free(rec_lat_model *m);
/* Measured kernels from a TSV: a header line, then a kernel a line with the features (the op by
 * its JSON name, dtype f32 or i64, list 0 or 1) and its latency in ms. Errors name the line and
 * field. X and ms are malloc'd. */
rec_status rec_lat_read(const char *path, float **X, double **ms, int64_t *n);
/* Writes n measured kernels in the format rec_lat_read reads. */
rec_status rec_lat_write(const char *path, const float *X, const double *ms, int64_t n);
/* RAP §8.4: trained on a seeded random 90%, the model's median relative error on the other 10%
 * and the share of those within 10% of the measurement (RAP Table 5's accuracy). */
rec_status rec_lat_holdout(const float *X, const double *ms, int64_t n, uint64_t seed, double *median_rel,
                           double *within10);

rec_status rec_prep_ws_init(rec_prep_ws **out, const rec_prep_plan *p);
void rec_prep_ws_free(rec_prep_ws *ws);

/* Preprocesses raw rows [r0, r0+n) and appends them to `b` (rows b->n .. b->n+n). The batch
 * must have the spec's Dn and F and room for n more rows; id arrays grow as needed. Never
 * fails on data (every op is total); fails only on allocation. */
rec_status rec_prep_run(const rec_prep_plan *p, rec_prep_ws *ws, const rec_raw_block *raw,
                        int64_t r0, int64_t n, rec_batch *b);

/* First pass for categorify: feeds raw rows [r0, r0+n) through the chains and counts the ids
 * that reach each categorify op into `counts` (one counter set per worker; merge with
 * rec_vocab_counts_merge). */
typedef struct rec_vocab_counts rec_vocab_counts;
rec_status rec_vocab_counts_init(rec_vocab_counts **out, const rec_spec *spec);
void rec_vocab_counts_free(rec_vocab_counts *c);
rec_status rec_prep_count(const rec_prep_plan *p, rec_prep_ws *ws, const rec_raw_block *raw,
                          int64_t r0, int64_t n, rec_vocab_counts *counts);
rec_status rec_vocab_counts_merge(rec_vocab_counts *dst, const rec_vocab_counts *src);
/* Builds the vocabularies (thresholds from the spec's categorify ops). */
rec_status rec_vocab_counts_finish(const rec_vocab_counts *c, const rec_spec *spec,
                                   rec_vocab_set *out);

/* ---- parallel engine ---------------------------------------------------------------------------
 * Parses and preprocesses chunks of TSV text on a pool of threads. Each thread takes an equal
 * share of the chunk's lines (rec_tsv_split), parses them in cache-sized slices and runs the
 * plan on each slice right away, so raw rows are preprocessed while still in L2. Thread t's
 * rows land in its own batch, in line order; batches 0..T-1 together hold the chunk's rows in
 * file order. All buffers are reused across chunks. */
typedef struct rec_prep_engine rec_prep_engine;

/* `path` names the input in messages about a chunk that does not name its file. The plan
 * must outlive the engine. */
rec_status rec_prep_engine_init(rec_prep_engine **out, const rec_prep_plan *plan, int threads,
                                const rec_tsv_opts *opts, const char *path);
void rec_prep_engine_free(rec_prep_engine *e);
int rec_prep_engine_threads(const rec_prep_engine *e);
/* Where the engine's threads run the plan: the CPU executor, or the GPU executor (its fusion
 * plan, each fused op one launch) on a CUDA device, or the GPU executor's CPU backend (the
 * same row functions in loops; tests hold it to the CPU executor). Parsing stays on the CPU,
 * and so does the counting pass of categorify. */
typedef enum rec_prep_device { REC_PREP_CPU = 0, REC_PREP_CUDA, REC_PREP_GPU_EMULATED } rec_prep_device;
/* Before the first run; REC_EUNSUPPORTED with the reason where there is no usable GPU. */
rec_status rec_prep_engine_set_device(rec_prep_engine *e, rec_prep_device d);
/* The GPU executors follow the corun's plan beside training (rec_corun); after set_device. */
rec_status rec_prep_engine_corun(rec_prep_engine *e, rec_corun *c);
/* Preprocesses the chunk. Runs alternate between two sets of batches, so the batches of one
 * run stay valid (e.g. for a writer thread) while the next run is in progress; the run after
 * that overwrites them. Malformed rows: in FAIL
 * mode the first one (in file order) is returned as REC_EFORMAT with its file:line:field
 * message; in SKIP mode they are counted in rec_prep_engine_bad. */
rec_status rec_prep_engine_run(rec_prep_engine *e, const rec_text_chunk *chunk);
/* The counting pass of categorify: counts the ids of the chunk in per-thread counters. */
rec_status rec_prep_engine_count(rec_prep_engine *e, const rec_text_chunk *chunk);
/* The same over rows already parsed (a .rraw file's, rawcols.h): thread t takes the t-th of
 * T equal shares of raw's rows, in slices; batches 0..T-1 hold them in order. */
rec_status rec_prep_engine_run_raw(rec_prep_engine *e, const rec_raw_block *raw);
rec_status rec_prep_engine_count_raw(rec_prep_engine *e, const rec_raw_block *raw);
/* Merges the counters of every pass so far and builds the vocabularies. */
rec_status rec_prep_engine_vocabs(rec_prep_engine *e, rec_vocab_set *out);
/* The GPU executor's operators' time so far, summed over the threads' streams, in ms: each
 * block's from its raw columns on the device to its last fused kernel (copies left out); 0
 * on the CPUs or where the backend does not time. */
double rec_prep_engine_device_ms(const rec_prep_engine *e);
/* Thread t's batch from the last run (valid until the second run after it). */
const rec_batch *rec_prep_engine_batch(const rec_prep_engine *e, int t);
/* Malformed rows skipped so far (SKIP mode). */
const rec_bad_report *rec_prep_engine_bad(const rec_prep_engine *e);

/* Reference executor: op by op over whole columns with the rec_ref_* functions, no fusion.
 * Same contract as rec_prep_run; used by tests as the oracle. */
rec_status rec_prep_run_ref(const rec_spec *spec, const rec_vocab_set *vocabs,
                            const rec_raw_block *raw, int64_t r0, int64_t n, rec_batch *b);

#ifdef __cplusplus
}
#endif
#endif
