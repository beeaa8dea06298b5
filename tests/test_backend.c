/* One parity harness for the training backends (backend.h), as ggml's test-backend-ops: the
 * same batches, STEPS steps, on every backend available here against the cpu reference, each
 * through the command a user runs:
 *   mpi, 1 rank   `mpirun -np 1 rectrain train`: bitwise (the executor sums as one process does)
 *   mpi, 2 ranks  `mpirun -np 2`: every step's loss within 1e-6 relative and the AUC within
 *                 1e-5 (SGD; docs/distributed.md, "How close to one process"); DeepFM and
 *                 Wide&Deep, whose SGD trajectories amplify the rounding more, every step
 *                 within 1e-4 (tests/test_dist.c FIRST_ORDER_SGD_STEP_GAP)
 *   cache         `rectrain cluster`, one trainer behind Bagpipe's cache: bitwise (the cache
 *                 is exact; SGD)
 *   bf16 tables   a DLRM whose tables are stored in bf16 (stochastic rounding), on the mpi and
 *                 cache rows: 1 rank and the cache bitwise (owners, servers and cache store
 *                 and step bf16 rows as one process); 2 ranks every step within 1e-4 and the
 *                 AUC within 1e-4: a gradient's last bits can tip a value's rounding, a bf16
 *                 step (2^-8 relative) for that weight (docs/distributed.md: per step 2.4e-5,
 *                 AUC 5e-6 measured with SGD over 200 steps; 3.4e-8 here over 30)
 *   cuda          `train --device cuda`: each step's loss within 1e-4 relative, the AUC within
 *                 1e-4 (test_cuda_parity's step tolerance); skipped, with the reason, where no
 *                 GPU answers
 * Every run trains SGD on both parts, on one shard in file order, one thread, and leaves a
 * checkpoint that `rectrain eval` scores on held-out rows. A bitwise row compares the loss
 * logs byte for byte and the AUCs as printed. The DLRM runs on every backend; DeepFM and
 * Wide&Deep, whose first-order tables the executor shards with the embedding rows and the
 * cache holds with them, on the mpi and cache rows too. */
#include <math.h>
#include <sys/stat.h>

#include "clirun.h"
#include "rectrain/backend.h"
#include "rectrain/core.h"
#include "rectrain/cuda.h"
#include "rectrain/train.h"

enum { STEPS = 30 };

static const char *COMMON = "--data d.rshard --batch 256 --no-shuffle --threads 1";

/* Runs CMD (formatted, a whole shell command) in the scratch directory, bounded to 180 s. */
static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...) {
    char args[2048], cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "cd %s && REC_PROGRESS=0 ASAN_OPTIONS=$ASAN_OPTIONS:detect_leaks=0 timeout 180 %s 2>&1",
             dir, args);
    return check_capture(cmd, out, sizeof out);
}

/* The worst relative gap between two logs' STEPS losses; INFINITY when either is short. */
static double loss_gap(const char *a, const char *b) { return loss_log_gap(a, b, STEPS, STEPS); }

/* The AUC `rectrain eval` gives checkpoint folder CK on the held-out shard; NAN on failure. */
static double eval_auc(const char *ck) {
    if (run("eval --ckpt %s --data e.rshard --threads 1 --json", ck) != 0) return NAN;
    const char *j = strstr(out, "\"auc\": ");
    return j ? atof(j + 7) : NAN;
}

typedef struct row {
    const char *name;
    double step_tol, auc_tol; /* 0: bitwise */
} row;

/* One backend's run (already made: LOG and checkpoint CK) against the reference's log REF. */
static void compare(const row *r, const char *ref, const char *log, const char *ck, double ref_auc) {
    const double auc = eval_auc(ck), gap = loss_gap(ref, log);
    if (r->step_tol == 0) {
        CHECK(same_file(ref, log) && lines_of(log) == STEPS, "%s: the loss log differs from the cpu backend's",
              r->name);
        CHECK(auc == ref_auc, "%s: AUC %.9g, the cpu backend's %.9g", r->name, auc, ref_auc);
    } else {
        CHECK(gap <= r->step_tol, "%s: a step's loss %.3g from the cpu backend's (bound %.0e)", r->name, gap,
              r->step_tol);
        CHECK(fabs(auc - ref_auc) <= r->auc_tol, "%s: AUC %.9g, the cpu backend's %.9g (bound %.0e)", r->name, auc,
              ref_auc, r->auc_tol);
    }
    printf("backend %-16s: %d steps, worst step's loss %.2g from the cpu backend's, AUC %+.2g (%s)\n", r->name, STEPS,
           gap, auc - ref_auc, r->step_tol == 0 ? "bound: bitwise" : "within its bound");
}

/* The models: the DLRM every backend trains, a DeepFM and a Wide&Deep of the same tables, and
 * the DLRM with its tables stored in bf16 (SGD on both parts). */
static const struct {
    const char *file, *kind, *layers;
    const char *tables; /* the embedding config's keys beyond dim and pooling */
} MODELS[4] = {{"sgd.json", "dlrm", "\"bottom_mlp\": [64, 16], \"top_mlp\": [64, 1], \"interaction\": {\"kind\": \"dot\", "
                                    "\"self\": false}", ""},
               {"fm.json", "deepfm", "\"deep_mlp\": [64, 1]", ""},
               {"wd.json", "wide_deep", "\"deep_mlp\": [64, 1]", ""},
               {"bf16.json", "dlrm", "\"bottom_mlp\": [64, 16], \"top_mlp\": [64, 1], \"interaction\": {\"kind\": "
                                     "\"dot\", \"self\": false}", ", \"precision\": \"bf16\", \"rounding\": \"stochastic\""}};
enum { N_MODELS = 4 };

/* A model's name in file names and messages: its kind, "dlrm_bf16" for the bf16 tables'. */
static const char *model_name(int k) { return k == 3 ? "dlrm_bf16" : MODELS[k].kind; }

static int fixtures(void) {
    write_spec("spec.json", 300, 40);
    for (int k = 0; k < N_MODELS; k++) {
        FILE *f = fopen(path(MODELS[k].file), "w");
        if (!f) return 1;
        fprintf(f, "{\"format\": \"rectrain-model\", \"version\": 1, \"name\": \"%s_sgd\", \"model\": \"%s\", "
                   "\"tables\": \"data\", \"embedding\": {\"dim\": 16, \"pooling\": \"sum\"%s}, %s, \"optimizer\": "
                   "{\"dense\": {\"kind\": \"sgd\", \"lr\": 0.1}, \"sparse\": {\"kind\": \"sgd\", \"lr\": 0.1}}, "
                   "\"train\": {\"batch_size\": 256, \"epochs\": 1, \"seed\": 3}}\n",
                model_name(k), MODELS[k].kind, MODELS[k].tables, MODELS[k].layers);
        fclose(f);
    }
    return run("gen --rows 12000 --seed 5 --out all.tsv") || sh("head -n 9000 all.tsv > d.tsv") ||
           sh("tail -n 3000 all.tsv > e.tsv") || run("prep --spec spec.json --in d.tsv --out d.rshard") ||
           run("prep --spec spec.json --in e.tsv --out e.rshard --vocab-from d.rshard");
}

/* The cpu backend's run of model k: its log MODEL.cpu.loss, its AUC into *auc. */
static void test_cpu_reference(int k, double *auc) {
    char log[64], ck[64];
    snprintf(log, sizeof log, "%s.cpu.loss", model_name(k));
    snprintf(ck, sizeof ck, "%s.cpu_ck", model_name(k));
    CHECK(run("train %s --config %s --steps %d --loss-log %s --ckpt %s", COMMON, MODELS[k].file, STEPS, log, ck) == 0 &&
              lines_of(log) == STEPS,
          "cpu backend, %s: %s", model_name(k), out);
    *auc = eval_auc(ck);
    CHECK(isfinite(*auc), "eval of the cpu backend's %s: %s", model_name(k), out);
}

static void test_mpi(int k, double ref_auc) {
    const row R[2] = {{"mpi1", 0, 0}, {"mpi2", k == 0 ? 1e-6 : 1e-4, k == 3 ? 1e-4 : 1e-5}};
    for (int np = 1; np <= 2; np++) {
        char log[64], ck[64], ref[64], name[32];
        snprintf(log, sizeof log, "%s.mpi%d.loss", model_name(k), np);
        snprintf(ck, sizeof ck, "%s.mpi%d_ck", model_name(k), np);
        snprintf(ref, sizeof ref, "%s.cpu.loss", model_name(k));
        snprintf(name, sizeof name, "%s %s", R[np - 1].name, model_name(k));
        CHECK(sh("mpirun -np %d --oversubscribe --bind-to none %s train %s --config %s --steps %d --loss-log %s --ckpt %s",
                 np, cli, COMMON, MODELS[k].file, STEPS, log, ck) == 0, "mpirun -np %d, %s: %s", np, model_name(k), out);
        const row r = {name, R[np - 1].step_tol, R[np - 1].auc_tol};
        compare(&r, ref, log, ck, ref_auc);
    }
}

static void test_cache(int k, double ref_auc) {
    FILE *f = fopen(path("c.json"), "w");
    if (!f) return;
    const int port = 24000 + (int)(getpid() % 4000) * 8;
    fprintf(f, "{\"format\": \"rectrain-cluster\", \"version\": 1, \"data\": \"d.rshard\", \"model\": \"%s\", "
               "\"batch\": 256, \"epochs\": 1, \"steps\": %d, \"shuffle\": false, \"embservers\": 2, \"threads\": 1, "
               "\"base_port\": %d, \"cache\": {\"rows\": 4000}}\n", MODELS[k].file, STEPS, port);
    fclose(f);
    char log[64], ck[64], ref[64], name[32];
    snprintf(log, sizeof log, "%s.cache.loss", model_name(k));
    snprintf(ck, sizeof ck, "%s.cache_ck", model_name(k));
    snprintf(ref, sizeof ref, "%s.cpu.loss", model_name(k));
    snprintf(name, sizeof name, "cache %s", model_name(k));
    CHECK(run("cluster c.json --loss-log %s --ckpt %s", log, ck) == 0, "rectrain cluster, %s: %s", model_name(k), out);
    const row R = {name, 0, 0};
    compare(&R, ref, log, ck, ref_auc);
}

static void test_cuda(double ref_auc) {
    const int rc = run("train %s --config sgd.json --steps %d --loss-log cuda.loss --ckpt cuda_ck --device cuda", COMMON,
                       STEPS);
    if (rc != 0 && (strstr(out, "no NVIDIA") || strstr(out, "no usable NVIDIA") || strstr(out, "without the GPU engine"))) {
        const char *why = strstr(out, "rectrain train: ");
        printf("backend %-16s: skipped: %.*s", "cuda", why ? (int)strcspn(why + 16, "\n") + 1 : 1, why ? why + 16 : "\n");
        if (why) printf("\n");
        return;
    }
    CHECK(rc == 0, "train --device cuda: %s", out);
    static const row R = {"cuda", 1e-4, 1e-4};
    compare(&R, "dlrm.cpu.loss", "cuda.loss", "cuda_ck", ref_auc);
}

/* The table's contract, called as the loop calls it: the cpu backend's step hands back its
 * own step's loss (the one rec_model_train_step gives a twin model), its drain none, its vote
 * the caller's; the cuda backend without a GPU refuses at start with the probe's reason and
 * frees what it made (ASan checks the free). */
static void test_table(void) {
    rec_model_config cfg;
    rec_dataset *d = NULL;
    rec_loader *l = NULL;
    rec_model *m = NULL, *twin = NULL;
    rec_backend *be = NULL;
    const rec_batch *b = NULL;
    CHECK(rec_model_config_load(&cfg, path("sgd.json")) == REC_OK, "%s", rec_errmsg());
    CHECK(rec_dataset_open(&d, &(rec_dataset_opts){.path = path("d.rshard"), .prep_threads = 1}) == REC_OK, "%s",
          rec_errmsg());
    if (!d) return;
    CHECK(rec_model_config_bind(&cfg, rec_dataset_n_dense(d), rec_dataset_n_sparse(d), rec_dataset_table_rows(d),
                                "d.rshard") == REC_OK, "%s", rec_errmsg());
    CHECK(rec_model_init(&m, &cfg, 256, 1) == REC_OK && rec_model_init(&twin, &cfg, 256, 1) == REC_OK, "%s",
          rec_errmsg());
    CHECK(rec_loader_open(&l, d, 0, 512, 256, 2) == REC_OK && rec_loader_next(l, &b) == REC_OK && b, "%s",
          rec_errmsg());
    const rec_backend_opts o = {.device = REC_DEVICE_CPU, .model = m, .cfg = &cfg};
    CHECK(m && twin && b && rec_backend_new(&be, &o) == REC_OK && !strcmp(be->i->name, "cpu"), "%s", rec_errmsg());
    if (be && b) {
        double loss = 0, want = 1, dl = 1;
        int64_t step = -1, ds = -1;
        int any = -1;
        CHECK(be->i->start(be) == REC_OK && be->i->step(be, b, NULL, &loss, &step) == REC_OK, "%s", rec_errmsg());
        CHECK(rec_model_train_step(twin, b, &want) == REC_OK && loss == want && step == 1 && rec_model_steps(m) == 1,
              "cpu step: loss %.9g (a twin's %.9g), step %lld", loss, want, (long long)step);
        CHECK(be->i->drain(be, &dl, &ds) == REC_OK && ds == 0, "cpu drain: step %lld", (long long)ds);
        CHECK(be->i->stop_vote(be, 15, &any) == REC_OK && any == 15, "cpu vote: %d", any);
    }
    rec_backend_free(be);
    be = NULL;
    char gpu[256];
    if (rec_cuda_probe(gpu, sizeof gpu) != REC_OK) {
        const rec_backend_opts g = {.device = REC_DEVICE_CUDA, .model = m, .cfg = &cfg};
        CHECK(rec_backend_new(&be, &g) == REC_OK && !strcmp(be->i->name, "cuda"), "%s", rec_errmsg());
        if (be) CHECK(be->i->start(be) != REC_OK && rec_errmsg()[0], "cuda start without a GPU: refused, with why");
        rec_backend_free(be);
    }
    rec_loader_close(l);
    rec_model_free(m);
    rec_model_free(twin);
    rec_dataset_close(d);
    rec_model_config_free(&cfg);
}

/* The cache backend's refusals, before any work (no oracle is reached: the endpoints are
 * closed ports): what the oracles decide, what needs the whole model mid-job, what runs
 * elsewhere than its CPUs. */
static void test_cache_refusals(void) {
    static const char *const EP[1] = {"tcp://127.0.0.1:9"};
    const rec_cache_opts co = {EP, 1, EP, 1, 0, 1, {0}};
    static const struct {
        const char *opt, *says;
    } R[] = {{"--data", "the oracles read the data"}, {"--ckpt-every", "the whole model once its job ends"},
             {"--device cuda", "steps its cache on the CPUs"}, {"--workers", "steps its cache on the CPUs"}};
    for (int k = 0; k < 4; k++) {
        rec_train_opts o = {.shuffle = -1, .eval_every = -1, .cache = &co};
        static const char *const W[1] = {"tcp://127.0.0.1:9"};
        if (k == 0) o.data_path = path("d.rshard");
        if (k == 1) o.ckpt_every = 5;
        if (k == 2) o.device = REC_DEVICE_CUDA;
        if (k == 3) o.workers = W, o.n_workers = 1;
        rec_train_report rep;
        const rec_status s = rec_train(&o, &rep);
        CHECK(s == REC_EINVAL && !strncmp(rec_errmsg(), R[k].opt, strlen(R[k].opt)) && strstr(rec_errmsg(), R[k].says),
              "cache with %s: refused, saying why: %s", R[k].opt, rec_errmsg());
    }
}

int main(void) {
    int rc = clirun_setup("test_backend");
    if (rc) return rc;
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1); /* mpirun as root, as in a container */
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    if (fixtures()) {
        CHECK(0, "fixtures: %s", out);
        clirun_cleanup();
        return check_report();
    }
    test_table();
    test_cache_refusals();
    double auc[N_MODELS] = {NAN, NAN, NAN, NAN};
    for (int k = 0; k < N_MODELS; k++) {
        test_cpu_reference(k, &auc[k]);
        test_mpi(k, auc[k]);
    }
    for (int k = 0; k < N_MODELS; k++) test_cache(k, auc[k]);
    test_cuda(auc[0]);
    clirun_cleanup();
    return check_report();
}
