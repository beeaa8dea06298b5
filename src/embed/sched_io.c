/* Tuned plans of the embedding engine (embed.h): the keys a plan is filed under (a hash of the
 * table shapes, and a signature of the data's pooling factors) and the plan file, JSON with a
 * schedule per table, written atomically and validated on read with the JSON path of what is
 * wrong.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "embed_impl.h"
#include "rectrain/core.h"

uint64_t rec_embed_shape_key(const rec_embed *e) {
    uint64_t h = rec_mix64(0x656d626564ULL ^ (uint64_t)e->F);
    for (int f = 0; f < e->F; f++) h = rec_mix64(h ^ rec_mix64((uint64_t)e->rows[f] * 1000003ULL + (uint64_t)e->dims[f]));
    return h;
}

uint64_t rec_embed_data_key(const rec_embed *e, const rec_batch *b, int first_feature) {
    uint64_t h = rec_mix64(0x64617461ULL ^ (uint64_t)e->F);
    for (int f = 0; f < e->F && first_feature + f < b->n_sparse; f++) {
        const rec_jagged *j = &b->sparse[first_feature + f];
        int64_t full = 0;
        for (int64_t r = 0; r < b->n; r++) full += j->offsets[r + 1] > j->offsets[r];
        const double m = b->n ? (double)(j->offsets[b->n] - j->offsets[0]) / (double)b->n : 0.0;
        const double c = b->n ? (double)full / (double)b->n : 0.0;
        const uint64_t qm = (uint64_t)floor(4.0 * log2(1.0 + m)), qc = (uint64_t)floor(4.0 * c);
        h = rec_mix64(h ^ (qm << 8 | qc));
    }
    return h;
}

/* ---- plan files ----------------------------------------------------------------------------- */

rec_status rec_embed_plan_save(const rec_embed *e, const char *path, uint64_t data_key) {
    cJSON *root = cJSON_CreateObject(), *tabs = cJSON_CreateArray();
    char key[32], name[64];
    cJSON_AddStringToObject(root, "format", "rectrain-embed-plan");
    cJSON_AddNumberToObject(root, "version", 1);
    snprintf(key, sizeof key, "%016llx", (unsigned long long)rec_embed_shape_key(e));
    cJSON_AddStringToObject(root, "shape_key", key);
    snprintf(key, sizeof key, "%016llx", (unsigned long long)data_key);
    cJSON_AddStringToObject(root, "data_key", key);
    cJSON_AddItemToObject(root, "tables", tabs);
    for (int f = 0; f < e->F; f++) {
        cJSON *t = cJSON_CreateObject();
        cJSON_AddNumberToObject(t, "rows", (double)e->rows[f]);
        cJSON_AddNumberToObject(t, "dim", e->dims[f]);
        cJSON_AddStringToObject(t, "sched", rec_embed_sched_name(e->sched[f], name, sizeof name));
        cJSON_AddItemToArray(tabs, t);
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) return rec_errorf(REC_ENOMEM, "%s: out of memory writing the embedding plan", path);
    rec_atomic_file a;
    FILE *fp;
    rec_status s = rec_atomic_fopen(&a, path, &fp);
    if (!s) {
        fputs(text, fp);
        fputc('\n', fp);
        s = rec_atomic_fclose(&a, fp, "embedding plan", REC_OK);
    }
    cJSON_free(text);
    return s;
}

/* Reads a 16-digit hex key string member. */
static int hex_key(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsString(v) || strlen(v->valuestring) != 16) return 0;
    char *end;
    *out = strtoull(v->valuestring, &end, 16);
    return *end == '\0';
}

static rec_status plan_apply(rec_embed *e, const cJSON *root, const char *path, uint64_t *data_key, rec_embed_sched *s) {
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format"), *ver = cJSON_GetObjectItemCaseSensitive(root, "version");
    if (!cJSON_IsObject(root) || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, "rectrain-embed-plan"))
        return rec_errorf(REC_EFORMAT, "%s: $.format: not a rectrain embedding plan (want \"rectrain-embed-plan\")", path);
    if (!cJSON_IsNumber(ver) || ver->valuedouble != 1)
        return rec_errorf(REC_EINVAL, "%s: $.version: this rectrain reads version 1 plans; retune with --tune", path);
    uint64_t sk, dk;
    if (!hex_key(cJSON_GetObjectItemCaseSensitive(root, "shape_key"), &sk))
        return rec_errorf(REC_EINVAL, "%s: $.shape_key: want a 16-digit hex string", path);
    if (!hex_key(cJSON_GetObjectItemCaseSensitive(root, "data_key"), &dk))
        return rec_errorf(REC_EINVAL, "%s: $.data_key: want a 16-digit hex string", path);
    const cJSON *tabs = cJSON_GetObjectItemCaseSensitive(root, "tables");
    if (!cJSON_IsArray(tabs)) return rec_errorf(REC_EINVAL, "%s: $.tables: want an array of tables", path);
    const int n = cJSON_GetArraySize(tabs);
    if (n != e->F)
        return rec_errorf(REC_EINVAL, "%s: $.tables: the plan has %d tables, the model %d; it was tuned for another model "
                          "(rerun with --tune)", path, n, e->F);
    int f = 0;
    for (const cJSON *t = tabs->child; t; t = t->next, f++) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(t, "rows"), *d = cJSON_GetObjectItemCaseSensitive(t, "dim"),
                    *sc = cJSON_GetObjectItemCaseSensitive(t, "sched");
        if (!cJSON_IsNumber(r) || !cJSON_IsNumber(d) || r->valuedouble != (double)e->rows[f] || d->valuedouble != e->dims[f])
            return rec_errorf(REC_EINVAL, "%s: $.tables[%d]: the plan's table is not (%lld rows, dim %d) as the model's; it "
                              "was tuned for another model (rerun with --tune)", path, f, (long long)e->rows[f], e->dims[f]);
        if (!cJSON_IsString(sc)) return rec_errorf(REC_EINVAL, "%s: $.tables[%d].sched: want a schedule string", path, f);
        rec_status st = rec_embed_sched_parse(sc->valuestring, &s[f]);
        if (!st) st = embed_check_sched(e, f, s[f]);
        if (st) return rec_error_wrap(st, "%s: $.tables[%d].sched", path, f);
    }
    if (sk != rec_embed_shape_key(e))
        return rec_errorf(REC_EINVAL, "%s: $.shape_key does not match the model's tables; the plan is damaged (retune)", path);
    *data_key = dk;
    return REC_OK;
}

rec_status rec_embed_plan_parse(rec_embed *e, const char *text, size_t len, const char *name, uint64_t *data_key) {
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!root) return rec_errorf(REC_EFORMAT, "%s: not valid JSON, so not an embedding plan", name);
    rec_embed_sched *s;
    rec_status st = rec_alloc((void **)&s, (size_t)(e->F + 1) * sizeof *s, "embedding plan");
    uint64_t dk = 0;
    if (!st) st = plan_apply(e, root, name, &dk, s);
    cJSON_Delete(root);
    if (!st) {
        memcpy(e->sched, s, (size_t)e->F * sizeof *s);
        if (data_key) *data_key = dk;
    }
    rec_free(s);
    return st;
}

rec_status rec_embed_plan_load(rec_embed *e, const char *path, uint64_t *data_key) {
    char *buf;
    size_t len;
    REC_TRY(rec_read_file(path, "embedding plan", (size_t)256 << 20, &buf, &len));
    const rec_status st = rec_embed_plan_parse(e, buf, len, path, data_key);
    free(buf);
    return st;
}
