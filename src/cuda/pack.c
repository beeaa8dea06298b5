/* Packing a batch's ids for the GPU (cuda_impl.h): the host half of rec_cuda_batch_load, in C so
 * that it is tested on any machine (tests/test_cuda_host.c). Features in parallel on the
 * engine's pool: at batch 16384 the Kaggle DLRM's 426k ids a step took 18-29% of the GPU's
 * step time packed on one thread (docs/gpu.md). A pool's workers sleep between jobs, where
 * OpenMP's spin: beside the loader's threads, spinning halved the loader's rate. */
#include <stdlib.h>

#include "cuda_impl.h"
#include "rectrain/core.h"

typedef struct pack_job {
    const rec_batch *b;
    int first;
    const int64_t *rows, *at, *nnz;
    int32_t *off, *ids;
    float *w;
    int64_t *bad;  /* (F) the first id outside its table, -1 none */
} pack_job;

static rec_status pack_feature(void *ctx, int64_t f, int thread) {
    const pack_job *j = ctx;
    const int B = (int)j->b->n;
    const rec_jagged *jg = &j->b->sparse[j->first + f];
    const int64_t R = j->rows[f], o0 = jg->offsets[0], n = j->nnz[f], a = j->at[f];
    int32_t *off = j->off + (size_t)f * (B + 1), *ids = j->ids;
    for (int r = 0; r <= B; r++) off[r] = (int32_t)(a + jg->offsets[r] - o0);
    int64_t k = 0;
    if (jg->wide)
        for (; k < n && (uint64_t)jg->ids64[o0 + k] < (uint64_t)R; k++) ids[a + k] = (int32_t)jg->ids64[o0 + k];
    else
        for (; k < n && (uint32_t)jg->ids32[o0 + k] < (uint64_t)R; k++) ids[a + k] = jg->ids32[o0 + k];
    j->bad[f] = k < n ? k : -1;
    if (j->w)
        for (int64_t i = 0; i < n; i++) j->w[a + i] = jg->weights ? jg->weights[o0 + i] : 1.0f;
    return REC_OK;
}

int64_t rec_cuda_batch_ids(const rec_batch *b, int first, int F, int *weighted) {
    int64_t total = 0;
    *weighted = 0;
    for (int f = 0; f < F; f++) {
        total += rec_batch_nnz(b, first + f);
        *weighted |= b->sparse[first + f].weights != NULL;
    }
    return total;
}

rec_status rec_cuda_pack(const rec_batch *b, int first, int F, const int64_t *rows, int32_t *off, int32_t *ids, float *w,
                         int64_t *nnz, rec_pool *pool) {
    const int B = (int)b->n;
    int64_t *at = malloc(((size_t)F + 1) * sizeof *at), *bad = malloc(((size_t)F + 1) * sizeof *bad);
    if (!at || !bad) {
        free(at), free(bad);
        return rec_errorf(REC_ENOMEM, "GPU batch: out of memory packing the ids");
    }
    at[0] = 0;
    for (int f = 0; f < F; f++) {
        const rec_jagged *j = &b->sparse[first + f];
        nnz[f] = j->offsets[B] - j->offsets[0];
        at[f + 1] = at[f] + nnz[f];
    }
    pack_job job = {b, first, rows, at, nnz, off, ids, w, bad};
    if (pool && F > 1) rec_pool_run(pool, F, pack_feature, &job);  /* its tasks cannot fail */
    else
        for (int f = 0; f < F; f++) pack_feature(&job, f, 0);
    int f = 0; /* the first feature (in order) holding an id outside its table */
    while (f < F && bad[f] < 0) f++;
    const int64_t bad_k = f < F ? bad[f] : 0;
    free(at), free(bad);
    if (f < F) {
        const rec_jagged *j = &b->sparse[first + f];
        const int64_t k = j->offsets[0] + bad_k;
        int r = 0;
        while (r < B && j->offsets[r + 1] <= k) r++;
        return rec_errorf(REC_EINVAL, "GPU batch: feature %d, batch row %d: id %lld is outside the table's %lld rows",
                          first + f, r, (long long)rec_jagged_id(j, k), (long long)rows[f]);
    }
    return REC_OK;
}
