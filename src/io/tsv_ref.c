/* The reference parser of one Criteo TSV line: the plain statement of the format that the
 * fast parser (tsv_parse.c) is tested against and falls back to, plus the newline counter
 * the reader uses to number lines. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "rectrain/core.h"
#include "tsv_internal.h"

/* Number of '\n' bytes in p[0..n). Counting into 32 byte-wide lanes for at most 255 rounds
 * before folding them lets gcc and clang vectorise it without widening every comparison to
 * 64 bits (about 10 GB/s with AVX2, against 2 GB/s for the one-accumulator loop). */
size_t rec__tsv_count_newlines(const char *p, size_t n) {
    size_t count = 0, i = 0;
    while (i < n) {
        size_t m = n - i < 255 * 32 ? n - i : 255 * 32;
        uint8_t acc[32] = {0};
        size_t j = 0;
        for (; j + 32 <= m; j += 32)
            for (int k = 0; k < 32; k++) acc[k] += p[i + j + k] == '\n';
        for (int k = 0; k < 32; k++) count += acc[k];
        for (; j < m; j++) count += p[i + j] == '\n';
        i += m;
    }
    return count;
}

/* Writes a printable rendering of s[0..n) into out (cap bytes): printable ASCII as is,
 * other bytes as \xNN, cut after about 32 input bytes with "..." so that messages stay one
 * readable line whatever the input. */
static void show_value(char *out, size_t cap, const char *s, size_t n) {
    size_t o = 0, limit = n > 32 ? 32 : n;
    for (size_t i = 0; i < limit && o + 5 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f && c != '\'') out[o++] = (char)c;
        else o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
    }
    if (n > limit && o + 4 < cap) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o < cap ? o : cap - 1] = '\0';
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* An I-field: optional '-', then one or more decimal digits, within int64 (INT64_MIN
 * included). Returns 0 on success, 1 if not an integer, 2 on overflow. */
static int parse_int(const char *s, size_t n, int64_t *out) {
    size_t i = 0;
    int neg = 0;
    if (i < n && s[i] == '-') {
        neg = 1;
        i++;
    }
    if (i == n) return 1;
    uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    uint64_t v = 0;
    int overflow = 0;
    for (; i < n; i++) {
        if (!is_digit(s[i])) return 1;
        uint64_t d = (uint64_t)(s[i] - '0');
        if (v > (limit - d) / 10) overflow = 1;
        else v = v * 10 + d;
    }
    if (overflow) return 2;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

/* One hex id: 1..16 hex digits. Returns 0 on success, 1 if not hex, 2 if empty, 3 if longer
 * than 16 digits. */
static int parse_hex(const char *s, size_t n, uint64_t *out) {
    if (n == 0) return 2;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        int h = hex_value(s[i]);
        if (h < 0) return 1;
        v = v << 4 | (uint64_t)h;
    }
    if (n > 16) return 3;
    *out = v;
    return 0;
}

static const char *const ADVICE_SKIP = "use --bad-rows skip to drop malformed rows";

/* See tsv_internal.h. The order of the checks is part of the contract (the fast parser
 * reports whatever this function reports): the field count first, then the fields from
 * left to right, and in a field its first bad element. */
rec_status rec__tsv_line_ref(const char *line, size_t len, const rec_tsv_opts *opts,
                             rec_raw_block *b, int64_t r, char *why, const char **advice) {
    const int has_label = opts->has_label;
    char v1[160], v2[160];
    *advice = ADVICE_SKIP;
    why[0] = '\0';
    if (len > 0 && line[len - 1] == '\r') len--;

    int want = has_label ? REC_CRITEO_NCOL : REC_CRITEO_NCOL - 1;
    int64_t fields = 1;
    for (size_t i = 0; i < len; i++) fields += line[i] == '\t';
    /* a stripped row: its absent trailing fields read as empty ones (the scan below finds
     * every field past the end of the line empty) */
    const int stripped = fields < want && opts->short_rows == REC_SHORT_ROWS_MISSING;
    if (fields != want && !stripped) {
        snprintf(why, REC__TSV_WHY_CAP, "expected %d tab-separated fields (%s format), found %lld",
                 want, has_label ? "train" : "test", (long long)fields);
        if (has_label && fields == want - 1)
            *advice = "a labelled row stripped of its empty last field, or the label-less test "
                      "format? --short-rows missing reads absent trailing fields as missing, "
                      "--format test reads the file as the test format";
        else if (fields < want) /* cut short, or one of many stripped rows: the file tells */
            *advice = "a row cut short: --bad-rows skip drops such rows; or, where many rows are "
                      "short, a file stripped of its trailing empty fields (published Criteo "
                      "copies often are): --short-rows missing reads the absent fields as "
                      "missing values";
        else if (!has_label && fields == want + 1)
            *advice = "does it have a label column? then give --format train; or use "
                      "--bad-rows skip to drop malformed rows";
        return REC_EFORMAT;
    }

    size_t pos = 0;
    int first_col = has_label ? 0 : 1;
    for (int col = first_col; col < REC_CRITEO_NCOL; col++) {
        size_t start = pos;
        while (pos < len && line[pos] != '\t') pos++;
        const char *f = line + start;
        size_t n = pos - start;
        pos++; /* past the tab */
        const char *name = rec_criteo_column_name(col);

        if (col == 0) {
            if (n != 1 || (f[0] != '0' && f[0] != '1')) {
                show_value(v1, sizeof v1, f, n);
                if (n == 0) snprintf(why, REC__TSV_WHY_CAP, "field label: empty; expected 0 or 1");
                else snprintf(why, REC__TSV_WHY_CAP, "field label: '%s' is not 0 or 1", v1);
                return REC_EFORMAT;
            }
            if (b) b->label[r] = (float)(f[0] - '0');
        } else if (col <= REC_CRITEO_NINT) {
            int64_t v = 0;
            int bad = n ? parse_int(f, n, &v) : 0;
            if (bad) {
                show_value(v1, sizeof v1, f, n);
                if (bad == 2)
                    snprintf(why, REC__TSV_WHY_CAP, "field %s: '%s' overflows a 64-bit integer",
                             name, v1);
                else
                    snprintf(why, REC__TSV_WHY_CAP,
                             "field %s: '%s' is not an integer (optional '-' then decimal digits)",
                             name, v1);
                return REC_EFORMAT;
            }
            if (b) {
                size_t k = (size_t)(col - 1) * (size_t)b->cap + (size_t)r;
                b->ints[k] = v;
                b->int_null[k] = n == 0;
            }
        } else {
            rec_raw_list *l = b ? &b->cat[col - 1 - REC_CRITEO_NINT] : NULL;
            int64_t at = l ? l->off[r] : 0;
            int is_list = memchr(f, ',', n) != NULL;
            size_t e = 0;
            while (n > 0) { /* each comma-separated element; an empty field holds none */
                size_t s = e;
                while (e < n && f[e] != ',') e++;
                uint64_t id = 0;
                int bad = parse_hex(f + s, e - s, &id);
                if (bad) {
                    show_value(v1, sizeof v1, f, n);
                    show_value(v2, sizeof v2, f + s, e - s);
                    if (bad == 2)
                        snprintf(why, REC__TSV_WHY_CAP,
                                 "field %s: '%s' has an empty element in its comma-separated id "
                                 "list", name, v1);
                    else if (is_list)
                        snprintf(why, REC__TSV_WHY_CAP,
                                 "field %s: list element '%s' is not a hex id (1..16 hex digits)",
                                 name, v2);
                    else if (bad == 3)
                        snprintf(why, REC__TSV_WHY_CAP,
                                 "field %s: '%s' is not a hex id (1..16 hex digits): it has %zu "
                                 "digits", name, v1, n);
                    else
                        snprintf(why, REC__TSV_WHY_CAP,
                                 "field %s: '%s' is not a hex id (1..16 hex digits)", name, v1);
                    return REC_EFORMAT;
                }
                if (l) {
                    REC_TRY(rec_raw_list_reserve(l, at + 1));
                    l->val[at] = (int64_t)id;
                }
                at++;
                if (e == n) break;
                e++; /* past the comma */
            }
            if (l) {
                if (at > INT32_MAX)
                    return rec_errorf(REC_EINVAL, "a categorical column of one raw block would "
                                                  "hold more ids than its 32-bit offsets allow; "
                                                  "read smaller chunks");
                l->off[r + 1] = (int32_t)at;
                l->null[r] = n == 0;
            }
        }
    }
    if (b && !has_label) b->label[r] = 0.0f;
    return REC_OK;
}
