// The GPU engine's plans, timing and tuner (cuda.h; RecFlex, paper 001 §IV-A), and the device's
// copy bandwidth.
#include <cuda_runtime.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embed_impl.cuh"

// ---- plans, timing, tuning ------------------------------------------------------------------------

extern "C" rec_status rec_cuda_embed_set_plan(rec_cuda_embed *g, const int *sched, int occupancy) {
    for (int f = 0; f < g->F; f++)
        if (!rec_cuda_sched_fits(sched[f], g->dims[f], g->cols[f], g->W)) {
            char nm[16];
            return rec_errorf(REC_EINVAL, "GPU plan: table %d: schedule %s does not fit dim %d at column %d", f,
                              rec_cuda_sched_name(sched[f], nm, sizeof nm), g->dims[f], g->cols[f]);
        }
    if (occupancy < 0 || occupancy > 32) return rec_errorf(REC_EINVAL, "GPU plan: occupancy %d: want 0..32", occupancy);
    memcpy(g->sched, sched, (size_t)g->F * sizeof(int));
    g->occ = occupancy;
    return cu_upload_args(g);
}

extern "C" void rec_cuda_embed_get_plan(const rec_cuda_embed *g, int *sched, int *occupancy) {
    memcpy(sched, g->sched, (size_t)g->F * sizeof(int));
    *occupancy = g->occ;
}

extern "C" void rec_cuda_embed_set_default(rec_cuda_embed *g) {
    for (int f = 0; f < g->F; f++) g->sched[f] = rec_cuda_sched_default(g->dims[f], g->cols[f], g->W);
    g->occ = 0;
    cu_upload_args(g);
}

extern "C" void rec_cuda_embed_set_uniform(rec_cuda_embed *g, int s) {
    for (int f = 0; f < g->F; f++)
        g->sched[f] = rec_cuda_sched_fits(s, g->dims[f], g->cols[f], g->W) ? s : rec_cuda_sched_default(g->dims[f], g->cols[f], g->W);
    cu_upload_args(g);
}

int cu_cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

extern "C" rec_status rec_cuda_embed_time(rec_cuda_embed *g, rec_cuda_batch *const *d, int n, float *out, const float *dout,
                                          float lr, int what, int reps, double *sec) {
    double t[64];
    if (reps > 64) reps = 64;
    CU_TRY(cudaStreamSynchronize(g->st), "waiting for the GPU");
    for (int rep = -1; rep < reps; rep++) {
        CU_TRY(cudaEventRecord(g->ev0, g->st), "recording an event");
        for (int i = 0; i < n; i++) {
            REC_TRY(rec_cuda_embed_forward(g, d[i], out));
            if (what == 1) REC_TRY(rec_cuda_embed_backward_update(g, d[i], dout, lr));
        }
        CU_TRY(cudaEventRecord(g->ev1, g->st), "recording an event");
        CU_TRY(cudaEventSynchronize(g->ev1), "running the timed passes");
        float ms = 0;
        CU_TRY(cudaEventElapsedTime(&ms, g->ev0, g->ev1), "reading the events");
        if (rep >= 0) t[rep] = ms * 1e-3 / n;
    }
    qsort(t, (size_t)reps, sizeof(double), cu_cmp_double);
    *sec = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
    return REC_OK;
}

// Local stage for the current occupancy: round r gives table f its candidate (r + f) mod N_f, a
// Latin rotation, so every round runs the same mix of schedules and a table's candidates are
// compared under the same interference. Per table and candidate: its blocks' cycles summed
// and its longest block, the least over reps. Two choices per table: least cycles (slot time),
// and least cycles over the SM slots plus the longest block (slot time with the table's tail).
static rec_status tune_local(rec_cuda_embed *g, rec_cuda_batch *const *d, int n, float *out, int reps, const int *cand,
                             const int *nc, int rounds, int *plan_a, int *plan_b) {
    const int F = g->F;
    unsigned long long *cyc = (unsigned long long *)malloc(2 * F * sizeof(unsigned long long));
    double *sum = (double *)malloc(2 * F * sizeof(double)), *best = (double *)malloc(2 * F * sizeof(double));
    rec_status s = cyc && sum && best ? REC_OK : rec_errorf(REC_ENOMEM, "GPU tuner: out of memory");
    const double slots = (double)g->sms * (g->occ > 0 ? g->occ : g->max_occ);
    for (int f = 0; !s && f < 2 * F; f++) best[f] = INFINITY;
    for (int r = 0; !s && r < rounds; r++) {
        for (int f = 0; f < F; f++) g->sched[f] = cand[(size_t)f * REC_CUDA_N_SCHED + (r + f) % nc[f]];
        s = cu_upload_args(g);
        for (int f = 0; f < 2 * F; f++) sum[f] = INFINITY;
        for (int t = 0; !s && t < reps; t++) {
            cudaError_t e = cudaMemsetAsync(g->d_prof, 0, 2 * F * sizeof(unsigned long long), g->st);
            if (e != cudaSuccess) s = cu_fail(e, "clearing the profile");
            for (int i = 0; !s && i < n; i++) s = cu_launch_forward(g, d[i], out, 1);
            if (!s) e = cudaMemcpyAsync(cyc, g->d_prof, 2 * F * sizeof(unsigned long long), cudaMemcpyDeviceToHost, g->st);
            if (!s && e == cudaSuccess) e = cudaStreamSynchronize(g->st);
            if (!s && e != cudaSuccess) s = cu_fail(e, "reading the profile");
            for (int f = 0; !s && f < F; f++) {
                const double a = (double)cyc[f], b = a / slots + (double)cyc[F + f];
                if (a < sum[f]) sum[f] = a;
                if (b < sum[F + f]) sum[F + f] = b;
            }
        }
        for (int f = 0; !s && f < F; f++) {
            if (r >= nc[f]) continue;  // the rotation repeats this table's candidates: padding
            if (sum[f] < best[f]) best[f] = sum[f], plan_a[f] = g->sched[f];
            if (sum[F + f] < best[F + f]) best[F + f] = sum[F + f], plan_b[f] = g->sched[f];
        }
    }
    free(cyc), free(sum), free(best);
    return s;
}

// Refinement by timing the whole fused kernel: tables grouped by dim and mean bag size (in
// half-octaves), largest share of the bytes first; each group tries every candidate schedule
// at once (on the tables it fits) and keeps one that makes the kernel at least 0.5% faster.
// The local stage's per-table costs mis-rank schedules when the kernel is bandwidth-bound (a
// schedule with more loads in flight wins bandwidth from the others without moving fewer
// bytes); the fused kernel's own time cannot. At most 400 timings.
static rec_status tune_refine(rec_cuda_embed *g, rec_cuda_batch *const *d, int n, float *out, int reps, double t0,
                              rec_cuda_tune_report *rep) {
    const int F = g->F;
    int *cls = (int *)malloc(F * sizeof(int)), *order = (int *)malloc(F * sizeof(int)), *keep = (int *)malloc(F * sizeof(int));
    double *work = (double *)calloc(F, sizeof(double));
    rec_status s = cls && order && keep && work ? REC_OK : rec_errorf(REC_ENOMEM, "GPU tuner: out of memory");
    int ncls = 0;
    for (int f = 0; !s && f < F; f++) {
        double L = 0;
        for (int i = 0; i < n; i++) L += (double)d[i]->nnz[f] / d[i]->B;
        L /= n;
        const int key = g->dims[f] * 64 + (int)fmin(63.0, floor(2.0 * log2(1.0 + L)));
        int c = 0;
        while (c < ncls && order[c] != key) c++;
        if (c == ncls) order[ncls++] = key;
        cls[f] = c, work[c] += (L + 1) * g->dims[f];
    }
    // classes by work, largest first (order[] reused as the class index list)
    int *byw = (int *)malloc((ncls + 1) * sizeof(int));
    if (!s && !byw) s = rec_errorf(REC_ENOMEM, "GPU tuner: out of memory");
    for (int c = 0; !s && c < ncls; c++) byw[c] = c;
    for (int a = 0; !s && a < ncls; a++)
        for (int b = a + 1; b < ncls; b++)
            if (work[byw[b]] > work[byw[a]]) { const int t = byw[a]; byw[a] = byw[b], byw[b] = t; }
    double best = t0;
    int trials = 0, changed = 0;
    for (int k = 0; !s && k < ncls && trials < 400; k++) {
        const int c = byw[k];
        int cand = -1, win = -1;
        for (int u = 0; !s && u < REC_CUDA_N_SCHED && trials < 400; u++) {
            int any = 0;
            memcpy(keep, g->sched, (size_t)F * sizeof(int));
            for (int f = 0; f < F; f++)
                if (cls[f] == c && rec_cuda_sched_fits(u, g->dims[f], g->cols[f], g->W) && g->sched[f] != u) g->sched[f] = u, any = 1;
            if (!any) continue;
            double t;
            s = cu_upload_args(g);
            if (!s) s = rec_cuda_embed_time(g, d, n, out, NULL, 0, 0, reps, &t);
            trials++;
            if (!s && t < best * 0.995) best = t, win = u, cand = 1;
            memcpy(g->sched, keep, (size_t)F * sizeof(int));
        }
        if (!s && cand > 0) {
            for (int f = 0; f < F; f++)
                if (cls[f] == c && rec_cuda_sched_fits(win, g->dims[f], g->cols[f], g->W)) g->sched[f] = win;
            changed++;
        }
        if (!s) s = cu_upload_args(g);
    }
    rep->refine_groups = ncls, rep->refine_changed = changed, rep->refine_trials = trials;
    rep->refine_gain = best > 0 ? t0 / best : 1;
    free(cls), free(order), free(keep), free(work), free(byw);
    return s;
}

extern "C" rec_status rec_cuda_embed_tune(rec_cuda_embed *g, rec_cuda_batch *const *d, int n, float *out, int reps,
                                          rec_cuda_tune_report *report) {
    const int F = g->F;
    rec_cuda_tune_report rep;
    memset(&rep, 0, sizeof rep);
    // Occupancy settings: m, m/2, m/4, 1, distinct.
    for (int k = 0, o = g->max_occ; k < REC_CUDA_N_OCC; k++, o = k == REC_CUDA_N_OCC - 1 ? 1 : o / 2) {
        if (o < 1) o = 1;
        int dup = 0;
        for (int j = 0; j < rep.n_occ; j++) dup |= rep.occ[j] == o;
        if (!dup) rep.occ[rep.n_occ++] = o;
    }
    // Global candidates: two local plans per occupancy, the plan tuning started from, the
    // default plan and the best uniform plan (occupancy uncapped).
    const int NG = 2 * REC_CUDA_N_OCC + 3;
    int *cand = (int *)malloc((size_t)F * REC_CUDA_N_SCHED * sizeof(int)), *nc = (int *)malloc(F * sizeof(int));
    int *plans = (int *)malloc((size_t)NG * F * sizeof(int)), pocc[2 * REC_CUDA_N_OCC + 3];
    double gs[2 * REC_CUDA_N_OCC + 3];
    rec_status s = cand && nc && plans ? REC_OK : rec_errorf(REC_ENOMEM, "GPU tuner: out of memory");
    int rounds = 1, ng = 0;
    for (int f = 0; !s && f < F; f++) {
        nc[f] = rec_cuda_sched_candidates(g->dims[f], g->cols[f], g->W, cand + (size_t)f * REC_CUDA_N_SCHED);
        if (nc[f] > rounds) rounds = nc[f];
    }
    rep.rounds = rounds;
    if (!s) { /* the start plan */
        memcpy(plans, g->sched, (size_t)F * sizeof(int));
        pocc[ng++] = g->occ;
    }
    for (int k = 0; !s && k < rep.n_occ; k++, ng += 2) {
        g->occ = rep.occ[k];
        s = tune_local(g, d, n, out, reps, cand, nc, rounds, plans + (size_t)ng * F, plans + (size_t)(ng + 1) * F);
        pocc[ng] = pocc[ng + 1] = rep.occ[k];
    }
    for (int f = 0; !s && f < F; f++) plans[(size_t)ng * F + f] = rec_cuda_sched_default(g->dims[f], g->cols[f], g->W);
    pocc[ng++] = 0;
    double ut = INFINITY;
    g->occ = 0;
    for (int u = 0; !s && u < REC_CUDA_N_SCHED; u++) { /* the best uniform plan */
        double t;
        rec_cuda_embed_set_uniform(g, u);
        s = rec_cuda_embed_time(g, d, n, out, NULL, 0, 0, reps, &t);
        if (!s && t < ut) ut = t, rep.uniform_sched = u, memcpy(plans + (size_t)ng * F, g->sched, (size_t)F * sizeof(int));
    }
    pocc[ng++] = 0;
    // Global stage (eq. 4): each candidate as the one fused kernel, timed in turns; the fastest
    // by its median is kept.
    enum { TURNS = 5 };
    double tt[2 * REC_CUDA_N_OCC + 3][TURNS];
    for (int turn = 0; !s && turn < TURNS; turn++)
        for (int c = 0; !s && c < ng; c++) {
            memcpy(g->sched, plans + (size_t)c * F, (size_t)F * sizeof(int));
            g->occ = pocc[c];
            s = cu_upload_args(g);
            if (!s) s = rec_cuda_embed_time(g, d, n, out, NULL, 0, 0, reps, &tt[c][turn]);
        }
    int win = 0;
    for (int c = 0; !s && c < ng; c++) {
        qsort(tt[c], TURNS, sizeof(double), cu_cmp_double);
        gs[c] = tt[c][TURNS / 2];
        if (gs[c] < gs[win]) win = c;
    }
    if (!s) {
        for (int k = 0; k < rep.n_occ; k++) rep.occ_s[k] = fmin(gs[1 + 2 * k], gs[2 + 2 * k]);
        rep.start_s = gs[0], rep.uniform_s = gs[ng - 1];
        rep.winner = win == 0 ? REC_CUDA_WIN_START : win == ng - 1 ? REC_CUDA_WIN_UNIFORM : win == ng - 2 ? REC_CUDA_WIN_DEFAULT
                     : (win - 1) % 2 ? REC_CUDA_WIN_TAIL : REC_CUDA_WIN_SLOTS;
        memcpy(g->sched, plans + (size_t)win * F, (size_t)F * sizeof(int));
        g->occ = rep.occupancy = pocc[win];
        s = cu_upload_args(g);
    }
    if (!s) s = tune_refine(g, d, n, out, reps, gs[win], &rep);
    if (report) *report = rep;
    free(cand), free(nc), free(plans);
    return s;
}

__global__ void copy_kernel(const float4 *a, float4 *b, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) b[i] = a[i];
}

extern "C" rec_status rec_cuda_copy_gbps(size_t bytes, double *gbps) {
    void *a = NULL, *b = NULL;
    REC_TRY(rec_cuda_alloc(&a, bytes, "the bandwidth probe"));
    rec_status s = rec_cuda_alloc(&b, bytes, "the bandwidth probe");
    cudaEvent_t e0 = NULL, e1 = NULL;
    double t[5];
    if (!s && (cudaEventCreate(&e0) != cudaSuccess || cudaEventCreate(&e1) != cudaSuccess))
        s = rec_errorf(REC_EUNSUPPORTED, "GPU: cannot create events");
    if (!s) cudaMemset(a, 1, bytes);
    for (int rep = -1; !s && rep < 5; rep++) {
        cudaEventRecord(e0);
        copy_kernel<<<2048, 256>>>((const float4 *)a, (float4 *)b, bytes / 16);
        cudaEventRecord(e1);
        const cudaError_t e = cudaEventSynchronize(e1);
        if (e != cudaSuccess) s = cu_fail(e, "timing a device copy");
        float ms = 0;
        cudaEventElapsedTime(&ms, e0, e1);
        if (rep >= 0) t[rep] = ms * 1e-3;
    }
    if (!s) {
        qsort(t, 5, sizeof(double), cu_cmp_double);
        *gbps = 2.0 * (double)(bytes / 16 * 16) / t[2] * 1e-9;
    }
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaFree(a), cudaFree(b);
    return s;
}
