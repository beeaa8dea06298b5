// The dot interaction on the tensor cores, fused (interact.cuh): one warp per sample holds its
// T = [x; e_1; ...; e_F] in bf16 in shared memory, rows padded to 32, and multiplies with
// mma.sync m16n8k16 (bf16 operands, fp32 sums). Forward: the lower triangle of T T^T goes
// straight into z (dlrm's li/lj order), so the Gram matrices never reach device memory.
// Backward: G (the symmetric matrix of z's gradient, built in shared memory from dz) times T
// gives dT: row 0 plus dz[:, 0:E] is the bottom MLP's gradient, rows 1..F (bf16) the
// embeddings'. Each reads a sample's T once (6.9 KB at F 26, E 128) and writes only what the
// next stage reads.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "interact.cuh"

enum { IW = 4, LDG = 40 };  // warps (samples in flight) a block; G's row stride (bf16)

__device__ __forceinline__ void ldsm_x4(uint32_t *r, const __nv_bfloat16 *p) {
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t *r, const __nv_bfloat16 *p) {
    const uint32_t s = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
// c (16 x 8, fp32) += a (16 x 16, row-major) b (16 x 8, column-major): the fragments of PTX's
// mma.m16n8k16 (lane l holds c at rows l / 4 and l / 4 + 8, columns 2 (l % 4) and + 1).
__device__ __forceinline__ void mma16816(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Pair (i, j), i > j (or i >= j with self-interaction): its place among z's products.
__device__ __forceinline__ int pair_index(int i, int j, int self) { return self ? i * (i + 1) / 2 + j : i * (i - 1) / 2 + j; }

// Sample b's T into S (32 rows of ld bf16; rows F1..31 stay zero): row 0 from x (fp32), rows
// 1..F1-1 from T16 (the embedding engine's bf16 output, F1 rows of E a sample, row 0 unused).
__device__ __forceinline__ void load_T(__nv_bfloat16 *S, int ld, int b, int F1, int E, const float *x,
                                       const __nv_bfloat16 *T16, int lane) {
    const float *xb = x + (size_t)b * E;
    for (int e = 2 * lane; e < E; e += 64)
        *reinterpret_cast<__nv_bfloat162 *>(S + e) = __floats2bfloat162_rn(xb[e], xb[e + 1]);
    const uint4 *src = reinterpret_cast<const uint4 *>(T16 + (size_t)b * F1 * E);
    const int cpr = E / 8;  // 16-byte chunks a row
    for (int c = cpr + lane; c < F1 * cpr; c += 32) {
        const int r = c / cpr;
        *reinterpret_cast<uint4 *>(S + (size_t)r * ld + (c - r * cpr) * 8) = src[c];
    }
}

__global__ void __launch_bounds__(32 * IW) gram_fwd_kernel(int B, int F1, int E, int Dz, int self, const float *x,
                                                           const __nv_bfloat16 *T16, float *z, __nv_bfloat16 *z16) {
    extern __shared__ __align__(16) __nv_bfloat16 sm[];
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, ld = E + 8;
    __nv_bfloat16 *S = sm + (size_t)w * 32 * ld;
    for (int i = lane; i < (32 - F1) * ld; i += 32) S[(size_t)F1 * ld + i] = __float2bfloat16_rn(0.0f);
    // Output tiles (16 x 8) holding some of the lower triangle: rows 0-15 x columns 0-15, and
    // rows 16-31 x all 32 columns.
    constexpr int MT[6] = {0, 0, 1, 1, 1, 1}, NT[6] = {0, 1, 0, 1, 2, 3};
    for (int b = blockIdx.x * IW + w; b < B; b += gridDim.x * IW) {
        load_T(S, ld, b, F1, E, x, T16, lane);
        __syncwarp();
        float acc[6][4];
#pragma unroll
        for (int t = 0; t < 6; t++) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;
        const int ar = lane % 16, ac = (lane / 16) * 8, br = (lane % 8) + (lane / 16) * 8, bc = ((lane / 8) % 2) * 8;
        for (int k = 0; k < E; k += 16) {
            uint32_t a0[4], a1[4], b01[4], b23[4];
            ldsm_x4(a0, S + (size_t)ar * ld + k + ac);          // rows 0-15
            ldsm_x4(a1, S + (size_t)(16 + ar) * ld + k + ac);   // rows 16-31
            ldsm_x4(b01, S + (size_t)br * ld + k + bc);         // columns 0-15 (n-tiles 0, 1)
            ldsm_x4(b23, S + (size_t)(16 + br) * ld + k + bc);  // columns 16-31 (n-tiles 2, 3)
            mma16816(acc[0], a0, b01[0], b01[1]);
            mma16816(acc[1], a0, b01[2], b01[3]);
            mma16816(acc[2], a1, b01[0], b01[1]);
            mma16816(acc[3], a1, b01[2], b01[3]);
            mma16816(acc[4], a1, b23[0], b23[1]);
            mma16816(acc[5], a1, b23[2], b23[3]);
        }
        const size_t zb = (size_t)b * Dz;
#pragma unroll
        for (int t = 0; t < 6; t++)
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int q = 0; q < 2; q++) {
                    const int i = 16 * MT[t] + lane / 4 + 8 * h, j = 8 * NT[t] + 2 * (lane % 4) + q;
                    if (i < F1 && (j < i || (self && j == i))) {
                        const float v = acc[t][2 * h + q];
                        const size_t at = zb + E + pair_index(i, j, self);
                        if (z) z[at] = v;
                        if (z16) z16[at] = __float2bfloat16_rn(v);
                    }
                }
        for (int e = lane; e < E; e += 32) {
            const float v = x[(size_t)b * E + e];
            if (z) z[zb + e] = v;
            if (z16) z16[zb + e] = __float2bfloat16_rn(v);
        }
        __syncwarp();  // S is rewritten for the next sample
    }
}

__global__ void __launch_bounds__(32 * IW) gram_bwd_kernel(int B, int F1, int E, int Dz, int self, const float *x,
                                                           const __nv_bfloat16 *T16, const float *dz, float *dh,
                                                           __nv_bfloat16 *dT16) {
    extern __shared__ __align__(16) __nv_bfloat16 sm[];
    const int w = threadIdx.x >> 5, lane = threadIdx.x & 31, ld = E + 8;
    __nv_bfloat16 *S = sm + (size_t)w * (32 * ld + 32 * LDG), *G = S + 32 * ld;
    for (int i = lane; i < (32 - F1) * ld; i += 32) S[(size_t)F1 * ld + i] = __float2bfloat16_rn(0.0f);
    const int ar = lane % 16, ac = (lane / 16) * 8, br = (lane % 8) + ((lane / 8) % 2) * 8, bc = (lane / 16) * 8;
    for (int b = blockIdx.x * IW + w; b < B; b += gridDim.x * IW) {
        load_T(S, ld, b, F1, E, x, T16, lane);
        const float *g = dz + (size_t)b * Dz + E;
        for (int r = lane; r < 32 * 32; r += 32) {
            const int i = r / 32, j = r % 32;
            float v = 0.0f;
            if (i < F1 && j < F1 && i != j) v = g[pair_index(i > j ? i : j, i > j ? j : i, self)];
            else if (i < F1 && i == j && self) v = 2.0f * g[pair_index(i, i, 1)];
            G[i * LDG + j] = __float2bfloat16_rn(v);
        }
        __syncwarp();
        uint32_t ga[2][2][4];  // G's fragments: row tile, k tile
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int kt = 0; kt < 2; kt++) ldsm_x4(ga[mt][kt], G + (16 * mt + ar) * LDG + 16 * kt + ac);
        for (int n0 = 0; n0 < E; n0 += 64) {  // 64 columns of dT a pass: 8 n-tiles x 2 row tiles
            float acc[2][8][4];
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int t = 0; t < 8; t++) acc[mt][t][0] = acc[mt][t][1] = acc[mt][t][2] = acc[mt][t][3] = 0.0f;
#pragma unroll
            for (int kt = 0; kt < 2; kt++)
#pragma unroll
                for (int np = 0; np < 4; np++) {
                    if (n0 + 16 * np >= E) break;
                    uint32_t bb[4];  // T's rows 16 kt.. as B (k = feature, n = column), transposed by ldmatrix
                    ldsm_x4_t(bb, S + (size_t)(16 * kt + br) * ld + n0 + 16 * np + bc);
#pragma unroll
                    for (int mt = 0; mt < 2; mt++) {
                        mma16816(acc[mt][2 * np], ga[mt][kt], bb[0], bb[1]);
                        mma16816(acc[mt][2 * np + 1], ga[mt][kt], bb[2], bb[3]);
                    }
                }
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int t = 0; t < 8; t++)
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const int i = 16 * mt + lane / 4 + 8 * h, e = n0 + 8 * t + 2 * (lane % 4);
                        if (i >= F1 || e >= E) continue;
                        const float v0 = acc[mt][t][2 * h], v1 = acc[mt][t][2 * h + 1];
                        if (i == 0) {
                            const float *d0 = dz + (size_t)b * Dz + e;
                            dh[(size_t)b * E + e] = d0[0] + v0, dh[(size_t)b * E + e + 1] = d0[1] + v1;
                        } else
                            *reinterpret_cast<__nv_bfloat162 *>(dT16 + ((size_t)b * F1 + i) * E + e) = __floats2bfloat162_rn(v0, v1);
                    }
        }
        __syncwarp();  // S and G are rewritten for the next sample
    }
}

static size_t fwd_smem(int E) { return (size_t)IW * 32 * (E + 8) * 2; }
static size_t bwd_smem(int E) { return (size_t)IW * (32 * (E + 8) + 32 * LDG) * 2; }

int rec_interact_mma_fits(int F1, int E) { return F1 >= 2 && F1 <= 32 && E % 16 == 0 && E >= 16 && E <= 256; }

cudaError_t rec_interact_mma_setup(void) {
    cudaError_t e = cudaFuncSetAttribute(gram_fwd_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)fwd_smem(256));
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(gram_bwd_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bwd_smem(256));
    return e;
}

static int grid_of(int B, int sms) {
    const int want = (B + IW - 1) / IW, cap = sms * 8;
    return want < cap ? want : cap;
}

cudaError_t rec_interact_mma_fwd(cudaStream_t st, int sms, int B, int F1, int E, int Dz, int self, const float *x,
                                 const __nv_bfloat16 *T16, float *z, __nv_bfloat16 *z16) {
    gram_fwd_kernel<<<grid_of(B, sms), 32 * IW, fwd_smem(E), st>>>(B, F1, E, Dz, self, x, T16, z, z16);
    return cudaGetLastError();
}

cudaError_t rec_interact_mma_bwd(cudaStream_t st, int sms, int B, int F1, int E, int Dz, int self, const float *x,
                                 const __nv_bfloat16 *T16, const float *dz, float *dh, __nv_bfloat16 *dT16) {
    gram_bwd_kernel<<<grid_of(B, sms), 32 * IW, bwd_smem(E), st>>>(B, F1, E, Dz, self, x, T16, dz, dh, dT16);
    return cudaGetLastError();
}
