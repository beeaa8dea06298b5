/* Forward kernels of the embedding engine: one bag range of one table, pooled (embed.h,
 * "Schedules"). Three kernels, each with or without per-id weights and software prefetch, and
 * each compiled once per id width (rec_jagged.wide: the id is a compile-time-typed load, so a
 * 32-bit id stream costs half the bytes and no widening pass):
 *
 *   GENERIC  runtime E; the bag's sum is accumulated in its output row.
 *   FIXED    E a compile-time constant (1, 2, 4, 8, 16, 32, 64, 128): the whole loop is
 *            specialised, so the row add is E/8 vector adds with no loop or tail, and the
 *            sum stays in registers for E <= 64. A range of one-id bags (pool_job.one, found
 *            by the driver's offset scan) is pooled without reading the offsets: Kaggle's 26
 *            one-hot tables, uniform table/fixed/pf8, 1.17x faster forward (in turns, same
 *            process; 1.08-1.11x more from vectorising that scan, forward.c).
 *   BLOCKED  16 columns at a time (two 8-wide registers), the bag's ids inside; tail columns
 *            by the generic loop.
 *
 * and the row pass of split ROW (embed_pool_rows): one-hot bags of a class of tables (one
 * FIXED dim, id width and weighting), row by row, every table's slice of row r before row
 * r + 1, each bag pooled as FIXED pools a one-id bag (pool_id), the rows of the tables with
 * a pf requested pf batch rows ahead.
 *
 * Tables stored in bf16 (rec_embed_config.bf16) run the same kernels compiled once more with
 * the row loads widening bf16 to fp32 (exact: a bf16 value is an fp32 value with 16 zero low
 * bits), so a bf16 table pools to the bits an fp32 table holding the same values gives.
 *
 * Every kernel computes each output element in one canonical order: acc = 0, then for each
 * full group of 4 consecutive ids of the bag acc = acc + ((t0 + t1) + (t2 + t3)) (weighted:
 * acc = acc + (fmaf(w1, t1, w0 t0) + fmaf(w3, t3, w2 t2))), then the remaining 0..3 ids one at
 * a time, acc = acc + t (fmaf(w, t, acc)); acc / L for MEAN. The grouping gives the adder four
 * independent rows per step: one running sum per bag would chain every id through a 4-cycle
 * add, the bottleneck of long bags. All kernels therefore produce the same bits (embed.h);
 * tests/test_embed_sched.c checks that they do.
 *
 * FIXED and BLOCKED share one bag body (bag_sum: the sum in vector registers, one copy per
 * E, weighting, id width and prefetch); GENERIC, which sums in the output row for a runtime
 * E, writes its group-of-4 loop out on its own.
 *
 * Prefetch: while id k is summed, the row of id k + pf (every cache line it spans) is
 * requested, looking across bag boundaries within the item [off[b0], off[b1]) because one-hot
 * features hold a single id per bag. In checked mode the prefetched id is range-checked too
 * (a prefetch cannot fault, but the address computation must stay inside the object). And
 * when bag r starts, the output lines of bag r + pf are requested for writing: a table's
 * slice of an output row is a few bytes W floats from the next row's, so without it each
 * bag's store misses (a read for ownership) and one-hot bags, which are little else, wait on
 * it (Kaggle's 26 one-hot tables: 0.49 -> 0.33 ms per batch of 2048 on 2 cores). */
#include <assert.h>
#include <math.h>
#include <stdint.h>

#include <immintrin.h>

#include "embed_impl.h"

enum { BLOCK_COLS = 16 };

/* Every cache line of the `bytes` bytes at p: for reading, or for writing (a store will follow). */
static inline __attribute__((always_inline)) void prefetch_span(const void *p, size_t bytes, const int write) {
    const uintptr_t a = (uintptr_t)p, last = a + (uintptr_t)bytes - 1;
    for (uintptr_t l = a & ~(uintptr_t)63; l <= last; l += 64) {
        if (write) __builtin_prefetch((const void *)l, 1);
        else __builtin_prefetch((const void *)l);
    }
}

/* Bytes of one stored value: bf16 (b16, a compile-time constant in every kernel) or fp32. */
#define ESZ(b16) ((b16) ? sizeof(uint16_t) : sizeof(float))

/* Row id of a table T of dim E, or the value `off` columns into it. */
static inline __attribute__((always_inline)) const void *row_at(const void *T, int64_t id, int64_t E, const int b16) {
    return (const char *)T + (size_t)id * (size_t)E * ESZ(b16);
}

static inline __attribute__((always_inline)) void prefetch_row(const void *T, int64_t id, int E, const int b16) {
    prefetch_span(row_at(T, id, E, b16), (size_t)E * ESZ(b16), 0);
}

/* The output lines of bag r + pf, for writing, if it is in the item. */
static inline void prefetch_out(const pool_job *j, int64_t r, int64_t b1) {
    if (r + j->pf < b1) prefetch_span(j->out + (size_t)(r + j->pf) * (size_t)j->W, (size_t)j->E * sizeof(float), 1);
}

/* Id k of an id array of width `wide` (a compile-time constant in every kernel). */
static inline __attribute__((always_inline)) int64_t id_at(const void *restrict idx, int64_t k, const int wide) {
    return wide ? ((const int64_t *)idx)[k] : ((const int32_t *)idx)[k];
}

static inline __attribute__((always_inline)) void prefetch_ahead(const pool_job *j, int64_t k, int64_t end,
                                                                 const int wide, const int b16) {
    if (k + j->pf < end) {
        const int64_t p = id_at(j->idx, k + j->pf, wide);
        if (!j->check || (uint64_t)p < (uint64_t)j->R) prefetch_row(j->T, p, j->E, b16);
    }
}

/* A bag's running sum for a compile-time E: E / 8 8-wide vectors, or E (< 8) scalars. Held
 * as vector types because gcc 12 kept a float acc[128], of which E are used, on the stack
 * and rebuilt vectors from scalars around every one-id bag: bag by bag over Kaggle's 26
 * one-hot dim-16 tables (a throwaway driver, 2 threads) that took 0.54 ms per batch of 2048,
 * with vector sums 0.27. BLOCKED's float acc[16] fared the same: a uniform table/blocked/pf16
 * forward took 72-90 ms per batch on model A and 63 on C, with vector sums 49-57 and 45. Each
 * element sees the same operations in the same order either way, so the bits are those of
 * every other kernel. */
typedef float vf8 __attribute__((vector_size(32)));
typedef float vf8u __attribute__((vector_size(32), aligned(4), may_alias)); /* a row's floats, any alignment */
typedef struct bag_acc {
    vf8 v[16];
    float s[4];
} bag_acc;

/* Values c .. c + 7 of a stored row, as fp32; value c alone. */
static inline __attribute__((always_inline)) vf8 ld8(const void *row, int c, const int b16) {
    if (!b16) return *(const vf8u *)((const float *)row + c);
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + c));
    return (vf8)_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
static inline __attribute__((always_inline)) float ld1(const void *row, int c, const int b16) {
    if (!b16) return ((const float *)row)[c];
    union { uint32_t u; float f; } v = {(uint32_t)((const uint16_t *)row)[c] << 16};
    return v.f;
}
static inline __attribute__((always_inline)) vf8 fma8(float a, vf8 b, vf8 c) {
    return (vf8)_mm256_fmadd_ps(_mm256_set1_ps(a), (__m256)b, (__m256)c);
}

static inline __attribute__((always_inline)) void acc_zero(bag_acc *a, const int E) {
    if (E >= 8)
        for (int v = 0; v < E / 8; v++) a->v[v] = (vf8){0};
    else
        for (int c = 0; c < E; c++) a->s[c] = 0.0f;
}

/* acc += (t0 + t1) + (t2 + t3), or weighted acc += fmaf(w1, t1, w0 t0) + fmaf(w3, t3, w2 t2). */
static inline __attribute__((always_inline)) void acc_add4(bag_acc *a, const void *const *t, const float *w, const int E,
                                                          const int weighted, const int b16) {
    if (E >= 8) {
        for (int v = 0, c = 0; v < E / 8; v++, c += 8)
            a->v[v] += weighted ? fma8(w[1], ld8(t[1], c, b16), w[0] * ld8(t[0], c, b16)) +
                                      fma8(w[3], ld8(t[3], c, b16), w[2] * ld8(t[2], c, b16))
                                : (ld8(t[0], c, b16) + ld8(t[1], c, b16)) + (ld8(t[2], c, b16) + ld8(t[3], c, b16));
    } else {
        for (int c = 0; c < E; c++)
            a->s[c] += weighted ? fmaf(w[1], ld1(t[1], c, b16), w[0] * ld1(t[0], c, b16)) +
                                      fmaf(w[3], ld1(t[3], c, b16), w[2] * ld1(t[2], c, b16))
                                : (ld1(t[0], c, b16) + ld1(t[1], c, b16)) + (ld1(t[2], c, b16) + ld1(t[3], c, b16));
    }
}

/* acc += t, or weighted acc = fmaf(w, t, acc). */
static inline __attribute__((always_inline)) void acc_add1(bag_acc *a, const void *t, float w, const int E,
                                                          const int weighted, const int b16) {
    if (E >= 8) {
        for (int v = 0, c = 0; v < E / 8; v++, c += 8)
            a->v[v] = weighted ? fma8(w, ld8(t, c, b16), a->v[v]) : a->v[v] + ld8(t, c, b16);
    } else {
        for (int c = 0; c < E; c++) a->s[c] = weighted ? fmaf(w, ld1(t, c, b16), a->s[c]) : a->s[c] + ld1(t, c, b16);
    }
}

/* o = acc, or acc / L for a MEAN bag (L > 0). */
static inline __attribute__((always_inline)) void acc_store(const bag_acc *a, float *restrict o, float L, const int E) {
    if (E >= 8) {
        for (int v = 0, c = 0; v < E / 8; v++, c += 8) *(vf8u *)(o + c) = L > 0 ? a->v[v] / L : a->v[v];
    } else {
        for (int c = 0; c < E; c++) o[c] = L > 0 ? a->s[c] / L : a->s[c];
    }
}

/* Bag r's columns [c0, c0 + E) for a compile-time E, weighted or not, its sum in registers:
 * the FIXED kernel's bag (E the dim, stride E, c0 0) and BLOCKED's 16-column block (stride
 * the dim). With `pf` the rows pf ids ahead (up to `end`) are prefetched. Returns -1 or the
 * position of a bad id (checked mode). */
static inline __attribute__((always_inline)) int64_t bag_sum(const pool_job *j, int64_t r, int64_t end, const int E,
                                                             int64_t stride, int c0, const int weighted,
                                                             const int wide, const int pf, const int b16) {
    const void *restrict T = (const char *)j->T + (size_t)c0 * ESZ(b16);
    const void *restrict idx = j->idx;
    const float *restrict w = j->w;
    const int64_t lo = j->off[r], hi = j->off[r + 1], R = j->R;
    bag_acc acc;
    acc_zero(&acc, E);
    int64_t k = lo;
    for (; k + 4 <= hi; k += 4) {
        if (pf)
            for (int q = 0; q < 4; q++) prefetch_ahead(j, k + q, end, wide, b16);
        const void *t[4];
        for (int q = 0; q < 4; q++) {
            const int64_t id = id_at(idx, k + q, wide);
            if (j->check && (uint64_t)id >= (uint64_t)R) return k + q;
            t[q] = row_at(T, id, stride, b16);
        }
        acc_add4(&acc, t, weighted ? w + k : NULL, E, weighted, b16);
    }
    for (; k < hi; k++) {
        if (pf) prefetch_ahead(j, k, end, wide, b16);
        const int64_t id = id_at(idx, k, wide);
        if (j->check && (uint64_t)id >= (uint64_t)R) return k;
        acc_add1(&acc, row_at(T, id, stride, b16), weighted ? w[k] : 0.0f, E, weighted, b16);
    }
    acc_store(&acc, j->out + (size_t)r * j->W + c0, j->mean && hi > lo ? (float)(hi - lo) : 0.0f, E);
    return -1;
}

/* A one-id bag's output o from row id of T (dim E): 0 + t (fmaf(w, t, 0) weighted), the
 * canonical order's, MEAN's / 1 being exact. */
static inline __attribute__((always_inline)) void pool_id(const void *restrict T, int64_t id, float w,
                                                          float *restrict o, const int E, const int weighted,
                                                          const int b16) {
    bag_acc acc;
    acc_zero(&acc, E);
    acc_add1(&acc, row_at(T, id, E, b16), w, E, weighted, b16);
    acc_store(&acc, o, 0.0f, E);
}

/* One-id bags [b0, b1) for a compile-time E (j->one): bag r's id is at off[b0] + r - b0, so
 * the offsets are not read. */
static inline __attribute__((always_inline)) int64_t pool_one(const pool_job *j, int64_t b0, int64_t b1, const int E,
                                                              const int weighted, const int wide, const int b16) {
    const void *restrict T = j->T;
    const int64_t k0 = j->off[b0] - b0, end = j->off[b1], R = j->R;
    for (int64_t r = b0; r < b1; r++) {
        const int64_t k = k0 + r;
        if (j->pf) {
            prefetch_out(j, r, b1);
            prefetch_ahead(j, k, end, wide, b16);
        }
        const int64_t id = id_at(j->idx, k, wide);
        if (j->check && (uint64_t)id >= (uint64_t)R) return k;
        pool_id(T, id, weighted ? j->w[k] : 0.0f, j->out + (size_t)r * j->W, E, weighted, b16);
    }
    return -1;
}

/* The register kernel: bags [b0, b1) (inlined into one function per E and id width), each
 * after the output lines of bag r + pf are prefetched. */
static inline __attribute__((always_inline)) int64_t pool_reg(const pool_job *j, int64_t b0, int64_t b1, const int E,
                                                              const int weighted, const int wide, const int b16) {
    if (j->one) return pool_one(j, b0, b1, E, weighted, wide, b16);
    const int64_t end = j->off[b1];
    for (int64_t r = b0; r < b1; r++) {
        int64_t k;
        if (j->pf) {
            prefetch_out(j, r, b1);
            k = bag_sum(j, r, end, E, E, 0, weighted, wide, 1, b16);
        } else {
            k = bag_sum(j, r, end, E, E, 0, weighted, wide, 0, b16);
        }
        if (k >= 0) return k;
    }
    return -1;
}

/* Columns [c0, c1) of bags [b0, b1), runtime E, accumulated in the output rows. */
static inline __attribute__((always_inline)) int64_t pool_cols(const pool_job *j, int64_t b0, int64_t b1, int c0,
                                                               int c1, int pf, const int wide, const int b16) {
    const void *restrict T = j->T;
    const void *restrict idx = j->idx;
    const float *restrict w = j->w;
    const int64_t end = j->off[b1], R = j->R;
    const int E = j->E;
    for (int64_t r = b0; r < b1; r++) {
        const int64_t lo = j->off[r], hi = j->off[r + 1];
        if (pf) prefetch_out(j, r, b1);
        float *restrict o = j->out + (size_t)r * j->W;
        for (int c = c0; c < c1; c++) o[c] = 0.0f;
        int64_t k = lo;
        for (; k + 4 <= hi; k += 4) {
            if (pf)
                for (int q = 0; q < 4; q++) prefetch_ahead(j, k + q, end, wide, b16);
            const void *restrict t[4];
            for (int q = 0; q < 4; q++) {
                const int64_t id = id_at(idx, k + q, wide);
                if (j->check && (uint64_t)id >= (uint64_t)R) return k + q;
                t[q] = row_at(T, id, E, b16);
            }
            if (w) {
                for (int c = c0; c < c1; c++)
                    o[c] += fmaf(w[k + 1], ld1(t[1], c, b16), w[k] * ld1(t[0], c, b16)) +
                            fmaf(w[k + 3], ld1(t[3], c, b16), w[k + 2] * ld1(t[2], c, b16));
            } else {
                for (int c = c0; c < c1; c++)
                    o[c] += (ld1(t[0], c, b16) + ld1(t[1], c, b16)) + (ld1(t[2], c, b16) + ld1(t[3], c, b16));
            }
        }
        for (; k < hi; k++) {
            if (pf) prefetch_ahead(j, k, end, wide, b16);
            const int64_t id = id_at(idx, k, wide);
            if (j->check && (uint64_t)id >= (uint64_t)R) return k;
            const void *restrict t = row_at(T, id, E, b16);
            if (w) {
                const float wk = w[k];
                for (int c = c0; c < c1; c++) o[c] = fmaf(wk, ld1(t, c, b16), o[c]);
            } else {
                for (int c = c0; c < c1; c++) o[c] += ld1(t, c, b16);
            }
        }
        if (j->mean && hi > lo) {
            const float L = (float)(hi - lo);
            for (int c = c0; c < c1; c++) o[c] /= L;
        }
    }
    return -1;
}

static inline __attribute__((always_inline)) int64_t pool_generic(const pool_job *j, int64_t b0, int64_t b1,
                                                                  const int wide, const int b16) {
    return wide ? pool_cols(j, b0, b1, 0, j->E, j->pf, 1, b16) : pool_cols(j, b0, b1, 0, j->E, j->pf, 0, b16);
}

/* Bag r's 16-column block [c0, c0 + 16): the ids inside, the block's sum in registers. */
static inline __attribute__((always_inline)) int64_t block16(const pool_job *j, int64_t r, int64_t end, int c0, int pf,
                                                             const int wide, const int b16) {
    if (j->w)
        return pf ? bag_sum(j, r, end, BLOCK_COLS, j->E, c0, 1, wide, 1, b16)
                  : bag_sum(j, r, end, BLOCK_COLS, j->E, c0, 1, wide, 0, b16);
    return pf ? bag_sum(j, r, end, BLOCK_COLS, j->E, c0, 0, wide, 1, b16)
              : bag_sum(j, r, end, BLOCK_COLS, j->E, c0, 0, wide, 0, b16);
}

/* BLOCKED: per bag, each full 16-column block over all its ids (the first block carries the
 * prefetch; the later ones find the rows in L1/L2), then the tail columns. */
static inline __attribute__((always_inline)) int64_t pool_blocked(const pool_job *j, int64_t b0, int64_t b1,
                                                                  const int wide, const int b16) {
    const int E = j->E, full = E / BLOCK_COLS * BLOCK_COLS;
    const int64_t end = j->off[b1];
    for (int64_t r = b0; r < b1; r++) {
        if (j->pf) prefetch_out(j, r, b1);
        for (int c0 = 0; c0 < full; c0 += BLOCK_COLS) {
            const int64_t k = block16(j, r, end, c0, c0 == 0 && j->pf, wide, b16);
            if (k >= 0) return k;
        }
        if (full < E) {
            const int64_t k = pool_cols(j, r, r + 1, full, E, 0, wide, b16);
            if (k >= 0) return k;
        }
    }
    return -1;
}

#define FIXED_CASE(EE)                                                                   \
    case EE:                                                                             \
        return j->w ? pool_reg(j, b0, b1, EE, 1, wide, b16) : pool_reg(j, b0, b1, EE, 0, wide, b16);

static inline __attribute__((always_inline)) int64_t pool_fixed(const pool_job *j, int64_t b0, int64_t b1,
                                                                const int wide, const int b16) {
    switch (j->E) {
        EMBED_FIXED_DIMS(FIXED_CASE)
    default:
        return pool_generic(j, b0, b1, wide, b16);
    }
}

/* The row pass's loop for a compile-time E: each step is pool_id, row by row; before row r,
 * each far table (one whose schedule has a pf) has its row for batch row r + pf requested,
 * up to lim (the first call of a run of rows, `cold`, requests rows [r0, r0 + pf) first).
 * Only the far tables: a step of a table whose rows are cached needs no prefetch, and one for
 * it takes a fill buffer the misses need (perf: with every table prefetched, 69% of the
 * loop's samples sat on the prefetch instruction, waiting for a free fill buffer). The old
 * form, one cursor pf (row, table) steps ahead over every table of a class, took 0.33-0.59 ms
 * per Kaggle batch with the large tables' rows from memory, against 0.27-0.31 for
 * table/fixed/pf16; the per-table form, pf4 on the 8 tables over 100k rows, times in
 * forward.c (phase 3). With the rows in the last-level cache (the bench's 4 Kaggle batches)
 * the out-of-order core keeps enough steps' misses in flight on its own: there row/fixed/pf0
 * took 0.143 ms per batch against 0.158-0.160 for pf4 on the large tables and 0.126-0.133
 * for a row-major copy with no checks (the same process, in turns, 2026-11-24; two runs of
 * three, the first slower throughout: 0.203, 0.211 and 0.197-0.220). */
static inline __attribute__((always_inline)) void prefetch_far(const row_table *p, int64_t r, const int E,
                                                                const int wide, const int check, const int b16) {
    const int64_t id = id_at(p->idx, r, wide);
    if (!check || (uint64_t)id < (uint64_t)p->R) prefetch_row(p->T, id, E, b16);
}

static inline __attribute__((always_inline)) int rows_loop(const row_job *j, int64_t r0, int64_t r1, int64_t lim,
                                                           int cold, int64_t *bad_row,
                                                           const int E, const int weighted, const int wide,
                                                           const int b16) {
    const row_table *restrict t = j->t;
    const int n = j->n, nfar = j->nfar, check = j->check;
    if (cold)
        for (int q = 0; q < nfar; q++) { /* the rows before the first r + pf */
            const row_table *p = &t[j->far[q]];
            for (int64_t r = r0; r < r0 + p->pf && r < lim; r++) prefetch_far(p, r, E, wide, check, b16);
        }
    for (int64_t r = r0; r < r1; r++) {
        for (int q = 0; q < nfar; q++) {
            const row_table *p = &t[j->far[q]];
            if (r + p->pf < lim) prefetch_far(p, r + p->pf, E, wide, check, b16);
        }
        float *restrict o = j->out + (size_t)r * (size_t)j->W;
        for (int i = 0; i < n; i++) {
            const int64_t id = id_at(t[i].idx, r, wide);
            if (check && (uint64_t)id >= (uint64_t)t[i].R) {
                *bad_row = r;
                return i;
            }
            pool_id(t[i].T, id, weighted ? t[i].w[r] : 0.0f, o + t[i].col, E, weighted, b16);
        }
    }
    return -1;
}

#define ROWS_CASE(EE)                                                                   \
    case EE:                                                                            \
        return j->weighted ? rows_loop(j, r0, r1, lim, cold, bad_row, EE, 1, wide, b16) \
                           : rows_loop(j, r0, r1, lim, cold, bad_row, EE, 0, wide, b16);

static inline __attribute__((always_inline)) int rows_dispatch(const row_job *j, int64_t r0, int64_t r1, int64_t lim,
                                                               int cold, int64_t *bad_row, const int wide,
                                                               const int b16) {
    switch (j->E) {
        EMBED_FIXED_DIMS(ROWS_CASE)
    default:
        assert(!"a row class of a dim FIXED has no code for"); /* the driver builds none */
        return -1;
    }
}

static int pool_rows32(const row_job *j, int64_t r0, int64_t r1, int64_t lim, int cold, int64_t *bad_row) {
    return rows_dispatch(j, r0, r1, lim, cold, bad_row, 0, 0);
}
static int pool_rows64(const row_job *j, int64_t r0, int64_t r1, int64_t lim, int cold, int64_t *bad_row) {
    return rows_dispatch(j, r0, r1, lim, cold, bad_row, 1, 0);
}
static int pool_rows32_b16(const row_job *j, int64_t r0, int64_t r1, int64_t lim, int cold, int64_t *bad_row) {
    return rows_dispatch(j, r0, r1, lim, cold, bad_row, 0, 1);
}
static int pool_rows64_b16(const row_job *j, int64_t r0, int64_t r1, int64_t lim, int cold, int64_t *bad_row) {
    return rows_dispatch(j, r0, r1, lim, cold, bad_row, 1, 1);
}

int embed_pool_rows(const row_job *j, int64_t r0, int64_t r1, int64_t lim, int cold, int64_t *bad_row) {
    if (r0 >= r1 || j->n <= 0) return -1;
    if (j->b16)
        return j->wide ? pool_rows64_b16(j, r0, r1, lim, cold, bad_row) : pool_rows32_b16(j, r0, r1, lim, cold, bad_row);
    return j->wide ? pool_rows64(j, r0, r1, lim, cold, bad_row) : pool_rows32(j, r0, r1, lim, cold, bad_row);
}

#define IS_FIXED_DIM(EE) || E == EE
int embed_kernel_native(int kernel, int E) {
    if (kernel == REC_KERN_FIXED) return 0 EMBED_FIXED_DIMS(IS_FIXED_DIM);
    if (kernel == REC_KERN_BLOCKED) return E >= BLOCK_COLS;
    return kernel == REC_KERN_GENERIC;
}
#undef IS_FIXED_DIM

/* One function per kernel and id width. (One always-inline dispatch compiled per width, all
 * kernels inlined into it, measured 6% slower on model D's 64-bit forward: code layout.) */
#define KERNELS(SFX, B16)                                                                                       \
    static int64_t pool_fixed32##SFX(const pool_job *j, int64_t b0, int64_t b1) { return pool_fixed(j, b0, b1, 0, B16); } \
    static int64_t pool_fixed64##SFX(const pool_job *j, int64_t b0, int64_t b1) { return pool_fixed(j, b0, b1, 1, B16); } \
    static int64_t pool_blocked32##SFX(const pool_job *j, int64_t b0, int64_t b1) {                              \
        return pool_blocked(j, b0, b1, 0, B16);                                                                  \
    }                                                                                                            \
    static int64_t pool_blocked64##SFX(const pool_job *j, int64_t b0, int64_t b1) {                              \
        return pool_blocked(j, b0, b1, 1, B16);                                                                  \
    }                                                                                                            \
    static int64_t pool_generic##SFX(const pool_job *j, int64_t b0, int64_t b1) {                                \
        return pool_generic(j, b0, b1, j->wide, B16);                                                            \
    }                                                                                                            \
    static int64_t embed_pool##SFX(const pool_job *j, int kernel, int64_t b0, int64_t b1) {                      \
        if (kernel == REC_KERN_FIXED) return j->wide ? pool_fixed64##SFX(j, b0, b1) : pool_fixed32##SFX(j, b0, b1); \
        if (kernel == REC_KERN_BLOCKED && j->E >= BLOCK_COLS)                                                     \
            return j->wide ? pool_blocked64##SFX(j, b0, b1) : pool_blocked32##SFX(j, b0, b1);                    \
        return pool_generic##SFX(j, b0, b1);                                                                     \
    }
KERNELS(_f32, 0)
KERNELS(_b16, 1)
#undef KERNELS

int64_t embed_pool(const pool_job *j, int kernel, int64_t b0, int64_t b1) {
    if (b0 >= b1) return -1;
    return j->b16 ? embed_pool_b16(j, kernel, b0, b1) : embed_pool_f32(j, kernel, b0, b1);
}

void rec_embed_scatter_bag(const float *d, int E, rec_pooling pooling, const int32_t *idx, const float *w, int64_t lo,
                           int64_t hi, float *G) {
    for (int64_t k = lo; k < hi; k++) {
        float coef = w ? w[k] : 1.0f;
        if (pooling == REC_POOL_MEAN) coef /= (float)(hi - lo);
        float *g = G + (size_t)idx[k] * E;
        for (int e = 0; e < E; e++) g[e] = fmaf(d[e], coef, g[e]);
    }
}

void rec_embed_pool_bags(const float *T, int64_t R, int E, rec_pooling pooling, const int64_t *off,
                         const int32_t *idx, const float *w, int64_t B, float *out, int W) {
    const pool_job j = {.T = T, .R = R, .E = E, .W = W, .off = off, .idx = idx, .w = w, .out = out,
                        .mean = pooling == REC_POOL_MEAN};
    embed_pool(&j, embed_kernel_native(REC_KERN_FIXED, E) ? REC_KERN_FIXED : REC_KERN_GENERIC, 0, B);
}
