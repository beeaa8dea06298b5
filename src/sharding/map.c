/* The executor's map (sharding_impl.h): each segment's and hot row's place on its owner. */
#include <stdlib.h>

#include "sharding_impl.h"

/* The O(1) row index of a part of R rows (xpart): the hot rows' open-addressing table at most
 * half full, and per bucket of rows the segment covering its first row, ~2 buckets a segment. */
static rec_status index_part(xpart *p, int64_t R) {
    const rec_plan_part *q = &p->pl;
    uint64_t slots = 1;
    while (q->n_hot && slots < 2 * (uint64_t)q->n_hot) slots *= 2;
    p->hot_mask = slots - 1;
    while (R > 0 && ((R - 1) >> p->seg_shift) + 1 > 2 * q->n_seg) p->seg_shift++;
    const int64_t buckets = R > 0 ? ((R - 1) >> p->seg_shift) + 1 : 1;
    p->hot_slot = malloc(sizeof(int64_t) * (size_t)slots);
    p->seg_at = malloc(sizeof(int64_t) * (size_t)buckets);
    if (!p->hot_slot || !p->seg_at) return rec_errorf(REC_ENOMEM, "executor: out of memory for the map");
    for (uint64_t i = 0; i < slots; i++) p->hot_slot[i] = -1;
    for (int64_t h = 0; h < q->n_hot; h++) {
        uint64_t i = rec_mix64((uint64_t)q->hot_row[h]) & p->hot_mask;
        while (p->hot_slot[i] >= 0) i = (i + 1) & p->hot_mask;
        p->hot_slot[i] = h;
    }
    int64_t g = 0;
    for (int64_t b = 0; b < buckets; b++) {
        while (g + 1 < q->n_seg && q->seg_start[g + 1] <= b << p->seg_shift) g++;
        p->seg_at[b] = g;
    }
    return REC_OK;
}

rec_status rec__xmap_build(xmap *m, const rec_plan *plan) {
    *m = (xmap){.plan = plan, .N = rec_plan_ranks(plan), .F = rec_plan_tables(plan), .E = rec_plan_dim(plan)};
    const int N = m->N;
    m->floats = calloc((size_t)N * 2, sizeof(int64_t));
    m->parts = calloc((size_t)m->F, sizeof(xpart *));
    if (!m->floats || !m->parts) {
        rec__xmap_free(m);
        return rec_errorf(REC_ENOMEM, "executor: out of memory for the map");
    }
    m->rows = m->floats + N;
    for (int f = 0; f < m->F; f++) {
        const int C = rec_plan_col_parts(plan, f, NULL);
        const int64_t R = rec_plan_rows(plan, f);
        m->parts[f] = calloc((size_t)C, sizeof(xpart));
        if (!m->parts[f]) {
            rec__xmap_free(m);
            return rec_errorf(REC_ENOMEM, "executor: out of memory for the map");
        }
        for (int c = 0; c < C; c++) {
            xpart *p = &m->parts[f][c];
            rec_plan_get_part(plan, f, c, &p->pl);
            p->w = p->pl.c1 - p->pl.c0;
            p->seg_off = malloc(sizeof(int64_t) * (size_t)(2 * p->pl.n_seg + 2 * p->pl.n_hot + 1));
            if (!p->seg_off) {
                rec__xmap_free(m);
                return rec_errorf(REC_ENOMEM, "executor: out of memory for the map");
            }
            p->seg_srow = p->seg_off + p->pl.n_seg;
            p->hot_off = p->seg_srow + p->pl.n_seg;
            p->hot_srow = p->hot_off + p->pl.n_hot;
            const rec_status st = index_part(p, R);
            if (st != REC_OK) {
                rec__xmap_free(m);
                return st;
            }
            for (int64_t g = 0; g < p->pl.n_seg; g++) {
                const int64_t len = (g + 1 < p->pl.n_seg ? p->pl.seg_start[g + 1] : R) - p->pl.seg_start[g];
                const int o = p->pl.seg_owner[g];
                if (o == REC_PLAN_EVERY) {
                    p->seg_off[g] = m->rep_rows * m->E, p->seg_srow[g] = m->rep_rows;
                    m->rep_rows += len;
                } else {
                    p->seg_off[g] = m->floats[o], p->seg_srow[g] = m->rows[o];
                    m->floats[o] += len * p->w, m->rows[o] += len;
                }
            }
            for (int64_t h = 0; h < p->pl.n_hot; h++) {
                const int o = p->pl.hot_owner[h];
                if (o == REC_PLAN_EVERY) {
                    p->hot_off[h] = m->rep_rows * m->E, p->hot_srow[h] = m->rep_rows;
                    m->rep_rows++;
                } else {
                    p->hot_off[h] = m->floats[o], p->hot_srow[h] = m->rows[o];
                    m->floats[o] += p->w, m->rows[o]++;
                }
            }
        }
    }
    return REC_OK;
}

void rec__xmap_free(xmap *m) {
    for (int f = 0; m->parts && f < m->F; f++) {
        for (int c = 0; m->parts[f] && c < rec_plan_col_parts(m->plan, f, NULL); c++) {
            free(m->parts[f][c].seg_off);
            free(m->parts[f][c].hot_slot);
            free(m->parts[f][c].seg_at);
        }
        free(m->parts[f]);
    }
    free(m->parts);
    free(m->floats);
    *m = (xmap){0};
}
