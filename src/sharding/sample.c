/* Profiling a data set for a plan (plan.h): global batches in a shuffled order. */
#include "sharding_impl.h"
#include "rectrain/data.h"

rec_status rec_plan_profile_data(rec_plan_profile *p, rec_dataset *d, int64_t rows, int64_t batches, uint64_t seed) {
    rec_shuffle sh = {seed, 0, REC_SHUFFLE_BLOCK_ROWS, REC_SHUFFLE_BUFFER_BLOCKS};
    rec_loader *l = NULL;
    REC_TRY(rec_loader_open_order(&l, d, 0, rows, p->m.batch, 2, &sh, 0));
    const rec_batch *b;
    rec_status s = REC_OK;
    for (int64_t k = 0; k < batches && !(s = rec_loader_next(l, &b)) && b; k++)
        if (b->n == p->m.batch && (s = rec_plan_profile_add(p, b))) break;
    rec_loader_close(l);
    if (!s && p->batches == 0)
        s = rec_errorf(REC_EINVAL, "%s: %lld rows make no whole global batch of %lld; profile a larger data set or a "
                       "smaller batch", rec_dataset_path(d), (long long)rows, (long long)p->m.batch);
    return s;
}
