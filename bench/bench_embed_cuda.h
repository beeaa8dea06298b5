/* `rectrain bench embed --device cuda` (bench_embed_cuda.c). */
#ifndef RECTRAIN_BENCH_EMBED_CUDA_H
#define RECTRAIN_BENCH_EMBED_CUDA_H

/* Runs model (kaggle, A-E or all) on the GPU; the options as bench embed's. */
int bench_embed_cuda(const char *cmd, const char *model, int batch, int nb, int reps, double kscale, const char *dump_dir,
                     const char *plan_out, int json);

#endif
