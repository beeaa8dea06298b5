/* Scalar float64 reference of the linear layer (nn.h): the plain loops that the oneDNN path in
 * linear.c is tested against, and that the finite-difference checks validate in turn. No
 * blocking, no intrinsics; written to be read against the formulas. */
#include <math.h>

#include "rectrain/nn.h"

/* Nearest bf16 value to v, ties to even. bf16 has 8 significant bits, so for |v| in
 * [2^(e-1), 2^e) the values are spaced 2^(e-8); below the smallest normal 2^-126 the spacing
 * stays 2^-133 (subnormals). Beyond the largest finite bf16, (2 - 2^-7) 2^127, lies infinity.
 * nearbyint rounds ties to even in the default rounding mode. */
double rec_bf16_ref(double v) {
    if (isnan(v) || isinf(v) || v == 0.0) return v;
    int e;
    frexp(v, &e);
    const int step = e - 8 < -133 ? -133 : e - 8;
    const double r = ldexp(nearbyint(ldexp(fabs(v), -step)), step);
    const double max = ldexp(2.0 - ldexp(1.0, -7), 127);
    return copysign(r > max ? INFINITY : r, v);
}

/* y (B, Out) = act(x (B, In) W^T + b), act = ReLU when relu. */
void rec_linear_forward_ref(int B, int in, int out, int relu, const double *x, const double *W,
                            const double *b, double *y) {
    for (int i = 0; i < B; i++)
        for (int j = 0; j < out; j++) {
            double s = b[j];
            for (int k = 0; k < in; k++) s += x[(size_t)i * in + k] * W[(size_t)j * in + k];
            y[(size_t)i * out + j] = relu && !(s > 0.0) ? 0.0 : s;
        }
}

/* With g = dy * (y > 0) for ReLU layers (dy otherwise), overwrites
 *   dW (Out, In) = g^T x,  db (Out) = sum over rows of g,  dx (B, In) = g W  (dx may be NULL).
 * ReLU's derivative at exactly 0 is taken as 0, as PyTorch does. */
void rec_linear_backward_ref(int B, int in, int out, int relu, const double *x,
                             const double *W, const double *y, const double *dy, double *dx,
                             double *dW, double *db) {
#define G(i, j) (relu && !(y[(size_t)(i) * out + (j)] > 0.0) ? 0.0 : dy[(size_t)(i) * out + (j)])
    for (int j = 0; j < out; j++) {
        double s = 0.0;
        for (int i = 0; i < B; i++) s += G(i, j);
        db[j] = s;
        for (int k = 0; k < in; k++) {
            double t = 0.0;
            for (int i = 0; i < B; i++) t += G(i, j) * x[(size_t)i * in + k];
            dW[(size_t)j * in + k] = t;
        }
    }
    if (dx)
        for (int i = 0; i < B; i++)
            for (int k = 0; k < in; k++) {
                double t = 0.0;
                for (int j = 0; j < out; j++) t += G(i, j) * W[(size_t)j * in + k];
                dx[(size_t)i * in + k] = t;
            }
#undef G
}
