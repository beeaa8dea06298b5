/* .rshard reader: maps the file read-only and validates it before handing out a single row.
 *
 * Open checks everything that is cheap and global — magic, version, sizes, the header and
 * footer checksums, every directory entry against the file and the format's arithmetic — so
 * that no later pointer computed from the file can leave the mapping. What costs a pass over
 * the data (a group's CRC, and the structure of its jagged columns: offsets non-decreasing
 * from 0 to nnz, ids inside their tables) is checked the first time a group is read, and
 * remembered in a per-group flag; a group that passed is then copied with plain memcpy (a
 * batch's features take the shard's id widths), its offsets rebuilt where they are implied
 * (single-hot).
 * Every refusal is REC_EFORMAT with "PATH: ..." saying what is wrong and, where there is
 * something to do, what. Not thread-safe: the verified flags are written by rec_shard_read.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rectrain/core.h"
#include "rectrain/shard.h"
#include "shard_format.h"

typedef struct shard_group {
    uint64_t off;      /* file offset */
    uint64_t bytes;
    int64_t rows;
    uint32_t crc;
    int verified;      /* 1 once its CRC and structure have been checked */
} shard_group;

struct rec_shard {
    char *path;
    const uint8_t *map;
    uint64_t size;
    uint64_t header_bytes;
    int64_t group_rows;      /* G */
    rec_shard_schema schema;
    rec_vocab_set vocabs;
    int vocab_signed;        /* SHARD_HF_VOCAB_SIGS: vocab_sigs holds one per vocabulary */
    uint64_t *vocab_sigs;    /* (vocabs.n) */
    int64_t rows;            /* N */
    int64_t n_groups;
    shard_group *groups;     /* (n_groups) */
    rec_pool *pool;          /* a group's checksum on its threads (rec_shard_set_pool), or NULL */
    int64_t *row0;           /* (n_groups+1) first row of each group */
    int64_t *nnz;            /* (n_groups, F) */
    uint8_t *flags;          /* (n_groups, F) SHARD_FF_* */
    int64_t *table_rows;     /* (F) R, contiguous for shard_group_bytes */
};

/* Every refusal of the file's content. */
#define BAD(...) rec_errorf(REC_EFORMAT, __VA_ARGS__)

void rec_shard_close(rec_shard *s) {
    if (!s) return;
    if (s->map) munmap((void *)s->map, s->size);
    rec_vocab_set_free(&s->vocabs);
    free(s->vocab_sigs);
    free(s->schema.sparse);
    free(s->groups);
    free(s->row0);
    free(s->nnz);
    free(s->flags);
    free(s->table_rows);
    free(s->path);
    free(s);
}

const rec_shard_schema *rec_shard_get_schema(const rec_shard *s) { return &s->schema; }
int64_t rec_shard_rows(const rec_shard *s) { return s->rows; }
int64_t rec_shard_groups(const rec_shard *s) { return s->n_groups; }
const rec_vocab_set *rec_shard_vocabs(const rec_shard *s) { return &s->vocabs; }

rec_status rec_shard_bind_vocabs(const rec_shard *s, rec_spec *spec, const char *spec_path) {
    const rec_shard_schema *h = &s->schema;
    if (s->vocabs.n != spec->n_vocabs)
        return rec_errorf(REC_EINVAL, "%s holds %d vocabularies but spec %s needs %d; use a shard prepped with "
                          "this spec", s->path, s->vocabs.n, spec_path, spec->n_vocabs);
    if (s->vocab_signed) {
        uint64_t *sigs = calloc((size_t)spec->n_vocabs + 1, sizeof *sigs);
        if (!sigs) return rec_errorf(REC_ENOMEM, "%s: out of memory checking its vocabularies", s->path);
        rec_status st = rec_spec_vocab_sigs(spec, sigs);
        int32_t k = 0;
        while (!st && k < spec->n_vocabs && sigs[k] == s->vocab_sigs[k]) k++;
        free(sigs);
        if (!st && k < spec->n_vocabs)
            st = rec_errorf(REC_EINVAL, "%s: vocabulary %d was counted by spec '%s' from other raw columns, ops or "
                            "min_count than spec %s categorifies feature '%s' with: its indices would stand for "
                            "other ids; use a shard prepped with this spec", s->path, k, h->spec_name, spec_path,
                            rec_spec_vocab_feature(spec, k)->name);
        return st ? st : rec_spec_bind_vocabs(spec, &s->vocabs);
    }
    /* A shard written before vocabularies were signed: the same sparse features in the same
     * order, and each categorified one's table at the rows the shard recorded. */
    if (h->n_sparse != spec->n_sparse)
        return rec_errorf(REC_EINVAL, "%s was prepped with spec '%s', which has %d sparse features, and spec %s has "
                          "%d: its vocabularies belong to that spec; use a shard prepped with this one",
                          s->path, h->spec_name, h->n_sparse, spec_path, spec->n_sparse);
    for (int32_t f = 0; f < spec->n_sparse; f++) {
        const rec_feature *ft = rec_spec_sparse(spec, f);
        if (strncmp(ft->name, h->sparse[f].name, REC_NAME_MAX) != 0)
            return rec_errorf(REC_EINVAL, "%s was prepped with spec '%s', whose sparse feature %d is '%s', and in "
                              "spec %s it is '%s': its vocabularies belong to that spec; use a shard prepped with "
                              "this one", s->path, h->spec_name, f, h->sparse[f].name, spec_path, ft->name);
    }
    REC_TRY(rec_spec_bind_vocabs(spec, &s->vocabs));
    for (int32_t f = 0; f < spec->n_sparse; f++) {
        const rec_feature *ft = rec_spec_sparse(spec, f);
        const int64_t R = rec_spec_table_rows(spec, f);
        if (rec_feature_categorify(ft) && R != h->sparse[f].table_rows)
            return rec_errorf(REC_EINVAL, "%s: feature '%s' had a table of %lld rows when the shard was prepped, "
                              "and the shard's vocabularies give it %lld under spec %s, which so categorifies it "
                              "with another op's vocabulary; use a shard prepped with this spec",
                              s->path, ft->name, (long long)h->sparse[f].table_rows, (long long)R, spec_path);
    }
    return REC_OK;
}

/* Magic, version, header size and CRC, file size. */
static rec_status check_prefix(rec_shard *s) {
    const uint8_t *m = s->map;
    const char *p = s->path;
    if (s->size >= 8 && memcmp(m + SHARD_H_MAGIC, SHARD_MAGIC, 8) != 0)
        return BAD("%s: not a .rshard file (wrong magic bytes; expected \"%s\")", p, SHARD_MAGIC);
    if (s->size < SHARD_MIN_BYTES)
        return BAD("%s: truncated: %llu bytes, less than the smallest possible shard (%d bytes); "
                   "re-run rectrain prep", p, (unsigned long long)s->size, SHARD_MIN_BYTES);
    uint32_t version = shard_get_u32(m + SHARD_H_VERSION);
    if (version != REC_SHARD_VERSION)
        return BAD("%s: .rshard version %u; this build of rectrain reads version %d only "
                   "(re-run rectrain prep with this build, or use a matching rectrain)",
                   p, version, REC_SHARD_VERSION);
    uint64_t hb = shard_get_u64(m + SHARD_H_HEADER_BYTES);
    if (hb % SHARD_ALIGN || hb < shard_pad(SHARD_H_PREFIX + SHARD_B_FIXED))
        return BAD("%s: corrupt header: header size %llu is not a multiple of %d of at least %d",
                   p, (unsigned long long)hb, SHARD_ALIGN, (int)shard_pad(SHARD_H_PREFIX + SHARD_B_FIXED));
    if (hb > s->size - SHARD_F_FIXED - SHARD_TAIL)
        return BAD("%s: truncated: the header alone needs %llu bytes, the file has %llu; "
                   "re-run rectrain prep", p, (unsigned long long)hb, (unsigned long long)s->size);
    uint8_t prefix[SHARD_H_PREFIX];
    memcpy(prefix, m, SHARD_H_PREFIX);
    shard_put_u32(prefix + SHARD_H_CRC, 0);
    uint32_t crc = rec_crc32(0, prefix, SHARD_H_PREFIX);
    crc = rec_crc32(crc, m + SHARD_H_PREFIX, hb - SHARD_H_PREFIX);
    uint32_t want = shard_get_u32(m + SHARD_H_CRC);
    if (crc != want)
        return BAD("%s: header checksum mismatch (stored %08x, computed %08x): the file is corrupt; "
                   "re-run rectrain prep", p, want, crc);
    uint64_t fb = shard_get_u64(m + SHARD_H_FILE_BYTES);
    if (fb != s->size)
        return BAD("%s: truncated: the header says %llu bytes, the file has %llu; re-run rectrain prep",
                   p, (unsigned long long)fb, (unsigned long long)s->size);
    s->header_bytes = hb;
    const uint32_t flags = shard_get_u32(m + SHARD_H_FLAGS);
    if (flags & ~(uint32_t)SHARD_HF_ALL)
        return BAD("%s: header flags %#x name features this build of rectrain does not know (it knows %#x); "
                   "use the rectrain that wrote it, or re-run rectrain prep with this one", p, flags, SHARD_HF_ALL);
    s->schema.has_label = (flags & SHARD_HF_LABEL) != 0;
    s->vocab_signed = (flags & SHARD_HF_VOCAB_SIGS) != 0;
    return REC_OK;
}

/* Schema and vocabularies from the header body; counts are checked against the header size
 * before anything is allocated from them. */
static rec_status parse_body(rec_shard *s) {
    const uint8_t *b = s->map + SHARD_H_PREFIX;
    const char *p = s->path;
    uint64_t avail = s->header_bytes - SHARD_H_PREFIX;
    if (!memchr(b + SHARD_B_SPEC_NAME, 0, REC_NAME_MAX))
        return BAD("%s: corrupt header: the spec name is not NUL-terminated", p);
    memcpy(s->schema.spec_name, b + SHARD_B_SPEC_NAME, REC_NAME_MAX);
    int32_t dn = shard_get_i32(b + SHARD_B_N_DENSE), F = shard_get_i32(b + SHARD_B_N_SPARSE);
    int32_t nv = shard_get_i32(b + SHARD_B_N_VOCABS);
    int64_t G = shard_get_i64(b + SHARD_B_GROUP_ROWS);
    if (dn < 0 || dn > SHARD_MAX_DENSE)
        return BAD("%s: corrupt header: %d dense values per row (allowed 0..%d)", p, dn, SHARD_MAX_DENSE);
    if (F < 0 || F > SHARD_MAX_SPARSE)
        return BAD("%s: corrupt header: %d sparse features (allowed 0..%d)", p, F, SHARD_MAX_SPARSE);
    if (G < 1 || G > SHARD_MAX_GROUP_ROWS)
        return BAD("%s: corrupt header: %lld rows per group (allowed 1..%lld)", p, (long long)G,
                   (long long)SHARD_MAX_GROUP_ROWS);
    if (nv < 0 || SHARD_B_FIXED + (uint64_t)SHARD_FEATURE_BYTES * (uint64_t)F + 8 * (uint64_t)nv > avail)
        return BAD("%s: corrupt header: %d features and %d vocabularies do not fit in its %llu bytes",
                   p, F, nv, (unsigned long long)s->header_bytes);
    s->schema.n_dense = dn;
    s->group_rows = G;
    s->schema.sparse = calloc((size_t)F + 1, sizeof *s->schema.sparse);
    if (!s->schema.sparse) return rec_errorf(REC_ENOMEM, "%s: out of memory for the schema", p);
    s->table_rows = calloc((size_t)F + 1, sizeof *s->table_rows);
    if (!s->table_rows) return rec_errorf(REC_ENOMEM, "%s: out of memory for the schema", p);
    s->schema.n_sparse = F;
    const uint8_t *e = b + SHARD_B_FIXED;
    for (int32_t f = 0; f < F; f++, e += SHARD_FEATURE_BYTES) {
        rec_shard_feature *sf = &s->schema.sparse[f];
        if (!memchr(e, 0, REC_NAME_MAX))
            return BAD("%s: corrupt header: the name of sparse feature %d is not NUL-terminated", p, f);
        memcpy(sf->name, e, REC_NAME_MAX);
        sf->table_rows = shard_get_i64(e + REC_NAME_MAX);
        if (sf->table_rows < 1)
            return BAD("%s: corrupt header: sparse feature '%s' has %lld table rows", p, sf->name,
                       (long long)sf->table_rows);
        s->table_rows[f] = sf->table_rows;
    }
    const uint8_t *sizes = e;
    uint64_t left = avail - (uint64_t)(sizes - b) - 8 * (uint64_t)nv;
    if (s->vocab_signed && left / 8 < (uint64_t)nv)
        return BAD("%s: corrupt header: %d vocabulary signatures do not fit in its %llu bytes", p, nv,
                   (unsigned long long)s->header_bytes);
    if (s->vocab_signed) left -= 8 * (uint64_t)nv;
    for (int32_t i = 0; i < nv; i++) {
        int64_t v = shard_get_i64(sizes + 8 * (size_t)i);
        if (v < 0 || (uint64_t)v > left / 8)
            return BAD("%s: corrupt header: vocabulary %d claims %lld ids, more than the header holds",
                       p, i, (long long)v);
        left -= 8 * (uint64_t)v;
    }
    s->vocabs.v = calloc((size_t)nv + 1, sizeof *s->vocabs.v);
    if (!s->vocabs.v) return rec_errorf(REC_ENOMEM, "%s: out of memory for the vocabularies", p);
    const uint8_t *ids = sizes + 8 * (size_t)nv;
    for (int32_t i = 0; i < nv; i++) {
        int64_t v = shard_get_i64(sizes + 8 * (size_t)i);
        /* ids are 8-aligned: header body offsets are all multiples of 8 */
        rec_status st = rec_vocab_from_ids(&s->vocabs.v[i], (const int64_t *)(const void *)ids, v);
        if (st) return rec_error_wrap(st, "%s: vocabulary %d", p, i);
        s->vocabs.n = i + 1;
        ids += 8 * (size_t)v;
    }
    if (s->vocab_signed) {
        s->vocab_sigs = calloc((size_t)nv + 1, sizeof *s->vocab_sigs);
        if (!s->vocab_sigs) return rec_errorf(REC_ENOMEM, "%s: out of memory for the vocabularies", p);
        for (int32_t i = 0; i < nv; i++) s->vocab_sigs[i] = shard_get_u64(ids + 8 * (size_t)i);
    }
    return REC_OK;
}

/* Tail, footer checksum, and the group directory. */
static rec_status parse_footer(rec_shard *s) {
    const uint8_t *m = s->map;
    const char *p = s->path;
    const uint8_t *tail = m + s->size - SHARD_TAIL;
    if (memcmp(tail + SHARD_T_MAGIC, SHARD_END_MAGIC, 8) != 0)
        return BAD("%s: corrupt or truncated: the end marker \"%s\" is missing; re-run rectrain prep",
                   p, SHARD_END_MAGIC);
    if (shard_get_u32(tail + SHARD_T_FOOTER_CRC + 4) != 0)
        return BAD("%s: corrupt tail: its reserved bytes are not zero; re-run rectrain prep", p);
    uint64_t fo = shard_get_u64(tail + SHARD_T_FOOTER_OFF);
    if (fo != shard_get_u64(m + SHARD_H_FOOTER_OFF) || fo % SHARD_ALIGN || fo < s->header_bytes ||
        fo > s->size - SHARD_TAIL - SHARD_F_FIXED)
        return BAD("%s: corrupt footer: its offset %llu does not fit the file (%llu bytes, header says %llu)",
                   p, (unsigned long long)fo, (unsigned long long)s->size,
                   (unsigned long long)shard_get_u64(m + SHARD_H_FOOTER_OFF));
    const uint8_t *ft = m + fo;
    uint64_t fbytes = s->size - SHARD_TAIL - fo;
    uint32_t crc = rec_crc32(0, ft, fbytes), want = shard_get_u32(tail + SHARD_T_FOOTER_CRC);
    if (crc != want)
        return BAD("%s: footer checksum mismatch (stored %08x, computed %08x): the file is corrupt; "
                   "re-run rectrain prep", p, want, crc);
    uint64_t ng = shard_get_u64(ft + SHARD_F_N_GROUPS);
    int64_t rows = shard_get_i64(ft + SHARD_F_ROWS);
    int32_t F = shard_get_i32(ft + SHARD_F_N_SPARSE);
    uint32_t eb = shard_get_u32(ft + SHARD_F_ENTRY_BYTES);
    if (F != s->schema.n_sparse || eb != shard_entry_bytes(F))
        return BAD("%s: corrupt footer: %d sparse features with %u-byte entries, header says %d features",
                   p, F, eb, s->schema.n_sparse);
    if (ng > (fbytes - SHARD_F_FIXED) / eb || SHARD_F_FIXED + ng * eb != fbytes)
        return BAD("%s: corrupt footer: %llu groups do not match its %llu bytes", p,
                   (unsigned long long)ng, (unsigned long long)fbytes);
    if (rows < 0) return BAD("%s: corrupt footer: %lld rows", p, (long long)rows);
    s->n_groups = (int64_t)ng;
    s->groups = calloc(ng + 1, sizeof *s->groups);
    s->row0 = calloc(ng + 1, sizeof *s->row0);
    s->nnz = calloc(ng * (uint64_t)F + 1, sizeof *s->nnz);
    s->flags = calloc(ng * (uint64_t)F + 1, sizeof *s->flags);
    if (!s->groups || !s->row0 || !s->nnz || !s->flags)
        return rec_errorf(REC_ENOMEM, "%s: out of memory for the group directory (%llu groups)", p,
                          (unsigned long long)ng);
    uint64_t end = s->header_bytes;
    int64_t total = 0;
    const uint8_t *e = ft + SHARD_F_FIXED;
    for (uint64_t g = 0; g < ng; g++, e += eb) {
        shard_group *gr = &s->groups[g];
        gr->off = shard_get_u64(e + SHARD_E_OFFSET);
        gr->bytes = shard_get_u64(e + SHARD_E_BYTES);
        gr->rows = shard_get_i64(e + SHARD_E_ROWS);
        gr->crc = shard_get_u32(e + SHARD_E_CRC);
        int64_t *nnz = s->nnz + g * (uint64_t)F;
        uint8_t *flags = s->flags + g * (uint64_t)F;
        if (gr->rows < 1 || gr->rows > s->group_rows)
            return BAD("%s: corrupt footer: group %llu has %lld rows (allowed 1..%lld)", p,
                       (unsigned long long)g, (long long)gr->rows, (long long)s->group_rows);
        if (gr->off % SHARD_ALIGN || gr->off < end || gr->off > fo || gr->bytes > fo - gr->off)
            return BAD("%s: corrupt footer: group %llu at [%llu, +%llu) is misaligned, overlaps the "
                       "previous section or leaves the data area [%llu, %llu)", p, (unsigned long long)g,
                       (unsigned long long)gr->off, (unsigned long long)gr->bytes,
                       (unsigned long long)s->header_bytes, (unsigned long long)fo);
        const uint8_t *ef = e + SHARD_E_NNZ + 8 * (size_t)F;
        for (int32_t f = 0; f < F; f++) {
            const char *name = s->schema.sparse[f].name;
            nnz[f] = shard_get_i64(e + SHARD_E_NNZ + 8 * (size_t)f);
            flags[f] = ef[f];
            if (nnz[f] < 0 || (uint64_t)nnz[f] > gr->bytes / shard_id_bytes(s->table_rows[f]))
                return BAD("%s: corrupt footer: group %llu feature '%s' claims %lld ids", p,
                           (unsigned long long)g, name, (long long)nnz[f]);
            if (flags[f] & ~SHARD_FF_ALL)
                return BAD("%s: corrupt footer: group %llu feature '%s' has unknown flags 0x%02x", p,
                           (unsigned long long)g, name, flags[f]);
            if ((flags[f] & SHARD_FF_SINGLE) && nnz[f] != gr->rows)
                return BAD("%s: corrupt footer: group %llu feature '%s' is flagged one id per row but "
                           "has %lld ids in %lld rows", p, (unsigned long long)g, name,
                           (long long)nnz[f], (long long)gr->rows);
        }
        for (uint64_t k = (uint64_t)F; k < eb - SHARD_E_NNZ - 8 * (uint64_t)F; k++)
            if (ef[k] != 0)
                return BAD("%s: corrupt footer: group %llu: padding after the feature flags is not zero",
                           p, (unsigned long long)g);
        /* rows <= 2^30, Dn <= 2^20, F <= 2^16, id bytes * nnz <= size: the sum cannot overflow */
        uint64_t want_bytes = shard_group_bytes((uint64_t)gr->rows, (uint64_t)s->schema.n_dense, F,
                                                s->table_rows, nnz, flags);
        if (gr->bytes != want_bytes)
            return BAD("%s: corrupt footer: group %llu is %llu bytes, its rows and ids need %llu", p,
                       (unsigned long long)g, (unsigned long long)gr->bytes, (unsigned long long)want_bytes);
        end = gr->off + gr->bytes;
        s->row0[g] = total;
        total += gr->rows;
    }
    s->row0[ng] = total;
    if (total != rows)
        return BAD("%s: corrupt footer: it says %lld rows, its groups hold %lld", p, (long long)rows,
                   (long long)total);
    s->rows = rows;
    return REC_OK;
}

rec_status rec_shard_open(rec_shard **out, const char *path) {
    *out = NULL;
    rec_shard *s = calloc(1, sizeof *s);
    if (!s) return rec_errorf(REC_ENOMEM, "%s: out of memory", path);
    s->path = strdup(path);
    if (!s->path) {
        free(s);
        return rec_errorf(REC_ENOMEM, "%s: out of memory", path);
    }
    rec_status st = REC_OK;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat sb;
    if (fd < 0) {
        st = rec_errorf(REC_EIO, "%s: cannot open: %s", path, strerror(errno));
    } else if (fstat(fd, &sb) != 0) {
        st = rec_errorf(REC_EIO, "%s: cannot stat: %s", path, strerror(errno));
    } else if (!S_ISREG(sb.st_mode)) {
        st = rec_errorf(REC_EINVAL, "%s: not a regular file", path);
    } else if (sb.st_size == 0) {
        st = BAD("%s: empty file, not a .rshard; re-run rectrain prep", path);
    } else {
        s->size = (uint64_t)sb.st_size;
        void *m = mmap(NULL, s->size, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) st = rec_errorf(REC_EIO, "%s: cannot map: %s", path, strerror(errno));
        else s->map = m;
    }
    if (fd >= 0) close(fd);
    if (!st) st = check_prefix(s);
    if (!st) st = parse_body(s);
    if (!st) st = parse_footer(s);
    if (st) {
        rec_shard_close(s);
        return st;
    }
    *out = s;
    return REC_OK;
}

/* Sparse feature f of group g inside the mapping: its offsets (n+1), NULL where the feature is
 * single-hot in the group (offsets[r] = r), and its ids (nnz), i32 or i64 as ids32 says.
 * Sections are 64-byte aligned in a page-aligned mapping. */
typedef struct shard_column {
    const int64_t *off;    /* (n+1) or NULL */
    const void *ids;       /* (nnz) */
    int ids32;             /* 1: ids are int32_t, 0: int64_t */
} shard_column;

static shard_column group_feature(const rec_shard *s, int64_t g, int32_t f) {
    const shard_group *gr = &s->groups[g];
    uint64_t n = (uint64_t)gr->rows;
    uint64_t o = gr->off + shard_pad(4 * n) + shard_pad(4 * n * (uint64_t)s->schema.n_dense);
    const int64_t *nnz = s->nnz + g * s->schema.n_sparse;
    const uint8_t *flags = s->flags + g * s->schema.n_sparse;
    for (int32_t k = 0; k < f; k++)
        o += shard_feature_bytes(n, flags[k], shard_id_bytes(s->table_rows[k]), (uint64_t)nnz[k]);
    shard_column c;
    c.off = (flags[f] & SHARD_FF_SINGLE) ? NULL : (const int64_t *)(const void *)(s->map + o);
    if (c.off) o += shard_pad(8 * (n + 1));
    c.ids = s->map + o;
    c.ids32 = shard_id_bytes(s->table_rows[f]) == 4;
    return c;
}

/* Position of the first id in [0, R), or -1 when all are inside; i32 ids widen first. */
static int64_t first_outside(const shard_column *c, int64_t nnz, int64_t R) {
    int bad = 0;
    if (c->ids32) {
        const int32_t *ids = c->ids;
        for (int64_t k = 0; k < nnz; k++) bad |= (uint64_t)(int64_t)ids[k] >= (uint64_t)R;
        if (bad)
            for (int64_t k = 0; k < nnz; k++)
                if ((uint64_t)(int64_t)ids[k] >= (uint64_t)R) return k;
    } else {
        const int64_t *ids = c->ids;
        for (int64_t k = 0; k < nnz; k++) bad |= (uint64_t)ids[k] >= (uint64_t)R;
        if (bad)
            for (int64_t k = 0; k < nnz; k++)
                if ((uint64_t)ids[k] >= (uint64_t)R) return k;
    }
    return -1;
}

/* CRC and structure of group g: offsets from 0, non-decreasing, ending at the directory's nnz;
 * every id inside its table. */
static rec_status check_group(rec_shard *s, int64_t g) {
    const shard_group *gr = &s->groups[g];
    uint32_t crc = rec_crc32_pool(0, s->map + gr->off, gr->bytes, s->pool);
    if (crc != gr->crc)
        return BAD("%s: group %lld: checksum mismatch (stored %08x, computed %08x): the file is "
                   "corrupt; re-run rectrain prep", s->path, (long long)g, gr->crc, crc);
    int64_t n = gr->rows;
    for (int32_t f = 0; f < s->schema.n_sparse; f++) {
        shard_column c = group_feature(s, g, f);
        const int64_t *off = c.off;
        const char *name = s->schema.sparse[f].name;
        int64_t nnz = s->nnz[g * s->schema.n_sparse + f], R = s->schema.sparse[f].table_rows;
        if (off && off[0] != 0)
            return BAD("%s: group %lld: feature '%s': offsets start at %lld, not 0", s->path,
                       (long long)g, name, (long long)off[0]);
        for (int64_t r = 0; off && r < n; r++)
            if (off[r + 1] < off[r])
                return BAD("%s: group %lld: feature '%s' row %lld: offsets decrease (%lld then %lld)",
                           s->path, (long long)g, name, (long long)r, (long long)off[r],
                           (long long)off[r + 1]);
        if (off && off[n] != nnz)
            return BAD("%s: group %lld: feature '%s': offsets end at %lld, the directory says %lld ids",
                       s->path, (long long)g, name, (long long)off[n], (long long)nnz);
        /* without offsets, nnz == n was checked on open */
        int64_t k = first_outside(&c, nnz, R);
        if (k >= 0) {
            int64_t id = c.ids32 ? ((const int32_t *)c.ids)[k] : ((const int64_t *)c.ids)[k];
            return BAD("%s: group %lld: feature '%s': id %lld (position %lld) is outside its "
                       "table's [0, %lld) rows", s->path, (long long)g, name, (long long)id,
                       (long long)k, (long long)R);
        }
    }
    s->groups[g].verified = 1;
    return REC_OK;
}

void rec_shard_set_pool(rec_shard *s, rec_pool *pool) { s->pool = pool; }

rec_status rec_shard_verify(rec_shard *s) {
    for (int64_t g = 0; g < s->n_groups; g++) REC_TRY(check_group(s, g));
    return REC_OK;
}

/* Index of the group holding row r (0 <= r < rows): binary search over the first rows. */
static int64_t find_group(const rec_shard *s, int64_t r) {
    int64_t lo = 0, hi = s->n_groups - 1;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (s->row0[mid] <= r) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

int rec_shard_single(const rec_shard *s, int32_t f, int64_t row0, int64_t n) {
    if (f < 0 || f >= s->schema.n_sparse || row0 < 0 || n < 1 || row0 > s->rows || n > s->rows - row0) return 0;
    for (int64_t g = find_group(s, row0); g < s->n_groups && s->row0[g] < row0 + n; g++)
        if (!(s->flags[g * s->schema.n_sparse + f] & SHARD_FF_SINGLE)) return 0;
    return 1;
}

rec_status rec_shard_check_rows(rec_shard *s, int64_t row0, int64_t n) {
    if (row0 < 0 || n < 0 || row0 > s->rows || n > s->rows - row0)
        return rec_errorf(REC_EINVAL, "%s: rows [%lld, %lld) requested; the shard has %lld rows", s->path,
                          (long long)row0, (long long)row0 + (long long)n, (long long)s->rows);
    for (int64_t g = n ? find_group(s, row0) : 0; n && g < s->n_groups && s->row0[g] < row0 + n; g++)
        if (!s->groups[g].verified) REC_TRY(check_group(s, g));
    return REC_OK;
}

rec_status rec_shard_read(rec_shard *s, int64_t row0, int64_t n, rec_batch *b) {
    const rec_shard_schema *sc = &s->schema;
    if (b->n_dense != sc->n_dense || b->n_sparse != sc->n_sparse)
        return rec_errorf(REC_EINVAL, "%s: batch has %d dense values and %d sparse features per row; "
                          "the shard has %d and %d", s->path, b->n_dense, b->n_sparse, sc->n_dense,
                          sc->n_sparse);
    if (row0 < 0 || n < 0 || row0 > s->rows || n > s->rows - row0)
        return rec_errorf(REC_EINVAL, "%s: rows [%lld, %lld) requested; the shard has %lld rows", s->path,
                          (long long)row0, (long long)row0 + (long long)n, (long long)s->rows);
    if (n > b->cap)
        return rec_errorf(REC_EINVAL, "%s: %lld rows requested into a batch with room for %lld", s->path,
                          (long long)n, (long long)b->cap);
    int32_t dn = sc->n_dense, F = sc->n_sparse;
    b->n = 0;
    for (int32_t f = 0; f < F; f++) {
        b->sparse[f].offsets[0] = 0;
        REC_TRY(rec_batch_set_wide(b, f, rec_ids_wide(sc->sparse[f].table_rows)));
    }
    int64_t g = n ? find_group(s, row0) : 0, done = 0;
    while (done < n) {
        REC_TRY(s->groups[g].verified ? REC_OK : check_group(s, g));
        const shard_group *gr = &s->groups[g];
        int64_t r = row0 + done - s->row0[g];          /* first row within the group */
        int64_t k = gr->rows - r < n - done ? gr->rows - r : n - done;
        uint64_t nr = (uint64_t)gr->rows;
        const float *label = (const float *)(const void *)(s->map + gr->off);
        const float *dense = (const float *)(const void *)(s->map + gr->off + shard_pad(4 * nr));
        memcpy(b->label + done, label + r, 4 * (size_t)k);
        memcpy(b->dense + done * dn, dense + r * dn, 4 * (size_t)k * (size_t)dn);
        for (int32_t f = 0; f < F; f++) {
            shard_column c = group_feature(s, g, f);
            const int64_t *off = c.off;
            rec_jagged *j = &b->sparse[f];
            int64_t first = off ? off[r] : r, add = off ? off[r + k] - off[r] : k;
            int64_t have = j->offsets[done], base = have - first;
            REC_TRY(rec_batch_reserve_nnz(b, f, have + add, 0));
            if (off)
                for (int64_t i = 1; i <= k; i++) j->offsets[done + i] = off[r + i] + base;
            else
                for (int64_t i = 1; i <= k; i++) j->offsets[done + i] = have + i;
            const size_t w = (size_t)rec_jagged_id_bytes(j); /* the stored width (set above) */
            memcpy((char *)j->ids + (size_t)have * w, (const char *)c.ids + (size_t)first * w, w * (size_t)add);
            if (j->weights)
                for (int64_t i = have; i < have + add; i++) j->weights[i] = 1.0f;
        }
        done += k;
        g++;
    }
    b->n = n;
    return REC_OK;
}
