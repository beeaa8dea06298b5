/* The deployment config of `rectrain cluster` (cache.h): one JSON object, checked key by key
 * from a table of what each key may hold. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rectrain/cache.h"
#include "rectrain/core.h"

typedef enum { K_INT, K_INT64, K_NUM, K_BOOL, K_STR, K_POLICY } kind;

typedef struct key {
    const char *name;
    kind k;
    double lo, hi;
    size_t off, cap;       /* where it goes in the config; string capacity */
} key;

#define OFF(f) offsetof(rec_cluster_config, f)
#define STR(f) OFF(f), sizeof(((rec_cluster_config *)0)->f)

static const key TOP[] = {
    {"format", K_STR, 0, 0, 0, 0},  /* checked apart */
    {"version", K_STR, 0, 0, 0, 0}, /* checked apart */
    {"data", K_STR, 0, 0, STR(data)},
    {"model", K_STR, 0, 0, STR(model)},
    {"loss_log", K_STR, 0, 0, STR(loss_log)},
    {"ckpt", K_STR, 0, 0, STR(ckpt)},
    {"spec", K_STR, 0, 0, STR(spec)},
    {"prep_workers", K_INT, 0, 16, OFF(prep_workers), 0},
    {"host", K_STR, 0, 0, STR(host)},
    {"batch", K_INT64, 0, 1 << 24, OFF(batch), 0},
    {"epochs", K_INT, 0, 100000, OFF(epochs), 0},
    {"shuffle", K_BOOL, 0, 1, OFF(shuffle), 0},
    {"steps", K_INT64, 0, INT32_MAX, OFF(steps), 0},
    {"embservers", K_INT, 0, 62, OFF(embservers), 0},
    {"trainers", K_INT, 1, 64, OFF(trainers), 0},
    {"oracles", K_INT, 1, REC_CACHE_MAX_ORACLES, OFF(oracles), 0},
    {"threads", K_INT, 1, 1024, OFF(threads), 0},
    {"base_port", K_INT, 1024, 65535 - 160, OFF(base_port), 0},
    {"peer_timeout", K_NUM, 0.1, 86400, OFF(peer_timeout), 0},
    {"cache", K_STR, 0, 0, 0, 0},   /* an object, below */
    {"link", K_STR, 0, 0, 0, 0},    /* an object, below */
    {"durable", K_STR, 0, 0, 0, 0}, /* an object, below */
    {"offload", K_STR, 0, 0, STR(offload)},
    {"network", K_STR, 0, 0, STR(network)},
    {"hosts", K_STR, 0, 0, 0, 0},   /* an object, below */
};
static const char *const ROLES[4] = {"embservers", "prep_workers", "oracles", "trainers"}; /* REC_ROLE_* */
static const key DURABLE[] = {
    {"dir", K_STR, 0, 0, STR(durable_dir)},
    {"every", K_INT64, 1, INT32_MAX, OFF(durable_every), 0},
};
static const key LINK[] = {
    {"gbit", K_NUM, 0, 1000, OFF(link_gbit), 0},
    {"latency_us", K_NUM, 0, 1e7, OFF(link_latency_us), 0},
};
static const key CACHE[] = {
    {"policy", K_POLICY, 0, 0, OFF(policy), 0},
    {"rows", K_INT64, 1, INT32_MAX - 1, OFF(cache_rows), 0},
    {"lookahead", K_INT, 0, 100000, OFF(lookahead), 0},
    {"prefetch_depth", K_INT, 0, 100000, OFF(depth), 0},
};

static rec_status bad(const char *origin, const char *path, const char *name, const char *what) {
    return rec_errorf(REC_EINVAL, "%s: %s.%s: %s", origin, path, name, what);
}

static rec_status read_keys(rec_cluster_config *c, const cJSON *obj, const key *keys, int n, const char *origin,
                            const char *path) {
    for (const cJSON *it = obj->child; it; it = it->next) {
        const key *k = NULL;
        for (int i = 0; i < n && !k; i++)
            if (!strcmp(keys[i].name, it->string)) k = &keys[i];
        char msg[512];
        if (!k) {
            snprintf(msg, sizeof msg, "unknown key (see docs/bagpipe.md for the keys)");
            return bad(origin, path, it->string, msg);
        }
        for (const cJSON *jt = it->next; jt; jt = jt->next)
            if (!strcmp(it->string, jt->string)) return bad(origin, path, it->string, "appears twice");
        if (!strcmp(k->name, "cache") || !strcmp(k->name, "link") || !strcmp(k->name, "durable") || !strcmp(k->name, "format") ||
            !strcmp(k->name, "hosts") ||
            !strcmp(k->name, "version"))
            continue;
        char *dst = (char *)c + k->off;
        const double x = it->valuedouble;
        switch (k->k) {
        case K_STR:
            if (!cJSON_IsString(it) || !it->valuestring[0] || strlen(it->valuestring) >= k->cap)
                return bad(origin, path, it->string, "must be a non-empty string (a path or host name)");
            snprintf(dst, k->cap, "%s", it->valuestring);
            break;
        case K_BOOL:
            if (!cJSON_IsBool(it)) return bad(origin, path, it->string, "must be true or false");
            *(int *)dst = cJSON_IsTrue(it);
            break;
        case K_POLICY:
            if (!cJSON_IsString(it) || rec_cache_policy_parse(it->valuestring) < 0)
                return bad(origin, path, it->string, "must be \"bagpipe\", \"none\", \"static\" or \"lru\"");
            *(int *)dst = rec_cache_policy_parse(it->valuestring);
            break;
        default:
            if (!cJSON_IsNumber(it) || !(x >= k->lo && x <= k->hi) || (k->k != K_NUM && x != floor(x))) {
                snprintf(msg, sizeof msg, "must be %s in [%.15g, %.15g]", k->k == K_NUM ? "a number" : "an integer", k->lo,
                         k->hi);
                return bad(origin, path, it->string, msg);
            }
            if (k->k == K_INT) *(int *)dst = (int)x;
            else if (k->k == K_INT64) *(int64_t *)dst = (int64_t)x;
            else *(double *)dst = x;
        }
    }
    return REC_OK;
}

/* $.hosts: {"ROLE": ["host", ...]}: one host for all of the role's processes, or one each. */
static rec_status read_hosts(rec_cluster_config *c, const cJSON *hosts, const char *origin) {
    if (!cJSON_IsObject(hosts)) return bad(origin, "$", "hosts", "must be an object of roles and their hosts");
    for (const cJSON *it = hosts->child; it; it = it->next) {
        int r = 0;
        while (r < 4 && strcmp(ROLES[r], it->string)) r++;
        if (r == 4) return bad(origin, "$.hosts", it->string, "unknown role (embservers, prep_workers, oracles or trainers)");
        const int want = r == REC_ROLE_EMBSERVERS ? c->embservers : r == REC_ROLE_PREP_WORKERS ? c->prep_workers
                       : r == REC_ROLE_ORACLES ? c->oracles : c->trainers;
        const int n = cJSON_GetArraySize(it);
        char msg[160];
        snprintf(msg, sizeof msg, "must be an array of 1 host (for all) or %d (one a process) of host names", want);
        if (!cJSON_IsArray(it) || n < 1 || (n != 1 && n != want)) return bad(origin, "$.hosts", it->string, msg);
        char *dst = c->hosts[r];
        for (int i = 0; i < n; i++) {
            const cJSON *h = cJSON_GetArrayItem(it, i);
            const size_t at = strlen(dst);
            if (!cJSON_IsString(h) || !h->valuestring[0] || strpbrk(h->valuestring, ", :") ||
                at + strlen(h->valuestring) + 2 > sizeof c->hosts[r])
                return bad(origin, "$.hosts", it->string, "must hold host names (no commas, spaces or colons)");
            snprintf(dst + at, sizeof c->hosts[r] - at, "%s%s", i ? "," : "", h->valuestring);
        }
    }
    return REC_OK;
}

rec_status rec_cluster_config_parse(rec_cluster_config *c, const char *json, size_t len, const char *origin) {
    memset(c, 0, sizeof *c);
    c->shuffle = 1;
    c->embservers = 2;
    c->trainers = 1;
    c->oracles = 1;
    c->threads = 1;
    c->base_port = 5700;
    c->cache_rows = 1 << 18;
    snprintf(c->host, sizeof c->host, "127.0.0.1");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (!root) return rec_json_invalid(REC_EINVAL, origin, json, len, end);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return rec_errorf(REC_EINVAL, "%s: not a JSON object (a cluster config is {\"format\": \"rectrain-cluster\", ...})",
                          origin);
    }
    rec_status s = REC_OK;
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!cJSON_IsString(f) || strcmp(f->valuestring, "rectrain-cluster"))
        s = rec_errorf(REC_EINVAL, "%s: $.format: must be \"rectrain-cluster\"", origin);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "version");
    if (!s && (!cJSON_IsNumber(v) || v->valuedouble != 1))
        s = rec_errorf(REC_EINVAL, "%s: $.version: must be 1 (this rectrain reads version 1)", origin);
    if (!s) s = read_keys(c, root, TOP, (int)(sizeof TOP / sizeof TOP[0]), origin, "$");
    const cJSON *cache = cJSON_GetObjectItemCaseSensitive(root, "cache");
    if (!s && cache && !cJSON_IsObject(cache)) s = bad(origin, "$", "cache", "must be an object");
    if (!s && cache) s = read_keys(c, cache, CACHE, (int)(sizeof CACHE / sizeof CACHE[0]), origin, "$.cache");
    const cJSON *link = cJSON_GetObjectItemCaseSensitive(root, "link");
    if (!s && link && !cJSON_IsObject(link)) s = bad(origin, "$", "link", "must be an object");
    c->link_gbit = 1, c->link_latency_us = 100;
    if (!s && link) c->link = 1, s = read_keys(c, link, LINK, (int)(sizeof LINK / sizeof LINK[0]), origin, "$.link");
    const cJSON *dur = cJSON_GetObjectItemCaseSensitive(root, "durable");
    c->durable_every = 100;
    if (!s && dur && !cJSON_IsObject(dur)) s = bad(origin, "$", "durable", "must be an object");
    if (!s && dur) s = read_keys(c, dur, DURABLE, (int)(sizeof DURABLE / sizeof DURABLE[0]), origin, "$.durable");
    if (!s && dur && !c->durable_dir[0]) s = rec_errorf(REC_EINVAL, "%s: $.durable.dir: required (where servers keep snapshots)", origin);
    if (!s && !c->data[0]) s = rec_errorf(REC_EINVAL, "%s: $.data: required (the training .rshard)", origin);
    const cJSON *hosts = cJSON_GetObjectItemCaseSensitive(root, "hosts");
    if (!s && hosts) s = read_hosts(c, hosts, origin);
    if (!s && c->embservers == 0 && c->prep_workers == 0)
        s = rec_errorf(REC_EINVAL, "%s: $.embservers: 0 (a FastFlow job) needs \"prep_workers\" to offload to; a job of no "
                       "services is `rectrain train`", origin);
    if (!s && c->embservers == 0 && (dur || link))
        s = rec_errorf(REC_EINVAL, "%s: $.%s: is for the embedding servers, and $.embservers is 0", origin, dur ? "durable" : "link");
    if (!s && c->offload[0] && c->embservers > 0)
        s = rec_errorf(REC_EINVAL, "%s: $.offload: is for a FastFlow job (\"embservers\": 0); with servers the oracle reads "
                       "the data, through the prep-workers", origin);
    if (!s && c->embservers == 0 && !c->offload[0]) snprintf(c->offload, sizeof c->offload, "auto");
    unsigned a, b, d, e, bits;
    char tail;
    if (!s && c->network[0] && (sscanf(c->network, "%u.%u.%u.%u/%u%c", &a, &b, &d, &e, &bits, &tail) != 5 || a > 255 ||
                                b > 255 || d > 255 || e > 255 || bits > 32))
        s = rec_errorf(REC_EINVAL, "%s: $.network: '%s' is not an IPv4 network (A.B.C.D/N, e.g. 10.1.0.0/16): the one whose "
                       "addresses the job's processes reach each other on", origin, c->network);
    if (!s && c->policy != REC_CACHE_BAGPIPE && (c->lookahead || c->depth))
        s = rec_errorf(REC_EINVAL, "%s: $.cache: \"lookahead\" and \"prefetch_depth\" are for the bagpipe policy", origin);
    if (!s && c->lookahead && c->depth > c->lookahead)
        s = rec_errorf(REC_EINVAL, "%s: $.cache.prefetch_depth: %d is over the lookahead %d", origin, c->depth, c->lookahead);
    cJSON_Delete(root);
    return s;
}

rec_status rec_cluster_config_load(rec_cluster_config *c, const char *path) {
    char *text;
    size_t len;
    REC_TRY(rec_read_file(path, "cluster config", 1 << 20, &text, &len));
    rec_status s = rec_cluster_config_parse(c, text, len, path);
    free(text);
    return s;
}
