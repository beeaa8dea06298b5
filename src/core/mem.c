/* Aligned, zeroed allocation that reports failure as a status. */
#include <stdlib.h>
#include <string.h>

#include "rectrain/core.h"

rec_status rec_alloc(void **out, size_t bytes, const char *what) {
    size_t rounded = (bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    if (!p) {
        *out = NULL;
        return rec_errorf(REC_ENOMEM, "out of memory allocating %zu bytes for %s", bytes, what);
    }
    memset(p, 0, rounded ? rounded : 64);
    *out = p;
    return REC_OK;
}

rec_status rec_realloc(void **p, size_t old_bytes, size_t new_bytes, const char *what) {
    void *q;
    REC_TRY(rec_alloc(&q, new_bytes, what));
    if (*p) memcpy(q, *p, old_bytes < new_bytes ? old_bytes : new_bytes);
    free(*p);
    *p = q;
    return REC_OK;
}

void rec_free(void *p) { free(p); }

double rec_median(double *v, int n) {
    for (int i = 1; i < n; i++) { /* insertion sort: n is a handful of repetitions */
        double x = v[i];
        int j = i - 1;
        while (j >= 0 && v[j] > x) { v[j + 1] = v[j]; j--; }
        v[j + 1] = x;
    }
    if (n <= 0) return 0.0;
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
