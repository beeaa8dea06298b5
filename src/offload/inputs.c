/* What a job's inputs are on a worker: the vocabulary digest and a piece's bytes (offload_impl.h). */
#include <errno.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "offload_impl.h"
#include "rectrain/core.h"

uint64_t rec__vocab_digest(const rec_vocab_set *v) {
    uint64_t h = REC_FNV_SEED;
    for (int32_t k = 0; v && k < v->n; k++) {
        const int64_t n = rec_vocab_size(v->v[k]);
        const int64_t *ids = rec_vocab_ids(v->v[k]);
        h = (h ^ (uint64_t)n) * 0x100000001b3ull;
        for (int64_t i = 0; i < n; i++) h = (h ^ (uint64_t)ids[i]) * 0x100000001b3ull;
    }
    return h;
}

rec_status rec__read_piece(int fd, const char *path, uint64_t offset, uint64_t len, char **buf, size_t *cap) {
    if (len > *cap) {
        char *t = realloc(*buf, len);
        if (!t) return rec_errorf(REC_ENOMEM, "out of memory for a piece of %llu bytes", (unsigned long long)len);
        *buf = t;
        *cap = len;
    }
    for (uint64_t done = 0; done < len;) {
        const ssize_t got = pread(fd, *buf + done, len - done, (off_t)(offset + done));
        if (got <= 0)
            return rec_errorf(REC_EIO, "%s: read error at byte %llu: %s (did the file change?)", path,
                              (unsigned long long)(offset + done), got < 0 ? strerror(errno) : "end of file");
        done += (uint64_t)got;
    }
    return REC_OK;
}
