/* The lookahead cache's frame bodies (net.h, cache.h): embedding server requests and the Oracle
 * Cacher's plans. Decoders check every count against what is left and every entry against the
 * tables before anything uses it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rectrain/cache.h"
#include "rectrain/core.h"
#include "rectrain/net.h"
#include "wire_impl.h"

_Static_assert(sizeof(rec_centry) == 16, "a cache entry is 16 bytes on the wire");

/* ---- EMB_HELLO ---------------------------------------------------------------------------- */

uint64_t rec_net_emb_hello_digest(const rec_net_emb_hello *h) {
    uint64_t v[7] = {(uint64_t)h->shard, (uint64_t)h->shards, (uint64_t)h->F, (uint64_t)h->E, (uint64_t)h->opt, 0, h->seed};
    memcpy(&v[5], &h->init_acc, sizeof h->init_acc);
    uint64_t d = rec_fnv1a64(REC_FNV_SEED, v, sizeof v);
    const uint64_t lin[2] = {1, h->lin_seed}; /* only with them: the digests of DLRM and DCN stay */
    if (h->lin) d = rec_fnv1a64(d, lin, sizeof lin);
    const uint64_t b16[2] = {2, (uint64_t)h->rounding}; /* only with bf16 tables: fp32 tables' digests stay */
    if (h->bf16) d = rec_fnv1a64(d, b16, sizeof b16);
    return rec_fnv1a64(d, h->rows, sizeof(int64_t) * (size_t)h->F);
}

void rec_net_emb_hello_encode(rec_wbuf *w, const rec_net_emb_hello *h) {
    put_u64(w, h->digest);
    put_u32(w, (uint32_t)h->shard);
    put_u32(w, (uint32_t)h->shards);
    put_u32(w, (uint32_t)h->F);
    put_u32(w, (uint32_t)h->E);
    put_u32(w, (uint32_t)h->opt);
    put(w, &h->init_acc, 4);
    put_u64(w, h->seed);
    put_u32(w, (uint32_t)h->durable);
    put_u32(w, (uint32_t)h->lin);
    put_u64(w, h->lin_seed);
    put_u32(w, (uint32_t)h->bf16);
    put_u32(w, (uint32_t)h->rounding);
    put(w, h->rows, sizeof(int64_t) * (size_t)h->F);
}

rec_status rec_net_emb_hello_decode(const uint8_t *body, size_t len, rec_net_emb_hello *h) {
    memset(h, 0, sizeof *h);
    rbuf r = body_reader(body, len, "EMB_HELLO");
    h->digest = get_u64(&r, "the digest");
    h->shard = (int32_t)get_u32(&r, "the shard");
    h->shards = (int32_t)get_u32(&r, "the shard count");
    h->F = (int32_t)get_u32(&r, "the table count");
    h->E = (int32_t)get_u32(&r, "the dim");
    h->opt = (int32_t)get_u32(&r, "the optimizer");
    get(&r, &h->init_acc, 4, "the initial accumulator");
    h->seed = get_u64(&r, "the seed");
    h->durable = (int32_t)get_u32(&r, "the durable flag");
    h->lin = (int32_t)get_u32(&r, "the first-order flag");
    h->lin_seed = get_u64(&r, "the first-order seed");
    h->bf16 = (int32_t)get_u32(&r, "the bf16 flag");
    h->rounding = (int32_t)get_u32(&r, "the rounding");
    if (!r.err && (h->durable < 0 || h->durable > 1 || h->lin < 0 || h->lin > 1 || h->shards < 1 || h->shards > 4096 || h->shard < 0 || h->shard >= h->shards || h->F < 1 ||
                   h->F > REC_NET_MAX_FEATURES || h->E < 1 || h->E > 4096 || h->opt < 0 || h->opt > 2 ||
                   !(h->init_acc >= 0) || h->bf16 < 0 || h->bf16 > 1 || h->rounding < 0 || h->rounding > (h->bf16 ? 1 : 0)))
        r.err = rec_errorf(REC_EFORMAT, "EMB_HELLO frame: shard %d of %d, %d tables of dim %d, optimizer %d, initial "
                           "accumulator %g, first-order flag %d, bf16 flag %d, rounding %d: out of range", h->shard,
                           h->shards, h->F, h->E, h->opt, (double)h->init_acc, h->lin, h->bf16, h->rounding);
    h->rows = (const int64_t *)take(&r, bytes_of(h->F, 8), "the table sizes");
    for (int f = 0; !r.err && f < h->F; f++)
        if (h->rows[f] < 1 || h->rows[f] >= (INT64_C(1) << 40))
            r.err = rec_errorf(REC_EFORMAT, "EMB_HELLO frame: table %d has %lld rows (1 to 2^40)", f, (long long)h->rows[f]);
    double values = 0; /* every table's rows are drawn at init: bound the work and the shard */
    for (int f = 0; !r.err && f < h->F; f++) values += (double)h->rows[f] * h->E;
    if (!r.err && values > 0x1p40)
        r.err = rec_errorf(REC_EFORMAT, "EMB_HELLO frame: %.3g table values, over 2^40", values);
    if (!r.err && rec_net_emb_hello_digest(h) != h->digest)
        r.err = rec_errorf(REC_EFORMAT, "EMB_HELLO frame: its digest does not match its fields (corrupt)");
    return finish(&r);
}

/* ---- EMB_GET / EMB_ROWS / EMB_PUT --------------------------------------------------------- */

void rec_net_rows_encode(rec_wbuf *w, const rec_net_rows *r, int with_entries, int E, int S) {
    put_i64(w, r->n);
    if (with_entries) put(w, r->e, sizeof(rec_centry) * (size_t)r->n);
    if (r->values) put(w, r->values, sizeof(float) * (size_t)(r->n * E));
    if (r->values16) {
        put(w, r->values16, sizeof(uint16_t) * (size_t)(r->n * E));
        pad8(w);
    }
    if ((r->values || r->values16) && S) put(w, r->state, sizeof(float) * (size_t)(r->n * S));
}

rec_status rec_net_rows_decode(const uint8_t *body, size_t len, const char *what, int with_entries, int with_values,
                               const rec_net_emb_hello *t, int S, rec_net_rows *out) {
    memset(out, 0, sizeof *out);
    if ((uintptr_t)body % 8) return rec_errorf(REC_EINVAL, "%s frame: the message buffer is not 8-byte aligned", what);
    rbuf r = body_reader(body, len, what);
    const int64_t n = get_i64(&r, "the row count");
    if (!r.err && (n < 0 || n > REC_NET_MAX_ROWS * 64))
        r.err = rec_errorf(REC_EFORMAT, "%s frame: %lld rows", what, (long long)n);
    out->n = n;
    if (with_entries) out->e = (const rec_centry *)take(&r, bytes_of(n, sizeof(rec_centry)), "the entries");
    for (int64_t i = 0; !r.err && with_entries && i < n; i++) {
        const rec_centry *e = &out->e[i];
        if (e->f < 0 || e->f >= t->F || e->row < 0 || e->row >= t->rows[e->f] || e->row % t->shards != t->shard)
            r.err = rec_errorf(REC_EFORMAT, "%s frame: entry %lld is table %d row %lld, which is not on server %d of %d",
                               what, (long long)i, e->f, (long long)e->row, t->shard, t->shards);
    }
    if (with_values && t->bf16) {
        out->values16 = (const uint16_t *)take(&r, bytes_of(n, sizeof(uint16_t) * (size_t)(t->E + (t->lin != 0))), "the values");
        skip8(&r);
        if (S) out->state = (const float *)take(&r, bytes_of(n, sizeof(float) * (size_t)S), "the optimizer state");
    } else if (with_values) {
        out->values = (const float *)take(&r, bytes_of(n, sizeof(float) * (size_t)(t->E + (t->lin != 0))), "the values");
        if (S) out->state = (const float *)take(&r, bytes_of(n, sizeof(float) * (size_t)S), "the optimizer state");
    }
    return finish(&r);
}

/* ---- CACHE_HELLO ------------------------------------------------------------------------- */

void rec_net_cache_hello_encode(rec_wbuf *w, int rank, int ranks, int64_t start) {
    put_u32(w, (uint32_t)rank);
    put_u32(w, (uint32_t)ranks);
    put_i64(w, start);
}

rec_status rec_net_cache_hello_decode(const uint8_t *body, size_t len, int *rank, int *ranks, int64_t *start) {
    rbuf r = body_reader(body, len, "CACHE_HELLO");
    *rank = (int)get_u32(&r, "the rank");
    *ranks = (int)get_u32(&r, "the trainer count");
    *start = get_i64(&r, "the first batch");
    if (!r.err && (*ranks < 1 || *ranks > 64 || *rank < 0 || *rank >= *ranks || *start < 0))
        r.err = rec_errorf(REC_EFORMAT, "CACHE_HELLO frame: rank %d of %d trainers (1 to 64), from batch %lld", *rank,
                           *ranks, (long long)*start);
    return finish(&r);
}

/* ---- EMB_OK (state), EMB_COMMIT / EMB_DENSE (floats) -------------------------------------- */

void rec_net_emb_state_encode(rec_wbuf *w, const rec_net_emb_state *s) {
    put_i64(w, s->committed);
    put_u32(w, (uint32_t)s->written);
    put_u32(w, (uint32_t)s->durable);
    put_i64(w, s->snap[0]);
    put_i64(w, s->snap[1]);
    put_u32(w, (uint32_t)s->restored);
    put_u32(w, 0);
}

rec_status rec_net_emb_state_decode(const uint8_t *body, size_t len, rec_net_emb_state *s) {
    rbuf r = body_reader(body, len, "EMB_OK");
    s->committed = get_i64(&r, "the committed step");
    s->written = (int32_t)get_u32(&r, "the written flag");
    s->durable = (int32_t)get_u32(&r, "the durable flag");
    s->snap[0] = get_i64(&r, "the newest snapshot");
    s->snap[1] = get_i64(&r, "the older snapshot");
    s->restored = (int32_t)get_u32(&r, "the restored flag");
    (void)get_u32(&r, "padding");
    if (!r.err && (s->restored < 0 || s->restored > 1 || s->snap[0] < -1 || s->snap[1] < -1 || s->committed < -1 || s->written < 0 || s->written > 1 || s->durable < 0 || s->durable > 1))
        r.err = rec_errorf(REC_EFORMAT, "EMB_OK frame: committed step %lld, flags %d %d", (long long)s->committed,
                           s->written, s->durable);
    return finish(&r);
}

void rec_net_floats_encode(rec_wbuf *w, const float *v, int64_t n) {
    put_i64(w, n);
    put(w, v, sizeof(float) * (size_t)n);
}

rec_status rec_net_floats_decode(const uint8_t *body, size_t len, const char *what, const float **v, int64_t *n) {
    rbuf r = body_reader(body, len, what);
    *n = get_i64(&r, "the float count");
    if (!r.err && (*n < 0 || *n > (int64_t)(REC_NET_MAX_BODY / 4)))
        r.err = rec_errorf(REC_EFORMAT, "%s frame: %lld floats", what, (long long)*n);
    *v = (const float *)take(&r, bytes_of(*n, 4), "the floats");
    return finish(&r);
}

/* ---- CACHE_INFO --------------------------------------------------------------------------- */

void rec_net_cache_info_encode(rec_wbuf *w, const rec_net_cache_info *c) {
    put_u32(w, (uint32_t)c->F);
    put_u32(w, (uint32_t)c->n_dense);
    put_u32(w, (uint32_t)c->policy);
    put_u32(w, (uint32_t)c->lookahead);
    put_u32(w, (uint32_t)c->depth);
    put_u32(w, (uint32_t)c->trainers);
    put_u32(w, (uint32_t)c->rank);
    put_u32(w, (uint32_t)c->table0);
    put_u32(w, (uint32_t)(c->tables ? c->tables : c->F));
    put_u32(w, (uint32_t)c->shuffled); /* once padding, sent as 0 (file order) by earlier oracles */
    put_i64(w, c->capacity);
    put_i64(w, c->batch);
    put_i64(w, c->batches);
    put(w, c->rows, sizeof(int64_t) * (size_t)c->F);
}

rec_status rec_net_cache_info_decode(const uint8_t *body, size_t len, rec_net_cache_info *c) {
    memset(c, 0, sizeof *c);
    rbuf r = body_reader(body, len, "CACHE_INFO");
    c->F = (int32_t)get_u32(&r, "the table count");
    c->n_dense = (int32_t)get_u32(&r, "the dense width");
    c->policy = (int32_t)get_u32(&r, "the policy");
    c->lookahead = (int32_t)get_u32(&r, "the lookahead");
    c->depth = (int32_t)get_u32(&r, "the prefetch depth");
    c->trainers = (int32_t)get_u32(&r, "the trainer count");
    c->rank = (int32_t)get_u32(&r, "the rank");
    c->table0 = (int32_t)get_u32(&r, "the first table");
    c->tables = (int32_t)get_u32(&r, "the job's tables");
    c->shuffled = get_u32(&r, "the order") != 0;
    c->capacity = get_i64(&r, "the capacity");
    c->batch = get_i64(&r, "the batch size");
    c->batches = get_i64(&r, "the batch count");
    if (!r.err && (c->F < 1 || c->F > REC_NET_MAX_FEATURES || c->n_dense < 0 || c->n_dense > 1 << 16 || c->policy < 0 ||
                   c->policy >= REC_CACHE_POLICIES || c->depth < 1 || c->depth > 100000 || c->lookahead < c->depth ||
                   c->lookahead > 100000 || c->capacity < 1 ||
                   c->capacity >= INT32_MAX || c->batch < 1 || c->batch > REC_NET_MAX_ROWS || c->batches < 0 ||
                   c->trainers < 1 || c->trainers > 64 || c->rank < 0 || c->rank >= c->trainers || c->table0 < 0 ||
                   c->tables < 1 || c->tables > REC_NET_MAX_FEATURES || c->table0 > c->tables - c->F))
        r.err = rec_errorf(REC_EFORMAT, "CACHE_INFO frame: tables %d to %lld of %d, %d dense, policy %d, lookahead %d, "
                           "depth %d, capacity %lld, batch %lld, %lld batches, rank %d of %d: out of range", c->table0,
                           (long long)c->table0 + c->F - 1, c->tables, c->n_dense, c->policy, c->lookahead, c->depth,
                           (long long)c->capacity, (long long)c->batch, (long long)c->batches, c->rank, c->trainers);
    c->rows = (const int64_t *)take(&r, bytes_of(c->F, 8), "the table sizes");
    for (int f = 0; !r.err && f < c->F; f++)
        if (c->rows[f] < 1 || c->rows[f] >= (INT64_C(1) << 40))
            r.err = rec_errorf(REC_EFORMAT, "CACHE_INFO frame: table %d has %lld rows", f, (long long)c->rows[f]);
    return finish(&r);
}

/* ---- CACHE_STEP --------------------------------------------------------------------------- */

void rec_net_cache_step_encode(rec_wbuf *w, const rec_net_cache_step *s) {
    const int64_t n[8] = {s->n_fetch, s->n_evict, s->n_pre_send, s->n_pre_recv, s->n_shared, s->n_apply, s->n_post_send,
                          s->n_post_recv};
    for (int i = 0; i < 8; i++) put_i64(w, n[i]);
    put(w, s->fetch, sizeof(rec_centry) * (size_t)s->n_fetch);
    put(w, s->evict, sizeof(rec_centry) * (size_t)s->n_evict);
    put(w, s->pre_send, sizeof(rec_cmove) * (size_t)s->n_pre_send);
    put(w, s->pre_recv, sizeof(rec_cmove) * (size_t)s->n_pre_recv);
    put(w, s->post_send, sizeof(rec_cmove) * (size_t)s->n_post_send);
    put(w, s->post_recv, sizeof(rec_cmove) * (size_t)s->n_post_recv);
    put(w, s->shared, sizeof(int32_t) * (size_t)s->n_shared);
    put(w, s->apply, sizeof(int32_t) * (size_t)s->n_apply);
    pad8(w);
    rec__net_put_batch(w, &s->batch);
}

static void check_entries(rbuf *r, const rec_centry *e, int64_t n, const rec_net_cache_info *c, const char *which) {
    for (int64_t i = 0; !r->err && i < n; i++)
        if (e[i].slot < 0 || e[i].slot >= c->capacity || e[i].f < 0 || e[i].f >= c->F || e[i].row < 0 ||
            e[i].row >= c->rows[e[i].f])
            r->err = rec_errorf(REC_EFORMAT, "CACHE_STEP frame: %s entry %lld is slot %d, table %d, row %lld: outside "
                                "the cache (%lld slots) or the tables", which, (long long)i, e[i].slot, e[i].f,
                                (long long)e[i].row, (long long)c->capacity);
}

static void check_moves(rbuf *r, const rec_cmove *m, int64_t n, const rec_net_cache_info *c, const char *which) {
    for (int64_t i = 0; !r->err && i < n; i++)
        if (m[i].slot < 0 || m[i].slot >= c->capacity || m[i].peer < 0 || m[i].peer >= c->trainers || m[i].peer == c->rank)
            r->err = rec_errorf(REC_EFORMAT, "CACHE_STEP frame: %s move %lld is slot %d with trainer %d: outside the "
                                "cache (%lld slots) or not another of the %d trainers", which, (long long)i, m[i].slot,
                                m[i].peer, (long long)c->capacity, c->trainers);
}

static void check_slots(rbuf *r, const int32_t *s, int64_t n, const rec_net_cache_info *c, const char *which) {
    for (int64_t i = 0; !r->err && i < n; i++)
        if (s[i] < 0 || s[i] >= c->capacity)
            r->err = rec_errorf(REC_EFORMAT, "CACHE_STEP frame: %s slot %lld is %d, outside the cache (%lld slots)", which,
                                (long long)i, s[i], (long long)c->capacity);
}

rec_status rec_net_cache_step_decode(const uint8_t *body, size_t len, const rec_net_cache_info *c, rec_net_cache_step *s,
                                     rec_jagged *sparse, rec_net_room *room) {
    memset(s, 0, sizeof *s);
    if ((uintptr_t)body % 8) return rec_errorf(REC_EINVAL, "CACHE_STEP frame: the message buffer is not 8-byte aligned");
    rbuf r = body_reader(body, len, "CACHE_STEP");
    int64_t *n[8] = {&s->n_fetch, &s->n_evict, &s->n_pre_send, &s->n_pre_recv, &s->n_shared, &s->n_apply, &s->n_post_send,
                     &s->n_post_recv};
    for (int i = 0; i < 8; i++) {
        *n[i] = get_i64(&r, "a list's length");
        if (!r.err && (*n[i] < 0 || *n[i] > c->capacity * (i >= 2 && i != 4 && i != 5 ? c->trainers : 1)))
            r.err = rec_errorf(REC_EFORMAT, "CACHE_STEP frame: a list of %lld for a cache of %lld rows", (long long)*n[i],
                               (long long)c->capacity);
    }
    s->fetch = (const rec_centry *)take(&r, bytes_of(s->n_fetch, sizeof(rec_centry)), "the fetches");
    s->evict = (const rec_centry *)take(&r, bytes_of(s->n_evict, sizeof(rec_centry)), "the evictions");
    s->pre_send = (const rec_cmove *)take(&r, bytes_of(s->n_pre_send, sizeof(rec_cmove)), "the rows to send");
    s->pre_recv = (const rec_cmove *)take(&r, bytes_of(s->n_pre_recv, sizeof(rec_cmove)), "the rows to receive");
    s->post_send = (const rec_cmove *)take(&r, bytes_of(s->n_post_send, sizeof(rec_cmove)), "the rows to hand back");
    s->post_recv = (const rec_cmove *)take(&r, bytes_of(s->n_post_recv, sizeof(rec_cmove)), "the rows to take back");
    s->shared = (const int32_t *)take(&r, bytes_of(s->n_shared, 4), "the shared rows");
    s->apply = (const int32_t *)take(&r, bytes_of(s->n_apply, 4), "the rows to step");
    skip8(&r);
    check_entries(&r, s->fetch, s->n_fetch, c, "fetch");
    check_entries(&r, s->evict, s->n_evict, c, "evict");
    check_moves(&r, s->pre_send, s->n_pre_send, c, "send");
    check_moves(&r, s->pre_recv, s->n_pre_recv, c, "receive");
    check_moves(&r, s->post_send, s->n_post_send, c, "hand-back");
    check_moves(&r, s->post_recv, s->n_post_recv, c, "take-back");
    check_slots(&r, s->shared, s->n_shared, c, "shared");
    check_slots(&r, s->apply, s->n_apply, c, "step");
    if (!r.err) rec__net_get_batch(&r, c->n_dense, c->F, NULL, c->capacity, "the oracle's job has", &s->batch, sparse, room);
    for (int f = 0; !r.err && f < c->F; f++)
        if (s->batch.sparse[f].wide)
            r.err = rec_errorf(REC_EFORMAT, "CACHE_STEP frame: feature %d has 64-bit ids; cache slots are 32-bit", f);
    return finish(&r);
}
