/* `rectrain cluster` across hosts (docs/deploy.md), on this machine: `--mpirun` launches the
 * same job the local form runs as ranks of one mpirun, each process binding its service on the
 * machine's address and making its own keys, and trains the same bits, for a Bagpipe job (two
 * trainers) and a FastFlow one; a process killed names itself and stops the job with nothing
 * left, and a durable job resumes from its snapshots; a client of no key, or of another job's
 * keys, is refused; and every config or command
 * that cannot run is refused before any work with the JSON path or option to fix.
 * (bench/deploy_hosts.sh runs the same across two network namespaces, with the wire captured.) */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "clirun.h"
#include "rectrain/core.h"

static int port;

/* A cluster config `name`: dlrm_small for `epochs`, with `extra` keys (the data, the batch...). */
static void write_cfg(const char *name, int epochs, const char *extra) {
    FILE *f = fopen(path(name), "w");
    if (!f) return;
    fprintf(f, "{\"format\": \"rectrain-cluster\", \"version\": 1, \"model\": \"%s/configs/dlrm_small.json\", "
               "\"epochs\": %d, \"shuffle\": false, \"threads\": 1, \"peer_timeout\": 30, %s}\n",
            src, epochs, extra);
    fclose(f);
}

#define BAGPIPE "\"batch\": 256, \"data\": \"d.rshard\", \"embservers\": 1, \"trainers\": 2, \"cache\": {\"rows\": 6000}"
#define FASTFLOW "\"batch\": 256, \"data\": \"d.tsv\", \"spec\": \"spec.json\", \"embservers\": 0, \"prep_workers\": 1, \"offload\": \"0.5\""

/* Refused before any work, each naming what to fix. */
static void test_refusals(void) {
    static const struct {
        const char *keys, *args, *says;
    } BAD[] = {
        {"\"hosts\": [\"a\"]", "", "$.hosts: must be an object of roles and their hosts"},
        {"\"hosts\": {\"servers\": [\"a\"]}", "", "$.hosts.servers: unknown role (embservers, prep_workers, oracles or trainers)"},
        {"\"hosts\": {\"trainers\": [\"a\", \"b\", \"c\"]}", "", "$.hosts.trainers: must be an array of 1 host (for all) or 2"},
        {"\"hosts\": {\"trainers\": [\"a,b\"]}", "", "$.hosts.trainers: must hold host names (no commas, spaces or colons)"},
        {"\"hosts\": {\"trainers\": []}", "", "$.hosts.trainers: must be an array of 1 host"},
        {"\"network\": \"10.1.0.0\"", "", "$.network: '10.1.0.0' is not an IPv4 network (A.B.C.D/N"},
        {"\"network\": \"10.1.0.0/33\"", "", "$.network: '10.1.0.0/33' is not an IPv4 network"},
        {"\"offload\": \"auto\"", "", "$.offload: is for a FastFlow job"},
        {"\"hosts\": {\"trainers\": [\"a\"]}", "--link 1,100", "the emulated link (\"link\", --link) is for one machine"},
        {"\"hosts\": {\"trainers\": [\"a\"]}", "--insecure", "--insecure: across hosts every process makes its own keys"},
    };
    for (size_t k = 0; k < sizeof BAD / sizeof BAD[0]; k++) {
        char extra[512];
        snprintf(extra, sizeof extra, "%s, %s", BAGPIPE, BAD[k].keys);
        write_cfg("bad.json", 1, extra);
        CHECK(run("cluster bad.json %s", BAD[k].args) != 0 && strstr(out, BAD[k].says), "%s %s: %s", BAD[k].keys,
              BAD[k].args, out);
    }
    write_cfg("bad.json", 1, "\"data\": \"d.rshard\", \"embservers\": 0");  /* no batch: the model's */
    CHECK(run("cluster bad.json") != 0 && strstr(out, "$.embservers: 0 (a FastFlow job) needs \"prep_workers\""), "%s", out);
    write_cfg("bad.json", 1, "\"data\": \"d.rshard\", \"embservers\": 0, \"prep_workers\": 1, \"durable\": {\"dir\": \"x\"}");
    CHECK(run("cluster bad.json") != 0 && strstr(out, "$.durable: is for the embedding servers"), "%s", out);
    CHECK(run("prep-worker --launched") == 2 && strstr(out, "--launched is for the processes `rectrain cluster` starts"),
          "%s", out);
    /* mpirun of another number of processes than the job has */
    write_cfg("b.json", 1, BAGPIPE);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd %s && REC_PROGRESS=0 timeout 60 mpirun -np 2 --oversubscribe %s cluster b.json 2>&1", dir, cli);
    CHECK(check_capture(cmd, out, sizeof out) != 0 &&
              strstr(out, "mpirun started 2 processes, and the job has 4 (1 embedding servers, 0 prep-workers, 1 oracles, "
                          "2 trainers)"), "%s", out);
    /* a network this machine has no address in: the first process names it, and the job stops */
    write_cfg("nonet.json", 1, BAGPIPE ", \"network\": \"10.254.253.0/24\"");
    CHECK(run("cluster nonet.json --mpirun") != 0 && strstr(out, "this host has no address in network 10.254.253.0/24") &&
              strstr(out, "ended (exit status 1) while the job ran"), "%s", out);
}

/* The same job in the local form and launched by mpirun: the same bits. */
static void test_same_bits(void) {
    char extra[512];
    snprintf(extra, sizeof extra, BAGPIPE ", \"base_port\": %d", port);
    write_cfg("bag_one.json", 1, extra);
    write_cfg("bag.json", 1, BAGPIPE ", \"hosts\": {\"embservers\": [\"localhost\"]}");
    CHECK(run("cluster bag_one.json --loss-log bag_one.loss") == 0, "%s", out);
    CHECK(run("cluster bag.json --loss-log bag.loss") == 0 && strstr(out, "cluster: across hosts: embedding server 0 on ") &&
              strstr(out, "trainer 1 on ") && strstr(out, "lets in the 4 processes of the job"), "%s", out);
    CHECK(lines_of("bag.loss") > 40 && same_file("bag_one.loss", "bag.loss"),
          "Bagpipe with 2 trainers launched by mpirun trains the bits of the local form");
    snprintf(extra, sizeof extra, FASTFLOW ", \"base_port\": %d", port + 10);
    write_cfg("ff_one.json", 1, extra);
    write_cfg("ff.json", 1, FASTFLOW);
    CHECK(run("cluster ff_one.json --loss-log ff_one.loss") == 0, "%s", out);
    CHECK(run("cluster ff.json --mpirun --loss-log ff.loss --json") == 0 && strstr(out, "the workers made") &&
              strstr(out, "\"model\": \"dlrm_small\""), "%s", out);
    CHECK(lines_of("ff.loss") > 40 && same_file("ff_one.loss", "ff.loss"),
          "a FastFlow job launched by mpirun trains the bits of the local form");
    CHECK(run("train --data d.tsv --spec spec.json --config %s/configs/dlrm_small.json --batch 256 --no-shuffle "
              "--threads 1 --loss-log plain.loss", src) == 0 && same_file("plain.loss", "ff.loss"),
          "and those of a plain train: %s", out);
}

/* The processes of the job started by config `name` that still run ("[c]luster": the pattern
 * does not match the shell that runs pgrep). */
static int left(const char *name) {
    char cmd[700], n[32] = "";
    snprintf(cmd, sizeof cmd, "pgrep -f '%s [c]luster %s' | wc -l", cli, name);
    FILE *p = popen(cmd, "r");
    if (p && !fgets(n, sizeof n, p)) n[0] = 0;
    if (p) pclose(p);
    return atoi(n);
}

/* The pid of the process of world rank `rank` of the job started by config `name`, or -1. */
static pid_t rank_pid(const char *name, int rank) {
    char cmd[900], n[32] = "";
    snprintf(cmd, sizeof cmd, "for p in $(pgrep -f '%s [c]luster %s'); do tr '\\0' '\\n' < /proc/$p/environ 2>/dev/null | "
             "grep -qx OMPI_COMM_WORLD_RANK=%d && echo $p; done | head -1", cli, name, rank);
    FILE *p = popen(cmd, "r");
    if (p && !fgets(n, sizeof n, p)) n[0] = 0;
    if (p) pclose(p);
    return n[0] ? (pid_t)atoi(n) : -1;
}

/* A job of many epochs: intruders refused while it runs; then kill -9 of its embedding server
 * stops it within 5 s, naming the server, with no process left. */
static void test_intruders_and_kill(void) {
    write_cfg("long.json", 200, BAGPIPE);
    remove(path("long.loss"));
    pid_t job = spawn("cluster long.json --mpirun --loss-log long.loss > long.out 2>&1");
    for (int i = 0; i < 1200 && lines_of("long.loss") < 5; i++) usleep(50000);
    read_out("long.out");
    char oracle[300] = "", server[300] = "";
    const char *o = strstr(out, "oracle 0 on "), *sv = strstr(out, "embedding server 0 on ");
    if (o) sscanf(strstr(o, " at ") ? strstr(o, " at ") : o, " at %299[^,;]", oracle);
    if (sv) sscanf(strstr(sv, " at ") ? strstr(sv, " at ") : sv, " at %299[^,;]", server);
    CHECK(oracle[0] && server[0] && lines_of("long.loss") >= 5, "the job runs and says its endpoints: %s", out);
    CHECK(run("train --oracle-cacher %s --embservers %s --insecure --peer-timeout 2", oracle, server) != 0 &&
              strstr(out, "refused this trainer's connection"), "a client in plain text is refused: %s", out);
    CHECK(run("keygen --out other_svc") == 0 && run("keygen --out other") == 0, "%s", out);
    char cp[1200];
    snprintf(cp, sizeof cp, "cp %s/other_svc/self.pub %s/other/server.pub", dir, dir);
    CHECK(system(cp) == 0, "%s", cp);
    CHECK(run("train --oracle-cacher %s --embservers %s --keys other --peer-timeout 2", oracle, server) != 0 &&
              strstr(out, "refused this trainer's connection"), "a client with another job's keys is refused: %s", out);
    const pid_t srv = rank_pid("long.json", 0);
    CHECK(srv > 0, "the embedding server runs");
    const double t0 = rec_now();
    if (srv > 0) kill(srv, SIGKILL);
    int st = 0;
    waitpid(job, &st, 0);
    const double took = rec_now() - t0;
    read_out("long.out");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1 && took < 5 &&
              strstr(out, "rectrain cluster: embedding server 0 (rank 0") && strstr(out, "ended (killed by signal 9)"),
          "kill -9 of the server: stopped in %.1f s: %s", took, out);
    CHECK(strstr(out, "oracle: refused a connection"), "the oracle logged the refusals: %s", out);
    CHECK(left("long.json") == 0, "no process of the job is left");
}

/* A durable job: kill -9 of its trainer stops it; `--resume` restarts every process, the server
 * from its snapshot, and the job ends with the losses of a run without the kill. */
static void test_durable(void) {
    write_cfg("dj.json", 1, "\"data\": \"d.rshard\", \"batch\": 64, \"embservers\": 1, \"cache\": {\"rows\": 5000}, "
                            "\"durable\": {\"dir\": \"snaps\", \"every\": 10}");
    CHECK(run("cluster dj.json --mpirun --loss-log ref.loss") == 0, "%s", out);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf %s/snaps", dir);
    CHECK(system(cmd) == 0, "%s", cmd);
    remove(path("f.loss"));
    const pid_t job = spawn("cluster dj.json --mpirun --loss-log f.loss > f.out 2>&1");
    for (int i = 0; i < 1200 && lines_of("f.loss") < 60; i++) usleep(20000);
    const pid_t trainer = rank_pid("dj.json", 2);
    CHECK(trainer > 0 && lines_of("f.loss") >= 60, "the durable job runs");
    if (trainer > 0) kill(trainer, SIGKILL);
    waitpid(job, NULL, 0);
    read_out("f.out");
    CHECK(strstr(out, "rectrain cluster: the trainer (rank 2") && strstr(out, "ended (killed by signal 9)"), "%s", out);
    CHECK(run("cluster dj.json --mpirun --loss-log f.loss --resume") == 0 && strstr(out, "train: resumed at step ") &&
              strstr(out, "embserver: restored the snapshot of step "), "%s", out);
    CHECK(lines_of("ref.loss") > 100 && same_file("ref.loss", "f.loss"), "resumed, the losses of the run without the kill");
}

int main(void) {
    int rc = clirun_setup("rectrain_deploy");
    if (rc) return rc == 77 ? check_report() : rc;
    if (!clirun_mpi_ready("cluster across hosts")) return check_report();
    port = 21000 + (int)(getpid() % 11000);
    write_spec("spec.json", 50, 190);
    CHECK(run("gen --rows 12000 --out d.tsv") == 0 && run("prep --spec spec.json --in d.tsv --out d.rshard") == 0, "%s", out);
    test_refusals();
    test_same_bits();
    test_intruders_and_kill();
    test_durable();
    clirun_cleanup();
    return check_report();
}
