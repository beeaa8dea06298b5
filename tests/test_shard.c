/* .rshard writer and reader: bit-exact round trips of random batches over every group shape
 * (several groups, a partial last group, empty bags, Dn = 0, F = 0, no rows) and every sparse
 * encoding (single-hot groups without offsets, multi-hot, groups of both kinds in one shard,
 * i32 ids of tables up to 2^31 rows and i64 ids beyond), and refusal —
 * with a message, never a crash — of every truncation, of flipped bytes in the header, groups
 * and footer, of wrong magic, future versions and hand-crafted out-of-range ids. Also the
 * statistics `rectrain inspect` reports (distinct ids, top-0.1% skew, pooling quantiles) on
 * crafted distributions, the CRC-32 check value, and the vocabularies' signatures that
 * rec_shard_bind_vocabs (--vocab-from) checks a spec against, with the fallback for shards
 * written without them.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "rectrain/core.h"
#include "rectrain/shard.h"
#include "rectrain/stats.h"
#include "../src/io/shard_format.h"

static char g_dir[256];

/* ---- fixtures ----------------------------------------------------------------------------- */

/* A hand-built spec with Dn dense values and F sparse features, feature f feeding table f. */
typedef struct test_spec {
    rec_spec spec;
    rec_feature feat[8];
    rec_table table[8];
} test_spec;

static void make_spec(test_spec *t, const char *name, int32_t dn, int32_t F, const int64_t *rows) {
    memset(t, 0, sizeof *t);
    snprintf(t->spec.name, REC_NAME_MAX, "%s", name);
    t->spec.n_dense = dn;
    t->spec.n_sparse = F;
    t->spec.n_features = F;
    t->spec.features = t->feat;
    t->spec.n_tables = F;
    t->spec.tables = t->table;
    for (int32_t f = 0; f < F; f++) {
        snprintf(t->feat[f].name, REC_NAME_MAX, "C%d", f + 1);
        t->feat[f].kind = REC_FEAT_SPARSE;
        t->feat[f].sparse_index = f;
        t->feat[f].table = f;
        snprintf(t->table[f].name, REC_NAME_MAX, "t%d", f);
        t->table[f].rows = rows[f];
    }
}

/* How fill_random shapes the bags: random lengths, one id per row everywhere, or one id per
 * row in the groups of G rows where (group + feature) is even and random lengths elsewhere. */
enum { BAGS_RANDOM, BAGS_SINGLE, BAGS_MIXED };

/* 1 when row r of feature f gets exactly one id under `bags` with groups of G rows. */
static int single_row(int bags, int64_t G, int64_t r, int32_t f) {
    return bags == BAGS_SINGLE || (bags == BAGS_MIXED && (r / G + f) % 2 == 0);
}

/* Fills all `cap` rows of a fresh batch with random data: labels 0/1 (0 without label), dense
 * values of every bit pattern class, bags of 0..max_len ids (a third of them empty) or of one
 * id as `bags` and G say; an eighth of the ids are the table's last row R-1. */
static void fill_random_bags(rec_batch *b, rec_rng *rng, int has_label, const int64_t *rows, int max_len,
                             int bags, int64_t G) {
    b->n = b->cap;
    for (int64_t r = 0; r < b->n; r++) {
        b->label[r] = has_label ? (float)(rec_rng_below(rng, 2)) : 0.0f;
        for (int32_t d = 0; d < b->n_dense; d++) {
            uint32_t bits = (uint32_t)rec_rng_u64(rng);
            float x;
            memcpy(&x, &bits, 4);
            b->dense[r * b->n_dense + d] = x; /* NaNs and denormals included: compared by bits */
        }
    }
    for (int32_t f = 0; f < b->n_sparse; f++) {
        rec_jagged *j = &b->sparse[f];
        j->offsets[0] = 0;
        for (int64_t r = 0; r < b->n; r++) {
            int64_t len = rec_rng_below(rng, 3) == 0 ? 0 : (int64_t)rec_rng_below(rng, (uint64_t)max_len + 1);
            if (single_row(bags, G, r, f)) len = 1;
            rec_batch_reserve_nnz(b, f, j->offsets[r] + len, 0);
            for (int64_t k = 0; k < len; k++)
                j->ids64[j->offsets[r] + k] = rec_rng_below(rng, 8) == 0
                                                    ? rows[f] - 1
                                                    : (int64_t)rec_rng_below(rng, (uint64_t)rows[f]);
            j->offsets[r + 1] = j->offsets[r] + len;
        }
    }
}

static void fill_random(rec_batch *b, rec_rng *rng, int has_label, const int64_t *rows, int max_len) {
    fill_random_bags(b, rng, has_label, rows, max_len, BAGS_RANDOM, 1);
}

/* Copies rows [r0, r0+n) of `src` into `dst` (a batch of the same shape with cap >= n), every
 * other feature (by r0 + f) narrowed to 32-bit ids where its ids fit: the writer takes both. */
static void slice(const rec_batch *src, int64_t r0, int64_t n, rec_batch *dst) {
    dst->n = n;
    memcpy(dst->label, src->label + r0, 4 * (size_t)n);
    memcpy(dst->dense, src->dense + r0 * src->n_dense, 4 * (size_t)(n * src->n_dense));
    for (int32_t f = 0; f < src->n_sparse; f++) {
        const int64_t *o = src->sparse[f].offsets;
        CHECK(rec_batch_set_wide(dst, f, 1) == REC_OK, "widen: %s", rec_errmsg());
        CHECK(rec_batch_reserve_nnz(dst, f, o[r0 + n] - o[r0], 0) == REC_OK, "reserve: %s", rec_errmsg());
        for (int64_t i = 0; i <= n; i++) dst->sparse[f].offsets[i] = o[r0 + i] - o[r0];
        rec_jagged_copy_ids64(&src->sparse[f], o[r0], o[r0 + n] - o[r0], dst->sparse[f].ids64);
        if ((r0 + f) % 2 && rec_batch_set_wide(dst, f, 0) != REC_OK) /* an id of 2^31 or more: stays wide */
            CHECK(dst->sparse[f].wide, "a refused narrowing changed the feature");
    }
}

/* 1 when rows [0, n) of `b` equal rows [r0, r0+n) of `truth` bit for bit. */
static int same_rows(const rec_batch *truth, int64_t r0, int64_t n, const rec_batch *b) {
    if (b->n != n) return 0;
    if (memcmp(b->label, truth->label + r0, 4 * (size_t)n)) return 0;
    if (memcmp(b->dense, truth->dense + r0 * truth->n_dense, 4 * (size_t)(n * truth->n_dense))) return 0;
    for (int32_t f = 0; f < truth->n_sparse; f++) {
        const int64_t *o = truth->sparse[f].offsets;
        for (int64_t i = 0; i <= n; i++)
            if (b->sparse[f].offsets[i] != o[r0 + i] - o[r0]) return 0;
        for (int64_t k = o[r0]; k < o[r0 + n]; k++)
            if (rec_jagged_id(&b->sparse[f], k - o[r0]) != rec_jagged_id(&truth->sparse[f], k)) return 0;
    }
    return 1;
}

static char *path_in_dir(const char *name) {
    static char buf[8][512];
    static int k;
    char *p = buf[k++ & 7];
    snprintf(p, 512, "%s/%s", g_dir, name);
    return p;
}

static int file_exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

static uint8_t *read_all(const char *p, size_t *len) {
    FILE *f = fopen(p, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*len + 1);
    if (fread(b, 1, *len, f) != *len) *len = 0;
    fclose(f);
    return b;
}

static void write_all(const char *p, const uint8_t *b, size_t len) {
    FILE *f = fopen(p, "wb");
    if (!f) return;
    fwrite(b, 1, len, f);
    fclose(f);
}

/* Writes `truth` to `path` in randomly sized appends (some empty). */
static rec_status write_shard(const char *path, const rec_spec *spec, const rec_vocab_set *vocabs,
                              int has_label, int64_t group_rows, const rec_batch *truth, rec_rng *rng) {
    rec_shard_writer *w;
    REC_TRY(rec_shard_writer_open(&w, path, spec, vocabs, has_label, group_rows));
    rec_batch part;
    rec_batch_init(&part, 64, truth->n_dense, truth->n_sparse, 1);
    int64_t r = 0;
    while (r < truth->n) {
        int64_t k = (int64_t)rec_rng_below(rng, 40);
        if (k > truth->n - r) k = truth->n - r;
        slice(truth, r, k, &part);
        rec_status s = rec_shard_writer_append(w, &part);
        if (s) {
            rec_batch_free(&part);
            rec_shard_writer_abort(w);
            return s;
        }
        r += k;
    }
    rec_batch_free(&part);
    return rec_shard_writer_close(w);
}

/* ---- round trips -------------------------------------------------------------------------- */

static void check_layout(const char *path, const rec_batch *truth, const int64_t *rows, int64_t G);

/* Writes N random rows in groups of G (0: the default) with `bags` bag shapes and table sizes
 * `big` (NULL: small tables), reads them back in random ranges and checks the file's layout. */
static void round_trip_bags(const char *name, int32_t dn, int32_t F, int64_t N, int64_t G, int has_label,
                            int with_vocabs, uint64_t seed, int bags, const int64_t *big) {
    int64_t small[8] = {1, 7, 1000, 3, 50, 2, 9, 100000};
    const int64_t *rows = big ? big : small;
    test_spec ts;
    make_spec(&ts, name, dn, F, rows);
    rec_rng rng;
    rec_rng_seed(&rng, seed, 0);
    rec_batch truth;
    rec_batch_init(&truth, N > 0 ? N : 1, dn, F, 2);
    int64_t Geff = G > 0 ? G : 65536;
    if (N > 0) fill_random_bags(&truth, &rng, has_label, rows, 5, bags, Geff);
    truth.n = N;

    rec_vocab_set vs = {0};
    int64_t vids0[5] = {17, -3, 1LL << 40, 0, 99}, vids1[1] = {0};
    if (with_vocabs) {
        vs.n = 2;
        vs.v = calloc(2, sizeof *vs.v);
        rec_vocab_from_ids(&vs.v[0], vids0, 5);
        rec_vocab_from_ids(&vs.v[1], vids1, 0);
    }
    const char *path = path_in_dir(name);
    rec_status s = write_shard(path, &ts.spec, with_vocabs ? &vs : NULL, has_label, G, &truth, &rng);
    CHECK(s == REC_OK, "%s: write: %s", name, rec_errmsg());
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(!file_exists(tmp), "%s: %s left behind", name, tmp);

    rec_shard *sh = NULL;
    s = rec_shard_open(&sh, path);
    CHECK(s == REC_OK, "%s: open: %s", name, rec_errmsg());
    if (s) goto out;
    check_layout(path, &truth, rows, Geff);
    const rec_shard_schema *sc = rec_shard_get_schema(sh);
    CHECK(rec_shard_rows(sh) == N, "%s: rows %lld", name, (long long)rec_shard_rows(sh));
    CHECK(rec_shard_groups(sh) == (N + Geff - 1) / Geff, "%s: groups %lld", name, (long long)rec_shard_groups(sh));
    CHECK(strcmp(sc->spec_name, name) == 0 && sc->n_dense == dn && sc->n_sparse == F && sc->has_label == has_label,
          "%s: schema '%s' %d %d %d", name, sc->spec_name, sc->n_dense, sc->n_sparse, sc->has_label);
    for (int32_t f = 0; f < F && f < sc->n_sparse; f++) {
        char want[16];
        snprintf(want, sizeof want, "C%d", f + 1);
        CHECK(strcmp(sc->sparse[f].name, want) == 0 && sc->sparse[f].table_rows == rows[f],
              "%s: feature %d '%s' rows %lld", name, f, sc->sparse[f].name, (long long)sc->sparse[f].table_rows);
    }
    const rec_vocab_set *rv = rec_shard_vocabs(sh);
    if (with_vocabs) {
        CHECK(rv->n == 2 && rec_vocab_size(rv->v[0]) == 5 && rec_vocab_size(rv->v[1]) == 0,
              "%s: vocabularies %d", name, rv->n);
        if (rv->n == 2)
            CHECK(!memcmp(rec_vocab_ids(rv->v[0]), vids0, sizeof vids0) && rec_vocab_lookup(rv->v[0], 1LL << 40) == 3,
                  "%s: vocabulary ids differ", name);
    } else {
        CHECK(rv->n == 0, "%s: %d vocabularies, want none", name, rv->n);
    }

    rec_batch b;
    rec_batch_init(&b, N + 1, dn, F, 1);
    int ok = 1;
    /* the whole shard, then random ranges (many crossing group boundaries), then edges */
    for (int t = 0; t < 300 && ok; t++) {
        int64_t r0, n;
        if (t == 0) { r0 = 0; n = N; }
        else if (t == 1) { r0 = N; n = 0; }
        else if (t == 2 && N >= Geff + 1) { r0 = Geff - 1; n = 2; }
        else {
            r0 = (int64_t)rec_rng_below(&rng, (uint64_t)N + 1);
            n = (int64_t)rec_rng_below(&rng, (uint64_t)(N - r0) + 1);
        }
        b.n = -1;
        s = rec_shard_read(sh, r0, n, &b);
        ok = s == REC_OK && same_rows(&truth, r0, n, &b);
        CHECK(ok, "%s: rows [%lld, +%lld) differ: %s", name, (long long)r0, (long long)n, s ? rec_errmsg() : "");
        for (int32_t f = 0; ok && f < F; f++) /* ids at the width the shard stores */
            CHECK(b.sparse[f].wide == rec_ids_wide(rows[f]), "%s: feature %d read %s-bit ids for a table of %lld rows",
                  name, f, b.sparse[f].wide ? "64" : "32", (long long)rows[f]);
    }
    s = rec_shard_verify(sh);
    CHECK(s == REC_OK, "%s: verify: %s", name, rec_errmsg());
    s = rec_shard_read(sh, N, 1, &b);
    CHECK_ERR(s, REC_EINVAL, "shard has");
    s = rec_shard_read(sh, -1, 1, &b);
    CHECK_ERR(s, REC_EINVAL, "requested");
    CHECK_ERR(rec_shard_check_rows(sh, N - 1, 2), REC_EINVAL, "the shard has");
    CHECK(rec_shard_check_rows(sh, 0, N) == REC_OK, "%s: check_rows of every row: %s", name, rec_errmsg());
    rec_batch_free(&b);
    rec_batch_init(&b, 4, dn + 1, F, 1);
    s = rec_shard_read(sh, 0, N < 4 ? N : 4, &b);
    CHECK_ERR(s, REC_EINVAL, "dense values");
    rec_batch_free(&b);
    rec_shard_close(sh);
out:
    rec_batch_free(&truth);
    if (with_vocabs) rec_vocab_set_free(&vs);
}

static void round_trip(const char *name, int32_t dn, int32_t F, int64_t N, int64_t G, int has_label,
                       int with_vocabs, uint64_t seed) {
    round_trip_bags(name, dn, F, N, G, has_label, with_vocabs, seed, BAGS_RANDOM, NULL);
}

/* Group directory entry g of a whole shard image. */
static uint8_t *dir_entry(uint8_t *img, size_t len, int64_t g, int32_t F) {
    uint64_t fo = shard_get_u64(img + len - SHARD_TAIL + SHARD_T_FOOTER_OFF);
    return img + fo + SHARD_F_FIXED + (uint64_t)g * shard_entry_bytes(F);
}

/* Flags byte of feature f in directory entry e. */
static uint8_t *entry_flags(uint8_t *e, int32_t F, int32_t f) { return e + SHARD_E_NNZ + 8 * (size_t)F + f; }

/* Checks the file's encoding against `truth`, computed here independently of the format's
 * helpers: a feature is flagged single-hot in a group exactly when every row there has one id,
 * its offsets are then absent, and its ids take 4 bytes when R <= 2^31, else 8. */
static void check_layout(const char *path, const rec_batch *truth, const int64_t *rows, int64_t G) {
    size_t len = 0;
    uint8_t *img = read_all(path, &len);
    CHECK(img != NULL, "%s: read back", path);
    if (!img) return;
    int32_t F = truth->n_sparse;
    int64_t groups = (truth->n + G - 1) / G;
    uint64_t fo = shard_get_u64(img + len - SHARD_TAIL + SHARD_T_FOOTER_OFF);
    CHECK(shard_get_u32(img + fo + SHARD_F_ENTRY_BYTES) == 32 + 8 * (uint32_t)F + ((uint32_t)F + 7) / 8 * 8,
          "%s: entry bytes %u", path, shard_get_u32(img + fo + SHARD_F_ENTRY_BYTES));
    int ok = 1;
    for (int64_t g = 0; g < groups && ok; g++) {
        uint8_t *e = dir_entry(img, len, g, F);
        int64_t r0 = g * G, n = truth->n - r0 < G ? truth->n - r0 : G;
        uint64_t want = (uint64_t)(4 * n + 63) / 64 * 64 + (uint64_t)(4 * n * truth->n_dense + 63) / 64 * 64;
        for (int32_t f = 0; f < F; f++) {
            const int64_t *o = truth->sparse[f].offsets;
            int single = 1;
            for (int64_t r = r0; r < r0 + n; r++) single &= o[r + 1] - o[r] == 1;
            uint64_t nnz = (uint64_t)(o[r0 + n] - o[r0]), idb = rows[f] <= (1LL << 31) ? 4 : 8;
            ok &= *entry_flags(e, F, f) == (single ? 1 : 0);
            want += (single ? 0 : (8 * (uint64_t)(n + 1) + 63) / 64 * 64) + (idb * nnz + 63) / 64 * 64;
        }
        ok &= shard_get_u64(e + SHARD_E_BYTES) == want;
        CHECK(ok, "%s: group %lld: flags or size (%llu bytes, want %llu) not as expected", path, (long long)g,
              (unsigned long long)shard_get_u64(e + SHARD_E_BYTES), (unsigned long long)want);
    }
    free(img);
}

/* ---- corruption --------------------------------------------------------------------------- */

/* Recomputes the CRC of group g in its directory entry and the footer CRC in the tail. */
static void reseal_group(uint8_t *img, size_t len, int64_t g, int32_t F) {
    uint8_t *e = dir_entry(img, len, g, F);
    shard_put_u32(e + SHARD_E_CRC, rec_crc32(0, img + shard_get_u64(e + SHARD_E_OFFSET), shard_get_u64(e + SHARD_E_BYTES)));
    uint64_t fo = shard_get_u64(img + len - SHARD_TAIL + SHARD_T_FOOTER_OFF);
    shard_put_u32(img + len - SHARD_TAIL + SHARD_T_FOOTER_CRC, rec_crc32(0, img + fo, len - SHARD_TAIL - fo));
}

static void reseal_header(uint8_t *img) {
    uint64_t hb = shard_get_u64(img + SHARD_H_HEADER_BYTES);
    shard_put_u32(img + SHARD_H_CRC, 0);
    shard_put_u32(img + SHARD_H_CRC, rec_crc32(0, img, hb));
}

/* Start of feature f's sections in group g (its offsets, or its ids where it is single-hot),
 * as the format lays them out; `rows` are the table sizes. */
static uint8_t *group_column(uint8_t *img, size_t len, int64_t g, int32_t dn, int32_t F, int32_t f,
                             const int64_t *rows) {
    uint8_t *e = dir_entry(img, len, g, F);
    uint64_t n = shard_get_u64(e + SHARD_E_ROWS);
    uint64_t o = shard_get_u64(e + SHARD_E_OFFSET) + shard_pad(4 * n) + shard_pad(4 * n * (uint64_t)dn);
    for (int32_t k = 0; k < f; k++)
        o += shard_feature_bytes(n, *entry_flags(e, F, k), shard_id_bytes(rows[k]),
                                 shard_get_u64(e + SHARD_E_NNZ + 8 * k));
    return img + o;
}

static int64_t *group_offsets(uint8_t *img, size_t len, int64_t g, int32_t dn, int32_t F, int32_t f,
                              const int64_t *rows) {
    return (int64_t *)(void *)group_column(img, len, g, dn, F, f, rows);
}

static void corruption(void) {
    enum { DN = 2, F = 3, N = 60, G = 8 };
    int64_t rows[3] = {10, 20, 30};
    test_spec ts;
    make_spec(&ts, "corrupt", DN, F, rows);
    rec_rng rng;
    rec_rng_seed(&rng, 7, 0);
    rec_batch truth;
    rec_batch_init(&truth, N, DN, F, 2);
    fill_random(&truth, &rng, 1, rows, 4);
    int64_t vids[3] = {5, 6, 7};
    rec_vocab_set vs = {1, calloc(1, sizeof(rec_vocab *))};
    rec_vocab_from_ids(&vs.v[0], vids, 3);
    const char *good = path_in_dir("good.rshard"), *bad = path_in_dir("bad.rshard");
    CHECK(write_shard(good, &ts.spec, &vs, 1, G, &truth, &rng) == REC_OK, "write: %s", rec_errmsg());
    size_t len = 0;
    uint8_t *img = read_all(good, &len), *copy = malloc(len);
    CHECK(img && len > SHARD_MIN_BYTES, "read back %zu bytes", len);
    if (!img) return;
    uint64_t hb = shard_get_u64(img + SHARD_H_HEADER_BYTES);
    uint64_t fo = shard_get_u64(img + SHARD_H_FOOTER_OFF);
    CHECK(shard_get_u64(img + SHARD_H_FILE_BYTES) == len, "file_bytes");
    rec_shard *s;
    rec_status st;

    /* every truncation is refused on open */
    int refused = 0, said_truncated = 0;
    for (size_t t = 0; t < len; t++) {
        write_all(bad, img, t);
        st = rec_shard_open(&s, bad);
        if (st == REC_OK) rec_shard_close(s);
        refused += st == REC_EFORMAT && strstr(rec_errmsg(), bad) != NULL;
        said_truncated += st == REC_EFORMAT && (strstr(rec_errmsg(), "truncated") || strstr(rec_errmsg(), "empty"));
    }
    CHECK(refused == (int)len && said_truncated == (int)len, "%d/%d truncations refused, %d said so", refused,
          (int)len, said_truncated);
    write_all(bad, img, len - 1000 < len ? len / 2 : 0);
    st = rec_shard_open(&s, bad);
    CHECK_ERR(st, REC_EFORMAT, "re-run rectrain prep");
    /* appended garbage is refused as well */
    uint8_t *longer = calloc(len + 64, 1);
    memcpy(longer, img, len);
    write_all(bad, longer, len + 64);
    st = rec_shard_open(&s, bad);
    CHECK(st == REC_EFORMAT, "file with 64 extra bytes accepted");
    free(longer);

    /* every flipped byte of the header, footer and tail is refused on open */
    int header_refused = 0, footer_refused = 0;
    for (uint64_t i = 0; i < len; i++) {
        if (i == hb) i = fo; /* skip the groups: checked lazily, below */
        memcpy(copy, img, len);
        copy[i] ^= 0x5a;
        write_all(bad, copy, len);
        st = rec_shard_open(&s, bad);
        if (st == REC_OK) rec_shard_close(s);
        if (i < hb) header_refused += st == REC_EFORMAT;
        else footer_refused += st == REC_EFORMAT;
    }
    CHECK(header_refused == (int)hb, "%d of %llu header byte flips refused", header_refused, (unsigned long long)hb);
    CHECK(footer_refused == (int)(len - fo), "%d of %llu footer byte flips refused", footer_refused,
          (unsigned long long)(len - fo));
    memcpy(copy, img, len);
    copy[SHARD_H_PREFIX + 3] ^= 1; /* spec name */
    write_all(bad, copy, len);
    CHECK_ERR(rec_shard_open(&s, bad), REC_EFORMAT, "header checksum mismatch");
    memcpy(copy, img, len);
    copy[len - 30] ^= 1; /* last directory entry */
    write_all(bad, copy, len);
    CHECK_ERR(rec_shard_open(&s, bad), REC_EFORMAT, "footer checksum mismatch");
    memcpy(copy, img, len);
    copy[len - 3] ^= 1; /* end magic */
    write_all(bad, copy, len);
    CHECK_ERR(rec_shard_open(&s, bad), REC_EFORMAT, "end marker");

    /* wrong magic, future version (even with a valid checksum) */
    memcpy(copy, img, len);
    memcpy(copy, "PK\003\004xxxx", 8);
    write_all(bad, copy, len);
    CHECK_ERR(rec_shard_open(&s, bad), REC_EFORMAT, "not a .rshard");
    memcpy(copy, img, len);
    shard_put_u32(copy + SHARD_H_VERSION, 2);
    reseal_header(copy);
    write_all(bad, copy, len);
    st = rec_shard_open(&s, bad);
    CHECK_ERR(st, REC_EFORMAT, "reads version 1");
    CHECK_ERR(st, REC_EFORMAT, "version 2");
    /* a resealed header with a lying file size */
    memcpy(copy, img, len);
    shard_put_u64(copy + SHARD_H_FILE_BYTES, len + 64);
    reseal_header(copy);
    write_all(bad, copy, len);
    char want[128];
    snprintf(want, sizeof want, "the header says %zu bytes, the file has %zu", len + 64, len);
    CHECK_ERR(rec_shard_open(&s, bad), REC_EFORMAT, want);

    /* a flipped byte in group 3: open succeeds, reading group 3 or verifying fails */
    memcpy(copy, img, len);
    uint8_t *e3 = dir_entry(copy, len, 3, F);
    copy[shard_get_u64(e3 + SHARD_E_OFFSET) + 5] ^= 0x10;
    write_all(bad, copy, len);
    rec_batch b;
    rec_batch_init(&b, N, DN, F, 1);
    st = rec_shard_open(&s, bad);
    CHECK(st == REC_OK, "open with a corrupt group: %s", rec_errmsg());
    if (!st) {
        CHECK(rec_shard_read(s, 0, 3 * G, &b) == REC_OK && same_rows(&truth, 0, 3 * G, &b), "groups 0..2 unreadable");
        st = rec_shard_read(s, 3 * G - 2, 4, &b);
        CHECK_ERR(st, REC_EFORMAT, "group 3: checksum mismatch");
        CHECK_ERR(st, REC_EFORMAT, bad);
        CHECK_ERR(rec_shard_read(s, 3 * G + 1, 1, &b), REC_EFORMAT, "group 3: checksum");
        CHECK_ERR(rec_shard_verify(s), REC_EFORMAT, "group 3: checksum");
        CHECK_ERR(rec_shard_check_rows(s, 3 * G - 1, 2), REC_EFORMAT, "group 3: checksum");
        rec_shard_close(s);
    }
    st = rec_shard_open(&s, bad);
    if (!st) {
        CHECK_ERR(rec_shard_verify(s), REC_EFORMAT, "group 3: checksum");
        rec_shard_close(s);
    }

    /* hand-crafted groups with recomputed checksums: an id past its table, decreasing offsets */
    memcpy(copy, img, len);
    int64_t *off = group_offsets(copy, len, 1, DN, F, 2, rows);
    uint64_t nrows = shard_get_u64(dir_entry(copy, len, 1, F) + SHARD_E_ROWS);
    CHECK(*entry_flags(dir_entry(copy, len, 1, F), F, 2) == 0, "group 1 feature 2 is single-hot");
    int32_t *ids = (int32_t *)(void *)((uint8_t *)off + shard_pad(8 * (nrows + 1)));
    CHECK(off[nrows] > 0, "group 1 feature 2 has no ids to corrupt");
    ids[off[nrows] - 1] = rows[2];
    reseal_group(copy, len, 1, F);
    write_all(bad, copy, len);
    st = rec_shard_open(&s, bad);
    CHECK(st == REC_OK, "open: %s", rec_errmsg());
    if (!st) {
        CHECK(rec_shard_read(s, 0, G, &b) == REC_OK, "group 0 unreadable");
        st = rec_shard_read(s, G, 1, &b);
        CHECK_ERR(st, REC_EFORMAT, "group 1: feature 'C3': id 30");
        CHECK_ERR(st, REC_EFORMAT, "outside");
        CHECK_ERR(rec_shard_verify(s), REC_EFORMAT, "group 1");
        rec_shard_close(s);
    }
    memcpy(copy, img, len);
    off = group_offsets(copy, len, 2, DN, F, 0, rows);
    off[1] = off[2] + 1;
    reseal_group(copy, len, 2, F);
    write_all(bad, copy, len);
    st = rec_shard_open(&s, bad);
    if (!st) {
        CHECK_ERR(rec_shard_verify(s), REC_EFORMAT, "group 2: feature 'C1' row 1: offsets decrease");
        rec_shard_close(s);
    }
    /* a directory entry whose size does not match its rows is refused on open */
    memcpy(copy, img, len);
    uint8_t *e0 = dir_entry(copy, len, 0, F);
    shard_put_u64(e0 + SHARD_E_NNZ, shard_get_u64(e0 + SHARD_E_NNZ) + 16); /* 64 bytes of i32 ids */
    reseal_group(copy, len, 0, F);
    write_all(bad, copy, len);
    CHECK_ERR(rec_shard_open(&s, bad), REC_EFORMAT, "group 0 is");
    /* flags: a multi-hot group flagged single-hot, unknown bits, non-zero padding */
    memcpy(copy, img, len);
    e0 = dir_entry(copy, len, 0, F);
    *entry_flags(e0, F, 1) = SHARD_FF_SINGLE;
    reseal_group(copy, len, 0, F);
    write_all(bad, copy, len);
    CHECK_ERR(rec_shard_open(&s, bad), REC_EFORMAT, "group 0 feature 'C2' is flagged one id per row");
    memcpy(copy, img, len);
    e0 = dir_entry(copy, len, 2, F);
    *entry_flags(e0, F, 0) |= 0x80;
    reseal_group(copy, len, 2, F);
    write_all(bad, copy, len);
    CHECK_ERR(rec_shard_open(&s, bad), REC_EFORMAT, "group 2 feature 'C1' has unknown flags 0x80");
    memcpy(copy, img, len);
    e0 = dir_entry(copy, len, 1, F);
    *entry_flags(e0, F, F) = 1;
    reseal_group(copy, len, 1, F);
    write_all(bad, copy, len);
    CHECK_ERR(rec_shard_open(&s, bad), REC_EFORMAT, "group 1: padding after the feature flags");

    /* missing file, a directory */
    CHECK_ERR(rec_shard_open(&s, path_in_dir("nope.rshard")), REC_EIO, "cannot open");
    CHECK_ERR(rec_shard_open(&s, g_dir), REC_EINVAL, "not a regular file");

    rec_batch_free(&b);
    rec_batch_free(&truth);
    rec_vocab_set_free(&vs);
    free(img);
    free(copy);
}

/* Single-hot groups (no offsets) with i64 ids (R > 2^31) and i32 ids: crafted ids outside the
 * table, resealed, are refused on read; flags that disagree with the group's size, on open. */
static void corruption_single(void) {
    enum { DN = 1, F = 3, N = 24, G = 8 };
    int64_t rows[3] = {(1LL << 40), 10, 1000};
    test_spec ts;
    make_spec(&ts, "corrupt_single", DN, F, rows);
    rec_rng rng;
    rec_rng_seed(&rng, 11, 0);
    rec_batch truth;
    rec_batch_init(&truth, N, DN, F, 2);
    fill_random_bags(&truth, &rng, 1, rows, 3, BAGS_SINGLE, G);
    const char *good = path_in_dir("good_single.rshard"), *bad = path_in_dir("bad_single.rshard");
    CHECK(write_shard(good, &ts.spec, NULL, 1, G, &truth, &rng) == REC_OK, "write: %s", rec_errmsg());
    size_t len = 0;
    uint8_t *img = read_all(good, &len), *copy = malloc(len);
    CHECK(img != NULL, "read back");
    if (!img) return;
    rec_shard *s;
    rec_status st;
    rec_batch b;
    rec_batch_init(&b, N, DN, F, 1);
    for (int64_t g = 0; g < N / G; g++)
        for (int32_t f = 0; f < F; f++)
            CHECK(*entry_flags(dir_entry(img, len, g, F), F, f) == SHARD_FF_SINGLE, "group %lld feature %d not "
                  "flagged single-hot", (long long)g, f);

    /* i32 ids (C2, R = 10): id 10 in group 1 */
    memcpy(copy, img, len);
    int32_t *ids32 = (int32_t *)(void *)group_column(copy, len, 1, DN, F, 1, rows);
    ids32[G - 1] = 10;
    reseal_group(copy, len, 1, F);
    write_all(bad, copy, len);
    st = rec_shard_open(&s, bad);
    CHECK(st == REC_OK, "open: %s", rec_errmsg());
    if (!st) {
        CHECK(rec_shard_read(s, 0, G, &b) == REC_OK && same_rows(&truth, 0, G, &b), "group 0 unreadable");
        st = rec_shard_read(s, G, 2, &b);
        CHECK_ERR(st, REC_EFORMAT, "group 1: feature 'C2': id 10 (position 7)");
        CHECK_ERR(st, REC_EFORMAT, bad);
        rec_shard_close(s);
    }
    /* i32 ids: a negative id */
    memcpy(copy, img, len);
    ids32 = (int32_t *)(void *)group_column(copy, len, 0, DN, F, 2, rows);
    ids32[3] = -5;
    reseal_group(copy, len, 0, F);
    write_all(bad, copy, len);
    st = rec_shard_open(&s, bad);
    if (!st) {
        CHECK_ERR(rec_shard_verify(s), REC_EFORMAT, "group 0: feature 'C3': id -5 (position 3)");
        rec_shard_close(s);
    }
    /* i64 ids (C1, R = 2^40): id 2^40 and id -1 in group 2 */
    for (int k = 0; k < 2; k++) {
        memcpy(copy, img, len);
        int64_t *ids64 = (int64_t *)(void *)group_column(copy, len, 2, DN, F, 0, rows);
        ids64[k] = k ? -1 : (1LL << 40);
        reseal_group(copy, len, 2, F);
        write_all(bad, copy, len);
        st = rec_shard_open(&s, bad);
        CHECK(st == REC_OK, "open: %s", rec_errmsg());
        if (!st) {
            CHECK_ERR(rec_shard_read(s, 2 * G, G, &b), REC_EFORMAT,
                      k ? "group 2: feature 'C1': id -1 (position 1)" : "group 2: feature 'C1': id 1099511627776");
            rec_shard_close(s);
        }
    }
    /* the single-hot flag cleared: the group is too small for offsets */
    memcpy(copy, img, len);
    *entry_flags(dir_entry(copy, len, 1, F), F, 2) = 0;
    reseal_group(copy, len, 1, F);
    write_all(bad, copy, len);
    CHECK_ERR(rec_shard_open(&s, bad), REC_EFORMAT, "group 1 is");
    /* flipped flag bytes without resealing: the footer checksum */
    memcpy(copy, img, len);
    *entry_flags(dir_entry(copy, len, 0, F), F, 0) ^= 1;
    write_all(bad, copy, len);
    CHECK_ERR(rec_shard_open(&s, bad), REC_EFORMAT, "footer checksum mismatch");

    rec_batch_free(&b);
    rec_batch_free(&truth);
    free(img);
    free(copy);
}

/* ---- writer refusals ---------------------------------------------------------------------- */

static void writer_errors(void) {
    int64_t rows[2] = {5, 6};
    test_spec ts;
    make_spec(&ts, "w", 1, 2, rows);
    rec_shard_writer *w = NULL;
    const char *path = path_in_dir("aborted.rshard");
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);

    CHECK(rec_shard_writer_open(&w, path, &ts.spec, NULL, 1, 4) == REC_OK, "open: %s", rec_errmsg());
    CHECK(file_exists(tmp) && !file_exists(path), "PATH.tmp while writing");
    rec_batch b;
    rec_batch_init(&b, 10, 1, 2, 1);
    rec_rng rng;
    rec_rng_seed(&rng, 3, 0);
    fill_random(&b, &rng, 1, rows, 3);
    CHECK(rec_shard_writer_append(w, &b) == REC_OK, "append: %s", rec_errmsg());
    rec_shard_writer_abort(w);
    CHECK(!file_exists(tmp) && !file_exists(path), "abort left a file");

    CHECK(rec_shard_writer_open(&w, path, &ts.spec, NULL, 1, 4) == REC_OK, "open: %s", rec_errmsg());
    rec_batch wrong;
    rec_batch_init(&wrong, 2, 2, 2, 1);
    CHECK_ERR(rec_shard_writer_append(w, &wrong), REC_EINVAL, "the shard's spec has 1 and 2");
    rec_batch_free(&wrong);
    int64_t keep = b.sparse[1].ids64[0];
    b.sparse[1].ids64[0] = 6;
    b.sparse[1].offsets[1] = b.sparse[1].offsets[1] ? b.sparse[1].offsets[1] : 1;
    for (int64_t r = 1; r <= b.n; r++)
        if (b.sparse[1].offsets[r] < b.sparse[1].offsets[r - 1]) b.sparse[1].offsets[r] = b.sparse[1].offsets[r - 1];
    CHECK_ERR(rec_shard_writer_append(w, &b), REC_EINVAL, "feature 'C2' id 6");
    b.sparse[1].ids64[0] = keep;
    rec_shard_writer_abort(w);
    CHECK(!file_exists(tmp), "abort left %s", tmp);

    /* unknown table size */
    ts.table[1].rows = -1;
    CHECK_ERR(rec_shard_writer_open(&w, path, &ts.spec, NULL, 1, 4), REC_EINVAL, "'C2' has table rows -1");
    ts.table[1].rows = 6;
    CHECK(!file_exists(tmp), "refused open left %s", tmp);
    /* a directory that does not exist, a path that is a directory */
    char nodir[600];
    snprintf(nodir, sizeof nodir, "%s/missing/x.rshard", g_dir);
    CHECK_ERR(rec_shard_writer_open(&w, nodir, &ts.spec, NULL, 1, 4), REC_EIO, "missing/x.rshard.tmp: cannot create");
    /* an output that is a directory is refused at open, before any work */
    char dirpath[600], dirtmp[700];
    snprintf(dirpath, sizeof dirpath, "%s/isdir", g_dir);
    mkdir(dirpath, 0755);
    CHECK_ERR(rec_shard_writer_open(&w, dirpath, &ts.spec, NULL, 1, 4), REC_EINVAL,
              "isdir: is a directory; give the path of the file to write");
    /* one made while the shard is written: the rename at close fails with EIO and leaves no .tmp */
    snprintf(dirpath, sizeof dirpath, "%s/laterdir", g_dir);
    CHECK(rec_shard_writer_open(&w, dirpath, &ts.spec, NULL, 1, 4) == REC_OK, "open: %s", rec_errmsg());
    mkdir(dirpath, 0755);
    snprintf(dirtmp, sizeof dirtmp, "%s/f", dirpath);
    write_all(dirtmp, (const uint8_t *)"x", 1);
    CHECK_ERR(rec_shard_writer_close(w), REC_EIO, "cannot rename");
    snprintf(dirtmp, sizeof dirtmp, "%s.tmp", dirpath);
    CHECK(!file_exists(dirtmp), "failed close left %s", dirtmp);
    rec_batch_free(&b);
}

/* ---- statistics --------------------------------------------------------------------------- */

static int cmp_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* ---- batch id widths ------------------------------------------------------------------------ */

static void batch_widths(void) {
    CHECK(!rec_ids_wide(1) && !rec_ids_wide(1LL << 31) && rec_ids_wide((1LL << 31) + 1), "rec_ids_wide's bound");
    rec_batch b;
    CHECK(rec_batch_init(&b, 4, 0, 2, 1) == REC_OK, "init: %s", rec_errmsg());
    CHECK(b.sparse[0].wide && b.sparse[1].wide, "a new batch holds 64-bit ids");
    const int64_t ids[6] = {0, 7, INT32_MAX, 3, 1, 2};
    b.n = 4;
    for (int32_t f = 0; f < 2; f++) {
        CHECK(rec_batch_reserve_nnz(&b, f, 6, 0) == REC_OK, "reserve: %s", rec_errmsg());
        const int64_t off[5] = {0, 2, 2, 5, 6};
        memcpy(b.sparse[f].offsets, off, sizeof off);
        memcpy(b.sparse[f].ids64, ids, sizeof ids);
    }
    /* Narrow and back keeps every id; growing a narrow feature keeps its contents. */
    CHECK(rec_batch_set_wide(&b, 0, 0) == REC_OK, "narrow: %s", rec_errmsg());
    CHECK(!b.sparse[0].wide && rec_jagged_id_bytes(&b.sparse[0]) == 4, "narrowed");
    CHECK(rec_batch_reserve_nnz(&b, 0, 1000, 1) == REC_OK, "grow: %s", rec_errmsg());
    for (int k = 0; k < 6; k++) CHECK(rec_jagged_id(&b.sparse[0], k) == ids[k], "narrow id %d", k);
    CHECK(rec_batch_set_wide(&b, 0, 1) == REC_OK, "widen: %s", rec_errmsg());
    for (int k = 0; k < 6; k++) CHECK(b.sparse[0].ids64[k] == ids[k], "widened id %d", k);
    /* An id that needs 64 bits is refused, naming feature and position; nothing changes. */
    b.sparse[1].ids64[4] = (int64_t)INT32_MAX + 1;
    CHECK_ERR(rec_batch_set_wide(&b, 1, 0), REC_EINVAL, "sparse feature 1, id 2147483648 at position 4 does not fit in 32 bits");
    CHECK(b.sparse[1].wide && b.sparse[1].ids64[4] == (int64_t)INT32_MAX + 1, "a refused narrowing changed the feature");
    b.sparse[1].ids64[4] = -5;
    CHECK(rec_batch_set_wide(&b, 1, 0) == REC_OK, "narrow: %s", rec_errmsg());
    CHECK(rec_jagged_id(&b.sparse[1], 4) == -5, "a negative id survives narrowing (the engine rejects it)");
    /* Corrupt offsets are refused before any id is read. */
    b.sparse[0].offsets[4] = 5000;
    CHECK_ERR(rec_batch_set_wide(&b, 0, 0), REC_EINVAL, "offsets[4] = 5000 ids, outside its");
    int64_t rows[2] = {(1LL << 31) + 1, 10};
    b.sparse[0].offsets[4] = 6;
    CHECK(rec_batch_fit_ids(&b, rows) == REC_OK && b.sparse[0].wide && !b.sparse[1].wide, "fit_ids: %s", rec_errmsg());
    rec_batch_free(&b);
}

static void stats(void) {
    CHECK(rec_crc32(0, "123456789", 9) == 0xCBF43926u, "CRC-32 check value %08x", rec_crc32(0, "123456789", 9));
    CHECK(rec_crc32(rec_crc32(0, "1234", 4), "56789", 5) == 0xCBF43926u, "CRC-32 chaining");
    /* On a pool's threads: pieces of >= 1 MiB combined, equal to one pass, chained too. */
    const size_t big = (5u << 20) + 12345;
    unsigned char *buf = malloc(big);
    rec_pool *pools[3] = {NULL, NULL, NULL};
    rec_pool_init(&pools[1], 2), rec_pool_init(&pools[2], 7);
    if (buf && pools[1] && pools[2]) {
        for (size_t i = 0; i < big; i++) buf[i] = (unsigned char)(i * 2654435761u >> 13);
        int ok = 1;
        const size_t sizes[4] = {big, (2u << 20) + 1, (1u << 20) - 1, 7};
        for (int k = 0; k < 4; k++)
            for (int t = 0; t < 3; t++)
                ok &= rec_crc32_pool(0, buf, sizes[k], pools[t]) == rec_crc32(0, buf, sizes[k]) &&
                      rec_crc32_pool(0x1234567u, buf, sizes[k], pools[t]) == rec_crc32(0x1234567u, buf, sizes[k]);
        CHECK(ok, "CRC-32 on pools of 1, 2 and 7 threads equals one pass, from 0 and chained");
    }
    free(buf), rec_pool_free(pools[1]), rec_pool_free(pools[2]);
    CHECK(rec_skew_top_k(999) == 1 && rec_skew_top_k(1000) == 1 && rec_skew_top_k(2500) == 2 &&
          rec_skew_top_k(10131227) == 10131, "top-k of table sizes");

    /* ids 0..9 drawn 90 times each, ids 10..109 once: the top 10 of 10000 rows take 90% */
    for (int mode = 0; mode < 2; mode++) {
        rec_id_counter *c;
        CHECK(rec_id_counter_init(&c, mode ? 0 : 10000) == REC_OK, "counter init");
        int64_t ids[1000];
        for (int i = 0; i < 900; i++) ids[i] = (i * 7) % 10;
        for (int i = 0; i < 100; i++) ids[900 + i] = 10 + i;
        CHECK(rec_id_counter_add(c, ids, 1000) == REC_OK, "add");
        double share;
        rec_id_counter_top_share(c, rec_skew_top_k(10000), &share);
        CHECK(rec_id_counter_distinct(c) == 110 && rec_id_counter_total(c) == 1000 && share == 0.9,
              "mode %d: distinct %lld total %lld share %g", mode, (long long)rec_id_counter_distinct(c),
              (long long)rec_id_counter_total(c), share);
        rec_id_counter_top_share(c, 110, &share);
        CHECK(share == 1.0, "all ids take everything (%g)", share);
        rec_id_counter_top_share(c, 11, &share);
        CHECK(share == 0.901, "top 11 (%g)", share);
        if (!mode) {
            int64_t out = 10000;
            CHECK_ERR(rec_id_counter_add(c, &out, 1), REC_EINVAL, "outside");
        }
        rec_id_counter_free(c);
    }
    /* quickselect against a full sort on random skewed counts, hash mode with 64-bit ids */
    rec_rng rng;
    rec_rng_seed(&rng, 11, 0);
    for (int trial = 0; trial < 20; trial++) {
        rec_id_counter *c;
        rec_id_counter_init(&c, 0);
        int64_t n = 1 + (int64_t)rec_rng_below(&rng, 20000), distinct = 1 + (int64_t)rec_rng_below(&rng, 3000);
        int64_t *cnt = calloc((size_t)distinct, 8);
        for (int64_t i = 0; i < n; i++) {
            double u = rec_rng_uniform(&rng);
            int64_t k = (int64_t)((double)distinct * u * u * u); /* skewed towards small k */
            int64_t id = (int64_t)rec_mix64((uint64_t)k);          /* arbitrary 64-bit ids */
            cnt[k]++;
            rec_id_counter_add(c, &id, 1);
        }
        qsort(cnt, (size_t)distinct, 8, cmp_desc);
        int64_t seen = 0;
        while (seen < distinct && cnt[seen]) seen++;
        int ok = rec_id_counter_distinct(c) == seen && rec_id_counter_total(c) == n;
        for (int64_t k = 1; k <= seen + 1 && ok; k += 1 + k / 3) {
            int64_t top = 0;
            for (int64_t i = 0; i < k && i < seen; i++) top += cnt[i];
            double share;
            rec_id_counter_top_share(c, k, &share);
            ok = share == (double)top / (double)n;
        }
        CHECK(ok, "trial %d: top shares differ from a full sort", trial);
        free(cnt);
        rec_id_counter_free(c);
    }

    /* pooling factors: nearest-rank quantiles */
    rec_len_hist h = {0};
    int64_t offs[6] = {0, 0, 1, 2, 4, 14}; /* lengths 0 1 1 2 10 */
    CHECK(rec_len_hist_add_offsets(&h, offs, 5) == REC_OK, "hist add");
    rec_len_summary sm = rec_len_hist_summary(&h);
    CHECK(sm.n == 5 && sm.min == 0 && sm.max == 10 && sm.mean == 2.8 && sm.p50 == 1 && sm.p99 == 10,
          "summary n %lld min %lld p50 %lld p99 %lld max %lld mean %g", (long long)sm.n, (long long)sm.min,
          (long long)sm.p50, (long long)sm.p99, (long long)sm.max, sm.mean);
    CHECK(rec_len_hist_add(&h, 3, 995) == REC_OK, "hist add");
    sm = rec_len_hist_summary(&h); /* 1000 lengths: 0, 1, 1, 2, 3 x995, 10 */
    CHECK(sm.p50 == 3 && sm.p99 == 3 && sm.max == 10 && rec_len_hist_quantile(&h, 0.0) == 0 &&
          rec_len_hist_quantile(&h, 1.0) == 10 && rec_len_hist_quantile(&h, 0.003) == 1,
          "after 995 threes: p50 %lld p99 %lld", (long long)sm.p50, (long long)sm.p99);
    CHECK_ERR(rec_len_hist_add(&h, -1, 1), REC_EINVAL, "negative");
    rec_len_hist_free(&h);
    rec_len_summary empty = rec_len_hist_summary(&h);
    CHECK(empty.n == 0 && empty.max == 0 && empty.mean == 0, "empty summary");
}

/* ---- vocabularies for --vocab-from -------------------------------------------------------- */

/* Spec JSON with ' for ": features a (C1) and b (C2) categorified, h (C3) hashed into 10
 * rows; the names of a and b, a's input column and b's min_count vary. */
#define VSPEC(na, a_in, nb, b_min)                                                                            \
    "{'format':'rectrain-prep','version':1,'name':'v','tables':{'TA':{'rows':'auto'},"                \
    "'TB':{'rows':'auto'},'TH':{'rows':10}},'sparse':[{'name':'" na "','input':'" a_in "','table':'TA',"      \
    "'ops':[{'op':'fill_null','value':0},{'op':'categorify','min_count':1}]},{'name':'" nb "','input':'C2',"  \
    "'table':'TB','ops':[{'op':'fill_null','value':0},{'op':'categorify','min_count':" b_min "}]},"           \
    "{'name':'h','input':'C3','table':'TH','ops':[{'op':'fill_null','value':0},{'op':'modulo','divisor':10}]}]}"

static rec_spec *vspec(const char *q) {
    char j[1200];
    snprintf(j, sizeof j, "%s", q);
    for (char *c = j; *c; c++)
        if (*c == '\'') *c = '"';
    rec_spec *s = NULL;
    CHECK(rec_spec_parse(&s, j, strlen(j), "v.json") == REC_OK, "spec: %s", rec_errmsg());
    return s;
}

/* Opens `path` and binds its vocabularies to spec q: REC_OK or the error. */
static rec_status bind_q(const char *path, const char *q) {
    rec_spec *spec = vspec(q);
    rec_shard *sh = NULL;
    rec_status s = spec ? rec_shard_open(&sh, path) : REC_EINVAL;
    if (!s) s = rec_shard_bind_vocabs(sh, spec, "v.json");
    if (!s)
        CHECK(rec_spec_table_rows(spec, 0) == 4 && rec_spec_table_rows(spec, 1) == 3, "bound tables: %lld %lld",
              (long long)rec_spec_table_rows(spec, 0), (long long)rec_spec_table_rows(spec, 1));
    rec_shard_close(sh);
    rec_spec_free(spec);
    return s;
}

/* Writes image img (len bytes) to path with header flags `flags`, the header resealed. */
static void write_with_flags(uint8_t *img, size_t len, const char *path, uint32_t flags) {
    shard_put_u32(img + SHARD_H_FLAGS, flags);
    reseal_header(img);
    write_all(path, img, len);
}

/* Opening path must fail with REC_EFORMAT and `needle`. */
static void refused(const char *path, const char *needle) {
    rec_shard *sh = NULL;
    CHECK_ERR(rec_shard_open(&sh, path), REC_EFORMAT, needle);
    rec_shard_close(sh);
}

/* A shard keeps each vocabulary's signature, and rec_shard_bind_vocabs takes only a spec
 * that counts the same ids in the same slots; a shard without signatures (written before
 * them) falls back to feature names and table rows. */
static void vocab_binding(void) {
    const char *base = VSPEC("a", "C1", "b", "1");
    rec_spec *spec = vspec(base);
    if (!spec) return;
    const int64_t v0[] = {11, 7, 30}, v1[] = {5, 9};
    rec_vocab_set vs = {2, calloc(2, sizeof(rec_vocab *))};
    rec_vocab_from_ids(&vs.v[0], v0, 3);
    rec_vocab_from_ids(&vs.v[1], v1, 2);
    CHECK(rec_spec_bind_vocabs(spec, &vs) == REC_OK, "bind: %s", rec_errmsg());
    const int64_t rows[3] = {4, 3, 10};
    rec_batch b;
    rec_batch_init(&b, 20, 0, 3, 1);
    rec_rng rng;
    rec_rng_seed(&rng, 5, 0);
    fill_random(&b, &rng, 1, rows, 2);
    const char *path = path_in_dir("vocab.rshard");
    CHECK(write_shard(path, spec, &vs, 1, 8, &b, &rng) == REC_OK, "write: %s", rec_errmsg());
    rec_batch_free(&b);
    rec_vocab_set_free(&vs);
    rec_spec_free(spec);

    CHECK(bind_q(path, base) == REC_OK, "the same spec: %s", rec_errmsg());
    CHECK(bind_q(path, VSPEC("x", "C1", "y", "1")) == REC_OK, "features renamed: %s", rec_errmsg());
    CHECK_ERR(bind_q(path, VSPEC("a", "C4", "b", "1")), REC_EINVAL,
              "vocab.rshard: vocabulary 0 was counted by spec 'v' from other raw columns, ops or min_count than spec "
              "v.json categorifies feature 'a' with");
    CHECK_ERR(bind_q(path, VSPEC("a", "C1", "b", "2")), REC_EINVAL, "vocabulary 1 was counted by spec 'v'");
    /* h categorified too: three vocabularies */
#define FNCAT "'ops':[{'op':'fill_null','value':0},{'op':'categorify','min_count':1}]"
    CHECK_ERR(bind_q(path, "{'format':'rectrain-prep','version':1,'name':'v','tables':{'TA':{'rows':'auto'},'TB':"
                           "{'rows':'auto'},'TH':{'rows':'auto'}},'sparse':[{'name':'a','input':'C1','table':'TA',"
                           FNCAT "},{'name':'b','input':'C2','table':'TB'," FNCAT "},{'name':'h','input':'C3',"
                           "'table':'TH'," FNCAT "}]}"),
              REC_EINVAL, "vocab.rshard holds 2 vocabularies but spec v.json needs 3");
#undef FNCAT

    /* The same file without signatures: flag cleared, header resealed. */
    size_t len = 0;
    uint8_t *img = read_all(path, &len);
    const char *old = path_in_dir("vocab_unsigned.rshard");
    if (img) write_with_flags(img, len, old, shard_get_u32(img + SHARD_H_FLAGS) & ~(uint32_t)SHARD_HF_VOCAB_SIGS);
    CHECK(bind_q(old, base) == REC_OK, "unsigned, the same spec: %s", rec_errmsg());
    CHECK(bind_q(old, VSPEC("a", "C4", "b", "1")) == REC_OK, "unsigned: a rewired input goes unseen (%s)",
          rec_errmsg());
    CHECK_ERR(bind_q(old, VSPEC("x", "C1", "b", "1")), REC_EINVAL,
              "vocab_unsigned.rshard was prepped with spec 'v', whose sparse feature 0 is 'a', and in spec v.json it "
              "is 'x'");
    CHECK_ERR(bind_q(old, "{'format':'rectrain-prep','version':1,'name':'v','tables':{'TA':{'rows':'auto'},'TB':"
                          "{'rows':'auto'}},'sparse':[{'name':'a','input':'C1','table':'TA','ops':[{'op':'fill_null',"
                          "'value':0},{'op':'categorify','min_count':1}]},{'name':'b','input':'C2','table':'TB','ops':"
                          "[{'op':'fill_null','value':0},{'op':'categorify','min_count':1}]}]}"),
              REC_EINVAL, "vocab_unsigned.rshard was prepped with spec 'v', which has 3 sparse features, and spec v.json "
                          "has 2");
    /* a categorified 'h' instead of a: the same count and names, the slots shifted */
    const char *moved = "{'format':'rectrain-prep','version':1,'name':'v','tables':{'TA':{'rows':7},'TB':{'rows':'auto'},"
                        "'TH':{'rows':'auto'}},'sparse':[{'name':'a','input':'C1','table':'TA','ops':[{'op':'fill_null',"
                        "'value':0},{'op':'modulo','divisor':7}]},{'name':'b','input':'C2','table':'TB','ops':[{'op':"
                        "'fill_null','value':0},{'op':'categorify','min_count':1}]},{'name':'h','input':'C3','table':"
                        "'TH','ops':[{'op':'fill_null','value':0},{'op':'categorify','min_count':1}]}]}";
    CHECK_ERR(bind_q(old, moved), REC_EINVAL,
              "vocab_unsigned.rshard: feature 'b' had a table of 3 rows when the shard was prepped, and the shard's "
              "vocabularies give it 4");
    /* Flags this build does not know, and signatures that do not fit in the header. */
    if (img) {
        write_with_flags(img, len, old, shard_get_u32(img + SHARD_H_FLAGS) | 4u);
        refused(old, "header flags 0x5 name features this build of rectrain");
    }
    free(img);
    /* 9 empty vocabularies of a hand-built spec that has no categorify: written unsigned;
     * flagged signed, their 72 bytes of signatures are past the header's end. */
    test_spec ts;
    make_spec(&ts, "w", 0, 1, rows);
    rec_vocab_set nine = {9, calloc(9, sizeof(rec_vocab *))};
    for (int k = 0; k < 9; k++) rec_vocab_from_ids(&nine.v[k], v0, 0);
    rec_batch_init(&b, 4, 0, 1, 1);
    fill_random(&b, &rng, 1, rows, 2);
    CHECK(write_shard(old, &ts.spec, &nine, 1, 8, &b, &rng) == REC_OK, "write: %s", rec_errmsg());
    rec_batch_free(&b);
    rec_vocab_set_free(&nine);
    img = read_all(old, &len);
    if (img) {
        CHECK(!(shard_get_u32(img + SHARD_H_FLAGS) & SHARD_HF_VOCAB_SIGS), "a spec without categorify signs nothing");
        write_with_flags(img, len, old, shard_get_u32(img + SHARD_H_FLAGS) | SHARD_HF_VOCAB_SIGS);
        refused(old, "corrupt header: 9 vocabulary signatures do not fit in its");
    }
    free(img);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/rectrain_test_shard_XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        return 1;
    }
    round_trip("several_groups", 3, 4, 100, 7, 1, 1, 1);
    round_trip("one_row_groups", 2, 2, 9, 1, 1, 0, 2);
    round_trip("no_dense", 0, 2, 50, 16, 0, 0, 3);
    round_trip("no_sparse", 5, 0, 33, 10, 1, 1, 4);
    round_trip("no_columns", 0, 0, 20, 6, 0, 0, 5);
    round_trip("exact_groups", 1, 8, 64, 16, 1, 0, 6);
    round_trip("default_groups", 4, 3, 1000, 0, 1, 0, 7);
    round_trip("empty", 3, 2, 0, 5, 1, 1, 8);
    int64_t big[4] = {1LL << 31, (1LL << 31) + 1, 1LL << 40, 3};
    round_trip_bags("single_hot", 2, 4, 100, 16, 1, 0, 9, BAGS_SINGLE, NULL);
    round_trip_bags("single_hot_default", 1, 3, 1000, 0, 1, 1, 10, BAGS_SINGLE, NULL);
    round_trip_bags("mixed", 3, 5, 103, 10, 1, 0, 11, BAGS_MIXED, NULL);
    round_trip_bags("big_tables_multi", 1, 4, 70, 9, 0, 0, 12, BAGS_RANDOM, big);
    round_trip_bags("big_tables_single", 1, 4, 70, 9, 1, 0, 13, BAGS_SINGLE, big);
    round_trip_bags("big_tables_mixed", 2, 4, 70, 9, 1, 0, 14, BAGS_MIXED, big);
    corruption();
    corruption_single();
    writer_errors();
    vocab_binding();
    batch_widths();
    stats();
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", g_dir);
    return check_report();
}
