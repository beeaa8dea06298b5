/* Data sets and the loading pipeline (data.h).
 *
 * A data set is either a .rshard (recognised by its magic, not its name), raw Criteo text
 * (.tsv or .gz) that is parsed and preprocessed on the fly by a prep spec, or the same rows
 * parsed already (.rraw, rawcols.h), preprocessed on the fly by a prep spec. A loader streams a
 * row range of it as fixed-size batches through a ring of `depth` preallocated batches that
 * one producer thread fills ahead of the consumer:
 *
 *   producer  shard: one rec_shard_read per batch, on the loader's own shard handle
 *             (rec_shard is not thread-safe per handle, so loaders never share one)
 *             TSV:   rec_tsv_next -> rec_prep_engine_run (prep_threads threads) -> copy the
 *                    chunk's rows, in file order, into ring batches
 *             .rraw: as a shard (any rows, at once), each read rec_rawcols_read and
 *                    rec_prep_engine_run_raw in runs of RAW_ROWS rows (RAW_ROWS_GPU with
 *                    the GPU executor: one stream, whole blocks; shuffled, a window's blocks
 *                    on the pool's threads, each with its own reader and executor)
 *   consumer  rec_loader_next: releases the batch it returned last time, takes the next one
 *
 * Ring protocol (mutex + two condition variables): slots [head, head+held) are the batch the
 * consumer holds (held is 0 or 1), [head+held, head+held+filled) are ready, and the producer
 * fills the slot at tail = head+held+filled, only when held+filled < depth. The producer
 * writes its slot without the lock: no other thread can see that slot until it is published.
 *
 * The sequence of batches depends only on (data, row0, row1, batch): batch i holds rows
 * [row0 + i*batch, min(row0 + (i+1)*batch, row1)), whatever the thread timing, the ring
 * depth or the engine's thread count (the engine returns a chunk's rows in file order).
 *
 * Shuffled (rec_loader_open_order, scheme in data.h): the producer reads a window of W blocks
 * of K rows into W block batches of its own (shard and .rraw: one read per block of the
 * epoch's block permutation; TSV: the chunks' rows, in file order, fill the blocks), then
 * gathers the window's rows, interleaved at random, into ring batches. The order is drawn per
 * window from its own RNG stream, so it depends only on (seed, epoch, range, K, W), and a
 * resumed loader skips whole windows without reading or drawing for them.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "rectrain/cache.h"
#include "rectrain/ckpt.h"
#include "rectrain/core.h"
#include "rectrain/offload.h"
#include "rectrain/prep.h"
#include "rectrain/rawcols.h"
#include "rectrain/shard.h"
#include "rectrain/data.h"

/* Text chunk size of a loader's TSV reader. Smaller than the 8 MiB default of `prep`: the
 * first batch arrives sooner and the engine's batches stay small. Internal knob (rec__) that
 * tests lower to exercise chunk boundaries. */
size_t rec__loader_chunk_bytes = 1 << 20;

/* Rows of a .rraw preprocessed at once: about a TSV chunk's on the CPUs; on the GPU executor
 * a run is one executor call of its own block size (fewer, larger launches and copies). */
enum { MSG_CAP = 2048, RAW_ROWS = 8192, RAW_ROWS_GPU = 32768 };
/* GPU executors a shuffled .rraw's loader runs at once: each holds its own device copy of the
 * spec's parameters (vocabularies included), buffers and stream, so a few, not a thread each. */
enum { RAW_READERS_GPU = 4 };
enum { KIND_TSV = 0, KIND_SHARD = 1, KIND_RAW = 2 };

/* ---- data set ------------------------------------------------------------------------------ */

struct rec_dataset {
    char *path;                 /* the data set in messages: its file, or the first of several */
    int n_parts;                /* files read in order as one data set (>= 1) */
    char **parts;               /* (n_parts) their paths */
    int64_t *part_row0;         /* (n_parts + 1) shards, .rraw: data set row of each part's first row */
    int is_shard;
    int is_raw;                 /* .rraw parts: parsed rows, a prep spec to run on them */
    int has_label;
    int32_t n_dense;            /* Dn */
    int32_t n_sparse;           /* F */
    int64_t *table_rows;        /* (F) */
    int64_t rows;               /* N, -1 until counted (TSV) */
    rec_shard *shard;           /* shard: the schema's owner (loaders open their own) */
    /* TSV and .rraw only */
    rec_spec *spec;
    rec_shard *vocab_shard;     /* owns the vocabularies the plan points to */
    rec_prep_plan *plan;        /* immutable: shared by every loader's engine */
    rec_tsv_opts tsv;           /* has_label resolved */
    int prep_threads;
    int prep_device;            /* rec_prep_device of the loaders' engines */
    rec_corun *corun;           /* rec_dataset_set_corun: the GPU executors' co-run with training */
    const char *spec_path, *vocab_from;  /* the caller's, for rec_dataset_offload */
    rec_offload *offload;       /* pieces made by workers too (rec_dataset_offload), or NULL */
    const volatile sig_atomic_t *stop; /* the caller's stop flag, read by the counting pass */
    rec_bad_report bad;         /* SKIP mode: what the counting pass dropped */
    int map_skips;              /* record every dropped row's position (skips) */
    int64_t *skips;             /* (n_skips) input line of each dropped row, ascending */
    int64_t n_skips, cap_skips;
};

static const char SHARD_MAGIC[8] = {'R', 'S', 'H', 'A', 'R', 'D', '0', '1'};

/* The kind of `path` by its first bytes: KIND_SHARD, KIND_RAW (.rraw) or KIND_TSV. REC_EIO
 * (naming the path) when it cannot be opened. Anything else is taken for text (plain or gzip), except what is plainly not data,
 * refused naming what it is and what to give instead: a rectrain checkpoint or embedding
 * server snapshot, a JSON document (a spec, config or plan), other binary data. An empty file
 * is a TSV of no rows. */
static rec_status sniff_kind(const char *path, int shards_only, int *kind) {
    FILE *f = fopen(path, "rb");
    if (!f) return rec_errorf(REC_EIO, "%s: cannot open the data set: %s", path, strerror(errno));
    unsigned char head[4096];
    const size_t got = fread(head, 1, sizeof head, f);
    fclose(f);
    *kind = got >= 8 && memcmp(head, SHARD_MAGIC, 8) == 0 ? KIND_SHARD : rec_rawcols_magic(head, got) ? KIND_RAW : KIND_TSV;
    if (shards_only && *kind != KIND_SHARD) /* the advice below names the CLI's options */
        return rec_errorf(REC_EINVAL, "%s is %s, not a .rshard: the reader takes the shards rectrain prep writes; prep "
                          "it first (rectrain prep --spec SPEC.json --in %s --out DATA.rshard) and give the .rshard",
                          path, *kind == KIND_RAW ? "a .rraw of raw columns" : "a TSV or another file", path);
    if (*kind != KIND_TSV) return REC_OK;
    const char *give = "give a .rshard from rectrain prep, a .rraw from rectrain prep --raw, or a Criteo TSV (.tsv or .gz)";
    if (got >= 8 && !memcmp(head, REC_CKPT_MAGIC, 8))
        return rec_errorf(REC_EINVAL, "%s is a rectrain checkpoint, not data: give it as --ckpt, and as --data a .rshard "
                          "from rectrain prep or a Criteo TSV (.tsv or .gz)", path);
    if (got >= 8 && !memcmp(head, REC_SNAP_MAGIC, 8))
        return rec_errorf(REC_EINVAL, "%s is an embedding server's snapshot, not data; %s", path, give);
    size_t k = 0;
    while (k < got && (head[k] == ' ' || head[k] == '\t' || head[k] == '\n' || head[k] == '\r')) k++;
    if (k < got && (head[k] == '{' || head[k] == '['))
        return rec_errorf(REC_EINVAL, "%s is a JSON document (a spec, model config or plan?), not data; %s", path, give);
    const int gzip = got >= 2 && head[0] == 0x1f && head[1] == 0x8b;
    if (!gzip && memchr(head, 0, got))
        return rec_errorf(REC_EINVAL, "%s is binary data that is neither a .rshard, a .rraw nor gzip; %s", path, give);
    return REC_OK;
}

/* Part `b` (path pb) of a shard data set against its first part `a` (path pa): rows of
 * both must mean the same to a model, so the label, the dense width, every categorify
 * vocabulary (which maps raw ids to rows, and sizes its table) and every sparse feature's name
 * and table must agree; a difference is refused, naming both files and what differs. */
static rec_status check_same_schema(const rec_shard *a, const char *pa, const rec_shard *b, const char *pb) {
    const rec_shard_schema *x = rec_shard_get_schema(a), *y = rec_shard_get_schema(b);
    char what[256] = "";
    if (x->has_label != y->has_label)
        snprintf(what, sizeof what, "%s labels and %s none", x->has_label ? pa : pb, x->has_label ? pb : pa);
    else if (x->n_dense != y->n_dense || x->n_sparse != y->n_sparse)
        snprintf(what, sizeof what, "%d dense and %d sparse features against %d and %d", (int)y->n_dense,
                 (int)y->n_sparse, (int)x->n_dense, (int)x->n_sparse);
    const rec_vocab_set *vx = rec_shard_vocabs(a), *vy = rec_shard_vocabs(b);
    if (!what[0] && vx->n != vy->n)
        snprintf(what, sizeof what, "%d vocabularies against %d", (int)vy->n, (int)vx->n);
    for (int32_t k = 0; !what[0] && k < vx->n; k++) {
        const int64_t n = rec_vocab_size(vx->v[k]);
        if (n != rec_vocab_size(vy->v[k]) ||
            memcmp(rec_vocab_ids(vx->v[k]), rec_vocab_ids(vy->v[k]), (size_t)n * sizeof(int64_t)) != 0)
            snprintf(what, sizeof what, "vocabulary %d maps other ids to the table rows (each was counted on its own "
                     "data: prep the later parts with --vocab-from %s)", (int)k, pa);
    }
    for (int32_t f = 0; !what[0] && f < x->n_sparse; f++)
        if (strcmp(x->sparse[f].name, y->sparse[f].name) || x->sparse[f].table_rows != y->sparse[f].table_rows)
            snprintf(what, sizeof what, "sparse feature %d is %s with a table of %lld rows against %s with %lld",
                     (int)f, y->sparse[f].name, (long long)y->sparse[f].table_rows, x->sparse[f].name,
                     (long long)x->sparse[f].table_rows);
    if (!what[0]) return REC_OK;
    return rec_errorf(REC_EINVAL, "%s and %s cannot be one data set: %s", pb, pa, what);
}

/* Every part is opened (the first stays open as the schema's owner) and checked against the
 * first; part_row0 numbers the rows across them in order. */
static rec_status open_shard_set(rec_dataset *d, const rec_dataset_opts *o) {
    REC_TRY(rec_shard_open(&d->shard, d->parts[0]));
    const rec_shard_schema *sc = rec_shard_get_schema(d->shard);
    d->has_label = sc->has_label;
    d->n_dense = sc->n_dense;
    d->n_sparse = sc->n_sparse;
    REC_TRY(rec_alloc((void **)&d->part_row0, (size_t)(d->n_parts + 1) * sizeof(int64_t), "data set parts"));
    d->part_row0[1] = rec_shard_rows(d->shard);
    for (int k = 1; k < d->n_parts; k++) {
        rec_shard *s;
        REC_TRY(rec_shard_open(&s, d->parts[k]));
        rec_status st = check_same_schema(d->shard, d->parts[0], s, d->parts[k]);
        d->part_row0[k + 1] = d->part_row0[k] + rec_shard_rows(s);
        rec_shard_close(s);
        REC_TRY(st);
    }
    d->rows = d->part_row0[d->n_parts];
    REC_TRY(rec_alloc((void **)&d->table_rows, (size_t)(d->n_sparse + 1) * sizeof(int64_t), "data set tables"));
    for (int32_t f = 0; f < d->n_sparse; f++) d->table_rows[f] = sc->sparse[f].table_rows;
    d->prep_threads = o->prep_threads < 1 ? 1 : o->prep_threads > 256 ? 256 : o->prep_threads;  /* the loader pool's */
    return REC_OK;
}

/* .rraw parts: each opened and checked (its header and directory), their labels alike;
 * part_row0 numbers the rows across them, as a shard set's. */
static rec_status open_raw_parts(rec_dataset *d) {
    REC_TRY(rec_alloc((void **)&d->part_row0, (size_t)(d->n_parts + 1) * sizeof(int64_t), "data set parts"));
    d->part_row0[0] = 0;
    for (int k = 0; k < d->n_parts; k++) {
        rec_rawcols *r;
        REC_TRY(rec_rawcols_open(&r, d->parts[k]));
        const int label = rec_rawcols_has_label(r);
        d->part_row0[k + 1] = d->part_row0[k] + rec_rawcols_rows(r);
        rec_rawcols_close(r);
        REC_TRY(rec_rawcols_label_agree(d->parts[k], k, d->parts[0], label, d->tsv.has_label, &d->has_label));
    }
    d->rows = d->part_row0[d->n_parts];
    d->tsv.has_label = d->has_label;
    return REC_OK;
}

/* TSV and .rraw: load and validate the spec, bind the vocabularies of a categorify spec from
 * the vocab_from shard (the data cannot provide them: that takes a whole counting pass, which
 * is `rectrain prep`'s job), compile the plan and resolve has_label from the file's first line
 * (a .rraw's header). */
static rec_status open_tsv_set(rec_dataset *d, const rec_dataset_opts *o) {
    struct stat st;
    if (!d->is_raw && !o->spec_path && stat(d->parts[0], &st) == 0 && st.st_size == 0)
        return rec_errorf(REC_EINVAL, "%s is empty: it holds no rows (a copy cut short?); give a .rshard from rectrain "
                          "prep, or a Criteo TSV (.tsv or .gz)", d->path);
    if (!o->spec_path)
        return rec_errorf(REC_EINVAL, "%s is %s; give a prep spec to read it as %s (--spec, or \"prep_spec\" in the "
                          "model config's train section), or prep it first with rectrain prep", d->path,
                          d->is_raw ? "a .rraw of raw columns" : "a TSV", d->is_raw ? "preprocessed rows" : "raw text");
    if (o->prep_threads < 1 || o->prep_threads > 256)
        return rec_errorf(REC_EINVAL, "%s: prep threads must be between 1 and 256 (got %d)", d->path,
                          o->prep_threads);
    REC_TRY(rec_spec_load(&d->spec, o->spec_path));
    const rec_vocab_set *vocabs = NULL;
    if (d->spec->n_vocabs > 0) {
        if (!o->vocab_from)
            return rec_errorf(REC_EINVAL, "%s: spec %s has %d categorify op(s), whose vocabularies come from "
                              "a counting pass over the data; give the .rshard prepped with this spec as "
                              "--vocab-from, or prep the TSV first with rectrain prep",
                              d->path, o->spec_path, d->spec->n_vocabs);
        REC_TRY(rec_shard_open(&d->vocab_shard, o->vocab_from));
        REC_TRY(rec_shard_bind_vocabs(d->vocab_shard, d->spec, o->spec_path));
        vocabs = rec_shard_vocabs(d->vocab_shard);
    }
    REC_TRY(rec_prep_plan_init(&d->plan, d->spec, vocabs));
    if (d->is_raw) {
        d->tsv = o->tsv;
        REC_TRY(open_raw_parts(d));
    } else {
        rec_tsv *r; /* every file opened, its format resolved: all must agree */
        REC_TRY(rec_tsv_open_list(&r, (const char *const *)d->parts, d->n_parts, &o->tsv, 4096));
        d->tsv = *rec_tsv_options(r);
        rec_tsv_close(r);
        d->has_label = d->tsv.has_label;
    }
    d->prep_threads = o->prep_threads;
    d->prep_device = o->prep_device;
    d->spec_path = o->spec_path;
    d->vocab_from = o->vocab_from;
    d->n_dense = d->spec->n_dense;
    d->n_sparse = d->spec->n_sparse;
    if (!d->is_raw) d->rows = -1;
    REC_TRY(rec_alloc((void **)&d->table_rows, (size_t)(d->n_sparse + 1) * sizeof(int64_t), "data set tables"));
    for (int32_t f = 0; f < d->n_sparse; f++) d->table_rows[f] = rec_spec_table_rows(d->spec, f);
    return REC_OK;
}

/* The kind of every file of the list: all shards, all .rraw or all TSV, each a regular file. */
static const char *kind_name(int kind) { return kind == KIND_SHARD ? "a .rshard" : kind == KIND_RAW ? "a .rraw" : "a TSV"; }

static rec_status sniff_parts(const char *const *paths, int n, int shards_only, int *kind) {
    for (int k = 0; k < n; k++) {
        struct stat st;
        if (stat(paths[k], &st) == 0 && !S_ISREG(st.st_mode))
            return rec_errorf(REC_EINVAL, "%s is not a regular file (a pipe?); a data set is read more than once "
                              "(its rows counted, then read for every epoch or pass): give a file, or rectrain prep it "
                              "into a .rshard", paths[k]);
        int kk = KIND_TSV;
        REC_TRY(sniff_kind(paths[k], shards_only, &kk));
        if (k > 0 && kk != *kind)
            return rec_errorf(REC_EINVAL, "%s is %s and %s %s: the files of one data set are all .rshard, all .rraw or "
                              "all TSV; prep the others the same way first", paths[k], kind_name(kk), paths[0],
                              kind_name(*kind));
        *kind = kk;
    }
    return REC_OK;
}

/* Recognises the data set by content (the shard magic), not by name; a shard ignores the TSV
 * options (spec_path, vocab_from, tsv, prep_threads). Reads no rows: a TSV's N is counted on
 * the first rec_dataset_rows or rec_loader_open. */
rec_status rec_dataset_open(rec_dataset **out, const rec_dataset_opts *o) {
    *out = NULL;
    const char *const *paths = o && o->n_paths > 0 ? o->paths : o ? &o->path : NULL;
    const int n_paths = o && o->n_paths > 0 ? o->n_paths : 1;
    if (!paths || !paths[0]) return rec_errorf(REC_EINVAL, "data set: a path is required");
    int kind = KIND_TSV;
    REC_TRY(sniff_parts(paths, n_paths, o->shards_only, &kind));
    rec_dataset *d;
    REC_TRY(rec_alloc((void **)&d, sizeof *d, "data set"));
    char name[600];
    rec_paths_name(paths, n_paths, name, sizeof name);
    rec_status s = rec_alloc((void **)&d->path, strlen(name) + 1, "data set path");
    if (!s) {
        memcpy(d->path, name, strlen(name) + 1);
        s = rec_alloc((void **)&d->parts, (size_t)n_paths * sizeof *d->parts, "data set parts");
    }
    for (int k = 0; !s && k < n_paths; k++) {
        s = rec_alloc((void **)&d->parts[k], strlen(paths[k]) + 1, "data set path");
        if (!s) memcpy(d->parts[k], paths[k], strlen(paths[k]) + 1), d->n_parts++;
    }
    if (!s && (o->prep_device < REC_PREP_CPU || o->prep_device > REC_PREP_GPU_EMULATED))
        s = rec_errorf(REC_EINVAL, "data set %s: prep device %d (want a rec_prep_device)", name, o->prep_device);
    if (!s) {
        d->is_shard = kind == KIND_SHARD;
        d->is_raw = kind == KIND_RAW;
        d->stop = o->stop;
        d->map_skips = o->map_skips;
        s = d->is_shard ? open_shard_set(d, o) : open_tsv_set(d, o);
    }
    if (s) {
        rec_dataset_close(d);
        return s;
    }
    *out = d;
    return REC_OK;
}

void rec_dataset_close(rec_dataset *d) {
    if (!d) return;
    rec_offload_close(d->offload);
    rec_prep_plan_free(d->plan);
    rec_spec_free(d->spec);
    rec_shard_close(d->vocab_shard);
    rec_shard_close(d->shard);
    rec_free(d->table_rows);
    for (int k = 0; k < d->n_parts; k++) rec_free(d->parts[k]);
    rec_free(d->parts);
    rec_free(d->part_row0);
    rec_free(d->path);
    rec_free(d->skips);
    rec_free(d);
}

const char *rec_dataset_path(const rec_dataset *d) { return d->path; }
int rec_dataset_has_label(const rec_dataset *d) { return d->has_label; }
int rec_dataset_is_shard(const rec_dataset *d) { return d->is_shard; }
int32_t rec_dataset_n_dense(const rec_dataset *d) { return d->n_dense; }
int32_t rec_dataset_n_sparse(const rec_dataset *d) { return d->n_sparse; }
const int64_t *rec_dataset_table_rows(const rec_dataset *d) { return d->table_rows; }
const rec_bad_report *rec_dataset_bad(const rec_dataset *d) { return &d->bad; }

int rec_dataset_skips(const rec_dataset *d, const int64_t **pos, int64_t *n) {
    *pos = d->skips;
    *n = d->n_skips;
    if (!d->is_shard && d->rows < 0) return 0; /* not counted yet */
    return d->bad.count == 0 || d->n_skips == d->bad.count;
}

/* ---- TSV stream: reader + engine -------------------------------------------------------------
 * The chunks of a TSV preprocessed in file order; shared by the counting pass and the loader's
 * producer. After tsv_stream_next, engine batches 0..T-1 hold the chunk's rows (end of file:
 * *more = 0). */
typedef struct tsv_stream {
    rec_tsv *r;
    rec_prep_engine *e;
} tsv_stream;

/* A prep engine for the data set's rows, its ops on the device the options asked for. A .rraw
 * on the GPU executor takes one thread: its rows are parsed already, and the threads would cut
 * each run into launches of a few hundred rows on as many streams. */
static rec_status engine_open(rec_prep_engine **e, const rec_dataset *d) {
    const int threads = d->is_raw && d->prep_device != REC_PREP_CPU ? 1 : d->prep_threads;
    REC_TRY(rec_prep_engine_init(e, d->plan, threads, &d->tsv, d->path));
    if (d->prep_device == REC_PREP_CPU) return REC_OK;
    REC_TRY(rec_prep_engine_set_device(*e, (rec_prep_device)d->prep_device));
    return d->corun ? rec_prep_engine_corun(*e, d->corun) : REC_OK;
}

const rec_spec *rec_dataset_spec(const rec_dataset *d) { return d->spec; }

rec_status rec_dataset_set_corun(rec_dataset *d, rec_corun *c) {
    if (c && (!d->plan || d->prep_device == REC_PREP_CPU))
        return rec_errorf(REC_EINVAL, "data set %s: only a spec's ops on the GPU executor co-run with training", d->path);
    d->corun = c;
    return REC_OK;
}

static rec_status tsv_stream_open(tsv_stream *ts, const rec_dataset *d) {
    memset(ts, 0, sizeof *ts);
    REC_TRY(rec_tsv_open_list(&ts->r, (const char *const *)d->parts, d->n_parts, &d->tsv, rec__loader_chunk_bytes));
    return engine_open(&ts->e, d);
}

static void tsv_stream_close(tsv_stream *ts) {
    rec_prep_engine_free(ts->e);
    rec_tsv_close(ts->r);
    memset(ts, 0, sizeof *ts);
}

static rec_status tsv_stream_next(tsv_stream *ts, int *more) {
    rec_text_chunk c;
    REC_TRY(rec_tsv_next(ts->r, &c));
    *more = c.len > 0;
    return *more ? rec_prep_engine_run(ts->e, &c) : REC_OK;
}

/* Appends input line `pos` to the data set's map of dropped rows. */
static rec_status add_skip(rec_dataset *d, int64_t pos) {
    if (d->n_skips == d->cap_skips) {
        const int64_t cap = d->cap_skips ? 2 * d->cap_skips : 1024;
        REC_TRY(rec_realloc((void **)&d->skips, (size_t)d->cap_skips * sizeof(int64_t), (size_t)cap * sizeof(int64_t),
                            "the map of skipped rows"));
        d->cap_skips = cap;
    }
    d->skips[d->n_skips++] = pos;
    return REC_OK;
}

/* Maps the `dropped` rows the engine dropped from chunk c, whose first line is input line
 * `pos`: the engine's report keeps only the first few locations of the whole input, so the
 * chunk's lines are parsed again one at a time, with the engine's options (the parser judges
 * each line alone, so a line fails alone as it failed in the chunk). Only chunks that dropped
 * rows are parsed again, on this thread; a count that disagrees is a bug, reported as such. */
static rec_status map_chunk_skips(rec_dataset *d, const rec_text_chunk *c, int64_t pos, int64_t dropped) {
    rec_raw_block raw;
    REC_TRY(rec_raw_block_init(&raw, 1));
    rec_status s = REC_OK;
    int64_t found = 0, i = 0;
    for (const char *p = c->text, *end = c->text + c->len; !s && p < end; i++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *q = nl ? nl + 1 : end;
        rec_bad_report one;
        memset(&one, 0, sizeof one);
        raw.n = 0;
        s = rec_tsv_parse(&d->tsv, c->path, p, (size_t)(q - p), c->first_line + i, &raw, &one);
        if (!s && one.count) found++, s = add_skip(d, pos + i);
        p = q;
    }
    rec_raw_block_free(&raw);
    if (!s && found != dropped)
        s = rec_errorf(REC_EINVAL, "%s:%lld: the prep engine dropped %lld rows of a chunk of %lld lines, and parsing its "
                       "lines one by one finds %lld (a bug: please report it with the file)", c->path,
                       (long long)c->first_line, (long long)dropped, (long long)c->n_lines, (long long)found);
    return s;
}

/* The counting pass: the rows the loader would produce, i.e. lines less the malformed ones
 * skipped in SKIP mode (in FAIL mode the first malformed line is the error; in SKIP mode
 * more than max_bad_share of them is). Runs the full parse + prep so that the count is
 * exactly what the producer will see. Keeps what SKIP mode dropped in d->bad and, with
 * map_skips, where each dropped row was in d->skips: lines the reader drops (over-long ones)
 * come just before the chunk it hands out next (they start its buffer, after every line
 * handed out before), the engine's in the chunk. Reads d->stop after every chunk. */
static rec_status count_tsv_rows(rec_dataset *d, int64_t *rows) {
    tsv_stream ts;
    rec_status s = tsv_stream_open(&ts, d);
    int64_t n = 0, pos = 0, reader_bad = 0;
    d->n_skips = 0;
    for (int more = 1; !s && more;) {
        rec_text_chunk c;
        s = rec_tsv_next(ts.r, &c);
        const int64_t long_lines = s ? 0 : rec_tsv_bad(ts.r)->count - reader_bad;
        reader_bad += long_lines;
        for (int64_t k = 0; !s && d->map_skips && k < long_lines; k++) s = add_skip(d, pos + k);
        pos += long_lines;
        more = !s && c.len > 0;
        const int64_t dropped0 = rec_prep_engine_bad(ts.e)->count;
        if (more) s = rec_prep_engine_run(ts.e, &c);
        for (int t = 0; !s && more && t < rec_prep_engine_threads(ts.e); t++)
            n += rec_prep_engine_batch(ts.e, t)->n;
        const int64_t dropped = rec_prep_engine_bad(ts.e)->count - dropped0;
        if (!s && more && d->map_skips && dropped) s = map_chunk_skips(d, &c, pos, dropped);
        pos += more ? c.n_lines : 0;
        if (!s && d->stop && *d->stop)
            s = rec_errorf(REC_ESTOPPED, "stopped by %s while counting the rows of %s (%lld lines read)",
                           rec_signal_name(*d->stop), d->path, (long long)pos);
    }
    if (ts.e) { /* the reader's first: a file's locations merge by line, another file's come after */
        d->bad = *rec_tsv_bad(ts.r);
        rec_bad_report_merge(&d->bad, rec_prep_engine_bad(ts.e));
    }
    if (!s) s = rec_bad_share_check(&d->tsv, d->path, n, &d->bad);
    tsv_stream_close(&ts);
    *rows = n;
    return s;
}

rec_status rec_dataset_rows(rec_dataset *d, int64_t *rows) {
    if (d->rows < 0 && d->offload && d->tsv.bad_rows != REC_BAD_ROWS_SKIP) {
        d->rows = rec_offload_lines(d->offload); /* every line is a row, or the error */
    } else if (d->rows < 0) {
        int64_t n;
        REC_TRY(count_tsv_rows(d, &n));
        d->rows = n;
    }
    *rows = d->rows;
    return REC_OK;
}

/* ---- loader --------------------------------------------------------------------------------- */

/* A reader of a .rraw data set: its own handles on the parts, RAW_ROWS (RAW_ROWS_GPU) of their
 * rows at a time, preprocessed by its own engine. A shuffled window's blocks with the GPU
 * executor are read by one reader a pool thread, each executor on a stream of its own: one
 * thread's executor waits for its copies back twice a block. */
typedef struct raw_reader {
    rec_rawcols **raws;         /* (n_parts) */
    rec_raw_block blk;
    rec_prep_engine *engine;
} raw_reader;

static rec_status raw_reader_open(raw_reader *r, const rec_dataset *d) {
    REC_TRY(rec_alloc((void **)&r->raws, (size_t)d->n_parts * sizeof *r->raws, "loader parts"));
    for (int k = 0; k < d->n_parts; k++) REC_TRY(rec_rawcols_open(&r->raws[k], d->parts[k]));
    REC_TRY(rec_raw_block_init(&r->blk, d->prep_device == REC_PREP_CPU ? RAW_ROWS : RAW_ROWS_GPU));
    return engine_open(&r->engine, d);
}

static void raw_reader_close(raw_reader *r, const rec_dataset *d) {
    for (int k = 0; r->raws && k < d->n_parts; k++) rec_rawcols_close(r->raws[k]);
    rec_free(r->raws);
    rec_raw_block_free(&r->blk);
    rec_prep_engine_free(r->engine);
}

struct rec_loader {
    rec_dataset *d;
    int64_t row0, row1, batch;
    int depth;
    rec_batch *slot;            /* (depth) the ring */
    rec_shard **shards;         /* shard data sets: (n_parts) this loader's own handles */
    rec_batch span;             /* several parts: the rows of one part, for a batch across parts */
    tsv_stream ts;              /* TSV data sets */
    raw_reader *rr;             /* .rraw data sets: (n_rr) readers, one a thread of the pool */
    int n_rr;
    int pieces;                 /* TSV with workers given a share of it: rows come from os */
    rec_offload_stream *os;     /* instead of ts */
    const rec_batch *parts[256];/* the run of rows produce_tsv appends next */

    /* shuffled order only (sh.block_rows > 0); the producer's alone */
    rec_shuffle sh;
    int64_t skip;               /* rows of the epoch's order to drop first */
    int64_t n_blocks;           /* ceil((row1 - row0) / K) */
    int64_t *order;             /* (n_blocks) shard: the epoch's block sequence */
    rec_batch *win;             /* (W) the window's blocks, K rows each at most */
    uint64_t *perm;             /* (W*K) the window's row order: block << 32 | row in block */
    uint8_t *single;            /* (F) every block of the window: feature f holds one unweighted id
                                 * a row, of one width */
    uint8_t *blk_single;        /* (W*F) one shard's blocks: the same of block i, from its directory */
    int64_t *next;              /* (W) the next row of each block to deal */
    rec_batch *out;             /* the ring slot being filled across windows, or NULL */
    rec_pool *pool;             /* shard, prep_threads > 1 (a GPU run): the checksums, the window's
                                 * reads and the gather on its threads; a shuffled .rraw on the GPU
                                 * executor: one thread a reader; else NULL */
    int64_t *blk_row0;          /* (W) the data set row of each window block's first row */

    /* staged (rec_loader_open_staged): windows go to the stager, batches are positions */
    rec_stager stg;
    const rec_stager *stager;   /* &stg, or NULL: batches are gathered */
    uint32_t *pos;              /* (depth x batch) each ring slot's staged positions */
    int64_t *slot_hi;           /* (depth) the last window (in staging order) a ring slot's rows come from */
    int64_t n_staged;           /* windows staged so far */
    int64_t released_hi;        /* the last window a released batch held rows of; -1 none (under mu) */
    rec_staged_batch sb;        /* what rec_loader_next_staged hands out */

    pthread_mutex_t mu;
    pthread_cond_t not_empty;   /* producer -> consumer: a slot was filled, or the end */
    pthread_cond_t not_full;    /* consumer -> producer: a slot was released, or stop */
    int head, held, filled;     /* see the ring protocol at the top */
    int done;                   /* the producer has published its last batch */
    int stop;                   /* close asked the producer to quit */
    rec_status err;             /* the producer's failure, returned after the ready batches */
    char msg[MSG_CAP];

    pthread_t th;
    int running;
    double wait_s;
};

/* Empties a batch for appending: n = 0, offsets[0] = 0 for every feature. */
static void batch_clear(rec_batch *b) {
    b->n = 0;
    for (int32_t f = 0; f < b->n_sparse; f++) b->sparse[f].offsets[0] = 0;
}

/* Producer: the slot to fill next, once one is free; NULL when the loader is being closed.
 * The slot is emptied (batch_clear). */
static rec_batch *slot_acquire(rec_loader *l) {
    pthread_mutex_lock(&l->mu);
    while (!l->stop && l->held + l->filled == l->depth) pthread_cond_wait(&l->not_full, &l->mu);
    rec_batch *b = l->stop ? NULL : &l->slot[(l->head + l->held + l->filled) % l->depth];
    pthread_mutex_unlock(&l->mu);
    if (b) batch_clear(b);
    return b;
}

/* Producer: makes the slot taken by slot_acquire visible to the consumer. */
static void slot_publish(rec_loader *l) {
    pthread_mutex_lock(&l->mu);
    l->filled++;
    pthread_cond_signal(&l->not_empty);
    pthread_mutex_unlock(&l->mu);
}

/* Producer: the end of the stream, with the status of the producer (its message is this
 * thread's last error when s != REC_OK). */
static void producer_finish(rec_loader *l, rec_status s) {
    pthread_mutex_lock(&l->mu);
    l->err = s;
    if (s) snprintf(l->msg, sizeof l->msg, "%s", rec_errmsg());
    l->done = 1;
    pthread_cond_signal(&l->not_empty);
    pthread_mutex_unlock(&l->mu);
}

/* Refuses a batch (its first row is data set row `row0`) with a row no model can train on
 * (rec_batch_first_bad_value): caught here, such a row would otherwise turn weights into NaN
 * while ReLU keeps the loss finite, and training would end with an AUC and NaN parameters. */
static rec_status check_values(const rec_loader *l, const rec_batch *b, int64_t row0) {
    int32_t c;
    const int64_t r = rec_batch_first_bad_value(b, &c);
    if (r < 0) return REC_OK;
    if (c < 0)
        return rec_errorf(REC_EFORMAT, "%s: row %lld: label %g, not 0 or 1", l->d->path, (long long)(row0 + r),
                          (double)b->label[r]);
    return rec_errorf(REC_EFORMAT,
                      "%s: row %lld: dense value %d is %g, not a finite number, and a model cannot train on "
                      "it. The spec's operators made it " REC_NONFINITE_FIX ", and prepare the data again", l->d->path, (long long)(row0 + r), c, (double)b->dense[r * b->n_dense + c]);
}

/* Data set rows [r, r+n) of a .rraw data set into b (b->n = n): read and preprocessed
 * RAW_ROWS at a time, the engine's batches appended in order. */
static rec_status read_raw_rows(rec_loader *l, int thread, int64_t r, int64_t n, rec_batch *b) {
    const int64_t *row0 = l->d->part_row0;
    raw_reader *rr = &l->rr[thread]; /* (the pool has n_rr threads; off it, 0) */
    batch_clear(b);
    for (int64_t done = 0; done < n;) {
        int k = 0;
        while (r + done >= row0[k + 1]) k++;
        int64_t m = row0[k + 1] - (r + done);
        if (m > n - done) m = n - done;
        if (m > rr->blk.cap) m = rr->blk.cap;
        REC_TRY(rec_rawcols_read(rr->raws[k], r + done - row0[k], m, &rr->blk));
        REC_TRY(rec_prep_engine_run_raw(rr->engine, &rr->blk));
        for (int t = 0; t < rec_prep_engine_threads(rr->engine); t++) {
            const rec_batch *src = rec_prep_engine_batch(rr->engine, t);
            REC_TRY(rec_batch_append_rows(b, src, 0, src->n));
        }
        done += m;
    }
    return REC_OK;
}

/* Data set rows [r, r+n) into b (b->n = n), from the parts that hold them: for a shard, one
 * part reads straight into b, rows across parts go through the span batch; for a .rraw, the
 * reader of pool thread `thread` (0 off the pool). */
static rec_status read_rows(rec_loader *l, int thread, int64_t r, int64_t n, rec_batch *b) {
    if (l->d->is_raw) return read_raw_rows(l, thread, r, n, b);
    const int64_t *row0 = l->d->part_row0;
    int k = 0;
    while (r >= row0[k + 1]) k++;
    if (r + n <= row0[k + 1]) return rec_shard_read(l->shards[k], r - row0[k], n, b);
    b->n = 0;
    for (int64_t done = 0; done < n; k++) {
        const int64_t m = n - done < row0[k + 1] - (r + done) ? n - done : row0[k + 1] - (r + done);
        if (m <= 0) continue;
        REC_TRY(rec_shard_read(l->shards[k], r + done - row0[k], m, &l->span));
        REC_TRY(rec_batch_append_rows(b, &l->span, 0, m));
        done += m;
    }
    return REC_OK;
}

/* ---- shuffled order ---------------------------------------------------------------------------- */

/* The RNG stream of epoch e's block permutation (w = -1) or of its window w's row order. */
static uint64_t shuffle_stream(int64_t epoch, int64_t w) {
    return (uint64_t)epoch << 32 | (w < 0 ? 0xffffffffu : (uint64_t)w);
}

/* Rows of block `blk` of the range: K, or fewer for the last one. */
static int64_t block_len(const rec_loader *l, int64_t blk) {
    const int64_t r0 = l->row0 + blk * l->sh.block_rows, left = l->row1 - r0;
    return left < l->sh.block_rows ? left : l->sh.block_rows;
}

/* The labels and dense values of window rows code[0..k) into dst's rows at.. */
static void gather_dense(rec_batch *dst, const rec_batch *win, const uint64_t *code, int64_t k, int64_t at) {
    const int32_t dn = dst->n_dense;
    for (int64_t i = 0; i < k; i++) {
        const rec_batch *s = &win[code[i] >> 32];
        const int64_t r = (int64_t)(code[i] & 0xffffffffu);
        dst->label[at + i] = s->label[r];
        float *to = dst->dense + (at + i) * dn;
        const float *from = s->dense + r * dn;
        for (int32_t c = 0; c < dn; c++) to[c] = from[c];  /* a few values: no memcpy call */
    }
}

/* Does block b's feature f hold one id a row (Criteo's one-hot features)? From its offsets. */
static int one_id_a_row(const rec_batch *b, int32_t f) {
    const rec_jagged *j = &b->sparse[f];
    for (int64_t r = 1; r <= b->n; r++)
        if (j->offsets[r] != j->offsets[0] + r) return 0;
    return 1;
}

/* Sparse feature f of window rows code[0..k) into dst's rows at..: its ids take the widest
 * width among its sources (a shard's blocks all share one). Touches feature f alone. Where
 * every block holds one unweighted id a row of one width (single), the row's id is at its
 * row and its bag's length is 1: no offsets are read. */
static rec_status gather_feature(rec_batch *dst, const rec_batch *win, const uint64_t *code, int64_t k, int64_t at,
                                 int32_t f, int single) {
    rec_jagged *dj = &dst->sparse[f];
    if (single) {
        const int wide = win[code[0] >> 32].sparse[f].wide;
        if (wide != dj->wide && dj->offsets[at] == 0) REC_TRY(rec_batch_set_wide(dst, f, wide));
        if (wide == dj->wide && !dj->weights) {
            REC_TRY(rec_batch_reserve_nnz(dst, f, dj->offsets[at] + k, 0));
            const int64_t o = dj->offsets[at];
            for (int64_t i = 0; i < k; i++) {
                const rec_jagged *sj = &win[code[i] >> 32].sparse[f];
                const int64_t r = sj->offsets[0] + (int64_t)(code[i] & 0xffffffffu);
                if (wide) dj->ids64[o + i] = sj->ids64[r];
                else dj->ids32[o + i] = sj->ids32[r];
                dj->offsets[at + i + 1] = o + i + 1;
            }
            return REC_OK;
        }
    }
    int64_t add = 0;
    int wide = 0, weighted = 0;
    for (int64_t i = 0; i < k; i++) {
        const rec_jagged *sj = &win[code[i] >> 32].sparse[f];
        const int64_t r = (int64_t)(code[i] & 0xffffffffu);
        add += sj->offsets[r + 1] - sj->offsets[r];
        wide |= sj->wide;
        weighted |= sj->weights != NULL;
    }
    if (wide && !dj->wide) REC_TRY(rec_batch_set_wide(dst, f, 1));
    else if (!wide && dj->wide && dj->offsets[at] == 0) REC_TRY(rec_batch_set_wide(dst, f, 0));
    REC_TRY(rec_batch_reserve_nnz(dst, f, dj->offsets[at] + add, weighted || dj->weights != NULL));
    int64_t o = dj->offsets[at];
    for (int64_t i = 0; i < k; i++) {  /* bags of a few ids (mostly one): no memcpy call */
        const rec_jagged *sj = &win[code[i] >> 32].sparse[f];
        const int64_t r = (int64_t)(code[i] & 0xffffffffu), first = sj->offsets[r];
        const int64_t len = sj->offsets[r + 1] - first;
        if (!dj->wide && len == 1)
            dj->ids32[o] = sj->ids32[first];
        else if (!dj->wide)
            for (int64_t q = 0; q < len; q++) dj->ids32[o + q] = sj->ids32[first + q];
        else if (sj->wide)
            for (int64_t q = 0; q < len; q++) dj->ids64[o + q] = sj->ids64[first + q];
        else
            for (int64_t q = 0; q < len; q++) dj->ids64[o + q] = sj->ids32[first + q];
        if (dj->weights)
            for (int64_t q = 0; q < len; q++) dj->weights[o + q] = sj->weights ? sj->weights[first + q] : 1.0f;
        o += len;
        dj->offsets[at + i + 1] = o;
    }
    return REC_OK;
}

/* gather_rows' tasks: -1 + task = the dense part (task 0) or a sparse feature. */
typedef struct gather_job {
    rec_batch *dst;
    const rec_batch *win;
    const uint64_t *code;
    int64_t k, at;
    const uint8_t *single; /* (F) every block of the window: one unweighted id a row, one width */
} gather_job;

static rec_status gather_task(void *ctx, int64_t task, int thread) {
    const gather_job *j = ctx;
    if (task == 0) {
        gather_dense(j->dst, j->win, j->code, j->k, j->at);
        return REC_OK;
    }
    return gather_feature(j->dst, j->win, j->code, j->k, j->at, (int32_t)task - 1, j->single[task - 1]);
}

/* l->single[f] for the window's nb blocks: every block holds one unweighted id a row in
 * feature f, of one width. A single shard's directory says which blocks do (blk_single, from
 * window_task); other blocks (.rraw, TSV, a list of shards) are scanned. */
typedef struct single_job {
    rec_loader *l;
    int nb;
} single_job;

static int from_directory(const rec_loader *l) { return l->d->is_shard && l->d->n_parts == 1; }

static rec_status single_task(void *ctx, int64_t f, int thread) {
    const single_job *j = ctx;
    const rec_loader *l = j->l;
    const int32_t F = l->d->n_sparse;
    int one = 1;
    for (int i = 0; one && i < j->nb; i++) {
        const rec_jagged *s = &l->win[i].sparse[f];
        one = !s->weights && s->wide == l->win[0].sparse[f].wide &&
              (from_directory(l) ? l->blk_single[i * F + f] : one_id_a_row(&l->win[i], (int32_t)f));
    }
    l->single[f] = (uint8_t)one;
    return REC_OK;
}

/* Appends the window rows code[0..k) (code = block << 32 | row: that row of win[block]) to
 * dst, which must have room for k more rows: what batch_append_rows does for a run of rows,
 * gathered. The dense part and each feature are independent tasks, on the pool's threads
 * where there is one (a GPU trains and the CPUs are free: at batch 65536 one thread gathered
 * a batch slower than the GPU trained on it) and the run is long enough to pay. Fails only on
 * allocation, leaving dst->n unchanged. */
static rec_status gather_rows(rec_batch *dst, const rec_batch *win, const uint64_t *code, int64_t k,
                              const uint8_t *single, rec_pool *pool) {
    gather_job j = {dst, win, code, k, dst->n, single};
    const int64_t tasks = (int64_t)dst->n_sparse + 1;
    if (pool && k >= 1024) REC_TRY(rec_pool_run(pool, tasks, gather_task, &j));
    else
        for (int64_t t = 0; t < tasks; t++) REC_TRY(gather_task(&j, t, 0));
    dst->n = j.at + k;
    return REC_OK;
}

/* Staged: waits until the slot that the next window takes holds no rows of an unreleased
 * batch (the window S before it is free once a batch with rows of a later window has been
 * released: batches take windows in order), then hands the window to the stager. *quit = 1
 * when the loader is being closed. */
static rec_status stage_window(rec_loader *l, int nb, int *slot, int *quit) {
    const int64_t c = l->n_staged, S = l->stager->n_slots;
    pthread_mutex_lock(&l->mu);
    while (!l->stop && c >= S && l->released_hi < c - S + 1) pthread_cond_wait(&l->not_full, &l->mu);
    *quit = l->stop;
    pthread_mutex_unlock(&l->mu);
    if (*quit) return REC_OK;
    *slot = (int)(c % S);
    int64_t at = 0; /* l->next becomes each block's first row in the window */
    for (int i = 0; i < nb; i++) l->next[i] = at, at += l->win[i].n;
    REC_TRY(l->stager->stage(l->stager->ctx, *slot, l->win, nb, l->single, l->blk_row0));
    l->n_staged++;
    return REC_OK;
}

/* Staged: the window rows code[0..k) appended to l->out as positions in staging slot `slot`
 * (the row's place in the window: its block's first row plus its row in the block). */
static void stage_positions(rec_loader *l, int slot, const uint64_t *code, int64_t k) {
    const int64_t ring = l->out - l->slot, *base = l->next; /* l->next: emit_window is done with it */
    uint32_t *pos = l->pos + ring * l->batch + l->out->n;
    const int64_t at = (int64_t)slot * l->stager->slot_rows;
    for (int64_t i = 0; i < k; i++) pos[i] = (uint32_t)(at + base[code[i] >> 32] + (int64_t)(code[i] & 0xffffffffu));
    l->out->n += k;
    l->slot_hi[ring] = l->n_staged - 1;
}

/* Window w, read into win[0..nb): draws its row order (the block of each position: a
 * Fisher-Yates permutation of the block labels from the window's RNG stream; each block's
 * rows in file order) and gathers its rows from position `skip` on into ring batches,
 * publishing each that fills; the one left part-full waits in l->out for the next window.
 * Each block is read front to back, so the gather streams through cache lines. *quit = 1
 * when the loader is being closed. */
static rec_status emit_window(rec_loader *l, int64_t w, int nb, int64_t skip, int *quit) {
    int64_t n = 0, *next = l->next;
    for (int i = 0; i < nb; i++)
        for (int64_t r = 0; r < l->win[i].n; r++) l->perm[n++] = (uint64_t)i;
    rec_rng rng;
    rec_rng_seed(&rng, l->sh.seed, shuffle_stream(l->sh.epoch, w));
    for (int64_t i = n - 1; i > 0; i--) {
        const int64_t j = (int64_t)rec_rng_below(&rng, (uint64_t)i + 1);
        const uint64_t t = l->perm[i];
        l->perm[i] = l->perm[j];
        l->perm[j] = t;
    }
    for (int i = 0; i < nb; i++) next[i] = 0;
    for (int64_t i = 0; i < n; i++) l->perm[i] = l->perm[i] << 32 | (uint64_t)next[l->perm[i]]++;
    single_job sj = {l, nb};
    const int32_t F = l->d->n_sparse;
    if (l->pool && !from_directory(l)) REC_TRY(rec_pool_run(l->pool, F, single_task, &sj)); /* scans */
    else
        for (int32_t f = 0; f < F; f++) single_task(&sj, f, 0);
    *quit = 0;
    int slot = 0;
    if (l->stager) {
        REC_TRY(stage_window(l, nb, &slot, quit));
        if (*quit) return REC_OK;
    }
    for (int64_t k = skip; k < n;) {
        if (!l->out && !(l->out = slot_acquire(l))) {
            *quit = 1;
            return REC_OK;
        }
        int64_t m = n - k < l->batch - l->out->n ? n - k : l->batch - l->out->n;
        if (l->stager) stage_positions(l, slot, l->perm + k, m);
        else REC_TRY(gather_rows(l->out, l->win, l->perm + k, m, l->single, l->pool));
        k += m;
        if (l->out->n == l->batch) {
            slot_publish(l);
            l->out = NULL;
        }
    }
    return REC_OK;
}

/* The end of a shuffled range: publishes the short last batch, if any. */
static void flush_out(rec_loader *l) {
    if (l->out && l->out->n > 0) slot_publish(l);
    l->out = NULL;
}

/* read_window's tasks: block i of the window. */
typedef struct window_job {
    rec_loader *l;
    const int64_t *blk;
} window_job;

static rec_status window_task(void *ctx, int64_t i, int thread) {
    const window_job *j = ctx;
    rec_loader *l = j->l;
    const int64_t r0 = l->row0 + j->blk[i] * l->sh.block_rows, n = block_len(l, j->blk[i]);
    l->blk_row0[i] = r0;
    REC_TRY(read_rows(l, thread, r0, n, &l->win[i]));
    const int32_t F = l->d->n_sparse;
    for (int32_t f = 0; from_directory(l) && f < F; f++) /* (single_task reads them) */
        l->blk_single[i * F + f] = (uint8_t)rec_shard_single(l->shards[0], f, r0, n);
    return check_values(l, &l->win[i], r0);
}

/* The window's blocks blk[0..nb) into win[0..nb), each checked as a file-order batch is. On
 * the pool's threads where there is one and the data set is one shard (first the groups the
 * window touches are checked, rec_shard_check_rows, after which the reads share nothing) or a
 * .rraw (each thread its own reader: handles, raw block, GPU executor). */
static rec_status read_window(rec_loader *l, const int64_t *blk, int nb) {
    window_job j = {l, blk};
    if (!l->pool || (!l->d->is_raw && l->d->n_parts != 1)) {
        for (int i = 0; i < nb; i++) REC_TRY(window_task(&j, i, 0));
        return REC_OK;
    }
    for (int i = 0; !l->d->is_raw && i < nb; i++) /* (a .rraw: each thread's reader has its own handles) */
        REC_TRY(rec_shard_check_rows(l->shards[0], l->row0 + blk[i] * l->sh.block_rows, block_len(l, blk[i])));
    return rec_pool_run(l->pool, nb, window_task, &j);
}

/* A shard in shuffled order: window by window of the block permutation, each block one
 * rec_shard_read (checked as a file-order batch is), windows before the skip unread. */
static rec_status produce_shard_shuffled(rec_loader *l) {
    const int64_t W = l->sh.buffer_blocks;
    int64_t skip = l->skip;
    for (int64_t w = 0; w * W < l->n_blocks; w++) {
        const int nb = (int)(l->n_blocks - w * W < W ? l->n_blocks - w * W : W);
        const int64_t *blk = l->order + w * W;
        int64_t rows = 0;
        for (int i = 0; i < nb; i++) rows += block_len(l, blk[i]);
        if (skip >= rows) {
            skip -= rows;
            continue;
        }
        REC_TRY(read_window(l, blk, nb));
        int quit;
        REC_TRY(emit_window(l, w, nb, skip, &quit));
        if (quit) return REC_OK;
        skip = 0;
    }
    flush_out(l);
    return REC_OK;
}

/* ---- producers ------------------------------------------------------------------------------ */

static rec_status produce_shard(rec_loader *l) {
    if (l->sh.block_rows > 0) return produce_shard_shuffled(l);
    for (int64_t r = l->row0; r < l->row1; r += l->batch) {
        rec_batch *b = slot_acquire(l);
        if (!b) return REC_OK;
        int64_t n = l->row1 - r < l->batch ? l->row1 - r : l->batch;
        REC_TRY(read_rows(l, 0, r, n, b));
        REC_TRY(check_values(l, b, r));
        slot_publish(l);
    }
    return REC_OK;
}

/* The rows of each preprocessed chunk go, in file order, into the ring's batches: rows before
 * row0 are skipped, reading stops once row1 is reached. A batch is published when it holds
 * `batch` rows or the range ends, so batch boundaries fall at row0 + i*batch whatever the
 * chunk boundaries. A chunk that fails (malformed line in FAIL mode, I/O) fails the batch
 * that needed its rows; the batches before it have already been published.
 * Shuffled, the rows fill the window's blocks of K rows instead (its blocks are the file's,
 * in order), and each full window (or the range's end) is emitted in its row order; the
 * windows before the skip are read past, as rows before row0 are. */
static rec_status produce_tsv(rec_loader *l) {
    const int shuffled = l->sh.block_rows > 0;
    const int64_t cap = shuffled ? l->sh.block_rows : l->batch;  /* rows of a block or a batch */
    const int64_t WK = l->sh.block_rows * l->sh.buffer_blocks;
    int64_t w = shuffled ? l->skip / WK : 0, skip = shuffled ? l->skip % WK : 0;
    const int64_t start = l->row0 + w * WK;  /* first row read into a batch or block */
    int64_t row = 0;                 /* data set row of the next row out of the engine */
    rec_batch *b = NULL;
    int nb = 0, n_parts = 0;         /* nb: the window's blocks filled */
    const rec_batch *const *parts = l->parts;
    if (l->pieces) { /* in FAIL mode rows are lines: start at the piece holding `start` */
        const int skip_mode = l->d->tsv.bad_rows == REC_BAD_ROWS_SKIP;
        REC_TRY(rec_offload_stream_open(&l->os, l->d->offload, skip_mode ? 0 : start, skip_mode ? -1 : l->row1, &row));
    }
    while (row < l->row1) {
        if (l->os) {
            REC_TRY(rec_offload_stream_next(l->os, &parts, &n_parts));
        } else {
            int more;
            REC_TRY(tsv_stream_next(&l->ts, &more));
            n_parts = more ? rec_prep_engine_threads(l->ts.e) : 0;
            for (int t = 0; t < n_parts; t++) l->parts[t] = rec_prep_engine_batch(l->ts.e, t);
        }
        if (n_parts == 0) break;
        for (int t = 0; t < n_parts && row < l->row1; t++) {
            const rec_batch *src = parts[t];
            int64_t r = 0;
            if (row < start) {       /* skip whole rows before the range */
                int64_t k = start - row < src->n ? start - row : src->n;
                r += k;
                row += k;
            }
            while (r < src->n && row < l->row1) {
                if (!b && shuffled) batch_clear(b = &l->win[nb]);
                if (!b && !(b = slot_acquire(l))) return REC_OK;
                int64_t k = src->n - r;
                if (k > cap - b->n) k = cap - b->n;
                if (k > l->row1 - row) k = l->row1 - row;
                REC_TRY(rec_batch_append_rows(b, src, r, k));
                r += k;
                row += k;
                if (b->n == cap || row == l->row1) {
                    REC_TRY(check_values(l, b, row - b->n));
                    if (shuffled) l->blk_row0[nb] = row - b->n;
                    b = NULL;
                    if (!shuffled) {
                        slot_publish(l);
                    } else if (++nb == l->sh.buffer_blocks || row == l->row1) {
                        int quit;
                        REC_TRY(emit_window(l, w++, nb, skip, &quit));
                        if (quit) return REC_OK;
                        skip = 0;
                        nb = 0;
                    }
                }
            }
        }
    }
    if (row < l->row1)
        return rec_errorf(REC_EFORMAT, "%s: ended after %lld rows while rows [%lld, %lld) were asked for "
                          "(did the file change after it was counted?)", l->d->path, (long long)row,
                          (long long)l->row0, (long long)l->row1);
    if (shuffled) flush_out(l);
    return REC_OK;
}

static void *producer_main(void *arg) {
    rec_loader *l = arg;
    rec_status s = l->d->is_shard || l->d->is_raw ? produce_shard(l) : produce_tsv(l);
    producer_finish(l, s);
    return NULL;
}

/* The shuffled order's buffers: W block batches of K rows, the window's row order and, for
 * a shard, the epoch's block permutation (Fisher-Yates from its RNG stream). */
static rec_status shuffle_init(rec_loader *l) {
    const int64_t K = l->sh.block_rows, W = l->sh.buffer_blocks;
    l->n_blocks = (l->row1 - l->row0 + K - 1) / K;
    REC_TRY(rec_alloc((void **)&l->win, (size_t)W * sizeof(rec_batch), "shuffle buffer"));
    for (int64_t i = 0; i < W; i++) REC_TRY(rec_batch_init(&l->win[i], K, l->d->n_dense, l->d->n_sparse, 1));
    REC_TRY(rec_alloc((void **)&l->perm, (size_t)(W * K) * sizeof(uint64_t), "shuffle order"));
    REC_TRY(rec_alloc((void **)&l->single, (size_t)l->d->n_sparse + 1, "shuffle order"));
    REC_TRY(rec_alloc((void **)&l->blk_single, (size_t)(W * l->d->n_sparse) + 1, "shuffle order"));
    REC_TRY(rec_alloc((void **)&l->next, (size_t)W * sizeof(int64_t), "shuffle order"));
    REC_TRY(rec_alloc((void **)&l->blk_row0, (size_t)W * sizeof(int64_t), "shuffle order"));
    if (!l->d->is_shard && !l->d->is_raw) return REC_OK;
    REC_TRY(rec_alloc((void **)&l->order, (size_t)(l->n_blocks + 1) * sizeof(int64_t), "shuffle block order"));
    rec_rng rng;
    rec_rng_seed(&rng, l->sh.seed, shuffle_stream(l->sh.epoch, -1));
    for (int64_t i = 0; i < l->n_blocks; i++) l->order[i] = i;
    for (int64_t i = l->n_blocks - 1; i > 0; i--) {
        const int64_t j = (int64_t)rec_rng_below(&rng, (uint64_t)i + 1), t = l->order[i];
        l->order[i] = l->order[j];
        l->order[j] = t;
    }
    return REC_OK;
}

static rec_status open_loader(rec_loader **out, rec_dataset *d, int64_t row0, int64_t row1, int64_t batch, int depth,
                              const rec_shuffle *sh, int64_t skip, const rec_stager *st);

rec_status rec_loader_open(rec_loader **out, rec_dataset *d, int64_t row0, int64_t row1,
                           int64_t batch, int depth) {
    return rec_loader_open_order(out, d, row0, row1, batch, depth, NULL, 0);
}

/* Validates the range against N (a TSV is counted here if it was not yet) and the order's
 * sizes, allocates the ring, the shuffle buffers and the producer's reader, and starts the
 * producer. Every buffer of the steady state is allocated here. */
rec_status rec_loader_open_order(rec_loader **out, rec_dataset *d, int64_t row0, int64_t row1,
                                 int64_t batch, int depth, const rec_shuffle *sh, int64_t skip) {
    return open_loader(out, d, row0, row1, batch, depth, sh, skip, NULL);
}

int rec_loader_stage_slots(int64_t batch, const rec_shuffle *sh) {
    const int64_t window = sh->block_rows * sh->buffer_blocks;
    return (int)((batch + window - 1) / window) + 2;
}

rec_status rec_loader_open_staged(rec_loader **out, rec_dataset *d, int64_t row0, int64_t row1, int64_t batch, int depth,
                                  const rec_shuffle *sh, int64_t skip, const rec_stager *st) {
    *out = NULL;
    if (!sh || sh->block_rows < 1 || sh->buffer_blocks < 1)
        return rec_errorf(REC_EINVAL, "%s: staged batches are read in shuffled order (blocks of at least one row, "
                          "windows of at least one block)", d->path);
    if (st->n_slots < rec_loader_stage_slots(batch, sh) || st->slot_rows < sh->block_rows * sh->buffer_blocks ||
        (uint64_t)st->n_slots * (uint64_t)st->slot_rows > UINT32_MAX)
        return rec_errorf(REC_EINVAL, "%s: %d staging slots of %lld rows for batches of %lld and windows of %lld rows: "
                          "it takes %d slots of a window's rows at least, and fewer than 2^32 rows in all", d->path,
                          st->n_slots, (long long)st->slot_rows, (long long)batch,
                          (long long)(sh->block_rows * sh->buffer_blocks), rec_loader_stage_slots(batch, sh));
    return open_loader(out, d, row0, row1, batch, depth, sh, skip, st);
}

rec_status rec_loader_next_staged(rec_loader *l, const rec_staged_batch **sb) {
    const rec_batch *b;
    *sb = NULL;
    REC_TRY(rec_loader_next(l, &b));
    if (!b) return REC_OK;
    l->sb.n = b->n;
    l->sb.pos = l->pos + (b - l->slot) * l->batch;
    *sb = &l->sb;
    return REC_OK;
}

static rec_status open_loader(rec_loader **out, rec_dataset *d, int64_t row0, int64_t row1, int64_t batch, int depth,
                              const rec_shuffle *sh, int64_t skip, const rec_stager *st) {
    *out = NULL;
    if (batch < 1) return rec_errorf(REC_EINVAL, "%s: batch size must be at least 1 (got %lld)", d->path, (long long)batch);
    if (depth < 2) return rec_errorf(REC_EINVAL, "%s: loader depth must be at least 2 batches (got %d)", d->path, depth);
    if (sh && (sh->block_rows < 1 || sh->buffer_blocks < 1 || sh->block_rows > ((int64_t)1 << 31) / sh->buffer_blocks))
        return rec_errorf(REC_EINVAL, "%s: shuffle blocks of %lld rows, %lld per buffer: each must be at least 1 and "
                          "the buffer at most 2^31 rows", d->path, (long long)sh->block_rows, (long long)sh->buffer_blocks);
    int64_t n;
    REC_TRY(rec_dataset_rows(d, &n));
    if (row0 < 0 || row0 > row1 || row1 > n)
        return rec_errorf(REC_EINVAL, "%s: rows [%lld, %lld) asked for; the data set has %lld rows, "
                          "so the range must satisfy 0 <= row0 <= row1 <= %lld", d->path, (long long)row0,
                          (long long)row1, (long long)n, (long long)n);
    if (skip < 0 || skip > row1 - row0 || (skip && !sh))
        return rec_errorf(REC_EINVAL, "%s: cannot skip %lld rows of a range of %lld%s", d->path, (long long)skip,
                          (long long)(row1 - row0), sh ? "" : " in file order (start the range later instead)");
    rec_loader *l;
    REC_TRY(rec_alloc((void **)&l, sizeof *l, "loader"));
    l->d = d;
    l->row0 = row0;
    l->row1 = row1;
    l->batch = batch;
    l->depth = depth;
    if (sh) l->sh = *sh;
    l->skip = skip;
    if (st) l->stg = *st, l->stager = &l->stg;
    l->released_hi = -1;
    /* a split that sends nothing away reads the file as a loader without workers does */
    l->pieces = d->offload && rec_offload_ratio(d->offload) > 0;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->not_empty, NULL);
    pthread_cond_init(&l->not_full, NULL);
    rec_status s = rec_alloc((void **)&l->slot, (size_t)depth * sizeof(rec_batch), "loader ring");
    /* staged: a ring slot holds positions (and its row count) */
    for (int i = 0; !s && i < depth; i++) s = rec_batch_init(&l->slot[i], batch, st ? 0 : d->n_dense, st ? 0 : d->n_sparse, 1);
    if (!s && st) s = rec_alloc((void **)&l->pos, (size_t)(depth * batch) * sizeof(uint32_t), "staged batches");
    if (!s && st) s = rec_alloc((void **)&l->slot_hi, (size_t)depth * sizeof(int64_t), "staged batches");
    if (!s && sh) s = shuffle_init(l);
    if (!s && d->is_shard) {
        s = rec_alloc((void **)&l->shards, (size_t)d->n_parts * sizeof *l->shards, "loader shards");
        if (!s && d->prep_threads > 1) s = rec_pool_init(&l->pool, d->prep_threads);
        for (int k = 0; !s && k < d->n_parts; k++) {
            s = rec_shard_open(&l->shards[k], d->parts[k]);
            if (!s) rec_shard_set_pool(l->shards[k], l->pool);
        }
        const int64_t most = sh && sh->block_rows > batch ? sh->block_rows : batch;  /* rows of one read */
        if (!s && d->n_parts > 1) s = rec_batch_init(&l->span, most, d->n_dense, d->n_sparse, 1);
    } else if (!s && d->is_raw) {
        /* the GPU executor in shuffled order: a reader a thread (the CPUs' engine has its own) */
        const int most = d->prep_threads < RAW_READERS_GPU ? d->prep_threads : RAW_READERS_GPU;
        const int n = sh && d->prep_device != REC_PREP_CPU && most > 1 ? most : 1;
        s = rec_alloc((void **)&l->rr, (size_t)n * sizeof *l->rr, "loader readers");
        if (!s) l->n_rr = n; /* (zeroed: a reader not yet opened closes as nothing) */
        for (int t = 0; !s && t < n; t++) s = raw_reader_open(&l->rr[t], d);
        if (!s && n > 1) s = rec_pool_init(&l->pool, n);
    } else if (!s && !l->pieces) {
        s = tsv_stream_open(&l->ts, d);
    }
    if (!s) {
        if (pthread_create(&l->th, NULL, producer_main, l) != 0)
            s = rec_errorf(REC_ENOMEM, "%s: cannot start the loader thread (out of resources)", d->path);
        else l->running = 1;
    }
    if (s) {
        rec_loader_close(l);
        return s;
    }
    *out = l;
    return REC_OK;
}

/* Releases the batch of the previous call, then waits for the next filled one. At the end
 * *b = NULL; if the producer failed, its status and message are returned instead, once every
 * batch made before the failure has been delivered (and again on any later call). */
rec_status rec_loader_next(rec_loader *l, const rec_batch **b) {
    *b = NULL;
    pthread_mutex_lock(&l->mu);
    if (l->held) {
        if (l->stager && l->slot_hi[l->head] > l->released_hi) l->released_hi = l->slot_hi[l->head];
        l->head = (l->head + 1) % l->depth;
        l->held = 0;
        pthread_cond_signal(&l->not_full);
    }
    if (!l->filled && !l->done) {
        double t0 = rec_now();
        while (!l->filled && !l->done) pthread_cond_wait(&l->not_empty, &l->mu);
        l->wait_s += rec_now() - t0;
    }
    rec_status s = REC_OK;
    if (l->filled) {
        l->filled--;
        l->held = 1;
        *b = &l->slot[l->head];
    } else if (l->err) {
        s = l->err;
        rec_error_set_msg(l->msg);
    }
    pthread_mutex_unlock(&l->mu);
    return s;
}

void rec_loader_close(rec_loader *l) {
    if (!l) return;
    if (l->running) {
        pthread_mutex_lock(&l->mu);
        l->stop = 1;
        pthread_cond_broadcast(&l->not_full);
        pthread_mutex_unlock(&l->mu);
        pthread_join(l->th, NULL);
    }
    tsv_stream_close(&l->ts);
    for (int t = 0; t < l->n_rr; t++) raw_reader_close(&l->rr[t], l->d);
    rec_free(l->rr);
    rec_offload_stream_close(l->os);
    for (int k = 0; l->shards && k < l->d->n_parts; k++) rec_shard_close(l->shards[k]);
    rec_free(l->shards);
    rec_pool_free(l->pool);
    rec_batch_free(&l->span);
    for (int i = 0; l->slot && i < l->depth; i++) rec_batch_free(&l->slot[i]);
    rec_free(l->slot);
    for (int64_t i = 0; l->win && i < l->sh.buffer_blocks; i++) rec_batch_free(&l->win[i]);
    rec_free(l->win);
    rec_free(l->single);
    rec_free(l->blk_single);
    rec_free(l->perm);
    rec_free(l->next);
    rec_free(l->blk_row0);
    rec_free(l->pos);
    rec_free(l->slot_hi);
    rec_free(l->order);
    pthread_cond_destroy(&l->not_full);
    pthread_cond_destroy(&l->not_empty);
    pthread_mutex_destroy(&l->mu);
    rec_free(l);
}

double rec_loader_wait_seconds(const rec_loader *l) { return l->wait_s; }

rec_status rec_dataset_digest(rec_dataset *d, int64_t row1, uint64_t *digest) {
    const int64_t n = row1 < REC_CKPT_DIGEST_ROWS ? row1 : REC_CKPT_DIGEST_ROWS;
    rec_loader *l = NULL;
    const rec_batch *b = NULL;
    *digest = 0;
    if (n < 1) return REC_OK;
    rec_status s = rec_loader_open(&l, d, 0, n, n, 2);
    if (!s) s = rec_loader_next(l, &b);
    if (!s && b) *digest = rec_batch_digest(b);
    rec_loader_close(l);
    return s;
}

rec_status rec_dataset_offload(rec_dataset *d, const rec_offload_opts *o, int64_t batch, rec_offload **out) {
    *out = NULL;
    if (d->is_shard)
        return rec_errorf(REC_EINVAL, "%s is a preprocessed shard: there is no preprocessing to offload (train on the "
                          "TSV with its spec to offload it)", d->path);
    if (d->is_raw)
        return rec_errorf(REC_EINVAL, "%s is a .rraw of parsed rows: workers read and preprocess TSV (train on the TSV "
                          "with its spec to offload it)", d->path);
    const rec_offload_data od = {(const char *const *)d->parts, d->n_parts, d->path, d->tsv, d->spec_path,
                                 d->vocab_from, d->vocab_shard ? rec_shard_vocabs(d->vocab_shard) : NULL, d->plan,
                                 d->n_dense, d->n_sparse, d->table_rows, d->prep_threads, batch};
    rec_offload_close(d->offload);
    d->offload = NULL;
    REC_TRY(rec_offload_open(&d->offload, o, &od));
    *out = d->offload;
    return REC_OK;
}
