/* rectrain — models of the DLRM family, their JSON config, and named tensor views.
 *
 * Every model reads a Batch (dense x (B, Dn), F sparse features) and produces one logit per
 * row; the loss is sigmoid + BCE (nn.h). Embedding tables are rec_embed (embed.h) with dim E;
 * DeepFM and Wide&Deep also have first-order tables of dim 1 ("linear"). Definitions (the
 * golden test holds PyTorch to exactly these):
 *
 *  DLRM (Naumov et al. 2019; facebookresearch/dlrm dlrm_s_pytorch.py):
 *      h = bottom(x)                    MLP Dn -> ... -> E, ReLU after every layer
 *      e = emb(batch)                   (B, F, E)
 *      z = interact(h, e)               dot (with or without self-interaction) or cat, nn.h
 *      logit = top(z)                   MLP D -> ... -> 1, ReLU after every layer but the last
 *  DCN (Wang et al. 2017, "Deep & Cross Network for Ad Click Predictions", §2.2-2.4):
 *      x0 = [x | e flattened]           (B, D0), D0 = Dn + F E
 *      x_{l+1} = x0 * (x_l . w_l) + b_l + x_l      for l < cross_layers; w_l, b_l (D0)
 *      d = deep(x0)                     MLP D0 -> ... -> H, ReLU after every layer
 *      logit = final([x_L | d])         one linear layer (D0 + H) -> 1
 *  DeepFM (Guo et al. 2017, §2.1):
 *      first = sum_f lin_f[id] + dense_linear(x)     (sum over each bag's ids, pooled as emb)
 *      fm = 1/2 sum_e [ (sum_f e_fe)^2 - sum_f e_fe^2 ]
 *      logit = first + fm + deep([x | e flattened])  deep: MLP -> ... -> 1, last layer linear
 *  Wide&Deep (Cheng et al. 2016, §3):
 *      logit = first + deep([x | e flattened])       (DeepFM without the fm term)
 *
 * Parameter names (also the checkpoint's and the .npy export's; W is (Out, In) as in
 * torch.nn.Linear):
 *   emb.{f}.weight (R_f, E)    lin.{f}.weight (R_f, 1)
 *   bottom.{l}.weight / .bias  top.{l}.weight / .bias         (DLRM)
 *   cross.{l}.weight (D0) / cross.{l}.bias (D0)              (DCN)
 *   deep.{l}.weight / .bias                                  (DCN, DeepFM, W&D)
 *   final.weight (1, D0 + H) / final.bias (1)                (DCN)
 *   dense_linear.weight (1, Dn) / dense_linear.bias (1)      (DeepFM, W&D)
 * All dense parameters live in ONE flat block (in the order listed), their gradients in a
 * second block of the same layout, so the dense optimizer is one loop (STYLE.md).
 */
#ifndef RECTRAIN_MODEL_H
#define RECTRAIN_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "rectrain/batch.h"
#include "rectrain/embed.h"
#include "rectrain/nn.h"
#include "rectrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rec_model_kind {
    REC_MODEL_DLRM = 0,
    REC_MODEL_DCN = 1,
    REC_MODEL_DEEPFM = 2,
    REC_MODEL_WIDE_DEEP = 3
} rec_model_kind;

/* "dlrm", "dcn", "deepfm", "wide_deep"; and back (-1 when unknown). */
const char *rec_model_kind_name(rec_model_kind k);
int rec_model_kind_from_name(const char *name);

/* Learning-rate schedule (MLPerf DLRM, as facebookresearch/dlrm's LRPolicyScheduler): the
 * rate of optimizer step t (t = 0, 1, ...) is base * scale(t) with
 *   t + 1 <= warmup_steps:                 scale = (t + 1) / warmup_steps
 *   decay_start <= t < decay_start + decay_steps (decay_steps > 0):
 *        scale = max(end_scale, ((decay_start + decay_steps - t) / decay_steps)^power)
 *   t >= decay_start + decay_steps (decay_steps > 0):  scale = end_scale
 *   otherwise:                              scale = 1
 * The scale multiplies the dense and the sparse optimizer's base rates alike. */
typedef struct rec_lr_schedule {
    int64_t warmup_steps;   /* >= 0 */
    int64_t decay_start;    /* >= warmup_steps when decay_steps > 0 */
    int64_t decay_steps;    /* >= 0; 0 = no decay */
    double power;           /* > 0, default 2 */
    double end_scale;       /* [0, 1], default 0 */
} rec_lr_schedule;

double rec_lr_scale(const rec_lr_schedule *s, int64_t step);

enum { REC_MLP_MAX_LAYERS = 16, REC_MODEL_NAME_MAX = 64 };

/* A model as a JSON config describes it (files under configs/; format in docs/models.md).
 * The tables' rows come from the data ("tables": "data", table_rows == NULL until
 * rec_model_config_bind) or are listed in the config and checked against the data. */
typedef struct rec_model_config {
    char name[REC_MODEL_NAME_MAX];
    rec_model_kind kind;
    int n_dense;                    /* Dn; 0 until bound to data */
    int n_sparse;                   /* F; 0 until bound unless the config lists tables */
    int64_t *table_rows;            /* (F) owned; NULL until bound unless listed */
    int emb_dim;                    /* E >= 1 */
    rec_pooling pooling;
    rec_precision embed_precision;  /* storage of the tables: fp32, or bf16 (embed.h) */
    int embed_rounding;             /* bf16 tables: rec_embed_rounding of their updates */
    int bottom[REC_MLP_MAX_LAYERS]; /* DLRM: widths after the input, last == E */
    int n_bottom;
    int top[REC_MLP_MAX_LAYERS];    /* DLRM: widths after the interaction, last == 1 */
    int n_top;
    rec_interact_kind interaction;  /* DLRM */
    int self_interaction;           /* DLRM, dot only */
    int deep[REC_MLP_MAX_LAYERS];   /* DCN: hidden widths; DeepFM/W&D: widths, last == 1 */
    int n_deep;
    int cross_layers;               /* DCN, >= 0 */
    rec_dense_opt_config dense_opt;
    rec_sparse_opt_config sparse_opt;
    rec_lr_schedule schedule;
    /* training defaults (the CLI may override them) */
    int64_t batch_size;             /* >= 1 */
    int epochs;                     /* >= 1 */
    uint64_t seed;
    int64_t eval_every;             /* evaluate every N steps during training; 0 = at the end only */
    char prep_spec[512];            /* spec used when --data is a .tsv ("" = none: give --spec) */
    rec_precision precision;        /* of the dense products (nn.h); the CLI may override it */
} rec_model_config;

/* Fills c with the defaults of `kind` (DLRM: the small embedded default model). */
void rec_model_config_default(rec_model_config *c, rec_model_kind kind);
/* The model `rectrain train` trains without --config ("dlrm_default"): the small DLRM with
 * Adagrad (0.01) and row-wise Adagrad (0.05), batch 1024. */
void rec_model_config_train_default(rec_model_config *c);
/* Parses and validates a config. Errors are REC_EINVAL "ORIGIN: $.json.path: what is wrong
 * and what to do". Unknown keys are refused. c is overwritten; free with _free. */
rec_status rec_model_config_parse(rec_model_config *c, const char *json, size_t len,
                                  const char *origin);
rec_status rec_model_config_load(rec_model_config *c, const char *path);
void rec_model_config_free(rec_model_config *c);
/* Binds the config to data with Dn dense values and F sparse features of the given table
 * sizes: fills "tables": "data", or checks listed tables (REC_EINVAL naming `data_name`,
 * the feature and both sizes when they disagree), and checks the layer widths that depend on
 * Dn and F. */
rec_status rec_model_config_bind(rec_model_config *c, int n_dense, int n_sparse,
                                 const int64_t *table_rows, const char *data_name);
/* Canonical JSON text of a bound config (tables listed), as stored in checkpoints; parsing it
 * gives back an equal config. Caller frees with free(). NULL on out-of-memory. */
char *rec_model_config_to_json(const rec_model_config *c);
int rec_model_config_equal(const rec_model_config *a, const rec_model_config *b);

/* ---- named tensors ------------------------------------------------------------------------- */
typedef enum rec_tensor_role { REC_TENSOR_PARAM = 0, REC_TENSOR_OPT_STATE = 1 } rec_tensor_role;

typedef struct rec_tensor {
    char name[96];
    rec_tensor_role role;
    int ndim;              /* 1 or 2 */
    int64_t shape[2];
    float *data;           /* view into the model's blocks; NULL when data16 holds the tensor */
    uint16_t *data16;      /* bf16 storage (bf16 embedding tables), else NULL; checkpoints and
                              exports hold its values as fp32 (exactly) */
} rec_tensor;

static inline int64_t rec_tensor_numel(const rec_tensor *t) {
    return t->ndim == 1 ? t->shape[0] : t->shape[0] * t->shape[1];
}

/* ---- the model ------------------------------------------------------------------------------ */
typedef struct rec_model rec_model;

/* Builds the model of a bound config: layers, embedding tables, optimizers, and every
 * workspace sized for max_batch, so that no step allocates. threads = OpenMP threads of the
 * dense layers and the embedding engine (0 = OpenMP default). Parameters are drawn from
 * c->seed. */
rec_status rec_model_init(rec_model **out, const rec_model_config *c, int max_batch, int threads);
void rec_model_free(rec_model *m);
const rec_model_config *rec_model_get_config(const rec_model *m);

/* A model whose tables live elsewhere (sharded across ranks, dist.h): everything but the
 * embedding tables is built. Its caller pools each batch's rows into rec_model_pooled and
 * calls rec_model_forward_pooled, reads the pooled rows' gradients from rec_model_emb_grad
 * after the backward, and steps the dense part with rec_model_update_dense;
 * rec_model_forward/_update/_train_step refuse it. */
rec_status rec_model_init_sharded(rec_model **out, const rec_model_config *c, int max_batch, int threads);
int rec_model_is_sharded(const rec_model *m);

/* logits (B) for the batch, B = b->n; owned by the model, valid until the next forward. */
rec_status rec_model_forward(rec_model *m, const rec_batch *b, const float **logits);
/* The pooled embeddings the forward reads: which = 0 (B, F * E), which = 1 (B, F) of the
 * first-order tables (NULL when the model has none). rec_model_forward fills them from the
 * model's tables; rec_model_forward_pooled takes them as the caller left them. */
float *rec_model_pooled(rec_model *m, int which);
rec_status rec_model_forward_pooled(rec_model *m, const rec_batch *b, const float **logits);
/* Backward of the last forward from dlogits (B): overwrites the dense gradient block and the
 * gradients of the pooled embeddings (see rec_model_emb_grad). Changes no parameter. */
rec_status rec_model_backward(rec_model *m, const rec_batch *b, const float *dlogits);
/* One optimizer step from the last backward: dense optimizer over the flat block and the
 * sparse update of every table, both at base rate * lr_scale. */
rec_status rec_model_update(rec_model *m, const rec_batch *b, double lr_scale);
/* The dense optimizer's step alone. */
rec_status rec_model_update_dense(rec_model *m, double lr_scale);
/* Called during rec_model_backward as soon as the gradients of a range of the dense block
 * are final (an MLP's or the cross layers' backward is done), with the range's offset and
 * length in floats: a data-parallel trainer starts their all-reduce there, overlapping it
 * with the backward of the earlier layers. NULL removes it. */
typedef void (*rec_grad_ready_fn)(void *ctx, size_t off, size_t n);
void rec_model_on_grads(rec_model *m, rec_grad_ready_fn fn, void *ctx);
/* forward + loss + backward + update; *loss = the batch's mean BCE before the update.
 * lr_scale comes from the schedule at the model's step count, which it then advances. */
rec_status rec_model_train_step(rec_model *m, const rec_batch *b, double *loss);
/* Wall time of each part of the steps since profiling was switched on (off by default; the
 * clock reads cost ~50 ns each): embeddings (lookup, and gradient + sparse update), MLPs
 * (forward and backward), the rest of the dense model (interaction, cross, FM, concatenation,
 * the bf16 rounding of their operands), the loss, the dense optimizer. For `bench train`. */
enum { REC_MODEL_PART_EMBED, REC_MODEL_PART_MLP, REC_MODEL_PART_INTERACT, REC_MODEL_PART_LOSS,
       REC_MODEL_PART_DENSE_OPT, REC_MODEL_N_PARTS };
const char *rec_model_part_name(int k);
/* Whether the model's bf16 products run on native kernels (nn.h rec_dnn_bf16_native). */
int rec_model_bf16_native(const rec_model *m);
/* on = 1 zeroes the sums and starts them; 0 stops. */
void rec_model_profile(rec_model *m, int on);
/* Seconds per part (REC_MODEL_N_PARTS values into s); returns the train steps they cover. */
int64_t rec_model_profile_read(const rec_model *m, double *s);
/* Optimizer steps taken (the schedule's t); settable for resume. */
int64_t rec_model_steps(const rec_model *m);
void rec_model_set_steps(rec_model *m, int64_t steps);

/* Gradient of the pooled embeddings of the last backward: which = 0 the emb tables
 * (B, F * E), which = 1 the first-order tables (B, F) (NULL when the model has none). */
const float *rec_model_emb_grad(const rec_model *m, int which);
rec_embed *rec_model_embed(rec_model *m, int which);   /* NULL when absent */

/* Dense parameter and gradient blocks (P floats each). */
size_t rec_model_n_dense_params(const rec_model *m);
float *rec_model_dense_params(rec_model *m);
float *rec_model_dense_grads(rec_model *m);

/* All parameters as named views (roles PARAM), then all optimizer state (roles OPT_STATE:
 * "opt.dense.sum", "opt.dense.m", "opt.dense.v", "opt.emb.{f}", "opt.lin.{f}"). The array is
 * owned by the model. */
int rec_model_tensors(const rec_model *m, const rec_tensor **out);
/* The view named `name`, or NULL. */
const rec_tensor *rec_model_tensor(const rec_model *m, const char *name);

/* The model's MLPs in a fixed order, for benchmarks: the i-th (NULL past the last), its name
 * ("bottom", "top", "deep", "final", "dense_lin") and whether training computes the gradient
 * of its input (not for an MLP on the raw dense features). */
rec_mlp *rec_model_mlp(rec_model *m, int i, const char **name, int *input_grad);

/* Forward + backward FLOPs of the dense layers per sample (matmuls only; 2 per MAC), for the
 * GFLOP/s figure of `bench train`. */
double rec_model_flops_per_sample(const rec_model *m);

#ifdef __cplusplus
}
#endif
#endif
