/* Shared helpers of the rectrain CLI: argument parsing and turning statuses into exit codes
 * (0 success, 1 runtime error, 2 usage error — DESIGN.md "CLI contract"). */
#ifndef RECTRAIN_CLI_H
#define RECTRAIN_CLI_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "rectrain/io.h"
#include "rectrain/net.h"
#include "rectrain/status.h"

enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

/* Each subcommand: int cmd_NAME(int argc, char **argv), argv[0] is the subcommand name. */
int cmd_gen(int argc, char **argv);
int cmd_prep(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_predict(int argc, char **argv);
int cmd_plot(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_worker(int argc, char **argv);
int cmd_embserver(int argc, char **argv);
int cmd_oracle(int argc, char **argv);
int cmd_cluster(int argc, char **argv);
int cmd_keygen(int argc, char **argv);
/* The names of `rectrain bench`'s benchmarks joined by sep, into buf (cap bytes): the one list
 * its dispatch, its usage and `rectrain --help` say (bench.c). */
void cli_bench_names(char *buf, size_t cap, const char *sep);
/* rectrain train --oracle-cacher ...: training with the lookahead cache (cmd_cache.c). */
int cmd_train_cached(int argc, char **argv);

/* Prints "rectrain CMD: MESSAGE" for the last error and returns CLI_FAIL, or for
 * REC_ESTOPPED 128 + the signal, as a shell reports one. */
int cli_fail(const char *cmd, rec_status s);

/* Ctrl-C and SIGTERM (a scheduler preempting the job): the first stores the signal in
 * cli_stop, which the library reads through its opts' `stop`, and prints `notice`; the
 * handler then reverts to the default action (SA_RESETHAND), so a second signal stops at
 * once. SA_RESTART: reads of a pipe go on rather than fail with EINTR. */
extern volatile sig_atomic_t cli_stop;
void cli_catch_stop(const char *notice);
/* Prints "rectrain CMD: MESSAGE\nTry 'rectrain CMD --help'." and returns CLI_USAGE. */
int cli_usage(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A numeric macro's value as a string literal, for usage texts. */
#define CLI_STR_(x) #x
#define CLI_STR(x) CLI_STR_(x)

/* Value parsers for "--flag VALUE": advance *i past the value. On a missing or bad value
 * they print a usage error and return CLI_USAGE; CLI_OK otherwise. */
int cli_str(const char *cmd, int argc, char **argv, int *i, const char **out);
/* Forgets the flags cli_str saw (each is refused when given twice): for a process that parsed
 * one command line and goes on to run another (a process of `rectrain cluster` across hosts). */
void cli_forget_flags(void);
/* cli_str for an output that may be standard output: "-" is taken (cli_str refuses it, and
 * cli_paths refuses it as an input, so that "-" never names a file). */
int cli_out(const char *cmd, int argc, char **argv, int *i, const char **out);
int cli_i64(const char *cmd, int argc, char **argv, int *i, int64_t min, int64_t max, int64_t *out);
int cli_int(const char *cmd, int argc, char **argv, int *i, int min, int max, int *out);
int cli_double(const char *cmd, int argc, char **argv, int *i, double min, double max, double *out);
/* Input paths of a flag that takes several (--in, --data): each value is a comma-separated
 * list, the flag may be repeated, and an item holding * ? or [ is a glob, expanded in version
 * order (day_2 before day_10; no match is a usage error naming it). Items keep their order across values. Free
 * with cli_paths_free. The single-valued parsers below refuse a repeated flag. */
typedef struct cli_path_list {
    const char **v;
    int n;
} cli_path_list;
int cli_paths(const char *cmd, int argc, char **argv, int *i, cli_path_list *out);
void cli_paths_free(cli_path_list *l);
/* The options of the TSV reader, one place for prep, train and eval: --bad-rows fail|skip,
 * --format train|test (--test-format, the older spelling of --format test), --short-rows
 * fail|missing, --max-bad-share F, --max-line BYTES. Returns -1 when argv[*i] is none of
 * them (nothing consumed), else CLI_OK or CLI_USAGE. */
int cli_tsv_option(const char *cmd, int argc, char **argv, int *i, rec_tsv_opts *o);
/* Their help lines, the same for every command that reads TSV. */
#define CLI_TSV_HELP                                                                                  \
    "  --format F         train (label + 39 fields) or test (no label); default: detected when the\n"  \
    "                     first lines leave no doubt (all 40 fields: train; all 39, 100+ lines: test)\n" \
    "  --short-rows M     fail (default), or missing: a row with fewer fields (a copy stripped of\n"   \
    "                     its trailing empty fields) has the absent fields missing\n"                 \
    "  --bad-rows MODE    fail (default): stop at the first malformed row with file:line:field;\n"    \
    "                     skip: drop malformed rows and report how many and where\n"                  \
    "  --max-bad-share F  with skip: refuse the input when more than this share of its rows are\n"    \
    "                     malformed (default 0.02)\n"                                                 \
    "  --max-line BYTES   longest accepted line (default 1 MiB)\n"

/* The security options of every service and client (cmd_keygen.c): --keys DIR and --insecure
 * (which contradict each other). Returns -1 when argv[*i] is neither (nothing consumed), else
 * CLI_OK or CLI_USAGE. */
int cli_secure_option(const char *cmd, int argc, char **argv, int *i, rec_net_secure *s);
/* The keys of a process of a job `rectrain cluster` launched across hosts (cmd_cluster.c): the
 * option --launched (given by the cluster, not by users) takes them. NULL elsewhere. */
extern const rec_net_launch *cli_launch;
/* Their help lines: a service's and a client's. */
#define CLI_SECURE_SERVICE_HELP                                                                    \
    "  --keys DIR         CurveZMQ: this service's pair (DIR/self.key) and the clients it lets in\n" \
    "                     (DIR/allow/*.pub); rectrain keygen makes them (docs/security.md)\n"       \
    "  --insecure         serve plain text on an address other than loopback (refused without\n"  \
    "                     --keys otherwise)\n"
#define CLI_SECURE_CLIENT_HELP                                                                     \
    "  --keys DIR         CurveZMQ: this process's pair (DIR/self.key) and the services' public\n" \
    "                     key (DIR/server.pub); rectrain keygen makes them (docs/security.md)\n"   \
    "  --insecure         reach services on other hosts in plain text (refused without --keys\n"  \
    "                     otherwise)\n"

/* x printed with fmt ("%.6f") as a JSON number, or "null" where x is NaN or infinite, which
 * JSON cannot hold (the AUC of rows of one class, a rate over no time). Rotates over 32
 * buffers, so one printf can take up to 32 of them. */
const char *cli_jnum(const char *fmt, double x);
/* The same with the text `undefined` where x is NaN or infinite ("-" in a text report). */
const char *cli_num(const char *fmt, double x, const char *undefined);

/* True for -h / --help. */
int cli_is_help(const char *arg);

#endif
