/* Tests of the synthetic Criteo generator (src/io/gen.c): determinism across call splits and
 * thread counts, the TSV format, the stated statistics (missing rates, Zipf skew, CTR,
 * planted-model calibration, multi-hot lengths, day drift, negative I2) and error paths. */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "check.h"
#include "rectrain/core.h"
#include "rectrain/io.h"

enum { NI = REC_CRITEO_NINT, NC = REC_CRITEO_NCAT };

static const int64_t KAGGLE[NC] = {1460,  583,   10131227, 2202608, 305,     24,    12517, 633, 3,
                                   93145, 5683,  8351593,  3194,    27,      14992, 5461306, 10,
                                   5652,  2173,  4,        7046547, 18,      15,    286181, 105, 142572};
static const int MH[NC] = {3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1, 6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1};
/* The table of gen.c, restated: the test checks the generator against the documented rates. */
static const double MISS_INT[NI] = {0.45, 0.0, 0.21, 0.22, 0.03, 0.22, 0.04, 0.0005, 0.04, 0.45, 0.04, 0.76, 0.22};
static const double MISS_CAT[NC] = {0, 0, 0.03, 0.03, 0, 0, 0, 0, 0, 0, 0, 0.03, 0,
                                    0, 0, 0.03, 0, 0, 0.44, 0.44, 0.03, 0.76, 0, 0.03, 0.44, 0.44};

/* ---- a small independent parser ----------------------------------------------------------- */

typedef struct parsed {
    int64_t n;
    int8_t *label;     /* (n) */
    int64_t *ival;     /* (n, 13) */
    uint8_t *inull;    /* (n, 13) */
    int32_t *len;      /* (n, 26) ids in the field, 0 = missing */
    int64_t *first;    /* (n, 26) index of the field's first id in ids[t] */
    uint32_t *ids[NC];
    int64_t nids[NC], capids[NC];
} parsed;

static void parsed_free(parsed *p) {
    free(p->label);
    free(p->ival);
    free(p->inull);
    free(p->len);
    free(p->first);
    for (int t = 0; t < NC; t++) free(p->ids[t]);
    memset(p, 0, sizeof *p);
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* Parses `rows` lines of text; returns 0, or -1 after printing the first defect. */
static int parse_rows(const char *buf, size_t len, int64_t rows, int with_label, int multi_hot, parsed *p) {
    memset(p, 0, sizeof *p);
    p->label = calloc((size_t)rows + 1, 1);
    p->ival = calloc((size_t)rows * NI + 1, sizeof *p->ival);
    p->inull = calloc((size_t)rows * NI + 1, 1);
    p->len = calloc((size_t)rows * NC + 1, sizeof *p->len);
    p->first = calloc((size_t)rows * NC + 1, sizeof *p->first);
    const char *s = buf, *end = buf + len;
    int64_t r = 0;
    while (s < end) {
        if (r >= rows) { fprintf(stderr, "more than %lld rows\n", (long long)rows); return -1; }
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        if (!nl) { fprintf(stderr, "row %lld: no newline\n", (long long)r); return -1; }
        int field = with_label ? 0 : 1;
        const char *f = s;
        while (f <= nl) {
            const char *fe = f;
            while (fe < nl && *fe != '\t') fe++;
            size_t fl = (size_t)(fe - f);
            if (field >= 40) { fprintf(stderr, "row %lld: too many fields\n", (long long)r); return -1; }
            if (field == 0) {
                if (fl != 1 || (f[0] != '0' && f[0] != '1')) { fprintf(stderr, "row %lld: bad label\n", (long long)r); return -1; }
                p->label[r] = (int8_t)(f[0] - '0');
            } else if (field <= NI) {
                int j = field - 1;
                if (fl == 0) {
                    p->inull[r * NI + j] = 1;
                } else {
                    const char *q = f;
                    int neg = *q == '-';
                    q += neg;
                    if (q == fe || fe - q > 10) { fprintf(stderr, "row %lld: bad int I%d\n", (long long)r, j + 1); return -1; }
                    int64_t v = 0;
                    for (; q < fe; q++) {
                        if (*q < '0' || *q > '9') { fprintf(stderr, "row %lld: bad int I%d\n", (long long)r, j + 1); return -1; }
                        v = v * 10 + (*q - '0');
                    }
                    p->ival[r * NI + j] = neg ? -v : v;
                }
            } else {
                int t = field - 1 - NI;
                p->first[r * NC + t] = p->nids[t];
                int cnt = 0;
                const char *q = f;
                while (q < fe) {
                    uint32_t id = 0;
                    for (int k = 0; k < 8; k++) {
                        int h = q + k < fe ? hexval(q[k]) : -1;
                        if (h < 0) { fprintf(stderr, "row %lld: C%d is not 8 lowercase hex digits\n", (long long)r, t + 1); return -1; }
                        id = id << 4 | (uint32_t)h;
                    }
                    q += 8;
                    if (q < fe) {
                        if (*q != ',' || !multi_hot || q + 1 == fe) { fprintf(stderr, "row %lld: C%d: bad separator\n", (long long)r, t + 1); return -1; }
                        q++;
                    }
                    if (p->nids[t] == p->capids[t]) {
                        p->capids[t] = p->capids[t] ? 2 * p->capids[t] : 1024;
                        p->ids[t] = realloc(p->ids[t], sizeof(uint32_t) * (size_t)p->capids[t]);
                    }
                    p->ids[t][p->nids[t]++] = id;
                    cnt++;
                }
                p->len[r * NC + t] = cnt;
            }
            field++;
            f = fe + 1;
        }
        if (field != 40) { fprintf(stderr, "row %lld: %d fields\n", (long long)r, field - (with_label ? 0 : 1)); return -1; }
        s = nl + 1;
        r++;
    }
    p->n = r;
    return r == rows ? 0 : -1;
}

/* Generates rows [0, n) of a generator made for `total` rows. Caller frees *buf and *prob. */
static int gen_text(const rec_gen_opts *o, int64_t total, int64_t n, char **buf, size_t *len, float **prob) {
    rec_gen *g;
    if (rec_gen_init(&g, o, total)) { fprintf(stderr, "init: %s\n", rec_errmsg()); return -1; }
    size_t cap = rec_gen_max_row_bytes(g) * (size_t)n;
    *buf = malloc(cap + 1);
    *prob = malloc(sizeof(float) * (size_t)(n + 1));
    rec_status s = rec_gen_rows(g, 0, n, *buf, cap, len, *prob);
    rec_gen_free(g);
    if (s) { fprintf(stderr, "rows: %s\n", rec_errmsg()); return -1; }
    return 0;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}
static int cmp_i64_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x > y ? -1 : x < y;
}

/* Counts of distinct values in v[0..n) (sorted in place), largest first; returns how many. */
static int64_t value_counts(uint32_t *v, int64_t n, int64_t *counts) {
    qsort(v, (size_t)n, sizeof *v, cmp_u32);
    int64_t k = 0;
    for (int64_t i = 0; i < n;) {
        int64_t j = i;
        while (j < n && v[j] == v[i]) j++;
        counts[k++] = j - i;
        i = j;
    }
    qsort(counts, (size_t)k, sizeof *counts, cmp_i64_desc);
    return k;
}

/* The most frequent `top` ids of table t among rows [r0, r1), into out (sorted). */
static void top_ids(const parsed *p, int t, int64_t r0, int64_t r1, int top, uint32_t *out) {
    int64_t n = 0;
    uint32_t *v = malloc(sizeof(uint32_t) * (size_t)(r1 - r0) + 4);
    for (int64_t r = r0; r < r1; r++)
        if (p->len[r * NC + t]) v[n++] = p->ids[t][p->first[r * NC + t]];
    qsort(v, (size_t)n, sizeof *v, cmp_u32);
    /* (count, id) pairs, pick the largest counts */
    int64_t k = 0;
    int64_t *cnt = malloc(sizeof(int64_t) * (size_t)(n + 1));
    uint32_t *ids = malloc(sizeof(uint32_t) * (size_t)(n + 1));
    for (int64_t i = 0; i < n;) {
        int64_t j = i;
        while (j < n && v[j] == v[i]) j++;
        cnt[k] = j - i;
        ids[k++] = v[i];
        i = j;
    }
    for (int m = 0; m < top; m++) {
        int64_t best = -1;
        for (int64_t i = 0; i < k; i++)
            if (cnt[i] >= 0 && (best < 0 || cnt[i] > cnt[best])) best = i;
        out[m] = best >= 0 ? ids[best] : 0xffffffffu - (uint32_t)m;
        if (best >= 0) cnt[best] = -1;
    }
    qsort(out, (size_t)top, sizeof *out, cmp_u32);
    free(v);
    free(cnt);
    free(ids);
}

static int overlap(const uint32_t *a, const uint32_t *b, int n) {
    int c = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) c += a[i] == b[j];
    return c;
}

/* ---- tests -------------------------------------------------------------------------------- */

static void test_defaults_and_cardinality(void) {
    rec_gen_opts o;
    memset(&o, 0x5a, sizeof o);
    rec_gen_opts_default(&o);
    CHECK(o.seed == 1 && o.scale == 1.0 && o.multi_hot == 0 && o.days == 1 && o.with_label == 1,
          "defaults seed %llu scale %g mh %d days %d label %d", (unsigned long long)o.seed, o.scale,
          o.multi_hot, o.days, o.with_label);
    int ok = 1;
    for (int c = 0; c < NC; c++) ok &= rec_gen_cardinality(&o, c) == KAGGLE[c];
    CHECK(ok, "scale 1 gives the Kaggle cardinalities");
    o.scale = 0.01;
    CHECK(rec_gen_cardinality(&o, 2) == 101312, "C3 at 0.01: %lld", (long long)rec_gen_cardinality(&o, 2));
    CHECK(rec_gen_cardinality(&o, 0) == 15, "C1 at 0.01 rounds 14.6 to 15: %lld", (long long)rec_gen_cardinality(&o, 0));
    CHECK(rec_gen_cardinality(&o, 8) == 2, "C9 at 0.01 is at least 2: %lld", (long long)rec_gen_cardinality(&o, 8));
    CHECK(rec_gen_cardinality(&o, 19) == 2, "C20 at 0.01 is at least 2");
    o.scale = 2;
    CHECK(rec_gen_cardinality(&o, 20) == 2 * 7046547, "C21 at 2");
    CHECK(rec_gen_cardinality(&o, -1) == 0 && rec_gen_cardinality(&o, 26) == 0, "out-of-range column");
}

static void test_determinism(void) {
    rec_gen_opts o;
    rec_gen_opts_default(&o);
    o.seed = 7;
    o.scale = 0.01;
    o.days = 3; /* day boundaries fall inside the split calls */
    const int64_t N = 20000;
    char *a, *b;
    float *pa, *pb;
    size_t la, lb;
    if (gen_text(&o, N, N, &a, &la, &pa)) { CHECK(0, "gen"); return; }
    /* same options, another generator: same bytes */
    if (gen_text(&o, N, N, &b, &lb, &pb)) { CHECK(0, "gen"); return; }
    CHECK(la == lb && memcmp(a, b, la) == 0 && memcmp(pa, pb, sizeof(float) * N) == 0, "same seed, same bytes");
    free(b);
    free(pb);

    /* split into calls of 1, 7, 1000, 6666 and the rest */
    rec_gen *g;
    CHECK(rec_gen_init(&g, &o, N) == REC_OK, "init: %s", rec_errmsg());
    size_t cap = rec_gen_max_row_bytes(g) * (size_t)N;
    b = malloc(cap);
    pb = malloc(sizeof(float) * N);
    const int64_t cuts[] = {0, 1, 8, 1008, 7674, N};
    size_t at = 0;
    for (int i = 0; i + 1 < (int)(sizeof cuts / sizeof cuts[0]); i++) {
        size_t l;
        rec_status s = rec_gen_rows(g, cuts[i], cuts[i + 1] - cuts[i], b + at, cap - at, &l, pb + cuts[i]);
        CHECK(s == REC_OK, "split call: %s", rec_errmsg());
        at += l;
    }
    CHECK(at == la && memcmp(a, b, la) == 0 && memcmp(pa, pb, sizeof(float) * N) == 0,
          "split calls give the same bytes and probabilities");
    /* rows from the middle alone */
    size_t l;
    CHECK(rec_gen_rows(g, 1008, 10, b, cap, &l, pb) == REC_OK, "middle rows");
    const char *row1008 = a;
    for (int i = 0; i < 1008; i++) row1008 = strchr(row1008, '\n') + 1;
    CHECK(memcmp(row1008, b, l) == 0 && pb[0] == pa[1008], "rows 1008..1017 alone match");
    rec_gen_free(g);
    free(b);
    free(pb);

    /* a different seed differs */
    o.seed = 8;
    if (gen_text(&o, N, N, &b, &lb, &pb)) { CHECK(0, "gen"); return; }
    CHECK(!(la == lb && memcmp(a, b, la < lb ? la : lb) == 0), "another seed gives other bytes");
    free(b);
    free(pb);

    /* the test format is the train format without the label column, row for row */
    o.seed = 7;
    o.with_label = 0;
    if (gen_text(&o, N, N, &b, &lb, &pb)) { CHECK(0, "gen"); return; }
    int same = memcmp(pa, pb, sizeof(float) * N) == 0;
    const char *x = a, *y = b;
    for (int64_t r = 0; r < N && same; r++) {
        const char *xe = strchr(x, '\n'), *ye = strchr(y, '\n');
        same = x[1] == '\t' && xe - (x + 2) == ye - y && memcmp(x + 2, y, (size_t)(ye - y)) == 0;
        x = xe + 1;
        y = ye + 1;
    }
    CHECK(same, "test-format rows are train rows without the label");
    parsed p;
    CHECK(parse_rows(b, lb, N, 0, 0, &p) == 0, "test format parses with 39 fields");
    parsed_free(&p);
    free(a);
    free(pa);
    free(b);
    free(pb);
}

static int read_file(const char *path, char **buf, size_t *len) {
    *buf = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    *buf = malloc((size_t)n + 1);
    *len = fread(*buf, 1, (size_t)n, f);
    fclose(f);
    return *len == (size_t)n ? 0 : -1;
}

static void test_write(const char *dir) {
    rec_gen_opts o;
    rec_gen_opts_default(&o);
    o.seed = 11;
    o.scale = 0.01;
    o.days = 2;
    const int64_t N = 150000; /* several tasks of ~33K rows, and several batches on one thread */
    char path[3][512], ppath[3][512];
    const int threads[3] = {1, 2, 3};
    for (int i = 0; i < 3; i++) {
        snprintf(path[i], sizeof path[i], "%s/w%d.tsv", dir, threads[i]);
        snprintf(ppath[i], sizeof ppath[i], "%s/w%d.prob", dir, threads[i]);
        rec_status s = rec_gen_write(&o, N, path[i], ppath[i], threads[i], NULL);
        CHECK(s == REC_OK, "write with %d threads: %s", threads[i], rec_errmsg());
    }
    char *ref, *pref;
    float *prob;
    size_t lref;
    if (gen_text(&o, N, N, &ref, &lref, &prob)) { CHECK(0, "gen"); return; }
    pref = malloc(9 * (size_t)N + 1);
    for (int64_t r = 0; r < N; r++) snprintf(pref + 9 * r, 10, "%.6f\n", (double)prob[r]);
    for (int i = 0; i < 3; i++) {
        char *buf = NULL, *pbuf = NULL;
        size_t len = 0, plen = 0;
        CHECK(read_file(path[i], &buf, &len) == 0 && read_file(ppath[i], &pbuf, &plen) == 0, "read back");
        CHECK(buf && len == lref && memcmp(buf, ref, len) == 0, "file with %d threads equals rec_gen_rows output", threads[i]);
        CHECK(pbuf && plen == 9 * (size_t)N && memcmp(pbuf, pref, plen) == 0,
              "prob file with %d threads equals printf(\"%%.6f\") of prob[]", threads[i]);
        free(buf);
        free(pbuf);
        unlink(path[i]);
        unlink(ppath[i]);
    }
    free(ref);
    free(pref);
    free(prob);

    /* zero rows: empty file */
    snprintf(path[0], sizeof path[0], "%s/empty.tsv", dir);
    CHECK(rec_gen_write(&o, 0, path[0], NULL, 2, NULL) == REC_OK, "zero rows: %s", rec_errmsg());
    char *buf = NULL;
    size_t len = 0;
    CHECK(read_file(path[0], &buf, &len) == 0 && len == 0, "zero rows give an empty file");
    free(buf);
    unlink(path[0]);
}

/* The share of the top `k` ranks of a Zipf(1.2) over n ids. */
static double zipf_top_share(int64_t n, int64_t k) {
    double top = 0, all = 0;
    for (int64_t i = n; i >= 1; i--) { /* small terms first */
        double v = pow((double)i, -1.2);
        all += v;
        if (i <= k) top += v;
    }
    return top / all;
}

static void test_stats(void) {
    rec_gen_opts o;
    rec_gen_opts_default(&o);
    o.seed = 3;
    o.scale = 0.01;
    const int64_t N = 200000;
    char *buf;
    float *prob;
    size_t len;
    if (gen_text(&o, N, N, &buf, &len, &prob)) { CHECK(0, "gen"); return; }
    parsed p;
    int ok = parse_rows(buf, len, N, 1, 0, &p) == 0;
    CHECK(ok, "200k rows parse: 40 fields, 8-hex-digit ids");
    if (!ok) { parsed_free(&p); free(buf); free(prob); return; }

    /* Missing rates. Binomial sd at p = 0.5 and n = 200k is 0.0011; 0.006 is > 5 sd. */
    for (int j = 0; j < NI; j++) {
        int64_t m = 0;
        for (int64_t r = 0; r < N; r++) m += p.inull[r * NI + j];
        double rate = (double)m / N;
        CHECK(fabs(rate - MISS_INT[j]) < 0.006, "I%d missing %.4f, want %.4f", j + 1, rate, MISS_INT[j]);
    }
    for (int t = 0; t < NC; t++) {
        int64_t m = 0;
        for (int64_t r = 0; r < N; r++) m += p.len[r * NC + t] == 0;
        double rate = (double)m / N;
        CHECK(fabs(rate - MISS_CAT[t]) < 0.006, "C%d missing %.4f, want %.4f", t + 1, rate, MISS_CAT[t]);
    }

    /* Integers: I2 is negative (-3..-1) in ~10% of rows, no other column is negative; tails are heavy. */
    int64_t neg = 0, other_neg = 0, i5_max = 0, i2_min = 0;
    for (int64_t r = 0; r < N; r++)
        for (int j = 0; j < NI; j++) {
            if (p.inull[r * NI + j]) continue;
            int64_t v = p.ival[r * NI + j];
            if (j == 1 && v < 0) neg++;
            if (j == 1 && v < i2_min) i2_min = v;
            if (j != 1 && v < 0) other_neg++;
            if (j == 4 && v > i5_max) i5_max = v;
        }
    CHECK(fabs((double)neg / N - 0.10) < 0.01 && i2_min == -3, "I2 negative in %.4f of rows (want 0.10), min %lld",
          (double)neg / N, (long long)i2_min);
    CHECK(other_neg == 0, "%lld negative values outside I2", (long long)other_neg);
    CHECK(i5_max > 1000000, "I5 is heavy-tailed: max %lld", (long long)i5_max);

    /* Distinct ids never exceed the cardinality; big tables show many. */
    int64_t *counts = malloc(sizeof(int64_t) * (size_t)N);
    for (int t = 0; t < NC; t++) {
        int64_t card = rec_gen_cardinality(&o, t);
        int64_t d = value_counts(p.ids[t], p.nids[t], counts);
        CHECK(d <= card, "C%d: %lld distinct ids > cardinality %lld", t + 1, (long long)d, (long long)card);
        if (card >= 10000) CHECK(d > card / 20, "C%d: only %lld distinct of %lld", t + 1, (long long)d, (long long)card);
    }
    /* Skew: the top 0.1% of C3's 101312 ids (101) should take H(101)/H(101312) of the draws
     * under Zipf(1.2), ~70.5%; allow 0.02 for sampling. */
    {
        int64_t card = rec_gen_cardinality(&o, 2), k = card / 1000;
        int64_t d = value_counts(p.ids[2], p.nids[2], counts);
        int64_t top = 0;
        for (int64_t i = 0; i < k && i < d; i++) top += counts[i];
        double share = (double)top / (double)p.nids[2], want = zipf_top_share(card, k);
        CHECK(fabs(share - want) < 0.02 && share > 0.65, "C3 top 0.1%% share %.4f, Zipf(1.2) says %.4f", share, want);
        printf("info: scale 0.01, C3 top 0.1%% share %.4f (Zipf(1.2) %.4f)\n", share, want);
    }

    /* CTR and the planted model. */
    double lab = 0, pm = 0, z1 = 0, z2 = 0;
    for (int64_t r = 0; r < N; r++) {
        lab += p.label[r];
        pm += prob[r];
        double z = log(prob[r] / (1.0 - prob[r]));
        z1 += z;
        z2 += z * z;
    }
    lab /= N;
    pm /= N;
    double zsd = sqrt(z2 / N - (z1 / N) * (z1 / N));
    CHECK(lab > 0.22 && lab < 0.28, "mean CTR %.4f outside 0.22..0.28", lab);
    /* label mean vs prob mean: sd of the difference is sqrt(0.19 / 200k) = 0.001 */
    CHECK(fabs(lab - pm) < 0.005, "label rate %.4f vs mean prob %.4f", lab, pm);
    CHECK(zsd > 1.3 && zsd < 1.7, "logit sd %.3f, want ~1.5", zsd);
    /* AUC of the true probability (the ceiling a model can reach): with logit sd 1.5 ~0.8. */
    {
        int64_t *key = malloc(sizeof(int64_t) * (size_t)N);
        for (int64_t r = 0; r < N; r++) { /* sort by prob descending, label in the low bit */
            uint32_t bits;
            memcpy(&bits, &prob[r], 4);
            key[r] = (int64_t)bits * 2 + p.label[r];
        }
        qsort(key, (size_t)N, sizeof *key, cmp_i64_desc);
        double pos = 0, neg_seen = 0, area = 0;
        for (int64_t r = 0; r < N; r++) {
            if (key[r] & 1) pos++;
            else { area += pos; neg_seen++; }
        }
        double auc = area / (pos * neg_seen);
        CHECK(auc > 0.74 && auc < 0.88, "AUC of the true probability %.4f", auc);
        printf("info: CTR %.4f, mean prob %.4f, logit sd %.3f, AUC of true prob %.4f\n", lab, pm, zsd, auc);
        free(key);
    }
    /* Probabilities depend on the features: rows with equal features have equal probability
     * (checked indirectly: the label-less rows in test_determinism carry the same prob). */
    free(counts);
    parsed_free(&p);
    free(buf);
    free(prob);

    /* At scale 1 the top 0.1% of C3 (10131 of 10.1M ids) takes ~89% (Zipf 1.2); in a sample
     * of 100k draws the observed top 10131 take at least that. */
    o.scale = 1;
    const int64_t M = 100000;
    if (gen_text(&o, M, M, &buf, &len, &prob)) { CHECK(0, "gen"); return; }
    ok = parse_rows(buf, len, M, 1, 0, &p) == 0;
    CHECK(ok, "scale 1 rows parse");
    if (ok) {
        counts = malloc(sizeof(int64_t) * (size_t)M);
        int64_t d = value_counts(p.ids[2], p.nids[2], counts), top = 0;
        for (int64_t i = 0; i < 10131 && i < d; i++) top += counts[i];
        double share = (double)top / (double)p.nids[2];
        CHECK(share > 0.85, "scale 1: top 0.1%% of C3 take %.4f of accesses (want ~0.89)", share);
        printf("info: scale 1, C3 top 0.1%% share %.4f\n", share);
        free(counts);
    }
    parsed_free(&p);
    free(buf);
    free(prob);
}

static void test_multi_hot(void) {
    rec_gen_opts o;
    rec_gen_opts_default(&o);
    o.seed = 5;
    o.scale = 0.01;
    o.multi_hot = 1;
    const int64_t N = 20000;
    char *buf;
    float *prob;
    size_t len;
    if (gen_text(&o, N, N, &buf, &len, &prob)) { CHECK(0, "gen"); return; }
    parsed p;
    int ok = parse_rows(buf, len, N, 1, 1, &p) == 0;
    CHECK(ok, "multi-hot rows parse");
    if (ok) {
        for (int t = 0; t < NC; t++) {
            int64_t present = 0, sum = 0, maxl = 0;
            for (int64_t r = 0; r < N; r++) {
                int64_t l = p.len[r * NC + t];
                present += l > 0;
                sum += l;
                if (l > maxl) maxl = l;
            }
            double mean = (double)sum / (double)present;
            /* geometric lengths: sd ~ m, standard error m / sqrt(20000) < 1% of m */
            CHECK(fabs(mean - MH[t]) < 0.05 * MH[t] + 0.05, "C%d mean length %.3f, want %d", t + 1, mean, MH[t]);
            if (MH[t] == 1) CHECK(maxl == 1, "C%d is single-hot", t + 1);
            else CHECK(maxl > MH[t] && maxl <= 8 * MH[t], "C%d longest list %lld", t + 1, (long long)maxl);
        }
        double lab = 0;
        for (int64_t r = 0; r < N; r++) lab += p.label[r];
        CHECK(lab / N > 0.22 && lab / N < 0.28, "multi-hot CTR %.4f", lab / N);
    }
    parsed_free(&p);
    free(buf);
    free(prob);
}

static void test_days(void) {
    rec_gen_opts o;
    rec_gen_opts_default(&o);
    o.seed = 9;
    o.scale = 0.01;
    const int64_t N = 80000;
    uint32_t first[2][10], last[2][10];
    for (int d = 0; d < 2; d++) {
        o.days = d ? 4 : 1;
        char *buf;
        float *prob;
        size_t len;
        if (gen_text(&o, N, N, &buf, &len, &prob)) { CHECK(0, "gen"); return; }
        parsed p;
        int ok = parse_rows(buf, len, N, 1, 0, &p) == 0;
        CHECK(ok, "days=%d rows parse", o.days);
        if (ok) {
            top_ids(&p, 2, 0, N / 4, 10, first[d]);       /* C3, first day */
            top_ids(&p, 2, 3 * N / 4, N, 10, last[d]);    /* C3, last day */
            uint32_t *v = malloc(sizeof(uint32_t) * (size_t)p.nids[2]);
            memcpy(v, p.ids[2], sizeof(uint32_t) * (size_t)p.nids[2]);
            int64_t *counts = malloc(sizeof(int64_t) * (size_t)p.nids[2]);
            int64_t dist = value_counts(v, p.nids[2], counts);
            CHECK(dist <= rec_gen_cardinality(&o, 2), "days=%d: distinct ids within the cardinality", o.days);
            free(v);
            free(counts);
        }
        parsed_free(&p);
        free(buf);
        free(prob);
    }
    int same1 = overlap(first[0], last[0], 10), same4 = overlap(first[1], last[1], 10);
    CHECK(same1 >= 8, "1 day: top-10 ids of C3 stable between quarters (%d of 10 shared)", same1);
    CHECK(same4 <= 2, "4 days: top-10 ids of C3 changed from the first to the last day (%d of 10 shared)", same4);
}

static void test_errors(const char *dir) {
    rec_gen_opts o;
    rec_gen_opts_default(&o);
    o.scale = 0.01;
    rec_gen *g;
    CHECK(rec_gen_init(&g, &o, 100) == REC_OK, "init");
    char *buf = malloc(rec_gen_max_row_bytes(g) * 100);
    float prob[100];
    size_t len = 123, full;
    rec_status s = rec_gen_rows(g, 0, 10, buf, 100, &len, prob);
    CHECK_ERR(s, REC_EINVAL, "rec_gen_max_row_bytes");
    CHECK_ERR(s, REC_EINVAL, "100 bytes");
    /* an exact-size buffer suffices; one byte less does not */
    CHECK(rec_gen_rows(g, 0, 50, buf, rec_gen_max_row_bytes(g) * 50, &full, prob) == REC_OK, "50 rows");
    CHECK(full < rec_gen_max_row_bytes(g) * 50 * 3 / 4, "rows are well under the bound (%zu)", full);
    char *copy = malloc(full);
    memcpy(copy, buf, full);
    CHECK(rec_gen_rows(g, 0, 50, buf, full, &len, prob) == REC_OK && len == full && !memcmp(buf, copy, full),
          "an exact-size buffer holds the rows: %s", rec_errmsg());
    s = rec_gen_rows(g, 0, 50, buf, full - 1, &len, prob);
    CHECK_ERR(s, REC_EINVAL, "row 49 does not fit");
    s = rec_gen_rows(g, 90, 20, buf, rec_gen_max_row_bytes(g) * 20, &len, prob);
    CHECK_ERR(s, REC_EINVAL, "outside the generator's 100 rows");
    s = rec_gen_rows(g, -1, 2, buf, rec_gen_max_row_bytes(g) * 2, &len, prob);
    CHECK_ERR(s, REC_EINVAL, "outside");
    free(copy);
    free(buf);
    rec_gen_free(g);

    rec_gen_opts bad = o;
    bad.scale = 0;
    CHECK_ERR(rec_gen_init(&g, &bad, 10), REC_EINVAL, "scale must be a positive number");
    CHECK(g == NULL, "no generator on failure");
    bad.scale = NAN;
    CHECK_ERR(rec_gen_init(&g, &bad, 10), REC_EINVAL, "scale");
    bad.scale = 1000;
    CHECK_ERR(rec_gen_init(&g, &bad, 10), REC_EINVAL, "2^32");
    bad = o;
    bad.days = 0;
    CHECK_ERR(rec_gen_init(&g, &bad, 10), REC_EINVAL, "days must be between 1");
    CHECK_ERR(rec_gen_init(&g, &o, -5), REC_EINVAL, "row count");

    char path[512], ok_path[512];
    snprintf(path, sizeof path, "%s/no-such-dir/out.tsv", dir);
    CHECK_ERR(rec_gen_write(&o, 10, path, NULL, 1, NULL), REC_EIO, path);
    CHECK_ERR(rec_gen_write(&o, 10, path, NULL, 1, NULL), REC_EIO, "out.tsv.tmp: cannot create");
    snprintf(ok_path, sizeof ok_path, "%s/ok.tsv", dir);
    CHECK_ERR(rec_gen_write(&o, 10, ok_path, path, 2, NULL), REC_EIO, path);
    CHECK(access(ok_path, F_OK) != 0, "a failed gen removes the TSV it opened");
    CHECK_ERR(rec_gen_write(&o, -1, ok_path, NULL, 1, NULL), REC_EINVAL, "row count");
    /* a full device: the write error names the file */
    if (access("/dev/full", W_OK) == 0) {
        CHECK_ERR(rec_gen_write(&o, 20000, "/dev/full", NULL, 2, NULL), REC_EIO, "cannot write '/dev/full'");
        CHECK_ERR(rec_gen_write(&o, 20000, ok_path, "/dev/full", 2, NULL), REC_EIO, "/dev/full");
        CHECK(access(ok_path, F_OK) != 0, "gen with a full --prob-out device leaves no TSV");
        CHECK(access("/dev/full", F_OK) == 0, "and leaves the device alone");
        /* A file of that name from before is left as it was (written whole or not at all). */
        FILE *old = fopen(ok_path, "w");
        if (old) fputs("old\n", old), fclose(old);
        CHECK_ERR(rec_gen_write(&o, 20000, ok_path, "/dev/full", 2, NULL), REC_EIO, "/dev/full");
        char back[8] = "";
        old = fopen(ok_path, "r");
        if (old) {
            if (!fgets(back, sizeof back, old)) back[0] = 0;
            fclose(old);
        }
        char tmp_path[600];
        snprintf(tmp_path, sizeof tmp_path, "%s.tmp", ok_path);
        CHECK(!strcmp(back, "old\n") && access(tmp_path, F_OK) != 0,
              "a failed gen keeps the previous file and leaves no .tmp (got '%s')", back);
        unlink(ok_path);
    }
    /* A stop (what the CLI's SIGINT handler stores): REC_ESTOPPED, both outputs removed. */
    char prob_path[600];
    snprintf(prob_path, sizeof prob_path, "%s.prob", ok_path);
    volatile sig_atomic_t stop = SIGINT;
    CHECK_ERR(rec_gen_write(&o, 20000, ok_path, prob_path, 2, &stop), REC_ESTOPPED,
              "stopped by SIGINT after 0 of 20000 rows; the partial output is removed");
    CHECK(access(ok_path, F_OK) != 0 && access(prob_path, F_OK) != 0, "a stopped gen leaves no output");
    /* Out of descriptors after OUT.tmp is made (the stream takes a duplicate of it): the
     * error names the file, and OUT.tmp is removed. Soft limit = lowest free descriptor + 1. */
    struct rlimit lim;
    const int lowest = dup(0);
    if (lowest >= 0 && getrlimit(RLIMIT_NOFILE, &lim) == 0) {
        close(lowest);
        struct rlimit tight = {(rlim_t)lowest + 1, lim.rlim_max};
        rec_status st = setrlimit(RLIMIT_NOFILE, &tight) == 0 ? rec_gen_write(&o, 10, ok_path, NULL, 1, NULL) : REC_OK;
        setrlimit(RLIMIT_NOFILE, &lim);
        CHECK_ERR(st, REC_EIO, "cannot set up writing");
        CHECK(strstr(rec_errmsg(), "ok.tsv") && strstr(rec_errmsg(), strerror(EMFILE)), "names the file and why: %s",
              rec_errmsg());
        char tmp_path[600];
        snprintf(tmp_path, sizeof tmp_path, "%s.tmp", ok_path);
        CHECK(access(ok_path, F_OK) != 0 && access(tmp_path, F_OK) != 0, "no output, no .tmp left");
    }
}

int main(void) {
    char dir[] = "/tmp/rectrain_test_gen_XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_defaults_and_cardinality();
    test_determinism();
    test_write(dir);
    test_stats();
    test_multi_hot();
    test_days();
    test_errors(dir);
    rmdir(dir);
    return check_report();
}
