/* Tests of the Criteo TSV reader: every rejection with its message, the valid corner cases,
 * SKIP mode, the fast parser against the reference parser on random and mutated lines,
 * streaming (plain and gzip, any chunk size) against one parse, and the chunk splitter. */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "check.h"
#include "rectrain/core.h"
#include "rectrain/io.h"
#include "tsv_internal.h"

static char tmpdir[256];

/* ---- helpers ---------------------------------------------------------------------------- */

typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

static void sb_put(sbuf *s, const char *str, size_t n) {
    if (s->n + n + 1 > s->cap) {
        s->cap = (s->n + n + 1) * 2;
        s->p = realloc(s->p, s->cap);
        if (!s->p) abort();
    }
    memcpy(s->p + s->n, str, n);
    s->n += n;
    s->p[s->n] = '\0';
}
static void sb_str(sbuf *s, const char *str) { sb_put(s, str, strlen(str)); }
static void sb_fmt(sbuf *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_fmt(sbuf *s, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    sb_put(s, tmp, (size_t)n);
}

/* A valid line from its 40 (or 39) fields given as one string with '|' for the tabs. */
static char *line_of(const char *fields) {
    static char buf[4096];
    snprintf(buf, sizeof buf, "%s", fields);
    for (char *p = buf; *p; p++)
        if (*p == '|') *p = '\t';
    return buf;
}

/* A typical valid train line with one field replaced: col 0 = label, 1..13 = I, 14..39 = C. */
static const char *line_with(int has_label, int col, const char *value) {
    static char bufs[4][4096];
    static int k;
    char *buf = bufs[k = (k + 1) % 4];
    sbuf s = {0};
    for (int c = has_label ? 0 : 1; c < REC_CRITEO_NCOL; c++) {
        if (c > (has_label ? 0 : 1)) sb_str(&s, "\t");
        if (c == col) sb_str(&s, value);
        else if (c == 0) sb_str(&s, "1");
        else if (c <= REC_CRITEO_NINT) sb_fmt(&s, "%d", c * 3);
        else sb_fmt(&s, "%08x", 0x1000u * (unsigned)c);
    }
    snprintf(buf, sizeof bufs[0], "%s", s.p);
    free(s.p);
    return buf;
}

static rec_status parse_n(const char *text, size_t len, int has_label, rec_bad_rows mode,
                          int64_t cap, rec_raw_block *b, rec_bad_report *bad) {
    rec_tsv_opts o = {.has_label = has_label, .bad_rows = mode, .max_line = 0};
    if (rec_raw_block_init(b, cap)) return REC_ENOMEM;
    if (bad) memset(bad, 0, sizeof *bad);
    return rec_tsv_parse(&o, "t.tsv", text, len, 1, b, bad);
}

static rec_status parse_text(const char *text, int has_label, rec_bad_rows mode, int64_t cap,
                             rec_raw_block *b, rec_bad_report *bad) {
    return parse_n(text, strlen(text), has_label, mode, cap, b, bad);
}

/* As parse_text with a '\n' added when `text` lacks one, so that a one-line text is not
 * taken for a truncated last line. */
static rec_status parse_line(const char *text, int has_label, rec_bad_rows mode, int64_t cap,
                             rec_raw_block *b, rec_bad_report *bad) {
    size_t n = strlen(text);
    char *t = malloc(n + 2);
    memcpy(t, text, n + 1);
    if (n == 0 || t[n - 1] != '\n') strcpy(t + n++, "\n");
    rec_status s = parse_n(t, n, has_label, mode, cap, b, bad);
    free(t);
    return s;
}

/* Parses `text` (as a whole line) in FAIL mode and checks the status and that the message
 * contains `needle`. */
#define EXPECT_FAIL(text, has_label, needle)                                   \
    do {                                                                       \
        rec_raw_block b_;                                                      \
        rec_status s_ = parse_line((text), (has_label), REC_BAD_ROWS_FAIL, 16, &b_, NULL); \
        CHECK_ERR(s_, REC_EFORMAT, (needle));                                  \
        rec_raw_block_free(&b_);                                               \
    } while (0)

/* Categorical value j of row r in column c (0-based C index). */
static int64_t cat_val(const rec_raw_block *b, int c, int64_t r, int j) {
    return b->cat[c].val[b->cat[c].off[r] + j];
}
static int cat_len(const rec_raw_block *b, int c, int64_t r) {
    return b->cat[c].off[r + 1] - b->cat[c].off[r];
}

/* Row ra of a equals row rb of b in every column. */
static int rows_equal(const rec_raw_block *a, int64_t ra, const rec_raw_block *b, int64_t rb) {
    if (a->label[ra] != b->label[rb]) return 0;
    for (int c = 0; c < REC_CRITEO_NINT; c++) {
        size_t ka = (size_t)c * (size_t)a->cap + (size_t)ra, kb = (size_t)c * (size_t)b->cap + (size_t)rb;
        if (a->int_null[ka] != b->int_null[kb]) return 0;
        if (!a->int_null[ka] && a->ints[ka] != b->ints[kb]) return 0;
    }
    for (int c = 0; c < REC_CRITEO_NCAT; c++) {
        if (a->cat[c].null[ra] != b->cat[c].null[rb]) return 0;
        int n = cat_len(a, c, ra);
        if (n != cat_len(b, c, rb)) return 0;
        for (int j = 0; j < n; j++)
            if (cat_val(a, c, ra, j) != cat_val(b, c, rb, j)) return 0;
    }
    return 1;
}

/* The CSR invariants: off[0] == 0, non-decreasing, null rows empty, non-null rows not. */
static int csr_ok(const rec_raw_block *b) {
    for (int c = 0; c < REC_CRITEO_NCAT; c++) {
        const rec_raw_list *l = &b->cat[c];
        if (l->off[0] != 0) return 0;
        for (int64_t r = 0; r < b->n; r++) {
            int n = l->off[r + 1] - l->off[r];
            if (n < 0 || l->off[r + 1] > l->vcap) return 0;
            if (l->null[r] != (n == 0)) return 0;
        }
    }
    return 1;
}

/* ---- random lines ------------------------------------------------------------------------ */

static void rand_int(rec_rng *g, sbuf *s) {
    uint64_t k = rec_rng_below(g, 16);
    if (k < 3) return; /* missing */
    if (k == 3) { sb_str(s, "-9223372036854775808"); return; }
    if (k == 4) { sb_str(s, "9223372036854775807"); return; }
    if (k == 5) { sb_fmt(s, "%lld", (long long)rec_rng_u64(g)); return; }
    if (k == 6) { sb_fmt(s, "00%llu", (unsigned long long)rec_rng_below(g, 1000)); return; }
    long long v = (long long)rec_rng_below(g, (uint64_t)1 << rec_rng_below(g, 40));
    if (rec_rng_below(g, 6) == 0) v = -v;
    sb_fmt(s, "%lld", v);
}

static void rand_hex(rec_rng *g, sbuf *s) {
    int digits = rec_rng_below(g, 3) ? 8 : 1 + (int)rec_rng_below(g, 16);
    uint64_t v = rec_rng_u64(g);
    const char *set = rec_rng_below(g, 4) ? "0123456789abcdef" : "0123456789ABCDEF";
    for (int d = digits - 1; d >= 0; d--) {
        char ch = set[(v >> (4 * (d % 16))) & 15];
        sb_put(s, &ch, 1);
    }
}

/* A random valid line (without '\n'). */
static void rand_line(rec_rng *g, sbuf *s, int has_label, int multi) {
    if (has_label) sb_str(s, rec_rng_below(g, 2) ? "1" : "0");
    for (int c = 1; c < REC_CRITEO_NCOL; c++) {
        if (c > 1 || has_label) sb_str(s, "\t");
        if (c <= REC_CRITEO_NINT) {
            rand_int(g, s);
        } else if (rec_rng_below(g, 8) != 0) {
            int n = multi ? 1 + (int)rec_rng_below(g, 5) : 1;
            for (int j = 0; j < n; j++) {
                if (j) sb_str(s, ",");
                rand_hex(g, s);
            }
        }
    }
    if (rec_rng_below(g, 10) == 0) sb_str(s, "\r");
}

/* Random damage: replace, insert or delete a few bytes, drawn mostly from the bytes that
 * matter to the format. */
static void mutate(rec_rng *g, sbuf *s) {
    static const char alphabet[] = "0123456789abcdefABCDEFgxz-+,\t\t\t\r\n \x80\xff";
    int edits = 1 + (int)rec_rng_below(g, 3);
    for (int e = 0; e < edits && s->n > 0; e++) {
        size_t at = (size_t)rec_rng_below(g, s->n);
        char ch = alphabet[rec_rng_below(g, sizeof alphabet - 1)];
        switch (rec_rng_below(g, 3)) {
        case 0: s->p[at] = ch; break;
        case 1:
            sb_put(s, " ", 1);
            memmove(s->p + at + 1, s->p + at, s->n - at - 1);
            s->p[at] = ch;
            break;
        default:
            memmove(s->p + at, s->p + at + 1, s->n - at - 1);
            s->n--;
            s->p[s->n] = '\0';
        }
    }
}

/* Parses `text` with the fast parser (SKIP mode) and line by line with the reference, and
 * checks rows, bad-row counts and line numbers agree; then FAIL mode fails exactly when some
 * row is bad, on the first bad line. */
static void compare_fast_ref(const char *text, size_t len, int has_label, int64_t first_line) {
    int64_t lines = (int64_t)rec__tsv_count_newlines(text, len) + (len && text[len - 1] != '\n');
    rec_raw_block fast, ref;
    rec_bad_report bad;
    memset(&bad, 0, sizeof bad);
    if (rec_raw_block_init(&fast, lines) || rec_raw_block_init(&ref, lines)) abort();
    rec_tsv_opts o = {.has_label = has_label, .bad_rows = REC_BAD_ROWS_SKIP};
    rec_status s = rec_tsv_parse(&o, "r.tsv", text, len, first_line, &fast, &bad);
    CHECK(s == REC_OK, "skip-mode parse failed: %s", rec_errmsg());

    int64_t nref = 0, nbad = 0, first_bad = -1;
    int64_t bad_lines[REC_BAD_ROWS_KEEP];
    char first_why[REC__TSV_WHY_CAP] = "";
    size_t p = 0;
    for (int64_t ln = 0; ln < lines; ln++) {
        const char *nl = memchr(text + p, '\n', len - p);
        size_t e = nl ? (size_t)(nl - text) : len;
        char why[REC__TSV_WHY_CAP];
        const char *advice;
        rec_status rs = rec__tsv_line_ref(text + p, e - p, &o, &ref, nref, why, &advice);
        if (rs == REC_OK && e - p > (size_t)REC__TSV_MAX_LINE_DEFAULT) rs = REC_EFORMAT;
        if (rs == REC_OK) {
            nref++;
        } else {
            if (nbad < REC_BAD_ROWS_KEEP) bad_lines[nbad] = first_line + ln;
            if (first_bad < 0) {
                first_bad = first_line + ln;
                snprintf(first_why, sizeof first_why, "%s", nl ? why : "");
            }
            nbad++;
        }
        p = e + 1;
    }
    ref.n = nref;
    CHECK(fast.n == nref, "rows: fast %lld, ref %lld", (long long)fast.n, (long long)nref);
    CHECK(bad.count == nbad, "bad: fast %lld, ref %lld", (long long)bad.count, (long long)nbad);
    int same = fast.n == nref && csr_ok(&fast);
    for (int64_t r = 0; same && r < nref; r++) same = rows_equal(&fast, r, &ref, r);
    CHECK(same, "fast and reference rows differ on:\n%.*s", (int)(len < 2000 ? len : 2000), text);
    int lines_same = bad.n_kept == (nbad < REC_BAD_ROWS_KEEP ? nbad : REC_BAD_ROWS_KEEP);
    for (int i = 0; lines_same && i < bad.n_kept; i++) lines_same = bad.line[i] == bad_lines[i];
    CHECK(lines_same, "bad-row line numbers differ");

    rec_raw_block f2;
    if (rec_raw_block_init(&f2, lines)) abort();
    o.bad_rows = REC_BAD_ROWS_FAIL;
    s = rec_tsv_parse(&o, "r.tsv", text, len, first_line, &f2, NULL);
    if (first_bad < 0) {
        CHECK(s == REC_OK, "fail-mode parse failed: %s", rec_errmsg());
    } else {
        char where[64];
        snprintf(where, sizeof where, "r.tsv:%lld: ", (long long)first_bad);
        CHECK_ERR(s, REC_EFORMAT, where);
        CHECK(strstr(rec_errmsg(), first_why) != NULL, "'%s' lacks '%s'", rec_errmsg(), first_why);
        CHECK(f2.n == first_bad - first_line, "rows before the bad one: %lld", (long long)f2.n);
    }
    rec_raw_block_free(&f2);
    rec_raw_block_free(&fast);
    rec_raw_block_free(&ref);
}

/* ---- tests ------------------------------------------------------------------------------- */

static void test_errors(void) {
    /* field count */
    EXPECT_FAIL(line_of("1|2|3"), 1, "t.tsv:1: expected 40 tab-separated fields (train format), found 3");
    EXPECT_FAIL(line_of("1|2|3"), 0, "expected 39 tab-separated fields (test format), found 3");
    EXPECT_FAIL(line_with(0, -1, ""), 1, "found 39");
    EXPECT_FAIL(line_with(0, -1, ""), 1, "--format test");
    EXPECT_FAIL(line_with(1, -1, ""), 0, "found 40");
    EXPECT_FAIL("\n", 1, "t.tsv:1: expected 40 tab-separated fields (train format), found 1");
    {
        char two[8192];
        snprintf(two, sizeof two, "%s\n%s\n", line_with(1, -1, ""), line_of("0|1"));
        EXPECT_FAIL(two, 1, "t.tsv:2: expected 40");
    }
    /* label */
    EXPECT_FAIL(line_with(1, 0, "2"), 1, "t.tsv:1: field label: '2' is not 0 or 1");
    EXPECT_FAIL(line_with(1, 0, ""), 1, "field label: empty; expected 0 or 1");
    EXPECT_FAIL(line_with(1, 0, "01"), 1, "field label: '01' is not 0 or 1");
    /* ints */
    EXPECT_FAIL(line_with(1, 3, "12a"), 1, "field I3: '12a' is not an integer");
    EXPECT_FAIL(line_with(1, 3, "-"), 1, "field I3: '-' is not an integer");
    EXPECT_FAIL(line_with(1, 3, "1.5"), 1, "field I3: '1.5' is not an integer");
    EXPECT_FAIL(line_with(1, 3, "+5"), 1, "field I3: '+5' is not an integer");
    EXPECT_FAIL(line_with(1, 13, " 5"), 1, "field I13: ' 5' is not an integer");
    EXPECT_FAIL(line_with(1, 5, "99999999999999999999"), 1,
                "field I5: '99999999999999999999' overflows a 64-bit integer");
    EXPECT_FAIL(line_with(1, 5, "9223372036854775808"), 1, "overflows a 64-bit integer");
    EXPECT_FAIL(line_with(1, 5, "-9223372036854775809"), 1,
                "field I5: '-9223372036854775809' overflows a 64-bit integer");
    EXPECT_FAIL(line_with(0, 1, "x"), 0, "field I1: 'x' is not an integer");
    /* categoricals */
    EXPECT_FAIL(line_with(1, 20, "xyz"), 1,
                "t.tsv:1: field C7: 'xyz' is not a hex id (1..16 hex digits) (use --bad-rows "
                "skip to drop malformed rows)");
    EXPECT_FAIL(line_with(1, 14, "12345678901234567"), 1,
                "field C1: '12345678901234567' is not a hex id (1..16 hex digits): it has 17 digits");
    EXPECT_FAIL(line_with(1, 39, "0x12"), 1, "field C26: '0x12' is not a hex id");
    EXPECT_FAIL(line_with(1, 20, "a,,b"), 1, "field C7: 'a,,b' has an empty element");
    EXPECT_FAIL(line_with(1, 20, "a,"), 1, "field C7: 'a,' has an empty element");
    EXPECT_FAIL(line_with(1, 20, ",a"), 1, "field C7: ',a' has an empty element");
    EXPECT_FAIL(line_with(1, 20, "a,zz,b"), 1, "field C7: list element 'zz' is not a hex id");
    /* a stray '\r' that is not the line's last byte */
    EXPECT_FAIL(line_with(1, 39, "abc\r\r"), 1, "field C26: 'abc\\x0d' is not a hex id");
    /* long values are cut */
    {
        char v[200];
        memset(v, 'z', 150);
        v[150] = '\0';
        rec_raw_block b;
        rec_status s = parse_text(line_with(1, 20, v), 1, REC_BAD_ROWS_FAIL, 4, &b, NULL);
        CHECK_ERR(s, REC_EFORMAT, "'zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz...'");
        CHECK(strlen(rec_errmsg()) < 160, "message too long: %zu", strlen(rec_errmsg()));
        rec_raw_block_free(&b);
    }
    /* over-long line */
    {
        rec_tsv_opts o = {.has_label = 1, .max_line = 100};
        rec_raw_block b;
        rec_raw_block_init(&b, 4);
        char text[8192];
        snprintf(text, sizeof text, "%s\n", line_with(1, -1, ""));
        rec_status s = rec_tsv_parse(&o, "t.tsv", text, strlen(text), 7, &b, NULL);
        CHECK_ERR(s, REC_EFORMAT, "t.tsv:7: line is longer than 100 bytes");
        rec_raw_block_free(&b);
    }
    /* truncated last line (no '\n', too few fields) */
    {
        char text[8192];
        const char *l = line_with(1, -1, "");
        snprintf(text, sizeof text, "%s\n%.60s", l, l);
        rec_raw_block b;
        rec_status s = parse_text(text, 1, REC_BAD_ROWS_FAIL, 4, &b, NULL);
        CHECK_ERR(s, REC_EFORMAT, "t.tsv:2: truncated last line: expected 40 tab-separated fields");
        CHECK_ERR(s, REC_EFORMAT, "the file ends in the middle of a row");
        rec_raw_block_free(&b);
        /* with a '\n' it is a plain field-count error */
        snprintf(text, sizeof text, "%s\n%.60s\n", l, l);
        EXPECT_FAIL(text, 1, "t.tsv:2: expected 40 tab-separated fields");
    }
    /* first_line numbering, capacity, bad options */
    {
        rec_tsv_opts o = {.has_label = 1};
        rec_raw_block b;
        rec_raw_block_init(&b, 1);
        char text[8192];
        snprintf(text, sizeof text, "%s\n%s\n", line_with(1, -1, ""), line_with(1, -1, ""));
        rec_status s = rec_tsv_parse(&o, "t.tsv", text, strlen(text), 1, &b, NULL);
        CHECK_ERR(s, REC_EINVAL, "2 lines do not fit in the raw block");
        o.has_label = -1;
        s = rec_tsv_parse(&o, "t.tsv", text, strlen(text), 1, &b, NULL);
        CHECK_ERR(s, REC_EINVAL, "has_label must be 0 or 1");
        rec_raw_block_free(&b);
        rec_raw_block_init(&b, 4);
        snprintf(text, sizeof text, "%s\n%s\n", line_with(1, -1, ""), line_with(1, 9, "q"));
        o.has_label = 1;
        s = rec_tsv_parse(&o, "t.tsv", text, strlen(text), 100, &b, NULL);
        CHECK_ERR(s, REC_EFORMAT, "t.tsv:101: field I9: 'q'");
        CHECK(b.n == 1, "good row before the bad one kept: n = %lld", (long long)b.n);
        rec_raw_block_free(&b);
    }
}

static void test_valid(void) {
    rec_raw_block b;
    rec_bad_report bad;
    /* negative ints, empty fields, CRLF, uppercase hex, the extremes */
    sbuf s = {0};
    sb_str(&s, line_of("1|-5||9223372036854775807|-9223372036854775808|0|-0|007|||||||"
                       "ffffffffffffffff|ABCDEF01||0|1|aBc||||||||||||||||||||\r"));
    sb_str(&s, "\n");
    sb_str(&s, line_with(1, 0, "0"));
    /* last line without '\n' */
    rec_status st = parse_text(s.p, 1, REC_BAD_ROWS_FAIL, 8, &b, &bad);
    CHECK(st == REC_OK, "%s", rec_errmsg());
    CHECK(b.n == 2 && b.has_label == 1 && b.first_line == 1, "n %lld", (long long)b.n);
    CHECK(b.label[0] == 1.0f && b.label[1] == 0.0f, "labels");
    CHECK(b.ints[0 * b.cap] == -5 && !b.int_null[0], "I1 = -5");
    CHECK(b.int_null[1 * b.cap], "I2 missing");
    CHECK(b.ints[2 * b.cap] == INT64_MAX, "I3 = INT64_MAX");
    CHECK(b.ints[3 * b.cap] == INT64_MIN, "I4 = INT64_MIN");
    CHECK(b.ints[5 * b.cap] == 0 && !b.int_null[5 * b.cap], "-0");
    CHECK(b.ints[6 * b.cap] == 7, "007");
    CHECK(b.int_null[12 * b.cap], "I13 missing");
    CHECK(cat_val(&b, 0, 0, 0) == -1, "ffffffffffffffff is all ones");
    CHECK(cat_val(&b, 1, 0, 0) == 0xABCDEF01, "uppercase hex");
    CHECK(b.cat[2].null[0] && cat_len(&b, 2, 0) == 0, "C3 missing");
    CHECK(cat_val(&b, 3, 0, 0) == 0 && cat_val(&b, 4, 0, 0) == 1, "short ids");
    CHECK(cat_val(&b, 5, 0, 0) == 0xabc, "mixed case");
    CHECK(b.cat[25].null[0], "C26 empty before CRLF");
    CHECK(b.ints[1 * b.cap + 1] == 6 && cat_val(&b, 25, 1, 0) == 0x1000 * 39, "row 2");
    CHECK(csr_ok(&b), "csr");
    /* appending after existing rows keeps them and numbers nothing anew */
    const char *more = line_with(1, 14, "deadbeef");
    rec_tsv_opts o = {.has_label = 1};
    st = rec_tsv_parse(&o, "t.tsv", more, strlen(more), 50, &b, &bad);
    CHECK(st == REC_OK && b.n == 3 && b.first_line == 1, "append: %s", rec_errmsg());
    CHECK(cat_val(&b, 0, 2, 0) == 0xdeadbeef && cat_val(&b, 0, 0, 0) == -1, "appended row");
    CHECK(csr_ok(&b), "csr after append");
    rec_raw_block_free(&b);
    free(s.p);

    /* test format */
    st = parse_text(line_with(0, 1, "-42"), 0, REC_BAD_ROWS_FAIL, 2, &b, NULL);
    CHECK(st == REC_OK && b.n == 1 && b.has_label == 0 && b.label[0] == 0.0f, "%s", rec_errmsg());
    CHECK(b.ints[0] == -42, "test format I1");
    rec_raw_block_free(&b);

    /* empty text: no rows */
    st = parse_text("", 1, REC_BAD_ROWS_FAIL, 0, &b, NULL);
    CHECK(st == REC_OK && b.n == 0, "empty text");
    rec_raw_block_free(&b);

    /* multi-hot lists grow the value arrays past one value per row */
    s = (sbuf){0};
    for (int r = 0; r < 50; r++) {
        sb_str(&s, line_with(1, 20, "1,2,3,4,5,6,7,8,9,a,b,c,d,e,f,10,ffffffffffffffff"));
        sb_str(&s, "\n");
    }
    st = parse_text(s.p, 1, REC_BAD_ROWS_FAIL, 50, &b, NULL);
    CHECK(st == REC_OK && b.n == 50, "%s", rec_errmsg());
    CHECK(cat_len(&b, 6, 49) == 17 && cat_val(&b, 6, 49, 9) == 10 && cat_val(&b, 6, 49, 16) == -1,
          "multi-hot row");
    CHECK(b.cat[6].off[50] == 850 && b.cat[6].vcap >= 850, "multi-hot offsets");
    CHECK(csr_ok(&b), "csr multi");
    rec_raw_block_free(&b);
    free(s.p);
}

static void test_skip(void) {
    sbuf s = {0};
    for (int r = 0; r < 30; r++) {
        if (r % 3 == 1) sb_str(&s, line_with(1, 20, "7,zz")); /* bad, after multi-hot writes */
        else if (r == 2) sb_str(&s, line_of("1|2"));
        else sb_str(&s, line_with(1, 20, r % 2 ? "1,2,3" : "abc"));
        sb_str(&s, "\n");
    }
    sb_str(&s, "0\t1\t2"); /* truncated last line */
    rec_raw_block b;
    rec_bad_report bad;
    rec_status st = parse_text(s.p, 1, REC_BAD_ROWS_SKIP, 31, &b, &bad);
    CHECK(st == REC_OK, "%s", rec_errmsg());
    CHECK(bad.count == 12, "bad count %lld", (long long)bad.count);
    CHECK(b.n == 19, "kept rows %lld", (long long)b.n);
    CHECK(bad.n_kept == REC_BAD_ROWS_KEEP && bad.line[0] == 2 && bad.line[1] == 3 &&
              bad.line[2] == 5 && bad.line[7] == 20,
          "lines %lld %lld %lld", (long long)bad.line[0], (long long)bad.line[1],
          (long long)bad.line[2]);
    CHECK(strstr(bad.why[0], "field C7: list element 'zz'") != NULL, "why: %s", bad.why[0]);
    CHECK(strstr(bad.why[1], "found 2") != NULL, "why: %s", bad.why[1]);
    CHECK(csr_ok(&b), "csr after skipped rows");
    int ok = 1;
    for (int64_t r = 0; r < b.n; r++) ok &= cat_len(&b, 6, r) == 1 || cat_len(&b, 6, r) == 3;
    CHECK(ok && b.cat[6].val[b.cat[6].off[0]] == 0xabc, "rolled back partial writes");
    rec_raw_block_free(&b);

    /* the truncated last line is reported as such */
    rec_bad_report b2 = {0};
    rec_raw_block blk;
    rec_raw_block_init(&blk, 2);
    rec_tsv_opts o = {.has_label = 1, .bad_rows = REC_BAD_ROWS_SKIP};
    st = rec_tsv_parse(&o, "t.tsv", "1\t2\t3", 5, 9, &blk, &b2);
    CHECK(st == REC_OK && b2.count == 1 && b2.line[0] == 9 &&
              strstr(b2.why[0], "truncated last line") != NULL,
          "truncated: %s", b2.why[0]);
    /* merging reports keeps line order */
    rec_bad_report m = {0};
    rec_bad_report_merge(&m, &b2);
    rec_bad_report_merge(&m, &bad);
    CHECK(m.count == 13 && m.line[0] == 2 && m.line[4] == 9 && m.line[7] == 17, "merge");
    rec_raw_block_free(&blk);
    free(s.p);
}

static void test_random(void) {
    rec_rng g;
    rec_rng_seed(&g, 42, 0);
    for (int round = 0; round < 1000; round++) {
        int has_label = (int)rec_rng_below(&g, 2), multi = (int)rec_rng_below(&g, 2);
        int damage = round % 4 != 0;
        sbuf s = {0};
        int n = 1 + (int)rec_rng_below(&g, 12);
        for (int i = 0; i < n; i++) {
            sbuf l = {0};
            rand_line(&g, &l, has_label, multi);
            if (damage && rec_rng_below(&g, 3) == 0) mutate(&g, &l);
            sb_put(&s, l.p, l.n);
            if (i + 1 < n || rec_rng_below(&g, 4)) sb_str(&s, "\n");
            free(l.p);
        }
        compare_fast_ref(s.p, s.n, has_label, 1 + (int64_t)rec_rng_below(&g, 1000));
        free(s.p);
    }
    /* long texts, where the parser's word-at-a-time paths run away from the text's end */
    for (int round = 0; round < 4; round++) {
        sbuf s = {0};
        for (int i = 0; i < 3000; i++) {
            sbuf l = {0};
            rand_line(&g, &l, round & 1, round >> 1);
            if (rec_rng_below(&g, 10) == 0) mutate(&g, &l);
            sb_put(&s, l.p, l.n);
            sb_str(&s, "\n");
            free(l.p);
        }
        compare_fast_ref(s.p, s.n, round & 1, 1);
        free(s.p);
    }
}

/* ---- streaming --------------------------------------------------------------------------- */

static char *tmp_path(const char *name) {
    static char p[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", tmpdir, name);
    return p[k];
}

static void write_file(const char *path, const char *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n) abort();
    fclose(f);
}

static void write_gz(const char *path, const char *data, size_t n) {
    gzFile z = gzopen(path, "wb6");
    if (!z) abort();
    size_t done = 0;
    while (done < n) {
        unsigned part = (unsigned)(n - done < (1u << 20) ? n - done : (1u << 20));
        if (gzwrite(z, data + done, part) != (int)part) abort();
        done += part;
    }
    gzclose(z);
}

/* Streams `path` with `chunk_bytes`, parsing every chunk into one block; checks the chunk
 * line numbers and byte counts. */
static rec_status stream_all(const char *path, size_t chunk_bytes, int has_label, int64_t cap,
                             rec_raw_block *b, int *resolved, size_t *total) {
    rec_tsv *r;
    rec_tsv_opts o = {.has_label = has_label};
    memset(b, 0, sizeof *b); /* freeable when the open fails */
    REC_TRY(rec_tsv_open(&r, path, &o, chunk_bytes));
    *resolved = rec_tsv_options(r)->has_label;
    CHECK(strcmp(rec_tsv_path(r), path) == 0, "path");
    if (rec_raw_block_init(b, cap)) abort();
    int64_t next = 1;
    *total = 0;
    rec_status s;
    for (;;) {
        rec_text_chunk c;
        s = rec_tsv_next(r, &c);
        if (s || c.len == 0) break;
        CHECK(c.first_line == next, "chunk first_line %lld, want %lld", (long long)c.first_line,
              (long long)next);
        CHECK(c.n_lines == (int64_t)rec__tsv_count_newlines(c.text, c.len) +
                               (c.text[c.len - 1] != '\n'),
              "n_lines");
        next += c.n_lines;
        *total += c.len;
        CHECK(rec_tsv_bytes(r) == *total, "bytes");
        s = rec_tsv_parse(rec_tsv_options(r), path, c.text, c.len, c.first_line, b, NULL);
        if (s) break;
    }
    rec_tsv_close(r);
    return s;
}

static void test_stream(void) {
    rec_rng g;
    rec_rng_seed(&g, 7, 1);
    for (int variant = 0; variant < 4; variant++) {
        int has_label = variant != 1, multi = variant == 2, no_final_nl = variant == 3;
        sbuf s = {0};
        int n = 700;
        for (int i = 0; i < n; i++) {
            rand_line(&g, &s, has_label, multi);
            if (i + 1 < n || !no_final_nl) sb_str(&s, "\n");
        }
        rec_raw_block whole;
        CHECK(parse_text(s.p, has_label, REC_BAD_ROWS_FAIL, n, &whole, NULL) == REC_OK, "%s",
              rec_errmsg());
        char *plain = tmp_path("s.tsv"), *gz = tmp_path("s.tsv.gz");
        write_file(plain, s.p, s.n);
        write_gz(gz, s.p, s.n);
        size_t chunks[] = {1, 7, 100, 4096, 65536, 0};
        for (int k = 0; k < 6; k++) {
            for (int z = 0; z < 2; z++) {
                rec_raw_block b;
                int resolved;
                size_t total;
                rec_status st = stream_all(z ? gz : plain, chunks[k], -1, n, &b, &resolved, &total);
                CHECK(st == REC_OK, "stream: %s", rec_errmsg());
                CHECK(resolved == has_label, "detected has_label %d", resolved);
                CHECK(total == s.n, "bytes %zu of %zu", total, s.n);
                int same = b.n == whole.n && csr_ok(&b);
                for (int64_t r = 0; same && r < b.n; r++) same = rows_equal(&b, r, &whole, r);
                CHECK(same, "chunk %zu gz %d: streamed rows differ (%lld of %lld)", chunks[k], z,
                      (long long)b.n, (long long)whole.n);
                rec_raw_block_free(&b);
            }
        }
        rec_raw_block_free(&whole);
        free(s.p);
    }
}

static void test_stream_errors(void) {
    rec_tsv *r;
    rec_tsv_opts o = {.has_label = -1};
    rec_text_chunk c;
    rec_status s;
    rec_raw_block b;
    int resolved;
    size_t total;

    s = rec_tsv_open(&r, tmp_path("missing.tsv"), &o, 0);
    CHECK_ERR(s, REC_EIO, "missing.tsv: cannot open: No such file or directory");
    CHECK(r == NULL, "no reader on failure");

    /* empty file: valid, zero rows */
    write_file(tmp_path("empty.tsv"), "", 0);
    s = rec_tsv_open(&r, tmp_path("empty.tsv"), &o, 0);
    CHECK(s == REC_OK, "%s", rec_errmsg());
    if (!s) {
        s = rec_tsv_next(r, &c);
        CHECK(s == REC_OK && c.len == 0 && c.n_lines == 0, "empty chunk");
        s = rec_tsv_next(r, &c);
        CHECK(s == REC_OK && c.len == 0, "still at the end");
        rec_tsv_close(r);
    }

    /* undetectable format */
    write_file(tmp_path("odd.tsv"), "a\tb\tc\n", 6);
    s = rec_tsv_open(&r, tmp_path("odd.tsv"), &o, 0);
    CHECK_ERR(s, REC_EFORMAT, "odd.tsv: cannot tell the format: of its first 1 line, 0 have 40 tab-separated "
                              "fields, 0 39, 1 fewer (down to 3). The train format has 40 fields");

    /* CRLF lines are detected */
    char text[16384];
    sbuf crlf = {0};
    for (int i = 0; i < REC_TSV_DETECT_MIN_LINES; i++) {
        sb_str(&crlf, line_with(0, -1, ""));
        sb_str(&crlf, "\r\n");
    }
    write_file(tmp_path("crlf.tsv"), crlf.p, crlf.n);
    s = stream_all(tmp_path("crlf.tsv"), 0, -1, REC_TSV_DETECT_MIN_LINES, &b, &resolved, &total);
    CHECK(s == REC_OK && resolved == 0 && b.n == REC_TSV_DETECT_MIN_LINES, "crlf test format: %s", rec_errmsg());
    rec_raw_block_free(&b);
    free(crlf.p);

    /* over-long line while streaming */
    rec_tsv_opts small = {.has_label = 1, .max_line = 300};
    snprintf(text, sizeof text, "%s\n", line_with(1, -1, ""));
    size_t l1 = strlen(text);
    memset(text + l1, 'a', 1000);
    text[l1 + 1000] = '\n';
    write_file(tmp_path("long.tsv"), text, l1 + 1001);
    s = rec_tsv_open(&r, tmp_path("long.tsv"), &small, 64);
    CHECK(s == REC_OK, "%s", rec_errmsg());
    if (!s) {
        s = rec_tsv_next(r, &c);
        CHECK(s == REC_OK && c.n_lines == 1, "first line fine");
        s = rec_tsv_next(r, &c);
        CHECK_ERR(s, REC_EFORMAT, "long.tsv:2: line is longer than 300 bytes");
        rec_tsv_close(r);
    }

    /* SKIP mode drops over-long lines in the stream (in the middle and at the very end, the
     * last without '\n') and reports them; the lines around them come through with their
     * own line numbers. */
    {
        sbuf t = {0};
        const char *good = line_with(1, -1, "");
        sb_str(&t, good);
        sb_str(&t, "\n");
        for (int i = 0; i < 1000; i++) sb_str(&t, "b");
        for (int i = 0; i < 2; i++) {
            sb_str(&t, "\n");
            sb_str(&t, good);
        }
        sb_str(&t, "\n");
        for (int i = 0; i < 700; i++) sb_str(&t, "c");
        write_file(tmp_path("long2.tsv"), t.p, t.n);
        rec_tsv_opts skip = {.has_label = 1, .max_line = 300, .bad_rows = REC_BAD_ROWS_SKIP};
        s = rec_tsv_open(&r, tmp_path("long2.tsv"), &skip, 64);
        CHECK(s == REC_OK, "%s", rec_errmsg());
        int64_t lines[8], n_chunks = 0, rows = 0;
        while (!s) {
            s = rec_tsv_next(r, &c);
            if (s || c.len == 0) break;
            if (n_chunks < 8) lines[n_chunks] = c.first_line;
            n_chunks++;
            rows += c.n_lines;
        }
        CHECK(s == REC_OK, "skip stream: %s", rec_errmsg());
        CHECK(rows == 3 && n_chunks >= 2 && lines[0] == 1 && lines[1] == 3,
              "kept lines 1, 3, 4 (rows %lld, chunks %lld)", (long long)rows, (long long)n_chunks);
        const rec_bad_report *bad = rec_tsv_bad(r);
        CHECK(bad->count == 2 && bad->n_kept == 2 && bad->line[0] == 2 && bad->line[1] == 5 &&
                  strstr(bad->why[0], "longer than 300 bytes"),
              "over-long lines 2 and 5 reported (count %lld)", (long long)bad->count);
        rec_tsv_close(r);
        free(t.p);
    }

    /* truncated gzip */
    sbuf big = {0};
    rec_rng g;
    rec_rng_seed(&g, 3, 3);
    for (int i = 0; i < 3000; i++) {
        rand_line(&g, &big, 1, 0);
        sb_str(&big, "\n");
    }
    char *gz = tmp_path("trunc.gz");
    write_gz(gz, big.p, big.n);
    FILE *f = fopen(gz, "rb");
    fseek(f, 0, SEEK_END);
    long gsz = ftell(f);
    fclose(f);
    CHECK(truncate(gz, gsz / 2) == 0, "truncate");
    s = stream_all(gz, 4096, 1, 3000, &b, &resolved, &total);
    CHECK_ERR(s, REC_EFORMAT, "trunc.gz: truncated gzip stream");
    rec_raw_block_free(&b);
    /* cut inside the trailer as well */
    write_gz(gz, big.p, big.n);
    CHECK(truncate(gz, gsz - 3) == 0, "truncate");
    s = stream_all(gz, 0, 1, 3000, &b, &resolved, &total);
    CHECK_ERR(s, REC_EFORMAT, "truncated gzip stream");
    rec_raw_block_free(&b);
    /* corrupt gzip data */
    write_gz(gz, big.p, big.n);
    f = fopen(gz, "r+b");
    fseek(f, gsz / 2, SEEK_SET);
    for (int i = 0; i < 64; i++) fputc(0x55 ^ i, f);
    fclose(f);
    s = stream_all(gz, 0, 1, 3000, &b, &resolved, &total);
    CHECK(s == REC_EFORMAT || s == REC_EIO, "corrupt gz: status %d", (int)s);
    CHECK(strstr(rec_errmsg(), "trunc.gz") != NULL, "corrupt gz names the file: %s", rec_errmsg());
    rec_raw_block_free(&b);

    /* a malformed row in a stream names the file and its line */
    char *bad = tmp_path("bad.tsv");
    sbuf t = {0};
    sb_put(&t, big.p, big.n);
    sb_str(&t, line_with(1, 4, "4x"));
    sb_str(&t, "\n");
    write_file(bad, t.p, t.n);
    s = stream_all(bad, 5000, -1, 3001, &b, &resolved, &total);
    CHECK_ERR(s, REC_EFORMAT, "bad.tsv:3001: field I4: '4x' is not an integer");
    rec_raw_block_free(&b);

    /* bad options */
    rec_tsv_opts wrong = {.has_label = 2};
    s = rec_tsv_open(&r, bad, &wrong, 0);
    CHECK_ERR(s, REC_EINVAL, "has_label must be -1");
    free(big.p);
    free(t.p);
}

static void test_split(void) {
    rec_rng g;
    rec_rng_seed(&g, 11, 2);
    for (int round = 0; round < 200; round++) {
        sbuf s = {0};
        int n = (int)rec_rng_below(&g, 30);
        for (int i = 0; i < n; i++) {
            rand_line(&g, &s, 1, (int)rec_rng_below(&g, 2));
            if (i + 1 < n || rec_rng_below(&g, 2)) sb_str(&s, "\n");
        }
        rec_text_chunk c = {.text = s.p ? s.p : "", .len = s.n, .first_line = 5};
        c.n_lines = (int64_t)rec__tsv_count_newlines(c.text, c.len) + (c.len && c.text[c.len - 1] != '\n');
        int parts = 1 + (int)rec_rng_below(&g, 9);
        size_t start[10];
        int64_t first[10];
        rec_tsv_split(&c, parts, start, first);
        int ok = start[0] == 0 && start[parts] == c.len;
        int64_t lines = 0;
        rec_raw_block whole, pieces;
        rec_tsv_opts o = {.has_label = 1};
        rec_raw_block_init(&whole, n);
        rec_raw_block_init(&pieces, n);
        rec_tsv_parse(&o, "s", c.text, c.len, 5, &whole, NULL);
        for (int i = 0; i < parts; i++) {
            ok &= start[i] <= start[i + 1];
            ok &= start[i] == 0 || start[i] == c.len || c.text[start[i] - 1] == '\n';
            ok &= first[i] == 5 + lines || start[i] == c.len; /* an empty tail piece may say either */
            size_t len = start[i + 1] - start[i];
            int64_t pl = (int64_t)rec__tsv_count_newlines(c.text + start[i], len) +
                         (len && c.text[start[i + 1] - 1] != '\n');
            lines += pl;
            ok &= rec_tsv_parse(&o, "s", c.text + start[i], len, first[i], &pieces, NULL) == REC_OK;
        }
        ok &= lines == c.n_lines && pieces.n == whole.n;
        for (int64_t r = 0; ok && r < whole.n; r++) ok &= rows_equal(&pieces, r, &whole, r);
        CHECK(ok, "split of %zu bytes into %d parts", c.len, parts);
        /* balance: no piece is much more than its share plus one line */
        size_t longest_line = 0, p0 = 0;
        for (size_t i = 0; i <= c.len; i++)
            if (i == c.len || c.text[i] == '\n') {
                if (i - p0 + 1 > longest_line) longest_line = i - p0 + 1;
                p0 = i + 1;
            }
        int balanced = 1;
        for (int i = 0; i < parts; i++)
            balanced &= start[i + 1] - start[i] <= c.len / (size_t)parts + 1 + longest_line;
        CHECK(balanced, "pieces of about equal size");
        rec_raw_block_free(&whole);
        rec_raw_block_free(&pieces);
        free(s.p);
    }
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "%s/rectrain_tsv_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) {
        perror("mkdtemp");
        return 1;
    }
    test_errors();
    test_valid();
    test_skip();
    test_random();
    test_split();
    test_stream();
    test_stream_errors();
    const char *names[] = {"s.tsv", "s.tsv.gz", "empty.tsv", "odd.tsv", "crlf.tsv", "long.tsv",
                           "trunc.gz", "bad.tsv"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) unlink(tmp_path(names[i]));
    rmdir(tmpdir);
    return check_report();
}
