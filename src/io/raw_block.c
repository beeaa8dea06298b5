/* The raw column block the TSV reader fills (column-major, CSR categoricals), the Criteo
 * column names, and the bad-row report. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "rectrain/core.h"
#include "rectrain/io.h"

static const char *const rec__criteo_names[REC_CRITEO_NCOL] = {
    "label", "I1",  "I2",  "I3",  "I4",  "I5",  "I6",  "I7",  "I8",  "I9",
    "I10",   "I11", "I12", "I13", "C1",  "C2",  "C3",  "C4",  "C5",  "C6",
    "C7",    "C8",  "C9",  "C10", "C11", "C12", "C13", "C14", "C15", "C16",
    "C17",   "C18", "C19", "C20", "C21", "C22", "C23", "C24", "C25", "C26"};

const char *rec_criteo_column_name(int c) {
    if (c < 0 || c >= REC_CRITEO_NCOL) return NULL;
    return rec__criteo_names[c];
}

int rec_criteo_column_index(const char *name) {
    if (!name) return -1;
    for (int c = 0; c < REC_CRITEO_NCOL; c++)
        if (strcmp(name, rec__criteo_names[c]) == 0) return c;
    return -1;
}

/* Allocates every column of a block for `cap` rows (at least one, so that the arrays are
 * never NULL) with one value per row and categorical column, which single-hot data never
 * outgrows; multi-hot parsing grows the value arrays with rec_raw_list_reserve. The block is
 * zeroed (n = 0, has_label = 1, first_line = 1). On failure everything allocated so far is
 * freed, `b` is left zeroed and REC_ENOMEM / REC_EINVAL is returned. */
rec_status rec_raw_block_init(rec_raw_block *b, int64_t cap) {
    memset(b, 0, sizeof *b);
    if (cap < 0 || cap >= INT32_MAX)
        return rec_errorf(REC_EINVAL, "raw block capacity %lld rows is out of range (0 .. %d)",
                          (long long)cap, INT32_MAX - 1);
    size_t rows = (size_t)(cap > 0 ? cap : 1);
    rec_status s;
    b->cap = cap;
    b->has_label = 1;
    b->first_line = 1;
    if ((s = rec_alloc((void **)&b->label, rows * sizeof(float), "raw block labels")) ||
        (s = rec_alloc((void **)&b->ints, REC_CRITEO_NINT * rows * sizeof(int64_t),
                       "raw block integer columns")) ||
        (s = rec_alloc((void **)&b->int_null, REC_CRITEO_NINT * rows, "raw block null flags")))
        goto fail;
    for (int c = 0; c < REC_CRITEO_NCAT; c++) {
        rec_raw_list *l = &b->cat[c];
        if ((s = rec_alloc((void **)&l->off, (rows + 1) * sizeof(int32_t), "raw block offsets")) ||
            (s = rec_alloc((void **)&l->val, rows * sizeof(int64_t), "raw block ids")) ||
            (s = rec_alloc((void **)&l->null, rows, "raw block null flags")))
            goto fail;
        l->vcap = (int64_t)rows;
    }
    return REC_OK;
fail:
    rec_raw_block_free(b);
    return s;
}

/* Frees every array of the block and zeroes it; safe on a zeroed or already freed block. */
void rec_raw_block_free(rec_raw_block *b) {
    if (!b) return;
    rec_free(b->label);
    rec_free(b->ints);
    rec_free(b->int_null);
    for (int c = 0; c < REC_CRITEO_NCAT; c++) {
        rec_free(b->cat[c].off);
        rec_free(b->cat[c].val);
        rec_free(b->cat[c].null);
    }
    memset(b, 0, sizeof *b);
}

/* Grows l->val to hold at least n values (keeping the first vcap), at least doubling so that
 * appending value by value costs amortised O(1). Offsets are int32, so a column of one block
 * holds at most INT32_MAX values: beyond that REC_EINVAL asks for smaller blocks. */
rec_status rec_raw_list_reserve(rec_raw_list *l, int64_t n) {
    if (n <= l->vcap) return REC_OK;
    if (n > INT32_MAX)
        return rec_errorf(REC_EINVAL,
                          "a categorical column of one raw block would hold %lld ids, more than "
                          "its 32-bit offsets allow; read smaller chunks",
                          (long long)n);
    int64_t want = l->vcap * 2;
    if (want < n) want = n;
    if (want < 64) want = 64;
    if (want > INT32_MAX) want = INT32_MAX;
    REC_TRY(rec_realloc((void **)&l->val, (size_t)l->vcap * sizeof(int64_t),
                        (size_t)want * sizeof(int64_t), "raw block ids"));
    l->vcap = want;
    return REC_OK;
}

void rec_bad_report_add(rec_bad_report *bad, const char *path, int64_t line, const char *why) {
    if (!bad) return;
    if (bad->n_kept < REC_BAD_ROWS_KEEP) {
        const int k = bad->n_kept++;
        bad->line[k] = line;
        snprintf(bad->path[k], sizeof bad->path[k], "%s", path ? path : "<text>");
        snprintf(bad->why[k], sizeof bad->why[k], "%s", why);
    }
    bad->count++;
}

/* Sums the counts and keeps the REC_BAD_ROWS_KEEP first locations of the two reports (each
 * already in input order): within one file the lowest-numbered, so merging the reports of
 * consecutive pieces of a file in any order gives the report of the whole. */
void rec_bad_report_merge(rec_bad_report *dst, const rec_bad_report *src) {
    if (!dst || !src) return;
    rec_bad_report out;
    memset(&out, 0, sizeof out);
    out.count = dst->count + src->count;
    int i = 0, j = 0;
    while (out.n_kept < REC_BAD_ROWS_KEEP && (i < dst->n_kept || j < src->n_kept)) {
        const rec_bad_report *from;
        int k;
        if (j >= src->n_kept ||
            (i < dst->n_kept && (strcmp(dst->path[i], src->path[j]) != 0 || dst->line[i] <= src->line[j]))) {
            from = dst;
            k = i++;
        } else {
            from = src;
            k = j++;
        }
        out.line[out.n_kept] = from->line[k];
        memcpy(out.path[out.n_kept], from->path[k], sizeof out.path[0]);
        memcpy(out.why[out.n_kept], from->why[k], sizeof out.why[0]);
        out.n_kept++;
    }
    *dst = out;
}

/* See io.h. The share is of every row the input held (kept + dropped), as prep has always
 * printed it; the locations are the report's first REC_BAD_ROWS_KEEP, in input order. */
void rec_bad_report_print(FILE *f, const char *who, const char *what, const rec_bad_report *bad, int64_t kept) {
    if (!f || !bad || bad->count == 0) return;
    fprintf(f, "%s: skipped %lld malformed row%s (%.2f%% of %s); first:\n", who, (long long)bad->count,
            bad->count == 1 ? "" : "s", 100.0 * (double)bad->count / (double)(kept + bad->count), what);
    for (int k = 0; k < bad->n_kept; k++) fprintf(f, "  %s:%lld: %s\n", bad->path[k], (long long)bad->line[k], bad->why[k]);
}
