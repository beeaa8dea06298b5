/* TorchRec's sharding plans read as rectrain plans (plan.h, "TorchRec plans").
 *
 * TorchRec places a table as a list of shards, each a block [row0, row0 + rows) x [col0, col0 +
 * cols) on one rank (its ParameterSharding's sharding_spec), or replicates it whole
 * (data_parallel). rectrain's plan cuts a table into column parts and each part into row
 * segments with one owner each, so every TorchRec layout whose shards tile the table maps
 * exactly: the column parts are the intervals between the shards' column edges, and in each
 * the shards spanning it, sorted by row, are its segments (uneven row blocks included: a
 * segment may start at any row). What cannot be honoured is refused: a data_parallel table
 * on only some ranks (rectrain replicates on every rank) or with a shard less than the whole
 * table, shards that leave a row or column of the table uncovered or cover one twice, a rank
 * outside the job, "ranks" that disagree with the shards' ranks, and a table width other than
 * the model's embedding dim. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "sharding_impl.h"

static const char *const TYPES[] = {"table_wise",        "row_wise",      "column_wise", "table_row_wise",
                                    "table_column_wise", "data_parallel"};
enum { N_TYPES = sizeof TYPES / sizeof TYPES[0], DATA_PARALLEL = 5 };

typedef struct tshard {
    int idx;              /* its index in the JSON "shards" array */
    int rank;
    int64_t r0, r1;       /* rows [r0, r1) */
    int c0, c1;           /* columns [c0, c1) */
} tshard;

/* The model table that JSON key `key` names: "t<K>" for the K-th sparse feature, or a name of
 * m->names; -1 when none, -2 when the name fits several. */
static int table_index(const char *key, const rec_plan_model *m) {
    if (key[0] == 't' && key[1] >= '0' && key[1] <= '9') {
        char *end;
        const long k = strtol(key + 1, &end, 10);
        if (!*end && k >= 0 && k < m->tables && !(key[1] == '0' && key[2])) return (int)k;
    }
    int found = -1;
    for (int f = 0; m->names && f < m->tables; f++)
        if (m->names[f] && strcmp(m->names[f], key) == 0) {
            if (found >= 0) return -2;
            found = f;
        }
    return found;
}

/* An integer-valued pair [row, column] at JSON path `at`, as doubles: the caller checks the
 * range before any cast (a size of 2^63 - 1 is an integer out of range, not a non-integer). */
static rec_status get_pair(const cJSON *o, const char *origin, const char *at, const char *what, double *a, double *b) {
    if (!cJSON_IsArray(o) || cJSON_GetArraySize(o) != 2 || !cJSON_IsNumber(o->child) || !cJSON_IsNumber(o->child->next) ||
        o->child->valuedouble != floor(o->child->valuedouble) ||
        o->child->next->valuedouble != floor(o->child->next->valuedouble))
        return rec_errorf(REC_EFORMAT, "%s: %s: expected %s as two integers [row, column]", origin, at, what);
    *a = o->child->valuedouble;
    *b = o->child->next->valuedouble;
    return REC_OK;
}

/* Shard i of table `key` (JSON e at path `sat`) into *t, after checking that it lies within the
 * table's R rows and E columns on one of the job's N ranks. An empty shard (TorchRec gives a
 * rank one when a table has fewer rows than its row-wise ranks) spans no column: c0 > c1. */
static rec_status read_shard(const cJSON *e, const char *origin, const char *sat, const char *key, int i, int N, int64_t R,
                             int E, tshard *t) {
    if (!cJSON_IsObject(e)) return rec_errorf(REC_EFORMAT, "%s: %s: expected a shard {\"rank\", \"offsets\", \"sizes\"}", origin, sat);
    const cJSON *rk = cJSON_GetObjectItemCaseSensitive(e, "rank");
    if (!cJSON_IsNumber(rk) || !(fabs(rk->valuedouble) < 1e9) || rk->valuedouble != floor(rk->valuedouble))
        return rec_errorf(REC_EFORMAT, "%s: %s.rank: expected an integer rank", origin, sat);
    if (rk->valuedouble < 0 || rk->valuedouble >= N)
        return rec_errorf(REC_EINVAL, "%s: %s.rank: table %s's shard %d is on rank %d; this job has %d rank%s (0..%d): make "
                          "the plan for %d ranks", origin, sat, key, i, (int)rk->valuedouble, N, N == 1 ? "" : "s", N - 1, N);
    double r0, c0, nr, nc;
    char fat[420];
    snprintf(fat, sizeof fat, "%s.offsets", sat);
    REC_TRY(get_pair(cJSON_GetObjectItemCaseSensitive(e, "offsets"), origin, fat, "the shard's first row and column", &r0, &c0));
    snprintf(fat, sizeof fat, "%s.sizes", sat);
    REC_TRY(get_pair(cJSON_GetObjectItemCaseSensitive(e, "sizes"), origin, fat, "the shard's rows and columns", &nr, &nc));
    if (!(r0 >= 0 && c0 >= 0 && nr >= 0 && nc >= 0 && r0 <= R && nr <= R - r0 && c0 <= E && nc <= E - c0))
        return rec_errorf(REC_EINVAL, "%s: %s: table %s's shard %d is out of range: it covers rows [%.0f, %.0f) and columns "
                          "[%.0f, %.0f); the table has %lld rows and the model's embedding dim is %d%s", origin, sat, key, i,
                          r0, r0 + nr, c0, c0 + nc, (long long)R, E,
                          c0 + nc > E ? " (make the TorchRec plan with this model's embedding dim)" : "");
    const int empty = nr == 0 || nc == 0;
    *t = (tshard){i, (int)rk->valuedouble, (int64_t)r0, (int64_t)(r0 + nr), empty ? E + 1 : (int)c0,
                  empty ? -1 : (int)(c0 + nc)};
    return REC_OK;
}

/* The table's "ranks" (JSON path `at`.ranks) into on[N] (1 for each rank listed); *given is 0
 * when the field is absent or null. A rank outside the job is refused, naming its index. */
static rec_status read_ranks(const cJSON *tp, int N, const char *origin, const char *at, unsigned char *on, int *given) {
    const cJSON *rk = cJSON_GetObjectItemCaseSensitive(tp, "ranks");
    memset(on, 0, (size_t)N);
    *given = rk && !cJSON_IsNull(rk);
    if (!*given) return REC_OK;
    if (!cJSON_IsArray(rk)) return rec_errorf(REC_EFORMAT, "%s: %s.ranks: expected an array of ranks", origin, at);
    int i = 0;
    for (const cJSON *r = rk->child; r; r = r->next, i++) {
        const int v = cJSON_IsNumber(r) && r->valuedouble >= 0 && r->valuedouble < N ? (int)r->valuedouble : -1;
        if (v < 0 || r->valuedouble != (double)v)
            return rec_errorf(REC_EINVAL, "%s: %s.ranks[%d]: not a rank of this job's %d (0..%d)", origin, at, i, N, N - 1);
        on[v] = 1;
    }
    return REC_OK;
}

/* A plan's "ranks" must be where its shards are: every shard holding rows on a listed rank and
 * every listed rank holding a shard; otherwise the plan contradicts itself and neither half
 * can be trusted. */
static rec_status check_ranks(const cJSON *tp, const tshard *sh, int n, int N, const char *origin, const char *at,
                              const char *key) {
    unsigned char *on = malloc((size_t)N);
    int given = 0;
    rec_status s = on ? read_ranks(tp, N, origin, at, on, &given) : rec_errorf(REC_ENOMEM, "%s: out of memory", origin);
    for (int i = 0; i < n && !s && given; i++)
        if (sh[i].c0 < sh[i].c1 && !on[sh[i].rank])
            s = rec_errorf(REC_EINVAL, "%s: %s.ranks: table %s's shard %d is on rank %d, which its \"ranks\" do not list: the "
                           "plan contradicts itself; make it again", origin, at, key, i, sh[i].rank);
    for (int i = 0; i < n && !s && given; i++) on[sh[i].rank] = 0;
    for (int r = 0; r < N && !s && given; r++)
        if (on[r])
            s = rec_errorf(REC_EINVAL, "%s: %s.ranks: table %s lists rank %d, which holds none of its shards: the plan "
                           "contradicts itself; make it again", origin, at, key, r);
    free(on);
    return s;
}

static int cmp_row(const void *x, const void *y) {
    const tshard *a = *(const tshard *const *)x, *b = *(const tshard *const *)y;
    return (a->r0 > b->r0) - (a->r0 < b->r0);
}

static int cmp_int(const void *x, const void *y) { return *(const int *)x - *(const int *)y; }

/* Reads table f's shards (JSON path `at` = "$.table_plans.KEY") into part layout of p, after
 * checking that they tile rows [0, R) x columns [0, E) exactly (see the top of the file). */
static rec_status table_shards(rec_plan *p, int f, const cJSON *tp, const char *origin, const char *at, const char *key) {
    const int N = p->N, E = p->E;
    const int64_t R = p->rows[f];
    const cJSON *shards = cJSON_GetObjectItemCaseSensitive(tp, "shards");
    if (!cJSON_IsArray(shards) || cJSON_GetArraySize(shards) < 1)
        return rec_errorf(REC_EFORMAT, "%s: %s.shards: expected an array of shards {\"rank\", \"offsets\", \"sizes\"} "
                          "(table %s)", origin, at, key);
    const int n = cJSON_GetArraySize(shards);
    tshard *sh = malloc(sizeof *sh * (size_t)n);
    const tshard **by = malloc(sizeof *by * (size_t)n);
    int *cuts = malloc(sizeof(int) * (size_t)(2 * n + 2));
    int64_t *start = malloc(sizeof(int64_t) * (size_t)(n + 1));
    int *owner = malloc(sizeof(int) * (size_t)(n + 1));
    rec_status s = sh && by && cuts && start && owner ? REC_OK : rec_errorf(REC_ENOMEM, "%s: out of memory", origin);
    char sat[400];
    int i = 0, width = 0; /* the table's columns, as far as the shards go */
    for (const cJSON *e = shards->child; e && !s; e = e->next, i++) {
        snprintf(sat, sizeof sat, "%s.shards[%d]", at, i);
        s = read_shard(e, origin, sat, key, i, N, R, E, &sh[i]);
        const int empty = s || sh[i].c0 > sh[i].c1;
        cuts[2 * i] = empty ? 0 : sh[i].c0;
        cuts[2 * i + 1] = empty ? 0 : sh[i].c1;
        if (!empty && sh[i].c1 > width) width = sh[i].c1;
    }
    if (!s && width > 0 && width < E)
        s = rec_errorf(REC_EINVAL, "%s: %s.shards: table %s's shards end at column %d and the model's embedding dim is %d: "
                       "the plan is for another dim (make the TorchRec plan with this model's config)", origin, at, key,
                       width, E);
    if (!s) s = check_ranks(tp, sh, n, N, origin, at, key);
    int nc = 0, C = 0;
    if (!s) {
        cuts[2 * n] = 0;
        cuts[2 * n + 1] = E;
        qsort(cuts, (size_t)(2 * n + 2), sizeof(int), cmp_int);
        for (int k = 0; k < 2 * n + 2; k++)
            if (!nc || cuts[k] != cuts[nc - 1]) cuts[nc++] = cuts[k];
        s = rec__plan_set_cols(p, f, nc - 1);
    }
    /* each column interval between shard edges: the shards spanning it, tiling [0, R) by rows */
    for (int c = 0; c + 1 < nc && !s; c++) {
        const int a = cuts[c], b = cuts[c + 1];
        int k = 0;
        for (int j = 0; j < n; j++)
            if (sh[j].c0 <= a && sh[j].c1 >= b) by[k++] = &sh[j];
        qsort(by, (size_t)k, sizeof *by, cmp_row);
        int64_t at_row = 0, ns = 0;
        for (int j = 0; j < k && !s; j++) {
            if (by[j]->r0 > at_row)
                s = rec_errorf(REC_EINVAL, "%s: %s.shards: table %s's rows [%lld, %lld) of columns [%d, %d) are in no shard; "
                               "every row and column must be on some rank", origin, at, key, (long long)at_row,
                               (long long)by[j]->r0, a, b);
            else if (by[j]->r0 < at_row)
                s = rec_errorf(REC_EINVAL, "%s: %s.shards[%d]: table %s's shard %d overlaps shard %d at rows [%lld, %lld) of "
                               "columns [%d, %d); each row and column must be on one rank (data_parallel for every rank)",
                               origin, at, by[j]->idx, key, by[j]->idx, by[j - 1]->idx, (long long)by[j]->r0,
                               (long long)(by[j]->r1 < at_row ? by[j]->r1 : at_row), a, b);
            else if (ns && owner[ns - 1] == by[j]->rank)
                at_row = by[j]->r1; /* the same rank goes on: one segment */
            else
                start[ns] = by[j]->r0, owner[ns++] = by[j]->rank, at_row = by[j]->r1;
        }
        if (!s && at_row < R)
            s = rec_errorf(REC_EINVAL, "%s: %s.shards: table %s's rows [%lld, %lld) of columns [%d, %d) are in no shard; "
                           "every row and column must be on some rank", origin, at, key, (long long)at_row, (long long)R,
                           a, b);
        if (!s) {
            /* an interval placed as the one before it joins that part */
            const plan_part *q = C ? &p->parts[f][C - 1] : NULL;
            if (q && q->n_seg == ns && !memcmp(q->seg_start, start, sizeof(int64_t) * (size_t)ns) &&
                !memcmp(q->seg_owner, owner, sizeof(int) * (size_t)ns))
                p->parts[f][C - 1].c1 = b;
            else
                s = rec__plan_set_part(p, f, C++, a, b, ns, start, owner, 0, NULL, NULL);
        }
    }
    if (!s) p->n_parts[f] = C; /* intervals joined: the parts beyond C were never set */
    free(sh);
    free(by);
    free(cuts);
    free(start);
    free(owner);
    return s;
}

/* A data_parallel table: held whole and updated by every rank, so its "ranks" must be all of
 * them, and any shards it lists (TorchRec gives none) must each be the whole table. */
static rec_status replicated(rec_plan *p, int f, const cJSON *tp, const char *origin, const char *at, const char *key) {
    unsigned char *on = malloc((size_t)p->N);
    int given = 0, n_on = 0;
    rec_status s = on ? read_ranks(tp, p->N, origin, at, on, &given) : rec_errorf(REC_ENOMEM, "%s: out of memory", origin);
    for (int r = 0; r < p->N && !s; r++) n_on += on[r];
    free(on);
    if (!s && given && n_on != p->N)
        s = rec_errorf(REC_EINVAL, "%s: %s.ranks: table %s is data_parallel on %d of the %d ranks; rectrain replicates a "
                       "table on every rank: list them all, or shard it", origin, at, key, n_on, p->N);
    const cJSON *shards = cJSON_GetObjectItemCaseSensitive(tp, "shards");
    if (!s && shards && !cJSON_IsNull(shards) && !cJSON_IsArray(shards))
        s = rec_errorf(REC_EFORMAT, "%s: %s.shards: expected null or an array of shards (table %s)", origin, at, key);
    char sat[400];
    int i = 0;
    for (const cJSON *e = shards && cJSON_IsArray(shards) ? shards->child : NULL; e && !s; e = e->next, i++) {
        tshard t;
        snprintf(sat, sizeof sat, "%s.shards[%d]", at, i);
        s = read_shard(e, origin, sat, key, i, p->N, p->rows[f], p->E, &t);
        if (!s && (t.r0 != 0 || t.r1 != p->rows[f] || t.c0 != 0 || t.c1 != p->E))
            s = rec_errorf(REC_EINVAL, "%s: %s: table %s is data_parallel (whole on every rank) and its shard %d covers "
                           "rows [%lld, %lld) and columns [%d, %d) of its %lld x %d: shard it (row_wise, table_wise, ...) "
                           "or give it whole", origin, sat, key, i, (long long)t.r0, (long long)t.r1, t.c0 > t.c1 ? 0 : t.c0,
                           t.c0 > t.c1 ? 0 : t.c1, (long long)p->rows[f], p->E);
    }
    const int64_t zero = 0;
    const int every = REC_PLAN_EVERY;
    if (!s) s = rec__plan_set_cols(p, f, 1);
    if (!s) s = rec__plan_set_part(p, f, 0, 0, p->E, 1, &zero, &every, 0, NULL, NULL);
    return s;
}

rec_status rec__plan_from_torchrec(rec_plan **out, const cJSON *root, const char *origin, const rec_plan_model *m) {
    *out = NULL;
    const cJSON *tps = cJSON_GetObjectItemCaseSensitive(root, "table_plans");
    if (!cJSON_IsObject(tps))
        return rec_errorf(REC_EFORMAT, "%s: $.table_plans: expected an object of tables {\"t0\": {\"sharding_type\", "
                          "\"ranks\", \"shards\"}, ...} (dev/torchrec_plan.py writes it)", origin);
    /* dev/torchrec_plan.py records the dim it planned for: a mismatch is said as one */
    const cJSON *dim = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(root, "planner"), "embedding_dim");
    if (cJSON_IsNumber(dim) && dim->valuedouble != m->dim)
        return rec_errorf(REC_EINVAL, "%s: $.planner.embedding_dim: the plan is for embedding dim %g and the model's is %d: "
                          "make the TorchRec plan with this model's config", origin, dim->valuedouble, m->dim);
    rec_plan *p = NULL;
    REC_TRY(rec__plan_alloc(&p, REC_PLAN_TORCHREC, m));
    const cJSON **seen = calloc((size_t)(m->tables ? m->tables : 1), sizeof *seen);
    rec_status s = seen ? REC_OK : rec_errorf(REC_ENOMEM, "%s: out of memory", origin);
    char at[300];
    for (const cJSON *tp = tps->child; tp && !s; tp = tp->next) {
        const char *key = tp->string;
        snprintf(at, sizeof at, "$.table_plans.%s", key);
        const int f = table_index(key, m);
        if (f == -2) {
            s = rec_errorf(REC_EINVAL, "%s: %s: several of the model's tables are named %s; name them t0..t%d (the order "
                           "of the spec's sparse features)", origin, at, key, m->tables - 1);
            break;
        }
        if (f < 0) {
            s = rec_errorf(REC_EINVAL, "%s: %s: the model has no table %s; its %d tables are t0..t%d in the order of the "
                           "spec's sparse features%s", origin, at, key, m->tables, m->tables - 1,
                           m->names ? " (or the spec's table names)" : " (names other than tK need the spec: --spec)");
            break;
        }
        if (seen[f]) {
            s = rec_errorf(REC_EINVAL, "%s: %s: table t%d is placed twice (also as \"%s\")", origin, at, f,
                           seen[f]->string);
            break;
        }
        seen[f] = tp;
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(tp, "sharding_type");
        int type = -1;
        for (int k = 0; cJSON_IsString(st) && k < N_TYPES; k++)
            if (strcmp(st->valuestring, TYPES[k]) == 0) type = k;
        if (type < 0) {
            s = rec_errorf(cJSON_IsString(st) ? REC_EINVAL : REC_EFORMAT, "%s: %s.sharding_type: table %s's sharding "
                           "type is %s%s%s; rectrain reads table_wise, row_wise, column_wise, table_row_wise, "
                           "table_column_wise and data_parallel", origin, at, key, cJSON_IsString(st) ? "\"" : "",
                           cJSON_IsString(st) ? st->valuestring : "missing", cJSON_IsString(st) ? "\"" : "");
            break;
        }
        s = type == DATA_PARALLEL ? replicated(p, f, tp, origin, at, key) : table_shards(p, f, tp, origin, at, key);
    }
    for (int f = 0; f < m->tables && !s; f++)
        if (!seen[f])
            s = rec_errorf(REC_EINVAL, "%s: $.table_plans: no plan for table t%d%s%s%s of the model's %d; the plan must "
                           "place every table", origin, f, m->names && m->names[f] ? " (" : "",
                           m->names && m->names[f] ? m->names[f] : "", m->names && m->names[f] ? ")" : "", m->tables);
    free(seen);
    if (!s) s = rec__plan_check(p, origin);
    if (s) {
        rec_plan_free(p);
        return s;
    }
    *out = p;
    return REC_OK;
}
