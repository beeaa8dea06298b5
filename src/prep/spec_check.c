/* Validation of a parsed pipeline spec (the JSON format is documented in spec.c): resolves
 * input and table names, orders the features topologically (rejecting cycles and unused
 * nodes), infers the type of every value along every chain with the rules the executors
 * implement (exec.c, exec_ref.c), checks that outputs fit the Batch and their tables, and
 * fills the derived fields (dense_offset, sparse_index, vocab_slot, counts).
 *
 * Type rules, op by op (see rec_type; "ids" = i64 scalar or list):
 *   inputs      one input: its type; several: all i64, concatenated into a list (nullable only
 *               when all are; bound the largest, or unbounded if any is)
 *   fill_null   removes nulls; f32 width 1 or ids (value must be an integer; a negative
 *               value makes the ids unbounded, a larger one raises the bound)
 *   cast        f32 <- i64 scalar; i64 scalar <- f32 width 1 (unbounded); same type: no-op
 *   logit, boxcox, log1p   f32 width 1
 *   onehot      f32 width 1 without nulls -> f32 width num_class (exec.c's fill_null and the
 *               float maps handle width 1 only, so nulls must be filled before)
 *   clamp       f32 any width; ids with integer bounds (bound: see clamp_bound)
 *   bucketize   f32 width 1 or i64 scalar -> i64 scalar, bound |borders|+1
 *   sigrid_hash, modulo, map_id   ids -> ids, bound max_value / divisor / max(map)+1
 *   firstx, ngram                 i64 lists only, bound kept
 *   categorify  ids -> ids, bound set by rec_spec_bind_vocabs (V+1)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prep_internal.h"
#include "rectrain/prep.h"

enum { TYPE_DESC = 64 };

static const char *type_desc(const rec_type *t, char *buf) {
    if (t->dtype == REC_DT_F32) snprintf(buf, TYPE_DESC, "f32 values of width %d%s", t->width, t->nullable ? " (nullable)" : "");
    else snprintf(buf, TYPE_DESC, "i64 %s%s", t->is_list ? "id lists" : "ids (one per row)", t->nullable ? " (nullable)" : "");
    return buf;
}

/* The type of raw column c (1..39). */
static rec_type raw_type(int c) {
    rec_type t = {REC_DT_I64, c > REC_CRITEO_NINT, 1, 1, -1};
    return t;
}

/* Bound of ids v in [0, b) (b = -1: any int64) after clamp(v, lo, hi): the largest result is
 * clamp(b-1, lo, hi) when b >= 0, else hi; the smallest is >= 0 when lo >= 0, or when the ids
 * are already >= 0 and hi >= 0. */
static int64_t clamp_bound(int64_t b, double lo, double hi) {
    int nonneg = lo >= 0 || (b >= 0 && hi >= 0);
    if (!nonneg) return -1;
    if (b >= 0) {
        double top = (double)(b - 1);
        top = top < lo ? lo : top > hi ? hi : top;
        return (int64_t)top + 1;
    }
    return isinf(hi) ? -1 : (int64_t)hi + 1;
}

static int is_ids(const rec_type *t) { return t->dtype == REC_DT_I64; }
static int is_f32_1(const rec_type *t) { return t->dtype == REC_DT_F32 && t->width == 1; }

/* Infers the type after op j of feature fi from *t, or fails naming the op's path. */
static rec_status infer_op(const rec__spec_draft *d, int fi, int j, rec_type *t) {
    const rec_feature *ft = &d->s->features[fi];
    rec_op *op = &ft->ops[j];
    const char *name = rec_op_name(op->kind);
    char path[REC__SPEC_PATH_MAX + 32], pp[REC__SPEC_PATH_MAX + 48], td[TYPE_DESC];
    snprintf(path, sizeof path, "%s.ops[%d]", d->paths[fi], j);
    type_desc(t, td);
    static const char *const CAST_F32 = "{\"op\": \"cast\", \"to\": \"f32\"}";
    switch (op->kind) {
    case REC_OP_FILL_NULL:
        if (t->dtype == REC_DT_F32) {
            if (t->width != 1)
                return rec__spec_fail(d->origin, path, "fill_null works on f32 of width 1 but gets %s; fill nulls before onehot", td);
        } else {
            if (!(floor(op->fvalue) == op->fvalue && fabs(op->fvalue) <= 9007199254740992.0)) {
                snprintf(pp, sizeof pp, "%s.value", path);
                return rec__spec_fail(d->origin, pp, "must be an integer for %s (got %.15g)", td, op->fvalue);
            }
            op->ivalue = (int64_t)op->fvalue;
            if (t->nullable && op->ivalue < 0) t->bound = -1;
            else if (t->nullable && t->bound >= 0 && op->ivalue >= t->bound) t->bound = op->ivalue + 1;
        }
        t->nullable = 0;
        return REC_OK;
    case REC_OP_CAST:
        if (op->to == t->dtype) return REC_OK; /* no-op, as in both executors */
        if (op->to == REC_DT_F32) {
            if (t->is_list)
                return rec__spec_fail(d->origin, path, "cast to f32 needs one id per row but gets %s; only scalar columns (I1..I13, bucketize outputs) become dense", td);
            t->dtype = REC_DT_F32;
            t->width = 1;
            t->bound = -1;
        } else {
            if (t->width != 1)
                return rec__spec_fail(d->origin, path, "cast to i64 needs f32 of width 1 but gets %s", td);
            t->dtype = REC_DT_I64;
            t->is_list = 0;
            t->bound = -1;
        }
        return REC_OK;
    case REC_OP_LOGIT:
    case REC_OP_BOXCOX:
    case REC_OP_LOG1P:
        if (!is_f32_1(t))
            return rec__spec_fail(d->origin, path, "%s needs f32 values of width 1 but gets %s; %s",
                                  name, td, t->dtype == REC_DT_F32 ? "apply it before onehot"
                                  : t->is_list ? "id lists cannot become f32 values; use a scalar column (I1..I13)"
                                               : "cast the ids first with {\"op\": \"cast\", \"to\": \"f32\"}");
        return REC_OK;
    case REC_OP_ONEHOT:
        if (!is_f32_1(t) || t->nullable)
            return rec__spec_fail(d->origin, path, "onehot needs f32 values of width 1 without nulls but gets %s; %s", td,
                                  t->dtype != REC_DT_F32 ? CAST_F32 : t->width != 1 ? "onehot applies to one value per row" :
                                  "add {\"op\": \"fill_null\", \"value\": 0} before it");
        t->width = op->num_class;
        return REC_OK;
    case REC_OP_CLAMP:
        if (is_ids(t)) {
            double b[2] = {op->lo, op->hi};
            const char *k[2] = {"min", "max"};
            for (int i = 0; i < 2; i++)
                if (!isinf(b[i]) && !(floor(b[i]) == b[i] && fabs(b[i]) <= 9007199254740992.0)) {
                    snprintf(pp, sizeof pp, "%s.%s", path, k[i]);
                    return rec__spec_fail(d->origin, pp, "must be an integer when clamping %s (got %.15g)", td, b[i]);
                }
            t->bound = clamp_bound(t->bound, op->lo, op->hi);
        }
        return REC_OK;
    case REC_OP_BUCKETIZE:
        if (!is_f32_1(t) && !(is_ids(t) && !t->is_list))
            return rec__spec_fail(d->origin, path, "bucketize needs f32 values of width 1 or one id per row but gets %s", td);
        t->dtype = REC_DT_I64;
        t->is_list = 0;
        t->width = 1;
        t->bound = (int64_t)op->n_borders + 1;
        return REC_OK;
    case REC_OP_SIGRID_HASH:
    case REC_OP_MODULO:
    case REC_OP_MAP_ID:
    case REC_OP_CATEGORIFY:
        if (!is_ids(t))
            return rec__spec_fail(d->origin, path, "%s works on i64 ids but gets %s; %s", name, td,
                                  "use bucketize to turn f32 values into ids, or cast them with {\"op\": \"cast\", \"to\": \"i64\"}");
        if (op->kind == REC_OP_SIGRID_HASH) t->bound = op->max_value;
        else if (op->kind == REC_OP_MODULO) t->bound = op->divisor;
        else if (op->kind == REC_OP_CATEGORIFY) t->bound = -1; /* until rec_spec_bind_vocabs */
        else {
            int64_t m = 0;
            for (int64_t i = 0; i < op->map_len; i++)
                if (op->map[i] > m) m = op->map[i];
            t->bound = m + 1;
        }
        return REC_OK;
    case REC_OP_FIRSTX:
    case REC_OP_NGRAM:
        if (!is_ids(t) || !t->is_list)
            return rec__spec_fail(d->origin, path, "%s works on i64 id lists but gets %s", name, td);
        return REC_OK;
    case REC_OP_COUNT: break;
    }
    return rec__spec_fail(d->origin, path, "unknown operator");
}

/* Resolves input k of feature fi into ft->inputs[k]: a raw column -(c), or a feature index in
 * JSON order (remapped to the final order at the end). */
static rec_status resolve_input(const rec__spec_draft *d, int fi, int k) {
    rec_spec *s = d->s;
    const char *nm = d->in_names[fi][k];
    char path[REC__SPEC_PATH_MAX + 32];
    if (d->in_is_array[fi]) snprintf(path, sizeof path, "%s.inputs[%d]", d->paths[fi], k);
    else snprintf(path, sizeof path, "%s.input", d->paths[fi]);
    int c = rec_criteo_column_index(nm);
    if (c == 0) return rec__spec_fail(d->origin, path, "\"label\" is not an input; features read I1..I13, C1..C26 or nodes");
    if (c > 0) {
        s->features[fi].inputs[k] = -c;
        return REC_OK;
    }
    for (int i = 0; i < s->n_features; i++)
        if (strcmp(s->features[i].name, nm) == 0) {
            s->features[fi].inputs[k] = i;
            return REC_OK;
        }
    return rec__spec_fail(d->origin, path, "unknown input \"%s\": not a raw column (I1..I13, C1..C26) nor the name of a node or output", nm);
}

/* Orders the features so that inputs come before their users: repeated passes in JSON order,
 * each taking every feature whose inputs are all placed. What remains holds a cycle, which is
 * reported as a chain of names. */
static rec_status topo_order(const rec__spec_draft *d, int *order) {
    const rec_spec *s = d->s;
    int n = s->n_features, placed = 0;
    uint8_t *done = calloc((size_t)n + 1, 1);
    int *mark = calloc((size_t)n + 1, sizeof *mark);
    if (!done || !mark) {
        free(done);
        free(mark);
        return rec_errorf(REC_ENOMEM, "%s: out of memory ordering the spec", d->origin);
    }
    for (int progress = 1; progress && placed < n;) {
        progress = 0;
        for (int i = 0; i < n; i++) {
            if (done[i]) continue;
            int ready = 1;
            for (int k = 0; k < s->features[i].n_inputs && ready; k++)
                if (s->features[i].inputs[k] >= 0 && !done[s->features[i].inputs[k]]) ready = 0;
            if (!ready) continue;
            done[i] = 1;
            order[placed++] = i;
            progress = 1;
        }
    }
    if (placed == n) {
        free(done);
        free(mark);
        return REC_OK;
    }
    /* Every unplaced feature has an unplaced input: walk them until one repeats. */
    int cur = 0;
    while (done[cur]) cur++;
    int step = 1;
    while (!mark[cur]) {
        mark[cur] = step++;
        const rec_feature *ft = &s->features[cur];
        for (int k = 0; k < ft->n_inputs; k++)
            if (ft->inputs[k] >= 0 && !done[ft->inputs[k]]) {
                cur = ft->inputs[k];
                break;
            }
    }
    char chain[512] = "";
    int start = cur;
    for (int hop = 0; hop < 64; hop++) { /* from the repeated feature around its cycle */
        size_t l = strlen(chain);
        snprintf(chain + l, sizeof chain - l, "%s%s", hop ? " <- " : "", s->features[cur].name);
        if (hop > 0 && cur == start) break;
        const rec_feature *ft = &s->features[cur];
        for (int k = 0; k < ft->n_inputs; k++) /* the walk's own rule, so it comes back */
            if (ft->inputs[k] >= 0 && !done[ft->inputs[k]]) {
                cur = ft->inputs[k];
                break;
            }
    }
    free(done);
    free(mark);
    return rec__spec_fail(d->origin, d->paths[start],
                          "inputs form a cycle (%s, each reading the next); a feature cannot depend on itself", chain);
}

/* Checks run in this order, so that a spec with several mistakes reports the most basic one
 * first: names, inputs, table references, cycles, unused nodes, types along every chain (in
 * topological order), then outputs against the Batch and their tables. On success the
 * features are moved into topological order (inputs remapped) and dense_offset, sparse_index
 * (both in JSON order), vocab_slot (in the final order), n_dense, n_sparse and n_vocabs are
 * set. On error d->s is left as is for the caller to free; nothing else stays allocated. */
rec_status rec__spec_check(rec__spec_draft *d) {
    rec_spec *s = d->s;
    const char *origin = d->origin;
    int n = s->n_features;
    char path[REC__SPEC_PATH_MAX + REC_NAME_MAX + 32], td[TYPE_DESC];

    /* Names: unique; nodes may not shadow raw columns (raw names always mean the column). */
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s.name", d->paths[i]);
        if (s->features[i].kind == REC_FEAT_NODE && rec_criteo_column_index(s->features[i].name) >= 0)
            return rec__spec_fail(origin, path, "\"%s\" is a raw column name; give the node another name", s->features[i].name);
        for (int j = 0; j < i; j++)
            if (strcmp(s->features[i].name, s->features[j].name) == 0)
                return rec__spec_fail(origin, path, "duplicate name \"%s\" (also %s); names must be unique across nodes, dense and sparse",
                                      s->features[i].name, d->paths[j]);
    }
    for (int i = 0; i < n; i++)
        for (int k = 0; k < s->features[i].n_inputs; k++) REC_TRY(resolve_input(d, i, k));
    for (int i = 0; i < n; i++) {
        rec_feature *ft = &s->features[i];
        if (ft->kind != REC_FEAT_SPARSE) continue;
        for (int t = 0; t < s->n_tables && ft->table < 0; t++)
            if (strcmp(s->tables[t].name, d->table_names[i]) == 0) ft->table = t;
        if (ft->table < 0) {
            snprintf(path, sizeof path, "%s.table", d->paths[i]);
            return rec__spec_fail(origin, path, "unknown table \"%s\"; declare it in \"tables\", e.g. \"%s\": {\"rows\": 1000}",
                                  d->table_names[i], d->table_names[i]);
        }
    }

    int *order = calloc((size_t)n + 1, sizeof *order);
    int *pos = calloc((size_t)n + 1, sizeof *pos);
    uint8_t *used = calloc((size_t)n + 1, 1);
    rec_feature *sorted = calloc((size_t)n + 1, sizeof *sorted);
    rec_status st = (order && pos && used && sorted) ? REC_OK : rec_errorf(REC_ENOMEM, "%s: out of memory checking the spec", origin);
    if (!st) st = topo_order(d, order);
    if (st) goto out;

    /* Unused nodes: walk back from the outputs (reverse topological order). */
    for (int i = 0; i < n; i++) used[i] = s->features[i].kind != REC_FEAT_NODE;
    for (int q = n - 1; q >= 0; q--) {
        const rec_feature *ft = &s->features[order[q]];
        if (!used[order[q]]) continue;
        for (int k = 0; k < ft->n_inputs; k++)
            if (ft->inputs[k] >= 0) used[ft->inputs[k]] = 1;
    }
    for (int i = 0; i < n; i++)
        if (!used[i]) {
            st = rec__spec_fail(origin, d->paths[i], "node \"%s\" is not used by any dense or sparse output; remove it or use it",
                                s->features[i].name);
            goto out;
        }

    /* Types, in topological order. */
    for (int q = 0; q < n && !st; q++) {
        int i = order[q];
        rec_feature *ft = &s->features[i];
        if (ft->n_inputs == 1) {
            int in = ft->inputs[0];
            ft->in_type = in < 0 ? raw_type(-in) : s->features[in].out_type;
        } else {
            rec_type t = {REC_DT_I64, 1, 1, 1, 0};
            for (int k = 0; k < ft->n_inputs; k++) {
                int in = ft->inputs[k];
                rec_type u = in < 0 ? raw_type(-in) : s->features[in].out_type;
                if (u.dtype != REC_DT_I64) {
                    snprintf(path, sizeof path, "%s.inputs[%d]", d->paths[i], k);
                    st = rec__spec_fail(origin, path, "\"%s\" gives %s, but several inputs are concatenated into an id list and must all be i64 ids; use one input per f32 value",
                                        d->in_names[i][k], type_desc(&u, td));
                    goto out;
                }
                t.nullable = t.nullable && u.nullable;
                t.bound = (t.bound < 0 || u.bound < 0) ? -1 : (u.bound > t.bound ? u.bound : t.bound);
            }
            ft->in_type = t;
        }
        rec_type t = ft->in_type;
        for (int j = 0; j < ft->n_ops && !st; j++) {
            if (ft->ops[j].kind == REC_OP_CATEGORIFY && j != ft->n_ops - 1) {
                snprintf(path, sizeof path, "%s.ops[%d]", d->paths[i], j);
                st = rec__spec_fail(origin, path, "categorify must be the last op of its chain (its ids are vocabulary indices); move the ops after it before it");
                goto out;
            }
            ft->ops[j].in = t;
            st = infer_op(d, i, j, &t);
        }
        if (st) goto out;
        ft->out_type = t;
    }

    /* Outputs and tables. */
    uint8_t *t_used = used; /* reuse as a per-table flag: bit 0 used, bit 1 fed by categorify */
    memset(t_used, 0, (size_t)n + 1);
    if (s->n_tables > n) {
        free(used);
        t_used = used = calloc((size_t)s->n_tables + 1, 1);
        if (!used) {
            st = rec_errorf(REC_ENOMEM, "%s: out of memory checking the spec", origin);
            goto out;
        }
    }
    int32_t dense_off = 0, n_sparse = 0, n_vocabs = 0;
    for (int i = 0; i < n; i++) {
        rec_feature *ft = &s->features[i];
        const rec_type *t = &ft->out_type;
        int cat = ft->n_ops > 0 && ft->ops[ft->n_ops - 1].kind == REC_OP_CATEGORIFY;
        if (cat) ft->ops[ft->n_ops - 1].vocab_slot = -1;
        if (ft->kind == REC_FEAT_DENSE) {
            if (t->dtype != REC_DT_F32 || t->nullable) {
                st = rec__spec_fail(origin, d->paths[i], "dense output \"%s\" ends as %s but must be f32 without nulls; %s",
                                    ft->name, type_desc(t, td),
                                    t->dtype != REC_DT_F32 ? "end the chain with {\"op\": \"cast\", \"to\": \"f32\"} (ids go to sparse outputs)"
                                                           : "add {\"op\": \"fill_null\", \"value\": 0}");
                goto out;
            }
            if (dense_off > (1 << 24) - t->width) {
                st = rec__spec_fail(origin, d->paths[i], "more than %d dense columns in all", 1 << 24);
                goto out;
            }
            ft->dense_offset = dense_off;
            dense_off += t->width;
        } else if (ft->kind == REC_FEAT_SPARSE) {
            const rec_table *tb = &s->tables[ft->table];
            if (t->dtype != REC_DT_I64 || t->nullable) {
                st = rec__spec_fail(origin, d->paths[i], "sparse output \"%s\" ends as %s but must be i64 ids without nulls; %s",
                                    ft->name, type_desc(t, td),
                                    t->dtype != REC_DT_I64 ? "turn f32 values into ids with bucketize"
                                                           : "add {\"op\": \"fill_null\", \"value\": 0}");
                goto out;
            }
            if (d->table_auto[ft->table] && !cat) {
                st = rec__spec_fail(origin, d->paths[i], "table \"%s\" has \"rows\": \"auto\", which only a chain ending in categorify can size; end the chain with {\"op\": \"categorify\"} or give the table a row count",
                                    tb->name);
                goto out;
            }
            if (!d->table_auto[ft->table] && cat) {
                st = rec__spec_fail(origin, d->paths[i], "ends with categorify, whose ids go up to the vocabulary size, but table \"%s\" has a fixed row count; give it \"rows\": \"auto\"",
                                    tb->name);
                goto out;
            }
            if (!cat && t->bound < 0) {
                st = rec__spec_fail(origin, d->paths[i], "ids are unbounded (they may be negative or exceed any table) but table \"%s\" has %lld rows; end the chain with modulo, sigrid_hash, map_id, bucketize or a clamp with min >= 0 and a max",
                                    tb->name, (long long)tb->rows);
                goto out;
            }
            if (!cat && t->bound > tb->rows) {
                st = rec__spec_fail(origin, d->paths[i], "ids reach %lld (they lie in [0, %lld)) but table \"%s\" has %lld rows; enlarge the table or bound the ids to it (e.g. modulo %lld)",
                                    (long long)t->bound, (long long)t->bound, tb->name, (long long)tb->rows, (long long)tb->rows);
                goto out;
            }
            t_used[ft->table] = 1;
            ft->sparse_index = n_sparse++;
        }
        if (cat) {
            if (ft->kind != REC_FEAT_SPARSE) {
                snprintf(path, sizeof path, "%s.ops[%d]", d->paths[i], ft->n_ops - 1);
                st = rec__spec_fail(origin, path, "categorify may only end a sparse output (vocabularies are built in one pass over its final ids)");
                goto out;
            }
            for (int u = 0; u < n; u++)
                for (int k = 0; k < s->features[u].n_inputs; k++)
                    if (s->features[u].inputs[k] == i) {
                        snprintf(path, sizeof path, "%s%s", d->paths[u], d->in_is_array[u] ? ".inputs" : ".input");
                        st = rec__spec_fail(origin, path, "reads \"%s\", which ends with categorify; vocabulary indices cannot feed other features (read its input instead)",
                                            ft->name);
                        goto out;
                    }
        }
    }
    for (int t = 0; t < s->n_tables; t++)
        if (!t_used[t]) {
            snprintf(path, sizeof path, "$.tables.%s", s->tables[t].name);
            st = rec__spec_fail(origin, path, "not used by any sparse output; remove it or check the \"table\" of your sparse outputs");
            goto out;
        }

    /* Final order: topological; inputs remapped; vocabulary slots in that order. */
    for (int q = 0; q < n; q++) pos[order[q]] = q;
    for (int q = 0; q < n; q++) {
        sorted[q] = s->features[order[q]];
        for (int k = 0; k < sorted[q].n_inputs; k++)
            if (sorted[q].inputs[k] >= 0) sorted[q].inputs[k] = pos[sorted[q].inputs[k]];
        if (sorted[q].n_ops > 0 && sorted[q].ops[sorted[q].n_ops - 1].kind == REC_OP_CATEGORIFY)
            sorted[q].ops[sorted[q].n_ops - 1].vocab_slot = n_vocabs++;
    }
    free(s->features);
    s->features = sorted;
    sorted = NULL;
    s->n_dense = dense_off;
    s->n_sparse = n_sparse;
    s->n_vocabs = n_vocabs;
out:
    free(order);
    free(pos);
    free(used);
    free(sorted);
    return st;
}
