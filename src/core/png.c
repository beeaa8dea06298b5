/* A PNG writer for charts (core.h): 8-bit RGB, no interlace, one zlib IDAT (RFC 2083). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "rectrain/core.h"

static void put32(unsigned char *p, uint32_t v) {
    p[0] = (unsigned char)(v >> 24), p[1] = (unsigned char)(v >> 16), p[2] = (unsigned char)(v >> 8), p[3] = (unsigned char)v;
}

/* One chunk: length, type, data, CRC of type and data. */
static int chunk(FILE *f, const char *type, const unsigned char *data, uint32_t n) {
    unsigned char h[8];
    put32(h, n);
    memcpy(h + 4, type, 4);
    uint32_t crc = rec_crc32(0, h + 4, 4);
    crc = rec_crc32(crc, data, n);
    unsigned char c[4];
    put32(c, crc);
    return fwrite(h, 1, 8, f) == 8 && (n == 0 || fwrite(data, 1, n, f) == n) && fwrite(c, 1, 4, f) == 4;
}

rec_status rec_png_write(const char *path, int w, int h, const unsigned char *rgb) {
    const size_t row = (size_t)w * 3 + 1, raw_n = row * (size_t)h;
    unsigned char *raw = malloc(raw_n);
    uLongf z_n = compressBound((uLong)raw_n);
    unsigned char *z = malloc(z_n);
    if (!raw || !z) {
        free(raw);
        free(z);
        return rec_errorf(REC_ENOMEM, "%s: out of memory for a %dx%d image", path, w, h);
    }
    for (int y = 0; y < h; y++) {
        raw[(size_t)y * row] = 0;  /* filter: none */
        memcpy(raw + (size_t)y * row + 1, rgb + (size_t)y * w * 3, (size_t)w * 3);
    }
    const int zok = compress2(z, &z_n, raw, (uLong)raw_n, 6) == Z_OK;
    free(raw);
    rec_atomic_file a;
    FILE *f = NULL;
    const rec_status s = zok ? rec_atomic_fopen(&a, path, &f) : rec_errorf(REC_EIO, "%s: compression failed", path);
    if (s) {
        free(z);
        return s;
    }
    unsigned char ihdr[13] = {0};
    put32(ihdr, (uint32_t)w);
    put32(ihdr + 4, (uint32_t)h);
    ihdr[8] = 8;  /* bit depth */
    ihdr[9] = 2;  /* RGB */
    if (fwrite("\x89PNG\r\n\x1a\n", 1, 8, f) == 8 && chunk(f, "IHDR", ihdr, 13) && chunk(f, "IDAT", z, (uint32_t)z_n))
        chunk(f, "IEND", NULL, 0); /* a failed write is seen by the close */
    free(z);
    return rec_atomic_fclose(&a, f, "chart", REC_OK);
}
