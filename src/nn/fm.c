/* Second-order factorization-machine term (nn.h), DeepFM's FM component (Guo, Tang, Ye, Li,
 * He, "DeepFM: A Factorization-Machine based Neural Network for CTR Prediction", IJCAI 2017,
 * eq. 2) with the O(F E) rewriting of Rendle, "Factorization Machines", ICDM 2010, lemma 3.1:
 *     sum_{f < f'} <v_f, v_f'> = 1/2 sum_e [ (sum_f v_fe)^2 - sum_f v_fe^2 ],
 * where v_f (E) is field f's embedding (one-hot fields: x_f = 1, so the embedding is the
 * factor). Its gradient: d out / d v_fe = sum_f' v_f'e - v_fe.
 *
 * The float path walks each row once per chunk of up to 64 embedding columns, keeping the
 * column sums (and sums of squares) in a stack buffer: rows outer, fields middle, columns
 * inner, so the inner loop is stride-1 and vectorises. Sums are in float, in field order;
 * the final reduction over e is sequential, so results are deterministic. No allocation,
 * any E. Cost at B 2048, F 26, E 64: ~10 MFLOP, a fraction of a millisecond.
 *
 * The float64 references are the header's formula as plain loops; tests check them against
 * the pairwise definition and finite differences. */
#include <stddef.h>

#include "rectrain/nn.h"

enum { CHUNK = 64 };  /* columns whose sums live on the stack at once (E <= 64 on Criteo) */

/* out (B) = 1/2 sum_e [(sum_f v_fe)^2 - sum_f v_fe^2] for emb (B, F, E); overwritten. */
void rec_fm_forward(int B, int F, int E, const float *emb, float *out) {
    for (int b = 0; b < B; b++) {
        const float *row = emb + (size_t)b * F * E;  /* (F, E) */
        float o = 0.0f;
        for (int e0 = 0; e0 < E; e0 += CHUNK) {
            const int n = E - e0 < CHUNK ? E - e0 : CHUNK;
            float sum[CHUNK], sq[CHUNK];  /* (n) */
            for (int e = 0; e < n; e++) sum[e] = 0.0f, sq[e] = 0.0f;
            for (int f = 0; f < F; f++) {
                const float *v = row + (size_t)f * E + e0;
                for (int e = 0; e < n; e++) {
                    sum[e] += v[e];
                    sq[e] += v[e] * v[e];
                }
            }
            for (int e = 0; e < n; e++) o += sum[e] * sum[e] - sq[e];
        }
        out[b] = 0.5f * o;
    }
}

/* demb (B, F, E) += dout_b (sum_f' v_f'e - v_fe): ACCUMULATED (the embeddings also feed the
 * deep network, whose gradient lands in the same buffer). dout (B). demb must not overlap
 * emb. */
void rec_fm_backward(int B, int F, int E, const float *emb, const float *dout, float *demb) {
    for (int b = 0; b < B; b++) {
        const size_t o = (size_t)b * F * E;
        const float g = dout[b];
        for (int e0 = 0; e0 < E; e0 += CHUNK) {
            const int n = E - e0 < CHUNK ? E - e0 : CHUNK;
            float sum[CHUNK];  /* (n) */
            for (int e = 0; e < n; e++) sum[e] = 0.0f;
            for (int f = 0; f < F; f++) {
                const float *v = emb + o + (size_t)f * E + e0;
                for (int e = 0; e < n; e++) sum[e] += v[e];
            }
            for (int f = 0; f < F; f++) {
                const float *restrict v = emb + o + (size_t)f * E + e0;
                float *restrict dv = demb + o + (size_t)f * E + e0;
                for (int e = 0; e < n; e++) dv[e] += g * (sum[e] - v[e]);
            }
        }
    }
}

/* float64 reference of the forward: the formula above, column by column. */
void rec_fm_forward_ref(int B, int F, int E, const double *emb, double *out) {
    for (int b = 0; b < B; b++) {
        double o = 0.0;
        for (int e = 0; e < E; e++) {
            double sum = 0.0, sq = 0.0;
            for (int f = 0; f < F; f++) {
                const double v = emb[((size_t)b * F + f) * E + e];
                sum += v;
                sq += v * v;
            }
            o += sum * sum - sq;
        }
        out[b] = 0.5 * o;
    }
}

/* float64 reference of the backward: demb += dout_b (sum_f' v_f'e - v_fe), accumulated. */
void rec_fm_backward_ref(int B, int F, int E, const double *emb, const double *dout,
                         double *demb) {
    for (int b = 0; b < B; b++)
        for (int e = 0; e < E; e++) {
            double sum = 0.0;
            for (int f = 0; f < F; f++) sum += emb[((size_t)b * F + f) * E + e];
            for (int f = 0; f < F; f++) {
                const size_t i = ((size_t)b * F + f) * E + e;
                demb[i] += dout[b] * (sum - emb[i]);
            }
        }
}
