/* The access profile plans are made from (plan.h): per table, an open-addressing hash of the
 * rows the profiled batches touched, each with the number of rank slices that used it (each
 * slice's ids deduplicated, as the executor fetches them) and of batches that used it. */
#include <stdlib.h>
#include <string.h>

#include "sharding_impl.h"

static rec_status table_grow(prof_table *t) {
    const int64_t cap = t->cap ? t->cap * 2 : 1024;
    prof_entry *e = calloc((size_t)cap, sizeof *e);
    if (!e) return rec_errorf(REC_ENOMEM, "plan profile: out of memory for %lld rows", (long long)cap);
    for (int64_t i = 0; i < cap; i++) e[i].row = -1;
    for (int64_t i = 0; i < t->cap; i++) {
        if (t->e[i].row < 0) continue;
        uint64_t h = rec_mix64((uint64_t)t->e[i].row) & (uint64_t)(cap - 1);
        while (e[h].row >= 0) h = (h + 1) & (uint64_t)(cap - 1);
        e[h] = t->e[i];
    }
    free(t->e);
    t->e = e;
    t->cap = cap;
    return REC_OK;
}

static rec_status table_touch(prof_table *t, int64_t row, uint32_t slice, uint32_t batch) {
    if (2 * (t->n + 1) > t->cap) REC_TRY(table_grow(t));
    uint64_t h = rec_mix64((uint64_t)row) & (uint64_t)(t->cap - 1);
    while (t->e[h].row >= 0 && t->e[h].row != row) h = (h + 1) & (uint64_t)(t->cap - 1);
    prof_entry *e = &t->e[h];
    if (e->row < 0) {
        e->row = row;
        t->n++;
    }
    if (e->last_slice != slice + 1) e->slices++, e->last_slice = slice + 1;
    if (e->last_batch != batch + 1) e->batches++, e->last_batch = batch + 1;
    return REC_OK;
}

rec_status rec_plan_profile_init(rec_plan_profile **out, const rec_plan_model *m) {
    *out = NULL;
    if (m->ranks < 1 || m->tables < 0 || m->dim < 1 || m->batch < 1)
        return rec_errorf(REC_EINVAL, "plan: %d ranks, %d tables, dim %d, batch %lld: each must be >= 1", m->ranks,
                          m->tables, m->dim, (long long)m->batch);
    if (m->batch < m->ranks)
        return rec_errorf(REC_EINVAL, "plan: a global batch of %lld rows cannot be cut among %d ranks; make the batch at "
                          "least the rank count", (long long)m->batch, m->ranks);
    rec_plan_profile *p = calloc(1, sizeof *p);
    if (!p) return rec_errorf(REC_ENOMEM, "plan profile: out of memory");
    p->m = *m;
    p->rows = malloc(sizeof(int64_t) * (size_t)(m->tables ? m->tables : 1));
    p->t = calloc((size_t)(m->tables ? m->tables : 1), sizeof *p->t);
    if (!p->rows || !p->t) {
        rec_plan_profile_free(p);
        return rec_errorf(REC_ENOMEM, "plan profile: out of memory");
    }
    for (int f = 0; f < m->tables; f++) {
        if (m->rows[f] < 1) {
            rec_plan_profile_free(p);
            return rec_errorf(REC_EINVAL, "plan: table %d has %lld rows; it must have at least 1", f, (long long)m->rows[f]);
        }
        p->rows[f] = m->rows[f];
    }
    p->m.rows = p->rows;
    *out = p;
    return REC_OK;
}

void rec_plan_profile_free(rec_plan_profile *p) {
    if (!p) return;
    for (int f = 0; p->t && f < p->m.tables; f++) free(p->t[f].e);
    free(p->t);
    free(p->rows);
    free(p);
}

int64_t rec_plan_profile_batches(const rec_plan_profile *p) { return p->batches; }

rec_status rec_plan_profile_add(rec_plan_profile *p, const rec_batch *b) {
    const int N = p->m.ranks, F = p->m.tables;
    if (b->n_sparse < F)
        return rec_errorf(REC_EINVAL, "plan profile: the batch has %d sparse features and the model %d tables",
                          (int)b->n_sparse, F);
    const int64_t B = b->n;
    for (int f = 0; f < F; f++) {
        const rec_jagged *j = &b->sparse[f];
        for (int r = 0; r < N; r++) {
            const int64_t b0 = r * B / N, b1 = (r + 1) * B / N;
            const uint32_t slice = (uint32_t)(p->slices + r);
            for (int64_t k = j->offsets[b0]; k < j->offsets[b1]; k++) {
                const int64_t id = rec_jagged_id(j, k);
                if (id < 0 || id >= p->rows[f])
                    return rec_errorf(REC_EINVAL, "plan profile: feature %d of batch row %lld has id %lld, outside its "
                                      "table's %lld rows", f, (long long)(k), (long long)id, (long long)p->rows[f]);
                REC_TRY(table_touch(&p->t[f], id, slice, (uint32_t)p->batches));
            }
        }
        p->ids += j->offsets[B] - j->offsets[0];
    }
    p->slices += N;
    p->batches++;
    return REC_OK;
}

/* The profiled rows of table f as (row, A, q), sorted by row; *n their count. */
rec_status rec__profile_rows(const rec_plan_profile *p, int f, prof_row **out, int64_t *n) {
    const prof_table *t = &p->t[f];
    prof_row *r = malloc(sizeof *r * (size_t)(t->n ? t->n : 1));
    if (!r) return rec_errorf(REC_ENOMEM, "plan: out of memory for the profile of table %d", f);
    int64_t k = 0;
    const double nb = p->batches > 0 ? (double)p->batches : 1.0;
    for (int64_t i = 0; i < t->cap; i++)
        if (t->e[i].row >= 0) r[k++] = (prof_row){t->e[i].row, t->e[i].slices / nb, t->e[i].batches / nb, t->e[i].slices};
    qsort(r, (size_t)k, sizeof *r, rec__cmp_prof_row);
    *out = r;
    *n = k;
    return REC_OK;
}

int rec__cmp_prof_row(const void *a, const void *b) {
    const int64_t x = ((const prof_row *)a)->row, y = ((const prof_row *)b)->row;
    return (x > y) - (x < y);
}
