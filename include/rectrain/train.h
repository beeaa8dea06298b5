/* rectrain — the trainer behind `rectrain train`: its options and report, the loss log,
 * the run's scalars (--metrics, --tensorboard) and predictions. The parts it works with have
 * headers of their own: data.h (data sets, the loader), metrics.h, ckpt.h, export.h.
 */
#ifndef RECTRAIN_TRAIN_H
#define RECTRAIN_TRAIN_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>

#include "rectrain/cache.h"
#include "rectrain/data.h"
#include "rectrain/dist.h"
#include "rectrain/metrics.h"
#include "rectrain/model.h"
#include "rectrain/offload.h"
#include "rectrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the trainer ----------------------------------------------------------------------------
 * rec_train runs a whole job: open the data (or generate the embedded default), build or
 * resume the model, train epoch by epoch through a loader (reading and preprocessing overlap
 * the steps), evaluate periodically and at the end, checkpoint, export. Progress goes to
 * stderr on a terminal; each evaluation and epoch prints one line to `log` (NULL = quiet). */
enum { REC_DEVICE_CPU = 0, REC_DEVICE_CUDA = 1 };

typedef struct rec_train_opts {
    const char *config_path;   /* NULL: the small default DLRM (rec_model_config_default) */
    const char *data_path;     /* .rshard or .tsv/.gz; NULL: generate the embedded default */
    const char *eval_path;     /* separate evaluation set, or NULL */
    /* Several files read in order as one data set (rec_dataset_opts.paths): n_data > 0 lists
     * them all, data_path being the first; the same for the evaluation set. */
    const char *const *data_paths;
    int n_data;
    const char *const *eval_paths;
    int n_eval;
    double holdout;            /* without eval_path: the last `holdout` share of the rows (0 = none) */
    const char *spec_path;     /* TSV data: prep spec (default: the config's train.prep_spec; a TSV
                                  with neither is refused, naming both ways) */
    const char *vocab_from;    /* TSV data with categorify specs */
    rec_tsv_opts tsv;          /* TSV data: format and bad-row policy */
    const char *oracle_path;   /* true click probabilities (`gen --prob-out`), one line per row of
                                  the evaluated file: eval_path's rows, or with holdout the data's;
                                  another line count is refused before training */
    int epochs;                /* 0: the config's */
    int64_t batch;             /* 0: the config's */
    int threads;               /* 0: all CPUs */
    int device;                /* REC_DEVICE_CPU, or REC_DEVICE_CUDA: train a DLRM on the GPU (cuda.h;
                                  one process, the CPU model kept for checkpoints and export) */
    int prep_device;           /* TSV, .rraw data: where the spec's ops run (rec_dataset_opts) */
    const char *corun_capacity; /* --device cuda, prep_device cuda: the co-run's measured capacities
                                  (prep.h rec_cap_save): read if the file exists, else measured
                                  and written there */
    int device_profile;        /* time each part of the step (report.device_ms): GPU events with
                                  REC_DEVICE_CUDA, the wall clock (rec_model_profile) on the CPU */
    const char *precision;     /* NULL: the config's train.precision; "fp32" or "bf16": the dense
                                  products in bf16 with fp32 master weights (nn.h "precision") */
    int64_t eval_every;        /* -1: the config's; 0: at the end only */
    int64_t max_steps;         /* end the run at this step (0 = no limit): the run's total, so a
                                  resumed run ends where the uninterrupted one does */
    int shuffle;               /* order of the training rows: 1 shuffled (rec_shuffle, seeded by the
                                  config's train.seed, REC_SHUFFLE_* sizes), 0 file order, -1 the
                                  resumed checkpoint's order, or shuffled when not resuming. A
                                  resume in an order other than the checkpoint's is refused */
    const char *ckpt_dir;      /* save DIR/model.rckpt at every epoch end and every ckpt_every steps */
    int64_t ckpt_every;
    int resume;                /* continue from DIR/model.rckpt (which then must exist) */
    int overwrite;             /* start over where DIR/model.rckpt exists (without it, and without
                                  `resume`, an existing checkpoint is refused before any work), and
                                  replace an earlier export in npy_dir; not with `resume` */
    const char *npy_dir;       /* export the final parameters as .npy files (rec_export_npy) */
    const char *loss_log;      /* write "step loss" per step to this file; with `resume`, its lines
                                  after the resumed step are dropped first (a line that is not
                                  "STEP LOSS" is refused with its number) */
    const char *metrics_path;  /* JSON lines (rec_scalars): the training loss, learning rate and
                                  samples/s every log_every steps, every evaluation, and the final
                                  evaluation's calibration curve */
    const char *tensorboard_dir; /* the same scalars as a TensorBoard event file in DIR */
    const char *plot_dir;      /* at the end, PNG charts of them in DIR (plot.h), with the metrics
                                  in DIR/metrics.jsonl when metrics_path is NULL */
    int64_t log_every;         /* steps between training records (0: rec_log_every's default) */
    int64_t gen_rows;          /* embedded default: rows to generate (0 = 1M) */
    int tune;                  /* tune the embedding plan on the first steps (embed.h, tuner) */
    const char *plan_path;     /* embedding plan: load it if it exists and fits the tables (with
                                  `tune`: and the data's signature), else tune and write it here */
    /* When not NULL: a signal number that a handler stores to stop the run. It is read before
     * every step; once set, the run ends there as --steps would end it (a checkpoint keeps its
     * state when ckpt_dir is given), skips the final evaluation and export, and reports the
     * signal in rec_train_report.stopped_by. */
    const volatile sig_atomic_t *stop;
    /* Under mpirun (dist.h): the sharding plan to load (plan.h), or NULL to build one of
     * `shard_kind` (rec_plan_kind; -1: OPER, or with `resume` the plan of a save by as many
     * ranks) at the start from the training data's first global batches and bandwidths
     * measured on the running job; `alltoall` 1: fetch rows with the all-to-all-v baseline
     * instead of one-sided gets. */
    const char *plan_shards;
    int shard_kind;
    int alltoall;
    /* Preprocessing of TSV training data offloaded to workers (offload.h; `rectrain
     * prep-worker`): their endpoints; offload_ratio -1 auto (FastFlow's Algorithm 1 on profiled
     * metrics, or on those of offload_store), 0 off, else that share of the pieces, at
     * offload_point (REC_OFFLOAD_P*; 0: p'3, or the policy's with auto). */
    const char *const *workers;
    int n_workers;
    const char *workers_file;    /* endpoints listed in a file, read again every second */
    double offload_ratio;
    int offload_point;
    const char *offload_store;   /* NULL: rec_offload_store_default */
    double worker_timeout;       /* seconds; 0: 5 */
    FILE *log;
    rec_net_secure sec;          /* CURVE keys for the workers (net.h) */
    /* Bagpipe's disaggregated training (cache.h): the tables on embedding servers, the batches
     * and the cache's plan from the oracles, which read the data (no data_path, eval or
     * holdout; their batch and epochs). `resume`: a restarted durable job, from the servers'
     * last commit (no checkpoint read); ckpt_dir: the whole model saved at the end. NULL: the
     * data is read here. */
    const rec_cache_opts *cache;
} rec_train_opts;

/* --device cuda --prep-device cuda: RAP's co-run of the loader's preprocessing kernels. */
typedef struct rec_rap_result {
    int planned;                 /* a plan was made (the capacity search and the kernels' timing done) */
    int64_t probe_steps, steps;  /* the capacity search's steps; steps that followed the plan */
    double predicted_ms;         /* the plan's exposed latency a step */
    double exposed_ms;           /* measured: sum over stages of max(0, mean following the plan - without a probe) */
    double step_ms, base_ms;     /* the stages' sum: following the plan, and in the search's steps without a probe */
    int n_stages;
    double capacity_ms[8];       /* each stage's overlapping capacity, measured */
} rec_rap_result;

typedef struct rec_train_report {
    int64_t steps;             /* steps taken in this run */
    int64_t rows;              /* training rows processed in this run */
    double train_seconds;      /* wall time of the training loop, evaluations and checkpoints excluded */
    double ckpt_seconds;       /* wall time of the checkpoint saves */
    int ckpts;                 /* checkpoints saved */
    int stopped_by;            /* the signal that stopped the run (opts.stop), or 0 */
    int complete;              /* `resume` of a run that had ended (its epochs, or max_steps):
                                  nothing was trained or written (the log says so) */
    int64_t complete_step;     /* ... and the step its checkpoint holds */
    int64_t bad_rows;          /* TSV rows --bad-rows skip dropped from the training and evaluation
                                  data (logged with their first locations when counted) */
    double samples_per_s;
    double wait_seconds;       /* time the loop waited for input */
    double last_loss;          /* mean loss of the last 100 steps (the progress line's) */
    /* The mean loss of the last epoch trained: all its steps, those before a resume included
     * (NAN when it took none); with epoch_loss_partial, resumed from a checkpoint that does not
     * hold the epoch's earlier losses (version 4 or older), the mean of the steps since. */
    double epoch_loss;
    int epoch_loss_partial;
    int has_eval;
    rec_metrics eval;          /* final evaluation */
    int has_oracle;
    double oracle_auc;         /* AUC of the true probabilities on the evaluation rows */
    double gflops;             /* dense-layer GFLOP/s achieved */
    int threads;
    int64_t batch;
    char model[REC_MODEL_NAME_MAX];
    /* under mpirun: the job's ranks, this rank, the plan's kind and its predicted bytes sent
     * per step by this rank, and the executor's measured time split and bytes */
    int ranks, rank;
    char shard_plan[16];
    double plan_sent_bytes;
    double bw_p2p, bw_ar;        /* bytes/s the job measured between its ranks (plan.h's rec_plan_hw) */
    rec_plan_hw plan_hw;         /* the machine the job's plan was predicted on (those, and the
                                    cache terms rec_plan_measure_units measured) */
    rec_plan_cost plan_cost;     /* this rank's predicted costs per step under it */
    rec_exec_stats dist;
    /* with workers: the split trained with, the policy's decision and inputs (auto), and the
     * client's counters */
    int has_offload, offload_auto, offload_reused;
    int offload_redecisions;     /* decisions taken again after a drift (REC_OFFLOAD_DRIFT) */
    int offload_point;
    double offload_ratio;
    rec_offload_metrics offload_metrics;
    rec_offload_decision offload_decision;
    rec_offload_stats offload;
    /* An order-independent checksum of the rows trained in this run (the sum of a hash of each
     * row's label, dense values and ids): equal for equal multisets of rows. */
    uint64_t rows_checksum;
    /* With device_profile: milliseconds per step of each part (rec_cuda_part_name with
     * --device cuda, rec_model_part_name on the CPU), over device_steps steps */
    double device_ms[16];
    int64_t device_steps;
    double host_ms[4]; /* --device cuda with device_profile: the host's ms per step call by part
                          (rec_cuda_model_host_read: staging, enqueueing, waiting for the GPU) */
    int has_corun;
    rec_rap_result corun;
    int has_cache;               /* trained with the cache backend (opts.cache): its figures */
    rec_cache_report cache;
} rec_train_report;

/* Steps between training records: `asked` where > 0, else 100, or fewer for a run of `steps`
 * steps so that it still records about 100 points (a chart of a short run shows a curve). */
static inline int64_t rec_log_every(int64_t asked, int64_t steps) {
    if (asked > 0) return asked;
    const int64_t k = steps / 100;
    return k < 1 ? 1 : k > 100 ? 100 : k;
}
rec_status rec_train(const rec_train_opts *o, rec_train_report *rep);

/* The embedded default data: generates `rows` synthetic Criteo rows (rectrain gen, seed 1, the
 * given table scale) and their true probabilities into DIR/train.prob, writes the
 * facebookresearch/dlrm preprocessing spec for those table sizes to DIR/spec.json and preps
 * DIR/train.rshard (the TSV is removed). rec_synth_dataset_remove deletes all of it and DIR. */
rec_status rec_synth_dataset(const char *dir, int64_t rows, double scale, int threads, FILE *log);
void rec_synth_dataset_remove(const char *dir);

/* Metrics of the model on rows [row0, row1) of d, in batches of `batch` (<= the model's
 * max_batch). */
rec_status rec_evaluate(rec_model *m, rec_dataset *d, int64_t row0, int64_t row1, int64_t batch,
                        rec_metrics *out);

/* Opens the --loss-log of a run ("STEP LOSS" lines, line-buffered) into *out. Without `resume`
 * it is started afresh. With `resume` it continues the log of the run resumed at step
 * `resumed`: its lines up to that step are kept and the later ones dropped (steps a killed run
 * took after its last checkpoint, which the resumed run takes again), so that a run split by
 * stops and resumes leaves the log one uninterrupted run writes; a missing or empty file is
 * started. A file whose lines are not "STEP LOSS", or whose steps do not follow one another
 * up to `resumed` (another run's log: it starts after that step, jumps, or ends before it),
 * is refused with its line number and left as it was. */
rec_status rec_loss_log_open(const char *path, int resume, int64_t resumed, FILE **out);

/* ---- what a run reports as it goes ---------------------------------------------------------
 * Named scalars per step, written as they come to JSON lines (--metrics FILE: {"step": 100,
 * "group": "train", "loss": 0.45, ...}, a non-finite value as null) and to a TensorBoard event
 * file (--tensorboard DIR: DIR/events.out.tfevents.TIME.HOST, a scalar "GROUP/NAME" each, as
 * TensorFlow's summary writer frames them). Either may be absent. */
typedef struct rec_scalars rec_scalars;

/* Opens the JSON lines file (started afresh; with `keep`, an existing one is kept as it is
 * until rec_scalars_resume cuts it) and a new event file in tb_dir. */
rec_status rec_scalars_open(rec_scalars **out, const char *jsonl_path, const char *tb_dir, int keep);
/* A resumed run (--resume) continues the interrupted run's records: the JSON lines up to step
 * `resumed` (the checkpoint's) are kept and the later ones dropped, as --loss-log does, and so
 * are the records the interrupted run wrote at its end, which this run writes again at its
 * own: the final evaluation and its calibration curve at `resumed`, and with `end_train` (the
 * checkpoint carries steps since the last training record) the training record there. A line
 * that is not a metrics record, or whose step goes down, is refused with its number and the
 * file left as it was; a last line cut short by a kill is dropped. The event file gets a
 * SessionLog START at step resumed + 1, on which TensorBoard drops the interrupted run's
 * events of the steps this run takes again. */
rec_status rec_scalars_resume(rec_scalars *s, int64_t resumed, int end_train);
/* One record of step `step`: n scalars under `group` ("train", "eval"). */
rec_status rec_scalars_write(rec_scalars *s, int64_t step, const char *group, int n, const char *const *names,
                             const double *values);
/* A calibration curve (JSON lines only): {"step": S, "group": "calibration", "buckets":
 * [[mean predicted, observed CTR, rows], ...]}. */
rec_status rec_scalars_write_calibration(rec_scalars *s, int64_t step, const rec_metrics *m);
/* The event file's path ("" without one). */
const char *rec_scalars_tb_path(const rec_scalars *s);
/* Flushes and closes; REC_EIO naming the file when a write failed. NULL is a no-op. */
rec_status rec_scalars_close(rec_scalars *s);

/* rec_predict: every row's click probability P = rec_sigmoid(logit), rounded to float. */
typedef struct rec_predict_report {
    int64_t rows;            /* rows scored */
    int64_t skipped;         /* input lines --bad-rows skip dropped, written as REC_PREDICT_SKIPPED */
    int labelled;            /* the data has labels: `m` holds their metrics (as rec_evaluate's) */
    double mean_p;           /* NaN over no rows */
    rec_metrics m;           /* over no rows: NaN figures, n = 0 */
} rec_predict_report;

/* The line of an input line SKIP mode dropped ("nan", or "nan<TAB>nan" for labelled data): any
 * TSV or numeric reader takes it as a missing value, where an empty line would be skipped and
 * shift every later prediction onto the wrong row. */
#define REC_PREDICT_SKIPPED "nan"

/* Scores every row of d in order, in batches of `batch` (<= the model's max_batch), writing
 * exactly one line per input line to out: "P" or, for labelled data, "P<TAB>LABEL" (P printed
 * with %.9g, which reads back as the same float); a line the TSV reader dropped in SKIP mode
 * gets REC_PREDICT_SKIPPED in each column, in its place, so line k of out is always about
 * line k of the input (d must then be opened with map_skips: REC_EINVAL otherwise). Streams:
 * memory does not grow with the rows (but for the metrics of labelled data, 8 bytes a row).
 * `stop` (or NULL): a signal number a handler stores; it is read before every batch and ends
 * the work with REC_ESTOPPED, `out` then holding the lines written so far. A write to out
 * that fails (a full disk) ends the work with REC_EIO naming `out_name`. */
rec_status rec_predict(rec_model *m, rec_dataset *d, int64_t batch, FILE *out, const char *out_name,
                       const volatile sig_atomic_t *stop, rec_predict_report *rep);

#ifdef __cplusplus
}
#endif
#endif
