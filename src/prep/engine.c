/* Parallel parse + preprocess of TSV chunks (see rec_prep_engine in prep.h).
 *
 * Work split: the chunk is cut into one piece per thread at line boundaries; each thread
 * walks its piece in slices of about SLICE_BYTES, parsing a slice into its raw block and
 * running the plan over it at once, so the raw columns are still in L2 when the operators
 * read them (the parse output of a whole 8 MiB chunk would not fit any cache). */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "gexec.h"
#include "prep_internal.h"
#include "rectrain/core.h"
#include "rectrain/prep.h"

enum { SLICE_BYTES = 128 << 10 };
/* The GPU executor's: slices large enough to fill the device, its blocks of rows */
enum { GPU_SLICE_BYTES = 4 << 20, GPU_ROWS = 32768 };

typedef struct worker {
    rec_prep_ws *ws;
    rec_raw_block raw;
    rec_batch batch[2];         /* alternate runs write alternate batches */
    rec_bad_report bad;
    rec_vocab_counts *counts;   /* counting pass only */
    rec_gback be;               /* the GPU executor (set_device): its backend and run */
    rec_gexec *gx;
    rec_status status;
    char msg[1024];
} worker;

struct rec_prep_engine {
    const rec_prep_plan *plan;
    const rec_spec *spec;
    rec_tsv_opts opts;
    char path[512];
    rec_pool *pool;
    int nt;
    int cur;                    /* batch set of the last run */
    worker *w;
    rec_bad_report bad;
    /* the chunk being processed: text, or rows of parsed raw columns (rawin) */
    const rec_text_chunk *chunk;
    const rec_raw_block *rawin;
    size_t start[257];
    int64_t first[256];
    int counting;
    rec_prep_device device;
    rec_fusion fu;              /* the GPU executor's plan */
    size_t slice;               /* bytes parsed at once by a thread */
};

rec_status rec_prep_engine_init(rec_prep_engine **out, const rec_prep_plan *plan, int threads,
                                const rec_tsv_opts *opts, const char *path) {
    *out = NULL;
    if (threads < 1 || threads > 256)
        return rec_errorf(REC_EINVAL, "threads must be between 1 and 256 (got %d)", threads);
    if (opts->has_label != 0 && opts->has_label != 1)
        return rec_errorf(REC_EINVAL, "prep engine: has_label must be resolved to 0 or 1 first");
    rec_prep_engine *e = calloc(1, sizeof *e);
    if (!e) return rec_errorf(REC_ENOMEM, "out of memory creating the prep engine");
    e->plan = plan;
    e->spec = rec__prep_plan_spec(plan);
    e->opts = *opts;
    snprintf(e->path, sizeof e->path, "%s", path);
    e->nt = threads;
    e->slice = SLICE_BYTES;
    e->w = calloc((size_t)threads, sizeof *e->w);
    rec_status s = e->w ? rec_pool_init(&e->pool, threads)
                        : rec_errorf(REC_ENOMEM, "out of memory creating the prep engine");
    for (int t = 0; !s && t < threads; t++) {
        s = rec_prep_ws_init(&e->w[t].ws, plan);
        if (!s) s = rec_raw_block_init(&e->w[t].raw, 1024);
        for (int k = 0; !s && k < 2; k++)
            s = rec_batch_init(&e->w[t].batch[k], 1024, e->spec->n_dense, e->spec->n_sparse, 1);
    }
    if (s) {
        rec_prep_engine_free(e);
        return s;
    }
    *out = e;
    return REC_OK;
}

double rec_prep_engine_device_ms(const rec_prep_engine *e) {
    double ms = 0;
    for (int t = 0; e->w && t < e->nt; t++)
        if (e->w[t].gx) ms += rec_gexec_ops_ms(e->w[t].gx);
    return ms;
}

void rec_prep_engine_free(rec_prep_engine *e) {
    if (!e) return;
    for (int t = 0; e->w && t < e->nt; t++) {
        rec_prep_ws_free(e->w[t].ws);
        rec_raw_block_free(&e->w[t].raw);
        rec_batch_free(&e->w[t].batch[0]);
        rec_batch_free(&e->w[t].batch[1]);
        rec_vocab_counts_free(e->w[t].counts);
        rec_gexec_free(e->w[t].gx);
        if (e->device == REC_PREP_CUDA && e->w[t].be.ctx) rec_gback_cuda_free(&e->w[t].be);
    }
    rec_fusion_free(&e->fu);
    free(e->w);
    rec_pool_free(e->pool);
    free(e);
}

int rec_prep_engine_threads(const rec_prep_engine *e) { return e->nt; }

rec_status rec_prep_engine_set_device(rec_prep_engine *e, rec_prep_device d) {
    if (d == e->device) return REC_OK;
    if (e->device != REC_PREP_CPU) return rec_errorf(REC_EINVAL, "prep engine: the device is set once");
    if (d != REC_PREP_CUDA && d != REC_PREP_GPU_EMULATED) return rec_errorf(REC_EINVAL, "prep engine: device %d", (int)d);
    REC_TRY(rec_prep_fuse(e->spec, NULL, &e->fu));
    e->device = d;
    for (int t = 0; t < e->nt; t++) {
        if (d == REC_PREP_CUDA) REC_TRY(rec_gback_cuda(&e->w[t].be)); /* a stream per thread */
        else e->w[t].be = rec_gback_cpu;
        REC_TRY(rec_gexec_init(&e->w[t].gx, e->spec, &e->fu, rec__prep_plan_vocabs(e->plan), &e->w[t].be, GPU_ROWS));
    }
    e->slice = GPU_SLICE_BYTES;
    return REC_OK;
}
rec_status rec_prep_engine_corun(rec_prep_engine *e, rec_corun *c) {
    if (e->device == REC_PREP_CPU)
        return rec_errorf(REC_EINVAL, "prep engine: co-running with training needs the GPU executor (set_device first)");
    for (int t = 0; t < e->nt; t++) rec_gexec_corun(e->w[t].gx, c);
    return REC_OK;
}

const rec_batch *rec_prep_engine_batch(const rec_prep_engine *e, int t) { return &e->w[t].batch[e->cur]; }
const rec_bad_report *rec_prep_engine_bad(const rec_prep_engine *e) { return &e->bad; }

static int64_t count_lines(const char *p, const char *end) {
    int64_t n = 0;
    while (p < end && (p = memchr(p, '\n', (size_t)(end - p))) != NULL) {
        n++;
        p++;
    }
    return n;
}

/* Grows the worker's raw block (for text) and batch to hold `rows` more rows (rare: only when
 * a slice has more lines than any before). */
static rec_status worker_reserve(rec_prep_engine *e, worker *w, int64_t rows) {
    if (!e->rawin && rows > w->raw.cap) {
        rec_raw_block_free(&w->raw);
        REC_TRY(rec_raw_block_init(&w->raw, rows + rows / 4));
    }
    rec_batch *b = &w->batch[e->cur];
    if (!e->counting && b->n + rows > b->cap) {
        rec_batch bigger;
        int64_t cap = (b->n + rows) * 5 / 4;
        REC_TRY(rec_batch_init(&bigger, cap, e->spec->n_dense, e->spec->n_sparse, 1));
        /* keep the rows already made from earlier slices of this piece */
        memcpy(bigger.label, b->label, (size_t)b->n * sizeof(float));
        memcpy(bigger.dense, b->dense, (size_t)(b->n * b->n_dense) * sizeof(float));
        for (int32_t f = 0; f < b->n_sparse; f++) {
            int64_t nnz = b->n ? b->sparse[f].offsets[b->n] : 0;
            rec_status s = rec_batch_set_wide(&bigger, f, b->sparse[f].wide);
            if (!s) s = rec_batch_reserve_nnz(&bigger, f, nnz, 0);
            if (s) {
                rec_batch_free(&bigger);
                return s;
            }
            memcpy(bigger.sparse[f].offsets, b->sparse[f].offsets, (size_t)(b->n + 1) * sizeof(int64_t));
            memcpy(bigger.sparse[f].ids, b->sparse[f].ids, (size_t)nnz * (size_t)rec_jagged_id_bytes(&b->sparse[f]));
        }
        bigger.n = b->n;
        rec_batch_free(b);
        *b = bigger;
    }
    return REC_OK;
}

/* Runs (or counts) the plan over raw rows [r0, r0 + n) of `raw` into the worker's batch. */
static rec_status run_rows(rec_prep_engine *e, worker *w, const rec_raw_block *raw, int64_t r0, int64_t n, rec_batch *b) {
    if (e->counting) return rec_prep_count(e->plan, w->ws, raw, r0, n, w->counts);
    if (w->gx) return rec_gexec_run(w->gx, raw, r0, n, b);
    return rec_prep_run(e->plan, w->ws, raw, r0, n, b);
}

static rec_status piece_task(void *ctx, int64_t task, int thread) {
    rec_prep_engine *e = ctx;
    worker *w = &e->w[task];
    (void)thread;
    const char *text = e->chunk->text;
    const char *p = text + e->start[task], *end = text + e->start[task + 1];
    int64_t line = e->first[task];
    rec_status s = REC_OK;
    rec_batch *b = &w->batch[e->cur];
    b->n = 0;
    while (p < end) {
        const char *q = end;
        if (end - p > (ptrdiff_t)e->slice) {
            q = memchr(p + e->slice, '\n', (size_t)(end - p) - e->slice);
            q = q ? q + 1 : end;
        }
        int64_t lines = count_lines(p, q) + (q[-1] != '\n');
        s = worker_reserve(e, w, lines);
        if (s) break;
        w->raw.n = 0;
        s = rec_tsv_parse(&e->opts, e->chunk->path ? e->chunk->path : e->path, p, (size_t)(q - p), line, &w->raw,
                          &w->bad);
        if (s) break;
        s = run_rows(e, w, &w->raw, 0, w->raw.n, b);
        if (s) break;
        line += lines;
        p = q;
    }
    w->status = s;
    if (s) snprintf(w->msg, sizeof w->msg, "%s", rec_errmsg());
    return s;
}

/* Thread `task`'s share of parsed rows, in slices (L2-sized on the CPU, the GPU's blocks). */
static rec_status rows_task(void *ctx, int64_t task, int thread) {
    rec_prep_engine *e = ctx;
    worker *w = &e->w[task];
    (void)thread;
    const int64_t n = e->rawin->n, a = n * task / e->nt, z = n * (task + 1) / e->nt;
    const int64_t slice = w->gx ? GPU_ROWS : 1024;
    rec_batch *b = &w->batch[e->cur];
    b->n = 0;
    rec_status s = REC_OK;
    for (int64_t r = a; !s && r < z; r += slice) {
        const int64_t k = z - r < slice ? z - r : slice;
        s = worker_reserve(e, w, k);
        if (!s) s = run_rows(e, w, e->rawin, r, k, b);
    }
    w->status = s;
    if (s) snprintf(w->msg, sizeof w->msg, "%s", rec_errmsg());
    return s;
}

/* The first failure of the threads' runs in input order, not the first in time. */
static rec_status first_failure(const rec_prep_engine *e) {
    for (int t = 0; t < e->nt; t++)
        if (e->w[t].status != REC_OK) {
            rec_error_set_msg(e->w[t].msg);
            return e->w[t].status;
        }
    return REC_OK;
}

/* A run (or counting run) of the threads over a text chunk, or over rows of parsed raw columns. */
static rec_status run(rec_prep_engine *e, const rec_text_chunk *chunk, const rec_raw_block *raw, int counting) {
    for (int t = 0; counting && t < e->nt; t++)
        if (!e->w[t].counts) REC_TRY(rec_vocab_counts_init(&e->w[t].counts, e->spec));
    if (!counting) e->cur ^= 1;
    e->counting = counting;
    e->chunk = chunk;
    e->rawin = raw;
    for (int t = 0; t < e->nt; t++) {
        e->w[t].status = REC_OK;
        memset(&e->w[t].bad, 0, sizeof e->w[t].bad);
    }
    if (chunk) rec_tsv_split(chunk, e->nt, e->start, e->first);
    rec_pool_run(e->pool, e->nt, chunk ? piece_task : rows_task, e);
    e->rawin = NULL;
    e->counting = 0;
    REC_TRY(first_failure(e));
    for (int t = 0; t < e->nt; t++) rec_bad_report_merge(&e->bad, &e->w[t].bad);
    return REC_OK;
}

rec_status rec_prep_engine_run(rec_prep_engine *e, const rec_text_chunk *chunk) { return run(e, chunk, NULL, 0); }
rec_status rec_prep_engine_count(rec_prep_engine *e, const rec_text_chunk *chunk) { return run(e, chunk, NULL, 1); }
rec_status rec_prep_engine_run_raw(rec_prep_engine *e, const rec_raw_block *raw) { return run(e, NULL, raw, 0); }
rec_status rec_prep_engine_count_raw(rec_prep_engine *e, const rec_raw_block *raw) { return run(e, NULL, raw, 1); }

rec_status rec_prep_engine_vocabs(rec_prep_engine *e, rec_vocab_set *out) {
    for (int t = 0; t < e->nt; t++)
        if (!e->w[t].counts) REC_TRY(rec_vocab_counts_init(&e->w[t].counts, e->spec));
    /* Fold every thread's counters into thread 0's, once: the merged ones are dropped, so a
     * later counting pass and call count each id exactly once. */
    for (int t = 1; t < e->nt; t++) {
        REC_TRY(rec_vocab_counts_merge(e->w[0].counts, e->w[t].counts));
        rec_vocab_counts_free(e->w[t].counts);
        e->w[t].counts = NULL;
    }
    return rec_vocab_counts_finish(e->w[0].counts, e->spec, out);
}
