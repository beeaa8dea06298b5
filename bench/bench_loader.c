/* rectrain bench loader: the training loader alone, draining every batch of a data set in
 * file order and in the shuffled order (train.h, rec_shuffle) that `rectrain train` reads by
 * default.
 *
 * What is timed: rec_loader_open_order .. the last rec_loader_next of a whole epoch over all
 * the rows, the consumer doing nothing but take each batch (so the producer thread's reading,
 * and for the shuffled order its buffer and gather, is all there is). Repetition r of the
 * shuffled order is epoch r, so each draws its own order. The two orders alternate within a
 * repetition, so a drift of the machine hits both alike. The machine's copy bandwidth is
 * printed beside the rates as the ceiling of any pass over the rows' bytes. */
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "cli.h"
#include "rectrain/core.h"
#include "rectrain/train.h"

static const char USAGE[] =
    "usage: rectrain bench loader --data FILE [--batch B] [--reps R] [--seed S] [--threads T] [--json]\n"
    "\n"
    "Drains every batch of FILE (.rshard) through the training loader, in file order and\n"
    "shuffled (blocks of " CLI_STR(REC_SHUFFLE_BLOCK_ROWS) " rows, " CLI_STR(REC_SHUFFLE_BUFFER_BLOCKS) " per buffer: what rectrain train\n"
    "reads by default), alternating, R times each (default 3; the median is reported), batches\n"
    "of B rows (default 2048). Prints rows/s and MB/s of both orders, their ratio, and the\n"
    "measured copy bandwidth. --threads T: the loader's threads (default 1, as training on\n"
    "the CPUs; train --device cuda gives it all of them): groups' checksums and the shuffled\n"
    "gather on T threads.\n";

/* Seconds to drain rows [0, n) of d in batches of `batch`, in the order `sh` (NULL: file
 * order); *bytes gets the bytes of the batches delivered (labels, dense values, offsets, ids). */
static rec_status drain(rec_dataset *d, int64_t n, int64_t batch, const rec_shuffle *sh, double *sec, double *bytes) {
    rec_loader *l = NULL;
    const double t0 = rec_now();
    REC_TRY(rec_loader_open_order(&l, d, 0, n, batch, 3, sh, 0));
    const rec_batch *b;
    rec_status s;
    double by = 0;
    while (!(s = rec_loader_next(l, &b)) && b) {
        by += (double)b->n * (1 + b->n_dense) * sizeof(float);
        for (int32_t f = 0; f < b->n_sparse; f++)
            by += (double)b->n * sizeof(int64_t) + (double)rec_batch_nnz(b, f) * rec_jagged_id_bytes(&b->sparse[f]);
    }
    rec_loader_close(l);
    *sec = rec_now() - t0;
    *bytes = by;
    return s;
}

int bench_loader(int argc, char **argv) {
    const char *cmd = "bench loader", *path = NULL;
    int64_t batch = 2048, seed = 1;
    int reps = 3, json = 0, threads = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = CLI_OK;
        if (cli_is_help(a)) { fputs(USAGE, stdout); return CLI_OK; }
        else if (!strcmp(a, "--data")) rc = cli_str(cmd, argc, argv, &i, &path);
        else if (!strcmp(a, "--batch")) rc = cli_i64(cmd, argc, argv, &i, 1, 1 << 20, &batch);
        else if (!strcmp(a, "--reps")) rc = cli_int(cmd, argc, argv, &i, 1, 100, &reps);
        else if (!strcmp(a, "--seed")) rc = cli_i64(cmd, argc, argv, &i, 0, INT64_MAX, &seed);
        else if (!strcmp(a, "--threads")) rc = cli_int(cmd, argc, argv, &i, 1, 256, &threads);
        else if (!strcmp(a, "--json")) json = 1;
        else rc = cli_usage(cmd, "unknown option '%s'", a);
        if (rc) return rc;
    }
    if (!path) return cli_usage(cmd, "--data FILE is required (a .rshard, e.g. from rectrain prep)");
    rec_dataset *d = NULL;
    rec_dataset_opts o = {.path = path, .prep_threads = threads};
    o.tsv.has_label = -1;
    rec_status s = rec_dataset_open(&d, &o);
    int64_t n = 0;
    if (!s) s = rec_dataset_rows(d, &n);
    double t[2][100], bytes = 0;
    rec_shuffle sh = {(uint64_t)seed, 0, REC_SHUFFLE_BLOCK_ROWS, REC_SHUFFLE_BUFFER_BLOCKS};
    for (int r = -1; !s && r < reps; r++) { /* r = -1: warm-up (page cache, allocator) */
        double sec;
        sh.epoch = r < 0 ? 0 : r;
        s = drain(d, n, batch, NULL, &sec, &bytes);
        if (!s && r >= 0) t[0][r] = sec;
        if (!s) s = drain(d, n, batch, &sh, &sec, &bytes);
        if (!s && r >= 0) t[1][r] = sec;
    }
    rec_dataset_close(d);
    if (s) return cli_fail(cmd, s);
    const double copy = rec_measure_copy_gbps();
    const double file_s = rec_median(t[0], reps), shuf_s = rec_median(t[1], reps);
    printf("loader over %lld rows of %s, batches of %lld, median of %d\n", (long long)n, path, (long long)batch, reps);
    printf("  %-10s %12.0f rows/s %9.1f MB/s\n", "file order", n / file_s, bytes / file_s * 1e-6);
    printf("  %-10s %12.0f rows/s %9.1f MB/s   (%.2fx file order)\n", "shuffled", n / shuf_s, bytes / shuf_s * 1e-6,
           file_s / shuf_s);
    printf("  %-10s %22.1f MB/s   (memcpy, the ceiling of one pass over the bytes)\n", "copy", copy * 1e3);
    if (json)
        printf("{\"rows\": %lld, \"batch\": %lld, \"reps\": %d, \"file_rows_per_s\": %s, \"shuffled_rows_per_s\": %s, "
               "\"shuffled_vs_file\": %s, \"copy_gb_per_s\": %s}\n", (long long)n, (long long)batch, reps,
               cli_jnum("%.1f", n / file_s), cli_jnum("%.1f", n / shuf_s), cli_jnum("%.4f", file_s / shuf_s),
               cli_jnum("%.3f", copy));
    return CLI_OK;
}
