/* rectrain — Batch, the one currency between pipeline stages (DESIGN.md "Data flow").
 *
 * Shape letters used across rectrain headers:
 *   B  batch rows            Dn dense features (sum of dense widths)
 *   F  sparse features       E  embedding dim
 *   R  table rows            L  pooling length (ids in one bag)
 *   H  hidden width          N  rows in a file or shard
 */
#ifndef RECTRAIN_BATCH_H
#define RECTRAIN_BATCH_H

#include <stdint.h>

#include "rectrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One sparse feature of a batch in CSR form: the ids of row b are
 * indices[offsets[b] .. offsets[b+1]). */
typedef struct rec_jagged {
    int64_t *offsets;  /* (B+1), offsets[0] == 0, non-decreasing */
    int64_t *indices;  /* (nnz) ids, each in [0, R) of the feature's table */
    float *weights;    /* (nnz) per-id weights, or NULL for unweighted bags */
    int64_t nnz_cap;   /* allocated length of indices (and weights) */
} rec_jagged;

typedef struct rec_batch {
    int64_t n;          /* rows held, 0 <= n <= cap */
    int64_t cap;        /* B: rows allocated */
    int32_t n_dense;    /* Dn */
    int32_t n_sparse;   /* F */
    float *label;       /* (B) 0 or 1; 0 for label-less (test) data */
    float *dense;       /* (B, Dn) row-major */
    rec_jagged *sparse; /* (F) */
} rec_batch;

/* Allocates a batch of `cap` rows with Dn dense values per row and F sparse features, each
 * with room for `nnz_per_row` ids per row to start with (ids beyond that grow the feature's
 * arrays once; a steady-state loop therefore stops allocating after its largest batch). */
rec_status rec_batch_init(rec_batch *b, int64_t cap, int32_t n_dense, int32_t n_sparse,
                          int64_t nnz_per_row);
void rec_batch_free(rec_batch *b);

/* Ensures sparse feature f can hold `nnz` ids, keeping its contents. */
rec_status rec_batch_reserve_nnz(rec_batch *b, int32_t f, int64_t nnz, int with_weights);

/* Total ids of feature f in the batch. */
static inline int64_t rec_batch_nnz(const rec_batch *b, int32_t f) {
    return b->sparse[f].offsets[b->n];
}

#ifdef __cplusplus
}
#endif
#endif
