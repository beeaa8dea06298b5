/* Reference preprocessing executor: one row at a time, one feature at a time, one op at a
 * time, with the rec_ref_* definitions of ops_ref.c and no fusion, blocking or in-place
 * tricks. It is the oracle the fused executor (exec.c) is tested against, so it favours
 * obviousness over speed.
 *
 * Value conventions shared with the fused executor: f32 values are stored as float; every op
 * computes in double from the float input and rounds its result to float; clamp bounds on
 * f32 are rounded to float first; f32 -> i64 casts truncate toward zero, saturate, and send
 * NaN to 0; a row concatenated from several inputs is null only when all of them are. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rectrain/core.h"
#include "rectrain/prep.h"

typedef struct rval {
    int null;
    int is_f32;
    int64_t len;       /* ids in the row (1 for an i64 scalar), or f32 width */
    int64_t cap;
    int64_t *v;
    float *f;
} rval;

static rec_status rval_reserve(rval *x, int64_t n) {
    if (n <= x->cap) return REC_OK;
    int64_t cap = n < 16 ? 16 : 2 * n;
    int64_t *v = realloc(x->v, (size_t)cap * sizeof *v);
    float *f = v ? realloc(x->f, (size_t)cap * sizeof *f) : NULL;
    if (v) x->v = v;
    if (f) x->f = f;
    if (!v || !f) return rec_errorf(REC_ENOMEM, "out of memory in the reference executor");
    x->cap = cap;
    return REC_OK;
}

static int64_t ref_cast_f32_i64(float x) {
    if (isnan(x)) return 0;
    if ((double)x >= 9223372036854775807.0) return INT64_MAX;
    if ((double)x <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)x;
}

/* Appends raw column `rc` (1..39) of raw row r to x. */
static rec_status append_raw(rval *x, const rec_raw_block *raw, int rc, int64_t r, int *any) {
    if (rc <= REC_CRITEO_NINT) {
        if (raw->int_null[(size_t)(rc - 1) * raw->cap + r]) return REC_OK;
        REC_TRY(rval_reserve(x, x->len + 1));
        x->v[x->len++] = raw->ints[(size_t)(rc - 1) * raw->cap + r];
    } else {
        const rec_raw_list *l = &raw->cat[rc - 1 - REC_CRITEO_NINT];
        if (l->null[r]) return REC_OK;
        REC_TRY(rval_reserve(x, x->len + (l->off[r + 1] - l->off[r])));
        for (int32_t i = l->off[r]; i < l->off[r + 1]; i++) x->v[x->len++] = l->val[i];
    }
    *any = 1;
    return REC_OK;
}

/* Applies one op to one row's value. */
static rec_status apply(const rec_op *op, const rec_vocab_set *vs, rval *x, rval *tmp) {
    switch (op->kind) {
    case REC_OP_FILL_NULL:
        if (x->null) {
            x->null = 0;
            if (x->is_f32) {
                x->f[0] = (float)op->fvalue;
            } else {
                x->v[0] = op->ivalue;
                x->len = 1;
            }
        }
        return REC_OK;
    case REC_OP_CAST:
        if (op->to == REC_DT_F32 && !x->is_f32) {
            x->f[0] = (float)x->v[0];
            x->is_f32 = 1;
            x->len = 1;
        } else if (op->to == REC_DT_I64 && x->is_f32) {
            x->v[0] = ref_cast_f32_i64(x->f[0]);
            x->is_f32 = 0;
            x->len = 1;
        }
        return REC_OK;
    case REC_OP_LOGIT: x->f[0] = (float)rec_ref_logit(x->f[0], op->eps); return REC_OK;
    case REC_OP_BOXCOX: x->f[0] = (float)rec_ref_boxcox(x->f[0], op->lambda); return REC_OK;
    case REC_OP_LOG1P: x->f[0] = (float)rec_ref_log1p(x->f[0]); return REC_OK;
    case REC_OP_ONEHOT: {
        float in = x->f[0];
        REC_TRY(rval_reserve(x, op->num_class));
        rec_ref_onehot(in, op->lo, op->hi, op->num_class, x->f);
        x->len = op->num_class;
        return REC_OK;
    }
    case REC_OP_CLAMP:
        if (x->is_f32) {
            float lo = (float)op->lo, hi = (float)op->hi;
            for (int64_t i = 0; i < x->len; i++) x->f[i] = x->f[i] < lo ? lo : x->f[i] > hi ? hi : x->f[i];
        } else {
            /* Bounds on ids are integers (the spec checks it); an infinite bound is the
             * int64 extreme. Compared as integers, exact for every id. */
            int64_t lo = isinf(op->lo) ? INT64_MIN : (int64_t)op->lo;
            int64_t hi = isinf(op->hi) ? INT64_MAX : (int64_t)op->hi;
            for (int64_t i = 0; i < x->len; i++) {
                if (x->v[i] < lo) x->v[i] = lo;
                else if (x->v[i] > hi) x->v[i] = hi;
            }
        }
        return REC_OK;
    case REC_OP_BUCKETIZE: {
        double in = x->is_f32 ? (double)x->f[0] : (double)x->v[0];
        x->v[0] = rec_ref_bucketize(in, op->borders, op->n_borders);
        x->is_f32 = 0;
        x->len = 1;
        return REC_OK;
    }
    case REC_OP_SIGRID_HASH:
        for (int64_t i = 0; i < x->len; i++) x->v[i] = rec_ref_sigrid_hash(x->v[i], op->salt, op->max_value);
        return REC_OK;
    case REC_OP_MODULO:
        for (int64_t i = 0; i < x->len; i++) x->v[i] = rec_ref_modulo(x->v[i], op->divisor);
        return REC_OK;
    case REC_OP_MAP_ID:
        for (int64_t i = 0; i < x->len; i++) x->v[i] = rec_ref_map_id(x->v[i], op->map, op->map_len);
        return REC_OK;
    case REC_OP_CATEGORIFY:
        for (int64_t i = 0; i < x->len; i++) x->v[i] = rec_vocab_lookup(vs->v[op->vocab_slot], x->v[i]);
        return REC_OK;
    case REC_OP_FIRSTX:
        if (x->len > op->x) x->len = op->x;
        return REC_OK;
    case REC_OP_NGRAM: {
        int64_t m = op->n < x->len ? op->n : x->len, o = 0;
        REC_TRY(rval_reserve(tmp, (x->len - m + 1) * m + 1));
        for (int64_t s = 0; m > 0 && s + m <= x->len; s++)
            for (int64_t i = 0; i < m; i++) tmp->v[o++] = x->v[s + i];
        REC_TRY(rval_reserve(x, o + 1));
        memcpy(x->v, tmp->v, (size_t)o * sizeof *x->v);
        x->len = o;
        return REC_OK;
    }
    case REC_OP_COUNT: break;
    }
    return rec_errorf(REC_EINVAL, "reference executor: unknown op %d", (int)op->kind);
}

rec_status rec_prep_run_ref(const rec_spec *spec, const rec_vocab_set *vocabs,
                            const rec_raw_block *raw, int64_t r0, int64_t n, rec_batch *b) {
    if (spec->n_vocabs > 0 && (!vocabs || vocabs->n != spec->n_vocabs))
        return rec_errorf(REC_EINVAL, "reference executor: spec '%s' needs %d vocabularies",
                          spec->name, spec->n_vocabs);
    if (b->n + n > b->cap || b->n_dense != spec->n_dense || b->n_sparse != spec->n_sparse)
        return rec_errorf(REC_EINVAL, "reference executor: batch does not fit the spec or the rows");
    rval *vals = calloc((size_t)spec->n_features + 1, sizeof *vals);
    rval tmp = {0};
    if (!vals) return rec_errorf(REC_ENOMEM, "out of memory in the reference executor");
    rec_status s = REC_OK;
    for (int64_t r = r0; !s && r < r0 + n; r++) {
        int64_t row = b->n;
        b->label[row] = raw->has_label ? raw->label[r] : 0.0f;
        for (int i = 0; !s && i < spec->n_features; i++) {
            const rec_feature *ft = &spec->features[i];
            rval *x = &vals[i];
            s = rval_reserve(x, 1);
            x->len = 0;
            x->is_f32 = ft->in_type.dtype == REC_DT_F32; /* also for rows whose inputs are null */
            int any = 0;
            for (int k = 0; !s && k < ft->n_inputs; k++) {
                int in = ft->inputs[k];
                if (in < 0) {
                    s = append_raw(x, raw, -in, r, &any);
                } else if (!vals[in].null) {
                    const rval *y = &vals[in];
                    any = 1;
                    s = rval_reserve(x, x->len + y->len);
                    if (!s && y->is_f32) memcpy(x->f + x->len, y->f, (size_t)y->len * sizeof *x->f);
                    if (!s && !y->is_f32) memcpy(x->v + x->len, y->v, (size_t)y->len * sizeof *x->v);
                    if (!s) x->len += y->len;
                }
            }
            x->null = !any;
            if (x->null) x->len = 0;
            for (int j = 0; !s && j < ft->n_ops; j++) s = apply(&ft->ops[j], vocabs, x, &tmp);
            if (s) break;
            if (ft->kind == REC_FEAT_DENSE) {
                for (int64_t k = 0; k < x->len; k++) b->dense[row * b->n_dense + ft->dense_offset + k] = x->f[k];
            } else if (ft->kind == REC_FEAT_SPARSE) {
                rec_jagged *jg = &b->sparse[ft->sparse_index];
                if (row == 0) {
                    jg->offsets[0] = 0;
                    s = rec_batch_set_wide(b, ft->sparse_index, 1); /* the values hold int64 ids */
                }
                int64_t base = jg->offsets[row];
                if (!s) s = rec_batch_reserve_nnz(b, ft->sparse_index, base + x->len, 0);
                if (!s) memcpy(jg->ids64 + base, x->v, (size_t)x->len * sizeof *x->v);
                jg->offsets[row + 1] = base + x->len;
            }
        }
        b->n = row + 1;
    }
    for (int i = 0; i < spec->n_features; i++) {
        free(vals[i].v);
        free(vals[i].f);
    }
    free(vals);
    free(tmp.v);
    free(tmp.f);
    return s;
}
