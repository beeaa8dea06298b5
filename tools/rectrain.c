/* rectrain — the command-line interface: subcommands over the library. */
#define _GNU_SOURCE /* strverscmp */
#include <errno.h>
#include <glob.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "rectrain/core.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *what;
} COMMANDS[] = {
    {"gen", cmd_gen, "generate a synthetic Criteo-like TSV with known click probabilities"},
    {"prep", cmd_prep, "preprocess a Criteo TSV (.tsv/.gz) into a .rshard with a pipeline spec"},
    {"inspect", cmd_inspect, "describe a .rshard, a .rraw, a checkpoint or a Criteo .tsv/.gz file"},
    {"train", cmd_train, "train a model (no arguments: the embedded default job)"},
    {"eval", cmd_eval, "evaluate a checkpoint on a data set (AUC, logloss, NE, ...)"},
    {"predict", cmd_predict, "score rows with a checkpoint: a click probability per row"},
    {"plot", cmd_plot, "draw PNG charts of a run's metrics (train --metrics) or of a table"},
    {"export", cmd_export, "write a checkpoint's parameters as .npy files, or the model as ONNX (--format onnx)"},
    {"plan", cmd_plan, "place embedding tables on N ranks (sharding plans), or simulate plans"},
    {"prep-worker", cmd_worker, "serve preprocessing to trainers that offload it (train --workers)"},
    {"embserver", cmd_embserver, "hold a shard of the embedding tables for trainers with --oracle-cacher"},
    {"oracle", cmd_oracle, "plan trainers' embedding caches L batches ahead (Bagpipe's Oracle Cacher)"},
    {"keygen", cmd_keygen, "make a CurveZMQ key pair for the services and clients of a job (--keys)"},
    {"cluster", cmd_cluster, "run a disaggregated job (servers, oracle, trainer) on this machine"},
    {"bench", cmd_bench, NULL}, /* its benchmarks' names: bench.c's list */
};

static void usage(FILE *f) {
    fprintf(f, "usage: rectrain COMMAND [options]   (rectrain COMMAND --help for each)\n\n");
    char benches[256];
    cli_bench_names(benches, sizeof benches, ", ");
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        fprintf(f, "  %-11s %s%s\n", COMMANDS[i].name, COMMANDS[i].what ? COMMANDS[i].what : "benchmarks: ",
                COMMANDS[i].what ? "" : benches);
}

/* Ranks started by mpirun share the machine's cores: OpenMP threads that spin while idle
 * (libgomp's default) take the cores from the ranks doing work, and training runs 5-10x
 * slower. libgomp reads OMP_WAIT_POLICY when it is loaded, before main, so a rank without
 * it set runs itself again with it set to passive (same process, same MPI environment). */
static void passive_openmp(char **argv) {
    if (!(getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMIX_RANK") || getenv("PMI_RANK")) || getenv("OMP_WAIT_POLICY"))
        return;
    setenv("OMP_WAIT_POLICY", "passive", 1);
    execv("/proc/self/exe", argv);  /* returns only on failure: then go on as we are */
}

/* A command's exit status, made a failure when what it printed to standard output (a report,
 * --json, predictions to '-') did not all reach it: `train --json > /dev/full` must not exit 0
 * with its result lost. */
static int stdout_written(const char *cmd, int rc) {
    const rec_status s = rec_stream_flush(stdout, "standard output", "report", REC_OK);
    return s && !rc ? cli_fail(cmd, s) : rc;
}

int main(int argc, char **argv) {
    passive_openmp(argv);
    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    if (cli_is_help(argv[1])) {
        usage(stdout);
        return stdout_written("--help", CLI_OK);
    }
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        if (strcmp(argv[1], COMMANDS[i].name) == 0) return stdout_written(argv[1], COMMANDS[i].fn(argc - 1, argv + 1));
    fprintf(stderr, "rectrain: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return CLI_USAGE;
}

int cli_fail(const char *cmd, rec_status s) {
    fprintf(stderr, "rectrain %s: %s\n", cmd, rec_errmsg()[0] ? rec_errmsg() : rec_status_str(s));
    return s == REC_ESTOPPED && cli_stop ? 128 + cli_stop : CLI_FAIL;
}

volatile sig_atomic_t cli_stop;
static const char *stop_notice = "";

static void on_stop(int sig) {
    cli_stop = sig;
    ssize_t w = write(STDERR_FILENO, stop_notice, strlen(stop_notice));
    (void)w;
}

void cli_catch_stop(const char *notice) {
    stop_notice = notice;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sa.sa_flags = SA_RESETHAND | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

int cli_usage(const char *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "rectrain %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'rectrain %s --help'.\n", cmd);
    return CLI_USAGE;
}

const char *cli_num(const char *fmt, double x, const char *undefined) {
    static char buf[32][40];
    static int k;
    k = (k + 1) % 32;
    if (!isfinite(x)) return undefined;
    snprintf(buf[k], sizeof buf[k], fmt, x);
    return buf[k];
}

const char *cli_jnum(const char *fmt, double x) { return cli_num(fmt, x, "null"); }

int cli_is_help(const char *arg) { return strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0; }

/* The value of argv[*i], a flag that takes one. */
static int flag_value(const char *cmd, int argc, char **argv, int *i, const char **out) {
    if (*i + 1 >= argc) return cli_usage(cmd, "%s needs a value", argv[*i]);
    *out = argv[++*i];
    return CLI_OK;
}

/* Every single-valued flag of the command line and its value, to refuse a repeat: taking the
 * last of two --spec silently would train on other data than the user reads in their command. */
static struct given {
    const char *flag, *value;
} given[64];
static int n_given;

/* "-" is standard output where a command says so (cli_out) and nothing anywhere else: read
 * as a file name it would read or write a file named "-" while the user meant a pipe. */
static int dash_refused(const char *cmd, const char *flag) {
    return cli_usage(cmd, "%s -: '-' is not standard input or output here (only gen --out and predict --out write "
                     "to standard output with '-'); give a file path (/dev/stdin or /dev/stdout for a pipe)", flag);
}

static int str_value(const char *cmd, int argc, char **argv, int *i, const char **out, int dash_ok) {
    const char *flag = argv[*i];
    for (int k = 0; k < n_given; k++)
        if (!strcmp(given[k].flag, flag))
            return cli_usage(cmd, "%s is given twice ('%s', then '%s'); it takes one value", flag, given[k].value,
                             *i + 1 < argc ? argv[*i + 1] : "");
    if (flag_value(cmd, argc, argv, i, out)) return CLI_USAGE;
    if (!dash_ok && !strcmp(*out, "-")) return dash_refused(cmd, flag);
    if (n_given < (int)(sizeof given / sizeof given[0])) given[n_given++] = (struct given){flag, *out};
    return CLI_OK;
}

void cli_forget_flags(void) { n_given = 0; }

int cli_str(const char *cmd, int argc, char **argv, int *i, const char **out) {
    return str_value(cmd, argc, argv, i, out, 0);
}

int cli_out(const char *cmd, int argc, char **argv, int *i, const char **out) {
    return str_value(cmd, argc, argv, i, out, 1);
}

static int version_order(const void *a, const void *b) {
    return strverscmp(*(const char *const *)a, *(const char *const *)b);
}

/* Appends one path, or a glob pattern's matches in version order: numbers compare as numbers,
 * so day_*.gz gives day_2.gz before day_10.gz, the files' time order. */
static int paths_add(const char *cmd, const char *flag, const char *item, cli_path_list *out) {
    glob_t g;
    const int pattern = strpbrk(item, "*?[") != NULL;
    size_t n = 1;
    if (pattern) {
        const int rc = glob(item, GLOB_ERR | GLOB_NOSORT, NULL, &g);
        if (rc == GLOB_NOMATCH) return cli_usage(cmd, "%s: no file matches '%s'", flag, item);
        if (rc) return cli_usage(cmd, "%s: cannot expand '%s' (a folder of it cannot be read)", flag, item);
        n = g.gl_pathc;
        qsort(g.gl_pathv, n, sizeof *g.gl_pathv, version_order);
    }
    char **v = realloc(out->v, (size_t)(out->n + n) * sizeof *v);
    int rc = v ? CLI_OK : CLI_FAIL;
    if (v) out->v = (const char **)v;
    for (size_t k = 0; k < n && !rc; k++)
        if (!(v[out->n] = strdup(pattern ? g.gl_pathv[k] : item))) rc = CLI_FAIL;
        else out->n++;
    if (pattern) globfree(&g);
    if (rc) fprintf(stderr, "rectrain %s: out of memory for the paths of %s\n", cmd, flag);
    return rc;
}

int cli_paths(const char *cmd, int argc, char **argv, int *i, cli_path_list *out) {
    const char *flag = argv[*i], *value = NULL;
    if (flag_value(cmd, argc, argv, i, &value)) return CLI_USAGE;
    for (const char *p = value;; p++) {
        const char *end = strchr(p, ',');
        const size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == 0) return cli_usage(cmd, "%s: an empty path in '%s'", flag, value);
        if (len == 1 && *p == '-') return dash_refused(cmd, flag);
        char item[PATH_MAX];
        if (len >= sizeof item) return cli_usage(cmd, "%s: a path longer than %d bytes", flag, PATH_MAX - 1);
        memcpy(item, p, len);
        item[len] = 0;
        const int rc = paths_add(cmd, flag, item, out);
        if (rc) return rc;
        if (!end) return CLI_OK;
        p = end;
    }
}

void cli_paths_free(cli_path_list *l) {
    for (int k = 0; k < l->n; k++) free((char *)l->v[k]);
    free(l->v);
    l->v = NULL;
    l->n = 0;
}

int cli_i64(const char *cmd, int argc, char **argv, int *i, int64_t min, int64_t max, int64_t *out) {
    const char *flag = argv[*i], *v = NULL;
    if (cli_str(cmd, argc, argv, i, &v)) return CLI_USAGE;
    char *end;
    errno = 0;
    double scale = 1;
    long long x = strtoll(v, &end, 10);
    if (end != v && (*end == 'k' || *end == 'K' || *end == 'M' || *end == 'G') && end[1] == 0) {
        scale = *end == 'G' ? 1e9 : *end == 'M' ? 1e6 : 1e3;
        end++;
    }
    if (end == v || *end || errno || (double)x * scale < (double)min || (double)x * scale > (double)max)
        return cli_usage(cmd, "%s needs an integer in [%lld, %lld] (got '%s')", flag, (long long)min,
                         (long long)max, v);
    *out = (int64_t)((double)x * scale);
    return CLI_OK;
}

int cli_int(const char *cmd, int argc, char **argv, int *i, int min, int max, int *out) {
    int64_t v = 0;
    if (cli_i64(cmd, argc, argv, i, min, max, &v)) return CLI_USAGE;
    *out = (int)v;
    return CLI_OK;
}

/* "--flag VALUE" where VALUE must be one of two words; *out = 0 for the first, 1 for the
 * second. */
static int two_words(const char *cmd, int argc, char **argv, int *i, const char *w0, const char *w1, int *out) {
    const char *flag = argv[*i], *v = NULL;
    if (cli_str(cmd, argc, argv, i, &v)) return CLI_USAGE;
    if (!strcmp(v, w0)) *out = 0;
    else if (!strcmp(v, w1)) *out = 1;
    else return cli_usage(cmd, "%s must be '%s' or '%s' (got '%s')", flag, w0, w1, v);
    return CLI_OK;
}

int cli_tsv_option(const char *cmd, int argc, char **argv, int *i, rec_tsv_opts *o) {
    const char *a = argv[*i];
    int v = 0, rc;
    if (!strcmp(a, "--bad-rows")) {
        if ((rc = two_words(cmd, argc, argv, i, "fail", "skip", &v))) return rc;
        o->bad_rows = v ? REC_BAD_ROWS_SKIP : REC_BAD_ROWS_FAIL;
    } else if (!strcmp(a, "--format")) {
        if ((rc = two_words(cmd, argc, argv, i, "test", "train", &v))) return rc;
        if (o->has_label == !v) return cli_usage(cmd, "--format %s contradicts --test-format", v ? "train" : "test");
        o->has_label = v;
    } else if (!strcmp(a, "--test-format")) { /* the older spelling of --format test */
        if (o->has_label == 1) return cli_usage(cmd, "--test-format contradicts --format train");
        o->has_label = 0;
    } else if (!strcmp(a, "--short-rows")) {
        if ((rc = two_words(cmd, argc, argv, i, "fail", "missing", &v))) return rc;
        o->short_rows = v ? REC_SHORT_ROWS_MISSING : REC_SHORT_ROWS_FAIL;
    } else if (!strcmp(a, "--max-bad-share")) {
        if ((rc = cli_double(cmd, argc, argv, i, 1e-9, 1, &o->max_bad_share))) return rc;
    } else if (!strcmp(a, "--max-line")) {
        if ((rc = cli_i64(cmd, argc, argv, i, 64, (int64_t)1 << 30, &o->max_line))) return rc;
    } else {
        return -1;
    }
    return CLI_OK;
}

int cli_double(const char *cmd, int argc, char **argv, int *i, double min, double max, double *out) {
    const char *flag = argv[*i], *v = NULL;
    if (cli_str(cmd, argc, argv, i, &v)) return CLI_USAGE;
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end || !(x >= min && x <= max))
        return cli_usage(cmd, "%s needs a number in [%.15g, %.15g] (got '%s')", flag, min, max, v);
    *out = x;
    return CLI_OK;
}
