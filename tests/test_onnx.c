/* The ONNX export without onnx installed: the protobuf encoder's bytes against hand-worked
 * encodings (protobuf.dev "Encoding"), the structure of an exported file decoded here (the
 * model's version and opset, the graph's inputs and outputs, every node's inputs defined
 * before use, a table's bytes equal to the model's, bf16 tables widened), and every refusal with its
 * message, through the library and the CLI (`export --format onnx`, `predict --feed-out`).
 * ONNX Runtime's scores against predict's are bench/onnx_vs_predict.sh. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/train/pb_impl.h"
#include "check.h"
#include "clirun.h"
#include "rectrain/core.h"
#include "rectrain/export.h"
#include "rectrain/model.h"
#include "rectrain/train.h"

/* ---- encoder ---------------------------------------------------------------------------------- */

static int bytes_are(const rec__pb *b, const uint8_t *want, size_t n) {
    return !b->oom && b->n == n && memcmp(b->p, want, n) == 0;
}

static void test_encoder(void) {
    rec__pb b = {0};
    rec__pb_varint(&b, 0);
    rec__pb_varint(&b, 1);
    rec__pb_varint(&b, 127);
    rec__pb_varint(&b, 128);
    rec__pb_varint(&b, 300);
    const uint8_t v[] = {0x00, 0x01, 0x7f, 0x80, 0x01, 0xac, 0x02};
    CHECK(bytes_are(&b, v, sizeof v), "varints 0 1 127 128 300: %zu bytes", b.n);
    rec__pb_free(&b);

    rec__pb_int(&b, 1, 8);            /* ir_version = 8 */
    rec__pb_int(&b, 2, -1);           /* negative: ten bytes */
    rec__pb_str(&b, 8, "ab");         /* key 0x42 */
    rec__pb_float(&b, 2, 1.0f);       /* key 0x15, 0x3f800000 little-endian */
    const uint8_t f[] = {0x08, 0x08, 0x10, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
                         0x42, 0x02, 'a', 'b', 0x15, 0x00, 0x00, 0x80, 0x3f};
    CHECK(bytes_are(&b, f, sizeof f), "int, negative int, string, float fields: %zu bytes", b.n);
    CHECK(rec__pb_varint_len(0) == 1 && rec__pb_varint_len(127) == 1 && rec__pb_varint_len(128) == 2 &&
              rec__pb_varint_len(UINT64_MAX) == 10,
          "varint lengths");
    rec__pb_free(&b);

    /* nested messages: the shortest length varint, nesting closed inside out */
    size_t outer = rec__pb_begin(&b, 7);
    size_t inner = rec__pb_begin(&b, 1);
    rec__pb_int(&b, 2, 150);
    rec__pb_end(&b, inner);
    rec__pb_end(&b, outer);
    const uint8_t n1[] = {0x3a, 0x05, 0x0a, 0x03, 0x10, 0x96, 0x01};
    CHECK(bytes_are(&b, n1, sizeof n1), "nested message: %zu bytes", b.n);
    rec__pb_free(&b);

    /* a body of 200 bytes takes a two-byte length (0xc8 0x01) */
    char s[199];
    memset(s, 'x', sizeof s - 1);
    s[sizeof s - 1] = 0;
    outer = rec__pb_begin(&b, 1);
    rec__pb_str(&b, 1, s);            /* 1 key + 2 length + 198 = 201 bytes */
    rec__pb_end(&b, outer);
    CHECK(!b.oom && b.n == 1 + 2 + 201 && b.p[0] == 0x0a && b.p[1] == 0xc9 && b.p[2] == 0x01 && b.p[3] == 0x0a &&
              b.p[4] == 0xc6 && b.p[5] == 0x01 && b.p[6] == 'x' && b.p[b.n - 1] == 'x',
          "two-byte lengths: %zu bytes, %02x %02x %02x", b.n, b.p[0], b.p[1], b.p[2]);
    rec__pb_free(&b);
}

/* ---- a decoder of the exported file, for the checks ----------------------------------------- */

typedef struct span { const uint8_t *p, *end; } span;

static int get_varint(span *s, uint64_t *v) {
    *v = 0;
    for (int sh = 0; sh < 64 && s->p < s->end; sh += 7) {
        const uint8_t c = *s->p++;
        *v |= (uint64_t)(c & 0x7f) << sh;
        if (!(c & 0x80)) return 1;
    }
    return 0;
}

/* The next field of s: its number, wire type, and value (varint in *v; wire 2 in *sub). */
static int next_field(span *s, int *field, int *wire, uint64_t *v, span *sub) {
    uint64_t key;
    if (s->p >= s->end || !get_varint(s, &key)) return 0;
    *field = (int)(key >> 3);
    *wire = (int)(key & 7);
    if (*wire == 0) return get_varint(s, v);
    if (*wire == 5) {
        if (s->end - s->p < 4) return 0;
        s->p += 4;
        return 1;
    }
    if (*wire != 2 || !get_varint(s, v) || (uint64_t)(s->end - s->p) < *v) return 0;
    sub->p = s->p;
    sub->end = s->p + *v;
    s->p += *v;
    return 1;
}

/* The string field `want` of message m, copied into out (cap); 0 when absent. */
static int str_field(span m, int want, char *out, size_t cap) {
    int f, w;
    uint64_t v;
    span sub;
    while (next_field(&m, &f, &w, &v, &sub))
        if (f == want && w == 2) {
            const size_t n = (size_t)(sub.end - sub.p) < cap - 1 ? (size_t)(sub.end - sub.p) : cap - 1;
            memcpy(out, sub.p, n);
            out[n] = 0;
            return 1;
        }
    return 0;
}

enum { MAXNAMES = 4096 };
static char names[MAXNAMES][96];
static int n_names;

static int defined(const char *s) {
    for (int i = 0; i < n_names; i++)
        if (!strcmp(names[i], s)) return 1;
    return 0;
}
static void define(const char *s) {
    if (n_names < MAXNAMES) snprintf(names[n_names++], sizeof names[0], "%s", s);
}

/* Where an initializer's values are: its raw_data (*raw), or with data_location EXTERNAL (14 =
 * 1) the external_data entries (13: key 1, value 2) location, offset and length. */
typedef struct where {
    span raw;
    int external;
    char location[256];
    long long offset, length;
} where;

static where tensor_data(span tp) {
    where w = {.offset = -1, .length = -1};
    int f, wire;
    uint64_t v;
    span s2;
    while (next_field(&tp, &f, &wire, &v, &s2)) {
        if (f == 9 && wire == 2) w.raw = s2;
        if (f == 14 && wire == 0) w.external = v == 1;
        if (f != 13 || wire != 2) continue;
        char key[32] = "", value[256] = "";
        str_field(s2, 1, key, sizeof key);
        str_field(s2, 2, value, sizeof value);
        if (!strcmp(key, "location")) snprintf(w.location, sizeof w.location, "%s", value);
        if (!strcmp(key, "offset")) w.offset = atoll(value);
        if (!strcmp(key, "length")) w.length = atoll(value);
    }
    return w;
}

/* The bytes of a tensor kept as external data: read from `location` beside the model at path
 * (malloc'ed, `length` of them), or NULL. */
static uint8_t *external_bytes(const char *path, const where *w) {
    char file[1200];
    const char *slash = strrchr(path, '/');
    snprintf(file, sizeof file, "%.*s%s", slash ? (int)(slash - path + 1) : 0, path, w->location);
    FILE *fp = fopen(file, "rb");
    uint8_t *b = fp && w->length >= 0 ? malloc((size_t)w->length + 1) : NULL;
    const int ok = b && fseek(fp, w->offset, SEEK_SET) == 0 && fread(b, 1, (size_t)w->length, fp) == (size_t)w->length;
    if (fp) fclose(fp);
    if (!ok) free(b);
    return ok ? b : NULL;
}

/* The initializers with data_location EXTERNAL (each names the data file, sits at a
 * 4096-aligned offset after the one before, and holds 1 KiB or more), the end of the last one,
 * and the initializers of 1 KiB or more kept in the model. */
static int n_external, n_inline_big;
static long long external_end;

/* Decodes the file at path and checks it against model m (F features): ir_version 8, opset 17,
 * inputs dense / ids_f / offsets_f, outputs logit and probability, each node's inputs defined
 * before it (inputs, initializers, earlier outputs: ONNX wants the nodes sorted), the outputs
 * made by the nodes, and emb.{F-1}.weight's bytes equal to the model's table: its raw_data or,
 * with `external`, the bytes at its offset and length in PATH.data, named by its location. */
static void check_file(const char *path, const rec_model *m, const char *what, int external) {
    FILE *fp = fopen(path, "rb");
    CHECK(fp != NULL, "%s: %s not written", what, path);
    if (!fp) return;
    fseek(fp, 0, SEEK_END);
    const long size = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *buf = malloc((size_t)size);
    const int read_ok = buf && fread(buf, 1, (size_t)size, fp) == (size_t)size;
    fclose(fp);
    CHECK(read_ok, "%s: cannot read %s", what, path);
    if (!read_ok) return free(buf);
    const int F = rec_model_get_config(m)->n_sparse;
    span s = {buf, buf + size}, sub, graph = {0};
    int f, w, ir = 0, opset = 0, fields_ok = 1;
    uint64_t v;
    while (s.p < s.end && (fields_ok = next_field(&s, &f, &w, &v, &sub)))
        if (f == 1) ir = (int)v;
        else if (f == 7) graph = sub;
        else if (f == 8) {
            int f2, w2;
            uint64_t v2;
            span s2;
            while (next_field(&sub, &f2, &w2, &v2, &s2))
                if (f2 == 2) opset = (int)v2;
        }
    CHECK(fields_ok && ir == 8 && opset == 17 && graph.p, "%s: ir_version %d, opset %d, graph %s", what, ir, opset,
          graph.p ? "present" : "missing");
    n_names = 0;
    n_external = n_inline_big = 0;
    external_end = 0;
    char data_name[300];
    const char *base = strrchr(path, '/');
    snprintf(data_name, sizeof data_name, "%s.data", base ? base + 1 : path);
    /* first pass: inputs and initializers are defined for every node */
    int n_in = 0, n_out = 0, n_init = 0, table_ok = 0, sorted = 1, outs_made = 0;
    char name[96], want_in[64], table[64];
    snprintf(table, sizeof table, "emb.%d.weight", F - 1);
    const rec_tensor *t = rec_model_tensor(m, table);
    for (span g = graph; next_field(&g, &f, &w, &v, &sub);) {
        if (f == 11 && str_field(sub, 1, name, sizeof name)) {
            if (n_in == 0) snprintf(want_in, sizeof want_in, "dense");
            else snprintf(want_in, sizeof want_in, "%s_%d", n_in % 2 ? "ids" : "offsets", (n_in - 1) / 2);
            CHECK(!strcmp(name, want_in), "%s: input %d is %s, want %s", what, n_in, name, want_in);
            define(name);
            n_in++;
        } else if (f == 5 && str_field(sub, 8, name, sizeof name)) {
            define(name);
            n_init++;
            const where wh = tensor_data(sub);
            n_inline_big += !wh.external && wh.raw.end - wh.raw.p >= 1024;
            if (wh.external) {
                n_external++;
                CHECK(!strcmp(wh.location, data_name) && wh.offset % 4096 == 0 && wh.offset >= external_end &&
                          wh.length >= 1024 && !wh.raw.p,
                      "%s: %s's external data: location '%s' (want '%s'), offset %lld (4096-aligned, after %lld), "
                      "length %lld", what, name, wh.location, data_name, wh.offset, external_end, wh.length);
                external_end = wh.offset + wh.length;
            }
            if (!strcmp(name, table)) {
                uint8_t *ext = wh.external ? external_bytes(path, &wh) : NULL;
                const uint8_t *bytes = wh.external ? ext : wh.raw.p;
                const size_t n = wh.external ? (size_t)wh.length : (size_t)(wh.raw.end - wh.raw.p);
                table_ok = t && bytes && n == (size_t)rec_tensor_numel(t) * sizeof(float);
                for (int64_t i = 0; table_ok && i < rec_tensor_numel(t); i++) { /* bf16 tables: widened */
                    float x;
                    memcpy(&x, bytes + i * 4, 4);
                    table_ok = x == (t->data16 ? rec_bf16_to_float(t->data16[i]) : t->data[i]);
                }
                free(ext);
            }
        }
    }
    /* second pass: nodes in order */
    for (span g = graph; next_field(&g, &f, &w, &v, &sub);) {
        if (f == 12) {
            if (str_field(sub, 1, name, sizeof name)) {
                outs_made += defined(name);
                CHECK(!strcmp(name, n_out == 0 ? "logit" : "probability"), "%s: output %d is %s", what, n_out, name);
            }
            n_out++;
        }
        if (f != 1) continue;
        span node = sub, s2;
        int f2, w2;
        uint64_t v2;
        while (next_field(&node, &f2, &w2, &v2, &s2)) {
            const size_t n = (size_t)(s2.end - s2.p) < sizeof name - 1 ? (size_t)(s2.end - s2.p) : sizeof name - 1;
            if (f2 != 1 && f2 != 2) continue;
            memcpy(name, s2.p, n);
            name[n] = 0;
            if (f2 == 1 && !defined(name)) {
                if (sorted) fprintf(stderr, "%s: node input %s used before it is made\n", what, name);
                sorted = 0;
            }
            if (f2 == 2) define(name);
        }
    }
    CHECK(n_in == 1 + 2 * F && n_out == 2 && outs_made == 2, "%s: %d inputs (want %d), %d outputs, %d made", what,
          n_in, 1 + 2 * F, n_out, outs_made);
    CHECK(sorted, "%s: the nodes are not in topological order", what);
    CHECK(n_init > F && table_ok, "%s: %d initializers; %s's bytes %s (%s)", what, n_init, table,
          table_ok ? "equal" : "differ from the model's", external ? "external data" : "raw_data");
    char data_path[700];
    snprintf(data_path, sizeof data_path, "%s.data", path);
    FILE *d = fopen(data_path, "rb");
    long data_size = -1;
    if (d && fseek(d, 0, SEEK_END) == 0) data_size = ftell(d);
    if (d) fclose(d);
    CHECK(external ? n_external > 0 && n_inline_big == 0 && data_size == external_end : n_external == 0,
          "%s: %d initializers external, %d of 1 KiB or more in the model, %s.data %ld bytes (want %lld)", what,
          n_external, n_inline_big, base ? base + 1 : path, data_size, external_end);
    free(buf);
}

/* ---- the library ------------------------------------------------------------------------------ */

static rec_model *small_model(rec_model_kind kind, rec_pooling pooling, rec_precision prec, rec_precision tables) {
    rec_model_config c;
    rec_model_config_default(&c, kind);
    c.pooling = pooling;
    c.precision = prec;
    c.embed_precision = tables;
    const int64_t rows[3] = {5, 7, 3};
    rec_model *m = NULL;
    rec_status s = rec_model_config_bind(&c, 4, 3, rows, "test");
    if (!s) s = rec_model_init(&m, &c, 8, 1);
    CHECK(s == REC_OK, "model %s: %s", rec_model_kind_name(kind), rec_errmsg());
    rec_model_config_free(&c);
    return m;
}

static void test_export(const char *tmp) {
    const rec_model_kind kinds[] = {REC_MODEL_DLRM, REC_MODEL_DCN, REC_MODEL_DEEPFM, REC_MODEL_WIDE_DEEP};
    char path[600];
    for (int k = 0; k < 4; k++) {
        for (int pool = 0; pool < 2; pool++) {
            rec_model *m = small_model(kinds[k], pool ? REC_POOL_MEAN : REC_POOL_SUM, REC_PRECISION_FP32,
                                       k == 2 && pool ? REC_PRECISION_BF16 : REC_PRECISION_FP32);
            if (!m) continue;
            snprintf(path, sizeof path, "%s/%s_%d.onnx", tmp, rec_model_kind_name(kinds[k]), pool);
            rec_status s = rec_export_onnx(m, path, REC_ONNX_DATA_AUTO);
            CHECK(s == REC_OK, "export %s: %s", rec_model_kind_name(kinds[k]), rec_errmsg());
            check_file(path, m, rec_model_kind_name(kinds[k]), 0);
            CHECK(!rec_export_onnx_external(m, path, REC_ONNX_DATA_AUTO) &&
                      rec_export_onnx_external(m, path, REC_ONNX_DATA_EXTERNAL), "external data only when asked");
            /* the layout of a model over 2 GiB, on a small one */
            snprintf(path, sizeof path, "%s/%s_%d_ext.onnx", tmp, rec_model_kind_name(kinds[k]), pool);
            s = rec_export_onnx(m, path, REC_ONNX_DATA_EXTERNAL);
            CHECK(s == REC_OK, "export %s with external data: %s", rec_model_kind_name(kinds[k]), rec_errmsg());
            check_file(path, m, rec_model_kind_name(kinds[k]), 1);
            if (k == 2 && pool) CHECK(rec_model_tensor(m, "emb.0.weight")->data16 != NULL, "bf16 tables expected");
            rec_model_free(m);
        }
    }
    /* refusals */
    rec_model *m = small_model(REC_MODEL_DLRM, REC_POOL_SUM, REC_PRECISION_BF16, REC_PRECISION_FP32);
    if (m) {
        snprintf(path, sizeof path, "%s/bf16.onnx", tmp);
        CHECK_ERR(rec_export_onnx(m, path, REC_ONNX_DATA_AUTO), REC_EUNSUPPORTED, "in bf16 (\"precision\": \"bf16\")");
        CHECK_ERR(rec_export_onnx_check(m), REC_EUNSUPPORTED, "models trained with --precision fp32");
        CHECK(access(path, F_OK) != 0, "a refused export left %s", path);
        rec_model_free(m);
    }
    m = small_model(REC_MODEL_DLRM, REC_POOL_SUM, REC_PRECISION_FP32, REC_PRECISION_FP32);
    if (m) {
        snprintf(path, sizeof path, "%s/no-such-dir/m.onnx", tmp);
        CHECK_ERR(rec_export_onnx(m, path, REC_ONNX_DATA_AUTO), REC_EIO, "no-such-dir/m.onnx");
        CHECK_ERR(rec_export_onnx(m, path, REC_ONNX_DATA_EXTERNAL), REC_EIO, "no-such-dir/m.onnx.data");
        rec_model_free(m);
    }
}

/* ---- the CLI ----------------------------------------------------------------------------------- */

/* The Python with onnx and onnxruntime that bench/onnx_vs_predict.sh makes ($REC_ONNX_VENV,
 * else ~/.cache/rectrain/onnx-venv), into py; 0 when there is none (those checks are skipped:
 * they are PyPI development tools, not the product's dependencies). */
static int onnx_python(char *py, size_t cap) {
    const char *venv = getenv("REC_ONNX_VENV");
    if (venv) snprintf(py, cap, "%s/bin/python", venv);
    else snprintf(py, cap, "%s/.cache/rectrain/onnx-venv/bin/python", getenv("HOME") ? getenv("HOME") : "/root");
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "%s -c 'import onnx, onnxruntime, numpy' 2>/dev/null", py);
    return access(py, X_OK) == 0 && system(cmd) == 0;
}

/* dev/onnx_check.py ARGS in the scratch directory, its output in `out`; its exit code. */
static int check_py(const char *py, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int check_py(const char *py, const char *fmt, ...) {
    char args[1024], cmd[2400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "cd %s && %s %s/dev/onnx_check.py %s 2>&1", dir, py, src, args);
    return check_capture(cmd, out, sizeof out);
}

/* With ONNX's own tools: onnx.checker (full check) and ONNX Runtime load the model kept as
 * external data and score predict's rows as predict does; predict's output of --bad-rows
 * skip, with a "nan" line per dropped row, is compared with the feed of the rows it scored,
 * and a count that differs still is refused. */
static void test_onnx_tools(void) {
    char py[1024];
    if (!onnx_python(py, sizeof py)) {
        printf("no Python with onnx and onnxruntime (bench/onnx_vs_predict.sh makes it): ONNX Runtime checks skipped\n");
        return;
    }
    CHECK(check_py(py, "me.onnx --feed p.feed --preds p.tsv") == 0 && strstr(out, "passes onnx.checker (full_check)") &&
              strstr(out, "compare: 3000 rows") && strstr(out, "tolerance 1e-05: ok"),
          "onnx_check of the model with external data: %s", out);
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "cd %s && awk -F'\\t' 'BEGIN { OFS = \"\\t\" } NR == 101 || NR == 201 { $2 = \"x\" } "
             "NR <= 201' d.tsv > b.tsv", dir);
    CHECK(system(cmd) == 0, "b.tsv with two malformed lines");
    CHECK(run("predict --ckpt ck --data b.tsv --spec %s/configs/criteo_vocab.json --vocab-from d.rshard --bad-rows skip "
              "--out pb.tsv --feed-out pb.feed", src) == 0 && lines_of("pb.tsv") == 201,
          "predict --bad-rows skip: %s", out);
    CHECK(check_py(py, "m.onnx --feed pb.feed --preds pb.tsv") == 0 && strstr(out, "compare: 199 rows") &&
              strstr(out, "2 nan lines of rows predict skipped") && strstr(out, ": ok"),
          "onnx_check with predict's nan lines: %s", out);
    CHECK(check_py(py, "m.onnx --feed pb.feed --preds p.tsv") == 1 && strstr(out, "p.tsv: 3000 rows scored") &&
              strstr(out, "the feed 199"), "onnx_check of another run's predictions: %s", out);
}

static void test_cli(void) {
    CHECK(run("gen --rows 3000 --multi-hot --scale 0.0005 --out d.tsv") == 0, "gen: %s", out);
    CHECK(run("prep --spec %s/configs/criteo_vocab.json --in d.tsv --out d.rshard", src) == 0, "prep: %s", out);
    CHECK(run("train --config %s/configs/dlrm_small.json --data d.rshard --steps 2 --ckpt ck", src) == 0, "train: %s",
          out);
    CHECK(run("export --ckpt ck --format onnx --out m.onnx") == 0 && file_size("m.onnx") > 1000, "export: %s", out);
    CHECK(run("export --ckpt ck --format onnx --out m.onnx") == 1 &&
              strstr(out, "--out m.onnx exists; add --overwrite to replace it"),
          "export over a file: %s", out);
    CHECK(run("export --ckpt ck --format onnx --out m.onnx --overwrite") == 0 && file_size("m.onnx.data") < 0,
          "export --overwrite: %s", out);
    /* external data, as a model over 2 GiB is written */
    CHECK(run("export --ckpt ck --format onnx --external-data --out me.onnx") == 0 &&
              strstr(out, "-> me.onnx, its weights in me.onnx.data") && file_size("me.onnx.data") > 1000 &&
              file_size("me.onnx") < file_size("m.onnx") / 10,
          "export --external-data: %s", out);
    CHECK(run("export --ckpt ck --format onnx --external-data --out me.onnx") == 1 &&
              strstr(out, "--out me.onnx exists; add --overwrite"), "external data over an export: %s", out);
    CHECK(unlink(path("me.onnx")) == 0, "rm me.onnx");
    CHECK(run("export --ckpt ck --format onnx --external-data --out me.onnx") == 1 &&
              strstr(out, "me.onnx.data exists (where --out me.onnx keeps its weights, ONNX external data); add "
                          "--overwrite to replace both") && file_size("me.onnx") < 0,
          "an external data file in the way: %s", out);
    CHECK(run("export --ckpt ck --format onnx --external-data --out me.onnx --overwrite") == 0 &&
              file_size("me.onnx") > 0, "export --external-data --overwrite: %s", out);
    CHECK(run("export --ckpt ck --external-data --out npyx") == 2 && strstr(out, "--external-data is for --format onnx"),
          "--external-data with npy: %s", out);
    CHECK(symlink("ck/model.rckpt", path("cl.onnx.data")) == 0, "ln -s ck/model.rckpt cl.onnx.data");
    CHECK(run("export --ckpt ck --format onnx --out cl.onnx --overwrite") == 1 && strstr(out, "--out's external data") &&
              strstr(out, "cl.onnx.data") && file_size("ck/model.rckpt") > 1000,
          "the external data file over the checkpoint: %s", out);
    CHECK(run("export --ckpt ck --format tflite --out m.tfl") == 2 &&
              strstr(out, "--format tflite: want npy (a folder of .npy files) or onnx"),
          "unknown format: %s", out);
    CHECK(run("train --config %s/configs/dlrm_small.json --data d.rshard --steps 2 --precision bf16 --ckpt cb", src) == 0,
          "train bf16: %s", out);
    CHECK(run("export --ckpt cb --format onnx --out b.onnx") == 1 &&
              strstr(out, "computes its dense products in bf16") && strstr(out, "--precision fp32") &&
              file_size("b.onnx") < 0,
          "bf16 model: %s", out);
    /* the feed: magic, Dn and F, and the end record */
    CHECK(run("predict --ckpt ck --data d.rshard --out p.tsv --feed-out p.feed") == 0, "predict --feed-out: %s", out);
    FILE *f = fopen(path("p.feed"), "rb");
    char magic[8] = {0};
    int64_t hdr[2] = {0}, end = -1;
    const int ok = f && fread(magic, 1, 8, f) == 8 && fread(hdr, 8, 2, f) == 2 && fseek(f, -8, SEEK_END) == 0 &&
                   fread(&end, 8, 1, f) == 1;
    if (f) fclose(f);
    CHECK(ok && !memcmp(magic, "RECFEED1", 8) && hdr[0] == 13 && hdr[1] == 26 && end == 0,
          "feed header %.8s Dn %lld F %lld end %lld", magic, (long long)hdr[0], (long long)hdr[1], (long long)end);
    test_onnx_tools();
    CHECK(run("predict --ckpt ck --data d.rshard --out r.tsv --feed-out no-dir/r.feed") == 1 &&
              strstr(out, "no-dir/r.feed") && strstr(out, "the predictions in r.tsv are complete") &&
              file_size("r.tsv") > 0,
          "feed into a missing folder: %s", out);
    CHECK(run("predict --ckpt ck --data d.rshard --out q.tsv --feed-out q.tsv") == 1 &&
              strstr(out, "--feed-out and --out are both q.tsv"),
          "feed over the predictions: %s", out);
    CHECK(run("predict --ckpt ck --data d.rshard --out q2.tsv --feed-out ./q2.tsv") == 1 &&
              strstr(out, "would both write") && access(path("q2.tsv"), F_OK) != 0,
          "feed over the predictions by another name: %s", out);
}

int main(void) {
    test_encoder();
    char tmp[] = "/tmp/rectrain_onnx_XXXXXX";
    if (mkdtemp(tmp)) {
        test_export(tmp);
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
        CHECK(system(cmd) == 0, "cleanup of %s", tmp);
    } else {
        CHECK(0, "mkdtemp failed");
    }
    if (clirun_setup("rectrain_onnx") == 0) {
        test_cli();
        clirun_cleanup();
    }
    return check_report();
}
