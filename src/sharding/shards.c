/* Sharded checkpoints of the executor (dist.h): every rank saves its rows, and a resumed job
 * reads them back onto its own plan, whatever the number of ranks that saved them.
 *
 * A save with id I (a 64-bit number drawn per save) by N ranks is, in the directory of PATH
 * (DIR/model.rckpt):
 *
 *   model.I.R-of-N.rckpt   rank R's store: "rows" (its rows, in the map's order), "state"
 *                          (their optimizer state); rank 0's also "replicated" and
 *                          "replicated.state" (the rows every rank holds). A model with
 *                          first-order tables (DeepFM, Wide&Deep) adds "lin" and "lin.state"
 *                          (a value and its state per row of the store, by the row's index
 *                          there; those of rows whose first column part is elsewhere unused)
 *                          and rank 0 "replicated.lin" and "replicated.lin.state". Format and
 *                          crash safety of rec_ckpt_save; meta.shard = R + 1.
 *   model.I.plan.json      the plan, which says where each row of those stores belongs.
 *   model.rckpt            the dense part and the meta (meta.shards = N, meta.shard_id = I),
 *                          written last, once every rank's file is committed: the save's
 *                          commit point. A crash before it leaves the previous save whole.
 *
 * Then rank 0 removes the files of other ids. Loading reads the main file's dense part, then
 * fills this rank's rows: from its own file when the saved plan is this job's (same N, same
 * digest), else row by row through the saved plan's map from whichever files hold them —
 * the re-sharding onto another N or plan. A whole model's checkpoint (one process, shards 0)
 * is read the same way, its tables being whole. Every rank reads the files it needs: the
 * directory must be one every rank sees (a shared file system across hosts).
 */
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "executor_impl.h"
#include "mpi_check.h"
#include "rectrain/ckpt.h"

/* DIR/model.I.SUFFIX beside the main file `path`. */
static void sibling(const char *path, uint64_t id, const char *suffix, char *buf, size_t cap) {
    const char *slash = strrchr(path, '/');
    const int dir = slash ? (int)(slash - path + 1) : 0;
    snprintf(buf, cap, "%.*smodel.%016" PRIx64 ".%s", dir, path, id, suffix);
}

void rec_dist_shard_path(const char *path, uint64_t id, int rank, int n, char *buf, size_t cap) {
    char suffix[64];
    snprintf(suffix, sizeof suffix, "%d-of-%d.rckpt", rank, n);
    sibling(path, id, suffix, buf, cap);
}

void rec_dist_plan_path(const char *path, uint64_t id, char *buf, size_t cap) { sibling(path, id, "plan.json", buf, cap); }

static size_t state_floats(rec_sparse_opt_kind k, int64_t floats, int64_t rows) {
    return k == REC_SPARSE_ADAGRAD ? (size_t)floats : k == REC_SPARSE_ROWWISE_ADAGRAD ? (size_t)rows : 0;
}

static rec_tensor tensor(const char *name, rec_tensor_role role, const float *data, size_t n) {
    rec_tensor t = {.role = role, .ndim = 1, .shape = {(int64_t)n, 0}, .data = (float *)data};
    snprintf(t.name, sizeof t.name, "%s", name);
    return t;
}

/* n stored values from element `at` of base (x's kind: fp32, or bf16 bits, which the file
 * holds as their fp32 values, exactly). */
static rec_tensor values(const rec_exec *x, const char *name, const void *base, int64_t at, size_t n) {
    rec_tensor t = tensor(name, REC_TENSOR_PARAM, x->b16 ? NULL : (const float *)base + at, n);
    if (x->b16) t.data16 = (uint16_t *)base + at;
    return t;
}

/* ---- saving ------------------------------------------------------------------------------ */

/* Rank 0: removes DIR/model.J.* of every id J but `keep` (earlier saves, or another job's). */
void rec_dist_prune_shards(const char *path, uint64_t keep) {
    char dir[4096];
    const char *slash = strrchr(path, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
    if (slash == path) snprintf(dir, sizeof dir, "/");
    DIR *d = opendir(dir);
    if (!d) return;
    char mine[32];
    snprintf(mine, sizeof mine, "%016" PRIx64, keep);
    for (struct dirent *e; (e = readdir(d));) {
        const char *n = e->d_name;
        if (strncmp(n, "model.", 6) != 0 || strlen(n) < 6 + 16 + 2 || n[6 + 16] != '.') continue;
        if (strspn(n + 6, "0123456789abcdef") != 16 || strncmp(n + 6, mine, 16) == 0) continue;
        const char *rest = n + 6 + 17, *end = n + strlen(n);
        const int plan = strcmp(rest, "plan.json") == 0;
        const int shard = end - rest > 6 && strcmp(end - 6, ".rckpt") == 0 && strstr(rest, "-of-");
        if (!plan && !shard) continue;
        char full[8192];
        snprintf(full, sizeof full, "%s/%s", dir, n);
        (void)unlink(full);
    }
    closedir(d);
}

rec_status rec_exec_save(rec_exec *x, const char *path, const rec_ckpt_meta *given) {
    uint64_t id = 0;
    if (x->rank == 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        id = rec_mix64((uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec) ^ rec_mix64((uint64_t)getpid());
    }
    MPI_TRY(MPI_Bcast(&id, 1, MPI_UINT64_T, 0, rec__comm()));
    rec_ckpt_meta meta = *given;
    meta.shards = x->N, meta.shard_id = id, meta.shard = x->rank + 1;

    rec_tensor ts[8];
    int n = 0;
    const size_t stf = state_floats(x->opt.kind, x->store_floats, x->store_rows);
    ts[n++] = values(x, "rows", rec__store(x), 0, (size_t)x->store_floats);
    if (stf) ts[n++] = tensor("state", REC_TENSOR_OPT_STATE, x->state, stf);
    const size_t rstf = state_floats(x->opt.kind, x->rep_rows * x->E, x->rep_rows);
    if (x->rank == 0 && x->rep_rows) ts[n++] = values(x, "replicated", rec__rep(x), 0, (size_t)(x->rep_rows * x->E));
    if (x->rank == 0 && x->rep_rows && rstf) ts[n++] = tensor("replicated.state", REC_TENSOR_OPT_STATE, x->rep_state, rstf);
    const int lsf = rec__state_floats(x->opt.kind, 1);
    if (x->has_lin) {
        ts[n++] = values(x, "lin", rec__store(x), x->store_floats, (size_t)x->store_rows);
        if (lsf) ts[n++] = tensor("lin.state", REC_TENSOR_OPT_STATE, x->lin_state, (size_t)x->store_rows);
    }
    if (x->has_lin && x->rank == 0 && x->rep_rows) {
        ts[n++] = values(x, "replicated.lin", rec__rep_lin(x), 0, (size_t)x->rep_rows);
        if (lsf) ts[n++] = tensor("replicated.lin.state", REC_TENSOR_OPT_STATE, x->rep_lin_state, (size_t)x->rep_rows);
    }
    char file[4200];
    rec_dist_shard_path(path, id, x->rank, x->N, file, sizeof file);
    rec_status s = rec_ckpt_save_tensors(file, rec_model_get_config(x->m), &meta, ts, n);
    if (!s && x->rank == 0) {
        rec_dist_plan_path(path, id, file, sizeof file);
        s = rec_plan_save(x->plan, file);
    }
    /* every file committed, or no rank commits the main one */
    int failed = 0;
    MPI_TRY(MPI_Allreduce((int[]){s != REC_OK}, &failed, 1, MPI_INT, MPI_MAX, rec__comm()));
    if (s) return s;
    if (failed) return rec_errorf(REC_EIO, "another rank could not write its shard of the checkpoint (its message is above)");
    meta.shard = 0;
    if (x->rank == 0) s = rec_ckpt_save(path, x->m, &meta);
    int bad = s != REC_OK;
    MPI_TRY(MPI_Bcast(&bad, 1, MPI_INT, 0, rec__comm()));
    if (s) return s;
    if (bad) return rec_errorf(REC_EIO, "rank 0 could not write %s (its message is above)", path);
    if (x->rank == 0) rec_dist_prune_shards(path, id);
    return REC_OK;
}

/* ---- loading ----------------------------------------------------------------------------- */

/* Where the saved rows are: a whole model's tables, or a sharded save's stores and map. The
 * values (table, lin, rows, rep, rep_lin) are fp32, or with b16 bf16 bits (a live bf16 job's
 * stores, rec_exec_gather); the state is fp32. */
typedef struct source {
    int F, E, N;                     /* N: 0 for whole tables */
    rec_sparse_opt_kind opt;
    int has_lin;                     /* first-order tables too (DeepFM, Wide&Deep) */
    int b16;
    const float **table, **tstate;   /* whole: (F) */
    const void **lin;                /* whole: (F) first-order tables; sharded: (N) "lin" */
    const float **lstate;
    const rec_plan *plan;            /* sharded: (own_plan, or the job's) */
    rec_plan *own_plan;
    xmap map;
    rec_ckpt_reader **files;         /* (N) */
    const void **rows;               /* (N) */
    const float **state;             /* (N) */
    const void *rep, *rep_lin;
    const float *rep_state, *rep_lstate;
} source;

static void source_free(source *src) {
    free(src->table);
    free(src->lin);
    free(src->lstate);
    for (int r = 0; src->files && r < src->N; r++) rec_ckpt_reader_close(src->files[r]);
    free(src->files);
    free(src->rows);
    free(src->state);
    if (src->own_plan) rec__xmap_free(&src->map);
    rec_plan_free(src->own_plan);
}

/* The saved values of row r of table f: val (E floats) and its state (E floats under Adagrad,
 * 1 row-wise). */
static void source_row(const source *src, int f, int64_t r, float *val, float *st) {
    const int E = src->E;
    const int sf = rec__state_floats(src->opt, E);
    if (src->N == 0) {
        memcpy(val, src->table[f] + r * E, sizeof(float) * (size_t)E);
        if (sf) memcpy(st, src->tstate[f] + r * sf, sizeof(float) * (size_t)sf);
        return;
    }
    const int C = rec_plan_col_parts(src->plan, f, NULL);
    for (int c = 0; c < C; c++) {
        const xpart *p = &src->map.parts[f][c];
        const xloc l = rec__xmap_locate(&src->map, f, c, r);
        if (l.owner == REC_PLAN_EVERY) {
            rec__values_get(src->rep, src->b16, l.off, E, val);
            if (sf) memcpy(st, src->rep_state + (sf == 1 ? l.srow : l.off), sizeof(float) * (size_t)sf);
            return;
        }
        rec__values_get(src->rows[l.owner], src->b16, l.off, p->w, val + p->pl.c0);
        if (sf == 1 && c == 0) st[0] = src->state[l.owner][l.srow]; /* every part keeps the row's */
        if (sf > 1) memcpy(st + p->pl.c0, src->state[l.owner] + l.off, sizeof(float) * (size_t)p->w);
    }
}

/* The saved first-order value of row r of table f and its state (the Adagrad kinds' one
 * float; st unused under SGD): with the owner of the row's first column part. */
static void source_lin(const source *src, int f, int64_t r, float *val, float *st) {
    const int sf = rec__state_floats(src->opt, 1);
    if (src->N == 0) {
        *val = ((const float *)src->lin[f])[r];
        if (sf) *st = src->lstate[f][r];
        return;
    }
    const xloc l = rec__xmap_locate(&src->map, f, 0, r);
    const int every = l.owner == REC_PLAN_EVERY;
    rec__values_get(every ? src->rep_lin : src->lin[l.owner], src->b16, l.srow, 1, val);
    if (sf) *st = every ? src->rep_lstate[l.srow] : src->lstate[l.owner][l.srow];
}

/* A file's values (fp32) of tensor `name`, n of them, into *out (a source's values). */
static rec_status read_values(rec_ckpt_reader *r, const char *name, int64_t n, const void **out) {
    const float *p;
    REC_TRY(rec_ckpt_reader_tensor(r, name, n, &p));
    *out = p;
    return REC_OK;
}

/* Room for the first-order tables' pointers: n each for values and state. */
static rec_status lin_slots(source *src, int n) {
    if (!src->has_lin) return REC_OK;
    src->lin = calloc((size_t)n + 1, sizeof(void *));
    src->lstate = calloc((size_t)n + 1, sizeof(float *));
    if (!src->lin || !src->lstate) return rec_errorf(REC_ENOMEM, "out of memory");
    return REC_OK;
}

/* A whole model's checkpoint: its tables, by name (model.c's). */
static rec_status open_whole(source *src, rec_ckpt_reader *whole, const rec_model_config *c) {
    src->table = calloc((size_t)src->F * 2 + 1, sizeof(float *));
    if (!src->table) return rec_errorf(REC_ENOMEM, "out of memory");
    src->tstate = src->table + src->F;
    const int sf = rec__state_floats(src->opt, src->E);
    for (int f = 0; f < src->F; f++) {
        char name[64];
        snprintf(name, sizeof name, "emb.%d.weight", f);
        REC_TRY(rec_ckpt_reader_tensor(whole, name, c->table_rows[f] * src->E, &src->table[f]));
        snprintf(name, sizeof name, "opt.emb.%d", f);
        if (sf) REC_TRY(rec_ckpt_reader_tensor(whole, name, c->table_rows[f] * sf, &src->tstate[f]));
    }
    REC_TRY(lin_slots(src, src->F));
    const int lsf = rec__state_floats(src->opt, 1);
    for (int f = 0; src->has_lin && f < src->F; f++) {
        char name[64];
        snprintf(name, sizeof name, "lin.%d.weight", f);
        REC_TRY(read_values(whole, name, c->table_rows[f], &src->lin[f]));
        snprintf(name, sizeof name, "opt.lin.%d", f);
        if (lsf) REC_TRY(rec_ckpt_reader_tensor(whole, name, c->table_rows[f], &src->lstate[f]));
    }
    return REC_OK;
}

/* A sharded save of model `model` (global batch B): its plan, its map, and every rank's
 * file, each checked to be of this save. */
static rec_status open_sharded(source *src, const rec_model *model, int64_t B, const char *path,
                               const rec_ckpt_meta *m) {
    char file[4200];
    rec_dist_plan_path(path, m->shard_id, file, sizeof file);
    const rec_model_config *c = rec_model_get_config(model);
    rec_plan_model pm = {(int)m->shards, c->n_sparse, c->table_rows, c->emb_dim, c->sparse_opt.kind, B,
                         rec_model_n_dense_params(model), NULL, c->embed_precision == REC_PRECISION_BF16};
    REC_TRY(rec_plan_load(&src->own_plan, file, &pm));
    src->plan = src->own_plan;
    REC_TRY(rec__xmap_build(&src->map, src->plan));
    const int N = src->N = (int)m->shards;
    src->files = calloc((size_t)N, sizeof *src->files);
    src->rows = calloc((size_t)N, sizeof(void *));
    src->state = calloc((size_t)N, sizeof(float *));
    if (!src->files || !src->rows || !src->state) return rec_errorf(REC_ENOMEM, "out of memory");
    REC_TRY(lin_slots(src, N));
    const int lsf = rec__state_floats(src->opt, 1);
    for (int r = 0; r < N; r++) {
        rec_dist_shard_path(path, m->shard_id, r, N, file, sizeof file);
        REC_TRY(rec_ckpt_reader_open(&src->files[r], file));
        const rec_ckpt_meta *fm = rec_ckpt_reader_meta(src->files[r]);
        if (fm->shard_id != m->shard_id || fm->shards != N || fm->shard != r + 1 || fm->step != m->step)
            return rec_errorf(REC_EFORMAT, "%s is not rank %d's shard of the save in %s (step %lld): it holds shard %lld of "
                              "%lld at step %lld; the checkpoint directory was altered: resume from a whole one",
                              file, r, path, (long long)m->step, (long long)fm->shard - 1, (long long)fm->shards,
                              (long long)fm->step);
        REC_TRY(read_values(src->files[r], "rows", src->map.floats[r], &src->rows[r]));
        const size_t sf = state_floats(src->opt, src->map.floats[r], src->map.rows[r]);
        if (sf) REC_TRY(rec_ckpt_reader_tensor(src->files[r], "state", (int64_t)sf, &src->state[r]));
        if (src->has_lin) REC_TRY(read_values(src->files[r], "lin", src->map.rows[r], &src->lin[r]));
        if (src->has_lin && lsf)
            REC_TRY(rec_ckpt_reader_tensor(src->files[r], "lin.state", src->map.rows[r], &src->lstate[r]));
    }
    if (src->map.rep_rows) {
        REC_TRY(read_values(src->files[0], "replicated", src->map.rep_rows * src->E, &src->rep));
        const size_t sf = state_floats(src->opt, src->map.rep_rows * src->E, src->map.rep_rows);
        if (sf) REC_TRY(rec_ckpt_reader_tensor(src->files[0], "replicated.state", (int64_t)sf, &src->rep_state));
    }
    if (src->map.rep_rows && src->has_lin) {
        REC_TRY(read_values(src->files[0], "replicated.lin", src->map.rep_rows, &src->rep_lin));
        if (lsf) REC_TRY(rec_ckpt_reader_tensor(src->files[0], "replicated.lin.state", src->map.rep_rows, &src->rep_lstate));
    }
    return REC_OK;
}

/* Fills this rank's rows (and the replicated ones) from src, row by row through this job's map. */
static rec_status fill(rec_exec *x, const source *src) {
    const int E = x->E, sf = rec__state_floats(x->opt.kind, E), lsf = rec__state_floats(x->opt.kind, 1);
    float *val = malloc(sizeof(float) * (size_t)E * 2);
    if (!val) return rec_errorf(REC_ENOMEM, "out of memory");
    float *st = val + E;
    for (int f = 0; f < x->F; f++) {
        const int C = rec_plan_col_parts(x->plan, f, NULL);
        const int64_t R = rec_plan_rows(x->plan, f);
        for (int c = 0; c < C; c++) {
            const xpart *p = &x->map.parts[f][c];
            for (int64_t g = 0; g < p->pl.n_seg + p->pl.n_hot; g++) {
                const int hot = g >= p->pl.n_seg;
                const int64_t h = g - p->pl.n_seg;
                const int o = hot ? p->pl.hot_owner[h] : p->pl.seg_owner[g];
                if (o != x->rank && o != REC_PLAN_EVERY) continue;
                const int64_t r0 = hot ? p->pl.hot_row[h] : p->pl.seg_start[g];
                const int64_t r1 = hot ? r0 + 1 : g + 1 < p->pl.n_seg ? p->pl.seg_start[g + 1] : R;
                for (int64_t r = r0; r < r1; r++) {
                    const xloc l = rec__xmap_locate(&x->map, f, c, r);
                    if (l.owner != o) continue; /* a hot row inside the segment: the hot row's */
                    source_row(src, f, r, val, st);
                    if (o == REC_PLAN_EVERY) {
                        rec__values_put(rec__rep(x), x->b16, l.off, E, val);
                        if (sf) memcpy(x->rep_state + (sf == 1 ? l.srow : l.off), st, sizeof(float) * (size_t)sf);
                    } else {
                        rec__values_put(rec__store(x), x->b16, l.off, p->w, val + p->pl.c0);
                        if (sf == 1) x->state[l.srow] = st[0];
                        if (sf > 1) memcpy(x->state + l.off, st + p->pl.c0, sizeof(float) * (size_t)p->w);
                    }
                    if (x->has_lin && c == 0) { /* the first-order value lives with part 0 */
                        float lv, ls = 0;
                        source_lin(src, f, r, &lv, &ls);
                        const int every = o == REC_PLAN_EVERY;
                        if (every) rec__values_put(rec__rep_lin(x), x->b16, l.srow, 1, &lv);
                        else rec__values_put(rec__store(x), x->b16, x->store_floats + l.srow, 1, &lv);
                        if (lsf) *(every ? x->rep_lin_state + l.srow : x->lin_state + l.srow) = ls;
                    }
                }
            }
        }
    }
    free(val);
    return REC_OK;
}

/* The saved plan is this job's: the rank's own file is its store, as it was (its fp32 values
 * into a bf16 store rounded to nearest: exact for a bf16 job's save). */
static rec_status copy_own(rec_exec *x, const source *src) {
    const size_t sf = state_floats(x->opt.kind, x->store_floats, x->store_rows);
    rec__values_put(rec__store(x), x->b16, 0, x->store_floats, src->rows[x->rank]);
    if (sf) memcpy(x->state, src->state[x->rank], sizeof(float) * sf);
    const size_t rsf = state_floats(x->opt.kind, x->rep_rows * x->E, x->rep_rows);
    if (x->rep_rows) rec__values_put(rec__rep(x), x->b16, 0, x->rep_rows * x->E, src->rep);
    if (x->rep_rows && rsf) memcpy(x->rep_state, src->rep_state, sizeof(float) * rsf);
    if (!x->has_lin) return REC_OK;
    const int lsf = rec__state_floats(x->opt.kind, 1);
    rec__values_put(rec__store(x), x->b16, x->store_floats, x->store_rows, src->lin[x->rank]);
    if (lsf) memcpy(x->lin_state, src->lstate[x->rank], sizeof(float) * (size_t)x->store_rows);
    if (x->rep_rows) rec__values_put(rec__rep_lin(x), x->b16, 0, x->rep_rows, src->rep_lin);
    if (x->rep_rows && lsf) memcpy(x->rep_lin_state, src->rep_lstate, sizeof(float) * (size_t)x->rep_rows);
    return REC_OK;
}

static rec_status load(rec_exec *x, const char *path, rec_ckpt_meta *meta) {
    REC_TRY(rec_ckpt_load(path, x->m, meta));
    rec_ckpt_reader *whole = NULL;
    source src = {.F = x->F, .E = x->E, .opt = x->opt.kind, .has_lin = x->has_lin};
    rec_status s = REC_OK;
    if (meta->shards == 0) {
        s = rec_ckpt_reader_open(&whole, path);
        if (!s) s = open_whole(&src, whole, rec_model_get_config(x->m));
        if (!s) s = fill(x, &src);
    } else {
        s = open_sharded(&src, x->m, x->B, path, meta);
        if (!s) s = src.N == x->N && rec_plan_digest(src.plan) == rec_plan_digest(x->plan) ? copy_own(x, &src) : fill(x, &src);
    }
    source_free(&src);
    rec_ckpt_reader_close(whole);
    return s;
}

rec_status rec_exec_load(rec_exec *x, const char *path, rec_ckpt_meta *meta) {
    rec_status s = load(x, path, meta);
    int failed = 0;
    MPI_TRY(MPI_Allreduce((int[]){s != REC_OK}, &failed, 1, MPI_INT, MPI_MAX, rec__comm()));
    if (s) return s;
    if (failed) return rec_errorf(REC_EIO, "another rank could not load its rows of %s (its message is above)", path);
    /* the rows are in the windows before any rank's first get */
    MPI_TRY(MPI_Win_sync(x->win));
    MPI_TRY(MPI_Barrier(rec__comm()));
    return REC_OK;
}

/* ---- into one process -------------------------------------------------------------------- */

/* Every row of src into the tables of the whole model m (the state and the first-order
 * tables too); bf16 tables through rec_embed_write_rows (exact for bf16 values). */
static rec_status whole_tables(rec_model *m, const source *src) {
    const rec_model_config *c = rec_model_get_config(m);
    const int sf = rec__state_floats(src->opt, src->E), lsf = rec__state_floats(src->opt, 1);
    rec_embed *e = rec_model_embed(m, 0), *lin = src->has_lin ? rec_model_embed(m, 1) : NULL;
    float *row = malloc(sizeof(float) * (size_t)(src->E + 1));
    if (!row) return rec_errorf(REC_ENOMEM, "out of memory");
    rec_status s = REC_OK;
    for (int f = 0; !s && f < src->F; f++) {
        float *table = rec_embed_table(e, f), *state = sf ? rec_embed_state(e, f) : NULL; /* table: NULL for bf16 */
        for (int64_t r = 0; !s && r < c->table_rows[f]; r++) {
            source_row(src, f, r, table ? table + r * src->E : row, sf ? state + r * sf : NULL);
            if (!table) s = rec_embed_write_rows(e, f, r, 1, row);
        }
        float *lt = lin ? rec_embed_table(lin, f) : NULL, *ls = lin && lsf ? rec_embed_state(lin, f) : NULL;
        float unused;
        for (int64_t r = 0; !s && lin && r < c->table_rows[f]; r++) {
            source_lin(src, f, r, lt ? lt + r : row, ls ? ls + r : &unused);
            if (!lt) s = rec_embed_write_rows(lin, f, r, 1, row);
        }
    }
    free(row);
    return s;
}

/* The tables of a whole model m (one process) from sharded save `meta` of path, row by row. */
static rec_status gather(rec_model *m, const char *path, const rec_ckpt_meta *meta) {
    const rec_model_config *c = rec_model_get_config(m);
    source src = {.F = c->n_sparse, .E = c->emb_dim, .opt = c->sparse_opt.kind, .has_lin = rec_model_embed(m, 1) != NULL};
    rec_status s = rec_model_embed(m, 0) ? open_sharded(&src, m, c->batch_size, path, meta)
                                         : rec_errorf(REC_EINVAL, "%s: the model has no tables to load into", path);
    if (!s) s = whole_tables(m, &src);
    source_free(&src);
    return s;
}

/* Rank `from`'s n items of type t (`size` bytes each) into buf on rank 0, in messages an int
 * counts. */
static rec_status to_rank0(const rec_exec *x, int from, void *buf, int64_t n, MPI_Datatype t, size_t size) {
    enum { CHUNK = 1 << 26 };
    for (int64_t at = 0; at < n; at += CHUNK) {
        const int k = (int)(n - at < CHUNK ? n - at : CHUNK);
        char *b = (char *)buf + (size_t)at * size;
        if (x->rank == from) MPI_TRY(MPI_Send(b, k, t, 0, 0, rec__comm()));
        else MPI_TRY(MPI_Recv(b, k, t, from, 0, rec__comm(), MPI_STATUS_IGNORE));
    }
    return REC_OK;
}

/* Values of rank r's store (its rows, then its first-order values), floats of its rows' state
 * and of its first-order values' state. */
static void sizes(const rec_exec *x, int r, int64_t n[3]) {
    n[0] = x->map.floats[r] + (x->has_lin ? x->map.rows[r] : 0);
    n[1] = (int64_t)state_floats(x->opt.kind, x->map.floats[r], x->map.rows[r]);
    n[2] = x->has_lin && rec__state_floats(x->opt.kind, 1) ? x->map.rows[r] : 0;
}

rec_status rec_exec_gather(rec_exec *x, rec_model *whole) {
    const int N = x->N, root = x->rank == 0, L = x->has_lin;
    source src = {.F = x->F, .E = x->E, .N = N, .opt = x->opt.kind, .has_lin = L, .b16 = x->b16, .plan = x->plan,
                  .map = x->map, .rep = rec__rep(x), .rep_state = x->rep_state, .rep_lin = rec__rep_lin(x),
                  .rep_lstate = x->rep_lin_state};
    const size_t vb = (size_t)rec__value_bytes(x->b16);
    const MPI_Datatype vt = x->b16 ? MPI_UINT16_T : MPI_FLOAT;
    rec_status s = REC_OK;
    if (root && (!whole || rec_model_is_sharded(whole) || !rec_model_embed(whole, 0) ||
                 !rec_model_embed(whole, 1) != !L || rec_model_n_dense_params(whole) != rec_model_n_dense_params(x->m)))
        s = rec_errorf(REC_EINVAL, "rec_exec_gather: rank 0 needs a whole model of the job's config");
    if (root && !s && (!(src.rows = calloc((size_t)N, sizeof(void *))) || !(src.state = calloc((size_t)N, sizeof(float *))) ||
                       lin_slots(&src, N)))
        s = rec_errorf(REC_ENOMEM, "out of memory");
    int64_t n[3];
    for (int r = 1; root && !s && r < N; r++) {
        sizes(x, r, n);
        const size_t vbytes = (vb * (size_t)n[0] + 7) / 8 * 8; /* the values, then the state floats */
        char *buf = malloc(vbytes + sizeof(float) * (size_t)(n[1] + n[2]) + 1);
        if (!buf) s = rec_errorf(REC_ENOMEM, "gathering the tables: rank %d's %lld rows do not fit in rank 0's memory",
                                 r, (long long)x->map.rows[r]);
        else src.rows[r] = buf, src.state[r] = (float *)(void *)(buf + vbytes);
        if (buf && L) src.lin[r] = buf + vb * (size_t)x->map.floats[r], src.lstate[r] = src.state[r] + n[1];
    }
    /* every rank learns whether rank 0 can take the rows before any is sent */
    int bad = s != REC_OK;
    MPI_TRY(MPI_Bcast(&bad, 1, MPI_INT, 0, rec__comm()));
    for (int r = 1; !bad && r < N; r++) {
        if (!root && r != x->rank) continue;
        sizes(x, r, n);
        REC_TRY(to_rank0(x, r, root ? (void *)src.rows[r] : rec__store(x), n[0], vt, vb));
        if (n[1]) REC_TRY(to_rank0(x, r, root ? (void *)src.state[r] : x->state, n[1], MPI_FLOAT, sizeof(float)));
        if (n[2]) REC_TRY(to_rank0(x, r, root ? (void *)src.lstate[r] : x->lin_state, n[2], MPI_FLOAT, sizeof(float)));
    }
    if (root && !bad) {
        src.rows[0] = rec__store(x), src.state[0] = x->state;
        if (L) src.lin[0] = (const char *)rec__store(x) + vb * (size_t)x->store_floats, src.lstate[0] = x->lin_state;
        memcpy(rec_model_dense_params(whole), rec_model_dense_params(x->m),
               sizeof(float) * rec_model_n_dense_params(x->m));
        rec_model_set_steps(whole, rec_model_steps(x->m));
        s = whole_tables(whole, &src);
    }
    for (int r = 1; root && src.rows && r < N; r++) free((void *)src.rows[r]);
    free(src.rows);
    free(src.state);
    free(src.lin);
    free(src.lstate);
    if (s) return s;
    return bad ? rec_errorf(REC_ENOMEM, "rank 0 could not gather the tables (its message is above)") : REC_OK;
}

rec_status rec_dist_ckpt_load(const char *path, rec_model *m, rec_ckpt_meta *meta) {
    rec_ckpt_meta mine;
    meta = meta ? meta : &mine;
    if (rec_model_is_sharded(m))
        return rec_errorf(REC_EINVAL, "rec_dist_ckpt_load: the model is sharded; its rows load with rec_exec_load");
    REC_TRY(rec_ckpt_load_except_tables(path, m, meta));
    return meta->shards ? gather(m, path, meta) : REC_OK;
}
