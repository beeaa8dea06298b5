/* The MLP: a stack of linear layers (linear.c) whose parameters live in one flat block and
 * whose gradients live in a second block of the same layout (STYLE.md "one flat allocation
 * per kind of state"), so zeroing gradients is one memset and a dense optimizer is one loop.
 * Activations and gradient buffers are sized once for the largest batch. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rectrain/core.h"
#include "rectrain/nn.h"

struct rec_mlp {
    int n_layers, max_batch;
    int last_relu;          /* the last layer has a ReLU too */
    rec_precision prec;
    int *sizes;             /* (n_layers + 1) */
    rec_linear **layers;    /* (n_layers) */
    size_t *w_off, *b_off;  /* (n_layers) offsets of W and b in the flat blocks */
    size_t n_params;
    float *params, *grads;  /* (P) each, same layout */
    int owns_blocks;        /* 0 when params/grads are views into a caller's blocks */
    float *acts;            /* layer l's output at act_off[l]: (max_batch, sizes[l+1]) */
    size_t *act_off;
    float *dbuf[2];         /* (max_batch, max width) ping-pong for activation gradients */
};

void rec_mlp_free(rec_mlp *m) {
    if (!m) return;
    if (m->layers)
        for (int l = 0; l < m->n_layers; l++) rec_linear_free(m->layers[l]);
    rec_free(m->layers);
    rec_free(m->sizes);
    rec_free(m->w_off);
    rec_free(m->b_off);
    rec_free(m->act_off);
    if (m->owns_blocks) {
        rec_free(m->params);
        rec_free(m->grads);
    }
    rec_free(m->acts);
    rec_free(m->dbuf[0]);
    rec_free(m->dbuf[1]);
    rec_free(m);
}

static rec_status mlp_build(rec_mlp *m, rec_dnn *d, const int *sizes, int last_relu,
                            uint64_t seed) {
    const int L = m->n_layers;
    m->last_relu = last_relu;
    REC_TRY(rec_alloc((void **)&m->sizes, (size_t)(L + 1) * sizeof(int), "MLP sizes"));
    REC_TRY(rec_alloc((void **)&m->layers, (size_t)L * sizeof(rec_linear *), "MLP layers"));
    REC_TRY(rec_alloc((void **)&m->w_off, (size_t)L * sizeof(size_t), "MLP offsets"));
    REC_TRY(rec_alloc((void **)&m->b_off, (size_t)L * sizeof(size_t), "MLP offsets"));
    REC_TRY(rec_alloc((void **)&m->act_off, (size_t)L * sizeof(size_t), "MLP offsets"));
    memcpy(m->sizes, sizes, (size_t)(L + 1) * sizeof(int));
    size_t p = 0, a = 0;
    int widest = sizes[0];
    for (int l = 0; l < L; l++) {
        size_t in = (size_t)sizes[l], out = (size_t)sizes[l + 1];
        m->w_off[l] = p;
        p += in * out;
        m->b_off[l] = p;
        p += out;
        m->act_off[l] = a;
        a += (size_t)m->max_batch * out;
        if (sizes[l + 1] > widest) widest = sizes[l + 1];
    }
    m->n_params = p;
    if (m->owns_blocks) {
        REC_TRY(rec_alloc((void **)&m->params, p * sizeof(float), "MLP parameters"));
        REC_TRY(rec_alloc((void **)&m->grads, p * sizeof(float), "MLP gradients"));
    }
    REC_TRY(rec_alloc((void **)&m->acts, a * sizeof(float), "MLP activations"));
    for (int k = 0; k < 2; k++)
        REC_TRY(rec_alloc((void **)&m->dbuf[k], (size_t)m->max_batch * widest * sizeof(float),
                          "MLP activation gradients"));
    for (int l = 0; l < L; l++) {
        int relu = l < L - 1 || last_relu;
        REC_TRY(rec_linear_init(&m->layers[l], d, sizes[l], sizes[l + 1], relu, m->max_batch, m->prec));
        /* facebookresearch/dlrm create_mlp: W ~ N(0, sqrt(2/(m+n))), b ~ N(0, sqrt(1/m)),
         * m = out, n = in. */
        rec_rng r;
        rec_rng_seed(&r, seed, (uint64_t)l);
        double sw = sqrt(2.0 / (double)(sizes[l] + sizes[l + 1])), sb = sqrt(1.0 / sizes[l + 1]);
        float *W = m->params + m->w_off[l], *b = m->params + m->b_off[l];
        for (size_t i = 0; i < (size_t)sizes[l] * sizes[l + 1]; i++) W[i] = (float)(sw * rec_rng_normal(&r));
        for (int i = 0; i < sizes[l + 1]; i++) b[i] = (float)(sb * rec_rng_normal(&r));
    }
    return REC_OK;
}

size_t rec_mlp_param_count(const int *sizes, int n_sizes) {
    if (n_sizes < 2) return 0;
    size_t p = 0;
    for (int l = 0; l + 1 < n_sizes; l++) {
        if (sizes[l] < 1 || sizes[l + 1] < 1) return 0;
        p += (size_t)sizes[l] * sizes[l + 1] + sizes[l + 1];
    }
    return p;
}

rec_status rec_mlp_init(rec_mlp **out, rec_dnn *d, const int *sizes, int n_sizes,
                        int last_relu, int max_batch, rec_precision prec, uint64_t seed) {
    return rec_mlp_init_view(out, d, sizes, n_sizes, last_relu, max_batch, prec, seed, NULL, NULL);
}

/* Builds the layers and the flat blocks (parameters and gradients unless the caller gives
 * views, activations), all sized once for max_batch, and draws the initial parameters. On
 * error nothing is leaked. */
rec_status rec_mlp_init_view(rec_mlp **out, rec_dnn *d, const int *sizes, int n_sizes,
                             int last_relu, int max_batch, rec_precision prec, uint64_t seed,
                             float *params, float *grads) {
    *out = NULL;
    if ((params == NULL) != (grads == NULL))
        return rec_errorf(REC_EINVAL, "MLP: give both parameter and gradient views, or neither");
    if (n_sizes < 2)
        return rec_errorf(REC_EINVAL, "MLP: needs at least 2 sizes (input and output width), got %d", n_sizes);
    for (int i = 0; i < n_sizes; i++)
        if (sizes[i] < 1)
            return rec_errorf(REC_EINVAL, "MLP: size %d is %d; every width must be >= 1", i, sizes[i]);
    if (max_batch < 1) return rec_errorf(REC_EINVAL, "MLP: max_batch must be >= 1, got %d", max_batch);
    rec_mlp *m;
    REC_TRY(rec_alloc((void **)&m, sizeof *m, "MLP"));
    m->n_layers = n_sizes - 1;
    m->max_batch = max_batch;
    m->prec = prec;
    m->owns_blocks = params == NULL;
    m->params = params;
    m->grads = grads;
    rec_status s = mlp_build(m, d, sizes, last_relu, seed);
    if (s != REC_OK) {
        rec_mlp_free(m);
        return s;
    }
    *out = m;
    return REC_OK;
}

int rec_mlp_layers(const rec_mlp *m) { return m->n_layers; }
int rec_mlp_last_relu(const rec_mlp *m) { return m->last_relu; }
rec_precision rec_mlp_precision(const rec_mlp *m) { return m->prec; }
int rec_mlp_in(const rec_mlp *m) { return m->sizes[0]; }

void rec_mlp_flops(const rec_mlp *m, int input_grad, double *fwd, double *bwd) {
    *fwd = *bwd = 0;
    for (int l = 0; l < m->n_layers; l++) {
        const double macs = (double)m->sizes[l] * m->sizes[l + 1];
        *fwd += 2.0 * macs;
        *bwd += 2.0 * macs * (1 + (l > 0 || input_grad));
    }
}
int rec_mlp_out(const rec_mlp *m) { return m->sizes[m->n_layers]; }
int rec_mlp_size(const rec_mlp *m, int i) { return m->sizes[i]; }
size_t rec_mlp_n_params(const rec_mlp *m) { return m->n_params; }
float *rec_mlp_params(rec_mlp *m) { return m->params; }
float *rec_mlp_grads(rec_mlp *m) { return m->grads; }
float *rec_mlp_weight(rec_mlp *m, int l) { return m->params + m->w_off[l]; }
float *rec_mlp_bias(rec_mlp *m, int l) { return m->params + m->b_off[l]; }
float *rec_mlp_grad_weight(rec_mlp *m, int l) { return m->grads + m->w_off[l]; }
float *rec_mlp_grad_bias(rec_mlp *m, int l) { return m->grads + m->b_off[l]; }

rec_status rec_mlp_forward(rec_mlp *m, int B, const float *x, const float **y) {
    const float *in = x;
    for (int l = 0; l < m->n_layers; l++) {
        float *o = m->acts + m->act_off[l];
        REC_TRY(rec_linear_forward(m->layers[l], B, in, rec_mlp_weight(m, l), rec_mlp_bias(m, l), o));
        in = o;
    }
    *y = in;
    return REC_OK;
}

rec_status rec_mlp_backward(rec_mlp *m, int B, const float *x, const float *dy, float *dx) {
    const float *g = dy;
    for (int l = m->n_layers - 1; l >= 0; l--) {
        const float *in = l == 0 ? x : m->acts + m->act_off[l - 1];
        float *gin = l == 0 ? dx : m->dbuf[l & 1];
        REC_TRY(rec_linear_backward(m->layers[l], B, in, rec_mlp_weight(m, l), m->acts + m->act_off[l], g, gin,
                                    rec_mlp_grad_weight(m, l), rec_mlp_grad_bias(m, l)));
        g = gin;
    }
    return REC_OK;
}
