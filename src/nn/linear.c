/* Fully connected layers on oneDNN matmul primitives (the MLP built from them is mlp.c).
 *
 * Per layer and batch size B three primitives are created once and cached:
 *   forward      y  (B, Out) = x (B, In) . W^T (In, Out) + b, ReLU post-op when relu
 *   backward dx  dx (B, In)  = dy' (B, Out) . W (Out, In)
 *   backward dW  dW (Out, In) = dy'^T (Out, B) . x (B, In)
 * W^T and dy'^T are the same bytes seen through transposed strides, so nothing is copied.
 * dy' = dy * (y > 0) for ReLU layers; it and db = column sums of dy' are one plain pass.
 * Memory objects are created with no data and pointed at the caller's buffers per call.
 *
 * bf16 (nn.h "precision"): x, W and dy' are rounded into the layer's own low-precision
 * buffers (x16, w16, g16) and the three primitives take those as operands, fp32 bias and fp32
 * outputs. On AMX (rec_dnn_bf16_native) the buffers hold bf16 bits for oneDNN's bf16 matmul;
 * elsewhere they hold the rounded values as fp32 and the fp32 kernels multiply them: the same
 * products (a bf16 x bf16 product is exact in fp32), accumulated in fp32 either way. Without
 * AMX oneDNN's bf16 matmul is slower than its fp32 one (AVX512-BF16 on a Xeon, 2048x512x512:
 * 167 vs 273 GFLOP/s; bench train prints both), so emulation is the faster path there.
 *
 * Threading: see nn.h (OpenMP runtime; the rec_dnn's thread count is set around each call).
 */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include <dnnl.h>

#include "rectrain/core.h"
#include "rectrain/nn.h"

/* Every oneDNN call goes through this: on failure it records the call, file and line. */
#define DNNL_TRY(call)                                                                     \
    do {                                                                                   \
        dnnl_status_t rec__d = (call);                                                     \
        if (rec__d != dnnl_success)                                                        \
            return rec_errorf(rec__d == dnnl_out_of_memory ? REC_ENOMEM : REC_EUNSUPPORTED, \
                              "oneDNN: %s failed with status %d at %s:%d", #call,          \
                              (int)rec__d, __FILE__, __LINE__);                            \
    } while (0)

struct rec_dnn {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    int n_threads;    /* 0: OpenMP's default */
    int saved;        /* caller's omp_get_max_threads() while a call is in progress */
    int bf16_kernels; /* oneDNN has a bf16 matmul on this CPU */
    int bf16_native;  /* bf16 layers use it (else they are emulated on the fp32 kernels) */
};

static void dnn_enter(rec_dnn *d) {
    if (d->n_threads > 0) {
        d->saved = omp_get_max_threads();
        if (d->saved != d->n_threads) omp_set_num_threads(d->n_threads);
    }
}

static void dnn_leave(rec_dnn *d) {
    if (d->n_threads > 0 && d->saved != d->n_threads) omp_set_num_threads(d->saved);
}

/* Whether a bf16 x bf16 -> fp32 matmul with an fp32 bias has an implementation on this CPU:
 * oneDNN answers unimplemented when the ISA lacks bf16 support (AVX2 machines). */
static int bf16_probe(rec_dnn *d) {
    dnnl_memory_desc_t a, b, bias, c;
    dnnl_dims_t da = {16, 32}, db = {32, 16}, dbias = {1, 16}, dc = {16, 16};
    if (dnnl_memory_desc_init_by_tag(&a, 2, da, dnnl_bf16, dnnl_ab) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&b, 2, db, dnnl_bf16, dnnl_ab) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&bias, 2, dbias, dnnl_f32, dnnl_ab) != dnnl_success ||
        dnnl_memory_desc_init_by_tag(&c, 2, dc, dnnl_f32, dnnl_ab) != dnnl_success)
        return 0;
    dnnl_matmul_desc_t desc;
    if (dnnl_matmul_desc_init(&desc, &a, &b, &bias, &c) != dnnl_success) return 0;
    dnnl_primitive_desc_t pd;
    if (dnnl_primitive_desc_create(&pd, &desc, NULL, d->engine, NULL) != dnnl_success) return 0;
    dnnl_primitive_desc_destroy(pd);
    return 1;
}

/* Whether oneDNN dispatches to AMX tiles: its ISA values are nested bit sets, each one's value
 * above those it contains. */
static int isa_has_amx(void) { return (unsigned)dnnl_get_effective_cpu_isa() >= (unsigned)dnnl_cpu_isa_avx512_core_amx; }

int rec_dnn_bf16_kernels(const rec_dnn *d) { return d->bf16_kernels; }

int rec_dnn_bf16_native(const rec_dnn *d) { return d->bf16_native; }

void rec_dnn_set_bf16_native(rec_dnn *d, int native) { d->bf16_native = native && d->bf16_kernels; }

const char *rec_dnn_isa(void) {
    switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41: return "sse41";
    case dnnl_cpu_isa_avx: return "avx";
    case dnnl_cpu_isa_avx2: return "avx2";
    case dnnl_cpu_isa_avx2_vnni: return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core: return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
    default: return "other";
    }
}

rec_status rec_dnn_init(rec_dnn **out, int n_threads) {
    *out = NULL;
    if (n_threads < 0)
        return rec_errorf(REC_EINVAL, "rec_dnn_init: n_threads is %d; give 0 (OpenMP default) or a positive count", n_threads);
    rec_dnn *d;
    REC_TRY(rec_alloc((void **)&d, sizeof *d, "oneDNN context"));
    d->n_threads = n_threads;
    if (dnnl_engine_create(&d->engine, dnnl_cpu, 0) != dnnl_success) {
        rec_free(d);
        return rec_errorf(REC_EUNSUPPORTED, "oneDNN: dnnl_engine_create(dnnl_cpu, 0) failed at %s:%d", __FILE__, __LINE__);
    }
    if (dnnl_stream_create(&d->stream, d->engine, dnnl_stream_default_flags) != dnnl_success) {
        dnnl_engine_destroy(d->engine);
        rec_free(d);
        return rec_errorf(REC_EUNSUPPORTED, "oneDNN: dnnl_stream_create failed at %s:%d", __FILE__, __LINE__);
    }
    d->bf16_kernels = bf16_probe(d);
    d->bf16_native = d->bf16_kernels && isa_has_amx();
    *out = d;
    return REC_OK;
}

void rec_dnn_free(rec_dnn *d) {
    if (!d) return;
    dnnl_stream_destroy(d->stream);
    dnnl_engine_destroy(d->engine);
    rec_free(d);
}

int rec_dnn_threads(const rec_dnn *d) { return d->n_threads; }

rec_status rec_dnn_sgemm(rec_dnn *d, int64_t M, int64_t N, int64_t K, const float *A,
                         const float *Bm, float *C) {
    dnn_enter(d);
    dnnl_status_t s = dnnl_sgemm('N', 'N', M, N, K, 1.0f, A, K, Bm, N, 0.0f, C, N);
    dnn_leave(d);
    if (s != dnnl_success)
        return rec_errorf(REC_EUNSUPPORTED, "oneDNN: dnnl_sgemm(%lld, %lld, %lld) failed with status %d",
                          (long long)M, (long long)N, (long long)K, (int)s);
    return REC_OK;
}

/* ---- one matmul: descriptors, primitive, and handle-less memory objects ------------------ */

typedef struct matmul {
    dnnl_primitive_t prim;
    dnnl_memory_t src, wei, bias, dst;  /* bias NULL when the matmul has none */
} matmul;

/* A 2-D memory descriptor (rows, cols) of type dt with explicit strides. */
static rec_status md2(dnnl_memory_desc_t *md, dnnl_data_type_t dt, int64_t rows, int64_t cols, int64_t s0,
                      int64_t s1) {
    dnnl_dims_t dims = {rows, cols}, strides = {s0, s1};
    DNNL_TRY(dnnl_memory_desc_init_by_strides(md, 2, dims, dt, strides));
    return REC_OK;
}

static void matmul_destroy(matmul *m) {
    if (m->prim) dnnl_primitive_destroy(m->prim);
    if (m->src) dnnl_memory_destroy(m->src);
    if (m->wei) dnnl_memory_destroy(m->wei);
    if (m->bias) dnnl_memory_destroy(m->bias);
    if (m->dst) dnnl_memory_destroy(m->dst);
    memset(m, 0, sizeof *m);
}

static rec_status matmul_create_inner(matmul *m, rec_dnn *d, const dnnl_memory_desc_t *src,
                                      const dnnl_memory_desc_t *wei,
                                      const dnnl_memory_desc_t *bias,
                                      const dnnl_memory_desc_t *dst, int relu) {
    dnnl_matmul_desc_t desc;
    DNNL_TRY(dnnl_matmul_desc_init(&desc, src, wei, bias, dst));
    dnnl_primitive_attr_t attr;
    DNNL_TRY(dnnl_primitive_attr_create(&attr));
    dnnl_post_ops_t po = NULL;
    dnnl_status_t st = dnnl_success;
    if (relu) {
        st = dnnl_post_ops_create(&po);
        if (st == dnnl_success) st = dnnl_post_ops_append_eltwise(po, 1.0f, dnnl_eltwise_relu, 0.0f, 0.0f);
        if (st == dnnl_success) st = dnnl_primitive_attr_set_post_ops(attr, po);
    }
    dnnl_primitive_desc_t pd = NULL;
    if (st == dnnl_success) st = dnnl_primitive_desc_create(&pd, &desc, attr, d->engine, NULL);
    if (po) dnnl_post_ops_destroy(po);
    dnnl_primitive_attr_destroy(attr);
    if (st != dnnl_success)
        return rec_errorf(REC_EUNSUPPORTED, "oneDNN: creating a matmul primitive descriptor failed with status %d at %s:%d",
                          (int)st, __FILE__, __LINE__);
    st = dnnl_primitive_create(&m->prim, pd);
    dnnl_primitive_desc_destroy(pd);
    if (st != dnnl_success)
        return rec_errorf(REC_EUNSUPPORTED, "oneDNN: dnnl_primitive_create(matmul) failed with status %d at %s:%d",
                          (int)st, __FILE__, __LINE__);
    DNNL_TRY(dnnl_memory_create(&m->src, src, d->engine, DNNL_MEMORY_NONE));
    DNNL_TRY(dnnl_memory_create(&m->wei, wei, d->engine, DNNL_MEMORY_NONE));
    if (bias) DNNL_TRY(dnnl_memory_create(&m->bias, bias, d->engine, DNNL_MEMORY_NONE));
    DNNL_TRY(dnnl_memory_create(&m->dst, dst, d->engine, DNNL_MEMORY_NONE));
    return REC_OK;
}

static rec_status matmul_create(matmul *m, rec_dnn *d, const dnnl_memory_desc_t *src,
                                const dnnl_memory_desc_t *wei, const dnnl_memory_desc_t *bias,
                                const dnnl_memory_desc_t *dst, int relu) {
    memset(m, 0, sizeof *m);
    rec_status s = matmul_create_inner(m, d, src, wei, bias, dst, relu);
    if (s != REC_OK) matmul_destroy(m);
    return s;
}

/* Points the memory objects at the given buffers and runs the primitive to completion. */
static rec_status matmul_run(matmul *m, rec_dnn *d, const void *src, const void *wei,
                             const float *bias, float *dst) {
    DNNL_TRY(dnnl_memory_set_data_handle(m->src, (void *)src));
    DNNL_TRY(dnnl_memory_set_data_handle(m->wei, (void *)wei));
    if (m->bias) DNNL_TRY(dnnl_memory_set_data_handle(m->bias, (void *)bias));
    DNNL_TRY(dnnl_memory_set_data_handle(m->dst, dst));
    dnnl_exec_arg_t args[4] = {
        {DNNL_ARG_SRC, m->src}, {DNNL_ARG_WEIGHTS, m->wei}, {DNNL_ARG_DST, m->dst}, {DNNL_ARG_BIAS, m->bias}};
    dnn_enter(d);
    dnnl_status_t st = dnnl_primitive_execute(m->prim, d->stream, m->bias ? 4 : 3, args);
    if (st == dnnl_success) st = dnnl_stream_wait(d->stream);
    dnn_leave(d);
    if (st != dnnl_success)
        return rec_errorf(REC_EUNSUPPORTED, "oneDNN: executing a matmul failed with status %d at %s:%d",
                          (int)st, __FILE__, __LINE__);
    return REC_OK;
}

rec_status rec_dnn_matmul_gflops(rec_dnn *d, rec_precision p, int M, int N, int K, int reps,
                                 double *gflops) {
    *gflops = 0;
    if (M < 1 || N < 1 || K < 1 || reps < 1 || reps > 63)
        return rec_errorf(REC_EINVAL, "rec_dnn_matmul_gflops: bad shape %d x %d x %d or reps %d", M, N, K, reps);
    if (p == REC_PRECISION_BF16 && !d->bf16_kernels)
        return rec_errorf(REC_EUNSUPPORTED, "oneDNN has no bf16 matmul on this CPU (ISA %s)", rec_dnn_isa());
    const dnnl_data_type_t dt = p == REC_PRECISION_BF16 ? dnnl_bf16 : dnnl_f32;
    const size_t e = p == REC_PRECISION_BF16 ? 2 : 4;
    dnnl_memory_desc_t a, b, c;
    REC_TRY(md2(&a, dt, M, K, K, 1));
    REC_TRY(md2(&b, dt, K, N, N, 1));
    REC_TRY(md2(&c, dnnl_f32, M, N, N, 1));
    matmul mm;
    REC_TRY(matmul_create(&mm, d, &a, &b, NULL, &c, 0));
    void *A = calloc((size_t)M * K, e), *B = calloc((size_t)K * N, e);
    float *C = calloc((size_t)M * N, sizeof(float));
    rec_status s = A && B && C ? REC_OK : rec_errorf(REC_ENOMEM, "out of memory for a %d x %d x %d matmul", M, N, K);
    double t[64];
    for (int r = -2; !s && r < reps; r++) {
        const double t0 = rec_now();
        s = matmul_run(&mm, d, A, B, NULL, C);
        if (r >= 0) t[r] = rec_now() - t0;
    }
    if (!s) *gflops = 2.0 * M * N * K / rec_median(t, reps) * 1e-9;
    free(A), free(B), free(C);
    matmul_destroy(&mm);
    return s;
}

/* ---- linear layer ------------------------------------------------------------------------ */

/* Batch sizes a layer keeps primitives for; a training run sees one or two (the full batch
 * and the last, shorter one of an epoch), evaluation perhaps one more. */
#define LINEAR_CACHE 4

typedef struct linear_prims {
    int B;  /* 0: empty slot */
    uint64_t last_use;
    matmul fwd, bwd_data, bwd_weights;
} linear_prims;

struct rec_linear {
    rec_dnn *d;
    int in, out, relu, max_batch;
    rec_precision prec;
    int native;             /* bf16: the operand buffers hold bf16 bits (else rounded fp32) */
    uint64_t clock;
    linear_prims cache[LINEAR_CACHE];
    float *dyp;             /* (max_batch, Out) masked output gradient */
    void *x16, *w16, *g16;  /* bf16: (max_batch, In), (Out, In), (max_batch, Out) operands */
};

/* The operands' type: fp32, or bf16 where oneDNN multiplies it natively. */
static dnnl_data_type_t operand_type(const rec_linear *l) { return l->native ? dnnl_bf16 : dnnl_f32; }

/* dst (n) = src rounded to bf16, in the layer's operand format; row blocks over the team. */
static void to_operand(const rec_linear *l, const float *src, size_t n, void *dst) {
    enum { CHUNK = 16384 };
    const long nchunk = (long)((n + CHUNK - 1) / CHUNK);
    const int threads = rec_dnn_threads(l->d) > 0 ? rec_dnn_threads(l->d) : omp_get_max_threads();
#pragma omp parallel for num_threads(threads) schedule(static) if (nchunk > 1)
    for (long c = 0; c < nchunk; c++) {
        size_t i0 = (size_t)c * CHUNK, m = n - i0 < CHUNK ? n - i0 : CHUNK;
        if (l->native) rec_bf16_pack(src + i0, m, (uint16_t *)dst + i0);
        else rec_bf16_round(src + i0, m, (float *)dst + i0);
    }
}

static void prims_destroy(linear_prims *p) {
    matmul_destroy(&p->fwd);
    matmul_destroy(&p->bwd_data);
    matmul_destroy(&p->bwd_weights);
    memset(p, 0, sizeof *p);
}

static rec_status prims_create(linear_prims *p, rec_linear *l, int B) {
    int64_t in = l->in, out = l->out;
    const dnnl_data_type_t op = l->prec == REC_PRECISION_BF16 ? operand_type(l) : dnnl_f32, f = dnnl_f32;
    dnnl_memory_desc_t x, wt, bias, y, dy, w, dx, dyt, dW;
    REC_TRY(md2(&x, op, B, in, in, 1));      /* x (B, In) */
    REC_TRY(md2(&wt, op, in, out, 1, in));   /* W^T (In, Out) over W (Out, In) */
    REC_TRY(md2(&bias, f, 1, out, out, 1));  /* b (1, Out) broadcast over rows */
    REC_TRY(md2(&y, f, B, out, out, 1));     /* y (B, Out) */
    REC_TRY(md2(&dy, op, B, out, out, 1));   /* dy' (B, Out) */
    REC_TRY(md2(&w, op, out, in, in, 1));    /* W (Out, In) */
    REC_TRY(md2(&dx, f, B, in, in, 1));      /* dx (B, In) */
    REC_TRY(md2(&dyt, op, out, B, 1, out));  /* dy'^T (Out, B) over dy' (B, Out) */
    REC_TRY(md2(&dW, f, out, in, in, 1));    /* dW (Out, In) */
    memset(p, 0, sizeof *p);
    rec_status s = matmul_create(&p->fwd, l->d, &x, &wt, &bias, &y, l->relu);
    if (s == REC_OK) s = matmul_create(&p->bwd_weights, l->d, &dyt, &x, NULL, &dW, 0);
    if (s == REC_OK) s = matmul_create(&p->bwd_data, l->d, &dy, &w, NULL, &dx, 0);
    if (s != REC_OK) {
        prims_destroy(p);
        return rec_error_wrap(s, "linear layer %d -> %d at batch %d", l->in, l->out, B);
    }
    p->B = B;
    return REC_OK;
}

/* The cached primitives for batch B, created on first use (evicting the least recently used
 * batch size when all slots are taken). */
static rec_status prims_get(rec_linear *l, int B, linear_prims **out) {
    linear_prims *victim = NULL;
    for (int i = 0; i < LINEAR_CACHE; i++) {
        linear_prims *p = &l->cache[i];
        if (p->B == B) {
            p->last_use = ++l->clock;
            *out = p;
            return REC_OK;
        }
        /* empty slots have last_use 0, so they are taken first */
        if (!victim || p->last_use < victim->last_use) victim = p;
    }
    if (victim->B != 0) prims_destroy(victim);
    rec_status s = prims_create(victim, l, B);
    if (s != REC_OK && l->native) {
        /* oneDNN offered a bf16 matmul at the probe but not for this layer's shapes or
         * strides: the layer goes on emulated (its operand buffers hold fp32), every cached
         * native primitive dropped, so all batch sizes multiply alike. */
        l->native = 0;
        for (int i = 0; i < LINEAR_CACHE; i++)
            if (l->cache[i].B) prims_destroy(&l->cache[i]);
        s = prims_create(victim, l, B);
    }
    REC_TRY(s);
    victim->last_use = ++l->clock;
    *out = victim;
    return REC_OK;
}

rec_status rec_linear_init(rec_linear **out, rec_dnn *d, int in, int out_dim, int relu,
                           int max_batch, rec_precision prec) {
    *out = NULL;
    if (in < 1 || out_dim < 1)
        return rec_errorf(REC_EINVAL, "linear layer: widths must be >= 1, got in %d out %d", in, out_dim);
    if (max_batch < 1)
        return rec_errorf(REC_EINVAL, "linear layer: max_batch must be >= 1, got %d", max_batch);
    if (prec != REC_PRECISION_FP32 && prec != REC_PRECISION_BF16)
        return rec_errorf(REC_EINVAL, "linear layer: unknown precision %d (want REC_PRECISION_FP32 or _BF16)", (int)prec);
    rec_linear *l;
    REC_TRY(rec_alloc((void **)&l, sizeof *l, "linear layer"));
    l->d = d;
    l->in = in;
    l->out = out_dim;
    l->relu = relu != 0;
    l->max_batch = max_batch;
    l->prec = prec;
    l->native = prec == REC_PRECISION_BF16 && rec_dnn_bf16_native(d);
    rec_status s = REC_OK;
    if (l->relu)
        s = rec_alloc((void **)&l->dyp, (size_t)max_batch * out_dim * sizeof(float), "linear layer gradient workspace");
    if (!s && prec == REC_PRECISION_BF16) {
        const size_t e = sizeof(float); /* room for either format: native may fall back (prims_get) */
        s = rec_alloc(&l->x16, (size_t)max_batch * in * e, "linear layer bf16 inputs");
        if (!s) s = rec_alloc(&l->w16, (size_t)out_dim * in * e, "linear layer bf16 weights");
        if (!s) s = rec_alloc(&l->g16, (size_t)max_batch * out_dim * e, "linear layer bf16 gradients");
    }
    if (s != REC_OK) {
        rec_linear_free(l);
        return s;
    }
    *out = l;
    return REC_OK;
}

void rec_linear_free(rec_linear *l) {
    if (!l) return;
    for (int i = 0; i < LINEAR_CACHE; i++)
        if (l->cache[i].B) prims_destroy(&l->cache[i]);
    rec_free(l->dyp);
    rec_free(l->x16);
    rec_free(l->w16);
    rec_free(l->g16);
    rec_free(l);
}

static rec_status check_batch(const rec_linear *l, int B) {
    if (B < 1 || B > l->max_batch)
        return rec_errorf(REC_EINVAL, "linear layer %d -> %d: batch %d outside [1, max_batch %d]; raise max_batch at init",
                          l->in, l->out, B, l->max_batch);
    return REC_OK;
}

rec_status rec_linear_forward(rec_linear *l, int B, const float *x, const float *W,
                              const float *b, float *y) {
    REC_TRY(check_batch(l, B));
    linear_prims *p;
    REC_TRY(prims_get(l, B, &p));
    if (l->prec == REC_PRECISION_FP32) return matmul_run(&p->fwd, l->d, x, W, b, y);
    to_operand(l, x, (size_t)B * l->in, l->x16);
    to_operand(l, W, (size_t)l->out * l->in, l->w16);
    return matmul_run(&p->fwd, l->d, l->x16, l->w16, b, y);
}

rec_status rec_linear_backward(rec_linear *l, int B, const float *x, const float *W,
                               const float *y, const float *dy, float *dx, float *dW, float *db) {
    REC_TRY(check_batch(l, B));
    linear_prims *p;
    REC_TRY(prims_get(l, B, &p));
    const int out = l->out;
    /* dy' and db in one pass, rows outer so the inner loop vectorises. */
    const float *g = dy;
    for (int j = 0; j < out; j++) db[j] = 0.0f;
    if (l->relu) {
        for (int i = 0; i < B; i++) {
            const float *yr = y + (size_t)i * out, *dr = dy + (size_t)i * out;
            float *gr = l->dyp + (size_t)i * out;
            for (int j = 0; j < out; j++) {
                gr[j] = yr[j] > 0.0f ? dr[j] : 0.0f;
                db[j] += gr[j];
            }
        }
        g = l->dyp;
    } else {
        for (int i = 0; i < B; i++) {
            const float *dr = dy + (size_t)i * out;
            for (int j = 0; j < out; j++) db[j] += dr[j];
        }
    }
    if (l->prec == REC_PRECISION_BF16) {
        /* x16 and w16 still hold the forward's operands */
        to_operand(l, g, (size_t)B * out, l->g16);
        REC_TRY(matmul_run(&p->bwd_weights, l->d, l->g16, l->x16, NULL, dW));
        if (dx) REC_TRY(matmul_run(&p->bwd_data, l->d, l->g16, l->w16, NULL, dx));
        return REC_OK;
    }
    REC_TRY(matmul_run(&p->bwd_weights, l->d, g, x, NULL, dW));
    if (dx) REC_TRY(matmul_run(&p->bwd_data, l->d, g, W, NULL, dx));
    return REC_OK;
}
