/* Packing a batch's ids for the GPU (cuda_impl.h): the host half of rec_cuda_batch_load, in C so
 * that it is tested on any machine (tests/test_cuda_host.c). Features in parallel (OpenMP): at
 * batch 16384 the Kaggle DLRM's 426k ids a step took 18-29% of the GPU's step time packed on
 * one thread (docs/gpu.md). */
#include <omp.h>
#include <stdlib.h>

#include "cuda_impl.h"
#include "rectrain/core.h"

rec_status rec_cuda_pack(const rec_batch *b, int first, int F, const int64_t *rows, int32_t *off, int32_t *ids, float *w,
                         int64_t *nnz) {
    const int B = (int)b->n;
    int64_t *at = malloc(((size_t)F + 1) * sizeof *at);
    if (!at) return rec_errorf(REC_ENOMEM, "GPU batch: out of memory packing the ids");
    at[0] = 0;
    for (int f = 0; f < F; f++) {
        const rec_jagged *j = &b->sparse[first + f];
        nnz[f] = j->offsets[B] - j->offsets[0];
        at[f + 1] = at[f] + nnz[f];
    }
    int bad = F; /* the first feature holding an id outside its table */
    int64_t bad_k = 0;
    const int nt = F < omp_get_max_threads() ? F : omp_get_max_threads();
#pragma omp parallel for num_threads(nt > 0 ? nt : 1) schedule(dynamic, 1)
    for (int f = 0; f < F; f++) {
        const rec_jagged *j = &b->sparse[first + f];
        const int64_t R = rows[f], o0 = j->offsets[0], n = nnz[f], a = at[f];
        for (int r = 0; r <= B; r++) off[(size_t)f * (B + 1) + r] = (int32_t)(a + j->offsets[r] - o0);
        int64_t k = 0;
        if (j->wide)
            for (; k < n && (uint64_t)j->ids64[o0 + k] < (uint64_t)R; k++) ids[a + k] = (int32_t)j->ids64[o0 + k];
        else
            for (; k < n && (uint32_t)j->ids32[o0 + k] < (uint64_t)R; k++) ids[a + k] = j->ids32[o0 + k];
        if (k < n) {
#pragma omp critical(rec_cuda_pack_bad)
            if (f < bad) bad = f, bad_k = k;
        }
        if (w)
            for (int64_t i = 0; i < n; i++) w[a + i] = j->weights ? j->weights[o0 + i] : 1.0f;
    }
    free(at);
    if (bad < F) {
        const rec_jagged *j = &b->sparse[first + bad];
        const int64_t k = j->offsets[0] + bad_k;
        int r = 0;
        while (r < B && j->offsets[r + 1] <= k) r++;
        return rec_errorf(REC_EINVAL, "GPU batch: feature %d, batch row %d: id %lld is outside the table's %lld rows",
                          first + bad, r, (long long)rec_jagged_id(j, k), (long long)rows[bad]);
    }
    return REC_OK;
}
