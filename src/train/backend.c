/* Choosing a training backend (backend.h), and what the CPU-model backends share. */
#include <stdlib.h>

#include "backend_impl.h"
#include "rectrain/nn.h"

rec_status rec_backend_new(rec_backend **out, const rec_backend_opts *o) {
    *out = NULL;
    rec_backend *be = calloc(1, sizeof *be);
    if (!be) return rec_errorf(REC_ENOMEM, "out of memory for the training backend");
    be->o = *o;
    const rec_status s = o->cache ? rec_backend_cache(be)
                         : o->exec ? rec_backend_mpi(be)
                         : o->device == REC_DEVICE_CUDA ? rec_backend_cuda(be)
                                                       : rec_backend_cpu(be);
    if (s) {
        free(be);
        return s;
    }
    *out = be;
    return REC_OK;
}

void rec_backend_free(rec_backend *be) {
    if (!be) return;
    if (be->i && be->i->free) be->i->free(be);
    free(be);
}

rec_status rec__host_start(rec_backend *be) {
    const rec_backend_opts *o = &be->o;
    rec_model_profile(o->model, o->device_profile);
    if (o->log && o->cfg->precision == REC_PRECISION_BF16)
        fprintf(o->log, "train: bf16 products, %s (oneDNN ISA %s)\n",
                rec_model_bf16_native(o->model) ? "on oneDNN's bf16 kernels"
                                                : "emulated on the fp32 kernels (oneDNN's bf16 ones are used on AMX)",
                rec_dnn_isa());
    return REC_OK;
}

void rec__host_profile(rec_backend *be, rec_train_report *rep) {
    if (!be->o.device_profile) return;
    double sec[REC_MODEL_N_PARTS];
    rep->device_steps = rec_model_profile_read(be->o.model, sec);
    for (int k = 0; k < REC_MODEL_N_PARTS; k++)
        rep->device_ms[k] = rep->device_steps ? 1e3 * sec[k] / (double)rep->device_steps : 0;
}

rec_status rec__sync_drain(rec_backend *be, double *loss, int64_t *loss_step) {
    (void)be;
    *loss = 0;
    *loss_step = 0; /* every step's loss came back with it */
    return REC_OK;
}

rec_status rec__host_download(rec_backend *be) {
    (void)be;
    return REC_OK;
}

rec_status rec__host_whole(rec_backend *be, rec_model **out, int *owned) {
    *out = be->o.model;
    *owned = 0;
    return REC_OK;
}

rec_status rec__no_stop_vote(rec_backend *be, int mine, int *any) {
    (void)be;
    *any = mine;
    return REC_OK;
}
