/* Internal to src/train/: the trainer's `--offload auto` (offload_auto.c). */
#ifndef REC_TRAIN_IMPL_H
#define REC_TRAIN_IMPL_H

#include <stdio.h>

#include "rectrain/model.h"
#include "rectrain/offload.h"
#include "rectrain/train.h"

typedef struct rec_offload_auto_in {
    rec_dataset *d;          /* the training data, with x attached (rec_dataset_offload) */
    rec_offload *x;
    const rec_model_config *cfg; /* bound to d's tables */
    int threads;
    int64_t batch;
    int64_t rows;            /* of d */
    const char *store;       /* the metric store, or NULL: profile every time, keep nothing */
    rec_offload_keys keys;
    double threshold;        /* Gthp/Lthp below which nothing is offloaded */
    int again;               /* measure everything, whatever the store holds (and store it) */
    /* Under mpirun (plan != NULL): the job's sharding plan, this rank, and the executor's
     * --fetch. The copy is then a sharded model with an executor of its own on the plan,
     * stepped by all ranks together (Gthp is the job's distributed step), and rank 0's store
     * and measurements are every rank's, so that all decide alike. */
    const struct rec_plan *plan;
    int rank, alltoall;
} rec_offload_auto_in;

/* Profiles what the store does not hold, decides (Algorithm 1) and stores what it measured.
 * *reused: the store's bits that were found (offload.h rec_offload_store_load). The split of
 * in->x is left as it was: the caller applies the decision. Under mpirun it is collective:
 * every rank calls it, with the same inputs but for rank, and gets the same metrics and
 * decision (rank 0's). */
rec_status rec__offload_auto(const rec_offload_auto_in *in, rec_offload_metrics *m, rec_offload_decision *dec,
                             int *reused);

/* RAP's co-running in training (rap.c): with a GPU model and a spec's ops on the GPU
 * executor, the loader's executors follow the corun (rec_dataset_set_corun) whose plan this
 * makes from capacities measured on the running model and the executors' own kernel times.
 * The trainer calls before_step before each step call and after_step after it. */
typedef struct rec_rap rec_rap;
typedef struct rec_cuda_model rec_cuda_model;
/* The GPU model's side (rec_cuda_model_corun, _probe, _stage_times: cuda.h); tests give their own. */
typedef struct rec_rap_gpu {
    void *ctx;
    rec_status (*corun)(void *ctx, void **events);
    rec_status (*probe)(void *ctx, int stage, double ms);
    int (*stage_times)(void *ctx, double *ms, int *probe_stage);
} rec_rap_gpu;
rec_rap_gpu rec_rap_cuda(rec_cuda_model *g);
/* cap_path: capacities read from it where it exists (measured for `key`: what the run trains
 * on), else measured and written to it; NULL: measured, not kept. */
rec_status rec_rap_new(rec_rap **out, const rec_rap_gpu *gpu, const struct rec_spec *spec, int64_t batch,
                       const char *cap_path, const char *key, FILE *log);
void rec_rap_free(rec_rap *r);
rec_corun *rec_rap_corun(rec_rap *r);
/* The steps the capacity search takes (those measured, and one between rounds). */
int rec_rap_probe_steps(void);
rec_status rec_rap_before_step(rec_rap *r);
rec_status rec_rap_after_step(rec_rap *r);
/* The co-run's figures (rec_train_report.corun), and the log's lines on them. */
void rec_rap_report(const rec_rap *r, rec_rap_result *out);

#endif
