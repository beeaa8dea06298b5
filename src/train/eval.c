/* Evaluation: the metrics of a range of rows, scored batch by batch by whichever model holds
 * them (train.h rec_evaluate for the host model; the backends' evaluate, backend.h). */
#include "backend_impl.h"

rec_status rec__eval_rows(rec__score_fn score, void *ctx, rec_dataset *d, int64_t row0, int64_t row1, int64_t batch,
                          rec_metrics *out) {
    rec_eval_acc *acc = NULL;
    rec_loader *l = NULL;
    REC_TRY(rec_eval_acc_init(&acc, row1 - row0));
    rec_status s = rec_loader_open(&l, d, row0, row1, batch, REC_LOADER_DEPTH);
    const rec_batch *b;
    while (!s && !(s = rec_loader_next(l, &b)) && b) {
        const float *logits;
        s = score(ctx, b, &logits);
        if (!s) s = rec_eval_acc_add(acc, b->n, logits, b->label);
    }
    if (!s) s = rec_eval_acc_finish(acc, out);
    rec_loader_close(l);
    rec_eval_acc_free(acc);
    return s;
}

static rec_status score_host(void *m, const rec_batch *b, const float **logits) {
    return rec_model_forward(m, b, logits);
}

rec_status rec_evaluate(rec_model *m, rec_dataset *d, int64_t row0, int64_t row1, int64_t batch,
                        rec_metrics *out) {
    return rec__eval_rows(score_host, m, d, row0, row1, batch, out);
}
