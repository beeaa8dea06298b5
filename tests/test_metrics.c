/* Evaluation metrics, the learning-rate schedule and .npy export (train.h, model.h).
 *
 *  - the accumulator (radix-sorted tie-group AUC, sums in double) against rec_metrics_ref
 *    (pair-counting AUC, unfused formulas) on random sets, n = 1..2000, rows added in chunks
 *    of random size (0 included): continuous scores over a wide range of magnitudes and
 *    both signs, scores from a handful of values (many ties, -0 beside +0), all scores
 *    equal (AUC 1/2), perfectly separated (1) and reversed (0), soft labels;
 *  - on 200 000 rows (too many for the O(n^2) reference), the AUC against a qsort tie walk;
 *  - hand-computed cases, single-class sets (NaN), reset, and every rejection with its
 *    message (NaN/inf logit naming the row, bad label, empty set);
 *  - rec_lr_scale on hand-computed values of warmup, polynomial decay, floor and no decay;
 *  - rec_npy_write: (3, 5), (7,), () and an empty (0, 4) array parsed back byte by byte
 *    (magic, version, header text, 64-byte alignment, data), then, where /usr/bin/python3
 *    with numpy exists, read by numpy.load (skipped otherwise); and its I/O errors.
 *
 * Tolerances. AUC: both sides form the Mann-Whitney count exactly (integers in the
 * accumulator, sums of 0.5 in double below 2^53 in the reference) and round once in the
 * division, so they agree to 1e-12 (the division's 1e-16 with margin). logloss, ne,
 * mean_pred, calibration: both accumulate in double from the same float inputs; the per-row
 * terms differ by a few ulps (stable vs unfused form, where ln(s) near s = 1 costs an
 * absolute ~1e-16) and the sum of n <= 2000 terms adds at most n * 2^-53 relative, so
 * |got - ref| <= 1e-12 * max(1, |ref|) holds for any correct implementation while a dropped
 * row (>= 1/2000 relative) or a wrong formula fails. accuracy and ctr are counts and sums
 * of 0/1 (or of floats exactly representable): compared the same way. A NaN on one side only
 * fails.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "rectrain/core.h"
#include "rectrain/export.h"
#include "rectrain/model.h"
#include "rectrain/train.h"

static rec_rng g_rng;

/* Equal within tol * max(1, |ref|), or both NaN. */
static int close_or_nan(double got, double ref, double tol) {
    if (isnan(ref)) return isnan(got);
    return fabs(got - ref) <= tol * fmax(1.0, fabs(ref));
}

static void check_metrics(const char *what, const rec_metrics *g, const rec_metrics *r) {
    const double tol = 1e-12;
    CHECK(g->n == r->n, "%s: n %lld vs %lld", what, (long long)g->n, (long long)r->n);
    CHECK(close_or_nan(g->auc, r->auc, tol), "%s: auc %.17g ref %.17g", what, g->auc, r->auc);
    CHECK(close_or_nan(g->logloss, r->logloss, tol), "%s: logloss %.17g ref %.17g", what, g->logloss, r->logloss);
    CHECK(close_or_nan(g->ne, r->ne, tol), "%s: ne %.17g ref %.17g", what, g->ne, r->ne);
    CHECK(close_or_nan(g->accuracy, r->accuracy, tol), "%s: accuracy %.17g ref %.17g", what, g->accuracy, r->accuracy);
    CHECK(close_or_nan(g->calibration, r->calibration, tol), "%s: calibration %.17g ref %.17g", what,
          g->calibration, r->calibration);
    CHECK(close_or_nan(g->ctr, r->ctr, tol), "%s: ctr %.17g ref %.17g", what, g->ctr, r->ctr);
    CHECK(close_or_nan(g->mean_pred, r->mean_pred, tol), "%s: mean_pred %.17g ref %.17g", what, g->mean_pred,
          r->mean_pred);
}

/* Adds (logits, labels) (n) to a in chunks of random size (0 included), finishes, and
 * returns the accumulator's metrics in *got and the reference's in *ref. */
static void eval_both(rec_eval_acc *a, int64_t n, const float *logits, const float *labels, rec_metrics *got,
                      rec_metrics *ref) {
    rec_eval_acc_reset(a);
    for (int64_t i = 0; i < n;) {
        int64_t c = (int64_t)rec_rng_below(&g_rng, 40);
        if (c > n - i) c = n - i;
        rec_status s = rec_eval_acc_add(a, c, logits + i, labels + i);
        CHECK(s == REC_OK, "add: %s", rec_errmsg());
        i += c;
    }
    memset(got, 0xff, sizeof *got); /* NaN everywhere, n = -1 */
    rec_status s = rec_eval_acc_finish(a, got);
    CHECK(s == REC_OK, "finish: %s", rec_errmsg());
    double *z = malloc((size_t)(n ? n : 1) * sizeof(double)), *y = malloc((size_t)(n ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++) z[i] = logits[i], y[i] = labels[i];
    rec_metrics_ref(n, z, y, ref);
    free(z);
    free(y);
}

enum { GEN_CONTINUOUS, GEN_HANDFUL, GEN_EQUAL, GEN_SEPARATED, GEN_REVERSED, GEN_SOFT, GEN_KINDS };
static const char *gen_name[GEN_KINDS] = {"continuous", "handful", "equal", "separated", "reversed", "soft"};

/* Fills a random set of kind `kind`; labels ~ Bernoulli(p). */
static void gen_set(int kind, int64_t n, double p, float *z, float *y) {
    static const float handful[] = {-3.5f, -0.0f, 0.0f, 0.25f, 2.0f, 40.0f};
    for (int64_t i = 0; i < n; i++) {
        y[i] = rec_rng_uniform(&g_rng) < p ? 1.0f : 0.0f;
        switch (kind) {
        case GEN_CONTINUOUS: /* magnitudes from 1e-4 to 1e4, both signs */
            z[i] = (float)(rec_rng_normal(&g_rng) * exp(3.0 * rec_rng_normal(&g_rng)));
            break;
        case GEN_HANDFUL: z[i] = handful[rec_rng_below(&g_rng, 6)]; break;
        case GEN_EQUAL: z[i] = -1.25f; break;
        case GEN_SEPARATED: z[i] = (y[i] > 0.5f ? 1.0f : -1.0f) * (float)(0.01 + rec_rng_uniform(&g_rng)); break;
        case GEN_REVERSED: z[i] = (y[i] > 0.5f ? -1.0f : 1.0f) * (float)(0.01 + rec_rng_uniform(&g_rng)); break;
        case GEN_SOFT:
            z[i] = (float)(2.0 * rec_rng_normal(&g_rng));
            y[i] = (float)rec_rng_below(&g_rng, 5) * 0.25f; /* 0, .25, .5, .75, 1 */
            break;
        }
    }
}

static void test_random_sets(void) {
    static const int64_t sizes[] = {1, 2, 3, 4, 7, 16, 33, 100, 257, 1000, 2000};
    enum { NMAX = 2000 };
    float *z = malloc(NMAX * sizeof(float)), *y = malloc(NMAX * sizeof(float));
    rec_eval_acc *a;
    CHECK(rec_eval_acc_init(&a, 8) == REC_OK, "init: %s", rec_errmsg()); /* grows as rows come */
    for (int kind = 0; kind < GEN_KINDS; kind++)
        for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++)
            for (int rep = 0; rep < 2; rep++) {
                const int64_t n = sizes[si];
                const double p = rep == 0 ? 0.5 : 0.1;
                gen_set(kind, n, p, z, y);
                rec_metrics g, r;
                eval_both(a, n, z, y, &g, &r);
                char what[96];
                snprintf(what, sizeof what, "%s n=%lld p=%.1f", gen_name[kind], (long long)n, p);
                check_metrics(what, &g, &r);
                int64_t P = 0;
                for (int64_t i = 0; i < n; i++) P += y[i] > 0.5f;
                if (P == 0 || P == n) {
                    CHECK(isnan(g.auc), "%s: one class, auc %g should be NaN", what, g.auc);
                    continue;
                }
                if (kind == GEN_EQUAL) CHECK(g.auc == 0.5, "%s: auc %.17g, want 0.5", what, g.auc);
                if (kind == GEN_SEPARATED) CHECK(g.auc == 1.0, "%s: auc %.17g, want 1", what, g.auc);
                if (kind == GEN_REVERSED) CHECK(g.auc == 0.0, "%s: auc %.17g, want 0", what, g.auc);
            }
    rec_eval_acc_free(a);
    free(z);
    free(y);
}

/* Sort by score for the large-set check: ties in any order. */
static int cmp_pair(const void *pa, const void *pb) {
    const float *a = pa, *b = pb;
    return (a[0] > b[0]) - (a[0] < b[0]);
}

/* 200 000 rows with ties (scores rounded to 1/64) and a wide spread: the radix sort against
 * qsort, both followed by the same tie walk written here. */
static void test_large_auc(void) {
    enum { N = 200000 };
    float *z = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float)), *pairs = malloc(2 * N * sizeof(float));
    for (int i = 0; i < N; i++) {
        double v = rec_rng_normal(&g_rng) * exp(2.0 * rec_rng_normal(&g_rng));
        z[i] = (float)(i % 3 == 0 ? round(v * 64.0) / 64.0 : v);
        y[i] = rec_rng_uniform(&g_rng) < 1.0 / (1.0 + exp(-z[i])) ? 1.0f : 0.0f;
        pairs[2 * i] = z[i] + 0.0f; /* -0 sorts with +0, as in the accumulator */
        pairs[2 * i + 1] = y[i];
    }
    qsort(pairs, N, 2 * sizeof(float), cmp_pair);
    double u = 0.0, neg_below = 0.0, P = 0.0, Nn = 0.0;
    for (int i = 0; i < N;) {
        double pos = 0.0, neg = 0.0;
        const float key = pairs[2 * i];
        for (; i < N && pairs[2 * i] == key; i++) *(pairs[2 * i + 1] > 0.5f ? &pos : &neg) += 1.0;
        u += pos * neg_below + 0.5 * pos * neg;
        neg_below += neg;
        P += pos;
        Nn += neg;
    }
    const double want = u / (P * Nn);
    rec_eval_acc *a;
    CHECK(rec_eval_acc_init(&a, N) == REC_OK, "init: %s", rec_errmsg());
    CHECK(rec_eval_acc_add(a, N / 2, z, y) == REC_OK, "add: %s", rec_errmsg());
    CHECK(rec_eval_acc_add(a, N - N / 2, z + N / 2, y + N / 2) == REC_OK, "add: %s", rec_errmsg());
    rec_metrics m;
    CHECK(rec_eval_acc_finish(a, &m) == REC_OK, "finish: %s", rec_errmsg());
    CHECK(fabs(m.auc - want) <= 1e-12, "200k rows: auc %.17g, qsort walk %.17g", m.auc, want);
    CHECK(m.auc > 0.6 && m.auc < 0.95, "200k rows: auc %.6f should show the planted signal", m.auc);
    rec_eval_acc_free(a);
    free(z);
    free(y);
    free(pairs);
}

/* Rows given as double literals (exact in float). */
static rec_metrics eval_small(int n, const double *zs, const double *ys) {
    float z[16], y[16];
    for (int i = 0; i < n; i++) z[i] = (float)zs[i], y[i] = (float)ys[i];
    rec_eval_acc *a;
    rec_metrics m;
    memset(&m, 0xff, sizeof m);
    CHECK(rec_eval_acc_init(&a, 0) == REC_OK, "init: %s", rec_errmsg());
    CHECK(rec_eval_acc_add(a, n, z, y) == REC_OK, "add: %s", rec_errmsg());
    CHECK(rec_eval_acc_finish(a, &m) == REC_OK, "finish: %s", rec_errmsg());
    rec_eval_acc_free(a);
    return m;
}

static void test_hand_computed(void) {
    /* positives 0.35, 0.8 vs negatives 0.1, 0.4: 0.35 beats 0.1 only, 0.8 beats both: 3/4 */
    rec_metrics m = eval_small(4, (double[]){0.1, 0.4, 0.35, 0.8}, (double[]){0, 0, 1, 1});
    CHECK(m.auc == 0.75, "auc %.17g, want 0.75", m.auc);
    CHECK(m.n == 4, "n %lld", (long long)m.n);
    CHECK(m.accuracy == 0.5, "accuracy %g: every logit is > 0, so exactly the positives are right", m.accuracy);

    /* ties: positive at 1 vs negatives at 1 (1/2) and 2 (0) -> 1/4 */
    m = eval_small(3, (double[]){1, 1, 2}, (double[]){1, 0, 0});
    CHECK(m.auc == 0.25, "tied auc %.17g, want 0.25", m.auc);
    /* -0 and +0 are one score: positive at -0 vs negative at +0 is a tie */
    m = eval_small(2, (double[]){-0.0, 0.0}, (double[]){1, 0});
    CHECK(m.auc == 0.5, "auc of -0 vs +0 %.17g, want 0.5 (a tie)", m.auc);

    /* logits 0: p = 1/2 for both, loss ln 2 each, H(1/2) = ln 2 so ne = 1; z > 0 is false, so
     * only the negative is right; mean_pred 1/2 = ctr */
    m = eval_small(2, (double[]){0, 0}, (double[]){0, 1});
    CHECK(fabs(m.logloss - log(2.0)) <= 1e-15, "logloss %.17g, want ln 2", m.logloss);
    CHECK(fabs(m.ne - 1.0) <= 1e-15, "ne %.17g, want 1", m.ne);
    CHECK(m.accuracy == 0.5 && m.ctr == 0.5 && m.mean_pred == 0.5 && m.calibration == 1.0,
          "accuracy %g ctr %g mean_pred %g calibration %g, want 0.5 0.5 0.5 1", m.accuracy, m.ctr, m.mean_pred,
          m.calibration);

    /* logits ln 3 (p = 3/4) and -ln 3 (p = 1/4), labels 1, 1: loss (ln 4/3 + ln 4) / 2,
     * ctr 1 so ne is NaN and auc too (one class); mean_pred 1/2, calibration 1/2 */
    m = eval_small(2, (double[]){(float)log(3.0), (float)-log(3.0)}, (double[]){1, 1});
    const double p1 = 1.0 / (1.0 + exp(-(double)(float)log(3.0)));
    const double want = (-log(p1) - log(1.0 - p1)) / 2.0;
    CHECK(fabs(m.logloss - want) <= 1e-15, "logloss %.17g, want %.17g", m.logloss, want);
    CHECK(isnan(m.auc) && isnan(m.ne), "one class: auc %g ne %g should be NaN", m.auc, m.ne);
    CHECK(fabs(m.calibration - 0.5) <= 1e-15 && m.accuracy == 0.5, "calibration %g accuracy %g", m.calibration,
          m.accuracy);

    /* all negatives: auc, ne and calibration (ctr 0) NaN */
    m = eval_small(3, (double[]){-1, 2, 0.5}, (double[]){0, 0, 0});
    CHECK(isnan(m.auc) && isnan(m.ne) && isnan(m.calibration) && m.ctr == 0.0,
          "no positives: auc %g ne %g calibration %g ctr %g", m.auc, m.ne, m.calibration, m.ctr);

    /* large logits stay finite: z = +-100, wrong side costs 100 */
    m = eval_small(2, (double[]){100, -100}, (double[]){0, 0});
    CHECK(fabs(m.logloss - 50.0) <= 1e-12, "logloss %.17g, want 50", m.logloss);
}

static void test_reset_and_errors(void) {
    rec_eval_acc *a;
    CHECK(rec_eval_acc_init(&a, 4) == REC_OK, "init: %s", rec_errmsg());
    rec_metrics m;
    CHECK_ERR(rec_eval_acc_finish(a, &m), REC_EINVAL, "no rows were added");

    float z[20], y[20];
    for (int i = 0; i < 20; i++) z[i] = (float)i - 9.5f, y[i] = (float)(i % 2);
    CHECK(rec_eval_acc_add(a, 10, z, y) == REC_OK, "add: %s", rec_errmsg());
    z[17] = NAN;
    CHECK_ERR(rec_eval_acc_add(a, 10, z + 10, y + 10), REC_EINVAL,
              "evaluation: logit of row 17 is nan; the model diverged — lower the learning rate");
    z[17] = -INFINITY;
    CHECK_ERR(rec_eval_acc_add(a, 10, z + 10, y + 10), REC_EINVAL, "logit of row 17 is -inf");
    z[17] = 7.5f;
    y[12] = 1.5f;
    CHECK_ERR(rec_eval_acc_add(a, 10, z + 10, y + 10), REC_EINVAL, "label of row 12 is 1.5; labels must lie in [0, 1]");
    y[12] = NAN;
    CHECK_ERR(rec_eval_acc_add(a, 10, z + 10, y + 10), REC_EINVAL, "label of row 12 is nan");
    y[12] = 0.0f;
    CHECK_ERR(rec_eval_acc_add(a, -1, z, y), REC_EINVAL, "need n >= 0");

    /* rejected calls appended nothing: the first 10 rows only */
    CHECK(rec_eval_acc_finish(a, &m) == REC_OK && m.n == 10, "n %lld after rejections, want 10", (long long)m.n);
    /* z = i - 9.5 for i < 10 are all negative, labels alternate: positives (odd i) sit above
     * the negative below them: pairs won = 1 + 2 + 3 + 4 + 5 = 15 of 25 */
    CHECK(m.auc == 0.6, "auc %.17g, want 0.6", m.auc);
    CHECK(rec_eval_acc_add(a, 0, NULL, NULL) == REC_OK, "add of 0 rows: %s", rec_errmsg());

    /* after reset only the new rows count */
    rec_eval_acc_reset(a);
    CHECK(rec_eval_acc_add(a, 4, (float[]){0.1f, 0.4f, 0.35f, 0.8f}, (float[]){0, 0, 1, 1}) == REC_OK, "add: %s",
          rec_errmsg());
    CHECK(rec_eval_acc_finish(a, &m) == REC_OK && m.n == 4 && m.auc == 0.75, "after reset: n %lld auc %g",
          (long long)m.n, m.auc);
    /* finish leaves the rows: more can be added and finished again */
    CHECK(rec_eval_acc_add(a, 1, (float[]){0.05f}, (float[]){1}) == REC_OK, "add: %s", rec_errmsg());
    CHECK(rec_eval_acc_finish(a, &m) == REC_OK && m.n == 5 && m.auc == 0.5, "n %lld auc %g, want 5, 3/6", (long long)m.n,
          m.auc);
    rec_eval_acc_free(a);
    rec_eval_acc_free(NULL);
}

static void test_lr(void) {
    rec_lr_schedule s = {.warmup_steps = 4, .decay_start = 10, .decay_steps = 5, .power = 2.0, .end_scale = 0.1};
    static const struct { int64_t t; double want; } cases[] = {
        {-3, 0.25}, {0, 0.25}, {1, 0.5}, {2, 0.75}, {3, 1.0},   /* warmup (t + 1) / 4 */
        {4, 1.0},   {9, 1.0},                                   /* plateau */
        {10, 1.0},  {11, 0.64}, {12, 0.36}, {13, 0.16},          /* ((15 - t) / 5)^2 */
        {14, 0.1},  /* (1/5)^2 = 0.04, floored at 0.1 */
        {15, 0.1},  {1000000, 0.1},                             /* end */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        double got = rec_lr_scale(&s, cases[i].t);
        CHECK(fabs(got - cases[i].want) <= 1e-15, "lr scale at t=%lld: %.17g, want %.17g", (long long)cases[i].t, got,
              cases[i].want);
    }
    /* power 1, floor 0: linear decay 1, 0.8, ..., 0.2, then 0 */
    rec_lr_schedule lin = {.warmup_steps = 0, .decay_start = 0, .decay_steps = 5, .power = 1.0, .end_scale = 0.0};
    CHECK(rec_lr_scale(&lin, 0) == 1.0 && fabs(rec_lr_scale(&lin, 4) - 0.2) <= 1e-15 && rec_lr_scale(&lin, 5) == 0.0,
          "linear decay: %g %g %g, want 1 0.2 0", rec_lr_scale(&lin, 0), rec_lr_scale(&lin, 4), rec_lr_scale(&lin, 5));
    /* no decay: 1 after warmup forever; no warmup either: 1 from the start */
    rec_lr_schedule nd = {.warmup_steps = 8, .decay_start = 0, .decay_steps = 0, .power = 2.0, .end_scale = 0.0};
    CHECK(rec_lr_scale(&nd, 0) == 0.125 && rec_lr_scale(&nd, 7) == 1.0 && rec_lr_scale(&nd, 123456789) == 1.0,
          "no decay: %g %g %g, want 0.125 1 1", rec_lr_scale(&nd, 0), rec_lr_scale(&nd, 7),
          rec_lr_scale(&nd, 123456789));
    nd.warmup_steps = 0;
    CHECK(rec_lr_scale(&nd, 0) == 1.0, "no warmup, no decay: %g, want 1", rec_lr_scale(&nd, 0));
}

/* ---- .npy ---------------------------------------------------------------------------------- */

static char g_dir[64];

static unsigned char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)n + 1);
    *len = fread(b, 1, (size_t)n, f);
    fclose(f);
    return b;
}

/* Writes data with the given shape and checks the file byte by byte against the format. */
static void npy_roundtrip(const char *name, const float *data, int ndim, const int64_t *shape, const char *shape_text) {
    char path[128], tmp[160];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    rec_status s = rec_npy_write(path, data, NULL, ndim, shape);
    CHECK(s == REC_OK, "%s: %s", name, rec_errmsg());
    CHECK(access(tmp, F_OK) != 0, "%s: the temporary file is left behind", name);
    size_t len = 0, count = 1;
    for (int d = 0; d < ndim; d++) count *= (size_t)shape[d];
    unsigned char *b = read_all(path, &len);
    CHECK(b != NULL && len >= 10, "%s: cannot read back (%zu bytes)", name, len);
    if (!b || len < 10) {
        free(b);
        return;
    }
    CHECK(memcmp(b, "\x93NUMPY\x01\x00", 8) == 0, "%s: magic/version bytes wrong", name);
    const size_t hlen = b[8] | (size_t)b[9] << 8;
    CHECK((10 + hlen) % 64 == 0, "%s: preamble of %zu bytes is not a multiple of 64", name, 10 + hlen);
    CHECK(len == 10 + hlen + 4 * count, "%s: file is %zu bytes, want %zu", name, len, 10 + hlen + 4 * count);
    if (len != 10 + hlen + 4 * count) {
        free(b);
        return;
    }
    char want[160];
    int wl = snprintf(want, sizeof want, "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }", shape_text);
    CHECK(hlen > (size_t)wl && memcmp(b + 10, want, (size_t)wl) == 0, "%s: header \"%.*s\", want \"%s\"", name,
          (int)hlen, (const char *)b + 10, want);
    int pad_ok = b[10 + hlen - 1] == '\n';
    for (size_t i = 10 + (size_t)wl; i + 1 < 10 + hlen; i++) pad_ok &= b[i] == ' ';
    CHECK(pad_ok, "%s: the header must be padded with spaces and end in '\\n'", name);
    CHECK(count == 0 || memcmp(b + 10 + hlen, data, 4 * count) == 0, "%s: data bytes differ", name);
    free(b);
}

static void test_npy(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/rec_test_metrics_XXXXXX");
    if (!mkdtemp(g_dir)) {
        CHECK(0, "mkdtemp: %s", strerror(errno));
        return;
    }
    float a35[15], a7[7], a0[1] = {3.25f};
    for (int i = 0; i < 15; i++) a35[i] = (float)i * 0.5f - 3.0f;
    for (int i = 0; i < 7; i++) a7[i] = 1.0f / (float)(i + 1);
    npy_roundtrip("a35.npy", a35, 2, (int64_t[]){3, 5}, "(3, 5)");
    npy_roundtrip("a7.npy", a7, 1, (int64_t[]){7}, "(7,)");
    npy_roundtrip("a0.npy", a0, 0, NULL, "()");
    npy_roundtrip("e04.npy", NULL, 2, (int64_t[]){0, 4}, "(0, 4)");
    /* overwriting an existing file */
    npy_roundtrip("a7.npy", a7, 1, (int64_t[]){7}, "(7,)");

    /* numpy's own reader, where it exists; exit 77 from the script means "no numpy" */
    if (access("/usr/bin/python3", X_OK) == 0) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd,
                 "/usr/bin/python3 -c \"\n"
                 "import sys\n"
                 "try:\n import numpy as np\nexcept ImportError:\n sys.exit(77)\n"
                 "d='%s'\n"
                 "a=np.load(d+'/a35.npy'); assert a.dtype==np.float32 and a.shape==(3,5), a\n"
                 "assert (a==np.arange(15,dtype=np.float32).reshape(3,5)*np.float32(0.5)-3).all(), a\n"
                 "b=np.load(d+'/a7.npy'); assert b.shape==(7,) and (b==np.float32(1)/np.arange(1,8,dtype=np.float32)).all(), b\n"
                 "c=np.load(d+'/a0.npy'); assert c.shape==() and c==np.float32(3.25), c\n"
                 "e=np.load(d+'/e04.npy'); assert e.shape==(0,4), e\n"
                 "\"",
                 g_dir);
        int rc = system(cmd);
        if (WIFEXITED(rc) && WEXITSTATUS(rc) == 77) printf("numpy check skipped: no numpy\n");
        else CHECK(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "numpy.load rejected the files (status %d)", rc);
    } else {
        printf("numpy check skipped: no /usr/bin/python3\n");
    }

    /* errors */
    CHECK_ERR(rec_npy_write("/nonexistent-rec-dir/x.npy", a7, NULL, 1, (int64_t[]){7}), REC_EIO,
              "/nonexistent-rec-dir/x.npy.tmp: cannot create: No such file or directory");
    char path[128], tmp[160];
    snprintf(path, sizeof path, "%s/isdir.npy", g_dir); /* a directory in the way: refused before writing */
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(mkdir(path, 0700) == 0, "mkdir %s: %s", path, strerror(errno));
    CHECK_ERR(rec_npy_write(path, a7, NULL, 1, (int64_t[]){7}), REC_EINVAL, "is a directory");
    CHECK(strstr(rec_errmsg(), path) != NULL, "message \"%s\" should name %s", rec_errmsg(), path);
    CHECK(access(tmp, F_OK) != 0, "the temporary file is left behind after a failed rename");
    CHECK_ERR(rec_npy_write(path, a7, NULL, 9, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 1, 1}), REC_EINVAL,
              "9-dimensional array; supported are 0 to 8 dimensions");
    CHECK_ERR(rec_npy_write(path, a7, NULL, 2, (int64_t[]){3, -1}), REC_EINVAL, "dimension 1 is -1");

    rmdir(path);
    const char *names[] = {"a35.npy", "a7.npy", "a0.npy", "e04.npy"};
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", g_dir, names[i]);
        unlink(path);
    }
    rmdir(g_dir);
}

int main(void) {
    rec_rng_seed(&g_rng, 20240601, 0);
    test_random_sets();
    test_large_auc();
    test_hand_computed();
    test_reset_and_errors();
    test_lr();
    test_npy();
    return check_report();
}
