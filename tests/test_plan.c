/* Sharding plans (plan.h): the profile, every planner's placement, the cost model against
 * counts made by hand, OPER against the simple plans, plan files with each rejection, and
 * TorchRec's plans read, scored and refused. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "rectrain/core.h"
#include "rectrain/plan.h"
#include "../src/sharding/sharding_impl.h" /* the executor's map (test_xmap) */

enum { F = 3, E = 8, B = 64 };
static const int64_t ROWS[F] = {1000, 40, 5};

/* A global batch of B rows, one id per feature: table 0 Zipf-like skewed (row 0 in every rank's
 * slice), table 1 uniform, table 2 always row 3. */
static void fill(rec_batch *b, rec_rng *r) {
    b->n = B;
    for (int f = 0; f < F; f++) {
        rec_jagged *j = &b->sparse[f];
        for (int i = 0; i <= B; i++) j->offsets[i] = i;
        for (int i = 0; i < B; i++) {
            int64_t id = f == 0 ? (i % 8 == 0 ? 0 : (int64_t)(1000 * pow(rec_rng_uniform(r), 3))) % 1000
                         : f == 1 ? (int64_t)rec_rng_below(r, 40) : 3;
            j->ids64[i] = id;
        }
    }
}

static rec_plan_profile *profile(int N, rec_sparse_opt_kind opt, int batches) {
    rec_plan_model m = {N, F, ROWS, E, opt, B, 100, NULL, 0};
    rec_plan_profile *p = NULL;
    CHECK(rec_plan_profile_init(&p, &m) == REC_OK, "%s", rec_errmsg());
    rec_batch b;
    rec_batch_init(&b, B, 0, F, 1);
    rec_rng r;
    rec_rng_seed(&r, 7, 0);
    for (int k = 0; k < batches; k++) {
        fill(&b, &r);
        CHECK(rec_plan_profile_add(p, &b) == REC_OK, "%s", rec_errmsg());
    }
    rec_batch_free(&b);
    return p;
}

static double max_sec(const rec_plan *p) {
    double x = 0;
    for (int j = 0; j < rec_plan_ranks(p); j++) x = fmax(x, rec_plan_costs(p)[j].seconds);
    return x;
}

static void test_kinds(void) {
    for (int k = 0; k < REC_PLAN_KINDS; k++)
        CHECK(rec_plan_kind_from_name(rec_plan_kind_name((rec_plan_kind)k)) == k, "kind %d", k);
    CHECK(rec_plan_kind_from_name("diagonal") == -1, "unknown kind");
    CHECK(rec_plan_kind_from_name("torchrec") == REC_PLAN_TORCHREC, "torchrec: read, not built");
}

/* The simple plans place rows where their definitions say. */
static void test_placements(void) {
    const int N = 4;
    rec_plan_profile *prof = profile(N, REC_SPARSE_SGD, 4);
    rec_plan_hw hw;
    rec_plan_hw_default(&hw);
    rec_plan *p = NULL;
    CHECK(rec_plan_build(&p, REC_PLAN_ROW, prof, &hw) == REC_OK, "%s", rec_errmsg());
    int ok = 1;
    for (int f = 0; f < F; f++)
        for (int64_t r = 0; r < ROWS[f]; r++) {
            const int o = rec_plan_owner(p, f, 0, r);
            ok &= (int64_t)o * ROWS[f] / N <= r && r < (int64_t)(o + 1) * ROWS[f] / N;
        }
    CHECK(ok, "row-wise: row r of R on rank floor(r N / R)'s range");
    rec_plan_free(p);
    CHECK(rec_plan_build(&p, REC_PLAN_COLUMN, prof, &hw) == REC_OK, "%s", rec_errmsg());
    int col0[E + 1];
    CHECK(rec_plan_col_parts(p, 0, col0) == N && col0[1] == 2 && col0[N] == E, "column: 4 parts of 2 columns");
    CHECK(rec_plan_owner(p, 1, 0, 0) == 0 && rec_plan_owner(p, 1, 3, 39) == 3, "column: part c on rank c");
    rec_plan_free(p);
    CHECK(rec_plan_build(&p, REC_PLAN_REPLICATED, prof, &hw) == REC_OK, "%s", rec_errmsg());
    CHECK(rec_plan_owner(p, 2, 0, 4) == REC_PLAN_EVERY, "replicated everywhere");
    rec_plan_free(p);
    CHECK(rec_plan_build(&p, REC_PLAN_TABLE, prof, &hw) == REC_OK, "%s", rec_errmsg());
    ok = 1;
    for (int f = 0; f < F; f++)
        for (int64_t r = 1; r < ROWS[f]; r++) ok &= rec_plan_owner(p, f, 0, r) == rec_plan_owner(p, f, 0, 0);
    CHECK(ok, "table-wise: a table on one rank");
    CHECK(rec_plan_owner(p, 0, 0, 0) != rec_plan_owner(p, 1, 0, 0), "table-wise: the two busiest tables apart");
    rec_plan_free(p);
    rec_plan_profile_free(prof);
}

/* Eq. 2-3 on a case counted by hand: 2 ranks, row-wise, one batch. Table 2 (rows 0-1 on rank
 * 0, 2-4 on rank 1) is always row 3: both ranks use it, rank 1 reads it twice (once for rank
 * 0), rank 0 fetches E floats and sends back an id and E floats. */
static void test_costs(void) {
    rec_plan_profile *prof = profile(2, REC_SPARSE_SGD, 1);
    rec_plan_hw hw;
    rec_plan_hw_default(&hw);
    rec_plan *p = NULL;
    CHECK(rec_plan_build(&p, REC_PLAN_ROW, prof, &hw) == REC_OK, "%s", rec_errmsg());
    const rec_plan_cost *c = rec_plan_costs(p);
    double total = 0;
    for (int j = 0; j < 2; j++) total += c[j].lookups;
    /* every (slice, distinct id) pair is one lookup */
    double want = 0;
    rec_batch b;
    rec_batch_init(&b, B, 0, F, 1);
    rec_rng r;
    rec_rng_seed(&r, 7, 0);
    fill(&b, &r);
    for (int f = 0; f < F; f++)
        for (int s = 0; s < 2; s++) {
            char seen[1000] = {0};
            for (int i = s * B / 2; i < (s + 1) * B / 2; i++) want += !seen[b.sparse[f].ids64[i]]++;
        }
    rec_batch_free(&b);
    CHECK(fabs(total - want) < 1e-9, "lookups %g, distinct ids per slice %g", total, want);
    CHECK(fabs(c[0].mem_bytes - (500 + 20 + 2) * E * 4.0) < 1e-6, "rank 0 memory %g", c[0].mem_bytes);
    const double dense = 2 * 0.5 * 4 * 100;
    rec_plan_free(p);
    /* one table alone: only table 2's row 3, rank 1 serves rank 0 */
    rec_plan_model m = {2, 1, ROWS + 2, E, REC_SPARSE_SGD, B, 100, NULL, 0};
    rec_plan_profile *q = NULL;
    rec_plan_profile_init(&q, &m);
    rec_batch_init(&b, B, 0, 1, 1);
    b.n = B;
    for (int i = 0; i <= B; i++) b.sparse[0].offsets[i] = i;
    for (int i = 0; i < B; i++) b.sparse[0].ids64[i] = 3;
    rec_plan_profile_add(q, &b);
    CHECK(rec_plan_build(&p, REC_PLAN_ROW, q, &hw) == REC_OK, "%s", rec_errmsg());
    c = rec_plan_costs(p);
    CHECK(c[1].lookups == 2 && c[0].lookups == 0, "lookups %g %g", c[0].lookups, c[1].lookups);
    CHECK(fabs(c[1].sent - (E * 4 + dense)) < 1e-9 && fabs(c[0].recv - (E * 4 + dense)) < 1e-9, "rows %g %g", c[1].sent,
          c[0].recv);
    CHECK(fabs(c[0].sent - (8 + E * 4 + dense)) < 1e-9 && fabs(c[1].recv - (8 + E * 4 + dense)) < 1e-9, "grads %g %g",
          c[0].sent, c[1].recv);
    /* the bound: 2 lookups over 2 ranks; the row moved the cheaper way, replicated (an
     * all-reduce of E floats, 2 (N-1)/N of them each way at bw_ar) rather than fetched by one
     * rank (E floats in, E floats of gradient out, at bw_p2p, over 2 ranks) */
    const double lb = 2 * hw.lookup_s / 2 + fmin(2 * 0.5 * 8.0 * E / hw.bw_p2p / 2, 2 * 0.5 * 4.0 * E / hw.bw_ar);
    CHECK(fabs(rec_plan_lower_bound(p) - lb) < 1e-15, "lower bound %g, by hand %g", rec_plan_lower_bound(p), lb);
    /* the executor's terms: 32 ids a slice, rank 0 fetches row 3 once; two ranks a core */
    CHECK(c[0].ids == B / 2 && c[1].ids == B / 2 && c[0].fetched == 1 && c[1].fetched == 0, "ids %g %g, fetched %g %g",
          c[0].ids, c[1].ids, c[0].fetched, c[1].fetched);
    const double base0 = c[0].seconds, base1 = c[1].seconds;
    rec_plan_hw w = hw;
    w.slice_s = 1e-6, w.get_s = 1e-7, w.ranks_per_core = 2;
    CHECK(rec_plan_predict(p, q, &w) == REC_OK, "%s", rec_errmsg());
    c = rec_plan_costs(p);
    CHECK(fabs(c[0].seconds - (base0 + 2 * (B / 2) * 1e-6 + 1e-7)) < 1e-15 &&
          fabs(c[1].seconds - (base1 + 2 * (B / 2) * 1e-6 + 2 * hw.lookup_s)) < 1e-15,
          "slices, gets and shared cores: %g %g", c[0].seconds, c[1].seconds);
    CHECK(c[0].seconds >= rec_plan_lower_bound(p) && c[1].seconds >= rec_plan_lower_bound(p), "the bound with them");
    rec_plan_free(p);
    rec_plan_profile_free(q);
    /* bf16 tables: the row travels and is held as 2-byte values; its gradient, the replicas'
     * all-reduce and the optimizer state stay fp32 */
    m.bf16 = 1, m.opt = REC_SPARSE_ROWWISE_ADAGRAD;
    rec_plan_profile_init(&q, &m);
    rec_plan_profile_add(q, &b);
    CHECK(rec_plan_build(&p, REC_PLAN_ROW, q, &hw) == REC_OK, "%s", rec_errmsg());
    c = rec_plan_costs(p);
    CHECK(fabs(c[1].sent - (E * 2 + dense)) < 1e-9 && fabs(c[0].recv - (E * 2 + dense)) < 1e-9, "bf16 rows %g %g",
          c[1].sent, c[0].recv);
    CHECK(fabs(c[0].sent - (8 + E * 4 + dense)) < 1e-9, "bf16 tables' gradients are fp32: %g", c[0].sent);
    CHECK(fabs(c[0].mem_bytes - (ROWS[2] / 2) * (E * 2.0 + 4)) < 1e-6, "bf16 rows held: %g", c[0].mem_bytes);
    const double lb16 = 2 * hw.lookup_s / 2 + fmin(2 * 0.5 * 6.0 * E / hw.bw_p2p / 2, 2 * 0.5 * 4.0 * E / hw.bw_ar);
    CHECK(fabs(rec_plan_lower_bound(p) - lb16) < 1e-15, "bf16 lower bound %g, by hand %g", rec_plan_lower_bound(p), lb16);
    rec_plan_free(p);
    rec_plan_profile_free(q);
    rec_batch_free(&b);
    rec_plan_profile_free(prof);
}

/* The cache terms (plan.c che_misses): a table of 1000 rows each used once a batch, rows
 * 0..499 by rank 0's slice; row-wise, rank 0 owns them, each at rate A = 1. Under an LRU of
 * 250 rows Che's T solves 500 (1 - exp(-T)) = 250: half of its records miss, 250 a step; the
 * other rank misses as many, and a rank fetching a row misses where its owner does: each
 * rank's fetches (A / N of each other rank's row) miss 250 / 2. All rows in cache: none; the
 * replicated plan: none to miss, and 1000 replicas' upkeep on every rank. */
static void test_cache_terms(void) {
    enum { R = 1000 };
    const int64_t rows[1] = {R};
    rec_plan_model m = {2, 1, rows, E, REC_SPARSE_SGD, R, 100, NULL, 0};
    rec_plan_profile *q = NULL;
    CHECK(rec_plan_profile_init(&q, &m) == REC_OK, "%s", rec_errmsg());
    rec_batch b;
    rec_batch_init(&b, R, 0, 1, 1);
    b.n = R;
    for (int i = 0; i <= R; i++) b.sparse[0].offsets[i] = i;
    for (int i = 0; i < R; i++) b.sparse[0].ids64[i] = i;
    CHECK(rec_plan_profile_add(q, &b) == REC_OK, "%s", rec_errmsg());
    rec_plan_hw hw;
    rec_plan_hw_default(&hw);
    rec_plan *p = NULL, *rep = NULL;
    CHECK(rec_plan_build(&p, REC_PLAN_ROW, q, &hw) == REC_OK, "%s", rec_errmsg());
    const double base = p ? rec_plan_costs(p)[0].seconds : 0;
    hw.cache_bytes = 250.0 * E * 4, hw.miss_s = 1e-7, hw.rep_row_s = 1e-8, hw.skew_s = 1e-4;
    CHECK(p && rec_plan_predict(p, q, &hw) == REC_OK, "%s", rec_errmsg());
    const rec_plan_cost *c = p ? rec_plan_costs(p) : NULL;
    CHECK(c && fabs(c[0].misses - 250) < 1e-6 && fabs(c[1].misses - 250) < 1e-6 && fabs(c[0].fetch_misses - 125) < 1e-6,
          "misses %g %g, fetched %g", c ? c[0].misses : 0, c ? c[1].misses : 0, c ? c[0].fetch_misses : 0);
    CHECK(c && fabs(c[0].seconds - (base + 375 * 1e-7 + 1e-4)) < 1e-12, "seconds %g, by hand %g", c ? c[0].seconds : 0,
          base + 375 * 1e-7 + 1e-4);
    CHECK(c && c[0].seconds >= rec_plan_lower_bound(p), "the bound holds");
    hw.cache_bytes = 500.0 * E * 4; /* its 500 rows fit */
    CHECK(p && rec_plan_predict(p, q, &hw) == REC_OK && rec_plan_costs(p)[0].misses == 0 &&
              rec_plan_costs(p)[0].fetch_misses == 0, "rows that fit do not miss");
    CHECK(rec_plan_build(&rep, REC_PLAN_REPLICATED, q, &hw) == REC_OK && rec_plan_costs(rep)[1].misses == 0 &&
              rec_plan_costs(rep)[1].rep_rows == R, "%s", rec_errmsg());
    rec_plan_free(p);
    rec_plan_free(rep);
    rec_batch_free(&b);
    rec_plan_profile_free(q);
    /* the machine's own figures: a replica's upkeep of some ns, a cache no larger than the
     * largest set timed, a miss no cheaper than a hit */
    rec_plan_hw u;
    rec_plan_hw_default(&u);
    rec_plan_measure_units(&u, 16, REC_SPARSE_ADAGRAD, 2);
    CHECK(u.rep_row_s > 0 && u.rep_row_s < 1e-6 && u.cache_bytes >= 0 && u.cache_bytes <= 1024.0 * 1024 * 1024 &&
              u.miss_s >= 0 && (u.cache_bytes == 0 || u.miss_s > 0),
          "measured: %g s a replica, %g bytes of cache, %g s a miss", u.rep_row_s, u.cache_bytes, u.miss_s);
}

/* OPER beats the simple plans on skewed access and replicates the row every rank uses. */
static void test_oper(void) {
    const int N = 8;
    rec_plan_profile *prof = profile(N, REC_SPARSE_ROWWISE_ADAGRAD, 16);
    rec_plan_hw hw;
    rec_plan_hw_default(&hw);
    rec_plan *o = NULL, *p = NULL;
    CHECK(rec_plan_build(&o, REC_PLAN_OPER, prof, &hw) == REC_OK, "%s", rec_errmsg());
    CHECK(rec_plan_owner(o, 2, 0, 3) == REC_PLAN_EVERY && rec_plan_owner(o, 0, 0, 0) == REC_PLAN_EVERY,
          "rows every rank uses are replicated");
    for (int k = REC_PLAN_TABLE; k <= REC_PLAN_GREEDY; k++) {
        CHECK(rec_plan_build(&p, (rec_plan_kind)k, prof, &hw) == REC_OK, "%s", rec_errmsg());
        CHECK(max_sec(o) < max_sec(p), "oper %g s, %s %g s", max_sec(o), rec_plan_kind_name((rec_plan_kind)k), max_sec(p));
        CHECK(max_sec(p) >= rec_plan_lower_bound(p), "%s above the lower bound", rec_plan_kind_name((rec_plan_kind)k));
        rec_plan_free(p);
    }
    CHECK(max_sec(o) >= rec_plan_lower_bound(o), "never below the lower bound");
    /* memory that cannot hold the tables */
    hw.mem_bytes = 1000;
    CHECK_ERR(rec_plan_build(&p, REC_PLAN_TABLE, prof, &hw), REC_EINVAL, "fits on no rank");
    CHECK_ERR(rec_plan_build(&p, REC_PLAN_TORCHREC, prof, &hw), REC_EINVAL, "dev/torchrec_plan.py");
    CHECK_ERR(rec_plan_build(&p, REC_PLAN_ROW, prof, &hw), REC_EINVAL, "rank 0 would hold");
    rec_plan_free(o);
    rec_plan_profile_free(prof);
}

static rec_status parse(const char *text, int N) {
    rec_plan_model m = {N, F, ROWS, E, REC_SPARSE_SGD, B, 0, NULL, 0};
    rec_plan *p = NULL;
    rec_status s = rec_plan_parse(&p, text, strlen(text), "p.json", &m);
    rec_plan_free(p);
    return s;
}

static void test_files(void) {
    rec_plan_profile *prof = profile(3, REC_SPARSE_SGD, 8);
    rec_plan_hw hw;
    rec_plan_hw_default(&hw);
    rec_plan *o = NULL, *l = NULL;
    CHECK(rec_plan_build(&o, REC_PLAN_OPER, prof, &hw) == REC_OK, "%s", rec_errmsg());
    char path[] = "/tmp/rectrain_plan_XXXXXX";
    const int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    CHECK(rec_plan_save(o, path) == REC_OK, "%s", rec_errmsg());
    rec_plan_model m = {3, F, ROWS, E, REC_SPARSE_SGD, B, 100, NULL, 0};
    CHECK(rec_plan_load(&l, path, &m) == REC_OK, "%s", rec_errmsg());
    int same = l != NULL;
    for (int f = 0; f < F && same; f++)
        for (int64_t r = 0; r < ROWS[f]; r++) same &= rec_plan_owner(o, f, 0, r) == rec_plan_owner(l, f, 0, r);
    CHECK(same, "a saved plan loads with every owner as it was");
    rec_plan_free(l);
    m.ranks = 4;
    CHECK_ERR(rec_plan_load(&l, path, &m), REC_EINVAL, "the plan is for 3 ranks and this job has 4");
    remove(path);
    rec_plan_free(o);
    rec_plan_profile_free(prof);

    const char *head = "{\"format\": \"rectrain-plan\", \"version\": 1, \"kind\": \"row\", \"ranks\": 2, \"dim\": 8, ";
    char t[1024];
#define T(tables) (snprintf(t, sizeof t, "%s\"tables\": [%s]}", head, tables), t)
    const char *ok3 = "{\"rows\": 5, \"parts\": [{\"cols\": [0, 8], \"segments\": [[0, 1]], \"hot\": []}]}";
    char good[600];
    snprintf(good, sizeof good,
             "{\"rows\": 1000, \"parts\": [{\"cols\": [0, 8], \"segments\": [[0, 0], [500, 1]], \"hot\": [[7, -1]]}]}, "
             "{\"rows\": 40, \"parts\": [{\"cols\": [0, 4], \"segments\": [[0, 0]], \"hot\": []}, {\"cols\": [4, 8], "
             "\"segments\": [[0, 1]], \"hot\": []}]}, %s", ok3);
    CHECK(parse(T(good), 2) == REC_OK, "%s", rec_errmsg());
    CHECK_ERR(parse("{\"format\": \"x\"}", 2), REC_EFORMAT, "$.format");
    CHECK_ERR(parse("[1, 2", 2), REC_EFORMAT, "not valid JSON");
    CHECK_ERR(parse(T(good), 3), REC_EINVAL, "$.ranks");
    char bad[800];
#define BAD(from, to, needle)                                                       \
    do {                                                                            \
        snprintf(bad, sizeof bad, "%s", good);                                      \
        char *at = strstr(bad, from);                                               \
        memmove(at + strlen(to), at + strlen(from), strlen(at + strlen(from)) + 1); \
        memcpy(at, to, strlen(to));                                                 \
        CHECK_ERR(parse(T(bad), 2), strstr(needle, "expected") ? REC_EFORMAT : REC_EINVAL, needle); \
    } while (0)
    BAD("\"rows\": 1000", "\"rows\": 999", "$.tables[0].rows");
    BAD("[500, 1]", "[500, 2]", "$.tables[0].parts[0].segments[1][1]");
    BAD("[500, 1]", "[1000, 1]", "$.tables[0].parts[0].segments[1][0]");
    /* the structure check's refusals name the JSON path too (fuzz_shardplan) */
    BAD("[0, 0], [500, 1]", "[0, 0], [0, 1]", "p.json: $.tables[0].parts[0].segments[1]: table 0 part 0 segment 1 starts at row 0");
    BAD("[[0, 0], [500", "[[1, 0], [500", "$.tables[0].parts[0].segments: table 0 part 0: its segments must start at row 0");
    BAD("[[7, -1]]", "[[7, 0], [6, 1]]", "p.json: $.tables[0].parts[0].hot[1]: table 0 part 0 hot row 1 is row 6; hot rows must rise");
    BAD("\"segments\": [[0, 1]], \"hot\": []}]}, {\"rows\": 5", "\"segments\": [[0, -1]], \"hot\": []}]}, {\"rows\": 5",
        "$.tables[1].parts[1].segments[0]: table 1 part 1 segment 0 has owner -1; owners are ranks 0..1 (a table cut into columns is not replicated)");
    BAD("\"cols\": [4, 8]", "\"cols\": [5, 8]", "p.json: $.tables[1].parts[1].cols: table 1 part 1 has columns [5, 8); the parts must cut [0, 8)");
    BAD("\"hot\": [[7, -1]]", "\"hot\": [[7]]", "expected a [row, owner] pair");
    /* numbers no int64_t holds: out of range, refused before any cast (found by fuzz_shardplan) */
    BAD("\"rows\": 1000", "\"rows\": 1e19", "$.tables[0].rows is 10000000000000000000; it must be in [1, 9223372036854775807]");
    BAD("\"rows\": 1000", "\"rows\": 1e999", "$.tables[0].rows is inf; it must be in [1, ");
    BAD("[500, 1]", "[-1e300, 1]", "$.tables[0].parts[0].segments[1][0] is -1000000000000000052504760255204420248704468");
    BAD("[500, 1]", "[500, 9223372036854775807]", "$.tables[0].parts[0].segments[1][1] is 9223372036854775808; it must be in [-1, 1]");
#undef BAD
#undef T
}

/* TorchRec's plans (plan_torchrec.c): every sharding type maps to the placement it names, on
 * the model F = 3 tables (1000, 40, 5 rows) of dim 8, N = 4. */
static rec_status parse_tr(const char *text, rec_plan **out, const char *const *names) {
    rec_plan_model m = {4, F, ROWS, E, REC_SPARSE_SGD, B, 0, names, 0};
    *out = NULL;
    return rec_plan_parse(out, text, strlen(text), "tr.json", &m);
}

#define SH(rank, r0, c0, nr, nc) "{\"rank\": " #rank ", \"offsets\": [" #r0 ", " #c0 "], \"sizes\": [" #nr ", " #nc "]}"

static void test_torchrec(void) {
    /* t0 row-wise in uneven blocks, t1 column-wise (table_column_wise) on ranks 3 and 1, t2 data parallel */
    const char *good = "{\"table_plans\": {"
        "\"t0\": {\"sharding_type\": \"row_wise\", \"ranks\": [0, 1, 2, 3], \"shards\": [" SH(0, 0, 0, 300, 8) ", "
        SH(1, 300, 0, 300, 8) ", " SH(2, 600, 0, 300, 8) ", " SH(3, 900, 0, 100, 8) "]}, "
        "\"t1\": {\"sharding_type\": \"table_column_wise\", \"ranks\": [3, 1], \"shards\": [" SH(3, 0, 0, 40, 4) ", "
        SH(1, 0, 4, 40, 4) "]}, "
        "\"t2\": {\"sharding_type\": \"data_parallel\", \"ranks\": [0, 1, 2, 3], \"shards\": null}}}";
    rec_plan *p = NULL;
    CHECK(parse_tr(good, &p, NULL) == REC_OK, "%s", rec_errmsg());
    if (p) {
        CHECK(rec_plan_get_kind(p) == REC_PLAN_TORCHREC, "kind torchrec");
        CHECK(rec_plan_owner(p, 0, 0, 299) == 0 && rec_plan_owner(p, 0, 0, 300) == 1 && rec_plan_owner(p, 0, 0, 899) == 2 &&
              rec_plan_owner(p, 0, 0, 999) == 3, "row-wise: the uneven blocks as given");
        int col0[E + 1];
        CHECK(rec_plan_col_parts(p, 1, col0) == 2 && col0[1] == 4, "column-wise: two parts of 4 columns");
        CHECK(rec_plan_owner(p, 1, 0, 7) == 3 && rec_plan_owner(p, 1, 1, 39) == 1, "column parts on ranks 3 and 1");
        CHECK(rec_plan_owner(p, 2, 0, 4) == REC_PLAN_EVERY, "data parallel: replicated");
        /* scored: the same cost model as a built plan; saved, it loads back as the same placement */
        rec_plan_profile *prof = profile(4, REC_SPARSE_SGD, 4);
        rec_plan_hw hw;
        rec_plan_hw_default(&hw);
        CHECK(rec_plan_predict(p, prof, &hw) == REC_OK, "%s", rec_errmsg());
        double mem1 = 0;
        for (int j = 0; j < 4; j++) mem1 += rec_plan_costs(p)[j].mem_bytes;
        CHECK(fabs(mem1 - (1000 + 40 + 4 * 5) * E * 4.0) < 1e-6, "memory: each row once, t2 on every rank (%g)", mem1);
        CHECK(fabs(rec_plan_costs(p)[3].mem_bytes - (100 + 40 * 0.5 + 5) * E * 4.0) < 1e-6, "rank 3 holds %g",
              rec_plan_costs(p)[3].mem_bytes);
        char path[] = "/tmp/rectrain_trplan_XXXXXX";
        const int fd = mkstemp(path);
        if (fd >= 0) close(fd);
        rec_plan *l = NULL;
        rec_plan_model m = {4, F, ROWS, E, REC_SPARSE_SGD, B, 0, NULL, 0};
        CHECK(rec_plan_save(p, path) == REC_OK && rec_plan_load(&l, path, &m) == REC_OK, "%s", rec_errmsg());
        CHECK(l && rec_plan_digest(l) == rec_plan_digest(p) && rec_plan_get_kind(l) == REC_PLAN_TORCHREC,
              "a converted plan saves and loads as itself");
        rec_plan_free(l);
        remove(path);
        rec_plan_profile_free(prof);
        rec_plan_free(p);
    }
    /* table-wise whole tables by the spec's names; a grid (table_row_wise and columns) joins
     * equal column intervals into one part */
    static const char *const names[F] = {"C1", "C2", "C3"};
    const char *named = "{\"table_plans\": {"
        "\"C1\": {\"sharding_type\": \"table_row_wise\", \"ranks\": [0, 1], \"shards\": [" SH(0, 0, 0, 500, 2) ", "
        SH(0, 0, 2, 500, 6) ", " SH(1, 500, 0, 500, 8) "]}, "
        "\"t1\": {\"sharding_type\": \"table_wise\", \"ranks\": [2], \"shards\": [" SH(2, 0, 0, 40, 8) "]}, "
        "\"C3\": {\"sharding_type\": \"column_wise\", \"ranks\": [1, 2], \"shards\": [" SH(1, 0, 0, 5, 3) ", "
        SH(2, 0, 3, 5, 5) ", " SH(3, 5, 0, 0, 8) "]}}}"; /* an empty shard, as TorchRec gives ranks beyond R */
    CHECK(parse_tr(named, &p, names) == REC_OK, "%s", rec_errmsg());
    if (p) {
        CHECK(rec_plan_col_parts(p, 0, NULL) == 1 && rec_plan_owner(p, 0, 0, 499) == 0 && rec_plan_owner(p, 0, 0, 500) == 1,
              "C1: one part, rows [0, 500) on 0 and the rest on 1");
        CHECK(rec_plan_owner(p, 1, 0, 39) == 2 && rec_plan_col_parts(p, 2, NULL) == 2, "t1 whole on 2, C3 in 2 parts");
        rec_plan_free(p);
    }
    CHECK_ERR(parse_tr(named, &p, NULL), REC_EINVAL, "$.table_plans.C1: the model has no table C1");

    /* refusals: each names the file, the JSON path, the table and the shard */
    char bad[2048];
#define TR_BAD(from, to, want, needle)                                              \
    do {                                                                            \
        snprintf(bad, sizeof bad, "%s", good);                                      \
        char *at = strstr(bad, from);                                               \
        CHECK(at != NULL, "pattern %s", from);                                      \
        if (!at) break;                                                             \
        memmove(at + strlen(to), at + strlen(from), strlen(at + strlen(from)) + 1); \
        memcpy(at, to, strlen(to));                                                 \
        CHECK_ERR(parse_tr(bad, &p, NULL), want, needle);                           \
        rec_plan_free(p);                                                           \
    } while (0)
    TR_BAD(SH(3, 900, 0, 100, 8), SH(3, 900, 0, 99, 8), REC_EINVAL,
           "tr.json: $.table_plans.t0.shards: table t0's rows [999, 1000) of columns [0, 8) are in no shard");
    TR_BAD(SH(2, 600, 0, 300, 8), SH(2, 650, 0, 250, 8), REC_EINVAL,
           "$.table_plans.t0.shards: table t0's rows [600, 650) of columns [0, 8) are in no shard");
    TR_BAD(SH(2, 600, 0, 300, 8), SH(2, 550, 0, 350, 8), REC_EINVAL,
           "$.table_plans.t0.shards[2]: table t0's shard 2 overlaps shard 1 at rows [550, 600) of columns [0, 8)");
    TR_BAD(SH(1, 0, 4, 40, 4), SH(1, 0, 5, 40, 3), REC_EINVAL,
           "$.table_plans.t1.shards: table t1's rows [0, 40) of columns [4, 5) are in no shard");
    TR_BAD(SH(1, 0, 4, 40, 4), SH(1, 0, 3, 40, 5), REC_EINVAL, "table t1's shard 1 overlaps shard 0 at rows [0, 40) of columns [3, 4)");
    TR_BAD(SH(3, 900, 0, 100, 8), SH(4, 900, 0, 100, 8), REC_EINVAL,
           "$.table_plans.t0.shards[3].rank: table t0's shard 3 is on rank 4; this job has 4 ranks (0..3)");
    TR_BAD(SH(3, 0, 0, 40, 4), SH(3, 0, 0, 41, 4), REC_EINVAL,
           "$.table_plans.t1.shards[0]: table t1's shard 0 is out of range: it covers rows [0, 41) and columns [0, 4); the table has 40 rows");
    TR_BAD(SH(1, 0, 4, 40, 4), SH(1, 0, 4, 40, 12), REC_EINVAL, "the model's embedding dim is 8 (make the TorchRec plan");
    TR_BAD("\"t1\":", "\"t9\":", REC_EINVAL, "tr.json: $.table_plans.t9: the model has no table t9; its 3 tables are t0..t2");
    TR_BAD("\"t2\":", "\"t1\":", REC_EINVAL, "$.table_plans.t1: table t1 is placed twice (also as \"t1\")");
    TR_BAD("\"table_column_wise\"", "\"grid_shard\"", REC_EINVAL,
           "$.table_plans.t1.sharding_type: table t1's sharding type is \"grid_shard\"; rectrain reads table_wise");
    TR_BAD("\"sharding_type\": \"data_parallel\", ", "", REC_EFORMAT, "$.table_plans.t2.sharding_type: table t2's sharding type is missing");
    TR_BAD("\"ranks\": [0, 1, 2, 3], \"shards\": null", "\"ranks\": [0, 2], \"shards\": null", REC_EINVAL,
           "$.table_plans.t2.ranks: table t2 is data_parallel on 2 of the 4 ranks");
    TR_BAD("\"ranks\": [0, 1, 2, 3], \"shards\": null", "\"ranks\": [0, 1, 2, 7], \"shards\": null", REC_EINVAL,
           "$.table_plans.t2.ranks[3]: not a rank of this job's 4");
    TR_BAD(SH(3, 0, 0, 40, 4) ", " SH(1, 0, 4, 40, 4), "", REC_EFORMAT, "$.table_plans.t1.shards: expected an array of shards");
    TR_BAD("\"offsets\": [900, 0]", "\"offsets\": [900]", REC_EFORMAT,
           "$.table_plans.t0.shards[3].offsets: expected the shard's first row and column as two integers");
    TR_BAD("\"rank\": 2", "\"rank\": \"2\"", REC_EFORMAT, "$.table_plans.t0.shards[2].rank: expected an integer rank");
    /* numbers no int or int64 holds: refused before any cast (found in review) */
    TR_BAD("\"rank\": 2", "\"rank\": 1e10", REC_EFORMAT, "$.table_plans.t0.shards[2].rank: expected an integer rank");
    TR_BAD("\"offsets\": [900, 0]", "\"offsets\": [1e19, 0]", REC_EINVAL,
           "$.table_plans.t0.shards[3]: table t0's shard 3 is out of range: it covers rows [10000000000000000000, ");
    TR_BAD("\"offsets\": [900, 0], \"sizes\": [100, 8]", "\"offsets\": [4e15, 0], \"sizes\": [9e15, 8]", REC_EINVAL,
           "$.table_plans.t0.shards[3]: table t0's shard 3 is out of range: it covers rows [4000000000000000, 13000000000000000)");
    TR_BAD("\"offsets\": [900, 0]", "\"offsets\": [900.5, 0]", REC_EFORMAT,
           "$.table_plans.t0.shards[3].offsets: expected the shard's first row and column as two integers");
    /* issue 61: an integer too large is out of range, not a non-integer; a plan for another dim
     * says so; "ranks" that contradict the shards; a data_parallel table given in part */
    TR_BAD("\"sizes\": [100, 8]", "\"sizes\": [9223372036854775807, 8]", REC_EINVAL,
           "$.table_plans.t0.shards[3]: table t0's shard 3 is out of range: it covers rows [900, 9223372036854775808) "
           "and columns [0, 8); the table has 1000 rows");
    const char *t0 = "\"t0\": {\"sharding_type\": \"row_wise\", \"ranks\": [0, 1, 2, 3], \"shards\": [" SH(0, 0, 0, 300, 8) ", "
        SH(1, 300, 0, 300, 8) ", " SH(2, 600, 0, 300, 8) ", " SH(3, 900, 0, 100, 8) "]}";
    TR_BAD(t0, "\"t0\": {\"sharding_type\": \"table_wise\", \"ranks\": [0], \"shards\": [" SH(0, 0, 0, 1000, 4) "]}",
           REC_EINVAL, "$.table_plans.t0.shards: table t0's shards end at column 4 and the model's embedding dim is 8: the "
           "plan is for another dim");
    TR_BAD("{\"table_plans\": {", "{\"planner\": {\"embedding_dim\": 16}, \"table_plans\": {", REC_EINVAL,
           "tr.json: $.planner.embedding_dim: the plan is for embedding dim 16 and the model's is 8");
    TR_BAD(t0, "\"t0\": {\"sharding_type\": \"table_wise\", \"ranks\": [1], \"shards\": [" SH(0, 0, 0, 1000, 8) "]}",
           REC_EINVAL, "$.table_plans.t0.ranks: table t0's shard 0 is on rank 0, which its \"ranks\" do not list");
    TR_BAD("\"ranks\": [3, 1]", "\"ranks\": [3, 1, 2]", REC_EINVAL,
           "$.table_plans.t1.ranks: table t1 lists rank 2, which holds none of its shards");
    TR_BAD("\"ranks\": [3, 1]", "\"ranks\": [3, 9]", REC_EINVAL, "$.table_plans.t1.ranks[1]: not a rank of this job's 4");
    TR_BAD("\"shards\": null", "\"shards\": [" SH(1, 0, 0, 3, 8) "]", REC_EINVAL,
           "$.table_plans.t2.shards[0]: table t2 is data_parallel (whole on every rank) and its shard 0 covers rows [0, 3) "
           "and columns [0, 8) of its 5 x 8");
    TR_BAD("\"shards\": null", "\"shards\": [" SH(1, 0, 0, 5, 8) ", " SH(2, 0, 0, 5, 4) "]", REC_EINVAL,
           "$.table_plans.t2.shards[1]: table t2 is data_parallel");
    TR_BAD("\"shards\": null", "\"shards\": 7", REC_EFORMAT, "$.table_plans.t2.shards: expected null or an array");
    /* a data_parallel table whose shards are each the whole table, and "ranks" left out, are read */
    snprintf(bad, sizeof bad, "%s", good);
    {
        char *at = strstr(bad, "\"shards\": null");
        const char *whole = "\"shards\": [" SH(0, 0, 0, 5, 8) "]";
        if (at) {
            memmove(at + strlen(whole), at + strlen("\"shards\": null"), strlen(at + strlen("\"shards\": null")) + 1);
            memcpy(at, whole, strlen(whole));
        }
        CHECK(at && parse_tr(bad, &p, NULL) == REC_OK && rec_plan_owner(p, 2, 0, 4) == REC_PLAN_EVERY, "whole shards: %s",
              rec_errmsg());
        rec_plan_free(p);
    }
    TR_BAD("\"ranks\": [0, 1, 2, 3], \"shards\": null", "\"ranks\": [0, 1, 2, 1e12], \"shards\": null", REC_EINVAL,
           "$.table_plans.t2.ranks[3]: not a rank of this job's 4");
    TR_BAD(", \"t2\": {\"sharding_type\": \"data_parallel\", \"ranks\": [0, 1, 2, 3], \"shards\": null}", "", REC_EINVAL,
           "tr.json: $.table_plans: no plan for table t2 of the model's 3");
    TR_BAD("{\"table_plans\": {", "{\"table_plans\": [{", REC_EFORMAT, "not valid JSON");
    CHECK_ERR(parse_tr("{\"table_plans\": [1]}", &p, NULL), REC_EFORMAT, "tr.json: $.table_plans: expected an object of tables");
    CHECK_ERR(parse_tr("{\"table_plans\": {\"t0\": ", &p, NULL), REC_EFORMAT, "not valid JSON");
    /* names that fit two tables */
    static const char *const twice[F] = {"C1", "C1", "C3"};
    CHECK_ERR(parse_tr(named, &p, twice), REC_EINVAL, "$.table_plans.C1: several of the model's tables are named C1");
#undef TR_BAD
}
#undef SH

typedef struct kp {
    int64_t key;
    int32_t pos;
} kp;

static int cmp_kp(const void *a, const void *b) {
    const kp *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return x->pos - y->pos;
}

/* rec_radix_order, the executor's dedup of a slice's ids: the stable order a (key, position)
 * sort gives, for key widths of one digit to 62 bits, few and many keys, all keys equal. */
static void test_radix_order(void) {
    enum { MAX = 5000 };
    static int64_t keys[MAX];
    static int32_t order[MAX], tmp[MAX];
    static kp want[MAX];
    static const int BITS[] = {1, 8, 9, 20, 40, 62};
    static const int64_t NS[] = {0, 1, 5, 1000, MAX};
    rec_rng r;
    rec_rng_seed(&r, 11, 0);
    for (size_t b = 0; b < sizeof BITS / sizeof BITS[0]; b++)
        for (size_t k = 0; k < sizeof NS / sizeof NS[0]; k++)
            for (int same = 0; same < 2; same++) {
                const int64_t n = NS[k];
                const uint64_t range = (uint64_t)1 << BITS[b];
                /* few distinct keys among many (ties), or all one key */
                for (int64_t i = 0; i < n; i++) {
                    keys[i] = same ? (int64_t)(range - 1) : (int64_t)(rec_rng_below(&r, 64) * (range / 64 ? range / 64 : 1) +
                                                                     rec_rng_below(&r, range < 64 ? range : 64)) % (int64_t)range;
                    want[i] = (kp){keys[i], (int32_t)i};
                }
                qsort(want, (size_t)n, sizeof *want, cmp_kp);
                rec_radix_order(keys, n, BITS[b], order, tmp);
                int ok = 1;
                for (int64_t i = 0; i < n; i++) ok &= order[i] == want[i].pos;
                CHECK(ok, "radix order of %lld keys of %d bits%s: the stable sorted order", (long long)n, BITS[b],
                      same ? ", all equal" : "");
            }
}

/* The executor's O(1) row index (map.c) against the plan's binary search, on parts with
 * uneven segments (one row to hundreds), hot rows at random and replicated ones: every row
 * of every part has the plan's owner and a place of its own in its owner's store. */
static void test_xmap(void) {
    enum { N = 3, TF = 4 };
    static const int64_t rows[TF] = {1, 97, 5000, 65537};
    rec_plan_model m = {N, TF, rows, E, REC_SPARSE_SGD, B, 0, NULL, 0};
    rec_plan *p = NULL;
    CHECK(rec__plan_alloc(&p, REC_PLAN_OPER, &m) == REC_OK, "%s", rec_errmsg());
    rec_rng r;
    rec_rng_seed(&r, 13, 0);
    static int64_t seg[70000], hot[70000];
    static int so[70000], ho[70000];
    for (int f = 0; f < TF && p; f++) {
        const int C = f == 3 ? 2 : 1;
        CHECK(rec__plan_set_cols(p, f, C) == REC_OK, "%s", rec_errmsg());
        for (int c = 0; c < C; c++) {
            int64_t ns = 0, nh = 0;
            for (int64_t row = 0; row < rows[f]; row++) {
                /* segments of 1 to ~600 rows (a run of short ones near the end), every owner */
                if (row == 0 || rec_rng_below(&r, row > rows[f] - 40 ? 2 : 300) == 0) {
                    seg[ns] = row;
                    so[ns++] = C == 1 && rec_rng_below(&r, 4) == 0 ? REC_PLAN_EVERY : (int)rec_rng_below(&r, N);
                } else if (rec_rng_below(&r, 10) == 0) {
                    hot[nh] = row;
                    ho[nh++] = C == 1 && rec_rng_below(&r, 3) == 0 ? REC_PLAN_EVERY : (int)rec_rng_below(&r, N);
                }
            }
            const int c0 = c * E / C, c1 = (c + 1) * E / C;
            CHECK(rec__plan_set_part(p, f, c, c0, c1, ns, seg, so, nh, hot, ho) == REC_OK, "%s", rec_errmsg());
        }
    }
    CHECK(rec__plan_check(p, "test") == REC_OK, "%s", rec_errmsg());
    xmap x;
    CHECK(rec__xmap_build(&x, p) == REC_OK, "%s", rec_errmsg());
    /* each owner's rows (and the replicas) used once each */
    int64_t total = x.rep_rows;
    for (int o = 0; o < N; o++) total += x.rows[o];
    unsigned char *used = calloc((size_t)total, 1);
    int64_t wrong = 0, twice = 0, outside = 0;
    for (int f = 0; f < TF; f++)
        for (int c = 0; c < rec_plan_col_parts(p, f, NULL); c++)
            for (int64_t row = 0; row < rows[f]; row++) {
                const xloc l = rec__xmap_locate(&x, f, c, row);
                wrong += l.owner != rec_plan_owner(p, f, c, row);
                int64_t at = l.srow, lim = l.owner == REC_PLAN_EVERY ? x.rep_rows : x.rows[l.owner];
                for (int o = 0; l.owner != REC_PLAN_EVERY && o < l.owner; o++) at += x.rows[o];
                if (l.owner != REC_PLAN_EVERY) at += x.rep_rows;
                if (l.srow < 0 || l.srow >= lim) outside++;
                else twice += used[at]++ > 0;
            }
    CHECK(wrong == 0 && twice == 0 && outside == 0, "every row located at its owner, once: %lld wrong owners, %lld "
          "places used twice, %lld outside", (long long)wrong, (long long)twice, (long long)outside);
    free(used);
    rec__xmap_free(&x);
    rec_plan_free(p);
}

int main(void) {
    test_xmap();
    test_radix_order();
    test_kinds();
    test_placements();
    test_costs();
    test_cache_terms();
    test_oper();
    test_files();
    test_torchrec();
    return check_report();
}
