/* The trainer of disaggregated training (cache.h; Bagpipe §3.4 "Trainers"), the training
 * loop's cache backend (backend.h): a model without tables, a cache of C rows, and two threads.
 *
 *   training thread     the loop's (src/train/trainer.c): its `next` waits until batch x's
 *                       rows are in the cache, `step` pools them (rows of the
 *                       batch are cache slots: the oracle sent the batch with slots for ids),
 *                       runs the dense model, sums each slot's gradient in position order and
 *                       steps the rows in the cache with the sparse optimizer, as rec_embed
 *                       would (the same bits), then marks x done.
 *   maintenance thread  owns every socket: asks the oracles for plans ahead (several split the
 *                       tables: their parts of a batch's plan merged into one), fetches batch x's
 *                       rows into their slots once x - depth is done (GET per server), writes
 *                       back the rows a plan evicts once its batch is done (PUT per server).
 * They never touch the same slot at once (Bagpipe §3.4, "lock-free"): the planner gives a
 * fetch only slots freed `depth` batches earlier, and evicts rows after their last use. The
 * mutex guards the counters only (done, ready); an inproc socket wakes the maintenance thread.
 *
 * Under mpirun, N trainers train slices of each batch (cache_impl.h, LRPP): before a step
 * the rows a trainer lacks come from the trainers holding them (an all-to-all-v on the
 * training thread), the dense gradients and the shared rows' gradients are summed over the
 * trainers (reduced in rank order at rank 0 and broadcast, so every holder steps the same
 * bits), a row one trainer uses is stepped by it alone, and after the step the rows to evict
 * go to their owners. The maintenance thread never calls MPI.
 *
 * DeepFM's and Wide&Deep's first-order tables (one float a row, model.c's lin.f) live with the
 * rows: a server's row carries its first-order value and that value's optimizer state, the
 * cache holds them beside the row's (lin, lin_state), and every move of a row (fetch, write-
 * back, LRPP, write-through) takes them along; a step pools them as one process pools its
 * dim-1 tables and steps them with the row.
 *
 * bf16 tables (the model's "embedding": {"precision": "bf16"}): the servers keep bf16 bits and
 * rows travel as them; the cache holds their fp32 values (exact), pools them as one process
 * pools a bf16 table, and steps a row as one process steps it (rec_sparse_opt_step_bf16, keyed
 * by the tables' seed, the model's step, the row's table and index), so it stays bf16.
 *
 * A durable job (--durable) writes through every row a step changed (N trainers: each the rows
 * it stepped) and commits the step on the servers once every trainer's writes of it are
 * acknowledged (sync_commit), before the next step ends: a killed job resumes (--resume) from
 * the last commit, one step redone at most.
 */
#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../sharding/mpi_check.h"
#include "../net/zmq_impl.h"
#include "../train/backend_impl.h"
#include "rectrain/backend.h"
#include "rectrain/cache.h"
#include "rectrain/ckpt.h"
#include "rectrain/core.h"
#include "rectrain/dist.h"
#include "rectrain/model.h"
#include "rectrain/nn.h"
#include "rectrain/train.h"

/* A batch's cache plan (the oracle's: its fetches, evictions and slots; rec_cplan makes it):
 * each oracle's part, a message the part's arrays point into, and the whole. */
typedef struct batch_plan {
    zmq_msg_t msg[REC_CACHE_MAX_ORACLES];
    rec_net_room room[REC_CACHE_MAX_ORACLES]; /* where each part's narrow ids and lengths are widened */
    rec_net_cache_step part[REC_CACHE_MAX_ORACLES];
    uint64_t have;           /* the parts received: bit k, oracle k's */
    rec_net_cache_step st;   /* the parts merged (one oracle: its part) */
    rec_jagged *sparse;      /* (F) the batch's features, each part's tables at their place */
    void *lists;             /* several oracles: the merged lists of st */
    size_t lists_cap;
    /* durable: the rows the step touched and their new values, and the dense state after it */
    rec_centry *dur_e;
    float *dur_v, *dur_dense;
    int64_t dur_n, dur_cap;
} batch_plan;

/* A step written through and not yet committed: PUTs not yet acknowledged, its dense state. */
typedef struct commit {
    int64_t step;            /* -1: free */
    int64_t pending;
    float *dense;            /* (P) */
} commit;

/* One Oracle Cacher: its tables and slots among the job's (several: partitioned by table). */
typedef struct opart {
    void *sock, *mon;        /* its socket and the monitor of its handshakes */
    char who[300];
    rec_net_cache_info info; /* its INFO; rows point into the trainer's */
    int32_t slot0;           /* its first slot of the cache */
    int64_t received;        /* plans received from it */
} opart;

struct rec_cache_trainer {
    const rec_cache_opts *o;
    const volatile sig_atomic_t *stop; /* the caller's stop flag (a signal's number), or NULL */
    FILE *log;
    int resume;              /* a restarted durable job */
    rec_cache_report rep;
    const rec_model_config *cfg; /* the loop's, bound to the job; from the backend on */
    rec_model *m;            /* the loop's model without tables */
    rec_net_cache_info info; /* the job: every oracle's tables and slots */
    int64_t *rows;           /* (F) the tables' rows, from the oracles */
    opart *op;               /* (K) the oracles in table order */
    int K;
    int F, E, S;
    int L, LS;               /* first-order tables (DeepFM, W&D): 1 (else 0), and a value's state floats */
    int V, SW;               /* a row as it travels (rec_net_rows): E + L values, S + LS state floats */
    int b16;                 /* bf16 tables: rows travel as bf16 bits, slots are stepped as bf16 rows */
    rec_embed_rounding rounding;
    uint64_t seed, lin_seed; /* model.c's: the tables', the first-order tables' (their rounding's key) */
    float *vrow;             /* (V) a travelled bf16 row's values widened */
    uint16_t *row16;         /* (E) a slot's row as bf16 bits while it is stepped */
    float *wrows;            /* the maintenance thread's: a write-back frame's rows, fp32 (bf16 tables) */
    int64_t wrows_cap;
    int64_t C, total;        /* cache slots; batches of the job (the flush is batch `total`) */
    float *values, *state;   /* (C, E), (C, S) */
    float *lin, *lin_state;  /* (C), (C, LS) the slots' first-order values and their state */
    float *grad;             /* (C, E) gradients of the touched slots */
    float *lin_grad;         /* (C) their first-order values' */
    int64_t *stamp;          /* (C) the step + 1 that last touched a slot */
    int32_t *touched;        /* (C) */
    float *dlogits;          /* (B) */
    /* sockets: all the maintenance thread's once it runs */
    void *ctx, **ssock, **smon, *wake_m, *wake_t;  /* smon: the servers' handshake monitors */
    rec__zkeys keys;         /* CURVE (o->sec) */
    double timeout;
    int Q;                   /* plans held: depth + 2 */
    batch_plan *ring;
    /* shared, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t ready, done, want;
    _Atomic int64_t at;      /* the batch the training loop is at, -1 before it: a stop names it */
    int64_t committed;       /* durable: the last step server 0 acknowledged committing */
    int64_t acked;           /* durable: the last step whose writes (and every earlier one's) are acknowledged */
    int64_t synced;          /* durable, N trainers: the last step every trainer's writes of are acknowledged */
    int finished, failed;
    rec_status merr;
    char merrmsg[1024];
    /* the maintenance thread's */
    int64_t requested, received, evicted;
    int64_t acks;            /* PUTs and COMMITs not yet acknowledged */
    int64_t *srv_acks;       /* (servers) of them, each server's */
    rec_wbuf w;
    int64_t *by_srv;         /* (C) fetch or evict entry positions grouped by server */
    rec_centry *fetch_tmp;   /* (C) a batch's fetches in server order */
    int64_t *srv_n;          /* (servers + 1) */
    /* the trainers (MPI): this one's rank of N, and the training thread's buffers */
    int rank, N;
    uint64_t job;            /* this run's (every trainer's) id, in each frame to the servers */
    int *cnt;                /* (4 N) send / receive counts and displacements, in floats */
    float *xbuf;             /* rows sent and received, shared gradients */
    int64_t xcap;
    int64_t *sh_stamp;       /* (C) the step + 1 that made a slot shared */
    int32_t *sh_pos;         /* (C) its position among the shared rows */
    /* durable jobs: each step's touched rows written through and committed (EMB_COMMIT) */
    int32_t *slot_f;         /* (C) the row a slot holds, from the fetches */
    int64_t *slot_row;
    int64_t P;               /* floats of the dense state: every tensor of the model without tables */
    commit *cm;              /* (Q) in step order from cm_head */
    int64_t cm_head, cm_n;
    int64_t start;           /* the first batch (a resumed job: the committed step + 1) */
    int64_t n_touched;       /* slots the last step touched (touched[]) */
    int64_t slice;           /* the most rows of this trainer's part of a batch */
    int64_t rows_per_frame;  /* rows of one GET or PUT (about FRAME_BYTES; frame_rows) */
    int64_t max_frame_rows;  /* rows of one GET or PUT at most (its frame under REC_NET_MAX_BODY) */
    rec_model *full;         /* trainer 0, after the flush: the whole model, gathered once (the_whole) */
    rec_net_emb_state states[62]; /* the servers' answers to EMB_HELLO: where a resume starts */
    /* the training thread's place (the backend's next and step) */
    int64_t x;               /* the batch next gave, or the next it gives */
    int64_t global_rows;     /* rows of batch x: the trainers' slices together */
    int64_t stepped;         /* the batch stepped and not yet marked done (its loss not yet
                                logged: a durable job may commit it once done), or -1 */
    pthread_t th;
    int started;             /* the maintenance thread runs, until joined */
    int flushed;             /* every row back on its server (after the last batch) */
};
typedef struct rec_cache_trainer ctrainer;

_Static_assert(sizeof(rec_centry) == 4 * sizeof(float), "a row's name fills 4 floats of a move");

/* The rows of one GET or PUT frame: about FRAME_BYTES, and at most MAX_FRAMES frames to a
 * server per batch (ZeroMQ queues 1000 messages a socket: a server's answers must fit). */
#define FRAME_BYTES ((size_t)256 << 10)
#define MAX_FRAMES 256

/* ---- messages ------------------------------------------------------------------------------ */

/* Receives one message from sock within the deadline into m (initialised), 8-byte aligned, and
 * decodes its header; *body is the frame's body. REC_EIO naming `who` when it stays silent,
 * the peer's ERROR as its status and message. */
static rec_status recv_frame(ctrainer *t, void *sock, const char *who, zmq_msg_t *m, rec_frame_head *h,
                             const uint8_t **body) {
    zmq_pollitem_t it = {sock, 0, ZMQ_POLLIN, 0};
    const double deadline = rec_now() + t->timeout;
    void *mon = NULL; /* the monitor of sock's handshakes: a refusal ends the wait with its cause */
    for (int k = 0; k < t->K; k++)
        if (t->op[k].sock == sock) mon = t->op[k].mon;
    for (int k = 0; t->ssock && k < t->o->n_servers; k++)
        if (t->ssock[k] == sock) mon = t->smon[k];
    int n = 0;
    char why[300];
    for (;;) { /* slices of 100 ms: a stop (Ctrl-C) ends the wait, an interrupted poll is no error */
        const double left = deadline - rec_now();
        if (left <= 0) break;
        if (rec__zmon_failed(mon, 0, t->keys.on, why, sizeof why))
            return rec_errorf(REC_EIO, "%s refused this trainer's connection: %s", who, why);
        n = zmq_poll(&it, 1, left < 0.1 ? (long)(left * 1000) + 1 : 100);
        if (n > 0) break;
        if (n < 0 && zmq_errno() != EINTR) return rec_errorf(REC_EIO, "poll failed: %s", zmq_strerror(zmq_errno()));
        if (t->stop && *t->stop) { /* during the job, at which batch (rectrain cluster reports it) */
            const int64_t at = atomic_load(&t->at);
            char where[48] = "";
            if (at >= 0) snprintf(where, sizeof where, " at batch %lld", (long long)at);
            return rec_errorf(REC_ESTOPPED, "stopped by %s%s while waiting for %s", rec_signal_name(*t->stop), where, who);
        }
    }
    if (n <= 0) return rec_errorf(REC_EIO, "%s did not answer in %.0f s (is it running? --peer-timeout)", who, t->timeout);
    zmq_msg_t raw;
    zmq_msg_init(&raw);
    if (zmq_msg_recv(&raw, sock, 0) < 0) {
        zmq_msg_close(&raw);
        return rec_errorf(REC_EIO, "receiving from %s: %s", who, zmq_strerror(zmq_errno()));
    }
    const uint8_t *frame;
    size_t len;
    rec_status a = rec__zmsg_aligned(m, &raw, &frame, &len);
    zmq_msg_close(&raw);
    REC_TRY(a);
    REC_TRY(rec_frame_head_decode(frame, len, who, h));
    *body = frame + REC_NET_HEAD;
    if (h->type == REC_MSG_ERROR) {
        rec_status s;
        char msg[900];
        REC_TRY(rec_net_error_decode(*body, h->body, &s, msg, sizeof msg));
        return rec_errorf(s, "%s: %s", who, msg);
    }
    return REC_OK;
}

static rec_status send_empty(ctrainer *t, void *sock, int type, uint64_t seq) {
    rec_frame_begin(&t->w, type, 0, seq);
    REC_TRY(rec_frame_end(&t->w));
    return rec__zsend(sock, NULL, &t->w, 0);
}

static const char *srv_name(const ctrainer *t, int k, char *buf, size_t cap) {
    snprintf(buf, cap, "embedding server %d (%s)", k, t->o->servers[k]);
    return buf;
}

/* ---- a row as it travels ------------------------------------------------------------------ */

/* Slot s's row as it travels (to a server, another trainer, a durable step's copy; net.h
 * rec_net_rows): its V values (E, then the first-order value) into v, its SW state floats
 * (the row's, then the first-order value's) into st. */
static void row_out(const ctrainer *t, int32_t s, float *v, float *st) {
    memcpy(v, t->values + (size_t)s * t->E, sizeof(float) * (size_t)t->E);
    if (t->L) v[t->E] = t->lin[s];
    if (t->S) memcpy(st, t->state + (size_t)s * t->S, sizeof(float) * (size_t)t->S);
    if (t->LS) st[t->S] = t->lin_state[s];
}

/* Row i of n travelled rows (rec_net_rows r) into slot s: its values (bf16 bits widened) and
 * state. */
static void row_in_wire(ctrainer *t, int32_t s, const rec_net_rows *r, int64_t i);

/* The reverse: a travelled row (V values, SW state floats) into slot s. */
static void row_in(ctrainer *t, int32_t s, const float *v, const float *st) {
    memcpy(t->values + (size_t)s * t->E, v, sizeof(float) * (size_t)t->E);
    if (t->L) t->lin[s] = v[t->E];
    if (t->S) memcpy(t->state + (size_t)s * t->S, st, sizeof(float) * (size_t)t->S);
    if (t->LS) t->lin_state[s] = st[t->S];
}

static void row_in_wire(ctrainer *t, int32_t s, const rec_net_rows *r, int64_t i) {
    const float *v = r->values ? r->values + (size_t)i * t->V : t->vrow;
    for (int e = 0; !r->values && e < t->V; e++) t->vrow[e] = rec_bf16_to_float(r->values16[(size_t)i * t->V + e]);
    row_in(t, s, v, t->SW ? r->state + (size_t)i * t->SW : NULL);
}

/* bf16 tables: n rows' fp32 values (n, V; bf16 values, exactly) written as they travel (net.h
 * rec_net_rows: their bits, zero-padded to 8 bytes) into out. */
static void values_out16(const ctrainer *t, int64_t n, const float *from, uint8_t *out) {
    uint16_t *o = (uint16_t *)(void *)out;
    for (int64_t i = 0; i < n * t->V; i++) o[i] = rec_bf16_bits(from[i]);
    const size_t used = sizeof(uint16_t) * (size_t)(n * t->V);
    memset(out + used, 0, rec_net_rows_value_bytes(n, t->V, 1) - used);
}

/* The maintenance thread's room for n rows' fp32 values (t->wrows, n V floats). */
static rec_status grow_rows(ctrainer *t, int64_t n) {
    if (n * t->V <= t->wrows_cap) return REC_OK;
    float *q = realloc(t->wrows, sizeof(float) * (size_t)(n * t->V));
    if (!q) return rec_errorf(REC_ENOMEM, "trainer: out of memory for %lld rows to write back", (long long)n);
    t->wrows = q, t->wrows_cap = n * t->V;
    return REC_OK;
}

/* The tables as a server's frames name them (for decoding its answers). */
static rec_net_emb_hello tables_of(const ctrainer *t, int k) {
    return (rec_net_emb_hello){.F = t->F, .E = t->E, .lin = t->L, .shards = t->o->n_servers, .shard = k,
                               .rows = t->rows, .bf16 = t->b16, .rounding = t->b16 ? (int32_t)t->rounding : 0};
}

/* ---- the maintenance thread ------------------------------------------------------------------ */

static int server_of(const ctrainer *t, int64_t row) { return (int)(row % t->o->n_servers); }

/* Groups entries e (n) by server into by_srv, server k's at [srv_n[k], srv_n[k + 1]). */
static void group(ctrainer *t, const rec_centry *e, int64_t n) {
    const int N = t->o->n_servers;
    int64_t at[64];
    memset(t->srv_n, 0, sizeof(int64_t) * (size_t)(N + 1));
    for (int64_t i = 0; i < n; i++) t->srv_n[server_of(t, e[i].row) + 1]++;
    for (int k = 0; k < N; k++) t->srv_n[k + 1] += t->srv_n[k], at[k] = t->srv_n[k];
    for (int64_t i = 0; i < n; i++) t->by_srv[at[server_of(t, e[i].row)]++] = i;
}

/* A message from a server other than the awaited ROWS: a PUT's acknowledgment. */
static rec_status on_server_msg(ctrainer *t, int k, zmq_msg_t *m, const rec_frame_head *h, int *rows) {
    char who[300];
    *rows = 0;
    if (h->type == REC_MSG_EMB_PUT_OK || h->type == REC_MSG_EMB_OK) {
        t->acks--, t->srv_acks[k]--;
        if (h->type == REC_MSG_EMB_OK && k == 0) { /* server 0 committed step seq: the commit point */
            /* the others drop their undo of it (and snapshot it) before any write of a later
             * step reaches them: those wait for the training thread, which waits for this */
            for (int j = 1; j < t->o->n_servers; j++) {
                rec_frame_begin(&t->w, REC_MSG_EMB_COMMIT, t->job, h->seq);
                rec_net_floats_encode(&t->w, NULL, 0);
                REC_TRY(rec_frame_end(&t->w));
                REC_TRY(rec__zsend(t->ssock[j], NULL, &t->w, 0));
                t->acks++, t->srv_acks[j]++;
            }
            pthread_mutex_lock(&t->mu);
            t->committed = (int64_t)h->seq;
            pthread_cond_broadcast(&t->cv);
            pthread_mutex_unlock(&t->mu);
        }
        for (int64_t i = 0; h->type == REC_MSG_EMB_PUT_OK && i < t->cm_n; i++) { /* a written-through step's */
            commit *c = &t->cm[(t->cm_head + i) % t->Q];
            if (c->step == (int64_t)h->seq) c->pending--;
        }
        return REC_OK;
    }
    if (h->type == REC_MSG_EMB_ROWS) {
        *rows = 1;
        return REC_OK;
    }
    return rec_errorf(REC_EFORMAT, "%s sent a %s frame", srv_name(t, k, who, sizeof who), rec_msg_name(h->type));
}

/* Receives from server k until its ROWS answer (acknowledgments before it are counted) or,
 * with want_rows 0, one message. The ROWS message stays in m. */
static rec_status server_recv(ctrainer *t, int k, int want_rows, zmq_msg_t *m, rec_frame_head *h, const uint8_t **body) {
    char who[300];
    for (;;) {
        zmq_msg_close(m);
        zmq_msg_init(m);
        REC_TRY(recv_frame(t, t->ssock[k], srv_name(t, k, who, sizeof who), m, h, body));
        int rows;
        REC_TRY(on_server_msg(t, k, m, h, &rows));
        if (rows && !want_rows) return rec_errorf(REC_EFORMAT, "%s sent rows nobody asked for", who);
        if (rows || !want_rows) return REC_OK;
    }
}

/* One message from server k (an acknowledgment). */
static rec_status take_one(ctrainer *t, int k) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    rec_frame_head h;
    const uint8_t *body;
    rec_status s = server_recv(t, k, 0, &m, &h, &body);
    zmq_msg_close(&m);
    return s;
}

/* Rows per frame of n rows to one server: rows_per_frame, or more when that would take over
 * MAX_FRAMES frames (up to the largest frame). */
static int64_t frame_rows(const ctrainer *t, int64_t n) {
    int64_t r = (n + MAX_FRAMES - 1) / MAX_FRAMES;
    if (r < t->rows_per_frame) r = t->rows_per_frame;
    return r < t->max_frame_rows ? r : t->max_frame_rows;
}

/* Batch x's fetches: GETs to each server, the rows into their slots. */
static rec_status fetch(ctrainer *t, batch_plan *p, int64_t x, int critical) {
    const rec_net_cache_step *st = &p->st;
    const int N = t->o->n_servers, V = t->V, SW = t->SW; /* a row's values and state as they travel */
    group(t, st->fetch, st->n_fetch);
    rec_centry *tmp = t->fetch_tmp; /* the entries in server order (n_fetch <= C) */
    rec_status s = REC_OK;
    for (int k = 0; !s && k < N; k++) {
        const int64_t R = frame_rows(t, t->srv_n[k + 1] - t->srv_n[k]); /* rows a GET asks for: its answer fits a frame */
        for (int64_t a = t->srv_n[k]; !s && a < t->srv_n[k + 1]; a += R) {
            const int64_t n = t->srv_n[k + 1] - a < R ? t->srv_n[k + 1] - a : R;
            for (int64_t i = 0; i < n; i++) tmp[a + i] = st->fetch[t->by_srv[a + i]];
            const rec_net_rows q = {n, tmp + a, NULL, NULL, NULL};
            rec_frame_begin(&t->w, REC_MSG_EMB_GET, t->job, (uint64_t)x);
            rec_net_rows_encode(&t->w, &q, 1, V, SW);
            s = rec_frame_end(&t->w);
            if (!s) s = rec__zsend(t->ssock[k], NULL, &t->w, 0);
        }
    }
    for (int k = 0; !s && k < N; k++) {
        const int64_t R = frame_rows(t, t->srv_n[k + 1] - t->srv_n[k]);
        for (int64_t a = t->srv_n[k]; !s && a < t->srv_n[k + 1]; a += R) {
            const int64_t n = t->srv_n[k + 1] - a < R ? t->srv_n[k + 1] - a : R;
            zmq_msg_t m;
            zmq_msg_init(&m);
            rec_frame_head h;
            const uint8_t *body;
            s = server_recv(t, k, 1, &m, &h, &body);
            rec_net_rows r;
            if (!s) {
                char who[300];
                const rec_net_emb_hello tabs = tables_of(t, k);
                s = rec_net_rows_decode(body, h.body, "EMB_ROWS", 0, 1, &tabs, SW, &r);
                if (!s && r.n != n)
                    s = rec_errorf(REC_EFORMAT, "%s answered %lld rows for %lld", srv_name(t, k, who, sizeof who),
                                   (long long)r.n, (long long)n);
            }
            for (int64_t i = 0; !s && i < n; i++) {
                const int32_t slot = tmp[a + i].slot;
                t->slot_f[slot] = tmp[a + i].f, t->slot_row[slot] = tmp[a + i].row;
                row_in_wire(t, slot, &r, i);
            }
            zmq_msg_close(&m);
        }
    }
    const double bytes = ((t->b16 ? 2.0 : 4.0) * V + 4.0 * SW) * (double)st->n_fetch;
    if (critical) t->rep.fetch_crit_rows += st->n_fetch, t->rep.fetch_crit_bytes += bytes;
    else t->rep.fetch_bg_rows += st->n_fetch, t->rep.fetch_bg_bytes += bytes;
    return s;
}

/* Batch x's evictions: the rows from their slots, a PUT per server (acknowledged later). A
 * durable job writes through instead every row x touched, with the values x left (copied by
 * the training thread), and keeps x's dense state for its commit. */
static rec_status write_back(ctrainer *t, batch_plan *p, int64_t x) {
    const rec_net_cache_step *st = &p->st;
    const int N = t->o->n_servers, V = t->V, SW = t->SW; /* a row's values and state as they travel */
    const int dur = t->o->durable && x < t->total;
    if (t->o->durable && !dur) return REC_OK; /* the flush: every row is on the servers already */
    const rec_centry *ents = dur ? p->dur_e : st->evict;
    const int64_t nents = dur ? p->dur_n : st->n_evict;
    commit *c = NULL;
    if (dur) {
        c = &t->cm[(t->cm_head + t->cm_n++) % t->Q];
        c->step = x, c->pending = 0;
        memcpy(c->dense, p->dur_dense, sizeof(float) * (size_t)t->P);
    }
    group(t, ents, nents);
    for (int k = 0; k < N; k++) {
        const int64_t R = frame_rows(t, t->srv_n[k + 1] - t->srv_n[k]);
        for (int64_t a = t->srv_n[k]; a < t->srv_n[k + 1]; a += R) {
        const int64_t n = t->srv_n[k + 1] - a < R ? t->srv_n[k + 1] - a : R;
        rec_frame_begin(&t->w, REC_MSG_EMB_PUT, t->job, (uint64_t)x);
        rec_wbuf *w = &t->w;
        /* rec_net_rows_encode's layout, the rows gathered from their slots */
        const int64_t cnt = n;
        rec_net_rows hdr = {cnt, NULL, NULL, NULL, NULL};
        rec_net_rows_encode(w, &hdr, 0, V, SW);
        const size_t vbytes = rec_net_rows_value_bytes(n, V, t->b16);
        const size_t need = sizeof(rec_centry) * (size_t)n + vbytes + sizeof(float) * (size_t)(n * SW);
        rec_centry *ce = rec_wbuf_grab(w, need);
        REC_TRY(w->err);
        if (t->b16) REC_TRY(grow_rows(t, n));
        /* the values into the frame (bf16: gathered first, then written as their bits), the state after them */
        float *val = t->b16 ? t->wrows : (float *)(ce + n), *sv = (float *)(void *)((uint8_t *)(ce + n) + vbytes);
        for (int64_t i = 0; i < n; i++) {
            const int64_t j = t->by_srv[a + i];
            const rec_centry *e = &ents[j];
            ce[i] = *e;
            if (!dur) {
                row_out(t, e->slot, val + (size_t)i * V, sv + (size_t)i * SW);
                continue;
            }
            const float *v = p->dur_v + (size_t)j * (V + SW); /* keep_step's copy, as it travels */
            memcpy(val + (size_t)i * V, v, sizeof(float) * (size_t)V);
            if (SW) memcpy(sv + (size_t)i * SW, v + V, sizeof(float) * (size_t)SW);
        }
        if (t->b16) values_out16(t, n, val, (uint8_t *)(ce + n));
        REC_TRY(rec_frame_end(w));
        REC_TRY(rec__zsend(t->ssock[k], NULL, w, 0));
        t->acks++, t->srv_acks[k]++;
        if (c) c->pending++;
        }
    }
    t->rep.write_rows += nents;
    t->rep.write_bytes += ((t->b16 ? 2.0 : 4.0) * V + 4.0 * SW) * (double)nents;
    return REC_OK;
}

/* Commits, in step order, each written-through step whose PUTs are all acknowledged (N
 * trainers: every trainer's, `synced`): server 0 takes its dense state (the commit point) from
 * trainer 0; its acknowledgment commits the step on the others (on_server_msg). */
static rec_status commit_ready(ctrainer *t) {
    int64_t acked = t->evicted < t->total ? t->evicted : t->total - 1; /* the last step written through */
    for (int64_t i = 0; i < t->cm_n; i++)
        if (t->cm[(t->cm_head + i) % t->Q].pending) {
            acked = t->cm[(t->cm_head + i) % t->Q].step - 1;
            break;
        }
    pthread_mutex_lock(&t->mu);
    if (acked > t->acked) t->acked = acked, pthread_cond_broadcast(&t->cv);
    const int64_t synced = t->N > 1 ? t->synced : acked;
    pthread_mutex_unlock(&t->mu);
    while (t->cm_n && t->cm[t->cm_head].pending == 0 && t->cm[t->cm_head].step <= synced) {
        commit *c = &t->cm[t->cm_head];
        if (t->rank == 0) {
            rec_frame_begin(&t->w, REC_MSG_EMB_COMMIT, t->job, (uint64_t)c->step);
            rec_net_floats_encode(&t->w, c->dense, t->P);
            REC_TRY(rec_frame_end(&t->w));
            REC_TRY(rec__zsend(t->ssock[0], NULL, &t->w, 0));
            t->acks++, t->srv_acks[0]++;
        }
        c->step = -1;
        t->cm_head = (t->cm_head + 1) % t->Q;
        t->cm_n--;
    }
    return REC_OK;
}

/* A server silent on writes it was sent, named. */
static rec_status unacked(ctrainer *t) {
    int k = 0;
    while (k < t->o->n_servers - 1 && !t->srv_acks[k]) k++;
    char who[300];
    return rec_errorf(REC_EIO, "%s did not acknowledge %lld write(s) in %.0f s (is it down? a --durable job resumes "
                      "with --resume)", srv_name(t, k, who, sizeof who), (long long)t->srv_acks[k], t->timeout);
}

static void batch_plan_release(batch_plan *p) {
    for (int k = 0; k < REC_CACHE_MAX_ORACLES; k++)
        if (p->have >> k & 1) zmq_msg_close(&p->msg[k]);
    p->have = 0;
}

static rec_centry *put_entries(rec_centry *to, const rec_centry *e, int64_t n, const opart *o) {
    for (int64_t i = 0; i < n; i++) to[i] = (rec_centry){e[i].slot + o->slot0, e[i].f + o->info.table0, e[i].row};
    return to + n;
}

static rec_cmove *put_moves(rec_cmove *to, const rec_cmove *m, int64_t n, const opart *o) {
    for (int64_t i = 0; i < n; i++) to[i] = (rec_cmove){m[i].slot + o->slot0, m[i].peer};
    return to + n;
}

static int32_t *put_slots(int32_t *to, const int32_t *v, int64_t n, const opart *o) {
    for (int64_t i = 0; i < n; i++) to[i] = v[i] + o->slot0;
    return to + n;
}

/* Batch x's plan whole, every oracle's part in: their lists one after another in oracle order
 * (the same on every trainer, so the shared rows line up), slots and tables made the job's.
 * The oracles read the same batch; the labels and dense values must agree. */
static rec_status merge(ctrainer *t, batch_plan *p, int64_t x) {
    rec_net_cache_step *st = &p->st;
    *st = p->part[0];
    st->batch.sparse = p->sparse, st->batch.n_sparse = t->F;
    if (t->K > 1) {
        rec_net_cache_step n = {0};
        for (int k = 0; k < t->K; k++) {
            const rec_net_cache_step *q = &p->part[k];
            n.n_fetch += q->n_fetch, n.n_evict += q->n_evict, n.n_pre_send += q->n_pre_send;
            n.n_pre_recv += q->n_pre_recv, n.n_shared += q->n_shared, n.n_apply += q->n_apply;
            n.n_post_send += q->n_post_send, n.n_post_recv += q->n_post_recv;
        }
        const size_t need = sizeof(rec_centry) * (size_t)(n.n_fetch + n.n_evict) +
                            sizeof(rec_cmove) * (size_t)(n.n_pre_send + n.n_pre_recv + n.n_post_send + n.n_post_recv) +
                            sizeof(int32_t) * (size_t)(n.n_shared + n.n_apply) + 8;
        if (need > p->lists_cap) {
            void *q = realloc(p->lists, need);
            if (!q) return rec_errorf(REC_ENOMEM, "trainer: out of memory merging the oracles' plans");
            p->lists = q, p->lists_cap = need;
        }
        rec_centry *fe = p->lists, *ev = fe + n.n_fetch;
        rec_cmove *ps = (rec_cmove *)(ev + n.n_evict), *pr = ps + n.n_pre_send, *qs = pr + n.n_pre_recv,
                  *qr = qs + n.n_post_send;
        int32_t *sh = (int32_t *)(qr + n.n_post_recv), *ap = sh + n.n_shared;
        n.fetch = fe, n.evict = ev, n.pre_send = ps, n.pre_recv = pr, n.post_send = qs, n.post_recv = qr;
        n.shared = sh, n.apply = ap;
        for (int k = 0; k < t->K; k++) {
            const rec_net_cache_step *q = &p->part[k];
            const opart *o = &t->op[k];
            fe = put_entries(fe, q->fetch, q->n_fetch, o), ev = put_entries(ev, q->evict, q->n_evict, o);
            ps = put_moves(ps, q->pre_send, q->n_pre_send, o), pr = put_moves(pr, q->pre_recv, q->n_pre_recv, o);
            qs = put_moves(qs, q->post_send, q->n_post_send, o), qr = put_moves(qr, q->post_recv, q->n_post_recv, o);
            sh = put_slots(sh, q->shared, q->n_shared, o), ap = put_slots(ap, q->apply, q->n_apply, o);
            const rec_batch *a = &st->batch, *b = &q->batch;
            if (b->n != a->n || (a->n && (memcmp(a->label, b->label, sizeof(float) * (size_t)a->n) ||
                                          memcmp(a->dense, b->dense, sizeof(float) * (size_t)(a->n * a->n_dense)))))
                return rec_errorf(REC_EINVAL, "%s and %s sent different rows as batch %lld: start the oracles with the "
                                  "same --data, --config, --batch, --epochs and --shuffle", t->op[0].who, o->who,
                                  (long long)x);
        }
        n.batch = st->batch;
        *st = n;
    }
    if (x < t->total && (st->batch.n < 1 || st->batch.n > t->slice))
        return rec_errorf(REC_EFORMAT, "the oracle's plan of batch %lld has %lld rows (1 to %lld)", (long long)x,
                          (long long)st->batch.n, (long long)t->slice);
    return REC_OK;
}

/* Oracle k's answer to a CACHE_NEXT: its part of the plan of the next batch it owes; the
 * plan is whole (t->received advances) once every oracle's part is in. */
static rec_status on_oracle(ctrainer *t, int k) {
    opart *o = &t->op[k];
    const int64_t x = o->received;
    batch_plan *p = &t->ring[x % t->Q];
    if (x >= t->requested || (p->have >> k & 1)) { /* nothing asked, or the ring's slot still in use */
        zmq_msg_t m;
        zmq_msg_init(&m);
        zmq_msg_recv(&m, o->sock, ZMQ_DONTWAIT);
        zmq_msg_close(&m);
        return rec_errorf(REC_EFORMAT, "%s sent a plan nobody asked for (batch %lld)", o->who, (long long)x);
    }
    zmq_msg_t *m = &p->msg[k];
    zmq_msg_init(m);
    rec_frame_head h;
    const uint8_t *body;
    rec_status s = recv_frame(t, o->sock, o->who, m, &h, &body);
    if (!s && (h.type != REC_MSG_CACHE_STEP || (int64_t)h.seq != x))
        s = rec_errorf(REC_EFORMAT, "%s sent %s %lld while batch %lld's plan was due", o->who, rec_msg_name(h.type),
                       (long long)h.seq, (long long)x);
    rec_jagged *sp = p->sparse + o->info.table0;
    if (!s) s = rec_net_cache_step_decode(body, h.body, &o->info, &p->part[k], sp, &p->room[k]);
    if (s) {
        zmq_msg_close(m);
        return s;
    }
    for (int f = 0; o->slot0 && f < o->info.F; f++) /* its slots, the job's (in the message, which is ours) */
        for (int64_t i = 0; i < sp[f].offsets[p->part[k].batch.n]; i++) sp[f].ids32[i] += o->slot0;
    p->have |= UINT64_C(1) << k;
    o->received++;
    if (p->have + 1 != UINT64_C(1) << t->K) return REC_OK;
    REC_TRY(merge(t, p, x));
    t->received = x + 1; /* parts come in batch order from each oracle: plans are whole in order */
    return REC_OK;
}

static void fail(ctrainer *t, rec_status s) {
    pthread_mutex_lock(&t->mu);
    t->failed = 1;
    t->merr = s;
    snprintf(t->merrmsg, sizeof t->merrmsg, "%s", rec_errmsg());
    pthread_cond_broadcast(&t->cv);
    pthread_mutex_unlock(&t->mu);
}

static void *maintain(void *arg) {
    ctrainer *t = arg;
    rec_status s = REC_OK;
    int64_t fetched = t->start - 1; /* the last batch whose rows are in */
    for (;;) {
        pthread_mutex_lock(&t->mu);
        const int64_t done = t->done, want = t->want;
        /* durable, N trainers: a row another trainer wrote through is read once that write is
         * acknowledged (rows written at step `synced` or before) */
        const int64_t safe = t->o->durable && t->N > 1 && t->synced < done ? t->synced : done;
        const int stop = t->failed;
        pthread_mutex_unlock(&t->mu);
        if (stop) break;
        int worked = 0;
        /* write-backs first: a later fetch may reuse the slots, or read the rows */
        while (!s && t->evicted < done) {
            batch_plan *p = &t->ring[(t->evicted + 1) % t->Q];
            s = write_back(t, p, t->evicted + 1);
            batch_plan_release(p);
            t->evicted++;
            worked = 1;
        }
        if (!s) s = commit_ready(t);
        /* after the flush (batch `total`, written back above): every write-back acknowledged */
        if (!s && t->evicted == t->total) {
            double heard = rec_now();
            int halted = 0;
            while (!s && !halted && (t->acks > 0 || t->cm_n > 0)) {
                zmq_pollitem_t its[62];
                const int N = t->o->n_servers;
                for (int k = 0; k < N; k++) its[k] = (zmq_pollitem_t){t->ssock[k], 0, ZMQ_POLLIN, 0};
                const int n = zmq_poll(its, N, 100); /* slices: the training thread may give up (a stop) */
                if (n < 0 && zmq_errno() != EINTR) s = rec_errorf(REC_EIO, "trainer: poll failed: %s", zmq_strerror(zmq_errno()));
                if (n <= 0) {
                    pthread_mutex_lock(&t->mu);
                    halted = t->failed;
                    pthread_mutex_unlock(&t->mu);
                    if (!s && !halted && rec_now() - heard > t->timeout) s = unacked(t);
                    continue;
                }
                heard = rec_now();
                for (int k = 0; !s && k < N; k++)
                    if (its[k].revents & ZMQ_POLLIN) s = take_one(t, k);
                if (!s) s = commit_ready(t);
            }
            if (!s && !halted) {
                pthread_mutex_lock(&t->mu);
                t->finished = 1;
                pthread_cond_broadcast(&t->cv);
                pthread_mutex_unlock(&t->mu);
            }
            break;
        }
        /* plans ahead: as many as the ring holds */
        while (!s && t->requested <= t->total && t->requested - t->evicted - 1 < t->Q) {
            for (int k = 0; !s && k < t->K; k++) s = send_empty(t, t->op[k].sock, REC_MSG_CACHE_NEXT, (uint64_t)t->requested);
            t->requested++;
        }
        /* the next batch's rows, `depth` batches ahead of training at most */
        const int64_t x = fetched + 1;
        if (!s && x <= t->total && x < t->received && x <= safe + t->info.depth) { /* x == total: the flush */
            if (x < t->total) s = fetch(t, &t->ring[x % t->Q], x, x <= done + 1 || want >= x);
            if (!s) {
                fetched = x;
                pthread_mutex_lock(&t->mu);
                t->ready = x;
                pthread_cond_broadcast(&t->cv);
                pthread_mutex_unlock(&t->mu);
            }
            worked = 1;
        }
        if (s) break;
        /* wait for an oracle, an acknowledgment or the training thread */
        const int N = t->o->n_servers, K = t->K;
        zmq_pollitem_t its[1 + REC_CACHE_MAX_ORACLES + 62];
        its[0] = (zmq_pollitem_t){t->wake_m, 0, ZMQ_POLLIN, 0};
        for (int k = 0; k < K; k++) its[1 + k] = (zmq_pollitem_t){t->op[k].sock, 0, ZMQ_POLLIN, 0};
        for (int k = 0; k < N; k++) its[1 + K + k] = (zmq_pollitem_t){t->ssock[k], 0, ZMQ_POLLIN, 0};
        const int n = zmq_poll(its, 1 + K + N, worked ? 0 : (long)(t->timeout * 1000));
        if (n < 0 && zmq_errno() != EINTR) {
            s = rec_errorf(REC_EIO, "trainer: poll failed: %s", zmq_strerror(zmq_errno()));
            break;
        }
        for (int k = 0; n == 0 && !worked && k < K; k++)
            if (t->requested > t->op[k].received) {
                s = rec_errorf(REC_EIO, "%s did not answer in %.0f s (is it running?)", t->op[k].who, t->timeout);
                break;
            }
        if (s) break;
        if (n == 0 && !worked && t->acks > 0) { /* (steps waiting for other trainers wait for the training thread) */
            s = unacked(t);
            break;
        }
        if (its[0].revents & ZMQ_POLLIN) {
            char c[16];
            while (zmq_recv(t->wake_m, c, sizeof c, ZMQ_DONTWAIT) >= 0) {}
        }
        for (int k = 0; !s && k < K; k++)
            if (its[1 + k].revents & ZMQ_POLLIN) s = on_oracle(t, k);
        for (int k = 0; !s && k < N; k++)
            if (its[1 + K + k].revents & ZMQ_POLLIN) s = take_one(t, k);
        if (s) break;
    }
    if (s) fail(t, s);
    return NULL;
}

/* ---- the training thread ----------------------------------------------------------------------- */

static rec_status grow_x(ctrainer *t, int64_t floats) {
    if (floats <= t->xcap) return REC_OK;
    float *q = realloc(t->xbuf, sizeof(float) * (size_t)floats);
    if (!q) return rec_errorf(REC_ENOMEM, "trainer: out of memory for %lld floats of rows", (long long)floats);
    t->xbuf = q;
    t->xcap = floats;
    return REC_OK;
}

/* Rows to other trainers and from them (LRPP moves), one all-to-all-v: a peer's rows in the
 * order of the lists, which the oracle wrote alike on both sides. A row travels with its name
 * (table and row: a durable job writes it through wherever it is stepped), its values and state. */
static rec_status exchange(ctrainer *t, const rec_cmove *send, int64_t ns, const rec_cmove *recv, int64_t nr) {
    const int N = t->N, W = 4 + t->V + t->SW; /* floats of a row: the name in the first 4, then as it travels */
    int *sc = t->cnt, *sd = sc + N, *rc = sd + N, *rd = rc + N; /* in bytes */
    memset(sc, 0, sizeof(int) * (size_t)N);
    memset(rc, 0, sizeof(int) * (size_t)N);
    for (int64_t i = 0; i < ns; i++) sc[send[i].peer] += 4 * W;
    for (int64_t i = 0; i < nr; i++) rc[recv[i].peer] += 4 * W;
    int64_t at = 0;
    for (int p = 0; p < N; p++) sd[p] = (int)at, at += sc[p];
    const int64_t sn = at;
    for (int p = 0; p < N; p++) rd[p] = (int)(at - sn), at += rc[p];
    if (at >= INT32_MAX) return rec_errorf(REC_EINVAL, "trainer: %lld bytes of rows to move at once (MPI counts)", (long long)at);
    REC_TRY(grow_x(t, at / 4 + 1));
    float *buf = t->xbuf, *got = t->xbuf + sn / 4;
    for (int p = 0, k = 0; p < N; p++)
        for (int64_t i = 0; i < ns; i++)
            if (send[i].peer == p) {
                const int32_t s = send[i].slot;
                float *row = buf + (size_t)k++ * W;
                const rec_centry name = {s, t->slot_f[s], t->slot_row[s]};
                memcpy(row, &name, sizeof name);
                row_out(t, s, row + 4, row + 4 + t->V);
            }
    MPI_TRY(MPI_Alltoallv(buf, sc, sd, MPI_BYTE, got, rc, rd, MPI_BYTE, rec__comm()));
    for (int p = 0, k = 0; p < N; p++)
        for (int64_t i = 0; i < nr; i++)
            if (recv[i].peer == p) {
                const int32_t s = recv[i].slot;
                const float *row = got + (size_t)k++ * W;
                rec_centry name;
                memcpy(&name, row, sizeof name);
                t->slot_f[s] = name.f, t->slot_row[s] = name.row;
                row_in(t, s, row + 4, row + 4 + t->V);
            }
    return REC_OK;
}

/* Slot s stepped from its gradient g (E floats) and its first-order value's gl, as one process
 * steps a row of a table and the row of its dim-1 first-order table (model.c
 * rec_model_update: the same optimizer and rate, each with its own state). */
static void step_slot(ctrainer *t, float lr, int32_t s, const float *g, float gl) {
    const rec_sparse_opt_config *o = &t->cfg->sparse_opt;
    float *p = t->values + (size_t)s * t->E, *st = t->S ? t->state + (size_t)s * t->S : NULL;
    float *lp = t->lin + s, *lst = t->LS ? t->lin_state + s : NULL;
    if (!t->b16) {
        rec_sparse_opt_step(o, lr, g, t->E, 0, t->E, p, st);
        if (t->L) rec_sparse_opt_step(o, lr, &gl, 1, 0, 1, lp, lst);
        return;
    }
    /* bf16: the row's bits (exact: the slot holds bf16 values) stepped as one process steps
     * row slot_row of table slot_f at this step, widened back */
    const int64_t step = rec_model_steps(t->m);
    const rec_bf16_key k = {t->rounding, t->seed, step, t->slot_f[s], t->slot_row[s], 0};
    for (int e = 0; e < t->E; e++) t->row16[e] = rec_bf16_bits(p[e]);
    rec_sparse_opt_step_bf16(o, lr, g, t->E, 0, t->E, t->row16, st, &k);
    for (int e = 0; e < t->E; e++) p[e] = rec_bf16_to_float(t->row16[e]);
    if (!t->L) return;
    const rec_bf16_key lk = {t->rounding, t->lin_seed, step, t->slot_f[s], t->slot_row[s], 0};
    uint16_t l16 = rec_bf16_bits(*lp);
    rec_sparse_opt_step_bf16(o, lr, &gl, 1, 0, 1, &l16, lst, &lk);
    *lp = rec_bf16_to_float(l16);
}

/* One step on batch b (this trainer's slice; ids are slots): the rows it lacks from the other
 * trainers, pooling from the cache, dense forward and backward, each touched slot's gradient
 * summed in position order (as backward.c sums a row); shared slots' gradients summed over the
 * trainers; every slot stepped by those holding it; the rows to evict to their owners. One
 * trainer: the one-process arithmetic exactly (rec_bce_forward_backward over the batch). */
static rec_status step(ctrainer *t, const rec_net_cache_step *p, int64_t x, double *loss) {
    const rec_batch *b = &p->batch;
    const int F = t->F, E = t->E, N = t->N, G = E + t->L; /* G: a shared row's gradient floats */
    const rec_model_config *c = t->cfg;
    if (N > 1) REC_TRY(exchange(t, p->pre_send, p->n_pre_send, p->pre_recv, p->n_pre_recv));
    float *out = rec_model_pooled(t->m, 0);
    for (int f = 0; f < F; f++) {
        const rec_jagged *j = &b->sparse[f];
        rec_embed_pool_bags(t->values, t->C, E, c->pooling, j->offsets, j->ids32, j->weights, b->n, out + (size_t)f * E,
                            F * E);
    }
    float *lout = rec_model_pooled(t->m, 1); /* (B, F): the first-order tables pool as dim-1 tables */
    for (int f = 0; t->L && f < F; f++) {
        const rec_jagged *j = &b->sparse[f];
        rec_embed_pool_bags(t->lin, t->C, 1, c->pooling, j->offsets, j->ids32, j->weights, b->n, lout + f, F);
    }
    const float *logits;
    REC_TRY(rec_model_forward_pooled(t->m, b, &logits));
    if (N == 1) {
        REC_TRY(rec_bce_forward_backward((int)b->n, logits, b->label, loss, t->dlogits));
    } else { /* the loss over the global batch (its rows summed in next): this slice's part of
              * the mean, and its gradient */
        const double n = (double)t->global_rows;
        double sum = rec_bce_slice_sum(b->n, logits, b->label, n, t->dlogits);
        MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_DOUBLE, MPI_SUM, rec__comm()));
        *loss = sum / n;
    }
    REC_TRY(rec_model_backward(t->m, b, t->dlogits));
    if (N > 1)
        MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, rec_model_dense_grads(t->m), (int)rec_model_n_dense_params(t->m), MPI_FLOAT,
                              MPI_SUM, rec__comm()));
    const float *demb = rec_model_emb_grad(t->m, 0), *dlin = rec_model_emb_grad(t->m, 1); /* (B, F E), (B, F) */
    int64_t nt = 0;
    for (int64_t i = 0; i < b->n; i++)
        for (int f = 0; f < F; f++) {
            const rec_jagged *j = &b->sparse[f];
            const int64_t lo = j->offsets[i], hi = j->offsets[i + 1];
            for (int64_t k = lo; k < hi; k++) { /* a slot's first id of the step: its gradient from 0 */
                const int32_t s = j->ids32[k];
                if (t->stamp[s] == x + 1) continue;
                t->stamp[s] = x + 1;
                memset(t->grad + (size_t)s * E, 0, sizeof(float) * (size_t)E);
                if (t->L) t->lin_grad[s] = 0;
                t->touched[nt++] = s;
            }
            rec_embed_scatter_bag(demb + (size_t)i * F * E + (size_t)f * E, E, c->pooling, j->ids32, j->weights, lo, hi,
                                  t->grad);
            if (t->L)
                rec_embed_scatter_bag(dlin + (size_t)i * F + f, 1, c->pooling, j->ids32, j->weights, lo, hi, t->lin_grad);
        }
    const double scale = rec_lr_scale(&c->schedule, rec_model_steps(t->m));
    const float lr = (float)(c->sparse_opt.lr * scale);
    if (p->n_shared) { /* shared rows: gradients (E, then the first-order value's) summed in rank
                        * order at rank 0, the sums to all */
        REC_TRY(grow_x(t, 2 * p->n_shared * G + 1));
        float *mine = t->xbuf, *sum = t->xbuf + p->n_shared * G;
        for (int64_t i = 0; i < p->n_shared; i++) {
            const int32_t s = p->shared[i];
            t->sh_stamp[s] = x + 1, t->sh_pos[s] = (int32_t)i;
            const int used = t->stamp[s] == x + 1;
            if (used) memcpy(mine + i * G, t->grad + (size_t)s * E, sizeof(float) * (size_t)E);
            else memset(mine + i * G, 0, sizeof(float) * (size_t)E);
            if (t->L) mine[i * G + E] = used ? t->lin_grad[s] : 0.0f;
        }
        MPI_TRY(MPI_Reduce(mine, sum, (int)(p->n_shared * G), MPI_FLOAT, MPI_SUM, 0, rec__comm()));
        MPI_TRY(MPI_Bcast(sum, (int)(p->n_shared * G), MPI_FLOAT, 0, rec__comm()));
        for (int64_t i = 0; i < p->n_apply; i++) {
            const int32_t s = p->apply[i];
            if (t->sh_stamp[s] != x + 1)
                return rec_errorf(REC_EFORMAT, "the oracle's plan of batch %lld steps slot %d, which is not shared", (long long)x, s);
            const float *g = sum + (size_t)t->sh_pos[s] * G;
            step_slot(t, lr, s, g, t->L ? g[E] : 0.0f);
        }
    }
    for (int64_t i = 0; i < nt; i++) { /* the rows only this trainer uses */
        const int32_t s = t->touched[i];
        if (p->n_shared && t->sh_stamp[s] == x + 1) continue;
        step_slot(t, lr, s, t->grad + (size_t)s * E, t->L ? t->lin_grad[s] : 0.0f);
    }
    REC_TRY(rec_model_update_dense(t->m, scale));
    rec_model_set_steps(t->m, rec_model_steps(t->m) + 1);
    for (int64_t i = 0; i < p->n_apply; i++) { /* shared rows stepped here, unused here: changed all the same */
        const int32_t s = p->apply[i];
        if (t->stamp[s] != x + 1) t->stamp[s] = x + 1, t->touched[nt++] = s;
    }
    if (N > 1) REC_TRY(exchange(t, p->post_send, p->n_post_send, p->post_recv, p->n_post_recv));
    t->n_touched = nt;
    return REC_OK;
}

/* Durable: what step x leaves for its write-through and commit (the maintenance thread sends it
 * once x is done, while the next steps change the cache): the touched rows, the dense state. */
static rec_status keep_step(ctrainer *t, batch_plan *p) {
    const int W = t->V + t->SW; /* a row as it travels */
    if (t->n_touched > p->dur_cap) {
        rec_centry *e = realloc(p->dur_e, sizeof(rec_centry) * (size_t)t->n_touched);
        if (e) p->dur_e = e;
        float *v = realloc(p->dur_v, sizeof(float) * (size_t)(t->n_touched * W));
        if (v) p->dur_v = v;
        if (!e || !v) return rec_errorf(REC_ENOMEM, "trainer: out of memory keeping a step's rows");
        p->dur_cap = t->n_touched;
    }
    if (!p->dur_dense && !(p->dur_dense = malloc(sizeof(float) * (size_t)(t->P + 1))))
        return rec_errorf(REC_ENOMEM, "trainer: out of memory keeping the dense state");
    for (int64_t i = 0; i < t->n_touched; i++) {
        const int32_t s = t->touched[i];
        p->dur_e[i] = (rec_centry){s, t->slot_f[s], t->slot_row[s]};
        row_out(t, s, p->dur_v + (size_t)i * W, p->dur_v + (size_t)i * W + t->V);
    }
    p->dur_n = t->n_touched;
    const rec_tensor *ts;
    const int n = rec_model_tensors(t->m, &ts);
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        memcpy(p->dur_dense + at, ts[i].data, sizeof(float) * (size_t)rec_tensor_numel(&ts[i]));
        at += rec_tensor_numel(&ts[i]);
    }
    return REC_OK;
}

/* ---- the job, from the oracles ------------------------------------------------------------------ */

/* Oracle k's INFO into o->info (its table sizes into t->rows), checked against the job so far
 * (*job, from the oracles before it): one range of tables each, in table order; the same data
 * and trainers. */
static rec_status oracle_info(ctrainer *t, int k, rec_net_cache_info *job) {
    opart *o = &t->op[k];
    zmq_msg_t m;
    zmq_msg_init(&m);
    rec_frame_head h;
    const uint8_t *body;
    rec_net_cache_info *ci = &o->info;
    rec_status s = recv_frame(t, o->sock, o->who, &m, &h, &body);
    if (!s && h.type != REC_MSG_CACHE_INFO)
        s = rec_errorf(REC_EFORMAT, "%s answered %s to CACHE_HELLO", o->who, rec_msg_name(h.type));
    if (!s) s = rec_net_cache_info_decode(body, h.body, ci);
    if (!s && (ci->trainers != t->N || ci->rank != t->rank))
        s = rec_errorf(REC_EINVAL, "%s answered rank %d of %d trainers to trainer %d of %d", o->who, ci->rank,
                       ci->trainers, t->rank, t->N);
    const int tables = k ? job->F : ci->tables;
    if (!s && k && (ci->n_dense != job->n_dense || ci->policy != job->policy || ci->batch != job->batch ||
                    ci->batches != job->batches || ci->tables != tables))
        s = rec_errorf(REC_EINVAL, "%s and %s plan different jobs (%d and %d tables, %s and %s, batches of %lld and "
                       "%lld, %lld and %lld of them): start the oracles with the same options but --tables and "
                       "--cache-rows", t->op[0].who, o->who, tables, ci->tables, rec_cache_policy_name(job->policy),
                       rec_cache_policy_name(ci->policy), (long long)job->batch, (long long)ci->batch,
                       (long long)job->batches, (long long)ci->batches);
    const int next = k ? t->op[k - 1].info.table0 + t->op[k - 1].info.F : 0;
    if (!s && ci->table0 != next)
        s = rec_errorf(REC_EINVAL, "%s plans tables %d to %d, and the next of the job's %d are %d on: give --oracle-cacher "
                       "one oracle per range of tables, in table order (oracle --tables LO:HI)", o->who, ci->table0,
                       ci->table0 + ci->F - 1, tables, next);
    if (!s && !t->rows && !(t->rows = malloc(sizeof(int64_t) * (size_t)tables)))
        s = rec_errorf(REC_ENOMEM, "trainer: out of memory");
    if (!s) memcpy(t->rows + ci->table0, ci->rows, sizeof(int64_t) * (size_t)ci->F);
    ci->rows = s ? NULL : t->rows + ci->table0;
    zmq_msg_close(&m);
    REC_TRY(s);
    o->slot0 = (int32_t)(k ? job->capacity : 0);
    if (!k) {
        *job = *ci;
        job->F = job->tables = ci->tables, job->table0 = 0, job->rows = t->rows, job->capacity = 0;
    }
    if (job->capacity + ci->capacity >= INT32_MAX)
        return rec_errorf(REC_EINVAL, "the oracles' caches hold %lld rows together (at most %d)",
                          (long long)(job->capacity + ci->capacity), INT32_MAX - 1);
    job->capacity += ci->capacity;
    if (ci->depth < job->depth) job->depth = ci->depth; /* a fetch no earlier than every plan allows */
    if (ci->lookahead < job->lookahead) job->lookahead = ci->lookahead;
    return REC_OK;
}

/* CACHE_HELLO (this trainer's rank of N, the first batch) to every oracle, and the job from
 * their INFOs into t->info; a resumed job's must be the one this trainer was set up for. */
static rec_status say_hello(ctrainer *t, int64_t start) {
    for (int k = 0; k < t->K; k++) {
        rec_frame_begin(&t->w, REC_MSG_CACHE_HELLO, 0, 0);
        rec_net_cache_hello_encode(&t->w, t->rank, t->N, start);
        REC_TRY(rec_frame_end(&t->w));
        REC_TRY(rec__zsend(t->op[k].sock, NULL, &t->w, 0));
    }
    rec_net_cache_info job = {0};
    for (int k = 0; k < t->K; k++) REC_TRY(oracle_info(t, k, &job));
    const rec_net_cache_info *o = &t->op[t->K - 1].info;
    if (o->table0 + o->F != job.F)
        return rec_errorf(REC_EINVAL, "the oracles on --oracle-cacher plan tables 0 to %d of %d: start one for the others "
                          "(oracle --tables %d:%d)", o->table0 + o->F - 1, job.F, o->table0 + o->F, job.F);
    if (t->C && (job.F != t->F || job.capacity != t->C || job.depth != t->info.depth || job.batch != t->info.batch ||
                 job.batches != t->total))
        return rec_errorf(REC_EINVAL, "the oracles answered another job than the one this trainer started (tables, "
                          "cache, depth or batches): restart them with the job's options");
    t->info = job;
    return REC_OK;
}

/* ---- resuming a durable job ------------------------------------------------------------------- */


/* Trainer 0 of a restarted job: it goes on from step *out, the last one server 0 committed.
 * Every server undoes what came after it; the dense state comes from server 0. */
static rec_status resume_servers(ctrainer *t, const rec_net_emb_state *st, int64_t *out) {
    char who[300];
    const int N = t->o->n_servers;
    int64_t c = st[0].committed, low = c;
    int undo = 1; /* every server can undo back to c: it has every write of c and before, and the
                   * undo of every later one (its commit of c may not have come yet) */
    for (int k = 0; k < N; k++) {
        undo &= st[k].committed <= c && !st[k].restored;
        if (st[k].committed < low) low = st[k].committed;
    }
    if (!undo) { /* a server restarted from its snapshot: everyone goes back to that step */
        c = low;
        int lk = 0;
        while (st[lk].committed != c) lk++;
        for (int k = 0; k < N; k++)
            if (st[k].snap[0] != c && st[k].snap[1] != c) {
                char other[300];
                return rec_errorf(REC_EINVAL, "--resume: %s restarted at step %lld, and %s keeps snapshots of steps %lld "
                                  "and %lld only: the job cannot go back to one step on every server",
                                  srv_name(t, lk, who, sizeof who), (long long)c, srv_name(t, k, other, sizeof other),
                                  (long long)st[k].snap[0], (long long)st[k].snap[1]);
            }
    }
    if (c < 0)
        return rec_errorf(REC_EINVAL, "--resume: %s has no committed step to resume from (was the job run with "
                          "--durable?)", srv_name(t, 0, who, sizeof who));
    for (int k = 0; k < N; k++) {
        rec_frame_begin(&t->w, undo ? REC_MSG_EMB_ROLLBACK : REC_MSG_EMB_RESTORE, t->job, (uint64_t)c);
        REC_TRY(rec_frame_end(&t->w));
        REC_TRY(rec__zsend(t->ssock[k], NULL, &t->w, 0));
    }
    rec_frame_begin(&t->w, REC_MSG_EMB_DENSE_GET, t->job, (uint64_t)c); /* server 0: after its rollback */
    REC_TRY(rec_frame_end(&t->w));
    REC_TRY(rec__zsend(t->ssock[0], NULL, &t->w, 0));
    rec_status s = REC_OK;
    for (int k = 0; !s && k < N; k++) {
        for (int r = 0; !s && r < (k == 0 ? 2 : 1); r++) {
            zmq_msg_t m;
            zmq_msg_init(&m);
            rec_frame_head h;
            const uint8_t *body;
            s = recv_frame(t, t->ssock[k], srv_name(t, k, who, sizeof who), &m, &h, &body);
            if (!s && k == 0 && r == 1) { /* the dense state of step c */
                const float *v;
                int64_t n;
                if (h.type != REC_MSG_EMB_DENSE) s = rec_errorf(REC_EFORMAT, "%s answered %s", who, rec_msg_name(h.type));
                if (!s) s = rec_net_floats_decode(body, h.body, "EMB_DENSE", &v, &n);
                if (!s && (n != t->P || (int64_t)h.seq != c))
                    s = rec_errorf(REC_EINVAL, "%s holds %lld dense floats of step %lld, and this model has %lld (of "
                                   "step %lld): resume with the same --config", who, (long long)n, (long long)h.seq,
                                   (long long)t->P, (long long)c);
                const rec_tensor *ts;
                const int nts = rec_model_tensors(t->m, &ts);
                for (int i = 0, at = 0; !s && i < nts; at += (int)rec_tensor_numel(&ts[i]), i++)
                    memcpy(ts[i].data, v + at, sizeof(float) * (size_t)rec_tensor_numel(&ts[i]));
            } else if (!s && h.type != REC_MSG_EMB_OK) {
                s = rec_errorf(REC_EFORMAT, "%s answered %s to %s", who, rec_msg_name(h.type), undo ? "ROLLBACK" : "RESTORE");
            }
            zmq_msg_close(&m);
        }
    }
    REC_TRY(s);
    *out = c;
    if (t->log) {
        fprintf(t->log, "train: resumed at step %lld, the last one %s; the servers %s\n", (long long)c + 1,
                undo ? "committed" : "every server holds a snapshot of",
                undo ? "rolled back to it" : "restored their snapshots of it");
        fflush(t->log);
    }
    return REC_OK;
}

/* A restarted job (every trainer restarts: mpirun ends them all when one dies) goes on from
 * the step trainer 0 agreed with the servers, with its dense state; the oracles start again at
 * the batch after it (with empty caches, which changes no number). */
static rec_status resume(ctrainer *t, const rec_net_emb_state *st) {
    int64_t c = -1;
    if (t->rank == 0) REC_TRY(resume_servers(t, st, &c));
    if (t->N > 1) {
        MPI_TRY(MPI_Bcast(&c, 1, MPI_INT64_T, 0, rec__comm()));
        const rec_tensor *ts;
        const int n = rec_model_tensors(t->m, &ts);
        for (int i = 0; i < n; i++)
            MPI_TRY(MPI_Bcast(ts[i].data, (int)rec_tensor_numel(&ts[i]), MPI_FLOAT, 0, rec__comm()));
    }
    rec_model_set_steps(t->m, c + 1);
    t->start = c + 1;
    return say_hello(t, t->start);
}

/* ---- setup ------------------------------------------------------------------------------------- */

/* A DEALER to ep, secured with the trainer's keys, and its handshake monitor. `opt` names the
 * option that gave ep in messages. */
static rec_status dealer(ctrainer *t, const char *opt, const char *ep, void **sock, void **mon) {
    REC_TRY(rec__zplain_check(&t->keys, &t->o->sec, ep, REC__ZCLIENT, opt));
    if (rec__zconnect(t->ctx, ZMQ_DEALER, ep, &t->keys, sock, mon)) return rec_error_wrap(REC_EINVAL, "%s", opt);
    return REC_OK;
}

static void teardown(ctrainer *t);

rec_status rec_cache_join(rec_cache_trainer **out, const rec_cache_opts *o, int resume,
                          const volatile sig_atomic_t *stop, FILE *log, rec_net_cache_info *job) {
    *out = NULL;
    if (o->n_servers < 1 || o->n_servers > 62)
        return rec_errorf(REC_EINVAL, "give 1 to 62 embedding servers with --embservers (got %d)", o->n_servers);
    if (o->n_oracles < 1 || o->n_oracles > REC_CACHE_MAX_ORACLES)
        return rec_errorf(REC_EINVAL, "give 1 to %d oracles with --oracle-cacher (got %d)", REC_CACHE_MAX_ORACLES,
                          o->n_oracles);
    ctrainer *t = calloc(1, sizeof *t);
    if (!t) return rec_errorf(REC_ENOMEM, "trainer: out of memory");
    *t = (ctrainer){.o = o, .stop = stop, .log = log, .resume = resume, .ready = -1, .done = -1, .want = -1,
                    .evicted = -1, .at = -1, .stepped = -1};
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    *out = t; /* freed by the caller, whatever fails below */
    t->timeout = o->timeout > 0 ? o->timeout : 10;
    if (!(t->ctx = zmq_ctx_new())) return rec_errorf(REC_EIO, "cannot create a ZeroMQ context");
    REC_TRY(rec__zkeys_load(&t->keys, &o->sec, REC__ZCLIENT));
    t->K = o->n_oracles;
    if (!(t->op = calloc((size_t)t->K, sizeof(opart)))) return rec_errorf(REC_ENOMEM, "trainer: out of memory");
    for (int k = 0; k < t->K; k++) {
        opart *p = &t->op[k];
        if (t->K == 1) snprintf(p->who, sizeof p->who, "the oracle (%s)", o->oracles[k]);
        else snprintf(p->who, sizeof p->who, "oracle %d (%s)", k, o->oracles[k]);
        REC_TRY(dealer(t, "--oracle-cacher", o->oracles[k], &p->sock, &p->mon));
    }
    t->rank = 0, t->N = 1;
    if (rec_dist_launched()) REC_TRY(rec_dist_init(&t->rank, &t->N));
    t->rep.rank = t->rank, t->rep.trainers = t->N; /* a failure below must end every rank */
    if (t->N > 64) return rec_errorf(REC_EINVAL, "at most 64 trainers (mpirun started %d)", t->N);
    /* the servers refuse the requests of any other run once this one said HELLO: a killed
     * trainer's still queued there must not land after a resumed job rolled them back */
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    t->job = rec_mix64(((uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec) ^ ((uint64_t)getpid() << 40));
    if (t->N > 1) MPI_TRY(MPI_Bcast(&t->job, 1, MPI_UINT64_T, 0, rec__comm()));
    /* the job, from the oracles (once every trainer has said hello) */
    REC_TRY(say_hello(t, 0));
    t->F = t->info.F;
    t->C = t->info.capacity;
    t->total = t->info.batches;
    *job = t->info;
    return REC_OK;
}

void rec_cache_trainer_free(rec_cache_trainer *t) {
    if (!t) return;
    teardown(t);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    free(t);
}

/* The trainer made ready on the loop's model (be->o.model, without tables, of slices of the
 * batch: rec_model_init_sharded) bound to the job: its cache, and the servers' shards of the
 * tables made or checked (their state kept for load, a resume). */
static rec_status setup(ctrainer *t, const rec_model_config *cfg, rec_model *m) {
    const rec_cache_opts *o = t->o;
    char who[300];
    t->cfg = cfg;
    t->m = m;
    const int64_t slice = (t->info.batch + t->N - 1) / t->N; /* the most rows of a trainer's slice */
    t->slice = slice;
    t->E = t->cfg->emb_dim;
    t->S = rec_cache_state_floats(t->cfg->sparse_opt.kind, t->E);
    t->L = rec_model_pooled(m, 1) != NULL; /* DeepFM, Wide&Deep: first-order tables */
    t->LS = t->L ? rec_cache_state_floats(t->cfg->sparse_opt.kind, 1) : 0;
    t->V = t->E + t->L;
    t->SW = rec_cache_row_state_floats(t->cfg->sparse_opt.kind, t->E, t->L);
    t->b16 = cfg->embed_precision == REC_PRECISION_BF16;
    t->rounding = (rec_embed_rounding)cfg->embed_rounding;
    t->seed = rec_mix64(cfg->seed + 1), t->lin_seed = rec_mix64(cfg->seed + 2); /* model.c's seeds: tables, first-order */
    /* GETs and PUTs of about FRAME_BYTES each: a server answers the first while the next are
     * on their way, and CurveZMQ (which seals a whole message before sending a byte of it)
     * encrypts one while the one before crosses the network */
    const size_t row_bytes = sizeof(rec_centry) + (t->b16 ? 2 : 4) * (size_t)t->V + 4 * (size_t)t->SW;
    t->max_frame_rows = (int64_t)(REC_NET_MAX_BODY / row_bytes) - 64;
    t->rows_per_frame = (int64_t)(FRAME_BYTES / row_bytes);
    if (t->rows_per_frame < 1) t->rows_per_frame = 1;
    REC_TRY(rec_alloc((void **)&t->values, sizeof(float) * (size_t)(t->C * t->E), "the trainer cache"));
    REC_TRY(rec_alloc((void **)&t->state, sizeof(float) * (size_t)(t->C * t->S) + 64, "the trainer cache's state"));
    REC_TRY(rec_alloc((void **)&t->grad, sizeof(float) * (size_t)(t->C * t->E), "the cache's gradients"));
    REC_TRY(rec_alloc((void **)&t->lin, sizeof(float) * (size_t)(t->C * t->L) + 64, "the cache's first-order values"));
    REC_TRY(rec_alloc((void **)&t->lin_state, sizeof(float) * (size_t)(t->C * t->LS) + 64, "their optimizer state"));
    REC_TRY(rec_alloc((void **)&t->lin_grad, sizeof(float) * (size_t)(t->C * t->L) + 64, "their gradients"));
    t->stamp = calloc((size_t)t->C, sizeof(int64_t));
    t->touched = malloc(sizeof(int32_t) * (size_t)t->C);
    t->by_srv = malloc(sizeof(int64_t) * (size_t)t->C);
    t->fetch_tmp = malloc(sizeof(rec_centry) * (size_t)t->C);
    t->srv_n = malloc(sizeof(int64_t) * (size_t)(o->n_servers + 1));
    t->srv_acks = calloc((size_t)o->n_servers, sizeof(int64_t));
    t->dlogits = malloc(sizeof(float) * (size_t)slice);
    t->cnt = malloc(sizeof(int) * 4 * (size_t)t->N);
    t->sh_stamp = calloc((size_t)t->C, sizeof(int64_t));
    t->sh_pos = malloc(sizeof(int32_t) * (size_t)t->C);
    t->Q = t->info.depth + 2;
    t->ring = calloc((size_t)t->Q, sizeof(batch_plan));
    t->ssock = calloc((size_t)o->n_servers, sizeof(void *));
    t->smon = calloc((size_t)o->n_servers, sizeof(void *));
    t->slot_f = malloc(sizeof(int32_t) * (size_t)t->C);
    t->slot_row = malloc(sizeof(int64_t) * (size_t)t->C);
    t->cm = calloc((size_t)t->Q, sizeof(commit));
    t->vrow = malloc(sizeof(float) * (size_t)t->V);
    t->row16 = malloc(sizeof(uint16_t) * (size_t)t->E);
    if (!t->vrow || !t->row16) return rec_errorf(REC_ENOMEM, "trainer: out of memory");
    if (!t->stamp || !t->touched || !t->by_srv || !t->srv_n || !t->srv_acks || !t->dlogits || !t->ring || !t->ssock || !t->smon || !t->cnt ||
        !t->sh_stamp || !t->sh_pos || !t->slot_f || !t->slot_row || !t->cm || !t->fetch_tmp)
        return rec_errorf(REC_ENOMEM, "trainer: out of memory");
    const rec_tensor *ts;
    const int nts = rec_model_tensors(t->m, &ts);
    for (int i = 0; i < nts; i++) t->P += rec_tensor_numel(&ts[i]);
    for (int q = 0; o->durable && q < t->Q; q++)
        if (!(t->cm[q].dense = malloc(sizeof(float) * (size_t)(t->P + 1))))
            return rec_errorf(REC_ENOMEM, "trainer: out of memory for the dense state");
    for (int q = 0; q < t->Q; q++)
        if (!(t->ring[q].sparse = calloc((size_t)t->F, sizeof(rec_jagged)))) return rec_errorf(REC_ENOMEM, "trainer: out of memory");
    /* the servers: each makes (or checks) its shard of the tables */
    rec_net_emb_hello eh = {0, 0, o->n_servers, t->F, t->E, t->cfg->sparse_opt.kind, t->cfg->sparse_opt.init_acc,
                            t->seed, t->rows, o->durable || t->resume, t->L, t->L ? t->lin_seed : 0, t->b16,
                            t->b16 ? (int32_t)t->rounding : 0};
    for (int k = 0; k < o->n_servers; k++) {
        REC_TRY(dealer(t, "--embservers", o->servers[k], &t->ssock[k], &t->smon[k]));
        eh.shard = k;
        eh.digest = rec_net_emb_hello_digest(&eh);
        rec_frame_begin(&t->w, REC_MSG_EMB_HELLO, t->job, 0);
        rec_net_emb_hello_encode(&t->w, &eh);
        REC_TRY(rec_frame_end(&t->w));
        REC_TRY(rec__zsend(t->ssock[k], NULL, &t->w, 0));
    }
    for (int k = 0; k < o->n_servers; k++) {
        zmq_msg_t m;
        rec_frame_head h;
        const uint8_t *body;
        zmq_msg_init(&m);
        rec_net_emb_state es = {0};
        rec_status s = recv_frame(t, t->ssock[k], srv_name(t, k, who, sizeof who), &m, &h, &body);
        if (!s && h.type != REC_MSG_EMB_OK) s = rec_errorf(REC_EFORMAT, "%s answered %s to EMB_HELLO", who, rec_msg_name(h.type));
        if (!s) s = rec_net_emb_state_decode(body, h.body, &es);
        zmq_msg_close(&m);
        REC_TRY(s);
        if (!t->resume && es.written)
            return rec_errorf(REC_EINVAL, "%s holds tables an earlier job trained%s: restart it for a new job%s", who,
                              es.committed >= 0 ? " (durably)" : "", es.committed >= 0 ? ", or add --resume" : "");
        t->states[k] = es;
    }
    char ep[64];
    snprintf(ep, sizeof ep, "inproc://rec-cache-%p", (void *)t);
    t->wake_m = zmq_socket(t->ctx, ZMQ_PAIR);
    t->wake_t = zmq_socket(t->ctx, ZMQ_PAIR);
    if (!t->wake_m || !t->wake_t || zmq_bind(t->wake_m, ep) != 0 || zmq_connect(t->wake_t, ep) != 0)
        return rec_errorf(REC_EIO, "trainer: cannot make its inproc socket: %s", zmq_strerror(zmq_errno()));
    return REC_OK;
}

static void teardown(ctrainer *t) {
    rec_model_free(t->full);
    for (int q = 0; t->ring && q < t->Q; q++) {
        batch_plan *p = &t->ring[q];
        batch_plan_release(p), free(p->sparse), free(p->lists), free(p->dur_e), free(p->dur_v), free(p->dur_dense);
        for (int k = 0; k < REC_CACHE_MAX_ORACLES; k++) rec_net_room_free(&p->room[k]);
    }
    for (int q = 0; t->cm && q < t->Q; q++) free(t->cm[q].dense);
    free(t->cm), free(t->slot_f), free(t->slot_row);
    free(t->ring);
    for (int k = 0; t->ssock && k < t->o->n_servers; k++) rec__zclose(&t->ssock[k], t->smon ? &t->smon[k] : NULL);
    free(t->ssock), free(t->smon);
    for (int k = 0; t->op && k < t->K; k++) rec__zclose(&t->op[k].sock, &t->op[k].mon);
    free(t->op);
    rec__zkeys_free(&t->keys);
    if (t->wake_m) zmq_close(t->wake_m);
    if (t->wake_t) zmq_close(t->wake_t);
    if (t->ctx) zmq_ctx_term(t->ctx);
    rec_free(t->values), rec_free(t->state), rec_free(t->grad);
    rec_free(t->lin), rec_free(t->lin_state), rec_free(t->lin_grad);
    free(t->stamp), free(t->touched), free(t->by_srv), free(t->fetch_tmp), free(t->srv_n), free(t->srv_acks), free(t->dlogits), free(t->rows);
    free(t->cnt), free(t->xbuf), free(t->sh_stamp), free(t->sh_pos);
    free(t->vrow), free(t->row16), free(t->wrows);
    rec_wbuf_free(&t->w);
}

/* ---- the trained model ------------------------------------------------------------------------ */

/* The whole model's table f (rows, E) and its state; with first-order tables its dim-1 table
 * (rows) and that table's state (NULL where the optimizer keeps none). bf16 tables: T16 and
 * LT16 hold the tables (T and LT NULL). */
typedef struct whole_table {
    float *T, *St, *LT, *LSt;
    uint16_t *T16, *LT16;
} whole_table;

/* Rows [r0, r0 + n) of server k's share of table f (rows k, k + S, ...), read into the whole
 * model's table w. */
static rec_status gather(ctrainer *t, int k, int f, int64_t i0, int64_t n, const whole_table *w) {
    const int E = t->E, S = t->S, V = t->V, SW = t->SW, N = t->o->n_servers;
    rec_centry *e = malloc(sizeof(rec_centry) * (size_t)n);
    if (!e) return rec_errorf(REC_ENOMEM, "trainer: out of memory gathering the tables");
    for (int64_t i = 0; i < n; i++) e[i] = (rec_centry){0, f, (i0 + i) * N + k};
    const rec_net_rows q = {n, e, NULL, NULL, NULL};
    rec_frame_begin(&t->w, REC_MSG_EMB_GET, t->job, 0);
    rec_net_rows_encode(&t->w, &q, 1, V, SW);
    rec_status s = rec_frame_end(&t->w);
    if (!s) s = rec__zsend(t->ssock[k], NULL, &t->w, 0);
    zmq_msg_t m;
    zmq_msg_init(&m);
    rec_frame_head h;
    const uint8_t *body;
    rec_net_rows r;
    if (!s) s = server_recv(t, k, 1, &m, &h, &body);
    const rec_net_emb_hello tabs = tables_of(t, k);
    if (!s) s = rec_net_rows_decode(body, h.body, "EMB_ROWS", 0, 1, &tabs, SW, &r);
    if (!s && r.n != n) s = rec_errorf(REC_EFORMAT, "embedding server %d answered %lld rows for %lld", k, (long long)r.n,
                                       (long long)n);
    for (int64_t i = 0; !s && i < n; i++) { /* a row as it travels: its E values then the first-order one */
        const size_t row = (size_t)e[i].row;
        const float *st = SW ? r.state + (size_t)i * SW : NULL;
        if (t->b16) { /* the bits as they travelled */
            const uint16_t *v = r.values16 + (size_t)i * V;
            memcpy(w->T16 + row * E, v, sizeof(uint16_t) * (size_t)E);
            if (t->L) w->LT16[row] = v[E];
        } else {
            const float *v = r.values + (size_t)i * V;
            memcpy(w->T + row * E, v, sizeof(float) * (size_t)E);
            if (t->L) w->LT[row] = v[E];
        }
        if (S) memcpy(w->St + row * S, st, sizeof(float) * (size_t)S);
        if (t->LS) w->LSt[row] = st[S];
    }
    zmq_msg_close(&m);
    free(e);
    return s;
}

/* The data of the whole model's tensor KIND.f.weight (state 0) or opt.KIND.f (state 1; KIND
 * emb or lin), NULL when it has none (or, with data16, bf16 storage: into *data16). */
static float *tensor_data(rec_model *full, const char *kind, int f, int state, uint16_t **data16) {
    char name[64];
    if (state) snprintf(name, sizeof name, "opt.%s.%d", kind, f);
    else snprintf(name, sizeof name, "%s.%d.weight", kind, f);
    const rec_tensor *x = rec_model_tensor(full, name);
    if (data16) *data16 = x ? x->data16 : NULL;
    return x ? x->data : NULL;
}

/* The whole model: the trainer's dense part, the servers' tables, all optimizer state. After
 * the flush. */
static rec_status whole_model(ctrainer *t, rec_model **out) {
    rec_model *full;
    REC_TRY(rec_model_init(&full, t->cfg, (int)t->info.batch, 1));
    const rec_tensor *ts;
    const int n = rec_model_tensors(t->m, &ts);
    rec_status s = REC_OK;
    for (int i = 0; !s && i < n; i++) {
        const rec_tensor *d = rec_model_tensor(full, ts[i].name);
        if (!d || rec_tensor_numel(d) != rec_tensor_numel(&ts[i]))
            s = rec_errorf(REC_EINVAL, "trainer: the whole model has no tensor %s of the trainer's size", ts[i].name);
        else memcpy(d->data, ts[i].data, sizeof(float) * (size_t)rec_tensor_numel(d));
    }
    const int64_t fit = (int64_t)(REC_NET_MAX_BODY / 4 / (size_t)(t->V + t->SW)) - 64, CHUNK = fit < (1 << 20) ? fit : 1 << 20;
    for (int f = 0; !s && f < t->F; f++) {
        whole_table w = {0};
        w.T = tensor_data(full, "emb", f, 0, &w.T16);
        w.St = t->S ? tensor_data(full, "emb", f, 1, NULL) : NULL;
        w.LT = t->L ? tensor_data(full, "lin", f, 0, &w.LT16) : NULL;
        w.LSt = t->LS ? tensor_data(full, "lin", f, 1, NULL) : NULL;
        if (!(t->b16 ? (void *)w.T16 : (void *)w.T) || (t->S && !w.St) || (t->L && !(t->b16 ? (void *)w.LT16 : (void *)w.LT)) ||
            (t->LS && !w.LSt))
            s = rec_errorf(REC_EINVAL, "trainer: the whole model lacks table %d (or its first-order table, or their state)", f);
        for (int k = 0; !s && k < t->o->n_servers; k++) {
            const int64_t mine = (t->rows[f] - k + t->o->n_servers - 1) / t->o->n_servers;
            for (int64_t i = 0; !s && i < mine; i += CHUNK) s = gather(t, k, f, i, mine - i < CHUNK ? mine - i : CHUNK, &w);
        }
    }
    if (s) {
        rec_model_free(full);
        return s;
    }
    rec_model_set_steps(full, rec_model_steps(t->m));
    *out = full;
    return REC_OK;
}

/* The whole model for the job's end (its save, --eval, --npy): gathered from the servers once,
 * by trainer 0 (*out NULL on the others); `what` the job's end needs it for. Before the flush
 * rows of the model are in the trainers' caches. */
static rec_status the_whole(ctrainer *t, const char *what, rec_model **out) {
    *out = NULL;
    if (!t->flushed)
        return rec_errorf(REC_EUNSUPPORTED, "a disaggregated job is %s at its end only: until then rows of the model are "
                          "in the trainers' caches (--durable keeps them on the servers)", what);
    if (t->rank != 0) return REC_OK;
    if (!t->full) REC_TRY(whole_model(t, &t->full));
    *out = t->full;
    return REC_OK;
}

/* The whole model as a checkpoint at PATH that rectrain eval and export read (trainer 0). */
static rec_status save_model(ctrainer *t, const char *path, const rec_ckpt_meta *given) {
    rec_model *full;
    REC_TRY(the_whole(t, "saved", &full));
    if (!full) return REC_OK;
    rec_ckpt_meta meta = *given;
    meta.train_rows = 0, meta.data_digest = 0; /* the oracle read the data: not recorded (rectrain inspect) */
    REC_TRY(rec_ckpt_save(path, full, &meta));
    if (t->log) fprintf(t->log, "train: saved the whole model (tables from the servers) to %s\n", path);
    return REC_OK;
}


/* ---- the cache backend (backend.h): the training loop's steps on the cache ------------------ */

/* A stop asked for (Ctrl-C, SIGTERM: the CLI's flag)? */
static int stopped(const ctrainer *t) { return t->stop && *t->stop; }

/* The status of a job stopped before batch x: the cache cannot keep a checkpoint of a job half
 * done (its rows are the servers' to keep), so a stop is a failure; a durable job resumes. */
static rec_status stop_status(const ctrainer *t, int64_t x) {
    return rec_errorf(REC_ESTOPPED, "stopped by %s at batch %lld: the servers miss the updates of the rows still cached",
                      rec_signal_name(*t->stop), (long long)x);
}

/* Waits on t->cv (t->mu held) for 100 ms at most: the waits of the training thread check the
 * stop flag between slices, since the signal may be taken by any thread and wake none. */
static void wait_slice(ctrainer *t) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 100 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&t->cv, &t->mu, &ts);
}

/* Durable: step c committed before the next is done, so a kill redoes one step at most. N
 * trainers: once each has its own writes of c acknowledged (a barrier), trainer 0 commits it. */
static rec_status sync_commit(ctrainer *t, int64_t c) {
    if (t->N > 1) {
        pthread_mutex_lock(&t->mu);
        while (t->acked < c && !t->failed && !stopped(t)) wait_slice(t);
        const int failed = t->failed;
        pthread_mutex_unlock(&t->mu);
        if (failed || stopped(t)) return REC_OK; /* the next wait ends on it */
        MPI_TRY(MPI_Barrier(rec__comm()));
        pthread_mutex_lock(&t->mu);
        t->synced = c;
        pthread_mutex_unlock(&t->mu);
        zmq_send(t->wake_t, "", 0, ZMQ_DONTWAIT);
        if (t->rank) return REC_OK;
    }
    pthread_mutex_lock(&t->mu);
    while (t->committed < c && !t->failed && !stopped(t)) wait_slice(t); /* a stop: the next wait ends on it */
    pthread_mutex_unlock(&t->mu);
    return REC_OK;
}

/* The batch stepped last marked done, once its loss is logged (the loop's next call): the
 * maintenance thread then writes back its evictions, and a durable job may commit it. */
static void mark_done(ctrainer *t) {
    if (t->stepped < 0) return;
    pthread_mutex_lock(&t->mu);
    t->done = t->stepped;
    pthread_mutex_unlock(&t->mu);
    zmq_send(t->wake_t, "", 0, ZMQ_DONTWAIT);
    t->stepped = -1;
}

/* Stops the maintenance thread (finished, or asked to end) and takes its failure. */
static rec_status join_maintenance(ctrainer *t) {
    if (!t->started) return REC_OK;
    pthread_mutex_lock(&t->mu);
    if (!t->finished) t->failed = 1; /* stops the maintenance thread */
    pthread_mutex_unlock(&t->mu);
    zmq_send(t->wake_t, "", 0, ZMQ_DONTWAIT);
    pthread_join(t->th, NULL);
    t->started = 0;
    return t->merr ? rec_errorf(t->merr, "%s", t->merrmsg) : REC_OK;
}

/* After the last batch, batch `total`: every cached row back on its server (under mpirun the
 * rows other trainers hold to their owners first), every trainer's flush acknowledged before
 * the model is read back. */
static rec_status flush(ctrainer *t) {
    const rec_net_cache_step *p = &t->ring[t->total % t->Q].st;
    if (t->N > 1) REC_TRY(exchange(t, p->post_send, p->n_post_send, p->post_recv, p->n_post_recv));
    if (t->o->durable && t->total - 1 >= t->start) REC_TRY(sync_commit(t, t->total - 1));
    t->stepped = t->total;
    mark_done(t);
    pthread_mutex_lock(&t->mu);
    while (!t->finished && !t->failed && !stopped(t)) wait_slice(t);
    const int finished = t->finished, failed = t->failed;
    pthread_mutex_unlock(&t->mu);
    if (!finished && !failed) return stop_status(t, t->total);
    REC_TRY(join_maintenance(t));
    if (t->N > 1) MPI_TRY(MPI_Barrier(rec__comm())); /* a failed trainer ends them all: the CLI aborts the job */
    t->flushed = 1;
    return REC_OK;
}

/* The servers' last committed step: the model's dense state and step count; the loop's
 * position in meta (the steps' rows, for its report). */
static rec_status cache_load(rec_backend *be, const char *path, rec_ckpt_meta *meta) {
    (void)path; /* a disaggregated job resumes from its servers, not from a checkpoint */
    ctrainer *t = be->ctx;
    REC_TRY(resume(t, t->states));
    *meta = (rec_ckpt_meta){.step = t->start, .rows_seen = t->start * t->info.batch, .seed = t->cfg->seed};
    return REC_OK;
}

static rec_status cache_start(rec_backend *be) {
    ctrainer *t = be->ctx;
    t->ready = t->done = t->evicted = t->committed = t->acked = t->synced = t->start - 1;
    t->requested = t->received = t->x = t->start;
    for (int k = 0; k < t->K; k++) t->op[k].received = t->start;
    t->rep.policy = t->info.policy, t->rep.lookahead = t->info.lookahead, t->rep.depth = t->info.depth;
    t->rep.capacity = t->C;
    if (t->log)
        fprintf(t->log, "train: %lld batches from the oracle, %s cache of %lld rows (L %d, depth %d), %d embedding "
                "server%s\n", (long long)t->total, rec_cache_policy_name(t->info.policy), (long long)t->C,
                t->info.lookahead, t->info.depth, t->o->n_servers, t->o->n_servers == 1 ? "" : "s");
    if (pthread_create(&t->th, NULL, maintain, t) != 0) return rec_errorf(REC_EIO, "trainer: cannot start a thread");
    t->started = 1;
    return REC_OK;
}

/* Batch x once its rows are in the cache (the oracle sent it with cache slots for ids). */
static rec_status cache_next(rec_backend *be, const rec_batch **b, int64_t *rows) {
    ctrainer *t = be->ctx;
    *b = NULL, *rows = 0;
    mark_done(t);
    const int64_t x = t->x;
    atomic_store(&t->at, x);
    if (stopped(t)) return stop_status(t, x);
    const double w0 = rec_now();
    pthread_mutex_lock(&t->mu);
    t->want = x;
    while (t->ready < x && !t->failed && !stopped(t)) wait_slice(t);
    const int failed = t->failed, ready = t->ready >= x;
    pthread_mutex_unlock(&t->mu);
    if (failed) return join_maintenance(t);
    if (!ready) return stop_status(t, x);
    if (x == t->total) return flush(t);
    t->rep.stall_seconds += rec_now() - w0;
    *b = &t->ring[x % t->Q].st.batch; /* released once x is done */
    double n = (double)(*b)->n;       /* the global batch: the trainers' slices */
    if (t->N > 1) MPI_TRY(MPI_Allreduce(MPI_IN_PLACE, &n, 1, MPI_DOUBLE, MPI_SUM, rec__comm()));
    *rows = t->global_rows = (int64_t)n;
    return REC_OK;
}

/* Batch x stepped: pooled from the cache, the rows stepped there; durable: its rows and dense
 * state kept for the write-through, the step before committed. Marked done at the next call. */
static rec_status cache_step(rec_backend *be, const rec_batch *b, const rec_staged_batch *sb, double *loss,
                             int64_t *loss_step) {
    (void)b, (void)sb;
    ctrainer *t = be->ctx;
    const int64_t x = t->x;
    batch_plan *p = &t->ring[x % t->Q];
    REC_TRY(step(t, &p->st, x, loss));
    if (t->o->durable) REC_TRY(keep_step(t, p));
    if (t->o->durable && x - 1 >= t->start) REC_TRY(sync_commit(t, x - 1));
    t->stepped = x;
    t->x = x + 1;
    *loss_step = rec_model_steps(t->m);
    return REC_OK;
}

static rec_status cache_drain(rec_backend *be, double *loss, int64_t *loss_step) {
    mark_done(be->ctx);
    return rec__sync_drain(be, loss, loss_step);
}

/* A stop ends the job here: the cache's rows are not all on the servers, so no checkpoint
 * can hold it (a durable job resumes from its last commit). */
static rec_status cache_stop_vote(rec_backend *be, int mine, int *any) {
    ctrainer *t = be->ctx;
    *any = 0;
    return mine ? stop_status(t, t->x) : REC_OK;
}

/* At the job's end, trainer 0 scores d with the whole model from the servers (the others'
 * metrics are zero, as under mpirun); before it, rows of the model are in the caches. */
static rec_status cache_evaluate(rec_backend *be, rec_dataset *d, int64_t row0, int64_t row1, int64_t batch,
                                 rec_metrics *out) {
    memset(out, 0, sizeof *out);
    rec_model *m;
    REC_TRY(the_whole(be->ctx, "evaluated", &m));
    return m ? rec_evaluate(m, d, row0, row1, batch, out) : REC_OK;
}

static rec_status cache_save(rec_backend *be, const char *path, const rec_ckpt_meta *meta) {
    return save_model(be->ctx, path, meta);
}

/* Trainer 0's, gathered from the servers once for the save, --eval and --npy alike. */
static rec_status cache_whole(rec_backend *be, rec_model **out, int *owned) {
    *owned = 0;
    return the_whole(be->ctx, "exported", out);
}

static rec_status cache_report(rec_backend *be, rec_train_report *rep) {
    const ctrainer *t = be->ctx;
    rep->has_cache = 1;
    rep->cache = t->rep;
    return REC_OK;
}

static void cache_free(rec_backend *be) {
    ctrainer *t = be->ctx;
    (void)join_maintenance(t);
    rec_cache_trainer_free(t);
}

static const rec_backend_i CACHE = {
    .name = "cache", .next = cache_next, .load = cache_load, .start = cache_start, .step = cache_step,
    .drain = cache_drain, .stop_vote = cache_stop_vote, .evaluate = cache_evaluate, .download = rec__host_download,
    .whole = cache_whole, .save = cache_save, .report = cache_report, .free = cache_free};

rec_status rec_backend_cache(rec_backend *be) {
    ctrainer *t = be->o.cache;
    if (be->o.device != REC_DEVICE_CPU)
        return rec_errorf(REC_EINVAL, "a trainer of disaggregated training steps its cache on the CPUs: drop --device");
    REC_TRY(setup(t, be->o.cfg, be->o.model));
    be->i = &CACHE;
    be->ctx = t;
    return REC_OK;
}
