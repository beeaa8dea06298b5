/* rectrain — status codes and error messages.
 *
 * Every library function that can fail on a recoverable condition (bad file, bad config,
 * I/O error, out of memory) returns a rec_status and leaves a message in a thread-local
 * buffer that names the file, line, field or JSON path and says what to do. Only the CLI
 * turns a status into an exit code. (sqlite result codes + sqlite3_errmsg.)
 */
#ifndef RECTRAIN_STATUS_H
#define RECTRAIN_STATUS_H

#include <stdarg.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rec_status {
    REC_OK = 0,
    REC_EINVAL,      /* invalid argument or configuration (user error) */
    REC_EFORMAT,     /* malformed input file: bad row, corrupt shard, bad JSON */
    REC_EIO,         /* operating-system I/O error */
    REC_ENOMEM,      /* allocation failed */
    REC_EUNSUPPORTED, /* valid request this build or machine cannot serve */
    REC_ESTOPPED     /* the caller asked the work to stop (a signal, through its opts' `stop`) */
} rec_status;

/* How messages name the signal that stopped the work: "SIGINT", "SIGTERM", or "a signal". */
const char *rec_signal_name(int sig);

/* Short constant name of a status ("invalid argument", ...). Never NULL. */
const char *rec_status_str(rec_status s);

/* Records `s` with a printf-style message as this thread's last error and returns `s`,
 * so that failure paths read `return rec_errorf(REC_EINVAL, "...")`. */
rec_status rec_errorf(rec_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
rec_status rec_verrorf(rec_status s, const char *fmt, va_list ap);

/* Prepends "context: " to this thread's last message (e.g. the file being read) and returns
 * `s` unchanged. */
rec_status rec_error_wrap(rec_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Appends the formatted text (with its own separator: "; --tune would ...") to this thread's
 * last message, to say what the caller knows of the failure, and returns `s` unchanged. */
rec_status rec_error_append(rec_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* This thread's last error message; "" when none was recorded. Valid until the next error
 * on this thread. */
const char *rec_errmsg(void);

/* Copies `msg` into this thread's last-error buffer (used to hand a worker's error to the
 * thread that waits for it). */
void rec_error_set_msg(const char *msg);

/* Propagates a failing status: `REC_TRY(f(x));` returns from the enclosing function. */
#define REC_TRY(expr)                  \
    do {                               \
        rec_status rec__s = (expr);    \
        if (rec__s != REC_OK) return rec__s; \
    } while (0)

#ifdef __cplusplus
}
#endif
#endif
