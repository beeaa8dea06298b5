/* Aligned, zeroed allocation that reports failure as a status.
 *
 * Blocks of REC_HUGE_BYTES or more (embedding tables, optimizer state, activations) are
 * aligned to 2 MiB and advised as transparent huge pages before they are first touched, so
 * they are backed by 2 MiB pages where the kernel allows it (THP "madvise" mode, Debian's
 * default). Random row gathers over a gigabyte of tables otherwise take a TLB miss and a page
 * walk on nearly every row (a 4 KiB page holds a handful of rows), and a column slice of a
 * (B, W) output written row after row touches a new page per row. Where the kernel refuses,
 * the block is ordinary memory: the advice is a hint, never an error. */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "rectrain/core.h"

enum { REC_HUGE_PAGE = 2 << 20, REC_HUGE_BYTES = 4 << 20 };

rec_status rec_alloc(void **out, size_t bytes, const char *what) {
    const int huge = bytes >= REC_HUGE_BYTES;
    const size_t align = huge ? REC_HUGE_PAGE : 64;
    size_t rounded = (bytes + align - 1) & ~(align - 1);
    void *p = rounded >= bytes ? aligned_alloc(align, rounded ? rounded : 64) : NULL;
    if (!p) {
        *out = NULL;
        return rec_errorf(REC_ENOMEM, "out of memory allocating %zu bytes for %s", bytes, what);
    }
#ifdef MADV_HUGEPAGE
    if (huge) (void)madvise(p, rounded, MADV_HUGEPAGE);
#endif
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
