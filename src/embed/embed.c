/* Embedding tables, pooled bags and the sparse optimizers (embed.h): the fast path. The float64
 * references it is tested against are in embed_ref.c.
 *
 * Memory: all tables are one (sum_f R_f E_f) float block, table f at toff[f]; the optimizer
 * state is one block too, table f at soff[f]. The backward pass needs no dense gradient: it
 * gathers the batch's (id, bag, coefficient) entries per table into one scratch block sized
 * at init for max_batch rows with REC_EMBED_NNZ_GUESS ids per bag and feature, grown only when
 * a batch carries more ids than any before (the one allocation the training loop may make;
 * `grows` counts them), so a steady-state loop does not allocate.
 *
 * Threads (OpenMP, `num_threads(nt)`): init over tables; forward over (feature, block of
 * FWD_BLOCK rows) items; backward over tables. Each work item computes its results with the
 * same arithmetic in the same order whatever thread runs it, so results are bitwise identical
 * for every thread count. Errors found by several threads are reduced to the first in
 * (feature, batch row) order, so the message does not depend on scheduling either.
 */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "rectrain/core.h"
#include "rectrain/embed.h"

enum {
    FWD_BLOCK = 64,           /* batch rows per forward work item */
    PREFETCH_AHEAD = 8,       /* ids between a row's prefetch and its use */
    REC_EMBED_NNZ_GUESS = 1,  /* ids per bag assumed when sizing the backward scratch */
};

/* One id of the batch as the backward sees it: the row, the bag it came from and the factor
 * its bag's output gradient is multiplied by (w_k, or w_k / L for MEAN). */
typedef struct bag_entry {
    int64_t id;
    int32_t bag;
    float coef;
} bag_entry;

/* First error of one table / thread: key = f * B + row orders errors as (feature, row);
 * kind 1 = id out of range (a = id), kind 2 = bad bag offsets (a, c = the offsets). */
typedef struct embed_err {
    int64_t key;
    int kind;
    int64_t a, c;
} embed_err;

struct rec_embed {
    int F, W, max_batch, threads;
    rec_pooling pooling;
    rec_sparse_opt_config opt;
    int64_t *rows;        /* (F) R_f */
    int *dims;            /* (F) E_f */
    int *col;             /* (F) column of feature f in out / dout */
    size_t *toff, *soff;  /* (F+1) float offsets of table f / its state */
    float *tables;        /* (sum_f R_f E_f) */
    float *state;         /* (sum_f state_len_f), NULL for SGD */
    /* backward scratch */
    bag_entry *ent;       /* (2 * ent_cap): entries, then the radix sort's second buffer */
    int64_t ent_cap;
    int64_t grows;        /* times ent was grown by a batch */
    int64_t *ebase;       /* (F+1) first entry of table f in ent for the current batch */
    int64_t *maxid;       /* (F) largest id of table f in the current batch */
    int64_t *nent;        /* (F) entries gathered for table f */
    embed_err *err;       /* (F) first error of table f in the current batch */
    float *acc;           /* (W) per-table gradient row being summed, table f at col[f] */
};

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
    rec_free(e->err);
    rec_free(e->acc);
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

    rec_embed *e;
    REC_TRY(rec_alloc((void **)&e, sizeof *e, "embedding"));
    e->F = F;
    e->W = (int)W;
    e->max_batch = cfg->max_batch;
    e->threads = cfg->threads;
    e->pooling = cfg->pooling;
    e->opt = cfg->opt;
    const size_t nf = (size_t)F + 1;
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
    if (!s) s = rec_alloc((void **)&e->err, nf * sizeof(embed_err), "embedding backward scratch");
    if (!s) s = rec_alloc((void **)&e->acc, (size_t)(W + 1) * sizeof(float), "embedding backward scratch");
    if (s) {
        rec_embed_free(e);
        return s;
    }
    for (int f = 0; f < F; f++) {
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
#pragma omp parallel for num_threads(n_threads(e)) schedule(dynamic, 1)
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

/* ---- forward ------------------------------------------------------------------------------ */

/* Pools one bag of E = 16 (the Kaggle DLRM) in registers: two 8-wide accumulators after
 * vectorisation. The prefetch looks PREFETCH_AHEAD ids ahead in the work item's id range
 * [.., pf_end), across bags, since Criteo bags hold a single id. Returns the position of the
 * first out-of-range id, or -1. o (16) is overwritten. */
static int64_t pool16(const float *restrict T, int64_t R, const int64_t *restrict idx, const float *restrict w,
                      int64_t lo, int64_t hi, int64_t pf_end, int mean, float *restrict o) {
    float acc[16] = {0};
    for (int64_t k = lo; k < hi; k++) {
        if (k + PREFETCH_AHEAD < pf_end) {
            const int64_t p = idx[k + PREFETCH_AHEAD];
            if ((uint64_t)p < (uint64_t)R) __builtin_prefetch(T + (size_t)p * 16);
        }
        const int64_t id = idx[k];
        if ((uint64_t)id >= (uint64_t)R) return k;
        const float *t = T + (size_t)id * 16;
        if (w) {
            const float wk = w[k];
            for (int c = 0; c < 16; c++) acc[c] += wk * t[c];
        } else {
            for (int c = 0; c < 16; c++) acc[c] += t[c];
        }
    }
    const float L = (float)(hi - lo);
    if (mean && hi > lo)
        for (int c = 0; c < 16; c++) o[c] = acc[c] / L;
    else
        for (int c = 0; c < 16; c++) o[c] = acc[c];
    return -1;
}

/* Any E: the same sums accumulated in o (E) itself. */
static int64_t pool_any(const float *restrict T, int64_t R, int E, const int64_t *restrict idx,
                        const float *restrict w, int64_t lo, int64_t hi, int64_t pf_end, int mean,
                        float *restrict o) {
    for (int c = 0; c < E; c++) o[c] = 0.0f;
    for (int64_t k = lo; k < hi; k++) {
        if (k + PREFETCH_AHEAD < pf_end) {
            const int64_t p = idx[k + PREFETCH_AHEAD];
            if ((uint64_t)p < (uint64_t)R) __builtin_prefetch(T + (size_t)p * E);
        }
        const int64_t id = idx[k];
        if ((uint64_t)id >= (uint64_t)R) return k;
        const float *t = T + (size_t)id * E;
        if (w) {
            const float wk = w[k];
            for (int c = 0; c < E; c++) o[c] += wk * t[c];
        } else {
            for (int c = 0; c < E; c++) o[c] += t[c];
        }
    }
    const float L = (float)(hi - lo);
    if (mean && hi > lo)
        for (int c = 0; c < E; c++) o[c] /= L;
    return -1;
}

/* Work item: table f, batch rows [b0, b1). Returns 0, or 1 with *x set to its first error
 * (rows after it are left unwritten). */
static int forward_item(const rec_embed *e, const rec_batch *b, int first_feature, int f, int64_t b0,
                        int64_t b1, float *out, embed_err *x) {
    const rec_jagged *j = &b->sparse[first_feature + f];
    const float *T = e->tables + e->toff[f];
    const int64_t R = e->rows[f], B = b->n;
    const int E = e->dims[f], W = e->W, mean = e->pooling == REC_POOL_MEAN;
    /* Rows up to the first bad bag are valid, and their ids lie in [off[b0], off[bv]). */
    int64_t bv = b0;
    while (bv < b1 && bag_ok(j, bv)) bv++;
    const int64_t pf_end = bv > b0 ? j->offsets[bv] : 0;
    for (int64_t r = b0; r < bv; r++) {
        const int64_t lo = j->offsets[r], hi = j->offsets[r + 1];
        float *o = out + (size_t)r * W + e->col[f]; /* (E) */
        const int64_t k = E == 16 ? pool16(T, R, j->indices, j->weights, lo, hi, pf_end, mean, o)
                                  : pool_any(T, R, E, j->indices, j->weights, lo, hi, pf_end, mean, o);
        if (k >= 0) {
            *x = (embed_err){(int64_t)f * B + r, 1, j->indices[k], 0};
            return 1;
        }
    }
    if (bv < b1) {
        *x = (embed_err){(int64_t)f * B + bv, 2, j->offsets[bv], j->offsets[bv + 1]};
        return 1;
    }
    return 0;
}

/* Pools every bag: out (B, W) overwritten, table f's bags at columns col_f .. col_f + E_f.
 * On an id outside its table (or corrupt offsets) returns REC_EINVAL naming the first such
 * (feature, batch row); out is then partly written. */
rec_status rec_embed_forward(rec_embed *e, const rec_batch *b, int first_feature, float *out) {
    REC_TRY(check_call(e, "forward", b, first_feature));
    const int64_t B = b->n, nblk = (B + FWD_BLOCK - 1) / FWD_BLOCK, items = nblk * e->F;
    if (items == 0) return REC_OK;
    embed_err first = {INT64_MAX, 0, 0, 0};
#pragma omp parallel num_threads(n_threads(e))
    {
        embed_err mine = {INT64_MAX, 0, 0, 0}, x;
#pragma omp for schedule(static)
        for (int64_t it = 0; it < items; it++) {
            const int f = (int)(it / nblk);
            const int64_t b0 = (it % nblk) * FWD_BLOCK, b1 = b0 + FWD_BLOCK < B ? b0 + FWD_BLOCK : B;
            if (forward_item(e, b, first_feature, f, b0, b1, out, &x) && x.key < mine.key) mine = x;
        }
        if (mine.key != INT64_MAX) {
#pragma omp critical(rec_embed_forward_err)
            if (mine.key < first.key) first = mine;
        }
    }
    if (first.key != INT64_MAX) return report(e, " forward", &first, B, first_feature);
    return REC_OK;
}

/* ---- backward + update -------------------------------------------------------------------- */

/* Gathers table f's entries (in batch position order) into ent[0, cap) and checks its bags,
 * recording the first bad (row) in e->err[f] (key INT64_MAX when none). Entries beyond cap
 * are counted, not written: that only happens when the offsets are corrupt, which is then
 * reported. Returns the number of entries. */
static int64_t gather(rec_embed *e, const rec_batch *b, int first_feature, int f, bag_entry *ent, int64_t cap) {
    const rec_jagged *j = &b->sparse[first_feature + f];
    const int64_t R = e->rows[f], B = b->n;
    const int mean = e->pooling == REC_POOL_MEAN;
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
            const int64_t id = j->indices[k];
            if ((uint64_t)id >= (uint64_t)R) {
                e->err[f] = (embed_err){(int64_t)f * B + r, 1, id, 0};
                e->maxid[f] = maxid;
                return n;
            }
            float c = j->weights ? j->weights[k] : 1.0f;
            if (mean) c /= L;
            if (n < cap) ent[n] = (bag_entry){id, (int32_t)r, c};
            n++;
            if (id > maxid) maxid = id;
        }
    }
    e->maxid[f] = maxid;
    return n;
}

/* Stable sort of a (n) by id (LSD radix, 8 bits a pass, only as many passes as maxid needs;
 * insertion sort for short runs), using t (n) as the second buffer. Stability keeps each
 * id's entries in batch position order. Returns whichever buffer holds the result. */
static bag_entry *sort_by_id(bag_entry *a, bag_entry *t, int64_t n, uint64_t maxid) {
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

/* Table f's update from its gathered entries: sums each unique id's contributions
 * dout[bag, col_f ..] * coef in position order into acc (E), then applies the optimizer to
 * that row once (formulas in embed.h; float arithmetic as torch's and FBGEMM's kernels). */
static void update_table(rec_embed *e, int f, bag_entry *ent, bag_entry *tmp, int64_t n, const float *dout, float lr) {
    const bag_entry *s = sort_by_id(ent, tmp, n, (uint64_t)e->maxid[f]);
    const int E = e->dims[f], W = e->W, col = e->col[f];
    const float eps = e->opt.eps;
    float *restrict T = e->tables + e->toff[f];
    float *restrict S = e->state ? e->state + e->soff[f] : NULL;
    float *restrict acc = e->acc + col; /* (E) */
    for (int64_t i = 0; i < n;) {
        const int64_t id = s[i].id;
        for (int c = 0; c < E; c++) acc[c] = 0.0f;
        for (; i < n && s[i].id == id; i++) {
            const float *g = dout + (size_t)s[i].bag * W + col; /* (E) */
            const float k = s[i].coef;
            for (int c = 0; c < E; c++) acc[c] += g[c] * k;
        }
        if (i + PREFETCH_AHEAD < n) { /* the row (and its state) a few unique ids ahead */
            const size_t ahead = (size_t)s[i + PREFETCH_AHEAD].id;
            __builtin_prefetch(T + ahead * E, 1);
            if (e->opt.kind == REC_SPARSE_ADAGRAD) __builtin_prefetch(S + ahead * E, 1);
            if (e->opt.kind == REC_SPARSE_ROWWISE_ADAGRAD) __builtin_prefetch(S + ahead, 1);
        }
        float *restrict p = T + (size_t)id * E; /* (E) */
        switch (e->opt.kind) {
        case REC_SPARSE_SGD:
            for (int c = 0; c < E; c++) p[c] -= lr * acc[c];
            break;
        case REC_SPARSE_ADAGRAD:
            adagrad_row(p, S + (size_t)id * E, acc, E, lr, eps);
            break;
        case REC_SPARSE_ROWWISE_ADAGRAD: { /* FBGEMM embedding_backward_split_template, EXACT_ROWWISE_ADAGRAD */
            float sq = 0.0f;
            for (int c = 0; c < E; c++) sq += acc[c] * acc[c];
            S[id] += sq / (float)E;
            const float mult = lr / (sqrtf(S[id]) + eps);
            for (int c = 0; c < E; c++) p[c] -= mult * acc[c];
            break;
        }
        }
    }
}

/* Backward and update in one pass (see embed.h). Checks every bag first, so a batch with a
 * bad id changes nothing and fails with REC_EINVAL naming the first (feature, batch row). */
rec_status rec_embed_backward_update(rec_embed *e, const rec_batch *b, int first_feature, const float *dout,
                                     float lr) {
    REC_TRY(check_call(e, "backward", b, first_feature));
    if (!(lr >= 0.0f) || isinf(lr))
        return rec_errorf(REC_EINVAL, "embedding backward: learning rate is %g; it must be finite and >= 0", lr);
    const int F = e->F;
    const int64_t B = b->n;
    if (B == 0 || F == 0) return REC_OK;
    /* Slots per table from the batch's id counts; corrupt offsets are clamped here and
     * reported by the gather. */
    e->ebase[0] = 0;
    for (int f = 0; f < F; f++) {
        const rec_jagged *j = &b->sparse[first_feature + f];
        int64_t nnz = j->offsets[B];
        nnz = nnz < 0 ? 0 : nnz > j->nnz_cap ? j->nnz_cap : nnz;
        e->ebase[f + 1] = e->ebase[f] + nnz;
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
    const int nt = n_threads(e);
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (int f = 0; f < F; f++)
        e->nent[f] = gather(e, b, first_feature, f, ent + e->ebase[f], e->ebase[f + 1] - e->ebase[f]);
    for (int f = 0; f < F; f++)
        if (e->err[f].key != INT64_MAX) return report(e, " backward", &e->err[f], B, first_feature);
#pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
    for (int f = 0; f < F; f++)
        update_table(e, f, ent + e->ebase[f], tmp + e->ebase[f], e->nent[f], dout, lr);
    return REC_OK;
}
