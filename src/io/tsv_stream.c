/* The streaming side of the TSV reader: a .tsv or .gz file handed out in chunks of whole
 * lines, with bounded memory whatever the file size.
 *
 * Both kinds of file are read through zlib's gzread, which decompresses gzip data and
 * passes any other file through unchanged; gzip is recognised by its magic bytes (1f 8b),
 * never by the file name. One buffer holds the current chunk plus the partial line that
 * follows it; that remainder is moved to the front on the next call. A list of files is read
 * in order as one input, each file opened when the one before it ends. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "rectrain/core.h"
#include "tsv_internal.h"

#define REC__TSV_CHUNK_DEFAULT ((size_t)8 << 20)

struct rec_tsv {
    char **paths;       /* (n_files) the files, read in order as one input */
    int n_files;
    int file;           /* the file being read */
    int detect;         /* has_label was -1: each file's format is detected (and must agree) */
    char *path;         /* paths[file] */
    rec_tsv_opts opts;  /* has_label resolved, max_line > 0 */
    gzFile gz;
    int is_gz;          /* the file starts with the gzip magic */
    int eof;            /* gzread has returned 0 */
    char *buf;          /* (cap + 1) */
    size_t cap;         /* max(chunk, max_line + 1, DETECT_BYTES) */
    size_t chunk;       /* bytes aimed at per chunk */
    size_t len;         /* valid bytes in buf */
    size_t pos;         /* start of the unconsumed remainder */
    size_t scanned;     /* buf[0..scanned) is known to hold no '\n' (while looking for one) */
    int64_t next_line;  /* line number of buf[pos] in its file */
    uint64_t bytes;     /* bytes handed out in chunks */
    rec_bad_report bad; /* over-long lines dropped in SKIP mode */
};

/* Bytes read ahead at the start of each file to detect its format from its first lines. */
#define DETECT_BYTES ((size_t)1 << 20)

/* Reads up to `want` more bytes at the end of the buffer. Sets r->eof at the end of the
 * stream, after checking that a gzip stream ended where its compressed data says it does. */
static rec_status read_some(rec_tsv *r, size_t want) {
    if (want > r->cap - r->len) want = r->cap - r->len;
    if (want > INT_MAX) want = INT_MAX;
    if (want == 0 || r->eof) return REC_OK;
    int got = gzread(r->gz, r->buf + r->len, (unsigned)want);
    int err = Z_OK;
    const char *msg = gzerror(r->gz, &err);
    if (got < 0 || (err != Z_OK && err != Z_BUF_ERROR)) {
        if (err == Z_ERRNO)
            return rec_errorf(REC_EIO, "%s: read error: %s", r->path, strerror(errno));
        if (err == Z_DATA_ERROR)
            return rec_errorf(REC_EFORMAT,
                              "%s: corrupt gzip data (%s); re-download or re-compress it",
                              r->path, msg);
        if (err == Z_MEM_ERROR)
            return rec_errorf(REC_ENOMEM, "%s: out of memory decompressing", r->path);
        return rec_errorf(REC_EIO, "%s: read error: %s", r->path, msg);
    }
    r->len += (size_t)got;
    if (got == 0) {
        /* zlib records "unexpected end of file" as Z_BUF_ERROR when the input ends inside
         * a gzip member. */
        if (err == Z_BUF_ERROR)
            return rec_errorf(REC_EFORMAT,
                              "%s: truncated gzip stream (the file ends before the compressed "
                              "data does); re-download or re-compress it",
                              r->path);
        r->eof = 1;
    }
    return REC_OK;
}

/* SKIP mode: drops the over-long line at the start of the buffer, reading on to its '\n'
 * (or the end of the stream) without keeping it, and records it in r->bad. */
static rec_status skip_long_line(rec_tsv *r) {
    char why[64];
    snprintf(why, sizeof why, "line is longer than %lld bytes", (long long)r->opts.max_line);
    rec_bad_report_add(&r->bad, r->path, r->next_line, why);
    for (;;) {
        const char *nl = memchr(r->buf, '\n', r->len);
        if (nl) {
            size_t rest = r->len - (size_t)(nl + 1 - r->buf);
            memmove(r->buf, nl + 1, rest);
            r->len = rest;
            break;
        }
        r->len = 0;
        if (r->eof) break;
        REC_TRY(read_some(r, r->cap));
    }
    r->next_line++;
    return REC_OK;
}

/* Makes sure buf[0..len) holds at least one '\n' after at least r->chunk bytes, or the end
 * of the stream. A line that stays without its '\n' for more than max_line bytes fails
 * (FAIL mode) or is dropped and recorded (SKIP mode); it always starts the buffer, because
 * the lines before it were handed out in earlier chunks. */
static rec_status fill(rec_tsv *r) {
    for (;;) {
        while (!r->eof && r->len < r->chunk) REC_TRY(read_some(r, r->chunk - r->len));
        r->scanned = 0;
        for (;;) {
            /* the newline we need is the last one: search from the end, new bytes only */
            size_t i = r->len;
            while (i > r->scanned && r->buf[i - 1] != '\n') i--;
            if (i > r->scanned || r->eof) return REC_OK;
            r->scanned = r->len;
            if ((int64_t)r->len > r->opts.max_line) break;
            REC_TRY(read_some(r, (size_t)r->opts.max_line + 1 - r->len));
        }
        if (r->opts.bad_rows != REC_BAD_ROWS_SKIP)
            return rec_errorf(REC_EFORMAT, "%s:%lld: line is longer than %lld bytes (is this a "
                                           "Criteo TSV file? use --bad-rows skip to drop such "
                                           "lines, or raise --max-line)",
                              r->path, (long long)r->next_line, (long long)r->opts.max_line);
        REC_TRY(skip_long_line(r));
    }
}

/* Field counts of the first lines of a file (those in the buffer, which holds its start: up
 * to REC_TSV_DETECT_LINES whole lines; a last line without '\n' is left out: a file cut
 * short ends in one, which is no evidence of the format). */
typedef struct field_census {
    int64_t lines, n40, n39, fewer, more, min, max;
    int64_t id13; /* 39-field lines whose field 14 is not a decimal int: C1 (a hex id) of the
                     test format, where a labelled row has I13 */
    int64_t odd;  /* lines no format explains, even stripped: fewer than 15 fields (a label, 13
                     ints and C1, which Criteo never leaves empty) or more than 40 */
} field_census;

/* Whether s[0..n) is empty or an optional '-' and decimal digits (an I-field). */
static int decimal_or_empty(const char *s, size_t n) {
    size_t i = n > 0 && s[0] == '-';
    while (i < n && s[i] >= '0' && s[i] <= '9') i++;
    return i == n;
}

static field_census count_fields(const rec_tsv *r) {
    field_census c = {.min = INT64_MAX};
    for (size_t p = 0; p < r->len && c.lines < REC_TSV_DETECT_LINES;) {
        const char *nl = memchr(r->buf + p, '\n', r->len - p);
        if (!nl) break; /* a partial line, or a last one without '\n' that may be cut short */
        size_t e = nl ? (size_t)(nl - r->buf) : r->len, n = e - p;
        if (n > 0 && r->buf[e - 1] == '\r') n--;
        int64_t fields = 1;
        size_t f14 = 0, f14_end = n; /* field 14's bytes */
        for (size_t i = 0; i < n; i++)
            if (r->buf[p + i] == '\t') {
                fields++;
                if (fields == 14) f14 = i + 1;
                if (fields == 15) f14_end = i;
            }
        if (fields == REC_CRITEO_NCOL - 1 && !decimal_or_empty(r->buf + p + f14, f14_end - f14)) c.id13++;
        c.lines++;
        c.n40 += fields == REC_CRITEO_NCOL;
        c.n39 += fields == REC_CRITEO_NCOL - 1;
        c.fewer += fields < REC_CRITEO_NCOL - 1;
        c.more += fields > REC_CRITEO_NCOL;
        c.odd += fields < 2 + REC_CRITEO_NINT || fields > REC_CRITEO_NCOL;
        if (fields < c.min) c.min = fields;
        if (fields > c.max) c.max = fields;
        p = e + 1;
    }
    return c;
}

/* Resolves the format of the file just opened (the buffer holds its start) by the rules of
 * io.h (rec_tsv_open) when it is to be detected, and checks that it agrees with the first
 * file's. */
static rec_status resolve_format(rec_tsv *r) {
    if (!r->detect) return REC_OK;
    const field_census c = count_fields(r);
    const int missing = r->opts.short_rows == REC_SHORT_ROWS_MISSING, enough = c.lines >= REC_TSV_DETECT_MIN_LINES;
    /* labelled rows stripped of their trailing empty fields: some of 40 fields and shorter
     * ones, or all of 39 with an int where the test format has a hex id */
    const int stripped = (c.max == REC_CRITEO_NCOL && c.n40 + c.odd < c.lines) ||
                         (c.n39 == c.lines && c.id13 == 0 && enough);
    /* nearly every line of 40 fields: the others are broken rows (a stripped copy has many
     * short ones, wherever C26 is empty), which the parser reports where they are */
    const int broken = c.n40 > 0 && c.n40 + c.odd < c.lines &&
                       (double)(c.lines - c.n40) <= REC_TSV_DETECT_BROKEN_SHARE * (double)c.lines;
    int f = -1;
    /* all 40 fields but for lines no format explains, which the parser reports where they are */
    if (c.lines == 0 || (c.n40 > 0 && c.n40 + c.odd == c.lines) || broken) f = 1;
    else if (missing && (stripped || c.max == REC_CRITEO_NCOL)) f = 1;
    else if (c.n39 == c.lines && c.id13 > 0 && enough) f = 0;
    if (f < 0) {
        char seen[512];
        size_t o = 0;
#define SEEN(...) (o += (size_t)snprintf(o < sizeof seen ? seen + o : NULL, o < sizeof seen ? sizeof seen - o : 0, __VA_ARGS__))
        SEEN("of its first %lld line%s, %lld ha%s 40 tab-separated fields, %lld 39", (long long)c.lines,
             c.lines == 1 ? "" : "s", (long long)c.n40, c.n40 == 1 ? "s" : "ve", (long long)c.n39);
        if (c.fewer) SEEN(", %lld fewer (down to %lld)", (long long)c.fewer, (long long)c.min);
        if (c.more) SEEN(", %lld more (up to %lld)", (long long)c.more, (long long)c.max);
        if (c.n39 == c.lines && c.id13 == 0)
            SEEN(", and field 14 is an int in every line (I13 of a labelled row; the test format has C1 there, a "
                 "hex id)");
#undef SEEN
        if (stripped)
            return rec_errorf(REC_EFORMAT, "%s: %s: it looks like a labelled file stripped of its trailing empty "
                              "fields (published Criteo copies often are); add --short-rows missing to read the "
                              "absent fields as missing values", r->path, seen);
        return rec_errorf(REC_EFORMAT, "%s: cannot tell the format: %s. The train format has 40 fields (a label, "
                          "13 ints, 26 categoricals), the test format 39 (no label), and a labelled row stripped of "
                          "its empty last fields fewer: give --format train or --format test (with --short-rows "
                          "missing if rows are stripped); is this a Criteo TSV file?", r->path, seen);
    }
    if (r->file > 0 && f != r->opts.has_label)
        return rec_errorf(REC_EFORMAT, "%s is in the %s format and %s in the %s format; the files of one input must "
                          "share one format", r->path, f ? "train" : "test", r->paths[0],
                          r->opts.has_label ? "train" : "test");
    r->opts.has_label = f;
    return REC_OK;
}

/* Opens file k of the list (closing the one before), fills the buffer with its start and
 * resolves its format. */
static rec_status open_file(rec_tsv *r, int k) {
    if (r->gz) gzclose(r->gz);
    r->gz = NULL;
    r->file = k;
    r->path = r->paths[k];
    r->eof = 0;
    r->len = r->pos = r->scanned = 0;
    r->next_line = 1;
    int fd = open(r->path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return rec_errorf(REC_EIO, "%s: cannot open: %s", r->path, strerror(errno));
    unsigned char magic[2];
    r->is_gz = pread(fd, magic, 2, 0) == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    r->gz = gzdopen(fd, "rb");
    if (!r->gz) {
        close(fd);
        return rec_errorf(REC_ENOMEM, "%s: cannot set up reading (out of memory)", r->path);
    }
    gzbuffer(r->gz, 1u << 18);
    if (r->detect)
        while (!r->eof && r->len < DETECT_BYTES) REC_TRY(read_some(r, DETECT_BYTES - r->len));
    REC_TRY(fill(r));
    return resolve_format(r);
}

/* See io.h. On failure nothing stays open and *out is NULL. */
rec_status rec_tsv_open_list(rec_tsv **out, const char *const *paths, int n_paths, const rec_tsv_opts *opts,
                             size_t chunk_bytes) {
    *out = NULL;
    if (!paths || n_paths < 1 || !opts)
        return rec_errorf(REC_EINVAL, "rec_tsv_open: at least one path, and options, are required");
    const char *path = paths[0];
    if (opts->has_label < -1 || opts->has_label > 1)
        return rec_errorf(REC_EINVAL, "%s: has_label must be -1 (detect), 0 or 1, not %d", path,
                          opts->has_label);
    if (opts->max_line < 0)
        return rec_errorf(REC_EINVAL, "%s: max_line %lld is negative", path,
                          (long long)opts->max_line);
    if (opts->bad_rows != REC_BAD_ROWS_FAIL && opts->bad_rows != REC_BAD_ROWS_SKIP)
        return rec_errorf(REC_EINVAL, "%s: bad_rows must be fail or skip", path);
    if (opts->short_rows != REC_SHORT_ROWS_FAIL && opts->short_rows != REC_SHORT_ROWS_MISSING)
        return rec_errorf(REC_EINVAL, "%s: short_rows must be fail or missing", path);
    if (!(opts->max_bad_share >= 0 && opts->max_bad_share <= 1))
        return rec_errorf(REC_EINVAL, "%s: max_bad_share must be a share in [0, 1], not %g", path,
                          opts->max_bad_share);

    rec_tsv *r = calloc(1, sizeof *r);
    if (!r) return rec_errorf(REC_ENOMEM, "%s: out of memory opening the reader", path);
    rec_status s = REC_OK;
    r->opts = *opts;
    if (r->opts.max_line == 0) r->opts.max_line = REC__TSV_MAX_LINE_DEFAULT;
    if (r->opts.max_bad_share == 0) r->opts.max_bad_share = REC_MAX_BAD_SHARE_DEFAULT;
    r->detect = opts->has_label == -1;
    r->chunk = chunk_bytes ? chunk_bytes : REC__TSV_CHUNK_DEFAULT;
    r->cap = r->chunk > (size_t)r->opts.max_line + 1 ? r->chunk : (size_t)r->opts.max_line + 1;
    if (r->detect && r->cap < DETECT_BYTES) r->cap = DETECT_BYTES;
    r->paths = calloc((size_t)n_paths, sizeof *r->paths);
    if (!r->paths) {
        free(r);
        return rec_errorf(REC_ENOMEM, "%s: out of memory opening the reader", path);
    }
    r->n_files = n_paths;
    for (int k = 0; k < n_paths && !s; k++)
        if (!(r->paths[k] = strdup(paths[k] ? paths[k] : "")))
            s = rec_errorf(REC_ENOMEM, "%s: out of memory opening the reader", path);
    if (!s) s = rec_alloc((void **)&r->buf, r->cap + 1, "TSV read buffer");
    /* Every file is opened (and its format resolved) now, so that a missing or odd one fails
     * before any work, not hours into the pass that reaches it; then reading starts. */
    for (int k = 0; k < n_paths && !s; k++) s = open_file(r, k);
    /* reading starts again at the first file: what opening the others dropped (an over-long
     * first line) is dropped again, and counted then, when the reader reaches it */
    if (!s && n_paths > 1) memset(&r->bad, 0, sizeof r->bad), s = open_file(r, 0);
    if (s) {
        rec_tsv_close(r);
        return s;
    }
    *out = r;
    return REC_OK;
}

rec_status rec_tsv_open(rec_tsv **out, const char *path, const rec_tsv_opts *opts, size_t chunk_bytes) {
    return rec_tsv_open_list(out, &path, 1, opts, chunk_bytes);
}

void rec_tsv_close(rec_tsv *r) {
    if (!r) return;
    if (r->gz) gzclose(r->gz);
    rec_free(r->buf);
    for (int k = 0; r->paths && k < r->n_files; k++) free(r->paths[k]);
    free(r->paths);
    free(r);
}

const rec_tsv_opts *rec_tsv_options(const rec_tsv *r) { return &r->opts; }

const char *rec_tsv_path(const rec_tsv *r) { return r->path; }

uint64_t rec_tsv_bytes(const rec_tsv *r) { return r->bytes; }

const rec_bad_report *rec_tsv_bad(const rec_tsv *r) { return &r->bad; }

/* See io.h. The chunk ends after the last '\n' in the buffer, or at the end of the file
 * (where the last line may lack its '\n'); when the buffer holds more than a chunk (the
 * start of a file read ahead to detect its format), after the first '\n' past chunk bytes.
 * At the end of a file the next one is opened; a chunk never spans two files. */
rec_status rec_tsv_next(rec_tsv *r, rec_text_chunk *chunk) {
    memset(chunk, 0, sizeof *chunk);
    if (r->pos > 0) {
        memmove(r->buf, r->buf + r->pos, r->len - r->pos);
        r->len -= r->pos;
        r->pos = 0;
        REC_TRY(fill(r));
    }
    while (r->len == 0 && r->eof && r->file + 1 < r->n_files) REC_TRY(open_file(r, r->file + 1));
    chunk->path = r->path;
    chunk->first_line = r->next_line; /* after fill(), which may drop over-long lines */
    size_t end = r->len;
    const char *cut = r->len > r->chunk ? memchr(r->buf + r->chunk - 1, '\n', r->len - (r->chunk - 1)) : NULL;
    if (cut) {
        end = (size_t)(cut - r->buf) + 1;
    } else if (!r->eof) {
        while (end > 0 && r->buf[end - 1] != '\n') end--;
        /* fill() guarantees a '\n' unless at the end of the file */
    }
    int64_t lines = (int64_t)rec__tsv_count_newlines(r->buf, end);
    if (end > 0 && r->buf[end - 1] != '\n') lines++;
    chunk->text = r->buf;
    chunk->len = end;
    chunk->n_lines = lines;
    r->pos = end;
    r->next_line += lines;
    r->bytes += end;
    return REC_OK;
}
