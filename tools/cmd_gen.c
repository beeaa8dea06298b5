/* rectrain gen: a synthetic Criteo-like TSV with known click probabilities. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "rectrain/core.h"
#include "rectrain/io.h"

static const char USAGE[] =
    "usage: rectrain gen --rows N --out FILE [options]\n"
    "\n"
    "Writes N rows of synthetic Criteo Kaggle-format TSV (label, I1..I13, C1..C26) with the\n"
    "Kaggle cardinalities, Zipf(1.2)-skewed ids, Criteo-like missing rates, negative I2\n"
    "values and a planted logistic model (mean CTR ~0.25), so that every row's true click\n"
    "probability is known. The output depends only on --seed and the options, never on\n"
    "--threads.\n"
    "\n"
    "  --rows N           rows to write (suffixes k, M, G: 10M = 10,000,000)\n"
    "  --out FILE         output .tsv ('-': standard output)\n"
    "  --seed S           random seed (default 1)\n"
    "  --scale X          multiply every table's cardinality by X (default 1; each keeps >= 2)\n"
    "  --multi-hot        comma-separated id lists with the MLPerf DLRMv2 mean sizes\n"
    "  --days D           split the rows into D days whose popular ids drift (default 1)\n"
    "  --test-format      no label column (like Criteo's test.txt)\n"
    "  --prob-out FILE    write each row's true click probability, one per line\n"
    "  --threads T        worker threads (default: all CPUs)\n"
    "  --json             print a JSON summary as the last line of stdout\n";

int cmd_gen(int argc, char **argv) {
    const char *cmd = "gen";
    rec_gen_opts o;
    rec_gen_opts_default(&o);
    int64_t rows = -1, seed = 1;
    const char *out = NULL, *prob_out = NULL;
    int threads = rec_cpu_count(), json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = CLI_OK;
        if (cli_is_help(a)) { fputs(USAGE, stdout); return CLI_OK; }
        else if (!strcmp(a, "--rows")) rc = cli_i64(cmd, argc, argv, &i, 0, (int64_t)1 << 50, &rows);
        else if (!strcmp(a, "--out")) rc = cli_out(cmd, argc, argv, &i, &out);
        else if (!strcmp(a, "--seed")) rc = cli_i64(cmd, argc, argv, &i, 0, INT64_MAX, &seed);
        else if (!strcmp(a, "--scale")) rc = cli_double(cmd, argc, argv, &i, 1e-9, 400, &o.scale);
        else if (!strcmp(a, "--multi-hot")) o.multi_hot = 1;
        else if (!strcmp(a, "--days")) rc = cli_int(cmd, argc, argv, &i, 1, 1000000, &o.days);
        else if (!strcmp(a, "--test-format")) o.with_label = 0;
        else if (!strcmp(a, "--prob-out")) rc = cli_str(cmd, argc, argv, &i, &prob_out);
        else if (!strcmp(a, "--threads")) rc = cli_int(cmd, argc, argv, &i, 1, 256, &threads);
        else if (!strcmp(a, "--json")) json = 1;
        else rc = cli_usage(cmd, "unknown option '%s'", a);
        if (rc) return rc;
    }
    if (rows < 0 || !out) return cli_usage(cmd, "--rows and --out are required");
    if (json && !strcmp(out, "-"))
        return cli_usage(cmd, "--json prints to standard output, where --out - writes the rows; give --out a file");
    o.seed = (uint64_t)seed;
    const int to_stdout = !strcmp(out, "-");
    if (to_stdout) out = "/proc/self/fd/1"; /* written into, never renamed over (rec_atomic_open) */

    double t0 = rec_now();
    cli_catch_stop("\nrectrain gen: stopping; the partial output is removed (send it again to stop at once)\n");
    rec_status s = rec_gen_write(&o, rows, out, prob_out, threads, &cli_stop);
    double sec = rec_now() - t0;
    if (s) return cli_fail(cmd, s);
    struct stat st; /* the size of a device or pipe written into is not known here */
    const int sized = stat(out, &st) == 0 && S_ISREG(st.st_mode);
    const double mb = sized ? (double)st.st_size / 1e6 : NAN;
    double rps = sec > 0 ? (double)rows / sec : 0;
    fprintf(stderr, "gen: %lld rows, %s MB in %.2f s (%.2f M rows/s, %s MB/s, %d thread%s) -> %s\n", (long long)rows,
            cli_num("%.1f", mb, "?"), sec, rps / 1e6, cli_num("%.0f", sec > 0 ? mb / sec : NAN, "?"), threads,
            threads > 1 ? "s" : "", to_stdout ? "stdout" : out);
    if (json)
        printf("{\"rows\": %lld, \"bytes\": %s, \"seconds\": %s, \"rows_per_s\": %s, \"threads\": %d}\n",
               (long long)rows, cli_jnum("%.0f", mb * 1e6), cli_jnum("%.4f", sec), cli_jnum("%.1f", rps), threads);
    return CLI_OK;
}
