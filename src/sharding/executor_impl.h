/* Internals of the executor (dist.h), shared by executor.c (training steps) and shards.c (its
 * sharded checkpoints). */
#ifndef RECTRAIN_EXECUTOR_IMPL_H
#define RECTRAIN_EXECUTOR_IMPL_H

#include <mpi.h>
#include <string.h>

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
    /* Values are stored as the model's tables are (embed.h "Table storage"): fp32, or with
     * bf16 tables (b16) their bf16 bits, in the same places (`floats` then counts values), and
     * stepped as one process steps them (rec_sparse_opt_step_bf16, keyed by the table's seed
     * or the first-order tables' lin_seed, the model's step, the table, row and column). */
    int b16;
    rec_embed_rounding rounding;
    uint64_t seed, lin_seed;
    float *store, *state;    /* this rank's rows (fp32; NULL for bf16: store16); state: ADAGRAD as store, ROWWISE one per srow */
    uint16_t *store16;       /* bf16: this rank's rows, as store would hold them */
    int64_t store_floats, store_rows; /* this rank's, from the map */
    float *rep, *rep_state, *rep_grad; /* replicated rows (E floats each), every rank alike (rep: NULL for bf16) */
    uint16_t *rep16;         /* bf16: the replicated rows */
    int32_t *rep_f;          /* bf16: (rep_rows) each replicated row's table and row (its rounding's key) */
    int64_t *rep_row;
    int64_t rep_rows;
    /* DeepFM's and Wide&Deep's first-order tables (model.h lin.{f}, one float a row): row r of
     * table f's value lives with the owner of the row's first column part, at
     * store[store_floats + srow] (after the owner's rows, in the same window), or replicated
     * at rep_lin[srow]; its state (the Adagrad kinds: one float) at lin_state[srow] /
     * rep_lin_state[srow]. Its gradient rides on part 0's gradient record as one more float. */
    int has_lin;
    int64_t win_floats;      /* the window: store_floats, + store_rows first-order values */
    float *lin_state, *rep_lin, *rep_lin_state; /* rep_lin: NULL for bf16 */
    uint16_t *rep_lin16;     /* bf16: the replicated first-order values */
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

/* The stores as they are kept (fp32, or bf16 bits): this rank's rows then its first-order
 * values (the window), the replicated rows, the replicated first-order values. */
static inline void *rec__store(const rec_exec *x) { return x->b16 ? (void *)x->store16 : (void *)x->store; }
static inline void *rec__rep(const rec_exec *x) { return x->b16 ? (void *)x->rep16 : (void *)x->rep; }
static inline void *rec__rep_lin(const rec_exec *x) { return x->b16 ? (void *)x->rep_lin16 : (void *)x->rep_lin; }

/* Bytes of one stored value: 2 for bf16 tables, else 4. */
static inline int rec__value_bytes(int b16) { return b16 ? 2 : 4; }

/* n stored values from element `at` of `base` (fp32, or bf16 bits when b16) as fp32 into dst. */
static inline void rec__values_get(const void *base, int b16, int64_t at, int64_t n, float *dst) {
    if (!b16) {
        memcpy(dst, (const float *)base + at, sizeof(float) * (size_t)n);
        return;
    }
    const uint16_t *v = (const uint16_t *)base + at;
    for (int64_t i = 0; i < n; i++) dst[i] = rec_bf16_to_float(v[i]);
}

/* The reverse: n fp32 values into a store, rounded to nearest when it is bf16 (exact for
 * values that are bf16 already: rows read back from a bf16 store or from its save). */
static inline void rec__values_put(void *base, int b16, int64_t at, int64_t n, const float *src) {
    if (!b16) {
        memcpy((float *)base + at, src, sizeof(float) * (size_t)n);
        return;
    }
    uint16_t *v = (uint16_t *)base + at;
    for (int64_t i = 0; i < n; i++) v[i] = rec_bf16_bits(src[i]);
}

#endif
