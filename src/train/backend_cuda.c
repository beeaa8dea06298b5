/* The cuda backend (backend.h): the model trains on an NVIDIA GPU (cuda.h), its host model a
 * mirror refreshed by download. Steps are asynchronous: each hands back the loss of the step
 * before, and drain the last one's. With the training data's ops on the GPU's executors, RAP
 * co-runs them beside the step's stages (rap.c). */
#include <stdlib.h>
#include <string.h>

#include "backend_impl.h"
#include "rectrain/ckpt.h"
#include "rectrain/cuda.h"
#include "train_impl.h"

typedef struct cuda_ctx {
    rec_cuda_model *gpu;
    float *logits;       /* (batch) host: a batch's logits during evaluation */
    rec_rap *rap;        /* the co-run of the loader's kernels, or NULL */
    char corun_key[512]; /* what its capacities are measured on (--corun-capacity) */
} cuda_ctx;

static cuda_ctx *ctx_of(rec_backend *be) { return be->ctx; }

/* --plan FILE: the GPU engine's plan (`bench embed --device cuda --plan-out`), refused with the
 * JSON path when it was tuned for other tables. */
static rec_status load_gpu_plan(rec_backend *be) {
    const rec_backend_opts *o = &be->o;
    char *text;
    size_t len;
    REC_TRY(rec_read_file(o->gpu_plan, "GPU embedding plan", (size_t)64 << 20, &text, &len));
    const int F = o->cfg->n_sparse;
    int *dims = malloc(sizeof(int) * (size_t)F), *sched = malloc(sizeof(int) * (size_t)F), occ = 0;
    rec_status s = dims && sched ? REC_OK : rec_errorf(REC_ENOMEM, "out of memory reading %s", o->gpu_plan);
    for (int f = 0; !s && f < F; f++) dims[f] = o->cfg->emb_dim;
    if (!s) s = rec_cuda_plan_parse(text, len, o->gpu_plan, F, o->cfg->table_rows, dims, sched, &occ);
    if (!s) s = rec_cuda_embed_set_plan(rec_cuda_model_embed(ctx_of(be)->gpu), sched, occ);
    if (!s && o->log) fprintf(o->log, "train: GPU embedding plan from %s (occupancy %d)\n", o->gpu_plan, occ);
    free(text), free(dims), free(sched);
    return s;
}

/* RAP's co-run (rap.c): the loader's GPU executors placed beside the training's stages, where
 * the spec's ops run on the GPU executor next to a GPU's training. REC_CUDA_CORUN=off keeps
 * them ungated on their low-priority streams (a diagnostic: CUDA streams' co-running). */
static rec_status start_corun(rec_backend *be) {
    const rec_backend_opts *o = &be->o;
    cuda_ctx *c = ctx_of(be);
    const rec_spec *spec = o->train ? rec_dataset_spec(o->train) : NULL;
    const char *env = getenv("REC_CUDA_CORUN");
    if (!o->corun || !spec || (env && !strcmp(env, "off"))) return REC_OK;
    /* what the capacities were measured on: the GPU, the model's shape, the batch */
    char dev[256];
    rec_cuda_probe(dev, sizeof dev);
    int64_t rows = 0;
    for (int f = 0; o->cfg->table_rows && f < o->cfg->n_sparse; f++) rows += o->cfg->table_rows[f];
    const int64_t B = o->cfg->batch_size;
    snprintf(c->corun_key, sizeof c->corun_key, "%s; %s: %zu dense parameters, %lld table rows of dim %d, batch %lld, %s",
             dev, o->cfg->name, rec_model_n_dense_params(o->model), (long long)rows, o->cfg->emb_dim, (long long)B,
             o->cfg->precision == REC_PRECISION_BF16 ? "bf16" : "fp32");
    const rec_rap_gpu gpu = rec_rap_cuda(c->gpu);
    REC_TRY(rec_rap_new(&c->rap, &gpu, spec, B, o->corun_capacity, c->corun_key, o->log));
    return rec_dataset_set_corun(o->train, rec_rap_corun(c->rap));
}

/* After --resume has loaded the host model: the GPU's copy of it. */
static rec_status cuda_start(rec_backend *be) {
    const rec_backend_opts *o = &be->o;
    cuda_ctx *c = ctx_of(be);
    const int64_t B = o->cfg->batch_size;
    REC_TRY(rec_cuda_model_init(&c->gpu, o->model, (int)B, o->cfg->precision));
    if (o->gpu_plan) REC_TRY(load_gpu_plan(be));
    REC_TRY(rec_alloc((void **)&c->logits, sizeof(float) * (size_t)B, "logits"));
    rec_cuda_model_profile(c->gpu, o->device_profile);
    if (o->log) {
        char dev[256];
        rec_cuda_probe(dev, sizeof dev);
        fprintf(o->log, "train: on the GPU, %s, %s\n", dev,
                o->cfg->precision == REC_PRECISION_BF16 ? "bf16 products" : "fp32");
    }
    return start_corun(be);
}

/* The GPU's step number of a loss (-1: none) as the table counts it (0: none). */
static int64_t one_based(int64_t step) { return step >= 0 ? step + 1 : 0; }

static rec_status cuda_step(rec_backend *be, const rec_batch *b, const rec_staged_batch *sb, double *loss,
                            int64_t *loss_step) {
    cuda_ctx *c = ctx_of(be);
    int64_t prev = -1;
    rec_status s = c->rap ? rec_rap_before_step(c->rap) : REC_OK;
    if (!s) s = sb ? rec_cuda_model_train_step_staged(c->gpu, sb, loss, &prev) : rec_cuda_model_train_step(c->gpu, b, loss, &prev);
    if (!s && c->rap) s = rec_rap_after_step(c->rap);
    rec_model_set_steps(be->o.model, rec_cuda_model_steps(c->gpu));
    *loss_step = one_based(prev);
    return s;
}

static rec_status cuda_drain(rec_backend *be, double *loss, int64_t *loss_step) {
    int64_t step;
    REC_TRY(rec_cuda_model_finish(ctx_of(be)->gpu, loss, &step));
    *loss_step = one_based(step);
    return REC_OK;
}

static rec_status score_gpu(void *ctx, const rec_batch *b, const float **logits) {
    cuda_ctx *c = ctx;
    *logits = c->logits;
    return rec_cuda_model_forward(c->gpu, b, c->logits);
}

static rec_status cuda_evaluate(rec_backend *be, rec_dataset *d, int64_t row0, int64_t row1, int64_t batch,
                                rec_metrics *out) {
    return rec__eval_rows(score_gpu, ctx_of(be), d, row0, row1, batch, out);
}

static rec_status cuda_download(rec_backend *be) { return rec_cuda_model_download(ctx_of(be)->gpu, be->o.model); }

static rec_status cuda_save(rec_backend *be, const char *path, const rec_ckpt_meta *meta) {
    REC_TRY(cuda_download(be));
    return rec__host_save(be, path, meta);
}

static rec_status cuda_report(rec_backend *be, rec_train_report *rep) {
    cuda_ctx *c = ctx_of(be);
    if (c->rap) rec_rap_report(c->rap, &rep->corun), rep->has_corun = 1;
    rep->device_steps = rec_cuda_model_profile_read(c->gpu, rep->device_ms);
    rec_cuda_model_host_read(c->gpu, rep->host_ms);
    return REC_OK;
}

/* A shuffled data set's windows staged on the GPU, each batch gathered there (cuda.h);
 * REC_CUDA_INPUT=host gathers and packs them on the host instead. */
static rec_status cuda_stager(rec_backend *be, int slots, int64_t window, const char *origin, rec_stager *out) {
    const char *input = getenv("REC_CUDA_INPUT");
    FILE *log = be->o.log;
    if (input && !strcmp(input, "host")) return REC_EUNSUPPORTED;
    if (slots > REC_CUDA_STAGE_SLOTS) {
        if (log)
            fprintf(log, "train: a batch of %lld rows spans more shuffle windows than the GPU stages at once (%d): its "
                    "rows are gathered and packed on the host\n", (long long)be->o.cfg->batch_size, REC_CUDA_STAGE_SLOTS - 2);
        return REC_EUNSUPPORTED;
    }
    REC_TRY(rec_cuda_model_stager(ctx_of(be)->gpu, slots, window, origin, out));
    if (log)
        fprintf(log, "train: batches gathered on the GPU from shuffle windows of %lld rows, each copied once (%d "
                "slots)\n", (long long)window, slots);
    return REC_OK;
}

/* The co-run after the loaders, whose executors follow its plan (the caller closes them
 * first), then the GPU model. */
static void cuda_free(rec_backend *be) {
    cuda_ctx *c = ctx_of(be);
    if (!c) return;
    rec_rap_free(c->rap);
    rec_cuda_model_free(c->gpu);
    rec_free(c->logits);
    free(c);
    be->ctx = NULL;
}

static const rec_backend_i CUDA = {
    .name = "cuda", .load = rec__host_load, .start = cuda_start, .step = cuda_step, .drain = cuda_drain,
    .stop_vote = rec__no_stop_vote, .evaluate = cuda_evaluate, .download = cuda_download, .whole = rec__host_whole,
    .save = cuda_save,
    .report = cuda_report, .end = NULL, .stager = cuda_stager, .free = cuda_free,
};

rec_status rec_backend_cuda(rec_backend *be) {
    be->ctx = calloc(1, sizeof(cuda_ctx));
    if (!be->ctx) return rec_errorf(REC_ENOMEM, "out of memory for the GPU backend");
    be->i = &CUDA;
    return REC_OK;
}
