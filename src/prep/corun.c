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
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdio.h>
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

rec_status rec_corun_plan_check(const rec_corun_plan *p, const rec_fusion *f) {
    if (p->n_stages < 1 || p->n_pieces < 0 || !p->at || (p->n_pieces && !p->pieces))
        return rec_errorf(REC_EINVAL, "co-run plan: %d stages, %d pieces", p->n_stages, p->n_pieces);
    if (p->at[0] != 0 || p->at[p->n_stages] != p->n_pieces)
        return rec_errorf(REC_EINVAL, "co-run plan: its stages hold pieces [%d, %d) of %d", p->at[0], p->at[p->n_stages],
                          p->n_pieces);
    for (int s = 0; s < p->n_stages; s++)
        if (p->at[s + 1] < p->at[s]) return rec_errorf(REC_EINVAL, "co-run plan: stage %d ends before it starts", s);
    int k = 0, first = 0; /* the member each piece must start at */
    for (int i = 0; i < p->n_pieces; i++) {
        const rec_corun_piece *c = &p->pieces[i];
        if (k == f->n_kernels)
            return rec_errorf(REC_EINVAL, "co-run plan: piece %d runs kernel %d, after the last of the fusion plan's %d", i,
                              c->kernel, f->n_kernels);
        if (c->kernel != k || c->first != first || c->n < 1 || c->n > f->kernels[k].n - first)
            return rec_errorf(REC_EINVAL, "co-run plan: piece %d runs members [%d, %d) of kernel %d where members [%d, ...) "
                              "of kernel %d (of %d members) come next", i, c->first, c->first + c->n, c->kernel, first, k,
                              f->kernels[k].n);
        first += c->n;
        if (first == f->kernels[k].n) k++, first = 0;
    }
    if (k != f->n_kernels)
        return rec_errorf(REC_EINVAL, "co-run plan: kernels %d to %d of the fusion plan are in no piece", k, f->n_kernels - 1);
    return REC_OK;
}

rec_status rec_corun_plan_copy(rec_corun_plan *dst, const rec_corun_plan *src) {
    rec_corun_plan c = *src;
    c.at = malloc(sizeof(int) * ((size_t)src->n_stages + 1));
    c.load = malloc(sizeof(double) * (size_t)src->n_stages);
    c.pieces = malloc(sizeof(rec_corun_piece) * ((size_t)src->n_pieces + 1));
    if (!c.at || !c.load || !c.pieces) {
        rec_corun_plan_free(&c);
        return rec_errorf(REC_ENOMEM, "co-run plan: out of memory");
    }
    memcpy(c.at, src->at, sizeof(int) * ((size_t)src->n_stages + 1));
    memcpy(c.load, src->load, sizeof(double) * (size_t)src->n_stages);
    memcpy(c.pieces, src->pieces, sizeof(rec_corun_piece) * (size_t)src->n_pieces);
    rec_corun_plan_free(dst);
    *dst = c;
    return REC_OK;
}

/* ---- the plan shared with the executors --------------------------------------------------- */

struct rec_corun {
    pthread_mutex_t mu;
    int n_stages;
    void **events;
    int64_t step_rows;
    rec_corun_plan plan;
    uint64_t version;    /* 0: no plan yet */
    int claimed, measured;
    double *vpr;         /* (n_ops) */
    int64_t rows, n;
    float *X;
    double *ms;
};

rec_status rec_corun_new(rec_corun **out, int n_stages, void *const *events) {
    *out = NULL;
    if (n_stages < 1) return rec_errorf(REC_EINVAL, "co-run: %d training stages", n_stages);
    rec_corun *c = calloc(1, sizeof *c);
    if (!c || !(c->events = malloc(sizeof(void *) * (size_t)n_stages))) {
        free(c);
        return rec_errorf(REC_ENOMEM, "co-run: out of memory");
    }
    memcpy(c->events, events, sizeof(void *) * (size_t)n_stages);
    c->n_stages = n_stages;
    pthread_mutex_init(&c->mu, NULL);
    *out = c;
    return REC_OK;
}

void rec_corun_free(rec_corun *c) {
    if (!c) return;
    pthread_mutex_destroy(&c->mu);
    rec_corun_plan_free(&c->plan);
    free(c->events), free(c->vpr), free(c->X), free(c->ms);
    free(c);
}

int rec_corun_stages(const rec_corun *c) { return c->n_stages; }
void rec_corun_set_step_rows(rec_corun *c, int64_t rows) { c->step_rows = rows > 0 ? rows : 0; }
int64_t rec_corun_step_rows(const rec_corun *c) { return c->step_rows; }
void *rec_corun_event(const rec_corun *c, int stage) { return c->events[stage]; }

rec_status rec_corun_set_plan(rec_corun *c, const rec_corun_plan *p) {
    if (p->n_stages != c->n_stages)
        return rec_errorf(REC_EINVAL, "co-run: a plan of %d stages for training of %d", p->n_stages, c->n_stages);
    pthread_mutex_lock(&c->mu);
    const rec_status s = rec_corun_plan_copy(&c->plan, p);
    if (!s) c->version++;
    pthread_mutex_unlock(&c->mu);
    return s;
}

rec_status rec_corun_take(rec_corun *c, uint64_t *version, rec_corun_plan *out, int *changed) {
    *changed = 0;
    pthread_mutex_lock(&c->mu);
    rec_status s = REC_OK;
    if (c->version != *version) {
        s = rec_corun_plan_copy(out, &c->plan);
        if (!s) *version = c->version, *changed = 1;
    }
    pthread_mutex_unlock(&c->mu);
    return s;
}

int rec_corun_claim_measure(rec_corun *c) {
    pthread_mutex_lock(&c->mu);
    const int mine = !c->claimed;
    c->claimed = 1;
    pthread_mutex_unlock(&c->mu);
    return mine;
}

rec_status rec_corun_put_measured(rec_corun *c, const double *values_per_row, int n_ops, int64_t rows, float *X,
                                  double *ms, int64_t n) {
    double *v = malloc(sizeof(double) * ((size_t)n_ops + 1));
    if (!v) {
        free(X), free(ms);
        return rec_errorf(REC_ENOMEM, "co-run: out of memory");
    }
    if (n_ops) memcpy(v, values_per_row, sizeof(double) * (size_t)n_ops);
    pthread_mutex_lock(&c->mu);
    free(c->vpr), free(c->X), free(c->ms);
    c->vpr = v, c->X = X, c->ms = ms, c->n = n, c->rows = rows, c->measured = 1;
    pthread_mutex_unlock(&c->mu);
    return REC_OK;
}

int rec_corun_measured(rec_corun *c, const double **values_per_row, int64_t *rows, const float **X, const double **ms,
                       int64_t *n) {
    pthread_mutex_lock(&c->mu); /* written once, before measured is set */
    const int done = c->measured;
    pthread_mutex_unlock(&c->mu);
    if (done) *values_per_row = c->vpr, *rows = c->rows, *X = c->X, *ms = c->ms, *n = c->n;
    return done;
}

/* ---- overlapping capacity, measured (RAP §5.1) -------------------------------------------- */

rec_status rec_cap_search_init(rec_cap_search *c, int n_stages, double tol) {
    memset(c, 0, sizeof *c);
    if (n_stages < 1 || !(tol > 0 && tol < 1))
        return rec_errorf(REC_EINVAL, "capacity search: %d stages, tolerance %g (want 1 or more, and (0, 1))", n_stages, tol);
    c->n_stages = n_stages, c->tol = tol, c->hi = 1;
    c->base_ms = calloc((size_t)n_stages, sizeof(double));
    c->capacity = calloc((size_t)n_stages, sizeof(double));
    c->samples = calloc((size_t)n_stages * REC_CAP_REPS, sizeof(double));
    if (!c->base_ms || !c->capacity || !c->samples) {
        rec_cap_search_free(c);
        return rec_errorf(REC_ENOMEM, "capacity search: out of memory");
    }
    return REC_OK;
}

void rec_cap_search_free(rec_cap_search *c) {
    free(c->base_ms), free(c->capacity), free(c->samples);
    memset(c, 0, sizeof *c);
}

/* A stage too short to hold a probe's launch (microseconds) is not searched: capacity 0. */
static const double SHORTEST_MS = 0.01;

static void skip_short(rec_cap_search *c) {
    while (c->stage < c->n_stages && c->base_ms[c->stage] < SHORTEST_MS) c->capacity[c->stage++] = 0;
}

int rec_cap_search_next(rec_cap_search *c, int *stage, double *probe_ms) {
    *stage = -1, *probe_ms = 0;
    if (c->stage >= c->n_stages) return 0;
    if (c->asked == REC_CAP_REPS) return 2;
    c->steps++, c->asked++;
    if (c->phase == 1) *stage = c->stage, *probe_ms = 0.5 * (c->lo + c->hi) * c->base_ms[c->stage];
    return 1; /* phase 0: the baseline, steps without a probe */
}

void rec_cap_search_record(rec_cap_search *c, const double *stage_ms) {
    if (c->stage >= c->n_stages) return;
    if (c->phase == 0) {
        for (int s = 0; s < c->n_stages; s++) c->samples[s * REC_CAP_REPS + c->rep] = stage_ms[s];
        if (++c->rep < REC_CAP_REPS) return;
        for (int s = 0; s < c->n_stages; s++) c->base_ms[s] = rec_median(c->samples + s * REC_CAP_REPS, REC_CAP_REPS);
        c->rep = 0, c->asked = 0, c->phase = 1;
        skip_short(c);
        return;
    }
    c->samples[c->rep] = stage_ms[c->stage];
    if (++c->rep < REC_CAP_REPS) return;
    c->rep = 0, c->asked = 0;
    const double mid = 0.5 * (c->lo + c->hi), t = rec_median(c->samples, REC_CAP_REPS);
    if (t <= c->base_ms[c->stage] * (1 + c->tol)) c->lo = mid; /* the probe fit: the stage was not lengthened */
    else c->hi = mid;
    if (++c->round < REC_CAP_ROUNDS) return;
    c->capacity[c->stage] = c->lo * c->base_ms[c->stage];
    c->stage++, c->round = 0, c->lo = 0, c->hi = 1;
    skip_short(c);
}

/* ---- the capacities kept ------------------------------------------------------------------- */

rec_status rec_cap_save(const rec_cap_search *c, const char *path, const char *key, const char *const *names) {
    cJSON *root = cJSON_CreateObject(), *st = cJSON_CreateArray();
    if (!root || !st) {
        cJSON_Delete(root), cJSON_Delete(st);
        return rec_errorf(REC_ENOMEM, "%s: out of memory writing the co-run capacities", path);
    }
    cJSON_AddStringToObject(root, "format", "rectrain-corun-capacity");
    cJSON_AddNumberToObject(root, "version", 1);
    cJSON_AddStringToObject(root, "key", key);
    cJSON_AddItemToObject(root, "stages", st);
    for (int s = 0; s < c->n_stages; s++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", names[s]);
        char num[2][40]; /* every digit (cJSON's numbers keep 15) */
        snprintf(num[0], sizeof num[0], "%.17g", c->capacity[s]);
        snprintf(num[1], sizeof num[1], "%.17g", c->base_ms[s]);
        cJSON_AddRawToObject(o, "capacity_ms", num[0]);
        cJSON_AddRawToObject(o, "base_ms", num[1]);
        cJSON_AddItemToArray(st, o);
    }
    return rec_json_write(path, "co-run capacities", root);
}

rec_status rec_cap_parse(rec_cap_search *c, const char *text, size_t len, const char *path, const char *key,
                         const char *const *names) {
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!root) return rec_errorf(REC_EFORMAT, "%s: not valid JSON, so not co-run capacities", path);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format"), *ver = cJSON_GetObjectItemCaseSensitive(root, "version"),
                *k = cJSON_GetObjectItemCaseSensitive(root, "key"), *st = cJSON_GetObjectItemCaseSensitive(root, "stages");
    rec_status s = REC_OK;
    if (!cJSON_IsObject(root) || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, "rectrain-corun-capacity"))
        s = rec_errorf(REC_EFORMAT, "%s: $.format: not co-run capacities (want \"rectrain-corun-capacity\")", path);
    else if (!cJSON_IsNumber(ver) || ver->valuedouble != 1)
        s = rec_errorf(REC_EINVAL, "%s: $.version: this rectrain reads version 1; remove the file to measure again", path);
    else if (!cJSON_IsString(k) || strcmp(k->valuestring, key))
        s = rec_errorf(REC_EINVAL, "%s: $.key: measured for \"%s\", and this run is \"%s\": give another file, or remove "
                       "it to measure again", path, cJSON_IsString(k) ? k->valuestring : "?", key);
    else if (!cJSON_IsArray(st) || cJSON_GetArraySize(st) != c->n_stages)
        s = rec_errorf(REC_EINVAL, "%s: $.stages: want an array of the %d training stages", path, c->n_stages);
    int i = 0;
    for (const cJSON *o = s ? NULL : st->child; o && !s; o = o->next, i++) {
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(o, "name"), *cap = cJSON_GetObjectItemCaseSensitive(o, "capacity_ms"),
                    *base = cJSON_GetObjectItemCaseSensitive(o, "base_ms");
        if (!cJSON_IsString(nm) || strcmp(nm->valuestring, names[i]))
            s = rec_errorf(REC_EINVAL, "%s: $.stages[%d].name: want \"%s\"", path, i, names[i]);
        else if (!cJSON_IsNumber(base) || !(base->valuedouble >= 0))
            s = rec_errorf(REC_EINVAL, "%s: $.stages[%d].base_ms: want the stage's time in ms", path, i);
        else if (!cJSON_IsNumber(cap) || !(cap->valuedouble >= 0 && cap->valuedouble <= base->valuedouble))
            s = rec_errorf(REC_EINVAL, "%s: $.stages[%d].capacity_ms: want 0 to base_ms (%g) ms", path, i, base->valuedouble);
        else
            c->capacity[i] = cap->valuedouble, c->base_ms[i] = base->valuedouble;
    }
    if (!s) c->stage = c->n_stages; /* a finished search */
    cJSON_Delete(root);
    return s;
}
