// The GPU model's fused dot interaction on the tensor cores (interact.cu). T16 holds each
// sample's F1 rows of E in bf16 (row 0 unused: x comes in fp32 and is rounded on the way in).
#ifndef RECTRAIN_CUDA_INTERACT_CUH
#define RECTRAIN_CUDA_INTERACT_CUH

#include <cuda_bf16.h>
#include <cuda_runtime.h>

// Shapes the kernels take: 2..32 rows (features and x), E a multiple of 16 up to 256.
int rec_interact_mma_fits(int F1, int E);
// Raises the kernels' shared-memory limit (once, before the first launch).
cudaError_t rec_interact_mma_setup(void);
// z (B, Dz) = [x, the lower triangle of T T^T in dlrm's li/lj order], into z (fp32) and/or
// z16 (bf16), either may be NULL.
cudaError_t rec_interact_mma_fwd(cudaStream_t st, int sms, int B, int F1, int E, int Dz, int self, const float *x,
                                 const __nv_bfloat16 *T16, float *z, __nv_bfloat16 *z16);
// From z's gradient dz: dh (B, E) = dz[:, 0:E] + (G T) row 0, dT16's rows 1..F1-1 = (G T)'s.
cudaError_t rec_interact_mma_bwd(cudaStream_t st, int sms, int B, int F1, int E, int Dz, int self, const float *x,
                                 const __nv_bfloat16 *T16, const float *dz, float *dh, __nv_bfloat16 *dT16);

#endif
