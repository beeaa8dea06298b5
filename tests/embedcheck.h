/* Helpers shared by the embedding engine's tests and fuzz target (tests/test_embed_sched.c,
 * tests/fuzz/fuzz_embed.c): float64 copies of an engine's tables, the forward reference with
 * its tolerance scale, and a bitwise comparison of two engines. */
#ifndef RECTRAIN_TESTS_EMBEDCHECK_H
#define RECTRAIN_TESTS_EMBEDCHECK_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rectrain/embed.h"

/* Float64 copies of e's tables (absolute values if absval); free with free_tables. */
static inline double **tables_f64(rec_embed *e, int absval) {
    const int F = rec_embed_tables(e);
    double **t = calloc((size_t)F + 1, sizeof *t);
    if (!t) abort();
    for (int f = 0; f < F; f++) {
        const size_t n = (size_t)rec_embed_rows(e, f) * (size_t)rec_embed_dim(e, f);
        const float *x = rec_embed_table(e, f);
        t[f] = malloc((n + 1) * sizeof(double));
        if (!t[f]) abort();
        for (size_t i = 0; i < n; i++) t[f][i] = absval ? fabs(x[i]) : x[i];
    }
    return t;
}

static inline void free_tables(double **t, int F) {
    for (int f = 0; f < F; f++) free(t[f]);
    free(t);
}

/* ref and S (B, W) of e's forward over batch features first.. under `pooling`: ref from the
 * tables, S the same pooling over |T| and |w| (the scale of the fp32 rounding error). */
static inline void forward_refs(rec_embed *e, rec_pooling pooling, rec_batch *b, int first, double *ref, double *S) {
    const int F = rec_embed_tables(e);
    int64_t *rows = malloc(((size_t)F + 1) * sizeof *rows);
    int *dims = malloc(((size_t)F + 1) * sizeof *dims);
    float **saved = calloc((size_t)F + 1, sizeof *saved);
    if (!rows || !dims || !saved) abort();
    for (int f = 0; f < F; f++) rows[f] = rec_embed_rows(e, f), dims[f] = rec_embed_dim(e, f);
    double **T = tables_f64(e, 0), **A = tables_f64(e, 1);
    rec_embed_forward_ref(F, rows, dims, pooling, b, first, (const double *const *)T, ref);
    for (int f = 0; f < F; f++) { /* |w| for S */
        rec_jagged *j = &b->sparse[first + f];
        saved[f] = j->weights;
        if (!j->weights) continue;
        const int64_t n = j->offsets[b->n];
        float *aw = malloc((size_t)(n + 1) * sizeof(float));
        if (!aw) abort();
        for (int64_t k = 0; k < n; k++) aw[k] = fabsf(j->weights[k]);
        j->weights = aw;
    }
    rec_embed_forward_ref(F, rows, dims, pooling, b, first, (const double *const *)A, S);
    for (int f = 0; f < F; f++) {
        if (b->sparse[first + f].weights != saved[f]) free(b->sparse[first + f].weights);
        b->sparse[first + f].weights = saved[f];
    }
    free_tables(T, F);
    free_tables(A, F);
    free(rows), free(dims), free(saved);
}

/* Do a and b (same shapes) hold the same bits in every table and optimizer state? */
static inline int same_bits(rec_embed *a, rec_embed *b) {
    for (int f = 0; f < rec_embed_tables(a); f++) {
        const size_t n = (size_t)rec_embed_rows(a, f) * (size_t)rec_embed_dim(a, f);
        if (memcmp(rec_embed_table(a, f), rec_embed_table(b, f), n * sizeof(float))) return 0;
        const size_t ns = rec_embed_state_len(a, f);
        if (ns && memcmp(rec_embed_state(a, f), rec_embed_state(b, f), ns * sizeof(float))) return 0;
    }
    return 1;
}

#endif
