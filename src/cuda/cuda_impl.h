/* Internal to the GPU engine: what the host computes for each batch, shared by the CUDA side
 * (embed.cu) and the C side (sched.c, tested without a GPU). */
#ifndef RECTRAIN_CUDA_IMPL_H
#define RECTRAIN_CUDA_IMPL_H

#include <stdint.h>

#include "rectrain/batch.h"
#include "rectrain/core.h"
#include "rectrain/status.h"
#include "gather.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The row's chunks for schedule s: E / 4 with 16-byte loads, E with 4-byte ones. */
static inline int rec_cuda_chunks(int s, int E) { return s < 9 ? E / 4 : E; }
/* Lanes of a bag's group that take distinct chunks: the chunks rounded up to a power of two,
 * at most T. The other T / Cg lanes split the bag's ids. */
static inline int rec_cuda_chunk_lanes(int T, int Cv) {
    int c = 1;
    while (c < Cv && c < T) c <<= 1;
    return c;
}

/* The block map of one batch (RecFlex §IV-B's runtime mapping, from the batch's real
 * offsets): table f gets block_start[f + 1] - block_start[f] consecutive blocks; each block
 * runs rounds[f] rounds, and in round r its group g (of 256 / T_f groups) pools bag
 * (rel * rounds[f] + r) * groups + g. rounds[f] is chosen so that a block's serial work is
 * about the same for every table: a table's round costs ceil(L / S) * ceil(Cv / Cg) loads per
 * lane (L its mean bag size in THIS batch, nnz[f] / B), and the rounds are set so that the
 * whole batch makes about target_blocks blocks. B >= 1. Returns the blocks in all. */
int64_t rec_cuda_block_map(int F, int B, const int *dims, const int *sched, const int64_t *nnz, int64_t target_blocks,
                           int32_t *rounds, int32_t *block_start);

/* The ids of features first .. first + F - 1 of b in all; *weighted: any of them is weighted
 * (rec_cuda_pack then writes every id's weight). */
int64_t rec_cuda_batch_ids(const rec_batch *b, int first, int F, int *weighted);

/* Packs features first .. first + F - 1 of b for the GPU (rec_cuda_batch_load): off (F, B + 1)
 * offsets into ids, absolute (table f's ids start after tables 0..f-1's), ids (total) as int32,
 * and where w is not NULL every id's weight (1 for unweighted features); nnz (F) the ids per
 * table. Each id is checked against rows[f]: REC_EINVAL names the first feature (in order)
 * holding one outside its table, its batch row and the id. Features in parallel on `pool`
 * (NULL: this thread). */
rec_status rec_cuda_pack(const rec_batch *b, int first, int F, const int64_t *rows, int32_t *off, int32_t *ids, float *w,
                         int64_t *nnz, rec_pool *pool);


/* ---- staged windows (stage.c): a GPU's input without host gathering -----------------------
 * A shuffled window (the loader's blocks, its rows in block order: rec_loader_open_staged)
 * laid out in one buffer of 4-byte words, copied to the GPU as it is:
 *   labels (n) | dense (n, Dn) | per feature: starts (n + 1), only where a row may hold other
 *   than one id, then ids (nnz) int32
 * each part on 64 bytes. A batch is then a list of staged positions (gather.h) that the GPU
 * gathers into what rec_cuda_pack and the model's input copy write. */
typedef struct rec_cuda_stage {
    int64_t n;          /* rows */
    int64_t words;      /* the buffer's size */
    int32_t Dn, F;
    int64_t dense_at;   /* words: labels at 0 */
    int64_t *start_at;  /* (F) -1: one id a row, no starts */
    int64_t *ids_at;    /* (F) */
    int64_t *nnz;       /* (F) */
} rec_cuda_stage;

rec_status rec_cuda_stage_init(rec_cuda_stage *st, int32_t Dn, int32_t F);
void rec_cuda_stage_free(rec_cuda_stage *st);
/* The layout of blocks blk[0..nb) (one[f]: every block holds one id a row in feature f).
 * REC_EINVAL when a window or a feature's ids in it reach 2^31; REC_EUNSUPPORTED for weighted
 * bags (no prep op makes them). */
rec_status rec_cuda_stage_plan(rec_cuda_stage *st, const rec_batch *blk, int nb, const uint8_t *one);
/* Writes the blocks into buf (st->words words), every id checked against its table's rows[f]
 * and narrowed to int32: REC_EINVAL names `what`, the data row (block i's row r is row0[i] + r),
 * the first feature holding one outside and the id. Features in parallel on pool (NULL: here). */
rec_status rec_cuda_stage_fill(const rec_cuda_stage *st, const rec_batch *blk, int nb, const int64_t *row0,
                               const int64_t *rows, const char *what, int32_t *buf, rec_pool *pool);
/* The sources (F) and slot of a staged buffer at base (host or device memory alike). */
void rec_cuda_stage_src(const rec_cuda_stage *st, const int32_t *base, rec_gsrc *src, rec_gslot *slot);
/* The slots (<= REC_CUDA_STAGE_SLOTS) a batch of staged positions pos[0..B) reads, as bits. */
uint64_t rec_cuda_gather_slots(const uint32_t *pos, int B, int64_t slot_rows);
/* The batch's ids per feature, nnz (F), over the S slots' sources src (S x F), as the host needs
 * them before the GPU gathers (the block map, the sort); `touched`: its slots
 * (rec_cuda_gather_slots). A feature with one id a row in every slot the batch reads is not
 * read; the other slots' sources are not read at all (the loader may be staging them). */
void rec_cuda_gather_nnz(const rec_gsrc *src, int S, int F, int64_t slot_rows, const uint32_t *pos, int B, uint64_t touched,
                         int64_t *nnz);
/* The GPU's gather on the CPU: off (F, B + 1) and ids as rec_cuda_pack writes them, dense
 * (B, Dn) then the labels (B), as the model's input copy. */
void rec_cuda_gather_host(const rec_gsrc *src, const rec_gslot *slot, int F, int Dn, int64_t slot_rows, const uint32_t *pos,
                          int B, int32_t *off, int32_t *ids, float *dense);


/* Staging into host memory (the GPU's stager without a GPU: tests, bench loader --gpu-host):
 * slot i's window in buf[i], its sources src[i F ..] and slot[i]; poison: each buffer filled
 * with 0xff bytes before its window, so that a slot staged while a batch held it would show. */
typedef struct rec_cuda_host_stager {
    int S, F, poison;
    int64_t slot_rows;
    rec_cuda_stage *st;   /* (S) */
    int32_t **buf;        /* (S) */
    size_t *cap;          /* (S) words of each */
    rec_gsrc *src;        /* (S x F) */
    rec_gslot *slot;      /* (S) */
    const int64_t *rows;  /* (F) the tables' rows, for the ids' check */
    const char *what;
    rec_pool *pool;
} rec_cuda_host_stager;
rec_status rec_cuda_host_stager_init(rec_cuda_host_stager *h, int S, int64_t slot_rows, int32_t Dn, int32_t F,
                                     const int64_t *rows, const char *what, rec_pool *pool);
void rec_cuda_host_stager_free(rec_cuda_host_stager *h);
/* rec_stager's stage (data.h) with ctx a rec_cuda_host_stager. */
rec_status rec_cuda_host_stage(void *ctx, int slot, const rec_batch *blk, int nb, const uint8_t *one, const int64_t *row0);

#ifdef __cplusplus
}
#endif

#endif
