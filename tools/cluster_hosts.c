/* `rectrain cluster` across hosts (cluster_impl.h; docs/deploy.md): one mpirun starts every
 * process of the job, each a `rectrain cluster CONFIG.json` that takes the line of the job's
 * plan its rank names (servers, prep-workers, oracles, trainers, in that order).
 *
 * At start each process makes its CurveZMQ key pair in memory and, for a service, binds a
 * listening socket on its host's address in the job's network on a port the kernel picks;
 * one MPI_Allgather gives every process every endpoint and public key. A service lets in the
 * job's keys only, a client reaches each service with that service's key, and no secret half
 * leaves its process. The trainers then split off a communicator of their own for the
 * training's collectives. At the end the trainers meet the services at a barrier, which stops
 * them.
 *
 * The launcher reads mpirun's output tagged by rank (--tag-output): each process's lines are
 * forwarded and its last one kept; when a process fails, mpirun stops the job on every host and
 * says which rank, and the launcher names it by its role and host. */
#define _GNU_SOURCE /* pipe2 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "cluster_impl.h"
#include "rectrain/core.h"
#include "rectrain/dist.h"
#include "rectrain/net.h"

/* The role of line i of the plan, for messages: "embedding server 0". */
static void role_name(const proc *p, int trainers, char *buf, size_t cap) {
    switch (p->role) {
    case R_SERVER: snprintf(buf, cap, "embedding server %d", p->index); break;
    case R_WORKER: snprintf(buf, cap, "prep-worker %d", p->index); break;
    case R_ORACLE: snprintf(buf, cap, "oracle %d", p->index); break;
    case R_LINK: snprintf(buf, cap, "link %d", p->index); break;
    default: trainers > 1 ? snprintf(buf, cap, "trainer %d", p->index) : snprintf(buf, cap, "the trainer");
    }
}

/* Where line p of the plan runs, by the config's "hosts" ("" where mpirun placed it). */
static void host_of(const job *j, const proc *p, char *buf, size_t cap) {
    const int r = p->role == R_SERVER ? REC_ROLE_EMBSERVERS : p->role == R_WORKER ? REC_ROLE_PREP_WORKERS
                : p->role == R_ORACLE ? REC_ROLE_ORACLES : REC_ROLE_TRAINERS;
    const char *h = j->c.hosts[r];
    buf[0] = 0;
    for (int i = 0; *h; i++) { /* entry p->index, or the only one */
        const char *end = strchr(h, ',');
        const size_t len = end ? (size_t)(end - h) : strlen(h);
        if (i == p->index || (i == 0 && !strchr(j->c.hosts[r], ','))) snprintf(buf, cap, "%.*s", (int)len, h);
        if (!end) break;
        h = end + 1;
    }
}

/* ---- a process of the job ---------------------------------------------------------------------- */

/* What each process tells the others at start. */
typedef struct hello {
    char ep[256];            /* its service's endpoint; "" for a trainer */
    char pub[41];            /* its public key */
    char addr[64];           /* its host's address in the job's network */
} hello;

/* A service waits for the trainers' end beside its work, then stops it as SIGTERM would. */
static int job_ended;

static void *await_end(void *arg) {
    (void)arg;
    if (!rec_dist_world_wait(&cli_stop) && !cli_stop) job_ended = 1, cli_stop = SIGTERM;
    return NULL;
}

static int run_command(char **argv) {
    int argc = 0;
    while (argv[argc]) argc++;
    const char *c = argv[1];
    cli_forget_flags(); /* the cluster's own command line was parsed in this process */
    int (*f)(int, char **) = !strcmp(c, "embserver") ? cmd_embserver : !strcmp(c, "prep-worker") ? cmd_worker
                           : !strcmp(c, "oracle")    ? cmd_oracle    : cmd_train;
    return f(argc - 1, argv + 1);
}

int cluster_member(job *j) {
    const char *cmd = "cluster";
    const rec_cluster_config *c = &j->c;
    int rank, size;
    rec_status s = rec_dist_world(&rank, &size);
    if (s) return cli_fail(cmd, s);
    static proc p[MAXP];
    j->launched = 1;
    const int n = cluster_plan(j, p, c->trainers);
    if (size != n) {
        if (rank == 0)
            fprintf(stderr, "rectrain cluster: mpirun started %d processes, and the job has %d (%d embedding servers, %d "
                    "prep-workers, %d oracles, %d trainers): start it with `rectrain cluster CONFIG.json --mpirun`, or "
                    "give mpirun -np %d\n", size, n, c->embservers, c->prep_workers, c->embservers ? c->oracles : 0,
                    c->trainers, n);
        return CLI_USAGE;
    }
    proc *me = &p[rank];
    static rec_net_launch launch;
    static hello mine, all[MAXP];
    static rec_net_peer peers[MAXP];
    launch.listen_fd = -1;
    s = rec_net_keypair(launch.pub, launch.sec);
    if (!s) s = rec_net_host_address(c->network, mine.addr);
    if (!s && me->role != R_TRAINER) s = rec_net_listen_any(mine.addr, &launch.listen_fd, mine.ep);
    if (s) {
        char name[64];
        role_name(me, c->trainers, name, sizeof name);
        return cli_fail(cmd, rec_error_wrap(s, "%s", name));
    }
    memcpy(mine.pub, launch.pub, sizeof mine.pub);
    snprintf(launch.listen, sizeof launch.listen, "%s", mine.ep);
    if ((s = rec_dist_world_allgather(&mine, sizeof mine, all))) return cli_fail(cmd, s);
    for (int r = 0; r < n; r++) { /* the plan again, with the endpoints */
        const proc *q = &p[r];
        char *ep = q->role == R_SERVER ? j->listen[q->index] : q->role == R_WORKER ? j->worker[q->index]
                 : q->role == R_ORACLE ? j->oracle[q->index] : NULL;
        if (ep) snprintf(ep, 300, "%.255s", all[r].ep);
        if (q->role == R_SERVER) snprintf(j->server[q->index], sizeof j->server[q->index], "%.255s", all[r].ep);
        char name[64];
        role_name(q, c->trainers, name, sizeof name);
        memset(&peers[r], 0, sizeof peers[r]);
        memcpy(peers[r].ep, all[r].ep, sizeof peers[r].ep);
        memcpy(peers[r].pub, all[r].pub, sizeof peers[r].pub);
        snprintf(peers[r].what, sizeof peers[r].what, "%.28s on %.30s", name, all[r].addr);
    }
    cluster_plan(j, p, c->trainers);
    launch.peers = peers, launch.n_peers = n;
    cli_launch = &launch;
    if ((s = rec_dist_join(me->role == R_TRAINER))) return cli_fail(cmd, s);
    if (rank == 0) { /* one write: mpirun tags each */
        static char said[MAXP * 400];
        size_t at = (size_t)snprintf(said, sizeof said, "cluster: across hosts: ");
        for (int r = 0; r < n && at < sizeof said; r++) {
            char name[64];
            role_name(&p[r], c->trainers, name, sizeof name);
            at += (size_t)snprintf(said + at, sizeof said - at, "%s%s on %s%s%s", r ? ", " : "", name, all[r].addr,
                                   all[r].ep[0] ? " at " : "", all[r].ep);
        }
        fprintf(stderr, "%s; CurveZMQ with keys each process made, the job's only\n", said);
    }
    if (me->role == R_TRAINER) {
        const int rc = run_command(me->argv);
        if (rc) return rc; /* mpirun stops the job */
        if (!rec_dist_world_wait(&cli_stop) && !cli_stop) rec_dist_leave();
        return rc;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, await_end, NULL) != 0)
        return cli_fail(cmd, rec_errorf(REC_EIO, "cannot start a thread: %s", strerror(errno)));
    const int rc = run_command(me->argv);
    if (rc || !job_ended) return rc ? rc : 128 + (int)cli_stop; /* failed, or stopped by a signal: mpirun ends the job */
    pthread_join(t, NULL);
    rec_dist_leave();
    return CLI_OK;
}

/* ---- the launcher -------------------------------------------------------------------------------- */

/* One process's output as mpirun forwards it: its last line, for the message of its failure. */
typedef struct out_line {
    char last[1024];
} out_line;

/* Appends "-np N [--host H,...] SELF cluster ARGS..." for ranks [r0, r1) of role `r` to av. */
static int app_context(char **av, int n, const job *j, int role_hosts, int count, char *np_buf, char *host_buf,
                       size_t host_cap, char *self, int argc, char **argv) {
    snprintf(np_buf, 16, "%d", count);
    av[n++] = "-np", av[n++] = np_buf;
    const char *h = role_hosts >= 0 ? j->c.hosts[role_hosts] : "";
    if (h[0]) { /* one host for all: repeated, so that mpirun gives it a slot for each */
        host_buf[0] = 0;
        const int one = !strchr(h, ',');
        for (int i = 0; i < (one ? count : 1); i++)
            snprintf(host_buf + strlen(host_buf), host_cap - strlen(host_buf), "%s%s", i ? "," : "", h);
        av[n++] = "--host", av[n++] = host_buf;
    }
    av[n++] = self;
    for (int i = 0; i < argc; i++) av[n++] = argv[i];
    return n;
}

/* What mpirun said of the process that ended the job: its rank, and how it ended. mpirun then
 * stops the others, and one that reports its stop (MPI_Abort) is said of too: a death by a
 * signal outranks an exit status, which outranks a reported failure. */
typedef struct verdict {
    int rank;                /* -1: not said */
    int weight;              /* 3 a signal, 2 an exit status, 1 MPI_Abort */
    char how[64];
    char node[256];
} verdict;

static void say(verdict *v, int weight, int rank, const char *how) {
    if (weight <= v->weight) return;
    v->weight = weight, v->rank = rank;
    snprintf(v->how, sizeof v->how, "%s", how);
}

/* Reads one of mpirun's own lines into v. */
static void read_verdict(const char *line, verdict *v) {
    int r, sig, code;
    char node[256], how[64];
    const char *at;
    if ((at = strstr(line, "process rank ")) &&
        sscanf(at, "process rank %d with PID %*d on node %255s exited on signal %d", &r, node, &sig) == 3) {
        snprintf(how, sizeof how, "killed by signal %d", sig);
        if (v->weight < 3) snprintf(v->node, sizeof v->node, "%s", node);
        say(v, 3, r, how);
    } else if ((at = strstr(line, "Process name: [[")) && sscanf(at, "Process name: [[%*d,%*d],%d]", &r) == 1) {
        say(v, 2, r, "a non-zero exit status");
    } else if ((at = strstr(line, "Exit code:")) && sscanf(at, "Exit code: %d", &code) == 1 && v->weight == 2) {
        snprintf(v->how, sizeof v->how, "exit status %d", code);
    } else if ((at = strstr(line, "MPI_ABORT was invoked on rank ")) && sscanf(at, "MPI_ABORT was invoked on rank %d", &r) == 1) {
        say(v, 1, r, "a failure it reported");
    }
}

int cluster_launch(job *j, const char *hostfile, int argc, char **argv) {
    const rec_cluster_config *c = &j->c;
    static proc p[MAXP];
    j->launched = 1;
    const int n = cluster_plan(j, p, c->trainers);
    char self[4096];
    const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) return cli_fail("cluster", rec_errorf(REC_EIO, "cannot find this program: %s", strerror(errno)));
    self[len] = 0;
    /* one app context per role, in the plan's order */
    static char *av[4 * 96 + 64];
    static char np_buf[4][16], host_buf[4][4096];
    int na = 0;
    av[na++] = "mpirun", av[na++] = "--tag-output", av[na++] = "--oversubscribe", av[na++] = "--bind-to", av[na++] = "none";
    if (hostfile) av[na++] = "--hostfile", av[na++] = (char *)hostfile;
    static const role ROLE_OF[4] = {R_SERVER, R_WORKER, R_ORACLE, R_TRAINER}; /* REC_ROLE_* */
    for (int r = 0, first = 1; r < 4; r++) {
        int count = 0;
        for (int i = 0; i < n; i++) count += p[i].role == ROLE_OF[r];
        if (!count) continue;
        if (!first) av[na++] = ":";
        first = 0;
        na = app_context(av, na, j, r, count, np_buf[r], host_buf[r], sizeof host_buf[r], self, argc, argv);
    }
    av[na] = NULL;
    int fd[2];
    if (pipe2(fd, O_CLOEXEC) != 0) return cli_fail("cluster", rec_errorf(REC_EIO, "cannot make a pipe: %s", strerror(errno)));
    fprintf(stderr, "cluster: launching %d processes with mpirun across hosts\n", n);
    cli_catch_stop("");
    const pid_t pid = fork();
    if (pid == 0) {
        if (dup2(fd[1], STDOUT_FILENO) < 0 || dup2(fd[1], STDERR_FILENO) < 0) _exit(127);
        execvp("mpirun", av);
        fprintf(stderr, "rectrain cluster: cannot run mpirun: %s (scripts/install-deps.sh installs openmpi-bin)\n",
                strerror(errno));
        _exit(127);
    }
    close(fd[1]);
    if (pid < 0) {
        close(fd[0]);
        return cli_fail("cluster", rec_errorf(REC_EIO, "cannot start mpirun: %s", strerror(errno)));
    }
    static out_line last[MAXP];
    verdict v = {.rank = -1};
    char line[4096], mpi_said[8192] = "";
    size_t nl = 0;
    int forward = 1, sent_term = 0;
    FILE *in = fdopen(fd[0], "r");
    while (in && fgets(line, sizeof line, in)) {
        nl = strlen(line);
        if (nl && line[nl - 1] == '\n') line[--nl] = 0;
        int r, at = 0;
        char stream[8];
        if (sscanf(line, "[%*d,%d]<%7[a-z]>:%n", &r, stream, &at) == 2 && at > 0 && r >= 0 && r < n) {
            const char *text = line + at;
            if (!strcmp(stream, "stdout")) {
                puts(text);
                fflush(stdout);
            } else {
                if (forward) fprintf(stderr, "%s\n", text);
                if (text[0]) snprintf(last[r].last, sizeof last[r].last, "%s", text);
            }
        } else { /* mpirun's own: the job is ending */
            forward = 0;
            read_verdict(line, &v);
            if (strncmp(line, "-----", 5) && strlen(mpi_said) + nl + 2 < sizeof mpi_said)
                strcat(mpi_said, line), strcat(mpi_said, "\n");
        }
        if (cli_stop && !sent_term) kill(pid, SIGTERM), sent_term = 1, forward = 0; /* a SIGTERM to the launcher alone */
    }
    if (in) fclose(in);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0 && !cli_stop) return CLI_OK;
    if (cli_stop) {
        fprintf(stderr, "rectrain cluster: stopped by %s; mpirun stopped every process of the job on every host\n",
                rec_signal_name(cli_stop));
        return 128 + cli_stop;
    }
    if (v.rank >= 0 && v.rank < n) {
        char name[64];
        role_name(&p[v.rank], c->trainers, name, sizeof name);
        const char *lst = last[v.rank].last;
        char host[256];
        host_of(j, &p[v.rank], host, sizeof host); /* the config's name; mpirun's is the host's own */
        if (host[0] || v.weight < 3) snprintf(v.node, sizeof v.node, "%s", host);
        fprintf(stderr, "rectrain cluster: %s (rank %d%s%s) ended (%s) while the job ran%s%s; mpirun stopped the other "
                "processes on every host\n", name, v.rank, v.node[0] ? " on " : "", v.node, v.how[0] ? v.how : "failed",
                lst[0] ? ": " : "", lst);
    } else {
        fprintf(stderr, "%srectrain cluster: mpirun ended (%s)\n", mpi_said,
                WIFEXITED(st) ? "with a failure" : "killed by a signal");
    }
    return CLI_FAIL;
}
