/* Model configs: JSON parsing, validation, binding to data, canonical JSON (model.h).
 *
 * ---- JSON format (version 1) ------------------------------------------------------------
 *
 *   {"format": "rectrain-model", "version": 1, "name": "dlrm_kaggle", "model": "dlrm",
 *    "tables": "data",                          or [1460, 583, ...]: rows per sparse feature
 *    "dense_features": "data",                  or Dn (an integer)
 *    "embedding": {"dim": 16, "pooling": "sum", "precision": "fp32"|"bf16",
 *                  "rounding": "stochastic"|"nearest"},   rounding: bf16 tables only
 *    "bottom_mlp": [512, 256, 64, 16],          DLRM: widths after the input; last = dim
 *    "top_mlp": [512, 256, 1],                  DLRM: widths after the interaction; last = 1
 *    "interaction": {"kind": "dot", "self": false},                         DLRM
 *    "deep_mlp": [512, 256],                    DCN: hidden widths; DeepFM, W&D: last = 1
 *    "cross_layers": 3,                         DCN
 *    "optimizer": {"dense":  {"kind": "sgd"|"adagrad"|"adam", "lr": 0.1,
 *                             "eps": ..., "beta1": 0.9, "beta2": 0.999},
 *                  "sparse": {"kind": "sgd"|"adagrad"|"rowwise_adagrad", "lr": 0.1,
 *                             "eps": ..., "init_acc": 0}},
 *    "lr_schedule": {"warmup_steps": 0, "decay_start": 0, "decay_steps": 0, "power": 2,
 *                    "end_scale": 0},
 *    "train": {"batch_size": 2048, "epochs": 1, "seed": 1, "eval_every": 0,
 *              "prep_spec": "configs/criteo_standard.json", "precision": "fp32"|"bf16"}}
 *
 * "format", "version" and "model" are required; everything else has the defaults of
 * rec_model_config_default for that model. Keys that do not apply to the model (e.g.
 * "cross_layers" for DLRM) and unknown keys are errors, so typos are caught. Errors are
 * REC_EINVAL "ORIGIN: $.path: what is wrong (got ...)".
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "rectrain/core.h"
#include "rectrain/model.h"

enum { CFG_MAX_WIDTH = 1 << 16, CFG_MAX_DIM = 4096, CFG_MAX_TABLES = 100000 };

static const char *const KIND_NAMES[] = {"dlrm", "dcn", "deepfm", "wide_deep"};

const char *rec_model_kind_name(rec_model_kind k) {
    return (unsigned)k < 4 ? KIND_NAMES[k] : "unknown";
}

int rec_model_kind_from_name(const char *name) {
    for (int k = 0; k < 4; k++)
        if (!strcmp(name, KIND_NAMES[k])) return k;
    return -1;
}

void rec_model_config_default(rec_model_config *c, rec_model_kind kind) {
    memset(c, 0, sizeof *c);
    c->kind = kind;
    snprintf(c->name, sizeof c->name, "%s_small", rec_model_kind_name(kind));
    c->emb_dim = 16;
    c->pooling = REC_POOL_SUM;
    c->interaction = REC_INTERACT_DOT;
    static const int bottom[] = {128, 64, 16}, top[] = {128, 64, 1};
    static const int deep_dcn[] = {256, 128, 64}, deep_fm[] = {256, 128, 1};
    if (kind == REC_MODEL_DLRM) {
        memcpy(c->bottom, bottom, sizeof bottom);
        c->n_bottom = 3;
        memcpy(c->top, top, sizeof top);
        c->n_top = 3;
    } else if (kind == REC_MODEL_DCN) {
        memcpy(c->deep, deep_dcn, sizeof deep_dcn);
        c->n_deep = 3;
        c->cross_layers = 3;
    } else {
        memcpy(c->deep, deep_fm, sizeof deep_fm);
        c->n_deep = 3;
    }
    c->dense_opt = rec_dense_opt_defaults(REC_OPT_SGD, 0.1f);
    c->sparse_opt = rec_sparse_opt_defaults(REC_SPARSE_SGD, 0.1f);
    c->schedule.power = 2.0;
    c->batch_size = 2048;
    c->epochs = 1;
    c->seed = 1;
}

void rec_model_config_train_default(rec_model_config *c) {
    rec_model_config_default(c, REC_MODEL_DLRM);
    snprintf(c->name, sizeof c->name, "dlrm_default");
    c->dense_opt = rec_dense_opt_defaults(REC_OPT_ADAGRAD, 0.01f);
    c->sparse_opt = rec_sparse_opt_defaults(REC_SPARSE_ROWWISE_ADAGRAD, 0.05f);
    c->batch_size = 1024;
}

void rec_model_config_free(rec_model_config *c) {
    free(c->table_rows);
    c->table_rows = NULL;
}

/* ---- parsing helpers ----------------------------------------------------------------------- */

typedef struct parser {
    const char *origin;
} parser;

static rec_status fail(const parser *p, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static rec_status fail(const parser *p, const char *path, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return rec_errorf(REC_EINVAL, "%s: %s: %s", p->origin, path, msg);
}

static const char *got(const cJSON *v, char *buf, size_t cap) {
    if (!v) snprintf(buf, cap, "nothing");
    else if (cJSON_IsNumber(v)) snprintf(buf, cap, "%.15g", v->valuedouble);
    else if (cJSON_IsString(v)) snprintf(buf, cap, "\"%.40s\"", v->valuestring);
    else if (cJSON_IsBool(v)) snprintf(buf, cap, "%s", cJSON_IsTrue(v) ? "true" : "false");
    else if (cJSON_IsArray(v)) snprintf(buf, cap, "an array");
    else if (cJSON_IsObject(v)) snprintf(buf, cap, "an object");
    else snprintf(buf, cap, "null");
    return buf;
}

/* Refuses keys of `obj` not in the NULL-terminated list `allowed`, and duplicate keys. */
static rec_status check_keys(const parser *p, const cJSON *obj, const char *path,
                             const char *const *allowed) {
    for (const cJSON *it = obj->child; it; it = it->next) {
        int ok = 0;
        for (const char *const *a = allowed; *a && !ok; a++) ok = !strcmp(*a, it->string);
        if (!ok) return fail(p, path, "unknown key \"%s\" (allowed here: see docs/models.md)", it->string);
        for (const cJSON *jt = it->next; jt; jt = jt->next)
            if (!strcmp(it->string, jt->string)) return fail(p, path, "key \"%s\" appears twice", it->string);
    }
    return REC_OK;
}

static rec_status get_int(const parser *p, const cJSON *obj, const char *key, const char *path,
                          int64_t lo, int64_t hi, int64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) return REC_OK;
    char b[64];
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < (double)lo ||
        v->valuedouble > (double)hi)
        return fail(p, path, "\"%s\" must be an integer in [%lld, %lld] (got %s)", key, (long long)lo,
                    (long long)hi, got(v, b, sizeof b));
    *out = (int64_t)v->valuedouble;
    return REC_OK;
}

static rec_status get_num(const parser *p, const cJSON *obj, const char *key, const char *path,
                          double lo, double hi, int open_lo, double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) return REC_OK;
    char b[64];
    double x = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!(open_lo ? x > lo : x >= lo) || !(x <= hi))
        return fail(p, path, "\"%s\" must be a number in %c%.15g, %.15g] (got %s)", key, open_lo ? '(' : '[', lo, hi,
                    got(v, b, sizeof b));
    *out = x;
    return REC_OK;
}

/* get_num for a value stored as a float: the bounds hold for the float it becomes too (an lr
 * of 1e-50 is above 0 but a float 0, which would train nothing and make the config's
 * canonical JSON, kept in checkpoints, unreadable). */
static rec_status get_fnum(const parser *p, const cJSON *obj, const char *key, const char *path,
                           double lo, double hi, int open_lo, float *out) {
    double x = *out;
    REC_TRY(get_num(p, obj, key, path, lo, hi, open_lo, &x));
    const float f = (float)x;
    if (!(open_lo ? f > lo : f >= lo) || !(f <= hi)) {
        char b[64];
        return fail(p, path, "\"%s\" must be a number in %c%.15g, %.15g] as a float (got %s, which is %.9g as a float)", key,
                    open_lo ? '(' : '[', lo, hi, got(cJSON_GetObjectItemCaseSensitive(obj, key), b, sizeof b), (double)f);
    }
    *out = f;
    return REC_OK;
}

static rec_status get_bool(const parser *p, const cJSON *obj, const char *key, const char *path, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) return REC_OK;
    char b[64];
    if (!cJSON_IsBool(v)) return fail(p, path, "\"%s\" must be true or false (got %s)", key, got(v, b, sizeof b));
    *out = cJSON_IsTrue(v);
    return REC_OK;
}

/* One of `names` (n of them) -> its index. */
static rec_status get_enum(const parser *p, const cJSON *obj, const char *key, const char *path,
                           const char *const *names, int n, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) return REC_OK;
    char b[64], list[256] = "";
    for (int i = 0; i < n; i++)
        if (cJSON_IsString(v) && !strcmp(v->valuestring, names[i])) {
            *out = i;
            return REC_OK;
        }
    for (int i = 0; i < n; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s\"%s\"", i ? ", " : "", names[i]);
    return fail(p, path, "\"%s\" must be one of %s (got %s)", key, list, got(v, b, sizeof b));
}

static rec_status get_object(const parser *p, const cJSON *obj, const char *key, const char *path,
                             const cJSON **out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    *out = NULL;
    if (!v) return REC_OK;
    char b[64];
    if (!cJSON_IsObject(v)) return fail(p, path, "\"%s\" must be an object (got %s)", key, got(v, b, sizeof b));
    *out = v;
    return REC_OK;
}

/* An array of 1..REC_MLP_MAX_LAYERS widths in [1, CFG_MAX_WIDTH]. */
static rec_status get_widths(const parser *p, const cJSON *obj, const char *key, int *w, int *n) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) return REC_OK;
    char b[64];
    int len = cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
    if (len < 1 || len > REC_MLP_MAX_LAYERS)
        return fail(p, "$", "\"%s\" must be an array of 1..%d layer widths (got %s)", key, REC_MLP_MAX_LAYERS,
                    len < 0 ? got(v, b, sizeof b) : len == 0 ? "an empty array" : "too many");
    int i = 0;
    for (const cJSON *it = v->child; it; it = it->next, i++) {
        if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) || it->valuedouble < 1 ||
            it->valuedouble > CFG_MAX_WIDTH) {
            char path[64];
            snprintf(path, sizeof path, "$.%s[%d]", key, i);
            return fail(p, path, "a layer width must be an integer in [1, %d] (got %s)", CFG_MAX_WIDTH,
                        got(it, b, sizeof b));
        }
        w[i] = (int)it->valuedouble;
    }
    *n = len;
    return REC_OK;
}

/* Keys that belong to each model kind (beyond the common ones). */
static int key_applies(rec_model_kind k, const char *key) {
    if (!strcmp(key, "bottom_mlp") || !strcmp(key, "top_mlp") || !strcmp(key, "interaction"))
        return k == REC_MODEL_DLRM;
    if (!strcmp(key, "cross_layers")) return k == REC_MODEL_DCN;
    if (!strcmp(key, "deep_mlp")) return k != REC_MODEL_DLRM;
    return 1;
}

static rec_status parse_optimizer(const parser *p, const cJSON *root, rec_model_config *c) {
    const cJSON *o, *d, *s;
    REC_TRY(get_object(p, root, "optimizer", "$", &o));
    if (!o) return REC_OK;
    static const char *const keys[] = {"dense", "sparse", NULL};
    REC_TRY(check_keys(p, o, "$.optimizer", keys));
    REC_TRY(get_object(p, o, "dense", "$.optimizer", &d));
    if (d) {
        static const char *const dk[] = {"kind", "lr", "eps", "beta1", "beta2", NULL};
        static const char *const names[] = {"sgd", "adagrad", "adam"};
        const char *path = "$.optimizer.dense";
        REC_TRY(check_keys(p, d, path, dk));
        int kind = c->dense_opt.kind;
        REC_TRY(get_enum(p, d, "kind", path, names, 3, &kind));
        float lr = c->dense_opt.lr;
        REC_TRY(get_fnum(p, d, "lr", path, 0, 1e6, 1, &lr));
        c->dense_opt = rec_dense_opt_defaults((rec_opt_kind)kind, lr);
        REC_TRY(get_fnum(p, d, "eps", path, 0, 1, 0, &c->dense_opt.eps));
        REC_TRY(get_fnum(p, d, "beta1", path, 0, 0.999999, 0, &c->dense_opt.beta1));
        REC_TRY(get_fnum(p, d, "beta2", path, 0, 0.999999, 0, &c->dense_opt.beta2));
    }
    REC_TRY(get_object(p, o, "sparse", "$.optimizer", &s));
    if (s) {
        static const char *const sk[] = {"kind", "lr", "eps", "init_acc", NULL};
        static const char *const names[] = {"sgd", "adagrad", "rowwise_adagrad"};
        const char *path = "$.optimizer.sparse";
        REC_TRY(check_keys(p, s, path, sk));
        int kind = c->sparse_opt.kind;
        REC_TRY(get_enum(p, s, "kind", path, names, 3, &kind));
        float lr = c->sparse_opt.lr;
        REC_TRY(get_fnum(p, s, "lr", path, 0, 1e6, 1, &lr));
        c->sparse_opt = rec_sparse_opt_defaults((rec_sparse_opt_kind)kind, lr);
        REC_TRY(get_fnum(p, s, "eps", path, 0, 1, 0, &c->sparse_opt.eps));
        REC_TRY(get_fnum(p, s, "init_acc", path, 0, 1e6, 0, &c->sparse_opt.init_acc));
    }
    return REC_OK;
}

static rec_status parse_schedule_train(const parser *p, const cJSON *root, rec_model_config *c) {
    const cJSON *s, *t;
    REC_TRY(get_object(p, root, "lr_schedule", "$", &s));
    if (s) {
        static const char *const keys[] = {"warmup_steps", "decay_start", "decay_steps", "power", "end_scale", NULL};
        const char *path = "$.lr_schedule";
        REC_TRY(check_keys(p, s, path, keys));
        const int64_t big = (int64_t)1 << 50;
        REC_TRY(get_int(p, s, "warmup_steps", path, 0, big, &c->schedule.warmup_steps));
        REC_TRY(get_int(p, s, "decay_start", path, 0, big, &c->schedule.decay_start));
        REC_TRY(get_int(p, s, "decay_steps", path, 0, big, &c->schedule.decay_steps));
        REC_TRY(get_num(p, s, "power", path, 0, 100, 1, &c->schedule.power));
        REC_TRY(get_num(p, s, "end_scale", path, 0, 1, 0, &c->schedule.end_scale));
        if (c->schedule.decay_steps > 0 && c->schedule.decay_start < c->schedule.warmup_steps)
            return fail(p, path, "\"decay_start\" (%lld) must not come before the end of the warm-up (%lld steps)",
                        (long long)c->schedule.decay_start, (long long)c->schedule.warmup_steps);
    }
    REC_TRY(get_object(p, root, "train", "$", &t));
    if (t) {
        static const char *const keys[] = {"batch_size", "epochs", "seed", "eval_every", "prep_spec", "precision", NULL};
        static const char *const precisions[] = {"fp32", "bf16"};
        const char *path = "$.train";
        REC_TRY(check_keys(p, t, path, keys));
        int prec = (int)c->precision;
        REC_TRY(get_enum(p, t, "precision", path, precisions, 2, &prec));
        c->precision = (rec_precision)prec;
        int64_t epochs = c->epochs, seed = (int64_t)c->seed;
        REC_TRY(get_int(p, t, "batch_size", path, 1, 1 << 20, &c->batch_size));
        REC_TRY(get_int(p, t, "epochs", path, 1, 10000, &epochs));
        REC_TRY(get_int(p, t, "seed", path, 0, ((int64_t)1 << 53), &seed));
        REC_TRY(get_int(p, t, "eval_every", path, 0, (int64_t)1 << 50, &c->eval_every));
        c->epochs = (int)epochs;
        c->seed = (uint64_t)seed;
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(t, "prep_spec");
        if (v) {
            char b[64];
            if (!cJSON_IsString(v) || !v->valuestring[0] || strlen(v->valuestring) >= sizeof c->prep_spec)
                return fail(p, path, "\"prep_spec\" must be a path of 1..%zu characters (got %s)",
                            sizeof c->prep_spec - 1, got(v, b, sizeof b));
            snprintf(c->prep_spec, sizeof c->prep_spec, "%s", v->valuestring);
        }
    }
    return REC_OK;
}

static rec_status parse_root(const parser *p, const cJSON *root, rec_model_config *c) {
    char b[64];
    if (!cJSON_IsObject(root)) return fail(p, "$", "a model config must be a JSON object (got %s)", got(root, b, sizeof b));
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "rectrain-model"))
        return fail(p, "$.format", "must be \"rectrain-model\" (got %s); is this a model config?", got(fmt, b, sizeof b));
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "version");
    if (!cJSON_IsNumber(ver) || ver->valuedouble != 1)
        return fail(p, "$.version", "this build reads version 1 (got %s)", got(ver, b, sizeof b));
    int kind = -1;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (!model) return fail(p, "$", "\"model\" is required: one of \"dlrm\", \"dcn\", \"deepfm\", \"wide_deep\"");
    REC_TRY(get_enum(p, root, "model", "$", KIND_NAMES, 4, &kind));
    rec_model_config_default(c, (rec_model_kind)kind);

    static const char *const keys[] = {"format", "version", "name", "model", "tables", "dense_features",
                                       "embedding", "bottom_mlp", "top_mlp", "interaction", "deep_mlp",
                                       "cross_layers", "optimizer", "lr_schedule", "train", NULL};
    REC_TRY(check_keys(p, root, "$", keys));
    for (const cJSON *it = root->child; it; it = it->next)
        if (!key_applies(c->kind, it->string))
            return fail(p, "$", "\"%s\" does not apply to model \"%s\"; remove it", it->string, KIND_NAMES[kind]);

    const cJSON *name = cJSON_GetObjectItemCaseSensitive(root, "name");
    if (name) {
        if (!cJSON_IsString(name) || !name->valuestring[0] || strlen(name->valuestring) >= REC_MODEL_NAME_MAX)
            return fail(p, "$.name", "must be a string of 1..%d characters (got %s)", REC_MODEL_NAME_MAX - 1,
                        got(name, b, sizeof b));
        snprintf(c->name, sizeof c->name, "%s", name->valuestring);
    }

    const cJSON *tables = cJSON_GetObjectItemCaseSensitive(root, "tables");
    if (tables && !(cJSON_IsString(tables) && !strcmp(tables->valuestring, "data"))) {
        int n = cJSON_IsArray(tables) ? cJSON_GetArraySize(tables) : -1;
        if (n < 1 || n > CFG_MAX_TABLES)
            return fail(p, "$.tables", "must be \"data\" (sizes from the data set) or an array of 1..%d row counts (got %s)",
                        CFG_MAX_TABLES, n == 0 ? "an empty array" : got(tables, b, sizeof b));
        c->table_rows = calloc((size_t)n, sizeof *c->table_rows);
        if (!c->table_rows) return rec_errorf(REC_ENOMEM, "%s: out of memory for %d tables", p->origin, n);
        int i = 0;
        for (const cJSON *it = tables->child; it; it = it->next, i++) {
            if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble) || it->valuedouble < 1 ||
                it->valuedouble > 9007199254740992.0) {
                char path[48];
                snprintf(path, sizeof path, "$.tables[%d]", i);
                return fail(p, path, "table rows must be an integer >= 1 (got %s)", got(it, b, sizeof b));
            }
            c->table_rows[i] = (int64_t)it->valuedouble;
        }
        c->n_sparse = n;
    }
    const cJSON *dn = cJSON_GetObjectItemCaseSensitive(root, "dense_features");
    if (dn && !(cJSON_IsString(dn) && !strcmp(dn->valuestring, "data"))) {
        int64_t v = -1;
        if (!cJSON_IsNumber(dn))
            return fail(p, "$", "\"dense_features\" must be \"data\" or an integer in [0, 65536] (got %s)", got(dn, b, sizeof b));
        REC_TRY(get_int(p, root, "dense_features", "$", 0, 65536, &v));
        c->n_dense = (int)v;
    }

    const cJSON *emb;
    REC_TRY(get_object(p, root, "embedding", "$", &emb));
    if (emb) {
        static const char *const ek[] = {"dim", "pooling", "precision", "rounding", NULL};
        static const char *const pools[] = {"sum", "mean"}, *const precs[] = {"fp32", "bf16"},
                                 *const rounds[] = {"stochastic", "nearest"};
        REC_TRY(check_keys(p, emb, "$.embedding", ek));
        int64_t dim = c->emb_dim;
        int pool = c->pooling, prec = c->embed_precision, round = c->embed_rounding;
        REC_TRY(get_int(p, emb, "dim", "$.embedding", 1, CFG_MAX_DIM, &dim));
        REC_TRY(get_enum(p, emb, "pooling", "$.embedding", pools, 2, &pool));
        REC_TRY(get_enum(p, emb, "precision", "$.embedding", precs, 2, &prec));
        REC_TRY(get_enum(p, emb, "rounding", "$.embedding", rounds, 2, &round));
        if (prec != REC_PRECISION_BF16 && cJSON_GetObjectItemCaseSensitive(emb, "rounding"))
            return fail(p, "$.embedding", "\"rounding\" is how bf16 tables round their updates; it needs \"precision\": "
                        "\"bf16\" (fp32 tables do not round)");
        c->emb_dim = (int)dim;
        c->pooling = (rec_pooling)pool;
        c->embed_precision = (rec_precision)prec;
        c->embed_rounding = round;
    }
    REC_TRY(get_widths(p, root, "bottom_mlp", c->bottom, &c->n_bottom));
    REC_TRY(get_widths(p, root, "top_mlp", c->top, &c->n_top));
    REC_TRY(get_widths(p, root, "deep_mlp", c->deep, &c->n_deep));
    const cJSON *inter;
    REC_TRY(get_object(p, root, "interaction", "$", &inter));
    if (inter) {
        static const char *const ik[] = {"kind", "self", NULL};
        static const char *const kinds[] = {"dot", "cat"};
        REC_TRY(check_keys(p, inter, "$.interaction", ik));
        int k = c->interaction;
        REC_TRY(get_enum(p, inter, "kind", "$.interaction", kinds, 2, &k));
        REC_TRY(get_bool(p, inter, "self", "$.interaction", &c->self_interaction));
        c->interaction = (rec_interact_kind)k;
        if (c->self_interaction && c->interaction != REC_INTERACT_DOT)
            return fail(p, "$.interaction.self", "self-interaction applies to \"dot\" only");
    }
    int64_t cross = c->cross_layers;
    REC_TRY(get_int(p, root, "cross_layers", "$", 0, 64, &cross));
    c->cross_layers = (int)cross;
    REC_TRY(parse_optimizer(p, root, c));
    REC_TRY(parse_schedule_train(p, root, c));

    /* Widths that do not depend on the data. */
    if (c->kind == REC_MODEL_DLRM) {
        if (c->bottom[c->n_bottom - 1] != c->emb_dim)
            return fail(p, "$.bottom_mlp", "the last width (%d) must equal the embedding dim (%d): the bottom MLP's "
                        "output interacts with the embeddings", c->bottom[c->n_bottom - 1], c->emb_dim);
        if (c->top[c->n_top - 1] != 1)
            return fail(p, "$.top_mlp", "the last width must be 1 (the logit), got %d", c->top[c->n_top - 1]);
    } else if (c->kind != REC_MODEL_DCN && c->deep[c->n_deep - 1] != 1) {
        return fail(p, "$.deep_mlp", "the last width must be 1 (the deep part's logit), got %d", c->deep[c->n_deep - 1]);
    }
    return REC_OK;
}

rec_status rec_model_config_parse(rec_model_config *c, const char *json, size_t len, const char *origin) {
    memset(c, 0, sizeof *c);
    parser p = {origin ? origin : "model config"};
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (!root) return rec_json_invalid(REC_EINVAL, p.origin, json, len, end);
    rec_status s = parse_root(&p, root, c);
    cJSON_Delete(root);
    if (s) rec_model_config_free(c);
    return s;
}

rec_status rec_model_config_load(rec_model_config *c, const char *path) {
    memset(c, 0, sizeof *c);
    char *buf;
    size_t len;
    REC_TRY(rec_read_file(path, "model config", (size_t)64 << 20, &buf, &len));
    rec_status s = rec_model_config_parse(c, buf, len, path);
    free(buf);
    return s;
}

rec_status rec_model_config_bind(rec_model_config *c, int n_dense, int n_sparse,
                                 const int64_t *table_rows, const char *data_name) {
    if (c->table_rows) {
        if (c->n_sparse != n_sparse)
            return rec_errorf(REC_EINVAL, "model %s lists %d tables, but %s has %d sparse features; "
                              "use \"tables\": \"data\" or a config made for this data", c->name, c->n_sparse,
                              data_name, n_sparse);
        for (int f = 0; f < n_sparse; f++)
            if (c->table_rows[f] != table_rows[f])
                return rec_errorf(REC_EINVAL, "model %s: table %d has %lld rows, but feature %d of %s needs %lld; "
                                  "use \"tables\": \"data\" or a config made for this data", c->name, f,
                                  (long long)c->table_rows[f], f, data_name, (long long)table_rows[f]);
    } else {
        c->table_rows = malloc(sizeof(int64_t) * (size_t)(n_sparse > 0 ? n_sparse : 1));
        if (!c->table_rows) return rec_errorf(REC_ENOMEM, "out of memory binding model %s", c->name);
        memcpy(c->table_rows, table_rows, sizeof(int64_t) * (size_t)n_sparse);
        c->n_sparse = n_sparse;
    }
    if (c->n_dense && c->n_dense != n_dense)
        return rec_errorf(REC_EINVAL, "model %s has %d dense features, but %s has %d; use \"dense_features\": \"data\"",
                          c->name, c->n_dense, data_name, n_dense);
    c->n_dense = n_dense;
    if (c->kind == REC_MODEL_DLRM && n_dense < 1)
        return rec_errorf(REC_EINVAL, "model %s: DLRM's bottom MLP needs dense features, and %s has none", c->name, data_name);
    if (n_sparse < 1)
        return rec_errorf(REC_EINVAL, "model %s: %s has no sparse features to embed", c->name, data_name);
    return REC_OK;
}

/* ---- canonical JSON --------------------------------------------------------------------------- */

static void add_widths(cJSON *o, const char *key, const int *w, int n) {
    cJSON_AddItemToObject(o, key, cJSON_CreateIntArray(w, n));
}

char *rec_model_config_to_json(const rec_model_config *c) {
    static const char *const dense_names[] = {"sgd", "adagrad", "adam"};
    static const char *const sparse_names[] = {"sgd", "adagrad", "rowwise_adagrad"};
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "format", "rectrain-model");
    cJSON_AddNumberToObject(o, "version", 1);
    cJSON_AddStringToObject(o, "name", c->name);
    cJSON_AddStringToObject(o, "model", rec_model_kind_name(c->kind));
    cJSON *t = cJSON_AddArrayToObject(o, "tables");
    for (int f = 0; t && c->table_rows && f < c->n_sparse; f++)
        cJSON_AddItemToArray(t, cJSON_CreateNumber((double)c->table_rows[f]));
    cJSON_AddNumberToObject(o, "dense_features", c->n_dense);
    cJSON *e = cJSON_AddObjectToObject(o, "embedding");
    cJSON_AddNumberToObject(e, "dim", c->emb_dim);
    cJSON_AddStringToObject(e, "pooling", c->pooling == REC_POOL_MEAN ? "mean" : "sum");
    cJSON_AddStringToObject(e, "precision", rec_precision_name(c->embed_precision));
    if (c->embed_precision == REC_PRECISION_BF16)
        cJSON_AddStringToObject(e, "rounding", c->embed_rounding == REC_ROUND_NEAREST ? "nearest" : "stochastic");
    if (c->kind == REC_MODEL_DLRM) {
        add_widths(o, "bottom_mlp", c->bottom, c->n_bottom);
        add_widths(o, "top_mlp", c->top, c->n_top);
        cJSON *i = cJSON_AddObjectToObject(o, "interaction");
        cJSON_AddStringToObject(i, "kind", c->interaction == REC_INTERACT_CAT ? "cat" : "dot");
        cJSON_AddBoolToObject(i, "self", c->self_interaction);
    } else {
        add_widths(o, "deep_mlp", c->deep, c->n_deep);
    }
    if (c->kind == REC_MODEL_DCN) cJSON_AddNumberToObject(o, "cross_layers", c->cross_layers);
    cJSON *op = cJSON_AddObjectToObject(o, "optimizer");
    cJSON *d = cJSON_AddObjectToObject(op, "dense");
    cJSON_AddStringToObject(d, "kind", dense_names[c->dense_opt.kind]);
    cJSON_AddNumberToObject(d, "lr", c->dense_opt.lr);
    cJSON_AddNumberToObject(d, "eps", c->dense_opt.eps);
    cJSON_AddNumberToObject(d, "beta1", c->dense_opt.beta1);
    cJSON_AddNumberToObject(d, "beta2", c->dense_opt.beta2);
    cJSON *s = cJSON_AddObjectToObject(op, "sparse");
    cJSON_AddStringToObject(s, "kind", sparse_names[c->sparse_opt.kind]);
    cJSON_AddNumberToObject(s, "lr", c->sparse_opt.lr);
    cJSON_AddNumberToObject(s, "eps", c->sparse_opt.eps);
    cJSON_AddNumberToObject(s, "init_acc", c->sparse_opt.init_acc);
    cJSON *l = cJSON_AddObjectToObject(o, "lr_schedule");
    cJSON_AddNumberToObject(l, "warmup_steps", (double)c->schedule.warmup_steps);
    cJSON_AddNumberToObject(l, "decay_start", (double)c->schedule.decay_start);
    cJSON_AddNumberToObject(l, "decay_steps", (double)c->schedule.decay_steps);
    cJSON_AddNumberToObject(l, "power", c->schedule.power);
    cJSON_AddNumberToObject(l, "end_scale", c->schedule.end_scale);
    cJSON *tr = cJSON_AddObjectToObject(o, "train");
    cJSON_AddNumberToObject(tr, "batch_size", (double)c->batch_size);
    cJSON_AddNumberToObject(tr, "epochs", c->epochs);
    cJSON_AddNumberToObject(tr, "seed", (double)c->seed);
    cJSON_AddNumberToObject(tr, "eval_every", (double)c->eval_every);
    if (c->prep_spec[0]) cJSON_AddStringToObject(tr, "prep_spec", c->prep_spec);
    cJSON_AddStringToObject(tr, "precision", rec_precision_name(c->precision));
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    return text;
}

/* Equal models: everything but the training defaults of "train" (batch size, epochs, seed,
 * evaluation period, prep spec, precision) and the tables' storage (embedding precision and
 * rounding), which a resumed run may change (a checkpoint's fp32 tables load into bf16 ones
 * rounded to nearest, bf16 into fp32 exactly). */
int rec_model_config_equal(const rec_model_config *a, const rec_model_config *b) {
    rec_model_config x = *a, y = *b;
    x.batch_size = y.batch_size = 1;
    x.epochs = y.epochs = 1;
    x.seed = y.seed = 0;
    x.eval_every = y.eval_every = 0;
    x.prep_spec[0] = y.prep_spec[0] = '\0';
    x.precision = y.precision = x.embed_precision = y.embed_precision = REC_PRECISION_FP32;
    x.embed_rounding = y.embed_rounding = REC_ROUND_STOCHASTIC;
    char *ja = rec_model_config_to_json(&x), *jb = rec_model_config_to_json(&y);
    int eq = ja && jb && !strcmp(ja, jb);
    free(ja);
    free(jb);
    return eq;
}
