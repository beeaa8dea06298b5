/* Schedules, candidates, plans and the tuner of the embedding engine (embed.h).
 *
 * The candidate space is one universe of forward schedules (split x kernel x prefetch x
 * grain: SAMPLE 3 x 4 x 2, TABLE 3 x 4, ROW only FIXED and ROW_GRAIN x 4 = 40) and one of
 * backward schedules (sort x prefetch = 3 x 3 = 9). A table's candidates are the universe's
 * members that differ FOR IT (embed_sched_effective folds kernels it has no code path for
 * into GENERIC, ROW into SAMPLE on dims FIXED has no code for, and COUNT and DENSE into RADIX
 * on tables too large for them), so a dim-8 table has 28 forward candidates (BLOCKED runs
 * GENERIC below dim 16), a dim-24 one 24 (FIXED has no dim 24, so neither has ROW) and a
 * dim-16 one all 40.
 * Keeping the universe index of each candidate lets the tuner score a uniform schedule (one
 * universe member for all tables) from the same measurements.
 *
 * The tuner follows RecFlex §IV-A (digest §3.2): the local stage times each table's
 * candidates inside full fused passes (all tables tuned at once, so each measurement carries
 * the interference of the others), over `reps` batches each (eq. 5, each candidate scored by
 * its least time per id); the global stage times a handful of whole plans, in turns (eq. 4).
 * A CPU has no occupancy to fix, so the global candidates are the plan choices whose effect
 * is not local to one table: whether tables may keep whole tables on one thread (load
 * balance), and as guards the best uniform schedules and the plan tuning started from.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "embed_impl.h"
#include "rectrain/core.h"

static const uint8_t FWD_PF[] = {0, 4, 16, 48};
static const uint8_t FWD_GRAIN[] = {9, 12};
/* ROW's grain in the universe: it only cuts the SAMPLE items ROW falls back to, where it is
 * as fast as TABLE and keeps a large multi-hot table from holding one thread (forward, pf0,
 * in turns: A 36.0 ms at g12 against 36.3 TABLE and 39.3 g9; C 41.6 / 40.3 / 42.7; D 12.8 /
 * 12.1 / 15.2; E 21.4 / 20.6 / 23.2), and a multi-hot table's other grains are SAMPLE's. */
enum { ROW_GRAIN = 12 };
static const uint8_t BWD_PF[] = {0, 8, 32};
/* The global stage's whole-plan timings are wall clock over short passes (0.1 ms for a Kaggle
 * batch), so each plan gets 3x the local stage's calls and keeps its best one. */
enum { GRAIN_TABLE = 10, MAX_FWD_U = 40, MAX_BWD_U = 9, N_GLOBAL = REC_EMBED_GLOBAL_CANDIDATES, GLOBAL_REPS_FACTOR = 3 };

/* ---- schedules ------------------------------------------------------------------------------ */

rec_embed_sched rec_embed_sched_default(void) {
    return (rec_embed_sched){REC_SPLIT_ROW, REC_KERN_FIXED, 0, ROW_GRAIN, REC_SORT_DENSE, 8};
}

static const char *const SPLIT_NAMES[] = {"sample", "table", "row"};
static const char *const KERN_NAMES[] = {"generic", "fixed", "blocked"};
static const char *const SORT_NAMES[] = {"radix", "count", "dense"};

const char *rec_embed_sched_name(rec_embed_sched s, char *buf, size_t cap) {
    const char *sp = s.split <= 2 ? SPLIT_NAMES[s.split] : "?", *k = s.kernel <= 2 ? KERN_NAMES[s.kernel] : "?";
    const char *so = s.sort <= 2 ? SORT_NAMES[s.sort] : "?";
    if (s.split == REC_SPLIT_TABLE)
        snprintf(buf, cap, "%s/%s/pf%d+%s/pf%d", sp, k, s.pf, so, s.bpf);
    else
        snprintf(buf, cap, "%s/%s/pf%d/g%d+%s/pf%d", sp, k, s.pf, s.grain, so, s.bpf);
    return buf;
}

/* Index of `word` (length n) in names[0..count), or -1. */
static int lookup(const char *word, size_t n, const char *const *names, int count) {
    for (int i = 0; i < count; i++)
        if (strlen(names[i]) == n && !strncmp(word, names[i], n)) return i;
    return -1;
}

/* Parses "<prefix><digits>" at *p up to the next '/', '+' or end into *v (<= max). */
static int parse_num(const char **p, const char *prefix, int max, int *v) {
    const size_t n = strlen(prefix);
    if (strncmp(*p, prefix, n)) return 0;
    const char *q = *p + n;
    if (*q < '0' || *q > '9') return 0;
    long x = 0;
    while (*q >= '0' && *q <= '9' && x <= max) x = x * 10 + (*q++ - '0');
    if (x > max || (*q && *q != '/' && *q != '+')) return 0;
    *v = (int)x;
    *p = q;
    return 1;
}

rec_status rec_embed_sched_parse(const char *text, rec_embed_sched *out) {
    rec_embed_sched s = rec_embed_sched_default();
    const char *p = text;
    const char *bad = NULL;
    int v = 0;
    size_t n = strcspn(p, "/+");
    int i = lookup(p, n, SPLIT_NAMES, 3);
    if (i < 0) bad = "the split (want sample, table or row)";
    else {
        s.split = (uint8_t)i;
        p += n;
    }
    if (!bad && *p++ == '/') {
        n = strcspn(p, "/+");
        i = lookup(p, n, KERN_NAMES, 3);
        if (i < 0) bad = "the kernel (want generic, fixed or blocked)";
        else s.kernel = (uint8_t)i, p += n;
    } else if (!bad) bad = "the kernel (want generic, fixed or blocked)";
    if (!bad && !(*p++ == '/' && parse_num(&p, "pf", 64, &v))) bad = "the prefetch distance (want pf0..pf64)";
    if (!bad) s.pf = (uint8_t)v;
    if (!bad && s.split != REC_SPLIT_TABLE) {
        if (!(*p++ == '/' && parse_num(&p, "g", REC_EMBED_GRAIN_MAX, &v) && v >= REC_EMBED_GRAIN_MIN))
            bad = "the grain (want g6..g16)";
        else s.grain = (uint8_t)v;
    }
    if (!bad && *p++ == '+') {
        n = strcspn(p, "/+");
        i = lookup(p, n, SORT_NAMES, 3);
        if (i < 0) bad = "the sort (want radix, count or dense)";
        else s.sort = (uint8_t)i, p += n;
    } else if (!bad) bad = "'+' and the backward schedule";
    if (!bad && !(*p++ == '/' && parse_num(&p, "pf", 64, &v))) bad = "the backward prefetch distance (want pf0..pf64)";
    if (!bad) s.bpf = (uint8_t)v;
    if (!bad && *p) bad = "the end of the schedule";
    if (bad)
        return rec_errorf(REC_EINVAL,
                          "schedule \"%.80s\": cannot read %s; the form is split/kernel/pfN[/gN]+sort/pfN (gN for "
                          "sample and row), e.g. \"sample/fixed/pf8/g10+radix/pf8\"",
                          text, bad);
    *out = s;
    return REC_OK;
}

int embed_sort_fits(const rec_embed *e, int f, int sort) {
    if (sort == REC_SORT_COUNT) return e->rows[f] <= REC_EMBED_COUNT_MAX_ROWS;
    if (sort == REC_SORT_DENSE) return e->rows[f] <= REC_EMBED_DENSE_MAX_FLOATS / e->dims[f];
    return 1;
}

rec_embed_sched embed_sched_effective(const rec_embed *e, int f, rec_embed_sched s) {
    if (s.split == REC_SPLIT_ROW && !embed_kernel_native(REC_KERN_FIXED, e->dims[f])) s.split = REC_SPLIT_SAMPLE;
    if (!embed_kernel_native(s.kernel, e->dims[f])) s.kernel = REC_KERN_GENERIC;
    if (s.split == REC_SPLIT_TABLE) s.grain = GRAIN_TABLE;
    if (!embed_sort_fits(e, f, s.sort)) s.sort = REC_SORT_RADIX;
    return s;
}

int embed_sched_equal(rec_embed_sched a, rec_embed_sched b) {
    return a.split == b.split && a.kernel == b.kernel && a.pf == b.pf && a.grain == b.grain && a.sort == b.sort &&
           a.bpf == b.bpf;
}

static rec_status check_sched(const rec_embed *e, int f, rec_embed_sched s) {
    const char *bad = s.split > REC_SPLIT_ROW ? "split" : s.kernel > REC_KERN_BLOCKED ? "kernel"
                      : s.pf > 64 ? "pf" : s.grain < REC_EMBED_GRAIN_MIN || s.grain > REC_EMBED_GRAIN_MAX ? "grain"
                      : s.sort > REC_SORT_DENSE ? "sort" : s.bpf > 64 ? "bpf" : NULL;
    if (bad) return rec_errorf(REC_EINVAL, "embedding table %d: schedule field %s is out of range (see embed.h)", f, bad);
    if (s.sort == REC_SORT_COUNT && !embed_sort_fits(e, f, s.sort))
        return rec_errorf(REC_EINVAL, "embedding table %d: COUNT sort needs at most %d rows; the table has %lld (use radix)",
                          f, REC_EMBED_COUNT_MAX_ROWS, (long long)e->rows[f]);
    if (s.sort == REC_SORT_DENSE && !embed_sort_fits(e, f, s.sort))
        return rec_errorf(REC_EINVAL,
                          "embedding table %d: DENSE backward needs rows x dim <= %d; the table is %lld x %d (use radix)",
                          f, REC_EMBED_DENSE_MAX_FLOATS, (long long)e->rows[f], e->dims[f]);
    return REC_OK;
}

rec_status rec_embed_set_sched(rec_embed *e, int f, rec_embed_sched s) {
    if (f < 0 || f >= e->F) return rec_errorf(REC_EINVAL, "embedding: table %d does not exist (%d tables)", f, e->F);
    REC_TRY(check_sched(e, f, s));
    e->sched[f] = s;
    return REC_OK;
}

rec_embed_sched rec_embed_get_sched(const rec_embed *e, int f) {
    return f >= 0 && f < e->F ? e->sched[f] : rec_embed_sched_default();
}

void rec_embed_set_uniform(rec_embed *e, rec_embed_sched s) {
    for (int f = 0; f < e->F; f++) {
        rec_embed_sched t = s;
        if (!embed_sort_fits(e, f, t.sort)) t.sort = REC_SORT_RADIX;
        e->sched[f] = t;
    }
}

/* ---- candidates ----------------------------------------------------------------------------- */

/* The forward universe with base's backward fields; returns its size (MAX_FWD_U). ROW has
 * its own pass, so its kernel only matters when a batch sends it to SAMPLE items: FIXED, the
 * one ROW's dims have. */
static int fwd_universe(rec_embed_sched base, rec_embed_sched *u) {
    int n = 0;
    for (int sp = 0; sp < 3; sp++)
        for (int k = 0; k < 3; k++) {
            if (sp == REC_SPLIT_ROW && k != REC_KERN_FIXED) continue;
            for (size_t p = 0; p < sizeof FWD_PF; p++)
                for (size_t g = 0; g < (sp == REC_SPLIT_SAMPLE ? sizeof FWD_GRAIN : 1); g++) {
                    rec_embed_sched s = base;
                    s.split = (uint8_t)sp;
                    s.kernel = (uint8_t)k;
                    s.pf = FWD_PF[p];
                    s.grain = sp == REC_SPLIT_SAMPLE ? FWD_GRAIN[g] : sp == REC_SPLIT_ROW ? ROW_GRAIN : GRAIN_TABLE;
                    u[n++] = s;
                }
        }
    return n;
}

static int bwd_universe(rec_embed_sched base, rec_embed_sched *u) {
    int n = 0;
    for (int so = 0; so < 3; so++)
        for (size_t p = 0; p < sizeof BWD_PF; p++) {
            rec_embed_sched s = base;
            s.sort = (uint8_t)so;
            s.bpf = BWD_PF[p];
            u[n++] = s;
        }
    return n;
}

/* Table f's distinct effective candidates among the universe u (n): writes them to out (at
 * most cap) and, if map is not NULL, each universe member's candidate index to map. */
static int distinct(const rec_embed *e, int f, const rec_embed_sched *u, int n, rec_embed_sched *out, int cap,
                    int16_t *map) {
    int m = 0;
    for (int i = 0; i < n; i++) {
        const rec_embed_sched s = embed_sched_effective(e, f, u[i]);
        int k = 0;
        while (k < m && !embed_sched_equal(out[k], s)) k++;
        if (k == m && m < cap) out[m++] = s;
        if (map) map[i] = (int16_t)k;
    }
    return m;
}

int rec_embed_fwd_universe(rec_embed_sched *out, int cap) {
    rec_embed_sched u[MAX_FWD_U];
    const int n = fwd_universe(rec_embed_sched_default(), u);
    memcpy(out, u, (size_t)(n < cap ? n : cap) * sizeof *u);
    return n < cap ? n : cap;
}

int rec_embed_bwd_universe(rec_embed_sched *out, int cap) {
    rec_embed_sched u[MAX_BWD_U];
    const int n = bwd_universe(rec_embed_sched_default(), u);
    memcpy(out, u, (size_t)(n < cap ? n : cap) * sizeof *u);
    return n < cap ? n : cap;
}

int rec_embed_fwd_candidates(const rec_embed *e, int f, rec_embed_sched *out, int cap) {
    rec_embed_sched u[MAX_FWD_U];
    const int n = fwd_universe(e->sched[f], u);
    return distinct(e, f, u, n, out, cap, NULL);
}

int rec_embed_bwd_candidates(const rec_embed *e, int f, rec_embed_sched *out, int cap) {
    rec_embed_sched u[MAX_BWD_U];
    const int n = bwd_universe(e->sched[f], u);
    return distinct(e, f, u, n, out, cap, NULL);
}

/* ---- keys ----------------------------------------------------------------------------------- */

uint64_t rec_embed_shape_key(const rec_embed *e) {
    uint64_t h = rec_mix64(0x656d626564ULL ^ (uint64_t)e->F);
    for (int f = 0; f < e->F; f++) h = rec_mix64(h ^ rec_mix64((uint64_t)e->rows[f] * 1000003ULL + (uint64_t)e->dims[f]));
    return h;
}

uint64_t rec_embed_data_key(const rec_embed *e, const rec_batch *b, int first_feature) {
    uint64_t h = rec_mix64(0x64617461ULL ^ (uint64_t)e->F);
    for (int f = 0; f < e->F && first_feature + f < b->n_sparse; f++) {
        const rec_jagged *j = &b->sparse[first_feature + f];
        int64_t full = 0;
        for (int64_t r = 0; r < b->n; r++) full += j->offsets[r + 1] > j->offsets[r];
        const double m = b->n ? (double)(j->offsets[b->n] - j->offsets[0]) / (double)b->n : 0.0;
        const double c = b->n ? (double)full / (double)b->n : 0.0;
        const uint64_t qm = (uint64_t)floor(4.0 * log2(1.0 + m)), qc = (uint64_t)floor(4.0 * c);
        h = rec_mix64(h ^ (qm << 8 | qc));
    }
    return h;
}

/* ---- plans ---------------------------------------------------------------------------------- */

rec_status rec_embed_plan_save(const rec_embed *e, const char *path, uint64_t data_key) {
    cJSON *root = cJSON_CreateObject(), *tabs = cJSON_CreateArray();
    char key[32], name[64];
    cJSON_AddStringToObject(root, "format", "rectrain-embed-plan");
    cJSON_AddNumberToObject(root, "version", 1);
    snprintf(key, sizeof key, "%016llx", (unsigned long long)rec_embed_shape_key(e));
    cJSON_AddStringToObject(root, "shape_key", key);
    snprintf(key, sizeof key, "%016llx", (unsigned long long)data_key);
    cJSON_AddStringToObject(root, "data_key", key);
    cJSON_AddItemToObject(root, "tables", tabs);
    for (int f = 0; f < e->F; f++) {
        cJSON *t = cJSON_CreateObject();
        cJSON_AddNumberToObject(t, "rows", (double)e->rows[f]);
        cJSON_AddNumberToObject(t, "dim", e->dims[f]);
        cJSON_AddStringToObject(t, "sched", rec_embed_sched_name(e->sched[f], name, sizeof name));
        cJSON_AddItemToArray(tabs, t);
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    if (!text) return rec_errorf(REC_ENOMEM, "%s: out of memory writing the embedding plan", path);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *fp = fopen(tmp, "wb");
    rec_status s = REC_OK;
    if (!fp) s = rec_errorf(REC_EIO, "%s: cannot create the embedding plan: %m", tmp);
    else {
        const int bad = fputs(text, fp) < 0 || fputc('\n', fp) == EOF;
        if (fclose(fp) || bad) s = rec_errorf(REC_EIO, "%s: cannot write the embedding plan (disk full?)", tmp);
        else if (rename(tmp, path)) s = rec_errorf(REC_EIO, "%s: cannot rename %s into place: %m", path, tmp);
        if (s) remove(tmp);
    }
    cJSON_free(text);
    return s;
}

/* Reads a 16-digit hex key string member. */
static int hex_key(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsString(v) || strlen(v->valuestring) != 16) return 0;
    char *end;
    *out = strtoull(v->valuestring, &end, 16);
    return *end == '\0';
}

static rec_status plan_apply(rec_embed *e, const cJSON *root, const char *path, uint64_t *data_key, rec_embed_sched *s) {
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(root, "format"), *ver = cJSON_GetObjectItemCaseSensitive(root, "version");
    if (!cJSON_IsObject(root) || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, "rectrain-embed-plan"))
        return rec_errorf(REC_EINVAL, "%s: $.format: not a rectrain embedding plan (want \"rectrain-embed-plan\")", path);
    if (!cJSON_IsNumber(ver) || ver->valuedouble != 1)
        return rec_errorf(REC_EINVAL, "%s: $.version: this rectrain reads version 1 plans; retune with --tune", path);
    uint64_t sk, dk;
    if (!hex_key(cJSON_GetObjectItemCaseSensitive(root, "shape_key"), &sk))
        return rec_errorf(REC_EINVAL, "%s: $.shape_key: want a 16-digit hex string", path);
    if (!hex_key(cJSON_GetObjectItemCaseSensitive(root, "data_key"), &dk))
        return rec_errorf(REC_EINVAL, "%s: $.data_key: want a 16-digit hex string", path);
    const cJSON *tabs = cJSON_GetObjectItemCaseSensitive(root, "tables");
    if (!cJSON_IsArray(tabs)) return rec_errorf(REC_EINVAL, "%s: $.tables: want an array of tables", path);
    const int n = cJSON_GetArraySize(tabs);
    if (n != e->F)
        return rec_errorf(REC_EINVAL, "%s: $.tables: the plan has %d tables, the model %d; it was tuned for another model "
                          "(rerun with --tune)", path, n, e->F);
    int f = 0;
    for (const cJSON *t = tabs->child; t; t = t->next, f++) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(t, "rows"), *d = cJSON_GetObjectItemCaseSensitive(t, "dim"),
                    *sc = cJSON_GetObjectItemCaseSensitive(t, "sched");
        if (!cJSON_IsNumber(r) || !cJSON_IsNumber(d) || r->valuedouble != (double)e->rows[f] || d->valuedouble != e->dims[f])
            return rec_errorf(REC_EINVAL, "%s: $.tables[%d]: the plan's table is not (%lld rows, dim %d) as the model's; it "
                              "was tuned for another model (rerun with --tune)", path, f, (long long)e->rows[f], e->dims[f]);
        if (!cJSON_IsString(sc)) return rec_errorf(REC_EINVAL, "%s: $.tables[%d].sched: want a schedule string", path, f);
        rec_status st = rec_embed_sched_parse(sc->valuestring, &s[f]);
        if (!st) st = check_sched(e, f, s[f]);
        if (st) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", rec_errmsg()); /* rec_errorf writes the buffer rec_errmsg reads */
            return rec_errorf(st, "%s: $.tables[%d].sched: %s", path, f, msg);
        }
    }
    if (sk != rec_embed_shape_key(e))
        return rec_errorf(REC_EINVAL, "%s: $.shape_key does not match the model's tables; the plan is damaged (retune)", path);
    *data_key = dk;
    return REC_OK;
}

rec_status rec_embed_plan_load(rec_embed *e, const char *path, uint64_t *data_key) {
    char *buf;
    size_t len;
    REC_TRY(rec_read_file(path, "embedding plan", (size_t)256 << 20, &buf, &len));
    cJSON *root = cJSON_ParseWithLength(buf, len);
    free(buf);
    if (!root) return rec_errorf(REC_EINVAL, "%s: not valid JSON; retune with --tune", path);
    rec_embed_sched *s;
    rec_status st = rec_alloc((void **)&s, (size_t)(e->F + 1) * sizeof *s, "embedding plan");
    uint64_t dk = 0;
    if (!st) st = plan_apply(e, root, path, &dk, s);
    cJSON_Delete(root);
    if (!st) {
        memcpy(e->sched, s, (size_t)e->F * sizeof *s);
        if (data_key) *data_key = dk;
    }
    rec_free(s);
    return st;
}

/* ---- the tuner ------------------------------------------------------------------------------ */

struct embed_tuner {
    int reps, greps, F;                 /* calls per candidate: local stage, global stage */
    int nu_f, nu_b;                     /* universe sizes */
    int16_t *map_f, *map_b;             /* (F, MAX_*_U) universe index -> candidate index */
    int *nc_f, *nc_b;                   /* (F) candidates */
    rec_embed_sched *c_f, *c_b;         /* (F, MAX_*_U) candidates */
    double *t_f, *n_f, *t_b, *n_b;      /* (F, MAX_*_U) least seconds per id of a call; ids measured */
    int rounds_f, rounds_b, call_f, call_b;
    int global;                         /* 0 local, 1 global, 2 done */
    int n_global, g_call, cur_g;
    rec_embed_sched *gplan;             /* (N_GLOBAL, F) */
    rec_embed_sched *start;             /* (F) the plan tuning started from, a global candidate */
    int gkind[N_GLOBAL];                /* what each global plan is (rec_embed_tune_report.winner) */
    double gmf[N_GLOBAL], gmb[N_GLOBAL]; /* least seconds per id of a call, forward / backward */
    rec_embed_tune_report rep;
    double *scratch_t, *scratch_n;      /* (F) profile reads */
};

void embed_tuner_free(embed_tuner *t) {
    if (!t) return;
    rec_free(t->map_f);
    rec_free(t->map_b);
    rec_free(t->nc_f);
    rec_free(t->nc_b);
    rec_free(t->c_f);
    rec_free(t->c_b);
    rec_free(t->t_f);
    rec_free(t->n_f);
    rec_free(t->t_b);
    rec_free(t->n_b);
    rec_free(t->gplan);
    rec_free(t->start);
    rec_free(t->scratch_t);
    rec_free(t->scratch_n);
    rec_free(t);
}

rec_status rec_embed_tune_begin(rec_embed *e, const rec_embed_tune_opts *o) {
    const int reps = o && o->reps > 0 ? o->reps : 3;
    embed_tuner_free(e->tuner);
    e->tuner = NULL;
    embed_tuner *t;
    REC_TRY(rec_alloc((void **)&t, sizeof *t, "embedding tuner"));
    const size_t F = (size_t)e->F + 1, UF = F * MAX_FWD_U, UB = F * MAX_BWD_U;
    rec_status s = REC_OK;
    if (!s) s = rec_alloc((void **)&t->map_f, UF * sizeof(int16_t), "embedding tuner");
    if (!s) s = rec_alloc((void **)&t->map_b, UB * sizeof(int16_t), "embedding tuner");
    if (!s) s = rec_alloc((void **)&t->nc_f, F * sizeof(int), "embedding tuner");
    if (!s) s = rec_alloc((void **)&t->nc_b, F * sizeof(int), "embedding tuner");
    if (!s) s = rec_alloc((void **)&t->c_f, UF * sizeof(rec_embed_sched), "embedding tuner");
    if (!s) s = rec_alloc((void **)&t->c_b, UB * sizeof(rec_embed_sched), "embedding tuner");
    if (!s) s = rec_alloc((void **)&t->t_f, UF * sizeof(double), "embedding tuner");
    if (!s) s = rec_alloc((void **)&t->n_f, UF * sizeof(double), "embedding tuner");
    if (!s) s = rec_alloc((void **)&t->t_b, UB * sizeof(double), "embedding tuner");
    if (!s) s = rec_alloc((void **)&t->n_b, UB * sizeof(double), "embedding tuner");
    if (!s) s = rec_alloc((void **)&t->gplan, N_GLOBAL * F * sizeof(rec_embed_sched), "embedding tuner");
    if (!s) s = rec_alloc((void **)&t->start, F * sizeof(rec_embed_sched), "embedding tuner");
    if (!s) s = rec_alloc((void **)&t->scratch_t, F * sizeof(double), "embedding tuner");
    if (!s) s = rec_alloc((void **)&t->scratch_n, F * sizeof(double), "embedding tuner");
    if (s) {
        embed_tuner_free(t);
        return s;
    }
    memcpy(t->start, e->sched, (size_t)e->F * sizeof *t->start); /* left only for a plan measured faster */
    for (size_t i = 0; i < UF; i++) t->t_f[i] = INFINITY;
    for (size_t i = 0; i < UB; i++) t->t_b[i] = INFINITY;
    t->reps = reps;
    t->greps = GLOBAL_REPS_FACTOR * reps;
    t->F = e->F;
    int maxf = 1, maxb = 1;
    for (int f = 0; f < e->F; f++) {
        rec_embed_sched u[MAX_FWD_U];
        t->nu_f = fwd_universe(e->sched[f], u);
        t->nc_f[f] = distinct(e, f, u, t->nu_f, t->c_f + (size_t)f * MAX_FWD_U, MAX_FWD_U, t->map_f + (size_t)f * MAX_FWD_U);
        t->nu_b = bwd_universe(e->sched[f], u);
        t->nc_b[f] = distinct(e, f, u, t->nu_b, t->c_b + (size_t)f * MAX_BWD_U, MAX_BWD_U, t->map_b + (size_t)f * MAX_BWD_U);
        if (t->nc_f[f] > maxf) maxf = t->nc_f[f];
        if (t->nc_b[f] > maxb) maxb = t->nc_b[f];
    }
    t->rounds_f = maxf * reps;
    t->rounds_b = maxb * reps;
    t->rep.fwd_rounds = t->rounds_f;
    t->rep.bwd_rounds = t->rounds_b;
    t->rep.global_rounds = N_GLOBAL * t->greps;
    t->rep.winner = t->rep.winner_bwd = -1;
    e->tuner = t;
    return REC_OK;
}

int rec_embed_tuning(const rec_embed *e) { return e->tuner && e->tuner->global != 2; }

void rec_embed_tune_result(const rec_embed *e, rec_embed_tune_report *r) {
    if (e->tuner) *r = e->tuner->rep;
    else memset(r, 0, sizeof *r), r->winner = r->winner_bwd = -1;
}

/* Index of table f's candidate with the least seconds per id (per call when no ids), or -1
 * when none was measured; among SAMPLE ones only if sample_only. */
static int best_of(const double *tm, const rec_embed_sched *c, int nc, int sample_only) {
    int best = -1;
    double bv = INFINITY;
    for (int k = 0; k < nc; k++) {
        if (sample_only && c[k].split != REC_SPLIT_SAMPLE) continue;
        if (tm[k] < bv) bv = tm[k], best = k;
    }
    return best;
}

/* Estimated seconds per call of uniform universe member u: the sum over tables of the
 * per-id time of the candidate u is for each table times that table's mean ids per round
 * (infinite when some table never ran it). */
static double uniform_cost(const embed_tuner *t, int u, int backward) {
    const int MU = backward ? MAX_BWD_U : MAX_FWD_U;
    const int16_t *map = backward ? t->map_b : t->map_f;
    const double *tm = backward ? t->t_b : t->t_f, *n = backward ? t->n_b : t->n_f;
    const int *nc = backward ? t->nc_b : t->nc_f;
    double sum = 0;
    for (int f = 0; f < t->F; f++) {
        const size_t o = (size_t)f * MU;
        const int k = map[o + (size_t)u];
        double ids = 0;
        for (int j = 0; j < nc[f]; j++) ids += n[o + (size_t)j];
        ids /= backward ? t->rounds_b : t->rounds_f;
        sum += tm[o + (size_t)k] * (ids > 1 ? ids : 1);
    }
    return sum;
}

/* The global stage's plans: per-table best; the same with SAMPLE everywhere; the best
 * uniform forward schedule of each split with the best uniform backward one; the plan tuning
 * started from. */
static void build_global(rec_embed *e, embed_tuner *t) {
    const int F = t->F;
    rec_embed_sched *g0 = t->gplan, *g1 = t->gplan + (size_t)(F + 1);
    t->gkind[0] = 0, t->gkind[1] = 1;
    int any_whole = 0; /* a table not cut into SAMPLE items */
    for (int f = 0; f < F; f++) {
        const size_t of = (size_t)f * MAX_FWD_U, ob = (size_t)f * MAX_BWD_U;
        int kf = best_of(t->t_f + of, t->c_f + of, t->nc_f[f], 0);
        int kb = best_of(t->t_b + ob, t->c_b + ob, t->nc_b[f], 0);
        rec_embed_sched s = e->sched[f];
        if (kf >= 0) {
            const rec_embed_sched c = t->c_f[of + (size_t)kf];
            s.split = c.split, s.kernel = c.kernel, s.pf = c.pf, s.grain = c.grain;
        }
        if (kb >= 0) s.sort = t->c_b[ob + (size_t)kb].sort, s.bpf = t->c_b[ob + (size_t)kb].bpf;
        g0[f] = g1[f] = s;
        if (s.split != REC_SPLIT_SAMPLE) {
            any_whole = 1;
            const int ks = best_of(t->t_f + of, t->c_f + of, t->nc_f[f], 1);
            if (ks >= 0) {
                const rec_embed_sched c = t->c_f[of + (size_t)ks];
                g1[f].split = c.split, g1[f].kernel = c.kernel, g1[f].pf = c.pf, g1[f].grain = c.grain;
            }
        }
    }
    int n = any_whole ? 2 : 1;
    /* Best uniform backward, then the best uniform forward member of each split. */
    rec_embed_sched ub[MAX_BWD_U], uf[MAX_FWD_U];
    const rec_embed_sched base = rec_embed_sched_default();
    bwd_universe(base, ub);
    fwd_universe(base, uf);
    int bb = 0;
    for (int u = 1; u < t->nu_b; u++)
        if (uniform_cost(t, u, 1) < uniform_cost(t, bb, 1)) bb = u;
    /* The best uniform forward member of each split: the local times judge a table's rows
     * per id well, but not what a split does to the whole pass (load balance, one table's
     * rows in both cores' caches), which the global stage measures. */
    int pick[3] = {-1, -1, -1};
    double cost[3] = {INFINITY, INFINITY, INFINITY};
    for (int u = 0; u < t->nu_f; u++) {
        const int i = uf[u].split;
        const double c = uniform_cost(t, u, 0);
        if (c < cost[i]) cost[i] = c, pick[i] = u;
    }
    for (int i = 0; i < 3; i++) {
        if (pick[i] < 0) continue;
        rec_embed_sched s = uf[pick[i]];
        s.sort = ub[bb].sort, s.bpf = ub[bb].bpf;
        rec_embed_sched *g = t->gplan + (size_t)n * (size_t)(F + 1);
        for (int f = 0; f < F; f++) {
            g[f] = s;
            if (!embed_sort_fits(e, f, g[f].sort)) g[f].sort = REC_SORT_RADIX;
        }
        t->gkind[n++] = 2 + i;
    }
    memcpy(t->gplan + (size_t)n * (size_t)(F + 1), t->start, (size_t)F * sizeof *t->start);
    t->gkind[n++] = N_GLOBAL - 1;
    t->n_global = n;
    for (int g = 0; g < N_GLOBAL; g++) t->gmf[g] = t->gmb[g] = INFINITY;
    t->global = 1;
}

static void install(rec_embed *e, const rec_embed_sched *plan) { memcpy(e->sched, plan, (size_t)e->F * sizeof *plan); }

/* Ends the global stage. Forward and backward fields act on their own calls, so each is
 * taken from the plan whose calls of that kind were fastest (least seconds per id, each the
 * best of its `reps` calls: whole passes are short, a Kaggle batch takes 0.1 ms, and one
 * preempted call must not decide); judging whole plans by the sum let the backward, two
 * thirds of a step, drown a forward 30% slower (Kaggle). */
static void finish_global(rec_embed *e, embed_tuner *t) {
    int bf = 0, bb = -1;
    for (int g = 0; g < N_GLOBAL; g++) t->rep.global_s[g] = INFINITY;
    for (int g = 0; g < t->n_global; g++) {
        t->rep.global_s[t->gkind[g]] = t->gmf[g] + (isfinite(t->gmb[g]) ? t->gmb[g] : 0);
        if (t->gmf[g] < t->gmf[bf]) bf = g;
        if (isfinite(t->gmb[g]) && (bb < 0 || t->gmb[g] < t->gmb[bb])) bb = g;
    }
    if (bb < 0) bb = bf; /* no backward ran: keep the forward winner's backward fields */
    const rec_embed_sched *pf = t->gplan + (size_t)bf * (size_t)(t->F + 1), *pb = t->gplan + (size_t)bb * (size_t)(t->F + 1);
    for (int f = 0; f < t->F; f++) {
        e->sched[f] = pf[f];
        e->sched[f].sort = pb[f].sort, e->sched[f].bpf = pb[f].bpf;
    }
    t->rep.winner = t->gkind[bf];
    t->rep.winner_bwd = t->gkind[bb];
    t->global = 2;
    e->profiling = 0;
}

void embed_tune_before(rec_embed *e, int backward) {
    embed_tuner *t = e->tuner;
    if (t->global == 2) return;
    if (t->global == 1) {
        if (!backward) {
            if (t->g_call >= t->n_global * t->greps) {
                finish_global(e, t);
                return;
            }
            t->cur_g = t->g_call % t->n_global; /* interleaved, so a slow spell hits every plan */
            install(e, t->gplan + (size_t)t->cur_g * (size_t)(t->F + 1));
        }
        return;
    }
    const int call = backward ? t->call_b : t->call_f, rounds = backward ? t->rounds_b : t->rounds_f;
    if (call >= rounds) return;
    for (int f = 0; f < t->F; f++) {
        rec_embed_sched *s = &e->sched[f];
        if (backward) {
            const rec_embed_sched c = t->c_b[(size_t)f * MAX_BWD_U + (size_t)(call % t->nc_b[f])];
            s->sort = c.sort, s->bpf = c.bpf;
        } else {
            const rec_embed_sched c = t->c_f[(size_t)f * MAX_FWD_U + (size_t)(call % t->nc_f[f])];
            s->split = c.split, s->kernel = c.kernel, s->pf = c.pf, s->grain = c.grain;
        }
    }
    rec_embed_profile_clear(e);
    e->profiling = 1;
}

void embed_tune_after(rec_embed *e, int backward) {
    embed_tuner *t = e->tuner;
    if (t->global == 2) return;
    if (t->global == 1) {
        if (backward) {
            const double v = e->last_bwd_s / (e->last_ids > 1 ? e->last_ids : 1);
            if (v < t->gmb[t->cur_g]) t->gmb[t->cur_g] = v;
        } else {
            const double v = e->last_fwd_s / (e->last_ids > 1 ? e->last_ids : 1);
            if (v < t->gmf[t->cur_g]) t->gmf[t->cur_g] = v;
            t->g_call++;
        }
        if (backward && t->g_call >= t->n_global * t->greps) finish_global(e, t);
        return;
    }
    int *call = backward ? &t->call_b : &t->call_f;
    const int rounds = backward ? t->rounds_b : t->rounds_f, MU = backward ? MAX_BWD_U : MAX_FWD_U;
    if (*call >= rounds) return;
    if (backward) rec_embed_profile_read(e, NULL, t->scratch_t, NULL, t->scratch_n);
    else rec_embed_profile_read(e, t->scratch_t, NULL, t->scratch_n, NULL);
    for (int f = 0; f < t->F; f++) {
        const int nc = backward ? t->nc_b[f] : t->nc_f[f];
        const size_t k = (size_t)f * MU + (size_t)(*call % nc);
        /* A table that repeats a candidate (fewer candidates than rounds, RecFlex's padding)
         * runs it again for the others' sake; its own measurement counts once per rep. */
        if (*call / nc >= t->reps) continue;
        double *tm = &(backward ? t->t_b : t->t_f)[k];
        const double v = t->scratch_t[f] / (t->scratch_n[f] > 1 ? t->scratch_n[f] : 1);
        if (v < *tm) *tm = v;
        (backward ? t->n_b : t->n_f)[k] += t->scratch_n[f];
    }
    (*call)++;
    e->profiling = 0;
    if (t->call_f >= t->rounds_f && t->call_b >= t->rounds_b) build_global(e, t);
}

/* ---- separately tuned ----------------------------------------------------------------------- */

rec_status rec_embed_tune_separate(rec_embed *e, const rec_batch *const *batches, int n, int first_feature,
                                   const float *dout, float lr) {
    float *out;
    REC_TRY(rec_alloc((void **)&out, (size_t)e->max_batch * (size_t)(e->W + 1) * sizeof(float), "embedding tuner"));
    rec_status s = REC_OK;
    for (int f = 0; !s && f < e->F; f++) {
        rec_embed_sched c[REC_EMBED_MAX_CANDIDATES];
        for (int pass = 0; pass < 2 && !s; pass++) {
            const int nc = pass ? rec_embed_bwd_candidates(e, f, c, REC_EMBED_MAX_CANDIDATES)
                                : rec_embed_fwd_candidates(e, f, c, REC_EMBED_MAX_CANDIDATES);
            int best = 0;
            double bt = INFINITY;
            for (int k = 0; k < nc && !s; k++) {
                e->sched[f] = c[k];
                double tk = 0;
                for (int i = 0; i < n && !s; i++) {
                    s = pass ? embed_backward_run(e, batches[i], first_feature, dout, lr, f)
                             : embed_forward_run(e, batches[i], first_feature, out, f);
                    tk += pass ? e->last_bwd_s : e->last_fwd_s;
                }
                if (tk < bt) bt = tk, best = k;
            }
            e->sched[f] = c[best];
        }
    }
    rec_free(out);
    return s;
}
