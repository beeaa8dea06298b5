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

uint32_t rec_crc32_threads(uint32_t crc, const void *p, size_t n, int threads) {
    enum { PIECE_MIN = 1 << 20, PIECES_MAX = 256 };
    size_t pieces = n / PIECE_MIN;
    if (threads < 2 || pieces < 2) return rec_crc32(crc, p, n);
    if (pieces > (size_t)threads) pieces = (size_t)threads;
    if (pieces > PIECES_MAX) pieces = PIECES_MAX;
    uint32_t part[PIECES_MAX];
    const size_t len = n / pieces;
#pragma omp parallel for num_threads((int)pieces) schedule(static, 1)
    for (size_t i = 0; i < pieces; i++) {
        const size_t a = i * len, e = i + 1 == pieces ? n : a + len;
        part[i] = rec_crc32(0, (const unsigned char *)p + a, e - a);
    }
    for (size_t i = 0; i < pieces; i++) crc = (uint32_t)crc32_combine(crc, part[i], (z_off_t)(i + 1 == pieces ? n - i * len : len));
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
