/* libFuzzer target for sharding plan files (plan.h): any bytes go to rec_plan_parse for a fixed
 * model of N = 4 ranks and three tables of dim 8 (1000, 40 and 1 rows, named C1, C2, C3;
 * row-wise Adagrad, so a row's state is one float), in either form it reads: rectrain's
 * ({"format": "rectrain-plan", ...}) or TorchRec's ({"table_plans": ...}).
 *  - A plan that does not load returns REC_EFORMAT or REC_EINVAL (REC_ENOMEM aside), no plan,
 *    and a message that starts with the input's name and the JSON path ("fuzz.json: $...") or
 *    says where the JSON is not valid; a TorchRec plan is never refused by the structure
 *    check of the plan it converts to (that would be the importer's bug).
 *  - A plan that loads is of the model's shape and passes the library's own structure check;
 *    the executor's map (map.c) puts every row of every column part on the owner
 *    rec_plan_owner names, inside that owner's store, and no two rows in one place; the cost
 *    model (rec_plan_predict, on a fixed profile) gives finite costs whose memory is the map's
 *    rows and state, and a max step time no less than the plan's lower bound; saved
 *    (rec_plan_save) and loaded again (rec_plan_load), it is the same placement.
 * Anything else (a crash, a leak, UB, an abort below) is a bug. Seeds: tests/fuzz/seeds/
 * fuzz_shardplan (this model's plans of every kind as rec_plan_save writes them, and TorchRec
 * plans of every sharding type); rebuild the first after a format change with
 *   clang -DFUZZ_SHARDPLAN_SEEDS $CFLAGS tests/fuzz/fuzz_shardplan.c build-fuzz/libfuzz.a $LIBS -o seeds
 *   ./seeds tests/fuzz/seeds/fuzz_shardplan
 * (fuzz.sh's CFLAGS and LIBS). Keys: fuzz_shardplan.dict. Build and run:
 * scripts/fuzz.sh. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "rectrain/core.h"
#include "rectrain/plan.h"
#include "sharding_impl.h"

enum { N = 4, F = 3, E = 8, B = 64 };
static const int64_t ROWS[F] = {1000, 40, 1};
static const char *const NAMES[F] = {"C1", "C2", "C3"};
static const rec_plan_model MODEL = {N, F, ROWS, E, REC_SPARSE_ROWWISE_ADAGRAD, B, 100, NAMES, 0};

/* The profile every loaded plan is costed on: 8 global batches, one id per table per row,
 * table C1 skewed (row 0 in every slice), C2 uniform, C3 its one row. Made once. */
static const rec_plan_profile *profile(void) {
    static rec_plan_profile *p;
    if (p) return p;
    rec_batch b;
    if (rec_plan_profile_init(&p, &MODEL) != REC_OK || rec_batch_init(&b, B, 0, F, 1) != REC_OK) abort();
    rec_rng r;
    rec_rng_seed(&r, 7, 0);
    b.n = B;
    for (int k = 0; k < 8; k++) {
        for (int f = 0; f < F; f++)
            for (int i = 0; i < B; i++) {
                const double u = rec_rng_uniform(&r);
                b.sparse[f].offsets[i + 1] = i + 1;
                b.sparse[f].ids64[i] = f == 0 ? (i % 8 ? (int64_t)(ROWS[0] * u * u * u) : 0) : f == 1 ? (int64_t)(u * ROWS[1]) : 0;
            }
        if (rec_plan_profile_add(p, &b) != REC_OK) abort();
    }
    rec_batch_free(&b);
    return p;
}

static const rec_plan_hw *hw(void) {
    static rec_plan_hw h;
    if (h.bw_p2p == 0) {
        rec_plan_hw_default(&h);
        h.slice_s = 2e-8; /* every term of the step time counts */
        h.get_s = 1e-7;
        h.ranks_per_core = 2;
    }
    return &h;
}

/* The executor's map of p: every row of every part where rec_plan_owner says, inside its
 * owner's store (or the replica store), each (store, row) used once; the stores' rows and
 * their state are the memory rec_plan_predict counted. */
static void check_map(const rec_plan *p) {
    xmap m;
    if (rec__xmap_build(&m, p) != REC_OK) abort();
    int64_t first[N + 2] = {0}; /* the first row of store j (rank j; N: the replica store) */
    for (int j = 0; j <= N; j++) first[j + 1] = first[j] + (j < N ? m.rows[j] : m.rep_rows);
    unsigned char *used = calloc((size_t)first[N + 1] + 1, 1);
    if (!used) abort();
    for (int f = 0; f < F; f++) {
        int col0[E + 1];
        const int C = rec_plan_col_parts(p, f, col0);
        for (int c = 0; c < C; c++)
            for (int64_t r = 0; r < ROWS[f]; r++) {
                const xloc x = rec__xmap_locate(&m, f, c, r);
                if (x.owner != rec_plan_owner(p, f, c, r)) abort();
                const int rep = x.owner == REC_PLAN_EVERY, store = rep ? N : x.owner;
                const int64_t floats = rep ? m.rep_rows * E : m.floats[store], width = rep ? E : col0[c + 1] - col0[c];
                if (x.srow < 0 || x.srow >= first[store + 1] - first[store] || x.off < 0 || x.off + width > floats)
                    abort();
                if (used[first[store] + x.srow]++) abort(); /* two rows in one place */
            }
    }
    free(used);
    const rec_plan_cost *k = rec_plan_costs(p);
    for (int j = 0; j < N; j++) {
        const double want = 4.0 * (double)(m.floats[j] + m.rows[j] + m.rep_rows * (E + 1));
        if (fabs(k[j].mem_bytes - want) > 1e-9 * want) abort();
    }
    rec__xmap_free(&m);
}

/* A loaded plan: the model's shape and the library's own checks (above). */
static void check_plan(rec_plan *p) {
    if (rec_plan_ranks(p) != N || rec_plan_tables(p) != F || rec_plan_dim(p) != E) abort();
    if ((int)rec_plan_get_kind(p) < 0 || rec_plan_get_kind(p) > REC_PLAN_TORCHREC) abort();
    for (int f = 0; f < F; f++)
        if (rec_plan_rows(p, f) != ROWS[f]) abort();
    if (rec__plan_check(p, "loaded") != REC_OK) abort();
    if (rec_plan_predict(p, profile(), hw()) != REC_OK) abort();
    double worst = 0;
    for (int j = 0; j < N; j++) {
        const rec_plan_cost *k = &rec_plan_costs(p)[j];
        const double v[] = {k->mem_bytes, k->lookups, k->ids, k->fetched, k->sent, k->recv, k->seconds};
        for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
            if (!isfinite(v[i]) || v[i] < 0) abort();
        worst = fmax(worst, k->seconds);
    }
    if (!(rec_plan_lower_bound(p) <= worst * (1 + 1e-9))) abort(); /* plan.c: no plan beats it */
    check_map(p);
}

/* Saved and loaded again: the same placement and kind. */
static void check_reload(const rec_plan *p) {
    static char path[64];
    if (!path[0]) snprintf(path, sizeof path, "/tmp/fuzz_shardplan.%d.json", (int)getpid());
    rec_plan *l = NULL;
    if (rec_plan_save(p, path) != REC_OK || rec_plan_load(&l, path, &MODEL) != REC_OK) abort();
    if (rec_plan_digest(l) != rec_plan_digest(p) || rec_plan_get_kind(l) != rec_plan_get_kind(p)) abort();
    for (int f = 0; f < F; f++) {
        int a[E + 1], b[E + 1];
        const int C = rec_plan_col_parts(p, f, a);
        if (rec_plan_col_parts(l, f, b) != C || memcmp(a, b, sizeof(int) * (size_t)(C + 1))) abort();
    }
    rec_plan_free(l);
    remove(path);
}

/* Whether the input is TorchRec's form ({"table_plans": ...}). */
static int torchrec_form(const uint8_t *data, size_t size) {
    cJSON *root = cJSON_ParseWithLength((const char *)data, size);
    const int yes = cJSON_GetObjectItemCaseSensitive(root, "table_plans") != NULL;
    cJSON_Delete(root);
    return yes;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    rec_plan *p = (rec_plan *)1;
    const rec_status st = rec_plan_parse(&p, (const char *)data, size, "fuzz.json", &MODEL);
    if (st != REC_OK) {
        if (p || (st != REC_EFORMAT && st != REC_EINVAL && st != REC_ENOMEM)) abort();
        const char *msg = rec_errmsg();
        if (strncmp(msg, "fuzz.json: ", 11)) abort(); /* names the input */
        if (st != REC_ENOMEM && msg[11] != '$' && strncmp(msg + 11, "not valid JSON", 14)) abort(); /* and the JSON path */
        /* the structure check refused a converted TorchRec plan: the importer built it wrong */
        if (!strncmp(msg + 11, "$.tables[", 9) && torchrec_form(data, size)) abort();
        return 0;
    }
    check_plan(p);
    check_reload(p);
    rec_plan_free(p);
    return 0;
}

#ifdef FUZZ_SHARDPLAN_SEEDS
/* Writes DIR/KIND.json (DIR: the argument): the model's plan of every kind rec_plan_build
 * makes, as saved. */
int main(int argc, char **argv) {
    if (argc != 2) return 2;
    for (int k = 0; k < REC_PLAN_KINDS; k++) {
        rec_plan *p = NULL;
        char path[512];
        snprintf(path, sizeof path, "%s/%s.json", argv[1], rec_plan_kind_name((rec_plan_kind)k));
        if (rec_plan_build(&p, (rec_plan_kind)k, profile(), hw()) != REC_OK || rec_plan_save(p, path) != REC_OK) {
            fprintf(stderr, "%s\n", rec_errmsg());
            return 1;
        }
        rec_plan_free(p);
    }
    return 0;
}
#endif
