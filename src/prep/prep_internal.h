/* Internal interfaces shared by the files of src/prep. */
#ifndef RECTRAIN_PREP_INTERNAL_H
#define RECTRAIN_PREP_INTERNAL_H

#include "rectrain/prep.h"

/* The spec a plan was compiled from (exec.c). */
const rec_spec *rec__prep_plan_spec(const rec_prep_plan *p);

/* Counts ids[0..n) into vocabulary slot k (vocab.c). */
rec_status rec__vocab_count_ids(rec_vocab_counts *c, int32_t k, const int64_t *ids, int64_t n);

/* Floor-mod of x by d through the multiply-shift division of the sigrid_hash UDF
 * (rec_sigrid_magic gives (mult, shift) for d); exact for every int64 x and d >= 2. */
static inline int64_t rec__floor_mod_magic(int64_t x, int64_t d, uint64_t mult, int shift) {
    int64_t sign = x >> 63;
    __int128 prod = (__int128)(unsigned __int128)mult * (__int128)(sign ^ x);
    int64_t q = sign ^ (int64_t)(prod >> (64 + shift));
    return (int64_t)((uint64_t)x - (uint64_t)q * (uint64_t)d); /* wraps exactly: result in [0, d) */
}

#endif
