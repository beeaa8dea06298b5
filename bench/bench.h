/* Benchmarks behind `rectrain bench NAME`. Each warms up, repeats, reports the median, prints
 * a table with the machine's measured ceiling beside the figure, and with --json ends with
 * one JSON object on stdout. */
#ifndef RECTRAIN_BENCH_H
#define RECTRAIN_BENCH_H

#include "rectrain/model.h"

int bench_prep(int argc, char **argv);
int bench_train(int argc, char **argv);
int bench_embed(int argc, char **argv);
int bench_mlp(int argc, char **argv);
int bench_loader(int argc, char **argv);
int bench_oracle(int argc, char **argv);
/* Not a benchmark: the link emulator the cache benchmark puts between processes. */
int bench_link(int argc, char **argv);

/* The model config the dense benchmarks run by default, read from the current directory. */
#define BENCH_DEFAULT_CONFIG "configs/dlrm_kaggle.json"

/* Loads a model config; when the default is missing, the message says to run from the
 * repository root or give --config (before any work a benchmark would waste). */
rec_status bench_load_config(rec_model_config *c, const char *path);

/* The machine's GEMM rate beside which the dense benchmarks report theirs: oneDNN's sgemm on
 * (M, K) x (K, N) with `threads` threads, GFLOP/s, median of 7 after 2 warm-ups (0 when it
 * cannot run). */
double bench_sgemm_gflops(int threads, int M, int N, int K);

#endif
