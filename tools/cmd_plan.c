/* rectrain plan: sharding plans for N ranks (plan.h), one to save or all of them simulated. */
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "rectrain/core.h"
#include "rectrain/plan.h"
#include "rectrain/prep.h"
#include "rectrain/train.h"

static const char USAGE[] =
    "usage: rectrain plan --data FILES --ranks N [--kind K] [--out PLAN.json] [options]\n"
    "       rectrain plan --data FILES --simulate --ranks 8,64,1024 [--torchrec DIR] [--chart PREFIX]\n"
    "       rectrain plan --data FILES --score PLAN.json --ranks N [options]\n"
    "\n"
    "Places the model's embedding rows on N ranks (mpirun -np N rectrain train --plan-shards\n"
    "PLAN.json) from the access profile of sampled global batches of the data, and prints what\n"
    "each rank is predicted to hold and do per step. --simulate builds every kind of plan for\n"
    "each rank count and compares them (no ranks needed: thousands are fine). --score predicts a\n"
    "plan file (rectrain's, or TorchRec's: dev/torchrec_plan.py) beside OPER's on the same\n"
    "sampled batches.\n"
    "\n"
    "  --data FILES       data to profile (.rshard, or .tsv or .rraw with --spec), as for train\n"
    "  --spec FILE        prep spec for .tsv data; also names the tables for TorchRec plans that\n"
    "                     use the spec's table names instead of t0..tK-1\n"
    "  --config FILE      model config (default: the small DLRM); its embedding dim, optimizer\n"
    "                     and batch size\n"
    "  --batch B          global batch size (default: the config's)\n"
    "  --ranks LIST       rank counts (one without --simulate)\n"
    "  --kind K           oper (default), greedy, table, row, column or replicated\n"
    "  --out FILE         save the plan (JSON) for train --plan-shards\n"
    "  --simulate         build and compare every kind of plan for each rank count\n"
    "  --score FILE       predict this plan (rectrain plan --out, or TorchRec's {\"table_plans\"})\n"
    "                     beside OPER's, on the same sampled batches\n"
    "  --torchrec DIR     with --simulate: one more row per rank count N, TorchRec's plan from\n"
    "                     DIR/torchrec-N.json (dev/torchrec_plan.py --ranks N --out DIR/torchrec-N.json)\n"
    "  --chart PREFIX     with --simulate: PREFIX-N.png per rank count, one strip per plan (top to\n"
    "                     bottom: replicated, table, row, column, greedy, oper), a bar per rank\n"
    "                     of its predicted step time on one scale (bars beyond it, replicated's,\n"
    "                     are cut, black-topped); the grey line is the lower bound (see --show)\n"
    "  --sample B         global batches profiled (default 16)\n"
    "  --seed S           order the sampled batches are drawn in (default 1)\n"
    "  --bw-p2p GBPS      a rank's point-to-point bandwidth for row fetches, GB/s (default 1)\n"
    "  --bw-ar GBPS       a ring all-reduce's bandwidth, GB/s (default 4)\n"
    "  --lookup-ns NS     a local lookup of one row, ns (default 23); the executor: an owner's\n"
    "                     sum and update of a gradient record\n"
    "  --slice-ns NS      the executor's work per id of a rank's own slice (default 0: the same\n"
    "                     under every plan)\n"
    "  --get-ns NS        per row fetched from another rank, beyond its bytes (default 0)\n"
    "  --ranks-per-core R ranks sharing a core: the compute terms scale by R (default 1)\n"
    "                     (train under mpirun prints the --slice-ns, --lookup-ns and --get-ns\n"
    "                     it measured)\n"
    "  --measure          measure the cache terms on this machine (~1 s): a row from memory\n"
    "                     against one from cache, the cache's size, a replicated row's upkeep\n"
    "  --miss-ns NS       an owner's record of a row not in its cache, ns more (default 0: off)\n"
    "  --cache-mb MB      the cache a rank's rows share, MB; which rows it holds is Che's\n"
    "                     approximation of an LRU over their profiled access (default 0: off)\n"
    "  --rep-row-ns NS    a replicated row's upkeep per step on every rank (default 0)\n"
    "  --skew-ms MS       the wait for the slowest rank a step, beyond the plan's imbalance\n"
    "                     (train's step_ms.skew on a balanced plan; default 0)\n"
    "  --mem-gb GB        a rank's memory for rows and optimizer state, in GB of 10^9 bytes, as\n"
    "                     every size here (default 64)\n"
    "  --threshold T      OPER's initial partition threshold (default 0.001)\n";

enum { MAX_COUNTS = 16 };

typedef struct plan_args {
    const char *spec, *config, *out, *chart, *score, *torchrec;
    cli_path_list data;
    int ranks[MAX_COUNTS], n_ranks, kind, simulate;
    int64_t batch, sample;
    uint64_t seed;
    rec_plan_hw hw;
    int measure;                      /* --measure: the cache terms measured here */
    double cache_mb, miss_ns, rep_ns; /* given (>= 0), over what --measure found */
} plan_args;

static int parse_ranks(const char *cmd, int argc, char **argv, int *i, plan_args *a) {
    const char *v;
    int rc = cli_str(cmd, argc, argv, i, &v);
    for (const char *p = v; !rc && *p;) {
        char *end;
        const long n = strtol(p, &end, 10);
        if (end == p || n < 1 || n > (1 << 20) || (*end && *end != ','))
            return cli_usage(cmd, "--ranks needs rank counts from 1 to %d, comma-separated (got '%s')", 1 << 20, v);
        if (a->n_ranks == MAX_COUNTS) return cli_usage(cmd, "--ranks takes at most %d counts", MAX_COUNTS);
        a->ranks[a->n_ranks++] = (int)n;
        p = *end ? end + 1 : end;
    }
    return rc;
}

static double maxv(const rec_plan_cost *c, int N, size_t off, double *mean) {
    double mx = 0, sum = 0;
    for (int j = 0; j < N; j++) {
        const double x = *(const double *)((const char *)&c[j] + off);
        mx = x > mx ? x : mx;
        sum += x;
    }
    *mean = sum / N;
    return mx;
}

/* The chart of N ranks: PREFIX-N.png. */
static void chart_path(const char *prefix, int N, char *buf, size_t cap) { snprintf(buf, cap, "%s-%d.png", prefix, N); }

/* PREFIX-N.png: a strip per plan, a bar per rank (see USAGE). */
static rec_status chart(const char *prefix, int N, rec_plan *const *plans, double lb) {
    enum { STRIP = 90, GAP = 6 };
    const int bar = N >= 512 ? 1 : N >= 128 ? 2 : N >= 32 ? 6 : 24;
    const int W = N * bar + 8, H = REC_PLAN_KINDS * (STRIP + GAP);
    unsigned char *img = malloc((size_t)W * H * 3);
    if (!img) return rec_errorf(REC_ENOMEM, "out of memory for the chart");
    memset(img, 255, (size_t)W * H * 3);
    double top = lb;
    for (int k = REC_PLAN_TABLE; k < REC_PLAN_KINDS; k++) { /* replicated, far above, is clipped */
        if (!plans[k]) continue;
        for (int j = 0; j < N; j++) top = fmax(top, rec_plan_costs(plans[k])[j].seconds);
    }
    static const unsigned char COL[REC_PLAN_KINDS][3] = {{140, 140, 140}, {214, 96, 77}, {244, 165, 130},
                                                          {146, 197, 222}, {67, 147, 195}, {27, 120, 55}};
    for (int k = 0; k < REC_PLAN_KINDS; k++) {
        const int y0 = k * (STRIP + GAP);
        for (int x = 0; x < W; x++) { /* baseline */
            unsigned char *px = img + ((size_t)(y0 + STRIP - 1) * W + x) * 3;
            px[0] = px[1] = px[2] = 0;
        }
        if (!plans[k]) continue;
        for (int j = 0; j < N; j++) {
            const double t = rec_plan_costs(plans[k])[j].seconds;
            const int hgt = top > 0 ? (int)lround(fmin(t, top) / top * (STRIP - 2)) : 0;
            for (int y = STRIP - 1 - hgt; y < STRIP - 1; y++)
                for (int x = 4 + j * bar; x < 4 + (j + 1) * bar - (bar > 2); x++)
                    memcpy(img + ((size_t)(y0 + y) * W + x) * 3, y < 3 && t > top ? (const unsigned char[3]){0, 0, 0} : COL[k], 3);
        }
        const int yl = y0 + STRIP - 1 - (top > 0 ? (int)lround(lb / top * (STRIP - 2)) : 0);
        for (int x = 0; x < W; x += 2) memset(img + ((size_t)yl * W + x) * 3, 110, 3);
    }
    char path[PATH_MAX];
    chart_path(prefix, N, path, sizeof path);
    rec_status s = rec_png_write(path, W, H, img);
    free(img);
    if (!s) fprintf(stderr, "plan: chart of %d ranks written to %s\n", N, path);
    return s;
}

static void print_plan(const rec_plan *p) {
    const int N = rec_plan_ranks(p);
    const rec_plan_cost *c = rec_plan_costs(p);
    printf("plan %s for %d rank%s", rec_plan_kind_name(rec_plan_get_kind(p)), N, rec_s(N));
    if (rec_plan_threshold(p) > 0) printf(" (threshold %.3g)", rec_plan_threshold(p));
    printf(": predicted per rank per step\n");
    printf("%6s %12s %12s %12s %12s %12s\n", "rank", "memory MB", "lookups", "sent MB", "recv MB", "embed ms");
    for (int j = 0; j < N && j < 64; j++)
        printf("%6d %12.2f %12.0f %12.3f %12.3f %12.3f\n", j, c[j].mem_bytes / 1e6, c[j].lookups, c[j].sent / 1e6,
               c[j].recv / 1e6, c[j].seconds * 1e3);
    if (N > 64) printf("   ... (%d more ranks in the plan file's \"predicted\")\n", N - 64);
    printf("lower bound (lookups and each row's cheaper transfer, fetch or replica, spread evenly): %.3f ms\n",
           rec_plan_lower_bound(p) * 1e3);
}

/* One row of the comparison table: the plan's max and max/mean over ranks (see USAGE). */
static void print_row(const char *name, const rec_plan *p, int N) {
    const rec_plan_cost *c = rec_plan_costs(p);
    double ml, mb, mm, mt;
    const double xl = maxv(c, N, offsetof(rec_plan_cost, lookups), &ml);
    const double xb = maxv(c, N, offsetof(rec_plan_cost, sent), &mb);
    const double xm = maxv(c, N, offsetof(rec_plan_cost, mem_bytes), &mm);
    const double xt = maxv(c, N, offsetof(rec_plan_cost, seconds), &mt);
    const double lb = rec_plan_lower_bound(p);
    printf("%-11s %10.0f %8.2f %11.3f %11.2f %11.1f %11.2f %9.3f %10.2f\n", name, xl, ml > 0 ? xl / ml : 1.0, xb / 1e6,
           mb > 0 ? xb / mb : 1.0, xm / 1e6, mm > 0 ? xm / mm : 1.0, xt * 1e3, lb > 0 ? xt / lb : 0.0);
}

static double max_step(const rec_plan *p) {
    double mt;
    return maxv(rec_plan_costs(p), rec_plan_ranks(p), offsetof(rec_plan_cost, seconds), &mt);
}

/* Loads the plan file `path` for model m and predicts it on prof: *out, or NULL with the
 * status (its message names the file). A file that does not exist is *out = NULL, REC_OK,
 * when `optional`. */
static rec_status load_scored(rec_plan **out, const char *path, const rec_plan_model *m, const rec_plan_profile *prof,
                              const rec_plan_hw *hw, int optional) {
    *out = NULL;
    FILE *f = optional ? fopen(path, "r") : NULL;
    if (optional && !f) return REC_OK;
    if (f) fclose(f);
    REC_TRY(rec_plan_load(out, path, m));
    rec_status s = rec_plan_predict(*out, prof, hw);
    if (s) {
        rec_plan_free(*out);
        *out = NULL;
    }
    return s;
}

/* N ranks: every kind built from one profile of the sampled batches (or, with --score, OPER
 * alone), then the plan files scored on that same profile: --score's, and with --torchrec
 * DIR the file DIR/torchrec-N.json where there is one. */
static rec_status simulate_one(const plan_args *a, rec_dataset *d, int64_t rows, const rec_plan_model *base, int N) {
    rec_plan_model m = *base;
    m.ranks = N;
    rec_plan_profile *prof = NULL;
    REC_TRY(rec_plan_profile_init(&prof, &m));
    rec_status s = rec_plan_profile_data(prof, d, rows, a->sample, a->seed);
    rec_plan *plans[REC_PLAN_KINDS] = {0}, *scored = NULL, *tr = NULL;
    char tr_path[PATH_MAX] = "";
    double lb = 0;
    /* the plan files first: one refused leaves no table half printed */
    if (!s && a->score) s = load_scored(&scored, a->score, &m, prof, &a->hw, 0);
    if (!s && a->torchrec) {
        snprintf(tr_path, sizeof tr_path, "%s/torchrec-%d.json", a->torchrec, N);
        s = load_scored(&tr, tr_path, &m, prof, &a->hw, 1);
    }
    if (!s) printf("\n%d ranks, global batch %lld (%lld per rank), %lld sampled batch%s:\n", N, (long long)m.batch,
           (long long)(m.batch / N), (long long)rec_plan_profile_batches(prof), rec_plan_profile_batches(prof) == 1 ? "" : "es");
    if (!s)
        printf("%-11s %10s %8s %11s %11s %11s %11s %9s %10s\n", "plan", "lookups", "max/mean", "sent MB", "max/mean",
               "memory MB", "max/mean", "step ms", "x lower");
    for (int k = 0; k < REC_PLAN_KINDS && !s; k++) {
        if (a->score && k != REC_PLAN_OPER) continue;
        rec_status e = rec_plan_build(&plans[k], (rec_plan_kind)k, prof, &a->hw);
        if (e == REC_EINVAL) { /* does not fit: say so and go on */
            printf("%-11s %s\n", rec_plan_kind_name((rec_plan_kind)k), rec_errmsg());
            continue;
        }
        if ((s = e)) break;
        lb = rec_plan_lower_bound(plans[k]);
        print_row(rec_plan_kind_name((rec_plan_kind)k), plans[k], N);
    }
    if (!s && scored) print_row(rec_plan_kind_name(rec_plan_get_kind(scored)), scored, N);
    if (!s && a->torchrec && tr) print_row("torchrec", tr, N);
    else if (!s && a->torchrec) printf("%-11s no %s (dev/torchrec_plan.py --ranks %d writes it)\n", "torchrec", tr_path, N);
    if (!s && !a->score) {
        double best = INFINITY;
        for (int k = REC_PLAN_TABLE; k <= REC_PLAN_COLUMN; k++)
            if (plans[k]) best = fmin(best, max_step(plans[k]));
        if (plans[REC_PLAN_OPER]) {
            const double o = max_step(plans[REC_PLAN_OPER]);
            printf("oper: %.2fx lower max step than the best of table/row/column; %.2fx the lower bound (%.3f ms)\n",
                   o > 0 ? best / o : 0.0, lb > 0 ? o / lb : 0.0, lb * 1e3);
        }
    }
    const rec_plan *other = scored ? scored : tr;
    if (!s && other && plans[REC_PLAN_OPER]) {
        const double o = max_step(plans[REC_PLAN_OPER]), t = max_step(other);
        printf("oper: %.2fx lower max step than %s (%s: %.3f ms, oper %.3f ms)\n", o > 0 ? t / o : 0.0,
               scored ? a->score : tr_path, rec_plan_kind_name(rec_plan_get_kind(other)), t * 1e3, o * 1e3);
    }
    if (!s && a->chart) s = chart(a->chart, N, plans, lb);
    for (int k = 0; k < REC_PLAN_KINDS; k++) rec_plan_free(plans[k]);
    rec_plan_free(scored);
    rec_plan_free(tr);
    rec_plan_profile_free(prof);
    return s;
}

static rec_status run(plan_args *a) {
    rec_dataset_opts o = {0};
    o.path = a->data.v[0];
    o.paths = a->data.v;
    o.n_paths = a->data.n;
    o.spec_path = a->spec;
    o.tsv.has_label = -1;
    o.prep_threads = 1;
    rec_dataset *d = NULL;
    rec_model_config cfg;
    rec_model *model = NULL;
    REC_TRY(rec_dataset_open(&d, &o));
    rec_status s;
    if (a->config) s = rec_model_config_load(&cfg, a->config);
    else rec_model_config_default(&cfg, REC_MODEL_DLRM), s = REC_OK;
    if (s) {
        rec_dataset_close(d);
        return s;
    }
    if (a->batch > 0) cfg.batch_size = a->batch;
    int64_t rows = 0;
    s = rec_model_config_bind(&cfg, rec_dataset_n_dense(d), rec_dataset_n_sparse(d), rec_dataset_table_rows(d), a->data.v[0]);
    if (!s) s = rec_dataset_rows(d, &rows);
    if (!s) s = rec_model_init_sharded(&model, &cfg, 1, 1);
    if (!s && a->measure) {
        rec_plan_measure_units(&a->hw, cfg.emb_dim, cfg.sparse_opt.kind, a->ranks[0]);
        fprintf(stderr, "plan: measured here: a row from memory %.1f ns more than from a %.2f MB cache; %.2f ns a "
                "replicated row (--miss-ns, --cache-mb, --rep-row-ns)\n", a->hw.miss_s * 1e9, a->hw.cache_bytes / 1e6,
                a->hw.rep_row_s * 1e9);
    }
    if (a->cache_mb >= 0) a->hw.cache_bytes = a->cache_mb * 1e6;
    if (a->miss_ns >= 0) a->hw.miss_s = a->miss_ns * 1e-9;
    if (a->rep_ns >= 0) a->hw.rep_row_s = a->rep_ns * 1e-9;
    rec_plan_model m = {1, cfg.n_sparse, cfg.table_rows, cfg.emb_dim, cfg.sparse_opt.kind, cfg.batch_size,
                        model ? rec_model_n_dense_params(model) : 0, NULL,
                        cfg.embed_precision == REC_PRECISION_BF16};
    /* the tables' names, by which a TorchRec plan may call them: the spec's */
    const char **names = NULL;
    rec_spec *spec = NULL;
    if (!s && a->spec) s = rec_spec_load(&spec, a->spec);
    if (!s && spec && spec->n_sparse == m.tables) {
        names = calloc((size_t)m.tables + 1, sizeof *names);
        for (int f = 0; names && f < m.tables; f++) names[f] = rec_spec_table_name(spec, f);
        m.names = names;
    }
    for (int i = 0; i < a->n_ranks && !s && (a->simulate || a->score); i++) s = simulate_one(a, d, rows, &m, a->ranks[i]);
    if (!s && !a->simulate && !a->score) {
        m.ranks = a->ranks[0];
        rec_plan_profile *prof = NULL;
        rec_plan *p = NULL;
        s = rec_plan_profile_init(&prof, &m);
        if (!s) s = rec_plan_profile_data(prof, d, rows, a->sample, a->seed);
        if (!s) s = rec_plan_build(&p, (rec_plan_kind)a->kind, prof, &a->hw);
        if (!s) print_plan(p);
        if (!s && a->out) s = rec_plan_save(p, a->out);
        if (!s && a->out) fprintf(stderr, "plan: written to %s\n", a->out);
        rec_plan_free(p);
        rec_plan_profile_free(prof);
    }
    free(names);
    rec_spec_free(spec);
    rec_model_free(model);
    rec_model_config_free(&cfg);
    rec_dataset_close(d);
    return s;
}

int cmd_plan(int argc, char **argv) {
    const char *cmd = "plan";
    plan_args a = {0};
    a.kind = REC_PLAN_OPER;
    a.sample = 16;
    a.seed = 1;
    rec_plan_hw_default(&a.hw);
    a.cache_mb = a.miss_ns = a.rep_ns = -1;
    double skew_ms = 0;
    int rc = CLI_OK;
    double gb = a.hw.mem_bytes / 1e9, p2p = a.hw.bw_p2p / 1e9, ar = a.hw.bw_ar / 1e9, ns = a.hw.lookup_s * 1e9,
           slice_ns = 0, get_ns = 0;
    for (int i = 1; i < argc && !rc; i++) {
        const char *x = argv[i];
        if (cli_is_help(x)) { fputs(USAGE, stdout); cli_paths_free(&a.data); return CLI_OK; }
        else if (!strcmp(x, "--data")) rc = cli_paths(cmd, argc, argv, &i, &a.data);
        else if (!strcmp(x, "--spec")) rc = cli_str(cmd, argc, argv, &i, &a.spec);
        else if (!strcmp(x, "--config")) rc = cli_str(cmd, argc, argv, &i, &a.config);
        else if (!strcmp(x, "--out")) rc = cli_str(cmd, argc, argv, &i, &a.out);
        else if (!strcmp(x, "--chart")) rc = cli_str(cmd, argc, argv, &i, &a.chart);
        else if (!strcmp(x, "--score")) rc = cli_str(cmd, argc, argv, &i, &a.score);
        else if (!strcmp(x, "--torchrec")) rc = cli_str(cmd, argc, argv, &i, &a.torchrec);
        else if (!strcmp(x, "--ranks")) rc = parse_ranks(cmd, argc, argv, &i, &a);
        else if (!strcmp(x, "--batch")) rc = cli_i64(cmd, argc, argv, &i, 1, 1 << 24, &a.batch);
        else if (!strcmp(x, "--sample")) rc = cli_i64(cmd, argc, argv, &i, 1, 1 << 20, &a.sample);
        else if (!strcmp(x, "--seed")) {
            int64_t v;
            rc = cli_i64(cmd, argc, argv, &i, 0, INT64_MAX, &v);
            a.seed = (uint64_t)v;
        } else if (!strcmp(x, "--kind")) {
            const char *v;
            rc = cli_str(cmd, argc, argv, &i, &v);
            if (!rc && !strcmp(v, "torchrec"))
                rc = cli_usage(cmd, "--kind torchrec: TorchRec's planner makes these (dev/torchrec_plan.py); score its "
                               "file with --score");
            else if (!rc && ((a.kind = rec_plan_kind_from_name(v)) < 0 || a.kind >= REC_PLAN_KINDS))
                rc = cli_usage(cmd, "--kind must be oper, greedy, table, row, column or replicated (got '%s')", v);
        } else if (!strcmp(x, "--simulate")) a.simulate = 1;
        else if (!strcmp(x, "--bw-p2p")) rc = cli_double(cmd, argc, argv, &i, 1e-6, 1e6, &p2p);
        else if (!strcmp(x, "--bw-ar")) rc = cli_double(cmd, argc, argv, &i, 1e-6, 1e6, &ar);
        else if (!strcmp(x, "--lookup-ns")) rc = cli_double(cmd, argc, argv, &i, 1e-3, 1e9, &ns);
        else if (!strcmp(x, "--slice-ns")) rc = cli_double(cmd, argc, argv, &i, 0, 1e9, &slice_ns);
        else if (!strcmp(x, "--get-ns")) rc = cli_double(cmd, argc, argv, &i, 0, 1e9, &get_ns);
        else if (!strcmp(x, "--miss-ns")) rc = cli_double(cmd, argc, argv, &i, 0, 1e9, &a.miss_ns);
        else if (!strcmp(x, "--cache-mb")) rc = cli_double(cmd, argc, argv, &i, 0, 1e9, &a.cache_mb);
        else if (!strcmp(x, "--rep-row-ns")) rc = cli_double(cmd, argc, argv, &i, 0, 1e9, &a.rep_ns);
        else if (!strcmp(x, "--skew-ms")) rc = cli_double(cmd, argc, argv, &i, 0, 1e6, &skew_ms);
        else if (!strcmp(x, "--measure")) a.measure = 1;
        else if (!strcmp(x, "--ranks-per-core")) rc = cli_double(cmd, argc, argv, &i, 1, 1e6, &a.hw.ranks_per_core);
        else if (!strcmp(x, "--mem-gb")) rc = cli_double(cmd, argc, argv, &i, 1e-6, 1e9, &gb);
        else if (!strcmp(x, "--threshold")) rc = cli_double(cmd, argc, argv, &i, 1e-9, 1, &a.hw.threshold);
        else rc = cli_usage(cmd, "unknown option '%s'", x);
    }
    if (!rc && (!a.data.n || !a.n_ranks)) rc = cli_usage(cmd, "--data and --ranks are required");
    if (!rc && !a.simulate && a.n_ranks > 1) rc = cli_usage(cmd, "one --ranks count, or --simulate to compare several");
    if (!rc && a.score && (a.simulate || a.out))
        rc = cli_usage(cmd, "--score predicts the given plan beside OPER's: drop --%s", a.simulate ? "simulate" : "out");
    if (!rc && a.torchrec && !a.simulate) rc = cli_usage(cmd, "--torchrec goes with --simulate (or --score FILE alone)");
    if (!rc && a.simulate && a.out) rc = cli_usage(cmd, "--out saves one plan: drop --simulate, or --out");
    if (!rc && !a.simulate && a.chart) rc = cli_usage(cmd, "--chart goes with --simulate");
    if (rc) {
        cli_paths_free(&a.data);
        return rc;
    }
    rec_guard g = {0};
    rec_guard_ins(&g, "--data", a.data.v, a.data.n);
    rec_guard_in(&g, "--spec", a.spec);
    rec_guard_in(&g, "--config", a.config);
    rec_guard_in(&g, "--score", a.score);
    rec_guard_out(&g, "--out", a.out);
    char charts[MAX_COUNTS][PATH_MAX];
    for (int k = 0; a.chart && k < a.n_ranks; k++) {
        chart_path(a.chart, a.ranks[k], charts[k], sizeof charts[k]);
        rec_guard_out(&g, "--chart", charts[k]);
    }
    rec_status s = rec_guard_check(&g);
    if (s) {
        cli_paths_free(&a.data);
        return cli_fail(cmd, s);
    }
    a.hw.mem_bytes = gb * 1e9;
    a.hw.bw_p2p = p2p * 1e9;
    a.hw.bw_ar = ar * 1e9;
    a.hw.lookup_s = ns * 1e-9;
    a.hw.slice_s = slice_ns * 1e-9;
    a.hw.get_s = get_ns * 1e-9;
    a.hw.skew_s = skew_ms * 1e-3;
    s = run(&a);
    cli_paths_free(&a.data);
    return s ? cli_fail(cmd, s) : CLI_OK;
}
