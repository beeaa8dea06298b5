/* libFuzzer target for the wire format of rectrain's services (net.h): every input is a
 * message as a worker or a trainer would receive it. Its header is decoded; when that passes,
 * its body is decoded as the frame type says (JOB, PIECE, RESULT against a fixed 2-dense,
 * 3-feature job, ERROR). A frame that decodes is re-encoded and must decode to the same
 * thing (JOB: the same key; RESULT: the same batch digest). Anything else (a crash, a read out
 * of bounds, UB, a leak, an abort below) is a bug. Seeds: tests/fuzz/seeds/fuzz_frame (one
 * frame of each type, written by the codec). Build and run: scripts/fuzz.sh. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
        int64_t bad;
        if (rec_net_result_decode(body, h.body, 2, 3, ROWS, &bad, &b, sp) == REC_OK) {
            const uint64_t d = rec_batch_digest(&b);
            rec_frame_begin(&w, REC_MSG_RESULT, h.job, h.seq);
            rec_net_result_encode(&w, bad, &b);
            if (rec_frame_end(&w) != REC_OK) abort();
            uint8_t *c = aligned_alloc(8, (w.len + 7) / 8 * 8);
            memcpy(c, w.p, w.len);
            rec_batch b2;
            rec_jagged sp2[3];
            int64_t bad2;
            if (rec_net_result_decode(c + REC_NET_HEAD, w.len - REC_NET_HEAD, 2, 3, ROWS, &bad2, &b2, sp2) != REC_OK ||
                rec_batch_digest(&b2) != d || bad2 != bad)
                abort();
            free(c);
        }
    } else if (h.type == REC_MSG_ERROR) {
        rec_status s;
        char msg[256];
        rec_net_error_decode(body, h.body, &s, msg, sizeof msg);
    }
    rec_wbuf_free(&w);
    free(m);
    return 0;
}
