/* The piece grid of a TSV data set (offload.h "pieces"): where every REC_PIECE_GRID-th line
 * of each file starts, from one pass of memchr over the files (GB/s; no parsing).
 *
 * Lines are what rec_tsv_next hands out: the text up to each '\n', and a last line without
 * one at the end of a file. A piece's text therefore parses exactly as the same lines do in
 * a chunk of the streaming reader, so its rows are the rows the local loader would make.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rectrain/core.h"
#include "rectrain/offload.h"

typedef struct grid_part {
    uint64_t bytes;
    int64_t lines;
    int64_t line0;           /* lines of the files before it */
    int64_t cells;           /* ceil(lines / GRID) */
    uint64_t *at;            /* (cells + 1) byte offset of line k*GRID; at[cells] = bytes */
} grid_part;

struct rec_grid {
    int n;
    grid_part *p;
    int64_t lines;
};

enum { SCAN_BUF = 8 << 20 };

static rec_status scan_part(const char *path, const rec_tsv_opts *tsv, grid_part *gp, char *buf) {
    const int fd = open(path, O_RDONLY);
    if (fd < 0) return rec_errorf(REC_EIO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1024;
    gp->at = malloc(cap * sizeof *gp->at);
    rec_status s = gp->at ? REC_OK : rec_errorf(REC_ENOMEM, "%s: out of memory for its line grid", path);
    uint64_t off = 0, line_start = 0;
    int64_t lines = 0;
    int first = 1;
    while (!s) {
        const ssize_t got = read(fd, buf, SCAN_BUF);
        if (got < 0) {
            s = rec_errorf(REC_EIO, "%s: read error: %s", path, strerror(errno));
            break;
        }
        if (got == 0) break;
        if (first && got >= 2 && (unsigned char)buf[0] == 0x1f && (unsigned char)buf[1] == 0x8b) {
            s = rec_errorf(REC_EUNSUPPORTED, "%s is gzip-compressed, and offloading reads pieces of a file from their "
                           "offsets: gunzip it first (or rectrain prep it into a shard and train on that)", path);
            break;
        }
        first = 0;
        const char *p = buf, *end = buf + got;
        for (;;) {
            if (lines % REC_PIECE_GRID == 0 && line_start == off + (uint64_t)(p - buf)) {
                if ((size_t)(lines / REC_PIECE_GRID) + 2 > cap) {
                    uint64_t *a = realloc(gp->at, 2 * cap * sizeof *a);
                    if (!a) {
                        s = rec_errorf(REC_ENOMEM, "%s: out of memory for its line grid", path);
                        break;
                    }
                    gp->at = a;
                    cap *= 2;
                }
                gp->at[lines / REC_PIECE_GRID] = line_start;
            }
            const char *nl = memchr(p, '\n', (size_t)(end - p));
            if (!nl) break;
            const uint64_t next = off + (uint64_t)(nl + 1 - buf);
            if ((int64_t)(next - 1 - line_start) > tsv->max_line && tsv->bad_rows != REC_BAD_ROWS_SKIP) {
                s = rec_errorf(REC_EFORMAT, "%s:%lld: line is longer than %lld bytes (is this a Criteo TSV file? use "
                               "--bad-rows skip to drop such lines, or raise --max-line)", path, (long long)lines + 1,
                               (long long)tsv->max_line);
                break;
            }
            lines++;
            line_start = next;
            p = nl + 1;
        }
        off += (uint64_t)got;
    }
    close(fd);
    if (s) return s;
    if (line_start < off) lines++; /* a last line without its '\n' */
    gp->bytes = off;
    gp->lines = lines;
    gp->cells = (lines + REC_PIECE_GRID - 1) / REC_PIECE_GRID;
    gp->at[gp->cells] = off;
    return REC_OK;
}

rec_status rec_grid_build(rec_grid **out, const char *const *parts, int n_parts, const rec_tsv_opts *tsv) {
    *out = NULL;
    rec_grid *g = calloc(1, sizeof *g);
    char *buf = malloc(SCAN_BUF);
    if (g) g->p = calloc((size_t)n_parts, sizeof *g->p);
    rec_status s = g && g->p && buf ? REC_OK : rec_errorf(REC_ENOMEM, "out of memory scanning the data set");
    for (int k = 0; !s && k < n_parts; k++) {
        g->n = k + 1;
        g->p[k].line0 = g->lines;
        s = scan_part(parts[k], tsv, &g->p[k], buf);
        g->lines += g->p[k].lines;
    }
    free(buf);
    if (s) {
        rec_grid_free(g);
        return s;
    }
    *out = g;
    return REC_OK;
}

void rec_grid_free(rec_grid *g) {
    if (!g) return;
    for (int k = 0; g->p && k < g->n; k++) free(g->p[k].at);
    free(g->p);
    free(g);
}

int64_t rec_grid_lines(const rec_grid *g) { return g->lines; }
uint64_t rec_grid_bytes(const rec_grid *g, int part) { return g->p[part].bytes; }

static int64_t cells_per_piece(int64_t lines) {
    const int64_t c = (lines + REC_PIECE_GRID / 2) / REC_PIECE_GRID;
    return c < 1 ? 1 : c;
}

int64_t rec_grid_pieces(const rec_grid *g, int64_t lines) {
    const int64_t c = cells_per_piece(lines);
    int64_t n = 0;
    for (int k = 0; k < g->n; k++) n += (g->p[k].cells + c - 1) / c;
    return n;
}

/* Piece j: pieces never span files, so the file's pieces are counted off first. */
void rec_grid_piece(const rec_grid *g, int64_t lines, int64_t j, rec_piece *p) {
    const int64_t c = cells_per_piece(lines);
    int k = 0;
    for (;; k++) {
        const int64_t n = (g->p[k].cells + c - 1) / c;
        if (j < n || k + 1 == g->n) break;
        j -= n;
    }
    const grid_part *gp = &g->p[k];
    const int64_t c0 = j * c, c1 = c0 + c < gp->cells ? c0 + c : gp->cells;
    const int64_t l1 = c1 * REC_PIECE_GRID < gp->lines ? c1 * REC_PIECE_GRID : gp->lines;
    p->part = k;
    p->offset = gp->at[c0];
    p->len = gp->at[c1] - gp->at[c0];
    p->first_line = c0 * REC_PIECE_GRID + 1;
    p->n_lines = l1 - c0 * REC_PIECE_GRID;
    p->line0 = gp->line0 + c0 * REC_PIECE_GRID;
}
