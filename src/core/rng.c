/* xoshiro256** (Blackman & Vigna) seeded through splitmix64. */
#include <math.h>

#include "rectrain/core.h"

uint64_t rec_mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

void rec_rng_seed(rec_rng *r, uint64_t seed, uint64_t stream) {
    uint64_t x = rec_mix64(seed) ^ rec_mix64(stream * 0xd1342543de82ef95ULL + 1);
    for (int i = 0; i < 4; i++) {
        x += 0x9e3779b97f4a7c15ULL;
        r->s[i] = rec_mix64(x);
    }
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rec_rng_u64(rec_rng *r) {
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double rec_rng_uniform(rec_rng *r) { return (double)(rec_rng_u64(r) >> 11) * 0x1.0p-53; }

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
