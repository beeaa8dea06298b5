/* Shared by the offload worker and client: ZeroMQ message helpers and the vocabulary digest. */
#ifndef REC_OFFLOAD_IMPL_H
#define REC_OFFLOAD_IMPL_H

#include <stdint.h>
#include <zmq.h>

#include "rectrain/net.h"
#include "rectrain/prep.h"

/* Largest message a socket accepts (ZMQ_MAXMSGSIZE): a frame and its header. Bigger ones make
 * ZeroMQ drop the connection before anything is read. */
#define REC__ZMQ_MAX_MSG ((int64_t)(REC_NET_HEAD + REC_NET_MAX_BODY))

/* A hash of every vocabulary's ids in index order: a worker's copy of --vocab-from must be
 * the trainer's, or its rows would map ids to other table rows. */
uint64_t rec__vocab_digest(const rec_vocab_set *v);

/* Sends w's frame as one message (after an optional routing identity part). REC_EIO on failure
 * (EAGAIN with ZMQ_DONTWAIT included: the caller decides). */
rec_status rec__zsend(void *sock, const zmq_msg_t *ident, const rec_wbuf *w, int flags);

/* A socket with the options every rectrain socket has: no linger on close, the message bound. */
void *rec__zsocket(void *ctx, int type);

/* Reads bytes [offset, offset + len) of fd (the file `path`) into *buf, grown to len when
 * *cap is smaller. REC_EIO naming the path and byte where the file ends or fails. */
rec_status rec__read_piece(int fd, const char *path, uint64_t offset, uint64_t len, char **buf, size_t *cap);

#endif
