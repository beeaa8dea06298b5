/* rectrain bench mlp: the dense layers alone. Each MLP of a model config (DLRM's bottom and
 * top, DCN's deep and final, ...) runs forward, and forward + backward as training runs it
 * (weight gradients, and the input gradient where training needs one), on random inputs at
 * the config's batch size. Beside each MLP: oneDNN's sgemm timed on the very GEMMs the MLP
 * performs (the same M, N, K per layer and pass), so that the ratio says what bias, ReLU and
 * the layer plumbing cost over the bare matrix products; and sgemm on 2048x512x512, the
 * machine's ceiling as `bench train` reports it. The embedding tables are built with at most
 * 1000 rows each: their size does not change an MLP's shape. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"
#include "rectrain/core.h"
#include "rectrain/model.h"
#include "rectrain/nn.h"

static const char USAGE[] =
    "usage: rectrain bench mlp [--config configs/dlrm_kaggle.json] [options]\n"
    "\n"
    "Times each MLP of a model config forward and forward + backward (as training runs it) on\n"
    "random inputs, and prints ms per batch and GFLOP/s beside oneDNN's sgemm on the same GEMM\n"
    "shapes and on 2048x512x512 (the machine's ceiling).\n"
    "\n"
    "  --config FILE   model config (default configs/dlrm_kaggle.json)\n"
    "  --batch B       batch size (default: the config's)\n"
    "  --steps N       timed passes per repetition (default 20)\n"
    "  --reps R        repetitions; the median is reported (default 5)\n"
    "  --threads T     threads (default: all CPUs)\n"
    "  --json          print a JSON summary as the last line of stdout\n";

#define MAX_MLPS 8

typedef struct mlp_result {
    const char *name;
    rec_mlp *p;
    int input_grad;
    double fwd_s, fwdbwd_s;            /* per batch, median */
    double gemm_fwd_s, gemm_fwdbwd_s;  /* sgemm on the same shapes, per batch, median */
    double fwd_flops, bwd_flops;       /* per batch */
} mlp_result;

/* The GEMMs of one layer in one pass, as (M, N, K): forward y = x W^T is (B, out, in); the
 * weight gradient dW = dy^T x is (out, in, B); the input gradient dx = dy W is (B, in, out). */
static void layer_gemm(int pass, int B, int in, int out, int64_t mnk[3]) {
    const int64_t shapes[3][3] = {{B, out, in}, {out, in, B}, {B, in, out}};
    memcpy(mnk, shapes[pass], sizeof shapes[pass]);
}

/* Median seconds of `steps` calls of the MLP's forward (bwd = 0) or forward + backward. */
static rec_status time_mlp(mlp_result *r, int B, const float *x, const float *dy, float *dx, int bwd, int steps,
                           int reps, double *out) {
    double t[31];
    for (int k = -1; k < reps; k++) { /* k = -1 warms up (oneDNN creates its primitives) */
        double t0 = rec_now();
        for (int i = 0; i < steps; i++) {
            const float *y;
            REC_TRY(rec_mlp_forward(r->p, B, x, &y));
            if (bwd) REC_TRY(rec_mlp_backward(r->p, B, x, dy, r->input_grad ? dx : NULL));
        }
        if (k >= 0) t[k] = (rec_now() - t0) / steps;
    }
    *out = rec_median(t, reps);
    return REC_OK;
}

/* Median seconds of the same GEMMs through bare sgemm: forward only, or all three passes. */
static rec_status time_gemms(rec_dnn *d, const mlp_result *r, int B, float *A, float *Bm, float *C, int steps,
                             int reps, double *fwd, double *fwdbwd) {
    double t[2][31];
    for (int k = -1; k < reps; k++) {
        for (int all = 0; all < 2; all++) {
            double t0 = rec_now();
            for (int i = 0; i < steps; i++)
                for (int l = 0; l < rec_mlp_layers(r->p); l++)
                    for (int pass = 0; pass < (all ? 3 : 1); pass++) {
                        if (pass == 2 && l == 0 && !r->input_grad) continue;
                        int64_t g[3];
                        layer_gemm(pass, B, rec_mlp_size(r->p, l), rec_mlp_size(r->p, l + 1), g);
                        REC_TRY(rec_dnn_sgemm(d, g[0], g[1], g[2], A, Bm, C));
                    }
            if (k >= 0) t[all][k] = (rec_now() - t0) / steps;
        }
    }
    *fwd = rec_median(t[0], reps);
    *fwdbwd = rec_median(t[1], reps);
    return REC_OK;
}

/* Fills n floats with values in [-1, 1). */
static void fill_random(float *p, size_t n, uint64_t seed) {
    rec_rng r;
    rec_rng_seed(&r, seed, 0);
    for (size_t i = 0; i < n; i++) p[i] = (float)(2.0 * rec_rng_uniform(&r) - 1.0);
}

static void print_json(const rec_model_config *c, int B, int threads, int steps, int reps, const mlp_result *res, int n,
                       double total_s, double total_flops, double ceiling) {
    printf("{\"model\": \"%s\", \"batch\": %d, \"threads\": %d, \"steps\": %d, \"reps\": %d, \"samples_per_s\": %s, "
           "\"gflops\": %s, \"sgemm_gflops\": %s, \"mlps\": [",
           c->name, B, threads, steps, reps, cli_jnum("%.1f", B / total_s), cli_jnum("%.2f", total_flops / total_s * 1e-9),
           cli_jnum("%.2f", ceiling));
    for (int i = 0; i < n; i++) {
        const mlp_result *r = &res[i];
        printf("%s{\"name\": \"%s\", \"sizes\": [", i ? ", " : "", r->name);
        for (int l = 0; l <= rec_mlp_layers(r->p); l++) printf("%s%d", l ? ", " : "", rec_mlp_size(r->p, l));
        printf("], \"last_relu\": %s, \"input_grad\": %s, \"fwd_ms\": %s, \"fwdbwd_ms\": %s, \"fwd_gflops\": %s, \"fwdbwd_gflops\": %s, \"gemm_fwd_ms\": %s, "
               "\"gemm_fwdbwd_ms\": %s}",
               rec_mlp_last_relu(r->p) ? "true" : "false", r->input_grad ? "true" : "false",
               cli_jnum("%.4f", r->fwd_s * 1e3), cli_jnum("%.4f", r->fwdbwd_s * 1e3),
               cli_jnum("%.2f", r->fwd_flops / r->fwd_s * 1e-9),
               cli_jnum("%.2f", (r->fwd_flops + r->bwd_flops) / r->fwdbwd_s * 1e-9), cli_jnum("%.4f", r->gemm_fwd_s * 1e3),
               cli_jnum("%.4f", r->gemm_fwdbwd_s * 1e3));
    }
    printf("]}\n");
}

int bench_mlp(int argc, char **argv) {
    const char *cmd = "bench mlp", *config = BENCH_DEFAULT_CONFIG;
    int64_t batch = 0;
    int steps = 20, reps = 5, threads = rec_cpu_count(), json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = CLI_OK;
        if (cli_is_help(a)) { fputs(USAGE, stdout); return CLI_OK; }
        else if (!strcmp(a, "--config")) rc = cli_str(cmd, argc, argv, &i, &config);
        else if (!strcmp(a, "--batch")) rc = cli_i64(cmd, argc, argv, &i, 1, 1 << 20, &batch);
        else if (!strcmp(a, "--steps")) rc = cli_int(cmd, argc, argv, &i, 1, 1 << 20, &steps);
        else if (!strcmp(a, "--reps")) rc = cli_int(cmd, argc, argv, &i, 1, 31, &reps);
        else if (!strcmp(a, "--threads")) rc = cli_int(cmd, argc, argv, &i, 1, 256, &threads);
        else if (!strcmp(a, "--json")) json = 1;
        else rc = cli_usage(cmd, "unknown option '%s'", a);
        if (rc) return rc;
    }
    rec_model_config c;
    rec_status s = bench_load_config(&c, config);
    if (s) return cli_fail(cmd, s);
    /* Criteo's shape (13 dense, 26 sparse) unless the config lists its tables; small tables. */
    int64_t small[26];
    for (int f = 0; f < 26; f++) small[f] = 1000;
    if (c.table_rows)
        for (int f = 0; f < c.n_sparse; f++) c.table_rows[f] = c.table_rows[f] < 1000 ? c.table_rows[f] : 1000;
    else
        s = rec_model_config_bind(&c, 13, 26, small, "the Criteo shape (13 dense, 26 sparse)");
    const int B = (int)(batch > 0 ? batch : c.batch_size);
    rec_model *m = NULL;
    rec_dnn *d = NULL;
    mlp_result res[MAX_MLPS];
    int n = 0;
    float *x = NULL, *dy = NULL, *dx = NULL, *A = NULL, *Bm = NULL, *C = NULL;
    size_t cap = 0, gcap = 0; /* widest MLP input/output, largest GEMM operand, in floats */
    if (!s) s = rec_model_init(&m, &c, B, threads);
    if (!s) s = rec_dnn_init(&d, threads);
    for (rec_mlp *p; !s && n < MAX_MLPS && (p = rec_model_mlp(m, n, &res[n].name, &res[n].input_grad)); n++) {
        res[n].p = p;
        rec_mlp_flops(p, res[n].input_grad, &res[n].fwd_flops, &res[n].bwd_flops);
        res[n].fwd_flops *= B, res[n].bwd_flops *= B;
        for (int l = 0; l < rec_mlp_layers(p); l++) {
            const size_t in = (size_t)rec_mlp_size(p, l), out = (size_t)rec_mlp_size(p, l + 1);
            cap = in > cap ? in : cap;
            cap = out > cap ? out : cap;
            const size_t g = (in > out ? in : out) * ((size_t)B > in ? (size_t)B : in);
            gcap = g > gcap ? g : gcap;
        }
    }
    gcap = gcap > (size_t)2048 * 512 ? gcap : (size_t)2048 * 512;
    if (!s) s = rec_alloc((void **)&x, (size_t)B * cap * sizeof(float), "bench input");
    if (!s) s = rec_alloc((void **)&dy, (size_t)B * cap * sizeof(float), "bench output gradient");
    if (!s) s = rec_alloc((void **)&dx, (size_t)B * cap * sizeof(float), "bench input gradient");
    if (!s) s = rec_alloc((void **)&A, gcap * sizeof(float), "bench GEMM operand");
    if (!s) s = rec_alloc((void **)&Bm, gcap * sizeof(float), "bench GEMM operand");
    if (!s) s = rec_alloc((void **)&C, gcap * sizeof(float), "bench GEMM result");
    if (!s) {
        fill_random(x, (size_t)B * cap, 1);
        fill_random(dy, (size_t)B * cap, 2);
        fill_random(A, gcap, 3);
        fill_random(Bm, gcap, 4);
    }
    double total_s = 0, total_flops = 0, ceiling = 0;
    for (int i = 0; !s && i < n; i++) {
        mlp_result *r = &res[i];
        s = time_mlp(r, B, x, dy, dx, 0, steps, reps, &r->fwd_s);
        if (!s) s = time_mlp(r, B, x, dy, dx, 1, steps, reps, &r->fwdbwd_s);
        if (!s) s = time_gemms(d, r, B, A, Bm, C, steps, reps, &r->gemm_fwd_s, &r->gemm_fwdbwd_s);
        total_s += r->fwdbwd_s;
        total_flops += r->fwd_flops + r->bwd_flops;
    }
    if (!s) ceiling = bench_sgemm_gflops(threads, 2048, 512, 512);
    if (!s) {
        printf("bench mlp: %s, batch %d, %d threads, %d passes x %d reps (median)\n", c.name, B, threads, steps, reps);
        printf("  %-10s %-24s %9s %9s %9s %9s %10s %10s\n", "mlp", "sizes", "fwd ms", "GFLOP/s", "f+b ms", "GFLOP/s",
               "sgemm f+b", "of sgemm");
        for (int i = 0; i < n; i++) {
            const mlp_result *r = &res[i];
            char sizes[128] = "";
            for (int l = 0; l <= rec_mlp_layers(r->p); l++) {
                size_t k = strlen(sizes);
                snprintf(sizes + k, sizeof sizes - k, "%s%d", l ? "-" : "", rec_mlp_size(r->p, l));
            }
            printf("  %-10s %-24s %9.3f %9.1f %9.3f %9.1f %10.3f %9.0f%%\n", r->name, sizes, r->fwd_s * 1e3,
                   r->fwd_flops / r->fwd_s * 1e-9, r->fwdbwd_s * 1e3, (r->fwd_flops + r->bwd_flops) / r->fwdbwd_s * 1e-9,
                   r->gemm_fwdbwd_s * 1e3, 100 * r->gemm_fwdbwd_s / r->fwdbwd_s);
        }
        printf("  %-35s %9.0f samples/s, %.1f GFLOP/s\n", "all MLPs, forward + backward", B / total_s,
               total_flops / total_s * 1e-9);
        printf("  %-35s %9.1f GFLOP/s\n", "oneDNN sgemm 2048x512x512", ceiling);
        if (json) print_json(&c, B, threads, steps, reps, res, n, total_s, total_flops, ceiling);
    }
    rec_free(x), rec_free(dy), rec_free(dx), rec_free(A), rec_free(Bm), rec_free(C);
    rec_dnn_free(d);
    rec_model_free(m);
    rec_model_config_free(&c);
    return s ? cli_fail(cmd, s) : CLI_OK;
}
