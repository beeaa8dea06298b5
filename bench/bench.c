/* rectrain bench: dispatch to the benchmarks of bench/, and what several of them share. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rectrain/core.h"
#include "rectrain/nn.h"

#include "bench.h"
#include "cli.h"

/* The benchmarks, in the order the help lists them: the one list the dispatch, the usage and
 * `rectrain --help` read. */
static const struct {
    const char *name;
    int (*fn)(int, char **);
} BENCHES[] = {
    {"prep", bench_prep},     {"embed", bench_embed},   {"mlp", bench_mlp},   {"train", bench_train},
    {"loader", bench_loader}, {"oracle", bench_oracle}, {"link", bench_link},
};
enum { N_BENCHES = sizeof BENCHES / sizeof BENCHES[0] };

void cli_bench_names(char *buf, size_t cap, const char *sep) {
    size_t at = 0;
    if (cap) buf[0] = 0;
    for (int k = 0; k < N_BENCHES && at < cap; k++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%s", k ? sep : "", BENCHES[k].name);
}

int cmd_bench(int argc, char **argv) {
    char names[256];
    if (argc < 2 || cli_is_help(argv[1])) {
        cli_bench_names(names, sizeof names, "|");
        fprintf(argc < 2 ? stderr : stdout, "usage: rectrain bench %s [options]   (rectrain bench NAME --help)\n", names);
        return argc < 2 ? CLI_USAGE : CLI_OK;
    }
    for (int k = 0; k < N_BENCHES; k++)
        if (!strcmp(argv[1], BENCHES[k].name)) return BENCHES[k].fn(argc - 1, argv + 1);
    cli_bench_names(names, sizeof names, ", ");
    return cli_usage("bench", "unknown benchmark '%s' (available: %s)", argv[1], names);
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
