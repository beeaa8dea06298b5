/* `train --offload auto`: FastFlow's profiling (§5.1) and Algorithm 1 (offload.h) for a job.
 *
 * Profiling runs on a copy of the model built from the same config and seed, as FastFlow
 * profiles a deep copy: the model that trains is untouched, so the run trains exactly as it
 * would without profiling. Each measurement takes the data set's first rows in file order,
 * WARM batches to settle and STEPS measured:
 *
 *   Gthp       the copy trained on the first batch over and over (FastFlow's
 *              take(1).cache().repeat(): training with no input cost)
 *   Lthp       the copy trained from the loader, every piece made here
 *   Pcycle     the loader alone, every piece made here: process CPU seconds per row
 *   Rthp(p')   the copy trained from the loader, every piece made by the workers at p'
 *   Ocycle(p') the loader alone at p', all remote: process CPU seconds per row (receiving,
 *              checking and batching the workers' rows, and reading the lines at p'1)
 *
 * The remote metrics are skipped when there is no stall (Algorithm 1 line 3 decides before
 * them, as the paper's short-circuit does). Every metric is kept in the store under its key
 * (Table 2) and a later run with the same keys starts from them.
 *
 * Under mpirun every rank reads and prepares every global batch (dist.h), as one process does,
 * and trains its slice: the copy is the job's own kind of model (sharded, an executor of its
 * own on the job's plan), so that Gthp, Lthp and Rthp are the distributed step's rows/s. The
 * ranks measure together (the copy's steps are collective; each rank's loader makes its own
 * batches), and rank 0's figures — its store's, then its measurements — are broadcast before
 * each decision, so that every rank takes the same branches and the same split.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rectrain/core.h"
#include "rectrain/dist.h"
#include "rectrain/offload.h"
#include "train_impl.h"

enum { WARM = 3, STEPS = 24 };

static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The model profiled: a one-process copy, or under mpirun a sharded one with its executor. */
typedef struct copy {
    rec_model *m;
    rec_exec *x;
} copy;

/* Made from the job's config and seed, so it starts as the model that trains; collective under
 * mpirun (rec_exec_init). */
static rec_status copy_init(const rec_offload_auto_in *in, copy *c) {
    const int B = (int)in->batch;
    if (!in->plan) return rec_model_init(&c->m, in->cfg, B, in->threads);
    REC_TRY(rec_model_init_sharded(&c->m, in->cfg, B, in->threads));
    return rec_exec_init(&c->x, c->m, in->plan, in->batch, in->alltoall);
}

static rec_status copy_step(copy *c, const rec_batch *b) {
    double loss;
    return c->x ? rec_exec_train_step(c->x, b, &loss) : rec_model_train_step(c->m, b, &loss);
}

/* After a failure the executor's window is left (freeing it is collective, and the other ranks
 * may not come): the job ends anyway. */
static void copy_free(copy *c, rec_status s) {
    if (!s) rec_exec_free(c->x);
    rec_model_free(c->m);
    c->m = NULL, c->x = NULL;
}

/* Rows/s of the last `steps` of WARM + steps batches from the loader (training the copy c on
 * each when c != NULL), and process CPU seconds per row over them. */
static rec_status measure(rec_dataset *d, copy *c, int64_t B, int64_t steps, double *thp, double *cpu) {
    rec_loader *l = NULL;
    REC_TRY(rec_loader_open(&l, d, 0, (WARM + steps) * B, B, 4));
    const rec_batch *b;
    double t0 = 0, c0 = 0;
    int64_t k = 0, rows = 0;
    rec_status s;
    while (!(s = rec_loader_next(l, &b)) && b) {
        if (k++ == WARM) t0 = rec_now(), c0 = cpu_seconds(), rows = 0;
        if (c && (s = copy_step(c, b))) break;
        rows += b->n;
    }
    const double dt = rec_now() - t0, dc = cpu_seconds() - c0;
    rec_loader_close(l);
    REC_TRY(s);
    *thp = dt > 0 ? rows / dt : 0;
    if (cpu) *cpu = rows > 0 ? dc / rows : 0;
    return REC_OK;
}

/* Gthp: the copy trained on the data set's first batch again and again. */
static rec_status measure_gthp(rec_dataset *d, copy *c, int64_t B, int64_t steps, double *thp) {
    rec_loader *l = NULL;
    rec_batch one = {0};
    const rec_batch *b = NULL;
    rec_status s = rec_loader_open(&l, d, 0, B, B, 2);
    if (!s) s = rec_loader_next(l, &b);
    if (!s && b) s = rec_batch_init(&one, B, b->n_dense, b->n_sparse, 1);
    if (!s && b) s = rec_batch_append_rows(&one, b, 0, b->n);
    rec_loader_close(l);
    double t0 = 0;
    for (int64_t k = 0; !s && k < WARM + steps; k++) {
        if (k == WARM) t0 = rec_now();
        s = copy_step(c, &one);
    }
    *thp = s ? 0 : steps * one.n / (rec_now() - t0);
    rec_batch_free(&one);
    return s;
}

/* Under mpirun: rank 0's metrics (and what its store held) on every rank. */
static rec_status agree(const rec_offload_auto_in *in, rec_offload_metrics *m, int *found) {
    if (!in->plan) return REC_OK;
    REC_TRY(rec_dist_bcast(m, sizeof *m));
    return found ? rec_dist_bcast(found, sizeof *found) : REC_OK;
}

rec_status rec__offload_auto(const rec_offload_auto_in *in, rec_offload_metrics *m, rec_offload_decision *dec,
                             int *reused) {
    memset(m, 0, sizeof *m);
    *reused = 0;
    int found = 0;
    const int writer = in->store && in->rank == 0; /* under mpirun, rank 0 keeps the store */
    if (writer && !in->again) REC_TRY(rec_offload_store_load(in->store, &in->keys, m, &found));
    REC_TRY(agree(in, m, &found));
    const int64_t B = in->batch;
    int64_t steps = in->rows / B - WARM;
    if (steps > STEPS) steps = STEPS;
    if ((found & 3) != 3 && steps < 2)
        return rec_errorf(REC_EINVAL, "--offload auto profiles %d batches of %lld rows, and the data holds %lld rows: "
                          "give a ratio (--offload 0.5) or more data", WARM + 2, (long long)B, (long long)in->rows);
    copy c = {0};
    rec_status s = REC_OK;
    const int point = rec_offload_point(in->x);
    const double ratio = rec_offload_ratio(in->x);
    if ((found & 3) != 3) s = copy_init(in, &c);
    if (!s && !(found & 1)) s = measure_gthp(in->d, &c, B, steps, &m->gthp);
    if (!s && !(found & 2)) {
        rec_offload_set(in->x, REC_OFFLOAD_P3, 0);
        double unused;
        s = measure(in->d, &c, B, steps, &m->lthp, &unused);
        if (!s) s = measure(in->d, NULL, B, steps, &unused, &m->pcycle);
    }
    if (!s) s = agree(in, m, NULL); /* the branch below is taken by all ranks or none */
    rec_offload_decide(m, in->threshold, dec);
    if (!s && dec->offload && !(found & 4)) {
        if (!c.m) s = copy_init(in, &c);
        for (int p = REC_OFFLOAD_P1; !s && p <= REC_OFFLOAD_P3; p++) {
            rec_offload_set(in->x, p, 1);
            rec_offload_stats before, after;
            rec_offload_get_stats(in->x, &before);
            double unused;
            s = measure(in->d, &c, B, steps, &m->rthp[p], &unused);
            if (!s) s = measure(in->d, NULL, B, steps, &unused, &m->ocycle[p]);
            rec_offload_get_stats(in->x, &after);
            /* a point whose pieces were made here (workers down, or unable) measured nothing remote */
            if (after.pieces_remote == before.pieces_remote || after.redone > before.redone) m->rthp[p] = 0;
        }
        m->have_remote = 1;
        if (!s) s = agree(in, m, NULL);
    }
    copy_free(&c, s);
    rec_offload_set(in->x, point, ratio);
    REC_TRY(s);
    rec_offload_decide(m, in->threshold, dec);
    *reused = found;
    if (writer && (found & 7) != 7 && (m->have_remote || !dec->offload))
        REC_TRY(rec_offload_store_save(in->store, &in->keys, m));
    return REC_OK;
}
