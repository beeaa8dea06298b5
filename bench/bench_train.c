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
    "optimizers) and prints samples/s and dense-layer GFLOP/s beside oneDNN's sgemm rate.\n"
    "\n"
    "  --config FILE   model config (default configs/dlrm_kaggle.json)\n"
    "  --data FILE     .rshard to train on (default: generate --rows rows, Kaggle table sizes)\n"
    "  --rows N        rows to generate (default 2M)\n"
    "  --steps N       timed steps per repetition (default 100)\n"
    "  --reps R        repetitions; the median is reported (default 3)\n"
    "  --batch B       batch size (default: the config's)\n"
    "  --threads T     threads (default: all CPUs)\n"
    "  --device D      cpu (default) or cuda: train on the GPU, with the share of step time spent\n"
    "                  in each part (input copy, embeddings, MLPs, interaction, loss, optimizers)\n"
    "  --precision P   with --device cuda: fp32 (default) or bf16 products in the MLPs\n"
    "  --json          print a JSON summary as the last line of stdout\n";

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
        else if (!strcmp(a, "--reps")) rc = cli_int(cmd, argc, argv, &i, 1, 31, &reps);
        else if (!strcmp(a, "--batch")) rc = cli_i64(cmd, argc, argv, &i, 1, 1 << 20, &batch);
        else if (!strcmp(a, "--threads")) rc = cli_int(cmd, argc, argv, &i, 1, 256, &threads);
        else if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--device")) rc = cli_str(cmd, argc, argv, &i, &device);
        else if (!strcmp(a, "--precision")) rc = cli_str(cmd, argc, argv, &i, &precision);
        else rc = cli_usage(cmd, "unknown option '%s'", a);
        if (rc) return rc;
    }
    if (strcmp(device, "cpu") && strcmp(device, "cuda")) return cli_usage(cmd, "--device %s: want cpu or cuda", device);
    const int cuda = !strcmp(device, "cuda");
    if (strcmp(precision, "fp32") && strcmp(precision, "bf16")) return cli_usage(cmd, "--precision %s: want fp32 or bf16", precision);
    if (!cuda && strcmp(precision, "fp32")) return cli_usage(cmd, "--precision bf16 is for --device cuda");
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
    double sps[31], gfl[31], wait[31], part[REC_CUDA_N_PARTS][31];
    rec_train_report r = {0};
    for (int k = 0; !s && k < reps; k++) {
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
        o.device_profile = cuda;
        o.precision = strcmp(precision, "bf16") ? REC_PRECISION_FP32 : REC_PRECISION_BF16;
        s = rec_train(&o, &r);
        for (int p = 0; cuda && !s && p < REC_CUDA_N_PARTS; p++) part[p][k] = r.device_ms[p];
        sps[k] = r.samples_per_s;
        gfl[k] = r.gflops;
        wait[k] = r.wait_seconds / (r.train_seconds > 0 ? r.train_seconds : 1);
        if (!s) fprintf(stderr, "  rep %d: %.0f samples/s, %.1f GFLOP/s, input wait %.1f%%\n", k + 1, sps[k], gfl[k], 100 * wait[k]);
    }
    if (dir[0]) rec_synth_dataset_remove(dir);
    if (s) return cli_fail(cmd, s);
    double med = rec_median(sps, reps), medg = rec_median(gfl, reps), medw = rec_median(wait, reps);
    double gemm = cuda ? 0 : bench_sgemm_gflops(threads, 2048, 512, 512);
    printf("bench train: %s, batch %lld, %s, %s, %lld steps x %d reps (median)\n", r.model, (long long)r.batch,
           cuda ? gpu : "CPU", precision, (long long)steps, reps);
    if (cuda) {
        double ms[REC_CUDA_N_PARTS], tot = 0;
        for (int p = 0; p < REC_CUDA_N_PARTS; p++) tot += ms[p] = rec_median(part[p], reps);
        printf("  step time by part (GPU events, ms per step; %.3f ms in all):\n", tot);
        for (int p = 0; p < REC_CUDA_N_PARTS; p++)
            printf("    %-24s %8.4f  %5.1f%%\n", rec_cuda_part_name(p), ms[p], tot > 0 ? 100 * ms[p] / tot : 0);
    }
    printf("  %-34s %12.0f\n", "samples/s (end to end from .rshard)", med);
    printf("  %-34s %12.1f\n", "dense-layer GFLOP/s achieved", medg);
    if (!cuda) printf("  %-34s %12.1f\n", "oneDNN sgemm 2048x512x512 GFLOP/s", gemm);
    printf("  %-34s %11.1f%%\n", "time waiting for input", 100 * medw);
    if (json)
        printf("{\"model\": \"%s\", \"device\": \"%s\", \"precision\": \"%s\", \"batch\": %lld, \"threads\": %d, \"steps\": %lld, \"reps\": %d, \"samples_per_s\": %s, "
               "\"gflops\": %s, \"sgemm_gflops\": %s, \"input_wait_share\": %s}\n",
               r.model, device, precision, (long long)r.batch, threads, (long long)steps, reps, cli_jnum("%.1f", med), cli_jnum("%.2f", medg),
               cli_jnum("%.2f", gemm), cli_jnum("%.4f", medw));
    return CLI_OK;
}
