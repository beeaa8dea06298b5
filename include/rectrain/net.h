/* rectrain — the wire format of rectrain's services (DESIGN.md src/net/): versioned,
 * size-bounded, validated frames, one per ZeroMQ message. This header is the codec alone (no
 * sockets), so that it can be tested and fuzzed on bytes.
 *
 * A frame is a 32-byte header and a body, every integer little-endian:
 *
 *   u32 magic "RTNF" | u16 version | u16 type | u64 job | u64 seq | u32 body bytes | u32 zero
 *
 * `job` names the preprocessing job a request belongs to (the key of its REC_MSG_JOB), or to an
 * embedding server the trainers' run (drawn at their start: a server serves the run of the
 * last EMB_HELLO alone), `seq` the piece, step (or ping) it answers. The body's length must be exactly the rest of the
 * message and at most REC_NET_MAX_BODY. Bodies are sequences of fixed-size fields and
 * length-prefixed byte strings; arrays inside them start 8-byte aligned (relative to the
 * frame), so that a batch is read in place from the message buffer. Every decoder checks
 * every length against what is left, every count against its bound and every id against its
 * table before anything uses it, and fails with REC_EFORMAT naming the frame type and field.
 */
#ifndef RECTRAIN_NET_H
#define RECTRAIN_NET_H

#include <stddef.h>
#include <stdint.h>

#include "rectrain/batch.h"
#include "rectrain/io.h"
#include "rectrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define REC_NET_MAGIC 0x464e5452u /* "RTNF" */
#define REC_NET_VERSION 4 /* 2: a batch's ids and row lengths in their narrowest form; 3: EMB_HELLO's
                           * first-order tables; 4: EMB_HELLO's table precision (bf16 tables and
                           * their rounding), the rows' values of bf16 tables as bf16 bits in
                           * EMB_ROWS and EMB_PUT */
#define REC_NET_HEAD 32
/* The largest body accepted: a batch of 64Ki Criteo rows with 26 multi-hot lists of ~100 ids
 * is ~70 MB; a piece of raw text sent by the trainer (p'1) is a few MB. */
#define REC_NET_MAX_BODY ((size_t)256 << 20)
/* Rows in one piece or batch frame, and sparse features: bounds of the decoders. */
#define REC_NET_MAX_ROWS ((int64_t)1 << 24)
#define REC_NET_MAX_FEATURES 4096

typedef enum rec_msg_type {
    REC_MSG_JOB = 1,   /* trainer -> worker: the job (spec, vocabularies, files, TSV options) */
    REC_MSG_JOB_OK,    /* worker -> trainer: the job is ready (empty body) */
    REC_MSG_PIECE,     /* trainer -> worker: preprocess these lines (read them, or here they are) */
    REC_MSG_RESULT,    /* worker -> trainer: a piece's rows, as a batch */
    REC_MSG_ERROR,     /* either way: the request failed (status + message) */
    REC_MSG_NOJOB,     /* worker -> trainer: unknown job (a restarted worker): send JOB again */
    REC_MSG_PING,      /* trainer -> worker: are you there (empty body) */
    REC_MSG_PONG,      /* worker -> trainer */
    /* the lookahead cache (cache.h) */
    REC_MSG_EMB_HELLO, /* trainer -> embedding server: the tables (rec_net_emb_hello) */
    REC_MSG_EMB_OK,    /* server -> trainer: done; to HELLO: its state (rec_net_emb_state) */
    REC_MSG_EMB_GET,   /* trainer -> server: rows to read (rec_net_rows, no values) */
    REC_MSG_EMB_ROWS,  /* server -> trainer: their values and optimizer state */
    REC_MSG_EMB_PUT,   /* trainer -> server: rows to write back, with values and state */
    REC_MSG_EMB_PUT_OK,/* server -> trainer (empty body) */
    REC_MSG_CACHE_HELLO, /* trainer -> oracle: its rank, the trainers' count, the first batch */
    REC_MSG_CACHE_INFO,  /* oracle -> trainer: the job (rec_net_cache_info) */
    REC_MSG_CACHE_NEXT,  /* trainer -> oracle: send batch `seq` (empty body) */
    REC_MSG_CACHE_STEP,  /* oracle -> trainer: batch `seq` and its cache plan; seq -1: the final flush */
    REC_MSG_EMB_COMMIT,  /* trainer -> server: step `seq` is whole (server 0: with the dense state) */
    REC_MSG_EMB_ROLLBACK,/* trainer -> server: undo every write after step `seq` */
    REC_MSG_EMB_DENSE_GET,/* trainer -> server: the dense state of the last commit */
    REC_MSG_EMB_DENSE,   /* server -> trainer: that state (f32 array), `seq` its step */
    REC_MSG_EMB_RESTORE, /* trainer -> server: load the snapshot of step `seq` (--ckpt) */
    REC_MSG_COUNT
} rec_msg_type;

const char *rec_msg_name(int type);  /* "JOB", ...; "unknown" */

/* Checks an endpoint's text before ZeroMQ sees it (zmq_connect takes tcp://h:70000 and the
 * peer then never answers): tcp://HOST:PORT with a HOST and a PORT in 1..65535, or
 * ipc://PATH. REC_EINVAL with a message that names the endpoint and what is wrong. */
rec_status rec_endpoint_check(const char *ep);

/* ---- CurveZMQ: authenticated, encrypted connections (src/net/curve.c; docs/security.md) ----
 * Every service and client takes a key directory (`--keys DIR`), made by rec_keygen:
 *   DIR/self.key     this process's key pair, ZeroMQ's secret certificate form (mode 0600)
 *   DIR/self.pub     its public half (public certificate): the file to hand to peers
 *   DIR/server.pub   a client's: the public key of the services it connects to
 *   DIR/allow/N.pub  a service's: the public keys of the clients it lets in (its allow-list,
 *                    checked by a ZAP handler on every connection)
 * A certificate may say `expires = "YYYY-MM-DDTHH:MM:SSZ"` (keygen --days): an expired one is
 * refused when loaded, and an expired allow-list key when its peer connects. Without keys a
 * service or client speaks plain text, on loopback (or ipc://) only unless `insecure`. */
typedef struct rec_net_launch rec_net_launch;
typedef struct rec_net_secure {
    const char *keys;        /* the key directory: CURVE on every socket; NULL: plain text */
    int insecure;            /* plain text allowed on an endpoint other than loopback */
    const rec_net_launch *launch; /* a process of a job launched across hosts: its keys (below) */
} rec_net_secure;

/* The keys of a job that `rectrain cluster` launched across hosts (docs/deploy.md), in place of
 * a key directory: each process made its pair in memory at start, and the public halves were
 * exchanged through the launch. A service lets in the job's processes (every peer's key) and
 * binds its pre-bound listening socket; a client knows each service's key by its endpoint. The
 * secret half never leaves its process. */
typedef struct rec_net_peer {
    char ep[256];            /* its service's endpoint; "" for a trainer */
    char pub[41];            /* its public key, Z85 */
    char what[64];           /* "embedding server 0 on 10.0.0.1": the allow-list's name */
} rec_net_peer;
struct rec_net_launch {
    char pub[41], sec[41];   /* this process's pair, Z85 */
    char listen[256];        /* its service's endpoint ("" for none) */
    int listen_fd;           /* the socket bound to it and listening, which ZeroMQ takes */
    int n_peers;
    const rec_net_peer *peers; /* every process of the job (this one too) */
};

/* A new CurveZMQ key pair in memory (Z85). REC_EUNSUPPORTED without CURVE in libzmq. */
rec_status rec_net_keypair(char pub[41], char sec[41]);
/* This host's IPv4 address inside `network` ("10.1.0.0/16"), or, with network NULL or "",
 * its first up, non-loopback IPv4 address (127.0.0.1 when it has none). REC_EINVAL naming the
 * network and the addresses it has when none is inside it. */
rec_status rec_net_host_address(const char *network, char addr[64]);
/* A TCP socket bound to addr on a port the kernel picks, listening: *fd and its endpoint
 * "tcp://ADDR:PORT". REC_EIO with the cause. */
rec_status rec_net_listen_any(const char *addr, int *fd, char ep[256]);

/* Writes a new key pair into dir (made, with dir/allow/, when missing): self.key (mode 0600)
 * and self.pub; days > 0: both expire that many days from now. REC_EINVAL when dir/self.key
 * exists (a key is never replaced: peers trust its public half), REC_EIO naming the file. */
rec_status rec_keygen(const char *dir, int days);
/* Adds the public key of certificate `cert` (a .pub, or a .key whose public half is taken) to
 * dir: as dir/server.pub when name is NULL (the services a client reaches), else as
 * dir/allow/NAME.pub (a client a service lets in). The certificate is checked as a load would. */
rec_status rec_keys_trust(const char *dir, const char *cert, const char *name);
/* 1 when ep is on this machine only: tcp:// on 127.0.0.0/8, [::1], localhost, or ipc://. */
int rec_endpoint_is_local(const char *ep);

typedef struct rec_frame_head {
    uint16_t version;
    uint16_t type;
    uint64_t job;
    uint64_t seq;
    uint32_t body;     /* body bytes */
} rec_frame_head;

/* A growable output buffer; the first failed allocation sticks (err) and later puts do nothing. */
typedef struct rec_wbuf {
    uint8_t *p;
    size_t len, cap;
    rec_status err;
} rec_wbuf;

void rec_wbuf_free(rec_wbuf *w);
/* n bytes appended to w, uninitialised, for the caller to fill in place (NULL after a failed
 * allocation, which sticks in w->err). */
void *rec_wbuf_grab(rec_wbuf *w, size_t n);
/* Starts a frame: len = 0, header written with body 0 (rec_frame_end fills it in). */
void rec_frame_begin(rec_wbuf *w, int type, uint64_t job, uint64_t seq);
/* Finishes the frame: the body's length into its header. REC_ENOMEM from any put, or
 * REC_EINVAL when the body is over REC_NET_MAX_BODY. */
rec_status rec_frame_end(rec_wbuf *w);

/* Checks the header of msg[0..len) (magic, version, type, reserved, body length == len - 32,
 * at most REC_NET_MAX_BODY) and fills h. `from` names the sender in the message. */
rec_status rec_frame_head_decode(const void *msg, size_t len, const char *from, rec_frame_head *h);

/* ---- bodies ---- */

/* REC_MSG_JOB: what a worker needs to preprocess a job's pieces as the trainer would. */
typedef struct rec_net_job {
    char *spec;               /* the prep spec's JSON text (NUL-terminated) */
    char *spec_origin;        /* its path on the trainer, for messages */
    char *vocab_from;         /* "" or the .rshard whose vocabularies the spec uses */
    uint64_t vocab_digest;    /* a hash of their ids on the trainer (0 without) */
    rec_tsv_opts tsv;         /* has_label resolved (0 or 1) */
    int n_parts;              /* the data files, read by the worker at p'2/p'3 */
    char **parts;
    uint64_t *part_bytes;     /* their sizes on the trainer (a worker's copy must match) */
} rec_net_job;

void rec_net_job_encode(rec_wbuf *w, const rec_net_job *j);
/* Decodes into owned copies (free with rec_net_job_free, also after a failure). */
rec_status rec_net_job_decode(const uint8_t *body, size_t len, rec_net_job *j);
void rec_net_job_free(rec_net_job *j);
/* The job key: a 64-bit hash of every field of the job. */
uint64_t rec_net_job_key(const rec_net_job *j);

/* REC_MSG_PIECE: whole lines [first_line, first_line + n_lines) of file `part`, bytes
 * [offset, offset + len) of it; with text (p'1) the bytes come in the frame. */
typedef struct rec_net_piece {
    uint32_t part;
    uint64_t offset, len;
    int64_t first_line, n_lines;
    const char *text;         /* NULL: the worker reads the file; else len bytes in the frame */
} rec_net_piece;

void rec_net_piece_encode(rec_wbuf *w, const rec_net_piece *p);
/* text points into body. Checks len <= REC_NET_MAX_BODY, n_lines in [1, REC_NET_MAX_ROWS]
 * and, with text, that it is all there. */
rec_status rec_net_piece_decode(const uint8_t *body, size_t len, rec_net_piece *p);

/* Where a decoder widens what travelled narrow (a batch's row lengths into offsets, 16-bit ids
 * into 32-bit): grown as needed and reused; a view decoded with it points into it until the
 * room's next decode. Zero-initialise; free with rec_net_room_free. */
typedef struct rec_net_room {
    void *p;
    size_t cap;
} rec_net_room;
void rec_net_room_free(rec_net_room *room);

/* REC_MSG_RESULT: the piece's rows (bad rows skipped in SKIP mode: `bad` of them) as a batch.
 * The encoded batch: n, Dn, F, labels, dense rows, then per feature its id form (32-, 64- or
 * 16-bit), its flags (weights; row lengths as bytes instead of offsets), nnz, the offsets (n+1)
 * or lengths (n), the ids and the weights; each feature in the narrowest form its ids and
 * lengths fit. */
void rec_net_result_encode(rec_wbuf *w, int64_t bad, const rec_batch *b);
/* A view of the batch in place in body (which must be 8-byte aligned and outlive the view):
 * b's arrays point into it or into room (b->sparse into `sparse`, F entries the caller
 * provides). The batch must have the job's Dn and F and table_rows[f] > every id of feature f;
 * offsets start at 0, never decrease and end at nnz. */
rec_status rec_net_result_decode(const uint8_t *body, size_t len, int32_t n_dense, int32_t n_sparse,
                                 const int64_t *table_rows, int64_t *bad, rec_batch *b, rec_jagged *sparse,
                                 rec_net_room *room);

/* REC_MSG_ERROR: a status and its message. */
void rec_net_error_encode(rec_wbuf *w, rec_status s, const char *msg);
rec_status rec_net_error_decode(const uint8_t *body, size_t len, rec_status *s, char *msg, size_t cap);

/* ---- the lookahead cache's bodies (frame_cache.c) ---- */
struct rec_centry;
struct rec_cmove;

/* REC_MSG_EMB_HELLO: the tables a trainer trains, so that a fresh server makes its share of
 * them as rec_embed_init would, and a running one checks they are the same. */
typedef struct rec_net_emb_hello {
    uint64_t digest;          /* of everything below: the key of the tables */
    int32_t shard, shards;    /* this server holds the rows r with r mod shards == shard */
    int32_t F, E;
    int32_t opt;              /* rec_sparse_opt_kind */
    float init_acc;
    uint64_t seed;            /* the embedding seed (rec_embed_config.seed) */
    const int64_t *rows;      /* (F) in place */
    int32_t durable;          /* keep each write undoable until its step is committed (not in
                                 the digest: the tables are the same) */
    int32_t lin;              /* 1: each row carries its first-order value (DeepFM, Wide&Deep: a
                                 dim-1 table beside each table, model.c's lin.f), with its state */
    uint64_t lin_seed;        /* their seed (the model's first-order seed; 0 without) */
    int32_t bf16;             /* 1: the tables are stored in bf16 (embed.h "Table storage"): the
                                 server keeps their bits and rows travel as them */
    int32_t rounding;         /* bf16: the trainers' rec_embed_rounding of updates (0 without) */
} rec_net_emb_hello;

void rec_net_emb_hello_encode(rec_wbuf *w, const rec_net_emb_hello *h);
rec_status rec_net_emb_hello_decode(const uint8_t *body, size_t len, rec_net_emb_hello *h);
uint64_t rec_net_emb_hello_digest(const rec_net_emb_hello *h);

/* REC_MSG_EMB_GET / _ROWS / _PUT: n rows as (slot, table, row) entries (GET, PUT), then with
 * values (ROWS, PUT) n (E + lin) values (a row's E values, then with first-order tables its
 * first-order value: floats, or of bf16 tables their bf16 bits, zero-padded to 8 bytes) and n S
 * floats of optimizer state (the row's: E, 1 or 0 floats, then with first-order tables the
 * first-order value's: 1 or 0). Entries are checked against the tables (table < F, row <
 * rows[f], row mod shards == shard). */
typedef struct rec_net_rows {
    int64_t n;
    const struct rec_centry *e;   /* (n) GET, PUT; NULL in ROWS */
    const float *values;          /* (n, E) ROWS, PUT of fp32 tables */
    const float *state;           /* (n, S) */
    const uint16_t *values16;     /* (n, E) ROWS, PUT of bf16 tables (values NULL) */
} rec_net_rows;

/* Bytes of n rows' V values on the wire: fp32, or bf16 bits padded to 8 (b16). */
static inline size_t rec_net_rows_value_bytes(int64_t n, int V, int b16) {
    return b16 ? ((size_t)n * (size_t)V * 2 + 7) / 8 * 8 : (size_t)n * (size_t)V * 4;
}

void rec_net_rows_encode(rec_wbuf *w, const rec_net_rows *r, int with_entries, int E, int S);
rec_status rec_net_rows_decode(const uint8_t *body, size_t len, const char *what, int with_entries, int with_values,
                               const rec_net_emb_hello *t, int S, rec_net_rows *r);

/* REC_MSG_CACHE_HELLO: trainer `rank` of `ranks` starts (or, restarted, resumes) at batch `start`. */
void rec_net_cache_hello_encode(rec_wbuf *w, int rank, int ranks, int64_t start);
rec_status rec_net_cache_hello_decode(const uint8_t *body, size_t len, int *rank, int *ranks, int64_t *start);

/* EMB_OK's body answering EMB_HELLO: what the server holds. */
typedef struct rec_net_emb_state {
    int64_t committed;       /* the last step committed (EMB_COMMIT), -1 none */
    int32_t written;         /* 1: rows were written since the tables were made */
    int32_t durable;         /* 1: writes are undoable (the HELLO asked for it) */
    int64_t snap[2];         /* the steps of its snapshots, newest first (-1 none) */
    int32_t restored;        /* 1: restarted from a snapshot (the job must go back to its step) */
} rec_net_emb_state;
void rec_net_emb_state_encode(rec_wbuf *w, const rec_net_emb_state *s);
rec_status rec_net_emb_state_decode(const uint8_t *body, size_t len, rec_net_emb_state *s);
/* EMB_COMMIT and EMB_DENSE: n floats (n may be 0: a commit without dense state). */
void rec_net_floats_encode(rec_wbuf *w, const float *v, int64_t n);
rec_status rec_net_floats_decode(const uint8_t *body, size_t len, const char *what, const float **v, int64_t *n);

/* REC_MSG_CACHE_INFO: what the trainer needs before the first batch. */
typedef struct rec_net_cache_info {
    int32_t F, n_dense;
    int32_t policy, lookahead, depth;
    int32_t trainers, rank;    /* the job's trainers (<= 64), and this one's rank */
    int64_t capacity;          /* slots of the trainer's cache */
    int64_t batch;             /* rows per global batch (the last may be shorter) */
    int64_t batches;           /* batches of the whole job (every epoch) */
    const int64_t *rows;       /* (F) in place */
    int32_t table0, tables;    /* the oracle plans tables [table0, table0 + F) of the job's `tables`
                                * (one of several partitioned by table); encoded tables 0: F */
    int32_t shuffled;          /* 1: the rows in rec_shuffle's order (REC_SHUFFLE_* sizes), 0: file
                                  order; the trainer's checkpoint records it */
} rec_net_cache_info;

void rec_net_cache_info_encode(rec_wbuf *w, const rec_net_cache_info *c);
rec_status rec_net_cache_info_decode(const uint8_t *body, size_t len, rec_net_cache_info *c);

/* REC_MSG_CACHE_STEP: a trainer's part of a batch's plan (cache_impl.h, LRPP) and its slice of
 * the batch with ids replaced by cache slots (so every id is checked against the capacity). */
typedef struct rec_net_cache_step {
    int64_t n_fetch, n_evict, n_pre_send, n_pre_recv, n_shared, n_apply, n_post_send, n_post_recv;
    const struct rec_centry *fetch, *evict;
    const struct rec_cmove *pre_send, *pre_recv, *post_send, *post_recv;
    const int32_t *shared, *apply;
    rec_batch batch;           /* views into the body (n = 0 for the flush) */
} rec_net_cache_step;

/* Encodes s, its batch as given (a slice, ids being slots). */
void rec_net_cache_step_encode(rec_wbuf *w, const rec_net_cache_step *s);
/* sparse: F entries the caller provides for the batch's features, room where narrow ones are
 * widened (rec_net_room). Moves name another trainer of c's; slots are below the capacity;
 * entries are in the tables. */
rec_status rec_net_cache_step_decode(const uint8_t *body, size_t len, const rec_net_cache_info *c, rec_net_cache_step *s,
                                     rec_jagged *sparse, rec_net_room *room);

#ifdef __cplusplus
}
#endif
#endif
