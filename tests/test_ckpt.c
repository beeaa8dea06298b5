/* Checkpoints and the .npy export (train.h, src/train/ckpt.c, src/train/npy.c).
 *
 *  - round trip for SGD, Adagrad + sparse Adagrad and Adam + row-wise Adagrad: a small DLRM
 *    trained two steps (so every optimizer state is non-zero) is saved, a fresh model is built
 *    from rec_ckpt_read_config and loaded; every tensor is bitwise equal, the step count and
 *    the meta come back, and one more training step gives bitwise equal losses and tensors in
 *    both models (Adam's t and the sparse state really are restored);
 *  - the file's layout read independently here (magic, version, header CRC, 64-byte aligned
 *    tensor data equal to the model's bytes, trailer with the file size);
 *  - files of versions 1 (no train_rows / data_digest in the meta), 2 (no shuffle sizes), 3
 *    (no shard fields) and 4 (no running losses) still load, in file order, losses not recorded;
 *  - every rejection with its message: wrong magic, version, half a shuffle order, truncation at every 1/16 of the
 *    file and at each section boundary, a flipped byte in the header and in a tensor (CRC,
 *    tensor named), a trailer that records another size, a renamed tensor and a changed shape
 *    (header CRC recomputed, so the directory check itself is reached), a different config
 *    (emb_dim, table rows, optimizer), a nonexistent file — each time the model is unchanged;
 *  - atomicity: with PATH.tmp a directory the save fails naming it and the previous
 *    checkpoint still loads; a failed save leaves no PATH.tmp;
 *  - the export: every parameter as DIR/NAME.npy whose header (parsed here) has '<f4', C order
 *    and the tensor's shape, and whose data are the tensor's bytes; config.json parses back to
 *    an equal config; it appears whole or not at all: an existing export is replaced only
 *    with `overwrite`, never a folder with other files, a killed export's DIR.tmp is cleared,
 *    and a write that fails half-way (RLIMIT_FSIZE) leaves neither DIR nor DIR.tmp.
 * Equality is bitwise throughout: a checkpoint stores float32 bytes, so nothing may round.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <ftw.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "rectrain/ckpt.h"
#include "rectrain/core.h"
#include "rectrain/export.h"
#include "rectrain/train.h"

enum { B = 8, DN = 13, FS = 3, THREADS = 1 };
static const int64_t ROWS[FS] = {7, 5, 11};
static char g_dir[256];

/* ---- helpers ------------------------------------------------------------------------------ */

static uint32_t rd_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t rd_u64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static void wr_u32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void wr_u64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

/* A small DLRM bound to Dn = 13 and three tables of `rows`, with the given optimizers. */
static int make_config(rec_model_config *c, rec_opt_kind dk, rec_sparse_opt_kind sk, int emb_dim, const int64_t *rows) {
    rec_model_config_default(c, REC_MODEL_DLRM);
    c->emb_dim = emb_dim;
    c->bottom[0] = 32;
    c->bottom[1] = emb_dim;
    c->n_bottom = 2;
    c->top[0] = 16;
    c->top[1] = 1;
    c->n_top = 2;
    c->dense_opt = rec_dense_opt_defaults(dk, 0.05f);
    c->sparse_opt = rec_sparse_opt_defaults(sk, 0.05f);
    rec_status s = rec_model_config_bind(c, DN, FS, rows, "test");
    CHECK(s == REC_OK, "bind: %s", rec_errmsg());
    return s == REC_OK;
}

static rec_model *make_model(const rec_model_config *c) {
    rec_model *m = NULL;
    rec_status s = rec_model_init(&m, c, B, THREADS);
    CHECK(s == REC_OK, "model init: %s", rec_errmsg());
    return s == REC_OK ? m : NULL;
}

/* B rows: labels alternate 0/1, dense values normal, one or two ids per bag. */
static void fill_batch(rec_batch *b, uint64_t seed) {
    rec_rng r;
    rec_rng_seed(&r, seed, 0);
    b->n = B;
    for (int i = 0; i < B; i++) {
        b->label[i] = (float)(i % 2);
        for (int j = 0; j < DN; j++) b->dense[i * DN + j] = (float)rec_rng_normal(&r);
    }
    for (int f = 0; f < FS; f++) {
        rec_jagged *g = &b->sparse[f];
        g->offsets[0] = 0;
        for (int i = 0; i < B; i++) {
            int64_t k = 1 + (int64_t)rec_rng_below(&r, 2), o = g->offsets[i];
            for (int64_t t = 0; t < k; t++) g->ids64[o + t] = (int64_t)rec_rng_below(&r, (uint64_t)ROWS[f]);
            g->offsets[i + 1] = o + k;
        }
    }
}

/* CRC of every tensor's bytes, to tell whether a model was changed. */
static uint32_t model_digest(const rec_model *m) {
    const rec_tensor *ts;
    int n = rec_model_tensors(m, &ts);
    uint32_t c = 0;
    for (int i = 0; i < n; i++) c = rec_crc32(c, ts[i].data, 4 * (size_t)rec_tensor_numel(&ts[i]));
    return c;
}

/* 1 when both models have the same tensors (names, roles, shapes) with bitwise equal data. */
static int models_equal(const rec_model *a, const rec_model *b, const char **first_diff) {
    const rec_tensor *ta, *tb;
    int na = rec_model_tensors(a, &ta), nb = rec_model_tensors(b, &tb);
    *first_diff = "tensor count";
    if (na != nb) return 0;
    for (int i = 0; i < na; i++) {
        *first_diff = ta[i].name;
        if (strcmp(ta[i].name, tb[i].name) || ta[i].role != tb[i].role || ta[i].ndim != tb[i].ndim ||
            ta[i].shape[0] != tb[i].shape[0] || (ta[i].ndim == 2 && ta[i].shape[1] != tb[i].shape[1]))
            return 0;
        if (memcmp(ta[i].data, tb[i].data, 4 * (size_t)rec_tensor_numel(&ta[i]))) return 0;
    }
    *first_diff = "";
    return 1;
}

/* The whole file (malloc'ed) or NULL; *size its length. */
static uint8_t *read_all(const char *path, size_t *size) {
    char *buf = NULL;
    return rec_read_file(path, "test file", (size_t)1 << 31, &buf, size) ? NULL : (uint8_t *)buf;
}

static void write_all(const char *path, const uint8_t *p, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(p, 1, n, f) == n, "cannot write %s", path);
    if (f) fclose(f);
}

/* The layout as the format comment describes it, read independently of ckpt.c. */
typedef struct layout {
    uint32_t H;          /* header bytes */
    uint32_t json_len;
    uint64_t json_off;   /* file offset of the config JSON */
    uint32_t n;
    uint64_t dir_off;    /* file offset of directory entry 0; entries are 144 bytes */
} layout;

static layout read_layout(const uint8_t *p) {
    layout l;
    l.H = rd_u32(p + 12);
    /* version 2 added train_rows, data_digest; version 3 the shuffle sizes; 4 the shard fields;
     * 5 the running losses */
    const uint32_t v = rd_u32(p + 8), meta = v == 1 ? 40 : v == 2 ? 56 : v == 3 ? 72 : v == 4 ? 96 : 128;
    l.json_len = rd_u32(p + 16 + meta);
    l.json_off = 16 + meta + 4;
    l.n = rd_u32(p + l.json_off + l.json_len);
    l.dir_off = l.json_off + l.json_len + 4;
    return l;
}

static uint64_t ent_offset(const uint8_t *p, const layout *l, uint32_t i) { return rd_u64(p + l->dir_off + 144 * i + 120); }
static uint64_t ent_bytes(const uint8_t *p, const layout *l, uint32_t i) { return rd_u64(p + l->dir_off + 144 * i + 128); }

static void fix_header_crc(uint8_t *p, const layout *l) {
    wr_u32(p + 16 + l->H, rec_crc32(0, p, 16 + (size_t)l->H));
}

static int rm_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw) { return remove(path); }

/* ---- round trip ----------------------------------------------------------------------------- */

static void check_layout(const char *path, const rec_model *m) {
    size_t size;
    uint8_t *p = read_all(path, &size);
    CHECK(p != NULL, "read %s", path);
    if (!p) return;
    layout l = read_layout(p);
    CHECK(!memcmp(p, "RCKPT001", 8) && rd_u32(p + 8) == 5, "magic and version");
    CHECK(rd_u32(p + 16 + l.H) == rec_crc32(0, p, 16 + (size_t)l.H), "header CRC covers prefix and header");
    CHECK(size >= 16 && !memcmp(p + size - 16, "RCKPTEND", 8) && rd_u64(p + size - 8) == size, "trailer and size");
    const rec_tensor *ts;
    int n = rec_model_tensors(m, &ts);
    CHECK(l.n == (uint32_t)n && l.dir_off + 144 * (uint64_t)n == 16 + (uint64_t)l.H, "directory fills the header: %u tensors", l.n);
    for (int i = 0; i < n && l.n == (uint32_t)n; i++) {
        uint64_t off = ent_offset(p, &l, (uint32_t)i), bytes = ent_bytes(p, &l, (uint32_t)i);
        const uint8_t *e = p + l.dir_off + 144 * (uint64_t)i;
        int ok = off % 64 == 0 && off >= 16 + (uint64_t)l.H + 4 && bytes == 4 * (uint64_t)rec_tensor_numel(&ts[i]) &&
                 off + bytes <= size - 16 && !strcmp((const char *)e, ts[i].name) &&
                 !memcmp(p + off, ts[i].data, bytes) && rd_u32(e + 136) == rec_crc32(0, p + off, bytes);
        CHECK(ok, "tensor %s at %llu: aligned, in bounds, bytes and CRC as the model's", ts[i].name, (unsigned long long)off);
    }
    free(p);
}

static void round_trip(rec_opt_kind dk, rec_sparse_opt_kind sk, const char *label) {
    rec_model_config c;
    if (!make_config(&c, dk, sk, 16, ROWS)) return;
    rec_model *m = make_model(&c);
    rec_batch b[3];
    for (int i = 0; i < 3; i++) {
        CHECK(rec_batch_init(&b[i], B, DN, FS, 2) == REC_OK, "batch init");
        fill_batch(&b[i], 100 + (uint64_t)i);
    }
    double loss;
    for (int i = 0; m && i < 2; i++) CHECK(rec_model_train_step(m, &b[i], &loss) == REC_OK, "%s train: %s", label, rec_errmsg());
    if (!m) goto out;
    CHECK(rec_model_steps(m) == 2, "%s steps", label);
    const rec_tensor *ts;
    int n = rec_model_tensors(m, &ts), n_state = 0;
    for (int i = 0; i < n; i++) {
        if (ts[i].role != REC_TENSOR_OPT_STATE) continue;
        n_state++;
        int nz = 0;
        for (int64_t j = 0; j < rec_tensor_numel(&ts[i]); j++) nz |= ts[i].data[j] != 0;
        CHECK(nz, "%s: optimizer state %s is non-zero after two steps", label, ts[i].name);
    }
    int want_state = (dk == REC_OPT_ADAGRAD) + 2 * (dk == REC_OPT_ADAM) + FS * (sk != REC_SPARSE_SGD);
    CHECK(n_state == want_state, "%s: %d optimizer-state tensors, want %d", label, n_state, want_state);

    char path[512];
    rec_ckpt_path(g_dir, path, sizeof path);
    rec_ckpt_meta meta = {.step = 2, .epoch = 1, .row = 40, .rows_seen = 123, .seed = 0x1234567890abcdefULL,
                          .train_rows = 4567, .data_digest = 0xfedcba9876543210ULL, .shuffle_block_rows = 4096,
                          .shuffle_buffer_blocks = 16, .epoch_loss_sum = 27.25, .epoch_loss_steps = 40,
                          .record_loss_sum = 1.5, .record_loss_steps = 3};
    rec_status s = rec_ckpt_save(path, m, &meta);
    CHECK(s == REC_OK, "%s save: %s", label, rec_errmsg());
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(access(tmp, F_OK) != 0, "%s: no %s left after a save", label, tmp);
    check_layout(path, m);

    rec_model_config c2;
    rec_ckpt_meta head;
    memset(&head, 0xff, sizeof head);
    s = rec_ckpt_read_config(path, &c2, &head);
    CHECK(s == REC_OK, "%s read_config: %s", label, rec_errmsg());
    if (s) goto out;
    CHECK(!memcmp(&head, &meta, sizeof meta), "%s: read_config gives the meta (train_rows %lld, digest %016llx)", label,
          (long long)head.train_rows, (unsigned long long)head.data_digest);
    CHECK(rec_model_config_equal(&c, &c2), "%s: stored config equals the model's", label);
    rec_model *m2 = make_model(&c2);
    rec_model_config_free(&c2);
    if (!m2) goto out;
    const char *diff;
    CHECK(!models_equal(m, m2, &diff), "%s: a fresh model differs from the trained one before loading", label);
    rec_ckpt_meta got;
    memset(&got, 0xff, sizeof got);
    s = rec_ckpt_load(path, m2, &got);
    CHECK(s == REC_OK, "%s load: %s", label, rec_errmsg());
    CHECK(!memcmp(&got, &meta, sizeof meta), "%s: meta comes back (step %lld epoch %lld row %lld seen %lld)", label,
          (long long)got.step, (long long)got.epoch, (long long)got.row, (long long)got.rows_seen);
    CHECK(rec_model_steps(m2) == 2, "%s: steps restored (%lld)", label, (long long)rec_model_steps(m2));
    CHECK(models_equal(m, m2, &diff), "%s: every tensor bitwise equal after load (first difference: %s)", label, diff);
    double l1, l2;
    CHECK(rec_model_train_step(m, &b[2], &l1) == REC_OK && rec_model_train_step(m2, &b[2], &l2) == REC_OK, "%s step 3", label);
    CHECK(!memcmp(&l1, &l2, sizeof l1), "%s: losses of the next step bitwise equal (%.17g vs %.17g)", label, l1, l2);
    CHECK(models_equal(m, m2, &diff), "%s: tensors bitwise equal after the next step (first difference: %s)", label, diff);
    /* Once more, so that a wrong Adam t or schedule position would show in the loss too. */
    CHECK(rec_model_train_step(m, &b[0], &l1) == REC_OK && rec_model_train_step(m2, &b[0], &l2) == REC_OK, "%s step 4", label);
    CHECK(!memcmp(&l1, &l2, sizeof l1), "%s: losses of step 4 bitwise equal (%.17g vs %.17g)", label, l1, l2);
    rec_model_free(m2);
out:
    for (int i = 0; i < 3; i++) rec_batch_free(&b[i]);
    rec_model_free(m);
    rec_model_config_free(&c);
}

/* ---- rejections ----------------------------------------------------------------------------- */

typedef struct reject_ctx {
    rec_model *target;   /* fresh model of the saved config */
    uint32_t digest;     /* its tensors before any load */
    char path[512];      /* where the altered files go */
} reject_ctx;

/* Writes `p` (n bytes) as a checkpoint, loads it into the target and expects `want` with
 * `needle` in the message and the model unchanged; when `header_too`, rec_ckpt_read_config
 * must refuse it the same way. */
static void expect_reject(reject_ctx *x, const char *what, const uint8_t *p, size_t n, rec_status want,
                          const char *needle, int header_too) {
    write_all(x->path, p, n);
    rec_ckpt_meta meta = {0};
    rec_status s = rec_ckpt_load(x->path, x->target, &meta);
    if (s != want || !strstr(rec_errmsg(), needle)) fprintf(stderr, "  (case: %s)\n", what);
    CHECK_ERR(s, want, needle);
    CHECK(strstr(rec_errmsg(), x->path) != NULL, "%s: message names the file: %s", what, rec_errmsg());
    CHECK(model_digest(x->target) == x->digest && rec_model_steps(x->target) == 0, "%s: model unchanged", what);
    if (header_too) {
        rec_model_config c;
        s = rec_ckpt_read_config(x->path, &c, NULL);
        if (s == REC_OK) rec_model_config_free(&c);
        CHECK_ERR(s, want, needle);
    }
}

static void rejections(void) {
    rec_model_config c;
    if (!make_config(&c, REC_OPT_ADAM, REC_SPARSE_ROWWISE_ADAGRAD, 16, ROWS)) return;
    rec_model *m = make_model(&c);
    reject_ctx x = {.target = make_model(&c)};
    rec_batch b;
    CHECK(rec_batch_init(&b, B, DN, FS, 2) == REC_OK, "batch init");
    fill_batch(&b, 7);
    double loss;
    char good[512];
    snprintf(good, sizeof good, "%s/good.rckpt", g_dir);
    snprintf(x.path, sizeof x.path, "%s/bad.rckpt", g_dir);
    rec_ckpt_meta meta = {.step = 2};
    size_t size = 0;
    uint8_t *file = NULL, *p = NULL;
    if (!m || !x.target) goto out;
    for (int i = 0; i < 2; i++) rec_model_train_step(m, &b, &loss);
    CHECK(rec_ckpt_save(good, m, &meta) == REC_OK, "save: %s", rec_errmsg());
    file = read_all(good, &size);
    CHECK(file && size > 1024, "read back %zu bytes", size);
    if (!file) goto out;
    p = malloc(size);
    x.digest = model_digest(x.target);
    layout l = read_layout(file);

    memcpy(p, file, size);
    p[0] ^= 0xff;
    expect_reject(&x, "magic", p, size, REC_EFORMAT, "not a rectrain checkpoint", 1);
    memcpy(p, file, size);
    memcpy(p, "RSHARD01", 8);
    expect_reject(&x, "shard magic", p, size, REC_EFORMAT, "not a rectrain checkpoint", 1);

    memcpy(p, file, size);
    wr_u32(p + 8, 6);
    expect_reject(&x, "version", p, size, REC_EFORMAT, "format version 6; this build reads versions 1 to 5", 1);
    memcpy(p, file, size);
    wr_u32(p + 8, 0);
    expect_reject(&x, "version", p, size, REC_EFORMAT, "format version 0; this build reads versions 1 to 5", 1);
    memcpy(p, file, size);
    wr_u64(p + 16 + 56, 4096); /* shuffle_block_rows without shuffle_buffer_blocks */
    fix_header_crc(p, &l);
    expect_reject(&x, "half a shuffle order", p, size, REC_EFORMAT,
                  "shuffle blocks of 4096 rows, 0 per buffer, in the header: not an order", 1);
    memcpy(p, file, size);
    wr_u64(p + 16 + 40, (uint64_t)-5); /* train_rows */
    fix_header_crc(p, &l);
    expect_reject(&x, "negative train_rows", p, size, REC_EFORMAT, "negative step, epoch, row, rows_seen or train_rows", 1);
    memcpy(p, file, size);
    wr_u64(p + 16 + 104, (uint64_t)-2); /* epoch_loss_steps */
    fix_header_crc(p, &l);
    expect_reject(&x, "running losses", p, size, REC_EFORMAT, "running losses 0 over -2 steps and 0 over 0 in the header: "
                  "not sums of finite losses", 1);

    /* Truncation at every 1/16 of the file and at each boundary of the layout. */
    uint64_t hend = 16 + (uint64_t)l.H, data0 = ent_offset(file, &l, 0);
    uint64_t cuts[] = {1, 7, 8, 9, 15, 16, 17, l.json_off, l.dir_off, l.dir_off + 144, hend - 1, hend, hend + 3,
                       hend + 4, data0, data0 + 1, ent_offset(file, &l, l.n - 1), size - 17, size - 16, size - 9,
                       size - 8, size - 1};
    for (int k = 0; k < 16; k++) {
        char what[64];
        snprintf(what, sizeof what, "truncated to %d/16", k);
        expect_reject(&x, what, file, size * (size_t)k / 16, REC_EFORMAT, "truncated", 1);
    }
    for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
        char what[64];
        snprintf(what, sizeof what, "truncated to %llu bytes", (unsigned long long)cuts[k]);
        expect_reject(&x, what, file, (size_t)cuts[k], REC_EFORMAT, "truncated", 1);
    }
    /* Grown by a byte: the trailer is no longer at the end. */
    memcpy(p, file, size);
    {
        uint8_t *q = malloc(size + 1);
        memcpy(q, file, size);
        q[size] = 0;
        expect_reject(&x, "appended byte", q, size + 1, REC_EFORMAT, "truncated or incomplete", 1);
        free(q);
    }
    memcpy(p, file, size);
    wr_u64(p + size - 8, size + 64);
    expect_reject(&x, "trailer size", p, size, REC_EFORMAT, "trailer records", 1);

    memcpy(p, file, size);
    p[14] ^= 0x10; /* header bytes + 1 MiB */
    expect_reject(&x, "header length", p, size, REC_EFORMAT, "runs past the end", 1);
    memcpy(p, file, size);
    p[12] ^= 0x08; /* header bytes +- 8: still inside the file, so the CRC catches it */
    expect_reject(&x, "header length", p, size, REC_EFORMAT, "header CRC-32 mismatch", 1);

    /* A flipped byte in the meta, the config, the directory, and the header CRC itself. */
    uint64_t flips[] = {16 + 3, l.json_off + 5, l.dir_off + 2, l.dir_off + 144 * (l.n - 1) + 121, hend + 1};
    for (size_t k = 0; k < sizeof flips / sizeof flips[0]; k++) {
        memcpy(p, file, size);
        p[flips[k]] ^= 0x10;
        expect_reject(&x, "header flip", p, size, REC_EFORMAT, "header CRC-32 mismatch", 1);
    }

    /* A flipped byte in the first and the last tensor: named by the CRC check; the header is
     * intact, so rec_ckpt_read_config still succeeds. */
    uint32_t which[2] = {0, l.n - 1};
    for (int k = 0; k < 2; k++) {
        memcpy(p, file, size);
        uint64_t off = ent_offset(file, &l, which[k]), bytes = ent_bytes(file, &l, which[k]);
        p[off + bytes / 2] ^= 0x01;
        char needle[160];
        snprintf(needle, sizeof needle, "tensor \"%s\" fails its CRC-32", (const char *)file + l.dir_off + 144 * which[k]);
        expect_reject(&x, "tensor flip", p, size, REC_EFORMAT, needle, 0);
        rec_model_config rc;
        rec_status s = rec_ckpt_read_config(x.path, &rc, NULL);
        CHECK(s == REC_OK, "read_config ignores tensor data: %s", rec_errmsg());
        if (s == REC_OK) rec_model_config_free(&rc);
    }

    /* Directory mismatches behind a valid header CRC (as a buggy writer would produce). */
    memcpy(p, file, size);
    CHECK(!strcmp((const char *)p + l.dir_off, "emb.0.weight"), "first tensor is emb.0.weight (%s)", (const char *)p + l.dir_off);
    memcpy(p + l.dir_off, "emb.9.weight", 12);
    fix_header_crc(p, &l);
    expect_reject(&x, "renamed tensor", p, size, REC_EINVAL, "has no tensor \"emb.0.weight\"", 0);
    memcpy(p, file, size);
    wr_u64(p + l.dir_off + 104, 16); /* emb.0.weight (7, 16) -> (16, 7): same bytes */
    wr_u64(p + l.dir_off + 112, 7);
    fix_header_crc(p, &l);
    expect_reject(&x, "transposed tensor", p, size, REC_EINVAL,
                  "tensor \"emb.0.weight\" is parameter (16, 7) in the file but parameter (7, 16) in the model", 0);
    memcpy(p, file, size);
    wr_u64(p + l.dir_off + 112, 15); /* 15 columns: bytes no longer agree with the shape */
    fix_header_crc(p, &l);
    expect_reject(&x, "shape vs bytes", p, size, REC_EFORMAT, "which do not agree", 1);
    memcpy(p, file, size);
    wr_u64(p + l.dir_off + 120, ent_offset(file, &l, 0) + 4); /* unaligned data */
    fix_header_crc(p, &l);
    expect_reject(&x, "unaligned tensor", p, size, REC_EFORMAT, "lies outside the data section", 1);

    /* Models of another config: each refusal names what differs. */
    struct {
        rec_opt_kind dk;
        int emb_dim;
        int64_t rows1;
        const char *needle;
    } other[] = {
        {REC_OPT_ADAM, 8, 5, "emb_dim is 16 in the checkpoint but 8 in the model"},
        {REC_OPT_ADAM, 16, 6, "table 1 has 5 rows in the checkpoint but 6 in the model"},
        {REC_OPT_SGD, 16, 5, "dense_opt.kind is 2 in the checkpoint but 0 in the model"},
    };
    for (size_t k = 0; k < sizeof other / sizeof other[0]; k++) {
        int64_t rows[FS] = {ROWS[0], other[k].rows1, ROWS[2]};
        rec_model_config oc;
        if (!make_config(&oc, other[k].dk, REC_SPARSE_ROWWISE_ADAGRAD, other[k].emb_dim, rows)) continue;
        rec_model *om = make_model(&oc);
        if (om) {
            uint32_t d = model_digest(om);
            rec_status s = rec_ckpt_load(good, om, NULL);
            CHECK_ERR(s, REC_EINVAL, "was written for a different model");
            CHECK_ERR(s, REC_EINVAL, other[k].needle);
            CHECK_ERR(s, REC_EINVAL, "use the same --config or start fresh");
            CHECK(model_digest(om) == d && rec_model_steps(om) == 0, "other config %zu: model unchanged", k);
        }
        rec_model_free(om);
        rec_model_config_free(&oc);
    }

    char missing[600];
    snprintf(missing, sizeof missing, "%s/nope/model.rckpt", g_dir);
    CHECK_ERR(rec_ckpt_load(missing, x.target, NULL), REC_EIO, "cannot open");
    CHECK(strstr(rec_errmsg(), missing) != NULL, "names the missing file: %s", rec_errmsg());
    rec_model_config rc;
    CHECK_ERR(rec_ckpt_read_config(missing, &rc, NULL), REC_EIO, "No such file");
    CHECK_ERR(rec_ckpt_load(g_dir, x.target, NULL), REC_EIO, "not a regular file");

    /* The good file still loads into the target after all of this. */
    rec_status s = rec_ckpt_load(good, x.target, NULL);
    CHECK(s == REC_OK && rec_model_steps(x.target) == 2, "good file loads: %s", rec_errmsg());
    const char *diff;
    CHECK(models_equal(m, x.target, &diff), "good file: equal (%s)", diff);

    /* Files of versions 1 (written before train_rows and data_digest), 2 (before the shuffle
     * sizes), 3 (before the shard fields) and 4 (before the running losses): the same file
     * without those 88, 72, 56 or 32 bytes of meta, its tensors where they were. They load,
     * with the missing fields 0 (file order, a whole model) and the losses not recorded (-1). */
    for (uint32_t v = 1; v <= 4; v++) {
        const uint32_t mb = v == 1 ? 40 : v == 2 ? 56 : v == 3 ? 72 : 96, H1 = l.H - (128 - mb);
        uint8_t *old = calloc(1, size);
        memcpy(old, file, 16 + mb);
        wr_u32(old + 8, v);
        wr_u32(old + 12, H1);
        memcpy(old + 16 + mb, file + 16 + 128, l.H - 128);
        wr_u32(old + 16 + H1, rec_crc32(0, old, 16 + (size_t)H1));
        memcpy(old + hend + 4, file + hend + 4, size - hend - 4); /* padding, data, trailer: in place */
        write_all(x.path, old, size);
        rec_ckpt_meta got = {.train_rows = 9, .data_digest = 9, .shuffle_block_rows = 9, .shuffle_buffer_blocks = 9,
                             .shards = 9, .shard_id = 9, .shard = 9, .epoch_loss_sum = 9, .epoch_loss_steps = 9,
                             .record_loss_sum = 9, .record_loss_steps = 9};
        rec_model_set_steps(x.target, 0);
        s = rec_ckpt_load(x.path, x.target, &got);
        CHECK(s == REC_OK && got.step == 2 && (v >= 2 || (got.train_rows == 0 && got.data_digest == 0)) &&
                  (v >= 3 || (got.shuffle_block_rows == 0 && got.shuffle_buffer_blocks == 0)) && got.shards == 0 &&
                  got.shard_id == 0 && got.shard == 0 && got.epoch_loss_steps == -1 && got.epoch_loss_sum == 0 &&
                  got.record_loss_steps == -1 && got.record_loss_sum == 0 && models_equal(m, x.target, &diff),
              "a version-%u checkpoint loads, in file order%s: %s", v, v == 1 ? ", without data identity" : "",
              rec_errmsg());
        free(old);
    }

    /* Save-side refusals. */
    rec_ckpt_meta wrong = {.step = 5};
    CHECK_ERR(rec_ckpt_save(good, m, &wrong), REC_EINVAL, "meta.step is 5 but the model has taken 2");
    rec_ckpt_meta neg = {.step = 2, .row = -1};
    CHECK_ERR(rec_ckpt_save(good, m, &neg), REC_EINVAL, "negative");
    rec_ckpt_meta nan_loss = {.step = 2, .epoch_loss_sum = NAN, .epoch_loss_steps = 3};
    CHECK_ERR(rec_ckpt_save(good, m, &nan_loss), REC_EINVAL, "meta has running losses nan over 3 steps");
    rec_ckpt_meta half = {.step = 2, .shuffle_buffer_blocks = 16};
    CHECK_ERR(rec_ckpt_save(good, m, &half), REC_EINVAL, "meta has shuffle blocks of 0 rows, 16 per buffer: not an order");
    CHECK_ERR(rec_ckpt_save(missing, m, &meta), REC_EIO, "cannot create");
    CHECK(strstr(rec_errmsg(), "nope/model.rckpt.tmp") != NULL, "names the .tmp file: %s", rec_errmsg());

    /* Atomicity: PATH.tmp is a directory, so the save cannot create it; the previous
     * checkpoint at PATH is untouched and still loads. */
    char atom[512], atom_tmp[600];
    snprintf(atom, sizeof atom, "%s/atom.rckpt", g_dir);
    snprintf(atom_tmp, sizeof atom_tmp, "%s.tmp", atom);
    CHECK(rec_ckpt_save(atom, m, &meta) == REC_OK, "first save: %s", rec_errmsg());
    CHECK(mkdir(atom_tmp, 0755) == 0, "mkdir %s", atom_tmp);
    rec_model_train_step(m, &b, &loss);
    rec_ckpt_meta meta3 = {.step = 3};
    s = rec_ckpt_save(atom, m, &meta3);
    CHECK_ERR(s, REC_EIO, "atom.rckpt.tmp: cannot create: Is a directory");
    struct stat st;
    CHECK(stat(atom_tmp, &st) == 0 && S_ISDIR(st.st_mode), "the directory in the way is left alone");
    rec_model_config ac;
    s = rec_ckpt_read_config(atom, &ac, NULL);
    CHECK(s == REC_OK, "previous checkpoint readable: %s", rec_errmsg());
    if (s == REC_OK) {
        rec_model *am = make_model(&ac);
        rec_ckpt_meta got;
        s = am ? rec_ckpt_load(atom, am, &got) : REC_EINVAL;
        CHECK(s == REC_OK && got.step == 2 && rec_model_steps(am) == 2, "previous checkpoint (step 2) loads: %s", rec_errmsg());
        rec_model_free(am);
        rec_model_config_free(&ac);
    }
    rmdir(atom_tmp);
    /* Overwriting an existing checkpoint works and gives the new one. */
    CHECK(rec_ckpt_save(atom, m, &meta3) == REC_OK, "overwrite: %s", rec_errmsg());
    rec_ckpt_meta got3;
    rec_model_set_steps(x.target, 0);
    CHECK(rec_ckpt_load(atom, x.target, &got3) == REC_OK && got3.step == 3 && models_equal(m, x.target, &diff),
          "overwritten checkpoint loads the new state: %s", rec_errmsg());

out:
    free(p);
    free(file);
    rec_batch_free(&b);
    rec_model_free(x.target);
    rec_model_free(m);
    rec_model_config_free(&c);
}

/* ---- export ------------------------------------------------------------------------------- */

/* Parses a .npy file's header (NumPy format 1.0/2.0): checks '<f4' and C order, returns the
 * shape in shape[] / *ndim and the data offset, or 0 when the header is malformed. */
static size_t parse_npy(const uint8_t *p, size_t size, int *ndim, int64_t *shape) {
    if (size < 12 || memcmp(p, "\x93NUMPY", 6)) return 0;
    size_t hlen, start;
    if (p[6] == 1) {
        hlen = (size_t)p[8] | (size_t)p[9] << 8;
        start = 10;
    } else if (p[6] == 2 || p[6] == 3) {
        hlen = rd_u32(p + 8);
        start = 12;
    } else {
        return 0;
    }
    if (start + hlen > size) return 0;
    char h[4096];
    if (hlen >= sizeof h) return 0;
    memcpy(h, p + start, hlen);
    h[hlen] = 0;
    if (!strstr(h, "'descr': '<f4'") || !strstr(h, "'fortran_order': False") || h[hlen - 1] != '\n') return 0;
    const char *s = strstr(h, "'shape': (");
    if (!s) return 0;
    s += strlen("'shape': (");
    *ndim = 0;
    while (*s != ')') {
        char *end;
        long long v = strtoll(s, &end, 10);
        if (end == s || *ndim >= 2) return 0;
        shape[(*ndim)++] = v;
        s = end;
        if (*s == ',') s++;
        while (*s == ' ') s++;
    }
    return start + hlen;
}

static int exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

static void write_text(const char *path, const char *text) { write_all(path, (const uint8_t *)text, strlen(text)); }

/* A user's own folder holding names an export writes (mydata.npy, config.json) and no list of
 * an export's files: refused with or without overwrite, both files kept as they were. */
static void export_over_own_files(const rec_model *m) {
    char dir[400], mine[500], cfg[500];
    snprintf(dir, sizeof dir, "%s/ud", g_dir);
    snprintf(mine, sizeof mine, "%s/mydata.npy", dir);
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    CHECK(mkdir(dir, 0755) == 0, "mkdir %s", dir);
    write_text(mine, "my own array");
    write_text(cfg, "{\"mine\": true}");
    for (int overwrite = 0; overwrite < 2; overwrite++) {
        CHECK_ERR(rec_export_npy(m, dir, overwrite), REC_EINVAL, "' and no rectrain_export.json (the list an export "
                  "keeps of the files it wrote), so it is not an earlier export");
        CHECK_ERR(rec_export_check(dir, overwrite), REC_EINVAL, "so it is not an earlier export");
        size_t n1 = 0, n2 = 0;
        uint8_t *a = read_all(mine, &n1), *b = read_all(cfg, &n2);
        CHECK(a && b && n1 == 12 && n2 == 14 && !memcmp(b, "{\"mine\"", 7), "overwrite %d: the user's files are kept",
              overwrite);
        free(a);
        free(b);
    }
}

/* The export into `dir` (holding an export already; cpath is its config.json) appears whole
 * or not at all: an existing export is replaced only with `overwrite`, never one holding other
 * files (even ones named as an export's); a failure half-way (files over RLIMIT_FSIZE) leaves
 * neither DIR nor DIR.tmp. */
static void export_failures(const rec_model *m, const char *dir, const char *cpath) {
    char tmp[700], p[800];
    snprintf(tmp, sizeof tmp, "%s.tmp", dir);
    CHECK_ERR(rec_export_npy(m, dir, 0), REC_EINVAL, "exists and holds ");
    CHECK(strstr(rec_errmsg(), " files); add --overwrite to replace it"), "%s", rec_errmsg());
    CHECK(rec_export_npy(m, dir, 1) == REC_OK && exists(cpath) && !exists(tmp), "export over an export: %s", rec_errmsg());
    static const char *const others[] = {"notes.txt", "mydata.npy"};
    for (int k = 0; k < 2; k++) {
        snprintf(p, sizeof p, "%s/%s", dir, others[k]);
        write_text(p, "mine");
        char want[200];
        snprintf(want, sizeof want, "holds '%s', which the export there did not write (rectrain_export.json lists its "
                 "files)", others[k]);
        CHECK_ERR(rec_export_npy(m, dir, 1), REC_EINVAL, want);
        CHECK(exists(p) && exists(cpath), "the refused directory is left as it was");
        CHECK(unlink(p) == 0, "rm %s", p);
    }
    snprintf(p, sizeof p, "%s/rectrain_export.json", dir);
    write_text(p, "{\"files\": [\"../x\"]}");
    CHECK_ERR(rec_export_npy(m, dir, 1), REC_EINVAL, "rectrain_export.json: not the list of files an export writes");
    CHECK(exists(cpath), "a folder with a bad list is left as it was");
    /* A DIR.tmp left by a killed export (its list, its files) is cleared; anything else refused. */
    char fresh[400];
    snprintf(fresh, sizeof fresh, "%s/fresh", g_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", fresh);
    CHECK(mkdir(tmp, 0755) == 0, "mkdir %s", tmp);
    snprintf(p, sizeof p, "%s/mydata.npy", tmp);
    write_text(p, "mine");
    CHECK_ERR(rec_export_check(fresh, 0), REC_EIO, ".tmp: is in the way of the export");
    CHECK(unlink(p) == 0, "rm %s", p);
    snprintf(p, sizeof p, "%s/rectrain_export.json", tmp);
    write_text(p, "{\"files\": [\"emb.0.weight.npy\", \"config.json\"]}");
    snprintf(p, sizeof p, "%s/emb.0.weight.npy.tmp", tmp);
    write_text(p, "");
    CHECK(rec_export_npy(m, fresh, 0) == REC_OK && !exists(tmp), "export clearing a killed one's DIR.tmp: %s", rec_errmsg());
    snprintf(p, sizeof p, "%s/emb.0.weight.npy.tmp", fresh);
    CHECK(!exists(p), "the killed export's file is gone");
    snprintf(fresh, sizeof fresh, "%s/fresh2", g_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", fresh);
    write_text(tmp, "");
    CHECK_ERR(rec_export_check(fresh, 0), REC_EIO, ".tmp: is in the way of the export");
    CHECK(!exists(fresh), "nothing made");
    /* An empty DIR (made beforehand) is filled. */
    snprintf(fresh, sizeof fresh, "%s/empty", g_dir);
    CHECK(mkdir(fresh, 0755) == 0 && rec_export_npy(m, fresh, 0) == REC_OK, "export into an empty dir: %s", rec_errmsg());
    /* A file where the directory should be, or above it. */
    CHECK_ERR(rec_export_npy(m, cpath, 0), REC_EIO, "not a directory");
    char under_file[700];
    snprintf(under_file, sizeof under_file, "%s/sub", cpath);
    CHECK_ERR(rec_export_npy(m, under_file, 0), REC_EIO, "cannot create the export directory");
    /* Files larger than RLIMIT_FSIZE fail to write (EFBIG, SIGXFSZ ignored): the largest
     * tensor's file fails after smaller ones were written, and nothing is left. */
    const rec_tensor *ts;
    int n = rec_model_tensors(m, &ts);
    int64_t largest = 0;
    for (int i = 0; i < n; i++)
        if (ts[i].role == REC_TENSOR_PARAM && rec_tensor_numel(&ts[i]) > largest) largest = rec_tensor_numel(&ts[i]);
    struct rlimit old, lim;
    CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0, "getrlimit");
    lim = old;
    lim.rlim_cur = (rlim_t)(128 + 4 * largest - 1);
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    snprintf(fresh, sizeof fresh, "%s/limited", g_dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", fresh);
    const int limited = setrlimit(RLIMIT_FSIZE, &lim) == 0;
    CHECK(limited, "setrlimit RLIMIT_FSIZE");
    if (limited) {
        rec_status s = rec_export_npy(m, fresh, 0);
        setrlimit(RLIMIT_FSIZE, &old);
        CHECK(s == REC_EIO && strstr(rec_errmsg(), "cannot write the .npy file: File too large"), "status %d: %s", (int)s,
              rec_errmsg());
        CHECK(!exists(fresh) && !exists(tmp), "a failed export leaves no partial directory");
    }
    signal(SIGXFSZ, prev);
}

static void export_npy(void) {
    rec_model_config c;
    if (!make_config(&c, REC_OPT_ADAGRAD, REC_SPARSE_ADAGRAD, 16, ROWS)) return;
    rec_model *m = make_model(&c);
    if (!m) goto out;
    char dir[512];
    snprintf(dir, sizeof dir, "%s/export/a/b", g_dir);
    rec_status s = rec_export_npy(m, dir, 0);
    CHECK(s == REC_OK, "export: %s", rec_errmsg());
    const rec_tensor *ts;
    int n = rec_model_tensors(m, &ts), n_param = 0;
    for (int i = 0; i < n; i++) {
        char path[700];
        snprintf(path, sizeof path, "%s/%s.npy", dir, ts[i].name);
        size_t size = 0;
        uint8_t *p = read_all(path, &size);
        if (ts[i].role != REC_TENSOR_PARAM) {
            CHECK(p == NULL, "optimizer state %s is not exported", ts[i].name);
            free(p);
            continue;
        }
        n_param++;
        CHECK(p != NULL, "%s exists", path);
        if (!p) continue;
        int ndim = 0;
        int64_t shape[2] = {-1, -1};
        size_t off = parse_npy(p, size, &ndim, shape);
        size_t bytes = 4 * (size_t)rec_tensor_numel(&ts[i]);
        CHECK(off > 0 && ndim == ts[i].ndim && shape[0] == ts[i].shape[0] && (ndim == 1 || shape[1] == ts[i].shape[1]),
              "%s: header '<f4', C order, shape of the tensor (ndim %d, %lld x %lld)", path, ndim, (long long)shape[0],
              (long long)shape[1]);
        CHECK(off > 0 && size == off + bytes && !memcmp(p + off, ts[i].data, bytes), "%s: data are the tensor's bytes", path);
        free(p);
    }
    CHECK(n_param >= FS + 4, "%d parameters exported", n_param);
    char cpath[600];
    snprintf(cpath, sizeof cpath, "%s/config.json", dir);
    rec_model_config back;
    s = rec_model_config_load(&back, cpath);
    CHECK(s == REC_OK, "config.json loads: %s", rec_errmsg());
    if (s == REC_OK) {
        CHECK(rec_model_config_equal(&back, &c), "config.json equals the model's config");
        rec_model_config_free(&back);
    }
    char lpath[600];
    snprintf(lpath, sizeof lpath, "%s/rectrain_export.json", dir);
    size_t ln = 0;
    char *list = (char *)read_all(lpath, &ln);
    CHECK(list && strstr(list, "\"config.json\"") && strstr(list, "\"emb.0.weight.npy\""),
          "the export lists its files in %s", lpath);
    free(list);
    export_over_own_files(m);
    export_failures(m, dir, cpath);
out:
    rec_model_free(m);
    rec_model_config_free(&c);
}

/* The pieces of a sharded save (dist.h): a shard file of given tensors read back one by one,
 * the reader's refusals, a shard or a sharded main file refused where a model is loaded, and
 * a sharded model taking a whole checkpoint's dense part. */
static void sharded(void) {
    rec_model_config c;
    if (!make_config(&c, REC_OPT_SGD, REC_SPARSE_ROWWISE_ADAGRAD, 16, ROWS)) return;
    float rows[10], state[2] = {0.5f, 0.25f};
    for (int i = 0; i < 10; i++) rows[i] = (float)i / 3.0f;
    rec_tensor ts[2] = {{.name = "rows", .role = REC_TENSOR_PARAM, .ndim = 1, .shape = {10, 0}, .data = rows},
                        {.name = "state", .role = REC_TENSOR_OPT_STATE, .ndim = 1, .shape = {2, 0}, .data = state}};
    char shard[512], whole[512];
    snprintf(shard, sizeof shard, "%s/model.00000000000000ab.1-of-3.rckpt", g_dir);
    snprintf(whole, sizeof whole, "%s/whole.rckpt", g_dir);
    const rec_ckpt_meta meta = {.step = 4, .shards = 3, .shard_id = 0xab, .shard = 2};
    CHECK(rec_ckpt_save_tensors(shard, &c, &meta, ts, 2) == REC_OK, "shard save: %s", rec_errmsg());
    rec_ckpt_reader *r = NULL;
    CHECK(rec_ckpt_reader_open(&r, shard) == REC_OK, "reader: %s", rec_errmsg());
    if (r) {
        const rec_ckpt_meta *m = rec_ckpt_reader_meta(r);
        CHECK(m->step == 4 && m->shards == 3 && m->shard_id == 0xab && m->shard == 2, "the shard's meta round-trips");
        const float *got = NULL;
        CHECK(rec_ckpt_reader_tensor(r, "rows", 10, &got) == REC_OK && got && !memcmp(got, rows, sizeof rows),
              "rows read back: %s", rec_errmsg());
        CHECK_ERR(rec_ckpt_reader_tensor(r, "rows", 11, &got), REC_EINVAL, "holds 10 floats where 11 were expected");
        CHECK_ERR(rec_ckpt_reader_tensor(r, "replicated", 4, &got), REC_EINVAL, "has no tensor \"replicated\"");
        rec_ckpt_reader_close(r);
    }
    const rec_ckpt_meta bad = {.step = 4, .shards = 2, .shard = 3};
    CHECK_ERR(rec_ckpt_save_tensors(shard, &c, &bad, ts, 2), REC_EINVAL, "meta names shard 3 of 2");

    rec_model *m = make_model(&c), *sm = NULL;
    CHECK(rec_model_init_sharded(&sm, &c, B, THREADS) == REC_OK, "sharded model: %s", rec_errmsg());
    if (!m || !sm) goto out;
    CHECK_ERR(rec_ckpt_load(shard, m, NULL), REC_EINVAL, "is rank 1's shard of a save by 3 ranks");
    const rec_ckpt_meta main_meta = {.shards = 3, .shard_id = 0xab};
    CHECK(rec_ckpt_save(whole, m, &main_meta) == REC_OK, "save: %s", rec_errmsg());
    CHECK_ERR(rec_ckpt_load(whole, m, NULL), REC_EINVAL, "holds tables sharded over 3 ranks");
    const rec_ckpt_meta plain = {0};
    CHECK(rec_ckpt_save(whole, m, &plain) == REC_OK, "save: %s", rec_errmsg());
    CHECK(rec_ckpt_load(whole, sm, NULL) == REC_OK, "a sharded model takes a whole checkpoint's dense part: %s",
          rec_errmsg());
out:
    rec_model_free(m);
    rec_model_free(sm);
    rec_model_config_free(&c);
}

static void ckpt_path(void) {
    char buf[64];
    rec_ckpt_path("out", buf, sizeof buf);
    CHECK(!strcmp(buf, "out/model.rckpt"), "%s", buf);
    rec_ckpt_path("out//", buf, sizeof buf);
    CHECK(!strcmp(buf, "out/model.rckpt"), "%s", buf);
    rec_ckpt_path("/", buf, sizeof buf);
    CHECK(!strcmp(buf, "/model.rckpt"), "%s", buf);
    rec_ckpt_path("a/very/long/directory", buf, 8);
    CHECK(strlen(buf) == 7, "truncated to the buffer: %s", buf);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/test_ckpt.XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    ckpt_path();
    round_trip(REC_OPT_SGD, REC_SPARSE_SGD, "sgd");
    round_trip(REC_OPT_ADAGRAD, REC_SPARSE_ADAGRAD, "adagrad");
    round_trip(REC_OPT_ADAM, REC_SPARSE_ROWWISE_ADAGRAD, "adam+rowwise");
    rejections();
    sharded();
    export_npy();
    nftw(g_dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    return check_report();
}
