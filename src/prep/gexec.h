/* The GPU preprocessing executor (RAP §6): a spec's fusion plan (rec_fusion) run step by step,
 * each fused kernel one launch over all its members' rows, on a backend: CUDA
 * (src/cuda/prep.cu) or the CPU (gexec.c, the same row functions in loops), which the tests
 * hold bit for bit to the CPU executor. */
#ifndef RECTRAIN_PREP_GEXEC_H
#define RECTRAIN_PREP_GEXEC_H

#include "gops.h"
#include "rectrain/prep.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { REC_G_ELEM = 0, REC_G_COUNT, REC_G_WRITE };

/* Where the columns live and how fused ops run there. Everything runs in order on one queue
 * (a CUDA stream); only `get` and `sync` wait for it. */
typedef struct rec_gback {
    void *ctx;
    const char *name;
    rec_status (*alloc)(void *ctx, void **p, size_t bytes);
    void (*release)(void *ctx, void *p);
    /* Host memory the backend copies from and to at full speed (CUDA: pinned). */
    rec_status (*host_alloc)(void *ctx, void **p, size_t bytes);
    void (*host_release)(void *ctx, void *p);
    rec_status (*put)(void *ctx, void *dst, const void *src, size_t bytes);  /* host -> backend, queued */
    rec_status (*copy)(void *ctx, void *dst, const void *src, size_t bytes); /* within the backend, queued */
    rec_status (*get)(void *ctx, void *dst, const void *src, size_t bytes);  /* backend -> host, waits */
    /* Within the backend, queued: a column of n rows of w floats into columns [col, col + w)
     * of rows of ld floats: dst[r ld + col + c] = src[r w + c]. */
    rec_status (*to_rows)(void *ctx, float *dst, const float *src, int64_t n, int w, int ld, int col);
    /* Within the backend, queued: dst[i] = src[i] as int32 for i < n, and *bad = 1 (backend
     * memory, never cleared here) where a value does not fit. */
    rec_status (*narrow)(void *ctx, int32_t *dst, const int64_t *src, int64_t n, int32_t *bad);
    /* Phase REC_G_* of ops[0 .. m) over rows [0, n) of their columns; REC_G_COUNT writes row r
     * of op k's length at cnt[k * n + r]. ops and cols are the backend's copies; `lanes` the
     * most any op takes a row (rec_g_lanes), which each op's own lanes do not exceed. */
    rec_status (*rows)(void *ctx, int phase, const rec_gop *ops, int m, int lanes, rec_gcol *cols, int64_t n,
                       int32_t *cnt);
    /* Each op k's column offsets: off2[0] = 0, off2[r + 1] = off2[r] + cnt[k * n + r], where
     * off2 is cols[ops[k].col].off2. ops and cols are the backend's copies, ops_host and
     * cols_host the host's, alike. `fits`: the sum of all m ops' counts fits in int32, so that
     * one scan over the m columns of counts serves them all. */
    rec_status (*scan)(void *ctx, const rec_gop *ops_host, const rec_gop *ops, int m, const rec_gcol *cols_host,
                       const rec_gcol *cols, int64_t n, const int32_t *cnt, int fits);
    rec_status (*sync)(void *ctx); /* waits for everything queued */
    /* Optional (NULL: nothing to wait for): queued, what follows waits for `event` (a
     * rec_corun's stage event) to have run. */
    rec_status (*wait)(void *ctx, void *event);
    /* Optional timing (NULL: the backend does not time): mark k (0 or 1) queued here, and the
     * milliseconds from mark 0 to mark 1 once both have run (after a get or a sync). */
    rec_status (*mark)(void *ctx, int k);
    double (*span_ms)(void *ctx);
} rec_gback;

/* The CPU backend: host memory, the row functions in loops. */
extern const rec_gback rec_gback_cpu;
/* The CUDA backend (src/cuda/prep.cu): REC_EUNSUPPORTED, with the reason, without a usable GPU
 * or in a build without the GPU engine. */
rec_status rec_gback_cuda(rec_gback *out);
void rec_gback_cuda_free(rec_gback *b);

typedef struct rec_gexec rec_gexec;

/* Prepares a run of `fu` (the plan of `spec`) on `be` for blocks of up to `rows` rows; vocabs
 * as for rec_prep_plan_init. */
rec_status rec_gexec_init(rec_gexec **out, const rec_spec *spec, const rec_fusion *fu, const rec_vocab_set *vocabs,
                          const rec_gback *be, int64_t rows);
void rec_gexec_free(rec_gexec *g);
/* Preprocesses raw rows [r0, r0 + n) and appends them to `b`, as rec_prep_run does. */
rec_status rec_gexec_run(rec_gexec *g, const rec_raw_block *raw, int64_t r0, int64_t n, rec_batch *b);
/* Measuring the fused kernels for the latency predictor (RAP §5.2): with `on`, every kernel of
 * every later run is timed alone (the backend drained before and after it) and kept as a
 * sample of its features (rec_lat_features, with the values its members read in that block)
 * and latency. */
typedef struct rec_gexec_sample {
    float x[REC_LAT_FEATURES];
    double ms;
} rec_gexec_sample;
void rec_gexec_measure(rec_gexec *g, int on);
/* Co-running with training (rec_corun): each block follows the corun's plan, if it has one,
 * its pieces in order, a wait for stage s's event queued before stage s's pieces; the first
 * executor to claim it times one block's kernels for the corun's predictor. NULL: none. The
 * corun outlives the executor. */
void rec_gexec_corun(rec_gexec *g, rec_corun *c);
/* The operators' time so far, where the backend times (else 0): each block's, from its raw
 * columns on the backend to its last fused kernel done (the copies in and out left out), in
 * milliseconds. */
double rec_gexec_ops_ms(const rec_gexec *g);
int64_t rec_gexec_samples(const rec_gexec *g, const rec_gexec_sample **out);
/* The predictor's training data for `spec` on `be`: every kernel of its fusion plan, and of the
 * plan sharded to 8 and to 1 instance a kernel, timed over up to 4 blocks of 1024, 4096, 16384
 * and 32768 rows of `raw`. X (n x REC_LAT_FEATURES) and ms are malloc'd. */
rec_status rec_gexec_collect(const rec_spec *spec, const rec_vocab_set *vocabs, const rec_raw_block *raw,
                             const rec_gback *be, float **X, double **ms, int64_t *n);

#ifdef __cplusplus
}
#endif

#endif
