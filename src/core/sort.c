/* Sorting (core.h): the radix order of non-negative keys. */
#include <string.h>

#include "rectrain/core.h"

enum { DIGIT_BITS = 8, DIGITS = 1 << DIGIT_BITS }; /* a slice's thousands of ids: small histograms */

void rec_radix_order(const int64_t *keys, int64_t n, int bits, int32_t *order, int32_t *tmp) {
    for (int64_t i = 0; i < n; i++) order[i] = (int32_t)i;
    int32_t *src = order, *dst = tmp;
    int64_t count[DIGITS];
    for (int shift = 0; shift < bits; shift += DIGIT_BITS) {
        memset(count, 0, sizeof count);
        for (int64_t i = 0; i < n; i++) count[(uint64_t)keys[i] >> shift & (DIGITS - 1)]++;
        if (n == 0 || count[(uint64_t)keys[0] >> shift & (DIGITS - 1)] == n) continue; /* one digit: nothing moves */
        int64_t start = 0;
        for (int d = 0; d < DIGITS; d++) { /* counts -> the first slot of each digit */
            const int64_t c = count[d];
            count[d] = start;
            start += c;
        }
        for (int64_t i = 0; i < n; i++) dst[count[(uint64_t)keys[src[i]] >> shift & (DIGITS - 1)]++] = src[i];
        int32_t *t = src;
        src = dst;
        dst = t;
    }
    if (src != order) memcpy(order, src, sizeof(int32_t) * (size_t)n);
}
