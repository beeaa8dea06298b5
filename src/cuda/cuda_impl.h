/* Internal to the GPU engine: what the host computes for each batch, shared by the CUDA side
 * (embed.cu) and the C side (sched.c, tested without a GPU). */
#ifndef RECTRAIN_CUDA_IMPL_H
#define RECTRAIN_CUDA_IMPL_H

#include <stdint.h>

#include "rectrain/batch.h"
#include "rectrain/core.h"
#include "rectrain/status.h"

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

#ifdef __cplusplus
}
#endif

#endif
