/* .rshard writer: streams batches into columnar row groups behind a checksummed header and in
 * front of a checksummed group directory (layout: include/rectrain/shard.h and
 * src/io/shard_format.h).
 *
 * The file is written to PATH.tmp through one output buffer that also keeps a running CRC, so
 * every byte is checksummed exactly once as it leaves. Rows are gathered in a group buffer of
 * up to G rows; a full group is written at once as label | dense | (offsets | ids) per
 * feature, the offsets left out where every row of the group has exactly one id, the ids
 * narrowed to i32 (through a small fixed buffer) where the feature's table allows. The header's file size and footer offset are only known at close: the header is
 * written first with zeros there, and close patches the 64-byte prefix and computes the header
 * CRC as crc32_combine(CRC(prefix), CRC(body), body bytes) — the body's CRC was taken when
 * it was written, so the (possibly large) vocabularies need not be kept in memory. Then fsync
 * and rename (rec_atomic_file): PATH either does not exist or holds a complete shard.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "rectrain/core.h"
#include "rectrain/shard.h"
#include "shard_format.h"

enum { SHARD_WBUF = 1 << 20, SHARD_DEFAULT_GROUP_ROWS = 65536, SHARD_NARROW = 16384 };

struct rec_shard_writer {
    char *path;               /* final name, for messages */
    rec_atomic_file file;     /* PATH.tmp, written until close commits it */
    int has_label;
    int32_t n_dense;          /* Dn */
    int32_t n_sparse;         /* F */
    int64_t group_rows;       /* G */
    int64_t *table_rows;      /* (F) R per feature, for validating appended ids */
    char (*names)[REC_NAME_MAX]; /* (F) feature names, for messages */

    uint8_t prefix[SHARD_H_PREFIX]; /* header prefix, patched at close */
    uint64_t header_bytes;
    uint32_t body_crc;        /* CRC of [64, header_bytes) */

    uint8_t *buf;             /* (SHARD_WBUF) output buffer */
    size_t buf_len;
    uint64_t pos;             /* bytes handed to the buffer so far = file offset */
    uint32_t crc;             /* running CRC of the current section */
    int32_t narrow[SHARD_NARROW]; /* ids on their way out as i32 */

    /* the group being gathered */
    int64_t n;                /* rows in it */
    int64_t cap;              /* rows allocated, <= G */
    float *label;             /* (cap) */
    float *dense;             /* (cap, Dn) */
    int64_t **offs;           /* (F) each (cap+1), offs[f][0] == 0 */
    int64_t **ids;            /* (F) each (ids_cap[f]) */
    int64_t *ids_cap;         /* (F) */

    uint8_t *dir;             /* directory entries written so far */
    size_t dir_len, dir_cap;
    uint64_t n_groups;
    int64_t rows;             /* rows in all flushed groups */
};

static rec_status w_io_error(const rec_shard_writer *w, const char *what) {
    return rec_errorf(REC_EIO, "%s: %s failed: %s; check free disk space and permissions",
                      w->file.tmp, what, strerror(errno));
}

static rec_status w_write_fd(rec_shard_writer *w, const uint8_t *p, size_t n) {
    return rec_write_full(w->file.fd, p, n) ? REC_OK : w_io_error(w, "write");
}

static rec_status w_flush(rec_shard_writer *w) {
    rec_status s = w_write_fd(w, w->buf, w->buf_len);
    w->buf_len = 0;
    return s;
}

/* Appends n bytes to the file through the buffer, adding them to the running CRC. */
static rec_status w_put(rec_shard_writer *w, const void *p, size_t n) {
    if (n == 0) return REC_OK;
    w->crc = rec_crc32(w->crc, p, n);
    w->pos += n;
    if (w->buf_len + n <= SHARD_WBUF) {
        memcpy(w->buf + w->buf_len, p, n);
        w->buf_len += n;
        return REC_OK;
    }
    REC_TRY(w_flush(w));
    if (n >= SHARD_WBUF) return w_write_fd(w, p, n);
    memcpy(w->buf, p, n);
    w->buf_len = n;
    return REC_OK;
}

/* Pads the file with zeros to the next multiple of 64 bytes. */
static rec_status w_pad(rec_shard_writer *w) {
    static const uint8_t zeros[SHARD_ALIGN];
    size_t k = (size_t)(shard_pad(w->pos) - w->pos);
    return k ? w_put(w, zeros, k) : REC_OK;
}

static void w_free(rec_shard_writer *w) {
    if (!w) return;
    rec_atomic_abort(&w->file); /* nothing left to do after a commit */
    for (int32_t f = 0; f < w->n_sparse; f++) {
        if (w->offs) rec_free(w->offs[f]);
        if (w->ids) rec_free(w->ids[f]);
    }
    free(w->offs);
    free(w->ids);
    free(w->ids_cap);
    free(w->table_rows);
    free(w->names);
    rec_free(w->label);
    rec_free(w->dense);
    rec_free(w->buf);
    free(w->dir);
    free(w->path);
    free(w);
}

void rec_shard_writer_abort(rec_shard_writer *w) {
    if (!w) return;
    w_free(w); /* removes PATH.tmp */
}

/* Checks the spec and vocabularies and fills the writer's schema fields. */
static rec_status w_schema(rec_shard_writer *w, const rec_spec *spec, const rec_vocab_set *vocabs) {
    if (spec->n_dense < 0 || spec->n_dense > SHARD_MAX_DENSE)
        return rec_errorf(REC_EINVAL, "%s: spec '%s' has %d dense values per row; a shard holds 0..%d",
                          w->path, spec->name, spec->n_dense, SHARD_MAX_DENSE);
    if (spec->n_sparse < 0 || spec->n_sparse > SHARD_MAX_SPARSE)
        return rec_errorf(REC_EINVAL, "%s: spec '%s' has %d sparse features; a shard holds 0..%d",
                          w->path, spec->name, spec->n_sparse, SHARD_MAX_SPARSE);
    if (memchr(spec->name, 0, REC_NAME_MAX) == NULL)
        return rec_errorf(REC_EINVAL, "%s: spec name is not NUL-terminated within %d bytes", w->path,
                          REC_NAME_MAX);
    w->n_dense = spec->n_dense;
    int32_t F = spec->n_sparse;
    w->table_rows = calloc((size_t)F + 1, sizeof *w->table_rows);
    w->names = calloc((size_t)F + 1, sizeof *w->names);
    w->offs = calloc((size_t)F + 1, sizeof *w->offs);
    w->ids = calloc((size_t)F + 1, sizeof *w->ids);
    w->ids_cap = calloc((size_t)F + 1, sizeof *w->ids_cap);
    if (!w->table_rows || !w->names || !w->offs || !w->ids || !w->ids_cap)
        return rec_errorf(REC_ENOMEM, "%s: out of memory for the shard writer", w->path);
    w->n_sparse = F; /* arrays exist: w_free may now walk them */
    for (int32_t f = 0; f < F; f++) {
        const rec_feature *ft = rec_spec_sparse(spec, f);
        if (!ft)
            return rec_errorf(REC_EINVAL, "%s: spec '%s' has no sparse feature with index %d",
                              w->path, spec->name, f);
        snprintf(w->names[f], REC_NAME_MAX, "%s", ft->name);
        int64_t R = rec_spec_table_rows(spec, f);
        if (R <= 0)
            return rec_errorf(REC_EINVAL,
                              "%s: sparse feature '%s' has table rows %lld; a shard needs every table "
                              "size known (bind the vocabularies with rec_spec_bind_vocabs first)",
                              w->path, w->names[f], (long long)R);
        w->table_rows[f] = R;
    }
    if (vocabs) {
        if (vocabs->n < 0 || (vocabs->n > 0 && !vocabs->v))
            return rec_errorf(REC_EINVAL, "%s: bad vocabulary set (%d vocabularies)", w->path, vocabs->n);
        for (int32_t i = 0; i < vocabs->n; i++)
            if (!vocabs->v[i])
                return rec_errorf(REC_EINVAL, "%s: vocabulary %d of %d is missing", w->path, i, vocabs->n);
    }
    return REC_OK;
}

/* Writes the header with file_bytes, footer_off and CRC still zero (patched at close). */
static rec_status w_header(rec_shard_writer *w, const rec_spec *spec, const rec_vocab_set *vocabs) {
    int32_t nv = vocabs ? vocabs->n : 0;
    const int signed_ = nv > 0 && nv == spec->n_vocabs; /* the spec says what each one counts */
    memcpy(w->prefix + SHARD_H_MAGIC, SHARD_MAGIC, 8);
    shard_put_u32(w->prefix + SHARD_H_VERSION, REC_SHARD_VERSION);
    shard_put_u32(w->prefix + SHARD_H_FLAGS, (w->has_label ? SHARD_HF_LABEL : 0u) | (signed_ ? SHARD_HF_VOCAB_SIGS : 0u));
    uint64_t body = SHARD_B_FIXED + (uint64_t)SHARD_FEATURE_BYTES * (uint64_t)w->n_sparse + 8 * (uint64_t)nv;
    if (signed_) body += 8 * (uint64_t)nv;
    for (int32_t i = 0; i < nv; i++) body += 8 * (uint64_t)rec_vocab_size(vocabs->v[i]);
    w->header_bytes = shard_pad(SHARD_H_PREFIX + body);
    shard_put_u64(w->prefix + SHARD_H_HEADER_BYTES, w->header_bytes);
    REC_TRY(w_put(w, w->prefix, SHARD_H_PREFIX));

    w->crc = 0;
    uint8_t fixed[SHARD_B_FIXED] = {0};
    snprintf((char *)fixed + SHARD_B_SPEC_NAME, REC_NAME_MAX, "%s", spec->name);
    shard_put_u32(fixed + SHARD_B_N_DENSE, (uint32_t)w->n_dense);
    shard_put_u32(fixed + SHARD_B_N_SPARSE, (uint32_t)w->n_sparse);
    shard_put_u32(fixed + SHARD_B_N_VOCABS, (uint32_t)nv);
    shard_put_u64(fixed + SHARD_B_GROUP_ROWS, (uint64_t)w->group_rows);
    REC_TRY(w_put(w, fixed, sizeof fixed));
    for (int32_t f = 0; f < w->n_sparse; f++) {
        uint8_t e[SHARD_FEATURE_BYTES] = {0};
        memcpy(e, w->names[f], strnlen(w->names[f], REC_NAME_MAX - 1));
        shard_put_u64(e + REC_NAME_MAX, (uint64_t)w->table_rows[f]);
        REC_TRY(w_put(w, e, sizeof e));
    }
    for (int32_t i = 0; i < nv; i++) {
        uint8_t e[8];
        shard_put_u64(e, (uint64_t)rec_vocab_size(vocabs->v[i]));
        REC_TRY(w_put(w, e, 8));
    }
    for (int32_t i = 0; i < nv; i++)
        REC_TRY(w_put(w, rec_vocab_ids(vocabs->v[i]), 8 * (size_t)rec_vocab_size(vocabs->v[i])));
    if (signed_) {
        uint64_t *sigs = calloc((size_t)nv + 1, sizeof *sigs);
        if (!sigs) return rec_errorf(REC_ENOMEM, "%s: out of memory signing the vocabularies", w->path);
        rec_status s = rec_spec_vocab_sigs(spec, sigs);
        if (!s) s = w_put(w, sigs, 8 * (size_t)nv); /* host order is the format's (shard_format.h) */
        free(sigs);
        REC_TRY(s);
    }
    REC_TRY(w_pad(w));
    w->body_crc = w->crc;
    return REC_OK;
}

rec_status rec_shard_writer_open(rec_shard_writer **out, const char *path,
                                 const rec_spec *spec, const rec_vocab_set *vocabs,
                                 int has_label, int64_t group_rows) {
    *out = NULL;
    if (!path || !spec) return rec_errorf(REC_EINVAL, "shard writer: path and spec are required");
    if (group_rows <= 0) group_rows = SHARD_DEFAULT_GROUP_ROWS;
    if (group_rows > SHARD_MAX_GROUP_ROWS)
        return rec_errorf(REC_EINVAL, "%s: %lld rows per group is over the limit of %lld", path,
                          (long long)group_rows, (long long)SHARD_MAX_GROUP_ROWS);
    rec_shard_writer *w = calloc(1, sizeof *w);
    if (!w) return rec_errorf(REC_ENOMEM, "%s: out of memory for the shard writer", path);
    w->file.fd = -1;
    w->has_label = has_label ? 1 : 0;
    w->group_rows = group_rows;
    size_t plen = strlen(path);
    w->path = malloc(plen + 1);
    rec_status s = REC_OK;
    if (!w->path) s = rec_errorf(REC_ENOMEM, "%s: out of memory for the shard writer", path);
    if (!s) {
        memcpy(w->path, path, plen + 1);
        s = w_schema(w, spec, vocabs);
    }
    if (!s) s = rec_alloc((void **)&w->buf, SHARD_WBUF, "shard write buffer");
    if (!s) s = rec_atomic_open(&w->file, path);
    if (!s) s = w_header(w, spec, vocabs);
    if (s) {
        rec_shard_writer_abort(w);
        return s;
    }
    *out = w;
    return REC_OK;
}

/* Writes the gathered rows as one group and records its directory entry. */
static rec_status w_flush_group(rec_shard_writer *w) {
    int64_t n = w->n, F = w->n_sparse;
    if (n == 0) return REC_OK;
    uint64_t off = w->pos;
    w->crc = 0;
    REC_TRY(w_put(w, w->label, 4 * (size_t)n));
    REC_TRY(w_pad(w));
    REC_TRY(w_put(w, w->dense, 4 * (size_t)n * (size_t)w->n_dense));
    REC_TRY(w_pad(w));
    size_t eb = (size_t)shard_entry_bytes(w->n_sparse);
    if (w->dir_len + eb > w->dir_cap) {
        size_t cap = w->dir_cap ? 2 * w->dir_cap : 64 * eb;
        uint8_t *d = realloc(w->dir, cap);
        if (!d) return rec_errorf(REC_ENOMEM, "%s: out of memory for the group directory", w->path);
        w->dir = d;
        w->dir_cap = cap;
    }
    uint8_t *e = w->dir + w->dir_len;
    memset(e, 0, eb);
    for (int64_t f = 0; f < F; f++) {
        const int64_t *o = w->offs[f], *ids = w->ids[f];
        int64_t nnz = o[n];
        /* offsets are non-decreasing from 0, so nnz == n with every length 1 means o[r] == r */
        int single = nnz == n;
        for (int64_t r = 1; single && r < n; r++) single = o[r] == r;
        if (!single) {
            REC_TRY(w_put(w, o, 8 * (size_t)(n + 1)));
            REC_TRY(w_pad(w));
        }
        if (shard_id_bytes(w->table_rows[f]) == 8) {
            REC_TRY(w_put(w, ids, 8 * (size_t)nnz));
        } else {
            /* every id was checked to be in [0, R) with R <= 2^31 on append */
            for (int64_t k = 0; k < nnz; k += SHARD_NARROW) {
                int64_t m = nnz - k < SHARD_NARROW ? nnz - k : SHARD_NARROW;
                for (int64_t i = 0; i < m; i++) w->narrow[i] = (int32_t)ids[k + i];
                REC_TRY(w_put(w, w->narrow, 4 * (size_t)m));
            }
        }
        REC_TRY(w_pad(w));
        shard_put_u64(e + SHARD_E_NNZ + 8 * f, (uint64_t)nnz);
        e[SHARD_E_NNZ + 8 * F + f] = single ? SHARD_FF_SINGLE : 0;
    }
    shard_put_u64(e + SHARD_E_OFFSET, off);
    shard_put_u64(e + SHARD_E_BYTES, w->pos - off);
    shard_put_u64(e + SHARD_E_ROWS, (uint64_t)n);
    shard_put_u32(e + SHARD_E_CRC, w->crc);
    w->dir_len += eb;
    w->n_groups++;
    w->rows += n;
    w->n = 0;
    return REC_OK;
}

/* Grows the group buffers to hold `rows` rows (never beyond G). */
static rec_status w_reserve_rows(rec_shard_writer *w, int64_t rows) {
    if (rows <= w->cap) return REC_OK;
    int64_t cap = w->cap ? 2 * w->cap : 4096;
    if (cap < rows) cap = rows;
    if (cap > w->group_rows) cap = w->group_rows;
    REC_TRY(rec_realloc((void **)&w->label, 4 * (size_t)w->cap, 4 * (size_t)cap, "shard group labels"));
    REC_TRY(rec_realloc((void **)&w->dense, 4 * (size_t)w->cap * (size_t)w->n_dense,
                        4 * (size_t)cap * (size_t)w->n_dense + 4, "shard group dense"));
    for (int32_t f = 0; f < w->n_sparse; f++)
        REC_TRY(rec_realloc((void **)&w->offs[f], w->offs[f] ? 8 * (size_t)(w->cap + 1) : 0,
                            8 * (size_t)(cap + 1), "shard group offsets"));
    w->cap = cap;
    return REC_OK;
}

static rec_status w_reserve_ids(rec_shard_writer *w, int32_t f, int64_t nnz) {
    if (nnz <= w->ids_cap[f] && w->ids[f]) return REC_OK;
    int64_t cap = w->ids_cap[f] ? 2 * w->ids_cap[f] : 4096;
    if (cap < nnz) cap = nnz;
    REC_TRY(rec_realloc((void **)&w->ids[f], 8 * (size_t)w->ids_cap[f], 8 * (size_t)cap, "shard group ids"));
    w->ids_cap[f] = cap;
    return REC_OK;
}

/* Refuses a batch that does not fit the schema before any of it is taken, so that a refused
 * append leaves the writer as it was. */
static rec_status w_check_batch(const rec_shard_writer *w, const rec_batch *b) {
    if (b->n_dense != w->n_dense || b->n_sparse != w->n_sparse)
        return rec_errorf(REC_EINVAL, "%s: batch has %d dense values and %d sparse features per row; "
                          "the shard's spec has %d and %d",
                          w->path, b->n_dense, b->n_sparse, w->n_dense, w->n_sparse);
    if (b->n < 0 || b->n > b->cap)
        return rec_errorf(REC_EINVAL, "%s: batch holds %lld rows with room for %lld", w->path,
                          (long long)b->n, (long long)b->cap);
    for (int32_t f = 0; f < w->n_sparse; f++) {
        const rec_jagged *j = &b->sparse[f];
        int64_t R = w->table_rows[f];
        if (j->offsets[0] != 0)
            return rec_errorf(REC_EINVAL, "%s: batch feature '%s': offsets[0] is %lld, not 0", w->path,
                              w->names[f], (long long)j->offsets[0]);
        for (int64_t r = 0; r < b->n; r++)
            if (j->offsets[r + 1] < j->offsets[r])
                return rec_errorf(REC_EINVAL, "%s: batch feature '%s' row %lld: offsets decrease "
                                  "(%lld then %lld)", w->path, w->names[f], (long long)r,
                                  (long long)j->offsets[r], (long long)j->offsets[r + 1]);
        int64_t nnz = j->offsets[b->n];
        if (nnz > j->nnz_cap)
            return rec_errorf(REC_EINVAL, "%s: batch feature '%s' has %lld ids with room for %lld",
                              w->path, w->names[f], (long long)nnz, (long long)j->nnz_cap);
        int bad = 0;
        for (int64_t k = 0; k < nnz; k++) bad |= (uint64_t)rec_jagged_id(j, k) >= (uint64_t)R;
        if (bad)
            for (int64_t k = 0; k < nnz; k++)
                if ((uint64_t)rec_jagged_id(j, k) >= (uint64_t)R)
                    return rec_errorf(REC_EINVAL, "%s: batch feature '%s' id %lld (position %lld) is "
                                      "outside its table's [0, %lld) rows", w->path, w->names[f],
                                      (long long)rec_jagged_id(j, k), (long long)k, (long long)R);
    }
    return REC_OK;
}

rec_status rec_shard_writer_append(rec_shard_writer *w, const rec_batch *b) {
    REC_TRY(w_check_batch(w, b));
    int64_t r = 0;
    while (r < b->n) {
        int64_t k = b->n - r;
        if (k > w->group_rows - w->n) k = w->group_rows - w->n;
        REC_TRY(w_reserve_rows(w, w->n + k));
        memcpy(w->label + w->n, b->label + r, 4 * (size_t)k);
        memcpy(w->dense + w->n * w->n_dense, b->dense + r * b->n_dense, 4 * (size_t)k * (size_t)w->n_dense);
        for (int32_t f = 0; f < w->n_sparse; f++) {
            const rec_jagged *j = &b->sparse[f];
            const int64_t *bo = j->offsets;
            int64_t *o = w->offs[f];
            int64_t have = o[w->n], add = bo[r + k] - bo[r], base = have - bo[r];
            REC_TRY(w_reserve_ids(w, f, have + add));
            for (int64_t i = 1; i <= k; i++) o[w->n + i] = bo[r + i] + base;
            rec_jagged_copy_ids64(j, bo[r], add, w->ids[f] + have);
        }
        w->n += k;
        r += k;
        if (w->n == w->group_rows) REC_TRY(w_flush_group(w));
    }
    return REC_OK;
}

/* Everything of close after the last group: footer, tail, header patch, fsync, rename. */
static rec_status w_finish(rec_shard_writer *w) {
    REC_TRY(w_flush_group(w));
    uint64_t footer_off = w->pos;
    w->crc = 0;
    uint8_t fixed[SHARD_F_FIXED] = {0};
    shard_put_u64(fixed + SHARD_F_N_GROUPS, w->n_groups);
    shard_put_u64(fixed + SHARD_F_ROWS, (uint64_t)w->rows);
    shard_put_u32(fixed + SHARD_F_N_SPARSE, (uint32_t)w->n_sparse);
    shard_put_u32(fixed + SHARD_F_ENTRY_BYTES, (uint32_t)shard_entry_bytes(w->n_sparse));
    REC_TRY(w_put(w, fixed, sizeof fixed));
    REC_TRY(w_put(w, w->dir, w->dir_len));
    uint8_t tail[SHARD_TAIL] = {0};
    shard_put_u32(tail + SHARD_T_FOOTER_CRC, w->crc);
    shard_put_u64(tail + SHARD_T_FOOTER_OFF, footer_off);
    memcpy(tail + SHARD_T_MAGIC, SHARD_END_MAGIC, 8);
    REC_TRY(w_put(w, tail, sizeof tail));
    REC_TRY(w_flush(w));

    shard_put_u64(w->prefix + SHARD_H_FILE_BYTES, w->pos);
    shard_put_u64(w->prefix + SHARD_H_FOOTER_OFF, footer_off);
    shard_put_u32(w->prefix + SHARD_H_CRC, 0);
    uint32_t crc = rec_crc32(0, w->prefix, SHARD_H_PREFIX);
    crc = (uint32_t)crc32_combine(crc, w->body_crc, (z_off_t)(w->header_bytes - SHARD_H_PREFIX));
    shard_put_u32(w->prefix + SHARD_H_CRC, crc);
    if (pwrite(w->file.fd, w->prefix, SHARD_H_PREFIX, 0) != SHARD_H_PREFIX) return w_io_error(w, "write of the header");
    return rec_atomic_commit(&w->file);
}

rec_status rec_shard_writer_close(rec_shard_writer *w) {
    if (!w) return REC_OK;
    rec_status s = w_finish(w);
    if (s) rec_shard_writer_abort(w);
    else w_free(w);
    return s;
}
