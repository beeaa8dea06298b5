/* Sharding plans (plan.h): their layout, the cost model of OPER §3.2 (Eq. 1-3), and the
 * planners — replicated, table-, row- and column-wise, a size x pooling greedy, and OPER §4.
 *
 * Cost model, per rank per step of global batch B, from a profile (row k: A_k ranks use it,
 * q_k share of steps it is used in), for a part of w of E columns:
 *   sharded row k, owner j: j reads it A_k times (Eq. 2, scaled by w / E); the A_k (N-1)/N
 *     other users fetch w floats from j (Eq. 3, forward) and send back its gradient (an 8-byte
 *     id and w floats, or E for row-wise Adagrad whose mean square needs the whole row);
 *     by symmetry each other rank is one of them A_k / N times.
 *   replicated rows: every rank holds them; each rank reads A_k / N; their gradients are
 *     aggregated per row locally, zero-padded to all replicated rows of the part and summed
 *     by a ring all-reduce (§5, "Local-aggregated Sparse AllReduce"): 2 (N-1)/N of the
 *     buffer sent and received by every rank.
 *   dense gradients: a ring all-reduce of P floats, the same under every plan.
 * Step time = (ids * slice_s + lookups * L) * ranks_per_core + fetched * get_s +
 * max(point-to-point sent, received) / bw_p2p + replicated all-reduce bytes / bw_ar.
 *
 * The executor's own work (train under mpirun measures it): every rank's slice, ids * slice_s
 * (the same under every plan); each fetched row's get, get_s; lookups * L is the owner's sum
 * and update of its records. Compute scales by the ranks sharing a core.
 *
 * Lower bound of the max step over every plan: the mean over ranks of the terms above, each
 * row moved the cheaper way — sharded, its A (N-1)/N users' fetches (bytes and gets) and
 * gradients (at least 8 E bytes each: ids and column cuts only add) spread over the N ranks;
 * replicated, its all-reduce on every rank (column cuts divide both alike). Lookups add up to
 * sum A * L; the slices' work is the same on every plan.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sharding_impl.h"

static const char *const KIND_NAMES[REC_PLAN_TORCHREC + 1] = {"replicated", "table", "row", "column", "greedy", "oper",
                                                                "torchrec"};

const char *rec_plan_kind_name(rec_plan_kind k) { return (int)k >= 0 && (int)k <= REC_PLAN_TORCHREC ? KIND_NAMES[k] : "?"; }

int rec_plan_kind_from_name(const char *name) {
    for (int k = 0; k <= REC_PLAN_TORCHREC; k++)
        if (strcmp(name, KIND_NAMES[k]) == 0) return k;
    return -1;
}

void rec_plan_hw_default(rec_plan_hw *hw) {
    hw->lookup_s = 1.0 / 43e6;  /* random 64-byte rows, ~43M/s on this machine */
    hw->slice_s = 0;            /* the same on every plan: 0 compares plans (train measures it) */
    hw->get_s = 0;
    hw->ranks_per_core = 1;
    hw->bw_p2p = 1.0e9;         /* fine-grained gets of rows from another rank */
    hw->bw_ar = 4.0e9;          /* a ring all-reduce of a large buffer */
    hw->cache_bytes = hw->miss_s = hw->rep_row_s = hw->skew_s = 0; /* measured (units.c), or given */
    hw->mem_bytes = 64e9; /* GB, as plan prints every size */
    hw->extra_mem = 0.05;
    hw->threshold = 0.001;
}

/* ---- layout ------------------------------------------------------------------------------ */

rec_status rec__plan_alloc(rec_plan **out, rec_plan_kind kind, const rec_plan_model *m) {
    *out = NULL;
    rec_plan *p = calloc(1, sizeof *p);
    if (!p) return rec_errorf(REC_ENOMEM, "plan: out of memory");
    p->kind = kind;
    p->N = m->ranks;
    p->F = m->tables;
    p->E = m->dim;
    p->opt = m->opt;
    p->batch = m->batch;
    p->dense_params = m->dense_params;
    p->value_bytes = m->bf16 ? 2.0 : 4.0;
    const size_t F1 = (size_t)(m->tables ? m->tables : 1);
    p->rows = malloc(sizeof(int64_t) * F1);
    p->n_parts = calloc(F1, sizeof(int));
    p->parts = calloc(F1, sizeof(plan_part *));
    p->cost = calloc((size_t)m->ranks, sizeof(rec_plan_cost));
    if (!p->rows || !p->n_parts || !p->parts || !p->cost) {
        rec_plan_free(p);
        return rec_errorf(REC_ENOMEM, "plan: out of memory");
    }
    for (int f = 0; f < p->F; f++) p->rows[f] = m->rows[f];
    *out = p;
    return REC_OK;
}

static void part_clear(plan_part *q) {
    free(q->seg_start);
    free(q->seg_owner);
    free(q->hot_row);
    free(q->hot_owner);
    memset(q, 0, sizeof *q);
}

void rec_plan_free(rec_plan *p) {
    if (!p) return;
    for (int f = 0; p->parts && f < p->F; f++) {
        for (int c = 0; p->parts[f] && c < p->n_parts[f]; c++) part_clear(&p->parts[f][c]);
        free(p->parts[f]);
    }
    free(p->parts);
    free(p->n_parts);
    free(p->rows);
    free(p->cost);
    free(p);
}

rec_status rec__plan_set_cols(rec_plan *p, int f, int n_parts) {
    for (int c = 0; p->parts[f] && c < p->n_parts[f]; c++) part_clear(&p->parts[f][c]);
    free(p->parts[f]);
    p->parts[f] = calloc((size_t)n_parts, sizeof(plan_part));
    p->n_parts[f] = p->parts[f] ? n_parts : 0;
    return p->parts[f] ? REC_OK : rec_errorf(REC_ENOMEM, "plan: out of memory");
}

rec_status rec__plan_set_part(rec_plan *p, int f, int c, int c0, int c1, int64_t n_seg, const int64_t *seg_start,
                              const int *seg_owner, int64_t n_hot, const int64_t *hot_row, const int *hot_owner) {
    plan_part *q = &p->parts[f][c];
    part_clear(q);
    q->c0 = c0;
    q->c1 = c1;
    q->n_seg = n_seg;
    q->n_hot = n_hot;
    q->seg_start = malloc(sizeof(int64_t) * (size_t)(n_seg ? n_seg : 1));
    q->seg_owner = malloc(sizeof(int) * (size_t)(n_seg ? n_seg : 1));
    q->hot_row = malloc(sizeof(int64_t) * (size_t)(n_hot ? n_hot : 1));
    q->hot_owner = malloc(sizeof(int) * (size_t)(n_hot ? n_hot : 1));
    if (!q->seg_start || !q->seg_owner || !q->hot_row || !q->hot_owner)
        return rec_errorf(REC_ENOMEM, "plan: out of memory for table %d", f);
    if (n_seg) memcpy(q->seg_start, seg_start, sizeof(int64_t) * (size_t)n_seg);
    if (n_seg) memcpy(q->seg_owner, seg_owner, sizeof(int) * (size_t)n_seg);
    if (n_hot) memcpy(q->hot_row, hot_row, sizeof(int64_t) * (size_t)n_hot);
    if (n_hot) memcpy(q->hot_owner, hot_owner, sizeof(int) * (size_t)n_hot);
    return REC_OK;
}

rec_status rec__plan_check(const rec_plan *p, const char *origin) {
    for (int f = 0; f < p->F; f++) {
        const int C = p->n_parts[f];
        if (C < 1 || C > p->E)
            return rec_errorf(REC_EINVAL, "%s: $.tables[%d].parts: table %d has %d column parts; it needs 1 to %d", origin,
                              f, f, C, p->E);
        for (int c = 0; c < C; c++) {
            const plan_part *q = &p->parts[f][c];
            const int want0 = c ? p->parts[f][c - 1].c1 : 0;
            if (q->c0 != want0 || q->c1 <= q->c0 || (c == C - 1 && q->c1 != p->E))
                return rec_errorf(REC_EINVAL, "%s: $.tables[%d].parts[%d].cols: table %d part %d has columns [%d, %d); the "
                                  "parts must cut [0, %d) in order", origin, f, c, f, c, q->c0, q->c1, p->E);
            if (q->n_seg < 1 || q->seg_start[0] != 0)
                return rec_errorf(REC_EINVAL, "%s: $.tables[%d].parts[%d].segments: table %d part %d: its segments must "
                                  "start at row 0", origin, f, c, f, c);
            for (int64_t s = 0; s < q->n_seg; s++) {
                const int o = q->seg_owner[s];
                if (s && (q->seg_start[s] <= q->seg_start[s - 1] || q->seg_start[s] >= p->rows[f]))
                    return rec_errorf(REC_EINVAL, "%s: $.tables[%d].parts[%d].segments[%lld]: table %d part %d segment %lld "
                                      "starts at row %lld; starts must rise and stay below the table's %lld rows", origin,
                                      f, c, (long long)s, f, c, (long long)s, (long long)q->seg_start[s],
                                      (long long)p->rows[f]);
                if (o < REC_PLAN_EVERY || o >= p->N || (o == REC_PLAN_EVERY && C > 1))
                    return rec_errorf(REC_EINVAL, "%s: $.tables[%d].parts[%d].segments[%lld]: table %d part %d segment %lld "
                                      "has owner %d; owners are ranks 0..%d%s", origin, f, c, (long long)s, f, c,
                                      (long long)s, o, p->N - 1,
                                      C > 1 ? " (a table cut into columns is not replicated)" : ", or -1 for replicated");
            }
            for (int64_t h = 0; h < q->n_hot; h++) {
                const int o = q->hot_owner[h];
                if (q->hot_row[h] < 0 || q->hot_row[h] >= p->rows[f] || (h && q->hot_row[h] <= q->hot_row[h - 1]))
                    return rec_errorf(REC_EINVAL, "%s: $.tables[%d].parts[%d].hot[%lld]: table %d part %d hot row %lld is "
                                      "row %lld; hot rows must rise and stay below the table's %lld rows", origin, f, c,
                                      (long long)h, f, c, (long long)h, (long long)q->hot_row[h], (long long)p->rows[f]);
                if (o < REC_PLAN_EVERY || o >= p->N || (o == REC_PLAN_EVERY && C > 1))
                    return rec_errorf(REC_EINVAL, "%s: $.tables[%d].parts[%d].hot[%lld]: table %d part %d hot row %lld has "
                                      "owner %d; owners are ranks 0..%d%s", origin, f, c, (long long)h, f, c, (long long)h,
                                      o, p->N - 1,
                                      C > 1 ? " (a table cut into columns is not replicated)" : ", or -1 for replicated");
            }
        }
    }
    return REC_OK;
}

int rec_plan_ranks(const rec_plan *p) { return p->N; }
int rec_plan_tables(const rec_plan *p) { return p->F; }
rec_plan_kind rec_plan_get_kind(const rec_plan *p) { return p->kind; }
int64_t rec_plan_rows(const rec_plan *p, int f) { return p->rows[f]; }
int rec_plan_dim(const rec_plan *p) { return p->E; }
const rec_plan_cost *rec_plan_costs(const rec_plan *p) { return p->cost; }
double rec_plan_lower_bound(const rec_plan *p) { return p->lower_bound; }
double rec_plan_threshold(const rec_plan *p) { return p->threshold; }

uint64_t rec_plan_digest(const rec_plan *p) {
    uint32_t a = rec_crc32(0, &p->N, sizeof p->N), b = 0;
    for (int f = 0; f < p->F; f++)
        for (int c = 0; c < p->n_parts[f]; c++) {
            const plan_part *q = &p->parts[f][c];
            a = rec_crc32(a, &q->c0, sizeof q->c0);
            a = rec_crc32(a, q->seg_start, sizeof(int64_t) * (size_t)q->n_seg);
            a = rec_crc32(a, q->seg_owner, sizeof(int) * (size_t)q->n_seg);
            b = rec_crc32(b, q->hot_row, sizeof(int64_t) * (size_t)q->n_hot);
            b = rec_crc32(b, q->hot_owner, sizeof(int) * (size_t)q->n_hot);
        }
    return (uint64_t)a << 32 | b;
}

int rec_plan_col_parts(const rec_plan *p, int f, int *col0) {
    const int C = p->n_parts[f];
    if (col0) {
        for (int c = 0; c < C; c++) col0[c] = p->parts[f][c].c0;
        col0[C] = p->E;
    }
    return C;
}

void rec_plan_get_part(const rec_plan *p, int f, int c, rec_plan_part *out) {
    const plan_part *q = &p->parts[f][c];
    *out = (rec_plan_part){q->c0, q->c1, q->n_seg, q->seg_start, q->seg_owner, q->n_hot, q->hot_row, q->hot_owner};
}

int64_t rec__last_le(const int64_t *a, int64_t n, int64_t x) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (a[mid] <= x) lo = mid + 1;
        else hi = mid;
    }
    return lo - 1;
}

int rec_plan_owner(const rec_plan *p, int f, int c, int64_t r) {
    const plan_part *q = &p->parts[f][c];
    const int64_t h = rec__last_le(q->hot_row, q->n_hot, r);
    if (h >= 0 && q->hot_row[h] == r) return q->hot_owner[h];
    return q->seg_owner[rec__last_le(q->seg_start, q->n_seg, r)];
}

/* ---- the cost model -------------------------------------------------------------------- */

/* ---- Che's approximation ------------------------------------------------------------------
 * An LRU cache of C bytes serving rows i at rates a_i (accesses per step) holds each row with
 * probability 1 - exp(-a_i T), T the cache's characteristic time: the one at which the rows
 * it holds fill it, sum_i b_i (1 - exp(-a_i T)) = C (Che, Tung and Wang, JSAC 2002; exact in
 * the limit of many rows, within a few percent for Zipf-like access). A rank's misses per step
 * are then sum_i a_i exp(-a_i T). The rows an owner serves are grouped by (rate, bytes), of
 * which a profile has few: its rates are counts over the profiled batches. */
typedef struct owned {
    int owner;
    float bytes;
    double a;
} owned;

static int cmp_owned(const void *x, const void *y) {
    const owned *a = x, *b = y;
    if (a->owner != b->owner) return a->owner - b->owner;
    if (a->a != b->a) return a->a < b->a ? -1 : 1;
    return (a->bytes > b->bytes) - (a->bytes < b->bytes);
}

/* Bytes of the n groups g (count[i] rows of g[i].bytes at rate g[i].a) an LRU holds at
 * characteristic time T. */
static double che_fill(const owned *g, const double *count, int64_t n, double T) {
    double fill = 0;
    for (int64_t i = 0; i < n; i++) fill += (double)g[i].bytes * count[i] * -expm1(-g[i].a * T);
    return fill;
}

/* Misses per step of the n groups under an LRU of C bytes. */
static double che_misses(const owned *g, const double *count, int64_t n, double C) {
    double all = 0;
    for (int64_t i = 0; i < n; i++) all += (double)g[i].bytes * count[i];
    if (all <= C) return 0; /* every row it serves fits: only the first touches miss */
    double lo = 0, hi = 1;
    while (che_fill(g, count, n, hi) < C && hi < 1e15) lo = hi, hi *= 4; /* it rises towards all > C */
    for (int it = 0; it < 60; it++) {
        const double T = (lo + hi) / 2;
        if (che_fill(g, count, n, T) < C) lo = T;
        else hi = T;
    }
    const double T = (lo + hi) / 2;
    double miss = 0;
    for (int64_t i = 0; i < n; i++) miss += g[i].a * count[i] * exp(-g[i].a * T);
    return miss;
}

/* Each rank's misses per step (miss[N]) over the rows it owns, e (n entries, sorted here). */
static rec_status rank_misses(owned *e, int64_t n, int N, double C, double *miss) {
    for (int j = 0; j < N; j++) miss[j] = 0;
    if (n == 0 || !(C > 0)) return REC_OK;
    qsort(e, (size_t)n, sizeof *e, cmp_owned);
    double *count = malloc(sizeof(double) * (size_t)n);
    if (!count) return rec_errorf(REC_ENOMEM, "plan: out of memory for the cache model");
    int64_t i = 0;
    while (i < n) {
        const int j = e[i].owner;
        int64_t m = 0, k = i; /* groups of equal (rate, bytes) into e[i ..] and count[i ..] */
        for (; k < n && e[k].owner == j; k++) {
            if (m > 0 && e[i + m - 1].a == e[k].a && e[i + m - 1].bytes == e[k].bytes) {
                count[i + m - 1] += 1;
                continue;
            }
            e[i + m] = e[k];
            count[i + m] = 1;
            m++;
        }
        miss[j] = che_misses(e + i, count + i, m, C);
        i = k;
    }
    free(count);
    return REC_OK;
}

/* A stored row part of w columns: its values as stored (fp32, or bf16 tables' 2 bytes) and its
 * optimizer state, fp32 whatever the values. */
static double row_mem_bytes(const rec_plan *p, int w) {
    return p->value_bytes * w + 4.0 * rec__state_floats(p->opt, w);
}

rec_status rec_plan_predict(rec_plan *p, const rec_plan_profile *prof, const rec_plan_hw *hw) {
    const rec_plan_model *m = &prof->m;
    if (m->ranks != p->N || m->tables != p->F || m->dim != p->E)
        return rec_errorf(REC_EINVAL, "plan: made for %d ranks, %d tables of dim %d; the profile is of %d ranks, %d "
                          "tables of dim %d", p->N, p->F, p->E, m->ranks, m->tables, m->dim);
    const int N = p->N, E = p->E;
    const double share = (double)(N - 1) / N;
    double *own_fwd = calloc((size_t)N * 4, sizeof(double)), *own_grad = own_fwd + N, *ar = own_fwd + 2 * N,
           *own_rows = own_fwd + 3 * N;
    if (!own_fwd) return rec_errorf(REC_ENOMEM, "plan: out of memory");
    double all_fwd = 0, all_grad = 0, all_lookups = 0, all_rows = 0, comm_floor = 0;
    owned *own = NULL; /* the rows each rank serves, for the cache model */
    int64_t n_own = 0, own_cap = 0;
    const int cache = hw->cache_bytes > 0 && hw->miss_s > 0;
    const double cpu = hw->ranks_per_core > 1 ? hw->ranks_per_core : 1;
    /* the cheaper way of moving a row whatever the plan, per rank (the lower bound below) */
    const double fetch_row = share * ((p->value_bytes + 4.0) * E / hw->bw_p2p + hw->get_s) / N, rep_row = 2.0 * share * 4.0 * E / hw->bw_ar;
    memset(p->cost, 0, sizeof(rec_plan_cost) * (size_t)N);
    rec_plan_cost *k = p->cost;
    rec_status s = REC_OK;
    for (int f = 0; f < p->F && !s; f++) {
        prof_row *rows = NULL;
        int64_t n = 0;
        if ((s = rec__profile_rows(prof, f, &rows, &n))) break;
        for (int64_t i = 0; i < n; i++) {
            all_lookups += rows[i].A;
            comm_floor += fmin(rows[i].A * fetch_row, rep_row);
        }
        for (int c = 0; c < p->n_parts[f] && !s; c++) {
            const plan_part *q = &p->parts[f][c];
            const int w = q->c1 - q->c0;
            const double row_bytes = row_mem_bytes(p, w), vb = p->value_bytes;
            const double grad_bytes = 8.0 + 4.0 * rec__grad_floats(p->opt, w, E), scale = (double)w / E;
            double rep_rows = 0;
            for (int64_t g = 0; g < q->n_seg; g++) {
                const double len = (double)((g + 1 < q->n_seg ? q->seg_start[g + 1] : p->rows[f]) - q->seg_start[g]);
                if (q->seg_owner[g] == REC_PLAN_EVERY) rep_rows += len;
                else k[q->seg_owner[g]].mem_bytes += len * row_bytes;
            }
            for (int64_t h = 0; h < q->n_hot; h++) {
                if (q->hot_owner[h] == REC_PLAN_EVERY) rep_rows += 1;
                else k[q->hot_owner[h]].mem_bytes += row_bytes;
            }
            for (int j = 0; j < N; j++) k[j].mem_bytes += rep_rows * row_bytes, k[j].rep_rows += rep_rows;
            for (int j = 0; j < N; j++) ar[j] += 2.0 * share * rep_rows * 4.0 * w;
            for (int64_t i = 0; i < n; i++) {
                const double A = rows[i].A;
                const int j = rec_plan_owner(p, f, c, rows[i].row);
                if (j == REC_PLAN_EVERY) {
                    for (int r = 0; r < N; r++) k[r].lookups += A / N * scale;
                    continue;
                }
                k[j].lookups += A * scale;
                if (cache && n_own == own_cap) {
                    own_cap = own_cap ? 2 * own_cap : 1 << 16;
                    owned *t = realloc(own, sizeof *own * (size_t)own_cap);
                    if (!t) {
                        s = rec_errorf(REC_ENOMEM, "plan: out of memory for the cache model");
                        break;
                    }
                    own = t;
                }
                if (cache) own[n_own++] = (owned){j, (float)row_bytes, A * scale};
                k[j].sent += A * share * vb * w;
                k[j].recv += A * share * grad_bytes;
                all_fwd += A / N * vb * w;
                own_fwd[j] += A / N * vb * w;
                all_rows += A / N;
                own_rows[j] += A / N;
                all_grad += A / N * grad_bytes;
                own_grad[j] += A / N * grad_bytes;
            }
        }
        free(rows);
    }
    double *miss = calloc((size_t)N, sizeof(double));
    if (!s && !miss) s = rec_errorf(REC_ENOMEM, "plan: out of memory");
    if (!s) s = rank_misses(own, n_own, N, hw->cache_bytes, miss);
    free(own);
    const double dense = 2.0 * share * 4.0 * (double)p->dense_params;
    const double ids = prof->batches > 0 ? (double)prof->ids / (double)prof->batches / N : 0; /* slices are even */
    double all_miss = 0; /* a row a rank misses as owner, every other rank misses fetching it */
    for (int j = 0; j < N && !s; j++) all_miss += miss[j];
    for (int j = 0; j < N && !s; j++) {
        k[j].recv += all_fwd - own_fwd[j];
        k[j].sent += all_grad - own_grad[j];
        k[j].ids = ids;
        k[j].fetched = all_rows - own_rows[j];
        const double p2p = k[j].sent > k[j].recv ? k[j].sent : k[j].recv;
        k[j].misses = miss[j];
        k[j].fetch_misses = (all_miss - miss[j]) / N; /* its slice's users' share of each */
        k[j].seconds = (ids * hw->slice_s + k[j].lookups * hw->lookup_s + (k[j].misses + k[j].fetch_misses) * hw->miss_s +
                        k[j].rep_rows * hw->rep_row_s) * cpu +
                       k[j].fetched * hw->get_s + p2p / hw->bw_p2p + ar[j] / hw->bw_ar + hw->skew_s;
        k[j].sent += ar[j] + dense;
        k[j].recv += ar[j] + dense;
    }
    p->lower_bound = (ids * hw->slice_s + all_lookups * hw->lookup_s / N) * cpu + comm_floor + hw->skew_s;
    free(own_fwd);
    free(miss);
    return s;
}

static double max_seconds(const rec_plan *p) {
    double x = 0;
    for (int j = 0; j < p->N; j++) x = p->cost[j].seconds > x ? p->cost[j].seconds : x;
    return x;
}

static rec_status check_fits(const rec_plan *p, const rec_plan_hw *hw) {
    for (int j = 0; j < p->N; j++)
        if (p->cost[j].mem_bytes > hw->mem_bytes)
            return rec_errorf(REC_EINVAL, "plan %s: rank %d would hold %.3g GB of rows and optimizer state, more than its "
                              "%.3g GB; use more ranks, another plan, or give the ranks more memory",
                              rec_plan_kind_name(p->kind), j, p->cost[j].mem_bytes / 1e9, hw->mem_bytes / 1e9);
    return REC_OK;
}

/* ---- placing on the least loaded rank ------------------------------------------------------
 * A binary min-heap of ranks by load (ties: the lower rank), so that placing P partitions on
 * N ranks costs O(P log N). */
typedef struct heap {
    int n;
    int *r;        /* (N) heap of ranks */
    double *load;  /* (N) by rank */
} heap;

static int heap_less(const heap *h, int a, int b) {
    return h->load[a] < h->load[b] || (h->load[a] == h->load[b] && a < b);
}

static void heap_down(heap *h, int i) {
    for (;;) {
        int l = 2 * i + 1, m = i;
        if (l < h->n && heap_less(h, h->r[l], h->r[m])) m = l;
        if (l + 1 < h->n && heap_less(h, h->r[l + 1], h->r[m])) m = l + 1;
        if (m == i) return;
        const int t = h->r[i];
        h->r[i] = h->r[m];
        h->r[m] = t;
        i = m;
    }
}

static rec_status heap_init(heap *h, int N) {
    h->n = N;
    h->r = malloc(sizeof(int) * (size_t)N);
    h->load = calloc((size_t)N, sizeof(double));
    if (!h->r || !h->load) return rec_errorf(REC_ENOMEM, "plan: out of memory");
    for (int i = 0; i < N; i++) h->r[i] = i;
    return REC_OK;
}

static void heap_free(heap *h) {
    free(h->r);
    free(h->load);
}

/* The least loaded rank; adds `add` to its load. */
static int heap_take(heap *h, double add) {
    const int r = h->r[0];
    h->load[r] += add;
    heap_down(h, 0);
    return r;
}

/* ---- the planners ------------------------------------------------------------------------- */

static rec_status whole(rec_plan *p, int f, int owner) {
    REC_TRY(rec__plan_set_cols(p, f, 1));
    const int64_t zero = 0;
    return rec__plan_set_part(p, f, 0, 0, p->E, 1, &zero, &owner, 0, NULL, NULL);
}

/* Table f in N equal row ranges (ranks beyond R_f get none). */
static rec_status row_wise(rec_plan *p, int f) {
    const int N = p->N;
    int64_t *start = malloc(sizeof(int64_t) * (size_t)N);
    int *owner = malloc(sizeof(int) * (size_t)N);
    rec_status s = start && owner ? rec__plan_set_cols(p, f, 1) : rec_errorf(REC_ENOMEM, "plan: out of memory");
    int64_t n = 0;
    for (int r = 0; r < N && !s; r++) {
        const int64_t a = (int64_t)((__int128)r * p->rows[f] / N);
        if (n && a == start[n - 1]) owner[n - 1] = r;  /* an empty range before: this rank takes it */
        else start[n] = a, owner[n++] = r;
    }
    if (!s) s = rec__plan_set_part(p, f, 0, 0, p->E, n, start, owner, 0, NULL, NULL);
    free(start);
    free(owner);
    return s;
}

/* Per-table access per step (sum of A) from the profile. */
static rec_status table_access(const rec_plan_profile *prof, double *acc) {
    for (int f = 0; f < prof->m.tables; f++) {
        prof_row *rows = NULL;
        int64_t n = 0;
        REC_TRY(rec__profile_rows(prof, f, &rows, &n));
        acc[f] = 0;
        for (int64_t i = 0; i < n; i++) acc[f] += rows[i].A;
        free(rows);
    }
    return REC_OK;
}

static double table_bytes(const rec_plan *p, int f) {
    return (double)p->rows[f] * row_mem_bytes(p, p->E);
}

/* Tables in falling order of access (ties: size). */
static const double *g_sort_acc;
static const rec_plan *g_sort_plan;
static int cmp_tables(const void *a, const void *b) {
    const int x = *(const int *)a, y = *(const int *)b;
    if (g_sort_acc[x] != g_sort_acc[y]) return g_sort_acc[x] > g_sort_acc[y] ? -1 : 1;
    if (g_sort_plan->rows[x] != g_sort_plan->rows[y]) return g_sort_plan->rows[x] > g_sort_plan->rows[y] ? -1 : 1;
    return x - y;
}

/* TABLE (every table whole, on the rank with the least access so far) and GREEDY (per table,
 * TorchRec's choice in spirit: small tables replicated, tables with at most a rank's share of
 * the access whole on the least loaded rank, larger ones row-wise over every rank). */
static rec_status table_or_greedy(rec_plan *p, const rec_plan_profile *prof, const rec_plan_hw *hw, int greedy) {
    const int F = p->F, N = p->N;
    double *acc = malloc(sizeof(double) * (size_t)(F ? F : 1)), *mem = calloc((size_t)N, sizeof(double));
    int *order = malloc(sizeof(int) * (size_t)(F ? F : 1));
    heap h = {0};
    rec_status s = acc && mem && order ? heap_init(&h, N) : rec_errorf(REC_ENOMEM, "plan: out of memory");
    if (!s) s = table_access(prof, acc);
    double total = 0, small = 0;
    for (int f = 0; f < F; f++) order[f] = f, total += acc[f];
    g_sort_acc = acc;
    g_sort_plan = p;
    qsort(order, (size_t)F, sizeof(int), cmp_tables);
    enum { SMALL_BYTES = 1 << 20 };  /* TorchRec replicates tables this small (data parallel) */
    for (int i = 0; i < F && !s && greedy; i++)
        if (table_bytes(p, order[i]) <= SMALL_BYTES) small += acc[order[i]];
    for (int i = 0; i < F && !s; i++) {
        const int f = order[i];
        const double bytes = table_bytes(p, f);
        if (greedy && bytes <= SMALL_BYTES) {
            s = whole(p, f, REC_PLAN_EVERY);
        } else if (greedy && acc[f] > (total - small) / N) {
            s = row_wise(p, f);
            for (int r = 0; r < N; r++) h.load[r] += acc[f] / N, mem[r] += bytes / N;
            for (int r = N / 2 - 1; r >= 0; r--) heap_down(&h, r);
        } else {
            /* the least loaded rank with room for it */
            int r = -1;
            int *tried = malloc(sizeof(int) * (size_t)N);
            int nt = 0;
            while (tried && h.n > 0) {
                const int c = h.r[0];
                if (mem[c] + bytes <= hw->mem_bytes) {
                    r = heap_take(&h, acc[f]);
                    break;
                }
                tried[nt++] = c;  /* full: out of the heap for this table */
                h.r[0] = h.r[--h.n];
                heap_down(&h, 0);
            }
            for (int t = 0; t < nt; t++) { /* back in */
                h.r[h.n++] = tried[t];
                for (int u = h.n - 1; u > 0 && heap_less(&h, h.r[u], h.r[(u - 1) / 2]); u = (u - 1) / 2) {
                    const int x = h.r[u];
                    h.r[u] = h.r[(u - 1) / 2];
                    h.r[(u - 1) / 2] = x;
                }
            }
            free(tried);
            if (r < 0)
                s = rec_errorf(REC_EINVAL, "plan %s: table %d (%.3g GB with its optimizer state) fits on no rank's %.3g "
                               "GB; use a row-wise or OPER plan, or more ranks", rec_plan_kind_name(p->kind), f, bytes / 1e9,
                               hw->mem_bytes / 1e9);
            else mem[r] += bytes, s = whole(p, f, r);
        }
    }
    heap_free(&h);
    free(acc);
    free(mem);
    free(order);
    return s;
}

/* COLUMN: table f in C = min(N, E) column ranges, on consecutive ranks round the ring. */
static rec_status column_wise(rec_plan *p) {
    const int C = p->N < p->E ? p->N : p->E;
    const int64_t zero = 0;
    int next = 0;
    for (int f = 0; f < p->F; f++) {
        REC_TRY(rec__plan_set_cols(p, f, C));
        for (int c = 0; c < C; c++) {
            const int owner = next++ % p->N;
            REC_TRY(rec__plan_set_part(p, f, c, c * p->E / C, (c + 1) * p->E / C, 1, &zero, &owner, 0, NULL, NULL));
        }
    }
    return REC_OK;
}

/* ---- OPER (§4) ------------------------------------------------------------------------------
 * hot: every row the profile saw in at least two rank slices (one sighting says little of a
 * row's frequency), sorted by falling A. Step (c) first, in its training form (§4.3): a hot
 * row is replicated when f = A / N, the share of ranks that fetch it per step, exceeds
 * BW_P2P / BW_AR — sharded it costs 2 A (N-1)/N row transfers point to point per step, spread
 * over its users and loaded on its owner; replicated, its zero-padded all-reduce costs every
 * one of the N ranks 2 (N-1)/N rows (the paper writes the rule per sample, f > BW_P2P /
 * (B BW_AR); A / N is that frequency times the per-rank batch, capped at 1) — while the
 * replicas fit in extra_mem of a rank's memory. Then (§4.1) the other hot rows, in order, are
 * cut into access-bounded partitions (at most `thr` of all access each), and each table's row
 * range into memory-bounded ones (contiguous segments of at most `thr` of all memory, whose
 * hot rows are placed by their partition instead); (§4.2) access-bounded partitions go to the
 * rank with the least lookups, memory-bounded ones to the rank with the least memory. When
 * the predicted step times are not within 5% of their mean, thr halves and the placement is
 * redone (at most 16 times); the plan with the lowest max step time is kept. */
typedef struct hot_row {
    int f;
    int64_t row;
    double A;
    int owner;
} hot_row;

static int cmp_hot(const void *a, const void *b) {
    const hot_row *x = a, *y = b;
    if (x->A != y->A) return x->A > y->A ? -1 : 1;
    if (x->f != y->f) return x->f - y->f;
    return (x->row > y->row) - (x->row < y->row);
}

static int cmp_hot_pos(const void *a, const void *b) {
    const hot_row *x = a, *y = b;
    if (x->f != y->f) return x->f - y->f;
    return (x->row > y->row) - (x->row < y->row);
}

/* One OPER placement at threshold thr into p (hot[] sorted by falling A; its owners are set). */
static rec_status oper_place(rec_plan *p, hot_row *hot, int64_t n_hot, double total_acc, double total_mem, double thr,
                             const rec_plan_hw *hw) {
    const int N = p->N;
    heap lk = {0}, mm = {0};
    REC_TRY(heap_init(&lk, N));
    rec_status s = heap_init(&mm, N);
    const double row_bytes = row_mem_bytes(p, p->E);
    /* access-bounded partitions of the hot rows not replicated */
    for (int64_t i = 0; i < n_hot && !s;) {
        if (hot[i].owner == REC_PLAN_EVERY) {
            i++;
            continue;
        }
        double a = 0;
        int64_t j = i;
        while (j < n_hot && (j == i || a + hot[j].A <= thr * total_acc)) {
            if (hot[j].owner != REC_PLAN_EVERY) a += hot[j].A;
            j++;
        }
        const int r = heap_take(&lk, a);
        for (int64_t k = i; k < j; k++)
            if (hot[k].owner != REC_PLAN_EVERY) hot[k].owner = r;
        mm.load[r] += (double)(j - i) * row_bytes;  /* the memory heap is ordered once, below */
        i = j;
    }
    for (int t = N / 2 - 1; t >= 0; t--) heap_down(&mm, t);
    /* memory-bounded partitions: contiguous segments of every table */
    const double seg_cap = thr * total_mem;
    int64_t *start = NULL;
    int *owner = NULL;
    qsort(hot, (size_t)n_hot, sizeof *hot, cmp_hot_pos);
    int64_t h0 = 0;
    for (int f = 0; f < p->F && !s; f++) {
        int64_t per = (int64_t)(seg_cap / row_bytes);
        if (per < 1) per = 1;
        const int64_t n_seg = (p->rows[f] + per - 1) / per;
        start = realloc(start, sizeof(int64_t) * (size_t)n_seg);
        owner = realloc(owner, sizeof(int) * (size_t)n_seg);
        if (!start || !owner) {
            s = rec_errorf(REC_ENOMEM, "plan: out of memory for %lld segments", (long long)n_seg);
            break;
        }
        for (int64_t g = 0; g < n_seg; g++) {
            const int64_t len = (g + 1 < n_seg ? (g + 1) * per : p->rows[f]) - g * per;
            start[g] = g * per;
            owner[g] = heap_take(&mm, (double)len * row_bytes);
        }
        int64_t h1 = h0;
        while (h1 < n_hot && hot[h1].f == f) h1++;
        int64_t *hr = malloc(sizeof(int64_t) * (size_t)(h1 - h0 + 1));
        int *ho = malloc(sizeof(int) * (size_t)(h1 - h0 + 1));
        if (!hr || !ho) s = rec_errorf(REC_ENOMEM, "plan: out of memory");
        for (int64_t k = h0; k < h1 && !s; k++) hr[k - h0] = hot[k].row, ho[k - h0] = hot[k].owner;
        if (!s) s = rec__plan_set_cols(p, f, 1);
        if (!s) s = rec__plan_set_part(p, f, 0, 0, p->E, n_seg, start, owner, h1 - h0, hr, ho);
        free(hr);
        free(ho);
        h0 = h1;
    }
    qsort(hot, (size_t)n_hot, sizeof *hot, cmp_hot);
    free(start);
    free(owner);
    heap_free(&lk);
    heap_free(&mm);
    (void)hw;
    return s;
}

static rec_status oper(rec_plan *p, const rec_plan_profile *prof, const rec_plan_hw *hw) {
    const int N = p->N;
    int64_t n_hot = 0, cap = 0;
    hot_row *hot = NULL;
    double total_acc = 0, total_mem = 0;
    const double row_bytes = row_mem_bytes(p, p->E);
    rec_status s = REC_OK;
    for (int f = 0; f < p->F && !s; f++) {
        prof_row *rows = NULL;
        int64_t n = 0;
        if ((s = rec__profile_rows(prof, f, &rows, &n))) break;
        total_mem += (double)p->rows[f] * row_bytes;
        for (int64_t i = 0; i < n; i++) {
            total_acc += rows[i].A;
            if (rows[i].count < 2) continue;
            if (n_hot == cap) {
                cap = cap ? 2 * cap : 4096;
                hot_row *t = realloc(hot, sizeof *hot * (size_t)cap);
                if (!t) {
                    s = rec_errorf(REC_ENOMEM, "plan: out of memory for %lld hot rows", (long long)cap);
                    break;
                }
                hot = t;
            }
            hot[n_hot++] = (hot_row){f, rows[i].row, rows[i].A, 0};
        }
        free(rows);
    }
    if (s) {
        free(hot);
        return s;
    }
    qsort(hot, (size_t)n_hot, sizeof *hot, cmp_hot);
    /* §4.3: replicate while the rule holds and the replicas fit. The rule, f > BW_P2P / (B
     * BW_AR), compares a row's fetches (its A users' rows and gradients, spread over the N
     * ranks) with its share of the all-reduce; with the model's per-row costs on both sides:
     * a fetch's get_s, and a replica's bookkeeping on every rank (rep_row_s). */
    const double share = (double)(N - 1) / N, cpu = hw->ranks_per_core > 1 ? hw->ranks_per_core : 1;
    const double per_fetch = share * (8.0 * p->E / hw->bw_p2p + hw->get_s) / N;
    const double per_replica = share * 8.0 * p->E / hw->bw_ar + hw->rep_row_s * cpu;
    double rep_bytes = 0;
    for (int64_t i = 0; i < n_hot && N > 1; i++) {
        if (!(hot[i].A * per_fetch > per_replica) || rep_bytes + row_bytes > hw->extra_mem * hw->mem_bytes) break;
        hot[i].owner = REC_PLAN_EVERY;
        rep_bytes += row_bytes;
    }
    /* §4.1-§4.2 with threshold refinement; the best plan is kept in `best` */
    rec_plan *best = NULL;
    double best_t = INFINITY, thr = hw->threshold, best_thr = thr;
    rec_plan_model m = prof->m;
    for (int it = 0; it < 16 && !s; it++, thr /= 2) {
        rec_plan *q = NULL;
        if ((s = rec__plan_alloc(&q, REC_PLAN_OPER, &m))) break;
        for (int64_t i = 0; i < n_hot; i++)
            if (hot[i].owner != REC_PLAN_EVERY) hot[i].owner = 0;
        s = oper_place(q, hot, n_hot, total_acc, total_mem, thr, hw);
        if (!s) s = rec_plan_predict(q, prof, hw);
        if (s) {
            rec_plan_free(q);
            break;
        }
        double mean = 0;
        for (int j = 0; j < N; j++) mean += q->cost[j].seconds / N;
        const double t = max_seconds(q);
        if (t < best_t && check_fits(q, hw) == REC_OK) {
            rec_plan_free(best);
            best = q, best_t = t, best_thr = thr;
        } else {
            rec_plan_free(q);
        }
        if (t <= 1.05 * mean) break;
    }
    free(hot);
    if (!s && !best)
        s = rec_errorf(REC_EINVAL, "plan oper: no placement fits the ranks' %.3g GB; use more ranks, or give them more "
                       "memory", hw->mem_bytes / 1e9);
    if (s) {
        rec_plan_free(best);
        return s;
    }
    /* move best's layout into p */
    for (int f = 0; f < p->F; f++) {
        for (int c = 0; p->parts[f] && c < p->n_parts[f]; c++) part_clear(&p->parts[f][c]);
        free(p->parts[f]);
        p->parts[f] = best->parts[f];
        p->n_parts[f] = best->n_parts[f];
        best->parts[f] = NULL;
        best->n_parts[f] = 0;
    }
    p->threshold = best_thr;
    rec_plan_free(best);
    return REC_OK;
}

rec_status rec_plan_build(rec_plan **out, rec_plan_kind kind, const rec_plan_profile *prof, const rec_plan_hw *hw) {
    *out = NULL;
    if (kind == REC_PLAN_TORCHREC)
        return rec_errorf(REC_EINVAL, "plan torchrec: TorchRec's planner makes these (dev/torchrec_plan.py); load its "
                          "plan with rec_plan_load (rectrain plan --score, train --plan-shards)");
    if ((int)kind < 0 || (int)kind >= REC_PLAN_KINDS) return rec_errorf(REC_EINVAL, "plan: unknown kind %d", (int)kind);
    rec_plan *p = NULL;
    REC_TRY(rec__plan_alloc(&p, kind, &prof->m));
    rec_status s = REC_OK;
    switch (kind) {
    case REC_PLAN_REPLICATED:
        for (int f = 0; f < p->F && !s; f++) s = whole(p, f, REC_PLAN_EVERY);
        break;
    case REC_PLAN_TABLE: s = table_or_greedy(p, prof, hw, 0); break;
    case REC_PLAN_ROW:
        for (int f = 0; f < p->F && !s; f++) s = row_wise(p, f);
        break;
    case REC_PLAN_COLUMN: s = column_wise(p); break;
    case REC_PLAN_GREEDY: s = table_or_greedy(p, prof, hw, 1); break;
    case REC_PLAN_OPER: s = oper(p, prof, hw); break;
    case REC_PLAN_TORCHREC: break; /* refused above */
    }
    if (!s) s = rec__plan_check(p, "plan");
    if (!s) s = rec_plan_predict(p, prof, hw);
    if (!s) s = check_fits(p, hw);
    if (s) {
        rec_plan_free(p);
        return s;
    }
    *out = p;
    return REC_OK;
}
