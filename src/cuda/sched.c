/* The GPU engine's host side that needs no GPU (cuda.h): the models it trains, schedule names
 * and fit, the per-batch block map (RecFlex §IV-B) and plan files. Tested by tests/test_cuda_host.c on any machine.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cuda_impl.h"
#include "rectrain/core.h"
#include "rectrain/cuda.h"

const char *rec_cuda_sched_name(int s, char *buf, size_t cap) {
    if (s < 0 || s >= REC_CUDA_N_SCHED) snprintf(buf, cap, "?");
    else snprintf(buf, cap, "t%dv%d", rec_cuda_sched_threads(s), rec_cuda_sched_vec(s));
    return buf;
}

int rec_cuda_sched_parse(const char *text) {
    char buf[16];
    for (int s = 0; s < REC_CUDA_N_SCHED; s++)
        if (!strcmp(text, rec_cuda_sched_name(s, buf, sizeof buf))) return s;
    return -1;
}

int rec_cuda_sched_fits(int s, int E, int col, int W) {
    if (s < 0 || s >= REC_CUDA_N_SCHED || E < 1 || E > REC_CUDA_MAX_DIM) return 0;
    return rec_cuda_sched_vec(s) == 1 || (E % 4 == 0 && col % 4 == 0 && W % 4 == 0);
}

int rec_cuda_sched_candidates(int E, int col, int W, int *out) {
    int n = 0;
    for (int s = 0; s < REC_CUDA_N_SCHED; s++) {
        const int T = rec_cuda_sched_threads(s), Cv = rec_cuda_chunks(s, E);
        const int cap = 8 * rec_cuda_chunk_lanes(1 << 30, Cv);
        if (rec_cuda_sched_fits(s, E, col, W) && T <= (cap > 32 ? cap : 32)) out[n++] = s;
    }
    return n;
}

int rec_cuda_sched_default(int E, int col, int W) {
    const int v4 = rec_cuda_sched_fits(0, E, col, W), Cv = v4 ? E / 4 : E;
    int lg = 0;
    while ((1 << lg) < Cv && lg < 5) lg++; /* T = chunks rounded up, 32 (warp-per-bag) at most */
    return (v4 ? 0 : 9) + lg;
}

/* Serial loads per lane of one round of table f's block, and the bags a round takes. */
static double round_step(int E, int sched, int B, int64_t nnz, int *G) {
    const int T = rec_cuda_sched_threads(sched), Cv = rec_cuda_chunks(sched, E);
    const int Cg = rec_cuda_chunk_lanes(T, Cv), S = T / Cg;
    *G = REC_CUDA_BLOCK / T;
    return (1.0 + ceil((double)nnz / B / S)) * ((Cv + Cg - 1) / Cg);
}

int64_t rec_cuda_block_map(int F, int B, const int *dims, const int *sched, const int64_t *nnz, int64_t target_blocks,
                           int32_t *rounds, int32_t *block_start) {
    double total = 0;
    int G;
    for (int f = 0; f < F; f++) {
        const double step = round_step(dims[f], sched[f], B, nnz[f], &G);
        total += step * ((B + G - 1) / G);
    }
    const double q = fmax(4.0, total / (double)(target_blocks > 0 ? target_blocks : 1));
    int64_t at = 0;
    for (int f = 0; f < F; f++) {
        const double step = round_step(dims[f], sched[f], B, nnz[f], &G);
        const int max_r = (B + G - 1) / G;
        int R = (int)(q / step);
        R = R < 1 ? 1 : R > max_r ? max_r : R;
        rounds[f] = R;
        block_start[f] = (int32_t)at;
        at += (B + (int64_t)G * R - 1) / ((int64_t)G * R);
    }
    block_start[F] = (int32_t)at;
    return at;
}

/* ---- plan files ----------------------------------------------------------------------------- */

rec_status rec_cuda_plan_save(const char *path, int F, const int64_t *rows, const int *dims, const int *sched,
                              int occupancy) {
    cJSON *root = cJSON_CreateObject(), *tabs = cJSON_CreateArray();
    char name[16];
    cJSON_AddStringToObject(root, "format", "rectrain-cuda-embed-plan");
    cJSON_AddNumberToObject(root, "version", 1);
    cJSON_AddNumberToObject(root, "occupancy", occupancy);
    cJSON_AddItemToObject(root, "tables", tabs);
    for (int f = 0; f < F; f++) {
        cJSON *t = cJSON_CreateObject();
        cJSON_AddNumberToObject(t, "rows", (double)rows[f]);
        cJSON_AddNumberToObject(t, "dim", dims[f]);
        cJSON_AddStringToObject(t, "sched", rec_cuda_sched_name(sched[f], name, sizeof name));
        cJSON_AddItemToArray(tabs, t);
    }
    return rec_json_write(path, "GPU embedding plan", root);
}

rec_status rec_cuda_plan_parse(const char *text, size_t len, const char *name, int F, const int64_t *rows,
                               const int *dims, int *sched, int *occupancy) {
    cJSON *root = cJSON_ParseWithLength(text, len);
    if (!root) return rec_errorf(REC_EFORMAT, "%s: not valid JSON, so not a GPU embedding plan", name);
    rec_status st = REC_OK;
    int *s = calloc((size_t)F + 1, sizeof *s);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format"), *ver = cJSON_GetObjectItemCaseSensitive(root, "version"),
                *occ = cJSON_GetObjectItemCaseSensitive(root, "occupancy"), *tabs = cJSON_GetObjectItemCaseSensitive(root, "tables");
    int W = 0;
    for (int f = 0; f < F; f++) W += dims[f];
    if (!s) st = rec_errorf(REC_ENOMEM, "%s: out of memory reading the GPU embedding plan", name);
    else if (!cJSON_IsObject(root) || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, "rectrain-cuda-embed-plan"))
        st = rec_errorf(REC_EFORMAT, "%s: $.format: not a GPU embedding plan (want \"rectrain-cuda-embed-plan\")", name);
    else if (!cJSON_IsNumber(ver) || ver->valuedouble != 1)
        st = rec_errorf(REC_EINVAL, "%s: $.version: this rectrain reads version 1 plans; retune", name);
    else if (!cJSON_IsNumber(occ) || occ->valuedouble < 0 || occ->valuedouble > 32 || occ->valuedouble != floor(occ->valuedouble))
        st = rec_errorf(REC_EINVAL, "%s: $.occupancy: want an integer 0..32 (blocks per SM, 0 = no cap)", name);
    else if (!cJSON_IsArray(tabs))
        st = rec_errorf(REC_EINVAL, "%s: $.tables: want an array of tables", name);
    else if (cJSON_GetArraySize(tabs) != F)
        st = rec_errorf(REC_EINVAL, "%s: $.tables: the plan has %d tables, the model %d; it was tuned for another model "
                        "(retune)", name, cJSON_GetArraySize(tabs), F);
    int f = 0, col = 0;
    for (const cJSON *t = st ? NULL : tabs->child; t && !st; t = t->next, col += dims[f], f++) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(t, "rows"), *d = cJSON_GetObjectItemCaseSensitive(t, "dim"),
                    *sc = cJSON_GetObjectItemCaseSensitive(t, "sched");
        if (!cJSON_IsNumber(r) || !cJSON_IsNumber(d) || r->valuedouble != (double)rows[f] || d->valuedouble != dims[f])
            st = rec_errorf(REC_EINVAL, "%s: $.tables[%d]: the plan's table is not (%lld rows, dim %d) as the model's; it "
                            "was tuned for another model (retune)", name, f, (long long)rows[f], dims[f]);
        else if (!cJSON_IsString(sc) || (s[f] = rec_cuda_sched_parse(sc->valuestring)) < 0)
            st = rec_errorf(REC_EINVAL, "%s: $.tables[%d].sched: want a schedule t<T>v<4|1>, T a power of two 1..256", name, f);
        else if (!rec_cuda_sched_fits(s[f], dims[f], col, W))
            st = rec_errorf(REC_EINVAL, "%s: $.tables[%d].sched: %s needs dims and output columns that are multiples of 4 "
                            "(dim %d at column %d of %d); use the v1 form", name, f, sc->valuestring, dims[f], col, W);
    }
    if (!st) {
        memcpy(sched, s, (size_t)F * sizeof *s);
        *occupancy = (int)occ->valuedouble;
    }
    free(s);
    cJSON_Delete(root);
    return st;
}

rec_status rec_cuda_check_config(const rec_model_config *c) {
    if (c->kind != REC_MODEL_DLRM)
        return rec_errorf(REC_EUNSUPPORTED, "--device cuda trains DLRM models; %s (model %s) trains on --device cpu",
                          rec_model_kind_name(c->kind), c->name);
    return REC_OK;
}
