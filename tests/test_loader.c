/* Data sets and loaders (train.h): a generated Criteo TSV is prepped into a .rshard by the
 * library itself, then
 *   - shard loaders over [0, N) and over ranges that start and end inside row groups (ring
 *     depths 2 and 3, a short last batch, empty and one-row ranges) deliver exactly the rows
 *     of direct rec_shard_read calls, bit for bit;
 *   - TSV loaders (same spec, 1 or 2 prep threads, chunks small enough that batches straddle
 *     chunk and engine-thread boundaries) deliver exactly the shard loader's batches, also
 *     through a categorify spec with vocabularies from a shard;
 *   - a shuffled epoch (test_shuffled_order) is a permutation of the training rows, repeatable
 *     per (seed, epoch) and ring depth, another for another seed or epoch, and a skip gives
 *     the rest of it; a TSV's is the same for 1 and 2 prep threads, and a list of shards cut
 *     mid-block gives its concatenation's order;
 *   - the counting pass of a TSV gives N (and N-1 with a malformed line in skip mode);
 *   - closing mid-stream, or before the first batch, neither hangs nor leaks (run under ASan);
 *   - a loader refuses a row with a dense value that is not finite or a label not 0 or 1
 *     (after the batches before it), naming the row; rec_batch_first_bad_value finds it;
 *   - prep reads a pipe once (a one-pass spec, the same shard as from the file); a two-pass
 *     spec and a data set refuse a pipe;
 *   - every refusal names the file and says what to do, and a malformed line met by the
 *     producer surfaces from rec_loader_next as FILE:LINE after the batches before it.
 */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "cuda_impl.h"
#include "rectrain/core.h"
#include "rectrain/ingest.h"
#include "rectrain/prep.h"
#include "rectrain/shard.h"
#include "rectrain/train.h"

extern size_t rec__loader_chunk_bytes;   /* src/train/loader.c */

enum { N = 5000, GROUP = 1000, BAD_ROW = 3000 };

static char g_dir[256], g_tsv[300], g_shard[300], g_vocab_shard[300], g_std[600], g_vocab_spec[600];

/* ---- helpers ------------------------------------------------------------------------------ */

/* Row i of a equals row j of b bit for bit: label, dense values, every feature's ids. */
static int same_row(const rec_batch *a, int64_t i, const rec_batch *b, int64_t j) {
    if (a->n_dense != b->n_dense || a->n_sparse != b->n_sparse) return 0;
    if (memcmp(&a->label[i], &b->label[j], sizeof(float)) != 0) return 0;
    if (memcmp(a->dense + i * a->n_dense, b->dense + j * b->n_dense, (size_t)a->n_dense * sizeof(float)) != 0)
        return 0;
    for (int32_t f = 0; f < a->n_sparse; f++) {
        const rec_jagged *x = &a->sparse[f], *y = &b->sparse[f];
        int64_t la = x->offsets[i + 1] - x->offsets[i], lb = y->offsets[j + 1] - y->offsets[j];
        if (la != lb) return 0;
        for (int64_t k = 0; k < la; k++)
            if (rec_jagged_id(x, x->offsets[i] + k) != rec_jagged_id(y, y->offsets[j] + k)) return 0;
    }
    return 1;
}

/* Whole batches equal: same n, offsets starting at 0, every row equal. */
static int same_batch(const rec_batch *a, const rec_batch *b) {
    if (a->n != b->n) return 0;
    for (int32_t f = 0; f < a->n_sparse; f++)
        if (a->sparse[f].offsets[0] != 0 || b->sparse[f].offsets[0] != 0) return 0;
    for (int64_t r = 0; r < a->n; r++)
        if (!same_row(a, r, b, r)) return 0;
    return 1;
}

/* Drains a loader over [row0, row1) and compares batch k with a direct rec_shard_read of rows
 * [row0 + k*batch, ...) from `shard_path`. Returns the batches seen, -1 on any mismatch
 * (reported). */
static int64_t drain_vs_shard(const char *what, rec_dataset *d, const char *shard_path, int64_t row0,
                              int64_t row1, int64_t batch, int depth) {
    rec_shard *ref = NULL;
    rec_loader *l = NULL;
    rec_batch want;
    memset(&want, 0, sizeof want);
    rec_status s = rec_shard_open(&ref, shard_path);
    if (!s) s = rec_batch_init(&want, batch, rec_dataset_n_dense(d), rec_dataset_n_sparse(d), 1);
    if (!s) s = rec_loader_open(&l, d, row0, row1, batch, depth);
    CHECK(s == REC_OK, "%s: setup: %s", what, rec_errmsg());
    int64_t k = 0, bad = 0, r = row0;
    while (!s) {
        const rec_batch *b;
        s = rec_loader_next(l, &b);
        CHECK(s == REC_OK, "%s: batch %lld: %s", what, (long long)k, rec_errmsg());
        if (s || !b) break;
        int64_t n = row1 - r < batch ? row1 - r : batch;
        if (n <= 0 || rec_shard_read(ref, r, n, &want) != REC_OK || !same_batch(b, &want)) {
            if (bad++ == 0) fprintf(stderr, "%s: batch %lld (rows from %lld, %lld rows) differs\n", what,
                                    (long long)k, (long long)r, (long long)b->n);
        }
        r += b->n;
        k++;
    }
    int64_t expect = (row1 - row0 + batch - 1) / batch;
    CHECK(!s && bad == 0 && k == expect && r == row1, "%s: %lld batches (want %lld), %lld differ, ended at row %lld",
          what, (long long)k, (long long)expect, (long long)bad, (long long)r);
    /* After the end, the end again. */
    const rec_batch *b = (const rec_batch *)&want;
    if (l) CHECK(rec_loader_next(l, &b) == REC_OK && b == NULL, "%s: a second end", what);
    if (l) CHECK(rec_loader_wait_seconds(l) >= 0 && isfinite(rec_loader_wait_seconds(l)), "%s: wait seconds", what);
    rec_loader_close(l);
    rec_batch_free(&want);
    rec_shard_close(ref);
    return bad ? -1 : k;
}

/* The whole file (malloc'ed) or NULL; *len its length. */
static char *read_text(const char *path, size_t *len) {
    char *buf = NULL;
    return rec_read_file(path, "test file", (size_t)1 << 31, &buf, len) ? NULL : buf;
}

static void write_file(const char *path, const char *text, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(text, 1, len, f) != len) fprintf(stderr, "cannot write %s\n", path);
    if (f) fclose(f);
}

/* Writes a copy of the generated TSV to `path` with line `bad_line` (1-based) replaced by a
 * row whose C7 is not a hex id (or, when bad_line is 0, unchanged). */
static void write_tsv_variant(const char *path, int64_t bad_line) {
    size_t len;
    char *text = read_text(g_tsv, &len);
    if (!text) {
        fprintf(stderr, "cannot read %s\n", g_tsv);
        return;
    }
    const char *p = bad_line > 0 ? text : text + len;
    for (int64_t l = 1; bad_line > 0 && l < bad_line; l++) p = strchr(p, '\n') + 1;
    const char *e = bad_line > 0 ? strchr(p, '\n') + 1 : text + len;
    FILE *f = fopen(path, "wb");
    fwrite(text, 1, (size_t)(p - text), f);
    if (bad_line > 0) {
        fputs("1", f);
        for (int c = 0; c < 13; c++) fputs("\t5", f);
        for (int c = 0; c < 26; c++) fputs(c == 6 ? "\txyz!" : "\t1a2b3c4d", f);
        fputc('\n', f);
        fwrite(e, 1, len - (size_t)(e - text), f);
    }
    fclose(f);
    free(text);
}

static rec_dataset_opts tsv_opts(const char *path, const char *spec, const char *vocab_from, int threads) {
    rec_dataset_opts o;
    memset(&o, 0, sizeof o);
    o.path = path;
    o.spec_path = spec;
    o.vocab_from = vocab_from;
    o.tsv.has_label = -1;
    o.prep_threads = threads;
    return o;
}

/* ---- setup -------------------------------------------------------------------------------- */

static int make_data(const char *src) {
    snprintf(g_std, sizeof g_std, "%s/configs/criteo_standard.json", src);
    snprintf(g_vocab_spec, sizeof g_vocab_spec, "%s/configs/criteo_vocab.json", src);
    snprintf(g_tsv, sizeof g_tsv, "%s/train.tsv", g_dir);
    snprintf(g_shard, sizeof g_shard, "%s/train.rshard", g_dir);
    snprintf(g_vocab_shard, sizeof g_vocab_shard, "%s/vocab.rshard", g_dir);
    rec_gen_opts g;
    rec_gen_opts_default(&g);
    g.seed = 7;
    g.scale = 0.001;
    rec_status s = rec_gen_write(&g, N, g_tsv, NULL, 2, NULL);
    rec_ingest_opts io;
    memset(&io, 0, sizeof io);
    io.in_paths = (const char *const[]){g_tsv};
    io.n_in = 1;
    io.threads = 2;
    io.tsv.has_label = -1;
    io.group_rows = GROUP;
    rec_ingest_report rep;
    io.spec_path = g_std;
    io.out_path = g_shard;
    if (!s) s = rec_ingest(&io, &rep);
    if (!s) CHECK(rep.rows == N, "ingest wrote %lld rows", (long long)rep.rows);
    io.spec_path = g_vocab_spec;
    io.out_path = g_vocab_shard;
    if (!s) s = rec_ingest(&io, &rep);
    CHECK(s == REC_OK, "making the data: %s", rec_errmsg());
    return s == REC_OK;
}

/* g_part[0..3): the generated TSV's rows [0, 1234), [1234, 3050), [3050, N) prepared by the
 * standard spec (hashing: one schema, no vocabularies), so that their list is g_shard. */
static char g_part[3][300];

static int make_parts(void) {
    static const int64_t cut[4] = {0, 1234, 3050, N};
    size_t len;
    char *text = read_text(g_tsv, &len);
    rec_status s = text ? REC_OK : rec_errorf(REC_EIO, "cannot read %s", g_tsv);
    const char *p = text;
    for (int k = 0; !s && k < 3; k++) {
        const char *e = p;
        for (int64_t r = cut[k]; r < cut[k + 1]; r++) e = strchr(e, '\n') + 1;
        char tsv[320];
        snprintf(tsv, sizeof tsv, "%s/part%d.tsv", g_dir, k);
        snprintf(g_part[k], sizeof g_part[k], "%s/part%d.rshard", g_dir, k);
        write_file(tsv, p, (size_t)(e - p));
        p = e;
        rec_ingest_opts io;
        memset(&io, 0, sizeof io);
        io.in_paths = (const char *const[]){tsv};
        io.n_in = 1;
        io.threads = 1;
        io.tsv.has_label = -1;
        io.group_rows = GROUP;
        io.spec_path = g_std;
        io.out_path = g_part[k];
        rec_ingest_report rep;
        s = rec_ingest(&io, &rep);
    }
    free(text);
    CHECK(s == REC_OK, "making the parts: %s", rec_errmsg());
    return s == REC_OK;
}

/* ---- tests -------------------------------------------------------------------------------- */

static void test_shard_loader(void) {
    rec_dataset *d = NULL;
    rec_dataset_opts o = {.path = g_shard};
    CHECK(rec_dataset_open(&d, &o) == REC_OK, "open shard: %s", rec_errmsg());
    if (!d) return;
    int64_t n = -1;
    CHECK(rec_dataset_rows(d, &n) == REC_OK && n == N, "shard rows %lld", (long long)n);
    CHECK(rec_dataset_has_label(d) == 1 && rec_dataset_n_dense(d) == 13 && rec_dataset_n_sparse(d) == 26,
          "schema: label %d, Dn %d, F %d", rec_dataset_has_label(d), rec_dataset_n_dense(d), rec_dataset_n_sparse(d));
    CHECK(rec_dataset_table_rows(d)[0] == 1460 && rec_dataset_table_rows(d)[2] == 10131227, "table rows of the spec");
    CHECK(strcmp(rec_dataset_path(d), g_shard) == 0, "path");

    drain_vs_shard("shard [0,N) b64 d2", d, g_shard, 0, N, 64, 2);
    drain_vs_shard("shard [0,N) b64 d3", d, g_shard, 0, N, 64, 3);
    drain_vs_shard("shard mid-group b100", d, g_shard, 937, 2043, 100, 2);  /* last batch 6 rows */
    drain_vs_shard("shard one batch over groups", d, g_shard, 990, 1010, 4096, 2);
    drain_vs_shard("shard batch 1", d, g_shard, 1995, 2005, 1, 2);
    drain_vs_shard("shard last row", d, g_shard, N - 1, N, 64, 2);
    CHECK(drain_vs_shard("shard empty range", d, g_shard, 17, 17, 64, 2) == 0, "empty range gives no batch");

    /* Two loaders on one data set at once (each has its own shard handle). */
    rec_loader *a = NULL, *b = NULL;
    CHECK(rec_loader_open(&a, d, 0, N, 128, 2) == REC_OK && rec_loader_open(&b, d, 0, N, 128, 2) == REC_OK,
          "two loaders: %s", rec_errmsg());
    int same = 1;
    for (int k = 0; a && b && k < 10; k++) {
        const rec_batch *x, *y;
        if (rec_loader_next(a, &x) || rec_loader_next(b, &y) || !x || !y || !same_batch(x, y)) same = 0;
    }
    CHECK(same, "two loaders on one data set agree");
    rec_loader_close(a);
    rec_loader_close(b);
    rec_dataset_close(d);
}

static void test_tsv_loader(void) {
    rec_dataset *d = NULL;
    rec_dataset_opts o = tsv_opts(g_tsv, g_std, NULL, 2);
    CHECK(rec_dataset_open(&d, &o) == REC_OK, "open TSV: %s", rec_errmsg());
    if (!d) return;
    CHECK(rec_dataset_has_label(d) == 1 && rec_dataset_n_dense(d) == 13 && rec_dataset_n_sparse(d) == 26,
          "TSV schema: label %d, Dn %d, F %d", rec_dataset_has_label(d), rec_dataset_n_dense(d), rec_dataset_n_sparse(d));
    CHECK(rec_dataset_table_rows(d)[0] == 1460 && rec_dataset_table_rows(d)[25] == 142572, "TSV table rows");
    int64_t n = -1;
    CHECK(rec_dataset_rows(d, &n) == REC_OK && n == N, "TSV rows %lld (%s)", (long long)n, rec_errmsg());

    /* The shard is bit-identical to what the TSV loader makes from the same spec. */
    size_t keep = rec__loader_chunk_bytes;
    rec__loader_chunk_bytes = 64 << 10;  /* ~ 20 chunks: batches straddle chunks and threads */
    drain_vs_shard("TSV [0,N) b64 d2", d, g_shard, 0, N, 64, 2);
    drain_vs_shard("TSV [0,N) b64 d3", d, g_shard, 0, N, 64, 3);
    drain_vs_shard("TSV mid b100", d, g_shard, 937, 2043, 100, 2);
    drain_vs_shard("TSV batch > chunk", d, g_shard, 5, N - 3, 1500, 2);
    drain_vs_shard("TSV last row", d, g_shard, N - 1, N, 64, 2);
    rec__loader_chunk_bytes = keep;
    rec_dataset_close(d);

    /* One prep thread, default chunk size. */
    o.prep_threads = 1;
    CHECK(rec_dataset_open(&d, &o) == REC_OK, "open TSV, 1 thread: %s", rec_errmsg());
    if (d) drain_vs_shard("TSV 1 thread [100,4000) b333", d, g_shard, 100, 4000, 333, 2);
    rec_dataset_close(d);

    /* A categorify spec with the vocabularies of the shard made by that spec. */
    o = tsv_opts(g_tsv, g_vocab_spec, g_vocab_shard, 2);
    CHECK(rec_dataset_open(&d, &o) == REC_OK, "open TSV with vocab_from: %s", rec_errmsg());
    if (d) {
        rec_shard *vs = NULL;
        if (rec_shard_open(&vs, g_vocab_shard) == REC_OK) {
            const rec_shard_schema *sc = rec_shard_get_schema(vs);
            int same = 1;
            for (int32_t f = 0; f < sc->n_sparse; f++) same &= sc->sparse[f].table_rows == rec_dataset_table_rows(d)[f];
            CHECK(same, "table rows from the bound vocabularies match the shard's");
            rec_shard_close(vs);
        }
        drain_vs_shard("TSV categorify [0,N) b256", d, g_vocab_shard, 0, N, 256, 2);
    }
    rec_dataset_close(d);
}

/* ---- shuffled order ------------------------------------------------------------------------ */

/* A 64-bit hash of row i of b: label, dense bits, every feature's ids. */
static uint64_t row_hash(const rec_batch *b, int64_t i) {
    uint64_t h = rec_mix64(0x5eed);
    uint32_t u;
    memcpy(&u, &b->label[i], 4);
    h = rec_mix64(h ^ u);
    for (int32_t c = 0; c < b->n_dense; c++) {
        memcpy(&u, &b->dense[i * b->n_dense + c], 4);
        h = rec_mix64(h ^ u);
    }
    for (int32_t f = 0; f < b->n_sparse; f++) {
        const rec_jagged *j = &b->sparse[f];
        h = rec_mix64(h ^ (uint64_t)(j->offsets[i + 1] - j->offsets[i]));
        for (int64_t k = j->offsets[i]; k < j->offsets[i + 1]; k++) h = rec_mix64(h ^ (uint64_t)rec_jagged_id(j, k));
    }
    return h;
}

typedef struct row_key {
    uint64_t hash;
    int64_t row;
} row_key;

static int key_cmp(const void *a, const void *b) {
    const row_key *x = a, *y = b;
    return x->hash < y->hash ? -1 : x->hash > y->hash;
}

/* Every row of the shard by hash (sorted), so that a delivered row can be named by its data
 * set row. 0 when two rows hash alike (the rows could then not be told apart). */
static int g_nkeys;
static row_key g_keys[N];

static int index_rows(void) {
    rec_shard *sh = NULL;
    rec_batch all;
    memset(&all, 0, sizeof all);
    int ok = rec_shard_open(&sh, g_shard) == REC_OK && rec_batch_init(&all, N, 13, 26, 1) == REC_OK &&
             rec_shard_read(sh, 0, N, &all) == REC_OK;
    for (int64_t i = 0; ok && i < N; i++) g_keys[i] = (row_key){row_hash(&all, i), i};
    qsort(g_keys, N, sizeof g_keys[0], key_cmp);
    for (int64_t i = 1; ok && i < N; i++) ok = g_keys[i].hash != g_keys[i - 1].hash;
    g_nkeys = ok ? N : 0;
    rec_batch_free(&all);
    rec_shard_close(sh);
    return ok;
}

/* Drains a loader over [row0, row1) in the order (sh, skip) into seq (the data set row of each
 * row delivered; -1 for a row not in the shard), checking that every batch but the last has
 * `batch` rows. Returns the rows delivered, -1 on an error (reported). */
static int64_t drain_order(const char *what, rec_dataset *d, int64_t row0, int64_t row1, int64_t batch, int depth,
                           const rec_shuffle *sh, int64_t skip, int64_t *seq) {
    rec_loader *l = NULL;
    rec_status s = rec_loader_open_order(&l, d, row0, row1, batch, depth, sh, skip);
    CHECK(s == REC_OK, "%s: open: %s", what, rec_errmsg());
    int64_t n = 0, short_batches = 0;
    const rec_batch *b;
    while (!s && !(s = rec_loader_next(l, &b)) && b) {
        short_batches += b->n != batch;
        if (short_batches > 1 || (b->n != batch && n + b->n != row1 - row0 - skip)) break;
        for (int64_t i = 0; i < b->n; i++) {
            row_key k = {row_hash(b, i), 0}, *hit = bsearch(&k, g_keys, (size_t)g_nkeys, sizeof k, key_cmp);
            seq[n++] = hit ? hit->row : -1;
        }
    }
    CHECK(s == REC_OK && short_batches <= 1 && n == row1 - row0 - skip, "%s: %lld rows in batches of %lld "
          "(want %lld, at most one short batch, the last): %s", what, (long long)n, (long long)batch,
          (long long)(row1 - row0 - skip), s ? rec_errmsg() : "");
    rec_loader_close(l);
    return s ? -1 : n;
}

/* seq[0..n) holds every row of [row0, row0 + n) exactly once. */
static int is_permutation(const int64_t *seq, int64_t n, int64_t row0) {
    char seen[N] = {0};
    for (int64_t i = 0; i < n; i++) {
        if (seq[i] < row0 || seq[i] >= row0 + n || seen[seq[i]]) return 0;
        seen[seq[i]] = 1;
    }
    return 1;
}

/* A shuffled epoch (rec_shuffle, small sizes: blocks of 100 rows, 3 per buffer, so that the
 * 4300-row range before a 700-row holdout is 43 blocks in 15 windows, with batches of 64 and
 * a ragged last one) delivers every training row exactly once and no holdout row; the order
 * is bitwise the same with ring depths 2 and 4, for the same (seed, epoch), and differs for
 * another seed and the next epoch; it mixes rows of several blocks in one batch (each block's
 * rows in file order) and takes the blocks out of order; a skip gives exactly the rest of the order, windows skipped or not. A
 * TSV (1 or 2 prep threads, small chunks) gives one order whatever the threads: its blocks in
 * file order, each window's rows a permutation of the window's. */
static void test_shuffled_order(void) {
    enum { ROWS = 4300, BATCH = 64 };
    static int64_t a[ROWS], b[ROWS], c[ROWS];
    CHECK(index_rows(), "the generated rows are distinct");
    if (!g_nkeys) return;
    rec_dataset *d = NULL;
    rec_dataset_opts o = {.path = g_shard};
    CHECK(rec_dataset_open(&d, &o) == REC_OK, "open shard: %s", rec_errmsg());
    if (!d) return;
    rec_shuffle sh = {.seed = 3, .epoch = 0, .block_rows = 100, .buffer_blocks = 3};

    CHECK(drain_order("shard d2", d, 0, ROWS, BATCH, 2, &sh, 0, a) == ROWS && is_permutation(a, ROWS, 0),
          "a shuffled epoch holds every training row once, and no holdout row");
    CHECK(drain_order("shard d4", d, 0, ROWS, BATCH, 4, &sh, 0, b) == ROWS && !memcmp(a, b, sizeof a),
          "ring depth 4 gives the order of depth 2");
    CHECK(drain_order("shard again", d, 0, ROWS, BATCH, 3, &sh, 0, b) == ROWS && !memcmp(a, b, sizeof a),
          "the same seed and epoch give the same order");
    int64_t ident = 0, blocks_in_first = 0, block_seen[43] = {0};
    for (int64_t i = 0; i < ROWS; i++) ident += a[i] == i;
    for (int64_t i = 0; i < BATCH; i++) blocks_in_first += !block_seen[a[i] / 100]++;
    CHECK(ident < 100 && blocks_in_first >= 2 && blocks_in_first <= 3 && a[0] / 100 != 0,
          "rows mixed: %lld in place, %lld blocks in the first batch (its window's 3 at most), first block %lld",
          (long long)ident, (long long)blocks_in_first, (long long)(a[0] / 100));
    int64_t last_of[43], in_order = 1;
    for (int i = 0; i < 43; i++) last_of[i] = -1;
    for (int64_t i = 0; i < ROWS; i++) {
        in_order &= a[i] > last_of[a[i] / 100];
        last_of[a[i] / 100] = a[i];
    }
    CHECK(in_order, "each block's rows leave in file order, interleaved with the window's other blocks");
    sh.seed = 4;
    CHECK(drain_order("shard seed 4", d, 0, ROWS, BATCH, 2, &sh, 0, b) == ROWS && is_permutation(b, ROWS, 0) &&
              memcmp(a, b, sizeof a) != 0, "another seed: another permutation");
    sh.seed = 3;
    sh.epoch = 1;
    CHECK(drain_order("shard epoch 1", d, 0, ROWS, BATCH, 2, &sh, 0, b) == ROWS && is_permutation(b, ROWS, 0) &&
              memcmp(a, b, sizeof a) != 0, "the next epoch: another permutation");
    sh.epoch = 0;
    /* Resuming: 20 batches in (whole windows of 300 rows skipped unread), and mid-window. */
    const int64_t skips[3] = {20 * BATCH, 1300, ROWS};
    for (int i = 0; i < 3; i++) {
        int64_t n = drain_order("shard skip", d, 0, ROWS, BATCH, 2, &sh, skips[i], b);
        CHECK(n == ROWS - skips[i] && !memcmp(a + skips[i], b, (size_t)n * sizeof a[0]),
              "skipping %lld rows gives the rest of the order", (long long)skips[i]);
    }
    /* A range not starting at 0: blocks start at row0. */
    CHECK(drain_order("shard [700,N)", d, 700, N, 50, 2, &sh, 0, b) == N - 700 && is_permutation(b, N - 700, 700),
          "a shuffled range [700, N) holds its rows once");
    rec_dataset_close(d);

    /* The gather on 4 threads (features in parallel, for runs of 1024 rows or more: blocks of
     * 1000, batches of 1500) delivers the rows, in the order 1 thread does. */
    const rec_shuffle wide = {.seed = 3, .epoch = 0, .block_rows = 1000, .buffer_blocks = 3};
    for (int threads = 1; threads <= 4; threads += 3) {
        o = (rec_dataset_opts){.path = g_shard, .prep_threads = threads};
        d = NULL;
        CHECK(rec_dataset_open(&d, &o) == REC_OK, "open shard, %d threads: %s", threads, rec_errmsg());
        if (d) CHECK(drain_order("shard gather", d, 0, ROWS, 1500, 2, &wide, 0, threads == 1 ? c : b) == ROWS,
                     "shuffled, %d loader threads: every row", threads);
        rec_dataset_close(d);
    }
    CHECK(is_permutation(b, ROWS, 0) && !memcmp(c, b, sizeof b), "4 loader threads gather the order of 1");

    /* A list of three shards cut at rows 1234 and 3050 (blocks of 100 straddle both cuts) is
     * the one shard: the same file order and the same shuffled order. */
    rec_dataset *parts = NULL;
    if (make_parts()) {
        o = (rec_dataset_opts){.paths = (const char *const[]){g_part[0], g_part[1], g_part[2]}, .n_paths = 3};
        CHECK(rec_dataset_open(&parts, &o) == REC_OK, "open a list of shards: %s", rec_errmsg());
    }
    if (parts) {
        CHECK(drain_vs_shard("list, file order", parts, g_shard, 0, N, 333, 2) > 0, "a list in file order");
        CHECK(drain_order("list", parts, 0, ROWS, BATCH, 2, &sh, 0, b) == ROWS && !memcmp(a, b, sizeof a),
              "a list of shards gives the shuffled order of their concatenation");
        CHECK(drain_order("list skip", parts, 0, ROWS, BATCH, 3, &sh, 1300, c) == ROWS - 1300 &&
                  !memcmp(a + 1300, c, (ROWS - 1300) * sizeof a[0]),
              "a list of shards, resumed: the rest of the order");
    }
    rec_dataset_close(parts);

    /* TSV: buffer only, the same order with 1 and 2 prep threads. */
    size_t keep = rec__loader_chunk_bytes;
    rec__loader_chunk_bytes = 64 << 10;
    for (int threads = 1; threads <= 2; threads++) {
        o = tsv_opts(g_tsv, g_std, NULL, threads);
        CHECK(rec_dataset_open(&d, &o) == REC_OK, "open TSV: %s", rec_errmsg());
        if (!d) break;
        int64_t *seq = threads == 1 ? a : b;
        CHECK(drain_order("TSV", d, 0, ROWS, BATCH, 2, &sh, 0, seq) == ROWS && is_permutation(seq, ROWS, 0),
              "TSV, %d prep thread%s: every training row once", threads, threads > 1 ? "s" : "");
        int windows_ok = 1;
        for (int64_t w = 0; w * 300 < ROWS; w++) {
            const int64_t w0 = w * 300, wn = ROWS - w0 < 300 ? ROWS - w0 : 300;
            for (int64_t i = 0; i < wn; i++) c[i] = seq[w0 + i] - w0;
            windows_ok &= is_permutation(c, wn, 0);
        }
        CHECK(windows_ok, "TSV: window w holds rows [300w, 300w + 300) of the file");
        if (threads == 2) {
            CHECK(!memcmp(a, b, sizeof a), "TSV: 2 prep threads give the order of 1");
            int64_t n = drain_order("TSV skip", d, 0, ROWS, BATCH, 3, &sh, 1300, c);
            CHECK(n == ROWS - 1300 && !memcmp(a + 1300, c, (size_t)n * sizeof a[0]),
                  "TSV: skipping 1300 rows gives the rest of the order");
        }
        rec_dataset_close(d);
        d = NULL;
    }
    rec__loader_chunk_bytes = keep;

    /* Refusals. */
    o = (rec_dataset_opts){.path = g_shard};
    if (rec_dataset_open(&d, &o) != REC_OK) return;
    rec_loader *l = NULL;
    rec_shuffle zero = {.seed = 1, .block_rows = 0, .buffer_blocks = 3};
    CHECK_ERR(rec_loader_open_order(&l, d, 0, ROWS, BATCH, 2, &zero, 0), REC_EINVAL,
              "shuffle blocks of 0 rows, 3 per buffer: each must be at least 1 and the buffer at most 2^31 rows");
    rec_shuffle huge = {.seed = 1, .block_rows = (int64_t)1 << 30, .buffer_blocks = 4};
    CHECK_ERR(rec_loader_open_order(&l, d, 0, ROWS, BATCH, 2, &huge, 0), REC_EINVAL, "the buffer at most 2^31 rows");
    CHECK_ERR(rec_loader_open_order(&l, d, 0, ROWS, BATCH, 2, &sh, ROWS + 1), REC_EINVAL,
              "cannot skip 4301 rows of a range of 4300");
    CHECK_ERR(rec_loader_open_order(&l, d, 0, ROWS, BATCH, 2, NULL, 5), REC_EINVAL,
              "cannot skip 5 rows of a range of 4300 in file order (start the range later instead)");
    CHECK(l == NULL, "no loader after a refusal");
    rec_dataset_close(d);
}

/* ---- staged batches ------------------------------------------------------------------------ */

/* Drains a staged loader beside a gathering one of the same order: every batch's staged
 * positions, gathered on the CPU as the GPU would (rec_cuda_gather_host), give what
 * rec_cuda_pack and the dense copy give of the gathered batch. Returns the rows compared, -1 on
 * a mismatch or error. */
static int64_t staged_vs_gathered(const char *what, rec_dataset *d, int64_t row1, int64_t batch, int depth,
                                  const rec_shuffle *sh, int64_t skip, rec_pool *pool, const int64_t *rows) {
    const int32_t F = rec_dataset_n_sparse(d), Dn = rec_dataset_n_dense(d);
    rec_cuda_host_stager h = {0};
    const rec_stager stg = {rec_cuda_host_stage, &h, rec_loader_stage_slots(batch, sh), sh->block_rows * sh->buffer_blocks};
    int ok = F <= 64 && rec_cuda_host_stager_init(&h, stg.n_slots, stg.slot_rows, Dn, F,
                                                  rows ? rows : rec_dataset_table_rows(d), rec_dataset_path(d), pool) == REC_OK;
    h.poison = 1;
    rec_loader *lg = NULL, *ls = NULL;
    rec_status s = ok ? rec_loader_open_order(&lg, d, 0, row1, batch, 2, sh, skip) : REC_EINVAL;
    if (!s) s = rec_loader_open_staged(&ls, d, 0, row1, batch, depth, sh, skip, &stg);
    size_t cap = (size_t)batch * (Dn + 1) + (size_t)F * (batch + 1) + 1;
    int32_t *off1 = malloc(cap * 4), *off2 = malloc(cap * 4), *ids1 = NULL, *ids2 = NULL;
    float *dense = malloc(cap * 4);
    int64_t nnz1[64], nnz2[64], n = 0;
    const rec_batch *b;
    const rec_staged_batch *sb;
    while (!s && ok && !(s = rec_loader_next(lg, &b)) && !(s = rec_loader_next_staged(ls, &sb))) {
        if (!b || !sb) {
            ok &= !b && !sb;
            break;
        }
        const int B = (int)b->n;
        ok &= sb->n == B;
        int w;
        const int64_t total = rec_cuda_batch_ids(b, 0, F, &w);
        ids1 = realloc(ids1, (size_t)(total + 1) * 4), ids2 = realloc(ids2, (size_t)(total + 1) * 4);
        if (!ok || !ids1 || !ids2 || rec_cuda_pack(b, 0, F, rec_dataset_table_rows(d), off1, ids1, NULL, nnz1, NULL)) {
            ok = 0;
            break;
        }
        rec_cuda_gather_nnz(h.src, h.S, F, stg.slot_rows, sb->pos, B, rec_cuda_gather_slots(sb->pos, B, stg.slot_rows), nnz2);
        rec_cuda_gather_host(h.src, h.slot, F, Dn, stg.slot_rows, sb->pos, B, off2, ids2, dense);
        ok &= !memcmp(nnz1, nnz2, (size_t)F * sizeof nnz1[0]) && !memcmp(off1, off2, (size_t)F * (B + 1) * 4) &&
              !memcmp(ids1, ids2, (size_t)total * 4) && !memcmp(dense, b->dense, (size_t)B * Dn * 4) &&
              !memcmp(dense + (size_t)B * Dn, b->label, (size_t)B * 4);
        if (!ok) fprintf(stderr, "%s: batch at row %lld differs\n", what, (long long)n);
        n += B;
    }
    if (s) fprintf(stderr, "%s: %s\n", what, rec_errmsg());
    rec_loader_close(ls);
    rec_loader_close(lg);
    rec_cuda_host_stager_free(&h);
    free(off1), free(off2), free(ids1), free(ids2), free(dense);
    return s ? -(int64_t)s - 100 : ok ? n : -1;
}

/* Staged batches (a GPU's input, gathered on the device) hold the gathering loader's rows: the
 * one-hot shard and a multi-hot one (lists of every length, empty ones too; starts staged),
 * batches smaller than a window, straddling windows, larger than a window (5 slots), resumed
 * mid-window; on a pool and not; ring depths 2 and 4 (the producer runs ahead while the
 * consumer reads its slots, poisoned before each staging); a TSV's blocks from the prep engine
 * on 1 and 2 threads. Ids outside their table are refused naming the shard, the row and the
 * feature; too few or too small slots, and file order, are refused. */
static void test_staged(void) {
    enum { ROWS = 4300, MH = 2500 };
    char tsv[300], shard[300];
    snprintf(tsv, sizeof tsv, "%s/multi.tsv", g_dir);
    snprintf(shard, sizeof shard, "%s/multi.rshard", g_dir);
    rec_gen_opts g;
    rec_gen_opts_default(&g);
    g.seed = 11, g.scale = 0.001, g.multi_hot = 1;
    rec_status s = rec_gen_write(&g, MH, tsv, NULL, 1, NULL);
    rec_ingest_opts io;
    memset(&io, 0, sizeof io);
    io.in_paths = (const char *const[]){tsv};
    io.n_in = 1, io.threads = 2, io.tsv.has_label = -1, io.group_rows = GROUP, io.spec_path = g_std, io.out_path = shard;
    rec_ingest_report rep;
    if (!s) s = rec_ingest(&io, &rep);
    CHECK(s == REC_OK, "a multi-hot shard: %s", rec_errmsg());
    rec_pool *pool = NULL;
    CHECK(rec_pool_init(&pool, 3) == REC_OK, "a pool");
    const rec_shuffle sh = {.seed = 5, .epoch = 1, .block_rows = 100, .buffer_blocks = 3};
    const struct { const char *path; int64_t rows, batch, skip; int depth; rec_pool *pool; } cases[] = {
        {g_shard, ROWS, 64, 0, 2, NULL},  {g_shard, ROWS, 700, 0, 4, pool}, {g_shard, ROWS, 300, 1300, 3, pool},
        {shard, MH, 64, 0, 4, pool},      {shard, MH, 128, 170, 2, NULL},   {shard, MH, 1000, 0, 2, pool},
    };
    int multi = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rec_dataset *d = NULL;
        rec_dataset_opts o = {.path = cases[i].path};
        CHECK(rec_dataset_open(&d, &o) == REC_OK, "open %s: %s", cases[i].path, rec_errmsg());
        if (!d) continue;
        const int64_t n = staged_vs_gathered(cases[i].path, d, cases[i].rows, cases[i].batch, cases[i].depth, &sh,
                                             cases[i].skip, cases[i].pool, NULL);
        CHECK(n == cases[i].rows - cases[i].skip, "staged batches of %lld (skip %lld, depth %d) of %s: the gathered "
              "batches' rows, %lld of %lld", (long long)cases[i].batch, (long long)cases[i].skip, cases[i].depth,
              cases[i].path, (long long)n, (long long)(cases[i].rows - cases[i].skip));
        if (cases[i].path == shard) { /* some feature has rows of other than one id: starts staged */
            rec_batch blk;
            rec_shard *sd = NULL;
            if (rec_batch_init(&blk, 200, rec_dataset_n_dense(d), rec_dataset_n_sparse(d), 4) == REC_OK &&
                rec_shard_open(&sd, shard) == REC_OK && rec_shard_read(sd, 0, 200, &blk) == REC_OK)
                for (int32_t f = 0; f < blk.n_sparse; f++)
                    for (int64_t r = 0; r < blk.n; r++) multi |= blk.sparse[f].offsets[r + 1] - blk.sparse[f].offsets[r] != 1;
            rec_shard_close(sd);
            rec_batch_free(&blk);
        }
        if (i + 1 == sizeof cases / sizeof cases[0]) { /* refusals, on the multi-hot shard */
            int64_t rows[64];
            memcpy(rows, rec_dataset_table_rows(d), (size_t)rec_dataset_n_sparse(d) * sizeof rows[0]);
            rows[3] = 1;
            CHECK(staged_vs_gathered("small table", d, MH, 64, 2, &sh, 0, NULL, rows) == -(int64_t)REC_EINVAL - 100 &&
                      strstr(rec_errmsg(), shard) && strstr(rec_errmsg(), "sparse feature 3: id") &&
                      strstr(rec_errmsg(), "outside the table's 1 rows") && strstr(rec_errmsg(), ": row 900, "),
                  "an id outside its table: refused naming the shard, row and feature: %s", rec_errmsg());
            rec_loader *l = NULL;
            rec_stager few = {rec_cuda_host_stage, NULL, 2, 300};
            CHECK_ERR(rec_loader_open_staged(&l, d, 0, MH, 64, 2, &sh, 0, &few), REC_EINVAL,
                      "2 staging slots of 300 rows for batches of 64 and windows of 300 rows: it takes 3 slots");
            /* closed while the producer waits for a slot (3 slots, a ring of 32 batches, the consumer holding the first
             * window's batches): close wakes it, nothing hangs */
            rec_cuda_host_stager hs = {0};
            const rec_stager three = {rec_cuda_host_stage, &hs, 3, 300};
            const rec_staged_batch *sb = NULL;
            CHECK(rec_cuda_host_stager_init(&hs, 3, 300, rec_dataset_n_dense(d), rec_dataset_n_sparse(d),
                                            rec_dataset_table_rows(d), "close", NULL) == REC_OK &&
                      rec_loader_open_staged(&l, d, 0, MH, 64, 32, &sh, 0, &three) == REC_OK &&
                      rec_loader_next_staged(l, &sb) == REC_OK && sb && sb->n == 64,
                  "a staged loader, one batch taken: %s", rec_errmsg());
            usleep(20000); /* the producer fills the ring and blocks */
            rec_loader_close(l);
            l = NULL;
            rec_cuda_host_stager_free(&hs);
            few.n_slots = 3, few.slot_rows = 299;
            CHECK_ERR(rec_loader_open_staged(&l, d, 0, MH, 64, 2, &sh, 0, &few), REC_EINVAL, "slots of a window's rows");
            few.slot_rows = 300;
            CHECK(l == NULL, "no staged loader after a refusal");
        }
        rec_dataset_close(d);
    }
    CHECK(multi, "the multi-hot shard has rows of other than one id");
    /* TSV: blocks from the prep engine, 1 and 2 threads; file order is refused */
    size_t keep = rec__loader_chunk_bytes;
    rec__loader_chunk_bytes = 64 << 10;
    for (int threads = 1; threads <= 2; threads++) {
        rec_dataset *t = NULL;
        rec_dataset_opts to = tsv_opts(g_tsv, g_std, NULL, threads);
        if (rec_dataset_open(&t, &to) != REC_OK) continue;
        const int64_t n = staged_vs_gathered("TSV", t, ROWS, 128, 3, &sh, threads == 2 ? 1300 : 0, pool, NULL);
        CHECK(n == ROWS - (threads == 2 ? 1300 : 0), "TSV, %d prep threads: staged batches hold the gathered rows (%lld)",
              threads, (long long)n);
        rec_loader *l = NULL;
        rec_stager st = {rec_cuda_host_stage, NULL, 3, 300};
        CHECK_ERR(rec_loader_open_staged(&l, t, 0, 1000, 64, 2, NULL, 0, &st), REC_EINVAL,
                  "staged batches are read in shuffled order");
        rec_dataset_close(t);
    }
    rec__loader_chunk_bytes = keep;
    rec_pool_free(pool);
}

/* Closing with the ring full, mid-stream and at once; nothing may hang or leak. */
static void test_close_midstream(void) {
    rec_dataset *sd = NULL, *td = NULL;
    rec_dataset_opts so = {.path = g_shard}, to = tsv_opts(g_tsv, g_std, NULL, 2);
    CHECK(rec_dataset_open(&sd, &so) == REC_OK && rec_dataset_open(&td, &to) == REC_OK, "open: %s", rec_errmsg());
    if (!sd || !td) goto done;
    size_t keep = rec__loader_chunk_bytes;
    rec__loader_chunk_bytes = 64 << 10;
    rec_dataset *ds[2] = {sd, td};
    for (int i = 0; i < 2; i++) {
        for (int take = 0; take < 3; take++) {
            rec_loader *l = NULL;
            CHECK(rec_loader_open(&l, ds[i], 0, N, 32, 2) == REC_OK, "open: %s", rec_errmsg());
            const rec_batch *b = NULL;
            int ok = 1;
            for (int k = 0; l && k < take * 5; k++) ok &= rec_loader_next(l, &b) == REC_OK && b && b->n == 32;
            if (take == 2) usleep(20000);  /* let the producer block on the full ring */
            CHECK(ok, "%s: batches before the close", i ? "TSV" : "shard");
            rec_loader_close(l);
        }
    }
    rec__loader_chunk_bytes = keep;
    rec_loader_close(NULL);
done:
    rec_dataset_close(sd);
    rec_dataset_close(td);
}

/* Rows no model can train on: rec_batch_first_bad_value finds the first in row order, and a
 * loader refuses the batch that holds one (naming the data set row), after delivering the
 * batches before it; a range without it loads. The shard is written through the library,
 * which stores any bits (prep refuses such values before they reach a shard: test_cli). */
static void test_bad_values(void) {
    rec_batch b;
    int32_t c = 7;
    CHECK(rec_batch_init(&b, 5, 3, 1, 1) == REC_OK, "batch: %s", rec_errmsg());
    b.n = 5;
    for (int i = 0; i < 5; i++) b.label[i] = (float)(i % 2);
    for (int i = 0; i < 15; i++) b.dense[i] = (float)i - 7.0f;
    CHECK(rec_batch_first_bad_value(&b, &c) == -1, "a good batch");
    b.dense[2 * 3 + 1] = INFINITY;
    CHECK(rec_batch_first_bad_value(&b, &c) == 2 && c == 1, "inf at row 2 column 1: row %d column %d",
          (int)rec_batch_first_bad_value(&b, &c), c);
    b.dense[4 * 3 + 0] = NAN;
    b.label[3] = 0.5f;
    CHECK(rec_batch_first_bad_value(&b, &c) == 2 && c == 1, "the first bad row in row order");
    b.dense[0 * 3 + 2] = -NAN;
    CHECK(rec_batch_first_bad_value(&b, &c) == 0 && c == 2, "nan at row 0 column 2");
    b.dense[0 * 3 + 2] = 0.0f, b.dense[2 * 3 + 1] = 0.0f;
    CHECK(rec_batch_first_bad_value(&b, &c) == 3 && c == -1, "label 0.5 at row 3");
    b.n = 3;
    CHECK(rec_batch_first_bad_value(&b, &c) == -1, "rows past n are not looked at");
    rec_batch_free(&b);

    rec_dataset_opts so = {.path = g_shard};
    rec_dataset *src = NULL;
    CHECK(rec_dataset_open(&src, &so) == REC_OK, "open: %s", rec_errmsg());
    rec_loader *l = NULL;
    const rec_batch *x = NULL;
    for (int kind = 0; src && kind < 2; kind++) { /* a nan dense value; a label of 2 */
        char bad[400];
        snprintf(bad, sizeof bad, "%s/badvalue%d.rshard", g_dir, kind);
        rec_spec *spec = NULL;
        rec_shard_writer *w = NULL;
        rec_status s = rec_spec_load(&spec, g_std);
        if (!s) s = rec_shard_writer_open(&w, bad, spec, NULL, 1, GROUP);
        if (!s) s = rec_loader_open(&l, src, 0, 1000, 300, 2);
        int64_t row = 0;
        while (!s && !(s = rec_loader_next(l, &x)) && x) {
            rec_batch *m = (rec_batch *)x; /* the loader's slot, free to change until the next call */
            if (row == 300 && kind == 0) m->dense[37 * 13 + 4] = NAN; /* row 337, dense value 4 */
            if (row == 300 && kind == 1) m->label[37] = 2.0f;
            s = rec_shard_writer_append(w, m);
            row += m->n;
        }
        rec_loader_close(l);
        if (w) s = s ? (rec_shard_writer_abort(w), s) : rec_shard_writer_close(w);
        rec_spec_free(spec);
        CHECK(s == REC_OK, "writing %s: %s", bad, rec_errmsg());
        rec_dataset_opts o = {.path = bad};
        rec_dataset *d = NULL;
        CHECK(rec_dataset_open(&d, &o) == REC_OK, "open: %s", rec_errmsg());
        if (!d) continue;
        int batches = 0;
        s = rec_loader_open(&l, d, 0, 1000, 128, 2);
        while (!s && !(s = rec_loader_next(l, &x)) && x) batches++;
        CHECK_ERR(s, REC_EFORMAT, kind ? "row 337: label 2, not 0 or 1" : "row 337: dense value 4 is nan, not a finite number");
        CHECK(strstr(rec_errmsg(), bad) && (kind || strstr(rec_errmsg(), "clamp at 0 before log1p")), "names the file and the fix: %s",
              rec_errmsg());
        CHECK(batches == 2, "the batches before the bad one arrive: %d", batches);
        rec_loader_close(l);
        batches = 0;
        s = rec_loader_open(&l, d, 338, 1000, 128, 2);
        while (!s && !(s = rec_loader_next(l, &x)) && x) batches++;
        CHECK(s == REC_OK && batches == 6, "a range without the bad row loads: %s (%d batches)", rec_errmsg(), batches);
        rec_loader_close(l);
        rec_dataset_close(d);
    }
    rec_dataset_close(src);
}

/* Writes the generated TSV into a FIFO (run on a thread: the open blocks until prep opens
 * the other end). */
static void *feed_fifo(void *arg) {
    const char *fifo = arg;
    size_t len;
    char *text = read_text(g_tsv, &len);
    FILE *f = fopen(fifo, "wb");
    if (f && text) fwrite(text, 1, len, f);
    if (f) fclose(f);
    free(text);
    return NULL;
}

/* A pipe is read once: prep takes one for a spec of one pass and writes the same bytes as
 * from the file; a categorify spec (two passes) and a data set (counted, then read every
 * epoch) refuse it up front, opening nothing. Before, each read the pipe's start in a
 * format sniff and then found it empty: 0 rows, and exit 0. */
static void test_pipe(void) {
    char fifo[400], out[400];
    snprintf(fifo, sizeof fifo, "%s/fifo.tsv", g_dir);
    snprintf(out, sizeof out, "%s/fifo.rshard", g_dir);
    if (mkfifo(fifo, 0600) != 0) {
        CHECK(0, "mkfifo %s", fifo);
        return;
    }
    signal(SIGPIPE, SIG_IGN); /* a reader that stops early fails the writes, not the test */
    pthread_t th;
    pthread_create(&th, NULL, feed_fifo, fifo);
    rec_ingest_opts io;
    memset(&io, 0, sizeof io);
    io.in_paths = (const char *const[]){fifo};
    io.n_in = 1;
    io.out_path = out;
    io.spec_path = g_std;
    io.threads = 2;
    io.tsv.has_label = -1;
    io.group_rows = GROUP;
    rec_ingest_report rep;
    rec_status s = rec_ingest(&io, &rep);
    pthread_join(th, NULL);
    CHECK(s == REC_OK && rep.rows == N && rep.passes == 1, "prep from a pipe: %s (%lld rows)", rec_errmsg(), (long long)rep.rows);
    size_t a = 0, b = 0;
    char *x = read_text(out, &a), *y = read_text(g_shard, &b);
    CHECK(x && y && a == b && !memcmp(x, y, a), "the shard from a pipe differs from the one from the file");
    free(x), free(y);
    io.spec_path = g_vocab_spec;
    CHECK_ERR(rec_ingest(&io, &rep), REC_EINVAL, "fifo.tsv is not a regular file (a pipe?), and spec");
    CHECK(strstr(rec_errmsg(), "reads its input twice"), "names why: %s", rec_errmsg());
    rec_dataset *d = NULL;
    rec_dataset_opts o = tsv_opts(fifo, g_std, NULL, 2);
    CHECK_ERR(rec_dataset_open(&d, &o), REC_EINVAL, "fifo.tsv is not a regular file (a pipe?); a data set is read more than once");
}

static void test_errors(void) {
    rec_dataset *d = NULL;
    rec_loader *l = NULL;
    rec_dataset_opts o = tsv_opts(g_tsv, NULL, NULL, 2);
    CHECK_ERR(rec_dataset_open(&d, &o), REC_EINVAL, "train.tsv is a TSV; give a prep spec to read it as raw text (--spec, or \"prep_spec\"");
    CHECK(d == NULL, "no data set on failure");
    o = tsv_opts(g_tsv, g_vocab_spec, NULL, 2);
    CHECK_ERR(rec_dataset_open(&d, &o), REC_EINVAL, "categorify");
    CHECK_ERR(rec_dataset_open(&d, &o), REC_EINVAL, "--vocab-from");
    o = tsv_opts(g_tsv, g_vocab_spec, g_shard, 2);
    CHECK_ERR(rec_dataset_open(&d, &o), REC_EINVAL, "train.rshard holds 0 vocabularies");
    /* criteo_vocab with C5 counted at min_count 3: vocabulary 4 is not the one the shard holds */
    size_t sl = 0;
    char *text = read_text(g_vocab_spec, &sl), min3[700];
    const char *c5 = text ? strstr(text, "\"name\": \"C5\"") : NULL;
    char *one = c5 ? strstr(c5, "\"min_count\": 1") : NULL;
    CHECK(one != NULL, "criteo_vocab.json counts C5 with min_count 1");
    if (one) {
        one[strlen("\"min_count\": ")] = '3';
        snprintf(min3, sizeof min3, "%s/vocab_min3.json", g_dir);
        write_file(min3, text, sl);
        o = tsv_opts(g_tsv, min3, g_vocab_shard, 2);
        CHECK_ERR(rec_dataset_open(&d, &o), REC_EINVAL, "vocab.rshard: vocabulary 4 was counted by spec 'criteo_vocab'");
        CHECK(strstr(rec_errmsg(), "vocab_min3.json categorifies feature 'C5' with"), "names the feature: %s", rec_errmsg());
    }
    free(text);
    o = tsv_opts(g_tsv, g_std, NULL, 0);
    CHECK_ERR(rec_dataset_open(&d, &o), REC_EINVAL, "prep threads must be between 1 and 256");
    char missing[400];
    snprintf(missing, sizeof missing, "%s/nothing.rshard", g_dir);
    o = tsv_opts(missing, g_std, NULL, 2);
    CHECK_ERR(rec_dataset_open(&d, &o), REC_EIO, "nothing.rshard: cannot open");
    o = tsv_opts(g_tsv, missing, NULL, 2);
    CHECK_ERR(rec_dataset_open(&d, &o), REC_EIO, "nothing.rshard");
    /* A file with the shard magic but nothing else is a (corrupt) shard, not a TSV. */
    char fake[400];
    snprintf(fake, sizeof fake, "%s/fake.tsv", g_dir);
    write_file(fake, "RSHARD01 and then garbage", 25);
    o = tsv_opts(fake, g_std, NULL, 2);
    CHECK_ERR(rec_dataset_open(&d, &o), REC_EFORMAT, "fake.tsv");

    /* Bad loader arguments. */
    rec_dataset_opts so = {.path = g_shard};
    CHECK(rec_dataset_open(&d, &so) == REC_OK, "open: %s", rec_errmsg());
    if (d) {
        CHECK_ERR(rec_loader_open(&l, d, 0, N + 1, 64, 2), REC_EINVAL, "rows [0, 5001) asked for; the data set has 5000 rows");
        CHECK_ERR(rec_loader_open(&l, d, 10, 9, 64, 2), REC_EINVAL, "0 <= row0 <= row1 <= 5000");
        CHECK_ERR(rec_loader_open(&l, d, -1, 9, 64, 2), REC_EINVAL, "rows [-1, 9)");
        CHECK_ERR(rec_loader_open(&l, d, 0, N, 0, 2), REC_EINVAL, "batch size must be at least 1 (got 0)");
        CHECK_ERR(rec_loader_open(&l, d, 0, N, 64, 1), REC_EINVAL, "depth must be at least 2 batches (got 1)");
        CHECK(l == NULL, "no loader on failure");
        rec_dataset_close(d);
        d = NULL;
    }

    /* A malformed line in the middle of a TSV. */
    char bad[400];
    snprintf(bad, sizeof bad, "%s/bad.tsv", g_dir);
    write_tsv_variant(bad, BAD_ROW + 1);
    char where[64];
    snprintf(where, sizeof where, "bad.tsv:%d", BAD_ROW + 1);
    o = tsv_opts(bad, g_std, NULL, 2);
    CHECK(rec_dataset_open(&d, &o) == REC_OK, "open bad.tsv: %s", rec_errmsg());  /* opening reads no rows */
    int64_t n = -1;
    if (d) CHECK_ERR(rec_dataset_rows(d, &n), REC_EFORMAT, where);
    if (d) CHECK_ERR(rec_loader_open(&l, d, 0, 10, 64, 2), REC_EFORMAT, where);
    rec_dataset_close(d);
    d = NULL;

    /* Skip mode: the bad row is dropped, rows after it move up by one. */
    o.tsv.bad_rows = REC_BAD_ROWS_SKIP;
    CHECK(rec_dataset_open(&d, &o) == REC_OK, "open bad.tsv (skip): %s", rec_errmsg());
    if (d) {
        CHECK(rec_dataset_rows(d, &n) == REC_OK && n == N - 1, "skip mode counts %lld rows", (long long)n);
        rec_shard *ref = NULL;
        rec_batch one;
        memset(&one, 0, sizeof one);
        rec_status s = rec_shard_open(&ref, g_shard);
        if (!s) s = rec_batch_init(&one, 1, 13, 26, 1);
        if (!s) s = rec_loader_open(&l, d, BAD_ROW - 50, BAD_ROW + 50, 16, 2);
        int64_t row = BAD_ROW - 50, wrong = 0;
        const rec_batch *b = NULL;
        while (!s && !(s = rec_loader_next(l, &b)) && b) {
            for (int64_t r = 0; r < b->n; r++, row++) {
                int64_t src = row < BAD_ROW ? row : row + 1;
                if (rec_shard_read(ref, src, 1, &one) || !same_row(b, r, &one, 0)) wrong++;
            }
        }
        CHECK(!s && wrong == 0 && row == BAD_ROW + 50, "skip mode rows around the bad line: %lld wrong, end %lld (%s)",
              (long long)wrong, (long long)row, rec_errmsg());
        rec_loader_close(l);
        l = NULL;
        rec_batch_free(&one);
        rec_shard_close(ref);
        rec_dataset_close(d);
        d = NULL;
    }

    /* What skip mode dropped: the count and location (rec_dataset_bad) always; the position of
     * every dropped line (rec_dataset_skips, what predict keeps a line for) only when asked,
     * here across 64 KiB chunks parsed on 2 threads. */
    for (int map = 0; map < 2; map++) {
        size_t keep_chunk = rec__loader_chunk_bytes;
        rec__loader_chunk_bytes = 64 << 10;
        o.map_skips = map;
        const int64_t *pos = NULL;
        int64_t n_pos = -1;
        CHECK(rec_dataset_open(&d, &o) == REC_OK, "open bad.tsv (skip, map %d): %s", map, rec_errmsg());
        if (d) {
            CHECK(rec_dataset_skips(d, &pos, &n_pos) == 0, "no map before the rows are counted");
            CHECK(rec_dataset_rows(d, &n) == REC_OK && n == N - 1, "skip mode counts %lld rows", (long long)n);
            const rec_bad_report *bad = rec_dataset_bad(d);
            CHECK(bad->count == 1 && bad->n_kept == 1 && bad->line[0] == BAD_ROW + 1 && strstr(bad->path[0], "bad.tsv"),
                  "the data set's report: %lld dropped, first at line %lld", (long long)bad->count,
                  (long long)(bad->n_kept ? bad->line[0] : -1));
            const int mapped = rec_dataset_skips(d, &pos, &n_pos);
            if (map) CHECK(mapped && n_pos == 1 && pos[0] == BAD_ROW, "the dropped line is mapped: %d, %lld at %lld",
                           mapped, (long long)n_pos, (long long)(n_pos > 0 ? pos[0] : -1));
            else CHECK(!mapped, "without map_skips the dropped lines are not mapped");
        }
        rec_dataset_close(d);
        d = NULL;
        rec__loader_chunk_bytes = keep_chunk;
        o.map_skips = 0;
    }

    /* Two files, the second starting with a line longer than --max-line and the read buffer:
     * opening every file up front must not count it twice, so the map holds its one position
     * (line 5 of the set: after the first file's 5 rows). Found in review. */
    {
        char a[400], b2[400], cmd[2400];
        snprintf(a, sizeof a, "%s/two_a.tsv", g_dir);
        snprintf(b2, sizeof b2, "%s/two_b.tsv", g_dir);
        snprintf(cmd, sizeof cmd, "head -n 5 %s > %s && { head -c 3145728 /dev/zero | tr '\\0' x; echo; "
                 "sed -n 6,10p %s; } > %s", bad, a, bad, b2);
        CHECK(system(cmd) == 0, "%s", cmd);
        const char *two[2] = {a, b2};
        rec_dataset_opts t = tsv_opts(a, g_std, NULL, 2);
        t.paths = two;
        t.n_paths = 2;
        t.tsv.bad_rows = REC_BAD_ROWS_SKIP;
        t.tsv.max_line = 1000;
        t.tsv.max_bad_share = 0.5;
        t.map_skips = 1;
        const int64_t *pos = NULL;
        int64_t n_pos = -1;
        CHECK(rec_dataset_open(&d, &t) == REC_OK, "open two files: %s", rec_errmsg());
        if (d) {
            CHECK(rec_dataset_rows(d, &n) == REC_OK && n == 10, "two files: %lld rows (%s)", (long long)n, rec_errmsg());
            CHECK(rec_dataset_bad(d)->count == 1, "two files: %lld dropped, want 1", (long long)rec_dataset_bad(d)->count);
            CHECK(rec_dataset_skips(d, &pos, &n_pos) && n_pos == 1 && pos[0] == 5,
                  "two files: the long line mapped at %lld (%lld mapped), want 5", (long long)(n_pos > 0 ? pos[0] : -1),
                  (long long)n_pos);
        }
        rec_dataset_close(d);
        d = NULL;
    }

    /* Fail mode, the line going bad after the count (the file changed under the data set):
     * the batches before the bad chunk arrive, then rec_loader_next returns FILE:LINE, again
     * on the next call. */
    write_tsv_variant(bad, 0);
    o.tsv.bad_rows = REC_BAD_ROWS_FAIL;
    size_t keep = rec__loader_chunk_bytes;
    rec__loader_chunk_bytes = 64 << 10;
    CHECK(rec_dataset_open(&d, &o) == REC_OK && rec_dataset_rows(d, &n) == REC_OK && n == N, "count good: %s",
          rec_errmsg());
    write_tsv_variant(bad, BAD_ROW + 1);
    if (d) {
        rec_status s = rec_loader_open(&l, d, 0, N, 64, 2);
        CHECK(s == REC_OK, "open the loader: %s", rec_errmsg());
        int64_t k = 0;
        const rec_batch *b = NULL;
        while (!s && !(s = rec_loader_next(l, &b)) && b) k++;
        CHECK_ERR(s, REC_EFORMAT, where);
        CHECK(k >= 1 && k * 64 <= BAD_ROW, "%lld batches before the error (the bad row is %d)", (long long)k, BAD_ROW);
        if (l) CHECK_ERR(rec_loader_next(l, &b), REC_EFORMAT, where);
        rec_loader_close(l);
        l = NULL;

        /* The file now ends early: fewer rows than counted. */
        write_tsv_variant(bad, 0);
        size_t len;
        char *text = read_text(bad, &len);
        const char *cut = text;
        for (int line = 0; cut && line < 100; line++) {
            const char *nl = strchr(cut, '\n');
            cut = nl ? nl + 1 : NULL;
        }
        if (text && cut && truncate(bad, cut - text) == 0) {
            s = rec_loader_open(&l, d, 0, N, 64, 2);
            while (!s && !(s = rec_loader_next(l, &b)) && b) {}
            CHECK_ERR(s, REC_EFORMAT, "did the file change");
            rec_loader_close(l);
        }
        free(text);
        rec_dataset_close(d);
    }
    rec__loader_chunk_bytes = keep;
}

int main(void) {
    const char *src = getenv("REC_SOURCE_DIR");
    if (!src) src = "..";
    snprintf(g_dir, sizeof g_dir, "%s/rectrain_loader_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    if (make_data(src)) {
        test_shard_loader();
        test_tsv_loader();
        test_shuffled_order();
        test_staged();
        test_close_midstream();
        test_bad_values();
        test_pipe();
        test_errors();
    }
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return check_report();
}
