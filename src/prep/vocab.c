/* Vocabularies for Categorify: counting ids in a first pass, then an id -> index map.
 *
 * Both the counters and the final map are open-addressing hash tables over int64 keys
 * (linear probing, power-of-two capacity, at most half full) with the splitmix64 finaliser
 * as hash: ids from Criteo are already hashes, but ids after modulo or map_id are small and
 * dense, so they need mixing. */
#include <stdlib.h>
#include <string.h>

#include "rectrain/core.h"
#include "rectrain/prep.h"
#include "prep_internal.h"

typedef struct idmap {
    int64_t *keys;
    int64_t *vals;
    uint8_t *used;
    int64_t cap;   /* power of two */
    int64_t n;
} idmap;

static rec_status idmap_init(idmap *m, int64_t expect) {
    memset(m, 0, sizeof *m);
    int64_t cap = 64;
    while (cap < 2 * expect) cap *= 2;
    m->cap = cap;
    rec_status s = rec_alloc((void **)&m->keys, (size_t)cap * 8, "vocabulary keys");
    if (!s) s = rec_alloc((void **)&m->vals, (size_t)cap * 8, "vocabulary values");
    if (!s) s = rec_alloc((void **)&m->used, (size_t)cap, "vocabulary slots");
    return s;
}

static void idmap_free(idmap *m) {
    rec_free(m->keys);
    rec_free(m->vals);
    rec_free(m->used);
    memset(m, 0, sizeof *m);
}

static inline int64_t idmap_slot(const idmap *m, int64_t key) {
    int64_t i = (int64_t)(rec_mix64((uint64_t)key) & (uint64_t)(m->cap - 1));
    while (m->used[i] && m->keys[i] != key) i = (i + 1) & (m->cap - 1);
    return i;
}

static rec_status idmap_grow(idmap *m) {
    idmap bigger;
    REC_TRY(idmap_init(&bigger, m->cap));
    for (int64_t i = 0; i < m->cap; i++) {
        if (!m->used[i]) continue;
        int64_t j = idmap_slot(&bigger, m->keys[i]);
        bigger.used[j] = 1;
        bigger.keys[j] = m->keys[i];
        bigger.vals[j] = m->vals[i];
    }
    bigger.n = m->n;
    idmap_free(m);
    *m = bigger;
    return REC_OK;
}

/* Adds `delta` to the value of `key`, inserting it with 0 first if absent. */
static rec_status idmap_add(idmap *m, int64_t key, int64_t delta) {
    int64_t i = idmap_slot(m, key);
    if (!m->used[i]) {
        if (2 * (m->n + 1) > m->cap) {
            REC_TRY(idmap_grow(m));
            i = idmap_slot(m, key);
        }
        m->used[i] = 1;
        m->keys[i] = key;
        m->vals[i] = 0;
        m->n++;
    }
    m->vals[i] += delta;
    return REC_OK;
}

/* ---- the vocabulary ---------------------------------------------------------------------- */

struct rec_vocab {
    idmap map;      /* id -> index in 1..V */
    int64_t *ids;   /* (V) ids[i] has index i+1 */
    int64_t size;   /* V */
};

int64_t rec_vocab_size(const rec_vocab *v) { return v->size; }

void rec__vocab_table(const rec_vocab *v, const int64_t **keys, const int64_t **vals, const uint8_t **used,
                      int64_t *cap) {
    *keys = v->map.keys, *vals = v->map.vals, *used = v->map.used, *cap = v->map.cap;
}
const int64_t *rec_vocab_ids(const rec_vocab *v) { return v->ids; }

int64_t rec_vocab_lookup(const rec_vocab *v, int64_t id) {
    int64_t i = idmap_slot(&v->map, id);
    return v->map.used[i] ? v->map.vals[i] : 0;
}

rec_status rec_vocab_from_ids(rec_vocab **out, const int64_t *ids, int64_t n) {
    *out = NULL;
    rec_vocab *v = calloc(1, sizeof *v);
    if (!v) return rec_errorf(REC_ENOMEM, "out of memory allocating a vocabulary");
    rec_status s = idmap_init(&v->map, n);
    if (!s) s = rec_alloc((void **)&v->ids, (size_t)(n + 1) * 8, "vocabulary ids");
    for (int64_t i = 0; !s && i < n; i++) {
        int64_t slot = idmap_slot(&v->map, ids[i]);
        if (v->map.used[slot]) {
            s = rec_errorf(REC_EFORMAT, "vocabulary lists id %lld twice (indices %lld and %lld)",
                           (long long)ids[i], (long long)v->map.vals[slot], (long long)i + 1);
            break;
        }
        v->map.used[slot] = 1;
        v->map.keys[slot] = ids[i];
        v->map.vals[slot] = i + 1;
        v->map.n++;
        v->ids[i] = ids[i];
    }
    if (s) {
        rec_vocab_free(v);
        return s;
    }
    v->size = n;
    *out = v;
    return REC_OK;
}

void rec_vocab_free(rec_vocab *v) {
    if (!v) return;
    idmap_free(&v->map);
    rec_free(v->ids);
    free(v);
}

void rec_vocab_set_free(rec_vocab_set *vs) {
    for (int32_t i = 0; i < vs->n; i++) rec_vocab_free(vs->v[i]);
    free(vs->v);
    vs->v = NULL;
    vs->n = 0;
}

/* ---- counting ----------------------------------------------------------------------------- */

struct rec_vocab_counts {
    int32_t n;
    idmap *maps;   /* (n) id -> occurrences, one per categorify op */
};

rec_status rec_vocab_counts_init(rec_vocab_counts **out, const rec_spec *spec) {
    *out = NULL;
    rec_vocab_counts *c = calloc(1, sizeof *c);
    if (!c) return rec_errorf(REC_ENOMEM, "out of memory allocating vocabulary counters");
    c->n = spec->n_vocabs;
    c->maps = calloc((size_t)c->n + 1, sizeof *c->maps);
    rec_status s = c->maps ? REC_OK : rec_errorf(REC_ENOMEM, "out of memory allocating vocabulary counters");
    for (int32_t i = 0; !s && i < c->n; i++) s = idmap_init(&c->maps[i], 1024);
    if (s) {
        rec_vocab_counts_free(c);
        return s;
    }
    *out = c;
    return REC_OK;
}

void rec_vocab_counts_free(rec_vocab_counts *c) {
    if (!c) return;
    for (int32_t i = 0; c->maps && i < c->n; i++) idmap_free(&c->maps[i]);
    free(c->maps);
    free(c);
}

/* Counts ids[0..n) into slot k. Used by the executor's counting pass. */
rec_status rec__vocab_count_ids(rec_vocab_counts *c, int32_t k, const int64_t *ids, int64_t n) {
    idmap *m = &c->maps[k];
    for (int64_t i = 0; i < n; i++) REC_TRY(idmap_add(m, ids[i], 1));
    return REC_OK;
}

rec_status rec_vocab_counts_merge(rec_vocab_counts *dst, const rec_vocab_counts *src) {
    for (int32_t k = 0; k < dst->n && k < src->n; k++) {
        const idmap *m = &src->maps[k];
        for (int64_t i = 0; i < m->cap; i++)
            if (m->used[i]) REC_TRY(idmap_add(&dst->maps[k], m->keys[i], m->vals[i]));
    }
    return REC_OK;
}

typedef struct { int64_t id, count; } id_count;

static int by_count_desc(const void *a, const void *b) {
    const id_count *x = a, *y = b;
    if (x->count != y->count) return x->count > y->count ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

rec_status rec_vocab_counts_finish(const rec_vocab_counts *c, const rec_spec *spec,
                                   rec_vocab_set *out) {
    out->n = 0;
    out->v = calloc((size_t)c->n + 1, sizeof *out->v);
    if (!out->v) return rec_errorf(REC_ENOMEM, "out of memory building vocabularies");
    for (int32_t k = 0; k < c->n; k++) {
        const rec_feature *ft = rec_spec_vocab_feature(spec, k);
        int64_t min_count = ft ? rec_feature_categorify(ft)->min_count : 1;
        const idmap *m = &c->maps[k];
        id_count *all = malloc((size_t)(m->n + 1) * sizeof *all);
        int64_t *ids = malloc((size_t)(m->n + 1) * sizeof *ids);
        if (!all || !ids) {
            free(all);
            free(ids);
            rec_vocab_set_free(out);
            return rec_errorf(REC_ENOMEM, "out of memory building vocabulary %d", k);
        }
        int64_t n = 0;
        for (int64_t i = 0; i < m->cap; i++)
            if (m->used[i] && m->vals[i] >= min_count) all[n++] = (id_count){m->keys[i], m->vals[i]};
        qsort(all, (size_t)n, sizeof *all, by_count_desc);
        for (int64_t i = 0; i < n; i++) ids[i] = all[i].id;
        rec_status s = rec_vocab_from_ids(&out->v[k], ids, n);
        free(all);
        free(ids);
        out->n = k + 1;
        if (s) {
            rec_vocab_set_free(out);
            return s;
        }
    }
    out->n = c->n;
    return REC_OK;
}
