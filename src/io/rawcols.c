/* .rraw writer and reader (rawcols.h): parsed Criteo rows as typed raw columns.
 *
 * The writer lays each group out in memory (its arrays in the order of rawcols.h), sums it and
 * writes it to PATH.tmp; the footer and the header's sizes and checksum come at close, then
 * the atomic commit. The reader maps the file read-only and checks at open everything that
 * bounds a pointer (directory entries against the file and against the sizes their rows and
 * ids imply), the first read of a group its checksum and its lists' structure.
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
#include "rectrain/rawcols.h"
#include "rawcols_format.h"

enum { NCAT = REC_CRITEO_NCAT, NINT = REC_CRITEO_NINT };

static uint64_t pad8(uint64_t x) { return (x + 7) & ~(uint64_t)7; }
static uint64_t pad64(uint64_t x) { return (x + 63) & ~(uint64_t)63; }

/* How a group stores its columns: which int columns in 32 bits (bit c: I(c+1)), which
 * categoricals' ids in 32 bits, which with their offsets implied (every present field one id),
 * and each categorical's id count. */
typedef struct group_form {
    uint32_t int32, id32, implied;
    int64_t nnz[NCAT];
} group_form;

/* Byte offsets of a group's arrays for n rows of form f (cat_off 0 where implied); returns its
 * padded size. */
typedef struct group_layout {
    uint64_t ints[NINT], int_null, cat_null[NCAT], cat_off[NCAT], cat_val[NCAT];
} group_layout;

static int bit(uint32_t mask, int c) { return (mask >> c) & 1; }

static uint64_t layout(int64_t n, const group_form *f, group_layout *g) {
    uint64_t at = pad8(4 * (uint64_t)n);
    for (int c = 0; c < NINT; c++) {
        g->ints[c] = at;
        at += pad8((bit(f->int32, c) ? 4 : 8) * (uint64_t)n);
    }
    g->int_null = at;
    at += pad8(NINT * (uint64_t)n);
    for (int c = 0; c < NCAT; c++) {
        g->cat_null[c] = at;
        at += pad8((uint64_t)n);
        g->cat_off[c] = bit(f->implied, c) ? 0 : at;
        if (!bit(f->implied, c)) at += pad8(4 * ((uint64_t)n + 1));
        g->cat_val[c] = at;
        at += pad8((bit(f->id32, c) ? 4 : 8) * (uint64_t)f->nnz[c]);
    }
    return pad64(at);
}

/* The narrowest form that holds rows [r0, r0 + n) of b exactly. */
static void form_of(const rec_raw_block *b, int64_t r0, int64_t n, group_form *f) {
    memset(f, 0, sizeof *f);
    for (int c = 0; c < NINT; c++) {
        const int64_t *v = b->ints + (size_t)c * b->cap + r0;
        int narrow = 1;
        for (int64_t i = 0; i < n && narrow; i++) narrow = v[i] >= INT32_MIN && v[i] <= INT32_MAX;
        f->int32 |= (uint32_t)narrow << c;
    }
    for (int c = 0; c < NCAT; c++) {
        const rec_raw_list *l = &b->cat[c];
        f->nnz[c] = (int64_t)l->off[r0 + n] - l->off[r0];
        int narrow = 1, implied = 1;
        for (int32_t k = l->off[r0]; k < l->off[r0 + n] && narrow; k++) narrow = (uint64_t)l->val[k] <= UINT32_MAX;
        for (int64_t i = r0; i < r0 + n && implied; i++) implied = l->off[i + 1] - l->off[i] == !l->null[i];
        f->id32 |= (uint32_t)narrow << c;
        f->implied |= (uint32_t)implied << c;
    }
}

static void put_u32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static void put_u64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static uint32_t get_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t get_u64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

int rec_rawcols_magic(const void *head, size_t n) { return n >= 8 && memcmp(head, REC_RAWCOLS_MAGIC, 8) == 0; }

int rec_rawcols_is_file(const char *path) {
    struct stat st; /* a pipe is never one: reading its first bytes here would take them */
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
    char head[8];
    FILE *f = fopen(path, "rb");
    const size_t got = f ? fread(head, 1, sizeof head, f) : 0;
    if (f) fclose(f);
    return rec_rawcols_magic(head, got);
}

/* ---- writer ------------------------------------------------------------------------------ */

struct rec_rawcols_writer {
    rec_atomic_file file;
    int has_label;
    int64_t G, rows;
    uint64_t at;              /* file offset of the next group */
    uint8_t *buf;             /* a group being laid out */
    uint64_t buf_cap;
    uint8_t *dir;             /* (n_groups, RRAW_ENTRY) the footer's directory */
    int64_t n_groups, dir_cap;
};

static rec_status w_io(const rec_rawcols_writer *w, const char *what) {
    return rec_errorf(REC_EIO, "%s: cannot write %s: %s (is the disk full?)", w->file.tmp, what, strerror(errno));
}

static void w_free(rec_rawcols_writer *w) {
    rec_atomic_abort(&w->file);
    free(w->buf);
    free(w->dir);
    free(w);
}

rec_status rec_rawcols_writer_open(rec_rawcols_writer **out, const char *path, int has_label, int64_t group_rows) {
    *out = NULL;
    if (group_rows < 0 || group_rows > RRAW_MAX_G)
        return rec_errorf(REC_EINVAL, "%s: raw column groups of %lld rows; give 1 to %d (0: %d)", path,
                          (long long)group_rows, RRAW_MAX_G, RRAW_DEFAULT_G);
    rec_rawcols_writer *w = calloc(1, sizeof *w);
    if (!w) return rec_errorf(REC_ENOMEM, "%s: out of memory for the writer", path);
    w->file.fd = -1;
    w->has_label = has_label != 0;
    w->G = group_rows ? group_rows : RRAW_DEFAULT_G;
    w->at = RRAW_HEADER;
    rec_status s = rec_atomic_open(&w->file, path);
    if (!s) {
        uint8_t zero[RRAW_HEADER] = {0}; /* the header is written at close, when its sizes are known */
        if (!rec_write_full(w->file.fd, zero, sizeof zero)) s = w_io(w, "the header");
    }
    if (s) {
        w_free(w);
        return s;
    }
    *out = w;
    return REC_OK;
}

/* One group of rows [r0, r0 + n) of b. */
static rec_status w_group(rec_rawcols_writer *w, const rec_raw_block *b, int64_t r0, int64_t n) {
    if (w->n_groups == w->dir_cap) { /* the directory's room first: a group written is a group listed */
        const int64_t cap = w->dir_cap ? 2 * w->dir_cap : 64;
        uint8_t *d = realloc(w->dir, (size_t)cap * RRAW_ENTRY);
        if (!d) return rec_errorf(REC_ENOMEM, "%s: out of memory for the group directory", w->file.path);
        w->dir = d;
        w->dir_cap = cap;
    }
    group_form f;
    form_of(b, r0, n, &f);
    group_layout g;
    const uint64_t bytes = layout(n, &f, &g);
    if (bytes > w->buf_cap) {
        uint8_t *p = realloc(w->buf, bytes);
        if (!p) return rec_errorf(REC_ENOMEM, "%s: out of memory for a group of %llu bytes", w->file.path,
                                  (unsigned long long)bytes);
        w->buf = p;
        w->buf_cap = bytes;
    }
    uint8_t *p = w->buf;
    memset(p, 0, bytes);
    if (b->has_label) memcpy(p, b->label + r0, 4 * (size_t)n);
    for (int c = 0; c < NINT; c++) {
        const int64_t *v = b->ints + (size_t)c * b->cap + r0;
        if (bit(f.int32, c)) {
            int32_t *d = (int32_t *)(p + g.ints[c]);
            for (int64_t i = 0; i < n; i++) d[i] = (int32_t)v[i];
        } else {
            memcpy(p + g.ints[c], v, 8 * (size_t)n);
        }
        memcpy(p + g.int_null + (uint64_t)(c * n), b->int_null + (size_t)c * b->cap + r0, (size_t)n);
    }
    for (int c = 0; c < NCAT; c++) {
        const rec_raw_list *l = &b->cat[c];
        memcpy(p + g.cat_null[c], l->null + r0, (size_t)n);
        if (!bit(f.implied, c)) {
            int32_t *off = (int32_t *)(p + g.cat_off[c]);
            for (int64_t i = 0; i <= n; i++) off[i] = l->off[r0 + i] - l->off[r0];
        }
        const int64_t *v = l->val + l->off[r0];
        if (bit(f.id32, c)) {
            uint32_t *d = (uint32_t *)(p + g.cat_val[c]);
            for (int64_t k = 0; k < f.nnz[c]; k++) d[k] = (uint32_t)v[k];
        } else {
            memcpy(p + g.cat_val[c], v, 8 * (size_t)f.nnz[c]);
        }
    }
    if (!rec_write_full(w->file.fd, p, bytes)) return w_io(w, "a group");
    uint8_t *e = w->dir + (size_t)w->n_groups++ * RRAW_ENTRY;
    memset(e, 0, RRAW_ENTRY);
    put_u64(e + RRAW_E_OFFSET, w->at);
    put_u64(e + RRAW_E_BYTES, bytes);
    put_u64(e + RRAW_E_ROWS, (uint64_t)n);
    put_u32(e + RRAW_E_CRC, rec_crc32(0, p, bytes));
    put_u32(e + RRAW_E_INT32, f.int32);
    put_u32(e + RRAW_E_ID32, f.id32);
    put_u32(e + RRAW_E_IMPLIED, f.implied);
    for (int c = 0; c < NCAT; c++) put_u64(e + RRAW_E_NNZ + 8 * c, (uint64_t)f.nnz[c]);
    w->at += bytes;
    w->rows += n;
    return REC_OK;
}

rec_status rec_rawcols_writer_append(rec_rawcols_writer *w, const rec_raw_block *b, int64_t r0, int64_t n) {
    if (!b->has_label != !w->has_label)
        return rec_errorf(REC_EINVAL, "%s: rows %s labels appended to a file of rows %s", w->file.path,
                          b->has_label ? "with" : "without", w->has_label ? "with" : "without");
    if (r0 < 0 || n < 0 || r0 + n > b->n)
        return rec_errorf(REC_EINVAL, "%s: rows [%lld, +%lld) of a block of %lld", w->file.path, (long long)r0,
                          (long long)n, (long long)b->n);
    for (int64_t k = 0; k < n; k += w->G) REC_TRY(w_group(w, b, r0 + k, n - k < w->G ? n - k : w->G));
    return REC_OK;
}

static rec_status w_finish(rec_rawcols_writer *w) {
    const uint64_t footer = w->at;
    uint8_t fixed[RRAW_F_FIXED];
    put_u64(fixed, (uint64_t)w->n_groups);
    put_u64(fixed + 8, (uint64_t)w->rows);
    uint32_t crc = rec_crc32(0, fixed, sizeof fixed);
    crc = rec_crc32(crc, w->dir, (size_t)w->n_groups * RRAW_ENTRY);
    uint8_t tail[RRAW_TAIL] = {0};
    put_u32(tail + RRAW_T_CRC, crc);
    put_u64(tail + RRAW_T_FOOTER, footer);
    memcpy(tail + RRAW_T_MAGIC, RRAW_END_MAGIC, 8);
    if (!rec_write_full(w->file.fd, fixed, sizeof fixed) ||
        !rec_write_full(w->file.fd, w->dir, (size_t)w->n_groups * RRAW_ENTRY) || !rec_write_full(w->file.fd, tail, RRAW_TAIL))
        return w_io(w, "the footer");
    uint8_t h[RRAW_HEADER] = {0};
    memcpy(h, REC_RAWCOLS_MAGIC, 8);
    put_u32(h + RRAW_H_VERSION, REC_RAWCOLS_VERSION);
    put_u32(h + RRAW_H_FLAGS, w->has_label ? RRAW_FLAG_LABEL : 0);
    put_u64(h + RRAW_H_G, (uint64_t)w->G);
    put_u64(h + RRAW_H_FILE, footer + RRAW_F_FIXED + (uint64_t)w->n_groups * RRAW_ENTRY + RRAW_TAIL);
    put_u64(h + RRAW_H_FOOTER, footer);
    put_u32(h + RRAW_H_CRC, rec_crc32(0, h, RRAW_HEADER));
    if (pwrite(w->file.fd, h, RRAW_HEADER, 0) != RRAW_HEADER) return w_io(w, "the header");
    return rec_atomic_commit(&w->file);
}

rec_status rec_rawcols_writer_close(rec_rawcols_writer *w) {
    if (!w) return REC_OK;
    const rec_status s = w_finish(w);
    w_free(w); /* after a commit, nothing is left to remove */
    return s;
}

void rec_rawcols_writer_abort(rec_rawcols_writer *w) {
    if (w) w_free(w);
}

/* ---- reader ------------------------------------------------------------------------------ */

typedef struct rgroup {
    uint64_t off, bytes;
    int64_t rows, row0;
    uint32_t crc;
    group_form form;
    int verified;
} rgroup;

struct rec_rawcols {
    char *path;
    const uint8_t *map;
    uint64_t size;
    int has_label;
    int64_t G, rows, n_groups;
    rgroup *groups;
};

#define BAD(...) rec_errorf(REC_EFORMAT, __VA_ARGS__)

void rec_rawcols_close(rec_rawcols *r) {
    if (!r) return;
    if (r->map) munmap((void *)r->map, r->size);
    free(r->groups);
    free(r->path);
    free(r);
}

int64_t rec_rawcols_rows(const rec_rawcols *r) { return r->rows; }
int64_t rec_rawcols_groups(const rec_rawcols *r) { return r->n_groups; }
int rec_rawcols_has_label(const rec_rawcols *r) { return r->has_label; }

static rec_status check_header(rec_rawcols *r) {
    const uint8_t *h = r->map;
    const char *p = r->path;
    if (r->size < 8 || memcmp(h, REC_RAWCOLS_MAGIC, 8) != 0)
        return BAD("%s: not a raw column file (no RRAWCOL1 magic); make one with rectrain prep --raw", p);
    if (r->size < RRAW_HEADER + RRAW_F_FIXED + RRAW_TAIL)
        return BAD("%s: truncated: %llu bytes, less than an empty raw column file; make it again with rectrain prep "
                   "--raw", p, (unsigned long long)r->size);
    uint8_t copy[RRAW_HEADER];
    memcpy(copy, h, RRAW_HEADER);
    put_u32(copy + RRAW_H_CRC, 0);
    if (rec_crc32(0, copy, RRAW_HEADER) != get_u32(h + RRAW_H_CRC))
        return BAD("%s: header checksum mismatch (the file is damaged); make it again with rectrain prep --raw", p);
    if (get_u32(h + RRAW_H_VERSION) != REC_RAWCOLS_VERSION)
        return BAD("%s: raw column format version %u; this rectrain reads version %d", p, get_u32(h + RRAW_H_VERSION),
                   REC_RAWCOLS_VERSION);
    const uint32_t flags = get_u32(h + RRAW_H_FLAGS);
    if (flags & ~(uint32_t)RRAW_FLAG_LABEL) return BAD("%s: unknown header flags 0x%x", p, flags);
    r->has_label = (flags & RRAW_FLAG_LABEL) != 0;
    r->G = (int64_t)get_u64(h + RRAW_H_G);
    if (r->G < 1 || r->G > RRAW_MAX_G) return BAD("%s: groups of %lld rows in the header (1 to %d)", p, (long long)r->G, RRAW_MAX_G);
    if (get_u64(h + RRAW_H_FILE) != r->size)
        return BAD("%s: %s: %llu bytes, the header says %llu; copy the file again", p,
                   get_u64(h + RRAW_H_FILE) > r->size ? "truncated" : "trailing bytes", (unsigned long long)r->size,
                   (unsigned long long)get_u64(h + RRAW_H_FILE));
    return REC_OK;
}

static rec_status parse_footer(rec_rawcols *r) {
    const char *p = r->path;
    const uint8_t *t = r->map + r->size - RRAW_TAIL;
    if (memcmp(t + RRAW_T_MAGIC, RRAW_END_MAGIC, 8) != 0) return BAD("%s: no end magic RRAWEND1: the file is truncated or damaged", p);
    const uint64_t footer = get_u64(t + RRAW_T_FOOTER);
    if (footer != get_u64(r->map + RRAW_H_FOOTER) || footer < RRAW_HEADER || footer % 64 || footer > r->size - RRAW_TAIL - RRAW_F_FIXED)
        return BAD("%s: footer offset %llu is outside the file or disagrees with the header", p,
                   (unsigned long long)footer);
    const uint8_t *f = r->map + footer;
    const uint64_t n_groups = get_u64(f);
    if (n_groups > (r->size - RRAW_TAIL - RRAW_F_FIXED - footer) / RRAW_ENTRY || footer + RRAW_F_FIXED + n_groups * RRAW_ENTRY != r->size - RRAW_TAIL)
        return BAD("%s: the footer's %llu groups do not fit its %llu bytes", p, (unsigned long long)n_groups,
                   (unsigned long long)(r->size - footer));
    if (rec_crc32(0, f, RRAW_F_FIXED + n_groups * RRAW_ENTRY) != get_u32(t + RRAW_T_CRC))
        return BAD("%s: footer checksum mismatch (the file is damaged); make it again with rectrain prep --raw", p);
    r->n_groups = (int64_t)n_groups;
    r->groups = calloc(n_groups + 1, sizeof *r->groups);
    if (!r->groups) return rec_errorf(REC_ENOMEM, "%s: out of memory for %llu groups", p, (unsigned long long)n_groups);
    uint64_t at = RRAW_HEADER;
    int64_t rows = 0;
    for (uint64_t k = 0; k < n_groups; k++) {
        const uint8_t *e = f + RRAW_F_FIXED + k * RRAW_ENTRY;
        rgroup *g = &r->groups[k];
        g->off = get_u64(e + RRAW_E_OFFSET);
        g->bytes = get_u64(e + RRAW_E_BYTES);
        g->rows = (int64_t)get_u64(e + RRAW_E_ROWS);
        g->crc = get_u32(e + RRAW_E_CRC);
        g->row0 = rows;
        if (g->off != at) return BAD("%s: group %llu starts at byte %llu, not right after the one before (%llu)", p,
                                     (unsigned long long)k, (unsigned long long)g->off, (unsigned long long)at);
        if (g->rows < 1 || g->rows > r->G)
            return BAD("%s: group %llu has %lld rows (1 to %lld)", p, (unsigned long long)k, (long long)g->rows,
                       (long long)r->G);
        group_form *fm = &g->form;
        fm->int32 = get_u32(e + RRAW_E_INT32);
        fm->id32 = get_u32(e + RRAW_E_ID32);
        fm->implied = get_u32(e + RRAW_E_IMPLIED);
        if (fm->int32 >> NINT || fm->id32 >> NCAT || fm->implied >> NCAT)
            return BAD("%s: group %llu: unknown column widths (0x%x 0x%x 0x%x); a newer rectrain wrote it", p,
                       (unsigned long long)k, fm->int32, fm->id32, fm->implied);
        for (int c = 0; c < NCAT; c++) {
            fm->nnz[c] = (int64_t)get_u64(e + RRAW_E_NNZ + 8 * c);
            if (fm->nnz[c] < 0 || fm->nnz[c] > INT32_MAX)
                return BAD("%s: group %llu column C%d has %lld ids", p, (unsigned long long)k, c + 1, (long long)fm->nnz[c]);
        }
        group_layout gl;
        if (layout(g->rows, fm, &gl) != g->bytes || g->bytes > footer - at)
            return BAD("%s: group %llu's %llu bytes do not match its rows and ids, or leave the file", p,
                       (unsigned long long)k, (unsigned long long)g->bytes);
        at += g->bytes;
        rows += g->rows;
    }
    if (at != footer)
        return BAD("%s: %llu bytes between the last group and the footer", p, (unsigned long long)(footer - at));
    if ((int64_t)get_u64(f + 8) != rows)
        return BAD("%s: the footer says %lld rows, its groups hold %lld", p, (long long)get_u64(f + 8), (long long)rows);
    r->rows = rows;
    r->groups[n_groups].row0 = rows;
    return REC_OK;
}

rec_status rec_rawcols_open(rec_rawcols **out, const char *path) {
    *out = NULL;
    rec_rawcols *r = calloc(1, sizeof *r);
    if (!r || !(r->path = strdup(path))) {
        free(r);
        return rec_errorf(REC_ENOMEM, "%s: out of memory", path);
    }
    rec_status st = REC_OK;
    struct stat sb;
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) st = rec_errorf(REC_EIO, "%s: cannot open: %s", path, strerror(errno));
    else if (fstat(fd, &sb) != 0) st = rec_errorf(REC_EIO, "%s: cannot stat: %s", path, strerror(errno));
    else if (!S_ISREG(sb.st_mode)) st = rec_errorf(REC_EINVAL, "%s: not a regular file", path);
    else if (sb.st_size == 0) st = BAD("%s: empty file, not a raw column file; make it with rectrain prep --raw", path);
    else {
        r->size = (uint64_t)sb.st_size;
        void *m = mmap(NULL, r->size, PROT_READ, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED) st = rec_errorf(REC_EIO, "%s: cannot map: %s", path, strerror(errno));
        else r->map = m;
    }
    if (fd >= 0) close(fd);
    if (!st) st = check_header(r);
    if (!st) st = parse_footer(r);
    if (st) {
        rec_rawcols_close(r);
        return st;
    }
    *out = r;
    return REC_OK;
}

/* A group's checksum and structure, once. */
static rec_status verify_group(rec_rawcols *r, int64_t k) {
    rgroup *g = &r->groups[k];
    if (g->verified) return REC_OK;
    const uint8_t *p = r->map + g->off;
    const char *path = r->path;
    if (rec_crc32(0, p, g->bytes) != g->crc)
        return BAD("%s: checksum mismatch in group %lld (rows %lld..%lld): the file is damaged; make it again with "
                   "rectrain prep --raw", path, (long long)k, (long long)g->row0 + 1, (long long)(g->row0 + g->rows));
    const int64_t n = g->rows;
    const group_form *fm = &g->form;
    group_layout gl;
    layout(n, fm, &gl);
    for (int64_t i = 0; i < n; i++) {
        float y;
        memcpy(&y, p + 4 * i, 4);
        if (r->has_label ? y != 0.0f && y != 1.0f : y != 0.0f)
            return BAD("%s:%lld: label %g (want %s)", path, (long long)(g->row0 + i + 1), y, r->has_label ? "0 or 1" : "0");
    }
    for (int64_t i = 0; i < NINT * n; i++)
        if (p[gl.int_null + i] > 1)
            return BAD("%s:%lld: I%lld has missing flag %u", path, (long long)(g->row0 + i % n + 1), (long long)(i / n + 1),
                       p[gl.int_null + i]);
    for (int c = 0; c < NCAT; c++) {
        const uint8_t *null = p + gl.cat_null[c];
        if (bit(fm->implied, c)) { /* one id a present field: the ids are as many as those */
            int64_t present = 0;
            for (int64_t i = 0; i < n; i++) {
                if (null[i] > 1) return BAD("%s:%lld: C%d: missing flag not 0 or 1", path, (long long)(g->row0 + i + 1), c + 1);
                present += !null[i];
            }
            if (present != fm->nnz[c])
                return BAD("%s: group %lld column C%d: %lld present fields of one id, the directory says %lld ids", path,
                           (long long)k, c + 1, (long long)present, (long long)fm->nnz[c]);
            continue;
        }
        const uint8_t *ob = p + gl.cat_off[c];
        int32_t prev = 0, o0;
        memcpy(&o0, ob, 4);
        if (o0 != 0) return BAD("%s: group %lld column C%d: offsets start at %d, not 0", path, (long long)k, c + 1, o0);
        for (int64_t i = 0; i < n; i++) {
            int32_t o;
            memcpy(&o, ob + 4 * (i + 1), 4);
            if (null[i] > 1 || o < prev || o > fm->nnz[c] || (null[i] && o != prev))
                return BAD("%s:%lld: C%d: %s", path, (long long)(g->row0 + i + 1), c + 1,
                           null[i] > 1 ? "missing flag not 0 or 1" : o < prev || o > fm->nnz[c] ? "offsets out of order"
                                                                                                : "ids in a missing field");
            prev = o;
        }
        if (prev != fm->nnz[c])
            return BAD("%s: group %lld column C%d: offsets end at %d, the directory says %lld ids", path, (long long)k,
                       c + 1, prev, (long long)fm->nnz[c]);
    }
    g->verified = 1;
    return REC_OK;
}

rec_status rec_rawcols_label_agree(const char *path, int k, const char *first, int label, int asked, int *has_label) {
    if (asked >= 0 && asked != label)
        return rec_errorf(REC_EINVAL, "%s has %s: --format %s contradicts it; drop --format (a .rraw records its format)",
                          path, label ? "labels (the train format)" : "no labels (the test format)",
                          asked ? "train" : "test");
    if (k > 0 && label != *has_label)
        return rec_errorf(REC_EINVAL, "%s has %s and %s %s: the inputs of one data set are all of the train format or "
                          "all of the test format", path, label ? "labels" : "no labels", first,
                          *has_label ? "has" : "has none");
    *has_label = label;
    return REC_OK;
}

rec_status rec_rawcols_verify(rec_rawcols *r) {
    for (int64_t k = 0; k < r->n_groups; k++) REC_TRY(verify_group(r, k));
    return REC_OK;
}

/* The group holding row `row` (binary search over row0). */
static int64_t group_of(const rec_rawcols *r, int64_t row) {
    int64_t lo = 0, hi = r->n_groups;
    while (hi - lo > 1) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (r->groups[mid].row0 <= row) lo = mid;
        else hi = mid;
    }
    return lo;
}

/* Rows [a, a + m) of a group's categorical c into rows [at, at + m) of l. */
static rec_status read_list(const uint8_t *p, const group_layout *gl, const group_form *fm, int c, int64_t a, int64_t m,
                            int64_t at, rec_raw_list *l) {
    const uint8_t *null = p + gl->cat_null[c] + a;
    int32_t o0 = 0, o1 = 0; /* the rows' ids in the group */
    if (bit(fm->implied, c)) { /* one id a present field: offsets count them */
        for (int64_t i = 0; i < a; i++) o0 += !p[gl->cat_null[c] + i];
        o1 = o0;
        for (int64_t i = 0; i < m; i++) o1 += !null[i];
    } else {
        memcpy(&o0, p + gl->cat_off[c] + 4 * (uint64_t)a, 4);
        memcpy(&o1, p + gl->cat_off[c] + 4 * (uint64_t)(a + m), 4);
    }
    const int32_t base = l->off[at];
    REC_TRY(rec_raw_list_reserve(l, (int64_t)base + (o1 - o0)));
    memcpy(l->null + at, null, (size_t)m);
    if (bit(fm->implied, c)) {
        for (int64_t i = 0; i < m; i++) l->off[at + i + 1] = l->off[at + i] + !null[i];
    } else {
        for (int64_t i = 1; i <= m; i++) {
            int32_t o;
            memcpy(&o, p + gl->cat_off[c] + 4 * (uint64_t)(a + i), 4);
            l->off[at + i] = base + (o - o0);
        }
    }
    int64_t *d = l->val + base;
    if (bit(fm->id32, c)) {
        const uint32_t *v = (const uint32_t *)(p + gl->cat_val[c]) + o0;
        for (int32_t k = 0; k < o1 - o0; k++) d[k] = (int64_t)v[k];
    } else {
        memcpy(d, p + gl->cat_val[c] + 8 * (uint64_t)o0, 8 * (size_t)(o1 - o0));
    }
    return REC_OK;
}

rec_status rec_rawcols_read(rec_rawcols *r, int64_t row0, int64_t n, rec_raw_block *out) {
    if (row0 < 0 || n < 0 || row0 > r->rows || n > r->rows - row0)
        return rec_errorf(REC_EINVAL, "%s: %lld rows from row %lld asked for; the file has %lld", r->path, (long long)n,
                          (long long)row0, (long long)r->rows);
    if (n > out->cap)
        return rec_errorf(REC_EINVAL, "%s: %lld rows into a raw block of %lld", r->path, (long long)n, (long long)out->cap);
    out->n = 0;
    out->has_label = r->has_label;
    out->first_line = row0 + 1;
    for (int c = 0; c < NCAT; c++) out->cat[c].off[0] = 0;
    for (int64_t k = n ? group_of(r, row0) : r->n_groups; out->n < n; k++) {
        REC_TRY(verify_group(r, k));
        const rgroup *g = &r->groups[k];
        const uint8_t *p = r->map + g->off;
        const group_form *fm = &g->form;
        group_layout gl;
        layout(g->rows, fm, &gl);
        const int64_t a = row0 + out->n - g->row0, m = g->rows - a < n - out->n ? g->rows - a : n - out->n;
        const int64_t at = out->n, cap = out->cap;
        memcpy(out->label + at, p + 4 * a, 4 * (size_t)m);
        for (int c = 0; c < NINT; c++) {
            int64_t *d = out->ints + c * cap + at;
            if (bit(fm->int32, c)) {
                const int32_t *v = (const int32_t *)(p + gl.ints[c]) + a;
                for (int64_t i = 0; i < m; i++) d[i] = v[i];
            } else {
                memcpy(d, p + gl.ints[c] + 8 * (uint64_t)a, 8 * (size_t)m);
            }
            memcpy(out->int_null + c * cap + at, p + gl.int_null + (uint64_t)(c * g->rows + a), (size_t)m);
        }
        for (int c = 0; c < NCAT; c++)
            REC_TRY(read_list(p, &gl, fm, c, a, m, at, &out->cat[c]));
        out->n += m;
    }
    return REC_OK;
}
