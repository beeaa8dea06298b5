/* The GPU preprocessing executor over a backend (gexec.h), and its CPU backend.
 *
 * Columns: the 39 raw ones of a block (I1..I13 ids, C1..C26 id lists), then one per feature.
 * A block runs the fusion plan step by step. Before step j, the features whose chains start
 * there are loaded (their inputs copied or concatenated; a feature without ops is loaded once
 * its inputs are done, in waves when one reads another loaded at the same step); then each
 * kernel of step j is one fused op over its members. Ops that change row lengths count, scan
 * and write into second buffers that then swap with the first (gops.h). The host keeps an
 * upper bound of each column's ids (raw: exact; fill_null adds a row's worth, firstx caps at
 * x a row, ngram multiplies by n, a load sums its inputs), so buffers are sized before a
 * launch and the host never waits for a count.
 *
 * What crosses to the backend, and when the host waits: a block's raw columns go in one copy
 * from a pinned staging buffer into one backend buffer (the raw columns point into it); the
 * column descriptors, when they changed since the last launch, and each wave of loads, from
 * snapshots in pinned memory that are not reused before the block ends; the outputs come
 * back in two copies, gathered on the backend (dense values and list offsets, then the ids
 * their offsets count). The host waits for the backend twice a block: at those two copies.
 */
#include <stdlib.h>
#include <string.h>

#include "gexec.h"
#include "prep_internal.h"
#include "rectrain/core.h"

enum { RAW = REC_CRITEO_NINT + REC_CRITEO_NCAT };

static size_t pad8(size_t x) { return (x + 7) & ~(size_t)7; }

/* A buffer on the backend, or the host's pinned one, that grows. */
typedef struct gbuf {
    void *p;
    size_t cap;
} gbuf;

struct rec_gexec {
    const rec_spec *s;
    const rec_fusion *fu;
    const rec_gback *be;
    int64_t rows;
    int nc;                  /* RAW + features */
    rec_gcol *cols, *dcols;  /* the descriptors: the host's copy, the backend's */
    int64_t *v2cap, *vcap, *ub;
    rec_gop *ops, *dops;     /* per kernel, its members' ops contiguous (at kofs) */
    int *kofs;
    rec_gop *lops, *dlops;   /* loads: one per feature (host), a wave's (backend) */
    rec_gop *wave;           /* (features) a wave of loads (host) */
    int32_t *dcnt;
    int max_m;
    int *load_step;
    void **owned;            /* backend arrays of op parameters */
    int n_owned;
    int measure;             /* rec_gexec_measure */
    double ops_ms;           /* rec_gexec_ops_ms */
    rec_gexec_sample *samples;
    int64_t n_samples, cap_samples;
    double *vpr;             /* (instances) values a row each reads, in the measured block */
    int dirty;               /* cols changed since the backend's copy was last written */
    gbuf raw, out;           /* the backend's: the block's raw columns; the gathered outputs */
    gbuf stage;              /* pinned: the raw columns going, the outputs coming back */
    int32_t *zeros;          /* pinned, (F) zeros: each block's narrowing flags start from them */
    uint8_t *narrow;         /* (F) a sparse feature whose table allows int32 ids (rec_ids_wide) */
    uint8_t *overrun;        /* (F) the block's features whose ids did not fit in int32 */
    uint8_t *snap;           /* pinned: descriptor and wave snapshots of the block */
    size_t snap_at, snap_cap;
    rec_corun *corun;        /* rec_gexec_corun, or NULL */
    rec_corun_plan plan;     /* its plan as of this block (n_stages 0: none yet) */
    uint64_t plan_version;
};

static int col_of_input(int in) { return in < 0 ? -in - 1 : RAW + in; }

static rec_status owned_put(rec_gexec *g, const void *src, size_t bytes, const void **out) {
    void *p = NULL;
    REC_TRY(g->be->alloc(g->be->ctx, &p, bytes ? bytes : 8));
    g->owned[g->n_owned++] = p;
    *out = p;
    return bytes ? g->be->put(g->be->ctx, p, src, bytes) : REC_OK;
}

/* The op of instance (f, j) as the row functions read it. */
static rec_status make_op(rec_gexec *g, const rec_vocab_set *vocabs, int f, int j, rec_gop *o) {
    const rec_op *op = &g->s->features[f].ops[j];
    memset(o, 0, sizeof *o);
    o->kind = (int32_t)op->kind, o->col = RAW + f;
    o->f32 = op->in.dtype == REC_DT_F32, o->list = op->in.is_list != 0, o->width = op->in.width;
    o->to = (int32_t)op->to, o->fvalue = (float)op->fvalue, o->ivalue = op->ivalue;
    o->eps = op->eps, o->lambda = op->lambda, o->lo = op->lo, o->hi = op->hi;
    o->num_class = op->num_class, o->x = op->x, o->n = op->n;
    o->max_value = op->max_value, o->divisor = op->divisor, o->salt = (uint64_t)op->salt;
    o->n_borders = op->n_borders, o->map_len = op->map_len;
    if (op->kind == REC_OP_SIGRID_HASH) o->mult = op->multiplier, o->shift = op->shift;
    if (op->kind == REC_OP_MODULO && op->divisor >= 2) {
        int sh;
        rec_sigrid_magic(op->divisor, &o->mult, &sh);
        o->shift = sh;
    }
    const void *p;
    if (op->kind == REC_OP_BUCKETIZE) {
        REC_TRY(owned_put(g, op->borders, sizeof(double) * (size_t)op->n_borders, &p));
        o->borders = p;
    }
    if (op->kind == REC_OP_MAP_ID) {
        REC_TRY(owned_put(g, op->map, sizeof(int64_t) * (size_t)op->map_len, &p));
        o->map = p;
    }
    if (op->kind == REC_OP_CATEGORIFY) {
        if (!vocabs)
            return rec_errorf(REC_EINVAL, "spec '%s' has categorify ops but no vocabularies were given", g->s->name);
        const int64_t *k, *v;
        const uint8_t *u;
        int64_t cap;
        rec__vocab_table(vocabs->v[op->vocab_slot], &k, &v, &u, &cap);
        REC_TRY(owned_put(g, k, sizeof(int64_t) * (size_t)cap, &p));
        o->vkeys = p;
        REC_TRY(owned_put(g, v, sizeof(int64_t) * (size_t)cap, &p));
        o->vvals = p;
        REC_TRY(owned_put(g, u, (size_t)cap, &p));
        o->vused = p;
        o->vcap = cap;
    }
    return REC_OK;
}

static rec_type out_type_of(const rec_spec *s, int in) {
    if (in >= 0) return s->features[in].out_type;
    rec_type t = {0};
    t.dtype = REC_DT_I64, t.width = 1, t.is_list = -in > REC_CRITEO_NINT, t.nullable = 1;
    return t;
}

static void make_load(const rec_gexec *g, int f, rec_gop *o) {
    const rec_feature *ft = &g->s->features[f];
    memset(o, 0, sizeof *o);
    o->kind = REC_G_LOAD, o->col = RAW + f, o->n_src = ft->n_inputs, o->width = 1;
    for (int k = 0; k < ft->n_inputs; k++) {
        const rec_type t = out_type_of(g->s, ft->inputs[k]);
        o->src[k] = col_of_input(ft->inputs[k]);
        o->src_f32[k] = t.dtype == REC_DT_F32, o->src_list[k] = t.is_list != 0;
        if (o->src_f32[k]) o->width = t.width;
    }
}

static rec_status alloc_col(rec_gexec *g, int c, int64_t floats, int lists) {
    rec_gcol *d = &g->cols[c];
    void *p;
    const rec_gback *be = g->be;
    const int64_t R = g->rows;
    REC_TRY(be->alloc(be->ctx, &p, (size_t)R + 8));
    d->null = p;
    REC_TRY(be->alloc(be->ctx, &p, sizeof(int64_t) * (size_t)(R + 1)));
    d->v = p;
    g->vcap[c] = R + 1;
    if (lists) {
        REC_TRY(be->alloc(be->ctx, &p, sizeof(int32_t) * (size_t)(R + 1)));
        d->off = p;
        REC_TRY(be->alloc(be->ctx, &p, sizeof(int32_t) * (size_t)(R + 1)));
        d->off2 = p;
        REC_TRY(be->alloc(be->ctx, &p, sizeof(int64_t) * (size_t)(R + 1)));
        d->v2 = p;
        g->v2cap[c] = R + 1;
    }
    if (floats) {
        REC_TRY(be->alloc(be->ctx, &p, sizeof(float) * (size_t)floats));
        d->f = p;
        REC_TRY(be->alloc(be->ctx, &p, sizeof(float) * (size_t)floats));
        d->f2 = p;
    }
    return REC_OK;
}

/* Snapshots for a block of `launches` kernel launches: a descriptor copy a launch (a kernel,
 * a piece of one or a wave of loads), every load once. Between blocks only (their copies are
 * done). */
static rec_status snap_room(rec_gexec *g, int launches) {
    const int F = g->s->n_features;
    const size_t cap = (size_t)(launches + F + 1) * pad8(sizeof(rec_gcol) * (size_t)g->nc) +
                       (size_t)(F + 1) * pad8(sizeof(rec_gop));
    if (cap <= g->snap_cap) return REC_OK;
    if (g->snap) g->be->host_release(g->be->ctx, g->snap);
    g->snap = NULL, g->snap_cap = 0;
    void *p;
    REC_TRY(g->be->host_alloc(g->be->ctx, &p, cap));
    g->snap = p, g->snap_cap = cap;
    return REC_OK;
}

static rec_status init(rec_gexec *g, const rec_spec *spec, const rec_fusion *fu, const rec_vocab_set *vocabs,
                       const rec_gback *be, int64_t rows) {
    const int F = spec->n_features;
    g->s = spec, g->fu = fu, g->be = be, g->rows = rows, g->nc = RAW + F;
    const int n_params = 3 * fu->n_ops + 1; /* an op's arrays: categorify's three at most */
    g->cols = calloc((size_t)g->nc, sizeof(rec_gcol));
    g->v2cap = calloc((size_t)g->nc, sizeof(int64_t)), g->vcap = calloc((size_t)g->nc, sizeof(int64_t));
    g->ub = calloc((size_t)g->nc, sizeof(int64_t));
    g->ops = calloc((size_t)fu->n_ops + 1, sizeof(rec_gop)), g->kofs = calloc((size_t)fu->n_kernels + 1, sizeof(int));
    g->lops = calloc((size_t)F + 1, sizeof(rec_gop)), g->load_step = calloc((size_t)F + 1, sizeof(int));
    g->wave = calloc((size_t)F + 1, sizeof(rec_gop));
    g->owned = calloc((size_t)n_params, sizeof(void *));
    if (!g->cols || !g->v2cap || !g->vcap || !g->ub || !g->ops || !g->kofs || !g->lops || !g->load_step || !g->owned ||
        !g->wave)
        return rec_errorf(REC_ENOMEM, "GPU preprocessing: out of memory");
    /* columns: the raw ones point into the block's buffer (upload); each feature's own, with
     * room for its widest f32 stage */
    for (int f = 0; f < F; f++) {
        const rec_feature *ft = &spec->features[f];
        int w = ft->out_type.dtype == REC_DT_F32 ? ft->out_type.width : 1;
        for (int j = 0; j < ft->n_ops; j++)
            if (ft->ops[j].in.dtype == REC_DT_F32 && ft->ops[j].in.width > w) w = ft->ops[j].in.width;
        REC_TRY(alloc_col(g, RAW + f, rows * w, 1));
    }
    /* the kernels' ops, each kernel's members contiguous */
    for (int k = 0, at = 0; k < fu->n_kernels; k++) {
        g->kofs[k] = at;
        if (fu->kernels[k].n > g->max_m) g->max_m = fu->kernels[k].n;
        for (int m = 0; m < fu->kernels[k].n; m++, at++)
            REC_TRY(make_op(g, vocabs, fu->ops[fu->kernels[k].members[m]].feature, fu->ops[fu->kernels[k].members[m]].op,
                            &g->ops[at]));
    }
    if (F > g->max_m) g->max_m = F;
    void *p;
    REC_TRY(be->alloc(be->ctx, &p, sizeof(rec_gop) * ((size_t)fu->n_ops + 1)));
    g->dops = p;
    REC_TRY(be->put(be->ctx, g->dops, g->ops, sizeof(rec_gop) * (size_t)fu->n_ops));
    REC_TRY(be->alloc(be->ctx, &p, sizeof(rec_gop) * ((size_t)F + 1)));
    g->dlops = p;
    REC_TRY(be->alloc(be->ctx, &p, sizeof(rec_gcol) * (size_t)g->nc));
    g->dcols = p;
    REC_TRY(be->alloc(be->ctx, &p, sizeof(int32_t) * (size_t)(g->max_m * rows)));
    g->dcnt = p;
    REC_TRY(snap_room(g, fu->n_kernels));
    REC_TRY(be->host_alloc(be->ctx, &p, sizeof(int32_t) * ((size_t)F + 1)));
    g->zeros = p;
    memset(g->zeros, 0, sizeof(int32_t) * ((size_t)F + 1));
    g->overrun = calloc((size_t)F + 1, 1), g->narrow = calloc((size_t)F + 1, 1);
    if (!g->overrun || !g->narrow) return rec_errorf(REC_ENOMEM, "GPU preprocessing: out of memory");
    for (int f = 0; f < F; f++)
        g->narrow[f] = spec->features[f].kind == REC_FEAT_SPARSE &&
                       !rec_ids_wide(rec_spec_table_rows(spec, spec->features[f].sparse_index));
    g->dirty = 1;
    /* when each feature loads: at its first op's step, or (no ops) once its inputs are done */
    int *first = calloc((size_t)F + 1, sizeof(int)), *done = calloc((size_t)F + 1, sizeof(int));
    if (!first || !done) {
        free(first), free(done);
        return rec_errorf(REC_ENOMEM, "GPU preprocessing: out of memory");
    }
    for (int i = fu->n_ops - 1; i >= 0; i--) first[fu->ops[i].feature] = i;
    for (int f = 0; f < F; f++) {
        const rec_feature *ft = &spec->features[f];
        make_load(g, f, &g->lops[f]);
        if (ft->n_ops) {
            g->load_step[f] = fu->ops[first[f]].step;
            done[f] = fu->ops[first[f] + ft->n_ops - 1].step + 1;
        } else {
            for (int k = 0; k < ft->n_inputs; k++)
                if (ft->inputs[k] >= 0 && done[ft->inputs[k]] > g->load_step[f]) g->load_step[f] = done[ft->inputs[k]];
            done[f] = g->load_step[f];
        }
    }
    free(first), free(done);
    return REC_OK;
}

rec_status rec_gexec_init(rec_gexec **out, const rec_spec *spec, const rec_fusion *fu, const rec_vocab_set *vocabs,
                          const rec_gback *be, int64_t rows) {
    *out = NULL;
    if (rows < 1 || rows > INT32_MAX / 64)
        return rec_errorf(REC_EINVAL, "GPU preprocessing: blocks of %lld rows; give 1 to %d", (long long)rows, INT32_MAX / 64);
    rec_gexec *g = calloc(1, sizeof *g);
    if (!g) return rec_errorf(REC_ENOMEM, "GPU preprocessing: out of memory");
    g->be = be;
    const rec_status s = init(g, spec, fu, vocabs, be, rows);
    if (s) {
        rec_gexec_free(g);
        return s;
    }
    *out = g;
    return REC_OK;
}

void rec_gexec_free(rec_gexec *g) {
    if (!g) return;
    const rec_gback *be = g->be;
    for (int c = RAW; g->cols && c < g->nc; c++) { /* the raw columns are views of g->raw */
        rec_gcol *d = &g->cols[c];
        void *ps[7] = {d->f, d->f2, d->v, d->v2, d->off, d->off2, d->null};
        for (int k = 0; k < 7; k++)
            if (ps[k]) be->release(be->ctx, ps[k]);
    }
    for (int k = 0; k < g->n_owned; k++) be->release(be->ctx, g->owned[k]);
    void *ps[6] = {g->dops, g->dlops, g->dcols, g->dcnt, g->raw.p, g->out.p};
    for (int k = 0; k < 6; k++)
        if (ps[k]) be->release(be->ctx, ps[k]);
    if (g->stage.p) be->host_release(be->ctx, g->stage.p);
    if (g->snap) be->host_release(be->ctx, g->snap);
    if (g->zeros) be->host_release(be->ctx, g->zeros);
    free(g->cols), free(g->v2cap), free(g->vcap), free(g->ub), free(g->ops), free(g->kofs), free(g->lops);
    free(g->load_step), free(g->owned), free(g->wave), free(g->samples), free(g->vpr), free(g->overrun), free(g->narrow);
    rec_corun_plan_free(&g->plan);
    free(g);
}

void rec_gexec_measure(rec_gexec *g, int on) { g->measure = on; }

void rec_gexec_corun(rec_gexec *g, rec_corun *c) {
    g->corun = c;
    rec_corun_plan_free(&g->plan);
    g->plan_version = 0;
}

double rec_gexec_ops_ms(const rec_gexec *g) { return g->ops_ms; }

int64_t rec_gexec_samples(const rec_gexec *g, const rec_gexec_sample **out) {
    *out = g->samples;
    return g->n_samples;
}


/* Ensures column c's second id buffer holds n ids. */
static rec_status room(rec_gexec *g, int c, int64_t n) {
    if (n <= g->v2cap[c]) return REC_OK;
    int64_t cap = g->v2cap[c] * 2 > n ? g->v2cap[c] * 2 : n;
    void *p;
    REC_TRY(g->be->alloc(g->be->ctx, &p, sizeof(int64_t) * (size_t)cap));
    if (g->cols[c].v2) g->be->release(g->be->ctx, g->cols[c].v2);
    g->cols[c].v2 = p, g->v2cap[c] = cap;
    g->dirty = 1;
    return REC_OK;
}

/* Ensures b holds `bytes`, on the backend or (pinned) on the host; its contents are not kept. */
static rec_status grow(rec_gexec *g, gbuf *b, size_t bytes, int host) {
    if (bytes <= b->cap) return REC_OK;
    const rec_gback *be = g->be;
    if (b->p) host ? be->host_release(be->ctx, b->p) : be->release(be->ctx, b->p);
    b->p = NULL, b->cap = 0;
    const size_t cap = bytes + bytes / 4;
    REC_TRY(host ? be->host_alloc(be->ctx, &b->p, cap) : be->alloc(be->ctx, &b->p, cap));
    b->cap = cap;
    return REC_OK;
}

/* `bytes` of src copied to the backend at dst through a snapshot in pinned memory, which the
 * copy may read until the block ends. */
static rec_status put_snapshot(rec_gexec *g, void *dst, const void *src, size_t bytes) {
    if (g->snap_at + pad8(bytes) > g->snap_cap)
        return rec_errorf(REC_EINVAL, "GPU preprocessing: more launches in a block than the plan has kernels and loads");
    uint8_t *p = g->snap + g->snap_at;
    memcpy(p, src, bytes);
    g->snap_at += pad8(bytes);
    return g->be->put(g->be->ctx, dst, p, bytes);
}

/* The ids column c holds at most after `o` runs on it (n rows). */
static int64_t bound_after(const rec_gexec *g, const rec_gop *o, int64_t n) {
    const int64_t ub = g->ub[o->col];
    if (o->kind == REC_G_LOAD) {
        int64_t s = 0;
        for (int k = 0; k < o->n_src; k++) s += o->src_list[k] ? g->ub[o->src[k]] : n * (o->src_f32[k] ? o->width : 1);
        return s;
    }
    if (o->kind == REC_OP_FILL_NULL) return ub + n;
    if (o->kind == REC_OP_FIRSTX) return ub < (int64_t)o->x * n ? ub : (int64_t)o->x * n;
    return ub * (o->n > 1 ? o->n : 1); /* ngram */
}

static void swap_v(rec_gcol *c, int64_t *vcap, int64_t *v2cap) { /* the caller marks cols dirty */
    int64_t *v = c->v, t = *vcap;
    int32_t *off = c->off;
    c->v = c->v2, c->v2 = v, c->off = c->off2, c->off2 = off, *vcap = *v2cap, *v2cap = t;
}

static void swap_f(rec_gcol *c) {
    float *f = c->f;
    c->f = c->f2, c->f2 = f;
}

/* One fused op: ops (host) and dops (the backend's copy) of m members, over n rows. */
static rec_status launch(rec_gexec *g, const rec_gop *ops, const rec_gop *dops, int m, int64_t n) {
    const rec_gback *be = g->be;
    const int kind = ops[0].kind;
    const int counted = rec_g_counted(&ops[0]);
    int64_t total = 0; /* the members' ids after the op, at most */
    if (counted)
        for (int k = 0; k < m; k++) {
            const int64_t u = bound_after(g, &ops[k], n);
            REC_TRY(room(g, ops[k].col, u));
            g->ub[ops[k].col] = u;
            total += u;
        }
    if (g->dirty) REC_TRY(put_snapshot(g, g->dcols, g->cols, sizeof(rec_gcol) * (size_t)g->nc));
    g->dirty = 0;
    int lanes = 1; /* a scalar kernel's grid: a thread a row */
    for (int k = 0; k < m; k++)
        if (rec_g_lanes(&ops[k]) > lanes) lanes = rec_g_lanes(&ops[k]);
    if (!counted && kind != REC_OP_ONEHOT) return be->rows(be->ctx, REC_G_ELEM, dops, m, lanes, g->dcols, n, g->dcnt);
    if (counted) {
        REC_TRY(be->rows(be->ctx, REC_G_COUNT, dops, m, 1, g->dcols, n, g->dcnt));
        REC_TRY(be->scan(be->ctx, ops, dops, m, g->cols, g->dcols, n, g->dcnt, total <= INT32_MAX));
    }
    REC_TRY(be->rows(be->ctx, REC_G_WRITE, dops, m, lanes, g->dcols, n, g->dcnt));
    for (int k = 0; k < m; k++) {
        rec_gcol *c = &g->cols[ops[k].col];
        if (kind == REC_OP_ONEHOT || kind == REC_G_LOAD) swap_f(c);
        if (counted) swap_v(c, &g->vcap[ops[k].col], &g->v2cap[ops[k].col]);
    }
    g->dirty = 1;
    return REC_OK;
}

/* Kernel k alone, timed: the values its members read a row (a list's from its offsets), the
 * backend drained, the launch, drained again. */
static rec_status measured(rec_gexec *g, int k, int64_t n) {
    const rec_fused_kernel *kr = &g->fu->kernels[k];
    if (!g->vpr && !(g->vpr = calloc((size_t)g->fu->n_ops + 1, sizeof(double))))
        return rec_errorf(REC_ENOMEM, "GPU preprocessing: out of memory");
    for (int m = 0; m < kr->n; m++) {
        const rec_gop *o = &g->ops[g->kofs[k] + m];
        int32_t nnz = (int32_t)n;
        if (o->list) REC_TRY(g->be->get(g->be->ctx, &nnz, g->cols[o->col].off + n, sizeof nnz));
        g->vpr[kr->members[m]] = n ? (double)nnz / (double)n * (o->f32 ? o->width : 1) : 0;
    }
    if (g->n_samples == g->cap_samples) {
        const int64_t cap = g->cap_samples ? 2 * g->cap_samples : 256;
        rec_gexec_sample *p = realloc(g->samples, sizeof *p * (size_t)cap);
        if (!p) return rec_errorf(REC_ENOMEM, "GPU preprocessing: out of memory");
        g->samples = p, g->cap_samples = cap;
    }
    rec_gexec_sample *smp = &g->samples[g->n_samples];
    rec_lat_features(g->fu, g->s, k, 0, kr->n, g->vpr, n, smp->x);
    REC_TRY(g->be->sync(g->be->ctx));
    const double t0 = rec_now();
    REC_TRY(launch(g, &g->ops[g->kofs[k]], g->dops + g->kofs[k], kr->n, n));
    REC_TRY(g->be->sync(g->be->ctx));
    smp->ms = 1e3 * (rec_now() - t0);
    g->n_samples++;
    return REC_OK;
}

/* The loads of step j, in waves: a feature once every input loaded at this step is done. */
static rec_status loads(rec_gexec *g, int j, int64_t n, uint8_t *loaded) {
    const int F = g->s->n_features;
    for (;;) {
        rec_gop *wave = g->wave;
        int m = 0;
        for (int f = 0; f < F; f++) {
            if (loaded[f] || g->load_step[f] != j) continue;
            int ready = 1;
            const rec_feature *ft = &g->s->features[f];
            for (int k = 0; k < ft->n_inputs; k++) {
                const int in = ft->inputs[k];
                if (in >= 0 && g->load_step[in] == j && !(loaded[in] == 1 && g->s->features[in].n_ops == 0)) ready = 0;
            }
            if (ready) wave[m++] = g->lops[f];
        }
        if (!m) return REC_OK;
        for (int k = 0; k < m; k++) loaded[wave[k].col - RAW] = 2; /* this wave's: not yet readable */
        REC_TRY(put_snapshot(g, g->dlops, wave, sizeof(rec_gop) * (size_t)m));
        REC_TRY(launch(g, wave, g->dlops, m, n));
        for (int k = 0; k < m; k++) loaded[wave[k].col - RAW] = 1;
    }
}

/* Raw rows [r0, r0 + n) into the raw columns: their arrays packed in the pinned stage, widest
 * first so that each stays aligned (the ids, then the lists' offsets from 0, then the missing
 * flags), one copy to the backend, and the columns pointed into it. */
static rec_status upload(rec_gexec *g, const rec_raw_block *raw, int64_t r0, int64_t n) {
    enum { NI = REC_CRITEO_NINT, NC = REC_CRITEO_NCAT };
    int64_t nnz[NC], ids = 0;
    for (int k = 0; k < NC; k++) nnz[k] = raw->cat[k].off[r0 + n] - raw->cat[k].off[r0], ids += nnz[k];
    const size_t flags = pad8((size_t)n), offs = pad8(sizeof(int32_t) * (size_t)(n + 1));
    const size_t bytes = sizeof(int64_t) * (size_t)(NI * n + ids) + NC * offs + RAW * flags;
    REC_TRY(grow(g, &g->stage, bytes, 1));
    REC_TRY(grow(g, &g->raw, bytes, 0));
    uint8_t *h = g->stage.p, *d = g->raw.p;
    size_t at = 0;
    for (int c = 0; c < RAW; c++) { /* the ids */
        const int64_t *src = c < NI ? raw->ints + (size_t)c * raw->cap + r0 : raw->cat[c - NI].val + raw->cat[c - NI].off[r0];
        const int64_t len = c < NI ? n : nnz[c - NI];
        memcpy(h + at, src, sizeof(int64_t) * (size_t)len);
        g->cols[c].v = (int64_t *)(d + at);
        g->ub[c] = len;
        at += sizeof(int64_t) * (size_t)len;
    }
    for (int k = 0; k < NC; k++) { /* the lists' offsets */
        const rec_raw_list *l = &raw->cat[k];
        int32_t *off = (int32_t *)(h + at);
        for (int64_t r = 0; r <= n; r++) off[r] = l->off[r0 + r] - l->off[r0];
        g->cols[NI + k].off = (int32_t *)(d + at);
        at += offs;
    }
    for (int c = 0; c < RAW; c++) { /* the missing flags */
        memcpy(h + at, c < NI ? raw->int_null + (size_t)c * raw->cap + r0 : raw->cat[c - NI].null + r0, (size_t)n);
        g->cols[c].null = d + at;
        at += flags;
    }
    g->dirty = 1;
    return g->be->put(g->be->ctx, d, h, bytes);
}

/* The outputs of the block into batch rows [b->n, b->n + n), as exec.c's emit_block: the
 * dense features' columns laid into the batch's rows on the backend, the lists' offsets
 * gathered, both copied back in one copy; then the ids they count. */
static rec_status emit(rec_gexec *g, const rec_raw_block *raw, int64_t r0, int64_t n, rec_batch *b) {
    const rec_gback *be = g->be;
    const int F = g->s->n_features, Dn = b->n_dense;
    const int64_t row = b->n;
    for (int64_t r = 0; r < n; r++) b->label[row + r] = raw->has_label ? raw->label[r0 + r] : 0.0f;
    const size_t rows_bytes = pad8(sizeof(float) * (size_t)(n * Dn)); /* the dense rows come first */
    size_t at = 0;
    for (int pass = 0; pass < 2; pass++) { /* sizes, then the copies */
        at = rows_bytes;
        for (int i = 0; i < F; i++) {
            const rec_feature *ft = &g->s->features[i];
            const rec_gcol *c = &g->cols[RAW + i];
            if (ft->kind == REC_FEAT_DENSE && pass)
                REC_TRY(be->to_rows(be->ctx, (float *)g->out.p, c->f, n, ft->out_type.width, Dn, ft->dense_offset));
            if (ft->kind != REC_FEAT_SPARSE || !ft->out_type.is_list) continue;
            const size_t len = sizeof(int32_t) * (size_t)(n + 1);
            if (pass) REC_TRY(be->copy(be->ctx, (uint8_t *)g->out.p + at, c->off, len));
            at += pad8(len);
        }
        if (!pass) {
            REC_TRY(grow(g, &g->out, at, 0));
            REC_TRY(grow(g, &g->stage, at, 1));
        }
    }
    REC_TRY(be->get(be->ctx, g->stage.p, g->out.p, at));
    if (Dn) memcpy(b->dense + row * Dn, g->stage.p, sizeof(float) * (size_t)(n * Dn));
    int64_t ids = 0; /* the sparse features' ids, from their offsets */
    at = rows_bytes;
    for (int i = 0; i < F; i++) {
        const rec_feature *ft = &g->s->features[i];
        const uint8_t *h = (const uint8_t *)g->stage.p + at;
        if (ft->kind == REC_FEAT_SPARSE) {
            rec_jagged *jg = &b->sparse[ft->sparse_index];
            if (row == 0) jg->offsets[0] = 0;
            const int64_t base = jg->offsets[row];
            const int32_t *off = ft->out_type.is_list ? (const int32_t *)h : NULL;
            for (int64_t r = 0; r < n; r++) jg->offsets[row + r + 1] = base + (off ? off[r + 1] : r + 1);
            if (off) at += pad8(sizeof(int32_t) * (size_t)(n + 1));
            ids += jg->offsets[row + n] - base;
        }
    }
    /* The ids: narrowed to int32 on the backend where the feature's table allows
     * (rec_ids_wide), half the bytes back, with a flag a feature (from g->zeros, which nothing
     * writes) raised where an id does not fit: that feature comes back again as int64 (a spec
     * whose ids overrun its table, which its check refuses; the writer names the id). */
    const size_t head = pad8(sizeof(int32_t) * (size_t)F);
    REC_TRY(grow(g, &g->out, head + sizeof(int64_t) * (size_t)ids, 0));
    REC_TRY(grow(g, &g->stage, head + sizeof(int64_t) * (size_t)ids, 1));
    REC_TRY(be->put(be->ctx, g->out.p, g->zeros, head));
    size_t put = head;
    for (int i = 0; i < F; i++) {
        const rec_feature *ft = &g->s->features[i];
        if (ft->kind != REC_FEAT_SPARSE) continue;
        const rec_jagged *jg = &b->sparse[ft->sparse_index];
        const int64_t len = jg->offsets[row + n] - jg->offsets[row];
        const int narrow = g->narrow[i];
        if (narrow)
            REC_TRY(be->narrow(be->ctx, (int32_t *)((uint8_t *)g->out.p + put), g->cols[RAW + i].v, len,
                               (int32_t *)g->out.p + i));
        else
            REC_TRY(be->copy(be->ctx, (uint8_t *)g->out.p + put, g->cols[RAW + i].v, sizeof(int64_t) * (size_t)len));
        put += pad8((narrow ? sizeof(int32_t) : sizeof(int64_t)) * (size_t)len);
    }
    REC_TRY(be->get(be->ctx, g->stage.p, g->out.p, put)); /* put > 0: waits */
    size_t again = 0; /* the overrun features' ids, as int64 */
    at = head;
    for (int i = 0; i < F; i++) {
        const rec_feature *ft = &g->s->features[i];
        if (ft->kind != REC_FEAT_SPARSE) continue;
        const int32_t f = ft->sparse_index;
        rec_jagged *jg = &b->sparse[f];
        const int64_t base = jg->offsets[row], len = jg->offsets[row + n] - base;
        const int eligible = g->narrow[i], overrun = ((const int32_t *)g->stage.p)[i] != 0;
        g->overrun[i] = (uint8_t)overrun;
        const int narrow = eligible && !overrun;
        if (row == 0) REC_TRY(rec_batch_set_wide(b, f, !narrow));
        else if (!narrow && !jg->wide) REC_TRY(rec_batch_set_wide(b, f, 1)); /* the batch's earlier ids widened */
        REC_TRY(rec_batch_reserve_nnz(b, f, base + len, 0));
        const uint8_t *h = (const uint8_t *)g->stage.p + at;
        if (narrow && !jg->wide)
            memcpy(jg->ids32 + base, h, sizeof(int32_t) * (size_t)len);
        else if (narrow) /* into a batch an earlier block widened */
            for (int64_t k = 0; k < len; k++) jg->ids64[base + k] = ((const int32_t *)h)[k];
        else if (!overrun)
            memcpy(jg->ids64 + base, h, sizeof(int64_t) * (size_t)len);
        at += pad8((eligible ? sizeof(int32_t) : sizeof(int64_t)) * (size_t)len);
        if (overrun) {
            REC_TRY(be->copy(be->ctx, (uint8_t *)g->out.p + again, g->cols[RAW + i].v, sizeof(int64_t) * (size_t)len));
            again += sizeof(int64_t) * (size_t)len;
        }
    }
    if (again) { /* the stage's first round is read: the second takes its place */
        REC_TRY(be->get(be->ctx, g->stage.p, g->out.p, again));
        at = 0;
        for (int i = 0; i < F; i++) {
            const rec_feature *ft = &g->s->features[i];
            if (ft->kind != REC_FEAT_SPARSE || !g->overrun[i]) continue;
            rec_jagged *jg = &b->sparse[ft->sparse_index];
            const int64_t base = jg->offsets[row], len = jg->offsets[row + n] - base;
            memcpy(jg->ids64 + base, (const uint8_t *)g->stage.p + at, sizeof(int64_t) * (size_t)len);
            at += sizeof(int64_t) * (size_t)len;
        }
    }
    b->n = row + n;
    return be->sync(be->ctx); /* (done already, unless a copy back was empty) the stage and snapshots are free */
}

/* The block's kernels, step by step: the step's loads, then its kernels whole (each timed
 * alone when measuring). */
static rec_status run_steps(rec_gexec *g, int64_t m, uint8_t *loaded, int measure) {
    for (int j = 0, k = 0; j <= g->fu->n_steps; j++) {
        REC_TRY(loads(g, j, m, loaded));
        for (; k < g->fu->n_kernels && g->fu->kernels[k].step == j; k++)
            REC_TRY(measure ? measured(g, k, m)
                            : launch(g, &g->ops[g->kofs[k]], g->dops + g->kofs[k], g->fu->kernels[k].n, m));
    }
    return REC_OK;
}

/* The block's kernels as the co-run plan's pieces (RAP Algorithm 1, §6.2): before stage s's
 * first piece a wait for its event, so that they run beside that stage of the training step;
 * each piece one launch of its members (a sharded kernel: a few of them); a step's loads
 * before the first piece of that step. The same launches in the same order as run_steps, cut
 * where a kernel is sharded: members of one kernel read and write columns of their own. */
static rec_status run_pieces(rec_gexec *g, int64_t m, uint8_t *loaded) {
    const rec_corun_plan *p = &g->plan;
    int j = 0; /* the next step whose loads are due */
    for (int st = 0; st < p->n_stages; st++) {
        if (p->at[st] == p->at[st + 1]) continue;
        void *ev = rec_corun_event(g->corun, st);
        if (ev && g->be->wait) REC_TRY(g->be->wait(g->be->ctx, ev));
        for (int i = p->at[st]; i < p->at[st + 1]; i++) {
            const rec_corun_piece *c = &p->pieces[i];
            for (; j <= g->fu->kernels[c->kernel].step; j++) REC_TRY(loads(g, j, m, loaded));
            const int at = g->kofs[c->kernel] + c->first;
            REC_TRY(launch(g, &g->ops[at], g->dops + at, c->n, m));
        }
    }
    for (; j <= g->fu->n_steps; j++) REC_TRY(loads(g, j, m, loaded));
    return REC_OK;
}

/* Before a block: the corun's current plan (checked against this executor's fusion plan), and
 * whether this block is the one timed for its predictor. */
static rec_status follow(rec_gexec *g, int *for_corun) {
    int changed;
    REC_TRY(rec_corun_take(g->corun, &g->plan_version, &g->plan, &changed));
    if (changed) {
        const rec_status s = rec_corun_plan_check(&g->plan, g->fu);
        if (s) { /* and again at the next block */
            char why[768];
            snprintf(why, sizeof why, "%s", rec_errmsg());
            rec_corun_plan_free(&g->plan);
            g->plan_version = 0;
            return rec_errorf(s, "GPU preprocessing of spec '%s': %s", g->s->name, why);
        }
        REC_TRY(snap_room(g, g->plan.n_pieces));
    }
    *for_corun = rec_corun_claim_measure(g->corun);
    return REC_OK;
}

/* The samples this block timed (from `from`), and the values its instances read a row, to
 * the corun. */
static rec_status put_measured(rec_gexec *g, int64_t from, int64_t rows) {
    const int64_t n = g->n_samples - from;
    float *X = malloc(sizeof(float) * REC_LAT_FEATURES * ((size_t)n + 1));
    double *ms = malloc(sizeof(double) * ((size_t)n + 1));
    if (!X || !ms) {
        free(X), free(ms);
        return rec_errorf(REC_ENOMEM, "GPU preprocessing: out of memory");
    }
    for (int64_t i = 0; i < n; i++) {
        memcpy(X + i * REC_LAT_FEATURES, g->samples[from + i].x, sizeof(float) * REC_LAT_FEATURES);
        ms[i] = g->samples[from + i].ms;
    }
    g->n_samples = from; /* the corun's: not the executor's own measurements */
    return rec_corun_put_measured(g->corun, g->vpr, g->fu->n_ops, rows, X, ms, n);
}

rec_status rec_gexec_run(rec_gexec *g, const rec_raw_block *raw, int64_t r0, int64_t n, rec_batch *b) {
    if (r0 < 0 || n < 0 || r0 + n > raw->n)
        return rec_errorf(REC_EINVAL, "rows [%lld, %lld) are outside the raw block of %lld rows", (long long)r0,
                          (long long)(r0 + n), (long long)raw->n);
    if (b->n_dense != g->s->n_dense || b->n_sparse != g->s->n_sparse || b->n + n > b->cap)
        return rec_errorf(REC_EINVAL, "GPU preprocessing: a batch of %d dense / %d sparse columns with room for %lld "
                          "rows, for spec '%s' (%d / %d) and %lld rows", b->n_dense, b->n_sparse,
                          (long long)(b->cap - b->n), g->s->name, g->s->n_dense, g->s->n_sparse, (long long)n);
    uint8_t *loaded = calloc((size_t)g->s->n_features + 1, 1);
    if (!loaded) return rec_errorf(REC_ENOMEM, "GPU preprocessing: out of memory");
    rec_status s = REC_OK;
    for (int64_t done = 0, m = 0; !s && done < n; done += m) {
        memset(loaded, 0, (size_t)g->s->n_features);
        g->snap_at = 0; /* the last block's copies are done: its emit waited for them */
        int for_corun = 0; /* this block's kernels timed for the corun's predictor */
        if (g->corun) s = follow(g, &for_corun);
        const int measure = g->measure || for_corun;
        /* following a plan: a step's rows at a time, each beside a step */
        const int64_t step = g->corun && g->plan.n_stages && !measure ? rec_corun_step_rows(g->corun) : 0;
        const int64_t most = step > 0 && step < g->rows ? step : g->rows;
        m = n - done < most ? n - done : most;
        const int64_t sampled = g->n_samples;
        if (!s) s = upload(g, raw, r0 + done, m);
        const int timed = g->be->mark && g->be->span_ms && !measure;
        if (!s && timed) s = g->be->mark(g->be->ctx, 0);
        if (!s) s = g->plan.n_stages && !measure ? run_pieces(g, m, loaded) : run_steps(g, m, loaded, measure);
        if (!s && timed) s = g->be->mark(g->be->ctx, 1);
        if (!s) s = emit(g, raw, r0 + done, m, b); /* waits for the block's copies back: both marks have run */
        if (!s && timed) g->ops_ms += g->be->span_ms(g->be->ctx);
        if (!s && for_corun) s = put_measured(g, sampled, m);
    }
    free(loaded);
    if (s) { /* copies queued before the failure still read the stage: wait for them, keep the first error */
        char why[1024];
        snprintf(why, sizeof why, "%s", rec_errmsg());
        g->be->sync(g->be->ctx);
        rec_errorf(s, "%s", why);
    }
    return s;
}

/* ---- the predictor's measurements ------------------------------------------------------------ */

rec_status rec_gexec_collect(const rec_spec *spec, const rec_vocab_set *vocabs, const rec_raw_block *raw,
                             const rec_gback *be, float **X, double **ms, int64_t *n) {
    *X = NULL, *ms = NULL, *n = 0;
    rec_fusion full, plan;
    REC_TRY(rec_prep_fuse(spec, NULL, &full));
    static const int shards[3] = {0, 8, 1};
    static const int64_t rows[4] = {1024, 4096, 16384, 32768};
    int64_t cap = 0;
    rec_status s = REC_OK;
    for (int p = 0; !s && p < 3; p++) {
        s = shards[p] ? rec_fusion_shard(&full, shards[p], &plan) : REC_OK;
        const rec_fusion *fu = shards[p] ? &plan : &full;
        for (int r = 0; !s && r < 4; r++) {
            const int64_t m = raw->n < 4 * rows[r] ? raw->n : 4 * rows[r];
            rec_gexec *g = NULL;
            rec_batch b = {0};
            s = rec_gexec_init(&g, spec, fu, vocabs, be, rows[r]);
            if (!s) s = rec_batch_init(&b, m, spec->n_dense, spec->n_sparse, 4);
            if (!s) {
                rec_gexec_measure(g, 1);
                s = rec_gexec_run(g, raw, 0, m, &b);
            }
            const rec_gexec_sample *smp;
            const int64_t k = s ? 0 : rec_gexec_samples(g, &smp);
            if (!s && *n + k > cap) {
                cap = 2 * (*n + k);
                float *x2 = realloc(*X, sizeof(float) * (size_t)(cap * REC_LAT_FEATURES));
                double *m2 = x2 ? realloc(*ms, sizeof(double) * (size_t)cap) : NULL;
                if (x2) *X = x2;
                if (m2) *ms = m2;
                if (!x2 || !m2) s = rec_errorf(REC_ENOMEM, "GPU preprocessing: out of memory for the measurements");
            }
            for (int64_t i = 0; !s && i < k; i++, (*n)++) {
                memcpy(*X + *n * REC_LAT_FEATURES, smp[i].x, sizeof smp[i].x);
                (*ms)[*n] = smp[i].ms;
            }
            rec_batch_free(&b);
            rec_gexec_free(g);
        }
        if (shards[p]) rec_fusion_free(&plan);
    }
    rec_fusion_free(&full);
    if (s) {
        free(*X), free(*ms);
        *X = NULL, *ms = NULL, *n = 0;
    }
    return s;
}

/* ---- the CPU backend ------------------------------------------------------------------------ */

static rec_status cpu_alloc(void *ctx, void **p, size_t bytes) {
    (void)ctx;
    *p = calloc(1, bytes);
    return *p ? REC_OK : rec_errorf(REC_ENOMEM, "GPU preprocessing (CPU backend): out of memory for %zu bytes", bytes);
}

static void cpu_release(void *ctx, void *p) {
    (void)ctx;
    free(p);
}

static rec_status cpu_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    (void)ctx;
    if (bytes) memcpy(dst, src, bytes);
    return REC_OK;
}

/* The rows in loops; a member's lanes (rec_g_lanes) one after the other, each its share of
 * the row as a GPU lane does, so that the tests hold the split to the CPU executor too. */
static rec_status cpu_rows(void *ctx, int phase, const rec_gop *ops, int m, int most, rec_gcol *cols, int64_t n,
                          int32_t *cnt) {
    (void)ctx, (void)most;
    for (int k = 0; k < m; k++) {
        const int lanes = rec_g_lanes(&ops[k]);
        for (int64_t r = 0; r < n; r++) {
            if (phase == REC_G_COUNT) {
                cnt[k * n + r] = rec_g_count(&ops[k], cols, r);
                continue;
            }
            for (int l = 0; l < lanes; l++) {
                if (phase == REC_G_ELEM) rec_g_elem_part(&ops[k], cols, r, l, lanes);
                else rec_g_write_part(&ops[k], cols, r, l, lanes);
            }
            if (phase == REC_G_WRITE) rec_g_write_flags(&ops[k], cols, r);
        }
    }
    return REC_OK;
}

static rec_status cpu_to_rows(void *ctx, float *dst, const float *src, int64_t n, int w, int ld, int col) {
    (void)ctx;
    for (int64_t r = 0; r < n; r++)
        for (int c = 0; c < w; c++) dst[r * ld + col + c] = src[r * w + c];
    return REC_OK;
}

static rec_status cpu_narrow(void *ctx, int32_t *dst, const int64_t *src, int64_t n, int32_t *bad) {
    (void)ctx;
    for (int64_t i = 0; i < n; i++) {
        dst[i] = (int32_t)src[i];
        if (dst[i] != src[i]) *bad = 1;
    }
    return REC_OK;
}

static rec_status cpu_scan(void *ctx, const rec_gop *ops_host, const rec_gop *ops, int m, const rec_gcol *cols_host,
                           const rec_gcol *cols, int64_t n, const int32_t *cnt, int fits) {
    (void)ctx, (void)ops_host, (void)cols_host, (void)fits;
    for (int k = 0; k < m; k++) {
        int32_t *off = cols[ops[k].col].off2;
        off[0] = 0;
        for (int64_t r = 0; r < n; r++) off[r + 1] = off[r] + cnt[k * n + r];
    }
    return REC_OK;
}

static rec_status cpu_sync(void *ctx) {
    (void)ctx;
    return REC_OK;
}

/* Not timed (mark NULL): the backend is one const shared by every thread. */
const rec_gback rec_gback_cpu = {.name = "cpu",         .alloc = cpu_alloc,   .release = cpu_release, .host_alloc = cpu_alloc,
                                 .host_release = cpu_release, .put = cpu_copy,  .copy = cpu_copy,       .get = cpu_copy,
                                 .to_rows = cpu_to_rows,  .narrow = cpu_narrow, .rows = cpu_rows,       .scan = cpu_scan,
                                 .sync = cpu_sync};
