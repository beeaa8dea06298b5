/* rectrain — disaggregated training with a lookahead cache (Bagpipe, SOSP'23).
 *
 * Roles (each its own process; docs/bagpipe.md):
 *   embedding servers  `rectrain embserver`: the tables, row r of a table on server r mod S,
 *                      with their optimizer state; they answer GET and PUT of rows.
 *   Oracle Cacher      `rectrain oracle`: reads the training batches L ahead, plans every
 *                      trainer cache slot (the planner below) and sends each batch with its
 *                      plan to the trainer. Several oracles may split the tables (Bagpipe
 *                      §3.4, "partitioned"): each plans its tables into its own slots.
 *   trainers           `[mpirun -np N] rectrain train --oracle-cacher EP --embservers EP,...`: a
 *                      model without tables (rec_model_init_sharded) and a cache of C rows; a
 *                      maintenance thread loads the rows a plan fetches and writes back the rows
 *                      it evicts, the training thread pools and updates rows in the cache only;
 *                      N trainers share rows as LRPP (src/cache/cache_impl.h) over MPI.
 *
 * The planner (Bagpipe §3.1, Algorithm 1). Batches are numbered 0, 1, ... in training order.
 * With lookahead L the window holds the current batch x and the next L-1; each row (f, r)
 * used in the window has latest(f, r) = the last window batch using it. Planning x, for each
 * distinct row of x:
 *   - not cached: it is fetched into a free slot before x trains (a "prefetch": out of order,
 *     up to `depth` batches ahead of training);
 *   - TTL = latest(f, r): when TTL == x no window batch uses the row again and it is evicted
 *     (written back to its server) after x trains; otherwise it stays cached.
 * The trainer thus never reads a stale row (§3.2): a row leaves the cache only after its last
 * use in the window, and a slot (or row) evicted after batch t is not fetched again before the
 * trainer finished t: the planner gives a slot freed after t only to fetches of batches
 * >= t + depth, and depth <= L (a row evicted after t is next used at t + L or later). The
 * trainer fetches batch x's rows once it has trained x - depth, after the write-backs of every
 * batch up to x - depth (in order, on the same connection), so every fetch sees every earlier
 * update: training is the same as with every row local.
 *
 * The planner also drives the baselines of the bench, on the same trainer, with the same
 * capacity, the misses then fetched on the critical path (depth 1):
 *   NONE    no cache: every row of x fetched before x, written back after it (L = 1);
 *   STATIC  FAE-like: the `hot` rows stay once fetched; the others as NONE;
 *   LRU     least recently used: hits stay, a miss takes a free slot or the least recently
 *           used row's (written back after the previous batch; the planner sees one batch
 *           ahead for that, which an on-demand LRU does at the same moment).
 */
#ifndef RECTRAIN_CACHE_H
#define RECTRAIN_CACHE_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "rectrain/batch.h"
#include "rectrain/net.h"
#include "rectrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rec_cache_policy {
    REC_CACHE_BAGPIPE = 0,
    REC_CACHE_NONE = 1,
    REC_CACHE_STATIC = 2,
    REC_CACHE_LRU = 3,
    REC_CACHE_POLICIES
} rec_cache_policy;

const char *rec_cache_policy_name(int p);          /* "bagpipe", "none", "static", "lru" */
int rec_cache_policy_parse(const char *name);      /* -1 when unknown */

typedef struct rec_cplan_opts {
    int policy;              /* rec_cache_policy */
    int F;                   /* tables */
    const int64_t *rows;     /* (F) R_f */
    int64_t capacity;        /* C: rows the trainer's cache holds, >= 1, < 2^31 */
    int lookahead;           /* BAGPIPE: L >= 1 (others: ignored) */
    int depth;               /* BAGPIPE: 1..L batches a fetch may run ahead (others: 1) */
    /* STATIC: the rows kept once fetched, as (table, row) pairs */
    const int32_t *hot_f;
    const int64_t *hot_row;
    int64_t n_hot;
} rec_cplan_opts;

/* One row moved between a cache slot and its server. */
typedef struct rec_centry {
    int32_t slot;
    int32_t f;
    int64_t row;
} rec_centry;

/* A row's latest value moving between trainers (LRPP): its slot, and the other trainer. */
typedef struct rec_cmove {
    int32_t slot;
    int32_t peer;
} rec_cmove;

/* The plan of one batch. The arrays belong to the planner, valid until its next call. */
typedef struct rec_cstep {
    int64_t batch;           /* its number; -1 for the final flush */
    int64_t n_fetch;
    const rec_centry *fetch; /* rows to load into their slots before the batch trains */
    int64_t n_evict;
    const rec_centry *evict; /* rows to write back from their slots after it trained */
    int64_t n_unique;        /* distinct rows the batch uses */
    int32_t *const *slots;   /* (F) per table, the slot of each of the batch's ids (nnz_f) */
} rec_cstep;

typedef struct rec_cplan_stats {
    int64_t batches, fetched, evicted, ids, unique;
    int64_t peak_slots;      /* most slots taken at once (cached, fetched ahead, or freed but
                                not yet reusable) */
} rec_cplan_stats;

typedef struct rec_cplan rec_cplan;

/* REC_EINVAL naming the option when one is out of range. Allocates 8 bytes per table row. */
rec_status rec_cplan_init(rec_cplan **out, const rec_cplan_opts *o);
void rec_cplan_free(rec_cplan *p);
/* Batches the planner must have seen ahead of the one it plans: L for BAGPIPE, 1 for NONE and
 * STATIC, 2 for LRU. */
int rec_cplan_window(const rec_cplan *p);
/* Batches seen and not yet planned. */
int rec_cplan_pending(const rec_cplan *p);
/* Shows the planner the next batch (in order): it joins the window. REC_EINVAL naming the
 * table, batch row and id when an id is outside its table. At most window() pending. */
rec_status rec_cplan_look(rec_cplan *p, const rec_batch *b);
/* Plans the oldest pending batch, b (the same batch given to look()): fills *st. REC_EINVAL
 * when b is not that batch (another id count) or when the cache is too small for it. */
rec_status rec_cplan_step(rec_cplan *p, const rec_batch *b, rec_cstep *st);
/* After the last batch: every cached row, to write back (st->batch = -1). */
rec_status rec_cplan_flush(rec_cplan *p, rec_cstep *st);
void rec_cplan_get_stats(const rec_cplan *p, rec_cplan_stats *s);

/* Optimizer state floats per row of dim E (rec_sparse_opt_kind opt): E, 1 or 0. */
int rec_cache_state_floats(int opt, int E);
/* Optimizer state floats a row carries between a server and a cache: the row's, then with
 * first-order tables (lin 1: DeepFM, Wide&Deep) its first-order value's (1 or 0). */
int rec_cache_row_state_floats(int opt, int E, int lin);

/* ---- the embedding server (`rectrain embserver`) ---------------------------------------- */
typedef struct rec_embserver_opts {
    const char *listen;      /* a ZeroMQ endpoint, e.g. tcp://127.0.0.1:5600 */
    const char *ckpt_dir;    /* durable jobs: snapshots of the shard here (NULL: none) */
    int64_t ckpt_every;      /* a snapshot every this many commits */
    const volatile sig_atomic_t *stop;  /* set by a signal handler: the server returns */
    FILE *log;               /* a line when the tables are made, per refused frame or peer, at the end */
    rec_net_secure sec;      /* CURVE keys and allow-list (net.h); none: plain text on loopback */
} rec_embserver_opts;

/* Serves until *stop is set. Fails only when it cannot bind (REC_EIO, naming the endpoint). */
rec_status rec_embserver_run(const rec_embserver_opts *o);

/* ---- the Oracle Cacher (`rectrain oracle`) -------------------------------------------------- */
typedef struct rec_oracle_opts {
    const char *listen;
    const char *data_path;   /* the training data: a .rshard, or a Criteo .tsv/.gz with spec_path */
    const char *spec_path;   /* TSV: the prep spec (default: the config's train.prep_spec) */
    const char *vocab_from;  /* TSV: the shard of the spec's vocabularies */
    /* TSV: the data processors (`rectrain prep-worker`) that preprocess every batch (Bagpipe's
     * DataProcessors; FastFlow's offload at p'3, all of it), or none: the oracle's own thread */
    const char *const *workers;
    int n_workers;
    const char *config_path; /* the model config (batch, epochs, seed); NULL: the default */
    int64_t batch;           /* 0: the config's */
    int epochs;              /* 0: the config's */
    int shuffle;             /* 1: the trainer's shuffled order (rec_shuffle from the config's seed) */
    int64_t max_batches;     /* stop after this many (0: all) */
    int policy;              /* rec_cache_policy */
    int64_t capacity;        /* trainer cache rows */
    int lookahead;           /* BAGPIPE: L (0: the largest that fits the capacity on the first batches) */
    int depth;               /* BAGPIPE: prefetch depth (0: min(L, 4)) */
    int64_t hot_batches;     /* STATIC: batches whose id counts pick the hot rows (0: 256) */
    int table_lo, table_hi;  /* plan tables [lo, hi) only, one of several oracles partitioned by
                              * table (Bagpipe §3.4); hi 0: every table */
    int part, parts;         /* or (parts > 0) part J of K: tables [J T / K, (J + 1) T / K) of T */
    const volatile sig_atomic_t *stop;
    FILE *log;
    rec_net_secure sec;      /* its keys as a service, and as the workers' client (net.h) */
} rec_oracle_opts;

/* Serves one trainer the job's batches and plans, then waits for the next trainer (a
 * restarted one starts over) until *stop. */
rec_status rec_oracle_run(const rec_oracle_opts *o);

/* ---- the trainer (`[mpirun -np N] rectrain train --oracle-cacher EP[,EP...] --embservers EP,...`) ---- */
enum { REC_CACHE_MAX_ORACLES = 16 };
/* The first 8 bytes of an embedding server's snapshot (embserver --ckpt DIR). */
#define REC_SNAP_MAGIC "RTSNAP01"

/* A trainer trains in `rectrain train`'s one loop (train.h rec_train_opts.cache): the cache
 * backend (backend.h; src/cache/cache_trainer.c) steps the batches the oracles give. */
typedef struct rec_cache_opts {
    const char *const *oracles;  /* the Oracle Cachers, in table order (several: partitioned by table) */
    int n_oracles;
    const char *const *servers;  /* in shard order */
    int n_servers;
    int durable;                 /* commit every step on the servers: a killed trainer resumes */
    double timeout;              /* seconds a peer may stay silent (0: 10) */
    rec_net_secure sec;          /* its keys as the oracles' and servers' client (net.h) */
} rec_cache_opts;

/* The cache backend's own figures (rec_train_report.cache). */
typedef struct rec_cache_report {
    double stall_seconds;        /* training waiting for its batch's rows */
    int policy, lookahead, depth;
    int64_t capacity;
    int rank, trainers;          /* under mpirun: this trainer's rank of N */
    /* rows and bytes (values and state) moved: fetched on the critical path (when the training
     * thread has no other batch to train: the one before is done, or it waits), fetched ahead
     * (while earlier batches train), written back */
    int64_t fetch_crit_rows, fetch_bg_rows, write_rows;
    double fetch_crit_bytes, fetch_bg_bytes, write_bytes;
} rec_cache_report;

/* A trainer joined to the job: its oracles connected and asked for the job (their INFO), under
 * mpirun with every trainer. The training loop binds the model to the job (its tables, batch)
 * and hands the trainer to the cache backend (rec_backend_opts.cache), which owns it from then;
 * until then rec_cache_trainer_free frees it. `resume`: a restarted durable job. */
typedef struct rec_cache_trainer rec_cache_trainer;
rec_status rec_cache_join(rec_cache_trainer **out, const rec_cache_opts *o, int resume,
                          const volatile sig_atomic_t *stop, FILE *log, rec_net_cache_info *job);
void rec_cache_trainer_free(rec_cache_trainer *t);

/* ---- a deployment on one machine (`rectrain cluster CONFIG.json`) ------------------------
 * The JSON (docs/bagpipe.md), every key optional but "data":
 *   {"format": "rectrain-cluster", "version": 1,
 *    "data": "train.rshard", "model": "configs/dlrm_small.json",
 *    "batch": 1024, "epochs": 1, "shuffle": true, "steps": 0,
 *    "cache": {"policy": "bagpipe", "rows": 262144, "lookahead": 0, "prefetch_depth": 0},
 *    "embservers": 2, "trainers": 1, "oracles": 1, "threads": 1, "host": "127.0.0.1", "base_port": 5700,
 *    "peer_timeout": 10, "loss_log": "cluster.loss", "ckpt": "run1",
 *    "link": {"gbit": 1, "latency_us": 100},
 *    "durable": {"dir": "snapshots", "every": 100},
 *    "spec": "configs/criteo_standard.json", "prep_workers": 1,   (raw .tsv data)
 *    "hosts": {"embservers": ["h1"], "oracles": ["h1"], "prep_workers": ["h1"], "trainers": ["h2", "h3"]},
 *    "network": "10.1.0.0/16"}                                  (across hosts: docs/deploy.md)
 * "embservers": 0 is a FastFlow job: no servers nor oracle, the trainers read "data" and
 * offload its preprocessing ("offload": "auto" or a share) to the prep-workers.
 * Servers listen on base_port + k (k < S), the K oracles on base_port + S + j. With "link",
 * the trainer reaches server k through `rectrain bench link` (an emulated link of that
 * bandwidth and one-way latency) on base_port + S + K + k; prep-workers take
 * base_port + 2 S + K + i. With "durable", the trainer
 * commits every step and server k snapshots into DIR/server-k every `every` steps. Several trainers run under
 * `mpirun -np N` (Open MPI's; as root it needs OMPI_ALLOW_RUN_AS_ROOT=1 and
 * OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 in the environment). Paths are relative to
 * the working directory. 0 (or absent) batch / epochs / lookahead / prefetch_depth: the
 * model's or the oracle's default. */
typedef struct rec_cluster_config {
    char data[1024], model[1024], loss_log[1024], ckpt[1024], host[256], spec[1024];
    int prep_workers;        /* raw data: prep-workers the cluster starts, which preprocess it */
    int64_t batch, steps, cache_rows;
    int epochs, shuffle, policy, lookahead, depth, embservers, trainers, threads, base_port;
    double peer_timeout;
    int oracles;             /* Oracle Cachers, each part of the tables (oracle --tables J/K) and
                              * cache_rows / oracles of the cache */
    int link;                /* put an emulated link between the trainer and the servers */
    char durable_dir[1024];  /* "" or the servers' snapshot directories' parent */
    int64_t durable_every;
    double link_gbit, link_latency_us;
    char offload[32];        /* a FastFlow job's train --offload: "auto" or a share */
    /* Across hosts (docs/deploy.md): where each role runs, a comma-separated list of hosts, one
     * for all of the role or one a process ("" : where mpirun places it), in the order
     * REC_ROLE_*; and the network whose addresses the services listen on ("": the host's first). */
    char hosts[4][2048];
    char network[64];
} rec_cluster_config;
enum { REC_ROLE_EMBSERVERS, REC_ROLE_PREP_WORKERS, REC_ROLE_ORACLES, REC_ROLE_TRAINERS };

/* Parses and validates; REC_EINVAL "ORIGIN: $.path: what is wrong" (unknown keys refused). */
rec_status rec_cluster_config_parse(rec_cluster_config *c, const char *json, size_t len, const char *origin);
rec_status rec_cluster_config_load(rec_cluster_config *c, const char *path);

#ifdef __cplusplus
}
#endif
#endif
