/* rectrain bench: dispatch to the benchmarks of bench/, and what several of them share. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rectrain/core.h"
#include "rectrain/nn.h"

#include "bench.h"
#include "cli.h"

int cmd_bench(int argc, char **argv) {
    if (argc < 2 || cli_is_help(argv[1])) {
        fputs("usage: rectrain bench prep|embed|mlp|train|loader|oracle|link [options]   (rectrain bench NAME --help)\n", argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_USAGE : CLI_OK;
    }
    if (!strcmp(argv[1], "prep")) return bench_prep(argc - 1, argv + 1);
    if (!strcmp(argv[1], "train")) return bench_train(argc - 1, argv + 1);
    if (!strcmp(argv[1], "embed")) return bench_embed(argc - 1, argv + 1);
    if (!strcmp(argv[1], "mlp")) return bench_mlp(argc - 1, argv + 1);
    if (!strcmp(argv[1], "loader")) return bench_loader(argc - 1, argv + 1);
    if (!strcmp(argv[1], "oracle")) return bench_oracle(argc - 1, argv + 1);
    if (!strcmp(argv[1], "link")) return bench_link(argc - 1, argv + 1);
    return cli_usage("bench", "unknown benchmark '%s' (available: prep, embed, mlp, train, loader, oracle, link)", argv[1]);
}

rec_status bench_load_config(rec_model_config *c, const char *path) {
    rec_status s = rec_model_config_load(c, path);
    if (s == REC_EIO && !strcmp(path, BENCH_DEFAULT_CONFIG))
        rec_error_append(s, " (the default config is read from the current directory: run from the repository root, "
                            "or give --config)");
    return s;
}

double bench_sgemm_gflops(int threads, int M, int N, int K) {
    rec_dnn *d;
    if (rec_dnn_init(&d, threads)) return 0;
    float *A = calloc((size_t)M * K, 4), *B = calloc((size_t)K * N, 4), *C = calloc((size_t)M * N, 4);
    double t[7];
    int ok = A && B && C;
    for (int r = -2; ok && r < 7; r++) {
        const double t0 = rec_now();
        ok = rec_dnn_sgemm(d, M, N, K, A, B, C) == REC_OK;
        if (r >= 0) t[r] = rec_now() - t0;
    }
    free(A), free(B), free(C);
    rec_dnn_free(d);
    return ok ? 2.0 * M * N * K / rec_median(t, 7) * 1e-9 : 0;
}
