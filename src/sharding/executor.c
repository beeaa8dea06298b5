/* The sharded embedding executor (dist.h; OPER §5 on MPI): the map, the window, the forward's
 * fetches, the gradients' exchange and the owners' updates, and the data-parallel dense part. */
#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "executor_impl.h"
#include "mpi_check.h"
#include "rectrain/dist.h"
#include "rectrain/nn.h"

/* Table values as rec_embed_init draws them (stream f of the model's embedding seed, row-major,
 * uniform(-sqrt(1/R), sqrt(1/R)); bf16 tables: rounded to nearest); this rank keeps the parts
 * of rows it holds. */
static void init_values(rec_exec *x, uint64_t seed) {
    float *row = malloc(sizeof(float) * (size_t)x->E);
    if (!row) return;
    for (int f = 0; f < x->F; f++) {
        const int64_t R = rec_plan_rows(x->plan, f);
        const int C = rec_plan_col_parts(x->plan, f, NULL);
        rec_rng g;
        rec_rng_seed(&g, seed, (uint64_t)f);
        const double a = sqrt(1.0 / (double)R);
        for (int64_t r = 0; r < R; r++) {
            for (int e = 0; e < x->E; e++) row[e] = (float)((2.0 * rec_rng_uniform(&g) - 1.0) * a);
            for (int c = 0; c < C; c++) {
                const xloc l = rec__xmap_locate(&x->map, f, c, r);
                const xpart *p = &x->map.parts[f][c];
                if (l.owner == x->rank) rec__values_put(rec__store(x), x->b16, l.off, p->w, row + p->pl.c0);
                else if (l.owner == REC_PLAN_EVERY) rec__values_put(rec__rep(x), x->b16, l.off, x->E, row);
            }
        }
    }
    free(row);
}

/* First-order values as model.c draws its dim-1 tables (rec_embed_init: stream f of the seed,
 * one value a row, uniform(-sqrt(1/R), sqrt(1/R))); this rank keeps those of the rows whose
 * first column part it holds. */
static void init_lin(rec_exec *x, uint64_t seed) {
    for (int f = 0; x->has_lin && f < x->F; f++) {
        const int64_t R = rec_plan_rows(x->plan, f);
        rec_rng g;
        rec_rng_seed(&g, seed, (uint64_t)f);
        const double a = sqrt(1.0 / (double)R);
        for (int64_t r = 0; r < R; r++) {
            const float v = (float)((2.0 * rec_rng_uniform(&g) - 1.0) * a);
            const xloc l = rec__xmap_locate(&x->map, f, 0, r);
            if (l.owner == x->rank) rec__values_put(rec__store(x), x->b16, x->store_floats + l.srow, 1, &v);
            else if (l.owner == REC_PLAN_EVERY) rec__values_put(rec__rep_lin(x), x->b16, l.srow, 1, &v);
        }
    }
}

/* bf16: each replicated row's table and row, its rounding's key (a replicated row is whole,
 * its table's one part; a slot of a replicated segment whose row is hot elsewhere stays
 * unkeyed and is never stepped: no rank sends it a gradient). */
static void rep_keys(rec_exec *x) {
    for (int f = 0; f < x->F; f++)
        for (int c = 0; c < rec_plan_col_parts(x->plan, f, NULL); c++) {
            const xpart *p = &x->map.parts[f][c];
            const int64_t R = rec_plan_rows(x->plan, f);
            for (int64_t g = 0; g < p->pl.n_seg; g++) {
                if (p->pl.seg_owner[g] != REC_PLAN_EVERY) continue;
                const int64_t r0 = p->pl.seg_start[g], r1 = g + 1 < p->pl.n_seg ? p->pl.seg_start[g + 1] : R;
                for (int64_t r = r0; r < r1; r++) x->rep_f[p->seg_srow[g] + r - r0] = f, x->rep_row[p->seg_srow[g] + r - r0] = r;
            }
            for (int64_t h = 0; h < p->pl.n_hot; h++)
                if (p->pl.hot_owner[h] == REC_PLAN_EVERY) x->rep_f[p->hot_srow[h]] = f, x->rep_row[p->hot_srow[h]] = p->pl.hot_row[h];
        }
}

/* Floats of the replicated rows' gradient buffer: E a row, and its first-order value's. */
static int64_t rep_grad_floats(const rec_exec *x) { return x->rep_rows * (x->E + x->has_lin); }

/* A blocking MPI call of a step, its time counted as exposed communication (wait_s). */
#define MPI_WAIT(x, call)                                                                           \
    do {                                                                                            \
        const double w0_ = MPI_Wtime();                                                             \
        MPI_TRY(call);                                                                              \
        (x)->st.wait_s += MPI_Wtime() - w0_;                                                        \
    } while (0)

static rec_status zalloc(void **p, size_t bytes, const char *what) {
    REC_TRY(rec_alloc(p, bytes ? bytes : 64, what));
    memset(*p, 0, bytes ? bytes : 64);
    return REC_OK;
}

static void on_grads(void *ctx, size_t off, size_t n) {
    rec_exec *x = ctx;
    if (x->hook_err || n == 0) return;
    if (x->n_req == x->req_cap) {
        x->hook_err = rec_errorf(REC_EINVAL, "executor: more than %d gradient ranges", x->req_cap);
        return;
    }
    float *g = rec_model_dense_grads(x->m) + off;
    const int rc = MPI_Iallreduce(MPI_IN_PLACE, g, (int)n, MPI_FLOAT, MPI_SUM, rec__comm(), &x->req[x->n_req++]);
    if (rc != MPI_SUCCESS) x->hook_err = rec__mpi_fail(rc, "MPI_Iallreduce", __FILE__, __LINE__);
    x->covered += n;
    x->st.sent_bytes += 2.0 * (x->N - 1) / x->N * 4.0 * (double)n;
    x->st.recv_bytes += 2.0 * (x->N - 1) / x->N * 4.0 * (double)n;
}

rec_status rec_exec_init(rec_exec **out, rec_model *m, const rec_plan *plan, int64_t global_batch, int baseline) {
    *out = NULL;
    const rec_model_config *c = rec_model_get_config(m);
    int rank, N;
    REC_TRY(rec_dist_init(&rank, &N));
    if (rec_plan_ranks(plan) != N)
        return rec_errorf(REC_EINVAL, "the sharding plan is for %d ranks and mpirun started %d; make a plan for %d",
                          rec_plan_ranks(plan), N, N);
    if (rec_plan_tables(plan) != c->n_sparse || rec_plan_dim(plan) != c->emb_dim)
        return rec_errorf(REC_EINVAL, "the sharding plan is for %d tables of dim %d and the model has %d of dim %d",
                          rec_plan_tables(plan), rec_plan_dim(plan), c->n_sparse, c->emb_dim);
    for (int f = 0; f < c->n_sparse; f++)
        if (rec_plan_rows(plan, f) != c->table_rows[f])
            return rec_errorf(REC_EINVAL, "the sharding plan's table %d has %lld rows and the model's %lld", f,
                              (long long)rec_plan_rows(plan, f), (long long)c->table_rows[f]);
    if (global_batch < N)
        return rec_errorf(REC_EINVAL, "a global batch of %lld rows cannot be cut among %d ranks; use --batch %d or more",
                          (long long)global_batch, N, N);
    rec_exec *x = calloc(1, sizeof *x);
    if (!x) return rec_errorf(REC_ENOMEM, "executor: out of memory");
    x->m = m;
    x->plan = plan;
    x->rank = rank;
    x->N = N;
    x->F = c->n_sparse;
    x->E = c->emb_dim;
    x->B = global_batch;
    x->max_local = (global_batch + N - 1) / N;
    x->opt = c->sparse_opt;
    x->baseline = baseline;
    x->has_lin = rec_model_pooled(m, 1) != NULL;
    x->b16 = c->embed_precision == REC_PRECISION_BF16;
    x->rounding = (rec_embed_rounding)c->embed_rounding;
    x->seed = rec_mix64(c->seed + 1), x->lin_seed = rec_mix64(c->seed + 2); /* model.c's: the tables', the first-order tables' */
    x->win = MPI_WIN_NULL;
    rec_status s = rec__xmap_build(&x->map, plan);
    if (!s) x->store_floats = x->map.floats[rank], x->store_rows = x->map.rows[rank], x->rep_rows = x->map.rep_rows;
    x->win_floats = x->store_floats + (x->has_lin ? x->store_rows : 0);
    const size_t stf = x->opt.kind == REC_SPARSE_ADAGRAD ? (size_t)x->store_floats
                       : x->opt.kind == REC_SPARSE_ROWWISE_ADAGRAD ? (size_t)x->store_rows : 0;
    const size_t rstf = x->opt.kind == REC_SPARSE_ADAGRAD ? (size_t)(x->rep_rows * x->E)
                        : x->opt.kind == REC_SPARSE_ROWWISE_ADAGRAD ? (size_t)x->rep_rows : 0;
    /* a first-order value's state: one float under either Adagrad */
    const int lsf = x->has_lin ? rec__state_floats(x->opt.kind, 1) : 0;
    const size_t lstf = (size_t)(lsf * x->store_rows), rlstf = (size_t)(lsf * x->rep_rows);
    const size_t vb = (size_t)rec__value_bytes(x->b16);
    float *base = NULL;
    if (!s) s = rec__win_allocate(vb * (size_t)x->win_floats, &base, &x->win);
    if (x->b16) x->store16 = (uint16_t *)(void *)base;
    else x->store = base;
    if (!s) s = zalloc((void **)&x->state, sizeof(float) * stf, "embedding optimizer state");
    if (!s) s = zalloc(x->b16 ? (void **)&x->rep16 : (void **)&x->rep, vb * (size_t)(x->rep_rows * x->E), "replicated rows");
    if (!s && x->b16) s = zalloc((void **)&x->rep_f, sizeof(int32_t) * (size_t)x->rep_rows, "replicated rows' keys");
    if (!s && x->b16) s = zalloc((void **)&x->rep_row, sizeof(int64_t) * (size_t)x->rep_rows, "replicated rows' keys");
    /* padded to N equal chunks (replicated()) */
    if (!s) s = zalloc((void **)&x->rep_grad, sizeof(float) * (size_t)((rep_grad_floats(x) + N - 1) / N * N),
                       "replicated gradients");
    if (!s) s = zalloc((void **)&x->rep_state, sizeof(float) * rstf, "replicated rows' state");
    if (!s) s = zalloc((void **)&x->lin_state, sizeof(float) * lstf, "first-order optimizer state");
    if (!s) s = zalloc(x->b16 ? (void **)&x->rep_lin16 : (void **)&x->rep_lin, vb * (size_t)(x->has_lin ? x->rep_rows : 0),
                       "replicated first-order values");
    if (!s) s = zalloc((void **)&x->rep_lin_state, sizeof(float) * rlstf, "replicated first-order state");
    if (!s) {
        for (size_t i = 0; i < stf; i++) x->state[i] = x->opt.init_acc;
        for (size_t i = 0; i < rstf; i++) x->rep_state[i] = x->opt.init_acc;
        for (size_t i = 0; i < lstf; i++) x->lin_state[i] = x->opt.init_acc;
        for (size_t i = 0; i < rlstf; i++) x->rep_lin_state[i] = x->opt.init_acc;
        init_values(x, x->seed);
        init_lin(x, x->lin_seed);
        if (x->b16) rep_keys(x);
    }
    if (!s) s = rec_batch_init(&x->lb, x->max_local, c->n_dense, c->n_sparse, 1);
    x->req_cap = 64;
    x->fcount = calloc((size_t)N * 2, sizeof(int64_t));
    x->fcap = x->fcount ? x->fcount + N : NULL;
    x->fdisp = calloc((size_t)N, sizeof(MPI_Aint *));
    x->flen = calloc((size_t)N, sizeof(int *));
    x->fdst = calloc((size_t)N, sizeof(float **));
    x->scount = calloc((size_t)N * 4, sizeof(int));
    x->n_uniq = calloc((size_t)x->F + 1, sizeof(int64_t));
    x->req = calloc((size_t)x->req_cap, sizeof(MPI_Request));
    x->served = calloc((size_t)N, sizeof(double));
    if (!s && (!x->fcount || !x->fdisp || !x->flen || !x->fdst || !x->scount || !x->n_uniq || !x->req || !x->served))
        s = rec_errorf(REC_ENOMEM, "executor: out of memory");
    if (!s) {
        x->sdispl = x->scount + N, x->rcount = x->scount + 2 * N, x->rdispl = x->scount + 3 * N;
        s = zalloc((void **)&x->dlogits, sizeof(float) * (size_t)x->max_local, "executor");
        if (!s) s = zalloc((void **)&x->gsum, sizeof(float) * (size_t)(x->E + 1), "executor");
    }
    if (!s) {
        const int rc = MPI_Win_lock_all(MPI_MODE_NOCHECK, x->win);
        if (rc != MPI_SUCCESS) s = rec__mpi_fail(rc, "MPI_Win_lock_all", __FILE__, __LINE__);
    }
    if (!s) {
        const int rc = MPI_Barrier(rec__comm());
        if (rc != MPI_SUCCESS) s = rec__mpi_fail(rc, "MPI_Barrier", __FILE__, __LINE__);
    }
    if (s) {
        rec_exec_free(x);
        return s;
    }
    rec_model_on_grads(m, on_grads, x);
    *out = x;
    return REC_OK;
}

void rec_exec_free(rec_exec *x) {
    if (!x) return;
    rec_model_on_grads(x->m, NULL, NULL);
    if (x->win != MPI_WIN_NULL) {
        MPI_Win_unlock_all(x->win);
        MPI_Win_free(&x->win);
    }
    rec__xmap_free(&x->map);
    for (int o = 0; o < x->N; o++) {
        if (x->fdisp) free(x->fdisp[o]);
        if (x->flen) free(x->flen[o]);
        if (x->fdst) free(x->fdst[o]);
    }
    free(x->fdisp);
    free(x->flen);
    free(x->fdst);
    free(x->fcount);
    rec_free(x->state);
    rec_free(x->rep);
    rec_free(x->rep16);
    rec_free(x->rep_f);
    rec_free(x->rep_row);
    rec_free(x->rep_grad);
    rec_free(x->rep_state);
    rec_free(x->lin_state);
    rec_free(x->rep_lin);
    rec_free(x->rep_lin16);
    rec_free(x->rep_lin_state);
    rec_batch_free(&x->lb);
    free(x->uniq);
    free(x->idx);
    free(x->rows);
    free(x->grads);
    free(x->lin_rows);
    free(x->lin_grads);
    rec_free(x->dlogits);
    free(x->fbuf);
    free(x->scount);
    free(x->sbuf);
    free(x->rbuf);
    free(x->keys);
    free(x->gsum);
    free(x->order);
    free(x->loc);
    free(x->n_uniq);
    free(x->req);
    free(x->served);
    free(x);
}

/* ---- the forward ------------------------------------------------------------------------ */

static rec_status grow(void **p, int64_t *cap, int64_t need, size_t elem, const char *what) {
    if (need <= *cap) return REC_OK;
    const int64_t n = need > 2 * *cap ? need : 2 * *cap;
    void *q = realloc(*p, elem * (size_t)n);
    if (!q) return rec_errorf(REC_ENOMEM, "executor: out of memory for %s", what);
    *p = q;
    *cap = n;
    return REC_OK;
}

/* Rows [a, b) of the global batch into x->lb (ids as int64). */
static rec_status take_slice(rec_exec *x, const rec_batch *g, int64_t a, int64_t b) {
    rec_batch *l = &x->lb;
    const int64_t n = b - a;
    l->n = n;
    memcpy(l->label, g->label + a, sizeof(float) * (size_t)n);
    memcpy(l->dense, g->dense + (size_t)a * g->n_dense, sizeof(float) * (size_t)n * (size_t)g->n_dense);
    for (int f = 0; f < x->F; f++) {
        const rec_jagged *s = &g->sparse[f];
        const int64_t k0 = s->offsets[a], nnz = s->offsets[b] - k0;
        REC_TRY(rec_batch_reserve_nnz(l, f, nnz, s->weights != NULL));
        rec_jagged *d = &l->sparse[f];
        for (int64_t i = 0; i <= n; i++) d->offsets[i] = s->offsets[a + i] - k0;
        rec_jagged_copy_ids64(s, k0, nnz, d->ids64);
        if (s->weights) memcpy(d->weights, s->weights + k0, sizeof(float) * (size_t)nnz);
        else if (d->weights) { /* this batch is unweighted: drop the weights of an earlier one */
            rec_free(d->weights);
            d->weights = NULL;
        }
    }
    return REC_OK;
}

/* Per table: the slice's ids sorted and deduplicated (a radix order over the table's row
 * bits), and each id's position among them. */
static rec_status dedup(rec_exec *x) {
    int64_t most = 1;
    for (int f = 0; f < x->F; f++) most = x->lb.sparse[f].offsets[x->lb.n] > most ? x->lb.sparse[f].offsets[x->lb.n] : most;
    if (most > x->ucap) {
        int64_t c1 = x->ucap, c2 = x->ucap, c3 = x->ucap, c4 = x->ucap, c5 = x->ucap;
        REC_TRY(grow((void **)&x->uniq, &c1, most * x->F, sizeof(int64_t), "ids"));
        REC_TRY(grow((void **)&x->rows, &c2, most * x->F * x->E, sizeof(float), "rows"));
        REC_TRY(grow((void **)&x->grads, &c3, most * x->F * x->E, sizeof(float), "gradients"));
        if (x->has_lin) {
            REC_TRY(grow((void **)&x->lin_rows, &c4, most * x->F, sizeof(float), "first-order values"));
            REC_TRY(grow((void **)&x->lin_grads, &c5, most * x->F, sizeof(float), "first-order gradients"));
        }
        REC_TRY(grow((void **)&x->idx, &x->icap, most * x->F, sizeof(int32_t), "ids"));
        x->ucap = most;
    }
    REC_TRY(grow((void **)&x->order, &x->order_cap, 2 * most, sizeof(int32_t), "ids"));
    for (int f = 0; f < x->F; f++) {
        const rec_jagged *j = &x->lb.sparse[f];
        const int64_t nnz = j->offsets[x->lb.n], rows = rec_plan_rows(x->plan, f);
        for (int64_t k = 0; k < nnz; k++)
            if (j->ids64[k] < 0 || j->ids64[k] >= rows)
                return rec_errorf(REC_EINVAL, "feature %d has id %lld, outside its table's %lld rows", f,
                                  (long long)j->ids64[k], (long long)rows);
        int bits = 1;
        while (bits < 63 && (rows - 1) >> bits) bits++;
        rec_radix_order(j->ids64, nnz, bits, x->order, x->order + most);
        int64_t *u = x->uniq + (size_t)f * x->ucap, n = 0;
        int32_t *ix = x->idx + (size_t)f * x->ucap;
        for (int64_t k = 0; k < nnz; k++) {
            const int64_t id = j->ids64[x->order[k]];
            if (n == 0 || id != u[n - 1]) u[n++] = id;
            ix[x->order[k]] = (int32_t)(n - 1);
        }
        x->n_uniq[f] = n;
    }
    return REC_OK;
}

static rec_status add_fetch(rec_exec *x, int o, int64_t off, int w, float *dst) {
    if (x->fcount[o] == x->fcap[o]) {
        const int64_t n = x->fcap[o] ? 2 * x->fcap[o] : 1024;
        MPI_Aint *d = realloc(x->fdisp[o], sizeof(MPI_Aint) * (size_t)n);
        if (d) x->fdisp[o] = d;
        int *l = realloc(x->flen[o], sizeof(int) * (size_t)n);
        if (l) x->flen[o] = l;
        float **t = realloc(x->fdst[o], sizeof(float *) * (size_t)n);
        if (t) x->fdst[o] = t;
        if (!d || !l || !t) return rec_errorf(REC_ENOMEM, "executor: out of memory for fetch lists");
        x->fcap[o] = n;
    }
    const int64_t k = x->fcount[o]++;
    x->fdisp[o][k] = (MPI_Aint)(off * rec__value_bytes(x->b16));
    x->flen[o][k] = w;
    x->fdst[o][k] = dst;
    return REC_OK;
}

/* The baseline's forward: ids (as window offsets and widths) to their owners and rows back, by
 * two all-to-all-v's (TorchRec's style), instead of one-sided gets. */
static rec_status fetch_alltoall(rec_exec *x, int64_t total) {
    const int N = x->N;
    int64_t need = 0;
    for (int o = 0; o < N; o++) x->scount[o] = (int)(x->fcount[o] * 2 * sizeof(int64_t)), need += x->scount[o];
    REC_TRY(grow((void **)&x->sbuf, &x->sbuf_cap, need + 1, 1, "requests"));
    int64_t at = 0;
    for (int o = 0; o < N; o++) {
        x->sdispl[o] = (int)at;
        int64_t *q = (int64_t *)(x->sbuf + at);
        for (int64_t k = 0; k < x->fcount[o]; k++) q[2 * k] = x->fdisp[o][k] / rec__value_bytes(x->b16), q[2 * k + 1] = x->flen[o][k];
        at += x->scount[o];
    }
    MPI_WAIT(x, MPI_Alltoall(x->scount, 1, MPI_INT, x->rcount, 1, MPI_INT, rec__comm()));
    int64_t rn = 0;
    for (int o = 0; o < N; o++) x->rdispl[o] = (int)rn, rn += x->rcount[o];
    REC_TRY(grow((void **)&x->rbuf, &x->rbuf_cap, rn + 1, 1, "requests"));
    MPI_WAIT(x, MPI_Alltoallv(x->sbuf, x->scount, x->sdispl, MPI_BYTE, x->rbuf, x->rcount, x->rdispl, MPI_BYTE, rec__comm()));
    /* answer: the rows asked for, in order, per requester */
    int64_t floats = 0;
    const int64_t *q = (const int64_t *)x->rbuf;
    for (int64_t k = 0; k < rn / (int64_t)(2 * sizeof(int64_t)); k++) {
        if (q[2 * k] < 0 || q[2 * k + 1] < 1 || q[2 * k] + q[2 * k + 1] > x->win_floats)
            return rec_errorf(REC_EINVAL, "executor: a request for floats [%lld, +%lld) outside this rank's %lld",
                              (long long)q[2 * k], (long long)q[2 * k + 1], (long long)x->win_floats);
        floats += q[2 * k + 1];
    }
    const int vb = rec__value_bytes(x->b16); /* the rows travel as stored */
    REC_TRY(grow((void **)&x->sbuf, &x->sbuf_cap, floats * vb + 1, 1, "rows"));
    char *ans = x->sbuf;
    const char *mine = rec__store(x);
    int64_t a = 0;
    for (int o = 0; o < N; o++) {
        x->sdispl[o] = (int)(a * vb);
        const int64_t *r = (const int64_t *)(x->rbuf + x->rdispl[o]);
        for (int64_t k = 0; k < x->rcount[o] / (int64_t)(2 * sizeof(int64_t)); k++) {
            memcpy(ans + a * vb, mine + r[2 * k] * vb, (size_t)vb * (size_t)r[2 * k + 1]);
            a += r[2 * k + 1];
        }
        x->scount[o] = (int)(a * vb) - x->sdispl[o];
        x->st.sent_bytes += o == x->rank ? 0 : x->scount[o];
    }
    int64_t b = 0;
    for (int o = 0; o < N; o++) {
        x->rcount[o] = 0;
        for (int64_t k = 0; k < x->fcount[o]; k++) x->rcount[o] += x->flen[o][k] * vb;
        x->rdispl[o] = (int)b;
        b += x->rcount[o];
    }
    (void)total;
    MPI_WAIT(x, MPI_Alltoallv(x->sbuf, x->scount, x->sdispl, MPI_BYTE, x->fbuf, x->rcount, x->rdispl, MPI_BYTE, rec__comm()));
    return REC_OK;
}

/* A first-order value, which lives with its row's first column part at l (after the owner's
 * rows in its window): copied into *dst when local or replicated, else added to the owner's
 * fetches (one float beside its row's). */
static rec_status lin_value(rec_exec *x, xloc l, float *dst, int64_t *remote) {
    if (l.owner == REC_PLAN_EVERY) rec__values_get(rec__rep_lin(x), x->b16, l.srow, 1, dst);
    else if (l.owner == x->rank && !x->baseline) rec__values_get(rec__store(x), x->b16, x->store_floats + l.srow, 1, dst);
    else {
        REC_TRY(add_fetch(x, l.owner, x->map.floats[l.owner] + l.srow, 1, dst));
        ++*remote;
        x->lin_fetched += l.owner != x->rank;
    }
    return REC_OK;
}

/* Rows of every (table, part, unique id) into x->rows (and their first-order values into
 * x->lin_rows): remote ones by one get per owner, issued first; local and replicated ones
 * copied meanwhile; then pooled into the model. */
static rec_status forward(rec_exec *x) {
    const int N = x->N, E = x->E;
    double t0 = MPI_Wtime();
    REC_TRY(dedup(x));
    for (int o = 0; o < N; o++) x->fcount[o] = 0;
    int64_t nloc = 0;
    for (int f = 0; f < x->F; f++) nloc += x->n_uniq[f] * rec_plan_col_parts(x->plan, f, NULL);
    REC_TRY(grow((void **)&x->loc, &x->loc_cap, nloc + 1, sizeof(xloc), "row locations"));
    int64_t remote = 0, q = 0;
    x->lin_fetched = 0;
    for (int f = 0; f < x->F; f++) {
        const int C = rec_plan_col_parts(x->plan, f, NULL);
        const int64_t *u = x->uniq + (size_t)f * x->ucap;
        float *rows = x->rows + (size_t)f * x->ucap * E;
        for (int c = 0; c < C; c++) {
            const xpart *p = &x->map.parts[f][c];
            for (int64_t k = 0; k < x->n_uniq[f]; k++) {
                const xloc l = x->loc[q++] = rec__xmap_locate(&x->map, f, c, u[k]);
                float *dst = rows + (size_t)k * E + p->pl.c0;
                if (l.owner == REC_PLAN_EVERY) rec__values_get(rec__rep(x), x->b16, l.off, E, dst);
                else if (l.owner == x->rank && !x->baseline) rec__values_get(rec__store(x), x->b16, l.off, p->w, dst);
                else {
                    REC_TRY(add_fetch(x, l.owner, l.off, p->w, dst));
                    remote += p->w;
                }
                if (c == 0 && x->has_lin) REC_TRY(lin_value(x, l, x->lin_rows + (size_t)f * x->ucap + k, &remote));
            }
        }
    }
    REC_TRY(grow((void **)&x->fbuf, &x->fbuf_cap, remote + 1, sizeof(float), "fetched rows")); /* bf16: half of it */
    for (int f = 0; f < x->F; f++) x->st.ids += (double)x->lb.sparse[f].offsets[x->lb.n];
    /* rows (parts of rows) fetched, as the cost model counts them: a first-order value rides
     * with its row (its 4 bytes are in fetched_bytes) */
    for (int o = 0; o < N; o++) x->st.fetched += o == x->rank ? 0 : (double)x->fcount[o];
    x->st.fetched -= (double)x->lin_fetched;
    double t1 = MPI_Wtime();
    if (x->baseline) {
        REC_TRY(fetch_alltoall(x, remote));
    } else {
        int64_t at = 0;
        for (int o = 0; o < N; o++) {
            if (!x->fcount[o]) continue;
            int64_t n = 0;
            for (int64_t k = 0; k < x->fcount[o]; k++) n += x->flen[o][k];
            MPI_Datatype t;
            const MPI_Datatype v = x->b16 ? MPI_UINT16_T : MPI_FLOAT;
            MPI_TRY(MPI_Type_create_hindexed((int)x->fcount[o], x->flen[o], x->fdisp[o], v, &t));
            MPI_TRY(MPI_Type_commit(&t));
            MPI_TRY(MPI_Get((char *)x->fbuf + at * rec__value_bytes(x->b16), (int)n, v, o, 0, 1, t, x->win));
            MPI_TRY(MPI_Type_free(&t));
            x->served[o] += rec__value_bytes(x->b16) * (double)n;
            at += n;
        }
        MPI_WAIT(x, MPI_Win_flush_all(x->win));
    }
    int64_t own = 0; /* the baseline sends a rank's own rows through the all-to-all, not the network */
    for (int64_t k = 0; x->baseline && k < x->fcount[x->rank]; k++) own += x->flen[x->rank][k];
    x->st.recv_bytes += rec__value_bytes(x->b16) * (double)(remote - own);
    x->st.fetched_bytes += rec__value_bytes(x->b16) * (double)(remote - own);
    double t2 = MPI_Wtime();
    int64_t at = 0; /* the fetched values in fetch order, as stored: widened into their rows */
    for (int o = 0; o < N; o++)
        for (int64_t k = 0; k < x->fcount[o]; k++) {
            rec__values_get(x->fbuf, x->b16, at, x->flen[o][k], x->fdst[o][k]);
            at += x->flen[o][k];
        }
    /* pooling, as rec_embed pools (embed.h) */
    const rec_model_config *cfg = rec_model_get_config(x->m);
    float *out = rec_model_pooled(x->m, 0);
    for (int f = 0; f < x->F; f++) {
        const rec_jagged *j = &x->lb.sparse[f];
        rec_embed_pool_bags(x->rows + (size_t)f * x->ucap * E, x->n_uniq[f], E, cfg->pooling, j->offsets,
                            x->idx + (size_t)f * x->ucap, j->weights, x->lb.n, out + (size_t)f * E, x->F * E);
    }
    float *lin = rec_model_pooled(x->m, 1); /* (B, F): the first-order tables pool as dim-1 tables */
    for (int f = 0; x->has_lin && f < x->F; f++) {
        const rec_jagged *j = &x->lb.sparse[f];
        rec_embed_pool_bags(x->lin_rows + (size_t)f * x->ucap, x->n_uniq[f], 1, cfg->pooling, j->offsets,
                            x->idx + (size_t)f * x->ucap, j->weights, x->lb.n, lin + f, x->F);
    }
    const double local = (t1 - t0) + (MPI_Wtime() - t2);
    x->st.local_s += local;
    x->st.slice_s += local;
    x->st.fetch_s += t2 - t1;
    return REC_OK;
}

/* ---- the backward ------------------------------------------------------------------------ */

/* A received gradient record: its row, where it starts in the receive buffer (arrival order
 * is rank order) and where the row lives in this rank's store. */
typedef struct key {
    int32_t f, c;
    int64_t row, at;
    int64_t off, srow;
} key;

static int cmp_key(const void *a, const void *b) {
    const key *x = a, *y = b;
    if (x->f != y->f) return x->f - y->f;
    if (x->c != y->c) return x->c - y->c;
    if (x->row != y->row) return (x->row > y->row) - (x->row < y->row);
    return (x->at > y->at) - (x->at < y->at);
}

/* Floats of a gradient record for part c of table f: the part's gradient (the whole row's
 * under row-wise Adagrad, G), then for part 0 of a model with first-order tables the row's
 * first-order gradient (its value lives with part 0's owner). */
static int record_floats(const rec_exec *x, int f, int c) {
    return (x->opt.kind == REC_SPARSE_ROWWISE_ADAGRAD ? x->E : x->map.parts[f][c].w) + (x->has_lin && c == 0);
}

/* The key of the rounding of row `row` of table f (embed.h rec_bf16_key): the tables' seed
 * (lin: the first-order tables'), the model's step (one table update a step, as one process
 * counts them), g's column 0 being table column col. */
static rec_bf16_key round_key(const rec_exec *x, int lin, int f, int64_t row, int col) {
    return (rec_bf16_key){x->rounding, lin ? x->lin_seed : x->seed, rec_model_steps(x->m), f, row, col};
}

/* Columns [c0, c1) of a row at element `at` of a store (fp32 or bf16, as x's) stepped from
 * g (E floats; column 0 is table column col) as one process steps a row of its tables. */
static void row_step(const rec_exec *x, float lr, const float *g, int E, int c0, int c1, void *base, int64_t at,
                     float *st, int lin, int f, int64_t row, int col) {
    if (!x->b16) {
        rec_sparse_opt_step(&x->opt, lr, g, E, c0, c1, (float *)base + at, st);
        return;
    }
    const rec_bf16_key r = round_key(x, lin, f, row, col);
    rec_sparse_opt_step_bf16(&x->opt, lr, g, E, c0, c1, (uint16_t *)base + at, st, &r);
}

/* The owner's step of a first-order value (row `row` of table f's, at element `at` of base)
 * from its summed gradient g (a dim-1 table's row: the same float operations as the
 * one-process engine's update of lin.{f}). */
static void lin_step(const rec_exec *x, float lr, float g, void *base, int64_t at, float *st, int f, int64_t row) {
    row_step(x, lr, &g, 1, 0, 1, base, at, st, 1, f, row, 0);
}

/* Gradient records to the owners, their sums in rank order, the owners' steps; the replicated
 * rows' all-reduce and steps. */
static rec_status exchange(rec_exec *x, float lr) {
    const int N = x->N, E = x->E;
    const int G_row = x->opt.kind == REC_SPARSE_ROWWISE_ADAGRAD;
    const double t0 = MPI_Wtime();
    /* per unique row: its gradient, fmaf(d, coef, g) from 0 in position order as the backward
     * sums a row (backward.c), so one rank has the one-process bits */
    const float *demb = rec_model_emb_grad(x->m, 0);
    const rec_model_config *cfg = rec_model_get_config(x->m);
    for (int f = 0; f < x->F; f++) memset(x->grads + (size_t)f * x->ucap * E, 0, sizeof(float) * (size_t)x->n_uniq[f] * E);
    for (int64_t i = 0; i < x->lb.n; i++)
        for (int f = 0; f < x->F; f++) {
            const rec_jagged *j = &x->lb.sparse[f];
            const int32_t *ix = x->idx + (size_t)f * x->ucap;
            const int64_t lo = j->offsets[i], hi = j->offsets[i + 1];
            const float *d = demb + (size_t)i * x->F * E + (size_t)f * E;
            rec_embed_scatter_bag(d, E, cfg->pooling, ix, j->weights, lo, hi, x->grads + (size_t)f * x->ucap * E);
        }
    /* the first-order values' alike, from dlin (B, F) */
    const float *dlin = rec_model_emb_grad(x->m, 1);
    for (int f = 0; x->has_lin && f < x->F; f++) memset(x->lin_grads + (size_t)f * x->ucap, 0, sizeof(float) * (size_t)x->n_uniq[f]);
    for (int64_t i = 0; x->has_lin && i < x->lb.n; i++)
        for (int f = 0; f < x->F; f++) {
            const rec_jagged *j = &x->lb.sparse[f];
            rec_embed_scatter_bag(dlin + (size_t)i * x->F + f, 1, cfg->pooling, x->idx + (size_t)f * x->ucap, j->weights,
                                  j->offsets[i], j->offsets[i + 1], x->lin_grads + (size_t)f * x->ucap);
        }
    /* records per owner; replicated rows into the zero-padded buffer (their first-order
     * gradients after every row's E) */
    if (x->rep_rows) memset(x->rep_grad, 0, sizeof(float) * (size_t)((rep_grad_floats(x) + N - 1) / N * N));
    for (int o = 0; o < N; o++) x->scount[o] = 0;
    int64_t q = 0; /* the forward's locations, in its order */
    for (int f = 0; f < x->F; f++) {
        const int C = rec_plan_col_parts(x->plan, f, NULL);
        for (int c = 0; c < C; c++) {
            const int G = record_floats(x, f, c);
            for (int64_t k = 0; k < x->n_uniq[f]; k++) {
                const xloc l = x->loc[q++];
                if (l.owner == REC_PLAN_EVERY) {
                    const float *g = x->grads + ((size_t)f * x->ucap + (size_t)k) * E;
                    float *r = x->rep_grad + l.off;
                    for (int e = 0; e < E; e++) r[e] += g[e];
                    if (x->has_lin) x->rep_grad[x->rep_rows * E + l.srow] += x->lin_grads[(size_t)f * x->ucap + k];
                } else {
                    x->scount[l.owner] += (int)(sizeof(rec_hdr) + sizeof(float) * (size_t)G);
                }
            }
        }
    }
    int64_t total = 0;
    for (int o = 0; o < N; o++) x->sdispl[o] = (int)total, total += x->scount[o];
    REC_TRY(grow((void **)&x->sbuf, &x->sbuf_cap, total + 1, 1, "gradient records"));
    int *fill = x->rcount; /* scratch until the all-to-all */
    for (int o = 0; o < N; o++) fill[o] = x->sdispl[o];
    q = 0;
    for (int f = 0; f < x->F; f++) {
        const int C = rec_plan_col_parts(x->plan, f, NULL);
        for (int c = 0; c < C; c++) {
            const xpart *p = &x->map.parts[f][c];
            const int G = G_row ? E : p->w, c0 = G_row ? 0 : p->pl.c0, lin = x->has_lin && c == 0;
            for (int64_t k = 0; k < x->n_uniq[f]; k++) {
                const int o = x->loc[q++].owner;
                if (o == REC_PLAN_EVERY) continue;
                rec_hdr h = {f, c, x->uniq[(size_t)f * x->ucap + k]};
                memcpy(x->sbuf + fill[o], &h, sizeof h);
                memcpy(x->sbuf + fill[o] + sizeof h, x->grads + ((size_t)f * x->ucap + (size_t)k) * E + c0,
                       sizeof(float) * (size_t)G);
                if (lin) memcpy(x->sbuf + fill[o] + sizeof h + sizeof(float) * (size_t)G, x->lin_grads + (size_t)f * x->ucap + k,
                                sizeof(float));
                fill[o] += (int)(sizeof h + sizeof(float) * (size_t)(G + lin));
            }
        }
    }
    const double ts = MPI_Wtime();
    x->st.slice_s += ts - t0;
    MPI_WAIT(x, MPI_Alltoall(x->scount, 1, MPI_INT, x->rcount, 1, MPI_INT, rec__comm()));
    x->st.skew_s += MPI_Wtime() - ts;
    int64_t rn = 0;
    for (int o = 0; o < N; o++) {
        x->rdispl[o] = (int)rn, rn += x->rcount[o];
        if (o != x->rank) x->st.sent_bytes += x->scount[o], x->st.recv_bytes += x->rcount[o];
    }
    REC_TRY(grow((void **)&x->rbuf, &x->rbuf_cap, rn + 1, 1, "gradient records"));
    MPI_WAIT(x, MPI_Alltoallv(x->sbuf, x->scount, x->sdispl, MPI_BYTE, x->rbuf, x->rcount, x->rdispl, MPI_BYTE, rec__comm()));
    const double t1 = MPI_Wtime();
    /* the owner's side: records sorted by (table, part, row), ties in arrival (= rank) order */
    int64_t nrec = 0;
    for (int64_t at = 0; at < rn; nrec++) {
        rec_hdr h;
        memcpy(&h, x->rbuf + at, sizeof h);
        if (h.f < 0 || h.f >= x->F || h.c < 0 || h.c >= rec_plan_col_parts(x->plan, h.f, NULL) || h.row < 0 ||
            h.row >= rec_plan_rows(x->plan, h.f))
            return rec_errorf(REC_EINVAL, "executor: rank %d got a gradient for table %d part %d row %lld, which no "
                              "table has: the ranks disagree on the plan", x->rank, h.f, h.c, (long long)h.row);
        at += (int64_t)sizeof h + (int64_t)sizeof(float) * record_floats(x, h.f, h.c);
    }
    REC_TRY(grow(&x->keys, &x->keys_cap, nrec + 1, sizeof(key), "gradient records"));
    key *keys = x->keys;
    int64_t n = 0;
    for (int64_t at = 0; at < rn; n++) {
        rec_hdr h;
        memcpy(&h, x->rbuf + at, sizeof h);
        const xloc l = rec__xmap_locate(&x->map, h.f, h.c, h.row);
        if (l.owner != x->rank)
            return rec_errorf(REC_EINVAL, "executor: rank %d got a gradient for table %d part %d row %lld, which it does "
                              "not own: the ranks disagree on the plan", x->rank, h.f, h.c, (long long)h.row);
        keys[n] = (key){h.f, h.c, h.row, at, l.off, l.srow};
        at += (int64_t)sizeof h + (int64_t)sizeof(float) * record_floats(x, h.f, h.c);
    }
    qsort(keys, (size_t)n, sizeof(key), cmp_key);
    float *sum = x->gsum;
    for (int64_t i = 0; i < n;) {
        const key *k = &keys[i];
        const xpart *p = &x->map.parts[k->f][k->c];
        const int G = record_floats(x, k->f, k->c);
        memset(sum, 0, sizeof(float) * (size_t)G);
        int64_t j = i;
        for (; j < n && keys[j].f == k->f && keys[j].c == k->c && keys[j].row == k->row; j++) {
            const float *src = (const float *)(x->rbuf + keys[j].at + sizeof(rec_hdr));
            for (int e = 0; e < G; e++) {
                float v;
                memcpy(&v, src + e, sizeof v);
                sum[e] += v;
            }
        }
        float *st = x->opt.kind == REC_SPARSE_ADAGRAD ? x->state + k->off
                    : x->opt.kind == REC_SPARSE_ROWWISE_ADAGRAD ? x->state + k->srow : NULL;
        /* row-wise Adagrad's record is the whole row's gradient (column 0 the table's), the
         * others' the part's (column 0 the part's first) */
        if (G_row) row_step(x, lr, sum, E, p->pl.c0, p->pl.c1, rec__store(x), k->off, st, 0, k->f, k->row, 0);
        else row_step(x, lr, sum, p->w, 0, p->w, rec__store(x), k->off, st, 0, k->f, k->row, p->pl.c0);
        if (x->has_lin && k->c == 0)
            lin_step(x, lr, sum[G - 1], rec__store(x), x->store_floats + k->srow,
                     x->opt.kind == REC_SPARSE_SGD ? NULL : x->lin_state + k->srow, k->f, k->row);
        i = j;
    }
    x->st.owner_s += MPI_Wtime() - t1;
    x->st.records += (double)n;
    return REC_OK;
}

/* The replicated rows' zero-padded all-reduce ("local-aggregated sparse all-reduce", OPER §5),
 * in the owners' summation order: the buffer is cut into N chunks, rank k receives every
 * rank's chunk k (an all-to-all), sums them in rank order from zero — as an owner sums its
 * rows' records — and the sums are all-gathered. The bytes are a ring all-reduce's, 2 (N-1)/N
 * of the buffer each way, and a row's gradient has the same bits whichever plan replicated or
 * placed it, so every plan trains identically for a given N. Then every rank steps the rows
 * any rank used (a row no rank used has a zero gradient, which changes nothing). */
static rec_status replicated(rec_exec *x, float lr) {
    if (!x->rep_rows) return REC_OK;
    const int E = x->E, N = x->N;
    const double t0 = MPI_Wtime();
    const int64_t S = rep_grad_floats(x), chunk = (S + N - 1) / N;
    REC_TRY(grow((void **)&x->rbuf, &x->rbuf_cap, (int64_t)sizeof(float) * chunk * N + 1, 1, "replicated gradients"));
    float *parts = (float *)x->rbuf, *mine = x->rep_grad + (size_t)chunk * x->rank;
    MPI_WAIT(x, MPI_Alltoall(x->rep_grad, (int)chunk, MPI_FLOAT, parts, (int)chunk, MPI_FLOAT, rec__comm()));
    for (int64_t i = 0; i < chunk; i++) {
        float v = 0;
        for (int r = 0; r < N; r++) v += parts[(size_t)r * chunk + i];
        mine[i] = v;
    }
    MPI_WAIT(x, MPI_Allgather(MPI_IN_PLACE, (int)chunk, MPI_FLOAT, x->rep_grad, (int)chunk, MPI_FLOAT, rec__comm()));
    x->st.sent_bytes += 2.0 * (N - 1) * 4.0 * (double)chunk;
    x->st.recv_bytes += 2.0 * (N - 1) * 4.0 * (double)chunk;
    for (int64_t r = 0; r < x->rep_rows; r++) {
        const float *g = x->rep_grad + (size_t)r * E;
        int any = 0;
        for (int e = 0; e < E; e++) any |= g[e] != 0.0f;
        if (!any) continue;
        float *st = x->opt.kind == REC_SPARSE_ADAGRAD ? x->rep_state + (size_t)r * E
                    : x->opt.kind == REC_SPARSE_ROWWISE_ADAGRAD ? x->rep_state + r : NULL;
        row_step(x, lr, g, E, 0, E, rec__rep(x), r * E, st, 0, x->b16 ? x->rep_f[r] : 0, x->b16 ? x->rep_row[r] : 0, 0);
    }
    for (int64_t r = 0; x->has_lin && r < x->rep_rows; r++) {
        const float g = x->rep_grad[x->rep_rows * E + r];
        if (g != 0.0f)
            lin_step(x, lr, g, rec__rep_lin(x), r, x->opt.kind == REC_SPARSE_SGD ? NULL : x->rep_lin_state + r,
                     x->b16 ? x->rep_f[r] : 0, x->b16 ? x->rep_row[r] : 0);
    }
    x->st.exchange_s += MPI_Wtime() - t0;
    return REC_OK;
}

/* ---- steps ------------------------------------------------------------------------------- */

rec_status rec_exec_train_step(rec_exec *x, const rec_batch *b, double *loss) {
    if (b->n != x->B && b->n < x->N)
        return rec_errorf(REC_EINVAL, "a batch of %lld rows cannot be cut among %d ranks", (long long)b->n, x->N);
    const int64_t a = x->rank * b->n / x->N, e = (x->rank + 1) * b->n / x->N;
    REC_TRY(take_slice(x, b, a, e));
    REC_TRY(forward(x));
    double t0 = MPI_Wtime();
    const float *logits;
    REC_TRY(rec_model_forward_pooled(x->m, &x->lb, &logits));
    /* loss over the GLOBAL batch: this slice's part of the mean, and its gradient */
    double sum = rec_bce_slice_sum(x->lb.n, logits, x->lb.label, (double)b->n, x->dlogits);
    double t1 = MPI_Wtime();
    MPI_WAIT(x, MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_DOUBLE, MPI_SUM, rec__comm()));
    *loss = sum / (double)b->n;
    double t2 = MPI_Wtime();
    x->n_req = 0;
    x->covered = 0;
    x->hook_err = REC_OK;
    REC_TRY(rec_model_backward(x->m, &x->lb, x->dlogits));
    REC_TRY(x->hook_err);
    if (x->covered != rec_model_n_dense_params(x->m))
        return rec_errorf(REC_EINVAL, "executor: the backward announced %zu of %zu dense gradients", x->covered,
                          rec_model_n_dense_params(x->m));
    double t3 = MPI_Wtime();
    const float lr = (float)(rec_model_get_config(x->m)->sparse_opt.lr *
                             rec_lr_scale(&rec_model_get_config(x->m)->schedule, rec_model_steps(x->m)));
    REC_TRY(exchange(x, lr));
    MPI_TRY(MPI_Win_sync(x->win));
    double t4 = MPI_Wtime();
    REC_TRY(replicated(x, lr));
    double t5 = MPI_Wtime();
    MPI_WAIT(x, MPI_Waitall(x->n_req, x->req, MPI_STATUSES_IGNORE));
    double t6 = MPI_Wtime();
    MPI_WAIT(x, MPI_Barrier(rec__comm())); /* owners' updates before anyone's next gets */
    double t7 = MPI_Wtime();
    REC_TRY(rec_model_update_dense(x->m, rec_lr_scale(&rec_model_get_config(x->m)->schedule, rec_model_steps(x->m))));
    rec_model_set_steps(x->m, rec_model_steps(x->m) + 1);
    double t8 = MPI_Wtime();
    x->st.dense_s += (t1 - t0) + (t3 - t2) + (t8 - t7);
    x->st.allreduce_s += (t2 - t1) + (t6 - t5);
    x->st.exchange_s += (t4 - t3) + (t7 - t6);
    x->st.steps++;
    return REC_OK;
}

rec_status rec_exec_forward(rec_exec *x, const rec_batch *b, float *logits) {
    if (b->n < x->N) return rec_errorf(REC_EINVAL, "a batch of %lld rows cannot be cut among %d ranks", (long long)b->n, x->N);
    const int64_t a = x->rank * b->n / x->N, e = (x->rank + 1) * b->n / x->N;
    REC_TRY(take_slice(x, b, a, e));
    REC_TRY(forward(x));
    const float *mine;
    REC_TRY(rec_model_forward_pooled(x->m, &x->lb, &mine));
    for (int o = 0; o < x->N; o++)
        x->rcount[o] = (int)((o + 1) * b->n / x->N - o * b->n / x->N), x->rdispl[o] = (int)(o * b->n / x->N);
    MPI_TRY(MPI_Gatherv(mine, (int)x->lb.n, MPI_FLOAT, logits, x->rcount, x->rdispl, MPI_FLOAT, 0, rec__comm()));
    return REC_OK;
}

uint64_t rec_exec_dense_digest(rec_exec *x) {
    const size_t P = rec_model_n_dense_params(x->m);
    const uint32_t lo = rec_crc32(0, rec_model_dense_params(x->m), P * sizeof(float));
    return (uint64_t)lo << 32 | (uint32_t)P;
}

void rec_exec_get_stats(const rec_exec *x, rec_exec_stats *s) {
    *s = x->st;
    /* rows served to others: counted by whoever fetched them */
    double *got = calloc((size_t)x->N, sizeof(double));
    if (got && MPI_Reduce_scatter_block(x->served, got, 1, MPI_DOUBLE, MPI_SUM, rec__comm()) == MPI_SUCCESS)
        s->sent_bytes += got[0];
    free(got);
    /* the rank whose bytes sent per step are furthest from the plan's prediction (Eq. 2-3) */
    const double pred = rec_plan_costs(x->plan)[x->rank].sent, steps = s->steps > 0 ? (double)s->steps : 1;
    struct { double v; int r; } mine = {pred > 0 ? fabs(s->sent_bytes / steps / pred - 1) : 0, x->rank}, worst = mine;
    MPI_Allreduce(&mine, &worst, 1, MPI_DOUBLE_INT, MPI_MAXLOC, rec__comm());
    s->worst_sent_dev = worst.v;
    s->worst_sent_rank = worst.r;
}
