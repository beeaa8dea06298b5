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
 * ids[offsets[b] .. offsets[b+1]), 32-bit or 64-bit as `wide` says. A feature whose table has
 * at most 2^31 rows holds its ids as int32_t (rec_ids_wide), which halves the id stream every
 * consumer reads (the embedding forward reads 10.4M ids per batch of RecFlex's model A, and
 * runs 5-8% faster on A, C and E with them narrow: docs/embedding.md); a
 * feature starts wide (rec_batch_init) and its producer narrows it (rec_batch_set_wide),
 * as a shard stores it. Hot loops specialise on the width; others read through rec_jagged_id. */
typedef struct rec_jagged {
    int64_t *offsets;      /* (B+1), offsets[0] == 0, non-decreasing */
    union {                /* (nnz) ids, each in [0, R) of the feature's table */
        int64_t *ids64;    /* wide */
        int32_t *ids32;    /* narrow */
        void *ids;
    };
    float *weights;        /* (nnz) per-id weights, or NULL for unweighted bags */
    int64_t nnz_cap;       /* allocated length of ids (and weights), in ids */
    int wide;              /* 1: ids64, 0: ids32 */
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

/* The first row of b's n rows (in row order) whose label is not 0 or 1 or that holds a dense
 * value that is not finite (NaN, +-inf): its index, with *col its dense column, or -1 for
 * the label; -1 when every row is fine. A model cannot train on such a row: a NaN input
 * turns the weights it meets into NaN, which ReLU then hides from the loss. */
int64_t rec_batch_first_bad_value(const rec_batch *b, int32_t *col);
/* What the messages about such a dense value say of its usual cause and the fix. */
#define REC_NONFINITE_FIX                                                                    \
    "(log1p of a value below -1 gives nan, of -1 -inf): clamp at 0 before log1p, as "        \
    "configs/criteo_standard.json does"

/* A 64-bit digest of b's n rows: labels, dense values (as bits), every feature's offsets,
 * ids (as values, whatever their width) and weights. Equal rows give equal digests; a
 * checkpoint keeps the digest of its training data's first rows, so that --resume can tell
 * when it is handed other data. */
uint64_t rec_batch_digest(const rec_batch *b);

/* The sum over b's rows of a 64-bit hash of each row (label, dense values as bits, every
 * feature's ids and weights): an order-independent checksum of a set of rows. */
uint64_t rec_batch_row_hash_sum(const rec_batch *b);

/* Does a table of `rows` rows need 64-bit ids (an id of 2^31 or more)? The one rule for
 * batches and shards alike. */
static inline int rec_ids_wide(int64_t rows) { return rows > ((int64_t)1 << 31); }

/* Id k of feature j, whatever its width. */
static inline int64_t rec_jagged_id(const rec_jagged *j, int64_t k) { return j->wide ? j->ids64[k] : j->ids32[k]; }

/* Copies ids [k0, k0 + n) of j into dst as int64_t, whatever j's width. */
void rec_jagged_copy_ids64(const rec_jagged *j, int64_t k0, int64_t n, int64_t *dst);

/* Bytes of one id of j: 4 or 8. */
static inline int rec_jagged_id_bytes(const rec_jagged *j) { return j->wide ? 8 : 4; }

/* Sets feature f's id width, converting the ids it holds (offsets[n] of them). Narrowing
 * fails, naming the feature and position and leaving the feature as it was, when an id held
 * does not fit in int32_t. */
rec_status rec_batch_set_wide(rec_batch *b, int32_t f, int wide);

/* Sets every feature's width from its table's rows[f] as rec_ids_wide says: 32-bit where the
 * table allows, 64-bit otherwise (converting what each holds, as rec_batch_set_wide). */
rec_status rec_batch_fit_ids(rec_batch *b, const int64_t *rows);

/* Ensures sparse feature f can hold `nnz` ids, keeping its contents. */
rec_status rec_batch_reserve_nnz(rec_batch *b, int32_t f, int64_t nnz, int with_weights);

/* Appends rows [r, r+k) of `src` to `dst` (rows dst->n .. dst->n+k): labels, dense values and
 * every sparse feature's ids at src's width with rebased offsets (weights copied where src
 * has them, 1.0 where only dst has them). dst must have src's Dn and F and room for k more
 * rows; its id arrays grow if needed (rarely: only when a batch holds more ids than any
 * before). Fails only on allocation, leaving dst->n unchanged. */
rec_status rec_batch_append_rows(rec_batch *dst, const rec_batch *src, int64_t r, int64_t k);

/* Total ids of feature f in the batch. */
static inline int64_t rec_batch_nnz(const rec_batch *b, int32_t f) {
    return b->sparse[f].offsets[b->n];
}

#ifdef __cplusplus
}
#endif
#endif
