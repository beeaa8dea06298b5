/* Tests of the pipeline spec (src/prep/spec.c, spec_check.c): the shipped configs load with
 * the expected shapes, types are inferred as the executor expects, vocabularies bind, and
 * every rejection names its JSON path. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "rectrain/prep.h"

/* JSON with ' for " so that specs read cleanly in C strings. */
static char *unq(const char *q) {
    size_t n = strlen(q);
    char *s = malloc(n + 1);
    for (size_t i = 0; i <= n; i++) s[i] = q[i] == '\'' ? '"' : q[i];
    return s;
}

static rec_status parse_q(rec_spec **out, const char *q) {
    char *s = unq(q);
    rec_status st = rec_spec_parse(out, s, strlen(s), "t.json");
    free(s);
    return st;
}

/* Parses q, expecting failure with a message containing `needle` (and "t.json: "). */
#define REJECT(q, needle)                                                           \
    do {                                                                            \
        rec_spec *sp_ = NULL;                                                       \
        rec_status st_ = parse_q(&sp_, q);                                          \
        CHECK_ERR(st_, REC_EINVAL, needle);                                         \
        CHECK(strncmp(rec_errmsg(), "t.json: ", 8) == 0, "origin first: %s", rec_errmsg()); \
        CHECK(sp_ == NULL, "no spec on error");                                     \
        if (getenv("REC_TEST_VERBOSE")) printf("  %s\n", rec_errmsg());            \
        rec_spec_free(sp_);                                                         \
    } while (0)

#define HEAD "{'format':'rectrain-prep','version':1,'name':'t',"
/* One dense output over I1 with the given ops. */
#define DENSE(ops) HEAD "'dense':[{'name':'d','input':'I1','ops':[" ops "]}]}"
/* One sparse output over `in` into table T of `rows` rows with the given ops. */
#define SPARSE(in, rows, ops) HEAD "'tables':{'T':{'rows':" rows "}},'sparse':[{'name':'s','input':'" in "','table':'T','ops':[" ops "]}]}"
#define DFN "{'op':'fill_null','value':0},{'op':'cast','to':'f32'}"

static char *config_path(const char *name, char *buf, size_t cap) {
    const char *root = getenv("REC_SOURCE_DIR");
    snprintf(buf, cap, "%s/configs/%s", root && *root ? root : ".", name);
    return buf;
}

static int ops_used(const rec_spec *s, int kind) {
    for (int i = 0; i < s->n_features; i++)
        for (int j = 0; j < s->features[i].n_ops; j++)
            if ((int)s->features[i].ops[j].kind == kind) return 1;
    return 0;
}

static int topo_ok(const rec_spec *s) {
    for (int i = 0; i < s->n_features; i++)
        for (int k = 0; k < s->features[i].n_inputs; k++) {
            int in = s->features[i].inputs[k];
            if (in >= i || in < -39) return 0;
        }
    return 1;
}

static void test_standard(void) {
    char p[1024];
    rec_spec *s = NULL;
    rec_status st = rec_spec_load(&s, config_path("criteo_standard.json", p, sizeof p));
    CHECK(st == REC_OK, "load %s: %s", p, rec_errmsg());
    if (st) return;
    CHECK(s->n_dense == 13 && s->n_sparse == 26 && s->n_tables == 26 && s->n_vocabs == 0,
          "Dn %d F %d tables %d vocabs %d", s->n_dense, s->n_sparse, s->n_tables, s->n_vocabs);
    CHECK(strcmp(s->name, "criteo_standard") == 0, "name %s", s->name);
    CHECK(rec_spec_table_rows(s, 2) == 10131227 && rec_spec_table_rows(s, 25) == 142572 &&
          rec_spec_table_rows(s, 26) == -1, "table rows");
    const rec_feature *c3 = rec_spec_sparse(s, 2);
    CHECK(c3 && strcmp(c3->name, "C3") == 0 && c3->inputs[0] == -16 && c3->in_type.is_list &&
          c3->in_type.nullable && !c3->out_type.nullable && c3->out_type.is_list &&
          c3->out_type.bound == 10131227, "C3 types");
    int dense_ok = 1;
    for (int i = 0; i < s->n_features; i++) {
        const rec_feature *f = &s->features[i];
        if (f->kind != REC_FEAT_DENSE) continue;
        dense_ok &= f->n_ops == 4 && f->in_type.dtype == REC_DT_I64 && !f->in_type.is_list &&
                    f->out_type.dtype == REC_DT_F32 && f->out_type.width == 1 && !f->out_type.nullable &&
                    f->dense_offset == -f->inputs[0] - 1;
    }
    CHECK(dense_ok, "dense features: I_k at offset k-1, i64 scalar -> f32");
    CHECK(topo_ok(s), "topological order");
    rec_spec_free(s);
}

static void test_vocab(void) {
    char p[1024];
    rec_spec *s = NULL;
    rec_status st = rec_spec_load(&s, config_path("criteo_vocab.json", p, sizeof p));
    CHECK(st == REC_OK, "load %s: %s", p, rec_errmsg());
    if (st) return;
    CHECK(s->n_dense == 13 && s->n_sparse == 26 && s->n_tables == 26 && s->n_vocabs == 26, "shape");
    CHECK(rec_spec_table_rows(s, 0) == -1, "auto table unbound: %lld", (long long)rec_spec_table_rows(s, 0));
    int slots_ok = 1;
    for (int f = 0; f < 26; f++) {
        const rec_feature *ft = rec_spec_sparse(s, f);
        slots_ok &= ft && ft->ops[ft->n_ops - 1].kind == REC_OP_CATEGORIFY && ft->ops[ft->n_ops - 1].vocab_slot == f &&
                    ft->ops[ft->n_ops - 1].min_count >= 1;
    }
    CHECK(slots_ok, "vocab slots in order");
    /* Bind: vocabulary k holds k+1 ids, so table k gets k+2 rows. */
    rec_vocab_set vs = {26, calloc(26, sizeof(rec_vocab *))};
    int64_t ids[32];
    for (int i = 0; i < 32; i++) ids[i] = 1000 + i;
    for (int k = 0; k < 26; k++) CHECK(rec_vocab_from_ids(&vs.v[k], ids, k + 1) == REC_OK, "vocab");
    rec_vocab_set short_vs = {25, vs.v};
    CHECK_ERR(rec_spec_bind_vocabs(s, &short_vs), REC_EINVAL, "26 categorify op(s) but 25 vocabularies");
    CHECK(rec_spec_bind_vocabs(s, &vs) == REC_OK, "bind: %s", rec_errmsg());
    CHECK(rec_spec_table_rows(s, 0) == 2 && rec_spec_table_rows(s, 25) == 27, "bound rows %lld %lld",
          (long long)rec_spec_table_rows(s, 0), (long long)rec_spec_table_rows(s, 25));
    CHECK(rec_spec_sparse(s, 3)->out_type.bound == 5, "categorify bound V+1");
    rec_vocab_set_free(&vs);
    rec_spec_free(s);
}

static void test_rap(void) {
    char p[1024];
    rec_spec *s = NULL;
    rec_status st = rec_spec_load(&s, config_path("criteo_rap.json", p, sizeof p));
    CHECK(st == REC_OK, "load %s: %s", p, rec_errmsg());
    if (st) return;
    CHECK(s->n_dense == 21 && s->n_sparse == 30 && s->n_vocabs == 1 && s->n_tables == 29,
          "Dn %d F %d vocabs %d tables %d", s->n_dense, s->n_sparse, s->n_vocabs, s->n_tables);
    for (int k = 0; k < REC_OP_COUNT; k++) CHECK(ops_used(s, k), "op %s used", rec_op_name((rec_op_kind)k));
    CHECK(topo_ok(s), "topological order");
    int multi = 0, shared = 0;
    for (int i = 0; i < s->n_features; i++) {
        multi |= s->features[i].n_inputs > 1;
        int users = 0;
        for (int u = 0; u < s->n_features; u++)
            for (int k = 0; k < s->features[u].n_inputs; k++) users += s->features[u].inputs[k] == i;
        shared |= s->features[i].kind == REC_FEAT_NODE && users > 1;
    }
    CHECK(multi && shared, "multi-input node and a node feeding several outputs");
    int sh_ok = 1;
    for (int i = 0; i < s->n_features; i++)
        for (int j = 0; j < s->features[i].n_ops; j++) {
            const rec_op *op = &s->features[i].ops[j];
            if (op->kind != REC_OP_SIGRID_HASH || op->max_value < 2) continue;
            uint64_t m;
            int sh;
            rec_sigrid_magic(op->max_value, &m, &sh);
            sh_ok &= m == op->multiplier && sh == op->shift;
        }
    CHECK(sh_ok, "sigrid_hash magic filled");
    int32_t off = 0, onehot_w = 0;
    for (int i = 0; i < s->n_features; i++)
        if (s->features[i].kind == REC_FEAT_DENSE) {
            CHECK(s->features[i].dense_offset >= 0, "offset");
            off += s->features[i].out_type.width;
            if (strcmp(s->features[i].name, "I1_onehot") == 0) onehot_w = s->features[i].out_type.width;
        }
    CHECK(off == s->n_dense && onehot_w == 8, "dense widths %d onehot %d", off, onehot_w);
    rec_spec_free(s);
}

/* Type inference details the executor relies on. */
static void test_types(void) {
    rec_spec *s = NULL;
    rec_status st = parse_q(&s, HEAD "'tables':{'T':{'rows':100}},"
        "'nodes':[{'name':'x','inputs':['C1','I2'],'ops':[]}],"
        "'sparse':[{'name':'a','input':'x','table':'T','ops':[{'op':'fill_null','value':0},{'op':'modulo','divisor':50}]},"
                  "{'name':'b','input':'I3','table':'T','ops':[{'op':'fill_null','value':3},{'op':'clamp','min':0,'max':99}]},"
                  "{'name':'c','input':'C2','table':'T','ops':[{'op':'fill_null','value':0},{'op':'map_id','map':[5,99,0]}]},"
                  "{'name':'e','input':'I4','table':'T','ops':[{'op':'fill_null','value':0},{'op':'cast','to':'f32'},{'op':'bucketize','borders':[1,2,2,3]}]},"
                  "{'name':'f','input':'a','table':'T','ops':[{'op':'clamp','max':10}]},"
                  "{'name':'g','input':'a','table':'T','ops':[{'op':'fill_null','value':99}]}]}");
    CHECK(st == REC_OK, "parse: %s", rec_errmsg());
    if (st) return;
    const rec_feature *x = &s->features[0];
    CHECK(strcmp(x->name, "x") == 0 && x->kind == REC_FEAT_NODE && x->n_inputs == 2 && x->inputs[0] == -14 &&
          x->inputs[1] == -2, "node first, raw inputs encoded");
    CHECK(x->out_type.dtype == REC_DT_I64 && x->out_type.is_list && x->out_type.nullable && x->out_type.bound == -1,
          "concatenation is a nullable unbounded list");
    const rec_feature *a = rec_spec_sparse(s, 0), *b = rec_spec_sparse(s, 1), *c = rec_spec_sparse(s, 2),
                      *e = rec_spec_sparse(s, 3), *f = rec_spec_sparse(s, 4), *g = rec_spec_sparse(s, 5);
    CHECK(a->out_type.bound == 50 && a->out_type.is_list && a->inputs[0] == 0, "modulo bound");
    CHECK(!b->out_type.is_list && b->out_type.bound == -1 + 101, "clamp bound %lld", (long long)b->out_type.bound);
    CHECK(c->out_type.bound == 100 && c->out_type.is_list, "map_id bound");
    CHECK(e->out_type.bound == 5 && !e->out_type.is_list && e->out_type.dtype == REC_DT_I64, "bucketize bound");
    CHECK(f->out_type.bound == 11, "clamp max on bounded ids: %lld", (long long)f->out_type.bound);
    CHECK(g->out_type.bound == 50, "fill_null on non-null ids keeps the bound");
    CHECK(s->n_dense == 0 && s->n_sparse == 6 && topo_ok(s), "shape");
    CHECK(rec_spec_table_rows(s, 5) == 100 && rec_spec_sparse(s, 6) == NULL, "rows / out of range");
    rec_spec_free(s);

    /* fill_null with a large value raises the bound; a table just big enough passes. */
    CHECK(parse_q(&s, SPARSE("C1", "1461", "{'op':'modulo','divisor':1460},{'op':'fill_null','value':1460}")) == REC_OK,
          "%s", rec_errmsg());
    rec_spec_free(s);
    /* Output named like a raw column, and an f32 node feeding dense outputs unchanged. */
    CHECK(parse_q(&s, HEAD "'nodes':[{'name':'n','input':'I1','ops':[" DFN "]}],"
                  "'dense':[{'name':'I1','input':'n'},{'name':'I2','input':'n','ops':[{'op':'onehot','num_class':3,'min':0,'max':3}]}]}") == REC_OK,
          "%s", rec_errmsg());
    if (s) CHECK(s->n_dense == 4 && s->features[0].kind == REC_FEAT_NODE, "Dn %d", s->n_dense);
    rec_spec_free(s);
    /* Whitespace after the object and a trailing NUL are fine; defaults apply. */
    const char *ok = "{\"format\":\"rectrain-prep\",\"version\":1,\"dense\":[{\"name\":\"d\",\"input\":\"I1\",\"ops\":["
                     "{\"op\":\"fill_null\",\"value\":0},{\"op\":\"cast\",\"to\":\"f32\"},{\"op\":\"logit\"}]}]}\n  \n";
    CHECK(rec_spec_parse(&s, ok, strlen(ok) + 1, "t.json") == REC_OK, "%s", rec_errmsg());
    if (s) CHECK(strcmp(s->name, "spec") == 0 && s->features[0].ops[2].eps == 1e-5, "defaults");
    rec_spec_free(s);
}

static void test_rejections(void) {
    /* Document level. */
    REJECT("{'format':'rectrain-prep','version':1,\n 'dense': [\n  {'name': 'd',, }\n]}", "not valid JSON near line 3");
    REJECT(DENSE(DFN) " x", "text after the end");
    REJECT("[1,2]", "$: must be an object");
    REJECT("{'version':1}", "$.format: missing");
    REJECT("{'format':'rectrain-shard','version':1}", "$.format: must be \"rectrain-prep\"");
    REJECT("{'format':'rectrain-prep','version':2,'dense':[]}", "$.version: unsupported version 2");
    REJECT("{'format':'rectrain-prep'}", "$.version: missing");
    REJECT(HEAD "'dence':[]}", "$.dence: unknown key");
    REJECT(HEAD "'dense':[],'sparse':[]}", "$: no outputs");
    REJECT(HEAD "'name':'u','dense':[]}", "$.name: duplicate key");
    REJECT("{'format':'rectrain-prep','version':1,'name':'a b','dense':[]}", "$.name: \"a b\" has a character");
    REJECT(HEAD "'dense':{}}", "$.dense: must be an array");
    /* Features. */
    REJECT(HEAD "'dense':[{'name':'d','input':'I1','opz':[]}]}", "$.dense[0].opz: unknown key");
    REJECT(HEAD "'dense':[{'name':'d','input':'I1','table':'T'}]}", "$.dense[0].table: unknown key");
    REJECT(HEAD "'dense':[{'input':'I1'}]}", "$.dense[0].name: missing");
    REJECT(HEAD "'dense':[{'name':'d'}]}", "$.dense[0]: missing \"input\"");
    REJECT(HEAD "'dense':[{'name':'d','input':'I1','inputs':['I2']}]}", "$.dense[0].inputs: give either");
    REJECT(HEAD "'dense':[{'name':'d','inputs':[]}]}", "$.dense[0].inputs: must be an array of 1 to 16");
    REJECT(HEAD "'dense':[{'name':'d','input':'I1','ops':{}}]}", "$.dense[0].ops: must be an array");
    REJECT(HEAD "'dense':[{'name':'d','input':'I1','ops':[3]}]}", "$.dense[0].ops[0]: must be an object");
    /* Ops: unknown, unknown key, missing name. */
    REJECT(DENSE(DFN ",{'op':'log2'}"), "$.dense[0].ops[2].op: unknown operator \"log2\"");
    REJECT(DENSE("{'op':'fill_null','vlaue':0}"), "$.dense[0].ops[0].vlaue: unknown key");
    REJECT(DENSE("{'value':0}"), "$.dense[0].ops[0].op: missing");
    /* Params of every op. */
    REJECT(DENSE("{'op':'fill_null','value':'0'}"), "$.dense[0].ops[0].value: must be a finite number (got the string");
    REJECT(DENSE("{'op':'fill_null'}"), "$.dense[0].ops[0].value: missing");
    REJECT(SPARSE("C1", "10", "{'op':'fill_null','value':0.5},{'op':'modulo','divisor':10}"),
           "$.sparse[0].ops[0].value: must be an integer");
    REJECT(DENSE("{'op':'fill_null','value':0},{'op':'cast','to':'f64'}"), "$.dense[0].ops[1].to: must be \"f32\" or \"i64\"");
    REJECT(DENSE(DFN ",{'op':'logit','eps':0.7}"), "$.dense[0].ops[2].eps: must be in (0, 0.5)");
    REJECT(DENSE(DFN ",{'op':'boxcox'}"), "$.dense[0].ops[2].lambda: missing");
    REJECT(DENSE(DFN ",{'op':'boxcox','lambda':true}"), "$.dense[0].ops[2].lambda: must be a finite number (got true)");
    REJECT(DENSE(DFN ",{'op':'log1p','base':2}"), "$.dense[0].ops[2].base: unknown key");
    REJECT(DENSE(DFN ",{'op':'onehot','num_class':0,'min':0,'max':1}"), "$.dense[0].ops[2].num_class: must be an integer from 1 to 4096 (got 0)");
    REJECT(DENSE(DFN ",{'op':'onehot','num_class':4,'min':1,'max':1}"), "$.dense[0].ops[2].max: must be greater than min");
    REJECT(DENSE(DFN ",{'op':'onehot','num_class':4,'max':1}"), "$.dense[0].ops[2].min: missing");
    REJECT(SPARSE("C1", "10", "{'op':'fill_null','value':0},{'op':'sigrid_hash','max_value':-5}"),
           "$.sparse[0].ops[1].max_value: must be a positive integer (got -5)");
    REJECT(SPARSE("C1", "10", "{'op':'fill_null','value':0},{'op':'sigrid_hash','salt':1.5,'max_value':10}"),
           "$.sparse[0].ops[1].salt: must be an integer");
    REJECT(SPARSE("C1", "10", "{'op':'fill_null','value':0},{'op':'modulo','divisor':10},{'op':'firstx','x':0}"),
           "$.sparse[0].ops[2].x: must be a positive integer (got 0)");
    REJECT(DENSE(DFN ",{'op':'clamp'}"), "$.dense[0].ops[2]: clamp needs");
    REJECT(DENSE(DFN ",{'op':'clamp','min':2,'max':1}"), "$.dense[0].ops[2].max: must be at least min");
    REJECT(SPARSE("I1", "10", "{'op':'fill_null','value':0},{'op':'clamp','min':0.5,'max':9}"),
           "$.sparse[0].ops[1].min: must be an integer when clamping i64");
    REJECT(DENSE(DFN ",{'op':'bucketize','borders':[]}"), "$.dense[0].ops[2].borders: must be an array of 1 to");
    REJECT(DENSE(DFN ",{'op':'bucketize','borders':[1,3,2]}"), "$.dense[0].ops[2].borders[2]: borders must be non-decreasing");
    REJECT(DENSE(DFN ",{'op':'bucketize','borders':[1,2,2,2]}"), "$.dense[0].ops[2].borders[3]: border 2 appears more than twice");
    REJECT(DENSE(DFN ",{'op':'bucketize','borders':[1,'x']}"), "$.dense[0].ops[2].borders[1]: must be a finite number");
    REJECT(DENSE(DFN ",{'op':'bucketize','borders':[1,1e999]}"), "$.dense[0].ops[2].borders[1]: must be a finite number");
    REJECT(SPARSE("C1", "10", "{'op':'fill_null','value':0},{'op':'modulo','divisor':10},{'op':'ngram','n':0}"),
           "$.sparse[0].ops[2].n: must be an integer from 1 to 256 (got 0)");
    REJECT(SPARSE("C1", "10", "{'op':'fill_null','value':0},{'op':'map_id','map':[1,-2]}"),
           "$.sparse[0].ops[1].map[1]: must be an integer >= 0 (got -2)");
    REJECT(SPARSE("C1", "10", "{'op':'fill_null','value':0},{'op':'map_id','map':[]}"),
           "$.sparse[0].ops[1].map: must be a non-empty array");
    REJECT(SPARSE("C1", "10", "{'op':'fill_null','value':0},{'op':'modulo','divisor':0}"),
           "$.sparse[0].ops[1].divisor: must be a positive integer (got 0)");
    REJECT(SPARSE("C1", "10", "{'op':'fill_null','value':0},{'op':'modulo'}"), "$.sparse[0].ops[1].divisor: missing");
    REJECT(SPARSE("C1", "'auto'", "{'op':'fill_null','value':0},{'op':'categorify','min_count':0}"),
           "$.sparse[0].ops[1].min_count: must be a positive integer (got 0)");
    /* Type mismatches. */
    REJECT(SPARSE("C1", "10", "{'op':'fill_null','value':0},{'op':'log1p'}"), "$.sparse[0].ops[1]: log1p needs f32 values of width 1 but gets i64 id lists");
    REJECT(DENSE(DFN ",{'op':'modulo','divisor':3}"), "$.dense[0].ops[2]: modulo works on i64 ids but gets f32");
    REJECT(DENSE(DFN ",{'op':'onehot','num_class':4,'min':0,'max':1},{'op':'onehot','num_class':4,'min':0,'max':1}"),
           "$.dense[0].ops[3]: onehot needs f32 values of width 1 without nulls but gets f32 values of width 4");
    REJECT(DENSE("{'op':'cast','to':'f32'},{'op':'onehot','num_class':4,'min':0,'max':1}"), "$.dense[0].ops[1]: onehot needs f32 values of width 1 without nulls but gets f32 values of width 1 (nullable)");
    REJECT(DENSE(DFN ",{'op':'onehot','num_class':4,'min':0,'max':1},{'op':'log1p'}"), "$.dense[0].ops[3]: log1p needs f32 values of width 1");
    REJECT(SPARSE("I1", "10", "{'op':'fill_null','value':0},{'op':'modulo','divisor':10},{'op':'firstx','x':1}"),
           "$.sparse[0].ops[2]: firstx works on i64 id lists but gets i64 ids (one per row)");
    REJECT(SPARSE("I1", "10", "{'op':'fill_null','value':0},{'op':'modulo','divisor':10},{'op':'ngram','n':2}"),
           "$.sparse[0].ops[2]: ngram works on i64 id lists");
    REJECT(HEAD "'dense':[{'name':'d','input':'C1','ops':[" DFN "]}]}", "$.dense[0].ops[1]: cast to f32 needs one id per row but gets i64 id lists");
    REJECT(SPARSE("C1", "10", "{'op':'fill_null','value':0},{'op':'bucketize','borders':[1]}"), "$.sparse[0].ops[1]: bucketize needs");
    REJECT(HEAD "'nodes':[{'name':'n','input':'I1','ops':[" DFN "]}],'dense':[{'name':'d','inputs':['n','I2']}]}",
           "$.dense[0].inputs[0]: \"n\" gives f32 values of width 1, but several inputs are concatenated");
    REJECT(DENSE("{'op':'fill_null','value':0}"), "$.dense[0]: dense output \"d\" ends as i64 ids (one per row) but must be f32");
    REJECT(DENSE("{'op':'cast','to':'f32'}"), "$.dense[0]: dense output \"d\" ends as f32 values of width 1 (nullable)");
    REJECT(SPARSE("C1", "10", "{'op':'modulo','divisor':10}"), "$.sparse[0]: sparse output \"s\" ends as i64 id lists (nullable)");
    REJECT(HEAD "'tables':{'T':{'rows':10}},'sparse':[{'name':'s','input':'I1','table':'T','ops':[" DFN "]}]}",
           "$.sparse[0]: sparse output \"s\" ends as f32");
    REJECT(DENSE(DFN ",{'op':'onehot','num_class':4,'min':0,'max':1},{'op':'fill_null','value':0}"), "$.dense[0].ops[3]: fill_null works on f32 of width 1");
    REJECT(DENSE(DFN ",{'op':'onehot','num_class':4,'min':0,'max':1},{'op':'cast','to':'i64'}"), "$.dense[0].ops[3]: cast to i64 needs f32 of width 1");
    /* Names and inputs. */
    REJECT(HEAD "'dense':[{'name':'d','input':'I14','ops':[" DFN "]}]}", "$.dense[0].input: unknown input \"I14\"");
    REJECT(HEAD "'dense':[{'name':'d','inputs':['I1','C27'],'ops':[" DFN "]}]}", "$.dense[0].inputs[1]: unknown input \"C27\"");
    REJECT(HEAD "'dense':[{'name':'d','input':'label','ops':[" DFN "]}]}", "$.dense[0].input: \"label\" is not an input");
    REJECT(HEAD "'dense':[{'name':'d','input':'I1','ops':[" DFN "]},{'name':'d','input':'I2','ops':[" DFN "]}]}",
           "$.dense[1].name: duplicate name \"d\" (also $.dense[0])");
    REJECT(HEAD "'nodes':[{'name':'C1','input':'I1'}],'dense':[{'name':'d','input':'I2','ops':[" DFN "]}]}",
           "$.nodes[0].name: \"C1\" is a raw column name");
    REJECT(HEAD "'nodes':[{'name':'a','input':'b'},{'name':'b','input':'a'}],'dense':[{'name':'d','input':'a','ops':[" DFN "]}]}",
           "$.nodes[0]: inputs form a cycle (a <- b <- a");
    REJECT(HEAD "'dense':[{'name':'d','input':'d','ops':[" DFN "]}]}", "$.dense[0]: inputs form a cycle (d <- d");
    REJECT(HEAD "'nodes':[{'name':'x','input':'I1'},{'name':'y','input':'x'}],'dense':[{'name':'d','input':'I1','ops':[" DFN "]}]}",
           "$.nodes[0]: node \"x\" is not used by any dense or sparse output");
    /* Tables. */
    REJECT(SPARSE("C4", "1460", "{'op':'fill_null','value':0},{'op':'modulo','divisor':2000}"),
           "$.sparse[0]: ids reach 2000 (they lie in [0, 2000)) but table \"T\" has 1460 rows");
    REJECT(SPARSE("C4", "1460", "{'op':'fill_null','value':0}"), "$.sparse[0]: ids are unbounded");
    REJECT(HEAD "'tables':{'T':{'rows':10}},'sparse':[{'name':'s','input':'C1','ops':[]}]}", "$.sparse[0].table: missing");
    REJECT(HEAD "'tables':{'T':{'rows':10}},'sparse':[{'name':'s','input':'C1','table':'U','ops':[{'op':'fill_null','value':0},{'op':'modulo','divisor':10}]}]}",
           "$.sparse[0].table: unknown table \"U\"");
    REJECT(HEAD "'sparse':[{'name':'s','input':'C1','table':'U'}]}", "$.tables: missing");
    REJECT(HEAD "'tables':{'T':{'rows':10},'V':{'rows':3}},'sparse':[{'name':'s','input':'C1','table':'T','ops':[{'op':'fill_null','value':0},{'op':'modulo','divisor':10}]}]}",
           "$.tables.V: not used by any sparse output");
    REJECT(SPARSE("C1", "0", "{'op':'fill_null','value':0},{'op':'modulo','divisor':10}"), "$.tables.T.rows: must be a positive integer or \"auto\" (got 0)");
    REJECT(SPARSE("C1", "'many'", "{'op':'fill_null','value':0},{'op':'modulo','divisor':10}"), "$.tables.T.rows: must be a positive integer or \"auto\"");
    REJECT(HEAD "'tables':{'T':{'rows':10,'dim':4}},'sparse':[]}", "$.tables.T.dim: unknown key");
    REJECT(HEAD "'tables':{'T':{'rows':10},'T':{'rows':10}},'sparse':[]}", "$.tables.T: duplicate table");
    REJECT(HEAD "'tables':{'T':3},'sparse':[]}", "$.tables.T: must be an object");
    /* Categorify. */
    REJECT(SPARSE("C1", "'auto'", "{'op':'fill_null','value':0},{'op':'categorify'},{'op':'firstx','x':1}"),
           "$.sparse[0].ops[1]: categorify must be the last op");
    REJECT(SPARSE("C1", "10", "{'op':'fill_null','value':0},{'op':'categorify'}"), "$.sparse[0]: ends with categorify");
    REJECT(SPARSE("C1", "'auto'", "{'op':'fill_null','value':0},{'op':'modulo','divisor':10}"), "$.sparse[0]: table \"T\" has \"rows\": \"auto\"");
    REJECT(HEAD "'tables':{'T':{'rows':'auto'}},'sparse':[{'name':'s','input':'C1','table':'T','ops':[{'op':'fill_null','value':0},{'op':'categorify'}]},"
                "{'name':'t','input':'s','table':'T','ops':[{'op':'firstx','x':1}]}]}",
           "$.sparse[1].input: reads \"s\", which ends with categorify");
}

/* An "auto" table fed by two categorify outputs gets the larger vocabulary's V+1 rows;
 * binding again with other vocabularies resizes it. */
static void test_shared_auto_table(void) {
    rec_spec *s = NULL;
    rec_status st = parse_q(&s, HEAD "'tables':{'V':{'rows':'auto'},'W':{'rows':8}},"
        "'sparse':[{'name':'a','input':'C1','table':'V','ops':[{'op':'fill_null','value':0},{'op':'categorify'}]},"
                  "{'name':'w','input':'C3','table':'W','ops':[{'op':'fill_null','value':0},{'op':'modulo','divisor':8}]},"
                  "{'name':'b','inputs':['C2','I1'],'table':'V','ops':[{'op':'fill_null','value':0},{'op':'categorify','min_count':5}]}]}");
    CHECK(st == REC_OK, "parse: %s", rec_errmsg());
    if (st) return;
    CHECK(s->n_vocabs == 2 && rec_spec_sparse(s, 2)->ops[1].vocab_slot == 1 && rec_spec_sparse(s, 2)->ops[1].min_count == 5,
          "slots and min_count");
    int64_t ids[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    for (int round = 0; round < 2; round++) {
        rec_vocab_set vs = {2, calloc(2, sizeof(rec_vocab *))};
        CHECK(rec_vocab_from_ids(&vs.v[0], ids, round ? 10 : 3) == REC_OK && rec_vocab_from_ids(&vs.v[1], ids, round ? 2 : 9) == REC_OK, "vocabs");
        CHECK(rec_spec_bind_vocabs(s, &vs) == REC_OK, "bind: %s", rec_errmsg());
        CHECK(rec_spec_table_rows(s, 0) == (round ? 11 : 10) && rec_spec_table_rows(s, 2) == rec_spec_table_rows(s, 0) &&
              rec_spec_table_rows(s, 1) == 8, "round %d rows %lld", round, (long long)rec_spec_table_rows(s, 0));
        CHECK(rec_spec_sparse(s, 2)->out_type.bound == (round ? 3 : 10), "bound of b");
        rec_vocab_set_free(&vs);
    }
    rec_vocab_set none = {2, NULL};
    CHECK_ERR(rec_spec_bind_vocabs(s, &none), REC_EINVAL, "vocabulary 0 is missing");
    rec_spec_free(s);
}

static void test_load_errors(void) {
    rec_spec *s = NULL;
    CHECK_ERR(rec_spec_load(&s, "/nonexistent/dir/spec.json"), REC_EIO, "/nonexistent/dir/spec.json: cannot open");
    CHECK(s == NULL, "no spec");
    CHECK_ERR(rec_spec_parse(&s, "", 0, "empty.json"), REC_EINVAL, "empty.json: not valid JSON near line 1");
    CHECK_ERR(rec_spec_parse(&s, "{\n\n\"a\" 1}", 9, "x.json"), REC_EINVAL, "not valid JSON near line 3");
}

/* Two categorified features a (over a_in, ops a_ops then categorify) and b (C2, min_count
 * b_min), named by na and nb, into tables TA and TB. */
#define CAT2(na, a_in, a_ops, nb, b_min)                                                                   \
    HEAD "'tables':{'TA':{'rows':'auto'},'TB':{'rows':'auto'}},'sparse':[{'name':'" na "','input':'" a_in \
         "','table':'TA','ops':[" a_ops "{'op':'categorify','min_count':1}]},{'name':'" nb                 \
         "','input':'C2','table':'TB','ops':[{'op':'fill_null','value':0},{'op':'categorify','min_count':" \
         b_min "}]}]}"
#define FN0 "{'op':'fill_null','value':0},"

/* The signatures of vocabularies 0 and 1 of spec q (0, 0 when it does not parse). */
static void vocab_sigs_of(const char *q, uint64_t sig[2]) {
    rec_spec *s = NULL;
    sig[0] = sig[1] = 0;
    CHECK(parse_q(&s, q) == REC_OK, "%s", rec_errmsg());
    if (!s) return;
    CHECK(s->n_vocabs == 2 && rec_spec_vocab_sigs(s, sig) == REC_OK, "%s", rec_errmsg());
    CHECK(rec_spec_vocab_feature(s, 2) == NULL, "no third vocabulary");
    rec_spec_free(s);
}

/* rec_spec_vocab_sigs (what --vocab-from checks): the raw columns, ops and min_count that fill
 * a vocabulary, not the names of features and tables. */
static void test_vocab_sigs(void) {
    uint64_t base[2], x[2];
    vocab_sigs_of(CAT2("a", "C1", FN0, "b", "1"), base);
    CHECK(base[0] && base[1] && base[0] != base[1], "two columns, two signatures: %016llx %016llx",
          (unsigned long long)base[0], (unsigned long long)base[1]);
    vocab_sigs_of(CAT2("x", "C1", FN0, "y", "1"), x);
    CHECK(x[0] == base[0] && x[1] == base[1], "renamed features sign alike");
    vocab_sigs_of(CAT2("a", "C3", FN0, "b", "1"), x);
    CHECK(x[0] != base[0] && x[1] == base[1], "another input column signs vocabulary 0 otherwise, not 1");
    vocab_sigs_of(CAT2("a", "C1", "{'op':'fill_null','value':5},", "b", "1"), x);
    CHECK(x[0] != base[0] && x[1] == base[1], "another fill_null value signs vocabulary 0 otherwise");
    vocab_sigs_of(CAT2("a", "C1", FN0 "{'op':'modulo','divisor':1000},", "b", "1"), x);
    CHECK(x[0] != base[0], "one more op signs vocabulary 0 otherwise");
    vocab_sigs_of(CAT2("a", "C1", FN0, "b", "2"), x);
    CHECK(x[0] == base[0] && x[1] != base[1], "another min_count signs vocabulary 1 otherwise, not 0");
    /* Ops behind a node count: C1 filled with 0, then with 5 (the second fill does nothing,
     * but the chain differs, and the signature says so rather than guess). */
    vocab_sigs_of(HEAD "'nodes':[{'name':'n','input':'C1','ops':[{'op':'fill_null','value':0}]}],"
                       "'tables':{'TA':{'rows':'auto'},'TB':{'rows':'auto'}},'sparse':["
                       "{'name':'a','input':'n','table':'TA','ops':[{'op':'categorify','min_count':1}]},"
                       "{'name':'b','input':'C2','table':'TB','ops':[{'op':'fill_null','value':0},{'op':'categorify','min_count':1}]}]}",
                  x);
    uint64_t y[2];
    vocab_sigs_of(HEAD "'nodes':[{'name':'n','input':'C1','ops':[{'op':'fill_null','value':7}]}],"
                       "'tables':{'TA':{'rows':'auto'},'TB':{'rows':'auto'}},'sparse':["
                       "{'name':'a','input':'n','table':'TA','ops':[{'op':'categorify','min_count':1}]},"
                       "{'name':'b','input':'C2','table':'TB','ops':[{'op':'fill_null','value':0},{'op':'categorify','min_count':1}]}]}",
                  y);
    CHECK(x[0] && y[0] && x[0] != y[0] && x[1] == base[1] && y[1] == base[1],
          "a node's op parameters sign the vocabulary fed through it");
}

int main(void) {
    test_standard();
    test_vocab();
    test_rap();
    test_types();
    test_rejections();
    test_shared_auto_table();
    test_load_errors();
    test_vocab_sigs();
    return check_report();
}
