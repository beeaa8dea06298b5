/* The cost model's unit costs that depend on where rows sit in memory (plan.h rec_plan_hw),
 * measured on this machine by the process that will train:
 *
 *   miss_s, cache_bytes  an owner's update of a row (rec_sparse_opt_step on its values and
 *                        state) timed at random rows of working sets from 256 KiB to 1 GiB:
 *                        the smallest set's cost is a cached row's, the largest one's a row
 *                        from memory; miss_s is their difference, and cache_bytes the working
 *                        set at which the cost is half way between (interpolated in log size)
 *                        — the size of the one LRU cache Che's approximation stands for
 *                        (plan.c che_misses), whatever levels the machine has.
 *   rep_row_s            a replicated row's bookkeeping per step on every rank (executor.c
 *                        replicated(): its gradient zeroed, its N all-to-all chunks summed, the
 *                        sums scanned for the used rows), over a buffer of REP_ROWS rows.
 *
 * The lookup itself (lookup_s: the record's sum, sort and a cached update) and the slice's
 * work are the executor's, measured by a training job (train prints unit_ns). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rectrain/core.h"
#include "rectrain/embed.h"
#include "sharding_impl.h"

enum { UPDATES = 1 << 15, REPEATS = 3, REP_ROWS = 1 << 14, SIZES = 7 }; /* 256 KiB * 4^k, k < SIZES */

/* Seconds per update of a random row among `rows` rows of E values and S state floats: the
 * least of REPEATS rounds (the others' noise is other work on the core). */
static double update_s(float *mem, int64_t rows, int E, int S, const rec_sparse_opt_config *o, const float *g) {
    uint64_t x = 0x9e3779b97f4a7c15u;
    const int64_t w = E + S;
    double best = INFINITY;
    for (int r = 0; r <= REPEATS; r++) { /* round 0 warms: the set's rows into whatever holds them */
        const double t0 = rec_now();
        for (int k = 0; k < UPDATES; k++) {
            x = rec_mix64(x + 1);
            float *row = mem + (int64_t)(x % (uint64_t)rows) * w;
            rec_sparse_opt_step(o, 0.01f, g, E, 0, E, row, S ? row + E : NULL);
        }
        const double t = (rec_now() - t0) / UPDATES;
        if (r > 0 && t < best) best = t;
    }
    return best;
}

static double rep_row_s(int E, int N) {
    const int64_t n = (int64_t)REP_ROWS * E, chunk = (n + N - 1) / N;
    float *grad = malloc(sizeof(float) * (size_t)(chunk * N)), *parts = malloc(sizeof(float) * (size_t)(chunk * N));
    if (!grad || !parts) {
        free(grad), free(parts);
        return 0;
    }
    for (int64_t i = 0; i < chunk * N; i++) parts[i] = (float)(i & 7);
    double best = INFINITY;
    volatile int used = 0;
    for (int rep = 0; rep < 3; rep++) {
        const double t0 = rec_now();
        memset(grad, 0, sizeof(float) * (size_t)(chunk * N));
        for (int64_t i = 0; i < chunk; i++) { /* one rank's chunk, summed in rank order */
            float v = 0;
            for (int r = 0; r < N; r++) v += parts[(size_t)r * chunk + i];
            grad[i] = v;
        }
        int any = 0;
        for (int64_t r = 0; r < REP_ROWS; r++)
            for (int e = 0; e < E; e++) any += grad[r * E + e] != 0.0f;
        used += any;
        const double t = rec_now() - t0;
        best = t < best ? t : best;
    }
    free(grad), free(parts);
    return best / REP_ROWS;
}

void rec_plan_measure_units(rec_plan_hw *hw, int E, rec_sparse_opt_kind opt, int N) {
    const int S = rec__state_floats(opt, E);
    const rec_sparse_opt_config o = rec_sparse_opt_defaults(opt, 0.01f);
    const size_t row_bytes = sizeof(float) * (size_t)(E + S);
    const int64_t most = ((int64_t)256 << 10 << 2 * (SIZES - 1)) / (int64_t)row_bytes;
    float *mem = calloc((size_t)most, row_bytes), *g = malloc(sizeof(float) * (size_t)E);
    hw->rep_row_s = rep_row_s(E, N > 1 ? N : 2);
    if (!mem || !g) {
        free(mem), free(g);
        return; /* no room to measure: the model keeps its cache terms off */
    }
    memset(mem, 0, (size_t)most * row_bytes); /* every page in: a first touch is a fault, not a miss */
    for (int e = 0; e < E; e++) g[e] = 1e-3f * (float)(e + 1);
    double t[SIZES], bytes[SIZES];
    for (int k = 0; k < SIZES; k++) {
        bytes[k] = (double)((int64_t)256 << 10 << 2 * k);
        t[k] = update_s(mem, (int64_t)(bytes[k] / (double)row_bytes), E, S, &o, g);
    }
    free(mem), free(g);
    for (int k = SIZES - 2; k >= 0; k--) /* a larger set costs no less: a high reading is noise */
        if (t[k] > t[k + 1]) t[k] = t[k + 1];
    const double hit = t[0], miss = t[SIZES - 1], half = (hit + miss) / 2;
    hw->miss_s = miss > hit ? miss - hit : 0;
    hw->cache_bytes = 0;
    if (!(hw->miss_s > 0.25 * hit)) return; /* no cache to speak of: every row costs alike */
    for (int k = 1; k < SIZES; k++)
        if (t[k] >= half) { /* between sets k - 1 and k, in log size */
            const double a = (half - t[k - 1]) / (t[k] - t[k - 1] > 0 ? t[k] - t[k - 1] : 1);
            hw->cache_bytes = bytes[k - 1] * pow(4.0, a < 0 ? 0 : a > 1 ? 1 : a);
            return;
        }
    hw->cache_bytes = bytes[SIZES - 1];
}
