/* rectrain prep: Criteo TSV -> prep spec -> .rshard. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "rectrain/core.h"
#include "rectrain/ingest.h"

static const char USAGE[] =
    "usage: rectrain prep --spec SPEC.json --in FILE.tsv[.gz] --out DATA.rshard [options]\n"
    "\n"
    "Preprocesses a Criteo TSV (train format with label, or the label-less test format; plain\n"
    "or gzip) with the operator DAG of SPEC into a checksummed, mmap-able .rshard.\n"
    "\n"
    "  --spec FILE        pipeline spec (e.g. configs/criteo_standard.json)\n"
    "  --in FILE          input .tsv or .gz (gzip is detected from the content)\n"
    "  --out FILE         output .rshard (written to FILE.tmp, then renamed)\n"
    "  --threads T        worker threads (default: all CPUs)\n"
    "  --bad-rows MODE    fail (default): stop at the first malformed row with file:line:field;\n"
    "                     skip: drop malformed rows and report how many and where\n"
    "  --test-format      input has no label column (default: detected from the first line)\n"
    "  --vocab-from FILE  reuse the categorify vocabularies of an existing .rshard (prep the\n"
    "                     eval/test split with the vocabularies of the train split)\n"
    "  --group-rows N     rows per shard row group (default 65536)\n"
    "  --max-line BYTES   longest accepted line (default 1 MiB)\n"
    "  --explain          print the fused operator plan\n"
    "  --json             print a JSON summary as the last line of stdout\n";

int cmd_prep(int argc, char **argv) {
    const char *cmd = "prep";
    rec_ingest_opts o = {0};
    o.threads = rec_cpu_count();
    o.tsv.has_label = -1;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = CLI_OK;
        if (cli_is_help(a)) { fputs(USAGE, stdout); return CLI_OK; }
        else if (!strcmp(a, "--spec")) rc = cli_str(cmd, argc, argv, &i, &o.spec_path);
        else if (!strcmp(a, "--in")) rc = cli_str(cmd, argc, argv, &i, &o.in_path);
        else if (!strcmp(a, "--out")) rc = cli_str(cmd, argc, argv, &i, &o.out_path);
        else if (!strcmp(a, "--vocab-from")) rc = cli_str(cmd, argc, argv, &i, &o.vocab_from);
        else if (!strcmp(a, "--threads")) rc = cli_int(cmd, argc, argv, &i, 1, 256, &o.threads);
        else if (!strcmp(a, "--group-rows")) rc = cli_i64(cmd, argc, argv, &i, 1, 1 << 24, &o.group_rows);
        else if (!strcmp(a, "--max-line")) rc = cli_i64(cmd, argc, argv, &i, 64, (int64_t)1 << 30, &o.tsv.max_line);
        else if (!strcmp(a, "--test-format")) o.tsv.has_label = 0;
        else if (!strcmp(a, "--explain")) o.explain = 1;
        else if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--bad-rows")) rc = cli_bad_rows(cmd, argc, argv, &i, &o.tsv.bad_rows);
        else rc = cli_usage(cmd, "unknown option '%s'", a);
        if (rc) return rc;
    }
    if (!o.spec_path || !o.in_path || !o.out_path)
        return cli_usage(cmd, "--spec, --in and --out are required");

    rec_ingest_report rep;
    o.stop = &cli_stop;
    cli_catch_stop("\nrectrain prep: stopping; the partial output is removed (send it again to stop at once)\n");
    rec_status s = rec_ingest(&o, &rep);
    if (s) return cli_fail(cmd, s);
    double mb = (double)rep.bytes / 1e6;
    fprintf(stderr, "prep: %lld rows, %.1f MB in %.2f s (%d pass%s, %.0f MB/s per pass) -> %s\n",
            (long long)rep.rows, mb, rep.seconds, rep.passes, rep.passes > 1 ? "es" : "",
            mb * rep.passes / rep.seconds, o.out_path);
    if (rep.rows == 0)
        fprintf(stderr, "prep: warning: %s holds no rows%s; the shard holds none, and training refuses it\n", o.in_path,
                rep.bad.count ? " that parse" : "");
    if (rep.bad.count) {
        fprintf(stderr, "prep: skipped %lld malformed row%s; first:\n", (long long)rep.bad.count,
                rep.bad.count > 1 ? "s" : "");
        for (int k = 0; k < rep.bad.n_kept; k++)
            fprintf(stderr, "  %s:%lld: %s\n", o.in_path, (long long)rep.bad.line[k], rep.bad.why[k]);
    }
    if (json)
        printf("{\"rows\": %lld, \"bytes\": %llu, \"seconds\": %s, \"passes\": %d, \"mb_per_s\": %s, "
               "\"rows_per_s\": %s, \"bad_rows\": %lld, \"threads\": %d}\n",
               (long long)rep.rows, (unsigned long long)rep.bytes, cli_jnum("%.4f", rep.seconds), rep.passes,
               cli_jnum("%.2f", mb * rep.passes / rep.seconds), cli_jnum("%.1f", (double)rep.rows / rep.seconds),
               (long long)rep.bad.count, o.threads);
    return CLI_OK;
}
