/* The models `rectrain bench embed` runs (CPU and GPU alike): the Kaggle DLRM's tables and
 * synthetic heterogeneous models shaped like RecFlex's models A-E (Table I of the paper, digest
 * 001-RecFlex-digest.md §4.1: the artifact's data configs and table shapes), their batches, and
 * the dump the PyTorch peer reads. */
#ifndef RECTRAIN_BENCH_EMBED_MODELS_H
#define RECTRAIN_BENCH_EMBED_MODELS_H

#include <stdint.h>

#include "rectrain/batch.h"
#include "rectrain/core.h"

/* One group of features as RecFlex's data_config lines describe them (digest §4.1). */
typedef enum { ONE_HOT, MULTI_HOT, STATIC, ONE_SIDE } feat_kind;
typedef struct feat_line {
    int count;
    feat_kind kind;
    double mean, std, max, cov;  /* ONE_HOT: cov in mean; STATIC: fixed pooling in mean */
} feat_line;

typedef struct model_spec {
    const char *name;
    int64_t row_lo, row_hi;
    int dim_hist[8][2];  /* (dim, count), count 0 ends */
    feat_line lines[24];
} model_spec;

/* A model to bench: per table rows, dim and its feature line (pooling law). */
typedef struct bmodel {
    char name[16];
    int F, B;
    int64_t *rows;
    int *dims;
    feat_line *feat;   /* (F) */
} bmodel;

void bmodel_free(bmodel *m);
/* Builds model `name` (kaggle or A-E): dims assigned to features by a seeded shuffle of the
 * dim histogram, rows uniform in the model's range; -1 for an unknown name. */
int bmodel_make(bmodel *m, const char *name, int B, double kaggle_scale, rec_rng *rng);
/* A batch for m with RecFlex's popularity profile; ids 32-bit where the table allows, or all
 * 64-bit when `wide`; every id below hit_ids when hit_ids > 0. */
rec_status make_batch(rec_batch *b, const bmodel *m, rec_rng *r, int wide, int64_t hit_ids);
/* Writes DIR/model.json, DIR/batches.bin and DIR/dout.bin for dev/torch_embed.py (format in
 * bench_embed.c); -1 on an I/O error. */
/* The files bmodel_dump writes in its folder, NULL-ended (the output guard, core.h). */
extern const char *const bmodel_dump_files[];
int bmodel_dump(const char *dir, const bmodel *m, const rec_batch *b, int nb, const float *dout, int W, float lr);

#endif
