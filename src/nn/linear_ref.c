/* Scalar float64 reference of the linear layer (nn.h): the plain loops that the oneDNN path in
 * linear.c is tested against, and that the finite-difference checks validate in turn. No
 * blocking, no intrinsics; written to be read against the formulas. */
#include "rectrain/nn.h"

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
