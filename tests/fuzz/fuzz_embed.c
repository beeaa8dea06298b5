/* libFuzzer target for the embedding engine's forward and backward+update (embed.h), checked
 * mode, differential: the input's bytes choose a model (1..4 tables, dims 1..130 incl. odd and
 * unspecialised ones, 1..70000 rows: ids of 1 to 3 radix digits), the optimizer, SUM or MEAN, weights or not, 1 or 2
 * threads, a batch (0..40 rows, bags of 0..40 ids, ids 32- or 64-bit, sometimes out of
 * range) and TWO schedules per table. Two engines with the same tables run the same batch,
 * one under each plan, and must agree:
 *  - both accept the batch or both reject it (an id outside its table); a rejection changes
 *    no bit of the tables or the optimizer state and names the bad id;
 *  - forward outputs are bitwise equal (embed.h: every schedule computes the same bits) and
 *    within the tolerance of test_embed_sched.c of rec_embed_forward_ref (float64);
 *  - after backward+update the tables and optimizer states are bitwise equal.
 * Dims the kernels do not specialise send FIXED to GENERIC and ROW to SAMPLE (embed.h), so
 * those fallbacks are compared too. Build and run: scripts/fuzz.sh (a crash, leak, UB or
 * abort is a bug). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "embedcheck.h"
#include "rectrain/embed.h"

enum { MAXF = 4, MAXB = 40, MAXL = 40 };

/* The input read as a stream of bytes, zeros once it runs out. */
typedef struct bytes {
    const uint8_t *p;
    size_t n;
} bytes;

static unsigned take(bytes *in) {
    if (!in->n) return 0;
    in->n--;
    return *in->p++;
}

static rec_embed_sched take_sched(bytes *in) {
    static const uint8_t PF[8] = {0, 1, 2, 3, 8, 16, 33, 64};
    const unsigned a = take(in), b = take(in);
    rec_embed_sched s = {(uint8_t)(a % 3), (uint8_t)(a / 3 % 3), PF[a / 9 % 8],
                         (uint8_t)(REC_EMBED_GRAIN_MIN + b % (REC_EMBED_GRAIN_MAX - REC_EMBED_GRAIN_MIN + 1)),
                         (uint8_t)(b / 11 % 3), PF[b / 33 % 8]};
    return s;
}

/* Every schedule fits these tables (the COUNT and DENSE size limits are fuzz_plan's and
 * test_embed_sched's to check), so rec_embed_set_sched must take it. */
static void set_sched(rec_embed *e, int f, rec_embed_sched s) {
    if (rec_embed_set_sched(e, f, s) != REC_OK) abort();
}

/* e's tables and optimizer states copied end to end; *n gets the floats. */
static float *snapshot(rec_embed *e, size_t *n) {
    *n = 0;
    for (int f = 0; f < rec_embed_tables(e); f++)
        *n += (size_t)rec_embed_rows(e, f) * (size_t)rec_embed_dim(e, f) + rec_embed_state_len(e, f);
    float *s = malloc(*n * sizeof(float) + 1), *p = s;
    if (!s) abort();
    for (int f = 0; f < rec_embed_tables(e); f++) {
        const size_t t = (size_t)rec_embed_rows(e, f) * (size_t)rec_embed_dim(e, f), k = rec_embed_state_len(e, f);
        memcpy(p, rec_embed_table(e, f), t * sizeof(float));
        if (k) memcpy(p + t, rec_embed_state(e, f), k * sizeof(float));
        p += t + k;
    }
    return s;
}

/* Does e still hold the n floats of snap? */
static int unchanged(rec_embed *e, const float *snap, size_t n) {
    size_t m;
    float *now = snapshot(e, &m);
    const int eq = m == n && !memcmp(now, snap, n * sizeof(float));
    free(now);
    return eq;
}

/* Forward against the float64 reference, |got - ref| <= 4e-5 S, S the same pooling over
 * |T| and |w| (test_embed_sched.c derives the bound). */
static void check_ref(rec_embed *e, rec_batch *b, rec_pooling pooling, const float *out) {
    const size_t n = (size_t)b->n * (size_t)rec_embed_out_width(e);
    double *ref = malloc((n + 1) * sizeof(double)), *S = malloc((n + 1) * sizeof(double));
    if (!ref || !S) abort();
    forward_refs(e, pooling, b, 0, ref, S);
    for (size_t i = 0; i < n; i++)
        if (!(fabs((double)out[i] - ref[i]) <= 4e-5 * S[i])) abort();
    free(ref);
    free(S);
}

/* OpenMP's idle threads yield at once instead of spinning on the other core for 200 ms. */
int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    setenv("KMP_BLOCKTIME", "0", 0);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const int DIMS[16] = {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 24, 32, 33, 64, 128, 130};
    static const int64_t ROWS[8] = {1, 2, 3, 7, 64, 255, 1000, 70000};
    bytes in = {data, size};
    const unsigned h = take(&in);
    const int F = 1 + (int)(h % MAXF);
    const rec_pooling pooling = h / 4 % 2 ? REC_POOL_MEAN : REC_POOL_SUM;
    const int weighted = (int)(h / 8 % 2), threads = 1 + (int)(h / 16 % 2);
    const rec_sparse_opt_kind kind = (rec_sparse_opt_kind)(h / 32 % 3);
    int64_t rows[MAXF];
    int dims[MAXF];
    for (int f = 0; f < F; f++) {
        const unsigned t = take(&in);
        rows[f] = ROWS[t % 8];
        dims[f] = DIMS[t / 8 % 16];
        if (rows[f] > 1000 && dims[f] > 2) dims[f] = 2; /* at most 0.6 MB a table */
    }
    const int B = (int)(take(&in) % (MAXB + 1));

    rec_embed_config c = {F, rows, dims, pooling, rec_sparse_opt_defaults(kind, 0.05f), MAXB, threads, 11, 0, 0, REC_ROUND_STOCHASTIC};
    rec_embed *e[2] = {NULL, NULL};
    if (rec_embed_init(&e[0], &c) != REC_OK || rec_embed_init(&e[1], &c) != REC_OK) abort();
    for (int f = 0; f < F; f++) {
        set_sched(e[0], f, take_sched(&in));
        set_sched(e[1], f, take_sched(&in));
    }

    /* The batch: a length byte per bag, an id byte (or two, on tables of more than 253 rows;
     * on the 70000-row table half of those ids share low radix digits) per id;
     * byte 255 makes the id R (out of range) and 254 makes it -1. */
    rec_batch b;
    if (rec_batch_init(&b, MAXB, 0, F, 4) != REC_OK) abort();
    b.n = B;
    int bad_ids = 0;
    for (int f = 0; f < F; f++) {
        rec_jagged *j = &b.sparse[f];
        const unsigned opt = take(&in);
        const int one_hot = opt % 2, narrow = opt / 2 % 2;
        j->offsets[0] = 0;
        for (int r = 0; r < B; r++) {
            const int L = one_hot ? 1 : (int)(take(&in) % (MAXL + 1));
            if (rec_batch_reserve_nnz(&b, f, j->offsets[r] + L, weighted) != REC_OK) abort();
            for (int64_t k = j->offsets[r]; k < j->offsets[r] + L; k++) {
                const unsigned lo = take(&in);
                int64_t id;
                if (lo == 255) id = rows[f];
                else if (lo == 254) id = -1;
                else if (rows[f] > 65536 && lo < 128) /* ids sharing their low 8 or 16 bits */
                    id = (int64_t)(lo & 1) << 16 | (int64_t)(lo >> 1 & 1) << 8 | (int64_t)(take(&in) & 3);
                else if (rows[f] > 253) id = (int64_t)(lo << 8 | take(&in)) * 2654435761LL % rows[f];
                else id = lo % rows[f];
                bad_ids += lo >= 254;
                j->ids64[k] = id;
                if (j->weights) j->weights[k] = ((float)take(&in) - 128.0f) / 32.0f;
            }
            j->offsets[r + 1] = j->offsets[r] + L;
        }
        if (narrow && rec_batch_set_wide(&b, f, 0) != REC_OK) abort();
    }

    const int W = rec_embed_out_width(e[0]);
    float *out[2], *dout = malloc(((size_t)MAXB * (size_t)W + 1) * sizeof(float));
    out[0] = malloc(((size_t)MAXB * (size_t)W + 1) * sizeof(float));
    out[1] = malloc(((size_t)MAXB * (size_t)W + 1) * sizeof(float));
    if (!out[0] || !out[1] || !dout) abort();
    size_t n_before;
    float *before = snapshot(e[0], &n_before);
    rec_status st[2];
    for (int i = 0; i < 2; i++) st[i] = rec_embed_forward(e[i], &b, 0, out[i]);
    if (st[0] != st[1]) abort();
    if (st[0] != REC_OK) {
        if (!bad_ids || st[0] != REC_EINVAL || !strstr(rec_errmsg(), "id")) abort();
        if (!unchanged(e[0], before, n_before) || !same_bits(e[0], e[1])) abort(); /* a rejection changes nothing */
    } else {
        if (bad_ids) abort(); /* checked mode let an id outside its table through */
        if (memcmp(out[0], out[1], (size_t)B * (size_t)W * sizeof(float))) abort();
        check_ref(e[0], &b, pooling, out[0]);
        for (int64_t i = 0; i < (int64_t)B * W; i++) dout[i] = ((float)take(&in) - 128.0f) / 64.0f;
        for (int i = 0; i < 2; i++)
            if (rec_embed_backward_update(e[i], &b, 0, dout, 0.05f) != REC_OK) abort();
        if (!same_bits(e[0], e[1])) abort();
    }
    free(before);
    free(out[0]);
    free(out[1]);
    free(dout);
    rec_batch_free(&b);
    rec_embed_free(e[0]);
    rec_embed_free(e[1]);
    return 0;
}
