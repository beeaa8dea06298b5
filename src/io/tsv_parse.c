/* The fast Criteo TSV parser (text -> column-major raw block) and the splitter that cuts a
 * chunk into pieces of whole lines for parallel parsing.
 *
 * The fast path handles the common row in one pass over its bytes with no library calls;
 * anything it does not fully handle (every malformed row, ints of more than 18 digits, a
 * multi-hot list that outgrows the value array, a last line without '\n') goes to the
 * reference parser rec__tsv_line_ref, which writes the row or says what is wrong. The two
 * therefore agree by construction on what they reject, and tests/test_tsv.c checks that
 * they agree on what they accept. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "rectrain/core.h"
#include "tsv_internal.h"

/* Hex digit value + 1 for every hex digit, 0 for every other byte, so that one lookup both
 * classifies and converts: `HEX1[c] - 1u` is the digit, or >= 16 for a non-digit. */
static const uint8_t HEX1[256] = {
    ['0'] = 1,   ['1'] = 2,   ['2'] = 3,   ['3'] = 4,   ['4'] = 5,   ['5'] = 6,
    ['6'] = 7,   ['7'] = 8,   ['8'] = 9,   ['9'] = 10,  ['a'] = 11,  ['b'] = 12,
    ['c'] = 13,  ['d'] = 14,  ['e'] = 15,  ['f'] = 16,  ['A'] = 11,  ['B'] = 12,
    ['C'] = 13,  ['D'] = 14,  ['E'] = 15,  ['F'] = 16,
};
#define HEXV(ch) ((unsigned)HEX1[(uint8_t)(ch)] - 1u)

/* Loads 8 bytes as a little-endian word. */
static inline uint64_t load8(const char *p) {
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

/* If the 8 bytes at p are all hex digits, returns 1 and their value in *out. SWAR: each byte
 * is classified as '0'..'9', 'a'..'f' or 'A'..'F' with carry-free byte arithmetic (every
 * byte below 0x80 is checked first, so adding a constant < 0x80 cannot carry across). */
static inline int hex8(uint64_t w, uint64_t *out) {
    const uint64_t ones = 0x0101010101010101ULL, high = 0x8080808080808080ULL;
    if (w & high) return 0;
    /* byte >= lo  <=>  (byte + (0x80 - lo)) has its high bit set */
#define GE(x, lo) (((x) + ones * (0x80 - (lo))) & high)
    uint64_t digit = GE(w, '0') & ~GE(w, '9' + 1);
    uint64_t lw = w | ones * 0x20; /* ASCII lower case (letters only matter) */
    uint64_t alpha = GE(lw, 'a') & ~GE(lw, 'f' + 1);
#undef GE
    if ((digit | alpha) != high) return 0;
    /* digit value: low nibble, plus 9 for letters */
    uint64_t nib = (w & ones * 0x0f) + (alpha >> 7) * 9;
    /* digits in memory order d0..d7 (d0 most significant): pair them into bytes
     * p_k = d_2k << 4 | d_2k+1, which land in the low byte of each 16-bit lane */
    nib = (nib << 4 | nib >> 8) & 0x00ff00ff00ff00ffULL;
    *out = (nib & 0xff) << 24 | (nib >> 16 & 0xff) << 16 | (nib >> 32 & 0xff) << 8 |
           (nib >> 48 & 0xff);
    return 1;
}

/* Counts the leading decimal digits of the 8 bytes in w (memory order) and, when there are
 * fewer than 8, returns their count with their value in *out; 8 means "8 or more, not
 * converted". A byte is a digit when (byte - '0') < 10; the subtraction may borrow, and the
 * addition carry, only out of a non-digit byte, and only upward, so the lowest flagged byte
 * is exact. The conversion right-aligns the digits behind zeros and combines them pairwise
 * (the 8-digit SWAR of simdjson/fast_float). */
static inline size_t digits8(uint64_t w, uint64_t *out) {
    const uint64_t ones = 0x0101010101010101ULL, high = 0x8080808080808080ULL;
    uint64_t t = w - ones * '0';
    uint64_t bad = ((t + ones * (0x80 - 10)) | t) & high;
    if (!bad) return 8;
    size_t k = (size_t)__builtin_ctzll(bad) >> 3;
    uint64_t x = k ? t << (64 - 8 * k) : 0;
    x = (x * 10 + (x >> 8)) & 0x00ff00ff00ff00ffULL;
    x = (x * 100 + (x >> 16)) & 0x0000ffff0000ffffULL;
    x = (x * 10000 + (x >> 32)) & 0xffffffffULL;
    *out = x;
    return k;
}

/* Parses one line starting at p into row r of b. The line is known to end with '\n' inside
 * the buffer, and `safe` is the last position from which 16 bytes may be loaded. Every scan
 * stops at a byte that is not a digit/hex/sign, so no read passes the line's '\n'. Returns
 * the position after the '\n', or NULL if the row needs the reference parser (b's slots for
 * row r are then unspecified, and off[r] is untouched). */
static const char *fast_line(const char *p, const char *safe, rec_raw_block *b, int64_t r,
                             int has_label) {
    const size_t cap = (size_t)b->cap;
    if (has_label) {
        if ((p[0] != '0' && p[0] != '1') || p[1] != '\t') return NULL;
        b->label[r] = (float)(p[0] - '0');
        p += 2;
    } else {
        b->label[r] = 0.0f;
    }
    int64_t *ints = b->ints + r;
    uint8_t *inull = b->int_null + r;
    for (int c = 0; c < REC_CRITEO_NINT; c++) {
        int neg = *p == '-';
        p += neg;
        uint64_t v;
        size_t nd;
        if (p < safe && (nd = digits8(load8(p), &v)) < 8) {
            p += nd; /* up to 7 digits: no loop, no per-digit branch */
        } else {
            const char *s = p;
            unsigned d;
            v = 0;
            while ((d = (unsigned)(uint8_t)*p - '0') < 10) {
                v = v * 10 + d;
                p++;
            }
            nd = (size_t)(p - s);
        }
        if (*p != '\t' || nd > 18 || (neg && nd == 0)) return NULL;
        p++;
        ints[(size_t)c * cap] = neg ? (int64_t)(0 - v) : (int64_t)v;
        inull[(size_t)c * cap] = nd == 0;
    }
    for (int c = 0; c < REC_CRITEO_NCAT; c++) {
        rec_raw_list *l = &b->cat[c];
        const int32_t at0 = l->off[r];
        int32_t at = at0;
        if (HEXV(*p) < 16) { /* otherwise empty (missing), or bad: the terminator check decides */
            for (;;) {
                const char *s = p;
                uint64_t v;
                if (p < safe && hex8(load8(p), &v) && HEXV(p[8]) >= 16) {
                    p += 8; /* the Criteo shape: exactly 8 digits */
                } else {
                    unsigned h;
                    v = 0;
                    while ((h = HEXV(*p)) < 16) {
                        v = v << 4 | h;
                        p++;
                    }
                    size_t nd = (size_t)(p - s);
                    if (nd == 0 || nd > 16) return NULL;
                }
                if (at >= l->vcap) return NULL; /* the reference parser grows the array */
                l->val[at++] = (int64_t)v;
                if (*p != ',') break;
                p++;
            }
        }
        l->null[r] = at == at0;
        l->off[r + 1] = at;
        if (c < REC_CRITEO_NCAT - 1) {
            if (*p != '\t') return NULL;
        } else {
            p += *p == '\r'; /* CRLF; a '\r' is not '\n', so the next byte is in the line */
            if (*p != '\n') return NULL;
        }
        p++;
    }
    return p;
}

static const char *find_last_newline(const char *text, size_t len) {
    while (len > 0) {
        if (text[len - 1] == '\n') return text + len - 1;
        len--;
    }
    return NULL;
}

/* Handles one line the fast path did not take: `line[0..len)` without its '\n';
 * `terminated` says whether a '\n' followed. Writes the row as row r of `out` and returns
 * REC_OK with *kept = 1, or records it as bad (SKIP mode, *kept = 0), or fails with the
 * message "PATH:LINE: why (advice)". */
static rec_status slow_line(const rec_tsv_opts *opts, int64_t max_line, const char *path,
                            const char *line, size_t len, int terminated, int64_t lineno,
                            rec_raw_block *out, int64_t r, rec_bad_report *bad, int *kept) {
    char why[REC__TSV_WHY_CAP];
    const char *advice = "use --bad-rows skip to drop malformed rows";
    rec_status s;
    *kept = 0;
    if ((int64_t)len > max_line) {
        snprintf(why, sizeof why, "line is longer than %lld bytes", (long long)max_line);
        advice = "is this a Criteo TSV file? use --bad-rows skip to drop over-long rows";
        s = REC_EFORMAT;
    } else {
        s = rec__tsv_line_ref(line, len, opts, out, r, why, &advice);
        if (s != REC_OK && s != REC_EFORMAT)
            return rec_error_wrap(s, "%s:%lld", path ? path : "<text>", (long long)lineno);
        if (s == REC_EFORMAT && !terminated) {
            size_t n = len > 0 && line[len - 1] == '\r' ? len - 1 : len;
            int64_t fields = 1;
            for (size_t i = 0; i < n; i++) fields += line[i] == '\t';
            int want = opts->has_label ? REC_CRITEO_NCOL : REC_CRITEO_NCOL - 1;
            if (fields < want && opts->short_rows != REC_SHORT_ROWS_MISSING) {
                snprintf(why, sizeof why,
                         "truncated last line: expected %d tab-separated fields (%s format), "
                         "found %lld",
                         want, opts->has_label ? "train" : "test", (long long)fields);
                advice = "the file ends in the middle of a row; re-download or re-create it, "
                         "or use --bad-rows skip to drop the row";
            }
        }
    }
    if (s == REC_OK) {
        *kept = 1;
        return REC_OK;
    }
    if (opts->bad_rows == REC_BAD_ROWS_SKIP) {
        rec_bad_report_add(bad, path, lineno, why);
        return REC_OK;
    }
    return rec_errorf(REC_EFORMAT, "%s:%lld: %s (%s)", path ? path : "<text>",
                      (long long)lineno, why, advice);
}

/* See io.h. */
rec_status rec_bad_share_check(const rec_tsv_opts *opts, const char *path, int64_t kept,
                               const rec_bad_report *bad) {
    if (opts->bad_rows != REC_BAD_ROWS_SKIP || bad->count == 0) return REC_OK;
    const double limit = opts->max_bad_share > 0 ? opts->max_bad_share : REC_MAX_BAD_SHARE_DEFAULT;
    const double share = (double)bad->count / (double)(kept + bad->count);
    if (share <= limit) return REC_OK;
    char first[512] = "";
    if (bad->n_kept > 0)
        snprintf(first, sizeof first, "; the first: %s:%lld: %s", bad->path[0], (long long)bad->line[0],
                 bad->why[0]);
    return rec_errorf(REC_EFORMAT,
                      "%s: --bad-rows skip dropped %.1f%% of the rows (%lld of %lld), more than "
                      "--max-bad-share %g allows: so many malformed rows are a fault of the file, and "
                      "the rows left would be a biased sample%s. Mend the file (a copy stripped of its "
                      "trailing empty fields reads whole with --short-rows missing), or raise "
                      "--max-bad-share if dropping them is what you want",
                      path, 100 * share, (long long)bad->count, (long long)(kept + bad->count), limit, first);
}

/* See io.h. Rows are appended at out->n; out->n is advanced only past rows that were
 * written completely, so on failure the block holds the good rows before the bad one. */
rec_status rec_tsv_parse(const rec_tsv_opts *opts, const char *path, const char *text,
                         size_t len, int64_t first_line, rec_raw_block *out,
                         rec_bad_report *bad) {
    if (!opts || (opts->has_label != 0 && opts->has_label != 1))
        return rec_errorf(REC_EINVAL, "rec_tsv_parse: has_label must be 0 or 1 (resolve -1 with "
                                      "rec_tsv_open first)");
    if (opts->max_line < 0)
        return rec_errorf(REC_EINVAL, "rec_tsv_parse: max_line %lld is negative",
                          (long long)opts->max_line);
    int64_t max_line = opts->max_line ? opts->max_line : REC__TSV_MAX_LINE_DEFAULT;
    int64_t lines = (int64_t)rec__tsv_count_newlines(text, len) + (len > 0 && text[len - 1] != '\n');
    if (lines > out->cap - out->n)
        return rec_errorf(REC_EINVAL,
                          "%s:%lld: %lld lines do not fit in the raw block (%lld of %lld rows "
                          "free); give it more rows",
                          path ? path : "<text>", (long long)first_line, (long long)lines,
                          (long long)(out->cap - out->n), (long long)out->cap);
    if (out->n == 0) {
        out->first_line = first_line;
        for (int c = 0; c < REC_CRITEO_NCAT; c++) out->cat[c].off[0] = 0;
    }
    out->has_label = opts->has_label;

    const char *p = text, *end = text + len;
    const char *last_nl = find_last_newline(text, len);
    const char *fast_end = last_nl ? last_nl + 1 : text;
    /* 16-byte loads from before `safe` stay inside the text. */
    const char *safe = len >= 16 ? end - 16 : text;
    int64_t r = out->n, lineno = first_line;
    rec_status s = REC_OK;
    while (p < fast_end) {
        const char *q = fast_line(p, safe, out, r, opts->has_label);
        if (q && q - p - 1 <= max_line) {
            p = q;
            r++;
            lineno++;
            continue;
        }
        const char *nl = memchr(p, '\n', (size_t)(fast_end - p));
        int kept;
        s = slow_line(opts, max_line, path, p, (size_t)(nl - p), 1, lineno, out, r, bad, &kept);
        if (s) break;
        r += kept;
        lineno++;
        p = nl + 1;
    }
    if (!s && p < end) {
        int kept;
        s = slow_line(opts, max_line, path, p, (size_t)(end - p), 0, lineno, out, r, bad, &kept);
        if (!s) r += kept;
    }
    out->n = r;
    return s;
}

/* See io.h. Boundaries are placed at the first line start at or after len*i/parts, so
 * pieces differ in size by at most one line; a piece may be empty when the chunk has fewer
 * lines than parts. */
void rec_tsv_split(const rec_text_chunk *chunk, int parts, size_t *start, int64_t *first) {
    if (parts < 1) return;
    const char *text = chunk->text;
    size_t len = chunk->len;
    start[0] = 0;
    first[0] = chunk->first_line;
    for (int i = 1; i <= parts; i++) {
        size_t b = len;
        if (i < parts) {
            size_t target = len / (size_t)parts * (size_t)i + len % (size_t)parts * (size_t)i / (size_t)parts;
            if (target < start[i - 1]) target = start[i - 1];
            if (target == 0) {
                b = 0;
            } else {
                const char *nl = memchr(text + target - 1, '\n', len - (target - 1));
                b = nl ? (size_t)(nl - text) + 1 : len;
            }
            if (b < start[i - 1]) b = start[i - 1];
        }
        start[i] = b;
        if (i < parts)
            first[i] = first[i - 1] +
                       (int64_t)rec__tsv_count_newlines(text + start[i - 1], b - start[i - 1]);
    }
}
