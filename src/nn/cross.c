/* DCN cross layer (nn.h): Wang, Fu, Fu, Wang, "Deep & Cross Network for Ad Click
 * Predictions", ADKDD 2017, §2.2, eq. 3:
 *     x_{l+1} = x0 x_l^T w_l + b_l + x_l,
 * i.e. per row y = x0 * s + b + x with the scalar s = x . w (the rank-one outer product is
 * never formed). Backward (dy the gradient of y, ds = dy . x0 per row):
 *     dx0 += dy * s,  dx = dy + ds w,  dw = sum_b ds_b x_b,  db = sum_b dy_b.
 * dx0 is ACCUMULATED because x0 feeds every cross layer of the stack (and the deep network);
 * everything else is overwritten.
 *
 * The float path is per row (rows outer, D inner): every row of x0, x, dy (D <= ~1300 floats,
 * ~5 KB each) stays in L1 between the passes over it, and each inner loop is a stride-1 loop
 * that gcc vectorises (restrict-qualified helpers below). Dot products keep 16 partial sums
 * in a fixed lane order, so they vectorise without -ffast-math and give the same bits on
 * every run; dw and db are summed over the batch in row order, in float. No OpenMP: the model
 * calls these on its own thread. Cost at B 2048, D 1261: ~5 MFLOP forward, ~10 backward.
 *
 * The float64 references below are the definitions as plain loops. */
#include <stddef.h>

#include "rectrain/nn.h"

enum { LANES = 16 };  /* two AVX2 registers of partial sums */

/* a . b over n floats: 16 interleaved partial sums (lane j takes elements i = j mod 16),
 * combined by a fixed pairwise tree, then the tail. Deterministic for a given n. */
static inline float dot16(int n, const float *restrict a, const float *restrict b) {
    float acc[LANES] = {0};
    int i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int j = 0; j < LANES; j++) acc[j] += a[i + j] * b[i + j];
    for (int w = LANES / 2; w >= 1; w /= 2)
        for (int j = 0; j < w; j++) acc[j] += acc[j + w];
    float t = acc[0];
    for (; i < n; i++) t += a[i] * b[i];
    return t;
}

/* y (n) += a * x (n). */
static inline void axpy(int n, float a, const float *restrict x, float *restrict y) {
    for (int i = 0; i < n; i++) y[i] += a * x[i];
}

/* y (n) += x (n). */
static inline void acc_add(int n, const float *restrict x, float *restrict y) {
    for (int i = 0; i < n; i++) y[i] += x[i];
}

/* z (n) = x (n) + a * w (n), z distinct from x and w. */
static inline void add_scaled(int n, const float *restrict x, float a, const float *restrict w,
                              float *restrict z) {
    for (int i = 0; i < n; i++) z[i] = x[i] + a * w[i];
}

/* y (B, D) = x0 * s + b + x with s (B) = x . w per row; writes (overwrites) both y and s (s is
 * kept by the caller for backward). x0, x (B, D); w, b (D). y must not overlap the inputs. */
void rec_cross_forward(int B, int D, const float *x0, const float *x, const float *w,
                       const float *b, float *y, float *s) {
    for (int r = 0; r < B; r++) {
        const float *x0r = x0 + (size_t)r * D, *xr = x + (size_t)r * D;
        float *restrict yr = y + (size_t)r * D;
        const float sr = dot16(D, xr, w);
        s[r] = sr;
        for (int d = 0; d < D; d++) yr[d] = x0r[d] * sr + b[d] + xr[d];
    }
}

/* Backward of rec_cross_forward from dy (B, D), with s (B) as the forward saved it:
 *   dx0 (B, D) += dy * s         ACCUMULATED
 *   dx  (B, D)  = dy + ds w      overwritten; dx == dy (in place) is allowed
 *   dw  (D)     = sum_b ds_b x_b overwritten, summed in float in row order
 *   db  (D)     = sum_b dy_b     overwritten, likewise
 * with ds_b = dy_b . x0_b. Each row reads everything it needs from dy before its dx row is
 * written, which is what makes dx == dy safe; any other overlap is not allowed. */
void rec_cross_backward(int B, int D, const float *x0, const float *x, const float *w,
                        const float *s, const float *dy, float *dx0, float *dx, float *dw,
                        float *db) {
    for (int d = 0; d < D; d++) dw[d] = 0.0f, db[d] = 0.0f;
    for (int r = 0; r < B; r++) {
        const size_t o = (size_t)r * D;
        const float *g = dy + o;
        const float ds = dot16(D, g, x0 + o);
        acc_add(D, g, db);
        axpy(D, ds, x + o, dw);
        axpy(D, s[r], g, dx0 + o);
        if (dx + o == g)
            axpy(D, ds, w, dx + o); /* in place: dx = dy + ds w */
        else
            add_scaled(D, g, ds, w, dx + o);
    }
}

/* float64 reference of the forward: the definition, one row at a time. */
void rec_cross_forward_ref(int B, int D, const double *x0, const double *x, const double *w,
                           const double *b, double *y) {
    for (int r = 0; r < B; r++) {
        const size_t o = (size_t)r * D;
        double s = 0.0;
        for (int d = 0; d < D; d++) s += x[o + d] * w[d];
        for (int d = 0; d < D; d++) y[o + d] = x0[o + d] * s + b[d] + x[o + d];
    }
}

/* float64 reference of the backward, same contract as rec_cross_backward (dx0 accumulated,
 * the rest overwritten, dx == dy allowed); s is recomputed from x and w. */
void rec_cross_backward_ref(int B, int D, const double *x0, const double *x, const double *w,
                            const double *dy, double *dx0, double *dx, double *dw, double *db) {
    for (int d = 0; d < D; d++) dw[d] = 0.0, db[d] = 0.0;
    for (int r = 0; r < B; r++) {
        const size_t o = (size_t)r * D;
        double s = 0.0, ds = 0.0;
        for (int d = 0; d < D; d++) s += x[o + d] * w[d];
        for (int d = 0; d < D; d++) ds += dy[o + d] * x0[o + d];
        for (int d = 0; d < D; d++) {
            const double g = dy[o + d];  /* read before dx[o + d] may overwrite it */
            dx0[o + d] += g * s;
            db[d] += g;
            dw[d] += ds * x[o + d];
            dx[o + d] = g + ds * w[d];
        }
    }
}
