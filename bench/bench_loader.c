/* rectrain bench loader: the training loader alone, draining every batch of a data set in
 * file order and in the shuffled order (train.h, rec_shuffle) that `rectrain train` reads by
 * default.
 *
 * What is timed: rec_loader_open_order .. the last rec_loader_next of a whole epoch over all
 * the rows, the consumer doing nothing but take each batch (so the producer thread's reading,
 * and for the shuffled order its buffer and gather, is all there is). Repetition r of the
 * shuffled order is epoch r, so each draws its own order. The two orders alternate within a
 * repetition, so a drift of the machine hits both alike. The machine's copy bandwidth is
 * printed beside the rates as the ceiling of any pass over the rows' bytes.
 *
 * --gpu-host: the consumer also does the host's half of each `train --device cuda` step's
 * input (rec_cuda_model's load_inputs and the forward's block map): the dense values and labels
 * copied into one of two staging buffers, the ids packed on a pool of min(CPUs, tables)
 * threads (rec_cuda_pack) and the block map built (rec_cuda_block_map, dim --dim, each table's
 * default schedule). Staging is plain memory here, not pinned: the copies to the GPU are the
 * GPU's. So the rates are the most samples/s this host can feed a GPU, on a machine without
 * one.
 *
 * With --gpu-host the shuffled order is drained a third way, staged (rec_loader_open_staged):
 * what `train --device cuda` does with a shuffled shard. Each window is staged once on the
 * loader's thread (rec_cuda_stage_fill into plain memory, features on the pool) and each batch
 * costs the consumer its ids per table (rec_cuda_gather_nnz) and the block map; the gather
 * itself is the GPU's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"
#include "cuda_impl.h"
#include "rectrain/core.h"
#include "rectrain/cuda.h"
#include "rectrain/train.h"

static const char USAGE[] =
    "usage: rectrain bench loader --data FILE [--batch B] [--reps R] [--seed S] [--threads T] [--json]\n"
    "                             [--gpu-host [--dim E]]\n"
    "\n"
    "Drains every batch of FILE (.rshard) through the training loader, in file order and\n"
    "shuffled (blocks of " CLI_STR(REC_SHUFFLE_BLOCK_ROWS) " rows, " CLI_STR(REC_SHUFFLE_BUFFER_BLOCKS) " per buffer: what rectrain train\n"
    "reads by default), alternating, R times each (default 3; the median is reported), batches\n"
    "of B rows (default 2048). Prints rows/s and MB/s of both orders, their ratio, and the\n"
    "measured copy bandwidth. --threads T: the loader's threads (default 1, as training on\n"
    "the CPUs; train --device cuda gives it all of them): groups' checksums and the shuffled\n"
    "gather on T threads.\n"
    "  --gpu-host   each batch also staged for the GPU as train --device cuda does on the host\n"
    "               (dense values and labels copied, ids packed on a pool, the block map built):\n"
    "               the most samples/s this host can feed a GPU\n"
    "  --dim E      with --gpu-host: the embedding dim of the block map (default 128)\n";

/* The host's half of a GPU step's input (rec_cuda_batch_load, load_inputs): staging sized for
 * the largest batch seen, two slots in turn as the GPU model's. */
typedef struct gpu_host {
    rec_pool *pool;
    int F, E, slot;
    const int64_t *rows; /* (F) table rows, for the ids' check */
    int *dims, *sched;
    int64_t *nnz;
    int32_t *rounds, *start;
    float *dense[2];
    int32_t *ids[2];
    size_t dense_cap, ids_cap;
    int64_t blocks; /* block map's blocks, summed (kept so the map is not optimised away) */
    double sec[3];  /* seconds in the copy, the packing and the block map */
    int64_t batches;
    rec_cuda_host_stager stg; /* staged: the windows in host memory */
    double staged_sec;        /* staged: the consumer's seconds (ids per table, block map) */
    int64_t staged_batches;
} gpu_host;

static void gpu_host_free(gpu_host *h) {
    if (!h) return;
    rec_pool_free(h->pool);
    free(h->dims), free(h->sched), free(h->nnz), free(h->rounds), free(h->start);
    for (int i = 0; i < 2; i++) free(h->dense[i]), free(h->ids[i]);
    rec_cuda_host_stager_free(&h->stg);
    memset(h, 0, sizeof *h);
}

static rec_status gpu_host_init(gpu_host *h, const rec_dataset *d, int E) {
    memset(h, 0, sizeof *h);
    h->F = rec_dataset_n_sparse(d), h->E = E, h->rows = rec_dataset_table_rows(d);
    const int F = h->F, cpus = rec_cpu_count();
    h->dims = malloc(sizeof(int) * (size_t)F), h->sched = malloc(sizeof(int) * (size_t)F);
    h->nnz = malloc(sizeof(int64_t) * (size_t)F);
    h->rounds = malloc(sizeof(int32_t) * (size_t)F), h->start = malloc(sizeof(int32_t) * ((size_t)F + 1));
    if (!h->dims || !h->sched || !h->nnz || !h->rounds || !h->start)
        return rec_errorf(REC_ENOMEM, "bench loader --gpu-host: out of memory");
    for (int f = 0; f < F; f++) h->dims[f] = E, h->sched[f] = rec_cuda_sched_default(E, f * E, F * E);
    return rec_pool_init(&h->pool, cpus < F ? cpus : F > 0 ? F : 1);
}

static rec_status grow(void **p, size_t *cap, size_t want) {
    if (want <= *cap) return REC_OK;
    void *q = realloc(*p, want + want / 4);
    if (!q) return rec_errorf(REC_ENOMEM, "bench loader --gpu-host: out of memory for %zu bytes of staging", want);
    *p = q, *cap = want + want / 4;
    return REC_OK;
}

/* The block map of a batch of B rows with h->nnz ids per table, as rec_cuda_embed's on an H100/H200. */
static void block_map(gpu_host *h, int B) {
    enum { H100_SMS = 132, OCCUPANCY = 8 };
    h->blocks += rec_cuda_block_map(h->F, B, h->dims, h->sched, h->nnz, H100_SMS * OCCUPANCY * 4, h->rounds, h->start);
}

/* A staged batch: its ids per table and the block map; the GPU gathers the rest. */
static void gpu_host_staged(gpu_host *h, const rec_staged_batch *sb) {
    const double t0 = rec_now();
    const uint64_t touched = rec_cuda_gather_slots(sb->pos, (int)sb->n, h->stg.slot_rows);
    rec_cuda_gather_nnz(h->stg.src, h->stg.S, h->F, h->stg.slot_rows, sb->pos, (int)sb->n, touched, h->nnz);
    block_map(h, (int)sb->n);
    h->staged_sec += rec_now() - t0, h->staged_batches++;
}

/* Seconds to drain rows [0, n) of d staged in the order sh (gh's stager) */
static rec_status drain_staged(rec_dataset *d, int64_t n, int64_t batch, const rec_shuffle *sh, gpu_host *gh, double *sec) {
    rec_loader *l = NULL;
    const rec_stager st = {rec_cuda_host_stage, &gh->stg, gh->stg.S, gh->stg.slot_rows};
    const double t0 = rec_now();
    REC_TRY(rec_loader_open_staged(&l, d, 0, n, batch, 3, sh, 0, &st));
    const rec_staged_batch *sb;
    rec_status s;
    while (!(s = rec_loader_next_staged(l, &sb)) && sb) gpu_host_staged(gh, sb);
    rec_loader_close(l);
    *sec = rec_now() - t0;
    return s;
}

static rec_status gpu_host_stage(gpu_host *h, const rec_batch *b) {
    const int F = h->F, B = (int)b->n, i = h->slot;
    h->slot ^= 1;
    int weighted; /* as rec_cuda_batch_load: every id's weight after the ids */
    const int64_t total = rec_cuda_batch_ids(b, 0, F, &weighted);
    const size_t dense = (size_t)B * ((size_t)b->n_dense + 1) * sizeof(float);
    const size_t ids = ((size_t)F * (B + 1) + (size_t)total * (weighted ? 2 : 1)) * sizeof(int32_t);
    size_t dcap = h->dense_cap, icap = h->ids_cap; /* both slots grow together */
    for (int k = 0; k < 2; k++) {
        h->dense_cap = dcap, h->ids_cap = icap;
        REC_TRY(grow((void **)&h->dense[k], &h->dense_cap, dense));
        REC_TRY(grow((void **)&h->ids[k], &h->ids_cap, ids));
    }
    const double t0 = rec_now();
    memcpy(h->dense[i], b->dense, (size_t)B * b->n_dense * sizeof(float));
    memcpy(h->dense[i] + (size_t)B * b->n_dense, b->label, (size_t)B * sizeof(float));
    const double t1 = rec_now();
    int32_t *off = h->ids[i], *id = off + (size_t)F * (B + 1);
    REC_TRY(rec_cuda_pack(b, 0, F, h->rows, off, id, weighted ? (float *)(id + total) : NULL, h->nnz, h->pool));
    const double t2 = rec_now();
    block_map(h, B);
    h->sec[0] += t1 - t0, h->sec[1] += t2 - t1, h->sec[2] += rec_now() - t2, h->batches++;
    return REC_OK;
}

/* Seconds to drain rows [0, n) of d in batches of `batch`, in the order `sh` (NULL: file
 * order); *bytes gets the bytes of the batches delivered (labels, dense values, offsets, ids). */
static rec_status drain(rec_dataset *d, int64_t n, int64_t batch, const rec_shuffle *sh, gpu_host *gh, double *sec,
                        double *bytes) {
    rec_loader *l = NULL;
    const double t0 = rec_now();
    REC_TRY(rec_loader_open_order(&l, d, 0, n, batch, 3, sh, 0));
    const rec_batch *b;
    rec_status s;
    double by = 0;
    while (!(s = rec_loader_next(l, &b)) && b) {
        if (gh && (s = gpu_host_stage(gh, b))) break;
        by += (double)b->n * (1 + b->n_dense) * sizeof(float);
        for (int32_t f = 0; f < b->n_sparse; f++)
            by += (double)b->n * sizeof(int64_t) + (double)rec_batch_nnz(b, f) * rec_jagged_id_bytes(&b->sparse[f]);
    }
    rec_loader_close(l);
    *sec = rec_now() - t0;
    *bytes = by;
    return s;
}

int bench_loader(int argc, char **argv) {
    const char *cmd = "bench loader", *path = NULL;
    int64_t batch = 2048, seed = 1;
    int reps = 3, json = 0, threads = 1, host = 0, dim = 128;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = CLI_OK;
        if (cli_is_help(a)) { fputs(USAGE, stdout); return CLI_OK; }
        else if (!strcmp(a, "--data")) rc = cli_str(cmd, argc, argv, &i, &path);
        else if (!strcmp(a, "--batch")) rc = cli_i64(cmd, argc, argv, &i, 1, 1 << 20, &batch);
        else if (!strcmp(a, "--reps")) rc = cli_int(cmd, argc, argv, &i, 1, 100, &reps);
        else if (!strcmp(a, "--seed")) rc = cli_i64(cmd, argc, argv, &i, 0, INT64_MAX, &seed);
        else if (!strcmp(a, "--threads")) rc = cli_int(cmd, argc, argv, &i, 1, 256, &threads);
        else if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--gpu-host")) host = 1;
        else if (!strcmp(a, "--dim")) rc = cli_int(cmd, argc, argv, &i, 1, REC_CUDA_MAX_DIM, &dim);
        else rc = cli_usage(cmd, "unknown option '%s'", a);
        if (rc) return rc;
    }
    if (!path) return cli_usage(cmd, "--data FILE is required (a .rshard, e.g. from rectrain prep)");
    rec_dataset *d = NULL;
    rec_dataset_opts o = {.path = path, .prep_threads = threads};
    o.tsv.has_label = -1;
    rec_status s = rec_dataset_open(&d, &o);
    int64_t n = 0;
    if (!s) s = rec_dataset_rows(d, &n);
    gpu_host gh = {0};
    rec_shuffle sh = {(uint64_t)seed, 0, REC_SHUFFLE_BLOCK_ROWS, REC_SHUFFLE_BUFFER_BLOCKS};
    if (!s && host) s = gpu_host_init(&gh, d, dim);
    if (!s && host)
        s = rec_cuda_host_stager_init(&gh.stg, rec_loader_stage_slots(batch, &sh), sh.block_rows * sh.buffer_blocks,
                                      rec_dataset_n_dense(d), gh.F, gh.rows, path, gh.pool);
    double t[3][100], bytes = 0;
    for (int r = -1; !s && r < reps; r++) { /* r = -1: warm-up (page cache, allocator) */
        double sec;
        sh.epoch = r < 0 ? 0 : r;
        s = drain(d, n, batch, NULL, host ? &gh : NULL, &sec, &bytes);
        if (!s && r >= 0) t[0][r] = sec;
        if (!s) s = drain(d, n, batch, &sh, host ? &gh : NULL, &sec, &bytes);
        if (!s && r >= 0) t[1][r] = sec;
        if (!s && host) s = drain_staged(d, n, batch, &sh, &gh, &sec);
        if (!s && host && r >= 0) t[2][r] = sec;
    }
    const double gh_sec[3] = {gh.sec[0], gh.sec[1], gh.sec[2]};
    const int64_t gh_batches = gh.batches;
    const double staged_ms = gh.staged_batches > 0 ? gh.staged_sec / gh.staged_batches * 1e3 : 0;
    gpu_host_free(&gh);
    rec_dataset_close(d);
    if (s) return cli_fail(cmd, s);
    const double copy = rec_measure_copy_gbps();
    const double file_s = rec_median(t[0], reps), shuf_s = rec_median(t[1], reps);
    const double staged_s = host ? rec_median(t[2], reps) : 0;
    printf("loader%s over %lld rows of %s, batches of %lld, %d thread%s, median of %d\n",
           host ? " + the host's half of a GPU step's input" : "", (long long)n, path, (long long)batch, threads,
           rec_s(threads), reps);
    printf("  %-10s %12.0f rows/s %9.1f MB/s\n", "file order", n / file_s, bytes / file_s * 1e-6);
    printf("  %-10s %12.0f rows/s %9.1f MB/s   (%.2fx file order)\n", "shuffled", n / shuf_s, bytes / shuf_s * 1e-6,
           file_s / shuf_s);
    printf("  %-10s %22.1f MB/s   (memcpy, the ceiling of one pass over the bytes)\n", "copy", copy * 1e3);
    if (host && gh_batches > 0)
        printf("  staging a batch (means over every run): dense values and labels %.3f ms, ids packed %.3f ms, block "
               "map %.3f ms\n", gh_sec[0] / gh_batches * 1e3, gh_sec[1] / gh_batches * 1e3, gh_sec[2] / gh_batches * 1e3);
    if (host)
        printf("  %-10s %12.0f rows/s %14s   (%.2fx shuffled: windows staged once, batches gathered on the GPU; "
               "a batch's ids per table and block map %.3f ms)\n", "staged", n / staged_s, "", shuf_s / staged_s, staged_ms);
    if (json) {
        printf("{\"rows\": %lld, \"batch\": %lld, \"threads\": %d, \"gpu_host\": %s, \"reps\": %d, \"file_rows_per_s\": %s, \"shuffled_rows_per_s\": %s, "
               "\"shuffled_vs_file\": %s, \"copy_gb_per_s\": %s", (long long)n, (long long)batch, threads,
               host ? "true" : "false", reps,
               cli_jnum("%.1f", n / file_s), cli_jnum("%.1f", n / shuf_s), cli_jnum("%.4f", file_s / shuf_s),
               cli_jnum("%.3f", copy));
        if (host)
            printf(", \"staged_rows_per_s\": %s, \"staged_vs_shuffled\": %s, \"staged_batch_ms\": %s",
                   cli_jnum("%.1f", n / staged_s), cli_jnum("%.4f", shuf_s / staged_s), cli_jnum("%.4f", staged_ms));
        if (host && gh_batches > 0)
            printf(", \"staging_ms\": {\"dense\": %s, \"pack\": %s, \"block_map\": %s}",
                   cli_jnum("%.4f", gh_sec[0] / gh_batches * 1e3), cli_jnum("%.4f", gh_sec[1] / gh_batches * 1e3),
                   cli_jnum("%.4f", gh_sec[2] / gh_batches * 1e3));
        printf("}\n");
    }
    return CLI_OK;
}
