/* Disaggregated training with the lookahead cache (cache.h): the planner on Bagpipe's worked
 * example and, simulated slot by slot, on random skewed batches for every policy; its
 * refusals; the frames of the embedding servers and the oracle; then servers, oracle and
 * trainer on loopback (`rectrain cluster`): the same losses as one process for every policy,
 * Bagpipe's critical path the smallest, bf16 tables on the servers, and live services that
 * refuse hostile frames. */
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <sys/stat.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "clirun.h"
#include "rectrain/cache.h"
#include "rectrain/ckpt.h"
#include "rectrain/core.h"
#include "rectrain/net.h"
#include "rectrain/train.h"

/* ---- the planner ------------------------------------------------------------------------------ */

/* A batch of `n` rows of F features, row r of feature f holding ids[f][r * L .. r * L + L). */
static void make_batch(rec_batch *b, int n, int F, int L, const int64_t *const *ids) {
    rec_batch_init(b, n, 1, F, L);
    b->n = n;
    for (int r = 0; r < n; r++) b->label[r] = 0, b->dense[r] = 0;
    for (int f = 0; f < F; f++) {
        rec_batch_reserve_nnz(b, f, (int64_t)n * L, 0);
        for (int r = 0; r <= n; r++) b->sparse[f].offsets[r] = (int64_t)r * L;
        for (int k = 0; k < n * L; k++) b->sparse[f].ids64[k] = ids[f][k];
    }
}

static int has(const rec_centry *e, int64_t n, int64_t row) {
    for (int64_t i = 0; i < n; i++)
        if (e[i].row == row) return 1;
    return 0;
}

/* Bagpipe Figure 6: L = 2, batches {3, 9}, {3, 4}, {3, 6}, {6, 1}. */
static void test_worked_example(void) {
    static const int64_t B[4][2] = {{3, 9}, {3, 4}, {3, 6}, {6, 1}};
    static const int64_t FETCH[4][2] = {{3, 9}, {4, -1}, {6, -1}, {1, -1}};
    static const int64_t EVICT[4][2] = {{9, -1}, {4, -1}, {3, -1}, {6, 1}};
    const int64_t rows = 10;
    rec_cplan_opts o = {REC_CACHE_BAGPIPE, 1, &rows, 8, 2, 1, NULL, NULL, 0};
    rec_cplan *p;
    CHECK(rec_cplan_init(&p, &o) == REC_OK, "%s", rec_errmsg());
    rec_batch b[4];
    for (int x = 0; x < 4; x++) {
        const int64_t *ids[1] = {B[x]};
        make_batch(&b[x], 1, 1, 2, ids);
    }
    int looked = 0, ok = 1;
    for (int x = 0; x < 4; x++) {
        while (looked < 4 && rec_cplan_pending(p) < rec_cplan_window(p)) rec_cplan_look(p, &b[looked++]);
        rec_cstep st;
        CHECK(rec_cplan_step(p, &b[x], &st) == REC_OK, "%s", rec_errmsg());
        const int nf = FETCH[x][1] < 0 ? 1 : 2, ne = EVICT[x][1] < 0 ? 1 : 2;
        ok &= st.batch == x && st.n_fetch == nf && st.n_evict == ne;
        for (int i = 0; i < nf; i++) ok &= has(st.fetch, st.n_fetch, FETCH[x][i]);
        for (int i = 0; i < ne; i++) ok &= has(st.evict, st.n_evict, EVICT[x][i]);
        CHECK(ok, "batch %d of Figure 6: %lld fetched, %lld evicted", x + 1, (long long)st.n_fetch, (long long)st.n_evict);
    }
    rec_cstep st;
    CHECK(rec_cplan_flush(p, &st) == REC_OK && st.n_evict == 0, "nothing left after Figure 6's last batch");
    for (int x = 0; x < 4; x++) rec_batch_free(&b[x]);
    rec_cplan_free(p);
}

/* Random batches whose ids follow a steep power law, as Criteo's do. */
enum { SIM_F = 3, SIM_B = 16, SIM_BATCHES = 60 };
static const int64_t SIM_ROWS[SIM_F] = {50, 1000, 7};

static void random_batches(rec_batch *b, uint64_t seed) {
    rec_rng g;
    rec_rng_seed(&g, seed, 0);
    int64_t *ids[SIM_F];
    for (int f = 0; f < SIM_F; f++) ids[f] = malloc(sizeof(int64_t) * SIM_B * 2);
    for (int x = 0; x < SIM_BATCHES; x++) {
        for (int f = 0; f < SIM_F; f++)
            for (int k = 0; k < SIM_B * 2; k++) {
                const double u = rec_rng_uniform(&g);
                ids[f][k] = (int64_t)((double)SIM_ROWS[f] * u * u * u * u);
            }
        make_batch(&b[x], SIM_B, SIM_F, 2, (const int64_t *const *)ids);
    }
    for (int f = 0; f < SIM_F; f++) free(ids[f]);
}

static int64_t key_of(int f, int64_t row) { return (int64_t)f * 100000 + row; }

/* Runs the planner over the batches and checks, slot by slot, what a trainer would see:
 * fetches go to empty slots freed `depth` batches before at least and never read a row
 * written back less than `depth` batches before; every id's slot holds its row when its batch
 * trains; evictions name the row the slot holds; Bagpipe evicts a row exactly when no batch
 * of the window uses it again; the flush leaves the cache empty. Returns the rows fetched. */
static int64_t simulate(const rec_cplan_opts *o, const rec_batch *b, int *bad) {
    rec_cplan *p;
    if (rec_cplan_init(&p, o)) {
        *bad = 1;
        return -1;
    }
    const int64_t C = o->capacity;
    int64_t *held = malloc(sizeof(int64_t) * (size_t)C), *free_at = calloc((size_t)C, sizeof(int64_t));
    int64_t *gone = malloc(sizeof(int64_t) * 300000);
    for (int64_t s = 0; s < C; s++) held[s] = -1;
    for (int i = 0; i < 300000; i++) gone[i] = -1000000;
    const int depth = o->policy == REC_CACHE_BAGPIPE ? o->depth : 1, L = o->lookahead;
    int looked = 0, stale = 0, wrong = 0, early = 0, twice = 0, window = 0;
    int64_t fetched = 0;
    for (int x = 0; x < SIM_BATCHES && !*bad; x++) {
        while (looked < SIM_BATCHES && rec_cplan_pending(p) < rec_cplan_window(p))
            if (rec_cplan_look(p, &b[looked++])) *bad = 1;
        rec_cstep st;
        if (rec_cplan_step(p, &b[x], &st)) {
            *bad = 1;
            break;
        }
        for (int64_t i = 0; i < st.n_fetch; i++) {
            const rec_centry *e = &st.fetch[i];
            const int64_t k = key_of(e->f, e->row);
            early += held[e->slot] != -1 || free_at[e->slot] > x;
            stale += gone[k] + depth > x;
            for (int64_t s = 0; s < C; s++) twice += held[s] == k;
            held[e->slot] = k;
        }
        fetched += st.n_fetch;
        for (int f = 0; f < SIM_F; f++)
            for (int64_t q = 0; q < rec_batch_nnz(&b[x], f); q++)
                wrong += held[st.slots[f][q]] != key_of(f, b[x].sparse[f].ids64[q]);
        for (int64_t i = 0; i < st.n_evict; i++) {
            const rec_centry *e = &st.evict[i];
            const int64_t k = key_of(e->f, e->row);
            wrong += held[e->slot] != k;
            held[e->slot] = -1;
            free_at[e->slot] = x + depth;
            gone[k] = x;
        }
        if (o->policy == REC_CACHE_BAGPIPE) /* evicted iff not used again in the window */
            for (int f = 0; f < SIM_F; f++)
                for (int64_t q = 0; q < rec_batch_nnz(&b[x], f); q++) {
                    const int64_t row = b[x].sparse[f].ids64[q];
                    int used = 0;
                    for (int y = x + 1; y < x + L && y < SIM_BATCHES && !used; y++)
                        for (int64_t t = 0; t < rec_batch_nnz(&b[y], f) && !used; t++) used = b[y].sparse[f].ids64[t] == row;
                    window += used == (gone[key_of(f, row)] == x);
                }
    }
    rec_cstep st;
    if (!*bad && !rec_cplan_flush(p, &st)) {
        for (int64_t i = 0; i < st.n_evict; i++) wrong += held[st.evict[i].slot] != key_of(st.evict[i].f, st.evict[i].row),
                                                 held[st.evict[i].slot] = -1;
        for (int64_t s = 0; s < C; s++) wrong += held[s] != -1;
    }
    rec_cplan_stats ps;
    rec_cplan_get_stats(p, &ps);
    *bad |= stale || wrong || early || twice || window || ps.peak_slots > C;
    if (*bad)
        fprintf(stderr, "  %s L %d depth %d: stale %d wrong %d early %d twice %d window %d peak %lld\n",
                rec_cache_policy_name(o->policy), L, depth, stale, wrong, early, twice, window, (long long)ps.peak_slots);
    free(held), free(free_at), free(gone);
    rec_cplan_free(p);
    return fetched;
}

static void test_invariants(void) {
    rec_batch b[SIM_BATCHES];
    random_batches(b, 7);
    int32_t hot_f[20];
    int64_t hot_row[20];
    for (int i = 0; i < 20; i++) hot_f[i] = i % 2, hot_row[i] = i / 2; /* the hottest ids of tables 0 and 1 */
    int bad = 0;
    rec_cplan_opts o = {REC_CACHE_NONE, SIM_F, SIM_ROWS, 400, 1, 1, NULL, NULL, 0};
    const int64_t none = simulate(&o, b, &bad);
    CHECK(!bad && none > 0, "no cache: every invariant holds (%s)", rec_errmsg());
    o.policy = REC_CACHE_LRU;
    bad = 0;
    const int64_t lru = simulate(&o, b, &bad);
    CHECK(!bad && lru < none, "LRU: every invariant holds, fewer fetches (%lld) than no cache (%lld)", (long long)lru,
          (long long)none);
    o.policy = REC_CACHE_STATIC, o.hot_f = hot_f, o.hot_row = hot_row, o.n_hot = 20;
    bad = 0;
    const int64_t stat = simulate(&o, b, &bad);
    CHECK(!bad && stat < none, "static: every invariant holds, fewer fetches (%lld)", (long long)stat);
    o = (rec_cplan_opts){REC_CACHE_BAGPIPE, SIM_F, SIM_ROWS, 400, 1, 1, NULL, NULL, 0};
    static const int LD[][2] = {{1, 1}, {2, 1}, {2, 2}, {5, 3}, {8, 8}, {30, 4}};
    int64_t prev = INT64_MAX;
    for (size_t i = 0; i < sizeof LD / sizeof LD[0]; i++) {
        o.lookahead = LD[i][0], o.depth = LD[i][1];
        bad = 0;
        const int64_t n = simulate(&o, b, &bad);
        CHECK(!bad && n <= prev, "bagpipe L %d depth %d: every invariant holds; %lld fetches, no more than a shorter "
              "window's", o.lookahead, o.depth, (long long)n);
        if (LD[i][0] == 1) CHECK(n == none, "lookahead 1 is no cache (%lld vs %lld)", (long long)n, (long long)none);
        prev = n;
    }
    /* a window over every batch fetches each distinct row once */
    o.lookahead = SIM_BATCHES, o.depth = 4, o.capacity = 1100;
    bad = 0;
    const int64_t all = simulate(&o, b, &bad);
    int64_t distinct = 0;
    for (int f = 0; f < SIM_F; f++)
        for (int64_t r = 0; r < SIM_ROWS[f]; r++) {
            int used = 0;
            for (int x = 0; x < SIM_BATCHES && !used; x++)
                for (int64_t q = 0; q < rec_batch_nnz(&b[x], f) && !used; q++) used = b[x].sparse[f].ids64[q] == r;
            distinct += used;
        }
    CHECK(!bad && all == distinct, "a window of every batch fetches each of the %lld rows once (%lld)", (long long)distinct,
          (long long)all);
    for (int x = 0; x < SIM_BATCHES; x++) rec_batch_free(&b[x]);
}

static void test_planner_refusals(void) {
    const int64_t rows[1] = {10};
    rec_cplan *p = NULL;
    rec_cplan_opts o = {9, 1, rows, 8, 2, 1, NULL, NULL, 0};
    CHECK_ERR(rec_cplan_init(&p, &o), REC_EINVAL, "bagpipe, none, static or lru");
    o.policy = REC_CACHE_BAGPIPE, o.capacity = 0;
    CHECK_ERR(rec_cplan_init(&p, &o), REC_EINVAL, "--cache-rows");
    o.capacity = 8, o.lookahead = 0;
    CHECK_ERR(rec_cplan_init(&p, &o), REC_EINVAL, "--lookahead");
    o.lookahead = 2, o.depth = 3;
    CHECK_ERR(rec_cplan_init(&p, &o), REC_EINVAL, "before its last write-back");
    o.depth = 1, o.policy = REC_CACHE_STATIC, o.n_hot = 1;
    const int32_t hf = 0;
    const int64_t hr = 10;
    o.hot_f = &hf, o.hot_row = &hr;
    CHECK_ERR(rec_cplan_init(&p, &o), REC_EINVAL, "outside the tables");
    o = (rec_cplan_opts){REC_CACHE_BAGPIPE, 1, rows, 3, 2, 1, NULL, NULL, 0};
    CHECK(rec_cplan_init(&p, &o) == REC_OK, "%s", rec_errmsg());
    const int64_t bad_ids[4] = {1, 12, 0, 0}, many[4] = {1, 2, 3, 4};
    rec_batch b;
    const int64_t *ids[1] = {bad_ids};
    make_batch(&b, 2, 1, 2, ids);
    CHECK_ERR(rec_cplan_look(p, &b), REC_EINVAL, "row 0: table 0 has id 12, outside its 10 rows");
    rec_batch_free(&b);
    ids[0] = many;
    make_batch(&b, 2, 1, 2, ids);
    CHECK(rec_cplan_look(p, &b) == REC_OK, "%s", rec_errmsg());
    rec_cstep st;
    rec_batch other;
    make_batch(&other, 1, 1, 2, ids);
    rec_status s = rec_cplan_step(p, &other, &st);
    CHECK_ERR(s, REC_EINVAL, "the data changed between the two reads");
    s = rec_cplan_step(p, &b, &st);
    CHECK_ERR(s, REC_EINVAL, "too small for batch 0 (4 distinct rows");
    rec_batch_free(&b);
    rec_batch_free(&other);
    rec_cplan_free(p);
}

/* ---- the frames ------------------------------------------------------------------------------- */

/* An 8-byte aligned copy of w's frame. */
static uint8_t *aligned(const rec_wbuf *w) {
    uint8_t *p = aligned_alloc(64, (w->len + 64) / 64 * 64);
    memcpy(p, w->p, w->len);
    return p;
}

/* h, its digest made, as an EMB_HELLO frame: an aligned copy (free it). */
static uint8_t *hello_frame(rec_wbuf *w, rec_net_emb_hello *h) {
    h->digest = rec_net_emb_hello_digest(h);
    rec_frame_begin(w, REC_MSG_EMB_HELLO, 0, 0);
    rec_net_emb_hello_encode(w, h);
    rec_frame_end(w);
    return aligned(w);
}

static void test_frames(void) {
    const int64_t rows[2] = {10, 7};
    rec_wbuf w = {0};
    /* EMB_HELLO: round trip, corrupt digest, every truncation */
    rec_net_emb_hello h = {0, 1, 2, 2, 4, 2, 0.5f, 99, rows, 0, 0, 0, 0, 0}, g;
    h.digest = rec_net_emb_hello_digest(&h);
    rec_frame_begin(&w, REC_MSG_EMB_HELLO, 0, 0);
    rec_net_emb_hello_encode(&w, &h);
    CHECK(rec_frame_end(&w) == REC_OK, "%s", rec_errmsg());
    uint8_t *m = aligned(&w);
    const size_t body = w.len - REC_NET_HEAD;
    CHECK(rec_net_emb_hello_decode(m + REC_NET_HEAD, body, &g) == REC_OK && g.shard == 1 && g.rows[1] == 7 &&
          g.seed == 99, "EMB_HELLO round trip: %s", rec_errmsg());
    int refused = 0;
    for (size_t n = 0; n < body; n++) refused += rec_net_emb_hello_decode(m + REC_NET_HEAD, n, &g) == REC_EFORMAT;
    CHECK(refused == (int)body, "every truncated EMB_HELLO is refused (%d of %zu)", refused, body);
    m[REC_NET_HEAD + 12] ^= 1; /* the table count, under the digest */
    CHECK(rec_net_emb_hello_decode(m + REC_NET_HEAD, body, &g) == REC_EFORMAT, "a corrupt EMB_HELLO is refused");
    free(m);
    /* first-order tables: in the digest (other tables), round trip, a flag other than 0 or 1 refused */
    const uint64_t plain = h.digest;
    h.lin = 1, h.lin_seed = 5;
    m = hello_frame(&w, &h);
    CHECK(h.digest != plain && rec_net_emb_hello_decode(m + REC_NET_HEAD, w.len - REC_NET_HEAD, &g) == REC_OK &&
          g.lin == 1 && g.lin_seed == 5, "EMB_HELLO with first-order tables: %s", rec_errmsg());
    free(m);
    h.lin = 2;
    m = hello_frame(&w, &h);
    CHECK_ERR(rec_net_emb_hello_decode(m + REC_NET_HEAD, w.len - REC_NET_HEAD, &g), REC_EFORMAT, "first-order flag 2");
    free(m);
    h.lin = 0, h.lin_seed = 0, h.digest = plain;
    /* bf16 tables (version 4): in the digest with their rounding, round trip; flags out of
     * range refused (a rounding without bf16 tables too) */
    h.bf16 = 1, h.rounding = 1;
    m = hello_frame(&w, &h);
    const uint64_t nearest = h.digest;
    CHECK(h.digest != plain && rec_net_emb_hello_decode(m + REC_NET_HEAD, w.len - REC_NET_HEAD, &g) == REC_OK &&
          g.bf16 == 1 && g.rounding == 1, "EMB_HELLO with bf16 tables: %s", rec_errmsg());
    free(m);
    h.rounding = 0;
    CHECK(rec_net_emb_hello_digest(&h) != nearest, "the rounding of bf16 tables is in the digest");
    static const int32_t BAD[3][2] = {{2, 0}, {1, 2}, {0, 1}};
    for (int k = 0; k < 3; k++) {
        h.bf16 = BAD[k][0], h.rounding = BAD[k][1];
        m = hello_frame(&w, &h);
        CHECK_ERR(rec_net_emb_hello_decode(m + REC_NET_HEAD, w.len - REC_NET_HEAD, &g), REC_EFORMAT, "bf16 flag");
        free(m);
    }
    h.bf16 = 0, h.rounding = 0, h.digest = plain;
    /* rows of bf16 tables travel as their bits, padded to 8 bytes before the state */
    {
        const rec_centry e3[3] = {{0, 0, 1}, {1, 1, 3}, {2, 0, 5}};
        const uint16_t v16[3 * 5] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
        const float st3[3] = {0.5f, 1.5f, 2.5f};
        h.bf16 = 1, h.lin = 1; /* rows of E + 1 = 5 values: 30 bytes, 2 of padding */
        const rec_net_rows q3 = {3, e3, NULL, st3, v16};
        rec_net_rows r3;
        rec_frame_begin(&w, REC_MSG_EMB_PUT, 0, 0);
        rec_net_rows_encode(&w, &q3, 1, 5, 1);
        rec_frame_end(&w);
        m = aligned(&w);
        CHECK(w.len == REC_NET_HEAD + 8 + 3 * 16 + 32 + 3 * 4 &&
                  rec_net_rows_decode(m + REC_NET_HEAD, w.len - REC_NET_HEAD, "EMB_PUT", 1, 1, &h, 1, &r3) == REC_OK &&
                  r3.values == NULL && r3.values16[14] == 15 && r3.state[2] == 2.5f,
              "EMB_PUT of bf16 rows: %zu bytes, %s", w.len, rec_errmsg());
        CHECK_ERR(rec_net_rows_decode(m + REC_NET_HEAD, w.len - REC_NET_HEAD - 4, "EMB_PUT", 1, 1, &h, 1, &r3), REC_EFORMAT,
                  "truncated");
        free(m);
        h.bf16 = 0, h.lin = 0;
    }
    /* EMB_GET / EMB_PUT: rows of another shard are refused */
    const rec_centry e[2] = {{0, 0, 3}, {1, 1, 5}}, off[1] = {{0, 0, 4}};
    const float vals[2 * 4] = {1, 2, 3, 4, 5, 6, 7, 8}, st[2] = {9, 10};
    rec_net_rows q = {2, e, vals, st, NULL}, r;
    rec_frame_begin(&w, REC_MSG_EMB_PUT, 0, 0);
    rec_net_rows_encode(&w, &q, 1, 4, 1);
    rec_frame_end(&w);
    m = aligned(&w);
    CHECK(rec_net_rows_decode(m + REC_NET_HEAD, w.len - REC_NET_HEAD, "EMB_PUT", 1, 1, &h, 1, &r) == REC_OK &&
          r.n == 2 && r.values[7] == 8 && r.state[1] == 10, "EMB_PUT round trip: %s", rec_errmsg());
    CHECK_ERR(rec_net_rows_decode(m + REC_NET_HEAD, w.len - REC_NET_HEAD - 4, "EMB_PUT", 1, 1, &h, 1, &r), REC_EFORMAT,
              "truncated");
    h.lin = 1; /* the same bytes as rows of E + 1 values (each with its first-order value) and no state */
    CHECK(rec_net_rows_decode(m + REC_NET_HEAD, w.len - REC_NET_HEAD, "EMB_PUT", 1, 1, &h, 0, &r) == REC_OK &&
          r.values[5] == 6 && r.state == NULL, "EMB_PUT of rows with first-order values: %s", rec_errmsg());
    CHECK_ERR(rec_net_rows_decode(m + REC_NET_HEAD, w.len - REC_NET_HEAD, "EMB_PUT", 1, 1, &h, 1, &r), REC_EFORMAT,
              "the optimizer state");
    h.lin = 0;
    free(m);
    q = (rec_net_rows){1, off, NULL, NULL, NULL};
    rec_frame_begin(&w, REC_MSG_EMB_GET, 0, 0);
    rec_net_rows_encode(&w, &q, 1, 4, 1);
    rec_frame_end(&w);
    m = aligned(&w);
    CHECK_ERR(rec_net_rows_decode(m + REC_NET_HEAD, w.len - REC_NET_HEAD, "EMB_GET", 1, 0, &h, 1, &r), REC_EFORMAT,
              "not on server 1 of 2");
    free(m);
    /* CACHE_INFO and CACHE_STEP */
    rec_net_cache_info ci = {2, 1, REC_CACHE_BAGPIPE, 4, 2, 2, 0, 16, 2, 9, rows, 3, 5, 1}, cd;
    rec_frame_begin(&w, REC_MSG_CACHE_INFO, 0, 0);
    rec_net_cache_info_encode(&w, &ci);
    rec_frame_end(&w);
    m = aligned(&w);
    CHECK(rec_net_cache_info_decode(m + REC_NET_HEAD, w.len - REC_NET_HEAD, &cd) == REC_OK && cd.capacity == 16 &&
          cd.rows[1] == 7 && cd.batches == 9 && cd.trainers == 2 && cd.table0 == 3 && cd.tables == 5 && cd.shuffled == 1,
          "CACHE_INFO round trip: %s", rec_errmsg());
    free(m);
    ci.table0 = 4; /* tables 4 and 5 of 5 */
    rec_frame_begin(&w, REC_MSG_CACHE_INFO, 0, 0);
    rec_net_cache_info_encode(&w, &ci);
    rec_frame_end(&w);
    m = aligned(&w);
    CHECK_ERR(rec_net_cache_info_decode(m + REC_NET_HEAD, w.len - REC_NET_HEAD, &cd), REC_EFORMAT, "tables 4 to 5 of 5");
    free(m);
    ci.table0 = 0, ci.tables = 0;
    const int64_t s0[4] = {0, 15, 3, 3}, s1[4] = {2, 2, 1, 0};
    const int64_t *ids[2] = {s0, s1};
    rec_batch b;
    make_batch(&b, 2, 2, 2, ids);
    rec_batch_fit_ids(&b, (const int64_t[]){16, 16});
    const rec_centry fe[1] = {{15, 0, 9}}, ev[1] = {{3, 1, 6}};
    const rec_cmove mv[1] = {{3, 1}};
    const int32_t sh[2] = {3, 15};
    const rec_net_cache_step out = {.n_fetch = 1, .n_evict = 1, .n_pre_send = 1, .n_shared = 2, .n_apply = 2,
                                    .fetch = fe, .evict = ev, .pre_send = mv, .shared = sh, .apply = sh, .batch = b};
    rec_frame_begin(&w, REC_MSG_CACHE_STEP, 0, 0);
    rec_net_cache_step_encode(&w, &out);
    rec_frame_end(&w);
    m = aligned(&w);
    rec_net_cache_step cs;
    rec_jagged sp[2];
    rec_net_room room = {0};
    const size_t sb = w.len - REC_NET_HEAD;
    CHECK(rec_net_cache_step_decode(m + REC_NET_HEAD, sb, &ci, &cs, sp, &room) == REC_OK && cs.n_fetch == 1 &&
          cs.evict[0].row == 6 && cs.batch.n == 2 && cs.batch.sparse[0].ids32[1] == 15 && cs.pre_send[0].peer == 1 &&
          cs.shared[1] == 15,
          "CACHE_STEP round trip: %s", rec_errmsg());
    refused = 0;
    for (size_t n = 0; n < sb; n++) refused += rec_net_cache_step_decode(m + REC_NET_HEAD, n, &ci, &cs, sp, &room) == REC_EFORMAT;
    CHECK(refused == (int)sb, "every truncated CACHE_STEP is refused (%d of %zu)", refused, sb);
    ci.rank = 1; /* the move is now to itself */
    CHECK_ERR(rec_net_cache_step_decode(m + REC_NET_HEAD, sb, &ci, &cs, sp, &room), REC_EFORMAT, "not another of the 2 trainers");
    ci.rank = 0, ci.capacity = 15; /* slot 15 is now outside the cache */
    CHECK_ERR(rec_net_cache_step_decode(m + REC_NET_HEAD, sb, &ci, &cs, sp, &room), REC_EFORMAT, "outside the cache");
    rec_net_room_free(&room);
    free(m);
    rec_batch_free(&b);
    rec_wbuf_free(&w);
}

/* ---- services on loopback ------------------------------------------------------------------------ */

static int port;

#ifdef REC_SANITIZED
enum { SYN_ROWS = 4000, STEPS2 = 50 };
#else
enum { SYN_ROWS = 12000, STEPS2 = 200 };
#endif

/* A cluster config training `data` with configs/MODEL.json for `epochs` from base port p, with
 * `extra` keys. */
static void write_cluster_model(const char *name, const char *model, const char *data, int epochs, int p,
                                const char *extra) {
    FILE *f = fopen(path(name), "w");
    if (!f) return;
    fprintf(f, "{\"format\": \"rectrain-cluster\", \"version\": 1, \"data\": \"%s\", \"model\": "
               "\"%s/configs/%s.json\", \"batch\": 256, \"epochs\": %d, \"shuffle\": false, \"embservers\": 2, "
               "\"threads\": 1, \"base_port\": %d%s}\n", data, src, model, epochs, p, extra);
    fclose(f);
}

static void write_cluster_of(const char *name, const char *data, int epochs, int p, const char *extra) {
    write_cluster_model(name, "dlrm_small", data, epochs, p, extra);
}

static void write_cluster(const char *name, const char *extra) {
    write_cluster_of(name, "syn/train.rshard", 1, port, extra);
}

/* The losses of one process, then of the cluster for every policy: the same bits. */
static void test_same_training(void) {
    char syn[600];
    snprintf(syn, sizeof syn, "%s/syn", dir);
    mkdir(syn, 0755);
    CHECK(rec_synth_dataset(syn, SYN_ROWS, 0.002, 2, NULL) == REC_OK, "%s", rec_errmsg());
    CHECK(run("train --data syn/train.rshard --config %s/configs/dlrm_small.json --batch 256 --epochs 1 --no-shuffle "
              "--threads 1 --loss-log local.loss --ckpt local_ck", src) == 0, "%s", out);
    write_cluster("c.json", ", \"cache\": {\"rows\": 6000}");
    static const char *const POL[] = {"bagpipe", "none", "static", "lru"};
    double crit[4];
    for (int k = 0; k < 4; k++) {
        char loss[64];
        snprintf(loss, sizeof loss, "%s.loss", POL[k]);
        CHECK(run("cluster c.json --policy %s --loss-log %s --json%s", POL[k], loss, k ? "" : " --ckpt bp_ck") == 0, "%s",
              out);
        CHECK(same_file("local.loss", loss), "the %s cache trains as one process does (loss logs differ)", POL[k]);
        const char *j = strstr(out, "\"fetch_crit_bytes\": ");
        crit[k] = j ? atof(j + 20) : -1;
    }
    write_cluster("cd.json", ", \"cache\": {\"rows\": 6000}, \"durable\": {\"dir\": \"snaps\", \"every\": 10}");
    CHECK(run("cluster cd.json --loss-log durable.loss") == 0, "%s", out);
    char ls[600];
    snprintf(ls, sizeof ls, "ls %s/snaps/server-1/*.rsnap >/dev/null 2>&1", dir);
    CHECK(same_file("local.loss", "durable.loss") && system(ls) == 0,
          "a durable cluster trains alike and its servers keep snapshots: %s", out);
    CHECK(crit[0] >= 0 && crit[0] < crit[1] && crit[0] < crit[2] && crit[0] < crit[3],
          "bagpipe's critical-path bytes per step are the fewest: %.0f vs %.0f, %.0f, %.0f", crit[0], crit[1], crit[2],
          crit[3]);
    CHECK(strstr(out, "embserver: stopped after") != NULL, "the cluster stops its services: %s", out);
    /* three oracles, each planning a third of the tables into a third of the cache (Bagpipe
     * §3.4, partitioned by table): the same bits again */
    write_cluster("cp.json", ", \"oracles\": 3, \"cache\": {\"rows\": 9000}");
    CHECK(run("cluster cp.json --loss-log parts.loss --ckpt parts_ck") == 0, "%s", out);
    CHECK(same_file("local.loss", "parts.loss"), "three oracles split by table train as one process does: %s", out);
    /* the models they leave, tables gathered from the servers: every parameter has the same bits */
    CHECK(run("export --ckpt local_ck --out local_npy") == 0, "%s", out);
    static const char *const CK[] = {"bp", "parts"};
    for (int k = 0; k < 2; k++) {
        CHECK(run("export --ckpt %s_ck --out %s_npy", CK[k], CK[k]) == 0, "%s", out);
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "cd %s && n=0; for f in local_npy/*.npy; do cmp -s $f %s_npy/${f#local_npy/} || exit 1; "
                 "n=$((n+1)); done; echo $n", dir, CK[k]);
        CHECK(check_capture(cmd, out, sizeof out) == 0 && atoi(out) >= 20, "the final model (%s) equals one process's, "
              "parameter by parameter (%s)", CK[k], out);
    }
    /* a checkpoint that exists, by --ckpt or the config's "ckpt": refused without --overwrite,
     * before any process starts; inspect tells the model's own story (file order here) */
    write_cluster("ck.json", ", \"cache\": {\"rows\": 6000}, \"ckpt\": \"bp_ck\"");
    const long size = file_size("bp_ck/model.rckpt");
    CHECK(run("inspect bp_ck/model.rckpt") == 0 && strstr(out, "(.rckpt version 5,") && !strstr(out, "version-1") &&
              strstr(out, "order      file order") && strstr(out, "data       not recorded (saved by a trainer of "
                                                                    "disaggregated training"), "inspect: %s", out);
    static const char *const AGAIN[][2] = {{"c.json --ckpt bp_ck", "--ckpt"}, {"ck.json", "$.ckpt"}};
    for (int k = 0; k < 2; k++) {
        CHECK(run("cluster %s --loss-log again.loss", AGAIN[k][0]) == 1 &&
                  strstr(out, "rectrain cluster: bp_ck/model.rckpt exists (model dlrm_small at step ") &&
                  strstr(out, "): add --overwrite to replace it (or give --ckpt another directory)") &&
                  !strstr(out, "cluster: 2 embedding servers") && file_size("again.loss") < 0 &&
                  file_size("bp_ck/model.rckpt") == size,
              "an existing checkpoint by %s is refused: %s", AGAIN[k][1], out);
    }
    CHECK(run("cluster ck.json --overwrite --loss-log again.loss") == 0 && same_file("local.loss", "again.loss") &&
              strstr(out, "saved the whole model"), "--overwrite replaces it: %s", out);
    /* --resume continues the job whose checkpoint it is: not refused (here the trainer finds
     * no services, after the check) */
    CHECK(run("train --oracle-cacher tcp://127.0.0.1:9 --embservers tcp://127.0.0.1:9 --peer-timeout 1 --config "
              "%s/configs/dlrm_small.json --ckpt bp_ck --resume", src) == 1 && !strstr(out, "add --overwrite") &&
              file_size("bp_ck/model.rckpt") == size, "--resume with its checkpoint: %s", out);
}

/* Do two exports hold the same bits, file by file (at least `least` files), and does the second
 * hold `must`? */
static int same_exports(const char *a, const char *b, int least, const char *must) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cd %s && { test -f %s/%s || exit 1; }; n=0; for f in %s/*.npy; do cmp -s $f %s/${f#%s/} || exit 1; "
             "n=$((n+1)); done; test $n -ge %d", dir, b, must, a, b, a, least);
    return system(cmd) == 0;
}

/* Do checkpoints A and B (folders) hold the same tensors bit for bit, optimizer state included
 * (export writes the parameters only), `must` among them? */
static int same_tensors(const char *a, const char *b, const char *must) {
    char pa[700], pb[700];
    snprintf(pa, sizeof pa, "%s/%s/model.rckpt", dir, a), snprintf(pb, sizeof pb, "%s/%s/model.rckpt", dir, b);
    rec_ckpt_info ia = {0};
    rec_ckpt_reader *ra = NULL, *rb = NULL;
    int ok = rec_ckpt_inspect(pa, 0, &ia) == REC_OK && rec_ckpt_reader_open(&ra, pa) == REC_OK &&
             rec_ckpt_reader_open(&rb, pb) == REC_OK, found = 0;
    for (int i = 0; ok && i < ia.n_tensors; i++) {
        const rec_ckpt_tensor_info *t = &ia.tensors[i];
        const int64_t n = (int64_t)(t->bytes / 4);
        const float *x, *y;
        ok = rec_ckpt_reader_tensor(ra, t->name, n, &x) == REC_OK && rec_ckpt_reader_tensor(rb, t->name, n, &y) == REC_OK &&
             memcmp(x, y, t->bytes) == 0;
        found |= !strcmp(t->name, must);
    }
    rec_ckpt_reader_close(ra), rec_ckpt_reader_close(rb);
    rec_ckpt_info_free(&ia);
    return ok && found;
}

/* DeepFM and Wide&Deep: their first-order tables live with the rows, on the servers and in the
 * cache. One trainer trains as one process does, bitwise (durably too: the servers' undo and
 * snapshots hold the first-order values), and the model it leaves, gathered from the servers,
 * is one process's, lin.f.weight and its state included. */
static void test_first_order(void) {
    static const char *const M[] = {"deepfm_small", "wide_deep_small"};
    for (int k = 0; k < 2; k++) {
        CHECK(run("train --data syn/train.rshard --config %s/configs/%s.json --batch 256 --epochs 1 --no-shuffle "
                  "--threads 1 --loss-log %s.loss --ckpt %s_ck", src, M[k], M[k], M[k]) == 0, "%s", out);
        write_cluster_model("fo.json", M[k], "syn/train.rshard", 1, port, ", \"cache\": {\"rows\": 6000}");
        CHECK(run("cluster fo.json --loss-log fo.loss --ckpt fo_%d_ck", k) == 0, "%s", out);
        char loss[64];
        snprintf(loss, sizeof loss, "%s.loss", M[k]);
        CHECK(same_file(loss, "fo.loss"), "%s on the cache trains as one process does (loss logs differ)", M[k]);
        CHECK(run("export --ckpt %s_ck --out %s_npy", M[k], M[k]) == 0 && run("export --ckpt fo_%d_ck --out fo_%d_npy", k, k) == 0,
              "%s", out);
        char a[64], b[64];
        snprintf(a, sizeof a, "%s_npy", M[k]), snprintf(b, sizeof b, "fo_%d_npy", k);
        CHECK(same_exports(a, b, 20, "lin.0.weight.npy"), "%s's model from the servers equals one process's, its "
              "first-order tables included", M[k]);
        snprintf(a, sizeof a, "%s_ck", M[k]), snprintf(b, sizeof b, "fo_%d_ck", k);
        CHECK(same_tensors(a, b, "opt.lin.0"), "%s's checkpoint from the servers holds one process's tensors, the "
              "first-order tables' optimizer state included", M[k]);
    }
    write_cluster_model("fod.json", "deepfm_small", "syn/train.rshard", 1, port,
                        ", \"cache\": {\"rows\": 6000}, \"durable\": {\"dir\": \"fo_snaps\", \"every\": 10}");
    CHECK(run("cluster fod.json --loss-log fod.loss --ckpt fod_ck") == 0 && same_file("deepfm_small.loss", "fod.loss"),
          "a durable DeepFM cluster trains alike: %s", out);
    CHECK(run("export --ckpt fod_ck --out fod_npy") == 0 && same_exports("deepfm_small_npy", "fod_npy", 20, "lin.0.weight.npy"),
          "a durable DeepFM cluster's model is one process's: %s", out);
}

/* Oracles partitioned by table that do not make one job: ranges out of order, tables missing,
 * other data; and --tables out of the data's. */
static void test_partition_refusals(void) {
    const int p = port + 100;
    const char *O = "oracle --data syn/train.rshard --cache-rows 5000 --shuffle 0";
    pid_t a = spawn("%s --tables 0:13 --batch 256 --listen tcp://127.0.0.1:%d 2>pa.log", O, p);
    pid_t b = spawn("%s --tables 13:26 --batch 256 --listen tcp://127.0.0.1:%d 2>pb.log", O, p + 1);
    pid_t c = spawn("%s --tables 13:26 --batch 128 --listen tcp://127.0.0.1:%d 2>pc.log", O, p + 2);
    pid_t es = spawn("embserver --listen tcp://127.0.0.1:%d 2>pe.log", p + 3);
    char tr[512];
    snprintf(tr, sizeof tr, "train --config %s/configs/dlrm_small.json --embservers tcp://127.0.0.1:%d --peer-timeout 5 "
             "--oracle-cacher ", src, p + 3);
    CHECK(run("%stcp://127.0.0.1:%d,tcp://127.0.0.1:%d", tr, p + 1, p) == 1 &&
          strstr(out, "plans tables 13 to 25, and the next of the job's 26 are 0 on"), "out of order: %s", out);
    CHECK(run("%stcp://127.0.0.1:%d", tr, p) == 1 && strstr(out, "plan tables 0 to 12 of 26: start one for the others "
          "(oracle --tables 13:26)"), "a range missing: %s", out);
    CHECK(run("%stcp://127.0.0.1:%d,tcp://127.0.0.1:%d --resume", tr, p, p + 1) == 1 &&
          strstr(out, "has no committed step to resume from (was the job run with --durable?)"),
          "--resume of a job never committed: %s", out);
    CHECK(run("%stcp://127.0.0.1:%d,tcp://127.0.0.1:%d", tr, p, p + 2) == 1 && strstr(out, "plan different jobs") &&
          strstr(out, "batches of 256 and 128"), "another batch size: %s", out);
    kill(a, SIGTERM), kill(b, SIGTERM), kill(c, SIGTERM), kill(es, SIGTERM);
    waitpid(a, NULL, 0), waitpid(b, NULL, 0), waitpid(c, NULL, 0), waitpid(es, NULL, 0);
    CHECK(run("%s --tables 20:30 --listen tcp://127.0.0.1:%d", O, p) == 1 &&
          strstr(out, "--tables 20:30: syn/train.rshard has tables 0 to 25"), "%s", out);
    CHECK(run("%s --tables 5:5", O) == 2 && strstr(out, "0 <= LO < HI"), "%s", out);
    CHECK(run("%s --tables 2/2", O) == 2 && strstr(out, "0 <= J < K"), "%s", out);
    CHECK(run("%s --tables 1-3", O) == 2 && strstr(out, "or J/K"), "%s", out);
}

/* The worst relative difference of two loss logs over their first n losses (INFINITY when one
 * is shorter). */
static double loss_gap(const char *a, const char *b, int n) {
    FILE *fa = fopen(path(a), "r"), *fb = fopen(path(b), "r");
    double worst = fa && fb ? 0 : INFINITY;
    for (int i = 0; i < n && worst < INFINITY; i++) {
        long long s1, s2;
        double x, y;
        if (fscanf(fa, "%lld %lf", &s1, &x) != 2 || fscanf(fb, "%lld %lf", &s2, &y) != 2) worst = INFINITY;
        else if (fabs(x - y) / fabs(x) > worst || x != x || y != y) worst = fabs(x - y) / fabs(x);
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return worst;
}

/* The relative difference of two loss logs' mean losses over their first n (INFINITY when one
 * is shorter). */
static double mean_gap(const char *a, const char *b, int n) {
    FILE *fa = fopen(path(a), "r"), *fb = fopen(path(b), "r");
    double sa = 0, sb = 0;
    int ok = fa && fb;
    for (int i = 0; ok && i < n; i++) {
        long long s1, s2;
        double x, y;
        ok = fscanf(fa, "%lld %lf", &s1, &x) == 2 && fscanf(fb, "%lld %lf", &s2, &y) == 2;
        sa += x, sb += y;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    const double d = fabs(sa - sb) / fabs(sa);
    return ok && d == d ? d : INFINITY;
}

/* Steps a row-wise Adagrad run of two trainers is held to one process's loss, step by step:
 * after them the normalised first step of rows whose gradients cancel amplifies the sums'
 * order (test_dist.c's RW_STEPS says how), so the rest is held by the mean loss. */
enum { RW_STEPS = 20 };
/* Steps of the two-trainer DeepFM and Wide&Deep runs (the DLRM's hold the long run) */
enum { FM_STEPS = STEPS2 / 2 };

/* Raw TSV through the data processors: the oracle sends every piece to a prep-worker (the
 * cluster starts it) and the trainer's losses are one process's on the same TSV. */
static void test_data_processors(void) {
    write_spec("spec3.json", 40, 30);
    CHECK(run("gen --rows %d --out raw.tsv", SYN_ROWS) == 0, "%s", out);
    CHECK(run("train --data raw.tsv --spec spec3.json --config %s/configs/dlrm_small.json --batch 256 --epochs 1 "
              "--no-shuffle --threads 1 --loss-log raw_one.loss", src) == 0, "%s", out);
    FILE *f = fopen(path("c3.json"), "w");
    if (f) {
        fprintf(f, "{\"format\": \"rectrain-cluster\", \"version\": 1, \"data\": \"raw.tsv\", \"spec\": \"spec3.json\", "
                   "\"prep_workers\": 1, \"model\": \"%s/configs/dlrm_small.json\", \"batch\": 256, \"shuffle\": false, "
                   "\"base_port\": %d, \"peer_timeout\": 60, \"cache\": {\"rows\": 6000}}\n", src, port + 80);
        fclose(f);
    }
    CHECK(run("cluster c3.json --loss-log raw_cl.loss") == 0, "%s", out);
    const char *pw = strstr(out, "prep-worker: stopped after ");
    CHECK(same_file("raw_one.loss", "raw_cl.loss") && pw && atoi(pw + 27) > 0,
          "raw data preprocessed by a data processor trains as one process does: %s", out);
    /* RAP's raw columns (.rraw) with the spec, and the shard prepped from them: the same losses */
    CHECK(run("prep --raw --in raw.tsv --out raw.rraw") == 0 && run("prep --spec spec3.json --in raw.tsv --out raw.rshard") == 0,
          "%s", out);
    static const char *const FROM[2][2] = {{"raw.rraw", ", \"spec\": \"spec3.json\""}, {"raw.rshard", ""}};
    for (int k = 0; k < 2; k++) {
        if ((f = fopen(path("c4.json"), "w"))) {
            fprintf(f, "{\"format\": \"rectrain-cluster\", \"version\": 1, \"data\": \"%s\"%s, \"model\": "
                       "\"%s/configs/dlrm_small.json\", \"batch\": 256, \"shuffle\": false, \"base_port\": %d, "
                       "\"peer_timeout\": 60, \"cache\": {\"rows\": 6000}}\n", FROM[k][0], FROM[k][1], src, port + 85);
            fclose(f);
        }
        char log[32];
        snprintf(log, sizeof log, "raw_cl%d.loss", k);
        CHECK(run("cluster c4.json --loss-log %s%s", log, k ? " --ckpt raw_ck --npy raw_npy --eval raw.rshard --json" : "") == 0,
              "%s", out);
        CHECK(same_file("raw_one.loss", log), "a disaggregated job from %s trains as one process does on the TSV", FROM[k][0]);
    }
    /* --eval: trainer 0 scores the file with the whole model at the end, as one process does */
    const char *at = strstr(out, "\"auc\": "); /* the services' last words follow the trainer's JSON */
    const double auc = at ? atof(at + 7) : -1;
    CHECK(run("train --data raw.rshard --config %s/configs/dlrm_small.json --batch 256 --epochs 1 --no-shuffle --threads 1 "
              "--eval raw.rshard --json", src) == 0, "%s", out);
    CHECK(auc > 0.5 && auc == json_num("auc"), "a disaggregated job's --eval AUC %.6f is one process's %.6f", auc,
          json_num("auc"));
    write_spec("spec5.json", 40, 31); /* other table sizes */
    CHECK(run("prep --spec spec5.json --in raw.tsv --out other.rshard") == 0, "%s", out);
    CHECK(run("cluster c4.json --eval other.rshard") != 0 && strstr(out, "other.rshard and the oracle's job") &&
          strstr(out, "different schemas"), "--eval data of another schema is refused, naming both:\n%s", out);
    CHECK(run("cluster c4.json --eval nothere.rshard") == 2 && strstr(out, "--eval nothere.rshard: cannot be read"),
          "an --eval file that is not there is refused before any process starts:\n%s", out);
    /* --npy: the whole model from the servers, as export writes it from the job's --ckpt */
    CHECK(run("export --ckpt raw_ck --out raw_x") == 0, "%s", out);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cd %s && test -s raw_npy/emb.0.weight.npy && for f in raw_x/*; do cmp -s $f raw_npy/${f#raw_x/} "
             "|| exit 1; done", dir);
    CHECK(system(cmd) == 0, "a disaggregated job's --npy writes what export of its --ckpt writes");
    CHECK(run("oracle --data syn/train.rshard --cache-rows 99 --workers tcp://127.0.0.1:1 --listen tcp://127.0.0.1:%d",
              port + 81) == 1 && strstr(out, "is a shard already"), "%s", out);
    CHECK(run("oracle --data raw.tsv --cache-rows 99 --listen tcp://127.0.0.1:%d", port + 81) == 1 &&
          strstr(out, "give its prep spec with --spec"), "%s", out);
}

/* Waits (at most 60 s) until the loss log has `n` lines. */
static int wait_lines(const char *name, int n) {
    for (int i = 0; i < 6000; i++) {
        if (lines_of(name) >= n) return 1;
        usleep(10000);
    }
    return 0;
}

/* Do the exports of two checkpoints hold the same bits, parameter by parameter? */
static int same_models(const char *a, const char *b) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cd %s && rm -rf xa xb && %s export --ckpt %s --out xa >/dev/null 2>&1 && %s export --ckpt %s "
             "--out xb >/dev/null 2>&1 && for f in xa/*.npy; do cmp -s $f xb/${f#xa/} || exit 1; done", dir, cli, a, cli, b);
    return system(cmd) == 0;
}

/* kill -9 of a trainer, then of an embedding server, at random steps of a durable job of
 * `trainers` trainers (two: a rank of their mpirun, which ends the other): the job resumes
 * (--resume; a restarted server from its snapshot), redoes at most one step after the
 * trainer's death, and ends with the losses (REF.loss) and the model (checkpoint REF_ck) of a
 * run without faults. The oracle reads `data`; the trainers train `config`. */
static void faults(int trainers, const char *data, const char *config, const char *ref, int p) {
    char ref_loss[64], ref_ck[64];
    snprintf(ref_loss, sizeof ref_loss, "%s.loss", ref);
    snprintf(ref_ck, sizeof ref_ck, "%s_ck", ref);
    const int steps = lines_of(ref_loss);
    if (steps < 40) {
        CHECK(0, "the run without faults logged %d losses in %s; the kills need 40 or more", steps, ref_loss);
        return;
    }
    char tr[1024], cmd[1400];
    snprintf(tr, sizeof tr, "%s%s train --oracle-cacher tcp://127.0.0.1:%d --embservers tcp://127.0.0.1:%d,"
             "tcp://127.0.0.1:%d --config %s --threads 1 --peer-timeout 5 --loss-log f.loss --ckpt f_ck",
             trainers > 1 ? "timeout 300 mpirun -np 2 --oversubscribe --bind-to none " : "", cli, p + 2, p, p + 1, config);
    for (int fault = 0; fault < 2; fault++) { /* 0: a trainer, 1: server 1 */
        snprintf(cmd, sizeof cmd, "cd %s && rm -rf fs0 fs1 f.loss f_ck", dir);
        CHECK(system(cmd) == 0, "cleaning up");
        pid_t s0 = spawn("embserver --listen tcp://127.0.0.1:%d --ckpt fs0 --ckpt-every 10 2>fs0.log", p);
        pid_t s1 = spawn("embserver --listen tcp://127.0.0.1:%d --ckpt fs1 --ckpt-every 10 2>fs1.log", p + 1);
        pid_t orc = spawn("oracle --listen tcp://127.0.0.1:%d %s --shuffle 0 2>f_or.log", p + 2, data);
        pid_t t1 = spawn_sh("%s --durable >f1.out 2>&1", tr);
        const int at = 15 + rand() % (steps / 2);
        CHECK(wait_lines("f.loss", at), "the durable run reaches step %d", at);
        if (fault) {
            kill(s1, SIGKILL);
        } else if (trainers == 1) {
            kill(t1, SIGKILL);
        } else { /* one rank (not mpirun, whose command line starts otherwise) */
            snprintf(cmd, sizeof cmd, "pkill -9 -n -f '^%s train --oracle-cacher tcp://127.0.0.1:%d'", cli, p + 2);
            CHECK(system(cmd) == 0, "killing a trainer of two");
        }
        const int logged = lines_of("f.loss");
        int st;
        waitpid(t1, &st, 0); /* the trainers: killed, or failing on the silent server */
        if (fault) {
            waitpid(s1, NULL, 0);
            read_out("f1.out");
            CHECK(WIFEXITED(st) && WEXITSTATUS(st) != 0 && strstr(out, "embedding server 1"),
                  "the trainer names the dead server: %s", out);
            s1 = spawn("embserver --listen tcp://127.0.0.1:%d --ckpt fs1 --ckpt-every 10 2>>fs1.log", p + 1);
        }
        snprintf(cmd, sizeof cmd, "cd %s && %s --resume 2>&1", dir, tr);
        CHECK(check_capture(cmd, out, sizeof out) == 0, "resumed after the %s's kill: %s", fault ? "server" : "trainer",
              out);
        const char *r = strstr(out, "resumed at step ");
        const int from = r ? atoi(r + 16) : -1;
        if (!fault)
            CHECK(from >= 0 && logged - from <= 1, "%d trainer(s), one killed after step %d: resumed at step %d, one "
                  "step redone at most", trainers, logged, from);
        else
            CHECK(from >= 0 && from % 10 == 0 && strstr(out, "restored their snapshots"), "a server killed after step %d: "
                  "the job goes back to the snapshot of step %d", logged, from);
        CHECK(same_file(ref_loss, "f.loss"), "%d trainer(s), the %s's kill: the losses of the run without faults",
              trainers, fault ? "server" : "trainer");
        if (!fault && trainers == 1) /* the servers hold this job now: a new one is refused, naming the way out */
            CHECK(run("%s --overwrite", tr + strlen(cli) + 1) == 1 && strstr(out, "holds tables an earlier job trained (durably): "
                  "restart it for a new job, or add --resume"), "%s", out);
        CHECK(same_models(ref_ck, "f_ck"), "%d trainer(s), the %s's kill: the model of the run without faults", trainers,
              fault ? "server" : "trainer");
        kill(s0, SIGTERM), kill(s1, SIGTERM), kill(orc, SIGTERM);
        waitpid(s0, NULL, 0), waitpid(s1, NULL, 0), waitpid(orc, NULL, 0);
    }
}

/* A trainer's and a server's kill in durable jobs of the DLRM and of DeepFM. */
static void test_faults(void) {
    char config[600], data[900];
    snprintf(config, sizeof config, "%s/configs/dlrm_small.json", src);
    CHECK(run("train --data syn/train.rshard --config %s --batch 64 --epochs 1 --no-shuffle --threads 1 --loss-log "
              "f_one.loss --ckpt f_one_ck", config) == 0, "%s", out);
    snprintf(data, sizeof data, "--data syn/train.rshard --config %s --batch 64 --cache-rows 5000", config);
    faults(1, data, config, "f_one", port + 60);
    /* DeepFM: the first-order values and their state in the undo, the rollback and the snapshots */
    snprintf(config, sizeof config, "%s/configs/deepfm_small.json", src);
    CHECK(run("train --data syn/train.rshard --config %s --batch 64 --epochs 1 --no-shuffle --threads 1 --loss-log "
              "f_fm.loss --ckpt f_fm_ck", config) == 0, "%s", out);
    snprintf(data, sizeof data, "--data syn/train.rshard --config %s --batch 64 --cache-rows 5000", config);
    faults(1, data, config, "f_fm", port + 64);
}

/* Two trainers (mpirun) on the data and model test_dist holds to the one-process run: dense
 * SGD, row-wise Adagrad tables (dense Adagrad amplifies reassociation, test_dist.c says why).
 * The losses are within 1e-4 of one process's for RW_STEPS steps and in the mean over 200, and
 * bitwise those of the MPI executor's 2 ranks (`mpirun -np 2 rectrain train`), which sums
 * gradients the same way. */
static void test_two_trainers(void) {
    if (!clirun_mpi_ready("two trainers")) return;
    write_spec("spec2.json", 50, 190);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "cd %s && %s gen --rows %d --out d2.tsv >/dev/null 2>&1 && %s prep --spec spec2.json --in "
             "d2.tsv --out d2.rshard >/dev/null 2>&1", dir, cli, 256 * STEPS2 + 1000, cli);
    CHECK(system(cmd) == 0, "making the data");
    FILE *f = fopen(path("rw.json"), "w");
    if (f) {
        fprintf(f, "{\"format\": \"rectrain-model\", \"version\": 1, \"name\": \"rw\", \"model\": \"dlrm\", "
                   "\"tables\": \"data\", \"embedding\": {\"dim\": 16}, \"bottom_mlp\": [64, 16], \"top_mlp\": [64, 1], "
                   "\"optimizer\": {\"dense\": {\"kind\": \"sgd\", \"lr\": 0.1}, \"sparse\": {\"kind\": "
                   "\"rowwise_adagrad\", \"lr\": 0.05}}, \"train\": {\"batch_size\": 256, \"epochs\": 1, \"seed\": 1}}\n");
        fclose(f);
    }
    CHECK(run("train --data d2.rshard --config rw.json --steps %d --no-shuffle --threads 1 --loss-log one.loss", STEPS2) == 0,
          "%s", out);
    snprintf(cmd, sizeof cmd, "cd %s && timeout 300 mpirun -np 2 --oversubscribe --bind-to none %s train --data d2.rshard "
             "--config rw.json --steps %d --no-shuffle --threads 1 --loss-log exec2.loss --ckpt exec2_ck >/dev/null 2>&1", dir,
             cli, STEPS2);
    CHECK(system(cmd) == 0, "the 2-rank MPI run");
    /* one oracle, then two, each half the tables (their shared rows must line up on both trainers) */
    for (int oracles = 1; oracles <= 2; oracles++) {
        f = fopen(path("c2.json"), "w");
        if (f) {
            fprintf(f, "{\"format\": \"rectrain-cluster\", \"version\": 1, \"data\": \"d2.rshard\", \"model\": "
                       "\"rw.json\", \"steps\": %d, \"shuffle\": false, \"trainers\": 2, \"oracles\": %d, "
                       "\"embservers\": 2, \"base_port\": %d, \"peer_timeout\": 60, \"cache\": {\"rows\": 20000}}\n",
                    STEPS2, oracles, port + 40);
            fclose(f);
        }
        CHECK(run("cluster c2.json --loss-log two.loss") == 0, "%s", out);
        const double gap = loss_gap("one.loss", "two.loss", RW_STEPS), all = loss_gap("one.loss", "two.loss", STEPS2),
                     mean = mean_gap("one.loss", "two.loss", STEPS2);
        printf("two trainers, %d oracle(s): relative loss gap to one process %.3g over %d steps, %.3g over %d, mean "
               "%.3g\n", oracles, gap, RW_STEPS, all, STEPS2, mean);
        CHECK(gap <= 1e-4 && mean <= 1e-4, "two trainers keep within 1e-4 of one process over %d steps, and their mean "
              "loss over %d (worst %.3g, mean %.3g)", RW_STEPS, STEPS2, gap, mean);
        CHECK(same_file("exec2.loss", "two.loss"), "two trainers (%d oracle(s)) train bitwise as the 2-rank MPI executor",
              oracles);
    }
    /* DeepFM and Wide&Deep: their first-order values ride with the rows between the trainers
     * and their gradients with the shared rows'; within 1e-4 of one process (RW_STEPS steps,
     * the mean over FM_STEPS), bitwise the executor's 2 ranks (whose owners sum them alike) */
    static const char *const FM[] = {"deepfm", "wide_deep"};
    for (int k = 0; k < 2; k++) {
        f = fopen(path("fm2.json"), "w");
        if (f) {
            fprintf(f, "{\"format\": \"rectrain-model\", \"version\": 1, \"name\": \"fm2\", \"model\": \"%s\", "
                       "\"tables\": \"data\", \"embedding\": {\"dim\": 16}, \"deep_mlp\": [64, 1], \"optimizer\": "
                       "{\"dense\": {\"kind\": \"sgd\", \"lr\": 0.1}, \"sparse\": {\"kind\": \"rowwise_adagrad\", \"lr\": "
                       "0.05}}, \"train\": {\"batch_size\": 256, \"epochs\": 1, \"seed\": 1}}\n", FM[k]);
            fclose(f);
        }
        f = fopen(path("cfm2.json"), "w");
        if (f) {
            fprintf(f, "{\"format\": \"rectrain-cluster\", \"version\": 1, \"data\": \"d2.rshard\", \"model\": "
                       "\"fm2.json\", \"steps\": %d, \"shuffle\": false, \"trainers\": 2, \"embservers\": 2, "
                       "\"base_port\": %d, \"peer_timeout\": 60, \"cache\": {\"rows\": 20000}}\n", FM_STEPS, port + 40);
            fclose(f);
        }
        CHECK(run("train --data d2.rshard --config fm2.json --steps %d --no-shuffle --threads 1 --loss-log fm1.loss",
                  FM_STEPS) == 0, "%s", out);
        CHECK(run("cluster cfm2.json --loss-log fm2.loss") == 0, "%s", out);
        const double gap = loss_gap("fm1.loss", "fm2.loss", RW_STEPS), mean = mean_gap("fm1.loss", "fm2.loss", FM_STEPS);
        printf("two trainers, %s: relative loss gap to one process %.3g over %d steps, mean %.3g over %d\n", FM[k], gap,
               RW_STEPS, mean, FM_STEPS);
        CHECK(gap <= 1e-4 && mean <= 1e-4, "two %s trainers keep within 1e-4 of one process over %d steps, and their "
              "mean loss over %d (worst %.3g, mean %.3g)", FM[k], RW_STEPS, FM_STEPS, gap, mean);
        snprintf(cmd, sizeof cmd, "cd %s && timeout 300 mpirun -np 2 --oversubscribe --bind-to none %s train --data d2.rshard "
                 "--config fm2.json --steps %d --no-shuffle --threads 1 --loss-log fmx.loss >/dev/null 2>&1", dir, cli, FM_STEPS);
        CHECK(system(cmd) == 0 && same_file("fmx.loss", "fm2.loss"), "two %s trainers train bitwise as the 2-rank MPI "
              "executor", FM[k]);
    }
    char data[200];
    snprintf(data, sizeof data, "--data d2.rshard --config rw.json --steps %d --cache-rows 20000", STEPS2);
    faults(2, data, "rw.json", "exec2", port + 70);
}

/* A model config NAME: configs/dlrm_small.json's DLRM with its tables stored as `tables` ("fp32",
 * or "bf16" with `rounding`), at batch 256. */
static void write_b16_model(const char *name, const char *tables, const char *rounding) {
    FILE *f = fopen(path(name), "w");
    if (!f) return;
    fprintf(f, "{\"format\": \"rectrain-model\", \"version\": 1, \"name\": \"b16\", \"model\": \"dlrm\", \"tables\": "
               "\"data\", \"embedding\": {\"dim\": 16, \"precision\": \"%s\"%s%s%s}, \"bottom_mlp\": [128, 64, 16], "
               "\"top_mlp\": [128, 64, 1], \"interaction\": {\"kind\": \"dot\", \"self\": false}, \"optimizer\": "
               "{\"dense\": {\"kind\": \"adagrad\", \"lr\": 0.01}, \"sparse\": {\"kind\": \"rowwise_adagrad\", \"lr\": "
               "0.05}}, \"train\": {\"batch_size\": 256, \"epochs\": 1, \"seed\": 1}}\n", tables,
            rounding ? ", \"rounding\": \"" : "", rounding ? rounding : "", rounding ? "\"" : "");
    fclose(f);
}

/* A cluster config NAME training syn/train.rshard with model config MODEL (in the scratch
 * directory) from base port p, with `extra` keys. */
static void write_b16_cluster(const char *name, const char *model, int p, const char *extra) {
    FILE *f = fopen(path(name), "w");
    if (!f) return;
    fprintf(f, "{\"format\": \"rectrain-cluster\", \"version\": 1, \"data\": \"syn/train.rshard\", \"model\": \"%s\", "
               "\"batch\": 256, \"epochs\": 1, \"shuffle\": false, \"embservers\": 2, \"threads\": 1, \"base_port\": "
               "%d, \"cache\": {\"rows\": 6000}%s}\n", model, p, extra);
    fclose(f);
}

/* bf16 tables (the model's "embedding": {"precision": "bf16"}): the servers keep bf16 bits and
 * rows travel as them, the trainer steps its cached rows as one process steps a bf16 row. One
 * trainer trains as one process does, bitwise, with either rounding, and leaves one process's
 * model, optimizer state included; two trainers (LRPP) train the bits of the 2-rank MPI
 * executor's bf16 owners; a durable job resumes bitwise after a trainer's and a server's kill.
 * Snapshots carry the precision: a server restarted from a bf16 snapshot refuses a trainer of
 * fp32 tables, and a RESTORE of a snapshot of other tables' precision is refused, naming it. */
static void test_bf16_tables(void) {
    static const char *const RND[2] = {"stochastic", "nearest"};
    const int p = port + 130;
    char model[32], ck[32], loss[32];
    for (int k = 0; k < 2; k++) {
        snprintf(model, sizeof model, "b16_%c.json", RND[k][0]);
        write_b16_model(model, "bf16", RND[k]);
        CHECK(run("train --data syn/train.rshard --config %s --batch 256 --epochs 1 --no-shuffle --threads 1 --loss-log "
                  "b16_%c.loss --ckpt b16_%c_ck", model, RND[k][0], RND[k][0]) == 0, "%s", out);
        write_b16_cluster("c16.json", model, p, "");
        CHECK(run("cluster c16.json --loss-log b16c.loss --ckpt b16c_%c_ck", RND[k][0]) == 0 &&
                  strstr(out, " of 26 bf16 (") && strstr(out, RND[k]), "%s", out);
        snprintf(loss, sizeof loss, "b16_%c.loss", RND[k][0]);
        CHECK(same_file(loss, "b16c.loss"), "bf16 tables, %s rounding: the cache trains as one process does", RND[k]);
        snprintf(ck, sizeof ck, "b16_%c_ck", RND[k][0]);
        char ck2[32];
        snprintf(ck2, sizeof ck2, "b16c_%c_ck", RND[k][0]);
        CHECK(same_tensors(ck, ck2, "opt.emb.0"), "bf16 tables, %s rounding: the model from the servers holds one "
              "process's tensors, optimizer state included", RND[k]);
    }
    /* two trainers: the bits of `mpirun -np 2` (the executor's owners step bf16 rows alike) */
    if (clirun_mpi_ready("two bf16 trainers")) {
        char cmd[1024];
        snprintf(cmd, sizeof cmd, "cd %s && timeout 300 mpirun -np 2 --oversubscribe --bind-to none %s train --data "
                 "syn/train.rshard --config b16_s.json --batch 256 --epochs 1 --no-shuffle --threads 1 --loss-log "
                 "b16x2.loss >/dev/null 2>&1", dir, cli);
        CHECK(system(cmd) == 0, "the 2-rank MPI run of bf16 tables");
        write_b16_cluster("c16x2.json", "b16_s.json", p, ", \"trainers\": 2, \"peer_timeout\": 60");
        CHECK(run("cluster c16x2.json --loss-log b16t2.loss") == 0, "%s", out);
        CHECK(same_file("b16x2.loss", "b16t2.loss"), "two trainers of bf16 tables train bitwise as the 2-rank MPI executor");
    }
    /* durable: kills of a trainer and of a server, bitwise resumes (the undo log and snapshots
     * hold bf16 rows) */
    CHECK(run("train --data syn/train.rshard --config b16_s.json --batch 64 --epochs 1 --no-shuffle --threads 1 --loss-log "
              "f_b16.loss --ckpt f_b16_ck") == 0, "%s", out);
    char data[300];
    snprintf(data, sizeof data, "--data syn/train.rshard --config b16_s.json --batch 64 --cache-rows 5000");
    faults(1, data, "b16_s.json", "f_b16", p + 4);

    /* the precision of snapshots: durable jobs of 16 steps (the sanitizer build's data holds no
     * more) of fp32 and bf16 tables, alike but for the precision; their servers' snapshots of steps
     * 11 and 15 */
    write_b16_model("b32.json", "fp32", NULL);
    static const char *const JOB[2][2] = {{"b32.json", "s32"}, {"b16_s.json", "s16"}};
    for (int k = 0; k < 2; k++) {
        char extra[128];
        snprintf(extra, sizeof extra, ", \"steps\": 16, \"durable\": {\"dir\": \"%s\", \"every\": 4}", JOB[k][1]);
        write_b16_cluster("cs.json", JOB[k][0], p, extra);
        CHECK(run("cluster cs.json") == 0, "%s", out);
    }
    /* a server restarted from the bf16 job's snapshot refuses a trainer of fp32 tables */
    const char *O = "oracle --data syn/train.rshard --batch 256 --cache-rows 6000 --shuffle 0";
    char tr[600];
    snprintf(tr, sizeof tr, "train --oracle-cacher tcp://127.0.0.1:%d --embservers tcp://127.0.0.1:%d,tcp://127.0.0.1:%d "
             "--threads 1 --peer-timeout 5", p + 12, p + 10, p + 11);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "cd %s && rm -rf r0 r1 && mkdir r0 r1 && cp s16/server-0/shard-15.rsnap r0/ && "
             "cp s16/server-1/shard-15.rsnap r1/", dir);
    CHECK(system(cmd) == 0, "copying snapshots");
    pid_t s0 = spawn("embserver --listen tcp://127.0.0.1:%d --ckpt r0 --ckpt-every 4 2>r0.log", p + 10);
    pid_t s1 = spawn("embserver --listen tcp://127.0.0.1:%d --ckpt r1 --ckpt-every 4 2>r1.log", p + 11);
    pid_t orc = spawn("%s --config b32.json --listen tcp://127.0.0.1:%d 2>ro.log", O, p + 12);
    CHECK(run("%s --config b32.json --resume", tr) == 1 &&
              strstr(out, "holds bf16 (stochastic rounding) tables (restored from its snapshot) and the trainer's model "
                          "has fp32 tables: train with the model's \"embedding\": {\"precision\", \"rounding\"} of the job "
                          "that made them"),
          "a trainer of fp32 tables and a server of bf16 ones: refused, saying why: %s", out);
    kill(s0, SIGTERM), kill(s1, SIGTERM), kill(orc, SIGTERM);
    waitpid(s0, NULL, 0), waitpid(s1, NULL, 0), waitpid(orc, NULL, 0);
    /* server 0 restarts at step 11 (bf16), server 1 at 15 (bf16) keeping the fp32 job's 11 too:
     * the resumed job goes back to step 11 on both, and server 1's snapshot of it is refused */
    snprintf(cmd, sizeof cmd, "cd %s && rm -rf r0 r1 && mkdir r0 r1 && cp s16/server-0/shard-11.rsnap r0/ && "
             "cp s16/server-1/shard-15.rsnap r1/ && cp s32/server-1/shard-11.rsnap r1/", dir);
    CHECK(system(cmd) == 0, "copying snapshots");
    s0 = spawn("embserver --listen tcp://127.0.0.1:%d --ckpt r0 --ckpt-every 4 2>r0.log", p + 10);
    s1 = spawn("embserver --listen tcp://127.0.0.1:%d --ckpt r1 --ckpt-every 4 2>r1.log", p + 11);
    orc = spawn("%s --config b16_s.json --listen tcp://127.0.0.1:%d 2>ro.log", O, p + 12);
    CHECK(run("%s --config b16_s.json --resume", tr) == 1 && strstr(out, "r1/shard-11.rsnap holds fp32 tables and the "
              "job's are bf16 (stochastic rounding): resume with the model's \"embedding\": {\"precision\", \"rounding\"} "
              "of the job that saved it"), "a RESTORE of a snapshot of fp32 tables into a job of bf16 ones: refused, "
              "naming it: %s", out);
    kill(s0, SIGTERM), kill(s1, SIGTERM), kill(orc, SIGTERM);
    waitpid(s0, NULL, 0), waitpid(s1, NULL, 0), waitpid(orc, NULL, 0);
}

static void *dealer(void *ctx, int p) {
    void *s = zmq_socket(ctx, ZMQ_DEALER);
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", p);
    zmq_connect(s, ep);
    const int tmo = 5000, zero = 0;
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    return s;
}

/* Counts the answers of each type among the next n. */
static void answers(void *s, int n, int *count) {
    memset(count, 0, sizeof(int) * REC_MSG_COUNT);
    for (int k = 0; k < n; k++) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        if (zmq_msg_recv(&m, s, 0) < 0) {
            zmq_msg_close(&m);
            break;
        }
        rec_frame_head h;
        if (!rec_frame_head_decode(zmq_msg_data(&m), zmq_msg_size(&m), "test", &h)) count[h.type]++;
        zmq_msg_close(&m);
    }
}

static void test_hostile(void) {
    const int p = port + 10;
    pid_t es = spawn("embserver --listen tcp://127.0.0.1:%d 2>es.log", p);
    pid_t orc = spawn("oracle --listen tcp://127.0.0.1:%d --data syn/train.rshard --cache-rows 5000 --batch 256 2>or.log",
                      p + 1);
    void *ctx = zmq_ctx_new(), *s = dealer(ctx, p), *o = dealer(ctx, p + 1);
    rec_wbuf w = {0};
    int c[REC_MSG_COUNT];
    /* the server: junk, a cut header, another version, GET before HELLO, a cut HELLO, then PING */
    zmq_send(s, "GET / HTTP/1.0\r\n\r\n", 18, 0);
    rec_frame_begin(&w, REC_MSG_PING, 0, 1);
    rec_frame_end(&w);
    zmq_send(s, w.p, 10, 0);
    uint8_t v9[REC_NET_HEAD];
    memcpy(v9, w.p, REC_NET_HEAD);
    v9[4] = 9;
    zmq_send(s, v9, sizeof v9, 0);
    const rec_centry e[1] = {{0, 0, 0}};
    rec_net_rows q = {1, e, NULL, NULL, NULL};
    rec_frame_begin(&w, REC_MSG_EMB_GET, 0, 2);
    rec_net_rows_encode(&w, &q, 1, 4, 0);
    rec_frame_end(&w);
    zmq_send(s, w.p, w.len, 0);
    rec_frame_begin(&w, REC_MSG_EMB_HELLO, 0, 3);
    zmq_send(s, w.p, w.len, 0); /* a header with an empty body: cut short */
    rec_frame_begin(&w, REC_MSG_PING, 0, 4);
    rec_frame_end(&w);
    zmq_send(s, w.p, w.len, 0);
    answers(s, 6, c);
    CHECK(c[REC_MSG_ERROR] == 5 && c[REC_MSG_PONG] == 1, "the server refuses 5 frames and answers the PING (%d, %d)",
          c[REC_MSG_ERROR], c[REC_MSG_PONG]);
    /* tables too large to make; then real tables (durable), and a commit out of order */
    const int64_t huge[2] = {INT64_C(1) << 39, 3}, small[2] = {10, 3};
    rec_net_emb_hello eh = {0, 0, 1, 2, 8, 0, 0, 1, huge, 1, 0, 0, 0, 0};
    eh.digest = rec_net_emb_hello_digest(&eh);
    rec_frame_begin(&w, REC_MSG_EMB_HELLO, 0, 5);
    rec_net_emb_hello_encode(&w, &eh);
    rec_frame_end(&w);
    zmq_send(s, w.p, w.len, 0);
    eh.rows = small;
    eh.digest = rec_net_emb_hello_digest(&eh);
    rec_frame_begin(&w, REC_MSG_EMB_HELLO, 0, 6);
    rec_net_emb_hello_encode(&w, &eh);
    rec_frame_end(&w);
    zmq_send(s, w.p, w.len, 0);
    rec_frame_begin(&w, REC_MSG_EMB_COMMIT, 0, 7);
    rec_net_floats_encode(&w, NULL, 0);
    rec_frame_end(&w);
    zmq_send(s, w.p, w.len, 0);
    rec_frame_begin(&w, REC_MSG_EMB_RESTORE, 0, 9); /* and it keeps no snapshots */
    rec_frame_end(&w);
    zmq_send(s, w.p, w.len, 0);
    answers(s, 4, c);
    CHECK(c[REC_MSG_ERROR] == 3 && c[REC_MSG_EMB_OK] == 1, "the server refuses too large tables, a commit out of "
          "order and a RESTORE without snapshots (%d, %d)", c[REC_MSG_ERROR], c[REC_MSG_EMB_OK]);
    /* run 8 says HELLO: run 0's requests (a killed trainer's, still queued) are refused, its own served */
    const uint64_t runs[4] = {0, 8, 0, 8};
    for (int i = 0; i < 4; i++) {
        rec_frame_begin(&w, i == 1 ? REC_MSG_EMB_HELLO : REC_MSG_EMB_GET, runs[i], 10 + (uint64_t)i);
        if (i == 1) rec_net_emb_hello_encode(&w, &eh);
        else rec_net_rows_encode(&w, &q, 1, 8, 0);
        rec_frame_end(&w);
        zmq_send(s, w.p, w.len, 0);
    }
    answers(s, 4, c);
    CHECK(c[REC_MSG_EMB_ROWS] == 2 && c[REC_MSG_EMB_OK] == 1 && c[REC_MSG_ERROR] == 1, "the server serves run 0, then "
          "run 8 alone once it said HELLO (%d rows, %d ok, %d refused)", c[REC_MSG_EMB_ROWS], c[REC_MSG_EMB_OK],
          c[REC_MSG_ERROR]);
    /* the oracle: a plan before HELLO, a request that is not one, a HELLO cut short, a HELLO of
     * one trainer (the job starts), a plan far ahead */
    rec_frame_begin(&w, REC_MSG_CACHE_NEXT, 0, 0);
    rec_frame_end(&w);
    zmq_send(o, w.p, w.len, 0);
    rec_frame_begin(&w, REC_MSG_EMB_ROWS, 0, 0);
    rec_frame_end(&w);
    zmq_send(o, w.p, w.len, 0);
    rec_frame_begin(&w, REC_MSG_CACHE_HELLO, 0, 0);
    rec_frame_end(&w);
    zmq_send(o, w.p, w.len, 0);
    rec_frame_begin(&w, REC_MSG_CACHE_HELLO, 0, 0);
    rec_net_cache_hello_encode(&w, 0, 1, 0);
    rec_frame_end(&w);
    zmq_send(o, w.p, w.len, 0);
    rec_frame_begin(&w, REC_MSG_CACHE_NEXT, 0, 5);
    rec_frame_end(&w);
    zmq_send(o, w.p, w.len, 0);
    answers(o, 5, c);
    CHECK(c[REC_MSG_ERROR] == 4 && c[REC_MSG_CACHE_INFO] == 1, "the oracle refuses 4 requests and starts a job (%d, %d)",
          c[REC_MSG_ERROR], c[REC_MSG_CACHE_INFO]);
    zmq_close(s);
    zmq_close(o);
    zmq_ctx_term(ctx);
    rec_wbuf_free(&w);
    kill(es, SIGTERM), kill(orc, SIGTERM);
    waitpid(es, NULL, 0), waitpid(orc, NULL, 0);
    read_out("es.log");
    CHECK(strstr(out, "not a rectrain frame") && strstr(out, "frame version 9") && strstr(out, "before EMB_HELLO") &&
          strstr(out, "over 2^40") && strstr(out, "steps commit one after another") && strstr(out, "keeps no snapshots (start it with --ckpt DIR)") &&
          strstr(out, "a request of trainer run 0000000000000000, and run 0000000000000008 said HELLO since") &&
          strstr(out, "stopped after"),
          "the server logs its refusals and ends normally: %s", out);
    read_out("or.log");
    CHECK(strstr(out, "CACHE_NEXT before CACHE_HELLO") && strstr(out, "batch 5 asked for; the next is 0") &&
          strstr(out, "bytes of the rank were due"),
          "the oracle logs its refusals: %s", out);
}

/* A trainer facing a hostile oracle: a valid job, then a plan of more rows than a batch has,
 * is refused with a message (not a write past its buffers). */
static void test_hostile_oracle(void) {
    const int p = port + 90;
    pid_t es = spawn("embserver --listen tcp://127.0.0.1:%d 2>ho_es.log", p);
    void *ctx = zmq_ctx_new(), *o = zmq_socket(ctx, ZMQ_ROUTER);
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", p + 1);
    const int zero = 0, tmo = 20000;
    zmq_setsockopt(o, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(o, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
    CHECK(zmq_bind(o, ep) == 0, "binding the fake oracle");
    pid_t tr = spawn("train --oracle-cacher tcp://127.0.0.1:%d --embservers tcp://127.0.0.1:%d --threads 1 "
                     "--peer-timeout 20 >ho_tr.out 2>&1", p + 1, p);
    rec_wbuf w = {0};
    const int64_t rows[2] = {10, 7};
    int served = 0;
    for (int k = 0; k < 4 && served < 2; k++) { /* HELLO -> INFO; NEXT 0 -> a plan of 9 rows for batches of 4 */
        zmq_msg_t id, m;
        zmq_msg_init(&id), zmq_msg_init(&m);
        if (zmq_msg_recv(&id, o, 0) < 0 || zmq_msg_recv(&m, o, 0) < 0) {
            zmq_msg_close(&id), zmq_msg_close(&m);
            break;
        }
        rec_frame_head h;
        if (!rec_frame_head_decode(zmq_msg_data(&m), zmq_msg_size(&m), "trainer", &h)) {
            if (h.type == REC_MSG_CACHE_HELLO) {
                const rec_net_cache_info ci = {2, 1, REC_CACHE_NONE, 1, 1, 1, 0, 64, 4, 3, rows, 0, 0, 0};
                rec_frame_begin(&w, REC_MSG_CACHE_INFO, 0, 0);
                rec_net_cache_info_encode(&w, &ci);
            } else if (h.type == REC_MSG_CACHE_NEXT && h.seq == 0) {
                int64_t ids0[9 * 1], ids1[9 * 1];
                for (int i = 0; i < 9; i++) ids0[i] = i % 5, ids1[i] = 5 + i % 3;
                const int64_t *ids[2] = {ids0, ids1};
                rec_batch b;
                make_batch(&b, 9, 2, 1, ids);
                rec_batch_fit_ids(&b, (const int64_t[]){64, 64});
                const rec_net_cache_step st = {.batch = b};
                rec_frame_begin(&w, REC_MSG_CACHE_STEP, 0, 0);
                rec_net_cache_step_encode(&w, &st);
                rec_batch_free(&b);
            } else {
                rec_frame_begin(&w, REC_MSG_PING, 0, 0);
            }
            rec_frame_end(&w);
            zmq_msg_send(&id, o, ZMQ_SNDMORE);
            zmq_send(o, w.p, w.len, 0);
            served += h.type == REC_MSG_CACHE_HELLO || h.type == REC_MSG_CACHE_NEXT;
        }
        zmq_msg_close(&id), zmq_msg_close(&m);
    }
    int st = 0;
    waitpid(tr, &st, 0);
    read_out("ho_tr.out");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 1 && strstr(out, "has 9 rows (1 to 4)"),
          "a plan of too many rows is refused: %s", out);
    zmq_close(o);
    zmq_ctx_term(ctx);
    rec_wbuf_free(&w);
    kill(es, SIGTERM);
    waitpid(es, NULL, 0);
}

/* The commands' refusals, with their messages. */
/* ---- failures and stops of a cluster's processes -------------------------------------------------- */

/* The pids of pid's children (from /proc), at most max. */
static int children_of(pid_t pid, pid_t *v, int max) {
    int n = 0;
    DIR *d = opendir("/proc");
    for (struct dirent *e; d && (e = readdir(d)) && n < max;) {
        char name[300], buf[512];
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        snprintf(name, sizeof name, "/proc/%s/stat", e->d_name);
        FILE *f = fopen(name, "r");
        const size_t k = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
        if (f) fclose(f);
        buf[k] = 0;
        const char *rp = strrchr(buf, ')'); /* "pid (comm) state ppid ..." */
        char state;
        int ppid;
        if (rp && sscanf(rp + 1, " %c %d", &state, &ppid) == 2 && ppid == pid) v[n++] = (pid_t)atoi(e->d_name);
    }
    if (d) closedir(d);
    return n;
}

/* Has rectrain, as process pid, installed a handler for sig (SigCgt in /proc): its CLI is past
 * its start? The name matters: the shell that execs it (dash) catches SIGINT too, and a
 * SIGINT sent before the exec ends the shell by the signal, with no output. */
static int catches(pid_t pid, int sig) {
    char name[64], line[256];
    snprintf(name, sizeof name, "/proc/%d/status", (int)pid);
    FILE *f = fopen(name, "r");
    unsigned long long m = 0;
    int rectrain = 0;
    while (f && fgets(line, sizeof line, f)) {
        if (!strncmp(line, "Name:", 5)) rectrain = strstr(line, "rectrain") != NULL;
        if (!strncmp(line, "SigCgt:", 7)) m = strtoull(line + 7, NULL, 16);
    }
    if (f) fclose(f);
    return rectrain && (int)(m >> (sig - 1) & 1);
}

/* The lines of `hay` that hold `needle`. */
static int lines_with(const char *hay, const char *needle) {
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); n++) p = strchr(p, '\n') ? strchr(p, '\n') : p + strlen(p);
    return n;
}

/* A service that fails at start (data missing, a port taken, a cache too small): the cluster
 * ends at once, not after peer_timeout (30 s here), naming the service, its exit status and
 * its last line, with no process of the job left. */
static void test_cluster_failures(void) {
    const int p = port + 100;
    char ep[128], live[160];
    snprintf(live, sizeof live, "pgrep -f '[r]ectrain .*127[.]0[.]0[.]1:(%d|%d|%d)([^0-9]|$)' >/dev/null", p, p + 1, p + 2);
    write_cluster_of("f1.json", "syn/missing.rshard", 1, p, ", \"peer_timeout\": 30");
    double t0 = rec_now();
    snprintf(ep, sizeof ep, "the oracle (tcp://127.0.0.1:%d) ended (exit status 1)", p + 2);
    CHECK(run("cluster f1.json") == 1 && rec_now() - t0 < 10 && strstr(out, ep) &&
              strstr(out, ": rectrain oracle: syn/missing.rshard: cannot open the data set: No such file or directory; "
                          "the other processes are stopped"),
          "missing data: the oracle is named at once (%.1f s): %s", rec_now() - t0, out);
    CHECK(system(live) != 0, "no process of the job is left");
    /* embedding server 1's port taken */
    write_cluster_of("f2.json", "syn/train.rshard", 1, p, ", \"peer_timeout\": 30");
    void *ctx = zmq_ctx_new(), *taken = zmq_socket(ctx, ZMQ_ROUTER);
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", p + 1);
    CHECK(zmq_bind(taken, ep) == 0, "taking port %d", p + 1);
    t0 = rec_now();
    snprintf(ep, sizeof ep, "embedding server 1 (tcp://127.0.0.1:%d) ended (exit status 1)", p + 1);
    CHECK(run("cluster f2.json") == 1 && rec_now() - t0 < 10 && strstr(out, ep) && strstr(out, "Address already in use"),
          "a port taken: the server is named at once (%.1f s): %s", rec_now() - t0, out);
    zmq_close(taken);
    zmq_ctx_term(ctx);
    CHECK(system(live) != 0, "no process of the job is left");
    /* a cache that cannot hold a batch */
    write_cluster_of("f3.json", "syn/train.rshard", 1, p, ", \"peer_timeout\": 30, \"cache\": {\"rows\": 5}");
    t0 = rec_now();
    CHECK(run("cluster f3.json") == 1 && rec_now() - t0 < 10 && strstr(out, "the oracle (tcp://") &&
              strstr(out, "cannot hold one batch's rows; give a larger --cache-rows"),
          "a tiny cache: the oracle is named at once (%.1f s): %s", rec_now() - t0, out);
    CHECK(system(live) != 0, "no process of the job is left");
}

/* Ctrl-C: to the cluster alone, then to its process group (a terminal's Ctrl-C): every process
 * stops at once (none is killed for outliving the grace), none is left, exit 130, and one stop
 * message, with nothing about an interrupted poll. */
static void test_cluster_stop(void) {
    const int p = port + 110;
    write_cluster_of("s.json", "syn/train.rshard", 1000, p, ", \"peer_timeout\": 30, \"cache\": {\"rows\": 6000}");
    for (int group = 0; group < 2; group++) {
        char loss[32];
        snprintf(loss, sizeof loss, "stop%d.loss", group);
        pid_t pid = spawn_sh("setsid %s cluster s.json --loss-log %s >stop.out 2>&1", cli, loss);
        CHECK(wait_lines(loss, 3), "the cluster trains");
        pid_t kids[64];
        const int nk = children_of(pid, kids, 64);
        CHECK(nk == 4, "the cluster runs 2 servers, an oracle and a trainer: %d children", nk);
        const double t0 = rec_now();
        kill(group ? -pid : pid, SIGINT);
        int st = 0;
        waitpid(pid, &st, 0);
        const double took = rec_now() - t0;
        read_out("stop.out");
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 130, "SIGINT%s: exit status 0x%x: %s", group ? " to the group" : "", st, out);
        CHECK(took < 1.5, "the cluster and its processes stopped in %.2f s", took);
        int left = 0;
        for (int i = 0; i < nk; i++) left += kill(kids[i], 0) == 0;
        CHECK(left == 0, "%d of its %d processes are left", left, nk);
        CHECK(lines_with(out, "stop") == 1 && strstr(out, "rectrain cluster: stopped by SIGINT; every process of the job is "
                                                         "stopped; the trainer stopped at batch ") &&
                  !strstr(out, "poll failed") && !strstr(out, "was killed"),
              "one stop message: %s", out);
    }
}

/* Ctrl-C of a standalone oracle while it chooses its lookahead (seconds of trial plans), and of
 * a trainer waiting for an oracle that does not answer: each stops within a second, exit 130. */
static void test_service_stop(void) {
    pid_t pid = spawn("oracle --data syn/train.rshard --cache-rows 4000000 --batch 4096 --epochs 100 --listen "
                      "tcp://127.0.0.1:%d >os.out 2>&1", port + 120);
    for (int i = 0; i < 30000 && !catches(pid, SIGINT); i++) usleep(1000); /* up to 30 s: ASan under load */
    const double t0 = rec_now();
    kill(pid, SIGINT);
    int st = 0;
    waitpid(pid, &st, 0);
    const double took = rec_now() - t0;
    read_out("os.out");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 130 && took < 1 &&
              lines_with(out, "stop") == 1 && strstr(out, "rectrain oracle: stopped by SIGINT while choosing the lookahead") &&
              !strstr(out, "listening"),
          "the oracle stops during its choice: status 0x%x after %.2f s: %s", st, took, out);
    pid = spawn("train --oracle-cacher tcp://127.0.0.1:%d --embservers tcp://127.0.0.1:%d --peer-timeout 30 >ts.out 2>&1",
                port + 121, port + 122);
    for (int i = 0; i < 30000 && !catches(pid, SIGINT); i++) usleep(1000); /* up to 30 s: ASan under load */
    usleep(200000); /* in its wait for the oracle */
    const double t1 = rec_now();
    kill(pid, SIGINT);
    waitpid(pid, &st, 0);
    const double took1 = rec_now() - t1;
    read_out("ts.out");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 130 && took1 < 1 &&
              strstr(out, "rectrain train: stopped by SIGINT while waiting for the oracle") && !strstr(out, "poll failed"),
          "the trainer stops its wait: status 0x%x after %.2f s: %s", st, took1, out);
}

static void test_refusals(void) {
    CHECK(run("oracle --cache-rows 10") == 2 && strstr(out, "--data is required"), "%s", out);
    CHECK(run("oracle --data syn/train.rshard") == 2 && strstr(out, "--cache-rows is required"), "%s", out);
    CHECK(run("oracle --data syn/train.rshard --cache-rows 9 --policy fifo") == 2 && strstr(out, "bagpipe, none"), "%s", out);
    CHECK(run("oracle --data syn/train.rshard --cache-rows 9 --lookahead 2 --prefetch-depth 3") == 2 &&
          strstr(out, "before its last write-back"), "%s", out);
    CHECK(run("oracle --data syn/train.rshard --cache-rows 9 --policy lru --lookahead 2") == 2 &&
          strstr(out, "are for --policy bagpipe"), "%s", out);
    CHECK(run("oracle --data syn/train.rshard --cache-rows 9 --batch 256 --listen tcp://127.0.0.1:%d", port + 20) == 1 &&
          strstr(out, "cannot hold one batch's rows"), "a cache too small for a batch: %s", out);
    CHECK(run("oracle --data syn/train.rshard --cache-rows 9 --policy static --batch 256 --listen tcp://127.0.0.1:%d",
              port + 20) == 1 && strstr(out, "no room for hot rows"), "%s", out);
    CHECK(run("train --oracle-cacher tcp://127.0.0.1:1") == 2 && strstr(out, "needs --embservers"), "%s", out);
    CHECK(run("train --oracle-cacher tcp://127.0.0.1:1 --embservers tcp://127.0.0.1:2 --data x.rshard") == 2 &&
          strstr(out, "the oracle gives the data"), "%s", out);
    CHECK(run("train --oracle-cacher tcp://127.0.0.1:%d --embservers tcp://127.0.0.1:%d --peer-timeout 0.5", port + 21,
              port + 22) == 1 && strstr(out, "did not answer in"), "a missing oracle is named: %s", out);
    write_cluster("bad1.json", ", \"cache\": {\"rows\": 10, \"size\": 3}");
    CHECK(run("cluster bad1.json") == 1 && strstr(out, "bad1.json: $.cache.size: unknown key"), "%s", out);
    write_cluster("bad2.json", ", \"steps\": -1");
    CHECK(run("cluster bad2.json") == 1 && strstr(out, "$.steps: must be an integer in [0, 2147483647]"), "%s", out);
    write_cluster("bad3.json", ", \"cache\": {\"policy\": \"lru\", \"lookahead\": 4}");
    CHECK(run("cluster bad3.json") == 1 && strstr(out, "are for the bagpipe policy"), "%s", out);
    CHECK(run("cluster") == 2 && strstr(out, "CONFIG.json"), "%s", out);
}

int main(void) {
    test_worked_example();
    test_invariants();
    test_planner_refusals();
    test_frames();
    int rc = clirun_setup("rectrain_cache");
    if (rc) return rc == 77 ? check_report() : rc;
    /* below Linux's ephemeral range (32768 and up), where mpirun and other tests' clients bind */
    port = 21000 + (int)(getpid() % 11000);
    srand((unsigned)time(NULL) ^ (unsigned)getpid());
    test_same_training();
    test_first_order();
    test_partition_refusals();
    test_two_trainers();
    test_faults();
    test_bf16_tables();
    test_data_processors();
    test_hostile();
    test_hostile_oracle();
    test_refusals();
    test_cluster_failures();
    test_cluster_stop();
    test_service_stop();
    clirun_cleanup();
    return check_report();
}
