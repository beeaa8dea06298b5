/* Internal interfaces shared by the files of src/prep. */
#ifndef RECTRAIN_PREP_INTERNAL_H
#define RECTRAIN_PREP_INTERNAL_H

#include "rectrain/prep.h"

/* The spec a plan was compiled from, and its vocabularies (or NULL) (exec.c). */
const rec_spec *rec__prep_plan_spec(const rec_prep_plan *p);
const rec_vocab_set *rec__prep_plan_vocabs(const rec_prep_plan *p);

/* The open-addressing table of a vocabulary (vocab.c): keys, values and used flags of `cap`
 * slots, probed linearly from rec_mix64(id) (the GPU executor copies it to the device). */
void rec__vocab_table(const rec_vocab *v, const int64_t **keys, const int64_t **vals, const uint8_t **used,
                      int64_t *cap);

/* Counts ids[0..n) into vocabulary slot k (vocab.c). */
rec_status rec__vocab_count_ids(rec_vocab_counts *c, int32_t k, const int64_t *ids, int64_t n);

/* The element functions shared with the GPU executor: floor-mod by multiply-shift
 * (rec_g_floor_mod), the sigrid hash's mixes (gops.h). */
#include "gops.h"


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
