/* The offloading policy (FastFlow Algorithm 1, §4) and its metric store (§5.2, Table 2).
 *
 * Algorithm 1, with the digest's reading of its line 3 (the ideal speedup Gthp/Lthp against
 * the threshold) and throughputs in rows/s:
 *
 *   no offload      when Gthp <= Lthp or Gthp / Lthp < threshold (no stall worth removing)
 *   which point     argmax over p' of  Lthp (1 - Ocycle(p')/Pcycle) + Rthp(p')          (line 7)
 *   how much        Upper = Rthp(P'), Lower = (Gthp - Lthp)(1 + Ocycle(P')/Pcycle)     (8-9)
 *                   ratio = Upper / Gthp if Lower < Upper, else Rthp / (Lthp + Rthp)  (10-13)
 *
 * Cycles are CPU seconds per row on the trainer's host; the paper's Ocycle/Pcycle is their
 * ratio. The ratio is clamped to [0, 1].
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rectrain/core.h"
#include "rectrain/offload.h"

void rec_offload_decide(const rec_offload_metrics *m, double threshold, rec_offload_decision *d) {
    memset(d, 0, sizeof *d);
    if (!(m->lthp > 0) || m->gthp <= m->lthp || m->gthp / m->lthp < threshold) {
        snprintf(d->why, sizeof d->why, "no stall: training alone %.0f rows/s, with local preprocessing %.0f (x%.3f < %.3f)",
                 m->gthp, m->lthp, m->lthp > 0 ? m->gthp / m->lthp : 0, threshold);
        d->est = m->lthp;
        return;
    }
    d->offload = 1;
    if (!m->have_remote) {
        snprintf(d->why, sizeof d->why, "stall: training alone %.0f rows/s, with local preprocessing %.0f (x%.3f)",
                 m->gthp, m->lthp, m->gthp / m->lthp);
        return;
    }
    double best = -1;
    for (int p = REC_OFFLOAD_P1; p <= REC_OFFLOAD_P3; p++) {
        if (!(m->rthp[p] > 0)) continue;
        const double oc = m->pcycle > 0 ? m->ocycle[p] / m->pcycle : 1;
        double est = m->lthp * (1 - oc) + m->rthp[p];
        if (est > best) best = est, d->point = p;
    }
    if (d->point == 0) { /* no point could be measured: nothing to offload to */
        d->offload = 0;
        d->est = m->lthp;
        snprintf(d->why, sizeof d->why, "no worker answered the profiling runs");
        return;
    }
    const int p = d->point;
    const double oc = m->pcycle > 0 ? m->ocycle[p] / m->pcycle : 1;
    d->upper = m->rthp[p];
    d->lower = (m->gthp - m->lthp) * (1 + oc);
    d->ratio = d->lower < d->upper ? d->upper / m->gthp : m->rthp[p] / (m->lthp + m->rthp[p]);
    if (d->ratio > 1) d->ratio = 1;
    if (d->ratio < 0) d->ratio = 0;
    d->est = best;
    snprintf(d->why, sizeof d->why, "stall x%.3f; %s estimated %.0f rows/s; upper %.0f %s lower %.0f", m->gthp / m->lthp,
             rec_offload_point_name(p), best, d->upper, d->lower < d->upper ? ">" : "<=", d->lower);
}

/* ---- the store ---------------------------------------------------------------------------- */

void rec_offload_store_default(char *buf, size_t cap) {
    const char *e = getenv("REC_OFFLOAD_STORE"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    if (e && *e) snprintf(buf, cap, "%s", e);
    else if (x && *x) snprintf(buf, cap, "%s/rectrain/offload-metrics.json", x);
    else snprintf(buf, cap, "%s/.cache/rectrain/offload-metrics.json", h && *h ? h : "/tmp");
}

static void key_hex(uint64_t k, char out[17]) { snprintf(out, 17, "%016llx", (unsigned long long)k); }

/* The store's records, or an empty array for a missing file. */
static rec_status store_read(const char *path, cJSON **out) {
    *out = NULL;
    if (access(path, F_OK) != 0) {
        *out = cJSON_CreateArray();
        return *out ? REC_OK : rec_errorf(REC_ENOMEM, "out of memory");
    }
    char *text = NULL;
    size_t len = 0;
    REC_TRY(rec_read_file(path, "offload metric store", 64 << 20, &text, &len));
    cJSON *a = cJSON_ParseWithLength(text, len);
    free(text);
    if (!a || !cJSON_IsArray(a)) {
        cJSON_Delete(a);
        return rec_errorf(REC_EFORMAT, "%s: not an offload metric store (a JSON array of records); delete it and the "
                          "next run profiles again", path);
    }
    *out = a;
    return REC_OK;
}

/* Is r the record of (kind, key)? */
static int is_record(const cJSON *r, const char *kind, const char *key) {
    const cJSON *k = cJSON_GetObjectItemCaseSensitive(r, "kind"), *v = cJSON_GetObjectItemCaseSensitive(r, "key");
    return cJSON_IsString(k) && cJSON_IsString(v) && !strcmp(k->valuestring, kind) && !strcmp(v->valuestring, key);
}

static cJSON *find(cJSON *a, const char *kind, const char *key) {
    cJSON *r;
    cJSON_ArrayForEach(r, a) if (is_record(r, kind, key)) return r;
    return NULL;
}

/* A number of record r, or -1 (and *ok = 0) when it is missing or not a positive number. */
static double num(const cJSON *r, const char *name, int *ok) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(r, name);
    if (cJSON_IsNumber(v) && v->valuedouble >= 0) return v->valuedouble;
    *ok = 0;
    return -1;
}

rec_status rec_offload_store_load(const char *path, const rec_offload_keys *k, rec_offload_metrics *m, int *found) {
    *found = 0;
    cJSON *a;
    REC_TRY(store_read(path, &a));
    char hex[17];
    int ok = 1;
    key_hex(k->model, hex);
    const cJSON *r = find(a, "model", hex);
    if (r && (ok = 1, m->gthp = num(r, "gthp", &ok), ok)) *found |= 1;
    key_hex(k->pipeline, hex);
    if ((r = find(a, "pipeline", hex)) && (ok = 1, m->lthp = num(r, "lthp", &ok), m->pcycle = num(r, "pcycle", &ok), ok))
        *found |= 2;
    key_hex(k->remote, hex);
    if ((r = find(a, "remote", hex))) {
        ok = 1;
        char name[16];
        for (int p = REC_OFFLOAD_P1; p <= REC_OFFLOAD_P3; p++) {
            snprintf(name, sizeof name, "rthp%d", p);
            m->rthp[p] = num(r, name, &ok);
            snprintf(name, sizeof name, "ocycle%d", p);
            m->ocycle[p] = num(r, name, &ok);
        }
        if (ok) *found |= 4, m->have_remote = 1;
    }
    cJSON_Delete(a);
    return REC_OK;
}

static rec_status put_record(cJSON *a, const char *kind, uint64_t key, const char *const *names, const double *vals,
                             int n) {
    char hex[17];
    key_hex(key, hex);
    cJSON *r = cJSON_CreateObject();
    if (!r) return rec_errorf(REC_ENOMEM, "out of memory");
    cJSON_AddStringToObject(r, "kind", kind);
    cJSON_AddStringToObject(r, "key", hex);
    for (int i = 0; i < n; i++) cJSON_AddNumberToObject(r, names[i], vals[i]);
    cJSON_AddItemToArray(a, r);
    return REC_OK;
}

/* Drops every record of (kind, key). */
static void drop(cJSON *a, const char *kind, uint64_t key) {
    char hex[17];
    key_hex(key, hex);
    for (int i = cJSON_GetArraySize(a) - 1; i >= 0; i--)
        if (is_record(cJSON_GetArrayItem(a, i), kind, hex)) cJSON_DeleteItemFromArray(a, i);
}

rec_status rec_offload_store_save(const char *path, const rec_offload_keys *k, const rec_offload_metrics *m) {
    cJSON *a;
    REC_TRY(store_read(path, &a));
    drop(a, "model", k->model);
    drop(a, "pipeline", k->pipeline);
    static const char *const G[] = {"gthp"}, *const L[] = {"lthp", "pcycle"},
                             *const R[] = {"rthp1", "ocycle1", "rthp2", "ocycle2", "rthp3", "ocycle3"};
    const double gv[] = {m->gthp}, lv[] = {m->lthp, m->pcycle};
    rec_status s = put_record(a, "model", k->model, G, gv, 1);
    if (!s) s = put_record(a, "pipeline", k->pipeline, L, lv, 2);
    if (!s && m->have_remote) {
        drop(a, "remote", k->remote);
        const double rv[] = {m->rthp[1], m->ocycle[1], m->rthp[2], m->ocycle[2], m->rthp[3], m->ocycle[3]};
        s = put_record(a, "remote", k->remote, R, rv, 6);
    }
    char *text = s ? NULL : cJSON_Print(a);
    cJSON_Delete(a);
    if (!s && !text) s = rec_errorf(REC_ENOMEM, "out of memory");
    if (!s) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash && slash != dir) {
            *slash = 0;
            s = rec_mkdir_p(dir, "offload metric store directory");
        }
    }
    rec_atomic_file f = {.fd = -1};
    if (!s) s = rec_atomic_open(&f, path);
    if (!s && write(f.fd, text, strlen(text)) != (ssize_t)strlen(text)) {
        rec_atomic_abort(&f);
        s = rec_errorf(REC_EIO, "%s: write failed: %s", path, strerror(errno));
    }
    if (!s) s = rec_atomic_commit(&f);
    free(text);
    return s;
}
