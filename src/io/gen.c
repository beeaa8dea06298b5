/* rectrain — the synthetic Criteo generator (`rectrain gen`, DESIGN.md "Data").
 *
 * Every row is a pure function of (seed, row index, total rows): its RNG is
 * rec_rng_seed(seed, row), and the only use of the total is the row's day. Threads and call
 * splits therefore never change a byte of output.
 *
 * Per row, in this fixed order of RNG draws:
 *   I1..I13   one u64 each (top 16 bits: missing?, low 48 bits: the value), plus one extra
 *             u64 for I2 (negative?). Values are floor(scale * (U^(-1/alpha) - 1)), a discrete
 *             Lomax (Pareto II): heavy-tailed non-negative counts, clamped to 999999999.
 *   C1..C26   one u64 each (top 16 bits: missing?, low 48 bits: the multi-hot length), then
 *             one Zipf draw per element (rejection-inversion, usually one uniform). A
 *             multi-hot list is 1 + geometric(mean m - 1) ids, capped at 8 m; its elements
 *             are independent draws, so a list may repeat a hot id.
 *   label     one uniform, Bernoulli(p).
 *
 * Ids: the Zipf draw gives a popularity rank k in [1, n]; on day d the rank is rotated by
 * d * shift (shift = n / 2000, so tables of 2000+ ids drift: each day the hottest 0.05% of
 * ranks hand over to formerly cooler ids), and a keyed 32-bit bijection maps the rotated rank
 * to the 8-hex-digit id. Rotation is a permutation of [0, n) and the mix is bijective on
 * 32 bits, so distinct ranks always give distinct ids and a table never shows more than n
 * distinct ids, whatever the number of days.
 *
 * Planted model: logit = bias + k * (sum_j w_j * (log1p(max(Ij, 0)) - mu_j) / sd_j
 *                                    + sum_t mean over the field's ids of v(t, id)),
 * where v(t, id) is a stateless hash of (seed, t, id) mapped to an approximately standard
 * normal value (Irwin–Hall sum of four 16-bit uniforms). Missing fields contribute 0. mu_j,
 * sd_j, k (so that the logit has standard deviation 1.5) and the bias (so that the mean
 * click-through rate is 0.25) are fitted at init on 16384 calibration rows drawn from a
 * separate RNG stream — deterministic for given options and independent of the row count.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rectrain/core.h"
#include "rectrain/io.h"

enum { NI = REC_CRITEO_NINT, NC = REC_CRITEO_NCAT };

/* Kaggle Display Advertising Challenge cardinalities of C1..C26. */
static const int64_t KAGGLE_CARD[NC] = {1460,    583,   10131227, 2202608, 305,    24,    12517,
                                         633,     3,     93145,    5683,    8351593, 3194, 27,
                                         14992,   5461306, 10,     5652,    2173,   4,     7046547,
                                         18,      15,    286181,   105,     142572};

/* MLPerf DLRMv2 (Criteo 1TB multi-hot) mean ids per field of C1..C26. */
static const int MH_SIZE[NC] = {3, 2, 1, 2, 6, 1, 1, 1, 1, 7, 3, 8, 1,
                                6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1};
/* A multi-hot list of mean m > 1 is capped at MH_CAP * m ids (loses < 0.1% of the mean). */
enum { MH_CAP = 8 };
/* Sum over fields of the longest list (1 for m == 1, MH_CAP * m otherwise) = 1635. */
enum { GEN_MAX_IDS = 1664 };
/* Longest row: "L\t" + 13 * (up to 10 characters + tab, 12 reserved) + 9 bytes per id. */
enum { GEN_MAX_ROW = 2 + NI * 12 + GEN_MAX_IDS * 9 };

/* Missing rates, resembling the Criteo Kaggle train set (rounded):
 *   I1 45%  I2 0%  I3 21%  I4 22%  I5 3%  I6 22%  I7 4%  I8 0.05%  I9 4%  I10 45%  I11 4%
 *   I12 76% I13 22%
 *   C1 0  C2 0  C3 3%  C4 3%  C5..C11 0  C12 3%  C13..C15 0  C16 3%  C17 0  C18 0
 *   C19 44%  C20 44%  C21 3%  C22 76%  C23 0  C24 3%  C25 44%  C26 44% */
static const double MISS_INT[NI] = {0.45, 0.0,  0.21, 0.22, 0.03, 0.22, 0.04,
                                    0.0005, 0.04, 0.45, 0.04, 0.76, 0.22};
static const double MISS_CAT[NC] = {0,    0,    0.03, 0.03, 0, 0, 0, 0,    0,    0,    0,    0.03, 0,
                                    0,    0,    0.03, 0,    0, 0.44, 0.44, 0.03, 0.76, 0, 0.03, 0.44, 0.44};

/* Integer features: floor(scale * (U^(-1/alpha) - 1)). With alpha = 1 the median is `scale`
 * and P(X >= x) = scale / (scale + x) (very heavy tail, like I5's impression counts); with
 * alpha = 2 the median is 0.41 * scale and the tail is lighter. Medians follow Criteo's. */
static const double INT_SCALE[NI] = {1.0, 3.0, 6.0, 10.0, 2800.0, 30.0, 3.0,
                                     20.0, 40.0, 1.5, 1.5, 0.3, 10.0};
static const int INT_ALPHA2[NI] = {0, 0, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0, 1};
/* I2 (column index 1) is -1, -2 or -3 in 10% of rows, as Criteo's I2 has negative values. */
enum { NEG_COL = 1 };
static const double NEG_RATE = 0.10;
static const int32_t INT_MAX_VALUE = 999999999;

/* Zipf exponent: with 1.2, the top 0.1% of a 10M-id table takes ~89% of the draws. */
static const double ZIPF_S = 1.2;
static const double TARGET_LOGIT_SD = 1.5;
static const double TARGET_CTR = 0.25;
enum { N_CAL = 1 << 14 };
static const uint64_t M48 = (1ULL << 48) - 1;

typedef struct gen_table {
    int64_t n;           /* ids in the table */
    double hx1, hn, s;   /* rejection-inversion constants (see zipf_draw) */
    uint32_t k1, k2;     /* keys of the rank -> id bijection */
    int64_t shift;       /* ranks rotated per day */
    int lmax;            /* longest list; 1 = single-hot */
    double inv_log_q;    /* multi-hot: 1 / log(q) of the geometric extra length */
    uint32_t miss;       /* missing iff top 16 bits of a draw < miss */
    int ioff;            /* offset of this field's ids in gen_row.id */
} gen_table;

struct rec_gen {
    rec_gen_opts o;
    int64_t total;
    gen_table t[NC];
    uint32_t imiss[NI];
    uint32_t neg_thr;           /* I2 negative iff top 32 bits of a draw < neg_thr */
    double da[NI], dc[NI];      /* dense term of the raw logit: da * log1p(x) + dc */
    uint64_t wsalt;             /* key of the categorical weights */
    double kscale, bias;        /* logit = bias + kscale * raw */
    size_t max_row;
    double mean_row_bytes;
    float lut[1024];            /* log1p(x) for small x */
};

/* One row's drawn features, before formatting. */
typedef struct gen_row {
    int32_t ival[NI];
    uint8_t inull[NI];
    int16_t len[NC];            /* ids in field t; 0 = missing */
    double catsum;              /* categorical part of the raw logit */
    uint32_t id[GEN_MAX_IDS];   /* field t's ids start at g->t[t].ioff */
} gen_row;

/* Rows are made in runs; the day's rank offsets are recomputed only when the day changes. */
typedef struct gen_cursor {
    int64_t day;
    int64_t dayoff[NC];
    gen_row row;
} gen_cursor;

void rec_gen_opts_default(rec_gen_opts *o) {
    memset(o, 0, sizeof *o);
    o->seed = 1;
    o->scale = 1.0;
    o->multi_hot = 0;
    o->days = 1;
    o->with_label = 1;
}

int64_t rec_gen_cardinality(const rec_gen_opts *o, int c) {
    if (c < 0 || c >= NC) return 0;
    double v = (double)KAGGLE_CARD[c] * (o ? o->scale : 1.0);
    if (!(v >= 2.0)) return 2;
    if (v > 9e18) return INT64_MAX;
    return (int64_t)llround(v);
}

size_t rec_gen_max_row_bytes(const rec_gen *g) { return g->max_row; }

/* ---- Zipf sampling -----------------------------------------------------------------------
 * Rejection-inversion (Hörmann & Derflinger 1996, "Rejection-inversion to generate variates
 * from monotone discrete distributions", ACM TOMACS 6(3)), in the formulation of Apache
 * Commons Math's ZipfDistribution.ZipfRejectionInversionSampler. H is the integral of the
 * hat h(x) = x^-s; for s = 1.2, H(x) = 5 (1 - x^-0.2) and H^-1(u) = (1 - u/5)^-5, so the
 * common path costs one uniform, a few multiplies and one division. The rare rejection
 * test uses pow. */
static double zipf_H(double x) { return (1.0 - pow(x, 1.0 - ZIPF_S)) / (ZIPF_S - 1.0); }
static double zipf_h(double x) { return pow(x, -ZIPF_S); }
static double zipf_Hinv(double u) { return pow(1.0 - (ZIPF_S - 1.0) * u, -1.0 / (ZIPF_S - 1.0)); }

static void zipf_setup(gen_table *t) {
    t->hx1 = zipf_H(1.5) - 1.0;
    t->hn = zipf_H((double)t->n + 0.5);
    t->s = 2.0 - zipf_Hinv(zipf_H(2.5) - zipf_h(2.0));
}

/* A rank in [1, n] with P(k) proportional to k^-1.2. */
static inline int64_t zipf_draw(const gen_table *t, rec_rng *rng) {
    for (;;) {
        double u = t->hn + rec_rng_uniform(rng) * (t->hx1 - t->hn);
        double b = 1.0 - 0.2 * u; /* H^-1(u) = b^-5 for s = 1.2 */
        double b2 = b * b;
        double x = 1.0 / (b2 * b2 * b);
        int64_t k = (int64_t)(x + 0.5);
        if (k < 1) k = 1;
        else if (k > t->n) k = t->n;
        if ((double)k - x <= t->s || u >= zipf_H((double)k + 0.5) - zipf_h((double)k)) return k;
    }
}

/* ---- ids and weights ---------------------------------------------------------------------- */

/* Keyed bijection of 32-bit values: xor, odd multiplies and xorshifts are each invertible. */
static inline uint32_t perm32(uint32_t x, uint32_t k1, uint32_t k2) {
    x ^= k1;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x + k2;
}

/* Approximately N(0, 1) from 64 hashed bits: Irwin–Hall sum of four 16-bit uniforms,
 * centred and divided by its standard deviation 65536 / sqrt(3). */
static inline double hash_normal(uint64_t h) {
    uint64_t s = (h & 0xffff) + ((h >> 16) & 0xffff) + ((h >> 32) & 0xffff) + (h >> 48);
    return ((double)(int64_t)s - 2.0 * 65535.0) * (1.7320508075688772 / 65536.0);
}

static inline double cat_weight(const rec_gen *g, int t, uint32_t id) {
    return hash_normal(rec_mix64(g->wsalt ^ ((uint64_t)(t + 1) << 40) ^ id));
}

/* log(x) for x >= 1 via exponent extraction and the atanh series (|error| < 1e-7). */
static inline double fast_log(double x) {
    uint64_t b;
    memcpy(&b, &x, 8);
    int e = (int)(b >> 52) - 1023;
    b = (b & 0x000FFFFFFFFFFFFFULL) | 0x3FF0000000000000ULL;
    double m;
    memcpy(&m, &b, 8);
    if (m > 1.4142135623730951) { m *= 0.5; e++; }
    double y = (m - 1.0) / (m + 1.0), y2 = y * y;
    return e * 0.6931471805599453 +
           2.0 * y * (1.0 + y2 * (1.0 / 3 + y2 * (1.0 / 5 + y2 * (1.0 / 7 + y2 * (1.0 / 9)))));
}

static inline double dense_g(const rec_gen *g, int32_t x) {
    if (x <= 0) return 0.0;
    if (x < 1024) return g->lut[x];
    return fast_log((double)x + 1.0);
}

/* ---- drawing a row -------------------------------------------------------------------- */

static void cursor_day(const rec_gen *g, gen_cursor *c, int64_t day) {
    c->day = day;
    for (int t = 0; t < NC; t++)
        c->dayoff[t] = (int64_t)(((unsigned __int128)day * (uint64_t)g->t[t].shift) % (uint64_t)g->t[t].n);
}

/* Draws the features of one row (see the draw order at the top of the file). */
static void gen_draw(const rec_gen *g, rec_rng *rng, const int64_t *dayoff, gen_row *row) {
    for (int j = 0; j < NI; j++) {
        uint64_t u = rec_rng_u64(rng);
        row->inull[j] = (uint32_t)(u >> 48) < g->imiss[j];
        double U = ((double)(u & M48) + 0.5) * 0x1p-48;
        double y = INT_ALPHA2[j] ? 1.0 / sqrt(U) : 1.0 / U;
        double v = INT_SCALE[j] * (y - 1.0);
        int32_t x = v < (double)INT_MAX_VALUE ? (int32_t)v : INT_MAX_VALUE;
        if (j == NEG_COL) {
            uint64_t u2 = rec_rng_u64(rng);
            if ((uint32_t)(u2 >> 32) < g->neg_thr) x = -1 - (int32_t)((u2 & 0xffff) % 3);
        }
        row->ival[j] = x;
    }
    double cs = 0.0;
    for (int t = 0; t < NC; t++) {
        const gen_table *tb = &g->t[t];
        uint64_t u = rec_rng_u64(rng);
        if ((uint32_t)(u >> 48) < tb->miss) {
            row->len[t] = 0;
            continue;
        }
        int L = 1;
        if (tb->lmax > 1) { /* 1 + geometric(mean m - 1), capped */
            double U = ((double)(u & M48) + 0.5) * 0x1p-48;
            double e = log(U) * tb->inv_log_q;
            L = e >= (double)(tb->lmax - 1) ? tb->lmax : 1 + (int)e;
        }
        uint32_t *ids = row->id + tb->ioff;
        double ws = 0.0;
        for (int e = 0; e < L; e++) {
            int64_t rank = zipf_draw(tb, rng) - 1 + dayoff[t];
            if (rank >= tb->n) rank -= tb->n;
            uint32_t id = perm32((uint32_t)rank, tb->k1, tb->k2);
            ids[e] = id;
            ws += cat_weight(g, t, id);
        }
        cs += L == 1 ? ws : ws / L;
        row->len[t] = (int16_t)L;
    }
    row->catsum = cs;
}

static inline double gen_logit(const rec_gen *g, const gen_row *row) {
    double z = row->catsum;
    for (int j = 0; j < NI; j++)
        if (!row->inull[j]) z += g->da[j] * dense_g(g, row->ival[j]) + g->dc[j];
    return g->bias + g->kscale * z;
}

/* ---- formatting (no printf in the hot path) ------------------------------------------------ */

static const char DIG2[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

static inline char *fmt_int(char *w, int32_t x) {
    if (x < 0) {
        *w++ = '-';
        x = -x; /* x >= -3 here, never INT32_MIN */
    }
    uint32_t v = (uint32_t)x;
    int nd = v < 10 ? 1 : v < 100 ? 2 : v < 1000 ? 3 : v < 10000 ? 4 : v < 100000 ? 5
           : v < 1000000 ? 6 : v < 10000000 ? 7 : v < 100000000 ? 8 : 9; /* v <= 999999999 */
    char *p = w + nd;
    while (v >= 100) {
        uint32_t q = v / 100;
        p -= 2;
        memcpy(p, DIG2 + 2 * (v - q * 100), 2);
        v = q;
    }
    if (v >= 10) memcpy(p - 2, DIG2 + 2 * v, 2);
    else p[-1] = (char)('0' + v);
    return w + nd;
}

/* Eight lowercase hex digits, most significant first: spread the nibbles into bytes,
 * byte-swap, then add '0' or 'a' - 10 per byte without branches. */
static inline char *fmt_hex8(char *w, uint32_t x) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t v = x;
    v = (v | (v << 16)) & 0x0000FFFF0000FFFFULL;
    v = (v | (v << 8)) & 0x00FF00FF00FF00FFULL;
    v = (v | (v << 4)) & 0x0F0F0F0F0F0F0F0FULL;
    v = __builtin_bswap64(v);
    uint64_t gt9 = ((v + 0x0606060606060606ULL) >> 4) & 0x0101010101010101ULL;
    v += 0x3030303030303030ULL + gt9 * 39;
    memcpy(w, &v, 8);
#else
    static const char HEX[] = "0123456789abcdef";
    for (int i = 0; i < 8; i++) w[i] = HEX[(x >> (28 - 4 * i)) & 15];
#endif
    return w + 8;
}

static char *gen_format(const rec_gen *g, const gen_row *row, int label, char *w) {
    if (g->o.with_label) {
        *w++ = (char)('0' + label);
        *w++ = '\t';
    }
    for (int j = 0; j < NI; j++) {
        if (!row->inull[j]) w = fmt_int(w, row->ival[j]);
        *w++ = '\t';
    }
    for (int t = 0; t < NC; t++) {
        int L = row->len[t];
        const uint32_t *ids = row->id + g->t[t].ioff;
        for (int e = 0; e < L; e++) {
            w = fmt_hex8(w, ids[e]);
            *w++ = ',';
        }
        char sep = t == NC - 1 ? '\n' : '\t';
        if (L) w[-1] = sep;
        else *w++ = sep;
    }
    return w;
}

/* "%.6f\n" of p in [0, 1]: always 9 bytes. p * 1e6 is exact in double for a float p, so
 * rounding half to even on it gives the same digits as printf. */
static inline char *fmt_prob(char *w, float p) {
    double y = (double)p * 1e6;
    uint32_t k = (uint32_t)y;
    double fr = y - (double)k;
    k += fr > 0.5 || (fr == 0.5 && (k & 1));
    if (k >= 1000000) {
        memcpy(w, "1.000000\n", 9);
        return w + 9;
    }
    w[0] = '0';
    w[1] = '.';
    memcpy(w + 2, DIG2 + 2 * (k / 10000), 2);
    memcpy(w + 4, DIG2 + 2 * (k / 100 % 100), 2);
    memcpy(w + 6, DIG2 + 2 * (k % 100), 2);
    w[8] = '\n';
    return w + 9;
}

/* Generates row r into w (at least g->max_row bytes), its probability into *p (if p), and
 * returns the end of the text. */
static char *gen_one(const rec_gen *g, gen_cursor *c, int64_t r, char *w, float *p) {
    int64_t day = g->o.days == 1 ? 0
                                 : (int64_t)(((unsigned __int128)(uint64_t)r * (uint64_t)g->o.days) /
                                             (uint64_t)g->total);
    if (day != c->day) cursor_day(g, c, day);
    rec_rng rng;
    rec_rng_seed(&rng, g->o.seed, (uint64_t)r);
    gen_draw(g, &rng, c->dayoff, &c->row);
    float pf = (float)(1.0 / (1.0 + exp(-gen_logit(g, &c->row))));
    int label = rec_rng_uniform(&rng) < (double)pf;
    if (p) *p = pf;
    return gen_format(g, &c->row, label, w);
}

/* Formats rows from row0 while at least max_row bytes remain in buf[*len..cap); returns how
 * many rows it made (< n when the buffer ran short) and advances *len. */
static int64_t gen_core(const rec_gen *g, gen_cursor *c, int64_t row0, int64_t n, char *buf,
                        size_t cap, size_t *len, float *prob) {
    size_t at = *len;
    int64_t i = 0;
    for (; i < n && cap - at >= g->max_row; i++)
        at = (size_t)(gen_one(g, c, row0 + i, buf + at, prob ? prob + i : NULL) - buf);
    *len = at;
    return i;
}

/* ---- init: tables and calibration ------------------------------------------------------- */

/* Fits the dense normalisation, the logit scale and the bias on N_CAL rows of a calibration
 * stream (seeded apart from the data rows, days spread evenly), and measures the mean row
 * length for buffer sizing. Deterministic for given options. */
static rec_status gen_calibrate(rec_gen *g) {
    float *gv = NULL;
    double *cat = NULL;
    gen_cursor *c = NULL;
    rec_status s = rec_alloc((void **)&gv, sizeof(float) * N_CAL * NI, "generator calibration");
    if (!s) s = rec_alloc((void **)&cat, sizeof(double) * N_CAL * 2, "generator calibration");
    if (!s) s = rec_alloc((void **)&c, sizeof *c + GEN_MAX_ROW, "generator calibration");
    if (s) goto done;
    char *tmp = (char *)(c + 1);
    c->day = -1;
    double *raw = cat + N_CAL;
    uint64_t cseed = rec_mix64(g->o.seed ^ 0x63616c6962726174ULL); /* "calibrat" */
    double bytes = 0;
    for (int i = 0; i < N_CAL; i++) {
        int64_t day = (int64_t)i * g->o.days / N_CAL;
        if (day != c->day) cursor_day(g, c, day);
        rec_rng rng;
        rec_rng_seed(&rng, cseed, (uint64_t)i);
        gen_draw(g, &rng, c->dayoff, &c->row);
        cat[i] = c->row.catsum;
        for (int j = 0; j < NI; j++)
            gv[(size_t)i * NI + j] = c->row.inull[j] ? NAN : (float)dense_g(g, c->row.ival[j]);
        bytes += (double)(gen_format(g, &c->row, 0, tmp) - tmp);
    }
    g->mean_row_bytes = bytes / N_CAL;

    /* Dense weights w_j ~ 0.5 * N(0,1) from the seed, applied to standardised log1p. */
    for (int j = 0; j < NI; j++) {
        double s1 = 0, s2 = 0, cnt = 0;
        for (int i = 0; i < N_CAL; i++) {
            float v = gv[(size_t)i * NI + j];
            if (v != v) continue;
            s1 += v;
            s2 += (double)v * v;
            cnt++;
        }
        double mu = cnt > 0 ? s1 / cnt : 0, var = cnt > 1 ? s2 / cnt - mu * mu : 0;
        double sd = var > 1e-6 ? sqrt(var) : 1.0;
        double w = 0.5 * hash_normal(rec_mix64(g->o.seed ^ (0x64656e7365ULL + (uint64_t)j)));
        g->da[j] = w / sd;
        g->dc[j] = -w * mu / sd;
    }
    double m1 = 0, m2 = 0;
    for (int i = 0; i < N_CAL; i++) {
        double z = cat[i];
        for (int j = 0; j < NI; j++) {
            float v = gv[(size_t)i * NI + j];
            if (v == v) z += g->da[j] * v + g->dc[j];
        }
        raw[i] = z;
        m1 += z;
        m2 += z * z;
    }
    m1 /= N_CAL;
    double sd = sqrt(fmax(m2 / N_CAL - m1 * m1, 0));
    g->kscale = sd > 1e-9 ? TARGET_LOGIT_SD / sd : 1.0;
    /* Bias: mean sigmoid(b + k raw) = TARGET_CTR. The mean is increasing in b; bisection. */
    double lo = -30, hi = 30;
    for (int it = 0; it < 60; it++) {
        double b = 0.5 * (lo + hi), m = 0;
        for (int i = 0; i < N_CAL; i++) m += 1.0 / (1.0 + exp(-(b + g->kscale * raw[i])));
        if (m / N_CAL < TARGET_CTR) lo = b;
        else hi = b;
    }
    g->bias = 0.5 * (lo + hi);
done:
    rec_free(gv);
    rec_free(cat);
    rec_free(c);
    return s;
}

rec_status rec_gen_init(rec_gen **out, const rec_gen_opts *opts, int64_t total_rows) {
    *out = NULL;
    rec_gen_opts o;
    if (opts) o = *opts;
    else rec_gen_opts_default(&o);
    if (!(o.scale > 0) || !isfinite(o.scale))
        return rec_errorf(REC_EINVAL, "generator: scale must be a positive number (got %g)", o.scale);
    if (o.days < 1 || o.days > 1000000)
        return rec_errorf(REC_EINVAL, "generator: days must be between 1 and 1000000 (got %d)", o.days);
    if (total_rows < 0)
        return rec_errorf(REC_EINVAL, "generator: the row count must be >= 0 (got %lld)",
                          (long long)total_rows);
    for (int t = 0; t < NC; t++) {
        int64_t n = rec_gen_cardinality(&o, t);
        if (n > ((int64_t)1 << 32))
            return rec_errorf(REC_EINVAL,
                              "generator: scale %g gives C%d %lld ids, more than the 2^32 that "
                              "8-hex-digit ids allow; use a scale of at most %g",
                              o.scale, t + 1, (long long)n, 4294967296.0 / (double)KAGGLE_CARD[2]);
    }
    o.with_label = o.with_label != 0;
    o.multi_hot = o.multi_hot != 0;

    rec_gen *g;
    REC_TRY(rec_alloc((void **)&g, sizeof *g, "generator"));
    g->o = o;
    g->total = total_rows;
    int ioff = 0;
    for (int t = 0; t < NC; t++) {
        gen_table *tb = &g->t[t];
        tb->n = rec_gen_cardinality(&o, t);
        zipf_setup(tb);
        uint64_t k = rec_mix64(o.seed ^ (0x7461626c65ULL + ((uint64_t)t << 32))); /* "table" */
        tb->k1 = (uint32_t)k;
        tb->k2 = (uint32_t)(k >> 32);
        tb->shift = tb->n / 2000;
        tb->lmax = o.multi_hot && MH_SIZE[t] > 1 ? MH_CAP * MH_SIZE[t] : 1;
        if (tb->lmax > 1) {
            double mean_extra = MH_SIZE[t] - 1.0, q = mean_extra / (1.0 + mean_extra);
            tb->inv_log_q = 1.0 / log(q);
        }
        tb->miss = (uint32_t)llround(MISS_CAT[t] * 65536.0);
        tb->ioff = ioff;
        ioff += tb->lmax;
    }
    for (int j = 0; j < NI; j++) g->imiss[j] = (uint32_t)llround(MISS_INT[j] * 65536.0);
    g->neg_thr = (uint32_t)(NEG_RATE * 4294967296.0);
    g->wsalt = rec_mix64(o.seed ^ 0x776569676874ULL); /* "weight" */
    g->max_row = (size_t)(2 + NI * 12 + 9 * ioff);
    for (int x = 0; x < 1024; x++) g->lut[x] = (float)log1p((double)x);
    rec_status s = gen_calibrate(g);
    if (s) {
        rec_free(g);
        return s;
    }
    *out = g;
    return REC_OK;
}

void rec_gen_free(rec_gen *g) { rec_free(g); }

/* Rows must lie within [0, total_rows). Rows are made in place while a whole worst-case row
 * fits; the last few are made aside and copied, so a buffer of exactly the text's size works.
 * On REC_EINVAL for a short buffer, buf holds the rows that fit and *len their bytes. */
rec_status rec_gen_rows(const rec_gen *g, int64_t row0, int64_t n, char *buf, size_t cap,
                        size_t *len, float *prob) {
    *len = 0;
    if (row0 < 0 || n < 0 || row0 > g->total || n > g->total - row0)
        return rec_errorf(REC_EINVAL,
                          "rec_gen_rows: rows [%lld, %lld) are outside the generator's %lld rows; "
                          "pass the full row count to rec_gen_init",
                          (long long)row0, (long long)row0 + (long long)n, (long long)g->total);
    if (n == 0) return REC_OK;
    gen_cursor c;
    c.day = -1;
    size_t at = 0;
    int64_t done = gen_core(g, &c, row0, n, buf, cap, &at, prob);
    /* Fewer than max_row bytes left: make each remaining row aside and copy it if it fits. */
    for (int64_t i = done; i < n; i++) {
        char tmp[GEN_MAX_ROW];
        size_t l = (size_t)(gen_one(g, &c, row0 + i, tmp, prob ? prob + i : NULL) - tmp);
        if (l > cap - at) {
            *len = at;
            return rec_errorf(REC_EINVAL,
                              "rec_gen_rows: a buffer of %zu bytes is too small for rows [%lld, %lld) "
                              "(row %lld does not fit); give at least rec_gen_max_row_bytes() * n = "
                              "%zu bytes",
                              cap, (long long)row0, (long long)(row0 + n), (long long)(row0 + i),
                              g->max_row * (size_t)n);
        }
        memcpy(buf + at, tmp, l);
        at += l;
    }
    *len = at;
    return REC_OK;
}

/* ---- writing a file on a thread pool ----------------------------------------------------- */

typedef struct gen_slot {
    char *buf;       /* (cap) rows of one task */
    size_t cap, len;
    float *prob;     /* (task_rows) */
    char *ptxt;      /* (9 * task_rows) formatted probabilities */
    int64_t n;       /* rows made */
} gen_slot;

typedef struct gen_job {
    const rec_gen *g;
    gen_slot *slot;
    int64_t first_task, task_rows, rows;
    int want_prob;
} gen_job;

static rec_status gen_task(void *ctx, int64_t task, int thread) {
    (void)thread;
    gen_job *j = ctx;
    gen_slot *s = &j->slot[task];
    int64_t row0 = (j->first_task + task) * j->task_rows;
    int64_t n = j->rows - row0 < j->task_rows ? j->rows - row0 : j->task_rows;
    gen_cursor c;
    c.day = -1;
    s->len = 0;
    s->n = n;
    int64_t done = 0;
    while (done < n) {
        done += gen_core(j->g, &c, row0 + done, n - done, s->buf, s->cap, &s->len, s->prob + done);
        if (done < n) {
            size_t nc = s->cap + s->cap / 2 + j->g->max_row;
            REC_TRY(rec_realloc((void **)&s->buf, s->cap, nc, "generated rows"));
            s->cap = nc;
        }
    }
    if (j->want_prob) {
        char *w = s->ptxt;
        for (int64_t i = 0; i < n; i++) w = fmt_prob(w, s->prob[i]);
    }
    return REC_OK;
}

/* An output of gen: written whole or not at all (rec_atomic_file, through a stdio stream);
 * /dev/stdout, a pipe or a device is written into directly. */
typedef struct gen_out {
    const char *path;
    FILE *f;
    rec_atomic_file a;
} gen_out;

static rec_status gen_put(gen_out *o, const void *p, size_t n) {
    if (n && fwrite(p, 1, n, o->f) != n)
        return rec_errorf(REC_EIO, "cannot write '%s': %s (is the disk full?)", o->path,
                          strerror(errno ? errno : EIO));
    return REC_OK;
}

/* Flushes and closes the stream; the first error wins. */
static rec_status gen_flush(gen_out *o, rec_status s) {
    s = rec_stream_close(o->f, o->path, "generated rows", s);
    o->f = NULL;
    return s;
}

/* After every stream is flushed: the whole file is committed when all went well, else
 * dropped (PATH as it was). */
static rec_status gen_commit(gen_out *o, rec_status s) {
    if (!o->a.path) return s;
    if (s) {
        rec_atomic_abort(&o->a);
        return s;
    }
    return rec_atomic_commit(&o->a);
}

/* Tasks of ~8 MB of rows run on the pool, 2 x threads tasks per batch; the calling thread
 * writes each batch in row order once it is complete (no overlap of writing and generating).
 * threads <= 0 means all CPUs; o == NULL the defaults. On an error or a stop no output is
 * left behind (gen_out). */
rec_status rec_gen_write(const rec_gen_opts *o, int64_t rows, const char *path,
                         const char *prob_path, int threads, const volatile sig_atomic_t *stop) {
    if (rows < 0) return rec_errorf(REC_EINVAL, "gen: the row count must be >= 0 (got %lld)", (long long)rows);
    if (!path) return rec_errorf(REC_EINVAL, "gen: no output path given");
    rec_guard guard = {0};
    rec_guard_out(&guard, "--out", path);
    rec_guard_out(&guard, "--prob-out", prob_path);
    REC_TRY(rec_guard_check(&guard));
    if (threads <= 0) threads = rec_cpu_count();
    rec_gen *g = NULL;
    rec_pool *pool = NULL;
    gen_out f, pf;
    memset(&f, 0, sizeof f);
    memset(&pf, 0, sizeof pf);
    gen_slot *slot = NULL;
    int n_slots = 0;
    REC_TRY(rec_gen_init(&g, o, rows));
    const int with_prob = prob_path != NULL;
    f.path = path;
    pf.path = prob_path;
    rec_status s = rec_atomic_fopen(&f.a, path, &f.f);
    if (!s && with_prob) s = rec_atomic_fopen(&pf.a, prob_path, &pf.f);
    if (!s) s = rec_pool_init(&pool, threads);
    /* Tasks of about 8 MB of text; blocks are a speed choice only, rows never depend on them. */
    int64_t task_rows = (int64_t)(8e6 / g->mean_row_bytes);
    task_rows = task_rows < 256 ? 256 : task_rows > 65536 ? 65536 : task_rows;
    int64_t n_tasks = (rows + task_rows - 1) / task_rows;
    n_slots = (int)(2 * threads < n_tasks ? 2 * threads : n_tasks);
    if (!s && n_slots > 0) s = rec_alloc((void **)&slot, sizeof *slot * (size_t)n_slots, "generator slots");
    for (int i = 0; !s && i < n_slots; i++) {
        slot[i].cap = (size_t)((double)task_rows * g->mean_row_bytes * 1.1) + 4 * g->max_row;
        s = rec_alloc((void **)&slot[i].buf, slot[i].cap, "generated rows");
        if (!s) s = rec_alloc((void **)&slot[i].prob, sizeof(float) * (size_t)task_rows, "probabilities");
        if (!s && with_prob) s = rec_alloc((void **)&slot[i].ptxt, 9 * (size_t)task_rows, "probabilities");
    }
    rec_progress prog;
    rec_progress_init(&prog, "gen", "rows", (double)rows);
    gen_job job = {g, slot, 0, task_rows, rows, with_prob};
    int64_t done_rows = 0;
    for (int64_t first = 0; !s && first < n_tasks; first += n_slots) {
        if (stop && *stop) {
            s = rec_errorf(REC_ESTOPPED, "%s: stopped by %s after %lld of %lld rows; the partial output is removed",
                           path, rec_signal_name(*stop), (long long)done_rows, (long long)rows);
            break;
        }
        int64_t m = n_tasks - first < n_slots ? n_tasks - first : n_slots;
        job.first_task = first;
        s = rec_pool_run(pool, m, gen_task, &job);
        for (int64_t i = 0; !s && i < m; i++) {
            s = gen_put(&f, slot[i].buf, slot[i].len);
            if (!s && with_prob) s = gen_put(&pf, slot[i].ptxt, 9 * (size_t)slot[i].n);
            done_rows += slot[i].n;
        }
        rec_progress_update(&prog, (double)done_rows, NULL);
    }
    rec_progress_finish(&prog);
    /* Both streams are flushed before either file is committed, so that a write error in one
     * keeps both out (only a failing rename of the second would leave the first alone). */
    s = gen_flush(&f, s);
    s = gen_flush(&pf, s);
    s = gen_commit(&f, s);
    s = gen_commit(&pf, s);
    for (int i = 0; slot && i < n_slots; i++) {
        rec_free(slot[i].buf);
        rec_free(slot[i].prob);
        rec_free(slot[i].ptxt);
    }
    rec_free(slot);
    rec_pool_free(pool);
    rec_gen_free(g);
    return s;
}
