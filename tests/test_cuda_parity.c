/* The GPU embedding engine against the CPU: random heterogeneous models (dims 1..256, odd ones
 * too, so both load widths and unaligned columns run; rows from 1, so a row can take thousands
 * of a batch's ids; bags of 0..300 ids, a quarter empty; weights; SUM and MEAN), outputs
 * poisoned with NaN before every launch.
 *   forward:  every uniform schedule, a random plan at a random occupancy, the default plan:
 *             per table ||gpu - ref|| / ||ref|| <= 1e-5 against the float64 reference, every
 *             element written;
 *   backward + update (SGD, Adagrad, row-wise Adagrad; two steps): per table the change of
 *             the rows, ||dT_gpu - dT_ref|| / ||dT_ref|| <= 1e-5 against the float64 reference
 *             (rec_embed_grad_ref + rec_embed_update_ref), and the optimizer state likewise.
 *             The CPU engine's own error on the same steps is printed beside it: on the hot
 *             rows of 1-row tables (tens of thousands of cancelling terms) its float32 sums
 *             err by up to 2e-4, which is why the GPU sums in float64;
 *   bf16 tables: see test_bf16_case;
 *   bad ids are refused naming feature, row and id;
 *   a whole DLRM training step (the GPU model against the CPU model, model.h): dot with and
 *   without self-interaction and cat, SGD / Adagrad / Adam with the sparse optimizers, three
 *   steps: each step's loss within 1e-4 relative, and every parameter tensor's change and the
 *   optimizer state within 1e-4 (||gpu - cpu|| / ||cpu - start||); and with bf16 products
 *   (looser bounds, below).
 * Exits 77 (skipped) on a machine without a usable GPU. */
#include <math.h>
#include <stdlib.h>

#include "check.h"
#include "embedcheck.h"
#include "rectrain/core.h"
#include "rectrain/cuda.h"
#include "rectrain/model.h"

enum { MAXF = 12 };
static rec_rng rng;
static double urand(void) { return rec_rng_uniform(&rng); }
static int64_t irand(int64_t n) { return (int64_t)rec_rng_below(&rng, (uint64_t)n); }

typedef struct model {
    int F, B, weighted;
    int64_t rows[MAXF];
    int dims[MAXF], maxbag[MAXF];
    rec_pooling pooling;
} model;

static model random_model(int t) {
    static const int DIMS[] = {1, 3, 4, 7, 8, 16, 17, 24, 32, 64, 100, 128, 252, 256};
    model m = {1 + (int)irand(MAXF), 1 + (int)irand(t % 2 ? 600 : 40), urand() < 0.5, {0}, {0}, {0},
               urand() < 0.5 ? REC_POOL_SUM : REC_POOL_MEAN};
    for (int f = 0; f < m.F; f++) {
        m.dims[f] = urand() < 0.2 ? 1 + (int)irand(256) : DIMS[irand(sizeof DIMS / sizeof DIMS[0])];
        m.rows[f] = f == 0 ? 1 + irand(3) : 1 + irand(urand() < 0.3 ? 20000 : 300);
        m.maxbag[f] = urand() < 0.3 ? 1 : urand() < 0.5 ? 300 : 20;
    }
    return m;
}

static void make_batch(rec_batch *b, const model *m) {
    rec_status s = rec_batch_init(b, m->B, 0, m->F, 4);
    b->n = m->B;
    for (int f = 0; !s && f < m->F; f++) {
        rec_jagged *j = &b->sparse[f];
        j->offsets[0] = 0;
        for (int64_t r = 0; r < m->B; r++) {
            const int64_t L = urand() < 0.25 ? 0 : m->maxbag[f] == 1 ? 1 : irand(m->maxbag[f] + 1);
            if (!s) s = rec_batch_reserve_nnz(b, f, j->offsets[r] + L, m->weighted && f % 2);
            for (int64_t k = j->offsets[r]; !s && k < j->offsets[r] + L; k++) {
                j->ids64[k] = urand() < 0.5 ? irand(m->rows[f] < 4 ? m->rows[f] : 4) : irand(m->rows[f]);
                if (j->weights) j->weights[k] = (float)(3.0 * urand() - 1.5);
            }
            j->offsets[r + 1] = j->offsets[r] + (s ? 0 : L);
        }
        if (!s && f % 2) s = rec_batch_set_wide(b, f, 0);
    }
    CHECK(s == REC_OK, "building a test batch: %s", rec_errmsg());
}

/* Largest per-table relative error of got against ref (B, W); INFINITY when an element is
 * not finite (unwritten: still the NaN poison). */
static double table_error(const model *m, const float *got, const double *ref) {
    int W = 0;
    for (int f = 0; f < m->F; f++) W += m->dims[f];
    double worst = 0;
    for (int f = 0, col = 0; f < m->F; col += m->dims[f], f++) {
        double num = 0, den = 0;
        for (int r = 0; r < m->B; r++)
            for (int c = 0; c < m->dims[f]; c++) {
                const double x = got[(size_t)r * W + col + c], y = ref[(size_t)r * W + col + c];
                if (!isfinite(x)) return INFINITY;
                num += (x - y) * (x - y), den += y * y;
            }
        const double e = den > 0 ? sqrt(num / den) : sqrt(num);
        worst = e > worst ? e : worst;
    }
    return worst;
}

static double worst_gpu, worst_cpu; /* largest change errors seen, GPU and CPU engine */

/* ||a - b|| / ||b - base|| over n values (the change the steps made, a against the reference b). */
static double change_error(const float *a, const double *b, const float *base, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) return INFINITY;
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += ((double)b[i] - base[i]) * ((double)b[i] - base[i]);
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static int forward_case(rec_cuda_embed *g, rec_cuda_batch *d, const model *m, float *out, float *h, size_t n,
                        const double *ref, const char *what) {
    rec_status s = rec_cuda_fill(out, n, NAN);
    if (!s) s = rec_cuda_embed_forward(g, d, out);
    if (!s) s = rec_cuda_embed_sync(g);
    if (!s) s = rec_cuda_download(h, out, n * sizeof(float));
    const double e = s ? INFINITY : table_error(m, h, ref);
    CHECK(s == REC_OK && e <= 1e-5, "forward %s: relative error %g (F %d, B %d, %s): %s", what, e, m->F, m->B,
          m->pooling == REC_POOL_MEAN ? "mean" : "sum", s ? rec_errmsg() : "");
    return e <= 1e-5;
}

static void test_case(int t) {
    const model m = random_model(t);
    const rec_sparse_opt_kind kind = (rec_sparse_opt_kind)(t % 3);
    rec_embed_config cfg = {m.F, m.rows, m.dims, m.pooling, rec_sparse_opt_defaults(kind, 0.05f), m.B, 2, 11 + t, 0, 0, REC_ROUND_STOCHASTIC};
    rec_embed *cpu = NULL, *back = NULL;
    rec_cuda_embed *g = NULL;
    rec_cuda_batch *d = NULL;
    rec_batch b;
    make_batch(&b, &m);
    rec_status s = rec_embed_init(&cpu, &cfg);
    if (!s) s = rec_embed_init(&back, &cfg);
    if (!s) s = rec_cuda_embed_init(&g, &cfg, cpu);
    if (!s) s = rec_cuda_batch_new(&d);
    if (!s) s = rec_cuda_batch_load(g, d, &b, 0);
    CHECK(s == REC_OK, "case %d setup: %s", t, rec_errmsg());
    const int W = s ? 0 : rec_embed_out_width(cpu);
    const size_t n = (size_t)m.B * W;
    float *out = NULL, *dout = NULL, *h = malloc((n + 1) * sizeof(float)), *hd = malloc((n + 1) * sizeof(float));
    double *ref = malloc((n + 1) * sizeof(double)), *S = malloc((n + 1) * sizeof(double));
    if (!s) s = rec_cuda_alloc((void **)&out, n * sizeof(float), "test outputs");
    if (!s) s = rec_cuda_alloc((void **)&dout, n * sizeof(float), "test gradients");
    if (s || !h || !hd || !ref || !S) goto done;
    forward_refs(cpu, m.pooling, &b, 0, ref, S);
    /* Forward: each uniform schedule, then a random plan and occupancy, then the default. */
    char nm[16];
    int ok = 1;
    for (int u = 0; ok && u < REC_CUDA_N_SCHED; u++) {
        rec_cuda_embed_set_uniform(g, u);
        ok = forward_case(g, d, &m, out, h, n, ref, rec_cuda_sched_name(u, nm, sizeof nm));
    }
    int plan[MAXF], col = 0;
    for (int f = 0; f < m.F; col += m.dims[f], f++) {
        int c[REC_CUDA_N_SCHED];
        const int k = rec_cuda_sched_candidates(m.dims[f], col, W, c);
        plan[f] = c[irand(k)];
    }
    s = rec_cuda_embed_set_plan(g, plan, 1 + (int)irand(4));
    CHECK(s == REC_OK, "random plan: %s", rec_errmsg());
    if (ok) forward_case(g, d, &m, out, h, n, ref, "random plan");
    /* Backward + update, two steps, against the float64 reference (and the CPU engine). */
    double **T64 = tables_f64(cpu, 0), **S64 = calloc((size_t)m.F, sizeof *S64), **G64 = calloc((size_t)m.F, sizeof *G64);
    float **T0 = calloc((size_t)m.F, sizeof *T0), **S0 = calloc((size_t)m.F, sizeof *S0);
    uint8_t **touched = calloc((size_t)m.F, sizeof *touched);
    double *dout64 = malloc((n + 1) * sizeof(double));
    for (int f = 0; f < m.F; f++) {
        const size_t nt = (size_t)m.rows[f] * m.dims[f], ns = rec_embed_state_len(cpu, f);
        T0[f] = malloc(nt * sizeof(float)), S0[f] = malloc((ns + 1) * sizeof(float));
        S64[f] = malloc((ns + 1) * sizeof(double)), G64[f] = malloc(nt * sizeof(double));
        touched[f] = calloc((size_t)m.rows[f], 1);
        memcpy(T0[f], rec_embed_table(cpu, f), nt * sizeof(float));
        for (size_t i = 0; i < ns; i++) S0[f][i] = rec_embed_state(cpu, f)[i], S64[f][i] = S0[f][i];
        for (int64_t k = 0; k < rec_batch_nnz(&b, f); k++) touched[f][rec_jagged_id(&b.sparse[f], k)] = 1;
    }
    for (int step = 0; !s && step < 2; step++) {
        for (size_t i = 0; i < n; i++) hd[i] = (float)(2.0 * urand() - 1.0), dout64[i] = hd[i];
        s = rec_cuda_upload(dout, hd, n * sizeof(float));
        if (!s) s = rec_cuda_embed_forward(g, d, out);
        if (!s) s = rec_cuda_embed_backward_update(g, d, dout, 0.05f);
        if (!s) s = rec_embed_forward(cpu, &b, 0, h);
        if (!s) s = rec_embed_backward_update(cpu, &b, 0, hd, 0.05f);
        CHECK(s == REC_OK, "backward step %d: %s", step, rec_errmsg());
        rec_embed_grad_ref(m.F, m.rows, m.dims, m.pooling, &b, 0, dout64, G64);
        rec_embed_update_ref(m.F, m.rows, m.dims, &cfg.opt, 0.05f, (const double *const *)G64,
                             (const uint8_t *const *)touched, T64, S64);
    }
    if (!s) s = rec_cuda_embed_download(g, back);
    for (int f = 0; !s && f < m.F; f++) {
        const size_t nt = (size_t)m.rows[f] * m.dims[f], ns = rec_embed_state_len(cpu, f);
        const double et = change_error(rec_embed_table(back, f), T64[f], T0[f], nt);
        const double es = ns ? change_error(rec_embed_state(back, f), S64[f], S0[f], ns) : 0;
        const double ct = change_error(rec_embed_table(cpu, f), T64[f], T0[f], nt);
        const double cs = ns ? change_error(rec_embed_state(cpu, f), S64[f], S0[f], ns) : 0;
        worst_gpu = fmax(worst_gpu, fmax(et, es)), worst_cpu = fmax(worst_cpu, fmax(ct, cs));
        CHECK(et <= 1e-5 && es <= 1e-5, "case %d (%s, %s, B %d) table %d (rows %lld, dim %d): change error %g, state %g "
              "(the CPU engine's: %g, %g)", t, kind == 0 ? "sgd" : kind == 1 ? "adagrad" : "rowwise",
              m.pooling == REC_POOL_MEAN ? "mean" : "sum", m.B, f, (long long)m.rows[f], m.dims[f], et, es, ct, cs);
    }
    for (int f = 0; f < m.F; f++) free(T0[f]), free(S0[f]), free(S64[f]), free(G64[f]), free(touched[f]);
    free(T0), free(S0), free(S64), free(G64), free(touched), free(dout64);
    free_tables(T64, m.F);
done:
    rec_cuda_free(out), rec_cuda_free(dout);
    free(h), free(hd), free(ref), free(S);
    rec_cuda_batch_free(d);
    rec_cuda_embed_free(g);
    rec_embed_free(cpu), rec_embed_free(back);
    rec_batch_free(&b);
}

/* bf16 tables (embed.h "Table storage") on the GPU against the CPU engine's bf16 tables, from
 * the same values: the GPU's bf16 forward gives bitwise the GPU's fp32 forward over an fp32
 * copy of the tables; two backward steps (SUM pooling, gradients in multiples of 1/16, so
 * every sum is exact in float32 and float64 alike and both engines step from the same
 * gradient) leave bitwise the CPU's rows and state for SGD and Adagrad, rounded to nearest and
 * stochastically (the same bits from rec_bf16_sr_start's stream), for SGD, Adagrad and
 * row-wise Adagrad (its mean square summed in the CPU's order). */
static void test_bf16_case(int t) {
    model m = random_model(t);
    m.pooling = REC_POOL_SUM, m.weighted = 0;
    const rec_sparse_opt_kind kind = (rec_sparse_opt_kind)(t % 3);
    const rec_embed_rounding rnd = t / 3 % 2 ? REC_ROUND_NEAREST : REC_ROUND_STOCHASTIC;
    rec_embed_config c16 = {m.F, m.rows, m.dims, m.pooling, rec_sparse_opt_defaults(kind, 0.05f), m.B, 2, 31 + t, 0, 1, rnd};
    rec_embed_config c32 = c16;
    c32.bf16 = 0;
    rec_embed *cpu = NULL, *e32 = NULL, *back = NULL;
    rec_cuda_embed *g16 = NULL, *g32 = NULL;
    rec_cuda_batch *d16 = NULL, *d32 = NULL;
    rec_batch b;
    make_batch(&b, &m);
    rec_status s = rec_embed_init(&cpu, &c16);
    if (!s) s = rec_embed_init(&e32, &c32);
    if (!s) s = rec_embed_init(&back, &c16);
    float *v = NULL;
    for (int f = 0; !s && f < m.F; f++) { /* e32 := cpu's values */
        v = realloc(v, sizeof(float) * (size_t)m.rows[f] * m.dims[f]);
        s = rec_embed_read_rows(cpu, f, 0, m.rows[f], v);
        if (!s) s = rec_embed_write_rows(e32, f, 0, m.rows[f], v);
    }
    free(v);
    if (!s) s = rec_cuda_embed_init(&g16, &c16, cpu);
    if (!s) s = rec_cuda_embed_init(&g32, &c32, e32);
    if (!s) s = rec_cuda_batch_new(&d16);
    if (!s) s = rec_cuda_batch_new(&d32);
    if (!s) s = rec_cuda_batch_load(g16, d16, &b, 0);
    if (!s) s = rec_cuda_batch_load(g32, d32, &b, 0);
    CHECK(s == REC_OK, "bf16 case %d setup: %s", t, rec_errmsg());
    const int W = s ? 1 : rec_embed_out_width(cpu);
    const size_t n = (size_t)m.B * W;
    float *o16 = NULL, *o32 = NULL, *dout = NULL, *h16 = malloc(n * sizeof(float)), *h32 = malloc(n * sizeof(float));
    if (!s) s = rec_cuda_alloc((void **)&o16, n * sizeof(float), "test outputs");
    if (!s) s = rec_cuda_alloc((void **)&o32, n * sizeof(float), "test outputs");
    if (!s) s = rec_cuda_alloc((void **)&dout, n * sizeof(float), "test gradients");
    if (!s) s = rec_cuda_fill(o16, n, NAN);
    if (!s) s = rec_cuda_fill(o32, n, NAN);
    if (!s) s = rec_cuda_embed_forward(g16, d16, o16);
    if (!s) s = rec_cuda_embed_forward(g32, d32, o32);
    if (!s) s = rec_cuda_embed_sync(g16);
    if (!s) s = rec_cuda_embed_sync(g32);
    if (!s) s = rec_cuda_download(h16, o16, n * sizeof(float));
    if (!s) s = rec_cuda_download(h32, o32, n * sizeof(float));
    CHECK(s == REC_OK && memcmp(h16, h32, n * sizeof(float)) == 0,
          "bf16 case %d: the GPU pools bf16 tables to other bits than fp32 tables of the same values: %s", t,
          s ? rec_errmsg() : "");
    for (int step = 0; !s && step < 2; step++) {
        for (size_t i = 0; i < n; i++) h32[i] = (float)((int)irand(17) - 8) / 16.0f;
        s = rec_cuda_upload(dout, h32, n * sizeof(float));
        if (!s) s = rec_cuda_embed_forward(g16, d16, o16);
        if (!s) s = rec_cuda_embed_backward_update(g16, d16, dout, 0.05f);
        if (!s) s = rec_embed_forward(cpu, &b, 0, h16);
        if (!s) s = rec_embed_backward_update(cpu, &b, 0, h32, 0.05f);
    }
    if (!s) s = rec_cuda_embed_download(g16, back);
    CHECK(s == REC_OK && rec_embed_updates(back) == 2, "bf16 case %d backward: %s (updates %lld)", t, rec_errmsg(),
          s ? -1LL : (long long)rec_embed_updates(back));
    for (int f = 0; !s && f < m.F; f++) {
        const size_t nt = (size_t)m.rows[f] * m.dims[f], ns = rec_embed_state_len(cpu, f);
        const uint16_t *a = rec_embed_table_bf16(back, f), *c = rec_embed_table_bf16(cpu, f);
        size_t off = 0, far = 0;
        for (size_t i = 0; i < nt; i++) {
            const int32_t ka = a[i] & 0x8000 ? -(int32_t)(a[i] & 0x7fff) : a[i], kc = c[i] & 0x8000 ? -(int32_t)(c[i] & 0x7fff) : c[i];
            off += ka != kc;
            far += abs(ka - kc) > 1;
        }
        const int state_same = !ns || memcmp(rec_embed_state(back, f), rec_embed_state(cpu, f), ns * sizeof(float)) == 0;
        CHECK(off == 0 && state_same,
              "bf16 case %d (%s, %s) table %d (rows %lld, dim %d): %zu of %zu values differ from the CPU's, %zu by more "
              "than one bf16 step; state %s", t, kind == 0 ? "sgd" : kind == 1 ? "adagrad" : "rowwise",
              rnd == REC_ROUND_NEAREST ? "nearest" : "stochastic", f, (long long)m.rows[f], m.dims[f], off, nt, far,
              state_same ? "the same" : "differs");
    }
    rec_cuda_free(o16), rec_cuda_free(o32), rec_cuda_free(dout);
    free(h16), free(h32);
    rec_cuda_batch_free(d16), rec_cuda_batch_free(d32);
    rec_cuda_embed_free(g16), rec_cuda_embed_free(g32);
    rec_embed_free(cpu), rec_embed_free(e32), rec_embed_free(back);
    rec_batch_free(&b);
}

static void test_bad_ids(void) {
    const int64_t rows[2] = {10, 20};
    const int dims[2] = {4, 8};
    rec_embed_config cfg = {2, rows, dims, REC_POOL_SUM, rec_sparse_opt_defaults(REC_SPARSE_SGD, 0.1f), 4, 1, 1, 0, 0, REC_ROUND_STOCHASTIC};
    rec_embed *e = NULL;
    rec_cuda_embed *g = NULL;
    rec_cuda_batch *d = NULL;
    rec_batch b;
    rec_status s = rec_batch_init(&b, 4, 0, 2, 2);
    b.n = 4;
    for (int f = 0; !s && f < 2; f++)
        for (int r = 0; r <= 4; r++) {
            b.sparse[f].offsets[r] = r;
            if (r < 4) b.sparse[f].ids64[r] = r;
        }
    b.sparse[1].ids64[2] = 20;
    if (!s) s = rec_embed_init(&e, &cfg);
    if (!s) s = rec_cuda_embed_init(&g, &cfg, e);
    if (!s) s = rec_cuda_batch_new(&d);
    CHECK(s == REC_OK, "bad-id setup: %s", rec_errmsg());
    if (!s) CHECK_ERR(rec_cuda_batch_load(g, d, &b, 0), REC_EINVAL, "feature 1, batch row 2: id 20");
    int dims300[1] = {300};
    int64_t rows1[1] = {5};
    rec_embed_config big = {1, rows1, dims300, REC_POOL_SUM, rec_sparse_opt_defaults(REC_SPARSE_SGD, 0.1f), 4, 1, 1, 0, 0, REC_ROUND_STOCHASTIC};
    rec_embed *e2 = NULL;
    rec_cuda_embed *g2 = NULL;
    if (rec_embed_init(&e2, &big) == REC_OK) CHECK_ERR(rec_cuda_embed_init(&g2, &big, e2), REC_EINVAL, "dims 1..256");
    rec_embed_free(e2);
    rec_cuda_batch_free(d);
    rec_cuda_embed_free(g);
    rec_embed_free(e);
    rec_batch_free(&b);
}

static void dlrm_batch(rec_batch *b, int B, int Dn, int F, const int64_t *rows) {
    rec_status s = rec_batch_init(b, B, Dn, F, 2);
    b->n = B;
    for (int r = 0; !s && r < B; r++) {
        b->label[r] = urand() < 0.3;
        for (int k = 0; k < Dn; k++) b->dense[(size_t)r * Dn + k] = (float)(3.0 * urand());
    }
    for (int f = 0; !s && f < F; f++) {
        rec_jagged *j = &b->sparse[f];
        j->offsets[0] = 0;
        for (int r = 0; !s && r < B; r++) {
            const int64_t L = f % 3 == 2 ? irand(4) : 1;
            s = rec_batch_reserve_nnz(b, f, j->offsets[r] + L, 0);
            for (int64_t k = j->offsets[r]; !s && k < j->offsets[r] + L; k++) j->ids64[k] = irand(rows[f]);
            j->offsets[r + 1] = j->offsets[r] + L;
        }
    }
    if (!s) s = rec_batch_fit_ids(b, rows);
    CHECK(s == REC_OK, "building a DLRM batch: %s", rec_errmsg());
}

/* Cases 0-3: a small DLRM (8 tables of dim 16, batch 300): dot, dot+self, cat, and dot with
 * bf16 products. Cases 4-5: the production shape scaled down (26 tables of dim 128, bottom
 * 64-128, top 256-64-1, batch 4096; three tables of 3, 4 and 10 rows, so that their rows'
 * runs of ~400-1400 entries take the backward's chunked path), fp32 and bf16, SGD. */
static void test_dlrm_case(int t) {
    enum { Dn = 13, STEPS = 3 };
    const int big = t >= 4, F = big ? 26 : 8, B = big ? 4096 : 300;
    int64_t rows[26];
    for (int f = 0; f < F; f++) rows[f] = f == 0 ? 3 : big && f == 1 ? 4 : big && f == 2 ? 10 : 50 + irand(3000);
    rec_model_config c;
    rec_model_config_default(&c, REC_MODEL_DLRM);
    if (big) {
        c.emb_dim = 128;
        c.n_bottom = 2, c.bottom[0] = 64, c.bottom[1] = 128;
        c.n_top = 3, c.top[0] = 256, c.top[1] = 64, c.top[2] = 1;
    }
    c.interaction = t == 2 ? REC_INTERACT_CAT : REC_INTERACT_DOT;
    c.self_interaction = t == 1;
    /* The big cases train with SGD: an adaptive optimizer's first steps move each element by
     * about lr times its gradient's sign, so elements whose gradient cancels to rounding noise
     * (a few in 1e5 at this shape) flip and dominate the change error; SGD shows the error
     * of the gradients themselves. The small cases cover every optimizer. */
    const rec_opt_kind dk = big ? REC_OPT_SGD : (rec_opt_kind)(t % 3);
    c.dense_opt = rec_dense_opt_defaults(dk, dk == REC_OPT_ADAM ? 0.001f : 0.05f);
    c.sparse_opt = rec_sparse_opt_defaults(big ? REC_SPARSE_SGD : (rec_sparse_opt_kind)(t % 3), 0.05f);
    c.seed = 5 + t;
    rec_model *cpu = NULL, *back = NULL;
    rec_cuda_model *g = NULL;
    rec_status s = rec_model_config_bind(&c, Dn, F, rows, "test");
    if (!s) s = rec_model_init(&cpu, &c, B, 2);
    if (!s) s = rec_model_init(&back, &c, B, 2);
    const int bf16 = t == 3 || t == 5;
    if (!s) s = rec_cuda_model_init(&g, cpu, B, bf16 ? REC_PRECISION_BF16 : REC_PRECISION_FP32);
    CHECK(s == REC_OK, "DLRM case %d setup: %s", t, rec_errmsg());
    const rec_tensor *tens = NULL;
    const int nt = s ? 0 : rec_model_tensors(cpu, &tens);
    float **start = calloc((size_t)nt + 1, sizeof *start);
    for (int k = 0; k < nt; k++) {
        start[k] = malloc((size_t)rec_tensor_numel(&tens[k]) * sizeof(float));
        memcpy(start[k], tens[k].data, (size_t)rec_tensor_numel(&tens[k]) * sizeof(float));
    }
    double worst_loss = 0;
    for (int step = 0; !s && step < STEPS; step++) {
        rec_batch b;
        dlrm_batch(&b, B, Dn, F, rows);
        double lc = 0, lg = 0;
        int64_t at = -1;
        s = rec_model_train_step(cpu, &b, &lc);
        if (!s) s = rec_cuda_model_train_step(g, &b, &lg, &at);
        if (!s) s = rec_cuda_model_finish(g, &lg, &at);
        CHECK(s == REC_OK && at == step, "DLRM step %d: %s (step %lld)", step, rec_errmsg(), (long long)at);
        worst_loss = fmax(worst_loss, fabs(lg - lc) / fabs(lc));
        rec_batch_free(&b);
    }
    /* bf16 operands (8-bit mantissa) against the fp32 CPU model: the loss within 1e-2 and every
     * tensor's change within 0.25. The embeddings' gradients reach them through bf16 products
     * (the top MLP's input gradient), and where a table's gradient mostly cancels its change
     * errs most: 0.105 for one table on an H100, 2026-11-26, loss 1.5e-4. A wrong operand or an
     * unwritten buffer errs by O(1); the model's quality is checked by its AUC (bench/train_gpu.sh). */
    /* fp32 at the big shape: 1e-3 for the parameters. The CPU model sums a row's gradient in
     * float32 over up to 1400 of a batch's entries, which errs by up to ~4e-4 where they cancel
     * (the CPU engine against float64 above: 2.2e-4 at smaller runs); the GPU sums in float64.
     * Measured on an H100, 2026-11-27: 2.9e-5 and, on another draw, 4.3e-4. */
    const double tl = bf16 ? 1e-2 : 1e-4, tp = bf16 ? 0.25 : big ? 1e-3 : 1e-4;
    CHECK(worst_loss <= tl, "DLRM case %d: loss relative error %g", t, worst_loss);
    if (!s) s = rec_cuda_model_download(g, back);
    CHECK(s == REC_OK && rec_model_steps(back) == STEPS, "download: %s", rec_errmsg());
    const rec_tensor *bt = NULL;
    if (!s) rec_model_tensors(back, &bt);
    double worst = 0;
    const char *wname = "";
    for (int k = 0; !s && k < nt; k++) {
        const size_t n = (size_t)rec_tensor_numel(&tens[k]);
        double num = 0, den = 0;
        for (size_t i = 0; i < n; i++) {
            const double x = bt[k].data[i], y = tens[k].data[i], z = start[k][i];
            num += (x - y) * (x - y), den += (y - z) * (y - z);
        }
        const double e = den > 0 ? sqrt(num / den) : sqrt(num);
        if (!(e <= worst)) worst = e, wname = tens[k].name;
    }
    CHECK(worst <= tp, "DLRM case %d (%s, %s): largest parameter change error %g in %s", t,
          c.interaction == REC_INTERACT_CAT ? "cat" : c.self_interaction ? "dot+self" : "dot",
          dk == REC_OPT_SGD ? "sgd" : dk == REC_OPT_ADAGRAD ? "adagrad" : "adam", worst, wname);
    printf("DLRM case %d (F %d, dim %d, B %d%s): loss error %.3g, largest parameter change error %.3g (%s)\n", t, F,
           c.emb_dim, B, bf16 ? ", bf16" : "", worst_loss, worst, wname);
    for (int k = 0; k < nt; k++) free(start[k]);
    free(start);
    rec_cuda_model_free(g);
    rec_model_free(cpu), rec_model_free(back);
    rec_model_config_free(&c);
}

int main(int argc, char **argv) {
    char name[256];
    if (rec_cuda_probe(name, sizeof name) != REC_OK) {
        printf("%s: skipped\n", rec_errmsg());
        return 77;
    }
    printf("GPU: %s\n", name);
    const int cases = argc > 1 ? atoi(argv[1]) : 24;
    rec_rng_seed(&rng, 2026, 11);
    for (int t = 0; t < cases; t++) test_case(t);
    test_bad_ids();
    for (int t = 0; t < 12; t++) test_bf16_case(t);
    for (int t = 0; t < 6; t++) test_dlrm_case(t);
    printf("backward + update, largest change error against float64: GPU %.3g, CPU engine %.3g\n", worst_gpu, worst_cpu);
    return check_report();
}
