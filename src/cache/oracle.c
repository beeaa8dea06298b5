/* The Oracle Cacher (`rectrain oracle`, cache.h; Bagpipe §3.4): reads the training batches in
 * the trainer's order, plans the trainer's cache with the planner and serves a trainer each
 * batch with its plan (CACHE_STEP), on request (CACHE_NEXT), in order.
 *
 * The data is read by two loaders L batches apart: the one ahead shows batches to the planner
 * (rec_cplan_look), the other gives the batch being planned, so no window of batches is held.
 * Raw TSV is preprocessed on the way (two data sets, one per loader), by the data processors
 * (prep workers, every piece sent to them) when there are some.
 * The job starts when all its trainers have said CACHE_HELLO (each its rank of N); a HELLO
 * during a job starts it over (a restarted trainer). Each batch's plan is split among the
 * trainers (lrpp.c) and each trainer's frame kept until a few batches later, so trainers
 * asking at their own pace, or twice (a lost answer), get it.
 * Oracles partitioned by table (--tables; Bagpipe §3.4) each see only their tables of every
 * batch and plan them into their own cache slots; the trainer merges their plans.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../net/zmq_impl.h"
#include "cache_impl.h"
#include "rectrain/cache.h"
#include "rectrain/core.h"
#include "rectrain/model.h"
#include "rectrain/offload.h"
#include "rectrain/data.h"

/* Batches of every epoch in the trainer's order, one loader at a time, each seen through the
 * oracle's tables (its partition). */
typedef struct source {
    rec_dataset *d;
    int64_t rows, batch, taken, limit;
    int epoch, epochs, shuffle;
    uint64_t seed;
    rec_loader *l;
    int64_t skip;            /* rows of the first epoch opened to skip (a resumed job) */
    int lo, F;               /* the tables seen: [lo, lo + F) */
    rec_batch view;
} source;

static void source_close(source *s) {
    rec_loader_close(s->l);
    s->l = NULL;
}

/* Batches [first, limit) of the job: the batches of epoch e are those of rec_shuffle epoch e. */
static void source_start(source *s, rec_dataset *d, int64_t rows, const rec_oracle_opts *o, const rec_model_config *c,
                         int64_t first, int64_t limit, int lo, int F) {
    *s = (source){d, rows, o->batch ? o->batch : c->batch_size, first, limit, 0, o->epochs ? o->epochs : c->epochs,
                  o->shuffle, c->seed, NULL, 0, lo, F, {0}};
    const int64_t per_epoch = (rows + s->batch - 1) / s->batch;
    s->epoch = (int)(first / per_epoch);
    s->skip = first % per_epoch * s->batch;
}

/* The next batch, or *b = NULL after the last. */
static rec_status source_next(source *s, const rec_batch **b) {
    *b = NULL;
    while (s->taken < s->limit && s->epoch < s->epochs) {
        if (!s->l) {
            rec_shuffle sh = {s->seed, s->epoch, REC_SHUFFLE_BLOCK_ROWS, REC_SHUFFLE_BUFFER_BLOCKS};
            if (s->shuffle) REC_TRY(rec_loader_open_order(&s->l, s->d, 0, s->rows, s->batch, 4, &sh, s->skip));
            else REC_TRY(rec_loader_open(&s->l, s->d, s->skip, s->rows, s->batch, 4)); /* file order: from row skip */
            s->skip = 0;
        }
        REC_TRY(rec_loader_next(s->l, b));
        if (*b) {
            s->taken++;
            s->view = **b;
            s->view.sparse += s->lo;
            s->view.n_sparse = s->F;
            *b = &s->view;
            return REC_OK;
        }
        source_close(s);
        s->epoch++;
    }
    return REC_OK;
}

enum { KEPT = 16 }; /* batches whose frames stay (> 2 x the trainers' plans in flight: depth + 2) */

typedef struct oracle {
    const rec_oracle_opts *o;
    rec_model_config cfg;
    rec_dataset *d, *d2;     /* the loader ahead's and the planned batches' (the same for a shard) */
    int64_t rows, total;     /* data rows; batches of the job */
    int F, lo, tables;       /* its tables [lo, lo + F) of the data's `tables` */
    const int64_t *table_rows;
    rec_cplan_opts po;
    int32_t *hot_f;
    int64_t *hot_row;
    rec_cplan *p;
    source ahead, cur;
    int64_t next;            /* the next batch to plan */
    rec_jagged *view;        /* (F) a batch's features with slots for ids */
    rec_wbuf w;              /* replies other than plans */
    double plan_s;
    rec_zservice svc;
    /* the trainers: N of them once all said HELLO (`said` of them so far, identities kept) */
    int N, said;
    int64_t start;           /* the first batch (a restarted trainer resumes a job) */
    int hello[64];
    zmq_msg_t who[64];
    rec_lrpp *lrpp;
    rec_batch slice;         /* a trainer's rows of the batch */
    /* the plans of the last KEPT batches, one frame per trainer */
    int64_t kept_seq[KEPT];
    rec_wbuf *kept;          /* (KEPT, N) */
} oracle;

static rec_status job_start(oracle *r) {
    rec_cplan_free(r->p);
    r->p = NULL;
    rec__lrpp_free(r->lrpp);
    r->lrpp = NULL;
    for (int i = 0; i < KEPT; i++) r->kept_seq[i] = -1;
    REC_TRY(rec__lrpp_init(&r->lrpp, r->N, r->po.capacity));
    source_close(&r->ahead);
    source_close(&r->cur);
    REC_TRY(rec_cplan_init(&r->p, &r->po));
    source_start(&r->ahead, r->d, r->rows, r->o, &r->cfg, r->start, r->total, r->lo, r->F);
    source_start(&r->cur, r->d2, r->rows, r->o, &r->cfg, r->start, r->total, r->lo, r->F);
    r->next = r->start;
    r->plan_s = 0;
    return REC_OK;
}

/* The planner's next step: batches shown to the window from `ahead` until it is full, then the
 * next batch of `cur` planned into *st; *b = NULL when `cur` has ended. */
static rec_status plan_one(rec_cplan *p, source *ahead, source *cur, const rec_batch **b, rec_cstep *st) {
    *b = NULL;
    while (rec_cplan_pending(p) < rec_cplan_window(p)) {
        const rec_batch *a;
        REC_TRY(source_next(ahead, &a));
        if (!a) break;
        REC_TRY(rec_cplan_look(p, a));
    }
    REC_TRY(source_next(cur, b));
    return *b ? rec_cplan_step(p, *b, st) : REC_OK;
}

/* Plans batch r->next into r->w as a CACHE_STEP frame (the flush after the last). */
static rec_status plan_next(oracle *r) {
    const double t0 = rec_now();
    rec_cstep st;
    const rec_batch *b = NULL;
    if (r->next < r->total) {
        REC_TRY(plan_one(r->p, &r->ahead, &r->cur, &b, &st));
        if (!b) return rec_errorf(REC_EIO, "oracle: %s ended before batch %lld", r->o->data_path, (long long)r->next);
    } else {
        REC_TRY(rec_cplan_flush(r->p, &st));
    }
    rec_batch v = {0};
    if (b) {
        v = *b;
        v.sparse = r->view;
        for (int f = 0; f < r->F; f++)
            r->view[f] = (rec_jagged){.offsets = b->sparse[f].offsets, .ids32 = st.slots[f],
                                      .weights = b->sparse[f].weights, .wide = 0};
    } else {
        v.n_sparse = r->F;
        v.n_dense = (int32_t)r->cfg.n_dense;
        v.sparse = r->view;
        static int64_t zero = 0;
        for (int f = 0; f < r->F; f++) r->view[f] = (rec_jagged){.offsets = &zero, .wide = 0};
    }
    /* each trainer's part and rows [t B / N, (t + 1) B / N); one trainer takes the plan whole */
    int64_t n_shared = 0;
    const int32_t *shared = NULL;
    if (r->N > 1) {
        REC_TRY(rec__lrpp_split(r->lrpp, b ? &v : NULL, &st));
        shared = rec__lrpp_shared(r->lrpp, &n_shared);
    }
    const int k = (int)(r->next % KEPT);
    r->kept_seq[k] = -1;
    for (int t = 0; t < r->N; t++) {
        rec_net_cache_step cs = {.n_fetch = st.n_fetch, .n_evict = st.n_evict, .fetch = st.fetch, .evict = st.evict,
                                 .batch = v};
        if (r->N > 1) {
            const rec_lrpp_part *pt = rec__lrpp_part(r->lrpp, t);
            cs = (rec_net_cache_step){pt->n_fetch, pt->n_evict, pt->n_pre_send, pt->n_pre_recv, n_shared, pt->n_apply,
                                      pt->n_post_send, pt->n_post_recv, pt->fetch, pt->evict, pt->pre_send,
                                      pt->pre_recv, pt->post_send, pt->post_recv, shared, pt->apply, v};
        }
        if (r->N > 1 && b) { /* the slice, its offsets from 0 */
            const int64_t r0 = t * v.n / r->N, r1 = (t + 1) * v.n / r->N;
            r->slice.n = 0;
            for (int f = 0; f < r->F; f++) r->slice.sparse[f].offsets[0] = 0;
            REC_TRY(rec_batch_append_rows(&r->slice, &v, r0, r1 - r0));
            cs.batch = r->slice;
        }
        rec_wbuf *w = &r->kept[k * r->N + t];
        rec_frame_begin(w, REC_MSG_CACHE_STEP, 0, (uint64_t)r->next);
        rec_net_cache_step_encode(w, &cs);
        REC_TRY(rec_frame_end(w));
    }
    r->kept_seq[k] = r->next;
    r->plan_s += rec_now() - t0;
    r->next++;
    return REC_OK;
}

typedef struct hotc {
    int32_t c, f;
    int64_t row;
} hotc;

static int cmp_hot(const void *a, const void *b) {
    const hotc *x = a, *y = b;
    if (x->c != y->c) return y->c - x->c;
    if (x->f != y->f) return x->f - y->f;
    return (x->row > y->row) - (x->row < y->row);
}

/* STATIC (FAE-like): the most used rows over the first batches, as many as the capacity
 * leaves beside the most distinct rows one of those batches had. */
static rec_status pick_hot(oracle *r) {
    const int64_t nb = r->o->hot_batches > 0 ? r->o->hot_batches : 256;
    int32_t **cnt = calloc((size_t)r->F, sizeof(int32_t *)), **seen = calloc((size_t)r->F, sizeof(int32_t *));
    rec_status s = cnt && seen ? REC_OK : rec_errorf(REC_ENOMEM, "oracle: out of memory");
    for (int f = 0; !s && f < r->F; f++)
        if (!(cnt[f] = calloc((size_t)r->table_rows[f], sizeof(int32_t))) ||
            !(seen[f] = calloc((size_t)r->table_rows[f], sizeof(int32_t))))
            s = rec_errorf(REC_ENOMEM, "oracle: out of memory counting ids");
    source src;
    source_start(&src, r->d, r->rows, r->o, &r->cfg, 0, nb < r->total ? nb : r->total, r->lo, r->F);
    int64_t most = 0;
    int32_t x = 0;
    const rec_batch *b;
    while (!s && !(s = source_next(&src, &b)) && b) {
        if (r->o->stop && *r->o->stop) {
            s = rec_errorf(REC_ESTOPPED, "stopped by %s while counting the hot rows (batch %d of %lld)",
                           rec_signal_name(*r->o->stop), x + 1, (long long)nb);
            break;
        }
        int64_t distinct = 0;
        x++;
        for (int f = 0; f < r->F; f++)
            for (int64_t k = 0; k < rec_batch_nnz(b, f); k++) {
                const int64_t id = rec_jagged_id(&b->sparse[f], k);
                if (id < 0 || id >= r->table_rows[f]) continue; /* the planner names it later */
                cnt[f][id]++;
                if (seen[f][id] != x) seen[f][id] = x, distinct++;
            }
        if (distinct > most) most = distinct;
    }
    source_close(&src);
    const int64_t H = r->po.capacity - most;
    if (!s && H < 1)
        s = rec_errorf(REC_EINVAL, "the trainer cache of %lld rows leaves no room for hot rows beside a batch's %lld "
                       "distinct ones; give a larger --cache-rows", (long long)r->po.capacity, (long long)most);
    /* the used rows by count, down; the first H are hot */
    int64_t used = 0;
    for (int f = 0; !s && f < r->F; f++)
        for (int64_t i = 0; i < r->table_rows[f]; i++) used += cnt[f][i] > 0;
    hotc *all = s ? NULL : malloc(sizeof(hotc) * (size_t)(used + 1));
    if (!s && !all) s = rec_errorf(REC_ENOMEM, "oracle: out of memory");
    int64_t n = 0;
    for (int f = 0; !s && f < r->F; f++)
        for (int64_t i = 0; i < r->table_rows[f]; i++)
            if (cnt[f][i] > 0) all[n++] = (hotc){cnt[f][i], f, i};
    if (!s) qsort(all, (size_t)n, sizeof(hotc), cmp_hot);
    const int64_t keep = H < n ? H : n;
    if (!s && (!(r->hot_f = malloc(sizeof(int32_t) * (size_t)(keep + 1))) ||
               !(r->hot_row = malloc(sizeof(int64_t) * (size_t)(keep + 1)))))
        s = rec_errorf(REC_ENOMEM, "oracle: out of memory");
    for (int64_t i = 0; !s && i < keep; i++) r->hot_f[i] = all[i].f, r->hot_row[i] = all[i].row;
    if (!s) {
        r->po.hot_f = r->hot_f, r->po.hot_row = r->hot_row, r->po.n_hot = keep;
        if (r->o->log)
            fprintf(r->o->log, "oracle: static cache: %lld hot rows (of %lld used in %d batches; %lld slots for a "
                    "batch's others)\n", (long long)keep, (long long)n, x, (long long)most);
    }
    free(all);
    for (int f = 0; f < r->F; f++) free(cnt ? cnt[f] : NULL), free(seen ? seen[f] : NULL);
    free(cnt), free(seen);
    return s;
}

/* The prefetch depth at lookahead L: --prefetch-depth (at most L), else min(L, 4). */
static int depth_for(const rec_oracle_opts *o, int L) {
    const int d = o->depth > 0 ? o->depth : 4;
    return d < L ? d : L;
}

/* Runs the planner over the first batches with lookahead L: *ok = 1 when the capacity holds it.
 * REC_ESTOPPED when the stop flag is raised between two batches (a Ctrl-C during the choice). */
static rec_status fits(oracle *r, int L, int64_t batches, int *ok) {
    rec_cplan_opts po = r->po;
    po.lookahead = L;
    po.depth = depth_for(r->o, L);
    rec_cplan *p;
    REC_TRY(rec_cplan_init(&p, &po));
    source a, c;
    source_start(&a, r->d, r->rows, r->o, &r->cfg, 0, batches, r->lo, r->F);
    source_start(&c, r->d2, r->rows, r->o, &r->cfg, 0, batches, r->lo, r->F);
    rec_status s = REC_OK;
    *ok = 1;
    for (int64_t x = 0; !s && x < batches && *ok; x++) {
        const rec_batch *b;
        rec_cstep st;
        if (r->o->stop && *r->o->stop) { /* Ctrl-C: the trial plans take seconds on large batches */
            s = rec_errorf(REC_ESTOPPED, "stopped by %s while choosing the lookahead (trying L = %d)",
                           rec_signal_name(*r->o->stop), L);
            break;
        }
        s = plan_one(p, &a, &c, &b, &st);
        if (!b) break;
        if (s == REC_EINVAL && strstr(rec_errmsg(), "too small")) s = REC_OK, *ok = 0;
    }
    source_close(&a);
    source_close(&c);
    rec_cplan_free(p);
    return s;
}

/* Bagpipe §4: "keeps prefetching until it detects the cache is full ... selects the number of
 * batches prefetched so far as the L": the largest power of two (up to 1024) whose plan of the
 * first 3 L batches fits the capacity. */
static rec_status choose_lookahead(oracle *r) {
    int best = 0;
    for (int L = 1; L <= 1024; L *= 2) {
        int ok;
        REC_TRY(fits(r, L, 3 * (int64_t)L < r->total ? 3 * (int64_t)L : r->total, &ok));
        if (!ok) break;
        best = L;
        if (3 * (int64_t)L >= r->total) break;
    }
    if (!best)
        return rec_errorf(REC_EINVAL, "the trainer cache of %lld rows cannot hold one batch's rows; give a larger "
                          "--cache-rows", (long long)r->po.capacity);
    r->po.lookahead = best;
    r->po.depth = depth_for(r->o, best);
    if (r->o->log) fprintf(r->o->log, "oracle: lookahead %d batches (the largest that fits the cache)\n", best);
    return REC_OK;
}

static rec_status setup(oracle *r) {
    const rec_oracle_opts *o = r->o;
    if (o->config_path) REC_TRY(rec_model_config_load(&r->cfg, o->config_path));
    else rec_model_config_train_default(&r->cfg);
    const size_t pl = strlen(o->data_path);
    const int shard = pl > 7 && !strcmp(o->data_path + pl - 7, ".rshard");
    rec_dataset_opts dopt = {.path = o->data_path, .prep_threads = 1};
    dopt.tsv.has_label = -1;
    if (!shard) {
        dopt.spec_path = o->spec_path ? o->spec_path : r->cfg.prep_spec[0] ? r->cfg.prep_spec : NULL;
        dopt.vocab_from = o->vocab_from;
        if (!dopt.spec_path)
            return rec_errorf(REC_EINVAL, "oracle: %s is raw data: give its prep spec with --spec (or a .rshard)",
                              o->data_path);
    } else if (o->n_workers) {
        return rec_errorf(REC_EINVAL, "oracle: --workers preprocess raw data, and %s is a shard already", o->data_path);
    }
    REC_TRY(rec_dataset_open(&r->d, &dopt));
    r->d2 = r->d;
    if (!shard) REC_TRY(rec_dataset_open(&r->d2, &dopt));
    for (int k = 0; !shard && o->n_workers && k < 2; k++) { /* the data processors make every batch */
        const rec_offload_opts oo = {o->workers, o->n_workers, NULL, 0, 0, o->log, o->sec};
        rec_offload *x;
        REC_TRY(rec_dataset_offload(k ? r->d2 : r->d, &oo, o->batch ? o->batch : r->cfg.batch_size, &x));
        rec_offload_set(x, REC_OFFLOAD_P3, 1.0);
    }
    REC_TRY(rec_dataset_rows(r->d, &r->rows));
    r->tables = rec_dataset_n_sparse(r->d);
    if (o->parts > r->tables)
        return rec_errorf(REC_EINVAL, "oracle: --tables %d/%d: %s has %d tables, fewer than the parts", o->part, o->parts,
                          o->data_path, r->tables);
    r->lo = o->parts ? o->part * r->tables / o->parts : o->table_lo;
    const int hi = o->parts ? (o->part + 1) * r->tables / o->parts : o->table_hi ? o->table_hi : r->tables;
    if (r->lo < 0 || hi <= r->lo || hi > r->tables)
        return rec_errorf(REC_EINVAL, "oracle: --tables %d:%d: %s has tables 0 to %d (give LO:HI, 0 <= LO < HI <= %d)",
                          r->lo, hi, o->data_path, r->tables - 1, r->tables);
    r->F = hi - r->lo;
    r->table_rows = rec_dataset_table_rows(r->d) + r->lo;
    r->cfg.n_dense = rec_dataset_n_dense(r->d);
    const int64_t B = o->batch ? o->batch : r->cfg.batch_size;
    const int E = o->epochs ? o->epochs : r->cfg.epochs;
    if (r->rows < 1) return rec_errorf(REC_EINVAL, "oracle: %s holds no rows", o->data_path);
    r->total = (r->rows + B - 1) / B * E;
    if (o->max_batches > 0 && o->max_batches < r->total) r->total = o->max_batches;
    r->po = (rec_cplan_opts){o->policy, r->F, r->table_rows, o->capacity, o->lookahead, 1, NULL, NULL, 0};
    if (!(r->view = calloc((size_t)r->F, sizeof(rec_jagged)))) return rec_errorf(REC_ENOMEM, "oracle: out of memory");
    REC_TRY(rec_batch_init(&r->slice, B, (int32_t)r->cfg.n_dense, r->F, 1));
    for (int f = 0; f < r->F; f++) REC_TRY(rec_batch_set_wide(&r->slice, f, 0));
    if (o->policy == REC_CACHE_STATIC) REC_TRY(pick_hot(r));
    if (o->policy == REC_CACHE_BAGPIPE && o->lookahead == 0) REC_TRY(choose_lookahead(r));
    else if (o->policy == REC_CACHE_BAGPIPE)
        r->po.depth = depth_for(o, o->lookahead);
    rec_cplan *probe; /* the options' errors now, not at the first trainer */
    REC_TRY(rec_cplan_init(&probe, &r->po));
    rec_cplan_free(probe);
    return REC_OK;
}

static void log_done(oracle *r) {
    if (!r->o->log) return;
    rec_cplan_stats ps;
    rec_cplan_get_stats(r->p, &ps);
    fprintf(r->o->log, "oracle: %lld batches planned for %d trainer%s (%s", (long long)ps.batches, r->N,
            r->N == 1 ? "" : "s", rec_cache_policy_name(r->po.policy));
    if (r->po.policy == REC_CACHE_BAGPIPE) fprintf(r->o->log, ", L %d, depth %d", r->po.lookahead, r->po.depth);
    fprintf(r->o->log, "): %lld rows fetched, %lld written back, peak %lld of %lld slots; %.0f samples/s planned\n",
            (long long)ps.fetched, (long long)ps.evicted, (long long)ps.peak_slots, (long long)r->po.capacity,
            r->plan_s > 0 ? (double)r->cur.taken * (double)r->cur.batch / r->plan_s : 0.0);
    fflush(r->o->log);
}

/* A trainer's HELLO: gathered until all N said it, then the job starts and each gets its INFO. */
static rec_status on_hello(oracle *r, rec_zreq *q) {
    int rank, ranks;
    int64_t start;
    REC_TRY(rec_net_cache_hello_decode(q->body, q->h.body, &rank, &ranks, &start));
    if (start > r->total)
        return rec_errorf(REC_EINVAL, "a trainer resumes at batch %lld, and the job has %lld", (long long)start,
                          (long long)r->total);
    if (r->said && !r->p && start != r->start)
        return rec_errorf(REC_EINVAL, "trainer %d starts at batch %lld and another at %lld: resume them from the same "
                          "commit", rank, (long long)start, (long long)r->start);
    if (r->p || ranks != r->N) { /* a new job (or a restarted trainer): gather again */
        for (int t = 0; t < r->N; t++)
            if (r->hello[t]) zmq_msg_close(&r->who[t]), r->hello[t] = 0;
        rec_cplan_free(r->p);
        r->p = NULL;
        for (int i = 0; r->kept && i < KEPT * r->N; i++) rec_wbuf_free(&r->kept[i]);
        r->N = ranks, r->said = 0, r->start = start;
        rec_wbuf *k = realloc(r->kept, sizeof(rec_wbuf) * (size_t)(KEPT * ranks));
        if (!k) return rec_errorf(REC_ENOMEM, "oracle: out of memory for %d trainers", ranks);
        r->kept = k;
        for (int i = 0; i < KEPT * ranks; i++) r->kept[i] = (rec_wbuf){0};
    }
    if (r->hello[rank]) zmq_msg_close(&r->who[rank]);
    else r->said++;
    r->hello[rank] = 1;
    zmq_msg_init(&r->who[rank]);
    zmq_msg_copy(&r->who[rank], &q->id);
    char line[96];
    snprintf(line, sizeof line, "trainer %d of %d said hello (%d of %d)", rank, ranks, r->said, ranks);
    rec__zservice_log(&r->svc, &q->id, line);
    if (r->said < r->N) return REC_OK;
    REC_TRY(job_start(r));
    for (int t = 0; t < r->N; t++) {
        const rec_net_cache_info ci = {r->F, r->cfg.n_dense, r->po.policy,
                                       r->po.policy == REC_CACHE_BAGPIPE ? r->po.lookahead : 1, r->po.depth, r->N, t,
                                       r->po.capacity, r->o->batch ? r->o->batch : r->cfg.batch_size, r->total,
                                       r->table_rows, r->lo, r->tables, r->o->shuffle};
        rec_frame_begin(&r->w, REC_MSG_CACHE_INFO, 0, 0);
        rec_net_cache_info_encode(&r->w, &ci);
        REC_TRY(rec_frame_end(&r->w));
        REC_TRY(rec__zsend(r->svc.sock, &r->who[t], &r->w, ZMQ_DONTWAIT));
    }
    if (r->o->log) {
        fprintf(r->o->log, "oracle: %d trainer%s started the job at batch %lld\n", r->N, r->N == 1 ? "" : "s",
                (long long)r->start);
        fflush(r->o->log);
    }
    return REC_OK;
}

/* The trainer asking: its rank, from the identity it said HELLO with; -1 when unknown. */
static int rank_of(const oracle *r, const zmq_msg_t *id) {
    for (int t = 0; t < r->N; t++)
        if (r->hello[t] && zmq_msg_size((zmq_msg_t *)&r->who[t]) == zmq_msg_size((zmq_msg_t *)id) &&
            !memcmp(zmq_msg_data((zmq_msg_t *)&r->who[t]), zmq_msg_data((zmq_msg_t *)id), zmq_msg_size((zmq_msg_t *)id)))
            return t;
    return -1;
}

static void serve_one(void *arg) {
    oracle *r = arg;
    rec_zreq q;
    if (!rec__zservice_take(&r->svc, &q, &r->w)) return;
    rec_status s = REC_OK;
    if (q.h.type == REC_MSG_CACHE_HELLO) {
        s = on_hello(r, &q);
        if (!s) {
            rec__zreq_close(&q);
            return;
        }
    } else if (q.h.type == REC_MSG_CACHE_NEXT) {
        const int t = rank_of(r, &q.id);
        const int64_t x = (int64_t)q.h.seq;
        if (!r->p || t < 0) {
            s = rec_errorf(REC_EINVAL, "CACHE_NEXT before CACHE_HELLO (or before every trainer said it)");
        } else if (x == r->next && x <= r->total) {
            s = plan_next(r);
            if (!s && r->next > r->total) log_done(r);
        } else if (x > r->total || x < r->next - KEPT || x > r->next || x < r->start || r->kept_seq[x % KEPT] != x) {
            s = rec_errorf(REC_EINVAL, "batch %lld asked for; the next is %lld (of %lld): send CACHE_HELLO to start over",
                           (long long)x, (long long)r->next, (long long)r->total);
        }
        if (!s) { /* its frame of batch x, kept */
            rec__zsend(r->svc.sock, &q.id, &r->kept[(x % KEPT) * r->N + t], ZMQ_DONTWAIT);
            rec__zreq_close(&q);
            return;
        }
    } else {
        s = rec_errorf(REC_EFORMAT, "a %s frame is not a request to the oracle", rec_msg_name(q.h.type));
    }
    rec__zservice_answer(&r->svc, &q, &r->w, s);
}

rec_status rec_oracle_run(const rec_oracle_opts *o) {
    oracle r = {.o = o};
    rec_status s = setup(&r);
    if (!s) s = rec__zservice_open(&r.svc, "oracle", o->listen, &o->sec, o->log);
    if (!s && o->log) {
        fprintf(o->log, "oracle: listening on %s: %lld batches of %s, tables %d to %d of %d, %s cache of %lld rows\n",
                o->listen, (long long)r.total, o->data_path, r.lo, r.lo + r.F - 1, r.tables,
                rec_cache_policy_name(o->policy), (long long)o->capacity);
        fflush(o->log);
    }
    if (!s) s = rec__zservice_run(&r.svc, o->stop, serve_one, &r);
    source_close(&r.ahead);
    source_close(&r.cur);
    rec_cplan_free(r.p);
    free(r.view), free(r.hot_f), free(r.hot_row);
    rec_wbuf_free(&r.w);
    for (int i = 0; r.kept && i < KEPT * r.N; i++) rec_wbuf_free(&r.kept[i]);
    free(r.kept);
    for (int t = 0; t < r.N; t++)
        if (r.hello[t]) zmq_msg_close(&r.who[t]);
    rec__lrpp_free(r.lrpp);
    rec_batch_free(&r.slice);
    if (r.d2 != r.d) rec_dataset_close(r.d2);
    rec_dataset_close(r.d);
    rec_model_config_free(&r.cfg);
    rec__zservice_close(&r.svc);
    return s;
}
