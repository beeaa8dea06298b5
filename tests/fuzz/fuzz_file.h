/* What the fuzz targets of rectrain's binary files share (fuzz_shard.c, fuzz_rawcols.c): the
 * input as a file, an option byte first, and the one shape of a refusal. */
#ifndef RECTRAIN_FUZZ_FILE_H
#define RECTRAIN_FUZZ_FILE_H

#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "rectrain/status.h"

/* Writes the input less its first byte (the options) to a memfd, after `fix` (the checksums
 * the options ask for) changed it, and returns the memfd's path; NULL for an empty input. */
static const char *fuzz_file(const uint8_t *data, size_t size, void (*fix)(uint8_t *p, uint64_t n, int opt)) {
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("fuzz.file", 0);
        if (fd < 0) abort();
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (size < 1) return NULL;
    const uint64_t n = size - 1;
    uint8_t *file = malloc(n + 1);
    if (!file) abort();
    memcpy(file, data + 1, n);
    fix(file, n, data[0]);
    if (ftruncate(fd, 0) || pwrite(fd, file, n, 0) != (ssize_t)n) abort();
    free(file);
    return path;
}

/* A refusal of the file: REC_EFORMAT or REC_ENOMEM, and a message that starts with its path. */
static void fuzz_refused(rec_status st, const char *path) {
    if (st != REC_EFORMAT && st != REC_ENOMEM) abort();
    if (strncmp(rec_errmsg(), path, strlen(path)) != 0) abort();
}

#endif
