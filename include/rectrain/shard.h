/* rectrain — .rshard: preprocessed rows, columnar, mmap-able, self-describing.
 *
 * Layout (all integers little-endian; every section starts on a 64-byte boundary):
 *
 *   header   magic "RSHARD01", version, flags, header bytes, schema (spec name, dense width
 *            Dn, sparse features F with name and table rows), vocabularies and (flag 2) their
 *            signatures (rec_spec_vocab_sigs), CRC32 of the header
 *   groups   row groups of up to G rows, each columnar:
 *              label f32 (n) | dense f32 (n, Dn) | per sparse feature: offsets i64 (n+1),
 *              ids (nnz)
 *            ids are i32 when the feature's table has R <= 2^31 rows, i64 otherwise (known
 *            from the header); the offsets are omitted when the feature is single-hot in the
 *            group (every row exactly one id, so nnz == n and offsets[r] = r), which the
 *            group's directory entry flags. Offsets, where stored, are i64 from 0 to nnz.
 *   footer   group directory (file offset, bytes, rows, CRC32 of the group, then per sparse
 *            feature its nnz and flags), total rows, CRC32 of the footer, then the footer's
 *            offset and magic "RSHDEND1" (16 bytes)
 *
 * Opening checks magic, version, sizes, every offset against the file size, and the header
 * and footer checksums; a group's checksum is checked the first time it is read. Anything
 * that fails is refused with REC_EFORMAT and a message naming the file and what is wrong
 * (truncated, wrong magic, checksum mismatch in group k, ...), never read as garbage.
 */
#ifndef RECTRAIN_SHARD_H
#define RECTRAIN_SHARD_H

#include <stdint.h>

#include "rectrain/batch.h"
#include "rectrain/core.h"
#include "rectrain/prep.h"
#include "rectrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { REC_SHARD_VERSION = 1 };

/* The schema a shard describes itself with. */
typedef struct rec_shard_feature {
    char name[REC_NAME_MAX];
    int64_t table_rows;       /* R */
} rec_shard_feature;

typedef struct rec_shard_schema {
    char spec_name[REC_NAME_MAX];
    int has_label;
    int32_t n_dense;          /* Dn */
    int32_t n_sparse;         /* F */
    rec_shard_feature *sparse;/* (F) */
} rec_shard_schema;

/* ---- writer ------------------------------------------------------------------------------
 * Streams batches into row groups; the file appears complete only at rec_shard_writer_close
 * (written to PATH.tmp, fsynced, renamed), so a crash never leaves a half shard at PATH. */
typedef struct rec_shard_writer rec_shard_writer;

/* `vocabs` (may be NULL) are stored so that `rectrain prep --vocab-from` can reuse them. */
rec_status rec_shard_writer_open(rec_shard_writer **out, const char *path,
                                 const rec_spec *spec, const rec_vocab_set *vocabs,
                                 int has_label, int64_t group_rows);
/* Appends the batch's rows (ids of either width; each is stored at its table's width). */
rec_status rec_shard_writer_append(rec_shard_writer *w, const rec_batch *b);
/* Finishes the file (footer, fsync, rename). Frees the writer whatever happens. */
rec_status rec_shard_writer_close(rec_shard_writer *w);
/* Abandons the file (removes PATH.tmp) and frees the writer. */
void rec_shard_writer_abort(rec_shard_writer *w);

/* ---- reader ------------------------------------------------------------------------------ */
typedef struct rec_shard rec_shard;

rec_status rec_shard_open(rec_shard **out, const char *path);
void rec_shard_close(rec_shard *s);
const rec_shard_schema *rec_shard_get_schema(const rec_shard *s);
int64_t rec_shard_rows(const rec_shard *s);
int64_t rec_shard_groups(const rec_shard *s);
/* Copies rows [row0, row0+n) into `b` (b->n = n). The batch must have the shard's Dn and F
 * and cap >= n; each of its features takes the id width the shard stores (rec_ids_wide).
 * Verifies the checksum of every group it touches the first time. */
rec_status rec_shard_read(rec_shard *s, int64_t row0, int64_t n, rec_batch *b);
/* 1 when sparse feature f holds one id a row in every group that rows [row0, row0+n) touch
 * (the groups store it without offsets), from the shard's directory; 0 otherwise or for rows
 * outside the shard. */
int rec_shard_single(const rec_shard *s, int32_t f, int64_t row0, int64_t n);
/* Checks (once) every group that rows [row0, row0+n) touch, as a read of them would. After
 * it, reading those rows changes nothing in s: threads may read them from one handle at once. */
rec_status rec_shard_check_rows(rec_shard *s, int64_t row0, int64_t n);
/* Checks groups' checksums on the pool's threads (NULL, the default: the reading thread's):
 * the loader of a GPU's training, whose host CPUs are otherwise free, reads groups faster than
 * one thread sums them. The pool outlives s's reads. */
void rec_shard_set_pool(rec_shard *s, rec_pool *pool);
/* Checks every group's checksum now. */
rec_status rec_shard_verify(rec_shard *s);
/* The vocabularies stored in the shard (n = 0 when none). Owned by the shard. */
const rec_vocab_set *rec_shard_vocabs(const rec_shard *s);
/* --vocab-from: binds the shard's vocabularies to `spec` (loaded from spec_path) with
 * rec_spec_bind_vocabs, after checking that they are the ones this spec would count: one
 * per categorify op, each with the signature (rec_spec_vocab_sigs) this spec gives its slot.
 * Vocabulary k holds the ids the spec's k-th categorify op met, so those of a shard prepped
 * with another spec would map another column's ids into the same tables. A shard written
 * before vocabularies were signed must have the spec's sparse features, in order, and each
 * categorified feature's table must come out at the rows the shard recorded. */
rec_status rec_shard_bind_vocabs(const rec_shard *s, rec_spec *spec, const char *spec_path);

#ifdef __cplusplus
}
#endif
#endif
