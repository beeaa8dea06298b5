/* The mpi backend (backend.h): under mpirun, the sharded executor (dist.h) steps; the host
 * model holds the dense layers (its tables are the ranks' shards). */
#include <string.h>

#include "backend_impl.h"
#include "rectrain/ckpt.h"
#include "rectrain/dist.h"

static rec_status mpi_load(rec_backend *be, const char *path, rec_ckpt_meta *meta) {
    return rec_exec_load(be->o.exec, path, meta); /* one process's save too, sharded here */
}

static rec_status mpi_step(rec_backend *be, const rec_batch *b, const rec_staged_batch *sb, double *loss,
                           int64_t *loss_step) {
    (void)sb;
    REC_TRY(rec_exec_train_step(be->o.exec, b, loss));
    *loss_step = rec_model_steps(be->o.model);
    return REC_OK;
}

static rec_status mpi_stop_vote(rec_backend *be, int mine, int *any) {
    (void)be;
    return rec_dist_any(mine, any);
}

/* Every rank its slice of each batch, the logits gathered on rank 0, which alone has the
 * metrics (the others' are zero). */
static rec_status mpi_evaluate(rec_backend *be, rec_dataset *d, int64_t row0, int64_t row1, int64_t batch,
                               rec_metrics *out) {
    const int rank = be->o.rank;
    memset(out, 0, sizeof *out);
    rec_eval_acc *acc = NULL;
    rec_loader *l = NULL;
    float *logits = NULL;
    rec_status s = rec_eval_acc_init(&acc, rank == 0 ? row1 - row0 : 1);
    if (!s) s = rec_alloc((void **)&logits, sizeof(float) * (size_t)batch, "logits");
    if (!s) s = rec_loader_open(&l, d, row0, row1, batch, REC_LOADER_DEPTH);
    const rec_batch *b;
    while (!s && !(s = rec_loader_next(l, &b)) && b) {
        s = rec_exec_forward(be->o.exec, b, logits);
        if (!s && rank == 0) s = rec_eval_acc_add(acc, b->n, logits, b->label);
    }
    if (!s && rank == 0) s = rec_eval_acc_finish(acc, out);
    rec_loader_close(l);
    rec_free(logits);
    rec_eval_acc_free(acc);
    return s;
}

/* Rank 0 gathers every rank's rows into a model built whole (dist.h, rec_exec_gather). */
static rec_status mpi_whole(rec_backend *be, rec_model **out, int *owned) {
    rec_model *m = NULL;
    rec_status s = be->o.rank == 0 ? rec_model_init(&m, be->o.cfg, 1, 1) : REC_OK;
    char why[1024] = "";
    if (s) snprintf(why, sizeof why, "%s", rec_errmsg());
    /* every rank joins the gather, which tells them all whether rank 0 could hold the model */
    const rec_status g = rec_exec_gather(be->o.exec, m);
    if (s) rec_error_set_msg(why);
    else s = g;
    if (s) {
        rec_model_free(m);
        return s;
    }
    *out = m;
    *owned = 1;
    return REC_OK;
}

static rec_status mpi_save(rec_backend *be, const char *path, const rec_ckpt_meta *meta) {
    return rec_exec_save(be->o.exec, path, meta); /* every rank its rows, rank 0 the rest */
}

static rec_status mpi_report(rec_backend *be, rec_train_report *rep) {
    rec__host_profile(be, rep);
    return REC_OK;
}

/* A collective: every rank gets here, or has ended the job. */
static rec_status mpi_end(rec_backend *be, rec_train_report *rep) {
    rec_exec_get_stats(be->o.exec, &rep->dist);
    return rec_dist_check_same(rec_exec_dense_digest(be->o.exec), "dense parameters after training");
}

static const rec_backend_i MPI = {
    .name = "mpi", .load = mpi_load, .start = rec__host_start, .step = mpi_step, .drain = rec__sync_drain,
    .stop_vote = mpi_stop_vote, .evaluate = mpi_evaluate, .download = rec__host_download, .whole = mpi_whole,
    .save = mpi_save,
    .report = mpi_report, .end = mpi_end, .stager = NULL, .free = NULL,
};

rec_status rec_backend_mpi(rec_backend *be) {
    be->i = &MPI;
    return REC_OK;
}
