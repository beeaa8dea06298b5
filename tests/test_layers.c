/* The DCN cross layer and the second-order FM term (nn.h, src/nn/cross.c, src/nn/fm.c).
 *
 *  - float fast paths against the float64 references, forward and backward, on shapes with
 *    B = 1, D = 1, F = 1, E = 1, odd widths around the 16-lane dot product and the 64-column
 *    FM chunk, and the Criteo widths (D = 13 + 26*16 = 429, 13 + 26*48 = 1261; F 26, E 64).
 *    Overwritten outputs are poisoned with NaN first so unwritten elements fail; ACCUMULATED
 *    outputs (cross dx0, FM demb) are pre-filled with random values and checked as
 *    prior + increment;
 *  - rec_cross_backward with dx == dy (in place) against the out-of-place call, bit for bit,
 *    and the same for the reference;
 *  - finite differences in float64 of both references for every input and parameter
 *    gradient, and of a chain of two cross layers sharing x0 (x1 = cross(x0, x0),
 *    x2 = cross(x0, x1)), whose dx0 is the sum of both layers' accumulations plus the first
 *    layer's dx: this is what the accumulate contract must compose to;
 *  - FM against its definition, the explicit pairwise sum over f < f' of <v_f, v_f'>;
 *  - a few hand-computed values, so a misreading shared by fast path and reference fails.
 *
 * Tolerance (fp32 vs fp64 reference), as tests/test_nn.c: |got - ref| <= 1e-5 * S, S the
 * same expression evaluated on absolute values. For the cross layer (sums of products, no
 * subtraction) S is the reference run on |inputs|. The FM formula subtracts, so its S takes
 * every operand by absolute value and every subtraction as an addition (the standard
 * rounding-error bound of the expression as evaluated):
 *     forward   S_b = 1/2 sum_e [ (sum_f |v_fe|)^2 + sum_f v_fe^2 ],
 *     backward  S   = |prior| + |dout_b| (sum_f' |v_f'e| + |v_fe|).
 * Without the "+" an F = 1 row (exact result 0, S = 0) would fail on the last-bit rounding of
 * a contracted v*v - v*v. fp32 summation of K terms errs by at most ~K 2^-24 S, typically
 * sqrt(K) 2^-24 S (1.3e-6 S at K = 1261 even in the worst case of the dot's 16 lanes of 79
 * terms), so 1e-5 S passes every correct ordering, while a dropped term, a wrong index or a
 * NaN fails.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "numcheck.h"
#include "rectrain/core.h"
#include "rectrain/nn.h"

static float *falloc(size_t n) { return malloc((n ? n : 1) * sizeof(float)); }
static double *dalloc(size_t n) { return malloc((n ? n : 1) * sizeof(double)); }

/* Central difference of f at p[i] with step h (f must read p). */
#define FD(f, p, i, h) \
    ((p)[i] += (h), fp = (f), (p)[i] -= 2 * (h), fm = (f), (p)[i] += (h), (fp - fm) / (2 * (h)))

static int fd_close(double a, double n) { return fabs(a - n) <= 1e-6 * (1.0 + fabs(n)); }

/* ---- cross layer ---------------------------------------------------------------------------- */

/* Scalar objective sum_k r_k y_k of the reference cross layer, so dL/dy = r. */
static double cross_obj(int B, int D, const double *x0, const double *x, const double *w, const double *b,
                        const double *r, double *y) {
    rec_cross_forward_ref(B, D, x0, x, w, b, y);
    double s = 0;
    for (size_t k = 0; k < (size_t)B * D; k++) s += r[k] * y[k];
    return s;
}

static void cross_case(int B, int D) {
    const size_t n = (size_t)B * D;
    float *x0 = falloc(n), *x = falloc(n), *w = falloc(D), *b = falloc(D), *y = falloc(n), *s = falloc(B);
    float *dy = falloc(n), *prior = falloc(n), *dx0 = falloc(n), *dx = falloc(n), *dw = falloc(D), *db = falloc(D);
    fill_uniform(x0, n, -1, 1);
    fill_uniform(x, n, -1, 1);
    fill_uniform(w, D, -0.5f, 0.5f);
    fill_uniform(b, D, -0.5f, 0.5f);
    fill_uniform(dy, n, -1, 1);
    fill_uniform(prior, n, -1, 1);
    poison(y, n);
    poison(s, B);
    rec_cross_forward(B, D, x0, x, w, b, y, s);
    memcpy(dx0, prior, n * sizeof(float));
    poison(dx, n);
    poison(dw, D);
    poison(db, D);
    rec_cross_backward(B, D, x0, x, w, s, dy, dx0, dx, dw, db);

    double *x0d = to_f64(x0, n, 0), *xd = to_f64(x, n, 0), *wd = to_f64(w, D, 0), *bd = to_f64(b, D, 0);
    double *dyd = to_f64(dy, n, 0), *pd = to_f64(prior, n, 0);
    double *x0a = to_f64(x0, n, 1), *xa = to_f64(x, n, 1), *wa = to_f64(w, D, 1), *ba = to_f64(b, D, 1);
    double *dya = to_f64(dy, n, 1), *pa = to_f64(prior, n, 1);
    double *yr = dalloc(n), *yS = dalloc(n), *sr = dalloc(B), *sS = dalloc(B);
    rec_cross_forward_ref(B, D, x0d, xd, wd, bd, yr);
    rec_cross_forward_ref(B, D, x0a, xa, wa, ba, yS);
    for (int r = 0; r < B; r++) {
        sr[r] = sS[r] = 0;
        for (int d = 0; d < D; d++) {
            sr[r] += xd[(size_t)r * D + d] * wd[d];
            sS[r] += xa[(size_t)r * D + d] * wa[d];
        }
    }
    int bad = count_bad("y", y, yr, yS, n, 1e-5) + count_bad("s", s, sr, sS, B, 1e-5);
    CHECK(bad == 0, "cross forward B %d D %d vs reference: %d off", B, D, bad);

    double *dx0r = to_f64(prior, n, 0), *dxr = dalloc(n), *dwr = dalloc(D), *dbr = dalloc(D);
    double *dx0S = to_f64(prior, n, 1), *dxS = dalloc(n), *dwS = dalloc(D), *dbS = dalloc(D);
    rec_cross_backward_ref(B, D, x0d, xd, wd, dyd, dx0r, dxr, dwr, dbr);
    rec_cross_backward_ref(B, D, x0a, xa, wa, dya, dx0S, dxS, dwS, dbS);
    bad = count_bad("dx0", dx0, dx0r, dx0S, n, 1e-5) + count_bad("dx", dx, dxr, dxS, n, 1e-5) +
          count_bad("dw", dw, dwr, dwS, D, 1e-5) + count_bad("db", db, dbr, dbS, D, 1e-5);
    CHECK(bad == 0, "cross backward B %d D %d vs reference (dx0 = prior + increment): %d off", B, D, bad);

    /* In place: dx == dy gives the same bits as the out-of-place call, dx0 still accumulates. */
    float *buf = falloc(n), *dx0b = falloc(n), *dwb = falloc(D), *dbb = falloc(D);
    memcpy(buf, dy, n * sizeof(float));
    memcpy(dx0b, prior, n * sizeof(float));
    poison(dwb, D);
    poison(dbb, D);
    rec_cross_backward(B, D, x0, x, w, s, buf, dx0b, buf, dwb, dbb);
    CHECK(memcmp(buf, dx, n * 4) == 0 && memcmp(dx0b, dx0, n * 4) == 0 && memcmp(dwb, dw, (size_t)D * 4) == 0 &&
              memcmp(dbb, db, (size_t)D * 4) == 0,
          "cross backward B %d D %d with dx aliasing dy differs from the out-of-place call", B, D);
    double *bufd = to_f64(dy, n, 0), *dx0rb = to_f64(prior, n, 0), *dwrb = dalloc(D), *dbrb = dalloc(D);
    rec_cross_backward_ref(B, D, x0d, xd, wd, bufd, dx0rb, bufd, dwrb, dbrb);
    CHECK(memcmp(bufd, dxr, n * 8) == 0 && memcmp(dx0rb, dx0r, n * 8) == 0 && memcmp(dwrb, dwr, (size_t)D * 8) == 0 &&
              memcmp(dbrb, dbr, (size_t)D * 8) == 0,
          "cross reference backward B %d D %d with dx aliasing dy differs", B, D);

    /* Finite differences of the reference (bilinear in (x0, s): central differences are exact
     * up to rounding). dx0 is checked as its increment over the prior. Small shapes only. */
    if (n <= 400) {
        double fp, fm, h = 1e-6;
        int fbad = 0;
        for (size_t i = 0; i < n; i++)
            fbad += !fd_close(dx0r[i] - pd[i], FD(cross_obj(B, D, x0d, xd, wd, bd, dyd, yr), x0d, i, h));
        for (size_t i = 0; i < n; i++) fbad += !fd_close(dxr[i], FD(cross_obj(B, D, x0d, xd, wd, bd, dyd, yr), xd, i, h));
        for (int i = 0; i < D; i++) fbad += !fd_close(dwr[i], FD(cross_obj(B, D, x0d, xd, wd, bd, dyd, yr), wd, i, h));
        for (int i = 0; i < D; i++) fbad += !fd_close(dbr[i], FD(cross_obj(B, D, x0d, xd, wd, bd, dyd, yr), bd, i, h));
        CHECK(fbad == 0, "cross reference B %d D %d vs finite differences: %d off", B, D, fbad);
    }
    free(x0), free(x), free(w), free(b), free(y), free(s), free(dy), free(prior), free(dx0), free(dx), free(dw), free(db);
    free(x0d), free(xd), free(wd), free(bd), free(dyd), free(pd), free(x0a), free(xa), free(wa), free(ba), free(dya), free(pa);
    free(yr), free(yS), free(sr), free(sS), free(dx0r), free(dxr), free(dwr), free(dbr), free(dx0S), free(dxS), free(dwS),
        free(dbS);
    free(buf), free(dx0b), free(dwb), free(dbb), free(bufd), free(dx0rb), free(dwrb), free(dbrb);
}

static void test_cross(void) {
    static const int shapes[][2] = {{1, 1},  {1, 7},  {5, 1},  {3, 17}, {2, 16},  {4, 15},    {3, 31},
                                    {7, 33}, {6, 47}, {1, 429}, {64, 429}, {33, 1261}, {2, 3}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) cross_case(shapes[i][0], shapes[i][1]);

    /* By hand: x0 (1, 2), x (3, 4), w (0.5, 0.25), b (0.125, 0.25): s = 2.5,
     * y = (2.5 + 0.125 + 3, 5 + 0.25 + 4). All exact in float. */
    float x0[2] = {1, 2}, x[2] = {3, 4}, w[2] = {0.5f, 0.25f}, b[2] = {0.125f, 0.25f}, y[2], s[1];
    rec_cross_forward(1, 2, x0, x, w, b, y, s);
    CHECK(s[0] == 2.5f && y[0] == 5.625f && y[1] == 9.25f, "hand case: s %g y %g %g (want 2.5, 5.625, 9.25)", s[0],
          y[0], y[1]);
    /* dy (1, -1): ds = 1 - 2 = -1; dx0 = 10 + dy * 2.5; dx = dy - w; dw = -x; db = dy. */
    float dy[2] = {1, -1}, dx0[2] = {10, 10}, dx[2], dw[2], db[2];
    rec_cross_backward(1, 2, x0, x, w, s, dy, dx0, dx, dw, db);
    CHECK(dx0[0] == 12.5f && dx0[1] == 7.5f && dx[0] == 0.5f && dx[1] == -1.25f && dw[0] == -3 && dw[1] == -4 &&
              db[0] == 1 && db[1] == -1,
          "hand case backward: dx0 %g %g dx %g %g dw %g %g db %g %g", dx0[0], dx0[1], dx[0], dx[1], dw[0], dw[1], db[0],
          db[1]);
    /* B = 0: dw and db are still overwritten (with zeros). */
    float dw0[3] = {NAN, NAN, NAN}, db0[3] = {NAN, NAN, NAN};
    rec_cross_backward(0, 3, x0, x, w, s, dy, dx0, dx, dw0, db0);
    CHECK(dw0[0] == 0 && dw0[2] == 0 && db0[0] == 0 && db0[2] == 0, "B = 0 zeroes dw and db");
}

/* ---- two cross layers sharing x0 ------------------------------------------------------------ */

/* x1 = cross(x0, x0; w1, b1), x2 = cross(x0, x1; w2, b2); returns sum r x2. x1 (B, D) is
 * scratch for the intermediate, x2 (B, D) receives the output. */
static double chain_obj(int B, int D, const double *x0, const double *w1, const double *b1, const double *w2,
                        const double *b2, const double *r, double *x1, double *x2) {
    rec_cross_forward_ref(B, D, x0, x0, w1, b1, x1);
    return cross_obj(B, D, x0, x1, w2, b2, r, x2);
}

/* Backward of the chain in float64: both layers accumulate into dx0, the second layer's dx
 * flows (in place) into the first, and the first layer's dx adds to dx0 as well because its
 * x is x0. Leaves the gradient of x0 in g0 (B, D, accumulated onto its contents). */
static void chain_backward_ref(int B, int D, const double *x0, const double *w1, const double *w2, const double *r,
                               double *x1, double *g0, double *g1, double *dw1, double *db1, double *dw2,
                               double *db2) {
    rec_cross_backward_ref(B, D, x0, x1, w2, r, g0, g1, dw2, db2);
    rec_cross_backward_ref(B, D, x0, x0, w1, g1, g0, g1, dw1, db1);
    for (size_t i = 0; i < (size_t)B * D; i++) g0[i] += g1[i];
}

static void test_cross_chain(void) {
    /* float64: finite differences of the whole chain (cubic in x0; h^2 truncation ~ 1e-12). */
    for (int t = 0; t < 2; t++) {
        const int B = t ? 2 : 3, D = t ? 17 : 5;
        const size_t n = (size_t)B * D;
        double *x0 = dalloc(n), *w1 = dalloc(D), *b1 = dalloc(D), *w2 = dalloc(D), *b2 = dalloc(D), *r = dalloc(n);
        double *x1 = dalloc(n), *x2 = dalloc(n), *g0 = dalloc(n), *g1 = dalloc(n);
        double *dw1 = dalloc(D), *db1 = dalloc(D), *dw2 = dalloc(D), *db2 = dalloc(D), fp, fm, h = 1e-6;
        for (size_t i = 0; i < n; i++) x0[i] = rec_rng_uniform(&g_rng) * 2 - 1, r[i] = rec_rng_uniform(&g_rng) * 2 - 1;
        for (int i = 0; i < D; i++) {
            w1[i] = rec_rng_uniform(&g_rng) - 0.5, b1[i] = rec_rng_uniform(&g_rng) - 0.5;
            w2[i] = rec_rng_uniform(&g_rng) - 0.5, b2[i] = rec_rng_uniform(&g_rng) - 0.5;
        }
        chain_obj(B, D, x0, w1, b1, w2, b2, r, x1, x2);
        memset(g0, 0, n * sizeof(double));
        chain_backward_ref(B, D, x0, w1, w2, r, x1, g0, g1, dw1, db1, dw2, db2);
        int fbad = 0;
        for (size_t i = 0; i < n; i++) fbad += !fd_close(g0[i], FD(chain_obj(B, D, x0, w1, b1, w2, b2, r, x1, x2), x0, i, h));
        for (int i = 0; i < D; i++) {
            fbad += !fd_close(dw1[i], FD(chain_obj(B, D, x0, w1, b1, w2, b2, r, x1, x2), w1, i, h));
            fbad += !fd_close(db1[i], FD(chain_obj(B, D, x0, w1, b1, w2, b2, r, x1, x2), b1, i, h));
            fbad += !fd_close(dw2[i], FD(chain_obj(B, D, x0, w1, b1, w2, b2, r, x1, x2), w2, i, h));
            fbad += !fd_close(db2[i], FD(chain_obj(B, D, x0, w1, b1, w2, b2, r, x1, x2), b2, i, h));
        }
        CHECK(fbad == 0, "two chained cross layers (B %d D %d) vs finite differences: %d off", B, D, fbad);
        free(x0), free(w1), free(b1), free(w2), free(b2), free(r), free(x1), free(x2), free(g0), free(g1);
        free(dw1), free(db1), free(dw2), free(db2);
    }

    /* float chain, the way a model runs it (saved s per layer, dx1 in place, dx0 pre-filled),
     * against the float64 chain; S is the float64 chain on absolute values. */
    const int B = 16, D = 429;
    const size_t n = (size_t)B * D;
    float *x0 = falloc(n), *w1 = falloc(D), *b1 = falloc(D), *w2 = falloc(D), *b2 = falloc(D), *r = falloc(n);
    float *x1 = falloc(n), *x2 = falloc(n), *s1 = falloc(B), *s2 = falloc(B), *prior = falloc(n), *g0 = falloc(n);
    float *dw1 = falloc(D), *db1 = falloc(D), *dw2 = falloc(D), *db2 = falloc(D);
    fill_uniform(x0, n, -1, 1);
    fill_uniform(r, n, -1, 1);
    fill_uniform(prior, n, -1, 1);
    fill_uniform(w1, D, -0.1f, 0.1f);
    fill_uniform(b1, D, -0.5f, 0.5f);
    fill_uniform(w2, D, -0.1f, 0.1f);
    fill_uniform(b2, D, -0.5f, 0.5f);
    poison(x1, n), poison(x2, n), poison(s1, B), poison(s2, B);
    rec_cross_forward(B, D, x0, x0, w1, b1, x1, s1);
    rec_cross_forward(B, D, x0, x1, w2, b2, x2, s2);
    memcpy(g0, prior, n * 4);
    float *g1 = falloc(n);
    poison(g1, n), poison(dw1, D), poison(db1, D), poison(dw2, D), poison(db2, D);
    rec_cross_backward(B, D, x0, x1, w2, s2, r, g0, g1, dw2, db2);
    rec_cross_backward(B, D, x0, x0, w1, s1, g1, g0, g1, dw1, db1);
    for (size_t i = 0; i < n; i++) g0[i] += g1[i];

    double *v[2][7]; /* [signed, absolute][x0, w1, b1, w2, b2, r, prior] */
    const float *src[7] = {x0, w1, b1, w2, b2, r, prior};
    const size_t len[7] = {n, D, D, D, D, n, n};
    for (int a = 0; a < 2; a++)
        for (int k = 0; k < 7; k++) v[a][k] = to_f64(src[k], len[k], a);
    double *o[2][8]; /* x1, x2, g0, g1, dw1, db1, dw2, db2 */
    for (int a = 0; a < 2; a++) {
        for (int k = 0; k < 4; k++) o[a][k] = dalloc(n);
        for (int k = 4; k < 8; k++) o[a][k] = dalloc(D);
        chain_obj(B, D, v[a][0], v[a][1], v[a][2], v[a][3], v[a][4], v[a][5], o[a][0], o[a][1]);
        memcpy(o[a][2], v[a][6], n * sizeof(double));
        chain_backward_ref(B, D, v[a][0], v[a][1], v[a][3], v[a][5], o[a][0], o[a][2], o[a][3], o[a][4], o[a][5],
                           o[a][6], o[a][7]);
    }
    int bad = count_bad("x2", x2, o[0][1], o[1][1], n, 1e-5) + count_bad("dx0", g0, o[0][2], o[1][2], n, 1e-5) +
              count_bad("dw1", dw1, o[0][4], o[1][4], D, 1e-5) + count_bad("db1", db1, o[0][5], o[1][5], D, 1e-5) +
              count_bad("dw2", dw2, o[0][6], o[1][6], D, 1e-5) + count_bad("db2", db2, o[0][7], o[1][7], D, 1e-5);
    CHECK(bad == 0, "float chain of two cross layers (B %d D %d) vs float64 chain: %d off", B, D, bad);
    for (int a = 0; a < 2; a++) {
        for (int k = 0; k < 7; k++) free(v[a][k]);
        for (int k = 0; k < 8; k++) free(o[a][k]);
    }
    free(x0), free(w1), free(b1), free(w2), free(b2), free(r), free(x1), free(x2), free(s1), free(s2), free(prior);
    free(g0), free(g1), free(dw1), free(db1), free(dw2), free(db2);
}

/* ---- factorization machine ------------------------------------------------------------------- */

static double fm_obj(int B, int F, int E, const double *emb, const double *r, double *out) {
    rec_fm_forward_ref(B, F, E, emb, out);
    double s = 0;
    for (int b = 0; b < B; b++) s += r[b] * out[b];
    return s;
}

static void fm_case(int B, int F, int E) {
    const size_t n = (size_t)B * F * E;
    float *emb = falloc(n), *out = falloc(B), *dout = falloc(B), *prior = falloc(n), *demb = falloc(n);
    fill_uniform(emb, n, -1, 1);
    fill_uniform(dout, B, -1, 1);
    fill_uniform(prior, n, -1, 1);
    poison(out, B);
    rec_fm_forward(B, F, E, emb, out);
    memcpy(demb, prior, n * sizeof(float));
    rec_fm_backward(B, F, E, emb, dout, demb);

    double *ed = to_f64(emb, n, 0), *gd = to_f64(dout, B, 0), *pd = to_f64(prior, n, 0);
    double *outr = dalloc(B), *outS = dalloc(B), *pair = dalloc(B), *der = to_f64(prior, n, 0), *deS = dalloc(n);
    rec_fm_forward_ref(B, F, E, ed, outr);
    rec_fm_backward_ref(B, F, E, ed, gd, der);
    for (int b = 0; b < B; b++) {
        const double *v = ed + (size_t)b * F * E;  /* (F, E) */
        /* The definition: sum over pairs f < f' of <v_f, v_f'>. */
        pair[b] = 0;
        for (int f = 0; f < F; f++)
            for (int f2 = f + 1; f2 < F; f2++)
                for (int e = 0; e < E; e++) pair[b] += v[(size_t)f * E + e] * v[(size_t)f2 * E + e];
        /* The bounds of the file comment. */
        outS[b] = 0;
        for (int e = 0; e < E; e++) {
            double sa = 0, sq = 0;
            for (int f = 0; f < F; f++) sa += fabs(v[(size_t)f * E + e]), sq += v[(size_t)f * E + e] * v[(size_t)f * E + e];
            outS[b] += 0.5 * (sa * sa + sq);
            for (int f = 0; f < F; f++) {
                const size_t i = (size_t)b * F * E + (size_t)f * E + e;
                deS[i] = fabs(pd[i]) + fabs(gd[b]) * (sa + fabs(ed[i]));
            }
        }
    }
    int bad = count_bad("out", out, outr, outS, B, 1e-5);
    CHECK(bad == 0, "fm forward B %d F %d E %d vs reference: %d off", B, F, E, bad);
    bad = count_bad("out(pairwise)", out, pair, outS, B, 1e-5);
    CHECK(bad == 0, "fm forward B %d F %d E %d vs pairwise sum over f < f': %d off", B, F, E, bad);
    int rbad = 0;
    for (int b = 0; b < B; b++) rbad += !(fabs(outr[b] - pair[b]) <= 1e-13 * outS[b]);
    CHECK(rbad == 0, "fm reference B %d F %d E %d vs pairwise sum: %d off", B, F, E, rbad);
    bad = count_bad("demb", demb, der, deS, n, 1e-5);
    CHECK(bad == 0, "fm backward B %d F %d E %d vs reference (demb = prior + increment): %d off", B, F, E, bad);

    /* Finite differences of the reference (quadratic: central differences exact up to
     * rounding), demb checked as its increment over the prior. */
    if (n <= 600) {
        double fp, fm, h = 1e-6;
        int fbad = 0;
        for (size_t i = 0; i < n; i++) fbad += !fd_close(der[i] - pd[i], FD(fm_obj(B, F, E, ed, gd, outr), ed, i, h));
        CHECK(fbad == 0, "fm reference B %d F %d E %d vs finite differences: %d off", B, F, E, fbad);
    }
    free(emb), free(out), free(dout), free(prior), free(demb);
    free(ed), free(gd), free(pd), free(outr), free(outS), free(pair), free(der), free(deS);
}

static void test_fm(void) {
    static const int shapes[][3] = {{1, 1, 1}, {2, 1, 5},  {3, 2, 1},   {1, 26, 1},  {4, 3, 7},  {5, 26, 16},
                                    {3, 4, 64}, {2, 3, 65}, {2, 2, 130}, {7, 13, 33}, {2, 0, 3},  {64, 26, 16},
                                    {128, 26, 64}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) fm_case(shapes[i][0], shapes[i][1], shapes[i][2]);

    /* By hand: F 3, E 2, v = (1, 2), (3, -1), (0.5, 4): pairs (1*3 + 2*-1) + (0.5 + 8) +
     * (1.5 - 4) = 1 + 8.5 - 2.5 = 7. Sums (4.5, 5): demb_f += 2 (sum - v_f). */
    float v[6] = {1, 2, 3, -1, 0.5f, 4}, out[1], g[1] = {2}, d[6] = {1, 1, 1, 1, 1, 1};
    rec_fm_forward(1, 3, 2, v, out);
    CHECK(out[0] == 7.0f, "fm hand case: %g (want 7)", out[0]);
    rec_fm_backward(1, 3, 2, v, g, d);
    const float want[6] = {1 + 2 * 3.5f, 1 + 2 * 3, 1 + 2 * 1.5f, 1 + 2 * 6, 1 + 2 * 4, 1 + 2 * 1};
    CHECK(memcmp(d, want, sizeof want) == 0, "fm hand case backward: %g %g %g %g %g %g", d[0], d[1], d[2], d[3], d[4],
          d[5]);
}

int main(void) {
    rec_rng_seed(&g_rng, 2025, 7);
    test_cross();
    test_cross_chain();
    test_fm();
    return check_report();
}
