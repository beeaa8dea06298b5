/* Shared by the offload worker and client: the vocabulary digest and reading a piece. */
#ifndef REC_OFFLOAD_IMPL_H
#define REC_OFFLOAD_IMPL_H

#include <stdint.h>

#include "../net/zmq_impl.h"
#include "rectrain/prep.h"

/* A hash of every vocabulary's ids in index order: a worker's copy of --vocab-from must be
 * the trainer's, or its rows would map ids to other table rows. */
uint64_t rec__vocab_digest(const rec_vocab_set *v);

/* Reads bytes [offset, offset + len) of fd (the file `path`) into *buf, grown to len when
 * *cap is smaller. REC_EIO naming the path and byte where the file ends or fails. */
rec_status rec__read_piece(int fd, const char *path, uint64_t offset, uint64_t len, char **buf, size_t *cap);

#endif
