/* Training backends: the one table the training loop (src/train/trainer.c) calls, as ggml's
 * ggml_backend_i. The loop reads batches, keeps the losses, evaluates, checkpoints and reports;
 * how a step runs — one process on the CPUs (nn/, the reference), sharded under mpirun
 * (dist.h's executor), on an NVIDIA GPU (cuda.h), on a cache of rows held by embedding
 * servers (cache.h, Bagpipe) — is the backend's, chosen once by rec_backend_new and never
 * asked again.
 *
 * A backend trains the caller's host model (rec_model) or a copy of it: `download` makes the
 * host model hold the backend's parameters (and optimizer state) before a checkpoint of the
 * host model, an export or the end. Steps count in the host model (rec_model_steps), which
 * every backend keeps current.
 *
 * Adding a backend: a file src/train/backend_NAME.c that fills rec_backend_i, a case in
 * rec_backend_new, and a row in tests/test_backend.c, the parity harness that runs every
 * backend against cpu (docs/development.md "Adding a training backend"). */
#ifndef RECTRAIN_BACKEND_H
#define RECTRAIN_BACKEND_H

#include <stdint.h>
#include <stdio.h>

#include "rectrain/cache.h"
#include "rectrain/ckpt.h"
#include "rectrain/dist.h"
#include "rectrain/model.h"
#include "rectrain/status.h"
#include "rectrain/train.h"

typedef struct rec_backend rec_backend;

/* What rec_backend_new builds a backend from. The pointers are the caller's and outlive the
 * backend. */
typedef struct rec_backend_opts {
    int device;                 /* REC_DEVICE_CPU or REC_DEVICE_CUDA; with exec, the mpi backend */
    rec_model *model;           /* the host model: trained (cpu), or mirrored (cuda); without its
                                   tables under mpirun (rec_model_init_sharded) */
    const rec_model_config *cfg;
    rec_exec *exec;             /* under mpirun: the sharded executor, else NULL */
    int rank;                   /* this process's rank (0 in one process) */
    int device_profile;         /* time the step's parts (rec_train_opts.device_profile) */
    const char *gpu_plan;       /* cuda: the GPU embedding plan (--plan FILE), or NULL */
    rec_dataset *train;         /* cuda with the spec's ops on the GPU: its executors co-run */
    int corun;                  /* cuda: co-run the training data's GPU preprocessing (RAP) */
    const char *corun_capacity; /* its capacities file (--corun-capacity), or NULL */
    FILE *log;                  /* what the backend says it does, or NULL */
    rec_cache_trainer *cache;   /* a trainer joined to a disaggregated job (cache.h): the cache
                                   backend, which owns it once made; model is its model without
                                   tables, and its batches come from the oracles (next) */
} rec_backend_opts;

typedef struct rec_backend_i {
    const char *name; /* "cpu", "mpi", "cuda", "cache" */
    /* Where the backend brings its own batches (the cache's, from its oracles), else NULL: the
     * next one in *b, and the global batch's rows in *rows (a trainer's batch is its slice of
     * it); *b NULL after the last. Each next follows the step of the batch before. */
    rec_status (*next)(rec_backend *be, const rec_batch **b, int64_t *rows);
    /* --resume: the checkpoint PATH into the backend's model; meta filled. */
    rec_status (*load)(rec_backend *be, const char *path, struct rec_ckpt_meta *meta);
    /* Once the model holds its starting state (drawn, or loaded): ready to step. */
    rec_status (*start)(rec_backend *be);
    /* One optimizer step on batch b, or on sb where the backend stages its input (stages).
     * *loss_step: the step (1-based, as rec_model_steps counts) whose loss *loss is; an
     * asynchronous backend hands back an earlier step's, and 0 when it has none yet. */
    rec_status (*step)(rec_backend *be, const rec_batch *b, const rec_staged_batch *sb, double *loss,
                       int64_t *loss_step);
    /* Waits for the steps in flight; the last one's loss as step does (0: none left). */
    rec_status (*drain)(rec_backend *be, double *loss, int64_t *loss_step);
    /* Whether any process asks to stop (the largest signal number of all ranks into *any), so
     * that every rank stops at the same step; a collective under mpirun. */
    rec_status (*stop_vote)(rec_backend *be, int mine, int *any);
    /* Metrics of rows [row0, row1) of d scored in batches of `batch` (under mpirun, rank 0's
     * alone hold them). The steps in flight must be drained. */
    rec_status (*evaluate)(rec_backend *be, rec_dataset *d, int64_t row0, int64_t row1, int64_t batch,
                           rec_metrics *out);
    /* The host model made to hold the backend's parameters and optimizer state. */
    rec_status (*download)(rec_backend *be);
    /* The whole model as one process holds it (the export, --npy), after download: the host
     * model (cpu, cuda), or one that rank 0 gathers from the ranks' shards (mpi: a collective)
     * or from the embedding servers (cache); NULL on the other ranks. *owned: the caller frees
     * *out. */
    rec_status (*whole)(rec_backend *be, rec_model **out, int *owned);
    /* A checkpoint of the model at PATH (under mpirun every rank its rows, rank 0 the rest). */
    rec_status (*save)(rec_backend *be, const char *path, const struct rec_ckpt_meta *meta);
    /* At the end of a run that was not stopped: the backend's own figures into rep (the step's
     * parts, the GPU's host time, the co-run's plan and latencies). */
    rec_status (*report)(rec_backend *be, rec_train_report *rep);
    /* After every run, stopped or not, or NULL: under mpirun the ranks' dense parameters
     * checked equal and the communication's figures (a collective). */
    rec_status (*end)(rec_backend *be, rec_train_report *rep);
    /* Where the backend stages its input (the GPU's shuffle windows): a stager for windows of
     * `window` rows in `slots` slots, or REC_EUNSUPPORTED; NULL where it never does. */
    rec_status (*stager)(rec_backend *be, int slots, int64_t window, const char *origin, rec_stager *out);
    void (*free)(rec_backend *be);
} rec_backend_i;

struct rec_backend {
    const rec_backend_i *i;
    rec_backend_opts o;
    void *ctx; /* the backend's own state */
};

/* The backend of o (cpu, mpi with o->exec, cuda): REC_EUNSUPPORTED naming what is missing
 * (no GPU engine built); on failure *out is NULL. */
rec_status rec_backend_new(rec_backend **out, const rec_backend_opts *o);
void rec_backend_free(rec_backend *be);

/* Constructors of each backend (rec_backend_new chooses). */
rec_status rec_backend_cpu(rec_backend *be);
rec_status rec_backend_mpi(rec_backend *be);
rec_status rec_backend_cuda(rec_backend *be);
rec_status rec_backend_cache(rec_backend *be); /* src/cache/cache_trainer.c */

#endif
