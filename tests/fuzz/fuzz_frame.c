/* libFuzzer target for the wire format of rectrain's services (net.h): every input is a
 * message as a worker or a trainer would receive it. Its header is decoded; when that passes,
 * its body is decoded as the frame type says (JOB, PIECE, RESULT against a fixed 2-dense,
 * 3-feature job, ERROR; the lookahead cache's EMB_HELLO, EMB_GET/ROWS/PUT against server 1 of 2,
 * CACHE_INFO, CACHE_STEP against a 16-slot cache, EMB_OK's state, EMB_COMMIT and EMB_DENSE). A frame that decodes is re-encoded and must decode to the same
 * thing (JOB: the same key; RESULT: the same batch digest). Anything else (a crash, a read out
 * of bounds, UB, a leak, an abort below) is a bug. Seeds: tests/fuzz/seeds/fuzz_frame (one
 * frame of each type, written by the codec). Build and run: scripts/fuzz.sh. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rectrain/cache.h"
#include "rectrain/net.h"

static const int64_t ROWS[3] = {5, 1000, (int64_t)1 << 40};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* as received: an 8-byte aligned buffer of exactly `size` bytes */
    uint8_t *m = aligned_alloc(8, size ? (size + 7) / 8 * 8 : 8);
    if (!m) return 0;
    if (size) memcpy(m, data, size);
    rec_frame_head h;
    if (rec_frame_head_decode(m, size, "fuzz", &h) != REC_OK) {
        free(m);
        return 0;
    }
    const uint8_t *body = m + REC_NET_HEAD;
    rec_wbuf w = {0};
    if (h.type == REC_MSG_JOB) {
        rec_net_job j, k;
        if (rec_net_job_decode(body, h.body, &j) == REC_OK) {
            rec_frame_begin(&w, REC_MSG_JOB, h.job, h.seq);
            rec_net_job_encode(&w, &j);
            if (rec_frame_end(&w) != REC_OK || rec_net_job_decode(w.p + REC_NET_HEAD, w.len - REC_NET_HEAD, &k) != REC_OK ||
                rec_net_job_key(&k) != rec_net_job_key(&j))
                abort();
            rec_net_job_free(&k);
        }
        rec_net_job_free(&j);
    } else if (h.type == REC_MSG_PIECE) {
        rec_net_piece p;
        if (rec_net_piece_decode(body, h.body, &p) == REC_OK && p.text && p.text + p.len > (const char *)m + size) abort();
    } else if (h.type == REC_MSG_RESULT) {
        rec_batch b;
        rec_jagged sp[3];
        rec_net_room room = {0}, room2 = {0};
        int64_t bad;
        if (rec_net_result_decode(body, h.body, 2, 3, ROWS, &bad, &b, sp, &room) == REC_OK) {
            const uint64_t d = rec_batch_digest(&b);
            rec_frame_begin(&w, REC_MSG_RESULT, h.job, h.seq);
            rec_net_result_encode(&w, bad, &b);
            if (rec_frame_end(&w) != REC_OK) abort();
            uint8_t *c = aligned_alloc(8, (w.len + 7) / 8 * 8);
            memcpy(c, w.p, w.len);
            rec_batch b2;
            rec_jagged sp2[3];
            int64_t bad2;
            if (rec_net_result_decode(c + REC_NET_HEAD, w.len - REC_NET_HEAD, 2, 3, ROWS, &bad2, &b2, sp2, &room2) != REC_OK ||
                rec_batch_digest(&b2) != d || bad2 != bad)
                abort();
            free(c);
        }
        rec_net_room_free(&room);
        rec_net_room_free(&room2);
    } else if (h.type == REC_MSG_EMB_HELLO) {
        rec_net_emb_hello e;
        if (rec_net_emb_hello_decode(body, h.body, &e) == REC_OK && rec_net_emb_hello_digest(&e) != e.digest) abort();
    } else if (h.type == REC_MSG_EMB_GET || h.type == REC_MSG_EMB_ROWS || h.type == REC_MSG_EMB_PUT) {
        for (int b16 = 0; b16 < 2; b16++) { /* rows of fp32 tables, and of bf16 ones */
            const rec_net_emb_hello t = {0, 1, 2, 3, 4, 2, 0, 0, ROWS, 0, 0, 0, b16, 0};
            rec_net_rows r;
            if (rec_net_rows_decode(body, h.body, rec_msg_name(h.type), h.type != REC_MSG_EMB_ROWS,
                                    h.type != REC_MSG_EMB_GET, &t, 1, &r) == REC_OK)
                for (int64_t i = 0; r.e && i < r.n; i++)
                    if (r.e[i].f < 0 || r.e[i].f > 2 || r.e[i].row % 2 != 1 || r.e[i].row >= ROWS[r.e[i].f]) abort();
        }
    } else if (h.type == REC_MSG_EMB_OK) {
        rec_net_emb_state es;
        if (rec_net_emb_state_decode(body, h.body, &es) == REC_OK && es.committed < -1) abort();
    } else if (h.type == REC_MSG_EMB_COMMIT || h.type == REC_MSG_EMB_DENSE) {
        const float *v;
        int64_t n;
        if (rec_net_floats_decode(body, h.body, rec_msg_name(h.type), &v, &n) == REC_OK &&
            (n < 0 || (n && (const uint8_t *)(v + n) > m + size)))
            abort();
    } else if (h.type == REC_MSG_CACHE_HELLO) {
        int rank, ranks;
        int64_t start;
        if (rec_net_cache_hello_decode(body, h.body, &rank, &ranks, &start) == REC_OK && (rank < 0 || rank >= ranks)) abort();
    } else if (h.type == REC_MSG_CACHE_INFO) {
        rec_net_cache_info c;
        if (rec_net_cache_info_decode(body, h.body, &c) == REC_OK &&
            (c.capacity < 1 || c.depth > c.lookahead || c.table0 < 0 || c.table0 + c.F > c.tables))
            abort();
    } else if (h.type == REC_MSG_CACHE_STEP) {
        const rec_net_cache_info c = {3, 2, 0, 4, 2, 2, 0, 16, 64, 10, ROWS, 0, 0};
        rec_net_cache_step st;
        rec_jagged sp[3];
        rec_net_room room = {0};
        if (rec_net_cache_step_decode(body, h.body, &c, &st, sp, &room) == REC_OK) {
            for (int64_t i = 0; i < st.n_fetch; i++)
                if (st.fetch[i].slot < 0 || st.fetch[i].slot >= 16) abort();
            for (int64_t i = 0; i < st.n_pre_send; i++)
                if (st.pre_send[i].peer != 1) abort();
        }
        rec_net_room_free(&room);
    } else if (h.type == REC_MSG_ERROR) {
        rec_status s;
        char msg[256];
        rec_net_error_decode(body, h.body, &s, msg, sizeof msg);
    }
    rec_wbuf_free(&w);
    free(m);
    return 0;
}
