/* rectrain — ingestion: a raw Criteo TSV (.tsv/.gz) through a prep spec into a .rshard, the
 * work behind `rectrain prep`. Streams: memory stays bounded by the chunk size and the
 * threads' batches whatever the file size. A spec with categorify ops takes two passes over
 * the input (count, then map) unless vocabularies are reused from an existing shard. Several
 * input files are one input, read in order (rec_tsv_open_list). */
#ifndef RECTRAIN_INGEST_H
#define RECTRAIN_INGEST_H

#include <signal.h>
#include <stdint.h>

#include "rectrain/io.h"
#include "rectrain/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rec_ingest_opts {
    const char *spec_path;    /* prep spec JSON */
    const char *const *in_paths; /* (n_in) .tsv or .gz files, read in order as one input */
    int n_in;
    const char *out_path;     /* .rshard to create (atomically) */
    const char *vocab_from;   /* NULL, or a .rshard whose vocabularies are reused */
    int threads;              /* >= 1 */
    rec_tsv_opts tsv;         /* has_label -1 detects; bad_rows fail/skip (refused beyond
                                 max_bad_share of the rows); short_rows */
    int64_t group_rows;       /* shard row group size; 0 = default */
    int explain;              /* print the fused plan to stderr */
    int device;               /* rec_prep_device of the preprocessing (not of the counting pass) */
    /* When not NULL: a signal number a handler stores to stop the job. It is read after every
     * chunk of the input; once set, the job fails with REC_ESTOPPED and removes its partial
     * output (PATH.tmp), as on any error. */
    const volatile sig_atomic_t *stop;
} rec_ingest_opts;

typedef struct rec_ingest_report {
    int64_t rows;             /* rows written */
    uint64_t bytes;           /* input bytes (decompressed) per pass; bytes * passes were read */
    double seconds;           /* wall time of the whole job */
    int passes;               /* 1, or 2 with a counting pass */
    rec_bad_report bad;       /* rows skipped with --bad-rows skip */
} rec_ingest_report;

rec_status rec_ingest(const rec_ingest_opts *o, rec_ingest_report *rep);
/* `prep --raw`: the TSV parsed into typed raw columns and stored as a .rraw (rawcols.h), no
 * spec: spec_path, vocab_from, explain and device are not read. One pass; malformed rows as
 * rec_ingest handles them. */
rec_status rec_ingest_raw(const rec_ingest_opts *o, rec_ingest_report *rep);

#ifdef __cplusplus
}
#endif
#endif
