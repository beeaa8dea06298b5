/* The GPU engine's entry points in a build without nvcc (cuda.h): each says so. */
#ifndef REC_HAVE_CUDA
#include <string.h>

#include "../prep/gexec.h"
#include "rectrain/cuda.h"

#define ABSENT                                                                                                   \
    rec_errorf(REC_EUNSUPPORTED, "this rectrain was built without the GPU engine (no nvcc when it was configured, "   \
               "or REC_WITH_CUDA=OFF): install the CUDA toolkit (nvcc on PATH) and rebuild with make")

rec_status rec_cuda_probe(char *name, size_t cap) {
    if (cap) name[0] = '\0';
    return ABSENT;
}
rec_status rec_cuda_embed_init(rec_cuda_embed **out, const rec_embed_config *cfg, const rec_embed *src) {
    *out = NULL;
    return ABSENT;
}
void rec_cuda_embed_free(rec_cuda_embed *g) {}
rec_status rec_cuda_embed_download(rec_cuda_embed *g, rec_embed *dst) { return ABSENT; }
rec_status rec_cuda_alloc(void **dptr, size_t bytes, const char *what) {
    *dptr = NULL;
    return ABSENT;
}
void rec_cuda_free(void *dptr) {}
rec_status rec_cuda_upload(void *dst, const void *src, size_t bytes) { return ABSENT; }
rec_status rec_cuda_download(void *dst, const void *src, size_t bytes) { return ABSENT; }
rec_status rec_cuda_fill(float *d, size_t n, float x) { return ABSENT; }
rec_status rec_cuda_batch_new(rec_cuda_batch **out) {
    *out = NULL;
    return ABSENT;
}
void rec_cuda_batch_free(rec_cuda_batch *d) {}
rec_status rec_cuda_batch_load(rec_cuda_embed *g, rec_cuda_batch *d, const rec_batch *b, int first_feature) { return ABSENT; }
rec_status rec_cuda_embed_forward(rec_cuda_embed *g, const rec_cuda_batch *d, float *out) { return ABSENT; }
rec_status rec_cuda_embed_backward_update(rec_cuda_embed *g, const rec_cuda_batch *d, const float *dout, float lr) {
    return ABSENT;
}
rec_status rec_cuda_embed_sync(rec_cuda_embed *g) { return ABSENT; }
rec_status rec_cuda_embed_set_plan(rec_cuda_embed *g, const int *sched, int occupancy) { return ABSENT; }
void rec_cuda_embed_get_plan(const rec_cuda_embed *g, int *sched, int *occupancy) {}
void rec_cuda_embed_set_uniform(rec_cuda_embed *g, int s) {}
void rec_cuda_embed_set_default(rec_cuda_embed *g) {}
rec_status rec_cuda_embed_time(rec_cuda_embed *g, rec_cuda_batch *const *d, int n, float *out, const float *dout,
                               float lr, int what, int reps, double *sec) {
    return ABSENT;
}
rec_status rec_cuda_embed_tune(rec_cuda_embed *g, rec_cuda_batch *const *d, int n, float *out, int reps,
                               rec_cuda_tune_report *report) {
    return ABSENT;
}
rec_status rec_cuda_copy_gbps(size_t bytes, double *gbps) { return ABSENT; }
rec_status rec_cuda_model_init(rec_cuda_model **out, rec_model *m, int max_batch, int precision) {
    *out = NULL;
    return ABSENT;
}
void rec_cuda_model_free(rec_cuda_model *g) {}
rec_status rec_cuda_model_train_step(rec_cuda_model *g, const rec_batch *b, double *prev_loss, int64_t *prev_step) {
    return ABSENT;
}
rec_status rec_cuda_model_stager(rec_cuda_model *g, int n_slots, int64_t slot_rows, const char *what, rec_stager *out) {
    return ABSENT;
}
rec_status rec_cuda_model_train_step_staged(rec_cuda_model *g, const rec_staged_batch *b, double *prev_loss,
                                            int64_t *prev_step) {
    return ABSENT;
}
rec_status rec_cuda_model_finish(rec_cuda_model *g, double *loss, int64_t *step) { return ABSENT; }
rec_status rec_cuda_model_forward(rec_cuda_model *g, const rec_batch *b, float *logits) { return ABSENT; }
rec_status rec_cuda_model_download(rec_cuda_model *g, rec_model *m) { return ABSENT; }
int64_t rec_cuda_model_steps(const rec_cuda_model *g) { return 0; }
rec_cuda_embed *rec_cuda_model_embed(rec_cuda_model *g) { return NULL; }
const char *rec_cuda_part_name(int k) { return "?"; }
void rec_cuda_model_profile(rec_cuda_model *g, int on) {}
int64_t rec_cuda_model_profile_read(const rec_cuda_model *g, double *ms) { return 0; }
int64_t rec_cuda_model_host_read(const rec_cuda_model *g, double *ms) { return 0; }
rec_status rec_cuda_model_corun(rec_cuda_model *g, void **events) { return ABSENT; }
rec_status rec_cuda_model_probe(rec_cuda_model *g, int stage, double ms) { return ABSENT; }
int rec_cuda_model_stage_times(rec_cuda_model *g, double *ms, int *probe_stage) { return 0; }
rec_status rec_gback_cuda(rec_gback *out) {
    memset(out, 0, sizeof *out);
    return ABSENT;
}
void rec_gback_cuda_free(rec_gback *b) {}
#endif
