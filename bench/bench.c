/* rectrain bench: dispatch to the benchmarks of bench/. */
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "cli.h"

int cmd_bench(int argc, char **argv) {
    if (argc < 2 || cli_is_help(argv[1])) {
        fputs("usage: rectrain bench prep|embed|train [options]   (rectrain bench NAME --help)\n", argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_USAGE : CLI_OK;
    }
    if (!strcmp(argv[1], "prep")) return bench_prep(argc - 1, argv + 1);
    if (!strcmp(argv[1], "train")) return bench_train(argc - 1, argv + 1);
    if (!strcmp(argv[1], "embed")) return bench_embed(argc - 1, argv + 1);
    return cli_usage("bench", "unknown benchmark '%s' (available: prep, embed, train)", argv[1]);
}
