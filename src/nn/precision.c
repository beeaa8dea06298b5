/* Precisions (nn.h "precision"): their names and the array conversions to bf16 that the layers
 * and the interaction use. No oneDNN here, so the config parser links without it. */
#include "rectrain/nn.h"

const char *rec_precision_name(rec_precision p) { return p == REC_PRECISION_BF16 ? "bf16" : "fp32"; }

void rec_bf16_pack(const float *x, size_t n, uint16_t *out) {
    for (size_t i = 0; i < n; i++) out[i] = rec_bf16_bits(x[i]);
}

void rec_bf16_round(const float *x, size_t n, float *out) {
    for (size_t i = 0; i < n; i++) out[i] = rec_bf16_to_float(rec_bf16_bits(x[i]));
}
