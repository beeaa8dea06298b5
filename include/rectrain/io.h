/* rectrain — input: the Criteo TSV reader, its raw column block, and the synthetic generator.
 *
 * Criteo format (DESIGN.md "Data"): `label \t I1..I13 \t C1..C26` per line; the test format
 * has no label. An empty field is missing. I-fields are decimal integers that may be
 * negative; C-fields are hex ids (8 digits in Criteo's files; 1..16 accepted), or for
 * multi-hot data comma-separated lists of them. Lines may end in CRLF.
 */
#ifndef RECTRAIN_IO_H
#define RECTRAIN_IO_H

#include <stddef.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "rectrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { REC_CRITEO_NINT = 13, REC_CRITEO_NCAT = 26, REC_CRITEO_NCOL = 1 + 13 + 26 };

/* Raw column names in order: "label", "I1".."I13", "C1".."C26". Returns NULL past the end.
 * Raw column index c: 0 = label, 1..13 = I1..I13, 14..39 = C1..C26. */
const char *rec_criteo_column_name(int c);
/* Index of a raw column by name, or -1. */
int rec_criteo_column_index(const char *name);

/* One categorical column of a raw block in CSR form. A missing field is a row with
 * null[r] = 1 and no values; a single-hot field has exactly one value. */
typedef struct rec_raw_list {
    int32_t *off;    /* (cap+1) off[0] == 0 */
    int64_t *val;    /* (vcap) hex ids as parsed (0 .. 2^64-1 stored as int64 bits) */
    uint8_t *null;   /* (cap) 1 = missing */
    int64_t vcap;
} rec_raw_list;

/* Parsed, typed, not yet preprocessed rows: what the reader hands to the prep executor.
 * Columns are stored column-major so that operators run over contiguous arrays. */
typedef struct rec_raw_block {
    int64_t n;                         /* rows held */
    int64_t cap;                       /* rows allocated */
    int has_label;                     /* 0 for the label-less test format */
    int64_t first_line;                /* 1-based line number of row 0 in its file */
    float *label;                      /* (cap) 0/1; 0 when !has_label */
    int64_t *ints;                     /* (13, cap) I1..I13: ints[c * cap + r] */
    uint8_t *int_null;                 /* (13, cap) 1 = missing */
    rec_raw_list cat[REC_CRITEO_NCAT]; /* C1..C26 */
} rec_raw_block;

rec_status rec_raw_block_init(rec_raw_block *b, int64_t cap);
void rec_raw_block_free(rec_raw_block *b);
/* Ensures categorical column c can hold `n` values, keeping the contents. */
rec_status rec_raw_list_reserve(rec_raw_list *l, int64_t n);

/* What to do with a malformed row. */
typedef enum rec_bad_rows { REC_BAD_ROWS_FAIL = 0, REC_BAD_ROWS_SKIP = 1 } rec_bad_rows;

/* Where skipped rows were: a count and the first few locations with their reasons. */
enum { REC_BAD_ROWS_KEEP = 8 };
typedef struct rec_bad_report {
    int64_t count;
    int n_kept;
    int64_t line[REC_BAD_ROWS_KEEP];
    char path[REC_BAD_ROWS_KEEP][256]; /* the file of each location (cut to fit) */
    char why[REC_BAD_ROWS_KEEP][160];
} rec_bad_report;
/* Records one skipped row of file `path` at `line` in `bad` (counted; kept while there is
 * room). */
void rec_bad_report_add(rec_bad_report *bad, const char *path, int64_t line, const char *why);
/* Adds `src` into `dst` (counts summed, locations kept in input order up to the limit: by
 * line within a file; of two files, dst's first, so callers merge in input order). */
void rec_bad_report_merge(rec_bad_report *dst, const rec_bad_report *src);
/* Tells a person on `f` what SKIP mode dropped, in the one wording of every command that reads
 * TSV (prep, train, eval, predict): "WHO: skipped N malformed row(s) (P% of WHAT); first:",
 * then "  FILE:LINE: why" for each kept location. `kept` is the rows read besides them (for
 * the share). Writes nothing when bad->count is 0 or f is NULL. */
void rec_bad_report_print(FILE *f, const char *who, const char *what, const rec_bad_report *bad, int64_t kept);

/* What to do with a row that has fewer fields than its format: published copies of the
 * Criteo data sometimes have their trailing empty fields (the last categoricals, when
 * missing) stripped, so that rows hold 37-39 fields instead of 40. */
typedef enum rec_short_rows {
    REC_SHORT_ROWS_FAIL = 0,    /* a malformed row, as any other (the message says what to do) */
    REC_SHORT_ROWS_MISSING = 1, /* the absent trailing fields are missing values */
} rec_short_rows;

/* The share of rows --bad-rows skip may drop before it refuses the input: a few malformed
 * lines are noise, more are a systematic fault (a stripped copy drops exactly the rows whose
 * last categoricals are empty) and what is left would be a biased sample. */
#define REC_MAX_BAD_SHARE_DEFAULT 0.02

typedef struct rec_tsv_opts {
    int has_label;          /* 1 train format, 0 test format, -1 detect (rec_tsv_open) */
    rec_bad_rows bad_rows;  /* default REC_BAD_ROWS_FAIL */
    int64_t max_line;       /* longest accepted line in bytes; 0 = 1 MiB */
    rec_short_rows short_rows; /* default REC_SHORT_ROWS_FAIL */
    double max_bad_share;   /* SKIP mode: largest share of rows dropped; 0 = the default */
} rec_tsv_opts;

/* SKIP mode's bound: REC_EFORMAT when the `bad` rows of (kept + bad) input rows exceed
 * opts->max_bad_share, with a message naming `path`, the share, the first bad line and what
 * to do; REC_OK otherwise (and always in FAIL mode). */
rec_status rec_bad_share_check(const rec_tsv_opts *opts, const char *path, int64_t kept,
                               const rec_bad_report *bad);

/* Parses text[0..len) — whole lines only, the last one may lack its '\n' — appending the
 * rows to `out` (which grows its value arrays as needed; its row capacity must be at least
 * the number of lines). `path` and `first_line` are used only in messages:
 * "FILE:LINE: field C7: 'xyz' is not a hex id ...". In FAIL mode the first malformed row
 * stops the parse with REC_EFORMAT; in SKIP mode malformed rows are dropped and recorded in
 * `bad`. Thread-safe: it touches only its arguments. opts->has_label must be 0 or 1 here. */
rec_status rec_tsv_parse(const rec_tsv_opts *opts, const char *path, const char *text,
                         size_t len, int64_t first_line, rec_raw_block *out,
                         rec_bad_report *bad);

/* Streaming reader over a .tsv or .gz file (gzip detected from its magic bytes, not its
 * name). It hands out chunks of whole lines; the caller parses them (possibly on several
 * threads, see rec_tsv_split). Memory is bounded by the chunk size, whatever the file size. */
typedef struct rec_tsv rec_tsv;

typedef struct rec_text_chunk {
    const char *path;     /* the file the lines come from (owned by the reader) */
    const char *text;     /* whole lines; valid until the next call on the reader */
    size_t len;
    int64_t first_line;   /* 1-based line number of the chunk's first line in its file */
    int64_t n_lines;      /* lines in the chunk */
} rec_text_chunk;

/* Opens `path` for streaming with chunks of about `chunk_bytes` (0 = 8 MiB). Resolves
 * opts->has_label = -1 from the field counts of the first lines (up to REC_TSV_DETECT_LINES,
 * within the first MiB), only where they leave no doubt:
 *   - every line has 40 fields, but for lines no format explains (fewer than 15 or more
 *     than 40, which the parser then reports where they are): train format (a test row
 *     cannot have 40);
 *   - all but at most REC_TSV_DETECT_BROKEN_SHARE of the lines have 40 fields: train format,
 *     the others broken rows that the parser reports (or --bad-rows skip drops), not a
 *     stripped copy, whose short rows are far more (C26 alone is empty in ~40% of Criteo's);
 *   - with short_rows MISSING, the longest line has 40 and none more, or every line has 39
 *     and field 14 is an int everywhere (I13; see the next rule): train format;
 *   - every line has 39, there are at least REC_TSV_DETECT_MIN_LINES, and field 14 is a hex
 *     id somewhere (C1; a labelled row stripped to 39 fields has I13 there, an int): test
 *     format (a stripped train file also has 40-field rows wherever its C26 is present);
 * anything else (one 39-field line, a mix of 40 and fewer without --short-rows missing, ...)
 * is refused with the counts seen and the flag that settles it. An empty file is train. */
#define REC_TSV_DETECT_LINES 1000
#define REC_TSV_DETECT_MIN_LINES 100
#define REC_TSV_DETECT_BROKEN_SHARE REC_MAX_BAD_SHARE_DEFAULT
rec_status rec_tsv_open(rec_tsv **out, const char *path, const rec_tsv_opts *opts,
                        size_t chunk_bytes);
/* The same over a list of files read in order as one input (day_0.gz, day_1.gz, ...): every
 * file is opened and its format resolved here, and all must share one format. A chunk never
 * spans two files: its `path` and `first_line` say where its lines are. */
rec_status rec_tsv_open_list(rec_tsv **out, const char *const *paths, int n_paths,
                             const rec_tsv_opts *opts, size_t chunk_bytes);
void rec_tsv_close(rec_tsv *r);
/* The options in force (has_label resolved). */
const rec_tsv_opts *rec_tsv_options(const rec_tsv *r);
/* The file being read (the first of a list until the first chunk is handed out). */
const char *rec_tsv_path(const rec_tsv *r);
/* Next chunk; at end of file returns REC_OK with chunk->len == 0. I/O and gzip errors
 * (including a truncated .gz) are REC_EIO/REC_EFORMAT with the path; so are over-long lines
 * in FAIL mode, while SKIP mode drops them (see rec_tsv_bad). */
rec_status rec_tsv_next(rec_tsv *r, rec_text_chunk *chunk);
/* Bytes consumed so far from the (decompressed) stream, for progress. */
uint64_t rec_tsv_bytes(const rec_tsv *r);
/* Lines longer than max_line that the reader dropped in SKIP mode (they never reach a
 * chunk, so rec_tsv_parse cannot see them; merge this into the parse's own report). */
const rec_bad_report *rec_tsv_bad(const rec_tsv *r);

/* Splits a chunk into `parts` pieces of whole lines of about equal size, for parallel
 * parsing: piece i is text[start[i] .. start[i+1]) and begins on line first[i]. Counting
 * the lines costs one memchr pass. */
void rec_tsv_split(const rec_text_chunk *chunk, int parts, size_t *start /* parts+1 */,
                   int64_t *first /* parts */);

/* ---- synthetic generator (`rectrain gen`) ---------------------------------------------- */

typedef struct rec_gen_opts {
    uint64_t seed;
    double scale;        /* multiplies the Kaggle cardinalities; each table keeps >= 2 rows */
    int multi_hot;       /* comma-separated lists with the MLPerf DLRMv2 mean sizes */
    int days;            /* >= 1; popularity drifts from day to day */
    int with_label;      /* 1: train format; 0: test format (no label column) */
} rec_gen_opts;

/* Fills opts with the defaults: seed 1, scale 1, single-hot, 1 day, with label. */
void rec_gen_opts_default(rec_gen_opts *o);

/* The table size of categorical column c (0..25) after scaling. */
int64_t rec_gen_cardinality(const rec_gen_opts *o, int c);

typedef struct rec_gen rec_gen;
rec_status rec_gen_init(rec_gen **out, const rec_gen_opts *o, int64_t total_rows);
void rec_gen_free(rec_gen *g);

/* Writes rows [row0, row0+n) as Criteo TSV text into buf (capacity cap bytes), returning the
 * bytes written in *len, and their true click probabilities in prob[0..n) if prob != NULL.
 * Row r depends only on (seed, r, total_rows) — never on how rows are split across calls or
 * threads — so the output is identical for any thread count. REC_EINVAL if cap is too small
 * (rec_gen_max_row_bytes() * n always suffices). Thread-safe. */
rec_status rec_gen_rows(const rec_gen *g, int64_t row0, int64_t n, char *buf, size_t cap,
                        size_t *len, float *prob);
size_t rec_gen_max_row_bytes(const rec_gen *g);

/* Writes `rows` rows to `path` (and the probabilities, one "%.6f" per line, to `prob_path`
 * if not NULL) using `threads` threads. Shows a progress line on a terminal. `stop` (or
 * NULL): a signal number a handler stores; read after every batch of rows, it ends the job
 * with REC_ESTOPPED. On any error or stop, outputs that are regular files are removed: a
 * partial TSV whose last line happens to be whole would prep into fewer rows without a word. */
rec_status rec_gen_write(const rec_gen_opts *o, int64_t rows, const char *path,
                         const char *prob_path, int threads, const volatile sig_atomic_t *stop);

#ifdef __cplusplus
}
#endif
#endif
