/* The preprocessing worker (`rectrain prep-worker`, offload.h): a ZeroMQ ROUTER that serves
 * pieces of jobs, one request at a time, with the same fused prep engine as the trainer.
 *
 * A JOB request makes (or finds) the job's state: its spec parsed from the frame's text, the
 * vocabularies of --vocab-from opened from this host's copy (checked against the trainer's by
 * their digest), the compiled plan and an engine. Up to MAX_JOBS are kept, least recently
 * used evicted; a PIECE of a job not kept is answered NOJOB, and the trainer sends the job
 * again (also what a restarted worker sees). A piece's lines are read from the file here
 * (p'2, p'3) or come in the frame (p'1); the result is one batch of its rows.
 *
 * Every frame is validated (net.h) before it is used; one that fails is logged and answered
 * with ERROR where it said who it was from, and the worker goes on.
 *
 * The answers at p'2 and p'3 are kept, the last KEPT_SLOTS up to keep_mb MiB: the ranks of an
 * mpirun each read every global batch, so each asks for the same pieces, and a piece asked for
 * again is answered from them: the worker preprocesses it once for all the ranks. Every answer
 * is kept from the first ask, since the first rank may be any number of pieces ahead of the
 * others' first ask. An answer is the piece's rows, a pure function of the job and the piece's
 * place in its file, and each trainer checks it as any answer. At p'1 the lines come in the
 * request and are made for each.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "offload_impl.h"
#include "rectrain/core.h"
#include "rectrain/offload.h"
#include "rectrain/shard.h"

enum { MAX_JOBS = 4, KEPT_SLOTS = 256, MAX_KEEP_MB = 1 << 20 };

typedef struct wjob {
    uint64_t key;
    rec_net_job j;
    rec_spec *spec;
    rec_shard *vshard;
    rec_prep_plan *plan;
    rec_prep_engine *e;
    int *fd;                 /* (n_parts) -1 until first read */
    rec_batch out;           /* the piece's rows, concatenated from the engine's threads */
    double used;
} wjob;

/* A RESULT's body kept for the job's other asks, found by the job and the piece. */
typedef struct kept {
    uint64_t job;
    rec_net_piece p;         /* text NULL */
    uint8_t *body;
    size_t n;
} kept;

typedef struct worker {
    const rec_prep_worker_opts *o;
    rec_zservice svc;
    wjob jobs[MAX_JOBS];
    rec_wbuf w;
    char *text;              /* a piece read from its file */
    size_t text_cap;
    kept kept[KEPT_SLOTS];   /* a ring: the oldest at kept_head */
    int kept_head, kept_n;
    size_t kept_bytes, keep_bytes; /* held, and the most held (o->keep_mb) */
    int64_t pieces, refused;  /* refused: requests that were not served */
    int64_t pieces_kept;     /* answered from kept answers */
} worker;

static void job_free(wjob *j) {
    rec_prep_engine_free(j->e);
    rec_prep_plan_free(j->plan);
    rec_spec_free(j->spec);
    rec_shard_close(j->vshard);
    for (int k = 0; j->fd && k < j->j.n_parts; k++)
        if (j->fd[k] >= 0) close(j->fd[k]);
    free(j->fd);
    rec_batch_free(&j->out);
    rec_net_job_free(&j->j);
    memset(j, 0, sizeof *j);
}

static wjob *job_find(worker *w, uint64_t key) {
    for (int i = 0; i < MAX_JOBS; i++)
        if (w->jobs[i].plan && w->jobs[i].key == key) {
            w->jobs[i].used = rec_now();
            return &w->jobs[i];
        }
    return NULL;
}

/* Builds job j (decoded in j->j) as the trainer's data set does: spec from its text,
 * vocabularies bound from the worker's copy of the shard, plan, engine. */
static rec_status job_build(worker *w, wjob *j) {
    REC_TRY(rec_spec_parse(&j->spec, j->j.spec, strlen(j->j.spec), j->j.spec_origin));
    const rec_vocab_set *vocabs = NULL;
    if (j->spec->n_vocabs > 0) {
        if (!j->j.vocab_from[0])
            return rec_errorf(REC_EINVAL, "the job's spec %s has categorify ops and no vocabulary shard", j->j.spec_origin);
        REC_TRY(rec_shard_open(&j->vshard, j->j.vocab_from));
        REC_TRY(rec_shard_bind_vocabs(j->vshard, j->spec, j->j.spec_origin));
        vocabs = rec_shard_vocabs(j->vshard);
        if (rec__vocab_digest(vocabs) != j->j.vocab_digest)
            return rec_errorf(REC_EINVAL, "this worker's %s holds other vocabularies than the trainer's: give both the "
                              "same file", j->j.vocab_from);
    }
    REC_TRY(rec_prep_plan_init(&j->plan, j->spec, vocabs));
    REC_TRY(rec_prep_engine_init(&j->e, j->plan, w->o->threads, &j->j.tsv, j->j.parts[0]));
    REC_TRY(rec_batch_init(&j->out, 4096, j->spec->n_dense, j->spec->n_sparse, 1));
    j->fd = malloc((size_t)j->j.n_parts * sizeof *j->fd);
    if (!j->fd) return rec_errorf(REC_ENOMEM, "out of memory for a job");
    for (int k = 0; k < j->j.n_parts; k++) j->fd[k] = -1;
    return REC_OK;
}

static rec_status on_job(worker *w, const rec_frame_head *h, const uint8_t *body) {
    rec_net_job nj;
    rec_status s = rec_net_job_decode(body, h->body, &nj);
    if (s) {
        rec_net_job_free(&nj);
        return s;
    }
    const uint64_t key = rec_net_job_key(&nj);
    if (job_find(w, key)) {
        rec_net_job_free(&nj);
        return REC_OK;
    }
    int slot = 0;
    for (int i = 1; i < MAX_JOBS; i++)
        if (w->jobs[i].used < w->jobs[slot].used) slot = i;
    wjob *j = &w->jobs[slot];
    job_free(j);
    j->j = nj;
    j->key = key;
    j->used = rec_now();
    s = job_build(w, j);
    if (s) {
        job_free(j);
        return s;
    }
    if (w->o->log)
        fprintf(w->o->log, "prep-worker: job %016llx: spec %s, %d file(s) from %s%s\n", (unsigned long long)key,
                j->j.spec_origin, j->j.n_parts, j->j.parts[0], j->j.n_parts > 1 ? ", ..." : "");
    return REC_OK;
}

/* Reads the piece's bytes from this host's copy of its file into w->text. */
static rec_status read_piece(worker *w, wjob *j, const rec_net_piece *p, const char **text) {
    const char *path = j->j.parts[p->part];
    if (j->fd[p->part] < 0) {
        const int fd = open(path, O_RDONLY);
        if (fd < 0)
            return rec_errorf(REC_EIO, "cannot open %s here: %s (offload at p'1 sends the lines instead)", path,
                              strerror(errno));
        struct stat st;
        if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != j->j.part_bytes[p->part]) {
            close(fd);
            return rec_errorf(REC_EIO, "%s here is %lld bytes and the trainer's %llu: not the same file", path,
                              (long long)st.st_size, (unsigned long long)j->j.part_bytes[p->part]);
        }
        j->fd[p->part] = fd;
    }
    if (p->offset + p->len > j->j.part_bytes[p->part])
        return rec_errorf(REC_EINVAL, "bytes [%llu, %llu) asked of %s, which has %llu", (unsigned long long)p->offset,
                          (unsigned long long)(p->offset + p->len), path, (unsigned long long)j->j.part_bytes[p->part]);
    REC_TRY(rec__read_piece(j->fd[p->part], path, p->offset, p->len, &w->text, &w->text_cap));
    *text = w->text;
    return REC_OK;
}

/* ---- kept answers ---- */

static void kept_drop_oldest(worker *w) {
    kept *k = &w->kept[w->kept_head];
    w->kept_bytes -= k->n;
    free(k->body);
    memset(k, 0, sizeof *k);
    w->kept_head = (w->kept_head + 1) % KEPT_SLOTS;
    w->kept_n--;
}

static const kept *kept_find(const worker *w, uint64_t job, const rec_net_piece *p) {
    for (int i = 0; i < w->kept_n; i++) {
        const kept *k = &w->kept[(w->kept_head + i) % KEPT_SLOTS];
        if (k->job == job && k->p.part == p->part && k->p.offset == p->offset && k->p.len == p->len &&
            k->p.first_line == p->first_line && k->p.n_lines == p->n_lines)
            return k;
    }
    return NULL;
}

/* Keeps the body of the RESULT frame in w->w, making room by dropping the oldest. Out of memory
 * keeps nothing: the answer is made again when asked for. */
static void kept_add(worker *w, uint64_t job, const rec_net_piece *p) {
    const size_t n = w->w.len - REC_NET_HEAD;
    if (n > w->keep_bytes) return;
    while (w->kept_n > 0 && (w->kept_n == KEPT_SLOTS || w->kept_bytes + n > w->keep_bytes)) kept_drop_oldest(w);
    uint8_t *b = malloc(n ? n : 1);
    if (!b) return;
    memcpy(b, w->w.p + REC_NET_HEAD, n);
    kept *k = &w->kept[(w->kept_head + w->kept_n) % KEPT_SLOTS];
    *k = (kept){job, *p, b, n};
    k->p.text = NULL;
    w->kept_n++;
    w->kept_bytes += n;
}

/* Preprocesses a piece into j->out and encodes the RESULT frame; at p'2 and p'3 the answer
 * comes from, or goes into, the kept answers. */
static rec_status on_piece(worker *w, wjob *j, const rec_frame_head *h, const uint8_t *body) {
    rec_net_piece p;
    REC_TRY(rec_net_piece_decode(body, h->body, &p));
    const int keep = w->keep_bytes > 0 && !p.text;
    const kept *k = keep ? kept_find(w, j->key, &p) : NULL;
    if (k) {
        rec_frame_begin(&w->w, REC_MSG_RESULT, h->job, h->seq);
        uint8_t *b = rec_wbuf_grab(&w->w, k->n);
        if (b) memcpy(b, k->body, k->n);
        w->pieces_kept++;
        return rec_frame_end(&w->w);
    }
    if ((int)p.part >= j->j.n_parts)
        return rec_errorf(REC_EINVAL, "file %u asked for, and the job has %d", p.part, j->j.n_parts);
    const char *text = p.text;
    if (!text) REC_TRY(read_piece(w, j, &p, &text));
    /* whole lines: the piece ends at a '\n', or at the end of its file */
    if (text[p.len - 1] != '\n' && p.offset + p.len != j->j.part_bytes[p.part])
        return rec_errorf(REC_EINVAL, "the piece at byte %llu of %s does not end at a line's end",
                          (unsigned long long)p.offset, j->j.parts[p.part]);
    const rec_text_chunk c = {j->j.parts[p.part], text, p.len, p.first_line, p.n_lines};
    const int64_t bad0 = rec_prep_engine_bad(j->e)->count;
    REC_TRY(rec_prep_engine_run(j->e, &c));
    int64_t rows = 0;
    for (int t = 0; t < rec_prep_engine_threads(j->e); t++) rows += rec_prep_engine_batch(j->e, t)->n;
    if (rows > j->out.cap) {
        rec_batch_free(&j->out);
        REC_TRY(rec_batch_init(&j->out, rows, j->spec->n_dense, j->spec->n_sparse, 1));
    }
    j->out.n = 0;
    for (int32_t f = 0; f < j->out.n_sparse; f++) j->out.sparse[f].offsets[0] = 0;
    for (int t = 0; t < rec_prep_engine_threads(j->e); t++) {
        const rec_batch *b = rec_prep_engine_batch(j->e, t);
        REC_TRY(rec_batch_append_rows(&j->out, b, 0, b->n));
    }
    rec_frame_begin(&w->w, REC_MSG_RESULT, h->job, h->seq);
    rec_net_result_encode(&w->w, rec_prep_engine_bad(j->e)->count - bad0, &j->out);
    w->pieces++;
    REC_TRY(rec_frame_end(&w->w));
    if (keep) kept_add(w, j->key, &p);
    return REC_OK;
}

/* One request: [identity][frame]. Anything else is dropped; a frame that fails validation is
 * answered with ERROR when its header could be read. */
static void serve_one(void *arg) {
    worker *w = arg;
    rec_zreq r;
    if (!rec__zservice_take(&w->svc, &r, &w->w)) return;
    const rec_frame_head h = r.h;
    const uint8_t *body = r.body;
    rec_status s;
    wjob *j = NULL;
    if (h.type == REC_MSG_PING) {
        rec_frame_begin(&w->w, REC_MSG_PONG, h.job, h.seq);
        s = rec_frame_end(&w->w);
    } else if (h.type == REC_MSG_JOB) {
        s = on_job(w, &h, body);
        if (!s) {
            rec_frame_begin(&w->w, REC_MSG_JOB_OK, h.job, h.seq);
            s = rec_frame_end(&w->w);
        }
    } else if (h.type == REC_MSG_PIECE && !(j = job_find(w, h.job))) {
        rec_frame_begin(&w->w, REC_MSG_NOJOB, h.job, h.seq);
        s = rec_frame_end(&w->w);
    } else if (h.type == REC_MSG_PIECE) {
        s = on_piece(w, j, &h, body);
    } else {
        s = rec_errorf(REC_EFORMAT, "a %s frame is not a request", rec_msg_name(h.type));
    }
    if (s == REC_EFORMAT && h.type != REC_MSG_PIECE) w->refused++;
    rec__zservice_answer(&w->svc, &r, &w->w, s);
}

rec_status rec_prep_worker_run(const rec_prep_worker_opts *o) {
    if (o->threads < 1 || o->threads > 256)
        return rec_errorf(REC_EINVAL, "prep-worker: threads must be between 1 and 256 (got %d)", o->threads);
    if (o->keep_mb < 0 || o->keep_mb > MAX_KEEP_MB)
        return rec_errorf(REC_EINVAL, "prep-worker: keep_mb must be between 0 and %d MiB (got %d)", MAX_KEEP_MB, o->keep_mb);
    worker w = {.o = o, .keep_bytes = (size_t)o->keep_mb << 20};
    rec_status s = rec__zservice_open(&w.svc, "prep-worker", o->listen, &o->sec, o->log);
    if (!s && o->log) {
        fprintf(o->log, "prep-worker: listening on %s with %d thread%s\n", o->listen, o->threads, o->threads == 1 ? "" : "s");
        fflush(o->log);
    }
    if (!s) s = rec__zservice_run(&w.svc, o->stop, serve_one, &w);
    w.refused += w.svc.refused;
    if (!s && o->log)
        fprintf(o->log, "prep-worker: stopped after %lld piece%s, and %lld answered again from kept answers (%lld "
                "frame%s refused)\n", (long long)w.pieces, w.pieces == 1 ? "" : "s",
                (long long)w.pieces_kept, (long long)w.refused, w.refused == 1 ? "" : "s");
    for (int i = 0; i < MAX_JOBS; i++) job_free(&w.jobs[i]);
    while (w.kept_n > 0) kept_drop_oldest(&w);
    rec_wbuf_free(&w.w);
    free(w.text);
    rec__zservice_close(&w.svc);
    return s;
}
