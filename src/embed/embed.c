/* Embedding tables and the sparse optimizers' state (embed.h): configuration, init, the
 * accessors, the checks and messages both drivers share, and profiling. The fused forward
 * (work mapping, the row pass) is in forward.c, the fused backward and update in backward.c,
 * the forward kernels in pooling.c, schedules and their candidates in sched.c, plan files in
 * sched_io.c, the tuner in tune.c, the float64 references in embed_ref.c.
 *
 * Memory: all tables are one (sum_f R_f E_f) block (floats, or bf16 bits), table f at
 * toff[f]; the optimizer state (fp32 always) is one block too, table f at soff[f]. Every scratch block the drivers use is
 * allocated here, at init, for max_batch rows (the backward's entry block is the one that a
 * batch with more ids than any before may grow, backward.c), so a steady-state loop does
 * not allocate.
 *
 * Threads (OpenMP, `num_threads(nt)`): init over tables; forward and backward as their files
 * describe, mapped at each call from the batch's real pooling factors (RecFlex §IV-B's
 * host-side mapping adapted to threads). Each work item computes its results with the same
 * arithmetic in the same order whatever thread runs it and whatever its schedule, so results
 * are bitwise identical for every thread count and plan. Errors found by several threads are
 * reduced to the first in (feature, batch row) order (embed_err), so the message does not
 * depend on scheduling either.
 */
#include <math.h>
#include <omp.h>
#include <string.h>

#include "embed_impl.h"
#include "rectrain/core.h"

enum { REC_EMBED_NNZ_GUESS = 1 }; /* ids per bag assumed when sizing the backward scratch */

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
    if (c->bf16 != 0 && c->bf16 != 1)
        return rec_errorf(REC_EINVAL, "embedding: bf16 is %d; give 0 (fp32 tables) or 1", c->bf16);
    if (c->rounding != REC_ROUND_STOCHASTIC && c->rounding != REC_ROUND_NEAREST)
        return rec_errorf(REC_EINVAL, "embedding: unknown rounding %d (want REC_ROUND_STOCHASTIC or REC_ROUND_NEAREST)",
                          (int)c->rounding);
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
    rec_free(e->tables16);
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
    rec_free(e->rfar);
    rec_free(e->prof_fwd);
    rec_free(e->prof_bwd);
    rec_free(e->prof_ids);
    embed_tuner_free(e->tuner);
    rec_free(e);
}

/* Table f: value (2u - 1) sqrt(1/R_f), u = rec_rng_uniform of stream (seed, f), row-major —
 * dlrm_s_pytorch.py create_emb's np.random.uniform(-sqrt(1/n), sqrt(1/n), (n, m)); a bf16
 * table (T16) holds the same values rounded to nearest. */
static void init_table(float *T, uint16_t *T16, int64_t R, int E, uint64_t seed, int f) {
    rec_rng r;
    rec_rng_seed(&r, seed, (uint64_t)f);
    const double a = sqrt(1.0 / (double)R);
    const size_t n = (size_t)R * (size_t)E;
    for (size_t i = 0; i < n; i++) {
        const float v = (float)((2.0 * rec_rng_uniform(&r) - 1.0) * a);
        if (T16) T16[i] = rec_bf16_bits(v);
        else T[i] = v;
    }
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
    const int64_t bags_per_item = EMBED_MIN_BAGS_PER_ITEM,
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
    e->b16 = cfg->bf16;
    e->rounding = cfg->rounding;
    e->seed = cfg->seed;
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
    if (!s && !e->b16) s = rec_alloc((void **)&e->tables, (nt ? nt : 1) * sizeof(float), "embedding tables");
    if (!s && e->b16) s = rec_alloc((void **)&e->tables16, (nt ? nt : 1) * sizeof(uint16_t), "embedding tables (bf16)");
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
    if (!s) s = rec_alloc((void **)&e->rfar, nf * sizeof(int32_t), "embedding row pass");
    if (!s) s = rec_alloc((void **)&e->prof_fwd, ntf * sizeof(double), "embedding profile");
    if (!s) s = rec_alloc((void **)&e->prof_bwd, ntf * sizeof(double), "embedding profile");
    if (!s) s = rec_alloc((void **)&e->prof_ids, 2 * nf * sizeof(double), "embedding profile");
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
    rec_embed_set_uniform(e, rec_embed_sched_default()); /* RADIX where DENSE does not fit */
    const uint64_t seed = cfg->seed;
    const float acc0 = cfg->opt.init_acc;
    /* Each table is one RNG stream drawn in row-major order, so tables are independent work
     * items and the values do not depend on the thread count. */
#pragma omp parallel for num_threads(e->nt) schedule(dynamic, 1)
    for (int f = 0; f < F; f++) {
        init_table(e->b16 ? NULL : e->tables + e->toff[f], e->b16 ? e->tables16 + e->toff[f] : NULL, e->rows[f],
                   e->dims[f], seed, f);
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
float *rec_embed_table(rec_embed *e, int f) { return f >= 0 && f < e->F && !e->b16 ? e->tables + e->toff[f] : NULL; }
uint16_t *rec_embed_table_bf16(rec_embed *e, int f) {
    return f >= 0 && f < e->F && e->b16 ? e->tables16 + e->toff[f] : NULL;
}
int rec_embed_is_bf16(const rec_embed *e) { return e->b16; }
rec_embed_rounding rec_embed_rounding_mode(const rec_embed *e) { return e->rounding; }
uint64_t rec_embed_seed(const rec_embed *e) { return e->seed; }
int64_t rec_embed_updates(const rec_embed *e) { return e->updates; }
void rec_embed_set_updates(rec_embed *e, int64_t n) { e->updates = n; }

static rec_status check_rows(const rec_embed *e, const char *who, int f, int64_t r0, int64_t n) {
    if (f < 0 || f >= e->F)
        return rec_errorf(REC_EINVAL, "rec_embed_%s: table %d of %d", who, f, e->F);
    if (r0 < 0 || n < 0 || r0 > e->rows[f] - n)
        return rec_errorf(REC_EINVAL, "rec_embed_%s: rows [%lld, %lld) outside table %d's %lld rows", who, (long long)r0,
                          (long long)(r0 + n), f, (long long)e->rows[f]);
    return REC_OK;
}

rec_status rec_embed_read_rows(const rec_embed *e, int f, int64_t r0, int64_t n, float *out) {
    REC_TRY(check_rows(e, "read_rows", f, r0, n));
    const size_t a = e->toff[f] + (size_t)r0 * (size_t)e->dims[f], k = (size_t)n * (size_t)e->dims[f];
    if (!e->b16) memcpy(out, e->tables + a, k * sizeof(float));
    else
        for (size_t i = 0; i < k; i++) out[i] = rec_bf16_to_float(e->tables16[a + i]);
    return REC_OK;
}

rec_status rec_embed_write_rows(rec_embed *e, int f, int64_t r0, int64_t n, const float *in) {
    REC_TRY(check_rows(e, "write_rows", f, r0, n));
    const size_t a = e->toff[f] + (size_t)r0 * (size_t)e->dims[f], k = (size_t)n * (size_t)e->dims[f];
    if (!e->b16) memcpy(e->tables + a, in, k * sizeof(float));
    else
        for (size_t i = 0; i < k; i++) e->tables16[a + i] = rec_bf16_bits(in[i]);
    return REC_OK;
}
float *rec_embed_state(rec_embed *e, int f) {
    return f >= 0 && f < e->F && e->state ? e->state + e->soff[f] : NULL;
}
size_t rec_embed_state_len(const rec_embed *e, int f) {
    return f >= 0 && f < e->F ? e->soff[f + 1] - e->soff[f] : 0;
}

/* ---- shared by the drivers (embed_impl.h) ------------------------------------------------ */

rec_status embed_check_call(const rec_embed *e, const char *who, const rec_batch *b, int first_feature) {
    if (b->n < 0)
        return rec_errorf(REC_EINVAL, "embedding %s: batch of %lld rows; the batch is corrupt (a count is >= 0)", who,
                          (long long)b->n);
    if (b->n > e->max_batch)
        return rec_errorf(REC_EINVAL, "embedding %s: batch of %lld rows, but max_batch is %d; raise max_batch",
                          who, (long long)b->n, e->max_batch);
    if (first_feature < 0 || (int64_t)first_feature + e->F > b->n_sparse)
        return rec_errorf(REC_EINVAL,
                          "embedding %s: features %d..%d of a batch with %d sparse features; the %d tables "
                          "need first_feature in [0, %d]",
                          who, first_feature, first_feature + e->F - 1, b->n_sparse, e->F, b->n_sparse - e->F);
    return REC_OK;
}

rec_status embed_report(const rec_embed *e, const char *who, const embed_err *x, int64_t B, int first_feature) {
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

int64_t embed_table_nnz(const rec_batch *b, int first_feature, int f) {
    const rec_jagged *j = &b->sparse[first_feature + f];
    const int64_t nnz = j->offsets[b->n] - j->offsets[0];
    return nnz < 0 ? 0 : nnz > j->nnz_cap ? j->nnz_cap : nnz;
}

double embed_table_cost(const rec_embed *e, const rec_batch *b, int first_feature, int f) {
    return ((double)embed_table_nnz(b, first_feature, f) + (double)b->n) * e->dims[f];
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
