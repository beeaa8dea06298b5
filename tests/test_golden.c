/* The four models (model.h) against PyTorch: tests/data/golden_v1.bin, written by
 * dev/golden_models.py from torch 1.13 models built exactly as model.h defines them
 * (EmbeddingBag with offsets, float32, one thread).
 *
 * For every model case of the fixture (DLRM dot, DLRM dot + self-interaction with weighted
 * bags, DLRM cat with mean pooling, DCN with 2 cross layers, DeepFM with mean pooling,
 * Wide&Deep; tables of 7, 1, 13, 5 rows; bags of 0..3 ids with empty bags and duplicate ids):
 *  - the C model is built from the fixture's config, every parameter is loaded by its model.h
 *    name (shapes checked, and every PARAM tensor of the model must be in the fixture);
 *  - step 0 on batch 0: logits, the loss, every dense parameter's gradient (found in the
 *    gradient block at the parameter's offset in the parameter block), and the dense (R, E)
 *    gradient of every table, obtained by scattering rec_model_emb_grad with
 *    rec_embed_grad_ref;
 *  - three optimizer combinations (SGD + SGD, Adagrad + Adagrad, Adam + row-wise Adagrad with
 *    warmup and decay), each from the initial parameters: rec_lr_scale against LambdaLR's
 *    scales, and the losses of 10 rec_model_train_step calls on batches 1..10;
 *  - step 0 in bf16 (train.precision "bf16") against torch.autocast: see step0_bf16;
 *  - the reader's rejections (truncated, bad magic, bad version, trailing bytes, missing).
 *
 * Tolerances. Step 0 (one forward/backward in float32 on both sides, summation orders
 * differing): per tensor, max |got - ref| <= 1e-5 * max |ref| over the tensor. The widths are
 * tiny (K <= 27 terms per sum), so a correct float32 result errs by ~K * 6e-8 relative to the
 * tensor's scale, well inside 1e-5, while a wrong index, a missing term or a wrong scale factor
 * (mean pooling, 1/B) errs by O(1). Normalising by the tensor's largest magnitude rather than
 * element-wise keeps elements that cancel to ~0 from failing a correct result. The loss:
 * |got - ref| <= 1e-5 |ref|. Training losses after up to 10 steps: |got - ref| <= 1e-4 |ref|;
 * the float32 differences of each step feed the next, and Adagrad's/Adam's divisions by
 * small square roots amplify them, so the bound is looser, but still far below the change
 * one step makes to the loss (~1e-2).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "golden.h"
#include "rectrain/core.h"
#include "rectrain/model.h"

enum { CFG_KIND, CFG_DN, CFG_F, CFG_E, CFG_POOL, CFG_INTERACT, CFG_SELF, CFG_WEIGHTED, CFG_CROSS,
       CFG_B, CFG_NBATCH, CFG_LEN };
enum { OPT_DKIND, OPT_DLR, OPT_SKIND, OPT_SLR, OPT_WARMUP, OPT_DSTART, OPT_DSTEPS, OPT_POWER,
       OPT_END, OPT_LEN };

static const double TOL_STEP0 = 1e-5, TOL_TRAIN = 1e-4;
/* Largest relative errors of the current case, printed beside its verdict. */
static double g_worst_step0, g_worst_train;

/* ---- fixture access ------------------------------------------------------------------------ */

static const golden_record *need(const golden_file *g, const char *name, int dtype, int64_t numel) {
    const golden_record *r = golden_get(g, name, dtype, numel);
    CHECK(r != NULL, "fixture record \"%s\" missing or of the wrong type/size (dtype %d, numel %lld)",
          name, dtype, (long long)numel);
    return r;
}

/* Splits a text record into its '\n'-separated lines: out[i] NUL-terminated, returns count. */
static int split_lines(const golden_record *r, char out[][64], int max) {
    int n = 0;
    int64_t start = 0;
    const char *s = r->data;
    for (int64_t i = 0; i <= r->numel && n < max; i++) {
        if (i == r->numel || s[i] == '\n') {
            int64_t l = i - start < 63 ? i - start : 63;
            memcpy(out[n], s + start, (size_t)l);
            out[n][l] = '\0';
            n++;
            start = i + 1;
        }
    }
    return n;
}

/* max |got - ref| <= tol * max |ref| over n elements; prints the worst element on failure. */
static void check_tensor(const char *what, const float *got, const float *ref, int64_t n, double tol) {
    double scale = 0, worst = -1;
    int64_t wi = 0;
    int nan = 0;
    for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs((double)ref[i]));
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - (double)ref[i]);
        if (e != e) nan = 1, wi = i;
        else if (e > worst) worst = e, wi = i;
    }
    if (scale > 0) g_worst_step0 = fmax(g_worst_step0, worst / scale);
    CHECK(!nan && worst <= tol * scale,
          "%s: max |got - ref| = %.3g > %.0e * max|ref| (%.3g); at [%lld] got %.9g ref %.9g%s", what,
          worst, tol, scale, (long long)wi, n ? got[wi] : 0.0, n ? ref[wi] : 0.0, nan ? " (NaN)" : "");
}

/* ---- model and batch from the fixture ------------------------------------------------------- */

typedef struct gcase {
    const char *name;
    const int64_t *cfg;     /* (CFG_LEN) */
    const int64_t *rows;    /* (F) */
    const golden_record *bottom, *top, *deep;
} gcase;

static int copy_widths(const golden_record *r, int *out) {
    const int64_t *w = r->data;
    for (int64_t i = 0; i < r->numel && i < REC_MLP_MAX_LAYERS; i++) out[i] = (int)w[i];
    return (int)r->numel;
}

/* A bound config for the case with the optimizer combination opt (OPT_LEN doubles). */
static rec_status make_config(const gcase *gc, const double *opt, rec_model_config *c) {
    const int64_t *k = gc->cfg;
    rec_model_config_default(c, (rec_model_kind)k[CFG_KIND]);
    snprintf(c->name, sizeof c->name, "golden_%s", gc->name);
    c->emb_dim = (int)k[CFG_E];
    c->pooling = k[CFG_POOL] ? REC_POOL_MEAN : REC_POOL_SUM;
    c->interaction = k[CFG_INTERACT] ? REC_INTERACT_CAT : REC_INTERACT_DOT;
    c->self_interaction = (int)k[CFG_SELF];
    c->cross_layers = (int)k[CFG_CROSS];
    c->n_bottom = copy_widths(gc->bottom, c->bottom);
    c->n_top = copy_widths(gc->top, c->top);
    c->n_deep = copy_widths(gc->deep, c->deep);
    c->dense_opt = rec_dense_opt_defaults((rec_opt_kind)opt[OPT_DKIND], (float)opt[OPT_DLR]);
    c->sparse_opt = rec_sparse_opt_defaults((rec_sparse_opt_kind)opt[OPT_SKIND], (float)opt[OPT_SLR]);
    c->schedule.warmup_steps = (int64_t)opt[OPT_WARMUP];
    c->schedule.decay_start = (int64_t)opt[OPT_DSTART];
    c->schedule.decay_steps = (int64_t)opt[OPT_DSTEPS];
    c->schedule.power = opt[OPT_POWER];
    c->schedule.end_scale = opt[OPT_END];
    c->batch_size = k[CFG_B];
    return rec_model_config_bind(c, (int)k[CFG_DN], (int)k[CFG_F], gc->rows, "golden");
}

/* Copies every CASE/param/NAME record into the model's tensor NAME (shape checked); checks
 * that the model has no PARAM tensor the fixture does not set. Returns 0 on any mismatch. */
static int load_params(const golden_file *g, const gcase *gc, rec_model *m) {
    char prefix[96];
    snprintf(prefix, sizeof prefix, "%s/param/", gc->name);
    size_t pl = strlen(prefix);
    int loaded = 0, ok = 1;
    for (int i = 0; i < g->n; i++) {
        const golden_record *r = &g->rec[i];
        if (strncmp(r->name, prefix, pl) != 0) continue;
        const rec_tensor *t = rec_model_tensor(m, r->name + pl);
        int shape_ok = t && t->role == REC_TENSOR_PARAM && r->dtype == GOLDEN_F32 && t->ndim == r->ndim &&
                       t->shape[0] == r->dims[0] && (t->ndim == 1 || t->shape[1] == r->dims[1]);
        CHECK(shape_ok, "%s: the model's tensor \"%s\" is missing or its shape differs from the fixture's "
              "(%d dims: %lld x %lld)", gc->name, r->name + pl, r->ndim, (long long)r->dims[0],
              (long long)(r->ndim > 1 ? r->dims[1] : 0));
        if (!shape_ok) {
            ok = 0;
            continue;
        }
        memcpy(t->data, r->data, (size_t)r->numel * sizeof(float));
        loaded++;
    }
    const rec_tensor *ts;
    int n = rec_model_tensors(m, &ts), n_params = 0;
    for (int i = 0; i < n; i++) n_params += ts[i].role == REC_TENSOR_PARAM;
    CHECK(loaded == n_params, "%s: loaded %d parameters from the fixture, the model has %d", gc->name, loaded,
          n_params);
    return ok && loaded == n_params;
}

/* Fills b (initialised for B rows, Dn, F) from CASE/batchK/... Returns 0 when a record is missing. */
static int load_batch(const golden_file *g, const gcase *gc, int k, rec_batch *b) {
    const int64_t B = gc->cfg[CFG_B], Dn = gc->cfg[CFG_DN], F = gc->cfg[CFG_F];
    char name[256];
    snprintf(name, sizeof name, "%.63s/batch%d/label", gc->name, k);
    const golden_record *lab = need(g, name, GOLDEN_F32, B);
    snprintf(name, sizeof name, "%.63s/batch%d/dense", gc->name, k);
    const golden_record *den = need(g, name, GOLDEN_F32, B * Dn);
    if (!lab || !den) return 0;
    b->n = B;
    memcpy(b->label, lab->data, (size_t)B * sizeof(float));
    memcpy(b->dense, den->data, (size_t)(B * Dn) * sizeof(float));
    for (int f = 0; f < F; f++) {
        snprintf(name, sizeof name, "%.63s/batch%d/sparse%d/offsets", gc->name, k, f);
        const golden_record *off = need(g, name, GOLDEN_I64, B + 1);
        snprintf(name, sizeof name, "%.63s/batch%d/sparse%d/indices", gc->name, k, f);
        const golden_record *idx = need(g, name, GOLDEN_I64, -1);
        const golden_record *w = NULL;
        if (gc->cfg[CFG_WEIGHTED]) {
            snprintf(name, sizeof name, "%.63s/batch%d/sparse%d/weights", gc->name, k, f);
            w = need(g, name, GOLDEN_F32, idx ? idx->numel : -1);
        }
        if (!off || !idx || (gc->cfg[CFG_WEIGHTED] && !w)) return 0;
        const int64_t *o = off->data;
        CHECK(o[0] == 0 && o[B] == idx->numel, "%s batch %d feature %d: offsets end at %lld, %lld ids", gc->name,
              k, f, (long long)o[B], (long long)idx->numel);
        rec_status s = rec_batch_set_wide(b, f, 1);
        if (!s) s = rec_batch_reserve_nnz(b, f, idx->numel, w != NULL);
        CHECK(s == REC_OK, "reserve: %s", rec_errmsg());
        if (s != REC_OK) return 0;
        memcpy(b->sparse[f].offsets, o, (size_t)(B + 1) * sizeof(int64_t));
        memcpy(b->sparse[f].ids64, idx->data, (size_t)idx->numel * sizeof(int64_t));
        if (w) memcpy(b->sparse[f].weights, w->data, (size_t)w->numel * sizeof(float));
        /* held as int32, as the trainer's loader holds ids of tables under 2^31 rows */
        s = rec_batch_set_wide(b, f, 0);
        CHECK(s == REC_OK, "narrow: %s", rec_errmsg());
        if (s != REC_OK) return 0;
    }
    return 1;
}

/* ---- step 0: logits, loss, gradients ----------------------------------------------------------- */

/* Dense (R_f, dim) gradient of every table of embedding set `which` (0 emb, 1 lin) from the
 * model's pooled-embedding gradient, compared to the fixture's CASE/grad/{emb,lin}.f.weight. */
static void check_table_grads(const golden_file *g, const gcase *gc, rec_model *m, const rec_batch *b, int which) {
    const int F = (int)gc->cfg[CFG_F], B = (int)gc->cfg[CFG_B];
    const int dim = which ? 1 : (int)gc->cfg[CFG_E];
    const rec_model_config *c = rec_model_get_config(m);
    const float *demb = rec_model_emb_grad(m, which);
    int has_lin = c->kind == REC_MODEL_DEEPFM || c->kind == REC_MODEL_WIDE_DEEP;
    if (which == 1 && !has_lin) {
        CHECK(demb == NULL, "%s: a model without first-order tables returned a lin gradient", gc->name);
        return;
    }
    CHECK(demb != NULL, "%s: rec_model_emb_grad(%d) is NULL", gc->name, which);
    if (!demb) return;
    int *dims = malloc(sizeof(int) * (size_t)F);
    double *dout = malloc(sizeof(double) * (size_t)B * F * dim);
    double **grads = calloc((size_t)F, sizeof(double *));
    for (int f = 0; f < F; f++) {
        dims[f] = dim;
        grads[f] = malloc(sizeof(double) * (size_t)gc->rows[f] * dim);
        for (int64_t i = 0; i < gc->rows[f] * dim; i++) grads[f][i] = NAN;
    }
    for (int64_t i = 0; i < (int64_t)B * F * dim; i++) dout[i] = demb[i];
    rec_embed_grad_ref(F, gc->rows, dims, c->pooling, b, 0, dout, grads);
    for (int f = 0; f < F; f++) {
        char name[256];
        snprintf(name, sizeof name, "%.63s/grad/%s.%d.weight", gc->name, which ? "lin" : "emb", f);
        const golden_record *ref = need(g, name, GOLDEN_F32, gc->rows[f] * dim);
        if (ref) {
            float *got = malloc(sizeof(float) * (size_t)ref->numel);
            for (int64_t i = 0; i < ref->numel; i++) got[i] = (float)grads[f][i];
            check_tensor(name, got, ref->data, ref->numel, TOL_STEP0);
            free(got);
        }
        free(grads[f]);
    }
    free(grads);
    free(dout);
    free(dims);
}

static void step0(const golden_file *g, const gcase *gc, const double *opt) {
    const int B = (int)gc->cfg[CFG_B];
    rec_model_config c;
    rec_status s = make_config(gc, opt, &c);
    CHECK(s == REC_OK, "%s: config: %s", gc->name, rec_errmsg());
    if (s != REC_OK) {
        rec_model_config_free(&c);
        return;
    }
    rec_model *m;
    s = rec_model_init(&m, &c, B, 1);
    CHECK(s == REC_OK, "%s: init: %s", gc->name, rec_errmsg());
    rec_model_config_free(&c);
    if (s != REC_OK) return;
    rec_batch b;
    s = rec_batch_init(&b, B, (int32_t)gc->cfg[CFG_DN], (int32_t)gc->cfg[CFG_F], 4);
    CHECK(s == REC_OK, "batch init: %s", rec_errmsg());
    if (s != REC_OK) {
        rec_model_free(m);
        return;
    }
    char name[256];
    if (load_params(g, gc, m) && load_batch(g, gc, 0, &b)) {
        const float *logits;
        s = rec_model_forward(m, &b, &logits);
        CHECK(s == REC_OK, "%s: forward: %s", gc->name, rec_errmsg());
        snprintf(name, sizeof name, "%.63s/step0/logits", gc->name);
        const golden_record *ref = need(g, name, GOLDEN_F32, B);
        if (s == REC_OK && ref) check_tensor(name, logits, ref->data, B, TOL_STEP0);
        double loss = NAN;
        float *dlogits = malloc(sizeof(float) * (size_t)B);
        if (s == REC_OK) s = rec_bce_forward_backward(B, logits, b.label, &loss, dlogits);
        snprintf(name, sizeof name, "%.63s/step0/loss", gc->name);
        ref = need(g, name, GOLDEN_F32, 1);
        if (ref) {
            double want = ((const float *)ref->data)[0];
            CHECK(fabs(loss - want) <= TOL_STEP0 * fabs(want), "%s: loss %.9g, torch %.9g", gc->name, loss, want);
        }
        /* Poison the gradient block: backward must overwrite every element. */
        float *params = rec_model_dense_params(m), *grads = rec_model_dense_grads(m);
        const size_t P = rec_model_n_dense_params(m);
        for (size_t i = 0; i < P; i++) grads[i] = NAN;
        if (s == REC_OK) s = rec_model_backward(m, &b, dlogits);
        CHECK(s == REC_OK, "%s: backward: %s", gc->name, rec_errmsg());
        free(dlogits);
        const rec_tensor *ts;
        int n = rec_model_tensors(m, &ts), n_dense = 0;
        for (int i = 0; s == REC_OK && i < n; i++) {
            const rec_tensor *t = &ts[i];
            if (t->role != REC_TENSOR_PARAM || !strncmp(t->name, "emb.", 4) || !strncmp(t->name, "lin.", 4))
                continue;
            ptrdiff_t off = t->data - params;
            int64_t numel = rec_tensor_numel(t);
            CHECK(off >= 0 && (size_t)off + (size_t)numel <= P, "%s: %s is not inside the dense block", gc->name,
                  t->name);
            snprintf(name, sizeof name, "%.63s/grad/%s", gc->name, t->name);
            ref = need(g, name, GOLDEN_F32, numel);
            if (ref && off >= 0 && (size_t)off + (size_t)numel <= P)
                check_tensor(name, grads + off, ref->data, numel, TOL_STEP0), n_dense += (int)numel;
        }
        CHECK(s != REC_OK || (size_t)n_dense == P, "%s: fixture gradients cover %d of the %zu dense parameters",
              gc->name, n_dense, P);
        if (s == REC_OK) {
            check_table_grads(g, gc, m, &b, 0);
            check_table_grads(g, gc, m, &b, 1);
        }
    }
    rec_batch_free(&b);
    rec_model_free(m);
}

/* ---- step 0 in bf16 against torch.autocast ------------------------------------------------------ */

/* The bf16 model's step-0 logits and loss against torch.autocast("cpu", bfloat16) on the same
 * parameters and batch. Both multiply bf16-rounded operands with fp32 sums, but autocast also
 * rounds every linear/matmul OUTPUT, the biases and DCN's cross products to bf16, where
 * rectrain keeps them fp32 (the next layer rounds its input, so the two agree wherever an
 * output only feeds a product). The remaining gap is a few roundings of relative size
 * u = 2^-8 each along the path to the logit, so the bound is TOL_BF16 = 4u = 2^-6 times the
 * largest |logit| (max-normalised as TOL_STEP0). The fp32 model must sit outside that band
 * somewhere, i.e. the bf16 goldens are not just the fp32 ones: printed as the bf16 effect. */
static const double TOL_BF16 = 0x1p-6;
static double g_worst_bf16, g_bf16_effect;

static void step0_bf16(const golden_file *g, const gcase *gc, const double *opt) {
    const int B = (int)gc->cfg[CFG_B];
    rec_model_config c;
    rec_status s = make_config(gc, opt, &c);
    c.precision = REC_PRECISION_BF16;
    rec_model *m = NULL;
    if (!s) s = rec_model_init(&m, &c, B, 1);
    rec_model_config_free(&c);
    CHECK(s == REC_OK, "%s: bf16 model: %s", gc->name, rec_errmsg());
    rec_batch b;
    if (!s) s = rec_batch_init(&b, B, (int32_t)gc->cfg[CFG_DN], (int32_t)gc->cfg[CFG_F], 4);
    else return;
    char name[256];
    snprintf(name, sizeof name, "%.63s/bf16/step0/logits", gc->name);
    const golden_record *ref = need(g, name, GOLDEN_F32, B);
    snprintf(name, sizeof name, "%.63s/step0/logits", gc->name);
    const golden_record *ref32 = need(g, name, GOLDEN_F32, B);
    snprintf(name, sizeof name, "%.63s/bf16/step0/loss", gc->name);
    const golden_record *lref = need(g, name, GOLDEN_F32, 1);
    const float *logits;
    if (!s && ref && ref32 && lref && load_params(g, gc, m) && load_batch(g, gc, 0, &b) &&
        (s = rec_model_forward(m, &b, &logits)) == REC_OK) {
        const float *want = ref->data, *want32 = ref32->data;
        double scale = 0, err = 0, effect = 0, ours = 0;
        for (int i = 0; i < B; i++) scale = fmax(scale, fabs(want[i]));
        for (int i = 0; i < B; i++) {
            err = fmax(err, fabs(logits[i] - want[i]));
            effect = fmax(effect, fabs(want32[i] - want[i]));
            ours = fmax(ours, fabs(logits[i] - want32[i]));
        }
        g_worst_bf16 = err / scale;
        g_bf16_effect = effect / scale;
        CHECK(err <= TOL_BF16 * scale, "%s: bf16 logits off torch autocast by %.3g (bound %.3g)", gc->name, err,
              TOL_BF16 * scale);
        CHECK(ours > 100 * TOL_STEP0 * scale, "%s: bf16 logits within %.2g of fp32's: is the model rounding at all?",
              gc->name, ours / scale);
        double loss;
        s = rec_bce_forward_backward(B, logits, b.label, &loss, NULL);
        double lw = ((const float *)lref->data)[0];
        CHECK(s == REC_OK && fabs(loss - lw) <= TOL_BF16 * fabs(lw), "%s: bf16 loss %.7g, torch autocast %.7g",
              gc->name, loss, lw);
    }
    CHECK(s == REC_OK, "%s: bf16 forward: %s", gc->name, rec_errmsg());
    rec_batch_free(&b);
    rec_model_free(m);
}

/* ---- training: 10 steps per optimizer combination -------------------------------------------- */

static void train(const golden_file *g, const gcase *gc, const char *opt_name) {
    const int B = (int)gc->cfg[CFG_B], steps = (int)gc->cfg[CFG_NBATCH] - 1;
    char name[256];
    snprintf(name, sizeof name, "%.63s/%.63s/config", gc->name, opt_name);
    const golden_record *oc = need(g, name, GOLDEN_F64, OPT_LEN);
    snprintf(name, sizeof name, "%.63s/%.63s/lr_scales", gc->name, opt_name);
    const golden_record *scales = need(g, name, GOLDEN_F64, steps);
    snprintf(name, sizeof name, "%.63s/%.63s/losses", gc->name, opt_name);
    const golden_record *losses = need(g, name, GOLDEN_F32, steps);
    if (!oc || !scales || !losses) return;
    rec_model_config c;
    rec_status s = make_config(gc, oc->data, &c);
    CHECK(s == REC_OK, "%s %s: config: %s", gc->name, opt_name, rec_errmsg());
    if (s != REC_OK) {
        rec_model_config_free(&c);
        return;
    }
    for (int t = 0; t < steps; t++) {
        double got = rec_lr_scale(&c.schedule, t), want = ((const double *)scales->data)[t];
        CHECK(fabs(got - want) <= 1e-12, "%s %s: rec_lr_scale(step %d) = %.17g, LambdaLR %.17g", gc->name, opt_name, t,
              got, want);
    }
    rec_model *m;
    s = rec_model_init(&m, &c, B, 1);
    CHECK(s == REC_OK, "%s %s: init: %s", gc->name, opt_name, rec_errmsg());
    rec_model_config_free(&c);
    if (s != REC_OK) return;
    rec_batch b;
    s = rec_batch_init(&b, B, (int32_t)gc->cfg[CFG_DN], (int32_t)gc->cfg[CFG_F], 4);
    CHECK(s == REC_OK, "batch init: %s", rec_errmsg());
    const int have_batch = s == REC_OK;
    if (have_batch && load_params(g, gc, m)) {
        int bad = 0;
        for (int k = 1; k <= steps && !bad; k++) {
            if (!load_batch(g, gc, k, &b)) break;
            double loss = NAN;
            s = rec_model_train_step(m, &b, &loss);
            CHECK(s == REC_OK, "%s %s: step %d: %s", gc->name, opt_name, k - 1, rec_errmsg());
            if (s != REC_OK) break;
            double want = ((const float *)losses->data)[k - 1];
            bad = !(fabs(loss - want) <= TOL_TRAIN * fabs(want));
            g_worst_train = fmax(g_worst_train, fabs(loss - want) / fabs(want));
            CHECK(!bad, "%s %s: loss of step %d (batch %d) %.9g, torch %.9g (rel %.2g)", gc->name, opt_name, k - 1, k,
                  loss, want, fabs(loss - want) / fabs(want));
        }
        CHECK(bad || s != REC_OK || rec_model_steps(m) == steps, "%s %s: %lld steps counted, want %d", gc->name,
              opt_name, (long long)rec_model_steps(m), steps);
    }
    if (have_batch) rec_batch_free(&b);
    rec_model_free(m);
}

/* ---- the reader's rejections --------------------------------------------------------------------- */

/* Writes len bytes of buf to a temp file and returns its path (static buffer). */
static const char *write_temp(const unsigned char *buf, size_t len) {
    static char path[64];
    snprintf(path, sizeof path, "/tmp/rec_golden_XXXXXX");
    int fd = mkstemp(path);
    if (fd < 0) return NULL;
    ssize_t w = write(fd, buf, len);
    close(fd);
    return w == (ssize_t)len ? path : NULL;
}

static void expect_reject(const unsigned char *buf, size_t len, rec_status want, const char *needle) {
    const char *p = write_temp(buf, len);
    CHECK(p != NULL, "cannot write a temp file");
    if (!p) return;
    golden_file g;
    rec_status s = golden_load(&g, p);
    CHECK_ERR(s, want, needle);
    CHECK(g.n == 0 && g.rec == NULL, "a refused file left %d records", g.n);
    golden_free(&g);
    unlink(p);
}

static void test_reader(const char *path) {
    FILE *fp = fopen(path, "rb");
    if (!fp) return;  /* the caller already failed on the load */
    fseek(fp, 0, SEEK_END);
    long len = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)len + 8);
    size_t got = fread(buf, 1, (size_t)len, fp);
    fclose(fp);
    CHECK(got == (size_t)len, "short read of %s", path);
    /* Truncations: inside the header, right after it, in a name, in the dims and in the data
     * of some record, and one byte short of the end. */
    size_t cuts[] = {5, 16, 19, 60, (size_t)len / 3, (size_t)len / 2 + 1, (size_t)len - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) expect_reject(buf, cuts[i], REC_EFORMAT, "truncated");
    unsigned char saved = buf[0];
    buf[0] = 'X';
    expect_reject(buf, (size_t)len, REC_EFORMAT, "bad magic");
    buf[0] = saved;
    buf[8] = 2;
    expect_reject(buf, (size_t)len, REC_EFORMAT, "version 2");
    buf[8] = 1;
    memset(buf + len, 0, 8);
    expect_reject(buf, (size_t)len + 8, REC_EFORMAT, "8 bytes after the last");
    /* The untouched copy reads back. */
    const char *p = write_temp(buf, (size_t)len);
    golden_file g;
    rec_status s = p ? golden_load(&g, p) : REC_EIO;
    CHECK(s == REC_OK && g.n > 0 && golden_find(&g, "cases") && !golden_find(&g, "no/such/record"),
          "copy of the fixture: %s", rec_errmsg());
    if (s == REC_OK) golden_free(&g);
    if (p) unlink(p);
    free(buf);
    s = golden_load(&g, "/nonexistent/golden_v1.bin");
    CHECK_ERR(s, REC_EIO, "cannot open the golden file");
}

int main(void) {
    const char *root = getenv("REC_SOURCE_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/tests/data/golden_v1.bin", root && *root ? root : "..");
    golden_file g;
    rec_status s = golden_load(&g, path);
    CHECK(s == REC_OK, "loading the fixture: %s (set REC_SOURCE_DIR to the source tree)", rec_errmsg());
    if (s != REC_OK) return check_report();
    test_reader(path);

    char cases[16][64], opts[8][64];
    const golden_record *rc = need(&g, "cases", GOLDEN_U8, -1), *ro = need(&g, "opts", GOLDEN_U8, -1);
    int n_cases = rc ? split_lines(rc, cases, 16) : 0, n_opts = ro ? split_lines(ro, opts, 8) : 0;
    CHECK(n_cases == 6 && n_opts == 3, "fixture lists %d cases and %d optimizer combos (want 6, 3)", n_cases,
          n_opts);
    for (int i = 0; i < n_cases; i++) {
        gcase gc = {cases[i], NULL, NULL, NULL, NULL, NULL};
        char name[256];
        snprintf(name, sizeof name, "%.63s/config", gc.name);
        const golden_record *r = need(&g, name, GOLDEN_I64, CFG_LEN);
        if (!r) continue;
        gc.cfg = r->data;
        snprintf(name, sizeof name, "%.63s/rows", gc.name);
        r = need(&g, name, GOLDEN_I64, gc.cfg[CFG_F]);
        gc.rows = r ? r->data : NULL;
        snprintf(name, sizeof name, "%.63s/bottom", gc.name);
        gc.bottom = need(&g, name, GOLDEN_I64, -1);
        snprintf(name, sizeof name, "%.63s/top", gc.name);
        gc.top = need(&g, name, GOLDEN_I64, -1);
        snprintf(name, sizeof name, "%.63s/deep", gc.name);
        gc.deep = need(&g, name, GOLDEN_I64, -1);
        if (!gc.rows || !gc.bottom || !gc.top || !gc.deep) continue;
        int before = check__failed;
        g_worst_step0 = g_worst_train = 0;
        snprintf(name, sizeof name, "%.63s/%.63s/config", gc.name, opts[0]);
        const golden_record *oc = need(&g, name, GOLDEN_F64, OPT_LEN);
        if (oc) step0(&g, &gc, oc->data), step0_bf16(&g, &gc, oc->data);
        for (int o = 0; o < n_opts; o++) train(&g, &gc, opts[o]);
        printf("%-16s %-18s (largest relative error: step 0 %.1e, training losses %.1e; bf16 logits %.1e "
               "vs autocast, whose own gap to fp32 is %.1e)\n", gc.name,
               check__failed == before ? "matches torch" : "DIFFERS from torch", g_worst_step0, g_worst_train,
               g_worst_bf16, g_bf16_effect);
    }
    golden_free(&g);
    return check_report();
}
