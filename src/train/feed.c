/* The model inputs of a data set as one binary file (export.h rec_feed_write), in the layout of
 * the ONNX graph's inputs (onnx.c), so that a server or a test scores exactly the rows
 * `rectrain predict` scores, batch by batch, without its own reader of .rshard or TSV.
 *
 *   "RECFEED1" | int64 Dn | int64 F | per batch: int64 B (>= 1)
 *                                              | float32 dense (B, Dn)
 *                                              | per feature: int64 nnz | int64 offsets (B + 1)
 *                                                             | int64 ids (nnz)
 *              | int64 0 (the end)
 *
 * All little-endian. Rows come in input order, through the same loader predict reads with. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "rectrain/core.h"
#include "rectrain/export.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the feed file is the host's image of its arrays and needs a little-endian host"
#endif

/* One batch's record (its header and arrays) to f; 0 on a write error. */
static int put_batch(FILE *f, const rec_batch *b, int F) {
    const int64_t B = b->n;
    int ok = fwrite(&B, sizeof B, 1, f) == 1 &&
             fwrite(b->dense, sizeof(float), (size_t)(B * b->n_dense), f) == (size_t)(B * b->n_dense);
    for (int k = 0; ok && k < F; k++) {
        const rec_jagged *j = &b->sparse[k];
        const int64_t nnz = j->offsets[B];
        ok = fwrite(&nnz, sizeof nnz, 1, f) == 1 && fwrite(j->offsets, sizeof(int64_t), (size_t)B + 1, f) == (size_t)B + 1;
        if (ok && j->wide) ok = fwrite(j->ids64, sizeof(int64_t), (size_t)nnz, f) == (size_t)nnz;
        int64_t wide[1024]; /* int32 ids widened a chunk at a time */
        for (int64_t q = 0; ok && !j->wide && q < nnz; q += 1024) {
            const size_t k = (size_t)(nnz - q < 1024 ? nnz - q : 1024);
            for (size_t i = 0; i < k; i++) wide[i] = j->ids32[q + (int64_t)i];
            ok = fwrite(wide, sizeof *wide, k, f) == k;
        }
    }
    return ok;
}

rec_status rec_feed_write(rec_dataset *d, int64_t batch, const char *path) {
    int64_t n;
    REC_TRY(rec_dataset_rows(d, &n));
    const int64_t Dn = rec_dataset_n_dense(d), F = rec_dataset_n_sparse(d);
    rec_atomic_file a;
    FILE *f;
    REC_TRY(rec_atomic_fopen(&a, path, &f));
    rec_loader *l = NULL;
    rec_status s = rec_loader_open(&l, d, 0, n, batch, 3);
    int ok = fwrite("RECFEED1", 1, 8, f) == 8 && fwrite(&Dn, sizeof Dn, 1, f) == 1 && fwrite(&F, sizeof F, 1, f) == 1;
    const rec_batch *b;
    while (!s && ok && !(s = rec_loader_next(l, &b)) && b) ok = put_batch(f, b, (int)F);
    const int64_t end = 0;
    if (ok) fwrite(&end, sizeof end, 1, f); /* a failed write is seen by the close */
    rec_loader_close(l);
    return rec_atomic_fclose(&a, f, "model inputs", s);
}
