/* Dense optimizers over a flat parameter block (nn.h), with PyTorch 1.13 semantics
 * (torch/optim/_functional.py: sgd, adagrad, adam; no weight decay, no momentum, no
 * lr decay, maximize False, amsgrad False).
 *
 * Each optimizer is one loop over P elements; state lives in one zeroed block per kind
 * (Adagrad's sum of squares; Adam's first and second moments), in the parameters' layout.
 * Arithmetic is float per element as in PyTorch's CPU kernels; Adam's bias corrections are
 * computed in double once per step. */
#include <math.h>

#include "rectrain/core.h"
#include "rectrain/nn.h"

struct rec_dense_opt {
    rec_dense_opt_config cfg;
    size_t n;
    int64_t t;      /* steps taken */
    float *s;       /* Adagrad: (P) sum of squared gradients */
    float *m, *v;   /* Adam: (P) first and second moments */
};

rec_dense_opt_config rec_dense_opt_defaults(rec_opt_kind kind, float lr) {
    rec_dense_opt_config c = {kind, lr, 0.9f, 0.999f, 0.0f};
    if (kind == REC_OPT_ADAGRAD) c.eps = 1e-10f;
    if (kind == REC_OPT_ADAM) c.eps = 1e-8f;
    return c;
}

static rec_status check_config(const rec_dense_opt_config *c) {
    if (c->kind != REC_OPT_SGD && c->kind != REC_OPT_ADAGRAD && c->kind != REC_OPT_ADAM)
        return rec_errorf(REC_EINVAL, "dense optimizer: unknown kind %d (want SGD, ADAGRAD or ADAM)", (int)c->kind);
    if (!(c->lr > 0.0f) || isinf(c->lr))
        return rec_errorf(REC_EINVAL, "dense optimizer: lr is %g; it must be a finite number > 0", c->lr);
    if (c->kind != REC_OPT_SGD && !(c->eps >= 0.0f && !isinf(c->eps)))
        return rec_errorf(REC_EINVAL, "dense optimizer: eps is %g; it must be finite and >= 0", c->eps);
    if (c->kind == REC_OPT_ADAM) {
        if (!(c->beta1 >= 0.0f && c->beta1 < 1.0f))
            return rec_errorf(REC_EINVAL, "dense optimizer: Adam beta1 is %g; it must lie in [0, 1)", c->beta1);
        if (!(c->beta2 >= 0.0f && c->beta2 < 1.0f))
            return rec_errorf(REC_EINVAL, "dense optimizer: Adam beta2 is %g; it must lie in [0, 1)", c->beta2);
    }
    return REC_OK;
}

void rec_dense_opt_free(rec_dense_opt *o) {
    if (!o) return;
    rec_free(o->s);
    rec_free(o->m);
    rec_free(o->v);
    rec_free(o);
}

/* Validates cfg and allocates the zeroed state for n parameters. */
rec_status rec_dense_opt_init(rec_dense_opt **out, const rec_dense_opt_config *cfg, size_t n) {
    *out = NULL;
    REC_TRY(check_config(cfg));
    rec_dense_opt *o;
    REC_TRY(rec_alloc((void **)&o, sizeof *o, "dense optimizer"));
    o->cfg = *cfg;
    o->n = n;
    size_t bytes = (n ? n : 1) * sizeof(float);
    rec_status s = REC_OK;
    if (cfg->kind == REC_OPT_ADAGRAD) s = rec_alloc((void **)&o->s, bytes, "Adagrad state");
    if (cfg->kind == REC_OPT_ADAM) {
        s = rec_alloc((void **)&o->m, bytes, "Adam first moment");
        if (s == REC_OK) s = rec_alloc((void **)&o->v, bytes, "Adam second moment");
    }
    if (s != REC_OK) {
        rec_dense_opt_free(o);
        return s;
    }
    *out = o;
    return REC_OK;
}

int64_t rec_dense_opt_steps(const rec_dense_opt *o) { return o->t; }
void rec_dense_opt_set_steps(rec_dense_opt *o, int64_t t) { o->t = t; }
void rec_dense_opt_set_lr(rec_dense_opt *o, float lr) { o->cfg.lr = lr; }

float *rec_dense_opt_state(rec_dense_opt *o, int k) {
    if (o->cfg.kind == REC_OPT_ADAGRAD) return k == 0 ? o->s : NULL;
    if (o->cfg.kind == REC_OPT_ADAM) return k == 0 ? o->m : k == 1 ? o->v : NULL;
    return NULL;
}

rec_status rec_dense_opt_step(rec_dense_opt *o, float *params, const float *grads, size_t n) {
    if (n != o->n)
        return rec_errorf(REC_EINVAL, "dense optimizer: step over %zu parameters, but it was initialised for %zu", n, o->n);
    const float lr = o->cfg.lr, eps = o->cfg.eps;
    o->t++;
    switch (o->cfg.kind) {
    case REC_OPT_SGD:
        /* one rounding, as ATen's add_(grad, alpha=-lr) (vec::fmadd) */
        for (size_t i = 0; i < n; i++) params[i] = fmaf(-lr, grads[i], params[i]);
        break;
    case REC_OPT_ADAGRAD: {
        float *s = o->s;
        for (size_t i = 0; i < n; i++) {
            s[i] += grads[i] * grads[i];
            params[i] -= lr * (grads[i] / (sqrtf(s[i]) + eps));
        }
        break;
    }
    case REC_OPT_ADAM: {
        const float b1 = o->cfg.beta1, b2 = o->cfg.beta2;
        const double bc1 = 1.0 - pow(b1, (double)o->t), bc2 = 1.0 - pow(b2, (double)o->t);
        const float step = (float)(lr / bc1), bc2_sqrt = (float)sqrt(bc2);
        float *m = o->m, *v = o->v;
        for (size_t i = 0; i < n; i++) {
            const float g = grads[i];
            m[i] = b1 * m[i] + (1.0f - b1) * g;
            v[i] = b2 * v[i] + (1.0f - b2) * (g * g);
            params[i] -= step * (m[i] / (sqrtf(v[i]) / bc2_sqrt + eps));
        }
        break;
    }
    }
    return REC_OK;
}
