/* The row functions of the GPU preprocessing executor, shared by its CUDA kernels
 * (src/cuda/prep.cu) and its CPU backend (gexec.c), which the tests hold bit for bit to the
 * CPU executor (exec.c). C11 and CUDA C++ both compile this header.
 *
 * A fused op runs over (member, row): each member is one op of one feature's chain (rec_gop)
 * on that feature's column (rec_gcol). Ops that keep a row's length run in place
 * (rec_g_elem_part). Ops that change it run out of place in two phases: rec_g_count gives
 * each row's new length, the offsets are their scan, and rec_g_write_part writes the row into
 * the column's second buffers, which then become its first. LOAD, the start of a chain, copies or
 * concatenates the feature's inputs (raw columns or other features' columns) that way.
 *
 * A member that walks a row's values (lists, wide f32 rows, onehot's classes) takes
 * rec_g_lanes(op) lanes a row, a warp on the GPU: lane l of L does values l, l + L, ... of the
 * row (rec_g_elem_part, rec_g_write_part), so a long list is read by 32 threads at once, not
 * walked by one. A row's null flag is written after its lanes' values (rec_g_write_flags, the
 * warp synchronised between), since they read it. A scalar member takes one lane.
 */
#ifndef RECTRAIN_PREP_GOPS_H
#define RECTRAIN_PREP_GOPS_H

#include <math.h>
#include <stdint.h>

#include "rectrain/core.h"
#include "rectrain/prep.h"

enum { REC_G_LOAD = 64 }; /* rec_gop.kind of a chain's start (beyond rec_op_kind) */
enum { REC_G_MAX_SRC = 16 };

/* A column over a block of n rows: f32 values (n x width), or ids (n, or off[n] for lists). */
typedef struct rec_gcol {
    float *f, *f2;
    int64_t *v, *v2;
    int32_t *off, *off2;     /* (n + 1) lists */
    uint8_t *null;           /* (n) */
} rec_gcol;

/* One member of a fused op: the op's parameters, the layout it reads, its column. */
typedef struct rec_gop {
    int32_t kind, col;
    int32_t f32, list, width;           /* what it reads */
    int32_t to;                         /* cast: 0 f32, 1 i64 (rec_dtype) */
    float fvalue;
    int64_t ivalue;
    double eps, lambda, lo, hi;
    int32_t num_class, x, n;            /* onehot, firstx, ngram */
    int64_t max_value, divisor;         /* sigrid_hash, modulo */
    uint64_t salt, mult;
    int32_t shift, n_borders;
    const double *borders;              /* bucketize (in the backend's memory) */
    const int64_t *map;                 /* map_id */
    int64_t map_len;
    const int64_t *vkeys, *vvals;       /* categorify: the vocabulary's open-addressing table */
    const uint8_t *vused;
    int64_t vcap;                       /* (a power of two) */
    int32_t n_src;                      /* LOAD: the inputs' columns and layouts */
    int32_t src[REC_G_MAX_SRC], src_f32[REC_G_MAX_SRC], src_list[REC_G_MAX_SRC];
} rec_gop;

/* ---- the element functions (as the CPU executor computes them) -------------------------- */

REC_HD uint64_t rec_g_twang(uint64_t k) {
    k = (~k) + (k << 21);
    k = k ^ (k >> 24);
    k = (k + (k << 3)) + (k << 8);
    k = k ^ (k >> 14);
    k = (k + (k << 2)) + (k << 4);
    k = k ^ (k >> 28);
    return k + (k << 31);
}

REC_HD uint64_t rec_g_hash128(uint64_t upper, uint64_t lower) {
    const uint64_t kMul = 0x9ddfea08eb382d69ULL;
    uint64_t a = (lower ^ upper) * kMul;
    a ^= (a >> 47);
    uint64_t b = (upper ^ a) * kMul;
    b ^= (b >> 47);
    return b * kMul;
}

REC_HD uint64_t rec_g_mix64(uint64_t x) { /* core.h's rec_mix64, the vocabulary's hash */
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* Floor-mod of x by d (d >= 2) through the multiply-shift division of the sigrid_hash UDF
 * (rec_sigrid_magic gives mult and shift); exact for every int64 x. */
REC_HD int64_t rec_g_floor_mod(int64_t x, int64_t d, uint64_t mult, int shift) {
    const int64_t sign = x >> 63;
    const unsigned __int128 prod = (unsigned __int128)mult * (unsigned __int128)(uint64_t)(sign ^ x);
    const int64_t q = sign ^ (int64_t)(uint64_t)(prod >> (64 + shift));
    return (int64_t)((uint64_t)x - (uint64_t)q * (uint64_t)d);
}

REC_HD int64_t rec_g_cast_f32_i64(float x) {
    if (!(x == x)) return 0;
    if (x >= 9.2233720368547758e18f) return INT64_MAX;
    if (x <= -9.2233720368547758e18f) return INT64_MIN;
    return (int64_t)x;
}

REC_HD float rec_g_logit(float xf, double eps) {
    const double x = xf;
    double t = x;
    if (x < eps) t = eps;
    else if (x > 1.0 - eps) t = 1.0 - eps;
    return (float)log(t / (1.0 - t));
}

REC_HD float rec_g_boxcox(float xf, double lambda) {
    const double x = xf;
    if (!(x > 0)) return (float)x;
    return (float)(lambda == 0 ? log(x) : (pow(x, lambda) - 1.0) / lambda);
}

/* log(1 + x) in double, rounded to float: the C library's log1pf is not correctly rounded (it
 * differs from this in 0.7% of the integers below 2^24), nor is CUDA's, and they differ from
 * each other; rounding the double (both within an ulp of double) agrees on both. */
REC_HD float rec_g_log1p(float x) { return (float)log1p((double)x); }

REC_HD int64_t rec_g_id(const rec_gop *op, int64_t v) { /* the id ops, value by value */
    switch (op->kind) {
    case REC_OP_SIGRID_HASH:
        return op->max_value == 1 ? 0 : rec_g_floor_mod((int64_t)rec_g_hash128(op->salt, rec_g_twang((uint64_t)v)),
                                                        op->max_value, op->mult, op->shift);
    case REC_OP_MODULO:
        return op->divisor == 1 ? 0 : rec_g_floor_mod(v, op->divisor, op->mult, op->shift);
    case REC_OP_MAP_ID:
        return (uint64_t)v < (uint64_t)op->map_len ? op->map[v] : 0;
    case REC_OP_CATEGORIFY: { /* vocab.c's probe: linear from the hash; 0 when unseen */
        int64_t i = (int64_t)(rec_g_mix64((uint64_t)v) & (uint64_t)(op->vcap - 1));
        while (op->vused[i] && op->vkeys[i] != v) i = (i + 1) & (op->vcap - 1);
        return op->vused[i] ? op->vvals[i] : 0;
    }
    default: { /* clamp on ids: integer bounds, +-inf the extremes */
        const int64_t lo = isinf(op->lo) ? INT64_MIN : (int64_t)op->lo, hi = isinf(op->hi) ? INT64_MAX : (int64_t)op->hi;
        return v < lo ? lo : (v > hi ? hi : v);
    }
    }
}

/* ---- rows ----------------------------------------------------------------------------------- */

/* The lanes a row of op takes (see the top): REC_G_LANES where it walks a row's values. */
enum { REC_G_LANES = 32 };
REC_HD int rec_g_lanes(const rec_gop *op) {
    if (op->kind == REC_G_LOAD) {
        for (int k = 0; k < op->n_src; k++)
            if (op->src_list[k] || (op->src_f32[k] && op->width > 1)) return REC_G_LANES;
        return 1;
    }
    if (op->kind == REC_OP_ONEHOT) return op->num_class > 1 ? REC_G_LANES : 1;
    return op->list || (op->f32 && op->width > 1) ? REC_G_LANES : 1;
}

/* The ops that keep a row's length, in place: lane `lane` of `lanes`' share of row r (a
 * scalar op's row is lane 0's). */
REC_HD void rec_g_elem_part(const rec_gop *op, rec_gcol *cols, int64_t r, int lane, int lanes) {
    rec_gcol *c = &cols[op->col];
    const int64_t a = op->list ? c->off[r] : r, b = op->list ? c->off[r + 1] : r + 1;
    switch (op->kind) {
    case REC_OP_FILL_NULL: /* on scalars (lists are out of place) */
        if (lane) break;
        if (c->null[r]) {
            if (op->f32) c->f[r] = op->fvalue;
            else c->v[r] = op->ivalue;
        }
        c->null[r] = 0;
        break;
    case REC_OP_CAST:
        if (lane) break;
        if (op->to == 0 && !op->f32) c->f[r] = (float)c->v[r];
        else if (op->to == 1 && op->f32) c->v[r] = rec_g_cast_f32_i64(c->f[r]);
        break;
    case REC_OP_LOGIT: if (!lane) c->f[r] = rec_g_logit(c->f[r], op->eps); break;
    case REC_OP_BOXCOX: if (!lane) c->f[r] = rec_g_boxcox(c->f[r], op->lambda); break;
    case REC_OP_LOG1P: if (!lane) c->f[r] = rec_g_log1p(c->f[r]); break;
    case REC_OP_FIRSTX: break; /* on a scalar: already its first element */
    case REC_OP_CLAMP:
        if (op->f32) {
            const float lo = (float)op->lo, hi = (float)op->hi;
            for (int64_t i = r * op->width + lane; i < (r + 1) * op->width; i += lanes)
                c->f[i] = c->f[i] < lo ? lo : (c->f[i] > hi ? hi : c->f[i]);
        } else {
            for (int64_t i = a + lane; i < b; i += lanes) c->v[i] = rec_g_id(op, c->v[i]);
        }
        break;
    case REC_OP_BUCKETIZE: { /* lower_bound, then past equal borders */
        if (lane) break;
        const double x = op->f32 ? (double)c->f[r] : (double)c->v[r];
        int32_t lo = 0, hi = op->n_borders;
        while (lo < hi) {
            const int32_t mid = (lo + hi) / 2;
            if (op->borders[mid] < x) lo = mid + 1;
            else hi = mid;
        }
        c->v[r] = (lo >= op->n_borders - 1 || x < op->borders[lo + 1]) ? lo : lo + 1;
        break;
    }
    default: /* sigrid_hash, modulo, map_id, categorify */
        for (int64_t i = a + lane; i < b; i += lanes) c->v[i] = rec_g_id(op, c->v[i]);
        break;
    }
}

/* Input k of a LOAD, row r: its values [*a, *b) (ids or floats) and whether it is null. */
REC_HD void rec_g_src(const rec_gop *op, const rec_gcol *cols, int k, int64_t r, int64_t *a, int64_t *b) {
    const rec_gcol *s = &cols[op->src[k]];
    if (op->src_list[k]) *a = s->off[r], *b = s->off[r + 1];
    else *a = r * (op->src_f32[k] ? op->width : 1), *b = *a + (op->src_f32[k] ? op->width : 1);
}

/* Does the op change row lengths (count, scan, write)? Else it runs in place (rec_g_elem), but
 * onehot, which writes rows of num_class into the second float buffer. */
REC_HD int rec_g_counted(const rec_gop *op) {
    return op->kind == REC_G_LOAD || op->kind == REC_OP_NGRAM ||
           (op->list && (op->kind == REC_OP_FILL_NULL || op->kind == REC_OP_FIRSTX));
}

/* The length of row r after an out-of-place op (LOAD: the values of its non-null inputs). */
REC_HD int32_t rec_g_count(const rec_gop *op, const rec_gcol *cols, int64_t r) {
    const rec_gcol *c = &cols[op->col];
    if (op->kind == REC_G_LOAD) {
        int64_t n = 0, a, b;
        for (int k = 0; k < op->n_src; k++) {
            if (op->n_src > 1 && cols[op->src[k]].null[r]) continue;
            rec_g_src(op, cols, k, r, &a, &b);
            n += b - a;
        }
        return (int32_t)n;
    }
    const int64_t len = c->off[r + 1] - c->off[r];
    if (op->kind == REC_OP_FILL_NULL) return c->null[r] ? 1 : (int32_t)len; /* a null row becomes [value] */
    if (op->kind == REC_OP_FIRSTX) return (int32_t)(len < op->x ? len : op->x);
    const int64_t m = op->n < len ? op->n : len; /* ngram: the windows of min(n, len) ids */
    return (int32_t)((len - m + 1) * m);
}

/* Lane `lane` of `lanes`' share of row r after an out-of-place op, written into the column's
 * second buffers (at off2[r]): its values, not the row's null flag (rec_g_write_flags). */
REC_HD void rec_g_write_part(const rec_gop *op, rec_gcol *cols, int64_t r, int lane, int lanes) {
    rec_gcol *c = &cols[op->col];
    if (op->kind == REC_OP_ONEHOT) { /* width num_class */
        const float x = c->f[r];
        const double step = (op->hi - op->lo) / op->num_class, q = ((double)x - op->lo) / step;
        const int32_t idx = (q >= 0 && q < (double)op->num_class) ? (int32_t)q : 0;
        float *o = c->f2 + r * op->num_class;
        for (int32_t i = lane; i < op->num_class; i += lanes) o[i] = i == idx ? 1.0f : 0.0f;
        return;
    }
    int64_t o = c->off2[r];
    if (op->kind == REC_G_LOAD) {
        int64_t a, b;
        for (int k = 0; k < op->n_src; k++) {
            const rec_gcol *s = &cols[op->src[k]];
            if (op->n_src > 1 && s->null[r]) continue;
            rec_g_src(op, cols, k, r, &a, &b);
            for (int64_t i = a + lane; i < b; i += lanes) {
                if (op->src_f32[k]) c->f2[o + i - a] = s->f[i];
                else c->v2[o + i - a] = s->v[i];
            }
            o += b - a;
        }
        return;
    }
    const int64_t a = c->off[r], len = c->off[r + 1] - a;
    if (op->kind == REC_OP_FILL_NULL) {
        if (c->null[r]) {
            if (!lane) c->v2[o] = op->ivalue;
        } else {
            for (int64_t i = lane; i < len; i += lanes) c->v2[o + i] = c->v[a + i];
        }
    } else if (op->kind == REC_OP_FIRSTX) {
        for (int64_t i = lane; i < len && i < op->x; i += lanes) c->v2[o + i] = c->v[a + i];
    } else { /* ngram: window s of m ids is values s m .. s m + m - 1 of the row */
        const int64_t m = op->n < len ? op->n : len, all = m > 0 ? (len - m + 1) * m : 0;
        for (int64_t e = lane; e < all; e += lanes) c->v2[o + e] = c->v[a + e / m + e % m];
    }
}

/* Row r's null flag after an out-of-place op, once its lanes have written its values. */
REC_HD void rec_g_write_flags(const rec_gop *op, rec_gcol *cols, int64_t r) {
    rec_gcol *c = &cols[op->col];
    if (op->kind == REC_G_LOAD) { /* null when every input is (one input: as it is) */
        uint8_t all_null = 1;
        for (int k = 0; k < op->n_src; k++) {
            const rec_gcol *s = &cols[op->src[k]];
            if (op->n_src > 1 && s->null[r]) continue;
            all_null &= s->null[r];
        }
        c->null[r] = all_null;
    } else if (op->kind == REC_OP_FILL_NULL) {
        c->null[r] = 0;
    }
}

#endif
