/* The co-running schedule of fused preprocessing kernels beside training (RAP Algorithm 1).
 *
 * Cost model (RAP §5.3): a stage of capacity C running preprocessing of predicted standalone
 * latency sum l_i is lengthened by T_delta = sum l_i - C when that is positive. Algorithm 1
 * (§7.1): take the stages from the highest capacity down until their capacities add up to the
 * total predicted latency L (lines 6-12); then walk the stages in execution order and, on each
 * one taken, place kernels in the fusion plan's order while they fit (lines 15-19). A kernel
 * that does not fit is sharded (§6.2, lines 21-25): as many of its first members as fit stay
 * (fewer members, a smaller fused kernel), the rest is the next kernel, and the walk moves to
 * the next stage. What is left when the taken stages are full goes to the last stage, as RAP's
 * artifact does (corun_scheduler.py), and the plan says it overflowed.
 *
 * Pieces never change order, and the fusion plan orders kernels by step, so a piece runs after
 * the pieces of every instance it reads: on one stream, in launch order.
 */
#include <stdlib.h>
#include <string.h>

#include "rectrain/core.h"
#include "rectrain/prep.h"

typedef struct stage_ref {
    int s;
    double cap;
} stage_ref;

static int by_capacity(const void *a, const void *b) {
    const stage_ref *x = a, *y = b;
    if (x->cap != y->cap) return x->cap < y->cap ? 1 : -1;
    return x->s - y->s; /* ties: the earlier stage first */
}

/* The most members [first, first + k) of kernel `kr` that fit in `room` (0: not even one). */
static int fitting(const rec_fused_kernel *kr, int first, int n, double room, rec_latency_fn lat, void *ctx) {
    int lo = 0, hi = n; /* latency grows with members: the largest k with lat(k) <= room */
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (lat(kr, first, mid, ctx) <= room) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

rec_status rec_corun_schedule(const rec_fusion *f, const double *capacity, int n_stages, rec_latency_fn latency,
                              void *ctx, rec_corun_plan *out) {
    memset(out, 0, sizeof *out);
    if (n_stages < 1) return rec_errorf(REC_EINVAL, "co-run schedule: no training stages to overlap");
    for (int s = 0; s < n_stages; s++)
        if (!(capacity[s] >= 0))
            return rec_errorf(REC_EINVAL, "co-run schedule: stage %d has capacity %g; capacities are latencies >= 0", s,
                              capacity[s]);
    out->n_stages = n_stages;
    int total = 0;
    for (int k = 0; k < f->n_kernels; k++) total += f->kernels[k].n;
    stage_ref *order = malloc(sizeof(stage_ref) * (size_t)n_stages);
    uint8_t *taken = calloc((size_t)n_stages, 1);
    out->at = calloc((size_t)n_stages + 1, sizeof(int));
    out->load = calloc((size_t)n_stages, sizeof(double));
    /* a kernel becomes at most one piece per stage plus one */
    out->pieces = malloc(sizeof(rec_corun_piece) * ((size_t)f->n_kernels + (size_t)n_stages + 1));
    if (!order || !taken || !out->at || !out->load || !out->pieces) {
        free(order), free(taken);
        rec_corun_plan_free(out);
        return rec_errorf(REC_ENOMEM, "co-run schedule: out of memory");
    }
    double L = 0; /* lines 2-5 */
    for (int k = 0; k < f->n_kernels; k++) L += latency(&f->kernels[k], 0, f->kernels[k].n, ctx);
    for (int s = 0; s < n_stages; s++) order[s] = (stage_ref){s, capacity[s]};
    qsort(order, (size_t)n_stages, sizeof *order, by_capacity);
    double held = 0; /* lines 6-12 */
    for (int r = 0; r < n_stages && (held < L || r == 0); r++) taken[order[r].s] = 1, held += order[r].cap;
    int k = 0, first = 0; /* the next kernel, and its first member not yet placed */
    for (int s = 0; s < n_stages; s++) { /* lines 13-29 */
        out->at[s] = out->n_pieces;
        while (taken[s] && k < f->n_kernels) {
            const rec_fused_kernel *kr = &f->kernels[k];
            const int left = kr->n - first;
            const double room = capacity[s] - out->load[s];
            const int fit = fitting(kr, first, left, room, latency, ctx);
            if (fit == 0) break; /* not one member: the next stage */
            const double l = latency(kr, first, fit, ctx);
            out->pieces[out->n_pieces++] = (rec_corun_piece){k, first, fit, l};
            out->load[s] += l;
            if (fit < left) { /* sharded: the rest waits for the next stage */
                first += fit;
                break;
            }
            k++, first = 0;
        }
    }
    out->at[n_stages] = out->n_pieces;
    for (; k < f->n_kernels; k++, first = 0) { /* what no taken stage held: the last stage */
        const rec_fused_kernel *kr = &f->kernels[k];
        const double l = latency(kr, first, kr->n - first, ctx);
        out->pieces[out->n_pieces++] = (rec_corun_piece){k, first, kr->n - first, l};
        out->load[n_stages - 1] += l;
        out->at[n_stages] = out->n_pieces;
        out->overflow = 1;
    }
    for (int s = 0; s < n_stages; s++)
        if (out->load[s] > capacity[s]) out->exposed += out->load[s] - capacity[s];
    free(order), free(taken);
    return REC_OK;
}

void rec_corun_plan_free(rec_corun_plan *p) {
    free(p->at), free(p->pieces), free(p->load);
    memset(p, 0, sizeof *p);
}
