/* rectrain inspect: describes a .rshard (schema, rows, groups, per-feature cardinality, pooling
 * factors and access skew; optionally every checksum), a checkpoint (model, training position
 * and data, tensors, config; optionally every checksum) or a raw Criteo .tsv/.gz (rows, label
 * rate, missing values, integer ranges, categorical cardinality, pooling and skew). The kind
 * is detected from the file's first bytes, not its name. Statistics come from
 * include/rectrain/stats.h so that tests can check them. */
#include <errno.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "rectrain/ckpt.h"
#include "rectrain/core.h"
#include "rectrain/rawcols.h"
#include "rectrain/io.h"
#include "rectrain/shard.h"
#include "rectrain/stats.h"
#include "rectrain/train.h"

static const char USAGE[] =
    "usage: rectrain inspect FILE [--verify] [--rows N] [--json]\n"
    "\n"
    "Describes a .rshard, a .rraw or a checkpoint (each detected by its magic bytes), or a\n"
    "Criteo .tsv/.gz file.\n"
    "\n"
    ".rshard: schema (spec, dense width, sparse features with table sizes, vocabularies), rows,\n"
    "row groups, label rate, and per sparse feature the distinct ids, ids in total (nnz), the\n"
    "pooling factor distribution (bag sizes: min/mean/p50/p99/max) and the access skew: the\n"
    "share of all accesses taken by the top 0.1% of the table's rows (at least 1 id).\n"
    ".tsv/.gz: rows, label rate, per column the missing rate; integers: min, max, negatives;\n"
    "categoricals: distinct ids, pooling distribution (multi-hot lists), top-0.1% skew of the\n"
    "distinct ids. Malformed rows are counted and skipped.\n"
    ".rraw (prep --raw): the same as of the TSV it was parsed from; --verify checks every group.\n"
    "checkpoint (model.rckpt of train --ckpt): the model, the training position (step, epoch,\n"
    "row), the training data it records (rows and digest, which --resume checks), every tensor\n"
    "with its role, shape and size, and the stored config as JSON.\n"
    "\n"
    "  --verify    check every checksum of a .rshard (header, footer and all row groups) or\n"
    "              of a checkpoint (header and every tensor)\n"
    "  --rows N    compute the statistics over the first N rows only\n"
    "  --json      print one JSON object as the last line of stdout\n";

static const char *CMD = "inspect";

/* Prints s as a JSON string literal. */
static void json_str(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20) printf("\\u%04x", c);
        else putchar(c);
    }
    putchar('"');
}

static void json_pool(const rec_len_summary *p) {
    printf("{\"min\": %lld, \"mean\": %s, \"p50\": %lld, \"p99\": %lld, \"max\": %lld}", (long long)p->min,
           cli_jnum("%.4f", p->mean), (long long)p->p50, (long long)p->p99, (long long)p->max);
}

static void print_pool(const rec_len_summary *p) {
    char buf[80];
    snprintf(buf, sizeof buf, "%lld/%.2f/%lld/%lld/%lld", (long long)p->min, p->mean, (long long)p->p50,
             (long long)p->p99, (long long)p->max);
    printf("  %-26s", buf);
}

/* Per sparse feature (or categorical column) statistics. */
typedef struct feat_stats {
    rec_id_counter *ids;
    rec_len_hist len;
    int64_t missing;        /* TSV only */
    int64_t top_k;
    double top_share;
    rec_len_summary pool;
} feat_stats;

static rec_status feat_finish(feat_stats *fs, int64_t universe) {
    fs->top_k = rec_skew_top_k(universe);
    fs->pool = rec_len_hist_summary(&fs->len);
    return rec_id_counter_top_share(fs->ids, fs->top_k, &fs->top_share);
}

static void feat_free(feat_stats *fs, int n) {
    if (!fs) return;
    for (int i = 0; i < n; i++) {
        rec_id_counter_free(fs[i].ids);
        rec_len_hist_free(&fs[i].len);
    }
    free(fs);
}

/* ---- .rshard ------------------------------------------------------------------------------- */

/* Counts the first n ids of j, widened in chunks where the batch holds them as int32. */
static rec_status count_ids(rec_id_counter *c, const rec_jagged *j, int64_t n) {
    if (j->wide) return rec_id_counter_add(c, j->ids64, n);
    enum { CHUNK = 1024 };
    int64_t wide[CHUNK];
    for (int64_t k = 0; k < n; k += CHUNK) {
        const int64_t m = n - k < CHUNK ? n - k : CHUNK;
        rec_jagged_copy_ids64(j, k, m, wide);
        REC_TRY(rec_id_counter_add(c, wide, m));
    }
    return REC_OK;
}

static int inspect_shard(const char *path, int verify, int64_t max_rows, int json) {
    rec_shard *sh;
    rec_status s = rec_shard_open(&sh, path);
    if (s) return cli_fail(CMD, s);
    const rec_shard_schema *sc = rec_shard_get_schema(sh);
    const rec_vocab_set *vs = rec_shard_vocabs(sh);
    int32_t F = sc->n_sparse;
    int64_t N = rec_shard_rows(sh), scan = max_rows >= 0 && max_rows < N ? max_rows : N;
    if (verify) s = rec_shard_verify(sh);
    feat_stats *fs = calloc((size_t)F + 1, sizeof *fs);
    if (!s && !fs) s = rec_errorf(REC_ENOMEM, "out of memory");
    for (int32_t f = 0; !s && f < F; f++) s = rec_id_counter_init(&fs[f].ids, sc->sparse[f].table_rows);
    rec_batch b = {0};
    const int64_t B = 65536;
    if (!s) s = rec_batch_init(&b, B, sc->n_dense, F, 1);
    double label_sum = 0;
    int64_t nonfinite = 0, bad_row = -1; /* dense values training refuses, and the first row holding one */
    int32_t bad_col = -1;
    rec_progress pr;
    rec_progress_init(&pr, "inspect", "rows", (double)scan);
    for (int64_t r0 = 0; !s && r0 < scan; r0 += B) {
        int64_t n = scan - r0 < B ? scan - r0 : B;
        s = rec_shard_read(sh, r0, n, &b);
        for (int64_t r = 0; !s && r < n; r++) label_sum += b.label[r];
        for (int64_t i = 0; !s && i < n * sc->n_dense; i++) {
            if (isfinite(b.dense[i])) continue;
            if (!nonfinite++) bad_row = r0 + i / sc->n_dense, bad_col = (int32_t)(i % sc->n_dense);
        }
        for (int32_t f = 0; !s && f < F; f++) {
            s = count_ids(fs[f].ids, &b.sparse[f], rec_batch_nnz(&b, f));
            if (!s) s = rec_len_hist_add_offsets(&fs[f].len, b.sparse[f].offsets, n);
        }
        rec_progress_update(&pr, (double)(r0 + n), NULL);
    }
    rec_progress_finish(&pr);
    for (int32_t f = 0; !s && f < F; f++) s = feat_finish(&fs[f], sc->sparse[f].table_rows);
    rec_batch_free(&b);
    if (s) {
        feat_free(fs, F);
        rec_shard_close(sh);
        return cli_fail(CMD, s);
    }

    struct stat st;
    long long bytes = stat(path, &st) == 0 ? (long long)st.st_size : -1;
    printf("file       %s (.rshard version %d, %lld bytes)\n", path, REC_SHARD_VERSION, bytes);
    printf("spec       %s\n", sc->spec_name);
    printf("rows       %lld in %lld row groups\n", (long long)N, (long long)rec_shard_groups(sh));
    if (scan < N) printf("scanned    first %lld rows (--rows)\n", (long long)scan);
    if (sc->has_label) printf("label      rate %s\n", cli_num("%.6f", scan ? label_sum / (double)scan : NAN, "-"));
    else printf("label      none (test format)\n");
    printf("dense      %d values per row", sc->n_dense);
    if (nonfinite)
        printf(", %lld not finite (the first: row %lld, value %d); training refuses them: prepare the data "
               "again with a spec that keeps them finite (clamp at 0 before log1p)",
               (long long)nonfinite, (long long)bad_row, bad_col);
    printf("\n");
    printf("vocabs     %d", vs->n);
    for (int32_t i = 0; i < vs->n; i++) printf("%s%lld", i ? ", " : " (sizes ", (long long)rec_vocab_size(vs->v[i]));
    printf("%s\n", vs->n ? ")" : "");
    printf("checksums  %s\n", verify ? "all verified" : "header and footer verified (--verify checks every group)");
    printf("sparse     %d features\n", F);
    if (F) {
        printf("\n  %-20s %12s %12s %12s  %-26s %10s\n", "feature", "table rows", "distinct", "nnz",
               "pooling min/mean/p50/p99/max", "top-0.1%");
        for (int32_t f = 0; f < F; f++) {
            printf("  %-20s %12lld %12lld %12lld", sc->sparse[f].name, (long long)sc->sparse[f].table_rows,
                   (long long)rec_id_counter_distinct(fs[f].ids), (long long)rec_id_counter_total(fs[f].ids));
            print_pool(&fs[f].pool);
            printf(" %9.2f%%\n", 100 * fs[f].top_share);
        }
    }
    if (json) {
        printf("{\"file\": ");
        json_str(path);
        printf(", \"format\": \"rshard\", \"version\": %d, \"bytes\": %lld, \"spec\": ", REC_SHARD_VERSION, bytes);
        json_str(sc->spec_name);
        printf(", \"rows\": %lld, \"rows_scanned\": %lld, \"groups\": %lld, \"has_label\": %s, \"label_rate\": ",
               (long long)N, (long long)scan, (long long)rec_shard_groups(sh), sc->has_label ? "true" : "false");
        printf("%s", sc->has_label ? cli_jnum("%.6f", scan ? label_sum / (double)scan : NAN) : "null");
        printf(", \"n_dense\": %d, \"dense_nonfinite\": %lld, \"verified\": %s, \"vocab_sizes\": [", sc->n_dense,
               (long long)nonfinite, verify ? "true" : "false");
        for (int32_t i = 0; i < vs->n; i++) printf("%s%lld", i ? ", " : "", (long long)rec_vocab_size(vs->v[i]));
        printf("], \"features\": [");
        for (int32_t f = 0; f < F; f++) {
            printf("%s{\"name\": ", f ? ", " : "");
            json_str(sc->sparse[f].name);
            printf(", \"table_rows\": %lld, \"distinct\": %lld, \"nnz\": %lld, \"pooling\": ",
                   (long long)sc->sparse[f].table_rows, (long long)rec_id_counter_distinct(fs[f].ids),
                   (long long)rec_id_counter_total(fs[f].ids));
            json_pool(&fs[f].pool);
            printf(", \"top_k\": %lld, \"top_share\": %s}", (long long)fs[f].top_k, cli_jnum("%.6f", fs[f].top_share));
        }
        printf("]}\n");
    }
    feat_free(fs, F);
    rec_shard_close(sh);
    return CLI_OK;
}

/* ---- checkpoints (.rckpt) ------------------------------------------------------------------ */

static int inspect_ckpt(const char *path, int verify, int json) {
    rec_ckpt_info ci;
    rec_status s = rec_ckpt_inspect(path, verify, &ci);
    if (s) return cli_fail(CMD, s);
    const rec_model_config *c = &ci.config;
    const rec_ckpt_meta *m = &ci.meta;
    int64_t table_rows = 0;
    for (int f = 0; f < c->n_sparse; f++) table_rows += c->table_rows[f];
    uint64_t numel[2] = {0, 0}, bytes[2] = {0, 0}; /* parameters, optimizer state */
    for (int i = 0; i < ci.n_tensors; i++) {
        const int k = ci.tensors[i].role == REC_TENSOR_OPT_STATE;
        numel[k] += ci.tensors[i].bytes / 4;
        bytes[k] += ci.tensors[i].bytes;
    }
    char *pretty = rec_model_config_to_json(c), *cfg = NULL; /* one line: the JSON summary is one line */
    cJSON *root = pretty ? cJSON_Parse(pretty) : NULL;
    if (root) cfg = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    free(pretty);
    if (!cfg) {
        rec_ckpt_info_free(&ci);
        return cli_fail(CMD, rec_errorf(REC_ENOMEM, "out of memory"));
    }
    const int done = m->epoch >= c->epochs;
    printf("file       %s (.rckpt version %u, %llu bytes)\n", path, ci.version, (unsigned long long)ci.file_bytes);
    printf("checksums  %s\n", verify ? "all verified" : "header verified (--verify checks every tensor)");
    printf("model      %s (%s), embedding dim %d, %d tables of %lld rows in all, %d dense inputs\n", c->name,
           rec_model_kind_name(c->kind), c->emb_dim, c->n_sparse, (long long)table_rows, c->n_dense);
    if (done)
        printf("position   step %lld, %s%d epoch%s done, %lld row%s seen\n", (long long)m->step, c->epochs > 1 ? "all " : "",
               c->epochs, rec_s(c->epochs), (long long)m->rows_seen, rec_s(m->rows_seen));
    else
        printf("position   step %lld, epoch %lld of %d at row %lld, %lld rows seen\n", (long long)m->step,
               (long long)m->epoch + 1, c->epochs, (long long)m->row, (long long)m->rows_seen);
    if (m->train_rows)
        printf("data       %lld training rows, digest %016llx of the first %lld (--resume checks both)\n",
               (long long)m->train_rows, (unsigned long long)m->data_digest,
               (long long)(m->train_rows < REC_CKPT_DIGEST_ROWS ? m->train_rows : REC_CKPT_DIGEST_ROWS));
    else if (ci.version == 1)
        printf("data       not recorded (a version-1 file); --resume cannot check it\n");
    else /* a whole model saved by `train --oracle-cacher` (rectrain cluster): its oracle read the data */
        printf("data       not recorded (saved by a trainer of disaggregated training, which is given batches by its "
               "oracle, not the data)\n");
    if (m->shuffle_block_rows)
        printf("order      shuffled: blocks of %lld rows, %lld per buffer (--resume keeps it)\n",
               (long long)m->shuffle_block_rows, (long long)m->shuffle_buffer_blocks);
    else
        printf("order      file order (--resume keeps it)\n");
    if (m->shards && m->shard)
        printf("sharded    rank %lld's rows of save %016llx by %lld ranks (resume from model.rckpt beside it)\n",
               (long long)m->shard - 1, (unsigned long long)m->shard_id, (long long)m->shards);
    else if (m->shards)
        printf("sharded    the dense part of save %016llx by %lld ranks; the tables are in model.%016llx.*-of-%lld.rckpt "
               "beside it (resume under mpirun)\n", (unsigned long long)m->shard_id, (long long)m->shards,
               (unsigned long long)m->shard_id, (long long)m->shards);
    printf("tensors    %d: %llu parameters (%.1f MB), %llu optimizer-state values (%.1f MB)\n", ci.n_tensors,
           (unsigned long long)numel[0], (double)bytes[0] / 1e6, (unsigned long long)numel[1], (double)bytes[1] / 1e6);
    printf("\n  %-32s %-16s %-20s %12s\n", "tensor", "role", "shape", "MB");
    for (int i = 0; i < ci.n_tensors; i++) {
        const rec_ckpt_tensor_info *t = &ci.tensors[i];
        char shape[64];
        if (t->ndim == 1) snprintf(shape, sizeof shape, "(%lld)", (long long)t->shape[0]);
        else snprintf(shape, sizeof shape, "(%lld, %lld)", (long long)t->shape[0], (long long)t->shape[1]);
        printf("  %-32s %-16s %-20s %12.3f\n", t->name, t->role == REC_TENSOR_OPT_STATE ? "optimizer state" : "parameter",
               shape, (double)t->bytes / 1e6);
    }
    printf("\nconfig     %s\n", cfg);
    if (json) {
        printf("{\"file\": ");
        json_str(path);
        printf(", \"format\": \"rckpt\", \"version\": %u, \"bytes\": %llu, \"verified\": %s, \"model\": ", ci.version,
               (unsigned long long)ci.file_bytes, verify ? "true" : "false");
        json_str(c->name);
        printf(", \"model_kind\": \"%s\", \"step\": %lld, \"epoch\": %lld, \"row\": %lld, \"rows_seen\": %lld, ",
               rec_model_kind_name(c->kind), (long long)m->step, (long long)m->epoch, (long long)m->row,
               (long long)m->rows_seen);
        if (m->train_rows)
            printf("\"train_rows\": %lld, \"data_digest\": \"%016llx\"", (long long)m->train_rows,
                   (unsigned long long)m->data_digest);
        else
            printf("\"train_rows\": null, \"data_digest\": null");
        printf(", \"shuffle_block_rows\": %lld, \"shuffle_buffer_blocks\": %lld", (long long)m->shuffle_block_rows,
               (long long)m->shuffle_buffer_blocks);
        printf(", \"shards\": %lld, \"shard\": %lld", (long long)m->shards, (long long)(m->shard ? m->shard - 1 : -1));
        printf(", \"params\": %llu, \"param_bytes\": %llu, \"state_values\": %llu, \"state_bytes\": %llu, \"tensors\": [",
               (unsigned long long)numel[0], (unsigned long long)bytes[0], (unsigned long long)numel[1],
               (unsigned long long)bytes[1]);
        for (int i = 0; i < ci.n_tensors; i++) {
            const rec_ckpt_tensor_info *t = &ci.tensors[i];
            printf("%s{\"name\": ", i ? ", " : "");
            json_str(t->name);
            printf(", \"role\": \"%s\", \"shape\": [%lld", t->role == REC_TENSOR_OPT_STATE ? "optimizer_state" : "parameter",
                   (long long)t->shape[0]);
            if (t->ndim == 2) printf(", %lld", (long long)t->shape[1]);
            printf("], \"bytes\": %llu}", (unsigned long long)t->bytes);
        }
        printf("], \"config\": %s}\n", cfg);
    }
    cJSON_free(cfg);
    rec_ckpt_info_free(&ci);
    return CLI_OK;
}

/* ---- .tsv / .gz ---------------------------------------------------------------------------- */

typedef struct int_stats {
    int64_t missing, negatives;
    int64_t min, max;
    int64_t seen;
} int_stats;

typedef struct tsv_stats {
    int64_t rows;
    double label_sum;
    int_stats ints[REC_CRITEO_NINT];
    feat_stats cat[REC_CRITEO_NCAT];
} tsv_stats;

/* Adds rows [0, n) of a parsed block to the statistics. */
static rec_status tsv_add(tsv_stats *t, const rec_raw_block *raw, int64_t n, int has_label) {
    if (has_label)
        for (int64_t r = 0; r < n; r++) t->label_sum += raw->label[r];
    for (int c = 0; c < REC_CRITEO_NINT; c++) {
        int_stats *is = &t->ints[c];
        const int64_t *v = raw->ints + (int64_t)c * raw->cap;
        const uint8_t *nul = raw->int_null + (int64_t)c * raw->cap;
        for (int64_t r = 0; r < n; r++) {
            if (nul[r]) {
                is->missing++;
                continue;
            }
            if (!is->seen || v[r] < is->min) is->min = v[r];
            if (!is->seen || v[r] > is->max) is->max = v[r];
            is->seen = 1;
            is->negatives += v[r] < 0;
        }
    }
    for (int c = 0; c < REC_CRITEO_NCAT; c++) {
        feat_stats *fs = &t->cat[c];
        const rec_raw_list *l = &raw->cat[c];
        int64_t r = 0;
        while (r < n) { /* runs of present rows with equal list lengths cost one histogram add */
            if (l->null[r]) {
                fs->missing++;
                r++;
                continue;
            }
            int64_t len = l->off[r + 1] - l->off[r], e = r + 1;
            while (e < n && !l->null[e] && l->off[e + 1] - l->off[e] == len) e++;
            REC_TRY(rec_len_hist_add(&fs->len, len, e - r));
            REC_TRY(rec_id_counter_add(fs->ids, l->val + l->off[r], l->off[e] - l->off[r]));
            r = e;
        }
    }
    t->rows += n;
    return REC_OK;
}

static rec_status tsv_scan(const char *path, int64_t max_rows, tsv_stats *t, int *has_label,
                           rec_bad_report *bad) {
    rec_tsv_opts o = {0};
    o.has_label = -1;
    o.bad_rows = REC_BAD_ROWS_SKIP;
    rec_tsv *r;
    REC_TRY(rec_tsv_open(&r, path, &o, 0));
    const rec_tsv_opts *opts = rec_tsv_options(r);
    *has_label = opts->has_label;
    rec_raw_block raw;
    int64_t cap = 0;
    rec_status s = REC_OK;
    rec_progress pr;
    rec_progress_init(&pr, "inspect", "rows", max_rows >= 0 ? (double)max_rows : 0);
    while (!s && (max_rows < 0 || t->rows < max_rows)) {
        rec_text_chunk ch;
        s = rec_tsv_next(r, &ch);
        if (s || ch.len == 0) break;
        if (ch.n_lines > cap) {
            if (cap) rec_raw_block_free(&raw);
            cap = ch.n_lines;
            s = rec_raw_block_init(&raw, cap);
            if (s) {
                cap = 0;
                break;
            }
        }
        raw.n = 0;
        s = rec_tsv_parse(opts, path, ch.text, ch.len, ch.first_line, &raw, bad);
        int64_t n = raw.n;
        if (max_rows >= 0 && n > max_rows - t->rows) n = max_rows - t->rows;
        if (!s) s = tsv_add(t, &raw, n, opts->has_label);
        rec_progress_update(&pr, (double)t->rows, NULL);
    }
    rec_progress_finish(&pr);
    if (cap) rec_raw_block_free(&raw);
    rec_tsv_close(r);
    for (int c = 0; !s && c < REC_CRITEO_NCAT; c++)
        s = feat_finish(&t->cat[c], rec_id_counter_distinct(t->cat[c].ids));
    return s;
}

/* The same statistics over a .rraw's rows (rows parsed already); verify: every group's
 * checksum and lists first. */
static rec_status raw_scan(const char *path, int64_t max_rows, int verify, tsv_stats *t, int *has_label) {
    rec_rawcols *r;
    REC_TRY(rec_rawcols_open(&r, path));
    *has_label = rec_rawcols_has_label(r);
    const int64_t N = rec_rawcols_rows(r), scan = max_rows >= 0 && max_rows < N ? max_rows : N, B = 65536;
    rec_raw_block raw = {0}; /* freed whole even when --verify refuses the file */
    rec_status s = verify ? rec_rawcols_verify(r) : REC_OK;
    if (!s) s = rec_raw_block_init(&raw, B);
    rec_progress pr;
    rec_progress_init(&pr, "inspect", "rows", (double)scan);
    for (int64_t r0 = 0; !s && r0 < scan; r0 += B) {
        const int64_t n = scan - r0 < B ? scan - r0 : B;
        s = rec_rawcols_read(r, r0, n, &raw);
        if (!s) s = tsv_add(t, &raw, n, *has_label);
        rec_progress_update(&pr, (double)t->rows, NULL);
    }
    rec_progress_finish(&pr);
    rec_raw_block_free(&raw);
    rec_rawcols_close(r);
    for (int c = 0; !s && c < REC_CRITEO_NCAT; c++)
        s = feat_finish(&t->cat[c], rec_id_counter_distinct(t->cat[c].ids));
    return s;
}

/* A Criteo TSV, or a .rraw of its rows parsed (raw), with --verify for the latter. */
static int inspect_tsv(const char *path, int64_t max_rows, int json, int raw, int verify) {
    tsv_stats *t = calloc(1, sizeof *t);
    rec_bad_report bad = {0};
    if (!t) return cli_fail(CMD, rec_errorf(REC_ENOMEM, "out of memory"));
    rec_status s = REC_OK;
    int has_label = 0;
    for (int c = 0; !s && c < REC_CRITEO_NCAT; c++) s = rec_id_counter_init(&t->cat[c].ids, 0);
    if (!s) s = raw ? raw_scan(path, max_rows, verify, t, &has_label) : tsv_scan(path, max_rows, t, &has_label, &bad);
    if (s) {
        for (int c = 0; c < REC_CRITEO_NCAT; c++) {
            rec_id_counter_free(t->cat[c].ids);
            rec_len_hist_free(&t->cat[c].len);
        }
        free(t);
        return cli_fail(CMD, s);
    }
    const double rows = t->rows ? (double)t->rows : NAN; /* every rate of no rows is undefined */
    printf("file       %s (%s, %s)\n", path, raw ? ".rraw, Criteo rows parsed" : "Criteo TSV",
           has_label ? "train format with label" : "test format, no label");
    if (raw && verify) printf("verified   every group's checksum and lists\n");
    printf("rows       %lld%s\n", (long long)t->rows, max_rows >= 0 && t->rows == max_rows ? " (limited by --rows)" : "");
    if (bad.count) {
        printf("malformed  %lld rows skipped; first:\n", (long long)bad.count);
        for (int k = 0; k < bad.n_kept; k++) printf("  %s\n", bad.why[k]);
    }
    if (has_label) printf("label      rate %s\n", cli_num("%.6f", t->label_sum / rows, "-"));
    printf("\n  %-8s %9s %20s %20s %12s\n", "column", "missing", "min", "max", "negatives");
    for (int c = 0; c < REC_CRITEO_NINT; c++) {
        const int_stats *is = &t->ints[c];
        char lo[24] = "-", hi[24] = "-"; /* no value present: no range */
        if (is->seen) snprintf(lo, sizeof lo, "%lld", (long long)is->min), snprintf(hi, sizeof hi, "%lld", (long long)is->max);
        printf("  %-8s %9s %20s %20s %12lld\n", rec_criteo_column_name(1 + c),
               cli_num("%.3f%%", 100 * (double)is->missing / rows, "-"), lo, hi, (long long)is->negatives);
    }
    printf("\n  %-8s %9s %12s  %-26s %10s\n", "column", "missing", "distinct", "pooling min/mean/p50/p99/max",
           "top-0.1%");
    for (int c = 0; c < REC_CRITEO_NCAT; c++) {
        const feat_stats *fs = &t->cat[c];
        printf("  %-8s %9s %12lld", rec_criteo_column_name(1 + REC_CRITEO_NINT + c),
               cli_num("%.3f%%", 100 * (double)fs->missing / rows, "-"), (long long)rec_id_counter_distinct(fs->ids));
        print_pool(&fs->pool);
        printf(" %9.2f%%\n", 100 * fs->top_share);
    }
    printf("\n  top-0.1%%: share of accesses taken by the top 0.1%% of the distinct ids (at least 1)\n");
    if (json) {
        printf("{\"file\": ");
        json_str(path);
        printf(", \"format\": \"%s\", \"rows\": %lld, \"bad_rows\": %lld, \"has_label\": %s, \"label_rate\": ",
               raw ? "rraw" : "tsv", (long long)t->rows, (long long)bad.count, has_label ? "true" : "false");
        printf("%s", has_label ? cli_jnum("%.6f", t->label_sum / rows) : "null");
        if (raw) printf(", \"verified\": %s", verify ? "true" : "false");
        printf(", \"int_columns\": [");
        for (int c = 0; c < REC_CRITEO_NINT; c++) {
            const int_stats *is = &t->ints[c];
            char lo[24] = "null", hi[24] = "null";
            if (is->seen) snprintf(lo, sizeof lo, "%lld", (long long)is->min), snprintf(hi, sizeof hi, "%lld", (long long)is->max);
            printf("%s{\"name\": \"%s\", \"missing_rate\": %s, \"min\": %s, \"max\": %s, \"negatives\": %lld}",
                   c ? ", " : "", rec_criteo_column_name(1 + c), cli_jnum("%.6f", (double)is->missing / rows), lo, hi,
                   (long long)is->negatives);
        }
        printf("], \"cat_columns\": [");
        for (int c = 0; c < REC_CRITEO_NCAT; c++) {
            const feat_stats *fs = &t->cat[c];
            printf("%s{\"name\": \"%s\", \"missing_rate\": %s, \"distinct\": %lld, \"nnz\": %lld, \"pooling\": ",
                   c ? ", " : "", rec_criteo_column_name(1 + REC_CRITEO_NINT + c), cli_jnum("%.6f", (double)fs->missing / rows),
                   (long long)rec_id_counter_distinct(fs->ids), (long long)rec_id_counter_total(fs->ids));
            json_pool(&fs->pool);
            printf(", \"top_k\": %lld, \"top_share\": %s}", (long long)fs->top_k, cli_jnum("%.6f", fs->top_share));
        }
        printf("]}\n");
    }
    for (int c = 0; c < REC_CRITEO_NCAT; c++) {
        rec_id_counter_free(t->cat[c].ids);
        rec_len_hist_free(&t->cat[c].len);
    }
    free(t);
    return CLI_OK;
}

int cmd_inspect(int argc, char **argv) {
    const char *path = NULL;
    int verify = 0, json = 0;
    int64_t max_rows = -1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int rc = CLI_OK;
        if (cli_is_help(a)) { fputs(USAGE, stdout); return CLI_OK; }
        else if (!strcmp(a, "--verify")) verify = 1;
        else if (!strcmp(a, "--json")) json = 1;
        else if (!strcmp(a, "--rows")) rc = cli_i64(CMD, argc, argv, &i, 0, INT64_MAX / 2, &max_rows);
        else if (a[0] == '-' && a[1]) rc = cli_usage(CMD, "unknown option '%s'", a);
        else if (path) rc = cli_usage(CMD, "one FILE only (got '%s' and '%s')", path, a);
        else path = a;
        if (rc) return rc;
    }
    if (!path) return cli_usage(CMD, "FILE is required");

    struct stat st; /* a pipe is read once, as text (a shard is mapped, so never a pipe) */
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) return inspect_tsv(path, max_rows, json, 0, 0);
    char magic[8] = {0};
    FILE *f = fopen(path, "rb");
    if (!f) return cli_fail(CMD, rec_errorf(REC_EIO, "%s: cannot open: %s", path, strerror(errno)));
    size_t got = fread(magic, 1, sizeof magic, f);
    fclose(f);
    if (got == sizeof magic && !memcmp(magic, "RSHARD01", 8)) return inspect_shard(path, verify, max_rows, json);
    if (got == sizeof magic && !memcmp(magic, "RCKPT001", 8)) {
        if (max_rows >= 0) fprintf(stderr, "rectrain inspect: --rows applies to data files only; ignored\n");
        return inspect_ckpt(path, verify, json);
    }
    if (got == sizeof magic && rec_rawcols_magic(magic, got)) return inspect_tsv(path, max_rows, json, 1, verify);
    if (verify) fprintf(stderr, "rectrain inspect: --verify applies to .rshard, .rraw and checkpoint files only; ignored\n");
    return inspect_tsv(path, max_rows, json, 0, 0);
}
