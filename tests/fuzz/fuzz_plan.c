/* libFuzzer target for the embedding engine's two text inputs (embed.h "plans"): schedule
 * strings (rec_embed_sched_parse) and plan files (rec_embed_plan_parse). Every input is tried
 * as both:
 *  - as a schedule string (its bytes up to the first NUL): one that parses has every field in
 *    range, and its text form (rec_embed_sched_name) parses back to the same schedule;
 *  - as a plan for a fixed three-table model (a single-row table; a 200000 x 16 table, too
 *    big for COUNT and DENSE; a 1000 x 130 table, a dim no kernel specialises): a plan that
 *    loads leaves every table a schedule rec_embed_set_sched accepts for that table; one that
 *    does not load leaves the plan as it was and says why, naming the input.
 * Anything else (a crash, a leak, UB, an abort below) is a bug. Seeds: tests/fuzz/seeds/
 * fuzz_plan (plans of this model as rec_embed_plan_save writes them, and schedule strings);
 * keys and schedule words: fuzz_plan.dict (its shape key is this model's). Build and run:
 * scripts/fuzz.sh. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "embed_impl.h"
#include "rectrain/embed.h"

static rec_embed *model(void) {
    static rec_embed *e;
    if (!e) {
        static const int64_t rows[3] = {1, 200000, 1000};
        static const int dims[3] = {1, 16, 130};
        const rec_embed_config c = {3, rows, dims, REC_POOL_SUM, rec_sparse_opt_defaults(REC_SPARSE_SGD, 0.1f),
                                    8, 1, 1, 0, 0, REC_ROUND_STOCHASTIC};
        if (rec_embed_init(&e, &c) != REC_OK) abort();
    }
    return e;
}

static void schedule_text(const uint8_t *data, size_t size) {
    char text[256];
    const size_t n = size < sizeof text - 1 ? size : sizeof text - 1;
    memcpy(text, data, n);
    text[n] = '\0';
    rec_embed_sched s, t;
    if (rec_embed_sched_parse(text, &s) != REC_OK) {
        if (!strstr(rec_errmsg(), "cannot read")) abort(); /* the message names the bad part */
        return;
    }
    if (embed_check_sched(model(), 0, s) != REC_OK) abort(); /* fields in range (table 0 fits every sort) */
    char name[64];
    if (rec_embed_sched_parse(rec_embed_sched_name(s, name, sizeof name), &t) != REC_OK || !embed_sched_equal(s, t)) abort();
}

static void plan_text(const uint8_t *data, size_t size) {
    rec_embed *e = model();
    rec_embed_sched before[3];
    for (int f = 0; f < 3; f++) before[f] = rec_embed_get_sched(e, f);
    uint64_t key = 0;
    if (rec_embed_plan_parse(e, (const char *)data, size, "fuzz.json", &key) != REC_OK) {
        if (strncmp(rec_errmsg(), "fuzz.json: ", 11)) abort(); /* the message names the input */
        for (int f = 0; f < 3; f++)
            if (!embed_sched_equal(before[f], rec_embed_get_sched(e, f))) abort(); /* nothing changes on error */
        return;
    }
    for (int f = 0; f < 3; f++)
        if (rec_embed_set_sched(e, f, rec_embed_get_sched(e, f)) != REC_OK) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    schedule_text(data, size);
    plan_text(data, size);
    return 0;
}
