/* Every command that resumes, stopped by Ctrl-C (SIGINT to its process group, as a terminal
 * sends it) at a random step and started again with the same command line and --resume, ends
 * as the run never stopped does: the same loss log byte for byte, the same final step, the
 * same AUC of its checkpoint. The commands: train on a .rshard, on a .rraw with --spec, on a
 * TSV preprocessed by a prep-worker (--workers), under `mpirun -np 2`, and `rectrain cluster`
 * (a durable job). Each runs --steps 60 of 3 epochs of 25 steps, so the stop falls in any
 * epoch and --steps ends the run. The stop steps come from a seed printed first:
 * REC_TEST_SEED=N reproduces them. Every run is bounded in time; skipped (77) without CTest's
 * REC_CLI / REC_SOURCE_DIR. */
#include <signal.h>
#include <time.h>

#include "check.h"
#include "clirun.h"

enum { STEPS = 60, MARGIN = 20, WAIT_S = 60 };

static int port;

/* The model: large enough that a step takes milliseconds, so that a stop lands mid-run. */
static const char *MODEL =
    "{\"format\": \"rectrain-model\", \"version\": 1, \"name\": \"r\", \"model\": \"dlrm\", \"tables\": \"data\","
    " \"embedding\": {\"dim\": 32}, \"bottom_mlp\": [256, 32], \"top_mlp\": [512, 256, 1],"
    " \"optimizer\": {\"dense\": {\"kind\": \"adagrad\", \"lr\": 0.02}, \"sparse\": {\"kind\": \"rowwise_adagrad\", \"lr\": 0.05}},"
    " \"lr_schedule\": {\"warmup_steps\": 5, \"decay_start\": 20, \"decay_steps\": 30},"
    " \"train\": {\"batch_size\": 256, \"epochs\": 3, \"seed\": 5}}\n";

static void write_text(const char *name, const char *text) {
    FILE *f = fopen(path(name), "w");
    if (f) fputs(text, f), fclose(f);
}

/* A durable cluster config: its snapshots in SNAPS (one per step, so a stop redoes none). */
static void write_cluster(const char *name, const char *snaps) {
    char text[600];
    snprintf(text, sizeof text, "{\"format\": \"rectrain-cluster\", \"version\": 1, \"data\": \"d.rshard\", \"model\": "
             "\"m.json\", \"epochs\": 3, \"steps\": %d, \"embservers\": 2, \"base_port\": %d, \"peer_timeout\": 30, "
             "\"cache\": {\"rows\": 30000}, \"durable\": {\"dir\": \"%s\", \"every\": 1}}\n", STEPS, port + 10, snaps);
    write_text(name, text);
}

/* A command of the test: `what` names it; `fmt` is its line, with %1$s the run's name (its
 * --ckpt DIR and NAME.log), %2$s the rectrain binary, %3$s COMMON and %4$d the worker's port. */
typedef struct resumable {
    const char *what, *fmt;
    int to_ranks; /* the stop goes to the processes mpirun started: mpirun itself, which puts each
                     rank in a session of its own, sends them SIGTERM only seconds later */
} resumable;

static const char *const COMMON = "--config m.json --holdout 0.2 --threads 1 --epochs 3 --steps 60";

/* The command line of case c for run `name`, with `tail` appended; bounded by `timeout` where
 * `bounded` (not where a stop is sent: timeout passes a SIGINT on to the command, and a second
 * SIGINT stops a run at once, unsaved). */
static void command_of(const resumable *c, const char *name, const char *tail, int bounded, char *buf, size_t cap) {
    char line[2048];
    snprintf(line, sizeof line, c->fmt, name, cli, COMMON, port);
    snprintf(buf, cap, "cd %s && REC_PROGRESS=0 ASAN_OPTIONS=$ASAN_OPTIONS:detect_leaks=0 exec %s%s%s", dir,
             bounded ? "timeout 120 " : "", line, tail);
}

/* The AUC and logloss of checkpoint DIR on the held-out rows, as eval prints them. */
static void eval_of(const char *ckpt, char *buf, size_t cap) {
    buf[0] = 0;
    if (run("eval --ckpt %s --data d.rshard --holdout 0.2 --json", ckpt) != 0) return;
    const char *a = strstr(out, "\"auc\": "), *l = strstr(out, "\"logloss\": ");
    if (a && l) snprintf(buf, cap, "auc %.8s logloss %.8s", a + 7, l + 11);
}

/* Starts the command in a process group of its own and sends the group (or its children: the
 * ranks) SIGINT once its loss log has `at` lines; returns its exit status (-1: it did not end in
 * WAIT_S s, and was killed). */
static int stop_at(const char *cmd, const char *log, int at, int to_ranks) {
    char full[4400];
    snprintf(full, sizeof full, "exec setsid sh -c '%s' >/dev/null 2>&1", cmd);
    const pid_t pid = spawn_command(full);
    const double t0 = (double)time(NULL);
    while (lines_of(log) < at && (double)time(NULL) - t0 < WAIT_S && waitpid(pid, NULL, WNOHANG) == 0) usleep(500);
    char ranks[64];
    snprintf(ranks, sizeof ranks, "pkill -INT -P %d", (int)pid);
    if (to_ranks ? system(ranks) != 0 : kill(-pid, SIGINT) != 0) printf("the stop found no process to stop\n");
    int status = -1;
    for (int i = 0; i < WAIT_S * 100 && waitpid(pid, &status, WNOHANG) == 0; i++) usleep(10000);
    if (kill(-pid, 0) == 0 && status == -1) {
        kill(-pid, SIGKILL);
        waitpid(pid, &status, 0);
        return -1;
    }
    return status;
}

static void check_resume(const resumable *c, unsigned *seed) {
    const int at = 3 + (int)(rand_r(seed) % (STEPS - MARGIN - 3));
    char u[64], s[64], ulog[80], slog[80], cmd[4200];
    snprintf(u, sizeof u, "u_%s", c->what);
    snprintf(s, sizeof s, "s_%s", c->what);
    snprintf(ulog, sizeof ulog, "%s.log", u);
    snprintf(slog, sizeof slog, "%s.log", s);
    command_of(c, u, " 2>&1", 1, cmd, sizeof cmd);
    CHECK(check_capture(cmd, out, sizeof out) == 0 && lines_of(ulog) == STEPS, "%s, never stopped: %s", c->what, out);
    command_of(c, s, "", 0, cmd, sizeof cmd);
    const int st = stop_at(cmd, slog, at, c->to_ranks);
    const int stopped = lines_of(slog);
    printf("%s: stopped at step %d (SIGINT after step %d's line)\n", c->what, stopped, at);
    CHECK(st != -1 && st != 0 && stopped >= at && stopped < STEPS,
          "%s: the stop at step %d ended the run there (status 0x%x, %d steps logged)", c->what, at, st, stopped);
    command_of(c, s, " --resume 2>&1", 1, cmd, sizeof cmd);
    CHECK(check_capture(cmd, out, sizeof out) == 0, "%s: the same command with --resume: %s", c->what, out);
    CHECK(same_file(ulog, slog), "%s: stopped at step %d and resumed, the loss log differs from the run never stopped "
          "(%d lines, want %d)", c->what, stopped, lines_of(slog), STEPS);
    char ua[64], sa[64];
    eval_of(u, ua, sizeof ua);
    eval_of(s, sa, sizeof sa);
    CHECK(ua[0] && !strcmp(ua, sa), "%s: the resumed model's %s, the run never stopped's %s", c->what, sa, ua);
    char uck[96], sck[96];
    snprintf(uck, sizeof uck, "%s/model.rckpt", u);
    snprintf(sck, sizeof sck, "%s/model.rckpt", s);
    const int us = run("inspect %s --json", uck) == 0 ? (int)json_num("step") : -1;
    const int ss = run("inspect %s --json", sck) == 0 ? (int)json_num("step") : -2;
    CHECK(us == STEPS && ss == STEPS, "%s: final steps %d (never stopped) and %d (resumed), want %d", c->what, us, ss,
          STEPS);
}

/* --resume of a cluster whose config keeps no snapshots is a usage error, and the checkpoint
 * of a cluster's shuffled run says so, with one format version. */
static void check_cluster_extras(void) {
    write_text("nd.json", "{\"format\": \"rectrain-cluster\", \"version\": 1, \"data\": \"d.rshard\"}");
    CHECK(run("cluster nd.json --resume") == 2 && strstr(out, "--resume starts a durable job again from its servers' "
                                                              "snapshots: nd.json has no \"durable\""),
          "cluster --resume without durable: %s", out);
    CHECK(run("inspect s_cluster/model.rckpt") == 0 && strstr(out, "(.rckpt version 5,") && !strstr(out, "version-1") &&
              strstr(out, "order      shuffled: blocks of 4096 rows"),
          "inspect of a cluster's shuffled run: %s", out);
}

int main(void) {
    int rc = clirun_setup("rectrain_resume");
    if (rc) return rc;
    port = 23000 + (int)(getpid() % 9000);
    const char *given = getenv("REC_TEST_SEED");
    unsigned seed = given ? (unsigned)strtoul(given, NULL, 10) : (unsigned)time(NULL) ^ (unsigned)getpid();
    printf("seed %u (REC_TEST_SEED=%u reproduces the stop steps)\n", seed, seed);
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    CHECK(run("gen --rows 8000 --scale 0.002 --seed 3 --out d.tsv") == 0, "gen: %s", out);
    write_spec("spec.json", 300, 7);
    write_text("m.json", MODEL);
    CHECK(run("prep --spec spec.json --in d.tsv --out d.rshard") == 0 && run("prep --raw --in d.tsv --out d.rraw") == 0,
          "prep: %s", out);
    write_cluster("u_cluster.json", "u_snaps");
    write_cluster("s_cluster.json", "s_snaps");
    const pid_t w = spawn("prep-worker --listen tcp://127.0.0.1:%d --threads 1 2>worker.log", port);
    const int has_mpi = system("command -v mpirun >/dev/null 2>&1") == 0;
    const resumable cases[] = {
        {"train", "%2$s train --data d.rshard %3$s --ckpt %1$s --loss-log %1$s.log", 0},
        {"rraw", "%2$s train --data d.rraw --spec spec.json %3$s --ckpt %1$s --loss-log %1$s.log", 0},
        {"workers", "%2$s train --data d.tsv --spec spec.json %3$s --workers tcp://127.0.0.1:%4$d --offload 1 --ckpt %1$s "
                    "--loss-log %1$s.log", 0},
        {"mpirun", "mpirun -np 2 --oversubscribe --bind-to none %2$s train --data d.rshard %3$s --ckpt %1$s --loss-log "
                   "%1$s.log", 1},
        {"cluster", "%2$s cluster %1$s.json --insecure --ckpt %1$s --loss-log %1$s.log", 0},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        if (!strcmp(cases[k].what, "mpirun") && !has_mpi) {
            printf("mpirun not found: its case skipped\n");
            continue;
        }
        check_resume(&cases[k], &seed);
    }
    check_cluster_extras();
    kill(w, SIGTERM);
    waitpid(w, NULL, 0);
    clirun_cleanup();
    return check_report();
}
