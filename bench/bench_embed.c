/* rectrain bench embed: the embedding engine on the Kaggle DLRM's tables and on synthetic
 * heterogeneous models shaped like RecFlex's models A–E (Table I of the paper, digest
 * 001-RecFlex-digest.md §4.1: the artifact's data configs and table shapes).
 *
 * For each model it generates `--batches` batches (the "historical" batches of RecFlex
 * §IV-A3; how many sets the cache regime: the Kaggle model's 4 stay in the last-level cache,
 * 256 stream its large tables' rows from memory as training does) and times, on the same
 * tables and ids:
 *   - the naive gather loop (per table, per bag, per id, a runtime-E add loop; OpenMP over
 *     tables), the baseline for the prefetching kernels;
 *   - on a model whose every bag holds one id (Kaggle), the bare row copy (bare_copy): the
 *     same rows copied into the same layout with no checks, what the memory system gives
 *     the least code that moves a one-hot forward's bytes;
 *   - every uniform schedule (one universe member for all tables; forward members with the
 *     default backward, backward members at the best forward), to select the best of each;
 *     profiled per table, which gives the per-table oracle: the thread time of a plan that
 *     runs each table with its fastest member, an estimate of what choosing per table gains;
 *   - the default plan; the plan tuned with interference (rec_embed_tune_begin, on the
 *     batches); the plan tuned separately per table (rec_embed_tune_separate);
 * then times the contenders afresh in turns (time_contenders: the selections' own timings are
 * not reported) and prints forward and forward+backward+update time per batch, rows/s, and
 * GB/s in FBGEMM's definition: (B·ΣL·E + B·F·E) × 4 bytes / time, summed over tables (rows
 * read plus pooled outputs written). Beside them: the machine's random-gather ceiling
 * measured by the same program (naive, and with prefetch) and its sequential read bandwidth,
 * over a buffer far larger than the last-level cache.
 *
 * --dump DIR writes the model and batches for the PyTorch peer (dev/torch_embed.py, run by
 * bench/embed_vs_pytorch.sh): DIR/model.json {"tables": [[rows, dim]...], "batch", "lr"} and
 * DIR/batches.bin, per batch: int64 B, then per table int64 nnz, (B+1) int64 offsets, nnz
 * int64 ids, little-endian; plus DIR/dout.bin, the (B, W) float32 output gradient used.
 */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "bench.h"
#include "bench_embed_cuda.h"
#include "embed_models.h"
#include "cli.h"
#include "rectrain/core.h"
#include "rectrain/embed.h"

static const char USAGE[] =
    "usage: rectrain bench embed [--model kaggle|A|B|C|D|E|all] [options]\n"
    "\n"
    "Times the embedding engine (forward; forward + backward + SGD update) on the Kaggle DLRM\n"
    "tables and on RecFlex-shaped heterogeneous models A-E: naive gather loop, every uniform\n"
    "schedule, the default plan, the tuned plan (with interference) and the separately tuned\n"
    "plan, with GB/s in FBGEMM's definition beside the machine's random-gather ceiling.\n"
    "\n"
    "  --model M       kaggle, A, B, C, D, E, or all (default all)\n"
    "  --batch B       batch size (default 2048 for kaggle, 512 for A-E, RecFlex's largest request)\n"
    "  --batches N     historical batches per model (default 4, at most 256; the Kaggle model's 4\n"
    "                  batches stay in the last-level cache from pass to pass, 256 stream their\n"
    "                  rows from memory as training does)\n"
    "  --reps R        timed passes over the batches; the median is reported (default 3)\n"
    "  --kaggle-scale S  scale of the Kaggle table sizes (default 1: 33.8M rows, 2.2 GB)\n"
    "  --threads T     threads (default: all CPUs)\n"
    "  --ceiling-mib N memory the random-gather ceiling and read bandwidth run over (default 1024)\n"
    "  --wide-ids      hold every id as int64 (default: int32 where the table allows, as the\n"
    "                  trainer's loader does)\n"
    "  --hit-ids N     draw every id below N (id mod N): rows that stay in cache, so the figures\n"
    "                  are the engine's cost without memory misses (default: the model's law)\n"
    "  --dump DIR      write the last model's tables and batches for dev/torch_embed.py\n"
    "  --device D      cpu (default) or cuda: the GPU engine, kernels timed with events: default,\n"
    "                  every uniform schedule, warp-per-bag and the tuned plan, beside the\n"
    "                  device's copy bandwidth\n"
    "  --plan-out FILE with --device cuda: write the tuned plan (rectrain-cuda-embed-plan JSON)\n"
    "  --precision P   fp32 (default) or bf16: the tables stored in bf16 (GB/s counts 2-byte rows)\n"
    "  --json          print a JSON summary per model on stdout\n";

/* ---- baselines ---------------------------------------------------------------------------- */

/* The naive gather loop: what one writes first. Same output layout as the engine; ids read
 * at their width like the engine's (one copy of the loop per width), rows as stored (fp32, or
 * bf16 widened). */
static inline __attribute__((always_inline)) void naive_table(const void *T, int E, const rec_jagged *j, int64_t B,
                                                              float *out, int W, const int wide, const int b16) {
    for (int64_t r = 0; r < B; r++) {
        float *o = out + (size_t)r * W;
        for (int c = 0; c < E; c++) o[c] = 0;
        for (int64_t k = j->offsets[r]; k < j->offsets[r + 1]; k++) {
            const int64_t id = wide ? j->ids64[k] : j->ids32[k];
            if (b16)
                for (int c = 0; c < E; c++) o[c] += rec_bf16_to_float(((const uint16_t *)T)[(size_t)id * E + c]);
            else
                for (int c = 0; c < E; c++) o[c] += ((const float *)T)[(size_t)id * E + c];
        }
    }
}

static void naive_forward(rec_embed *e, const rec_batch *b, float *out, int threads) {
    const int F = rec_embed_tables(e), W = rec_embed_out_width(e);
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (int f = 0; f < F; f++) {
        int col = 0;
        for (int g = 0; g < f; g++) col += rec_embed_dim(e, g);
        const rec_jagged *j = &b->sparse[f];
        const int E = rec_embed_dim(e, f);
        if (rec_embed_is_bf16(e)) {
            if (j->wide) naive_table(rec_embed_table_bf16(e, f), E, j, b->n, out + col, W, 1, 1);
            else naive_table(rec_embed_table_bf16(e, f), E, j, b->n, out + col, W, 0, 1);
        } else {
            if (j->wide) naive_table(rec_embed_table(e, f), E, j, b->n, out + col, W, 1, 0);
            else naive_table(rec_embed_table(e, f), E, j, b->n, out + col, W, 0, 0);
        }
    }
}

/* The bare row copy, for a model whose bags all hold one id, whose tables share one dim and
 * whose ids are 32-bit (Kaggle's): output row r is the features' rows for batch row r copied
 * side by side, row-major, each thread its half of the batch, with no id check, no look at
 * the offsets, and every size a compile-time constant. It moves the bytes every one-hot
 * forward must move (each row read, the interaction layer's layout written) with the least
 * code: not a bound proved, but what the memory system gives a loop that does nothing else,
 * on the same tables and ids. Least code matters: the core overlaps the misses of as many
 * rows as its window holds, so a copy that loads each feature's id width, dim and column
 * (about twice the instructions per row) took 0.39-0.51 ms per Kaggle batch against
 * 0.21-0.24 for this one (256 batches, same process, in turns). */
typedef float vf8u __attribute__((vector_size(32), aligned(4), may_alias)); /* 8 floats, any alignment */

static inline __attribute__((always_inline)) void copy_rows(const int32_t *const *ids, const float *const *T, int F,
                                                            int n, float *out, int threads, const int E) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int r = 0; r < n; r++)
        for (int f = 0; f < F; f++) {
            const float *restrict t = T[f] + (size_t)(uint32_t)ids[f][r] * E;
            float *restrict o = out + ((size_t)r * (size_t)F + (size_t)f) * E;
            if (E % 8) memcpy(o, t, (size_t)E * sizeof(float));
            else
                for (int c = 0; c < E; c += 8) *(vf8u *)(o + c) = *(const vf8u *)(t + c);
        }
}

#define COPY_CASE(EE) \
    case EE: copy_rows(ids, T, F, n, out, threads, EE); break;

static void bare_copy(const rec_batch *b, int F, int E, const float *const *T, const int32_t **ids, float *out,
                      int threads) {
    const int n = (int)b->n;
    for (int f = 0; f < F; f++) ids[f] = b->sparse[f].ids32;
    switch (E) {
        COPY_CASE(4) COPY_CASE(8) COPY_CASE(16) COPY_CASE(32) COPY_CASE(64) COPY_CASE(128)
    }
}
#undef COPY_CASE

/* Whether the bare copy can run: every table the dim E it has code for, every id 32-bit,
 * every bag of every batch one id. */
static int bare_copy_fits(const rec_batch *b, int nb, int F, const int *dims) {
    for (int f = 0; f < F; f++)
        if (dims[f] != dims[0] || (dims[0] & (dims[0] - 1)) || dims[0] < 4 || dims[0] > 128) return 0;
    for (int i = 0; i < nb; i++)
        for (int f = 0; f < F; f++) {
            if (b[i].sparse[f].wide) return 0;
            for (int64_t r = 0; r <= b[i].n; r++)
                if (b[i].sparse[f].offsets[r] != r) return 0;
        }
    return 1;
}

/* The machine's random-gather rate of 64-byte rows over `bytes` of memory, rows/s: naive
 * (sum each row as the loop reaches it), or with a 16-row software prefetch. The rows are
 * allocated as the engine's tables are (rec_alloc: 2 MiB pages): over 4 KiB pages nearly
 * every row also takes a page walk, which halves the prefetched rate (85M against 130M rows/s
 * over 2 GiB on 2 threads, 2026-11-24) and made this ceiling understate what the tables allow. */
static double gather_ceiling(int threads, size_t bytes, int prefetch) {
    const int64_t R = (int64_t)(bytes / 64), N = 1 << 22;
    float *T = NULL;
    int64_t *idx = malloc((size_t)N * sizeof(int64_t));
    if (rec_alloc((void **)&T, bytes, "gather ceiling rows") || !idx) {
        rec_free(T), free(idx);
        return 0;
    }
    memset(T, 1, bytes);
    rec_rng r;
    rec_rng_seed(&r, 99, 0);
    for (int64_t i = 0; i < N; i++) idx[i] = (int64_t)rec_rng_below(&r, (uint64_t)R);
    double t[5], sink = 0;
    for (int rep = -1; rep < 5; rep++) {
        const double t0 = rec_now();
#pragma omp parallel for num_threads(threads) reduction(+ : sink) schedule(static)
        for (int64_t i = 0; i < N; i++) {
            if (prefetch && i + 16 < N) __builtin_prefetch(T + idx[i + 16] * 16);
            const float *row = T + idx[i] * 16;
            float s = 0;
            for (int c = 0; c < 16; c++) s += row[c];
            sink += s;
        }
        if (rep >= 0) t[rep] = rec_now() - t0;
    }
    rec_free(T), free(idx);
    if (sink == 12345) fputs("", stderr);
    return (double)N / rec_median(t, 5);
}

/* The machine's sequential read bandwidth with `threads` threads over `bytes`, GB/s (each
 * thread sums its share, 16 floats at a time). */
static double read_bandwidth(int threads, size_t bytes) {
    const size_t n = bytes / sizeof(float) / 16 * 16;
    float *a = NULL;
    if (!n || rec_alloc((void **)&a, n * sizeof(float), "read bandwidth")) return 0;
    memset(a, 1, n * sizeof(float));
    double t[5];
    float sink = 0;
    for (int rep = -1; rep < 5; rep++) {
        const double t0 = rec_now();
        float s[16] = {0};
#pragma omp parallel for num_threads(threads) reduction(+ : s[:16]) schedule(static)
        for (size_t i = 0; i < n; i += 16)
            for (int c = 0; c < 16; c++) s[c] += a[i + c];
        for (int c = 0; c < 16; c++) sink += s[c];
        if (rep >= 0) t[rep] = rec_now() - t0;
    }
    rec_free(a);
    if (sink == 12345) fputs("", stderr);
    return (double)n * sizeof(float) / rec_median(t, 5) * 1e-9;
}

/* ---- timing --------------------------------------------------------------------------------- */

typedef struct bench_ctx {
    rec_embed *e;
    rec_batch *b;
    int nb, reps, threads;
    float *out, *dout;
    float lr;
    int bare;                /* the bare copy runs (bare_copy_fits) */
    const float **T;         /* (F) the tables, and room for a batch's id arrays, for the bare copy */
    const int32_t **ids;
} bench_ctx;

/* Baseline `what` on batch b into out: the naive loop (2) or the bare copy (3). */
static void baseline(bench_ctx *c, int what, const rec_batch *b, float *out) {
    if (what == 2) naive_forward(c->e, b, out, c->threads);
    else bare_copy(b, rec_embed_tables(c->e), rec_embed_dim(c->e, 0), c->T, c->ids, out, c->threads);
}

/* Mean seconds per batch of one pass over the batches: forward (what 0) or forward +
 * backward + update (what 1) or a baseline (what 2, 3). */
static double one_pass(bench_ctx *c, int what) {
    const double t0 = rec_now();
    for (int i = 0; i < c->nb; i++) {
        if (what >= 2) baseline(c, what, &c->b[i], c->out);
        else if (rec_embed_forward(c->e, &c->b[i], 0, c->out)) return NAN;
        if (what == 1 && rec_embed_backward_update(c->e, &c->b[i], 0, c->dout, c->lr)) return NAN;
    }
    return (rec_now() - t0) / c->nb;
}

/* The baselines compute what the engine computes, or their times mean nothing: on the first
 * batch the naive loop's output must match the engine's to float rounding (it sums in id
 * order, the engine in groups of 4) and the bare copy's exactly (a one-id SUM bag is its
 * row). */
static rec_status check_baselines(bench_ctx *c) {
    const int W = rec_embed_out_width(c->e);
    const size_t n = (size_t)c->b[0].n * (size_t)W;
    float *ref, *out = c->out;
    REC_TRY(rec_alloc((void **)&ref, n * sizeof(float), "bench reference outputs"));
    rec_status s = rec_embed_forward(c->e, &c->b[0], 0, ref);
    for (int what = 2; !s && what <= 3; what++) {
        if (what == 3 && !c->bare) break;
        baseline(c, what, &c->b[0], out);
        for (size_t i = 0; !s && i < n; i++) {
            const double d = fabs((double)out[i] - ref[i]), tol = what == 3 ? 0 : 1e-5 * (1 + fabs(ref[i]));
            if (!(d <= tol))
                s = rec_errorf(REC_EINVAL, "the %s's output %g differs from the engine's %g at batch row %zu, "
                                  "column %zu", what == 2 ? "naive loop" : "bare copy", out[i], ref[i], i / (size_t)W,
                                  i % (size_t)W);
        }
    }
    rec_free(ref);
    return s;
}

/* Median over reps of one_pass, after a warm-up pass. */
static double time_pass(bench_ctx *c, int what) {
    double t[31];
    for (int rep = -1; rep < c->reps; rep++) {
        const double x = one_pass(c, what);
        if (rep >= 0) t[rep] = x;
    }
    return rec_median(t, c->reps);
}

/* The figures the bench reports: each contender timed afresh, in turns (one pass each per
 * round, 2 * reps + 1 rounds, medians), after the selections are made. Picking the best of
 * 36 uniform schedules by their own timings would keep the luckiest measurement (the
 * winner's curse) and compare it with one ordinary measurement of the tuned plan. */
enum { C_NAIVE, C_BARE, C_DEFAULT, C_UNIFORM, C_SEPARATE, C_TUNED, N_CONTENDERS };
typedef struct contender {
    rec_embed_sched *plan_f, *plan_fb; /* (F) plans for the forward and the forward + backward figures */
    double f, fb;                      /* median seconds per batch */
} contender;

static void time_contenders(bench_ctx *c, contender *k, int F) {
    enum { MAX_ROUNDS = 63 };
    const int rounds = 2 * c->reps + 1 < MAX_ROUNDS ? 2 * c->reps + 1 : MAX_ROUNDS;
    double tf[N_CONTENDERS][MAX_ROUNDS], tfb[N_CONTENDERS][MAX_ROUNDS];
    for (int r = -1; r < rounds; r++)
        for (int i = 0; i < N_CONTENDERS; i++)
            for (int what = 0; what < 2; what++) {
                const rec_embed_sched *plan = what ? k[i].plan_fb : k[i].plan_f;
                if ((i == C_NAIVE || i == C_BARE) && what) continue;
                if (i == C_BARE && !c->bare) continue;
                if (plan)
                    for (int f = 0; f < F; f++) rec_embed_set_sched(c->e, f, plan[f]);
                const double x = one_pass(c, i == C_NAIVE ? 2 : i == C_BARE ? 3 : what);
                if (r >= 0) (what ? tfb : tf)[i][r] = x;
            }
    for (int i = 0; i < N_CONTENDERS; i++) {
        k[i].f = i == C_BARE && !c->bare ? NAN : rec_median(tf[i], rounds);
        k[i].fb = i == C_NAIVE || i == C_BARE ? NAN : rec_median(tfb[i], rounds);
    }
}

/* The engine's current plan, into plan (F). */
static void save_plan(rec_embed *e, rec_embed_sched *plan) {
    for (int f = 0; f < rec_embed_tables(e); f++) plan[f] = rec_embed_get_sched(e, f);
}

/* ---- dump for the PyTorch peer ---------------------------------------------------------------- */


/* ---- one model ------------------------------------------------------------------------------ */

/* What choosing schedules per table could gain over the best uniform member bu, estimated
 * from the sweep: t (nu, F) is each table's thread time when member u runs every table (the
 * same calls for every u). The oracle gives each table its fastest member; bu's thread time
 * over the oracle's is returned (>= 1). Not a bound on wall time: a table's time is taken
 * under the interference of the uniform member it was measured with (a mixed plan pairs
 * tables differently), the minimum of nu noisy timings is a lucky one, and thread time
 * leaves out the idle tail of a pass. */
static double per_table_oracle(const double *t, int nu, int F, int bu) {
    double at_best = 0, oracle = 0;
    for (int f = 0; f < F; f++) {
        double lo = t[f];
        for (int u = 1; u < nu; u++) {
            const double x = t[(size_t)u * (size_t)F + (size_t)f];
            lo = x < lo ? x : lo;
        }
        oracle += lo;
        at_best += t[(size_t)bu * (size_t)F + (size_t)f];
    }
    return oracle > 0 ? at_best / oracle : NAN;
}

static double gbs(double bytes, double s) { return s > 0 ? bytes / s * 1e-9 : 0; }

static rec_status bench_model(const char *name, int B, int nb, int reps, int threads, double kaggle_scale,
                              int wide_ids, int64_t hit_ids, const char *dump_dir, int json, int bf16) {
    rec_rng rng;
    rec_rng_seed(&rng, 1000, (uint64_t)name[0]);
    bmodel m;
    if (bmodel_make(&m, name, B, kaggle_scale, &rng)) return rec_errorf(REC_EINVAL, "unknown model '%s'", name);
    rec_embed_config cfg = {m.F, m.rows, m.dims, REC_POOL_SUM, rec_sparse_opt_defaults(REC_SPARSE_SGD, 0.01f), B, threads,
                            1, 0, bf16, REC_ROUND_STOCHASTIC};
    const double es = bf16 ? 2.0 : 4.0; /* bytes of a stored table value */
    bench_ctx c = {0};
    c.nb = nb, c.reps = reps, c.threads = threads, c.lr = 0.01f;
    rec_status s = rec_embed_init(&c.e, &cfg);
    if (s) {
        bmodel_free(&m);
        return s;
    }
    c.b = calloc((size_t)nb, sizeof(rec_batch));
    for (int i = 0; !s && i < nb; i++) s = make_batch(&c.b[i], &m, &rng, wide_ids, hit_ids);
    const int W = rec_embed_out_width(c.e);
    /* As the trainer holds them (rec_alloc: 2 MiB pages for large blocks). */
    if (!s) s = rec_alloc((void **)&c.out, (size_t)B * (size_t)W * sizeof(float), "bench embedding outputs");
    if (!s) s = rec_alloc((void **)&c.dout, (size_t)B * (size_t)W * sizeof(float), "bench output gradients");
    double *tt = NULL; /* (uniform members, F) per-table thread time of each */
    if (!s)
        s = rec_alloc((void **)&tt, (size_t)REC_EMBED_MAX_CANDIDATES * (size_t)m.F * sizeof(double),
                      "bench per-table times");
    for (size_t i = 0; !s && i < (size_t)B * (size_t)W; i++) c.dout[i] = (float)(rec_rng_uniform(&rng) - 0.5) * 1e-3f;
    /* Traffic per batch in FBGEMM's definition. */
    double bytes = 0, ids = 0, tbytes = 0;
    for (int i = 0; i < nb; i++)
        for (int f = 0; f < m.F; f++) {
            const double L = (double)c.b[i].sparse[f].offsets[B];
            bytes += L * m.dims[f] * es + (double)B * m.dims[f] * 4.0;
            ids += L;
        }
    bytes /= nb, ids /= nb;
    for (int f = 0; f < m.F; f++) tbytes += (double)m.rows[f] * m.dims[f] * es;
    /* The distinct rows a batch touches (bytes): what it must bring from memory when the
     * tables do not stay cached from one batch to the next. */
    double uniq = 0;
    {
        size_t maxr = 1;
        for (int f = 0; f < m.F; f++) maxr = (size_t)m.rows[f] > maxr ? (size_t)m.rows[f] : maxr;
        uint8_t *seen = calloc(maxr, 1);
        for (int i = 0; !s && seen && i < nb; i++)
            for (int f = 0; f < m.F; f++) {
                const rec_jagged *j = &c.b[i].sparse[f];
                double u = 0;
                for (int64_t k = 0; k < j->offsets[B]; k++)
                    if (!seen[rec_jagged_id(j, k)]) seen[rec_jagged_id(j, k)] = 1, u++;
                for (int64_t k = 0; k < j->offsets[B]; k++) seen[rec_jagged_id(j, k)] = 0;
                uniq += u * m.dims[f] * es;
            }
        free(seen);
        uniq /= nb;
    }
    /* The bare copy's view of the tables. */
    const float **T = calloc((size_t)m.F, sizeof *T);
    const int32_t **idv = calloc((size_t)m.F, sizeof *idv);
    if (!s && (!T || !idv)) s = rec_errorf(REC_ENOMEM, "bench embed: out of memory for the bare copy's tables");
    for (int f = 0; !s && f < m.F; f++) T[f] = rec_embed_table(c.e, f);
    c.T = T, c.ids = idv;
    c.bare = !s && !bf16 && bare_copy_fits(c.b, nb, m.F, m.dims); /* the bare copy moves fp32 rows */
    if (!s && dump_dir && bmodel_dump(dump_dir, &m, c.b, nb, c.dout, W, c.lr))
        s = rec_errorf(REC_EIO, "%s: cannot write the dump for the PyTorch peer", dump_dir);
    double oracle = NAN, naive = 0, bare = NAN, def_f = 0, def_fb = 0, uni_f = INFINITY, uni_fb = INFINITY, tun_f = 0, tun_fb = 0,
           sep_f = 0, sep_fb = 0;
    char uni_name[96] = "", ubw_name[96] = "";
    rec_embed_tune_report rep = {0};
    if (!s) {
        fprintf(stderr, "bench embed %s: %d tables (%.2f GB), batch %d, %.2fM ids per batch\n", m.name, m.F, tbytes * 1e-9,
                B, ids * 1e-6);
        /* Selections first. Uniform forward members (default backward), then backward members
         * at the best forward. */
        rec_embed_sched cand[REC_EMBED_MAX_CANDIDATES], best = rec_embed_sched_default();
        rec_embed_sched all[REC_EMBED_MAX_CANDIDATES];
        const int nu = rec_embed_fwd_universe(all, REC_EMBED_MAX_CANDIDATES);
        /* Each table's thread time under each uniform member (profiled), for the oracle. */
        int bu = 0;
        rec_embed_profile(c.e, 1);
        for (int u = 0; u < nu; u++) {
            rec_embed_set_uniform(c.e, all[u]);
            rec_embed_profile_clear(c.e);
            const double t = time_pass(&c, 0);
            rec_embed_profile_read(c.e, tt + (size_t)u * (size_t)m.F, NULL, NULL, NULL);
            if (t < uni_f) uni_f = t, best = all[u], bu = u;
        }
        rec_embed_profile(c.e, 0);
        oracle = per_table_oracle(tt, nu, m.F, bu);
        rec_embed_set_uniform(c.e, best);
        const int nbw = rec_embed_bwd_universe(cand, REC_EMBED_MAX_CANDIDATES);
        rec_embed_sched bb = best;
        for (int u = 0; u < nbw; u++) {
            rec_embed_sched x = best;
            x.sort = cand[u].sort, x.bpf = cand[u].bpf;
            rec_embed_set_uniform(c.e, x);
            const double t = time_pass(&c, 1);
            if (t < uni_fb) uni_fb = t, bb = x;
        }
        rec_embed_sched_name(best, uni_name, sizeof uni_name);
        rec_embed_sched_name(bb, ubw_name, sizeof ubw_name);
        /* Tuned with interference, on the batches as a trainer would feed them. */
        rec_embed_set_uniform(c.e, rec_embed_sched_default());
        rec_embed_tune_opts to = {3};
        s = rec_embed_tune_begin(c.e, &to);
        const double tt0 = rec_now();
        for (int i = 0; !s && rec_embed_tuning(c.e); i++) {
            s = rec_embed_forward(c.e, &c.b[i % nb], 0, c.out);
            if (!s) s = rec_embed_backward_update(c.e, &c.b[i % nb], 0, c.dout, c.lr);
        }
        const double tune_s = rec_now() - tt0;
        rec_embed_tune_result(c.e, &rep);
        fprintf(stderr, "  tuned in %.1f s (%d + %d local rounds, global winners %d forward, %d backward)\n", tune_s,
                rep.fwd_rounds, rep.bwd_rounds, rep.winner, rep.winner_bwd);
        rec_embed_sched *plans;
        if (!s) s = rec_alloc((void **)&plans, (size_t)5 * (size_t)(m.F + 1) * sizeof *plans, "bench plans");
        if (!s) {
            rec_embed_sched *pdef = plans, *puf = pdef + m.F + 1, *pufb = puf + m.F + 1, *ptun = pufb + m.F + 1,
                            *psep = ptun + m.F + 1;
            save_plan(c.e, ptun);
            /* Separately tuned. */
            const rec_batch *bp[64];
            for (int i = 0; i < nb && i < 64; i++) bp[i] = &c.b[i];
            s = rec_embed_tune_separate(c.e, bp, nb < 64 ? nb : 64, 0, c.dout, c.lr);
            save_plan(c.e, psep);
            rec_embed_set_uniform(c.e, rec_embed_sched_default());
            save_plan(c.e, pdef);
            rec_embed_set_uniform(c.e, best);
            save_plan(c.e, puf);
            rec_embed_set_uniform(c.e, bb);
            save_plan(c.e, pufb);
            contender k[N_CONTENDERS] = {{NULL, NULL, 0, 0}, {pdef, pdef, 0, 0}, {puf, pufb, 0, 0}, {psep, psep, 0, 0},
                                         {ptun, ptun, 0, 0}};
            if (!s) s = check_baselines(&c);
            if (!s) time_contenders(&c, k, m.F);
            naive = k[C_NAIVE].f, bare = k[C_BARE].f, def_f = k[C_DEFAULT].f, def_fb = k[C_DEFAULT].fb, uni_f = k[C_UNIFORM].f;
            uni_fb = k[C_UNIFORM].fb, sep_f = k[C_SEPARATE].f, sep_fb = k[C_SEPARATE].fb, tun_f = k[C_TUNED].f;
            tun_fb = k[C_TUNED].fb;
            /* The default plan is a uniform schedule too (one universe member for every
             * table): where it times faster in turns than the member the sweep picked, it is
             * the best uniform figure (E, session 17: the sweep's table/fixed/pf48 took 23.1
             * ms in turns, the default 20.1). */
            char def_name[64];
            rec_embed_sched_name(rec_embed_sched_default(), def_name, sizeof def_name);
            if (def_f < uni_f) uni_f = def_f, snprintf(uni_name, sizeof uni_name, "%s (the default)", def_name);
            if (def_fb < uni_fb) uni_fb = def_fb, snprintf(ubw_name, sizeof ubw_name, "%s (the default)", def_name);
            rec_free(plans);
        }
    }
    if (!s) {
        printf("\nbench embed: model %s, %d %s tables, %.2f GB of tables, batch %d, %.2fM ids/batch, %d threads\n", m.name,
               m.F, bf16 ? "bf16" : "fp32", tbytes * 1e-9, B, ids * 1e-6, threads);
        printf("  %-34s %10s %10s %10s %12s\n", "", "fwd ms", "GB/s", "Mrows/s", "fwd+bwd ms");
        const struct { const char *what; double f, fb; } rows[] = {
            {"naive gather loop", naive, NAN},
            {"default plan", def_f, def_fb},
            {"best uniform schedule", uni_f, uni_fb},
            {"separately tuned", sep_f, sep_fb},
            {"tuned with interference", tun_f, tun_fb},
            {"bare row copy, no checks", bare, NAN},
        };
        for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
            if (isnan(rows[i].f)) continue; /* the bare copy of a multi-hot model */
            printf("  %-34s %10.3f %10.2f %10.1f", rows[i].what, rows[i].f * 1e3, gbs(bytes, rows[i].f),
                   ids / rows[i].f * 1e-6);
            if (isnan(rows[i].fb)) printf(" %12s\n", "-");
            else printf(" %12.3f\n", rows[i].fb * 1e3);
        }
        printf("  best uniform: forward %s; with backward %s\n", uni_name, ubw_name);
        printf("  distinct rows touched: %.1f MB per batch", uniq * 1e-6);
        if (c.bare) printf("; the bare row copy is %.2fx the naive loop, the tuned forward %.2fx the bare copy", naive / bare, tun_f / bare);
        printf("\n  tuned fwd vs naive %.2fx, vs best uniform %.2fx (fwd+bwd %.2fx), vs separately tuned %.2fx (fwd+bwd %.2fx)\n",
               naive / tun_f, uni_f / tun_f, uni_fb / tun_fb, sep_f / tun_f, sep_fb / tun_fb);
        printf("  per-table oracle (each table at its fastest uniform member, thread time): %.2fx best uniform\n",
               oracle);
        if (json)
            printf("{\"model\": \"%s\", \"precision\": \"%s\", \"tables\": %d, \"batch\": %d, \"ids_per_batch\": %s, \"bytes_per_batch\": %s, "
                   "\"threads\": %d, \"naive_fwd_s\": %s, \"default_fwd_s\": %s, \"default_fwdbwd_s\": %s, "
                   "\"uniform_fwd_s\": %s, \"uniform_fwdbwd_s\": %s, \"separate_fwd_s\": %s, \"separate_fwdbwd_s\": %s, "
                   "\"tuned_fwd_s\": %s, \"tuned_fwdbwd_s\": %s, \"gb_per_s\": %s, \"rows_per_s\": %s, "
                   "\"bare_copy_fwd_s\": %s, \"distinct_bytes_per_batch\": %s, \"oracle_fwd_gain\": %s, \"best_uniform\": \"%s\"}\n",
                   m.name, bf16 ? "bf16" : "fp32", m.F, B, cli_jnum("%.0f", ids), cli_jnum("%.0f", bytes), threads, cli_jnum("%.6g", naive),
                   cli_jnum("%.6g", def_f), cli_jnum("%.6g", def_fb), cli_jnum("%.6g", uni_f), cli_jnum("%.6g", uni_fb),
                   cli_jnum("%.6g", sep_f), cli_jnum("%.6g", sep_fb), cli_jnum("%.6g", tun_f), cli_jnum("%.6g", tun_fb),
                   cli_jnum("%.3f", gbs(bytes, tun_f)), cli_jnum("%.0f", ids / tun_f), cli_jnum("%.6g", bare),
                   cli_jnum("%.0f", uniq), cli_jnum("%.4f", oracle), ubw_name);
    }
    for (int i = 0; c.b && i < nb; i++) rec_batch_free(&c.b[i]);
    free(c.b), rec_free(c.out), rec_free(c.dout), rec_free(tt);
    free(T), free(idv);
    rec_embed_free(c.e);
    bmodel_free(&m);
    return s;
}

int bench_embed(int argc, char **argv) {
    const char *cmd = "bench embed", *model = "all", *dump_dir = NULL, *device = "cpu", *plan_out = NULL, *precision = "fp32";
    int batch = 0, nb = 4, reps = 3, threads = rec_cpu_count(), json = 0, wide_ids = 0;
    int64_t hit_ids = 0;
    double kscale = 1.0;
    int ceiling_mib = 1024;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = CLI_OK;
        if (cli_is_help(a)) { fputs(USAGE, stdout); return CLI_OK; }
        else if (!strcmp(a, "--model")) rc = cli_str(cmd, argc, argv, &i, &model);
        else if (!strcmp(a, "--batch")) rc = cli_int(cmd, argc, argv, &i, 1, 1 << 16, &batch);
        else if (!strcmp(a, "--batches")) rc = cli_int(cmd, argc, argv, &i, 1, 256, &nb);
        else if (!strcmp(a, "--reps")) rc = cli_int(cmd, argc, argv, &i, 1, 31, &reps);
        else if (!strcmp(a, "--threads")) rc = cli_int(cmd, argc, argv, &i, 1, 256, &threads);
        else if (!strcmp(a, "--kaggle-scale")) rc = cli_double(cmd, argc, argv, &i, 1e-6, 1.0, &kscale);
        else if (!strcmp(a, "--dump")) rc = cli_str(cmd, argc, argv, &i, &dump_dir);
        else if (!strcmp(a, "--ceiling-mib")) rc = cli_int(cmd, argc, argv, &i, 1, 1 << 16, &ceiling_mib);
        else if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--device")) rc = cli_str(cmd, argc, argv, &i, &device);
        else if (!strcmp(a, "--plan-out")) rc = cli_str(cmd, argc, argv, &i, &plan_out);
        else if (!strcmp(a, "--precision")) rc = cli_str(cmd, argc, argv, &i, &precision);
        else if (!strcmp(a, "--wide-ids")) wide_ids = 1;
        else if (!strcmp(a, "--hit-ids")) rc = cli_i64(cmd, argc, argv, &i, 1, (int64_t)1 << 40, &hit_ids);
        else rc = cli_usage(cmd, "unknown option '%s'", a);
        if (rc) return rc;
    }
    static const char *const ALL[] = {"kaggle", "A", "B", "C", "D", "E"};
    int picked = !strcmp(model, "all");
    for (size_t i = 0; i < sizeof ALL / sizeof ALL[0]; i++) picked |= !strcmp(model, ALL[i]);
    if (!picked) return cli_usage(cmd, "unknown model '%s' (want kaggle, A, B, C, D, E or all)", model);
    if (strcmp(device, "cpu") && strcmp(device, "cuda")) return cli_usage(cmd, "--device %s: want cpu or cuda", device);
    rec_guard g = {0};
    rec_guard_dir(&g, "--dump", dump_dir, bmodel_dump_files);
    rec_guard_out(&g, "--plan-out", plan_out);
    if (rec_guard_check(&g)) return cli_fail(cmd, REC_EINVAL);
    if (plan_out && strcmp(device, "cuda")) return cli_usage(cmd, "--plan-out is for --device cuda");
    if (strcmp(precision, "fp32") && strcmp(precision, "bf16")) return cli_usage(cmd, "--precision %s: want fp32 or bf16", precision);
    const int bf16 = !strcmp(precision, "bf16");
    if (bf16 && !strcmp(device, "cuda")) return cli_usage(cmd, "--precision bf16 (bf16 tables) is for --device cpu");
    if (bf16 && dump_dir) return cli_usage(cmd, "--dump writes fp32 tables for the peers; give it without --precision bf16");
    if (!strcmp(device, "cuda")) return bench_embed_cuda(cmd, model, batch, nb, reps, kscale, dump_dir, plan_out, json);
    const size_t cbytes = (size_t)ceiling_mib << 20;
    const double c_naive = gather_ceiling(threads, cbytes, 0), c_pf = gather_ceiling(threads, cbytes, 1);
    const double rd = read_bandwidth(threads, cbytes);
    printf("machine: random 64-byte row gather over %d MiB, %d threads: %.1fM rows/s naive, %.1fM rows/s with prefetch; "
           "sequential read %.1f GB/s\n",
           ceiling_mib, threads, c_naive * 1e-6, c_pf * 1e-6, rd);
    if (json)
        printf("{\"gather_ceiling_rows_per_s\": %s, \"gather_prefetch_rows_per_s\": %s, \"read_gbps\": %s}\n",
               cli_jnum("%.0f", c_naive), cli_jnum("%.0f", c_pf), cli_jnum("%.2f", rd));
    for (size_t i = 0; i < sizeof ALL / sizeof ALL[0]; i++) {
        if (strcmp(model, "all") && strcmp(model, ALL[i])) continue;
        const int B = batch ? batch : i == 0 ? 2048 : 512;
        rec_status s = bench_model(ALL[i], B, nb, reps, threads, kscale, wide_ids, hit_ids, dump_dir, json, bf16);
        if (s) return cli_fail(cmd, s);
    }
    return CLI_OK;
}
