/* Internal to the backends (backend.h: src/train/backend_*.c, src/cache/cache_trainer.c): what
 * they share. */
#ifndef REC_BACKEND_IMPL_H
#define REC_BACKEND_IMPL_H

#include "rectrain/backend.h"
#include "rectrain/ckpt.h"

enum { REC_LOADER_DEPTH = 3 }; /* batches a loader prepares ahead */

/* The host model's start: its step timing on or off, and the bf16 line of the log (cpu, mpi). */
rec_status rec__host_start(rec_backend *be);
/* The host model's step timing into rep->device_ms, when asked for (cpu, mpi). */
void rec__host_profile(rec_backend *be, rec_train_report *rep);
/* A checkpoint of the host model: loaded (a sharded save gathered), saved (cpu, cuda). */
rec_status rec__host_load(rec_backend *be, const char *path, struct rec_ckpt_meta *meta);
rec_status rec__host_save(rec_backend *be, const char *path, const struct rec_ckpt_meta *meta);
/* A synchronous backend's drain: nothing in flight, no loss (0). */
rec_status rec__sync_drain(rec_backend *be, double *loss, int64_t *loss_step);
/* The host model is the one trained (cpu; mpi's dense layers): nothing to copy back. */
rec_status rec__host_download(rec_backend *be);
rec_status rec__host_whole(rec_backend *be, rec_model **out, int *owned);
/* One process decides alone: *any = mine. */
rec_status rec__no_stop_vote(rec_backend *be, int mine, int *any);

/* The logits of a batch from whichever model scores it, and the metrics of rows [row0, row1)
 * of d scored so (eval.c). */
typedef rec_status (*rec__score_fn)(void *ctx, const rec_batch *b, const float **logits);
rec_status rec__eval_rows(rec__score_fn score, void *ctx, rec_dataset *d, int64_t row0, int64_t row1, int64_t batch,
                          rec_metrics *out);

#endif
