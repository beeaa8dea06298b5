/* rectrain cluster: a whole disaggregated deployment on this machine (cache.h) — the embedding
 * servers, the oracle and the trainer, started, waited for and stopped by one command. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "rectrain/cache.h"
#include "rectrain/core.h"
#include "rectrain/train.h"

static const char CLUSTER_USAGE[] =
    "usage: rectrain cluster CONFIG.json [--policy P] [--cache-rows C] [--lookahead L]\n"
    "                        [--base-port P] [--loss-log FILE] [--ckpt DIR] [--link GBIT,US]\n"
    "                        [--json]\n"
    "\n"
    "Starts the embedding servers, the Oracle Cacher and the trainers (several: under mpirun) of\n"
    "a disaggregated job on this machine (docs/bagpipe.md describes CONFIG.json), waits for the\n"
    "training to finish and stops the services. The options override the config's.\n"
    "\n"
    "  --policy P         bagpipe, none, static or lru (the bench's baselines)\n"
    "  --cache-rows C     rows of the trainer's cache\n"
    "  --lookahead L      bagpipe's lookahead (0: the largest the cache holds)\n"
    "  --base-port P      servers on P, P+1, ...; the oracles after them\n"
    "  --loss-log FILE    the trainer's \"step loss\" log\n"
    "  --ckpt DIR         the trained model, whole, as DIR/model.rckpt\n"
    "  --link GBIT,US     reach the servers through an emulated link (rectrain bench link) of\n"
    "                     GBIT Gbit/s (0: unlimited) and US microseconds one way\n"
    "  --json             the trainer's JSON summary as the last line of stdout\n";

/* Starts this program with argv (NULL-terminated), or with `via` (mpirun) in front of it; its
 * stdout to /dev/null unless keep_out. */
static pid_t start_via(char *const *via, int n_via, char *const *argv, int keep_out) {
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) return -1;
    self[n] = 0;
    pid_t pid = fork();
    if (pid == 0) {
        if (!keep_out && !freopen("/dev/null", "w", stdout)) _exit(127);
        if (!n_via) execv(self, argv);
        char *av[96];
        int k = 0;
        for (int i = 0; i < n_via && k < 90; i++) av[k++] = via[i];
        av[k++] = self;
        for (int i = 1; argv[i] && k < 95; i++) av[k++] = argv[i];
        av[k] = NULL;
        execvp(via[0], av);
        fprintf(stderr, "rectrain cluster: cannot run %s: %s (scripts/install-deps.sh installs openmpi-bin)\n", via[0],
                strerror(errno));
        _exit(127);
    }
    return pid;
}

static pid_t start(char *const *argv, int keep_out) { return start_via(NULL, 0, argv, keep_out); }

static void stop_all(pid_t *pids, int n) {
    for (int i = 0; i < n; i++)
        if (pids[i] > 0) kill(pids[i], SIGTERM);
    for (int i = 0; i < n; i++)
        if (pids[i] > 0) waitpid(pids[i], NULL, 0);
}

int cmd_cluster(int argc, char **argv) {
    const char *cmd = "cluster", *cfg_path = NULL, *policy = NULL, *loss = NULL, *link = NULL, *ckpt = NULL;
    int64_t rows = 0;
    int lookahead = -1, port = 0, json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = CLI_OK;
        if (cli_is_help(a)) {
            fputs(CLUSTER_USAGE, stdout);
            return CLI_OK;
        } else if (!strcmp(a, "--policy")) rc = cli_str(cmd, argc, argv, &i, &policy);
        else if (!strcmp(a, "--cache-rows")) rc = cli_i64(cmd, argc, argv, &i, 1, INT32_MAX - 1, &rows);
        else if (!strcmp(a, "--lookahead")) rc = cli_int(cmd, argc, argv, &i, 0, 100000, &lookahead);
        else if (!strcmp(a, "--base-port")) rc = cli_int(cmd, argc, argv, &i, 1024, 65535 - 64, &port);
        else if (!strcmp(a, "--loss-log")) rc = cli_str(cmd, argc, argv, &i, &loss);
        else if (!strcmp(a, "--link")) rc = cli_str(cmd, argc, argv, &i, &link);
        else if (!strcmp(a, "--ckpt")) rc = cli_str(cmd, argc, argv, &i, &ckpt);
        else if (!strcmp(a, "--json")) json = 1;
        else if (a[0] == '-') return cli_usage(cmd, "unknown option '%s'", a);
        else if (cfg_path) return cli_usage(cmd, "one CONFIG.json, got '%s' and '%s'", cfg_path, a);
        else cfg_path = a;
        if (rc != CLI_OK) return rc;
    }
    if (!cfg_path) return cli_usage(cmd, "give the deployment's CONFIG.json");
    rec_cluster_config c;
    rec_status s = rec_cluster_config_load(&c, cfg_path);
    if (s) return cli_fail(cmd, s);
    if (policy && (c.policy = rec_cache_policy_parse(policy)) < 0)
        return cli_usage(cmd, "--policy takes bagpipe, none, static or lru, got '%s'", policy);
    if (policy && c.policy != REC_CACHE_BAGPIPE) c.lookahead = c.depth = 0;
    if (rows) c.cache_rows = rows;
    if (lookahead >= 0) c.lookahead = lookahead;
    if (c.lookahead && c.depth > c.lookahead) c.depth = c.lookahead;
    if (port) c.base_port = port;
    if (loss) snprintf(c.loss_log, sizeof c.loss_log, "%s", loss);
    if (ckpt) snprintf(c.ckpt, sizeof c.ckpt, "%s", ckpt);
    if (c.policy != REC_CACHE_BAGPIPE && lookahead > 0) return cli_usage(cmd, "--lookahead is for --policy bagpipe");
    if (link) {
        char *end;
        c.link_gbit = strtod(link, &end);
        if (end == link || *end != ',' || !(c.link_gbit >= 0)) return cli_usage(cmd, "--link takes GBIT,US (e.g. 1,100)");
        const char *us = end + 1;
        c.link_latency_us = strtod(us, &end);
        if (end == us || *end || !(c.link_latency_us >= 0)) return cli_usage(cmd, "--link takes GBIT,US (e.g. 1,100)");
        c.link = 1;
    }
    rec_guard g = {0}; /* the files the job reads and writes, named as the user named them */
    rec_guard_in(&g, "the cluster config", cfg_path);
    rec_guard_in(&g, "$.data", c.data);
    rec_guard_in(&g, "$.model", c.model);
    rec_guard_in(&g, "$.spec", c.spec);
    rec_guard_out(&g, loss ? "--loss-log" : "$.loss_log", c.loss_log);
    rec_guard_dir(&g, ckpt ? "--ckpt" : "$.ckpt", c.ckpt, rec_ckpt_files);
    rec_guard_dir(&g, "$.durable.dir", c.durable_dir, NULL);
    if ((s = rec_guard_check(&g))) return cli_fail(cmd, s);

    enum { MAXP = 2 * 62 + 16 + REC_CACHE_MAX_ORACLES + 1 }; /* servers, their links, prep-workers, the oracles */
    pid_t pids[MAXP] = {0};
    int np = 0;
    const int S = c.embservers, K = c.oracles;
    char ep[64][300], servers[64 * 300 + 64] = "", oracle[REC_CACHE_MAX_ORACLES][300], oracles[REC_CACHE_MAX_ORACLES * 300 + 64] = "";
    char gbit[32], lat[32];
    snprintf(gbit, sizeof gbit, "%g", c.link_gbit);
    snprintf(lat, sizeof lat, "%g", c.link_latency_us);
    for (int k = 0; k < c.embservers; k++) {
        snprintf(ep[k], sizeof ep[k], "tcp://%s:%d", c.host, c.base_port + k);
        char sdir[1100], every[32];
        snprintf(sdir, sizeof sdir, "%s/server-%d", c.durable_dir, k);
        snprintf(every, sizeof every, "%lld", (long long)c.durable_every);
        char *av[] = {"rectrain", "embserver", "--listen", ep[k], c.durable_dir[0] ? "--ckpt" : NULL, sdir, "--ckpt-every",
                      every, NULL};
        pids[np++] = start(av, 0);
        if (c.link) { /* the trainer's way to server k: through the link */
            char lp[16], to[300];
            snprintf(lp, sizeof lp, "%d", c.base_port + S + K + k);
            snprintf(to, sizeof to, "%s:%d", c.host, c.base_port + k);
            char *la[] = {"rectrain", "bench", "link", "--listen", lp, "--to", to, "--gbit", gbit, "--latency-us", lat, NULL};
            pids[np++] = start(la, 0);
            snprintf(ep[k], sizeof ep[k], "tcp://127.0.0.1:%d", c.base_port + S + K + k);
        }
        snprintf(servers + strlen(servers), sizeof servers - strlen(servers), "%s%s", k ? "," : "", ep[k]);
    }
    char wlist[16 * 300] = "";
    for (int k = 0; k < c.prep_workers; k++) { /* the data processors */
        char wep[300];
        snprintf(wep, sizeof wep, "tcp://%s:%d", c.host, c.base_port + 2 * S + K + k);
        snprintf(wlist + strlen(wlist), sizeof wlist - strlen(wlist), "%s%s", k ? "," : "", wep);
        char *wa[] = {"rectrain", "prep-worker", "--listen", wep, "--threads", "1", NULL};
        pids[np++] = start(wa, 0);
    }
    char b_batch[32], b_epochs[32], b_shuffle[8], b_steps[32], b_rows[32], b_la[32], b_depth[32], b_thr[32], b_tmo[32];
    snprintf(b_batch, sizeof b_batch, "%lld", (long long)c.batch);
    snprintf(b_epochs, sizeof b_epochs, "%d", c.epochs);
    snprintf(b_shuffle, sizeof b_shuffle, "%d", c.shuffle);
    snprintf(b_steps, sizeof b_steps, "%lld", (long long)c.steps);
    snprintf(b_rows, sizeof b_rows, "%lld", (long long)(c.cache_rows / K > 0 ? c.cache_rows / K : 1));
    snprintf(b_la, sizeof b_la, "%d", c.lookahead);
    snprintf(b_depth, sizeof b_depth, "%d", c.depth);
    snprintf(b_thr, sizeof b_thr, "%d", c.threads);
    snprintf(b_tmo, sizeof b_tmo, "%g", c.peer_timeout > 0 ? c.peer_timeout : 10.0);
    char *oa[40] = {"rectrain", "oracle", "--listen", NULL, "--data", c.data, "--cache-rows", b_rows,
                    "--shuffle", b_shuffle, "--policy", (char *)rec_cache_policy_name(c.policy)};
    int n = 12;
    char part[32];
    if (K > 1) oa[n++] = "--tables", oa[n++] = part;
    if (c.model[0]) oa[n++] = "--config", oa[n++] = c.model;
    if (c.batch) oa[n++] = "--batch", oa[n++] = b_batch;
    if (c.epochs) oa[n++] = "--epochs", oa[n++] = b_epochs;
    if (c.steps) oa[n++] = "--steps", oa[n++] = b_steps;
    if (c.lookahead) oa[n++] = "--lookahead", oa[n++] = b_la;
    if (c.depth) oa[n++] = "--prefetch-depth", oa[n++] = b_depth;
    if (c.spec[0]) oa[n++] = "--spec", oa[n++] = c.spec;
    if (c.prep_workers) oa[n++] = "--workers", oa[n++] = wlist;
    oa[n] = NULL;
    for (int j = 0; j < K; j++) { /* oracle j plans part j of the tables */
        snprintf(oracle[j], sizeof oracle[j], "tcp://%s:%d", c.host, c.base_port + S + j);
        snprintf(oracles + strlen(oracles), sizeof oracles - strlen(oracles), "%s%s", j ? "," : "", oracle[j]);
        snprintf(part, sizeof part, "%d/%d", j, K);
        oa[3] = oracle[j];
        pids[np++] = start(oa, 0);
    }
    char *ta[40] = {"rectrain", "train", "--oracle-cacher", oracles, "--embservers", servers, "--threads", b_thr,
                    "--peer-timeout", b_tmo};
    n = 10;
    if (c.model[0]) ta[n++] = "--config", ta[n++] = c.model;
    if (c.loss_log[0]) ta[n++] = "--loss-log", ta[n++] = c.loss_log;
    if (c.ckpt[0]) ta[n++] = "--ckpt", ta[n++] = c.ckpt;
    if (c.durable_dir[0]) ta[n++] = "--durable";
    if (json) ta[n++] = "--json";
    ta[n] = NULL;
    fprintf(stderr, "cluster: %d embedding server%s (%s), oracle%s %s (%s cache of %lld rows), %d trainer%s", S,
            S == 1 ? "" : "s", servers, K == 1 ? "" : "s", oracles, rec_cache_policy_name(c.policy),
            (long long)c.cache_rows, c.trainers, c.trainers == 1 ? "" : "s");
    if (c.link) fprintf(stderr, "; servers behind a %g Gbit/s, %g us link", c.link_gbit, c.link_latency_us);
    fputc('\n', stderr);
    cli_catch_stop("");
    char ntr[16];
    snprintf(ntr, sizeof ntr, "%d", c.trainers);
    char *mpirun[] = {"mpirun", "-np", ntr, "--oversubscribe", "--bind-to", "none"};
    pid_t tr = c.trainers > 1 ? start_via(mpirun, 6, ta, 1) : start(ta, 1);
    int st = 0;
    while (waitpid(tr, &st, 0) < 0 && errno == EINTR) {
        if (cli_stop) kill(tr, SIGTERM);
    }
    stop_all(pids, np);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "rectrain cluster: the trainer failed (%s %d)\n", WIFEXITED(st) ? "exit status" : "signal",
                WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
        return CLI_FAIL;
    }
    return CLI_OK;
}
