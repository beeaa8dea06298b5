/* TSV -> raw columns -> .rraw: `rectrain prep --raw` (see ingest.h). Each chunk of the input is
 * cut into one piece per thread at line boundaries, each piece parsed into its thread's raw
 * block on the pool, and the blocks appended in input order. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rectrain/core.h"
#include "rectrain/ingest.h"
#include "rectrain/rawcols.h"

typedef struct raw_pass {
    const rec_text_chunk *c;
    const rec_tsv_opts *tsv;
    size_t start[257];
    int64_t first[257];
    rec_raw_block blk[256];
    rec_bad_report bad[256];
    rec_status st[256];
    char msg[256][1024];
} raw_pass;

static rec_status parse_task(void *ctx, int64_t t, int thread) {
    raw_pass *p = ctx;
    (void)thread;
    const char *text = p->c->text + p->start[t];
    const size_t len = p->start[t + 1] - p->start[t];
    int64_t lines = 0;
    for (const char *q = text, *end = text + len; q < end && (q = memchr(q, '\n', (size_t)(end - q))); q++) lines++;
    lines += len > 0 && text[len - 1] != '\n';
    rec_raw_block *b = &p->blk[t];
    rec_status s = REC_OK;
    if (!b->label || lines > b->cap) { /* a piece may be empty: the block is still made */
        rec_raw_block_free(b);
        s = rec_raw_block_init(b, lines + lines / 4);
    }
    b->n = 0;
    if (!s) s = rec_tsv_parse(p->tsv, p->c->path, text, len, p->first[t], b, &p->bad[t]);
    p->st[t] = s;
    if (s) snprintf(p->msg[t], sizeof p->msg[t], "%s", rec_errmsg());
    return s;
}

rec_status rec_ingest_raw(const rec_ingest_opts *o, rec_ingest_report *rep) {
    memset(rep, 0, sizeof *rep);
    const double t0 = rec_now();
    if (o->n_in < 1 || !o->in_paths) return rec_errorf(REC_EINVAL, "prep: no input file given");
    const int nt = o->threads < 1 ? 1 : o->threads > 256 ? 256 : o->threads;
    char name[600];
    rec_paths_name(o->in_paths, o->n_in, name, sizeof name);
    rec_guard guard = {0};
    rec_guard_ins(&guard, "--in", o->in_paths, o->n_in);
    rec_guard_out(&guard, "--out", o->out_path);
    REC_TRY(rec_guard_check(&guard));
    for (int k = 0; k < o->n_in; k++)
        if (rec_rawcols_is_file(o->in_paths[k]))
            return rec_errorf(REC_EINVAL, "%s is a .rraw already: its rows are parsed; give it with --spec to prep, "
                              "train, eval or predict", o->in_paths[k]);
    raw_pass *p = calloc(1, sizeof *p);
    if (!p) return rec_errorf(REC_ENOMEM, "prep: out of memory");
    rec_tsv *r = NULL;
    rec_pool *pool = NULL;
    rec_rawcols_writer *w = NULL;
    rec_tsv_opts tsv = o->tsv;
    rec_bad_report parsed; /* the parser's drops, in input order */
    memset(&parsed, 0, sizeof parsed);
    rec_status s = rec_tsv_open_list(&r, o->in_paths, o->n_in, &tsv, 0);
    if (!s) {
        tsv = *rec_tsv_options(r);
        p->tsv = &tsv;
        s = rec_pool_init(&pool, nt);
    }
    if (!s) s = rec_rawcols_writer_open(&w, o->out_path, tsv.has_label, o->group_rows);
    rec_progress pg;
    rec_progress_init(&pg, "prep --raw", "MB", 0);
    rep->passes = 1;
    for (int more = 1; !s && more;) {
        rec_text_chunk c;
        s = rec_tsv_next(r, &c);
        more = !s && c.len > 0;
        if (!more) break;
        p->c = &c;
        rec_tsv_split(&c, nt, p->start, p->first);
        for (int t = 0; t < nt; t++) p->st[t] = REC_OK, memset(&p->bad[t], 0, sizeof p->bad[t]);
        rec_pool_run(pool, nt, parse_task, p);
        for (int t = 0; !s && t < nt; t++) /* the first failure in input order */
            if (p->st[t]) s = rec_errorf(p->st[t], "%s", p->msg[t]);
        for (int t = 0; !s && t < nt; t++) {
            if (p->blk[t].n) s = rec_rawcols_writer_append(w, &p->blk[t], 0, p->blk[t].n);
            rep->rows += p->blk[t].n;
            rec_bad_report_merge(&parsed, &p->bad[t]);
        }
        rec_progress_update(&pg, (double)rec_tsv_bytes(r) / 1e6, NULL);
        if (!s && o->stop && *o->stop)
            s = rec_errorf(REC_ESTOPPED, "%s: stopped by %s after %.1f MB of the input; the partial output is removed",
                           name, rec_signal_name(*o->stop), (double)rec_tsv_bytes(r) / 1e6);
    }
    rec_progress_finish(&pg);
    if (r) { /* the reader's first: a file's locations merge by line, another file's come after */
        rep->bad = *rec_tsv_bad(r);
        rec_bad_report_merge(&rep->bad, &parsed);
        rep->bytes = rec_tsv_bytes(r);
    }
    if (!s) s = rec_bad_share_check(&tsv, name, rep->rows, &rep->bad);
    if (w) {
        if (s) rec_rawcols_writer_abort(w);
        else s = rec_rawcols_writer_close(w);
    }
    for (int t = 0; t < nt; t++) rec_raw_block_free(&p->blk[t]);
    free(p);
    rec_pool_free(pool);
    rec_tsv_close(r);
    rep->seconds = rec_now() - t0;
    return s;
}
