/* libFuzzer target for the .rraw reader (rawcols.h), rectrain's second binary format read from
 * disk. The first input byte picks the options, the rest is the file:
 *   bit 0  set the header's file size to the input's and recompute the header checksum,
 *   bit 1  recompute the footer checksum,
 *   bit 2  recompute every group checksum the directory names (where it lies inside the file),
 *   bits 3..7  rows per read, 1..32.
 * Without the fix-ups almost every mutation dies at a checksum and never meets the
 * directory's or the columns' own checks. The file is opened twice (through a memfd); must
 * hold:
 *  - open either succeeds or fails with REC_EFORMAT or REC_ENOMEM and a message that names
 *    the file; a file that opens once opens again;
 *  - reading every row, a chunk at a time, gives blocks of that many rows, labels 0 or 1 (0
 *    without labels), flags 0 or 1, offsets from 0 and non-decreasing, no ids in a missing
 *    field; a read that fails is REC_EFORMAT naming the file; reading past the end is refused;
 *  - every read succeeds exactly when rec_rawcols_verify of the second opening does, and then
 *    both openings read the same values.
 * Anything else (a crash, a leak, UB, an abort below) is a bug. Seeds: tests/fuzz/seeds/
 * fuzz_rawcols (small files written by rectrain prep --raw, option byte first). Build and run:
 * scripts/fuzz.sh. */
#include "fuzz_file.h"
#include "rawcols_format.h"
#include "rectrain/core.h"
#include "rectrain/rawcols.h"

enum { FIX_HEADER = 1, FIX_FOOTER = 2, FIX_GROUPS = 4, NCAT = REC_CRITEO_NCAT, NINT = REC_CRITEO_NINT };

static uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

/* The checksums the options ask for, computed as the writer does, wherever the fields that
 * locate them lie inside the file; groups first, since their checksums live in the footer. */
static void fix_checksums(uint8_t *p, uint64_t n, int opt) {
    if (n < RRAW_HEADER + RRAW_F_FIXED + RRAW_TAIL) return;
    const uint64_t tail = n - RRAW_TAIL, fo = get64(p + tail + RRAW_T_FOOTER);
    if (fo <= tail && tail - fo >= RRAW_F_FIXED) {
        const uint64_t ng = get64(p + fo);
        for (uint64_t g = 0; (opt & FIX_GROUPS) && g < ng && g < (tail - fo - RRAW_F_FIXED) / RRAW_ENTRY; g++) {
            uint8_t *e = p + fo + RRAW_F_FIXED + g * RRAW_ENTRY;
            const uint64_t off = get64(e + RRAW_E_OFFSET), bytes = get64(e + RRAW_E_BYTES);
            if (off <= n && bytes <= n - off) put32(e + RRAW_E_CRC, rec_crc32(0, p + off, bytes));
        }
        if (opt & FIX_FOOTER) put32(p + tail + RRAW_T_CRC, rec_crc32(0, p + fo, tail - fo));
    }
    if (opt & FIX_HEADER) {
        put64(p + RRAW_H_FILE, n);
        put32(p + RRAW_H_CRC, 0);
        put32(p + RRAW_H_CRC, rec_crc32(0, p, RRAW_HEADER));
    }
}

static void check_block(const rec_raw_block *b, int64_t n, int has_label) {
    if (b->n != n || b->has_label != has_label) abort();
    for (int64_t r = 0; r < n; r++)
        if (has_label ? b->label[r] != 0.0f && b->label[r] != 1.0f : b->label[r] != 0.0f) abort();
    for (int64_t i = 0; i < NINT; i++)
        for (int64_t r = 0; r < n; r++)
            if (b->int_null[i * b->cap + r] > 1) abort();
    for (int c = 0; c < NCAT; c++) {
        const rec_raw_list *l = &b->cat[c];
        if (l->off[0] != 0 || l->off[n] > l->vcap) abort();
        for (int64_t r = 0; r < n; r++)
            if (l->null[r] > 1 || l->off[r + 1] < l->off[r] || (l->null[r] && l->off[r + 1] != l->off[r])) abort();
    }
}

static int same_block(const rec_raw_block *a, const rec_raw_block *b, int64_t n) {
    if (memcmp(a->label, b->label, 4 * (size_t)n)) return 0;
    for (int i = 0; i < NINT; i++)
        if (memcmp(a->ints + i * a->cap, b->ints + i * b->cap, 8 * (size_t)n) ||
            memcmp(a->int_null + i * a->cap, b->int_null + i * b->cap, (size_t)n))
            return 0;
    for (int c = 0; c < NCAT; c++) {
        const rec_raw_list *x = &a->cat[c], *y = &b->cat[c];
        if (memcmp(x->off, y->off, 4 * (size_t)(n + 1)) || memcmp(x->null, y->null, (size_t)n) ||
            memcmp(x->val, y->val, 8 * (size_t)x->off[n]))
            return 0;
    }
    return 1;
}

static void read_all(const char *path, int64_t chunk) {
    rec_rawcols *s = NULL, *v = NULL;
    rec_status st = rec_rawcols_open(&s, path);
    if (st) {
        fuzz_refused(st, path);
        return;
    }
    if (rec_rawcols_open(&v, path) != REC_OK) abort();
    const int64_t rows = rec_rawcols_rows(s);
    if (rows < 0 || (rows == 0) != (rec_rawcols_groups(s) == 0)) abort();
    const rec_status vs = rec_rawcols_verify(v);
    if (vs) fuzz_refused(vs, path);
    rec_raw_block a, b;
    if (rec_raw_block_init(&a, chunk) || rec_raw_block_init(&b, chunk)) abort();
    int all_ok = 1;
    for (int64_t r = 0; r < rows; r += chunk) {
        const int64_t k = rows - r < chunk ? rows - r : chunk;
        st = rec_rawcols_read(s, r, k, &a);
        if (st) {
            fuzz_refused(st, path);
            all_ok = 0;
            continue;
        }
        check_block(&a, k, rec_rawcols_has_label(s));
        if (!vs && (rec_rawcols_read(v, r, k, &b) != REC_OK || !same_block(&a, &b, k))) abort();
    }
    if (all_ok != (vs == REC_OK)) abort(); /* reads and verify disagree */
    if (rec_rawcols_read(s, rows, 1, &a) != REC_EINVAL) abort();
    rec_raw_block_free(&a);
    rec_raw_block_free(&b);
    rec_rawcols_close(s);
    rec_rawcols_close(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(data, size, fix_checksums);
    if (path) read_all(path, 1 + (data[0] >> 3));
    return 0;
}
