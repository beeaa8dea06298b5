/* ONNX export (export.h rec_export_onnx): a model of the DLRM family as one ONNX graph of
 * standard operators (opset 17, IR version 8) with its parameters as fp32 initializers, so
 * that ONNX Runtime, Triton or any ONNX server scores rows as `rectrain predict` does.
 *
 * Inputs and outputs (docs/commands.md says the same for users):
 *   dense        float32 (batch, Dn)     the preprocessed dense values, as in the .rshard
 *   ids_{f}      int64   (nnz_f)         feature f's ids, the bags of all rows one after another
 *   offsets_{f}  int64   (batch + 1)     bag b is ids_f[offsets_f[b] : offsets_f[b + 1]];
 *                                        offsets_f[0] = 0, offsets_f[batch] = nnz_f (the
 *                                        layout of rectrain's Batch and of TorchRec's KJT)
 *   logit        float32 (batch)         the model's logit
 *   probability  float32 (batch)         sigmoid(logit), what predict prints
 *
 * ONNX has no EmbeddingBag, so a bag is built from its offsets: the feature's rows are
 * gathered (Gather), their running sum taken in float64 (Cast, CumSum), and bag b is the
 * difference of the running sum at offsets[b + 1] and at offsets[b] (two Gathers, Sub),
 * rounded to fp32 (pool() says why float64). MEAN divides by max(bag length, 1), so an empty
 * bag pools to zeros as the engine's does. Per-id weights are not an input: shards carry none.
 *
 * The rest follows model.h's definitions operator for operator: Gemm (transB = 1, W is
 * (Out, In) as torch.nn.Linear) + Relu for the MLPs; DLRM's dot interaction as
 * MatMul(T, T^T) on T = [h; emb] (batch, F+1, E), flattened, and a Gather of the lower
 * triangle in dlrm_s_pytorch.py's order; the cross layers as MatMul + Mul + Add; the FM term
 * as ReduceSums. The graph computes in fp32, as predict does for an fp32 model; a model that
 * computes its products in bf16 is refused (its scores would differ by far more than fp32's
 * rounding).
 *
 * Writing: the small messages (nodes, constants, input and output types) are encoded in
 * memory (pb_impl.h); the weight tables, which can be most of a gigabyte, are counted and
 * streamed from the model's own memory (bf16 tables widened on the way) into a file that
 * appears whole or not at all (rec_atomic_file). A protobuf message cannot exceed 2 GiB, so a
 * larger model (every production DLRM) is written with ONNX external data, as
 * onnx.save(..., save_as_external_data=True) writes it: the values of every parameter of 1 KiB
 * or more go to one side file, PATH.data, each at a page-aligned offset (ONNX Runtime maps
 * aligned tensors instead of copying them), and its TensorProto keeps dims, type and name with
 * data_location EXTERNAL and the external_data entries location (the side file's name,
 * relative to the model's folder), offset and length in bytes, as decimal strings
 * (onnx/docs/ExternalData.md). REC_ONNX_DATA_EXTERNAL asks for that layout at any size. The
 * side file is committed before the model, so that no model names data that is not there. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pb_impl.h"
#include "rectrain/core.h"
#include "rectrain/export.h"
#include "rectrain/model.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the ONNX export writes raw_data as the host's float image and needs a little-endian host"
#endif

/* onnx.proto (onnx/onnx, proto2) field numbers and enum values used here */
enum {
    MODEL_IR_VERSION = 1, MODEL_PRODUCER_NAME = 2, MODEL_PRODUCER_VERSION = 3, MODEL_DOC = 6, MODEL_GRAPH = 7,
    MODEL_OPSET_IMPORT = 8,
    OPSET_DOMAIN = 1, OPSET_VERSION = 2,
    GRAPH_NODE = 1, GRAPH_NAME = 2, GRAPH_INITIALIZER = 5, GRAPH_INPUT = 11, GRAPH_OUTPUT = 12,
    NODE_INPUT = 1, NODE_OUTPUT = 2, NODE_NAME = 3, NODE_OP_TYPE = 4, NODE_ATTRIBUTE = 5,
    ATTR_NAME = 1, ATTR_I = 3, ATTR_INTS = 8, ATTR_TYPE = 20,
    ATTR_TYPE_INT = 2, ATTR_TYPE_INTS = 7,
    TENSOR_DIMS = 1, TENSOR_DATA_TYPE = 2, TENSOR_NAME = 8, TENSOR_RAW_DATA = 9, TENSOR_EXTERNAL_DATA = 13,
    TENSOR_DATA_LOCATION = 14, LOCATION_EXTERNAL = 1, ENTRY_KEY = 1, ENTRY_VALUE = 2,
    DTYPE_FLOAT = 1, DTYPE_INT64 = 7, DTYPE_DOUBLE = 11,
    VALUE_NAME = 1, VALUE_TYPE = 2,
    TYPE_TENSOR = 1, TENSOR_TYPE_ELEM = 1, TENSOR_TYPE_SHAPE = 2,
    SHAPE_DIM = 1, DIM_VALUE = 1, DIM_PARAM = 2,
};

enum { ONNX_IR_VERSION = 8, ONNX_OPSET = 17 };
/* External data: the smallest parameter moved to the side file (onnx.save's size_threshold),
 * and the alignment of each one there (a page) */
enum { EXTERNAL_MIN_BYTES = 1024, EXTERNAL_ALIGN = 4096 };
#define PROTOBUF_MAX ((uint64_t)INT32_MAX) /* protobuf's limit on a serialized message */

typedef struct { char s[64]; } vname; /* a value's name in the graph */

typedef struct big_init {
    const rec_tensor *t; /* streamed from t->data or t->data16 */
    int ndim;
    int64_t dims[2];     /* as the graph declares it (a cross weight (D0) becomes (D0, 1)) */
    int64_t offset;      /* of its values in the side file, or -1: raw_data in the model */
} big_init;

typedef struct graph {
    rec__pb body;     /* nodes and small initializers, ready as GraphProto fields */
    rec__pb io;       /* the graph's name, inputs and outputs */
    big_init *big;    /* (n_big) owned */
    int n_big, cap_big;
    int next;         /* values named so far */
    int oom;
} graph;

static vname fresh(graph *g, const char *what) {
    vname v;
    snprintf(v.s, sizeof v.s, "%s_%d", what, g->next++);
    return v;
}

static vname named(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static vname named(const char *fmt, ...) {
    vname v;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v.s, sizeof v.s, fmt, ap);
    va_end(ap);
    return v;
}

/* ---- nodes -------------------------------------------------------------------------------- */

/* Opens NodeProto `type` with inputs in[0..nin) and the one output `out`; attributes may
 * follow until node_end. */
static size_t node_begin(graph *g, const char *type, const vname *out, int nin, const vname *in) {
    const size_t mark = rec__pb_begin(&g->body, GRAPH_NODE);
    for (int i = 0; i < nin; i++) rec__pb_str(&g->body, NODE_INPUT, in[i].s);
    rec__pb_str(&g->body, NODE_OUTPUT, out->s);
    rec__pb_str(&g->body, NODE_NAME, out->s);
    rec__pb_str(&g->body, NODE_OP_TYPE, type);
    return mark;
}

static void attr_int(graph *g, const char *name, int64_t v) {
    const size_t a = rec__pb_begin(&g->body, NODE_ATTRIBUTE);
    rec__pb_str(&g->body, ATTR_NAME, name);
    rec__pb_int(&g->body, ATTR_TYPE, ATTR_TYPE_INT);
    rec__pb_int(&g->body, ATTR_I, v);
    rec__pb_end(&g->body, a);
}

static void attr_ints(graph *g, const char *name, const int64_t *v, int n) {
    const size_t a = rec__pb_begin(&g->body, NODE_ATTRIBUTE);
    rec__pb_str(&g->body, ATTR_NAME, name);
    rec__pb_int(&g->body, ATTR_TYPE, ATTR_TYPE_INTS);
    for (int i = 0; i < n; i++) rec__pb_int(&g->body, ATTR_INTS, v[i]);
    rec__pb_end(&g->body, a);
}

static void node_end(graph *g, size_t mark) { rec__pb_end(&g->body, mark); }

/* A node with no attributes: out = type(in...). */
static vname op(graph *g, const char *type, int nin, const vname *in) {
    vname out = fresh(g, type);
    node_end(g, node_begin(g, type, &out, nin, in));
    return out;
}
static vname op1(graph *g, const char *type, vname a) { return op(g, type, 1, &a); }
static vname op2(graph *g, const char *type, vname a, vname b) {
    const vname in[2] = {a, b};
    return op(g, type, 2, in);
}
/* A node with one int attribute. */
static vname op_i(graph *g, const char *type, int nin, const vname *in, const char *attr, int64_t v) {
    vname out = fresh(g, type);
    const size_t mk = node_begin(g, type, &out, nin, in);
    attr_int(g, attr, v);
    node_end(g, mk);
    return out;
}

/* ---- constants ----------------------------------------------------------------------------- */

/* An initializer of dtype holding `bytes` (little-endian values): a vector of n values
 * (ndim 1) or a scalar (ndim 0, n = 1), encoded into the body. */
static vname constant(graph *g, int dtype, int ndim, int n, const void *bytes, size_t size) {
    vname name = fresh(g, "const");
    const size_t mk = rec__pb_begin(&g->body, GRAPH_INITIALIZER);
    if (ndim == 1) rec__pb_int(&g->body, TENSOR_DIMS, n);
    rec__pb_int(&g->body, TENSOR_DATA_TYPE, dtype);
    rec__pb_str(&g->body, TENSOR_NAME, name.s);
    rec__pb_bytes(&g->body, TENSOR_RAW_DATA, bytes, size);
    rec__pb_end(&g->body, mk);
    return name;
}
static vname const_i64(graph *g, const int64_t *v, int n) {
    return constant(g, DTYPE_INT64, 1, n, v, sizeof *v * (size_t)n);
}
static vname const_1(graph *g, int64_t v) { return const_i64(g, &v, 1); }
static vname const_f32(graph *g, float v) { return constant(g, DTYPE_FLOAT, 0, 1, &v, sizeof v); }
static vname const_f64(graph *g, double v) { return constant(g, DTYPE_DOUBLE, 0, 1, &v, sizeof v); }

/* A model parameter as an initializer named as the tensor, streamed at write time; dims
 * override its shape when ndim > 0 (same element count). */
static vname param(graph *g, const rec_model *m, const char *name, int ndim, const int64_t *dims) {
    const rec_tensor *t = rec_model_tensor(m, name);
    if (!t) {
        g->oom = 1; /* the caller checked every name: a missing one is a bug, caught as a failure */
        return named("%s", name);
    }
    for (int i = 0; i < g->n_big; i++)
        if (g->big[i].t == t) return named("%s", t->name);
    if (g->n_big == g->cap_big) {
        const int cap = g->cap_big ? 2 * g->cap_big : 32;
        big_init *p = realloc(g->big, sizeof *p * (size_t)cap);
        if (!p) {
            g->oom = 1;
            return named("%s", name);
        }
        g->big = p;
        g->cap_big = cap;
    }
    big_init *b = &g->big[g->n_big++];
    b->t = t;
    b->offset = -1;
    b->ndim = ndim > 0 ? ndim : t->ndim;
    for (int i = 0; i < b->ndim; i++) b->dims[i] = ndim > 0 ? dims[i] : t->shape[i];
    return named("%s", t->name);
}

/* ---- layers -------------------------------------------------------------------------------- */

/* Layers of MLP `prefix` ({prefix}.{l}.weight for l = 0, 1, ...). */
static int mlp_layers(const rec_model *m, const char *prefix) {
    int n = 0;
    char name[96];
    for (;; n++) {
        snprintf(name, sizeof name, "%s.%d.weight", prefix, n);
        if (!rec_model_tensor(m, name)) return n;
    }
}

/* y = Gemm(x, W, b, transB) for layer `prefix` (W (Out, In), b (Out)), then Relu if relu. */
static vname linear(graph *g, const rec_model *m, vname x, const char *prefix, int relu) {
    char w[96], b[96];
    snprintf(w, sizeof w, "%s.weight", prefix);
    snprintf(b, sizeof b, "%s.bias", prefix);
    const vname in[3] = {x, param(g, m, w, 0, NULL), param(g, m, b, 0, NULL)};
    const vname y = op_i(g, "Gemm", 3, in, "transB", 1);
    return relu ? op1(g, "Relu", y) : y;
}

/* model.h's MLPs: Relu after every layer, the last one too when last_relu. */
static vname mlp(graph *g, const rec_model *m, vname x, const char *prefix, int last_relu) {
    const int n = mlp_layers(m, prefix);
    char p[96];
    for (int l = 0; l < n; l++) {
        snprintf(p, sizeof p, "%s.%d", prefix, l);
        x = linear(g, m, x, p, l < n - 1 || last_relu);
    }
    return x;
}

/* Concat(in..., axis). */
static vname concat(graph *g, int n, const vname *in, int64_t axis) { return op_i(g, "Concat", n, in, "axis", axis); }

/* Slice(x, [start], [end]) on axis 0, end a constant or a value. */
static vname slice(graph *g, vname x, vname start, vname end) {
    const vname in[3] = {x, start, end};
    return op(g, "Slice", 3, in);
}

/* What the bags of one feature share, whatever table they pool. */
typedef struct bags {
    vname ids1;        /* (nnz + 1) the ids and a 0: see pool() */
    vname lo, hi;      /* (batch) offsets[0 .. batch-1] and offsets[1 .. batch] */
    vname den;         /* MEAN: (batch, 1) max(bag length, 1) as float64 */
} bags;

static bags feature_bags(graph *g, int f, rec_pooling pooling) {
    bags k;
    const vname ids[2] = {named("ids_%d", f), const_1(g, 0)};
    k.ids1 = concat(g, 2, ids, 0);
    const vname off = named("offsets_%d", f);
    k.lo = slice(g, off, const_1(g, 0), const_1(g, -1));
    k.hi = slice(g, off, const_1(g, 1), const_1(g, INT64_MAX));
    if (pooling == REC_POOL_MEAN) {
        const int64_t ax1 = 1;
        const vname len = op2(g, "Sub", k.hi, k.lo);
        const vname lend = op_i(g, "Cast", 1, &len, "to", DTYPE_DOUBLE);
        k.den = op2(g, "Unsqueeze", op2(g, "Max", lend, const_f64(g, 1.0)), const_i64(g, &ax1, 1));
    } else {
        k.den = named("%s", "");
    }
    return k;
}

/* The pooled bags (batch, E) of table `table` (R, E) over the feature's bags: with C the
 * running sum of the gathered rows (C[k] = rows[0] + ... + rows[k-1], k = 0 .. nnz; an
 * exclusive CumSum over the rows of ids1, whose extra last id only makes C one longer), bag b
 * is C[hi_b] - C[lo_b]. The running sum is float64 and the difference is rounded once to
 * fp32, which keeps each bag within an ulp or so of its exact sum, where the engine's own sums
 * are: a float32 running sum would lose the small bags' digits to the large total, and even a
 * bag-by-bag fp32 sum (ScatterElements "add") drifts from the engine's by 1e-4 on the long
 * bags of multi-hot features (hundreds of ids), enough to move a probability past 1e-5; it is
 * also 3x slower in ONNX Runtime (measured). Empty bags give exact zeros (hi = lo). */
static vname pool(graph *g, const rec_model *m, const bags *k, const char *table, int E, rec_pooling pooling) {
    const vname gin[2] = {param(g, m, table, 0, NULL), k->ids1};
    const vname rows = op_i(g, "Gather", 2, gin, "axis", 0);              /* (nnz + 1, E) */
    const vname csum_in[2] = {op_i(g, "Cast", 1, &rows, "to", DTYPE_DOUBLE), const_1(g, 0)};
    vname C = fresh(g, "CumSum");                                          /* (nnz + 1, E) */
    const size_t mk = node_begin(g, "CumSum", &C, 2, csum_in);
    attr_int(g, "exclusive", 1);
    node_end(g, mk);
    const vname hin[2] = {C, k->hi}, lin[2] = {C, k->lo};
    vname sum = op2(g, "Sub", op_i(g, "Gather", 2, hin, "axis", 0), op_i(g, "Gather", 2, lin, "axis", 0));
    if (pooling == REC_POOL_MEAN) sum = op2(g, "Div", sum, k->den);
    return op_i(g, "Cast", 1, &sum, "to", DTYPE_FLOAT);
}

/* DLRM's dot interaction (nn.h): [h | Z[i][j] for i in 0..F, j < i (j <= i with self)]. */
static vname dot_interaction(graph *g, vname h, vname embflat, int F, int E, int self) {
    const int64_t ax1 = 1, shape3[3] = {-1, F, E}, flat[2] = {-1, (int64_t)(F + 1) * (F + 1)};
    const vname emb3 = op2(g, "Reshape", embflat, const_i64(g, shape3, 3));
    const vname tin[2] = {op2(g, "Unsqueeze", h, const_i64(g, &ax1, 1)), emb3};
    const vname T = concat(g, 2, tin, 1);                                 /* (B, F+1, E) */
    vname Tt = fresh(g, "Transpose");
    const size_t mk = node_begin(g, "Transpose", &Tt, 1, &T);
    const int64_t perm[3] = {0, 2, 1};
    attr_ints(g, "perm", perm, 3);
    node_end(g, mk);
    const vname Z = op2(g, "Reshape", op2(g, "MatMul", T, Tt), const_i64(g, flat, 2));
    int64_t *pairs = malloc(sizeof *pairs * (size_t)(F + 1) * (F + 2) / 2);
    if (!pairs) {
        g->oom = 1;
        return h;
    }
    int n = 0;
    for (int i = 0; i <= F; i++)
        for (int j = 0; j < i + (self ? 1 : 0); j++) pairs[n++] = (int64_t)i * (F + 1) + j;
    const vname gin[2] = {Z, const_i64(g, pairs, n)};
    free(pairs);
    const vname zin[2] = {h, op_i(g, "Gather", 2, gin, "axis", 1)};
    return concat(g, 2, zin, 1);
}

/* DeepFM's second-order term (model.h): 1/2 sum_e [(sum_f v_fe)^2 - sum_f v_fe^2], (B, 1). */
static vname fm_term(graph *g, vname embflat, int F, int E) {
    const int64_t shape3[3] = {-1, F, E}, ax1 = 1;
    const vname emb3 = op2(g, "Reshape", embflat, const_i64(g, shape3, 3));
    const vname axis = const_i64(g, &ax1, 1);
    const vname sin[2] = {emb3, axis}, qin[2] = {op2(g, "Mul", emb3, emb3), axis};
    const vname S = op_i(g, "ReduceSum", 2, sin, "keepdims", 0), Q = op_i(g, "ReduceSum", 2, qin, "keepdims", 0);
    const vname din[2] = {op2(g, "Sub", op2(g, "Mul", S, S), Q), axis};
    return op2(g, "Mul", op_i(g, "ReduceSum", 2, din, "keepdims", 1), const_f32(g, 0.5f));
}

/* ---- the graph ---------------------------------------------------------------------------- */

/* One typed input or output: float32 or int64, dims given as numbers (> 0) or symbols. */
static void value_info(rec__pb *b, int field, const char *name, int dtype, int ndim, const int64_t *dims,
                       const char *const *syms) {
    const size_t v = rec__pb_begin(b, field);
    rec__pb_str(b, VALUE_NAME, name);
    const size_t t = rec__pb_begin(b, VALUE_TYPE);
    const size_t tt = rec__pb_begin(b, TYPE_TENSOR);
    rec__pb_int(b, TENSOR_TYPE_ELEM, dtype);
    const size_t s = rec__pb_begin(b, TENSOR_TYPE_SHAPE);
    for (int i = 0; i < ndim; i++) {
        const size_t d = rec__pb_begin(b, SHAPE_DIM);
        if (syms[i]) rec__pb_str(b, DIM_PARAM, syms[i]);
        else rec__pb_int(b, DIM_VALUE, dims[i]);
        rec__pb_end(b, d);
    }
    rec__pb_end(b, s);
    rec__pb_end(b, tt);
    rec__pb_end(b, t);
    rec__pb_end(b, v);
}

/* Builds the whole graph of m into g (nodes, constants, the list of parameters to stream,
 * the inputs and outputs). */
static void build(graph *g, const rec_model *m) {
    const rec_model_config *c = rec_model_get_config(m);
    const int F = c->n_sparse, E = c->emb_dim, Dn = c->n_dense;
    const int has_lin = c->kind == REC_MODEL_DEEPFM || c->kind == REC_MODEL_WIDE_DEEP;
    vname *pooled = calloc((size_t)F + 1, sizeof *pooled), *lin = calloc((size_t)F + 1, sizeof *lin);
    if (!pooled || !lin) {
        g->oom = 1;
        free(pooled);
        free(lin);
        return;
    }
    char name[96];
    for (int f = 0; f < F; f++) {
        const bags k = feature_bags(g, f, c->pooling);
        snprintf(name, sizeof name, "emb.%d.weight", f);
        pooled[f] = pool(g, m, &k, name, E, c->pooling);
        snprintf(name, sizeof name, "lin.%d.weight", f);
        if (has_lin) lin[f] = pool(g, m, &k, name, 1, c->pooling);
    }
    const vname dense = named("dense");
    const vname embflat = F > 0 ? concat(g, F, pooled, 1) : named("%s", "");
    vname logit2; /* (B, 1) */
    if (c->kind == REC_MODEL_DLRM) {
        const vname h = mlp(g, m, dense, "bottom", 1);
        vname z;
        if (c->interaction == REC_INTERACT_DOT) {
            z = dot_interaction(g, h, embflat, F, E, c->self_interaction);
        } else {
            const vname zin[2] = {h, embflat};
            z = concat(g, 2, zin, 1);
        }
        logit2 = mlp(g, m, z, "top", 0);
    } else {
        const vname xin[2] = {dense, embflat};
        const vname x0 = F > 0 ? concat(g, 2, xin, 1) : dense;
        if (c->kind == REC_MODEL_DCN) {
            const int64_t D0 = (int64_t)Dn + (int64_t)F * E, wdims[2] = {D0, 1};
            vname x = x0;
            for (int l = 0; l < c->cross_layers; l++) { /* x0 * (x . w) + b + x, as rec_cross_forward */
                snprintf(name, sizeof name, "cross.%d.weight", l);
                const vname s = op2(g, "MatMul", x, param(g, m, name, 2, wdims));
                snprintf(name, sizeof name, "cross.%d.bias", l);
                x = op2(g, "Add", op2(g, "Add", op2(g, "Mul", x0, s), param(g, m, name, 0, NULL)), x);
            }
            const vname cin[2] = {x, mlp(g, m, x0, "deep", 1)};
            logit2 = linear(g, m, concat(g, 2, cin, 1), "final", 0);
        } else { /* deep + dense_linear + fm + lin_0 + ... + lin_{F-1}, forward_fm's order */
            vname s = mlp(g, m, x0, "deep", 0);
            if (rec_model_tensor(m, "dense_linear.weight")) s = op2(g, "Add", s, linear(g, m, dense, "dense_linear", 0));
            if (c->kind == REC_MODEL_DEEPFM) s = op2(g, "Add", s, fm_term(g, embflat, F, E));
            for (int f = 0; f < F; f++) s = op2(g, "Add", s, lin[f]);
            logit2 = s;
        }
    }
    free(pooled);
    free(lin);
    const int64_t flat1 = -1;
    vname logit = named("logit"), prob = named("probability");
    const vname rin[2] = {logit2, const_i64(g, &flat1, 1)};
    node_end(g, node_begin(g, "Reshape", &logit, 2, rin));
    node_end(g, node_begin(g, "Sigmoid", &prob, 1, &logit));

    rec__pb_str(&g->io, GRAPH_NAME, c->name);
    const char *const batch_sym[2] = {"batch", NULL};
    const int64_t ddims[2] = {0, Dn};
    value_info(&g->io, GRAPH_INPUT, "dense", DTYPE_FLOAT, 2, ddims, batch_sym);
    for (int f = 0; f < F; f++) {
        char nnz[32], off_sym[] = "batch_plus_1";
        snprintf(nnz, sizeof nnz, "nnz_%d", f);
        const char *const s1[1] = {nnz}, *const s2[1] = {off_sym};
        value_info(&g->io, GRAPH_INPUT, named("ids_%d", f).s, DTYPE_INT64, 1, NULL, s1);
        value_info(&g->io, GRAPH_INPUT, named("offsets_%d", f).s, DTYPE_INT64, 1, NULL, s2);
    }
    value_info(&g->io, GRAPH_OUTPUT, "logit", DTYPE_FLOAT, 1, NULL, batch_sym);
    value_info(&g->io, GRAPH_OUTPUT, "probability", DTYPE_FLOAT, 1, NULL, batch_sym);
}

/* ---- writing ------------------------------------------------------------------------------- */

static void entry(rec__pb *h, const char *key, const char *value) {
    const size_t e = rec__pb_begin(h, TENSOR_EXTERNAL_DATA);
    rec__pb_str(h, ENTRY_KEY, key);
    rec__pb_str(h, ENTRY_VALUE, value);
    rec__pb_end(h, e);
}

static uint64_t big_bytes(const big_init *b) { return (uint64_t)rec_tensor_numel(b->t) * sizeof(float); }

/* The TensorProto of parameter b into h (emptied first), all but its values: dims, type and
 * name, then raw_data's key and length (its values follow in the model) or, for a parameter in
 * the side file `data_name`, where its values are there. The length of the whole message into
 * *len. */
static void big_header(const big_init *b, const char *data_name, rec__pb *h, uint64_t *len) {
    h->n = 0;
    for (int i = 0; i < b->ndim; i++) rec__pb_int(h, TENSOR_DIMS, b->dims[i]);
    rec__pb_int(h, TENSOR_DATA_TYPE, DTYPE_FLOAT);
    rec__pb_str(h, TENSOR_NAME, b->t->name);
    const uint64_t bytes = big_bytes(b);
    if (b->offset < 0) {
        rec__pb_key(h, TENSOR_RAW_DATA, REC_PB_LEN);
        rec__pb_varint(h, bytes);
        *len = h->n + bytes;
        return;
    }
    char num[24];
    entry(h, "location", data_name);
    snprintf(num, sizeof num, "%lld", (long long)b->offset);
    entry(h, "offset", num);
    snprintf(num, sizeof num, "%llu", (unsigned long long)bytes);
    entry(h, "length", num);
    rec__pb_int(h, TENSOR_DATA_LOCATION, LOCATION_EXTERNAL);
    *len = h->n;
}

/* Places the parameters: every one in the model, or (external) those of EXTERNAL_MIN_BYTES
 * and more in the side file, one after another at EXTERNAL_ALIGN offsets. The side file's
 * size, 0 when it holds nothing. */
static uint64_t place(graph *g, int external) {
    uint64_t end = 0;
    for (int i = 0; i < g->n_big; i++) {
        big_init *b = &g->big[i];
        b->offset = -1;
        if (!external || big_bytes(b) < EXTERNAL_MIN_BYTES) continue;
        b->offset = (int64_t)((end + EXTERNAL_ALIGN - 1) / EXTERNAL_ALIGN * EXTERNAL_ALIGN);
        end = (uint64_t)b->offset + big_bytes(b);
    }
    return end;
}

/* The GraphProto's length with the parameters placed as they are. */
static uint64_t graph_length(const graph *g, const char *data_name, rec__pb *hdr) {
    uint64_t n = g->body.n + g->io.n;
    for (int i = 0; i < g->n_big; i++) {
        uint64_t len;
        big_header(&g->big[i], data_name, hdr, &len);
        n += 1 + rec__pb_varint_len(len) + len;
    }
    return n;
}

/* The values of t as float32 bytes to fd (bf16 widened a chunk at a time). */
static int write_values(int fd, const rec_tensor *t) {
    const size_t n = (size_t)rec_tensor_numel(t);
    if (!t->data16) return rec_write_full(fd, t->data, n * sizeof(float));
    float buf[4096];
    for (size_t i = 0; i < n;) {
        const size_t k = n - i < 4096 ? n - i : 4096;
        for (size_t q = 0; q < k; q++) buf[q] = rec_bf16_to_float(t->data16[i + q]);
        if (!rec_write_full(fd, buf, k * sizeof(float))) return 0;
        i += k;
    }
    return 1;
}

rec_status rec_export_onnx_check(const rec_model *m) {
    const rec_model_config *c = rec_model_get_config(m);
    if (c->precision != REC_PRECISION_FP32)
        return rec_errorf(REC_EUNSUPPORTED, "model %s computes its dense products in %s (\"precision\": \"%s\"), "
                          "which rectrain predict reproduces and an fp32 ONNX graph does not; the ONNX export takes models trained with --precision fp32",
                          c->name, rec_precision_name(c->precision), rec_precision_name(c->precision));
    if (c->kind != REC_MODEL_DLRM && c->kind != REC_MODEL_DCN && c->kind != REC_MODEL_DEEPFM &&
        c->kind != REC_MODEL_WIDE_DEEP)
        return rec_errorf(REC_EUNSUPPORTED, "model %s is of kind %d, which the ONNX export cannot express; it "
                          "writes dlrm, dcn, deepfm and wide_deep (use --format npy for the parameters)",
                          c->name, (int)c->kind);
    return REC_OK;
}

/* The ModelProto's fields before its graph (of graph_len bytes) into head. */
static void model_head(const rec_model_config *c, uint64_t graph_len, rec__pb *head) {
    head->n = 0;
    rec__pb_int(head, MODEL_IR_VERSION, ONNX_IR_VERSION);
    rec__pb_str(head, MODEL_PRODUCER_NAME, "rectrain");
    rec__pb_str(head, MODEL_PRODUCER_VERSION, "1");
    char doc[200];
    snprintf(doc, sizeof doc, "%s model %s exported by rectrain; inputs dense, ids_{f}, offsets_{f}; outputs logit, "
             "probability", rec_model_kind_name(c->kind), c->name);
    rec__pb_str(head, MODEL_DOC, doc);
    const size_t os = rec__pb_begin(head, MODEL_OPSET_IMPORT);
    rec__pb_str(head, OPSET_DOMAIN, "");
    rec__pb_int(head, OPSET_VERSION, ONNX_OPSET);
    rec__pb_end(head, os);
    rec__pb_key(head, MODEL_GRAPH, REC_PB_LEN);
    rec__pb_varint(head, graph_len);
}

/* What an export writes, laid out: the graph built, the parameters placed, the model's head. */
typedef struct layout {
    graph g;
    rec__pb head, hdr;    /* the model's fields before the graph; a scratch TensorProto */
    uint64_t graph_len;
    uint64_t data_bytes;  /* of the side file; 0: none is written */
    char *data_path;      /* PATH.data, owned */
    const char *data_name;/* its name in the model: data_path's last component */
} layout;

static void layout_free(layout *L) {
    rec__pb_free(&L->head);
    rec__pb_free(&L->hdr);
    rec__pb_free(&L->g.body);
    rec__pb_free(&L->g.io);
    free(L->g.big);
    free(L->data_path);
}

/* Lays out the export of m to path: the parameters in the model while it stays under
 * protobuf's limit (and data is not REC_ONNX_DATA_EXTERNAL), in PATH.data otherwise. */
static rec_status layout_init(layout *L, const rec_model *m, const char *path, rec_onnx_data data) {
    memset(L, 0, sizeof *L);
    const rec_model_config *c = rec_model_get_config(m);
    const size_t n = strlen(path);
    if (!(L->data_path = malloc(n + sizeof REC_ONNX_DATA_SUFFIX)))
        return rec_errorf(REC_ENOMEM, "%s: out of memory", path);
    memcpy(L->data_path, path, n);
    memcpy(L->data_path + n, REC_ONNX_DATA_SUFFIX, sizeof REC_ONNX_DATA_SUFFIX);
    const char *slash = strrchr(L->data_path, '/');
    L->data_name = slash ? slash + 1 : L->data_path;
    build(&L->g, m);
    for (int external = data == REC_ONNX_DATA_EXTERNAL; external < 2; external++) {
        L->data_bytes = place(&L->g, external);
        L->graph_len = graph_length(&L->g, L->data_name, &L->hdr);
        model_head(c, L->graph_len, &L->head);
        if (L->head.n + L->graph_len <= PROTOBUF_MAX) break;
    }
    if (L->g.oom || L->g.body.oom || L->g.io.oom || L->head.oom || L->hdr.oom)
        return rec_errorf(REC_ENOMEM, "%s: out of memory building the ONNX graph of model %s", path, c->name);
    if (L->head.n + L->graph_len > PROTOBUF_MAX) /* the graph itself: thousands of features */
        return rec_errorf(REC_EUNSUPPORTED, "%s: the ONNX graph of %s takes %.2f GB without its weights, over "
                          "protobuf's 2 GiB limit on one message; use --format npy", path, c->name,
                          (double)(L->head.n + L->graph_len) / 1e9);
    return REC_OK;
}

/* Zeros from position *pos of fd up to `to`. */
static int pad_to(int fd, uint64_t *pos, uint64_t to) {
    static const uint8_t zeros[EXTERNAL_ALIGN];
    while (*pos < to) {
        const size_t k = to - *pos < sizeof zeros ? (size_t)(to - *pos) : sizeof zeros;
        if (!rec_write_full(fd, zeros, k)) return 0;
        *pos += k;
    }
    return 1;
}

/* The side file: the placed parameters' values at their offsets. */
static int write_data(int fd, const graph *g) {
    uint64_t pos = 0;
    for (int i = 0; i < g->n_big; i++) {
        const big_init *b = &g->big[i];
        if (b->offset < 0) continue;
        if (!pad_to(fd, &pos, (uint64_t)b->offset) || !write_values(fd, b->t)) return 0;
        pos += big_bytes(b);
    }
    return 1;
}

/* The model: its head, the graph's nodes and constants, each parameter's TensorProto (with
 * its values when they are not in the side file), the inputs and outputs. */
static int write_model(int fd, layout *L) {
    int ok = rec_write_full(fd, L->head.p, L->head.n) && rec_write_full(fd, L->g.body.p, L->g.body.n);
    for (int i = 0; ok && i < L->g.n_big; i++) {
        uint64_t len;
        big_header(&L->g.big[i], L->data_name, &L->hdr, &len);
        rec__pb field = {0};
        rec__pb_key(&field, GRAPH_INITIALIZER, REC_PB_LEN);
        rec__pb_varint(&field, len);
        ok = !field.oom && !L->hdr.oom && rec_write_full(fd, field.p, field.n) && rec_write_full(fd, L->hdr.p, L->hdr.n) &&
             (L->g.big[i].offset >= 0 || write_values(fd, L->g.big[i].t));
        rec__pb_free(&field);
    }
    return ok && rec_write_full(fd, L->g.io.p, L->g.io.n);
}

/* Writes one file of the export atomically with writer(fd, arg). */
static rec_status write_atomic(const char *path, const char *what, int (*writer)(int, void *), void *arg) {
    rec_atomic_file a = {.fd = -1};
    REC_TRY(rec_atomic_open(&a, path));
    if (!writer(a.fd, arg)) {
        const rec_status s = rec_errorf(REC_EIO, "%s: cannot write the %s: %s", a.tmp, what, strerror(errno));
        rec_atomic_abort(&a);
        return s;
    }
    return rec_atomic_commit(&a);
}
static int data_writer(int fd, void *L) { return write_data(fd, &((layout *)L)->g); }
static int model_writer(int fd, void *L) { return write_model(fd, L); }

int rec_export_onnx_external(const rec_model *m, const char *path, rec_onnx_data data) {
    if (rec_export_onnx_check(m) != REC_OK) return 0;
    layout L;
    const int external = layout_init(&L, m, path, data) == REC_OK && L.data_bytes > 0;
    layout_free(&L);
    return external;
}

rec_status rec_export_onnx(const rec_model *m, const char *path, rec_onnx_data data) {
    REC_TRY(rec_export_onnx_check(m));
    layout L;
    rec_status s = layout_init(&L, m, path, data);
    if (!s && L.data_bytes > 0) s = write_atomic(L.data_path, "ONNX model's external data", data_writer, &L);
    if (!s) s = write_atomic(path, "ONNX model", model_writer, &L);
    layout_free(&L);
    return s;
}
