/* The GPU engine's host side, on any machine: schedule names and fit, the per-batch block map
 * (every bag of every table pooled by exactly one group, as the kernel reads the map), plan
 * files and their rejections, and what `--device cuda` says on a machine without a GPU. */
#include <math.h>
#include <stdlib.h>

#include "clirun.h"
#include "cuda_impl.h"
#include "rectrain/core.h"
#include "rectrain/cuda.h"

static void test_sched_names(void) {
    char buf[16];
    for (int s = 0; s < REC_CUDA_N_SCHED; s++) {
        CHECK(rec_cuda_sched_parse(rec_cuda_sched_name(s, buf, sizeof buf)) == s, "schedule %d round trip (%s)", s, buf);
        CHECK(rec_cuda_sched_threads(s) >= 1 && rec_cuda_sched_threads(s) <= REC_CUDA_BLOCK, "threads of %d", s);
    }
    CHECK(!strcmp(rec_cuda_sched_name(5, buf, sizeof buf), "t32v4"), "warp-per-bag is t32v4: %s", buf);
    CHECK(rec_cuda_sched_parse("t3v4") == -1 && rec_cuda_sched_parse("t32v2") == -1 && rec_cuda_sched_parse("") == -1,
          "unknown schedules are rejected");
    /* v4 needs 16-byte aligned rows and output columns. */
    CHECK(rec_cuda_sched_fits(0, 16, 32, 64) && !rec_cuda_sched_fits(0, 18, 32, 64) && !rec_cuda_sched_fits(0, 16, 2, 64) &&
              !rec_cuda_sched_fits(0, 16, 32, 66) && rec_cuda_sched_fits(9, 18, 2, 66),
          "fit rules");
    CHECK(!rec_cuda_sched_fits(9, REC_CUDA_MAX_DIM + 1, 0, 1000) && !rec_cuda_sched_fits(9, 0, 0, 1), "dims outside 1..max");
    CHECK(rec_cuda_sched_default(16, 0, 16) == 2 && rec_cuda_sched_default(128, 0, 128) == 5 &&
              rec_cuda_sched_default(3, 0, 3) == 11 && rec_cuda_sched_default(4, 0, 4) == 0,
          "defaults: thread per 16-byte chunk up to a warp per bag");
    int c[REC_CUDA_N_SCHED];
    const int n4 = rec_cuda_sched_candidates(4, 0, 4, c), n128 = rec_cuda_sched_candidates(128, 0, 128, c),
              n7 = rec_cuda_sched_candidates(7, 0, 7, c);
    CHECK(n4 == 12 && n128 == 18 && n7 == 7, "candidates: dim 4 %d (want 12), dim 128 %d (18), dim 7 %d (7: v1, T <= 64)",
          n4, n128, n7);
}

/* Simulates the kernel's reading of the map: block k of table f, round r, group g pools bag
 * (rel * R + r) * G + g when below B. Each bag must be pooled exactly once. */
static void test_block_map(void) {
    rec_rng rng;
    rec_rng_seed(&rng, 7, 0);
    int bad = 0, cases = 0;
    for (int t = 0; t < 300 && !bad; t++, cases++) {
        const int F = 1 + (int)rec_rng_below(&rng, 40), B = 1 + (int)rec_rng_below(&rng, t % 3 ? 700 : 5);
        int dims[40], sched[40];
        int64_t nnz[40];
        int32_t rounds[40], start[41];
        for (int f = 0; f < F; f++) {
            dims[f] = 1 + (int)rec_rng_below(&rng, 256);
            sched[f] = (int)rec_rng_below(&rng, REC_CUDA_N_SCHED);
            if (sched[f] < 9 && dims[f] % 4) dims[f] = (dims[f] + 3) / 4 * 4 > 256 ? 256 : (dims[f] + 3) / 4 * 4;
            nnz[f] = (int64_t)rec_rng_below(&rng, (uint64_t)B * (t % 4 == 0 ? 300 : 3) + 1);
        }
        const int64_t target = 1 + (int64_t)rec_rng_below(&rng, 2000);
        const int64_t blocks = rec_cuda_block_map(F, B, dims, sched, nnz, target, rounds, start);
        bad |= start[0] != 0 || start[F] != blocks;
        uint8_t *seen = calloc((size_t)B, 1);
        for (int f = 0; f < F && !bad; f++) {
            const int G = REC_CUDA_BLOCK / rec_cuda_sched_threads(sched[f]), R = rounds[f];
            bad |= R < 1 || start[f + 1] <= start[f];
            memset(seen, 0, (size_t)B);
            for (int rel = 0; rel < start[f + 1] - start[f] && !bad; rel++) {
                int any = 0;
                for (int r = 0; r < R; r++)
                    for (int g = 0; g < G; g++) {
                        const int64_t b = ((int64_t)rel * R + r) * G + g;
                        if (b < B) bad |= seen[b]++ != 0, any = 1;
                    }
                bad |= !any; /* no block without work */
            }
            for (int b = 0; b < B && !bad; b++) bad |= seen[b] != 1;
        }
        free(seen);
    }
    CHECK(!bad, "block map covers every bag exactly once, no idle block (%d cases)", cases);
    /* Rounds follow the batch's real bag sizes: long bags get fewer bags per block. */
    const int dims[2] = {16, 16}, sched[2] = {2, 2};
    const int64_t nnz[2] = {1024, 1024 * 100};
    int32_t rounds[2], start[3];
    rec_cuda_block_map(2, 1024, dims, sched, nnz, 64, rounds, start);
    CHECK(rounds[0] > rounds[1] && start[2] - start[1] > start[1] - start[0],
          "a table of 100-id bags gets more blocks than one of 1-id bags (rounds %d vs %d)", rounds[0], rounds[1]);
}

/* rec_cuda_pack against a plain loop: random features of both id widths, some weighted, empty
 * bags; then bad ids in two features: the first in order is named. On this thread (pool NULL)
 * and on a pool's. */
static void test_pack(rec_pool *pool) {
    rec_rng rng;
    rec_rng_seed(&rng, 11, 0);
    enum { F = 9, B = 333 };
    int64_t rows[F];
    rec_batch b;
    rec_status s = rec_batch_init(&b, B, 0, F + 2, 2);
    b.n = B;
    for (int f = 0; f < F + 2; f++) {
        if (f < F) rows[f] = 1 + (int64_t)rec_rng_below(&rng, f == 4 ? 5000000000LL : 10000);
        rec_jagged *j = &b.sparse[f];
        j->offsets[0] = 0;
        for (int r = 0; !s && r < B; r++) {
            const int64_t L = (int64_t)rec_rng_below(&rng, 5);
            s = rec_batch_reserve_nnz(&b, f, j->offsets[r] + L, f % 3 == 1);
            for (int64_t k = j->offsets[r]; !s && k < j->offsets[r] + L; k++) {
                j->ids64[k] = (int64_t)rec_rng_below(&rng, (uint64_t)(f < F ? rows[f] : 7));
                if (j->weights) j->weights[k] = (float)rec_rng_uniform(&rng);
            }
            j->offsets[r + 1] = j->offsets[r] + L;
        }
        if (!s && f < F && f != 4 && f % 2) s = rec_batch_set_wide(&b, f, 0);
    }
    CHECK(s == REC_OK, "pack batch: %s", rec_errmsg());
    int64_t total = 0;
    for (int f = 1; f <= F - 1; f++) total += rec_batch_nnz(&b, f); /* window 1..F-1 of the batch */
    const int Fw = F - 1;
    int64_t all = 0; /* room for any window */
    for (int f = 0; f < F + 2; f++) all += rec_batch_nnz(&b, f);
    int32_t *off = malloc(sizeof(int32_t) * (size_t)(F + 2) * (B + 1)), *ids = malloc(sizeof(int32_t) * (size_t)(all + 1));
    float *w = malloc(sizeof(float) * (size_t)(all + 1));
    int64_t nnz[F];
    s = rec_cuda_pack(&b, 1, Fw, rows + 1, off, ids, w, nnz, pool);
    int ok = s == REC_OK;
    int64_t at = 0;
    for (int f = 0; ok && f < Fw; f++) {
        const rec_jagged *j = &b.sparse[1 + f];
        ok &= nnz[f] == rec_batch_nnz(&b, 1 + f);
        for (int r = 0; ok && r <= B; r++) ok &= off[(size_t)f * (B + 1) + r] == at + j->offsets[r];
        for (int64_t k = 0; ok && k < nnz[f]; k++)
            ok &= ids[at + k] == rec_jagged_id(j, k) && w[at + k] == (j->weights ? j->weights[k] : 1.0f);
        at += nnz[f];
    }
    CHECK(ok && at == total, "packed offsets, ids and weights match the batch (%s)", s ? rec_errmsg() : "");
    /* Bad ids in features 6 and 3 (widened to hold them): feature 3 is named, first in order. */
    rec_batch_set_wide(&b, 6, 1);
    rec_batch_set_wide(&b, 3, 1);
    int r6 = 5, r3 = 200;
    while (b.sparse[6].offsets[r6 + 1] == b.sparse[6].offsets[r6]) r6++;
    while (b.sparse[3].offsets[r3 + 1] == b.sparse[3].offsets[r3]) r3++;
    b.sparse[6].ids64[b.sparse[6].offsets[r6]] = rows[6];
    b.sparse[3].ids64[b.sparse[3].offsets[r3]] = -1;
    s = rec_cuda_pack(&b, 0, F, rows, off, ids, NULL, nnz, pool);
    char want[96];
    snprintf(want, sizeof want, "feature 3, batch row %d: id -1 is outside", r3);
    CHECK_ERR(s, REC_EINVAL, want);
    s = rec_cuda_pack(&b, 4, F - 4, rows + 4, off, ids, NULL, nnz, pool);
    snprintf(want, sizeof want, "feature 6, batch row %d: id %lld is outside", r6, (long long)rows[6]);
    CHECK_ERR(s, REC_EINVAL, want);
    free(off), free(ids), free(w);
    rec_batch_free(&b);
}

static void test_plans(void) {
    const int64_t rows[3] = {100, 7, 3000};
    const int dims[3] = {16, 3, 65}; /* columns 0, 16, 19 of 84: only the first fits v4 */
    const int sched[3] = {5, 11, 14};
    char p[300], q[300];
    snprintf(p, sizeof p, "%s/plan.json", dir);
    CHECK(rec_cuda_plan_save(p, 3, rows, dims, sched, 4) == REC_OK, "save: %s", rec_errmsg());
    char *text = NULL;
    size_t len = 0;
    CHECK(rec_read_file(p, "plan", 1 << 20, &text, &len) == REC_OK, "read back");
    int got[3] = {0}, occ = -1;
    CHECK(text && rec_cuda_plan_parse(text, len, p, 3, rows, dims, got, &occ) == REC_OK, "parse: %s", rec_errmsg());
    CHECK(got[0] == 5 && got[1] == 11 && got[2] == 14 && occ == 4, "round trip: %d %d %d occ %d", got[0], got[1], got[2], occ);
    free(text);
    struct { const char *json, *needle; rec_status want; } bad[] = {
        {"{", "not valid JSON", REC_EFORMAT},
        {"{\"format\": \"rectrain-embed-plan\"}", "$.format", REC_EFORMAT},
        {"{\"format\": \"rectrain-cuda-embed-plan\", \"version\": 2}", "$.version", REC_EINVAL},
        {"{\"format\": \"rectrain-cuda-embed-plan\", \"version\": 1, \"occupancy\": -1, \"tables\": []}", "$.occupancy",
         REC_EINVAL},
        {"{\"format\": \"rectrain-cuda-embed-plan\", \"version\": 1, \"occupancy\": 2, \"tables\": {}}", "$.tables",
         REC_EINVAL},
        {"{\"format\": \"rectrain-cuda-embed-plan\", \"version\": 1, \"occupancy\": 2, \"tables\": []}", "the model 3", REC_EINVAL},
        {"{\"format\": \"rectrain-cuda-embed-plan\", \"version\": 1, \"occupancy\": 2, \"tables\": [{\"rows\": 100, \"dim\": 16, "
         "\"sched\": \"t32v4\"}, {\"rows\": 8, \"dim\": 3, \"sched\": \"t4v1\"}, {\"rows\": 3000, \"dim\": 65, \"sched\": "
         "\"t4v1\"}]}", "$.tables[1]", REC_EINVAL},
        {"{\"format\": \"rectrain-cuda-embed-plan\", \"version\": 1, \"occupancy\": 2, \"tables\": [{\"rows\": 100, \"dim\": 16, "
         "\"sched\": \"t32v4\"}, {\"rows\": 7, \"dim\": 3, \"sched\": \"t5v1\"}, {\"rows\": 3000, \"dim\": 65, \"sched\": "
         "\"t4v1\"}]}", "$.tables[1].sched", REC_EINVAL},
        {"{\"format\": \"rectrain-cuda-embed-plan\", \"version\": 1, \"occupancy\": 2, \"tables\": [{\"rows\": 100, \"dim\": 16, "
         "\"sched\": \"t32v4\"}, {\"rows\": 7, \"dim\": 3, \"sched\": \"t4v1\"}, {\"rows\": 3000, \"dim\": 65, \"sched\": "
         "\"t4v4\"}]}", "use the v1 form", REC_EINVAL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int s2[3] = {1, 1, 1}, o2 = 9;
        const rec_status st = rec_cuda_plan_parse(bad[i].json, strlen(bad[i].json), "p.json", 3, rows, dims, s2, &o2);
        CHECK_ERR(st, bad[i].want, bad[i].needle);
        CHECK(s2[0] == 1 && o2 == 9, "a rejected plan changes nothing (case %zu)", i);
    }
    snprintf(q, sizeof q, "%s/no/such/dir/plan.json", dir);
    CHECK(rec_cuda_plan_save(q, 3, rows, dims, sched, 4) == REC_EIO, "save into a missing directory: %s", rec_errmsg());
}

static void test_cli(void) {
    char name[256];
    const int have_gpu = rec_cuda_probe(name, sizeof name) == REC_OK;
    CHECK(run("bench embed --device tpu") == 2 && strstr(out, "--device tpu: want cpu or cuda"), "bad device: %s", out);
    CHECK(run("bench embed --plan-out p.json") == 2 && strstr(out, "--plan-out is for --device cuda"), "plan-out on cpu: %s",
          out);
    CHECK(run("bench train --device tpu") == 2 && strstr(out, "--device tpu: want cpu or cuda"), "bench train device: %s", out);
    CHECK(run("bench train --device cuda --precision fp8") == 2 && strstr(out, "--precision fp8: want fp32, bf16 or both"),
          "bench train precision: %s", out);
    CHECK(run("train --device cuda --tune --steps 1") == 1 && strstr(out, "--plan-out FILE` and give --plan FILE"),
          "--tune with --device cuda points at the GPU tuner: %s", out);
    CHECK(run("train --device cuda --plan nope.json --steps 1") == 1 &&
              strstr(out, "--plan nope.json: cannot be read (No such file or directory)"),
          "a missing GPU plan is refused before any work: %s", out);
    if (!have_gpu) {
        const int rt = run("train --device cuda --steps 1");
        CHECK(rt == 1 && (strstr(out, "no NVIDIA") || strstr(out, "without the GPU engine")),
              "train --device cuda without a GPU says why (rc %d): %s", rt, out);
        const int rc = run("bench embed --device cuda --model B");
        CHECK(rc == 1 && (strstr(out, "no NVIDIA") || strstr(out, "without the GPU engine")),
              "--device cuda without a GPU says why (rc %d): %s", rc, out);
    }
}

/* The models the GPU trains, on any machine: a DLRM, with fp32 or bf16 tables; the other kinds
 * refused (rec_cuda_check_config), naming what trains on the CPU. rec_cuda_model_init takes a
 * model with bf16 tables (a machine with a GPU), or says why there is no GPU. */
static void test_config_check(void) {
    static const char *const kinds[] = {"dlrm", "dcn", "deepfm", "wide_deep"};
    rec_model_config c;
    for (int k = REC_MODEL_DLRM; k <= REC_MODEL_WIDE_DEEP; k++) {
        rec_model_config_default(&c, (rec_model_kind)k);
        const rec_status s = rec_cuda_check_config(&c);
        char want[64];
        snprintf(want, sizeof want, "DLRM models; %s (model ", kinds[k]);
        CHECK(k == REC_MODEL_DLRM ? s == REC_OK : s == REC_EUNSUPPORTED && strstr(rec_errmsg(), want) &&
                                                      strstr(rec_errmsg(), "trains on --device cpu"),
              "model kind %s on the GPU: %s", kinds[k], s ? rec_errmsg() : "accepted");
        rec_model_config_free(&c);
    }
    rec_model_config_default(&c, REC_MODEL_DLRM);
    const int64_t rows[26] = {5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5};
    rec_model *m = NULL;
    rec_status s = rec_model_config_bind(&c, 13, 26, rows, "test");
    c.embed_precision = REC_PRECISION_BF16;
    CHECK(rec_cuda_check_config(&c) == REC_OK, "bf16 tables refused: %s", rec_errmsg());
    if (!s) s = rec_model_init(&m, &c, 8, 1);
    CHECK(s == REC_OK, "a model with bf16 tables: %s", rec_errmsg());
    rec_cuda_model *g = NULL;
    if (m) {
        char name[256];
        const int gpu = rec_cuda_probe(name, sizeof name) == REC_OK;
        s = rec_cuda_model_init(&g, m, 8, REC_PRECISION_FP32);
        CHECK(gpu ? s == REC_OK && g : s != REC_OK && !g && (strstr(rec_errmsg(), "no NVIDIA") ||
                                                              strstr(rec_errmsg(), "no usable NVIDIA") ||
                                                              strstr(rec_errmsg(), "built without the GPU engine")),
              "bf16 tables on the GPU: %s", s ? rec_errmsg() : "accepted");
        rec_cuda_model_free(g);
    }
    rec_model_free(m);
    rec_model_config_free(&c);
}

/* Staging by hand-made blocks: a wide feature (int64 ids, narrowed), a list feature with empty
 * rows, a one-hot one (no starts staged); two windows in two slots, a batch across both, as
 * the GPU's gather reads them (rec_cuda_gather_host) against rec_cuda_pack of the same rows;
 * ids outside their table (wide and negative) named with the data row; windows and features
 * of 2^31 rows or ids refused before anything is read. */
static void test_stage(rec_pool *pool) {
    enum { F = 3, DN = 2, N0 = 5, N1 = 3 };
    const int64_t rows[F] = {100, 50, 7};
    rec_batch blk[2], want;
    rec_status s = REC_OK;
    const int n[2] = {N0, N1};
    for (int i = 0; i < 2; i++) {
        s |= rec_batch_init(&blk[i], n[i], DN, F, 3);
        blk[i].n = n[i];
        for (int r = 0; r < n[i]; r++) {
            blk[i].label[r] = (float)((r + i) % 2);
            for (int c = 0; c < DN; c++) blk[i].dense[r * DN + c] = (float)(100 * i + 10 * r + c);
        }
        for (int f = 0; f < F; f++) {
            rec_jagged *j = &blk[i].sparse[f];
            j->offsets[0] = 0;
            for (int r = 0; r < n[i]; r++) {
                const int L = f == 1 ? (r + i) % 3 : 1; /* f 1: 0, 1 or 2 ids, empty rows too */
                s |= rec_batch_reserve_nnz(&blk[i], f, j->offsets[r] + L, 0);
                for (int k = 0; k < L; k++) j->ids64[j->offsets[r] + k] = (7 * r + 3 * k + 11 * i + f) % rows[f];
                j->offsets[r + 1] = j->offsets[r] + L;
            }
            if (f > 0) s |= rec_batch_set_wide(&blk[i], f, 0); /* f 0 stays int64 */
        }
    }
    s |= rec_batch_init(&want, 6, DN, F, 3);
    CHECK(s == REC_OK, "stage blocks: %s", rec_errmsg());
    rec_cuda_host_stager h;
    CHECK(rec_cuda_host_stager_init(&h, 2, 8, DN, F, rows, "blocks", pool) == REC_OK, "a host stager");
    const uint8_t one[F] = {1, 0, 1};
    const int64_t row0[2] = {1000, 2000};
    CHECK(rec_cuda_host_stage(&h, 0, &blk[0], 1, one, row0) == REC_OK &&
              rec_cuda_host_stage(&h, 1, &blk[1], 1, one, row0 + 1) == REC_OK,
          "two windows staged: %s", rec_errmsg());
    CHECK(h.st[0].start_at[0] < 0 && h.st[0].start_at[1] >= 0 && h.st[0].start_at[2] < 0 && h.st[0].n == N0,
          "starts staged for the list feature only");
    /* Batch: window 0 rows 4, 0, 2, window 1 rows 1, 2, 0 (positions slot * 8 + row). */
    const uint32_t pos[6] = {4, 0, 2, 9, 10, 8};
    want.n = 0;
    for (int b = 0; b < 6; b++) s |= rec_batch_append_rows(&want, &blk[pos[b] / 8], pos[b] % 8, 1);
    int32_t off_w[F * 7], ids_w[64], off_g[F * 7], ids_g[64];
    float dense[6 * (DN + 1)];
    int64_t nnz_w[F], nnz_g[F];
    s |= rec_cuda_pack(&want, 0, F, rows, off_w, ids_w, NULL, nnz_w, NULL);
    CHECK(rec_cuda_gather_slots(pos, 6, h.slot_rows) == 3, "the batch reads slots 0 and 1");
    rec_cuda_gather_nnz(h.src, h.S, F, h.slot_rows, pos, 6, 3, nnz_g);
    rec_cuda_gather_host(h.src, h.slot, F, DN, h.slot_rows, pos, 6, off_g, ids_g, dense);
    int64_t total = 0;
    for (int f = 0; f < F; f++) total += nnz_w[f];
    CHECK(s == REC_OK && !memcmp(nnz_w, nnz_g, sizeof nnz_w) && !memcmp(off_w, off_g, sizeof off_w) &&
              !memcmp(ids_w, ids_g, (size_t)total * 4) && !memcmp(dense, want.dense, 6 * DN * 4) &&
              !memcmp(dense + 6 * DN, want.label, 6 * 4),
          "a batch across two windows: the gather gives what packing the same rows gives (%lld ids)", (long long)total);
    /* Refusals: the first feature in order holding an id outside its table, with its data row. */
    blk[1].sparse[2].ids32[2] = 7;  /* row 2 of block 1: table of 7 rows */
    blk[1].sparse[0].ids64[1] = -5; /* ... and feature 0, row 1 */
    CHECK_ERR(rec_cuda_host_stage(&h, 1, &blk[1], 1, one, row0 + 1), REC_EINVAL,
              "blocks: row 2001, sparse feature 0: id -5 is outside the table's 100 rows");
    blk[1].sparse[0].ids64[1] = 1;
    CHECK_ERR(rec_cuda_host_stage(&h, 1, &blk[1], 1, one, row0 + 1), REC_EINVAL,
              "blocks: row 2002, sparse feature 2: id 7 is outside the table's 7 rows");
    float wt[N0 * 3];
    blk[0].sparse[1].weights = wt;
    CHECK_ERR(rec_cuda_stage_plan(&h.st[0], &blk[0], 1, one), REC_EUNSUPPORTED, "feature 1 has weighted bags");
    blk[0].sparse[1].weights = NULL;
    rec_batch huge = blk[0];
    huge.n = INT32_MAX;
    CHECK_ERR(rec_cuda_stage_plan(&h.st[0], &huge, 1, one), REC_EINVAL, "a window of 2147483647 rows; staging takes fewer");
    int64_t offs[2] = {0, (int64_t)1 << 31};
    rec_jagged sp[F] = {blk[0].sparse[0], {.offsets = offs}, blk[0].sparse[2]};
    huge = (rec_batch){.n = 1, .cap = 1, .n_dense = DN, .n_sparse = F, .label = blk[0].label, .dense = blk[0].dense, .sparse = sp};
    CHECK_ERR(rec_cuda_stage_plan(&h.st[0], &huge, 1, one), REC_EINVAL, "feature 1 holds 2147483648 ids in a window of 1 rows");
    rec_cuda_host_stager_free(&h);
    CHECK_ERR(rec_cuda_host_stager_init(&h, REC_CUDA_STAGE_SLOTS + 1, 8, DN, F, rows, "blocks", pool), REC_EINVAL,
              "staging: 65 slots; it takes 1..64");
    rec_batch_free(&want), rec_batch_free(&blk[0]), rec_batch_free(&blk[1]);
}

int main(void) {
    test_config_check();
    const int rc = clirun_setup("rectrain_cuda_host");
    if (rc) return rc;
    test_sched_names();
    test_block_map();
    test_pack(NULL);
    rec_pool *pool = NULL;
    CHECK(rec_pool_init(&pool, 3) == REC_OK, "a pool: %s", rec_errmsg());
    if (pool) test_pack(pool);
    test_stage(NULL);
    if (pool) test_stage(pool);
    rec_pool_free(pool);
    test_plans();
    test_cli();
    clirun_cleanup();
    return check_report();
}
