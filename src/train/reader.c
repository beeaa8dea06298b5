/* The flat reader API (reader.h) over a data set and its loader. */
#include <stdlib.h>

#include "rectrain/core.h"
#include "rectrain/reader.h"
#include "rectrain/data.h"

struct rec_reader {
    rec_dataset *d;
    rec_loader *l;
    const rec_batch *b;   /* the current batch, NULL before the first and at the end */
    int64_t rows;
};

void rec_reader_close(rec_reader *r) {
    if (!r) return;
    rec_loader_close(r->l);
    rec_dataset_close(r->d);
    free(r);
}

rec_status rec_reader_open(rec_reader **out, const char *const *paths, int n_paths, int64_t batch, int shuffled,
                           uint64_t seed, int64_t epoch, int threads) {
    *out = NULL;
    if (!paths || n_paths < 1 || !paths[0] || !paths[0][0])
        return rec_errorf(REC_EINVAL, "reader: no data set named (give a .rshard path)");
    if (batch < 1) return rec_errorf(REC_EINVAL, "reader: batch %lld: want >= 1", (long long)batch);
    if (threads < 1 || threads > 256) return rec_errorf(REC_EINVAL, "reader: threads %d: want 1..256", threads);
    if (epoch < 0) return rec_errorf(REC_EINVAL, "reader: epoch %lld: want >= 0", (long long)epoch);
    rec_reader *r = calloc(1, sizeof *r);
    if (!r) return rec_errorf(REC_ENOMEM, "reader: out of memory");
    rec_dataset_opts o = {.paths = paths, .n_paths = n_paths, .prep_threads = threads, .shards_only = 1};
    rec_status s = rec_dataset_open(&r->d, &o);
    if (!s) s = rec_dataset_rows(r->d, &r->rows);
    const rec_shuffle sh = {seed, epoch, REC_SHUFFLE_BLOCK_ROWS, REC_SHUFFLE_BUFFER_BLOCKS};
    if (!s) s = rec_loader_open_order(&r->l, r->d, 0, r->rows, batch, 3, shuffled ? &sh : NULL, 0);
    if (s) {
        rec_reader_close(r);
        return s;
    }
    *out = r;
    return REC_OK;
}

int64_t rec_reader_rows(const rec_reader *r) { return r->rows; }
int32_t rec_reader_n_dense(const rec_reader *r) { return rec_dataset_n_dense(r->d); }
int32_t rec_reader_n_sparse(const rec_reader *r) { return rec_dataset_n_sparse(r->d); }
int64_t rec_reader_table_rows(const rec_reader *r, int32_t f) {
    return f >= 0 && f < rec_dataset_n_sparse(r->d) ? rec_dataset_table_rows(r->d)[f] : -1;
}

rec_status rec_reader_next(rec_reader *r, int64_t *n) {
    *n = 0;
    REC_TRY(rec_loader_next(r->l, &r->b));
    *n = r->b ? r->b->n : 0;
    return REC_OK;
}

const float *rec_reader_labels(const rec_reader *r) { return r->b ? r->b->label : NULL; }
const float *rec_reader_dense(const rec_reader *r) { return r->b ? r->b->dense : NULL; }
const int64_t *rec_reader_offsets(const rec_reader *r, int32_t f) {
    return r->b && f >= 0 && f < r->b->n_sparse ? r->b->sparse[f].offsets : NULL;
}
const void *rec_reader_ids(const rec_reader *r, int32_t f, int *width) {
    if (!r->b || f < 0 || f >= r->b->n_sparse) return *width = 0, NULL;
    *width = r->b->sparse[f].wide ? 8 : 4;
    return r->b->sparse[f].ids;
}
