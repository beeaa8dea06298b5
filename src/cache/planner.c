/* The Oracle Cacher's planner (cache.h): Bagpipe §3.1 Algorithm 1 with the trainer's cache
 * slots assigned here, and the NONE / STATIC / LRU baselines on the same slots.
 *
 * State per table row: latest (the last window batch using it, -1 none) and slot (-1 when not
 * cached), side by side in 8 bytes (one cache miss for both); per slot its (table, row). The window keeps each batch's distinct
 * rows only, as keys table << 40 | row; the batch itself is given again to rec_cplan_step
 * (the oracle reads the data twice, L batches apart, rather than holding L batches). Free
 * slots wait in a FIFO with the batch from which they may be reused (freed after t: t + depth),
 * in increasing order since t only grows.
 */
#include <stdlib.h>
#include <string.h>

#include "rectrain/cache.h"
#include "rectrain/core.h"

#define KEY_SHIFT 40
#define KEY_ROW(k) ((int64_t)((k) & ((UINT64_C(1) << KEY_SHIFT) - 1)))
#define KEY_F(k) ((int32_t)((k) >> KEY_SHIFT))

typedef struct rowst {
    int32_t latest, slot;
} rowst;

/* Ids ahead whose row state the loops prefetch (random reads over up to 8 bytes x 33.8M rows on
 * the Kaggle tables: bench oracle). */
#define PF_IDS 32

typedef struct wbatch {
    int64_t batch, ids;      /* its number and id count (checked against the batch planned) */
    int64_t n, cap;
    uint64_t *keys;          /* (n) distinct rows in first-use order */
} wbatch;

struct rec_cplan {
    rec_cplan_opts o;
    int64_t *rows;           /* (F) */
    int W, depth;            /* window, and the reuse delay of a freed slot */
    rowst **rs;              /* (F)(R_f) */
    uint8_t **hot;           /* STATIC: (F)(R_f) 1 for a hot row; NULL otherwise */
    int32_t *slot_f;         /* (C) the row a slot holds, f = -1 when empty */
    int64_t *slot_row;
    int32_t *fq_slot;        /* free FIFO (C) */
    int64_t *fq_from;
    int64_t fq_head, fq_n;
    int32_t *prev, *next;    /* LRU list over slots, head most recent */
    int32_t mru, lru;
    wbatch *win;             /* ring (W) */
    int w_head, w_n;
    int64_t next_look, next_step;
    rec_centry *fetch, *evict;
    int64_t fetch_cap, evict_cap, n_fetch, n_evict;
    int32_t **slots;         /* (F) output */
    int64_t *slots_cap;
    rec_cplan_stats st;
};

const char *rec_cache_policy_name(int p) {
    static const char *const n[REC_CACHE_POLICIES] = {"bagpipe", "none", "static", "lru"};
    return p >= 0 && p < REC_CACHE_POLICIES ? n[p] : "unknown";
}

int rec_cache_policy_parse(const char *name) {
    for (int p = 0; p < REC_CACHE_POLICIES; p++)
        if (!strcmp(name, rec_cache_policy_name(p))) return p;
    return -1;
}

void rec_cplan_free(rec_cplan *p) {
    if (!p) return;
    for (int f = 0; f < p->o.F; f++) {
        if (p->rs) free(p->rs[f]);
        if (p->hot) free(p->hot[f]);
        if (p->slots) free(p->slots[f]);
    }
    free(p->rs), free(p->hot), free(p->slots), free(p->slots_cap);
    for (int i = 0; p->win && i < p->W; i++) free(p->win[i].keys);
    free(p->win), free(p->rows), free(p->slot_f), free(p->slot_row), free(p->fq_slot), free(p->fq_from);
    free(p->prev), free(p->next), free(p->fetch), free(p->evict);
    free(p);
}

rec_status rec_cplan_init(rec_cplan **out, const rec_cplan_opts *o) {
    *out = NULL;
    if (o->policy < 0 || o->policy >= REC_CACHE_POLICIES)
        return rec_errorf(REC_EINVAL, "cache policy %d is unknown; use bagpipe, none, static or lru", o->policy);
    if (o->F < 1 || o->F > (1 << 20)) return rec_errorf(REC_EINVAL, "cache planner: %d tables (1 to 2^20)", o->F);
    if (o->capacity < 1 || o->capacity >= INT32_MAX)
        return rec_errorf(REC_EINVAL, "a trainer cache of %lld rows: give --cache-rows from 1 to 2^31 - 1",
                          (long long)o->capacity);
    const int bag = o->policy == REC_CACHE_BAGPIPE;
    if (bag && (o->lookahead < 1 || o->lookahead > 100000))
        return rec_errorf(REC_EINVAL, "lookahead %d: give --lookahead from 1 to 100000 batches", o->lookahead);
    if (bag && (o->depth < 1 || o->depth > o->lookahead))
        return rec_errorf(REC_EINVAL, "prefetch depth %d: give --prefetch-depth from 1 to the lookahead (%d); a deeper "
                          "prefetch could read a row before its last write-back", o->depth, o->lookahead);
    for (int f = 0; f < o->F; f++)
        if (o->rows[f] < 1 || o->rows[f] >= (INT64_C(1) << KEY_SHIFT))
            return rec_errorf(REC_EINVAL, "cache planner: table %d has %lld rows (1 to 2^40)", f, (long long)o->rows[f]);
    rec_cplan *p = calloc(1, sizeof *p);
    if (!p) return rec_errorf(REC_ENOMEM, "cache planner: out of memory");
    p->o = *o;
    p->W = bag ? o->lookahead : o->policy == REC_CACHE_LRU ? 2 : 1;
    p->depth = bag ? o->depth : 1;
    const int64_t C = o->capacity;
    int ok = (p->rows = malloc(sizeof(int64_t) * (size_t)o->F)) && (p->rs = calloc((size_t)o->F, sizeof(rowst *))) && (p->slots = calloc((size_t)o->F, sizeof(int32_t *))) &&
             (p->slots_cap = calloc((size_t)o->F, sizeof(int64_t))) && (p->win = calloc((size_t)p->W, sizeof(wbatch))) &&
             (p->slot_f = malloc(sizeof(int32_t) * (size_t)C)) && (p->slot_row = malloc(sizeof(int64_t) * (size_t)C)) &&
             (p->fq_slot = malloc(sizeof(int32_t) * (size_t)C)) && (p->fq_from = malloc(sizeof(int64_t) * (size_t)C));
    if (ok && o->policy == REC_CACHE_LRU)
        ok = (p->prev = malloc(sizeof(int32_t) * (size_t)C)) && (p->next = malloc(sizeof(int32_t) * (size_t)C));
    if (ok && o->policy == REC_CACHE_STATIC) ok = (p->hot = calloc((size_t)o->F, sizeof(uint8_t *))) != NULL;
    for (int f = 0; ok && f < o->F; f++) {
        p->rows[f] = o->rows[f];
        ok = (p->rs[f] = malloc(sizeof(rowst) * (size_t)o->rows[f])) &&
             (!p->hot || (p->hot[f] = calloc((size_t)o->rows[f], 1)));
        if (ok) {
            memset(p->rs[f], 0xff, sizeof(rowst) * (size_t)o->rows[f]);
        }
    }
    if (!ok) {
        rec_cplan_free(p);
        return rec_errorf(REC_ENOMEM, "cache planner: out of memory for the state of %d tables (8 bytes a row)", o->F);
    }
    for (int64_t h = 0; p->hot && h < o->n_hot; h++) {
        const int32_t f = o->hot_f[h];
        if (f < 0 || f >= o->F || o->hot_row[h] < 0 || o->hot_row[h] >= o->rows[f]) {
            rec_cplan_free(p);
            return rec_errorf(REC_EINVAL, "hot row %lld is (table %d, row %lld), outside the tables", (long long)h, f,
                              (long long)o->hot_row[h]);
        }
        p->hot[f][o->hot_row[h]] = 1;
    }
    for (int64_t s = 0; s < C; s++) p->slot_f[s] = -1, p->fq_slot[s] = (int32_t)s, p->fq_from[s] = 0;
    p->fq_n = C;
    p->mru = p->lru = -1;
    *out = p;
    return REC_OK;
}

int rec_cplan_window(const rec_cplan *p) { return p->W; }
int rec_cplan_pending(const rec_cplan *p) { return p->w_n; }

static rec_status grow(void **a, int64_t *cap, int64_t need, size_t elem) {
    if (need <= *cap) return REC_OK;
    int64_t n = *cap ? *cap : 1024;
    while (n < need) n *= 2;
    void *q = realloc(*a, elem * (size_t)n);
    if (!q) return rec_errorf(REC_ENOMEM, "cache planner: out of memory for %lld entries", (long long)need);
    *a = q;
    *cap = n;
    return REC_OK;
}

rec_status rec_cplan_look(rec_cplan *p, const rec_batch *b) {
    if (p->w_n == p->W)
        return rec_errorf(REC_EINVAL, "cache planner: the window already holds %d batches; plan one first", p->W);
    if (b->n_sparse != p->o.F)
        return rec_errorf(REC_EINVAL, "cache planner: a batch with %d sparse features for %d tables", b->n_sparse, p->o.F);
    if (p->next_look >= INT32_MAX) return rec_errorf(REC_EINVAL, "cache planner: more than 2^31 batches");
    const int32_t x = (int32_t)p->next_look;
    wbatch *w = &p->win[(p->w_head + p->w_n) % p->W];
    int64_t ids = 0;
    for (int f = 0; f < p->o.F; f++) ids += rec_batch_nnz(b, f);
    REC_TRY(grow((void **)&w->keys, &w->cap, ids, sizeof(uint64_t)));
    for (int f = 0; f < p->o.F; f++) { /* every id first: a refused batch changes nothing */
        const rec_jagged *j = &b->sparse[f];
        const int64_t nnz = rec_batch_nnz(b, f), R = p->rows[f];
        for (int64_t k = 0; k < nnz; k++) {
            const int64_t r = rec_jagged_id(j, k);
            if (r < 0 || r >= R) {
                int64_t row = 0;
                while (j->offsets[row + 1] <= k) row++;
                return rec_errorf(REC_EINVAL, "batch %d, row %lld: table %d has id %lld, outside its %lld rows", x,
                                  (long long)row, f, (long long)r, (long long)R);
            }
        }
    }
    int64_t n = 0;
    for (int f = 0; f < p->o.F; f++) {
        const rec_jagged *j = &b->sparse[f];
        const int64_t nnz = rec_batch_nnz(b, f);
        rowst *rs = p->rs[f];
        const uint64_t tf = (uint64_t)f << KEY_SHIFT;
#define LOOK_LOOP(IDS)                                                                                  \
        for (int64_t k = 0; k < nnz; k++) {                                                             \
            if (k + PF_IDS < nnz) __builtin_prefetch(&rs[IDS[k + PF_IDS]], 1);                          \
            const int64_t r = IDS[k];                                                                   \
            if (rs[r].latest != x) { /* first use in this batch; later uses extend its TTL (line 10) */ \
                rs[r].latest = x;                                                                       \
                w->keys[n++] = tf | (uint64_t)r;                                                        \
            }                                                                                           \
        }
        if (j->wide) LOOK_LOOP(j->ids64) else LOOK_LOOP(j->ids32)
#undef LOOK_LOOP
    }
    w->batch = x;
    w->ids = ids;
    w->n = n;
    p->w_n++;
    p->next_look++;
    return REC_OK;
}

/* ---- slots ---- */

static void lru_unlink(rec_cplan *p, int32_t s) {
    if (p->prev[s] >= 0) p->next[p->prev[s]] = p->next[s];
    else p->mru = p->next[s];
    if (p->next[s] >= 0) p->prev[p->next[s]] = p->prev[s];
    else p->lru = p->prev[s];
}
static void lru_front(rec_cplan *p, int32_t s) {
    p->prev[s] = -1;
    p->next[s] = p->mru;
    if (p->mru >= 0) p->prev[p->mru] = s;
    p->mru = s;
    if (p->lru < 0) p->lru = s;
}

/* A free slot reusable by batch x, or -1. */
static int32_t take_slot(rec_cplan *p, int64_t x) {
    if (!p->fq_n || p->fq_from[p->fq_head] > x) return -1;
    const int32_t s = p->fq_slot[p->fq_head];
    p->fq_head = (p->fq_head + 1) % p->o.capacity;
    p->fq_n--;
    return s;
}

/* Frees the slot of entry e, reusable by batches >= from. */
static void release(rec_cplan *p, const rec_centry *e, int64_t from) {
    p->rs[e->f][e->row].slot = -1;
    p->slot_f[e->slot] = -1;
    const int64_t at = (p->fq_head + p->fq_n) % p->o.capacity;
    p->fq_slot[at] = e->slot;
    p->fq_from[at] = from;
    p->fq_n++;
    if (p->prev) lru_unlink(p, e->slot);
}

static rec_status evict(rec_cplan *p, int32_t s, int64_t from) {
    REC_TRY(grow((void **)&p->evict, &p->evict_cap, p->n_evict + 1, sizeof(rec_centry)));
    p->evict[p->n_evict] = (rec_centry){s, p->slot_f[s], p->slot_row[s]};
    release(p, &p->evict[p->n_evict++], from);
    return REC_OK;
}

static rec_status too_small(const rec_cplan *p, int64_t x, int64_t unique) {
    return rec_errorf(REC_EINVAL, "the trainer cache of %lld rows is too small for batch %lld (%lld distinct rows%s); give a "
                      "larger --cache-rows%s", (long long)p->o.capacity, (long long)x, (long long)unique,
                      p->o.policy == REC_CACHE_BAGPIPE ? ", with the rows kept for the lookahead" : "",
                      p->o.policy == REC_CACHE_BAGPIPE ? " or a smaller --lookahead" : "");
}

/* LRU: before batch x+1 (the window's next), its cached rows become the most recent and the
 * least recent others are evicted after x until its misses fit. */
static rec_status lru_make_room(rec_cplan *p, int64_t x) {
    if (p->w_n < 2) return REC_OK;
    const wbatch *nx = &p->win[(p->w_head + 1) % p->W];
    int64_t miss = 0;
    for (int64_t i = 0; i < nx->n; i++) {
        const int32_t s = p->rs[KEY_F(nx->keys[i])][KEY_ROW(nx->keys[i])].slot;
        if (s < 0) miss++;
        else lru_unlink(p, s), lru_front(p, s);
    }
    while (p->fq_n < miss) {
        const int32_t v = p->lru;
        if (v < 0 || p->rs[p->slot_f[v]][p->slot_row[v]].latest == nx->batch) return too_small(p, x + 1, nx->n);
        REC_TRY(evict(p, v, x + 1));
    }
    return REC_OK;
}

rec_status rec_cplan_step(rec_cplan *p, const rec_batch *b, rec_cstep *st) {
    memset(st, 0, sizeof *st);
    if (!p->w_n) return rec_errorf(REC_EINVAL, "cache planner: no batch to plan; look() at it first");
    wbatch *w = &p->win[p->w_head];
    const int64_t x = w->batch;
    int64_t ids = 0;
    for (int f = 0; f < p->o.F && f < b->n_sparse; f++) ids += rec_batch_nnz(b, f);
    if (b->n_sparse != p->o.F || ids != w->ids)
        return rec_errorf(REC_EINVAL, "cache planner: batch %lld was seen with %lld ids and is planned with %lld: the data "
                          "changed between the two reads", (long long)x, (long long)w->ids, (long long)ids);
    p->n_fetch = p->n_evict = 0;
    REC_TRY(grow((void **)&p->fetch, &p->fetch_cap, w->n, sizeof(rec_centry)));
    REC_TRY(grow((void **)&p->evict, &p->evict_cap, w->n, sizeof(rec_centry)));
    /* fetches (Alg. 1 lines 18-20), and which rows leave after x (lines 21-23: no later window
     * batch uses them), applied once the ids are mapped */
    for (int64_t i = 0; i < w->n; i++) {
        const int32_t f = KEY_F(w->keys[i]);
        const int64_t r = KEY_ROW(w->keys[i]);
        if (i + PF_IDS < w->n) __builtin_prefetch(&p->rs[KEY_F(w->keys[i + PF_IDS])][KEY_ROW(w->keys[i + PF_IDS])], 1);
        int32_t s = p->rs[f][r].slot;
        if (s < 0) {
            if ((s = take_slot(p, x)) < 0) return too_small(p, x, w->n);
            p->rs[f][r].slot = s;
            p->slot_f[s] = f;
            p->slot_row[s] = r;
            p->fetch[p->n_fetch++] = (rec_centry){s, f, r};
            if (p->prev) lru_front(p, s);
        } else if (p->prev) {
            lru_unlink(p, s), lru_front(p, s);
        }
        int go;
        switch (p->o.policy) {
        case REC_CACHE_BAGPIPE: go = p->rs[f][r].latest == x; break;
        case REC_CACHE_STATIC: go = !p->hot[f][r]; break;
        case REC_CACHE_LRU: go = 0; break;
        default: go = 1; break;
        }
        if (go) p->evict[p->n_evict++] = (rec_centry){s, f, r};
    }
    const int64_t taken = p->o.capacity - p->fq_n;
    if (taken > p->st.peak_slots) p->st.peak_slots = taken;
    /* the batch's ids as slots */
    for (int f = 0; f < p->o.F; f++) {
        const rec_jagged *j = &b->sparse[f];
        const int64_t nnz = rec_batch_nnz(b, f);
        REC_TRY(grow((void **)&p->slots[f], &p->slots_cap[f], nnz, sizeof(int32_t)));
        const rowst *rs = p->rs[f];
        int32_t *o = p->slots[f];
#define MAP_LOOP(IDS)                                                           \
        for (int64_t k = 0; k < nnz; k++) {                                     \
            if (k + PF_IDS < nnz) __builtin_prefetch(&rs[IDS[k + PF_IDS]], 0);  \
            o[k] = rs[IDS[k]].slot;                                             \
        }
        if (j->wide) MAP_LOOP(j->ids64) else MAP_LOOP(j->ids32)
#undef MAP_LOOP
    }
    for (int64_t i = 0; i < p->n_evict; i++) release(p, &p->evict[i], x + p->depth);
    if (p->o.policy == REC_CACHE_LRU) REC_TRY(lru_make_room(p, x));
    p->st.batches++;
    p->st.fetched += p->n_fetch;
    p->st.evicted += p->n_evict;
    p->st.ids += ids;
    p->st.unique += w->n;
    p->w_head = (p->w_head + 1) % p->W;
    p->w_n--;
    p->next_step++;
    *st = (rec_cstep){x, p->n_fetch, p->fetch, p->n_evict, p->evict, w->n, p->slots};
    return REC_OK;
}

rec_status rec_cplan_flush(rec_cplan *p, rec_cstep *st) {
    memset(st, 0, sizeof *st);
    p->n_fetch = p->n_evict = 0;
    for (int64_t s = 0; s < p->o.capacity; s++)
        if (p->slot_f[s] >= 0) REC_TRY(evict(p, (int32_t)s, p->next_step));
    p->st.evicted += p->n_evict;
    *st = (rec_cstep){-1, 0, p->fetch, p->n_evict, p->evict, 0, p->slots};
    return REC_OK;
}

void rec_cplan_get_stats(const rec_cplan *p, rec_cplan_stats *s) { *s = p->st; }
