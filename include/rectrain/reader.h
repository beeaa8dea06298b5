/* rectrain — a data set's batches for other languages (python/rectrain reads through it with
 * ctypes): the training loader behind a handle and plain types only, so that a binding needs no
 * struct layout. A batch's arrays are the loader's own (no copy) and stay valid until the next
 * rec_reader_next or rec_reader_close. Built into librectrain_reader.so as well as the static
 * library.
 *
 *   rec_reader *r;  rec_reader_open(&r, paths, 1, 2048, 1, seed, epoch, threads);
 *   while (rec_reader_next(r, &n) == REC_OK && n > 0) { labels, dense, per feature offsets+ids }
 *   rec_reader_close(r);
 *
 * The order: file order (shuffled 0), or the one `rectrain train` reads for (seed, epoch)
 * (REC_SHUFFLE_BLOCK_ROWS-row blocks, REC_SHUFFLE_BUFFER_BLOCKS a window), batch for batch. */
#ifndef RECTRAIN_READER_H
#define RECTRAIN_READER_H

#include <stdint.h>

#include "rectrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rec_reader rec_reader;

/* paths[0..n_paths): a .rshard, or several read as one data set (as `train --data` takes
 * them); batches of `batch` rows; threads >= 1 for the loader (the shuffled gather and
 * checksums). */
rec_status rec_reader_open(rec_reader **out, const char *const *paths, int n_paths, int64_t batch, int shuffled,
                           uint64_t seed, int64_t epoch, int threads);
void rec_reader_close(rec_reader *r);

int64_t rec_reader_rows(const rec_reader *r);                 /* N of the data set */
int32_t rec_reader_n_dense(const rec_reader *r);              /* Dn */
int32_t rec_reader_n_sparse(const rec_reader *r);             /* F */
int64_t rec_reader_table_rows(const rec_reader *r, int32_t f);/* R of feature f */

/* The next batch: *n its rows (0 at the end of the epoch). */
rec_status rec_reader_next(rec_reader *r, int64_t *n);
const float *rec_reader_labels(const rec_reader *r);          /* (n) */
const float *rec_reader_dense(const rec_reader *r);           /* (n, Dn) row-major */
const int64_t *rec_reader_offsets(const rec_reader *r, int32_t f); /* (n + 1) from 0 */
/* Feature f's ids: int32 (*width 4) or int64 (*width 8), offsets[n] of them. */
const void *rec_reader_ids(const rec_reader *r, int32_t f, int *width);

#ifdef __cplusplus
}
#endif

#endif
