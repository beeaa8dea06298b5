/* Staged windows (cuda_impl.h): a shuffled shard's window laid out as the GPU's gather reads it,
 * and that gather on the CPU, in C so that both are tested on any machine
 * (tests/test_cuda_host.c holds the gather to rec_cuda_pack of the loader's own batches).
 *
 * The host's work for a GPU's input moves from every batch to every window: a window's rows
 * are copied once, block after block (sequential reads and writes), where a batch gathered on
 * the host read each of its rows' F features at random and packed them a second time. */
#include <stdlib.h>
#include <string.h>

#include "cuda_impl.h"
#include "gather.h"
#include "rectrain/cuda.h"

enum { STAGE_ALIGN = 16 }; /* words: each part starts on 64 bytes */

static int64_t align_up(int64_t w) { return (w + STAGE_ALIGN - 1) / STAGE_ALIGN * STAGE_ALIGN; }

rec_status rec_cuda_stage_init(rec_cuda_stage *st, int32_t Dn, int32_t F) {
    memset(st, 0, sizeof *st);
    st->Dn = Dn, st->F = F;
    st->start_at = calloc((size_t)F + 1, sizeof(int64_t));
    st->ids_at = calloc((size_t)F + 1, sizeof(int64_t));
    st->nnz = calloc((size_t)F + 1, sizeof(int64_t));
    if (!st->start_at || !st->ids_at || !st->nnz) {
        rec_cuda_stage_free(st);
        return rec_errorf(REC_ENOMEM, "GPU input: out of memory for a staging layout");
    }
    return REC_OK;
}

void rec_cuda_stage_free(rec_cuda_stage *st) {
    free(st->start_at), free(st->ids_at), free(st->nnz);
    st->start_at = st->ids_at = st->nnz = NULL;
}

rec_status rec_cuda_stage_plan(rec_cuda_stage *st, const rec_batch *blk, int nb, const uint8_t *one) {
    int64_t n = 0;
    for (int i = 0; i < nb; i++) n += blk[i].n;
    if (n >= INT32_MAX)
        return rec_errorf(REC_EINVAL, "GPU input: a window of %lld rows; staging takes fewer than 2^31", (long long)n);
    st->n = n;
    st->dense_at = align_up(n);
    int64_t w = align_up(st->dense_at + n * st->Dn);
    for (int32_t f = 0; f < st->F; f++) {
        int64_t nnz = 0;
        for (int i = 0; i < nb; i++)
            if (blk[i].sparse[f].weights)
                return rec_errorf(REC_EUNSUPPORTED, "GPU input: feature %d has weighted bags, which staging does not carry "
                                  "(set REC_CUDA_INPUT=host to pack them on the host)", f);
        for (int i = 0; i < nb; i++) nnz += rec_batch_nnz(&blk[i], f) - blk[i].sparse[f].offsets[0];
        if (nnz >= INT32_MAX)
            return rec_errorf(REC_EINVAL, "GPU input: feature %d holds %lld ids in a window of %lld rows; staging takes "
                              "fewer than 2^31 (train with a smaller shuffle buffer)", f, (long long)nnz, (long long)n);
        st->nnz[f] = nnz;
        st->start_at[f] = one[f] ? -1 : w;
        if (!one[f]) w = align_up(w + n + 1);
        st->ids_at[f] = w;
        w = align_up(w + nnz);
    }
    st->words = w;
    return REC_OK;
}

void rec_cuda_stage_src(const rec_cuda_stage *st, const int32_t *base, rec_gsrc *src, rec_gslot *slot) {
    slot->label = (const float *)base;
    slot->dense = (const float *)(base + st->dense_at);
    for (int32_t f = 0; f < st->F; f++) {
        src[f].starts = st->start_at[f] < 0 ? NULL : base + st->start_at[f];
        src[f].ids = base + st->ids_at[f];
    }
}

typedef struct fill_job {
    const rec_cuda_stage *st;
    const rec_batch *blk;
    int nb;
    const int64_t *rows;
    int32_t *buf;
    int64_t *bad; /* (F) the window's position of feature f's first id outside its table, -1 none */
} fill_job;

/* Task 0: labels and dense values; task 1 + f: feature f's starts and ids. */
static rec_status fill_task(void *ctx, int64_t task, int thread) {
    (void)thread;
    const fill_job *j = ctx;
    const rec_cuda_stage *st = j->st;
    if (task == 0) {
        float *label = (float *)j->buf, *dense = (float *)(j->buf + st->dense_at);
        for (int i = 0; i < j->nb; i++) {
            const rec_batch *b = &j->blk[i];
            memcpy(label, b->label, (size_t)b->n * sizeof(float));
            memcpy(dense, b->dense, (size_t)b->n * st->Dn * sizeof(float));
            label += b->n, dense += b->n * st->Dn;
        }
        return REC_OK;
    }
    const int32_t f = (int32_t)task - 1;
    int32_t *starts = st->start_at[f] < 0 ? NULL : j->buf + st->start_at[f], *ids = j->buf + st->ids_at[f];
    const uint64_t R = (uint64_t)j->rows[f];
    int64_t row = 0, at = 0; /* the window's row and id where block i starts */
    j->bad[f] = -1;
    for (int i = 0; i < j->nb; i++) {
        const rec_jagged *s = &j->blk[i].sparse[f];
        const int64_t o0 = s->offsets[0], n = rec_batch_nnz(&j->blk[i], f) - o0;
        if (starts)
            for (int64_t r = 0; r < j->blk[i].n; r++) starts[row + r] = (int32_t)(at + s->offsets[r] - o0);
        int64_t k = 0;
        if (s->wide)
            for (; k < n && (uint64_t)s->ids64[o0 + k] < R; k++) ids[at + k] = (int32_t)s->ids64[o0 + k];
        else
            for (; k < n && (uint64_t)(uint32_t)s->ids32[o0 + k] < R; k++) ids[at + k] = s->ids32[o0 + k];
        if (k < n) {
            j->bad[f] = at + k;
            return REC_OK;
        }
        row += j->blk[i].n, at += n;
    }
    if (starts) starts[row] = (int32_t)at;
    return REC_OK;
}

rec_status rec_cuda_stage_fill(const rec_cuda_stage *st, const rec_batch *blk, int nb, const int64_t *row0,
                               const int64_t *rows, const char *what, int32_t *buf, rec_pool *pool) {
    const int32_t F = st->F;
    int64_t *bad = malloc(((size_t)F + 1) * sizeof *bad);
    if (!bad) return rec_errorf(REC_ENOMEM, "GPU input: out of memory staging a window");
    fill_job j = {st, blk, nb, rows, buf, bad};
    if (pool) rec_pool_run(pool, (int64_t)F + 1, fill_task, &j); /* its tasks cannot fail */
    else
        for (int64_t t = 0; t <= F; t++) fill_task(&j, t, 0);
    int32_t f = 0; /* the first feature (in order) holding an id outside its table */
    while (f < F && bad[f] < 0) f++;
    const int64_t k = f < F ? bad[f] : 0;
    free(bad);
    if (f == F) return REC_OK;
    int i = 0; /* the block and its row holding the window's id k */
    int64_t at = 0;
    while (at + rec_batch_nnz(&blk[i], f) - blk[i].sparse[f].offsets[0] <= k)
        at += rec_batch_nnz(&blk[i], f) - blk[i].sparse[f].offsets[0], i++;
    const rec_jagged *s = &blk[i].sparse[f];
    const int64_t id_k = s->offsets[0] + (k - at);
    int64_t r = 0;
    while (s->offsets[r + 1] <= id_k) r++;
    return rec_errorf(REC_EINVAL, "%s: row %lld, sparse feature %d: id %lld is outside the table's %lld rows (was the "
                      "data prepared for this config's tables?)", what, (long long)(row0[i] + r), f,
                      (long long)rec_jagged_id(s, id_k), (long long)rows[f]);
}

uint64_t rec_cuda_gather_slots(const uint32_t *pos, int B, int64_t slot_rows) {
    uint64_t touched = 0;
    for (int b = 0; b < B; b++) touched |= (uint64_t)1 << rec_gather_slot(pos[b], slot_rows);
    return touched;
}

void rec_cuda_gather_nnz(const rec_gsrc *src, int S, int F, int64_t slot_rows, const uint32_t *pos, int B, uint64_t touched,
                         int64_t *nnz) {
    for (int f = 0; f < F; f++) {
        int lists = 0; /* a feature of one id a row in the batch's slots has B ids: nothing to read */
        for (int s = 0; s < S; s++) lists |= (touched >> s & 1) && src[(int64_t)s * F + f].starts != NULL;
        nnz[f] = lists ? 0 : B;
        for (int b = 0; lists && b < B; b++)
            nnz[f] += rec_gather_len(&src[rec_gather_slot(pos[b], slot_rows) * F + f], rec_gather_row(pos[b], slot_rows));
    }
}

void rec_cuda_gather_host(const rec_gsrc *src, const rec_gslot *slot, int F, int Dn, int64_t slot_rows, const uint32_t *pos,
                          int B, int32_t *off, int32_t *ids, float *dense) {
    const int64_t E = (int64_t)F * (B + 1);
    int32_t sum = 0;
    for (int64_t e = 0; e < E; e++) { /* the exclusive scan the GPU does with CUB */
        const int32_t len = rec_gather_len_entry(src, pos, B, F, slot_rows, e);
        off[e] = sum;
        sum += len;
    }
    for (int64_t f = 0; f < F; f++)
        for (int64_t b = 0; b < B; b++) rec_gather_ids(src, pos, B, F, slot_rows, off, f, b, 0, 1, ids);
    for (int64_t e = 0; e < (int64_t)B * (Dn + 1); e++) rec_gather_dense(slot, pos, B, Dn, slot_rows, e, dense);
}

rec_status rec_cuda_host_stager_init(rec_cuda_host_stager *h, int S, int64_t slot_rows, int32_t Dn, int32_t F,
                                     const int64_t *rows, const char *what, rec_pool *pool) {
    memset(h, 0, sizeof *h);
    if (S < 1 || S > REC_CUDA_STAGE_SLOTS)
        return rec_errorf(REC_EINVAL, "staging: %d slots; it takes 1..%d", S, REC_CUDA_STAGE_SLOTS);
    h->S = S, h->F = F, h->slot_rows = slot_rows, h->rows = rows, h->what = what, h->pool = pool;
    h->st = calloc((size_t)S, sizeof *h->st), h->buf = calloc((size_t)S, sizeof *h->buf), h->cap = calloc((size_t)S, sizeof *h->cap);
    h->src = calloc((size_t)S * F + 1, sizeof *h->src), h->slot = calloc((size_t)S, sizeof *h->slot);
    rec_status s = h->st && h->buf && h->cap && h->src && h->slot ? REC_OK : rec_errorf(REC_ENOMEM, "staging: out of memory");
    for (int i = 0; !s && i < S; i++) s = rec_cuda_stage_init(&h->st[i], Dn, F);
    if (s) rec_cuda_host_stager_free(h);
    return s;
}

void rec_cuda_host_stager_free(rec_cuda_host_stager *h) {
    for (int i = 0; h->st && i < h->S; i++) rec_cuda_stage_free(&h->st[i]);
    for (int i = 0; h->buf && i < h->S; i++) free(h->buf[i]);
    free(h->st), free(h->buf), free(h->cap), free(h->src), free(h->slot);
    memset(h, 0, sizeof *h);
}

rec_status rec_cuda_host_stage(void *ctx, int slot, const rec_batch *blk, int nb, const uint8_t *one, const int64_t *row0) {
    rec_cuda_host_stager *h = ctx;
    rec_cuda_stage *st = &h->st[slot];
    REC_TRY(rec_cuda_stage_plan(st, blk, nb, one));
    if ((size_t)st->words > h->cap[slot]) { /* grown, not made again each window */
        free(h->buf[slot]);
        h->cap[slot] = 0;
        h->buf[slot] = malloc((size_t)st->words * 4 + 4);
        if (!h->buf[slot]) return rec_errorf(REC_ENOMEM, "staging: out of memory for a window of %lld rows", (long long)st->n);
        h->cap[slot] = (size_t)st->words;
    }
    if (h->poison) memset(h->buf[slot], 0xff, (size_t)st->words * 4);
    REC_TRY(rec_cuda_stage_fill(st, blk, nb, row0, h->rows, h->what, h->buf[slot], h->pool));
    rec_cuda_stage_src(st, h->buf[slot], h->src + (size_t)slot * h->F, &h->slot[slot]);
    return REC_OK;
}
