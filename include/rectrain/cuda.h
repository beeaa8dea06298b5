/* rectrain — the embedding engine on an NVIDIA GPU (src/cuda/; RecFlex, paper 001 §IV).
 *
 * A rec_cuda_embed holds the F tables of a rec_embed in GPU memory (one allocation, each
 * table 16-byte aligned; the optimizer state likewise) and computes what rec_embed computes
 * (embed.h: SUM/MEAN bags, weights, empty bags give zeros; backward with the sparse optimizer
 * fused, duplicate ids summed before the row's one update), in one CUDA stream:
 *
 *   forward   ONE launch over all tables. Each table has its own schedule from one template
 *             family, "T threads per bag" with 16-byte (v4) or 4-byte (v1) loads: T = the row's
 *             chunks is thread-per-row-chunk, T below 32 with the ids split among a bag's
 *             lanes puts several bags in a warp (small dims), T = 32 is warp-per-bag, T = 256
 *             block-per-bag with the lanes' partial sums reduced in shared memory. The kernel
 *             finds its block's table in the per-batch block map and runs that table's
 *             schedule through if/else over inlined device functions (RecFlex Fig. 8);
 *             per-table arguments come from a device array; dynamic shared memory is the
 *             union of the schedules' needs, padded to set the occupancy (blocks per SM).
 *             The block map is computed on the host for each batch from its real offsets
 *             (bags per block from the table's mean bag size in THIS batch, so every block has
 *             about the same work), written to a pinned ring and copied while the previous
 *             launch runs (§IV-B).
 *   backward  keys (global row = table base + id) sorted with CUB's radix sort over as many
 *             bits as the rows need, the runs of equal keys found (heads, a scan), then per
 *             distinct row one warp sums its entries' gradients in float64 (the bag's output
 *             gradient × weight, / L for MEAN) and applies SGD, Adagrad or row-wise Adagrad
 *             to the row: one read and one write per touched row. Rows with more than
 *             REC_CUDA_LONG_RUN entries (the hot rows of small tables) are summed in pieces
 *             of REC_CUDA_CHUNK entries, a warp each, whose float64 partial sums one warp per
 *             row then adds in order (deterministic). No host sync.
 *
 * Tuning (RecFlex §IV-A, both stages): for each occupancy setting, round r gives table f its
 * candidate (r + f) mod N_f (all co-executed in the fused kernel; a Latin rotation, so every
 * round runs the same mix of schedules and each table meets the same interference whichever
 * candidate it runs; tables with fewer candidates repeat theirs: the padding), the kernel
 * timing each block (clock64) into its table's sums; each table keeps its cheapest candidate
 * (local stage). Then whole fused kernels are timed with events over the batches and the
 * fastest is kept (global stage). Plans persist as JSON (rec_cuda_plan_save/parse).
 *
 * Limits: dims 1..REC_CUDA_MAX_DIM, fewer than 2^31 rows per table and 2^32 in all, batches of
 * fewer than 2^31 ids; rec_cuda_embed_init says which one a config breaks.
 *
 * In a build without nvcc, or on a machine without a GPU, every entry point returns
 * REC_EUNSUPPORTED with the reason (rec_cuda_probe says it first).
 */
#ifndef RECTRAIN_CUDA_H
#define RECTRAIN_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "rectrain/batch.h"
#include "rectrain/embed.h"
#include "rectrain/model.h"
#include "rectrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

enum {
    REC_CUDA_MAX_DIM = 256,
    REC_CUDA_BLOCK = 256,     /* threads per block of the fused forward */
    REC_CUDA_LONG_RUN = 256,  /* entries above which one row's gradient is summed in pieces */
    REC_CUDA_CHUNK = 128,     /* entries of such a piece, one warp each */
    REC_CUDA_N_SCHED = 18,    /* T in {1,2,...,256} x {v4, v1} */
    REC_CUDA_N_OCC = 4        /* occupancy settings the tuner tries: m, m/2, m/4, 1 (deduplicated), m the
                               * most blocks of 256 threads an SM holds with this kernel */
};

/* Schedule s: threads per bag 1 << (s % 9), 16-byte loads when s < 9. */
static inline int rec_cuda_sched_threads(int s) { return 1 << (s % 9); }
static inline int rec_cuda_sched_vec(int s) { return s < 9 ? 4 : 1; }
/* "t8v4": the text form in plans and reports; buf >= 8 bytes. -1 from parse when unknown. */
const char *rec_cuda_sched_name(int s, char *buf, size_t cap);
int rec_cuda_sched_parse(const char *text);
/* Whether schedule s can run a table of dim E at output column col of W: v4 needs E % 4 == 0
 * and 16-byte aligned output columns (col % 4 == 0 and W % 4 == 0). */
int rec_cuda_sched_fits(int s, int E, int col, int W);
/* Table f's tuning candidates: the schedules that fit with T at most max(32, 8 x the row's
 * chunks) (more lanes only idle). Writes up to REC_CUDA_N_SCHED, returns the count. */
int rec_cuda_sched_candidates(int E, int col, int W, int *out);
/* The schedule a table starts with: warp-per-bag (t32) for rows of 32 chunks or more,
 * else thread-per-row-chunk (T = the row's chunks rounded up to a power of two). */
int rec_cuda_sched_default(int E, int col, int W);

/* Whether a GPU can be used: REC_OK with its name in name (cap bytes), or REC_EUNSUPPORTED
 * with the reason (no nvcc at build time, no driver, no device). The reason names no flag: the
 * caller knows which one asked for the GPU and says what to give instead. */
rec_status rec_cuda_probe(char *name, size_t cap);

typedef struct rec_cuda_embed rec_cuda_embed;
typedef struct rec_cuda_batch rec_cuda_batch;

/* Copies src's tables and optimizer state to the GPU; cfg gives pooling, optimizer and
 * max_batch (the config src was made with). */
rec_status rec_cuda_embed_init(rec_cuda_embed **out, const rec_embed_config *cfg, const rec_embed *src);
void rec_cuda_embed_free(rec_cuda_embed *g);
/* Copies the tables and state back into dst (same shapes); waits for the stream. */
rec_status rec_cuda_embed_download(rec_cuda_embed *g, rec_embed *dst);

/* Device memory of B x W floats (W = sum of dims), for outputs and their gradients. */
rec_status rec_cuda_alloc(void **dptr, size_t bytes, const char *what);
void rec_cuda_free(void *dptr);
rec_status rec_cuda_upload(void *dst, const void *src, size_t bytes);
rec_status rec_cuda_download(void *dst, const void *src, size_t bytes);  /* waits */
/* Fills n floats at d with x (poison). */
rec_status rec_cuda_fill(float *d, size_t n, float x);

/* A batch's sparse features (window first_feature .. + F - 1) on the GPU: ids checked
 * against the tables (REC_EINVAL naming feature, row and id) and packed on the host into a
 * pinned buffer, copied asynchronously on the engine's stream. The batch object keeps its
 * own device and pinned buffers (grown when a batch needs more), so several can be in
 * flight. */
rec_status rec_cuda_batch_new(rec_cuda_batch **out);
void rec_cuda_batch_free(rec_cuda_batch *d);
rec_status rec_cuda_batch_load(rec_cuda_embed *g, rec_cuda_batch *d, const rec_batch *b, int first_feature);

/* dout / out are device (B, W) row-major. */
rec_status rec_cuda_embed_forward(rec_cuda_embed *g, const rec_cuda_batch *d, float *out);
rec_status rec_cuda_embed_backward_update(rec_cuda_embed *g, const rec_cuda_batch *d, const float *dout, float lr);
/* Waits for the engine's stream. */
rec_status rec_cuda_embed_sync(rec_cuda_embed *g);

/* Plan: a schedule per table and the occupancy (0 = no cap). */
rec_status rec_cuda_embed_set_plan(rec_cuda_embed *g, const int *sched, int occupancy);
void rec_cuda_embed_get_plan(const rec_cuda_embed *g, int *sched, int *occupancy);
/* Every table its default schedule, occupancy uncapped. */
void rec_cuda_embed_set_default(rec_cuda_embed *g);
/* Every table the same schedule s where it fits (else its default): a uniform plan. */
void rec_cuda_embed_set_uniform(rec_cuda_embed *g, int s);

/* Seconds per forward (what 0) or forward + backward + update (what 1) over the batches,
 * timed with events: the median of reps passes of the mean per batch. */
rec_status rec_cuda_embed_time(rec_cuda_embed *g, rec_cuda_batch *const *d, int n, float *out, const float *dout,
                               float lr, int what, int reps, double *sec);

/* The two-stage tuner over the batches (see above), then a global stage over every plan it
 * has: per occupancy the local stage's two plans (each table's least summed block cycles; and
 * least cycles per SM slot plus its longest block, which charges a table's tail), the plan
 * tuning started from, the default plan and the best uniform plan, each timed as the one
 * fused kernel in turns; the fastest (median) is kept. Last, a refinement by the fused
 * kernel's own time: tables grouped by dim and mean bag size, each group trying every
 * schedule (embed.cu: tune_refine). Updates no table. */
enum { REC_CUDA_WIN_SLOTS = 0, REC_CUDA_WIN_TAIL = 1, REC_CUDA_WIN_START = 2, REC_CUDA_WIN_UNIFORM = 3, REC_CUDA_WIN_DEFAULT = 4 };
typedef struct rec_cuda_tune_report {
    int occupancy;                   /* of the plan installed (0: uncapped) */
    int winner;                      /* REC_CUDA_WIN_*: which kind of plan won */
    int n_occ, occ[REC_CUDA_N_OCC];  /* the settings tried */
    double occ_s[REC_CUDA_N_OCC];    /* seconds per forward of the better local plan at each */
    double start_s, uniform_s;       /* ... of the start plan, of the best uniform plan */
    int uniform_sched;
    int rounds;                      /* local-stage rounds per occupancy */
    /* the refinement: groups of tables, groups whose schedule changed, kernels timed, and the
     * speedup over the global stage's plan */
    int refine_groups, refine_changed, refine_trials;
    double refine_gain;
} rec_cuda_tune_report;
rec_status rec_cuda_embed_tune(rec_cuda_embed *g, rec_cuda_batch *const *d, int n, float *out, int reps,
                               rec_cuda_tune_report *report);

/* The device's copy bandwidth: a device-to-device copy of `bytes`, GB/s counting bytes read
 * and written (median of 5). */
rec_status rec_cuda_copy_gbps(size_t bytes, double *gbps);

/* Plans as JSON: {"format": "rectrain-cuda-embed-plan", "version": 1, "occupancy",
 * "tables": [{"rows", "dim", "sched"}...]}. Load checks the shapes (REC_EINVAL naming the
 * file and JSON path) and the schedules' fit. */
rec_status rec_cuda_plan_save(const char *path, int F, const int64_t *rows, const int *dims, const int *sched,
                              int occupancy);
rec_status rec_cuda_plan_parse(const char *text, size_t len, const char *name, int F, const int64_t *rows,
                               const int *dims, int *sched, int *occupancy);

/* ---- a DLRM on the GPU (model.cu) -----------------------------------------------------------
 * The dense layers through cuBLASLt (fp32; bias and ReLU fused as epilogues; libcublasLt is
 * opened at first use, so the binary starts without it), the dot or cat interaction, sigmoid
 * + BCE and the dense optimizer (SGD, Adagrad, Adam as nn.h) as kernels, the embeddings by the
 * engine above: the CPU model's computation (model.h) on the engine's one stream, every
 * buffer allocated at init. Inputs travel through pinned buffers, two in turn, copied
 * asynchronously; a step returns without waiting for the device. */
typedef struct rec_cuda_model rec_cuda_model;
/* Copies m (a DLRM; its dense parameters, optimizer state, tables and step count) to the GPU,
 * for batches of up to max_batch rows. Other model kinds: REC_EUNSUPPORTED saying so.
 * precision REC_PRECISION_BF16: the MLPs' products take bf16 operands (weights, layer inputs,
 * output gradients rounded to nearest even), accumulate and write fp32, and the optimizer
 * keeps fp32 master weights; a product cuBLASLt has no bf16 algorithm for stays fp32. */
/* REC_OK when the GPU model trains a model of config c: a DLRM (fp32 or bf16 tables); else
 * REC_EUNSUPPORTED naming what trains on the CPU instead. Needs no GPU (rec_cuda_model_init
 * checks it first; train before it reads the data). */
rec_status rec_cuda_check_config(const rec_model_config *c);
rec_status rec_cuda_model_init(rec_cuda_model **out, rec_model *m, int max_batch, int precision);
void rec_cuda_model_free(rec_cuda_model *g);
/* Enqueues one training step on b (forward, loss, backward, sparse and dense updates at the
 * schedule's rate for the model's step count, which it advances) and returns. The loss of the
 * step before, which ran while this one was being prepared, comes back in *prev_loss with its
 * step number in *prev_step (-1: none yet). */
rec_status rec_cuda_model_train_step(rec_cuda_model *g, const rec_batch *b, double *prev_loss, int64_t *prev_step);
/* Staged input (rec_loader_open_staged, train.h): a stager of n_slots windows of up to
 * slot_rows rows whose batches the GPU gathers itself: each window is copied to the device
 * once, as the loader laid it out (rec_cuda_stage), its ids checked against the tables on the
 * loader's thread (REC_EINVAL naming `what`, the row and the feature); a batch costs the host
 * its positions and its ids per table. The stager lives as long as g (a second call replaces
 * it: no loader may be using the first). */
enum { REC_CUDA_STAGE_SLOTS = 64 }; /* the most staging slots: batches up to 62 windows */
typedef struct rec_stager rec_stager;
typedef struct rec_staged_batch rec_staged_batch;
rec_status rec_cuda_model_stager(rec_cuda_model *g, int n_slots, int64_t slot_rows, const char *what, rec_stager *out);
/* rec_cuda_model_train_step on a batch of the stager's loader. */
rec_status rec_cuda_model_train_step_staged(rec_cuda_model *g, const rec_staged_batch *b, double *prev_loss,
                                            int64_t *prev_step);
/* Waits for the steps enqueued; the last one's loss and step (-1: none pending). */
rec_status rec_cuda_model_finish(rec_cuda_model *g, double *loss, int64_t *step);
/* logits (B, host) of b; waits. */
rec_status rec_cuda_model_forward(rec_cuda_model *g, const rec_batch *b, float *logits);
/* Copies parameters, optimizer state, tables and the step count back into m. */
rec_status rec_cuda_model_download(rec_cuda_model *g, rec_model *m);
int64_t rec_cuda_model_steps(const rec_cuda_model *g);
rec_cuda_embed *rec_cuda_model_embed(rec_cuda_model *g);
/* Per-part timing with events (no waiting: read with each step's loss): milliseconds per step
 * of each part, averaged since profiling was turned on; returns the steps counted. */
enum {
    REC_CUDA_PART_INPUT, REC_CUDA_PART_EMB_FWD, REC_CUDA_PART_BOTTOM_FWD, REC_CUDA_PART_INTERACT_FWD,
    REC_CUDA_PART_TOP_FWD, REC_CUDA_PART_LOSS, REC_CUDA_PART_TOP_BWD, REC_CUDA_PART_INTERACT_BWD,
    REC_CUDA_PART_BOTTOM_BWD, REC_CUDA_PART_EMB_BWD, REC_CUDA_PART_DENSE_OPT, REC_CUDA_N_PARTS
};
const char *rec_cuda_part_name(int k);
void rec_cuda_model_profile(rec_cuda_model *g, int on);
int64_t rec_cuda_model_profile_read(const rec_cuda_model *g, double *ms);
/* The host's side of each rec_cuda_model_train_step while profiling (wall clock, ms per step):
 * staging the batch (waiting for its input slot, copying dense values and labels to pinned
 * memory, packing the ids, issuing the copies), enqueueing the step's kernels (the block map
 * included), and waiting for the step before to finish. Staging + enqueueing longer than the
 * GPU's step with little waiting: the host bounds the rate. Returns the steps counted. */
enum { REC_CUDA_HOST_STAGE, REC_CUDA_HOST_LAUNCH, REC_CUDA_HOST_WAIT, REC_CUDA_N_HOST };
int64_t rec_cuda_model_host_read(const rec_cuda_model *g, double *ms);
/* Co-running preprocessing (RAP §5): the training's stages are its parts after the input copy.
 * From the next step on, the start of stage s of every step records events[s] (a cudaEvent_t,
 * for a rec_corun, prep.h) and every step's parts are timed. The first call times the
 * capacity probe alone (2^k blocks, up to 50 ms; the GPU otherwise idle). */
enum { REC_CUDA_CORUN_STAGES = REC_CUDA_N_PARTS - 1 };
rec_status rec_cuda_model_corun(rec_cuda_model *g, void **events);
/* The next step runs the probe beside stage `stage` (-1: none): hashing kernels of about `ms`
 * standalone (interpolated between its timed sizes), on a stream of the lowest priority that
 * waits for the stage's start, as the GPU executors do (RAP §5.1). */
rec_status rec_cuda_model_probe(rec_cuda_model *g, int stage, double ms);
/* The stages' times (REC_CUDA_CORUN_STAGES, ms) of the last step whose loss a step call
 * returned, and the stage its probe ran beside (-1 none). 0: no step harvested since. */
int rec_cuda_model_stage_times(rec_cuda_model *g, double *ms, int *probe_stage);

#ifdef __cplusplus
}
#endif
#endif
