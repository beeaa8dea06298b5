/* TSV -> prep spec -> .rshard (see ingest.h). */
#include <string.h>

#include "rectrain/core.h"
#include "rectrain/ingest.h"
#include "rectrain/prep.h"
#include "rectrain/shard.h"

/* Runs one pass over the input: counting (`w` NULL) or writing into `w`. */
static rec_status one_pass(const rec_ingest_opts *o, const rec_prep_plan *plan, rec_prep_engine **engine,
                           rec_shard_writer *w, rec_ingest_report *rep, const char *label) {
    rec_tsv *r;
    REC_TRY(rec_tsv_open(&r, o->in_path, &o->tsv, 0));
    rec_status s = REC_OK;
    if (!*engine) s = rec_prep_engine_init(engine, plan, o->threads, rec_tsv_options(r), o->in_path);
    rec_progress pg;
    rec_progress_init(&pg, label, "MB", 0);
    while (!s) {
        rec_text_chunk c;
        s = rec_tsv_next(r, &c);
        if (s || c.len == 0) break;
        if (!w) {
            s = rec_prep_engine_count(*engine, &c);
        } else {
            s = rec_prep_engine_run(*engine, &c);
            for (int t = 0; !s && t < rec_prep_engine_threads(*engine); t++) {
                const rec_batch *b = rec_prep_engine_batch(*engine, t);
                if (b->n) s = rec_shard_writer_append(w, b);
                rep->rows += b->n;
            }
        }
        rec_progress_update(&pg, (double)rec_tsv_bytes(r) / 1e6, NULL);
    }
    rec_progress_finish(&pg);
    rep->bytes = rec_tsv_bytes(r);
    rec_tsv_close(r);
    return s;
}

rec_status rec_ingest(const rec_ingest_opts *o, rec_ingest_report *rep) {
    memset(rep, 0, sizeof *rep);
    double t0 = rec_now();
    rec_spec *spec = NULL;
    rec_shard *vocab_shard = NULL;
    rec_vocab_set built = {0};
    const rec_vocab_set *vocabs = NULL;
    rec_prep_plan *plan = NULL;
    rec_prep_engine *engine = NULL;
    rec_shard_writer *w = NULL;
    rec_tsv_opts tsv = o->tsv;
    rec_ingest_opts oo = *o;

    rec_status s = rec_spec_load(&spec, o->spec_path);
    /* Resolve the input format once so both passes and the shard agree on it. */
    if (!s && tsv.has_label < 0) {
        rec_tsv *r;
        s = rec_tsv_open(&r, o->in_path, &tsv, 0);
        if (!s) {
            tsv.has_label = rec_tsv_options(r)->has_label;
            rec_tsv_close(r);
        }
    }
    oo.tsv = tsv;
    if (!s && spec->n_vocabs > 0) {
        if (o->vocab_from) {
            s = rec_shard_open(&vocab_shard, o->vocab_from);
            if (!s) vocabs = rec_shard_vocabs(vocab_shard);
            if (!s && vocabs->n != spec->n_vocabs)
                s = rec_errorf(REC_EINVAL, "%s holds %d vocabularies but spec %s needs %d; reuse a shard made with the same spec",
                               o->vocab_from, vocabs->n, o->spec_path, spec->n_vocabs);
        } else {
            rep->passes++;
            s = rec_prep_plan_init(&plan, spec, NULL);
            if (!s) s = one_pass(&oo, plan, &engine, NULL, rep, "prep: counting ids");
            if (!s) s = rec_prep_engine_vocabs(engine, &built);
            vocabs = &built;
            rec_prep_engine_free(engine);
            rec_prep_plan_free(plan);
            engine = NULL;
            plan = NULL;
        }
        if (!s) s = rec_spec_bind_vocabs(spec, vocabs);
    }
    if (!s) s = rec_prep_plan_init(&plan, spec, vocabs);
    if (!s && o->explain) rec_prep_plan_describe(plan, stderr);
    if (!s) s = rec_shard_writer_open(&w, o->out_path, spec, vocabs, tsv.has_label, o->group_rows);
    if (!s) {
        rep->passes++;
        rep->rows = 0;
        s = one_pass(&oo, plan, &engine, w, rep, "prep");
    }
    if (engine) rep->bad = *rec_prep_engine_bad(engine);
    if (w) {
        if (s) rec_shard_writer_abort(w);
        else s = rec_shard_writer_close(w);
    }
    rec_prep_engine_free(engine);
    rec_prep_plan_free(plan);
    rec_vocab_set_free(&built);
    rec_shard_close(vocab_shard);
    rec_spec_free(spec);
    rep->seconds = rec_now() - t0;
    return s;
}
