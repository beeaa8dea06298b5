// A GPU model's input gathered on the GPU (embed_impl.cuh "staged input"): the loader stages each
// shuffled window once (rec_loader_open_staged, data.h), this file copies it to the device as
// it is, and every batch is a list of positions in the staged windows that three kernels turn
// into the embedding engine's batch (offsets, ids) and the model's dense values and labels. The
// host's work a batch is its positions and its ids per table (the block map and the sort need
// them): no gathering, no packing.
//
// Streams: the windows' copies on a stream of their own; the gathers on the engine's copy stream,
// each waiting for the windows it reads (staged[s]) and the last use of the batch it writes
// (d->used). A slot is staged again only once its last gather is done (gathered[s]), which the
// loader's ordering makes the last one enqueued that reads it (rec_loader_open_staged).
// The row functions are gather.h's, shared with the CPU reference (stage.c), which
// tests/test_loader.c holds to the host's packing of the same batches.
#include <stdlib.h>
#include <string.h>

#include <cub/cub.cuh>

#include "embed_impl.cuh"
#include "gather.h"

enum { MAX_SLOTS = REC_CUDA_STAGE_SLOTS, IN_SLOTS = 2 };

struct cu_input {
    rec_cuda_embed *g;
    int F, Dn, S, maxB;
    int64_t slot_rows;
    const char *what;
    rec_pool *pool;               // the staging's copies, features in parallel (the loader's thread waits)
    cudaStream_t sst;             // the windows' copies
    rec_cuda_stage st[MAX_SLOTS];
    int32_t *h_buf[MAX_SLOTS], *d_buf[MAX_SLOTS];  // pinned / device: a staged window
    size_t cap[MAX_SLOTS];        // words of each
    cudaEvent_t staged[MAX_SLOTS];    // on sst: slot s's window is on the device
    cudaEvent_t gathered[MAX_SLOTS];  // on the copy stream: the last gather reading slot s is done
    rec_gsrc *h_src;              // (S, F) host pointers into the pinned windows: each batch's ids per table
    int64_t *nnz;                 // (F) a batch's ids per table, before its device batch is sized
    rec_gsrc *p_src, *d_src;      // (S, F) device pointers: a pinned mirror, and its device copy
    rec_gslot *p_slot, *d_slot;   // (S) the same for the labels and dense values
    uint32_t *h_pos[IN_SLOTS], *d_pos[IN_SLOTS];   // a batch's positions
    int32_t *d_len;               // (F (maxB + 1)) the lengths the offsets are the scan of
    void *cub_tmp;
    size_t cub_bytes;
};

// ---- kernels ------------------------------------------------------------------------------------

__global__ void gather_len_kernel(const rec_gsrc *src, const uint32_t *pos, int B, int F, int64_t slot_rows, int32_t *len) {
    const int64_t E = (int64_t)F * (B + 1);
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < E; e += (int64_t)gridDim.x * blockDim.x)
        len[e] = rec_gather_len_entry(src, pos, B, F, slot_rows, e);
}

// `lanes` threads an (f, b) item, a power of two up to a warp: a list's ids are read `lanes` at
// a time; one-hot features take one lane an item.
__global__ void gather_ids_kernel(const rec_gsrc *src, const uint32_t *pos, int B, int F, int64_t slot_rows,
                                  const int32_t *off, int lanes, int32_t *ids) {
    const int64_t items = (int64_t)F * B;
    const int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, step = (int64_t)gridDim.x * blockDim.x;
    for (int64_t it = t / lanes; it < items; it += step / lanes)
        rec_gather_ids(src, pos, B, F, slot_rows, off, it / B, it % B, (int)(t % lanes), lanes, ids);
}

__global__ void gather_dense_kernel(const rec_gslot *slot, const uint32_t *pos, int B, int Dn, int64_t slot_rows, float *out) {
    const int64_t E = (int64_t)B * (Dn + 1);
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < E; e += (int64_t)gridDim.x * blockDim.x)
        rec_gather_dense(slot, pos, B, Dn, slot_rows, e, out);
}

static unsigned grid_for(int64_t n, int sms) {
    const int64_t want = (n + 255) / 256, most = (int64_t)sms * 8;
    return (unsigned)(want < 1 ? 1 : want < most ? want : most);
}

// ---- set-up -------------------------------------------------------------------------------------

rec_status cu_input_new(cu_input **out, rec_cuda_embed *g, int Dn, int n_slots, int64_t slot_rows, int maxB,
                        const char *what) {
    *out = NULL;
    if (n_slots < 1 || n_slots > MAX_SLOTS)
        return rec_errorf(REC_EINVAL, "GPU input: %d staging slots; it takes 1..%d (a smaller batch, or a larger "
                          "shuffle window)", n_slots, MAX_SLOTS);
    if ((int64_t)g->F * (maxB + 1) >= INT32_MAX)
        return rec_errorf(REC_EINVAL, "GPU input: %d tables x %d rows is too many offsets for one scan (a smaller batch)",
                          g->F, maxB);
    cu_input *in = (cu_input *)calloc(1, sizeof *in);
    if (!in) return rec_errorf(REC_ENOMEM, "GPU input: out of memory");
    in->g = g, in->F = g->F, in->Dn = Dn, in->S = n_slots, in->slot_rows = slot_rows, in->maxB = maxB, in->what = what;
    const int F = g->F, S = n_slots;
    rec_status s = REC_OK;
    for (int i = 0; !s && i < S; i++) s = rec_cuda_stage_init(&in->st[i], Dn, F);
    in->h_src = (rec_gsrc *)calloc((size_t)S * F, sizeof(rec_gsrc));
    in->nnz = (int64_t *)calloc((size_t)F, sizeof(int64_t));
    if (!s && (!in->h_src || !in->nnz)) s = rec_errorf(REC_ENOMEM, "GPU input: out of memory");
    const int cpus = rec_cpu_count();
    if (!s) s = rec_pool_init(&in->pool, cpus < F + 1 ? cpus : F + 1);
    cudaError_t e = cudaSuccess;
    if (!s) e = cudaStreamCreateWithFlags(&in->sst, cudaStreamNonBlocking);
    for (int i = 0; !s && e == cudaSuccess && i < S; i++) {
        e = cudaEventCreateWithFlags(&in->staged[i], cudaEventDisableTiming);
        if (e == cudaSuccess) e = cudaEventCreateWithFlags(&in->gathered[i], cudaEventDisableTiming);
    }
    if (!s && e == cudaSuccess) e = cudaMallocHost((void **)&in->p_src, (size_t)S * F * sizeof(rec_gsrc));
    if (!s && e == cudaSuccess) e = cudaMallocHost((void **)&in->p_slot, (size_t)S * sizeof(rec_gslot));
    for (int i = 0; !s && e == cudaSuccess && i < IN_SLOTS; i++) e = cudaMallocHost((void **)&in->h_pos[i], (size_t)maxB * 4);
    if (!s && e != cudaSuccess) s = cu_fail(e, "setting up the GPU input");
    if (!s) s = rec_cuda_alloc((void **)&in->d_src, (size_t)S * F * sizeof(rec_gsrc), "the staged windows' features");
    if (!s) s = rec_cuda_alloc((void **)&in->d_slot, (size_t)S * sizeof(rec_gslot), "the staged windows");
    for (int i = 0; !s && i < IN_SLOTS; i++) s = rec_cuda_alloc((void **)&in->d_pos[i], (size_t)maxB * 4, "a batch's positions");
    const int64_t E = (int64_t)F * (maxB + 1);
    if (!s) s = rec_cuda_alloc((void **)&in->d_len, (size_t)E * 4, "a batch's lengths");
    if (!s) {
        e = cub::DeviceScan::ExclusiveSum(NULL, in->cub_bytes, in->d_len, in->d_len, (int)E);
        if (e != cudaSuccess) s = cu_fail(e, "sizing the offsets' scan");
    }
    if (!s) s = rec_cuda_alloc(&in->cub_tmp, in->cub_bytes + 16, "the offsets' scan");
    if (s) {
        cu_input_free(in);
        return s;
    }
    *out = in;
    return REC_OK;
}

void cu_input_free(cu_input *in) {
    if (!in) return;
    if (in->sst) cudaStreamSynchronize(in->sst);
    for (int i = 0; i < in->S; i++) {
        if (in->gathered[i]) cudaEventSynchronize(in->gathered[i]), cudaEventDestroy(in->gathered[i]);
        if (in->staged[i]) cudaEventDestroy(in->staged[i]);
        cudaFreeHost(in->h_buf[i]), cudaFree(in->d_buf[i]);
        rec_cuda_stage_free(&in->st[i]);
    }
    for (int i = 0; i < IN_SLOTS; i++) cudaFreeHost(in->h_pos[i]), cudaFree(in->d_pos[i]);
    cudaFreeHost(in->p_src), cudaFreeHost(in->p_slot);
    cudaFree(in->d_src), cudaFree(in->d_slot), cudaFree(in->d_len), cudaFree(in->cub_tmp);
    if (in->sst) cudaStreamDestroy(in->sst);
    rec_pool_free(in->pool);
    free(in->h_src), free(in->nnz);
    free(in);
}

// ---- a window ------------------------------------------------------------------------------------

rec_status cu_input_stage(void *ctx, int s, const rec_batch *blk, int nb, const uint8_t *one, const int64_t *row0) {
    cu_input *in = (cu_input *)ctx;
    const int F = in->F;
    if (s < 0 || s >= in->S) return rec_errorf(REC_EINVAL, "GPU input: staging slot %d of %d", s, in->S);
    rec_cuda_stage *st = &in->st[s];
    if (st->n > 0) CU_TRY(cudaEventSynchronize(in->staged[s]), "waiting for a staged window's last copy");
    REC_TRY(rec_cuda_stage_plan(st, blk, nb, one));
    if (st->n > in->slot_rows)
        return rec_errorf(REC_EINVAL, "GPU input: a window of %lld rows; the slots hold %lld", (long long)st->n,
                          (long long)in->slot_rows);
    if ((size_t)st->words > in->cap[s]) {
        CU_TRY(cudaEventSynchronize(in->gathered[s]), "waiting for a staged window's last gather");
        cudaFreeHost(in->h_buf[s]), cudaFree(in->d_buf[s]);
        in->h_buf[s] = in->d_buf[s] = NULL, in->cap[s] = 0;
        const size_t cap = (size_t)st->words + (size_t)st->words / 4;
        CU_TRY(cudaMallocHost((void **)&in->h_buf[s], cap * 4), "allocating a pinned staging buffer");
        REC_TRY(rec_cuda_alloc((void **)&in->d_buf[s], cap * 4, "a staged window"));
        in->cap[s] = cap;
    }
    REC_TRY(rec_cuda_stage_fill(st, blk, nb, row0, in->g->rows, in->what, in->h_buf[s], in->pool));
    rec_gslot host;  // (the host's labels and dense values: unused)
    rec_cuda_stage_src(st, in->h_buf[s], in->h_src + (size_t)s * F, &host);
    rec_cuda_stage_src(st, in->d_buf[s], in->p_src + (size_t)s * F, &in->p_slot[s]);
    CU_TRY(cudaStreamWaitEvent(in->sst, in->gathered[s], 0), "ordering a window's copy");
    CU_TRY(cudaMemcpyAsync(in->d_buf[s], in->h_buf[s], (size_t)st->words * 4, cudaMemcpyHostToDevice, in->sst),
           "copying a window to the GPU");
    CU_TRY(cudaMemcpyAsync(in->d_src + (size_t)s * F, in->p_src + (size_t)s * F, (size_t)F * sizeof(rec_gsrc),
                           cudaMemcpyHostToDevice, in->sst), "copying a window's layout");
    CU_TRY(cudaMemcpyAsync(in->d_slot + s, in->p_slot + s, sizeof(rec_gslot), cudaMemcpyHostToDevice, in->sst),
           "copying a window's layout");
    CU_TRY(cudaEventRecord(in->staged[s], in->sst), "recording a window's copy");
    return REC_OK;
}

// ---- a batch -------------------------------------------------------------------------------------

rec_status cu_input_gather(cu_input *in, rec_cuda_batch *d, const uint32_t *pos, int B, int k, float *dense) {
    rec_cuda_embed *g = in->g;
    const int F = in->F;
    if (B < 1 || B > in->maxB) return rec_errorf(REC_EINVAL, "GPU input: a batch of %d rows; it takes 1..%d", B, in->maxB);
    uint64_t touched = 0;  // the slots this batch reads
    for (int b = 0; b < B; b++) {
        const int64_t s = rec_gather_slot(pos[b], in->slot_rows);
        if (s >= in->S || rec_gather_row(pos[b], in->slot_rows) >= in->st[s].n)
            return rec_errorf(REC_EINVAL, "GPU input: batch row %d at staged position %u, outside the staged windows", b,
                              pos[b]);
        touched |= (uint64_t)1 << s;
    }
    rec_cuda_gather_nnz(in->h_src, in->S, F, in->slot_rows, pos, B, touched, in->nnz);
    int64_t total = 0;
    for (int f = 0; f < F; f++) total += in->nnz[f];
    REC_TRY(cu_batch_reserve(g, d, B, total, 0, 0));
    memcpy(d->nnz, in->nnz, (size_t)F * sizeof(int64_t));
    memcpy(in->h_pos[k], pos, (size_t)B * 4);
    CU_TRY(cudaStreamWaitEvent(g->cp, d->used, 0), "ordering a batch's gather");
    for (int i = 0; i < in->S; i++)
        if (touched >> i & 1) CU_TRY(cudaStreamWaitEvent(g->cp, in->staged[i], 0), "waiting for a staged window");
    CU_TRY(cudaMemcpyAsync(in->d_pos[k], in->h_pos[k], (size_t)B * 4, cudaMemcpyHostToDevice, g->cp),
           "copying a batch's positions");
    const int64_t E = (int64_t)F * (B + 1);
    int32_t *off = (int32_t *)d->d_buf, *ids = off + E;
    gather_len_kernel<<<grid_for(E, g->sms), 256, 0, g->cp>>>(in->d_src, in->d_pos[k], B, F, in->slot_rows, in->d_len);
    size_t bytes = in->cub_bytes;
    CU_TRY(cub::DeviceScan::ExclusiveSum(in->cub_tmp, bytes, in->d_len, off, (int)E, g->cp), "scanning a batch's offsets");
    int lanes = 1;  // about the mean ids of an (f, b) item, at most a warp
    while (lanes < 32 && (int64_t)lanes * F * B < total) lanes <<= 1;
    gather_ids_kernel<<<grid_for((int64_t)F * B * lanes, g->sms), 256, 0, g->cp>>>(in->d_src, in->d_pos[k], B, F,
                                                                                     in->slot_rows, off, lanes, ids);
    gather_dense_kernel<<<grid_for((int64_t)B * (in->Dn + 1), g->sms), 256, 0, g->cp>>>(in->d_slot, in->d_pos[k], B, in->Dn,
                                                                                         in->slot_rows, dense);
    CU_TRY(cudaGetLastError(), "launching a batch's gather");
    for (int i = 0; i < in->S; i++)
        if (touched >> i & 1) CU_TRY(cudaEventRecord(in->gathered[i], g->cp), "recording a gather");
    CU_TRY(cudaEventRecord(d->copied, g->cp), "recording a batch's gather");
    return REC_OK;
}
