/* Batch allocation. */
#include "rectrain/batch.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "rectrain/core.h"

rec_status rec_batch_init(rec_batch *b, int64_t cap, int32_t n_dense, int32_t n_sparse,
                          int64_t nnz_per_row) {
    memset(b, 0, sizeof *b);
    if (cap <= 0 || n_dense < 0 || n_sparse < 0 || nnz_per_row < 0)
        return rec_errorf(REC_EINVAL, "batch: bad shape (rows %lld, dense %d, sparse %d)",
                          (long long)cap, n_dense, n_sparse);
    b->cap = cap;
    b->n_dense = n_dense;
    b->n_sparse = n_sparse;
    rec_status s = rec_alloc((void **)&b->label, (size_t)cap * sizeof(float), "batch labels");
    if (!s) s = rec_alloc((void **)&b->dense, (size_t)(cap * n_dense + 1) * sizeof(float), "batch dense");
    if (!s) s = rec_alloc((void **)&b->sparse, (size_t)(n_sparse + 1) * sizeof(rec_jagged), "batch sparse");
    for (int32_t f = 0; !s && f < n_sparse; f++) {
        rec_jagged *j = &b->sparse[f];
        j->nnz_cap = cap * (nnz_per_row > 0 ? nnz_per_row : 1);
        s = rec_alloc((void **)&j->offsets, (size_t)(cap + 1) * sizeof(int64_t), "batch offsets");
        j->wide = 1;
        if (!s) s = rec_alloc(&j->ids, (size_t)j->nnz_cap * sizeof(int64_t), "batch ids");
    }
    if (s) rec_batch_free(b);
    return s;
}

int64_t rec_batch_first_bad_value(const rec_batch *b, int32_t *col) {
    const size_t n = (size_t)b->n, dn = (size_t)b->n_dense;
    int bad = 0; /* one branch-free pass; the search only when it found something */
    for (size_t r = 0; r < n; r++) bad |= b->label[r] != 0.0f && b->label[r] != 1.0f;
    for (size_t i = 0; i < n * dn; i++) bad |= !isfinite(b->dense[i]);
    for (size_t r = 0; bad && r < n; r++) {
        *col = -1;
        if (b->label[r] != 0.0f && b->label[r] != 1.0f) return (int64_t)r;
        for (size_t c = 0; c < dn; c++)
            if (!isfinite(b->dense[r * dn + c])) return *col = (int32_t)c, (int64_t)r;
    }
    return -1;
}

uint64_t rec_batch_digest(const rec_batch *b) {
    const size_t n = (size_t)b->n;
    uint64_t h = rec_mix64(0x626174636844ULL ^ (uint64_t)n);
    h = rec_mix64(h ^ rec_crc32(0, b->label, n * sizeof(float)));
    h = rec_mix64(h ^ (uint64_t)b->n_dense << 32 ^ rec_crc32(0, b->dense, n * (size_t)b->n_dense * sizeof(float)));
    for (int32_t f = 0; f < b->n_sparse; f++) {
        const rec_jagged *j = &b->sparse[f];
        const int64_t nnz = j->offsets[n];
        h = rec_mix64(h ^ (uint64_t)f << 32 ^ rec_crc32(0, j->offsets, (n + 1) * sizeof(int64_t)));
        for (int64_t k = 0; k < nnz; k++) h = rec_mix64(h ^ (uint64_t)rec_jagged_id(j, k));
        if (j->weights) h = rec_mix64(h ^ rec_crc32(0, j->weights, (size_t)nnz * sizeof(float)));
    }
    return h;
}

void rec_batch_free(rec_batch *b) {
    if (b->sparse) {
        for (int32_t f = 0; f < b->n_sparse; f++) {
            rec_free(b->sparse[f].offsets);
            rec_free(b->sparse[f].ids);
            rec_free(b->sparse[f].weights);
        }
    }
    rec_free(b->sparse);
    rec_free(b->label);
    rec_free(b->dense);
    memset(b, 0, sizeof *b);
}

rec_status rec_batch_reserve_nnz(rec_batch *b, int32_t f, int64_t nnz, int with_weights) {
    rec_jagged *j = &b->sparse[f];
    if (nnz > j->nnz_cap) {
        const int64_t cap = j->nnz_cap * 2 > nnz ? j->nnz_cap * 2 : nnz;
        const size_t w = (size_t)rec_jagged_id_bytes(j);
        REC_TRY(rec_realloc(&j->ids, (size_t)j->nnz_cap * w, (size_t)cap * w, "batch ids"));
        if (j->weights)
            REC_TRY(rec_realloc((void **)&j->weights, (size_t)j->nnz_cap * sizeof(float),
                                (size_t)cap * sizeof(float), "batch weights"));
        j->nnz_cap = cap;
    }
    if (with_weights && !j->weights)
        REC_TRY(rec_alloc((void **)&j->weights, (size_t)j->nnz_cap * sizeof(float), "batch weights"));
    return REC_OK;
}

void rec_jagged_copy_ids64(const rec_jagged *j, int64_t k0, int64_t n, int64_t *dst) {
    if (j->wide) memcpy(dst, j->ids64 + k0, (size_t)n * sizeof(int64_t));
    else
        for (int64_t k = 0; k < n; k++) dst[k] = j->ids32[k0 + k];
}

rec_status rec_batch_set_wide(rec_batch *b, int32_t f, int wide) {
    rec_jagged *j = &b->sparse[f];
    wide = !!wide;
    if (j->wide == wide) return REC_OK;
    const int64_t n = j->offsets[b->n];
    if (n < 0 || n > j->nnz_cap)
        return rec_errorf(REC_EINVAL, "batch: sparse feature %d holds offsets[%lld] = %lld ids, outside its %lld slots",
                          f, (long long)b->n, (long long)n, (long long)j->nnz_cap);
    if (!wide)
        for (int64_t k = 0; k < n; k++)
            if (j->ids64[k] < INT32_MIN || j->ids64[k] > INT32_MAX)
                return rec_errorf(REC_EINVAL,
                                  "batch: sparse feature %d, id %lld at position %lld does not fit in 32 bits; "
                                  "keep the feature's ids wide (its table needs more than 2^31 rows)",
                                  f, (long long)j->ids64[k], (long long)k);
    void *ids;
    REC_TRY(rec_alloc(&ids, (size_t)j->nnz_cap * (wide ? 8 : 4), "batch ids"));
    if (wide) rec_jagged_copy_ids64(j, 0, n, ids);
    else
        for (int64_t k = 0; k < n; k++) ((int32_t *)ids)[k] = (int32_t)j->ids64[k];
    rec_free(j->ids);
    j->ids = ids;
    j->wide = wide;
    return REC_OK;
}

rec_status rec_batch_fit_ids(rec_batch *b, const int64_t *rows) {
    for (int32_t f = 0; f < b->n_sparse; f++) REC_TRY(rec_batch_set_wide(b, f, rec_ids_wide(rows[f])));
    return REC_OK;
}

/* See batch.h. Ids are copied at src's width (dst converted to it), offsets rebased. */
rec_status rec_batch_append_rows(rec_batch *dst, const rec_batch *src, int64_t r, int64_t k) {
    int64_t at = dst->n;
    int32_t dn = src->n_dense;
    memcpy(dst->label + at, src->label + r, (size_t)k * sizeof(float));
    memcpy(dst->dense + at * dn, src->dense + r * dn, (size_t)(k * dn) * sizeof(float));
    for (int32_t f = 0; f < src->n_sparse; f++) {
        const rec_jagged *sj = &src->sparse[f];
        rec_jagged *dj = &dst->sparse[f];
        int64_t first = sj->offsets[r], add = sj->offsets[r + k] - first;
        int64_t have = dj->offsets[at], base = have - first;
        REC_TRY(rec_batch_set_wide(dst, f, sj->wide));
        REC_TRY(rec_batch_reserve_nnz(dst, f, have + add, sj->weights != NULL));
        for (int64_t i = 1; i <= k; i++) dj->offsets[at + i] = sj->offsets[r + i] + base;
        const size_t w = (size_t)rec_jagged_id_bytes(sj);
        memcpy((char *)dj->ids + (size_t)have * w, (const char *)sj->ids + (size_t)first * w, (size_t)add * w);
        if (sj->weights) memcpy(dj->weights + have, sj->weights + first, (size_t)add * sizeof(float));
        else if (dj->weights)
            for (int64_t i = have; i < have + add; i++) dj->weights[i] = 1.0f;
    }
    dst->n = at + k;
    return REC_OK;
}

static uint64_t mix(uint64_t h, uint64_t x) {
    h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    return h * 0xff51afd7ed558ccdull;
}

uint64_t rec_batch_row_hash_sum(const rec_batch *b) {
    uint64_t sum = 0;
    for (int64_t r = 0; r < b->n; r++) {
        uint32_t u;
        memcpy(&u, &b->label[r], 4);
        uint64_t h = mix(0x243f6a8885a308d3ull, u);
        for (int32_t c = 0; c < b->n_dense; c++) {
            memcpy(&u, &b->dense[r * b->n_dense + c], 4);
            h = mix(h, u);
        }
        for (int32_t f = 0; f < b->n_sparse; f++) {
            const rec_jagged *j = &b->sparse[f];
            h = mix(h, (uint64_t)(j->offsets[r + 1] - j->offsets[r]));
            for (int64_t k = j->offsets[r]; k < j->offsets[r + 1]; k++) {
                h = mix(h, (uint64_t)rec_jagged_id(j, k));
                if (j->weights) memcpy(&u, &j->weights[k], 4), h = mix(h, u);
            }
        }
        sum += h;
    }
    return sum;
}
