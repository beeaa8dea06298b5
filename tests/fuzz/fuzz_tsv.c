/* libFuzzer target for the Criteo TSV parser: any bytes, both formats, both bad-row modes,
 * strict or missing short rows.
 * Checks that nothing crashes, that accepted rows have consistent CSR offsets, and that the
 * fast parser keeps exactly the rows the reference parser accepts, with the same values.
 * The first input byte picks the options; the rest is the text. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rectrain/io.h"
#include "tsv_internal.h"

static int same_row(const rec_raw_block *a, int64_t ra, const rec_raw_block *b, int64_t rb) {
    if (a->label[ra] != b->label[rb]) return 0;
    for (int c = 0; c < REC_CRITEO_NINT; c++) {
        size_t ka = (size_t)c * (size_t)a->cap + (size_t)ra, kb = (size_t)c * (size_t)b->cap + (size_t)rb;
        if (a->int_null[ka] != b->int_null[kb] || (!a->int_null[ka] && a->ints[ka] != b->ints[kb]))
            return 0;
    }
    for (int c = 0; c < REC_CRITEO_NCAT; c++) {
        const rec_raw_list *x = &a->cat[c], *y = &b->cat[c];
        int32_t n = x->off[ra + 1] - x->off[ra];
        if (x->null[ra] != y->null[rb] || n != y->off[rb + 1] - y->off[rb]) return 0;
        for (int32_t j = 0; j < n; j++)
            if (x->val[x->off[ra] + j] != y->val[y->off[rb] + j]) return 0;
    }
    return 1;
}

static void check_csr(const rec_raw_block *b) {
    for (int c = 0; c < REC_CRITEO_NCAT; c++) {
        const rec_raw_list *l = &b->cat[c];
        if (l->off[0] != 0) abort();
        for (int64_t r = 0; r < b->n; r++) {
            int32_t n = l->off[r + 1] - l->off[r];
            if (n < 0 || l->off[r + 1] > l->vcap || l->null[r] != (n == 0)) abort();
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    rec_tsv_opts o = {.has_label = data[0] & 1,
                      .bad_rows = (data[0] >> 1) & 1 ? REC_BAD_ROWS_SKIP : REC_BAD_ROWS_FAIL,
                      .max_line = (data[0] >> 2) & 1 ? 64 + ((data[0] >> 3) & 15) * 8 : 0,
                      .short_rows = data[0] >> 7 ? REC_SHORT_ROWS_MISSING : REC_SHORT_ROWS_FAIL};
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int64_t lines = (int64_t)rec__tsv_count_newlines(text, len) + (len && text[len - 1] != '\n');
    /* an exact-size copy, so that ASan sees any read past the end of the text */
    char *copy = malloc(len ? len : 1);
    memcpy(copy, text, len);

    rec_raw_block fast, ref;
    rec_bad_report bad;
    memset(&bad, 0, sizeof bad);
    if (rec_raw_block_init(&fast, lines) || rec_raw_block_init(&ref, lines)) abort();
    rec_status s = rec_tsv_parse(&o, "f.tsv", copy, len, 1, &fast, &bad);
    if (s != REC_OK && s != REC_EFORMAT) abort();
    if (o.bad_rows == REC_BAD_ROWS_SKIP && s != REC_OK) abort();
    check_csr(&fast);

    /* the reference, line by line */
    int64_t max_line = o.max_line ? o.max_line : REC__TSV_MAX_LINE_DEFAULT;
    int64_t nref = 0, nbad = 0;
    size_t p = 0;
    for (int64_t ln = 0; ln < lines; ln++) {
        const char *nl = memchr(copy + p, '\n', len - p);
        size_t e = nl ? (size_t)(nl - copy) : len;
        char why[REC__TSV_WHY_CAP];
        const char *advice;
        rec_status rs = (int64_t)(e - p) > max_line
                            ? REC_EFORMAT
                            : rec__tsv_line_ref(copy + p, e - p, &o, &ref, nref, why, &advice);
        if (rs == REC_OK) nref++;
        else if (rs == REC_EFORMAT) {
            if (o.bad_rows == REC_BAD_ROWS_FAIL) break; /* the fast parse stopped here too */
            nbad++;
        } else abort();
        p = e + 1;
    }
    ref.n = nref;
    if (fast.n != nref) abort();
    if (o.bad_rows == REC_BAD_ROWS_SKIP && bad.count != nbad) abort();
    if (o.bad_rows == REC_BAD_ROWS_FAIL && (s == REC_OK) != (nref == lines)) abort();
    for (int64_t r = 0; r < nref; r++)
        if (!same_row(&fast, r, &ref, r)) abort();

    rec_raw_block_free(&fast);
    rec_raw_block_free(&ref);
    free(copy);
    return 0;
}
