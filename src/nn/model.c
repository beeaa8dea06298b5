/* The four models of model.h composed from the layers of nn.h and the embedding engine of
 * embed.h: forward, backward, update, and the named views of every parameter and optimizer
 * state block.
 *
 * Memory: the dense parameters of every MLP and cross layer are views into ONE block
 * (params, P floats) and their gradients into a second block of the same layout (grads), so
 * the dense optimizer is one loop over P (STYLE.md). Every activation and gradient buffer is
 * sized for max_batch at init: a training step allocates nothing.
 *
 * Threads: the MLPs run on oneDNN with `threads` OpenMP threads, the embedding engine with the
 * same count, and the row-independent layers here (interaction, cross, FM, concatenations)
 * are split into fixed row blocks over the same OpenMP team. Results do not depend on how the
 * blocks are scheduled, so a fixed thread count gives bitwise-identical runs.
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rectrain/core.h"
#include "rectrain/model.h"

enum { ROW_BLOCK = 64 }; /* rows per parallel task of the row-wise layers */

struct rec_model {
    rec_model_config cfg;   /* deep copy (own table_rows) */
    int max_batch, threads;
    int Dn, F, E, D0;       /* D0: DCN/DeepFM/W&D deep input width Dn + F E */
    rec_dnn *dnn;
    rec_embed *emb, *lin;   /* lin: first-order dim-1 tables (DeepFM, W&D); both NULL when sharded */
    int has_lin;            /* DeepFM, W&D */
    int sharded;            /* rec_model_init_sharded: the caller pools the rows */
    rec_grad_ready_fn on_grads;
    void *on_grads_ctx;
    rec_mlp *bottom, *top, *deep, *final, *dense_lin;
    size_t P, cross_off;    /* cross layer l: w at cross_off + 2 l D0, b right after */
    float *params, *grads;  /* (P) each */
    rec_dense_opt *dopt;
    int64_t steps;
    /* workspaces, all (max_batch, ...) */
    float *emb_out, *demb;  /* (B, F E) */
    float *lin_out, *dlin;  /* (B, F) */
    float *z, *dz;          /* DLRM: (B, Dz) interaction output and its gradient */
    int Dz;
    const float *h;         /* DLRM: (B, E) the bottom MLP's output (owned by the MLP) */
    float *dh;              /* DLRM: (B, E) gradient of the bottom MLP's output */
    float *x0, *dx0;        /* (B, D0) */
    float *xs, *cs;         /* DCN: (L+1, B, D0) cross activations, (L, B) saved dot products */
    float *dcur;            /* DCN: (B, D0) */
    float *cat, *dcat;      /* DCN: (B, D0 + H) */
    float *fm;              /* DeepFM: (B) */
    float *logits, *dlogits;/* (B) */
    rec_tensor *tensors;
    int n_tensors;
    int profile;                         /* rec_model_profile */
    double part_s[REC_MODEL_N_PARTS];
    int64_t profile_steps;
};

const char *rec_model_part_name(int k) {
    static const char *const NAMES[REC_MODEL_N_PARTS] = {"embeddings", "MLPs", "interaction, other dense",
                                                         "loss", "dense optimizer"};
    return k >= 0 && k < REC_MODEL_N_PARTS ? NAMES[k] : "?";
}

int rec_model_bf16_native(const rec_model *m) { return rec_dnn_bf16_native(m->dnn); }

void rec_model_profile(rec_model *m, int on) {
    m->profile = on;
    if (on) {
        memset(m->part_s, 0, sizeof m->part_s);
        m->profile_steps = 0;
    }
}

int64_t rec_model_profile_read(const rec_model *m, double *s) {
    memcpy(s, m->part_s, sizeof m->part_s);
    return m->profile_steps;
}

/* Profiling clock: the time now when profiling is on, else 0 (no clock read). */
static double pclock(const rec_model *m) { return m->profile ? rec_now() : 0.0; }
static void pcharge(rec_model *m, int part, double t0) {
    if (m->profile) m->part_s[part] += rec_now() - t0;
}

/* An MLP's forward / backward, charged to REC_MODEL_PART_MLP. */
static rec_status mlp_forward(rec_model *m, rec_mlp *mlp, int B, const float *x, const float **y) {
    double t0 = pclock(m);
    rec_status s = rec_mlp_forward(mlp, B, x, y);
    pcharge(m, REC_MODEL_PART_MLP, t0);
    return s;
}

static rec_status mlp_backward(rec_model *m, rec_mlp *mlp, int B, const float *x, const float *dy, float *dx) {
    double t0 = pclock(m);
    rec_status s = rec_mlp_backward(mlp, B, x, dy, dx);
    pcharge(m, REC_MODEL_PART_MLP, t0);
    return s;
}

const rec_model_config *rec_model_get_config(const rec_model *m) { return &m->cfg; }
int64_t rec_model_steps(const rec_model *m) { return m->steps; }
size_t rec_model_n_dense_params(const rec_model *m) { return m->P; }
float *rec_model_dense_params(rec_model *m) { return m->params; }
float *rec_model_dense_grads(rec_model *m) { return m->grads; }
rec_embed *rec_model_embed(rec_model *m, int which) { return which ? m->lin : m->emb; }

void rec_model_set_steps(rec_model *m, int64_t steps) {
    m->steps = steps;
    rec_dense_opt_set_steps(m->dopt, steps);
    if (m->emb) rec_embed_set_updates(m->emb, steps); /* one table update per step: bf16 rounding's counter */
    if (m->lin) rec_embed_set_updates(m->lin, steps);
}

const float *rec_model_emb_grad(const rec_model *m, int which) {
    return which ? (m->has_lin ? m->dlin : NULL) : m->demb;
}

float *rec_model_pooled(rec_model *m, int which) { return which ? (m->has_lin ? m->lin_out : NULL) : m->emb_out; }

void rec_model_on_grads(rec_model *m, rec_grad_ready_fn fn, void *ctx) {
    m->on_grads = fn;
    m->on_grads_ctx = ctx;
}

/* Tells the hook that the gradients of an MLP's parameters are final (its backward is done). */
static void grads_ready(rec_model *m, rec_mlp *mlp) {
    if (!m->on_grads || !mlp) return;
    const int L = rec_mlp_layers(mlp);
    const float *first = rec_mlp_weight(mlp, 0), *end = rec_mlp_bias(mlp, L - 1) + rec_mlp_size(mlp, L);
    const size_t off = (size_t)(first - m->params);
    m->on_grads(m->on_grads_ctx, off, (size_t)(end - first));
}

void rec_model_free(rec_model *m) {
    if (!m) return;
    rec_embed_free(m->emb);
    rec_embed_free(m->lin);
    rec_mlp_free(m->bottom);
    rec_mlp_free(m->top);
    rec_mlp_free(m->deep);
    rec_mlp_free(m->final);
    rec_mlp_free(m->dense_lin);
    rec_dense_opt_free(m->dopt);
    rec_dnn_free(m->dnn);
    float *bufs[] = {m->params, m->grads, m->emb_out, m->demb, m->lin_out, m->dlin, m->z, m->dz, m->dh,
                     m->x0, m->dx0, m->xs, m->cs, m->dcur, m->cat, m->dcat, m->fm, m->logits, m->dlogits};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) rec_free(bufs[i]);
    free(m->tensors);
    rec_model_config_free(&m->cfg);
    rec_free(m);
}

/* ---- construction ------------------------------------------------------------------------- */

static rec_status buf(float **p, size_t n, const char *what) {
    return rec_alloc((void **)p, (n ? n : 1) * sizeof(float), what);
}

/* sizes = {in, widths...}. */
static int mlp_sizes(int in, const int *w, int n, int *out) {
    out[0] = in;
    memcpy(out + 1, w, (size_t)n * sizeof(int));
    return n + 1;
}

/* Appends a named view to the model's list (capacity checked by the caller's count). */
static void add_tensor(rec_model *m, const char *name, rec_tensor_role role, int ndim, int64_t d0,
                       int64_t d1, float *data) {
    rec_tensor *t = &m->tensors[m->n_tensors++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->role = role;
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = ndim == 2 ? d1 : 0;
    t->data = data;
}

/* Views of an MLP's layers: PREFIX.l.weight (out, in) and PREFIX.l.bias (out), or
 * PREFIX.weight / PREFIX.bias for the single layers final and dense_linear (indexed = 0). */
static void add_mlp_tensors(rec_model *m, const char *prefix, rec_mlp *mlp, int indexed) {
    char name[96];
    const int n = mlp ? rec_mlp_layers(mlp) : 0;
    for (int l = 0; l < n; l++) {
        int64_t in = rec_mlp_size(mlp, l), out = rec_mlp_size(mlp, l + 1);
        if (!indexed) snprintf(name, sizeof name, "%s.weight", prefix);
        else snprintf(name, sizeof name, "%s.%d.weight", prefix, l);
        add_tensor(m, name, REC_TENSOR_PARAM, 2, out, in, rec_mlp_weight(mlp, l));
        if (!indexed) snprintf(name, sizeof name, "%s.bias", prefix);
        else snprintf(name, sizeof name, "%s.%d.bias", prefix, l);
        add_tensor(m, name, REC_TENSOR_PARAM, 1, out, 0, rec_mlp_bias(mlp, l));
    }
}

static rec_status build_tensors(rec_model *m) {
    const rec_model_config *c = &m->cfg;
    int cap = 4 * m->F + 2 * (c->n_bottom + c->n_top + c->n_deep + c->cross_layers) + 16;
    m->tensors = calloc((size_t)cap, sizeof *m->tensors);
    if (!m->tensors) return rec_errorf(REC_ENOMEM, "out of memory for the model's tensor list");
    char name[96];
    for (int f = 0; m->emb && f < m->F; f++) {
        snprintf(name, sizeof name, "emb.%d.weight", f);
        add_tensor(m, name, REC_TENSOR_PARAM, 2, rec_embed_rows(m->emb, f), m->E, rec_embed_table(m->emb, f));
        m->tensors[m->n_tensors - 1].data16 = rec_embed_table_bf16(m->emb, f);
    }
    for (int f = 0; m->lin && f < m->F; f++) {
        snprintf(name, sizeof name, "lin.%d.weight", f);
        add_tensor(m, name, REC_TENSOR_PARAM, 2, rec_embed_rows(m->lin, f), 1, rec_embed_table(m->lin, f));
        m->tensors[m->n_tensors - 1].data16 = rec_embed_table_bf16(m->lin, f);
    }
    add_mlp_tensors(m, "bottom", m->bottom, 1);
    add_mlp_tensors(m, "top", m->top, 1);
    for (int l = 0; l < c->cross_layers && c->kind == REC_MODEL_DCN; l++) {
        float *w = m->params + m->cross_off + (size_t)2 * l * m->D0;
        snprintf(name, sizeof name, "cross.%d.weight", l);
        add_tensor(m, name, REC_TENSOR_PARAM, 1, m->D0, 0, w);
        snprintf(name, sizeof name, "cross.%d.bias", l);
        add_tensor(m, name, REC_TENSOR_PARAM, 1, m->D0, 0, w + m->D0);
    }
    add_mlp_tensors(m, "deep", m->deep, 1);
    add_mlp_tensors(m, "final", m->final, 0);
    add_mlp_tensors(m, "dense_linear", m->dense_lin, 0);
    static const char *const dense_state[2][2] = {{"opt.dense.sum", NULL}, {"opt.dense.m", "opt.dense.v"}};
    for (int k = 0; k < 2; k++) {
        float *st = rec_dense_opt_state(m->dopt, k);
        int row = c->dense_opt.kind == REC_OPT_ADAM ? 1 : 0;
        if (st) add_tensor(m, dense_state[row][k], REC_TENSOR_OPT_STATE, 1, (int64_t)m->P, 0, st);
    }
    for (int which = 0; which < 2; which++) {
        rec_embed *e = which ? m->lin : m->emb;
        for (int f = 0; e && f < m->F; f++) {
            float *st = rec_embed_state(e, f);
            if (!st) continue;
            snprintf(name, sizeof name, "opt.%s.%d", which ? "lin" : "emb", f);
            int64_t R = rec_embed_rows(e, f);
            int dim = rec_embed_dim(e, f);
            if ((int64_t)rec_embed_state_len(e, f) == R) add_tensor(m, name, REC_TENSOR_OPT_STATE, 1, R, 0, st);
            else add_tensor(m, name, REC_TENSOR_OPT_STATE, 2, R, dim, st);
        }
    }
    return REC_OK;
}

static rec_status model_build(rec_model *m) {
    const rec_model_config *c = &m->cfg;
    const int B = m->max_batch, Dn = m->Dn, F = m->F, E = m->E, D0 = m->D0;
    uint64_t seed = c->seed;
    const rec_precision prec = c->precision;
    REC_TRY(rec_dnn_init(&m->dnn, m->threads));

    /* Embedding tables. */
    int *dims = malloc(sizeof(int) * (size_t)F), *ones = malloc(sizeof(int) * (size_t)F);
    if (!dims || !ones) {
        free(dims);
        free(ones);
        return rec_errorf(REC_ENOMEM, "out of memory building the model");
    }
    for (int f = 0; f < F; f++) dims[f] = E, ones[f] = 1;
    rec_embed_config ec = {F, c->table_rows, dims, c->pooling, c->sparse_opt, B, m->threads, rec_mix64(seed + 1), 0,
                           c->embed_precision == REC_PRECISION_BF16, (rec_embed_rounding)c->embed_rounding};
    m->has_lin = c->kind == REC_MODEL_DEEPFM || c->kind == REC_MODEL_WIDE_DEEP;
    rec_status s = m->sharded ? REC_OK : rec_embed_init(&m->emb, &ec);
    if (!s && m->has_lin && !m->sharded) {
        rec_embed_config lc = ec;
        lc.dims = ones;
        lc.seed = rec_mix64(seed + 2);
        s = rec_embed_init(&m->lin, &lc);
    }
    free(dims);
    free(ones);
    REC_TRY(s);

    /* Dense parameter block: bottom, top, cross, deep, final, dense_linear. */
    int sz_bottom[REC_MLP_MAX_LAYERS + 1], sz_top[REC_MLP_MAX_LAYERS + 1], sz_deep[REC_MLP_MAX_LAYERS + 1];
    int sz_final[2], sz_dl[2] = {Dn, 1};
    int nb = 0, nt = 0, nd = 0;
    size_t P = 0, off_bottom = 0, off_top = 0, off_deep = 0, off_final = 0, off_dl = 0;
    if (c->kind == REC_MODEL_DLRM) {
        m->Dz = rec_interact_dim(c->interaction, c->self_interaction, F, E);
        nb = mlp_sizes(Dn, c->bottom, c->n_bottom, sz_bottom);
        nt = mlp_sizes(m->Dz, c->top, c->n_top, sz_top);
        off_bottom = P;
        P += rec_mlp_param_count(sz_bottom, nb);
        off_top = P;
        P += rec_mlp_param_count(sz_top, nt);
    } else {
        nd = mlp_sizes(D0, c->deep, c->n_deep, sz_deep);
        if (c->kind == REC_MODEL_DCN) {
            m->cross_off = P;
            P += (size_t)2 * c->cross_layers * D0;
        }
        off_deep = P;
        P += rec_mlp_param_count(sz_deep, nd);
        if (c->kind == REC_MODEL_DCN) {
            sz_final[0] = D0 + c->deep[c->n_deep - 1];
            sz_final[1] = 1;
            off_final = P;
            P += rec_mlp_param_count(sz_final, 2);
        } else if (Dn > 0) {
            off_dl = P;
            P += rec_mlp_param_count(sz_dl, 2);
        }
    }
    m->P = P;
    REC_TRY(buf(&m->params, P, "dense parameters"));
    REC_TRY(buf(&m->grads, P, "dense gradients"));
    if (c->kind == REC_MODEL_DLRM) {
        REC_TRY(rec_mlp_init_view(&m->bottom, m->dnn, sz_bottom, nb, 1, B, prec, rec_mix64(seed + 3),
                                  m->params + off_bottom, m->grads + off_bottom));
        REC_TRY(rec_mlp_init_view(&m->top, m->dnn, sz_top, nt, 0, B, prec, rec_mix64(seed + 4), m->params + off_top,
                                  m->grads + off_top));
    } else {
        int deep_last_relu = c->kind == REC_MODEL_DCN;
        REC_TRY(rec_mlp_init_view(&m->deep, m->dnn, sz_deep, nd, deep_last_relu, B, prec, rec_mix64(seed + 6),
                                  m->params + off_deep, m->grads + off_deep));
        if (c->kind == REC_MODEL_DCN)
            REC_TRY(rec_mlp_init_view(&m->final, m->dnn, sz_final, 2, 0, B, prec, rec_mix64(seed + 7),
                                      m->params + off_final, m->grads + off_final));
        else if (Dn > 0)
            REC_TRY(rec_mlp_init_view(&m->dense_lin, m->dnn, sz_dl, 2, 0, B, prec, rec_mix64(seed + 8),
                                      m->params + off_dl, m->grads + off_dl));
    }
    /* Cross layers: w ~ N(0, sqrt(2 / (D0 + 1))) (as a (1, D0) linear layer in dlrm's init),
     * b = 0. */
    for (int l = 0; c->kind == REC_MODEL_DCN && l < c->cross_layers; l++) {
        rec_rng r;
        rec_rng_seed(&r, rec_mix64(seed + 5), (uint64_t)l);
        float *w = m->params + m->cross_off + (size_t)2 * l * D0;
        double sd = sqrt(2.0 / (D0 + 1.0));
        for (int i = 0; i < D0; i++) w[i] = (float)(sd * rec_rng_normal(&r));
    }
    REC_TRY(rec_dense_opt_init(&m->dopt, &c->dense_opt, P));

    /* Workspaces. */
    REC_TRY(buf(&m->emb_out, (size_t)B * F * E, "embedding outputs"));
    REC_TRY(buf(&m->demb, (size_t)B * F * E, "embedding gradients"));
    REC_TRY(buf(&m->logits, (size_t)B, "logits"));
    REC_TRY(buf(&m->dlogits, (size_t)B, "logit gradients"));
    if (m->has_lin) {
        REC_TRY(buf(&m->lin_out, (size_t)B * F, "first-order outputs"));
        REC_TRY(buf(&m->dlin, (size_t)B * F, "first-order gradients"));
    }
    if (c->kind == REC_MODEL_DLRM) {
        REC_TRY(buf(&m->z, (size_t)B * m->Dz, "interaction output"));
        REC_TRY(buf(&m->dz, (size_t)B * m->Dz, "interaction gradient"));
        REC_TRY(buf(&m->dh, (size_t)B * E, "bottom MLP gradient"));
    } else {
        REC_TRY(buf(&m->x0, (size_t)B * D0, "deep input"));
        REC_TRY(buf(&m->dx0, (size_t)B * D0, "deep input gradient"));
    }
    if (c->kind == REC_MODEL_DCN) {
        int H = c->deep[c->n_deep - 1];
        REC_TRY(buf(&m->xs, (size_t)(c->cross_layers + 1) * B * D0, "cross activations"));
        REC_TRY(buf(&m->cs, (size_t)(c->cross_layers + 1) * B, "cross dot products"));
        REC_TRY(buf(&m->dcur, (size_t)B * (D0 > H ? D0 : H), "cross gradient"));
        REC_TRY(buf(&m->cat, (size_t)B * (D0 + H), "final layer input"));
        REC_TRY(buf(&m->dcat, (size_t)B * (D0 + H), "final layer input gradient"));
    }
    if (c->kind == REC_MODEL_DEEPFM) REC_TRY(buf(&m->fm, (size_t)B, "FM output"));
    return build_tensors(m);
}

static rec_status copy_config(rec_model_config *dst, const rec_model_config *src) {
    *dst = *src;
    dst->table_rows = malloc(sizeof(int64_t) * (size_t)(src->n_sparse > 0 ? src->n_sparse : 1));
    if (!dst->table_rows) return rec_errorf(REC_ENOMEM, "out of memory copying the model config");
    memcpy(dst->table_rows, src->table_rows, sizeof(int64_t) * (size_t)src->n_sparse);
    return REC_OK;
}

static rec_status model_init(rec_model **out, const rec_model_config *c, int max_batch, int threads, int sharded) {
    *out = NULL;
    if (!c->table_rows || c->n_sparse < 1)
        return rec_errorf(REC_EINVAL, "model %s is not bound to data (rec_model_config_bind first)", c->name);
    if (max_batch < 1) return rec_errorf(REC_EINVAL, "model %s: max_batch must be >= 1, got %d", c->name, max_batch);
    if (threads < 0) return rec_errorf(REC_EINVAL, "model %s: threads must be >= 0, got %d", c->name, threads);
    rec_model *m;
    REC_TRY(rec_alloc((void **)&m, sizeof *m, "model"));
    rec_status s = copy_config(&m->cfg, c);
    m->max_batch = max_batch;
    m->threads = threads;
    m->sharded = sharded;
    m->Dn = c->n_dense;
    m->F = c->n_sparse;
    m->E = c->emb_dim;
    m->D0 = c->n_dense + c->n_sparse * c->emb_dim;
    if (!s) s = model_build(m);
    if (s) {
        rec_model_free(m);
        return rec_error_wrap(s, "building model %s", c->name);
    }
    *out = m;
    return REC_OK;
}

rec_status rec_model_init(rec_model **out, const rec_model_config *c, int max_batch, int threads) {
    return model_init(out, c, max_batch, threads, 0);
}

int rec_model_is_sharded(const rec_model *m) { return m->sharded; }

rec_status rec_model_init_sharded(rec_model **out, const rec_model_config *c, int max_batch, int threads) {
    return model_init(out, c, max_batch, threads, 1);
}

const rec_tensor *rec_model_tensor(const rec_model *m, const char *name) {
    for (int i = 0; i < m->n_tensors; i++)
        if (!strcmp(m->tensors[i].name, name)) return &m->tensors[i];
    return NULL;
}

int rec_model_tensors(const rec_model *m, const rec_tensor **out) {
    *out = m->tensors;
    return m->n_tensors;
}

/* ---- row-parallel helpers -------------------------------------------------------------------- */

static int nthreads(const rec_model *m) { return m->threads > 0 ? m->threads : omp_get_max_threads(); }

/* x0 (B, D0) = [dense (B, Dn) | emb (B, F E)] row by row. */
static void concat_rows(int B, int a, const float *A, int b, const float *Bm, float *out) {
    for (int i = 0; i < B; i++) {
        memcpy(out + (size_t)i * (a + b), A + (size_t)i * a, (size_t)a * sizeof(float));
        memcpy(out + (size_t)i * (a + b) + a, Bm + (size_t)i * b, (size_t)b * sizeof(float));
    }
}

static rec_status check_batch(const rec_model *m, const rec_batch *b) {
    if (b->n < 1 || b->n > m->max_batch)
        return rec_errorf(REC_EINVAL, "model %s: batch of %lld rows; it was built for 1..%d", m->cfg.name,
                          (long long)b->n, m->max_batch);
    if (b->n_dense != m->Dn || b->n_sparse < m->F)
        return rec_errorf(REC_EINVAL, "model %s: the batch has %d dense values and %d sparse features per row; the "
                          "model needs %d and %d", m->cfg.name, b->n_dense, b->n_sparse, m->Dn, m->F);
    return REC_OK;
}

/* ---- forward ----------------------------------------------------------------------------------- */

static rec_status forward_dlrm(rec_model *m, const rec_batch *b) {
    const int B = (int)b->n, F = m->F, E = m->E, Dz = m->Dz;
    const rec_model_config *c = &m->cfg;
    const float *h, *y;
    REC_TRY(mlp_forward(m, m->bottom, B, b->dense, &h));
    m->h = h;
    int nblk = (B + ROW_BLOCK - 1) / ROW_BLOCK;
#pragma omp parallel for num_threads(nthreads(m)) schedule(static)
    for (int k = 0; k < nblk; k++) {
        int r0 = k * ROW_BLOCK, n = B - r0 < ROW_BLOCK ? B - r0 : ROW_BLOCK;
        rec_interact_forward(c->interaction, c->self_interaction, c->precision, n, F, E, h + (size_t)r0 * E,
                             m->emb_out + (size_t)r0 * F * E, m->z + (size_t)r0 * Dz);
    }
    REC_TRY(mlp_forward(m, m->top, B, m->z, &y));
    memcpy(m->logits, y, (size_t)B * sizeof(float));
    return REC_OK;
}

static rec_status forward_dcn(rec_model *m, const rec_batch *b) {
    const int B = (int)b->n, D0 = m->D0, L = m->cfg.cross_layers, H = m->cfg.deep[m->cfg.n_deep - 1];
    const float *d, *y;
    int nblk = (B + ROW_BLOCK - 1) / ROW_BLOCK;
#pragma omp parallel for num_threads(nthreads(m)) schedule(static)
    for (int k = 0; k < nblk; k++) {
        int r0 = k * ROW_BLOCK, n = B - r0 < ROW_BLOCK ? B - r0 : ROW_BLOCK;
        const float *x0 = m->x0 + (size_t)r0 * D0;
        concat_rows(n, m->Dn, b->dense + (size_t)r0 * m->Dn, m->F * m->E, m->emb_out + (size_t)r0 * m->F * m->E,
                    m->x0 + (size_t)r0 * D0);
        memcpy(m->xs + (size_t)r0 * D0, x0, (size_t)n * D0 * sizeof(float));
        for (int l = 0; l < L; l++) {
            const float *w = m->params + m->cross_off + (size_t)2 * l * D0;
            rec_cross_forward(n, D0, x0, m->xs + ((size_t)l * m->max_batch + r0) * D0, w, w + D0,
                              m->xs + ((size_t)(l + 1) * m->max_batch + r0) * D0, m->cs + (size_t)l * m->max_batch + r0);
        }
    }
    REC_TRY(mlp_forward(m, m->deep, B, m->x0, &d));
    concat_rows(B, D0, m->xs + (size_t)L * m->max_batch * D0, H, d, m->cat);
    REC_TRY(mlp_forward(m, m->final, B, m->cat, &y));
    memcpy(m->logits, y, (size_t)B * sizeof(float));
    return REC_OK;
}

static rec_status forward_fm(rec_model *m, const rec_batch *b) {
    const int B = (int)b->n, F = m->F, E = m->E, D0 = m->D0;
    const float *d, *w = NULL;
    concat_rows(B, m->Dn, b->dense, F * E, m->emb_out, m->x0);
    REC_TRY(mlp_forward(m, m->deep, B, m->x0, &d));
    if (m->dense_lin) REC_TRY(mlp_forward(m, m->dense_lin, B, b->dense, &w));
    if (m->fm) rec_fm_forward(B, F, E, m->emb_out, m->fm);
    (void)D0;
    for (int i = 0; i < B; i++) {
        float s = d[i] + (w ? w[i] : 0.0f) + (m->fm ? m->fm[i] : 0.0f);
        for (int f = 0; f < F; f++) s += m->lin_out[(size_t)i * F + f];
        m->logits[i] = s;
    }
    return REC_OK;
}

rec_status rec_model_forward(rec_model *m, const rec_batch *b, const float **logits) {
    REC_TRY(check_batch(m, b));
    if (m->sharded)
        return rec_errorf(REC_EINVAL, "model %s is sharded: its tables live with their owners, so pool the rows "
                          "into rec_model_pooled and call rec_model_forward_pooled", m->cfg.name);
    double t0 = pclock(m);
    REC_TRY(rec_embed_forward(m->emb, b, 0, m->emb_out));
    if (m->lin) REC_TRY(rec_embed_forward(m->lin, b, 0, m->lin_out));
    pcharge(m, REC_MODEL_PART_EMBED, t0);
    return rec_model_forward_pooled(m, b, logits);
}

/* Charges the time since t0 less what the MLPs took meanwhile (mlp0: their sum at t0) to the
 * interaction and the other dense layers. */
static void charge_rest(rec_model *m, double t0, double mlp0) {
    if (m->profile)
        m->part_s[REC_MODEL_PART_INTERACT] += rec_now() - t0 - (m->part_s[REC_MODEL_PART_MLP] - mlp0);
}

rec_status rec_model_forward_pooled(rec_model *m, const rec_batch *b, const float **logits) {
    REC_TRY(check_batch(m, b));
    const double t0 = pclock(m), mlp0 = m->part_s[REC_MODEL_PART_MLP];
    switch (m->cfg.kind) {
    case REC_MODEL_DLRM: REC_TRY(forward_dlrm(m, b)); break;
    case REC_MODEL_DCN: REC_TRY(forward_dcn(m, b)); break;
    default: REC_TRY(forward_fm(m, b)); break;
    }
    charge_rest(m, t0, mlp0);
    *logits = m->logits;
    return REC_OK;
}

/* ---- backward ---------------------------------------------------------------------------------- */

static rec_status backward_dlrm(rec_model *m, const rec_batch *b, const float *dlogits) {
    const int B = (int)b->n, F = m->F, E = m->E, Dz = m->Dz;
    const rec_model_config *c = &m->cfg;
    REC_TRY(mlp_backward(m, m->top, B, m->z, dlogits, m->dz));
    grads_ready(m, m->top);
    const float *h = m->h;
    int nblk = (B + ROW_BLOCK - 1) / ROW_BLOCK;
#pragma omp parallel for num_threads(nthreads(m)) schedule(static)
    for (int k = 0; k < nblk; k++) {
        int r0 = k * ROW_BLOCK, n = B - r0 < ROW_BLOCK ? B - r0 : ROW_BLOCK;
        rec_interact_backward(c->interaction, c->self_interaction, c->precision, n, F, E, h + (size_t)r0 * E,
                              m->emb_out + (size_t)r0 * F * E, m->dz + (size_t)r0 * Dz, m->dh + (size_t)r0 * E,
                              m->demb + (size_t)r0 * F * E);
    }
    REC_TRY(mlp_backward(m, m->bottom, B, b->dense, m->dh, NULL));
    grads_ready(m, m->bottom);
    return REC_OK;
}

/* Copies the embedding part of dx0 (B, D0) into demb (B, F E). */
static void split_demb(rec_model *m, int B) {
    const int FE = m->F * m->E;
    for (int i = 0; i < B; i++)
        memcpy(m->demb + (size_t)i * FE, m->dx0 + (size_t)i * m->D0 + m->Dn, (size_t)FE * sizeof(float));
}

static rec_status backward_dcn(rec_model *m, const rec_batch *b, const float *dlogits) {
    const int B = (int)b->n, D0 = m->D0, L = m->cfg.cross_layers, H = m->cfg.deep[m->cfg.n_deep - 1];
    const int W = D0 + H;
    REC_TRY(mlp_backward(m, m->final, B, m->cat, dlogits, m->dcat));
    grads_ready(m, m->final);
    /* dcat = [d x_L | d deep]: the deep part's gradient is copied into dcur's rows first only
     * to feed the MLP contiguously; x_L's gradient then takes dcur over. */
    for (int i = 0; i < B; i++) memcpy(m->dcur + (size_t)i * H, m->dcat + (size_t)i * W + D0, (size_t)H * sizeof(float));
    REC_TRY(mlp_backward(m, m->deep, B, m->x0, m->dcur, m->dx0));
    grads_ready(m, m->deep);
    for (int i = 0; i < B; i++) memcpy(m->dcur + (size_t)i * D0, m->dcat + (size_t)i * W, (size_t)D0 * sizeof(float));
    /* Cross layers back to front. dw, db reduce over the batch, so the layers run over the
     * whole batch (their loops vectorise over D0); x0's gradient accumulates in dx0. */
    for (int l = L - 1; l >= 0; l--) {
        const float *w = m->params + m->cross_off + (size_t)2 * l * D0;
        float *dw = m->grads + m->cross_off + (size_t)2 * l * D0;
        rec_cross_backward(B, D0, m->x0, m->xs + (size_t)l * m->max_batch * D0, w, m->cs + (size_t)l * m->max_batch,
                           m->dcur, m->dx0, m->dcur, dw, dw + D0);
    }
    if (m->on_grads && L > 0) m->on_grads(m->on_grads_ctx, m->cross_off, (size_t)2 * L * D0);
    /* x_0 is x0 itself: its gradient through the cross path joins the deep one. */
    for (size_t i = 0; i < (size_t)B * D0; i++) m->dx0[i] += m->dcur[i];
    split_demb(m, B);
    return REC_OK;
}

static rec_status backward_fm(rec_model *m, const rec_batch *b, const float *dlogits) {
    const int B = (int)b->n, F = m->F;
    REC_TRY(mlp_backward(m, m->deep, B, m->x0, dlogits, m->dx0));
    grads_ready(m, m->deep);
    if (m->dense_lin) REC_TRY(mlp_backward(m, m->dense_lin, B, b->dense, dlogits, NULL));
    grads_ready(m, m->dense_lin);
    for (int i = 0; i < B; i++)
        for (int f = 0; f < F; f++) m->dlin[(size_t)i * F + f] = dlogits[i];
    split_demb(m, B);
    if (m->fm) rec_fm_backward(B, F, m->E, m->emb_out, dlogits, m->demb);
    return REC_OK;
}

rec_status rec_model_backward(rec_model *m, const rec_batch *b, const float *dlogits) {
    REC_TRY(check_batch(m, b));
    const double t0 = pclock(m), mlp0 = m->part_s[REC_MODEL_PART_MLP];
    switch (m->cfg.kind) {
    case REC_MODEL_DLRM: REC_TRY(backward_dlrm(m, b, dlogits)); break;
    case REC_MODEL_DCN: REC_TRY(backward_dcn(m, b, dlogits)); break;
    default: REC_TRY(backward_fm(m, b, dlogits)); break;
    }
    charge_rest(m, t0, mlp0);
    return REC_OK;
}

rec_status rec_model_update_dense(rec_model *m, double lr_scale) {
    const double t0 = pclock(m);
    rec_dense_opt_set_lr(m->dopt, (float)(m->cfg.dense_opt.lr * lr_scale));
    rec_status s = m->P ? rec_dense_opt_step(m->dopt, m->params, m->grads, m->P) : REC_OK;
    pcharge(m, REC_MODEL_PART_DENSE_OPT, t0);
    return s;
}

rec_status rec_model_update(rec_model *m, const rec_batch *b, double lr_scale) {
    REC_TRY(check_batch(m, b));
    if (m->sharded)
        return rec_errorf(REC_EINVAL, "model %s is sharded: update its dense part with rec_model_update_dense; "
                          "the owners of its rows update them", m->cfg.name);
    REC_TRY(rec_model_update_dense(m, lr_scale));
    float slr = (float)(m->cfg.sparse_opt.lr * lr_scale);
    const double t0 = pclock(m);
    REC_TRY(rec_embed_backward_update(m->emb, b, 0, m->demb, slr));
    if (m->lin) REC_TRY(rec_embed_backward_update(m->lin, b, 0, m->dlin, slr));
    pcharge(m, REC_MODEL_PART_EMBED, t0);
    return REC_OK;
}

rec_status rec_model_train_step(rec_model *m, const rec_batch *b, double *loss) {
    const float *logits;
    REC_TRY(rec_model_forward(m, b, &logits));
    const double t0 = pclock(m);
    REC_TRY(rec_bce_forward_backward((int)b->n, logits, b->label, loss, m->dlogits));
    pcharge(m, REC_MODEL_PART_LOSS, t0);
    REC_TRY(rec_model_backward(m, b, m->dlogits));
    /* A step at scale 0 (the end of a decay to end_scale 0) still updates optimizer state,
     * as PyTorch does at lr 0. */
    REC_TRY(rec_model_update(m, b, rec_lr_scale(&m->cfg.schedule, m->steps)));
    m->steps++;
    m->profile_steps += m->profile;
    return REC_OK;
}

rec_mlp *rec_model_mlp(rec_model *m, int i, const char **name, int *input_grad) {
    static const char *const NAMES[] = {"bottom", "top", "deep", "final", "dense_lin"};
    rec_mlp *mlps[] = {m->bottom, m->top, m->deep, m->final, m->dense_lin};
    for (int k = 0; k < 5; k++) {
        if (!mlps[k] || i-- > 0) continue;
        if (name) *name = NAMES[k];
        /* backward gives no gradient into the raw dense input (see rec_model_backward) */
        if (input_grad) *input_grad = mlps[k] != m->bottom && mlps[k] != m->dense_lin;
        return mlps[k];
    }
    return NULL;
}

double rec_model_flops_per_sample(const rec_model *m) {
    const rec_model_config *c = &m->cfg;
    double f = 0;
    rec_mlp *p;
    int input_grad;
    for (int i = 0; (p = rec_model_mlp((rec_model *)m, i, NULL, &input_grad)); i++) {
        double fwd, bwd;
        rec_mlp_flops(p, input_grad, &fwd, &bwd);
        f += fwd + bwd;
    }
    if (c->kind == REC_MODEL_DLRM && c->interaction == REC_INTERACT_DOT) {
        double pairs = (double)(m->F + 1) * m->F / 2 + (c->self_interaction ? m->F + 1 : 0);
        f += 2.0 * pairs * m->E * 3;  /* forward dot products, and two axpys per pair backward */
    }
    if (c->kind == REC_MODEL_DCN) f += 2.0 * c->cross_layers * m->D0 * 2 * 3;
    return f;
}
