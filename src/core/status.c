/* Status codes and the thread-local last-error message. */
#include "rectrain/status.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

enum { REC_ERRMSG_CAP = 2048 };
static _Thread_local char rec__errmsg[REC_ERRMSG_CAP];

const char *rec_signal_name(int sig) { return sig == SIGINT ? "SIGINT" : sig == SIGTERM ? "SIGTERM" : "a signal"; }

const char *rec_status_str(rec_status s) {
    switch (s) {
    case REC_OK: return "ok";
    case REC_EINVAL: return "invalid argument";
    case REC_EFORMAT: return "malformed input";
    case REC_EIO: return "I/O error";
    case REC_ENOMEM: return "out of memory";
    case REC_EUNSUPPORTED: return "unsupported";
    case REC_ESTOPPED: return "stopped";
    }
    return "unknown status";
}

rec_status rec_verrorf(rec_status s, const char *fmt, va_list ap) {
    vsnprintf(rec__errmsg, sizeof rec__errmsg, fmt, ap);
    return s;
}

rec_status rec_errorf(rec_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    rec_verrorf(s, fmt, ap);
    va_end(ap);
    return s;
}

rec_status rec_error_wrap(rec_status s, const char *fmt, ...) {
    char prefix[512], old[REC_ERRMSG_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, rec__errmsg, sizeof old);
    /* Truncation of an over-long message is acceptable; the prefix comes first. */
    size_t n = strlen(prefix);
    if (n + 2 >= sizeof rec__errmsg) n = sizeof rec__errmsg - 3;
    memcpy(rec__errmsg, prefix, n);
    memcpy(rec__errmsg + n, ": ", 2);
    size_t room = sizeof rec__errmsg - n - 3, m = strlen(old);
    if (m > room) m = room;
    memcpy(rec__errmsg + n + 2, old, m);
    rec__errmsg[n + 2 + m] = 0;
    return s;
}

rec_status rec_error_append(rec_status s, const char *fmt, ...) {
    const size_t n = strlen(rec__errmsg); /* truncation of an over-long message is acceptable */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rec__errmsg + n, sizeof rec__errmsg - n, fmt, ap);
    va_end(ap);
    return s;
}

const char *rec_errmsg(void) { return rec__errmsg; }

void rec_error_set_msg(const char *msg) {
    snprintf(rec__errmsg, sizeof rec__errmsg, "%s", msg ? msg : "");
}
