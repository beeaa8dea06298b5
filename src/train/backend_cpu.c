/* The cpu backend (backend.h): one process trains the host model itself (nn/), the reference
 * every other backend is checked against (tests/test_backend.c). */
#include "backend_impl.h"
#include "rectrain/ckpt.h"
#include "rectrain/dist.h"

static rec_status cpu_load(rec_backend *be, const char *path, rec_ckpt_meta *meta) {
    return rec_dist_ckpt_load(path, be->o.model, meta); /* a sharded save is gathered */
}

static rec_status cpu_step(rec_backend *be, const rec_batch *b, const rec_staged_batch *sb, double *loss,
                           int64_t *loss_step) {
    (void)sb;
    REC_TRY(rec_model_train_step(be->o.model, b, loss));
    *loss_step = rec_model_steps(be->o.model);
    return REC_OK;
}

static rec_status cpu_evaluate(rec_backend *be, rec_dataset *d, int64_t row0, int64_t row1, int64_t batch,
                               rec_metrics *out) {
    return rec_evaluate(be->o.model, d, row0, row1, batch, out);
}

static rec_status cpu_save(rec_backend *be, const char *path, const rec_ckpt_meta *meta) {
    REC_TRY(rec_ckpt_save(path, be->o.model, meta));
    rec_dist_prune_shards(path, 0); /* an earlier sharded save's files, now replaced */
    return REC_OK;
}

static rec_status cpu_report(rec_backend *be, rec_train_report *rep) {
    rec__host_profile(be, rep);
    return REC_OK;
}

static const rec_backend_i CPU = {
    .name = "cpu", .load = cpu_load, .start = rec__host_start, .step = cpu_step, .drain = rec__sync_drain,
    .stop_vote = rec__no_stop_vote, .evaluate = cpu_evaluate, .download = rec__host_download, .whole = rec__host_whole,
    .save = cpu_save,
    .report = cpu_report, .end = NULL, .stager = NULL, .free = NULL,
};

rec_status rec_backend_cpu(rec_backend *be) {
    be->i = &CPU;
    return REC_OK;
}

/* What the cuda backend shares with this one: a checkpoint of the host model. */
rec_status rec__host_load(rec_backend *be, const char *path, rec_ckpt_meta *meta) { return cpu_load(be, path, meta); }
rec_status rec__host_save(rec_backend *be, const char *path, const rec_ckpt_meta *meta) {
    return cpu_save(be, path, meta);
}
