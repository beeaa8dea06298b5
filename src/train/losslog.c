/* The "STEP LOSS" log of --loss-log (train.h rec_loss_log_open), shared by `rectrain train`
 * and the cache trainer: started afresh, or a resumed run's continued at its checkpoint. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rectrain/core.h"
#include "rectrain/train.h"

/* Whether `line` is "STEP LOSS" (with or without its '\n'); its step in *step. */
static int parse_line(const char *line, long long *step) {
    char *end, *e2;
    *step = strtoll(line, &end, 10);
    if (end == line || *end != ' ') return 0;
    strtod(end + 1, &e2);
    return e2 != end + 1 && (*e2 == '\n' || *e2 == 0);
}

static rec_status not_this_log(const char *path, long long lineno, const char *what) {
    return rec_errorf(REC_EFORMAT, "%s:%lld: %s: not the loss log of the run --resume continues; give --loss-log "
                      "another path, or remove the file", path, lineno, what);
}

/* Reads the log of a resumed run: the bytes of its lines up to step `resumed` in *keep, and
 * whether the last of them lacks its '\n' (a write cut short). Its steps must follow one
 * another and reach `resumed`: a log that starts after it, jumps, or ends before it is another
 * run's (or another checkpoint's), and would leave a log of steps this run did not take. */
static rec_status scan(FILE *f, const char *path, int64_t resumed, long *keep, int *open_end) {
    char *line = NULL, what[160];
    size_t cap = 0;
    ssize_t len;
    long long step = 0, prev = 0, lineno = 0;
    rec_status s = REC_OK;
    *keep = 0, *open_end = 0;
    while (!s && (len = getline(&line, &cap, f)) > 0) {
        lineno++;
        if (!parse_line(line, &step)) {
            s = not_this_log(path, lineno, "not a \"STEP LOSS\" line");
        } else if (lineno == 1 && step > resumed + 1) {
            snprintf(what, sizeof what, "it starts at step %lld, after the checkpoint's step %lld", step, (long long)resumed);
            s = not_this_log(path, lineno, what);
        } else if (lineno > 1 && step != prev + 1) {
            snprintf(what, sizeof what, "step %lld after step %lld", step, prev);
            s = not_this_log(path, lineno, what);
        } else if (step <= resumed) {
            prev = step;
            *keep += (long)len;
            *open_end = line[len - 1] != '\n';
        } else {
            break;
        }
    }
    free(line);
    if (!s && lineno > 0 && prev < resumed && step <= resumed) {
        snprintf(what, sizeof what, "it ends at step %lld, and the checkpoint is at step %lld", prev, (long long)resumed);
        s = not_this_log(path, lineno, what);
    }
    return s;
}

rec_status rec_loss_log_open(const char *path, int resume, int64_t resumed, FILE **out) {
    *out = NULL;
    FILE *f = resume ? fopen(path, "r+") : NULL;
    if (!f) f = fopen(path, "w");
    if (!f) return rec_errorf(REC_EIO, "%s: cannot open the loss log: %s", path, strerror(errno));
    long keep = 0;
    int open_end = 0;
    rec_status s = resume ? scan(f, path, resumed, &keep, &open_end) : REC_OK;
    if (!s && resume && (ftruncate(fileno(f), keep) != 0 || fseek(f, 0, SEEK_END) != 0 ||
                         (open_end && fputc('\n', f) == EOF)))
        s = rec_errorf(REC_EIO, "%s: cannot cut the loss log at step %lld: %s", path, (long long)resumed, strerror(errno));
    if (s) {
        fclose(f);
        return s;
    }
    setvbuf(f, NULL, _IOLBF, 0); /* a line per step, as it happens (tail -f; a stopped run) */
    *out = f;
    return REC_OK;
}
