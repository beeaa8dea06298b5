/* rectrain — embedding tables, pooled embedding bags and their sparse optimizers.
 *
 * A rec_embed holds the F tables a model looks its sparse features up in: table f is a flat
 * row-major (R_f, E_f) float block, all tables in ONE allocation (STYLE.md), and the optimizer
 * state likewise in one block (Adagrad: (R_f, E_f) per table; row-wise Adagrad: (R_f) per
 * table; SGD: none).
 *
 * Forward pools the rows each bag names: bag b of feature f is the ids
 * batch->sparse[f].indices[offsets[b] .. offsets[b+1]) (with optional per-id weights):
 *   SUM:  out = sum_k w_k T[id_k]          MEAN: out = (sum_k w_k T[id_k]) / L   (L = bag size)
 * (w_k = 1 when the batch has no weights). An empty bag gives zeros and receives no gradient.
 * The output of one row is the features' vectors side by side:
 *   out (B, sum_f E_f), feature f at column col_f = E_0 + ... + E_{f-1};
 * with equal dims that is (B, F, E), the layout the interaction layers read.
 *
 * Backward + update (one pass, no dense gradient table): the gradient of the row id from
 * bag b is g_b * w_k (SUM) or g_b * w_k / L (MEAN), g_b = dout's slice for (b, f). The
 * gradients of duplicate ids within the batch are summed first (in order of their position in
 * the batch, so the result does not depend on the thread count), and then the optimizer
 * updates each touched row once:
 *   SGD:              T[r] -= lr * g
 *   ADAGRAD:          S[r] += g*g (element-wise);  T[r] -= lr * g / (sqrt(S[r]) + eps)
 *                     (torch.optim.Adagrad on a sparse gradient, lr_decay 0)
 *   ROWWISE_ADAGRAD:  s[r] += mean_e(g_e^2);       T[r] -= lr * g / (sqrt(s[r]) + eps)
 *                     (FBGEMM's EXACT_ROWWISE_ADAGRAD)
 * Rows that no bag touched are left exactly as they were (their state too).
 *
 * Ids are always checked: an id outside [0, R_f) fails with REC_EINVAL naming the feature,
 * the batch row and the id. Threads: OpenMP, `threads` given at init (0 = OpenMP default);
 * results are bitwise identical for a given thread count (and in fact for any count).
 *
 * Shape letters: see batch.h (B batch, F features, E dim, R rows, L bag size).
 */
#ifndef RECTRAIN_EMBED_H
#define RECTRAIN_EMBED_H

#include <stddef.h>
#include <stdint.h>

#include "rectrain/batch.h"
#include "rectrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rec_pooling { REC_POOL_SUM = 0, REC_POOL_MEAN = 1 } rec_pooling;

typedef enum rec_sparse_opt_kind {
    REC_SPARSE_SGD = 0,
    REC_SPARSE_ADAGRAD = 1,
    REC_SPARSE_ROWWISE_ADAGRAD = 2
} rec_sparse_opt_kind;

typedef struct rec_sparse_opt_config {
    rec_sparse_opt_kind kind;
    float lr;         /* base learning rate, > 0; each update is given lr * schedule scale */
    float eps;        /* Adagrad kinds, >= 0 (defaults: ADAGRAD 1e-10 as torch, ROWWISE 1e-8 as FBGEMM) */
    float init_acc;   /* initial value of the Adagrad state, >= 0 (default 0) */
} rec_sparse_opt_config;

/* The defaults for `kind` at learning rate lr. */
rec_sparse_opt_config rec_sparse_opt_defaults(rec_sparse_opt_kind kind, float lr);

typedef struct rec_embed_config {
    int n_tables;                 /* F >= 0 */
    const int64_t *rows;          /* (F) R_f >= 1 */
    const int *dims;              /* (F) E_f >= 1 */
    rec_pooling pooling;
    rec_sparse_opt_config opt;
    int max_batch;                /* largest B given to forward/backward */
    int threads;                  /* OpenMP threads, 0 = OpenMP default */
    uint64_t seed;                /* table f row r drawn from rec_rng(seed, stream = f) */
} rec_embed_config;

typedef struct rec_embed rec_embed;

/* Validates the config (REC_EINVAL naming the bad field), allocates the tables and the
 * optimizer state, and initialises table f as facebookresearch/dlrm does:
 * uniform(-sqrt(1/R_f), sqrt(1/R_f)). On error *out is NULL and nothing leaks. */
rec_status rec_embed_init(rec_embed **out, const rec_embed_config *cfg);
void rec_embed_free(rec_embed *e);

int rec_embed_tables(const rec_embed *e);              /* F */
int64_t rec_embed_rows(const rec_embed *e, int f);     /* R_f */
int rec_embed_dim(const rec_embed *e, int f);          /* E_f */
int rec_embed_out_width(const rec_embed *e);           /* sum_f E_f */
float *rec_embed_table(rec_embed *e, int f);           /* (R_f, E_f) */
/* Optimizer state of table f: (R_f, E_f) for ADAGRAD, (R_f) for ROWWISE_ADAGRAD, NULL for SGD. */
float *rec_embed_state(rec_embed *e, int f);
size_t rec_embed_state_len(const rec_embed *e, int f); /* floats in the state of table f */

/* out (B, sum_f E_f) is OVERWRITTEN with the pooled rows of batch features
 * first_feature .. first_feature + F - 1 (a model whose batch carries more sparse features
 * than it has tables uses a window; usually 0). B = b->n <= max_batch. */
rec_status rec_embed_forward(rec_embed *e, const rec_batch *b, int first_feature, float *out);

/* Backward of the pooling plus the optimizer step, in one pass, for the same batch and window
 * as the last forward: dout (B, sum_f E_f). lr is this step's learning rate. */
rec_status rec_embed_backward_update(rec_embed *e, const rec_batch *b, int first_feature,
                                     const float *dout, float lr);

/* ---- scalar references (embed_ref.c), float64, plain loops ------------------------------- */

/* out (B, sum_f E_f) from tables given as float64 copies tables[f] (R_f, E_f). */
void rec_embed_forward_ref(int F, const int64_t *rows, const int *dims, rec_pooling pooling,
                           const rec_batch *b, int first_feature, const double *const *tables,
                           double *out);
/* Dense gradient of every table: grads[f] (R_f, E_f) OVERWRITTEN from dout (B, sum_f E_f).
 * Duplicates simply accumulate. What the optimizer sees before its update. */
void rec_embed_grad_ref(int F, const int64_t *rows, const int *dims, rec_pooling pooling,
                        const rec_batch *b, int first_feature, const double *dout,
                        double *const *grads);
/* Applies the optimizer to tables[f] and state[f] (same layouts as rec_embed_state) from
 * dense gradients grads[f], touching only rows whose `touched[f][r]` is non-zero. */
void rec_embed_update_ref(int F, const int64_t *rows, const int *dims,
                          const rec_sparse_opt_config *opt, float lr, const double *const *grads,
                          const uint8_t *const *touched, double *const *tables,
                          double *const *state);

#ifdef __cplusplus
}
#endif
#endif
