/* Descriptive statistics of sparse features: per-id access counts (distinct ids, top-k share)
 * and exact bag-length histograms. See include/rectrain/stats.h for the definitions. */
#include "rectrain/stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rectrain/core.h"

enum { STATS_DENSE_MAX = 1 << 24 };

/* Array mode: counts[id] for id in [0, dense_rows). Hash mode: open addressing with linear
 * probing over keys/counts, a slot is free while its count is 0, at most half full. */
struct rec_id_counter {
    int64_t dense_rows;   /* > 0: array mode */
    int64_t *counts;      /* (cap) */
    int64_t *keys;        /* (cap) hash mode only */
    int64_t cap;
    int64_t distinct;
    int64_t total;
};

rec_status rec_id_counter_init(rec_id_counter **out, int64_t dense_rows) {
    *out = NULL;
    rec_id_counter *c = calloc(1, sizeof *c);
    if (!c) return rec_errorf(REC_ENOMEM, "out of memory allocating an id counter");
    rec_status s;
    if (dense_rows > 0 && dense_rows <= STATS_DENSE_MAX) {
        c->dense_rows = dense_rows;
        c->cap = dense_rows;
        s = rec_alloc((void **)&c->counts, 8 * (size_t)dense_rows, "id counts");
    } else {
        c->cap = 1024;
        s = rec_alloc((void **)&c->counts, 8 * (size_t)c->cap, "id counts");
        if (!s) s = rec_alloc((void **)&c->keys, 8 * (size_t)c->cap, "id counter keys");
    }
    if (s) {
        rec_id_counter_free(c);
        return s;
    }
    *out = c;
    return REC_OK;
}

void rec_id_counter_free(rec_id_counter *c) {
    if (!c) return;
    rec_free(c->counts);
    rec_free(c->keys);
    free(c);
}

static inline int64_t slot_of(const int64_t *keys, const int64_t *counts, int64_t cap, int64_t id) {
    int64_t i = (int64_t)(rec_mix64((uint64_t)id) & (uint64_t)(cap - 1));
    while (counts[i] && keys[i] != id) i = (i + 1) & (cap - 1);
    return i;
}

static rec_status grow(rec_id_counter *c) {
    int64_t cap = 2 * c->cap, *keys, *counts;
    REC_TRY(rec_alloc((void **)&keys, 8 * (size_t)cap, "id counter keys"));
    rec_status s = rec_alloc((void **)&counts, 8 * (size_t)cap, "id counts");
    if (s) {
        rec_free(keys);
        return s;
    }
    for (int64_t i = 0; i < c->cap; i++) {
        if (!c->counts[i]) continue;
        int64_t j = slot_of(keys, counts, cap, c->keys[i]);
        keys[j] = c->keys[i];
        counts[j] = c->counts[i];
    }
    rec_free(c->keys);
    rec_free(c->counts);
    c->keys = keys;
    c->counts = counts;
    c->cap = cap;
    return REC_OK;
}

rec_status rec_id_counter_add(rec_id_counter *c, const int64_t *ids, int64_t n) {
    if (c->dense_rows) {
        for (int64_t k = 0; k < n; k++) {
            int64_t id = ids[k];
            if ((uint64_t)id >= (uint64_t)c->dense_rows)
                return rec_errorf(REC_EINVAL, "id %lld is outside the counted table's [0, %lld) rows",
                                  (long long)id, (long long)c->dense_rows);
            c->distinct += c->counts[id] == 0;
            c->counts[id]++;
        }
        c->total += n;
        return REC_OK;
    }
    for (int64_t k = 0; k < n; k++) {
        int64_t i = slot_of(c->keys, c->counts, c->cap, ids[k]);
        if (!c->counts[i]) {
            if (2 * (c->distinct + 1) > c->cap) {
                REC_TRY(grow(c));
                i = slot_of(c->keys, c->counts, c->cap, ids[k]);
            }
            c->keys[i] = ids[k];
            c->distinct++;
        }
        c->counts[i]++;
        c->total++;
    }
    return REC_OK;
}

int64_t rec_id_counter_distinct(const rec_id_counter *c) { return c->distinct; }
int64_t rec_id_counter_total(const rec_id_counter *c) { return c->total; }

int64_t rec_skew_top_k(int64_t rows) { return rows / 1000 > 1 ? rows / 1000 : 1; }

/* Rearranges v[0..n) so that its k largest values come first (in no order): Hoare partition
 * around a median-of-three pivot, recursing into the side that holds position k. */
static void select_top(int64_t *v, int64_t n, int64_t k) {
    int64_t lo = 0, hi = n - 1;
    while (lo < hi) {
        int64_t a = v[lo], b = v[lo + (hi - lo) / 2], c = v[hi];
        int64_t pivot = a < b ? (b < c ? b : (a < c ? c : a)) : (a < c ? a : (b < c ? c : b));
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (v[i] > pivot) i++;
            while (v[j] < pivot) j--;
            if (i <= j) {
                int64_t t = v[i];
                v[i] = v[j];
                v[j] = t;
                i++;
                j--;
            }
        }
        /* now v[lo..j] >= pivot >= v[i..hi], and v[j+1..i-1] == pivot */
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else return;
    }
}

rec_status rec_id_counter_top_share(const rec_id_counter *c, int64_t k, double *share) {
    *share = 0;
    if (c->total == 0 || k <= 0) return REC_OK;
    if (k >= c->distinct) {
        *share = 1;
        return REC_OK;
    }
    int64_t *v;
    REC_TRY(rec_alloc((void **)&v, 8 * (size_t)c->distinct, "id counts for the skew"));
    int64_t m = 0;
    for (int64_t i = 0; i < c->cap; i++)
        if (c->counts[i]) v[m++] = c->counts[i];
    select_top(v, m, k);
    int64_t top = 0;
    for (int64_t i = 0; i < k; i++) top += v[i];
    rec_free(v);
    *share = (double)top / (double)c->total;
    return REC_OK;
}

/* ---- bag lengths ----------------------------------------------------------------------------- */

rec_status rec_len_hist_add(rec_len_hist *h, int64_t len, int64_t times) {
    if (len < 0 || times < 0)
        return rec_errorf(REC_EINVAL, "bag length histogram: negative length %lld or count %lld",
                          (long long)len, (long long)times);
    if (times == 0) return REC_OK;
    if (len >= h->cap) {
        int64_t cap = h->cap ? h->cap : 64;
        while (cap <= len) cap *= 2;
        REC_TRY(rec_realloc((void **)&h->count, 8 * (size_t)h->cap, 8 * (size_t)cap, "bag length histogram"));
        h->cap = cap;
    }
    if (h->n == 0 || len < h->min) h->min = len;
    if (h->n == 0 || len > h->max) h->max = len;
    h->count[len] += times;
    h->n += times;
    h->sum += len * times;
    return REC_OK;
}

rec_status rec_len_hist_add_offsets(rec_len_hist *h, const int64_t *offsets, int64_t n) {
    int64_t r = 0;
    while (r < n) { /* runs of equal lengths (single-hot data is one run) cost one add */
        int64_t len = offsets[r + 1] - offsets[r], e = r + 1;
        while (e < n && offsets[e + 1] - offsets[e] == len) e++;
        REC_TRY(rec_len_hist_add(h, len, e - r));
        r = e;
    }
    return REC_OK;
}

int64_t rec_len_hist_quantile(const rec_len_hist *h, double q) {
    if (h->n == 0) return 0;
    double want = ceil(q * (double)h->n);
    if (want < 1) return h->min;
    int64_t seen = 0;
    for (int64_t v = h->min; v <= h->max; v++) {
        seen += h->count[v];
        if ((double)seen >= want) return v;
    }
    return h->max;
}

rec_len_summary rec_len_hist_summary(const rec_len_hist *h) {
    rec_len_summary s = {0};
    if (h->n == 0) return s;
    s.n = h->n;
    s.min = h->min;
    s.max = h->max;
    s.mean = (double)h->sum / (double)h->n;
    s.p50 = rec_len_hist_quantile(h, 0.5);
    s.p99 = rec_len_hist_quantile(h, 0.99);
    return s;
}

void rec_len_hist_free(rec_len_hist *h) {
    rec_free(h->count);
    memset(h, 0, sizeof *h);
}
