/* Reader of the golden fixture tests/data/golden_v1.bin (written by dev/golden_models.py).
 *
 * Format "RECGOLD1" version 1, little-endian:
 *     char magic[8] = "RECGOLD1"; u32 version = 1; u32 n_records;
 *     n_records times:
 *         u16 name_len; char name[name_len] (no NUL);
 *         u8 dtype (0 f32, 1 i64, 2 f64, 3 u8 text); u8 ndim (<= GOLDEN_MAX_DIMS);
 *         i64 dims[ndim] (each >= 0);
 *         data: prod(dims) elements of dtype, raw
 * and nothing after the last record. The record names and their meaning are listed at the
 * top of dev/golden_models.py.
 *
 * golden_load reads the whole file, validates the header and every record's sizes against
 * the bytes that are there (a truncated or padded file is refused with REC_EFORMAT and a
 * message naming the file, the record and the offset), and copies each record's data into
 * its own allocation so that it is aligned for its type. Header-only: the test includes it.
 */
#ifndef RECTRAIN_TEST_GOLDEN_H
#define RECTRAIN_TEST_GOLDEN_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rectrain/status.h"

enum { GOLDEN_F32 = 0, GOLDEN_I64 = 1, GOLDEN_F64 = 2, GOLDEN_U8 = 3, GOLDEN_MAX_DIMS = 4 };

typedef struct golden_record {
    char *name;                    /* NUL-terminated copy */
    int dtype;                     /* GOLDEN_* */
    int ndim;
    int64_t dims[GOLDEN_MAX_DIMS];
    int64_t numel;                 /* prod(dims); 1 when ndim == 0 */
    void *data;                    /* numel elements, malloc-aligned */
} golden_record;

typedef struct golden_file {
    int n;
    golden_record *rec;
} golden_file;

static inline size_t golden_elem_size(int dtype) {
    return dtype == GOLDEN_U8 ? 1 : dtype == GOLDEN_F32 ? 4 : 8;
}

static inline void golden_free(golden_file *g) {
    for (int i = 0; g->rec && i < g->n; i++) {
        free(g->rec[i].name);
        free(g->rec[i].data);
    }
    free(g->rec);
    g->rec = NULL;
    g->n = 0;
}

/* Little-endian unsigned integer of `n` bytes at p. */
static inline uint64_t golden__le(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* Parses buf (len bytes, from `path`) into g. REC_EFORMAT with a message on any
 * inconsistency; g is left empty then. */
static inline rec_status golden_parse(golden_file *g, const unsigned char *buf, size_t len,
                                      const char *path) {
    g->n = 0;
    g->rec = NULL;
    const uint32_t probe = 1;
    if (*(const unsigned char *)&probe != 1)
        return rec_errorf(REC_EUNSUPPORTED, "%s: the golden reader assumes a little-endian host",
                          path);
    if (len < 16)
        return rec_errorf(REC_EFORMAT, "%s: truncated: %zu bytes, the header alone needs 16", path,
                          len);
    if (memcmp(buf, "RECGOLD1", 8) != 0)
        return rec_errorf(REC_EFORMAT, "%s: bad magic (not a RECGOLD1 golden file)", path);
    uint32_t version = (uint32_t)golden__le(buf + 8, 4), n = (uint32_t)golden__le(buf + 12, 4);
    if (version != 1)
        return rec_errorf(REC_EFORMAT, "%s: version %u, this reader knows version 1; regenerate "
                          "with dev/golden_models.py", path, version);
    if (n > len / 4)
        return rec_errorf(REC_EFORMAT, "%s: truncated or corrupt: %u records cannot fit in %zu "
                          "bytes", path, n, len);
    g->rec = calloc(n ? n : 1, sizeof *g->rec);
    if (!g->rec) return rec_errorf(REC_ENOMEM, "%s: out of memory for %u records", path, n);
    size_t pos = 16;
    rec_status s = REC_OK;
    for (uint32_t r = 0; r < n && s == REC_OK; r++) {
        golden_record *rec = &g->rec[r];
        if (len - pos < 2) {
            s = rec_errorf(REC_EFORMAT, "%s: truncated in record %u of %u at offset %zu (name "
                           "length), file has %zu bytes", path, r, n, pos, len);
            break;
        }
        size_t nl = (size_t)golden__le(buf + pos, 2);
        pos += 2;
        if (len - pos < nl + 2) {
            s = rec_errorf(REC_EFORMAT, "%s: truncated in record %u of %u at offset %zu (name and "
                           "type), file has %zu bytes", path, r, n, pos, len);
            break;
        }
        rec->name = malloc(nl + 1);
        if (!rec->name) {
            s = rec_errorf(REC_ENOMEM, "%s: out of memory", path);
            break;
        }
        memcpy(rec->name, buf + pos, nl);
        rec->name[nl] = '\0';
        g->n = (int)r + 1;  /* from here on golden_free releases this record */
        pos += nl;
        rec->dtype = buf[pos];
        rec->ndim = buf[pos + 1];
        pos += 2;
        if (rec->dtype > GOLDEN_U8 || rec->ndim > GOLDEN_MAX_DIMS) {
            s = rec_errorf(REC_EFORMAT, "%s: record \"%s\": dtype %d / ndim %d unknown (dtype "
                           "0..3, ndim <= %d)", path, rec->name, rec->dtype, rec->ndim,
                           GOLDEN_MAX_DIMS);
            break;
        }
        if (len - pos < (size_t)rec->ndim * 8) {
            s = rec_errorf(REC_EFORMAT, "%s: truncated in record \"%s\" at offset %zu (dims), "
                           "file has %zu bytes", path, rec->name, pos, len);
            break;
        }
        rec->numel = 1;
        for (int d = 0; d < rec->ndim; d++) {
            int64_t v = (int64_t)golden__le(buf + pos + 8 * (size_t)d, 8);
            if (v < 0 || (v > 0 && rec->numel > (int64_t)(len / (size_t)v))) {
                s = rec_errorf(REC_EFORMAT, "%s: record \"%s\": dimension %d = %lld is negative "
                               "or larger than the file", path, rec->name, d, (long long)v);
                break;
            }
            rec->dims[d] = v;
            rec->numel *= v;
        }
        if (s != REC_OK) break;
        pos += (size_t)rec->ndim * 8;
        size_t bytes = (size_t)rec->numel * golden_elem_size(rec->dtype);
        if (len - pos < bytes) {
            s = rec_errorf(REC_EFORMAT, "%s: truncated in record \"%s\" at offset %zu: its data "
                           "needs %zu bytes, %zu are left", path, rec->name, pos, bytes,
                           len - pos);
            break;
        }
        rec->data = malloc(bytes ? bytes : 1);
        if (!rec->data) {
            s = rec_errorf(REC_ENOMEM, "%s: out of memory for record \"%s\"", path, rec->name);
            break;
        }
        memcpy(rec->data, buf + pos, bytes);
        pos += bytes;
    }
    if (s == REC_OK && pos != len)
        s = rec_errorf(REC_EFORMAT, "%s: %zu bytes after the last of %u records (corrupt file)",
                       path, len - pos, n);
    if (s != REC_OK) golden_free(g);
    return s;
}

/* Reads and parses the file at path. REC_EIO when it cannot be read. */
static inline rec_status golden_load(golden_file *g, const char *path) {
    g->n = 0;
    g->rec = NULL;
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return rec_errorf(REC_EIO, "%s: cannot open the golden file: %s (regenerate it with "
                          "/usr/bin/python3 dev/golden_models.py)", path, strerror(errno));
    unsigned char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? 2 * cap : 1 << 16;
            unsigned char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(fp);
                return rec_errorf(REC_ENOMEM, "%s: out of memory reading", path);
            }
            buf = nb;
        }
        size_t got = fread(buf + len, 1, cap - len, fp);
        len += got;
        if (got == 0) break;
    }
    int err = ferror(fp);
    fclose(fp);
    if (err) {
        free(buf);
        return rec_errorf(REC_EIO, "%s: read error", path);
    }
    rec_status s = golden_parse(g, buf, len, path);
    free(buf);
    return s;
}

/* The record named `name`, or NULL. */
static inline const golden_record *golden_find(const golden_file *g, const char *name) {
    for (int i = 0; i < g->n; i++)
        if (!strcmp(g->rec[i].name, name)) return &g->rec[i];
    return NULL;
}

/* As golden_find, but also NULL unless the record has this dtype and numel (-1: any). */
static inline const golden_record *golden_get(const golden_file *g, const char *name,
                                              int dtype, int64_t numel) {
    const golden_record *r = golden_find(g, name);
    if (!r || r->dtype != dtype || (numel >= 0 && r->numel != numel)) return NULL;
    return r;
}

#endif
