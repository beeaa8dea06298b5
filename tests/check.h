/* Minimal test harness: CHECK records a failure and goes on; every test program ends with
 * `return check_report();`, which prints "N passed, N failed" and exits non-zero on failure. */
#ifndef RECTRAIN_TEST_CHECK_H
#define RECTRAIN_TEST_CHECK_H

#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

static int check__passed, check__failed;

#define CHECK(cond, ...)                                                    \
    do {                                                                    \
        if (cond) {                                                         \
            check__passed++;                                                \
        } else {                                                            \
            check__failed++;                                                \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                   \
            fputc('\n', stderr);                                            \
        }                                                                   \
    } while (0)

/* Checks that `s` is the expected status and that the last error message contains `needle`. */
#define CHECK_ERR(s, want, needle)                                                  \
    CHECK((s) == (want) && strstr(rec_errmsg(), (needle)) != NULL,                  \
          "status %d (want %d), message \"%s\" should contain \"%s\"", (int)(s), (int)(want), \
          rec_errmsg(), (needle))

/* Runs shell command `cmd` with its stdout (and whatever else it redirects there) read into
 * `out` (cap bytes, NUL-terminated, the rest dropped); returns its exit status, -1 when it could
 * not be started or did not exit. */
static inline int check_capture(const char *cmd, char *out, size_t cap) {
    out[0] = 0;
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    const size_t n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    const int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static inline int check_report(void) {
    printf("%d passed, %d failed\n", check__passed, check__failed);
    return check__failed ? 1 : 0;
}

#endif
