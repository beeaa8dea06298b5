/* rectrain — core services: aligned memory, deterministic RNG, clock, thread pool, progress
 * line, CPU ceilings. Everything else in the library builds on these.
 */
#ifndef RECTRAIN_CORE_H
#define RECTRAIN_CORE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "rectrain/status.h"

/* A function of a header that C11 and CUDA C++ both compile, for the host and, under nvcc, the
 * device too: the GPU kernels reproduce the CPU's bits with the same code. */
#ifdef __CUDACC__
#define REC_HD __host__ __device__ static inline
#else
#define REC_HD static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- memory ----------------------------------------------------------------------------
 * 64-byte aligned allocation. rec_alloc returns REC_ENOMEM (with a message naming `what`)
 * instead of NULL; the block is zeroed. rec_realloc keeps the contents and zeroes the grown
 * tail. rec_free(NULL) is a no-op. */
rec_status rec_alloc(void **out, size_t bytes, const char *what);
rec_status rec_realloc(void **p, size_t old_bytes, size_t new_bytes, const char *what);
void rec_free(void *p);

/* ---- deterministic RNG ------------------------------------------------------------------
 * xoshiro256** seeded through splitmix64. Streams are explicit: rec_rng_seed(&r, seed, stream)
 * gives independent sequences for (seed, stream) pairs, so work split across threads by
 * block draws the same numbers whatever the thread count. */
typedef struct rec_rng {
    uint64_t s[4];
} rec_rng;

void rec_rng_seed(rec_rng *r, uint64_t seed, uint64_t stream);
/* Uniform integer in [0, n), n > 0 (Lemire's multiply-shift, unbiased). */
uint64_t rec_rng_below(rec_rng *r, uint64_t n);
/* Standard normal (Box–Muller, one value per call). */
double rec_rng_normal(rec_rng *r);

/* The next 64 random bits (xoshiro256**, Blackman & Vigna). Inline: generators draw tens of
 * numbers per row. */
static inline uint64_t rec_rng_u64(rec_rng *r) {
    uint64_t *s = r->s;
    uint64_t x = s[1] * 5, out = ((x << 7) | (x >> 57)) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return out;
}

/* Uniform in [0, 1) with 53 random bits. */
static inline double rec_rng_uniform(rec_rng *r) { return (double)(rec_rng_u64(r) >> 11) * 0x1.0p-53; }

/* splitmix64 finaliser: a bijective 64-bit mix, also used as a stateless hash. */
REC_HD uint64_t rec_mix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* The plural ending of a count in a message: "%lld row%s", n, rec_s(n) ("1 row", "2 rows"). */
/* ---- bfloat16 (the top 16 bits of an fp32: its exponent, 8 significant bits) ---------------- */
/* fp32 -> bf16 bits, round to nearest even; NaN stays a (quiet) NaN, overflow gives inf. */
REC_HD uint16_t rec_bf16_bits(float f) {
    union { float f; uint32_t u; } v = {f};
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40u);
    return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16);
}
/* fp32 -> bf16 bits, rounded stochastically: up with probability (low 16 bits) / 2^16 given
 * r uniform in [0, 2^16) (unbiased: the expected result is f). NaN and inf stay as they are. */
REC_HD uint16_t rec_bf16_bits_sr(float f, uint32_t r) {
    union { float f; uint32_t u; } v = {f};
    if ((v.u & 0x7f800000u) == 0x7f800000u) return (uint16_t)((v.u >> 16) | ((v.u & 0x7fffffu) ? 0x40u : 0u));
    return (uint16_t)((v.u + (r & 0xffffu)) >> 16);
}
REC_HD float rec_bf16_to_float(uint16_t h) {
    union { uint32_t u; float f; } v = {(uint32_t)h << 16};
    return v.f;
}
/* The random bits of a bf16 row's stochastic rounding (embed.h "Table storage"): a xorshift64
 * stream started from a hash of (seed, update count, table, row); column c takes 16 bits of
 * the stream's step c / 4 (the first step is step 0), from bit 16 (c % 4) up. Whoever updates
 * the row (a CPU thread of any vector width, a GPU lane) draws the same bits. */
REC_HD uint64_t rec_bf16_sr_start(uint64_t seed, int64_t updates, int f, int64_t row) {
    return rec_mix64(seed ^ rec_mix64((uint64_t)updates * 0x9e3779b97f4a7c15ULL ^ (uint64_t)f << 48 ^ (uint64_t)row)) | 1;
}
REC_HD uint64_t rec_xorshift64(uint64_t *x) {
    *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
    return *x;
}
/* Step j of the stream that `start` begins (j + 1 xorshifts). */
REC_HD uint64_t rec_bf16_sr_step(uint64_t start, int j) {
    uint64_t x = start, r = 0;
    for (int i = 0; i <= j; i++) r = rec_xorshift64(&x);
    return r;
}

static inline const char *rec_s(int64_t n) { return n == 1 ? "" : "s"; }

/* ---- files ------------------------------------------------------------------------------
 * A list of input files in messages not about one of them: "A", or "A (and 2 more files)". */
void rec_paths_name(const char *const *paths, int n, char *buf, size_t cap);

/* The 1-based line and column of byte `pos` of `text` (its first pos bytes are read). */
void rec_line_col(const char *text, size_t pos, int64_t *line, int64_t *col);
/* `status` with the message for a JSON document that does not parse: "ORIGIN: not valid JSON
 * near line L, column C; " and what to do — a document that does not end with its closing
 * bracket was cut short, another has a typo there. `end` is where the parser stopped (cJSON's
 * return_parse_end; NULL or outside the text: its start). */
rec_status rec_json_invalid(rec_status status, const char *origin, const char *text, size_t len, const char *end);

/* Reads a whole file into *out (malloc'ed, NUL-terminated, free() it) of *len bytes. Errors
 * name the path and `what` ("model config"): REC_EIO when it cannot be opened or read (a
 * directory is named as one),
 * REC_EINVAL when it is larger than max_bytes, REC_ENOMEM. */
rec_status rec_read_file(const char *path, const char *what, size_t max_bytes, char **out, size_t *len);

/* Makes directory `dir` and its missing parents (like mkdir -p); `what` names it in messages
 * ("checkpoint directory"). REC_EIO when a part cannot be made or `dir` is not a directory.
 * Jobs call it before their work, so that an output that cannot be written fails in the
 * first second, not after hours of training. */
rec_status rec_mkdir_p(const char *dir, const char *what);

/* ---- the output guard -------------------------------------------------------------------
 * No command writes a file it reads. A command lists every path it will read and every path it
 * will write, each with the option (or JSON path) that named it, and calls rec_guard_check
 * before it opens anything for writing. Paths compare by identity: the same device and inode
 * after following links (a hard link, a symbolic link, ./x and ../d/x are one file), or, for
 * files that do not exist yet, the same path once its folder is resolved. An output covers the
 * ".tmp" beside it that atomic writes go through. Two outputs that would write one file are
 * refused too. An option that names a file both read and written (train --resume's
 * checkpoint, --tune's --plan) updates it in place on purpose and is not compared with itself.
 * NULL, empty and "-" (stdout) paths are skipped. The guard holds pointers: the strings must
 * outlive rec_guard_check. A zeroed rec_guard is empty; rec_guard_check frees what adding
 * allocated and leaves it empty again, so a command adds every path, then checks once. */
enum { REC_GUARD_IN, REC_GUARD_OUT, REC_GUARD_DIR, REC_GUARD_TREE };
typedef struct rec_guard_entry {
    int kind;                 /* REC_GUARD_* */
    const char *opt, *path;   /* "--out", the path as given */
    const char *const *names; /* REC_GUARD_DIR: the files written in the folder, NULL-ended */
} rec_guard_entry;
typedef struct rec_guard {
    rec_guard_entry *e;       /* (n) grown as paths are added; freed by rec_guard_check */
    int n, cap, no_memory;
} rec_guard;
void rec_guard_in(rec_guard *g, const char *opt, const char *path);
void rec_guard_ins(rec_guard *g, const char *opt, const char *const *paths, int n);
/* A file written (and its PATH.tmp). */
void rec_guard_out(rec_guard *g, const char *opt, const char *path);
/* A folder written: with `names` (NULL-ended; "prefix*" for a family of files), the files
 * DIR/NAME it writes, others in DIR untouched; with names NULL, the whole folder, replaced
 * (written as DIR.tmp, then renamed: exports), so nothing under it may be an input. */
void rec_guard_dir(rec_guard *g, const char *opt, const char *dir, const char *const *names);
/* REC_EINVAL naming both options, both paths and the file at stake, and what to do, when an
 * output would write over an input or over another output; REC_ENOMEM when a path could not be
 * kept; REC_OK otherwise. Frees the guard's list either way. */
rec_status rec_guard_check(rec_guard *g);

/* A file that appears whole or not at all (shards, checkpoints, generated data): written as
 * PATH.tmp, then committed — fsync, rename over PATH, fsync of the directory — so that a
 * crash at any moment, even kill -9, leaves the previous PATH or the new one, never a part.
 * An abort, or a commit that fails, removes PATH.tmp and leaves PATH as it was.
 *
 * A PATH that exists and is not a regular file (/dev/null, a FIFO, a socket, a terminal), or
 * that lies in /dev or /proc (/dev/stdout redirected to a file), is written into directly,
 * never renamed over: a rename would put a regular file where the device or link was, and
 * every other program on the machine would then write into it. */
typedef struct rec_atomic_file {
    int fd;       /* PATH.tmp (or PATH, direct) open for writing; -1 once committed or aborted */
    char *path;   /* owned */
    char *tmp;    /* "PATH.tmp", owned; PATH itself when direct, so messages name what is written */
    int direct;   /* PATH is not a regular file: written in place, nothing renamed or removed */
} rec_atomic_file;

/* Creates (or truncates, after a killed job) PATH.tmp, or opens PATH itself where it is not a
 * regular file. REC_EIO names the file and says to check the directory; REC_EINVAL when PATH
 * is a directory (the rename would fail, after all the work). On failure *a holds nothing to
 * free. */
rec_status rec_atomic_open(rec_atomic_file *a, const char *path);
/* fsync, close, rename over PATH, fsync of PATH's directory (whose failure leaves a complete
 * file, so it is not an error); direct, only the close. REC_EIO naming the step that failed,
 * and then PATH.tmp is removed. Frees a's strings either way. */
rec_status rec_atomic_commit(rec_atomic_file *a);
/* Closes and removes PATH.tmp (direct: only closes); frees a's strings. A no-op on a zeroed or
 * finished a. */
void rec_atomic_abort(rec_atomic_file *a);
/* A stdio stream for writing an atomic file (rec_atomic_open, then a stream on a duplicate
 * of its descriptor, so that the commit's fsync and close stay the file's own). On failure
 * *a holds nothing to free and *f is NULL. */
rec_status rec_atomic_fopen(rec_atomic_file *a, const char *path, FILE **f);
/* Flushes and closes f (a no-op when NULL). Returns s when set, else REC_EIO naming PATH,
 * `what` and the reason when any write to f failed (ferror: a full disk, ENOSPC, is seen here
 * even where the failing write was not checked; call it right after the writes, since the
 * reason of a failed write that the flush does not repeat is errno as they left it), else
 * REC_OK. */
rec_status rec_stream_close(FILE *f, const char *path, const char *what, rec_status s);
/* The same without closing f (standard output). */
rec_status rec_stream_flush(FILE *f, const char *path, const char *what, rec_status s);
/* rec_stream_close of f, then a committed when all went well, else aborted. */
rec_status rec_atomic_fclose(rec_atomic_file *a, FILE *f, const char *what, rec_status s);
/* Writes all n bytes to fd (write(2) may write fewer; EINTR is retried): 1, or 0 with errno
 * set (EIO where a write made no progress). */
int rec_write_full(int fd, const void *p, size_t n);
/* n bytes as the whole of PATH, atomically; REC_EIO names PATH.tmp, `what` and the reason. */
rec_status rec_atomic_write(const char *path, const char *what, const void *p, size_t n);
/* A cJSON document (freed here, whatever happens) printed as the whole of PATH, atomically. */
struct cJSON;
rec_status rec_json_write(const char *path, const char *what, struct cJSON *root);

/* ---- clock ------------------------------------------------------------------------------ */
/* Monotonic seconds. */
double rec_now(void);

/* ---- sorting ---------------------------------------------------------------------------- */
/* The stable ascending order of keys[0..n), each in [0, 2^bits): order[i] is the position of
 * the i-th smallest (equal keys in position order). An LSD radix sort of 8-bit digits over
 * the positions (sort.c); tmp (n) is scratch. */
void rec_radix_order(const int64_t *keys, int64_t n, int bits, int32_t *order, int32_t *tmp);

/* ---- thread pool ------------------------------------------------------------------------
 * A fixed set of worker threads that run fork-join jobs: rec_pool_run calls
 * fn(ctx, task, thread) for every task in [0, n_tasks), tasks handed out in order, and
 * returns when all have finished. `thread` is in [0, rec_pool_threads) and identifies the
 * worker's private scratch. The first failing task's status is returned and its message is
 * copied into the caller's last error; remaining tasks still run to completion (they must not
 * depend on each other). The calling thread takes part, so a pool of 1 runs inline. */
typedef struct rec_pool rec_pool;
typedef rec_status (*rec_task_fn)(void *ctx, int64_t task, int thread);

rec_status rec_pool_init(rec_pool **out, int n_threads);
void rec_pool_free(rec_pool *p);
int rec_pool_threads(const rec_pool *p);
rec_status rec_pool_run(rec_pool *p, int64_t n_tasks, rec_task_fn fn, void *ctx);
/* rec_crc32 on the pool's threads (NULL: this one): pieces of 1 MiB or more, each summed
 * alone and combined (zlib's crc32_combine). The shard loader's check of a group. */
uint32_t rec_crc32_pool(uint32_t crc, const void *p, size_t n, rec_pool *pool);

/* Number of CPUs this process may run on (sched_getaffinity), at least 1. */
int rec_cpu_count(void);

/* ---- progress ----------------------------------------------------------------------------
 * "prep  1.2M/4.0M rows  310 MB/s  ETA 9s": on a terminal, one line redrawn at most 10 times a
 * second on stderr; otherwise (a log file, a pipe) a whole line every REC_PROGRESS_EVERY
 * seconds (default 30), so a log shows the rate, ETA and loss as the job goes. REC_PROGRESS=0
 * silences both. */
typedef struct rec_progress {
    const char *label;
    const char *unit;
    double total;      /* units expected, 0 when unknown */
    double done;
    double t_start;
    double t_last;
    double every;      /* lines mode: seconds between lines; 0 on a terminal */
    int enabled;
    int drawn;         /* a terminal line is on screen */
} rec_progress;

void rec_progress_init(rec_progress *p, const char *label, const char *unit, double total);
/* Sets the units done so far and, if `extra` is not NULL, a short trailing note
 * (e.g. "loss 0.4512"). Cheap enough to call per batch. */
void rec_progress_update(rec_progress *p, double done, const char *extra);
/* Clears a terminal line before other output (the next update draws it again). */
void rec_progress_clear(rec_progress *p);
/* Clears the line for good. */
void rec_progress_finish(rec_progress *p);

/* ---- machine ceilings -------------------------------------------------------------------
 * Measured, not assumed: the median of several timed copies of a buffer far larger than the
 * last-level cache, in GB/s (bytes read + bytes written counted once, as memcpy bandwidth is
 * usually quoted). Takes about 0.3 s. */
double rec_measure_copy_gbps(void);

/* Median of n doubles (the array is sorted in place). */
double rec_median(double *v, int n);

/* ---- checksums --------------------------------------------------------------------------
 * CRC-32 (IEEE 802.3, the polynomial of zlib, gzip and PNG), chainable: start with crc = 0
 * and pass the previous result to continue over the next bytes, so
 * rec_crc32(rec_crc32(0, a, n), b, m) == CRC of a followed by b. A thin wrapper over
 * zlib's crc32_z (hardware-accelerated where zlib is). */
uint32_t rec_crc32(uint32_t crc, const void *p, size_t n);
/* CRC-32C (Castagnoli; TFRecord framing), chained alike: crc 0 to start. */
uint32_t rec_crc32c(uint32_t crc, const void *p, size_t n);
/* 64-bit FNV-1a, chainable alike: start with REC_FNV_SEED. For keys (job and metric-store
 * hashes), not for integrity (that is what the CRC is for). */
#define REC_FNV_SEED 0xcbf29ce484222325ull
uint64_t rec_fnv1a64(uint64_t h, const void *p, size_t n);

/* Writes a w x h image of 8-bit RGB pixels (rgb: h rows of w * 3 bytes, top row first) as a
 * PNG file (charts: `rectrain plan --chart`). REC_EIO naming the path on failure. */
rec_status rec_png_write(const char *path, int w, int h, const unsigned char *rgb);

#ifdef __cplusplus
}
#endif
#endif
