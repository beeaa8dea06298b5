/* rectrain — training across processes with MPI (`mpirun -np N rectrain train`).
 *
 * Every rank reads every global batch of B rows and takes its slice, rows [r B / N,
 * (r+1) B / N). Dense parameters are replicated: each rank's gradients (of its slice's loss
 * over the GLOBAL B) are summed by non-blocking all-reduces started as each layer's backward
 * finishes (rec_model_on_grads), so that they overlap the backward of the earlier layers; every
 * rank then takes the same optimizer step. Embedding rows live where a plan (plan.h) puts
 * them; the executor does OPER's §5 on MPI:
 *
 *   map      (table, column part, row) -> (owner rank, offset in the owner's store), from the
 *            plan's segments and hot rows, kept in host memory on every rank (the
 *            "all-in-one" address space; rows of a segment sit contiguously on its owner).
 *   forward  per table the slice's ids deduplicated; remote rows fetched with one MPI_Get per
 *            owner (an hindexed datatype of all the rows wanted from it) on a window of every
 *            rank's store, passive target (MPI_Win_lock_all), issued before the local and
 *            replicated rows are copied and flushed after; then pooled as rec_embed pools.
 *   backward the pooled gradients summed per unique row, in the slice's order; rows with an
 *            owner: (table, part, row, gradient) records sent to the owners by one
 *            all-to-all-v (a rank's own rows included: one code path), summed by the owner in
 *            rank order and stepped by its sparse optimizer (rec_sparse_opt_step); replicated
 *            rows: summed into a zero-padded buffer of every replicated row, all-reduced
 *            (OPER's "local-aggregated sparse all-reduce") and stepped by every rank alike.
 *            Owners' updates are made visible by MPI_Win_sync and a barrier before the next
 *            step's gets.
 *   first-order tables  (DeepFM's first-order term, Wide&Deep's wide part: model.h lin.{f},
 *            one float a row) follow the plan too: row r's value lives with the owner of the
 *            row's first column part (or is replicated with it), after the owner's rows in its
 *            window; the forward fetches it beside the row and pools it into
 *            rec_model_pooled(m, 1), and its gradient rides on that part's record as one more
 *            float (on the replicated rows' all-reduce after their rows), stepped by the same
 *            sparse optimizer with a state of its own, as the one-process dim-1 tables are.
 *   bf16 tables  (the model's embed_precision BF16): every store (the window, the replicated
 *            rows, the first-order values) holds bf16 bits, fetched as such and widened
 *            before pooling; owners step them with rec_sparse_opt_step_bf16 keyed by the
 *            table, row, first column of the part and the model's step, the bits one process
 *            gives them (a tipped rounding is what N ranks' reassociated sums may change).
 *
 * The sums run in a fixed order for a given N, so a run repeated with the same N, plan and
 * seed is bitwise identical; against one process the sums are reassociated (per-rank partial
 * sums), which moves losses by float rounding only.
 */
#ifndef RECTRAIN_DIST_H
#define RECTRAIN_DIST_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "rectrain/batch.h"
#include "rectrain/model.h"
#include "rectrain/plan.h"
#include "rectrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when this process was started by mpirun (Open MPI's or PMIx's environment): rectrain
 * then trains as one of N ranks; 0 for a plain run, which never touches MPI. */
int rec_dist_launched(void);

/* MPI_Init (once per process) and this process's rank and the job's size. Errors of MPI
 * calls are returned as REC_EIO naming the call, never aborted on. */
rec_status rec_dist_init(int *rank, int *size);
/* Ends the job from a rank that failed: prints "rank R: MESSAGE" and MPI_Abort, which makes
 * mpirun stop every other rank (none is left waiting in a collective). Does not return. */
void rec_dist_abort(int rank, const char *msg) __attribute__((noreturn));
void rec_dist_finalize(void);

/* ---- a job of several roles ----------------------------------------------------------------
 * `rectrain cluster` across hosts starts every process of a job (embedding servers, oracles,
 * prep-workers, trainers) as ranks of one mpirun (docs/deploy.md). They meet once at start, to
 * exchange endpoints and keys, and once at the end; the training's collectives run among the
 * trainers alone. */

/* MPI_Init with MPI_THREAD_MULTIPLE (a service waits for the job's end on a thread beside its
 * work), this process's rank and the world's size: every process of the job. */
rec_status rec_dist_world(int *rank, int *size);
/* Collective on the world: every process's `bytes` at mine, into all (size x bytes). */
rec_status rec_dist_world_allgather(const void *mine, size_t bytes, void *all);
/* Collective on the world: the trainers (trainer 1) get a communicator of their own, which
 * rec_dist_init and every collective of the training then use. rec_dist_launched says whether
 * more than one trainer trains (one trains as a plain process), and rec_dist_finalize leaves
 * MPI to rec_dist_leave. */
rec_status rec_dist_join(int trainer);
/* Collective on the world: returns when every process reached it (the trainers at their end,
 * the services from their start), or when *stop is set; tests every 50 ms instead of spinning. */
rec_status rec_dist_world_wait(const volatile sig_atomic_t *stop);
/* Ends MPI in a process that joined. */
void rec_dist_leave(void);

/* Measured on the running job, the same on every rank (the minimum over ranks): bytes/s of
 * fetching E-float rows scattered in another rank's window, and of a ring all-reduce of a
 * large buffer; the plan's rule for replicating rows (OPER §4.3) takes them. */
rec_status rec_dist_measure(int E, double *bw_p2p, double *bw_ar);
/* The cost model's cache terms (rec_plan_measure_units), measured by rank 0 for the job's
 * rows and ranks, the same on every rank. */
rec_status rec_dist_measure_units(rec_plan_hw *hw, int E, rec_sparse_opt_kind opt);

/* Collective: whether the ranks that share a machine (the same boot id: network namespaces
 * on one host count as one machine) are bound by their CPU affinity to fewer CPUs than they
 * need — min(ranks x `threads`, the machine's CPUs) — so that they take turns on them, as
 * when mpirun binds the one rank of each of two "hosts" to core 0 of one machine. Then
 * writes a warning naming the machine, the ranks, the CPUs and the fix (mpirun --bind-to
 * none) into `warn` (cap bytes), else leaves it empty. Every rank gets the same text. */
rec_status rec_dist_check_binding(int threads, char *warn, size_t cap);

/* The largest of every rank's v (a stop signal one rank got: all stop at the same step). */
rec_status rec_dist_any(int v, int *out);

/* Rank 0's `bytes` bytes at buf into every rank's buf (what rank 0 measured or decided, so that
 * the ranks act alike). */
rec_status rec_dist_bcast(void *buf, size_t bytes);

/* Every rank's check that all ranks hold the same value (a plan's digest, the dense
 * parameters' digest): REC_EINVAL naming `what` and the first rank that differs. */
rec_status rec_dist_check_same(uint64_t v, const char *what);

/* ---- the executor ---------------------------------------------------------------------- */
typedef struct rec_exec rec_exec;

/* Step time split (seconds, summed over steps) and payload bytes this rank sent. */
typedef struct rec_exec_stats {
    int64_t steps;
    double local_s;    /* local and replicated lookups, and pooling */
    double fetch_s;    /* waiting for remote rows (after the local work) */
    double dense_s;    /* dense forward and backward */
    double allreduce_s;/* waiting for the dense all-reduce */
    double exchange_s; /* gradient records to the owners, their updates, the replicated rows'
                        * all-reduce, the barrier */
    double skew_s;     /* waiting for the slowest rank: the exchange's first all-to-all (a count
                        * per rank, no transfer to speak of); part of exchange and wait */
    double wait_s;     /* exposed communication: inside blocking MPI calls (the fetch's flush, the
                        * loss and all-reduce waits, the exchange's all-to-alls, the barrier);
                        * part of the fetch, all-reduce and exchange times above */
    /* the embedding work the cost model counts (plan.h), sums over steps: */
    double slice_s;    /* compute on this rank's slice: dedup, locating, copies, pooling, the
                        * gradients' sums and packing (part of local and exchange above) */
    double owner_s;    /* compute as owner: the records' sort, sums and updates (part of exchange) */
    double ids;        /* ids of its slices */
    double records;    /* gradient records it applied as owner (its own rows' included) */
    double fetched;    /* rows (parts of rows) it fetched from other ranks */
    double fetched_bytes; /* their bytes */
    double sent_bytes; /* rows served to others, gradient records, all-reduce ring traffic */
    double recv_bytes;
    /* over all ranks: the largest |bytes sent per step / the plan's prediction - 1|, and whose */
    double worst_sent_dev;
    int worst_sent_rank;
} rec_exec_stats;

/* For model m (rec_model_init_sharded) trained by this rank of N with `plan` (N ranks, the
 * model's tables): allocates this rank's rows and their optimizer state, initialises them as
 * rec_embed would (the same values a one-process model starts from), and opens the window.
 * Collective: every rank calls it. `baseline` 1: the forward fetches rows with an
 * all-to-all-v of ids and rows (TorchRec's style) instead of one-sided gets. */
rec_status rec_exec_init(rec_exec **out, rec_model *m, const rec_plan *plan, int64_t global_batch, int baseline);
void rec_exec_free(rec_exec *x);

/* One training step on the global batch b (every rank passes the same batch): *loss is the
 * global batch's mean BCE before the update, on every rank. Advances the model's steps. */
rec_status rec_exec_train_step(rec_exec *x, const rec_batch *b, double *loss);
/* Logits of the global batch b: every rank computes its slice, rank 0 receives all B into
 * logits (other ranks may pass NULL). */
rec_status rec_exec_forward(rec_exec *x, const rec_batch *b, float *logits);
/* ---- sharded checkpoints (shards.c) -------------------------------------------------------- */
struct rec_ckpt_meta;

/* Collective: saves the job's state as a sharded save whose main file is `path` (a --ckpt
 * directory's model.rckpt): every rank's rows in a file of its own, the plan, then the main
 * file (the dense part and meta, with meta->shards = N) as the commit point; then the files of
 * earlier saves are removed. meta->step must be the model's steps. Errors reach every rank. */
rec_status rec_exec_save(rec_exec *x, const char *path, const struct rec_ckpt_meta *meta);
/* Collective: loads the checkpoint `path` — a sharded save by any number of ranks and plan,
 * or a whole model's (one process) — into this job's model and rows, re-sharding as its plan
 * says; *meta gets the main file's meta. Every rank reads the files it needs. */
rec_status rec_exec_load(rec_exec *x, const char *path, struct rec_ckpt_meta *meta);
/* Collective: the job's tables and dense part into `whole`, a model of the job's config built
 * whole (rec_model_init) on rank 0 (other ranks pass NULL): rank 0 receives every rank's rows,
 * and the tables are laid out as one process holds them (--npy under mpirun). Rank 0 holds the
 * whole tables twice while it gathers. */
rec_status rec_exec_gather(rec_exec *x, rec_model *whole);
/* Loads any checkpoint into a whole model (one process: eval, export, a resume without
 * mpirun): a whole one as rec_ckpt_load does, a sharded save's dense part from its main file
 * and its tables gathered row by row from the rank files through the saved plan. No MPI. */
rec_status rec_dist_ckpt_load(const char *path, rec_model *m, struct rec_ckpt_meta *meta);
/* The files of save `id` beside the main file `path`: rank r of n's shard, and the plan. */
void rec_dist_shard_path(const char *path, uint64_t id, int rank, int n, char *buf, size_t cap);
void rec_dist_plan_path(const char *path, uint64_t id, char *buf, size_t cap);
/* Removes the sharded saves' files beside `path` except those of save `keep` (0: all). */
void rec_dist_prune_shards(const char *path, uint64_t keep);

/* The model's dense parameters' digest, for rec_dist_check_same. */
uint64_t rec_exec_dense_digest(rec_exec *x);
/* Collective: this rank's stats, and the worst deviation from the plan over all ranks. */
void rec_exec_get_stats(const rec_exec *x, rec_exec_stats *s);

#ifdef __cplusplus
}
#endif
#endif
