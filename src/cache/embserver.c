/* The embedding server (`rectrain embserver`, cache.h): one shard of every table, as a
 * parameter server of rows (Bagpipe §3.4 "EmbeddingServers").
 *
 * The first EMB_HELLO makes the shard: row r of table f lives here when r mod S == shard, at
 * local index r / S, with its optimizer state; values are drawn as rec_embed_init draws them
 * (stream f of the embedding seed, row-major, every row drawn and this shard's kept), so the
 * tables are the ones one process would start from. DeepFM's and Wide&Deep's first-order
 * tables (the HELLO's `lin`) live with the rows: a row is its E values and its first-order
 * value (drawn as model.c draws its dim-1 tables, from their own seed), and its state is the
 * row's then the first-order value's; GET and PUT move them together, and the undo log and
 * snapshots keep them. Later HELLOs must name the same tables. Tables the HELLO says are bf16
 * (the model's "embedding": {"precision": "bf16"}) are kept as bf16 bits, drawn rounded to
 * nearest as rec_embed_init rounds them, and their rows travel as those bits; the trainers
 * step rows in their caches as one process steps a bf16 row (rec_sparse_opt_step_bf16), so a
 * PUT brings values that are bf16 already. A HELLO of another precision (or rounding) than
 * the tables held is refused, also when they came from a snapshot.
 * GET answers the rows' values and state; PUT overwrites them and is acknowledged. Requests
 * are served one at a time in arrival order, so a trainer's PUT before its GET on the same
 * connection is seen by that GET.
 *
 * Durable jobs (the HELLO says so): every PUT of step s (its `seq`) first logs the rows' old
 * values, until COMMIT(s') with s' >= s drops them; ROLLBACK(c) puts back, newest first, every
 * row written after step c. The trainer's commit of a step is the COMMIT that carries its
 * dense state to server 0, so a trainer restarted after a kill finds the last whole step there
 * (DENSE_GET) and rolls every server back to it. Each frame names its trainers' run (`job`,
 * drawn at their start); the server serves the run of the last HELLO alone, so that a killed
 * trainer's requests still queued here (PUTs, a COMMIT) cannot land after the rollback.
 *
 * With --ckpt DIR the server also saves its shard (rows, state, dense state) at the commit of
 * every step s with (s + 1) mod K == 0 (the same steps on every server) as DIR/shard-STEP.rsnap (written whole or not at all; the last two kept), and starts
 * from the newest one that reads back whole: a server killed and restarted is at that step, and
 * a resumed trainer has every server RESTORE the same step.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../net/zmq_impl.h"
#include "rectrain/cache.h"
#include "rectrain/core.h"
#include "rectrain/embed.h"

enum { UNDO_KEY = 4 }; /* floats of an undo entry's (step, local row) as two int64s */

typedef struct server {
    const rec_embserver_opts *o;
    rec_zservice svc;
    rec_wbuf w;
    int ready;               /* tables made */
    rec_net_emb_hello t;     /* t.rows points at rows */
    int64_t *rows;           /* (F) */
    int64_t *off;            /* (F) first local row of table f */
    int V;                   /* value floats per row: E, and its first-order value (t.lin) */
    int S;                   /* state floats per row: the row's, then its first-order value's */
    int b16;                 /* the values are bf16 bits (t.bf16): values16, else values */
    float *values;           /* (local rows, V) */
    uint16_t *values16;      /* (local rows, V) */
    float *state;            /* (local rows, S) */
    int64_t gets, puts, rows_out, rows_in, refused;
    /* durable jobs */
    int durable, written;
    int64_t committed;       /* -1: nothing committed */
    float *undo;             /* entries of (step, local row) + the old E + S floats */
    int64_t undo_n, undo_cap;/* entries */
    float *dense;            /* the dense state of the last commit (server 0) */
    int64_t dense_n;
    int64_t snap[2];         /* the steps of the snapshots kept, newest first (-1 none) */
    int greeted;             /* a HELLO came since this process started (a restarted one needs it) */
    uint64_t job;            /* the run of the last HELLO (its frames' `job`): another's requests are refused */
    int restored;            /* the tables came from a snapshot at start: the job must go back to it */
} server;

int rec_cache_state_floats(int opt, int E) {
    return opt == REC_SPARSE_ADAGRAD ? E : opt == REC_SPARSE_ROWWISE_ADAGRAD ? 1 : 0;
}

static void server_drop(server *v) {
    rec_free(v->values), rec_free(v->values16), rec_free(v->state);
    free(v->undo), free(v->dense);
    v->undo = v->dense = NULL;
    v->undo_n = v->undo_cap = v->dense_n = 0;
    free(v->rows), free(v->off);
    v->values = v->state = NULL;
    v->values16 = NULL;
    v->rows = v->off = NULL;
    v->ready = 0;
}

/* Floats of a row's optimizer state on the wire and here: the row's (E, 1 or 0), then with
 * first-order tables the first-order value's (1 or 0: a dim-1 row's). */
int rec_cache_row_state_floats(int opt, int E, int lin) {
    return rec_cache_state_floats(opt, E) + (lin ? rec_cache_state_floats(opt, 1) : 0);
}

/* Value i of the shard (fp32, or bf16 bits rounded to nearest: exact for bf16 values), and as
 * fp32. */
static void set_value(server *v, int64_t i, float x) {
    if (v->b16) v->values16[i] = rec_bf16_bits(x);
    else v->values[i] = x;
}
static float get_value(const server *v, int64_t i) { return v->b16 ? rec_bf16_to_float(v->values16[i]) : v->values[i]; }

/* "fp32", "bf16 (stochastic rounding)", "bf16 (nearest rounding)": tables of h's kind. */
static const char *precision_name(int bf16, int rounding) {
    return !bf16 ? "fp32" : rounding == REC_ROUND_NEAREST ? "bf16 (nearest rounding)" : "bf16 (stochastic rounding)";
}

/* Makes this shard of the tables h describes. */
static rec_status make_tables(server *v, const rec_net_emb_hello *h) {
    const int F = h->F, E = h->E, V = E + h->lin, S = rec_cache_row_state_floats(h->opt, E, h->lin);
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
    v->b16 = h->bf16;
    if (v->b16) REC_TRY(rec_alloc((void **)&v->values16, sizeof(uint16_t) * (size_t)(n * V) + 64, "the shard's rows"));
    else REC_TRY(rec_alloc((void **)&v->values, sizeof(float) * (size_t)(n * V) + 64, "the shard's rows"));
    REC_TRY(rec_alloc((void **)&v->state, sizeof(float) * (size_t)(n * S) + 64, "the shard's optimizer state"));
    for (int64_t i = 0; i < n * S; i++) v->state[i] = h->init_acc;
    for (int f = 0; f < F; f++) { /* as embed.c's init_table, keeping this shard's rows */
        rec_rng g;
        rec_rng_seed(&g, h->seed, (uint64_t)f);
        const double a = sqrt(1.0 / (double)h->rows[f]);
        const int64_t T = v->off[f] * V; /* the table's first value */
        for (int64_t r = 0; r < h->rows[f]; r++) {
            const int mine = r % h->shards == h->shard;
            for (int e = 0; e < E; e++) {
                const float x = (float)((2.0 * rec_rng_uniform(&g) - 1.0) * a);
                if (mine) set_value(v, T + (r / h->shards) * V + e, x);
            }
        }
        if (!h->lin) continue;
        rec_rng_seed(&g, h->lin_seed, (uint64_t)f); /* model.c's lin.f: a dim-1 table of its own seed */
        for (int64_t r = 0; r < h->rows[f]; r++) {
            const float x = (float)((2.0 * rec_rng_uniform(&g) - 1.0) * a);
            if (r % h->shards == h->shard) set_value(v, T + (r / h->shards) * V + E, x);
        }
    }
    v->t = *h;
    v->t.rows = v->rows;
    v->S = S;
    v->V = V;
    v->ready = 1;
    v->durable = h->durable;
    v->written = 0;
    v->committed = -1;
    return REC_OK;
}

static rec_status on_hello(server *v, const rec_zreq *r) {
    rec_net_emb_hello h;
    REC_TRY(rec_net_emb_hello_decode(r->body, r->h.body, &h));
    if (v->ready) {
        if (h.bf16 != v->t.bf16 || h.rounding != v->t.rounding)
            return rec_errorf(REC_EINVAL, "this server holds %s tables%s and the trainer's model has %s tables: train "
                              "with the model's \"embedding\": {\"precision\", \"rounding\"} of the job that made "
                              "them, or restart the server (without its snapshots) for a new job",
                              precision_name(v->t.bf16, v->t.rounding),
                              v->restored ? " (restored from its snapshot)" : "", precision_name(h.bf16, h.rounding));
        if (h.digest != v->t.digest)
            return rec_errorf(REC_EINVAL, "this server holds shard %d of %d of other tables (%d of dim %d); give the "
                              "trainer the endpoints in shard order, or restart the server for new tables", v->t.shard,
                              v->t.shards, v->t.F, v->t.E);
        if (h.durable && !v->durable && v->written)
            return rec_errorf(REC_EINVAL, "this server's rows were written by a job that was not durable: restart it");
        v->durable = h.durable;
        v->greeted = 1;
        v->job = r->h.job;
        return REC_OK;
    }
    rec_status s = make_tables(v, &h);
    if (s) {
        server_drop(v);
        return s;
    }
    v->greeted = 1;
    v->job = r->h.job;
    if (v->o->log) {
        fprintf(v->o->log, "embserver: shard %d of %d: %lld rows of %d %s tables, dim %d (%.1f MB)\n", h.shard,
                h.shards, (long long)v->off[h.F], h.F, precision_name(h.bf16, h.rounding), h.E,
                (double)v->off[h.F] * ((v->b16 ? 2.0 : 4.0) * v->V + 4.0 * v->S) / 1e6);
        fflush(v->o->log);
    }
    return REC_OK;
}

/* The local index of e's row. */
static int64_t local_of(const server *v, const rec_centry *e) { return v->off[e->f] + e->row / v->t.shards; }
static float *state_of(server *v, const rec_centry *e) { return v->state + (size_t)local_of(v, e) * v->S; }

/* Local row i's V values as fp32 into out, or from in (rounded to nearest into bf16: exact for
 * values that are bf16 already). */
static void row_get(const server *v, int64_t i, float *out) {
    for (int e = 0; e < v->V; e++) out[e] = get_value(v, i * v->V + e);
}
static void row_set(server *v, int64_t i, const float *in) {
    for (int e = 0; e < v->V; e++) set_value(v, i * v->V + e, in[e]);
}

static rec_status on_get(server *v, const rec_zreq *r) {
    rec_net_rows q;
    REC_TRY(rec_net_rows_decode(r->body, r->h.body, "EMB_GET", 1, 0, &v->t, v->S, &q));
    const int E = v->V, S = v->S; /* a row's values on the wire: its first-order value with them */
    rec_frame_begin(&v->w, REC_MSG_EMB_ROWS, r->h.job, r->h.seq);
    const int64_t n = q.n;
    /* the body: n, values, state (rec_net_rows_encode's layout, written in place) */
    rec_net_rows hdr = {n, NULL, NULL, NULL, NULL};
    rec_net_rows_encode(&v->w, &hdr, 0, E, S);
    if (n > (int64_t)(REC_NET_MAX_BODY / 4 / (size_t)(E + S)) - 4)
        return rec_errorf(REC_EINVAL, "a GET of %lld rows: the answer would be over %zu bytes; ask in parts",
                          (long long)n, REC_NET_MAX_BODY);
    const size_t vbytes = rec_net_rows_value_bytes(n, E, v->b16);
    uint8_t *out = rec_wbuf_grab(&v->w, vbytes + sizeof(float) * (size_t)(n * S));
    if (v->w.err) return v->w.err;
    for (int64_t i = 0; i < n; i++) {
        const int64_t at = local_of(v, &q.e[i]) * E;
        if (v->b16) memcpy(out + sizeof(uint16_t) * (size_t)(i * E), v->values16 + at, sizeof(uint16_t) * (size_t)E);
        else memcpy(out + sizeof(float) * (size_t)(i * E), v->values + at, sizeof(float) * (size_t)E);
    }
    memset(out + (v->b16 ? sizeof(uint16_t) : sizeof(float)) * (size_t)(n * E), 0,
           vbytes - (v->b16 ? sizeof(uint16_t) : sizeof(float)) * (size_t)(n * E)); /* the padding */
    out += vbytes;
    for (int64_t i = 0; S && i < n; i++) memcpy(out + sizeof(float) * (size_t)(i * S), state_of(v, &q.e[i]), sizeof(float) * (size_t)S);
    v->gets++;
    v->rows_out += n;
    return rec_frame_end(&v->w);
}

static rec_status on_put(server *v, const rec_zreq *r) {
    rec_net_rows q;
    REC_TRY(rec_net_rows_decode(r->body, r->h.body, "EMB_PUT", 1, 1, &v->t, v->S, &q));
    const int E = v->V, S = v->S, W = UNDO_KEY + E + S; /* an undo entry: step and local row (int64s), the old row */
    const int64_t step = (int64_t)r->h.seq;
    if (v->durable && step <= v->committed)
        return rec_errorf(REC_EINVAL, "a write of step %lld, and step %lld is committed", (long long)step,
                          (long long)v->committed);
    if (v->durable && v->undo_n + q.n > v->undo_cap) {
        int64_t cap = v->undo_cap ? v->undo_cap : 4096;
        while (cap < v->undo_n + q.n) cap *= 2;
        float *u = realloc(v->undo, sizeof(float) * (size_t)(cap * W));
        if (!u) return rec_errorf(REC_ENOMEM, "embserver: out of memory for the undo log of %lld rows", (long long)cap);
        v->undo = u, v->undo_cap = cap;
    }
    for (int64_t i = 0; v->durable && i < q.n; i++) {
        float *u = v->undo + (size_t)(v->undo_n++ * W);
        const int64_t key[2] = {step, v->off[q.e[i].f] + q.e[i].row / v->t.shards};
        memcpy(u, key, sizeof key);
        row_get(v, key[1], u + UNDO_KEY); /* bf16: its values as fp32, exactly */
        if (S) memcpy(u + UNDO_KEY + E, state_of(v, &q.e[i]), sizeof(float) * (size_t)S);
    }
    v->written = 1;
    for (int64_t i = 0; i < q.n; i++) {
        const int64_t at = local_of(v, &q.e[i]) * E;
        if (v->b16) memcpy(v->values16 + at, q.values16 + (size_t)i * E, sizeof(uint16_t) * (size_t)E);
        else memcpy(v->values + at, q.values + (size_t)i * E, sizeof(float) * (size_t)E);
        if (S) memcpy(state_of(v, &q.e[i]), q.state + (size_t)i * S, sizeof(float) * (size_t)S);
    }
    v->puts++;
    v->rows_in += q.n;
    rec_frame_begin(&v->w, REC_MSG_EMB_PUT_OK, r->h.job, r->h.seq);
    return rec_frame_end(&v->w);
}

/* ---- snapshots (--ckpt DIR) ---------------------------------------------------------------- */

#define SNAP_MAGIC REC_SNAP_MAGIC

typedef struct snap_head {
    uint64_t digest, seed;
    int32_t shard, shards, F, E, opt, S, durable, lin; /* lin: rows of E + 1 values (0 before it was) */
    float init_acc;
    int32_t prec;            /* the values: 0 fp32 (also before it was: zero padding); 1 + rec_embed_rounding:
                                bf16 bits of tables of that rounding */
    int64_t committed, n_rows, dense_n;
} snap_head;

/* A snapshot head's precision code of tables t, and back. */
static int32_t prec_code(const rec_net_emb_hello *t) { return t->bf16 ? 1 + t->rounding : 0; }

static void snap_path(const server *v, int64_t step, char *buf, size_t cap) {
    snprintf(buf, cap, "%s/shard-%lld.rsnap", v->o->ckpt_dir, (long long)step);
}

/* DIR/shard-STEP.rsnap: magic | head | rows (F) | CRC of both | values (fp32, or bf16 bits) |
 * state | dense | CRC. */
static rec_status snap_write(server *v) {
    const int64_t n = v->off[v->t.F];
    const snap_head h = {v->t.digest, v->t.seed, v->t.shard, v->t.shards, v->t.F, v->t.E, v->t.opt, v->S, 1, v->t.lin,
                         v->t.init_acc, prec_code(&v->t), v->committed, n, v->dense_n};
    char path[1200];
    snap_path(v, v->committed, path, sizeof path);
    rec_atomic_file a;
    REC_TRY(rec_atomic_open(&a, path));
    uint32_t crc = rec_crc32(rec_crc32(0, &h, sizeof h), v->rows, sizeof(int64_t) * (size_t)v->t.F);
    const struct { const void *p; size_t n; } part[] = {
        {SNAP_MAGIC, 8}, {&h, sizeof h}, {v->rows, sizeof(int64_t) * (size_t)v->t.F}, {&crc, 4}};
    int ok = 1;
    for (size_t i = 0; ok && i < sizeof part / sizeof part[0]; i++) ok = write(a.fd, part[i].p, part[i].n) == (ssize_t)part[i].n;
    const struct { const void *p; int64_t n; size_t size; } data[] = {
        {v->b16 ? (const void *)v->values16 : (const void *)v->values, n * v->V, v->b16 ? sizeof(uint16_t) : sizeof(float)},
        {v->state, n * v->S, sizeof(float)}, {v->dense, v->dense_n, sizeof(float)}};
    uint32_t dcrc = 0;
    for (size_t i = 0; ok && i < 3; i++)
        for (int64_t at = 0; ok && at < data[i].n;) {
            const int64_t k = data[i].n - at < (1 << 24) ? data[i].n - at : (1 << 24);
            const char *p = (const char *)data[i].p + (size_t)at * data[i].size;
            ok = write(a.fd, p, data[i].size * (size_t)k) == (ssize_t)(data[i].size * (size_t)k);
            dcrc = rec_crc32(dcrc, p, data[i].size * (size_t)k);
            at += k;
        }
    if (ok) ok = write(a.fd, &dcrc, 4) == 4;
    if (!ok) {
        rec_atomic_abort(&a);
        return rec_errorf(REC_EIO, "embserver: cannot write %s: %s", path, strerror(errno));
    }
    REC_TRY(rec_atomic_commit(&a));
    if (v->snap[1] >= 0 && v->snap[1] != v->committed) { /* keep two */
        snap_path(v, v->snap[1], path, sizeof path);
        remove(path);
    }
    if (v->snap[0] != v->committed) v->snap[1] = v->snap[0];
    v->snap[0] = v->committed;
    return REC_OK;
}

/* Loads DIR/shard-STEP.rsnap into the server (its tables made anew from the file's head),
 * checking both CRCs; REC_EFORMAT naming the file when it does not read back whole. `want`:
 * the precision code (prec_code) the job's tables have, or -1 (any: the start, before a
 * HELLO); a snapshot of tables of another precision is refused (REC_EINVAL) and not loaded. */
static rec_status snap_read(server *v, int64_t step, int want) {
    char path[1200];
    snap_path(v, step, path, sizeof path);
    const int fd = open(path, O_RDONLY);
    if (fd < 0) return rec_errorf(REC_EIO, "embserver: no snapshot %s: %s", path, strerror(errno));
    struct stat st;
    const size_t len = fstat(fd, &st) == 0 ? (size_t)st.st_size : 0;
    const uint8_t *m = len ? mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0) : MAP_FAILED;
    close(fd);
    if (m == MAP_FAILED) return rec_errorf(REC_EIO, "embserver: cannot read %s", path);
    rec_status s = REC_OK;
    snap_head h;
    size_t at = 8 + sizeof h;
    if (len < at || memcmp(m, SNAP_MAGIC, 8)) s = rec_errorf(REC_EFORMAT, "%s: not an embedding server snapshot", path);
    if (!s) memcpy(&h, m + 8, sizeof h);
    if (!s && (h.F < 1 || h.F > REC_NET_MAX_FEATURES || h.E < 1 || h.E > 4096 || h.lin < 0 || h.lin > 1 || h.S < 0 ||
               h.S > h.E + h.lin || h.n_rows < 0 || h.prec < 0 || h.prec > 2 ||
               h.dense_n < 0 || h.shards < 1 || h.shard < 0 || h.shard >= h.shards))
        s = rec_errorf(REC_EFORMAT, "%s: a corrupt head", path);
    if (!s && want >= 0 && h.prec != want)
        s = rec_errorf(REC_EINVAL, "%s holds %s tables and the job's are %s: resume with the model's \"embedding\": "
                       "{\"precision\", \"rounding\"} of the job that saved it", path,
                       precision_name(h.prec > 0, h.prec > 0 ? h.prec - 1 : 0),
                       precision_name(want > 0, want > 0 ? want - 1 : 0));
    const size_t rows_at = at;
    if (!s) at += sizeof(int64_t) * (size_t)h.F + 4;
    const int V = !s ? h.E + h.lin : 0;
    const size_t vsize = !s && h.prec ? sizeof(uint16_t) : sizeof(float);
    const size_t data = !s ? vsize * (size_t)(h.n_rows * V) + sizeof(float) * (size_t)(h.n_rows * h.S + h.dense_n) : 0;
    if (!s && len != at + data + 4) s = rec_errorf(REC_EFORMAT, "%s: %zu bytes, not the %zu its head says (cut short?)", path,
                                                   len, at + data + 4);
    uint32_t c1, c2;
    if (!s) {
        memcpy(&c1, m + at - 4, 4), memcpy(&c2, m + at + data, 4);
        if (rec_crc32(0, m + 8, at - 12) != c1 || rec_crc32(0, m + at, data) != c2)
            s = rec_errorf(REC_EFORMAT, "%s: a CRC does not match (corrupt)", path);
    }
    if (!s) {
        server_drop(v);
        const rec_net_emb_hello t = {h.digest, h.shard, h.shards, h.F, h.E, h.opt, h.init_acc, h.seed,
                                     (const int64_t *)(const void *)(m + rows_at), 1, h.lin, 0, h.prec > 0,
                                     h.prec > 0 ? h.prec - 1 : 0};
        v->rows = malloc(sizeof(int64_t) * (size_t)h.F);
        v->off = malloc(sizeof(int64_t) * (size_t)(h.F + 1));
        if (!v->rows || !v->off) s = rec_errorf(REC_ENOMEM, "embserver: out of memory");
        int64_t n = 0;
        for (int f = 0; !s && f < h.F; f++) {
            memcpy(&v->rows[f], m + rows_at + 8 * (size_t)f, 8);
            v->off[f] = n;
            n += (v->rows[f] - h.shard + h.shards - 1) / h.shards;
        }
        if (!s && n != h.n_rows) s = rec_errorf(REC_EFORMAT, "%s: %lld rows, and its tables make %lld", path,
                                                (long long)h.n_rows, (long long)n);
        if (!s) v->off[h.F] = n;
        v->b16 = h.prec > 0;
        if (!s && v->b16) s = rec_alloc((void **)&v->values16, sizeof(uint16_t) * (size_t)(n * V) + 64, "the shard's rows");
        if (!s && !v->b16) s = rec_alloc((void **)&v->values, sizeof(float) * (size_t)(n * V) + 64, "the shard's rows");
        if (!s) s = rec_alloc((void **)&v->state, sizeof(float) * (size_t)(n * h.S) + 64, "the shard's state");
        if (!s && h.dense_n && !(v->dense = malloc(sizeof(float) * (size_t)h.dense_n)))
            s = rec_errorf(REC_ENOMEM, "embserver: out of memory");
        if (!s) {
            const uint8_t *d = m + at;
            memcpy(v->b16 ? (void *)v->values16 : (void *)v->values, d, vsize * (size_t)(n * V));
            d += vsize * (size_t)(n * V);
            memcpy(v->state, d, sizeof(float) * (size_t)(n * h.S));
            if (h.dense_n) memcpy(v->dense, d + sizeof(float) * (size_t)(n * h.S), sizeof(float) * (size_t)h.dense_n);
            v->dense_n = h.dense_n;
            v->t = t;
            v->t.rows = v->rows;
            v->S = h.S;
            v->V = V;
            v->ready = v->durable = v->written = 1;
            v->committed = h.committed;
            v->undo_n = 0;
        } else {
            server_drop(v);
        }
    }
    munmap((void *)m, len);
    return s;
}

/* At start: the newest snapshots in DIR that read back whole (two steps at most). */
static void snap_find(server *v) {
    v->snap[0] = v->snap[1] = -1;
    DIR *d = opendir(v->o->ckpt_dir);
    for (struct dirent *e; d && (e = readdir(d));) {
        long long step;
        char tail[8];
        if (sscanf(e->d_name, "shard-%lld.%7s", &step, tail) != 2 || strcmp(tail, "rsnap") || step < 0) continue;
        if (step > v->snap[0]) v->snap[1] = v->snap[0], v->snap[0] = step;
        else if (step > v->snap[1]) v->snap[1] = step;
    }
    if (d) closedir(d);
    for (int i = 0; i < 2; i++) {
        if (v->snap[i] < 0) continue;
        if (!snap_read(v, v->snap[i], -1)) {
            if (v->o->log) {
                fprintf(v->o->log, "embserver: restarted from %s/shard-%lld.rsnap (step %lld, shard %d of %d)\n",
                        v->o->ckpt_dir, (long long)v->snap[i], (long long)v->snap[i], v->t.shard, v->t.shards);
                fflush(v->o->log);
            }
            if (i == 1) v->snap[0] = v->snap[1], v->snap[1] = -1;
            v->restored = 1;
            return;
        }
        if (v->o->log) fprintf(v->o->log, "embserver: %s; trying an older snapshot\n", rec_errmsg());
    }
    v->snap[0] = v->snap[1] = -1;
}

static void swap_floats(float *a, float *b, int n) {
    for (int i = 0; i < n; i++) {
        const float x = a[i];
        a[i] = b[i], b[i] = x;
    }
}

/* Local row i's values and the fp32 values u (V) swapped (bf16: exact both ways). */
static void swap_row(server *v, int64_t i, float *u) {
    if (!v->b16) {
        swap_floats(v->values + (size_t)i * v->V, u, v->V);
        return;
    }
    for (int e = 0; e < v->V; e++) {
        const float x = get_value(v, i * v->V + e);
        set_value(v, i * v->V + e, u[e]);
        u[e] = x;
    }
}

/* Swaps each undo entry's row with the table's: newest first (back to the committed step), or
 * oldest first (forward again, to the same bits). A snapshot is written in between: it holds
 * the committed step alone, though other trainers' writes of the next step may have come
 * before its COMMIT. */
static void swap_undo(server *v, int back) {
    const int E = v->V, S = v->S, W = UNDO_KEY + E + S;
    for (int64_t k = 0; k < v->undo_n; k++) {
        float *u = v->undo + (size_t)((back ? v->undo_n - 1 - k : k) * W);
        int64_t key[2];
        memcpy(key, u, sizeof key);
        swap_row(v, key[1], u + UNDO_KEY);
        if (S) swap_floats(v->state + (size_t)key[1] * S, u + UNDO_KEY + E, S);
    }
}

/* COMMIT(s): the undo of steps <= s is dropped; server 0 keeps the dense state sent along. */
static rec_status on_commit(server *v, const rec_zreq *r) {
    const float *d;
    int64_t n;
    REC_TRY(rec_net_floats_decode(r->body, r->h.body, "EMB_COMMIT", &d, &n));
    const int64_t step = (int64_t)r->h.seq;
    if (!v->durable) return rec_errorf(REC_EINVAL, "COMMIT to a server of a job that is not durable");
    if (step != v->committed + 1)
        return rec_errorf(REC_EINVAL, "COMMIT of step %lld after step %lld: steps commit one after another",
                          (long long)step, (long long)v->committed);
    if (n) {
        float *c = realloc(v->dense, sizeof(float) * (size_t)n);
        if (!c) return rec_errorf(REC_ENOMEM, "embserver: out of memory for %lld dense floats", (long long)n);
        memcpy(c, d, sizeof(float) * (size_t)n);
        v->dense = c, v->dense_n = n;
    }
    const int W = UNDO_KEY + v->V + v->S;
    int64_t keep = 0;
    for (int64_t i = 0; i < v->undo_n; i++) {
        int64_t key[2];
        memcpy(key, v->undo + (size_t)(i * W), sizeof key);
        if (key[0] > step) memmove(v->undo + (size_t)(keep++ * W), v->undo + (size_t)(i * W), sizeof(float) * (size_t)W);
    }
    v->undo_n = keep;
    v->committed = step;
    if (v->o->ckpt_dir && (step + 1) % v->o->ckpt_every == 0) { /* the same steps on every server */
        swap_undo(v, 1);
        rec_status s = snap_write(v);
        swap_undo(v, 0);
        REC_TRY(s);
    }
    rec_frame_begin(&v->w, REC_MSG_EMB_OK, r->h.job, r->h.seq);
    return rec_frame_end(&v->w);
}

/* ROLLBACK(c): every row written after step c gets back its value before, newest first. */
static rec_status on_rollback(server *v, const rec_zreq *r) {
    const int64_t c = (int64_t)r->h.seq;
    if (!v->durable) return rec_errorf(REC_EINVAL, "ROLLBACK on a server of a job that is not durable");
    const int E = v->V, S = v->S, W = UNDO_KEY + E + S;
    int64_t undone = 0;
    for (int64_t i = v->undo_n - 1; i >= 0; i--) {
        const float *u = v->undo + (size_t)(i * W);
        int64_t key[2];
        memcpy(key, u, sizeof key);
        if (key[0] <= c) continue;
        row_set(v, key[1], u + UNDO_KEY);
        if (S) memcpy(v->state + (size_t)key[1] * S, u + UNDO_KEY + E, sizeof(float) * (size_t)S);
        undone++;
    }
    v->undo_n = 0;
    v->committed = c;
    v->restored = 0;
    if (v->o->log) {
        fprintf(v->o->log, "embserver: rolled back to step %lld (%lld row writes undone)\n", (long long)c, (long long)undone);
        fflush(v->o->log);
    }
    rec_frame_begin(&v->w, REC_MSG_EMB_OK, r->h.job, r->h.seq);
    return rec_frame_end(&v->w);
}

/* A request on the tables: it needs a HELLO first, and is refused from any run but the last
 * HELLO's (a resumed job's rollback must not be undone by its killed predecessor's PUTs). */
static int is_request(int t) {
    return t == REC_MSG_EMB_GET || t == REC_MSG_EMB_PUT || t == REC_MSG_EMB_COMMIT || t == REC_MSG_EMB_ROLLBACK ||
           t == REC_MSG_EMB_DENSE_GET || t == REC_MSG_EMB_RESTORE;
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
            const rec_net_emb_state st = {v->committed, v->written, v->durable, {v->snap[0], v->snap[1]}, v->restored};
            rec_frame_begin(&v->w, REC_MSG_EMB_OK, r.h.job, r.h.seq);
            rec_net_emb_state_encode(&v->w, &st);
            s = rec_frame_end(&v->w);
        }
    } else if (is_request(t) && (!v->ready || !v->greeted)) {
        s = rec_errorf(REC_EINVAL, "%s before EMB_HELLO: %s", rec_msg_name(t),
                       v->ready ? "this server restarted from a snapshot; the trainer must say HELLO again (--resume)"
                                : "this server holds no tables yet");
    } else if (is_request(t) && r.h.job != v->job) {
        s = rec_errorf(REC_EINVAL, "a request of trainer run %016llx, and run %016llx said HELLO since: an earlier "
                       "run's requests (a killed trainer's, still queued) are refused", (unsigned long long)r.h.job,
                       (unsigned long long)v->job);
    } else if (t == REC_MSG_EMB_GET) {
        s = on_get(v, &r);
    } else if (t == REC_MSG_EMB_PUT) {
        s = on_put(v, &r);
    } else if (t == REC_MSG_EMB_COMMIT) {
        s = on_commit(v, &r);
    } else if (t == REC_MSG_EMB_ROLLBACK) {
        s = on_rollback(v, &r);
    } else if (t == REC_MSG_EMB_RESTORE) {
        const int64_t step = (int64_t)r.h.seq;
        if (!v->o->ckpt_dir) s = rec_errorf(REC_EINVAL, "RESTORE: this server keeps no snapshots (start it with --ckpt DIR)");
        else if (step != v->snap[0] && step != v->snap[1])
            s = rec_errorf(REC_EINVAL, "RESTORE of step %lld: this server keeps the snapshots of steps %lld and %lld",
                           (long long)step, (long long)v->snap[0], (long long)v->snap[1]);
        else s = snap_read(v, step, prec_code(&v->t));
        if (!s) {
            v->restored = 0;
            if (v->o->log) fprintf(v->o->log, "embserver: restored the snapshot of step %lld\n", (long long)step);
            rec_frame_begin(&v->w, REC_MSG_EMB_OK, r.h.job, r.h.seq);
            s = rec_frame_end(&v->w);
        }
    } else if (t == REC_MSG_EMB_DENSE_GET) {
        rec_frame_begin(&v->w, REC_MSG_EMB_DENSE, r.h.job, (uint64_t)v->committed);
        rec_net_floats_encode(&v->w, v->dense, v->dense_n);
        s = rec_frame_end(&v->w);
    } else {
        s = rec_errorf(REC_EFORMAT, "a %s frame is not a request to an embedding server", rec_msg_name(t));
    }
    v->refused += s != REC_OK;
    rec__zservice_answer(&v->svc, &r, &v->w, s);
}

rec_status rec_embserver_run(const rec_embserver_opts *o) {
    server v = {.o = o, .committed = -1, .snap = {-1, -1}};
    if (o->ckpt_dir && o->ckpt_every < 1)
        return rec_errorf(REC_EINVAL, "embserver: --ckpt-every must be 1 or more (got %lld)", (long long)o->ckpt_every);
    if (o->ckpt_dir) REC_TRY(rec_mkdir_p(o->ckpt_dir, "snapshot directory"));
    if (o->ckpt_dir) snap_find(&v);
    rec_status s = rec__zservice_open(&v.svc, "embserver", o->listen, &o->sec, o->log);
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
