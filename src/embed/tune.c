/* The tuner of the embedding engine (embed.h), and the separately tuned baseline.
 *
 * It follows RecFlex §IV-A (digest §3.2): the local stage times each table's candidates
 * (sched.c) inside full fused passes (all tables tuned at once, so each measurement carries
 * the interference of the others), over `reps` batches each (eq. 5, each candidate scored by
 * its least time per id); the global stage times a handful of whole plans, in turns (eq. 4).
 * A CPU has no occupancy to fix, so the global candidates are the plan choices whose effect
 * is not local to one table: whether tables may keep whole tables on one thread (load
 * balance), and as guards the best uniform schedules and the plan tuning started from.
 * Keeping the universe index of each candidate lets the tuner score a uniform schedule (one
 * universe member for all tables) from the same measurements.
 */
#include <math.h>
#include <string.h>

#include "embed_impl.h"
#include "rectrain/core.h"

/* The global stage's whole-plan timings are wall clock over short passes (0.1 ms for a Kaggle
 * batch), so each plan gets 3x the local stage's calls and keeps its best one. */
enum { N_GLOBAL = REC_EMBED_GLOBAL_CANDIDATES, GLOBAL_REPS_FACTOR = 3 };

struct embed_tuner {
    int reps, greps, F;                 /* calls per candidate: local stage, global stage */
    int nu_f, nu_b;                     /* universe sizes */
    int16_t *map_f, *map_b;             /* (F, EMBED_MAX_*_U) universe index -> candidate index */
    int *nc_f, *nc_b;                   /* (F) candidates */
    rec_embed_sched *c_f, *c_b;         /* (F, EMBED_MAX_*_U) candidates */
    double *t_f, *n_f, *t_b, *n_b;      /* (F, EMBED_MAX_*_U) least seconds per id of a call; ids measured */
    int rounds_f, rounds_b, call_f, call_b;
    int global;                         /* 0 local, 1 global, 2 done */
    int n_global, g_call, cur_g;
    rec_embed_sched *gplan;             /* (N_GLOBAL, F) */
    rec_embed_sched *start;             /* (F) the plan tuning started from, a global candidate */
    int gkind[N_GLOBAL];                /* what each global plan is (rec_embed_tune_report.winner) */
    double gmf[N_GLOBAL], gmb[N_GLOBAL]; /* least seconds per id of a call, forward / backward */
    rec_embed_tune_report rep;
    double *scratch_t, *scratch_n;      /* (F) profile reads */
};

void embed_tuner_free(embed_tuner *t) {
    if (!t) return;
    rec_free(t->map_f);
    rec_free(t->map_b);
    rec_free(t->nc_f);
    rec_free(t->nc_b);
    rec_free(t->c_f);
    rec_free(t->c_b);
    rec_free(t->t_f);
    rec_free(t->n_f);
    rec_free(t->t_b);
    rec_free(t->n_b);
    rec_free(t->gplan);
    rec_free(t->start);
    rec_free(t->scratch_t);
    rec_free(t->scratch_n);
    rec_free(t);
}

rec_status rec_embed_tune_begin(rec_embed *e, const rec_embed_tune_opts *o) {
    const int reps = o && o->reps > 0 ? o->reps : 3;
    embed_tuner_free(e->tuner);
    e->tuner = NULL;
    embed_tuner *t;
    REC_TRY(rec_alloc((void **)&t, sizeof *t, "embedding tuner"));
    const size_t F = (size_t)e->F + 1, UF = F * EMBED_MAX_FWD_U, UB = F * EMBED_MAX_BWD_U;
    rec_status s = REC_OK;
    if (!s) s = rec_alloc((void **)&t->map_f, UF * sizeof(int16_t), "embedding tuner");
    if (!s) s = rec_alloc((void **)&t->map_b, UB * sizeof(int16_t), "embedding tuner");
    if (!s) s = rec_alloc((void **)&t->nc_f, F * sizeof(int), "embedding tuner");
    if (!s) s = rec_alloc((void **)&t->nc_b, F * sizeof(int), "embedding tuner");
    if (!s) s = rec_alloc((void **)&t->c_f, UF * sizeof(rec_embed_sched), "embedding tuner");
    if (!s) s = rec_alloc((void **)&t->c_b, UB * sizeof(rec_embed_sched), "embedding tuner");
    if (!s) s = rec_alloc((void **)&t->t_f, UF * sizeof(double), "embedding tuner");
    if (!s) s = rec_alloc((void **)&t->n_f, UF * sizeof(double), "embedding tuner");
    if (!s) s = rec_alloc((void **)&t->t_b, UB * sizeof(double), "embedding tuner");
    if (!s) s = rec_alloc((void **)&t->n_b, UB * sizeof(double), "embedding tuner");
    if (!s) s = rec_alloc((void **)&t->gplan, N_GLOBAL * F * sizeof(rec_embed_sched), "embedding tuner");
    if (!s) s = rec_alloc((void **)&t->start, F * sizeof(rec_embed_sched), "embedding tuner");
    if (!s) s = rec_alloc((void **)&t->scratch_t, F * sizeof(double), "embedding tuner");
    if (!s) s = rec_alloc((void **)&t->scratch_n, F * sizeof(double), "embedding tuner");
    if (s) {
        embed_tuner_free(t);
        return s;
    }
    memcpy(t->start, e->sched, (size_t)e->F * sizeof *t->start); /* left only for a plan measured faster */
    for (size_t i = 0; i < UF; i++) t->t_f[i] = INFINITY;
    for (size_t i = 0; i < UB; i++) t->t_b[i] = INFINITY;
    t->reps = reps;
    t->greps = GLOBAL_REPS_FACTOR * reps;
    t->F = e->F;
    int maxf = 1, maxb = 1;
    for (int f = 0; f < e->F; f++) {
        rec_embed_sched u[EMBED_MAX_FWD_U];
        t->nu_f = embed_fwd_universe(e->sched[f], u);
        t->nc_f[f] = embed_sched_distinct(e, f, u, t->nu_f, t->c_f + (size_t)f * EMBED_MAX_FWD_U, EMBED_MAX_FWD_U, t->map_f + (size_t)f * EMBED_MAX_FWD_U);
        t->nu_b = embed_bwd_universe(e->sched[f], u);
        t->nc_b[f] = embed_sched_distinct(e, f, u, t->nu_b, t->c_b + (size_t)f * EMBED_MAX_BWD_U, EMBED_MAX_BWD_U, t->map_b + (size_t)f * EMBED_MAX_BWD_U);
        if (t->nc_f[f] > maxf) maxf = t->nc_f[f];
        if (t->nc_b[f] > maxb) maxb = t->nc_b[f];
    }
    t->rounds_f = maxf * reps;
    t->rounds_b = maxb * reps;
    t->rep.fwd_rounds = t->rounds_f;
    t->rep.bwd_rounds = t->rounds_b;
    t->rep.global_rounds = N_GLOBAL * t->greps;
    t->rep.winner = t->rep.winner_bwd = -1;
    e->tuner = t;
    return REC_OK;
}

int rec_embed_tuning(const rec_embed *e) { return e->tuner && e->tuner->global != 2; }

void rec_embed_tune_result(const rec_embed *e, rec_embed_tune_report *r) {
    if (e->tuner) *r = e->tuner->rep;
    else memset(r, 0, sizeof *r), r->winner = r->winner_bwd = -1;
}

/* Index of table f's candidate with the least seconds per id (per call when no ids), or -1
 * when none was measured; among SAMPLE ones only if sample_only. */
static int best_of(const double *tm, const rec_embed_sched *c, int nc, int sample_only) {
    int best = -1;
    double bv = INFINITY;
    for (int k = 0; k < nc; k++) {
        if (sample_only && c[k].split != REC_SPLIT_SAMPLE) continue;
        if (tm[k] < bv) bv = tm[k], best = k;
    }
    return best;
}

/* Estimated seconds per call of uniform universe member u: the sum over tables of the
 * per-id time of the candidate u is for each table times that table's mean ids per round
 * (infinite when some table never ran it). */
static double uniform_cost(const embed_tuner *t, int u, int backward) {
    const int MU = backward ? EMBED_MAX_BWD_U : EMBED_MAX_FWD_U;
    const int16_t *map = backward ? t->map_b : t->map_f;
    const double *tm = backward ? t->t_b : t->t_f, *n = backward ? t->n_b : t->n_f;
    const int *nc = backward ? t->nc_b : t->nc_f;
    double sum = 0;
    for (int f = 0; f < t->F; f++) {
        const size_t o = (size_t)f * MU;
        const int k = map[o + (size_t)u];
        double ids = 0;
        for (int j = 0; j < nc[f]; j++) ids += n[o + (size_t)j];
        ids /= backward ? t->rounds_b : t->rounds_f;
        sum += tm[o + (size_t)k] * (ids > 1 ? ids : 1);
    }
    return sum;
}

/* The global stage's plans: per-table best; the same with SAMPLE everywhere; the best
 * uniform forward schedule of each split with the best uniform backward one; the plan tuning
 * started from. */
static void build_global(rec_embed *e, embed_tuner *t) {
    const int F = t->F;
    rec_embed_sched *g0 = t->gplan, *g1 = t->gplan + (size_t)(F + 1);
    t->gkind[0] = 0, t->gkind[1] = 1;
    int any_whole = 0; /* a table not cut into SAMPLE items */
    for (int f = 0; f < F; f++) {
        const size_t of = (size_t)f * EMBED_MAX_FWD_U, ob = (size_t)f * EMBED_MAX_BWD_U;
        int kf = best_of(t->t_f + of, t->c_f + of, t->nc_f[f], 0);
        int kb = best_of(t->t_b + ob, t->c_b + ob, t->nc_b[f], 0);
        rec_embed_sched s = e->sched[f];
        if (kf >= 0) {
            const rec_embed_sched c = t->c_f[of + (size_t)kf];
            s.split = c.split, s.kernel = c.kernel, s.pf = c.pf, s.grain = c.grain;
        }
        if (kb >= 0) s.sort = t->c_b[ob + (size_t)kb].sort, s.bpf = t->c_b[ob + (size_t)kb].bpf;
        g0[f] = g1[f] = s;
        if (s.split != REC_SPLIT_SAMPLE) {
            any_whole = 1;
            const int ks = best_of(t->t_f + of, t->c_f + of, t->nc_f[f], 1);
            if (ks >= 0) {
                const rec_embed_sched c = t->c_f[of + (size_t)ks];
                g1[f].split = c.split, g1[f].kernel = c.kernel, g1[f].pf = c.pf, g1[f].grain = c.grain;
            }
        }
    }
    int n = any_whole ? 2 : 1;
    /* Best uniform backward, then the best uniform forward member of each split. */
    rec_embed_sched ub[EMBED_MAX_BWD_U], uf[EMBED_MAX_FWD_U];
    const rec_embed_sched base = rec_embed_sched_default();
    embed_bwd_universe(base, ub);
    embed_fwd_universe(base, uf);
    int bb = 0;
    for (int u = 1; u < t->nu_b; u++)
        if (uniform_cost(t, u, 1) < uniform_cost(t, bb, 1)) bb = u;
    /* The best uniform forward member of each split: the local times judge a table's rows
     * per id well, but not what a split does to the whole pass (load balance, one table's
     * rows in both cores' caches), which the global stage measures. */
    int pick[3] = {-1, -1, -1};
    double cost[3] = {INFINITY, INFINITY, INFINITY};
    for (int u = 0; u < t->nu_f; u++) {
        const int i = uf[u].split;
        const double c = uniform_cost(t, u, 0);
        if (c < cost[i]) cost[i] = c, pick[i] = u;
    }
    for (int i = 0; i < 3; i++) {
        if (pick[i] < 0) continue;
        rec_embed_sched s = uf[pick[i]];
        s.sort = ub[bb].sort, s.bpf = ub[bb].bpf;
        rec_embed_sched *g = t->gplan + (size_t)n * (size_t)(F + 1);
        for (int f = 0; f < F; f++) {
            g[f] = s;
            if (!embed_sort_fits(e, f, g[f].sort)) g[f].sort = REC_SORT_RADIX;
        }
        t->gkind[n++] = 2 + i;
    }
    memcpy(t->gplan + (size_t)n * (size_t)(F + 1), t->start, (size_t)F * sizeof *t->start);
    t->gkind[n++] = N_GLOBAL - 1;
    t->n_global = n;
    for (int g = 0; g < N_GLOBAL; g++) t->gmf[g] = t->gmb[g] = INFINITY;
    t->global = 1;
}

static void install(rec_embed *e, const rec_embed_sched *plan) { memcpy(e->sched, plan, (size_t)e->F * sizeof *plan); }

/* Ends the global stage. Forward and backward fields act on their own calls, so each is
 * taken from the plan whose calls of that kind were fastest (least seconds per id, each the
 * best of its `reps` calls: whole passes are short, a Kaggle batch takes 0.1 ms, and one
 * preempted call must not decide); judging whole plans by the sum let the backward, two
 * thirds of a step, drown a forward 30% slower (Kaggle). */
static void finish_global(rec_embed *e, embed_tuner *t) {
    int bf = 0, bb = -1;
    for (int g = 0; g < N_GLOBAL; g++) t->rep.global_s[g] = INFINITY;
    for (int g = 0; g < t->n_global; g++) {
        t->rep.global_s[t->gkind[g]] = t->gmf[g] + (isfinite(t->gmb[g]) ? t->gmb[g] : 0);
        if (t->gmf[g] < t->gmf[bf]) bf = g;
        if (isfinite(t->gmb[g]) && (bb < 0 || t->gmb[g] < t->gmb[bb])) bb = g;
    }
    if (bb < 0) bb = bf; /* no backward ran: keep the forward winner's backward fields */
    const rec_embed_sched *pf = t->gplan + (size_t)bf * (size_t)(t->F + 1), *pb = t->gplan + (size_t)bb * (size_t)(t->F + 1);
    for (int f = 0; f < t->F; f++) {
        e->sched[f] = pf[f];
        e->sched[f].sort = pb[f].sort, e->sched[f].bpf = pb[f].bpf;
    }
    t->rep.winner = t->gkind[bf];
    t->rep.winner_bwd = t->gkind[bb];
    t->global = 2;
    e->profiling = 0;
}

void embed_tune_before(rec_embed *e, int backward) {
    embed_tuner *t = e->tuner;
    if (t->global == 2) return;
    if (t->global == 1) {
        if (!backward) {
            if (t->g_call >= t->n_global * t->greps) {
                finish_global(e, t);
                return;
            }
            t->cur_g = t->g_call % t->n_global; /* interleaved, so a slow spell hits every plan */
            install(e, t->gplan + (size_t)t->cur_g * (size_t)(t->F + 1));
        }
        return;
    }
    const int call = backward ? t->call_b : t->call_f, rounds = backward ? t->rounds_b : t->rounds_f;
    if (call >= rounds) return;
    for (int f = 0; f < t->F; f++) {
        rec_embed_sched *s = &e->sched[f];
        if (backward) {
            const rec_embed_sched c = t->c_b[(size_t)f * EMBED_MAX_BWD_U + (size_t)(call % t->nc_b[f])];
            s->sort = c.sort, s->bpf = c.bpf;
        } else {
            const rec_embed_sched c = t->c_f[(size_t)f * EMBED_MAX_FWD_U + (size_t)(call % t->nc_f[f])];
            s->split = c.split, s->kernel = c.kernel, s->pf = c.pf, s->grain = c.grain;
        }
    }
    rec_embed_profile_clear(e);
    e->profiling = 1;
}

void embed_tune_after(rec_embed *e, int backward) {
    embed_tuner *t = e->tuner;
    if (t->global == 2) return;
    if (t->global == 1) {
        if (backward) {
            const double v = e->last_bwd_s / (e->last_ids > 1 ? e->last_ids : 1);
            if (v < t->gmb[t->cur_g]) t->gmb[t->cur_g] = v;
        } else {
            const double v = e->last_fwd_s / (e->last_ids > 1 ? e->last_ids : 1);
            if (v < t->gmf[t->cur_g]) t->gmf[t->cur_g] = v;
            t->g_call++;
        }
        if (backward && t->g_call >= t->n_global * t->greps) finish_global(e, t);
        return;
    }
    int *call = backward ? &t->call_b : &t->call_f;
    const int rounds = backward ? t->rounds_b : t->rounds_f, MU = backward ? EMBED_MAX_BWD_U : EMBED_MAX_FWD_U;
    if (*call >= rounds) return;
    if (backward) rec_embed_profile_read(e, NULL, t->scratch_t, NULL, t->scratch_n);
    else rec_embed_profile_read(e, t->scratch_t, NULL, t->scratch_n, NULL);
    for (int f = 0; f < t->F; f++) {
        const int nc = backward ? t->nc_b[f] : t->nc_f[f];
        const size_t k = (size_t)f * MU + (size_t)(*call % nc);
        /* A table that repeats a candidate (fewer candidates than rounds, RecFlex's padding)
         * runs it again for the others' sake; its own measurement counts once per rep. */
        if (*call / nc >= t->reps) continue;
        double *tm = &(backward ? t->t_b : t->t_f)[k];
        const double v = t->scratch_t[f] / (t->scratch_n[f] > 1 ? t->scratch_n[f] : 1);
        if (v < *tm) *tm = v;
        (backward ? t->n_b : t->n_f)[k] += t->scratch_n[f];
    }
    (*call)++;
    e->profiling = 0;
    if (t->call_f >= t->rounds_f && t->call_b >= t->rounds_b) build_global(e, t);
}

/* ---- separately tuned ----------------------------------------------------------------------- */

rec_status rec_embed_tune_separate(rec_embed *e, const rec_batch *const *batches, int n, int first_feature,
                                   const float *dout, float lr) {
    float *out;
    REC_TRY(rec_alloc((void **)&out, (size_t)e->max_batch * (size_t)(e->W + 1) * sizeof(float), "embedding tuner"));
    rec_status s = REC_OK;
    for (int f = 0; !s && f < e->F; f++) {
        rec_embed_sched c[REC_EMBED_MAX_CANDIDATES];
        for (int pass = 0; pass < 2 && !s; pass++) {
            const int nc = pass ? rec_embed_bwd_candidates(e, f, c, REC_EMBED_MAX_CANDIDATES)
                                : rec_embed_fwd_candidates(e, f, c, REC_EMBED_MAX_CANDIDATES);
            int best = 0;
            double bt = INFINITY;
            for (int k = 0; k < nc && !s; k++) {
                e->sched[f] = c[k];
                double tk = 0;
                for (int i = 0; i < n && !s; i++) {
                    s = pass ? embed_backward_run(e, batches[i], first_feature, dout, lr, f)
                             : embed_forward_run(e, batches[i], first_feature, out, f);
                    tk += pass ? e->last_bwd_s : e->last_fwd_s;
                }
                if (tk < bt) bt = tk, best = k;
            }
            e->sched[f] = c[best];
        }
    }
    rec_free(out);
    return s;
}
