// The CUDA backend of the GPU preprocessing executor (src/prep/gexec.h): device memory, one
// stream, and one launch per phase of a fused op over (member, row): a warp a row where the
// member walks a row's values (lists, wide rows: rec_g_lanes), else a thread, running the row
// functions of gops.h, which the CPU backend runs in loops and the tests hold bit for bit to
// the CPU executor. Offsets: one inclusive sum (CUB) over all members' counts and a launch
// that takes each member's base off, or (sums beyond int32) a sum per member. Host buffers
// are pinned, so that copies are queued on the stream and only get and sync wait.
#include <stdlib.h>
#include <string.h>

#include <cub/cub.cuh>

#include "embed_impl.cuh"
#include "../prep/gexec.h"

namespace {

struct cuda_prep {
    cudaStream_t st;
    cudaEvent_t ev[2];   // the operators' marks (g_mark)
    void *tmp;           // CUB's scratch
    size_t tmp_bytes;
    int32_t *incl;       // the inclusive sums of all members' counts
    size_t incl_n;
};

constexpr int THREADS = 256;

// Member k's threads: rows of `lanes` threads each (counting: one), so a row of a warp's
// lanes is one warp (THREADS a multiple of 32) and leaves as one. Each member has the blocks
// of the launch's most lanes a row; a member of fewer fills the first of them, the rest leave.
__global__ void rows_kernel(int phase, const rec_gop *ops, int m, rec_gcol *cols, int64_t n, int32_t *cnt,
                            int64_t blocks_per_member) {
    const int k = (int)(blockIdx.x / blocks_per_member);
    if (k >= m) return;
    const int64_t t = (int64_t)(blockIdx.x % blocks_per_member) * THREADS + threadIdx.x;
    if (phase == REC_G_COUNT) {
        if (t < n) cnt[k * n + t] = rec_g_count(&ops[k], cols, t);
        return;
    }
    const int lanes = rec_g_lanes(&ops[k]);
    const int64_t r = t / lanes;
    const int lane = (int)(t % lanes);
    if (r >= n) return;
    if (phase == REC_G_ELEM) {
        rec_g_elem_part(&ops[k], cols, r, lane, lanes);
        return;
    }
    rec_g_write_part(&ops[k], cols, r, lane, lanes);
    if (lanes > 1) __syncwarp();  // the row's values are read before its flag changes
    if (lane == 0) rec_g_write_flags(&ops[k], cols, r);
}
static_assert(THREADS % REC_G_LANES == 0 && REC_G_LANES == 32, "a row's lanes are one warp");

// A column (n x w) into columns [col, col + w) of rows of ld: a thread a value.
__global__ void to_rows_kernel(float *dst, const float *src, int64_t n, int w, int ld, int col) {
    const int64_t i = (int64_t)blockIdx.x * THREADS + threadIdx.x;
    if (i >= n * w) return;
    dst[(i / w) * ld + col + i % w] = src[i];
}

// dst[i] = src[i] as int32; *bad = 1 where one does not fit.
__global__ void narrow_kernel(int32_t *dst, const int64_t *src, int64_t n, int32_t *bad) {
    const int64_t i = (int64_t)blockIdx.x * THREADS + threadIdx.x;
    if (i >= n) return;
    const int64_t v = src[i];
    dst[i] = (int32_t)v;
    if ((int64_t)(int32_t)v != v) *bad = 1;
}

// Member k's offsets from the sums over all members: off2[0] = 0, off2[r + 1] = incl[k n + r]
// less the sum of the members before k.
__global__ void offsets_kernel(const rec_gop *ops, int m, const rec_gcol *cols, int64_t n, const int32_t *incl) {
    const int64_t i = (int64_t)blockIdx.x * THREADS + threadIdx.x;
    if (i >= (int64_t)m * (n + 1)) return;
    const int k = (int)(i / (n + 1));
    const int64_t r = i % (n + 1);
    const int32_t base = k ? incl[(int64_t)k * n - 1] : 0;
    cols[ops[k].col].off2[r] = r ? incl[(int64_t)k * n + r - 1] - base : 0;
}

// Grows CUB's scratch to `need` bytes.
rec_status scratch(cuda_prep *c, size_t need) {
    if (need <= c->tmp_bytes) return REC_OK;
    if (c->tmp) rec_cuda_free(c->tmp);
    c->tmp = NULL, c->tmp_bytes = 0;
    REC_TRY(rec_cuda_alloc(&c->tmp, need, "the offsets' scan"));
    c->tmp_bytes = need;
    return REC_OK;
}

rec_status g_alloc(void *ctx, void **p, size_t bytes) {
    (void)ctx;
    return rec_cuda_alloc(p, bytes, "the preprocessing columns");
}

void g_release(void *ctx, void *p) {
    (void)ctx;
    rec_cuda_free(p);
}

rec_status g_host_alloc(void *ctx, void **p, size_t bytes) {
    (void)ctx;
    *p = NULL;
    const cudaError_t e = cudaMallocHost(p, bytes ? bytes : 16);
    if (e != cudaSuccess) {
        *p = NULL;
        return rec_errorf(REC_ENOMEM, "GPU preprocessing: cannot pin %.1f MiB of host memory: %s",
                          (double)bytes / (1 << 20), cudaGetErrorString(e));
    }
    return REC_OK;
}

void g_host_release(void *ctx, void *p) {
    cuda_prep *c = (cuda_prep *)ctx;
    cudaStreamSynchronize(c->st); // a queued copy may still read it
    cudaFreeHost(p);
}

rec_status g_put(void *ctx, void *dst, const void *src, size_t bytes) {
    cuda_prep *c = (cuda_prep *)ctx;
    if (!bytes) return REC_OK;
    CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->st), "copying preprocessing input to the GPU");
    return REC_OK;
}

rec_status g_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    cuda_prep *c = (cuda_prep *)ctx;
    if (!bytes) return REC_OK;
    CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, c->st), "gathering preprocessed data on the GPU");
    return REC_OK;
}

rec_status g_get(void *ctx, void *dst, const void *src, size_t bytes) {
    cuda_prep *c = (cuda_prep *)ctx;
    if (!bytes) return REC_OK;
    CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->st), "copying preprocessed data from the GPU");
    CU_TRY(cudaStreamSynchronize(c->st), "running the preprocessing kernels");
    return REC_OK;
}

rec_status g_to_rows(void *ctx, float *dst, const float *src, int64_t n, int w, int ld, int col) {
    cuda_prep *c = (cuda_prep *)ctx;
    if (!n || !w) return REC_OK;
    to_rows_kernel<<<(unsigned)((n * w + THREADS - 1) / THREADS), THREADS, 0, c->st>>>(dst, src, n, w, ld, col);
    CU_TRY(cudaGetLastError(), "laying preprocessed dense values into rows");
    return REC_OK;
}

rec_status g_narrow(void *ctx, int32_t *dst, const int64_t *src, int64_t n, int32_t *bad) {
    cuda_prep *c = (cuda_prep *)ctx;
    if (!n) return REC_OK;
    narrow_kernel<<<(unsigned)((n + THREADS - 1) / THREADS), THREADS, 0, c->st>>>(dst, src, n, bad);
    CU_TRY(cudaGetLastError(), "narrowing preprocessed ids");
    return REC_OK;
}

rec_status g_rows(void *ctx, int phase, const rec_gop *ops, int m, int lanes, rec_gcol *cols, int64_t n, int32_t *cnt) {
    cuda_prep *c = (cuda_prep *)ctx;
    if (!m || !n) return REC_OK;
    const int64_t threads = phase == REC_G_COUNT ? n : n * lanes, per = (threads + THREADS - 1) / THREADS;
    if (per * m >= ((int64_t)1 << 31))
        return rec_errorf(REC_EINVAL, "GPU preprocessing: a fused kernel of %d members over %lld rows needs %lld blocks",
                          m, (long long)n, (long long)(per * m));
    rows_kernel<<<(unsigned)(per * m), THREADS, 0, c->st>>>(phase, ops, m, cols, n, cnt, per);
    CU_TRY(cudaGetLastError(), "launching a fused preprocessing kernel");
    return REC_OK;
}

rec_status g_scan(void *ctx, const rec_gop *ops_host, const rec_gop *ops, int m, const rec_gcol *cols_host,
                  const rec_gcol *cols, int64_t n, const int32_t *cnt, int fits) {
    cuda_prep *c = (cuda_prep *)ctx;
    if (!m || !n) return REC_OK;
    const int64_t all = (int64_t)m * n;
    if (fits && all <= INT32_MAX) { // one sum over every member, each member's base taken off
        if ((size_t)all > c->incl_n) {
            if (c->incl) rec_cuda_free(c->incl);
            c->incl = NULL, c->incl_n = 0;
            REC_TRY(rec_cuda_alloc((void **)&c->incl, sizeof(int32_t) * (size_t)all, "the offsets' scan"));
            c->incl_n = (size_t)all;
        }
        size_t need = 0;
        CU_TRY(cub::DeviceScan::InclusiveSum(NULL, need, cnt, c->incl, (int)all, c->st), "sizing the offsets' scan");
        REC_TRY(scratch(c, need));
        size_t bytes = c->tmp_bytes;
        CU_TRY(cub::DeviceScan::InclusiveSum(c->tmp, bytes, cnt, c->incl, (int)all, c->st), "the offsets' scan");
        const int64_t threads = (int64_t)m * (n + 1);
        offsets_kernel<<<(unsigned)((threads + THREADS - 1) / THREADS), THREADS, 0, c->st>>>(ops, m, cols, n, c->incl);
        CU_TRY(cudaGetLastError(), "launching the offsets' scan");
        return REC_OK;
    }
    size_t need = 0;
    CU_TRY(cub::DeviceScan::InclusiveSum(NULL, need, cnt, (int32_t *)NULL, (int)n, c->st), "sizing the offsets' scan");
    REC_TRY(scratch(c, need));
    for (int k = 0; k < m; k++) {
        int32_t *off = cols_host[ops_host[k].col].off2;
        CU_TRY(cudaMemsetAsync(off, 0, sizeof(int32_t), c->st), "the offsets' scan");
        size_t bytes = c->tmp_bytes;
        CU_TRY(cub::DeviceScan::InclusiveSum(c->tmp, bytes, cnt + (size_t)k * n, off + 1, (int)n, c->st),
               "the offsets' scan");
    }
    return REC_OK;
}

rec_status g_mark(void *ctx, int k) {
    cuda_prep *c = (cuda_prep *)ctx;
    CU_TRY(cudaEventRecord(c->ev[k & 1], c->st), "timing the preprocessing kernels");
    return REC_OK;
}

double g_span_ms(void *ctx) {
    cuda_prep *c = (cuda_prep *)ctx;
    float ms = 0;
    return cudaEventElapsedTime(&ms, c->ev[0], c->ev[1]) == cudaSuccess ? ms : 0.0;
}

rec_status g_sync(void *ctx) {
    cuda_prep *c = (cuda_prep *)ctx;
    CU_TRY(cudaStreamSynchronize(c->st), "running the preprocessing kernels");
    return REC_OK;
}

// A co-run plan's gate: what follows on the stream waits for the training stage's event (its
// latest record; never recorded: no wait).
rec_status g_wait(void *ctx, void *event) {
    cuda_prep *c = (cuda_prep *)ctx;
    CU_TRY(cudaStreamWaitEvent(c->st, (cudaEvent_t)event, 0), "waiting for a training stage");
    return REC_OK;
}

}  // namespace

extern "C" rec_status rec_gback_cuda(rec_gback *out) {
    memset(out, 0, sizeof *out);
    char name[256];
    REC_TRY(rec_cuda_probe(name, sizeof name));
    cuda_prep *c = (cuda_prep *)calloc(1, sizeof *c);
    if (!c) return rec_errorf(REC_ENOMEM, "GPU preprocessing: out of memory");
    // The lowest priority: beside training (train --prep-device cuda) the preprocessing takes
    // what the training's streams leave idle (src/cuda/embed.cu).
    int least = 0, greatest = 0;
    cudaError_t e = cudaDeviceGetStreamPriorityRange(&least, &greatest);
    if (e == cudaSuccess) e = cudaStreamCreateWithPriority(&c->st, cudaStreamDefault, least);
    if (e == cudaSuccess) e = cudaEventCreate(&c->ev[0]);
    if (e == cudaSuccess) e = cudaEventCreate(&c->ev[1]);
    if (e != cudaSuccess) {
        if (c->ev[0]) cudaEventDestroy(c->ev[0]);
        if (c->st) cudaStreamDestroy(c->st);
        free(c);
        return cu_fail(e, "creating the preprocessing stream");
    }
    rec_gback b{};  // field by field (C++20's designated initialisers are not C++17's)
    b.ctx = c, b.name = "cuda", b.alloc = g_alloc, b.release = g_release, b.host_alloc = g_host_alloc;
    b.host_release = g_host_release, b.put = g_put, b.copy = g_copy, b.get = g_get, b.to_rows = g_to_rows;
    b.narrow = g_narrow, b.rows = g_rows, b.scan = g_scan, b.sync = g_sync, b.mark = g_mark, b.span_ms = g_span_ms;
    b.wait = g_wait;
    *out = b;
    return REC_OK;
}

extern "C" void rec_gback_cuda_free(rec_gback *b) {
    cuda_prep *c = (cuda_prep *)b->ctx;
    if (!c) return;
    cudaStreamSynchronize(c->st);
    if (c->tmp) rec_cuda_free(c->tmp);
    if (c->incl) rec_cuda_free(c->incl);
    cudaEventDestroy(c->ev[0]), cudaEventDestroy(c->ev[1]);
    cudaStreamDestroy(c->st);
    free(c);
    b->ctx = NULL;
}
