// The embedding engine on an NVIDIA GPU (cuda.h): fused forward with a schedule per table
// (RecFlex, paper 001 §IV-B) and backward with the sparse optimizer fused. The tuner: tune.cu;
// the host-side map and plans: sched.c; packing a batch: pack.c.
#include <cuda_runtime.h>
#include <cub/cub.cuh>

#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embed_impl.cuh"

// ---- forward: one fused launch, a schedule per table -----------------------------------------

struct fwd_params {
    const tab_arg *tabs;
    const int32_t *map;         // rounds (F) then block_start (F + 1)
    int F, B, W, mean;
    const int32_t *off, *ids;
    const float *w;
    float *out;
    __nv_bfloat16 *out16;       // instead of out where not NULL
    unsigned long long *prof;
};

template <int V> struct vec_t;
template <> struct vec_t<4> {
    typedef float4 type;
    static __device__ __forceinline__ float4 zero() { return make_float4(0.f, 0.f, 0.f, 0.f); }
};
template <> struct vec_t<1> {
    typedef float type;
    static __device__ __forceinline__ float zero() { return 0.f; }
};
__device__ __forceinline__ void axpy(float4 &a, float s, const float4 &x) {
    a.x = fmaf(s, x.x, a.x), a.y = fmaf(s, x.y, a.y), a.z = fmaf(s, x.z, a.z), a.w = fmaf(s, x.w, a.w);
}
__device__ __forceinline__ void axpy(float &a, float s, float x) { a = fmaf(s, x, a); }
__device__ __forceinline__ void add(float4 &a, const float4 &x) { a.x += x.x, a.y += x.y, a.z += x.z, a.w += x.w; }
__device__ __forceinline__ void add(float &a, float x) { a += x; }
__device__ __forceinline__ void scale(float4 &a, float s) { a.x *= s, a.y *= s, a.z *= s, a.w *= s; }
__device__ __forceinline__ void scale(float &a, float s) { a *= s; }
__device__ __forceinline__ float4 shfl_down(const float4 &a, int o, int width) {
    return make_float4(__shfl_down_sync(0xffffffffu, a.x, o, width), __shfl_down_sync(0xffffffffu, a.y, o, width),
                       __shfl_down_sync(0xffffffffu, a.z, o, width), __shfl_down_sync(0xffffffffu, a.w, o, width));
}
__device__ __forceinline__ float shfl_down(float a, int o, int width) { return __shfl_down_sync(0xffffffffu, a, o, width); }

// Chunk i (V columns) of a table's rows, as fp32: a 16- or 4-byte load of an fp32 table, an 8-
// or 2-byte load of a bf16 table widened exactly (the CPU's rec_bf16_to_float), so that a bf16
// table pools to the bits an fp32 table of the same values gives. t.b16 is uniform in a block.
template <int V> __device__ __forceinline__ typename vec_t<V>::type ldrow(const tab_arg &t, size_t i);
template <> __device__ __forceinline__ float4 ldrow<4>(const tab_arg &t, size_t i) {
    if (!t.b16) return reinterpret_cast<const float4 *>(t.T)[i];
    const uint2 u = reinterpret_cast<const uint2 *>(t.T)[i];
    return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xffff0000u), __uint_as_float(u.y << 16),
                       __uint_as_float(u.y & 0xffff0000u));
}
template <> __device__ __forceinline__ float ldrow<1>(const tab_arg &t, size_t i) {
    if (!t.b16) return reinterpret_cast<const float *>(t.T)[i];
    return __uint_as_float((uint32_t)reinterpret_cast<const uint16_t *>(t.T)[i] << 16);
}

// Schedule "T threads per bag, V floats per load" for the block's share of table t: groups of T
// threads take bags; in a group, lane % Cg picks the chunk and lane / Cg the ids (every S-th),
// and the S partial sums meet through shuffles (T <= 32) or shared memory (T > 32). Every lane
// runs the same number of rounds and chunk steps, so shuffles and barriers see the whole warp.
template <int T, int V>
__device__ __forceinline__ void pool_bags(const fwd_params &p, const tab_arg &t, int f, int rel, int R, float4 *red) {
    typedef typename vec_t<V>::type vec;
    const int G = REC_CUDA_BLOCK / T, g = threadIdx.x / T, lane = threadIdx.x % T;
    const int Cv = t.E / V;
    int Cg = 1;
    while (Cg < Cv && Cg < T) Cg <<= 1;
    const int S = T / Cg, c0 = lane % Cg, s = lane / Cg, nc = (Cv + Cg - 1) / Cg;
    const int32_t *off = p.off + (size_t)f * (p.B + 1);
    for (int r = 0; r < R; r++) {
        const int b = (rel * R + r) * G + g;
        const bool live = b < p.B;
        const int beg = live ? off[b] : 0, end = live ? off[b + 1] : 0;
        for (int i = 0; i < nc; i++) {
            const int c = c0 + i * Cg;
            vec acc = vec_t<V>::zero();
            if (live && c < Cv) {
                int k = beg + s;
                if (p.w) {
                    for (; k < end; k += S) axpy(acc, p.w[k], ldrow<V>(t, (size_t)p.ids[k] * Cv + c));
                } else {
                    for (; k + 3 * S < end; k += 4 * S) {  // four rows in flight
                        const vec x0 = ldrow<V>(t, (size_t)p.ids[k] * Cv + c), x1 = ldrow<V>(t, (size_t)p.ids[k + S] * Cv + c);
                        const vec x2 = ldrow<V>(t, (size_t)p.ids[k + 2 * S] * Cv + c);
                        const vec x3 = ldrow<V>(t, (size_t)p.ids[k + 3 * S] * Cv + c);
                        add(acc, x0), add(acc, x1), add(acc, x2), add(acc, x3);
                    }
                    for (; k < end; k += S) add(acc, ldrow<V>(t, (size_t)p.ids[k] * Cv + c));
                }
            }
            if (T <= 32) {
                for (int o = T / 2; o >= Cg; o >>= 1) add(acc, shfl_down(acc, o, T));
            } else if (S > 1) {
                for (int o = 16; o >= Cg; o >>= 1) add(acc, shfl_down(acc, o, 32));
                __syncthreads();  // the previous step's readers are done with red
                vec *rv = reinterpret_cast<vec *>(red);
                if (Cg >= 32 || (lane & 31) < Cg) rv[threadIdx.x] = acc;
                __syncthreads();
                if (s == 0) {
                    if (Cg >= 32)
                        for (int j = 1; j < S; j++) add(acc, rv[g * T + lane + j * Cg]);
                    else
                        for (int j = 1; j < T / 32; j++) add(acc, rv[g * T + lane + j * 32]);
                }
            }
            if (live && s == 0 && c < Cv) {
                if (p.mean && end > beg) scale(acc, 1.0f / (float)(end - beg));
                if (p.out16) store_bf16(p.out16 + (size_t)b * p.W + t.col + (size_t)c * V, acc);
                else reinterpret_cast<vec *>(p.out + (size_t)b * p.W + t.col)[c] = acc;
            }
        }
    }
}

template <bool PROF>
__global__ void __launch_bounds__(REC_CUDA_BLOCK) fwd_kernel(fwd_params p) {
    extern __shared__ float4 red[];
    long long t0 = 0;
    if (PROF && threadIdx.x == 0) t0 = clock64();
    const int32_t *rounds = p.map, *start = p.map + p.F;
    const int bid = blockIdx.x;
    int lo = 0, hi = p.F;  // the table f with start[f] <= bid < start[f + 1]
    while (hi - lo > 1) {
        const int mid = (lo + hi) >> 1;
        if (start[mid] <= bid) lo = mid;
        else hi = mid;
    }
    const int f = lo;
    const tab_arg t = p.tabs[f];
    const int rel = bid - start[f], R = rounds[f];
    switch (t.sched) {  // RecFlex Fig. 8: the table's schedule, inlined
    case 0: pool_bags<1, 4>(p, t, f, rel, R, red); break;
    case 1: pool_bags<2, 4>(p, t, f, rel, R, red); break;
    case 2: pool_bags<4, 4>(p, t, f, rel, R, red); break;
    case 3: pool_bags<8, 4>(p, t, f, rel, R, red); break;
    case 4: pool_bags<16, 4>(p, t, f, rel, R, red); break;
    case 5: pool_bags<32, 4>(p, t, f, rel, R, red); break;
    case 6: pool_bags<64, 4>(p, t, f, rel, R, red); break;
    case 7: pool_bags<128, 4>(p, t, f, rel, R, red); break;
    case 8: pool_bags<256, 4>(p, t, f, rel, R, red); break;
    case 9: pool_bags<1, 1>(p, t, f, rel, R, red); break;
    case 10: pool_bags<2, 1>(p, t, f, rel, R, red); break;
    case 11: pool_bags<4, 1>(p, t, f, rel, R, red); break;
    case 12: pool_bags<8, 1>(p, t, f, rel, R, red); break;
    case 13: pool_bags<16, 1>(p, t, f, rel, R, red); break;
    case 14: pool_bags<32, 1>(p, t, f, rel, R, red); break;
    case 15: pool_bags<64, 1>(p, t, f, rel, R, red); break;
    case 16: pool_bags<128, 1>(p, t, f, rel, R, red); break;
    default: pool_bags<256, 1>(p, t, f, rel, R, red); break;
    }
    if (PROF) {
        __syncthreads();
        if (threadIdx.x == 0) {
            const unsigned long long c = (unsigned long long)(clock64() - t0);
            atomicAdd(p.prof + f, c);
            atomicMax(p.prof + p.F + f, c);
        }
    }
}

// ---- backward + update ------------------------------------------------------------------------

struct bwd_params {
    const tab_arg *tabs;
    const uint32_t *row_base;
    int F, B, W, mean;
    const int32_t *off, *ids;
    const float *w, *dout;
    const __nv_bfloat16 *dout16;  // instead of dout where not NULL
    uint32_t *keys;
    int32_t *vals, *tag;
    const uint32_t *keys_sorted;
    const int32_t *vals_sorted, *starts, *counters;
    int32_t *long_list, *nlong, *chunk_first, *nchunks;
    double *partial;  // (chunks, pw) the long runs' partial sums
    int pw;
    int64_t n;
    rec_sparse_opt_config opt;
    float lr;
    uint64_t seed;    // bf16 tables: the stochastic rounding's key and this update's count
    int64_t updates;
    int sr;
};

__device__ __forceinline__ int upper_bound32(const int32_t *a, int n, int32_t x, int stride) {
    int lo = 0, hi = n;  // first i in [0, n) with a[i * stride] > x
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (a[(size_t)mid * stride] <= x) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

// Entry k of the batch: its key (global row), its bag (f * B + b) and its position.
__global__ void keys_kernel(bwd_params p) {
    for (int64_t k = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < p.n; k += (int64_t)gridDim.x * blockDim.x) {
        const int f = upper_bound32(p.off, p.F, (int32_t)k, p.B + 1) - 1;
        const int32_t *o = p.off + (size_t)f * (p.B + 1);
        const int b = upper_bound32(o, p.B + 1, (int32_t)k, 1) - 1;
        p.keys[k] = p.row_base[f] + (uint32_t)p.ids[k];
        p.vals[k] = (int32_t)k;
        p.tag[k] = f * p.B + b;
    }
}

__global__ void heads_kernel(const uint32_t *keys, int64_t n, int32_t *heads) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        heads[i] = i == 0 || keys[i] != keys[i - 1];
}

__global__ void starts_kernel(const int32_t *heads, const int32_t *pos, int64_t n, int32_t *starts, int32_t *counters) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        if (heads[i]) starts[pos[i]] = (int32_t)i;
        if (i == n - 1) counters[0] = pos[i] + heads[i], counters[1] = 0;
    }
}

// Gradient sums accumulate in float64: a hot row of a small table sums tens of thousands of
// bags' gradients, whose float32 sum errs by 1e-4 relative where they cancel (measured on the
// H100 against the float64 reference, tests/test_cuda_parity.c); the kernel is memory-bound,
// so the wider adds cost nothing visible.
struct dvec4 {
    double x, y, z, w;
};
template <int V> struct acc_t;
template <> struct acc_t<4> {
    typedef dvec4 type;
    static __device__ __forceinline__ dvec4 zero() { return dvec4{0, 0, 0, 0}; }
    static __device__ __forceinline__ float4 round(const dvec4 &a) {
        return make_float4((float)a.x, (float)a.y, (float)a.z, (float)a.w);
    }
};
template <> struct acc_t<1> {
    typedef double type;
    static __device__ __forceinline__ double zero() { return 0; }
    static __device__ __forceinline__ float round(double a) { return (float)a; }
};
__device__ __forceinline__ void axpy(dvec4 &a, float s, const float4 &x) {
    a.x += (double)s * x.x, a.y += (double)s * x.y, a.z += (double)s * x.z, a.w += (double)s * x.w;
}
__device__ __forceinline__ void axpy(double &a, float s, float x) { a += (double)s * x; }
__device__ __forceinline__ void add(dvec4 &a, const dvec4 &x) { a.x += x.x, a.y += x.y, a.z += x.z, a.w += x.w; }
__device__ __forceinline__ void add(double &a, double x) { a += x; }
__device__ __forceinline__ dvec4 shfl_down(const dvec4 &a, int o, int width) {
    return dvec4{__shfl_down_sync(0xffffffffu, a.x, o, width), __shfl_down_sync(0xffffffffu, a.y, o, width),
                 __shfl_down_sync(0xffffffffu, a.z, o, width), __shfl_down_sync(0xffffffffu, a.w, o, width)};
}
__device__ __forceinline__ double shfl_down(double a, int o, int width) { return __shfl_down_sync(0xffffffffu, a, o, width); }

// Sums the gradients of entries [a, e) of the sorted batch (all of one row of table t) into
// acc, by one warp: the lanes first read 32 entries at a time (each entry's bag and scale, a
// chain of dependent loads done once per entry and in parallel), then the warp's S id-lanes
// (s = lane / Cg) take every S-th of them, lane % Cg the 16- or 4-byte chunk, so that the row
// loads of consecutive entries are independent and in flight together; the id-lanes meet at
// the end (lanes < Cg hold the sums of chunks c0 + i * Cg).
template <int V, int NC>
__device__ __forceinline__ void run_grad(const bwd_params &p, const tab_arg &t, int a, int e, int Cg, int Cv,
                                         typename acc_t<V>::type *acc) {
    typedef typename vec_t<V>::type vec;
    const int lane = threadIdx.x & 31, S = 32 / Cg, s = lane / Cg, c0 = lane % Cg;
#pragma unroll
    for (int i = 0; i < NC; i++) acc[i] = acc_t<V>::zero();
    for (int j0 = a; j0 < e; j0 += 32) {
        int b = 0;
        float sc = 0;
        if (j0 + lane < e) {
            const int k = p.vals_sorted[j0 + lane], tg = p.tag[k], f = tg / p.B;
            b = tg - f * p.B;
            sc = p.w ? p.w[k] : 1.0f;
            if (p.mean) {
                const int32_t *o = p.off + (size_t)f * (p.B + 1);
                sc /= (float)(o[b + 1] - o[b]);
            }
        }
        const int m = e - j0;
#pragma unroll 4
        for (int q = s; q < 32; q += S) {  // 32 / S turns on every lane: the shuffles see the whole warp
            const int bq = __shfl_sync(0xffffffffu, b, q);
            const float sq = __shfl_sync(0xffffffffu, sc, q);
            if (q < m && p.dout16) {
                const __nv_bfloat16 *g = p.dout16 + (size_t)bq * p.W + t.col;
#pragma unroll
                for (int i = 0; i < NC; i++)
                    if (c0 + i * Cg < Cv) {
                        vec x;
                        load_bf16(g + (size_t)(c0 + i * Cg) * V, x);
                        axpy(acc[i], sq, x);
                    }
            } else if (q < m) {
                const vec *g = reinterpret_cast<const vec *>(p.dout + (size_t)bq * p.W + t.col);
#pragma unroll
                for (int i = 0; i < NC; i++)
                    if (c0 + i * Cg < Cv) axpy(acc[i], sq, g[c0 + i * Cg]);
            }
        }
    }
#pragma unroll
    for (int i = 0; i < NC; i++)
        for (int o = 16; o >= Cg; o >>= 1) add(acc[i], shfl_down(acc[i], o, 32));
}

__device__ __forceinline__ float sumsq(const float4 &a) { return a.x * a.x + a.y * a.y + a.z * a.z + a.w * a.w; }
__device__ __forceinline__ float sumsq(float a) { return a * a; }
__device__ __forceinline__ void adagrad(float &p, float &s, float g, float lr, float eps) {
    s += g * g;
    p -= lr * g / (sqrtf(s) + eps);
}
__device__ __forceinline__ void adagrad(float4 &p, float4 &s, const float4 &g, float lr, float eps) {
    adagrad(p.x, s.x, g.x, lr, eps), adagrad(p.y, s.y, g.y, lr, eps), adagrad(p.z, s.z, g.z, lr, eps),
        adagrad(p.w, s.w, g.w, lr, eps);
}
__device__ __forceinline__ void step_row(float4 &p, const float4 &g, float k) {
    p.x -= k * g.x, p.y -= k * g.y, p.z -= k * g.z, p.w -= k * g.w;
}
__device__ __forceinline__ void step_row(float &p, float g, float k) { p -= k * g; }

__device__ __forceinline__ float col_of(const float4 &v, int k) { return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w; }
__device__ __forceinline__ float col_of(float v, int) { return v; }

// The update of row `row` of bf16 table t (number f): the CPU's apply_row_bf16 (embed/backward.c)
// column by column. Each value is widened, stepped in fp32 with the CPU's operations in its
// order, each rounded once (no FMA contraction), and stored rounded to nearest or with the
// bits rec_bf16_sr_start's stream gives its column; so a row whose summed gradient equals the
// CPU's gets the CPU's bits. Called by a whole warp: row-wise Adagrad's mean square is the CPU's
// sum (rowwise_mult), column by column in column order, each lane reading every column by
// shuffles, so its multiplier has the CPU's bits too.
template <int V, int NC>
__device__ __forceinline__ void apply16(const bwd_params &p, const tab_arg &t, int f, uint32_t row, int lane, int Cg, int Cv,
                                        const typename vec_t<V>::type *acc) {
    uint16_t *P = reinterpret_cast<uint16_t *>(t.T) + (size_t)row * t.E;
    const bool mine = lane < Cg;
    float mult = p.lr;
    if (p.opt.kind == REC_SPARSE_ROWWISE_ADAGRAD) {  // rowwise_mult: s += mean(g^2); lr / (sqrt(s) + eps)
        float ss = 0;  // chunk j = l + i Cg is lane l's acc[i]; the bounds are the warp's, the same in every lane
#pragma unroll
        for (int i = 0; i < NC; i++)
            for (int l = 0; l < Cg && l + i * Cg < Cv; l++)
                for (int k = 0; k < V; k++) {
                    const float v = __shfl_sync(0xffffffffu, col_of(acc[i], k), l);
                    ss = __fadd_rn(ss, __fmul_rn(v, v));
                }
        const float s = __fadd_rn(t.S[row], __fdiv_rn(ss, (float)t.E));
        mult = __fdiv_rn(p.lr, __fadd_rn(__fsqrt_rn(s), p.opt.eps));
        __syncwarp();  // every lane has read S[row]
        if (lane == 0) t.S[row] = s;
    }
    const uint64_t start = p.sr ? rec_bf16_sr_start(p.seed, p.updates, f, (int64_t)row) : 0;
#pragma unroll
    for (int i = 0; i < NC; i++) {
        const int j = lane + i * Cg;  // the chunk: columns j V .. j V + V - 1
        if (!mine || j >= Cv) continue;
        const uint64_t r = p.sr ? rec_bf16_sr_step(start, j * V / 4) : 0;
        for (int k = 0; k < V; k++) {
            const int c = j * V + k;
            const float gk = col_of(acc[i], k);
            float w = rec_bf16_to_float(P[c]);
            if (p.opt.kind == REC_SPARSE_ADAGRAD) {  // s += g g; w -= lr (g / (sqrt(s) + eps))
                float *S = t.S + (size_t)row * t.E + c;
                const float s = __fadd_rn(*S, __fmul_rn(gk, gk));
                *S = s;
                w = __fsub_rn(w, __fmul_rn(mult, __fdiv_rn(gk, __fadd_rn(__fsqrt_rn(s), p.opt.eps))));
            } else {  // SGD, row-wise: w -= mult g
                w = __fsub_rn(w, __fmul_rn(mult, gk));
            }
            P[c] = p.sr ? rec_bf16_bits_sr(w, (uint32_t)(r >> (16 * (c % 4)))) : rec_bf16_bits(w);
        }
    }
}

// The optimizer's update of row `row` of table t (number f) from the warp's summed gradient
// (lanes < Cg hold chunks c0 + i * Cg). Called by a whole warp.
template <int V, int NC>
__device__ __forceinline__ void apply(const bwd_params &p, const tab_arg &t, int f, uint32_t row, int lane, int Cg, int Cv,
                                      typename vec_t<V>::type *acc) {
    typedef typename vec_t<V>::type vec;
    if (t.b16) {
        apply16<V, NC>(p, t, f, row, lane, Cg, Cv, acc);
        return;
    }
    vec *P = reinterpret_cast<vec *>(reinterpret_cast<float *>(t.T) + (size_t)row * t.E);
    const bool mine = lane < Cg;
    if (p.opt.kind == REC_SPARSE_ROWWISE_ADAGRAD) {
        float ss = 0;
#pragma unroll
        for (int i = 0; i < NC; i++)
            if (mine && lane + i * Cg < Cv) ss += sumsq(acc[i]);
        for (int o = 16; o >= 1; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
        const float s = t.S[row] + ss / (float)t.E, k = p.lr / (sqrtf(s) + p.opt.eps);
        __syncwarp();  // every lane has read S[row]
        if (lane == 0) t.S[row] = s;
#pragma unroll
        for (int i = 0; i < NC; i++)
            if (mine && lane + i * Cg < Cv) step_row(P[lane + i * Cg], acc[i], k);
    } else if (p.opt.kind == REC_SPARSE_ADAGRAD) {
        vec *S = reinterpret_cast<vec *>(t.S + (size_t)row * t.E);
#pragma unroll
        for (int i = 0; i < NC; i++)
            if (mine && lane + i * Cg < Cv) adagrad(P[lane + i * Cg], S[lane + i * Cg], acc[i], p.lr, p.opt.eps);
    } else {
#pragma unroll
        for (int i = 0; i < NC; i++)
            if (mine && lane + i * Cg < Cv) step_row(P[lane + i * Cg], acc[i], p.lr);
    }
}

__device__ __forceinline__ int table_of(const bwd_params &p, uint32_t key) {
    int lo = 0, hi = p.F;  // last f with row_base[f] <= key
    while (hi - lo > 1) {
        const int mid = (lo + hi) >> 1;
        if (p.row_base[mid] <= key) lo = mid;
        else hi = mid;
    }
    return lo;
}

// What a warp does with the entries of one distinct row (RUN: sum [a, e) and update the row;
// CHUNK: sum [a, e), a piece of a long run, into partial sum q; APPLY: add partial sums
// [q, q1) in order and update the row) at the row's width: V floats per load, NC chunks a lane.
enum { OP_RUN, OP_CHUNK, OP_APPLY };
template <int OP, int V, int NC>
__device__ __forceinline__ void row_op(const bwd_params &p, const tab_arg &t, int f, uint32_t row, int a, int e, int q, int q1) {
    typedef typename vec_t<V>::type vec;
    typedef typename acc_t<V>::type acc_v;
    const int lane = threadIdx.x & 31, Cv = t.E / V;
    int Cg = 1;
    while (Cg < Cv && Cg < 32) Cg <<= 1;
    acc_v acc[NC];
    acc_v *part = reinterpret_cast<acc_v *>(p.partial);  // (chunks, PW / V) each
    const int pw = p.pw / V;
    if constexpr (OP == OP_APPLY) {
#pragma unroll
        for (int i = 0; i < NC; i++) acc[i] = acc_t<V>::zero();
        for (; q < q1; q++)
#pragma unroll
            for (int i = 0; i < NC; i++)
                if (lane < Cg && lane + i * Cg < Cv) add(acc[i], part[(size_t)q * pw + lane + i * Cg]);
    } else
        run_grad<V, NC>(p, t, a, e, Cg, Cv, acc);
    if constexpr (OP == OP_CHUNK) {
#pragma unroll
        for (int i = 0; i < NC; i++)
            if (lane < Cg && lane + i * Cg < Cv) part[(size_t)q * pw + lane + i * Cg] = acc[i];
    } else {
        vec g[NC];
#pragma unroll
        for (int i = 0; i < NC; i++) g[i] = acc_t<V>::round(acc[i]);
        apply<V, NC>(p, t, f, row, lane, Cg, Cv, g);
    }
}

// The row (and table) of sorted entry a, then row_op at the table's width: 16-byte chunks
// where the row and its gradient columns allow them, registers for E <= 256.
template <int OP>
__device__ __forceinline__ void row_dispatch(const bwd_params &p, int a, int e, int q, int q1) {
    const uint32_t key = p.keys_sorted[a];
    const int f = table_of(p, key);
    const tab_arg t = p.tabs[f];
    const uint32_t row = key - p.row_base[f];
    if (t.E % 4 == 0 && t.col % 4 == 0 && p.W % 4 == 0) {
        if (t.E <= 128) row_op<OP, 4, 1>(p, t, f, row, a, e, q, q1);
        else row_op<OP, 4, 2>(p, t, f, row, a, e, q, q1);
    } else {
        if (t.E <= 32) row_op<OP, 1, 1>(p, t, f, row, a, e, q, q1);
        else if (t.E <= 128) row_op<OP, 1, 4>(p, t, f, row, a, e, q, q1);
        else row_op<OP, 1, 8>(p, t, f, row, a, e, q, q1);
    }
}

__device__ __forceinline__ int run_end(const bwd_params &p, int u, int nruns) {
    return u + 1 < nruns ? p.starts[u + 1] : (int)p.n;
}

// One warp per distinct row of at most REC_CUDA_LONG_RUN entries; longer runs (the hot rows of
// small tables: tens of thousands of entries at batch 65536) are listed for the chunked path.
__global__ void update_kernel(bwd_params p) {
    const int lane = threadIdx.x & 31, nruns = p.counters[0];
    const int64_t w0 = (blockIdx.x * (int64_t)blockDim.x + threadIdx.x) >> 5, nw = ((int64_t)gridDim.x * blockDim.x) >> 5;
    for (int64_t u = w0; u < nruns; u += nw) {
        const int a = p.starts[u], e = run_end(p, (int)u, nruns);
        if (e - a > REC_CUDA_LONG_RUN) {
            if (lane == 0) p.long_list[atomicAdd(p.nlong, 1)] = (int32_t)u;
            continue;
        }
        row_dispatch<OP_RUN>(p, a, e, 0, 0);
    }
}

// The long runs' pieces of REC_CUDA_CHUNK entries: chunk_first[i] is long run i's first piece
// (an exclusive scan over the list, one block), chunk_first[nlong] and counters[2] the total.
// A long run is spread over as many warps as it has pieces, each summing its piece into a
// partial sum (float64); then one warp per run adds its pieces in order and updates the row,
// so the result does not depend on the order the runs were listed in.
__global__ void __launch_bounds__(1024) long_plan_kernel(bwd_params p) {
    typedef cub::BlockScan<int, 1024> scan;
    __shared__ typename scan::TempStorage tmp;
    const int nruns = p.counters[0], nlong = *p.nlong, per = (nlong + 1023) / 1024;
    const int i0 = min(nlong, (int)threadIdx.x * per), i1 = min(nlong, i0 + per);
    int local = 0;
    for (int i = i0; i < i1; i++) {
        const int u = p.long_list[i];
        local += (run_end(p, u, nruns) - p.starts[u] + REC_CUDA_CHUNK - 1) / REC_CUDA_CHUNK;
    }
    int first, total;
    scan(tmp).ExclusiveSum(local, first, total);
    for (int i = i0; i < i1; i++) {
        const int u = p.long_list[i];
        p.chunk_first[i] = first;
        first += (run_end(p, u, nruns) - p.starts[u] + REC_CUDA_CHUNK - 1) / REC_CUDA_CHUNK;
    }
    if (threadIdx.x == 0) p.chunk_first[nlong] = total, p.nchunks[0] = total;
}

__global__ void long_chunk_kernel(bwd_params p) {
    const int nruns = p.counters[0], nlong = *p.nlong, total = *p.nchunks;
    const int w0 = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, nw = (gridDim.x * blockDim.x) >> 5;
    for (int q = w0; q < total; q += nw) {
        const int i = upper_bound32(p.chunk_first, nlong, q, 1) - 1, u = p.long_list[i];
        const int a = p.starts[u] + (q - p.chunk_first[i]) * REC_CUDA_CHUNK, e = min(run_end(p, u, nruns), a + REC_CUDA_CHUNK);
        row_dispatch<OP_CHUNK>(p, a, e, q, 0);
    }
}

__global__ void long_apply_kernel(bwd_params p) {
    const int nlong = *p.nlong;
    const int w0 = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, nw = (gridDim.x * blockDim.x) >> 5;
    for (int i = w0; i < nlong; i += nw) {
        const int u = p.long_list[i];
        row_dispatch<OP_APPLY>(p, p.starts[u], 0, p.chunk_first[i], p.chunk_first[i + 1]);
    }
}

__global__ void fill_kernel(float *d, size_t n, float x) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) d[i] = x;
}

// ---- host side --------------------------------------------------------------------------------

static int grid_for(const rec_cuda_embed *g, int64_t n, int threads) {
    const int64_t want = (n + threads - 1) / threads, cap = (int64_t)g->sms * 16;
    return (int)(want < 1 ? 1 : want > cap ? cap : want);
}

extern "C" rec_status rec_cuda_probe(char *name, size_t cap) {
    int n = 0;
    if (cap) name[0] = '\0';
    if (!dlopen("libcuda.so.1", RTLD_LAZY))  // the driver; the runtime is linked in
        return rec_errorf(REC_EUNSUPPORTED, "no NVIDIA driver on this machine (libcuda.so.1 cannot be loaded), so no GPU");
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess)
        return rec_errorf(REC_EUNSUPPORTED, "no usable NVIDIA GPU: %s (%s)",
                          cudaGetErrorString(e), cudaGetErrorName(e));
    if (n == 0) return rec_errorf(REC_EUNSUPPORTED, "no NVIDIA GPU on this machine");
    cudaDeviceProp prop;
    CU_TRY(cudaGetDeviceProperties(&prop, 0), "reading the device's properties");
    if (prop.major < 7)
        return rec_errorf(REC_EUNSUPPORTED, "GPU %s has compute capability %d.%d; rectrain needs 7.0 or newer", prop.name,
                          prop.major, prop.minor);
    snprintf(name, cap, "%s (%d SMs, %.0f GiB)", prop.name, prop.multiProcessorCount,
             (double)prop.totalGlobalMem / (1 << 30));
    return REC_OK;
}

extern "C" rec_status rec_cuda_alloc(void **dptr, size_t bytes, const char *what) {
    *dptr = NULL;
    const cudaError_t e = cudaMalloc(dptr, bytes ? bytes : 16);
    if (e != cudaSuccess) {
        *dptr = NULL;
        return rec_errorf(REC_ENOMEM, "GPU: cannot allocate %.1f MiB for %s: %s", (double)bytes / (1 << 20), what,
                          cudaGetErrorString(e));
    }
    return REC_OK;
}
extern "C" void rec_cuda_free(void *dptr) {
    if (dptr) cudaFree(dptr);
}
// Not on a hot path: both wait for the device to be idle, so that a copy from pageable memory
// has landed before the next kernel, and a download sees every kernel's writes.
extern "C" rec_status rec_cuda_upload(void *dst, const void *src, size_t bytes) {
    CU_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "copying to the GPU");
    CU_TRY(cudaDeviceSynchronize(), "copying to the GPU");
    return REC_OK;
}
extern "C" rec_status rec_cuda_download(void *dst, const void *src, size_t bytes) {
    CU_TRY(cudaDeviceSynchronize(), "waiting for the GPU");
    CU_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "copying from the GPU");
    return REC_OK;
}
extern "C" rec_status rec_cuda_fill(float *d, size_t n, float x) {
    fill_kernel<<<1024, 256>>>(d, n, x);
    CU_TRY(cudaGetLastError(), "launching a fill");
    CU_TRY(cudaDeviceSynchronize(), "filling device memory");
    return REC_OK;
}

extern "C" void rec_cuda_embed_free(rec_cuda_embed *g) {
    if (!g) return;
    if (g->st) cudaStreamSynchronize(g->st);
    cudaFree(g->d_tab), cudaFree(g->d_state), cudaFree(g->d_args), cudaFree(g->d_row_base), cudaFree(g->d_prof);
    for (int i = 0; i < 2; i++) {
        cudaFreeHost(g->h_map[i]), cudaFree(g->d_map[i]);
        if (g->map_done[i]) cudaEventDestroy(g->map_done[i]);
    }
    cudaFree(g->keys), cudaFree(g->keys_sorted), cudaFree(g->vals), cudaFree(g->vals_sorted), cudaFree(g->tag);
    cudaFree(g->heads), cudaFree(g->head_pos), cudaFree(g->starts), cudaFree(g->long_list), cudaFree(g->counters);
    cudaFree(g->cub_tmp), cudaFree(g->chunk_first), cudaFree(g->partial);
    if (g->ev0) cudaEventDestroy(g->ev0);
    if (g->ev1) cudaEventDestroy(g->ev1);
    if (g->st) cudaStreamDestroy(g->st);
    if (g->cp) cudaStreamDestroy(g->cp);
    rec_pool_free(g->pool);
    free(g->rows), free(g->dims), free(g->cols), free(g->sched), free(g->tab_off), free(g->st_off), free(g->h_args);
    free(g);
}

// Table f's bytes, as stored (fp32 or bf16), and the CPU engine's copy of them.
static size_t tab_bytes(const rec_cuda_embed *g, int f) {
    return (size_t)g->rows[f] * g->dims[f] * (g->b16 ? sizeof(uint16_t) : sizeof(float));
}
static void *host_table(rec_embed *e, int f) {
    return rec_embed_is_bf16(e) ? (void *)rec_embed_table_bf16(e, f) : (void *)rec_embed_table(e, f);
}

static size_t state_floats(const rec_sparse_opt_config *o, int64_t R, int E) {
    return o->kind == REC_SPARSE_ADAGRAD ? (size_t)R * E : o->kind == REC_SPARSE_ROWWISE_ADAGRAD ? (size_t)R : 0;
}

// The dynamic shared memory of the fused forward: the schedules' union (256 float4 for the
// block reduction), padded up to cap the SM at `occ` resident blocks (0: no cap).
static size_t fwd_smem(const rec_cuda_embed *g, int occ) {
    const size_t need = REC_CUDA_BLOCK * sizeof(float4);
    if (occ <= 0) return need;
    const size_t pad = g->smem_per_sm / (size_t)occ - 1024;  // 1 KiB per block is the runtime's
    return pad > need ? pad / 128 * 128 : need;
}

rec_status cu_upload_args(rec_cuda_embed *g) {
    for (int f = 0; f < g->F; f++) g->h_args[f].sched = g->sched[f];
    CU_TRY(cudaMemcpyAsync(g->d_args, g->h_args, (size_t)g->F * sizeof(tab_arg), cudaMemcpyHostToDevice, g->st),
           "copying the table arguments");
    CU_TRY(cudaStreamSynchronize(g->st), "copying the table arguments");
    return REC_OK;
}

rec_status cu_embed_layout(rec_cuda_embed *g, int ld, int col0) {
    int W = 0;
    for (int f = 0; f < g->F; f++) W += g->dims[f];
    if (col0 < 0 || ld < col0 + W)
        return rec_errorf(REC_EINVAL, "GPU embedding: output rows of %d floats cannot hold %d from column %d", ld, W, col0);
    for (int f = 0, c = col0; f < g->F; c += g->dims[f], f++) {
        g->cols[f] = g->h_args[f].col = c;
        g->sched[f] = rec_cuda_sched_default(g->dims[f], c, ld);
    }
    g->W = ld;
    return cu_upload_args(g);
}

extern "C" rec_status rec_cuda_embed_init(rec_cuda_embed **out, const rec_embed_config *cfg, const rec_embed *src) {
    *out = NULL;
    char name[256];
    REC_TRY(rec_cuda_probe(name, sizeof name));
    const int F = cfg->n_tables;
    if (F < 1 || F != rec_embed_tables(src))
        return rec_errorf(REC_EINVAL, "GPU embedding: %d tables in the config, %d in the engine to copy", F,
                          rec_embed_tables(src));
    if (cfg->max_batch < 1) return rec_errorf(REC_EINVAL, "GPU embedding: max_batch %d: want >= 1", cfg->max_batch);
    if ((int64_t)F * cfg->max_batch >= ((int64_t)1 << 31))
        return rec_errorf(REC_EINVAL, "GPU embedding: %d tables x batch %d is 2^31 bags or more; use a smaller batch", F,
                          cfg->max_batch);
    int64_t total_rows = 0;
    for (int f = 0; f < F; f++) {
        if (cfg->dims[f] < 1 || cfg->dims[f] > REC_CUDA_MAX_DIM)
            return rec_errorf(REC_EINVAL, "GPU embedding: table %d has dim %d; the GPU engine takes dims 1..%d", f,
                              cfg->dims[f], REC_CUDA_MAX_DIM);
        if (cfg->rows[f] >= ((int64_t)1 << 31))
            return rec_errorf(REC_EINVAL, "GPU embedding: table %d has %lld rows; the GPU engine takes fewer than 2^31",
                              f, (long long)cfg->rows[f]);
        total_rows += cfg->rows[f];
    }
    if (total_rows >= ((int64_t)1 << 32))
        return rec_errorf(REC_EINVAL, "GPU embedding: %lld rows in all; the GPU engine takes fewer than 2^32",
                          (long long)total_rows);
    rec_cuda_embed *g = (rec_cuda_embed *)calloc(1, sizeof *g);
    if (!g) return rec_errorf(REC_ENOMEM, "GPU embedding: out of memory");
    g->F = F, g->maxB = cfg->max_batch, g->pooling = cfg->pooling, g->opt = cfg->opt;
    g->b16 = rec_embed_is_bf16(src), g->sr = rec_embed_rounding_mode(src) == REC_ROUND_STOCHASTIC;
    g->seed = rec_embed_seed(src), g->updates = rec_embed_updates(src);
    g->rows = (int64_t *)malloc(F * sizeof(int64_t)), g->dims = (int *)malloc(F * sizeof(int));
    g->cols = (int *)malloc(F * sizeof(int)), g->sched = (int *)malloc(F * sizeof(int));
    g->tab_off = (size_t *)malloc((F + 1) * sizeof(size_t)), g->st_off = (size_t *)malloc((F + 1) * sizeof(size_t));
    g->h_args = (tab_arg *)calloc(F, sizeof(tab_arg));
    if (!g->rows || !g->dims || !g->cols || !g->sched || !g->tab_off || !g->st_off || !g->h_args) {
        rec_cuda_embed_free(g);
        return rec_errorf(REC_ENOMEM, "GPU embedding: out of memory");
    }
    size_t to = 0, so = 0;
    for (int f = 0; f < F; f++) {
        g->rows[f] = cfg->rows[f], g->dims[f] = cfg->dims[f], g->cols[f] = g->W, g->W += cfg->dims[f];
        g->tab_off[f] = to, g->st_off[f] = so;
        to += (tab_bytes(g, f) + 15) / 16 * 4;  // floats, 16-byte aligned
        so += (state_floats(&g->opt, g->rows[f], g->dims[f]) + 3) / 4 * 4;
    }
    g->tab_off[F] = to, g->st_off[F] = so;
    for (int f = 0; f < F; f++) g->sched[f] = rec_cuda_sched_default(g->dims[f], g->cols[f], g->W);
    g->key_bits = 1;
    while (g->key_bits < 32 && ((int64_t)1 << g->key_bits) < total_rows) g->key_bits++;
    rec_status s = REC_OK;
    cudaDeviceProp prop;
    cudaError_t e = cudaGetDeviceProperties(&prop, 0);
    if (e == cudaSuccess) {
        g->sms = prop.multiProcessorCount;
        g->smem_per_sm = prop.sharedMemPerMultiprocessor;
        // The training's streams at the highest priority: a preprocessing stream beside them
        // (train --prep-device cuda, src/cuda/prep.cu: the lowest) fills what they leave idle
        // and whose pending blocks wait behind theirs (running blocks are not preempted, nor are
        // copies ordered): RAP's co-run on one GPU without MPS (../shared/papers/
        // 000-RAP-digest.md, "GPU-only parts"). Both ordered with the legacy stream's copies.
        int least = 0, greatest = 0;
        e = cudaDeviceGetStreamPriorityRange(&least, &greatest);
        if (e == cudaSuccess) e = cudaStreamCreateWithPriority(&g->st, cudaStreamDefault, greatest);
        if (e == cudaSuccess) e = cudaStreamCreateWithPriority(&g->cp, cudaStreamDefault, greatest);  // batches' copies
    }
    if (e == cudaSuccess) e = cudaEventCreate(&g->ev0);
    if (e == cudaSuccess) e = cudaEventCreate(&g->ev1);
    for (int i = 0; e == cudaSuccess && i < 2; i++) {
        e = cudaEventCreateWithFlags(&g->map_done[i], cudaEventDisableTiming);
        if (e == cudaSuccess) e = cudaMallocHost((void **)&g->h_map[i], (2 * F + 1) * sizeof(int32_t));
    }
    if (e != cudaSuccess) s = cu_fail(e, "setting up the GPU embedding engine");
    const int cpus = rec_cpu_count();
    if (!s) s = rec_pool_init(&g->pool, cpus < F ? cpus : F);
    if (!s) s = rec_cuda_alloc((void **)&g->d_tab, to * sizeof(float), "the embedding tables");
    if (!s) s = rec_cuda_alloc((void **)&g->d_state, so * sizeof(float), "the embedding optimizer state");
    if (!s) s = rec_cuda_alloc((void **)&g->d_args, F * sizeof(tab_arg), "the table arguments");
    if (!s) s = rec_cuda_alloc((void **)&g->d_row_base, (F + 1) * sizeof(uint32_t), "the table row bases");
    if (!s) s = rec_cuda_alloc((void **)&g->d_prof, 2 * F * sizeof(unsigned long long), "the per-table profile");
    for (int i = 0; !s && i < 2; i++) s = rec_cuda_alloc((void **)&g->d_map[i], (2 * F + 1) * sizeof(int32_t), "the block map");
    if (!s) s = rec_cuda_alloc((void **)&g->counters, 4 * sizeof(int32_t), "the backward counters");
    if (s) {
        rec_cuda_embed_free(g);
        return s;
    }
    uint32_t *rb = (uint32_t *)malloc((F + 1) * sizeof(uint32_t));
    if (!rb) {
        rec_cuda_embed_free(g);
        return rec_errorf(REC_ENOMEM, "GPU embedding: out of memory");
    }
    uint32_t base = 0;
    for (int f = 0; f < F; f++) {
        rb[f] = base, base += (uint32_t)g->rows[f];
        const size_t sn = state_floats(&g->opt, g->rows[f], g->dims[f]);
        g->h_args[f] = tab_arg{g->d_tab + g->tab_off[f], sn ? g->d_state + g->st_off[f] : NULL, g->dims[f], g->cols[f],
                               g->sched[f], g->b16};
        e = cudaMemcpy(g->d_tab + g->tab_off[f], host_table((rec_embed *)src, f), tab_bytes(g, f), cudaMemcpyHostToDevice);
        if (e == cudaSuccess && sn)
            e = cudaMemcpy(g->d_state + g->st_off[f], rec_embed_state((rec_embed *)src, f), sn * sizeof(float),
                           cudaMemcpyHostToDevice);
        if (e != cudaSuccess) break;
    }
    rb[F] = base;
    if (e == cudaSuccess) e = cudaMemcpy(g->d_row_base, rb, (F + 1) * sizeof(uint32_t), cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
    free(rb);
    if (e != cudaSuccess) s = cu_fail(e, "copying the tables to the GPU");
    // The most blocks an SM holds with no padding: the occupancy settings derive from it.
    int occ = 0;
    if (!s) {
        e = cudaFuncSetAttribute(fwd_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 (int)(prop.sharedMemPerBlockOptin));
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(fwd_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)(prop.sharedMemPerBlockOptin));
        if (e == cudaSuccess)
            e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, fwd_kernel<false>, REC_CUDA_BLOCK, fwd_smem(g, 0));
        if (e != cudaSuccess) s = cu_fail(e, "configuring the fused embedding kernel");
    }
    g->max_occ = occ < 1 ? 1 : occ, g->occ = 0;
    if (!s) s = cu_upload_args(g);
    if (s) {
        rec_cuda_embed_free(g);
        return s;
    }
    *out = g;
    return REC_OK;
}

extern "C" rec_status rec_cuda_embed_download(rec_cuda_embed *g, rec_embed *dst) {
    if (rec_embed_is_bf16(dst) != g->b16)
        return rec_errorf(REC_EINVAL, "GPU embedding: its tables are %s, the engine to copy them into keeps %s",
                          g->b16 ? "bf16" : "fp32", rec_embed_is_bf16(dst) ? "bf16" : "fp32");
    CU_TRY(cudaStreamSynchronize(g->st), "waiting for the GPU");
    rec_embed_set_updates(dst, g->updates);
    for (int f = 0; f < g->F; f++) {
        CU_TRY(cudaMemcpy(host_table(dst, f), g->d_tab + g->tab_off[f], tab_bytes(g, f), cudaMemcpyDeviceToHost),
               "copying the tables from the GPU");
        const size_t sn = state_floats(&g->opt, g->rows[f], g->dims[f]);
        if (sn)
            CU_TRY(cudaMemcpy(rec_embed_state(dst, f), g->d_state + g->st_off[f], sn * sizeof(float), cudaMemcpyDeviceToHost),
                   "copying the optimizer state from the GPU");
    }
    return REC_OK;
}


extern "C" rec_status rec_cuda_embed_sync(rec_cuda_embed *g) {
    CU_TRY(cudaStreamSynchronize(g->st), "running the embedding kernels");
    return REC_OK;
}

// ---- batches ------------------------------------------------------------------------------------

extern "C" rec_status rec_cuda_batch_new(rec_cuda_batch **out) {
    char name[256];
    *out = NULL;
    REC_TRY(rec_cuda_probe(name, sizeof name));
    rec_cuda_batch *d = (rec_cuda_batch *)calloc(1, sizeof *d);
    if (!d) return rec_errorf(REC_ENOMEM, "GPU batch: out of memory");
    cudaError_t e = cudaEventCreateWithFlags(&d->copied, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&d->used, cudaEventDisableTiming);
    if (e != cudaSuccess) {
        if (d->copied) cudaEventDestroy(d->copied);
        free(d);
        return cu_fail(e, "creating a batch event");
    }
    *out = d;
    return REC_OK;
}

extern "C" void rec_cuda_batch_free(rec_cuda_batch *d) {
    if (!d) return;
    cudaEventSynchronize(d->copied), cudaEventSynchronize(d->used);
    cudaEventDestroy(d->copied), cudaEventDestroy(d->used);
    cudaFreeHost(d->h_buf), cudaFree(d->d_buf), free(d->nnz);
    free(d);
}

rec_status cu_batch_reserve(rec_cuda_embed *g, rec_cuda_batch *d, int B, int64_t total, int weighted, int host) {
    const int F = g->F;
    if (total >= ((int64_t)1 << 31))
        return rec_errorf(REC_EINVAL, "GPU batch: %lld ids; the GPU engine takes fewer than 2^31 a batch (use a smaller batch)",
                          (long long)total);
    const size_t bytes = ((size_t)F * (B + 1) + (size_t)total * (weighted ? 2 : 1)) * 4;
    if (d->pending) CU_TRY(cudaEventSynchronize(d->copied), "waiting for the batch's last copy");
    d->pending = 0;
    if (bytes > d->cap_bytes || d->F_cap < F) {
        CU_TRY(cudaEventSynchronize(d->used), "waiting for the batch's last use");
        cudaFree(d->d_buf), free(d->nnz);
        d->d_buf = NULL, d->nnz = NULL, d->cap_bytes = 0;
        const size_t cap = bytes + bytes / 4;
        REC_TRY(rec_cuda_alloc(&d->d_buf, cap, "a batch's ids"));
        d->nnz = (int64_t *)malloc(F * sizeof(int64_t));
        if (!d->nnz) return rec_errorf(REC_ENOMEM, "GPU batch: out of memory");
        d->cap_bytes = cap, d->F_cap = F;
    }
    if (host && bytes > d->h_cap) { /* (a batch gathered on the GPU has no host copy) */
        cudaFreeHost(d->h_buf);
        d->h_buf = NULL, d->h_cap = 0;
        CU_TRY(cudaMallocHost(&d->h_buf, d->cap_bytes), "allocating a pinned batch buffer");
        d->h_cap = d->cap_bytes;
    }
    d->B = B, d->F = F, d->total = total;
    d->d_off = (const int32_t *)d->d_buf, d->d_ids = d->d_off + (size_t)F * (B + 1);
    d->d_w = weighted ? (const float *)(d->d_ids + total) : NULL;
    return REC_OK;
}

extern "C" rec_status rec_cuda_batch_load(rec_cuda_embed *g, rec_cuda_batch *d, const rec_batch *b, int first_feature) {
    const int F = g->F, B = (int)b->n;
    if (first_feature < 0 || first_feature + F > b->n_sparse)
        return rec_errorf(REC_EINVAL, "GPU batch: features %d..%d asked of a batch with %d", first_feature,
                          first_feature + F - 1, b->n_sparse);
    if (B < 1 || B > g->maxB)
        return rec_errorf(REC_EINVAL, "GPU batch: %d rows; the engine was made for 1..%d", B, g->maxB);
    int weighted;
    const int64_t total = rec_cuda_batch_ids(b, first_feature, F, &weighted);
    REC_TRY(cu_batch_reserve(g, d, B, total, weighted, 1));
    int32_t *off = (int32_t *)d->h_buf, *ids = off + (size_t)F * (B + 1);
    REC_TRY(rec_cuda_pack(b, first_feature, F, g->rows, off, ids, weighted ? (float *)(ids + total) : NULL, d->nnz, g->pool));
    // On the copy stream, once the kernels that read this batch's last contents are done: the
    // copy overlaps the previous step's kernels, which wait for it only where they read it.
    CU_TRY(cudaStreamWaitEvent(g->cp, d->used, 0), "ordering a batch copy");
    const size_t bytes = ((size_t)F * (B + 1) + (size_t)total * (weighted ? 2 : 1)) * 4;
    CU_TRY(cudaMemcpyAsync(d->d_buf, d->h_buf, bytes, cudaMemcpyHostToDevice, g->cp), "copying a batch to the GPU");
    CU_TRY(cudaEventRecord(d->copied, g->cp), "recording a batch copy");
    d->pending = 1;
    return REC_OK;
}

// ---- forward ------------------------------------------------------------------------------------

static rec_status launch_forward(rec_cuda_embed *g, const rec_cuda_batch *d, float *out, __nv_bfloat16 *out16, int prof) {
    if (d->F != g->F) return rec_errorf(REC_EINVAL, "GPU forward: the batch was loaded for %d tables, the engine has %d", d->F, g->F);
    // The block map of this batch into the next slot of the pinned ring, once that slot's
    // last copy is done (two launches ago: in the steady state this does not wait).
    const int i = g->map_i;
    g->map_i ^= 1;
    CU_TRY(cudaEventSynchronize(g->map_done[i]), "waiting for a block map slot");
    int32_t *rounds = g->h_map[i], *start = rounds + g->F;
    const int occ = g->occ > 0 ? g->occ : g->max_occ;
    const int64_t nblocks = rec_cuda_block_map(g->F, d->B, g->dims, g->sched, d->nnz, (int64_t)g->sms * occ * 4, rounds, start);
    if (nblocks >= ((int64_t)1 << 31) - 1) return rec_errorf(REC_EINVAL, "GPU forward: %lld blocks: batch too large", (long long)nblocks);
    CU_TRY(cudaMemcpyAsync(g->d_map[i], g->h_map[i], (2 * g->F + 1) * sizeof(int32_t), cudaMemcpyHostToDevice, g->st),
           "copying the block map");
    CU_TRY(cudaEventRecord(g->map_done[i], g->st), "recording the block map copy");
    CU_TRY(cudaStreamWaitEvent(g->st, d->copied, 0), "waiting for a batch's copy");
    fwd_params p = {g->d_args, g->d_map[i], g->F, d->B, g->W, g->pooling == REC_POOL_MEAN, d->d_off, d->d_ids, d->d_w, out,
                    out16, g->d_prof};
    const size_t smem = fwd_smem(g, g->occ);
    if (prof) fwd_kernel<true><<<(unsigned)nblocks, REC_CUDA_BLOCK, smem, g->st>>>(p);
    else fwd_kernel<false><<<(unsigned)nblocks, REC_CUDA_BLOCK, smem, g->st>>>(p);
    CU_TRY(cudaGetLastError(), "launching the fused embedding forward");
    CU_TRY(cudaEventRecord(d->used, g->st), "recording a batch's use");
    return REC_OK;
}

rec_status cu_launch_forward(rec_cuda_embed *g, const rec_cuda_batch *d, float *out, int prof) {
    return launch_forward(g, d, out, NULL, prof);
}
extern "C" rec_status rec_cuda_embed_forward(rec_cuda_embed *g, const rec_cuda_batch *d, float *out) {
    return launch_forward(g, d, out, NULL, 0);
}
rec_status cu_embed_forward16(rec_cuda_embed *g, const rec_cuda_batch *d, __nv_bfloat16 *out16) {
    return launch_forward(g, d, NULL, out16, 0);
}

// ---- backward -----------------------------------------------------------------------------------

static rec_status bw_reserve(rec_cuda_embed *g, int64_t n) {
    if (n <= g->bw_cap) return REC_OK;
    cudaFree(g->keys), cudaFree(g->keys_sorted), cudaFree(g->vals), cudaFree(g->vals_sorted), cudaFree(g->tag);
    cudaFree(g->heads), cudaFree(g->head_pos), cudaFree(g->starts), cudaFree(g->long_list), cudaFree(g->cub_tmp);
    cudaFree(g->chunk_first), cudaFree(g->partial);
    g->keys = g->keys_sorted = NULL, g->vals = g->vals_sorted = g->tag = g->heads = g->head_pos = g->starts = NULL;
    g->long_list = g->chunk_first = NULL, g->partial = NULL, g->cub_tmp = NULL, g->bw_cap = 0;
    const int64_t cap = n + n / 4 + 1024;
    const size_t b4 = (size_t)cap * 4;
    void **bufs[] = {(void **)&g->keys, (void **)&g->keys_sorted, (void **)&g->vals, (void **)&g->vals_sorted,
                     (void **)&g->tag, (void **)&g->heads, (void **)&g->head_pos, (void **)&g->starts, (void **)&g->long_list};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) REC_TRY(rec_cuda_alloc(bufs[i], b4, "the backward's sort"));
    // Long runs have more than REC_CUDA_LONG_RUN entries each, and as many pieces as they
    // have REC_CUDA_CHUNK entries, rounded up.
    const int64_t nlong = cap / REC_CUDA_LONG_RUN + 1, chunks = cap / REC_CUDA_CHUNK + nlong;
    g->pw = 4;
    for (int f = 0; f < g->F; f++) {
        const int w = (g->dims[f] + 3) / 4 * 4;
        if (w > g->pw) g->pw = w;
    }
    REC_TRY(rec_cuda_alloc((void **)&g->chunk_first, (size_t)(nlong + 1) * 4, "the backward's long runs"));
    REC_TRY(rec_cuda_alloc((void **)&g->partial, (size_t)chunks * g->pw * sizeof(double), "the long runs' partial sums"));
    size_t a = 0, b = 0;
    CU_TRY(cub::DeviceRadixSort::SortPairs(NULL, a, g->keys, g->keys_sorted, g->vals, g->vals_sorted, (int)cap, 0, 32, g->st),
           "sizing the sort");
    CU_TRY(cub::DeviceScan::ExclusiveSum(NULL, b, g->heads, g->head_pos, (int)cap, g->st), "sizing the scan");
    g->cub_bytes = a > b ? a : b;
    REC_TRY(rec_cuda_alloc(&g->cub_tmp, g->cub_bytes, "the backward's sort scratch"));
    g->bw_cap = cap;
    return REC_OK;
}

// The step's backward and update, enqueued; `updates` keys its stochastic rounding.
static rec_status enqueue_backward(rec_cuda_embed *g, const rec_cuda_batch *d, const float *dout,
                                   const __nv_bfloat16 *dout16, float lr, int64_t updates) {
    if (d->F != g->F) return rec_errorf(REC_EINVAL, "GPU backward: the batch was loaded for %d tables, the engine has %d", d->F, g->F);
    const int64_t n = d->total;
    if (n == 0) return REC_OK;
    REC_TRY(bw_reserve(g, n));
    CU_TRY(cudaStreamWaitEvent(g->st, d->copied, 0), "waiting for a batch's copy");
    bwd_params p;
    memset(&p, 0, sizeof p);
    p.tabs = g->d_args, p.row_base = g->d_row_base, p.F = g->F, p.B = d->B, p.W = g->W, p.mean = g->pooling == REC_POOL_MEAN;
    p.off = d->d_off, p.ids = d->d_ids, p.w = d->d_w, p.dout = dout, p.dout16 = dout16;
    p.keys = g->keys, p.vals = g->vals, p.tag = g->tag, p.keys_sorted = g->keys_sorted, p.vals_sorted = g->vals_sorted;
    p.starts = g->starts, p.counters = g->counters, p.long_list = g->long_list, p.nlong = g->counters + 1;
    p.chunk_first = g->chunk_first, p.nchunks = g->counters + 2, p.partial = g->partial, p.pw = g->pw;
    p.n = n, p.opt = g->opt, p.lr = lr;
    p.seed = g->seed, p.updates = updates, p.sr = g->b16 && g->sr;
    const int grid = grid_for(g, n, 256);
    keys_kernel<<<grid, 256, 0, g->st>>>(p);
    CU_TRY(cudaGetLastError(), "launching the backward's keys");
    size_t tb = g->cub_bytes;
    CU_TRY(cub::DeviceRadixSort::SortPairs(g->cub_tmp, tb, g->keys, g->keys_sorted, g->vals, g->vals_sorted, (int)n, 0,
                                           g->key_bits, g->st), "sorting the backward's rows");
    heads_kernel<<<grid, 256, 0, g->st>>>(g->keys_sorted, n, g->heads);
    tb = g->cub_bytes;
    CU_TRY(cub::DeviceScan::ExclusiveSum(g->cub_tmp, tb, g->heads, g->head_pos, (int)n, g->st), "scanning the runs");
    starts_kernel<<<grid, 256, 0, g->st>>>(g->heads, g->head_pos, n, g->starts, g->counters);
    update_kernel<<<grid_for(g, n * 32, 256), 256, 0, g->st>>>(p);
    long_plan_kernel<<<1, 1024, 0, g->st>>>(p);
    long_chunk_kernel<<<g->sms * 8, 256, 0, g->st>>>(p);
    long_apply_kernel<<<g->sms * 2, 256, 0, g->st>>>(p);
    CU_TRY(cudaGetLastError(), "launching the backward's update");
    CU_TRY(cudaEventRecord(d->used, g->st), "recording a batch's use");
    return REC_OK;
}

// Counts each update enqueued, as the CPU engine counts its calls (an empty batch's too).
static rec_status backward_update(rec_cuda_embed *g, const rec_cuda_batch *d, const float *dout, const __nv_bfloat16 *dout16,
                                  float lr) {
    REC_TRY(enqueue_backward(g, d, dout, dout16, lr, g->updates));
    g->updates++;
    return REC_OK;
}

extern "C" rec_status rec_cuda_embed_backward_update(rec_cuda_embed *g, const rec_cuda_batch *d, const float *dout, float lr) {
    return backward_update(g, d, dout, NULL, lr);
}
rec_status cu_embed_backward16(rec_cuda_embed *g, const rec_cuda_batch *d, const __nv_bfloat16 *dout16, float lr) {
    return backward_update(g, d, NULL, dout16, lr);
}
