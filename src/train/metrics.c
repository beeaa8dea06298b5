/* Evaluation metrics over a whole evaluation set (metrics.h): an accumulator of (logit, label)
 * pairs, then exact ROC-AUC, logloss, normalized entropy, accuracy and calibration.
 *
 * AUC is the Mann-Whitney statistic (Hanley & McNeil 1982, "The meaning and use of the area
 * under a ROC curve", eq. 2): the share of (positive, negative) pairs in which the positive
 * scores higher, ties counting 1/2. After sorting by score it is one walk over tie groups:
 *
 *   AUC = sum_g [ pos_g * neg_below_g + pos_g * neg_g / 2 ] / (P * N)
 *
 * with neg_below_g the negatives in strictly lower groups. The sum is kept doubled in an
 * integer (2 pos_g neg_below_g + pos_g neg_g <= n^2 / 2 over the whole set, exact in 64 bits
 * for n < 2^32), so the only rounding is the final division. The scores are the logits, not
 * sigmoid(logit): the order is the same, but fp32 sigmoid rounds distinct large logits to the
 * same probability (every z > 17 gives 1.0f), which would invent ties.
 *
 * Evaluation sets have millions of rows, so the sort is an LSD radix sort (3 passes of 11
 * bits) on the float bits mapped to order-preserving unsigned keys, O(n), instead of qsort's
 * O(n log n) with a comparison call per step. Each item carries its class in bit 0:
 * item = key << 1 | positive, sorted on all 33 bits.
 *
 * The other metrics are sums in double over the stored pairs (logloss in the stable form
 * max(z,0) - z y + log1p(exp(-|z|)) of nn.h); ne is He et al. 2014, "Practical lessons from
 * predicting clicks on ads at Facebook", §2: logloss / H(ctr).
 *
 * rec_metrics_ref is the reference: the same definitions from plain double arrays, AUC by
 * counting every pair, O(n^2). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "rectrain/core.h"
#include "rectrain/metrics.h"

struct rec_eval_acc {
    float *logits;       /* (cap) */
    float *labels;       /* (cap) */
    int64_t n, cap;      /* rows added since the last reset; rows allocated */
    uint64_t *items;     /* (2 * items_cap): sort keys and the radix sort's second buffer */
    int64_t items_cap;
};

enum { RADIX_BITS = 11, RADIX_SIZE = 1 << RADIX_BITS, RADIX_PASSES = 3 }; /* 33 bits */

rec_status rec_eval_acc_init(rec_eval_acc **out, int64_t expected_rows) {
    *out = NULL;
    if (expected_rows < 0) expected_rows = 0;
    rec_eval_acc *a;
    REC_TRY(rec_alloc((void **)&a, sizeof *a, "the evaluation accumulator"));
    int64_t cap = expected_rows > 0 ? expected_rows : 1024;
    rec_status s = rec_alloc((void **)&a->logits, (size_t)cap * sizeof(float), "evaluation logits");
    if (s == REC_OK)
        s = rec_alloc((void **)&a->labels, (size_t)cap * sizeof(float), "evaluation labels");
    if (s != REC_OK) {
        rec_eval_acc_free(a);
        return s;
    }
    a->cap = cap;
    *out = a;
    return REC_OK;
}

void rec_eval_acc_free(rec_eval_acc *a) {
    if (!a) return;
    rec_free(a->logits);
    rec_free(a->labels);
    rec_free(a->items);
    rec_free(a);
}

/* Forgets the rows; keeps every buffer, so the next evaluation of the same size allocates
 * nothing. */
void rec_eval_acc_reset(rec_eval_acc *a) { a->n = 0; }

/* Checks all n pairs before appending any, so a rejected call leaves the accumulator as it
 * was. A NaN or infinite logit means the model diverged (and would poison logloss), a label
 * outside [0, 1] is a data error; both name the row counted from the last reset. Grows the
 * buffers geometrically (x1.5, at least to the need). */
rec_status rec_eval_acc_add(rec_eval_acc *a, int64_t n, const float *logits, const float *labels) {
    if (n < 0) return rec_errorf(REC_EINVAL, "evaluation: %lld rows added; need n >= 0", (long long)n);
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(logits[i]))
            return rec_errorf(REC_EINVAL, "evaluation: logit of row %lld is %g; the model diverged — lower the learning rate",
                              (long long)(a->n + i), (double)logits[i]);
        if (!(labels[i] >= 0.0f && labels[i] <= 1.0f))
            return rec_errorf(REC_EINVAL, "evaluation: label of row %lld is %g; labels must lie in [0, 1]",
                              (long long)(a->n + i), (double)labels[i]);
    }
    if (a->n + n > a->cap) {
        int64_t cap = a->cap + a->cap / 2;
        if (cap < a->n + n) cap = a->n + n;
        REC_TRY(rec_realloc((void **)&a->logits, (size_t)a->n * sizeof(float), (size_t)cap * sizeof(float),
                            "evaluation logits"));
        REC_TRY(rec_realloc((void **)&a->labels, (size_t)a->n * sizeof(float), (size_t)cap * sizeof(float),
                            "evaluation labels"));
        a->cap = cap;
    }
    if (n > 0) {
        memcpy(a->logits + a->n, logits, (size_t)n * sizeof(float));
        memcpy(a->labels + a->n, labels, (size_t)n * sizeof(float));
    }
    a->n += n;
    return REC_OK;
}

/* An unsigned key with the order of the float: flip all bits of a negative number (larger
 * magnitude = smaller), set the sign bit of a positive one. -0 is made +0 first (x + 0.0f),
 * so that the two zeros, equal as scores, get one key and fall in one tie group. */
static inline uint32_t float_key(float x) {
    x += 0.0f;
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* Sorts items (n) ascending on their low 33 bits with three counting passes of 11 bits;
 * tmp (n) is scratch. One reading pass builds all three histograms; a pass whose digit is
 * the same for every item is skipped. The result ends in items. */
static void radix_sort33(uint64_t *items, uint64_t *tmp, int64_t n) {
    _Static_assert(RADIX_BITS * RADIX_PASSES >= 33, "the passes must cover key and class bit");
    int64_t count[RADIX_PASSES][RADIX_SIZE];
    memset(count, 0, sizeof count);
    for (int64_t i = 0; i < n; i++)
        for (int p = 0; p < RADIX_PASSES; p++) count[p][(items[i] >> (p * RADIX_BITS)) & (RADIX_SIZE - 1)]++;
    uint64_t *src = items, *dst = tmp;
    for (int p = 0; p < RADIX_PASSES; p++) {
        const int shift = p * RADIX_BITS;
        if (n == 0 || count[p][(src[0] >> shift) & (RADIX_SIZE - 1)] == n) continue;
        int64_t start = 0;
        for (int d = 0; d < RADIX_SIZE; d++) { /* counts -> first slot of each digit */
            int64_t c = count[p][d];
            count[p][d] = start;
            start += c;
        }
        for (int64_t i = 0; i < n; i++) dst[count[p][(src[i] >> shift) & (RADIX_SIZE - 1)]++] = src[i];
        uint64_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != items) memcpy(items, src, (size_t)n * sizeof(uint64_t));
}

/* The Mann-Whitney AUC of the accumulated rows (see the top of the file); NaN when one class
 * is absent. Uses the accumulator's item buffers (grown here, kept for the next call). */
static rec_status auc_sorted(rec_eval_acc *a, double *auc) {
    const int64_t n = a->n;
    if (n > a->items_cap) {
        rec_free(a->items);
        a->items = NULL;
        a->items_cap = 0;
        REC_TRY(rec_alloc((void **)&a->items, (size_t)n * 2 * sizeof(uint64_t), "the AUC sort of the evaluation set"));
        a->items_cap = n;
    }
    uint64_t *items = a->items, *tmp = a->items + n;
    for (int64_t i = 0; i < n; i++)
        items[i] = (uint64_t)float_key(a->logits[i]) << 1 | (uint64_t)(a->labels[i] > 0.5f);
    radix_sort33(items, tmp, n);

    uint64_t sum2 = 0, neg_below = 0, P = 0, N = 0; /* sum2 = 2 x (Mann-Whitney U) */
    for (int64_t i = 0; i < n;) {
        const uint64_t key = items[i] >> 1;
        uint64_t pos = 0, neg = 0;
        for (; i < n && items[i] >> 1 == key; i++) {
            if (items[i] & 1) pos++;
            else neg++;
        }
        sum2 += 2 * pos * neg_below + pos * neg;
        neg_below += neg;
        P += pos;
        N += neg;
    }
    *auc = (P == 0 || N == 0) ? NAN : (double)sum2 / (2.0 * (double)P * (double)N);
    return REC_OK;
}

static inline float key_float(uint32_t k) {
    const uint32_t u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* The calibration curve from auc_sorted's items (sorted by score): REC_CALIB_BUCKETS groups of
 * equal size, each with its mean predicted probability and observed CTR. */
static void calibration_curve(const rec_eval_acc *a, rec_metrics *m) {
    const int64_t n = a->n;
    const int B = n < REC_CALIB_BUCKETS ? (int)n : REC_CALIB_BUCKETS;
    m->n_buckets = B;
    for (int b = 0; b < B; b++) {
        const int64_t lo = n * b / B, hi = n * (b + 1) / B;
        double p = 0, y = 0;
        for (int64_t i = lo; i < hi; i++) {
            p += rec_sigmoid(key_float((uint32_t)(a->items[i] >> 1)));
            y += (double)(a->items[i] & 1);
        }
        m->bucket_pred[b] = p / (double)(hi - lo);
        m->bucket_ctr[b] = y / (double)(hi - lo);
        m->bucket_n[b] = hi - lo;
    }
}

/* Binary entropy in nats; NaN outside (0, 1), where ne is undefined. */
static double entropy(double p) {
    if (!(p > 0.0 && p < 1.0)) return NAN;
    return -p * log(p) - (1.0 - p) * log1p(-p);
}

/* Sigmoid without overflow: exp only ever sees -|z|. */
double rec_sigmoid(double z) {
    double e = exp(-fabs(z));
    return z >= 0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
}

/* Overwrites *out with the metrics of every row added since the last reset; the rows stay,
 * so more can be added and finish called again. REC_EINVAL on an empty set (no metric is
 * defined; the caller evaluated an empty range), REC_ENOMEM if the sort buffer cannot be
 * had. ctr = 0 makes calibration NaN (a 0/0 or x/0 ratio means nothing). */
rec_status rec_eval_acc_finish(rec_eval_acc *a, rec_metrics *out) {
    const int64_t n = a->n;
    if (n == 0) return rec_errorf(REC_EINVAL, "evaluation: no rows were added; the evaluation set must hold at least one row");
    double loss = 0.0, label = 0.0, pred = 0.0;
    int64_t correct = 0;
    for (int64_t i = 0; i < n; i++) {
        const double z = a->logits[i], y = a->labels[i];
        loss += fmax(z, 0.0) - z * y + log1p(exp(-fabs(z)));
        label += y;
        pred += rec_sigmoid(z);
        correct += (z > 0.0) == (y > 0.5);
    }
    rec_metrics m;
    memset(&m, 0, sizeof m);
    m.n = n;
    REC_TRY(auc_sorted(a, &m.auc));
    calibration_curve(a, &m);
    m.logloss = loss / (double)n;
    m.ctr = label / (double)n;
    m.mean_pred = pred / (double)n;
    m.ne = m.logloss / entropy(m.ctr);
    m.accuracy = (double)correct / (double)n;
    m.calibration = m.ctr > 0.0 ? m.mean_pred / m.ctr : NAN;
    *out = m;
    return REC_OK;
}

/* The reference: the definitions written out in double. AUC counts every (positive,
 * negative) pair; logloss is -y ln s - (1-y) ln(1-s) with s = 1/(1+e^-z) and 1-s = 1/(1+e^z)
 * each from its own definition (forming 1 - s by subtraction would lose all digits of a
 * small complement), for |z| < 30 where e^|z| cannot overflow, and the stable form beyond;
 * accuracy compares the probability with 1/2. Writes NaN metrics for n <= 0. */
void rec_metrics_ref(int64_t n, const double *scores, const double *labels, rec_metrics *out) {
    rec_metrics m;
    memset(&m, 0, sizeof m);
    m.n = n;
    if (n <= 0) {
        m.auc = m.logloss = m.ne = m.accuracy = m.calibration = m.ctr = m.mean_pred = NAN;
        *out = m;
        return;
    }
    double pairs = 0.0, wins = 0.0, loss = 0.0, label = 0.0, pred = 0.0, correct = 0.0;
    for (int64_t i = 0; i < n; i++) {
        const double z = scores[i], y = labels[i], s = 1.0 / (1.0 + exp(-z));
        if (fabs(z) < 30.0) loss += -y * log(s) - (1.0 - y) * log(1.0 / (1.0 + exp(z)));
        else loss += fmax(z, 0.0) - z * y + log1p(exp(-fabs(z)));
        label += y;
        pred += s;
        correct += (s > 0.5) == (y > 0.5);
        if (!(y > 0.5)) continue;
        for (int64_t j = 0; j < n; j++) {
            if (labels[j] > 0.5) continue;
            pairs += 1.0;
            wins += scores[i] > scores[j] ? 1.0 : scores[i] == scores[j] ? 0.5 : 0.0;
        }
    }
    m.auc = pairs > 0.0 ? wins / pairs : NAN;
    m.logloss = loss / (double)n;
    m.ctr = label / (double)n;
    m.mean_pred = pred / (double)n;
    m.ne = (m.ctr > 0.0 && m.ctr < 1.0) ? m.logloss / (-m.ctr * log(m.ctr) - (1.0 - m.ctr) * log(1.0 - m.ctr)) : NAN;
    m.accuracy = correct / (double)n;
    m.calibration = m.ctr > 0.0 ? m.mean_pred / m.ctr : NAN;
    *out = m;
}
