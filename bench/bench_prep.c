/* rectrain bench prep: raw Criteo TSV text in memory -> parsed, preprocessed Batches, with a
 * spec (default configs/criteo_standard.json), at 1..T threads.
 *
 * What is timed: rec_prep_engine_run over the whole text (tokenising, field decoding, every
 * operator of the spec, writing the Batch), chunked as the streaming reader chunks files.
 * Not timed: generating the text, a categorify counting pass (reported on its own line).
 * MB/s counts input TSV bytes. The machine's copy bandwidth (memcpy of 256 MiB) is printed
 * beside it as the ceiling any single pass over the bytes could reach. With --device cuda the
 * GPU executor runs the ops (the CPUs parse) at all CPUs, in the same run, on the last line.
 * With --parsed the text is parsed into raw columns first, untimed, and only the operators
 * are timed (rec_prep_engine_run_raw; on the GPU, copies both ways included): RAP's setting,
 * rows the loader has parsed (.rraw). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"
#include "rectrain/core.h"
#include "rectrain/cuda.h"
#include "rectrain/io.h"
#include "rectrain/prep.h"
#include "../src/prep/gexec.h"

static const char USAGE[] =
    "usage: rectrain bench prep [--spec SPEC.json] [--in FILE.tsv] [--rows N] [--threads T]\n"
    "                           [--reps R] [--scale F] [--multi-hot] [--device cuda]\n"
    "                           [--parsed] [--latencies FILE.tsv] [--host-cost] [--json]\n"
    "\n"
    "Times TSV text -> Batch (parse + every op of SPEC) in memory. Without --in it generates\n"
    "N rows (default 1M) with `rectrain gen` semantics (seed 1). Runs 1..T threads (default:\n"
    "1 and all CPUs) and prints MB/s, rows/s and the speed-up beside the measured copy\n"
    "bandwidth. Default spec: configs/criteo_standard.json (from the source tree). With\n"
    "--device cuda a last line times the GPU executor (ops on the GPU, parsing on all CPUs).\n"
    "--parsed parses the text into raw columns first, untimed, and times the ops alone (on the\n"
    "GPU with the copies to it and back), as on rows read from a .rraw. With --device cuda,\n"
    "--latencies times each fused kernel of the plan (and of the plan sharded to 8 and to 1 op a\n"
    "kernel) alone on blocks of 1k-32k rows, writes them to FILE.tsv, and scores the latency\n"
    "predictor trained on 90% of them on the rest (RAP §5.2, Table 5). --host-cost times the\n"
    "GPU executor's host side alone (no GPU needed): blocks of 32768 parsed rows through a\n"
    "backend whose kernels and copies cost nothing.\n";

/* The first `max_lines` lines of the text parsed into raw (initialised here). */
static rec_status parse_head(const char *text, size_t len, int has_label, int64_t max_lines, rec_raw_block *raw) {
    int64_t lines = 0;
    size_t cut = 0;
    while (cut < len && lines < max_lines) {
        const char *nl = memchr(text + cut, '\n', len - cut);
        cut = nl ? (size_t)(nl - text) + 1 : len;
        lines++;
    }
    rec_tsv_opts to = {.has_label = has_label};
    rec_bad_report bad = {0};
    REC_TRY(rec_raw_block_init(raw, lines + 1));
    return rec_tsv_parse(&to, "bench", text, cut, 1, raw, &bad);
}

/* A backend whose kernels and copies cost nothing (--host-cost): memory zeroed, each queued
 * operation a no-op, copies back zero-filled, so the executor's own work is all that runs. */
static rec_status null_alloc(void *ctx, void **p, size_t bytes) {
    (void)ctx;
    *p = calloc(1, bytes ? bytes : 16);
    return *p ? REC_OK : rec_errorf(REC_ENOMEM, "bench: out of memory for %zu bytes", bytes);
}
static void null_release(void *ctx, void *p) { (void)ctx, free(p); }
static rec_status null_copy(void *ctx, void *dst, const void *src, size_t bytes) {
    (void)ctx, (void)dst, (void)src, (void)bytes;
    return REC_OK;
}
static rec_status null_get(void *ctx, void *dst, const void *src, size_t bytes) {
    (void)ctx, (void)src;
    memset(dst, 0, bytes);
    return REC_OK;
}
static rec_status null_to_rows(void *ctx, float *dst, const float *src, int64_t n, int w, int ld, int col) {
    (void)ctx, (void)dst, (void)src, (void)n, (void)w, (void)ld, (void)col;
    return REC_OK;
}
static rec_status null_rows(void *ctx, int phase, const rec_gop *ops, int m, int lanes, rec_gcol *cols, int64_t n,
                            int32_t *cnt) {
    (void)ctx, (void)phase, (void)ops, (void)m, (void)lanes, (void)cols, (void)n, (void)cnt;
    return REC_OK;
}
static rec_status null_scan(void *ctx, const rec_gop *oh, const rec_gop *ops, int m, const rec_gcol *ch,
                            const rec_gcol *cols, int64_t n, const int32_t *cnt, int fits) {
    (void)ctx, (void)oh, (void)ops, (void)m, (void)ch, (void)cols, (void)n, (void)cnt, (void)fits;
    return REC_OK;
}
static rec_status null_sync(void *ctx) { (void)ctx; return REC_OK; }
static rec_status null_narrow(void *ctx, int32_t *dst, const int64_t *src, int64_t n, int32_t *bad) {
    (void)ctx, (void)dst, (void)src, (void)n, (void)bad;
    return REC_OK;
}
static const rec_gback NULL_BACKEND = {.name = "free",      .alloc = null_alloc,     .release = null_release,
                                       .host_alloc = null_alloc, .host_release = null_release, .put = null_copy,
                                       .copy = null_copy,   .get = null_get,         .to_rows = null_to_rows,
                                       .narrow = null_narrow, .rows = null_rows,     .scan = null_scan,
                                       .sync = null_sync};

/* --host-cost: ms a block of GPU_BLOCK rows of the GPU executor's host side (median of reps). */
enum { GPU_BLOCK = 32768 };
static rec_status host_cost(const rec_spec *spec, const rec_vocab_set *vocabs, const char *text, size_t len,
                            int has_label, int reps, double *ms) {
    rec_raw_block raw = {0};
    rec_fusion fu = {0};
    rec_gexec *g = NULL;
    rec_batch b = {0};
    double t[32];
    rec_status s = parse_head(text, len, has_label, 4 * GPU_BLOCK, &raw);
    if (!s) s = rec_prep_fuse(spec, NULL, &fu);
    if (!s) s = rec_gexec_init(&g, spec, &fu, vocabs, &NULL_BACKEND, GPU_BLOCK);
    if (!s) s = rec_batch_init(&b, raw.n, spec->n_dense, spec->n_sparse, 4);
    for (int r = -1; !s && r < reps; r++) {
        b.n = 0;
        const double t0 = rec_now();
        s = rec_gexec_run(g, &raw, 0, raw.n, &b);
        if (r >= 0) t[r] = (rec_now() - t0) * 1e3 * GPU_BLOCK / (double)(raw.n > 0 ? raw.n : 1);
    }
    if (!s) *ms = rec_median(t, reps);
    rec_batch_free(&b);
    rec_gexec_free(g);
    rec_fusion_free(&fu);
    rec_raw_block_free(&raw);
    return s;
}

/* Reads a whole file into memory (bench input). */
static rec_status slurp(const char *path, char **text, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return rec_errorf(REC_EIO, "%s: cannot open: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    rec_status s = rec_alloc((void **)text, (size_t)n + 1, "bench input");
    if (!s && fread(*text, 1, (size_t)n, f) != (size_t)n) s = rec_errorf(REC_EIO, "%s: short read", path);
    fclose(f);
    *len = (size_t)n;
    return s;
}

static rec_status generate(int64_t rows, double scale, int multi_hot, char **text, size_t *len) {
    rec_gen_opts go;
    rec_gen_opts_default(&go);
    go.scale = scale;
    go.multi_hot = multi_hot;
    rec_gen *g;
    REC_TRY(rec_gen_init(&g, &go, rows));
    size_t cap = rec_gen_max_row_bytes(g) * (size_t)rows + 1;
    rec_status s = rec_alloc((void **)text, cap, "bench input");
    if (!s) s = rec_gen_rows(g, 0, rows, *text, cap, len, NULL);
    rec_gen_free(g);
    return s;
}

/* RAP §5.2's data: the kernels timed on the GPU (up to 131072 rows of the text), written to
 * `path`, and the predictor's held-out score. */
static rec_status latencies(const rec_spec *spec, const rec_vocab_set *vocabs, const char *text, size_t len,
                            int has_label, const char *path) {
    rec_raw_block raw = {0};
    rec_gback be = {0};
    float *X = NULL;
    double *ms = NULL, med = 0, within = 0;
    int64_t n = 0;
    rec_status s = parse_head(text, len, has_label, 131072, &raw);
    if (!s) s = rec_gback_cuda(&be);
    if (!s) s = rec_gexec_collect(spec, vocabs, &raw, &be, &X, &ms, &n);
    if (!s) s = rec_lat_write(path, X, ms, n);
    if (!s) s = rec_lat_holdout(X, ms, n, 1, &med, &within);
    if (!s)
        printf("latency predictor (RAP §5.2): %lld kernels timed on the GPU -> %s; trained on 90%%, on the other 10%%: "
               "median relative error %.3f, %.1f%% within 10%%\n", (long long)n, path, med, 100 * within);
    if (be.ctx) rec_gback_cuda_free(&be);
    free(X), free(ms);
    rec_raw_block_free(&raw);
    return s;
}

/* Cuts the text into chunks of about 8 MiB of whole lines, as rec_tsv_next would. */
static int make_chunks(const char *text, size_t len, rec_text_chunk *chunks, int max) {
    int n = 0;
    size_t pos = 0;
    int64_t line = 1;
    while (pos < len && n < max) {
        size_t end = pos + ((size_t)8 << 20);
        if (end >= len) end = len;
        else {
            const char *nl = memchr(text + end, '\n', len - end);
            end = nl ? (size_t)(nl - text) + 1 : len;
        }
        int64_t lines = 0;
        for (const char *p = text + pos; (p = memchr(p, '\n', (size_t)(text + end - p))) != NULL; p++) lines++;
        chunks[n++] = (rec_text_chunk){.text = text + pos, .len = end - pos, .first_line = line, .n_lines = lines};
        line += lines;
        pos = end;
    }
    return n;
}

/* ops_ms: the GPU executor's operators alone over a pass (rec_prep_engine_device_ms), median */
typedef struct result { int threads, device; double mb_s, rows_s, seconds; int64_t rows; double ops_ms; } result;

/* Parses each chunk into its own raw block (--parsed). */
static rec_status parse_chunks(const rec_text_chunk *chunks, int nc, int has_label, rec_raw_block *raws) {
    rec_tsv_opts to = {.has_label = has_label};
    for (int c = 0; c < nc; c++) {
        rec_bad_report bad = {0};
        REC_TRY(rec_raw_block_init(&raws[c], chunks[c].n_lines + 1));
        REC_TRY(rec_tsv_parse(&to, "bench", chunks[c].text, chunks[c].len, chunks[c].first_line, &raws[c], &bad));
    }
    return REC_OK;
}

/* Every chunk through an engine of `threads` threads on `device`, reps times: its text, or
 * (raws) its parsed rows. */
static rec_status run_threads(const rec_prep_plan *plan, const rec_text_chunk *chunks, const rec_raw_block *raws,
                              int nc, size_t bytes, int threads, int reps, int has_label, rec_prep_device device,
                              result *out) {
    rec_tsv_opts to = {.has_label = has_label, .bad_rows = REC_BAD_ROWS_FAIL};
    rec_prep_engine *e;
    REC_TRY(rec_prep_engine_init(&e, plan, threads, &to, "bench"));
    double t[32], ops[32];
    int64_t rows = 0;
    rec_status s = rec_prep_engine_set_device(e, device);
    for (int r = -1; !s && r < reps; r++) { /* r = -1 warms up */
        double t0 = rec_now(), ops0 = rec_prep_engine_device_ms(e);
        rows = 0;
        for (int c = 0; !s && c < nc; c++) {
            s = raws ? rec_prep_engine_run_raw(e, &raws[c]) : rec_prep_engine_run(e, &chunks[c]);
            for (int k = 0; !s && k < threads; k++) rows += rec_prep_engine_batch(e, k)->n;
        }
        if (r >= 0) t[r] = rec_now() - t0, ops[r] = rec_prep_engine_device_ms(e) - ops0;
    }
    rec_prep_engine_free(e);
    if (s) return s;
    double med = rec_median(t, reps);
    *out = (result){threads, (int)device, (double)bytes / med / 1e6, (double)rows / med, med, rows, rec_median(ops, reps)};
    return REC_OK;
}

int bench_prep(int argc, char **argv) {
    const char *cmd = "bench prep", *spec_path = NULL, *in = NULL, *lat_path = NULL;
    int64_t rows = 1000000;
    int threads = 0, reps = 5, json = 0, multi_hot = 0, gpu = 0, parsed = 0, hostc = 0;
    double scale = 1.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = CLI_OK;
        if (cli_is_help(a)) { fputs(USAGE, stdout); return CLI_OK; }
        else if (!strcmp(a, "--spec")) rc = cli_str(cmd, argc, argv, &i, &spec_path);
        else if (!strcmp(a, "--in")) rc = cli_str(cmd, argc, argv, &i, &in);
        else if (!strcmp(a, "--rows")) rc = cli_i64(cmd, argc, argv, &i, 1000, (int64_t)1 << 31, &rows);
        else if (!strcmp(a, "--threads")) rc = cli_int(cmd, argc, argv, &i, 1, 256, &threads);
        else if (!strcmp(a, "--reps")) rc = cli_int(cmd, argc, argv, &i, 1, 32, &reps);
        else if (!strcmp(a, "--scale")) rc = cli_double(cmd, argc, argv, &i, 1e-6, 1e3, &scale);
        else if (!strcmp(a, "--multi-hot")) multi_hot = 1;
        else if (!strcmp(a, "--parsed")) parsed = 1;
        else if (!strcmp(a, "--host-cost")) hostc = 1;
        else if (!strcmp(a, "--latencies")) rc = cli_str(cmd, argc, argv, &i, &lat_path);
        else if (!strcmp(a, "--device")) {
            const char *d = NULL;
            rc = cli_str(cmd, argc, argv, &i, &d);
            if (!rc && !strcmp(d, "cuda")) gpu = 1;
            else if (!rc && strcmp(d, "cpu")) rc = cli_usage(cmd, "--device takes cpu or cuda (got '%s')", d);
        }
        else if (!strcmp(a, "--json")) json = 1;
        else rc = cli_usage(cmd, "unknown option '%s'", a);
        if (rc) return rc;
    }
    rec_guard g = {0};
    rec_guard_in(&g, "--spec", spec_path);
    rec_guard_in(&g, "--in", in);
    rec_guard_out(&g, "--latencies", lat_path);
    if (rec_guard_check(&g)) return cli_fail(cmd, REC_EINVAL);
    if (lat_path && !gpu) return cli_usage(cmd, "--latencies times kernels on the GPU: add --device cuda");
    char gpu_name[256];
    if (gpu) { /* before minutes of CPU runs */
        const rec_status p = rec_cuda_probe(gpu_name, sizeof gpu_name);
        if (p) return cli_fail(cmd, p);
    }
    char def_spec[4096];
    if (!spec_path) {
        const char *src = getenv("REC_SOURCE_DIR");
        snprintf(def_spec, sizeof def_spec, "%s/configs/criteo_standard.json", src ? src : ".");
        spec_path = def_spec;
    }
    char *text = NULL;
    size_t len = 0;
    rec_spec *spec = NULL;
    rec_prep_plan *plan = NULL;
    rec_vocab_set vocabs = {0};
    enum { MAX_CHUNKS = 4096 };
    rec_text_chunk *chunks = calloc(MAX_CHUNKS, sizeof *chunks);
    rec_status s = rec_spec_load(&spec, spec_path);
    if (!s) s = in ? slurp(in, &text, &len) : generate(rows, scale, multi_hot, &text, &len);
    int has_label = 1;
    if (!s) { /* detect the test format from the first line: 39 fields instead of 40 */
        int tabs = 0;
        for (const char *p = text; p < text + len && *p != '\n'; p++) tabs += *p == '\t';
        has_label = tabs != 38;
    }
    int nc = s ? 0 : make_chunks(text, len, chunks, MAX_CHUNKS);
    rec_raw_block *raws = parsed ? calloc((size_t)nc + 1, sizeof *raws) : NULL;
    if (!s && parsed) s = raws ? parse_chunks(chunks, nc, has_label, raws) : rec_errorf(REC_ENOMEM, "bench: out of memory");
    double count_mb_s = 0;
    if (!s && spec->n_vocabs > 0) { /* the counting pass, timed on its own */
        rec_tsv_opts to = {.has_label = has_label};
        rec_prep_engine *e = NULL;
        s = rec_prep_plan_init(&plan, spec, NULL);
        if (!s) s = rec_prep_engine_init(&e, plan, threads ? threads : rec_cpu_count(), &to, "bench");
        double t0 = rec_now();
        for (int c = 0; !s && c < nc; c++) s = rec_prep_engine_count(e, &chunks[c]);
        if (!s) s = rec_prep_engine_vocabs(e, &vocabs);
        count_mb_s = (double)len / (rec_now() - t0) / 1e6;
        if (!s) s = rec_spec_bind_vocabs(spec, &vocabs);
        rec_prep_engine_free(e);
        rec_prep_plan_free(plan);
        plan = NULL;
    }
    if (!s) s = rec_prep_plan_init(&plan, spec, spec->n_vocabs ? &vocabs : NULL);
    if (s) {
        for (int c = 0; raws && c < nc; c++) rec_raw_block_free(&raws[c]);
        free(raws);
        free(chunks);
        rec_free(text);
        rec_spec_free(spec);
        return cli_fail(cmd, s);
    }
    double copy = rec_measure_copy_gbps();
    int counts[3], n_counts = 0, cpus = rec_cpu_count();
    if (threads) counts[n_counts++] = threads;
    else {
        counts[n_counts++] = 1;
        if (cpus > 1) counts[n_counts++] = cpus;
    }
    result res[4];
    int64_t lines = 0;
    for (int c = 0; c < nc; c++) lines += chunks[c].n_lines;
    printf("bench prep: %s, %.1f MB of TSV (%lld rows, %.0f B/row), %d fused groups, median of %d%s\n",
           spec->name, (double)len / 1e6, (long long)lines, lines ? (double)len / (double)lines : 0.0,
           rec_prep_plan_groups(plan), reps, parsed ? "; rows parsed beforehand, the ops alone timed" : "");
    for (int k = 0; k < n_counts && !s; k++)
        s = run_threads(plan, chunks, raws, nc, len, counts[k], reps, has_label, REC_PREP_CPU, &res[k]);
    if (!s && gpu) { /* the GPU executor, as many threads parsing as the last CPU row */
        s = run_threads(plan, chunks, raws, nc, len, counts[n_counts - 1], reps, has_label, REC_PREP_CUDA, &res[n_counts]);
        n_counts++;
    }
    if (!s) {
        if (count_mb_s > 0) printf("categorify counting pass: %.0f MB/s (not included below)\n", count_mb_s);
        printf("%8s %6s %10s %12s %9s %14s\n", "threads", "ops", "MB/s", "rows/s", "speedup", "copy GB/s");
        for (int k = 0; k < n_counts; k++)
            printf("%8d %6s %10.1f %12.0f %8.2fx %14.1f\n", res[k].threads, res[k].device ? "gpu" : "cpu", res[k].mb_s,
                   res[k].rows_s, res[k].mb_s / res[0].mb_s, copy);
        const result *last = &res[n_counts - 1];
        /* The operators alone, from the device's clock: each block's streams summed, as if one at
         * a time (so a floor of what the device does with them all at once). */
        const double ops_mb_s = last->device && last->ops_ms > 0 ? (double)len / (last->ops_ms * 1e-3) / 1e6 : 0;
        if (ops_mb_s > 0)
            printf("the GPU executor's operators alone (each block's raw columns on the device to its last kernel, "
                   "copies left out): %.2f ms a pass over %d stream%s: %.1f MB/s one stream at a time, %.2fx the %d-thread "
                   "CPU row\n", last->ops_ms, last->threads, rec_s(last->threads), ops_mb_s, ops_mb_s / res[n_counts - 2].mb_s,
                   res[n_counts - 2].threads);
        if (lat_path) s = latencies(spec, spec->n_vocabs ? &vocabs : NULL, text, len, has_label, lat_path);
        double host_ms = 0;
        if (!s && hostc) {
            s = host_cost(spec, spec->n_vocabs ? &vocabs : NULL, text, len, has_label, reps, &host_ms);
            if (!s)
                printf("the GPU executor's host side (kernels and copies free): %.2f ms a block of %d rows, %.1fM rows/s "
                       "a thread\n", host_ms, GPU_BLOCK, host_ms > 0 ? GPU_BLOCK / host_ms * 1e-3 : 0);
        }
        if (json) {
            printf("{\"bench\": \"prep\", \"spec\": \"%s\", \"parsed\": %s, \"bytes\": %zu, \"rows\": %lld, \"threads\": %d, \"ops\": \"%s\", "
                   "\"mb_per_s\": %s, \"rows_per_s\": %s, \"mb_per_s_1thread\": %s, \"speedup\": %s, "
                   "\"gpu_ops_mb_per_s\": %s, \"gexec_host_ms_per_block\": %s, \"copy_gb_per_s\": %s}\n",
                   spec->name, parsed ? "true" : "false", len, (long long)last->rows, last->threads, last->device ? "gpu" : "cpu", cli_jnum("%.2f", last->mb_s),
                   cli_jnum("%.1f", last->rows_s), cli_jnum("%.2f", res[0].mb_s), cli_jnum("%.3f", last->mb_s / res[0].mb_s),
                   ops_mb_s > 0 ? cli_jnum("%.2f", ops_mb_s) : "null", host_ms > 0 ? cli_jnum("%.3f", host_ms) : "null",
                   cli_jnum("%.2f", copy));
        }
    }
    for (int c = 0; raws && c < nc; c++) rec_raw_block_free(&raws[c]);
    free(raws);
    rec_prep_plan_free(plan);
    rec_vocab_set_free(&vocabs);
    rec_spec_free(spec);
    rec_free(text);
    free(chunks);
    return s ? cli_fail(cmd, s) : CLI_OK;
}
