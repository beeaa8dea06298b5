/* rectrain — descriptive statistics of sparse features, as `rectrain inspect` reports them:
 * how many distinct ids a feature touches, how skewed its accesses are, and how long its bags
 * are (the pooling factor L).
 *
 * Skew is the share of all accesses taken by the k most accessed ids, with k = 0.1% of the
 * table's rows (at least 1) — the measure behind Bagpipe's "about 0.1% of rows draw ~90% of
 * accesses" (../shared/papers/003-Bagpipe-digest.md) that the generator reproduces.
 */
#ifndef RECTRAIN_STATS_H
#define RECTRAIN_STATS_H

#include <stdint.h>

#include "rectrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- id access counts ---------------------------------------------------------------------
 * Counts accesses per id. With dense_rows R in 1..2^24 the ids must lie in [0, R) and are
 * counted in an array of R; otherwise (dense_rows <= 0, or larger tables) any 64-bit id is
 * counted in a hash table that grows with the distinct ids. */
typedef struct rec_id_counter rec_id_counter;

rec_status rec_id_counter_init(rec_id_counter **out, int64_t dense_rows);
void rec_id_counter_free(rec_id_counter *c);
/* Counts one access of each of ids[0..n). REC_EINVAL for an id outside [0, R) in array mode;
 * REC_ENOMEM when the hash table cannot grow. */
rec_status rec_id_counter_add(rec_id_counter *c, const int64_t *ids, int64_t n);
int64_t rec_id_counter_distinct(const rec_id_counter *c);  /* ids seen at least once */
int64_t rec_id_counter_total(const rec_id_counter *c);     /* accesses counted */
/* Share in [0, 1] of all accesses taken by the k most accessed ids (0 when nothing was
 * counted; all of them when k >= distinct). Linear time (quickselect on a copy of the counts). */
rec_status rec_id_counter_top_share(const rec_id_counter *c, int64_t k, double *share);
/* k for the top-0.1% skew of a table of `rows` rows: floor(rows / 1000), at least 1. */
int64_t rec_skew_top_k(int64_t rows);

/* ---- bag lengths (pooling factors) ----------------------------------------------------------
 * An exact histogram of non-negative lengths. Quantiles use the nearest-rank definition: the
 * q-quantile is the smallest length v with at least ceil(q * n) of the n lengths <= v
 * (the minimum for q = 0). Zero-initialise with {0}; free with rec_len_hist_free. */
typedef struct rec_len_hist {
    int64_t *count;   /* (cap) count[len] */
    int64_t cap;
    int64_t n;        /* lengths added */
    int64_t sum;
    int64_t min, max; /* valid when n > 0 */
} rec_len_hist;

typedef struct rec_len_summary {
    int64_t n;
    int64_t min, p50, p99, max;
    double mean;
} rec_len_summary;

/* Adds `times` lengths equal to `len` (len >= 0). */
rec_status rec_len_hist_add(rec_len_hist *h, int64_t len, int64_t times);
/* Adds the bag lengths of a CSR offsets array: offsets[r+1] - offsets[r] for r in [0, n). */
rec_status rec_len_hist_add_offsets(rec_len_hist *h, const int64_t *offsets, int64_t n);
int64_t rec_len_hist_quantile(const rec_len_hist *h, double q);
/* min/mean/p50/p99/max; all zero when empty. */
rec_len_summary rec_len_hist_summary(const rec_len_hist *h);
void rec_len_hist_free(rec_len_hist *h);

#ifdef __cplusplus
}
#endif
#endif
