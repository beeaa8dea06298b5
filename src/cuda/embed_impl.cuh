// Internal to the GPU engine (embed.cu, tune.cu, model.cu): error checks, the engine's and a
// device batch's state, and the helpers the tuner shares with the engine.
#ifndef RECTRAIN_CUDA_EMBED_IMPL_CUH
#define RECTRAIN_CUDA_EMBED_IMPL_CUH

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

// ---- engine state ---------------------------------------------------------------------------

struct tab_arg {          // per table, in device memory: the fused kernels' arguments
    float *T;             // (R, E) rows
    float *S;             // optimizer state (ADAGRAD (R, E), ROWWISE (R)), or NULL
    int E, col, sched, pad;
};

struct rec_cuda_embed {
    int F, W, maxB, sms, max_occ, occ;
    size_t smem_per_sm;
    rec_pooling pooling;
    rec_sparse_opt_config opt;
    int64_t *rows;
    int *dims, *cols, *sched;
    size_t *tab_off, *st_off;   // floats into d_tab / d_state per table (16-byte aligned)
    float *d_tab, *d_state;
    tab_arg *h_args, *d_args;
    uint32_t *d_row_base;       // (F + 1) first global row of each table
    int key_bits;
    cudaStream_t st;
    // per-batch block map: a pinned ring of two, each reused once its copy is done
    int32_t *h_map[2], *d_map[2];
    cudaEvent_t map_done[2];
    int map_i;
    // backward scratch for up to bw_cap entries
    int64_t bw_cap;
    uint32_t *keys, *keys_sorted;
    int32_t *vals, *vals_sorted, *tag, *heads, *head_pos, *starts, *long_list, *counters;  // counters: nruns, nlong
    void *cub_tmp;
    size_t cub_bytes;
    unsigned long long *d_prof;  // (2F) per table: block cycles summed, longest block, when profiling
    cudaEvent_t ev0, ev1;
};

struct rec_cuda_batch {
    int B, F;
    int64_t total;              // ids in all
    int64_t *nnz;               // (F) host: ids per table
    size_t cap_bytes;
    void *h_buf, *d_buf;        // pinned / device: offsets (F (B+1) int32), ids (total int32), weights (total float)
    const int32_t *d_off, *d_ids;
    const float *d_w;
    int F_cap;
    cudaEvent_t copied;
    int pending;
};

// Copies the per-table arguments (with the current schedules) to the device; waits.
rec_status cu_upload_args(rec_cuda_embed *g);
// One fused forward of batch d into out under the current plan; prof: time each block into
// its table's sums (d_prof).
rec_status cu_launch_forward(rec_cuda_embed *g, const rec_cuda_batch *d, float *out, int prof);
int cu_cmp_double(const void *a, const void *b);

#endif
