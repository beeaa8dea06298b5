/* The GPU preprocessing executor (src/prep/gexec.c, gops.h) on its CPU backend, on that
 * backend behind a queue that runs copies and kernels only when the host waits (as a CUDA
 * stream does: a host buffer changed before its copy ran, or read before its copy back, shows
 * as a difference), and on its CUDA backend where a GPU is usable: every shipped spec and a
 * spec of every operator give the CPU executor's batches bit for bit (labels, dense values,
 * ids and offsets), over blocks of 1 to 3000 rows, with multi-hot lists and categorify
 * vocabularies. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "gexec.h"
#include "rectrain/batch.h"
#include "rectrain/cuda.h"
#include "rectrain/ingest.h"
#include "rectrain/io.h"
#include "rectrain/prep.h"
#include "train_impl.h"

/* ---- the queued CPU backend ----------------------------------------------------------------- */

enum { Q_PUT, Q_COPY, Q_ROWS, Q_SCAN, Q_MARK, Q_TO_ROWS, Q_NARROW, Q_WAIT };
typedef struct qentry {
    int kind, phase, m, fits, lanes, w, ld, col;
    void *dst;
    const void *src;
    size_t bytes;
    const rec_gop *ops;
    rec_gcol *cols;
    int64_t n;
    int32_t *cnt;
} qentry;
typedef struct queue {
    qentry *e;
    int n, cap;
    int64_t ran, max_pending;
    int fail_get; /* > 0: the get that many from now fails, with its queue left unrun */
    double mark_at[2]; /* when each mark ran (0: not since the last span was read) */
    int64_t spans, early_spans; /* spans read; read before both marks had run */
    /* as they ran: a wait for event e as -1 - (e - events), a kernel launch as its members */
    int log[4096], n_log;
    char *events;
} queue;

static void q_log(queue *q, int v) {
    if (q->n_log < (int)(sizeof q->log / sizeof q->log[0])) q->log[q->n_log++] = v;
}

static rec_status q_flush(void *ctx) {
    queue *q = ctx;
    const rec_gback *c = &rec_gback_cpu;
    for (int i = 0; i < q->n; i++) {
        const qentry *e = &q->e[i];
        if (e->kind == Q_PUT || e->kind == Q_COPY) REC_TRY(c->put(NULL, e->dst, e->src, e->bytes));
        else if (e->kind == Q_WAIT) q_log(q, -1 - (int)((char *)e->dst - q->events));
        else if (e->kind == Q_ROWS) {
            if (e->phase != REC_G_COUNT && e->ops[0].kind != REC_G_LOAD) q_log(q, e->m);
            REC_TRY(c->rows(NULL, e->phase, e->ops, e->m, e->lanes, e->cols, e->n, e->cnt));
        }
        else if (e->kind == Q_MARK) q->mark_at[e->phase] = rec_now();
        else if (e->kind == Q_TO_ROWS) REC_TRY(c->to_rows(NULL, e->dst, e->src, e->n, e->w, e->ld, e->col));
        else if (e->kind == Q_NARROW) REC_TRY(c->narrow(NULL, e->dst, e->src, e->n, e->cnt));
        else REC_TRY(c->scan(NULL, NULL, e->ops, e->m, NULL, e->cols, e->n, e->cnt, e->fits));
    }
    if (q->n > q->max_pending) q->max_pending = q->n;
    q->ran += q->n;
    q->n = 0;
    return REC_OK;
}

static rec_status q_push(queue *q, qentry e) {
    if (q->n == q->cap) {
        q->cap = q->cap ? 2 * q->cap : 256;
        q->e = realloc(q->e, sizeof *q->e * (size_t)q->cap);
        if (!q->e) return rec_errorf(REC_ENOMEM, "the queue");
    }
    q->e[q->n++] = e;
    return REC_OK;
}

static rec_status q_alloc(void *ctx, void **p, size_t bytes) { return rec_gback_cpu.alloc(ctx, p, bytes); }
static void q_release(void *ctx, void *p) { /* as cudaFree, after what is queued */
    q_flush(ctx);
    free(p);
}
static rec_status q_put(void *ctx, void *dst, const void *src, size_t bytes) {
    return q_push(ctx, (qentry){.kind = Q_PUT, .dst = dst, .src = src, .bytes = bytes});
}
static rec_status q_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    return q_push(ctx, (qentry){.kind = Q_COPY, .dst = dst, .src = src, .bytes = bytes});
}
static rec_status q_get(void *ctx, void *dst, const void *src, size_t bytes) {
    queue *q = ctx;
    if (q->fail_get > 0 && --q->fail_get == 0) return rec_errorf(REC_EIO, "injected: a copy back failed");
    if (!bytes) return REC_OK; /* as cudaMemcpyAsync of nothing, then no wait (g_get) */
    REC_TRY(q_flush(ctx));
    memcpy(dst, src, bytes);
    return REC_OK;
}
static rec_status q_to_rows(void *ctx, float *dst, const float *src, int64_t n, int w, int ld, int col) {
    return q_push(ctx, (qentry){.kind = Q_TO_ROWS, .dst = dst, .src = src, .n = n, .w = w, .ld = ld, .col = col});
}
static rec_status q_narrow(void *ctx, int32_t *dst, const int64_t *src, int64_t n, int32_t *bad) {
    return q_push(ctx, (qentry){.kind = Q_NARROW, .dst = dst, .src = src, .n = n, .cnt = bad});
}
static rec_status q_rows(void *ctx, int phase, const rec_gop *ops, int m, int lanes, rec_gcol *cols, int64_t n,
                        int32_t *cnt) {
    return q_push(ctx, (qentry){.kind = Q_ROWS, .phase = phase, .ops = ops, .m = m, .lanes = lanes, .cols = cols, .n = n,
                                .cnt = cnt});
}
static rec_status q_scan(void *ctx, const rec_gop *ops_host, const rec_gop *ops, int m, const rec_gcol *cols_host,
                         const rec_gcol *cols, int64_t n, const int32_t *cnt, int fits) {
    (void)ops_host, (void)cols_host;
    return q_push(ctx, (qentry){.kind = Q_SCAN, .ops = ops, .m = m, .cols = (rec_gcol *)cols, .n = n,
                                .cnt = (int32_t *)cnt, .fits = fits});
}

static rec_status q_wait(void *ctx, void *event) { return q_push(ctx, (qentry){.kind = Q_WAIT, .dst = event}); }
static rec_status q_mark(void *ctx, int k) { return q_push(ctx, (qentry){.kind = Q_MARK, .phase = k & 1}); }
static double q_span_ms(void *ctx) { /* as cudaEventElapsedTime: both marks must have run */
    queue *q = ctx;
    const double ms = q->mark_at[0] > 0 && q->mark_at[1] >= q->mark_at[0] ? 1e3 * (q->mark_at[1] - q->mark_at[0]) : -1;
    q->spans++, q->early_spans += ms < 0;
    q->mark_at[0] = q->mark_at[1] = 0;
    return ms < 0 ? 0 : ms;
}

static queue g_queue;
static const rec_gback g_queued = {.ctx = &g_queue,     .name = "queued CPU", .alloc = q_alloc,   .release = q_release,
                                   .host_alloc = q_alloc, .host_release = q_release, .put = q_put, .copy = q_copy,
                                   .get = q_get,          .to_rows = q_to_rows, .narrow = q_narrow, .rows = q_rows,
                                   .scan = q_scan,        .sync = q_flush,      .mark = q_mark,     .span_ms = q_span_ms,
                                   .wait = q_wait};

/* Generated rows (multi-hot lists of ids) parsed into a raw block. */
static rec_raw_block raw_rows(int64_t n, uint64_t seed) {
    rec_gen_opts o;
    rec_gen_opts_default(&o);
    o.seed = seed, o.multi_hot = 1, o.scale = 0.001;
    rec_gen *g = NULL;
    rec_raw_block raw = {0};
    if (rec_gen_init(&g, &o, n) != REC_OK) return raw;
    const size_t cap = rec_gen_max_row_bytes(g) * (size_t)n;
    char *text = malloc(cap);
    size_t len = 0;
    rec_tsv_opts t = {0};
    t.has_label = 1;
    rec_bad_report bad = {0};
    if (rec_gen_rows(g, 0, n, text, cap, &len, NULL) != REC_OK || rec_raw_block_init(&raw, n) != REC_OK ||
        rec_tsv_parse(&t, "gen.tsv", text, len, 1, &raw, &bad) != REC_OK)
        fprintf(stderr, "generating rows: %s\n", rec_errmsg());
    free(text);
    rec_gen_free(g);
    return raw;
}

static int same_batch(const rec_batch *a, const rec_batch *b) {
    if (a->n != b->n || a->n_dense != b->n_dense || a->n_sparse != b->n_sparse) return 0;
    if (memcmp(a->label, b->label, sizeof(float) * (size_t)a->n) ||
        memcmp(a->dense, b->dense, sizeof(float) * (size_t)(a->n * a->n_dense)))
        return 0;
    for (int f = 0; f < a->n_sparse; f++) { /* the ids' values (the GPU executor narrows them where they fit) */
        const rec_jagged *x = &a->sparse[f], *y = &b->sparse[f];
        if (memcmp(x->offsets, y->offsets, sizeof(int64_t) * (size_t)(a->n + 1))) return 0;
        for (int64_t k = 0; k < x->offsets[a->n]; k++)
            if (rec_jagged_id(x, k) != rec_jagged_id(y, k)) return 0;
    }
    return 1;
}

/* A co-run plan for the parity runs: stage capacities in members (each member's latency 1). */
typedef struct corun_case {
    const double *capacity;
    int n_stages;
    int64_t step_rows; /* rec_corun_set_step_rows (0: whole blocks) */
} corun_case;

static double by_members(const rec_fused_kernel *k, int first, int n, void *ctx) {
    (void)k, (void)first, (void)ctx;
    return n;
}

/* What the queued backend ran for a co-run of `rows` rows in blocks of `block`: the first
 * block's kernels whole (timed for the predictor), then the rest a step's rows at a time, each
 * piece of rows the plan's pieces, a wait for stage s's event before stage s's. */
static int corun_log_ok(const rec_fusion *fu, const rec_corun_plan *p, int64_t rows, int64_t block, int64_t step) {
    int want[4096], n = 0;
    for (int k = 0; k < fu->n_kernels && n < 4096; k++) want[n++] = fu->kernels[k].n;
    const int64_t first = rows < block ? rows : block, sub = step > 0 && step < block ? step : block;
    const int64_t gated = (rows - first + sub - 1) / sub;
    for (int64_t b = 0; b < gated; b++)
        for (int st = 0; st < p->n_stages; st++) {
            if (p->at[st] < p->at[st + 1] && n < 4096) want[n++] = -1 - st;
            for (int i = p->at[st]; i < p->at[st + 1] && n < 4096; i++) want[n++] = p->pieces[i].n;
        }
    if (n != g_queue.n_log || memcmp(want, g_queue.log, sizeof(int) * (size_t)n)) {
        fprintf(stderr, "co-run: %d waits and launches ran, %d planned\n", g_queue.n_log, n);
        return 0;
    }
    return 1;
}

/* With cc, the GPU executor follows a co-run plan made from cc (its events are bytes of a
 * buffer: the queued backend logs which), and its first block is timed for the predictor. */
static rec_status attach_corun(rec_gexec *g, const rec_fusion *fu, const corun_case *cc, char *events, rec_corun **c,
                               rec_corun_plan *p) {
    void *ev[16];
    for (int k = 0; k < cc->n_stages; k++) ev[k] = events + k;
    REC_TRY(rec_corun_schedule(fu, cc->capacity, cc->n_stages, by_members, NULL, p));
    REC_TRY(rec_corun_new(c, cc->n_stages, ev));
    rec_corun_set_step_rows(*c, cc->step_rows);
    REC_TRY(rec_corun_set_plan(*c, p));
    rec_gexec_corun(g, *c);
    g_queue.events = events, g_queue.n_log = 0;
    return REC_OK;
}

/* The corun holds the first block's measurements: a sample a kernel, a value count an op. */
static rec_status corun_measured_ok(rec_corun *c, const rec_fusion *fu, int64_t rows) {
    const double *vpr;
    const float *X;
    const double *ms;
    int64_t r, n;
    if (!rec_corun_measured(c, &vpr, &r, &X, &ms, &n) || r != rows || n != fu->n_kernels)
        return rec_errorf(REC_EINVAL, "co-run: %lld kernels measured on blocks of %lld rows (want %d of %lld)",
                          (long long)n, (long long)r, fu->n_kernels, (long long)rows);
    for (int64_t i = 0; i < n; i++)
        if (!(ms[i] >= 0) || X[i * REC_LAT_FEATURES + 7] != (float)rows)
            return rec_errorf(REC_EINVAL, "co-run: sample %lld: %g ms, batch %g", (long long)i, ms[i],
                              (double)X[i * REC_LAT_FEATURES + 7]);
    return REC_OK;
}

/* The spec run both ways over the raw rows, in blocks of `block` rows (the GPU executor) and of
 * the CPU executor's own. Returns 1 when the batches are equal. */
static int parity_corun(rec_spec *s, const rec_raw_block *raw, int64_t block, const char *name, const rec_gback *be,
                        const corun_case *cc) {
    rec_vocab_set vs = {0};
    rec_prep_plan *plan = NULL;
    rec_prep_ws *ws = NULL;
    rec_status st = REC_OK;
    if (s->n_vocabs) { /* the counting pass, as rectrain prep makes it */
        rec_vocab_counts *c = NULL;
        st = rec_vocab_counts_init(&c, s);
        if (!st) st = rec_prep_plan_init(&plan, s, NULL);
        if (!st) st = rec_prep_ws_init(&ws, plan);
        if (!st) st = rec_prep_count(plan, ws, raw, 0, raw->n, c);
        if (!st) st = rec_vocab_counts_finish(c, s, &vs);
        if (!st) st = rec_spec_bind_vocabs(s, &vs);
        rec_vocab_counts_free(c);
        rec_prep_ws_free(ws), rec_prep_plan_free(plan);
        ws = NULL, plan = NULL;
    }
    rec_batch want = {0}, got = {0};
    rec_fusion fu = {0};
    rec_gexec *g = NULL;
    if (!st) st = rec_prep_plan_init(&plan, s, s->n_vocabs ? &vs : NULL);
    if (!st) st = rec_prep_ws_init(&ws, plan);
    if (!st) st = rec_batch_init(&want, raw->n, s->n_dense, s->n_sparse, 4);
    if (!st) st = rec_batch_init(&got, raw->n, s->n_dense, s->n_sparse, 4);
    if (!st) st = rec_prep_run(plan, ws, raw, 0, raw->n, &want);
    if (!st) st = rec_prep_fuse(s, NULL, &fu);
    if (!st) st = rec_gexec_init(&g, s, &fu, s->n_vocabs ? &vs : NULL, be, block);
    rec_corun *c = NULL;
    rec_corun_plan cp = {0};
    char events[16];
    if (!st && cc) st = attach_corun(g, &fu, cc, events, &c, &cp);
    if (!st) st = rec_gexec_run(g, raw, 0, raw->n, &got);
    if (!st && c) st = corun_measured_ok(c, &fu, raw->n < block ? raw->n : block);
    if (!st && c && be == &g_queued && !corun_log_ok(&fu, &cp, raw->n, block, cc->step_rows))
        st = rec_errorf(REC_EINVAL, "the co-run plan was not followed");
    rec_corun_plan_free(&cp);
    rec_corun_free(c);
    if (!st && be->mark && !cc && !(rec_gexec_ops_ms(g) > 0))
        st = rec_errorf(REC_EINVAL, "the operators were not timed (%g ms)", rec_gexec_ops_ms(g));
    /* where no id overruns int32, every feature whose table allows int32 ids holds them so */
    int overrun = 0, narrow = 1;
    for (int f = 0; !st && f < want.n_sparse; f++)
        for (int64_t k = 0; k < want.sparse[f].offsets[want.n]; k++)
            overrun |= rec_jagged_id(&want.sparse[f], k) != (int32_t)rec_jagged_id(&want.sparse[f], k);
    for (int f = 0; !st && !overrun && f < got.n_sparse; f++)
        narrow &= rec_ids_wide(rec_spec_table_rows(s, f)) || !got.sparse[f].wide;
    if (!st && !narrow) st = rec_errorf(REC_EINVAL, "ids that fit came back as int64");
    const int ok = !st && same_batch(&want, &got);
    if (st) fprintf(stderr, "%s (%s backend): %s\n", name, be->name, rec_errmsg());
    else if (!ok) fprintf(stderr, "%s: the GPU executor's batch (%s backend) differs from the CPU executor's\n", name, be->name);
    rec_gexec_free(g);
    rec_fusion_free(&fu);
    rec_batch_free(&want), rec_batch_free(&got);
    rec_prep_ws_free(ws), rec_prep_plan_free(plan);
    if (s->n_vocabs) rec_vocab_set_free(&vs);
    return ok;
}

static int parity(rec_spec *s, const rec_raw_block *raw, int64_t block, const char *name, const rec_gback *be) {
    return parity_corun(s, raw, block, name, be, NULL);
}

/* Co-running (RAP Algorithm 1): the executor cuts its kernels into the plan's pieces, waits
 * for each stage's event before its pieces, and gives the same batches; a plan that does not
 * fit its fusion plan is refused, naming the piece. */
static void test_corun(const rec_raw_block *raw, const rec_gback *be) {
    const char *names[] = {"criteo_rap", "criteo_heavy"};
    static const double caps[3][4] = {{2.5, 0, 7, 3}, {1, 1, 1, 1}, {0, 0, 0, 0}};
    static const int64_t step_rows[3] = {0, 300, 1000}; /* whole blocks of 777; pieces of 300 */
    for (int c = 0; c < 2; c++) {
        char path[256];
        snprintf(path, sizeof path, "%s/configs/%s.json", getenv("REC_SOURCE_DIR") ? getenv("REC_SOURCE_DIR") : "..", names[c]);
        rec_spec *s = NULL;
        CHECK(rec_spec_load(&s, path) == REC_OK, "%s", rec_errmsg());
        for (int k = 0; s && k < 3; k++) {
            const corun_case cc = {caps[k], 4, step_rows[k]};
            CHECK(parity_corun(s, raw, 777, names[c], be, &cc), "%s: co-run plan %d (%s backend): the CPU executor's "
                  "batch", names[c], k, be->name);
        }
        rec_spec_free(s);
    }
    /* a plan that does not fit the fusion plan: refused by the executor, naming the piece */
    char path[256];
    snprintf(path, sizeof path, "%s/configs/criteo_standard.json", getenv("REC_SOURCE_DIR") ? getenv("REC_SOURCE_DIR") : "..");
    rec_spec *s = NULL;
    rec_fusion fu = {0};
    rec_gexec *g = NULL;
    rec_batch b = {0};
    rec_corun_plan p = {0}, q = {0};
    rec_corun *c = NULL;
    void *ev[2] = {NULL, NULL};
    const double room[3] = {1e9, 1e9, 1e9};
    rec_status st = rec_spec_load(&s, path);
    if (!st) st = rec_prep_fuse(s, NULL, &fu);
    if (!st) st = rec_gexec_init(&g, s, &fu, NULL, be, 500);
    if (!st) st = rec_batch_init(&b, raw->n, s->n_dense, s->n_sparse, 4);
    if (!st) st = rec_corun_schedule(&fu, room, 2, by_members, NULL, &p); /* every kernel whole, in stage 0 */
    if (!st) st = rec_corun_schedule(&fu, room, 3, by_members, NULL, &q);
    if (!st) st = rec_corun_new(&c, 2, ev);
    CHECK(st == REC_OK && p.n_pieces > 1 && p.pieces[0].n > 1, "%s", rec_errmsg());
    if (!st && p.n_pieces > 1 && p.pieces[0].n > 1) {
        p.pieces[0].n--; /* kernel 0's last member in no piece */
        CHECK(rec_corun_set_plan(c, &p) == REC_OK, "%s", rec_errmsg());
        rec_gexec_corun(g, c);
        for (int k = 0; k < 2; k++) { /* and again: a refused plan is not dropped */
            const rec_status bad = rec_gexec_run(g, raw, 0, 10, &b);
            CHECK_ERR(bad, REC_EINVAL, "spec 'criteo_standard': co-run plan: piece 1 runs members");
        }
        p.pieces[0].n++;
        const rec_corun_piece t = p.pieces[0];
        p.pieces[0] = p.pieces[1], p.pieces[1] = t; /* out of order */
        CHECK_ERR(rec_corun_plan_check(&p, &fu), REC_EINVAL, "piece 0 runs members");
        p.pieces[1] = p.pieces[0], p.pieces[0] = t;
        CHECK(rec_corun_plan_check(&p, &fu) == REC_OK, "%s", rec_errmsg());
        p.n_pieces--, p.at[1]--, p.at[2]--; /* the last kernel dropped */
        CHECK_ERR(rec_corun_plan_check(&p, &fu), REC_EINVAL, "are in no piece");
        p.n_pieces++, p.at[1]++, p.at[2]++;
        CHECK_ERR(rec_corun_set_plan(c, &q), REC_EINVAL, "a plan of 3 stages for training of 2");
    }
    rec_corun_plan_free(&p), rec_corun_plan_free(&q);
    rec_corun_free(c);
    rec_batch_free(&b);
    rec_gexec_free(g);
    rec_fusion_free(&fu);
    rec_spec_free(s);
}

/* ---- the co-run driver of training (src/train/rap.c) on a simulated GPU --------------------
 * The model's ten stages (parts after the input) in RAP's four layers: [0], [1, 5), [5, 8),
 * [8, 10). A probe beside a layer lengthens it by what exceeds the layer's true capacity; a
 * step's times come back one step call later, as the GPU model's do. */
typedef struct sim_gpu {
    char events[REC_CUDA_CORUN_STAGES];
    double part[REC_CUDA_CORUN_STAGES], cap[4], extra[4]; /* extra: each layer's lengthening once planned */
    int probe; double probe_ms;                            /* armed for the next step */
    double done[REC_CUDA_CORUN_STAGES]; int done_probe, fresh, have_prev;
    double prev[REC_CUDA_CORUN_STAGES]; int prev_probe;
    int planned;
} sim_gpu;
static const int LAYER[5] = {0, 1, 5, 8, 10};

static rec_status sim_corun(void *ctx, void **events) {
    sim_gpu *g = ctx;
    for (int s = 0; s < REC_CUDA_CORUN_STAGES; s++) events[s] = g->events + s;
    return REC_OK;
}
static rec_status sim_probe(void *ctx, int stage, double ms) {
    sim_gpu *g = ctx;
    g->probe = stage, g->probe_ms = ms;
    return REC_OK;
}
static int sim_stage_times(void *ctx, double *ms, int *probe) {
    sim_gpu *g = ctx;
    if (!g->fresh) return 0;
    memcpy(ms, g->done, sizeof g->done), *probe = g->done_probe, g->fresh = 0;
    return 1;
}
static void sim_step(sim_gpu *g, int64_t t) {
    double now[REC_CUDA_CORUN_STAGES];
    for (int s = 0; s < REC_CUDA_CORUN_STAGES; s++) now[s] = g->part[s] * (1 + 0.002 * (double)(t % 3));
    for (int k = 0; k < 4; k++) {
        if (g->probe == LAYER[k] && g->probe_ms > g->cap[k]) now[LAYER[k]] += g->probe_ms - g->cap[k];
        if (g->planned) now[LAYER[k]] += g->extra[k];
    }
    if (g->have_prev) memcpy(g->done, g->prev, sizeof g->prev), g->done_probe = g->prev_probe, g->fresh = 1;
    memcpy(g->prev, now, sizeof now), g->prev_probe = g->probe, g->have_prev = 1;
}

/* Trains `steps` simulated steps under a co-run driver, an executor (the CPU backend) beside
 * it running its first block at step `block_at`; the driver's figures at the end, the step at
 * which it planned (-1 never), and the executor's batch of the rows with the plan against the
 * ungated one. */
static rec_status drive(sim_gpu *sim, const rec_spec *s, const rec_raw_block *raw, const char *cap_path, const char *key,
                        int64_t steps, int64_t block_at, rec_rap_result *res, int64_t *planned_at) {
    const rec_rap_gpu gpu = {sim, sim_corun, sim_probe, sim_stage_times};
    rec_rap *r = NULL;
    rec_gexec *g = NULL;
    rec_fusion fu = {0};
    rec_batch b = {0}, want = {0};
    *planned_at = -1;
    sim->planned = 0, sim->probe = -1, sim->fresh = sim->have_prev = 0;
    rec_status st = rec_rap_new(&r, &gpu, s, 16384, cap_path, key, NULL);
    if (!st) st = rec_prep_fuse(s, NULL, &fu);
    if (!st) st = rec_gexec_init(&g, s, &fu, NULL, &rec_gback_cpu, 1000);
    if (!st) st = rec_batch_init(&b, raw->n, s->n_dense, s->n_sparse, 4);
    if (!st) st = rec_batch_init(&want, raw->n, s->n_dense, s->n_sparse, 4);
    if (!st) rec_gexec_corun(g, rec_rap_corun(r));
    for (int64_t t = 0; !st && t < steps; t++) {
        st = rec_rap_before_step(r);
        sim->planned = *planned_at >= 0;
        sim_step(sim, t);
        if (!st && t == block_at) { /* the executor's first block: timed for the predictor */
            rec_rap_report(r, res);
            CHECK(!res->planned, "no plan before the kernels are timed");
            st = rec_gexec_run(g, raw, 0, 1000, &b);
        }
        if (!st) st = rec_rap_after_step(r);
        rec_rap_report(r, res);
        if (res->planned && *planned_at < 0) *planned_at = t;
    }
    /* the executor follows the plan from its next block: the same rows as ungated */
    b.n = 0;
    if (!st) st = rec_gexec_run(g, raw, 0, 3000, &b);
    if (g) rec_gexec_corun(g, NULL);
    if (!st) st = rec_gexec_run(g, raw, 0, 3000, &want);
    if (!st && !same_batch(&want, &b)) st = rec_errorf(REC_EINVAL, "following the plan, another batch");
    rec_batch_free(&b), rec_batch_free(&want);
    rec_gexec_free(g);
    rec_fusion_free(&fu);
    rec_rap_free(r);
    return st;
}

static void test_driver(const rec_raw_block *raw) {
    char path[256], dir[] = "/tmp/rectrain-corun-XXXXXX", cap[300];
    snprintf(path, sizeof path, "%s/configs/criteo_standard.json", getenv("REC_SOURCE_DIR") ? getenv("REC_SOURCE_DIR") : "..");
    sim_gpu sim = {.part = {0.4, 0.2, 0.1, 0.3, 0.005, 1.5, 0.4, 0.3, 0.8, 0.05}, .cap = {0.1, 0.3, 1.2, 0.5},
                   .extra = {0, 0, 0.2, 0}};
    const double layer_ms[4] = {0.4, 0.605, 2.2, 0.85};
    rec_spec *s = NULL;
    CHECK(rec_spec_load(&s, path) == REC_OK && mkdtemp(dir), "%s", rec_errmsg());
    if (!s) return;
    snprintf(cap, sizeof cap, "%s/cap.json", dir);
    rec_rap_result res, again;
    int64_t planned_at, planned_again;
    rec_status st = drive(&sim, s, raw, cap, "gpu A", 300, 10, &res, &planned_at);
    CHECK(st == REC_OK, "%s", rec_errmsg());
    CHECK(planned_at == rec_rap_probe_steps() - 1, "the plan made after step %lld (the search takes %d steps)",
          (long long)planned_at, rec_rap_probe_steps());
    for (int k = 0; k < 4; k++)
        CHECK(fabs(res.capacity_ms[k] - sim.cap[k]) <= layer_ms[k] * (0.03 + 1.0 / 32 + 0.01),
              "layer %d: capacity %g ms measured, %g true", k, res.capacity_ms[k], sim.cap[k]);
    /* measured: layer 2 took 0.2 ms longer following the plan */
    CHECK(res.steps == 300 - planned_at - 2 - 8 && fabs(res.exposed_ms - 0.2) < 0.01 && res.predicted_ms >= 0,
          "%lld steps followed the plan, %g ms exposed (0.2 added), %g predicted", (long long)res.steps, res.exposed_ms,
          res.predicted_ms);
    /* the capacities kept: the next run of the same key plans once its kernels are timed */
    st = drive(&sim, s, raw, cap, "gpu A", 40, 0, &again, &planned_again);
    CHECK(st == REC_OK && planned_again == 0 && !memcmp(again.capacity_ms, res.capacity_ms, sizeof res.capacity_ms),
          "capacities read back, bit for bit (layer 2: %.17g, was %.17g), planned at step %lld: status %d",
          again.capacity_ms[2], res.capacity_ms[2], (long long)planned_again, st);
    st = drive(&sim, s, raw, cap, "gpu B", 1, 0, &again, &planned_again);
    CHECK_ERR(st, REC_EINVAL, "$.key: measured for \"gpu A\", and this run is \"gpu B\"");
    static const char *const bad[][2] = {
        {"{", "not valid JSON"},
        {"{'format': 'x'}", "$.format"},
        {"{'format': 'rectrain-corun-capacity', 'version': 2}", "$.version"},
        {"{'format': 'rectrain-corun-capacity', 'version': 1, 'key': 'gpu A', 'stages': []}", "$.stages: want an array"},
        {"{'format': 'rectrain-corun-capacity', 'version': 1, 'key': 'gpu A', 'stages': [{'name': 'embedding fwd', "
         "'capacity_ms': 0.1, 'base_ms': 0.4}, {'name': 'x'}, {}, {}]}", "$.stages[1].name"},
        {"{'format': 'rectrain-corun-capacity', 'version': 1, 'key': 'gpu A', 'stages': [{'name': 'embedding fwd', "
         "'capacity_ms': 0.5, 'base_ms': 0.4}, {}, {}, {}]}", "$.stages[0].capacity_ms: want 0 to base_ms"},
        {"{'format': 'rectrain-corun-capacity', 'version': 1, 'key': 'gpu A', 'stages': [{'name': 'embedding fwd', "
         "'capacity_ms': 0, 'base_ms': -1}, {}, {}, {}]}", "$.stages[0].base_ms: want the stage's time"}};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        FILE *f = fopen(cap, "w");
        for (const char *c = bad[k][0]; f && *c; c++) fputc(*c == '\'' ? '"' : *c, f);
        if (f) fclose(f);
        st = drive(&sim, s, raw, cap, "gpu A", 1, 0, &again, &planned_again);
        CHECK_ERR(st, REC_EINVAL + (k < 2) * (REC_EFORMAT - REC_EINVAL), bad[k][1]);
    }
    unlink(cap), rmdir(dir);
    rec_spec_free(s);
}

/* A copy back that fails mid-run: the run returns its error, after waiting for the copies and
 * kernels queued before it (they read the pinned stage, which the next run overwrites). */
static void test_failed_run(const rec_raw_block *raw) {
    char path[256];
    snprintf(path, sizeof path, "%s/configs/criteo_standard.json", getenv("REC_SOURCE_DIR") ? getenv("REC_SOURCE_DIR") : "..");
    rec_spec *s = NULL;
    rec_batch b = {0};
    rec_fusion fu = {0};
    rec_gexec *g = NULL;
    rec_status st = rec_spec_load(&s, path);
    if (!st) st = rec_batch_init(&b, raw->n, s->n_dense, s->n_sparse, 4);
    if (!st) st = rec_prep_fuse(s, NULL, &fu);
    if (!st) st = rec_gexec_init(&g, s, &fu, NULL, &g_queued, 500);
    CHECK(st == REC_OK, "%s", rec_errmsg());
    if (!st) {
        g_queue.fail_get = 3;
        st = rec_gexec_run(g, raw, 0, raw->n, &b);
        CHECK(st == REC_EIO && strstr(rec_errmsg(), "injected: a copy back failed") && g_queue.n == 0,
              "a failed run keeps its error (%d: %s) and leaves nothing queued (%d)", st, rec_errmsg(), g_queue.n);
        g_queue.fail_get = 0;
        b.n = 0;
        CHECK(rec_gexec_run(g, raw, 0, raw->n, &b) == REC_OK && b.n == raw->n, "the next run: %s", rec_errmsg());
    }
    rec_gexec_free(g);
    rec_fusion_free(&fu);
    rec_batch_free(&b);
    rec_spec_free(s);
}

static void test_shipped(const rec_raw_block *raw, const rec_gback *be) {
    const char *names[] = {"criteo_standard", "criteo_vocab", "criteo_terabyte", "criteo_rap", "criteo_heavy"};
    for (int c = 0; c < 5; c++) {
        char path[256];
        snprintf(path, sizeof path, "%s/configs/%s.json", getenv("REC_SOURCE_DIR") ? getenv("REC_SOURCE_DIR") : "..", names[c]);
        rec_spec *s = NULL;
        CHECK(rec_spec_load(&s, path) == REC_OK, "%s", rec_errmsg());
        if (!s) continue;
        CHECK(parity(s, raw, 777, names[c], be), "%s: the GPU executor (%s backend, blocks of 777 rows) gives the CPU "
              "executor's batch", names[c], be->name);
        rec_spec_free(s);
    }
}

/* Every operator on values that exercise it (logit on (0, 1), onehot out of range, clamp on
 * onehot rows, concatenated scalars and lists, nodes read by two chains, pass-through
 * features of f32 and of ids, f32 fill_null, casts both ways, categorify). */
static const char EVERY_OP[] =
    "{'format': 'rectrain-prep', 'version': 1, 'name': 'every_op', 'tables': {'bk': {'rows': 6}, 'mp': {'rows': 3}, "
    "'cs': {'rows': 10}, 'ng': {'rows': 100}, 'n1x': {'rows': 1000}, 'ptx': {'rows': 50}, 'raw5': {'rows': 1000}, "
    "'vc': {'rows': 'auto'}}, "
    "'nodes': [{'name': 'n1', 'inputs': ['C1', 'C2', 'I8'], 'ops': [{'op': 'fill_null', 'value': 0}, "
    "{'op': 'sigrid_hash', 'salt': 3, 'max_value': 1000}]}, {'name': 'pt', 'input': 'n1'}, "
    "{'name': 'ff', 'input': 'I9', 'ops': [{'op': 'cast', 'to': 'f32'}, {'op': 'fill_null', 'value': 0.5}, {'op': 'log1p'}]}], "
    "'dense': [{'name': 'lg', 'input': 'I2', 'ops': [{'op': 'fill_null', 'value': 0}, {'op': 'clamp', 'min': 1}, "
    "{'op': 'cast', 'to': 'f32'}, {'op': 'boxcox', 'lambda': -1}, {'op': 'logit', 'eps': 1e-6}]}, "
    "{'name': 'bc', 'input': 'I3', 'ops': [{'op': 'fill_null', 'value': 0}, {'op': 'cast', 'to': 'f32'}, "
    "{'op': 'boxcox', 'lambda': 0.25}, {'op': 'clamp', 'min': -1, 'max': 3.5}]}, "
    "{'name': 'oh', 'input': 'I4', 'ops': [{'op': 'fill_null', 'value': 0}, {'op': 'clamp', 'min': 0}, {'op': 'cast', 'to': 'f32'}, "
    "{'op': 'log1p'}, {'op': 'onehot', 'num_class': 5, 'min': 0, 'max': 8}, {'op': 'clamp', 'min': 0, 'max': 0.5}]}, "
    "{'name': 'd_pt', 'input': 'ff'}], "
    "'sparse': [{'name': 'bk', 'input': 'I5', 'table': 'bk', 'ops': [{'op': 'fill_null', 'value': 0}, {'op': 'cast', 'to': 'f32'}, "
    "{'op': 'log1p'}, {'op': 'bucketize', 'borders': [0.5, 1, 1, 2, 4]}]}, "
    "{'name': 'mp', 'input': 'I6', 'table': 'mp', 'ops': [{'op': 'fill_null', 'value': -3}, {'op': 'map_id', 'map': [2, 0, 1]}]}, "
    "{'name': 'cs', 'input': 'I7', 'table': 'cs', 'ops': [{'op': 'fill_null', 'value': 0}, {'op': 'cast', 'to': 'f32'}, "
    "{'op': 'cast', 'to': 'i64'}, {'op': 'modulo', 'divisor': 10}]}, "
    "{'name': 'ng', 'input': 'n1', 'table': 'ng', 'ops': [{'op': 'ngram', 'n': 2}, {'op': 'firstx', 'x': 5}, "
    "{'op': 'modulo', 'divisor': 100}]}, "
    "{'name': 'n1x', 'input': 'n1', 'table': 'n1x', 'ops': [{'op': 'firstx', 'x': 1}, {'op': 'clamp', 'min': 0, 'max': 999}]}, "
    "{'name': 'ptx', 'input': 'pt', 'table': 'ptx', 'ops': [{'op': 'modulo', 'divisor': 50}]}, "
    "{'name': 'raw5', 'input': 'pt', 'table': 'raw5'}, "
    "{'name': 'vc', 'input': 'C3', 'table': 'vc', 'ops': [{'op': 'fill_null', 'value': 0}, {'op': 'categorify', 'min_count': 2}]}]}";

/* A spec written with single quotes (readable in C), parsed; NULL (reported) on an error. */
static rec_spec *quoted_spec(const char *text, const char *name) {
    char *q = strdup(text);
    for (char *p = q; *p; p++)
        if (*p == '\'') *p = '"';
    rec_spec *s = NULL;
    CHECK(rec_spec_parse(&s, q, strlen(q), name) == REC_OK, "%s", rec_errmsg());
    free(q);
    return s;
}

static void test_every_op(const rec_raw_block *raw, const rec_gback *be) {
    rec_spec *s = quoted_spec(EVERY_OP, "every_op.json");
    if (!s) return;
    int64_t blocks[3] = {1, 64, 3000};
    for (int k = 0; k < 3; k++)
        CHECK(parity(s, raw, blocks[k], "every_op", be), "every operator, %s backend, blocks of %lld rows: the CPU "
              "executor's batch", be->name, (long long)blocks[k]);
    rec_spec_free(s);
}

/* Ids that overrun int32 in a table that would hold int32 ids (a spec cannot say so: its check
 * bounds the ids by the table; here the table is shrunk after the check): that feature of a
 * block holding one comes back as int64, so its batch has narrow and widened blocks (map_id
 * sends one input value to 3e9; blocks of 1 and 64 rows hold it or not), the other features
 * stay narrow, and the values are the CPU executor's. Narrow where they fit: parity() checks
 * every batch. Integer inputs only, no dense outputs: no lists, so the first copy back is
 * empty (it does not wait), and the raw columns' copy in (I1's first rows lead the stage)
 * must not be touched before it has run. */
static void test_narrowing(const rec_raw_block *raw, const rec_gback *be) {
    static const char SPEC[] =
        "{'format': 'rectrain-prep', 'version': 1, 'name': 'overrun', 'tables': {'big': {'rows': 3000000001}, 'ok': {'rows': 7}}, "
        "'dense': [], 'sparse': [{'name': 'big', 'input': 'I6', 'table': 'big', 'ops': [{'op': 'fill_null', 'value': 0}, "
        "{'op': 'modulo', 'divisor': 4}, {'op': 'map_id', 'map': [0, 3000000000, 5, 6]}]}, "
        "{'name': 'ok', 'input': 'I2', 'table': 'ok', 'ops': [{'op': 'fill_null', 'value': 0}, {'op': 'modulo', 'divisor': 7}]}, "
        "{'name': 'i1', 'input': 'I1', 'table': 'ok', 'ops': [{'op': 'fill_null', 'value': 0}, {'op': 'modulo', 'divisor': 7}]}]}";
    rec_spec *s = quoted_spec(SPEC, "overrun.json");
    for (int t = 0; s && t < s->n_tables; t++)
        if (!strcmp(s->tables[t].name, "big")) s->tables[t].rows = 1000;
    for (int64_t block = 1; s && block <= 4096; block *= 64)
        CHECK(parity(s, raw, block, "overrun", be), "ids beyond int32 in a narrow table, %s backend, blocks of %lld rows: "
              "the CPU executor's values", be->name, (long long)block);
    /* the widths: the overrun feature wide, the others narrow; and it did overrun */
    rec_fusion fu = {0};
    rec_gexec *g = NULL;
    rec_batch b = {0};
    rec_status st = s ? rec_prep_fuse(s, NULL, &fu) : REC_EINVAL;
    if (!st) st = rec_gexec_init(&g, s, &fu, NULL, be, 64);
    if (!st) st = rec_batch_init(&b, raw->n, s->n_dense, s->n_sparse, 4);
    if (!st) st = rec_gexec_run(g, raw, 0, raw->n, &b);
    int64_t big = 0;
    for (int64_t k = 0; !st && k < b.sparse[0].offsets[b.n]; k++) big += rec_jagged_id(&b.sparse[0], k) == 3000000000LL;
    CHECK(!st && b.sparse[0].wide && !b.sparse[1].wide && !b.sparse[2].wide && big > 0,
          "%s backend: the overrun feature wide (%d), the others narrow (%d %d), %lld ids of 3e9 (%s)", be->name,
          st ? -1 : b.sparse[0].wide, st ? -1 : b.sparse[1].wide, st ? -1 : b.sparse[2].wide, (long long)big,
          st ? rec_errmsg() : "");
    rec_batch_free(&b);
    rec_gexec_free(g);
    rec_fusion_free(&fu);
    rec_spec_free(s);
}

/* rectrain prep through the GPU executor (its CPU backend) writes the shard the CPU executor
 * writes, byte for byte, with its counting pass; --device cuda without a GPU says why. */
static void test_ingest(void) {
    const char *tsv = "/tmp/rec_gprep_in.tsv", *a = "/tmp/rec_gprep_cpu.rshard", *b = "/tmp/rec_gprep_gpu.rshard";
    rec_gen_opts go;
    rec_gen_opts_default(&go);
    go.multi_hot = 1, go.scale = 0.001;
    CHECK(rec_gen_write(&go, 20000, tsv, NULL, 2, NULL) == REC_OK, "%s", rec_errmsg());
    const char *names[] = {"criteo_rap", "criteo_heavy"};
    for (int c = 0; c < 2; c++) {
        char spec[256];
        snprintf(spec, sizeof spec, "%s/configs/%s.json", getenv("REC_SOURCE_DIR") ? getenv("REC_SOURCE_DIR") : "..", names[c]);
        const char *in[1] = {tsv};
        rec_ingest_opts o = {0};
        o.spec_path = spec, o.in_paths = in, o.n_in = 1, o.threads = 2, o.tsv.has_label = -1;
        rec_ingest_report rep;
        o.out_path = a;
        CHECK(rec_ingest(&o, &rep) == REC_OK && rep.rows == 20000, "%s", rec_errmsg());
        o.out_path = b, o.device = REC_PREP_GPU_EMULATED;
        CHECK(rec_ingest(&o, &rep) == REC_OK && rep.rows == 20000, "%s", rec_errmsg());
        char cmd[600], out[256];
        snprintf(cmd, sizeof cmd, "cmp %s %s 2>&1", a, b);
        CHECK(check_capture(cmd, out, sizeof out) == 0, "%s: prep through the GPU executor writes the CPU executor's "
              "shard: %s", names[c], out);
        rec_gback cu;
        if (c == 0 && rec_gback_cuda(&cu) != REC_OK) {
            o.device = REC_PREP_CUDA;
            CHECK(rec_ingest(&o, &rep) == REC_EUNSUPPORTED && strstr(rec_errmsg(), "GPU"), "--device cuda without a "
                  "usable GPU: %s", rec_errmsg());
        } else if (c == 0) {
            rec_gback_cuda_free(&cu);
        }
    }
    remove(tsv), remove(a), remove(b);
    if (getenv("REC_CLI")) {
        char cmd[600], out[1024];
        snprintf(cmd, sizeof cmd, "%s prep --spec x.json --in x.tsv --out x.rshard --device tpu 2>&1", getenv("REC_CLI"));
        CHECK(check_capture(cmd, out, sizeof out) == 2 && strstr(out, "--device takes cpu or cuda (got 'tpu')"), "%s", out);
        snprintf(cmd, sizeof cmd, "%s bench prep --latencies x.tsv 2>&1", getenv("REC_CLI"));
        CHECK(check_capture(cmd, out, sizeof out) == 2 && strstr(out, "add --device cuda"), "%s", out);
        snprintf(cmd, sizeof cmd, "%s bench prep --rows 2000 --reps 1 --threads 2 --multi-hot --parsed 2>&1", getenv("REC_CLI"));
        CHECK(check_capture(cmd, out, sizeof out) == 0 && strstr(out, "the ops alone timed") && strstr(out, "2    cpu"),
              "bench prep --parsed: %s", out);
        snprintf(cmd, sizeof cmd, "%s bench prep --rows 2000 --reps 1 --device cuda 2>&1", getenv("REC_CLI"));
        rec_gback cu;
        if (rec_gback_cuda(&cu) != REC_OK)
            CHECK(check_capture(cmd, out, sizeof out) == 1 && strstr(out, "GPU"), "bench prep --device cuda without a GPU: %s",
                  out);
        else
            rec_gback_cuda_free(&cu);
    }
}

/* The predictor's measurements on the CPU backend: every kernel of criteo_standard's plan and
 * of its shards, timed over the blocks, with the features of what they read. */
/* The executor's refusals: blocks out of range, categorify without vocabularies, a device set twice. */
static void test_refusals(void) {
    char path[256];
    snprintf(path, sizeof path, "%s/configs/criteo_vocab.json", getenv("REC_SOURCE_DIR") ? getenv("REC_SOURCE_DIR") : "..");
    rec_spec *s = NULL;
    rec_fusion fu = {0};
    rec_gexec *g = NULL;
    CHECK(rec_spec_load(&s, path) == REC_OK && rec_prep_fuse(s, NULL, &fu) == REC_OK, "%s", rec_errmsg());
    if (!s) return;
    CHECK_ERR(rec_gexec_init(&g, s, &fu, NULL, &rec_gback_cpu, 0), REC_EINVAL, "blocks of 0 rows; give 1 to");
    CHECK_ERR(rec_gexec_init(&g, s, &fu, NULL, &rec_gback_cpu, 64), REC_EINVAL,
              "spec 'criteo_vocab' has categorify ops but no vocabularies were given");
    CHECK(g == NULL, "no executor after a refusal");
    rec_prep_plan *plan = NULL;
    rec_prep_engine *e = NULL;
    rec_tsv_opts to = {0};
    to.has_label = 1;
    snprintf(path, sizeof path, "%s/configs/criteo_standard.json", getenv("REC_SOURCE_DIR") ? getenv("REC_SOURCE_DIR") : "..");
    rec_spec *st = NULL;
    CHECK(rec_spec_load(&st, path) == REC_OK && rec_prep_plan_init(&plan, st, NULL) == REC_OK &&
          rec_prep_engine_init(&e, plan, 1, &to, "t") == REC_OK && rec_prep_engine_set_device(e, REC_PREP_GPU_EMULATED) == REC_OK,
          "%s", rec_errmsg());
    if (e) CHECK_ERR(rec_prep_engine_set_device(e, REC_PREP_CUDA), REC_EINVAL, "the device is set once");
    rec_prep_engine_free(e);
    /* co-running: an engine on the CPU executor, a corun of no stages */
    rec_corun *c = NULL;
    void *ev[1] = {NULL};
    e = NULL;
    CHECK_ERR(rec_corun_new(&c, 0, ev), REC_EINVAL, "co-run: 0 training stages");
    CHECK(c == NULL && rec_corun_new(&c, 1, ev) == REC_OK && rec_prep_engine_init(&e, plan, 1, &to, "t") == REC_OK,
          "%s", rec_errmsg());
    if (e && c) CHECK_ERR(rec_prep_engine_corun(e, c), REC_EINVAL, "co-running with training needs the GPU executor");
    rec_corun_free(c);
    rec_prep_engine_free(e);
    rec_prep_plan_free(plan);
    rec_spec_free(st);
    rec_fusion_free(&fu);
    rec_spec_free(s);
}

static void test_collect(const rec_raw_block *raw) {
    char path[256];
    snprintf(path, sizeof path, "%s/configs/criteo_standard.json", getenv("REC_SOURCE_DIR") ? getenv("REC_SOURCE_DIR") : "..");
    rec_spec *s = NULL;
    float *X = NULL;
    double *ms = NULL;
    int64_t n = 0;
    CHECK(rec_spec_load(&s, path) == REC_OK && rec_gexec_collect(s, NULL, raw, &rec_gback_cpu, &X, &ms, &n) == REC_OK,
          "%s", rec_errmsg());
    /* 6 kernels, 16 sharded to 8, 104 to 1; over 3000 rows: 3 blocks of 1024 rows, then 1 */
    int ok = n == (6 + 16 + 104) * (3 + 1 + 1 + 1);
    for (int64_t i = 0; ok && i < n; i++) {
        const float *x = X + i * REC_LAT_FEATURES;
        ok = ms[i] > 0 && x[3] >= 1 && x[3] <= 26 && (x[7] == 1024 || x[7] == 952 || x[7] == 3000) && x[4] >= x[5] &&
             x[5] > 0;
    }
    CHECK(ok, "%lld samples of kernels, sharded kernels and blocks, each timed with its features", (long long)n);
    double med = 0, within = 0;
    CHECK(n < 10 || rec_lat_holdout(X, ms, n, 1, &med, &within) == REC_OK, "%s", rec_errmsg());
    printf("the CPU backend's kernels: the predictor's median relative error %.3f, %.0f%% within 10%%\n", med, 100 * within);
    free(X), free(ms);
    rec_spec_free(s);
}

/* ---- a row's lanes ---------------------------------------------------------------------------- */

enum { LN = 64, LV = 400 * LN }; /* rows; values a column holds at most (ngram 3 of 99 ids: 291 a row) */

/* A column of LN rows: lists of 0..99 ids (some rows null: which depends on the seed, and every
 * 5th in all), and LN x 40 floats. */
static void lane_col(rec_gcol *c, uint64_t seed) {
    rec_rng rng;
    rec_rng_seed(&rng, seed, 1);
    c->off[0] = 0;
    for (int r = 0; r < LN; r++) {
        c->null[r] = (r + seed) % 7 == 3 || r % 5 == 0; /* rows where some inputs are null, and all */
        const int len = (int)rec_rng_below(&rng, 100); /* null rows too: what lanes skip must have values */
        c->off[r + 1] = c->off[r] + len;
        for (int i = c->off[r]; i < c->off[r + 1]; i++) c->v[i] = (int64_t)rec_rng_below(&rng, 2000) - 1000;
    }
    for (int i = 0; i < LN * 40; i++) c->f[i] = (float)rec_rng_below(&rng, 1000) / 10.0f - 50.0f;
}

static rec_gcol lane_alloc(void) {
    rec_gcol c = {calloc(LV, sizeof(float)), calloc(LV, sizeof(float)), calloc(LV, sizeof(int64_t)),
                  calloc(LV, sizeof(int64_t)), calloc(LN + 1, sizeof(int32_t)), calloc(LN + 1, sizeof(int32_t)),
                  calloc(LN, 1)};
    return c;
}

static void lane_free(rec_gcol *c) { free(c->f), free(c->f2), free(c->v), free(c->v2), free(c->off), free(c->off2), free(c->null); }

/* op on columns 0 (its own) and 1, 2 (LOAD's other inputs), run a row at a time with one lane
 * and with `lanes` lanes each taking its share (the lanes of a row in turn, their flags last):
 * the same values, offsets and null flags. */
static int lanes_agree(const rec_gop *op, int lanes, int elem) {
    rec_gcol a[3], b[3];
    for (int k = 0; k < 3; k++) {
        a[k] = lane_alloc(), b[k] = lane_alloc();
        lane_col(&a[k], 10 + (uint64_t)k), lane_col(&b[k], 10 + (uint64_t)k);
    }
    rec_gcol *sets[2] = {a, b};
    for (int t = 0; t < 2; t++) {
        rec_gcol *c = sets[t];
        const int L = t ? lanes : 1;
        if (!elem) { /* the offsets: the counts' scan */
            c[0].off2[0] = 0;
            for (int r = 0; r < LN; r++) c[0].off2[r + 1] = c[0].off2[r] + rec_g_count(op, c, r);
        }
        for (int r = 0; r < LN; r++) {
            for (int l = 0; l < L; l++) {
                if (elem) rec_g_elem_part(op, c, r, l, L);
                else rec_g_write_part(op, c, r, l, L);
            }
            if (!elem) rec_g_write_flags(op, c, r);
        }
    }
    const int same = !memcmp(a[0].f, b[0].f, LV * sizeof(float)) && !memcmp(a[0].f2, b[0].f2, LV * sizeof(float)) &&
                     !memcmp(a[0].v, b[0].v, LV * sizeof(int64_t)) && !memcmp(a[0].v2, b[0].v2, LV * sizeof(int64_t)) &&
                     !memcmp(a[0].null, b[0].null, LN) && !memcmp(a[0].off2, b[0].off2, (LN + 1) * sizeof(int32_t));
    for (int k = 0; k < 3; k++) lane_free(&a[k]), lane_free(&b[k]);
    return same;
}

/* Every op a row's lanes share (rec_g_lanes > 1): lists longer than a warp, 2, 3, 32 and 33
 * lanes, against one lane. The CPU backend runs the same split in the tests above, but over
 * the specs' rows, whose lists are shorter than a warp after firstx. */
static void test_lanes(void) {
    rec_gop ops[9];
    const char *name[9] = {"fill_null (list)", "firstx 50", "ngram 3", "clamp (ids)", "clamp (40 floats)",
                           "onehot 40", "load (list, scalar, list)", "load (40 floats)", "load (one list)"};
    const int elem[9] = {0, 0, 0, 1, 1, 0, 0, 0, 0};
    memset(ops, 0, sizeof ops);
    ops[0].kind = REC_OP_FILL_NULL, ops[0].list = 1, ops[0].ivalue = 77;
    ops[1].kind = REC_OP_FIRSTX, ops[1].list = 1, ops[1].x = 50;
    ops[2].kind = REC_OP_NGRAM, ops[2].list = 1, ops[2].n = 3;
    ops[3].kind = REC_OP_CLAMP, ops[3].list = 1, ops[3].lo = -500, ops[3].hi = 600;
    ops[4].kind = REC_OP_CLAMP, ops[4].f32 = 1, ops[4].width = 40, ops[4].lo = -20, ops[4].hi = 30;
    ops[5].kind = REC_OP_ONEHOT, ops[5].f32 = 1, ops[5].width = 1, ops[5].num_class = 40, ops[5].lo = -50, ops[5].hi = 50;
    ops[6].kind = REC_G_LOAD, ops[6].n_src = 3, ops[6].width = 1;
    ops[6].src[0] = 1, ops[6].src_list[0] = 1, ops[6].src[1] = 2, ops[6].src[2] = 2, ops[6].src_list[2] = 1;
    ops[7].kind = REC_G_LOAD, ops[7].n_src = 1, ops[7].width = 40, ops[7].src[0] = 1, ops[7].src_f32[0] = 1;
    ops[8].kind = REC_G_LOAD, ops[8].n_src = 1, ops[8].width = 1, ops[8].src[0] = 2, ops[8].src_list[0] = 1;
    const int lanes[4] = {2, 3, 32, 33};
    for (int k = 0; k < 9; k++) {
        CHECK(rec_g_lanes(&ops[k]) == REC_G_LANES, "%s takes a warp a row (%d lanes)", name[k], rec_g_lanes(&ops[k]));
        for (int j = 0; j < 4; j++)
            CHECK(lanes_agree(&ops[k], lanes[j], elem[k]), "%s: %d lanes a row write other values than one", name[k],
                  lanes[j]);
    }
    rec_gop scalar = {0};
    scalar.kind = REC_OP_LOG1P, scalar.f32 = 1, scalar.width = 1;
    CHECK(rec_g_lanes(&scalar) == 1, "a scalar op takes one lane (%d)", rec_g_lanes(&scalar));
}

int main(void) {
    test_lanes();
    rec_raw_block raw = raw_rows(3000, 5);
    CHECK(raw.n == 3000, "3000 generated rows (%lld)", (long long)raw.n);
    rec_gback cuda;
    const int gpu = rec_gback_cuda(&cuda) == REC_OK;
    if (!gpu) printf("the CUDA backend is not tested here: %s\n", rec_errmsg());
    const rec_gback *backends[3] = {&rec_gback_cpu, &g_queued, &cuda};
    for (int k = 0; raw.n == 3000 && k < 2 + gpu; k++) {
        test_shipped(&raw, backends[k]);
        test_every_op(&raw, backends[k]);
        test_narrowing(&raw, backends[k]);
        test_corun(&raw, backends[k]);
    }
    /* the queue held work: the host waited only at its copies back; each block's operators
     * were timed between marks that had both run */
    CHECK(g_queue.ran > 0 && g_queue.max_pending > 20, "the queued backend ran %lld operations, at most %lld waiting",
          (long long)g_queue.ran, (long long)g_queue.max_pending);
    CHECK(g_queue.spans > 0 && g_queue.early_spans == 0, "the operators' time read %lld times, %lld before its marks ran",
          (long long)g_queue.spans, (long long)g_queue.early_spans);
    if (raw.n == 3000) test_failed_run(&raw), test_driver(&raw);
    free(g_queue.e);
    if (gpu) rec_gback_cuda_free(&cuda);
    if (raw.n == 3000) test_collect(&raw);
    test_refusals();
    test_ingest();
    rec_raw_block_free(&raw);
    return check_report();
}
