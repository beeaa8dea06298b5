/* float64 scalar references of the embedding bag and its sparse optimizers (embed.h), written
 * as the definitions read, to test forward.c and backward.c against: a dense gradient table
 * instead of the sort-and-sum, and the optimizer formulas applied per element. Ids are
 * assumed valid (the fast path is what checks them). */
#include <math.h>

#include "rectrain/embed.h"

/* out (B, sum_f E_f) = for each bag, sum_k w_k T[id_k] (divided by L for MEAN; 0 when empty). */
void rec_embed_forward_ref(int F, const int64_t *rows, const int *dims, rec_pooling pooling,
                           const rec_batch *b, int first_feature, const double *const *tables,
                           double *out) {
    int W = 0;
    for (int f = 0; f < F; f++) W += dims[f];
    for (int64_t r = 0; r < b->n; r++) {
        int col = 0;
        for (int f = 0; f < F; f++) {
            const rec_jagged *j = &b->sparse[first_feature + f];
            const int E = dims[f];
            const int64_t lo = j->offsets[r], hi = j->offsets[r + 1];
            double *o = out + (size_t)r * W + col;
            for (int c = 0; c < E; c++) {
                double s = 0.0;
                for (int64_t k = lo; k < hi; k++) {
                    const double w = j->weights ? (double)j->weights[k] : 1.0;
                    s += w * tables[f][(size_t)rec_jagged_id(j, k) * E + c];
                }
                if (pooling == REC_POOL_MEAN && hi > lo) s /= (double)(hi - lo);
                o[c] = s;
            }
            col += E;
        }
    }
    (void)rows;
}

/* grads[f] (R_f, E_f) = d(sum out * dout)/dT_f: each occurrence of id in bag b adds
 * dout[b, f] * w_k (/ L for MEAN) to its row. Overwritten. */
void rec_embed_grad_ref(int F, const int64_t *rows, const int *dims, rec_pooling pooling,
                        const rec_batch *b, int first_feature, const double *dout,
                        double *const *grads) {
    int W = 0;
    for (int f = 0; f < F; f++) W += dims[f];
    int col = 0;
    for (int f = 0; f < F; f++) {
        const rec_jagged *j = &b->sparse[first_feature + f];
        const int E = dims[f];
        for (size_t i = 0; i < (size_t)rows[f] * E; i++) grads[f][i] = 0.0;
        for (int64_t r = 0; r < b->n; r++) {
            const int64_t lo = j->offsets[r], hi = j->offsets[r + 1];
            for (int64_t k = lo; k < hi; k++) {
                double scale = j->weights ? (double)j->weights[k] : 1.0;
                if (pooling == REC_POOL_MEAN) scale /= (double)(hi - lo);
                for (int c = 0; c < E; c++)
                    grads[f][(size_t)rec_jagged_id(j, k) * E + c] += dout[(size_t)r * W + col + c] * scale;
            }
        }
        col += E;
    }
}

/* One optimizer step on every touched row (formulas in embed.h), in double. */
void rec_embed_update_ref(int F, const int64_t *rows, const int *dims,
                          const rec_sparse_opt_config *opt, float lr, const double *const *grads,
                          const uint8_t *const *touched, double *const *tables,
                          double *const *state) {
    const double eta = lr, eps = opt->eps;
    for (int f = 0; f < F; f++) {
        const int E = dims[f];
        for (int64_t r = 0; r < rows[f]; r++) {
            if (!touched[f][r]) continue;
            const double *g = grads[f] + (size_t)r * E;
            double *p = tables[f] + (size_t)r * E;
            if (opt->kind == REC_SPARSE_SGD) {
                for (int c = 0; c < E; c++) p[c] -= eta * g[c];
            } else if (opt->kind == REC_SPARSE_ADAGRAD) {
                double *s = state[f] + (size_t)r * E;
                for (int c = 0; c < E; c++) {
                    s[c] += g[c] * g[c];
                    p[c] -= eta * g[c] / (sqrt(s[c]) + eps);
                }
            } else {
                double m = 0.0;
                for (int c = 0; c < E; c++) m += g[c] * g[c];
                state[f][r] += m / E;
                for (int c = 0; c < E; c++) p[c] -= eta * g[c] / (sqrt(state[f][r]) + eps);
            }
        }
    }
}
