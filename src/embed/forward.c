/* The fused forward (embed.h, rec_embed_forward): every table of a batch pooled in one
 * parallel region, each with its own schedule (RecFlex §IV). Work is mapped to threads at
 * each call from the batch's real pooling factors (RecFlex §IV-B's host-side mapping adapted
 * to threads): one-hot ROW tables first go through the row pass, each thread pooling its share
 * of the batch rows; every other table becomes work items in column order, cut into walks
 * of equal estimated cost that pairs of threads take from both ends (map_items, walk_claim).
 * The kernels that pool a range of bags or rows are in pooling.c.
 */
#include <omp.h>

#include "embed_impl.h"
#include "rectrain/core.h"

enum {
    ROW_CHUNK_BYTES = 256 << 10, /* output a chunk of the row pass covers (row_pass) ... */
    ROW_CHUNK_ROWS = 16,         /* ... at least this many rows ... */
    ROW_CHUNK_MAX = 64,          /* ... at most (set when threads claimed chunks; not re-timed since) */
};

/* The share of the call's estimated cost that walks 0..w cover: walk w serves threads 2w and
 * 2w + 1 (only 2w when nt is odd and w is the last). */
static double walk_goal(double total, int w, int nt) { return total * (2 * w + 2 < nt ? 2 * w + 2 : nt) / nt; }

/* The forward work items of this call (RecFlex's runtime task map), in column order: for each
 * active table in index order, TABLE gives one item; SAMPLE (and ROW outside the row pass)
 * cuts the bags into ceil(nnz / 2^grain) items of about equal ids (at least
 * EMBED_MIN_BAGS_PER_ITEM bags each), cut points found by binary search on the offsets. The
 * items are then cut into walks (see walk_claim) of about equal estimated cost per thread
 * served (embed_table_cost, a SAMPLE item costing its table's share; walk_goal). The item
 * block, sized at init, holds them all: at most F * ceil(B / EMBED_MIN_BAGS_PER_ITEM). Tables
 * in the call's row pass (rowok) make none. */
static void map_items(rec_embed *e, const rec_batch *b, int first_feature, int only) {
    const int64_t B = b->n;
    const int f0 = only >= 0 ? only : 0, f1 = only >= 0 ? only + 1 : e->F;
    double total = 0;
    for (int f = f0; f < f1; f++) total += e->cost[f] = e->rowok[f] ? 0.0 : embed_table_cost(e, b, first_feature, f);
    const int nt = e->nt, walks = (nt + 1) / 2;
    int w = 0;
    uint32_t w0 = 0; /* first item of walk w */
    double done = 0, goal = walk_goal(total, 0, nt);
    int64_t n = 0;
    for (int f = f0; f < f1; f++) {
        if (e->rowok[f]) continue;
        const rec_jagged *j = &b->sparse[first_feature + f];
        const rec_embed_sched s = e->sched[f];
        int64_t parts = 1;
        if (s.split != REC_SPLIT_TABLE) { /* SAMPLE, or ROW outside the row pass */
            parts = (embed_table_nnz(b, first_feature, f) >> s.grain) + 1;
            const int64_t maxp = (B + EMBED_MIN_BAGS_PER_ITEM - 1) / EMBED_MIN_BAGS_PER_ITEM;
            if (parts > maxp) parts = maxp;
            if (parts < 1) parts = 1;
        }
        const double part_cost = e->cost[f] / (double)parts;
        /* Cut k ends at the first bag whose end offset reaches k/parts of the ids; offsets
         * that are not monotonic (a corrupt batch) only make the cuts uneven, the kernels
         * report them. */
        const int64_t base = j->offsets[0], span = j->offsets[B] - base;
        int64_t b0 = 0;
        for (int64_t k = 1; k <= parts && b0 < B; k++) {
            int64_t b1 = B;
            if (k < parts) {
                const int64_t target = base + span * k / parts;
                int64_t lo = b0 + EMBED_MIN_BAGS_PER_ITEM, hi = B;
                if (lo > B) lo = B;
                while (lo < hi) {
                    const int64_t mid = lo + (hi - lo) / 2;
                    if (j->offsets[mid] < target) lo = mid + 1;
                    else hi = mid;
                }
                b1 = lo;
            }
            e->items[n++] = (embed_item){b0, b1, f};
            b0 = b1;
            done += part_cost;
            if (done >= goal && w < walks - 1) { /* walk w ends after this item */
                e->walk[w++].v = (uint64_t)n << 32 | w0;
                w0 = (uint32_t)n;
                goal = walk_goal(total, w, nt);
            }
        }
    }
    e->walk[w++].v = (uint64_t)n << 32 | w0;
    for (; w < walks; w++) e->walk[w].v = (uint64_t)n << 32 | (uint32_t)n;
}

/* Claims an item of walk r, packed as hi << 32 | lo for the items [lo, hi) left: from the
 * front (lo) or the back (hi - 1). Returns the item, or -1 when the walk is done.
 *
 * Why walks: each thread of a walk writes neighbouring tables' slices of the same output
 * lines one after the other (a line stays in its cache between items), and the walk's two
 * threads meet only in its middle, so they seldom write the same line at the same time.
 * Against the items in cost order from one shared counter (neighbours apart), the uniform
 * table/fixed/pf8 forward, same batches, in turns: B 1.04-1.16x, E 1.04-1.07x, D 0.99-1.06x
 * faster, A and C within noise. */
static int64_t walk_claim(embed_walk *r, int back) {
    uint64_t v = __atomic_load_n(&r->v, __ATOMIC_RELAXED);
    for (;;) {
        const uint32_t lo = (uint32_t)v, hi = (uint32_t)(v >> 32);
        if (lo >= hi) return -1;
        const uint64_t nv = back ? (uint64_t)(hi - 1) << 32 | lo : (uint64_t)hi << 32 | (lo + 1);
        if (__atomic_compare_exchange_n(&r->v, &v, nv, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) return back ? hi - 1 : lo;
    }
}

/* Bags [b0, b1) of j: returns the first that is not a valid range of the feature's id slots
 * (b1 when all are), and sets *one to whether every bag before it holds exactly one id. The
 * common case is one pass without branches, which gcc vectorises: with every offset >= 0 the
 * differences cannot overflow, and non-negative differences make every bag's end at most
 * off[b1]. Only a batch that fails it is scanned bag by bag. */
static int64_t scan_bags(const rec_jagged *j, int64_t b0, int64_t b1, int *one) {
    const int64_t *off = j->offsets;
    int64_t neg = off[b0], many = 0;
    for (int64_t r = b0; r < b1; r++) {
        const int64_t d = (int64_t)((uint64_t)off[r + 1] - (uint64_t)off[r]);
        neg |= off[r + 1] | d;
        many |= d ^ 1;
    }
    if (neg >= 0 && off[b1] <= j->nnz_cap) {
        *one = many == 0;
        return b1;
    }
    int64_t bv = b0;
    many = 0;
    for (; bv < b1 && embed_bag_ok(j, bv); bv++) many |= (off[bv + 1] - off[bv]) ^ 1;
    *one = many == 0;
    return bv;
}

/* Runs one work item. Returns 0, or 1 with *x set to its first error (bags after it are
 * left unwritten). */
static int forward_item(const rec_embed *e, const rec_batch *b, int first_feature, const embed_item *it, float *out,
                        embed_err *x) {
    const int f = it->f;
    const rec_jagged *j = &b->sparse[first_feature + f];
    const rec_embed_sched s = e->sched[f];
    const int64_t B = b->n;
    /* Bags up to the first bad one are valid, and their ids lie in [off[b0], off[bv]). */
    int one;
    const int64_t bv = scan_bags(j, it->b0, it->b1, &one);
    const pool_job job = {embed_table_base(e, f), e->rows[f], e->dims[f], e->W, j->offsets, j->ids, j->weights,
                          out + e->col[f], e->pooling == REC_POOL_MEAN, !e->trust, s.pf, j->wide, one, e->b16};
    const int64_t k = embed_pool(&job, s.kernel, it->b0, bv);
    if (k >= 0) {
        int64_t r = it->b0; /* the bag holding position k */
        while (j->offsets[r + 1] <= k) r++;
        *x = (embed_err){(int64_t)f * B + r, 1, rec_jagged_id(j, k), 0};
        return 1;
    }
    if (bv < it->b1) {
        *x = (embed_err){(int64_t)f * B + bv, 2, j->offsets[bv], j->offsets[bv + 1]};
        return 1;
    }
    return 0;
}

/* ---- the row pass (split ROW) ---------------------------------------------------------------
 * One-hot ROW tables are pooled row by row: a thread takes a chunk of batch rows and writes
 * every such table's slice of a row before the next row, so the output is written in order
 * and a row's lines fill while they are in L1. On Kaggle's 26 one-hot dim-16 tables, 2
 * threads, the same batches in turns: row/fixed/pf0/g12 0.176 ms per batch of 2048 against
 * 0.236 for table/fixed/pf0 and 0.214 for sample/fixed/pf8/g10 (a bare row-major loop without
 * checks or classes, in a throwaway driver: 0.141-0.146 where the engine took 0.161-0.168, so
 * the checks, the scan and the phases cost about 13%). The pass is three phases of
 * the forward's one parallel region: each thread checks its share of the rows of the
 * candidate tables (row_scan); one thread groups the tables that passed into classes and maps
 * the other tables' items (row_classes, map_items); each thread pools its share of the rows
 * (row_pass), then takes the walks. */

/* Does table f's schedule give it to the row pass when its feature is one-hot? */
static int row_sched(const rec_embed *e, int f) {
    return e->sched[f].split == REC_SPLIT_ROW && embed_kernel_native(REC_KERN_FIXED, e->dims[f]);
}

/* Phase 1: this thread's bags [r0, r1) of each candidate table; a table with a bag there that
 * is not exactly one id in range of its slots leaves the pass (its item checks and reports). */
static void row_scan(rec_embed *e, const rec_batch *b, int first_feature, int64_t r0, int64_t r1) {
    for (int f = 0; f < e->F; f++) {
        if (!__atomic_load_n(&e->rowok[f], __ATOMIC_RELAXED)) continue;
        int one;
        if (scan_bags(&b->sparse[first_feature + f], r0, r1, &one) < r1 || !one)
            __atomic_store_n(&e->rowok[f], 0, __ATOMIC_RELAXED);
    }
}

/* Phase 2: the tables that passed, in classes of equal (dim, id width, weighting) that one
 * specialised loop pools; each class's tables and the classes in index order of their first
 * table, and its tables with a prefetch distance listed in far. A placed table's rowok
 * becomes 2. */
static void row_classes(rec_embed *e, const rec_batch *b, int first_feature, float *out) {
    row_table *t = e->rtab;
    int32_t *far = e->rfar;
    e->n_rjob = 0;
    for (int f = 0; f < e->F; f++) {
        if (e->rowok[f] != 1) continue;
        const rec_jagged *jf = &b->sparse[first_feature + f];
        row_job *c = &e->rjob[e->n_rjob++];
        *c = (row_job){t, far, 0, 0, e->dims[f], jf->wide, jf->weights != NULL, !e->trust, e->W, out, e->b16};
        for (int g = f; g < e->F; g++) {
            const rec_jagged *j = &b->sparse[first_feature + g];
            if (e->rowok[g] != 1 || e->dims[g] != c->E || j->wide != c->wide || (j->weights != NULL) != c->weighted)
                continue;
            const int64_t k0 = j->offsets[0]; /* bag r's id is at k0 + r */
            const void *idx = j->wide ? (const void *)(j->ids64 + k0) : (const void *)(j->ids32 + k0);
            if (e->sched[g].pf) far[c->nfar++] = c->n;
            t[c->n++] = (row_table){embed_table_base(e, g), idx, j->weights ? j->weights + k0 : NULL, e->rows[g],
                                    e->col[g], g, e->sched[g].pf};
            e->rowok[g] = 2;
        }
        t += c->n;
        far += c->nfar;
    }
}

/* After the pass met a bad id: the first (feature, row order) among its tables in rows
 * [r0, r1), found again table by table (the pass walks rows first). */
static int row_first_error(const rec_embed *e, const rec_batch *b, int first_feature, int64_t r0, int64_t r1,
                           embed_err *x) {
    for (int f = 0; f < e->F; f++) {
        if (!e->rowok[f]) continue;
        const rec_jagged *j = &b->sparse[first_feature + f];
        for (int64_t r = r0; r < r1; r++) {
            const int64_t id = rec_jagged_id(j, j->offsets[0] + r);
            if ((uint64_t)id >= (uint64_t)e->rows[f]) {
                *x = (embed_err){(int64_t)f * b->n + r, 1, id, 0};
                return 1;
            }
        }
    }
    return 0;
}

/* Phase 3: this thread's share of the batch rows, [B th / nth, B (th + 1) / nth), in chunks
 * (at least ROW_CHUNK_ROWS rows, at most ROW_CHUNK_MAX, about ROW_CHUNK_BYTES of output so a
 * chunk's lines are still in L2 when the next class writes its slices of them), the classes
 * taking turns over each. A class alone in the pass prefetches on across its chunks to the
 * end of the share (embed_pool_rows' lim), so only the share's first rows wait for their far
 * rows.
 *
 * Shares rather than chunks claimed from a shared counter (as this pass did up to session
 * 21): rows cost the same whatever the table, so equal shares balance, a thread's prefetch
 * stream never breaks at a chunk the other thread took, and each thread writes the same half
 * of the output at every call. Kaggle, 256 batches of 2048 (rows of the large tables from
 * memory), 2 threads, the same process in turns, three runs (2026-11-24): shares with
 * row/fixed/pf4 on the 8 tables over 100k rows and row/fixed/pf0 on the others 0.279 / 0.284
 * / 0.252 ms per batch; table/fixed/pf16 0.301 / 0.280 / 0.283; the bench's naive loop 0.450
 * / 0.471 / 0.433; and a row-major copy of the same rows with no checks, scan or classes at
 * all 0.271 / 0.250 / 0.250. With the claimed chunks and the old (row, table)-step prefetch,
 * the same mix took 0.347-0.360. Timed again in one process, in turns, two runs (2026-11-25,
 * the bench's Kaggle batches): that mix (pf4 on the 8 tables over a core's L2) 0.29-0.31,
 * row/fixed/pf0 everywhere 0.28-0.31, table/fixed/pf16 0.27, the tuned plan (all SAMPLE,
 * pf0 on the four largest tables) 0.27: within the machine's noise of each other, so the
 * pf mix is no better a plan than the tuner's.
 *
 * With tp, each class's time is shared equally among its tables (same dim, one id each).
 * Returns 0, or 1 with *x the first error in the chunks it ran (every chunk is run, so the
 * least over the threads is the batch's first). */
static int row_pass(const rec_embed *e, const rec_batch *b, int first_feature, int th, int nth, double *tp,
                    embed_err *x) {
    const int64_t B = b->n, lo = B * th / nth, hi = B * (th + 1) / nth;
    int64_t chunk = ROW_CHUNK_BYTES / ((int64_t)e->W * (int64_t)sizeof(float));
    if (chunk < ROW_CHUNK_ROWS) chunk = ROW_CHUNK_ROWS;
    if (chunk > ROW_CHUNK_MAX) chunk = ROW_CHUNK_MAX;
    x->key = INT64_MAX;
    for (int64_t c0 = lo; c0 < hi; c0 += chunk) {
        const int64_t c1 = hi - c0 > chunk ? c0 + chunk : hi;
        for (int c = 0; c < e->n_rjob; c++) {
            const row_job *j = &e->rjob[c];
            const double ti = tp ? rec_now() : 0.0;
            int64_t row;
            const int bad = embed_pool_rows(j, c0, c1, e->n_rjob == 1 ? hi : c1, c0 == lo || e->n_rjob > 1, &row);
            if (tp) {
                const double d = (rec_now() - ti) / j->n;
                for (int k = 0; k < j->n; k++) tp[j->t[k].f] += d;
            }
            if (bad >= 0) {
                embed_err y;
                if (row_first_error(e, b, first_feature, c0, c1, &y) && y.key < x->key) *x = y;
                break;
            }
        }
    }
    return x->key != INT64_MAX;
}

rec_status embed_forward_run(rec_embed *e, const rec_batch *b, int first_feature, float *out, int only) {
    REC_TRY(embed_check_call(e, "forward", b, first_feature));
    const int64_t B = b->n;
    const double t0 = rec_now();
    int rows = 0; /* tables the row pass may take */
    for (int f = 0; f < e->F; f++) rows += e->rowok[f] = (uint8_t)((only < 0 || f == only) && row_sched(e, f));
    embed_err first = {INT64_MAX, 0, 0, 0};
    const int prof = e->profiling, walks = (e->nt + 1) / 2;
    if (B > 0) {
#pragma omp parallel num_threads(e->nt)
        {
            embed_err mine = {INT64_MAX, 0, 0, 0}, x;
            const int th = omp_get_thread_num(), nth = omp_get_num_threads();
            const int64_t r0 = B * th / nth, r1 = B * (th + 1) / nth;
            double *tp = prof ? e->prof_fwd + (size_t)th * (size_t)(e->F + 1) : NULL;
            if (rows) {
                row_scan(e, b, first_feature, r0, r1);
#pragma omp barrier
            }
#pragma omp single
            {
                if (rows) row_classes(e, b, first_feature, out);
                map_items(e, b, first_feature, only);
            }
            if (rows && row_pass(e, b, first_feature, th, nth, tp, &x)) mine = x;
            /* Its own walk first, then the others' (a thread of a short walk helps finish
             * the longer ones; with fewer threads than asked, nothing is left undone). */
            for (int k = 0; k < walks; k++)
                for (;;) {
                    const int64_t i = walk_claim(&e->walk[(th / 2 + k) % walks], th & 1);
                    if (i < 0) break;
                    const double ti = tp ? rec_now() : 0.0;
                    if (forward_item(e, b, first_feature, &e->items[i], out, &x) && x.key < mine.key) mine = x;
                    if (tp) tp[e->items[i].f] += rec_now() - ti;
                }
            if (mine.key != INT64_MAX) {
#pragma omp critical(rec_embed_forward_err)
                if (mine.key < first.key) first = mine;
            }
        }
    }
    e->last_fwd_s = rec_now() - t0;
    e->last_ids = 0;
    for (int f = 0; f < e->F; f++)
        if (only < 0 || f == only) {
            const double nnz = (double)embed_table_nnz(b, first_feature, f);
            e->last_ids += nnz;
            if (prof) e->prof_ids[f] += nnz;
        }
    if (first.key != INT64_MAX) return embed_report(e, " forward", &first, B, first_feature);
    return REC_OK;
}

rec_status rec_embed_forward(rec_embed *e, const rec_batch *b, int first_feature, float *out) {
    if (e->tuner) embed_tune_before(e, 0);
    const rec_status s = embed_forward_run(e, b, first_feature, out, -1);
    if (e->tuner && !s) embed_tune_after(e, 0);
    return s;
}
