/* CRC-32 over byte ranges, used by every checksummed binary format (.rshard, checkpoints).
 * zlib is already a dependency (gzip input); its crc32_z is table-driven with braiding and is
 * faster than a hand-written slice-by-8, so this is only a wrapper that keeps zlib's types out
 * of the public header. CRC-32C (TensorBoard's records) is SSE4.2's crc32 instruction. */
#include <nmmintrin.h>
#include <string.h>
#include <zlib.h>

#include "rectrain/core.h"

uint64_t rec_fnv1a64(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

uint32_t rec_crc32(uint32_t crc, const void *p, size_t n) {
    if (n == 0) return crc; /* zlib treats a NULL buffer as "give the initial value" */
    return (uint32_t)crc32_z((uLong)crc, (const Bytef *)p, (z_size_t)n);
}

/* rec_crc32_pool's pieces: piece i of `pieces` equal ones (the last takes the rest). */
typedef struct crc_job {
    const unsigned char *p;
    size_t n, len, pieces;
    uint32_t part[256];
} crc_job;

static rec_status crc_piece(void *ctx, int64_t i, int thread) {
    crc_job *j = ctx;
    const size_t a = (size_t)i * j->len, e = (size_t)i + 1 == j->pieces ? j->n : a + j->len;
    j->part[i] = rec_crc32(0, j->p + a, e - a);
    return REC_OK;
}

uint32_t rec_crc32_pool(uint32_t crc, const void *p, size_t n, rec_pool *pool) {
    enum { PIECE_MIN = 1 << 20 };
    crc_job j = {p, n, 0, n / PIECE_MIN, {0}};
    const size_t threads = pool ? (size_t)rec_pool_threads(pool) : 1;
    if (j.pieces > threads) j.pieces = threads;
    if (j.pieces > sizeof j.part / sizeof j.part[0]) j.pieces = sizeof j.part / sizeof j.part[0];
    if (j.pieces < 2) return rec_crc32(crc, p, n);
    j.len = n / j.pieces;
    rec_pool_run(pool, (int64_t)j.pieces, crc_piece, &j);  /* the pieces cannot fail */
    for (size_t i = 0; i < j.pieces; i++)
        crc = (uint32_t)crc32_combine(crc, j.part[i], (z_off_t)(i + 1 == j.pieces ? n - i * j.len : j.len));
    return crc;
}

uint32_t rec_crc32c(uint32_t crc, const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t c = ~crc;
    for (; n >= 8; n -= 8, b += 8) {
        uint64_t v;
        memcpy(&v, b, 8);
        c = _mm_crc32_u64(c, v);
    }
    for (; n; n--) c = _mm_crc32_u8((uint32_t)c, *b++);
    return ~(uint32_t)c;
}
