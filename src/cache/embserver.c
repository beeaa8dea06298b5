/* The embedding server (`rectrain embserver`, cache.h): one shard of every table, as a
 * parameter server of rows (Bagpipe §3.4 "EmbeddingServers").
 *
 * The first EMB_HELLO makes the shard: row r of table f lives here when r mod S == shard, at
 * local index r / S, with its optimizer state; values are drawn as rec_embed_init draws them
 * (stream f of the embedding seed, row-major, every row drawn and this shard's kept), so the
 * tables are the ones one process would start from. Later HELLOs must name the same tables.
 * GET answers the rows' values and state; PUT overwrites them and is acknowledged. Requests
 * are served one at a time in arrival order, so a trainer's PUT before its GET on the same
 * connection is seen by that GET.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../net/zmq_impl.h"
#include "rectrain/cache.h"
#include "rectrain/core.h"
#include "rectrain/embed.h"

typedef struct server {
    const rec_embserver_opts *o;
    rec_zservice svc;
    rec_wbuf w;
    int ready;               /* tables made */
    rec_net_emb_hello t;     /* t.rows points at rows */
    int64_t *rows;           /* (F) */
    int64_t *off;            /* (F) first local row of table f */
    int S;                   /* state floats per row */
    float *values;           /* (local rows, E) */
    float *state;            /* (local rows, S) */
    int64_t gets, puts, rows_out, rows_in, refused;
} server;

int rec_cache_state_floats(int opt, int E) {
    return opt == REC_SPARSE_ADAGRAD ? E : opt == REC_SPARSE_ROWWISE_ADAGRAD ? 1 : 0;
}

static void server_drop(server *v) {
    rec_free(v->values), rec_free(v->state);
    free(v->rows), free(v->off);
    v->values = v->state = NULL;
    v->rows = v->off = NULL;
    v->ready = 0;
}

/* Makes this shard of the tables h describes. */
static rec_status make_tables(server *v, const rec_net_emb_hello *h) {
    const int F = h->F, E = h->E, S = rec_cache_state_floats(h->opt, E);
    v->rows = malloc(sizeof(int64_t) * (size_t)F);
    v->off = malloc(sizeof(int64_t) * (size_t)(F + 1));
    if (!v->rows || !v->off) return rec_errorf(REC_ENOMEM, "embserver: out of memory");
    int64_t n = 0;
    for (int f = 0; f < F; f++) {
        v->rows[f] = h->rows[f];
        v->off[f] = n;
        n += (h->rows[f] - h->shard + h->shards - 1) / h->shards;
    }
    v->off[F] = n;
    REC_TRY(rec_alloc((void **)&v->values, sizeof(float) * (size_t)(n * E) + 64, "the shard's rows"));
    REC_TRY(rec_alloc((void **)&v->state, sizeof(float) * (size_t)(n * S) + 64, "the shard's optimizer state"));
    for (int64_t i = 0; i < n * S; i++) v->state[i] = h->init_acc;
    for (int f = 0; f < F; f++) { /* as embed.c's init_table, keeping this shard's rows */
        rec_rng g;
        rec_rng_seed(&g, h->seed, (uint64_t)f);
        const double a = sqrt(1.0 / (double)h->rows[f]);
        float *T = v->values + (size_t)v->off[f] * E;
        for (int64_t r = 0; r < h->rows[f]; r++) {
            const int mine = r % h->shards == h->shard;
            for (int e = 0; e < E; e++) {
                const float x = (float)((2.0 * rec_rng_uniform(&g) - 1.0) * a);
                if (mine) T[(size_t)(r / h->shards) * E + e] = x;
            }
        }
    }
    v->t = *h;
    v->t.rows = v->rows;
    v->S = S;
    v->ready = 1;
    return REC_OK;
}

static rec_status on_hello(server *v, const rec_zreq *r) {
    rec_net_emb_hello h;
    REC_TRY(rec_net_emb_hello_decode(r->body, r->h.body, &h));
    if (v->ready) {
        if (h.digest != v->t.digest)
            return rec_errorf(REC_EINVAL, "this server holds shard %d of %d of other tables (%d of dim %d); give the "
                              "trainer the endpoints in shard order, or restart the server for new tables", v->t.shard,
                              v->t.shards, v->t.F, v->t.E);
        return REC_OK;
    }
    rec_status s = make_tables(v, &h);
    if (s) {
        server_drop(v);
        return s;
    }
    if (v->o->log) {
        fprintf(v->o->log, "embserver: shard %d of %d: %lld rows of %d tables, dim %d (%.1f MB)\n", h.shard, h.shards,
                (long long)v->off[h.F], h.F, h.E, 4.0 * (double)v->off[h.F] * (h.E + v->S) / 1e6);
        fflush(v->o->log);
    }
    return REC_OK;
}

static float *value_of(server *v, const rec_centry *e) {
    return v->values + (size_t)(v->off[e->f] + e->row / v->t.shards) * v->t.E;
}
static float *state_of(server *v, const rec_centry *e) {
    return v->state + (size_t)(v->off[e->f] + e->row / v->t.shards) * v->S;
}

static rec_status on_get(server *v, const rec_zreq *r) {
    rec_net_rows q;
    REC_TRY(rec_net_rows_decode(r->body, r->h.body, "EMB_GET", 1, 0, &v->t, v->S, &q));
    const int E = v->t.E, S = v->S;
    rec_frame_begin(&v->w, REC_MSG_EMB_ROWS, r->h.job, r->h.seq);
    const int64_t n = q.n;
    /* the body: n, values, state (rec_net_rows_encode's layout, written in place) */
    rec_net_rows hdr = {n, NULL, NULL, NULL};
    rec_net_rows_encode(&v->w, &hdr, 0, E, S);
    const size_t at = v->w.len, bytes = sizeof(float) * (size_t)(n * (E + S));
    if (!v->w.err && v->w.cap < at + bytes) {
        size_t cap = v->w.cap;
        while (cap < at + bytes) cap *= 2;
        uint8_t *p = realloc(v->w.p, cap);
        if (!p) return rec_errorf(REC_ENOMEM, "embserver: out of memory for %lld rows", (long long)n);
        v->w.p = p, v->w.cap = cap;
    }
    if (v->w.err) return v->w.err;
    float *out = (float *)(void *)(v->w.p + at);
    for (int64_t i = 0; i < n; i++) memcpy(out + (size_t)i * E, value_of(v, &q.e[i]), sizeof(float) * (size_t)E);
    out += (size_t)n * E;
    for (int64_t i = 0; S && i < n; i++) memcpy(out + (size_t)i * S, state_of(v, &q.e[i]), sizeof(float) * (size_t)S);
    v->w.len = at + bytes;
    v->gets++;
    v->rows_out += n;
    return rec_frame_end(&v->w);
}

static rec_status on_put(server *v, const rec_zreq *r) {
    rec_net_rows q;
    REC_TRY(rec_net_rows_decode(r->body, r->h.body, "EMB_PUT", 1, 1, &v->t, v->S, &q));
    const int E = v->t.E, S = v->S;
    for (int64_t i = 0; i < q.n; i++) {
        memcpy(value_of(v, &q.e[i]), q.values + (size_t)i * E, sizeof(float) * (size_t)E);
        if (S) memcpy(state_of(v, &q.e[i]), q.state + (size_t)i * S, sizeof(float) * (size_t)S);
    }
    v->puts++;
    v->rows_in += q.n;
    rec_frame_begin(&v->w, REC_MSG_EMB_PUT_OK, r->h.job, r->h.seq);
    return rec_frame_end(&v->w);
}

static void serve_one(void *arg) {
    server *v = arg;
    rec_zreq r;
    if (!rec__zservice_take(&v->svc, &r, &v->w)) return;
    rec_status s;
    const int t = r.h.type;
    if (t == REC_MSG_PING) {
        rec_frame_begin(&v->w, REC_MSG_PONG, r.h.job, r.h.seq);
        s = rec_frame_end(&v->w);
    } else if (t == REC_MSG_EMB_HELLO) {
        s = on_hello(v, &r);
        if (!s) {
            rec_frame_begin(&v->w, REC_MSG_EMB_OK, r.h.job, r.h.seq);
            s = rec_frame_end(&v->w);
        }
    } else if ((t == REC_MSG_EMB_GET || t == REC_MSG_EMB_PUT) && !v->ready) {
        s = rec_errorf(REC_EINVAL, "%s before EMB_HELLO: this server holds no tables yet", rec_msg_name(t));
    } else if (t == REC_MSG_EMB_GET) {
        s = on_get(v, &r);
    } else if (t == REC_MSG_EMB_PUT) {
        s = on_put(v, &r);
    } else {
        s = rec_errorf(REC_EFORMAT, "a %s frame is not a request to an embedding server", rec_msg_name(t));
    }
    v->refused += s != REC_OK;
    rec__zservice_answer(&v->svc, &r, &v->w, s);
}

rec_status rec_embserver_run(const rec_embserver_opts *o) {
    server v = {.o = o};
    rec_status s = rec__zservice_open(&v.svc, "embserver", o->listen, o->log);
    if (!s && o->log) {
        fprintf(o->log, "embserver: listening on %s\n", o->listen);
        fflush(o->log);
    }
    if (!s) s = rec__zservice_run(&v.svc, o->stop, serve_one, &v);
    v.refused += v.svc.refused;
    if (!s && o->log)
        fprintf(o->log, "embserver: stopped after %lld GET (%lld rows) and %lld PUT (%lld rows), %lld refused\n",
                (long long)v.gets, (long long)v.rows_out, (long long)v.puts, (long long)v.rows_in, (long long)v.refused);
    server_drop(&v);
    rec_wbuf_free(&v.w);
    rec__zservice_close(&v.svc);
    return s;
}
