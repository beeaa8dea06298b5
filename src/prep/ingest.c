/* TSV (or a .rraw of parsed rows) -> prep spec -> .rshard (see ingest.h). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rectrain/core.h"
#include "rectrain/ingest.h"
#include "rectrain/prep.h"
#include "rectrain/rawcols.h"
#include "rectrain/shard.h"

/* One pass over the input runs as a three-stage pipeline (DESIGN.md "Data flow"):
 *
 *   reader thread   the next chunk of the input (read, gunzip), copied into one of two buffers
 *   engine          parse + preprocess the current chunk on the pool's threads
 *   writer thread   append the previous chunk's batches to the shard (CRC, write)
 *
 * so decompression and the shard's I/O hide behind the preprocessing instead of adding to
 * it. The engine alternates between two sets of batches, which is what lets the writer read
 * chunk k's batches while chunk k+1 is being made. A counting pass (w == NULL) has no
 * writer. Errors are reported in input order: the writer's (chunk k-1), then the engine's
 * (chunk k), then the reader's (chunk k+1). */
typedef struct stage {
    pthread_t th;
    int running;
    rec_status s;
    char msg[1024];
} stage;

typedef struct pass {
    rec_tsv *r;
    rec_prep_engine *e;
    rec_shard_writer *w;
    char *buf[2];
    size_t cap[2];
    rec_text_chunk chunk[2];
    int fill;                       /* buffer the reader fills */
    const rec_batch *out[256];      /* the writer's batches (one per engine thread) */
    int n_out;
    int64_t rows;                   /* rows appended to the shard */
    const rec_spec *spec;           /* for messages */
    const rec_ingest_opts *o;
    const char *name;               /* the input in messages (rec_paths_name) */
    stage rd, wr;
} pass;

static void stage_end(stage *st, rec_status s) {
    st->s = s;
    if (s) snprintf(st->msg, sizeof st->msg, "%s", rec_errmsg());
}

static rec_status stage_start(stage *st, void *(*fn)(void *), void *arg) {
    st->s = REC_OK;
    if (pthread_create(&st->th, NULL, fn, arg) != 0)
        return rec_errorf(REC_ENOMEM, "cannot start a pipeline thread (out of resources)");
    st->running = 1;
    return REC_OK;
}

/* Waits for the stage; returns its status with its message as this thread's last error. */
static rec_status stage_join(stage *st) {
    if (!st->running) return REC_OK;
    pthread_join(st->th, NULL);
    st->running = 0;
    if (st->s) rec_error_set_msg(st->msg);
    return st->s;
}

static void *read_main(void *arg) {
    pass *p = arg;
    int k = p->fill;
    rec_text_chunk c;
    rec_status s = rec_tsv_next(p->r, &c);
    if (!s && c.len > p->cap[k]) {
        s = rec_realloc((void **)&p->buf[k], p->cap[k], c.len, "input chunk buffer");
        if (!s) p->cap[k] = c.len;
    }
    if (!s) {
        if (c.len) memcpy(p->buf[k], c.text, c.len); /* len 0: the end of the input */
        p->chunk[k] = c;
        p->chunk[k].text = p->buf[k];
    }
    stage_end(&p->rd, s);
    return NULL;
}

/* The dense output feature that writes column c (onehot features write several). */
static const char *dense_name(const rec_spec *spec, int32_t c) {
    const rec_feature *best = NULL;
    for (int i = 0; i < spec->n_features; i++) {
        const rec_feature *ft = &spec->features[i];
        if (ft->kind == REC_FEAT_DENSE && ft->dense_offset <= c && (!best || ft->dense_offset > best->dense_offset))
            best = ft;
    }
    return best ? best->name : "?";
}

/* Refuses rows no model can train on (rec_batch_first_bad_value) before they reach the
 * shard: what the spec made of valid input, so the message says which feature and what to
 * change. `row0` is the output row of b's first row; in --bad-rows fail mode every line
 * became a row, so the line is known too. */
static rec_status check_values(const pass *p, const rec_batch *b, int64_t row0) {
    int32_t c;
    const int64_t r = rec_batch_first_bad_value(b, &c);
    if (r < 0) return REC_OK;
    char where[64];
    if (p->o->tsv.bad_rows == REC_BAD_ROWS_FAIL && p->o->n_in == 1) /* every line became a row */
        snprintf(where, sizeof where, "line %lld", (long long)(row0 + r + 1));
    else snprintf(where, sizeof where, "output row %lld", (long long)(row0 + r));
    if (c < 0)
        return rec_errorf(REC_EINVAL, "%s: %s: label %g, not 0 or 1", p->name, where, (double)b->label[r]);
    return rec_errorf(REC_EINVAL,
                      "%s: %s: spec %s makes dense feature '%s' %g, not a finite number, and a model cannot "
                      "train on it " REC_NONFINITE_FIX,
                      p->name, where, p->o->spec_path, dense_name(p->spec, c), (double)b->dense[r * b->n_dense + c]);
}

static void *write_main(void *arg) {
    pass *p = arg;
    rec_status s = REC_OK;
    for (int t = 0; !s && t < p->n_out; t++) {
        s = check_values(p, p->out[t], p->rows);
        if (!s && p->out[t]->n) s = rec_shard_writer_append(p->w, p->out[t]);
        p->rows += p->out[t]->n;
    }
    stage_end(&p->wr, s);
    return NULL;
}

/* A pass's state, and its engine (made on the first pass, rows of format `tsv`, on the
 * device the options ask for when writing). */
static rec_status pass_begin(pass *p, const rec_ingest_opts *o, const char *name, const rec_spec *spec,
                             const rec_prep_plan *plan, const rec_tsv_opts *tsv, rec_prep_engine **engine,
                             rec_shard_writer *w) {
    memset(p, 0, sizeof *p);
    p->w = w;
    p->spec = spec;
    p->o = o;
    p->name = name;
    if (!*engine) REC_TRY(rec_prep_engine_init(engine, plan, o->threads, tsv, name));
    if (w && o->device != REC_PREP_CPU) REC_TRY(rec_prep_engine_set_device(*engine, (rec_prep_device)o->device));
    p->e = *engine;
    return REC_OK;
}

/* The rest of a pass's step once the reader `rd` is reading the next input and the engine has
 * run (status se): the previous writer joined, the next one started on the engine's batches,
 * the reader joined; the first failure in input order (the writer's run, the engine's, the
 * reader's), with its message. */
static rec_status pass_step(pass *p, stage *rd, rec_status se) {
    char emsg[1024] = "";
    if (se) snprintf(emsg, sizeof emsg, "%s", rec_errmsg());
    rec_status sw = stage_join(&p->wr);
    if (!sw && !se && p->w) {
        p->n_out = rec_prep_engine_threads(p->e);
        for (int t = 0; t < p->n_out; t++) p->out[t] = rec_prep_engine_batch(p->e, t);
        sw = stage_start(&p->wr, write_main, p);
    }
    rec_status sr = stage_join(rd);
    if (sw) return sw; /* the message of the failing stage is already this thread's */
    if (se) return rec_errorf(se, "%s", emsg);
    return sr;
}

/* Runs one pass over the input, read through r (closed here): counting (`w` NULL) or writing
 * into `w`. */
static rec_status one_pass(const rec_ingest_opts *o, const char *name, rec_tsv *r, const rec_spec *spec,
                           const rec_prep_plan *plan, rec_prep_engine **engine, rec_shard_writer *w,
                           rec_ingest_report *rep, const char *label) {
    pass p;
    rec_status s = pass_begin(&p, o, name, spec, plan, rec_tsv_options(r), engine, w);
    p.r = r;
    rec_progress pg;
    rec_progress_init(&pg, label, "MB", 0);
    int cur = 0;
    if (!s) s = stage_start(&p.rd, read_main, &p);
    if (!s) s = stage_join(&p.rd);
    while (!s && p.chunk[cur].len > 0) {
        p.fill = cur ^ 1;
        p.chunk[p.fill].len = 0;
        s = stage_start(&p.rd, read_main, &p);
        if (!s) s = pass_step(&p, &p.rd, w ? rec_prep_engine_run(p.e, &p.chunk[cur]) : rec_prep_engine_count(p.e, &p.chunk[cur]));
        rec_progress_update(&pg, (double)rec_tsv_bytes(p.r) / 1e6, NULL);
        if (!s && o->stop && *o->stop)
            s = rec_errorf(REC_ESTOPPED, "%s: stopped by %s after %.1f MB of the input; %s", name, rec_signal_name(*o->stop),
                           (double)rec_tsv_bytes(p.r) / 1e6, w ? "the partial output is removed" : "nothing was written");
        cur ^= 1;
    }
    stage_join(&p.rd);
    rec_status sw = stage_join(&p.wr);
    if (!s) s = sw;
    rec_progress_finish(&pg);
    rep->rows = p.rows;
    rep->bytes = rec_tsv_bytes(p.r);
    if (w) rec_bad_report_merge(&rep->bad, rec_tsv_bad(p.r));
    rec_tsv_close(p.r);
    rec_free(p.buf[0]);
    rec_free(p.buf[1]);
    return s;
}

/* ---- .rraw input: rows parsed already ----------------------------------------------------
 * The same pipeline with a reader that copies the next run of rows out of the mapping into
 * the other of two raw blocks while the engine preprocesses this one. */

enum { RAW_RUN = 65536 }; /* rows read and preprocessed at once */

typedef struct raw_input {
    rec_rawcols *part[256];
    int n;
    int has_label;
    uint64_t bytes;           /* the files' sizes */
    rec_raw_block blk[2];
    int k;                    /* the reader: part, next row, rows of its last read */
    int64_t at, got;
    int fill;                 /* the block it fills */
    stage rd;
} raw_input;

static void raw_input_close(raw_input *in) {
    for (int k = 0; k < in->n; k++) rec_rawcols_close(in->part[k]);
    rec_raw_block_free(&in->blk[0]);
    rec_raw_block_free(&in->blk[1]);
    memset(in, 0, sizeof *in);
}

/* Whether the inputs are .rraw files (all of them, or none: refused otherwise); when they
 * are, each is opened and checked, their labels alike. */
static rec_status raw_input_open(const rec_ingest_opts *o, raw_input *in, int *is_raw) {
    memset(in, 0, sizeof *in);
    *is_raw = 0;
    for (int k = 0; k < o->n_in; k++) {
        const int raw = rec_rawcols_is_file(o->in_paths[k]);
        if (k > 0 && raw != *is_raw)
            return rec_errorf(REC_EINVAL, "%s is %s and %s %s: the inputs of one prep are all TSV or all .rraw",
                              o->in_paths[k], raw ? "a .rraw" : "a TSV", o->in_paths[0], *is_raw ? "a .rraw" : "a TSV");
        *is_raw = raw;
    }
    if (!*is_raw) return REC_OK;
    if (o->n_in > 256) return rec_errorf(REC_EINVAL, "prep: %d .rraw inputs; give at most 256", o->n_in);
    for (int k = 0; k < o->n_in; k++) {
        REC_TRY(rec_rawcols_open(&in->part[k], o->in_paths[k]));
        in->n++;
        struct stat st;
        if (stat(o->in_paths[k], &st) == 0) in->bytes += (uint64_t)st.st_size;
        REC_TRY(rec_rawcols_label_agree(o->in_paths[k], k, o->in_paths[0], rec_rawcols_has_label(in->part[k]),
                                        o->tsv.has_label, &in->has_label));
    }
    REC_TRY(rec_raw_block_init(&in->blk[0], RAW_RUN));
    return rec_raw_block_init(&in->blk[1], RAW_RUN);
}

/* The reader stage: the next run of rows (got = 0 at the end) into blk[fill]. */
static void *raw_read_main(void *arg) {
    raw_input *in = arg;
    rec_status s = REC_OK;
    in->got = 0;
    while (in->k < in->n && in->at == rec_rawcols_rows(in->part[in->k])) in->k++, in->at = 0;
    if (in->k < in->n) {
        const int64_t left = rec_rawcols_rows(in->part[in->k]) - in->at;
        in->got = left < RAW_RUN ? left : RAW_RUN;
        s = rec_rawcols_read(in->part[in->k], in->at, in->got, &in->blk[in->fill]);
        in->at += in->got;
    }
    stage_end(&in->rd, s);
    return NULL;
}

/* One pass over .rraw inputs: counting (`w` NULL) or writing into `w`. */
static rec_status raw_pass(const rec_ingest_opts *o, const char *name, raw_input *in, const rec_spec *spec,
                           const rec_prep_plan *plan, rec_prep_engine **engine, rec_shard_writer *w,
                           rec_ingest_report *rep, const char *label) {
    rec_tsv_opts tsv = o->tsv;
    tsv.has_label = in->has_label;
    in->k = 0, in->at = 0, in->fill = 0;
    pass p;
    rec_status s = pass_begin(&p, o, name, spec, plan, &tsv, engine, w);
    int64_t total = 0, done = 0;
    for (int k = 0; k < in->n; k++) total += rec_rawcols_rows(in->part[k]);
    rec_progress pg;
    rec_progress_init(&pg, label, "rows", (double)total);
    if (!s) s = stage_start(&in->rd, raw_read_main, in);
    if (!s) s = stage_join(&in->rd);
    while (!s && in->got > 0) {
        const int cur = in->fill;
        const int64_t m = in->got;
        in->fill ^= 1;
        s = stage_start(&in->rd, raw_read_main, in);
        if (!s) s = pass_step(&p, &in->rd, w ? rec_prep_engine_run_raw(p.e, &in->blk[cur])
                                             : rec_prep_engine_count_raw(p.e, &in->blk[cur]));
        done += m;
        rec_progress_update(&pg, (double)done, NULL);
        if (!s && o->stop && *o->stop)
            s = rec_errorf(REC_ESTOPPED, "%s: stopped by %s after %lld rows; %s", name, rec_signal_name(*o->stop),
                           (long long)done, w ? "the partial output is removed" : "nothing was written");
    }
    stage_join(&in->rd);
    rec_status sw = stage_join(&p.wr);
    if (!s) s = sw;
    rec_progress_finish(&pg);
    rep->rows = p.rows;
    rep->bytes = in->bytes;
    return s;
}

/* Opens the input for a pass; the first open resolves the format (with or without label)
 * into *tsv, so that the next pass and the shard agree with it. */
static rec_status open_input(const rec_ingest_opts *o, rec_tsv_opts *tsv, rec_tsv **r) {
    REC_TRY(rec_tsv_open_list(r, o->in_paths, o->n_in, tsv, 0));
    tsv->has_label = rec_tsv_options(*r)->has_label;
    return REC_OK;
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
    if (o->n_in < 1 || !o->in_paths) return rec_errorf(REC_EINVAL, "prep: no input file given");
    char name[600];
    rec_paths_name(o->in_paths, o->n_in, name, sizeof name);

    rec_guard guard = {0};
    rec_guard_ins(&guard, "--in", o->in_paths, o->n_in);
    rec_guard_in(&guard, "--vocab-from", o->vocab_from);
    rec_guard_in(&guard, "--spec", o->spec_path);
    rec_guard_out(&guard, "--out", o->out_path);
    rec_status s = rec_guard_check(&guard);
    raw_input raw;
    memset(&raw, 0, sizeof raw);
    int is_raw = 0;
    if (!s) s = raw_input_open(o, &raw, &is_raw);
    if (!s) s = rec_spec_load(&spec, o->spec_path);
    /* A pipe (or any input that is not a regular file) can be read once: enough for a spec
     * without categorify, or with vocabularies from --vocab-from. Each pass opens the input
     * itself; the first resolves the format (with or without label), so that both passes
     * and the shard agree on it. */
    const char *pipe = NULL;
    for (int k = 0; k < o->n_in; k++) {
        struct stat st;
        if (!pipe && stat(o->in_paths[k], &st) == 0 && !S_ISREG(st.st_mode)) pipe = o->in_paths[k];
    }
    rec_tsv *r = NULL;
    if (!s && pipe && spec->n_vocabs > 0 && !o->vocab_from)
        s = rec_errorf(REC_EINVAL, "%s is not a regular file (a pipe?), and spec %s reads its input twice (categorify "
                       "counts ids first): give a file, or reuse vocabularies with --vocab-from",
                       pipe, o->spec_path);
    if (!s) {
        /* The shard is opened once the input's format is known, after a counting pass that may
         * take hours: that its file (PATH.tmp, as the writer names it) can be made is tried
         * now, before anything is read. */
        rec_atomic_file probe;
        s = rec_atomic_open(&probe, o->out_path);
        if (s) rec_error_append(s, " (found before reading the input, not after it)");
        rec_atomic_abort(&probe);
    }
    if (!s && spec->n_vocabs > 0) {
        if (o->vocab_from) {
            s = rec_shard_open(&vocab_shard, o->vocab_from);
            if (!s) s = rec_shard_bind_vocabs(vocab_shard, spec, o->spec_path);
            if (!s) vocabs = rec_shard_vocabs(vocab_shard);
        } else {
            rep->passes++;
            s = rec_prep_plan_init(&plan, spec, NULL);
            if (!s && is_raw) s = raw_pass(o, name, &raw, spec, plan, &engine, NULL, rep, "prep: counting ids");
            else if (!s) s = open_input(o, &tsv, &r);
            if (!s && !is_raw) s = one_pass(o, name, r, spec, plan, &engine, NULL, rep, "prep: counting ids");
            if (!s) s = rec_prep_engine_vocabs(engine, &built);
            vocabs = &built;
            rec_prep_engine_free(engine);
            rec_prep_plan_free(plan);
            engine = NULL;
            plan = NULL;
            if (!s) s = rec_spec_bind_vocabs(spec, vocabs);
        }
    }
    if (!s) s = rec_prep_plan_init(&plan, spec, vocabs);
    if (!s && o->explain) {
        rec_prep_plan_describe(plan, stderr);
        rec_fusion fu;
        s = rec_prep_fuse(spec, NULL, &fu);
        if (!s) rec_fusion_describe(&fu, spec, stderr);
        rec_fusion_free(&fu);
    }
    r = NULL;
    if (is_raw) tsv.has_label = raw.has_label;
    else if (!s) s = open_input(o, &tsv, &r);
    if (!s) s = rec_shard_writer_open(&w, o->out_path, spec, vocabs, tsv.has_label, o->group_rows);
    if (!s) {
        rep->passes++;
        s = is_raw ? raw_pass(o, name, &raw, spec, plan, &engine, w, rep, "prep")
                   : one_pass(o, name, r, spec, plan, &engine, w, rep, "prep");
    } else {
        rec_tsv_close(r);
    }
    if (engine) rec_bad_report_merge(&rep->bad, rec_prep_engine_bad(engine));
    if (!s) s = rec_bad_share_check(&tsv, name, rep->rows, &rep->bad);
    if (w) {
        if (s) rec_shard_writer_abort(w);
        else s = rec_shard_writer_close(w);
    }
    rec_prep_engine_free(engine);
    rec_prep_plan_free(plan);
    rec_vocab_set_free(&built);
    rec_shard_close(vocab_shard);
    rec_spec_free(spec);
    raw_input_close(&raw);
    rep->seconds = rec_now() - t0;
    return s;
}
