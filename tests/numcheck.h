/* Numeric helpers shared by the tests that compare fp32 fast paths against float64 references
 * (tests/test_nn.c, test_layers.c, test_embed.c, test_embed_sched.c): a test RNG, fills,
 * float64 copies, NaN poisoning of outputs and the per-element tolerance count. */
#ifndef RECTRAIN_TESTS_NUMCHECK_H
#define RECTRAIN_TESTS_NUMCHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "rectrain/core.h"

/* The test's random stream; each test seeds it in main. */
static rec_rng g_rng;

/* a (n) uniform in [lo, hi). */
static inline void fill_uniform(float *a, size_t n, float lo, float hi) {
    for (size_t i = 0; i < n; i++) a[i] = lo + (hi - lo) * (float)rec_rng_uniform(&g_rng);
}

/* A malloc'ed float64 copy of a (n), of the absolute values if absval. */
static inline double *to_f64(const float *a, size_t n, int absval) {
    double *d = malloc((n ? n : 1) * sizeof(double));
    for (size_t i = 0; i < n; i++) d[i] = absval ? fabs((double)a[i]) : (double)a[i];
    return d;
}

/* Fills an output with NaN before the call under test, so an element it fails to write fails. */
static inline void poison(float *a, size_t n) {
    for (size_t i = 0; i < n; i++) a[i] = NAN;
}

/* Number of elements of got (n) outside |got - ref| <= tol * S; prints the first. */
static inline int count_bad(const char *what, const float *got, const double *ref, const double *S, size_t n,
                            double tol) {
    int bad = 0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - ref[i]);
        if (!(e <= tol * S[i])) {
            if (!bad) fprintf(stderr, "  %s[%zu]: got %.9g ref %.9g (S %.3g)\n", what, i, got[i], ref[i], S[i]);
            bad++;
        }
    }
    return bad;
}

#endif
