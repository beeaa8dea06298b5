/* Embedding tables (embed.h) against their float64 references and definitions.
 *
 *  - forward (SUM and MEAN, weighted and not, empty bags, duplicate ids within and across bags,
 *    dims 1, 3, 16, 17, 64, tables of 1..5000 rows, a first_feature window; and tables of
 *    131077 and 300000 rows, whose ids take three radix digits, and of 2^24 + 2^18 + 5, four) against
 *    rec_embed_forward_ref, output poisoned with NaN first;
 *  - backward + update for SGD, Adagrad and row-wise Adagrad over 3 successive steps against
 *    rec_embed_grad_ref + rec_embed_update_ref (tables and state), and rows no step touched
 *    bitwise unchanged;
 *  - finite differences (float64) of rec_embed_grad_ref against rec_embed_forward_ref;
 *  - 1 vs 2, 3, 5 threads bitwise identical (init, forward, three updates), under the default
 *    plan and under the row pass (a one-hot step among them);
 *  - init statistics, the exact init formula, determinism per seed;
 *  - every rejection with its message, and bad ids under the row pass reported first in
 *    (feature, row) order whatever the thread count and the order the pass met them;
 *  - the row pass's per-table prefetch (mixed pf in a class, one class and three, batches of
 *    1..900 rows): the bits of a SAMPLE plan, nothing written past the batch, bad ids in a
 *    prefetched table reported.
 *
 * Tolerances (fp32 fast path vs float64 reference), |got - ref| <= 1e-5 * S per element:
 *  forward: S = the same pooling over |T| and |w|. A bag sums L <= 40 products in fp32, which
 *    errs by at most (L + 1) 2^-24 S = 2.5e-6 S (+ one rounding for MEAN's division), so 1e-5
 *    passes every correct ordering while a wrong row, weight or NaN fails.
 *  updates: the float path sums K contributions per row (K up to B * 40 for a 1-row table);
 *    its gradient errs by about sqrt(K) 2^-24 Ga (at most K 2^-24 Ga), Ga = the gradient
 *    computed from |dout| and |w|. S follows that error through each step (see scale_step):
 *    SGD adds lr Ga; Adagrad's step g / sqrt(s) errs by ~ (Ga + |g| d(s)/s) / sqrt(s); the
 *    state errs by 2 |g| Ga. The tables' own magnitude |T| covers fp32 rounding of the
 *    stored values. Since the gradient does not depend on the tables (pooling is linear and
 *    dout is given), errors do not compound over the 3 steps. A flat 1e-5 (1 + |ref|) would
 *    fail correct results where a row's gradient cancels to near zero under Adagrad.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "numcheck.h"
#include "rectrain/core.h"
#include "rectrain/embed.h"

static double urand(void) { return rec_rng_uniform(&g_rng); }
static int64_t irand(int64_t n) { return (int64_t)rec_rng_below(&g_rng, (uint64_t)n); }

/* The ids duplicates are drawn from: the first 4 rows; on tables of more than 2^18 rows,
 * {0, 1, 256, 257} + {0, 1, 2, 3} x 2^16 (+ {0, 1} x 2^24 on tables of more than 2^24 + 2^18
 * rows), ids that share their low 8, 16 or 24 bits, so that a sort that dropped an id's
 * higher digits would split or merge rows' gradients. */
static int64_t hot_id(int64_t R) {
    if (R <= (1 << 18)) return irand(R < 4 ? R : 4);
    const int64_t id = irand(4) << 16 | irand(2) << 8 | irand(2);
    return R > (1 << 24) + (1 << 18) ? irand(2) << 24 | id : id;
}

/* A batch of B rows whose sparse features first..first+F-1 draw ids for table f from
 * [0, rows[f]): bag sizes 0..maxbag (a quarter of bags empty; maxbag -1: exactly one id
 * each, one-hot), half the ids hot (hot_id) so duplicates occur within and across bags;
 * weights in [-1.5, 1.5] when weighted. The other features get one id 0 each. */
static void make_batch(rec_batch *b, int64_t B, int n_sparse, int first, int F, const int64_t *rows,
                       int maxbag, int weighted) {
    rec_status s = rec_batch_init(b, B, 0, n_sparse, 2);
    if (s != REC_OK) {
        fprintf(stderr, "cannot build a test batch: %s\n", rec_errmsg());
        exit(1);
    }
    b->n = B;
    for (int fs = 0; fs < n_sparse; fs++) {
        const int f = fs - first;
        const int in = f >= 0 && f < F;
        rec_jagged *j = &b->sparse[fs];
        j->offsets[0] = 0;
        for (int64_t r = 0; r < B; r++) {
            int64_t L = !in || maxbag < 0 ? 1 : urand() < 0.25 ? 0 : irand(maxbag + 1);
            if (s == REC_OK) s = rec_batch_reserve_nnz(b, fs, j->offsets[r] + L, in && weighted);
            if (s != REC_OK) L = 0;
            for (int64_t k = j->offsets[r]; k < j->offsets[r] + L; k++) {
                const int64_t R = in ? rows[f] : 1;
                j->ids64[k] = urand() < 0.5 ? hot_id(R) : irand(R);
                if (j->weights) j->weights[k] = (float)(3.0 * urand() - 1.5);
            }
            j->offsets[r + 1] = j->offsets[r] + L;
        }
        /* half the features hold their ids as int32, as the loader gives them */
        if (s == REC_OK && urand() < 0.5) s = rec_batch_set_wide(b, fs, 0);
    }
    CHECK(s == REC_OK, "building a test batch: %s", rec_errmsg());
}

/* The batch's weights replaced by their absolute values (saved in *saved[f]) or restored. */
static void abs_weights(rec_batch *b, int first, int F, float **saved, int restore) {
    for (int f = 0; f < F; f++) {
        rec_jagged *j = &b->sparse[first + f];
        if (!j->weights) continue;
        const int64_t n = rec_batch_nnz(b, first + f);
        if (!restore) {
            saved[f] = malloc((size_t)(n + 1) * sizeof(float));
            memcpy(saved[f], j->weights, (size_t)n * sizeof(float));
            for (int64_t k = 0; k < n; k++) j->weights[k] = fabsf(j->weights[k]);
        } else {
            memcpy(j->weights, saved[f], (size_t)n * sizeof(float));
            free(saved[f]);
        }
    }
}

/* Adds one step's error scale (see the header comment) for table f to scT (R, E) and scS. */
static void scale_step(rec_sparse_opt_kind kind, double lr, double eps, int64_t R, int E, const double *g,
                       const double *ga, const uint8_t *touched, const double *st, double *scT, double *scS) {
    for (int64_t r = 0; r < R; r++) {
        if (!touched[r]) continue;
        double mga = 0.0;
        for (int c = 0; c < E; c++) mga += fabs(g[r * E + c]) * ga[r * E + c] / E;
        for (int c = 0; c < E; c++) {
            const size_t i = (size_t)r * E + c;
            if (kind == REC_SPARSE_SGD) {
                scT[i] += lr * ga[i];
            } else if (kind == REC_SPARSE_ADAGRAD) {
                scS[i] += g[i] * g[i] + 2.0 * fabs(g[i]) * ga[i];
                const double s = st[i];
                scT[i] += lr * (ga[i] + fabs(g[i]) * 2.0 * fabs(g[i]) * ga[i] / (s > 0 ? s : 1e-300)) /
                          (sqrt(s) + eps);
            } else {
                const double s = st[r];
                scT[i] += lr * (ga[i] + fabs(g[i]) * 2.0 * mga / (s > 0 ? s : 1e-300)) / (sqrt(s) + eps);
            }
        }
        if (kind == REC_SPARSE_ROWWISE_ADAGRAD) {
            double m = 0.0;
            for (int c = 0; c < E; c++) m += g[r * E + c] * g[r * E + c] / E;
            scS[r] += m + 2.0 * mga;
        }
    }
}

typedef struct cfg_case {
    int F, first, n_sparse, B, maxbag, weighted, threads;
    rec_pooling pooling;
    rec_sparse_opt_kind kind;
    int64_t rows[8];
    int dims[8];
} cfg_case;

/* Three forward + backward/update steps on fresh batches, each checked against the refs. */
static void run_case(const cfg_case *k, uint64_t seed) {
    const int F = k->F;
    rec_embed_config cfg = {F, k->rows, k->dims, k->pooling, rec_sparse_opt_defaults(k->kind, 0.05f),
                            k->B, k->threads, seed, 0, 0, REC_ROUND_STOCHASTIC};
    if (k->kind != REC_SPARSE_SGD && (seed & 1)) cfg.opt.init_acc = 0.1f;
    rec_embed *e;
    rec_status s = rec_embed_init(&e, &cfg);
    CHECK(s == REC_OK, "init: %s", rec_errmsg());
    if (s != REC_OK) return;
    const int W = rec_embed_out_width(e);
    double *T[8], *St[8], *G[8], *Ga[8], *scT[8], *scS[8];
    float *T0[8], *S0[8];
    uint8_t *touched[8];
    for (int f = 0; f < F; f++) {
        const size_t n = (size_t)k->rows[f] * k->dims[f], ns = rec_embed_state_len(e, f);
        T[f] = to_f64(rec_embed_table(e, f), n, 0);
        scT[f] = to_f64(rec_embed_table(e, f), n, 1);
        T0[f] = malloc(n * sizeof(float));
        memcpy(T0[f], rec_embed_table(e, f), n * sizeof(float));
        St[f] = ns ? to_f64(rec_embed_state(e, f), ns, 0) : NULL;
        scS[f] = ns ? to_f64(rec_embed_state(e, f), ns, 1) : NULL;
        S0[f] = malloc((ns + 1) * sizeof(float));
        if (ns) memcpy(S0[f], rec_embed_state(e, f), ns * sizeof(float));
        G[f] = malloc(n * sizeof(double));
        Ga[f] = malloc(n * sizeof(double));
        touched[f] = calloc((size_t)k->rows[f], 1);
    }
    const size_t no = (size_t)k->B * W;
    float *out = malloc((no + 1) * sizeof(float)), *dout = malloc((no + 1) * sizeof(float));
    double *oref = malloc((no + 1) * sizeof(double)), *oS = malloc((no + 1) * sizeof(double));
    for (int step = 0; step < 3; step++) {
        rec_batch b;
        make_batch(&b, k->B, k->n_sparse, k->first, F, k->rows, k->maxbag, k->weighted);
        /* forward, against the ref on the fast path's current tables */
        for (size_t i = 0; i < no; i++) out[i] = NAN;
        s = rec_embed_forward(e, &b, k->first, out);
        CHECK(s == REC_OK, "forward: %s", rec_errmsg());
        double *cur[8], *cura[8];
        for (int f = 0; f < F; f++) {
            cur[f] = to_f64(rec_embed_table(e, f), (size_t)k->rows[f] * k->dims[f], 0);
            cura[f] = to_f64(rec_embed_table(e, f), (size_t)k->rows[f] * k->dims[f], 1);
        }
        float *saved[8];
        rec_embed_forward_ref(F, k->rows, k->dims, k->pooling, &b, k->first, (const double *const *)cur, oref);
        abs_weights(&b, k->first, F, saved, 0);
        rec_embed_forward_ref(F, k->rows, k->dims, k->pooling, &b, k->first, (const double *const *)cura, oS);
        abs_weights(&b, k->first, F, saved, 1);
        int bad = count_bad("out", out, oref, oS, no, 1e-5);
        CHECK(bad == 0, "forward F %d B %d pool %d weighted %d: %d of %zu off", F, k->B, k->pooling, k->weighted, bad, no);
        for (int f = 0; f < F; f++) free(cur[f]), free(cura[f]);

        /* backward + update */
        for (size_t i = 0; i < no; i++) dout[i] = (float)(2.0 * urand() - 1.0);
        const float lr = 0.05f / (float)(step + 1);
        s = rec_embed_backward_update(e, &b, k->first, dout, lr);
        CHECK(s == REC_OK, "backward: %s", rec_errmsg());
        double *dd = to_f64(dout, no, 0), *da = to_f64(dout, no, 1);
        rec_embed_grad_ref(F, k->rows, k->dims, k->pooling, &b, k->first, dd, G);
        abs_weights(&b, k->first, F, saved, 0);
        rec_embed_grad_ref(F, k->rows, k->dims, k->pooling, &b, k->first, da, Ga);
        abs_weights(&b, k->first, F, saved, 1);
        uint8_t *tnow[8];
        for (int f = 0; f < F; f++) {
            tnow[f] = calloc((size_t)k->rows[f], 1);
            const rec_jagged *j = &b.sparse[k->first + f];
            for (int64_t i = 0; i < rec_batch_nnz(&b, k->first + f); i++) tnow[f][rec_jagged_id(j, i)] = touched[f][rec_jagged_id(j, i)] = 1;
        }
        rec_embed_update_ref(F, k->rows, k->dims, &cfg.opt, lr, (const double *const *)G,
                             (const uint8_t *const *)tnow, T, St);
        for (int f = 0; f < F; f++) {
            scale_step(k->kind, lr, cfg.opt.eps, k->rows[f], k->dims[f], G[f], Ga[f], tnow[f], St[f], scT[f], scS[f]);
            free(tnow[f]);
        }
        free(dd), free(da);
        rec_batch_free(&b);
    }
    for (int f = 0; f < F; f++) {
        const size_t n = (size_t)k->rows[f] * k->dims[f], ns = rec_embed_state_len(e, f);
        const float *t = rec_embed_table(e, f), *st = rec_embed_state(e, f);
        int bad = count_bad("table", t, T[f], scT[f], n, 1e-5);
        if (ns) bad += count_bad("state", st, St[f], scS[f], ns, 1e-5);
        CHECK(bad == 0, "update kind %d table %d (%lld x %d) pool %d weighted %d: %d elements off", k->kind, f,
              (long long)k->rows[f], k->dims[f], k->pooling, k->weighted, bad);
        int same = 1;
        for (int64_t r = 0; r < k->rows[f]; r++) {
            if (touched[f][r]) continue;
            const size_t E = (size_t)k->dims[f];
            if (memcmp(t + r * E, T0[f] + r * E, E * sizeof(float)) != 0) same = 0;
            if (k->kind == REC_SPARSE_ADAGRAD && memcmp(st + r * E, S0[f] + r * E, E * sizeof(float)) != 0) same = 0;
            if (k->kind == REC_SPARSE_ROWWISE_ADAGRAD && memcmp(st + r, S0[f] + r, sizeof(float)) != 0) same = 0;
        }
        CHECK(same, "table %d: an untouched row or its state changed", f);
        free(T[f]), free(St[f]), free(G[f]), free(Ga[f]), free(scT[f]), free(scS[f]), free(T0[f]), free(S0[f]);
        free(touched[f]);
    }
    free(out), free(dout), free(oref), free(oS);
    rec_embed_free(e);
}

static void test_vs_ref(void) {
    static const int dims[] = {1, 3, 16, 17, 64};
    static const int64_t rows[] = {1, 2, 7, 100, 5000};
    for (int it = 0; it < 36; it++) {
        cfg_case k;
        memset(&k, 0, sizeof k);
        k.F = 1 + (int)irand(4);
        k.first = (int)irand(2);
        k.n_sparse = k.first + k.F + (int)irand(2);
        k.B = 1 + (int)irand(48);
        k.maxbag = it % 3 == 0 ? 1 : 40;
        k.weighted = it % 2;
        k.pooling = (it / 2) % 2 ? REC_POOL_MEAN : REC_POOL_SUM;
        k.kind = (rec_sparse_opt_kind)((it / 4) % 3);
        k.threads = 1 + (int)irand(2);
        for (int f = 0; f < k.F; f++) {
            k.dims[f] = dims[irand(5)];
            k.rows[f] = it % 5 == 0 && f == 0 ? 1 : rows[irand(5)];
        }
        run_case(&k, 100 + it);
    }
}

/* Tables whose ids need three radix digits (300000 x 8, too large for DENSE and COUNT, so
 * the default plan sorts them by RADIX; and 131077 x 1), their hot ids sharing low digits,
 * under each optimizer; and one whose ids need four. */
static void test_large_ids(void) {
    for (int it = 0; it < 3; it++) {
        cfg_case k;
        memset(&k, 0, sizeof k);
        k.F = 2;
        k.n_sparse = 2;
        k.B = 48;
        k.maxbag = 40;
        k.weighted = it % 2;
        k.pooling = it == 1 ? REC_POOL_MEAN : REC_POOL_SUM;
        k.kind = (rec_sparse_opt_kind)it;
        k.threads = 1 + it % 2;
        k.rows[0] = 300000;
        k.dims[0] = 8;
        k.rows[1] = (1 << 17) + 5;
        k.dims[1] = 1;
        run_case(&k, 200 + it);
    }
    /* A table past 2^24 rows (17M x 1, 68 MB): its ids take a fourth radix digit. */
    cfg_case k = {1, 0, 1, 32, 40, 1, 2, REC_POOL_SUM, REC_SPARSE_ROWWISE_ADAGRAD, {(1 << 24) + (1 << 18) + 5}, {1}};
    run_case(&k, 203);
}

/* ---- finite differences of the reference gradient ----------------------------------------- */

static double loss_ref(int F, const int64_t *rows, const int *dims, rec_pooling pool, const rec_batch *b,
                       double *const *T, const double *dout, double *out, int W) {
    rec_embed_forward_ref(F, rows, dims, pool, b, 0, (const double *const *)T, out);
    double l = 0.0;
    for (int64_t i = 0; i < b->n * W; i++) l += out[i] * dout[i];
    return l;
}

static void test_fd(void) {
    const int64_t rows[2] = {5, 3};
    const int dims[2] = {3, 2};
    const int W = 5, B = 6;
    for (int pool = 0; pool < 2; pool++)
        for (int weighted = 0; weighted < 2; weighted++) {
            rec_batch b;
            make_batch(&b, B, 2, 0, 2, rows, 5, weighted);
            double *T[2], *G[2], dout[6 * 5], out[6 * 5];
            for (int f = 0; f < 2; f++) {
                T[f] = malloc(sizeof(double) * rows[f] * dims[f]);
                G[f] = malloc(sizeof(double) * rows[f] * dims[f]);
                for (int i = 0; i < rows[f] * dims[f]; i++) T[f][i] = urand() - 0.5;
            }
            double sabs = 0.0;
            for (int i = 0; i < B * W; i++) dout[i] = urand() * 2 - 1, sabs += fabs(dout[i]);
            rec_embed_grad_ref(2, rows, dims, (rec_pooling)pool, &b, 0, dout, G);
            int bad = 0;
            const double h = 1e-3;
            for (int f = 0; f < 2; f++)
                for (int i = 0; i < rows[f] * dims[f]; i++) {
                    const double t = T[f][i];
                    T[f][i] = t + h;
                    double lp = loss_ref(2, rows, dims, (rec_pooling)pool, &b, T, dout, out, W);
                    T[f][i] = t - h;
                    double lm = loss_ref(2, rows, dims, (rec_pooling)pool, &b, T, dout, out, W);
                    T[f][i] = t;
                    /* The loss is linear in T: the central difference is exact up to rounding
                     * of the loss (~1e-16 * 1.5 * sabs * 2 / h). */
                    if (!(fabs((lp - lm) / (2 * h) - G[f][i]) <= 1e-9 * (1 + sabs))) bad++;
                }
            CHECK(bad == 0, "finite differences pool %d weighted %d: %d elements off", pool, weighted, bad);
            for (int f = 0; f < 2; f++) free(T[f]), free(G[f]);
            rec_batch_free(&b);
        }
}

/* ---- thread counts ------------------------------------------------------------------------- */

static void test_threads(void) {
    int64_t rows[26];
    int dims[26];
    for (int f = 0; f < 26; f++) rows[f] = f % 5 == 0 ? 1 : 1 + irand(3000), dims[f] = f == 25 ? 17 : f % 3 ? 16 : 8;
    const int B = 300, NT = 4, threads[4] = {1, 2, 3, 5}; /* 3 and 5: walks served by one thread (forward.c) */
    static const char *const PLANS[2] = {"sample/fixed/pf8/g10+dense/pf8", "row/fixed/pf16/g9+dense/pf8"};
    for (int plan = 0; plan < 2; plan++)
        for (int kind = 0; kind < 3; kind++) {
            rec_embed_sched s;
            CHECK(rec_embed_sched_parse(PLANS[plan], &s) == REC_OK, "plan: %s", rec_errmsg());
            rec_embed *e[4];
            for (int t = 0; t < NT; t++) {
                rec_embed_config cfg = {26, rows, dims, (rec_pooling)(kind == 1),
                                        rec_sparse_opt_defaults((rec_sparse_opt_kind)kind, 0.1f), B, threads[t], 77, 0, 0, REC_ROUND_STOCHASTIC};
                CHECK(rec_embed_init(&e[t], &cfg) == REC_OK, "init: %s", rec_errmsg());
                rec_embed_set_uniform(e[t], s);
            }
            const int W = rec_embed_out_width(e[0]);
            float *out[4], *dout = malloc(sizeof(float) * B * W);
            for (int t = 0; t < NT; t++) out[t] = malloc(sizeof(float) * B * W);
            int same[4] = {1, 1, 1, 1};
            for (int step = 0; step < 3; step++) {
                rec_batch b;
                make_batch(&b, B, 26, 0, 26, rows, step == 1 ? -1 : step == 2 ? 1 : 6, kind == 2);
                for (int i = 0; i < B * W; i++) dout[i] = (float)(urand() - 0.5);
                for (int t = 0; t < NT; t++) {
                    for (int i = 0; i < B * W; i++) out[t][i] = NAN; /* a bag left unwritten shows */
                    CHECK(rec_embed_forward(e[t], &b, 0, out[t]) == REC_OK, "forward: %s", rec_errmsg());
                    CHECK(rec_embed_backward_update(e[t], &b, 0, dout, 0.1f) == REC_OK, "backward: %s", rec_errmsg());
                    if (memcmp(out[0], out[t], sizeof(float) * B * W) != 0) same[t] = 0;
                }
                int finite = 1;
                for (int i = 0; i < B * W; i++) finite &= isfinite(out[0][i]) != 0;
                CHECK(finite, "%s, kind %d, step %d: the forward left outputs unwritten", PLANS[plan], kind, step);
                rec_batch_free(&b);
            }
            for (int t = 1; t < NT; t++) {
                for (int f = 0; f < 26; f++) {
                    if (memcmp(rec_embed_table(e[0], f), rec_embed_table(e[t], f), sizeof(float) * rows[f] * dims[f]) != 0)
                        same[t] = 0;
                    if (rec_embed_state_len(e[0], f) &&
                        memcmp(rec_embed_state(e[0], f), rec_embed_state(e[t], f), sizeof(float) * rec_embed_state_len(e[0], f)) != 0)
                        same[t] = 0;
                }
                CHECK(same[t], "%s, kind %d: 1 and %d threads differ", PLANS[plan], kind, threads[t]);
            }
            for (int t = 0; t < NT; t++) free(out[t]), rec_embed_free(e[t]);
            free(dout);
        }
}

/* ---- init ---------------------------------------------------------------------------------- */

static void test_init(void) {
    const int64_t rows[3] = {1000, 1, 37};
    const int dims[3] = {16, 3, 64};
    rec_embed_config cfg = {3, rows, dims, REC_POOL_SUM, rec_sparse_opt_defaults(REC_SPARSE_ROWWISE_ADAGRAD, 0.1f), 8, 0, 5, 0, 0, REC_ROUND_STOCHASTIC};
    cfg.opt.init_acc = 0.25f;
    rec_embed *a, *b, *c;
    CHECK(rec_embed_init(&a, &cfg) == REC_OK, "init: %s", rec_errmsg());
    CHECK(rec_embed_init(&b, &cfg) == REC_OK, "init: %s", rec_errmsg());
    cfg.seed = 6;
    CHECK(rec_embed_init(&c, &cfg) == REC_OK, "init: %s", rec_errmsg());
    CHECK(rec_embed_tables(a) == 3 && rec_embed_out_width(a) == 83 && rec_embed_rows(a, 2) == 37 && rec_embed_dim(a, 1) == 3,
          "accessors");
    CHECK(rec_embed_state_len(a, 0) == 1000 && rec_embed_state_len(a, 2) == 37, "row-wise state length");
    CHECK(rec_embed_table(a, 3) == NULL && rec_embed_state(a, -1) == NULL, "out-of-range table accessors");
    for (int f = 0; f < 3; f++) {
        const float *t = rec_embed_table(a, f);
        const size_t n = (size_t)rows[f] * dims[f];
        const double lim = sqrt(1.0 / rows[f]);
        double m = 0.0, v = 0.0;
        int inside = 1;
        for (size_t i = 0; i < n; i++) {
            if (!(fabsf(t[i]) <= (float)lim)) inside = 0;
            m += t[i];
            v += (double)t[i] * t[i];
        }
        m /= n, v /= n;
        CHECK(inside, "table %d: a value outside +-sqrt(1/R)", f);
        /* uniform(-a, a): mean 0 with standard error a / sqrt(3n), variance a^2 / 3 */
        CHECK(fabs(m) <= 5 * lim / sqrt(3.0 * n), "table %d: mean %g", f, m);
        if (n > 1000) CHECK(fabs(v / (lim * lim / 3) - 1) < 0.1, "table %d: variance %g", f, v);
        rec_rng r;
        rec_rng_seed(&r, 5, (uint64_t)f);
        const float first = (float)((2.0 * rec_rng_uniform(&r) - 1.0) * lim);
        CHECK(t[0] == first, "table %d: first value %g, want %g from rec_rng(5, %d)", f, t[0], first, f);
        CHECK(memcmp(t, rec_embed_table(b, f), n * sizeof(float)) == 0, "table %d differs for the same seed", f);
        CHECK(memcmp(t, rec_embed_table(c, f), n * sizeof(float)) != 0, "table %d equal for another seed", f);
        int acc_ok = 1;
        for (int64_t i = 0; i < rows[f]; i++) acc_ok &= rec_embed_state(a, f)[i] == 0.25f;
        CHECK(acc_ok, "table %d: state not init_acc", f);
    }
    rec_embed_free(a), rec_embed_free(b), rec_embed_free(c);

    rec_sparse_opt_config d = rec_sparse_opt_defaults(REC_SPARSE_ADAGRAD, 0.01f);
    CHECK(d.kind == REC_SPARSE_ADAGRAD && d.lr == 0.01f && d.eps == 1e-10f && d.init_acc == 0.0f, "Adagrad defaults");
    CHECK(rec_sparse_opt_defaults(REC_SPARSE_ROWWISE_ADAGRAD, 1).eps == 1e-8f, "row-wise defaults");

    rec_embed_config z = {0, NULL, NULL, REC_POOL_SUM, rec_sparse_opt_defaults(REC_SPARSE_SGD, 1), 4, 1, 0, 0, 0, REC_ROUND_STOCHASTIC};
    rec_embed *ze;
    CHECK(rec_embed_init(&ze, &z) == REC_OK && rec_embed_out_width(ze) == 0, "no tables");
    rec_batch bb;
    rec_batch_init(&bb, 4, 0, 0, 1);
    bb.n = 4;
    float x = 0;
    CHECK(rec_embed_forward(ze, &bb, 0, &x) == REC_OK && rec_embed_backward_update(ze, &bb, 0, &x, 1) == REC_OK,
          "no tables: forward and backward");
    rec_batch_free(&bb);
    rec_embed_free(ze);
}

/* ---- rejections ---------------------------------------------------------------------------- */

static void test_errors(void) {
    int64_t rows[4] = {10, 20, 1460, 5};
    int dims[4] = {4, 4, 16, 3};
    rec_embed_config good = {4, rows, dims, REC_POOL_SUM, rec_sparse_opt_defaults(REC_SPARSE_ADAGRAD, 0.1f), 64, 2, 1, 0, 0, REC_ROUND_STOCHASTIC};
    rec_embed_config c;
    rec_embed *e = (rec_embed *)&c;
#define BAD(field_set, needle)                                               \
    do {                                                                     \
        c = good;                                                            \
        field_set;                                                           \
        e = (rec_embed *)&c;                                                 \
        CHECK_ERR(rec_embed_init(&e, &c), REC_EINVAL, needle);               \
        CHECK(e == NULL, "out not NULL after a failed init");                \
    } while (0)
    BAD(c.n_tables = -1, "n_tables is -1");
    BAD(c.rows = NULL, "rows and dims must point");
    int64_t r0[4] = {10, 20, 30, 0};
    BAD(c.rows = r0, "table 3 has 0 rows");
    int d0[4] = {4, -2, 4, 4};
    BAD(c.dims = d0, "table 1 has dim -2");
    d0[1] = 4, d0[3] = 0;
    BAD(c.dims = d0, "table 3 has dim 0");
    BAD(c.pooling = (rec_pooling)5, "unknown pooling 5");
    BAD(c.opt.kind = (rec_sparse_opt_kind)9, "unknown sparse optimizer kind 9");
    BAD(c.opt.lr = 0, "lr is 0");
    BAD(c.opt.lr = NAN, "lr is nan");
    BAD(c.opt.lr = INFINITY, "lr is inf");
    BAD(c.opt.eps = -1, "eps is -1");
    BAD(c.opt.init_acc = -0.5f, "init_acc is -0.5");
    BAD(c.max_batch = 0, "max_batch is 0");
    BAD(c.threads = -3, "threads is -3");
    BAD(c.threads = -1, "threads is -1");
    int64_t r16[16];
    int d16[16];
    for (int f = 0; f < 16; f++) r16[f] = 1, d16[f] = 1;
    BAD((c.n_tables = 16, c.rows = r16, c.dims = d16, c.max_batch = INT32_MAX),
        "16 tables with max_batch 2147483647 make up to 4294967296 forward work items; at most 4294967294");
#undef BAD

    CHECK(rec_embed_init(&e, &good) == REC_OK, "init: %s", rec_errmsg());
    const int W = rec_embed_out_width(e);
    rec_batch b;
    make_batch(&b, 64, 5, 1, 4, rows, 3, 0);
    float *out = malloc(sizeof(float) * 64 * W), *dout = calloc((size_t)64 * W, sizeof(float));
    CHECK(rec_embed_forward(e, &b, 1, out) == REC_OK, "forward: %s", rec_errmsg());
    CHECK_ERR(rec_embed_forward(e, &b, 2, out), REC_EINVAL, "need first_feature in [0, 1]");
    CHECK_ERR(rec_embed_forward(e, &b, -1, out), REC_EINVAL, "need first_feature in [0, 1]");
    CHECK_ERR(rec_embed_backward_update(e, &b, 1, dout, NAN), REC_EINVAL, "learning rate is nan");
    b.n = -1;
    CHECK_ERR(rec_embed_forward(e, &b, 1, out), REC_EINVAL, "embedding forward: batch of -1 rows; the batch is corrupt");
    CHECK_ERR(rec_embed_backward_update(e, &b, 1, dout, 0.1f), REC_EINVAL, "embedding backward: batch of -1 rows");
    b.n = 64;
    CHECK_ERR(rec_embed_backward_update(e, &b, 1, dout, -1), REC_EINVAL, "learning rate is -1");

    /* Bad ids in (feature 3 = table 2, row 40), (table 2, row 45) and (table 3, row 17): the
     * first in (feature, row) order is reported whatever the threads did. */
    float *t0 = malloc(sizeof(float) * 1460 * 16);
    memcpy(t0, rec_embed_table(e, 2), sizeof(float) * 1460 * 16);
    rec_jagged *j2 = &b.sparse[3], *j3 = &b.sparse[4];
    CHECK(rec_batch_set_wide(&b, 3, 1) == REC_OK && rec_batch_set_wide(&b, 4, 0) == REC_OK, "widths: %s", rec_errmsg());
    j2->offsets[0] = 0; /* give rows 40 and 45 one id each */
    for (int r = 0; r < 64; r++) j2->offsets[r + 1] = j2->offsets[r] + 1, j2->ids64[r] = r;
    j2->ids64[40] = 99999;
    j2->ids64[45] = 1460;
    for (int r = 0; r < 64; r++) j3->offsets[r + 1] = j3->offsets[r] + 1, j3->ids32[r] = 0;
    j3->ids32[17] = -4; /* a 32-bit id is checked like a 64-bit one */
    const char *want = "feature 3 (table 2, 1460 rows), batch row 40: id 99999 is outside [0, 1460)";
    CHECK_ERR(rec_embed_forward(e, &b, 1, out), REC_EINVAL, want);
    CHECK_ERR(rec_embed_backward_update(e, &b, 1, dout, 0.1f), REC_EINVAL, want);
    j2->ids64[40] = 3, j2->ids64[45] = 3;
    CHECK_ERR(rec_embed_forward(e, &b, 1, out), REC_EINVAL, "feature 4 (table 3, 5 rows), batch row 17: id -4 is outside [0, 5)");
    CHECK_ERR(rec_embed_backward_update(e, &b, 1, dout, 0.1f), REC_EINVAL, "batch row 17: id -4 is outside");
    CHECK(memcmp(t0, rec_embed_table(e, 2), sizeof(float) * 1460 * 16) == 0, "a failed backward changed a table");
    j3->ids32[17] = 0;
    int64_t keep = j3->offsets[9];
    j3->offsets[9] = j3->offsets[8] - 1;
    CHECK_ERR(rec_embed_forward(e, &b, 1, out), REC_EINVAL, "feature 4, batch row 8: bag offsets [8, 7)");
    CHECK_ERR(rec_embed_backward_update(e, &b, 1, dout, 0.1f), REC_EINVAL, "feature 4, batch row 8: bag offsets");
    /* Offsets whose differences wrap around to look non-decreasing (8, INT64_MAX, -2, 11):
     * the vectorised scan must not take them for valid bags. */
    const int64_t keep10 = j3->offsets[10];
    j3->offsets[9] = INT64_MAX, j3->offsets[10] = -2;
    CHECK_ERR(rec_embed_forward(e, &b, 1, out), REC_EINVAL, "feature 4, batch row 8: bag offsets [8, 9223372036854775807)");
    CHECK_ERR(rec_embed_backward_update(e, &b, 1, dout, 0.1f), REC_EINVAL, "feature 4, batch row 8: bag offsets [8, 9223372036854775807)");
    j3->offsets[9] = keep, j3->offsets[10] = keep10;
    /* A bag starting before the ids (row 0 at -1), and the last bag ending one id past the
     * feature's capacity: both would read outside the ids. */
    j3->offsets[0] = -1;
    CHECK_ERR(rec_embed_forward(e, &b, 1, out), REC_EINVAL, "feature 4, batch row 0: bag offsets [-1, 1)");
    CHECK_ERR(rec_embed_backward_update(e, &b, 1, dout, 0.1f), REC_EINVAL, "feature 4, batch row 0: bag offsets [-1, 1)");
    j3->offsets[0] = 0;
    const int64_t keep64 = j3->offsets[64];
    j3->offsets[64] = j3->nnz_cap + 1;
    char past[96];
    snprintf(past, sizeof past, "feature 4, batch row 63: bag offsets [63, %lld)", (long long)j3->nnz_cap + 1);
    CHECK_ERR(rec_embed_forward(e, &b, 1, out), REC_EINVAL, past);
    CHECK_ERR(rec_embed_backward_update(e, &b, 1, dout, 0.1f), REC_EINVAL, past);
    j3->offsets[64] = keep64;
    CHECK(rec_embed_backward_update(e, &b, 1, dout, 0.1f) == REC_OK, "backward after repair: %s", rec_errmsg());
    rec_batch_free(&b);

    make_batch(&b, 65, 4, 0, 4, rows, 2, 0);
    CHECK_ERR(rec_embed_forward(e, &b, 0, out), REC_EINVAL, "batch of 65 rows, but max_batch is 64");
    CHECK_ERR(rec_embed_backward_update(e, &b, 0, dout, 0.1f), REC_EINVAL, "raise max_batch");
    rec_batch_free(&b);
    free(out), free(dout), free(t0);
    rec_embed_free(e);
}

static void set_id(rec_jagged *j, int64_t k, int64_t id) {
    if (j->wide) j->ids64[k] = id;
    else j->ids32[k] = (int32_t)id;
}

/* Bad ids under the row pass, which walks rows first: with bad ids at (table 2, row 5) and
 * (table 1, row 50) it meets table 2's first, yet table 1's is reported, as under every other
 * schedule; a table the pass does not take (a bag of feature 0 is empty) reports its own when
 * its key is lower; a one-hot feature whose offsets are corrupt leaves the pass and is
 * reported by its item. 1, 2 and 3 threads (row ranges split between the errors or not). */
static void test_row_errors(void) {
    int64_t rows[4] = {30, 40, 1460, 5};
    int dims[4] = {8, 16, 16, 3}; /* tables 1 and 2 in one class; dim 3: no FIXED code, so SAMPLE */
    rec_embed_sched row, def;
    CHECK(rec_embed_sched_parse("row/fixed/pf4/g6+radix/pf8", &row) == REC_OK &&
              rec_embed_sched_parse("sample/fixed/pf8/g10+dense/pf8", &def) == REC_OK,
          "parse: %s", rec_errmsg());
    for (int nt = 1; nt <= 3; nt++) {
        rec_embed_config cfg = {4, rows, dims, REC_POOL_SUM, rec_sparse_opt_defaults(REC_SPARSE_SGD, 0.1f), 64, nt, 1, 0, 0, REC_ROUND_STOCHASTIC};
        rec_embed *e;
        CHECK(rec_embed_init(&e, &cfg) == REC_OK, "init: %s", rec_errmsg());
        rec_embed_set_uniform(e, row);
        rec_batch b;
        make_batch(&b, 64, 4, 0, 4, rows, -1, 0);
        CHECK(rec_batch_set_wide(&b, 1, 0) == REC_OK && rec_batch_set_wide(&b, 2, 0) == REC_OK, "narrow: %s", rec_errmsg());
        const int W = rec_embed_out_width(e);
        float *out = malloc(sizeof(float) * 64 * W), *ref = malloc(sizeof(float) * 64 * W);
        rec_jagged *j0 = &b.sparse[0], *j1 = &b.sparse[1], *j2 = &b.sparse[2];
        for (int r = 3; r < 64; r++) j0->offsets[r + 1]--; /* bag 3 empty: feature 0 is not one-hot */
        const int64_t k0 = j0->offsets[60], k1 = j1->offsets[50], k2 = j2->offsets[5];
        const int64_t id0 = rec_jagged_id(j0, k0), id1 = rec_jagged_id(j1, k1), id2 = rec_jagged_id(j2, k2);
        set_id(j0, k0, 30), set_id(j1, k1, 40), set_id(j2, k2, 1460);
        CHECK_ERR(rec_embed_forward(e, &b, 0, out), REC_EINVAL, "feature 0 (table 0, 30 rows), batch row 60: id 30 is outside [0, 30)");
        set_id(j0, k0, id0);
        CHECK_ERR(rec_embed_forward(e, &b, 0, out), REC_EINVAL, "feature 1 (table 1, 40 rows), batch row 50: id 40 is outside [0, 40)");
        set_id(j1, k1, id1);
        CHECK_ERR(rec_embed_forward(e, &b, 0, out), REC_EINVAL, "feature 2 (table 2, 1460 rows), batch row 5: id 1460 is outside");
        set_id(j2, k2, id2);
        const int64_t keep9 = j1->offsets[9], keep10 = j1->offsets[10];
        j1->offsets[9] = INT64_MAX, j1->offsets[10] = -2;
        CHECK_ERR(rec_embed_forward(e, &b, 0, out), REC_EINVAL, "feature 1, batch row 8: bag offsets [8, 9223372036854775807)");
        j1->offsets[9] = keep9, j1->offsets[10] = keep10;
        for (int i = 0; i < 64 * W; i++) out[i] = NAN;
        CHECK(rec_embed_forward(e, &b, 0, out) == REC_OK, "%d threads, repaired batch: %s", nt, rec_errmsg());
        rec_embed_set_uniform(e, def);
        CHECK(rec_embed_forward(e, &b, 0, ref) == REC_OK, "default plan: %s", rec_errmsg());
        CHECK(!memcmp(out, ref, sizeof(float) * 64 * W), "%d threads: the row pass and the default plan differ in bits", nt);
        free(out), free(ref);
        rec_batch_free(&b);
        rec_embed_free(e);
    }
}

/* The row pass's prefetch (a table's pf requests its row for the batch row pf ahead): one
 * class of tables with mixed pf (0, 4, 16, 48), alone (a thread's prefetch then runs on
 * across its chunks) and beside two more classes (dim 8; 64-bit ids), 1-3 threads, batches
 * of 1, 3, 130 and 900 rows (900: several chunks a thread): the bits of a SAMPLE plan and no
 * row past the batch's written; checked mode: a bad id in a prefetched table at the batch's
 * last row, and at row 500, which the prefetch reaches from the chunk before, is reported as
 * under every other schedule. */
static void test_row_prefetch(void) {
    enum { F = 9, MAXB = 900 };
    const int64_t rows[F] = {5, 1, 3000, 40, 20000, 7, 100, 9, 50};
    const int dims[F] = {16, 16, 16, 16, 16, 16, 8, 8, 16};
    const uint8_t pf[F] = {0, 48, 4, 0, 16, 4, 16, 0, 4};
    static const int64_t SIZES[4] = {1, 3, 130, MAXB};
    rec_embed_sched row, plain;
    CHECK(rec_embed_sched_parse("row/fixed/pf0/g12+radix/pf8", &row) == REC_OK &&
              rec_embed_sched_parse("sample/fixed/pf0/g6+radix/pf8", &plain) == REC_OK,
          "parse: %s", rec_errmsg());
    for (int nf = 6; nf <= F; nf += 3) /* 6: one class; 9: three */
        for (int nt = 1; nt <= 3; nt++) {
            rec_embed_config cfg = {nf, rows, dims, REC_POOL_SUM, rec_sparse_opt_defaults(REC_SPARSE_SGD, 0.1f), MAXB, nt, 3, 0, 0, REC_ROUND_STOCHASTIC};
            rec_embed *e;
            CHECK(rec_embed_init(&e, &cfg) == REC_OK, "init: %s", rec_errmsg());
            const size_t W = (size_t)rec_embed_out_width(e);
            float *out = malloc(sizeof(float) * MAXB * W), *ref = malloc(sizeof(float) * MAXB * W);
            for (int si = 0; si < 4; si++) {
                const int64_t B = SIZES[si];
                rec_batch b;
                make_batch(&b, B, nf, 0, nf, rows, -1, 0);
                for (int f = 0; f < nf; f++) CHECK(rec_batch_set_wide(&b, f, f == 8) == REC_OK, "width: %s", rec_errmsg());
                for (int f = 0; f < nf; f++) {
                    rec_embed_sched s = row;
                    s.pf = pf[f];
                    CHECK(rec_embed_set_sched(e, f, s) == REC_OK, "set: %s", rec_errmsg());
                }
                for (size_t i = 0; i < MAXB * W; i++) out[i] = ref[i] = NAN;
                CHECK(rec_embed_forward(e, &b, 0, out) == REC_OK, "%d tables, %d threads, B %lld: %s", nf, nt, (long long)B,
                      rec_errmsg());
                size_t stray = 0;
                for (size_t i = (size_t)B * W; i < MAXB * W; i++) stray += !isnan(out[i]);
                CHECK(stray == 0, "%d tables, %d threads, B %lld: %zu values written past the batch", nf, nt, (long long)B, stray);
                if (B == MAXB) {
                    static const int64_t BAD[2] = {MAXB - 1, 500};
                    rec_jagged *j = &b.sparse[4];
                    for (int k = 0; k < 2; k++) {
                        const int64_t pos = j->offsets[BAD[k]], keep = rec_jagged_id(j, pos);
                        char want[128];
                        snprintf(want, sizeof want, "feature 4 (table 4, 20000 rows), batch row %lld: id 20000 is outside",
                                 (long long)BAD[k]);
                        set_id(j, pos, 20000);
                        CHECK_ERR(rec_embed_forward(e, &b, 0, ref), REC_EINVAL, want);
                        set_id(j, pos, keep);
                    }
                }
                rec_embed_set_uniform(e, plain);
                CHECK(rec_embed_forward(e, &b, 0, ref) == REC_OK, "plain plan: %s", rec_errmsg());
                CHECK(!memcmp(out, ref, sizeof(float) * (size_t)B * W), "%d tables, %d threads, B %lld: the row pass and a SAMPLE plan differ in bits", nf, nt, (long long)B);
                rec_batch_free(&b);
            }
            free(out), free(ref);
            rec_embed_free(e);
        }
}

int main(void) {
    rec_rng_seed(&g_rng, 2024, 0);
    test_init();
    test_errors();
    test_row_errors();
    test_row_prefetch();
    test_fd();
    test_vs_ref();
    test_large_ids();
    test_threads();
    return check_report();
}
