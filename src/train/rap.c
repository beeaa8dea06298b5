/* RAP in training: the co-run driver of `train --device cuda --prep-device cuda` (train_impl.h).
 *
 * The loader's GPU executors preprocess the next rows while the GPU trains; this module plans
 * where their fused kernels run, as RAP does (§5, §7.1):
 *   1. overlapping capacity on the running model (§5.1): the first steps carry a probe beside
 *      one stage at a time (rec_cap_search; the probe's own time measured alone at start), the
 *      steps between them without one. Meanwhile the executors run ungated (CUDA streams'
 *      co-running) and the first block's fused kernels are timed alone (rec_corun_claim_measure);
 *   2. latency of any fused kernel or piece of one (§5.2): XGBoost trained on those timings;
 *   3. the plan (Algorithm 1, rec_corun_schedule): the capacities and the predicted latency of
 *      a step's rows (the timed block's kernels scaled to a step's rows), set on the corun; every
 *      executor follows it from its next block;
 *   4. the measured exposed latency: each stage's mean time while following the plan against
 *      its time without a probe in step 1, summed where longer (RAP §5.3's T_delta), beside the
 *      prediction.
 * The training's numbers are untouched: probes and gates change when kernels run, not what they
 * compute (a probe hashes a buffer of its own). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rectrain/core.h"
#include "rectrain/cuda.h"
#include "rectrain/prep.h"
#include "train_impl.h"

/* The stages: RAP's training layers (its artifact's emb_fwd, mlp_fwd, mlp_bwd, emb_bwd; one
 * GPU, so no grad_comm), each a run of the model's parts: the embeddings' forward; the bottom
 * MLP, interaction, top MLP and loss; their backward; the embeddings' backward and update and
 * the dense optimizer. A stage starts at its first part's event. */
/* An executor following the plan runs a step's rows at a time, but no fewer than
 * MIN_STEP_ROWS: a block's fixed costs (its uploads, launches and two waits) would outgrow what
 * it hides behind a small step. */
enum { NS = 4, SETTLE_STEPS = 8, MIN_STEP_ROWS = 8192 };
static const int FIRST[NS + 1] = {0, 1, 5, 8, REC_CUDA_CORUN_STAGES}; /* the model's stages (parts 1..) */
static const char *const STAGE_NAMES[NS] = {"embedding fwd", "MLPs fwd, loss", "MLPs bwd", "embedding bwd, optimizers"};

/* A step's stage times are read one step call later: what each step in flight was. */
enum { STEP_FILLER, STEP_ASKED, STEP_PLANNED };

struct rec_rap {
    rec_rap_gpu gpu;
    const rec_spec *spec;
    rec_fusion fu;
    rec_corun *corun;
    rec_cap_search search;
    int kinds[4], n_kinds;      /* the steps in flight, oldest first */
    int64_t batch, settle;      /* rows a step; planned steps still to skip (blocks made before the plan) */
    rec_lat_model *pred;
    const double *vpr, *ms;     /* the executor's: values each instance read a row, each kernel's time alone */
    int64_t block_rows;
    double per_step;            /* a step's load: its share of the timed block */
    rec_corun_plan plan;
    int planned;
    double sum_ms[NS];          /* stages of the planned steps counted */
    int64_t planned_steps;
    const char *cap_path, *key; /* where the capacities are kept (NULL: nowhere), and for what */
    int cap_loaded;
    FILE *log;
};

static rec_status cuda_corun(void *ctx, void **events) { return rec_cuda_model_corun(ctx, events); }
static rec_status cuda_probe(void *ctx, int stage, double ms) { return rec_cuda_model_probe(ctx, stage, ms); }
static int cuda_stage_times(void *ctx, double *ms, int *probe) { return rec_cuda_model_stage_times(ctx, ms, probe); }

rec_rap_gpu rec_rap_cuda(rec_cuda_model *g) { return (rec_rap_gpu){g, cuda_corun, cuda_probe, cuda_stage_times}; }

/* Capacities measured by an earlier run of the same training, where the file exists. */
static rec_status load_capacity(rec_rap *r) {
    if (!r->cap_path || access(r->cap_path, F_OK) != 0) return REC_OK;
    char *text = NULL;
    size_t len = 0;
    REC_TRY(rec_read_file(r->cap_path, "co-run capacities", 1 << 20, &text, &len));
    const rec_status s = rec_cap_parse(&r->search, text, len, r->cap_path, r->key, STAGE_NAMES);
    free(text);
    if (!s && r->log) fprintf(r->log, "train: co-run: the stages' capacities from %s\n", r->cap_path);
    r->cap_loaded = !s;
    return s;
}

rec_status rec_rap_new(rec_rap **out, const rec_rap_gpu *gpu, const rec_spec *spec, int64_t batch, const char *cap_path,
                       const char *key, FILE *log) {
    *out = NULL;
    rec_rap *r = calloc(1, sizeof *r);
    if (!r) return rec_errorf(REC_ENOMEM, "co-run: out of memory");
    r->gpu = *gpu, r->spec = spec, r->batch = batch, r->cap_path = cap_path, r->key = key, r->log = log;
    void *events[REC_CUDA_CORUN_STAGES], *starts[NS];
    rec_status s = rec_prep_fuse(spec, NULL, &r->fu);
    if (!s) s = gpu->corun(gpu->ctx, events);
    for (int k = 0; k < NS; k++) starts[k] = events[FIRST[k]];
    if (!s) s = rec_corun_new(&r->corun, NS, starts);
    if (!s) rec_corun_set_step_rows(r->corun, batch > MIN_STEP_ROWS ? batch : MIN_STEP_ROWS);
    if (!s) s = rec_cap_search_init(&r->search, NS, 0.03);
    if (!s) s = load_capacity(r);
    if (s) {
        rec_rap_free(r);
        return s;
    }
    if (log && !r->cap_loaded)
        fprintf(log, "train: co-run (RAP): the first %d steps measure each stage's overlapping capacity, then the "
                "preprocessing kernels follow a plan\n", rec_rap_probe_steps());
    *out = r;
    return REC_OK;
}

void rec_rap_free(rec_rap *r) {
    if (!r) return;
    rec_corun_free(r->corun);
    rec_cap_search_free(&r->search);
    rec_fusion_free(&r->fu);
    rec_lat_free(r->pred);
    rec_corun_plan_free(&r->plan);
    free(r);
}

rec_corun *rec_rap_corun(rec_rap *r) { return r->corun; }

int rec_rap_probe_steps(void) { return (REC_CAP_REPS + 1) * (1 + NS * REC_CAP_ROUNDS); }

rec_status rec_rap_before_step(rec_rap *r) {
    int stage = -1, kind = r->planned ? STEP_PLANNED : STEP_FILLER;
    double ms = 0;
    if (!r->planned && rec_cap_search_next(&r->search, &stage, &ms) == 1) kind = STEP_ASKED;
    if (r->n_kinds == 4) return rec_errorf(REC_EINVAL, "co-run: more than 4 steps in flight");
    r->kinds[r->n_kinds++] = kind;
    return r->gpu.probe(r->gpu.ctx, stage < 0 ? -1 : FIRST[stage], ms);
}

/* The predicted standalone latency of a step's share of members [first, first + n) of kernel
 * k: the predictor's for the timed block, scaled to a step's rows. */
static double step_latency(const rec_fused_kernel *k, int first, int n, void *ctx) {
    const rec_rap *r = ctx;
    if (!r->pred) /* one kernel measured: too few to train on; its time shared by its members */
        return r->ms[k - r->fu.kernels] * n / k->n * r->per_step;
    float x[REC_LAT_FEATURES];
    rec_lat_features(&r->fu, r->spec, (int)(k - r->fu.kernels), first, n, r->vpr, r->block_rows, x);
    double ms = 0;
    return rec_lat_predict(r->pred, x, 1, &ms) ? 0 : ms * r->per_step;
}

static void print_plan(const rec_rap *r, const double *cap) {
    fprintf(r->log, "train: co-run plan (RAP Algorithm 1; capacity and predicted load a step, ms):");
    for (int s = 0; s < NS; s++) {
        if (r->plan.at[s] == r->plan.at[s + 1] && cap[s] <= 0) continue;
        fprintf(r->log, "\n  %-26s capacity %7.3f  load %7.3f  ", STAGE_NAMES[s], cap[s], r->plan.load[s]);
        for (int i = r->plan.at[s]; i < r->plan.at[s + 1]; i++) {
            const rec_corun_piece *p = &r->plan.pieces[i];
            const int whole = p->first == 0 && p->n == r->fu.kernels[p->kernel].n;
            if (whole) fprintf(r->log, " k%d", p->kernel);
            else fprintf(r->log, " k%d[%d..%d)", p->kernel, p->first, p->first + p->n);
        }
    }
    fprintf(r->log, "\ntrain: co-run: predicted exposed latency %.3f ms a step%s\n", r->plan.exposed,
            r->plan.overflow ? " (the stages could not hold every kernel: the rest runs beside the last)" : "");
}

/* Steps 2 and 3: once the capacities and the executors' timings are in. */
static rec_status make_plan(rec_rap *r) {
    const float *X;
    const double *ms;
    int64_t n;
    if (!rec_corun_measured(r->corun, &r->vpr, &r->block_rows, &X, &ms, &n)) return REC_OK;
    if (n != r->fu.n_kernels)
        return rec_errorf(REC_EINVAL, "co-run: the executor timed %lld fused kernels of spec '%s', whose plan has %d",
                          (long long)n, r->spec->name, r->fu.n_kernels);
    r->ms = ms;
    if (n >= 2) REC_TRY(rec_lat_train(X, ms, n, &r->pred));
    /* a step's load: its rows' share of the timed block (a piece of MIN_STEP_ROWS at least) */
    r->per_step = (double)(r->batch > MIN_STEP_ROWS ? r->batch : MIN_STEP_ROWS) / (double)r->block_rows;
    REC_TRY(rec_corun_schedule(&r->fu, r->search.capacity, NS, step_latency, r, &r->plan));
    REC_TRY(rec_corun_set_plan(r->corun, &r->plan));
    r->planned = 1, r->settle = SETTLE_STEPS;
    if (r->cap_path && !r->cap_loaded) REC_TRY(rec_cap_save(&r->search, r->cap_path, r->key, STAGE_NAMES));
    if (r->log) {
        if (!r->cap_loaded)
            fprintf(r->log, "train: co-run: overlapping capacity measured on %lld steps%s%s\n", (long long)r->search.steps,
                    r->cap_path ? ", kept in " : "", r->cap_path ? r->cap_path : "");
        fprintf(r->log, "train: co-run: %lld fused kernels timed alone on a block of %lld rows; a step's load %.3f of it\n",
                (long long)n, (long long)r->block_rows, r->per_step);
        print_plan(r, r->search.capacity);
    }
    return REC_OK;
}

rec_status rec_rap_after_step(rec_rap *r) {
    double part[REC_CUDA_CORUN_STAGES], ms[NS];
    int probe;
    while (r->n_kinds > 0 && r->gpu.stage_times(r->gpu.ctx, part, &probe)) {
        const int kind = r->kinds[0];
        memmove(r->kinds, r->kinds + 1, sizeof(int) * (size_t)--r->n_kinds);
        for (int k = 0; k < NS; k++) {
            ms[k] = 0;
            for (int p = FIRST[k]; p < FIRST[k + 1]; p++) ms[k] += part[p];
        }
        if (kind == STEP_ASKED) rec_cap_search_record(&r->search, ms);
        if (kind == STEP_PLANNED && r->settle > 0) r->settle--;
        else if (kind == STEP_PLANNED) {
            for (int s = 0; s < NS; s++) r->sum_ms[s] += ms[s];
            r->planned_steps++;
        }
    }
    if (!r->planned && r->search.stage >= NS) REC_TRY(make_plan(r));
    return REC_OK;
}

void rec_rap_report(const rec_rap *r, rec_rap_result *out) {
    memset(out, 0, sizeof *out);
    out->planned = r->planned, out->probe_steps = r->search.steps, out->steps = r->planned_steps;
    out->predicted_ms = r->planned ? r->plan.exposed : 0;
    out->n_stages = NS;
    for (int s = 0; s < NS && r->search.stage >= NS; s++) out->capacity_ms[s] = r->search.capacity[s];
    for (int s = 0; s < NS && r->planned_steps; s++) {
        const double t = r->sum_ms[s] / (double)r->planned_steps, base = r->search.base_ms[s];
        out->step_ms += t, out->base_ms += base;
        if (t > base) out->exposed_ms += t - base;
    }
    if (!r->log) return;
    if (!r->planned)
        fprintf(r->log, "train: co-run: the run ended before its plan was made (%lld of the capacity search's %d measured steps%s)\n",
                (long long)r->search.steps, REC_CAP_REPS * (1 + NS * REC_CAP_ROUNDS),
                r->search.stage >= NS ? "; the executors' kernels not yet timed" : "");
    else if (r->planned_steps)
        fprintf(r->log, "train: co-run: measured exposed latency %.3f ms a step (predicted %.3f): the stages take %.3f ms "
                "a step following the plan (%lld steps), %.3f in the search's steps without a probe\n",
                out->exposed_ms, out->predicted_ms, out->step_ms, (long long)r->planned_steps, out->base_ms);
}
