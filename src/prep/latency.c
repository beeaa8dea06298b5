/* The latency predictor of fused preprocessing kernels (RAP §5.2): XGBoost regression trees.
 *
 * RAP trains one model per op with its own parameters and one for the element-wise ops, on
 * features [op, input size, output size or op parameter] (artifact: max_depth 5, learning
 * rate 0.05, 300 rounds), and scales to other batch sizes linearly. Here one model takes the
 * op as a feature beside the layout, the fusion degree, the values read (in all and by the
 * largest member: a fused kernel's blocks are as late as its largest member) and the batch,
 * and fits log(latency): the trees then split on ratios, and their error is relative, which
 * is how RAP scores the predictor (the share within 10%, Table 5).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <xgboost/c_api.h>

#include "rectrain/core.h"
#include "rectrain/prep.h"

struct rec_lat_model {
    BoosterHandle h;
};

static double op_size(const rec_op *op) {
    switch (op->kind) {
    case REC_OP_NGRAM: return op->n;
    case REC_OP_FIRSTX: return op->x;
    case REC_OP_ONEHOT: return op->num_class;
    case REC_OP_BUCKETIZE: return op->n_borders;
    case REC_OP_MAP_ID: return (double)op->map_len;
    default: return 0;
    }
}

void rec_lat_features(const rec_fusion *f, const rec_spec *spec, int kernel, int first, int n,
                      const double *values_per_row, int64_t batch, float x[REC_LAT_FEATURES]) {
    const rec_fused_kernel *k = &f->kernels[kernel];
    double values = 0, most = 0, size = 0;
    for (int m = first; m < first + n; m++) {
        const int i = k->members[m];
        const rec_op *op = &spec->features[f->ops[i].feature].ops[f->ops[i].op];
        values += values_per_row[i];
        most = values_per_row[i] > most ? values_per_row[i] : most;
        size += op_size(op);
    }
    x[0] = (float)k->kind, x[1] = (float)k->dtype, x[2] = (float)k->is_list, x[3] = (float)n;
    x[4] = (float)(values * (double)batch), x[5] = (float)(most * (double)batch);
    x[6] = n ? (float)(size / n) : 0, x[7] = (float)batch;
}

static rec_status xgb(int rc, const char *what) {
    return rc ? rec_errorf(REC_EIO, "latency predictor: %s: %s", what, XGBGetLastError()) : REC_OK;
}

rec_status rec_lat_train(const float *X, const double *ms, int64_t n, rec_lat_model **out) {
    *out = NULL;
    if (n < 2) return rec_errorf(REC_EINVAL, "latency predictor: %lld measured kernels; it needs 2 or more", (long long)n);
    float *y = malloc(sizeof(float) * (size_t)n);
    rec_lat_model *m = calloc(1, sizeof *m);
    if (!y || !m) {
        free(y), free(m);
        return rec_errorf(REC_ENOMEM, "latency predictor: out of memory");
    }
    rec_status s = REC_OK;
    for (int64_t i = 0; !s && i < n; i++) {
        if (!(ms[i] > 0) || !isfinite(ms[i]))
            s = rec_errorf(REC_EINVAL, "latency predictor: kernel %lld measured %g ms; latencies are > 0", (long long)i, ms[i]);
        y[i] = (float)log(ms[i]);
    }
    DMatrixHandle d = NULL;
    if (!s) s = xgb(XGDMatrixCreateFromMat(X, (bst_ulong)n, REC_LAT_FEATURES, NAN, &d), "the training matrix");
    if (!s) s = xgb(XGDMatrixSetFloatInfo(d, "label", y, (bst_ulong)n), "the labels");
    if (!s) s = xgb(XGBoosterCreate(&d, 1, &m->h), "a booster");
    static const char *const param[][2] = {{"objective", "reg:squarederror"}, {"max_depth", "5"}, {"eta", "0.05"},
                                           {"nthread", "1"}, {"seed", "0"}, {"verbosity", "0"}};
    for (size_t p = 0; !s && p < sizeof param / sizeof *param; p++)
        s = xgb(XGBoosterSetParam(m->h, param[p][0], param[p][1]), "a parameter");
    for (int it = 0; !s && it < 300; it++) s = xgb(XGBoosterUpdateOneIter(m->h, it, d), "a boosting round");
    if (d) XGDMatrixFree(d);
    free(y);
    if (s) {
        rec_lat_free(m);
        return s;
    }
    *out = m;
    return REC_OK;
}

rec_status rec_lat_predict(const rec_lat_model *m, const float *X, int64_t n, double *ms) {
    if (n == 0) return REC_OK;
    DMatrixHandle d = NULL;
    bst_ulong len = 0;
    const float *y = NULL;
    rec_status s = xgb(XGDMatrixCreateFromMat(X, (bst_ulong)n, REC_LAT_FEATURES, NAN, &d), "the matrix");
    if (!s) s = xgb(XGBoosterPredict(m->h, d, 0, 0, 0, &len, &y), "predicting");
    if (!s && len != (bst_ulong)n) s = rec_errorf(REC_EIO, "latency predictor: %llu predictions for %lld kernels",
                                                  (unsigned long long)len, (long long)n);
    for (int64_t i = 0; !s && i < n; i++) ms[i] = exp((double)y[i]);
    if (d) XGDMatrixFree(d);
    return s;
}

rec_status rec_lat_save(const rec_lat_model *m, const char *path) {
    return xgb(XGBoosterSaveModel(m->h, path), path);
}

rec_status rec_lat_load(const char *path, rec_lat_model **out) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return rec_errorf(REC_EIO, "cannot read the latency model %s: %s", path, strerror(errno));
    fclose(f);
    rec_lat_model *m = calloc(1, sizeof *m);
    if (!m) return rec_errorf(REC_ENOMEM, "latency predictor: out of memory");
    rec_status s = xgb(XGBoosterCreate(NULL, 0, &m->h), "a booster");
    if (!s) s = xgb(XGBoosterLoadModel(m->h, path), path);
    if (s) {
        rec_lat_free(m);
        return s;
    }
    *out = m;
    return REC_OK;
}

void rec_lat_free(rec_lat_model *m) {
    if (!m) return;
    if (m->h) XGBoosterFree(m->h);
    free(m);
}

/* ---- measurements ------------------------------------------------------------------------ */

static const char HEADER[] = "op\tdtype\tlist\tmembers\tvalues\tmax_values\tparam\tbatch\tms";

/* Field k of a line (tab-separated, cut in place), or NULL. */
static char *field(char **p) {
    if (!*p) return NULL;
    char *f = *p, *t = strchr(f, '\t');
    if (t) *t = 0, *p = t + 1;
    else *p = NULL;
    return f;
}

static rec_status number(const char *path, int64_t line, const char *name, const char *text, double lo, double *v) {
    char *end;
    errno = 0;
    *v = text ? strtod(text, &end) : 0;
    if (!text || !*text || *end || errno || !isfinite(*v) || *v < lo)
        return rec_errorf(REC_EINVAL, "%s:%lld: field '%s' is '%s', not a number >= %g", path, (long long)line, name,
                          text ? text : "(missing)", lo);
    return REC_OK;
}

rec_status rec_lat_read(const char *path, float **Xo, double **mso, int64_t *no) {
    *Xo = NULL, *mso = NULL, *no = 0;
    FILE *f = fopen(path, "r");
    if (!f) return rec_errorf(REC_EIO, "cannot read %s: %s", path, strerror(errno));
    char buf[1024];
    int64_t line = 0, n = 0, cap = 0;
    float *X = NULL;
    double *ms = NULL;
    rec_status s = REC_OK;
    while (!s && fgets(buf, sizeof buf, f)) {
        line++;
        const size_t len = strlen(buf);
        if (len && buf[len - 1] != '\n' && !feof(f)) {
            s = rec_errorf(REC_EINVAL, "%s:%lld: a line over %zu bytes", path, (long long)line, sizeof buf - 2);
            break;
        }
        buf[strcspn(buf, "\r\n")] = 0;
        if (line == 1) {
            if (strcmp(buf, HEADER))
                s = rec_errorf(REC_EINVAL, "%s:1: the header must be '%s' (tab-separated)", path, HEADER);
            continue;
        }
        if (!*buf) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 256;
            float *x2 = realloc(X, sizeof(float) * (size_t)(cap * REC_LAT_FEATURES));
            double *m2 = x2 ? realloc(ms, sizeof(double) * (size_t)cap) : NULL;
            if (x2) X = x2;
            if (m2) ms = m2;
            if (!x2 || !m2) {
                s = rec_errorf(REC_ENOMEM, "%s: out of memory at line %lld", path, (long long)line);
                break;
            }
        }
        char *p = buf, *op = field(&p), *dt = field(&p);
        float *x = X + n * REC_LAT_FEATURES;
        const int kind = op ? rec_op_kind_from_name(op) : -1;
        if (kind < 0) {
            s = rec_errorf(REC_EINVAL, "%s:%lld: field 'op' is '%s', not an operator of the spec language", path,
                           (long long)line, op ? op : "(missing)");
            break;
        }
        if (!dt || (strcmp(dt, "f32") && strcmp(dt, "i64"))) {
            s = rec_errorf(REC_EINVAL, "%s:%lld: field 'dtype' is '%s', not f32 or i64", path, (long long)line,
                           dt ? dt : "(missing)");
            break;
        }
        x[0] = (float)kind, x[1] = (float)(strcmp(dt, "i64") == 0 ? REC_DT_I64 : REC_DT_F32);
        static const char *const names[] = {"list", "members", "values", "max_values", "param", "batch", "ms"};
        static const double lows[] = {0, 1, 0, 0, 0, 1, 0};
        double v[7];
        for (int k = 0; !s && k < 7; k++) s = number(path, line, names[k], field(&p), lows[k], &v[k]);
        if (!s && v[0] != 0 && v[0] != 1)
            s = rec_errorf(REC_EINVAL, "%s:%lld: field 'list' is %g, not 0 or 1", path, (long long)line, v[0]);
        if (!s && !(v[6] > 0)) s = rec_errorf(REC_EINVAL, "%s:%lld: field 'ms' is %g; latencies are > 0", path, (long long)line, v[6]);
        if (!s && p) s = rec_errorf(REC_EINVAL, "%s:%lld: more than the 9 fields of the header", path, (long long)line);
        if (s) break;
        for (int k = 0; k < 6; k++) x[2 + k] = (float)v[k];
        ms[n++] = v[6];
    }
    if (!s && ferror(f)) s = rec_errorf(REC_EIO, "reading %s: %s", path, strerror(errno));
    if (!s && line == 0) s = rec_errorf(REC_EINVAL, "%s: empty; it needs the header '%s'", path, HEADER);
    fclose(f);
    if (s) {
        free(X), free(ms);
        return s;
    }
    *Xo = X, *mso = ms, *no = n;
    return REC_OK;
}

rec_status rec_lat_write(const char *path, const float *X, const double *ms, int64_t n) {
    rec_atomic_file a;
    FILE *f;
    REC_TRY(rec_atomic_fopen(&a, path, &f));
    fprintf(f, "%s\n", HEADER);
    for (int64_t i = 0; i < n; i++) {
        const float *x = X + i * REC_LAT_FEATURES;
        fprintf(f, "%s\t%s\t%d\t%d\t%.9g\t%.9g\t%.9g\t%.9g\t%.17g\n", rec_op_name((rec_op_kind)x[0]),
                x[1] == REC_DT_F32 ? "f32" : "i64", (int)x[2], (int)x[3], x[4], x[5], x[6], x[7], ms[i]);
    }
    return rec_atomic_fclose(&a, f, "latency table", REC_OK);
}

static int by_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

rec_status rec_lat_holdout(const float *X, const double *ms, int64_t n, uint64_t seed, double *median_rel,
                           double *within10) {
    const int64_t test = n / 10;
    if (test < 1) return rec_errorf(REC_EINVAL, "latency predictor: %lld measured kernels; a 9:1 split needs 10 or more",
                                    (long long)n);
    int64_t *perm = malloc(sizeof(int64_t) * (size_t)n);
    float *Xs = malloc(sizeof(float) * (size_t)(n * REC_LAT_FEATURES));
    double *ys = malloc(sizeof(double) * (size_t)n), *pred = malloc(sizeof(double) * (size_t)test);
    rec_status s = perm && Xs && ys && pred ? REC_OK : rec_errorf(REC_ENOMEM, "latency predictor: out of memory");
    rec_lat_model *m = NULL;
    if (!s) {
        rec_rng g;
        rec_rng_seed(&g, seed, 0);
        for (int64_t i = 0; i < n; i++) perm[i] = i;
        for (int64_t i = n - 1; i > 0; i--) { /* Fisher-Yates */
            const int64_t j = (int64_t)(rec_rng_uniform(&g) * (double)(i + 1));
            const int64_t t = perm[i];
            perm[i] = perm[j], perm[j] = t;
        }
        for (int64_t i = 0; i < n; i++) { /* the test rows first */
            memcpy(Xs + i * REC_LAT_FEATURES, X + perm[i] * REC_LAT_FEATURES, sizeof(float) * REC_LAT_FEATURES);
            ys[i] = ms[perm[i]];
        }
        s = rec_lat_train(Xs + test * REC_LAT_FEATURES, ys + test, n - test, &m);
    }
    if (!s) s = rec_lat_predict(m, Xs, test, pred);
    if (!s) {
        int64_t close = 0;
        for (int64_t i = 0; i < test; i++) {
            pred[i] = fabs(pred[i] - ys[i]) / ys[i];
            close += pred[i] <= 0.1;
        }
        qsort(pred, (size_t)test, sizeof(double), by_double);
        *median_rel = test % 2 ? pred[test / 2] : 0.5 * (pred[test / 2 - 1] + pred[test / 2]);
        *within10 = (double)close / (double)test;
    }
    rec_lat_free(m);
    free(perm), free(Xs), free(ys), free(pred);
    return s;
}
