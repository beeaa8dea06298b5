// A DLRM trained on the GPU (cuda.h, "the GPU model"): the dense layers through cuBLASLt with
// bias and ReLU fused as epilogues, the interaction, loss and dense optimizers as kernels, the
// embeddings through the fused engine (embed.cu), all on the engine's one stream with every
// buffer allocated at start. Inputs travel through pinned, double-buffered copies; the host
// reads a step's loss one step later, so it never waits for the device to drain.
#include <cuda_runtime.h>
#include <cublasLt.h>
#include <cuda_bf16.h>

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embed_impl.cuh"
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
} gemm;

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
                               int bf16) {
    gemm_free(g);
    *g = gemm{};
    g->m = m, g->n = n, g->k = k, g->ta = ta, g->tb = tb, g->epi = epi, g->bf16 = bf16;
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
    if (!s) s = lt.layout_create(&g->d, CUDA_R_32F, m, n, m);
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
        return rec_errorf(REC_EUNSUPPORTED, "GPU: no cuBLASLt algorithm for a (%d x %d x %d) %s product%s (%s)", m, n, k,
                          bf16 ? "bf16" : "fp32", epi ? " with a bias epilogue" : "", lt_err(s));
    }
    g->algo = res.algo;
    return REC_OK;
}

static rec_status gemm_plan(cublasLtHandle_t h, gemm *g, int m, int n, int k, int ta, int tb, int epi, size_t ws, int bf16) {
    if (g->planned && g->m == m && g->n == n && g->k == k) return REC_OK;
    if (bf16 && gemm_plan_as(h, g, m, n, k, ta, tb, epi, ws, 1) == REC_OK) return REC_OK;
    return gemm_plan_as(h, g, m, n, k, ta, tb, epi, ws, 0);
}

// A and B each come in fp32 and, when the model runs bf16, as a bf16 copy: the plan picks.
typedef struct operand {
    const float *f32;
    const __nv_bfloat16 *b16;
} operand;

static rec_status gemm_run(cublasLtHandle_t h, gemm *g, operand A, operand B, float *D, const float *bias, void *ws,
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

// dy *= (y > 0) where relu, and its bf16 copy where b16 is not NULL.
__global__ void relu_grad_kernel(float *dy, const float *y, size_t n, int relu, __nv_bfloat16 *b16) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v = dy[i];
        if (relu && !(y[i] > 0.0f)) dy[i] = v = 0.0f;
        if (b16) b16[i] = __float2bfloat16_rn(v);
    }
}

__global__ void to_bf16_kernel(const float *x, size_t n, __nv_bfloat16 *y) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = __float2bfloat16_rn(x[i]);
}

// db (N) = column sums of dy (B, N), in two passes so that the whole GPU reads dy: block
// (x, y) sums 32 columns over row chunk y (8 row-lanes, then shared memory) into part (Y, N);
// then one thread per column adds the Y partial sums in order. Deterministic.
enum { BIAS_CHUNKS = 64 };
__global__ void bias_part_kernel(const float *dy, int B, int N, float *part) {
    __shared__ float sm[8][33];
    const int c = blockIdx.x * 32 + threadIdx.x, rows = (B + gridDim.y - 1) / gridDim.y;
    const int r0 = blockIdx.y * rows, r1 = min(B, r0 + rows);
    float s = 0;
    if (c < N)
        for (int r = r0 + threadIdx.y; r < r1; r += 8) s += dy[(size_t)r * N + c];
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

// Dot interaction (nn.h), one warp per sample: T = [x; emb] (F + 1, E) in shared memory, the
// pairs (i, j) of dlrm's li/lj order from a device table, each lane a pair at a time.
__global__ void interact_fwd_kernel(int B, int F, int E, int D, int npairs, const int2 *pairs, const float *x,
                                    const float *emb, float *z) {
    extern __shared__ float sm[];
    const int warps = blockDim.x >> 5, w = threadIdx.x >> 5, lane = threadIdx.x & 31, n = (F + 1) * E;
    float *T = sm + (size_t)w * n;
    for (int b = blockIdx.x * warps + w; b < B; b += gridDim.x * warps) {
        for (int i = lane; i < n; i += 32) T[i] = i < E ? x[(size_t)b * E + i] : emb[(size_t)b * F * E + i - E];
        __syncwarp();
        float *o = z + (size_t)b * D;
        for (int i = lane; i < E; i += 32) o[i] = T[i];
        for (int k = lane; k < npairs; k += 32) {
            const int2 p = pairs[k];
            float s = 0;
            for (int e = 0; e < E; e++) s += T[p.x * E + e] * T[p.y * E + e];
            o[E + k] = s;
        }
        __syncwarp();
    }
}

// dT_i = sum over the pairs holding i of dZ times the other row (twice T_i on the diagonal);
// dx = dz[0:E] + dT_0, demb = dT_1..F. Lane per element (i, e) of T.
__global__ void interact_bwd_kernel(int B, int F, int E, int D, int self, const float *x, const float *emb,
                                    const float *dz, float *dx, float *demb) {
    extern __shared__ float sm[];
    const int warps = blockDim.x >> 5, w = threadIdx.x >> 5, lane = threadIdx.x & 31, n = (F + 1) * E;
    float *T = sm + (size_t)w * n;
    for (int b = blockIdx.x * warps + w; b < B; b += gridDim.x * warps) {
        for (int i = lane; i < n; i += 32) T[i] = i < E ? x[(size_t)b * E + i] : emb[(size_t)b * F * E + i - E];
        __syncwarp();
        const float *g = dz + (size_t)b * D + E;
        for (int q = lane; q < n; q += 32) {
            const int i = q / E, e = q - i * E;
            float s = 0;
            for (int j = 0; j <= F; j++) {
                if (j == i && !self) continue;
                const int hi = i > j ? i : j, lo = i > j ? j : i;
                const int k = self ? hi * (hi + 1) / 2 + lo : hi * (hi - 1) / 2 + lo;
                s += g[k] * T[j * E + e] * (j == i ? 2.0f : 1.0f);
            }
            if (i == 0) dx[(size_t)b * E + e] = dz[(size_t)b * D + e] + s;
            else demb[(size_t)b * F * E + (size_t)(i - 1) * E + e] = s;
        }
        __syncwarp();
    }
}

// CAT: z = [x | emb], and back.
__global__ void cat_fwd_kernel(int B, int E, int FE, const float *x, const float *emb, float *z) {
    const int D = E + FE;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)B * D; i += (size_t)gridDim.x * blockDim.x) {
        const size_t b = i / D, c = i - b * D;
        z[i] = c < (size_t)E ? x[b * E + c] : emb[b * FE + c - E];
    }
}
__global__ void cat_bwd_kernel(int B, int E, int FE, const float *dz, float *dx, float *demb) {
    const int D = E + FE;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)B * D; i += (size_t)gridDim.x * blockDim.x) {
        const size_t b = i / D, c = i - b * D;
        if (c < (size_t)E) dx[b * E + c] = dz[i];
        else demb[b * FE + c - E] = dz[i];
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
} mlp_dev;

enum { SLOTS = 2 };

struct rec_cuda_model {
    rec_model_config cfg;         // shallow copy (table_rows borrowed from the CPU model)
    int B, Dn, F, E, Dz, npairs;
    int iwarps;                   // samples (warps) per block of the interaction kernels
    size_t P;
    int64_t steps;
    rec_cuda_embed *emb;
    cudaStream_t st;
    cublasLtHandle_t lt;
    void *ws;
    size_t ws_bytes;
    float *params, *grads, *s0, *s1;  // (P) each; optimizer state as the kind needs
    mlp_dev bottom, top;
    float *emb_out, *demb, *z, *dz, *dh, *dbuf[2], *dlogits;  // (B, ...)
    float *bias_part;                 // (BIAS_CHUNKS, widest) partial bias gradients
    int bf16;                         // REC_PRECISION_BF16: GEMM operands in bf16, fp32 master weights
    __nv_bfloat16 *w16, *dy16;        // bf16 runs: the parameters (P), an output gradient (B, widest)
    int2 *pairs;
    double *d_loss;
    // inputs: pinned dense + labels per slot, the device copy, and a device batch per slot
    float *h_in[SLOTS], *d_in;
    cudaEvent_t in_done[SLOTS];
    rec_cuda_batch *batch[SLOTS];
    int slot;
    // the loss of each slot's step, read one step later
    double *h_loss;
    cudaEvent_t loss_done[SLOTS];
    int64_t loss_pending[SLOTS];  // step number whose loss the slot holds, -1 none
    // part timing
    int prof;
    cudaEvent_t ev[SLOTS][REC_CUDA_N_PARTS + 1];
    double part_ms[REC_CUDA_N_PARTS];
    int64_t part_steps;
};

static const char *const PART_NAMES[REC_CUDA_N_PARTS] = {"input copy", "embedding fwd", "bottom fwd", "interaction fwd",
                                                         "top fwd", "loss", "top bwd", "interaction bwd", "bottom bwd",
                                                         "embedding bwd+update", "dense optimizer"};
extern "C" const char *rec_cuda_part_name(int k) { return k >= 0 && k < REC_CUDA_N_PARTS ? PART_NAMES[k] : "?"; }

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
    return REC_OK;
}

static void mlp_free(mlp_dev *d) {
    for (int l = 0; l < d->L; l++) {
        cudaFree(d->act[l]), cudaFree(d->in16[l]);
        gemm_free(&d->fwd[l]), gemm_free(&d->bx[l]), gemm_free(&d->bw[l]);
    }
}

// The GEMMs are planned for the largest batch; a smaller one (an epoch's last) re-plans.
static rec_status mlp_forward(rec_cuda_model *g, mlp_dev *d, int B, const float *x, const float **y) {
    const float *in = x;
    for (int l = 0; l < d->L; l++) {
        const int relu = l < d->L - 1 || d->relu_last;
        REC_TRY(gemm_plan(g->lt, &d->fwd[l], d->sizes[l + 1], B, d->sizes[l], 1, 0, relu ? 2 : 1, g->ws_bytes, g->bf16));
        if (g->bf16) to_bf16_kernel<<<256, 256, 0, g->st>>>(in, (size_t)B * d->sizes[l], d->in16[l]);
        REC_TRY(gemm_run(g->lt, &d->fwd[l], operand{g->params + d->w_off[l], g->w16 + d->w_off[l]}, operand{in, d->in16[l]},
                         d->act[l], g->params + d->b_off[l], g->ws, g->ws_bytes, g->st));
        in = d->act[l];
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
        if (relu || g->bf16) relu_grad_kernel<<<256, 256, 0, g->st>>>(cur, d->act[l], (size_t)B * out, relu, g->dy16);
        REC_TRY(gemm_plan(g->lt, &d->bw[l], in, out, B, 0, 1, 0, g->ws_bytes, g->bf16));
        REC_TRY(gemm_run(g->lt, &d->bw[l], operand{xin, d->in16[l]}, operand{cur, g->dy16}, g->grads + d->w_off[l], NULL,
                         g->ws, g->ws_bytes, g->st));
        const int Y = B < 8 * BIAS_CHUNKS ? (B + 7) / 8 : BIAS_CHUNKS;
        bias_part_kernel<<<dim3((out + 31) / 32, Y), dim3(32, 8), 0, g->st>>>(cur, B, out, g->bias_part);
        bias_sum_kernel<<<(out + 127) / 128, 128, 0, g->st>>>(g->bias_part, Y, out, g->grads + d->b_off[l]);
        if (l == 0 && !dx) break;
        float *next = l ? g->dbuf[(l & 1) ^ 1] : dx;
        if (next == cur) next = g->dbuf[l & 1];
        REC_TRY(gemm_plan(g->lt, &d->bx[l], in, B, out, 0, 0, 0, g->ws_bytes, g->bf16));
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
    cudaFree(g->emb_out), cudaFree(g->demb), cudaFree(g->z), cudaFree(g->dz), cudaFree(g->dh);
    cudaFree(g->dbuf[0]), cudaFree(g->dbuf[1]), cudaFree(g->dlogits), cudaFree(g->pairs), cudaFree(g->d_loss);
    cudaFree(g->d_in), cudaFree(g->bias_part), cudaFree(g->w16), cudaFree(g->dy16);
    for (int i = 0; i < SLOTS; i++) {
        cudaFreeHost(g->h_in[i]);
        rec_cuda_batch_free(g->batch[i]);
        if (g->in_done[i]) cudaEventDestroy(g->in_done[i]);
        if (g->loss_done[i]) cudaEventDestroy(g->loss_done[i]);
        for (int k = 0; k <= REC_CUDA_N_PARTS; k++)
            if (g->ev[i][k]) cudaEventDestroy(g->ev[i][k]);
    }
    cudaFreeHost(g->h_loss);
    if (g->lt) lt.destroy(g->lt);
    rec_cuda_embed_free(g->emb);
    free(g);
}

static size_t opt_states(rec_opt_kind k) { return k == REC_OPT_ADAM ? 2 : k == REC_OPT_ADAGRAD ? 1 : 0; }

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
    struct { float **p; size_t n; const char *what; } bufs[] = {
        {&g->emb_out, B * g->F * g->E, "pooled embeddings"}, {&g->demb, B * g->F * g->E, "their gradients"},
        {&g->z, B * g->Dz, "the interaction"}, {&g->dz, B * g->Dz, "its gradient"}, {&g->dh, B * g->E, "the bottom gradient"},
        {&g->dbuf[0], B * widest, "activation gradients"}, {&g->dbuf[1], B * widest, "activation gradients"},
        {&g->dlogits, B, "the logits' gradient"}, {&g->d_in, B * (g->Dn + 1), "dense inputs and labels"},
        {&g->bias_part, (size_t)BIAS_CHUNKS * widest, "partial bias gradients"}};
    for (size_t i = 0; !s && i < sizeof bufs / sizeof bufs[0]; i++) s = rec_cuda_alloc((void **)bufs[i].p, bufs[i].n * sizeof(float), bufs[i].what);
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
    if (!s && g->bf16) to_bf16_kernel<<<512, 256, 0, g->st>>>(g->params, P, g->w16);
    if (!s) s = mlp_setup(g, &g->bottom, rec_model_mlp(m, 0, NULL, NULL), hp, 0);
    if (!s) s = mlp_setup(g, &g->top, rec_model_mlp(m, 1, NULL, NULL), hp, 1);
    static const char *const ST[2][2] = {{"opt.dense.sum", NULL}, {"opt.dense.m", "opt.dense.v"}};
    for (size_t k = 0; !s && k < ns; k++) {
        const rec_tensor *t = rec_model_tensor(m, ST[c->dense_opt.kind == REC_OPT_ADAM][k]);
        s = t ? rec_cuda_upload(k ? g->s1 : g->s0, t->data, P * sizeof(float))
              : rec_errorf(REC_EINVAL, "GPU model: the CPU model has no dense optimizer state to copy");
    }
    if (!s && c->interaction == REC_INTERACT_DOT) { // a sample's T in shared memory, up to 8 a block
        cudaDeviceProp prop;
        const size_t one = (size_t)(g->F + 1) * g->E * sizeof(float);
        e2 = cudaGetDeviceProperties(&prop, 0);
        g->iwarps = 8;
        while (e2 == cudaSuccess && g->iwarps > 1 && g->iwarps * one > prop.sharedMemPerBlockOptin) g->iwarps /= 2;
        if (e2 == cudaSuccess && one > prop.sharedMemPerBlockOptin)
            s = rec_errorf(REC_EUNSUPPORTED, "GPU model: the dot interaction of %d features of dim %d needs %zu bytes of "
                           "shared memory per sample; this GPU has %zu", g->F + 1, g->E, one, prop.sharedMemPerBlockOptin);
        if (!s && e2 == cudaSuccess)
            e2 = cudaFuncSetAttribute(interact_fwd_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)(g->iwarps * one));
        if (!s && e2 == cudaSuccess)
            e2 = cudaFuncSetAttribute(interact_bwd_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)(g->iwarps * one));
        if (!s && e2 != cudaSuccess) s = cu_fail(e2, "configuring the interaction kernels");
    }
    if (!s && c->interaction == REC_INTERACT_DOT) { // dlrm's li/lj order
        int2 *pairs = (int2 *)malloc((size_t)(g->F + 1) * (g->F + 1) * sizeof(int2));
        int n = 0;
        for (int i = 0; pairs && i <= g->F; i++)
            for (int j = 0; j < i + (c->self_interaction != 0); j++) pairs[n++] = make_int2(i, j);
        g->npairs = n;
        s = pairs ? rec_cuda_alloc((void **)&g->pairs, (size_t)(n + 1) * sizeof(int2), "the interaction's pairs")
                  : rec_errorf(REC_ENOMEM, "GPU model: out of memory");
        if (!s) s = rec_cuda_upload(g->pairs, pairs, (size_t)n * sizeof(int2));
        free(pairs);
    }
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
    CU_TRY(cudaMemcpyAsync(g->d_in, h, (size_t)B * (g->Dn + 1) * sizeof(float), cudaMemcpyHostToDevice, g->st),
           "copying a batch's dense values");
    CU_TRY(cudaEventRecord(g->in_done[i], g->st), "recording an input copy");
    return rec_cuda_batch_load(g->emb, g->batch[i], b, 0);
}

static void mark(rec_cuda_model *g, int k) {
    if (g->prof) cudaEventRecord(g->ev[g->slot][k], g->st);
}

static rec_status forward(rec_cuda_model *g, int B, const float **logits) {
    const rec_cuda_batch *d = g->batch[g->slot];
    mark(g, 1);
    REC_TRY(rec_cuda_embed_forward(g->emb, d, g->emb_out));
    mark(g, 2);
    const float *h, *y;
    REC_TRY(mlp_forward(g, &g->bottom, B, g->d_in, &h));
    mark(g, 3);
    if (g->cfg.interaction == REC_INTERACT_DOT) {
        const size_t smem = (size_t)g->iwarps * (g->F + 1) * g->E * sizeof(float);
        interact_fwd_kernel<<<(B + g->iwarps - 1) / g->iwarps, 32 * g->iwarps, smem, g->st>>>(B, g->F, g->E, g->Dz, g->npairs, g->pairs, h, g->emb_out, g->z);
    } else
        cat_fwd_kernel<<<256, 256, 0, g->st>>>(B, g->E, g->F * g->E, h, g->emb_out, g->z);
    CU_TRY(cudaGetLastError(), "launching the interaction");
    mark(g, 4);
    REC_TRY(mlp_forward(g, &g->top, B, g->z, &y));
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
    }
    g->part_steps++;
}

extern "C" rec_status rec_cuda_model_train_step(rec_cuda_model *g, const rec_batch *b, double *prev_loss, int64_t *prev_step) {
    const int B = (int)b->n, i = g->slot;
    *prev_step = -1;
    mark(g, 0);
    REC_TRY(load_inputs(g, b));
    const float *logits;
    REC_TRY(forward(g, B, &logits));
    mark(g, 5);
    bce_kernel<<<1, 256, 0, g->st>>>(B, logits, g->d_in + (size_t)B * g->Dn, g->dlogits, g->d_loss);
    CU_TRY(cudaMemcpyAsync(g->h_loss + i, g->d_loss, sizeof(double), cudaMemcpyDeviceToHost, g->st), "copying the loss");
    mark(g, 6);
    REC_TRY(mlp_backward(g, &g->top, B, g->z, g->dlogits, g->dz));
    mark(g, 7);
    if (g->cfg.interaction == REC_INTERACT_DOT) {
        const size_t smem = (size_t)g->iwarps * (g->F + 1) * g->E * sizeof(float);
        interact_bwd_kernel<<<(B + g->iwarps - 1) / g->iwarps, 32 * g->iwarps, smem, g->st>>>(B, g->F, g->E, g->Dz, g->cfg.self_interaction != 0,
                                                                g->bottom.act[g->bottom.L - 1], g->emb_out, g->dz, g->dh, g->demb);
    } else
        cat_bwd_kernel<<<256, 256, 0, g->st>>>(B, g->E, g->F * g->E, g->dz, g->dh, g->demb);
    CU_TRY(cudaGetLastError(), "launching the interaction's backward");
    mark(g, 8);
    REC_TRY(mlp_backward(g, &g->bottom, B, g->d_in, g->dh, NULL));
    mark(g, 9);
    // A step at scale 0 still updates optimizer state, as on the CPU.
    const double scale = rec_lr_scale(&g->cfg.schedule, g->steps);
    REC_TRY(rec_cuda_embed_backward_update(g->emb, g->batch[i], g->demb, (float)(g->cfg.sparse_opt.lr * scale)));
    mark(g, 10);
    const rec_dense_opt_config *o = &g->cfg.dense_opt;
    const int64_t t = g->steps + 1;  // Adam's bias correction counts this step
    const double bc1 = 1.0 - pow(o->beta1, (double)t), bc2 = 1.0 - pow(o->beta2, (double)t);
    const float lr = (float)(o->lr * scale);
    dense_opt_kernel<<<512, 256, 0, g->st>>>((int)o->kind, g->P, g->params, g->grads, g->s0, g->s1, lr, o->beta1,
                                             o->beta2, o->eps, o->kind == REC_OPT_ADAM ? (float)(lr / bc1) : 0.0f,
                                             o->kind == REC_OPT_ADAM ? (float)sqrt(bc2) : 1.0f);
    if (g->bf16) to_bf16_kernel<<<512, 256, 0, g->st>>>(g->params, g->P, g->w16);  // the next step's operands
    CU_TRY(cudaGetLastError(), "launching the dense optimizer");
    mark(g, 11);
    CU_TRY(cudaEventRecord(g->loss_done[i], g->st), "recording a step");
    g->loss_pending[i] = g->steps;
    g->steps++;
    // The other slot's step was enqueued one call ago: its loss (and part times) are read
    // while this step runs.
    const int j = i ^ 1;
    g->slot = j;
    if (g->loss_pending[j] >= 0) {
        CU_TRY(cudaEventSynchronize(g->loss_done[j]), "running a training step");
        harvest(g, j, prev_loss, prev_step);
    }
    return REC_OK;
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
    g->part_steps = 0;
}

extern "C" int64_t rec_cuda_model_profile_read(const rec_cuda_model *g, double *ms) {
    for (int k = 0; k < REC_CUDA_N_PARTS; k++) ms[k] = g->part_steps ? g->part_ms[k] / g->part_steps : 0;
    return g->part_steps;
}

extern "C" rec_cuda_embed *rec_cuda_model_embed(rec_cuda_model *g) { return g->emb; }
