/* Checkpoints (save, inspect, load) and the .npy export of a model's parameters.
 *
 * File layout (all integers little-endian; offsets in bytes from the start of the file):
 *
 *   prefix     char[8] "RCKPT001" | u32 version (5) | u32 H, the header's bytes
 *   header     (H bytes, at 16)
 *                meta      i64 step | i64 epoch | i64 row | i64 rows_seen | u64 seed |
 *                          i64 train_rows | u64 data_digest |
 *                          i64 shuffle_block_rows | i64 shuffle_buffer_blocks |
 *                          i64 shards | u64 shard_id | i64 shard |
 *                          f64 epoch_loss_sum | i64 epoch_loss_steps |
 *                          f64 record_loss_sum | i64 record_loss_steps
 *                          (version 1 stops after seed, 2 after data_digest, 3 after
 *                          shuffle_buffer_blocks, 4 after shard)
 *                config    u32 length | the canonical config JSON (rec_model_config_to_json)
 *                tensors   u32 count | count directory entries of CKPT_ENTRY bytes:
 *                            char name[96] (NUL-padded) | u32 role | u32 ndim |
 *                            i64 shape[2] (shape[1] = 0 when ndim = 1) | u64 data offset |
 *                            u64 data bytes | u32 CRC-32 of the data | u32 0
 *   u32        CRC-32 of bytes [0, 16 + H): prefix and header
 *   data       each tensor's float32 values in C order, at a multiple of 64, zero padding between
 *   trailer    char[8] "RCKPTEND" | u64 size of the whole file
 *
 * The header CRC covers everything that locates and describes the data, each tensor's CRC its
 * own bytes, and the trailer (which records the file's size) catches truncation before any
 * offset is trusted. Padding is not checksummed: nothing reads it.
 *
 * Saving streams every tensor from the model's memory straight to PATH.tmp with write(2) in
 * large chunks, taking each chunk's CRC just before it is written (a 2.2 GB table is never
 * copied), then patches the header — whose per-tensor CRCs are only known at the end — with
 * one pwrite, fsyncs, renames over PATH and fsyncs the directory: a crash leaves either the old
 * checkpoint or the new one. Loading maps the file read-only and checks everything (structure,
 * config, names, roles, shapes, every CRC) before it copies the first byte into the model, so a
 * refused file leaves the model exactly as it was.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rectrain/ckpt.h"
#include "rectrain/core.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoint tensor data is written and read in host order, which must be little-endian"
#endif

#define CKPT_MAGIC REC_CKPT_MAGIC
#define CKPT_END_MAGIC "RCKPTEND"

enum {
    CKPT_VERSION = 5,         /* written; versions 1 (no data identity), 2 (no order), 3 (no shards) and 4 (no
                                 running losses) are read */
    CKPT_ALIGN = 64,

    /* prefix, at file offset 0 */
    CKPT_P_MAGIC = 0,         /* char[8] */
    CKPT_P_VERSION = 8,       /* u32 */
    CKPT_P_HEADER_BYTES = 12, /* u32 H */
    CKPT_PREFIX = 16,

    /* header, at file offset CKPT_PREFIX */
    CKPT_M_STEP = 0,          /* i64 */
    CKPT_M_EPOCH = 8,         /* i64 */
    CKPT_M_ROW = 16,          /* i64 */
    CKPT_M_ROWS_SEEN = 24,    /* i64 */
    CKPT_M_SEED = 32,         /* u64 */
    CKPT_M_TRAIN_ROWS = 40,   /* i64, version 2 */
    CKPT_M_DATA_DIGEST = 48,  /* u64, version 2 */
    CKPT_M_SHUFFLE_BLOCK = 56,   /* i64, version 3 */
    CKPT_M_SHUFFLE_BUFFER = 64,  /* i64, version 3 */
    CKPT_M_SHARDS = 72,       /* i64, version 4 */
    CKPT_M_SHARD_ID = 80,     /* u64, version 4 */
    CKPT_M_SHARD = 88,        /* i64, version 4 */
    CKPT_M_EPOCH_LOSS = 96,   /* f64, version 5 */
    CKPT_M_EPOCH_STEPS = 104, /* i64, version 5 */
    CKPT_M_RECORD_LOSS = 112, /* f64, version 5 */
    CKPT_M_RECORD_STEPS = 120,/* i64, version 5 */
    CKPT_META = 128,          /* then u32 config length, config, u32 count, directory */
    CKPT_META_V4 = 96,
    CKPT_META_V3 = 72,
    CKPT_META_V2 = 56,
    CKPT_META_V1 = 40,

    /* directory entry */
    CKPT_NAME = 96,
    CKPT_E_NAME = 0,          /* char[96], NUL-terminated and NUL-padded */
    CKPT_E_ROLE = 96,         /* u32 rec_tensor_role */
    CKPT_E_NDIM = 100,        /* u32 1 or 2 */
    CKPT_E_SHAPE = 104,       /* i64[2] */
    CKPT_E_OFFSET = 120,      /* u64, multiple of 64 */
    CKPT_E_BYTES = 128,       /* u64 = 4 * numel */
    CKPT_E_CRC = 136,         /* u32; 140..143 zero */
    CKPT_ENTRY = 144,

    CKPT_HEADER_CRC = 4,      /* u32 after the header */
    CKPT_TRAILER = 16,        /* char[8] end magic, u64 file size */

    /* Sanity bounds the reader enforces before any size arithmetic on what the file says. */
    CKPT_MAX_CONFIG = 1 << 24,
    CKPT_MAX_TENSORS = 1 << 16,
};

/* One dimension of a tensor may not exceed this (so 4 * numel cannot overflow 64 bits). */
#define CKPT_MAX_DIM ((int64_t)1 << 40)
/* Bytes handed to one write(2) / rec_crc32 call while streaming a tensor. */
#define CKPT_CHUNK ((size_t)8 << 20)

static inline void put_u32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void put_u64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static inline void put_i64(uint8_t *p, int64_t v) { memcpy(p, &v, 8); }
static inline uint32_t get_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t get_u64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static inline int64_t get_i64(const uint8_t *p) { int64_t v; memcpy(&v, p, 8); return v; }
static inline void put_f64(uint8_t *p, double v) { memcpy(p, &v, 8); }
static inline double get_f64(const uint8_t *p) { double v; memcpy(&v, p, 8); return v; }

static inline uint64_t pad64(uint64_t x) { return (x + CKPT_ALIGN - 1) & ~(uint64_t)(CKPT_ALIGN - 1); }

const char *const rec_ckpt_files[] = {"model.rckpt", "model.*", NULL};

rec_status rec_ckpt_check_absent(const char *dir, const char *how) {
    char ckpt[1100];
    rec_ckpt_path(dir, ckpt, sizeof ckpt);
    if (access(ckpt, F_OK) != 0) return REC_OK;
    rec_model_config c;
    rec_ckpt_meta meta;
    char what[96] = "";
    if (rec_ckpt_read_config(ckpt, &c, &meta) == REC_OK) {
        snprintf(what, sizeof what, " (model %s at step %lld)", c.name, (long long)meta.step);
        rec_model_config_free(&c);
    }
    return rec_errorf(REC_EINVAL, "%s exists%s: %s (or give --ckpt another directory)", ckpt, what, how);
}

void rec_ckpt_path(const char *dir, char *buf, size_t cap) {
    if (!buf || cap == 0) return;
    if (!dir || !*dir) dir = ".";
    size_t n = strlen(dir);
    while (n > 1 && dir[n - 1] == '/') n--; /* "out/" -> "out/model.rckpt", not "out//..." */
    if (n == 1 && dir[0] == '/') snprintf(buf, cap, "/model.rckpt");
    else snprintf(buf, cap, "%.*s/model.rckpt", (int)n, dir);
}

/* "(R, E)" or "(N)" for messages. */
static const char *shape_str(char *buf, size_t cap, int ndim, const int64_t *shape) {
    if (ndim == 1) snprintf(buf, cap, "(%" PRId64 ")", shape[0]);
    else snprintf(buf, cap, "(%" PRId64 ", %" PRId64 ")", shape[0], shape[1]);
    return buf;
}

static const char *role_str(uint32_t role) {
    return role == REC_TENSOR_PARAM ? "parameter" : role == REC_TENSOR_OPT_STATE ? "optimizer state" : "unknown";
}

/* ---- saving ------------------------------------------------------------------------------ */

/* Writes all n bytes at the descriptor's position (write(2) may write less than asked, and
 * Linux caps one call near 2 GiB). On failure records REC_EIO naming `tmp` and errno. */
static rec_status write_all(int fd, const char *tmp, const void *p, size_t n) {
    const uint8_t *b = p;
    while (n > 0) {
        size_t k = n < CKPT_CHUNK ? n : CKPT_CHUNK;
        ssize_t w = write(fd, b, k);
        if (w < 0) {
            if (errno == EINTR) continue;
            return rec_errorf(REC_EIO, "%s: cannot write: %s; check free disk space", tmp, strerror(errno));
        }
        if (w == 0) return rec_errorf(REC_EIO, "%s: cannot write: no progress (disk full?)", tmp);
        b += w;
        n -= (size_t)w;
    }
    return REC_OK;
}

/* Zero bytes from `pos` up to `to` (padding before a 64-byte aligned section). */
static rec_status write_zeros(int fd, const char *tmp, uint64_t pos, uint64_t to) {
    static const uint8_t zeros[CKPT_ALIGN];
    while (pos < to) {
        size_t k = to - pos < sizeof zeros ? (size_t)(to - pos) : sizeof zeros;
        REC_TRY(write_all(fd, tmp, zeros, k));
        pos += k;
    }
    return REC_OK;
}

/* Streams one tensor's bytes to the file and returns their CRC in *crc: each chunk is
 * checksummed right before it is written, while it is in cache, and nothing is copied. A bf16
 * tensor (t->data16) is widened to its fp32 values a chunk at a time. */
static rec_status write_tensor(int fd, const char *tmp, const rec_tensor *t, uint64_t bytes, uint32_t *crc) {
    const uint8_t *p = (const uint8_t *)t->data;
    float wide[4096];
    const size_t chunk = t->data16 ? sizeof wide : CKPT_CHUNK;
    uint32_t c = 0;
    for (uint64_t done = 0; done < bytes;) {
        const size_t k = bytes - done < chunk ? (size_t)(bytes - done) : chunk;
        const uint8_t *q = p + done;
        if (t->data16) {
            for (size_t i = 0; i < k / sizeof(float); i++) wide[i] = rec_bf16_to_float(t->data16[done / sizeof(float) + i]);
            q = (const uint8_t *)wide;
        }
        c = rec_crc32(c, q, k);
        REC_TRY(write_all(fd, tmp, q, k));
        done += k;
    }
    *crc = c;
    return REC_OK;
}

/* The training order of a meta is file order (both sizes 0) or one rec_loader_open_order
 * accepts (K, W >= 1, K*W <= 2^31). */
static int order_ok(const rec_ckpt_meta *m) {
    const int64_t k = m->shuffle_block_rows, w = m->shuffle_buffer_blocks;
    if (k == 0 && w == 0) return 1;
    return k >= 1 && w >= 1 && k <= ((int64_t)1 << 31) / w;
}

/* The running losses of a meta: each a finite sum over 0 or more steps, or not recorded (steps
 * -1, sum 0). */
static int losses_ok(const rec_ckpt_meta *m) {
    return m->epoch_loss_steps >= -1 && m->record_loss_steps >= -1 && isfinite(m->epoch_loss_sum) &&
           isfinite(m->record_loss_sum) && (m->epoch_loss_steps >= 0 || m->epoch_loss_sum == 0) &&
           (m->record_loss_steps >= 0 || m->record_loss_sum == 0);
}

/* Fills the prefix, meta, config and directory of a header buffer of CKPT_PREFIX + H +
 * CKPT_HEADER_CRC bytes (zeroed by the caller), with every tensor CRC and the header CRC
 * still 0, and returns the offset where the trailer goes in *end. */
static void build_header(uint8_t *hdr, uint32_t H, const rec_ckpt_meta *meta, int64_t step,
                         const char *json, uint32_t jlen, const rec_tensor *ts, int n, uint64_t *end) {
    memcpy(hdr + CKPT_P_MAGIC, CKPT_MAGIC, 8);
    put_u32(hdr + CKPT_P_VERSION, CKPT_VERSION);
    put_u32(hdr + CKPT_P_HEADER_BYTES, H);
    uint8_t *h = hdr + CKPT_PREFIX;
    put_i64(h + CKPT_M_STEP, step);
    put_i64(h + CKPT_M_EPOCH, meta->epoch);
    put_i64(h + CKPT_M_ROW, meta->row);
    put_i64(h + CKPT_M_ROWS_SEEN, meta->rows_seen);
    put_u64(h + CKPT_M_SEED, meta->seed);
    put_i64(h + CKPT_M_TRAIN_ROWS, meta->train_rows);
    put_u64(h + CKPT_M_DATA_DIGEST, meta->data_digest);
    put_i64(h + CKPT_M_SHUFFLE_BLOCK, meta->shuffle_block_rows);
    put_i64(h + CKPT_M_SHUFFLE_BUFFER, meta->shuffle_buffer_blocks);
    put_i64(h + CKPT_M_SHARDS, meta->shards);
    put_u64(h + CKPT_M_SHARD_ID, meta->shard_id);
    put_i64(h + CKPT_M_SHARD, meta->shard);
    put_f64(h + CKPT_M_EPOCH_LOSS, meta->epoch_loss_sum);
    put_i64(h + CKPT_M_EPOCH_STEPS, meta->epoch_loss_steps);
    put_f64(h + CKPT_M_RECORD_LOSS, meta->record_loss_sum);
    put_i64(h + CKPT_M_RECORD_STEPS, meta->record_loss_steps);
    uint8_t *q = h + CKPT_META;
    put_u32(q, jlen);
    memcpy(q + 4, json, jlen);
    q += 4 + jlen;
    put_u32(q, (uint32_t)n);
    q += 4;
    uint64_t off = pad64((uint64_t)CKPT_PREFIX + H + CKPT_HEADER_CRC);
    for (int i = 0; i < n; i++, q += CKPT_ENTRY) {
        const rec_tensor *t = &ts[i];
        uint64_t bytes = 4 * (uint64_t)rec_tensor_numel(t);
        memcpy(q + CKPT_E_NAME, t->name, strlen(t->name)); /* rest stays NUL */
        put_u32(q + CKPT_E_ROLE, (uint32_t)t->role);
        put_u32(q + CKPT_E_NDIM, (uint32_t)t->ndim);
        put_i64(q + CKPT_E_SHAPE, t->shape[0]);
        put_i64(q + CKPT_E_SHAPE + 8, t->ndim == 2 ? t->shape[1] : 0);
        put_u64(q + CKPT_E_OFFSET, off);
        put_u64(q + CKPT_E_BYTES, bytes);
        off = pad64(off + bytes);
    }
    /* The trailer follows the last tensor's data directly (its padding is not needed). */
    if (n > 0) off = get_u64(q - CKPT_ENTRY + CKPT_E_OFFSET) + get_u64(q - CKPT_ENTRY + CKPT_E_BYTES);
    *end = off;
}

/* Writes the whole checkpoint into the open descriptor of `tmp` (committed by the caller);
 * hdr is the built header, patched here with the tensor CRCs and the header CRC. */
static rec_status write_file(int fd, const char *tmp, uint8_t *hdr, uint32_t H, const rec_tensor *ts,
                             int n, uint64_t end) {
    size_t hbytes = (size_t)CKPT_PREFIX + H + CKPT_HEADER_CRC;
    REC_TRY(write_all(fd, tmp, hdr, hbytes)); /* placeholder: CRCs are patched below */
    uint64_t pos = hbytes;
    uint8_t *dir = hdr + CKPT_PREFIX + H - (size_t)n * CKPT_ENTRY;
    for (int i = 0; i < n; i++) {
        uint8_t *e = dir + (size_t)i * CKPT_ENTRY;
        uint64_t off = get_u64(e + CKPT_E_OFFSET), bytes = get_u64(e + CKPT_E_BYTES);
        uint32_t crc;
        REC_TRY(write_zeros(fd, tmp, pos, off));
        REC_TRY(write_tensor(fd, tmp, &ts[i], bytes, &crc));
        put_u32(e + CKPT_E_CRC, crc);
        pos = off + bytes;
    }
    uint8_t trailer[CKPT_TRAILER];
    memcpy(trailer, CKPT_END_MAGIC, 8);
    put_u64(trailer + 8, end + CKPT_TRAILER);
    REC_TRY(write_all(fd, tmp, trailer, sizeof trailer));

    put_u32(hdr + CKPT_PREFIX + H, rec_crc32(0, hdr, (size_t)CKPT_PREFIX + H));
    for (size_t done = 0; done < hbytes;) {
        ssize_t w = pwrite(fd, hdr + done, hbytes - done, (off_t)done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0)
            return rec_errorf(REC_EIO, "%s: cannot write the header: %s", tmp, w < 0 ? strerror(errno) : "no progress");
        done += (size_t)w;
    }
    return REC_OK;
}

/* Saves the model's config, `meta` and every named tensor to `path` (see the file comment for
 * the layout and the crash-safety argument). meta->step must equal rec_model_steps(m): the
 * loader restores the step count (and so Adam's bias correction and the LR schedule) from it.
 * On any error PATH.tmp is removed, PATH is untouched, and REC_EIO names the file and the
 * system's reason (REC_EINVAL / REC_ENOMEM for bad arguments / memory). */
rec_status rec_ckpt_save(const char *path, const rec_model *m, const rec_ckpt_meta *meta) {
    if (!path || !*path || !m || !meta)
        return rec_errorf(REC_EINVAL, "rec_ckpt_save: path, model and meta are required");
    if (meta->step != rec_model_steps(m))
        return rec_errorf(REC_EINVAL,
                          "%s: meta.step is %" PRId64 " but the model has taken %" PRId64
                          " optimizer steps; pass rec_model_steps(m) so that a resumed run continues the schedule",
                          path, meta->step, rec_model_steps(m));
    const rec_tensor *ts;
    int n = rec_model_tensors(m, &ts);
    return rec_ckpt_save_tensors(path, rec_model_get_config(m), meta, ts, n);
}

rec_status rec_ckpt_save_tensors(const char *path, const rec_model_config *config, const rec_ckpt_meta *meta,
                                 const rec_tensor *ts, int n) {
    if (!path || !*path || !config || !meta || (n > 0 && !ts))
        return rec_errorf(REC_EINVAL, "rec_ckpt_save_tensors: path, config, meta and tensors are required");
    if (meta->epoch < 0 || meta->row < 0 || meta->rows_seen < 0)
        return rec_errorf(REC_EINVAL, "%s: meta has a negative epoch (%" PRId64 "), row (%" PRId64 ") or rows_seen (%" PRId64 ")",
                          path, meta->epoch, meta->row, meta->rows_seen);
    if (!order_ok(meta))
        return rec_errorf(REC_EINVAL, "%s: meta has shuffle blocks of %" PRId64 " rows, %" PRId64 " per buffer: not an order",
                          path, meta->shuffle_block_rows, meta->shuffle_buffer_blocks);
    if (meta->shards < 0 || meta->shard < 0 || meta->shard > meta->shards)
        return rec_errorf(REC_EINVAL, "%s: meta names shard %" PRId64 " of %" PRId64, path, meta->shard, meta->shards);
    if (!losses_ok(meta))
        return rec_errorf(REC_EINVAL, "%s: meta has running losses %g over %" PRId64 " steps and %g over %" PRId64 ": not "
                          "sums of finite losses", path, meta->epoch_loss_sum, meta->epoch_loss_steps, meta->record_loss_sum,
                          meta->record_loss_steps);
    if (n < 0 || n > CKPT_MAX_TENSORS)
        return rec_errorf(REC_EINVAL, "%s: the model has %d tensors; a checkpoint holds at most %d", path, n, CKPT_MAX_TENSORS);
    for (int i = 0; i < n; i++) {
        const rec_tensor *t = &ts[i];
        int bad = strnlen(t->name, CKPT_NAME) >= CKPT_NAME || !t->name[0] || (t->ndim != 1 && t->ndim != 2) ||
                  t->shape[0] < 0 || t->shape[0] > CKPT_MAX_DIM ||
                  (t->ndim == 2 && (t->shape[1] < 0 || t->shape[1] > CKPT_MAX_DIM)) ||
                  (t->role != REC_TENSOR_PARAM && t->role != REC_TENSOR_OPT_STATE) ||
                  (!t->data && !t->data16 && rec_tensor_numel(t) > 0);
        if (bad) return rec_errorf(REC_EINVAL, "%s: model tensor %d (\"%.95s\") has an invalid name, role or shape", path, i, t->name);
    }
    char *json = rec_model_config_to_json(config);
    if (!json) return rec_errorf(REC_ENOMEM, "%s: out of memory for the config JSON", path);
    size_t jlen = strlen(json);
    /* At most 16 MiB of config and 65536 entries: H fits the prefix's u32 field. */
    uint64_t H = (uint64_t)CKPT_META + 4 + jlen + 4 + (uint64_t)n * CKPT_ENTRY;
    if (jlen > CKPT_MAX_CONFIG) {
        free(json);
        return rec_errorf(REC_EINVAL, "%s: the config JSON is %zu bytes, over the limit of %d", path, jlen, CKPT_MAX_CONFIG);
    }
    uint8_t *hdr = NULL;
    rec_status s = rec_alloc((void **)&hdr, CKPT_PREFIX + H + CKPT_HEADER_CRC, "checkpoint header");
    if (s) {
        free(json);
        return s;
    }
    uint64_t end;
    build_header(hdr, (uint32_t)H, meta, meta->step, json, (uint32_t)jlen, ts, n, &end);
    free(json);

    rec_atomic_file f;
    s = rec_atomic_open(&f, path);
    if (!s) {
        s = write_file(f.fd, f.tmp, hdr, (uint32_t)H, ts, n, end);
        if (s) rec_atomic_abort(&f);
        else s = rec_atomic_commit(&f);
    }
    rec_free(hdr);
    return s;
}

/* ---- reading ----------------------------------------------------------------------------- */

typedef struct ckpt_entry {
    char name[CKPT_NAME];
    uint32_t role, ndim;
    int64_t shape[2];
    uint64_t offset, bytes;
    uint32_t crc;
} ckpt_entry;

/* A checkpoint mapped read-only whose structure has been checked: magic, version, trailer and
 * size, header bounds and CRC, the directory's fields, and that every tensor's bytes lie
 * inside the data section. Tensor CRCs are checked by the loader. */
typedef struct ckpt_file {
    const char *path;
    const uint8_t *map;
    size_t size;
    uint32_t version;
    rec_ckpt_meta meta;
    const char *json;       /* not NUL-terminated */
    uint32_t json_len;
    uint32_t n;
    ckpt_entry *ents;       /* (n) */
} ckpt_file;

static void ckpt_close(ckpt_file *f) {
    if (f->map && f->size) munmap((void *)f->map, f->size);
    rec_free(f->ents);
    memset(f, 0, sizeof *f);
}

/* REC_EFORMAT "checkpoint PATH: ..." for a file whose contents are inconsistent. */
#define CKPT_CORRUPT(f, fmt, ...) rec_errorf(REC_EFORMAT, "checkpoint %s: " fmt, (f)->path, ##__VA_ARGS__)

/* Checks everything the layout promises except the tensor CRCs; ents[i] gets the i-th directory
 * entry. The order of the checks decides the message: magic, version, trailer (which catches
 * truncation at any length, as it records the file's size), header bounds, header CRC, then the
 * header's contents. */
static rec_status ckpt_parse(ckpt_file *f) {
    const uint8_t *p = f->map;
    size_t size = f->size;
    const char *path = f->path;
    size_t have = size < 8 ? size : 8;
    if (memcmp(p, CKPT_MAGIC, have) != 0)
        return rec_errorf(REC_EFORMAT, "%s is not a rectrain checkpoint (it does not start with \"" CKPT_MAGIC "\")", path);
    if (size < CKPT_PREFIX)
        return rec_errorf(REC_EFORMAT, "checkpoint %s is truncated: %zu bytes, shorter than the %d-byte prefix; "
                          "it was not written completely, save it again", path, size, CKPT_PREFIX);
    uint32_t version = get_u32(p + CKPT_P_VERSION);
    if (version < 1 || version > CKPT_VERSION)
        return rec_errorf(REC_EFORMAT, "checkpoint %s has format version %u; this build reads versions 1 to %d", path,
                          version, CKPT_VERSION);
    const uint32_t meta_bytes = version == 1   ? CKPT_META_V1
                                : version == 2 ? CKPT_META_V2
                                : version == 3 ? CKPT_META_V3
                                : version == 4 ? CKPT_META_V4
                                               : CKPT_META;
    f->version = version;
    if (size < CKPT_PREFIX + CKPT_TRAILER || memcmp(p + size - CKPT_TRAILER, CKPT_END_MAGIC, 8) != 0)
        return rec_errorf(REC_EFORMAT, "checkpoint %s is truncated or incomplete (%zu bytes, no \"" CKPT_END_MAGIC
                          "\" trailer at the end); it was not written completely, save it again", path, size);
    uint64_t recorded = get_u64(p + size - 8);
    if (recorded != size)
        return rec_errorf(REC_EFORMAT, "checkpoint %s is %zu bytes but its trailer records %" PRIu64 " (truncated or altered)",
                          path, size, recorded);
    uint32_t H = get_u32(p + CKPT_P_HEADER_BYTES);
    uint64_t hend = (uint64_t)CKPT_PREFIX + H + CKPT_HEADER_CRC; /* end of the header CRC */
    if (hend > size - CKPT_TRAILER)
        return CKPT_CORRUPT(f, "the header of %u bytes runs past the end of the %zu-byte file: the file is corrupt", H, size);
    uint32_t stored = get_u32(p + CKPT_PREFIX + H), crc = rec_crc32(0, p, (size_t)CKPT_PREFIX + H);
    if (stored != crc)
        return CKPT_CORRUPT(f, "header CRC-32 mismatch (stored 0x%08x, computed 0x%08x): the file is corrupt", stored, crc);

    /* From here the header's bytes are as written; bounds are still checked, as a writer bug or
     * a crafted file with a recomputed CRC must not make us read outside the mapping. */
    const uint8_t *h = p + CKPT_PREFIX, *q = h + meta_bytes, *hlim = h + H;
    if (H < meta_bytes + 8)
        return CKPT_CORRUPT(f, "header of %u bytes is too short for its fixed fields", H);
    f->meta.step = get_i64(h + CKPT_M_STEP);
    f->meta.epoch = get_i64(h + CKPT_M_EPOCH);
    f->meta.row = get_i64(h + CKPT_M_ROW);
    f->meta.rows_seen = get_i64(h + CKPT_M_ROWS_SEEN);
    f->meta.seed = get_u64(h + CKPT_M_SEED);
    if (version >= 2) {
        f->meta.train_rows = get_i64(h + CKPT_M_TRAIN_ROWS);
        f->meta.data_digest = get_u64(h + CKPT_M_DATA_DIGEST);
    }
    if (version >= 3) {
        f->meta.shuffle_block_rows = get_i64(h + CKPT_M_SHUFFLE_BLOCK);
        f->meta.shuffle_buffer_blocks = get_i64(h + CKPT_M_SHUFFLE_BUFFER);
        if (!order_ok(&f->meta))
            return CKPT_CORRUPT(f, "shuffle blocks of %lld rows, %lld per buffer, in the header: not an order (both 0, "
                                "or both positive and at most 2^31 rows in all)", (long long)f->meta.shuffle_block_rows,
                                (long long)f->meta.shuffle_buffer_blocks);
    }
    if (version >= 4) {
        f->meta.shards = get_i64(h + CKPT_M_SHARDS);
        f->meta.shard_id = get_u64(h + CKPT_M_SHARD_ID);
        f->meta.shard = get_i64(h + CKPT_M_SHARD);
        if (f->meta.shards < 0 || f->meta.shards > (1 << 20) || f->meta.shard < 0 || f->meta.shard > f->meta.shards)
            return CKPT_CORRUPT(f, "shard %lld of %lld in the header: not a sharded save's file", (long long)f->meta.shard,
                                (long long)f->meta.shards);
    }
    f->meta.epoch_loss_steps = f->meta.record_loss_steps = -1; /* before version 5: not recorded */
    if (version >= 5) {
        f->meta.epoch_loss_sum = get_f64(h + CKPT_M_EPOCH_LOSS);
        f->meta.epoch_loss_steps = get_i64(h + CKPT_M_EPOCH_STEPS);
        f->meta.record_loss_sum = get_f64(h + CKPT_M_RECORD_LOSS);
        f->meta.record_loss_steps = get_i64(h + CKPT_M_RECORD_STEPS);
        if (!losses_ok(&f->meta))
            return CKPT_CORRUPT(f, "running losses %g over %lld steps and %g over %lld in the header: not sums of finite "
                                "losses", f->meta.epoch_loss_sum, (long long)f->meta.epoch_loss_steps,
                                f->meta.record_loss_sum, (long long)f->meta.record_loss_steps);
    }
    if (f->meta.step < 0 || f->meta.epoch < 0 || f->meta.row < 0 || f->meta.rows_seen < 0 || f->meta.train_rows < 0)
        return CKPT_CORRUPT(f, "negative step, epoch, row, rows_seen or train_rows in the header");
    f->json_len = get_u32(q);
    if (f->json_len > CKPT_MAX_CONFIG || (uint64_t)(hlim - q) < 8 + (uint64_t)f->json_len)
        return CKPT_CORRUPT(f, "config of %u bytes runs past the header", f->json_len);
    f->json = (const char *)q + 4;
    q += 4 + f->json_len;
    f->n = get_u32(q);
    q += 4;
    if (f->n > CKPT_MAX_TENSORS || (uint64_t)(hlim - q) != (uint64_t)f->n * CKPT_ENTRY)
        return CKPT_CORRUPT(f, "directory of %u tensors does not fill the rest of the %u-byte header", f->n, H);
    REC_TRY(rec_alloc((void **)&f->ents, ((size_t)f->n + 1) * sizeof *f->ents, "checkpoint directory"));
    uint64_t data_lo = pad64(hend), data_hi = size - CKPT_TRAILER;
    for (uint32_t i = 0; i < f->n; i++, q += CKPT_ENTRY) {
        ckpt_entry *e = &f->ents[i];
        memcpy(e->name, q + CKPT_E_NAME, CKPT_NAME);
        if (memchr(e->name, 0, CKPT_NAME) == NULL || !e->name[0])
            return CKPT_CORRUPT(f, "tensor %u has an empty or unterminated name", i);
        e->role = get_u32(q + CKPT_E_ROLE);
        e->ndim = get_u32(q + CKPT_E_NDIM);
        e->shape[0] = get_i64(q + CKPT_E_SHAPE);
        e->shape[1] = get_i64(q + CKPT_E_SHAPE + 8);
        e->offset = get_u64(q + CKPT_E_OFFSET);
        e->bytes = get_u64(q + CKPT_E_BYTES);
        e->crc = get_u32(q + CKPT_E_CRC);
        if (e->role > REC_TENSOR_OPT_STATE || (e->ndim != 1 && e->ndim != 2))
            return CKPT_CORRUPT(f, "tensor \"%s\" has role %u and %u dimensions", e->name, e->role, e->ndim);
        int bad_shape = e->shape[0] < 0 || e->shape[0] > CKPT_MAX_DIM ||
                        (e->ndim == 2 ? e->shape[1] < 0 || e->shape[1] > CKPT_MAX_DIM : e->shape[1] != 0);
        uint64_t numel = bad_shape ? 0 : (uint64_t)e->shape[0] * (uint64_t)(e->ndim == 2 ? e->shape[1] : 1);
        if (bad_shape || e->bytes != 4 * numel)
            return CKPT_CORRUPT(f, "tensor \"%s\" has shape [%" PRId64 ", %" PRId64 "] and %" PRIu64 " bytes, which do not agree",
                                e->name, e->shape[0], e->shape[1], e->bytes);
        uint64_t lo = i ? f->ents[i - 1].offset + f->ents[i - 1].bytes : data_lo;
        if (e->offset % CKPT_ALIGN != 0 || e->offset < lo || e->offset > data_hi || e->bytes > data_hi - e->offset)
            return CKPT_CORRUPT(f, "tensor \"%s\" at offset %" PRIu64 " (%" PRIu64 " bytes) lies outside the data section [%" PRIu64
                                ", %" PRIu64 ") or overlaps the previous tensor",
                                e->name, e->offset, e->bytes, lo, data_hi);
    }
    return REC_OK;
}

/* Opens and maps `path` and checks its structure (ckpt_parse). On error nothing stays open. */
static rec_status ckpt_open(ckpt_file *f, const char *path) {
    memset(f, 0, sizeof *f);
    f->path = path;
    if (!path || !*path) return rec_errorf(REC_EINVAL, "checkpoint: a path is required");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return rec_errorf(REC_EIO, "checkpoint %s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        rec_status s = rec_errorf(REC_EIO, "checkpoint %s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return s;
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return rec_errorf(REC_EIO, "checkpoint %s is not a regular file", path);
    }
    f->size = (size_t)st.st_size;
    static const uint8_t empty[1];
    if (f->size == 0) {
        f->map = empty; /* nothing to map; ckpt_parse reports the truncation */
    } else {
        void *map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (map == MAP_FAILED) {
            rec_status s = rec_errorf(REC_EIO, "checkpoint %s: cannot map %zu bytes: %s", path, f->size, strerror(errno));
            close(fd);
            f->size = 0;
            return s;
        }
        (void)madvise(map, f->size, MADV_SEQUENTIAL);
        f->map = map;
    }
    close(fd);
    rec_status s = ckpt_parse(f);
    if (s) ckpt_close(f);
    return s;
}

/* Parses the stored config JSON into c (overwritten; the caller frees it). */
static rec_status ckpt_config(const ckpt_file *f, rec_model_config *c) {
    char origin[4200];
    snprintf(origin, sizeof origin, "checkpoint %s (stored config)", f->path);
    return rec_model_config_parse(c, f->json, f->json_len, origin);
}

rec_status rec_ckpt_read_config(const char *path, rec_model_config *c, rec_ckpt_meta *meta) {
    if (!c) return rec_errorf(REC_EINVAL, "rec_ckpt_read_config: config is NULL");
    ckpt_file f;
    REC_TRY(ckpt_open(&f, path));
    rec_status s = ckpt_config(&f, c);
    if (!s && meta) *meta = f.meta;
    ckpt_close(&f);
    return s;
}

static int ints_equal(const int *a, int na, const int *b, int nb) {
    return na == nb && (na == 0 || memcmp(a, b, (size_t)na * sizeof *a) == 0);
}

/* Names the first difference between the checkpoint's config `a` and the model's `b` that
 * matters most to a user ("emb_dim is 16 in the checkpoint, 8 in the model"), so that the
 * refusal says what to change; "" when none of the compared fields differs. Only fields that
 * rec_model_config_equal compares are named (it ignores the training defaults batch_size,
 * epochs, seed, eval_every and prep_spec, which a resumed run may change). */
static void config_diff(const rec_model_config *a, const rec_model_config *b, char *buf, size_t cap) {
    buf[0] = 0;
#define DIFF_INT(field)                                                                            \
    if ((int64_t)a->field != (int64_t)b->field) {                                                 \
        snprintf(buf, cap, #field " is %" PRId64 " in the checkpoint but %" PRId64 " in the model", \
                 (int64_t)a->field, (int64_t)b->field);                                           \
        return;                                                                                    \
    }
#define DIFF_FLOAT(field)                                                                  \
    if (a->field != b->field) {                                                           \
        snprintf(buf, cap, #field " is %g in the checkpoint but %g in the model",          \
                 (double)a->field, (double)b->field);                                     \
        return;                                                                            \
    }
#define DIFF_LIST(arr, n)                                                                       \
    if (!ints_equal(a->arr, a->n, b->arr, b->n)) {                                               \
        snprintf(buf, cap, "the " #arr " layer widths differ (%d layers in the checkpoint, %d in the model)", \
                 a->n, b->n);                                                                    \
        return;                                                                                  \
    }
    if (a->kind != b->kind) {
        snprintf(buf, cap, "it is a %s model, this one is %s", rec_model_kind_name(a->kind), rec_model_kind_name(b->kind));
        return;
    }
    DIFF_INT(n_dense)
    DIFF_INT(n_sparse)
    for (int i = 0; i < a->n_sparse && a->table_rows && b->table_rows; i++)
        if (a->table_rows[i] != b->table_rows[i]) {
            snprintf(buf, cap, "table %d has %" PRId64 " rows in the checkpoint but %" PRId64 " in the model", i,
                     a->table_rows[i], b->table_rows[i]);
            return;
        }
    DIFF_INT(emb_dim)
    DIFF_INT(pooling)
    DIFF_LIST(bottom, n_bottom)
    DIFF_LIST(top, n_top)
    DIFF_INT(interaction)
    DIFF_INT(self_interaction)
    DIFF_LIST(deep, n_deep)
    DIFF_INT(cross_layers)
    DIFF_INT(dense_opt.kind)
    DIFF_FLOAT(dense_opt.lr)
    DIFF_FLOAT(dense_opt.beta1)
    DIFF_FLOAT(dense_opt.beta2)
    DIFF_FLOAT(dense_opt.eps)
    DIFF_INT(sparse_opt.kind)
    DIFF_FLOAT(sparse_opt.lr)
    DIFF_FLOAT(sparse_opt.eps)
    DIFF_FLOAT(sparse_opt.init_acc)
    DIFF_INT(schedule.warmup_steps)
    DIFF_INT(schedule.decay_start)
    DIFF_INT(schedule.decay_steps)
    DIFF_FLOAT(schedule.power)
    DIFF_FLOAT(schedule.end_scale)
    if (strcmp(a->name, b->name) != 0) {
        snprintf(buf, cap, "name is \"%s\" in the checkpoint but \"%s\" in the model", a->name, b->name);
        return;
    }
#undef DIFF_INT
#undef DIFF_FLOAT
#undef DIFF_LIST
}

/* A whole model's table or its optimizer state, by name (model.c names them): the embedding
 * tables and the first-order ones (DeepFM, Wide&Deep), which shard alike. */
static int is_table(const char *name) {
    return strncmp(name, "emb.", 4) == 0 || strncmp(name, "opt.emb.", 8) == 0 || strncmp(name, "lin.", 4) == 0 ||
           strncmp(name, "opt.lin.", 8) == 0;
}

/* Checks that the file's directory is exactly the model's tensors (by name; the order may
 * differ), with equal roles and shapes, besides tables when `tables_elsewhere` (a sharded
 * model's tables are the executor's); fills map[i] = file entry of model tensor i. */
static rec_status match_tensors(const ckpt_file *f, const rec_tensor *ts, int n, uint32_t *map, int tables_elsewhere) {
    for (int i = 0; i < n; i++) {
        const rec_tensor *t = &ts[i];
        uint32_t j = (uint32_t)i < f->n && strcmp(f->ents[i].name, t->name) == 0 ? (uint32_t)i : f->n;
        for (uint32_t k = 0; j == f->n && k < f->n; k++)
            if (strcmp(f->ents[k].name, t->name) == 0) j = k;
        if (j == f->n)
            return rec_errorf(REC_EINVAL, "checkpoint %s has no tensor \"%s\", which the model has (%s); "
                              "it was written for another model or optimizer: use the same --config or start fresh",
                              f->path, t->name, role_str((uint32_t)t->role));
        const ckpt_entry *e = &f->ents[j];
        int64_t tshape[2] = {t->shape[0], t->ndim == 2 ? t->shape[1] : 0};
        if (e->role != (uint32_t)t->role || e->ndim != (uint32_t)t->ndim || e->shape[0] != tshape[0] ||
            e->shape[1] != tshape[1]) {
            char s1[64], s2[64];
            return rec_errorf(REC_EINVAL, "checkpoint %s: tensor \"%s\" is %s %s in the file but %s %s in the model; "
                              "use the same --config or start fresh",
                              f->path, t->name, role_str(e->role), shape_str(s1, sizeof s1, (int)e->ndim, e->shape),
                              role_str((uint32_t)t->role), shape_str(s2, sizeof s2, t->ndim, tshape));
        }
        map[i] = j;
    }
    uint32_t extra = 0;
    for (uint32_t k = 0; tables_elsewhere && k < f->n; k++) extra += is_table(f->ents[k].name);
    if (f->n != (uint32_t)n + extra) {
        /* Every model tensor was found, so some file entry is extra or duplicated. */
        for (uint32_t k = 0; k < f->n; k++) {
            int uses = 0;
            for (int i = 0; i < n; i++) uses += map[i] == k;
            if (uses == 0 && !(tables_elsewhere && is_table(f->ents[k].name)))
                return rec_errorf(REC_EINVAL, "checkpoint %s has tensor \"%s\", which the model does not have; "
                                  "use the same --config or start fresh", f->path, f->ents[k].name);
        }
        return CKPT_CORRUPT(f, "%u tensors for a model of %d (a name is repeated)", f->n, n);
    }
    return REC_OK;
}

/* REC_EFORMAT naming the tensor when e's data fail their CRC-32; `then` says what followed. */
static rec_status check_crc(const ckpt_file *f, const ckpt_entry *e, const char *then) {
    uint32_t crc = 0;
    for (uint64_t done = 0; done < e->bytes;) {
        size_t k = e->bytes - done < CKPT_CHUNK ? (size_t)(e->bytes - done) : CKPT_CHUNK;
        crc = rec_crc32(crc, f->map + e->offset + done, k);
        done += k;
    }
    if (crc != e->crc)
        return CKPT_CORRUPT(f, "tensor \"%s\" fails its CRC-32 (stored 0x%08x, computed 0x%08x): the file is corrupt; %s",
                            e->name, e->crc, crc, then);
    return REC_OK;
}

rec_status rec_ckpt_inspect(const char *path, int verify, rec_ckpt_info *info) {
    if (!info) return rec_errorf(REC_EINVAL, "rec_ckpt_inspect: info is NULL");
    memset(info, 0, sizeof *info);
    ckpt_file f;
    REC_TRY(ckpt_open(&f, path));
    rec_status s = ckpt_config(&f, &info->config);
    for (uint32_t i = 0; !s && verify && i < f.n; i++) s = check_crc(&f, &f.ents[i], "the other tensors were not checked");
    if (!s) s = rec_alloc((void **)&info->tensors, ((size_t)f.n + 1) * sizeof *info->tensors, "checkpoint tensor list");
    if (!s) {
        info->version = f.version;
        info->file_bytes = f.size;
        info->meta = f.meta;
        info->n_tensors = (int)f.n;
        for (uint32_t i = 0; i < f.n; i++) {
            const ckpt_entry *e = &f.ents[i];
            rec_ckpt_tensor_info *t = &info->tensors[i];
            memcpy(t->name, e->name, sizeof t->name);
            t->role = (rec_tensor_role)e->role;
            t->ndim = (int)e->ndim;
            t->shape[0] = e->shape[0];
            t->shape[1] = e->shape[1];
            t->bytes = e->bytes;
        }
    }
    ckpt_close(&f);
    if (s) rec_ckpt_info_free(info);
    return s;
}

void rec_ckpt_info_free(rec_ckpt_info *info) {
    if (!info) return;
    rec_model_config_free(&info->config);
    rec_free(info->tensors);
    memset(info, 0, sizeof *info);
}

/* Loads a checkpoint into m, built from the config the file holds (rec_ckpt_read_config).
 * Everything is checked first — structure, config equality, names / roles / shapes, every
 * tensor CRC — and only then is any byte copied, so on error the model is unchanged. Then
 * the model's step count is set to meta.step (which also restores Adam's t). meta may be NULL.
 * gather: a sharded save's main file may load into a whole model, its tables left alone. */
static rec_status load(const char *path, rec_model *m, rec_ckpt_meta *meta, int gather) {
    if (!m) return rec_errorf(REC_EINVAL, "rec_ckpt_load: model is NULL");
    ckpt_file f;
    REC_TRY(ckpt_open(&f, path));
    rec_model_config c;
    memset(&c, 0, sizeof c);
    uint32_t *map = NULL;
    const rec_tensor *all;
    const int n_all = rec_model_tensors(m, &all);
    rec_tensor *ts = NULL;
    int n = 0;
    rec_status s = ckpt_config(&f, &c);
    if (!s && !rec_model_config_equal(&c, rec_model_get_config(m))) {
        char diff[512];
        config_diff(&c, rec_model_get_config(m), diff, sizeof diff);
        s = rec_errorf(REC_EINVAL, "checkpoint %s was written for a different model: %s; use the same --config or start fresh",
                       path, diff[0] ? diff : "the configs differ");
    }
    const int sharded = rec_model_is_sharded(m);
    if (!s && f.meta.shard > 0)
        s = rec_errorf(REC_EINVAL, "checkpoint %s is rank %lld's shard of a save by %lld ranks; resume from the "
                       "directory's model.rckpt (--ckpt DIR --resume)", path, (long long)f.meta.shard - 1,
                       (long long)f.meta.shards);
    if (!s && f.meta.shards > 0 && !sharded && !gather)
        s = rec_errorf(REC_EINVAL, "checkpoint %s holds tables sharded over %lld ranks in the files beside it: load it "
                       "with rec_dist_ckpt_load", path, (long long)f.meta.shards);
    /* the tensors taken from this file: a whole model's tables come from the rank files */
    const int tables_elsewhere = sharded || f.meta.shards > 0;
    if (!s) s = rec_alloc((void **)&ts, ((size_t)n_all + 1) * sizeof *ts, "checkpoint tensor list");
    for (int i = 0; !s && i < n_all; i++)
        if (!(tables_elsewhere && is_table(all[i].name))) ts[n++] = all[i];
    if (!s) s = rec_alloc((void **)&map, ((size_t)n + 1) * sizeof *map, "checkpoint tensor map");
    if (!s) s = match_tensors(&f, ts, n, map, tables_elsewhere);
    for (int i = 0; !s && i < n; i++) s = check_crc(&f, &f.ents[map[i]], "nothing was loaded");
    if (!s) {
        for (int i = 0; i < n; i++) {
            const ckpt_entry *e = &f.ents[map[i]];
            if (e->bytes && ts[i].data16) { /* fp32 values into bf16 storage: exact for a bf16 save */
                const float *v = (const float *)(f.map + e->offset);
                for (uint64_t k = 0; k < e->bytes / sizeof(float); k++) ts[i].data16[k] = rec_bf16_bits(v[k]);
            } else if (e->bytes) {
                memcpy(ts[i].data, f.map + e->offset, (size_t)e->bytes);
            }
        }
        rec_model_set_steps(m, f.meta.step);
        if (meta) *meta = f.meta;
    }
    rec_free(map);
    rec_free(ts);
    rec_model_config_free(&c);
    ckpt_close(&f);
    return s;
}

rec_status rec_ckpt_load(const char *path, rec_model *m, rec_ckpt_meta *meta) { return load(path, m, meta, 0); }

rec_status rec_ckpt_load_except_tables(const char *path, rec_model *m, rec_ckpt_meta *meta) {
    return load(path, m, meta, 1);
}

/* ---- reading tensors one by one ---------------------------------------------------------- */

struct rec_ckpt_reader {
    ckpt_file f;
    char path[4096];
};

rec_status rec_ckpt_reader_open(rec_ckpt_reader **out, const char *path) {
    *out = NULL;
    rec_ckpt_reader *r = calloc(1, sizeof *r);
    if (!r) return rec_errorf(REC_ENOMEM, "checkpoint %s: out of memory", path);
    snprintf(r->path, sizeof r->path, "%s", path ? path : "");
    rec_status s = ckpt_open(&r->f, r->path);
    if (s) {
        free(r);
        return s;
    }
    *out = r;
    return REC_OK;
}

const rec_ckpt_meta *rec_ckpt_reader_meta(const rec_ckpt_reader *r) { return &r->f.meta; }

rec_status rec_ckpt_reader_config(const rec_ckpt_reader *r, rec_model_config *c) { return ckpt_config(&r->f, c); }

rec_status rec_ckpt_reader_tensor(rec_ckpt_reader *r, const char *name, int64_t numel, const float **data) {
    const ckpt_file *f = &r->f;
    for (uint32_t k = 0; k < f->n; k++) {
        const ckpt_entry *e = &f->ents[k];
        if (strcmp(e->name, name) != 0) continue;
        if (e->bytes != 4 * (uint64_t)numel)
            return rec_errorf(REC_EINVAL, "checkpoint %s: tensor \"%s\" holds %" PRIu64 " floats where %" PRId64
                              " were expected: the file does not belong to this save", f->path, name, e->bytes / 4, numel);
        REC_TRY(check_crc(f, e, "nothing was loaded"));
        *data = (const float *)(f->map + e->offset);
        return REC_OK;
    }
    return rec_errorf(REC_EINVAL, "checkpoint %s has no tensor \"%s\": the file does not belong to this save", f->path,
                      name);
}

void rec_ckpt_reader_close(rec_ckpt_reader *r) {
    if (!r) return;
    ckpt_close(&r->f);
    free(r);
}
