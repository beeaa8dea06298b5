/* The streaming side of the TSV reader: a .tsv or .gz file handed out in chunks of whole
 * lines, with bounded memory whatever the file size.
 *
 * Both kinds of file are read through zlib's gzread, which decompresses gzip data and
 * passes any other file through unchanged; gzip is recognised by its magic bytes (1f 8b),
 * never by the file name. One buffer holds the current chunk plus the partial line that
 * follows it; that remainder is moved to the front on the next call. */
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
    char *path;
    rec_tsv_opts opts;  /* has_label resolved, max_line > 0 */
    gzFile gz;
    int is_gz;          /* the file starts with the gzip magic */
    int eof;            /* gzread has returned 0 */
    char *buf;          /* (cap + 1) */
    size_t cap;         /* max(chunk, max_line + 1) */
    size_t chunk;       /* bytes aimed at per chunk */
    size_t len;         /* valid bytes in buf */
    size_t pos;         /* start of the unconsumed remainder */
    size_t scanned;     /* buf[0..scanned) is known to hold no '\n' (while looking for one) */
    int64_t next_line;  /* line number of buf[pos] */
    uint64_t bytes;     /* bytes handed out in chunks */
    rec_bad_report bad; /* over-long lines dropped in SKIP mode */
};

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
    r->bad.count++;
    if (r->bad.n_kept < REC_BAD_ROWS_KEEP) {
        r->bad.line[r->bad.n_kept] = r->next_line;
        snprintf(r->bad.why[r->bad.n_kept], sizeof r->bad.why[0], "line is longer than %lld bytes",
                 (long long)r->opts.max_line);
        r->bad.n_kept++;
    }
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

/* Resolves has_label = -1 from the number of tab-separated fields of the first line (which
 * fill() has put in the buffer, whole or up to the end of the file). An empty file counts
 * as the train format: it has no rows either way. */
static rec_status detect_label(rec_tsv *r) {
    if (r->len == 0) {
        r->opts.has_label = 1;
        return REC_OK;
    }
    const char *nl = memchr(r->buf, '\n', r->len);
    size_t n = nl ? (size_t)(nl - r->buf) : r->len;
    if (n > 0 && r->buf[n - 1] == '\r') n--;
    long long fields = 1;
    for (size_t i = 0; i < n; i++) fields += r->buf[i] == '\t';
    if (fields == REC_CRITEO_NCOL) r->opts.has_label = 1;
    else if (fields == REC_CRITEO_NCOL - 1) r->opts.has_label = 0;
    else
        return rec_errorf(REC_EFORMAT,
                          "%s:1: cannot tell the format from the first line: it has %lld "
                          "tab-separated fields, expected %d (train format) or %d (test "
                          "format); is this a Criteo TSV file?",
                          r->path, fields, REC_CRITEO_NCOL, REC_CRITEO_NCOL - 1);
    return REC_OK;
}

/* See io.h. On failure nothing stays open and *out is NULL. */
rec_status rec_tsv_open(rec_tsv **out, const char *path, const rec_tsv_opts *opts,
                        size_t chunk_bytes) {
    *out = NULL;
    if (!path || !opts)
        return rec_errorf(REC_EINVAL, "rec_tsv_open: path and options are required");
    if (opts->has_label < -1 || opts->has_label > 1)
        return rec_errorf(REC_EINVAL, "%s: has_label must be -1 (detect), 0 or 1, not %d", path,
                          opts->has_label);
    if (opts->max_line < 0)
        return rec_errorf(REC_EINVAL, "%s: max_line %lld is negative", path,
                          (long long)opts->max_line);
    if (opts->bad_rows != REC_BAD_ROWS_FAIL && opts->bad_rows != REC_BAD_ROWS_SKIP)
        return rec_errorf(REC_EINVAL, "%s: bad_rows must be fail or skip", path);

    rec_tsv *r = calloc(1, sizeof *r);
    if (!r) return rec_errorf(REC_ENOMEM, "%s: out of memory opening the reader", path);
    rec_status s = REC_OK;
    r->opts = *opts;
    if (r->opts.max_line == 0) r->opts.max_line = REC__TSV_MAX_LINE_DEFAULT;
    r->chunk = chunk_bytes ? chunk_bytes : REC__TSV_CHUNK_DEFAULT;
    r->cap = r->chunk > (size_t)r->opts.max_line + 1 ? r->chunk : (size_t)r->opts.max_line + 1;
    r->next_line = 1;
    r->path = strdup(path);
    if (!r->path) {
        free(r);
        return rec_errorf(REC_ENOMEM, "%s: out of memory opening the reader", path);
    }

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        s = rec_errorf(REC_EIO, "%s: cannot open: %s", path, strerror(errno));
        goto fail;
    }
    unsigned char magic[2];
    r->is_gz = pread(fd, magic, 2, 0) == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
    r->gz = gzdopen(fd, "rb");
    if (!r->gz) {
        close(fd);
        s = rec_errorf(REC_ENOMEM, "%s: cannot set up reading (out of memory)", path);
        goto fail;
    }
    gzbuffer(r->gz, 1u << 18);
    if ((s = rec_alloc((void **)&r->buf, r->cap + 1, "TSV read buffer"))) goto fail;
    if ((s = fill(r))) goto fail;
    if (r->opts.has_label == -1 && (s = detect_label(r))) goto fail;
    *out = r;
    return REC_OK;
fail:
    rec_tsv_close(r);
    return s;
}

void rec_tsv_close(rec_tsv *r) {
    if (!r) return;
    if (r->gz) gzclose(r->gz);
    rec_free(r->buf);
    free(r->path);
    free(r);
}

const rec_tsv_opts *rec_tsv_options(const rec_tsv *r) { return &r->opts; }

const char *rec_tsv_path(const rec_tsv *r) { return r->path; }

uint64_t rec_tsv_bytes(const rec_tsv *r) { return r->bytes; }

const rec_bad_report *rec_tsv_bad(const rec_tsv *r) { return &r->bad; }

/* See io.h. The chunk ends after the last '\n' in the buffer, or at the end of the file
 * (where the last line may lack its '\n'). */
rec_status rec_tsv_next(rec_tsv *r, rec_text_chunk *chunk) {
    memset(chunk, 0, sizeof *chunk);
    if (r->pos > 0) {
        memmove(r->buf, r->buf + r->pos, r->len - r->pos);
        r->len -= r->pos;
        r->pos = 0;
        REC_TRY(fill(r));
    }
    chunk->first_line = r->next_line; /* after fill(), which may drop over-long lines */
    size_t end = r->len;
    if (!r->eof) {
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
