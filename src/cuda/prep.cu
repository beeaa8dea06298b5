// The CUDA backend of the GPU preprocessing executor (src/prep/gexec.h): device memory, one
// stream, and one launch per phase of a fused op: a thread per (member, row) running the row
// functions of gops.h, which the CPU backend runs in loops and the tests hold bit for bit to
// the CPU executor. Offsets are per-member inclusive sums (CUB) of the counted lengths.
#include <stdlib.h>
#include <string.h>

#include <cub/cub.cuh>

#include "embed_impl.cuh"
#include "../prep/gexec.h"

namespace {

struct cuda_prep {
    cudaStream_t st;
    void *tmp;           // CUB's scratch
    size_t tmp_bytes;
};

constexpr int THREADS = 256;

__global__ void rows_kernel(int phase, const rec_gop *ops, int m, rec_gcol *cols, int64_t n, int32_t *cnt,
                            int64_t blocks_per_member) {
    const int k = (int)(blockIdx.x / blocks_per_member);
    const int64_t r = (int64_t)(blockIdx.x % blocks_per_member) * THREADS + threadIdx.x;
    if (k >= m || r >= n) return;
    if (phase == REC_G_ELEM) rec_g_elem(&ops[k], cols, r);
    else if (phase == REC_G_COUNT) cnt[k * n + r] = rec_g_count(&ops[k], cols, r);
    else rec_g_write(&ops[k], cols, r);
}

rec_status g_alloc(void *ctx, void **p, size_t bytes) {
    (void)ctx;
    return rec_cuda_alloc(p, bytes, "the preprocessing columns");
}

void g_release(void *ctx, void *p) {
    (void)ctx;
    rec_cuda_free(p);
}

rec_status g_put(void *ctx, void *dst, const void *src, size_t bytes) {
    cuda_prep *c = (cuda_prep *)ctx;
    if (!bytes) return REC_OK;
    CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c->st), "copying preprocessing input to the GPU");
    return REC_OK;
}

rec_status g_get(void *ctx, void *dst, const void *src, size_t bytes) {
    cuda_prep *c = (cuda_prep *)ctx;
    if (!bytes) return REC_OK;
    CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c->st), "copying preprocessed data from the GPU");
    CU_TRY(cudaStreamSynchronize(c->st), "running the preprocessing kernels");
    return REC_OK;
}

rec_status g_rows(void *ctx, int phase, const rec_gop *ops, int m, rec_gcol *cols, int64_t n, int32_t *cnt) {
    cuda_prep *c = (cuda_prep *)ctx;
    if (!m || !n) return REC_OK;
    const int64_t per = (n + THREADS - 1) / THREADS;
    rows_kernel<<<(unsigned)(per * m), THREADS, 0, c->st>>>(phase, ops, m, cols, n, cnt, per);
    CU_TRY(cudaGetLastError(), "launching a fused preprocessing kernel");
    return REC_OK;
}

rec_status g_scan(void *ctx, const rec_gop *ops, int m, const rec_gcol *cols, int64_t n, const int32_t *cnt) {
    cuda_prep *c = (cuda_prep *)ctx;
    size_t need = 0;
    CU_TRY(cub::DeviceScan::InclusiveSum(NULL, need, cnt, (int32_t *)NULL, (int)n, c->st), "sizing the offsets' scan");
    if (need > c->tmp_bytes) {
        if (c->tmp) rec_cuda_free(c->tmp);
        c->tmp = NULL, c->tmp_bytes = 0;
        REC_TRY(rec_cuda_alloc(&c->tmp, need, "the offsets' scan"));
        c->tmp_bytes = need;
    }
    for (int k = 0; k < m; k++) {
        int32_t *off = cols[ops[k].col].off2;
        CU_TRY(cudaMemsetAsync(off, 0, sizeof(int32_t), c->st), "the offsets' scan");
        size_t bytes = c->tmp_bytes;
        CU_TRY(cub::DeviceScan::InclusiveSum(c->tmp, bytes, cnt + (size_t)k * n, off + 1, (int)n, c->st),
               "the offsets' scan");
    }
    return REC_OK;
}

rec_status g_sync(void *ctx) {
    cuda_prep *c = (cuda_prep *)ctx;
    CU_TRY(cudaStreamSynchronize(c->st), "running the preprocessing kernels");
    return REC_OK;
}

}  // namespace

extern "C" rec_status rec_gback_cuda(rec_gback *out) {
    memset(out, 0, sizeof *out);
    char name[256];
    REC_TRY(rec_cuda_probe(name, sizeof name));
    cuda_prep *c = (cuda_prep *)calloc(1, sizeof *c);
    if (!c) return rec_errorf(REC_ENOMEM, "GPU preprocessing: out of memory");
    const cudaError_t e = cudaStreamCreate(&c->st);
    if (e != cudaSuccess) {
        free(c);
        return cu_fail(e, "creating the preprocessing stream");
    }
    *out = rec_gback{c, "cuda", g_alloc, g_release, g_put, g_get, g_rows, g_scan, g_sync};
    return REC_OK;
}

extern "C" void rec_gback_cuda_free(rec_gback *b) {
    cuda_prep *c = (cuda_prep *)b->ctx;
    if (!c) return;
    cudaStreamSynchronize(c->st);
    if (c->tmp) rec_cuda_free(c->tmp);
    cudaStreamDestroy(c->st);
    free(c);
    b->ctx = NULL;
}
