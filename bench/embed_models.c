/* The models of `rectrain bench embed` (embed_models.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "embed_models.h"

/* D and E share one data set (digest §4.1): like A but the 5th multi-hot line never occurs and
 * the last two lines are multi-hot. */
#define DE_LINES                                                                                            \
    {{500, ONE_HOT, 1.0, 0, 0, 1.0},                                                                         \
     {50, MULTI_HOT, 10, 10, 50, 0.8}, {50, MULTI_HOT, 50, 10, 100, 0.8}, {50, MULTI_HOT, 50, 10, 100, 0.3}, \
     {50, MULTI_HOT, 100, 50, 200, 0.8}, {50, MULTI_HOT, 100, 100, 1024, 0.0},                              \
     {50, STATIC, 10, 0, 0, 1.0}, {50, STATIC, 50, 0, 0, 1.0}, {50, STATIC, 50, 0, 0, 0.8},                  \
     {50, MULTI_HOT, 100, 100, 500, 0.3}, {50, MULTI_HOT, 100, 100, 1024, 0.5}}

/* The artifact's configs (examples/models/ * /data_config.txt and table_config.txt). */
static const model_spec SPECS[] = {
    {"A", 1024, 16384, {{4, 283}, {8, 266}, {16, 195}, {32, 91}, {64, 88}, {128, 77}},
     {{500, ONE_HOT, 1.0, 0, 0, 1.0},
      {50, MULTI_HOT, 10, 10, 50, 0.8}, {50, MULTI_HOT, 50, 10, 100, 0.8}, {50, MULTI_HOT, 50, 10, 100, 0.3},
      {50, MULTI_HOT, 100, 50, 200, 0.8}, {50, MULTI_HOT, 100, 100, 500, 0.3},
      {50, STATIC, 10, 0, 0, 1.0}, {50, STATIC, 50, 0, 0, 1.0}, {50, STATIC, 50, 0, 0, 0.8},
      {50, ONE_SIDE, 100, 50, 0, 0.5}, {50, ONE_SIDE, 200, 100, 0, 0.3}}},
    {"B", 1024, 4096, {{4, 366}, {8, 408}, {16, 212}, {32, 99}, {64, 63}, {128, 52}},
     {{1000, ONE_HOT, 1.0, 0, 0, 1.0}, {100, MULTI_HOT, 20, 10, 100, 0.8}, {100, MULTI_HOT, 20, 50, 100, 0.5}}},
    {"C", 4096, 16384, {{4, 154}, {8, 189}, {16, 166}, {32, 112}, {64, 101}, {128, 78}},
     {{100, STATIC, 10, 0, 0, 1.0}, {100, STATIC, 20, 0, 0, 1.0}, {100, STATIC, 50, 0, 0, 0.3},
      {100, MULTI_HOT, 10, 10, 50, 0.8}, {100, MULTI_HOT, 50, 10, 100, 0.8}, {100, MULTI_HOT, 50, 10, 100, 0.3},
      {100, ONE_SIDE, 10, 20, 0, 0.5}, {100, ONE_SIDE, 50, 50, 0, 0.2}}},
    {"D", 1024, 4096, {{8, 1000}}, DE_LINES},
    {"E", 1024, 4096, {{32, 1000}}, DE_LINES},
};

static const int64_t KAGGLE_ROWS[26] = {1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194,
                                        27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572};

void bmodel_free(bmodel *m) {
    free(m->rows), free(m->dims), free(m->feat);
    memset(m, 0, sizeof *m);
}

/* Builds model `name` (kaggle or A-E): dims assigned to features by a seeded shuffle of the
 * dim histogram, rows uniform in the model's range. */
int bmodel_make(bmodel *m, const char *name, int B, double kaggle_scale, rec_rng *rng) {
    memset(m, 0, sizeof *m);
    snprintf(m->name, sizeof m->name, "%s", name);
    m->B = B;
    if (!strcmp(name, "kaggle")) {
        m->F = 26;
        m->rows = malloc(26 * sizeof(int64_t)), m->dims = malloc(26 * sizeof(int)), m->feat = malloc(26 * sizeof(feat_line));
        for (int f = 0; f < 26; f++) {
            const int64_t r = (int64_t)llround(KAGGLE_ROWS[f] * kaggle_scale);
            m->rows[f] = r < 2 ? 2 : r, m->dims[f] = 16;
            m->feat[f] = (feat_line){1, ONE_HOT, 1.0, 0, 0, 1.0};
        }
        return 0;
    }
    const model_spec *s = NULL;
    for (size_t i = 0; i < sizeof SPECS / sizeof SPECS[0]; i++)
        if (!strcmp(SPECS[i].name, name)) s = &SPECS[i];
    if (!s) return -1;
    for (int i = 0; s->lines[i].count; i++) m->F += s->lines[i].count;
    m->rows = malloc((size_t)m->F * sizeof(int64_t)), m->dims = malloc((size_t)m->F * sizeof(int));
    m->feat = malloc((size_t)m->F * sizeof(feat_line));
    int f = 0;
    for (int i = 0; s->lines[i].count; i++)
        for (int k = 0; k < s->lines[i].count; k++) m->feat[f++] = s->lines[i];
    f = 0;
    for (int i = 0; s->dim_hist[i][1]; i++)
        for (int k = 0; k < s->dim_hist[i][1] && f < m->F; k++) m->dims[f++] = s->dim_hist[i][0];
    while (f < m->F) m->dims[f] = m->dims[f - 1], f++;
    for (int i = m->F - 1; i > 0; i--) { /* Fisher-Yates */
        const int j = (int)rec_rng_below(rng, (uint64_t)i + 1), t = m->dims[i];
        m->dims[i] = m->dims[j], m->dims[j] = t;
    }
    for (f = 0; f < m->F; f++) m->rows[f] = s->row_lo + (int64_t)rec_rng_below(rng, (uint64_t)(s->row_hi - s->row_lo + 1));
    return 0;
}

static double normal(rec_rng *r) {
    const double u = rec_rng_uniform(r) + 1e-300, v = rec_rng_uniform(r);
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* Bag size of one sample for feature line l (digest: truncated normals, fixed, one-sided). */
static int64_t bag_size(const feat_line *l, rec_rng *r) {
    if (l->kind == ONE_HOT) return rec_rng_uniform(r) < l->mean ? 1 : 0;
    if (rec_rng_uniform(r) >= l->cov) return 0;
    if (l->kind == STATIC) return (int64_t)l->mean;
    for (;;) {
        const double x = l->mean + l->std * normal(r);
        if (x < 0 || (l->kind == MULTI_HOT && x > l->max)) continue;
        return (int64_t)llround(x);
    }
}

/* A batch for m: ids drawn with RecFlex's popularity profile (np.random.power(a=3) row
 * weights, digest §4.1): id = floor(R u^(3/4)) has the same sorted popularity curve. Ids are
 * held as the trainer's loader holds them (32-bit where the table allows), or all 64-bit when
 * `wide` (--wide-ids). */
rec_status make_batch(rec_batch *b, const bmodel *m, rec_rng *r, int wide, int64_t hit_ids) {
    REC_TRY(rec_batch_init(b, m->B, 0, m->F, 1));
    b->n = m->B;
    for (int f = 0; f < m->F; f++) {
        rec_jagged *j = &b->sparse[f];
        j->offsets[0] = 0;
        for (int64_t s = 0; s < m->B; s++) {
            const int64_t L = bag_size(&m->feat[f], r);
            REC_TRY(rec_batch_reserve_nnz(b, f, j->offsets[s] + L, 0));
            for (int64_t k = j->offsets[s]; k < j->offsets[s] + L; k++) {
                int64_t id = (int64_t)((double)m->rows[f] * pow(rec_rng_uniform(r), 0.75));
                j->ids64[k] = id < m->rows[f] ? id : m->rows[f] - 1;
                if (hit_ids) j->ids64[k] %= hit_ids; /* --hit-ids: rows that stay in cache */
            }
            j->offsets[s + 1] = j->offsets[s] + L;
        }
    }
    return wide ? REC_OK : rec_batch_fit_ids(b, m->rows);
}


const char *const bmodel_dump_files[] = {"model.json", "batches.bin", "dout.bin", NULL};

int bmodel_dump(const char *dir, const bmodel *m, const rec_batch *b, int nb, const float *dout, int W, float lr) {
    mkdir(dir, 0777);
    char p[1024];
    snprintf(p, sizeof p, "%s/model.json", dir);
    FILE *f = fopen(p, "w");
    if (!f) return -1;
    fprintf(f, "{\"name\": \"%s\", \"batch\": %d, \"batches\": %d, \"lr\": %g, \"tables\": [", m->name, m->B, nb, lr);
    for (int t = 0; t < m->F; t++) fprintf(f, "%s[%lld, %d]", t ? ", " : "", (long long)m->rows[t], m->dims[t]);
    fprintf(f, "]}\n");
    if (fclose(f)) return -1;
    snprintf(p, sizeof p, "%s/batches.bin", dir);
    f = fopen(p, "wb");
    if (!f) return -1;
    for (int i = 0; i < nb; i++) {
        const int64_t B = b[i].n;
        fwrite(&B, 8, 1, f);
        for (int t = 0; t < m->F; t++) {
            const rec_jagged *j = &b[i].sparse[t];
            const int64_t nnz = j->offsets[B];
            fwrite(&nnz, 8, 1, f);
            fwrite(j->offsets, 8, (size_t)B + 1, f);
            int64_t ids[1024]; /* int64 on disk whatever the batch holds */
            for (int64_t k = 0; k < nnz; k += 1024) {
                const int64_t m = nnz - k < 1024 ? nnz - k : 1024;
                rec_jagged_copy_ids64(j, k, m, ids);
                fwrite(ids, 8, (size_t)m, f);
            }
        }
    }
    if (fclose(f)) return -1;
    snprintf(p, sizeof p, "%s/dout.bin", dir);
    f = fopen(p, "wb");
    if (!f) return -1;
    fwrite(dout, sizeof(float), (size_t)m->B * (size_t)W, f);
    return fclose(f) ? -1 : 0;
}
