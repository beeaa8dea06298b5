/* rectrain — internals shared by the Criteo TSV reader's files (tsv_parse.c, tsv_ref.c,
 * tsv_stream.c) and its tests. Not a public interface.
 */
#ifndef RECTRAIN_IO_TSV_INTERNAL_H
#define RECTRAIN_IO_TSV_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "rectrain/io.h"

/* Longest accepted line when rec_tsv_opts.max_line is 0. */
#define REC__TSV_MAX_LINE_DEFAULT ((int64_t)1 << 20)

/* Capacity of a `why` buffer for rec__tsv_line_ref (longer reasons are truncated). */
enum { REC__TSV_WHY_CAP = 256 };

/* Number of '\n' bytes in p[0..n). Written as a plain loop that the compiler vectorises. */
size_t rec__tsv_count_newlines(const char *p, size_t n);

/* The reference parser of one line: the plain, obviously-correct statement of the format
 * that the fast parser in tsv_parse.c is tested against, and the path that parser hands any
 * row it does not fully handle to (including every malformed row, to obtain its message).
 *
 * `line[0..len)` is one line without its '\n'; one trailing '\r' (CRLF) is ignored.
 * opts->has_label is 0 or 1; with opts->short_rows MISSING a line with fewer fields than the
 * format's has its absent trailing fields missing (empty). On success the row is written as row `r` of `b` (every column,
 * growing the value arrays as needed; b->n is not touched) and REC_OK is returned; with
 * b == NULL the line is only validated. A malformed line returns REC_EFORMAT without setting
 * the thread's error message: `why` (REC__TSV_WHY_CAP bytes) receives what is wrong
 * ("field C7: 'xyz' is not a hex id ...") and *advice what the user can do about it. The
 * only other failures are REC_ENOMEM / REC_EINVAL from growing a value array, with the
 * thread's message set. On failure the row's slots in `b` hold unspecified values. */
rec_status rec__tsv_line_ref(const char *line, size_t len, const rec_tsv_opts *opts,
                             rec_raw_block *b, int64_t r, char *why, const char **advice);

#endif
