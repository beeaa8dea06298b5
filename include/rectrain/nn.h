/* rectrain — the dense side of DLRM training on the CPU: fully connected layers (oneDNN),
 * MLPs with flat parameter / gradient blocks, DLRM's feature interaction, the loss, and the
 * dense optimizers.
 *
 * Glossary of shape letters (STYLE.md): B batch, E embedding dim (= width of the bottom MLP's
 * output), F sparse features, H hidden width, In / Out a layer's input / output width,
 * D width of the interaction's output, P number of dense parameters.
 * All matrices are row-major float32 unless a name ends in _ref (float64 references).
 *
 * Threads: Debian's oneDNN 2.6.3 is built with DNNL_CPU_RUNTIME = DNNL_RUNTIME_OMP
 * (dnnl_config.h), so a primitive runs on the OpenMP team of the thread that executes it.
 * A rec_dnn fixes the size of that team: every oneDNN call made through it sets the calling
 * thread's omp_set_num_threads(n) for the call and restores the previous value afterwards,
 * so the caller's own OpenMP setting is left as it was. n = 0 means "whatever OpenMP would
 * use" (OMP_NUM_THREADS or all CPUs).
 *
 * Gradients are OVERWRITTEN by every backward in this header, never accumulated.
 */
#ifndef RECTRAIN_NN_H
#define RECTRAIN_NN_H

#include <stddef.h>
#include <stdint.h>

#include "rectrain/core.h"
#include "rectrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- precision ---------------------------------------------------------------------------
 * REC_PRECISION_BF16 is mixed precision as production CPUs and GPUs train: the products of
 * the MLPs (and of DLRM's dot interaction) take bfloat16 operands (layer inputs, weights and
 * output gradients, rounded to nearest, ties to even) and accumulate in fp32; parameters,
 * gradients, optimizer state, biases, the loss and every activation buffer stay fp32 (the
 * master copies). bf16 keeps fp32's exponent and 8 significant bits: unit roundoff 2^-8. */
typedef enum rec_precision { REC_PRECISION_FP32 = 0, REC_PRECISION_BF16 = 1 } rec_precision;

/* "fp32" / "bf16". */
const char *rec_precision_name(rec_precision p);

/* (rec_bf16_bits and rec_bf16_to_float, the scalar conversions, are in core.h.) */
/* out (n) = x rounded to bf16, as bf16 bits (pack) or as the fp32 value (round; out may be x). */
void rec_bf16_pack(const float *x, size_t n, uint16_t *out);
void rec_bf16_round(const float *x, size_t n, float *out);
/* Reference rounding of a float64 value in fp32's range to the nearest bf16 value (ties to
 * even), from the definition (frexp / ldexp), for tests of the fast paths. */
double rec_bf16_ref(double v);

/* ---- oneDNN context ----------------------------------------------------------------------
 * One CPU engine and one stream, and the thread count the primitives run with. Layers keep a
 * pointer to it; free it after them. Not safe to use from two threads at once (make one per
 * thread). */
typedef struct rec_dnn rec_dnn;

rec_status rec_dnn_init(rec_dnn **out, int n_threads);
void rec_dnn_free(rec_dnn *d);
int rec_dnn_threads(const rec_dnn *d);
/* bf16 products. kernels: oneDNN has a bf16 matmul on this CPU (AVX512-BF16 or AMX; probed at
 * init). native: bf16 layers use it, by default with AMX only, where it is 3-5x fp32; without
 * AMX it is slower than fp32 (0.6x measured on AVX512-BF16), so layers are emulated: their
 * operands are rounded to bf16 values kept in fp32 and multiplied by the fp32 kernels, the same
 * products accumulated in fp32, at fp32 speed. set_bf16_native(d, 1) uses the kernels wherever
 * they exist, 0 forces emulation (tests compare both). */
int rec_dnn_bf16_kernels(const rec_dnn *d);
int rec_dnn_bf16_native(const rec_dnn *d);
void rec_dnn_set_bf16_native(rec_dnn *d, int native);
/* The instruction set oneDNN dispatches to ("avx2", "avx512_core_amx", ...). */
const char *rec_dnn_isa(void);

/* C = A (M, K) x B (K, N), row-major, through oneDNN's sgemm on d's threads: the machine's
 * measured GEMM ceiling for benchmarks. */
rec_status rec_dnn_sgemm(rec_dnn *d, int64_t M, int64_t N, int64_t K, const float *A,
                         const float *Bm, float *C);

/* GFLOP/s of oneDNN's matmul primitive on (M, K) x (K, N) operands of precision p with fp32
 * output, the median of `reps` timed runs after two warm-ups: the ceiling a layer of that
 * shape can reach. bf16 without kernels (rec_dnn_bf16_kernels): REC_EUNSUPPORTED. */
rec_status rec_dnn_matmul_gflops(rec_dnn *d, rec_precision p, int M, int N, int K, int reps,
                                 double *gflops);

/* ---- linear layer: y = x W^T + b, optionally followed by ReLU ----------------------------
 * The layer object holds only shapes, cached oneDNN primitives (one set per batch size seen,
 * created on first use: creation costs milliseconds, execution microseconds) and a
 * (max_batch, Out) workspace for the ReLU-masked output gradient; parameters are the
 * caller's (an MLP passes views into its flat block). */
typedef struct rec_linear rec_linear;

rec_status rec_linear_init(rec_linear **out, rec_dnn *d, int in, int out_dim, int relu,
                           int max_batch, rec_precision prec);
void rec_linear_free(rec_linear *l);

/* y (B, Out) = act(x (B, In) W^T + b), W (Out, In), b (Out). 1 <= B <= max_batch. */
rec_status rec_linear_forward(rec_linear *l, int B, const float *x, const float *W,
                              const float *b, float *y);

/* Given dy (B, Out) and the forward's x (B, In), W and y (B, Out; only read for the ReLU
 * mask dy' = dy * (y > 0)), overwrites dW (Out, In) = dy'^T x, db (Out) = sum_b dy',
 * and, unless dx is NULL, dx (B, In) = dy' W.
 * bf16: x, W and dy' enter the products rounded to bf16 (the forward's x and W as the forward
 * rounded them), db sums dy' in fp32. */
rec_status rec_linear_backward(rec_linear *l, int B, const float *x, const float *W,
                               const float *y, const float *dy, float *dx, float *dW, float *db);

/* Scalar references in float64 (linear_ref.c): plain loops, same contract as above. */
void rec_linear_forward_ref(int B, int in, int out, int relu, const double *x, const double *W,
                            const double *b, double *y);
void rec_linear_backward_ref(int B, int in, int out, int relu, const double *x,
                             const double *W, const double *y, const double *dy, double *dx,
                             double *dW, double *db);

/* ---- MLP: a stack of linear layers ---------------------------------------------------------
 * sizes[0..n_sizes) = {In, H1, ..., Out} (e.g. 13-512-256-64-16). Every layer but the last
 * has a ReLU; the last has one when last_relu (DLRM's bottom MLP) and is linear otherwise
 * (the top MLP, whose logit goes to the loss).
 *
 * Parameters live in ONE flat block of P floats: layer 0's W (H1, In), then its b (H1), then
 * layer 1's W, b, ... with no padding, so P = sum_l (in_l * out_l + out_l). Gradients are a
 * second block with the same layout, so zeroing them is one memset and a dense optimizer is
 * one loop over P. Init as facebookresearch/dlrm: W ~ N(0, sqrt(2 / (in + out))),
 * b ~ N(0, sqrt(1 / out)), drawn from rec_rng(seed, stream = layer index). */
typedef struct rec_mlp rec_mlp;

rec_status rec_mlp_init(rec_mlp **out, rec_dnn *d, const int *sizes, int n_sizes,
                        int last_relu, int max_batch, rec_precision prec, uint64_t seed);
/* P for the given sizes (0 when they are invalid). */
size_t rec_mlp_param_count(const int *sizes, int n_sizes);
/* As rec_mlp_init, but the parameters and gradients are views of P floats each inside the
 * caller's blocks (a model keeps all its dense parameters in one block): `params` is
 * initialised, `grads` is written by backward. The MLP never frees them. */
rec_status rec_mlp_init_view(rec_mlp **out, rec_dnn *d, const int *sizes, int n_sizes,
                             int last_relu, int max_batch, rec_precision prec, uint64_t seed,
                             float *params, float *grads);
void rec_mlp_free(rec_mlp *m);

int rec_mlp_layers(const rec_mlp *m);
int rec_mlp_last_relu(const rec_mlp *m);
rec_precision rec_mlp_precision(const rec_mlp *m);
/* Matmul FLOPs per sample (2 per MAC): *fwd of the forward, *bwd of the backward (weight
 * gradients, and data gradients except into the input when input_grad is 0). */
void rec_mlp_flops(const rec_mlp *m, int input_grad, double *fwd, double *bwd);
int rec_mlp_in(const rec_mlp *m);
int rec_mlp_out(const rec_mlp *m);
int rec_mlp_size(const rec_mlp *m, int i);  /* sizes[i], 0 <= i <= layers */
size_t rec_mlp_n_params(const rec_mlp *m);  /* P */
float *rec_mlp_params(rec_mlp *m);          /* (P) */
float *rec_mlp_grads(rec_mlp *m);           /* (P) same layout */
/* Views into the blocks: W (out_l, in_l), b (out_l). */
float *rec_mlp_weight(rec_mlp *m, int layer);
float *rec_mlp_bias(rec_mlp *m, int layer);
float *rec_mlp_grad_weight(rec_mlp *m, int layer);
float *rec_mlp_grad_bias(rec_mlp *m, int layer);

/* Runs the stack on x (B, In) and returns the output (B, Out) in *y, a buffer owned by the
 * MLP and valid until the next forward. Keeps every layer's output for backward; x must stay
 * unchanged until the matching backward. */
rec_status rec_mlp_forward(rec_mlp *m, int B, const float *x, const float **y);

/* Backward of the last forward (same B and x): overwrites the gradient block from dy (B, Out),
 * and dx (B, In) unless dx is NULL (the bottom MLP's dense input needs no gradient). */
rec_status rec_mlp_backward(rec_mlp *m, int B, const float *x, const float *dy, float *dx);

/* ---- DLRM feature interaction --------------------------------------------------------------
 * x (B, E) is the bottom MLP's output, emb (B, F, E) the pooled embeddings.
 *  DOT (DLRM, Naumov et al. 2019 §2.2): T = [x; emb] (B, F+1, E), Z = T T^T (B, F+1, F+1);
 *      out = concat(x, Z[i][j] for i in 0..F, j < i (j <= i with self_interaction)), in the
 *      row-major order of dlrm_s_pytorch.py's li/lj lists.
 *      D = E + (F+1)F/2, plus F+1 with self_interaction.
 *  CAT: out = concat(x, emb flattened), D = E + F E. */
typedef enum rec_interact_kind { REC_INTERACT_DOT = 0, REC_INTERACT_CAT = 1 } rec_interact_kind;

int rec_interact_dim(rec_interact_kind kind, int self_interaction, int F, int E);  /* D */

/* out (B, D). Overwritten. prec BF16: the dot products take x and emb rounded to bf16 (fp32
 * sums); CAT has no products. */
rec_status rec_interact_forward(rec_interact_kind kind, int self_interaction, rec_precision prec, int B, int F,
                                int E, const float *x, const float *emb, float *out);
/* From dout (B, D): overwrites dx (B, E) and demb (B, F, E). BF16: the products take dout's
 * dot-product gradients, x and emb rounded to bf16. */
rec_status rec_interact_backward(rec_interact_kind kind, int self_interaction, rec_precision prec, int B, int F,
                                 int E, const float *x, const float *emb, const float *dout,
                                 float *dx, float *demb);
/* float64 references of the two. */
void rec_interact_forward_ref(rec_interact_kind kind, int self_interaction, int B, int F, int E,
                              const double *x, const double *emb, double *out);
void rec_interact_backward_ref(rec_interact_kind kind, int self_interaction, int B, int F,
                               int E, const double *x, const double *emb, const double *dout,
                               double *dx, double *demb);

/* ---- loss: sigmoid + binary cross-entropy on logits, mean over the batch --------------------
 * loss = (1/B) sum_b [max(z,0) - z y + log1p(exp(-|z|))], the stable form of
 * -y log s(z) - (1-y) log(1 - s(z)); dlogits (B) = (sigmoid(z) - y) / B, overwritten unless
 * NULL. logits (B), labels (B) in [0, 1]. Accumulates in double. */
rec_status rec_bce_forward_backward(int B, const float *logits, const float *labels,
                                    double *loss, float *dlogits);
double rec_bce_ref(int B, const double *logits, const double *labels, double *dlogits);
/* One rank's slice of a batch split over ranks (mpirun; the cache trainers): the sum of its n
 * rows' losses, which the ranks add and divide by global_n (the batch's rows), and dlogits (n)
 * the gradient of the global batch's mean, (s(z) - y) / global_n. Labels are not checked (the
 * loader's are 0 or 1). */
double rec_bce_slice_sum(int64_t n, const float *logits, const float *labels, double global_n, float *dlogits);

/* ---- dense optimizers over a flat parameter block -------------------------------------------
 * PyTorch semantics (torch.optim 1.13, no weight decay):
 *  SGD:     p -= lr g
 *  ADAGRAD: s += g^2; p -= lr g / (sqrt(s) + eps)                      (eps default 1e-10)
 *  ADAM:    m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; t += 1;
 *           p -= (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps)
 *                                         (betas default (0.9, 0.999), eps default 1e-8)
 * State (s, or m and v) is one zeroed block per kind, same layout as the parameters. */
typedef enum rec_opt_kind { REC_OPT_SGD = 0, REC_OPT_ADAGRAD = 1, REC_OPT_ADAM = 2 } rec_opt_kind;

typedef struct rec_dense_opt_config {
    rec_opt_kind kind;
    float lr;     /* > 0 */
    float beta1;  /* Adam, [0, 1) */
    float beta2;  /* Adam, [0, 1) */
    float eps;    /* Adagrad / Adam, >= 0 */
} rec_dense_opt_config;

/* The PyTorch defaults for `kind` at learning rate lr. */
rec_dense_opt_config rec_dense_opt_defaults(rec_opt_kind kind, float lr);

typedef struct rec_dense_opt rec_dense_opt;

/* n = P, the length of the blocks step() will be given. REC_EINVAL on a bad config. */
rec_status rec_dense_opt_init(rec_dense_opt **out, const rec_dense_opt_config *cfg, size_t n);
void rec_dense_opt_free(rec_dense_opt *o);
/* One update of params (P) from grads (P). n must equal the init's. */
rec_status rec_dense_opt_step(rec_dense_opt *o, float *params, const float *grads, size_t n);
int64_t rec_dense_opt_steps(const rec_dense_opt *o);
/* Sets the steps taken (Adam's bias correction; a resumed run restores it). */
void rec_dense_opt_set_steps(rec_dense_opt *o, int64_t t);
/* Sets the learning rate of the following steps (a schedule changes it every step). */
void rec_dense_opt_set_lr(rec_dense_opt *o, float lr);
/* State block k (P floats) or NULL: ADAGRAD k = 0 the sum of squares; ADAM k = 0 the first
 * moment, k = 1 the second. For checkpoints. */
float *rec_dense_opt_state(rec_dense_opt *o, int k);

/* ---- DCN cross layer (Wang et al. 2017, §2.2, eq. 3) ---------------------------------------
 * y (B, D) = x0 * s + b + x, s (B) = x . w, with x0, x (B, D) and w, b (D). Forward saves s
 * for backward. Backward from dy (B, D): ds = dy . x0 (per row);
 *   dx0 (B, D) += dy * s           ACCUMULATED (x0 feeds every cross layer and the deep net)
 *   dx  (B, D)  = dy + ds w        overwritten (may alias dy)
 *   dw  (D)     = sum_b ds_b x_b   overwritten
 *   db  (D)     = sum_b dy_b       overwritten */
void rec_cross_forward(int B, int D, const float *x0, const float *x, const float *w,
                       const float *b, float *y, float *s);
void rec_cross_backward(int B, int D, const float *x0, const float *x, const float *w,
                        const float *s, const float *dy, float *dx0, float *dx, float *dw,
                        float *db);
void rec_cross_forward_ref(int B, int D, const double *x0, const double *x, const double *w,
                           const double *b, double *y);
void rec_cross_backward_ref(int B, int D, const double *x0, const double *x, const double *w,
                            const double *dy, double *dx0, double *dx, double *dw, double *db);

/* ---- factorization machine, second order (DeepFM, Guo et al. 2017, eq. 2; Rendle 2010) -----
 * out (B) = 1/2 sum_e [ (sum_f v_fe)^2 - sum_f v_fe^2 ] over emb (B, F, E), overwritten.
 * Backward: demb (B, F, E) += dout_b (sum_f' v_f'e - v_fe)   ACCUMULATED. */
void rec_fm_forward(int B, int F, int E, const float *emb, float *out);
void rec_fm_backward(int B, int F, int E, const float *emb, const float *dout, float *demb);
void rec_fm_forward_ref(int B, int F, int E, const double *emb, double *out);
void rec_fm_backward_ref(int B, int F, int E, const double *emb, const double *dout,
                         double *demb);

#ifdef __cplusplus
}
#endif
#endif
