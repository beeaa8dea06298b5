/* libFuzzer target for the spec parser and validator: any bytes go to rec_spec_parse; a spec
 * that passes gets dummy vocabularies bound (one id each), is checked against the invariants
 * the executor relies on, and is freed. Everything else must be rejected cleanly (a status
 * and a message), never crash or leak. Build with clang -fsanitize=fuzzer,address,undefined
 * over this file, src/prep/spec.c, spec_check.c, ops_ref.c, vocab.c, the src/core sources and
 * src/io/raw_block.c (-lcjson -lz -lm -lpthread). Seed it with the files of configs/ and
 * -max_len=12000 or more: cJSON is not instrumented, so seeds cut short by the default
 * max_len turn into invalid JSON and coverage stalls. */
#include <stdint.h>
#include <stdlib.h>

#include "rectrain/prep.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    rec_spec *s = NULL;
    if (rec_spec_parse(&s, (const char *)data, size, "fuzz.json") != REC_OK) {
        if (s) abort(); /* no spec may come back on error */
        return 0;
    }
    if (s->n_vocabs > 0) {
        rec_vocab_set vs = {0, calloc((size_t)s->n_vocabs, sizeof(rec_vocab *))};
        if (vs.v) {
            int64_t id = 7;
            vs.n = s->n_vocabs;
            for (int32_t k = 0; k < vs.n; k++)
                if (rec_vocab_from_ids(&vs.v[k], &id, 1) != REC_OK) abort();
            if (rec_spec_bind_vocabs(s, &vs) != REC_OK) abort();
            for (int32_t f = 0; f < s->n_sparse; f++)
                if (rec_spec_table_rows(s, f) < 1) abort(); /* every table sized after binding */
            rec_vocab_set_free(&vs);
        }
    }
    for (int i = 0; i < s->n_features; i++) { /* invariants the executor relies on */
        const rec_feature *ft = &s->features[i];
        for (int k = 0; k < ft->n_inputs; k++)
            if (ft->inputs[k] >= i || ft->inputs[k] < -39) abort(); /* topological order */
        if (ft->kind == REC_FEAT_DENSE && (ft->out_type.dtype != REC_DT_F32 || ft->out_type.nullable ||
                                           ft->dense_offset + ft->out_type.width > s->n_dense))
            abort();
        if (ft->kind == REC_FEAT_SPARSE &&
            (ft->out_type.dtype != REC_DT_I64 || ft->out_type.nullable || ft->out_type.bound < 1 ||
             ft->out_type.bound > s->tables[ft->table].rows || rec_spec_sparse(s, ft->sparse_index) != ft))
            abort();
    }
    rec_spec_free(s);
    return 0;
}
