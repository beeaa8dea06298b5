/* Embedding schedules, plans and the tuner (embed.h "Schedules"; sched.c, sched_io.c, tune.c).
 *
 *  - random heterogeneous models (dims 1..256 incl. odd ones, tables of 1..20000 rows incl.
 *    single-row tables, bags of 0..300 ids with duplicates, weighted and not, SUM and MEAN):
 *    every forward candidate of every table against rec_embed_forward_ref, and bitwise equal
 *    to the default schedule (embed.h promises the same bits for every schedule);
 *  - every backward candidate, for SGD, Adagrad and row-wise Adagrad: tables and optimizer
 *    state bitwise equal to the default schedule's after two steps, and the SGD step against
 *    rec_embed_grad_ref;
 *  - wide rows (dims 128, 128, 100) under each backward sort against the SGD reference;
 *  - fast mode (trust_ids) gives the checked mode's bits; 1 and 2 threads give the same bits
 *    under a mixed plan; 1 and 6 threads too over batches that shrink and grow, and no row
 *    past a batch's is written;
 *  - checked mode refuses a bad id at every position of bags of 1..9 ids under every forward
 *    candidate (dims 3, 16, 17, 32), and under every backward sort with nothing changed;
 *  - DENSE's pass counters wrapping (2^32 passes) change no bit;
 *  - the tuner: runs to completion, training through it changes no bit, installs a valid
 *    plan; separately-tuned likewise;
 *  - bf16 tables: see test_bf16_tables; stochastic rounding's exact unbiasedness; the bf16
 *    step of rows kept elsewhere, whole and in column parts (test_bf16_step_parts);
 *  - plans: save/load round trip (a fresh engine's default plan too), and every rejection (file, JSON, format, version, keys,
 *    tables, shapes, schedule strings) with its message; schedule text parsing.
 *
 * Tolerance (forward, fp32 vs float64): |got - ref| <= 4e-5 * S, S = the same pooling over |T|
 * and |w|. A bag sums L <= 300 products, which errs by at most (L + 1) 2^-24 S = 1.8e-5 S (+1
 * rounding for MEAN), so 4e-5 passes every correct order while a wrong row, weight or NaN
 * fails. SGD step: T' = T - lr g, the float path's g errs by at most K 2^-24 Ga (K = ids of
 * that row, <= 300 * B here), Ga = the gradient from |dout| and |coef|; tol 1e-5 (|T| + lr K
 * 2^-24 Ga) with K bounded by the batch's ids.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "embed_impl.h" /* test_dense_epoch_wrap sets the DENSE pass counters */
#include "embedcheck.h"
#include "numcheck.h"
#include "rectrain/core.h"
#include "rectrain/embed.h"

enum { MAXF = 12 };

static double urand(void) { return rec_rng_uniform(&g_rng); }
static int64_t irand(int64_t n) { return (int64_t)rec_rng_below(&g_rng, (uint64_t)n); }

typedef struct model {
    int F, B;
    int64_t rows[MAXF];
    int dims[MAXF];
    int maxbag[MAXF];
    rec_pooling pooling;
    int weighted;
} model;

/* A random heterogeneous model: F tables, dims from a list with odd and specialised values,
 * rows 1..20000 (one single-row table), bag sizes up to 300 for some tables, one-hot for
 * others. */
static model random_model(int F, int B) {
    static const int DIMS[] = {1, 3, 4, 7, 8, 16, 17, 24, 32, 64, 100, 128, 256};
    model m = {F, B, {0}, {0}, {0}, urand() < 0.5 ? REC_POOL_SUM : REC_POOL_MEAN, urand() < 0.5};
    for (int f = 0; f < F; f++) {
        m.dims[f] = DIMS[irand(sizeof DIMS / sizeof DIMS[0])];
        m.rows[f] = f == 0 ? 1 : 1 + irand(urand() < 0.3 ? 20000 : 300);
        m.maxbag[f] = urand() < 0.3 ? 1 : urand() < 0.5 ? 300 : 20;
    }
    return m;
}

/* A batch for m: bag sizes 0..maxbag (a quarter empty; none for even features of maxbag 1,
 * which are one-hot), half the ids from the first 4 rows so duplicates occur within and
 * across bags. Ids 64-bit and 32-bit in turns, feature by feature and batch by batch, so that
 * every kernel meets both widths. */
static void make_batch(rec_batch *b, const model *m) {
    static int made;
    made++;
    rec_status s = rec_batch_init(b, m->B, 0, m->F, 4);
    if (s) {
        fprintf(stderr, "cannot build a test batch: %s\n", rec_errmsg());
        exit(1);
    }
    b->n = m->B;
    for (int f = 0; f < m->F; f++) {
        rec_jagged *j = &b->sparse[f];
        j->offsets[0] = 0;
        for (int64_t r = 0; r < m->B; r++) {
            const int64_t L = m->maxbag[f] == 1 && f % 2 == 0 ? 1 /* one-hot: FIXED's offset-free path */
                              : urand() < 0.25                 ? 0
                              : m->maxbag[f] == 1              ? 1
                                                               : irand(m->maxbag[f] + 1);
            if (!s) s = rec_batch_reserve_nnz(b, f, j->offsets[r] + L, m->weighted);
            for (int64_t k = j->offsets[r]; !s && k < j->offsets[r] + L; k++) {
                j->ids64[k] = urand() < 0.5 ? irand(m->rows[f] < 4 ? m->rows[f] : 4) : irand(m->rows[f]);
                if (j->weights) j->weights[k] = (float)(3.0 * urand() - 1.5);
            }
            j->offsets[r + 1] = j->offsets[r] + (s ? 0 : L);
        }
        if (!s && (f + made) % 2) s = rec_batch_set_wide(b, f, 0);
    }
    CHECK(s == REC_OK, "building a test batch: %s", rec_errmsg());
}

static rec_embed *make_engine(const model *m, rec_sparse_opt_kind kind, int threads, int trust) {
    rec_embed_config c = {m->F, m->rows, m->dims, m->pooling, rec_sparse_opt_defaults(kind, 0.05f), m->B, threads, 7, trust, 0, REC_ROUND_STOCHASTIC};
    rec_embed *e = NULL;
    rec_status s = rec_embed_init(&e, &c);
    CHECK(s == REC_OK, "init: %s", rec_errmsg());
    return e;
}

/* Forward: every candidate of every table (candidate k of table f in pass k, tables with
 * fewer candidates wrapping around) against the reference and bitwise against the default. */
static void test_forward_candidates(int trial) {
    const model m = random_model(2 + (int)irand(MAXF - 2), 1 + (int)irand(96));
    rec_embed *e = make_engine(&m, REC_SPARSE_SGD, 2, 0);
    if (!e) return;
    rec_batch b;
    make_batch(&b, &m);
    const int W = rec_embed_out_width(e), B = m.B;
    const size_t n = (size_t)B * (size_t)W;
    float *base = malloc(n * sizeof(float)), *out = malloc(n * sizeof(float));
    double *ref = malloc(n * sizeof(double)), *S = malloc(n * sizeof(double));
    forward_refs(e, m.pooling, &b, 0, ref, S);
    poison(base, n);
    CHECK(rec_embed_forward(e, &b, 0, base) == REC_OK, "trial %d: default forward: %s", trial, rec_errmsg());
    rec_embed_sched cand[MAXF][REC_EMBED_MAX_CANDIDATES];
    int nc[MAXF], maxc = 0;
    for (int f = 0; f < m.F; f++) {
        nc[f] = rec_embed_fwd_candidates(e, f, cand[f], REC_EMBED_MAX_CANDIDATES);
        CHECK(nc[f] >= 1 && nc[f] <= REC_EMBED_MAX_CANDIDATES, "trial %d table %d: %d candidates", trial, f, nc[f]);
        if (nc[f] > maxc) maxc = nc[f];
    }
    for (int k = 0; k < maxc; k++) {
        for (int f = 0; f < m.F; f++) CHECK(rec_embed_set_sched(e, f, cand[f][k % nc[f]]) == REC_OK, "set_sched: %s", rec_errmsg());
        poison(out, n);
        CHECK(rec_embed_forward(e, &b, 0, out) == REC_OK, "trial %d candidate %d: %s", trial, k, rec_errmsg());
        size_t bad_ref = 0, bad_bits = 0, first = n;
        for (size_t i = 0; i < n; i++) {
            if (!(fabs(out[i] - ref[i]) <= 4e-5 * S[i])) bad_ref++, first = first < i ? first : i;
            if (memcmp(&out[i], &base[i], sizeof(float))) bad_bits++;
        }
        char name[64];
        CHECK(bad_ref == 0, "trial %d candidate %d (%s on table 0): %zu outputs off the reference (first at %zu: %g vs %g)",
              trial, k, rec_embed_sched_name(cand[0][k % nc[0]], name, sizeof name), bad_ref, first,
              first < n ? out[first] : 0.0, first < n ? ref[first] : 0.0);
        CHECK(bad_bits == 0, "trial %d candidate %d: %zu outputs differ in bits from the default schedule", trial, k, bad_bits);
    }
    free(base), free(out), free(ref), free(S);
    rec_batch_free(&b);
    rec_embed_free(e);
}

static float *random_dout(size_t n) {
    float *d = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) d[i] = (float)(2.0 * urand() - 1.0);
    return d;
}

/* Values of e's tables off want by more than tol. */
static size_t sgd_off(rec_embed *e, const model *m, double *const *want, double *const *tol) {
    size_t bad = 0;
    for (int f = 0; f < m->F; f++) {
        const float *t = rec_embed_table(e, f);
        for (size_t i = 0; i < (size_t)m->rows[f] * (size_t)m->dims[f]; i++) bad += !(fabs(t[i] - want[f][i]) <= tol[f][i]);
    }
    return bad;
}

/* Backward: for each optimizer, an engine per backward candidate index (tables wrapping as
 * above) takes two steps; all end bitwise equal to the default engine; under SGD the default
 * and every candidate are checked against the reference too. */
static void test_backward_candidates(int trial, rec_sparse_opt_kind kind) {
    const model m = random_model(2 + (int)irand(MAXF - 2), 1 + (int)irand(64));
    rec_batch b[2];
    make_batch(&b[0], &m);
    make_batch(&b[1], &m);
    rec_embed *base = make_engine(&m, kind, 2, 0);
    if (!base) return;
    const int W = rec_embed_out_width(base);
    float *dout = random_dout((size_t)m.B * (size_t)W);
    double **T0 = tables_f64(base, 0);
    for (int s = 0; s < 2; s++)
        CHECK(rec_embed_backward_update(base, &b[s], 0, dout, 0.05f) == REC_OK, "default backward: %s", rec_errmsg());
    /* SGD: T' = T - lr (g1 + g2), both steps' gradients from dout; want and tol per value. */
    double *want[MAXF] = {0}, *tol[MAXF] = {0};
    if (kind == REC_SPARSE_SGD) {
        double *G[MAXF], *Ga[MAXF], *G2[MAXF], *acc[MAXF];
        for (int f = 0; f < m.F; f++) {
            const size_t n = (size_t)m.rows[f] * (size_t)m.dims[f];
            G[f] = malloc(n * sizeof(double)), Ga[f] = calloc(n, sizeof(double)), G2[f] = malloc(n * sizeof(double));
            acc[f] = calloc(n, sizeof(double)), want[f] = malloc(n * sizeof(double)), tol[f] = malloc(n * sizeof(double));
        }
        const size_t nd = (size_t)m.B * (size_t)W;
        double *d64 = malloc(nd * sizeof(double)), *da = malloc(nd * sizeof(double));
        for (size_t i = 0; i < nd; i++) d64[i] = dout[i], da[i] = fabs(dout[i]);
        for (int s = 0; s < 2; s++) {
            rec_embed_grad_ref(m.F, m.rows, m.dims, m.pooling, &b[s], 0, d64, G);
            rec_embed_grad_ref(m.F, m.rows, m.dims, m.pooling, &b[s], 0, da, G2); /* |w| ignored: bound by K below */
            for (int f = 0; f < m.F; f++)
                for (size_t i = 0; i < (size_t)m.rows[f] * (size_t)m.dims[f]; i++) acc[f][i] += G[f][i], Ga[f][i] += fabs(G2[f][i]);
        }
        const double K = 2.0 * 300 * m.B + 2;
        for (int f = 0; f < m.F; f++)
            for (size_t i = 0; i < (size_t)m.rows[f] * (size_t)m.dims[f]; i++) {
                want[f][i] = T0[f][i] - 0.05 * acc[f][i];
                tol[f][i] = 1e-5 * (fabs(T0[f][i]) + 0.05 * 1.5 * Ga[f][i] * (1 + K * 0x1p-24));
            }
        CHECK(sgd_off(base, &m, want, tol) == 0, "trial %d: SGD steps of the default: %zu table values off the reference",
              trial, sgd_off(base, &m, want, tol));
        for (int f = 0; f < m.F; f++) free(G[f]), free(Ga[f]), free(G2[f]), free(acc[f]);
        free(d64), free(da);
    }
    rec_embed_sched cand[MAXF][REC_EMBED_MAX_CANDIDATES];
    int nc[MAXF], maxc = 0;
    for (int f = 0; f < m.F; f++) {
        nc[f] = rec_embed_bwd_candidates(base, f, cand[f], REC_EMBED_MAX_CANDIDATES);
        if (nc[f] > maxc) maxc = nc[f];
    }
    for (int k = 0; k < maxc; k++) {
        rec_embed *e = make_engine(&m, kind, 1 + k % 2, 0);
        if (!e) break;
        for (int f = 0; f < m.F; f++) rec_embed_set_sched(e, f, cand[f][k % nc[f]]);
        for (int s = 0; s < 2; s++)
            CHECK(rec_embed_backward_update(e, &b[s], 0, dout, 0.05f) == REC_OK, "candidate %d: %s", k, rec_errmsg());
        CHECK(same_bits(e, base), "trial %d optimizer %d backward candidate %d: tables or state differ from the default's",
              trial, (int)kind, k);
        /* Each candidate against the reference as well: a schedule wrong in the same way as
         * the default would pass the bitwise check alone. */
        if (kind == REC_SPARSE_SGD)
            CHECK(sgd_off(e, &m, want, tol) == 0, "trial %d: SGD steps of backward candidate %d: %zu table values off "
                  "the reference", trial, k, sgd_off(e, &m, want, tol));
        rec_embed_free(e);
    }
    for (int f = 0; f < m.F; f++) free(want[f]), free(tol[f]);
    free_tables(T0, m.F);
    free(dout);
    rec_batch_free(&b[0]);
    rec_batch_free(&b[1]);
    rec_embed_free(base);
}

/* Wide rows (dims 128, 128, 100) under each backward sort, two SGD steps against the float64
 * reference. gcc 12 -O3 once miscompiled the sorts' sum of a 128-float row kept in a local
 * array (radix and count off by up to 0.1 on some machines, depending on where the buffers
 * lay); this pins the three sorts to the reference on the shapes that broke. */
static void test_wide_rows_every_sort(void) {
    model m = {3, 64, {700, 1, 300}, {128, 128, 100}, {3, 3, 40}, REC_POOL_SUM, 0};
    enum { W = 128 + 128 + 100 };
    rec_batch b;
    make_batch(&b, &m);
    float *dout = random_dout((size_t)m.B * W);
    /* The reference, once: every engine starts from the same tables (make_engine's seed). */
    rec_embed *e0 = make_engine(&m, REC_SPARSE_SGD, 1, 0);
    if (!e0) {
        free(dout);
        rec_batch_free(&b);
        return;
    }
    double **T0 = tables_f64(e0, 0);
    rec_embed_free(e0);
    double *G[MAXF], *want[MAXF], *tol[MAXF], *d64 = malloc((size_t)m.B * W * sizeof(double));
    for (size_t i = 0; i < (size_t)m.B * W; i++) d64[i] = dout[i];
    for (int f = 0; f < m.F; f++) {
        const size_t n = (size_t)m.rows[f] * (size_t)m.dims[f];
        G[f] = malloc(n * sizeof(double)), want[f] = malloc(n * sizeof(double)), tol[f] = malloc(n * sizeof(double));
    }
    rec_embed_grad_ref(m.F, m.rows, m.dims, m.pooling, &b, 0, d64, G);
    for (int f = 0; f < m.F; f++)
        for (size_t i = 0; i < (size_t)m.rows[f] * (size_t)m.dims[f]; i++) {
            want[f][i] = T0[f][i] - 2 * 0.05 * G[f][i];
            tol[f][i] = 1e-5 * (fabs(T0[f][i]) + fabs(G[f][i])) + 1e-6;
        }
    for (int sort = REC_SORT_RADIX; sort <= REC_SORT_DENSE; sort++)
        for (int threads = 1; threads <= 2; threads++) {
            rec_embed *e = make_engine(&m, REC_SPARSE_SGD, threads, 0);
            if (!e) break;
            for (int f = 0; f < m.F; f++) {
                rec_embed_sched s = rec_embed_get_sched(e, f);
                s.sort = (uint8_t)sort;
                CHECK(rec_embed_set_sched(e, f, s) == REC_OK, "%s", rec_errmsg());
            }
            for (int step = 0; step < 2; step++)
                CHECK(rec_embed_backward_update(e, &b, 0, dout, 0.05f) == REC_OK, "%s", rec_errmsg());
            const size_t bad = sgd_off(e, &m, want, tol);
            CHECK(bad == 0, "sort %d, %d threads: %zu values of wide rows off the SGD reference", sort, threads, bad);
            rec_embed_free(e);
        }
    for (int f = 0; f < m.F; f++) free(G[f]), free(want[f]), free(tol[f]);
    free(d64);
    free_tables(T0, m.F);
    free(dout);
    rec_batch_free(&b);
}

/* Fast mode and thread counts under a mixed plan: same bits. */
static void test_trust_threads(void) {
    const model m = random_model(MAXF, 80);
    rec_batch b;
    make_batch(&b, &m);
    rec_embed *e1 = make_engine(&m, REC_SPARSE_ROWWISE_ADAGRAD, 1, 0), *e2 = make_engine(&m, REC_SPARSE_ROWWISE_ADAGRAD, 2, 1);
    if (!e1 || !e2) return;
    for (int f = 0; f < m.F; f++) {
        rec_embed_sched c[REC_EMBED_MAX_CANDIDATES];
        const int n = rec_embed_fwd_candidates(e2, f, c, REC_EMBED_MAX_CANDIDATES);
        rec_embed_set_sched(e2, f, c[(f * 7) % n]);
    }
    const int W = rec_embed_out_width(e1);
    const size_t n = (size_t)m.B * (size_t)W;
    float *o1 = malloc(n * sizeof(float)), *o2 = malloc(n * sizeof(float)), *d = random_dout(n);
    CHECK(rec_embed_forward(e1, &b, 0, o1) == REC_OK && rec_embed_forward(e2, &b, 0, o2) == REC_OK, "forward: %s", rec_errmsg());
    CHECK(!memcmp(o1, o2, n * sizeof(float)), "1 thread checked vs 2 threads trusted, mixed plan: forward bits differ");
    CHECK(rec_embed_backward_update(e1, &b, 0, d, 0.1f) == REC_OK && rec_embed_backward_update(e2, &b, 0, d, 0.1f) == REC_OK,
          "backward: %s", rec_errmsg());
    CHECK(same_bits(e1, e2), "1 thread checked vs 2 threads trusted: tables differ after the update");
    free(o1), free(o2), free(d);
    rec_batch_free(&b);
    rec_embed_free(e1);
    rec_embed_free(e2);
}

/* Batches that shrink and grow between calls (64, 2, 64, 1, 0, ...), two of them refused for
 * a bad id, under 6 threads (3 walks, more than a small batch has items) and a plan of many
 * small items: each forward gives the 1-thread engine's bits and writes no row past the
 * batch's, and each update leaves both engines' tables equal. */
static void test_batch_sizes_vary(void) {
    static const int SIZES[9] = {64, 2, 64, 1, 0, 64, 2, 64, 37};
    static const int BAD[9] = {0, 0, 0, 0, 0, 1, 0, 1, 0}; /* a bad id in row 0: the call stops early */
    model m = {1, 64, {1000}, {16}, {300}, REC_POOL_SUM, 1}; /* one table: one item for a small batch */
    rec_embed *e1 = make_engine(&m, REC_SPARSE_ADAGRAD, 1, 0), *e6 = make_engine(&m, REC_SPARSE_ADAGRAD, 6, 0);
    if (!e1 || !e6) return;
    rec_embed_sched s;
    CHECK(rec_embed_sched_parse("sample/fixed/pf0/g6+radix/pf0", &s) == REC_OK, "parse: %s", rec_errmsg());
    rec_embed_set_uniform(e6, s);
    const int W = rec_embed_out_width(e1);
    const size_t n = (size_t)64 * (size_t)W;
    float *o1 = malloc(n * sizeof(float)), *o6 = malloc(n * sizeof(float)), *d = random_dout(n);
    for (int i = 0; i < 9; i++) {
        model mb = m;
        mb.B = SIZES[i] ? SIZES[i] : 1; /* a batch holds at least one row; the empty one holds none */
        rec_batch b;
        make_batch(&b, &mb);
        b.n = mb.B = SIZES[i];
        if (BAD[i]) {
            rec_jagged *j = &b.sparse[0];
            for (int r = 0; r < 2; r++) /* rows 0 and 1 hold one id each, the first out of range */
                j->offsets[r + 1] = j->offsets[r] + 1;
            if (j->offsets[2] > j->offsets[3]) j->offsets[2] = j->offsets[3];
            if (j->wide) j->ids64[0] = m.rows[0];
            else j->ids32[0] = (int32_t)m.rows[0];
            CHECK_ERR(rec_embed_forward(e6, &b, 0, o6), REC_EINVAL, "batch row 0: id 1000 is outside");
            CHECK_ERR(rec_embed_forward(e1, &b, 0, o1), REC_EINVAL, "batch row 0: id 1000 is outside");
            rec_batch_free(&b);
            continue;
        }
        const size_t used = (size_t)mb.B * (size_t)W;
        memset(o6, 0x7f, n * sizeof(float)); /* a sentinel (3.4e38) in every row */
        CHECK(rec_embed_forward(e1, &b, 0, o1) == REC_OK && rec_embed_forward(e6, &b, 0, o6) == REC_OK,
              "forward, batch of %d: %s", mb.B, rec_errmsg());
        CHECK(!memcmp(o1, o6, used * sizeof(float)), "batch of %d rows: 6 threads' forward bits differ from 1 thread's", mb.B);
        int past = 0;
        for (size_t k = used; k < n; k++) {
            uint32_t u;
            memcpy(&u, &o6[k], 4);
            past += u != 0x7f7f7f7fu;
        }
        CHECK(past == 0, "batch of %d rows: %d values written past the batch's rows", mb.B, past);
        CHECK(rec_embed_backward_update(e1, &b, 0, d, 0.1f) == REC_OK && rec_embed_backward_update(e6, &b, 0, d, 0.1f) == REC_OK,
              "backward, batch of %d: %s", mb.B, rec_errmsg());
        CHECK(same_bits(e1, e6), "batch of %d rows: tables differ after the update", mb.B);
        rec_batch_free(&b);
    }
    free(o1), free(o6), free(d);
    rec_embed_free(e1);
    rec_embed_free(e6);
}

/* DENSE marks the rows a pass touched with the thread's pass counter, which wraps after 2^32
 * passes (backward.c, update_dense): the stamps must then start afresh, or rows stamped 2^32
 * passes earlier read as touched by the current pass and their stale sums get applied. One
 * step on both engines stamps rows with small counters; the DENSE engine's counters are then
 * set to UINT32_MAX so its next pass per thread wraps, and four more steps must leave it
 * bitwise equal to a RADIX twin (every sort gives the same bits). Table 0 takes the full-scan
 * apply (many ids a row), table 1 the touched list (few). One thread, so that which thread
 * runs a table is fixed: the wrapped counter then meets stamps of step 0's passes. */
static void test_dense_epoch_wrap(void) {
    model m = {3, 64, {400, 100000, 3000}, {16, 1, 5}, {40, 1, 8}, REC_POOL_SUM, 1};
    for (int kind = 0; kind < 3; kind++) {
        rec_embed *d = make_engine(&m, (rec_sparse_opt_kind)kind, 1, 0), *r = make_engine(&m, (rec_sparse_opt_kind)kind, 2, 0);
        if (!d || !r) return;
        rec_embed_sched sd, sr;
        CHECK(rec_embed_sched_parse("sample/fixed/pf0/g12+dense/pf8", &sd) == REC_OK &&
                  rec_embed_sched_parse("sample/fixed/pf0/g12+radix/pf8", &sr) == REC_OK,
              "parse: %s", rec_errmsg());
        rec_embed_set_uniform(d, sd);
        rec_embed_set_uniform(r, sr);
        for (int f = 0; f < m.F; f++)
            CHECK(embed_sched_effective(d, f, d->sched[f]).sort == REC_SORT_DENSE, "table %d does not run DENSE", f);
        const size_t n = (size_t)m.B * (size_t)rec_embed_out_width(d);
        float *dout = random_dout(n);
        int same = 1;
        for (int step = 0; step < 5; step++) {
            if (step == 1)
                for (int t = 0; t < d->nt; t++) d->depoch[(size_t)t * 16] = UINT32_MAX;
            rec_batch b;
            make_batch(&b, &m);
            CHECK(rec_embed_backward_update(d, &b, 0, dout, 0.1f) == REC_OK &&
                      rec_embed_backward_update(r, &b, 0, dout, 0.1f) == REC_OK,
                  "backward: %s", rec_errmsg());
            same &= same_bits(d, r);
            rec_batch_free(&b);
        }
        int wrapped = 1;
        for (int t = 0; t < d->nt; t++) wrapped &= d->depoch[(size_t)t * 16] <= (uint32_t)(4 * m.F); /* 4 steps since */
        CHECK(wrapped, "optimizer %d: a DENSE pass counter did not wrap", kind);
        CHECK(same, "optimizer %d: DENSE after its pass counter wrapped differs from RADIX", kind);
        free(dout);
        rec_embed_free(d);
        rec_embed_free(r);
    }
}

/* The tuner on live steps: bits equal to an untuned twin's throughout; ends with a valid plan. */
static void test_tuner(void) {
    const model m = random_model(8, 64);
    rec_embed *t = make_engine(&m, REC_SPARSE_ADAGRAD, 2, 0), *u = make_engine(&m, REC_SPARSE_ADAGRAD, 2, 0);
    if (!t || !u) return;
    rec_batch b[3];
    for (int i = 0; i < 3; i++) make_batch(&b[i], &m);
    const int W = rec_embed_out_width(t);
    const size_t n = (size_t)m.B * (size_t)W;
    float *o1 = malloc(n * sizeof(float)), *o2 = malloc(n * sizeof(float)), *d = random_dout(n);
    rec_embed_tune_opts o = {1};
    CHECK(rec_embed_tune_begin(t, &o) == REC_OK, "tune_begin: %s", rec_errmsg());
    int steps = 0, same = 1;
    while (rec_embed_tuning(t) && steps < 1000) {
        const rec_batch *x = &b[steps % 3];
        same &= rec_embed_forward(t, x, 0, o1) == REC_OK && rec_embed_forward(u, x, 0, o2) == REC_OK &&
                !memcmp(o1, o2, n * sizeof(float));
        same &= rec_embed_backward_update(t, x, 0, d, 0.05f) == REC_OK && rec_embed_backward_update(u, x, 0, d, 0.05f) == REC_OK;
        steps++;
    }
    rec_embed_tune_report r;
    rec_embed_tune_result(t, &r);
    CHECK(!rec_embed_tuning(t), "the tuner did not finish in %d steps", steps);
    CHECK(same && same_bits(t, u), "training through the tuner changed results");
    CHECK(r.winner >= 0 && r.winner < REC_EMBED_GLOBAL_CANDIDATES && r.winner_bwd >= 0 &&
              r.winner_bwd < REC_EMBED_GLOBAL_CANDIDATES && r.fwd_rounds >= 1 && r.bwd_rounds >= 1,
          "tune report: winners %d/%d, rounds %d/%d", r.winner, r.winner_bwd, r.fwd_rounds, r.bwd_rounds);
    CHECK(steps >= r.fwd_rounds, "tuned in %d steps but reported %d forward rounds", steps, r.fwd_rounds);
    /* Separately tuned: also changes nothing but speed. */
    const rec_batch *bs[3] = {&b[0], &b[1], &b[2]};
    CHECK(rec_embed_tune_separate(t, bs, 3, 0, d, 0.05f) == REC_OK, "tune_separate: %s", rec_errmsg());
    CHECK(rec_embed_forward(t, &b[0], 0, o1) == REC_OK, "forward: %s", rec_errmsg());
    rec_embed_set_uniform(t, rec_embed_sched_default()); /* (its updates changed t's tables: compare on t) */
    CHECK(rec_embed_forward(t, &b[0], 0, o2) == REC_OK && !memcmp(o1, o2, n * sizeof(float)),
          "the separately tuned plan computes other bits than the default");
    free(o1), free(o2), free(d);
    for (int i = 0; i < 3; i++) rec_batch_free(&b[i]);
    rec_embed_free(t);
    rec_embed_free(u);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
}

/* Plans: round trip and rejections. */
static void test_plans(void) {
    model m = {3, 8, {10, 200000, 7}, {4, 16, 3}, {1, 1, 1}, REC_POOL_SUM, 0};
    rec_embed *e = make_engine(&m, REC_SPARSE_SGD, 1, 0), *g = make_engine(&m, REC_SPARSE_SGD, 1, 0);
    if (!e || !g) return;
    char dir[] = "/tmp/rectrain-plan-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char path[256], bad[256];
    snprintf(path, sizeof path, "%s/plan.json", dir);
    snprintf(bad, sizeof bad, "%s/bad.json", dir);
    /* A fresh engine's plan (the default) loads back: the table too large for DENSE starts
     * with RADIX (found by fuzz_plan: it once started with DENSE, so a plan saved from it, as
     * --tune saves when the plan it started from wins, could not be loaded). */
    CHECK(rec_embed_get_sched(g, 1).sort == REC_SORT_RADIX && rec_embed_get_sched(g, 0).sort == REC_SORT_DENSE,
          "fresh engine: table 1 sort %d, table 0 sort %d", rec_embed_get_sched(g, 1).sort, rec_embed_get_sched(g, 0).sort);
    CHECK(rec_embed_plan_save(g, path, 0) == REC_OK, "save: %s", rec_errmsg());
    uint64_t dk0 = 1;
    CHECK(rec_embed_plan_load(g, path, &dk0) == REC_OK && dk0 == 0, "load the default plan: %s", rec_errmsg());
    rec_embed_sched s0, s1, s2;
    CHECK(rec_embed_sched_parse("table/blocked/pf16+count/pf0", &s0) == REC_OK, "parse: %s", rec_errmsg());
    CHECK(rec_embed_sched_parse("row/fixed/pf4/g9+radix/pf8", &s1) == REC_OK, "parse: %s", rec_errmsg());
    CHECK(rec_embed_sched_parse("sample/fixed/pf4/g9+radix/pf0", &s2) == REC_OK, "parse: %s", rec_errmsg());
    CHECK(rec_embed_set_sched(e, 0, s0) == REC_OK && rec_embed_set_sched(e, 1, s1) == REC_OK &&
          rec_embed_set_sched(e, 2, s2) == REC_OK, "set: %s", rec_errmsg());
    CHECK_ERR(rec_embed_set_sched(e, 1, s0), REC_EINVAL, "COUNT sort needs at most");
    rec_embed_sched sd;
    CHECK(rec_embed_sched_parse("table/fixed/pf0+dense/pf32", &sd) == REC_OK, "parse: %s", rec_errmsg());
    CHECK_ERR(rec_embed_set_sched(e, 1, sd), REC_EINVAL, "DENSE backward needs rows x dim <= 2097152; the table is 200000 x 16");
    CHECK(rec_embed_set_sched(e, 2, sd) == REC_OK, "set: %s", rec_errmsg());
    rec_embed_set_uniform(g, sd); /* the uniform form falls back on the table too large for DENSE */
    CHECK(rec_embed_get_sched(g, 1).sort == REC_SORT_RADIX && rec_embed_get_sched(g, 0).sort == REC_SORT_DENSE,
          "uniform dense: table 1 sort %d, table 0 sort %d", rec_embed_get_sched(g, 1).sort, rec_embed_get_sched(g, 0).sort);
    CHECK(rec_embed_plan_save(e, path, 0x1234) == REC_OK, "save: %s", rec_errmsg());
    uint64_t dk = 0;
    CHECK(rec_embed_plan_load(g, path, &dk) == REC_OK, "load: %s", rec_errmsg());
    CHECK(dk == 0x1234, "data key %llx", (unsigned long long)dk);
    for (int f = 0; f < 3; f++) {
        char a[64], c[64];
        rec_embed_sched_name(rec_embed_get_sched(e, f), a, sizeof a);
        rec_embed_sched_name(rec_embed_get_sched(g, f), c, sizeof c);
        CHECK(!strcmp(a, c), "table %d: saved %s, loaded %s", f, a, c);
    }
    /* Rejections: each leaves the plan unchanged. */
    rec_embed_set_uniform(g, rec_embed_sched_default());
    CHECK_ERR(rec_embed_plan_load(g, "/nonexistent/plan.json", &dk), REC_EIO, "cannot open the embedding plan");
    write_text(bad, "{\"format\": ");
    CHECK_ERR(rec_embed_plan_load(g, bad, &dk), REC_EFORMAT, "not valid JSON");
    write_text(bad, "{\"format\": \"other\"}");
    CHECK_ERR(rec_embed_plan_load(g, bad, &dk), REC_EFORMAT, "$.format");
    write_text(bad, "{\"format\": \"rectrain-embed-plan\", \"version\": 2}");
    CHECK_ERR(rec_embed_plan_load(g, bad, &dk), REC_EINVAL, "$.version");
    write_text(bad, "{\"format\": \"rectrain-embed-plan\", \"version\": 1, \"shape_key\": \"12\"}");
    CHECK_ERR(rec_embed_plan_load(g, bad, &dk), REC_EINVAL, "$.shape_key");
    write_text(bad, "{\"format\": \"rectrain-embed-plan\", \"version\": 1, \"shape_key\": \"000000000000000g\"}");
    CHECK_ERR(rec_embed_plan_load(g, bad, &dk), REC_EINVAL, "$.shape_key: want a 16-digit hex string");
    write_text(bad, "{\"format\": \"rectrain-embed-plan\", \"version\": 1, \"shape_key\": \"0000000000000000\", "
                    "\"data_key\": \"00000000000000zz\"}");
    CHECK_ERR(rec_embed_plan_load(g, bad, &dk), REC_EINVAL, "$.data_key: want a 16-digit hex string");
    write_text(bad, "{\"format\": \"rectrain-embed-plan\", \"version\": 1, \"shape_key\": \"0000000000000000\", "
                    "\"data_key\": \"0000000000000000\", \"tables\": {}}");
    CHECK_ERR(rec_embed_plan_load(g, bad, &dk), REC_EINVAL, "$.tables: want an array");
    const char *hdr = "{\"format\": \"rectrain-embed-plan\", \"version\": 1, \"shape_key\": \"0000000000000000\", "
                      "\"data_key\": \"0000000000000000\", \"tables\": [";
    char text[1024];
    snprintf(text, sizeof text, "%s{\"rows\": 10, \"dim\": 4, \"sched\": \"table/fixed/pf8+radix/pf8\"}]}", hdr);
    write_text(bad, text);
    CHECK_ERR(rec_embed_plan_load(g, bad, &dk), REC_EINVAL, "the plan has 1 tables, the model 3");
    /* Three tables, the middle one's rows and schedule varied. */
    static const struct { long rows; const char *sched, *want; } MID[] = {
        {20, "table/fixed/pf8+radix/pf8", "$.tables[1]: the plan's table is not (200000 rows, dim 16)"},
        {200000, "table/fixed/pf8+count/pf8", "$.tables[1].sched: embedding table 1: COUNT sort"},
        {200000, "table/fixed/pf8+dense/pf8", "$.tables[1].sched: embedding table 1: DENSE backward needs"},
        {200000, "table/fast/pf8+radix/pf8", "$.tables[1].sched: schedule \"table/fast/pf8+radix/pf8\": cannot read the kernel"},
        {200000, "table/fixed/pf8+radix/pf8", "$.shape_key does not match"},
    };
    for (size_t i = 0; i < sizeof MID / sizeof MID[0]; i++) {
        snprintf(text, sizeof text,
                 "%s{\"rows\": 10, \"dim\": 4, \"sched\": \"table/fixed/pf8+radix/pf8\"}, {\"rows\": %ld, \"dim\": 16, "
                 "\"sched\": \"%s\"}, {\"rows\": 7, \"dim\": 3, \"sched\": \"table/fixed/pf8+radix/pf8\"}]}",
                 hdr, MID[i].rows, MID[i].sched);
        write_text(bad, text);
        CHECK_ERR(rec_embed_plan_load(g, bad, &dk), REC_EINVAL, MID[i].want);
    }
    char name[64];
    CHECK(!strcmp(rec_embed_sched_name(rec_embed_get_sched(g, 2), name, sizeof name), "row/fixed/pf0/g12+dense/pf8"),
          "a failed load changed the plan: %s", name);
    /* The schedule text form. */
    rec_embed_sched x;
    CHECK_ERR(rec_embed_sched_parse("", &x), REC_EINVAL, "cannot read the split");
    CHECK_ERR(rec_embed_sched_parse("rows/fixed/pf8+radix/pf8", &x), REC_EINVAL, "cannot read the split (want sample, table or row)");
    CHECK_ERR(rec_embed_sched_parse("row/fixed/pf8+radix/pf8", &x), REC_EINVAL, "cannot read the grain");
    CHECK_ERR(rec_embed_sched_parse("sample/fixed/pf8+radix/pf8", &x), REC_EINVAL, "cannot read the grain");
    CHECK_ERR(rec_embed_sched_parse("sample/fixed/pf99/g10+radix/pf8", &x), REC_EINVAL, "cannot read the prefetch distance");
    CHECK_ERR(rec_embed_sched_parse("sample/fixed/pf8/g5+radix/pf8", &x), REC_EINVAL, "cannot read the grain");
    CHECK_ERR(rec_embed_sched_parse("table/fixed/pf8", &x), REC_EINVAL, "cannot read '+' and the backward schedule");
    CHECK_ERR(rec_embed_sched_parse("table/fixed/pf8+heap/pf8", &x), REC_EINVAL, "cannot read the sort (want radix, count or dense)");
    CHECK_ERR(rec_embed_sched_parse("table/fixed/pf8+radix/pf8/x", &x), REC_EINVAL, "cannot read the end");
    CHECK_ERR(rec_embed_sched_parse("table", &x), REC_EINVAL, "cannot read the kernel (want generic, fixed or blocked)");
    CHECK_ERR(rec_embed_sched_parse("table+fixed/pf8+radix/pf8", &x), REC_EINVAL, "cannot read the kernel");
    CHECK_ERR(rec_embed_sched_parse("table/fixed/pf8+radix", &x), REC_EINVAL, "cannot read the backward prefetch distance");
    /* The bounds, each side: pf 0..64, g 6..16, bpf 0..64. */
    CHECK_ERR(rec_embed_sched_parse("sample/fixed/pf65/g10+radix/pf8", &x), REC_EINVAL, "cannot read the prefetch distance");
    CHECK_ERR(rec_embed_sched_parse("sample/fixed/pf8/g17+radix/pf8", &x), REC_EINVAL, "cannot read the grain");
    CHECK_ERR(rec_embed_sched_parse("sample/fixed/pf8/g10+radix/pf65", &x), REC_EINVAL, "cannot read the backward prefetch");
    CHECK(rec_embed_sched_parse("sample/fixed/pf64/g16+radix/pf64", &x) == REC_OK && x.pf == 64 && x.grain == 16 && x.bpf == 64,
          "the upper bounds: %s", rec_errmsg());
    CHECK(rec_embed_sched_parse("sample/fixed/pf0/g6+radix/pf0", &x) == REC_OK && x.pf == 0 && x.grain == 6 && x.bpf == 0,
          "the lower bounds: %s", rec_errmsg());
    remove(path), remove(bad), rmdir(dir);
    rec_embed_free(e);
    rec_embed_free(g);
}

/* A batch of B rows for one table of R rows, every bag L ids ((r * 7 + k) mod R, weighted
 * when asked), with id `bad` at position pos of row `row`, ids 32- or 64-bit. */
static void bad_id_batch(rec_batch *b, int B, int64_t R, int L, int weighted, int row, int pos, int64_t bad, int wide) {
    rec_status s = rec_batch_init(b, B, 0, 1, L);
    if (!s) s = rec_batch_reserve_nnz(b, 0, (int64_t)B * L, weighted);
    CHECK(s == REC_OK, "bad-id batch: %s", rec_errmsg());
    if (s) exit(1);
    b->n = B;
    rec_jagged *j = &b->sparse[0];
    for (int r = 0; r <= B; r++) j->offsets[r] = (int64_t)r * L;
    for (int r = 0; r < B; r++)
        for (int k = 0; k < L; k++) {
            j->ids64[r * L + k] = r == row && k == pos ? bad : (r * 7 + k) % R;
            if (j->weights) j->weights[r * L + k] = 0.5f + (float)k;
        }
    if (!wide) CHECK(rec_batch_set_wide(b, 0, 0) == REC_OK, "narrow: %s", rec_errmsg());
}

/* Checked mode reports a bad id (R, then -1) under every forward candidate, at every position
 * of bags of 1..9 ids (the kernels' groups of 4 and their tails; 1 id a bag is the one-hot
 * path, and the row pass under ROW), for dims 3, 16, 17 and 32 (GENERIC, FIXED, BLOCKED with
 * and without tail columns), weighted and not, 32- and 64-bit ids; and under every backward
 * sort, which then changes nothing. */
static void test_checked_every_kernel(void) {
    static const int DIMS[4] = {3, 16, 17, 32};
    enum { B = 8, R = 50, ROW = 5 };
    float *out = malloc((size_t)B * 32 * sizeof(float)), *dout = random_dout((size_t)B * 32);
    float *before = malloc((size_t)R * 32 * sizeof(float));
    for (int d = 0; d < 4; d++) {
        const int E = DIMS[d], weighted = d % 2;
        model m = {1, B, {R}, {E}, {9}, REC_POOL_SUM, weighted};
        rec_embed *e = make_engine(&m, REC_SPARSE_SGD, 2, 0);
        if (!e) continue;
        rec_embed_sched c[REC_EMBED_MAX_CANDIDATES];
        const int n = rec_embed_fwd_candidates(e, 0, c, REC_EMBED_MAX_CANDIDATES);
        int missed = 0, tried = 0;
        for (int L = 1; L <= 9; L++)
            for (int pos = 0; pos < L; pos++)
                for (int v = 0; v < 4; v++) {
                    const int64_t bad = v % 2 ? -1 : R;
                    rec_batch b;
                    bad_id_batch(&b, B, R, L, weighted, ROW, pos, bad, v / 2);
                    char want[96];
                    snprintf(want, sizeof want, "batch row %d: id %lld is outside [0, %d)", ROW, (long long)bad, R);
                    for (int k = 0; k < n; k++) {
                        rec_embed_set_sched(e, 0, c[k]);
                        const rec_status st = rec_embed_forward(e, &b, 0, out);
                        tried++;
                        if (st != REC_EINVAL || !strstr(rec_errmsg(), want)) {
                            char name[64];
                            if (missed++ < 5)
                                fprintf(stderr, "  dim %d %s, bags of %d, id %lld at %d, %d-bit: status %d, %s\n", E,
                                        rec_embed_sched_name(c[k], name, sizeof name), L, (long long)bad, pos,
                                        v / 2 ? 64 : 32, st, st ? rec_errmsg() : "accepted");
                        }
                    }
                    rec_batch_free(&b);
                }
        CHECK(missed == 0, "dim %d: %d of %d forward calls with a bad id not refused as they should be", E, missed, tried);
        /* Backward: every sort refuses the batch before it updates any row. */
        const float *T = rec_embed_table(e, 0);
        memcpy(before, T, (size_t)R * E * sizeof(float));
        const int nb = rec_embed_bwd_candidates(e, 0, c, REC_EMBED_MAX_CANDIDATES);
        CHECK(nb == 9, "a 50 x %d table has %d backward candidates; want 9 (radix, count, dense x 3 prefetch)", E, nb);
        for (int wide = 0; wide <= 1; wide++) {
            rec_batch b;
            bad_id_batch(&b, B, R, 3, weighted, ROW, 2, R, wide);
            for (int k = 0; k < nb; k++) {
                rec_embed_set_sched(e, 0, c[k]);
                CHECK_ERR(rec_embed_backward_update(e, &b, 0, dout, 0.1f), REC_EINVAL, "batch row 5: id 50 is outside [0, 50)");
                CHECK(!memcmp(before, T, (size_t)R * E * sizeof(float)), "backward candidate %d changed the table on a bad batch", k);
            }
            rec_batch_free(&b);
        }
        rec_embed_free(e);
    }
    free(before), free(dout), free(out);
}

/* ---- bf16 tables ------------------------------------------------------------------------------ */

static rec_embed *make_engine16(const model *m, rec_sparse_opt_kind kind, int threads, rec_embed_rounding rounding) {
    rec_embed_config c = {m->F, m->rows, m->dims, m->pooling, rec_sparse_opt_defaults(kind, 0.05f), m->B, threads, 7, 0,
                          1, rounding};
    rec_embed *e = NULL;
    rec_status s = rec_embed_init(&e, &c);
    CHECK(s == REC_OK, "bf16 init: %s", rec_errmsg());
    return e;
}

/* dst's tables and optimizer state := src's values (fp32 or bf16 storage either way). */
static void copy_engine(rec_embed *dst, rec_embed *src, const model *m) {
    for (int f = 0; f < m->F; f++) {
        float *v = malloc(sizeof(float) * (size_t)m->rows[f] * (size_t)m->dims[f]);
        CHECK(rec_embed_read_rows(src, f, 0, m->rows[f], v) == REC_OK && rec_embed_write_rows(dst, f, 0, m->rows[f], v) == REC_OK,
              "copy rows: %s", rec_errmsg());
        free(v);
        if (rec_embed_state(src, f))
            memcpy(rec_embed_state(dst, f), rec_embed_state(src, f), rec_embed_state_len(src, f) * sizeof(float));
    }
}

/* Elements of table f of e16 (bf16) that are not (exact) the bf16 rounding of e32's values to
 * nearest, or (!nearest) one of the two bf16 values around them. */
static size_t bf16_off(rec_embed *e16, rec_embed *e32, const model *m, int nearest) {
    size_t bad = 0;
    for (int f = 0; f < m->F; f++) {
        const uint16_t *h = rec_embed_table_bf16(e16, f);
        const float *t = rec_embed_table(e32, f);
        for (size_t i = 0; i < (size_t)m->rows[f] * (size_t)m->dims[f]; i++) {
            union { float f; uint32_t u; } v = {t[i]};
            const uint16_t down = (uint16_t)(v.u >> 16), up = (uint16_t)(down + ((v.u & 0xffffu) != 0));
            bad += nearest ? h[i] != rec_bf16_bits(t[i]) : h[i] != down && h[i] != up;
        }
    }
    return bad;
}

/* bf16 tables (embed.h "Table storage") against fp32 tables holding the same values:
 *  - forward: every candidate's output bitwise equal to the fp32 engine's under the same
 *    candidate (the bf16 kernels widen exactly, so the bits are the fp32 kernels');
 *  - backward, NEAREST: after each of two steps the bf16 rows are exactly the fp32 engine's
 *    updated rows rounded to nearest, and the fp32 optimizer state is bitwise the fp32 engine's
 *    (the fp32 engine is then reset to the bf16 values and state for the next step);
 *  - backward, STOCHASTIC: every updated value is one of the two bf16 values around the fp32
 *    update, untouched rows keep their bits, 1 and 2 threads give the same bits, and the
 *    update counter is part of the hash (a different counter, different bits). */
static void test_bf16_tables(int trial, rec_sparse_opt_kind kind) {
    const model m = random_model(2 + (int)irand(MAXF - 2), 1 + (int)irand(64));
    rec_embed *e16 = make_engine16(&m, kind, 2, REC_ROUND_NEAREST), *e32 = make_engine(&m, kind, 2, 0);
    rec_embed *s1 = make_engine16(&m, kind, 1, REC_ROUND_STOCHASTIC), *s2 = make_engine16(&m, kind, 2, REC_ROUND_STOCHASTIC);
    if (!e16 || !e32 || !s1 || !s2) return;
    CHECK(rec_embed_is_bf16(e16) && !rec_embed_is_bf16(e32) && !rec_embed_table(e16, 0) && !rec_embed_table_bf16(e32, 0),
          "storage accessors");
    copy_engine(e32, e16, &m);
    rec_batch b[2];
    make_batch(&b[0], &m);
    make_batch(&b[1], &m);
    const int W = rec_embed_out_width(e16), B = m.B;
    const size_t n = (size_t)B * (size_t)W;
    float *o16 = malloc(n * sizeof(float)), *o32 = malloc(n * sizeof(float)), *dout = random_dout(n);
    rec_embed_sched cand[REC_EMBED_MAX_CANDIDATES];
    size_t bad = 0;
    for (int f = 0; f < m.F; f++) {
        const int nc = rec_embed_fwd_candidates(e16, f, cand, REC_EMBED_MAX_CANDIDATES);
        for (int k = 0; k < nc; k++) {
            CHECK(rec_embed_set_sched(e16, f, cand[k]) == REC_OK && rec_embed_set_sched(e32, f, cand[k]) == REC_OK, "set_sched");
            poison(o16, n);
            poison(o32, n);
            CHECK(rec_embed_forward(e16, &b[0], 0, o16) == REC_OK && rec_embed_forward(e32, &b[0], 0, o32) == REC_OK,
                  "trial %d forward: %s", trial, rec_errmsg());
            bad += memcmp(o16, o32, n * sizeof(float)) != 0;
        }
    }
    CHECK(bad == 0, "trial %d: %zu candidates pool bf16 tables to other bits than fp32 tables of the same values", trial, bad);
    for (int step = 0; step < 2; step++) {
        CHECK(rec_embed_backward_update(e16, &b[step], 0, dout, 0.05f) == REC_OK &&
                  rec_embed_backward_update(e32, &b[step], 0, dout, 0.05f) == REC_OK, "backward: %s", rec_errmsg());
        CHECK(bf16_off(e16, e32, &m, 1) == 0, "trial %d kind %d step %d: bf16 rows are not the fp32 update rounded to nearest",
              trial, (int)kind, step);
        size_t sbad = 0;
        for (int f = 0; f < m.F; f++)
            if (rec_embed_state(e16, f))
                sbad += memcmp(rec_embed_state(e16, f), rec_embed_state(e32, f), rec_embed_state_len(e16, f) * sizeof(float)) != 0;
        CHECK(sbad == 0, "trial %d kind %d step %d: the optimizer state differs from fp32's", trial, (int)kind, step);
        copy_engine(e32, e16, &m);
    }
    /* stochastic: from the same start (s1's values) */
    copy_engine(s2, s1, &m);
    copy_engine(e32, s1, &m);
    uint16_t **before = calloc((size_t)m.F, sizeof *before);
    for (int f = 0; f < m.F; f++) {
        const size_t k = (size_t)m.rows[f] * (size_t)m.dims[f];
        before[f] = malloc(k * sizeof(uint16_t));
        memcpy(before[f], rec_embed_table_bf16(s1, f), k * sizeof(uint16_t));
    }
    CHECK(rec_embed_backward_update(s1, &b[0], 0, dout, 0.05f) == REC_OK && rec_embed_backward_update(s2, &b[0], 0, dout, 0.05f) == REC_OK &&
              rec_embed_backward_update(e32, &b[0], 0, dout, 0.05f) == REC_OK, "stochastic backward: %s", rec_errmsg());
    CHECK(bf16_off(s1, e32, &m, 0) == 0, "trial %d kind %d: a stochastically rounded value is not next to the fp32 update", trial,
          (int)kind);
    size_t diff12 = 0, moved = 0, touched_bad = 0, stream_bad = 0;
    for (int f = 0; f < m.F; f++) {
        const size_t k = (size_t)m.rows[f] * (size_t)m.dims[f];
        diff12 += memcmp(rec_embed_table_bf16(s1, f), rec_embed_table_bf16(s2, f), k * sizeof(uint16_t)) != 0;
        const float *t = rec_embed_table(e32, f);
        for (size_t i = 0; i < k; i++) { /* a value the fp32 update left alone keeps its bits */
            const int same32 = t[i] == rec_bf16_to_float(before[f][i]);
            touched_bad += same32 && rec_embed_table_bf16(s1, f)[i] != before[f][i];
            moved += !same32;
            /* every value: the fp32 update rounded with the documented bits (the GPU's too) */
            const int E = m.dims[f], c = (int)(i % (size_t)E);
            const uint64_t r = rec_bf16_sr_step(rec_bf16_sr_start(7, 0, f, (int64_t)(i / (size_t)E)), c / 4);
            stream_bad += rec_embed_table_bf16(s1, f)[i] != rec_bf16_bits_sr(t[i], (uint32_t)(r >> (16 * (c % 4))));
        }
        free(before[f]);
    }
    CHECK(stream_bad == 0, "trial %d kind %d: %zu values not rounded with rec_bf16_sr_start's stream", trial, (int)kind,
          stream_bad);
    free(before);
    CHECK(diff12 == 0, "trial %d: 1 and 2 threads round stochastically to different bits", trial);
    CHECK(touched_bad == 0, "trial %d: %zu values that the update did not change moved", trial, touched_bad);
    if (moved > 64) { /* the counter is in the hash: step 2 of s2 from s1's start at counter 5 differs */
        copy_engine(s2, s1, &m);
        rec_embed_set_updates(s2, 5);
        CHECK(rec_embed_updates(s1) == 1, "one update counted: %lld", (long long)rec_embed_updates(s1));
        CHECK(rec_embed_backward_update(s1, &b[1], 0, dout, 0.05f) == REC_OK && rec_embed_backward_update(s2, &b[1], 0, dout, 0.05f) == REC_OK,
              "backward: %s", rec_errmsg());
        size_t d = 0;
        for (int f = 0; f < m.F; f++)
            d += memcmp(rec_embed_table_bf16(s1, f), rec_embed_table_bf16(s2, f), (size_t)m.rows[f] * m.dims[f] * sizeof(uint16_t)) != 0;
        CHECK(d > 0, "trial %d: the update counter does not change the stochastic bits", trial);
    }
    free(o16), free(o32), free(dout);
    rec_batch_free(&b[0]);
    rec_batch_free(&b[1]);
    rec_embed_free(e16), rec_embed_free(e32), rec_embed_free(s1), rec_embed_free(s2);
}

/* rec_sparse_opt_step_bf16, the engine's bf16 step for rows kept elsewhere (an owner's, a cache
 * slot's): row 3 of a 19-column table (a head, an AVX block and a tail) stepped by the engine
 * and by the function, whole and in column parts [0, 3), [3, 6), [6, 15), [15, 19) as the
 * sharded executor steps them (SGD and Adagrad: the part's gradient and state, its first
 * column as the key's; row-wise Adagrad: the whole row's gradient and a copy of the row's
 * state per part): the same bits, and the same state. With the update counter 1 instead of
 * 0 the stochastic bits differ. */
static void test_bf16_step_parts(rec_sparse_opt_kind kind, rec_embed_rounding rounding) {
    enum { E = 19, R = 5, ID = 3 };
    static const int CUT[5] = {0, 3, 6, 15, 19};
    const int64_t rows[1] = {R};
    const int dims[1] = {E};
    const rec_sparse_opt_config o = rec_sparse_opt_defaults(kind, 0.05f);
    rec_embed_config c = {1, rows, dims, REC_POOL_SUM, o, 4, 1, 7, 0, 1, rounding};
    rec_embed *e = NULL;
    CHECK(rec_embed_init(&e, &c) == REC_OK, "init: %s", rec_errmsg());
    if (!e) return;
    float g[E], st0[E], st[E], parts_st[4][E];
    uint16_t before[E], whole[E], parts[E];
    for (int i = 0; i < E; i++) g[i] = (float)(urand() - 0.5) * 0.3f;
    float *S = rec_embed_state(e, 0);
    const int sf = kind == REC_SPARSE_ADAGRAD ? E : kind == REC_SPARSE_ROWWISE_ADAGRAD ? 1 : 0;
    for (int i = 0; S && i < (int)rec_embed_state_len(e, 0); i++) S[i] = (float)urand() * 0.01f; /* a state under way */
    if (sf) memcpy(st0, S + (size_t)ID * sf, sizeof(float) * (size_t)sf);
    memcpy(before, rec_embed_table_bf16(e, 0) + (size_t)ID * E, sizeof before);
    rec_batch b;
    CHECK(rec_batch_init(&b, 1, 0, 1, 1) == REC_OK && rec_batch_reserve_nnz(&b, 0, 1, 0) == REC_OK, "batch");
    b.n = 1;
    b.sparse[0].offsets[0] = 0, b.sparse[0].offsets[1] = 1;
    b.sparse[0].ids64[0] = ID; /* wide, as rec_batch_init makes it */
    CHECK(rec_embed_backward_update(e, &b, 0, g, 0.05f) == REC_OK, "backward: %s", rec_errmsg());
    const uint16_t *after = rec_embed_table_bf16(e, 0) + (size_t)ID * E;
    const rec_bf16_key k = {rounding, 7, 0, 0, ID, 0};
    memcpy(whole, before, sizeof whole);
    if (sf) memcpy(st, st0, sizeof(float) * (size_t)sf);
    rec_sparse_opt_step_bf16(&o, 0.05f, g, E, 0, E, whole, sf ? st : NULL, &k);
    CHECK(!memcmp(whole, after, sizeof whole) && (!sf || !memcmp(st, S + (size_t)ID * sf, sizeof(float) * (size_t)sf)),
          "kind %d, rounding %d: the function steps a whole row to other bits than the engine", (int)kind, (int)rounding);
    memcpy(parts, before, sizeof parts);
    int state_ok = 1;
    for (int q = 0; q < 4; q++) {
        const int c0 = CUT[q], c1 = CUT[q + 1], w = c1 - c0;
        if (kind == REC_SPARSE_ROWWISE_ADAGRAD) {
            const rec_bf16_key kp = {rounding, 7, 0, 0, ID, 0};
            parts_st[q][0] = st0[0];
            rec_sparse_opt_step_bf16(&o, 0.05f, g, E, c0, c1, parts + c0, parts_st[q], &kp);
            state_ok &= parts_st[q][0] == S[ID];
        } else {
            const rec_bf16_key kp = {rounding, 7, 0, 0, ID, c0};
            if (sf) memcpy(parts_st[q], st0 + c0, sizeof(float) * (size_t)w);
            rec_sparse_opt_step_bf16(&o, 0.05f, g + c0, w, 0, w, parts + c0, sf ? parts_st[q] : NULL, &kp);
            if (sf) state_ok &= !memcmp(parts_st[q], S + (size_t)ID * E + c0, sizeof(float) * (size_t)w);
        }
    }
    CHECK(!memcmp(parts, after, sizeof parts) && state_ok, "kind %d, rounding %d: a row stepped in column parts has other "
          "bits than the engine's whole row", (int)kind, (int)rounding);
    if (rounding == REC_ROUND_STOCHASTIC) {
        const rec_bf16_key k1 = {rounding, 7, 1, 0, ID, 0};
        memcpy(whole, before, sizeof whole);
        if (sf) memcpy(st, st0, sizeof(float) * (size_t)sf);
        rec_sparse_opt_step_bf16(&o, 0.05f, g, E, 0, E, whole, sf ? st : NULL, &k1);
        CHECK(memcmp(whole, after, sizeof whole) != 0, "kind %d: the key's update count does not change the bits", (int)kind);
    }
    rec_batch_free(&b);
    rec_embed_free(e);
}

/* Stochastic rounding is exactly unbiased: over all 2^16 values of r the mean of the rounded
 * value is the value itself (checked in float64 for values with every low-bit pattern class),
 * and inf and NaN pass through; the bf16 engine's rejections and row accessors' range checks. */
static void test_bf16_rounding_and_errors(void) {
    const float vals[] = {1.0f + 0x1p-9f, -3.14159f, 1e-30f, 0x1.fffffep0f, 12345.678f, 0x1.0001p-126f};
    int bad = 0;
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        double sum = 0;
        for (uint32_t r = 0; r < 65536; r++) sum += rec_bf16_to_float(rec_bf16_bits_sr(vals[i], r));
        bad += sum / 65536.0 != (double)vals[i];
    }
    CHECK(bad == 0, "stochastic rounding's mean over all r differs from the value for %d of 6", bad);
    CHECK(isinf(rec_bf16_to_float(rec_bf16_bits_sr(INFINITY, 0xffff))) && isnan(rec_bf16_to_float(rec_bf16_bits_sr(NAN, 0))),
          "inf and NaN survive stochastic rounding");
    int64_t rows[2] = {10, 5};
    int dims[2] = {4, 4};
    rec_embed_config c = {2, rows, dims, REC_POOL_SUM, rec_sparse_opt_defaults(REC_SPARSE_SGD, 0.1f), 8, 1, 1, 0, 2,
                          REC_ROUND_STOCHASTIC};
    rec_embed *e = (rec_embed *)1;
    CHECK_ERR(rec_embed_init(&e, &c), REC_EINVAL, "bf16 is 2; give 0 (fp32 tables) or 1");
    c.bf16 = 1, c.rounding = (rec_embed_rounding)7;
    CHECK_ERR(rec_embed_init(&e, &c), REC_EINVAL, "unknown rounding 7");
    c.rounding = REC_ROUND_NEAREST;
    CHECK(rec_embed_init(&e, &c) == REC_OK, "init: %s", rec_errmsg());
    float v[40];
    CHECK_ERR(rec_embed_read_rows(e, 1, 3, 3, v), REC_EINVAL, "rows [3, 6) outside table 1's 5 rows");
    CHECK_ERR(rec_embed_write_rows(e, 2, 0, 1, v), REC_EINVAL, "table 2 of 2");
    CHECK(rec_embed_read_rows(e, 0, 0, 10, v) == REC_OK, "read: %s", rec_errmsg());
    int exact = 1; /* the init's values are bf16 values, and sqrt(1/10) bounds them */
    for (int i = 0; i < 40; i++) exact &= rec_bf16_to_float(rec_bf16_bits(v[i])) == v[i] && fabsf(v[i]) <= 0.317f;
    CHECK(exact, "a bf16 table's init values are bf16 values of the fp32 init's range");
    rec_embed_free(e);
}

int main(void) {
    rec_rng_seed(&g_rng, 2024, 0);
    for (int t = 0; t < 3; t++) {
        test_bf16_tables(t, REC_SPARSE_SGD);
        test_bf16_tables(t, REC_SPARSE_ADAGRAD);
        test_bf16_tables(t, REC_SPARSE_ROWWISE_ADAGRAD);
    }
    test_bf16_rounding_and_errors();
    for (int t = 0; t < 12; t++) test_forward_candidates(t);
    for (int t = 0; t < 4; t++) {
        test_backward_candidates(t, REC_SPARSE_SGD);
        test_backward_candidates(t, REC_SPARSE_ADAGRAD);
        test_backward_candidates(t, REC_SPARSE_ROWWISE_ADAGRAD);
    }
    test_wide_rows_every_sort();
    test_trust_threads();
    test_batch_sizes_vary();
    test_dense_epoch_wrap();
    test_tuner();
    test_plans();
    test_checked_every_kernel();
    /* last: its draws leave the random models of the tests above as they were */
    for (int k = 0; k < 3; k++)
        for (int r = 0; r < 2; r++) test_bf16_step_parts((rec_sparse_opt_kind)k, (rec_embed_rounding)r);
    return check_report();
}
