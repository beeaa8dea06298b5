/* rectrain bench train: end-to-end training throughput from a preprocessed shard (loader thread
 * reading the .rshard, embedding engine, dense layers, optimizers), beside the machine's
 * measured GEMM rate. Default: the Kaggle-shaped DLRM (configs/dlrm_kaggle.json) at batch 2048
 * on 2M generated rows with the Kaggle table sizes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "cli.h"
#include "rectrain/core.h"
#include "rectrain/cuda.h"
#include "rectrain/model.h"
#include "rectrain/nn.h"
#include "rectrain/train.h"

static const char USAGE[] =
    "usage: rectrain bench train [--config configs/dlrm_kaggle.json] [--data SHARD] [options]\n"
    "\n"
    "Times training steps end to end from a .rshard (reading, embeddings, dense layers,\n"
    "optimizers) and prints samples/s, the time of each part of the step, and the dense layers'\n"
    "GFLOP/s beside oneDNN's matmul rate on 2048x512x512 (the machine's ceiling).\n"
    "\n"
    "  --config FILE   model config (default configs/dlrm_kaggle.json)\n"
    "  --data FILE     .rshard to train on (default: generate --rows rows, Kaggle table sizes)\n"
    "  --rows N        rows to generate (default 2M)\n"
    "  --steps N       timed steps per repetition (default 100)\n"
    "  --reps R        repetitions; the median is reported (default 3)\n"
    "  --batch B       batch size (default: the config's)\n"
    "  --threads T     threads (default: all CPUs)\n"
    "  --device D      cpu (default) or cuda (the parts timed by GPU events)\n"
    "  --precision P   fp32 (default), bf16 (bf16 products, fp32 master weights), or both:\n"
    "                  fp32 and bf16 in alternate repetitions of the same run, and their ratio\n"
    "  --json          print a JSON summary as the last line of stdout\n";

enum { MAX_REPS = 31, MAX_PARTS = 16 };

/* One precision's repetitions. */
typedef struct run {
    const char *precision;
    double sps[MAX_REPS], gfl[MAX_REPS], wait[MAX_REPS], part[MAX_PARTS][MAX_REPS], host[REC_CUDA_N_HOST][MAX_REPS];
    double med_sps, med_gfl, med_wait, med_part[MAX_PARTS], med_host[REC_CUDA_N_HOST];
} run;
_Static_assert(REC_CUDA_N_HOST <= sizeof ((rec_train_report *)0)->host_ms / sizeof(double), "host_ms holds every part");

static int n_parts(int cuda) { return cuda ? REC_CUDA_N_PARTS : REC_MODEL_N_PARTS; }
static const char *part_name(int cuda, int p) { return cuda ? rec_cuda_part_name(p) : rec_model_part_name(p); }

static rec_status run_once(const char *config, const char *data, int threads, int64_t batch, int64_t steps, int cuda,
                           run *r, int k, rec_train_report *rep) {
    rec_train_opts o;
    memset(&o, 0, sizeof o);
    o.config_path = config;
    o.data_path = data;
    o.threads = threads;
    o.batch = batch;
    o.eval_every = 0;
    o.max_steps = steps;
    o.tsv.has_label = -1;
    o.device = cuda ? REC_DEVICE_CUDA : REC_DEVICE_CPU;
    o.device_profile = 1;
    o.precision = r->precision;
    REC_TRY(rec_train(&o, rep));
    r->sps[k] = rep->samples_per_s;
    r->gfl[k] = rep->gflops;
    r->wait[k] = rep->wait_seconds / (rep->train_seconds > 0 ? rep->train_seconds : 1);
    for (int p = 0; p < n_parts(cuda); p++) r->part[p][k] = rep->device_ms[p];
    for (int p = 0; p < REC_CUDA_N_HOST; p++) r->host[p][k] = rep->host_ms[p];
    fprintf(stderr, "  rep %d %s: %.0f samples/s, %.1f GFLOP/s, input wait %.1f%%\n", k + 1, r->precision, r->sps[k],
            r->gfl[k], 100 * r->wait[k]);
    return REC_OK;
}

static void summarize(run *r, int reps, int cuda) {
    r->med_sps = rec_median(r->sps, reps);
    r->med_gfl = rec_median(r->gfl, reps);
    r->med_wait = rec_median(r->wait, reps);
    for (int p = 0; p < n_parts(cuda); p++) r->med_part[p] = rec_median(r->part[p], reps);
    for (int p = 0; p < REC_CUDA_N_HOST; p++) r->med_host[p] = rec_median(r->host[p], reps);
}

static void print_run(const run *r, int cuda, int64_t batch) {
    double tot = 0;
    for (int p = 0; p < n_parts(cuda); p++) tot += r->med_part[p];
    const double step_ms = r->med_sps > 0 ? 1e3 * (double)batch / r->med_sps : 0;
    printf("  %s: %.0f samples/s, %.2f ms per step; step time by part (%s, ms per step):\n", r->precision, r->med_sps,
           step_ms, cuda ? "GPU events" : "wall clock");
    for (int p = 0; p < n_parts(cuda); p++)
        printf("    %-26s %8.3f  %5.1f%%\n", part_name(cuda, p), r->med_part[p], step_ms > 0 ? 100 * r->med_part[p] / step_ms : 0);
    if (!cuda) {
        const double rest = step_ms - tot - r->med_wait * step_ms;
        printf("    %-26s %8.3f  %5.1f%%\n", "input wait", r->med_wait * step_ms, 100 * r->med_wait);
        printf("    %-26s %8.3f  %5.1f%%\n", "rest (loop, batch hand-off)", rest, step_ms > 0 ? 100 * rest / step_ms : 0);
    } else {
        printf("    %-26s %11s  %5.1f%%\n", "input wait", "", 100 * r->med_wait);
        /* the host's side: a step call stages its batch and enqueues its kernels while the GPU
         * runs the step before, then waits for that step to end */
        printf("  the host, ms per step call (wall clock): staging the batch %.3f, enqueueing the kernels %.3f, "
               "waiting for the GPU %.3f\n", r->med_host[REC_CUDA_HOST_STAGE], r->med_host[REC_CUDA_HOST_LAUNCH],
               r->med_host[REC_CUDA_HOST_WAIT]);
    }
    printf("    %-26s %8.1f\n", "dense-layer GFLOP/s", r->med_gfl);
}

static void json_run(const run *r, int cuda) {
    printf("\"%s\": {\"samples_per_s\": %s, \"gflops\": %s, \"input_wait_share\": %s", r->precision,
           cli_jnum("%.1f", r->med_sps), cli_jnum("%.2f", r->med_gfl), cli_jnum("%.4f", r->med_wait));
    if (cuda)
        printf(", \"host_ms\": {\"stage\": %s, \"enqueue\": %s, \"wait\": %s}", cli_jnum("%.4f", r->med_host[0]),
               cli_jnum("%.4f", r->med_host[1]), cli_jnum("%.4f", r->med_host[2]));
    printf("}");
}

int bench_train(int argc, char **argv) {
    const char *cmd = "bench train", *config = BENCH_DEFAULT_CONFIG, *data = NULL, *device = "cpu", *precision = "fp32";
    int64_t rows = 2000000, steps = 100, batch = 0;
    int reps = 3, threads = rec_cpu_count(), json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = CLI_OK;
        if (cli_is_help(a)) { fputs(USAGE, stdout); return CLI_OK; }
        else if (!strcmp(a, "--config")) rc = cli_str(cmd, argc, argv, &i, &config);
        else if (!strcmp(a, "--data")) rc = cli_str(cmd, argc, argv, &i, &data);
        else if (!strcmp(a, "--rows")) rc = cli_i64(cmd, argc, argv, &i, 10000, (int64_t)1 << 36, &rows);
        else if (!strcmp(a, "--steps")) rc = cli_i64(cmd, argc, argv, &i, 1, 1 << 24, &steps);
        else if (!strcmp(a, "--reps")) rc = cli_int(cmd, argc, argv, &i, 1, MAX_REPS, &reps);
        else if (!strcmp(a, "--batch")) rc = cli_i64(cmd, argc, argv, &i, 1, 1 << 20, &batch);
        else if (!strcmp(a, "--threads")) rc = cli_int(cmd, argc, argv, &i, 1, 256, &threads);
        else if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--device")) rc = cli_str(cmd, argc, argv, &i, &device);
        else if (!strcmp(a, "--precision")) rc = cli_str(cmd, argc, argv, &i, &precision);
        else rc = cli_usage(cmd, "unknown option '%s'", a);
        if (rc) return rc;
    }
    if (strcmp(device, "cpu") && strcmp(device, "cuda")) return cli_usage(cmd, "--device %s: want cpu or cuda", device);
    const int cuda = !strcmp(device, "cuda"), both = !strcmp(precision, "both");
    if (strcmp(precision, "fp32") && strcmp(precision, "bf16") && !both)
        return cli_usage(cmd, "--precision %s: want fp32, bf16 or both", precision);
    char gpu[256] = "";
    if (cuda && rec_cuda_probe(gpu, sizeof gpu)) return cli_fail(cmd, REC_EUNSUPPORTED);
    rec_model_config probe; /* a config that cannot be read fails before the data is generated */
    rec_status s = bench_load_config(&probe, config);
    if (s) return cli_fail(cmd, s);
    rec_model_config_free(&probe);
    char dir[512] = "", shard[700];
    if (!data) {
        const char *tmp = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/rectrain-bench-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(dir)) {
            fprintf(stderr, "rectrain bench train: cannot create a temporary directory in %s\n", tmp && *tmp ? tmp : "/tmp");
            return CLI_FAIL;
        }
        s = rec_synth_dataset(dir, rows, 1.0, threads, stderr);
        snprintf(shard, sizeof shard, "%s/train.rshard", dir);
        data = shard;
    }
    static run runs[2];
    const int nrun = both ? 2 : 1;
    runs[0].precision = both ? "fp32" : precision;
    runs[1].precision = "bf16";
    double ratio[MAX_REPS];
    rec_train_report r = {0};
    for (int k = 0; !s && k < reps; k++) { /* alternate, so that drift in the machine hits both alike */
        for (int q = 0; !s && q < nrun; q++) s = run_once(config, data, threads, batch, steps, cuda, &runs[q], k, &r);
        if (!s && both) ratio[k] = runs[1].sps[k] / runs[0].sps[k];
    }
    if (dir[0]) rec_synth_dataset_remove(dir);
    if (s) return cli_fail(cmd, s);
    for (int q = 0; q < nrun; q++) summarize(&runs[q], reps, cuda);
    printf("bench train: %s, batch %lld, %s, %lld steps x %d reps (median)\n", r.model, (long long)r.batch,
           cuda ? gpu : "CPU", (long long)steps, reps);
    for (int q = 0; q < nrun; q++) print_run(&runs[q], cuda, r.batch);
    const double med_ratio = both ? rec_median(ratio, reps) : 0;
    if (both) printf("  %-34s %11.2fx\n", "bf16 / fp32 samples/s (per rep)", med_ratio);
    double ceil[2] = {0, 0};
    if (!cuda) {
        rec_dnn *d;
        if (rec_dnn_init(&d, threads) == REC_OK) {
            rec_dnn_matmul_gflops(d, REC_PRECISION_FP32, 2048, 512, 512, 7, &ceil[0]);
            rec_status bs = rec_dnn_matmul_gflops(d, REC_PRECISION_BF16, 2048, 512, 512, 7, &ceil[1]);
            printf("  %-34s %12.1f\n", "oneDNN fp32 matmul 2048x512x512", ceil[0]);
            if (bs == REC_OK)
                printf("  %-34s %12.1f  (%.2fx fp32; ISA %s: bf16 products %s)\n", "oneDNN bf16 matmul 2048x512x512",
                       ceil[1], ceil[1] / ceil[0], rec_dnn_isa(),
                       rec_dnn_bf16_native(d) ? "run on it" : "are emulated in fp32, used on AMX only");
            else printf("  %-34s %12s  (ISA %s: bf16 products are emulated in fp32)\n", "oneDNN bf16 matmul 2048x512x512",
                        "none", rec_dnn_isa());
            rec_dnn_free(d);
        }
    }
    if (json) {
        printf("{\"model\": \"%s\", \"device\": \"%s\", \"precision\": \"%s\", \"batch\": %lld, \"threads\": %d, \"steps\": %lld, "
               "\"reps\": %d, \"samples_per_s\": %s, \"gflops\": %s, \"input_wait_share\": %s, \"matmul_gflops\": {\"fp32\": %s, "
               "\"bf16\": %s}, ",
               r.model, device, precision, (long long)r.batch, threads, (long long)steps, reps,
               cli_jnum("%.1f", runs[nrun - 1].med_sps), cli_jnum("%.2f", runs[nrun - 1].med_gfl),
               cli_jnum("%.4f", runs[nrun - 1].med_wait), cli_jnum("%.1f", ceil[0]), cli_jnum("%.1f", ceil[1]));
        for (int q = 0; q < nrun; q++) json_run(&runs[q], cuda), printf(", ");
        printf("\"bf16_speedup\": %s}\n", cli_jnum("%.3f", med_ratio));
    }
    return CLI_OK;
}
