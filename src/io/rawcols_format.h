/* Private layout constants of the .rraw format, shared by its writer and reader (rawcols.c),
 * the tests and the fuzz target. The layout is described in include/rectrain/rawcols.h; every
 * offset is in bytes from the start of its section, every integer little-endian.
 */
#ifndef RECTRAIN_RAWCOLS_FORMAT_H
#define RECTRAIN_RAWCOLS_FORMAT_H

#include "rectrain/io.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error ".rraw is written and mmapped in host order, which must be little-endian"
#endif

#define RRAW_END_MAGIC "RRAWEND1"

enum {
    /* header, at file offset 0 */
    RRAW_HEADER = 64,
    RRAW_H_VERSION = 8,  /* u32 */
    RRAW_H_FLAGS = 12,   /* u32, RRAW_FLAG_LABEL */
    RRAW_H_G = 16,       /* i64 rows of a full group */
    RRAW_H_FILE = 24,    /* u64 the file's bytes */
    RRAW_H_FOOTER = 32,  /* u64 file offset of the footer */
    RRAW_H_CRC = 40,     /* u32 CRC32 of the 64 bytes with these 4 as zero */
    RRAW_FLAG_LABEL = 1,

    /* footer: groups, rows, then a directory entry per group */
    RRAW_F_FIXED = 16,
    RRAW_E_OFFSET = 0, RRAW_E_BYTES = 8, RRAW_E_ROWS = 16, RRAW_E_CRC = 24, /* u64 u64 i64 u32 */
    RRAW_E_INT32 = 28,   /* u32 mask: int column c stored as i32 */
    RRAW_E_ID32 = 32,    /* u32 mask: categorical c's ids stored as u32 */
    RRAW_E_IMPLIED = 36, /* u32 mask: categorical c stores no offsets */
    RRAW_E_NNZ = 40,     /* i64 ids of each categorical */
    RRAW_ENTRY = 40 + 8 * REC_CRITEO_NCAT,
    /* tail, the file's last bytes: u32 footer CRC, u32 0, u64 footer offset, end magic */
    RRAW_TAIL = 24,
    RRAW_T_CRC = 0, RRAW_T_FOOTER = 8, RRAW_T_MAGIC = 16,

    RRAW_DEFAULT_G = 65536, RRAW_MAX_G = 1 << 24,
};

#endif
