/* .rraw (rawcols.h): bit-exact round trips of random raw blocks (labels or none, missing ints,
 * empty, missing and multi-hot lists, 64-bit ids) over several group sizes, reads of any row
 * range across groups; refusal, with a message, of every truncation, flipped bytes in header,
 * groups and footer, wrong magic, future versions, unknown flags, trailing bytes, and of
 * crafted groups whose checksums hold but whose lists do not (offsets out of order, ids in a
 * missing field, flags not 0/1, labels not 0/1); the writer's own refusals. Then the data path:
 * prep --raw of a generated TSV, prep --spec from the .rraw (byte for byte the shard prepped
 * from the TSV, categorify included), and a loader over the .rraw with a spec giving the
 * shard's batches in file and shuffled order; the data set's refusals (no spec, workers,
 * mixed parts).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "rectrain/core.h"
#include "rectrain/ingest.h"
#include "rectrain/prep.h"
#include "rectrain/rawcols.h"
#include "rectrain/train.h"
#include "../src/io/rawcols_format.h"

static char g_dir[256];

static uint64_t g_rng = 88172645463325252ULL;
static uint64_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

/* n random rows, ~1/5 of ints and ~1/7 of lists missing, in every form a group can take:
 * even int columns within 32 bits, odd ones with a rare value beyond (some groups 32-bit,
 * some 64); lists C1, C4, ... of 0..3 64-bit ids, C2, C5, ... of one 32-bit id (offsets
 * implied), C3, C6, ... mostly of one 32-bit id with rare 64-bit ids and rare pairs. */
static void fill(rec_raw_block *b, int64_t n, int has_label) {
    b->n = n;
    b->has_label = has_label;
    for (int64_t r = 0; r < n; r++) b->label[r] = has_label ? (float)(rnd() % 2) : 0.0f;
    for (int c = 0; c < REC_CRITEO_NINT; c++)
        for (int64_t r = 0; r < n; r++) {
            const int null = rnd() % 5 == 0, wide = c % 2 && rnd() % 64 == 0;
            b->int_null[c * b->cap + r] = (uint8_t)null;
            b->ints[c * b->cap + r] = null ? 0 : wide ? (int64_t)(rnd() >> 1) * (rnd() % 2 ? 1 : -1)
                                                      : (int64_t)(rnd() % 2001) - 1000;
        }
    for (int c = 0; c < REC_CRITEO_NCAT; c++) {
        rec_raw_list *l = &b->cat[c];
        l->off[0] = 0;
        for (int64_t r = 0; r < n; r++) {
            const int null = rnd() % 7 == 0;
            const int len = null ? 0 : c % 3 == 0 ? (int)(rnd() % 4) : c % 3 == 2 && rnd() % 64 == 0 ? 2 : 1;
            const uint64_t mask = c % 3 == 0 || (c % 3 == 2 && rnd() % 16 == 0) ? ~0ull : 0xffffffffull;
            rec_raw_list_reserve(l, l->off[r] + len);
            for (int k = 0; k < len; k++) l->val[l->off[r] + k] = (int64_t)(rnd() & mask);
            l->null[r] = (uint8_t)null;
            l->off[r + 1] = l->off[r] + len;
        }
    }
}

/* Whether rows [a, a + n) of x equal rows [0, n) of y. */
static int same_rows(const rec_raw_block *x, int64_t a, const rec_raw_block *y, int64_t n) {
    if (y->n != n || (x->has_label && memcmp(x->label + a, y->label, 4 * (size_t)n))) return 0;
    for (int c = 0; c < REC_CRITEO_NINT; c++)
        if (memcmp(x->ints + c * x->cap + a, y->ints + c * y->cap, 8 * (size_t)n) ||
            memcmp(x->int_null + c * x->cap + a, y->int_null + c * y->cap, (size_t)n))
            return 0;
    for (int c = 0; c < REC_CRITEO_NCAT; c++) {
        const rec_raw_list *p = &x->cat[c], *q = &y->cat[c];
        if (memcmp(p->null + a, q->null, (size_t)n)) return 0;
        for (int64_t r = 0; r < n; r++) {
            const int32_t len = p->off[a + r + 1] - p->off[a + r];
            if (q->off[r + 1] - q->off[r] != len) return 0;
            if (len && memcmp(p->val + p->off[a + r], q->val + q->off[r], 8 * (size_t)len)) return 0;
        }
    }
    return 1;
}

static void path_of(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", g_dir, name); }

static void round_trip(const char *name, int64_t n, int64_t G, int has_label) {
    char path[512];
    path_of(path, sizeof path, name);
    rec_raw_block src, got;
    rec_raw_block_init(&src, n);
    rec_raw_block_init(&got, n);
    fill(&src, n, has_label);
    rec_rawcols_writer *w;
    rec_status s = rec_rawcols_writer_open(&w, path, has_label, G);
    /* in two appends, the first ending inside a group */
    const int64_t half = n / 3;
    if (!s) s = rec_rawcols_writer_append(w, &src, 0, half);
    if (!s) s = rec_rawcols_writer_append(w, &src, half, n - half);
    if (!s) s = rec_rawcols_writer_close(w);
    CHECK(s == REC_OK, "%s: write: %s", name, rec_errmsg());
    rec_rawcols *r = NULL;
    s = rec_rawcols_open(&r, path);
    CHECK(s == REC_OK, "%s: open: %s", name, rec_errmsg());
    if (!s) {
        CHECK(rec_rawcols_rows(r) == n && rec_rawcols_has_label(r) == has_label, "%s: %lld rows, label %d", name,
              (long long)rec_rawcols_rows(r), rec_rawcols_has_label(r));
        CHECK(rec_rawcols_verify(r) == REC_OK, "%s: verify: %s", name, rec_errmsg());
        const int64_t windows[][2] = {{0, n}, {0, n > 0}, {n / 2, n - n / 2}, {n > 5 ? 3 : 0, n > 13 ? 10 : 0},
                                      {n > 0 ? n - 1 : 0, n > 0}};
        for (size_t k = 0; k < sizeof windows / sizeof windows[0]; k++) {
            s = rec_rawcols_read(r, windows[k][0], windows[k][1], &got);
            CHECK(s == REC_OK && same_rows(&src, windows[k][0], &got, windows[k][1]) && got.has_label == has_label &&
                      got.first_line == windows[k][0] + 1,
                  "%s: rows [%lld, +%lld) differ (%s)", name, (long long)windows[k][0], (long long)windows[k][1],
                  s ? rec_errmsg() : "");
        }
        CHECK_ERR(rec_rawcols_read(r, n, 1, &got), REC_EINVAL, "1 rows from row");
        CHECK_ERR(rec_rawcols_read(r, 1, INT64_MAX, &got), REC_EINVAL, "the file has"); /* no overflow */
        rec_rawcols_close(r);
    }
    rec_raw_block_free(&src);
    rec_raw_block_free(&got);
}

/* ---- refusals ----------------------------------------------------------------------------- */

static size_t g_len;
static unsigned char *g_file;

static void write_bytes(const char *path, const unsigned char *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (f) {
        if (n) fwrite(p, 1, n, f);
        fclose(f);
    }
}

static void expect_refused(const unsigned char *p, size_t n, const char *needle, const char *what) {
    char path[512];
    path_of(path, sizeof path, "bad.rraw");
    write_bytes(path, p, n);
    rec_rawcols *r = NULL;
    rec_status s = rec_rawcols_open(&r, path);
    if (!s) { /* a group's damage shows when it is read */
        s = rec_rawcols_verify(r);
        rec_rawcols_close(r);
    }
    CHECK(s == REC_EFORMAT && strstr(rec_errmsg(), needle) && strstr(rec_errmsg(), "bad.rraw"),
          "%s: status %d, message \"%s\" should name the file and contain \"%s\"", what, (int)s, rec_errmsg(), needle);
}

static uint32_t get32(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get64(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static void set32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }

/* Recomputes the header's checksum of a modified copy. */
static void fix_header(unsigned char *p) {
    set32(p + 40, 0);
    set32(p + 40, rec_crc32(0, p, 64));
}

enum { ENTRY = RRAW_ENTRY, E_INT32 = RRAW_E_INT32, E_ID32 = RRAW_E_ID32, E_IMPLIED = RRAW_E_IMPLIED, E_NNZ = RRAW_E_NNZ };

/* A copy of g_file with its first group changed by `edit` and its directory entry by
 * `edit_entry` (either may be NULL), the group's and the footer's CRCs fixed up. */
static void crafted(void (*edit)(unsigned char *group), void (*edit_entry)(unsigned char *entry), const char *needle,
                    const char *what) {
    unsigned char *p = malloc(g_len);
    memcpy(p, g_file, g_len);
    const uint64_t footer = get64(p + 32), off = get64(p + footer + 16), bytes = get64(p + footer + 16 + 8);
    if (edit) edit(p + off);
    set32(p + footer + 16 + 24, rec_crc32(0, p + off, bytes));
    if (edit_entry) edit_entry(p + footer + 16);
    const uint64_t n_groups = get64(p + footer);
    set32(p + g_len - 24, rec_crc32(0, p + footer, 16 + n_groups * ENTRY));
    expect_refused(p, g_len, needle, what);
    free(p);
}

/* Layout of the first group of the fixture (7 rows; its ints 64-bit, C1 with offsets, C2 one
 * 32-bit id a present field): label 28 -> 32, ints 728, int_null 91 -> 96, then C1: null 8,
 * offsets 32, ids 8 a value, then C2: null 8. */
enum { FIX_ROWS = 7, G_INT_NULL = 32 + 728, G_C1_NULL = 32 + 728 + 96, G_C1_OFF = G_C1_NULL + 8 };
static uint64_t g_c2_null; /* C2's missing flags in the first group */

static void edit_label(unsigned char *g) { const float y = 0.5f; memcpy(g, &y, 4); }
static void edit_int_null(unsigned char *g) { g[G_INT_NULL + 2] = 2; }
static void edit_null_flag(unsigned char *g) { g[G_C1_NULL] = 3; }
static void edit_offsets(unsigned char *g) { /* row 1's end before its start */
    int32_t o[3];
    memcpy(o, g + G_C1_OFF, sizeof o);
    g[G_C1_NULL] = g[G_C1_NULL + 1] = 0;
    o[1] = o[2] + 1;
    memcpy(g + G_C1_OFF, o, sizeof o);
}
static void edit_null_ids(unsigned char *g) { /* a missing field with an id: row 0 missing, holds row 0's ids */
    int32_t o[2];
    memcpy(o, g + G_C1_OFF, sizeof o);
    g[G_C1_NULL] = o[1] > o[0] ? 1 : 0;
    if (o[1] == o[0]) g[G_C1_NULL] = 2; /* no ids in row 0: make the flag bad instead */
}

static void edit_c2_present(unsigned char *g) { /* a field of C2 missing, its id kept */
    for (int i = 0; i < FIX_ROWS; i++)
        if (!g[g_c2_null + i]) {
            g[g_c2_null + i] = 1;
            return;
        }
}
static void edit_c2_flag(unsigned char *g) { g[g_c2_null] = 2; }
static void edit_widths(unsigned char *e) { set32(e + E_ID32, get32(e + E_ID32) | 1u << 30); }
static void edit_nnz(unsigned char *e) { e[E_NNZ] += 100; } /* C1 said to hold 100 more ids */

static void refusals(void) {
    char path[512];
    path_of(path, sizeof path, "fixture.rraw");
    rec_raw_block b;
    rec_raw_block_init(&b, 40);
    g_rng = 12345;
    fill(&b, 40, 1);
    for (int c = 0; c < REC_CRITEO_NINT; c++) { /* 64-bit ints in the first group */
        b.ints[c * b.cap] = (int64_t)1 << 40;
        b.int_null[c * b.cap] = 0;
    }
    rec_rawcols_writer *w;
    rec_status s = rec_rawcols_writer_open(&w, path, 1, FIX_ROWS);
    if (!s) s = rec_rawcols_writer_append(w, &b, 0, 40);
    if (!s) s = rec_rawcols_writer_close(w);
    CHECK(s == REC_OK, "fixture: %s", rec_errmsg());
    /* the writer's own refusals */
    CHECK_ERR(rec_rawcols_writer_open(&w, path, 1, -1), REC_EINVAL, "groups of -1 rows");
    s = rec_rawcols_writer_open(&w, path, 0, 0);
    if (!s) {
        CHECK_ERR(rec_rawcols_writer_append(w, &b, 0, 5), REC_EINVAL, "with labels appended to a file of rows without");
        rec_rawcols_writer_abort(w);
    }
    s = rec_rawcols_writer_open(&w, path, 1, 0);
    if (!s) {
        CHECK_ERR(rec_rawcols_writer_append(w, &b, 38, 5), REC_EINVAL, "rows [38, +5)");
        rec_rawcols_writer_abort(w);
    }
    rec_raw_block_free(&b);
    rec_rawcols *r = NULL;
    CHECK(rec_rawcols_open(&r, path) == REC_OK, "the fixture survives the writer's refusals: %s", rec_errmsg());
    rec_rawcols_close(r);
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    g_len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    g_file = malloc(g_len);
    CHECK(fread(g_file, 1, g_len, f) == g_len, "read the fixture");
    fclose(f);
    /* every truncation */
    int cut_ok = 1;
    for (size_t n = 0; n < g_len; n += n < 256 ? 1 : 97) {
        char p2[512];
        path_of(p2, sizeof p2, "cut.rraw");
        write_bytes(p2, g_file, n);
        s = rec_rawcols_open(&r, p2);
        if (!s) {
            rec_rawcols_close(r);
            cut_ok = 0;
            fprintf(stderr, "a file cut to %zu of %zu bytes opened\n", n, g_len);
        } else if (!strstr(rec_errmsg(), "cut.rraw")) {
            cut_ok = 0;
            fprintf(stderr, "cut to %zu: \"%s\" does not name the file\n", n, rec_errmsg());
        }
    }
    CHECK(cut_ok, "every truncation is refused, naming the file");
    unsigned char *p = malloc(g_len + 64);
    memcpy(p, g_file, g_len);
    p[3] ^= 1;
    expect_refused(p, g_len, "not a raw column file", "magic");
    memcpy(p, g_file, g_len);
    p[20] ^= 1;
    expect_refused(p, g_len, "header checksum mismatch", "header byte");
    memcpy(p, g_file, g_len);
    set32(p + 8, 2);
    fix_header(p);
    expect_refused(p, g_len, "version 2", "version");
    memcpy(p, g_file, g_len);
    set32(p + 12, 5);
    fix_header(p);
    expect_refused(p, g_len, "unknown header flags", "flags");
    memcpy(p, g_file, g_len);
    memset(p + g_len, 0, 64);
    expect_refused(p, g_len + 64, "trailing bytes", "trailing bytes");
    memcpy(p, g_file, g_len);
    p[64 + 100] ^= 0x10;
    expect_refused(p, g_len, "checksum mismatch in group 0", "group byte");
    memcpy(p, g_file, g_len);
    p[get64(g_file + 32) + 30] ^= 1;
    expect_refused(p, g_len, "footer checksum mismatch", "footer byte");
    memcpy(p, g_file, g_len);
    p[g_len - 3] ^= 1;
    expect_refused(p, g_len, "no end magic", "end magic");
    free(p);
    CHECK(get32(g_file + 8) == REC_RAWCOLS_VERSION, "version field");
    const unsigned char *e0 = g_file + get64(g_file + 32) + 16;
    CHECK(get32(e0 + E_INT32) == 0 && !(get32(e0 + E_IMPLIED) & 1) && !(get32(e0 + E_ID32) & 1) &&
          (get32(e0 + E_IMPLIED) & 2) && (get32(e0 + E_ID32) & 2),
          "the fixture's first group has the form the crafted edits assume (masks 0x%x 0x%x 0x%x)", get32(e0 + E_INT32),
          get32(e0 + E_ID32), get32(e0 + E_IMPLIED));
    g_c2_null = G_C1_OFF + 32 + 8 * get64(e0 + E_NNZ);
    crafted(edit_label, NULL, ":1: label 0.5", "label");
    crafted(edit_int_null, NULL, "I1 has missing flag 2", "int flag");
    crafted(edit_null_flag, NULL, "C1: missing flag not 0 or 1", "list flag");
    crafted(edit_offsets, NULL, "C1: offsets out of order", "offsets");
    crafted(edit_null_ids, NULL, "C1: ", "ids in a missing field");
    crafted(edit_c2_present, NULL, "column C2: ", "implied offsets: a field missing, its id kept");
    crafted(edit_c2_flag, NULL, "C2: missing flag not 0 or 1", "implied offsets: flag");
    crafted(NULL, edit_widths, "unknown column widths", "width bits beyond the columns");
    crafted(NULL, edit_nnz, "do not match its rows and ids", "id counts that disagree with the size");
    free(g_file);
}

/* ---- the data path ------------------------------------------------------------------------ */

static int same_file(const char *a, const char *b) {
    FILE *x = fopen(a, "rb"), *y = fopen(b, "rb");
    int same = x && y;
    while (same) {
        const int c = fgetc(x), d = fgetc(y);
        if (c != d) same = 0;
        if (c == EOF) break;
    }
    if (x) fclose(x);
    if (y) fclose(y);
    return same;
}

static rec_status ingest(const char *spec, const char *in, const char *out, int raw) {
    rec_ingest_opts io;
    memset(&io, 0, sizeof io);
    io.in_paths = (const char *const[]){in};
    io.n_in = 1;
    io.threads = 2;
    io.tsv.has_label = -1;
    io.group_rows = 1000;
    io.spec_path = spec;
    io.out_path = out;
    rec_ingest_report rep;
    return raw ? rec_ingest_raw(&io, &rep) : rec_ingest(&io, &rep);
}

/* Every batch of a loader over d, as digests. */
static int digests(rec_dataset *d, const rec_shuffle *sh, uint64_t *out, int cap) {
    int64_t n = 0;
    rec_loader *l = NULL;
    const rec_batch *b;
    int k = 0;
    if (rec_dataset_rows(d, &n) || rec_loader_open_order(&l, d, 0, n, 500, 3, sh, 0)) return -1;
    while (rec_loader_next(l, &b) == REC_OK && b && k < cap) out[k++] = rec_batch_digest(b);
    rec_loader_close(l);
    return k;
}

/* The engine over parsed rows: CPU executor and the GPU executor's CPU backend (the row
 * functions of its fused kernels) agree, at 1 and 3 threads. */
static void engine_raw(const char *raw, const char *spec_path) {
    rec_spec *spec = NULL;
    rec_prep_plan *plan = NULL;
    rec_rawcols *r = NULL;
    rec_raw_block blk = {0};
    rec_status s = rec_spec_load(&spec, spec_path);
    if (!s) s = rec_prep_plan_init(&plan, spec, NULL);
    if (!s) s = rec_rawcols_open(&r, raw);
    if (!s) s = rec_raw_block_init(&blk, rec_rawcols_rows(r));
    if (!s) s = rec_rawcols_read(r, 0, rec_rawcols_rows(r), &blk);
    CHECK(s == REC_OK, "engine fixture: %s", rec_errmsg());
    uint64_t want = 0;
    for (int run = 0; !s && run < 4; run++) {
        const int threads = run % 2 ? 3 : 1, gpu = run >= 2;
        const rec_tsv_opts o = {.has_label = 1};
        rec_prep_engine *e = NULL;
        s = rec_prep_engine_init(&e, plan, threads, &o, raw);
        if (!s && gpu) s = rec_prep_engine_set_device(e, REC_PREP_GPU_EMULATED);
        if (!s) s = rec_prep_engine_run_raw(e, &blk);
        uint64_t sum = 0;
        int64_t rows = 0;
        for (int t = 0; !s && t < threads; t++) {
            sum += rec_batch_row_hash_sum(rec_prep_engine_batch(e, t));
            rows += rec_prep_engine_batch(e, t)->n;
        }
        if (run == 0) want = sum;
        CHECK(s == REC_OK && rows == blk.n && sum == want, "%d threads, %s: %lld rows (%s)", threads,
              gpu ? "GPU executor's CPU backend" : "CPU executor", (long long)rows, s ? rec_errmsg() : "rows differ");
        rec_prep_engine_free(e);
    }
    rec_raw_block_free(&blk);
    rec_rawcols_close(r);
    rec_prep_plan_free(plan);
    rec_spec_free(spec);
}

static double by_members(const rec_fused_kernel *k, int first, int n, void *ctx) {
    (void)k, (void)first, (void)ctx;
    return n;
}

/* The loader's GPU executors (the CPU backend) following a co-run plan that shards kernels, 700
 * rows at a time, a shuffled .rraw's blocks on several threads: the shard's batches, in both
 * orders. */
static void corun_loader(rec_dataset *shard, rec_dataset *dg, const rec_shuffle *sh) {
    rec_fusion fu = {0};
    rec_corun_plan p = {0};
    rec_corun *c = NULL;
    void *ev[3] = {NULL, NULL, NULL};
    const double cap[3] = {3, 0, 5};
    rec_status s = rec_prep_fuse(rec_dataset_spec(dg), NULL, &fu);
    if (!s) s = rec_corun_schedule(&fu, cap, 3, by_members, NULL, &p);
    if (!s) s = rec_corun_new(&c, 3, ev);
    if (!s) rec_corun_set_step_rows(c, 700); /* blocks cut into pieces of rows */
    if (!s) s = rec_corun_set_plan(c, &p);
    if (!s) s = rec_dataset_set_corun(dg, c);
    CHECK(s == REC_OK && p.n_pieces > fu.n_kernels, "a plan that shards kernels (%d pieces of %d): %s", p.n_pieces,
          fu.n_kernels, rec_errmsg());
    for (int shuffled = 0; !s && shuffled < 2; shuffled++) {
        uint64_t x[16], y[16];
        const int nx = digests(shard, shuffled ? sh : NULL, x, 16), ny = digests(dg, shuffled ? sh : NULL, y, 16);
        CHECK(nx == 10 && nx == ny && !memcmp(x, y, sizeof(uint64_t) * (size_t)nx),
              "the .rraw, GPU executor following a co-run plan, %s: %d and %d batches, digests differ",
              shuffled ? "shuffled" : "file order", nx, ny);
    }
    const double *vpr, *ms;
    const float *X;
    int64_t rows, n;
    CHECK(!s && rec_corun_measured(c, &vpr, &rows, &X, &ms, &n) && n == fu.n_kernels, "one block timed for the predictor");
    if (!s) rec_dataset_set_corun(dg, NULL);
    rec_corun_free(c);
    rec_corun_plan_free(&p);
    rec_fusion_free(&fu);
}

static void data_path(const char *src) {
    char tsv[512], raw[512], spec[600], vspec[600], a[512], b[512];
    path_of(tsv, sizeof tsv, "gen.tsv");
    path_of(raw, sizeof raw, "gen.rraw");
    snprintf(spec, sizeof spec, "%s/configs/criteo_standard.json", src);
    snprintf(vspec, sizeof vspec, "%s/configs/criteo_vocab.json", src);
    rec_gen_opts g;
    rec_gen_opts_default(&g);
    g.seed = 3;
    g.scale = 0.001;
    g.multi_hot = 1;
    rec_status s = rec_gen_write(&g, 5000, tsv, NULL, 2, NULL);
    if (!s) s = ingest(NULL, tsv, raw, 1);
    CHECK(s == REC_OK, "prep --raw: %s", rec_errmsg());
    struct stat st_tsv, st_raw;
    CHECK(!s && !stat(tsv, &st_tsv) && !stat(raw, &st_raw) && st_raw.st_size < st_tsv.st_size,
          "the .rraw (%lld bytes) is smaller than its TSV (%lld)", (long long)st_raw.st_size, (long long)st_tsv.st_size);
    if (!s) engine_raw(raw, spec);
    const char *specs[] = {spec, vspec};
    for (int k = 0; k < 2; k++) {
        path_of(a, sizeof a, "from_tsv.rshard");
        path_of(b, sizeof b, "from_raw.rshard");
        s = ingest(specs[k], tsv, a, 0);
        if (!s) s = ingest(specs[k], raw, b, 0);
        CHECK(s == REC_OK && same_file(a, b), "%s: the shard from the .rraw is the shard from the TSV (%s)", specs[k],
              s ? rec_errmsg() : "differs");
    }
    /* the loader: the .rraw with the spec gives the shard's batches, in file and shuffled order */
    path_of(a, sizeof a, "std.rshard");
    s = ingest(spec, tsv, a, 0);
    rec_dataset_opts o;
    memset(&o, 0, sizeof o);
    o.prep_threads = 2;
    o.tsv.has_label = -1;
    rec_dataset *ds = NULL, *dr = NULL, *dg = NULL, *dt = NULL, *dtc = NULL;
    o.path = a;
    if (!s) s = rec_dataset_open(&ds, &o);
    o.path = raw;
    o.spec_path = spec;
    if (!s) s = rec_dataset_open(&dr, &o);
    /* --prep-device: the GPU executor (its CPU backend here) in the loader, over the .rraw and the TSV */
    o.prep_device = REC_PREP_GPU_EMULATED;
    if (!s) s = rec_dataset_open(&dg, &o);
    o.path = tsv;
    if (!s) s = rec_dataset_open(&dt, &o);
    o.prep_device = REC_PREP_CPU;
    if (!s) s = rec_dataset_open(&dtc, &o);
    CHECK(s == REC_OK, "open: %s", rec_errmsg());
    if (!s) {
        const rec_shuffle sh = {11, 1, 300, 4};
        /* (a TSV's shuffled order is its own: against the TSV on the CPU) */
        rec_dataset *const base[3] = {ds, ds, dtc}, *const other[3] = {dr, dg, dt};
        const char *const name[3] = {"the .rraw", "the .rraw, GPU executor", "the TSV, GPU executor"};
        for (int shuffled = 0; shuffled < 2; shuffled++)
            for (int k = 0; k < 3; k++) {
                uint64_t x[16], y[16];
                const int nx = digests(base[k], shuffled ? &sh : NULL, x, 16), ny = digests(other[k], shuffled ? &sh : NULL, y, 16);
                CHECK(nx == 10 && nx == ny && !memcmp(x, y, sizeof(uint64_t) * (size_t)nx), "%s, %s: %d and %d batches, %s",
                      name[k], shuffled ? "shuffled" : "file order", nx, ny, "digests differ");
            }
        rec_offload *off = NULL;
        CHECK_ERR(rec_dataset_offload(dr, NULL, 500, &off), REC_EINVAL, "workers read and preprocess TSV");
        corun_loader(ds, dg, &sh);
        rec_corun *c = NULL;
        void *ev[1] = {NULL};
        if (rec_corun_new(&c, 1, ev) == REC_OK) {
            CHECK_ERR(rec_dataset_set_corun(ds, c), REC_EINVAL, "only a spec's ops on the GPU executor co-run");
            CHECK_ERR(rec_dataset_set_corun(dr, c), REC_EINVAL, "only a spec's ops on the GPU executor co-run");
        }
        rec_corun_free(c);
    }
    rec_dataset_close(ds);
    rec_dataset_close(dr);
    rec_dataset_close(dg);
    rec_dataset_close(dt);
    rec_dataset_close(dtc);
    /* a shard's rows are preprocessed: the prep device is not used (train --eval X.rshard beside
     * raw training data); a device that is none */
    o.path = a;
    o.prep_device = REC_PREP_CUDA;
    s = rec_dataset_open(&ds, &o);
    if (!s) {
        uint64_t x[16], y[16];
        rec_dataset *dc = NULL;
        o.prep_device = REC_PREP_CPU;
        s = rec_dataset_open(&dc, &o);
        const int nx = s ? -1 : digests(dc, NULL, x, 16), ny = digests(ds, NULL, y, 16);
        CHECK(nx == 10 && nx == ny && !memcmp(x, y, sizeof(uint64_t) * (size_t)nx), "a shard with a prep device: %d and "
              "%d batches (%s)", nx, ny, s ? rec_errmsg() : "digests differ");
        rec_dataset_close(dc);
        rec_dataset_close(ds);
    }
    CHECK(s == REC_OK, "a shard with a prep device: %s", rec_errmsg());
    o.prep_device = 9;
    CHECK_ERR(rec_dataset_open(&ds, &o), REC_EINVAL, "prep device 9");
    o.prep_device = REC_PREP_CPU;
    /* refusals: no spec; a .rraw beside a shard or a TSV */
    o.spec_path = NULL;
    o.path = raw;
    CHECK_ERR(rec_dataset_open(&dr, &o), REC_EINVAL, "a .rraw of raw columns; give a prep spec to read it as preprocessed rows");
    o.spec_path = spec;
    o.paths = (const char *const[]){raw, a};
    o.n_paths = 2;
    CHECK_ERR(rec_dataset_open(&dr, &o), REC_EINVAL, "is a .rshard and");
    rec_ingest_opts io;
    memset(&io, 0, sizeof io);
    io.in_paths = (const char *const[]){raw, tsv};
    io.n_in = 2;
    io.threads = 1;
    io.spec_path = spec;
    path_of(b, sizeof b, "mixed.rshard");
    io.out_path = b;
    rec_ingest_report rep;
    CHECK_ERR(rec_ingest(&io, &rep), REC_EINVAL, "all TSV or all .rraw");
    /* prep --raw over its own output */
    io.in_paths = (const char *const[]){tsv};
    io.n_in = 1;
    io.out_path = tsv;
    CHECK_ERR(rec_ingest_raw(&io, &rep), REC_EINVAL, "--out");
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/rectrain_test_rawcols_XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    round_trip("groups_of_7.rraw", 100, 7, 1);
    round_trip("one_group.rraw", 50, 0, 1);
    round_trip("no_label.rraw", 33, 10, 0);
    round_trip("one_row_groups.rraw", 9, 1, 1);
    round_trip("exact.rraw", 64, 16, 1);
    round_trip("empty.rraw", 0, 5, 1);
    refusals();
    const char *src = getenv("REC_SOURCE_DIR");
    if (src) data_path(src);
    else fprintf(stderr, "REC_SOURCE_DIR not set: the data path is not tested (run under ctest)\n");
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return check_report();
}
