/* The GPU's gather of a batch from staged windows (cuda_impl.h, "staged windows"): the row
 * functions its kernels (model.cu) and its CPU reference (stage.c, rec_cuda_gather_host)
 * share, so that the two read a staged row alike. C11 and CUDA C++ both compile this header.
 *
 * A batch is a list of staged positions, pos = slot * slot_rows + row: row `row` of the window
 * in staging slot `slot`. Feature f of slot s is src[s * F + f]: its ids and, where a row may
 * hold other than one id, its starts (row r's ids are ids[starts[r] .. starts[r + 1])); a
 * feature with one id a row has no starts (its row r's id is ids[r]).
 */
#ifndef RECTRAIN_CUDA_GATHER_H
#define RECTRAIN_CUDA_GATHER_H

#include <stdint.h>

#include "rectrain/core.h"

typedef struct rec_gsrc {
    const int32_t *starts; /* (n + 1), or NULL: one id a row */
    const int32_t *ids;
} rec_gsrc;

/* A staging slot's labels (n) and dense values (n, Dn). */
typedef struct rec_gslot {
    const float *label, *dense;
} rec_gslot;

REC_HD int64_t rec_gather_slot(uint32_t pos, int64_t slot_rows) { return (int64_t)pos / slot_rows; }
REC_HD int64_t rec_gather_row(uint32_t pos, int64_t slot_rows) { return (int64_t)pos % slot_rows; }

/* Row r's ids in feature source s: how many, and where they start. */
REC_HD int32_t rec_gather_len(const rec_gsrc *s, int64_t r) { return s->starts ? s->starts[r + 1] - s->starts[r] : 1; }
REC_HD int64_t rec_gather_first(const rec_gsrc *s, int64_t r) { return s->starts ? s->starts[r] : r; }

/* Entry (f, b) of the lengths the batch's offsets are the exclusive scan of: F runs of B + 1,
 * the last of each 0, so that the scan's entry f * (B + 1) + b is feature f's offset of row b,
 * counted from the batch's first id (rec_cuda_pack's absolute offsets). */
REC_HD int32_t rec_gather_len_entry(const rec_gsrc *src, const uint32_t *pos, int B, int F, int64_t slot_rows, int64_t e) {
    const int64_t f = e / (B + 1), b = e % (B + 1);
    if (b == B) return 0;
    return rec_gather_len(&src[rec_gather_slot(pos[b], slot_rows) * F + f], rec_gather_row(pos[b], slot_rows));
}

/* Lanes lane, lane + lanes, ... of the ids of (feature f, batch row b) into ids at off[f * (B + 1) + b]. */
REC_HD void rec_gather_ids(const rec_gsrc *src, const uint32_t *pos, int B, int F, int64_t slot_rows, const int32_t *off,
                           int64_t f, int64_t b, int lane, int lanes, int32_t *ids) {
    const rec_gsrc *s = &src[rec_gather_slot(pos[b], slot_rows) * F + f];
    const int64_t r = rec_gather_row(pos[b], slot_rows), first = rec_gather_first(s, r);
    const int32_t n = rec_gather_len(s, r);
    int32_t *to = ids + off[f * (B + 1) + b];
    for (int32_t k = lane; k < n; k += lanes) to[k] = s->ids[first + k];
}

/* Entry e of the batch's dense part: b = e / (Dn + 1), column c = e % (Dn + 1); c < Dn is
 * dense (b, c), c = Dn the label (labels after the B x Dn dense values, as the model reads). */
REC_HD void rec_gather_dense(const rec_gslot *slot, const uint32_t *pos, int B, int Dn, int64_t slot_rows, int64_t e,
                             float *out) {
    const int64_t b = e / (Dn + 1), c = e % (Dn + 1);
    const rec_gslot *s = &slot[rec_gather_slot(pos[b], slot_rows)];
    const int64_t r = rec_gather_row(pos[b], slot_rows);
    if (c < Dn) out[b * Dn + c] = s->dense[r * Dn + c];
    else out[(int64_t)B * Dn + b] = s->label[r];
}

#endif
