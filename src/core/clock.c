/* Monotonic clock and the measured copy-bandwidth ceiling. */
#define _GNU_SOURCE
#include <sched.h>
#include <string.h>
#include <time.h>

#include "rectrain/core.h"

double rec_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int rec_cpu_count(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
    return 1;
}

/* 256 MiB copied 7 times, median taken: far beyond any last-level cache, so this is DRAM
 * bandwidth as memcpy sees it from one thread. */
double rec_measure_copy_gbps(void) {
    const size_t bytes = (size_t)256 << 20;
    char *a, *b;
    if (rec_alloc((void **)&a, bytes, "copy benchmark")) return 0.0;
    if (rec_alloc((void **)&b, bytes, "copy benchmark")) { rec_free(a); return 0.0; }
    memset(a, 1, bytes);
    memcpy(b, a, bytes); /* fault in both */
    double t[7];
    for (int i = 0; i < 7; i++) {
        double t0 = rec_now();
        memcpy(i % 2 ? a : b, i % 2 ? b : a, bytes);
        t[i] = rec_now() - t0;
    }
    volatile char sink = a[bytes / 2] + b[bytes / 3];
    (void)sink;
    rec_free(a);
    rec_free(b);
    return (double)bytes / rec_median(t, 7) / 1e9;
}
