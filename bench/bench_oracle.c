/* rectrain bench oracle: how fast the Oracle Cacher plans (Bagpipe §5, Fig. 17: "almost
 * dispatch 3.27 Million examples per second").
 *
 * What is timed: one pass of the planner (cache.h) over the batches held in memory — each
 * batch shown to the window (rec_cplan_look) and planned (rec_cplan_step: fetch and evict
 * lists, every id's slot), then, as a second figure, the same with each plan encoded as the
 * CACHE_STEP frame the oracle sends. One thread. The planner's state (8 bytes per table row)
 * is made, and the first half of the batches planned, before the clock starts: the second half
 * is timed (the window and lists already allocated, as in an oracle that has run a while). Beside it, the machine's ceiling for this access pattern:
 * independent random 4-byte reads over a block as large as that state, per second. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"
#include "rectrain/cache.h"
#include "rectrain/core.h"
#include "rectrain/net.h"
#include "rectrain/train.h"

static const char USAGE[] =
    "usage: rectrain bench oracle --data FILE [--batch B] [--batches N] [--lookahead L]\n"
    "                             [--cache-rows C] [--reps R] [--json]\n"
    "\n"
    "Plans N batches of B rows of FILE (.rshard; default B 16384, N all, at most 256) held in\n"
    "memory with Bagpipe's lookahead L (default 100) and a cache of C rows (default 8M), R\n"
    "times (default 5; the median is reported), on one core; the second half is timed. Prints samples/s planned, with\n"
    "and without encoding the frames, and the machine's random-read rate over the planner's\n"
    "state as the ceiling.\n";

/* Independent random int32 reads per second over n ints (the planner's per-row arrays). */
static double random_reads(size_t n) {
    int32_t *a = malloc(sizeof(int32_t) * n);
    if (!a) return 0;
    for (size_t i = 0; i < n; i++) a[i] = (int32_t)i;
    rec_rng g;
    rec_rng_seed(&g, 5, 0);
    const size_t k = 1 << 24;
    uint32_t *ix = malloc(sizeof(uint32_t) * k);
    if (!ix) {
        free(a);
        return 0;
    }
    for (size_t i = 0; i < k; i++) ix[i] = (uint32_t)(rec_rng_u64(&g) % n);
    volatile int64_t sink = 0;
    double best = 0;
    for (int r = 0; r < 3; r++) {
        const double t0 = rec_now();
        int64_t s = 0;
        for (size_t i = 0; i < k; i++) s += a[ix[i]];
        const double dt = rec_now() - t0;
        sink += s;
        if (k / dt > best) best = (double)k / dt;
    }
    free(ix);
    free(a);
    return best;
}

int bench_oracle(int argc, char **argv) {
    const char *cmd = "bench oracle", *path = NULL;
    int64_t batch = 16384, nb = 256, cap = 8 << 20;
    int L = 100, reps = 5, json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = CLI_OK;
        if (cli_is_help(a)) { fputs(USAGE, stdout); return CLI_OK; }
        else if (!strcmp(a, "--data")) rc = cli_str(cmd, argc, argv, &i, &path);
        else if (!strcmp(a, "--batch")) rc = cli_i64(cmd, argc, argv, &i, 1, 1 << 20, &batch);
        else if (!strcmp(a, "--batches")) rc = cli_i64(cmd, argc, argv, &i, 1, 4096, &nb);
        else if (!strcmp(a, "--lookahead")) rc = cli_int(cmd, argc, argv, &i, 1, 100000, &L);
        else if (!strcmp(a, "--cache-rows")) rc = cli_i64(cmd, argc, argv, &i, 1, INT32_MAX - 1, &cap);
        else if (!strcmp(a, "--reps")) rc = cli_int(cmd, argc, argv, &i, 1, 100, &reps);
        else if (!strcmp(a, "--json")) json = 1;
        else rc = cli_usage(cmd, "unknown option '%s'", a);
        if (rc) return rc;
    }
    if (!path) return cli_usage(cmd, "--data FILE is required (a .rshard, e.g. from rectrain prep)");
    rec_dataset *d = NULL;
    rec_dataset_opts o = {.path = path, .prep_threads = 1};
    rec_status s = rec_dataset_open(&d, &o);
    int64_t rows = 0;
    if (!s) s = rec_dataset_rows(d, &rows);
    if (!s && rows / batch < 1) s = rec_errorf(REC_EINVAL, "%s has %lld rows, less than one batch of %lld", path,
                                               (long long)rows, (long long)batch);
    if (s) {
        rec_dataset_close(d);
        return cli_fail(cmd, s);
    }
    if (nb > rows / batch) nb = rows / batch;
    const int F = rec_dataset_n_sparse(d);
    const int64_t *R = rec_dataset_table_rows(d);
    /* the batches, copied out of the loader */
    rec_batch *b = calloc((size_t)nb, sizeof(rec_batch));
    rec_loader *l = NULL;
    if (!b) s = rec_errorf(REC_ENOMEM, "out of memory");
    if (!s) s = rec_loader_open(&l, d, 0, nb * batch, batch, 3);
    int64_t ids = 0;
    for (int64_t x = 0; !s && x < nb; x++) {
        const rec_batch *src;
        s = rec_loader_next(l, &src);
        if (!s && !src) s = rec_errorf(REC_EIO, "%s ended early", path);
        if (!s) s = rec_batch_init(&b[x], batch, src->n_dense, src->n_sparse, 1);
        for (int f = 0; !s && f < F; f++) s = rec_batch_set_wide(&b[x], f, src->sparse[f].wide);
        if (!s) s = rec_batch_append_rows(&b[x], src, 0, src->n);
        for (int f = 0; !s && x >= nb / 2 && f < F; f++) ids += rec_batch_nnz(&b[x], f);
    }
    rec_loader_close(l);
    double state = 0;
    for (int f = 0; f < F; f++) state += (double)R[f];
    rec_cplan_opts po = {REC_CACHE_BAGPIPE, F, R, cap, L, L < 4 ? L : 4, NULL, NULL, 0};
    double t_plan[100], t_enc[100];
    rec_cplan_stats ps = {0}; /* of both passes */
    rec_wbuf w = {0};
    rec_jagged *view = calloc((size_t)F, sizeof(rec_jagged));
    for (int r = -1; !s && r < reps; r++) { /* r = -1: warm-up */
        for (int enc = 0; !s && enc < 2; enc++) {
            rec_cplan *p = NULL;
            s = rec_cplan_init(&p, &po);
            double t0 = 0;
            int64_t looked = 0;
            for (int64_t x = 0; !s && x < nb; x++) {
                if (x == nb / 2) t0 = rec_now(); /* the second half is timed */
                while (!s && looked < nb && rec_cplan_pending(p) < rec_cplan_window(p)) s = rec_cplan_look(p, &b[looked++]);
                rec_cstep st;
                const rec_batch *bx = &b[x];
                if (!s) s = rec_cplan_step(p, bx, &st);
                if (!s && enc) {
                    rec_batch v = *bx;
                    v.sparse = view;
                    for (int f = 0; f < F; f++)
                        view[f] = (rec_jagged){.offsets = bx->sparse[f].offsets, .ids32 = st.slots[f], .wide = 0};
                    rec_frame_begin(&w, REC_MSG_CACHE_STEP, 0, (uint64_t)x);
                    const rec_net_cache_step cs = {.n_fetch = st.n_fetch, .n_evict = st.n_evict, .fetch = st.fetch,
                                                   .evict = st.evict, .batch = v};
                    rec_net_cache_step_encode(&w, &cs);
                    s = rec_frame_end(&w);
                }
            }
            const double dt = rec_now() - t0;
            if (!s && r >= 0) (enc ? t_enc : t_plan)[r] = dt;
            if (!s && !enc) rec_cplan_get_stats(p, &ps);
            rec_cplan_free(p);
        }
    }
    free(view);
    rec_wbuf_free(&w);
    for (int64_t x = 0; b && x < nb; x++) rec_batch_free(&b[x]);
    free(b);
    rec_dataset_close(d);
    if (s) return cli_fail(cmd, s);
    const double tp = rec_median(t_plan, reps), te = rec_median(t_enc, reps);
    const double samples = (double)(nb - nb / 2) * (double)batch, ceil_reads = random_reads((size_t)(2 * state));
    printf("oracle: %lld batches of %lld rows (the last %lld timed, %.1f ids a row), %d tables, %.1fM table rows; L %d, "
           "cache %lld rows\n", (long long)nb, (long long)batch, (long long)(nb - nb / 2), (double)ids / samples, F, state / 1e6, L, (long long)cap);
    printf("  planned      %8.2f M samples/s   %7.1f M ids/s   (%.1f ms a batch)\n", samples / tp / 1e6, ids / tp / 1e6,
           tp / (double)(nb - nb / 2) * 1e3);
    printf("  + frames     %8.2f M samples/s   %7.1f M ids/s\n", samples / te / 1e6, ids / te / 1e6);
    printf("  fetched %.0f rows a batch (%.1f%% of its distinct rows), peak %lld slots\n",
           (double)ps.fetched / (double)ps.batches, 100.0 * (double)ps.fetched / (double)(ps.unique ? ps.unique : 1),
           (long long)ps.peak_slots);
    printf("  ceiling: %.0f M random 4-byte reads/s over %.0f MB (the planner's state)\n", ceil_reads / 1e6,
           8.0 * state / 1e6);
    if (json)
        printf("{\"batches\": %lld, \"batch\": %lld, \"lookahead\": %d, \"samples_per_s\": %s, \"samples_per_s_framed\": %s, "
               "\"ids_per_s\": %s, \"random_reads_per_s\": %s}\n", (long long)nb, (long long)batch, L,
               cli_jnum("%.0f", samples / tp), cli_jnum("%.0f", samples / te), cli_jnum("%.0f", ids / tp),
               cli_jnum("%.0f", ceil_reads));
    return CLI_OK;
}
