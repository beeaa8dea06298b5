/* Internal to `rectrain cluster` (cmd_cluster.c: the plan of a job's processes and its local
 * form; cluster_hosts.c: the form across hosts, launched by mpirun). */
#ifndef RECTRAIN_CLUSTER_IMPL_H
#define RECTRAIN_CLUSTER_IMPL_H

#include "rectrain/cache.h"

/* The processes of a job at most: servers, their links, prep-workers, oracles, trainers. */
enum { MAXP = 2 * 62 + 16 + REC_CACHE_MAX_ORACLES + 64 };

typedef enum { R_SERVER, R_LINK, R_WORKER, R_ORACLE, R_TRAINER } role;

typedef struct proc {
    role role;
    int index;
    char what[340];          /* "embedding server 0 (tcp://...)" */
    char *argv[48];          /* "rectrain", the command, its options; NULL-terminated */
} proc;

/* What the job's processes are given: the config with the command line's overrides, and the
 * endpoints of its services. */
typedef struct job {
    rec_cluster_config c;
    const char *npy, *eval;
    int json, insecure, overwrite, resume;
    int launched;            /* across hosts: the keys made by each process (--launched) */
    char listen[64][300];    /* server k listens on */
    char server[64][300];    /* the trainers reach server k at (its link, with "link") */
    char worker[16][300];
    char oracle[REC_CACHE_MAX_ORACLES][300];
    char servers[64 * 300 + 64], workers[16 * 300 + 16], oracles[REC_CACHE_MAX_ORACLES * 300 + 64];
    char part[REC_CACHE_MAX_ORACLES][24], link_port[64][16], link_to[64][300];
    char batch[32], epochs[32], shuffle[8], steps[32], rows[32], la[32], depth[32], threads[32], timeout[32];
    char gbit[32], lat[32], every[32], sdir[64][1100];
} job;

/* The job's processes in the order an mpirun across hosts ranks them: embedding servers (each
 * with its link, locally), prep-workers, oracles, then `trainers` trainer processes (1: the
 * local form's one trainer process, an mpirun of c.trainers). Returns how many. */
int cluster_plan(job *j, proc *p, int trainers);

/* The form across hosts (docs/deploy.md). cluster_launch runs one mpirun of every process of
 * the job, each a `rectrain cluster` of the same config, forwards their lines and names the
 * one that failed; cluster_member is one of them: it makes its keys, binds its service,
 * exchanges both with the others and runs its part of the plan. Both return the exit status. */
int cluster_launch(job *j, const char *hostfile, int argc, char **argv);
int cluster_member(job *j);

#endif
