/* rectrain — placement of embedding tables across N ranks (sharding plans, OPER §3–§4).
 *
 * A plan says where every embedding row lives when a model is trained by N ranks
 * (`mpirun -np N rectrain train`). Each table f (R_f rows, E_f columns) is cut into column
 * parts [col_0 = 0, col_1, ..., col_C = E_f) (C = 1 unless the table is sharded column-wise);
 * within a part, every row has ONE owner rank or is replicated on every rank
 * (REC_PLAN_EVERY). The owner holds the row's values and its optimizer state, looks it up for
 * the ranks that need it (they fetch it with one-sided gets) and applies the summed gradient
 * of every rank to it; a replicated row is held, looked up and updated by every rank, its
 * gradient summed by a sparse all-reduce.
 *
 * A part is described by (both sorted by row):
 *   segments  (start, owner): rows [start_k, start_{k+1}) belong to owner_k; start_0 = 0.
 *             Table-wise is one segment, row-wise N, replicated one segment of EVERY.
 *   hot       (row, owner): single rows whose owner overrides their segment's (OPER places
 *             the rows its data profile saw most, one by one, and leaves the cold rest in
 *             segments).
 * so that a plan for a 10^8-row table stays small when only its hot rows are placed one by
 * one. rec_plan_owner answers for any row in O(log) time.
 *
 * Plan kinds: REPLICATED (data parallel: every table everywhere), TABLE (whole tables,
 * balanced by size x pooling), ROW (every table in N equal row ranges), COLUMN (every table in
 * min(N, E_f) column ranges), GREEDY (TorchRec's planner in spirit: per table the cheapest of
 * table-wise, row-wise, column-wise and replicated by size x pooling, placed greedily on the
 * least loaded rank), OPER (§4.1–§4.3 of the paper: rows sorted by access frequency,
 * access-bounded then memory-bounded partitions under a threshold, balanced greedy placement
 * with threshold refinement, hot rows replicated where f > BW_P2P / (B · BW_AR)).
 *
 * Costs (Eq. 1–3) per rank per step of global batch B, from the access profile the plan was
 * made with: memory (bytes of rows and optimizer state held), lookups (row reads it serves,
 * local and for other ranks), bytes sent and received (rows fetched forward, gradients sent
 * back to owners, the all-reduce of replicated rows and of the dense gradients).
 */
#ifndef RECTRAIN_PLAN_H
#define RECTRAIN_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "rectrain/batch.h"
#include "rectrain/embed.h"
#include "rectrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { REC_PLAN_EVERY = -1 };

typedef enum rec_plan_kind {
    REC_PLAN_REPLICATED = 0,
    REC_PLAN_TABLE = 1,
    REC_PLAN_ROW = 2,
    REC_PLAN_COLUMN = 3,
    REC_PLAN_GREEDY = 4,
    REC_PLAN_OPER = 5,
    REC_PLAN_TORCHREC = 6      /* read from TorchRec's plan (below); not built here */
} rec_plan_kind;
enum { REC_PLAN_KINDS = 6 };   /* the kinds rec_plan_build makes: 0 .. 5 */

/* "replicated", "table", "row", "column", "greedy", "oper", "torchrec"; and back (-1 when
 * unknown). */
const char *rec_plan_kind_name(rec_plan_kind k);
int rec_plan_kind_from_name(const char *name);

/* ---- the access profile ------------------------------------------------------------------
 * What a plan is made from: for every row the profiled global batches touched, A = the mean
 * number of ranks whose slice of a step's global batch uses it (0 < A <= N: OPER's "average
 * access count among GPUs", with each rank's ids deduplicated, as the executor fetches them)
 * and q = the share of steps in which any rank uses it (what the sparse all-reduce of a
 * replicated row moves). A row the profile never saw counts as unused. Each global batch is
 * cut into the ranks' slices as the trainer cuts it: rank r takes rows [r B / N, (r+1) B / N). */
typedef struct rec_plan_model {
    int ranks;                 /* N >= 1 */
    int tables;                /* F */
    const int64_t *rows;       /* (F) R_f */
    int dim;                   /* E: every table's */
    rec_sparse_opt_kind opt;   /* its state per row: Adagrad E floats, row-wise 1, SGD none */
    int64_t batch;             /* global B */
    size_t dense_params;       /* floats all-reduced every step (dense gradients) */
    const char *const *names;  /* (F) or NULL: the tables' names (the prep spec's), by which a
                                  TorchRec plan may name them besides t0..t{F-1} */
    int bf16;                  /* bf16 tables: a row's values are stored and fetched as 2 bytes
                                  each; their gradients and optimizer state stay fp32 */
} rec_plan_model;

typedef struct rec_plan_profile rec_plan_profile;
rec_status rec_plan_profile_init(rec_plan_profile **out, const rec_plan_model *m);
void rec_plan_profile_free(rec_plan_profile *p);
/* Adds a global batch (its first F sparse features are the tables' ids; ids out of range are
 * refused with REC_EINVAL naming feature and row). */
rec_status rec_plan_profile_add(rec_plan_profile *p, const rec_batch *b);
int64_t rec_plan_profile_batches(const rec_plan_profile *p);
/* Profiles `batches` global batches of the first `rows` rows of a data set (train.h), drawn in
 * the shuffled order of `seed` (row blocks from all over the range; never more than a shuffle
 * buffer in memory), or all of them when there are fewer. */
struct rec_dataset;
rec_status rec_plan_profile_data(rec_plan_profile *p, struct rec_dataset *d, int64_t rows, int64_t batches, uint64_t seed);

/* ---- building plans ----------------------------------------------------------------------
 * The machine a plan is costed on (Eq. 2-3 with one L for every local lookup and one
 * bandwidth for every pair of ranks). */
typedef struct rec_plan_hw {
    double lookup_s;           /* seconds to read one row of E floats locally: L[j][j] (the
                                  executor: an owner's sum and update of a gradient record) */
    double slice_s;            /* seconds per id of a rank's own slice: dedup, locating, pooling,
                                  summing and packing gradients; the same under every plan */
    double get_s;              /* seconds per row fetched from another rank, beyond its bytes */
    double ranks_per_core;     /* ranks sharing a core (>= 1): the compute terms scale by it */
    double bw_p2p;             /* bytes/s a rank moves to or from another rank: 1 / L[i][j] per byte */
    double bw_ar;              /* bytes/s of a ring all-reduce's per-rank traffic */
    /* Where the rows sit in memory (0: the term is off; rec_plan_measure_units measures them).
     * An owner's record of a row its cache holds costs lookup_s, one from memory miss_s more;
     * which rows a rank's cache holds is Che's approximation of an LRU of cache_bytes over
     * the rows it owns, each at its profiled access rate (plan.c che_misses). */
    double cache_bytes;
    double miss_s;
    double rep_row_s;          /* per replicated row per step on every rank, used or not: its
                                  gradient zeroed, its all-reduce chunks summed, scanned */
    double skew_s;             /* per step waiting for the slowest rank beyond the plan's own
                                  imbalance (the dense work's jitter): the same under every
                                  plan, measured by a job (train's skew) */
    double mem_bytes;          /* a rank's memory for rows and their state (default 64e9) */
    double extra_mem;          /* OPER: share of mem_bytes for replicated rows (paper: 5%) */
    double threshold;          /* OPER: initial partition threshold, a share of all access and
                                  of all memory (paper: 0.1%) */
} rec_plan_hw;
/* Defaults: this machine's measured figures where a running job has not measured its own. */
void rec_plan_hw_default(rec_plan_hw *hw);
/* Measures cache_bytes, miss_s and rep_row_s on this machine (units.c: ~1 s, 1 GiB) for
 * rows of E floats with opt's state, N ranks. */
void rec_plan_measure_units(rec_plan_hw *hw, int E, rec_sparse_opt_kind opt, int N);

/* Predicted per rank per step of global batch B (Eq. 1-3 and the all-reduces). */
typedef struct rec_plan_cost {
    double mem_bytes;          /* rows and optimizer state held (Eq. 1) */
    double lookups;            /* rows read: its own and those served to others (Eq. 2) */
    double ids;                /* ids of its slice of the batch */
    double fetched;            /* rows (parts of rows) it fetches from other ranks */
    double misses;             /* of its lookups as owner, those predicted not in its cache */
    double fetch_misses;       /* of the rows it fetches, those not in their owner's cache (a
                                  get reads the owner's memory) */
    double rep_rows;           /* replicated rows (parts of rows) it keeps */
    double sent, recv;         /* bytes: rows served / fetched, gradients to / from owners, the
                                  sparse all-reduce of replicated rows and the dense one */
    double seconds;            /* embedding step time: (ids * slice_s + lookups * L + (misses +
                                  fetch_misses) * miss_s + rep_rows * rep_row_s) * ranks_per_core + fetched *
                                  get_s + point-to-point bytes / bw_p2p + replicated rows'
                                  all-reduce bytes / bw_ar + skew_s (the dense all-reduce, the
                                  same under every plan, is left out) */
} rec_plan_cost;

typedef struct rec_plan rec_plan;

/* Builds a plan of `kind` for the profiled model (REC_EINVAL when it cannot fit hw.mem_bytes,
 * naming the rank and the bytes). */
rec_status rec_plan_build(rec_plan **out, rec_plan_kind kind, const rec_plan_profile *prof, const rec_plan_hw *hw);
/* Recomputes the predicted costs of p under another profile and machine (a loaded plan, or a
 * plan made from another sample). Same model shape, else REC_EINVAL. */
rec_status rec_plan_predict(rec_plan *p, const rec_plan_profile *prof, const rec_plan_hw *hw);

int rec_plan_ranks(const rec_plan *p);                 /* N */
int rec_plan_tables(const rec_plan *p);                /* F */
rec_plan_kind rec_plan_get_kind(const rec_plan *p);
int64_t rec_plan_rows(const rec_plan *p, int f);       /* R_f */
int rec_plan_dim(const rec_plan *p);                   /* E */
/* Column parts of table f: returns C >= 1; col0 (C + 1 entries) gets the boundaries when not NULL. */
int rec_plan_col_parts(const rec_plan *p, int f, int *col0);

/* One column part of one table (see the top of this file); views into the plan. */
typedef struct rec_plan_part {
    int c0, c1;                /* columns [c0, c1) */
    int64_t n_seg;             /* >= 1 */
    const int64_t *seg_start;  /* (n_seg) rising, seg_start[0] == 0 */
    const int *seg_owner;      /* (n_seg) rank or REC_PLAN_EVERY */
    int64_t n_hot;
    const int64_t *hot_row;    /* (n_hot) rising */
    const int *hot_owner;      /* (n_hot) */
} rec_plan_part;
void rec_plan_get_part(const rec_plan *p, int f, int c, rec_plan_part *out);

/* The owner rank of row r of table f, column part c, or REC_PLAN_EVERY. O(log). */
int rec_plan_owner(const rec_plan *p, int f, int c, int64_t r);
/* Per rank (N): the costs the plan was built or last predicted with. */
const rec_plan_cost *rec_plan_costs(const rec_plan *p);
/* A lower bound of the max step time of any plan on the profile it was predicted with: all
 * lookups spread evenly, and each row moved the cheaper way, fetched by its users or
 * replicated, its bytes spread evenly (plan.c). */
double rec_plan_lower_bound(const rec_plan *p);
/* A digest of the placement (every part's columns, segments and hot rows). */
uint64_t rec_plan_digest(const rec_plan *p);
/* OPER's final partition threshold (0 for other kinds). */
double rec_plan_threshold(const rec_plan *p);

/* Plan files: JSON {"format": "rectrain-plan", "version": 1, "kind", "ranks", "dim",
 * "tables": [{"rows", "parts": [{"cols": [c0, c1], "segments": [[start, owner], ...],
 * "hot": [[row, owner], ...]}]}], "predicted": [{"rank", "mem_bytes", ...}]}, owner -1 for
 * replicated. Loading checks every field against the model it is for (ranks, tables, rows,
 * dim) and refuses anything else with REC_EFORMAT / REC_EINVAL naming the file and the JSON
 * path. Saving is atomic (PATH.tmp, then rename). */
rec_status rec_plan_save(const rec_plan *p, const char *path);
/* Loading and parsing also read TorchRec's plans, as dev/torchrec_plan.py dumps its
 * ParameterShardings: {"table_plans": {"t0": {"sharding_type": "table_wise", "ranks": [5],
 * "shards": [{"rank": 5, "offsets": [0, 0], "sizes": [1460, 16]}]}, ...}}. Tables are t0..t{F-1}
 * (the model's sparse features in order) or m->names; sharding types table_wise, row_wise,
 * column_wise, table_row_wise, table_column_wise (shards: [row, column] offsets and sizes) and
 * data_parallel (replicated on every rank). The shards of a table must tile its R_f rows x E
 * columns, on ranks < N; they become column parts at the shards' column edges, each cut into
 * row segments (any row blocks, even or not). Refused with REC_EINVAL / REC_EFORMAT naming the
 * file, the JSON path, the table and the shard: an unknown table or sharding type, a table
 * missing or placed twice, rows or columns in no shard or in two, a rank >= N, a
 * data_parallel table on only some ranks. The plan's kind is REC_PLAN_TORCHREC. */
rec_status rec_plan_load(rec_plan **out, const char *path, const rec_plan_model *m);
rec_status rec_plan_parse(rec_plan **out, const char *text, size_t len, const char *origin, const rec_plan_model *m);

void rec_plan_free(rec_plan *p);

#ifdef __cplusplus
}
#endif
#endif
