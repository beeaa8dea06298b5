/* Internals of src/sharding/: the profile's and the plan's layouts, shared by profile.c, plan.c
 * and plan_io.c. */
#ifndef RECTRAIN_SHARDING_IMPL_H
#define RECTRAIN_SHARDING_IMPL_H

#include <stdint.h>

#include "rectrain/core.h"
#include "rectrain/plan.h"

typedef struct prof_entry {
    int64_t row;                     /* -1: empty */
    uint32_t slices, batches;        /* rank slices / global batches that used the row */
    uint32_t last_slice, last_batch; /* the last ones that counted (+1; 0: none) */
} prof_entry;

typedef struct prof_table {
    prof_entry *e;
    int64_t cap, n;
} prof_table;

struct rec_plan_profile {
    rec_plan_model m;                /* rows points at `rows` */
    int64_t *rows;                   /* (F) */
    prof_table *t;                   /* (F) */
    int64_t batches, slices;
    int64_t ids;                     /* ids of every profiled batch */
};

typedef struct prof_row {
    int64_t row;
    double A;                        /* ranks using it per step */
    double q;                        /* share of steps it is used in */
    uint32_t count;                  /* slices that used it in the profile */
} prof_row;

/* The last index i of the rising a[0..n) with a[i] <= x, or -1 (plan.c). */
int64_t rec__last_le(const int64_t *a, int64_t n, int64_t x);

rec_status rec__profile_rows(const rec_plan_profile *p, int f, prof_row **out, int64_t *n);
int rec__cmp_prof_row(const void *a, const void *b);

typedef struct plan_part {
    int c0, c1;
    int64_t n_seg, n_hot;
    int64_t *seg_start;
    int *seg_owner;
    int64_t *hot_row;
    int *hot_owner;
} plan_part;

struct rec_plan {
    rec_plan_kind kind;
    int N, F, E;
    rec_sparse_opt_kind opt;
    int64_t batch;
    size_t dense_params;
    double value_bytes; /* a stored row value: 4, or 2 for bf16 tables (rec_plan_model.bf16) */
    int64_t *rows;                   /* (F) */
    int *n_parts;                    /* (F) */
    plan_part **parts;               /* (F)(n_parts[f]) */
    rec_plan_cost *cost;             /* (N) */
    double lower_bound, threshold;
};

/* An empty plan of the model's shape (every table one part, no segments yet). */
rec_status rec__plan_alloc(rec_plan **out, rec_plan_kind kind, const rec_plan_model *m);
/* Sets part (f, c)'s columns and its segments / hot rows (copied). */
rec_status rec__plan_set_part(rec_plan *p, int f, int c, int c0, int c1, int64_t n_seg, const int64_t *seg_start,
                              const int *seg_owner, int64_t n_hot, const int64_t *hot_row, const int *hot_owner);
rec_status rec__plan_set_cols(rec_plan *p, int f, int n_parts);
/* Checks a plan's structure (rows and owners in range, sorted, replicated only whole rows):
 * REC_EINVAL naming `origin`, the JSON path of the field as a plan file has it (plan.h), and
 * the table and part. */
rec_status rec__plan_check(const rec_plan *p, const char *origin);
/* A TorchRec plan's JSON ({"table_plans": ...}, plan_torchrec.c) as a plan of kind TORCHREC. */
struct cJSON;
rec_status rec__plan_from_torchrec(rec_plan **out, const struct cJSON *root, const char *origin, const rec_plan_model *m);

/* Floats of optimizer state a row of w columns keeps under opt. */
static inline int rec__state_floats(rec_sparse_opt_kind opt, int w) {
    return opt == REC_SPARSE_ADAGRAD ? w : opt == REC_SPARSE_ROWWISE_ADAGRAD ? 1 : 0;
}
/* Floats of gradient an owner needs per row of a part of w of E columns: the whole row where
 * the state is row-wise (its mean square runs over all E), else the part's. */
static inline int rec__grad_floats(rec_sparse_opt_kind opt, int w, int E) {
    return opt == REC_SPARSE_ROWWISE_ADAGRAD ? E : w;
}

/* ---- the executor's map (map.c): OPER's "all-in-one" address space -------------------- */

/* One column part of one table as the executor addresses it. For segment g (or hot row h),
 * off: float offset of its first row in its owner's store (replicated: in the replica store,
 * whose rows are E floats), srow: that row's index among its owner's rows (its optimizer
 * state's row). A row is located in O(1): its hot entry, if any, by an open-addressing table
 * (hot_slot, hot_mask + 1 slots, -1 empty); its segment from the one that covers its bucket of
 * 2^seg_shift rows (seg_at), then forward — a binary search of ~1300 hot rows and ~300
 * segments cost OPER's plans 2x the executor's slice work of a row-wise plan. */
typedef struct xpart {
    rec_plan_part pl;
    int w;
    int64_t *seg_off, *seg_srow, *hot_off, *hot_srow;
    int64_t *hot_slot, *seg_at;
    uint64_t hot_mask;
    int seg_shift;
} xpart;

typedef struct xloc {
    int owner;      /* rank or REC_PLAN_EVERY */
    int64_t off;    /* floats into the owner's store (or the replica store) */
    int64_t srow;   /* its state's row */
} xloc;

/* Where every row of a plan lives: each rank's store holds, part after part in plan order, the
 * rows of its segments then its hot rows; the replica store every replicated row. Every rank
 * computes the same map from the plan. */
typedef struct xmap {
    const rec_plan *plan;
    int N, F, E;
    xpart **parts;            /* (F)(C_f) */
    int64_t *floats, *rows;   /* (N) each rank's store: floats, rows */
    int64_t rep_rows;         /* replicated rows */
} xmap;

rec_status rec__xmap_build(xmap *m, const rec_plan *plan);
void rec__xmap_free(xmap *m);

static inline xloc rec__xmap_locate(const xmap *m, int f, int c, int64_t r) {
    const xpart *p = &m->parts[f][c];
    if (p->pl.n_hot)
        for (uint64_t i = rec_mix64((uint64_t)r) & p->hot_mask;; i = (i + 1) & p->hot_mask) {
            const int64_t h = p->hot_slot[i];
            if (h < 0) break;
            if (p->pl.hot_row[h] == r) return (xloc){p->pl.hot_owner[h], p->hot_off[h], p->hot_srow[h]};
        }
    int64_t g = p->seg_at[r >> p->seg_shift];
    while (g + 1 < p->pl.n_seg && p->pl.seg_start[g + 1] <= r) g++;
    const int64_t d = r - p->pl.seg_start[g];
    return (xloc){p->pl.seg_owner[g], p->seg_off[g] + d * p->w, p->seg_srow[g] + d};
}

#endif
