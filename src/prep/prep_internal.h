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


/* ---- spec: spec.c parses the JSON into a draft, spec_check.c validates it ------------------
 * The draft holds what parsing knows but the rec_spec cannot: input and table names (resolved
 * later), each feature's JSON path for messages, and which tables are "auto". Features of the
 * draft's spec are in JSON order (nodes, then dense, then sparse); rec__spec_check resolves
 * names, sorts the features topologically, infers every type and fills the derived fields. */
enum { REC__SPEC_PATH_MAX = 32 };
typedef struct rec__spec_draft {
    const char *origin;                               /* names the spec in messages */
    rec_spec *s;
    char (*in_names)[REC_MAX_INPUTS][REC_NAME_MAX];   /* (n_features) */
    uint8_t *in_is_array;                             /* (n_features) "inputs" (1) or "input" (0) */
    char (*table_names)[REC_NAME_MAX];                /* (n_features) sparse only */
    char (*paths)[REC__SPEC_PATH_MAX];                /* (n_features) "$.sparse[3]" */
    uint8_t *table_auto;                              /* (n_tables) rows given as "auto" */
} rec__spec_draft;

/* Validates and completes d->s in place (spec_check.c). On error returns REC_EINVAL with
 * "ORIGIN: $.path: what is wrong; what to do" and leaves d->s for the caller to free. */
rec_status rec__spec_check(rec__spec_draft *d);
/* Records "ORIGIN: PATH: message" as the last error and returns REC_EINVAL (spec.c). */
rec_status rec__spec_fail(const char *origin, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
