/* Schedules of the embedding engine (embed.h): the text form, a schedule's effective form for
 * a table, setting a table's schedule, and the candidate space the tuner (tune.c) and the
 * bench draw from.
 *
 * The candidate space is one universe of forward schedules (split x kernel x prefetch x
 * grain: SAMPLE 3 x 4 x 2, TABLE 3 x 4, ROW only FIXED and ROW_GRAIN x 4 = 40) and one of
 * backward schedules (sort x prefetch = 3 x 3 = 9). A table's candidates are the universe's
 * members that differ FOR IT (embed_sched_effective folds kernels it has no code path for
 * into GENERIC, ROW into SAMPLE on dims FIXED has no code for, and COUNT and DENSE into RADIX
 * on tables too large for them), so a dim-8 table has 28 forward candidates (BLOCKED runs
 * GENERIC below dim 16), a dim-24 one 24 (FIXED has no dim 24, so neither has ROW) and a
 * dim-16 one all 40.
 */
#include <stdio.h>
#include <string.h>

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
enum { GRAIN_TABLE = 10 }; /* the grain field of a TABLE schedule (it has no items to cut) */

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

/* Reads one of names[0..count) at *p, up to the next '/', '+' or end, into *field and moves
 * *p past it; 0 (nothing moved) when the word is none of them. */
static int parse_word(const char **p, const char *const *names, int count, uint8_t *field) {
    const size_t n = strcspn(*p, "/+");
    for (int i = 0; i < count; i++)
        if (strlen(names[i]) == n && !strncmp(*p, names[i], n)) {
            *field = (uint8_t)i;
            *p += n;
            return 1;
        }
    return 0;
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
    if (!parse_word(&p, SPLIT_NAMES, 3, &s.split)) bad = "the split (want sample, table or row)";
    if (!bad && !(*p++ == '/' && parse_word(&p, KERN_NAMES, 3, &s.kernel)))
        bad = "the kernel (want generic, fixed or blocked)";
    if (!bad && !(*p++ == '/' && parse_num(&p, "pf", 64, &v))) bad = "the prefetch distance (want pf0..pf64)";
    if (!bad) s.pf = (uint8_t)v;
    if (!bad && s.split != REC_SPLIT_TABLE) {
        if (!(*p++ == '/' && parse_num(&p, "g", REC_EMBED_GRAIN_MAX, &v) && v >= REC_EMBED_GRAIN_MIN))
            bad = "the grain (want g6..g16)";
        else s.grain = (uint8_t)v;
    }
    if (!bad && *p++ != '+') bad = "'+' and the backward schedule";
    if (!bad && !parse_word(&p, SORT_NAMES, 3, &s.sort)) bad = "the sort (want radix, count or dense)";
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

rec_status embed_check_sched(const rec_embed *e, int f, rec_embed_sched s) {
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
    REC_TRY(embed_check_sched(e, f, s));
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

/* ROW has its own pass, so its kernel only matters when a batch sends it to SAMPLE items:
 * FIXED, the one ROW's dims have. */
int embed_fwd_universe(rec_embed_sched base, rec_embed_sched *u) {
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

int embed_bwd_universe(rec_embed_sched base, rec_embed_sched *u) {
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

int embed_sched_distinct(const rec_embed *e, int f, const rec_embed_sched *u, int n, rec_embed_sched *out, int cap,
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
    rec_embed_sched u[EMBED_MAX_FWD_U];
    const int n = embed_fwd_universe(rec_embed_sched_default(), u);
    memcpy(out, u, (size_t)(n < cap ? n : cap) * sizeof *u);
    return n < cap ? n : cap;
}

int rec_embed_bwd_universe(rec_embed_sched *out, int cap) {
    rec_embed_sched u[EMBED_MAX_BWD_U];
    const int n = embed_bwd_universe(rec_embed_sched_default(), u);
    memcpy(out, u, (size_t)(n < cap ? n : cap) * sizeof *u);
    return n < cap ? n : cap;
}

int rec_embed_fwd_candidates(const rec_embed *e, int f, rec_embed_sched *out, int cap) {
    rec_embed_sched u[EMBED_MAX_FWD_U];
    const int n = embed_fwd_universe(e->sched[f], u);
    return embed_sched_distinct(e, f, u, n, out, cap, NULL);
}

int rec_embed_bwd_candidates(const rec_embed *e, int f, rec_embed_sched *out, int cap) {
    rec_embed_sched u[EMBED_MAX_BWD_U];
    const int n = embed_bwd_universe(e->sched[f], u);
    return embed_sched_distinct(e, f, u, n, out, cap, NULL);
}
