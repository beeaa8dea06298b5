/* libFuzzer target for the .rshard reader (shard.h), the one binary format rectrain reads
 * from disk. The first input byte picks the options, the rest is the file:
 *   bit 0  set the header's file size to the input's and recompute the header checksum,
 *   bit 1  recompute the footer checksum,
 *   bit 2  recompute every group checksum the directory names (where it names one inside
 *          the file),
 *   bits 3..7  rows per read, 1..32.
 * Without the fix-ups almost every mutation dies at a checksum, and the fuzzer never meets
 * the directory's, the schema's or the columns' own checks; with them it does. The file is
 * opened twice (through a memfd); must hold:
 *  - open either succeeds or fails with REC_EFORMAT or REC_ENOMEM and a message that names
 *    the file; a file that opens once opens again;
 *  - reading every row, a chunk at a time, gives batches with the schema's widths, offsets
 *    from 0 and non-decreasing, ids inside their tables; a read that fails is REC_EFORMAT
 *    naming the file; reading past the end is refused;
 *  - every read succeeds exactly when rec_shard_verify of the second opening does (reads and
 *    verify check the same groups), and then both openings read the same bits.
 * Anything else (a crash, a leak, UB, an abort below) is a bug. Seeds: tests/fuzz/seeds/
 * fuzz_shard (small shards written by rectrain prep, option byte first). Build and run:
 * scripts/fuzz.sh. */
#include "fuzz_file.h"
#include "rectrain/core.h"
#include "rectrain/shard.h"
#include "shard_format.h"

enum { FIX_HEADER = 1, FIX_FOOTER = 2, FIX_GROUPS = 4 };

/* The checksums the options ask for, computed as the writer does, wherever the fields that
 * locate them lie inside the file; groups first, since their checksums live in the footer. */
static void fix_checksums(uint8_t *p, uint64_t n, int opt) {
    if (n < SHARD_MIN_BYTES) return;
    const uint64_t tail = n - SHARD_TAIL, fo = shard_get_u64(p + tail + SHARD_T_FOOTER_OFF);
    if (fo <= tail && tail - fo >= SHARD_F_FIXED) {
        const uint64_t ng = shard_get_u64(p + fo + SHARD_F_N_GROUPS);
        const uint64_t eb = shard_get_u32(p + fo + SHARD_F_ENTRY_BYTES);
        for (uint64_t g = 0; (opt & FIX_GROUPS) && eb >= SHARD_E_FIXED && g < ng && g < (tail - fo) / eb; g++) {
            uint8_t *e = p + fo + SHARD_F_FIXED + g * eb;
            if (e + SHARD_E_FIXED > p + tail) break;
            const uint64_t off = shard_get_u64(e + SHARD_E_OFFSET), bytes = shard_get_u64(e + SHARD_E_BYTES);
            if (off <= n && bytes <= n - off) shard_put_u32(e + SHARD_E_CRC, rec_crc32(0, p + off, bytes));
        }
        if (opt & FIX_FOOTER) shard_put_u32(p + tail + SHARD_T_FOOTER_CRC, rec_crc32(0, p + fo, tail - fo));
    }
    const uint64_t hb = shard_get_u64(p + SHARD_H_HEADER_BYTES);
    if ((opt & FIX_HEADER) && hb >= SHARD_H_PREFIX && hb <= n) {
        shard_put_u64(p + SHARD_H_FILE_BYTES, n);
        shard_put_u32(p + SHARD_H_CRC, 0);
        shard_put_u32(p + SHARD_H_CRC, rec_crc32(0, p, hb));
    }
}

/* Rows [0, n) of a read: the schema's id widths, offsets from 0, non-decreasing and inside
 * the ids, every id inside its table. */
static void check_batch(const rec_batch *b, const rec_shard_schema *sc, int64_t n) {
    if (b->n != n) abort();
    for (int32_t f = 0; f < sc->n_sparse; f++) {
        const rec_jagged *j = &b->sparse[f];
        const int64_t R = sc->sparse[f].table_rows;
        if (j->wide != rec_ids_wide(R) || j->offsets[0] != 0 || j->offsets[n] > j->nnz_cap) abort();
        for (int64_t r = 0; r < n; r++)
            if (j->offsets[r + 1] < j->offsets[r]) abort();
        for (int64_t k = 0; k < j->offsets[n]; k++)
            if (rec_jagged_id(j, k) < 0 || rec_jagged_id(j, k) >= R) abort();
    }
}

static int same_batch(const rec_batch *a, const rec_batch *b, int64_t n) {
    if (memcmp(a->label, b->label, (size_t)n * sizeof(float)) ||
        memcmp(a->dense, b->dense, (size_t)n * (size_t)a->n_dense * sizeof(float)))
        return 0;
    for (int32_t f = 0; f < a->n_sparse; f++) {
        const rec_jagged *x = &a->sparse[f], *y = &b->sparse[f];
        if (memcmp(x->offsets, y->offsets, (size_t)(n + 1) * sizeof(int64_t)) ||
            memcmp(x->ids, y->ids, (size_t)x->offsets[n] * (size_t)(x->wide ? 8 : 4)))
            return 0;
    }
    return 1;
}

static void read_all(const char *path, int64_t chunk) {
    rec_shard *s = NULL, *v = NULL;
    rec_status st = rec_shard_open(&s, path);
    if (st) {
        fuzz_refused(st, path);
        return;
    }
    if (rec_shard_open(&v, path) != REC_OK) abort();
    const rec_shard_schema *sc = rec_shard_get_schema(s);
    const int64_t rows = rec_shard_rows(s);
    if (rows < 0 || rec_shard_groups(s) < 0 || (rows == 0) != (rec_shard_groups(s) == 0)) abort();
    const rec_status vs = rec_shard_verify(v);
    if (vs) fuzz_refused(vs, path);
    if (rows > 0) {
        rec_batch a, b;
        if (rec_batch_init(&a, chunk, sc->n_dense, sc->n_sparse, 1) || rec_batch_init(&b, chunk, sc->n_dense, sc->n_sparse, 1))
            abort();
        int all_ok = 1;
        for (int64_t r = 0; r < rows; r += chunk) {
            const int64_t k = rows - r < chunk ? rows - r : chunk;
            st = rec_shard_read(s, r, k, &a);
            if (st) {
                fuzz_refused(st, path);
                all_ok = 0;
                continue;
            }
            check_batch(&a, sc, k);
            if (!vs && (rec_shard_read(v, r, k, &b) != REC_OK || !same_batch(&a, &b, k))) abort();
        }
        if (all_ok != (vs == REC_OK)) abort(); /* reads and verify disagree */
        if (rec_shard_read(s, rows, 1, &a) != REC_EINVAL) abort();
        rec_batch_free(&a);
        rec_batch_free(&b);
    }
    rec_shard_close(s);
    rec_shard_close(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(data, size, fix_checksums);
    if (path) read_all(path, 1 + (data[0] >> 3));
    return 0;
}
