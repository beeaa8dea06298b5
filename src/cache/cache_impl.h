/* Internal to src/cache/: the Oracle Cacher's split of a plan among N trainers (lrpp.c). */
#ifndef REC_CACHE_IMPL_H
#define REC_CACHE_IMPL_H

#include <stdint.h>

#include "rectrain/cache.h"
#include "rectrain/net.h"

/* LRPP (Bagpipe §3.4, "Logically Replicated, Physically Partitioned"): every trainer's cache
 * has the same slots (the planner's), but a slot's row is held only by the trainers that
 * need it, and its latest value may be on some of them only. The oracle tracks, per slot,
 * the set of trainers whose copy is the latest (`valid`), and for each batch x tells each
 * trainer t:
 *   fetch     the rows x needs that no trainer holds and whose owner is t (row r's owner is
 *             trainer r mod N: all server traffic of a row goes through one trainer, so its
 *             write-back and its next fetch are ordered on one connection);
 *   pre       rows t uses at x and holds no latest copy of: received from a trainer that does
 *             (and the rows t sends): delayed synchronisation, only what x needs, just before x;
 *   shared    the rows used by two trainers or more at x, in one order for all: their
 *             gradients are summed over trainers and every holder of a latest copy applies the
 *             same step (`apply`: t's among them); a row only t uses is stepped by t alone;
 *   post      rows x evicts whose owner holds no latest copy: sent to the owner after x;
 *   evict     the rows t (as owner) writes back after x.
 * With one trainer everything but fetch and evict is empty. */
typedef struct rec_lrpp_part {
    int64_t n_fetch, n_evict, n_pre_send, n_pre_recv, n_apply, n_post_send, n_post_recv;
    rec_centry *fetch, *evict;
    rec_cmove *pre_send, *pre_recv, *post_send, *post_recv;
    int32_t *apply;
    int64_t fetch_cap, evict_cap, pre_send_cap, pre_recv_cap, apply_cap, post_send_cap, post_recv_cap;
} rec_lrpp_part;

typedef struct rec_lrpp rec_lrpp;

rec_status rec__lrpp_init(rec_lrpp **out, int trainers, int64_t capacity);
void rec__lrpp_free(rec_lrpp *l);
/* Splits plan st of batch b (its ids already as st->slots; NULL b for the flush) among the
 * trainers, trainer t taking rows [t B / N, (t + 1) B / N) of b. */
rec_status rec__lrpp_split(rec_lrpp *l, const rec_batch *b, const rec_cstep *st);
const rec_lrpp_part *rec__lrpp_part(const rec_lrpp *l, int t);
/* The shared rows of the last split, in their one order. */
const int32_t *rec__lrpp_shared(const rec_lrpp *l, int64_t *n);

#endif
