/* xoshiro256** (Blackman & Vigna) seeded through splitmix64; the step itself is inline in
 * core.h. */
#include <math.h>

#include "rectrain/core.h"

void rec_rng_seed(rec_rng *r, uint64_t seed, uint64_t stream) {
    uint64_t x = rec_mix64(seed) ^ rec_mix64(stream * 0xd1342543de82ef95ULL + 1);
    for (int i = 0; i < 4; i++) {
        x += 0x9e3779b97f4a7c15ULL;
        r->s[i] = rec_mix64(x);
    }
}

uint64_t rec_rng_below(rec_rng *r, uint64_t n) {
    unsigned __int128 m = (unsigned __int128)rec_rng_u64(r) * n;
    uint64_t lo = (uint64_t)m;
    if (lo < n) {
        uint64_t floor = -n % n;
        while (lo < floor) {
            m = (unsigned __int128)rec_rng_u64(r) * n;
            lo = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

double rec_rng_normal(rec_rng *r) {
    double u = 1.0 - rec_rng_uniform(r), v = rec_rng_uniform(r);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}
