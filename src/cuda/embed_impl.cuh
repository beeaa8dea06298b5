// Internal to the GPU engine (embed.cu, tune.cu, model.cu): error checks, the engine's and a
// device batch's state, and the helpers the tuner shares with the engine.
#ifndef RECTRAIN_CUDA_EMBED_IMPL_CUH
#define RECTRAIN_CUDA_EMBED_IMPL_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda_impl.h"
#include "rectrain/core.h"
#include "rectrain/cuda.h"

// ---- errors ---------------------------------------------------------------------------------

static inline rec_status cu_fail(cudaError_t e, const char *what) {
    return rec_errorf(e == cudaErrorMemoryAllocation ? REC_ENOMEM : REC_EUNSUPPORTED, "GPU: %s: %s (%s)", what,
                      cudaGetErrorString(e), cudaGetErrorName(e));
}
#define CU_TRY(call, what)                           \
    do {                                             \
        const cudaError_t cu_e_ = (call);            \
        if (cu_e_ != cudaSuccess) return cu_fail(cu_e_, what); \
    } while (0)

// ---- bf16 values: 4 at a time (8 bytes, aligned) or one -----------------------------------------

__device__ __forceinline__ void store_bf16(__nv_bfloat16 *d, const float4 &v) {
    reinterpret_cast<__nv_bfloat162 *>(d)[0] = __floats2bfloat162_rn(v.x, v.y);
    reinterpret_cast<__nv_bfloat162 *>(d)[1] = __floats2bfloat162_rn(v.z, v.w);
}
__device__ __forceinline__ void store_bf16(__nv_bfloat16 *d, float v) { *d = __float2bfloat16_rn(v); }
__device__ __forceinline__ void load_bf16(const __nv_bfloat16 *s, float4 &v) {
    const float2 a = __bfloat1622float2(reinterpret_cast<const __nv_bfloat162 *>(s)[0]);
    const float2 b = __bfloat1622float2(reinterpret_cast<const __nv_bfloat162 *>(s)[1]);
    v = make_float4(a.x, a.y, b.x, b.y);
}
__device__ __forceinline__ void load_bf16(const __nv_bfloat16 *s, float &v) { v = __bfloat162float(*s); }

// ---- engine state ---------------------------------------------------------------------------

struct tab_arg {          // per table, in device memory: the fused kernels' arguments
    void *T;              // (R, E) rows: fp32, or bf16 bits where b16
    float *S;             // optimizer state (ADAGRAD (R, E), ROWWISE (R)), or NULL
    int E, col, sched, b16;
};

struct rec_cuda_embed {
    int F, W, maxB, sms, max_occ, occ;
    size_t smem_per_sm;
    rec_pooling pooling;
    rec_sparse_opt_config opt;
    int64_t *rows;
    int *dims, *cols, *sched;
    size_t *tab_off, *st_off;   // floats into d_tab / d_state per table (16-byte aligned)
    int b16;                    // the tables are bf16 (rec_embed_is_bf16 of the engine copied)
    int sr;                     // bf16: updates rounded stochastically (rec_bf16_sr_start's bits)
    uint64_t seed;              // the stochastic rounding's key: the CPU engine's init seed
    int64_t updates;            // backward calls so far, as the CPU engine counts them
    float *d_tab, *d_state;
    tab_arg *h_args, *d_args;
    uint32_t *d_row_base;       // (F + 1) first global row of each table
    int key_bits;
    cudaStream_t st, cp;        // the kernels; the batches' host-to-device copies
    rec_pool *pool;             // the host's threads packing a batch (rec_cuda_pack)
    // per-batch block map: a pinned ring of two, each reused once its copy is done
    int32_t *h_map[2], *d_map[2];
    cudaEvent_t map_done[2];
    int map_i;
    // backward scratch for up to bw_cap entries
    int64_t bw_cap;
    uint32_t *keys, *keys_sorted;
    int32_t *vals, *vals_sorted, *tag, *heads, *head_pos, *starts, *long_list, *counters;  // counters: nruns, nlong, nchunks
    int32_t *chunk_first;       // (long runs + 1) each long run's first piece
    double *partial;            // (pieces, pw) the long runs' partial sums
    int pw;                     // doubles a partial sum: the widest table, rounded up to 4
    void *cub_tmp;
    size_t cub_bytes;
    unsigned long long *d_prof;  // (2F) per table: block cycles summed, longest block, when profiling
    cudaEvent_t ev0, ev1;
};

struct rec_cuda_batch {
    int B, F;
    int64_t total;              // ids in all
    int64_t *nnz;               // (F) host: ids per table
    size_t cap_bytes, h_cap;    // of d_buf, of h_buf (0: none yet)
    void *h_buf, *d_buf;        // pinned / device: offsets (F (B+1) int32), ids (total int32), weights (total float)
    const int32_t *d_off, *d_ids;
    const float *d_w;
    int F_cap;
    cudaEvent_t copied;         // on the engine's copy stream: the batch is on the device
    cudaEvent_t used;           // on its kernel stream: the last kernel reading it is done
    int pending;
};

// Lays the pooled output (and the gradient the backward reads) out in rows of ld floats a
// sample, the tables' columns from col0 on (a default of ld = the dims' sum, col0 = 0): the GPU
// model pools straight into its interaction's input [x, e_1, ..., e_F]. Resets the schedules
// to the defaults for the new columns; waits.
rec_status cu_embed_layout(rec_cuda_embed *g, int ld, int col0);
// Copies the per-table arguments (with the current schedules) to the device; waits.
rec_status cu_upload_args(rec_cuda_embed *g);
// One fused forward of batch d into out under the current plan; prof: time each block into
// its table's sums (d_prof).
rec_status cu_launch_forward(rec_cuda_embed *g, const rec_cuda_batch *d, float *out, int prof);
// The same in bf16: the forward pools into out16 (rounded to nearest), the backward reads its
// output gradient from dout16 (the GPU model's bf16 interaction input and gradient).
rec_status cu_embed_forward16(rec_cuda_embed *g, const rec_cuda_batch *d, __nv_bfloat16 *out16);
rec_status cu_embed_backward16(rec_cuda_embed *g, const rec_cuda_batch *d, const __nv_bfloat16 *dout16, float lr);
int cu_cmp_double(const void *a, const void *b);
// Sizes batch d for B rows and `total` ids (weights too where weighted), growing its device
// buffer and, with `host`, its pinned one (after the last copy from and use of them), and points
// its device parts into its buffer.
rec_status cu_batch_reserve(rec_cuda_embed *g, rec_cuda_batch *d, int B, int64_t total, int weighted, int host);

// ---- staged input (input.cu): a batch gathered on the GPU from staged windows -------------------
struct cu_input;
// The staging of a model's input: n_slots windows of up to slot_rows rows, Dn dense values a row,
// gathered into batches of up to maxB rows on the engine's copy stream; `what` names the data in
// messages (an id outside its table).
rec_status cu_input_new(cu_input **out, rec_cuda_embed *g, int Dn, int n_slots, int64_t slot_rows, int maxB,
                        const char *what);
void cu_input_free(cu_input *in);
// rec_stager's stage (train.h): the window into slot `slot`, on the loader's thread.
rec_status cu_input_stage(void *in, int slot, const rec_batch *blk, int nb, const uint8_t *one, const int64_t *row0);
// Batch d from the staged positions pos[0..B): its ids and offsets, and its dense values then
// labels into dense (B (Dn + 1) floats), on the copy stream once the slots' windows are there
// and d's last use is done; records d->copied. k: the caller's input slot (two in turn), whose
// pinned positions buffer is reused once its last copy is done (the caller waits for that).
rec_status cu_input_gather(cu_input *in, rec_cuda_batch *d, const uint32_t *pos, int B, int k, float *dense);

#endif
