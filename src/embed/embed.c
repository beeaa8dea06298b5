/* Embedding tables, pooled bags and the sparse optimizers (embed.h): tables, the fused
 * forward and backward drivers with their per-call work mapping, and the backward kernels.
 * The forward kernels are in pool.c, the schedule candidates, tuner and plans in tune.c, the
 * float64 references in embed_ref.c.
 *
 * Memory: all tables are one (sum_f R_f E_f) float block, table f at toff[f]; the optimizer
 * state is one block too, table f at soff[f]. The backward pass needs no dense gradient of
 * the model: DENSE tables accumulate into a per-thread scratch as large as the largest table
 * DENSE serves (at most REC_EMBED_DENSE_MAX_FLOATS floats, allocated at init); RADIX tables
 * gather the batch's (id, bag, coefficient) entries into one scratch block (COUNT tables put
 * their pairs there too) sized at init for max_batch rows with REC_EMBED_NNZ_GUESS ids per
 * bag and feature, grown only when a batch carries more ids than any before (`grows` counts
 * it), so a steady-state loop does not allocate. Forward work items live in a block sized
 * at init for max_batch rows.
 *
 * Threads (OpenMP, `num_threads(nt)`): init over tables; forward over chunks of batch rows
 * (the row pass of one-hot ROW tables) and then work items, backward over tables, all mapped
 * at each call from the batch's real pooling factors (RecFlex §IV-B's host-side mapping
 * adapted to threads): the forward's items in column order, cut into walks of equal
 * estimated cost that pairs of threads take from both ends (map_items, walk_claim); the
 * backward's tables largest estimated cost first from a shared counter. Each
 * work item computes its results with the same arithmetic in the same order whatever thread
 * runs it and whatever its schedule, so results are bitwise identical for every thread count
 * and plan. Errors found by several threads are reduced to the first in (feature, batch row)
 * order, so the message does not depend on scheduling either.
 */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "embed_impl.h"
#include "rectrain/core.h"

enum {
    REC_EMBED_NNZ_GUESS = 1,  /* ids per bag assumed when sizing the backward scratch */
    MIN_BAGS_PER_ITEM = 8,    /* a SAMPLE item holds at least this many bags (or the rest) */
    ROW_CHUNK_BYTES = 256 << 10, /* output a chunk of the row pass covers (row_pass) ... */
    ROW_CHUNK_ROWS = 16,         /* ... at least this many rows ... */
    ROW_CHUNK_MAX = 64,          /* ... at most (chunks are claimed: the last ones balance the threads) */
};

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
rec_sparse_opt_config rec_sparse_opt_defaults(rec_sparse_opt_kind kind, float lr) {
    rec_sparse_opt_config c = {kind, lr, 0.0f, 0.0f};
    if (kind == REC_SPARSE_ADAGRAD) c.eps = 1e-10f;          /* torch.optim.Adagrad */
    if (kind == REC_SPARSE_ROWWISE_ADAGRAD) c.eps = 1e-8f;   /* FBGEMM */
    return c;
}

static int n_threads(const rec_embed *e) { return e->threads > 0 ? e->threads : omp_get_max_threads(); }

static size_t state_len(rec_sparse_opt_kind kind, int64_t R, int E) {
    if (kind == REC_SPARSE_ADAGRAD) return (size_t)R * (size_t)E;
    if (kind == REC_SPARSE_ROWWISE_ADAGRAD) return (size_t)R;
    return 0;
}

static rec_status check_config(const rec_embed_config *c) {
    if (c->n_tables < 0)
        return rec_errorf(REC_EINVAL, "embedding: n_tables is %d; it must be >= 0", c->n_tables);
    if (c->n_tables > 0 && (!c->rows || !c->dims))
        return rec_errorf(REC_EINVAL, "embedding: rows and dims must point to %d values each", c->n_tables);
    for (int f = 0; f < c->n_tables; f++) {
        if (c->rows[f] < 1)
            return rec_errorf(REC_EINVAL, "embedding: table %d has %lld rows; every table needs at least 1",
                              f, (long long)c->rows[f]);
        if (c->dims[f] < 1)
            return rec_errorf(REC_EINVAL, "embedding: table %d has dim %d; every dim must be >= 1", f, c->dims[f]);
    }
    if (c->pooling != REC_POOL_SUM && c->pooling != REC_POOL_MEAN)
        return rec_errorf(REC_EINVAL, "embedding: unknown pooling %d (want REC_POOL_SUM or REC_POOL_MEAN)", (int)c->pooling);
    const rec_sparse_opt_config *o = &c->opt;
    if (o->kind != REC_SPARSE_SGD && o->kind != REC_SPARSE_ADAGRAD && o->kind != REC_SPARSE_ROWWISE_ADAGRAD)
        return rec_errorf(REC_EINVAL, "embedding: unknown sparse optimizer kind %d (want SGD, ADAGRAD or ROWWISE_ADAGRAD)",
                          (int)o->kind);
    if (!(o->lr > 0.0f) || isinf(o->lr))
        return rec_errorf(REC_EINVAL, "embedding: optimizer lr is %g; it must be a finite number > 0", o->lr);
    if (!(o->eps >= 0.0f) || isinf(o->eps))
        return rec_errorf(REC_EINVAL, "embedding: optimizer eps is %g; it must be finite and >= 0", o->eps);
    if (!(o->init_acc >= 0.0f) || isinf(o->init_acc))
        return rec_errorf(REC_EINVAL, "embedding: optimizer init_acc is %g; it must be finite and >= 0", o->init_acc);
    if (c->max_batch < 1)
        return rec_errorf(REC_EINVAL, "embedding: max_batch is %d; it must be >= 1", c->max_batch);
    if (c->threads < 0)
        return rec_errorf(REC_EINVAL, "embedding: threads is %d; give 0 (OpenMP default) or a positive count", c->threads);
    return REC_OK;
}

void rec_embed_free(rec_embed *e) {
    if (!e) return;
    rec_free(e->rows);
    rec_free(e->dims);
    rec_free(e->col);
    rec_free(e->toff);
    rec_free(e->soff);
    rec_free(e->tables);
    rec_free(e->state);
    rec_free(e->ent);
    rec_free(e->ebase);
    rec_free(e->maxid);
    rec_free(e->nent);
    rec_free(e->bpath);
    rec_free(e->err);
    rec_free(e->acc);
    rec_free(e->hist);
    rec_free(e->dacc);
    rec_free(e->dstamp);
    rec_free(e->dlist);
    rec_free(e->depoch);
    rec_free(e->sched);
    rec_free(e->items);
    rec_free(e->walk);
    rec_free(e->order);
    rec_free(e->cost);
    rec_free(e->rowok);
    rec_free(e->rtab);
    rec_free(e->rjob);
    rec_free(e->prof_fwd);
    rec_free(e->prof_bwd);
    rec_free(e->prof_ids);
    embed_tuner_free(e->tuner);
    rec_free(e);
}

/* Table f: value (2u - 1) sqrt(1/R_f), u = rec_rng_uniform of stream (seed, f), row-major —
 * dlrm_s_pytorch.py create_emb's np.random.uniform(-sqrt(1/n), sqrt(1/n), (n, m)). */
static void init_table(float *T, int64_t R, int E, uint64_t seed, int f) {
    rec_rng r;
    rec_rng_seed(&r, seed, (uint64_t)f);
    const double a = sqrt(1.0 / (double)R);
    const size_t n = (size_t)R * (size_t)E;
    for (size_t i = 0; i < n; i++) T[i] = (float)((2.0 * rec_rng_uniform(&r) - 1.0) * a);
}

rec_status rec_embed_init(rec_embed **out, const rec_embed_config *cfg) {
    *out = NULL;
    REC_TRY(check_config(cfg));
    const int F = cfg->n_tables;
    /* Sizes first, so that an impossible request fails before anything is allocated. */
    size_t nt = 0, ns = 0;
    int64_t W = 0;
    for (int f = 0; f < F; f++) {
        const size_t E = (size_t)cfg->dims[f];
        if ((uint64_t)cfg->rows[f] > (SIZE_MAX / sizeof(float) - nt) / E)
            return rec_errorf(REC_ENOMEM, "embedding: tables 0..%d hold more than %zu floats; shrink the tables",
                              f, SIZE_MAX / sizeof(float));
        nt += (size_t)cfg->rows[f] * E;
        ns += state_len(cfg->opt.kind, cfg->rows[f], cfg->dims[f]);
        W += cfg->dims[f];
    }
    if (W > INT32_MAX) return rec_errorf(REC_EINVAL, "embedding: the dims add up to %lld; at most %d", (long long)W, INT32_MAX);
    /* The most forward work items a call can make (map_items); a walk packs item indices in 32 bits. */
    const int64_t bags_per_item = MIN_BAGS_PER_ITEM,
                  max_items = (int64_t)F * (((int64_t)cfg->max_batch + bags_per_item - 1) / bags_per_item);
    if (max_items >= UINT32_MAX)
        return rec_errorf(REC_EINVAL,
                          "embedding: %d tables with max_batch %d make up to %lld forward work items; at most %u: "
                          "lower max_batch or split the tables between engines",
                          F, cfg->max_batch, (long long)max_items, UINT32_MAX - 1);

    rec_embed *e;
    REC_TRY(rec_alloc((void **)&e, sizeof *e, "embedding"));
    e->F = F;
    e->W = (int)W;
    e->max_batch = cfg->max_batch;
    e->threads = cfg->threads;
    e->pooling = cfg->pooling;
    e->opt = cfg->opt;
    e->trust = cfg->trust_ids != 0;
    e->nt = n_threads(e);
    const size_t nf = (size_t)F + 1, ntf = (size_t)e->nt * nf;
    int64_t count_rows = 0, dense_rows = 0, dense_floats = 0; /* the largest tables COUNT / DENSE may serve */
    for (int f = 0; f < F; f++) {
        const int64_t R = cfg->rows[f], RE = R * cfg->dims[f];
        if (R <= REC_EMBED_COUNT_MAX_ROWS && R > count_rows) count_rows = R;
        if (RE <= REC_EMBED_DENSE_MAX_FLOATS) {
            if (RE > dense_floats) dense_floats = RE;
            if (R > dense_rows) dense_rows = R;
        }
    }
    e->ent_cap = (int64_t)cfg->max_batch * F * REC_EMBED_NNZ_GUESS;
    rec_status s = rec_alloc((void **)&e->rows, nf * sizeof(int64_t), "embedding rows");
    if (!s) s = rec_alloc((void **)&e->dims, nf * sizeof(int), "embedding dims");
    if (!s) s = rec_alloc((void **)&e->col, nf * sizeof(int), "embedding columns");
    if (!s) s = rec_alloc((void **)&e->toff, nf * sizeof(size_t), "embedding table offsets");
    if (!s) s = rec_alloc((void **)&e->soff, nf * sizeof(size_t), "embedding state offsets");
    if (!s) s = rec_alloc((void **)&e->tables, (nt ? nt : 1) * sizeof(float), "embedding tables");
    if (!s && ns) s = rec_alloc((void **)&e->state, ns * sizeof(float), "embedding optimizer state");
    if (!s) s = rec_alloc((void **)&e->ent, (size_t)(2 * e->ent_cap + 1) * sizeof(bag_entry), "embedding backward scratch");
    if (!s) s = rec_alloc((void **)&e->ebase, nf * sizeof(int64_t), "embedding backward scratch");
    if (!s) s = rec_alloc((void **)&e->maxid, nf * sizeof(int64_t), "embedding backward scratch");
    if (!s) s = rec_alloc((void **)&e->nent, nf * sizeof(int64_t), "embedding backward scratch");
    if (!s) s = rec_alloc((void **)&e->bpath, nf, "embedding backward scratch");
    if (!s) s = rec_alloc((void **)&e->err, nf * sizeof(embed_err), "embedding backward scratch");
    if (!s) s = rec_alloc((void **)&e->acc, (size_t)e->nt * (size_t)(W + 1) * sizeof(float), "embedding backward scratch");
    if (!s && count_rows)
        s = rec_alloc((void **)&e->hist, (size_t)e->nt * (size_t)(count_rows + 2) * sizeof(uint32_t), "embedding sort scratch");
    e->hist_stride = count_rows + 2;
    e->dacc_stride = (dense_floats + 15) & ~(int64_t)15;
    e->drow_stride = (dense_rows + 15) & ~(int64_t)15;
    if (!s && dense_rows) s = rec_alloc((void **)&e->dacc, (size_t)e->nt * (size_t)e->dacc_stride * sizeof(float), "embedding dense scratch");
    if (!s && dense_rows) s = rec_alloc((void **)&e->dstamp, (size_t)e->nt * (size_t)e->drow_stride * sizeof(uint32_t), "embedding dense scratch");
    if (!s && dense_rows) s = rec_alloc((void **)&e->dlist, (size_t)e->nt * (size_t)e->drow_stride * sizeof(int32_t), "embedding dense scratch");
    if (!s && dense_rows) s = rec_alloc((void **)&e->depoch, (size_t)e->nt * 16 * sizeof(uint32_t), "embedding dense scratch");
    if (!s) s = rec_alloc((void **)&e->sched, nf * sizeof(rec_embed_sched), "embedding plan");
    if (!s) s = rec_alloc((void **)&e->items, (size_t)(max_items + 1) * sizeof(embed_item), "embedding work items");
    if (!s) s = rec_alloc((void **)&e->walk, (size_t)(e->nt + 1) / 2 * sizeof(embed_walk), "embedding work items");
    if (!s) s = rec_alloc((void **)&e->order, nf * sizeof(int32_t), "embedding work items");
    if (!s) s = rec_alloc((void **)&e->cost, nf * sizeof(double), "embedding work items");
    if (!s) s = rec_alloc((void **)&e->rowok, nf, "embedding row pass");
    if (!s) s = rec_alloc((void **)&e->rtab, nf * sizeof(row_table), "embedding row pass");
    if (!s) s = rec_alloc((void **)&e->rjob, nf * sizeof(row_job), "embedding row pass");
    if (!s) s = rec_alloc((void **)&e->prof_fwd, ntf * sizeof(double), "embedding profile");
    if (!s) s = rec_alloc((void **)&e->prof_bwd, ntf * sizeof(double), "embedding profile");
    if (!s) s = rec_alloc((void **)&e->prof_ids, 2 * nf * sizeof(double), "embedding profile");
    if (s) {
        rec_embed_free(e);
        return s;
    }
    for (int f = 0; f < F; f++) {
        e->sched[f] = rec_embed_sched_default();
        e->rows[f] = cfg->rows[f];
        e->dims[f] = cfg->dims[f];
        e->col[f + 1] = e->col[f] + cfg->dims[f];
        e->toff[f + 1] = e->toff[f] + (size_t)cfg->rows[f] * (size_t)cfg->dims[f];
        e->soff[f + 1] = e->soff[f] + state_len(cfg->opt.kind, cfg->rows[f], cfg->dims[f]);
    }
    const uint64_t seed = cfg->seed;
    const float acc0 = cfg->opt.init_acc;
    /* Each table is one RNG stream drawn in row-major order, so tables are independent work
     * items and the values do not depend on the thread count. */
#pragma omp parallel for num_threads(e->nt) schedule(dynamic, 1)
    for (int f = 0; f < F; f++) {
        init_table(e->tables + e->toff[f], e->rows[f], e->dims[f], seed, f);
        if (e->state && acc0 != 0.0f)
            for (size_t i = e->soff[f]; i < e->soff[f + 1]; i++) e->state[i] = acc0;
    }
    *out = e;
    return REC_OK;
}

int rec_embed_tables(const rec_embed *e) { return e->F; }
int64_t rec_embed_rows(const rec_embed *e, int f) { return f >= 0 && f < e->F ? e->rows[f] : 0; }
int rec_embed_dim(const rec_embed *e, int f) { return f >= 0 && f < e->F ? e->dims[f] : 0; }
int rec_embed_out_width(const rec_embed *e) { return e->W; }
float *rec_embed_table(rec_embed *e, int f) { return f >= 0 && f < e->F ? e->tables + e->toff[f] : NULL; }
float *rec_embed_state(rec_embed *e, int f) {
    return f >= 0 && f < e->F && e->state ? e->state + e->soff[f] : NULL;
}
size_t rec_embed_state_len(const rec_embed *e, int f) {
    return f >= 0 && f < e->F ? e->soff[f + 1] - e->soff[f] : 0;
}


/* ---- shared checks ------------------------------------------------------------------------ */

static rec_status check_call(const rec_embed *e, const char *who, const rec_batch *b, int first_feature) {
    if (b->n < 0 || b->n > e->max_batch)
        return rec_errorf(REC_EINVAL, "embedding %s: batch of %lld rows, but max_batch is %d; raise max_batch",
                          who, (long long)b->n, e->max_batch);
    if (first_feature < 0 || (int64_t)first_feature + e->F > b->n_sparse)
        return rec_errorf(REC_EINVAL,
                          "embedding %s: features %d..%d of a batch with %d sparse features; the %d tables "
                          "need first_feature in [0, %d]",
                          who, first_feature, first_feature + e->F - 1, b->n_sparse, e->F, b->n_sparse - e->F);
    return REC_OK;
}

/* Is bag `row` of j a valid range of its id slots? */
static inline int bag_ok(const rec_jagged *j, int64_t row) {
    const int64_t lo = j->offsets[row], hi = j->offsets[row + 1];
    return lo >= 0 && lo <= hi && hi <= j->nnz_cap;
}

/* Turns a recorded error into the status and message; feature = batch sparse index. */
static rec_status report(const rec_embed *e, const char *who, const embed_err *x, int64_t B, int first_feature) {
    const int f = (int)(x->key / B);
    const long long row = (long long)(x->key % B);
    if (x->kind == 1)
        return rec_errorf(REC_EINVAL, "embedding%s: feature %d (table %d, %lld rows), batch row %lld: id %lld is outside [0, %lld)",
                          who, first_feature + f, f, (long long)e->rows[f], row, (long long)x->a,
                          (long long)e->rows[f]);
    return rec_errorf(REC_EINVAL,
                      "embedding%s: feature %d, batch row %lld: bag offsets [%lld, %lld) are not a valid range of "
                      "the feature's id slots; the batch is corrupt",
                      who, first_feature + f, row, (long long)x->a, (long long)x->c);
}

/* Ids of table f in the batch, clamped to the feature's slots (corrupt offsets are reported
 * by the kernels' bag checks, not here). */
static int64_t table_nnz(const rec_batch *b, int first_feature, int f) {
    const rec_jagged *j = &b->sparse[first_feature + f];
    const int64_t nnz = j->offsets[b->n] - j->offsets[0];
    return nnz < 0 ? 0 : nnz > j->nnz_cap ? j->nnz_cap : nnz;
}

/* Table f's estimated cost in the call: floats of rows read plus floats of output written,
 * the same model as FBGEMM's bandwidth figure. */
static double table_cost(const rec_embed *e, const rec_batch *b, int first_feature, int f) {
    return ((double)table_nnz(b, first_feature, f) + (double)b->n) * e->dims[f];
}

/* Orders the active tables (all, or only `only`) by estimated cost (table_cost), largest
 * first. Returns the number of active tables. e->order keeps the previous call's order (a
 * permutation of all tables; init sets the identity) and is insertion-sorted from there: a
 * batch's costs are nearly those of the last, so this is O(F) in the steady state. */
static int order_tables(rec_embed *e, const rec_batch *b, int first_feature, int only) {
    if (only >= 0) {
        e->cost[only] = table_cost(e, b, first_feature, only);
        e->order_all = 0;
        e->order[0] = only;
        return 1;
    }
    if (!e->order_all)
        for (int f = 0; f < e->F; f++) e->order[f] = f;
    e->order_all = 1;
    for (int f = 0; f < e->F; f++) e->cost[f] = table_cost(e, b, first_feature, f);
    for (int i = 1; i < e->F; i++) {
        const int f = e->order[i];
        int k = i;
        while (k > 0 && e->cost[f] > e->cost[e->order[k - 1]]) {
            e->order[k] = e->order[k - 1];
            k--;
        }
        e->order[k] = f;
    }
    return e->F;
}

/* ---- forward ------------------------------------------------------------------------------ */

/* The share of the call's estimated cost that walks 0..w cover: walk w serves threads 2w and
 * 2w + 1 (only 2w when nt is odd and w is the last). */
static double walk_goal(double total, int w, int nt) { return total * (2 * w + 2 < nt ? 2 * w + 2 : nt) / nt; }

/* The forward work items of this call (RecFlex's runtime task map), in column order: for each
 * active table in index order, TABLE gives one item; SAMPLE (and ROW outside the row pass)
 * cuts the bags into ceil(nnz / 2^grain) items of about equal ids (at least
 * MIN_BAGS_PER_ITEM bags each), cut points found by binary search on the offsets. The items
 * are then cut into walks (see walk_claim) of about equal estimated cost per thread served
 * (table_cost, a SAMPLE item costing its table's share; walk_goal). The item block, sized at
 * init, holds them all: at most F * ceil(B / MIN_BAGS_PER_ITEM). Tables in the call's row
 * pass (rowok) make none. */
static void map_items(rec_embed *e, const rec_batch *b, int first_feature, int only) {
    const int64_t B = b->n;
    const int f0 = only >= 0 ? only : 0, f1 = only >= 0 ? only + 1 : e->F;
    double total = 0;
    for (int f = f0; f < f1; f++) total += e->cost[f] = e->rowok[f] ? 0.0 : table_cost(e, b, first_feature, f);
    const int nt = e->nt, walks = (nt + 1) / 2;
    int w = 0;
    uint32_t w0 = 0; /* first item of walk w */
    double done = 0, goal = walk_goal(total, 0, nt);
    int64_t n = 0;
    for (int f = f0; f < f1; f++) {
        if (e->rowok[f]) continue;
        const rec_jagged *j = &b->sparse[first_feature + f];
        const rec_embed_sched s = e->sched[f];
        int64_t parts = 1;
        if (s.split != REC_SPLIT_TABLE) { /* SAMPLE, or ROW outside the row pass */
            parts = (table_nnz(b, first_feature, f) >> s.grain) + 1;
            const int64_t maxp = (B + MIN_BAGS_PER_ITEM - 1) / MIN_BAGS_PER_ITEM;
            if (parts > maxp) parts = maxp;
            if (parts < 1) parts = 1;
        }
        const double part_cost = e->cost[f] / (double)parts;
        /* Cut k ends at the first bag whose end offset reaches k/parts of the ids; offsets
         * that are not monotonic (a corrupt batch) only make the cuts uneven, the kernels
         * report them. */
        const int64_t base = j->offsets[0], span = j->offsets[B] - base;
        int64_t b0 = 0;
        for (int64_t k = 1; k <= parts && b0 < B; k++) {
            int64_t b1 = B;
            if (k < parts) {
                const int64_t target = base + span * k / parts;
                int64_t lo = b0 + MIN_BAGS_PER_ITEM, hi = B;
                if (lo > B) lo = B;
                while (lo < hi) {
                    const int64_t mid = lo + (hi - lo) / 2;
                    if (j->offsets[mid] < target) lo = mid + 1;
                    else hi = mid;
                }
                b1 = lo;
            }
            e->items[n++] = (embed_item){b0, b1, f};
            b0 = b1;
            done += part_cost;
            if (done >= goal && w < walks - 1) { /* walk w ends after this item */
                e->walk[w++].v = (uint64_t)n << 32 | w0;
                w0 = (uint32_t)n;
                goal = walk_goal(total, w, nt);
            }
        }
    }
    e->walk[w++].v = (uint64_t)n << 32 | w0;
    for (; w < walks; w++) e->walk[w].v = (uint64_t)n << 32 | (uint32_t)n;
}

/* Claims an item of walk r, packed as hi << 32 | lo for the items [lo, hi) left: from the
 * front (lo) or the back (hi - 1). Returns the item, or -1 when the walk is done.
 *
 * Why walks: each thread of a walk writes neighbouring tables' slices of the same output
 * lines one after the other (a line stays in its cache between items), and the walk's two
 * threads meet only in its middle, so they seldom write the same line at the same time.
 * Against the items in cost order from one shared counter (neighbours apart), the uniform
 * table/fixed/pf8 forward, same batches, in turns: B 1.04-1.16x, E 1.04-1.07x, D 0.99-1.06x
 * faster, A and C within noise. */
static int64_t walk_claim(embed_walk *r, int back) {
    uint64_t v = __atomic_load_n(&r->v, __ATOMIC_RELAXED);
    for (;;) {
        const uint32_t lo = (uint32_t)v, hi = (uint32_t)(v >> 32);
        if (lo >= hi) return -1;
        const uint64_t nv = back ? (uint64_t)(hi - 1) << 32 | lo : (uint64_t)hi << 32 | (lo + 1);
        if (__atomic_compare_exchange_n(&r->v, &v, nv, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) return back ? hi - 1 : lo;
    }
}

/* Bags [b0, b1) of j: returns the first that is not a valid range of the feature's id slots
 * (b1 when all are), and sets *one to whether every bag before it holds exactly one id. The
 * common case is one pass without branches, which gcc vectorises: with every offset >= 0 the
 * differences cannot overflow, and non-negative differences make every bag's end at most
 * off[b1]. Only a batch that fails it is scanned bag by bag. */
static int64_t scan_bags(const rec_jagged *j, int64_t b0, int64_t b1, int *one) {
    const int64_t *off = j->offsets;
    int64_t neg = off[b0], many = 0;
    for (int64_t r = b0; r < b1; r++) {
        const int64_t d = (int64_t)((uint64_t)off[r + 1] - (uint64_t)off[r]);
        neg |= off[r + 1] | d;
        many |= d ^ 1;
    }
    if (neg >= 0 && off[b1] <= j->nnz_cap) {
        *one = many == 0;
        return b1;
    }
    int64_t bv = b0;
    many = 0;
    for (; bv < b1 && bag_ok(j, bv); bv++) many |= (off[bv + 1] - off[bv]) ^ 1;
    *one = many == 0;
    return bv;
}

/* Runs one work item. Returns 0, or 1 with *x set to its first error (bags after it are
 * left unwritten). */
static int forward_item(const rec_embed *e, const rec_batch *b, int first_feature, const embed_item *it, float *out,
                        embed_err *x) {
    const int f = it->f;
    const rec_jagged *j = &b->sparse[first_feature + f];
    const rec_embed_sched s = e->sched[f];
    const int64_t B = b->n;
    /* Bags up to the first bad one are valid, and their ids lie in [off[b0], off[bv]). */
    int one;
    const int64_t bv = scan_bags(j, it->b0, it->b1, &one);
    const pool_job job = {e->tables + e->toff[f], e->rows[f], e->dims[f], e->W, j->offsets, j->ids, j->weights,
                          out + e->col[f], e->pooling == REC_POOL_MEAN, !e->trust, s.pf, j->wide, one};
    const int64_t k = embed_pool(&job, s.kernel, it->b0, bv);
    if (k >= 0) {
        int64_t r = it->b0; /* the bag holding position k */
        while (j->offsets[r + 1] <= k) r++;
        *x = (embed_err){(int64_t)f * B + r, 1, rec_jagged_id(j, k), 0};
        return 1;
    }
    if (bv < it->b1) {
        *x = (embed_err){(int64_t)f * B + bv, 2, j->offsets[bv], j->offsets[bv + 1]};
        return 1;
    }
    return 0;
}

/* ---- the row pass (split ROW) ---------------------------------------------------------------
 * One-hot ROW tables are pooled row by row: a thread takes a chunk of batch rows and writes
 * every such table's slice of a row before the next row, so the output is written in order
 * and a row's lines fill while they are in L1. On Kaggle's 26 one-hot dim-16 tables, 2
 * threads, the same batches in turns: row/fixed/pf0/g12 0.176 ms per batch of 2048 against
 * 0.236 for table/fixed/pf0 and 0.214 for sample/fixed/pf8/g10 (a bare row-major loop without
 * checks or classes, in a throwaway driver: 0.141-0.146 where the engine took 0.161-0.168, so
 * the checks, the scan and the phases cost about 13%). The pass is three phases of
 * the forward's one parallel region: each thread checks its share of the rows of the
 * candidate tables (row_scan); one thread groups the tables that passed into classes and maps
 * the other tables' items (row_classes, map_items); the threads claim chunks of rows until
 * none is left (row_pass), then take the walks. */

/* Does table f's schedule give it to the row pass when its feature is one-hot? */
static int row_sched(const rec_embed *e, int f) {
    return e->sched[f].split == REC_SPLIT_ROW && embed_kernel_native(REC_KERN_FIXED, e->dims[f]);
}

/* Phase 1: this thread's bags [r0, r1) of each candidate table; a table with a bag there that
 * is not exactly one id in range of its slots leaves the pass (its item checks and reports). */
static void row_scan(rec_embed *e, const rec_batch *b, int first_feature, int64_t r0, int64_t r1) {
    for (int f = 0; f < e->F; f++) {
        if (!__atomic_load_n(&e->rowok[f], __ATOMIC_RELAXED)) continue;
        int one;
        if (scan_bags(&b->sparse[first_feature + f], r0, r1, &one) < r1 || !one)
            __atomic_store_n(&e->rowok[f], 0, __ATOMIC_RELAXED);
    }
}

/* Phase 2: the tables that passed, in classes of equal (dim, id width, weighting, pf) that one
 * specialised loop pools; each class's tables and the classes in index order of their first
 * table. A placed table's rowok becomes 2. */
static void row_classes(rec_embed *e, const rec_batch *b, int first_feature, float *out) {
    row_table *t = e->rtab;
    e->n_rjob = 0;
    for (int f = 0; f < e->F; f++) {
        if (e->rowok[f] != 1) continue;
        const rec_jagged *jf = &b->sparse[first_feature + f];
        row_job *c = &e->rjob[e->n_rjob++];
        *c = (row_job){t, 0, e->dims[f], jf->wide, jf->weights != NULL, e->sched[f].pf, !e->trust, e->W, out};
        for (int g = f; g < e->F; g++) {
            const rec_jagged *j = &b->sparse[first_feature + g];
            if (e->rowok[g] != 1 || e->dims[g] != c->E || j->wide != c->wide || (j->weights != NULL) != c->weighted ||
                e->sched[g].pf != c->pf)
                continue;
            const int64_t k0 = j->offsets[0]; /* bag r's id is at k0 + r */
            const void *idx = j->wide ? (const void *)(j->ids64 + k0) : (const void *)(j->ids32 + k0);
            t[c->n++] = (row_table){e->tables + e->toff[g], idx, j->weights ? j->weights + k0 : NULL, e->rows[g],
                                    e->col[g], g};
            e->rowok[g] = 2;
        }
        t += c->n;
    }
}

/* After the pass met a bad id: the first (feature, row order) among its tables in rows
 * [r0, r1), found again table by table (the pass walks rows first). */
static int row_first_error(const rec_embed *e, const rec_batch *b, int first_feature, int64_t r0, int64_t r1,
                           embed_err *x) {
    for (int f = 0; f < e->F; f++) {
        if (!e->rowok[f]) continue;
        const rec_jagged *j = &b->sparse[first_feature + f];
        for (int64_t r = r0; r < r1; r++) {
            const int64_t id = rec_jagged_id(j, j->offsets[0] + r);
            if ((uint64_t)id >= (uint64_t)e->rows[f]) {
                *x = (embed_err){(int64_t)f * b->n + r, 1, id, 0};
                return 1;
            }
        }
    }
    return 0;
}

/* Phase 3: chunks of rows claimed from the shared counter *next until none is left (at least
 * ROW_CHUNK_ROWS rows, at most ROW_CHUNK_MAX, about ROW_CHUNK_BYTES of output so a chunk's
 * lines are still in L2 when the next class writes its slices of them), the classes taking
 * turns over each. With tp, each class's time is shared equally among its tables (same dim,
 * one id each). Returns 0, or 1 with *x the first error in the chunks it ran (every chunk is
 * run, so the least over the threads is the batch's first). */
static int row_pass(const rec_embed *e, const rec_batch *b, int first_feature, int64_t *next, double *tp,
                    embed_err *x) {
    const int64_t B = b->n;
    int64_t chunk = ROW_CHUNK_BYTES / ((int64_t)e->W * (int64_t)sizeof(float));
    if (chunk < ROW_CHUNK_ROWS) chunk = ROW_CHUNK_ROWS;
    if (chunk > ROW_CHUNK_MAX) chunk = ROW_CHUNK_MAX;
    x->key = INT64_MAX;
    for (;;) {
        const int64_t c0 = __atomic_fetch_add(next, chunk, __ATOMIC_RELAXED);
        if (c0 >= B) break;
        const int64_t c1 = B - c0 > chunk ? c0 + chunk : B;
        for (int c = 0; c < e->n_rjob; c++) {
            const row_job *j = &e->rjob[c];
            const double ti = tp ? rec_now() : 0.0;
            int64_t row;
            const int bad = embed_pool_rows(j, c0, c1, &row);
            if (tp) {
                const double d = (rec_now() - ti) / j->n;
                for (int k = 0; k < j->n; k++) tp[j->t[k].f] += d;
            }
            if (bad >= 0) {
                embed_err y;
                if (row_first_error(e, b, first_feature, c0, c1, &y) && y.key < x->key) *x = y;
                break;
            }
        }
    }
    return x->key != INT64_MAX;
}

rec_status embed_forward_run(rec_embed *e, const rec_batch *b, int first_feature, float *out, int only) {
    REC_TRY(check_call(e, "forward", b, first_feature));
    const int64_t B = b->n;
    const double t0 = rec_now();
    int rows = 0; /* tables the row pass may take */
    for (int f = 0; f < e->F; f++) rows += e->rowok[f] = (uint8_t)((only < 0 || f == only) && row_sched(e, f));
    embed_err first = {INT64_MAX, 0, 0, 0};
    const int prof = e->profiling, walks = (e->nt + 1) / 2;
    int64_t row_next = 0; /* first row of the row pass's next chunk */
    if (B > 0) {
#pragma omp parallel num_threads(e->nt)
        {
            embed_err mine = {INT64_MAX, 0, 0, 0}, x;
            const int th = omp_get_thread_num(), nth = omp_get_num_threads();
            const int64_t r0 = B * th / nth, r1 = B * (th + 1) / nth;
            double *tp = prof ? e->prof_fwd + (size_t)th * (size_t)(e->F + 1) : NULL;
            if (rows) {
                row_scan(e, b, first_feature, r0, r1);
#pragma omp barrier
            }
#pragma omp single
            {
                if (rows) row_classes(e, b, first_feature, out);
                map_items(e, b, first_feature, only);
            }
            if (rows && row_pass(e, b, first_feature, &row_next, tp, &x)) mine = x;
            /* Its own walk first, then the others' (a thread of a short walk helps finish
             * the longer ones; with fewer threads than asked, nothing is left undone). */
            for (int k = 0; k < walks; k++)
                for (;;) {
                    const int64_t i = walk_claim(&e->walk[(th / 2 + k) % walks], th & 1);
                    if (i < 0) break;
                    const double ti = tp ? rec_now() : 0.0;
                    if (forward_item(e, b, first_feature, &e->items[i], out, &x) && x.key < mine.key) mine = x;
                    if (tp) tp[e->items[i].f] += rec_now() - ti;
                }
            if (mine.key != INT64_MAX) {
#pragma omp critical(rec_embed_forward_err)
                if (mine.key < first.key) first = mine;
            }
        }
    }
    e->last_fwd_s = rec_now() - t0;
    e->last_ids = 0;
    for (int f = 0; f < e->F; f++)
        if (only < 0 || f == only) {
            const double nnz = (double)table_nnz(b, first_feature, f);
            e->last_ids += nnz;
            if (prof) e->prof_ids[f] += nnz;
        }
    if (first.key != INT64_MAX) return report(e, " forward", &first, B, first_feature);
    return REC_OK;
}

rec_status rec_embed_forward(rec_embed *e, const rec_batch *b, int first_feature, float *out) {
    if (e->tuner) embed_tune_before(e, 0);
    const rec_status s = embed_forward_run(e, b, first_feature, out, -1);
    if (e->tuner && !s) embed_tune_after(e, 0);
    return s;
}

/* ---- backward + update -------------------------------------------------------------------- */

/* Gathers table f's entries (in batch position order) into ent[0, cap) and checks its bags,
 * recording the first bad (row) in e->err[f] (key INT64_MAX when none). Entries beyond cap
 * are counted, not written: that only happens when the offsets are corrupt, which is then
 * reported. Returns the number of entries. */
static int64_t gather(rec_embed *e, const rec_batch *b, int first_feature, int f, bag_entry *ent, int64_t cap) {
    const rec_jagged *j = &b->sparse[first_feature + f];
    const int64_t R = e->rows[f], B = b->n;
    const int mean = e->pooling == REC_POOL_MEAN, check = !e->trust;
    int64_t n = 0, maxid = 0;
    e->err[f].key = INT64_MAX;
    for (int64_t r = 0; r < B; r++) {
        if (!bag_ok(j, r)) {
            e->err[f] = (embed_err){(int64_t)f * B + r, 2, j->offsets[r], j->offsets[r + 1]};
            break;
        }
        const int64_t lo = j->offsets[r], hi = j->offsets[r + 1];
        const float L = (float)(hi - lo);
        for (int64_t k = lo; k < hi; k++) {
            const int64_t id = rec_jagged_id(j, k);
            if (check && (uint64_t)id >= (uint64_t)R) {
                e->err[f] = (embed_err){(int64_t)f * B + r, 1, id, 0};
                e->maxid[f] = maxid;
                return n;
            }
            float c = j->weights ? j->weights[k] : 1.0f;
            if (mean) c /= L;
            if (n < cap) ent[n] = (bag_entry){id, {(int32_t)r, c}};
            n++;
            if (id > maxid) maxid = id;
        }
    }
    e->maxid[f] = maxid;
    return n;
}

/* RADIX: stable sort of a (n) by id (LSD radix, 8 bits a pass, only as many passes as maxid
 * needs; insertion sort for short runs), using t (n) as the second buffer. Stability keeps
 * each id's entries in batch position order. Returns whichever buffer holds the result. */
static bag_entry *sort_radix(bag_entry *a, bag_entry *t, int64_t n, uint64_t maxid) {
    if (n <= 32) {
        for (int64_t i = 1; i < n; i++) {
            bag_entry v = a[i];
            int64_t k = i - 1;
            while (k >= 0 && a[k].id > v.id) {
                a[k + 1] = a[k];
                k--;
            }
            a[k + 1] = v;
        }
        return a;
    }
    for (int shift = 0; shift < 64 && (maxid >> shift) != 0; shift += 8) {
        int64_t count[257] = {0};
        for (int64_t i = 0; i < n; i++) count[((uint64_t)a[i].id >> shift & 255) + 1]++;
        for (int d = 0; d < 256; d++) count[d + 1] += count[d];
        for (int64_t i = 0; i < n; i++) t[count[(uint64_t)a[i].id >> shift & 255]++] = a[i];
        bag_entry *x = a;
        a = t;
        t = x;
    }
    return a;
}

/* One Adagrad row step, torch/optim/_functional.py adagrad (sparse branch): st (E) += g^2,
 * p (E) -= lr * g / (sqrt(st) + eps). A function of its own so that `restrict` lets the
 * compiler vectorise it without runtime alias checks. */
static void adagrad_row(float *restrict p, float *restrict st, const float *restrict g, int E, float lr, float eps) {
    for (int c = 0; c < E; c++) {
        st[c] += g[c] * g[c];
        p[c] -= lr * (g[c] / (sqrtf(st[c]) + eps));
    }
}

/* Sums the contributions dout[bag, col ..] * coef of the pairs p[i * stride], i in [i0, i1)
 * (one id's, in position order) into acc (E), as acc = fmaf(g, coef, acc) from 0: for a
 * compile-time E <= 64 the sum stays in registers (a runtime-E loop carries it through
 * memory, a store-to-load chain per entry); every E gives the same bits. E = 128 sums in acc
 * itself: a 128-float local here was miscompiled by gcc 12 at -O3 (wrong sums on some
 * machines, right at -O2 or with -fno-tree-loop-distribute-patterns), caught by the radix
 * and count sorts disagreeing with DENSE (test_embed_sched, "wide rows"). stride is 2 for
 * the pairs inside bag_entry, 1 for a bag_pair array. */
static inline __attribute__((always_inline)) void sum_pairs(const bag_pair *restrict p, size_t stride, int64_t i0,
                                                            int64_t i1, const float *restrict dout, int W, int col,
                                                            float *restrict acc, const int E) {
    float local[64];
    float *restrict a = E <= 64 ? local : acc;
    for (int c = 0; c < E; c++) a[c] = 0.0f;
    for (int64_t i = i0; i < i1; i++) {
        const float *restrict g = dout + (size_t)p[(size_t)i * stride].bag * W + col; /* (E) */
        const float k = p[(size_t)i * stride].coef;
        for (int c = 0; c < E; c++) a[c] = fmaf(g[c], k, a[c]);
    }
    if (E <= 64)
        for (int c = 0; c < E; c++) acc[c] = local[c];
}

static void sum_pairs_any(const bag_pair *restrict p, size_t stride, int64_t i0, int64_t i1, const float *restrict dout,
                          int W, int col, float *restrict acc, int E) {
    switch (E) {
    case 1: sum_pairs(p, stride, i0, i1, dout, W, col, acc, 1); return;
    case 2: sum_pairs(p, stride, i0, i1, dout, W, col, acc, 2); return;
    case 4: sum_pairs(p, stride, i0, i1, dout, W, col, acc, 4); return;
    case 8: sum_pairs(p, stride, i0, i1, dout, W, col, acc, 8); return;
    case 16: sum_pairs(p, stride, i0, i1, dout, W, col, acc, 16); return;
    case 32: sum_pairs(p, stride, i0, i1, dout, W, col, acc, 32); return;
    case 64: sum_pairs(p, stride, i0, i1, dout, W, col, acc, 64); return;
    case 128: sum_pairs(p, stride, i0, i1, dout, W, col, acc, 128); return;
    default:
        for (int c = 0; c < E; c++) acc[c] = 0.0f;
        for (int64_t i = i0; i < i1; i++) {
            const float *g = dout + (size_t)p[(size_t)i * stride].bag * W + col; /* (E) */
            const float k = p[(size_t)i * stride].coef;
            for (int c = 0; c < E; c++) acc[c] = fmaf(g[c], k, acc[c]);
        }
    }
}

/* The optimizer step of row id of table f from its summed gradient g (E) (formulas in
 * embed.h; float arithmetic as torch's and FBGEMM's kernels). */
static inline void apply_row(const rec_embed *e, float *restrict T, float *restrict S, int64_t id, int E,
                             const float *restrict g, float lr) {
    float *restrict p = T + (size_t)id * E; /* (E) */
    switch (e->opt.kind) {
    case REC_SPARSE_SGD:
        for (int c = 0; c < E; c++) p[c] -= lr * g[c];
        break;
    case REC_SPARSE_ADAGRAD:
        adagrad_row(p, S + (size_t)id * E, g, E, lr, e->opt.eps);
        break;
    case REC_SPARSE_ROWWISE_ADAGRAD: { /* FBGEMM embedding_backward_split_template, EXACT_ROWWISE_ADAGRAD */
        float sq = 0.0f;
        for (int c = 0; c < E; c++) sq += g[c] * g[c];
        S[id] += sq / (float)E;
        const float mult = lr / (sqrtf(S[id]) + e->opt.eps);
        for (int c = 0; c < E; c++) p[c] -= mult * g[c];
        break;
    }
    }
}

static inline void prefetch_update(const rec_embed *e, const float *T, const float *S, size_t id, int E) {
    __builtin_prefetch(T + id * E, 1);
    if (e->opt.kind == REC_SPARSE_ADAGRAD) __builtin_prefetch(S + id * E, 1);
    if (e->opt.kind == REC_SPARSE_ROWWISE_ADAGRAD) __builtin_prefetch(S + id, 1);
}

/* RADIX schedule: sorts table f's gathered entries by id, then sums each unique id's
 * contributions in position order and updates its row once. */
static void update_radix(rec_embed *e, int f, bag_entry *ent, bag_entry *tmp, int64_t n, const float *dout, float lr,
                         float *restrict acc, int pf) {
    const bag_entry *s = sort_radix(ent, tmp, n, (uint64_t)e->maxid[f]);
    const int E = e->dims[f], W = e->W, col = e->col[f];
    float *restrict T = e->tables + e->toff[f];
    float *restrict S = e->state ? e->state + e->soff[f] : NULL;
    for (int64_t i = 0; i < n;) {
        const int64_t id = s[i].id, i0 = i;
        while (i < n && s[i].id == id) i++;
        sum_pairs_any(&s[0].p, sizeof(bag_entry) / sizeof(bag_pair), i0, i, dout, W, col, acc, E);
        if (pf && i + pf < n) prefetch_update(e, T, S, (size_t)s[i + pf].id, E); /* a few entries ahead */
        apply_row(e, T, S, id, E, acc, lr);
    }
}

/* COUNT schedule, straight from the batch (no entry array, no separate gather): a histogram of
 * table f's ids (R + 1 slots of h), its prefix sums, a stable scatter of (bag, coef) pairs into
 * pairs (nnz) in id order, then each non-empty id's sum and update. The same pairs in the same
 * order as RADIX, so the same bits. The ids were checked (checked mode) before any update. */
static void update_count(rec_embed *e, const rec_batch *b, int first_feature, int f, bag_pair *pairs, const float *dout,
                         float lr, float *restrict acc, uint32_t *h, int pf) {
    const rec_jagged *j = &b->sparse[first_feature + f];
    const int64_t R = e->rows[f], B = b->n;
    const int E = e->dims[f], W = e->W, col = e->col[f], mean = e->pooling == REC_POOL_MEAN;
    memset(h, 0, (size_t)(R + 1) * sizeof *h);
    const int64_t lo = j->offsets[0], hi = j->offsets[B];
    for (int64_t k = lo; k < hi; k++) h[rec_jagged_id(j, k) + 1]++;
    for (int64_t r = 0; r < R; r++) h[r + 1] += h[r];
    for (int64_t r = 0; r < B; r++) {
        const int64_t a = j->offsets[r], z = j->offsets[r + 1];
        const float L = (float)(z - a);
        for (int64_t k = a; k < z; k++) {
            float c = j->weights ? j->weights[k] : 1.0f;
            if (mean) c /= L;
            pairs[h[rec_jagged_id(j, k)]++] = (bag_pair){(int32_t)r, c};
        }
    }
    /* h[id] is now the end of id's pairs (the start of id + 1's). */
    float *restrict T = e->tables + e->toff[f];
    float *restrict S = e->state ? e->state + e->soff[f] : NULL;
    int64_t start = 0;
    for (int64_t id = 0; id < R; id++) {
        const int64_t end = h[id];
        if (end == start) continue;
        if (pf && id + pf < R) prefetch_update(e, T, S, (size_t)(id + pf), E);
        sum_pairs_any(pairs, 1, start, end, dout, W, col, acc, E);
        apply_row(e, T, S, id, E, acc, lr);
        start = end;
    }
}

/* DENSE: table f's (id, coefficient) pairs straight from the batch in position order, each
 * one's contribution fmaf(g, coef, acc) added to its row of the thread's scratch acc (R, E):
 * per row the same fmaf chain from 0 in the same order as the sorting schedules, so the same
 * bits. A row's first touch in this pass (stamp != ep) starts its chain at fmaf(g, coef, 0)
 * and appends it to `list`; nothing is cleared between passes. Then each touched row is
 * updated once: by a scan in id order when more than an eighth of the rows were touched (the
 * table streams through the cache), else in first-touch order with the rows `pf` ahead
 * prefetched. The ids were checked (checked mode) before any update. */
static inline __attribute__((always_inline)) int64_t scatter_dense(const rec_embed *e, const rec_jagged *j, int64_t B,
                                                                   const float *restrict dout, int col,
                                                                   float *restrict acc, uint32_t *restrict stamp,
                                                                   int32_t *restrict list, uint32_t ep, const int E,
                                                                   const int wide) {
    const int W = e->W, mean = e->pooling == REC_POOL_MEAN;
    const int64_t *restrict i64 = j->ids64;
    const int32_t *restrict i32 = j->ids32;
    const float *restrict w = j->weights;
    int64_t n = 0;
    for (int64_t r = 0; r < B; r++) {
        const int64_t lo = j->offsets[r], hi = j->offsets[r + 1];
        const float L = (float)(hi - lo);
        const float *restrict g = dout + (size_t)r * W + col; /* (E), loaded once per bag for a fixed E */
        for (int64_t k = lo; k < hi; k++) {
            float coef = w ? w[k] : 1.0f;
            if (mean) coef /= L;
            const int64_t id = wide ? i64[k] : i32[k];
            float *restrict a = acc + (size_t)id * E; /* (E) */
            if (stamp[id] != ep) {
                stamp[id] = ep;
                list[n++] = (int32_t)id;
                for (int c = 0; c < E; c++) a[c] = fmaf(g[c], coef, 0.0f);
            } else {
                for (int c = 0; c < E; c++) a[c] = fmaf(g[c], coef, a[c]);
            }
        }
    }
    return n;
}

/* scatter_dense for any E and id width: inlined with E a constant for the specialised dims. */
#define SCATTER_CASE(EE)                                                                   \
    case EE:                                                                               \
        return j->wide ? scatter_dense(e, j, B, dout, col, acc, stamp, list, ep, EE, 1)   \
                       : scatter_dense(e, j, B, dout, col, acc, stamp, list, ep, EE, 0);
static int64_t scatter_dense_any(const rec_embed *e, const rec_jagged *j, int64_t B, const float *restrict dout,
                                 int col, float *restrict acc, uint32_t *restrict stamp, int32_t *restrict list,
                                 uint32_t ep, int E) {
    switch (E) {
        SCATTER_CASE(1)
        SCATTER_CASE(2)
        SCATTER_CASE(4)
        SCATTER_CASE(8)
        SCATTER_CASE(16)
        SCATTER_CASE(32)
        SCATTER_CASE(64)
        SCATTER_CASE(128)
    default:
        return j->wide ? scatter_dense(e, j, B, dout, col, acc, stamp, list, ep, E, 1)
                       : scatter_dense(e, j, B, dout, col, acc, stamp, list, ep, E, 0);
    }
}
#undef SCATTER_CASE

static void update_dense(rec_embed *e, const rec_batch *b, int first_feature, int f, const float *dout, float lr,
                         int th, int pf) {
    const rec_jagged *j = &b->sparse[first_feature + f];
    const int64_t R = e->rows[f];
    const int E = e->dims[f];
    float *acc = e->dacc + (size_t)th * (size_t)e->dacc_stride;
    uint32_t *stamp = e->dstamp + (size_t)th * (size_t)e->drow_stride;
    int32_t *list = e->dlist + (size_t)th * (size_t)e->drow_stride;
    uint32_t *epoch = e->depoch + (size_t)th * 16;
    if (++*epoch == 0) { /* 2^32 passes: start the stamps afresh */
        memset(stamp, 0, (size_t)e->drow_stride * sizeof *stamp);
        *epoch = 1;
    }
    const uint32_t ep = *epoch;
    const int64_t n = scatter_dense_any(e, j, b->n, dout, e->col[f], acc, stamp, list, ep, E);
    float *restrict T = e->tables + e->toff[f];
    float *restrict S = e->state ? e->state + e->soff[f] : NULL;
    if (n * 8 > R) {
        for (int64_t id = 0; id < R; id++)
            if (stamp[id] == ep) apply_row(e, T, S, id, E, acc + (size_t)id * E, lr);
    } else {
        for (int64_t i = 0; i < n; i++) {
            if (pf && i + pf < n) prefetch_update(e, T, S, (size_t)list[i + pf], E);
            apply_row(e, T, S, list[i], E, acc + (size_t)list[i] * E, lr);
        }
    }
}

/* Table f's ids checked without gathering (COUNT and DENSE tables): the first error in
 * e->err[f]. */
static void check_ids(rec_embed *e, const rec_batch *b, int first_feature, int f) {
    const rec_jagged *j = &b->sparse[first_feature + f];
    const int64_t R = e->rows[f], B = b->n;
    e->err[f].key = INT64_MAX;
    for (int64_t r = 0; r < B; r++) {
        if (!bag_ok(j, r)) {
            e->err[f] = (embed_err){(int64_t)f * B + r, 2, j->offsets[r], j->offsets[r + 1]};
            return;
        }
        if (e->trust) continue;
        for (int64_t k = j->offsets[r]; k < j->offsets[r + 1]; k++)
            if ((uint64_t)rec_jagged_id(j, k) >= (uint64_t)R) {
                e->err[f] = (embed_err){(int64_t)f * B + r, 1, rec_jagged_id(j, k), 0};
                return;
            }
    }
}

/* The backward path table f runs for a batch of nnz ids (rec_embed_sort): its effective
 * schedule's (init sized the COUNT and DENSE scratch for every table those fit), except that
 * COUNT's 32-bit histogram serves fewer than 2^31 ids. */
static int sort_path(const rec_embed *e, int f, int64_t nnz) {
    const int sort = embed_sched_effective(e, f, e->sched[f]).sort;
    return sort == REC_SORT_COUNT && nnz >= INT32_MAX ? REC_SORT_RADIX : sort;
}

rec_status embed_backward_run(rec_embed *e, const rec_batch *b, int first_feature, const float *dout, float lr,
                              int only) {
    REC_TRY(check_call(e, "backward", b, first_feature));
    if (!(lr >= 0.0f) || isinf(lr))
        return rec_errorf(REC_EINVAL, "embedding backward: learning rate is %g; it must be finite and >= 0", lr);
    const int F = e->F;
    const int64_t B = b->n;
    if (B == 0 || F == 0) return REC_OK;
    const double t0 = rec_now();
    const int n_active = order_tables(e, b, first_feature, only);
    /* Scratch slots per table from the batch's id counts: an entry per id for RADIX (and
     * as many again for its second buffer), a pair (half an entry) per id for COUNT, none
     * for DENSE. */
    e->ebase[0] = 0;
    int64_t ids = 0;
    for (int f = 0; f < F; f++) {
        const int64_t nnz = only < 0 || f == only ? table_nnz(b, first_feature, f) : 0;
        const int path = sort_path(e, f, nnz);
        e->nent[f] = nnz;
        e->bpath[f] = (uint8_t)path;
        ids += nnz;
        e->ebase[f + 1] = e->ebase[f] + (path == REC_SORT_RADIX ? nnz : path == REC_SORT_COUNT ? (nnz + 1) / 2 : 0);
    }
    const int64_t total = e->ebase[F];
    if (total > e->ent_cap) { /* the one allocation: a batch with more ids than any before */
        const int64_t cap = total > 2 * e->ent_cap ? total : 2 * e->ent_cap;
        bag_entry *ent;
        REC_TRY(rec_alloc((void **)&ent, (size_t)(2 * cap + 1) * sizeof(bag_entry), "embedding backward scratch"));
        rec_free(e->ent);
        e->ent = ent;
        e->ent_cap = cap;
        e->grows++;
    }
    bag_entry *ent = e->ent, *tmp = e->ent + e->ent_cap;
    int64_t next = 0;
#pragma omp parallel num_threads(e->nt)
    for (;;) {
        const int64_t i = __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED);
        if (i >= n_active) break;
        const int f = e->order[i];
        if (e->bpath[f] != REC_SORT_RADIX) check_ids(e, b, first_feature, f);
        else e->nent[f] = gather(e, b, first_feature, f, ent + e->ebase[f], e->ebase[f + 1] - e->ebase[f]);
    }
    for (int f = 0; f < F; f++) /* the first error in (feature, row) order, before any update */
        if ((only < 0 || f == only) && e->err[f].key != INT64_MAX)
            return report(e, " backward", &e->err[f], B, first_feature);
    next = 0;
    const int prof = e->profiling;
#pragma omp parallel num_threads(e->nt)
    {
        const int th = omp_get_thread_num();
        float *acc = e->acc + (size_t)th * (size_t)(e->W + 1);
        uint32_t *hist = e->hist ? e->hist + (size_t)th * (size_t)e->hist_stride : NULL;
        double *tp = e->prof_bwd + (size_t)th * (size_t)(F + 1);
        for (;;) {
            const int64_t i = __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED);
            if (i >= n_active) break;
            const int f = e->order[i];
            const double ti = prof ? rec_now() : 0.0;
            const int pf = e->sched[f].bpf, path = e->bpath[f];
            if (path == REC_SORT_COUNT)
                update_count(e, b, first_feature, f, (bag_pair *)(ent + e->ebase[f]), dout, lr, acc, hist, pf);
            else if (path == REC_SORT_DENSE)
                update_dense(e, b, first_feature, f, dout, lr, th, pf);
            else
                update_radix(e, f, ent + e->ebase[f], tmp + e->ebase[f], e->nent[f], dout, lr, acc, pf);
            if (prof) tp[f] += rec_now() - ti;
        }
    }
    e->last_bwd_s = rec_now() - t0;
    e->last_ids = (double)ids;
    if (prof)
        for (int f = 0; f < F; f++) e->prof_ids[F + 1 + f] += (double)e->nent[f];
    return REC_OK;
}

rec_status rec_embed_backward_update(rec_embed *e, const rec_batch *b, int first_feature, const float *dout,
                                     float lr) {
    if (e->tuner) embed_tune_before(e, 1);
    const rec_status s = embed_backward_run(e, b, first_feature, dout, lr, -1);
    if (e->tuner && !s) embed_tune_after(e, 1);
    return s;
}

/* ---- profiling ---------------------------------------------------------------------------- */

void rec_embed_profile(rec_embed *e, int on) { e->profiling = on != 0; }

void rec_embed_profile_clear(rec_embed *e) {
    const size_t n = (size_t)e->nt * (size_t)(e->F + 1);
    memset(e->prof_fwd, 0, n * sizeof(double));
    memset(e->prof_bwd, 0, n * sizeof(double));
    memset(e->prof_ids, 0, 2 * (size_t)(e->F + 1) * sizeof(double));
}

void rec_embed_profile_read(const rec_embed *e, double *fwd_s, double *bwd_s, double *fwd_ids, double *bwd_ids) {
    for (int f = 0; f < e->F; f++) {
        double a = 0, c = 0;
        for (int t = 0; t < e->nt; t++) {
            a += e->prof_fwd[(size_t)t * (size_t)(e->F + 1) + (size_t)f];
            c += e->prof_bwd[(size_t)t * (size_t)(e->F + 1) + (size_t)f];
        }
        if (fwd_s) fwd_s[f] = a;
        if (bwd_s) bwd_s[f] = c;
        if (fwd_ids) fwd_ids[f] = e->prof_ids[f];
        if (bwd_ids) bwd_ids[f] = e->prof_ids[e->F + 1 + f];
    }
}
