/* The frame codec of rectrain's services (net.h). Pure: bytes in, bytes or views out.
 *
 * Writing appends fields to a growable buffer; reading walks a cursor that refuses to step
 * past the end, so a truncated or lying frame is an REC_EFORMAT naming the field, never a
 * read out of bounds. Integers are little-endian on the wire and in memory (x86-64 and
 * aarch64 both): fields are memcpy'd, arrays are used in place.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rectrain/core.h"
#include "rectrain/net.h"
#include "wire_impl.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the wire format is little-endian");

static const char *const NAMES[REC_MSG_COUNT] = {"?", "JOB", "JOB_OK", "PIECE", "RESULT", "ERROR", "NOJOB", "PING", "PONG",
                                                      "EMB_HELLO", "EMB_OK", "EMB_GET", "EMB_ROWS", "EMB_PUT",
                                                      "EMB_PUT_OK", "CACHE_HELLO", "CACHE_INFO", "CACHE_NEXT",
                                                      "CACHE_STEP", "EMB_COMMIT", "EMB_ROLLBACK", "EMB_DENSE_GET",
                                                      "EMB_DENSE", "EMB_RESTORE"};

const char *rec_msg_name(int type) { return type > 0 && type < REC_MSG_COUNT ? NAMES[type] : "unknown"; }

/* ---- writing ------------------------------------------------------------------------------ */

void rec_wbuf_free(rec_wbuf *w) {
    free(w->p);
    memset(w, 0, sizeof *w);
}

void *rec_wbuf_grab(rec_wbuf *w, size_t n) {
    if (!reserve(w, n)) return NULL;
    void *p = w->p + w->len;
    w->len += n;
    return p;
}

void rec_frame_begin(rec_wbuf *w, int type, uint64_t job, uint64_t seq) {
    w->len = 0;
    w->err = REC_OK;
    put_u32(w, REC_NET_MAGIC);
    put_u16(w, REC_NET_VERSION);
    put_u16(w, (uint16_t)type);
    put_u64(w, job);
    put_u64(w, seq);
    put_u32(w, 0);
    put_u32(w, 0);
}

rec_status rec_frame_end(rec_wbuf *w) {
    if (w->err) return w->err;
    const size_t body = w->len - REC_NET_HEAD;
    if (body > REC_NET_MAX_BODY)
        return rec_errorf(REC_EINVAL, "a %s frame of %zu bytes is over the limit of %zu", rec_msg_name(w->p[6]), body,
                          REC_NET_MAX_BODY);
    const uint32_t b = (uint32_t)body;
    memcpy(w->p + 24, &b, 4);
    return REC_OK;
}

rec_status rec_frame_head_decode(const void *msg, size_t len, const char *from, rec_frame_head *h) {
    memset(h, 0, sizeof *h);
    if (len < REC_NET_HEAD)
        return rec_errorf(REC_EFORMAT, "%s: a message of %zu bytes, shorter than a frame header (%d)", from, len,
                          REC_NET_HEAD);
    const uint8_t *p = msg;
    uint32_t magic, body, zero;
    memcpy(&magic, p, 4);
    memcpy(&h->version, p + 4, 2);
    memcpy(&h->type, p + 6, 2);
    memcpy(&h->job, p + 8, 8);
    memcpy(&h->seq, p + 16, 8);
    memcpy(&body, p + 24, 4);
    memcpy(&zero, p + 28, 4);
    if (magic != REC_NET_MAGIC)
        return rec_errorf(REC_EFORMAT, "%s: not a rectrain frame (magic %08x; is something else listening there?)", from,
                          magic);
    if (h->version != REC_NET_VERSION)
        return rec_errorf(REC_EFORMAT, "%s: frame version %u, and this build speaks version %d: run the same rectrain "
                          "on both ends", from, h->version, REC_NET_VERSION);
    if (h->type == 0 || h->type >= REC_MSG_COUNT)
        return rec_errorf(REC_EFORMAT, "%s: unknown frame type %u", from, h->type);
    if (zero != 0) return rec_errorf(REC_EFORMAT, "%s: %s frame with a non-zero reserved field", from, rec_msg_name(h->type));
    if (body != len - REC_NET_HEAD)
        return rec_errorf(REC_EFORMAT, "%s: %s frame says its body is %u bytes, and %zu came", from,
                          rec_msg_name(h->type), body, len - REC_NET_HEAD);
    if (body > REC_NET_MAX_BODY)
        return rec_errorf(REC_EFORMAT, "%s: %s frame of %u bytes is over the limit of %zu", from, rec_msg_name(h->type),
                          body, REC_NET_MAX_BODY);
    h->body = body;
    return REC_OK;
}

/* ---- JOB ---------------------------------------------------------------------------------- */

enum { MAX_SPEC = 16 << 20, MAX_PATH = 4096, MAX_PARTS = 65536 };

void rec_net_job_encode(rec_wbuf *w, const rec_net_job *j) {
    put_str(w, j->spec);
    put_str(w, j->spec_origin);
    put_str(w, j->vocab_from);
    put_u64(w, j->vocab_digest);
    put_u32(w, (uint32_t)j->tsv.has_label);
    put_u32(w, (uint32_t)j->tsv.bad_rows);
    put_i64(w, j->tsv.max_line);
    put_u32(w, (uint32_t)j->tsv.short_rows);
    put_f64(w, j->tsv.max_bad_share);
    put_u32(w, (uint32_t)j->n_parts);
    for (int k = 0; k < j->n_parts; k++) {
        put_str(w, j->parts[k]);
        put_u64(w, j->part_bytes[k]);
    }
}

void rec_net_job_free(rec_net_job *j) {
    free(j->spec);
    free(j->spec_origin);
    free(j->vocab_from);
    for (int k = 0; j->parts && k < j->n_parts; k++) free(j->parts[k]);
    free(j->parts);
    free(j->part_bytes);
    memset(j, 0, sizeof *j);
}

rec_status rec_net_job_decode(const uint8_t *body, size_t len, rec_net_job *j) {
    memset(j, 0, sizeof *j);
    rbuf r = body_reader(body, len, "JOB");
    j->spec = get_str(&r, MAX_SPEC, "the spec");
    j->spec_origin = get_str(&r, MAX_PATH, "the spec's path");
    j->vocab_from = get_str(&r, MAX_PATH, "the vocabulary path");
    j->vocab_digest = get_u64(&r, "the vocabulary digest");
    j->tsv.has_label = (int)get_u32(&r, "has_label");
    j->tsv.bad_rows = (rec_bad_rows)get_u32(&r, "bad_rows");
    j->tsv.max_line = get_i64(&r, "max_line");
    j->tsv.short_rows = (rec_short_rows)get_u32(&r, "short_rows");
    j->tsv.max_bad_share = get_f64(&r, "max_bad_share");
    const uint32_t n = get_u32(&r, "the file count");
    if (!r.err && (j->tsv.has_label < 0 || j->tsv.has_label > 1 || (unsigned)j->tsv.bad_rows > REC_BAD_ROWS_SKIP ||
                   (unsigned)j->tsv.short_rows > REC_SHORT_ROWS_MISSING || j->tsv.max_line < 1 ||
                   j->tsv.max_line > ((int64_t)1 << 30) || !(j->tsv.max_bad_share >= 0 && j->tsv.max_bad_share <= 1)))
        r.err = rec_errorf(REC_EFORMAT, "JOB frame: TSV options out of range (has_label %d, bad_rows %d, short_rows %d, "
                           "max_line %lld, max_bad_share %g)", j->tsv.has_label, (int)j->tsv.bad_rows,
                           (int)j->tsv.short_rows, (long long)j->tsv.max_line, j->tsv.max_bad_share);
    if (!r.err && (n < 1 || n > MAX_PARTS))
        r.err = rec_errorf(REC_EFORMAT, "JOB frame: %u data files (1 to %d)", n, MAX_PARTS);
    if (!r.err) {
        j->parts = calloc(n, sizeof *j->parts);
        j->part_bytes = calloc(n, sizeof *j->part_bytes);
        if (!j->parts || !j->part_bytes) r.err = rec_errorf(REC_ENOMEM, "out of memory decoding a JOB frame");
    }
    for (uint32_t k = 0; !r.err && k < n; k++) {
        j->parts[k] = get_str(&r, MAX_PATH, "a data file's path");
        j->n_parts = (int)k + 1;
        j->part_bytes[k] = get_u64(&r, "a data file's size");
    }
    return finish(&r);
}

uint64_t rec_net_job_key(const rec_net_job *j) {
    rec_wbuf w = {0};
    rec_net_job_encode(&w, j);
    const uint64_t h = w.err ? 0 : rec_fnv1a64(REC_FNV_SEED, w.p, w.len);
    rec_wbuf_free(&w);
    return h;
}

/* ---- PIECE -------------------------------------------------------------------------------- */

void rec_net_piece_encode(rec_wbuf *w, const rec_net_piece *p) {
    put_u32(w, p->part);
    put_u32(w, p->text ? 1 : 0);
    put_u64(w, p->offset);
    put_u64(w, p->len);
    put_i64(w, p->first_line);
    put_i64(w, p->n_lines);
    if (p->text) put(w, p->text, p->len);
}

rec_status rec_net_piece_decode(const uint8_t *body, size_t len, rec_net_piece *p) {
    memset(p, 0, sizeof *p);
    rbuf r = body_reader(body, len, "PIECE");
    p->part = get_u32(&r, "the file index");
    const uint32_t flags = get_u32(&r, "the flags");
    p->offset = get_u64(&r, "the offset");
    p->len = get_u64(&r, "the length");
    p->first_line = get_i64(&r, "the first line");
    p->n_lines = get_i64(&r, "the line count");
    if (!r.err && (flags > 1 || p->len < 1 || p->len > REC_NET_MAX_BODY || p->offset > ((uint64_t)1 << 56) ||
                   p->first_line < 1 || p->first_line > ((int64_t)1 << 56) || p->n_lines < 1 ||
                   p->n_lines > REC_NET_MAX_ROWS || (uint64_t)p->n_lines > p->len))
        r.err = rec_errorf(REC_EFORMAT, "PIECE frame: fields out of range (flags %u, offset %llu, %llu bytes, lines "
                           "%lld + %lld)", flags, (unsigned long long)p->offset, (unsigned long long)p->len,
                           (long long)p->first_line, (long long)p->n_lines);
    if (!r.err && flags) p->text = (const char *)take(&r, p->len, "the piece's text");
    return finish(&r);
}

/* ---- RESULT ------------------------------------------------------------------------------- */

void rec_net_result_encode(rec_wbuf *w, int64_t bad, const rec_batch *b) {
    put_i64(w, bad);
    rec__net_put_batch(w, b);
}

/* A feature's ids and row lengths travel in the narrowest form that holds them (every id of
 * a table under 2^16 rows in 16 bits, under 2^31 in 32; lengths up to 255 as bytes instead of
 * 64-bit offsets): fewer bytes to move, seal and open. The receiver widens them into its room. */
enum { ID32, ID64, ID16 };
enum { HAS_WEIGHTS = 1, HAS_LENGTHS = 2 };

void rec__net_put_batch(rec_wbuf *w, const rec_batch *b) {
    const int64_t n = b->n;
    put_i64(w, n);
    put_u32(w, (uint32_t)b->n_dense);
    put_u32(w, (uint32_t)b->n_sparse);
    put(w, b->label, (size_t)n * sizeof(float));
    pad8(w);
    put(w, b->dense, (size_t)(n * b->n_dense) * sizeof(float));
    pad8(w);
    for (int32_t f = 0; f < b->n_sparse; f++) {
        const rec_jagged *j = &b->sparse[f];
        const int64_t nnz = j->offsets[n];
        int64_t lo = 0, hi = 0;
        if (j->wide)
            for (int64_t k = 0; k < nnz; k++) lo = j->ids64[k] < lo ? j->ids64[k] : lo, hi = j->ids64[k] > hi ? j->ids64[k] : hi;
        else
            for (int64_t k = 0; k < nnz; k++) lo = j->ids32[k] < lo ? j->ids32[k] : lo, hi = j->ids32[k] > hi ? j->ids32[k] : hi;
        int bytes = 1; /* every row's length in [0, 255] (offsets that decrease go as they are, to be refused) */
        for (int64_t i = 0; i < n && bytes; i++) bytes = (uint64_t)(j->offsets[i + 1] - j->offsets[i]) <= UINT8_MAX;
        const uint32_t form = lo < 0 ? (j->wide ? ID64 : ID32) : hi <= UINT16_MAX ? ID16 : hi <= INT32_MAX ? ID32 : ID64;
        const uint32_t flags = (j->weights ? HAS_WEIGHTS : 0) | (bytes ? HAS_LENGTHS : 0);
        put_u32(w, form);
        put_u32(w, flags);
        put_i64(w, nnz);
        if (flags & HAS_LENGTHS) {
            uint8_t *len = n ? rec_wbuf_grab(w, (size_t)n) : NULL;
            for (int64_t i = 0; len && i < n; i++) len[i] = (uint8_t)(j->offsets[i + 1] - j->offsets[i]);
            pad8(w);
        } else {
            put(w, j->offsets, (size_t)(n + 1) * sizeof(int64_t));
        }
        if (form == ID16) { /* the frame is 8-aligned here: the ids go in place */
            uint16_t *ids = nnz ? rec_wbuf_grab(w, (size_t)nnz * 2) : NULL;
            for (int64_t k = 0; ids && k < nnz; k++) ids[k] = (uint16_t)(j->wide ? j->ids64[k] : j->ids32[k]);
        } else if (form == ID32 && j->wide) {
            int32_t *ids = nnz ? rec_wbuf_grab(w, (size_t)nnz * 4) : NULL;
            for (int64_t k = 0; ids && k < nnz; k++) ids[k] = (int32_t)j->ids64[k];
        } else {
            put(w, j->ids, (size_t)nnz * (size_t)rec_jagged_id_bytes(j));
        }
        pad8(w);
        if (j->weights) put(w, j->weights, (size_t)nnz * sizeof(float));
        pad8(w);
    }
}

rec_status rec_net_result_decode(const uint8_t *body, size_t len, int32_t n_dense, int32_t n_sparse,
                                 const int64_t *table_rows, int64_t *bad, rec_batch *b, rec_jagged *sparse,
                                 rec_net_room *room) {
    memset(b, 0, sizeof *b);
    if ((uintptr_t)body % 8)
        return rec_errorf(REC_EINVAL, "RESULT frame: the message buffer is not 8-byte aligned");
    rbuf r = body_reader(body, len, "RESULT");
    *bad = get_i64(&r, "the bad-row count");
    if (!r.err && (*bad < 0 || *bad > REC_NET_MAX_ROWS))
        r.err = rec_errorf(REC_EFORMAT, "RESULT frame: %lld bad rows (at most %lld)", (long long)*bad,
                           (long long)REC_NET_MAX_ROWS);
    rec__net_get_batch(&r, n_dense, n_sparse, table_rows, 0, "the job's spec makes", b, sparse, room);
    return finish(&r);
}

void rec_net_room_free(rec_net_room *room) {
    free(room->p);
    *room = (rec_net_room){0};
}

/* A feature's header and where its arrays lie in the frame (NULL where r failed). */
typedef struct wire_feature {
    uint32_t form, flags;
    int64_t nnz;
    const uint8_t *offsets, *ids, *weights;
} wire_feature;

static wire_feature take_feature(rbuf *r, int64_t n, uint32_t f) {
    wire_feature x = {0};
    x.form = get_u32(r, "a feature's id form");
    x.flags = get_u32(r, "a feature's flags");
    x.nnz = get_i64(r, "a feature's id count");
    if (!r->err && (x.form > ID16 || x.flags > (HAS_WEIGHTS | HAS_LENGTHS) || x.nnz < 0 || x.nnz > REC_NET_MAX_ROWS * 64))
        r->err = rec_errorf(REC_EFORMAT, "%s frame: feature %u: id form %u, flags %u, %lld ids", r->what, f, x.form,
                            x.flags, (long long)x.nnz);
    x.offsets = x.flags & HAS_LENGTHS ? take(r, bytes_of(n, 1), "a feature's row lengths")
                                      : take(r, bytes_of(n + 1, 8), "a feature's offsets");
    skip8(r);
    x.ids = take(r, bytes_of(x.nnz, x.form == ID16 ? 2 : x.form == ID64 ? 8 : 4), "a feature's ids");
    skip8(r);
    if (x.flags & HAS_WEIGHTS) x.weights = take(r, bytes_of(x.nnz, 4), "a feature's weights");
    skip8(r);
    return x;
}

/* Bytes of room a feature widens into: offsets from lengths, 32-bit ids from 16-bit. */
static size_t room_bytes(const wire_feature *x, int64_t n) {
    return (x->flags & HAS_LENGTHS ? (size_t)(n + 1) * 8 : 0) + (x->form == ID16 ? ((size_t)x->nnz * 4 + 7) / 8 * 8 : 0);
}

/* Grows the room to `want` bytes (its contents kept): 1, or 0 with r's error set. */
static int room_reserve(rec_net_room *room, size_t want, rbuf *r, int64_t n) {
    if (want <= room->cap) return 1;
    void *p = realloc(room->p, want);
    if (!p) {
        r->err = rec_errorf(REC_ENOMEM, "out of memory widening a %s frame's %lld rows", r->what, (long long)n);
        return 0;
    }
    room->p = p, room->cap = want;
    return 1;
}

void rec__net_get_batch(rbuf *rp, int32_t n_dense, int32_t n_sparse, const int64_t *table_rows, int64_t all_rows,
                        const char *whose, rec_batch *b, rec_jagged *sparse, rec_net_room *room) {
    rbuf r = *rp;
    memset(b, 0, sizeof *b);
    const int64_t n = get_i64(&r, "the row count");
    const uint32_t dn = get_u32(&r, "the dense width"), F = get_u32(&r, "the feature count");
    if (!r.err && (n < 0 || n > REC_NET_MAX_ROWS))
        r.err = rec_errorf(REC_EFORMAT, "%s frame: %lld rows (at most %lld)", r.what, (long long)n,
                           (long long)REC_NET_MAX_ROWS);
    if (!r.err && (dn != (uint32_t)n_dense || F != (uint32_t)n_sparse))
        r.err = rec_errorf(REC_EFORMAT, "%s frame: %u dense values and %u sparse features per row, and %s %d and %d (a "
                           "peer of another job?)", r.what, dn, F, whose, (int)n_dense, (int)n_sparse);
    if (r.err) {
        *rp = r;
        return;
    }
    b->n = b->cap = n;
    b->n_dense = n_dense;
    b->n_sparse = n_sparse;
    b->sparse = sparse;
    b->label = (float *)take(&r, bytes_of(n, 4), "the labels");
    skip8(&r);
    b->dense = (float *)take(&r, bytes_of(n, 4 * (size_t)dn), "the dense values");
    skip8(&r);
    /* every feature's header and arrays first, kept at the head of the room; then the room
     * the narrow ones widen into, behind them */
    const size_t head = ((size_t)F * sizeof(wire_feature) + 7) / 8 * 8;
    size_t want = head;
    if (!room_reserve(room, want, &r, n)) {
        *rp = r;
        return;
    }
    for (uint32_t f = 0; !r.err && f < F; f++) {
        wire_feature *x = (wire_feature *)room->p + f;
        *x = take_feature(&r, n, f);
        want += room_bytes(x, n);
    }
    if (r.err || !room_reserve(room, want, &r, n)) {
        *rp = r;
        return;
    }
    size_t used = head; /* bytes of room taken by the features before */
    for (uint32_t f = 0; !r.err && f < F; f++) {
        rec_jagged *j = &sparse[f];
        memset(j, 0, sizeof *j);
        const wire_feature x = ((const wire_feature *)room->p)[f];
        j->wide = x.form == ID64;
        j->nnz_cap = x.nnz;
        j->weights = (float *)x.weights;
        if (x.flags & HAS_LENGTHS) {
            j->offsets = (int64_t *)((uint8_t *)room->p + used);
            used += (size_t)(n + 1) * 8;
            j->offsets[0] = 0;
            for (int64_t i = 0; i < n; i++) j->offsets[i + 1] = j->offsets[i] + x.offsets[i];
        } else {
            j->offsets = (int64_t *)x.offsets;
        }
        if (x.form == ID16 && x.nnz > 0) {
            j->ids32 = (int32_t *)((uint8_t *)room->p + used);
            used += ((size_t)x.nnz * 4 + 7) / 8 * 8;
            const uint16_t *narrow = (const uint16_t *)x.ids; /* 8-aligned in the frame */
            for (int64_t k = 0; k < x.nnz; k++) j->ids32[k] = narrow[k];
        } else {
            j->ids = (void *)x.ids;
        }
        if (j->offsets[0] != 0 || j->offsets[n] != x.nnz) {
            r.err = rec_errorf(REC_EFORMAT, "%s frame: feature %u: offsets run from %lld to %lld over %lld ids", r.what, f,
                               (long long)j->offsets[0], (long long)j->offsets[n], (long long)x.nnz);
            break;
        }
        for (int64_t i = 0; i < n; i++)
            if (j->offsets[i + 1] < j->offsets[i]) {
                r.err = rec_errorf(REC_EFORMAT, "%s frame: feature %u: offsets decrease at row %lld", r.what, f, (long long)i);
                break;
            }
        const int64_t rows = table_rows ? table_rows[f] : all_rows;
        for (int64_t k = 0; !r.err && k < x.nnz; k++) {
            const int64_t id = rec_jagged_id(j, k);
            if (id < 0 || id >= rows)
                r.err = rec_errorf(REC_EFORMAT, "%s frame: feature %u: id %lld outside its table of %lld rows", r.what, f,
                                   (long long)id, (long long)rows);
        }
    }
    *rp = r;
}


/* ---- ERROR -------------------------------------------------------------------------------- */

void rec_net_error_encode(rec_wbuf *w, rec_status s, const char *msg) {
    put_u32(w, (uint32_t)s);
    put_str(w, msg);
}

rec_status rec_net_error_decode(const uint8_t *body, size_t len, rec_status *s, char *msg, size_t cap) {
    rbuf r = body_reader(body, len, "ERROR");
    const uint32_t code = get_u32(&r, "the status");
    char *m = get_str(&r, 1 << 16, "the message");
    *s = code >= 1 && code <= REC_ESTOPPED ? (rec_status)code : REC_EIO;
    snprintf(msg, cap, "%s", m ? m : "");
    free(m);
    return finish(&r);
}
