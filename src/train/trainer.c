/* The trainer loop behind `rectrain train` (train.h): data, model, epochs, evaluation,
 * checkpoints, export. Each step runs in a backend (backend.h: cpu, mpi or cuda), chosen once;
 * the loop never asks which.
 *
 * Determinism: the batches depend only on the data, the batch size and the order (file order,
 * or the shuffled order of rec_shuffle: the config's seed, the epoch and the block and buffer
 * sizes, which checkpoints record), every kernel gives the same bits for a given thread count, and the model is drawn
 * from the config's seed, so a fixed seed and thread count give bitwise-identical runs. A
 * resumed run restores parameters, optimizer state, the step count (the LR schedule's t), the
 * row position and the running loss sums its reports average (the epoch's, the next metrics
 * record's), so its losses and reports continue the interrupted run's exactly — on the same data,
 * which the checkpoint identifies (rows of the training range, digest of the first rows) and
 * --resume checks. A run ends early by --steps or by the caller's stop flag (a signal), and
 * then keeps the step it ended at in the checkpoint.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rectrain/ckpt.h"
#include "rectrain/core.h"
#include "rectrain/cuda.h"
#include "rectrain/export.h"
#include "rectrain/ingest.h"
#include "rectrain/plot.h"
#include "rectrain/train.h"
#include "backend_impl.h"
#include "train_impl.h"

enum { LOADER_DEPTH = REC_LOADER_DEPTH, LOSS_WINDOW = 100 };

/* Writes a REC_PREDICT_SKIPPED line for each dropped input line due next: while skips[*k] (the
 * positions, ascending) is output line *line, or for all that are left when `all`; advances
 * *k and *line. */
static void put_skipped(FILE *out, int labelled, const int64_t *skips, int64_t n_skips, int64_t *k, int64_t *line,
                        int all) {
    for (; *k < n_skips && (all || skips[*k] == *line); ++*k, ++*line)
        fputs(labelled ? REC_PREDICT_SKIPPED "\t" REC_PREDICT_SKIPPED "\n" : REC_PREDICT_SKIPPED "\n", out);
}

/* See train.h. Output line `line` (0-based) is input line `line`: before each row the dropped
 * lines due at its place are written, and those after the last row at the end. */
rec_status rec_predict(rec_model *m, rec_dataset *d, int64_t batch, FILE *out, const char *out_name,
                       const volatile sig_atomic_t *stop, rec_predict_report *rep) {
    memset(rep, 0, sizeof *rep);
    rep->mean_p = NAN;
    rep->m.auc = rep->m.logloss = rep->m.ne = rep->m.accuracy = rep->m.calibration = rep->m.ctr = NAN;
    rep->m.mean_pred = NAN;
    int64_t n;
    REC_TRY(rec_dataset_rows(d, &n));
    const int64_t *skips;
    int64_t n_skips, k = 0, line = 0;
    if (!rec_dataset_skips(d, &skips, &n_skips))
        return rec_errorf(REC_EINVAL, "%s: --bad-rows skip dropped %lld rows, and the data set was opened without "
                          "map_skips, so their lines cannot be kept in the predictions (open it with map_skips)",
                          rec_dataset_path(d), (long long)rec_dataset_bad(d)->count);
    rep->labelled = rec_dataset_has_label(d);
    rec_eval_acc *acc = NULL;
    rec_loader *l = NULL;
    rec_status s = rep->labelled && n > 0 ? rec_eval_acc_init(&acc, n) : REC_OK;
    if (!s) s = rec_loader_open(&l, d, 0, n, batch, LOADER_DEPTH);
    const rec_batch *b;
    double sum = 0;
    while (!s) {
        if (stop && *stop) {
            s = rec_errorf(REC_ESTOPPED, "%s: stopped by %s after %lld of %lld rows", rec_dataset_path(d),
                           rec_signal_name(*stop), (long long)rep->rows, (long long)n);
            break;
        }
        if ((s = rec_loader_next(l, &b)) || !b) break;
        const float *logits;
        s = rec_model_forward(m, b, &logits);
        for (int64_t i = 0; !s && i < b->n; i++, line++) {
            put_skipped(out, rep->labelled, skips, n_skips, &k, &line, 0);
            const float p = (float)rec_sigmoid(logits[i]);
            sum += p;
            if (rep->labelled) fprintf(out, "%.9g\t%g\n", p, b->label[i]);
            else fprintf(out, "%.9g\n", p);
        }
        if (!s && acc) s = rec_eval_acc_add(acc, b->n, logits, b->label);
        if (!s && ferror(out)) s = rec_errorf(REC_EIO, "%s: cannot write the predictions: %s", out_name, strerror(errno));
        rep->rows += s ? 0 : b->n;
    }
    if (!s) put_skipped(out, rep->labelled, skips, n_skips, &k, &line, 1); /* dropped lines at the end */
    if (!s && ferror(out)) s = rec_errorf(REC_EIO, "%s: cannot write the predictions: %s", out_name, strerror(errno));
    rep->skipped = k;
    if (!s && acc && rep->rows) s = rec_eval_acc_finish(acc, &rep->m);
    if (rep->rows) rep->mean_p = sum / (double)rep->rows;
    rec_loader_close(l);
    rec_eval_acc_free(acc);
    return s;
}

/* AUC of the true click probabilities of rows [row0, row1) (one "%f" per line, as
 * `rectrain gen --prob-out` writes them) against the data's labels. */
static rec_status oracle_auc(const char *path, rec_dataset *d, int64_t row0, int64_t row1, double *auc) {
    FILE *f = fopen(path, "r");
    if (!f) return rec_errorf(REC_EIO, "%s: cannot open the oracle probabilities: %s", path, strerror(errno));
    int64_t n = row1 - row0;
    float *p = NULL;
    rec_status s = rec_alloc((void **)&p, (size_t)(n > 0 ? n : 1) * sizeof(float), "oracle probabilities");
    char line[128];
    for (int64_t r = 0; !s && r < row1; r++) {
        if (!fgets(line, sizeof line, f)) {
            s = rec_errorf(REC_EFORMAT, "%s: has %lld lines, but the data has %lld rows; give the --prob-out file "
                           "written with this data", path, (long long)r, (long long)row1);
            break;
        }
        char *end;
        double v = strtod(line, &end);
        if (end == line || !(v >= 0 && v <= 1))
            s = rec_errorf(REC_EFORMAT, "%s:%lld: not a probability in [0, 1]", path, (long long)r + 1);
        if (r >= row0) p[r - row0] = (float)(log(v + 1e-30) - log1p(-v + 1e-30));  /* logit: AUC only ranks */
    }
    fclose(f);
    /* labels from the data itself */
    rec_eval_acc *acc = NULL;
    rec_loader *l = NULL;
    if (!s) s = rec_eval_acc_init(&acc, n);
    if (!s) s = rec_loader_open(&l, d, row0, row1, 4096, LOADER_DEPTH);
    const rec_batch *b;
    int64_t at = 0;
    while (!s && !(s = rec_loader_next(l, &b)) && b) {
        s = rec_eval_acc_add(acc, b->n, p + at, b->label);
        at += b->n;
    }
    rec_metrics mm;
    if (!s) s = rec_eval_acc_finish(acc, &mm);
    if (!s) *auc = mm.auc;
    rec_loader_close(l);
    rec_eval_acc_free(acc);
    rec_free(p);
    return s;
}

/* The lines of text file `path` (a last line without '\n' counts) into *n; `opt` names the
 * option in messages. A directory is refused as such. */
static rec_status count_lines(const char *opt, const char *path, int64_t *n) {
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return rec_errorf(REC_EIO, "%s %s: cannot open: %s", opt, path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
        fclose(f);
        return rec_errorf(REC_EIO, "%s %s: is a directory; give the path of the file itself", opt, path);
    }
    char buf[1 << 16];
    size_t got;
    int last = '\n';
    while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
        for (const char *p = buf; (p = memchr(p, '\n', (size_t)(buf + got - p))) != NULL; p++) (*n)++;
        last = buf[got - 1];
    }
    const int err = ferror(f) ? errno : 0;
    fclose(f);
    if (err) return rec_errorf(REC_EIO, "%s %s: cannot read: %s", opt, path, strerror(err));
    *n += last != '\n';
    return REC_OK;
}

static void print_metrics(FILE *log, const char *what, int64_t step, const rec_metrics *x) {
    if (!log) return;
    fprintf(log, "%s step %lld: auc %.5f  logloss %.5f  ne %.4f  accuracy %.4f  calibration %.4f  (%lld row%s)\n",
            what, (long long)step, x->auc, x->logloss, x->ne, x->accuracy, x->calibration, (long long)x->n, rec_s(x->n));
}

/* ---- the embedded default data set ---------------------------------------------------------------- */

rec_status rec_synth_dataset(const char *dir, int64_t rows, double scale, int threads, FILE *log) {
    rec_gen_opts g;
    rec_gen_opts_default(&g);
    g.scale = scale;
    char tsv[1024], prob[1024], spec[1024], shard[1024];
    snprintf(tsv, sizeof tsv, "%s/train.tsv", dir);
    snprintf(prob, sizeof prob, "%s/train.prob", dir);
    snprintf(spec, sizeof spec, "%s/spec.json", dir);
    snprintf(shard, sizeof shard, "%s/train.rshard", dir);
    if (log) fprintf(log, "train: generating %lld synthetic Criteo rows (scale %.2f) in %s\n", (long long)rows, g.scale, dir);
    REC_TRY(rec_gen_write(&g, rows, tsv, prob, threads, NULL));
    FILE *f = fopen(spec, "w");
    if (!f) return rec_errorf(REC_EIO, "%s: cannot create: %s", spec, strerror(errno));
    fprintf(f, "{\"format\": \"rectrain-prep\", \"version\": 1, \"name\": \"criteo_standard\",\n \"tables\": {");
    for (int c = 0; c < REC_CRITEO_NCAT; c++)
        fprintf(f, "%s\"C%d\": {\"rows\": %lld}", c ? ", " : "", c + 1, (long long)rec_gen_cardinality(&g, c));
    fprintf(f, "},\n \"dense\": [");
    for (int i = 0; i < REC_CRITEO_NINT; i++)
        fprintf(f, "%s{\"name\": \"I%d\", \"input\": \"I%d\", \"ops\": [{\"op\": \"fill_null\", \"value\": 0}, "
                   "{\"op\": \"clamp\", \"min\": 0}, {\"op\": \"cast\", \"to\": \"f32\"}, {\"op\": \"log1p\"}]}",
                i ? ",\n  " : "", i + 1, i + 1);
    fprintf(f, "],\n \"sparse\": [");
    for (int c = 0; c < REC_CRITEO_NCAT; c++)
        fprintf(f, "%s{\"name\": \"C%d\", \"input\": \"C%d\", \"table\": \"C%d\", \"ops\": [{\"op\": \"fill_null\", "
                   "\"value\": 0}, {\"op\": \"modulo\", \"divisor\": %lld}]}",
                c ? ",\n  " : "", c + 1, c + 1, c + 1, (long long)rec_gen_cardinality(&g, c));
    fprintf(f, "]}\n");
    if (fclose(f) != 0) return rec_errorf(REC_EIO, "%s: write failed", spec);
    rec_ingest_opts io = {0};
    io.spec_path = spec;
    io.in_paths = (const char *const[]){tsv};
    io.n_in = 1;
    io.out_path = shard;
    io.threads = threads;
    io.tsv.has_label = 1;
    rec_ingest_report ir;
    REC_TRY(rec_ingest(&io, &ir));
    remove(tsv);  /* the shard is all training needs */
    return REC_OK;
}

void rec_synth_dataset_remove(const char *dir) {
    static const char *const names[] = {"train.tsv", "train.prob", "spec.json", "train.rshard"};
    char p[1100];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        remove(p);
    }
    rmdir(dir);
}

/* The training scalars since the last record: mean loss, and rows and training time (less
 * evaluations and checkpoints) for samples/s. */
typedef struct train_sum {
    double loss;
    int64_t steps, rows;
    double t, aside;         /* when it began; seconds of evaluations and saves by then */
} train_sum;

/* The losses of the steps, as they come (the GPU's one step late): the divergence check, the
 * loss log, the training records every log_every steps, the progress line's mean and the
 * epoch's mean. A checkpoint keeps the record's and the epoch's sums (rec_ckpt_meta), so that
 * a resumed run reports the means the uninterrupted run does. */
typedef struct loss_acc {
    train_sum sum;
    double window[LOSS_WINDOW];
    int64_t n;
    double epoch_loss;       /* sum of the losses of the epoch's steps */
    int64_t epoch_steps;
    int epoch_partial;       /* resumed mid-epoch from a checkpoint without the epoch's sum: the
                                sum holds the steps since the resume only */
} loss_acc;

/* ---- the job -------------------------------------------------------------------------------------- */

typedef struct job {
    const rec_train_opts *o;
    rec_train_report *rep;
    rec_model_config cfg;
    rec_dataset *train, *eval;
    int64_t train_rows, eval_row0, eval_row1;  /* eval range within `eval` */
    rec_model *model;
    FILE *loss_log;
    rec_scalars *scalars;  /* --metrics, --tensorboard, --plot */
    double eval_seconds;   /* spent in periodic evaluations */
    char metrics_path[1100];
    char tmpdir[512];
    char data_path[1024], prob_path[1024];
    const char *oracle_path;
    int threads;
    int embed_plan_pending;      /* decide on the embedding plan at the first batch */
    int tuning;            /* the embedding tuner is running on the live steps */
    uint64_t data_key;     /* signature of the first batch, for the plan file */
    uint64_t data_digest;  /* rec_batch_digest of the first training rows, kept in checkpoints */
    int64_t saved_step;    /* the step the checkpoint holds: the last saved, or the one resumed */
    int64_t shuffle_block_rows, shuffle_buffer_blocks;  /* the training order (rec_shuffle); 0: file order */
    char ckpt[1100];       /* DIR/model.rckpt of --ckpt DIR, or "" */
    /* under mpirun (dist.h) */
    int dist, rank, ranks;
    int npy;              /* --npy: every rank gathers the tables to rank 0, which writes them */
    rec_plan *shard_plan; /* OPER's sharding plan (plan.h) */
    rec_exec *exec;
    rec_ckpt_meta resumed; /* the checkpoint --resume continues */
    rec_offload *offload;  /* workers preprocess part of the training data (owned by `train`) */
    double offload_baseline; /* --offload auto: samples/s of the first epoch since the decision */
    rec_backend *be;       /* what steps (backend.h): cpu, mpi, cuda or cache, chosen once */
    rec_cache_trainer *cache; /* opts.cache: the trainer joined to its job, until the backend owns it */
    int loaded;            /* --resume loaded by the backend in setup (the cache's, from its servers) */
    loss_acc *acc;         /* run's losses, which checkpoints keep */
    int complete;          /* --resume of a run that had ended: nothing to train or write */
    char complete_why[96]; /* ... "step S, all E epochs done" or "step S, and --steps N" */
    int64_t log_every;     /* steps between training records (rec_log_every) */
} job;

/* The GPU that `flag` cuda asks for: REC_OK, or the probe's reason there is none, naming the
 * flag and what its cpu value does instead (another flag's cpu would not help). */
static rec_status need_gpu(const char *flag, const char *on_cpu) {
    char name[256], why[512];
    const rec_status s = rec_cuda_probe(name, sizeof name);
    if (!s) return REC_OK;
    snprintf(why, sizeof why, "%s", rec_errmsg());
    return rec_errorf(s, "%s cuda: %s; %s cpu %s", flag, why, flag, on_cpu);
}

static rec_status open_data(job *j, const char *path, const char *const *paths, int n_paths, rec_dataset **out) {
    rec_dataset_opts d = {0};
    d.path = path;
    d.paths = paths;
    d.n_paths = n_paths;
    d.spec_path = j->o->spec_path ? j->o->spec_path : j->cfg.prep_spec[0] ? j->cfg.prep_spec : NULL;
    d.vocab_from = j->o->vocab_from;
    d.tsv = j->o->tsv;
    d.prep_device = j->o->prep_device;
    /* On the CPUs preprocessing is ~100x faster than training: one thread keeps ahead. A GPU
     * leaves the CPUs to the loader, which a batch of 65536 needs (docs/gpu.md). */
    d.prep_threads = j->o->device == REC_DEVICE_CUDA && j->threads > 1 ? (j->threads < 256 ? j->threads : 256) : 1;
    return rec_dataset_open(out, &d);
}

/* --eval: the evaluation data, of the training data's schema (the training data `data`, or
 * the oracle's job, named so), all its rows. */
static rec_status open_eval(job *j, const char *data, int n_dense, int n_sparse, const int64_t *table_rows) {
    const rec_train_opts *o = j->o;
    REC_TRY(open_data(j, o->eval_path, o->eval_paths, o->n_eval, &j->eval));
    if (!rec_dataset_has_label(j->eval))
        return rec_errorf(REC_EINVAL, "%s has no labels; evaluation needs labelled rows", o->eval_path);
    if (rec_dataset_n_dense(j->eval) != n_dense || rec_dataset_n_sparse(j->eval) != n_sparse ||
        memcmp(rec_dataset_table_rows(j->eval), table_rows, sizeof(int64_t) * (size_t)n_sparse))
        return rec_errorf(REC_EINVAL, "%s and %s have different schemas (dense width, features or table sizes); "
                          "prep both with the same spec (and --vocab-from)", o->eval_path, data);
    j->eval_row0 = 0;
    REC_TRY(rec_dataset_rows(j->eval, &j->eval_row1));
    j->rep->bad_rows += rec_dataset_bad(j->eval)->count;
    rec_bad_report_print(o->log, "train", "the evaluation data", rec_dataset_bad(j->eval), j->eval_row1);
    if (j->eval_row1 < 1)
        return rec_errorf(REC_EINVAL, "--eval %s holds no rows to evaluate; give the labelled evaluation split "
                          "(prepped with the training data's spec), or --holdout F instead", o->eval_path);
    return REC_OK;
}

/* --resume continues a run only on the data it trained on: the same rows in its training
 * range, the same first rows. Other data (a different file, day, --spec or --holdout) would
 * silently carry on elsewhere, or start past the end of a shorter range. */
static rec_status check_resume_data(const job *j, const rec_ckpt_meta *m, const char *path, const char *data) {
    if (m->train_rows == 0) { /* a version-1 checkpoint did not record its data */
        if (j->o->log) fprintf(j->o->log, "train: %s does not record its training data; it is not checked\n", path);
        return REC_OK;
    }
    if (m->train_rows == j->train_rows && m->data_digest == j->data_digest) return REC_OK;
    char what[160];
    if (m->train_rows != j->train_rows)
        snprintf(what, sizeof what, "%lld training rows, and this run has %lld", (long long)m->train_rows,
                 (long long)j->train_rows);
    else
        snprintf(what, sizeof what, "%lld training rows whose first %d differ from this run's", (long long)m->train_rows,
                 REC_CKPT_DIGEST_ROWS);
    return rec_errorf(REC_EINVAL, "--resume: %s was written training on %s (%s): resume on the data it trained on, with "
                      "the same --data, --spec, --vocab-from and --holdout, or start afresh without --resume",
                      path, what, data);
}

/* The order of the training rows: --shuffle / --no-shuffle, or without either the resumed
 * checkpoint's (shuffled when not resuming). A resumed run keeps the checkpoint's block and
 * buffer sizes, and is refused in the other order: it would go on through another sequence
 * of rows, and its losses would not continue the interrupted run's. */
static rec_status choose_order(job *j, const rec_ckpt_meta *m, const char *path) {
    const int was = m->shuffle_block_rows > 0;
    const int on = j->o->shuffle < 0 ? (j->o->resume ? was : 1) : j->o->shuffle;
    if (j->o->resume && on != was)
        return rec_errorf(REC_EINVAL, "--resume: %s was trained with its rows %s, and %s would go on through other rows "
                          "than the interrupted run: %s, or start afresh without --resume", path,
                          was ? "shuffled" : "in file order", on ? "--shuffle" : "--no-shuffle",
                          on ? "drop --shuffle" : "drop --no-shuffle");
    j->shuffle_block_rows = !on ? 0 : was ? m->shuffle_block_rows : REC_SHUFFLE_BLOCK_ROWS;
    j->shuffle_buffer_blocks = !on ? 0 : was ? m->shuffle_buffer_blocks : REC_SHUFFLE_BUFFER_BLOCKS;
    return REC_OK;
}

/* Under mpirun (any model kind): the model without its tables, the sharding plan (loaded, or
 * built from the training data's first global batches and the job's measured bandwidths;
 * every rank builds the same one, which is checked), and the executor, which holds the
 * embedding rows and, for DeepFM and Wide&Deep, the first-order tables' rows with them. */
static rec_status setup_dist(job *j) {
    const rec_train_opts *o = j->o;
    REC_TRY(rec_model_init_sharded(&j->model, &j->cfg, (int)j->cfg.batch_size, j->threads));
    rec_plan_model pm = {j->ranks, j->cfg.n_sparse, j->cfg.table_rows, j->cfg.emb_dim, j->cfg.sparse_opt.kind,
                         j->cfg.batch_size, rec_model_n_dense_params(j->model), NULL,
                         j->cfg.embed_precision == REC_PRECISION_BF16};
    /* a TorchRec plan may name the tables as the prep spec does (else t0..t{F-1}) */
    const char *spec_path = o->spec_path ? o->spec_path : j->cfg.prep_spec[0] ? j->cfg.prep_spec : NULL;
    rec_spec *spec = NULL;
    const char **names = NULL;
    if (o->plan_shards && spec_path && rec_spec_load(&spec, spec_path) == REC_OK && spec->n_sparse == pm.tables &&
        (names = calloc((size_t)pm.tables, sizeof *names)) != NULL) {
        for (int f = 0; f < pm.tables; f++) names[f] = rec_spec_table_name(spec, f);
        pm.names = names;
    }
    rec_plan_hw hw;
    rec_plan_hw_default(&hw);
    char warn[512];
    rec_status s = rec_dist_check_binding(j->threads, warn, sizeof warn);
    if (!s && warn[0] && o->log) fprintf(o->log, "train: warning: %s\n", warn);
    if (!s) s = rec_dist_measure(j->cfg.emb_dim, &hw.bw_p2p, &hw.bw_ar);
    if (!s) s = rec_dist_measure_units(&hw, j->cfg.emb_dim, j->cfg.sparse_opt.kind);
    rec_plan_profile *prof = NULL;
    rec_plan_model pm_prof = pm; /* the profile keeps its model: not the names, freed below */
    pm_prof.names = NULL;
    if (!s) s = rec_plan_profile_init(&prof, &pm_prof);
    enum { PROFILE_BATCHES = 16 };
    if (!s) s = rec_plan_profile_data(prof, j->train, j->train_rows, PROFILE_BATCHES, j->cfg.seed);
    /* resuming a save by as many ranks, without another plan asked for: its plan, so that each
     * rank's rows are its own file's */
    char saved[1200] = "";
    if (o->resume && j->resumed.shards == j->ranks && !o->plan_shards && o->shard_kind < 0)
        rec_dist_plan_path(j->ckpt, j->resumed.shard_id, saved, sizeof saved);
    const char *from = o->plan_shards ? o->plan_shards : saved[0] ? saved : NULL;
    if (!s && from) s = rec_plan_load(&j->shard_plan, from, &pm);
    free(names);
    rec_spec_free(spec);
    if (!s && from) s = rec_plan_predict(j->shard_plan, prof, &hw);
    else if (!s) s = rec_plan_build(&j->shard_plan, o->shard_kind < 0 ? REC_PLAN_OPER : (rec_plan_kind)o->shard_kind, prof, &hw);
    rec_plan_profile_free(prof);
    REC_TRY(s);
    REC_TRY(rec_dist_check_same(rec_plan_digest(j->shard_plan), "sharding plan"));
    const rec_plan_cost *c = rec_plan_costs(j->shard_plan);
    double mx = 0, sent = 0;
    for (int r = 0; r < j->ranks; r++) mx = c[r].seconds > mx ? c[r].seconds : mx, sent += c[r].sent / j->ranks;
    if (o->log)
        fprintf(o->log, "train: %d ranks; plan %s%s%s (predicted per step: %.3f ms of embedding work on the busiest rank, "
                "%.2f MB sent per rank); measured %.2f GB/s row fetches, %.2f GB/s all-reduce, a row from memory %.0f ns "
                "more than from a %.1f MB cache, %.1f ns a replicated row; rows fetched by %s\n",
                j->ranks, rec_plan_kind_name(rec_plan_get_kind(j->shard_plan)), from ? " from " : "", from ? from : "",
                mx * 1e3, sent / 1e6, hw.bw_p2p / 1e9, hw.bw_ar / 1e9, hw.miss_s * 1e9, hw.cache_bytes / 1e6,
                hw.rep_row_s * 1e9, o->alltoall ? "all-to-all-v (baseline)" : "one-sided gets");
    j->rep->plan_sent_bytes = c[j->rank].sent;
    j->rep->bw_p2p = hw.bw_p2p, j->rep->bw_ar = hw.bw_ar;
    j->rep->plan_hw = hw;
    j->rep->plan_cost = c[j->rank];
    snprintf(j->rep->shard_plan, sizeof j->rep->shard_plan, "%s", rec_plan_kind_name(rec_plan_get_kind(j->shard_plan)));
    return rec_exec_init(&j->exec, j->model, j->shard_plan, j->cfg.batch_size, o->alltoall);
}

/* --npy DIR: the model's parameters as one process holds them, whichever backend trained them
 * (under mpirun and on the servers, rank 0 gathers them: the same files for any plan). */
static rec_status export_npy(job *j) {
    rec_model *whole = NULL;
    int owned = 0;
    REC_TRY(j->be->i->whole(j->be, &whole, &owned));
    const rec_status s = whole ? rec_export_npy(whole, j->o->npy_dir, j->o->overwrite || j->o->resume) : REC_OK;
    if (owned) rec_model_free(whole);
    return s;
}

/* --workers: the training data's pieces may be made by the workers (offload.h). Under mpirun
 * every rank reads every global batch and takes its slice (dist.h), so each rank attaches to
 * every worker with a client of its own: each splits the same pieces by the same counter and
 * gets each piece exactly once, made here or by a worker, checked as in one process. (A
 * rank's slice is a run of the batch's rows in the epoch's order: shuffled, they come from
 * every piece of the window; in file order a piece, of 128 lines or a batch's, spans the
 * slices. No piece is one rank's alone.) A remote piece goes to the same worker from every
 * rank, which makes it once for all (client.c pick_worker, worker.c's kept answers). */
static rec_status attach_offload(job *j) {
    const rec_train_opts *o = j->o;
    const rec_offload_opts oo = {o->workers, o->n_workers, o->workers_file, o->worker_timeout, 0, o->log, o->sec};
    return rec_dataset_offload(j->train, &oo, j->cfg.batch_size, &j->offload);
}

/* The metric store's keys (FastFlow Table 2): the model (its config, batch and threads; under mpirun
 * its ranks, plan kind and fetch), the pipeline and model (+ the spec's text and the data's schema),
 * and the workers (+ their endpoints). */
static rec_status offload_keys(const job *j, rec_offload_keys *k) {
    char *cfg = rec_model_config_to_json(&j->cfg);
    if (!cfg) return rec_errorf(REC_ENOMEM, "out of memory");
    uint64_t h = rec_fnv1a64(REC_FNV_SEED, cfg, strlen(cfg));
    free(cfg);
    h = rec_fnv1a64(h, &j->cfg.batch_size, sizeof j->cfg.batch_size);
    h = rec_fnv1a64(h, &j->threads, sizeof j->threads);
    if (j->dist) { /* the distributed step: its ranks, the plan's kind (a plan built at the start
                      * differs from run to run with the bandwidths measured) and the fetch */
        const int32_t d[3] = {j->ranks, (int32_t)rec_plan_get_kind(j->shard_plan), j->o->alltoall};
        h = rec_fnv1a64(h, d, sizeof d);
    }
    k->model = h;
    const char *spec = j->o->spec_path ? j->o->spec_path : j->cfg.prep_spec;
    char *text = NULL;
    size_t len = 0;
    REC_TRY(rec_read_file(spec, "prep spec", 16 << 20, &text, &len));
    h = rec_fnv1a64(k->model, text, len);
    free(text);
    const int32_t dn = rec_dataset_n_dense(j->train), f = rec_dataset_n_sparse(j->train);
    h = rec_fnv1a64(h, &dn, sizeof dn);
    h = rec_fnv1a64(h, &f, sizeof f);
    k->pipeline = rec_fnv1a64(h, rec_dataset_table_rows(j->train), sizeof(int64_t) * (size_t)f);
    h = k->pipeline;
    for (int i = 0; i < j->o->n_workers; i++) h = rec_fnv1a64(h, j->o->workers[i], strlen(j->o->workers[i]) + 1);
    if (j->o->workers_file) h = rec_fnv1a64(h, j->o->workers_file, strlen(j->o->workers_file));
    k->remote = h;
    return REC_OK;
}

/* The split to train with: the given ratio, or FastFlow's decision (--offload auto); `again`:
 * measured afresh, whatever the store holds. */
static rec_status choose_offload(job *j, int again) {
    const rec_train_opts *o = j->o;
    rec_train_report *rep = j->rep;
    const double timeout = o->worker_timeout > 0 ? o->worker_timeout : 5;
    const int up = rec_offload_wait_workers(j->offload, timeout);
    if (o->log)
        fprintf(o->log, "train: offload: %d of %d worker%s answered\n", up, rec_offload_workers(j->offload),
                rec_s(rec_offload_workers(j->offload)));
    rep->has_offload = 1;
    if (o->offload_ratio > 0) {
        rep->offload_point = o->offload_point ? o->offload_point : REC_OFFLOAD_P3;
        rep->offload_ratio = o->offload_ratio;
    } else {
        char store[1024];
        if (o->offload_store) snprintf(store, sizeof store, "%s", o->offload_store);
        else rec_offload_store_default(store, sizeof store);
        rec_offload_auto_in in = {j->train, j->offload, &j->cfg, j->threads, j->cfg.batch_size, j->train_rows,
                                  o->offload_store && !o->offload_store[0] ? NULL : store, {0},
                                  REC_OFFLOAD_SPEEDUP_THRESHOLD, again, j->shard_plan, j->rank, o->alltoall};
        REC_TRY(offload_keys(j, &in.keys));
        const double t0 = rec_now();
        rec_offload_metrics *m = &rep->offload_metrics;
        rec_offload_decision *d = &rep->offload_decision;
        REC_TRY(rec__offload_auto(&in, m, d, &rep->offload_reused));
        rep->offload_auto = 1;
        rep->offload_point = d->offload ? d->point : 0;
        rep->offload_ratio = d->offload ? d->ratio : 0;
        if (o->offload_point && d->offload) { /* a point given by hand: its ratio as Algorithm 1 sets it */
            rec_offload_metrics one = *m;
            for (int p = REC_OFFLOAD_P1; p <= REC_OFFLOAD_P3; p++)
                if (p != o->offload_point) one.rthp[p] = 0;
            rec_offload_decide(&one, REC_OFFLOAD_SPEEDUP_THRESHOLD, d);
            rep->offload_point = d->offload ? d->point : 0;
            rep->offload_ratio = d->offload ? d->ratio : 0;
        }
        if (o->log) {
            fprintf(o->log, "train: offload: %s in %.1f s: Gthp %.0f rows/s, Lthp %.0f, Pcycle %.2f us/row", 
                    rep->offload_reused == 7 || (rep->offload_reused == 3 && !d->offload) ? "metrics from the store" :
                    "profiled", rec_now() - t0, m->gthp, m->lthp, m->pcycle * 1e6);
            for (int p = REC_OFFLOAD_P1; m->have_remote && p <= REC_OFFLOAD_P3; p++)
                fprintf(o->log, "; %s Rthp %.0f, Ocycle %.2f us/row", rec_offload_point_name(p), m->rthp[p],
                        m->ocycle[p] * 1e6);
            fprintf(o->log, "\ntrain: offload: %s (%s)\n", d->offload ? "offloading" : "not offloading", d->why);
        }
    }
    rec_offload_set(j->offload, rep->offload_point ? rep->offload_point : REC_OFFLOAD_P3, rep->offload_ratio);
    if (o->log) /* a share asked of workers none of which answers is made here (offload.h) */
        fprintf(o->log, "train: offload: %.0f%% of the pieces to the workers at %s%s\n", 100 * rep->offload_ratio,
                rec_offload_point_name(rep->offload_point ? rep->offload_point : REC_OFFLOAD_P3),
                !up && rep->offload_ratio > 0 ? ", but none answered: this trainer makes them until one does" : "");
    return REC_OK;
}

/* --offload auto: an epoch that trained more than REC_OFFLOAD_DRIFT away from the first epoch
 * since the decision (the workers or the network changed) makes the policy profile and decide
 * again before the next one. Under mpirun rank 0's rate decides for all: profiling again is
 * collective. */
static rec_status check_drift(job *j, double rate) {
    if (j->dist) REC_TRY(rec_dist_bcast(&rate, sizeof rate));
    if (j->offload_baseline <= 0 && rate > 0) {
        j->offload_baseline = rate;
        return REC_OK;
    }
    if (!(rate > 0) || fabs(rate / j->offload_baseline - 1) <= REC_OFFLOAD_DRIFT) return REC_OK;
    if (j->o->log)
        fprintf(j->o->log, "train: offload: the epoch trained at %.0f samples/s, %+.0f%% from %.0f: deciding again\n",
                rate, 100 * (rate / j->offload_baseline - 1), j->offload_baseline);
    j->rep->offload_redecisions++;
    j->offload_baseline = 0;
    return choose_offload(j, 1);
}

/* Options a trainer of disaggregated training does not take, refused before any work: its
 * oracles read the data and cut it into the job's batches, and its rows are on the servers
 * until the job's end. */
static rec_status check_cache_opts(const rec_train_opts *o) {
    const char *data = o->data_path ? "--data" : o->holdout > 0 ? "--holdout"
                     : o->spec_path ? "--spec" : o->vocab_from ? "--vocab-from" : o->oracle_path ? "--oracle"
                     : o->epochs > 0 ? "--epochs" : o->batch > 0 ? "--batch" : o->max_steps > 0 ? "--steps"
                     : o->shuffle >= 0 ? "--shuffle" : NULL;
    if (data)
        return rec_errorf(REC_EINVAL, "%s: the oracles read the data of disaggregated training and cut it into the job's "
                          "batches: give it to `rectrain oracle`", data);
    const char *mid = o->ckpt_every > 0 ? "--ckpt-every" : o->eval_every > 0 ? "--eval-every" : NULL;
    if (mid)
        return rec_errorf(REC_EINVAL, "%s: a trainer of disaggregated training holds the tables' rows in its cache only, "
                          "and the whole model once its job ends: train with --ckpt DIR, then `rectrain eval` or `rectrain "
                          "export` read DIR/model.rckpt", mid);
    const char *local = o->device != REC_DEVICE_CPU ? "--device cuda" : o->prep_device != REC_PREP_CPU ? "--prep-device"
                      : o->n_workers > 0 || o->workers_file ? "--workers" : o->tune ? "--tune" : o->plan_path ? "--plan"
                      : o->plan_shards ? "--plan-shards" : NULL;
    if (local)
        return rec_errorf(REC_EINVAL, "%s: a trainer of disaggregated training steps its cache on the CPUs, with batches "
                          "the oracles made: drop it", local);
    return REC_OK;
}

/* A trainer of disaggregated training (opts.cache): the oracles give the job (the data's
 * tables, the batch, the batches of every epoch: one pass of the loop), the model is bound to
 * it without its tables, and the cache backend is made here, so that a resumed job has its
 * step (the servers' last commit) before the loss log is cut to it. */
static rec_status setup_cached(job *j) {
    const rec_train_opts *o = j->o;
    if (o->config_path) REC_TRY(rec_model_config_load(&j->cfg, o->config_path));
    else rec_model_config_train_default(&j->cfg);
    rec_net_cache_info job;
    REC_TRY(rec_cache_join(&j->cache, o->cache, o->resume, o->stop, o->log, &job));
    char who[300];
    snprintf(who, sizeof who, "the oracle's job (%s)", o->cache->oracles[0]);
    REC_TRY(rec_model_config_bind(&j->cfg, job.n_dense, job.F, job.rows, who));
    if (o->eval_path) REC_TRY(open_eval(j, who, job.n_dense, job.F, job.rows)); /* trainer 0 scores it at the end */
    j->cfg.batch_size = job.batch;
    j->cfg.epochs = 1;
    j->train_rows = job.batches * job.batch; /* at most: the last batch may be shorter */
    j->shuffle_block_rows = job.shuffled ? REC_SHUFFLE_BLOCK_ROWS : 0;
    j->shuffle_buffer_blocks = job.shuffled ? REC_SHUFFLE_BUFFER_BLOCKS : 0;
    const int64_t slice = (job.batch + job.trainers - 1) / job.trainers; /* the most rows of a trainer's slice */
    REC_TRY(rec_model_init_sharded(&j->model, &j->cfg, (int)slice, j->threads));
    const rec_backend_opts bo = {.device = o->device, .model = j->model, .cfg = &j->cfg, .rank = j->rank,
                                 .log = o->log, .cache = j->cache};
    REC_TRY(rec_backend_new(&j->be, &bo));
    j->cache = NULL; /* the backend's */
    if (o->resume) {
        REC_TRY(j->be->i->load(j->be, NULL, &j->resumed));
        j->loaded = 1;
    }
    if (o->loss_log) REC_TRY(rec_loss_log_open(o->loss_log, o->resume, j->resumed.step, &j->loss_log));
    return REC_OK;
}

static rec_status setup(job *j) {
    const rec_train_opts *o = j->o;
    rec_status s;
    if (o->cache) return setup_cached(j);
    rec_ckpt_meta resumed = {0};
    const char *ckpt = j->ckpt;
    if (o->resume) {
        if (!o->ckpt_dir) return rec_errorf(REC_EINVAL, "--resume needs --ckpt DIR (the directory to resume from)");
        REC_TRY(rec_ckpt_read_config(ckpt, &j->cfg, &resumed));
        j->resumed = resumed;
        if (o->config_path) {
            rec_model_config given;
            REC_TRY(rec_model_config_load(&given, o->config_path));
            /* tables come from the checkpoint; compare with them bound */
            if (!given.table_rows) {
                s = rec_model_config_bind(&given, j->cfg.n_dense, j->cfg.n_sparse, j->cfg.table_rows, ckpt);
                if (s) {
                    rec_model_config_free(&given);
                    return s;
                }
            }
            int eq = rec_model_config_equal(&given, &j->cfg);
            rec_model_config_free(&given);
            if (!eq)
                return rec_errorf(REC_EINVAL, "--resume: %s was written for a different model than %s; resume with the "
                                  "same --config, or start afresh without --resume", ckpt, o->config_path);
        }
    } else if (o->config_path) {
        REC_TRY(rec_model_config_load(&j->cfg, o->config_path));
    } else {
        rec_model_config_train_default(&j->cfg);
    }
    REC_TRY(choose_order(j, &resumed, ckpt));
    if (o->epochs > 0) j->cfg.epochs = o->epochs;
    if (o->resume && o->batch > 0 && o->batch != j->cfg.batch_size)
        return rec_errorf(REC_EINVAL, "--resume: %s was trained in batches of %lld, and --batch %lld would change "
                          "every step after it (the rows each takes, the step count the schedule and checkpoints "
                          "go by), so the run would not continue as it was: drop --batch, or start afresh without "
                          "--resume", ckpt, (long long)j->cfg.batch_size, (long long)o->batch);
    if (o->batch > 0) j->cfg.batch_size = o->batch;
    if (o->eval_every >= 0) j->cfg.eval_every = o->eval_every;
    if (o->precision) j->cfg.precision = strcmp(o->precision, "bf16") ? REC_PRECISION_FP32 : REC_PRECISION_BF16;
    if (o->device == REC_DEVICE_CUDA) REC_TRY(rec_cuda_check_config(&j->cfg)); /* before the data */

    const char *data = o->data_path;
    j->oracle_path = o->oracle_path;
    double holdout = o->holdout;
    if (!data) {
        const char *tmp = getenv("TMPDIR");
        snprintf(j->tmpdir, sizeof j->tmpdir, "%s/rectrain-default-XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(j->tmpdir)) {
            j->tmpdir[0] = 0;
            return rec_errorf(REC_EIO, "cannot create a temporary directory under %s (set TMPDIR): %s",
                              tmp && *tmp ? tmp : "/tmp", strerror(errno));
        }
        REC_TRY(rec_synth_dataset(j->tmpdir, o->gen_rows > 0 ? o->gen_rows : 1000000, 0.05, j->threads, o->log));
        snprintf(j->data_path, sizeof j->data_path, "%s/train.rshard", j->tmpdir);
        data = j->data_path;
        snprintf(j->prob_path, sizeof j->prob_path, "%s/train.prob", j->tmpdir);
        if (!j->oracle_path && !o->eval_path) j->oracle_path = j->prob_path;
        if (!o->eval_path && holdout <= 0) holdout = 0.1;
    }
    REC_TRY(open_data(j, data, o->data_path ? o->data_paths : NULL, o->data_path ? o->n_data : 0, &j->train));
    data = rec_dataset_path(j->train); /* the file, or the first of several and how many more */
    if (o->prep_device != REC_PREP_CPU && rec_dataset_is_shard(j->train))
        return rec_errorf(REC_EINVAL, "%s is a .rshard: its rows are preprocessed already; --prep-device runs a spec's "
                          "ops, on a .rraw or a TSV given with --spec", data);
    if (o->prep_device == REC_PREP_CUDA) /* before the model and the loader's engines are made */
        REC_TRY(need_gpu("--prep-device", "runs the spec's ops on the CPUs"));
    if (!rec_dataset_has_label(j->train))
        return rec_errorf(REC_EINVAL, "%s has no labels (Criteo test format); training needs labelled rows", data);
    if ((o->n_workers > 0 || o->workers_file) && o->offload_ratio != 0) REC_TRY(attach_offload(j));
    int64_t n;
    REC_TRY(rec_dataset_rows(j->train, &n));
    j->train_rows = n;
    j->rep->bad_rows = rec_dataset_bad(j->train)->count;
    rec_bad_report_print(o->log, "train", "the training data", rec_dataset_bad(j->train), n);
    if (o->eval_path) {
        REC_TRY(open_eval(j, data, rec_dataset_n_dense(j->train), rec_dataset_n_sparse(j->train),
                          rec_dataset_table_rows(j->train)));
    } else if (holdout > 0) {
        if (!(holdout < 1)) return rec_errorf(REC_EINVAL, "--holdout must be a share in (0, 1), got %g", holdout);
        int64_t h = (int64_t)floor((double)n * holdout);
        if (h < 1 || h >= n)
            return rec_errorf(REC_EINVAL, "--holdout %g of %lld rows leaves %lld for evaluation and %lld for training; "
                              "both need at least one", holdout, (long long)n, (long long)h, (long long)(n - h));
        j->train_rows = n - h;
        j->eval = j->train;
        j->eval_row0 = n - h;
        j->eval_row1 = n;
    }
    if (j->train_rows < 1) return rec_errorf(REC_EINVAL, "%s has no rows to train on", data);
    if (j->oracle_path) { /* one true probability per row of the evaluated file */
        if (!j->eval)
            return rec_errorf(REC_EINVAL, "--oracle %s gives the ceiling AUC of the rows evaluated, and this run "
                              "evaluates none; add --eval FILE or --holdout F", j->oracle_path);
        const char *of = o->eval_path ? o->eval_path : data;
        const int64_t rows = o->eval_path ? j->eval_row1 : n;
        int64_t lines;
        REC_TRY(count_lines("--oracle", j->oracle_path, &lines));
        if (lines != rows)
            return rec_errorf(REC_EINVAL, "--oracle %s has %lld line%s and %s %s has %lld row%s: the oracle holds the "
                              "true click probability of each row of the %s file (its gen --prob-out)%s", j->oracle_path,
                              (long long)lines, rec_s(lines), o->eval_path ? "--eval" : "--data", of, (long long)rows,
                              rec_s(rows), o->eval_path ? "--eval" : "--data (with --holdout)",
                              o->eval_path && lines == n ? "; it has a line per row of --data, which --eval does not "
                              "evaluate" : "");
    }
    if (o->ckpt_dir) REC_TRY(rec_dataset_digest(j->train, j->train_rows, &j->data_digest));
    if (o->resume) REC_TRY(check_resume_data(j, &resumed, ckpt, data));
    /* a resumed config lists its tables: binding checks them against the data */
    REC_TRY(rec_model_config_bind(&j->cfg, rec_dataset_n_dense(j->train), rec_dataset_n_sparse(j->train),
                                  rec_dataset_table_rows(j->train), data));
    if (j->complete) return REC_OK; /* the data checked, nothing opened to write */
    if (o->loss_log) REC_TRY(rec_loss_log_open(o->loss_log, o->resume, resumed.step, &j->loss_log));
    if (o->resume) REC_TRY(rec_scalars_resume(j->scalars, resumed.step, resumed.record_loss_steps > 0));
    if (j->dist) REC_TRY(setup_dist(j));
    else REC_TRY(rec_model_init(&j->model, &j->cfg, (int)j->cfg.batch_size, j->threads));
    return j->offload ? choose_offload(j, 0) : REC_OK;
}

/* The directory exists: rec_train made it (or read the checkpoint from it, resuming). */
static rec_status save_ckpt(job *j, int64_t epoch, int64_t row, int64_t rows_seen) {
    rec_ckpt_meta meta = {.step = rec_model_steps(j->model), .epoch = epoch, .row = row, .rows_seen = rows_seen,
                          .seed = j->cfg.seed, .train_rows = j->train_rows, .data_digest = j->data_digest,
                          .shuffle_block_rows = j->shuffle_block_rows,
                          .shuffle_buffer_blocks = j->shuffle_buffer_blocks};
    /* the running losses: of the epoch up to `row` (none at an epoch's start), and since the
     * last training record */
    const loss_acc *a = j->acc;
    meta.epoch_loss_steps = row == 0 ? 0 : a->epoch_partial ? -1 : a->epoch_steps;
    meta.epoch_loss_sum = meta.epoch_loss_steps > 0 ? a->epoch_loss : 0;
    meta.record_loss_steps = a->sum.steps;
    meta.record_loss_sum = a->sum.loss;
    double t0 = rec_now();
    REC_TRY(j->be->i->save(j->be, j->ckpt, &meta));
    j->rep->ckpt_seconds += rec_now() - t0;
    j->rep->ckpts++;
    j->saved_step = meta.step;
    return REC_OK;
}

/* A run that ends before its last epoch does (--steps, a signal) keeps its state in the
 * checkpoint, unless the last save already holds this step. */
static rec_status keep_state(job *j, int64_t epoch, int64_t row, int64_t rows_seen) {
    if (!j->o->ckpt_dir || j->saved_step == rec_model_steps(j->model)) return REC_OK;
    return save_ckpt(j, epoch, row, rows_seen);
}

/* The embedding plan (embed.h) of the model's main tables, decided at the first batch: a plan
 * file that fits the tables is loaded (with --tune only if it was tuned on data of the same
 * signature, else it is retuned); otherwise --tune starts the tuner, which then runs on the
 * live training steps (every schedule computes the same bits, so training is unchanged). */
static rec_status start_embed_plan(job *j, const rec_batch *b) {
    const rec_train_opts *o = j->o;
    rec_embed *e = rec_model_embed(j->model, 0);
    j->embed_plan_pending = 0;
    if (!e) return REC_OK;
    j->data_key = rec_embed_data_key(e, b, 0);
    if (o->plan_path && access(o->plan_path, F_OK) == 0) {
        uint64_t key = 0;
        rec_status s = rec_embed_plan_load(e, o->plan_path, &key);
        if (s && !o->tune) return s;
        if (s == REC_EFORMAT) /* not a plan: some other file, which retuning would overwrite */
            return rec_error_append(s, "; --tune would overwrite it with the tuned plan: give --plan a plan file or a new path");
        if (!s && (!o->tune || key == j->data_key)) {
            if (o->log) fprintf(o->log, "train: embedding plan %s loaded\n", o->plan_path);
            return REC_OK;
        }
        if (o->log)
            fprintf(o->log, "train: embedding plan %s %s; retuning\n", o->plan_path,
                    s ? rec_errmsg() : "was tuned on data of another signature");
        rec_embed_set_uniform(e, rec_embed_sched_default());
    } else if (o->plan_path && !o->tune) {
        return rec_errorf(REC_EIO, "%s: no such embedding plan; add --tune to tune one and write it there", o->plan_path);
    }
    if (!o->tune) return REC_OK;
    REC_TRY(rec_embed_tune_begin(e, NULL));
    j->tuning = 1;
    return REC_OK;
}

/* Steps the tuner needs in all, at most (local rounds, then the global stage). */
static int tune_steps(const job *j) {
    rec_embed_tune_report r;
    rec_embed_tune_result(rec_model_embed(j->model, 0), &r);
    return (r.fwd_rounds > r.bwd_rounds ? r.fwd_rounds : r.bwd_rounds) + r.global_rounds;
}

/* After a step while tuning: when the tuner is done, report and write the plan. */
static rec_status finish_embed_plan(job *j) {
    rec_embed *e = rec_model_embed(j->model, 0);
    if (rec_embed_tuning(e)) return REC_OK;
    j->tuning = 0;
    rec_embed_tune_report r;
    rec_embed_tune_result(e, &r);
    static const char *const WHO[REC_EMBED_GLOBAL_CANDIDATES] = {
        "per-table plan", "per-table plan, all sample-split", "best uniform sample-split schedule",
        "best uniform table-split schedule", "best uniform row-split schedule", "plan it started from"};
    if (j->o->log)
        fprintf(j->o->log, "train: embedding plan tuned at step %lld (%d + %d local rounds): forward of the %s, "
                "backward of the %s\n", (long long)rec_model_steps(j->model), r.fwd_rounds, r.bwd_rounds,
                r.winner >= 0 && r.winner < REC_EMBED_GLOBAL_CANDIDATES ? WHO[r.winner] : "?",
                r.winner_bwd >= 0 && r.winner_bwd < REC_EMBED_GLOBAL_CANDIDATES ? WHO[r.winner_bwd] : "?");
    if (!j->o->plan_path) return REC_OK;
    REC_TRY(rec_embed_plan_save(e, j->o->plan_path, j->data_key));
    if (j->o->log) fprintf(j->o->log, "train: embedding plan written to %s\n", j->o->plan_path);
    return REC_OK;
}

static double aside_seconds(const job *j) { return j->eval_seconds + j->rep->ckpt_seconds; }

static rec_status put_train(job *j, int64_t step, train_sum *t) {
    const double now = rec_now(), rows = (double)(j->rep->rows - t->rows);
    const double secs = now - t->t - (aside_seconds(j) - t->aside);
    const double v[3] = {t->loss / (double)t->steps, j->cfg.dense_opt.lr * rec_lr_scale(&j->cfg.schedule, step),
                         secs > 0 ? rows / secs : 0};
    static const char *const NAMES[3] = {"loss", "lr", "samples_per_s"};
    *t = (train_sum){0, 0, j->rep->rows, now, aside_seconds(j)};
    return rec_scalars_write(j->scalars, step, "train", 3, NAMES, v);
}

/* An evaluation's metrics (the final one's with its calibration curve). */
static rec_status put_eval(job *j, int64_t step, const rec_metrics *m, int final) {
    const double v[5] = {m->auc, m->logloss, m->ne, m->accuracy, m->calibration};
    static const char *const NAMES[5] = {"auc", "logloss", "ne", "accuracy", "calibration"};
    REC_TRY(rec_scalars_write(j->scalars, step, "eval", 5, NAMES, v));
    return final ? rec_scalars_write_calibration(j->scalars, step, m) : REC_OK;
}

static rec_status take_loss(job *j, int64_t step, double loss, loss_acc *a) {
    if (!isfinite(loss))
        return rec_errorf(REC_EINVAL, "training diverged at step %lld (loss %g); lower the learning rates",
                          (long long)step, loss);
    if (j->loss_log && (fprintf(j->loss_log, "%lld %.9g\n", (long long)step, loss) < 0 || ferror(j->loss_log)))
        return rec_errorf(REC_EIO, "%s: cannot write the loss log: %s", j->o->loss_log, strerror(errno));
    a->sum.loss += loss, a->sum.steps++;
    a->epoch_loss += loss, a->epoch_steps++;
    a->window[a->n++ % LOSS_WINDOW] = loss;
    const int k = a->n < LOSS_WINDOW ? (int)a->n : LOSS_WINDOW;
    double mean = 0;
    for (int i = 0; i < k; i++) mean += a->window[i];
    j->rep->last_loss = mean / k;
    if (j->scalars && step % j->log_every == 0) return put_train(j, step, &a->sum);
    return REC_OK;
}

/* Waits for the steps in flight (an asynchronous backend's) and takes the last one's loss. */
static rec_status drain(job *j, loss_acc *a) {
    double loss;
    int64_t step;
    REC_TRY(j->be->i->drain(j->be, &loss, &step));
    return step > 0 ? take_loss(j, step, loss, a) : REC_OK;
}

static rec_status evaluate_job(job *j, int64_t B, rec_metrics *out) {
    return j->be->i->evaluate(j->be, j->eval, j->eval_row0, j->eval_row1, B, out);
}

/* The next batch: the backend's own (the cache's, from its oracles) or the loader's; *n the
 * global batch's rows, 0 after the last. */
static rec_status next_batch(rec_backend *be, rec_loader *l, int staged, const rec_batch **b,
                             const rec_staged_batch **sb, int64_t *n) {
    *n = 0;
    if (be->i->next) return be->i->next(be, b, n);
    const rec_status s = staged ? rec_loader_next_staged(l, sb) : rec_loader_next(l, b);
    if (!s) *n = staged ? (*sb ? (*sb)->n : 0) : *b ? (*b)->n : 0;
    return s;
}

static rec_status run(job *j) {
    const rec_train_opts *o = j->o;
    rec_train_report *rep = j->rep;
    const int64_t B = j->cfg.batch_size;
    rec_backend *be = j->be;
    rec_ckpt_meta meta = j->loaded ? j->resumed : (rec_ckpt_meta){0};
    if (o->resume && !j->loaded) {
        REC_TRY(be->i->load(be, j->ckpt, &meta));
        j->saved_step = meta.step;
        char how[96] = "";
        if (j->dist && meta.shards == 0) snprintf(how, sizeof how, "; saved by one process, sharded onto %d", j->ranks);
        else if (j->dist && meta.shards != j->ranks)
            snprintf(how, sizeof how, "; saved by %lld ranks, re-sharded onto %d", (long long)meta.shards, j->ranks);
        else if (!j->dist && meta.shards)
            snprintf(how, sizeof how, "; saved by %lld ranks, gathered into one process", (long long)meta.shards);
        if (o->log)
            fprintf(o->log, "train: resumed %s at step %lld (epoch %lld, row %lld%s)\n", j->ckpt, (long long)meta.step,
                    (long long)meta.epoch + 1, (long long)meta.row, how);
    }
    rec_progress pg;
    double total = (double)j->cfg.epochs * j->train_rows;
    const double to_steps = (double)meta.rows_seen + (double)(o->max_steps - meta.step) * B;
    if (o->max_steps > 0 && to_steps < total) total = to_steps; /* --steps, the run's last step, ends it sooner */
    rec_progress_init(&pg, "train", "rows", total);
    j->log_every = rec_log_every(o->log_every, (int64_t)ceil(total / (double)B));
    double flops = rec_model_flops_per_sample(j->model);
    loss_acc lsum = {{0, 0, rep->rows, rec_now(), aside_seconds(j)}, {0}, 0, 0, 0, 0};
    if (meta.record_loss_steps > 0) /* the steps since the last record, before the resume */
        lsum.sum.loss = meta.record_loss_sum, lsum.sum.steps = meta.record_loss_steps;
    if (meta.epoch_loss_steps > 0) lsum.epoch_loss = meta.epoch_loss_sum, lsum.epoch_steps = meta.epoch_loss_steps;
    lsum.epoch_partial = meta.epoch_loss_steps < 0 && meta.row > 0;
    j->acc = &lsum;
    rep->epoch_loss = NAN;
    int64_t rows_seen = meta.rows_seen;
    REC_TRY(be->i->start(be)); /* after --resume has loaded the model */
    rec_status s = REC_OK;
    /* Shuffled data where the backend stages its input (a GPU's windows, each batch gathered
     * there); not with workers, whose rows the trainer checksums batch by batch */
    rec_stager stager;
    const rec_shuffle shape = {j->cfg.seed, 0, j->shuffle_block_rows, j->shuffle_buffer_blocks};
    const int slots = j->shuffle_block_rows > 0 ? rec_loader_stage_slots(B, &shape) : 0;
    int staged = 0;
    if (be->i->stager && slots > 0 && !(o->n_workers > 0 || o->workers_file)) {
        s = be->i->stager(be, slots, j->shuffle_block_rows * j->shuffle_buffer_blocks, rec_dataset_path(j->train),
                          &stager);
        staged = !s;
        if (s == REC_EUNSUPPORTED) s = REC_OK; /* batches gathered and packed on the host */
        if (s) return s;
    }
    int stop = 0;
    for (int64_t epoch = meta.epoch; !s && !stop && epoch < j->cfg.epochs; epoch++) {
        int64_t row = epoch == meta.epoch ? meta.row : 0;
        if (epoch != meta.epoch) lsum.epoch_loss = 0, lsum.epoch_steps = 0, lsum.epoch_partial = 0;
        rec_loader *l = NULL;
        rec_shuffle sh = {j->cfg.seed, epoch, j->shuffle_block_rows, j->shuffle_buffer_blocks};
        if (be->i->next) /* the backend brings its batches */
            ;
        else if (staged)
            s = rec_loader_open_staged(&l, j->train, 0, j->train_rows, B, LOADER_DEPTH, &sh, row, &stager);
        else if (j->shuffle_block_rows > 0) /* the epoch's order, less the rows the resumed run took */
            s = rec_loader_open_order(&l, j->train, 0, j->train_rows, B, LOADER_DEPTH, &sh, row);
        else
            s = rec_loader_open(&l, j->train, row, j->train_rows, B, LOADER_DEPTH);
        double t0 = rec_now(), t_eval = 0, t_ckpt = rep->ckpt_seconds;
        const double secs0 = rep->train_seconds;
        const int64_t rows0 = rep->rows;
        const rec_batch *b = NULL;
        const rec_staged_batch *sb = NULL;
        int64_t n;
        while (!s && !(s = next_batch(be, l, staged, &b, &sb, &n)) && n > 0) {
            double loss;
            int stop_now = o->stop ? (int)*o->stop : 0; /* the signal's number */
            s = be->i->stop_vote(be, stop_now, &stop_now); /* every rank stops at the same step */
            if (s) break;
            if (stop_now) {
                rep->stopped_by = stop_now;
                s = drain(j, &lsum);
                if (!s) s = keep_state(j, epoch, row, rows_seen);
                stop = 1;
                break;
            }
            if (j->embed_plan_pending) s = start_embed_plan(j, b);
            int64_t lstep; /* an asynchronous backend hands back an earlier step's loss */
            if (!s) s = be->i->step(be, b, sb, &loss, &lstep);
            if (!s && lstep > 0) s = take_loss(j, lstep, loss, &lsum);
            if (!s && j->tuning) rec_progress_clear(&pg), s = finish_embed_plan(j);
            if (s) break;
            int64_t step = rec_model_steps(j->model);
            row += n;
            rows_seen += n;
            rep->rows += n;
            if (b && (o->n_workers > 0 || o->workers_file)) rep->rows_checksum += rec_batch_row_hash_sum(b);
            rep->steps++;
            char extra[96];
            snprintf(extra, sizeof extra, "loss %.4f  epoch %lld/%d", rep->last_loss, (long long)epoch + 1, j->cfg.epochs);
            rec_progress_update(&pg, (double)rows_seen, extra);
            if (j->eval && j->cfg.eval_every > 0 && step % j->cfg.eval_every == 0) {
                double te = rec_now();
                rec_metrics mm;
                s = drain(j, &lsum);
                if (!s) s = evaluate_job(j, B, &mm);
                rec_progress_clear(&pg);
                if (!s) print_metrics(o->log, "eval", step, &mm);
                if (!s) s = put_eval(j, step, &mm, 0);
                t_eval += rec_now() - te;
                j->eval_seconds += rec_now() - te;
            }
            if (!s && o->ckpt_dir && o->ckpt_every > 0 && step % o->ckpt_every == 0) {
                s = drain(j, &lsum);
                if (!s) s = save_ckpt(j, epoch, row, rows_seen);
            }
            if (o->max_steps > 0 && step >= o->max_steps) { /* --steps ends the run: its total, resumes included */
                if (!s) s = drain(j, &lsum);
                if (!s) s = keep_state(j, epoch, row, rows_seen);
                stop = 1;
                break;
            }
        }
        if (!s) s = drain(j, &lsum); /* the steps still running belong to this epoch's time */
        rep->train_seconds += rec_now() - t0 - t_eval - (rep->ckpt_seconds - t_ckpt);
        rep->wait_seconds += l ? rec_loader_wait_seconds(l) : 0;
        rec_loader_close(l);
        if (!s && !stop && o->ckpt_dir) s = save_ckpt(j, epoch + 1, 0, rows_seen);
        if (!s && !stop && rep->offload_auto && epoch + 1 < j->cfg.epochs) /* (every rank, or none) */
            s = check_drift(j, rep->train_seconds > secs0 ? (double)(rep->rows - rows0) / (rep->train_seconds - secs0) : 0);
        rec_progress_clear(&pg);
        rep->epoch_loss = lsum.epoch_steps > 0 ? lsum.epoch_loss / (double)lsum.epoch_steps : NAN;
        rep->epoch_loss_partial = lsum.epoch_partial;
        if (!s && o->log)
            fprintf(o->log, "epoch %lld/%d: %lld step%s, loss %.5f%s, %.0f samples/s\n", (long long)epoch + 1, j->cfg.epochs,
                    (long long)rec_model_steps(j->model), rec_s(rec_model_steps(j->model)), rep->epoch_loss,
                    lsum.epoch_partial ? " (the steps since the resume: the checkpoint, of format version 4 or older, "
                    "does not hold the epoch's earlier losses)" : "",
                    rep->train_seconds > 0 ? rep->rows / rep->train_seconds : 0.0);
    }
    rec_progress_finish(&pg);
    if (s) return s;
    rep->samples_per_s = rep->train_seconds > 0 ? rep->rows / rep->train_seconds : 0;
    rep->gflops = rep->samples_per_s * flops * 1e-9;
    if (rep->stopped_by) { /* asked to stop: no final evaluation or export */
        if (o->log) {
            char kept[1300];
            if (!o->ckpt_dir) snprintf(kept, sizeof kept, "nothing was saved (no --ckpt)");
            else if (j->saved_step == 0) snprintf(kept, sizeof kept, "no step was taken, so no checkpoint was written");
            else
                snprintf(kept, sizeof kept, "step %lld is saved in %s: continue with the same command and --resume%s",
                         (long long)j->saved_step, j->ckpt, o->overwrite ? " in place of --overwrite" : "");
            fprintf(o->log, "train: stopped by %s after step %lld; %s\n", rec_signal_name(rep->stopped_by),
                    (long long)rec_model_steps(j->model), kept);
        }
        return REC_OK;
    }
    if (lsum.sum.steps && j->scalars) REC_TRY(put_train(j, rec_model_steps(j->model), &lsum.sum));
    REC_TRY(be->i->download(be)); /* the caller's model, the export */
    REC_TRY(be->i->report(be, rep));
    if (j->eval) {
        REC_TRY(evaluate_job(j, B, &rep->eval));
        rep->has_eval = 1; /* reported by the caller, once (rectrain train prints it on stdout) */
        REC_TRY(put_eval(j, rec_model_steps(j->model), &rep->eval, 1));
        if (j->oracle_path) {
            REC_TRY(oracle_auc(j->oracle_path, j->eval, j->eval_row0, j->eval_row1, &rep->oracle_auc));
            rep->has_oracle = 1;
        }
    }
    if (j->npy) REC_TRY(export_npy(j));
    return REC_OK;
}

/* The metrics --plot DIR draws from, in DIR, when --metrics does not name a file. */
#define PLOT_METRICS "metrics.jsonl"

/* No file the job writes may be one it reads (the output guard, core.h): every input and
 * output option, the checkpoint `ckpt` (read too with --resume), the files --plot and
 * --tensorboard write in their folders, the --npy folder replaced whole, and the prep spec a
 * --config names when it is the one TSV data is read with. */
static rec_status check_outputs(const rec_train_opts *o, const char *ckpt) {
    const char *plot_files[8] = {PLOT_METRICS}; /* where the charts' metrics go without --metrics */
    for (int k = 0; rec_plot_files[k]; k++) plot_files[k + 1] = rec_plot_files[k];
    static const char *const tb_files[] = {"events.out.tfevents.*", NULL};
    rec_guard g = {0};
    rec_guard_ins(&g, "--data", o->data_paths ? o->data_paths : &o->data_path, o->data_paths ? o->n_data : 1);
    rec_guard_ins(&g, "--eval", o->eval_paths ? o->eval_paths : &o->eval_path, o->eval_paths ? o->n_eval : 1);
    rec_guard_in(&g, "--config", o->config_path);
    rec_guard_in(&g, "--spec", o->spec_path);
    rec_guard_in(&g, "--vocab-from", o->vocab_from);
    rec_guard_in(&g, "--oracle", o->oracle_path);
    rec_guard_in(&g, "--plan-shards", o->plan_shards);
    rec_guard_in(&g, "--workers", o->workers_file);
    rec_guard_in(&g, "--plan", o->plan_path);
    if (o->tune) rec_guard_out(&g, "--plan", o->plan_path); /* rewritten in place when retuned */
    rec_guard_in(&g, "--corun-capacity", o->corun_capacity); /* read where it exists, else written */
    rec_guard_out(&g, "--corun-capacity", o->corun_capacity);
    char store[PATH_MAX] = ""; /* auto offloading reads and writes its metric store */
    if ((o->n_workers > 0 || o->workers_file) && o->offload_ratio < 0 && !o->offload_store)
        rec_offload_store_default(store, sizeof store);
    const char *st = o->offload_store ? o->offload_store : store;
    const char *st_opt = o->offload_store ? "--offload-store" : "the default --offload-store";
    rec_guard_in(&g, st_opt, st);
    rec_guard_out(&g, st_opt, st);
    if (o->resume) rec_guard_in(&g, "--ckpt", ckpt);
    if (ckpt) rec_guard_dir(&g, "--ckpt", o->ckpt_dir, rec_ckpt_files);
    rec_guard_out(&g, "--loss-log", o->loss_log);
    rec_guard_out(&g, "--metrics", o->metrics_path);
    rec_guard_dir(&g, "--plot", o->plot_dir, o->metrics_path ? plot_files + 1 : plot_files);
    rec_guard_dir(&g, "--tensorboard", o->tensorboard_dir, tb_files);
    rec_guard_dir(&g, "--npy", o->npy_dir, NULL);
    rec_model_config c;
    char spec[sizeof c.prep_spec] = "";
    if (o->config_path && !o->spec_path && rec_model_config_load(&c, o->config_path) == REC_OK) {
        snprintf(spec, sizeof spec, "%s", c.prep_spec); /* a config that does not load is refused later */
        rec_model_config_free(&c);
    }
    rec_guard_in(&g, "--config's train.prep_spec", spec);
    return rec_guard_check(&g);
}

/* A file option naming a directory: refused before any work, saying so (--plan with --tune
 * would otherwise fail only when the tuned plan is written, after the tuning steps). */
static rec_status check_not_dir(const char *opt, const char *path) {
    struct stat st;
    if (path && stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return rec_errorf(REC_EINVAL, "%s %s: is a directory; give the path of a file", opt, path);
    return REC_OK;
}

/* Options distributed training does not take, refused before any work. */
static rec_status check_dist_opts(const rec_train_opts *o) {
    const char *no = o->tune ? "--tune" : o->plan_path ? "--plan" : NULL;
    if (no)
        return rec_errorf(REC_EINVAL, "%s is not available under mpirun (the sharded tables have no per-table embedding "
                          "plan); drop it, or train in one process", no);
    return REC_OK;
}

static rec_status check_cuda_opts(const rec_train_opts *o, int dist) {
    if (dist)
        return rec_errorf(REC_EINVAL, "--device cuda trains in one process; under mpirun the ranks train on their CPUs "
                          "(drop --device cuda)");
    /* Algorithm 1's Gthp is the trainer's own rate: profiled on a CPU copy of the model, it
     * would size the offload for a trainer that is not the one training */
    if ((o->n_workers > 0 || o->workers_file) && o->offload_ratio < 0)
        return rec_errorf(REC_EINVAL, "--offload auto (the default with --workers) profiles the trainer's step on the "
                          "CPUs, not on the GPU, so with --device cuda it would decide for the wrong device: give "
                          "--offload RATIO (the share of the pieces the workers prepare, e.g. 0.5) or --offload off");
    if (o->tune)
        return rec_errorf(REC_EINVAL, "--tune tunes the CPU embedding engine; with --device cuda, tune the GPU's with "
                          "`rectrain bench embed --device cuda --plan-out FILE` and give --plan FILE");
    if (o->plan_path && access(o->plan_path, R_OK) != 0)
        return rec_errorf(REC_EINVAL, "--plan %s: cannot be read (%s); with --device cuda the plan is read, not written: "
                          "make it with `rectrain bench embed --device cuda --plan-out %s`", o->plan_path, strerror(errno),
                          o->plan_path);
    return need_gpu("--device", "trains on the CPUs");
}

/* --resume of a run that has ended (all its epochs, or its --steps): the run is complete, and
 * resuming it would train nothing yet rewrite its outputs' ends (the last metrics record,
 * with 0 samples/s) and report a rate of 0. It is said, and nothing is written; a larger
 * --epochs or --steps continues it. A checkpoint that cannot be read is left to setup, which
 * names what is wrong with it. */
static void check_complete(job *j) {
    const rec_train_opts *o = j->o;
    rec_model_config c;
    rec_ckpt_meta m;
    if (!o->resume || rec_ckpt_read_config(j->ckpt, &c, &m) != REC_OK) return;
    const int epochs = o->epochs > 0 ? o->epochs : c.epochs;
    rec_model_config_free(&c);
    char *why = j->complete_why;
    if (o->max_steps > 0 && m.step >= o->max_steps)
        snprintf(why, sizeof j->complete_why, "step %lld, and --steps %lld", (long long)m.step, (long long)o->max_steps);
    else if (m.epoch >= epochs)
        snprintf(why, sizeof j->complete_why, "step %lld, all %d epoch%s done", (long long)m.step, epochs, rec_s(epochs));
    else
        return;
    j->complete = 1;
    j->rep->complete_step = m.step;
}

rec_status rec_train(const rec_train_opts *given, rec_train_report *rep) {
    memset(rep, 0, sizeof *rep);
    job j;
    memset(&j, 0, sizeof j);
    rec_train_opts mine = *given; /* under mpirun only rank 0 logs and writes */
    const rec_train_opts *o = &mine;
    j.npy = given->npy_dir != NULL;
    if (rec_dist_launched()) {
        REC_TRY(rec_dist_init(&j.rank, &j.ranks));
        REC_TRY(check_dist_opts(o));
        j.dist = 1;
        rep->ranks = j.ranks;
        rep->rank = j.rank;
        if (j.rank != 0)
            mine.log = NULL, mine.loss_log = NULL, mine.npy_dir = NULL, mine.metrics_path = NULL,
            mine.tensorboard_dir = NULL, mine.plot_dir = NULL;
    }
    if (o->ckpt_dir) rec_ckpt_path(o->ckpt_dir, j.ckpt, sizeof j.ckpt);
    REC_TRY(check_outputs(o, o->ckpt_dir ? j.ckpt : NULL)); /* first: whatever else is wrong, no input is harmed */
    if (o->resume && o->overwrite)
        return rec_errorf(REC_EINVAL, "--resume continues the checkpoint and --overwrite starts over: give one of them");
    if (!j.dist && (o->plan_shards || o->alltoall))
        return rec_errorf(REC_EINVAL, "%s shards the tables across the ranks of an mpirun (mpirun -np N rectrain train "
                          "...); in one process every table is local: drop it, or start the job under mpirun",
                          o->plan_shards ? "--plan-shards" : "--fetch alltoall");
    if (o->corun_capacity && (o->device != REC_DEVICE_CUDA || o->prep_device != REC_PREP_CUDA))
        return rec_errorf(REC_EINVAL, "--corun-capacity: the co-run's capacities are for --device cuda --prep-device cuda");
    const char *corun = getenv("REC_CUDA_CORUN");
    if (o->corun_capacity && corun && !strcmp(corun, "off"))
        return rec_errorf(REC_EINVAL, "--corun-capacity: REC_CUDA_CORUN=off turns the co-run off: drop one of them");
    if (o->cache) REC_TRY(check_cache_opts(o));
    else if (o->device == REC_DEVICE_CUDA) REC_TRY(check_cuda_opts(o, j.dist));
    if (o->prep_device != REC_PREP_CPU && (o->n_workers > 0 || o->workers_file))
        return rec_errorf(REC_EINVAL, "--prep-device runs the spec's ops on this host's GPU and --workers on other hosts' "
                          "CPUs: give one of them");
    if (o->precision && strcmp(o->precision, "fp32") && strcmp(o->precision, "bf16"))
        return rec_errorf(REC_EINVAL, "--precision %s: want fp32 or bf16", o->precision);
    REC_TRY(check_not_dir("--plan", o->plan_path));
    if (o->ckpt_dir && !o->resume && !o->overwrite)
        REC_TRY(rec_ckpt_check_absent(o->ckpt_dir, "add --resume to continue from it, or --overwrite to start over and replace it"));
    /* Output directories are made before the work: a path that cannot be written fails now,
     * not after the training it would have kept. */
    if (o->ckpt_dir && (!o->resume || o->cache)) /* a resumed disaggregated job writes it at its end */
        REC_TRY(rec_mkdir_p(o->ckpt_dir, "checkpoint directory"));
    /* --npy DIR holding an earlier export: replaced with --overwrite (a new run), and with
     * --resume (the run it continues exported there: the same command resumed); other files
     * in DIR are refused either way (rec_export_check). */
    if (o->npy_dir) REC_TRY(rec_export_check(o->npy_dir, o->overwrite || o->resume));
    j.o = o;
    j.rep = rep;
    if (!o->cache) check_complete(&j); /* a disaggregated job resumes from its servers */
    if (o->plot_dir && !j.complete) REC_TRY(rec_mkdir_p(o->plot_dir, "--plot directory"));
    if (o->metrics_path) snprintf(j.metrics_path, sizeof j.metrics_path, "%s", o->metrics_path);
    else if (o->plot_dir) snprintf(j.metrics_path, sizeof j.metrics_path, "%s/" PLOT_METRICS, o->plot_dir);
    if ((j.metrics_path[0] || o->tensorboard_dir) && !j.complete)
        REC_TRY(rec_scalars_open(&j.scalars, j.metrics_path[0] ? j.metrics_path : NULL, o->tensorboard_dir, o->resume));
    if (j.scalars && o->tensorboard_dir && o->log)
        fprintf(o->log, "train: TensorBoard events in %s\n", rec_scalars_tb_path(j.scalars));
    j.threads = o->threads > 0 ? o->threads : rec_cpu_count();
    j.embed_plan_pending = (o->tune || o->plan_path) && o->device != REC_DEVICE_CUDA; /* the CPU engine's plan */
    rec_status s = setup(&j);
    if (!s) {
        rep->threads = j.threads;
        rep->batch = j.cfg.batch_size;
        snprintf(rep->model, sizeof rep->model, "%s", j.cfg.name);
        rep->complete = j.complete;
        if (j.complete && o->log) /* once the data is checked: the same command, resumed */
            fprintf(o->log, "train: %s is already complete (%s): nothing to train, and nothing is written; `rectrain "
                    "eval --ckpt %s` evaluates it, and a larger --epochs or --steps trains it on\n", j.ckpt,
                    j.complete_why, o->ckpt_dir);
        if (!j.complete) {
            const rec_backend_opts bo = {o->device, j.model, &j.cfg, j.exec, j.rank, o->device_profile, o->plan_path,
                                         j.train, o->prep_device == REC_PREP_CUDA, o->corun_capacity, o->log, NULL};
            if (!j.be) s = rec_backend_new(&j.be, &bo); /* (the cache's made in setup) */
            if (!s) s = run(&j);
            if (!s && j.be->i->end) s = j.be->i->end(j.be, rep);
        }
        if (!s && j.tuning && o->log)
            fprintf(o->log, "train: the run ended before the embedding tuner finished (it needs about %d steps); "
                    "no plan was written\n", tune_steps(&j));
    }
    if (j.offload) rec_offload_get_stats(j.offload, &rep->offload);
    if (j.offload && o->log)
        fprintf(o->log, "train: offload: the workers made %lld of the %lld pieces%s\n", (long long)rep->offload.pieces_remote,
                (long long)(rep->offload.pieces_remote + rep->offload.pieces_local), j.dist ? " of rank 0" : "");
    s = rec_stream_close(j.loss_log, o->loss_log, "loss log", s);
    rec_status sc = rec_scalars_close(j.scalars);
    if (!s) s = sc;
    if (!s && o->plot_dir && !rep->stopped_by && !j.complete) s = rec_plot_run(j.metrics_path, o->plot_dir, o->log);
    /* After a failure the window is left: freeing it is collective and would wait for ranks that
     * are not coming; the caller ends the job (rec_dist_abort). */
    if (!s) rec_exec_free(j.exec);
    rec_plan_free(j.shard_plan);
    rec_backend_free(j.be); /* after the loaders, whose executors may follow its co-run */
    rec_cache_trainer_free(j.cache); /* joined, and no backend made of it */
    rec_model_free(j.model);
    if (j.eval != j.train) rec_dataset_close(j.eval);
    rec_dataset_close(j.train);
    rec_model_config_free(&j.cfg);
    if (j.tmpdir[0]) rec_synth_dataset_remove(j.tmpdir);
    return s;
}
