/* rectrain train / eval / export: training jobs, evaluation of checkpoints, .npy export. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "rectrain/ckpt.h"
#include "rectrain/core.h"
#include "rectrain/dist.h"
#include "rectrain/cuda.h"
#include "rectrain/export.h"
#include "rectrain/net.h"
#include "rectrain/train.h"

static const char TRAIN_USAGE[] =
    "usage: rectrain train [--config CFG.json] [--data TRAIN] [--eval EVAL | --holdout F] [options]\n"
    "\n"
    "Trains a model of the DLRM family. With no arguments: generates 1M synthetic Criteo rows,\n"
    "trains the small default DLRM on 90% of them and prints the AUC on the last 10% beside the\n"
    "AUC of the rows' true click probabilities (the ceiling).\n"
    "\n"
    "  --config FILE      model config (configs/dlrm_kaggle.json, ...; default: small DLRM)\n"
    "  --data FILES       training data: .rshard (from rectrain prep), or .tsv/.gz or .rraw (prep\n"
    "                     --raw) preprocessed on the fly with --spec; several files are read in\n"
    "                     order as one data set:\n"
    "                     comma-separated, --data repeated, or globs (version order)\n"
    "  --eval FILES       evaluation data (same schema; a list as for --data)\n"
    "  --holdout F        evaluate on the last F share of --data's rows (time order) instead\n"
    "  --spec FILE        prep spec for .tsv and .rraw data (default: the config's train.prep_spec)\n"
    "  --vocab-from FILE  .rshard with the vocabularies of a categorify spec (.tsv, .rraw data)\n"
    "  --prep-device D    where the spec's ops run on .tsv and .rraw data: cpu (default), or\n"
    "                     cuda: RAP's GPU executor, on its own stream beside the training\n"
    "                     (docs/gpu.md); the same rows either way\n"
    "  --corun-capacity FILE  with --device cuda --prep-device cuda: the training stages'\n"
    "                     capacities for RAP's plan: read FILE if it exists (measured for this\n"
    "                     GPU, model and batch), else measure them and write FILE\n"
    "TSV data (--data, --eval):\n"
    CLI_TSV_HELP
    "  --epochs E         epochs (default: the config's)\n"
    "  --batch B          batch size (default: the config's)\n"
    "  --threads T        threads (default: all CPUs)\n"
    "  --device D         cpu (default) or cuda: train a DLRM on the NVIDIA GPU (one process)\n"
    "  --precision P      fp32 or bf16 (default: the config's train.precision, else fp32): the\n"
    "                     MLPs and the interaction multiply bf16 operands, with fp32 sums,\n"
    "                     master weights and optimizer state (CPU: oneDNN's AVX512-BF16/AMX\n"
    "                     kernels where the CPU has them, else emulated at fp32 speed)\n"
    "  --eval-every N     evaluate every N steps as well as at the end\n"
    "  --steps N          end the run at step N: the run's total, so a --resume of it ends\n"
    "                     where the run never stopped does\n"
    "  --shuffle          read the training rows in a random order drawn from the config's\n"
    "                     seed, new every epoch (default): blocks of " CLI_STR(REC_SHUFFLE_BLOCK_ROWS) " rows in random\n"
    "                     order, mixed " CLI_STR(REC_SHUFFLE_BUFFER_BLOCKS) " blocks at a time (a .tsv: its blocks in file order,\n"
    "                     mixed). Evaluation rows are never shuffled in. With --resume: the\n"
    "                     checkpoint's order\n"
    "  --no-shuffle       read the training rows in file order (time order for Criteo)\n"
    "  --ckpt DIR         save DIR/model.rckpt at the end of every epoch and of the run\n"
    "                     (--steps, Ctrl-C or SIGTERM), atomically; a DIR/model.rckpt that\n"
    "                     exists needs --resume or --overwrite\n"
    "  --ckpt-every N     ... and every N steps\n"
    "  --resume           continue from DIR/model.rckpt (same data; losses continue exactly);\n"
    "                     a run that has ended is said to be complete, and nothing is written\n"
    "  --overwrite        start over, replacing DIR/model.rckpt (and an earlier export in --npy DIR)\n"
    "  --npy DIR          export the trained parameters as DIR/NAME.npy (written as DIR.tmp,\n"
    "                     renamed at the end); an earlier export in DIR is replaced with\n"
    "                     --overwrite, or with --resume (the run resumed exported there);\n"
    "                     a DIR holding other files is refused\n"
    "  --oracle FILE      true click probabilities (gen --prob-out) to report the ceiling AUC:\n"
    "                     a line per row of the --eval file, or of --data with --holdout\n"
    "  --loss-log FILE    write \"step loss\" for every step (with --resume: the lines after the\n"
    "                     resumed step are dropped first, so the log is that of one run;\n"
    "                     another run's log is refused)\n"
    "  --metrics FILE     JSON lines as the run goes: training loss, learning rate and samples/s\n"
    "                     every --log-every steps, every evaluation, the final calibration curve\n"
    "                     (with --resume: the records up to the resumed step are kept, so the\n"
    "                     file and --plot's charts show the whole run)\n"
    "  --tensorboard DIR  the same scalars as a TensorBoard event file in DIR (tensorboard\n"
    "                     --logdir DIR shows them)\n"
    "  --plot DIR         at the end, PNG charts in DIR: loss.png, eval.png, calibration.png\n"
    "                     (the embedded default job: rectrain-charts, evaluating every 200 steps)\n"
    "  --log-every N      steps between training records of --metrics/--tensorboard (default 100)\n"
    "  --progress-every S when stderr is not a terminal: a progress line (rate, ETA, loss) every\n"
    "                     S seconds (default 30; REC_PROGRESS_EVERY; REC_PROGRESS=0: none)\n"
    "  --tune             tune the embedding engine's per-table plan on the first steps\n"
    "                     (at most 174; results are unchanged, only speed)\n"
    "  --plan FILE        embedding plan: load FILE if it fits the tables; with --tune, retune\n"
    "                     when FILE is missing or was tuned on other data, and write it. With\n"
    "                     --device cuda: a GPU plan (bench embed --device cuda --plan-out FILE)\n"
    "  --rows N           embedded default only: rows to generate (default 1M)\n"
    "  --json             print a JSON summary as the last line of stdout\n"
    "Under mpirun -np N (docs/distributed.md):\n"
    "  --plan-shards FILE the sharding plan for N ranks: rectrain plan --out, or TorchRec's\n"
    "                     ({\"table_plans\": ...}, dev/torchrec_plan.py; see docs/distributed.md)\n"
    "  --shard-kind K     without --plan-shards: build a plan of kind K at the start from the\n"
    "                     training data: oper (default), greedy, table, row, column, replicated\n"
    "  --fetch M          gets (default: one-sided MPI gets of remote rows) or alltoall (the\n"
    "                     all-to-all-v baseline)\n"
    "Preprocessing on other hosts (docs/offload.md), TSV data:\n"
    "  --workers LIST     endpoints of rectrain prep-worker processes, comma-separated\n"
    "                     (tcp://HOST:PORT,...), or @FILE: one per line, read again every\n"
    "                     second (workers join and leave the running job)\n"
    "  --offload MODE     auto (default with --workers): profile, then offload the share that\n"
    "                     pays (FastFlow); off; or a share of the pieces in [0, 1]\n"
    "  --offload-at P     p1 (the trainer reads, workers preprocess), p2 (workers read and\n"
    "                     preprocess 128-line pieces), p3 (workers read, preprocess and batch);\n"
    "                     default: p3, or the policy's choice with auto\n"
    "  --offload-store F  the metric store auto reads and writes (default\n"
    "                     ~/.cache/rectrain/offload-metrics.json; \"none\" keeps nothing)\n"
    "  --worker-timeout S a piece unanswered for S seconds is made here (default 5)\n"
    CLI_SECURE_CLIENT_HELP;

/* The executor's work per unit as `plan`'s cost model counts it (its --slice-ns, --lookup-ns
 * and --get-ns): ns per id of this rank's slices, per gradient record it applied as owner,
 * per row it fetched beyond the row's bytes at the measured bandwidth — the last two of rows
 * in cache: less the misses the plan predicts for this rank at the measured miss cost; NaN
 * where none. */
static void unit_ns(const rec_train_report *r, double ns[3]) {
    const rec_exec_stats *d = &r->dist;
    const double n = (double)d->steps, miss = r->plan_hw.miss_s;
    const double net = d->fetch_s - (r->bw_p2p > 0 ? d->fetched_bytes / r->bw_p2p : 0) - r->plan_cost.fetch_misses * miss * n;
    const double missed = r->plan_cost.misses * miss * n;
    ns[0] = d->ids > 0 ? d->slice_s / d->ids * 1e9 : NAN;
    ns[1] = d->records > 0 ? fmax(d->owner_s - missed, 0) / d->records * 1e9 : NAN;
    ns[2] = d->fetched > 0 ? (net > 0 ? net : 0) / d->fetched * 1e9 : NAN;
}

static void print_json(const rec_train_report *r) {
    printf("{\"model\": \"%s\", \"rows\": %lld, \"steps\": %lld, \"batch\": %lld, \"threads\": %d, "
           "\"seconds\": %s, \"samples_per_s\": %s, \"gflops\": %s, \"input_wait_s\": %s, \"loss\": %s",
           r->model, (long long)r->rows, (long long)r->steps, (long long)r->batch, r->threads,
           cli_jnum("%.3f", r->train_seconds), cli_jnum("%.1f", r->samples_per_s), cli_jnum("%.2f", r->gflops),
           cli_jnum("%.3f", r->wait_seconds), cli_jnum("%.6f", r->epoch_loss));
    if (r->epoch_loss_partial) printf(", \"loss_since_resume\": true");
    if (r->ckpts) printf(", \"ckpts\": %d, \"ckpt_seconds\": %s", r->ckpts, cli_jnum("%.3f", r->ckpt_seconds));
    if (r->stopped_by) printf(", \"stopped_by\": %d", r->stopped_by);
    printf(", \"bad_rows\": %lld", (long long)r->bad_rows);
    if (r->has_eval)
        printf(", \"eval_rows\": %lld, \"auc\": %s, \"logloss\": %s, \"ne\": %s, \"accuracy\": %s, \"calibration\": %s",
               (long long)r->eval.n, cli_jnum("%.6f", r->eval.auc), cli_jnum("%.6f", r->eval.logloss),
               cli_jnum("%.6f", r->eval.ne), cli_jnum("%.6f", r->eval.accuracy), cli_jnum("%.6f", r->eval.calibration));
    if (r->has_oracle) printf(", \"oracle_auc\": %s", cli_jnum("%.6f", r->oracle_auc));
    if (r->has_corun) {
        const rec_rap_result *c = &r->corun;
        printf(", \"corun\": {\"planned\": %s, \"probe_steps\": %lld, \"steps\": %lld, \"predicted_exposed_ms\": %s, "
               "\"exposed_ms\": %s, \"stages_ms\": %s, \"stages_base_ms\": %s}", c->planned ? "true" : "false",
               (long long)c->probe_steps, (long long)c->steps, cli_jnum("%.4f", c->predicted_ms),
               cli_jnum("%.4f", c->exposed_ms), cli_jnum("%.4f", c->step_ms), cli_jnum("%.4f", c->base_ms));
    }
    if (r->has_offload) {
        const rec_offload_stats *x = &r->offload;
        printf(", \"offload\": {\"point\": \"%s\", \"ratio\": %s, \"auto\": %s, \"pieces_local\": %lld, "
               "\"pieces_remote\": %lld, \"redone\": %lld, \"late\": %lld, \"refused\": %lld, \"worker_downs\": %lld, "
               "\"bytes_in\": %llu, \"bytes_out\": %llu", rec_offload_point_name(r->offload_point),
               cli_jnum("%.4f", r->offload_ratio), r->offload_auto ? "true" : "false", (long long)x->pieces_local,
               (long long)x->pieces_remote, (long long)x->redone, (long long)x->late, (long long)x->refused,
               (long long)x->worker_downs, (unsigned long long)x->bytes_in, (unsigned long long)x->bytes_out);
        if (r->offload_auto) {
            const rec_offload_metrics *m = &r->offload_metrics;
            const rec_offload_decision *d = &r->offload_decision;
            printf(", \"redecisions\": %d", r->offload_redecisions);
            printf(", \"from_store\": %d, \"gthp\": %s, \"lthp\": %s, \"pcycle_us\": %s, \"rthp\": [%s, %s, %s], "
                   "\"ocycle_us\": [%s, %s, %s], \"decision\": {\"offload\": %s, \"point\": \"%s\", \"ratio\": %s, "
                   "\"est\": %s, \"upper\": %s, \"lower\": %s}", r->offload_reused, cli_jnum("%.1f", m->gthp),
                   cli_jnum("%.1f", m->lthp), cli_jnum("%.4f", m->pcycle * 1e6), cli_jnum("%.1f", m->rthp[1]),
                   cli_jnum("%.1f", m->rthp[2]), cli_jnum("%.1f", m->rthp[3]), cli_jnum("%.4f", m->ocycle[1] * 1e6),
                   cli_jnum("%.4f", m->ocycle[2] * 1e6), cli_jnum("%.4f", m->ocycle[3] * 1e6),
                   d->offload ? "true" : "false", rec_offload_point_name(d->point), cli_jnum("%.4f", d->ratio),
                   cli_jnum("%.1f", d->est), cli_jnum("%.1f", d->upper), cli_jnum("%.1f", d->lower));
        }
        printf("}");
    }
    if (r->rows_checksum) printf(", \"rows_checksum\": \"%016llx\"", (unsigned long long)r->rows_checksum);
    if (r->ranks > 0) {
        const rec_exec_stats *d = &r->dist;
        const double n = d->steps > 0 ? (double)d->steps : 1;
        printf(", \"ranks\": %d, \"shard_plan\": \"%s\", \"step_ms\": {\"local\": %s, \"fetch\": %s, \"dense\": %s, "
               "\"allreduce\": %s, \"exchange\": %s, \"skew\": %s, \"exposed_comm\": %s, \"slice\": %s, \"owner\": %s}, "
               "\"work_per_step\": "
               "{\"ids\": %s, \"records\": %s, \"fetched_rows\": %s}, \"sent_bytes_per_step\": %s, \"recv_bytes_per_step\": %s, "
               "\"plan_sent_bytes_per_step\": %s, \"worst_sent_vs_plan\": {\"rank\": %d, \"deviation\": %s}", r->ranks, r->shard_plan, cli_jnum("%.4f", d->local_s / n * 1e3),
               cli_jnum("%.4f", d->fetch_s / n * 1e3), cli_jnum("%.4f", d->dense_s / n * 1e3),
               cli_jnum("%.4f", d->allreduce_s / n * 1e3), cli_jnum("%.4f", d->exchange_s / n * 1e3),
               cli_jnum("%.4f", d->skew_s / n * 1e3), cli_jnum("%.4f", d->wait_s / n * 1e3), cli_jnum("%.4f", d->slice_s / n * 1e3), cli_jnum("%.4f", d->owner_s / n * 1e3),
               cli_jnum("%.1f", d->ids / n), cli_jnum("%.1f", d->records / n), cli_jnum("%.1f", d->fetched / n),
               cli_jnum("%.1f", d->sent_bytes / n), cli_jnum("%.1f", d->recv_bytes / n), cli_jnum("%.1f", r->plan_sent_bytes),
               d->worst_sent_rank, cli_jnum("%.4f", d->worst_sent_dev));
        double ns[3];
        unit_ns(r, ns);
        const rec_plan_hw *hw = &r->plan_hw;
        printf(", \"unit_ns\": {\"slice_id\": %s, \"owner_record\": %s, \"fetched_row\": %s, \"miss\": %s, "
               "\"rep_row\": %s}, \"cache_mb\": %s, \"plan_misses_per_step\": %s, \"gbps\": {\"p2p\": %s, "
               "\"allreduce\": %s}", cli_jnum("%.2f", ns[0]), cli_jnum("%.2f", ns[1]), cli_jnum("%.2f", ns[2]),
               cli_jnum("%.2f", hw->miss_s * 1e9), cli_jnum("%.2f", hw->rep_row_s * 1e9),
               cli_jnum("%.3f", hw->cache_bytes / 1e6), cli_jnum("%.1f", r->plan_cost.misses),
               cli_jnum("%.3f", r->bw_p2p / 1e9), cli_jnum("%.3f", r->bw_ar / 1e9));
    }
    printf("}\n");
}

/* rectrain train with the lists of --data and --eval in `data` and `evl` (freed by the
 * caller, whatever the return). */
static int train_main(int argc, char **argv, cli_path_list *data, cli_path_list *evl) {
    const char *cmd = "train";
    rec_train_opts o;
    memset(&o, 0, sizeof o);
    o.tsv.has_label = -1;
    o.offload_ratio = -1;
    const char *workers = NULL, *offload = NULL, *offload_at = NULL, *progress_every = NULL;
    static char worker_buf[4096];
    static const char *worker_v[64];
    o.eval_every = -1;
    o.shuffle = -1;
    o.log = stderr;
    o.shard_kind = -1; /* not given: OPER, or the plan of the save --resume continues */
    int json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = CLI_OK;
        if (cli_is_help(a)) { fputs(TRAIN_USAGE, stdout); return CLI_OK; }
        else if (!strcmp(a, "--config")) rc = cli_str(cmd, argc, argv, &i, &o.config_path);
        else if (!strcmp(a, "--data")) rc = cli_paths(cmd, argc, argv, &i, data);
        else if (!strcmp(a, "--eval")) rc = cli_paths(cmd, argc, argv, &i, evl);
        else if (!strcmp(a, "--holdout")) rc = cli_double(cmd, argc, argv, &i, 1e-9, 0.999999, &o.holdout);
        else if (!strcmp(a, "--spec")) rc = cli_str(cmd, argc, argv, &i, &o.spec_path);
        else if (!strcmp(a, "--vocab-from")) rc = cli_str(cmd, argc, argv, &i, &o.vocab_from);
        else if (!strcmp(a, "--epochs")) rc = cli_int(cmd, argc, argv, &i, 1, 10000, &o.epochs);
        else if (!strcmp(a, "--batch")) rc = cli_i64(cmd, argc, argv, &i, 1, 1 << 20, &o.batch);
        else if (!strcmp(a, "--threads")) rc = cli_int(cmd, argc, argv, &i, 1, 256, &o.threads);
        else if (!strcmp(a, "--device")) {
            const char *v = NULL;
            rc = cli_str(cmd, argc, argv, &i, &v);
            if (!rc && strcmp(v, "cpu") && strcmp(v, "cuda")) rc = cli_usage(cmd, "--device %s: want cpu or cuda", v);
            o.device = !rc && !strcmp(v, "cuda") ? REC_DEVICE_CUDA : REC_DEVICE_CPU;
        } else if (!strcmp(a, "--prep-device")) {
            const char *v = NULL;
            rc = cli_str(cmd, argc, argv, &i, &v);
            if (!rc && strcmp(v, "cpu") && strcmp(v, "cuda")) rc = cli_usage(cmd, "--prep-device %s: want cpu or cuda", v);
            o.prep_device = !rc && !strcmp(v, "cuda") ? REC_PREP_CUDA : REC_PREP_CPU;
        } else if (!strcmp(a, "--corun-capacity")) {
            rc = cli_str(cmd, argc, argv, &i, &o.corun_capacity);
        } else if (!strcmp(a, "--precision")) {
            rc = cli_str(cmd, argc, argv, &i, &o.precision);
            if (!rc && strcmp(o.precision, "fp32") && strcmp(o.precision, "bf16"))
                rc = cli_usage(cmd, "--precision %s: want fp32 or bf16", o.precision);
        } else if (!strcmp(a, "--eval-every")) rc = cli_i64(cmd, argc, argv, &i, 0, (int64_t)1 << 50, &o.eval_every);
        else if (!strcmp(a, "--steps")) rc = cli_i64(cmd, argc, argv, &i, 1, (int64_t)1 << 50, &o.max_steps);
        else if (!strcmp(a, "--ckpt")) rc = cli_str(cmd, argc, argv, &i, &o.ckpt_dir);
        else if (!strcmp(a, "--ckpt-every")) rc = cli_i64(cmd, argc, argv, &i, 1, (int64_t)1 << 50, &o.ckpt_every);
        else if (!strcmp(a, "--resume")) o.resume = 1;
        else if (!strcmp(a, "--shuffle") || !strcmp(a, "--no-shuffle")) {
            const int on = !strcmp(a, "--shuffle");
            if (o.shuffle == !on) return cli_usage(cmd, "give --shuffle or --no-shuffle, not both");
            o.shuffle = on;
        }
        else if (!strcmp(a, "--overwrite")) o.overwrite = 1;
        else if (!strcmp(a, "--npy")) rc = cli_str(cmd, argc, argv, &i, &o.npy_dir);
        else if (!strcmp(a, "--oracle")) rc = cli_str(cmd, argc, argv, &i, &o.oracle_path);
        else if (!strcmp(a, "--loss-log")) rc = cli_str(cmd, argc, argv, &i, &o.loss_log);
        else if (!strcmp(a, "--metrics")) rc = cli_str(cmd, argc, argv, &i, &o.metrics_path);
        else if (!strcmp(a, "--tensorboard")) rc = cli_str(cmd, argc, argv, &i, &o.tensorboard_dir);
        else if (!strcmp(a, "--plot")) rc = cli_str(cmd, argc, argv, &i, &o.plot_dir);
        else if (!strcmp(a, "--log-every")) rc = cli_i64(cmd, argc, argv, &i, 1, (int64_t)1 << 50, &o.log_every);
        else if (!strcmp(a, "--progress-every")) rc = cli_str(cmd, argc, argv, &i, &progress_every);
        else if (!strcmp(a, "--tune")) o.tune = 1;
        else if (!strcmp(a, "--plan")) rc = cli_str(cmd, argc, argv, &i, &o.plan_path);
        else if (!strcmp(a, "--rows")) rc = cli_i64(cmd, argc, argv, &i, 1000, (int64_t)1 << 40, &o.gen_rows);
        else if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--plan-shards")) rc = cli_str(cmd, argc, argv, &i, &o.plan_shards);
        else if (!strcmp(a, "--workers")) rc = cli_str(cmd, argc, argv, &i, &workers);
        else if (!strcmp(a, "--offload")) rc = cli_str(cmd, argc, argv, &i, &offload);
        else if (!strcmp(a, "--offload-at")) rc = cli_str(cmd, argc, argv, &i, &offload_at);
        else if (!strcmp(a, "--offload-store")) rc = cli_str(cmd, argc, argv, &i, &o.offload_store);
        else if (!strcmp(a, "--worker-timeout")) rc = cli_double(cmd, argc, argv, &i, 0.1, 3600, &o.worker_timeout);
        else if (!strcmp(a, "--shard-kind")) {
            const char *v;
            rc = cli_str(cmd, argc, argv, &i, &v);
            if (!rc && !strcmp(v, "torchrec"))
                rc = cli_usage(cmd, "--shard-kind torchrec: TorchRec's plans come from its planner (dev/torchrec_plan.py); "
                               "give the file with --plan-shards");
            else if (!rc && ((o.shard_kind = rec_plan_kind_from_name(v)) < 0 || o.shard_kind >= REC_PLAN_KINDS))
                rc = cli_usage(cmd, "--shard-kind must be oper, greedy, table, row, column or replicated (got '%s')", v);
        } else if (!strcmp(a, "--fetch")) {
            const char *v;
            rc = cli_str(cmd, argc, argv, &i, &v);
            if (!rc && strcmp(v, "gets") && strcmp(v, "alltoall"))
                rc = cli_usage(cmd, "--fetch must be gets or alltoall (got '%s')", v);
            if (!rc) o.alltoall = !strcmp(v, "alltoall");
        }
        else if ((rc = cli_secure_option(cmd, argc, argv, &i, &o.sec)) >= 0) {}
        else if ((rc = cli_tsv_option(cmd, argc, argv, &i, &o.tsv)) < 0) rc = cli_usage(cmd, "unknown option '%s'", a);
        if (rc) return rc;
    }
    if (o.plan_shards && o.shard_kind >= 0)
        return cli_usage(cmd, "--plan-shards gives the plan; --shard-kind builds one: give one of them");
    if (o.corun_capacity && (o.device != REC_DEVICE_CUDA || o.prep_device != REC_PREP_CUDA))
        return cli_usage(cmd, "--corun-capacity: the co-run's capacities are for --device cuda --prep-device cuda");
    if (o.shard_kind >= 0 && !rec_dist_launched())
        return cli_usage(cmd, "--shard-kind shards the tables across the ranks of an mpirun (mpirun -np N rectrain "
                         "train ...); in one process every table is local: drop it");
    if (workers && workers[0] == '@') { /* a file of endpoints, read again while the job runs */
        if (!workers[1]) return cli_usage(cmd, "--workers @FILE: the file is missing");
        o.workers_file = workers + 1;
        FILE *wf = fopen(o.workers_file, "r"); /* now, not after the data is scanned (the library checks it too) */
        if (!wf) {
            fprintf(stderr, "rectrain %s: --workers %s: cannot read %s: %s (it lists the workers' endpoints, one a line, "
                    "and must exist when training starts)\n", cmd, workers, o.workers_file, strerror(errno));
            return CLI_FAIL;
        }
        fclose(wf);
    } else if (workers) { /* a comma-separated list of endpoints */
        if (strlen(workers) >= sizeof worker_buf) return cli_usage(cmd, "--workers: the list is too long");
        snprintf(worker_buf, sizeof worker_buf, "%s", workers);
        for (char *save = NULL, *w = strtok_r(worker_buf, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
            if (o.n_workers == 64) return cli_usage(cmd, "--workers: at most 64 workers");
            if (rec_endpoint_check(w)) return cli_usage(cmd, "--workers: %s", rec_errmsg());
            worker_v[o.n_workers++] = w;
        }
        if (!o.n_workers) return cli_usage(cmd, "--workers: no endpoint in '%s'", workers);
        o.workers = worker_v;
    }
    if (offload) {
        char *end = NULL;
        const double r = strtod(offload, &end);
        if (!strcmp(offload, "auto")) o.offload_ratio = -1;
        else if (!strcmp(offload, "off")) o.offload_ratio = 0;
        else if (end != offload && !*end && r >= 0 && r <= 1) o.offload_ratio = r;
        else return cli_usage(cmd, "--offload takes auto, off or a share in [0, 1] (got '%s')", offload);
    }
    if (offload_at) {
        if (!strcmp(offload_at, "p1")) o.offload_point = REC_OFFLOAD_P1;
        else if (!strcmp(offload_at, "p2")) o.offload_point = REC_OFFLOAD_P2;
        else if (!strcmp(offload_at, "p3")) o.offload_point = REC_OFFLOAD_P3;
        else return cli_usage(cmd, "--offload-at takes p1, p2 or p3 (got '%s')", offload_at);
    }
    if ((offload || offload_at || o.offload_store || o.worker_timeout > 0) && !workers)
        return cli_usage(cmd, "--offload, --offload-at, --offload-store and --worker-timeout need --workers");
    if ((o.sec.keys || o.sec.insecure) && !workers)
        return cli_usage(cmd, "--keys and --insecure are for the services a trainer reaches: --workers, --oracle-cacher");
    if (o.offload_store && !strcmp(o.offload_store, "none")) o.offload_store = "";
    o.data_path = data->n ? data->v[0] : NULL;
    o.data_paths = data->v;
    o.n_data = data->n;
    o.eval_path = evl->n ? evl->v[0] : NULL;
    o.eval_paths = evl->v;
    o.n_eval = evl->n;
    if (o.eval_path && o.holdout > 0) return cli_usage(cmd, "give --eval or --holdout, not both");
    if (o.resume && !o.ckpt_dir) return cli_usage(cmd, "--resume needs --ckpt DIR");
    if (o.resume && o.overwrite)
        return cli_usage(cmd, "--resume continues the checkpoint and --overwrite starts over: give one of them");
    if (o.overwrite && !o.ckpt_dir && !o.npy_dir) return cli_usage(cmd, "--overwrite applies to --ckpt DIR and --npy DIR");
    if (o.oracle_path && o.data_path && !o.eval_path && !(o.holdout > 0))
        return cli_usage(cmd, "--oracle needs --eval FILE or --holdout F (it gives the ceiling AUC of the rows evaluated)");
    if (o.ckpt_every && !o.ckpt_dir) return cli_usage(cmd, "--ckpt-every needs --ckpt DIR");
    if (o.gen_rows && o.data_path) return cli_usage(cmd, "--rows applies to the embedded default only (no --data)");
    if (progress_every) {
        char *end;
        const double sec = strtod(progress_every, &end);
        if (end == progress_every || *end || !(sec > 0))
            return cli_usage(cmd, "--progress-every takes seconds > 0 (got '%s')", progress_every);
        setenv("REC_PROGRESS_EVERY", progress_every, 1);
    }
    if (!o.data_path && !o.plot_dir) o.plot_dir = "rectrain-charts"; /* the embedded default job: charts */
    if (!o.data_path && o.eval_every < 0) o.eval_every = 200;          /* with AUC along the way */
    rec_train_report r;
    o.stop = &cli_stop;
    const char *env_rank = getenv("OMPI_COMM_WORLD_RANK"); /* under mpirun rank 0 speaks for the job */
    cli_catch_stop(env_rank && strcmp(env_rank, "0") != 0
                       ? ""
                       : "\nrectrain train: stopping after the current step, which a --ckpt keeps (send it again to stop "
                         "at once)\n");
    rec_status s = rec_train(&o, &r);
    if (s && r.ranks > 0) rec_dist_abort(r.rank, rec_errmsg()); /* ends every rank: none waits for this one */
    if (s) return cli_fail(cmd, s);
    if (r.ranks > 0) rec_dist_finalize();
    if (r.rank != 0) return r.stopped_by ? 128 + r.stopped_by : CLI_OK; /* rank 0 reports */
    if (r.complete) { /* said by the trainer: no rate or metrics of a run that trained nothing */
        if (json) printf("{\"model\": \"%s\", \"complete\": true, \"step\": %lld, \"steps\": 0, \"rows\": 0}\n", r.model,
                         (long long)r.complete_step);
        return CLI_OK;
    }
    if (r.ranks > 0) {
        const rec_exec_stats *d = &r.dist;
        const double n = d->steps > 0 ? (double)d->steps : 1;
        fprintf(stderr, "train: rank 0 per step: local lookups %.3f ms, remote fetch %.3f ms, dense %.3f ms, all-reduce "
                "%.3f ms, gradient exchange %.3f ms (%.3f ms of them waiting for the slowest rank); exposed communication %.3f ms; "
                "sent %.3f MB (plan %s predicted %.3f MB), received %.3f MB; "
                "furthest from the plan: rank %d, %.1f%%\n",
                d->local_s / n * 1e3, d->fetch_s / n * 1e3, d->dense_s / n * 1e3, d->allreduce_s / n * 1e3,
                d->exchange_s / n * 1e3, d->skew_s / n * 1e3, d->wait_s / n * 1e3, d->sent_bytes / n / 1e6, r.shard_plan,
                r.plan_sent_bytes / 1e6,
                d->recv_bytes / n / 1e6, d->worst_sent_rank, 100 * d->worst_sent_dev);
        double ns[3];
        unit_ns(&r, ns);
        fprintf(stderr, "train: rank 0's embedding work: %s ns a slice id, %s ns an owner's record, %s ns a fetched row "
                "beyond its bytes (plan --slice-ns, --lookup-ns, --get-ns)\n", cli_num("%.1f", ns[0], "-"),
                cli_num("%.1f", ns[1], "-"), cli_num("%.1f", ns[2], "-"));
    }
    char saves[96] = "";
    if (r.ckpts) snprintf(saves, sizeof saves, "; %d checkpoint%s saved in %.2f s", r.ckpts, rec_s(r.ckpts), r.ckpt_seconds);
    fprintf(stderr, "train: %s, %lld row%s in %.2f s: %.0f samples/s (%.1f GFLOP/s in dense layers), %d thread%s, "
            "batch %lld%s\n", r.model, (long long)r.rows, rec_s(r.rows), r.train_seconds, r.samples_per_s, r.gflops,
            r.threads, rec_s(r.threads), (long long)r.batch, saves);
    /* The final evaluation, reported here once (the trainer's log has only the periodic ones). */
    if (r.has_eval)
        printf("auc %.5f  logloss %.5f  ne %.4f  accuracy %.4f  calibration %.4f  (%lld eval row%s)\n", r.eval.auc,
               r.eval.logloss, r.eval.ne, r.eval.accuracy, r.eval.calibration, (long long)r.eval.n, rec_s(r.eval.n));
    if (r.has_oracle) printf("oracle auc %.5f (true click probabilities of the same rows: the ceiling)\n", r.oracle_auc);
    if (json) print_json(&r);
    return r.stopped_by ? 128 + r.stopped_by : CLI_OK; /* as a shell reports a signal */
}

int cmd_train(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--oracle-cacher")) return cmd_train_cached(argc, argv);
    cli_path_list data = {0}, evl = {0};
    const int rc = train_main(argc, argv, &data, &evl);
    cli_paths_free(&data);
    cli_paths_free(&evl);
    return rc;
}

static const char EVAL_USAGE[] =
    "usage: rectrain eval --ckpt CKPT --data DATA [--holdout F] [--batch B] [--json]\n"
    "\n"
    "Evaluates a checkpoint (a --ckpt directory or its model.rckpt) on a data set: AUC, logloss,\n"
    "normalized entropy, accuracy, calibration. When DATA is the data the checkpoint was trained\n"
    "on and the evaluated rows include trained ones, a warning says so (with the --holdout that\n"
    "evaluates only the rows training held out).\n"
    "\n"
    "  --ckpt PATH        checkpoint directory or file\n"
    "  --data FILES       .rshard, or .tsv/.gz or .rraw with --spec; several files, read in order\n"
    "                     as one data set: comma-separated, --data repeated, or globs\n"
    "  --spec FILE        prep spec for .tsv and .rraw data\n"
    "  --vocab-from FILE  .rshard with the vocabularies of a categorify spec\n"
    "  --holdout F        evaluate only the last F share of the rows (as train --holdout)\n"
    "  --batch B          rows per forward pass (default 4096)\n"
    "  --threads T        threads (default: all CPUs)\n"
    "  --json             print a JSON summary as the last line of stdout\n"
    "TSV data:\n"
    CLI_TSV_HELP;

/* DIR/model.rckpt when PATH is a directory, PATH otherwise. */
static void resolve_ckpt(const char *path, char *buf, size_t cap) {
    FILE *f = fopen(path, "rb");
    int is_file = 0;
    if (f) {
        char c;
        is_file = fread(&c, 1, 1, f) == 1;  /* reading a directory fails */
        fclose(f);
    }
    if (is_file) snprintf(buf, cap, "%s", path);
    else rec_ckpt_path(path, buf, cap);
}

/* How many of rows [r0, n) of ds lie in the checkpoint's training range: when ds is its
 * training data (the first rows' digest is the one the checkpoint keeps), its first
 * meta->train_rows rows.
 * 0 when ds is other data, or the checkpoint (version 1) does not say. */
static rec_status trained_rows_in(rec_dataset *ds, const rec_ckpt_meta *meta, int64_t r0, int64_t n, int64_t *out) {
    *out = 0;
    if (meta->train_rows == 0 || meta->train_rows > n || r0 >= meta->train_rows) return REC_OK;
    uint64_t digest;
    REC_TRY(rec_dataset_digest(ds, meta->train_rows, &digest));
    if (digest == meta->data_digest) *out = meta->train_rows - r0;
    return REC_OK;
}

static void warn_trained(const char *data, const rec_ckpt_meta *meta, int64_t r0, int64_t n, int64_t trained) {
    const int64_t t = meta->train_rows;
    char hint[160] = "";
    double h = (double)(n - t) / (double)n;
    char hs[32];
    snprintf(hs, sizeof hs, "%.6g", h);
    if (t < n && n - (int64_t)floor((double)n * atof(hs)) == t) /* a --holdout that gives exactly rows [t, n) */
        snprintf(hint, sizeof hint, "; --holdout %s evaluates only the %lld rows training held out", hs, (long long)(n - t));
    fprintf(stderr, "rectrain eval: warning: %lld of the %lld rows evaluated (rows [%lld, %lld) of %s) lie in the "
            "checkpoint's training range, so the figures are not held-out ones%s\n",
            (long long)trained, (long long)(n - r0), (long long)r0, (long long)t, data, hint);
}

/* What eval and predict score: a checkpoint's model and a data set bound to it. */
typedef struct scoring {
    const char *ckpt;
    cli_path_list data;
    rec_dataset_opts d;
    int64_t batch;
    int threads, json;
    char path[1100];         /* the checkpoint file */
    rec_model_config c;
    int have_c;
    rec_model *m;
    rec_dataset *ds;
    rec_ckpt_meta meta;
} scoring;

static void scoring_init(scoring *x) {
    memset(x, 0, sizeof *x);
    x->d.tsv.has_label = -1;
    x->d.prep_threads = 1;
    x->batch = 4096;
}

/* One of the options eval and predict share at argv[*i]; -1 when it is none of them. */
static int scoring_option(scoring *x, const char *cmd, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    if (!strcmp(a, "--ckpt")) return cli_str(cmd, argc, argv, i, &x->ckpt);
    if (!strcmp(a, "--data")) return cli_paths(cmd, argc, argv, i, &x->data);
    if (!strcmp(a, "--spec")) return cli_str(cmd, argc, argv, i, &x->d.spec_path);
    if (!strcmp(a, "--vocab-from")) return cli_str(cmd, argc, argv, i, &x->d.vocab_from);
    if (!strcmp(a, "--batch")) return cli_i64(cmd, argc, argv, i, 1, 1 << 20, &x->batch);
    if (!strcmp(a, "--threads")) return cli_int(cmd, argc, argv, i, 1, 256, &x->threads);
    if (!strcmp(a, "--json")) return x->json = 1, CLI_OK;
    const int rc = cli_tsv_option(cmd, argc, argv, i, &x->d.tsv);
    return rc < 0 ? -1 : rc;
}

/* Reads the checkpoint's config: the model, and the prep spec raw data is read with unless
 * --spec gives one. */
static rec_status scoring_config(scoring *x) {
    resolve_ckpt(x->ckpt, x->path, sizeof x->path);
    REC_TRY(rec_ckpt_read_config(x->path, &x->c, NULL));
    x->have_c = 1;
    if (!x->d.spec_path && x->c.prep_spec[0]) x->d.spec_path = x->c.prep_spec;
    return REC_OK;
}

/* After scoring_config: opens the data, binds the model to it and loads the parameters. */
static rec_status scoring_open(scoring *x) {
    x->d.path = x->data.v[0];
    x->d.paths = x->data.v;
    x->d.n_paths = x->data.n;
    REC_TRY(rec_dataset_open(&x->ds, &x->d));
    rec_model_config probe = x->c; /* binding only checks: the tables are listed */
    if (rec_model_config_bind(&probe, rec_dataset_n_dense(x->ds), rec_dataset_n_sparse(x->ds),
                              rec_dataset_table_rows(x->ds), rec_dataset_path(x->ds)) != REC_OK) {
        /* The model is the checkpoint's: the data must change, not the config (bind's advice) */
        char why[512], spec[sizeof x->c.prep_spec + 64] = "";
        snprintf(why, sizeof why, "%s", rec_errmsg());
        char *advice = strstr(why, "; use \"");
        if (advice) *advice = 0;
        if (x->c.prep_spec[0]) snprintf(spec, sizeof spec, " (the checkpoint names %s)", x->c.prep_spec);
        return rec_errorf(REC_EINVAL, "%s does not fit the checkpoint %s (%s); score rows prepared with the spec the "
                          "model was trained with%s", rec_dataset_path(x->ds), x->path, why, spec);
    }
    REC_TRY(rec_model_init(&x->m, &x->c, (int)x->batch, x->threads > 0 ? x->threads : rec_cpu_count()));
    return rec_dist_ckpt_load(x->path, x->m, &x->meta);
}

/* The output guard (core.h) over what scoring reads — the checkpoint (as given and its file),
 * the data, the spec (--spec, or the checkpoint's) and --vocab-from — and its outputs, --out
 * and --feed-out (NULL: none), against those and each other. After scoring_config, before
 * anything is opened for writing. */
static rec_status scoring_guard(const scoring *x, const char *out, const char *feed_out) {
    rec_guard g = {0};
    rec_guard_in(&g, "--ckpt", x->ckpt);
    rec_guard_in(&g, "--ckpt", x->path);
    rec_guard_ins(&g, "--data", x->data.v, x->data.n);
    rec_guard_in(&g, x->d.spec_path == x->c.prep_spec ? "the checkpoint's prep spec" : "--spec", x->d.spec_path);
    rec_guard_in(&g, "--vocab-from", x->d.vocab_from);
    rec_guard_out(&g, "--out", out);
    if (feed_out) rec_guard_out(&g, "--feed-out", feed_out);
    return rec_guard_check(&g);
}

static void scoring_close(scoring *x) {
    rec_model_free(x->m);
    rec_dataset_close(x->ds);
    if (x->have_c) rec_model_config_free(&x->c);
    cli_paths_free(&x->data);
}

static int eval_main(int argc, char **argv, scoring *x) {
    const char *cmd = "eval";
    double holdout = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = CLI_OK;
        if (cli_is_help(a)) { fputs(EVAL_USAGE, stdout); return CLI_OK; }
        else if (!strcmp(a, "--holdout")) rc = cli_double(cmd, argc, argv, &i, 1e-9, 1, &holdout);
        else if ((rc = scoring_option(x, cmd, argc, argv, &i)) < 0) rc = cli_usage(cmd, "unknown option '%s'", a);
        if (rc) return rc;
    }
    if (!x->ckpt || !x->data.n) return cli_usage(cmd, "--ckpt and --data are required");
    rec_metrics m;
    int64_t n = 0, trained = 0;
    rec_status s = scoring_config(x);
    if (!s) s = scoring_open(x);
    if (!s && !rec_dataset_has_label(x->ds))
        s = rec_errorf(REC_EINVAL, "%s has no labels (Criteo test format); evaluation needs labelled rows (rectrain "
                       "predict scores it)", rec_dataset_path(x->ds));
    if (!s) s = rec_dataset_rows(x->ds, &n);
    if (!s) rec_bad_report_print(stderr, "eval", "the input", rec_dataset_bad(x->ds), n);
    if (!s && n == 0) /* predict writes an empty file for it; eval's figures would all be undefined */
        s = rec_errorf(REC_EINVAL, "%s holds no rows%s: there is nothing to evaluate (AUC, logloss and the rest are "
                       "undefined over no rows)", rec_dataset_path(x->ds), rec_dataset_bad(x->ds)->count ? " that parse" : "");
    const int64_t r0 = holdout > 0 ? n - (int64_t)floor((double)n * holdout) : 0;
    if (!s) s = trained_rows_in(x->ds, &x->meta, r0, n, &trained);
    if (!s && trained) warn_trained(rec_dataset_path(x->ds), &x->meta, r0, n, trained);
    const double t0 = rec_now();
    if (!s) s = rec_evaluate(x->m, x->ds, r0, n, x->batch, &m);
    const double secs = rec_now() - t0;
    if (s) return cli_fail(cmd, s);
    printf("auc %.5f  logloss %.5f  ne %.4f  accuracy %.4f  calibration %.4f  ctr %.4f  (%lld row%s, step %lld)\n",
           m.auc, m.logloss, m.ne, m.accuracy, m.calibration, m.ctr, (long long)m.n, rec_s(m.n), (long long)x->meta.step);
    if (x->json)
        printf("{\"rows\": %lld, \"auc\": %s, \"logloss\": %s, \"ne\": %s, \"accuracy\": %s, "
               "\"calibration\": %s, \"ctr\": %s, \"seconds\": %s, \"samples_per_s\": %s, \"step\": %lld, "
               "\"trained_rows_evaluated\": %lld, \"bad_rows\": %lld}\n",
               (long long)m.n, cli_jnum("%.6f", m.auc), cli_jnum("%.6f", m.logloss), cli_jnum("%.6f", m.ne),
               cli_jnum("%.6f", m.accuracy), cli_jnum("%.6f", m.calibration), cli_jnum("%.6f", m.ctr),
               cli_jnum("%.3f", secs), cli_jnum("%.1f", secs > 0 ? m.n / secs : 0.0), (long long)x->meta.step,
               (long long)trained, (long long)rec_dataset_bad(x->ds)->count);
    return CLI_OK;
}

int cmd_eval(int argc, char **argv) {
    scoring x;
    scoring_init(&x);
    const int rc = eval_main(argc, argv, &x);
    scoring_close(&x);
    return rc;
}

static const char PREDICT_USAGE[] =
    "usage: rectrain predict --ckpt CKPT --data DATA --out PREDS.tsv [--batch B] [--json]\n"
    "\n"
    "Scores every row of DATA with a checkpoint: its click probability, one line a row in input\n"
    "order (\"P\", or \"P<TAB>LABEL\" when DATA has labels). DATA may be the label-less Criteo\n"
    "test format. Streams; the file appears whole when done (written as PREDS.tsv.tmp first;\n"
    "Ctrl-C or SIGTERM removes it). With --bad-rows skip, a malformed row keeps its place\n"
    "with the line \"" REC_PREDICT_SKIPPED "\" (\"" REC_PREDICT_SKIPPED "<TAB>" REC_PREDICT_SKIPPED "\" with labels), so line k of PREDS is about\n"
    "line k of DATA; the skipped rows are reported with their file:line.\n"
    "\n"
    "  --ckpt PATH        checkpoint directory or file\n"
    "  --data FILES       .rshard, or .tsv/.gz or .rraw (the checkpoint's prep spec, or --spec)\n"
    "  --out FILE         where the probabilities go (- for stdout)\n"
    "  --spec FILE        prep spec for .tsv and .rraw data\n"
    "  --vocab-from FILE  .rshard with the vocabularies of a categorify spec\n"
    "  --batch B          rows per forward pass (default 4096)\n"
    "  --threads T        threads (default: all CPUs)\n"
    "  --json             print a JSON summary as the last line of stdout (with AUC and\n"
    "                     logloss when DATA has labels; null where undefined, as over no rows)\n"
    "  --feed-out FILE    also write the rows scored as the inputs of the model's ONNX graph\n"
    "                     (export --format onnx), batch by batch (layout: docs/commands.md)\n"
    "TSV data:\n"
    CLI_TSV_HELP;

static int predict_main(int argc, char **argv, scoring *x) {
    const char *cmd = "predict", *out = NULL, *feed_out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = CLI_OK;
        if (cli_is_help(a)) { fputs(PREDICT_USAGE, stdout); return CLI_OK; }
        else if (!strcmp(a, "--out")) rc = cli_out(cmd, argc, argv, &i, &out);
        else if (!strcmp(a, "--feed-out")) rc = cli_str(cmd, argc, argv, &i, &feed_out);
        else if ((rc = scoring_option(x, cmd, argc, argv, &i)) < 0) rc = cli_usage(cmd, "unknown option '%s'", a);
        if (rc) return rc;
    }
    x->d.map_skips = 1; /* a line per input line, skipped rows too */
    x->d.stop = &cli_stop;
    if (!x->ckpt || !x->data.n || !out) return cli_usage(cmd, "--ckpt, --data and --out are required");
    /* Ctrl-C and SIGTERM from here on: the flag is read once the checkpoint is loaded, by the
     * counting pass of a TSV (after every chunk) and before every batch scored; the partial
     * output is then removed and the exit status is 128 + the signal, as prep's. */
    cli_catch_stop(strcmp(out, "-") ? "\nrectrain predict: stopping; no partial output is left (send it again to stop "
                                      "at once)\n"
                                    : "\nrectrain predict: stopping (send it again to stop at once)\n");
    const int to_stdout = !strcmp(out, "-");
    rec_status s = scoring_config(x);
    if (!s && feed_out && !strcmp(feed_out, out))  /* the plain case in plainer words; the guard catches aliases */
        s = rec_errorf(REC_EINVAL, "--feed-out and --out are both %s; give two files", out);
    if (!s) s = scoring_guard(x, out, feed_out);
    if (!s) s = scoring_open(x);
    int64_t rows = 0;
    if (!s) s = rec_dataset_rows(x->ds, &rows); /* before the output exists: a refused input leaves none */
    rec_atomic_file a = {.fd = -1};
    FILE *f = to_stdout ? stdout : NULL;
    const int opened = !s && !to_stdout && !(s = rec_atomic_fopen(&a, out, &f));
    rec_predict_report r;
    const double t0 = rec_now();
    const int scored = !s;
    if (scored) s = rec_predict(x->m, x->ds, x->batch, f, to_stdout ? "standard output" : out, &cli_stop, &r);
    const double secs = rec_now() - t0;
    if (opened) s = rec_atomic_fclose(&a, f, "predictions", s);
    else if (to_stdout) s = rec_stream_flush(stdout, "standard output", "predictions", s);
    if (!s && feed_out && (s = rec_feed_write(x->ds, x->batch, feed_out)) != REC_OK && !to_stdout)
        rec_error_append(s, "; the predictions in %s are complete", out);
    if (s == REC_ESTOPPED)
        rec_error_append(s, "; %s", opened ? "the partial output is removed"
                                    : to_stdout && scored ? "stdout holds the lines written before it"
                                                           : "nothing was written");
    if (s) return cli_fail(cmd, s);
    fprintf(stderr, "predict: %lld row%s of %s scored with %s (step %lld), mean probability %s", (long long)r.rows,
            rec_s(r.rows), rec_dataset_path(x->ds), x->path, (long long)x->meta.step, cli_num("%.4f", r.mean_p, "-"));
    if (r.labelled) fprintf(stderr, "; auc %s, logloss %s", cli_num("%.5f", r.m.auc, "-"), cli_num("%.5f", r.m.logloss, "-"));
    fprintf(stderr, " -> %s\n", to_stdout ? "stdout" : out);
    rec_bad_report_print(stderr, "predict", "the input", rec_dataset_bad(x->ds), r.rows);
    if (r.skipped)
        fprintf(stderr, "predict: in %s the line of each skipped row reads \"" REC_PREDICT_SKIPPED "\", so line k is "
                "about line k of the input\n", to_stdout ? "stdout" : out);
    if (x->json) {
        printf("{\"rows\": %lld, \"bad_rows\": %lld, \"mean_p\": %s, \"labelled\": %s, \"seconds\": %s, "
               "\"samples_per_s\": %s, \"step\": %lld", (long long)r.rows, (long long)r.skipped,
               cli_jnum("%.6f", r.mean_p), r.labelled ? "true" : "false", cli_jnum("%.3f", secs),
               cli_jnum("%.1f", secs > 0 ? r.rows / secs : 0.0), (long long)x->meta.step);
        if (r.labelled)
            printf(", \"auc\": %s, \"logloss\": %s, \"ctr\": %s", cli_jnum("%.6f", r.m.auc),
                   cli_jnum("%.6f", r.m.logloss), cli_jnum("%.6f", r.m.ctr));
        printf("}\n");
    }
    return CLI_OK;
}

int cmd_predict(int argc, char **argv) {
    scoring x;
    scoring_init(&x);
    const int rc = predict_main(argc, argv, &x);
    scoring_close(&x);
    return rc;
}

static const char EXPORT_USAGE[] =
    "usage: rectrain export --ckpt CKPT --out DIR [--format npy] [--overwrite]\n"
    "       rectrain export --ckpt CKPT --format onnx --out FILE.onnx [--external-data] [--overwrite]\n"
    "\n"
    "npy (the default) writes every parameter of a checkpoint as DIR/NAME.npy (float32;\n"
    "numpy.load and torch.from_numpy read them), the model config as DIR/config.json and the\n"
    "list of the files it wrote as DIR/rectrain_export.json. The files are written into\n"
    "DIR.tmp, which is renamed to DIR once all are there, so a failure leaves no partial DIR.\n"
    "\n"
    "onnx writes the model as an ONNX file (opset 17, fp32 weights) that ONNX Runtime scores\n"
    "as rectrain predict does: inputs dense (batch, Dn) float32 and, per sparse feature f,\n"
    "ids_f (nnz) and offsets_f (batch + 1) int64; outputs logit and probability (batch).\n"
    "dlrm, dcn, deepfm and wide_deep; models trained with --precision bf16 are refused. A\n"
    "model over protobuf's 2 GiB limit keeps its weights in FILE.onnx.data beside FILE.onnx\n"
    "(ONNX external data; keep the two files together).\n"
    "\n"
    "  --format F         npy or onnx (default npy)\n"
    "  --external-data    onnx: the weights in FILE.data at any size, not only over 2 GiB\n"
    "  --overwrite        replace an earlier export (npy: a DIR that holds files is refused\n"
    "                     without it, and replaced only when it holds nothing but what the\n"
    "                     export listed in rectrain_export.json wrote; onnx: an existing FILE\n"
    "                     and FILE.data)\n";

/* The side file of an ONNX export when it writes one and, without --overwrite, a refusal of
 * an existing one (checked before the parameters load). */
static rec_status export_onnx_data(const rec_model *m, const char *out, rec_onnx_data mode, int overwrite,
                                   const char *data_path, int *external) {
    *external = rec_export_onnx_external(m, out, mode);
    if (*external && !overwrite && access(data_path, F_OK) == 0)
        return rec_errorf(REC_EINVAL, "%s exists (where --out %s keeps its weights, ONNX external data); add "
                          "--overwrite to replace both, or give another --out", data_path, out);
    return REC_OK;
}

int cmd_export(int argc, char **argv) {
    const char *cmd = "export", *ckpt = NULL, *out = NULL, *format = "npy";
    int overwrite = 0, external = 0;
    rec_onnx_data mode = REC_ONNX_DATA_AUTO;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = CLI_OK;
        if (cli_is_help(a)) { fputs(EXPORT_USAGE, stdout); return CLI_OK; }
        else if (!strcmp(a, "--external-data")) mode = REC_ONNX_DATA_EXTERNAL;
        else if (!strcmp(a, "--ckpt")) rc = cli_str(cmd, argc, argv, &i, &ckpt);
        else if (!strcmp(a, "--out")) rc = cli_str(cmd, argc, argv, &i, &out);
        else if (!strcmp(a, "--format")) rc = cli_str(cmd, argc, argv, &i, &format);
        else if (!strcmp(a, "--overwrite")) overwrite = 1;
        else rc = cli_usage(cmd, "unknown option '%s'", a);
        if (rc) return rc;
    }
    if (!ckpt || !out) return cli_usage(cmd, "--ckpt and --out are required");
    const int onnx = !strcmp(format, "onnx");
    if (!onnx && strcmp(format, "npy"))
        return cli_usage(cmd, "--format %s: want npy (a folder of .npy files) or onnx (one ONNX model file)", format);
    if (!onnx && mode == REC_ONNX_DATA_EXTERNAL)
        return cli_usage(cmd, "--external-data is for --format onnx (an ONNX model's weights in a side file)");
    char data_path[4096];
    if (snprintf(data_path, sizeof data_path, "%s" REC_ONNX_DATA_SUFFIX, out) >= (int)sizeof data_path)
        return cli_usage(cmd, "--out: a path of at most %zu bytes", sizeof data_path - sizeof REC_ONNX_DATA_SUFFIX);
    char path[1100];
    resolve_ckpt(ckpt, path, sizeof path);
    rec_model_config c;
    rec_model *m = NULL;
    rec_ckpt_meta meta;
    rec_guard g = {0};
    rec_guard_in(&g, "--ckpt", ckpt);
    rec_guard_in(&g, "--ckpt", path);
    if (onnx) {
        rec_guard_out(&g, "--out", out);
        rec_guard_out(&g, "--out's external data", data_path);
    } else {
        rec_guard_dir(&g, "--out", out, NULL);
    }
    rec_status s = rec_guard_check(&g);
    /* before reading a large checkpoint */
    if (!s && !onnx) s = rec_export_check(out, overwrite);
    if (!s && onnx && !overwrite && access(out, F_OK) == 0)
        s = rec_errorf(REC_EINVAL, "--out %s exists; add --overwrite to replace it, or give another file", out);
    int have_config = 0;
    if (!s) have_config = (s = rec_ckpt_read_config(path, &c, NULL)) == REC_OK;
    if (!s) s = rec_model_init(&m, &c, 1, 1);
    if (!s && onnx) s = rec_export_onnx_check(m); /* before loading the parameters */
    if (!s && onnx) s = export_onnx_data(m, out, mode, overwrite, data_path, &external);
    if (!s) s = rec_dist_ckpt_load(path, m, &meta);
    if (!s) s = onnx ? rec_export_onnx(m, out, mode) : rec_export_npy(m, out, overwrite);
    rec_model_free(m);
    if (have_config) rec_model_config_free(&c);
    if (s) return cli_fail(cmd, s);
    fprintf(stderr, "export: %s (step %lld) -> %s%s%s\n", path, (long long)meta.step, out,
            external ? ", its weights in " : "", external ? data_path : "");
    return CLI_OK;
}
