/* The fused backward and sparse update (embed.h, rec_embed_backward_update): per table each
 * row's contributions are summed in batch order and the row is updated once by the
 * optimizer, without a dense gradient table of the model. A table's schedule picks how its
 * (id, bag) pairs are grouped (rec_embed_sort): DENSE accumulates straight from the batch into
 * a per-thread scratch as large as the largest table it serves (at most
 * REC_EMBED_DENSE_MAX_FLOATS floats); RADIX gathers the batch's (id, bag, coefficient) entries
 * into one scratch block (COUNT tables put their pairs there too) and sorts them; COUNT is a
 * counting sort straight from the batch. Every path adds the same terms in the same order, so
 * they give the same bits. The entry block is sized at init and grown only when a batch
 * carries more ids than any before (`grows` counts it).
 *
 * Threads: the tables are checked (and RADIX tables gathered) in a first parallel pass and
 * updated in a second, both taking tables largest estimated cost first from a shared counter;
 * no row is updated unless the whole batch passed the checks.
 */
#include <immintrin.h>
#include <math.h>
#include <omp.h>
#include <string.h>

#include "embed_impl.h"
#include "rectrain/core.h"

/* Orders the active tables (all, or only `only`) by estimated cost (embed_table_cost), largest
 * first. Returns the number of active tables. e->order keeps the previous call's order (a
 * permutation of all tables; init sets the identity) and is insertion-sorted from there: a
 * batch's costs are nearly those of the last, so this is O(F) in the steady state. */
static int order_tables(rec_embed *e, const rec_batch *b, int first_feature, int only) {
    if (only >= 0) {
        e->cost[only] = embed_table_cost(e, b, first_feature, only);
        e->order_all = 0;
        e->order[0] = only;
        return 1;
    }
    if (!e->order_all)
        for (int f = 0; f < e->F; f++) e->order[f] = f;
    e->order_all = 1;
    for (int f = 0; f < e->F; f++) e->cost[f] = embed_table_cost(e, b, first_feature, f);
    for (int i = 1; i < e->F; i++) {
        const int f = e->order[i];
        int k = i;
        while (k > 0 && e->cost[f] > e->cost[e->order[k - 1]]) {
            e->order[k] = e->order[k - 1];
            k--;
        }
        e->order[k] = f;
    }
    return e->F;
}

/* Gathers table f's entries (in batch position order) into ent[0, cap) and checks its bags,
 * recording the first bad (row) in e->err[f] (key INT64_MAX when none). Entries beyond cap
 * are counted, not written: that only happens when the offsets are corrupt, which is then
 * reported. Returns the number of entries. */
static int64_t gather(rec_embed *e, const rec_batch *b, int first_feature, int f, bag_entry *ent, int64_t cap) {
    const rec_jagged *j = &b->sparse[first_feature + f];
    const int64_t R = e->rows[f], B = b->n;
    const int mean = e->pooling == REC_POOL_MEAN, check = !e->trust;
    int64_t n = 0, maxid = 0;
    e->err[f].key = INT64_MAX;
    for (int64_t r = 0; r < B; r++) {
        if (!embed_bag_ok(j, r)) {
            e->err[f] = (embed_err){(int64_t)f * B + r, 2, j->offsets[r], j->offsets[r + 1]};
            break;
        }
        const int64_t lo = j->offsets[r], hi = j->offsets[r + 1];
        const float L = (float)(hi - lo);
        for (int64_t k = lo; k < hi; k++) {
            const int64_t id = rec_jagged_id(j, k);
            if (check && (uint64_t)id >= (uint64_t)R) {
                e->err[f] = (embed_err){(int64_t)f * B + r, 1, id, 0};
                e->maxid[f] = maxid;
                return n;
            }
            float c = j->weights ? j->weights[k] : 1.0f;
            if (mean) c /= L;
            if (n < cap) ent[n] = (bag_entry){id, {(int32_t)r, c}};
            n++;
            if (id > maxid) maxid = id;
        }
    }
    e->maxid[f] = maxid;
    return n;
}

/* RADIX: stable sort of a (n) by id (LSD radix, 8 bits a pass, only as many passes as maxid
 * needs; insertion sort for short runs), using t (n) as the second buffer. Stability keeps
 * each id's entries in batch position order. Returns whichever buffer holds the result. */
static bag_entry *sort_radix(bag_entry *a, bag_entry *t, int64_t n, uint64_t maxid) {
    if (n <= 32) {
        for (int64_t i = 1; i < n; i++) {
            bag_entry v = a[i];
            int64_t k = i - 1;
            while (k >= 0 && a[k].id > v.id) {
                a[k + 1] = a[k];
                k--;
            }
            a[k + 1] = v;
        }
        return a;
    }
    for (int shift = 0; shift < 64 && (maxid >> shift) != 0; shift += 8) {
        int64_t count[257] = {0};
        for (int64_t i = 0; i < n; i++) count[((uint64_t)a[i].id >> shift & 255) + 1]++;
        for (int d = 0; d < 256; d++) count[d + 1] += count[d];
        for (int64_t i = 0; i < n; i++) t[count[(uint64_t)a[i].id >> shift & 255]++] = a[i];
        bag_entry *x = a;
        a = t;
        t = x;
    }
    return a;
}

/* One Adagrad row step, torch/optim/_functional.py adagrad (sparse branch): st (E) += g^2,
 * p (E) -= lr * g / (sqrt(st) + eps). A function of its own so that `restrict` lets the
 * compiler vectorise it without runtime alias checks. */
static void adagrad_row(float *restrict p, float *restrict st, const float *restrict g, int E, float lr, float eps) {
    for (int c = 0; c < E; c++) {
        st[c] += g[c] * g[c];
        p[c] -= lr * (g[c] / (sqrtf(st[c]) + eps));
    }
}

/* Sums the contributions dout[bag, col ..] * coef of the pairs p[i * stride], i in [i0, i1)
 * (one id's, in position order) into acc (E), as acc = fmaf(g, coef, acc) from 0: for a
 * compile-time E <= 64 the sum stays in registers (a runtime-E loop carries it through
 * memory, a store-to-load chain per entry); every E gives the same bits. E = 128 sums in acc
 * itself: a 128-float local here was miscompiled by gcc 12 at -O3 (wrong sums on some
 * machines, right at -O2 or with -fno-tree-loop-distribute-patterns), caught by the radix
 * and count sorts disagreeing with DENSE (test_embed_sched, "wide rows"). stride is 2 for
 * the pairs inside bag_entry, 1 for a bag_pair array. */
static inline __attribute__((always_inline)) void sum_pairs(const bag_pair *restrict p, size_t stride, int64_t i0,
                                                            int64_t i1, const float *restrict dout, int W, int col,
                                                            float *restrict acc, const int E) {
    float local[64];
    float *restrict a = E <= 64 ? local : acc;
    for (int c = 0; c < E; c++) a[c] = 0.0f;
    for (int64_t i = i0; i < i1; i++) {
        const float *restrict g = dout + (size_t)p[(size_t)i * stride].bag * W + col; /* (E) */
        const float k = p[(size_t)i * stride].coef;
        for (int c = 0; c < E; c++) a[c] = fmaf(g[c], k, a[c]);
    }
    if (E <= 64)
        for (int c = 0; c < E; c++) acc[c] = local[c];
}

/* sum_pairs for any E: inlined with E a constant for the specialised dims. */
#define SUM_CASE(EE)                                               \
    case EE:                                                       \
        sum_pairs(p, stride, i0, i1, dout, W, col, acc, EE);       \
        return;
static void sum_pairs_any(const bag_pair *restrict p, size_t stride, int64_t i0, int64_t i1, const float *restrict dout,
                          int W, int col, float *restrict acc, int E) {
    switch (E) {
        EMBED_FIXED_DIMS(SUM_CASE)
    default:
        for (int c = 0; c < E; c++) acc[c] = 0.0f;
        for (int64_t i = i0; i < i1; i++) {
            const float *g = dout + (size_t)p[(size_t)i * stride].bag * W + col; /* (E) */
            const float k = p[(size_t)i * stride].coef;
            for (int c = 0; c < E; c++) acc[c] = fmaf(g[c], k, acc[c]);
        }
    }
}
#undef SUM_CASE

/* Row-wise Adagrad's state update s += mean(g^2) and the row's multiplier lr / (sqrt(s) + eps). */
static inline __attribute__((always_inline)) float rowwise_mult(float *restrict st, const float *restrict g, int E,
                                                                float lr, float eps) {
    float sq = 0.0f;
    for (int c = 0; c < E; c++) sq += g[c] * g[c];
    st[0] += sq / (float)E;
    return lr / (sqrtf(st[0]) + eps);
}

/* The optimizer step of columns [c0, c1) of a row from the row's whole summed gradient g (E)
 * (formulas in embed.h; float arithmetic as torch's and FBGEMM's kernels): p (c1 - c0) the
 * columns, st their Adagrad state (c1 - c0) or the row's row-wise state (1), unused for SGD.
 * Row-wise Adagrad's mean square is over all E columns, so a column part updates as the
 * whole row would. */
static inline __attribute__((always_inline)) void opt_step(rec_sparse_opt_kind kind, float eps, float *restrict p,
                                                           float *restrict st, const float *restrict g, int E,
                                                           int c0, int c1, float lr) {
    switch (kind) {
    case REC_SPARSE_SGD:
        for (int c = c0; c < c1; c++) p[c - c0] -= lr * g[c];
        break;
    case REC_SPARSE_ADAGRAD:
        adagrad_row(p, st, g + c0, c1 - c0, lr, eps);
        break;
    case REC_SPARSE_ROWWISE_ADAGRAD: { /* FBGEMM embedding_backward_split_template, EXACT_ROWWISE_ADAGRAD */
        const float mult = rowwise_mult(st, g, E, lr, eps);
        for (int c = c0; c < c1; c++) p[c - c0] -= mult * g[c];
        break;
    }
    }
}

void rec_sparse_opt_step(const rec_sparse_opt_config *o, float lr, const float *g, int E, int c0, int c1, float *p,
                         float *st) {
    opt_step(o->kind, o->eps, p, st, g, E, c0, c1, lr);
}

/* A bf16 row's update (embed.h "Table storage"): each value widened to fp32, stepped with the
 * float operations opt_step performs (so a row rounded to nearest is exactly the fp32
 * engine's update, rounded), and stored rounded to nearest or stochastically; 8 columns at a
 * time in AVX2, the tail one by one. The stochastic bits: rec_bf16_sr_start's stream, one
 * step per 4 columns, 16 bits per column in column order (lane k of 8 takes bits 16k of the
 * two steps), so they do not depend on which thread updates the row, the vector width or the
 * device (the GPU engine draws them with the same functions). */

/* 8 fp32 values -> their bf16 bits (in 32-bit lanes): to nearest even (r NULL), or adding the
 * 16 random bits in r; NaN keeps a quiet NaN and (stochastic) inf stays inf, as rec_bf16_bits
 * and rec_bf16_bits_sr do. */
static inline __m256i bf16_round8(__m256 p, const __m256i *r) {
    const __m256i u = _mm256_castps_si256(p), expo = _mm256_set1_epi32(0x7f800000);
    const __m256i absu = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    const __m256i nan = _mm256_cmpgt_epi32(absu, expo);
    const __m256i add = r ? *r
                          : _mm256_add_epi32(_mm256_set1_epi32(0x7fff),
                                             _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1)));
    const __m256i special = r ? _mm256_cmpeq_epi32(_mm256_and_si256(u, expo), expo) : nan;
    const __m256i keep = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_and_si256(nan, _mm256_set1_epi32(0x40)));
    return _mm256_blendv_epi8(_mm256_srli_epi32(_mm256_add_epi32(u, add), 16), keep, special);
}

/* Columns [c0, c1) of a bf16 row stepped from the row's summed gradient g (E): row (c1 - c0)
 * their bits, st their Adagrad state (c1 - c0) or the row's row-wise state (1). Column j of
 * row is table column col + c0 + j, which picks its random bits: the stream's step
 * (col + c0 + j) / 4, from bit 16 ((col + c0 + j) % 4) (x: the stream's start, unused when
 * rounding to nearest). A head up to the next multiple of 4 columns, 8 columns at a time in
 * AVX2, the tail 4 columns per random step: the same bits whichever way a row is split. */
static inline __attribute__((always_inline)) void step_bf16(rec_sparse_opt_kind kind, float eps,
                                                            uint16_t *restrict row, float *restrict st,
                                                            const float *restrict g, int E, int c0, int c1, float lr,
                                                            int sr, uint64_t x, int col) {
    const float mult = kind == REC_SPARSE_ROWWISE_ADAGRAD ? rowwise_mult(st, g, E, lr, eps) : lr;
    const rec_sparse_opt_kind scalar = kind == REC_SPARSE_ROWWISE_ADAGRAD ? REC_SPARSE_SGD : kind;
    float *restrict sc = kind == REC_SPARSE_ADAGRAD ? st : NULL; /* per-column state */
    const float *restrict gp = g + c0;
    const int n = c1 - c0, a = col + c0;
    for (int k = 0; sr && k < a / 4; k++) rec_xorshift64(&x); /* to step a / 4 */
    int j = 0;
    if (a % 4) { /* the head, inside step a / 4 */
        const uint64_t r = sr ? rec_xorshift64(&x) : 0;
        for (; j < n && (a + j) % 4; j++) {
            float p = rec_bf16_to_float(row[j]);
            opt_step(scalar, eps, &p, sc ? sc + j : NULL, gp, n, j, j + 1, mult);
            row[j] = sr ? rec_bf16_bits_sr(p, (uint32_t)(r >> (16 * ((a + j) % 4)))) : rec_bf16_bits(p);
        }
    }
    const __m256 vm = _mm256_set1_ps(mult), veps = _mm256_set1_ps(eps);
    for (; j + 8 <= n; j += 8) {
        __m256 p = _mm256_castsi256_ps(
            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(row + j))), 16));
        const __m256 gv = _mm256_loadu_ps(gp + j);
        if (kind == REC_SPARSE_ADAGRAD) { /* adagrad_row: s += g g; p -= lr (g / (sqrt(s) + eps)) */
            const __m256 s = _mm256_add_ps(_mm256_loadu_ps(sc + j), _mm256_mul_ps(gv, gv));
            _mm256_storeu_ps(sc + j, s);
            p = _mm256_sub_ps(p, _mm256_mul_ps(vm, _mm256_div_ps(gv, _mm256_add_ps(_mm256_sqrt_ps(s), veps))));
        } else { /* SGD: p -= lr g; row-wise: p -= mult g */
            p = _mm256_sub_ps(p, _mm256_mul_ps(vm, gv));
        }
        __m256i bits;
        if (sr) {
            const uint64_t r0 = rec_xorshift64(&x), r1 = rec_xorshift64(&x);
            const __m256i r = _mm256_cvtepu16_epi32(_mm_set_epi64x((long long)r1, (long long)r0));
            bits = bf16_round8(p, &r);
        } else {
            bits = bf16_round8(p, NULL);
        }
        const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(bits, bits), 0x08);
        _mm_storeu_si128((__m128i *)(row + j), _mm256_castsi256_si128(packed));
    }
    for (; j < n; j += 4) { /* the tail, 4 columns per random step */
        const uint64_t r = sr ? rec_xorshift64(&x) : 0;
        for (int k = 0; k < 4 && j + k < n; k++) {
            float p = rec_bf16_to_float(row[j + k]);
            opt_step(scalar, eps, &p, sc ? sc + j + k : NULL, gp, n, j + k, j + k + 1, mult);
            row[j + k] = sr ? rec_bf16_bits_sr(p, (uint32_t)(r >> (16 * k))) : rec_bf16_bits(p);
        }
    }
}

static void apply_row_bf16(const rec_embed *e, int f, uint16_t *restrict T, float *restrict st, int64_t id, int E,
                           const float *restrict g, float lr) {
    const int sr = e->rounding == REC_ROUND_STOCHASTIC;
    step_bf16(e->opt.kind, e->opt.eps, T + (size_t)id * E, st, g, E, 0, E, lr, sr,
              sr ? rec_bf16_sr_start(e->seed, e->updates, f, id) : 0, 0);
}

void rec_sparse_opt_step_bf16(const rec_sparse_opt_config *o, float lr, const float *g, int E, int c0, int c1,
                              uint16_t *p, float *st, const rec_bf16_key *r) {
    const int sr = r->mode == REC_ROUND_STOCHASTIC;
    step_bf16(o->kind, o->eps, p, st, g, E, c0, c1, lr, sr, sr ? rec_bf16_sr_start(r->seed, r->updates, r->table, r->row) : 0,
              r->col);
}

/* The optimizer step of row id of table f (T its first row, as stored) from its summed
 * gradient g (E). */
static inline void apply_row(const rec_embed *e, int f, void *restrict T, float *restrict S, int64_t id, int E,
                             const float *restrict g, float lr) {
    float *st = e->opt.kind == REC_SPARSE_ADAGRAD ? S + (size_t)id * E
                : e->opt.kind == REC_SPARSE_ROWWISE_ADAGRAD ? S + id : NULL;
    if (e->b16) apply_row_bf16(e, f, T, st, id, E, g, lr);
    else opt_step(e->opt.kind, e->opt.eps, (float *)T + (size_t)id * E, st, g, E, 0, E, lr);
}

static inline void prefetch_update(const rec_embed *e, const void *T, const float *S, size_t id, int E) {
    __builtin_prefetch((const char *)T + id * E * (e->b16 ? sizeof(uint16_t) : sizeof(float)), 1);
    if (e->opt.kind == REC_SPARSE_ADAGRAD) __builtin_prefetch(S + id * E, 1);
    if (e->opt.kind == REC_SPARSE_ROWWISE_ADAGRAD) __builtin_prefetch(S + id, 1);
}

/* RADIX schedule: sorts table f's gathered entries by id, then sums each unique id's
 * contributions in position order and updates its row once. */
static void update_radix(rec_embed *e, int f, bag_entry *ent, bag_entry *tmp, int64_t n, const float *dout, float lr,
                         float *restrict acc, int pf) {
    const bag_entry *s = sort_radix(ent, tmp, n, (uint64_t)e->maxid[f]);
    const int E = e->dims[f], W = e->W, col = e->col[f];
    void *restrict T = embed_table_base(e, f);
    float *restrict S = e->state ? e->state + e->soff[f] : NULL;
    for (int64_t i = 0; i < n;) {
        const int64_t id = s[i].id, i0 = i;
        while (i < n && s[i].id == id) i++;
        sum_pairs_any(&s[0].p, sizeof(bag_entry) / sizeof(bag_pair), i0, i, dout, W, col, acc, E);
        if (pf && i + pf < n) prefetch_update(e, T, S, (size_t)s[i + pf].id, E); /* a few entries ahead */
        apply_row(e, f, T, S, id, E, acc, lr);
    }
}

/* COUNT schedule, straight from the batch (no entry array, no separate gather): a histogram of
 * table f's ids (R + 1 slots of h), its prefix sums, a stable scatter of (bag, coef) pairs into
 * pairs (nnz) in id order, then each non-empty id's sum and update. The same pairs in the same
 * order as RADIX, so the same bits. The ids were checked (checked mode) before any update. */
static void update_count(rec_embed *e, const rec_batch *b, int first_feature, int f, bag_pair *pairs, const float *dout,
                         float lr, float *restrict acc, uint32_t *h, int pf) {
    const rec_jagged *j = &b->sparse[first_feature + f];
    const int64_t R = e->rows[f], B = b->n;
    const int E = e->dims[f], W = e->W, col = e->col[f], mean = e->pooling == REC_POOL_MEAN;
    memset(h, 0, (size_t)(R + 1) * sizeof *h);
    const int64_t lo = j->offsets[0], hi = j->offsets[B];
    for (int64_t k = lo; k < hi; k++) h[rec_jagged_id(j, k) + 1]++;
    for (int64_t r = 0; r < R; r++) h[r + 1] += h[r];
    for (int64_t r = 0; r < B; r++) {
        const int64_t a = j->offsets[r], z = j->offsets[r + 1];
        const float L = (float)(z - a);
        for (int64_t k = a; k < z; k++) {
            float c = j->weights ? j->weights[k] : 1.0f;
            if (mean) c /= L;
            pairs[h[rec_jagged_id(j, k)]++] = (bag_pair){(int32_t)r, c};
        }
    }
    /* h[id] is now the end of id's pairs (the start of id + 1's). */
    void *restrict T = embed_table_base(e, f);
    float *restrict S = e->state ? e->state + e->soff[f] : NULL;
    int64_t start = 0;
    for (int64_t id = 0; id < R; id++) {
        const int64_t end = h[id];
        if (end == start) continue;
        if (pf && id + pf < R) prefetch_update(e, T, S, (size_t)(id + pf), E);
        sum_pairs_any(pairs, 1, start, end, dout, W, col, acc, E);
        apply_row(e, f, T, S, id, E, acc, lr);
        start = end;
    }
}

/* DENSE: table f's (id, coefficient) pairs straight from the batch in position order, each
 * one's contribution fmaf(g, coef, acc) added to its row of the thread's scratch acc (R, E):
 * per row the same fmaf chain from 0 in the same order as the sorting schedules, so the same
 * bits. A row's first touch in this pass (stamp != ep) starts its chain at fmaf(g, coef, 0)
 * and appends it to `list`; nothing is cleared between passes. Then each touched row is
 * updated once: by a scan in id order when more than an eighth of the rows were touched (the
 * table streams through the cache), else in first-touch order with the rows `pf` ahead
 * prefetched. The ids were checked (checked mode) before any update. */
static inline __attribute__((always_inline)) int64_t scatter_dense(const rec_embed *e, const rec_jagged *j, int64_t B,
                                                                   const float *restrict dout, int col,
                                                                   float *restrict acc, uint32_t *restrict stamp,
                                                                   int32_t *restrict list, uint32_t ep, const int E,
                                                                   const int wide) {
    const int W = e->W, mean = e->pooling == REC_POOL_MEAN;
    const int64_t *restrict i64 = j->ids64;
    const int32_t *restrict i32 = j->ids32;
    const float *restrict w = j->weights;
    int64_t n = 0;
    for (int64_t r = 0; r < B; r++) {
        const int64_t lo = j->offsets[r], hi = j->offsets[r + 1];
        const float L = (float)(hi - lo);
        const float *restrict g = dout + (size_t)r * W + col; /* (E), loaded once per bag for a fixed E */
        for (int64_t k = lo; k < hi; k++) {
            float coef = w ? w[k] : 1.0f;
            if (mean) coef /= L;
            const int64_t id = wide ? i64[k] : i32[k];
            float *restrict a = acc + (size_t)id * E; /* (E) */
            if (stamp[id] != ep) {
                stamp[id] = ep;
                list[n++] = (int32_t)id;
                for (int c = 0; c < E; c++) a[c] = fmaf(g[c], coef, 0.0f);
            } else {
                for (int c = 0; c < E; c++) a[c] = fmaf(g[c], coef, a[c]);
            }
        }
    }
    return n;
}

/* scatter_dense for any E and id width: inlined with E a constant for the specialised dims. */
#define SCATTER_CASE(EE)                                                                   \
    case EE:                                                                               \
        return j->wide ? scatter_dense(e, j, B, dout, col, acc, stamp, list, ep, EE, 1)   \
                       : scatter_dense(e, j, B, dout, col, acc, stamp, list, ep, EE, 0);
static int64_t scatter_dense_any(const rec_embed *e, const rec_jagged *j, int64_t B, const float *restrict dout,
                                 int col, float *restrict acc, uint32_t *restrict stamp, int32_t *restrict list,
                                 uint32_t ep, int E) {
    switch (E) {
        EMBED_FIXED_DIMS(SCATTER_CASE)
    default:
        return j->wide ? scatter_dense(e, j, B, dout, col, acc, stamp, list, ep, E, 1)
                       : scatter_dense(e, j, B, dout, col, acc, stamp, list, ep, E, 0);
    }
}
#undef SCATTER_CASE

static void update_dense(rec_embed *e, const rec_batch *b, int first_feature, int f, const float *dout, float lr,
                         int th, int pf) {
    const rec_jagged *j = &b->sparse[first_feature + f];
    const int64_t R = e->rows[f];
    const int E = e->dims[f];
    float *acc = e->dacc + (size_t)th * (size_t)e->dacc_stride;
    uint32_t *stamp = e->dstamp + (size_t)th * (size_t)e->drow_stride;
    int32_t *list = e->dlist + (size_t)th * (size_t)e->drow_stride;
    uint32_t *epoch = e->depoch + (size_t)th * 16;
    if (++*epoch == 0) { /* 2^32 passes: start the stamps afresh */
        memset(stamp, 0, (size_t)e->drow_stride * sizeof *stamp);
        *epoch = 1;
    }
    const uint32_t ep = *epoch;
    const int64_t n = scatter_dense_any(e, j, b->n, dout, e->col[f], acc, stamp, list, ep, E);
    void *restrict T = embed_table_base(e, f);
    float *restrict S = e->state ? e->state + e->soff[f] : NULL;
    if (n * 8 > R) {
        for (int64_t id = 0; id < R; id++)
            if (stamp[id] == ep) apply_row(e, f, T, S, id, E, acc + (size_t)id * E, lr);
    } else {
        for (int64_t i = 0; i < n; i++) {
            if (pf && i + pf < n) prefetch_update(e, T, S, (size_t)list[i + pf], E);
            apply_row(e, f, T, S, list[i], E, acc + (size_t)list[i] * E, lr);
        }
    }
}

/* Table f's ids checked without gathering (COUNT and DENSE tables): the first error in
 * e->err[f]. */
static void check_ids(rec_embed *e, const rec_batch *b, int first_feature, int f) {
    const rec_jagged *j = &b->sparse[first_feature + f];
    const int64_t R = e->rows[f], B = b->n;
    e->err[f].key = INT64_MAX;
    for (int64_t r = 0; r < B; r++) {
        if (!embed_bag_ok(j, r)) {
            e->err[f] = (embed_err){(int64_t)f * B + r, 2, j->offsets[r], j->offsets[r + 1]};
            return;
        }
        if (e->trust) continue;
        for (int64_t k = j->offsets[r]; k < j->offsets[r + 1]; k++)
            if ((uint64_t)rec_jagged_id(j, k) >= (uint64_t)R) {
                e->err[f] = (embed_err){(int64_t)f * B + r, 1, rec_jagged_id(j, k), 0};
                return;
            }
    }
}

/* The backward path table f runs for a batch of nnz ids (rec_embed_sort): its effective
 * schedule's (init sized the COUNT and DENSE scratch for every table those fit), except that
 * COUNT's 32-bit histogram serves fewer than 2^31 ids. */
static int sort_path(const rec_embed *e, int f, int64_t nnz) {
    const int sort = embed_sched_effective(e, f, e->sched[f]).sort;
    return sort == REC_SORT_COUNT && nnz >= INT32_MAX ? REC_SORT_RADIX : sort;
}

rec_status embed_backward_run(rec_embed *e, const rec_batch *b, int first_feature, const float *dout, float lr,
                              int only) {
    REC_TRY(embed_check_call(e, "backward", b, first_feature));
    if (!(lr >= 0.0f) || isinf(lr))
        return rec_errorf(REC_EINVAL, "embedding backward: learning rate is %g; it must be finite and >= 0", lr);
    const int F = e->F;
    const int64_t B = b->n;
    if (B == 0 || F == 0) return REC_OK;
    const double t0 = rec_now();
    const int n_active = order_tables(e, b, first_feature, only);
    /* Scratch slots per table from the batch's id counts: an entry per id for RADIX (and
     * as many again for its second buffer), a pair (half an entry) per id for COUNT, none
     * for DENSE. */
    e->ebase[0] = 0;
    int64_t ids = 0;
    for (int f = 0; f < F; f++) {
        const int64_t nnz = only < 0 || f == only ? embed_table_nnz(b, first_feature, f) : 0;
        const int path = sort_path(e, f, nnz);
        e->nent[f] = nnz;
        e->bpath[f] = (uint8_t)path;
        ids += nnz;
        e->ebase[f + 1] = e->ebase[f] + (path == REC_SORT_RADIX ? nnz : path == REC_SORT_COUNT ? (nnz + 1) / 2 : 0);
    }
    const int64_t total = e->ebase[F];
    if (total > e->ent_cap) { /* the one allocation: a batch with more ids than any before */
        const int64_t cap = total > 2 * e->ent_cap ? total : 2 * e->ent_cap;
        bag_entry *ent;
        REC_TRY(rec_alloc((void **)&ent, (size_t)(2 * cap + 1) * sizeof(bag_entry), "embedding backward scratch"));
        rec_free(e->ent);
        e->ent = ent;
        e->ent_cap = cap;
        e->grows++;
    }
    bag_entry *ent = e->ent, *tmp = e->ent + e->ent_cap;
    int64_t next = 0;
#pragma omp parallel num_threads(e->nt)
    for (;;) {
        const int64_t i = __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED);
        if (i >= n_active) break;
        const int f = e->order[i];
        if (e->bpath[f] != REC_SORT_RADIX) check_ids(e, b, first_feature, f);
        else e->nent[f] = gather(e, b, first_feature, f, ent + e->ebase[f], e->ebase[f + 1] - e->ebase[f]);
    }
    for (int f = 0; f < F; f++) /* the first error in (feature, row) order, before any update */
        if ((only < 0 || f == only) && e->err[f].key != INT64_MAX)
            return embed_report(e, " backward", &e->err[f], B, first_feature);
    next = 0;
    const int prof = e->profiling;
#pragma omp parallel num_threads(e->nt)
    {
        const int th = omp_get_thread_num();
        float *acc = e->acc + (size_t)th * (size_t)(e->W + 1);
        uint32_t *hist = e->hist ? e->hist + (size_t)th * (size_t)e->hist_stride : NULL;
        double *tp = e->prof_bwd + (size_t)th * (size_t)(F + 1);
        for (;;) {
            const int64_t i = __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED);
            if (i >= n_active) break;
            const int f = e->order[i];
            const double ti = prof ? rec_now() : 0.0;
            const int pf = e->sched[f].bpf, path = e->bpath[f];
            if (path == REC_SORT_COUNT)
                update_count(e, b, first_feature, f, (bag_pair *)(ent + e->ebase[f]), dout, lr, acc, hist, pf);
            else if (path == REC_SORT_DENSE)
                update_dense(e, b, first_feature, f, dout, lr, th, pf);
            else
                update_radix(e, f, ent + e->ebase[f], tmp + e->ebase[f], e->nent[f], dout, lr, acc, pf);
            if (prof) tp[f] += rec_now() - ti;
        }
    }
    e->last_bwd_s = rec_now() - t0;
    e->last_ids = (double)ids;
    if (prof)
        for (int f = 0; f < F; f++) e->prof_ids[F + 1 + f] += (double)e->nent[f];
    return REC_OK;
}

rec_status rec_embed_backward_update(rec_embed *e, const rec_batch *b, int first_feature, const float *dout,
                                     float lr) {
    if (e->tuner) embed_tune_before(e, 1);
    const rec_status s = embed_backward_run(e, b, first_feature, dout, lr, -1);
    if (e->tuner && !s) embed_tune_after(e, 1);
    if (!s) e->updates++; /* once per call, whatever passes a tuner split it into */
    return s;
}
