/* The Oracle Cacher's split of each plan among N trainers (cache_impl.h; Bagpipe §3.3-3.4:
 * the LRPP cache and delayed synchronisation). State: per slot the trainers holding its latest
 * value (a bit each, N <= 64), and per batch the trainers using each slot. */
#include <stdlib.h>
#include <string.h>

#include "cache_impl.h"
#include "rectrain/core.h"

struct rec_lrpp {
    int N;
    int64_t C;
    uint64_t *valid;         /* (C) trainers holding the slot's latest value */
    uint64_t *users;         /* (C) trainers using it in the batch being split */
    int64_t *stamp;          /* (C) the split that last set users */
    int64_t splits;
    int32_t *uniq;           /* (C) the batch's slots in first-use order */
    int32_t *shared;         /* (C) */
    int64_t n_shared;
    rec_lrpp_part *part;     /* (N) */
};

#define PUSH(part, arr, val)                                                                      \
    do {                                                                                          \
        if ((part)->n_##arr == (part)->arr##_cap) {                                               \
            const int64_t cap = (part)->arr##_cap ? 2 * (part)->arr##_cap : 1024;                 \
            void *q = realloc((part)->arr, sizeof(*(part)->arr) * (size_t)cap);                   \
            if (!q) return rec_errorf(REC_ENOMEM, "oracle: out of memory splitting a plan");      \
            (part)->arr = q;                                                                      \
            (part)->arr##_cap = cap;                                                              \
        }                                                                                         \
        (part)->arr[(part)->n_##arr++] = (val);                                                   \
    } while (0)

rec_status rec__lrpp_init(rec_lrpp **out, int trainers, int64_t capacity) {
    *out = NULL;
    if (trainers < 1 || trainers > 64) return rec_errorf(REC_EINVAL, "1 to 64 trainers, not %d", trainers);
    rec_lrpp *l = calloc(1, sizeof *l);
    if (!l) return rec_errorf(REC_ENOMEM, "oracle: out of memory");
    l->N = trainers;
    l->C = capacity;
    l->valid = calloc((size_t)capacity, sizeof(uint64_t));
    l->users = calloc((size_t)capacity, sizeof(uint64_t));
    l->stamp = calloc((size_t)capacity, sizeof(int64_t));
    l->uniq = malloc(sizeof(int32_t) * (size_t)capacity);
    l->shared = malloc(sizeof(int32_t) * (size_t)capacity);
    l->part = calloc((size_t)trainers, sizeof(rec_lrpp_part));
    if (!l->valid || !l->users || !l->stamp || !l->uniq || !l->shared || !l->part) {
        rec__lrpp_free(l);
        return rec_errorf(REC_ENOMEM, "oracle: out of memory for %d trainers' cache state", trainers);
    }
    *out = l;
    return REC_OK;
}

void rec__lrpp_free(rec_lrpp *l) {
    if (!l) return;
    for (int t = 0; l->part && t < l->N; t++) {
        rec_lrpp_part *p = &l->part[t];
        free(p->fetch), free(p->evict), free(p->pre_send), free(p->pre_recv), free(p->apply), free(p->post_send);
        free(p->post_recv);
    }
    free(l->part), free(l->valid), free(l->users), free(l->stamp), free(l->uniq), free(l->shared);
    free(l);
}

const rec_lrpp_part *rec__lrpp_part(const rec_lrpp *l, int t) { return &l->part[t]; }

const int32_t *rec__lrpp_shared(const rec_lrpp *l, int64_t *n) {
    *n = l->n_shared;
    return l->shared;
}

static int lowest(uint64_t m) { return __builtin_ctzll(m); }

rec_status rec__lrpp_split(rec_lrpp *l, const rec_batch *b, const rec_cstep *st) {
    const int N = l->N;
    for (int t = 0; t < N; t++) {
        rec_lrpp_part *p = &l->part[t];
        p->n_fetch = p->n_evict = p->n_pre_send = p->n_pre_recv = p->n_apply = p->n_post_send = p->n_post_recv = 0;
    }
    l->n_shared = 0;
    const int64_t tag = ++l->splits;
    int64_t nu = 0;
    if (b) { /* who uses what: trainer t takes rows [t B / N, (t + 1) B / N) */
        for (int t = 0; t < N; t++) {
            const int64_t r0 = t * b->n / N, r1 = (t + 1) * b->n / N;
            for (int f = 0; f < b->n_sparse; f++) {
                const int32_t *sl = st->slots[f];
                for (int64_t k = b->sparse[f].offsets[r0]; k < b->sparse[f].offsets[r1]; k++) {
                    const int32_t s = sl[k];
                    if (l->stamp[s] != tag) l->stamp[s] = tag, l->users[s] = 0, l->uniq[nu++] = s;
                    l->users[s] |= UINT64_C(1) << t;
                }
            }
        }
    }
    for (int64_t i = 0; i < st->n_fetch; i++) { /* rows nobody holds: their owner fetches them */
        const rec_centry *e = &st->fetch[i];
        const int o = (int)(e->row % N);
        PUSH(&l->part[o], fetch, *e);
        l->valid[e->slot] = UINT64_C(1) << o;
    }
    for (int64_t i = 0; i < nu; i++) {
        const int32_t s = l->uniq[i];
        const uint64_t need = l->users[s] & ~l->valid[s];
        if (need) { /* a user without the latest value gets it from a holder, just before x */
            const int src = lowest(l->valid[s]);
            for (uint64_t m = need; m; m &= m - 1) {
                const int t = lowest(m);
                PUSH(&l->part[src], pre_send, ((rec_cmove){s, t}));
                PUSH(&l->part[t], pre_recv, ((rec_cmove){s, src}));
            }
            l->valid[s] |= need;
        }
        if (__builtin_popcountll(l->users[s]) >= 2) { /* summed over trainers, applied by every holder */
            l->shared[l->n_shared++] = s;
            for (uint64_t m = l->valid[s]; m; m &= m - 1) PUSH(&l->part[lowest(m)], apply, s);
        } else {
            l->valid[s] = l->users[s]; /* only its user steps it */
        }
    }
    for (int64_t i = 0; i < st->n_evict; i++) { /* the owner writes back the latest value */
        const rec_centry *e = &st->evict[i];
        const int o = (int)(e->row % N);
        if (!(l->valid[e->slot] & (UINT64_C(1) << o))) {
            const int src = lowest(l->valid[e->slot]);
            PUSH(&l->part[src], post_send, ((rec_cmove){e->slot, o}));
            PUSH(&l->part[o], post_recv, ((rec_cmove){e->slot, src}));
        }
        PUSH(&l->part[o], evict, *e);
        l->valid[e->slot] = 0;
    }
    return REC_OK;
}
