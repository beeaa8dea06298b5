/* Plan files (plan.h): written as JSON line by line, read with cJSON and checked against the
 * model they are for. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "sharding_impl.h"

static void write_pairs(FILE *f, const int64_t *a, const int *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) fprintf(f, "%s[%lld, %d]", i ? ", " : "", (long long)a[i], b[i]);
}

rec_status rec_plan_save(const rec_plan *p, const char *path) {
    rec_atomic_file a;
    FILE *f;
    REC_TRY(rec_atomic_fopen(&a, path, &f));
    fprintf(f, "{\"format\": \"rectrain-plan\", \"version\": 1, \"kind\": \"%s\", \"ranks\": %d, \"dim\": %d,\n",
            rec_plan_kind_name(p->kind), p->N, p->E);
    fprintf(f, " \"threshold\": %.9g,\n \"tables\": [\n", p->threshold);
    for (int t = 0; t < p->F; t++) {
        fprintf(f, "  {\"rows\": %lld, \"parts\": [", (long long)p->rows[t]);
        for (int c = 0; c < p->n_parts[t]; c++) {
            const plan_part *q = &p->parts[t][c];
            fprintf(f, "%s{\"cols\": [%d, %d], \"segments\": [", c ? ",\n    " : "", q->c0, q->c1);
            write_pairs(f, q->seg_start, q->seg_owner, q->n_seg);
            fprintf(f, "], \"hot\": [");
            write_pairs(f, q->hot_row, q->hot_owner, q->n_hot);
            fprintf(f, "]}");
        }
        fprintf(f, "]}%s\n", t + 1 < p->F ? "," : "");
    }
    fprintf(f, " ],\n \"predicted\": [\n");
    for (int j = 0; j < p->N; j++)
        fprintf(f, "  {\"rank\": %d, \"mem_bytes\": %.6g, \"lookups\": %.6g, \"sent\": %.6g, \"recv\": %.6g, "
                "\"seconds\": %.6g}%s\n", j, p->cost[j].mem_bytes, p->cost[j].lookups, p->cost[j].sent,
                p->cost[j].recv, p->cost[j].seconds, j + 1 < p->N ? "," : "");
    fprintf(f, " ]}\n");
    return rec_atomic_fclose(&a, f, "sharding plan", REC_OK);
}

/* An integer-valued number in [lo, hi]: REC_EFORMAT naming the path when it is not an integer,
 * REC_EINVAL when it is out of range. The range is checked before the cast: a number no
 * int64_t holds (1e19; 1e999, which cJSON reads as infinity) is out of range, where the cast
 * would be undefined (found by fuzz_shardplan). */
static rec_status get_int(const cJSON *o, const char *origin, const char *path, int64_t lo, int64_t hi, int64_t *out) {
    if (!cJSON_IsNumber(o) || o->valuedouble != floor(o->valuedouble))
        return rec_errorf(REC_EFORMAT, "%s: %s: expected an integer", origin, path);
    const double d = o->valuedouble;
    if (!(d >= -0x1p63 && d < 0x1p63) || (int64_t)d < lo || (int64_t)d > hi)
        return rec_errorf(REC_EINVAL, "%s: %s is %.0f; it must be in [%lld, %lld]", origin, path, d, (long long)lo,
                          (long long)hi);
    *out = (int64_t)d;
    return REC_OK;
}

/* [[a, b], ...] into freshly allocated arrays. */
static rec_status get_pairs(const cJSON *arr, const char *origin, const char *path, int64_t hi_a, int N, int64_t *n,
                            int64_t **a, int **b) {
    *a = NULL;
    *b = NULL;
    if (!cJSON_IsArray(arr)) return rec_errorf(REC_EFORMAT, "%s: %s: expected an array of [row, owner] pairs", origin, path);
    const int64_t k = cJSON_GetArraySize(arr);
    *a = malloc(sizeof(int64_t) * (size_t)(k ? k : 1));
    *b = malloc(sizeof(int) * (size_t)(k ? k : 1));
    if (!*a || !*b) return rec_errorf(REC_ENOMEM, "%s: out of memory for %s", origin, path);
    int64_t i = 0;
    char at[256];
    for (const cJSON *e = arr->child; e; e = e->next, i++) {
        snprintf(at, sizeof at, "%s[%lld]", path, (long long)i);
        if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) != 2)
            return rec_errorf(REC_EFORMAT, "%s: %s: expected a [row, owner] pair", origin, at);
        int64_t x = 0, y = 0;
        char at2[300];
        snprintf(at2, sizeof at2, "%s[0]", at);
        REC_TRY(get_int(e->child, origin, at2, 0, hi_a, &x));
        snprintf(at2, sizeof at2, "%s[1]", at);
        REC_TRY(get_int(e->child->next, origin, at2, REC_PLAN_EVERY, N - 1, &y));
        (*a)[i] = x;
        (*b)[i] = (int)y;
    }
    *n = k;
    return REC_OK;
}

static rec_status parse(rec_plan **out, const cJSON *root, const char *origin, const rec_plan_model *m) {
    if (!cJSON_IsObject(root))
        return rec_errorf(REC_EFORMAT, "%s: $: expected a JSON object (a rectrain plan, or TorchRec's {\"table_plans\": "
                          "...})", origin);
    if (cJSON_GetObjectItemCaseSensitive(root, "table_plans")) return rec__plan_from_torchrec(out, root, origin, m);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "rectrain-plan") != 0)
        return rec_errorf(REC_EFORMAT, "%s: $.format: expected \"rectrain-plan\"; is this a plan written by `rectrain plan "
                          "--out`, or TorchRec's (with \"table_plans\")?", origin);
    int64_t v;
    REC_TRY(get_int(cJSON_GetObjectItemCaseSensitive(root, "version"), origin, "$.version", 1, 1, &v));
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(root, "kind");
    const int k = cJSON_IsString(kind) ? rec_plan_kind_from_name(kind->valuestring) : -1;
    if (k < 0)
        return rec_errorf(REC_EFORMAT, "%s: $.kind: expected one of replicated, table, row, column, greedy, oper", origin);
    int64_t ranks = 0, dim = 0;
    REC_TRY(get_int(cJSON_GetObjectItemCaseSensitive(root, "ranks"), origin, "$.ranks", 1, 1 << 20, &ranks));
    if (ranks != m->ranks)
        return rec_errorf(REC_EINVAL, "%s: $.ranks: the plan is for %lld ranks and this job has %d; make a plan for %d "
                          "(rectrain plan --ranks %d)", origin, (long long)ranks, m->ranks, m->ranks, m->ranks);
    REC_TRY(get_int(cJSON_GetObjectItemCaseSensitive(root, "dim"), origin, "$.dim", 1, 1 << 20, &dim));
    if (dim != m->dim)
        return rec_errorf(REC_EINVAL, "%s: $.dim: the plan is for embedding dim %lld and the model's is %d", origin,
                          (long long)dim, m->dim);
    const cJSON *tables = cJSON_GetObjectItemCaseSensitive(root, "tables");
    if (!cJSON_IsArray(tables)) return rec_errorf(REC_EFORMAT, "%s: $.tables: expected an array", origin);
    if (cJSON_GetArraySize(tables) != m->tables)
        return rec_errorf(REC_EINVAL, "%s: $.tables: the plan has %d tables and the model %d", origin,
                          cJSON_GetArraySize(tables), m->tables);
    rec_plan *p = NULL;
    REC_TRY(rec__plan_alloc(&p, (rec_plan_kind)k, m));
    const cJSON *th = cJSON_GetObjectItemCaseSensitive(root, "threshold");
    p->threshold = cJSON_IsNumber(th) ? th->valuedouble : 0;
    rec_status s = REC_OK;
    int f = 0;
    char at[128];
    for (const cJSON *t = tables->child; t && !s; t = t->next, f++) {
        int64_t rows = 0;
        snprintf(at, sizeof at, "$.tables[%d].rows", f);
        if ((s = get_int(cJSON_GetObjectItemCaseSensitive(t, "rows"), origin, at, 1, INT64_MAX, &rows))) break;
        if (rows != m->rows[f]) {
            s = rec_errorf(REC_EINVAL, "%s: %s: the plan's table has %lld rows and the model's %lld: make a plan for "
                           "this data", origin, at, (long long)rows, (long long)m->rows[f]);
            break;
        }
        const cJSON *parts = cJSON_GetObjectItemCaseSensitive(t, "parts");
        snprintf(at, sizeof at, "$.tables[%d].parts", f);
        if (!cJSON_IsArray(parts) || cJSON_GetArraySize(parts) < 1 || cJSON_GetArraySize(parts) > m->dim) {
            s = rec_errorf(REC_EFORMAT, "%s: %s: expected an array of 1 to %d column parts", origin, at, m->dim);
            break;
        }
        if ((s = rec__plan_set_cols(p, f, cJSON_GetArraySize(parts)))) break;
        int c = 0;
        for (const cJSON *q = parts->child; q && !s; q = q->next, c++) {
            const cJSON *cols = cJSON_GetObjectItemCaseSensitive(q, "cols");
            snprintf(at, sizeof at, "$.tables[%d].parts[%d].cols", f, c);
            int64_t c0 = 0, c1 = 0;
            if (!cJSON_IsArray(cols) || cJSON_GetArraySize(cols) != 2) {
                s = rec_errorf(REC_EFORMAT, "%s: %s: expected [first column, end column]", origin, at);
                break;
            }
            if ((s = get_int(cols->child, origin, at, 0, m->dim, &c0)) ||
                (s = get_int(cols->child->next, origin, at, 0, m->dim, &c1)))
                break;
            int64_t n_seg = 0, n_hot = 0, *seg = NULL, *hot = NULL;
            int *so = NULL, *ho = NULL;
            snprintf(at, sizeof at, "$.tables[%d].parts[%d].segments", f, c);
            s = get_pairs(cJSON_GetObjectItemCaseSensitive(q, "segments"), origin, at, rows - 1, m->ranks, &n_seg, &seg, &so);
            snprintf(at, sizeof at, "$.tables[%d].parts[%d].hot", f, c);
            if (!s) s = get_pairs(cJSON_GetObjectItemCaseSensitive(q, "hot"), origin, at, rows - 1, m->ranks, &n_hot, &hot, &ho);
            if (!s) s = rec__plan_set_part(p, f, c, (int)c0, (int)c1, n_seg, seg, so, n_hot, hot, ho);
            free(seg);
            free(so);
            free(hot);
            free(ho);
        }
    }
    if (!s) s = rec__plan_check(p, origin);
    if (s) {
        rec_plan_free(p);
        return s;
    }
    *out = p;
    return REC_OK;
}

rec_status rec_plan_parse(rec_plan **out, const char *text, size_t len, const char *origin, const rec_plan_model *m) {
    *out = NULL;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) return rec_json_invalid(REC_EFORMAT, origin, text, len, end);
    rec_status s = parse(out, root, origin, m);
    cJSON_Delete(root);
    return s;
}

rec_status rec_plan_load(rec_plan **out, const char *path, const rec_plan_model *m) {
    *out = NULL;
    char *text = NULL;
    size_t len = 0;
    REC_TRY(rec_read_file(path, "sharding plan", (size_t)1 << 34, &text, &len));
    rec_status s = rec_plan_parse(out, text, len, path, m);
    free(text);
    return s;
}
