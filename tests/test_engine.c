/* The parallel prep engine: parsing + preprocessing a chunk on 1..4 threads must give, thread
 * batches concatenated, exactly what the single-threaded reference path gives (rec_tsv_parse of
 * the whole text, then the row-at-a-time reference executor); malformed rows are reported in
 * file order whatever thread meets them; vocabularies counted on several threads equal those
 * counted on one. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "rectrain/core.h"
#include "rectrain/io.h"
#include "rectrain/prep.h"

static rec_spec *load_spec(const char *name) {
    const char *dir = getenv("REC_SOURCE_DIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/configs/%s", dir ? dir : ".", name);
    rec_spec *s = NULL;
    if (rec_spec_load(&s, path)) fprintf(stderr, "%s\n", rec_errmsg());
    return s;
}

static char *gen_text(int64_t rows, int multi_hot, size_t *len) {
    rec_gen_opts o;
    rec_gen_opts_default(&o);
    o.scale = 0.001;
    o.multi_hot = multi_hot;
    rec_gen *g;
    if (rec_gen_init(&g, &o, rows)) abort();
    size_t cap = rec_gen_max_row_bytes(g) * (size_t)rows + 1;
    char *text = malloc(cap);
    if (!text || rec_gen_rows(g, 0, rows, text, cap, len, NULL)) abort();
    rec_gen_free(g);
    return text;
}

static int64_t count_lines(const char *t, size_t n) {
    int64_t k = 0;
    for (size_t i = 0; i < n; i++) k += t[i] == '\n';
    return k;
}

/* Rows [row, row + b->n) of `want` equal batch b; returns the rows compared or -1. */
static int64_t compare_rows(const rec_batch *want, int64_t row, const rec_batch *b) {
    for (int64_t r = 0; r < b->n; r++) {
        if (want->label[row + r] != b->label[r]) return -1;
        if (memcmp(want->dense + (row + r) * want->n_dense, b->dense + r * b->n_dense,
                   (size_t)b->n_dense * sizeof(float)) != 0)
            return -1;
        for (int32_t f = 0; f < b->n_sparse; f++) {
            const rec_jagged *x = &want->sparse[f], *y = &b->sparse[f];
            int64_t lx = x->offsets[row + r + 1] - x->offsets[row + r], ly = y->offsets[r + 1] - y->offsets[r];
            if (lx != ly) return -1;
            for (int64_t k = 0; k < lx; k++)
                if (rec_jagged_id(x, x->offsets[row + r] + k) != rec_jagged_id(y, y->offsets[r] + k)) return -1;
        }
    }
    return b->n;
}

/* Runs `text` through an engine of `threads` threads in one chunk and compares with `want`. */
static void check_engine(const rec_prep_plan *plan, const char *text, size_t len, int threads,
                         const rec_batch *want, const char *what) {
    rec_prep_engine *e;
    rec_tsv_opts o = {.has_label = 1};
    CHECK(rec_prep_engine_init(&e, plan, threads, &o, "mem.tsv") == REC_OK, "engine: %s", rec_errmsg());
    rec_text_chunk c = {.text = text, .len = len, .first_line = 1, .n_lines = count_lines(text, len)};
    /* Twice: the second run uses the other set of batches and must give the same rows. */
    for (int run = 0; run < 2; run++) {
        CHECK(rec_prep_engine_run(e, &c) == REC_OK, "run: %s", rec_errmsg());
        int64_t row = 0, ok = 1;
        for (int t = 0; t < threads && ok; t++) {
            int64_t k = compare_rows(want, row, rec_prep_engine_batch(e, t));
            if (k < 0) ok = 0;
            else row += k;
        }
        CHECK(ok && row == want->n, "%s, %d threads, run %d: rows differ from the reference (%lld of %lld)",
              what, threads, run, (long long)row, (long long)want->n);
    }
    rec_prep_engine_free(e);
}

static void test_matches_reference(const char *spec_name, int multi_hot) {
    rec_spec *spec = load_spec(spec_name);
    CHECK(spec != NULL, "load %s", spec_name);
    if (!spec) return;
    size_t len;
    const int64_t N = 3000;
    char *text = gen_text(N, multi_hot, &len);

    /* Vocabularies: counted on 1 thread and on 3 threads they must be identical. */
    rec_vocab_set vs1 = {0}, vs3 = {0};
    if (spec->n_vocabs > 0) {
        rec_prep_plan *cp;
        CHECK(rec_prep_plan_init(&cp, spec, NULL) == REC_OK, "counting plan");
        rec_tsv_opts o = {.has_label = 1};
        rec_text_chunk c = {.text = text, .len = len, .first_line = 1, .n_lines = N};
        for (int k = 0; k < 2; k++) {
            rec_prep_engine *e;
            CHECK(rec_prep_engine_init(&e, cp, k ? 3 : 1, &o, "mem.tsv") == REC_OK, "engine");
            CHECK(rec_prep_engine_count(e, &c) == REC_OK, "count: %s", rec_errmsg());
            CHECK(rec_prep_engine_vocabs(e, k ? &vs3 : &vs1) == REC_OK, "vocabs: %s", rec_errmsg());
            rec_prep_engine_free(e);
        }
        rec_prep_plan_free(cp);
        int same = vs1.n == vs3.n;
        for (int32_t i = 0; same && i < vs1.n; i++)
            same = rec_vocab_size(vs1.v[i]) == rec_vocab_size(vs3.v[i]) &&
                   memcmp(rec_vocab_ids(vs1.v[i]), rec_vocab_ids(vs3.v[i]),
                          (size_t)rec_vocab_size(vs1.v[i]) * sizeof(int64_t)) == 0;
        CHECK(same && vs1.n == spec->n_vocabs, "%s: vocabularies from 1 and 3 threads differ", spec_name);
        CHECK(rec_spec_bind_vocabs(spec, &vs1) == REC_OK, "bind: %s", rec_errmsg());
    }

    /* The reference: whole text parsed at once, then the row-at-a-time executor. */
    rec_raw_block raw;
    rec_tsv_opts o = {.has_label = 1};
    CHECK(rec_raw_block_init(&raw, N) == REC_OK, "raw");
    CHECK(rec_tsv_parse(&o, "mem.tsv", text, len, 1, &raw, NULL) == REC_OK, "parse: %s", rec_errmsg());
    rec_batch want;
    rec_batch_init(&want, N, spec->n_dense, spec->n_sparse, 1);
    CHECK(rec_prep_run_ref(spec, spec->n_vocabs ? &vs1 : NULL, &raw, 0, raw.n, &want) == REC_OK, "ref: %s",
          rec_errmsg());

    rec_prep_plan *plan;
    CHECK(rec_prep_plan_init(&plan, spec, spec->n_vocabs ? &vs1 : NULL) == REC_OK, "plan: %s", rec_errmsg());
    for (int t = 1; t <= 4; t++) check_engine(plan, text, len, t, &want, spec_name);

    rec_prep_plan_free(plan);
    rec_batch_free(&want);
    rec_raw_block_free(&raw);
    rec_vocab_set_free(&vs1);
    rec_vocab_set_free(&vs3);
    rec_spec_free(spec);
    free(text);
}

/* Bad rows at lines 2500 and 700 of 3000: on 4 threads the pieces meet them in different
 * threads; FAIL mode must name line 700 (the first in the file), SKIP mode both. */
static void test_bad_rows(void) {
    rec_spec *spec = load_spec("criteo_standard.json");
    if (!spec) return;
    size_t len;
    char *text = gen_text(3000, 0, &len);
    int64_t line = 1;
    for (size_t i = 0; i < len; i++) {
        if ((line == 700 || line == 2500) && (i == 0 || text[i - 1] == '\n')) text[i] = 'x'; /* label */
        if (text[i] == '\n') line++;
    }
    rec_prep_plan *plan;
    rec_prep_plan_init(&plan, spec, NULL);
    rec_text_chunk c = {.text = text, .len = len, .first_line = 1, .n_lines = 3000};
    for (int mode = 0; mode < 2; mode++) {
        rec_prep_engine *e;
        rec_tsv_opts o = {.has_label = 1, .bad_rows = mode ? REC_BAD_ROWS_SKIP : REC_BAD_ROWS_FAIL};
        CHECK(rec_prep_engine_init(&e, plan, 4, &o, "mem.tsv") == REC_OK, "engine");
        rec_status s = rec_prep_engine_run(e, &c);
        if (mode == 0) {
            CHECK_ERR(s, REC_EFORMAT, "mem.tsv:700: ");
        } else {
            const rec_bad_report *bad = rec_prep_engine_bad(e);
            int64_t rows = 0;
            for (int t = 0; t < 4; t++) rows += rec_prep_engine_batch(e, t)->n;
            CHECK(s == REC_OK && rows == 2998, "skip: %lld rows kept", (long long)rows);
            CHECK(bad->count == 2 && bad->n_kept == 2 && bad->line[0] == 700 && bad->line[1] == 2500,
                  "skip report: %lld rows, first line %lld", (long long)bad->count,
                  bad->n_kept ? (long long)bad->line[0] : -1LL);
        }
        rec_prep_engine_free(e);
    }
    rec_prep_engine *e;
    rec_tsv_opts bad_opts = {.has_label = -1};
    CHECK_ERR(rec_prep_engine_init(&e, plan, 2, &bad_opts, "x"), REC_EINVAL, "has_label must be resolved");
    rec_tsv_opts ok_opts = {.has_label = 1};
    CHECK_ERR(rec_prep_engine_init(&e, plan, 0, &ok_opts, "x"), REC_EINVAL, "threads must be between 1 and 256");
    rec_prep_plan_free(plan);
    rec_spec_free(spec);
    free(text);
}

int main(void) {
    test_matches_reference("criteo_standard.json", 0);
    test_matches_reference("criteo_standard.json", 1);
    test_matches_reference("criteo_vocab.json", 0);
    test_matches_reference("criteo_rap.json", 1);
    test_bad_rows();
    return check_report();
}
