/* Horizontal fusion of a spec's op instances for the GPU executor (RAP §6.1-6.2).
 *
 * Instance i (an op of a feature's chain) runs at time step s(i) in [0, L). The MILP of RAP
 * §6.2, with x[i][j] = 1 when i runs at step j:
 *
 *   (1) sum_j x[i][j] = 1                                  every instance runs once
 *   (2) sum_j j x[i][j] >= sum_j j x[p][j] + 1             after each instance p it reads
 *   (3,4) maximise sum over types T and steps j of (sum_{i in T} x[i][j])^2
 *
 * where a type is (kind, dtype, list or not): the instances one fused kernel can run. GLPK
 * solves linear programs only, so the square of a degree g = sum_{i in T} x[i][j] is encoded
 * in unary: binaries z_1 >= z_2 >= ... >= z_m with sum_d z_d = g, so z_d = [d <= g], and
 * g^2 = sum_d (2d - 1) z_d. x[i][j] exists only for the steps i can take: from its depth
 * (the longest chain of instances before it) to L - 1 - its height (the longest after it).
 *
 * Chains that no other feature reads, with the same types op by op and the same inputs'
 * instances before them, are interchangeable, and an optimal plan runs them in step: for two
 * such chains with step indicators a and b, and c for the rest, sum (c + a + b)^2 is at most
 * the mean of sum (c + 2a)^2 and sum (c + 2b)^2, since (a + b)^2 <= 2a^2 + 2b^2. So one
 * instance of weight k stands for k aligned ones (the Criteo specs' 26 sparse chains become
 * one), which removes the symmetry that left the branch and bound unable to prove optimality.
 *
 * Among plans fusing as much, the one with the earliest steps wins (a tie-break term below one
 * unit of the squares).
 *
 * The as-soon-as-possible schedule (every instance at its depth: the CPU executor's grouping)
 * is handed to the branch and bound as its first incumbent, so a time limit always leaves a
 * plan at least as fused as that. L defaults to max(8, depth), the steps RAP's artifact uses
 * (MILP_solver.py: nLayer = 8); steps no kernel uses are dropped from the plan.
 */
#include <glpk.h>
#include <stdlib.h>
#include <string.h>

#include "rectrain/core.h"
#include "rectrain/prep.h"

/* The instances and their dependencies. */
typedef struct graph {
    int n, L;
    int *type;               /* (n) index of (kind, dtype, is_list) among the spec's types */
    int *pred_at, *pred;     /* instance i reads pred[pred_at[i] .. pred_at[i + 1]) */
    int *lo, *hi;            /* (n) its first and last possible step */
    int *w, *rep;            /* (n) instances it stands for (0: it takes instance rep's step) */
    int n_types;
} graph;

static void graph_free(graph *g) {
    free(g->type), free(g->pred_at), free(g->pred), free(g->lo), free(g->hi), free(g->w), free(g->rep);
    memset(g, 0, sizeof *g);
}

static int type_key(const rec_op *op) { return ((int)op->kind * 2 + (int)op->in.dtype) * 2 + (op->in.is_list != 0); }

static int *grow(int *p, int *cap) {
    int *q = realloc(p, sizeof(int) * (size_t)(*cap * 2));
    if (q) *cap *= 2;
    else free(p);
    return q;
}

/* The instances a feature's output comes from: its last op, or (no ops) its inputs'. */
static rec_status tails(const rec_spec *s, const int *first, int **at_out, int **list_out) {
    const int F = s->n_features;
    int *at = calloc((size_t)F + 1, sizeof(int)), cap = 64, n = 0;
    int *list = malloc(sizeof(int) * (size_t)cap);
    if (!at || !list) goto oom;
    for (int f = 0; f < F; f++) {
        const rec_feature *ft = &s->features[f];
        at[f] = n;
        if (ft->n_ops) {
            if (n == cap && !(list = grow(list, &cap))) goto oom;
            list[n++] = first[f] + ft->n_ops - 1;
        } else {
            for (int k = 0; k < ft->n_inputs; k++) {
                const int g = ft->inputs[k];
                for (int t = g >= 0 ? at[g] : 0; g >= 0 && t < at[g + 1]; t++) {
                    if (n == cap && !(list = grow(list, &cap))) goto oom;
                    list[n++] = list[t];
                }
            }
        }
        at[f + 1] = n;
    }
    *at_out = at, *list_out = list;
    return REC_OK;
oom:
    free(at), free(list);
    return rec_errorf(REC_ENOMEM, "fusion plan: out of memory");
}

static int by_int(const void *a, const void *b) { return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b); }

/* Do chains f and h (first instances a, b) align: no reader, the same types, the same inputs? */
static int same_class(const rec_spec *s, const graph *g, const uint8_t *read, int f, int h, int a, int b) {
    const int n = s->features[f].n_ops;
    if (read[f] || read[h] || n == 0 || n != s->features[h].n_ops) return 0;
    for (int j = 0; j < n; j++)
        if (g->type[a + j] != g->type[b + j]) return 0;
    const int pa = g->pred_at[a + 1] - g->pred_at[a];
    if (pa != g->pred_at[b + 1] - g->pred_at[b]) return 0;
    return memcmp(g->pred + g->pred_at[a], g->pred + g->pred_at[b], sizeof(int) * (size_t)pa) == 0;
}

/* Gives each instance its weight and representative (see the top of the file). */
static rec_status align(const rec_spec *s, const int *first, graph *g) {
    const int F = s->n_features;
    uint8_t *read = calloc((size_t)F + 1, 1);
    if (!read || !(g->w = malloc(sizeof(int) * ((size_t)g->n + 1))) || !(g->rep = malloc(sizeof(int) * ((size_t)g->n + 1)))) {
        free(read);
        return rec_errorf(REC_ENOMEM, "fusion plan: out of memory");
    }
    for (int f = 0; f < F; f++)
        for (int k = 0; k < s->features[f].n_inputs; k++)
            if (s->features[f].inputs[k] >= 0) read[s->features[f].inputs[k]] = 1;
    for (int i = 0; i < g->n; i++) /* the inputs' instances in one order, for comparing */
        qsort(g->pred + g->pred_at[i], (size_t)(g->pred_at[i + 1] - g->pred_at[i]), sizeof(int), by_int);
    for (int i = 0; i < g->n; i++) g->w[i] = 1, g->rep[i] = i;
    for (int f = 0; f < F; f++) {
        int r = 0;
        while (r < f && !(g->w[first[r]] && same_class(s, g, read, r, f, first[r], first[f]))) r++;
        if (r == f) continue;
        for (int j = 0; j < s->features[f].n_ops; j++)
            g->w[first[r] + j]++, g->w[first[f] + j] = 0, g->rep[first[f] + j] = first[r] + j;
    }
    free(read);
    return REC_OK;
}

static rec_status build(const rec_spec *s, int steps, rec_fusion *out, graph *g) {
    const int F = s->n_features;
    int *first = malloc(sizeof(int) * ((size_t)F + 1)), *tat = NULL, *tl = NULL;
    if (!first) return rec_errorf(REC_ENOMEM, "fusion plan: out of memory");
    int n = 0;
    for (int f = 0; f < F; f++) first[f] = n, n += s->features[f].n_ops;
    first[F] = n;
    rec_status st = tails(s, first, &tat, &tl);
    int edges = 0;
    for (int f = 0; !st && f < F; f++) {
        const rec_feature *ft = &s->features[f];
        edges += ft->n_ops ? ft->n_ops - 1 : 0;
        for (int k = 0; ft->n_ops && k < ft->n_inputs; k++)
            if (ft->inputs[k] >= 0) edges += tat[ft->inputs[k] + 1] - tat[ft->inputs[k]];
    }
    g->n = n;
    out->n_ops = n;
    int *seen = NULL;
    if (!st && (!(out->ops = calloc((size_t)n + 1, sizeof(rec_fusion_op))) || !(g->type = malloc(sizeof(int) * (size_t)n + 1)) ||
                !(g->pred_at = calloc((size_t)n + 1, sizeof(int))) || !(g->pred = malloc(sizeof(int) * (size_t)edges + 1)) ||
                !(g->lo = calloc((size_t)n + 1, sizeof(int))) || !(g->hi = calloc((size_t)n + 1, sizeof(int))) ||
                !(seen = malloc(sizeof(int) * (4 * (size_t)REC_OP_COUNT)))))
        st = rec_errorf(REC_ENOMEM, "fusion plan: out of memory");
    for (int k = 0; !st && k < 4 * REC_OP_COUNT; k++) seen[k] = -1;
    int e = 0;
    for (int f = 0; !st && f < F; f++) {
        const rec_feature *ft = &s->features[f];
        for (int j = 0; j < ft->n_ops; j++) {
            const int i = first[f] + j;
            out->ops[i] = (rec_fusion_op){f, j, 0};
            const int key = type_key(&ft->ops[j]);
            if (seen[key] < 0) seen[key] = g->n_types++;
            g->type[i] = seen[key];
            g->pred_at[i] = e;
            if (j) g->pred[e++] = i - 1;
            for (int k = 0; !j && k < ft->n_inputs; k++)
                for (int t = ft->inputs[k] >= 0 ? tat[ft->inputs[k]] : 0; ft->inputs[k] >= 0 && t < tat[ft->inputs[k] + 1]; t++)
                    g->pred[e++] = tl[t];
        }
    }
    if (!st) g->pred_at[n] = e;
    if (!st) st = align(s, first, g);
    /* depth (lo) forward; height backward, into hi once L is known */
    int depth = 0;
    for (int i = 0; !st && i < n; i++) {
        for (int k = g->pred_at[i]; k < g->pred_at[i + 1]; k++)
            if (g->lo[g->pred[k]] + 1 > g->lo[i]) g->lo[i] = g->lo[g->pred[k]] + 1;
        if (g->lo[i] + 1 > depth) depth = g->lo[i] + 1;
    }
    for (int i = n - 1; !st && i >= 0; i--)
        for (int k = g->pred_at[i]; k < g->pred_at[i + 1]; k++)
            if (g->hi[i] + 1 > g->hi[g->pred[k]]) g->hi[g->pred[k]] = g->hi[i] + 1;
    g->L = steps > depth ? steps : depth;
    for (int i = 0; !st && i < n; i++) g->hi[i] = g->L - 1 - g->hi[i];
    out->depth = depth;
    free(first), free(tat), free(tl), free(seen);
    return st;
}

/* ---- the MILP ------------------------------------------------------------------------------ */

typedef struct milp {
    glp_prob *lp;
    int *xcol;               /* (n) column of x[i][lo_i]; x[i][j] is xcol[i] + j - lo_i */
    int *zcol, *zm;          /* (types * L) first z column of (t, j) and its m (0: none) */
    int ncols;
    double *start;           /* (ncols + 1) the ASAP schedule's values */
    int given;
} milp;

/* The values of every column when instance i runs at step s[i]. */
static void values_of(const graph *g, const milp *m, const int *s, double *v) {
    memset(v, 0, sizeof(double) * ((size_t)m->ncols + 1));
    for (int i = 0; i < g->n; i++)
        if (g->w[i]) v[m->xcol[i] + s[i] - g->lo[i]] = 1;
    for (int t = 0; t < g->n_types; t++)
        for (int j = 0; j < g->L; j++) {
            int deg = 0;
            for (int i = 0; i < g->n; i++) deg += g->type[i] == t && s[i] == j ? g->w[i] : 0;
            for (int d = 0; d < deg; d++) v[m->zcol[t * g->L + j] + d] = 1;
        }
}

static void on_branch(glp_tree *tree, void *info) {
    milp *m = info;
    if (glp_ios_reason(tree) == GLP_IHEUR && !m->given) {
        m->given = 1;
        glp_ios_heur_sol(tree, m->start);
    }
}

static rec_status solve(const graph *g, double limit, int *step, int *optimal) {
    const int n = g->n, L = g->L, T = g->n_types;
    milp m = {0};
    rec_status st = REC_OK;
    m.xcol = malloc(sizeof(int) * (size_t)n + 1);
    m.zcol = calloc((size_t)(T * L) + 1, sizeof(int));
    m.zm = calloc((size_t)(T * L) + 1, sizeof(int));
    int nnz = 0;
    for (int i = 0; i < n; i++) nnz += (2 + 2 * (g->pred_at[i + 1] - g->pred_at[i])) * L; /* (1), (2), degrees */
    nnz += 3 * n * L + 1;                                                                  /* z, their order */
    int *ia = malloc(sizeof(int) * ((size_t)nnz + 1)), *ja = malloc(sizeof(int) * ((size_t)nnz + 1));
    double *ar = malloc(sizeof(double) * ((size_t)nnz + 1));
    if (!m.xcol || !m.zcol || !m.zm || !ia || !ja || !ar) {
        st = rec_errorf(REC_ENOMEM, "fusion plan: out of memory for the MILP");
        goto out;
    }
    m.lp = glp_create_prob();
    glp_set_obj_dir(m.lp, GLP_MAX);
    for (int i = 0; i < n; i++)
        if (g->w[i]) m.xcol[i] = m.ncols + 1, m.ncols += g->hi[i] - g->lo[i] + 1;
    for (int i = 0; i < n; i++)
        for (int j = g->lo[i]; g->w[i] && j <= g->hi[i]; j++) m.zm[g->type[i] * L + j] += g->w[i];
    for (int k = 0; k < T * L; k++)
        if (m.zm[k]) m.zcol[k] = m.ncols + 1, m.ncols += m.zm[k];
    glp_add_cols(m.lp, m.ncols);
    for (int c = 1; c <= m.ncols; c++) glp_set_col_kind(m.lp, c, GLP_BV);
    /* ties go to the earliest steps: the squares weigh more than every step of every instance */
    double K = 1;
    for (int i = 0; i < n; i++) K += (double)g->w[i] * (L - 1);
    for (int k = 0; k < T * L; k++)
        for (int d = 1; d <= m.zm[k]; d++) glp_set_obj_coef(m.lp, m.zcol[k] + d - 1, (2.0 * d - 1) * K);
    for (int i = 0; i < n; i++)
        for (int j = g->lo[i]; g->w[i] && j <= g->hi[i]; j++) glp_set_obj_coef(m.lp, m.xcol[i] + j - g->lo[i], -(double)j * g->w[i]);
    int r = 0, e = 0;
#define PUT(col, val) (++e, ia[e] = r, ja[e] = (col), ar[e] = (val))
    for (int i = 0; i < n; i++) { /* (1) */
        if (!g->w[i]) continue;
        r = glp_add_rows(m.lp, 1);
        glp_set_row_bnds(m.lp, r, GLP_FX, 1, 1);
        for (int j = g->lo[i]; j <= g->hi[i]; j++) PUT(m.xcol[i] + j - g->lo[i], 1);
    }
    for (int i = 0; i < n; i++) /* (2) */
        for (int k = g->pred_at[i]; g->w[i] && k < g->pred_at[i + 1]; k++) {
            const int p = g->pred[k];
            r = glp_add_rows(m.lp, 1);
            glp_set_row_bnds(m.lp, r, GLP_LO, 1, 0);
            for (int j = g->lo[i]; j <= g->hi[i]; j++)
                if (j) PUT(m.xcol[i] + j - g->lo[i], j);
            for (int j = g->lo[p]; j <= g->hi[p]; j++)
                if (j) PUT(m.xcol[p] + j - g->lo[p], -j);
        }
    for (int t = 0; t < T; t++) /* the degrees, in unary */
        for (int j = 0; j < L; j++) {
            const int k = t * L + j;
            if (!m.zm[k]) continue;
            r = glp_add_rows(m.lp, 1);
            glp_set_row_bnds(m.lp, r, GLP_FX, 0, 0);
            for (int i = 0; i < n; i++)
                if (g->w[i] && g->type[i] == t && j >= g->lo[i] && j <= g->hi[i]) PUT(m.xcol[i] + j - g->lo[i], g->w[i]);
            for (int d = 0; d < m.zm[k]; d++) PUT(m.zcol[k] + d, -1);
            for (int d = 0; d + 1 < m.zm[k]; d++) {
                r = glp_add_rows(m.lp, 1);
                glp_set_row_bnds(m.lp, r, GLP_LO, 0, 0);
                PUT(m.zcol[k] + d, 1);
                PUT(m.zcol[k] + d + 1, -1);
            }
        }
#undef PUT
    glp_load_matrix(m.lp, e, ia, ja, ar);
    if (!(m.start = malloc(sizeof(double) * ((size_t)m.ncols + 1)))) {
        st = rec_errorf(REC_ENOMEM, "fusion plan: out of memory for the MILP");
        goto out;
    }
    values_of(g, &m, g->lo, m.start); /* ASAP: every instance at its depth */
    glp_smcp sp;
    glp_init_smcp(&sp);
    sp.msg_lev = GLP_MSG_OFF;
    glp_iocp ip;
    glp_init_iocp(&ip);
    ip.msg_lev = GLP_MSG_OFF;
    ip.tm_lim = (int)(limit * 1000);
    ip.cb_func = on_branch;
    ip.cb_info = &m;
    const int rs = glp_simplex(m.lp, &sp);
    const int ri = rs ? rs : glp_intopt(m.lp, &ip);
    const int ms = glp_mip_status(m.lp);
    if ((ri && ri != GLP_ETMLIM) || (ms != GLP_OPT && ms != GLP_FEAS)) {
        if (ri != GLP_ETMLIM) {
            st = rec_errorf(REC_EIO, "fusion plan: GLPK failed (glp_%s %d, status %d)", rs ? "simplex" : "intopt", ri, ms);
            goto out;
        }
        memcpy(step, g->lo, sizeof(int) * (size_t)n); /* no incumbent in time: ASAP */
        *optimal = 0;
        goto out;
    }
    *optimal = ri == 0 && ms == GLP_OPT;
    for (int i = 0; i < n; i++) {
        step[i] = g->lo[i];
        for (int j = g->lo[i]; g->w[i] && j <= g->hi[i]; j++)
            if (glp_mip_col_val(m.lp, m.xcol[i] + j - g->lo[i]) > 0.5) step[i] = j;
    }
    for (int i = 0; i < n; i++) step[i] = step[g->rep[i]];
out:
    if (m.lp) glp_delete_prob(m.lp);
    free(m.xcol), free(m.zcol), free(m.zm), free(m.start), free(ia), free(ja), free(ar);
    return st;
}

/* ---- the plan ------------------------------------------------------------------------------ */

rec_status rec_prep_fuse(const rec_spec *spec, const rec_fusion_opts *opts, rec_fusion *out) {
    memset(out, 0, sizeof *out);
    graph g = {0};
    rec_status st = build(spec, opts && opts->steps > 0 ? opts->steps : 8, out, &g);
    int *step = NULL;
    const double t0 = rec_now();
    if (!st && !(step = malloc(sizeof(int) * (size_t)g.n + 1))) st = rec_errorf(REC_ENOMEM, "fusion plan: out of memory");
    if (!st && g.n) st = solve(&g, opts && opts->time_limit > 0 ? opts->time_limit : 10, step, &out->optimal);
    else out->optimal = 1;
    out->seconds = rec_now() - t0;
    /* steps no instance uses are dropped; kernels are (step, type) groups in step order */
    int *used = NULL;
    if (!st && (!(used = calloc((size_t)g.L + 1, sizeof(int))) ||
                !(out->members_ = malloc(sizeof(int) * (size_t)g.n + 1)) ||
                !(out->kernels = calloc((size_t)g.n + 1, sizeof(rec_fused_kernel)))))
        st = rec_errorf(REC_ENOMEM, "fusion plan: out of memory");
    if (!st) {
        for (int i = 0; i < g.n; i++) used[step[i]] = 1;
        for (int j = 0, k = 0; j < g.L; j++) used[j] = used[j] ? k++ : -1;
        for (int i = 0; i < g.n; i++) out->ops[i].step = used[step[i]];
        int m = 0;
        for (int j = 0; j < g.L; j++)
            for (int t = 0; t < g.n_types; t++) {
                rec_fused_kernel *k = &out->kernels[out->n_kernels];
                k->members = out->members_ + m;
                for (int i = 0; i < g.n; i++) {
                    if (g.type[i] != t || step[i] != j) continue;
                    const rec_op *op = &spec->features[out->ops[i].feature].ops[out->ops[i].op];
                    k->step = out->ops[i].step, k->kind = op->kind, k->dtype = op->in.dtype, k->is_list = op->in.is_list != 0;
                    out->members_[m++] = i;
                    k->n++;
                }
                if (k->n) {
                    out->objective += (int64_t)k->n * k->n;
                    if (k->step + 1 > out->n_steps) out->n_steps = k->step + 1;
                    out->n_kernels++;
                }
            }
    }
    free(step), free(used);
    graph_free(&g);
    if (st) rec_fusion_free(out);
    return st;
}

rec_status rec_fusion_shard(const rec_fusion *f, int most, rec_fusion *out) {
    memset(out, 0, sizeof *out);
    if (most < 1) return rec_errorf(REC_EINVAL, "fusion plan: shards of %d instances", most);
    *out = *f;
    out->ops = malloc(sizeof(rec_fusion_op) * ((size_t)f->n_ops + 1));
    out->members_ = malloc(sizeof(int) * ((size_t)f->n_ops + 1));
    out->kernels = calloc((size_t)f->n_ops + 1, sizeof(rec_fused_kernel));
    out->n_kernels = 0;
    if (!out->ops || !out->members_ || !out->kernels) {
        rec_fusion_free(out);
        return rec_errorf(REC_ENOMEM, "fusion plan: out of memory");
    }
    memcpy(out->ops, f->ops, sizeof(rec_fusion_op) * (size_t)f->n_ops);
    out->objective = 0;
    for (int k = 0, m = 0; k < f->n_kernels; k++)
        for (int a = 0; a < f->kernels[k].n; a += most) {
            rec_fused_kernel *p = &out->kernels[out->n_kernels++];
            *p = f->kernels[k];
            p->n = f->kernels[k].n - a < most ? f->kernels[k].n - a : most;
            memcpy(out->members_ + m, f->kernels[k].members + a, sizeof(int) * (size_t)p->n);
            p->members = out->members_ + m;
            m += p->n;
            out->objective += (int64_t)p->n * p->n;
        }
    return REC_OK;
}

void rec_fusion_free(rec_fusion *f) {
    free(f->ops), free(f->kernels), free(f->members_);
    memset(f, 0, sizeof *f);
}

void rec_fusion_describe(const rec_fusion *f, const rec_spec *spec, FILE *out) {
    fprintf(out, "GPU kernels (RAP horizontal fusion, MILP by GLPK): %d op instances in %d kernels over %d steps "
            "(depth %d); sum of squared fusion degrees %lld (%s, %.2f s)\n", f->n_ops, f->n_kernels, f->n_steps, f->depth,
            (long long)f->objective, f->optimal ? "optimal" : "best found in the time limit", f->seconds);
    for (int k = 0; k < f->n_kernels; k++) {
        const rec_fused_kernel *kr = &f->kernels[k];
        fprintf(out, "  step %d  %s on %s%s  x%d:", kr->step, rec_op_name(kr->kind), kr->dtype == REC_DT_F32 ? "f32" : "i64",
                kr->is_list ? " lists" : "", kr->n);
        for (int i = 0; i < kr->n; i++) {
            const rec_fusion_op *o = &f->ops[kr->members[i]];
            fprintf(out, " %s", spec->features[o->feature].name);
            if (spec->features[o->feature].n_ops > 1) fprintf(out, ".%d", o->op);
        }
        fprintf(out, "\n");
    }
}
