/* Internal to src/net/: the field writers and the bounds-checked cursor that every body codec
 * uses (frame.c, frame_cache.c). */
#ifndef REC_NET_WIRE_IMPL_H
#define REC_NET_WIRE_IMPL_H

#include <stdlib.h>
#include <string.h>

#include "rectrain/net.h"

/* ---- writing ------------------------------------------------------------------------------ */

static inline int reserve(rec_wbuf *w, size_t more) {
    if (w->err) return 0;
    if (w->len + more <= w->cap) return 1;
    size_t cap = w->cap ? w->cap : 4096;
    while (cap < w->len + more) cap *= 2;
    uint8_t *p = realloc(w->p, cap);
    if (!p) {
        w->err = rec_errorf(REC_ENOMEM, "out of memory building a frame of %zu bytes", w->len + more);
        return 0;
    }
    w->p = p;
    w->cap = cap;
    return 1;
}

static inline void put(rec_wbuf *w, const void *x, size_t n) {
    if (n && reserve(w, n)) memcpy(w->p + w->len, x, n), w->len += n;
}
static inline void put_u16(rec_wbuf *w, uint16_t x) { put(w, &x, 2); }
static inline void put_u32(rec_wbuf *w, uint32_t x) { put(w, &x, 4); }
static inline void put_u64(rec_wbuf *w, uint64_t x) { put(w, &x, 8); }
static inline void put_i64(rec_wbuf *w, int64_t x) { put(w, &x, 8); }
static inline void put_f64(rec_wbuf *w, double x) { put(w, &x, 8); }
/* Zero bytes up to the next multiple of 8 (frame-relative: the frame starts at w->p). */
static inline void pad8(rec_wbuf *w) {
    static const uint8_t zero[8];
    put(w, zero, (8 - w->len % 8) % 8);
}
static inline void put_str(rec_wbuf *w, const char *s) {
    const size_t n = s ? strlen(s) : 0;
    put_u32(w, (uint32_t)n);
    put(w, s, n);
}

/* ---- reading ------------------------------------------------------------------------------ */

typedef struct rbuf {
    const uint8_t *p;
    size_t len, pos;
    const char *what;   /* the frame type, for messages */
    rec_status err;
} rbuf;

static inline int need(rbuf *r, size_t n, const char *field) {
    if (r->err) return 0;
    if (n <= r->len - r->pos) return 1;
    r->err = rec_errorf(REC_EFORMAT, "%s frame: the body ends at byte %zu while %zu bytes of %s were due (truncated "
                        "or not a rectrain frame)", r->what, r->len, n, field);
    return 0;
}
static inline void get(rbuf *r, void *x, size_t n, const char *field) {
    if (need(r, n, field)) memcpy(x, r->p + r->pos, n), r->pos += n;
    else memset(x, 0, n);
}
static inline uint32_t get_u32(rbuf *r, const char *f) { uint32_t x; get(r, &x, 4, f); return x; }
static inline uint64_t get_u64(rbuf *r, const char *f) { uint64_t x; get(r, &x, 8, f); return x; }
static inline int64_t get_i64(rbuf *r, const char *f) { int64_t x; get(r, &x, 8, f); return x; }
static inline double get_f64(rbuf *r, const char *f) { double x; get(r, &x, 8, f); return x; }
/* Skips to the next multiple of 8 of the frame (the body starts at frame byte 32). */
static inline void skip8(rbuf *r) {
    const size_t n = (8 - r->pos % 8) % 8;
    if (need(r, n, "padding")) r->pos += n;
}
/* A pointer to n bytes in place, or NULL. */
static inline const uint8_t *take(rbuf *r, size_t n, const char *field) {
    if (!need(r, n, field)) return NULL;
    const uint8_t *p = r->p + r->pos;
    r->pos += n;
    return p;
}
/* A length-prefixed string as an owned, NUL-terminated copy (at most `max` bytes, no NUL). */
static inline char *get_str(rbuf *r, size_t max, const char *field) {
    const uint32_t n = get_u32(r, field);
    if (!r->err && n > max) {
        r->err = rec_errorf(REC_EFORMAT, "%s frame: %s of %u bytes is over its limit of %zu", r->what, field, n, max);
        return NULL;
    }
    const uint8_t *s = take(r, n, field);
    if (!s) return NULL;
    if (memchr(s, 0, n)) {
        r->err = rec_errorf(REC_EFORMAT, "%s frame: %s holds a NUL byte", r->what, field);
        return NULL;
    }
    char *c = malloc((size_t)n + 1);
    if (!c) {
        r->err = rec_errorf(REC_ENOMEM, "out of memory decoding %s", field);
        return NULL;
    }
    memcpy(c, s, n);
    c[n] = 0;
    return c;
}
static inline rec_status finish(rbuf *r) {
    if (r->err) return r->err;
    if (r->pos != r->len)
        return rec_errorf(REC_EFORMAT, "%s frame: %zu bytes after its last field (a newer or corrupt sender?)", r->what,
                          r->len - r->pos);
    return REC_OK;
}
/* The body as a cursor whose positions are frame-relative (alignment is the frame's). */
static inline rbuf body_reader(const uint8_t *body, size_t len, const char *what) {
    return (rbuf){body - REC_NET_HEAD, len + REC_NET_HEAD, REC_NET_HEAD, what, REC_OK};
}

/* Bytes of n items of `size`, or SIZE_MAX where that overflows (need() then refuses it). */
static inline size_t bytes_of(int64_t n, size_t size) {
    return n < 0 || (uint64_t)n > SIZE_MAX / size ? SIZE_MAX : (size_t)n * size;
}

/* A batch's fields (RESULT, CACHE_STEP; the layout: rec_net_result_encode in net.h); decoded in
 * place (narrow ids and lengths widened into room) with every id checked against
 * table_rows[f], or against all_rows for every feature when table_rows is NULL (`whose` names
 * the side that fixes Dn and F). */
void rec__net_put_batch(rec_wbuf *w, const rec_batch *b);
void rec__net_get_batch(rbuf *r, int32_t n_dense, int32_t n_sparse, const int64_t *table_rows, int64_t all_rows,
                        const char *whose, rec_batch *b, rec_jagged *sparse, rec_net_room *room);

#endif
