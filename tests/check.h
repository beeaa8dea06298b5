/* Minimal test harness: CHECK records a failure and goes on; every test program ends with
 * `return check_report();`, which prints "N passed, N failed" and exits non-zero on failure. */
#ifndef RECTRAIN_TEST_CHECK_H
#define RECTRAIN_TEST_CHECK_H

#include <stdio.h>
#include <string.h>

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

static inline int check_report(void) {
    printf("%d passed, %d failed\n", check__passed, check__failed);
    return check__failed ? 1 : 0;
}

#endif
