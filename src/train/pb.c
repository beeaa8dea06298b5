/* The Protocol Buffers encoder of pb_impl.h. */
#include <stdlib.h>
#include <string.h>

#include "pb_impl.h"

enum { VARINT_MAX = 10 };

void rec__pb_free(rec__pb *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

size_t rec__pb_varint_len(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) v >>= 7, n++;
    return n;
}

/* Makes room for `more` bytes past n; 0 (and oom set) when it cannot. */
static int reserve(rec__pb *b, size_t more) {
    if (b->oom) return 0;
    if (b->cap - b->n >= more) return 1;
    size_t cap = b->cap ? b->cap : 256;
    while (cap - b->n < more) {
        if (cap > SIZE_MAX / 2) return b->oom = 1, 0;
        cap *= 2;
    }
    uint8_t *p = realloc(b->p, cap);
    if (!p) return b->oom = 1, 0;
    b->p = p;
    b->cap = cap;
    return 1;
}

void rec__pb_raw(rec__pb *b, const void *data, size_t n) {
    if (n && reserve(b, n)) memcpy(b->p + b->n, data, n), b->n += n;
}

/* v as a varint into t (VARINT_MAX bytes); its length. */
static size_t varint_to(uint8_t *t, uint64_t v) {
    size_t k = 0;
    for (; v >= 0x80; v >>= 7) t[k++] = (uint8_t)(v | 0x80);
    t[k++] = (uint8_t)v;
    return k;
}

void rec__pb_varint(rec__pb *b, uint64_t v) {
    uint8_t t[VARINT_MAX];
    rec__pb_raw(b, t, varint_to(t, v));
}

void rec__pb_key(rec__pb *b, int field, int wire) { rec__pb_varint(b, (uint64_t)field << 3 | (uint64_t)wire); }

void rec__pb_int(rec__pb *b, int field, int64_t v) {
    rec__pb_key(b, field, REC_PB_VARINT);
    rec__pb_varint(b, (uint64_t)v);  /* negative: two's complement, 10 bytes */
}

void rec__pb_float(rec__pb *b, int field, float v) {
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    const uint8_t t[4] = {(uint8_t)u, (uint8_t)(u >> 8), (uint8_t)(u >> 16), (uint8_t)(u >> 24)};
    rec__pb_key(b, field, REC_PB_I32);
    rec__pb_raw(b, t, sizeof t);
}

void rec__pb_bytes(rec__pb *b, int field, const void *data, size_t n) {
    rec__pb_key(b, field, REC_PB_LEN);
    rec__pb_varint(b, n);
    rec__pb_raw(b, data, n);
}

void rec__pb_str(rec__pb *b, int field, const char *s) { rec__pb_bytes(b, field, s, strlen(s)); }

/* The mark is the offset of the reserved length bytes; the body starts VARINT_MAX after it. */
size_t rec__pb_begin(rec__pb *b, int field) {
    rec__pb_key(b, field, REC_PB_LEN);
    const size_t mark = b->n;
    if (reserve(b, VARINT_MAX)) b->n += VARINT_MAX;
    return mark;
}

void rec__pb_end(rec__pb *b, size_t mark) {
    if (b->oom) return;
    const size_t body = mark + VARINT_MAX, len = b->n - body;
    uint8_t t[VARINT_MAX];
    const size_t k = varint_to(t, len);
    memcpy(b->p + mark, t, k);
    memmove(b->p + mark + k, b->p + body, len);
    b->n = mark + k + len;
}
