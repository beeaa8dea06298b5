/* libFuzzer target for the model config (model.h, docs/models.md): any bytes go to
 * rec_model_config_parse. A rejection must name the input ("fuzz.json: ..."). A config that
 * parses is bound to Criteo-shaped data (13 dense values, 26 tables of 1..1000 rows, or as
 * many tables as the config lists, of its sizes); one that binds must have the invariants the
 * model builder relies on, and its canonical JSON (rec_model_config_to_json, what checkpoints
 * store) must parse back to an equal config. Anything else (a crash, a leak, UB, an abort
 * below) is a bug. Seeds: the JSON files of configs/ (scripts/fuzz.sh copies them); keys
 * and values: fuzz_model.dict. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rectrain/model.h"

static void check_bound(const rec_model_config *c) {
    if (c->n_dense != 13 || c->n_sparse < 1 || !c->table_rows || c->emb_dim < 1 || c->batch_size < 1 ||
        c->epochs < 1)
        abort();
    for (int f = 0; f < c->n_sparse; f++)
        if (c->table_rows[f] < 1) abort();
    const int n[3] = {c->n_bottom, c->n_top, c->n_deep};
    for (int k = 0; k < 3; k++)
        if (n[k] < 0 || n[k] > REC_MLP_MAX_LAYERS) abort();
    for (int l = 0; l < c->n_bottom; l++)
        if (c->bottom[l] < 1) abort();
    for (int l = 0; l < c->n_top; l++)
        if (c->top[l] < 1) abort();
    for (int l = 0; l < c->n_deep; l++)
        if (c->deep[l] < 1) abort();
    if (c->kind == REC_MODEL_DLRM && (c->n_bottom < 1 || c->bottom[c->n_bottom - 1] != c->emb_dim || c->n_top < 1 ||
                                      c->top[c->n_top - 1] != 1))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    rec_model_config c;
    if (rec_model_config_parse(&c, (const char *)data, size, "fuzz.json") != REC_OK) {
        if (strncmp(rec_errmsg(), "fuzz.json: ", 11)) abort();
        return 0;
    }
    int64_t rows[26];
    for (int f = 0; f < 26; f++) rows[f] = 1 + (f * 37) % 1000;
    const int F = c.table_rows ? c.n_sparse : 26;
    const rec_status st = rec_model_config_bind(&c, 13, F, c.table_rows ? c.table_rows : rows, "fuzz data");
    if (st != REC_OK) {
        if (!strstr(rec_errmsg(), "fuzz")) abort(); /* names the config or the data */
        rec_model_config_free(&c);
        return 0;
    }
    check_bound(&c);
    char *text = rec_model_config_to_json(&c);
    if (!text) abort();
    rec_model_config d;
    if (rec_model_config_parse(&d, text, strlen(text), "canonical") != REC_OK) abort();
    if (rec_model_config_bind(&d, 13, F, d.table_rows, "fuzz data") != REC_OK || !rec_model_config_equal(&c, &d))
        abort();
    free(text);
    rec_model_config_free(&d);
    rec_model_config_free(&c);
    return 0;
}
