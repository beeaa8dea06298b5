/* The fused CPU preprocessing executor.
 *
 * A validated spec is a DAG of chains (one chain of ops per feature). The plan groups the
 * chains for fusion, in the spirit of RAP §6.1 (horizontal fusion of same-type operators)
 * carried over to the CPU:
 *
 *  - Horizontal: chains at the same DAG depth whose op-kind sequences and input types are
 *    equal form one group; each op of the group runs as one kernel call over all of the
 *    group's features, with per-feature parameters (RAP's fused kernel reads its parameters
 *    from arrays indexed by the feature, digest §3.8 "GPU fused-kernel layout"). For the
 *    Criteo plans that turns 39 chains of 4 ops into 2 groups and 8 kernel calls per block.
 *  - Vertical: rows are processed in blocks of REC_PREP_BLOCK rows; every op of a chain
 *    works in place on the block's column, which stays in L1/L2, so no intermediate
 *    reaches memory. Only the final values are written into the Batch.
 *
 * Each thread owns a workspace (one column buffer per feature); plans are immutable and
 * shared. Nothing is allocated in steady state: buffers grow to the largest block seen.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "prep_internal.h"
#include "rectrain/core.h"
#include "rectrain/prep.h"

enum { REC_PREP_BLOCK = 512 };

/* The values of one feature over a block of rows (see rec_type). f32 columns use `f`
 * (n * width); i64 scalars use `v` (n); i64 lists use `off` (n+1) and `v` (off[n]). */
typedef struct col {
    rec_type t;
    int64_t n;
    float *f;
    int64_t *v;
    int32_t *off;
    uint8_t *null;
    int64_t fcap, vcap;  /* allocated floats / ids */
} col;

typedef struct group {
    int depth;
    int nf;
    int *feat;           /* (nf) feature indices into spec->features */
} group;

struct rec_prep_plan {
    const rec_spec *spec;
    const rec_vocab_set *vocabs;
    int n_groups;
    group *groups;       /* ordered by depth */
};

struct rec_prep_ws {
    const rec_prep_plan *p;
    col *cols;           /* (n_features) */
    col tmp;             /* scratch for ops that rebuild a list */
};

/* ---- plan ------------------------------------------------------------------------------- */

static int same_chain(const rec_feature *a, const rec_feature *b) {
    if (a->n_ops != b->n_ops || a->in_type.dtype != b->in_type.dtype ||
        a->in_type.is_list != b->in_type.is_list || a->in_type.width != b->in_type.width)
        return 0;
    for (int j = 0; j < a->n_ops; j++)
        if (a->ops[j].kind != b->ops[j].kind) return 0;
    return 1;
}

rec_status rec_prep_plan_init(rec_prep_plan **out, const rec_spec *spec,
                              const rec_vocab_set *vocabs) {
    *out = NULL;
    if (vocabs && vocabs->n != spec->n_vocabs)
        return rec_errorf(REC_EINVAL, "spec '%s' has %d categorify op(s) but %d vocabularies were given",
                          spec->name, spec->n_vocabs, vocabs->n);
    int nf = spec->n_features;
    rec_prep_plan *p = calloc(1, sizeof *p);
    int *depth = calloc((size_t)nf + 1, sizeof *depth);
    int *gid = calloc((size_t)nf + 1, sizeof *gid);
    if (p) p->groups = calloc((size_t)nf + 1, sizeof *p->groups);
    if (!p || !depth || !gid || !p->groups) {
        free(depth);
        free(gid);
        rec_prep_plan_free(p);
        return rec_errorf(REC_ENOMEM, "out of memory compiling the prep plan");
    }
    p->spec = spec;
    p->vocabs = vocabs;
    int max_depth = 0;
    for (int i = 0; i < nf; i++) { /* features are topologically ordered */
        const rec_feature *ft = &spec->features[i];
        depth[i] = 1;
        for (int k = 0; k < ft->n_inputs; k++)
            if (ft->inputs[k] >= 0 && depth[ft->inputs[k]] + 1 > depth[i]) depth[i] = depth[ft->inputs[k]] + 1;
        if (depth[i] > max_depth) max_depth = depth[i];
    }
    /* Group by (depth, chain signature), groups ordered by depth then first member. */
    for (int d = 1; d <= max_depth; d++) {
        for (int i = 0; i < nf; i++) {
            if (depth[i] != d) continue;
            int g = -1;
            for (int k = 0; k < p->n_groups && g < 0; k++)
                if (p->groups[k].depth == d && same_chain(&spec->features[p->groups[k].feat[0]], &spec->features[i]))
                    g = k;
            if (g < 0) {
                g = p->n_groups++;
                p->groups[g].depth = d;
                p->groups[g].feat = calloc((size_t)nf, sizeof(int));
                if (!p->groups[g].feat) {
                    free(depth);
                    free(gid);
                    rec_prep_plan_free(p);
                    return rec_errorf(REC_ENOMEM, "out of memory compiling the prep plan");
                }
            }
            p->groups[g].feat[p->groups[g].nf++] = i;
        }
    }
    free(depth);
    free(gid);
    *out = p;
    return REC_OK;
}

void rec_prep_plan_free(rec_prep_plan *p) {
    if (!p) return;
    for (int g = 0; g < p->n_groups; g++) free(p->groups[g].feat);
    free(p->groups);
    free(p);
}

int rec_prep_plan_groups(const rec_prep_plan *p) { return p->n_groups; }

void rec_prep_plan_describe(const rec_prep_plan *p, FILE *out) {
    fprintf(out, "plan '%s': %d features in %d fused groups\n", p->spec->name, p->spec->n_features,
            p->n_groups);
    for (int g = 0; g < p->n_groups; g++) {
        const group *gr = &p->groups[g];
        const rec_feature *f0 = &p->spec->features[gr->feat[0]];
        fprintf(out, "  group %d  depth %d  %2d features  ops:", g, gr->depth, gr->nf);
        for (int j = 0; j < f0->n_ops; j++) fprintf(out, " %s", rec_op_name(f0->ops[j].kind));
        if (f0->n_ops == 0) fprintf(out, " (pass-through)");
        fprintf(out, "\n    ");
        for (int k = 0; k < gr->nf; k++) fprintf(out, "%s%s", k ? " " : "", p->spec->features[gr->feat[k]].name);
        fprintf(out, "\n");
    }
}

/* ---- workspace ---------------------------------------------------------------------------- */

static rec_status col_reserve_v(col *c, int64_t n) {
    if (n <= c->vcap) return REC_OK;
    int64_t cap = c->vcap * 2 > n ? c->vcap * 2 : n;
    REC_TRY(rec_realloc((void **)&c->v, (size_t)c->vcap * 8, (size_t)cap * 8, "prep column ids"));
    c->vcap = cap;
    return REC_OK;
}

static rec_status col_init(col *c, int width) {
    memset(c, 0, sizeof *c);
    c->fcap = (int64_t)REC_PREP_BLOCK * (width > 1 ? width : 1);
    REC_TRY(rec_alloc((void **)&c->f, (size_t)c->fcap * sizeof(float), "prep column"));
    REC_TRY(rec_alloc((void **)&c->off, (REC_PREP_BLOCK + 1) * sizeof(int32_t), "prep column offsets"));
    REC_TRY(rec_alloc((void **)&c->null, REC_PREP_BLOCK, "prep column nulls"));
    return col_reserve_v(c, 2 * REC_PREP_BLOCK);
}

static void col_free(col *c) {
    rec_free(c->f);
    rec_free(c->v);
    rec_free(c->off);
    rec_free(c->null);
}

static int max_width(const rec_feature *f) {
    int w = f->in_type.width > f->out_type.width ? f->in_type.width : f->out_type.width;
    for (int j = 0; j < f->n_ops; j++)
        if (f->ops[j].kind == REC_OP_ONEHOT && f->ops[j].num_class > w) w = f->ops[j].num_class;
    return w;
}

rec_status rec_prep_ws_init(rec_prep_ws **out, const rec_prep_plan *p) {
    *out = NULL;
    rec_prep_ws *ws = calloc(1, sizeof *ws);
    if (!ws) return rec_errorf(REC_ENOMEM, "out of memory allocating a prep workspace");
    ws->p = p;
    ws->cols = calloc((size_t)p->spec->n_features + 1, sizeof *ws->cols);
    rec_status s = ws->cols ? REC_OK : rec_errorf(REC_ENOMEM, "out of memory allocating a prep workspace");
    for (int i = 0; !s && i < p->spec->n_features; i++)
        s = col_init(&ws->cols[i], max_width(&p->spec->features[i]));
    if (!s) s = col_init(&ws->tmp, 1);
    if (s) {
        rec_prep_ws_free(ws);
        return s;
    }
    *out = ws;
    return REC_OK;
}

void rec_prep_ws_free(rec_prep_ws *ws) {
    if (!ws) return;
    for (int i = 0; ws->cols && i < ws->p->spec->n_features; i++) col_free(&ws->cols[i]);
    col_free(&ws->tmp);
    free(ws->cols);
    free(ws);
}

/* ---- loading inputs -------------------------------------------------------------------------
 * A chain starts from its inputs' values for rows [r0, r0+n): a raw column or a node's column
 * of this block. Several inputs are concatenated per row (a row is null only when all its
 * inputs are); a single input is copied as is. */

static int64_t col_nnz(const col *c) { return c->t.is_list ? c->off[c->n] : c->n; }

/* A view of one input as a list or scalar over the block, without copying. */
typedef struct in_view {
    int is_list, is_f32;
    const int32_t *off;     /* lists: offsets, off[0] may be non-zero (raw blocks) */
    const int64_t *v;       /* ids */
    const float *f;         /* f32 values */
    const uint8_t *null;
} in_view;

static in_view view_input(const rec_prep_ws *ws, const rec_raw_block *raw, int ref, int64_t r0) {
    in_view w = {0};
    if (ref >= 0) {
        const col *c = &ws->cols[ref];
        w.is_list = c->t.is_list;
        w.is_f32 = c->t.dtype == REC_DT_F32;
        w.off = c->off;
        w.v = c->v;
        w.f = c->f;
        w.null = c->null;
        return w;
    }
    int rc = -ref; /* raw column: 1..13 ints, 14..39 cats */
    if (rc <= REC_CRITEO_NINT) {
        int k = rc - 1;
        w.v = raw->ints + (size_t)k * raw->cap + r0;
        w.null = raw->int_null + (size_t)k * raw->cap + r0;
    } else {
        const rec_raw_list *l = &raw->cat[rc - 1 - REC_CRITEO_NINT];
        w.is_list = 1;
        w.off = l->off + r0;
        w.v = l->val;
        w.null = l->null + r0;
    }
    return w;
}

static rec_status load_inputs(rec_prep_ws *ws, const rec_raw_block *raw, const rec_feature *ft,
                              col *c, int64_t r0, int64_t n) {
    c->t = ft->in_type;
    c->n = n;
    if (ft->n_inputs == 1) {
        in_view w = view_input(ws, raw, ft->inputs[0], r0);
        memcpy(c->null, w.null, (size_t)n);
        if (w.is_f32) {
            memcpy(c->f, w.f, (size_t)(n * c->t.width) * sizeof(float));
        } else if (!w.is_list) {
            memcpy(c->v, w.v, (size_t)n * sizeof(int64_t));
        } else {
            int32_t base = w.off[0];
            int64_t nnz = w.off[n] - base;
            REC_TRY(col_reserve_v(c, nnz));
            for (int64_t r = 0; r <= n; r++) c->off[r] = w.off[r] - base;
            memcpy(c->v, w.v + base, (size_t)nnz * sizeof(int64_t));
        }
        return REC_OK;
    }
    /* Concatenation of several i64 inputs into a list. */
    in_view w[REC_MAX_INPUTS];
    int64_t total = 0;
    for (int k = 0; k < ft->n_inputs; k++) {
        w[k] = view_input(ws, raw, ft->inputs[k], r0);
        total += w[k].is_list ? w[k].off[n] - w[k].off[0] : n;
    }
    REC_TRY(col_reserve_v(c, total));
    int64_t o = 0;
    c->off[0] = 0;
    for (int64_t r = 0; r < n; r++) {
        uint8_t all_null = 1;
        for (int k = 0; k < ft->n_inputs; k++) {
            if (w[k].null[r]) continue;
            all_null = 0;
            if (w[k].is_list) {
                for (int32_t i = w[k].off[r]; i < w[k].off[r + 1]; i++) c->v[o++] = w[k].v[i];
            } else {
                c->v[o++] = w[k].v[r];
            }
        }
        c->null[r] = all_null;
        c->off[r + 1] = (int32_t)o;
    }
    return REC_OK;
}

/* ---- kernels -----------------------------------------------------------------------------
 * Each kernel applies op position `j` of every chain in a group to the chain's column in
 * place. The loops are written for the compiler to vectorise (no calls, no branches on data
 * where a select will do). */

typedef struct kctx {
    const rec_prep_plan *p;
    rec_prep_ws *ws;
    const group *g;
    int j;            /* op position */
} kctx;

#define FOR_EACH_FEATURE(k, c, op)                                                          \
    for (int k##_ = 0; k##_ < (k)->g->nf; k##_++)                                           \
        for (col *c = &(k)->ws->cols[(k)->g->feat[k##_]]; c; c = NULL)                      \
            for (const rec_op *op = &(k)->p->spec->features[(k)->g->feat[k##_]].ops[(k)->j]; op; op = NULL)

static void swap_with_tmp(col *c, col *tmp) {
    int64_t *v = c->v, vcap = c->vcap;
    int32_t *off = c->off;
    c->v = tmp->v;
    c->vcap = tmp->vcap;
    c->off = tmp->off;
    tmp->v = v;
    tmp->vcap = vcap;
    tmp->off = off;
}

static rec_status k_fill_null(kctx *k) {
    FOR_EACH_FEATURE(k, c, op) {
        int64_t n = c->n;
        uint8_t *nl = c->null;
        if (c->t.dtype == REC_DT_F32) {
            float fv = (float)op->fvalue, *f = c->f;
            for (int64_t r = 0; r < n; r++) f[r] = nl[r] ? fv : f[r];
        } else if (!c->t.is_list) {
            int64_t iv = op->ivalue, *v = c->v;
            for (int64_t r = 0; r < n; r++) v[r] = nl[r] ? iv : v[r];
        } else {
            int64_t nulls = 0;
            for (int64_t r = 0; r < n; r++) nulls += nl[r];
            if (nulls) { /* rebuild: each null row becomes [value] */
                col *t = &k->ws->tmp;
                REC_TRY(col_reserve_v(t, c->off[n] + nulls));
                int64_t o = 0;
                t->off[0] = 0;
                for (int64_t r = 0; r < n; r++) {
                    if (nl[r]) {
                        t->v[o++] = op->ivalue;
                    } else {
                        for (int32_t i = c->off[r]; i < c->off[r + 1]; i++) t->v[o++] = c->v[i];
                    }
                    t->off[r + 1] = (int32_t)o;
                }
                swap_with_tmp(c, t);
            }
        }
        memset(nl, 0, (size_t)n);
        c->t.nullable = 0;
    }
    return REC_OK;
}

/* f32 -> i64 truncates toward zero and saturates; NaN becomes 0 (rec_ref_cast_f32_i64). */
static inline int64_t cast_f32_i64(float x) {
    if (!(x == x)) return 0;
    if (x >= 9.2233720368547758e18f) return INT64_MAX;
    if (x <= -9.2233720368547758e18f) return INT64_MIN;
    return (int64_t)x;
}

static rec_status k_cast(kctx *k) {
    FOR_EACH_FEATURE(k, c, op) {
        int64_t n = c->n;
        if (op->to == c->t.dtype) continue;
        if (op->to == REC_DT_F32) { /* i64 scalar -> f32 */
            for (int64_t r = 0; r < n; r++) c->f[r] = (float)c->v[r];
            c->t.dtype = REC_DT_F32;
            c->t.width = 1;
        } else {
            for (int64_t r = 0; r < n; r++) c->v[r] = cast_f32_i64(c->f[r]);
            c->t.dtype = REC_DT_I64;
        }
    }
    return REC_OK;
}

static rec_status k_float_map(kctx *k) {
    FOR_EACH_FEATURE(k, c, op) {
        float *f = c->f;
        int64_t n = c->n;
        switch (op->kind) {
        case REC_OP_LOGIT:
            for (int64_t r = 0; r < n; r++) f[r] = (float)rec_ref_logit(f[r], op->eps);
            break;
        case REC_OP_BOXCOX:
            for (int64_t r = 0; r < n; r++) f[r] = (float)rec_ref_boxcox(f[r], op->lambda);
            break;
        default: /* REC_OP_LOG1P */
            for (int64_t r = 0; r < n; r++) f[r] = rec_g_log1p(f[r]);
            break;
        }
    }
    return REC_OK;
}

static rec_status k_onehot(kctx *k) {
    FOR_EACH_FEATURE(k, c, op) {
        int32_t w = op->num_class;
        int64_t n = c->n;
        /* Expand back to front so the scalar input is read before it is overwritten. */
        for (int64_t r = n - 1; r >= 0; r--) {
            float x = c->f[r];
            double step = (op->hi - op->lo) / w, q = ((double)x - op->lo) / step;
            int32_t idx = (q >= 0 && q < (double)w) ? (int32_t)q : 0;
            float *o = c->f + r * w;
            for (int32_t i = 0; i < w; i++) o[i] = 0.0f;
            o[idx] = 1.0f;
        }
        c->t.width = w;
    }
    return REC_OK;
}

static rec_status k_sigrid_hash(kctx *k) {
    FOR_EACH_FEATURE(k, c, op) {
        int64_t nnz = col_nnz(c), *v = c->v, d = op->max_value;
        uint64_t salt = (uint64_t)op->salt, mult = op->multiplier;
        int shift = op->shift;
        if (d == 1) {
            for (int64_t i = 0; i < nnz; i++) v[i] = 0;
            continue;
        }
        for (int64_t i = 0; i < nnz; i++) {
            int64_t h = (int64_t)rec_g_hash128(salt, rec_g_twang((uint64_t)v[i]));
            v[i] = rec_g_floor_mod(h, d, mult, shift);
        }
    }
    return REC_OK;
}

static rec_status k_modulo(kctx *k) {
    FOR_EACH_FEATURE(k, c, op) {
        int64_t nnz = col_nnz(c), *v = c->v, d = op->divisor;
        if (d == 1) {
            for (int64_t i = 0; i < nnz; i++) v[i] = 0;
            continue;
        }
        uint64_t mult;
        int shift;
        rec_sigrid_magic(d, &mult, &shift);
        for (int64_t i = 0; i < nnz; i++) v[i] = rec_g_floor_mod(v[i], d, mult, shift);
    }
    return REC_OK;
}

static rec_status k_clamp(kctx *k) {
    FOR_EACH_FEATURE(k, c, op) {
        if (c->t.dtype == REC_DT_F32) {
            float lo = (float)op->lo, hi = (float)op->hi, *f = c->f;
            int64_t n = c->n * c->t.width;
            for (int64_t r = 0; r < n; r++) f[r] = f[r] < lo ? lo : (f[r] > hi ? hi : f[r]);
        } else {
            /* Integer bounds (the spec checks they are integers within +-2^53); +-inf become
             * the int64 extremes. */
            int64_t lo = isinf(op->lo) ? INT64_MIN : (int64_t)op->lo;
            int64_t hi = isinf(op->hi) ? INT64_MAX : (int64_t)op->hi;
            int64_t nnz = col_nnz(c), *v = c->v;
            for (int64_t i = 0; i < nnz; i++) v[i] = v[i] < lo ? lo : (v[i] > hi ? hi : v[i]);
        }
    }
    return REC_OK;
}

static rec_status k_bucketize(kctx *k) {
    FOR_EACH_FEATURE(k, c, op) {
        int64_t n = c->n;
        const double *b = op->borders;
        int32_t nb = op->n_borders;
        for (int64_t r = 0; r < n; r++) {
            double x = c->t.dtype == REC_DT_F32 ? (double)c->f[r] : (double)c->v[r];
            int32_t lo = 0, hi = nb; /* lower_bound by bisection */
            while (lo < hi) {
                int32_t mid = (lo + hi) / 2;
                if (b[mid] < x) lo = mid + 1;
                else hi = mid;
            }
            c->v[r] = (lo >= nb - 1 || x < b[lo + 1]) ? lo : lo + 1;
        }
        c->t.dtype = REC_DT_I64;
    }
    return REC_OK;
}

static rec_status k_map_id(kctx *k) {
    FOR_EACH_FEATURE(k, c, op) {
        int64_t nnz = col_nnz(c), *v = c->v, len = op->map_len;
        const int64_t *map = op->map;
        for (int64_t i = 0; i < nnz; i++) v[i] = (uint64_t)v[i] < (uint64_t)len ? map[v[i]] : 0;
    }
    return REC_OK;
}

static rec_status k_categorify(kctx *k) {
    FOR_EACH_FEATURE(k, c, op) {
        const rec_vocab *vb = k->p->vocabs->v[op->vocab_slot];
        int64_t nnz = col_nnz(c), *v = c->v;
        for (int64_t i = 0; i < nnz; i++) v[i] = rec_vocab_lookup(vb, v[i]);
    }
    return REC_OK;
}

static rec_status k_firstx(kctx *k) {
    FOR_EACH_FEATURE(k, c, op) {
        if (!c->t.is_list) continue; /* a scalar is already its first element */
        int64_t n = c->n, o = 0;
        int32_t start = 0;
        for (int64_t r = 0; r < n; r++) { /* in-place compaction: output never outruns input */
            int32_t end = c->off[r + 1], len = end - start;
            if (len > op->x) len = op->x;
            for (int32_t i = 0; i < len; i++) c->v[o + i] = c->v[start + i];
            o += len;
            start = end;
            c->off[r + 1] = (int32_t)o;
        }
    }
    return REC_OK;
}

static rec_status k_ngram(kctx *k) {
    FOR_EACH_FEATURE(k, c, op) {
        int64_t n = c->n, need = 0;
        for (int64_t r = 0; r < n; r++) {
            int64_t len = c->off[r + 1] - c->off[r], m = op->n < len ? op->n : len;
            need += (len - m + 1) * m;
        }
        col *t = &k->ws->tmp;
        REC_TRY(col_reserve_v(t, need));
        int64_t o = 0;
        t->off[0] = 0;
        for (int64_t r = 0; r < n; r++) {
            const int64_t *x = c->v + c->off[r];
            int64_t len = c->off[r + 1] - c->off[r], m = op->n < len ? op->n : len;
            for (int64_t s = 0; s + m <= len && m > 0; s++)
                for (int64_t i = 0; i < m; i++) t->v[o++] = x[s + i];
            t->off[r + 1] = (int32_t)o;
        }
        swap_with_tmp(c, t);
    }
    return REC_OK;
}

typedef rec_status (*kernel_fn)(kctx *);

static const kernel_fn KERNELS[REC_OP_COUNT] = {
    [REC_OP_FILL_NULL] = k_fill_null,  [REC_OP_CAST] = k_cast,         [REC_OP_LOGIT] = k_float_map,
    [REC_OP_BOXCOX] = k_float_map,     [REC_OP_ONEHOT] = k_onehot,     [REC_OP_SIGRID_HASH] = k_sigrid_hash,
    [REC_OP_FIRSTX] = k_firstx,        [REC_OP_CLAMP] = k_clamp,       [REC_OP_BUCKETIZE] = k_bucketize,
    [REC_OP_NGRAM] = k_ngram,          [REC_OP_MAP_ID] = k_map_id,     [REC_OP_LOG1P] = k_float_map,
    [REC_OP_MODULO] = k_modulo,        [REC_OP_CATEGORIFY] = k_categorify,
};

/* ---- running -------------------------------------------------------------------------------- */

/* Runs every group over one block of rows. With `counts` set, categorify ops count their
 * input ids instead of mapping them (the first pass). */
static rec_status run_block(const rec_prep_plan *p, rec_prep_ws *ws, const rec_raw_block *raw,
                            int64_t r0, int64_t n, rec_vocab_counts *counts) {
    for (int g = 0; g < p->n_groups; g++) {
        const group *gr = &p->groups[g];
        for (int k = 0; k < gr->nf; k++)
            REC_TRY(load_inputs(ws, raw, &p->spec->features[gr->feat[k]], &ws->cols[gr->feat[k]], r0, n));
        const rec_feature *f0 = &p->spec->features[gr->feat[0]];
        for (int j = 0; j < f0->n_ops; j++) {
            if (counts && f0->ops[j].kind == REC_OP_CATEGORIFY) {
                for (int k = 0; k < gr->nf; k++) {
                    const col *c = &ws->cols[gr->feat[k]];
                    REC_TRY(rec__vocab_count_ids(counts, p->spec->features[gr->feat[k]].ops[j].vocab_slot,
                                                 c->v, col_nnz(c)));
                }
                break;
            }
            kctx kc = {p, ws, gr, j};
            REC_TRY(KERNELS[f0->ops[j].kind](&kc));
        }
    }
    return REC_OK;
}

/* Writes the block's outputs into batch rows [b->n, b->n + n). */
static rec_status emit_block(const rec_prep_plan *p, rec_prep_ws *ws, const rec_raw_block *raw,
                             int64_t r0, int64_t n, rec_batch *b) {
    const rec_spec *s = p->spec;
    int64_t row = b->n;
    for (int64_t r = 0; r < n; r++) b->label[row + r] = raw->has_label ? raw->label[r0 + r] : 0.0f;
    for (int i = 0; i < s->n_features; i++) {
        const rec_feature *ft = &s->features[i];
        const col *c = &ws->cols[i];
        if (ft->kind == REC_FEAT_DENSE) {
            int32_t w = c->t.width, Dn = b->n_dense;
            float *dst = b->dense + row * Dn + ft->dense_offset;
            if (w == 1) {
                for (int64_t r = 0; r < n; r++) dst[r * Dn] = c->f[r];
            } else {
                for (int64_t r = 0; r < n; r++) memcpy(dst + r * Dn, c->f + r * w, (size_t)w * sizeof(float));
            }
        } else if (ft->kind == REC_FEAT_SPARSE) {
            rec_jagged *jg = &b->sparse[ft->sparse_index];
            if (row == 0) {
                jg->offsets[0] = 0;
                REC_TRY(rec_batch_set_wide(b, ft->sparse_index, 1)); /* the columns hold int64 ids */
            }
            int64_t base = jg->offsets[row], nnz = col_nnz(c);
            REC_TRY(rec_batch_reserve_nnz(b, ft->sparse_index, base + nnz, 0));
            if (c->t.is_list) {
                for (int64_t r = 0; r < n; r++) jg->offsets[row + r + 1] = base + c->off[r + 1];
            } else {
                for (int64_t r = 0; r < n; r++) jg->offsets[row + r + 1] = base + r + 1;
            }
            memcpy(jg->ids64 + base, c->v, (size_t)nnz * sizeof(int64_t));
        }
    }
    b->n = row + n;
    return REC_OK;
}

/* Raw rows [r0, r0+n) block by block: into `b` (a run), or into `counts` (the counting pass). */
static rec_status run_rows(const rec_prep_plan *p, rec_prep_ws *ws, const rec_raw_block *raw,
                           int64_t r0, int64_t n, rec_batch *b, rec_vocab_counts *counts) {
    if (r0 < 0 || n < 0 || r0 + n > raw->n)
        return rec_errorf(REC_EINVAL, "rows [%lld, %lld) are outside the raw block of %lld rows",
                          (long long)r0, (long long)(r0 + n), (long long)raw->n);
    for (int64_t done = 0; done < n; done += REC_PREP_BLOCK) {
        int64_t m = n - done < REC_PREP_BLOCK ? n - done : REC_PREP_BLOCK;
        REC_TRY(run_block(p, ws, raw, r0 + done, m, counts));
        if (b) REC_TRY(emit_block(p, ws, raw, r0 + done, m, b));
    }
    return REC_OK;
}

rec_status rec_prep_run(const rec_prep_plan *p, rec_prep_ws *ws, const rec_raw_block *raw,
                        int64_t r0, int64_t n, rec_batch *b) {
    const rec_spec *s = p->spec;
    if (s->n_vocabs > 0 && !p->vocabs)
        return rec_errorf(REC_EINVAL,
                          "spec '%s' has %d categorify op(s) but the plan has no vocabularies; "
                          "build them with a counting pass first (rectrain prep does this)",
                          s->name, s->n_vocabs);
    if (b->n_dense != s->n_dense || b->n_sparse != s->n_sparse)
        return rec_errorf(REC_EINVAL, "batch has %d dense / %d sparse columns but spec '%s' makes %d / %d",
                          b->n_dense, b->n_sparse, s->name, s->n_dense, s->n_sparse);
    if (b->n + n > b->cap)
        return rec_errorf(REC_EINVAL, "batch of %lld rows has no room for %lld more (holds %lld)",
                          (long long)b->cap, (long long)n, (long long)b->n);
    return run_rows(p, ws, raw, r0, n, b, NULL);
}

rec_status rec_prep_count(const rec_prep_plan *p, rec_prep_ws *ws, const rec_raw_block *raw,
                          int64_t r0, int64_t n, rec_vocab_counts *counts) {
    return run_rows(p, ws, raw, r0, n, NULL, counts);
}

const rec_spec *rec__prep_plan_spec(const rec_prep_plan *p) { return p->spec; }
const rec_vocab_set *rec__prep_plan_vocabs(const rec_prep_plan *p) { return p->vocabs; }
