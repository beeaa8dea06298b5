/* rectrain — .rraw: Criteo rows parsed into typed raw columns and stored, not preprocessed.
 *
 * What RAP preprocesses (§2, §5): raw feature tensors the loader has already parsed. `rectrain
 * prep --raw` parses a TSV once into this file; `train`, `eval` and `predict` read it with a
 * prep spec (--spec) as they read the TSV, without parsing text again, and `prep --spec` makes
 * a .rshard from it. The columns are those of a raw block (io.h): label, I1..I13 with their
 * missing flags, C1..C26 as CSR lists of 64-bit hex ids with their missing flags.
 *
 * Layout (all integers little-endian; every section starts on a 64-byte boundary):
 *
 *   header   64 bytes: magic "RRAWCOL1", u32 version, u32 flags (1: rows carry labels),
 *            i64 G (rows of a full group), u64 file bytes, u64 footer offset, u32 CRC32 of
 *            the 64 bytes with these 4 as zero, zeros
 *   groups   up to G rows each, columnar, each array zero-padded to 8 bytes:
 *              label f32 (n) | per int column: values i32 or i64 (n) | int_null u8 (13, n) |
 *              per categorical column: null u8 (n), offsets i32 (n + 1) unless implied,
 *              ids u32 or i64 (nnz)
 *            and the group zero-padded to 64 bytes. Each group takes the narrowest form that
 *            holds it exactly: an int column whose values all fit in 32 bits stores i32, a
 *            column whose ids all do u32, and a column whose present fields hold one id each
 *            (single-hot Criteo) no offsets: they are implied by the missing flags.
 *   footer   u64 groups, i64 rows, then per group: u64 offset, u64 bytes, i64 rows, u32 CRC32
 *            of its bytes, u32 mask of i32 int columns (bit c: I(c+1)), u32 mask of u32 id
 *            columns (bit c: C(c+1)), u32 mask of implied offsets, i64 nnz (26); then u32
 *            CRC32 of the footer so far, u32 0, u64 footer offset, magic "RRAWEND1"
 *
 * Opening checks magic, version, flags, sizes, every directory entry against the file and
 * the format's arithmetic, and the header and footer checksums; a group's checksum and the
 * structure of its lists (offsets rising from 0 to nnz, flags 0 or 1, no ids in a missing
 * field; with implied offsets, as many ids as present fields) are checked the first time it is read. Every refusal is REC_EFORMAT naming the file
 * and what is wrong, never garbage read as rows.
 */
#ifndef RECTRAIN_RAWCOLS_H
#define RECTRAIN_RAWCOLS_H

#include <stddef.h>
#include <stdint.h>

#include "rectrain/io.h"
#include "rectrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { REC_RAWCOLS_VERSION = 1 };
#define REC_RAWCOLS_MAGIC "RRAWCOL1"

/* ---- writer: groups of up to G rows to PATH.tmp, committed whole at close ------------------ */
typedef struct rec_rawcols_writer rec_rawcols_writer;

/* group_rows 0: the default (65536). */
rec_status rec_rawcols_writer_open(rec_rawcols_writer **out, const char *path, int has_label, int64_t group_rows);
/* Appends rows [r0, r0 + n) of a parsed block (its has_label must be the file's). */
rec_status rec_rawcols_writer_append(rec_rawcols_writer *w, const rec_raw_block *b, int64_t r0, int64_t n);
/* Footer, fsync, rename. Frees the writer whatever happens. */
rec_status rec_rawcols_writer_close(rec_rawcols_writer *w);
/* Removes PATH.tmp and frees the writer. */
void rec_rawcols_writer_abort(rec_rawcols_writer *w);

/* ---- reader ------------------------------------------------------------------------------ */
typedef struct rec_rawcols rec_rawcols;

rec_status rec_rawcols_open(rec_rawcols **out, const char *path);
void rec_rawcols_close(rec_rawcols *r);
int64_t rec_rawcols_rows(const rec_rawcols *r);
int64_t rec_rawcols_groups(const rec_rawcols *r);
int rec_rawcols_has_label(const rec_rawcols *r);
/* Part k (at `path`) of a list of .rraw inputs whose first is `first`: its labels (`label`) must
 * agree with the parts before it (*has_label, set from part 0) and with the format the user
 * asked for (`asked`: 1 train, 0 test, -1 none); refused naming both otherwise. */
rec_status rec_rawcols_label_agree(const char *path, int k, const char *first, int label, int asked, int *has_label);
/* Whether the first n bytes of a file begin with the .rraw magic; whether `path` is a regular
 * file that does (anything else, a pipe included, is not: nothing is read from it). */
int rec_rawcols_magic(const void *head, size_t n);
int rec_rawcols_is_file(const char *path);
/* Copies rows [row0, row0 + n) into `out` (out->n = n, first_line = row0 + 1: messages about
 * a row name it as PATH:ROW, 1-based); out->cap >= n, its value arrays grow as needed. Checks
 * every group it touches the first time. Not thread-safe per handle. */
rec_status rec_rawcols_read(rec_rawcols *r, int64_t row0, int64_t n, rec_raw_block *out);
/* Checks every group now. */
rec_status rec_rawcols_verify(rec_rawcols *r);

#ifdef __cplusplus
}
#endif
#endif
