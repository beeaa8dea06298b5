/* Tests of RAP's planning for the GPU preprocessing. The horizontal-fusion plan
 * (src/prep/fuse.c, §6.2): on the shipped specs every plan is valid (each op instance in one
 * kernel of its kind and layout, after every instance it reads) and proven optimal; on random
 * small specs its objective equals the best of every schedule enumerated; the paper's
 * conflicting chains take the fusion the steps allow. The co-run schedule (src/prep/corun.c,
 * Algorithm 1): every member placed once and in order, the stages of highest capacity taken,
 * none overfilled unless the kernels overflow them all, large kernels sharded. The latency
 * predictor (src/prep/latency.c): trained on kernels of a known cost, it predicts held-out
 * ones within a bound; measurements and models round-trip through files; bad TSV is refused
 * naming the line and field. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "rectrain/core.h"
#include "rectrain/prep.h"

static rec_spec *parse(const char *json) {
    rec_spec *s = NULL;
    char *q = strdup(json);
    for (char *p = q; *p; p++)
        if (*p == '\'') *p = '"';
    if (rec_spec_parse(&s, q, strlen(q), "t.json") != REC_OK) fprintf(stderr, "%s\n%s\n", rec_errmsg(), q);
    free(q);
    return s;
}

/* The instances op i reads, found from the spec (not from the plan): the op before it, or the
 * last ops of its inputs (through inputs without ops). */
static int instance(const rec_spec *s, int f, int j) {
    int i = 0;
    for (int g = 0; g < f; g++) i += s->features[g].n_ops;
    return i + j;
}

static int tails_of(const rec_spec *s, int f, int *out, int n) {
    const rec_feature *ft = &s->features[f];
    if (ft->n_ops) {
        out[n++] = instance(s, f, ft->n_ops - 1);
        return n;
    }
    for (int k = 0; k < ft->n_inputs; k++)
        if (ft->inputs[k] >= 0) n = tails_of(s, ft->inputs[k], out, n);
    return n;
}

static int preds(const rec_spec *s, int f, int j, int *out) {
    if (j) return out[0] = instance(s, f, j - 1), 1;
    int n = 0;
    for (int k = 0; k < s->features[f].n_inputs; k++)
        if (s->features[f].inputs[k] >= 0) n = tails_of(s, s->features[f].inputs[k], out, n);
    return n;
}

/* Is the plan a valid schedule of the spec's instances? */
static int valid(const rec_spec *s, const rec_fusion *fu, const char *name) {
    int ok = 1, n = 0;
    for (int f = 0; f < s->n_features; f++) n += s->features[f].n_ops;
    ok &= fu->n_ops == n;
    int *seen = calloc((size_t)n + 1, sizeof(int));
    int64_t sq = 0;
    for (int k = 0; ok && k < fu->n_kernels; k++) {
        const rec_fused_kernel *kr = &fu->kernels[k];
        ok &= kr->n > 0 && (k == 0 || kr->step >= fu->kernels[k - 1].step);
        sq += (int64_t)kr->n * kr->n;
        for (int m = 0; ok && m < kr->n; m++) {
            const int i = kr->members[m];
            const rec_op *op = &s->features[fu->ops[i].feature].ops[fu->ops[i].op];
            ok &= i >= 0 && i < n && !seen[i]++ && fu->ops[i].step == kr->step && op->kind == kr->kind &&
                  op->in.dtype == kr->dtype && (op->in.is_list != 0) == kr->is_list &&
                  instance(s, fu->ops[i].feature, fu->ops[i].op) == i;
        }
    }
    for (int i = 0; ok && i < n; i++) ok &= seen[i] == 1;
    int p[64];
    for (int i = 0; ok && i < n; i++) {
        const int c = preds(s, fu->ops[i].feature, fu->ops[i].op, p);
        for (int k = 0; k < c; k++) ok &= fu->ops[p[k]].step < fu->ops[i].step;
    }
    ok &= sq == fu->objective && fu->n_steps >= fu->depth;
    if (!ok) fprintf(stderr, "%s: the plan is not a valid schedule\n", name);
    free(seen);
    return ok;
}

static void test_shipped(void) {
    const char *names[] = {"criteo_standard", "criteo_vocab", "criteo_terabyte", "criteo_rap", "criteo_heavy"};
    for (int c = 0; c < 5; c++) {
        char path[256];
        snprintf(path, sizeof path, "%s/configs/%s.json", getenv("REC_SOURCE_DIR") ? getenv("REC_SOURCE_DIR") : "..", names[c]);
        rec_spec *s = NULL;
        if (rec_spec_load(&s, path) != REC_OK) {
            CHECK(0, "%s", rec_errmsg());
            continue;
        }
        rec_fusion fu;
        /* GLPK's limit is wall-clock: a loaded machine (CI's ASan run beside other work) needs
         * longer than the default 10 s to prove criteo_heavy's plan optimal */
        const rec_fusion_opts fo = {0, 120};
        CHECK(rec_prep_fuse(s, &fo, &fu) == REC_OK, "%s", rec_errmsg());
        CHECK(valid(s, &fu, names[c]) && fu.optimal, "%s: a valid plan, proven optimal (in %.1f s)", names[c], fu.seconds);
        if (c == 0) /* 13 dense chains of 4 ops and 26 sparse of 2: every op of a kind in one kernel */
            CHECK(fu.n_kernels == 6 && fu.n_steps == 4 && fu.objective == 4 * 13 * 13 + 2 * 26 * 26,
                  "criteo_standard: %d kernels in %d steps, objective %lld", fu.n_kernels, fu.n_steps,
                  (long long)fu.objective);
        if (c == 3) /* the casts of the logit and boxcox chains wait one step to join the other 11 */
            CHECK(fu.n_steps == fu.depth && fu.objective == 2400, "criteo_rap: %d steps (depth %d), objective %lld",
                  fu.n_steps, fu.depth, (long long)fu.objective);
        rec_fusion_free(&fu);
        rec_spec_free(s);
    }
}

/* The best sum of squared degrees over every schedule in `L` steps, by enumeration: instance
 * i (whose inputs' instances come before it) takes each step after theirs in turn. */
typedef struct enum_state {
    int n, L, T, type[32], pc[32], pr[32][16], st[32], deg[32][8];
    int64_t best;
} enum_state;

static void enumerate(enum_state *e, int i) {
    if (i == e->n) {
        int64_t v = 0;
        for (int t = 0; t < e->T; t++)
            for (int j = 0; j < e->L; j++) v += (int64_t)e->deg[t][j] * e->deg[t][j];
        if (v > e->best) e->best = v;
        return;
    }
    int lo = 0;
    for (int k = 0; k < e->pc[i]; k++)
        if (e->st[e->pr[i][k]] + 1 > lo) lo = e->st[e->pr[i][k]] + 1;
    for (int j = lo; j < e->L; j++) {
        e->st[i] = j, e->deg[e->type[i]][j]++;
        enumerate(e, i + 1);
        e->deg[e->type[i]][j]--;
    }
}

static int64_t brute(const rec_spec *s, int L) {
    enum_state e = {.L = L, .best = -1};
    int keys[32];
    for (int f = 0; f < s->n_features; f++)
        for (int j = 0; j < s->features[f].n_ops; j++) {
            const rec_op *op = &s->features[f].ops[j];
            const int key = ((int)op->kind * 2 + (int)op->in.dtype) * 2 + (op->in.is_list != 0);
            int t = 0;
            while (t < e.T && keys[t] != key) t++;
            if (t == e.T) keys[e.T++] = key;
            e.type[e.n] = t;
            e.pc[e.n] = preds(s, f, j, e.pr[e.n]);
            e.n++;
        }
    enumerate(&e, 0);
    return e.best;
}

/* A random chain of ops on id lists (raw C columns or a node of them), ending in a modulo. */
static void list_ops(char *o, size_t cap, unsigned *r, int k) {
    static const char *const ops[] = {"{'op': 'fill_null', 'value': 0}", "{'op': 'sigrid_hash', 'salt': 1, 'max_value': 999}",
                                      "{'op': 'firstx', 'x': 3}", "{'op': 'clamp', 'min': 0}", "{'op': 'ngram', 'n': 2}"};
    o[0] = 0;
    for (int j = 0; j < k; j++) {
        *r = *r * 1103515245u + 12345u;
        snprintf(o + strlen(o), cap - strlen(o), "%s%s", j ? ", " : "", ops[(*r >> 16) % 5]);
    }
}

static void test_random(void) {
    static const char END[] = "{'op': 'fill_null', 'value': 0}, {'op': 'modulo', 'divisor': 7}"; /* ids without nulls */
    int agree = 0, tried = 0;
    for (unsigned seed = 1; seed <= 40; seed++) {
        unsigned r = seed * 2654435761u;
        char json[4096], a[512], b[512], c[512];
        r = r * 1103515245u + 12345u;
        const int node = (r >> 16) % 2, ka = 1 + (r >> 20) % 2, kb = (r >> 24) % 3, kc = (r >> 28) % 3;
        list_ops(a, sizeof a, &r, ka);
        list_ops(b, sizeof b, &r, kb);
        list_ops(c, sizeof c, &r, kc);
        snprintf(json, sizeof json, "{'format': 'rectrain-prep', 'version': 1, 'name': 'r', 'tables': {'A': {'rows': 7}, "
                 "'B': {'rows': 7}}, %s 'dense': [{'name': 'd', 'input': 'I1', 'ops': [{'op': 'fill_null', 'value': 0}, "
                 "{'op': 'cast', 'to': 'f32'}]}], 'sparse': [{'name': 'A', 'input': '%s', 'table': 'A', 'ops': [%s%s%s]}, "
                 "{'name': 'B', 'inputs': ['%s', 'C3'], 'table': 'B', 'ops': [%s%s%s]}]}",
                 node ? "'nodes': [{'name': 'n', 'input': 'C1', 'ops': [" : "", node ? "n" : "C1", b, kb ? ", " : "", END,
                 node ? "n" : "C2", c, kc ? ", " : "", END);
        if (node) { /* splice the node's ops and close it */
            char *p = strstr(json, "'ops': [") + 8, tail[4096];
            snprintf(tail, sizeof tail, "%s", p);
            snprintf(p, sizeof json - (size_t)(p - json), "%s]}], %s", a, tail);
        }
        rec_spec *s = parse(json);
        if (!s) {
            CHECK(0, "seed %u: the random spec parses", seed);
            continue;
        }
        rec_fusion fu;
        const rec_fusion_opts o = {0, 0};
        rec_status st = rec_prep_fuse(s, &o, &fu);
        int n = fu.n_ops;
        if (!st && n <= 14) {
            const int L = fu.depth + 1;
            rec_fusion_free(&fu);
            const rec_fusion_opts ol = {L, 0};
            st = rec_prep_fuse(s, &ol, &fu);
            const int64_t want = brute(s, L);
            tried++;
            agree += !st && fu.optimal && fu.objective == want && valid(s, &fu, "random");
            if (!(fu.objective == want)) fprintf(stderr, "seed %u: objective %lld, enumeration %lld\n", seed,
                                                 (long long)fu.objective, (long long)want);
        }
        CHECK(st == REC_OK, "%s", rec_errmsg());
        rec_fusion_free(&fu);
        rec_spec_free(s);
    }
    CHECK(tried >= 20 && agree == tried, "random specs: %d of %d plans match the enumeration's best", agree, tried);
}

/* RAP Fig. 7's conflict: sigrid_hash then firstx in one chain, firstx then sigrid_hash in the
 * other. In as many steps as the chains are long only the fill_nulls and modulos fuse; one
 * step more lets the firstx ops fuse too. */
static void test_conflict(void) {
    rec_spec *s = parse("{'format': 'rectrain-prep', 'version': 1, 'name': 'x', 'tables': {'A': {'rows': 7}, 'B': {'rows': 7}}, "
                        "'sparse': [{'name': 'A', 'input': 'C1', 'table': 'A', 'ops': [{'op': 'fill_null', 'value': 0}, "
                        "{'op': 'sigrid_hash', 'salt': 0, 'max_value': 99}, {'op': 'firstx', 'x': 2}, {'op': 'modulo', "
                        "'divisor': 7}]}, {'name': 'B', 'input': 'C2', 'table': 'B', 'ops': [{'op': 'fill_null', 'value': 0}, "
                        "{'op': 'firstx', 'x': 2}, {'op': 'sigrid_hash', 'salt': 0, 'max_value': 99}, {'op': 'modulo', "
                        "'divisor': 7}]}]}");
    if (!s) {
        CHECK(0, "the conflict spec parses");
        return;
    }
    int64_t got[2];
    for (int extra = 0; extra < 2; extra++) {
        rec_fusion fu;
        const rec_fusion_opts o = {4 + extra, 0};
        CHECK(rec_prep_fuse(s, &o, &fu) == REC_OK && valid(s, &fu, "conflict"), "%s", rec_errmsg());
        got[extra] = fu.objective;
        rec_fusion_free(&fu);
    }
    CHECK(got[0] == 4 + 1 + 1 + 1 + 1 + 4 && got[1] == 4 + 4 + 1 + 1 + 4,
          "conflicting chains: objective %lld in 4 steps (12), %lld in 5 (14)", (long long)got[0], (long long)got[1]);
    rec_spec_free(s);
}

/* A latency model for the tests: a launch, plus a cost per member (lists cost more). */
static double lat(const rec_fused_kernel *k, int first, int n, void *ctx) {
    (void)first, (void)ctx;
    return n ? 0.01 + 0.002 * n * (k->is_list ? 4 : 1) : 0;
}

/* Is every member of every kernel placed once, in plan order, on the stages' loads? */
static int covers(const rec_fusion *f, const rec_corun_plan *p, const double *cap) {
    int ok = p->at[0] == 0 && p->at[p->n_stages] == p->n_pieces, k = 0, next = 0;
    double exposed = 0;
    for (int s = 0; s < p->n_stages; s++) {
        double load = 0;
        for (int i = p->at[s]; i < p->at[s + 1]; i++) {
            const rec_corun_piece *c = &p->pieces[i];
            if (next == f->kernels[k].n) k++, next = 0;
            ok &= c->kernel == k && c->first == next && c->n > 0 && c->latency == lat(&f->kernels[k], c->first, c->n, NULL);
            next += c->n;
            load += c->latency;
        }
        ok &= load == p->load[s];
        exposed += load > cap[s] ? load - cap[s] : 0;
    }
    return ok && k == f->n_kernels - 1 && next == f->kernels[k].n && exposed == p->exposed;
}

static void test_corun(void) {
    char path[256];
    snprintf(path, sizeof path, "%s/configs/criteo_rap.json", getenv("REC_SOURCE_DIR") ? getenv("REC_SOURCE_DIR") : "..");
    rec_spec *s = NULL;
    rec_fusion f;
    if (rec_spec_load(&s, path) != REC_OK || rec_prep_fuse(s, NULL, &f) != REC_OK) {
        CHECK(0, "%s", rec_errmsg());
        return;
    }
    double L = 0, big = 0;
    for (int k = 0; k < f.n_kernels; k++) {
        const double l = lat(&f.kernels[k], 0, f.kernels[k].n, NULL);
        L += l, big = l > big ? l : big;
    }
    rec_corun_plan p;
    /* one stage holds it all */
    const double one[5] = {0, 2 * L, 0, 0, 0};
    CHECK(rec_corun_schedule(&f, one, 5, lat, NULL, &p) == REC_OK && covers(&f, &p, one), "%s", rec_errmsg());
    CHECK(p.at[1] == 0 && p.at[2] == p.n_pieces && p.n_pieces == f.n_kernels && p.exposed == 0 && !p.overflow,
          "a stage of capacity 2L runs every kernel whole: %d pieces of %d kernels", p.n_pieces, f.n_kernels);
    rec_corun_plan_free(&p);
    /* RAP's five stages (emb_fwd, mlp_fwd, mlp_bwd, emb_bwd, grad_comm), their capacities in
     * the proportions of its artifact (plan 0, 4 GPUs), scaled to hold 1.2 L: the largest
     * kernel is more than the smallest stage holds */
    double cap[5] = {24, 28, 52, 30, 64}, sum = 0;
    for (int i = 0; i < 5; i++) sum += cap[i];
    for (int i = 0; i < 5; i++) cap[i] *= 1.2 * L / sum;
    CHECK(rec_corun_schedule(&f, cap, 5, lat, NULL, &p) == REC_OK && covers(&f, &p, cap), "%s", rec_errmsg());
    int sharded = 0, fits = 1;
    for (int i = 0; i < p.n_pieces; i++) sharded += p.pieces[i].n < f.kernels[p.pieces[i].kernel].n;
    for (int st = 0; st < 5; st++) fits &= p.load[st] <= cap[st];
    CHECK(!p.overflow && p.exposed == 0 && fits && sharded > 0 && p.at[1] == p.at[0] && big > cap[0],
          "1.2 L over five stages: none overfilled, %d kernel(s) sharded, the smallest stage (emb_fwd) not taken "
          "(%d pieces there)", sharded, p.at[1] - p.at[0]);
    rec_corun_plan_free(&p);
    /* half of L: every stage taken, the rest on the last one, exposed */
    for (int i = 0; i < 5; i++) cap[i] *= 0.5 / 1.2;
    CHECK(rec_corun_schedule(&f, cap, 5, lat, NULL, &p) == REC_OK && covers(&f, &p, cap), "%s", rec_errmsg());
    CHECK(p.overflow && p.exposed >= 0.5 * L - 1e-9 && p.load[4] > cap[4], /* loads hold L at least */
          "0.5 L: overflow onto the last stage, exposed %.3f (at least half of L %.3f)", p.exposed, L);
    rec_corun_plan_free(&p);
    /* refusals */
    const double neg[2] = {1, -1};
    CHECK_ERR(rec_corun_schedule(&f, neg, 2, lat, NULL, &p), REC_EINVAL, "stage 1 has capacity -1");
    CHECK_ERR(rec_corun_schedule(&f, neg, 0, lat, NULL, &p), REC_EINVAL, "no training stages");
    rec_fusion sh;
    CHECK_ERR(rec_fusion_shard(&f, 0, &sh), REC_EINVAL, "shards of 0 instances");
    rec_fusion_free(&f);
    rec_spec_free(s);
}

/* A GPU-like cost: a launch, values at a per-op rate, the largest member's share (blocks wait
 * for it), a size parameter that multiplies work (ngram, onehot), and 3% noise. */
static double cost(const float *x, rec_rng *g) {
    const double rate = 1e-7 * (1 + (int)x[0] % 5) * (x[2] ? 1.6 : 1), size = x[6] > 1 ? x[6] : 1;
    const double noise = exp(0.03 * (rec_rng_uniform(g) + rec_rng_uniform(g) + rec_rng_uniform(g) - 1.5) * 2);
    return (0.004 + rate * size * (0.3 * x[4] + 0.7 * x[5] * x[3] / (1 + 0.2 * x[3]))) * noise;
}

static int tsv_refused(const char *text, const char *needle) {
    const char *path = "/tmp/rec_test_lat.tsv";
    FILE *f = fopen(path, "w");
    fputs(text, f);
    fclose(f);
    float *X;
    double *ms;
    int64_t n;
    const rec_status s = rec_lat_read(path, &X, &ms, &n);
    const int ok = s == REC_EINVAL && strstr(rec_errmsg(), needle);
    if (!ok) fprintf(stderr, "'%s': %s (want '%s')\n", text, rec_errmsg(), needle);
    if (!s) free(X), free(ms);
    remove(path);
    return ok;
}

static void test_latency(void) {
    static const char *const ops[] = {"fill_null", "clamp", "sigrid_hash", "firstx", "ngram", "log1p", "onehot", "bucketize"};
    enum { N = 2000 };
    float *X = malloc(sizeof(float) * N * REC_LAT_FEATURES);
    double *ms = malloc(sizeof(double) * N);
    rec_rng g;
    rec_rng_seed(&g, 7, 0);
    const char *path = "/tmp/rec_test_lat_ok.tsv";
    for (int i = 0; i < N; i++) {
        float *x = X + i * REC_LAT_FEATURES;
        const int o = (int)(rec_rng_uniform(&g) * 8), list = o >= 2 && o <= 4, members = 1 + (int)(rec_rng_uniform(&g) * 40);
        const double batch = 1024 << (int)(rec_rng_uniform(&g) * 5), per = list ? 1 + 30 * rec_rng_uniform(&g) : 1;
        x[0] = (float)rec_op_kind_from_name(ops[o]), x[1] = o == 5 || o == 6 ? REC_DT_F32 : REC_DT_I64, x[2] = (float)list;
        x[3] = (float)members, x[5] = (float)(batch * per), x[4] = (float)(batch * per * members * (0.5 + 0.5 * rec_rng_uniform(&g)));
        x[6] = o == 3 ? 16 : o == 4 ? 3 : o == 6 ? 8 : o == 7 ? 6 : 0, x[7] = (float)batch;
        if (x[4] < x[5]) x[4] = x[5];
        ms[i] = cost(x, &g);
    }
    CHECK(rec_lat_write(path, X, ms, N) == REC_OK, "%s", rec_errmsg());
    double med = 1, within = 0;
    CHECK(rec_lat_holdout(X, ms, N, 1, &med, &within) == REC_OK && med < 0.05 && within > 0.85,
          "held out: median relative error %.4f, %.1f%% within 10%% (%s)", med, 100 * within, rec_errmsg());
    printf("latency predictor, 200 held-out kernels: median relative error %.4f, %.1f%% within 10%%\n", med, 100 * within);
    float *X2;
    double *ms2;
    int64_t n2 = 0;
    CHECK(rec_lat_read(path, &X2, &ms2, &n2) == REC_OK && n2 == N, "%s", rec_errmsg());
    int same = n2 == N;
    for (int64_t i = 0; same && i < N; i++)
        same = !memcmp(X2 + i * REC_LAT_FEATURES, X + i * REC_LAT_FEATURES, sizeof(float) * REC_LAT_FEATURES) && ms2[i] == ms[i];
    CHECK(same, "the TSV reads back the kernels written");
    rec_lat_model *m = NULL, *m2 = NULL;
    double p1[16], p2[16];
    CHECK(rec_lat_train(X2, ms2, n2, &m) == REC_OK && rec_lat_save(m, "/tmp/rec_test_lat.json") == REC_OK &&
          rec_lat_load("/tmp/rec_test_lat.json", &m2) == REC_OK && rec_lat_predict(m, X, 16, p1) == REC_OK &&
          rec_lat_predict(m2, X, 16, p2) == REC_OK && !memcmp(p1, p2, sizeof p1), "a saved model predicts the same: %s",
          rec_errmsg());
    rec_lat_free(m), rec_lat_free(m2);
    remove(path), remove("/tmp/rec_test_lat.json");
    free(X2), free(ms2), free(X), free(ms);
    const double bad[2] = {1, 0};
    const float bx[2 * REC_LAT_FEATURES] = {0};
    CHECK_ERR(rec_lat_train(bx, bad, 2, &m), REC_EINVAL, "kernel 1 measured 0 ms");
    CHECK_ERR(rec_lat_load("/nonexistent/m.json", &m), REC_EIO, "cannot read the latency model /nonexistent/m.json");
    CHECK_ERR(rec_lat_write("/nonexistent/l.tsv", bx, bad, 2), REC_EIO, "/nonexistent/l.tsv.tmp: cannot create");
    CHECK_ERR(rec_lat_train(bx, bad, 1, &m), REC_EINVAL, "1 measured kernels; it needs 2 or more");
    double med2, within2;
    CHECK_ERR(rec_lat_holdout(bx, bad, 2, 1, &med2, &within2), REC_EINVAL, "a 9:1 split needs 10 or more");
    /* measurements refused, naming the line and field */
    const char *H = "op\tdtype\tlist\tmembers\tvalues\tmax_values\tparam\tbatch\tms\n";
    char t[512];
    CHECK(tsv_refused("op\tms\n", ":1: the header must be"), "a wrong header");
    CHECK(tsv_refused("", "empty; it needs the header"), "an empty file");
    static const char *const rows[][2] = { /* after the header and, for the first, a good line */
        {"fill_null\ti64\t0\t2\t10\t5\t0\t1024\t0.01\nhash\ti64\t0\t2\t10\t5\t0\t1024\t0.01\n", ":3: field 'op' is 'hash'"},
        {"clamp\tf64\t0\t2\t10\t5\t0\t1024\t0.01\n", ":2: field 'dtype' is 'f64'"},
        {"clamp\ti64\t2\t2\t10\t5\t0\t1024\t0.01\n", ":2: field 'list' is 2"},
        {"clamp\ti64\t0\t0\t10\t5\t0\t1024\t0.01\n", ":2: field 'members' is '0', not a number >= 1"},
        {"clamp\ti64\t0\t2\tten\t5\t0\t1024\t0.01\n", ":2: field 'values' is 'ten'"},
        {"clamp\ti64\t0\t2\t10\t5\t0\t1024\n", ":2: field 'ms' is '(missing)'"},
        {"clamp\ti64\t0\t2\t10\t5\t0\t1024\t0\n", ":2: field 'ms' is 0; latencies are > 0"},
        {"clamp\ti64\t0\t2\t10\t5\t0\t1024\t0.01\t7\n", ":2: more than the 9 fields"},
    };
    for (size_t r = 0; r < sizeof rows / sizeof *rows; r++) {
        snprintf(t, sizeof t, "%s%s", H, rows[r][0]);
        CHECK(tsv_refused(t, rows[r][1]), "refused: %s", rows[r][1]);
    }
    /* the features of a plan's kernel: members, values read */
    char spec_path[256];
    snprintf(spec_path, sizeof spec_path, "%s/configs/criteo_standard.json", getenv("REC_SOURCE_DIR") ? getenv("REC_SOURCE_DIR") : "..");
    rec_spec *s = NULL;
    rec_fusion fu;
    if (rec_spec_load(&s, spec_path) == REC_OK && rec_prep_fuse(s, NULL, &fu) == REC_OK) {
        double *vpr = malloc(sizeof(double) * (size_t)fu.n_ops);
        for (int i = 0; i < fu.n_ops; i++) vpr[i] = 1 + i % 3;
        float x[REC_LAT_FEATURES];
        const rec_fused_kernel *k = &fu.kernels[1]; /* the 26 fill_nulls of the id lists */
        rec_lat_features(&fu, s, 1, 2, 10, vpr, 4096, x);
        double sum = 0, most = 0;
        for (int mb = 2; mb < 12; mb++) sum += vpr[k->members[mb]], most = vpr[k->members[mb]] > most ? vpr[k->members[mb]] : most;
        CHECK(k->n == 26 && x[0] == REC_OP_FILL_NULL && x[2] == 1 && x[3] == 10 && x[4] == (float)(sum * 4096) &&
              x[5] == (float)(most * 4096) && x[6] == 0 && x[7] == 4096, "the features of 10 fused fill_nulls");
        free(vpr);
        rec_fusion_free(&fu);
    } else {
        CHECK(0, "%s", rec_errmsg());
    }
    rec_spec_free(s);
}

/* The capacity search on a simulated GPU: a probe of latency p beside stage s lengthens it by
 * p - C_s where p > C_s (RAP Fig. 5b: the stage absorbs what fits in its idle resources).
 * Five rounds of bisection over the stage's time find C_s within the tolerance and a 32nd of
 * the stage; a stage too short to probe holds nothing; the steps asked are the baseline's and
 * three a round a stage, all of a round asked before its times are in (then a filler step). */
static void test_capacity(void) {
    const double base[4] = {0.5, 2.0, 0.004, 1.0}, truth[4] = {0.15, 1.2, 0, 0.9}, tol = 0.02;
    rec_cap_search c;
    CHECK(rec_cap_search_init(&c, 4, tol) == REC_OK, "%s", rec_errmsg());
    int stage, guard = 0, asked, fillers = 0;
    double probe, t[8][4]; /* the steps in flight: their times come back a round later */
    int n = 0;
    while ((asked = rec_cap_search_next(&c, &stage, &probe)) && guard++ < 1000) {
        if (asked == 2) { /* the round's times, then the next round */
            CHECK(n == REC_CAP_REPS && stage == -1, "a filler step after %d asked", n);
            for (int k = 0; k < n; k++) rec_cap_search_record(&c, t[k]);
            n = 0, fillers++;
            continue;
        }
        for (int s = 0; s < 4 && n < 8; s++) t[n][s] = base[s] * (1 + 0.001 * (guard % 3)); /* a little noise */
        if (stage >= 0 && probe > truth[stage] && n < 8) t[n][stage] += probe - truth[stage];
        CHECK(stage < 0 || (probe >= 0 && probe <= base[stage]), "a probe of %g ms beside a stage of %g", probe,
              stage >= 0 ? base[stage] : 0);
        n++;
    }
    CHECK(fillers == 1 + 3 * REC_CAP_ROUNDS, "%d filler steps", fillers);
    for (int s = 0; s < 4; s++)
        CHECK(fabs(c.capacity[s] - truth[s]) <= base[s] * (tol + 1.0 / 32 + 0.002),
              "stage %d: capacity %g ms measured, %g true", s, c.capacity[s], truth[s]);
    CHECK(c.steps == REC_CAP_REPS + 3 * REC_CAP_ROUNDS * REC_CAP_REPS, "%lld steps asked", (long long)c.steps);
    CHECK(!rec_cap_search_next(&c, &stage, &probe), "the search is done");
    rec_cap_search_free(&c);
    CHECK_ERR(rec_cap_search_init(&c, 0, tol), REC_EINVAL, "0 stages");
    CHECK_ERR(rec_cap_search_init(&c, 3, 0), REC_EINVAL, "tolerance 0");
}

int main(void) {
    test_shipped();
    test_corun();
    test_capacity();
    test_latency();
    test_random();
    test_conflict();
    return check_report();
}
