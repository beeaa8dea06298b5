/* DLRM feature interaction (nn.h): "dot" (Naumov et al., "Deep Learning Recommendation Model
 * for Personalization and Recommendation Systems", 2019, §2.2 and dlrm_s_pytorch.py
 * interact_features) and "cat".
 *
 * Layout of one output row (dot): [x (E) | Z[1][0], Z[2][0], Z[2][1], Z[3][0], ...], i.e. rows
 * i = 0..F of Z and, in each, columns j < i (j <= i with self-interaction) — the order of
 * dlrm's li/lj index lists. T's row 0 is x, rows 1..F the embeddings.
 *
 * The float path and the float64 reference are the same readable loops; at DLRM's sizes
 * (B 2048, F+1 27, E 16: ~23 MFLOP per pass) they cost about a millisecond, far below the
 * MLPs, so no blocking is attempted. Accumulation in float over E terms. In bf16 the
 * products take operands rounded to bf16 (T, and dZ in the backward): a sample's T is
 * rounded once into a scratch row, then the same loops run on it. */
#include <stdlib.h>
#include <string.h>

#include "rectrain/core.h"
#include "rectrain/nn.h"

int rec_interact_dim(rec_interact_kind kind, int self_interaction, int F, int E) {
    if (kind == REC_INTERACT_CAT) return E + F * E;
    return E + (F + 1) * F / 2 + (self_interaction ? F + 1 : 0);
}

static rec_status check_args(const char *who, rec_interact_kind kind, int B, int F, int E) {
    if (kind != REC_INTERACT_DOT && kind != REC_INTERACT_CAT)
        return rec_errorf(REC_EINVAL, "%s: unknown interaction kind %d (want REC_INTERACT_DOT or REC_INTERACT_CAT)", who, (int)kind);
    if (B < 0 || F < 0 || E < 1)
        return rec_errorf(REC_EINVAL, "%s: bad shape B %d, F %d, E %d (need B >= 0, F >= 0, E >= 1)", who, B, F, E);
    return REC_OK;
}

/* Row t of T (E) for sample b: x's row for t = 0, embedding t-1 otherwise. */
#define TROW(x, emb, b, t, F, E) \
    ((t) == 0 ? (x) + (size_t)(b) * (E) : (emb) + ((size_t)(b) * (F) + (size_t)(t) - 1) * (E))

/* Row b's T = [x; emb] (F+1, E), rounded to bf16 into t. */
static void round_row(const float *x, const float *emb, int b, int F, int E, float *t) {
    rec_bf16_round(x + (size_t)b * E, (size_t)E, t);
    rec_bf16_round(emb + (size_t)b * F * E, (size_t)F * E, t + E);
}

/* Row i of sample b's T: x's row for i = 0, embedding i-1 otherwise; or (t not NULL) row i of
 * the sample's rounded copy t. */
static inline const float *trow(const float *x, const float *emb, const float *t, int b, int i, int F, int E) {
    return t ? t + (size_t)i * E : TROW(x, emb, b, i, F, E);
}

/* The bf16 operands' scratch: (F+1) E floats for one sample's rounded T, or NULL for fp32. */
static rec_status scratch(rec_precision prec, rec_interact_kind kind, int F, int E, float **t) {
    *t = NULL;
    if (prec != REC_PRECISION_BF16 || kind != REC_INTERACT_DOT) return REC_OK;
    *t = malloc(sizeof(float) * (size_t)(F + 1) * (size_t)E);
    return *t ? REC_OK : rec_errorf(REC_ENOMEM, "interaction: out of memory for a row of %d x %d bf16 operands", F + 1, E);
}

rec_status rec_interact_forward(rec_interact_kind kind, int self_interaction, rec_precision prec, int B, int F,
                                int E, const float *x, const float *emb, float *out) {
    REC_TRY(check_args("rec_interact_forward", kind, B, F, E));
    const int D = rec_interact_dim(kind, self_interaction, F, E), self = self_interaction != 0;
    float *t;
    REC_TRY(scratch(prec, kind, F, E, &t));
    for (int b = 0; b < B; b++) {
        float *o = out + (size_t)b * D;
        memcpy(o, x + (size_t)b * E, (size_t)E * sizeof(float));
        if (kind == REC_INTERACT_CAT) {
            memcpy(o + E, emb + (size_t)b * F * E, (size_t)F * E * sizeof(float));
            continue;
        }
        if (t) round_row(x, emb, b, F, E, t);
        int k = E;
        for (int i = 0; i <= F; i++) {
            const float *ti = trow(x, emb, t, b, i, F, E);
            for (int j = 0; j < i + self; j++) {
                const float *tj = trow(x, emb, t, b, j, F, E);
                float s = 0.0f;
                for (int e = 0; e < E; e++) s += ti[e] * tj[e];
                o[k++] = s;
            }
        }
    }
    free(t);
    return REC_OK;
}

/* dZ[i][j] = dout at (i, j); since Z[i][j] = T_i . T_j, dT_i += dZ T_j and dT_j += dZ T_i
 * (both land on T_i, i.e. 2 dZ T_i, on the diagonal). dx also receives the pass-through
 * slice dout[0:E]. bf16: dZ and T enter the products rounded. */
rec_status rec_interact_backward(rec_interact_kind kind, int self_interaction, rec_precision prec, int B, int F,
                                 int E, const float *x, const float *emb, const float *dout,
                                 float *dx, float *demb) {
    REC_TRY(check_args("rec_interact_backward", kind, B, F, E));
    const int D = rec_interact_dim(kind, self_interaction, F, E), self = self_interaction != 0;
    float *t;
    REC_TRY(scratch(prec, kind, F, E, &t));
    for (int b = 0; b < B; b++) {
        const float *g = dout + (size_t)b * D;
        memcpy(dx + (size_t)b * E, g, (size_t)E * sizeof(float));
        if (kind == REC_INTERACT_CAT) {
            memcpy(demb + (size_t)b * F * E, g + E, (size_t)F * E * sizeof(float));
            continue;
        }
        memset(demb + (size_t)b * F * E, 0, (size_t)F * E * sizeof(float));
        if (t) round_row(x, emb, b, F, E, t);
        int k = E;
        for (int i = 0; i <= F; i++) {
            const float *ti = trow(x, emb, t, b, i, F, E);
            float *di = TROW(dx, demb, b, i, F, E);
            for (int j = 0; j < i + self; j++) {
                const float *tj = trow(x, emb, t, b, j, F, E);
                float *dj = TROW(dx, demb, b, j, F, E);
                const float gz = t ? rec_bf16_to_float(rec_bf16_bits(g[k])) : g[k];
                k++;
                for (int e = 0; e < E; e++) {
                    di[e] += gz * tj[e];
                    dj[e] += gz * ti[e];
                }
            }
        }
    }
    free(t);
    return REC_OK;
}

/* float64 reference: forms Z in full, then picks the lower triangle, to be read against the
 * definition rather than the fast loop above. */
void rec_interact_forward_ref(rec_interact_kind kind, int self_interaction, int B, int F, int E,
                              const double *x, const double *emb, double *out) {
    const int D = rec_interact_dim(kind, self_interaction, F, E), n = F + 1;
    for (int b = 0; b < B; b++) {
        double *o = out + (size_t)b * D;
        for (int e = 0; e < E; e++) o[e] = x[(size_t)b * E + e];
        if (kind == REC_INTERACT_CAT) {
            for (int t = 0; t < F * E; t++) o[E + t] = emb[(size_t)b * F * E + t];
            continue;
        }
        int k = E;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                if (j > i || (j == i && !self_interaction)) continue;
                const double *ti = TROW(x, emb, b, i, F, E), *tj = TROW(x, emb, b, j, F, E);
                double s = 0.0;
                for (int e = 0; e < E; e++) s += ti[e] * tj[e];
                o[k++] = s;
            }
    }
}

void rec_interact_backward_ref(rec_interact_kind kind, int self_interaction, int B, int F,
                               int E, const double *x, const double *emb, const double *dout,
                               double *dx, double *demb) {
    const int D = rec_interact_dim(kind, self_interaction, F, E), n = F + 1;
    for (int b = 0; b < B; b++) {
        const double *g = dout + (size_t)b * D;
        for (int e = 0; e < E; e++) dx[(size_t)b * E + e] = g[e];
        if (kind == REC_INTERACT_CAT) {
            for (int t = 0; t < F * E; t++) demb[(size_t)b * F * E + t] = g[E + t];
            continue;
        }
        for (int t = 0; t < F * E; t++) demb[(size_t)b * F * E + t] = 0.0;
        int k = E;
        for (int i = 0; i < n; i++)
            for (int j = 0; j < n; j++) {
                if (j > i || (j == i && !self_interaction)) continue;
                const double gz = g[k++];
                const double *ti = TROW(x, emb, b, i, F, E), *tj = TROW(x, emb, b, j, F, E);
                double *di = TROW(dx, demb, b, i, F, E), *dj = TROW(dx, demb, b, j, F, E);
                for (int e = 0; e < E; e++) {
                    double a = gz * tj[e], c = gz * ti[e];
                    di[e] += a;
                    dj[e] += c;
                }
            }
    }
}
