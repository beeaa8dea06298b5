/* rectrain embserver, rectrain oracle, and rectrain train --oracle-cacher: disaggregated training
 * with a lookahead cache (cache.h; docs/bagpipe.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "rectrain/cache.h"
#include "rectrain/ckpt.h"
#include "rectrain/core.h"
#include "rectrain/dist.h"
#include "rectrain/net.h"
#include "rectrain/train.h"

/* A usage error naming opt when ep is no endpoint, or its port is not in 1..65535. */
static int check_endpoint(const char *cmd, const char *opt, const char *ep) {
    if (rec_endpoint_check(ep)) return cli_usage(cmd, "%s: %s", opt, rec_errmsg());
    return CLI_OK;
}

/* LIST's comma-separated endpoints into v (at most max), their text in buf; a usage error
 * naming opt when one is not an endpoint or there are too many. */
static int endpoints(const char *cmd, const char *opt, const char *list, char *buf, size_t cap, const char **v, int max,
                     int *n) {
    *n = 0;
    if (strlen(list) >= cap) return cli_usage(cmd, "%s: the list is too long", opt);
    snprintf(buf, cap, "%s", list);
    for (char *sv, *w = strtok_r(buf, ",", &sv); w; w = strtok_r(NULL, ",", &sv)) {
        if (*n == max) return cli_usage(cmd, "%s: at most %d endpoints", opt, max);
        if (check_endpoint(cmd, opt, w)) return CLI_USAGE;
        v[(*n)++] = w;
    }
    if (!*n) return cli_usage(cmd, "%s: no endpoint in '%s'", opt, list);
    return CLI_OK;
}

static const char EMBSERVER_USAGE[] =
    "usage: rectrain embserver [--listen ENDPOINT] [--ckpt DIR [--ckpt-every K]] [--keys DIR | --insecure]\n"
    "\n"
    "Holds one shard of a job's embedding tables (rows r with r mod S == its index among the\n"
    "trainer's --embservers) and serves the rows to trainers started with --oracle-cacher.\n"
    "The first trainer's tables are made as one process would initialise them. Runs until\n"
    "Ctrl-C.\n"
    "\n"
    "  --listen ENDPOINT  where to listen (default tcp://127.0.0.1:5600, loopback only)\n"
    "  --ckpt DIR         for --durable jobs: save the shard every K commits (default 100) in\n"
    "                     DIR, and start from the newest save there (a restarted server); a\n"
    "                     trainer started with --resume then rolls the job back to that step\n"
    CLI_SECURE_SERVICE_HELP;

int cmd_embserver(int argc, char **argv) {
    const char *cmd = "embserver";
    rec_embserver_opts o = {.listen = "tcp://127.0.0.1:5600", .ckpt_every = 100, .stop = &cli_stop, .log = stderr};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = CLI_OK;
        if (cli_is_help(a)) {
            fputs(EMBSERVER_USAGE, stdout);
            return CLI_OK;
        } else if (!strcmp(a, "--listen")) {
            rc = cli_str(cmd, argc, argv, &i, &o.listen);
        } else if (!strcmp(a, "--ckpt")) {
            rc = cli_str(cmd, argc, argv, &i, &o.ckpt_dir);
        } else if (!strcmp(a, "--ckpt-every")) {
            rc = cli_i64(cmd, argc, argv, &i, 1, INT32_MAX, &o.ckpt_every);
        } else if ((rc = cli_secure_option(cmd, argc, argv, &i, &o.sec)) >= 0) {
        } else {
            return cli_usage(cmd, "unknown option '%s'", a);
        }
        if (rc != CLI_OK) return rc;
    }
    if (check_endpoint(cmd, "--listen", o.listen)) return CLI_USAGE;
    cli_catch_stop("");
    rec_status s = rec_embserver_run(&o);
    return s ? cli_fail(cmd, s) : CLI_OK;
}

static const char ORACLE_USAGE[] =
    "usage: rectrain oracle --data TRAIN.rshard --cache-rows C [options]\n"
    "\n"
    "The Oracle Cacher (Bagpipe): reads the training batches in the trainer's order, looks L\n"
    "batches ahead to decide which embedding rows the trainer prefetches and how long it keeps\n"
    "them, and serves each batch with that plan to a trainer (train --oracle-cacher).\n"
    "\n"
    "  --data FILE        training data: a .rshard, or raw Criteo .tsv/.gz or .rraw with --spec\n"
    "  --spec SPEC.json   raw data's prep spec (default: the config's train.prep_spec)\n"
    "  --vocab-from SHARD the vocabularies of a spec's categorify ops\n"
    "  --workers LIST     raw data: prep-worker endpoints that preprocess every batch (the data\n"
    "                     processors); without, the oracle preprocesses on its own thread\n"
    "  --config FILE      model config: batch size, epochs, seed (default: the small DLRM)\n"
    "  --batch B          rows per batch (default: the config's)\n"
    "  --epochs E         epochs (default: the config's)\n"
    "  --shuffle 0|1      1 (default): the order `rectrain train` shuffles into; 0 file order\n"
    "  --steps N          plan the first N batches only\n"
    "  --cache-rows C     rows the trainer's cache holds\n"
    "  --policy P         bagpipe (default), or a baseline: none (fetch every row every step),\n"
    "                     static (the hottest rows stay, FAE-like), lru\n"
    "  --lookahead L      batches examined ahead (default: the largest that fits the cache)\n"
    "  --prefetch-depth D batches a prefetch may run ahead of training (default min(L, 4))\n"
    "  --hot-batches N    static: batches whose id counts pick the hot rows (default 256)\n"
    "  --tables LO:HI     plan tables LO to HI-1 only: one of several oracles partitioned by table,\n"
    "                     each with its own --cache-rows (the trainer lists them in table order);\n"
    "                     J/K: part J (from 0) of K, the tables split evenly\n"
    "  --listen ENDPOINT  where to listen (default tcp://127.0.0.1:5650, loopback only)\n"
    CLI_SECURE_SERVICE_HELP
    "                     with --workers, DIR/server.pub is the workers' key (the oracle is their\n"
    "                     client)\n";

int cmd_oracle(int argc, char **argv) {
    const char *cmd = "oracle";
    rec_oracle_opts o = {.listen = "tcp://127.0.0.1:5650", .shuffle = 1, .stop = &cli_stop, .log = stderr};
    const char *policy = "bagpipe", *workers = NULL, *tables = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = CLI_OK;
        if (cli_is_help(a)) {
            fputs(ORACLE_USAGE, stdout);
            return CLI_OK;
        } else if (!strcmp(a, "--listen")) rc = cli_str(cmd, argc, argv, &i, &o.listen);
        else if (!strcmp(a, "--data")) rc = cli_str(cmd, argc, argv, &i, &o.data_path);
        else if (!strcmp(a, "--spec")) rc = cli_str(cmd, argc, argv, &i, &o.spec_path);
        else if (!strcmp(a, "--vocab-from")) rc = cli_str(cmd, argc, argv, &i, &o.vocab_from);
        else if (!strcmp(a, "--workers")) rc = cli_str(cmd, argc, argv, &i, &workers);
        else if (!strcmp(a, "--config")) rc = cli_str(cmd, argc, argv, &i, &o.config_path);
        else if (!strcmp(a, "--batch")) rc = cli_i64(cmd, argc, argv, &i, 1, 1 << 24, &o.batch);
        else if (!strcmp(a, "--epochs")) rc = cli_int(cmd, argc, argv, &i, 1, 100000, &o.epochs);
        else if (!strcmp(a, "--shuffle")) rc = cli_int(cmd, argc, argv, &i, 0, 1, &o.shuffle);
        else if (!strcmp(a, "--steps")) rc = cli_i64(cmd, argc, argv, &i, 1, INT32_MAX, &o.max_batches);
        else if (!strcmp(a, "--cache-rows")) rc = cli_i64(cmd, argc, argv, &i, 1, INT32_MAX - 1, &o.capacity);
        else if (!strcmp(a, "--policy")) rc = cli_str(cmd, argc, argv, &i, &policy);
        else if (!strcmp(a, "--lookahead")) rc = cli_int(cmd, argc, argv, &i, 1, 100000, &o.lookahead);
        else if (!strcmp(a, "--prefetch-depth")) rc = cli_int(cmd, argc, argv, &i, 1, 100000, &o.depth);
        else if (!strcmp(a, "--hot-batches")) rc = cli_i64(cmd, argc, argv, &i, 1, INT32_MAX, &o.hot_batches);
        else if (!strcmp(a, "--tables")) rc = cli_str(cmd, argc, argv, &i, &tables);
        else if ((rc = cli_secure_option(cmd, argc, argv, &i, &o.sec)) >= 0) {}
        else return cli_usage(cmd, "unknown option '%s'", a);
        if (rc != CLI_OK) return rc;
    }
    if (!o.data_path) return cli_usage(cmd, "--data is required");
    if (!o.capacity) return cli_usage(cmd, "--cache-rows is required (the rows the trainer's cache holds)");
    if ((o.policy = rec_cache_policy_parse(policy)) < 0)
        return cli_usage(cmd, "--policy takes bagpipe, none, static or lru, got '%s'", policy);
    if (o.policy != REC_CACHE_BAGPIPE && (o.lookahead || o.depth))
        return cli_usage(cmd, "--lookahead and --prefetch-depth are for --policy bagpipe");
    if (o.policy != REC_CACHE_STATIC && o.hot_batches) return cli_usage(cmd, "--hot-batches is for --policy static");
    if (o.lookahead && o.depth > o.lookahead)
        return cli_usage(cmd, "--prefetch-depth %d is over --lookahead %d: a prefetch so far ahead could read a row "
                         "before its last write-back", o.depth, o.lookahead);
    if (check_endpoint(cmd, "--listen", o.listen)) return CLI_USAGE;
    if (tables) {
        int used = 0;
        if (sscanf(tables, "%d/%d%n", &o.part, &o.parts, &used) == 2 && !tables[used]) {
            if (o.part < 0 || o.parts < 1 || o.part >= o.parts || o.parts > REC_CACHE_MAX_ORACLES)
                return cli_usage(cmd, "--tables J/K takes 0 <= J < K <= %d, got '%s'", REC_CACHE_MAX_ORACLES, tables);
        } else if (sscanf(tables, "%d:%d%n", &o.table_lo, &o.table_hi, &used) != 2 || tables[used] || o.table_lo < 0 ||
                   o.table_hi <= o.table_lo) {
            return cli_usage(cmd, "--tables takes LO:HI with 0 <= LO < HI (tables LO to HI-1), or J/K (part J of K), got "
                             "'%s'", tables);
        }
    }
    char buf[4096];
    const char *v[64];
    if (workers && endpoints(cmd, "--workers", workers, buf, sizeof buf, v, 64, &o.n_workers)) return CLI_USAGE;
    o.workers = v;
    cli_catch_stop("");
    rec_status s = rec_oracle_run(&o);
    return s ? cli_fail(cmd, s) : CLI_OK;
}

static const char TRAIN_CACHED_USAGE[] =
    "usage: rectrain train --oracle-cacher LIST --embservers LIST [--config CFG.json] [options]\n"
    "\n"
    "Trains with the embedding tables on `rectrain embserver` processes and a cache planned by\n"
    "`rectrain oracle` (which also gives the batches): Bagpipe's disaggregated training.\n"
    "Under mpirun, N trainers train slices of each batch with an LRPP cache.\n"
    "\n"
    "  --oracle-cacher EP the Oracle Cacher's endpoint (rectrain oracle); several, comma-separated\n"
    "                     and in table order, when oracles split the tables (oracle --tables)\n"
    "  --embservers LIST  the embedding servers' endpoints, comma-separated, in shard order\n"
    "  --config FILE      model config (DLRM or DCN; default: the small DLRM)\n"
    "  --threads T        threads of the dense layers (default: all CPUs)\n"
    "  --loss-log FILE    write \"step loss\" per step\n"
    "  --ckpt DIR         at the end, save the whole model (dense part and the servers'\n"
    "                     tables) as DIR/model.rckpt, for rectrain eval and export\n"
    "  --eval FILE        at the end, trainer 0 scores FILE (a .rshard, or raw data with the\n"
    "                     config's train.prep_spec) with the whole model: AUC, logloss\n"
    "  --npy DIR          at the end, export the whole model's parameters as DIR/NAME.npy, as\n"
    "                     train --npy does (trainer 0 writes them)\n"
    "  --overwrite        replace a DIR/model.rckpt that exists (refused without it), and an\n"
    "                     earlier export in --npy DIR\n"
    "  --durable          commit every step on the servers (the touched rows written through,\n"
    "                     the dense state to the first server): a killed trainer loses one step\n"
    "  --resume           a restarted job (every trainer of its mpirun): go on from the\n"
    "                     servers' last committed step\n"
    "  --peer-timeout S   seconds the oracle or a server may stay silent (default 10)\n"
    CLI_SECURE_CLIENT_HELP
    "  --json             print a JSON summary as the last line of stdout\n";

int cmd_train_cached(int argc, char **argv) {
    const char *cmd = "train";
    rec_cache_opts co = {0};
    rec_train_opts o = {.stop = &cli_stop, .log = stderr, .shuffle = -1, .eval_every = -1, .cache = &co};
    const char *servers = NULL, *oracles = NULL;
    int json = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = CLI_OK;
        if (cli_is_help(a)) {
            fputs(TRAIN_CACHED_USAGE, stdout);
            return CLI_OK;
        } else if (!strcmp(a, "--oracle-cacher")) rc = cli_str(cmd, argc, argv, &i, &oracles);
        else if (!strcmp(a, "--embservers")) rc = cli_str(cmd, argc, argv, &i, &servers);
        else if (!strcmp(a, "--config")) rc = cli_str(cmd, argc, argv, &i, &o.config_path);
        else if (!strcmp(a, "--threads")) rc = cli_int(cmd, argc, argv, &i, 1, 1024, &o.threads);
        else if (!strcmp(a, "--loss-log")) rc = cli_str(cmd, argc, argv, &i, &o.loss_log);
        else if (!strcmp(a, "--ckpt")) rc = cli_str(cmd, argc, argv, &i, &o.ckpt_dir);
        else if (!strcmp(a, "--npy")) rc = cli_str(cmd, argc, argv, &i, &o.npy_dir);
        else if (!strcmp(a, "--eval")) rc = cli_str(cmd, argc, argv, &i, &o.eval_path);
        else if (!strcmp(a, "--peer-timeout")) rc = cli_double(cmd, argc, argv, &i, 0.1, 86400, &co.timeout);
        else if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--durable")) co.durable = 1;
        else if (!strcmp(a, "--overwrite")) o.overwrite = 1;
        else if (!strcmp(a, "--resume")) o.resume = co.durable = 1;
        else if ((rc = cli_secure_option(cmd, argc, argv, &i, &co.sec)) >= 0) {}
        else
            return cli_usage(cmd, "'%s' is not an option of training with --oracle-cacher (the oracle gives the data, batch "
                             "and epochs; see rectrain train --oracle-cacher X --help)", a);
        if (rc != CLI_OK) return rc;
    }
    if (!servers) return cli_usage(cmd, "--oracle-cacher needs --embservers (the embedding servers' endpoints)");
    /* --resume continues the job that wrote it (from the servers: the checkpoint is rewritten
     * at its end) */
    if (o.ckpt_dir && !o.overwrite && !o.resume) {
        const rec_status s = rec_ckpt_check_absent(o.ckpt_dir, "add --overwrite to replace it");
        if (s) return cli_fail(cmd, s);
    }
    if (o.resume) o.overwrite = 0;
    char buf[4096], obuf[4096];
    const char *v[62], *ov[REC_CACHE_MAX_ORACLES];
    if (endpoints(cmd, "--oracle-cacher", oracles, obuf, sizeof obuf, ov, REC_CACHE_MAX_ORACLES, &co.n_oracles))
        return CLI_USAGE;
    if (endpoints(cmd, "--embservers", servers, buf, sizeof buf, v, 62, &co.n_servers)) return CLI_USAGE;
    co.servers = v, co.oracles = ov;
    cli_catch_stop("");
    rec_train_report r;
    rec_status s = rec_train(&o, &r);
    if (s && r.ranks > 1) rec_dist_abort(r.rank, rec_errmsg()); /* no rank left waiting */
    if (rec_dist_launched()) rec_dist_finalize();
    if (s) return cli_fail(cmd, s);
    if (r.rank > 0) return CLI_OK;
    const rec_cache_report *c = &r.cache;
    const double n = r.steps > 0 ? (double)r.steps : 1;
    fprintf(stderr, "train: %lld steps, %.0f samples/s, loss %.5f; stalled %.3f s; per step: %.0f rows fetched on the "
            "critical path, %.0f ahead, %.0f written back\n", (long long)r.steps, r.samples_per_s, r.last_loss,
            c->stall_seconds, (double)c->fetch_crit_rows / n, (double)c->fetch_bg_rows / n, (double)c->write_rows / n);
    if (r.has_eval)
        printf("auc %.5f  logloss %.5f  ne %.4f  accuracy %.4f  calibration %.4f  (%lld eval row%s)\n", r.eval.auc,
               r.eval.logloss, r.eval.ne, r.eval.accuracy, r.eval.calibration, (long long)r.eval.n, rec_s(r.eval.n));
    if (!json) return CLI_OK;
    printf("{\"steps\": %lld, \"rows\": %lld, \"seconds\": %s, \"samples_per_s\": %s, \"loss\": %s, \"stall_s\": %s, "
           "\"policy\": \"%s\", \"capacity\": %lld, \"lookahead\": %d, \"depth\": %d, \"per_step\": {\"fetch_crit_rows\": %s, "
           "\"fetch_bg_rows\": %s, \"write_rows\": %s, \"fetch_crit_bytes\": %s, \"fetch_bg_bytes\": %s, "
           "\"write_bytes\": %s}", (long long)r.steps, (long long)r.rows, cli_jnum("%.3f", r.train_seconds),
           cli_jnum("%.1f", r.samples_per_s), cli_jnum("%.6f", r.last_loss), cli_jnum("%.3f", c->stall_seconds),
           rec_cache_policy_name(c->policy), (long long)c->capacity, c->lookahead, c->depth,
           cli_jnum("%.1f", (double)c->fetch_crit_rows / n), cli_jnum("%.1f", (double)c->fetch_bg_rows / n),
           cli_jnum("%.1f", (double)c->write_rows / n), cli_jnum("%.1f", c->fetch_crit_bytes / n),
           cli_jnum("%.1f", c->fetch_bg_bytes / n), cli_jnum("%.1f", c->write_bytes / n));
    if (r.has_eval)
        printf(", \"eval_rows\": %lld, \"auc\": %s, \"logloss\": %s", (long long)r.eval.n, cli_jnum("%.6f", r.eval.auc),
               cli_jnum("%.6f", r.eval.logloss));
    printf("}\n");
    return CLI_OK;
}
