/* Internals of the executor (dist.h), shared by executor.c (training steps) and shards.c (its
 * sharded checkpoints). */
#ifndef RECTRAIN_EXECUTOR_IMPL_H
#define RECTRAIN_EXECUTOR_IMPL_H

#include <mpi.h>

#include "sharding_impl.h"
#include "rectrain/dist.h"

/* A gradient record: header then G floats. */
typedef struct rec_hdr {
    int32_t f, c;
    int64_t row;
} rec_hdr;

struct rec_exec {
    rec_model *m;
    const rec_plan *plan;
    int rank, N, F, E, baseline;
    int64_t B, max_local;
    rec_sparse_opt_config opt;
    xmap map;                /* the plan's addresses, every rank's */
    float *store, *state;    /* this rank's rows; state: ADAGRAD as store, ROWWISE one per srow */
    int64_t store_floats, store_rows; /* this rank's, from the map */
    float *rep, *rep_state, *rep_grad; /* replicated rows (E floats each), every rank alike */
    int64_t rep_rows;
    /* DeepFM's and Wide&Deep's first-order tables (model.h lin.{f}, one float a row): row r of
     * table f's value lives with the owner of the row's first column part, at
     * store[store_floats + srow] (after the owner's rows, in the same window), or replicated
     * at rep_lin[srow]; its state (the Adagrad kinds: one float) at lin_state[srow] /
     * rep_lin_state[srow]. Its gradient rides on part 0's gradient record as one more float. */
    int has_lin;
    int64_t win_floats;      /* the window: store_floats, + store_rows first-order values */
    float *lin_state, *rep_lin, *rep_lin_state;
    MPI_Win win;
    /* per step */
    rec_batch lb;            /* this rank's slice */
    int64_t *uniq;           /* (F)(ucap) sorted unique ids per table */
    int64_t *n_uniq, ucap;
    int32_t *idx;            /* (F)(icap) position of each id in uniq */
    int64_t icap;
    int32_t *order;          /* (2 ucap) a table's ids in sorted order, and the sort's scratch */
    int64_t order_cap;
    xloc *loc;               /* per (table, part, unique row) in that order: where the row lives */
    int64_t loc_cap;
    float *rows, *grads;     /* (F)(ucap)(E) */
    float *lin_rows, *lin_grads; /* (F)(ucap) first-order values and their gradients */
    int64_t lin_fetched;     /* first-order values among this step's fetches from other ranks */
    float *dlogits;
    /* fetch lists per owner */
    int64_t *fcount, *fcap;  /* (N) */
    MPI_Aint **fdisp;        /* (N)(fcap) bytes into the owner's window */
    int **flen;              /* (N)(fcap) floats */
    float ***fdst;           /* (N)(fcap) where they go in rows */
    float *fbuf;
    int64_t fbuf_cap;
    /* exchange */
    int *scount, *sdispl, *rcount, *rdispl;
    char *sbuf, *rbuf;
    int64_t sbuf_cap, rbuf_cap;
    void *keys;              /* (keys_cap) the owner's received records (executor.c's key) */
    int64_t keys_cap;
    float *gsum;             /* (E + 1) a row's summed gradient record */
    /* dense all-reduces started by the backward's hook */
    MPI_Request *req;
    int n_req, req_cap;
    size_t covered;
    rec_status hook_err;
    double *served;          /* (N) bytes this rank fetched from each owner (its "sent") */
    rec_exec_stats st;
};

#endif
