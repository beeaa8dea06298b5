/* rectrain cluster: a whole disaggregated deployment on this machine (cache.h) — the embedding
 * servers, the oracle and the trainer, started, waited for and stopped by one command. */
#define _GNU_SOURCE /* pipe2 */
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <ftw.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "cluster_impl.h"
#include "rectrain/cache.h"
#include "rectrain/ckpt.h"
#include "rectrain/core.h"
#include "rectrain/train.h"

static const char CLUSTER_USAGE[] =
    "usage: rectrain cluster CONFIG.json [--policy P] [--cache-rows C] [--lookahead L]\n"
    "                        [--base-port P] [--loss-log FILE] [--ckpt DIR] [--npy DIR] [--eval F]\n"
    "                        [--link GBIT,US] [--overwrite] [--resume] [--insecure] [--json]\n"
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
    "  --ckpt DIR         the trained model, whole, as DIR/model.rckpt (one that exists is\n"
    "                     refused without --overwrite or --resume)\n"
    "  --npy DIR          the trained model's parameters as DIR/NAME.npy (train --npy)\n"
    "  --eval F           at the end, score F with the trained model (AUC, logloss)\n"
    "  --overwrite        replace the DIR/model.rckpt of --ckpt (or \"ckpt\") that exists, and\n"
    "                     an earlier export in --npy DIR\n"
    "  --resume           a durable job (\"durable\" in the config) stopped or killed: start it\n"
    "                     again from the servers' snapshots, with the same command and --resume\n"
    "  --link GBIT,US     reach the servers through an emulated link (rectrain bench link) of\n"
    "                     GBIT Gbit/s (0: unlimited) and US microseconds one way\n"
    "  --insecure         plain text between the processes; by default the cluster makes a\n"
    "                     CurveZMQ key pair for the services and one for the trainers, lets\n"
    "                     in only the job's own keys, and removes the keys at the end\n"
    "  --json             the trainer's JSON summary as the last line of stdout\n";


/* A process of the job: a service (embedding server, link, prep-worker, oracle) or the trainer
 * (mpirun with several). Its stderr comes through a pipe, so that the cluster can forward its
 * lines, keep its last one and name it when it ends. */
typedef struct child {
    pid_t pid;                /* 0 once reaped (or never started) */
    int err;                  /* the read end of its stderr, -1 once at its end */
    int status;               /* waitpid's, once reaped */
    int killed;               /* it outlived the grace after SIGTERM and got SIGKILL */
    char what[340];           /* "the oracle (tcp://...)" */
    char part[1024];          /* a line being received */
    size_t n_part;
    char last[1024];          /* its last whole line */
} child;

/* Starts this program with argv (NULL-terminated), or with `via` (mpirun) in front of it, as
 * child c named `what`: its stdout to /dev/null unless keep_out, its stderr into a pipe. The
 * child dies with the cluster (PR_SET_PDEATHSIG: SIGTERM when the cluster ends, even by
 * SIGKILL), so no service is left orphaned. Returns 0, or -1 when it cannot be started. */
static int start_via(child *c, const char *what, char *const *via, int n_via, char *const *argv, int keep_out) {
    memset(c, 0, sizeof *c);
    c->err = -1;
    snprintf(c->what, sizeof c->what, "%s", what);
    char self[4096];
    const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    int fd[2];
    if (n <= 0 || pipe2(fd, O_CLOEXEC) != 0) return -1;
    self[n] = 0;
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent) _exit(127); /* the cluster ended before prctl */
        if (dup2(fd[1], STDERR_FILENO) < 0) _exit(127);
        if (!keep_out && !freopen("/dev/null", "w", stdout)) _exit(127);
        if (!n_via) {
            execv(self, argv);
            fprintf(stderr, "rectrain cluster: cannot run %s: %s\n", self, strerror(errno));
            _exit(127);
        }
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
    close(fd[1]);
    if (pid < 0) {
        close(fd[0]);
        return -1;
    }
    c->pid = pid;
    c->err = fd[0];
    fcntl(c->err, F_SETFL, fcntl(c->err, F_GETFL) | O_NONBLOCK);
    return 0;
}

static int start(child *c, const char *what, char *const *argv, int keep_out) {
    return start_via(c, what, NULL, 0, argv, keep_out);
}

/* Reads what child c wrote to stderr without blocking: whole lines are forwarded to our
 * stderr when `forward`, and the last one kept; the pipe is closed at its end. */
static void drain(child *c, int forward) {
    char buf[4096];
    ssize_t n;
    while (c->err >= 0 && ((n = read(c->err, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))) {
        for (ssize_t i = 0; i < n; i++) {
            if (buf[i] != '\n' && c->n_part < sizeof c->part - 1) {
                c->part[c->n_part++] = buf[i];
                continue;
            }
            if (buf[i] != '\n') continue; /* an overlong line: its head is kept */
            c->part[c->n_part] = 0;
            if (forward) fprintf(stderr, "%s\n", c->part);
            if (c->n_part) memcpy(c->last, c->part, c->n_part + 1);
            c->n_part = 0;
        }
    }
    if (c->err >= 0 && n == 0) { /* its end: a last line without newline too */
        c->part[c->n_part] = 0;
        if (c->n_part && forward) fprintf(stderr, "%s\n", c->part);
        if (c->n_part) memcpy(c->last, c->part, c->n_part + 1);
        c->n_part = 0;
        close(c->err);
        c->err = -1;
    }
}

/* "exit status 1" or "killed by signal 9" for waitpid's status. */
static const char *how_ended(int st, char *buf, size_t cap) {
    if (WIFEXITED(st)) snprintf(buf, cap, "exit status %d", WEXITSTATUS(st));
    else snprintf(buf, cap, "killed by signal %d", WTERMSIG(st));
    return buf;
}

enum { GRACE_MS = 2000 }; /* after SIGTERM, the time a process has to stop before SIGKILL */

/* Runs the job: forwards the processes' stderr, and waits until the trainer (children[0]) ends,
 * a service ends (services end only when stopped, so one ending first has failed: at start,
 * missing data, a port taken, a cache too small), or a signal stops the cluster. Then stops
 * the others with SIGTERM (SIGKILL after GRACE_MS) and reaps every one. Once the job is cut
 * short the others' lines are not forwarded (their own stop messages): one message says what
 * happened. Returns the exit status: 0, 1 (*failed is the process that ended first) or 128 +
 * the signal. */
static int supervise(child *ch, int n, child **failed) {
    *failed = NULL;
    int stopping = 0, signalled = 0, forward = 1;
    double deadline = 0;
    for (;;) {
        struct pollfd pf[MAXP];
        int np = 0;
        for (int i = 0; i < n; i++)
            if (ch[i].err >= 0) pf[np++] = (struct pollfd){ch[i].err, POLLIN, 0};
        if (np) poll(pf, (nfds_t)np, 50); /* EINTR (a signal): looked at below */
        else usleep(50 * 1000);
        /* a signal first: Ctrl-C reaches the whole process group, and neither a service it
         * stops is a failure nor are the processes' own stop messages forwarded */
        if (cli_stop && !stopping) stopping = signalled = 1, forward = 0;
        for (int i = 0; i < n; i++) drain(&ch[i], forward);
        int st, live = 0;
        for (int i = 0; i < n; i++) {
            if (ch[i].pid > 0 && waitpid(ch[i].pid, &st, WNOHANG) == ch[i].pid) {
                ch[i].pid = 0, ch[i].status = st;
                drain(&ch[i], forward);
                if (!stopping && cli_stop) stopping = signalled = 1, forward = 0;
                if (!stopping) { /* the trainer's end, or a service's failure: the job is over */
                    stopping = 1;
                    if (i > 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) *failed = &ch[i], forward = 0;
                }
            }
            live += ch[i].pid > 0;
        }
        if (!live) break;
        if (stopping && !deadline) {
            for (int i = 0; i < n; i++)
                if (ch[i].pid > 0) kill(ch[i].pid, SIGTERM);
            deadline = rec_now() + GRACE_MS / 1000.0;
        } else if (deadline > 0 && rec_now() > deadline) {
            for (int i = 0; i < n; i++)
                if (ch[i].pid > 0 && !ch[i].killed) kill(ch[i].pid, SIGKILL), ch[i].killed = 1;
        }
    }
    for (int i = 0; i < n; i++) { /* what is left in the pipes (a grandchild may hold one: not waited for) */
        drain(&ch[i], forward);
        if (ch[i].err >= 0) close(ch[i].err), ch[i].err = -1;
    }
    if (signalled) return 128 + cli_stop;
    return *failed ? CLI_FAIL : CLI_OK;
}

/* ---- the job's keys ---------------------------------------------------------------------------
 * A one-machine deployment makes its own: a pair for the services (every embedding server,
 * oracle and prep-worker shares it) and one for the trainers, in a fresh private directory:
 * services/ lets in the trainers' key and its own (the oracle is the prep-workers' client),
 * trainers/ trusts the services' key. Removed when the cluster ends (or, after a SIGKILL,
 * by the next cluster on the machine). */
static char keyroot[1024], svc_keys[1100], trainer_keys[1100];

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *f) {
    (void)st, (void)flag, (void)f;
    return remove(path) != 0 && errno != ENOENT;
}

static void remove_keys(void) {
    if (keyroot[0]) nftw(keyroot, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
    keyroot[0] = 0;
}

/* The key directories of clusters killed before they could remove them (SIGKILL): named
 * KEYS_PREFIX PID-..., removed when their process is gone. A reused pid keeps its directory. */
#define KEYS_PREFIX "rectrain-cluster-keys-"

static void remove_stale_keys(const char *tmp) {
    DIR *d = opendir(tmp);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (strncmp(e->d_name, KEYS_PREFIX, strlen(KEYS_PREFIX)) != 0) continue;
        const char *num = e->d_name + strlen(KEYS_PREFIX);
        char *end;
        const long pid = strtol(num, &end, 10);
        if (end == num || *end != '-' || pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue;
        char dir[1300];
        struct stat st;
        snprintf(dir, sizeof dir, "%s/%s", tmp, e->d_name);
        if (lstat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid()) continue;
        if (nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS) == 0)
            fprintf(stderr, "rectrain cluster: removed %s, the keys of a cluster that was killed (pid %ld)\n", dir, pid);
    }
    closedir(d);
}

static rec_status make_keys(void) {
    const char *env = getenv("TMPDIR"), *tmp = env && env[0] ? env : "/tmp";
    remove_stale_keys(tmp);
    snprintf(keyroot, sizeof keyroot, "%s/" KEYS_PREFIX "%ld-XXXXXX", tmp, (long)getpid());
    if (!mkdtemp(keyroot)) {
        rec_status s = rec_errorf(REC_EIO, "cannot make a directory for the job's keys (%s): %s", keyroot, strerror(errno));
        keyroot[0] = 0;
        return s;
    }
    snprintf(svc_keys, sizeof svc_keys, "%s/services", keyroot);
    snprintf(trainer_keys, sizeof trainer_keys, "%s/trainers", keyroot);
    char svc_pub[1200], trainer_pub[1200];
    snprintf(svc_pub, sizeof svc_pub, "%s/self.pub", svc_keys);
    snprintf(trainer_pub, sizeof trainer_pub, "%s/self.pub", trainer_keys);
    REC_TRY(rec_keygen(svc_keys, 0));
    REC_TRY(rec_keygen(trainer_keys, 0));
    REC_TRY(rec_keys_trust(svc_keys, trainer_pub, "trainers"));
    REC_TRY(rec_keys_trust(svc_keys, svc_pub, "services"));
    REC_TRY(rec_keys_trust(svc_keys, svc_pub, NULL));
    return rec_keys_trust(trainer_keys, svc_pub, NULL);
}

/* ---- the job's processes -----------------------------------------------------------------------
 * One plan for both forms: the local one starts each process itself (fork, exec), the one
 * across hosts has mpirun start them all and each takes its own line of the plan. */

/* The endpoints of a local job: servers on base_port + k, oracles after them, then the links'
 * ports and the prep-workers'. */
static void local_endpoints(job *j) {
    const rec_cluster_config *c = &j->c;
    const int S = c->embservers, K = c->oracles;
    for (int k = 0; k < S; k++) {
        snprintf(j->listen[k], sizeof j->listen[k], "tcp://%s:%d", c->host, c->base_port + k);
        if (c->link) snprintf(j->server[k], sizeof j->server[k], "tcp://127.0.0.1:%d", c->base_port + S + K + k);
        else memcpy(j->server[k], j->listen[k], sizeof j->server[k]);
    }
    for (int q = 0; q < K; q++) snprintf(j->oracle[q], sizeof j->oracle[q], "tcp://%s:%d", c->host, c->base_port + S + q);
    for (int w = 0; w < c->prep_workers; w++)
        snprintf(j->worker[w], sizeof j->worker[w], "tcp://%s:%d", c->host, c->base_port + 2 * S + K + w);
}

/* Appends a process's security options to av at *n: --keys DIR, --insecure or --launched. */
static void add_secure(const job *j, char **av, int *n, char *dir) {
    if (j->launched) av[(*n)++] = "--launched";
    else if (j->insecure) av[(*n)++] = "--insecure";
    else av[(*n)++] = "--keys", av[(*n)++] = dir;
}

static proc *next_proc(proc *p, int *np, role r, int index) {
    proc *q = &p[(*np)++];
    memset(q, 0, sizeof *q);
    q->role = r, q->index = index;
    return q;
}

/* The job's processes in the order an mpirun across hosts ranks them: embedding servers (each
 * with its link, locally), prep-workers, oracles, then the trainers: `trainers` processes (1:
 * the local form's one trainer process, mpirun with several). Returns how many. */
int cluster_plan(job *j, proc *p, int trainers) {
    const rec_cluster_config *c = &j->c;
    const int S = c->embservers, K = c->oracles;
    int np = 0;
    j->servers[0] = j->workers[0] = j->oracles[0] = 0;
    snprintf(j->gbit, sizeof j->gbit, "%g", c->link_gbit);
    snprintf(j->lat, sizeof j->lat, "%g", c->link_latency_us);
    snprintf(j->every, sizeof j->every, "%lld", (long long)c->durable_every);
    for (int k = 0; k < S; k++) {
        proc *q = next_proc(p, &np, R_SERVER, k);
        char **av = q->argv;
        int n = 0;
        av[n++] = "rectrain", av[n++] = "embserver", av[n++] = "--listen", av[n++] = j->listen[k];
        add_secure(j, av, &n, svc_keys);
        snprintf(j->sdir[k], sizeof j->sdir[k], "%s/server-%d", c->durable_dir, k);
        if (c->durable_dir[0]) av[n++] = "--ckpt", av[n++] = j->sdir[k], av[n++] = "--ckpt-every", av[n++] = j->every;
        snprintf(q->what, sizeof q->what, "embedding server %d (%.300s)", k, j->listen[k]);
        if (c->link) { /* the trainer's way to server k: through the link */
            q = next_proc(p, &np, R_LINK, k);
            snprintf(j->link_port[k], sizeof j->link_port[k], "%d", c->base_port + S + K + k);
            snprintf(j->link_to[k], sizeof j->link_to[k], "%s:%d", c->host, c->base_port + k);
            char *la[] = {"rectrain", "bench", "link", "--listen", j->link_port[k], "--to", j->link_to[k], "--gbit", j->gbit,
                          "--latency-us", j->lat, NULL};
            memcpy(q->argv, la, sizeof la);
            snprintf(q->what, sizeof q->what, "the link to embedding server %d (port %s)", k, j->link_port[k]);
        }
        snprintf(j->servers + strlen(j->servers), sizeof j->servers - strlen(j->servers), "%s%s", k ? "," : "", j->server[k]);
    }
    for (int w = 0; w < c->prep_workers; w++) { /* the data processors */
        snprintf(j->workers + strlen(j->workers), sizeof j->workers - strlen(j->workers), "%s%s", w ? "," : "", j->worker[w]);
        proc *q = next_proc(p, &np, R_WORKER, w);
        int n = 0;
        char **av = q->argv;
        av[n++] = "rectrain", av[n++] = "prep-worker", av[n++] = "--listen", av[n++] = j->worker[w];
        av[n++] = "--threads", av[n++] = "1";
        add_secure(j, av, &n, svc_keys);
        snprintf(q->what, sizeof q->what, "prep-worker %d (%.300s)", w, j->worker[w]);
    }
    snprintf(j->batch, sizeof j->batch, "%lld", (long long)c->batch);
    snprintf(j->epochs, sizeof j->epochs, "%d", c->epochs);
    snprintf(j->shuffle, sizeof j->shuffle, "%d", c->shuffle);
    snprintf(j->steps, sizeof j->steps, "%lld", (long long)c->steps);
    snprintf(j->rows, sizeof j->rows, "%lld", (long long)(c->cache_rows / K > 0 ? c->cache_rows / K : 1));
    snprintf(j->la, sizeof j->la, "%d", c->lookahead);
    snprintf(j->depth, sizeof j->depth, "%d", c->depth);
    snprintf(j->threads, sizeof j->threads, "%d", c->threads);
    snprintf(j->timeout, sizeof j->timeout, "%g", c->peer_timeout > 0 ? c->peer_timeout : 10.0);
    for (int q = 0; S > 0 && q < K; q++) { /* oracle q plans part q of the tables */
        snprintf(j->oracles + strlen(j->oracles), sizeof j->oracles - strlen(j->oracles), "%s%s", q ? "," : "", j->oracle[q]);
        snprintf(j->part[q], sizeof j->part[q], "%d/%d", q, K);
        proc *o = next_proc(p, &np, R_ORACLE, q);
        char **oa = o->argv;
        int n = 0;
        oa[n++] = "rectrain", oa[n++] = "oracle", oa[n++] = "--listen", oa[n++] = j->oracle[q], oa[n++] = "--data", oa[n++] = (char *)c->data;
        oa[n++] = "--cache-rows", oa[n++] = j->rows, oa[n++] = "--shuffle", oa[n++] = j->shuffle;
        oa[n++] = "--policy", oa[n++] = (char *)rec_cache_policy_name(c->policy);
        if (K > 1) oa[n++] = "--tables", oa[n++] = j->part[q];
        if (c->model[0]) oa[n++] = "--config", oa[n++] = (char *)c->model;
        if (c->batch) oa[n++] = "--batch", oa[n++] = j->batch;
        if (c->epochs) oa[n++] = "--epochs", oa[n++] = j->epochs;
        if (c->steps) oa[n++] = "--steps", oa[n++] = j->steps;
        if (c->lookahead) oa[n++] = "--lookahead", oa[n++] = j->la;
        if (c->depth) oa[n++] = "--prefetch-depth", oa[n++] = j->depth;
        if (c->spec[0]) oa[n++] = "--spec", oa[n++] = (char *)c->spec;
        if (c->prep_workers) oa[n++] = "--workers", oa[n++] = j->workers;
        add_secure(j, oa, &n, svc_keys);
        if (K > 1) snprintf(o->what, sizeof o->what, "oracle %d (%.300s)", q, j->oracle[q]);
        else snprintf(o->what, sizeof o->what, "the oracle (%.300s)", j->oracle[q]);
    }
    for (int t = 0; t < trainers; t++) {
        proc *q = next_proc(p, &np, R_TRAINER, t);
        char **ta = q->argv;
        int n = 0;
        ta[n++] = "rectrain", ta[n++] = "train", ta[n++] = "--threads", ta[n++] = j->threads;
        if (S > 0) { /* Bagpipe: the oracle gives the data, batch and epochs */
            ta[n++] = "--oracle-cacher", ta[n++] = j->oracles, ta[n++] = "--embservers", ta[n++] = j->servers;
            ta[n++] = "--peer-timeout", ta[n++] = j->timeout;
            if (c->durable_dir[0]) ta[n++] = j->resume ? "--resume" : "--durable";
        } else { /* FastFlow: the trainers read the data and offload its preprocessing */
            ta[n++] = "--data", ta[n++] = (char *)c->data, ta[n++] = "--workers", ta[n++] = j->workers;
            ta[n++] = "--offload", ta[n++] = (char *)c->offload;
            if (c->spec[0]) ta[n++] = "--spec", ta[n++] = (char *)c->spec;
            if (c->batch) ta[n++] = "--batch", ta[n++] = j->batch;
            if (c->epochs) ta[n++] = "--epochs", ta[n++] = j->epochs;
            if (c->steps) ta[n++] = "--steps", ta[n++] = j->steps;
            if (!c->shuffle) ta[n++] = "--no-shuffle";
            if (j->resume) ta[n++] = "--resume";
        }
        if (c->model[0]) ta[n++] = "--config", ta[n++] = (char *)c->model;
        if (c->loss_log[0]) ta[n++] = "--loss-log", ta[n++] = (char *)c->loss_log;
        if (c->ckpt[0]) ta[n++] = "--ckpt", ta[n++] = (char *)c->ckpt;
        if (j->npy) ta[n++] = "--npy", ta[n++] = (char *)j->npy;
        if (j->eval) ta[n++] = "--eval", ta[n++] = (char *)j->eval;
        if (j->overwrite) ta[n++] = "--overwrite";
        if (j->json) ta[n++] = "--json";
        add_secure(j, ta, &n, trainer_keys);
        if (trainers > 1) snprintf(q->what, sizeof q->what, "trainer %d", t);
        else snprintf(q->what, sizeof q->what, "%s", c->trainers > 1 ? "the trainers (mpirun)" : "the trainer");
    }
    return np;
}

/* A process could not be started (no fork, no pipe): the ones started are stopped. */
static int abandon(child *ch, int n, const child *c) {
    fprintf(stderr, "rectrain cluster: cannot start %s: %s\n", c->what, strerror(errno));
    for (int i = 0; i < n; i++)
        if (ch[i].pid > 0) kill(ch[i].pid, SIGTERM);
    for (int i = 0; i < n; i++) {
        if (ch[i].pid > 0) waitpid(ch[i].pid, NULL, 0);
        if (ch[i].err >= 0) close(ch[i].err);
    }
    remove_keys();
    return CLI_FAIL;
}

/* The local form: every process started here, the trainer last (ch[0]), supervised. */
static int run_local(job *j) {
    const rec_cluster_config *c = &j->c;
    rec_status s;
    if (!j->insecure && (s = make_keys())) {
        remove_keys();
        return cli_fail("cluster", s);
    }
    local_endpoints(j);
    static proc p[MAXP];
    const int n = cluster_plan(j, p, 1);
    static child ch[MAXP]; /* ch[0] the trainer, started last */
    ch[0] = (child){.err = -1};
    int np = 1;
    for (int i = 0; i < n - 1; i++, np++)
        if (start(&ch[np], p[i].what, p[i].argv, 0)) return abandon(ch, np, &ch[np]);
    const int S = c->embservers;
    fprintf(stderr, "cluster: ");
    if (S > 0)
        fprintf(stderr, "%d embedding server%s (%s), oracle%s %s (%s cache of %lld rows), ", S, S == 1 ? "" : "s",
                j->servers, c->oracles == 1 ? "" : "s", j->oracles, rec_cache_policy_name(c->policy), (long long)c->cache_rows);
    else
        fprintf(stderr, "%d prep-worker%s (%s), ", c->prep_workers, c->prep_workers == 1 ? "" : "s", j->workers);
    fprintf(stderr, "%d trainer%s", c->trainers, c->trainers == 1 ? "" : "s");
    if (c->link) fprintf(stderr, "; servers behind a %g Gbit/s, %g us link", c->link_gbit, c->link_latency_us);
    fprintf(stderr, j->insecure ? "; plain text" : "; CurveZMQ with the job's own keys");
    fputc('\n', stderr);
    cli_catch_stop("");
    char ntr[16];
    snprintf(ntr, sizeof ntr, "%d", c->trainers);
    char *mpirun[] = {"mpirun", "-np", ntr, "--oversubscribe", "--bind-to", "none"};
    const proc *t = &p[n - 1];
    if (c->trainers > 1 ? start_via(&ch[0], t->what, mpirun, 6, t->argv, 1) : start(&ch[0], t->what, t->argv, 1))
        return abandon(ch, np, &ch[0]);
    child *failed;
    const int rc = supervise(ch, np, &failed);
    char how[64];
    if (failed == &ch[0]) {
        fprintf(stderr, "rectrain cluster: %s failed (%s)%s%s\n", failed->what, how_ended(failed->status, how, sizeof how),
                failed->last[0] ? ": " : "", failed->last);
    } else if (failed) {
        fprintf(stderr, "rectrain cluster: %s ended (%s) while the job ran%s%s; the other processes are stopped\n",
                failed->what, how_ended(failed->status, how, sizeof how), failed->last[0] ? ": " : "", failed->last);
    } else if (rc > 128) {
        const char *at = strstr(ch[0].last, " at batch "); /* the trainer's "stopped by SIGTERM at batch ..." */
        fprintf(stderr, "rectrain cluster: stopped by %s; every process of the job is stopped%s%s\n",
                rec_signal_name(rc - 128), at ? "; the trainer stopped" : "", at ? at : "");
    }
    for (int i = 0; i < np; i++)
        if (ch[i].killed) fprintf(stderr, "rectrain cluster: %s did not stop in %d s and was killed\n", ch[i].what, GRACE_MS / 1000);
    remove_keys();
    return rc;
}

int cmd_cluster(int argc, char **argv) {
    const char *cmd = "cluster", *cfg_path = NULL, *policy = NULL, *loss = NULL, *link = NULL, *ckpt = NULL,
               *hostfile = NULL;
    static job j;
    memset(&j, 0, sizeof j);
    int64_t rows = 0;
    int lookahead = -1, port = 0, use_mpirun = 0;
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
        else if (!strcmp(a, "--npy")) rc = cli_str(cmd, argc, argv, &i, &j.npy);
        else if (!strcmp(a, "--eval")) rc = cli_str(cmd, argc, argv, &i, &j.eval);
        else if (!strcmp(a, "--hostfile")) rc = cli_str(cmd, argc, argv, &i, &hostfile);
        else if (!strcmp(a, "--mpirun")) use_mpirun = 1;
        else if (!strcmp(a, "--json")) j.json = 1;
        else if (!strcmp(a, "--insecure")) j.insecure = 1;
        else if (!strcmp(a, "--overwrite")) j.overwrite = 1;
        else if (!strcmp(a, "--resume")) j.resume = 1;
        else if (a[0] == '-') return cli_usage(cmd, "unknown option '%s'", a);
        else if (cfg_path) return cli_usage(cmd, "one CONFIG.json, got '%s' and '%s'", cfg_path, a);
        else cfg_path = a;
        if (rc != CLI_OK) return rc;
    }
    if (!cfg_path) return cli_usage(cmd, "give the deployment's CONFIG.json");
    rec_cluster_config *c = &j.c;
    rec_status s = rec_cluster_config_load(c, cfg_path);
    if (s) return cli_fail(cmd, s);
    if (policy && (c->policy = rec_cache_policy_parse(policy)) < 0)
        return cli_usage(cmd, "--policy takes bagpipe, none, static or lru, got '%s'", policy);
    if (policy && c->policy != REC_CACHE_BAGPIPE) c->lookahead = c->depth = 0;
    if (rows) c->cache_rows = rows;
    if (lookahead >= 0) c->lookahead = lookahead;
    if (c->lookahead && c->depth > c->lookahead) c->depth = c->lookahead;
    if (port) c->base_port = port;
    if (loss) snprintf(c->loss_log, sizeof c->loss_log, "%s", loss);
    if (ckpt) snprintf(c->ckpt, sizeof c->ckpt, "%s", ckpt);
    if (c->policy != REC_CACHE_BAGPIPE && lookahead > 0) return cli_usage(cmd, "--lookahead is for --policy bagpipe");
    if (link) {
        char *end;
        c->link_gbit = strtod(link, &end);
        if (end == link || *end != ',' || !(c->link_gbit >= 0)) return cli_usage(cmd, "--link takes GBIT,US (e.g. 1,100)");
        const char *us = end + 1;
        c->link_latency_us = strtod(us, &end);
        if (end == us || *end || !(c->link_latency_us >= 0)) return cli_usage(cmd, "--link takes GBIT,US (e.g. 1,100)");
        c->link = 1;
    }
    if (c->link && c->embservers == 0) return cli_usage(cmd, "--link is for the embedding servers, and the job has none");
    int across = use_mpirun || hostfile;
    for (int r = 0; r < 4; r++) across |= c->hosts[r][0] != 0;
    if (rec_dist_launched()) return cluster_member(&j); /* a process of the job across hosts */
    if (across && c->link)
        return cli_usage(cmd, "the emulated link (\"link\", --link) is for one machine: across hosts the trainers reach the "
                         "servers over the hosts' own network");
    if (across && j.insecure)
        return cli_usage(cmd, "--insecure: across hosts every process makes its own keys and lets in only the job's; plain "
                         "text is for one machine");
    rec_guard g = {0}; /* the files the job reads and writes, named as the user named them */
    rec_guard_in(&g, "the cluster config", cfg_path);
    rec_guard_in(&g, "$.data", c->data);
    rec_guard_in(&g, "$.model", c->model);
    rec_guard_in(&g, "$.spec", c->spec);
    rec_guard_out(&g, loss ? "--loss-log" : "$.loss_log", c->loss_log);
    rec_guard_dir(&g, ckpt ? "--ckpt" : "$.ckpt", c->ckpt, rec_ckpt_files);
    rec_guard_dir(&g, "$.durable.dir", c->durable_dir, NULL);
    rec_guard_dir(&g, "--npy", j.npy, NULL);
    rec_guard_in(&g, "--eval", j.eval);
    if (j.eval && access(j.eval, R_OK) != 0)
        return cli_usage(cmd, "--eval %s: cannot be read (%s); give the labelled evaluation data", j.eval, strerror(errno));
    if ((s = rec_guard_check(&g))) return cli_fail(cmd, s);
    if (j.resume && !c->durable_dir[0] && c->embservers > 0)
        return cli_usage(cmd, "--resume starts a durable job again from its servers' snapshots: %s has no \"durable\" "
                         "(see docs/bagpipe.md), so its job kept none", cfg_path);
    if (c->ckpt[0] && !j.overwrite && !j.resume && (s = rec_ckpt_check_absent(c->ckpt, "add --overwrite to replace it")))
        return cli_fail(cmd, s);
    return across ? cluster_launch(&j, hostfile, argc, argv) : run_local(&j);
}
