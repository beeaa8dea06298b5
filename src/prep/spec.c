/* The preprocessing pipeline spec: JSON parsing (this file) and, in spec_check.c, name
 * resolution, cycle and type checks. The executor (exec.c, exec_ref.c) consumes the result.
 *
 * ---- JSON format (version 1) ------------------------------------------------------------
 *
 *   {"format": "rectrain-prep", "version": 1, "name": "criteo_standard",
 *    "tables": {"C1": {"rows": 1460}, ..., "C3v": {"rows": "auto"}},
 *    "nodes":  [{"name": "x", "inputs": ["C1", "C2"], "ops": [...]}],
 *    "dense":  [{"name": "I1", "input": "I1",
 *                "ops": [{"op": "fill_null", "value": 0}, {"op": "clamp", "min": 0},
 *                        {"op": "cast", "to": "f32"}, {"op": "log1p"}]}],
 *    "sparse": [{"name": "C1", "input": "C1", "table": "C1",
 *                "ops": [{"op": "fill_null", "value": 0}, {"op": "modulo", "divisor": 1460}]}]}
 *
 * Top level: "format" (must be "rectrain-prep") and "version" (must be 1) are required;
 * "name" (1..63 characters, default "spec"), "tables", "nodes", "dense" and "sparse" are
 * optional, but there must be at least one dense or sparse output, and "tables" is required
 * when there are sparse outputs. Unknown keys are errors everywhere (typos are caught), and
 * so are duplicate keys.
 *
 * Features: every entry of "nodes" (named intermediates), "dense" and "sparse" (outputs, in
 * Batch order) has "name" (unique over all three arrays, 1..63 of [A-Za-z0-9_.:-]), exactly
 * one of "input" (a string) or "inputs" (1..16 strings), and "ops" (an array, may be empty
 * or absent when the input's type already fits). Sparse outputs also need "table". An input
 * is a raw column (I1..I13, C1..C26; raw names win, so nodes may not take them, while an
 * output may share a raw column's name but then cannot be referenced as an input) or the
 * name of a node or output anywhere in the spec. Cycles are rejected, as are nodes that no
 * output uses. Several inputs are concatenated per row into an id list (all must be i64; a
 * row is null only when every input is).
 *
 * Types (rec_type): raw I columns are nullable i64 scalars, raw C columns nullable i64 lists
 * (single-hot data is lists of length 1), both unbounded. Dense outputs must end as f32
 * without nulls; sparse outputs as i64 without nulls whose ids fit their table.
 *
 * Ops ({"op": NAME, params...}; absent optional params take the default shown):
 *   fill_null   {value: number}            null rows -> value (an integer on i64 values);
 *                                          on f32 only before onehot (width 1)
 *   cast        {to: "f32"|"i64"}          i64 scalar -> f32, or f32 (width 1) -> i64 scalar
 *                                          (truncates); a cast to the current type is a no-op
 *   logit       {eps: 1e-5}                f32 width 1; 0 < eps < 0.5 (RAP plans use 1e-5)
 *   boxcox      {lambda: number}           f32 width 1
 *   log1p       {}                         f32 width 1
 *   onehot      {num_class, min, max}      f32 width 1 without nulls -> f32 width num_class
 *                                          (1..4096); classes split [min, max), min < max;
 *                                          out-of-range values go to class 0 (RAP §3.8)
 *   clamp       {min: -inf, max: +inf}     at least one bound, min <= max; f32 any width, or
 *                                          i64 (bounds must then be integers)
 *   bucketize   {borders: [numbers]}       f32 width 1 or i64 scalar -> i64 scalar in
 *                                          [0, |borders|]; 1..1048576 finite borders,
 *                                          non-decreasing, no value more than twice
 *   sigrid_hash {salt: 0, max_value}       i64 -> i64 in [0, max_value); max_value >= 1
 *   modulo      {divisor}                  i64 -> i64 in [0, divisor); divisor >= 1
 *   map_id      {map: [integers >= 0]}     i64 -> i64 in [0, max(map)+1); non-empty map
 *   firstx      {x}                        i64 list, keeps the first x >= 1 ids of each row
 *   ngram       {n}                        i64 list, sliding windows of min(n, len); n 1..256
 *   categorify  {min_count: 1}             i64 -> vocabulary index (0 = rare/unseen); must be
 *                                          the last op of a sparse output that feeds an "auto"
 *                                          table, and that output may not feed other features
 * Integers must be exact in a double (|v| <= 2^53).
 *
 * Tables: "tables" maps a table name to {"rows": R} (an integer >= 1) or {"rows": "auto"}
 * (sized by the vocabulary of the categorify ops feeding it: V+1, the largest if several).
 * Every table must be used by a sparse output; several outputs may share one table. A fixed
 * table must hold every id its features can produce (bounds are inferred: modulo by d ->
 * [0, d), sigrid_hash -> [0, max_value), map_id -> [0, max(map)+1), bucketize ->
 * [0, |borders|+1), clamp -> up to max+1 when its result cannot be negative (min >= 0, or
 * already bounded ids and max >= 0), fill_null of nullable ids -> at least value+1,
 * firstx/ngram/concatenation keep the bound, cast to i64 is unbounded);
 * an "auto" table may be fed only by chains ending in categorify.
 *
 * Errors are REC_EINVAL with "ORIGIN: $.sparse[3].ops[1].max_value: must be a positive
 * integer (got -5)", naming the JSON path, what is wrong and what to do. Text that is not
 * JSON gives "ORIGIN: not valid JSON near line L, column C".
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "prep_internal.h"
#include "rectrain/core.h"
#include "rectrain/prep.h"

enum { SPEC_MAX_FEATURES = 10000, SPEC_MAX_TABLES = 10000, SPEC_MAX_CLASSES = 4096,
       SPEC_MAX_BORDERS = 1 << 20, SPEC_MAX_NGRAM = 256, SPEC_PATH = 256 };
#define SPEC_MAX_EXACT 9007199254740992.0 /* 2^53 */

rec_status rec__spec_fail(const char *origin, const char *path, const char *fmt, ...) {
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return rec_errorf(REC_EINVAL, "%s: %s: %s", origin, path, msg);
}

/* ---- small JSON helpers ------------------------------------------------------------------ */

/* A short description of a JSON value for "(got ...)" in messages. */
static const char *describe(const cJSON *v, char *buf, size_t cap) {
    if (!v) snprintf(buf, cap, "nothing");
    else if (cJSON_IsNumber(v)) snprintf(buf, cap, "%.15g", v->valuedouble);
    else if (cJSON_IsString(v)) snprintf(buf, cap, "the string \"%.40s\"", v->valuestring);
    else if (cJSON_IsBool(v)) snprintf(buf, cap, "%s", cJSON_IsTrue(v) ? "true" : "false");
    else if (cJSON_IsNull(v)) snprintf(buf, cap, "null");
    else if (cJSON_IsArray(v)) snprintf(buf, cap, "an array");
    else if (cJSON_IsObject(v)) snprintf(buf, cap, "an object");
    else snprintf(buf, cap, "an unknown value");
    return buf;
}

static void join(char *out, size_t cap, const char *path, const char *key) {
    if (snprintf(out, cap, "%s.%.80s", path, key) >= (int)cap) out[cap - 1] = '\0'; /* truncated */
}

static void join_index(char *out, size_t cap, const char *path, int i) {
    if (snprintf(out, cap, "%s[%d]", path, i) >= (int)cap) out[cap - 1] = '\0'; /* truncated */
}

/* Rejects keys of `obj` that are not in `allowed` (NULL-terminated), and duplicate keys. */
static rec_status check_keys(const char *origin, const char *path, const cJSON *obj,
                             const char *const *allowed) {
    for (const cJSON *c = obj->child; c; c = c->next) {
        char p[SPEC_PATH];
        join(p, sizeof p, path, c->string ? c->string : "");
        int ok = 0;
        for (int i = 0; allowed[i] && !ok; i++) ok = c->string && strcmp(c->string, allowed[i]) == 0;
        if (!ok) {
            char list[256] = "";
            for (int i = 0; allowed[i]; i++) {
                size_t l = strlen(list);
                snprintf(list + l, sizeof list - l, "%s\"%s\"", i ? ", " : "", allowed[i]);
            }
            return rec__spec_fail(origin, p, "unknown key (allowed here: %s); check the spelling", list);
        }
        for (const cJSON *d = obj->child; d != c; d = d->next)
            if (strcmp(d->string, c->string) == 0)
                return rec__spec_fail(origin, p, "duplicate key; give each key once");
    }
    return REC_OK;
}

/* A name: 1..63 characters of [A-Za-z0-9_.:-]. */
static rec_status get_name(const char *origin, const char *path, const cJSON *v, char *out) {
    char got[96];
    if (!cJSON_IsString(v))
        return rec__spec_fail(origin, path, "must be a name string (got %s)", describe(v, got, sizeof got));
    size_t n = strlen(v->valuestring);
    if (n == 0 || n >= REC_NAME_MAX)
        return rec__spec_fail(origin, path, "must be 1 to %d characters long (got %zu)", REC_NAME_MAX - 1, n);
    for (size_t i = 0; i < n; i++) {
        char ch = v->valuestring[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '.' || ch == ':' || ch == '-'))
            return rec__spec_fail(origin, path,
                                  "\"%.63s\" has a character outside [A-Za-z0-9_.:-]; rename it",
                                  v->valuestring);
    }
    memcpy(out, v->valuestring, n + 1);
    return REC_OK;
}

/* Parameter `key` of op object `op` as a finite number. Absent: *out = dflt when !required. */
static rec_status get_num(const char *origin, const char *path, const cJSON *op, const char *key,
                          int required, double dflt, double *out) {
    char p[SPEC_PATH], got[96];
    join(p, sizeof p, path, key);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(op, key);
    if (!v) {
        if (required) return rec__spec_fail(origin, p, "missing; this op needs it (a number)");
        *out = dflt;
        return REC_OK;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble))
        return rec__spec_fail(origin, p, "must be a finite number (got %s)", describe(v, got, sizeof got));
    *out = v->valuedouble;
    return REC_OK;
}

static int is_exact_int(double d) { return isfinite(d) && floor(d) == d && fabs(d) <= SPEC_MAX_EXACT; }

/* An integer value in [lo, hi]; `what` says what is expected ("a positive integer"). */
static rec_status check_int(const char *origin, const char *path, const cJSON *v, int64_t lo,
                            int64_t hi, const char *what, int64_t *out) {
    char got[96];
    if (!cJSON_IsNumber(v) || !is_exact_int(v->valuedouble) || v->valuedouble < (double)lo ||
        v->valuedouble > (double)hi)
        return rec__spec_fail(origin, path, "must be %s (got %s)", what, describe(v, got, sizeof got));
    *out = (int64_t)v->valuedouble;
    return REC_OK;
}

static rec_status get_int(const char *origin, const char *path, const cJSON *op, const char *key,
                          int required, int64_t dflt, int64_t lo, int64_t hi, const char *what,
                          int64_t *out) {
    char p[SPEC_PATH];
    join(p, sizeof p, path, key);
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(op, key);
    if (!v) {
        if (required) return rec__spec_fail(origin, p, "missing; this op needs it (%s)", what);
        *out = dflt;
        return REC_OK;
    }
    return check_int(origin, p, v, lo, hi, what, out);
}

/* ---- ops ----------------------------------------------------------------------------------- */

#define INT53 ((int64_t)1 << 53)

/* Reads one op object at `path` into *op: its kind, its parameters (defaults filled, ranges
 * checked) and, for sigrid_hash, the multiply-shift constants. Checks that depend on the
 * input type (integer fill values and clamp bounds on ids) wait for spec_check.c. Arrays
 * (borders, map) are owned by *op even when an error follows. */
static rec_status parse_op(const char *origin, const char *path, const cJSON *o, rec_op *op) {
    char p[SPEC_PATH], got[96];
    if (!cJSON_IsObject(o))
        return rec__spec_fail(origin, path, "must be an object like {\"op\": \"modulo\", \"divisor\": 1000} (got %s)",
                              describe(o, got, sizeof got));
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "op");
    join(p, sizeof p, path, "op");
    if (!name) return rec__spec_fail(origin, p, "missing; say which operator this is");
    if (!cJSON_IsString(name))
        return rec__spec_fail(origin, p, "must be an operator name string (got %s)", describe(name, got, sizeof got));
    int kind = rec_op_kind_from_name(name->valuestring);
    if (kind < 0) {
        char list[256] = "";
        for (int k = 0; k < REC_OP_COUNT; k++) {
            size_t l = strlen(list);
            snprintf(list + l, sizeof list - l, "%s%s", k ? ", " : "", rec_op_name((rec_op_kind)k));
        }
        return rec__spec_fail(origin, p, "unknown operator \"%.40s\" (known: %s)", name->valuestring, list);
    }
    memset(op, 0, sizeof *op);
    op->kind = (rec_op_kind)kind;
    op->lo = -INFINITY;
    op->hi = INFINITY;
    int64_t iv = 0;
    switch (op->kind) {
    case REC_OP_FILL_NULL: {
        static const char *const keys[] = {"op", "value", NULL};
        REC_TRY(check_keys(origin, path, o, keys));
        REC_TRY(get_num(origin, path, o, "value", 1, 0, &op->fvalue));
        /* The i64 value is checked to be an integer once the input type is known. */
        op->ivalue = is_exact_int(op->fvalue) ? (int64_t)op->fvalue : 0;
        return REC_OK;
    }
    case REC_OP_CAST: {
        static const char *const keys[] = {"op", "to", NULL};
        REC_TRY(check_keys(origin, path, o, keys));
        const cJSON *to = cJSON_GetObjectItemCaseSensitive(o, "to");
        join(p, sizeof p, path, "to");
        if (!to) return rec__spec_fail(origin, p, "missing; say \"f32\" or \"i64\"");
        if (cJSON_IsString(to) && strcmp(to->valuestring, "f32") == 0) op->to = REC_DT_F32;
        else if (cJSON_IsString(to) && strcmp(to->valuestring, "i64") == 0) op->to = REC_DT_I64;
        else return rec__spec_fail(origin, p, "must be \"f32\" or \"i64\" (got %s)", describe(to, got, sizeof got));
        return REC_OK;
    }
    case REC_OP_LOGIT: {
        static const char *const keys[] = {"op", "eps", NULL};
        REC_TRY(check_keys(origin, path, o, keys));
        REC_TRY(get_num(origin, path, o, "eps", 0, 1e-5, &op->eps));
        if (!(op->eps > 0 && op->eps < 0.5)) {
            join(p, sizeof p, path, "eps");
            return rec__spec_fail(origin, p, "must be in (0, 0.5) (got %.15g); RAP uses 1e-5", op->eps);
        }
        return REC_OK;
    }
    case REC_OP_BOXCOX: {
        static const char *const keys[] = {"op", "lambda", NULL};
        REC_TRY(check_keys(origin, path, o, keys));
        return get_num(origin, path, o, "lambda", 1, 0, &op->lambda);
    }
    case REC_OP_LOG1P: {
        static const char *const keys[] = {"op", NULL};
        return check_keys(origin, path, o, keys);
    }
    case REC_OP_ONEHOT: {
        static const char *const keys[] = {"op", "num_class", "min", "max", NULL};
        REC_TRY(check_keys(origin, path, o, keys));
        REC_TRY(get_int(origin, path, o, "num_class", 1, 0, 1, SPEC_MAX_CLASSES,
                        "an integer from 1 to 4096", &iv));
        op->num_class = (int32_t)iv;
        REC_TRY(get_num(origin, path, o, "min", 1, 0, &op->lo));
        REC_TRY(get_num(origin, path, o, "max", 1, 0, &op->hi));
        if (!(op->lo < op->hi) || !isfinite(op->hi - op->lo)) {
            join(p, sizeof p, path, "max");
            return rec__spec_fail(origin, p, "must be greater than min (got min %.15g, max %.15g)", op->lo, op->hi);
        }
        return REC_OK;
    }
    case REC_OP_CLAMP: {
        static const char *const keys[] = {"op", "min", "max", NULL};
        REC_TRY(check_keys(origin, path, o, keys));
        REC_TRY(get_num(origin, path, o, "min", 0, -INFINITY, &op->lo));
        REC_TRY(get_num(origin, path, o, "max", 0, INFINITY, &op->hi));
        if (isinf(op->lo) && isinf(op->hi))
            return rec__spec_fail(origin, path, "clamp needs \"min\", \"max\" or both");
        if (op->lo > op->hi) {
            join(p, sizeof p, path, "max");
            return rec__spec_fail(origin, p, "must be at least min (got min %.15g, max %.15g)", op->lo, op->hi);
        }
        return REC_OK;
    }
    case REC_OP_BUCKETIZE: {
        static const char *const keys[] = {"op", "borders", NULL};
        REC_TRY(check_keys(origin, path, o, keys));
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(o, "borders");
        join(p, sizeof p, path, "borders");
        if (!b) return rec__spec_fail(origin, p, "missing; give the bucket borders as a non-decreasing array of numbers");
        int n = cJSON_IsArray(b) ? cJSON_GetArraySize(b) : 0;
        if (!cJSON_IsArray(b) || n < 1 || n > SPEC_MAX_BORDERS)
            return rec__spec_fail(origin, p, "must be an array of 1 to %d numbers (got %s)", SPEC_MAX_BORDERS,
                                  cJSON_IsArray(b) ? "an empty array" : describe(b, got, sizeof got));
        op->borders = malloc((size_t)n * sizeof *op->borders);
        if (!op->borders) return rec_errorf(REC_ENOMEM, "%s: %s: out of memory", origin, p);
        op->n_borders = n;
        int i = 0;
        for (const cJSON *e = b->child; e; e = e->next, i++) {
            char pe[SPEC_PATH];
            join_index(pe, sizeof pe, p, i);
            if (!cJSON_IsNumber(e) || !isfinite(e->valuedouble))
                return rec__spec_fail(origin, pe, "must be a finite number (got %s)", describe(e, got, sizeof got));
            op->borders[i] = e->valuedouble;
            if (i > 0 && op->borders[i] < op->borders[i - 1])
                return rec__spec_fail(origin, pe, "borders must be non-decreasing (%.15g after %.15g); sort them",
                                      op->borders[i], op->borders[i - 1]);
            if (i > 1 && op->borders[i] == op->borders[i - 2])
                return rec__spec_fail(origin, pe, "border %.15g appears more than twice; a border may repeat at most once",
                                      op->borders[i]);
        }
        return REC_OK;
    }
    case REC_OP_SIGRID_HASH: {
        static const char *const keys[] = {"op", "salt", "max_value", NULL};
        REC_TRY(check_keys(origin, path, o, keys));
        REC_TRY(get_int(origin, path, o, "salt", 0, 0, -INT53, INT53, "an integer (|salt| <= 2^53)", &op->salt));
        REC_TRY(get_int(origin, path, o, "max_value", 1, 0, 1, INT53, "a positive integer", &op->max_value));
        if (op->max_value > 1) rec_sigrid_magic(op->max_value, &op->multiplier, &op->shift);
        return REC_OK;
    }
    case REC_OP_MODULO: {
        static const char *const keys[] = {"op", "divisor", NULL};
        REC_TRY(check_keys(origin, path, o, keys));
        return get_int(origin, path, o, "divisor", 1, 0, 1, INT53, "a positive integer", &op->divisor);
    }
    case REC_OP_MAP_ID: {
        static const char *const keys[] = {"op", "map", NULL};
        REC_TRY(check_keys(origin, path, o, keys));
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(o, "map");
        join(p, sizeof p, path, "map");
        if (!m) return rec__spec_fail(origin, p, "missing; give the id map as an array of integers >= 0");
        int n = cJSON_IsArray(m) ? cJSON_GetArraySize(m) : 0;
        if (!cJSON_IsArray(m) || n < 1)
            return rec__spec_fail(origin, p, "must be a non-empty array of integers >= 0 (got %s)",
                                  cJSON_IsArray(m) ? "an empty array" : describe(m, got, sizeof got));
        op->map = malloc((size_t)n * sizeof *op->map);
        if (!op->map) return rec_errorf(REC_ENOMEM, "%s: %s: out of memory", origin, p);
        op->map_len = n;
        int i = 0;
        for (const cJSON *e = m->child; e; e = e->next, i++) {
            char pe[SPEC_PATH];
            join_index(pe, sizeof pe, p, i);
            REC_TRY(check_int(origin, pe, e, 0, INT53, "an integer >= 0", &op->map[i]));
        }
        return REC_OK;
    }
    case REC_OP_FIRSTX: {
        static const char *const keys[] = {"op", "x", NULL};
        REC_TRY(check_keys(origin, path, o, keys));
        REC_TRY(get_int(origin, path, o, "x", 1, 0, 1, INT32_MAX, "a positive integer", &iv));
        op->x = (int32_t)iv;
        return REC_OK;
    }
    case REC_OP_NGRAM: {
        static const char *const keys[] = {"op", "n", NULL};
        REC_TRY(check_keys(origin, path, o, keys));
        REC_TRY(get_int(origin, path, o, "n", 1, 0, 1, SPEC_MAX_NGRAM, "an integer from 1 to 256", &iv));
        op->n = (int32_t)iv;
        return REC_OK;
    }
    case REC_OP_CATEGORIFY: {
        static const char *const keys[] = {"op", "min_count", NULL};
        REC_TRY(check_keys(origin, path, o, keys));
        return get_int(origin, path, o, "min_count", 0, 1, 1, INT53, "a positive integer", &op->min_count);
    }
    case REC_OP_COUNT: break;
    }
    return rec__spec_fail(origin, p, "operator not handled");
}

/* ---- features and tables ---------------------------------------------------------------- */

/* Reads feature fi (a node, dense or sparse entry) into the draft: name, input names (kept
 * as names; spec_check.c resolves them), table name for sparse outputs, and its ops. */
static rec_status parse_feature(rec__spec_draft *d, int fi, const cJSON *o, rec_feat_kind kind) {
    const char *origin = d->origin, *path = d->paths[fi];
    rec_feature *ft = &d->s->features[fi];
    char p[SPEC_PATH], got[96];
    ft->kind = kind;
    ft->table = -1;
    ft->dense_offset = -1;
    ft->sparse_index = -1;
    if (!cJSON_IsObject(o))
        return rec__spec_fail(origin, path, "must be an object like {\"name\": ..., \"input\": ..., \"ops\": [...]} (got %s)",
                              describe(o, got, sizeof got));
    static const char *const keys[] = {"name", "input", "inputs", "ops", NULL};
    static const char *const sparse_keys[] = {"name", "input", "inputs", "ops", "table", NULL};
    REC_TRY(check_keys(origin, path, o, kind == REC_FEAT_SPARSE ? sparse_keys : keys));

    const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
    join(p, sizeof p, path, "name");
    if (!name) return rec__spec_fail(origin, p, "missing; every node and output needs a name");
    REC_TRY(get_name(origin, p, name, ft->name));

    const cJSON *in = cJSON_GetObjectItemCaseSensitive(o, "input");
    const cJSON *ins = cJSON_GetObjectItemCaseSensitive(o, "inputs");
    if (in && ins) {
        join(p, sizeof p, path, "inputs");
        return rec__spec_fail(origin, p, "give either \"input\" or \"inputs\", not both");
    }
    if (!in && !ins) return rec__spec_fail(origin, path, "missing \"input\" (a column or node name) or \"inputs\" (a list of them)");
    if (in) {
        join(p, sizeof p, path, "input");
        REC_TRY(get_name(origin, p, in, d->in_names[fi][0]));
        ft->n_inputs = 1;
    } else {
        join(p, sizeof p, path, "inputs");
        int n = cJSON_IsArray(ins) ? cJSON_GetArraySize(ins) : 0;
        if (!cJSON_IsArray(ins) || n < 1 || n > REC_MAX_INPUTS)
            return rec__spec_fail(origin, p, "must be an array of 1 to %d input names (got %s)", REC_MAX_INPUTS,
                                  cJSON_IsArray(ins) ? "too many or none" : describe(ins, got, sizeof got));
        d->in_is_array[fi] = 1;
        int k = 0;
        for (const cJSON *e = ins->child; e; e = e->next, k++) {
            char pe[SPEC_PATH];
            join_index(pe, sizeof pe, p, k);
            REC_TRY(get_name(origin, pe, e, d->in_names[fi][k]));
        }
        ft->n_inputs = n;
    }

    if (kind == REC_FEAT_SPARSE) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "table");
        join(p, sizeof p, path, "table");
        if (!t) return rec__spec_fail(origin, p, "missing; a sparse output names the embedding table its ids index");
        REC_TRY(get_name(origin, p, t, d->table_names[fi]));
    }

    const cJSON *ops = cJSON_GetObjectItemCaseSensitive(o, "ops");
    if (!ops) return REC_OK;
    join(p, sizeof p, path, "ops");
    if (!cJSON_IsArray(ops))
        return rec__spec_fail(origin, p, "must be an array of ops (got %s)", describe(ops, got, sizeof got));
    int n = cJSON_GetArraySize(ops);
    if (n == 0) return REC_OK;
    ft->ops = calloc((size_t)n, sizeof *ft->ops);
    if (!ft->ops) return rec_errorf(REC_ENOMEM, "%s: %s: out of memory", origin, p);
    int j = 0;
    for (const cJSON *e = ops->child; e; e = e->next, j++) {
        char pe[SPEC_PATH];
        join_index(pe, sizeof pe, p, j);
        ft->n_ops = j + 1; /* counted before parsing so that its arrays are freed on error */
        REC_TRY(parse_op(origin, pe, e, &ft->ops[j]));
    }
    return REC_OK;
}

/* Reads the "tables" object: names in JSON order, rows or "auto" (rows = -1 until bound). */
static rec_status parse_tables(rec__spec_draft *d, const cJSON *t) {
    const char *origin = d->origin;
    char p[SPEC_PATH], got[96];
    if (!cJSON_IsObject(t))
        return rec__spec_fail(origin, "$.tables", "must be an object mapping table names to {\"rows\": R} (got %s)",
                              describe(t, got, sizeof got));
    int n = cJSON_GetArraySize(t);
    if (n > SPEC_MAX_TABLES) return rec__spec_fail(origin, "$.tables", "more than %d tables", SPEC_MAX_TABLES);
    rec_spec *s = d->s;
    s->tables = calloc((size_t)n + 1, sizeof *s->tables);
    d->table_auto = calloc((size_t)n + 1, 1);
    if (!s->tables || !d->table_auto) return rec_errorf(REC_ENOMEM, "%s: out of memory reading tables", origin);
    int i = 0;
    for (const cJSON *e = t->child; e; e = e->next, i++) {
        join(p, sizeof p, "$.tables", e->string);
        for (const cJSON *f = t->child; f != e; f = f->next)
            if (strcmp(f->string, e->string) == 0)
                return rec__spec_fail(origin, p, "duplicate table; declare each table once");
        cJSON name = {0};
        name.type = cJSON_String;
        name.valuestring = e->string;
        REC_TRY(get_name(origin, p, &name, s->tables[i].name));
        if (!cJSON_IsObject(e))
            return rec__spec_fail(origin, p, "must be an object like {\"rows\": 1000} or {\"rows\": \"auto\"} (got %s)",
                                  describe(e, got, sizeof got));
        static const char *const keys[] = {"rows", NULL};
        REC_TRY(check_keys(origin, p, e, keys));
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(e, "rows");
        char pr[SPEC_PATH];
        join(pr, sizeof pr, p, "rows");
        if (!r) return rec__spec_fail(origin, pr, "missing; give the row count or \"auto\"");
        if (cJSON_IsString(r) && strcmp(r->valuestring, "auto") == 0) {
            s->tables[i].rows = -1;
            d->table_auto[i] = 1;
        } else {
            REC_TRY(check_int(origin, pr, r, 1, INT53, "a positive integer or \"auto\"", &s->tables[i].rows));
        }
        s->n_tables = i + 1;
    }
    return REC_OK;
}

static rec_status get_array(const char *origin, const cJSON *root, const char *key, const cJSON **out, int *n) {
    char p[SPEC_PATH], got[96];
    *out = cJSON_GetObjectItemCaseSensitive(root, key);
    *n = 0;
    if (!*out) return REC_OK;
    join(p, sizeof p, "$", key);
    if (!cJSON_IsArray(*out))
        return rec__spec_fail(origin, p, "must be an array of features (got %s)", describe(*out, got, sizeof got));
    *n = cJSON_GetArraySize(*out);
    return REC_OK;
}

static void draft_free(rec__spec_draft *d) {
    free(d->in_names);
    free(d->in_is_array);
    free(d->table_names);
    free(d->paths);
    free(d->table_auto);
}

/* Builds the draft from the parsed document: header, tables, then the features in JSON order
 * (nodes, dense, sparse). */
static rec_status parse_root(rec__spec_draft *d, const cJSON *root) {
    const char *origin = d->origin;
    char got[96];
    if (!cJSON_IsObject(root))
        return rec__spec_fail(origin, "$", "must be an object with \"format\": \"rectrain-prep\" (got %s)",
                              describe(root, got, sizeof got));
    static const char *const keys[] = {"format", "version", "name", "tables", "nodes", "dense", "sparse", NULL};
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format");
    if (!fmt) return rec__spec_fail(origin, "$.format", "missing; a prep spec starts with \"format\": \"rectrain-prep\"");
    if (!cJSON_IsString(fmt) || strcmp(fmt->valuestring, "rectrain-prep") != 0)
        return rec__spec_fail(origin, "$.format", "must be \"rectrain-prep\" (got %s); is this a prep spec?",
                              describe(fmt, got, sizeof got));
    REC_TRY(check_keys(origin, "$", root, keys));
    const cJSON *ver = cJSON_GetObjectItemCaseSensitive(root, "version");
    if (!ver) return rec__spec_fail(origin, "$.version", "missing; this build reads \"version\": 1");
    if (!cJSON_IsNumber(ver) || ver->valuedouble != 1)
        return rec__spec_fail(origin, "$.version", "unsupported version %s; this build reads version 1",
                              describe(ver, got, sizeof got));
    rec_spec *s = d->s;
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(root, "name");
    if (name) REC_TRY(get_name(origin, "$.name", name, s->name));
    else snprintf(s->name, sizeof s->name, "spec");

    const cJSON *nodes, *dense, *sparse;
    int nn, nd, ns;
    REC_TRY(get_array(origin, root, "nodes", &nodes, &nn));
    REC_TRY(get_array(origin, root, "dense", &dense, &nd));
    REC_TRY(get_array(origin, root, "sparse", &sparse, &ns));
    const cJSON *tables = cJSON_GetObjectItemCaseSensitive(root, "tables");
    if (tables) REC_TRY(parse_tables(d, tables));
    else if (ns > 0)
        return rec__spec_fail(origin, "$.tables", "missing; sparse outputs need tables, e.g. \"tables\": {\"C1\": {\"rows\": 1460}}");
    if (nd + ns == 0)
        return rec__spec_fail(origin, "$", "no outputs: give at least one feature in \"dense\" or \"sparse\"");
    if (nn + nd + ns > SPEC_MAX_FEATURES)
        return rec__spec_fail(origin, "$", "%d features; at most %d are supported", nn + nd + ns, SPEC_MAX_FEATURES);

    int n = nn + nd + ns;
    s->features = calloc((size_t)n, sizeof *s->features);
    d->in_names = calloc((size_t)n, sizeof *d->in_names);
    d->in_is_array = calloc((size_t)n, 1);
    d->table_names = calloc((size_t)n, sizeof *d->table_names);
    d->paths = calloc((size_t)n, sizeof *d->paths);
    if (!s->features || !d->in_names || !d->in_is_array || !d->table_names || !d->paths)
        return rec_errorf(REC_ENOMEM, "%s: out of memory reading the spec", origin);
    const cJSON *arrays[3] = {nodes, dense, sparse};
    const char *names[3] = {"nodes", "dense", "sparse"};
    const rec_feat_kind kinds[3] = {REC_FEAT_NODE, REC_FEAT_DENSE, REC_FEAT_SPARSE};
    int fi = 0;
    for (int a = 0; a < 3; a++) {
        if (!arrays[a]) continue;
        int i = 0;
        for (const cJSON *e = arrays[a]->child; e; e = e->next, i++, fi++) {
            snprintf(d->paths[fi], sizeof d->paths[fi], "$.%s[%d]", names[a], i);
            s->n_features = fi + 1;
            REC_TRY(parse_feature(d, fi, e, kinds[a]));
        }
    }
    return REC_OK;
}

/* ---- public API ------------------------------------------------------------------------------ */

rec_status rec_spec_parse(rec_spec **out, const char *json, size_t len, const char *origin) {
    *out = NULL;
    if (!origin) origin = "spec";
    if (!json) len = 0;
    const char *end = NULL;
    cJSON *root = len ? cJSON_ParseWithLengthOpts(json, len, &end, 0) : NULL;
    if (!root) return rec_json_invalid(REC_EINVAL, origin, json, len, end);
    size_t pos = (size_t)(end - json);
    while (pos < len && (json[pos] == ' ' || json[pos] == '\t' || json[pos] == '\n' || json[pos] == '\r')) pos++;
    if (pos < len && !(json[pos] == '\0' && pos + 1 == len)) {
        int64_t line, col;
        rec_line_col(json, pos, &line, &col);
        cJSON_Delete(root);
        return rec_errorf(REC_EINVAL, "%s: not valid JSON near line %lld, column %lld: text after the end of the spec object",
                          origin, (long long)line, (long long)col);
    }
    rec__spec_draft d = {.origin = origin};
    d.s = calloc(1, sizeof *d.s);
    rec_status st = d.s ? REC_OK : rec_errorf(REC_ENOMEM, "%s: out of memory reading the spec", origin);
    if (!st) st = parse_root(&d, root);
    cJSON_Delete(root);
    if (!st) st = rec__spec_check(&d);
    draft_free(&d);
    if (st) {
        rec_spec_free(d.s);
        return st;
    }
    *out = d.s;
    return REC_OK;
}

/* Reads and parses the spec file at `path` (named in every message). A missing or unreadable
 * file is REC_EIO. */
rec_status rec_spec_load(rec_spec **out, const char *path) {
    *out = NULL;
    char *buf;
    size_t len;
    REC_TRY(rec_read_file(path, "prep spec", (size_t)1 << 30, &buf, &len));
    rec_status s = rec_spec_parse(out, buf, len, path);
    free(buf);
    return s;
}

void rec_spec_free(rec_spec *s) {
    if (!s) return;
    for (int i = 0; s->features && i < s->n_features; i++) {
        rec_feature *ft = &s->features[i];
        for (int j = 0; ft->ops && j < ft->n_ops; j++) {
            free(ft->ops[j].borders);
            free(ft->ops[j].map);
        }
        free(ft->ops);
    }
    free(s->features);
    free(s->tables);
    free(s);
}

const rec_feature *rec_spec_sparse(const rec_spec *s, int32_t f) {
    for (int i = 0; i < s->n_features; i++)
        if (s->features[i].kind == REC_FEAT_SPARSE && s->features[i].sparse_index == f) return &s->features[i];
    return NULL;
}

const char *rec_spec_table_name(const rec_spec *s, int32_t f) {
    const rec_feature *ft = rec_spec_sparse(s, f);
    return ft && ft->table >= 0 && ft->table < s->n_tables ? s->tables[ft->table].name : NULL;
}

int64_t rec_spec_table_rows(const rec_spec *s, int32_t f) {
    const rec_feature *ft = rec_spec_sparse(s, f);
    if (!ft || ft->table < 0 || ft->table >= s->n_tables) return -1;
    return s->tables[ft->table].rows;
}

const rec_feature *rec_spec_vocab_feature(const rec_spec *s, int32_t k) {
    for (int i = 0; i < s->n_features; i++) {
        const rec_op *cat = rec_feature_categorify(&s->features[i]);
        if (cat && cat->vocab_slot == k) return &s->features[i];
    }
    return NULL;
}

static uint64_t sig_f64(uint64_t h, double x) {
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return rec_mix64(h ^ u);
}

/* Every parameter of op that the user gives, whatever its kind (the parser zeroes the fields
 * a kind does not use, so they hash alike), and the arrays it owns; not the derived ones
 * (sigrid_hash's multiplier and shift) nor the vocabulary slot, a position. */
static uint64_t sig_op(uint64_t h, const rec_op *op) {
    h = rec_mix64(h ^ (uint64_t)op->kind);
    const double fv[] = {op->fvalue, op->eps, op->lambda, op->lo, op->hi};
    for (size_t i = 0; i < sizeof fv / sizeof fv[0]; i++) h = sig_f64(h, fv[i]);
    const int64_t iv[] = {op->ivalue, op->to, op->num_class, op->salt, op->max_value, op->x, op->n, op->divisor,
                          op->min_count, op->n_borders, op->map_len};
    for (size_t i = 0; i < sizeof iv / sizeof iv[0]; i++) h = rec_mix64(h ^ (uint64_t)iv[i]);
    for (int32_t i = 0; i < op->n_borders; i++) h = sig_f64(h, op->borders[i]);
    for (int64_t i = 0; i < op->map_len; i++) h = rec_mix64(h ^ (uint64_t)op->map[i]);
    return h;
}

rec_status rec_spec_vocab_sigs(const rec_spec *s, uint64_t *sigs) {
    /* Each feature's signature after its whole chain, in topological order (inputs first). */
    uint64_t *h = malloc(((size_t)s->n_features + 1) * sizeof *h);
    if (!h) return rec_errorf(REC_ENOMEM, "out of memory signing the vocabularies of spec '%s'", s->name);
    for (int i = 0; i < s->n_features; i++) {
        const rec_feature *ft = &s->features[i];
        uint64_t x = rec_mix64(0x766f636162ULL ^ (uint64_t)ft->n_inputs);
        for (int q = 0; q < ft->n_inputs; q++) /* a raw column -(c), or a node's signature */
            x = rec_mix64(x ^ (ft->inputs[q] < 0 ? rec_mix64((uint64_t)(int64_t)ft->inputs[q]) : h[ft->inputs[q]]));
        for (int j = 0; j < ft->n_ops; j++) x = sig_op(x, &ft->ops[j]);
        h[i] = x;
        const rec_op *cat = rec_feature_categorify(ft);
        if (cat && cat->vocab_slot >= 0 && cat->vocab_slot < s->n_vocabs) sigs[cat->vocab_slot] = x;
    }
    free(h);
    return REC_OK;
}

/* Binds the vocabularies built by a counting pass: every categorify output gets the bound
 * V+1 and every table it feeds (necessarily "auto") V+1 rows, the largest when several
 * outputs share it. May be called again with other vocabularies. */
rec_status rec_spec_bind_vocabs(rec_spec *s, const rec_vocab_set *vs) {
    if (!vs || vs->n != s->n_vocabs)
        return rec_errorf(REC_EINVAL, "spec '%s' has %d categorify op(s) but %d vocabularies were given",
                          s->name, s->n_vocabs, vs ? vs->n : 0);
    for (int32_t k = 0; k < vs->n; k++)
        if (!vs->v || !vs->v[k])
            return rec_errorf(REC_EINVAL, "spec '%s': vocabulary %d is missing", s->name, k);
    for (int i = 0; i < s->n_features; i++) { /* auto tables are exactly those fed by categorify */
        const rec_feature *ft = &s->features[i];
        if (rec_feature_categorify(ft) && ft->table >= 0) s->tables[ft->table].rows = 0;
    }
    for (int i = 0; i < s->n_features; i++) {
        rec_feature *ft = &s->features[i];
        const rec_op *cat = rec_feature_categorify(ft);
        if (!cat) continue;
        int64_t rows = rec_vocab_size(vs->v[cat->vocab_slot]) + 1;
        ft->out_type.bound = rows;
        if (ft->table >= 0 && s->tables[ft->table].rows < rows) s->tables[ft->table].rows = rows;
    }
    return REC_OK;
}
