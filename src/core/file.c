/* Whole-file reads for the small JSON documents rectrain loads (core.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rectrain/core.h"

rec_status rec_read_file(const char *path, const char *what, size_t max_bytes, char **out, size_t *len_out) {
    *out = NULL;
    *len_out = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return rec_errorf(REC_EIO, "%s: cannot open the %s: %s", path, what, strerror(errno));
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            if (cap >= max_bytes) {
                free(buf);
                fclose(f);
                return rec_errorf(REC_EINVAL, "%s: a %s over %zu MiB is not plausible", path, what, max_bytes >> 20);
            }
            const size_t ncap = cap ? 2 * cap : 65536;
            char *nb = realloc(buf, ncap + 1);
            if (!nb) {
                free(buf);
                fclose(f);
                return rec_errorf(REC_ENOMEM, "%s: out of memory reading the %s", path, what);
            }
            buf = nb;
            cap = ncap;
        }
        const size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    const int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return rec_errorf(REC_EIO, "%s: error reading the %s", path, what);
    }
    buf[len] = '\0';
    *out = buf;
    *len_out = len;
    return REC_OK;
}
