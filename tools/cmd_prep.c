/* rectrain prep: Criteo TSV -> prep spec -> .rshard. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "rectrain/core.h"
#include "rectrain/ingest.h"
#include "rectrain/prep.h"

static const char USAGE[] =
    "usage: rectrain prep --spec SPEC.json --in FILE.tsv[.gz] --out DATA.rshard [options]\n"
    "       rectrain prep --raw --in FILE.tsv[.gz] --out DATA.rraw [options]\n"
    "\n"
    "Preprocesses a Criteo TSV (train format with label, or the label-less test format; plain\n"
    "or gzip) with the operator DAG of SPEC into a checksummed, mmap-able .rshard. With --raw,\n"
    "only parses it: typed raw columns (labels, I1..I13, C1..C26 with their missing values) in a\n"
    "checksummed .rraw, which train, eval and predict read with any --spec without parsing text\n"
    "again, and which prep --spec takes as --in.\n"
    "\n"
    "  --spec FILE        pipeline spec (e.g. configs/criteo_standard.json)\n"
    "  --in FILES         input .tsv or .gz files (gzip is detected from the content), read in\n"
    "                     order as one input: comma-separated, --in repeated, or globs in\n"
    "                     version order ('day_*.gz': day_2 before day_10)\n"
    "  --out FILE         output .rshard, or .rraw with --raw (written to FILE.tmp, then renamed)\n"
    "  --raw              parse only, no spec: write raw columns (.rraw)\n"
    "  --threads T        worker threads (default: all CPUs)\n"
    CLI_TSV_HELP
    "  --vocab-from FILE  reuse the categorify vocabularies of an existing .rshard (prep the\n"
    "                     eval/test split with the vocabularies of the train split)\n"
    "  --group-rows N     rows per row group of the output (default 65536)\n"
    "  --device D         where the ops run: cpu (default), or cuda: the GPU executor, its fused\n"
    "                     kernels those of --explain's GPU plan (parsing stays on the CPU)\n"
    "  --explain          print the fused operator plan\n"
    "  --json             print a JSON summary as the last line of stdout\n";

int cmd_prep(int argc, char **argv) {
    const char *cmd = "prep";
    rec_ingest_opts o = {0};
    o.threads = rec_cpu_count();
    o.tsv.has_label = -1;
    cli_path_list in = {0};
    int json = 0, raw = 0, rc = CLI_OK;
    for (int i = 1; i < argc && !rc; i++) {
        const char *a = argv[i];
        if (cli_is_help(a)) { fputs(USAGE, stdout); cli_paths_free(&in); return CLI_OK; }
        else if (!strcmp(a, "--spec")) rc = cli_str(cmd, argc, argv, &i, &o.spec_path);
        else if (!strcmp(a, "--in")) rc = cli_paths(cmd, argc, argv, &i, &in);
        else if (!strcmp(a, "--out")) rc = cli_str(cmd, argc, argv, &i, &o.out_path);
        else if (!strcmp(a, "--vocab-from")) rc = cli_str(cmd, argc, argv, &i, &o.vocab_from);
        else if (!strcmp(a, "--threads")) rc = cli_int(cmd, argc, argv, &i, 1, 256, &o.threads);
        else if (!strcmp(a, "--group-rows")) rc = cli_i64(cmd, argc, argv, &i, 1, 1 << 24, &o.group_rows);
        else if (!strcmp(a, "--explain")) o.explain = 1;
        else if (!strcmp(a, "--raw")) raw = 1;
        else if (!strcmp(a, "--device")) {
            const char *d = NULL;
            rc = cli_str(cmd, argc, argv, &i, &d);
            if (!rc && !strcmp(d, "cuda")) o.device = REC_PREP_CUDA;
            else if (!rc && strcmp(d, "cpu")) rc = cli_usage(cmd, "--device takes cpu or cuda (got '%s')", d);
        }
        else if (!strcmp(a, "--json")) json = 1;
        else if ((rc = cli_tsv_option(cmd, argc, argv, &i, &o.tsv)) < 0) rc = cli_usage(cmd, "unknown option '%s'", a);
    }
    if (!rc && raw && (o.spec_path || o.vocab_from || o.explain || o.device))
        rc = cli_usage(cmd, "--raw parses only: it takes no %s (give the spec to train, eval or predict, or to prep "
                       "--spec --in the .rraw)", o.spec_path ? "--spec" : o.vocab_from ? "--vocab-from"
                                                              : o.explain ? "--explain" : "--device");
    else if (!rc && raw && (!in.n || !o.out_path)) rc = cli_usage(cmd, "--in and --out are required");
    else if (!rc && !raw && (!o.spec_path || !in.n || !o.out_path))
        rc = cli_usage(cmd, "--spec, --in and --out are required (or --raw, --in and --out)");
    if (rc) {
        cli_paths_free(&in);
        return rc;
    }
    o.in_paths = in.v;
    o.n_in = in.n;

    rec_ingest_report rep;
    o.stop = &cli_stop;
    cli_catch_stop("\nrectrain prep: stopping; the partial output is removed (send it again to stop at once)\n");
    rec_status s = raw ? rec_ingest_raw(&o, &rep) : rec_ingest(&o, &rep);
    if (s) {
        cli_paths_free(&in);
        return cli_fail(cmd, s);
    }
    /* the input's rate: its bytes read once per pass over the whole job's time */
    const double mb = (double)rep.bytes / 1e6, mb_per_s = mb / rep.seconds;
    char files[32] = "";
    if (in.n > 1) snprintf(files, sizeof files, " in %d files", in.n);
    fprintf(stderr, "prep: %lld row%s, %.1f MB%s in %.2f s (%d pass%s%s): %.0f MB/s -> %s\n", (long long)rep.rows,
            rec_s(rep.rows), mb, files, rep.seconds, rep.passes, rep.passes > 1 ? "es" : "",
            o.device == REC_PREP_CUDA ? ", ops on the GPU" : raw ? ", parsed only" : "", mb_per_s, o.out_path);
    if (rep.rows == 0)
        fprintf(stderr, "prep: warning: %s holds no rows%s; the output holds none, and training refuses it\n", in.v[0],
                rep.bad.count ? " that parse" : "");
    rec_bad_report_print(stderr, "prep", "the input", &rep.bad, rep.rows);
    if (json)
        printf("{\"rows\": %lld, \"bytes\": %llu, \"files\": %d, \"seconds\": %s, \"passes\": %d, \"mb_per_s\": %s, "
               "\"rows_per_s\": %s, \"bad_rows\": %lld, \"bad_share\": %s, \"threads\": %d}\n",
               (long long)rep.rows, (unsigned long long)rep.bytes, in.n, cli_jnum("%.4f", rep.seconds), rep.passes,
               cli_jnum("%.2f", mb_per_s), cli_jnum("%.1f", (double)rep.rows / rep.seconds), (long long)rep.bad.count,
               cli_jnum("%.6f", (double)rep.bad.count / (double)(rep.rows + rep.bad.count)), o.threads);
    cli_paths_free(&in);
    return CLI_OK;
}
