// A DLRM trained on the GPU (cuda.h, "the GPU model"): the dense layers through cuBLASLt with
// bias and ReLU fused as epilogues; the interaction over T = [x; e_1..e_F] (the embedding engine,
// embed.cu, pools straight into it), for DOT by the fused tensor-core kernels (interact.cu) or
// as batched cuBLASLt products; the loss and dense optimizers as kernels; all on the engine's
// one stream with every buffer allocated at start. Inputs travel through pinned,
// double-buffered copies on a stream of their own; the host reads a step's loss one step
// later, so it never waits for the device to drain.
#include <cuda_runtime.h>
#include <cublasLt.h>
#include <cuda_bf16.h>

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embed_impl.cuh"
#include "interact.cuh"
#include "rectrain/data.h"
#include "rectrain/model.h"

// ---- cuBLASLt, loaded when the first GPU model is made ---------------------------------------
// The binary links only the CUDA runtime (statically), so it starts on machines without the
// CUDA libraries; the dense layers open libcublasLt here.

static struct {
    int tried, ok;
    char why[600];
    decltype(&cublasLtCreate) create;
    decltype(&cublasLtDestroy) destroy;
    decltype(&cublasLtMatmul) matmul;
    decltype(&cublasLtMatmulDescCreate) desc_create;
    decltype(&cublasLtMatmulDescDestroy) desc_destroy;
    decltype(&cublasLtMatmulDescSetAttribute) desc_set;
    decltype(&cublasLtMatrixLayoutCreate) layout_create;
    decltype(&cublasLtMatrixLayoutDestroy) layout_destroy;
    decltype(&cublasLtMatrixLayoutSetAttribute) layout_set;
    decltype(&cublasLtMatmulPreferenceCreate) pref_create;
    decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy;
    decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set;
    decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic;
} lt;

static rec_status lt_load(void) {
    if (lt.tried) return lt.ok ? REC_OK : rec_errorf(REC_EUNSUPPORTED, "%s", lt.why);
    lt.tried = 1;
    static const char *const NAMES[] = {"libcublasLt.so.13", "libcublasLt.so", "/usr/local/cuda/lib64/libcublasLt.so.13"};
    void *h = NULL;
    for (size_t i = 0; !h && i < sizeof NAMES / sizeof NAMES[0]; i++) h = dlopen(NAMES[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(lt.why, sizeof lt.why, "the GPU's dense layers need cuBLASLt of CUDA 13 (libcublasLt.so.13), which "
                 "cannot be loaded: install the CUDA toolkit's cuBLAS, or put its folder in LD_LIBRARY_PATH");
        return rec_errorf(REC_EUNSUPPORTED, "%s", lt.why);
    }
#define LT_SYM(field, name) lt.field = (decltype(lt.field))dlsym(h, name), lt.ok &= lt.field != NULL
    lt.ok = 1;
    LT_SYM(create, "cublasLtCreate");
    LT_SYM(destroy, "cublasLtDestroy");
    LT_SYM(matmul, "cublasLtMatmul");
    LT_SYM(desc_create, "cublasLtMatmulDescCreate");
    LT_SYM(desc_destroy, "cublasLtMatmulDescDestroy");
    LT_SYM(desc_set, "cublasLtMatmulDescSetAttribute");
    LT_SYM(layout_create, "cublasLtMatrixLayoutCreate");
    LT_SYM(layout_destroy, "cublasLtMatrixLayoutDestroy");
    LT_SYM(layout_set, "cublasLtMatrixLayoutSetAttribute");
    LT_SYM(pref_create, "cublasLtMatmulPreferenceCreate");
    LT_SYM(pref_destroy, "cublasLtMatmulPreferenceDestroy");
    LT_SYM(pref_set, "cublasLtMatmulPreferenceSetAttribute");
    LT_SYM(heuristic, "cublasLtMatmulAlgoGetHeuristic");
#undef LT_SYM
    if (!lt.ok) {
        snprintf(lt.why, sizeof lt.why, "libcublasLt lacks a function rectrain calls: an older cuBLAS? (need CUDA 13)");
        return rec_errorf(REC_EUNSUPPORTED, "%s", lt.why);
    }
    return REC_OK;
}

// One GEMM in column-major terms, D (m, n) = op(A) op(B) [+ bias (m), ReLU], fp32, planned once
// (descriptors and the heuristic's algorithm) for the largest batch; n is the batch dimension
// of every GEMM here but the weight gradient's, so a smaller batch re-plans (cached per n).
typedef struct gemm {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
    int m, n, k, ta, tb, epi, planned;
    int bf16;  // A and B in bf16 (D and the bias fp32); 0 also where bf16 was asked but has no algorithm
    int count;                 // products in the batch (1: one product)
    long long sa, sb, sd;      // elements from one product's A, B, D to the next's
    int d16;                   // D in bf16
} gemm;

// A strided batch of `count` products, each operand `s*` elements after the last (count 1: one
// product), and D in bf16 where d16 (else fp32).
typedef struct gemm_batch {
    int count;
    long long sa, sb, sd;
    int d16;
} gemm_batch;
static const gemm_batch ONE = {1, 0, 0, 0, 0};
static const gemm_batch D16 = {1, 0, 0, 0, 1};  // one product, D in bf16 (an MLP layer's bf16 output)

static const char *lt_err(cublasStatus_t s) {
    static char buf[32];
    snprintf(buf, sizeof buf, "cuBLAS status %d", (int)s);
    return buf;
}

static void gemm_free(gemm *g) {
    if (!g->planned) return;
    lt.layout_destroy(g->a), lt.layout_destroy(g->b), lt.layout_destroy(g->d), lt.desc_destroy(g->desc);
    g->planned = 0;
}

// epi: 0 none, 1 bias, 2 bias + ReLU. bf16: A and B in bf16 (fp32 accumulation and output); a
// shape cuBLASLt has no bf16 algorithm for is planned in fp32 instead (g->bf16 says which).
static rec_status gemm_plan_as(cublasLtHandle_t h, gemm *g, int m, int n, int k, int ta, int tb, int epi, size_t ws,
                               int bf16, gemm_batch bt) {
    gemm_free(g);
    *g = gemm{};
    g->m = m, g->n = n, g->k = k, g->ta = ta, g->tb = tb, g->epi = epi, g->bf16 = bf16;
    g->count = bt.count, g->sa = bt.sa, g->sb = bt.sb, g->sd = bt.sd, g->d16 = bt.d16;
    const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cudaDataType_t in = bf16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasStatus_t s = lt.desc_create(&g->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    if (!s) s = lt.desc_set(g->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
    if (!s) s = lt.desc_set(g->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
    const cublasLtEpilogue_t e = epi == 2 ? CUBLASLT_EPILOGUE_RELU_BIAS : epi == 1 ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    if (!s) s = lt.desc_set(g->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof e);
    if (!s && epi) {
        const cudaDataType_t bt = CUDA_R_32F;
        s = lt.desc_set(g->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt);
    }
    // Stored shapes (column-major): A is (m, k) or, transposed, (k, m); B likewise.
    if (!s) s = lt.layout_create(&g->a, in, ta ? k : m, ta ? m : k, ta ? k : m);
    if (!s) s = lt.layout_create(&g->b, in, tb ? n : k, tb ? k : n, tb ? n : k);
    if (!s) s = lt.layout_create(&g->d, bt.d16 ? CUDA_R_16BF : CUDA_R_32F, m, n, m);
    if (bt.count > 1) {
        const cublasLtMatrixLayout_t ls[3] = {g->a, g->b, g->d};
        const long long st[3] = {bt.sa, bt.sb, bt.sd};
        for (int i = 0; !s && i < 3; i++) {
            s = lt.layout_set(ls[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bt.count, sizeof bt.count);
            const int64_t stride = st[i];
            if (!s) s = lt.layout_set(ls[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride);
        }
    }
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    if (!s) s = lt.pref_create(&pref);
    if (!s) s = lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    if (!s) s = lt.heuristic(h, g->desc, g->a, g->b, g->d, g->d, pref, 1, &res, &found);
    if (pref) lt.pref_destroy(pref);
    g->planned = 1;
    if (s || !found) {
        gemm_free(g);
        return rec_errorf(REC_EUNSUPPORTED, "GPU: no cuBLASLt algorithm for %d (%d x %d x %d) %s product%s%s (%s)",
                          bt.count, m, n, k, bf16 ? "bf16" : "fp32", bt.count > 1 ? "s" : "",
                          epi ? " with a bias epilogue" : "", lt_err(s));
    }
    g->algo = res.algo;
    return REC_OK;
}

static int gemm_planned_for(const gemm *g, int m, int n, int k, gemm_batch bt) {
    return g->planned && g->m == m && g->n == n && g->k == k && g->count == bt.count && g->d16 == bt.d16;
}

static rec_status gemm_plan_batch(cublasLtHandle_t h, gemm *g, int m, int n, int k, int ta, int tb, int epi, size_t ws,
                                  int bf16, gemm_batch bt) {
    if (gemm_planned_for(g, m, n, k, bt)) return REC_OK;
    if (bf16 && gemm_plan_as(h, g, m, n, k, ta, tb, epi, ws, 1, bt) == REC_OK) return REC_OK;
    return gemm_plan_as(h, g, m, n, k, ta, tb, epi, ws, 0, bt);
}
static rec_status gemm_plan(cublasLtHandle_t h, gemm *g, int m, int n, int k, int ta, int tb, int epi, size_t ws, int bf16) {
    return gemm_plan_batch(h, g, m, n, k, ta, tb, epi, ws, bf16, ONE);
}

// A and B each come in fp32 and, when the model runs bf16, as a bf16 copy: the plan picks.
typedef struct operand {
    const float *f32;
    const __nv_bfloat16 *b16;
} operand;

static rec_status gemm_run(cublasLtHandle_t h, gemm *g, operand A, operand B, void *D, const float *bias, void *ws,
                           size_t wsb, cudaStream_t st) {
    const float one = 1.0f, zero = 0.0f;
    const void *a = g->bf16 ? (const void *)A.b16 : (const void *)A.f32, *b = g->bf16 ? (const void *)B.b16 : (const void *)B.f32;
    cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
    if (g->epi) s = lt.desc_set(g->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    if (!s) s = lt.matmul(h, g->desc, &one, a, g->a, b, g->b, &zero, D, g->d, D, g->d, &g->algo, ws, wsb, st);
    if (s) return rec_errorf(REC_EUNSUPPORTED, "GPU: cuBLASLt product (%d x %d x %d) failed (%s)", g->m, g->n, g->k, lt_err(s));
    return REC_OK;
}

// ---- kernels ------------------------------------------------------------------------------------

template <int V> struct vec_t;
template <> struct vec_t<4> { typedef float4 type; };
template <> struct vec_t<1> { typedef float type; };

// The elementwise kernels take four floats a thread (16-byte loads; every buffer here starts
// 16-byte aligned) over a grid that fills the GPU (ew_grid), and the last n % 4 one at a time.
__device__ __forceinline__ float relu_mask(float g, float y) { return y > 0.0f ? g : 0.0f; }
__device__ __forceinline__ float as_float(float v) { return v; }
__device__ __forceinline__ float as_float(__nv_bfloat16 v) { return __bfloat162float(v); }

// A layer input kept only in bf16, widened (exactly) for a product planned in fp32.
__global__ void from_bf16_kernel(const __nv_bfloat16 *x, size_t n, float *y) {
    const size_t step = (size_t)gridDim.x * blockDim.x;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += step) y[i] = __bfloat162float(x[i]);
}

__global__ void to_bf16_kernel(const float *x, size_t n, __nv_bfloat16 *y) {
    const size_t n4 = n / 4, step = (size_t)gridDim.x * blockDim.x, t = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (size_t i = t; i < n4; i += step) store_bf16(y + 4 * i, reinterpret_cast<const float4 *>(x)[i]);
    for (size_t i = 4 * n4 + t; i < n; i += step) y[i] = __float2bfloat16_rn(x[i]);
}

// A layer's output gradient dy (B, N) in one pass, and its bias gradient db (N) = dy's column
// sums in two, so that the whole GPU reads dy: block (x, y) takes 32 columns over row chunk y
// (8 row-lanes, then shared memory): where relu, masks dy by its output y > 0 (y in fp32, or
// the bf16 copy a d16 layer keeps: the same sign), writes it back where an fp32 product reads
// it (out32) and in bf16 where a product takes bf16 (b16), and sums the chunk into part
// (Y, N); then one thread per column adds the Y partial sums in order. Deterministic.
enum { BIAS_CHUNKS = 64 };
template <typename Y>
__global__ void out_grad_kernel(float *dy, const Y *y, int B, int N, int relu, int out32, __nv_bfloat16 *b16, float *part) {
    __shared__ float sm[8][33];
    const int c = blockIdx.x * 32 + threadIdx.x, rows = (B + gridDim.y - 1) / gridDim.y;
    const int r0 = blockIdx.y * rows, r1 = min(B, r0 + rows);
    float s = 0;
    if (c < N)
#pragma unroll 4
        for (int r = r0 + threadIdx.y; r < r1; r += 8) {  // (unrolled: four rows' loads in flight)
            const size_t i = (size_t)r * N + c;
            float v = dy[i];
            if (relu) {
                v = relu_mask(v, as_float(y[i]));
                if (out32) dy[i] = v;
            }
            if (b16) b16[i] = __float2bfloat16_rn(v);
            s += v;
        }
    sm[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && c < N) {
        for (int k = 1; k < 8; k++) s += sm[k][threadIdx.x];
        part[(size_t)blockIdx.y * N + c] = s;
    }
}
__global__ void bias_sum_kernel(const float *part, int Y, int N, float *db) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= N) return;
    float s = 0;
    for (int y = 0; y < Y; y++) s += part[(size_t)y * N + c];
    db[c] = s;
}

// ---- interaction ---------------------------------------------------------------------------------
// Every sample's features as one matrix T = [x; e_1; ...; e_F] ((F + 1) x E, row-major, the
// embedding engine pools straight into rows 1..F): CAT's output is T itself, and DOT's pairwise
// dot products are its Gram matrix T T^T, one strided-batched product over the batch on the
// tensor cores (bf16 operands with fp32 sums, or fp32); the backward is dT = G T with G the
// symmetric matrix of the output gradients (dZ_ij on both (i, j) and (j, i); twice dZ_ii on the
// diagonal with self-interaction), a second batched product.

// Row 0 of every sample's T from x (B, E), into T (fp32) and/or T16 (bf16); with `all`, T16
// takes T's other rows as well. Block per sample, V floats a thread.
template <int V>
__global__ void interact_pack_kernel(int B, int E, int n, const float *x, float *T, __nv_bfloat16 *T16, int all) {
    typedef typename vec_t<V>::type vec;
    for (int b = blockIdx.x; b < B; b += gridDim.x) {
        const vec *xs = reinterpret_cast<const vec *>(x + (size_t)b * E);
        vec *t = T ? reinterpret_cast<vec *>(T + (size_t)b * n) : NULL;
        for (int c = threadIdx.x; c < (all ? n : E) / V; c += blockDim.x) {
            const bool head = c < E / V;
            const vec v = head ? xs[c] : t[c];
            if (t && head) t[c] = v;
            if (T16) store_bf16(T16 + (size_t)b * n + c * V, v);
        }
    }
}

// z = [x, Z_k for the pairs k in dlrm's li/lj order] from every sample's Gram matrix Z
// ((F + 1)^2, at[k] its entry of pair k), in fp32 and/or bf16 (the top MLP's input).
__global__ void interact_gather_kernel(int B, int E, int Dz, int nn, const int *at, const float *x, const float *Z, float *z,
                                       __nv_bfloat16 *z16) {
    for (int b = blockIdx.x; b < B; b += gridDim.x)
        for (int c = threadIdx.x; c < Dz; c += blockDim.x) {
            const float v = c < E ? x[(size_t)b * E + c] : Z[(size_t)b * nn + at[c - E]];
            if (z) z[(size_t)b * Dz + c] = v;
            if (z16) z16[(size_t)b * Dz + c] = __float2bfloat16_rn(v);
        }
}

// G ((F + 1)^2 a sample) from dz: src[r] = k + 1 takes dz's pair k, -(k + 1) twice it (the
// diagonal with self-interaction), 0 nothing (the diagonal without). fp32 or bf16, as the
// backward product takes it.
__global__ void interact_grad_kernel(int B, int E, int Dz, int nn, const int *src, const float *dz, float *G, __nv_bfloat16 *G16) {
    for (int b = blockIdx.x; b < B; b += gridDim.x)
        for (int r = threadIdx.x; r < nn; r += blockDim.x) {
            const int k = src[r];
            const float v = k > 0 ? dz[(size_t)b * Dz + E + k - 1] : k < 0 ? 2.0f * dz[(size_t)b * Dz + E - k - 1] : 0.0f;
            if (G16) G16[(size_t)b * nn + r] = __float2bfloat16_rn(v);
            else G[(size_t)b * nn + r] = v;
        }
}

// The bottom MLP's output gradient: dh = dz[:, 0:E] (+ dT[:, 0, :] for DOT, fp32 or bf16).
__global__ void interact_dx_kernel(int B, int E, int ldz, int ldt, const float *dz, const float *dT, const __nv_bfloat16 *dT16,
                                   float *dh) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)B * E; i += (size_t)gridDim.x * blockDim.x) {
        const size_t b = i / E, e = i - b * E;
        dh[i] = dz[b * ldz + e] + (dT ? dT[b * ldt + e] : dT16 ? __bfloat162float(dT16[b * ldt + e]) : 0.0f);
    }
}

// Sigmoid + BCE (nn.h): loss sum in double (one block), dlogits = (sigmoid(z) - y) / B.
__global__ void bce_kernel(int B, const float *z, const float *y, float *dz, double *loss) {
    __shared__ double part[256];
    double s = 0;
    for (int i = threadIdx.x; i < B; i += blockDim.x) {
        const float zi = z[i], yi = y[i];
        s += (double)fmaxf(zi, 0.0f) - (double)zi * yi + log1p(exp(-(double)fabsf(zi)));
        dz[i] = (1.0f / (1.0f + expf(-zi)) - yi) / (float)B;
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (int o = blockDim.x / 2; o > 0; o >>= 1) {
        if (threadIdx.x < o) part[threadIdx.x] += part[threadIdx.x + o];
        __syncthreads();
    }
    if (threadIdx.x == 0) *loss = part[0] / B;
}

// Dense optimizers over the flat block (nn.h, torch.optim semantics).
__global__ void dense_opt_kernel(int kind, size_t n, float *p, const float *g, float *s0, float *s1, float lr, float b1,
                                 float b2, float eps, float adam_step, float bc2_sqrt) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const float gi = g[i];
        if (kind == REC_OPT_SGD) p[i] -= lr * gi;
        else if (kind == REC_OPT_ADAGRAD) {
            s0[i] += gi * gi;
            p[i] -= lr * gi / (sqrtf(s0[i]) + eps);
        } else {
            s0[i] = b1 * s0[i] + (1.0f - b1) * gi;
            s1[i] = b2 * s1[i] + (1.0f - b2) * gi * gi;
            p[i] -= adam_step * (s0[i] / (sqrtf(s1[i]) / bc2_sqrt + eps));
        }
    }
}

// ---- the model ----------------------------------------------------------------------------------

typedef struct mlp_dev {
    int L, relu_last;
    int sizes[REC_MLP_MAX_LAYERS + 1];
    size_t w_off[REC_MLP_MAX_LAYERS], b_off[REC_MLP_MAX_LAYERS];
    float *act[REC_MLP_MAX_LAYERS];  // (max_batch, sizes[l + 1]) outputs
    __nv_bfloat16 *in16[REC_MLP_MAX_LAYERS];  // bf16 runs: (max_batch, sizes[l]) each layer's input
    gemm fwd[REC_MLP_MAX_LAYERS], bx[REC_MLP_MAX_LAYERS], bw[REC_MLP_MAX_LAYERS];
    // bf16 runs: layer l (not the last) writes its output in bf16 straight into in16[l + 1]
    // (cuBLASLt's epilogue rounds bias + ReLU once, as the separate rounding did), and no fp32
    // copy: the next layer's products read only that. The ReLU mask of its backward reads it too.
    int d16[REC_MLP_MAX_LAYERS];
    // this batch's: whether layer l did (a batch size with no such algorithm writes fp32), and
    // whether the input x came in bf16 only (the top MLP's bf16 z without its fp32 copy)
    int now16[REC_MLP_MAX_LAYERS], x16_only;
    int no16_n[REC_MLP_MAX_LAYERS];  // the last batch size with no bf16-output algorithm (not tried again)
} mlp_dev;

enum { SLOTS = 2 };
// the capacity probe: sizes timed alone, values hashed (64 MB: more than L2), threads a block
// and values a thread
enum { PROBE_CAL = 27, PROBE_VALUES = 1 << 23, PROBE_BLOCK = 256, PROBE_ROW = 4 };

struct rec_cuda_model {
    rec_model_config cfg;         // shallow copy (table_rows borrowed from the CPU model)
    int B, Dn, F, E, Dz;
    size_t P;
    int64_t steps;
    rec_cuda_embed *emb;
    cudaStream_t st;
    cublasLtHandle_t lt;
    void *ws;
    size_t ws_bytes;
    float *params, *grads, *s0, *s1;  // (P) each; optimizer state as the kind needs
    mlp_dev bottom, top;
    // The interaction (see its kernels): T (B, F + 1, E) and, for DOT, z, the Gram matrices Zg
    // and their gradients Gg ((B, (F + 1)^2), bf16 where the backward product takes bf16) and dT.
    float *T, *z, *Zg, *Gg, *dT;
    __nv_bfloat16 *T16;               // T in bf16 where a DOT product takes bf16
    __nv_bfloat16 *dT16;              // direct: dT in bf16
    int direct;                       // DOT in bf16 end to end: the embeddings pool into T16, the
                                      // backward product writes dT16, which their backward reads
    int mma;                          // direct, by the fused tensor-core kernels (interact.cu)
    gemm gram, gram_bwd;
    int *pair_at, *grad_src;          // DOT: each pair's entry of Zg; each entry's source in dz
    int z32;                          // DOT: the top MLP reads z in fp32 (else only its bf16 copy)
    float *dz, *dh, *dbuf[2], *dlogits;  // (B, ...)
    float *bias_part;                 // (BIAS_CHUNKS, widest) partial bias gradients
    int bf16;                         // REC_PRECISION_BF16: GEMM operands in bf16, fp32 master weights
    __nv_bfloat16 *w16, *dy16;        // bf16 runs: the parameters (P), an output gradient (B, widest)
    double *d_loss;
    // inputs: pinned dense + labels per slot, the device copy, and a device batch per slot
    float *h_in[SLOTS], *d_in[SLOTS];
    cudaEvent_t in_done[SLOTS];
    rec_cuda_batch *batch[SLOTS];
    int slot;
    cu_input *in;                 // staged input (rec_cuda_model_stager), or NULL
    // the loss of each slot's step, read one step later
    double *h_loss;
    cudaEvent_t loss_done[SLOTS];
    int64_t loss_pending[SLOTS];  // step number whose loss the slot holds, -1 none
    // part timing
    int prof;
    cudaEvent_t ev[SLOTS][REC_CUDA_N_PARTS + 1];
    double part_ms[REC_CUDA_N_PARTS];
    int64_t part_steps;
    double host_s[REC_CUDA_N_HOST];  // the host's seconds in each part of a step call, while prof
    int64_t host_steps;
    // co-running preprocessing (rec_cuda_model_corun): each stage's start, and the probe
    cudaEvent_t gate[REC_CUDA_CORUN_STAGES];
    int corun;
    cudaStream_t probe_st;            // the lowest priority, as the GPU executors' streams
    long long *probe_buf;             // PROBE_VALUES values the probe hashes
    int probe_next;                   // the next step's probe: its stage (-1 none), its blocks
    long long probe_blocks;
    int probe_of[SLOTS];              // each slot's step's probe stage
    double cal_ms[PROBE_CAL];         // the probe alone: 2^k blocks take cal_ms[k]
    int n_cal;
    double stage_ms[REC_CUDA_CORUN_STAGES];  // the last harvested step's stages, and its probe
    int stage_probe, stage_fresh;
};

static const char *const PART_NAMES[REC_CUDA_N_PARTS] = {"input copy", "embedding fwd", "bottom fwd", "interaction fwd",
                                                         "top fwd", "loss", "top bwd", "interaction bwd", "bottom bwd",
                                                         "embedding bwd+update", "dense optimizer"};
extern "C" const char *rec_cuda_part_name(int k) { return k >= 0 && k < REC_CUDA_N_PARTS ? PART_NAMES[k] : "?"; }

// Blocks of 256 threads for n elements four a thread, at most 16 a multiprocessor.
static int ew_grid(const rec_cuda_model *g, size_t n) {
    const size_t want = (n / 4 + 255) / 256, cap = (size_t)g->emb->sms * 16;
    return (int)(want < 1 ? 1 : want > cap ? cap : want);
}

static rec_status mlp_setup(rec_cuda_model *g, mlp_dev *d, rec_mlp *m, const float *host_params, int input_grad) {
    d->L = rec_mlp_layers(m), d->relu_last = rec_mlp_last_relu(m);
    for (int l = 0; l <= d->L; l++) d->sizes[l] = rec_mlp_size(m, l);
    for (int l = 0; l < d->L; l++) {
        d->w_off[l] = (size_t)(rec_mlp_weight(m, l) - host_params);
        d->b_off[l] = (size_t)(rec_mlp_bias(m, l) - host_params);
        REC_TRY(rec_cuda_alloc((void **)&d->act[l], (size_t)g->B * d->sizes[l + 1] * sizeof(float), "MLP activations"));
        if (g->bf16)
            REC_TRY(rec_cuda_alloc((void **)&d->in16[l], (size_t)g->B * d->sizes[l] * 2, "MLP inputs in bf16"));
        const int in = d->sizes[l], out = d->sizes[l + 1], relu = l < d->L - 1 || d->relu_last;
        REC_TRY(gemm_plan(g->lt, &d->fwd[l], out, g->B, in, 1, 0, relu ? 2 : 1, g->ws_bytes, g->bf16));
        if (l > 0 || input_grad) REC_TRY(gemm_plan(g->lt, &d->bx[l], in, g->B, out, 0, 0, 0, g->ws_bytes, g->bf16));
        REC_TRY(gemm_plan(g->lt, &d->bw[l], in, out, g->B, 0, 1, 0, g->ws_bytes, g->bf16));
    }
    // Which layers write bf16 outputs: where the next layer's products all took bf16 and
    // cuBLASLt plans this one with a bf16 output (REC_CUDA_MLP=plain: none, a diagnostic).
    const char *mode = getenv("REC_CUDA_MLP");
    for (int l = 0; l + 1 < d->L; l++) {
        const int in = d->sizes[l], out = d->sizes[l + 1];
        d->d16[l] = 0;
        if (!g->bf16 || (mode && !strcmp(mode, "plain")) || !d->fwd[l].bf16 || !d->fwd[l + 1].bf16 || !d->bw[l + 1].bf16)
            continue;
        if (gemm_plan_as(g->lt, &d->fwd[l], out, g->B, in, 1, 0, 2, g->ws_bytes, 1, D16) == REC_OK) d->d16[l] = 1;
        else REC_TRY(gemm_plan(g->lt, &d->fwd[l], out, g->B, in, 1, 0, 2, g->ws_bytes, g->bf16));
    }
    return REC_OK;
}

// A product planned in fp32 whose input this batch holds only in bf16 (x16: the layer before
// wrote bf16, or the top MLP's z came without its fp32 copy) reads it widened into x32.
static void widen_input(rec_cuda_model *g, const gemm *p, int x16, const __nv_bfloat16 *in16, float *x32, size_t n) {
    if (x16 && !p->bf16) from_bf16_kernel<<<ew_grid(g, 4 * n), 256, 0, g->st>>>(in16, n, x32);
}

static void mlp_free(mlp_dev *d) {
    for (int l = 0; l < d->L; l++) {
        cudaFree(d->act[l]), cudaFree(d->in16[l]);
        gemm_free(&d->fwd[l]), gemm_free(&d->bx[l]), gemm_free(&d->bw[l]);
    }
}

// The GEMMs are planned for the largest batch; a smaller one (an epoch's last) re-plans.
static rec_status mlp_forward(rec_cuda_model *g, mlp_dev *d, int B, const float *x, const float **y, int in16_ready) {
    const float *in = x;
    d->x16_only = in16_ready && x == g->z && !g->z32;
    for (int l = 0; l < d->L; l++) {
        const int in_16 = l ? d->now16[l - 1] : d->x16_only, relu = l < d->L - 1 || d->relu_last;
        const int out = d->sizes[l + 1], k = d->sizes[l];
        d->now16[l] = d->d16[l] && B != d->no16_n[l] &&
                      (gemm_planned_for(&d->fwd[l], out, B, k, D16) ||
                       gemm_plan_as(g->lt, &d->fwd[l], out, B, k, 1, 0, 2, g->ws_bytes, 1, D16) == REC_OK);
        if (d->d16[l] && !d->now16[l]) d->no16_n[l] = B;
        if (!d->now16[l]) REC_TRY(gemm_plan_batch(g->lt, &d->fwd[l], out, B, k, 1, 0, relu ? 2 : 1, g->ws_bytes, g->bf16, ONE));
        widen_input(g, &d->fwd[l], in_16, d->in16[l], (float *)in, (size_t)B * k);
        if (g->bf16 && !(l == 0 && in16_ready) && !in_16)
            to_bf16_kernel<<<ew_grid(g, (size_t)B * k), 256, 0, g->st>>>(in, (size_t)B * k, d->in16[l]);
        REC_TRY(gemm_run(g->lt, &d->fwd[l], operand{g->params + d->w_off[l], g->w16 + d->w_off[l]}, operand{in, d->in16[l]},
                         d->now16[l] ? (void *)d->in16[l + 1] : (void *)d->act[l], g->params + d->b_off[l], g->ws, g->ws_bytes,
                         g->st));
        in = d->act[l];  // (not written where now16: the next layer reads in16[l + 1], or widens it here)
    }
    *y = in;
    return REC_OK;
}

// From dy (B, Out), which it overwrites (ReLU masks), into the gradient block and dx (NULL: no
// input gradient).
static rec_status mlp_backward(rec_cuda_model *g, mlp_dev *d, int B, const float *x, float *dy, float *dx) {
    float *cur = dy;
    for (int l = d->L - 1; l >= 0; l--) {
        const int in = d->sizes[l], out = d->sizes[l + 1], relu = l < d->L - 1 || d->relu_last;
        const float *xin = l ? d->act[l - 1] : x;
        const int in_16 = l ? d->now16[l - 1] : d->x16_only, want_dx = l > 0 || dx;
        REC_TRY(gemm_plan(g->lt, &d->bw[l], in, out, B, 0, 1, 0, g->ws_bytes, g->bf16));
        widen_input(g, &d->bw[l], in_16, d->in16[l], (float *)xin, (size_t)B * in);
        if (want_dx) REC_TRY(gemm_plan(g->lt, &d->bx[l], in, B, out, 0, 0, 0, g->ws_bytes, g->bf16));  // (W and dy only)
        // the masked gradient in fp32 only where a product reads it so
        const int out32 = !d->bw[l].bf16 || (want_dx && !d->bx[l].bf16);
        const int Y = B < 8 * BIAS_CHUNKS ? (B + 7) / 8 : BIAS_CHUNKS;
        const dim3 grid((out + 31) / 32, Y), block(32, 8);
        if (d->now16[l]) out_grad_kernel<<<grid, block, 0, g->st>>>(cur, d->in16[l + 1], B, out, relu, out32, g->dy16, g->bias_part);
        else out_grad_kernel<<<grid, block, 0, g->st>>>(cur, d->act[l], B, out, relu, out32, g->bf16 ? g->dy16 : NULL, g->bias_part);
        REC_TRY(gemm_run(g->lt, &d->bw[l], operand{xin, d->in16[l]}, operand{cur, g->dy16}, g->grads + d->w_off[l], NULL,
                         g->ws, g->ws_bytes, g->st));
        bias_sum_kernel<<<(out + 127) / 128, 128, 0, g->st>>>(g->bias_part, Y, out, g->grads + d->b_off[l]);
        if (!want_dx) break;
        float *next = l ? g->dbuf[(l & 1) ^ 1] : dx;
        if (next == cur) next = g->dbuf[l & 1];
        REC_TRY(gemm_run(g->lt, &d->bx[l], operand{g->params + d->w_off[l], g->w16 + d->w_off[l]}, operand{cur, g->dy16}, next,
                         NULL, g->ws, g->ws_bytes, g->st));
        cur = next;
    }
    CU_TRY(cudaGetLastError(), "launching an MLP backward");
    return REC_OK;
}

extern "C" void rec_cuda_model_free(rec_cuda_model *g) {
    if (!g) return;
    if (g->st) cudaStreamSynchronize(g->st);
    mlp_free(&g->bottom), mlp_free(&g->top);
    cudaFree(g->params), cudaFree(g->grads), cudaFree(g->s0), cudaFree(g->s1), cudaFree(g->ws);
    cudaFree(g->T), cudaFree(g->T16), cudaFree(g->dT16), cudaFree(g->z), cudaFree(g->Zg), cudaFree(g->Gg), cudaFree(g->dT);
    cudaFree(g->pair_at), cudaFree(g->grad_src), gemm_free(&g->gram), gemm_free(&g->gram_bwd);
    cudaFree(g->dz), cudaFree(g->dh), cudaFree(g->dbuf[0]), cudaFree(g->dbuf[1]), cudaFree(g->dlogits), cudaFree(g->d_loss);
    cudaFree(g->d_in[0]), cudaFree(g->d_in[1]), cudaFree(g->bias_part), cudaFree(g->w16), cudaFree(g->dy16);
    for (int i = 0; i < SLOTS; i++) {
        cudaFreeHost(g->h_in[i]);
        rec_cuda_batch_free(g->batch[i]);
        if (g->in_done[i]) cudaEventDestroy(g->in_done[i]);
        if (g->loss_done[i]) cudaEventDestroy(g->loss_done[i]);
        for (int k = 0; k <= REC_CUDA_N_PARTS; k++)
            if (g->ev[i][k]) cudaEventDestroy(g->ev[i][k]);
    }
    cudaFreeHost(g->h_loss);
    for (int k = 0; k < REC_CUDA_CORUN_STAGES; k++)
        if (g->gate[k]) cudaEventDestroy(g->gate[k]);
    if (g->probe_st) cudaStreamSynchronize(g->probe_st), cudaStreamDestroy(g->probe_st);
    cudaFree(g->probe_buf);
    cu_input_free(g->in);
    if (g->lt) lt.destroy(g->lt);
    rec_cuda_embed_free(g->emb);
    free(g);
}

static size_t opt_states(rec_opt_kind k) { return k == REC_OPT_ADAM ? 2 : k == REC_OPT_ADAGRAD ? 1 : 0; }

// DOT: the pairs' entries in the Gram matrices, the sources of their gradients, and the two
// batched products planned for the largest batch (a smaller one re-plans).
static rec_status interact_setup(rec_cuda_model *g) {
    const int F1 = g->F + 1, E = g->E, self = g->cfg.self_interaction != 0, nn = F1 * F1;
    const long long sT = (long long)F1 * E;
    const size_t nT = (size_t)g->B * sT;
    // The fused kernels where the shape fits them (they need none of the below); REC_CUDA_INTERACT=gemm
    // keeps the batched cuBLASLt products (a diagnostic: docs/gpu.md).
    const char *how = getenv("REC_CUDA_INTERACT");
    g->mma = g->bf16 && rec_interact_mma_fits(F1, E) && !(how && !strcmp(how, "gemm"));
    if (g->mma) {
        const cudaError_t e = rec_interact_mma_setup();
        g->direct = 1, g->z32 = !g->top.fwd[0].bf16 || !g->top.bw[0].bf16;
        if (e != cudaSuccess) return cu_fail(e, "configuring the interaction kernels");
        REC_TRY(rec_cuda_alloc((void **)&g->T16, nT * 2, "the interaction's input in bf16"));
        return rec_cuda_alloc((void **)&g->dT16, nT * 2, "the interaction's input gradient in bf16");
    }
    int *at = (int *)malloc((size_t)nn * sizeof(int)), *src = (int *)malloc((size_t)nn * sizeof(int));
    rec_status s = at && src ? REC_OK : rec_errorf(REC_ENOMEM, "GPU model: out of memory");
    int n = 0;
    for (int i = 0; !s && i < F1; i++)  // dlrm's li/lj order
        for (int j = 0; j < i + self; j++) at[n++] = i + j * F1;
    for (int r = 0; !s && r < nn; r++) {
        const int i = r % F1, j = r / F1, hi = i > j ? i : j, lo = i > j ? j : i;
        const int k = self ? hi * (hi + 1) / 2 + lo : hi * (hi - 1) / 2 + lo;
        src[r] = i != j ? k + 1 : self ? -(k + 1) : 0;
    }
    if (!s) s = rec_cuda_alloc((void **)&g->pair_at, (size_t)nn * sizeof(int), "the interaction's pairs");
    if (!s) s = rec_cuda_alloc((void **)&g->grad_src, (size_t)nn * sizeof(int), "the interaction's pairs");
    if (!s) s = rec_cuda_upload(g->pair_at, at, (size_t)n * sizeof(int));
    if (!s) s = rec_cuda_upload(g->grad_src, src, (size_t)nn * sizeof(int));
    free(at), free(src);
    if (!s) s = rec_cuda_alloc((void **)&g->Zg, (size_t)g->B * nn * sizeof(float), "the interaction's products");
    if (!s) s = rec_cuda_alloc((void **)&g->Gg, (size_t)g->B * nn * sizeof(float), "their gradients");
    // bf16 end to end where cuBLASLt has the products in bf16 with a bf16 D for the backward;
    // else T and dT in fp32 (and T in bf16 too where the products still take bf16).
    const gemm_batch fwd = {g->B, sT, sT, nn, 0}, bwd = {g->B, sT, nn, sT, 1};
    g->direct = !s && g->bf16 && gemm_plan_batch(g->lt, &g->gram, F1, F1, E, 1, 0, 0, g->ws_bytes, 1, fwd) == REC_OK &&
                g->gram.bf16 && gemm_plan_batch(g->lt, &g->gram_bwd, E, F1, F1, 0, 0, 0, g->ws_bytes, 1, bwd) == REC_OK &&
                g->gram_bwd.bf16;
    if (!s && !g->direct) {
        s = gemm_plan_batch(g->lt, &g->gram, F1, F1, E, 1, 0, 0, g->ws_bytes, g->bf16, fwd);
        if (!s) s = gemm_plan_batch(g->lt, &g->gram_bwd, E, F1, F1, 0, 0, 0, g->ws_bytes, g->bf16, gemm_batch{g->B, sT, nn, sT, 0});
    }
    if (!s && !g->direct) s = rec_cuda_alloc((void **)&g->T, nT * sizeof(float), "the interaction's input");
    if (!s && !g->direct) s = rec_cuda_alloc((void **)&g->dT, nT * sizeof(float), "the interaction's input gradient");
    if (!s && g->bf16) s = rec_cuda_alloc((void **)&g->T16, nT * 2, "the interaction's input in bf16");
    if (!s && g->direct) s = rec_cuda_alloc((void **)&g->dT16, nT * 2, "the interaction's input gradient in bf16");
    g->z32 = !g->bf16 || !g->top.fwd[0].bf16 || !g->top.bw[0].bf16;
    return s;
}

static int grid_rows(int B) { return B < 8192 ? B : 8192; }

// T's row 0 from the bottom MLP's output h, then for DOT z (and the top MLP's bf16 input).
static rec_status interact_forward(rec_cuda_model *g, int B, const float *h) {
    const int F1 = g->F + 1, E = g->E, n = F1 * E, nn = F1 * F1, dot = g->cfg.interaction == REC_INTERACT_DOT;
    if (g->mma) {  // T16's rows 1..F hold the embeddings; x comes from h
        CU_TRY(rec_interact_mma_fwd(g->st, g->emb->sms, B, F1, E, g->Dz, g->cfg.self_interaction != 0, h, g->T16,
                                    g->z32 ? g->z : NULL, g->top.in16[0]), "launching the interaction");
        return REC_OK;
    }
    // T's row 0 from h: T16 alone (direct), T (and all of T16 where a product takes bf16), or T (CAT).
    __nv_bfloat16 *T16 = dot && g->bf16 && (g->gram.bf16 || g->gram_bwd.bf16) ? g->T16 : NULL;
    const int all = T16 && !g->direct;
    if (E % 4 == 0) interact_pack_kernel<4><<<grid_rows(B), 256, 0, g->st>>>(B, E, n, h, g->T, T16, all);
    else interact_pack_kernel<1><<<grid_rows(B), 256, 0, g->st>>>(B, E, n, h, g->T, T16, all);
    CU_TRY(cudaGetLastError(), "launching the interaction");
    if (!dot) return REC_OK;
    REC_TRY(gemm_plan_batch(g->lt, &g->gram, F1, F1, E, 1, 0, 0, g->ws_bytes, g->bf16, gemm_batch{B, n, n, nn, 0}));
    if (g->direct && !g->gram.bf16)
        return rec_errorf(REC_EUNSUPPORTED, "GPU: cuBLASLt has bf16 interaction products for batch %d but not for %d", g->B, B);
    REC_TRY(gemm_run(g->lt, &g->gram, operand{g->T, T16}, operand{g->T, T16}, g->Zg, NULL, g->ws, g->ws_bytes, g->st));
    interact_gather_kernel<<<grid_rows(B), 256, 0, g->st>>>(B, E, g->Dz, nn, g->pair_at, h, g->Zg, g->z32 ? g->z : NULL,
                                                            g->bf16 ? g->top.in16[0] : NULL);
    CU_TRY(cudaGetLastError(), "launching the interaction's gather");
    return REC_OK;
}

// From dz (B, Dz): dh for the bottom MLP, and for DOT dT (the embeddings' gradients in its rows 1..F).
static rec_status interact_backward(rec_cuda_model *g, int B) {
    const int F1 = g->F + 1, E = g->E, n = F1 * E, nn = F1 * F1;
    if (g->cfg.interaction != REC_INTERACT_DOT) {
        interact_dx_kernel<<<ew_grid(g, (size_t)B * E), 256, 0, g->st>>>(B, E, g->Dz, 0, g->dz, NULL, NULL, g->dh);
        CU_TRY(cudaGetLastError(), "launching the interaction's backward");
        return REC_OK;
    }
    if (g->mma) {
        CU_TRY(rec_interact_mma_bwd(g->st, g->emb->sms, B, F1, E, g->Dz, g->cfg.self_interaction != 0,
                                    g->bottom.act[g->bottom.L - 1], g->T16, g->dz, g->dh, g->dT16),
               "launching the interaction's backward");
        return REC_OK;
    }
    REC_TRY(gemm_plan_batch(g->lt, &g->gram_bwd, E, F1, F1, 0, 0, 0, g->ws_bytes, g->bf16, gemm_batch{B, n, nn, n, g->direct}));
    if (g->direct && !g->gram_bwd.bf16)
        return rec_errorf(REC_EUNSUPPORTED, "GPU: cuBLASLt has bf16 interaction products for batch %d but not for %d", g->B, B);
    __nv_bfloat16 *G16 = g->gram_bwd.bf16 ? (__nv_bfloat16 *)g->Gg : NULL, *T16 = g->gram_bwd.bf16 ? g->T16 : NULL;
    interact_grad_kernel<<<grid_rows(B), 256, 0, g->st>>>(B, E, g->Dz, nn, g->grad_src, g->dz, g->Gg, G16);
    CU_TRY(cudaGetLastError(), "launching the interaction's backward");
    REC_TRY(gemm_run(g->lt, &g->gram_bwd, operand{g->T, T16}, operand{g->Gg, G16}, g->direct ? (void *)g->dT16 : (void *)g->dT,
                     NULL, g->ws, g->ws_bytes, g->st));
    interact_dx_kernel<<<ew_grid(g, (size_t)B * E), 256, 0, g->st>>>(B, E, g->Dz, n, g->dz, g->dT, g->dT16, g->dh);
    CU_TRY(cudaGetLastError(), "launching the interaction's backward");
    return REC_OK;
}

extern "C" rec_status rec_cuda_model_init(rec_cuda_model **out, rec_model *m, int max_batch, int precision) {
    *out = NULL;
    const rec_model_config *c = rec_model_get_config(m);
    REC_TRY(rec_cuda_check_config(c));
    if (rec_model_is_sharded(m))
        return rec_errorf(REC_EUNSUPPORTED, "--device cuda trains in one process; a sharded (mpirun) model trains on CPUs");
    char name[256];
    REC_TRY(rec_cuda_probe(name, sizeof name));
    REC_TRY(lt_load());
    rec_cuda_model *g = (rec_cuda_model *)calloc(1, sizeof *g);
    if (!g) return rec_errorf(REC_ENOMEM, "GPU model: out of memory");
    g->cfg = *c;
    g->bf16 = precision == REC_PRECISION_BF16;
    g->B = max_batch, g->Dn = c->n_dense, g->F = c->n_sparse, g->E = c->emb_dim;
    g->Dz = rec_interact_dim(c->interaction, c->self_interaction, g->F, g->E);
    g->P = rec_model_n_dense_params(m);
    g->steps = rec_model_steps(m);
    for (int i = 0; i < SLOTS; i++) g->loss_pending[i] = -1;
    rec_embed *e = rec_model_embed(m, 0);
    int *dims = (int *)malloc(g->F * sizeof(int));
    if (!dims) {
        free(g);
        return rec_errorf(REC_ENOMEM, "GPU model: out of memory");
    }
    for (int f = 0; f < g->F; f++) dims[f] = g->E;
    rec_embed_config ec = {g->F, c->table_rows, dims, c->pooling, c->sparse_opt, max_batch, 0, 0, 0, 0, REC_ROUND_STOCHASTIC};
    rec_status s = rec_cuda_embed_init(&g->emb, &ec, e);
    free(dims);
    if (s) {
        free(g);
        return s;
    }
    g->st = g->emb->st;  // one stream for the whole step
    const size_t B = (size_t)g->B, P = g->P;
    g->ws_bytes = (size_t)32 << 20;
    cublasStatus_t ls = lt.create(&g->lt);
    if (ls) s = rec_errorf(REC_EUNSUPPORTED, "GPU: cannot create a cuBLASLt handle (%s)", lt_err(ls));
    if (!s) s = rec_cuda_alloc(&g->ws, g->ws_bytes, "the cuBLASLt workspace");
    if (!s) s = rec_cuda_alloc((void **)&g->params, P * sizeof(float), "the dense parameters");
    if (!s) s = rec_cuda_alloc((void **)&g->grads, P * sizeof(float), "the dense gradients");
    const size_t ns = opt_states(c->dense_opt.kind);
    if (!s && ns >= 1) s = rec_cuda_alloc((void **)&g->s0, P * sizeof(float), "the dense optimizer state");
    if (!s && ns >= 2) s = rec_cuda_alloc((void **)&g->s1, P * sizeof(float), "the dense optimizer state");
    int widest = g->Dz > g->E ? g->Dz : g->E;
    for (int i = 0; i < 2; i++) {
        rec_mlp *mlp = rec_model_mlp(m, i, NULL, NULL);
        for (int l = 0; mlp && l <= rec_mlp_layers(mlp); l++) widest = rec_mlp_size(mlp, l) > widest ? rec_mlp_size(mlp, l) : widest;
    }
    const int dot = c->interaction == REC_INTERACT_DOT;
    const size_t nT = B * (g->F + 1) * g->E;
    struct { float **p; size_t n; const char *what; } bufs[] = {
        {&g->T, dot ? 0 : nT, "the interaction's input"}, {&g->z, dot ? B * g->Dz : 0, "the interaction"},
        {&g->dz, B * g->Dz, "the interaction's gradient"}, {&g->dh, B * g->E, "the bottom gradient"},
        {&g->dbuf[0], B * widest, "activation gradients"}, {&g->dbuf[1], B * widest, "activation gradients"},
        {&g->dlogits, B, "the logits' gradient"}, {&g->d_in[0], B * (g->Dn + 1), "dense inputs and labels"},
        {&g->d_in[1], B * (g->Dn + 1), "dense inputs and labels"}, {&g->bias_part, (size_t)BIAS_CHUNKS * widest, "partial bias gradients"}};
    for (size_t i = 0; !s && i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i].n) s = rec_cuda_alloc((void **)bufs[i].p, bufs[i].n * sizeof(float), bufs[i].what);
    if (!s) s = cu_embed_layout(g->emb, (g->F + 1) * g->E, g->E);  // pooled into T's rows 1..F
    if (!s) s = rec_cuda_alloc((void **)&g->d_loss, sizeof(double), "the loss");
    if (!s && g->bf16) s = rec_cuda_alloc((void **)&g->w16, P * 2, "the parameters in bf16");
    if (!s && g->bf16) s = rec_cuda_alloc((void **)&g->dy16, B * widest * 2, "output gradients in bf16");
    cudaError_t e2 = cudaSuccess;
    for (int i = 0; !s && e2 == cudaSuccess && i < SLOTS; i++) {
        e2 = cudaMallocHost((void **)&g->h_in[i], B * (g->Dn + 1) * sizeof(float));
        if (e2 == cudaSuccess) e2 = cudaEventCreateWithFlags(&g->in_done[i], cudaEventDisableTiming);
        if (e2 == cudaSuccess) e2 = cudaEventCreateWithFlags(&g->loss_done[i], cudaEventDisableTiming);
        for (int k = 0; e2 == cudaSuccess && k <= REC_CUDA_N_PARTS; k++) e2 = cudaEventCreate(&g->ev[i][k]);
        if (e2 == cudaSuccess) s = rec_cuda_batch_new(&g->batch[i]);
    }
    if (!s && e2 == cudaSuccess) e2 = cudaMallocHost((void **)&g->h_loss, SLOTS * sizeof(double));
    if (!s && e2 != cudaSuccess) s = cu_fail(e2, "setting up the GPU model");
    // Parameters and optimizer state from the CPU model.
    const float *hp = rec_model_dense_params(m);
    if (!s) s = rec_cuda_upload(g->params, hp, P * sizeof(float));
    if (!s && g->bf16) to_bf16_kernel<<<ew_grid(g, P), 256, 0, g->st>>>(g->params, P, g->w16);
    if (!s) s = mlp_setup(g, &g->bottom, rec_model_mlp(m, 0, NULL, NULL), hp, 0);
    if (!s) s = mlp_setup(g, &g->top, rec_model_mlp(m, 1, NULL, NULL), hp, 1);
    static const char *const ST[2][2] = {{"opt.dense.sum", NULL}, {"opt.dense.m", "opt.dense.v"}};
    for (size_t k = 0; !s && k < ns; k++) {
        const rec_tensor *t = rec_model_tensor(m, ST[c->dense_opt.kind == REC_OPT_ADAM][k]);
        s = t ? rec_cuda_upload(k ? g->s1 : g->s0, t->data, P * sizeof(float))
              : rec_errorf(REC_EINVAL, "GPU model: the CPU model has no dense optimizer state to copy");
    }
    if (!s && dot) s = interact_setup(g);
    if (s) {
        rec_cuda_model_free(g);
        return s;
    }
    *out = g;
    return REC_OK;
}

extern "C" int64_t rec_cuda_model_steps(const rec_cuda_model *g) { return g->steps; }

// Copies b's dense values and labels (pinned, this slot's buffer once its last copy is done)
// and its ids (the slot's device batch) to the GPU, asynchronously.
static rec_status load_inputs(rec_cuda_model *g, const rec_batch *b) {
    if (b->n < 1 || b->n > g->B)
        return rec_errorf(REC_EINVAL, "GPU model: batch of %lld rows; it was built for 1..%d", (long long)b->n, g->B);
    if (b->n_dense != g->Dn || b->n_sparse < g->F)
        return rec_errorf(REC_EINVAL, "GPU model: the batch has %d dense values and %d sparse features per row; the "
                          "model needs %d and %d", b->n_dense, b->n_sparse, g->Dn, g->F);
    const int i = g->slot, B = (int)b->n;
    CU_TRY(cudaEventSynchronize(g->in_done[i]), "waiting for an input slot");
    float *h = g->h_in[i];
    memcpy(h, b->dense, (size_t)B * g->Dn * sizeof(float));
    memcpy(h + (size_t)B * g->Dn, b->label, (size_t)B * sizeof(float));
    // The ids first: their copy waits (on the copy stream) for the kernels of the step that
    // last used this slot, which the dense copy after it then also does.
    REC_TRY(rec_cuda_batch_load(g->emb, g->batch[i], b, 0));
    CU_TRY(cudaMemcpyAsync(g->d_in[i], h, (size_t)B * (g->Dn + 1) * sizeof(float), cudaMemcpyHostToDevice, g->emb->cp),
           "copying a batch's dense values");
    CU_TRY(cudaEventRecord(g->in_done[i], g->emb->cp), "recording an input copy");
    CU_TRY(cudaStreamWaitEvent(g->st, g->in_done[i], 0), "waiting for an input copy");
    return REC_OK;
}

// The same from staged positions (rec_cuda_model_train_step_staged): the batch gathered on the GPU.
static rec_status load_staged(rec_cuda_model *g, const rec_staged_batch *sb) {
    if (!g->in) return rec_errorf(REC_EINVAL, "GPU model: a staged batch, and no stager (rec_cuda_model_stager)");
    if (sb->n < 1 || sb->n > g->B)
        return rec_errorf(REC_EINVAL, "GPU model: batch of %lld rows; it was built for 1..%d", (long long)sb->n, g->B);
    const int i = g->slot;
    CU_TRY(cudaEventSynchronize(g->in_done[i]), "waiting for an input slot");
    REC_TRY(cu_input_gather(g->in, g->batch[i], sb->pos, (int)sb->n, i, g->d_in[i]));
    CU_TRY(cudaEventRecord(g->in_done[i], g->emb->cp), "recording an input gather");
    CU_TRY(cudaStreamWaitEvent(g->st, g->in_done[i], 0), "waiting for an input gather");
    return REC_OK;
}

extern "C" rec_status rec_cuda_model_stager(rec_cuda_model *g, int n_slots, int64_t slot_rows, const char *what,
                                            rec_stager *out) {
    cu_input_free(g->in);
    g->in = NULL;
    REC_TRY(cu_input_new(&g->in, g->emb, g->Dn, n_slots, slot_rows, g->B, what));
    *out = (rec_stager){cu_input_stage, g->in, n_slots, slot_rows};
    return REC_OK;
}

// RAP's capacity probe (§5.1; its artifact co-runs NGram tasks): each thread hashes a row of
// PROBE_ROW values into the row's first, the rows wrapping around a buffer larger than L2.
__global__ void probe_kernel(long long *v, long long blocks) {
    const long long rows = PROBE_VALUES / PROBE_ROW;
    for (long long b = blockIdx.x; b < blocks; b += gridDim.x) {
        long long *x = v + (b * PROBE_BLOCK + threadIdx.x) % rows * PROBE_ROW;
        unsigned long long h = 1469598103934665603ull;
        for (int k = 0; k < PROBE_ROW; k++) h = (h ^ (unsigned long long)x[k]) * 1099511628211ull;
        x[0] = (long long)h;
    }
}

static void probe_launch(rec_cuda_model *g, long long blocks) {
    const long long most = (long long)g->emb->sms * 8;
    probe_kernel<<<(unsigned)(blocks < most ? blocks : most), PROBE_BLOCK, 0, g->probe_st>>>(g->probe_buf, blocks);
}

// Part k starts (the stage k - 1 of co-running, whose gate event is recorded, and the probe
// the step carries launched beside it). Errors show at the step's next checked call.
static void mark(rec_cuda_model *g, int k) {
    if (g->prof) cudaEventRecord(g->ev[g->slot][k], g->st);
    if (!g->corun || k < 1 || k > REC_CUDA_CORUN_STAGES) return;
    cudaEventRecord(g->gate[k - 1], g->st);
    if (g->probe_of[g->slot] != k - 1) return;
    cudaStreamWaitEvent(g->probe_st, g->gate[k - 1], 0);
    probe_launch(g, g->probe_blocks);
}

extern "C" rec_status rec_cuda_model_corun(rec_cuda_model *g, void **events) {
    if (!g->corun) {
        int least = 0, greatest = 0;
        cudaError_t e = cudaDeviceGetStreamPriorityRange(&least, &greatest);
        if (e == cudaSuccess) e = cudaStreamCreateWithPriority(&g->probe_st, cudaStreamNonBlocking, least);
        for (int s = 0; e == cudaSuccess && s < REC_CUDA_CORUN_STAGES; s++)
            e = cudaEventCreateWithFlags(&g->gate[s], cudaEventDisableTiming);
        if (e != cudaSuccess) return cu_fail(e, "setting up co-running preprocessing");
        REC_TRY(rec_cuda_alloc((void **)&g->probe_buf, sizeof(long long) * PROBE_VALUES, "the capacity probe"));
        CU_TRY(cudaMemsetAsync(g->probe_buf, 0, sizeof(long long) * PROBE_VALUES, g->probe_st), "the capacity probe");
        // The probe alone: 2^k blocks, each timed on its second run, up to 50 ms.
        cudaEvent_t t[2] = {NULL, NULL};
        e = cudaEventCreate(&t[0]);
        if (e == cudaSuccess) e = cudaEventCreate(&t[1]);
        g->n_cal = 0;
        for (int k = 0; e == cudaSuccess && k < PROBE_CAL && (k == 0 || g->cal_ms[k - 1] < 50); k++) {
            float ms = 0;
            for (int rep = 0; e == cudaSuccess && rep < 2; rep++) {
                cudaEventRecord(t[0], g->probe_st);
                probe_launch(g, 1ll << k);
                cudaEventRecord(t[1], g->probe_st);
                e = cudaEventSynchronize(t[1]);
                if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, t[0], t[1]);
            }
            g->cal_ms[k] = ms, g->n_cal = k + 1;
        }
        for (int k = 0; k < 2; k++)
            if (t[k]) cudaEventDestroy(t[k]);
        if (e != cudaSuccess) return cu_fail(e, "timing the capacity probe");
        for (int i = 0; i < SLOTS; i++) g->probe_of[i] = -1;
        g->probe_next = -1, g->stage_fresh = 0;
        g->corun = 1;
    }
    g->prof = 1; // every step's stages timed
    for (int s = 0; s < REC_CUDA_CORUN_STAGES; s++) events[s] = (void *)g->gate[s];
    return REC_OK;
}

extern "C" rec_status rec_cuda_model_probe(rec_cuda_model *g, int stage, double ms) {
    if (!g->corun) return rec_errorf(REC_EINVAL, "GPU model: a capacity probe before rec_cuda_model_corun");
    if (stage < -1 || stage >= REC_CUDA_CORUN_STAGES || !(ms >= 0))
        return rec_errorf(REC_EINVAL, "GPU model: a probe of %g ms beside stage %d", ms, stage);
    g->probe_next = stage;
    // blocks for `ms` alone: between the calibration's two nearest sizes, linearly
    const int n = g->n_cal;
    int k = 0;
    while (k < n && g->cal_ms[k] < ms) k++;
    double blocks;
    if (k == 0) blocks = 1;
    else if (k == n) blocks = (double)(1ll << (n - 1)) * ms / (g->cal_ms[n - 1] > 0 ? g->cal_ms[n - 1] : 1);
    else {
        const double a = g->cal_ms[k - 1], b = g->cal_ms[k], u = (double)(1ll << (k - 1));
        blocks = u + (b > a ? (ms - a) / (b - a) : 0) * u;
    }
    g->probe_blocks = (long long)(blocks < 1 ? 1 : blocks);
    return REC_OK;
}

extern "C" int rec_cuda_model_stage_times(rec_cuda_model *g, double *ms, int *probe_stage) {
    if (!g->stage_fresh) return 0;
    memcpy(ms, g->stage_ms, sizeof g->stage_ms);
    *probe_stage = g->stage_probe;
    g->stage_fresh = 0;
    return 1;
}

static rec_status forward(rec_cuda_model *g, int B, const float **logits) {
    const int i = g->slot, dot = g->cfg.interaction == REC_INTERACT_DOT;
    mark(g, 1);
    if (g->direct) REC_TRY(cu_embed_forward16(g->emb, g->batch[i], g->T16));
    else REC_TRY(rec_cuda_embed_forward(g->emb, g->batch[i], g->T));
    mark(g, 2);
    const float *h, *y;
    REC_TRY(mlp_forward(g, &g->bottom, B, g->d_in[i], &h, 0));
    mark(g, 3);
    REC_TRY(interact_forward(g, B, h));
    mark(g, 4);
    REC_TRY(mlp_forward(g, &g->top, B, dot ? g->z : g->T, &y, dot && g->bf16));
    *logits = y;
    return REC_OK;
}

// Slot j's finished step: its loss and number, and with profiling its parts' times.
static void harvest(rec_cuda_model *g, int j, double *loss, int64_t *step) {
    *loss = g->h_loss[j], *step = g->loss_pending[j];
    g->loss_pending[j] = -1;
    if (!g->prof) return;
    for (int k = 0; k < REC_CUDA_N_PARTS; k++) {
        float ms = 0;
        cudaEventElapsedTime(&ms, g->ev[j][k], g->ev[j][k + 1]);
        g->part_ms[k] += ms;
        if (g->corun && k > 0) g->stage_ms[k - 1] = ms;
    }
    g->part_steps++;
    if (g->corun) g->stage_probe = g->probe_of[j], g->probe_of[j] = -1, g->stage_fresh = 1;
}

// A training step on b, or on the staged batch sb where b is NULL.
static rec_status train_step(rec_cuda_model *g, const rec_batch *b, const rec_staged_batch *sb, double *prev_loss,
                             int64_t *prev_step) {
    const int B = (int)(b ? b->n : sb->n), i = g->slot;
    *prev_step = -1;
    const double h0 = g->prof ? rec_now() : 0;
    if (g->corun) g->probe_of[i] = g->probe_next, g->probe_next = -1;
    mark(g, 0);
    REC_TRY(b ? load_inputs(g, b) : load_staged(g, sb));
    const double h1 = g->prof ? rec_now() : 0;
    const float *logits;
    REC_TRY(forward(g, B, &logits));
    mark(g, 5);
    bce_kernel<<<1, 256, 0, g->st>>>(B, logits, g->d_in[i] + (size_t)B * g->Dn, g->dlogits, g->d_loss);
    CU_TRY(cudaMemcpyAsync(g->h_loss + i, g->d_loss, sizeof(double), cudaMemcpyDeviceToHost, g->st), "copying the loss");
    mark(g, 6);
    const int dot = g->cfg.interaction == REC_INTERACT_DOT;
    REC_TRY(mlp_backward(g, &g->top, B, dot ? g->z : g->T, g->dlogits, g->dz));
    mark(g, 7);
    REC_TRY(interact_backward(g, B));
    mark(g, 8);
    REC_TRY(mlp_backward(g, &g->bottom, B, g->d_in[i], g->dh, NULL));
    mark(g, 9);
    // A step at scale 0 still updates optimizer state, as on the CPU.
    const double scale = rec_lr_scale(&g->cfg.schedule, g->steps);
    const float slr = (float)(g->cfg.sparse_opt.lr * scale);
    if (g->direct) REC_TRY(cu_embed_backward16(g->emb, g->batch[i], g->dT16, slr));
    else REC_TRY(rec_cuda_embed_backward_update(g->emb, g->batch[i], dot ? g->dT : g->dz, slr));
    mark(g, 10);
    const rec_dense_opt_config *o = &g->cfg.dense_opt;
    const int64_t t = g->steps + 1;  // Adam's bias correction counts this step
    const double bc1 = 1.0 - pow(o->beta1, (double)t), bc2 = 1.0 - pow(o->beta2, (double)t);
    const float lr = (float)(o->lr * scale);
    dense_opt_kernel<<<ew_grid(g, g->P), 256, 0, g->st>>>((int)o->kind, g->P, g->params, g->grads, g->s0, g->s1, lr, o->beta1,
                                             o->beta2, o->eps, o->kind == REC_OPT_ADAM ? (float)(lr / bc1) : 0.0f,
                                             o->kind == REC_OPT_ADAM ? (float)sqrt(bc2) : 1.0f);
    if (g->bf16) to_bf16_kernel<<<ew_grid(g, g->P), 256, 0, g->st>>>(g->params, g->P, g->w16);  // the next step's operands
    CU_TRY(cudaGetLastError(), "launching the dense optimizer");
    mark(g, 11);
    CU_TRY(cudaEventRecord(g->loss_done[i], g->st), "recording a step");
    g->loss_pending[i] = g->steps;
    g->steps++;
    // The other slot's step was enqueued one call ago: its loss (and part times) are read
    // while this step runs.
    const int j = i ^ 1;
    g->slot = j;
    const double h2 = g->prof ? rec_now() : 0;
    if (g->loss_pending[j] >= 0) {
        CU_TRY(cudaEventSynchronize(g->loss_done[j]), "running a training step");
        harvest(g, j, prev_loss, prev_step);
    }
    if (g->prof) {
        g->host_s[REC_CUDA_HOST_STAGE] += h1 - h0, g->host_s[REC_CUDA_HOST_LAUNCH] += h2 - h1;
        g->host_s[REC_CUDA_HOST_WAIT] += rec_now() - h2, g->host_steps++;
    }
    return REC_OK;
}

extern "C" rec_status rec_cuda_model_train_step(rec_cuda_model *g, const rec_batch *b, double *prev_loss, int64_t *prev_step) {
    return train_step(g, b, NULL, prev_loss, prev_step);
}

extern "C" rec_status rec_cuda_model_train_step_staged(rec_cuda_model *g, const rec_staged_batch *b, double *prev_loss,
                                                       int64_t *prev_step) {
    return train_step(g, NULL, b, prev_loss, prev_step);
}

extern "C" rec_status rec_cuda_model_finish(rec_cuda_model *g, double *loss, int64_t *step) {
    *step = -1;
    const int j = g->slot ^ 1;  // the last step's slot
    CU_TRY(cudaStreamSynchronize(g->st), "running the training steps");
    if (g->loss_pending[j] >= 0) harvest(g, j, loss, step);
    return REC_OK;
}

extern "C" rec_status rec_cuda_model_forward(rec_cuda_model *g, const rec_batch *b, float *logits) {
    REC_TRY(load_inputs(g, b));
    const float *y;
    REC_TRY(forward(g, (int)b->n, &y));
    CU_TRY(cudaMemcpyAsync(logits, y, (size_t)b->n * sizeof(float), cudaMemcpyDeviceToHost, g->st), "copying logits");
    CU_TRY(cudaStreamSynchronize(g->st), "running the forward");
    return REC_OK;
}

extern "C" rec_status rec_cuda_model_download(rec_cuda_model *g, rec_model *m) {
    CU_TRY(cudaStreamSynchronize(g->st), "waiting for the GPU");
    REC_TRY(rec_cuda_download(rec_model_dense_params(m), g->params, g->P * sizeof(float)));
    static const char *const ST[2][2] = {{"opt.dense.sum", NULL}, {"opt.dense.m", "opt.dense.v"}};
    const size_t ns = opt_states(g->cfg.dense_opt.kind);
    for (size_t k = 0; k < ns; k++) {
        const rec_tensor *t = rec_model_tensor(m, ST[g->cfg.dense_opt.kind == REC_OPT_ADAM][k]);
        if (t) REC_TRY(rec_cuda_download(t->data, k ? g->s1 : g->s0, g->P * sizeof(float)));
    }
    REC_TRY(rec_cuda_embed_download(g->emb, rec_model_embed(m, 0)));
    rec_model_set_steps(m, g->steps);
    return REC_OK;
}

extern "C" void rec_cuda_model_profile(rec_cuda_model *g, int on) {
    g->prof = on;
    memset(g->part_ms, 0, sizeof g->part_ms);
    memset(g->host_s, 0, sizeof g->host_s);
    g->part_steps = g->host_steps = 0;
}

extern "C" int64_t rec_cuda_model_host_read(const rec_cuda_model *g, double *ms) {
    for (int k = 0; k < REC_CUDA_N_HOST; k++) ms[k] = g->host_steps ? 1e3 * g->host_s[k] / g->host_steps : 0;
    return g->host_steps;
}

extern "C" int64_t rec_cuda_model_profile_read(const rec_cuda_model *g, double *ms) {
    for (int k = 0; k < REC_CUDA_N_PARTS; k++) ms[k] = g->part_steps ? g->part_ms[k] / g->part_steps : 0;
    return g->part_steps;
}

extern "C" rec_cuda_embed *rec_cuda_model_embed(rec_cuda_model *g) { return g->emb; }
