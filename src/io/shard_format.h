/* Private layout constants of the .rshard format, shared by the writer (shard_write.c) and the
 * reader (shard_read.c). The layout itself is described in include/rectrain/shard.h; every
 * offset below is in bytes from the start of its section, every integer little-endian.
 */
#ifndef RECTRAIN_SHARD_FORMAT_H
#define RECTRAIN_SHARD_FORMAT_H

#include <stdint.h>
#include <string.h>

#include "rectrain/batch.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error ".rshard is written and mmapped in host order, which must be little-endian"
#endif

#define SHARD_MAGIC "RSHARD01"
#define SHARD_END_MAGIC "RSHDEND1"

enum {
    SHARD_ALIGN = 64,

    /* header prefix, at file offset 0 (64 bytes) */
    SHARD_H_MAGIC = 0,         /* char[8] "RSHARD01" */
    SHARD_H_VERSION = 8,       /* u32 */
    SHARD_H_FLAGS = 12,        /* u32, SHARD_HF_* */
    SHARD_H_HEADER_BYTES = 16, /* u64, whole header incl. padding, multiple of 64 */
    SHARD_H_FILE_BYTES = 24,   /* u64, size of the complete file */
    SHARD_H_FOOTER_OFF = 32,   /* u64, file offset of the footer */
    SHARD_H_CRC = 40,          /* u32, CRC32 of [0, header_bytes) with these 4 bytes as 0 */
    SHARD_H_PREFIX = 64,       /* bytes 44..63 are zero */

    /* header body, at file offset 64 */
    SHARD_B_SPEC_NAME = 0,     /* char[64], NUL-terminated */
    SHARD_B_N_DENSE = 64,      /* i32 Dn */
    SHARD_B_N_SPARSE = 68,     /* i32 F */
    SHARD_B_N_VOCABS = 72,     /* i32 number of vocabularies */
    SHARD_B_GROUP_ROWS = 80,   /* i64 G, rows per full group (76..79 zero) */
    SHARD_B_FIXED = 88,        /* then F features, vocabulary sizes, vocabulary ids */
    SHARD_FEATURE_BYTES = 72,  /* char name[64] (NUL-terminated), i64 table rows R */

    /* footer, at footer_offset */
    SHARD_F_N_GROUPS = 0,      /* u64 */
    SHARD_F_ROWS = 8,          /* i64 N, total rows */
    SHARD_F_N_SPARSE = 16,     /* i32 F (must match the header) */
    SHARD_F_ENTRY_BYTES = 20,  /* u32, bytes per directory entry = shard_entry_bytes(F) */
    SHARD_F_FIXED = 24,        /* then the directory */
    SHARD_E_OFFSET = 0,        /* u64 file offset of the group, multiple of 64 */
    SHARD_E_BYTES = 8,         /* u64 bytes of the group, including padding */
    SHARD_E_ROWS = 16,         /* i64 rows in the group, 1..G */
    SHARD_E_CRC = 24,          /* u32 CRC32 of the group's bytes (28..31 zero) */
    SHARD_E_NNZ = 32,          /* i64 nnz[F], ids per sparse feature in the group, then
                                  u8 flags[F] (SHARD_FF_*), zero-padded to a multiple of 8 */
    SHARD_TAIL = 24,           /* u32 footer CRC, u32 0, u64 footer_offset, char[8] "RSHDEND1" */

    /* smallest possible file: header with no features or vocabularies, no groups */
    SHARD_MIN_BYTES = 192 + SHARD_F_FIXED + SHARD_TAIL,
};

/* Checksums (all CRC-32 as rec_crc32, starting from 0):
 *   header  CRC of bytes [0, header_bytes) with the 4 bytes at SHARD_H_CRC read as zero,
 *           computed after file_bytes and footer_off have their final values;
 *   group   CRC of the group's `bytes` bytes at its offset, padding included;
 *   footer  CRC of [footer_off, file_bytes - SHARD_TAIL): the fixed part and the directory.
 * Groups follow the header back to back (each a multiple of 64 bytes); the footer follows
 * the last group, and the 24-byte tail ends the file: file_bytes = footer_off +
 * SHARD_F_FIXED + n_groups * entry_bytes + SHARD_TAIL. Vocabularies in the header body:
 * i64 sizes[n_vocabs], then the ids of vocabulary 0, 1, ... (i64 each, in index order), then,
 * with SHARD_HF_VOCAB_SIGS, u64 sigs[n_vocabs] (rec_spec_vocab_sigs of the spec that built
 * them; shards written before 2026-11-24 have none). */
enum {
    /* header flags */
    SHARD_HF_LABEL = 1,        /* rows carry labels */
    SHARD_HF_VOCAB_SIGS = 2,   /* the vocabularies' signatures follow their ids */
    SHARD_HF_ALL = SHARD_HF_LABEL | SHARD_HF_VOCAB_SIGS, /* any other bit set is refused */

    SHARD_T_FOOTER_CRC = 0,    /* tail: u32 */
    SHARD_T_FOOTER_OFF = 8,    /* tail: u64 */
    SHARD_T_MAGIC = 16,        /* tail: char[8] */
    SHARD_E_FIXED = 32,        /* directory entry bytes before nnz[F] */

    /* per-feature flags of a directory entry */
    SHARD_FF_SINGLE = 1,       /* every row of the group has exactly one id (nnz == rows):
                                  the offsets section is omitted, offsets[r] = r implied */
    SHARD_FF_ALL = SHARD_FF_SINGLE, /* any other bit set is refused */
};

/* Sanity bounds the reader enforces before any size arithmetic, so that products of these
 * fields fit in 64 bits whatever a corrupted file says. The writer refuses to exceed them. */
#define SHARD_MAX_GROUP_ROWS ((int64_t)1 << 30)
#define SHARD_MAX_DENSE ((int32_t)1 << 20)
#define SHARD_MAX_SPARSE ((int32_t)1 << 16)

static inline uint64_t shard_pad(uint64_t x) { return (x + SHARD_ALIGN - 1) & ~(uint64_t)(SHARD_ALIGN - 1); }

/* Width of a stored id of a feature whose table has R rows: ids are in [0, R), so they fit an
 * i32 when R <= 2^31 (rec_ids_wide, the rule a batch follows too). Decided by the header
 * alone, the same for every group. */
static inline uint64_t shard_id_bytes(int64_t table_rows) { return rec_ids_wide(table_rows) ? 8 : 4; }

/* Bytes of one directory entry for F sparse features: the fixed part, nnz i64 (F), flags u8 (F)
 * padded to 8 so that the next entry's u64 fields stay 8-aligned. */
static inline uint64_t shard_entry_bytes(int32_t n_sparse) {
    return SHARD_E_FIXED + 8 * (uint64_t)n_sparse + (((uint64_t)n_sparse + 7) & ~(uint64_t)7);
}

/* Bytes of sparse feature f's sections in a group of `rows` rows: offsets i64 (n+1) unless
 * the feature is single-hot there, then ids (nnz) of shard_id_bytes(R) each, both padded. */
static inline uint64_t shard_feature_bytes(uint64_t rows, uint8_t flags, uint64_t id_bytes, uint64_t nnz) {
    return ((flags & SHARD_FF_SINGLE) ? 0 : shard_pad(8 * (rows + 1))) + shard_pad(id_bytes * nnz);
}

/* Bytes of a row group of `rows` rows: label f32 (n) | dense f32 (n, Dn) | per sparse feature
 * its shard_feature_bytes, each section padded with zeros to 64 bytes. `table_rows`, `nnz` and
 * `flags` are (F). */
static inline uint64_t shard_group_bytes(uint64_t rows, uint64_t n_dense, int32_t n_sparse,
                                         const int64_t *table_rows, const int64_t *nnz,
                                         const uint8_t *flags) {
    uint64_t b = shard_pad(4 * rows) + shard_pad(4 * rows * n_dense);
    for (int32_t f = 0; f < n_sparse; f++)
        b += shard_feature_bytes(rows, flags[f], shard_id_bytes(table_rows[f]), (uint64_t)nnz[f]);
    return b;
}

static inline uint32_t shard_get_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t shard_get_u64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static inline int32_t shard_get_i32(const uint8_t *p) { int32_t v; memcpy(&v, p, 4); return v; }
static inline int64_t shard_get_i64(const uint8_t *p) { int64_t v; memcpy(&v, p, 8); return v; }
static inline void shard_put_u32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void shard_put_u64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }

#endif
