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
    CHECK(run("train --precision fp16") == 2 && strstr(out, "--precision fp16: want fp32 or bf16"), "bad precision: %s", out);
    CHECK(run("train --precision bf16 --steps 1") == 1 && strstr(out, "--precision bf16 is for --device cuda"),
          "bf16 on the CPU: %s", out);
    CHECK(run("bench train --precision bf16") == 2 && strstr(out, "--precision bf16 is for --device cuda"),
          "bench bf16 on the CPU: %s", out);
    if (!have_gpu) {
        const int rt = run("train --device cuda --steps 1");
        CHECK(rt == 1 && strstr(out, "no NVIDIA"), "train --device cuda without a GPU says why (rc %d): %s", rt, out);
        const int rc = run("bench embed --device cuda --model B");
        CHECK(rc == 1 && (strstr(out, "no NVIDIA") || strstr(out, "without the GPU engine")),
              "--device cuda without a GPU says why (rc %d): %s", rc, out);
    }
}

int main(void) {
    const int rc = clirun_setup("rectrain_cuda_host");
    if (rc) return rc;
    test_sched_names();
    test_block_map();
    test_plans();
    test_cli();
    clirun_cleanup();
    return check_report();
}
