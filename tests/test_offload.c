/* Offloading preprocessing to workers (offload.h, net.h): the frame codec and its rejections,
 * the piece grid, Algorithm 1 and the metric store; then workers on loopback serving
 * `rectrain train`: the same losses as a local run at p'1, p'2 and p'3, every row trained once
 * when a worker is killed (kill -9) or stalls (SIGSTOP), the same under mpirun (every rank
 * with the worker, against the mpirun job without it), and a live worker that refuses
 * hostile frames and keeps serving. */
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "clirun.h"
#include "rectrain/core.h"
#include "rectrain/net.h"
#include "rectrain/offload.h"

/* ---- the codec ------------------------------------------------------------------------------ */

/* A small batch: 3 rows, Dn = 2, F = 2 (feature 0 narrow, feature 1 wide and weighted). */
static void make_batch(rec_batch *b) {
    rec_batch_init(b, 3, 2, 2, 2);
    b->n = 3;
    for (int r = 0; r < 3; r++) {
        b->label[r] = (float)(r % 2);
        b->dense[2 * r] = 0.5f * r;
        b->dense[2 * r + 1] = -1.0f * r;
    }
    rec_batch_reserve_nnz(b, 1, 8, 1);
    rec_batch_set_wide(b, 0, 0);
    const int64_t o0[] = {0, 1, 1, 3}, o1[] = {0, 2, 3, 4};
    memcpy(b->sparse[0].offsets, o0, sizeof o0);
    memcpy(b->sparse[1].offsets, o1, sizeof o1);
    const int32_t i0[] = {4, 0, 9};
    const int64_t i1[] = {1, 2, 3, 7};
    memcpy(b->sparse[0].ids32, i0, sizeof i0);
    memcpy(b->sparse[1].ids64, i1, sizeof i1);
    for (int k = 0; k < 4; k++) b->sparse[1].weights[k] = 0.25f * k;
}

static const int64_t ROWS[2] = {10, 8};
static rec_net_room room; /* the decoded views' widened arrays */

/* Decodes msg as a RESULT of the batch's shape with these tables; returns the status. */
static rec_status decode_rows(const uint8_t *msg, size_t len, const int64_t *rows, rec_batch *view, rec_jagged *sp) {
    rec_frame_head h;
    REC_TRY(rec_frame_head_decode(msg, len, "test", &h));
    int64_t bad;
    return rec_net_result_decode(msg + REC_NET_HEAD, h.body, 2, 2, rows, &bad, view, sp, &room);
}

static rec_status decode_result(const uint8_t *msg, size_t len, rec_batch *view, rec_jagged *sp) {
    return decode_rows(msg, len, ROWS, view, sp);
}

/* An 8-byte aligned copy of w's first n bytes. */
static uint8_t *aligned_copy(const rec_wbuf *w, size_t n) {
    uint8_t *p = aligned_alloc(64, (n + 64) / 64 * 64);
    memcpy(p, w->p, n);
    return p;
}

/* b as a RESULT frame in w, and an aligned copy of it (free it). */
static uint8_t *encode_result(rec_wbuf *w, const rec_batch *b) {
    rec_frame_begin(w, REC_MSG_RESULT, 7, 9);
    rec_net_result_encode(w, 0, b);
    rec_frame_end(w);
    return aligned_copy(w, w->len);
}

static void test_codec(void) {
    rec_batch b;
    make_batch(&b);
    rec_wbuf w = {0};
    rec_frame_begin(&w, REC_MSG_RESULT, 7, 9);
    rec_net_result_encode(&w, 1, &b);
    CHECK(rec_frame_end(&w) == REC_OK, "%s", rec_errmsg());
    uint8_t *m = aligned_copy(&w, w.len);
    rec_batch v;
    rec_jagged sp[2];
    CHECK(decode_result(m, w.len, &v, sp) == REC_OK, "%s", rec_errmsg());
    CHECK(v.n == 3 && rec_batch_digest(&v) == rec_batch_digest(&b), "a RESULT decodes to the batch it encoded");
    CHECK(rec_batch_row_hash_sum(&v) == rec_batch_row_hash_sum(&b), "row checksums agree");
    CHECK(b.sparse[1].wide && !v.sparse[1].wide && v.sparse[1].ids32[3] == 7,
          "int64 ids of small tables travel narrow and are read as int32");
    /* the narrowest forms: 16-bit ids, row lengths as bytes (header 32, bad-row count, n, Dn
     * and F 24, labels 16, dense 24; feature 0: 16 + 8 lengths + 8 ids; feature 1: 16 + 8 +
     * 8 + 16 weights) */
    CHECK(w.len == 32 + 24 + 16 + 24 + 32 + 48, "a RESULT of 3 rows in its narrowest form: %zu bytes", w.len);
    /* every truncation is refused, none read out of bounds (ASan watches) */
    int refused = 0;
    for (size_t n = 0; n < w.len; n++) {
        uint8_t *t = aligned_copy(&w, n);
        if (n >= REC_NET_HEAD) { /* keep the header's length honest, so the body decoder is what refuses */
            const uint32_t body = (uint32_t)(n - REC_NET_HEAD);
            memcpy(t + 24, &body, 4);
        }
        refused += decode_result(t, n, &v, sp) == REC_EFORMAT;
        free(t);
    }
    CHECK(refused == (int)w.len, "every truncation of a RESULT is refused (%d of %zu)", refused, w.len);
    /* header faults */
    struct { size_t at; uint32_t val; int bytes; const char *needle; } faults[] = {
        {0, 0x12345678, 4, "not a rectrain frame"}, {4, 1, 2, "frame version 1"}, {6, 99, 2, "unknown frame type"},
        {24, 5, 4, "says its body is 5 bytes"}, {28, 1, 4, "reserved"}};
    for (size_t k = 0; k < sizeof faults / sizeof faults[0]; k++) {
        uint8_t *t = aligned_copy(&w, w.len);
        memcpy(t + faults[k].at, &faults[k].val, (size_t)faults[k].bytes);
        CHECK_ERR(decode_result(t, w.len, &v, sp), REC_EFORMAT, faults[k].needle);
        free(t);
    }
    /* body faults: an id outside its table, offsets that decrease, a dense width of another job */
    rec_batch bad_b;
    make_batch(&bad_b);
    bad_b.sparse[0].ids32[2] = 10;
    free(m);
    m = encode_result(&w, &bad_b);
    CHECK_ERR(decode_result(m, w.len, &v, sp), REC_EFORMAT, "id 10 outside its table of 10 rows");
    bad_b.sparse[0].ids32[2] = 9;
    bad_b.sparse[1].offsets[2] = 1;
    free(m);
    m = encode_result(&w, &bad_b);
    CHECK_ERR(decode_result(m, w.len, &v, sp), REC_EFORMAT, "offsets decrease");
    /* row lengths that do not add up to the id count; an unknown id form or flag */
    bad_b.sparse[1].offsets[2] = 3;
    free(m);
    m = encode_result(&w, &bad_b);
    const size_t f0 = 32 + 24 + 16 + 24; /* feature 0's header: form, flags, nnz */
    int64_t two = 2;
    memcpy(m + f0 + 8, &two, 8);
    CHECK_ERR(decode_result(m, w.len, &v, sp), REC_EFORMAT, "offsets run from 0 to 3 over 2 ids");
    int64_t three = 3;
    memcpy(m + f0 + 8, &three, 8);
    CHECK(decode_result(m, w.len, &v, sp) == REC_OK, "the frame unpatched decodes: %s", rec_errmsg());
    const uint32_t form3 = 3, flags4 = 4;
    memcpy(m + f0, &form3, 4);
    CHECK_ERR(decode_result(m, w.len, &v, sp), REC_EFORMAT, "feature 0: id form 3");
    memcpy(m + f0, &(uint32_t){2}, 4);
    memcpy(m + f0 + 4, &flags4, 4);
    CHECK_ERR(decode_result(m, w.len, &v, sp), REC_EFORMAT, "flags 4");
    rec_frame_head h;
    int64_t bad;
    rec_frame_head_decode(m, w.len, "test", &h);
    CHECK_ERR(rec_net_result_decode(m + REC_NET_HEAD, h.body, 3, 2, ROWS, &bad, &v, sp, &room), REC_EFORMAT,
              "the job's spec makes 3 and 2");
    free(m);
    rec_batch_free(&bad_b);
    { /* a row of 256 ids keeps its feature's offsets; ids past 16 bits go as int32 */
        rec_batch big;
        make_batch(&big);
        rec_batch_reserve_nnz(&big, 0, 300, 0);
        const int64_t o0[] = {0, 1, 257, 258};
        memcpy(big.sparse[0].offsets, o0, sizeof o0);
        for (int k = 0; k < 258; k++) big.sparse[0].ids32[k] = k % 10;
        big.sparse[1].ids64[3] = 70000;
        uint8_t *bm = encode_result(&w, &big);
        rec_batch bv;
        rec_jagged bsp[2];
        const int64_t rows[2] = {10, 70001};
        const int ok = decode_rows(bm, w.len, rows, &bv, bsp) == REC_OK;
        CHECK(ok && rec_batch_digest(&bv) == rec_batch_digest(&big) && bv.sparse[0].offsets[2] == 257 &&
              bv.sparse[1].ids32[3] == 70000,
              "a row of 256 ids and an id of 17 bits round-trip: %s", ok ? "digest" : rec_errmsg());
        CHECK(w.len == 32 + 24 + 16 + 24 + (16 + 32 + 520) + (16 + 8 + 16 + 16),
              "feature 0 with int64 offsets and 16-bit ids, feature 1 with lengths and int32 ids: %zu bytes", w.len);
        free(bm);
        rec_batch_free(&big);
    }
    { /* an id past int32 keeps its feature's ids int64 */
        rec_batch big;
        make_batch(&big);
        big.sparse[1].ids64[3] = (int64_t)1 << 40;
        uint8_t *bm = encode_result(&w, &big);
        rec_frame_head bh;
        int64_t bbad;
        rec_batch bv;
        rec_jagged bsp[2];
        const int64_t rows[2] = {10, (int64_t)1 << 41};
        CHECK(rec_frame_head_decode(bm, w.len, "test", &bh) == REC_OK &&
              rec_net_result_decode(bm + REC_NET_HEAD, bh.body, 2, 2, rows, &bbad, &bv, bsp, &room) == REC_OK && bv.sparse[1].wide &&
              bv.sparse[1].ids64[3] == (int64_t)1 << 40 && rec_batch_digest(&bv) == rec_batch_digest(&big),
              "ids past int32 travel as int64: %s", rec_errmsg());
        free(bm);
        rec_batch_free(&big);
    }

    /* JOB round trip and truncations */
    const char *parts[] = {"/data/a.tsv", "/data/b.tsv"};
    uint64_t sizes[] = {100, 200};
    rec_net_job j = {(char *)"{\"spec\": 1}", (char *)"spec.json", (char *)"", 42,
                     {1, REC_BAD_ROWS_SKIP, 1 << 20, REC_SHORT_ROWS_MISSING, 0.02}, 2, (char **)parts, sizes};
    rec_frame_begin(&w, REC_MSG_JOB, 1, 0);
    rec_net_job_encode(&w, &j);
    rec_frame_end(&w);
    rec_net_job d;
    CHECK(rec_net_job_decode(w.p + REC_NET_HEAD, w.len - REC_NET_HEAD, &d) == REC_OK, "%s", rec_errmsg());
    CHECK(d.n_parts == 2 && !strcmp(d.parts[1], "/data/b.tsv") && d.part_bytes[1] == 200 && d.vocab_digest == 42 &&
              d.tsv.bad_rows == REC_BAD_ROWS_SKIP && rec_net_job_key(&d) == rec_net_job_key(&j),
          "a JOB decodes to what was encoded");
    rec_net_job_free(&d);
    refused = 0;
    for (size_t n = REC_NET_HEAD; n < w.len; n++) {
        refused += rec_net_job_decode(w.p + REC_NET_HEAD, n - REC_NET_HEAD, &d) == REC_EFORMAT;
        rec_net_job_free(&d);
    }
    CHECK(refused == (int)(w.len - REC_NET_HEAD), "every truncation of a JOB is refused");
    j.tsv.has_label = 3;
    rec_frame_begin(&w, REC_MSG_JOB, 1, 0);
    rec_net_job_encode(&w, &j);
    rec_frame_end(&w);
    CHECK_ERR(rec_net_job_decode(w.p + REC_NET_HEAD, w.len - REC_NET_HEAD, &d), REC_EFORMAT, "TSV options out of range");
    rec_net_job_free(&d);

    /* PIECE with text, and its faults */
    rec_net_piece p = {1, 64, 5, 3, 1, "a\tb\n\n"}, q;
    rec_frame_begin(&w, REC_MSG_PIECE, 1, 3);
    rec_net_piece_encode(&w, &p);
    rec_frame_end(&w);
    CHECK(rec_net_piece_decode(w.p + REC_NET_HEAD, w.len - REC_NET_HEAD, &q) == REC_OK && q.text &&
              !memcmp(q.text, p.text, 5) && q.first_line == 3, "a PIECE decodes with its text");
    CHECK_ERR(rec_net_piece_decode(w.p + REC_NET_HEAD, w.len - REC_NET_HEAD - 1, &q), REC_EFORMAT, "the piece's text");
    p.n_lines = 0;
    rec_frame_begin(&w, REC_MSG_PIECE, 1, 3);
    rec_net_piece_encode(&w, &p);
    rec_frame_end(&w);
    CHECK_ERR(rec_net_piece_decode(w.p + REC_NET_HEAD, w.len - REC_NET_HEAD, &q), REC_EFORMAT, "out of range");
    rec_wbuf_free(&w);
    rec_batch_free(&b);
    rec_net_room_free(&room);
}

/* ---- grid, policy, store -------------------------------------------------------------------- */

static void test_grid(void) {
    FILE *f = fopen(path("g.tsv"), "w");
    for (int i = 0; i < 1000; i++) fprintf(f, "%d\tline %d\n", i % 2, i);
    fprintf(f, "1\tlast without newline");
    fclose(f);
    const char *parts[] = {path("g.tsv")};
    rec_tsv_opts o = {1, REC_BAD_ROWS_FAIL, 1 << 20, 0, 0};
    rec_grid *g;
    CHECK(rec_grid_build(&g, parts, 1, &o) == REC_OK, "%s", rec_errmsg());
    if (!g) return;
    CHECK(rec_grid_lines(g) == 1001, "lines %lld", (long long)rec_grid_lines(g));
    const int64_t n = rec_grid_pieces(g, 256);
    int64_t lines = 0;
    uint64_t at = 0;
    int ok = 1;
    for (int64_t j = 0; j < n; j++) {
        rec_piece p;
        rec_grid_piece(g, 256, j, &p);
        ok &= p.offset == at && p.line0 == lines && p.first_line == lines + 1;
        at += p.len;
        lines += p.n_lines;
    }
    CHECK(ok && lines == 1001 && at == rec_grid_bytes(g, 0) && n == 4, "pieces tile the file (%lld pieces)", (long long)n);
    rec_grid_free(g);
    f = fopen(path("g.gz"), "w");
    fputs("\x1f\x8b\x08", f);
    fclose(f);
    parts[0] = path("g.gz");
    CHECK_ERR(rec_grid_build(&g, parts, 1, &o), REC_EUNSUPPORTED, "gunzip it first");
}

static void test_policy(void) {
    rec_offload_metrics m = {.gthp = 100, .lthp = 95, .pcycle = 1e-5};
    rec_offload_decision d;
    rec_offload_decide(&m, 1.1, &d);
    CHECK(!d.offload && strstr(d.why, "no stall"), "no offload under the threshold: %s", d.why);
    m.gthp = 104.31; /* x1.098: printed so that it reads as under the threshold, not "x1.10 < 1.10" */
    rec_offload_decide(&m, 1.1, &d);
    CHECK(!d.offload && strstr(d.why, "(x1.098 < 1.100)"), "the ratio beside the threshold: %s", d.why);
    m.gthp = 100;
    m.lthp = 40;
    m.have_remote = 1;
    m.rthp[1] = 30, m.rthp[2] = 70, m.rthp[3] = 60;
    m.ocycle[1] = 5e-6, m.ocycle[2] = 2e-6, m.ocycle[3] = 1e-6;
    rec_offload_decide(&m, 1.1, &d);
    /* est: p'1 40*.5+30 = 50, p'2 40*.8+70 = 102, p'3 40*.9+60 = 96 -> p'2; lower 60*1.2 = 72 > upper 70 */
    CHECK(d.offload && d.point == REC_OFFLOAD_P2, "the point of the largest estimate (got %d)", d.point);
    CHECK(fabs(d.lower - 72) < 1e-9 && fabs(d.ratio - 70.0 / 110) < 1e-12, "upper <= lower: Rthp/(Lthp+Rthp) (%g)", d.ratio);
    m.rthp[2] = 90;
    rec_offload_decide(&m, 1.1, &d);
    CHECK(d.point == REC_OFFLOAD_P2 && fabs(d.ratio - 0.9) < 1e-12, "lower < upper: Upper/Gthp (%g)", d.ratio);

    const char *store = path("store/metrics.json");
    rec_offload_keys k = {1, 2, 3};
    CHECK(rec_offload_store_save(store, &k, &m) == REC_OK, "%s", rec_errmsg());
    rec_offload_metrics r = {0};
    int found = 0;
    CHECK(rec_offload_store_load(store, &k, &r, &found) == REC_OK && found == 7 && r.gthp == 100 && r.rthp[2] == 90 &&
              r.ocycle[3] == 1e-6, "the store gives back what it kept (found %d)", found);
    rec_offload_keys other = {1, 5, 6};
    memset(&r, 0, sizeof r);
    CHECK(rec_offload_store_load(store, &other, &r, &found) == REC_OK && found == 1, "only the model's record matches");
    FILE *f = fopen(store, "w");
    fputs("{not json", f);
    fclose(f);
    CHECK_ERR(rec_offload_store_load(store, &k, &r, &found), REC_EFORMAT, "delete it");
}

/* ---- workers on loopback -------------------------------------------------------------------- */

static int port;

/* Under the sanitizers every run is ~10x slower: fewer rows and one kill (CI's time). */
#ifdef REC_SANITIZED
enum { ROWS_GEN = 6000, KILLS = 1, JOIN_EPOCHS = 6 };
#else
enum { ROWS_GEN = 20000, KILLS = 3, JOIN_EPOCHS = 20 };
#endif

static pid_t start_worker(int p, const char *log) {
    return spawn("prep-worker --listen tcp://127.0.0.1:%d --threads 1 2>%s", p, log);
}

static void stop(pid_t pid, int sig) {
    if (pid <= 0) return;
    kill(pid, sig);
    waitpid(pid, NULL, 0);
}

/* Trains on d.tsv (file order) into LOSS with EXTRA flags; returns the exit code, `out` holds
 * the output. */
static int train(const char *loss, const char *extra) {
    return run("train --data d.tsv --spec spec.json --config %s/configs/dlrm_small.json --batch 256 --no-shuffle "
               "--epochs 1 --loss-log %s --json %s", src, loss, extra);
}

static char *checksum(void) {
    static char c[2][32];
    static int k;
    k ^= 1;
    const char *p = strstr(out, "\"rows_checksum\": \"");
    snprintf(c[k], sizeof c[k], "%.16s", p ? p + 18 : "none");
    return c[k];
}

static void test_same_training(void) {
    CHECK(run("gen --rows %d --scale 0.002 --out d.tsv", ROWS_GEN) == 0, "%s", out);
    write_spec("spec.json", 50, 7);
    char w[64], extra[256];
    snprintf(w, sizeof w, "--workers tcp://127.0.0.1:%d", port);
    pid_t pid = start_worker(port, "w.log");
    snprintf(extra, sizeof extra, "%s --offload off", w);
    CHECK(train("local.loss", extra) == 0, "%s", out);
    char local[32];
    snprintf(local, sizeof local, "%s", checksum());
    const int64_t rows = (int64_t)json_num("rows");
    static const char *const AT[] = {"p1", "p2", "p3"};
    for (int k = 0; k < 3; k++) {
        snprintf(extra, sizeof extra, "%s --offload 0.6 --offload-at %s", w, AT[k]);
        char loss[32];
        snprintf(loss, sizeof loss, "%s.loss", AT[k]);
        CHECK(train(loss, extra) == 0, "%s", out);
        CHECK(same_file("local.loss", loss), "offload at %s trains as the local run (loss logs differ)", AT[k]);
        CHECK(!strcmp(checksum(), local) && (int64_t)json_num("rows") == rows, "same rows at %s", AT[k]);
        CHECK(strstr(out, "\"pieces_remote\": 0,") == NULL, "the worker made pieces at %s: %s", AT[k], out);
    }
    /* auto: profiles (store off), prints its inputs and decision */
    snprintf(extra, sizeof extra, "%s --offload auto --offload-store none", w);
    CHECK(train("auto.loss", extra) == 0, "%s", out);
    CHECK(strstr(out, "train: offload: profiled") && strstr(out, "\"decision\": {"), "auto reports: %s", out);
    stop(pid, SIGTERM);
}

/* A worker killed (kill -9) or stopped (SIGSTOP) mid-epoch: training finishes on the same rows. */
static void test_worker_faults(void) {
    char extra[256];
    srand((unsigned)time(NULL));
    for (int rep = 0; rep < KILLS; rep++) {
        const int p = port + 1 + rep;
        pid_t pid = start_worker(p, "wk.log");
        usleep(200000);
        snprintf(extra, sizeof extra, "--workers tcp://127.0.0.1:%d --offload 1 --offload-at p2 --worker-timeout 1", p);
        pid_t tr = spawn("train --data d.tsv --spec spec.json --config %s/configs/dlrm_small.json --batch 256 "
                         "--no-shuffle --epochs 1 --loss-log kill.loss --json %s >kill.out 2>&1", src, extra);
        usleep((useconds_t)(300000 + rand() % 700000));
        stop(pid, SIGKILL);
        int st;
        waitpid(tr, &st, 0);
        read_out("kill.out");
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "training goes on after kill -9 of its worker: %s", out);
        CHECK(same_file("local.loss", "kill.loss"), "kill -9 at a random moment (%d): the same losses", rep);
        CHECK(strstr(out, "\"redone\": ") != NULL, "%s", out);
    }
    const int p = port + 9;
    pid_t pid = start_worker(p, "ws.log");
    usleep(200000);
    snprintf(extra, sizeof extra, "--workers tcp://127.0.0.1:%d --offload 0.8 --offload-at p3 --worker-timeout 1", p);
    pid_t tr = spawn("train --data d.tsv --spec spec.json --config %s/configs/dlrm_small.json --batch 256 "
                     "--no-shuffle --epochs 1 --loss-log stall.loss --json %s >stall.out 2>&1", src, extra);
    usleep(600000);
    kill(pid, SIGSTOP);
    int st;
    waitpid(tr, &st, 0);
    kill(pid, SIGCONT);
    stop(pid, SIGTERM);
    read_out("stall.out");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "training goes on past a stalled worker: %s", out);
    CHECK(same_file("local.loss", "stall.loss"), "a stalled worker: the same losses");
}

/* ---- under mpirun ----------------------------------------------------------------------------- */

/* `mpirun -np 2 rectrain train` on d.tsv (a DLRM sharded on 2 ranks, one thread each) into
 * LOSS with EXTRA flags, bounded to 120 s; the command line for spawn_sh, or run when `wait`
 * (the exit code; `out` holds the output, rank 0's JSON summary among it). */
static void mpi_train_cmd(char *cmd, size_t cap, const char *loss, const char *extra) {
    snprintf(cmd, cap, "env REC_PROGRESS=0 timeout 120 mpirun -np 2 --oversubscribe --bind-to none %s train --data "
             "d.tsv --spec spec.json --config %s/configs/dlrm_small.json --batch 256 --threads 1 --loss-log %s --json %s",
             cli, src, loss, extra);
}

static int mpi_train(const char *loss, const char *extra) {
    char cmd[2048], full[2400];
    mpi_train_cmd(cmd, sizeof cmd, loss, extra);
    snprintf(full, sizeof full, "cd %s && %s 2>&1", dir, cmd);
    return check_capture(full, out, sizeof out);
}

/* Every rank reads every global batch (dist.h), each with a client of the workers of its own:
 * the job trains the losses of the same job without workers, bit for bit, at every point and
 * with --offload auto (rank 0 decides for all: the ranks profile together and agree, or the
 * job would hang in a collective); and a worker killed mid-epoch leaves the losses as they were. */
static void test_mpirun(void) {
    if (!clirun_mpi_ready("offloading under mpirun")) return;
    char w[64], extra[256];
    const int p = port + 50;
    snprintf(w, sizeof w, "--workers tcp://127.0.0.1:%d", p);
    CHECK(mpi_train("mref.loss", "") == 0, "mpirun without workers: %s", out);
    pid_t pid = start_worker(p, "wmpi.log");
    static const char *const AT[] = {"p2", "p3"};
    for (int k = 0; k < 2; k++) {
        char loss[32];
        snprintf(loss, sizeof loss, "m%s.loss", AT[k]);
        snprintf(extra, sizeof extra, "%s --offload 0.6 --offload-at %s", w, AT[k]);
        CHECK(mpi_train(loss, extra) == 0, "%s", out);
        CHECK(same_file("mref.loss", loss), "mpirun -np 2 with a worker at %s trains as without (loss logs differ)", AT[k]);
        CHECK(strstr(out, "\"pieces_remote\": 0,") == NULL && strstr(out, "\"ranks\": 2"),
              "the worker made rank 0's pieces at %s: %s", AT[k], out);
    }
    /* auto twice on one store: profiled by both ranks together, then taken from rank 0's store */
    remove(path("mstore.json"));
    snprintf(extra, sizeof extra, "%s --offload auto --offload-store mstore.json", w);
    CHECK(mpi_train("mauto.loss", extra) == 0 && strstr(out, "train: offload: profiled") &&
              strstr(out, "\"decision\": {"), "auto under mpirun: %s", out);
    CHECK(same_file("mref.loss", "mauto.loss"), "auto under mpirun trains as without workers");
    CHECK(mpi_train("mauto2.loss", extra) == 0 && strstr(out, "train: offload: metrics from the store"),
          "auto under mpirun, from the store: %s", out);
    CHECK(same_file("mref.loss", "mauto2.loss"), "auto from the store trains as without workers");
    stop(pid, SIGTERM);
    /* both ranks asked for every remote piece, and the worker made each once: the second ask
     * is answered from the answers it keeps, whichever rank asked first (a rank that timed out
     * under load makes a piece itself, so not every piece is asked twice) */
    read_out("wmpi.log");
    const char *stopped = strstr(out, "stopped after "), *and = stopped ? strstr(stopped, ", and ") : NULL;
    long long made = -1, again = -1;
    if (stopped) sscanf(stopped, "stopped after %lld", &made);
    if (and) sscanf(and, ", and %lld answered again", &again);
    CHECK(made > 0 && again > made / 2, "the worker made %lld pieces and answered %lld again: %s", made, again, out);

    /* kill -9 of the worker once rank 0 has logged a step: every piece at p'2 is the worker's */
    CHECK(mpi_train("mref2.loss", "--no-shuffle --epochs 2") == 0, "%s", out);
    const int total = lines_of("mref2.loss");
    pid = start_worker(p + 1, "wmk.log");
    usleep(200000);
    char cmd[2048];
    snprintf(extra, sizeof extra, "--workers tcp://127.0.0.1:%d --offload 1 --offload-at p2 --worker-timeout 1 "
             "--no-shuffle --epochs 2 >mkill.out 2>&1", p + 1);
    mpi_train_cmd(cmd, sizeof cmd, "mkill.loss", extra);
    remove(path("mkill.loss"));
    pid_t tr = spawn_sh("%s", cmd);
    int at = 0;
    for (int i = 0; i < 12000 && at < 1; i++) { /* up to 120 s, as mpirun's timeout */
        at = lines_of("mkill.loss");
        if (at < 1) usleep(10000);
    }
    usleep((useconds_t)(rand() % 100000));
    at = lines_of("mkill.loss");
    stop(pid, SIGKILL);
    int st;
    waitpid(tr, &st, 0);
    read_out("mkill.out");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "mpirun training goes on after kill -9 of its worker: %s", out);
    CHECK(at >= 1 && at < total, "the worker was killed mid-run: after %d of %d steps", at, total);
    CHECK(same_file("mref2.loss", "mkill.loss"), "mpirun, kill -9 of the worker after step %d: the same losses", at);
    CHECK(strstr(out, "\"pieces_remote\": 0,") == NULL, "the worker made pieces before it died: %s", out);
}

/* --workers @FILE: a worker listed while the job runs joins it, one unlisted leaves it. */
static void test_join_leave(void) {
    const int p = port + 30;
    FILE *f = fopen(path("workers.txt"), "w");
    fputs("# no worker yet\n", f);
    fclose(f);
    pid_t pid = start_worker(p, "wj.log");
    pid_t tr = spawn("train --data d.tsv --spec spec.json --config %s/configs/dlrm_small.json --batch 64 --no-shuffle "
                     "--epochs %d --loss-log join.loss --json --workers @workers.txt --offload 1 --offload-at p2 "
                     ">join.out 2>&1", src, JOIN_EPOCHS);
    /* once it trains (pieces made here), the worker is listed: the job re-reads the list every
     * second and runs for seconds more (JOIN_EPOCHS), however fast the machine */
    for (int i = 0; i < 6000; i++) {
        struct stat sb;
        if (stat(path("join.loss"), &sb) == 0 && sb.st_size > 0) break;
        usleep(10000);
    }
    f = fopen(path("workers.txt.tmp"), "w");
    fprintf(f, "tcp://127.0.0.1:%d  # joined\n", p);
    fclose(f);
    rename(path("workers.txt.tmp"), path("workers.txt"));
    int st;
    waitpid(tr, &st, 0);
    stop(pid, SIGTERM);
    read_out("join.out");
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s", out);
    CHECK(strstr(out, "added (workers.txt)") != NULL, "the listed worker joins: %s", out);
    CHECK(strstr(out, "\"pieces_remote\": 0,") == NULL && strstr(out, "\"pieces_local\": 0,") == NULL,
          "pieces made here before it joined, and by it after: %s", out);
    CHECK(run("train --data d.tsv --spec spec.json --config %s/configs/dlrm_small.json --batch 64 --no-shuffle "
              "--epochs %d --loss-log join_local.loss", src, JOIN_EPOCHS) == 0, "%s", out);
    CHECK(same_file("join_local.loss", "join.loss"), "a worker joining mid-epoch: the same losses");
}

/* Refusals of the CLI and of the data, each naming what to do. */
static void test_messages(void) {
    static const struct { const char *args, *needle; int rc; } U[] = {
        {"train --data d.tsv --spec spec.json --offload 0.5", "need --workers", 2},
        {"train --data d.tsv --spec spec.json --workers tcp://127.0.0.1:1 --offload half", "auto, off or a share", 2},
        {"train --data d.tsv --spec spec.json --workers tcp://127.0.0.1:1 --offload-at p4", "p1, p2 or p3", 2},
        {"train --data d.tsv --spec spec.json --workers 127.0.0.1:1",
         "--workers: '127.0.0.1:1' is not an endpoint: give tcp://HOST:PORT", 2},
        {"prep-worker --listen 127.0.0.1:1", "--listen: '127.0.0.1:1' is not an endpoint: give tcp://HOST:PORT", 2},
        /* ports outside 1..65535 (ZeroMQ would take them, and the trainer wait for a worker that
         * cannot be), and a workers file that is not there: refused at once, named */
        {"train --data d.tsv --spec spec.json --workers tcp://127.0.0.1:1,tcp://h:70000",
         "--workers: 'tcp://h:70000': the port must be a number in 1..65535, got '70000'", 2},
        {"prep-worker --listen tcp://127.0.0.1:0", "--listen: 'tcp://127.0.0.1:0': the port must be a number in 1..65535", 2},
        {"prep-worker --listen tcp://127.0.0.1", "'tcp://127.0.0.1': give tcp://HOST:PORT, with a host and a port", 2},
        {"train --data d.tsv --spec spec.json --workers @missing.txt",
         "--workers @missing.txt: cannot read missing.txt: No such file or directory", 1},
        {"train --data d.tsv --spec spec.json --workers @bad_workers.txt",
         "bad_workers.txt:4: 'tcp://127.0.0.1:99999': the port must be a number in 1..65535", 1},
        {"prep-worker --listen tcp://256.1.1.1:1 --insecure", "cannot listen on tcp://256.1.1.1:1", 1},
        {"prep-worker --keep-mb -1", "--keep-mb needs an integer in [0, 1048576] (got '-1')", 2},
        /* Algorithm 1 profiles the trainer on the CPUs: a GPU trainer is told to give the share */
        {"train --data d.tsv --spec spec.json --device cuda --workers tcp://127.0.0.1:1",
         "--offload auto (the default with --workers) profiles the trainer's step on the CPUs, not on the GPU", 1},
        {"train --data d.tsv --spec spec.json --device cuda --workers tcp://127.0.0.1:1 --offload auto",
         "give --offload RATIO (the share of the pieces the workers prepare, e.g. 0.5) or --offload off", 1},
    };
    /* the library's own bound on the kept answers (the CLI's is tested above) */
    const rec_prep_worker_opts wo = {.listen = "tcp://127.0.0.1:1", .threads = 1, .keep_mb = -1};
    CHECK_ERR(rec_prep_worker_run(&wo), REC_EINVAL, "keep_mb must be between 0 and 1048576 MiB (got -1)");
    FILE *bw = fopen(path("bad_workers.txt"), "w");
    if (bw) fputs("# workers\ntcp://127.0.0.1:1\n\ntcp://127.0.0.1:99999\n", bw), fclose(bw);
    for (size_t k = 0; k < sizeof U / sizeof U[0]; k++) {
        const double t0 = rec_now();
        CHECK(run("%s", U[k].args) == U[k].rc && strstr(out, U[k].needle), "%s: %s", U[k].args, out);
        CHECK(rec_now() - t0 < 3, "%s: refused after %.1f s, not at once", U[k].args, rec_now() - t0);
    }
    CHECK(run("prep --spec spec.json --in d.tsv --out d.rshard") == 0, "%s", out);
    CHECK(run("train --data d.rshard --workers tcp://127.0.0.1:1 --offload 0.5") == 1 &&
              strstr(out, "no preprocessing to offload"), "a shard: %s", out);
    /* a malformed line preprocessed by a worker fails the run as it would locally, saying who made it */
    const int p = port + 40;
    pid_t pid = start_worker(p, "wm.log");
    FILE *in = fopen(path("d.tsv"), "r"), *o = fopen(path("bad.tsv"), "w");
    char line[4096];
    for (int i = 0; i < 3000 && fgets(line, sizeof line, in); i++) fputs(i == 2000 ? "garbage\n" : line, o);
    fclose(in);
    fclose(o);
    CHECK(run("train --data bad.tsv --spec spec.json --config %s/configs/dlrm_small.json --batch 256 --no-shuffle "
              "--workers tcp://127.0.0.1:%d --offload 1 --offload-at p2", src, p) == 1 &&
              strstr(out, "bad.tsv:2001: ") && strstr(out, "(preprocessed by worker tcp://127.0.0.1:"),
          "a worker's data error: %s", out);
    stop(pid, SIGTERM);
    /* a line over --max-line, found by the scan that cuts the pieces */
    CHECK(run("train --data bad.tsv --spec spec.json --max-line 64 --workers tcp://127.0.0.1:%d --offload 1", p) == 1 &&
              strstr(out, "bad.tsv:1: line is longer than 64 bytes"), "%s", out);
}

/* Hostile frames at a live worker: each is refused and logged, and it still answers a ping. */
static void test_hostile(void) {
    const int p = port + 20;
    pid_t pid = start_worker(p, "wh.log");
    void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_DEALER);
    char ep[64];
    snprintf(ep, sizeof ep, "tcp://127.0.0.1:%d", p);
    zmq_connect(s, ep);
    const int tmo = 3000;
    zmq_setsockopt(s, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
    rec_wbuf w = {0};
    rec_frame_begin(&w, REC_MSG_PING, 5, 6);
    rec_frame_end(&w);
    uint8_t junk[64] = "GET / HTTP/1.0\r\n\r\n";
    zmq_send(s, junk, 18, 0);                       /* not a frame */
    zmq_send(s, w.p, 10, 0);                        /* a truncated header */
    uint8_t v2[REC_NET_HEAD];
    memcpy(v2, w.p, REC_NET_HEAD);
    v2[4] = 9;                                      /* another version */
    zmq_send(s, v2, sizeof v2, 0);
    rec_frame_begin(&w, REC_MSG_PIECE, 5, 7);       /* a piece of a job never given */
    rec_net_piece np = {0, 0, 10, 1, 1, NULL};
    rec_net_piece_encode(&w, &np);
    rec_frame_end(&w);
    zmq_send(s, w.p, w.len, 0);
    rec_frame_begin(&w, REC_MSG_JOB, 5, 8);         /* a JOB cut short */
    zmq_send(s, w.p, w.len, 0);
    int errors = 0, nojob = 0, pong = 0;
    rec_frame_begin(&w, REC_MSG_PING, 5, 6);
    rec_frame_end(&w);
    zmq_send(s, w.p, w.len, 0);
    for (int k = 0; k < 6; k++) {
        uint8_t buf[4096];
        const int n = zmq_recv(s, buf, sizeof buf, 0);
        if (n < 0) break;
        rec_frame_head h;
        if (rec_frame_head_decode(buf, (size_t)(n < (int)sizeof buf ? n : (int)sizeof buf), "worker", &h)) continue;
        errors += h.type == REC_MSG_ERROR;
        nojob += h.type == REC_MSG_NOJOB;
        pong += h.type == REC_MSG_PONG;
    }
    CHECK(errors == 4 && nojob == 1 && pong == 1, "4 refusals, a NOJOB and a PONG (got %d, %d, %d)", errors, nojob, pong);
    zmq_close(s);
    zmq_ctx_term(ctx);
    rec_wbuf_free(&w);
    stop(pid, SIGTERM);
    read_out("wh.log");
    CHECK(strstr(out, "not a rectrain frame") && strstr(out, "frame version 9"), "refusals are logged: %s", out);
    CHECK(strstr(out, "stopped after"), "the worker ended normally: %s", out);
}

int main(void) {
    int rc = clirun_setup("rectrain_offload");
    if (rc) return rc;
    /* below Linux's ephemeral range (32768 and up), where mpirun and other tests' clients bind */
    port = 20000 + (int)(getpid() % 12000);
    test_codec();
    test_grid();
    test_policy();
    test_same_training();
    test_worker_faults();
    test_join_leave();
    test_mpirun();
    test_messages();
    test_hostile();
    clirun_cleanup();
    return check_report();
}
