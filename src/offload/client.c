/* The trainer's side of offloading (offload.h): connections to the workers, the counter-based
 * splitter (FastFlow §5.3), and streams that deliver pieces in order whoever made them.
 *
 * Splitter: piece j goes to the workers when floor((j+1) r) > floor(j r) for the ratio r, so
 * that of any first n pieces floor(n r) are remote and they are spread evenly (the paper's
 * counters, as a pure function of j: a resumed or re-opened stream splits the same way).
 *
 * A stream keeps a window of the next LA pieces. Remote ones are sent to the worker with the
 * fewest in flight (at most `depth` each); local ones are made on the stream's thread when
 * their turn comes. Answers arrive out of order into the window; piece j is delivered once,
 * in order, from whichever source made it:
 *
 *   worker states  WAIT (connected, JOB + PING sent) -> UP on any valid answer
 *                  UP or WAIT -> DOWN when a piece (or the ping) is unanswered for timeout_s,
 *                  or an answer fails validation; its pieces in flight are made here instead
 *                  (counted in `redone`) and its late answers dropped (`late`)
 *                  DOWN -> WAIT every second: a new socket, JOB + PING (a restarted worker
 *                  comes back; ZeroMQ drops what the old socket had queued)
 *                  UNFIT: the worker cannot serve this job (cannot read the files, other
 *                  vocabularies): its message is logged once and it is not asked again
 *
 * Every piece of the epoch is thus trained exactly once: delivery is by piece number, a piece
 * is made here when its worker goes down, and an answer for a piece no longer in flight there
 * is dropped. The sequence numbers of a stream carry its generation, so answers meant for an
 * earlier stream (an epoch closed early, a profiling run) are dropped too.
 */
#include <errno.h>
#include <stdarg.h>
#include <limits.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "offload_impl.h"
#include "rectrain/core.h"
#include "rectrain/offload.h"

enum { W_WAIT = 0, W_UP, W_DOWN, W_UNFIT, W_GONE };
enum { MAX_WORKERS = 64 };
#define LIST_EVERY_S 1.0
#define GEN_SHIFT 40
#define PROBE_EVERY_S 1.0

typedef struct wconn {
    char addr[256];
    void *sock, *mon;        /* mon: the monitor of its handshakes */
    char refused[300];       /* why its last handshake failed, as logged ("" none) */
    int state;
    int inflight;
    double since;            /* WAIT: when the probe went out; DOWN: when it went down */
} wconn;

struct rec_offload {
    rec_offload_opts o;
    rec__zkeys keys;         /* CURVE (o.sec) */
    rec_offload_data d;
    rec_grid *g;
    rec_net_job job;
    uint64_t key;
    rec_wbuf jobframe, ping;
    void *ctx;
    wconn *w;
    int nw;
    double list_read;        /* workers_file: when it was last read */
    uint64_t list_hash;      /* and a hash of what it held */
    int point;
    double ratio;
    uint64_t gen;
    rec_offload_stats st;
    int streaming;
};

const char *rec_offload_point_name(int point) {
    return point == REC_OFFLOAD_P1 ? "p'1" : point == REC_OFFLOAD_P2 ? "p'2" : point == REC_OFFLOAD_P3 ? "p'3" : "none";
}

/* ---- connections ----------------------------------------------------------------------------- */

static void wlog(rec_offload *x, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void wlog(rec_offload *x, const char *fmt, ...) {
    if (!x->o.log) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(x->o.log, fmt, ap);
    va_end(ap);
    fflush(x->o.log);
}

/* A new socket to worker i with JOB and PING queued: WAIT. */
static void connect_worker(rec_offload *x, int i) {
    wconn *c = &x->w[i];
    rec__zclose(&c->sock, &c->mon);
    c->inflight = 0;
    c->since = rec_now();
    c->state = W_WAIT;
    if (rec__zconnect(x->ctx, ZMQ_DEALER, c->addr, &x->keys, &c->sock, &c->mon)) {
        c->state = W_UNFIT;
        wlog(x, "train: offload: worker %s; it is left out\n", rec_errmsg());
        return;
    }
    rec__zsend(c->sock, NULL, &x->jobframe, ZMQ_DONTWAIT);
    rec__zsend(c->sock, NULL, &x->ping, ZMQ_DONTWAIT);
}

static void set_down(rec_offload *x, int i, const char *why) {
    wconn *c = &x->w[i];
    if (c->state == W_UP) wlog(x, "train: offload: worker %s is down (%s); its pieces are made here\n", c->addr, why);
    if (c->state != W_UNFIT) c->state = W_DOWN;
    c->since = rec_now();
    c->inflight = 0;
    x->st.worker_downs++;
}

/* workers_file: endpoints one per line (or comma-separated; '#' starts a comment). New ones
 * are connected; workers no longer listed are let go (GONE: their pieces in flight are made
 * here by the stream that sees them). At the first read (`first`) a file that cannot be read,
 * or an entry that is no endpoint, is an error naming the file (and line); later, while the
 * job runs, an unreadable file changes nothing and a bad entry is skipped, logged once per
 * change of the file. */
static rec_status read_list(rec_offload *x, int first) {
    x->list_read = rec_now();
    char *text = NULL;
    size_t len = 0;
    rec_status rs = rec_read_file(x->o.workers_file, "workers file", 1 << 20, &text, &len);
    if (rs && first)
        return rec_error_append(rs, " (the workers file lists the workers' endpoints, one a line, and must exist when "
                                "training starts)");
    if (rs) return REC_OK;
    const uint64_t h = rec_fnv1a64(REC_FNV_SEED, text, len);
    const int changed = first || h != x->list_hash;
    x->list_hash = h;
    char seen[MAX_WORKERS] = {0};
    int lineno = 0;
    for (char *line = text, *next; line; line = next) {
        if ((next = strchr(line, '\n'))) *next++ = 0;
        lineno++;
        char *hash = strchr(line, '#');
        if (hash) *hash = 0;
        for (char *save = NULL, *t = strtok_r(line, ", \t\r", &save); t; t = strtok_r(NULL, ", \t\r", &save)) {
            if (rec_endpoint_check(t) || rec__zplain_check(&x->keys, &x->o.sec, t, REC__ZCLIENT, "worker")) {
                if (first) {
                    free(text);
                    return rec_error_wrap(REC_EINVAL, "%s:%d", x->o.workers_file, lineno);
                }
                if (changed) wlog(x, "train: offload: %s:%d: skipped: %s\n", x->o.workers_file, lineno, rec_errmsg());
                continue;
            }
            int i = 0;
            while (i < x->nw && strcmp(x->w[i].addr, t)) i++;
            if (i == x->nw) {
                if (x->nw == MAX_WORKERS || strlen(t) >= sizeof x->w[i].addr) continue;
                snprintf(x->w[i].addr, sizeof x->w[i].addr, "%s", t);
                x->nw++;
                wlog(x, "train: offload: worker %s added (%s)\n", t, x->o.workers_file);
                connect_worker(x, i);
            } else if (x->w[i].state == W_GONE) {
                wlog(x, "train: offload: worker %s added again (%s)\n", t, x->o.workers_file);
                connect_worker(x, i);
            }
            seen[i] = 1;
        }
    }
    free(text);
    for (int i = 0; i < x->nw; i++)
        if (!seen[i] && x->w[i].state != W_GONE) {
            wlog(x, "train: offload: worker %s removed (%s)\n", x->w[i].addr, x->o.workers_file);
            rec__zclose(&x->w[i].sock, &x->w[i].mon);
            x->w[i].state = W_GONE;
        }
    return REC_OK;
}

rec_status rec_offload_open(rec_offload **out, const rec_offload_opts *o, const rec_offload_data *d) {
    *out = NULL;
    if (o->n_workers < 1 && !o->workers_file)
        return rec_errorf(REC_EINVAL, "offload: no workers given (--workers tcp://HOST:PORT,...)");
    if (o->n_workers > MAX_WORKERS) return rec_errorf(REC_EINVAL, "offload: at most %d workers", MAX_WORKERS);
    rec_offload *x = calloc(1, sizeof *x);
    if (!x) return rec_errorf(REC_ENOMEM, "out of memory for offloading");
    x->o = *o;
    if (x->o.timeout_s <= 0) x->o.timeout_s = 5;
    if (x->o.depth <= 0) x->o.depth = 4;
    x->d = *d;
    x->point = REC_OFFLOAD_P3;
    rec_status s = rec__zkeys_load(&x->keys, &o->sec, REC__ZCLIENT);
    if (!s) s = rec_grid_build(&x->g, d->parts, d->n_parts, &d->tsv);
    char *spec = NULL;
    size_t spec_len = 0;
    if (!s) s = rec_read_file(d->spec_path, "prep spec", 16 << 20, &spec, &spec_len);
    x->job.part_bytes = calloc((size_t)d->n_parts, sizeof(uint64_t));
    if (!s && !x->job.part_bytes) s = rec_errorf(REC_ENOMEM, "out of memory for offloading");
    if (!s) {
        x->job.spec = spec;
        x->job.spec_origin = (char *)d->spec_path;
        x->job.vocab_from = (char *)(d->vocab_from ? d->vocab_from : "");
        x->job.vocab_digest = d->vocabs ? rec__vocab_digest(d->vocabs) : 0;
        x->job.tsv = d->tsv;
        x->job.n_parts = d->n_parts;
        x->job.parts = calloc((size_t)d->n_parts, sizeof(char *));
        for (int k = 0; x->job.parts && k < d->n_parts; k++) /* absolute: a worker has its own cwd */
            x->job.parts[k] = realpath(d->parts[k], NULL);
        for (int k = 0; k < d->n_parts; k++)
            if (!x->job.parts || !x->job.parts[k]) s = rec_errorf(REC_EIO, "%s: cannot resolve its path", d->parts[k]);
        for (int k = 0; k < d->n_parts; k++) x->job.part_bytes[k] = rec_grid_bytes(x->g, k);
        if (!s) x->key = rec_net_job_key(&x->job);
    }
    if (!s) {
        rec_frame_begin(&x->jobframe, REC_MSG_JOB, x->key, 0);
        rec_net_job_encode(&x->jobframe, &x->job);
        s = rec_frame_end(&x->jobframe);
        rec_frame_begin(&x->ping, REC_MSG_PING, x->key, 0);
        if (!s) s = rec_frame_end(&x->ping);
    }
    if (!s) {
        x->ctx = zmq_ctx_new();
        x->w = calloc(MAX_WORKERS, sizeof *x->w);
        if (!x->ctx || !x->w) s = rec_errorf(REC_EIO, "offload: cannot start ZeroMQ");
    }
    for (int i = 0; !s && i < o->n_workers; i++) {
        if (rec_endpoint_check(o->workers[i])) s = rec_error_wrap(REC_EINVAL, "offload: a worker");
        else if (rec__zplain_check(&x->keys, &o->sec, o->workers[i], REC__ZCLIENT, "--workers")) s = REC_EINVAL;
        else if (strlen(o->workers[i]) >= sizeof x->w[i].addr)
            s = rec_errorf(REC_EINVAL, "offload: worker address %.40s... is too long", o->workers[i]);
        else snprintf(x->w[i].addr, sizeof x->w[i].addr, "%s", o->workers[i]);
        x->nw = i + 1;
        if (!s) connect_worker(x, i);
    }
    if (!s && o->workers_file) s = read_list(x, 1);
    if (s) {
        rec_offload_close(x);
        return s;
    }
    *out = x;
    return REC_OK;
}

void rec_offload_close(rec_offload *x) {
    if (!x) return;
    for (int i = 0; x->w && i < x->nw; i++) rec__zclose(&x->w[i].sock, &x->w[i].mon);
    free(x->w);
    rec__zkeys_free(&x->keys);
    if (x->ctx) zmq_ctx_term(x->ctx);
    free(x->job.spec);
    for (int k = 0; x->job.parts && k < x->d.n_parts; k++) free(x->job.parts[k]);
    free(x->job.parts);
    free(x->job.part_bytes);
    rec_wbuf_free(&x->jobframe);
    rec_wbuf_free(&x->ping);
    rec_grid_free(x->g);
    free(x);
}

int64_t rec_offload_lines(const rec_offload *x) { return rec_grid_lines(x->g); }
void rec_offload_set(rec_offload *x, int point, double ratio) {
    x->point = point >= REC_OFFLOAD_P1 && point <= REC_OFFLOAD_P3 ? point : REC_OFFLOAD_P3;
    x->ratio = ratio < 0 ? 0 : ratio > 1 ? 1 : ratio;
}
int rec_offload_point(const rec_offload *x) { return x->point; }
double rec_offload_ratio(const rec_offload *x) { return x->ratio; }
int rec_offload_workers(const rec_offload *x) { return x->nw; }
void rec_offload_get_stats(const rec_offload *x, rec_offload_stats *s) { *s = x->st; }

/* ---- streams --------------------------------------------------------------------------------- */

enum { S_NONE = 0, S_LOCAL, S_SENT, S_READY };

typedef struct pslot {
    int64_t j;
    int state;
    int worker;
    double sent;
    zmq_msg_t msg;           /* S_READY: the answer, which `view` points into */
    int has_msg;
    rec_batch view;
    rec_jagged *sp;          /* (F) */
    rec_net_room room;       /* where the answer's narrow ids and lengths are widened */
} pslot;

struct rec_offload_stream {
    rec_offload *x;
    uint64_t gen;
    int64_t lines;           /* per piece */
    int64_t n_pieces, next, issued;
    int la;                  /* window */
    pslot *win;
    rec_prep_engine *e;
    int *fd;                 /* (n_parts) local reads */
    char *text;
    size_t text_cap;
    rec_wbuf w;
    const rec_batch *parts[257];
    int held;                /* the slot delivered last (released on the next call), or -1 */
    int local_only;          /* another stream is open: every piece is made here */
    int depth;               /* pieces in flight per worker */
};

static int is_remote(double r, int64_t j) { return floor((double)(j + 1) * r) > floor((double)j * r); }

static void slot_release(pslot *p) {
    if (p->has_msg) zmq_msg_close(&p->msg);
    p->has_msg = 0;
    p->state = S_NONE;
}

rec_status rec_offload_stream_open(rec_offload_stream **out, rec_offload *x, int64_t line, int64_t end_line,
                                   int64_t *first_line) {
    *out = NULL;
    rec_offload_stream *s = calloc(1, sizeof *s);
    if (!s) return rec_errorf(REC_ENOMEM, "out of memory for an offload stream");
    s->x = x;
    s->local_only = x->streaming; /* the sockets are the first stream's (an evaluation during training) */
    s->gen = ++x->gen & ((1u << 23) - 1);
    s->lines = x->point == REC_OFFLOAD_P2 ? REC_OFFLOAD_ELEMENT_LINES : x->d.batch;
    s->n_pieces = rec_grid_pieces(x->g, s->lines);
    /* in flight per worker: `depth` batches' worth of lines, so that a worker has work queued
     * while this thread makes a local piece */
    s->depth = (int)((x->o.depth * x->d.batch + s->lines - 1) / s->lines);
    s->la = 2 * s->depth * (x->nw > 4 ? x->nw : 4) + 4;
    s->held = -1;
    rec_status st = REC_OK;
    s->win = calloc((size_t)s->la, sizeof *s->win);
    s->fd = malloc((size_t)x->d.n_parts * sizeof *s->fd);
    if (!s->win || !s->fd) st = rec_errorf(REC_ENOMEM, "out of memory for an offload stream");
    for (int k = 0; !st && k < x->d.n_parts; k++) s->fd[k] = -1;
    for (int i = 0; !st && i < s->la; i++) {
        s->win[i].sp = calloc((size_t)x->d.n_sparse + 1, sizeof(rec_jagged));
        if (!s->win[i].sp) st = rec_errorf(REC_ENOMEM, "out of memory for an offload stream");
    }
    if (!st) st = rec_prep_engine_init(&s->e, x->d.plan, x->d.prep_threads, &x->d.tsv, x->d.path);
    /* the first piece: the one holding `line` (pieces are whole grid cells of one file) */
    rec_piece p = {0};
    int64_t lo = 0, hi = s->n_pieces;
    while (!st && hi - lo > 1) {
        const int64_t mid = (lo + hi) / 2;
        rec_grid_piece(x->g, s->lines, mid, &p);
        if (p.line0 <= line) lo = mid;
        else hi = mid;
    }
    if (st) {
        rec_offload_stream_close(s);
        return st;
    }
    s->next = s->issued = lo < s->n_pieces ? lo : s->n_pieces;
    for (int64_t a = s->next, b = s->n_pieces; !st && end_line >= 0 && a < b;) { /* pieces from end_line on: none */
        const int64_t mid = a + (b - a) / 2;
        rec_grid_piece(x->g, s->lines, mid, &p);
        if (p.line0 < end_line) a = mid + 1;
        else b = mid;
        if (a == b) s->n_pieces = a;
    }
    if (s->next < s->n_pieces) rec_grid_piece(x->g, s->lines, s->next, &p);
    *first_line = s->next < s->n_pieces ? p.line0 : rec_grid_lines(x->g);
    if (!s->local_only) x->streaming = 1;
    *out = s;
    return REC_OK;
}

void rec_offload_stream_close(rec_offload_stream *s) {
    if (!s) return;
    for (int i = 0; s->win && i < s->la; i++) {
        if (s->win[i].state == S_SENT && s->x->w[s->win[i].worker].inflight > 0) s->x->w[s->win[i].worker].inflight--;
        slot_release(&s->win[i]);
        free(s->win[i].sp);
        rec_net_room_free(&s->win[i].room);
    }
    free(s->win);
    for (int k = 0; s->fd && k < s->x->d.n_parts; k++)
        if (s->fd[k] >= 0) close(s->fd[k]);
    free(s->fd);
    free(s->text);
    rec_wbuf_free(&s->w);
    rec_prep_engine_free(s->e);
    if (!s->local_only) s->x->streaming = 0;
    free(s);
}

/* Piece p's bytes from the local file into s->text. */
static rec_status read_local(rec_offload_stream *s, const rec_piece *p) {
    const char *path = s->x->d.parts[p->part];
    if (s->fd[p->part] < 0 && (s->fd[p->part] = open(path, O_RDONLY)) < 0)
        return rec_errorf(REC_EIO, "%s: cannot open: %s", path, strerror(errno));
    return rec__read_piece(s->fd[p->part], path, p->offset, p->len, &s->text, &s->text_cap);
}

/* The worker for piece j: its home worker, j mod the workers, when that one is up and has room
 * for one more, else the up worker with the fewest pieces in flight and room: its index, -1
 * when all are full, -2 when none is up or coming up. Homes send a piece to the same worker
 * from every rank of an mpirun, which then makes it once for all (worker.c keeps answers for
 * a job's other trainers). */
static int pick_worker(const rec_offload *x, int depth, int64_t j) {
    const wconn *home = x->nw > 0 ? &x->w[j % x->nw] : NULL;
    if (home && home->state == W_UP && home->inflight < depth) return (int)(j % x->nw);
    int best = -1, alive = 0;
    for (int i = 0; i < x->nw; i++) {
        const wconn *c = &x->w[i];
        if (c->state == W_WAIT) alive = 1;
        if (c->state != W_UP) continue;
        alive = 1;
        if (c->inflight < depth && (best < 0 || c->inflight < x->w[best].inflight)) best = i;
    }
    return best >= 0 ? best : alive ? -1 : -2;
}

/* Sends piece `slot` to worker i (at p'1 with its lines). */
static rec_status send_piece(rec_offload_stream *s, pslot *slot, int i) {
    rec_offload *x = s->x;
    rec_piece p;
    rec_grid_piece(x->g, s->lines, slot->j, &p);
    rec_net_piece np = {(uint32_t)p.part, p.offset, p.len, p.first_line, p.n_lines, NULL};
    if (x->point == REC_OFFLOAD_P1) {
        REC_TRY(read_local(s, &p));
        np.text = s->text;
    }
    rec_frame_begin(&s->w, REC_MSG_PIECE, x->key, s->gen << GEN_SHIFT | (uint64_t)slot->j);
    rec_net_piece_encode(&s->w, &np);
    REC_TRY(rec_frame_end(&s->w));
    if (rec__zsend(x->w[i].sock, NULL, &s->w, ZMQ_DONTWAIT)) {
        set_down(x, i, "cannot send to it");
        slot->state = S_LOCAL;
        return REC_OK;
    }
    x->st.bytes_out += s->w.len;
    slot->state = S_SENT;
    slot->worker = i;
    slot->sent = rec_now();
    x->w[i].inflight++;
    return REC_OK;
}

/* Decides pieces [issued, next + la) in order: local ones are marked, remote ones sent while
 * a worker has room (the rest wait for the next call). */
static rec_status issue(rec_offload_stream *s) {
    rec_offload *x = s->x;
    while (s->issued < s->n_pieces && s->issued < s->next + s->la) {
        pslot *slot = &s->win[s->issued % s->la];
        slot->j = s->issued;
        if (is_remote(x->ratio, s->issued)) {
            const int i = pick_worker(x, s->depth, s->issued);
            if (i == -1) break;
            if (i == -2) slot->state = S_LOCAL;
            else REC_TRY(send_piece(s, slot, i));
        } else {
            slot->state = S_LOCAL;
        }
        s->issued++;
    }
    return REC_OK;
}

/* Worker i is down: its pieces in flight are made here. */
static void worker_lost(rec_offload_stream *s, int i, const char *why) {
    set_down(s->x, i, why);
    for (int k = 0; k < s->la; k++)
        if (s->win[k].state == S_SENT && s->win[k].worker == i) {
            s->win[k].state = S_LOCAL;
            s->x->st.redone++;
        }
}

/* One message from worker i. Fails only for a data error in the piece being waited for. */
static rec_status on_answer(rec_offload_stream *s, int i, zmq_msg_t *m) {
    rec_offload *x = s->x;
    wconn *c = &x->w[i];
    rec_frame_head h;
    x->st.bytes_in += zmq_msg_size(m);
    char from[300];
    snprintf(from, sizeof from, "worker %s", c->addr);
    if (rec_frame_head_decode(zmq_msg_data(m), zmq_msg_size(m), from, &h) || h.job != x->key) {
        x->st.refused++;
        worker_lost(s, i, h.job != x->key && h.type ? "answered for another job" : rec_errmsg());
        return REC_OK;
    }
    if (c->state == W_WAIT) {
        c->state = W_UP;
        c->refused[0] = 0;
        if (x->st.worker_downs) wlog(x, "train: offload: worker %s is up\n", c->addr);
    }
    const uint64_t gen = h.seq >> GEN_SHIFT;
    const int64_t j = (int64_t)(h.seq & (((uint64_t)1 << GEN_SHIFT) - 1));
    pslot *slot = j >= s->next && j < s->issued ? &s->win[j % s->la] : NULL;
    const int mine = slot && gen == s->gen && slot->state == S_SENT && slot->worker == i;
    if (h.type == REC_MSG_PONG || h.type == REC_MSG_JOB_OK) return REC_OK;
    if (h.type == REC_MSG_NOJOB) { /* restarted since it took the job: the job again, then the piece */
        if (!mine) return REC_OK;
        c->inflight--;
        rec__zsend(c->sock, NULL, &x->jobframe, ZMQ_DONTWAIT);
        return send_piece(s, slot, i);
    }
    if (h.type == REC_MSG_ERROR) {
        rec_status code;
        char msg[1024];
        if (rec_net_error_decode((const uint8_t *)zmq_msg_data(m) + REC_NET_HEAD, h.body, &code, msg, sizeof msg)) {
            x->st.refused++;
            worker_lost(s, i, rec_errmsg());
            return REC_OK;
        }
        if (code == REC_EFORMAT && h.seq != 0) { /* a piece's data (a JOB has seq 0) */
            if (mine) /* the same error the local pipeline would give */
                return rec_errorf(REC_EFORMAT, "%s (preprocessed by worker %s)", msg, c->addr);
            x->st.late++; /* a piece no longer asked of it */
            return REC_OK;
        }
        if (c->state != W_UNFIT)
            wlog(x, "train: offload: worker %s cannot serve this job: %s; it is left out\n", c->addr, msg);
        worker_lost(s, i, msg);
        c->state = W_UNFIT;
        return REC_OK;
    }
    if (h.type != REC_MSG_RESULT) {
        x->st.refused++;
        worker_lost(s, i, "sent a frame that is not an answer");
        return REC_OK;
    }
    if (!mine) {
        x->st.late++;
        return REC_OK;
    }
    /* the batch is read in place: keep the message, 8-byte aligned (a copy if it is not) */
    zmq_msg_init(&slot->msg);
    const uint8_t *frame;
    REC_TRY(rec__zmsg_aligned(&slot->msg, m, &frame, NULL));
    slot->has_msg = 1;
    int64_t bad;
    rec_piece p;
    rec_grid_piece(x->g, s->lines, j, &p);
    const rec_status bad_frame = rec_net_result_decode(frame + REC_NET_HEAD, h.body, x->d.n_dense, x->d.n_sparse,
                                                      x->d.table_rows, &bad, &slot->view, slot->sp, &slot->room);
    if (bad_frame || slot->view.n + bad != p.n_lines) {
        char why[1100];
        snprintf(why, sizeof why, "its answer for piece %lld was refused: %s", (long long)j,
                 bad_frame ? rec_errmsg() : "rows and bad rows do not add up to the piece's lines");
        slot_release(slot);
        slot->state = S_SENT; /* worker_lost makes it local */
        x->st.refused++;
        worker_lost(s, i, why);
        return REC_OK;
    }
    slot->has_msg = 1;
    slot->state = S_READY;
    c->inflight--;
    x->st.pieces_remote++;
    return REC_OK;
}

/* Deadlines: a worker that has not answered its probe, or a piece, within the timeout is
 * down. Checked after the answers at hand are taken, so that time spent elsewhere (the
 * trainer building its model) never counts against answers that have arrived. */
static void check_deadlines(rec_offload_stream *s) {
    rec_offload *x = s->x;
    const double now = rec_now();
    char why[300];
    for (int i = 0; i < x->nw; i++) {
        wconn *c = &x->w[i];
        if (rec__zmon_failed(c->mon, 0, x->keys.on, why, sizeof why)) { /* a refusal: not worth waiting for */
            if (strcmp(why, c->refused))
                wlog(x, "train: offload: worker %s refused this trainer's connection: %s; its pieces are made here\n",
                     c->addr, why);
            snprintf(c->refused, sizeof c->refused, "%s", why);
            if (c->state == W_WAIT || c->state == W_UP) worker_lost(s, i, why);
        }
        if (c->state == W_WAIT && now - c->since > x->o.timeout_s) set_down(x, i, "no answer");
    }
    for (int k = 0; k < s->la; k++) {
        pslot *p = &s->win[k];
        if (p->state == S_SENT && now - p->sent > x->o.timeout_s) {
            char why[96];
            snprintf(why, sizeof why, "piece %lld unanswered for %.1f s", (long long)p->j, now - p->sent);
            worker_lost(s, p->worker, why);
        }
    }
}

/* Waits up to wait_ms for answers and takes every one at hand; then reconnects workers that
 * are due a probe and checks the deadlines. */
static rec_status pump(rec_offload_stream *s, int wait_ms) {
    rec_offload *x = s->x;
    if (x->o.workers_file && rec_now() - x->list_read >= LIST_EVERY_S) REC_TRY(read_list(x, 0));
    for (int k = 0; k < s->la; k++) /* pieces of workers let go */
        if (s->win[k].state == S_SENT && x->w[s->win[k].worker].state == W_GONE) {
            s->win[k].state = S_LOCAL;
            x->st.redone++;
        }
    zmq_pollitem_t it[MAX_WORKERS];
    int who[MAX_WORKERS], n = 0;
    for (int i = 0; i < x->nw; i++)
        if (x->w[i].state == W_UP || x->w[i].state == W_WAIT) {
            it[n] = (zmq_pollitem_t){x->w[i].sock, 0, ZMQ_POLLIN, 0};
            who[n++] = i;
        }
    if (n == 0 && wait_ms > 0) usleep((useconds_t)wait_ms * 1000);
    if (n > 0 && zmq_poll(it, n, wait_ms) < 0 && zmq_errno() != EINTR)
        return rec_errorf(REC_EIO, "offload: poll failed: %s", zmq_strerror(zmq_errno()));
    for (int k = 0; k < n; k++) {
        if (!(it[k].revents & ZMQ_POLLIN)) continue;
        for (int got = 0; got < 64; got++) {
            zmq_msg_t m;
            zmq_msg_init(&m);
            if (zmq_msg_recv(&m, x->w[who[k]].sock, ZMQ_DONTWAIT) < 0) {
                zmq_msg_close(&m);
                break;
            }
            rec_status st = on_answer(s, who[k], &m);
            zmq_msg_close(&m);
            if (st) return st;
            if (x->w[who[k]].state != W_UP && x->w[who[k]].state != W_WAIT) break;
        }
    }
    const double now = rec_now();
    for (int i = 0; i < x->nw; i++)
        if (x->w[i].state == W_DOWN && now - x->w[i].since >= PROBE_EVERY_S) connect_worker(x, i);
    check_deadlines(s);
    return REC_OK;
}

int rec_offload_wait_workers(rec_offload *x, double seconds) {
    rec_offload_stream tmp = {.x = x, .la = 0, .gen = 0};
    const double t0 = rec_now();
    for (;;) {
        int up = 0, pending = 0;
        for (int i = 0; i < x->nw; i++) up += x->w[i].state == W_UP, pending += x->w[i].state == W_WAIT;
        if (!pending || rec_now() - t0 > seconds) return up;
        pump(&tmp, 50);
    }
}

rec_status rec_offload_stream_next(rec_offload_stream *s, const rec_batch *const **parts, int *n) {
    rec_offload *x = s->x;
    *n = 0;
    *parts = s->parts;
    if (s->held >= 0) {
        slot_release(&s->win[s->held]);
        s->held = -1;
    }
    if (s->next >= s->n_pieces) return REC_OK;
    pslot *slot = &s->win[s->next % s->la];
    if (s->local_only) slot->state = S_LOCAL, s->issued = s->next + 1;
    for (; !s->local_only;) {
        REC_TRY(issue(s));
        REC_TRY(pump(s, 0));
        if (s->issued > s->next && (slot->state == S_LOCAL || slot->state == S_READY)) break;
        REC_TRY(pump(s, 20));
    }
    if (slot->state == S_READY) {
        s->parts[0] = &slot->view;
        *n = 1;
        s->held = (int)(s->next % s->la);
    } else {
        rec_piece p;
        rec_grid_piece(x->g, s->lines, s->next, &p);
        REC_TRY(read_local(s, &p));
        const rec_text_chunk c = {x->d.parts[p.part], s->text, p.len, p.first_line, p.n_lines};
        REC_TRY(rec_prep_engine_run(s->e, &c));
        *n = rec_prep_engine_threads(s->e);
        for (int t = 0; t < *n; t++) s->parts[t] = rec_prep_engine_batch(s->e, t);
        slot->state = S_NONE;
        if (!s->local_only) x->st.pieces_local++;
    }
    s->next++;
    return REC_OK;
}
