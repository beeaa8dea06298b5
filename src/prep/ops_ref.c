/* Reference (scalar, readable) definitions of the preprocessing operators.
 *
 * RAP's operators (ASPLOS'24 Table 1) follow the semantics of the artifact's TorchArrow/Velox
 * UDFs as restated in ../shared/papers/000-RAP-digest.md §3.8; each function below quotes
 * the rule it implements. The fused executor (exec.c) is tested against these.
 */
#include <math.h>
#include <string.h>

#include "rectrain/prep.h"
#include "prep_internal.h"

static const char *const OP_NAMES[REC_OP_COUNT] = {
    [REC_OP_FILL_NULL] = "fill_null", [REC_OP_CAST] = "cast",         [REC_OP_LOGIT] = "logit",
    [REC_OP_BOXCOX] = "boxcox",       [REC_OP_ONEHOT] = "onehot",     [REC_OP_SIGRID_HASH] = "sigrid_hash",
    [REC_OP_FIRSTX] = "firstx",       [REC_OP_CLAMP] = "clamp",       [REC_OP_BUCKETIZE] = "bucketize",
    [REC_OP_NGRAM] = "ngram",         [REC_OP_MAP_ID] = "map_id",     [REC_OP_LOG1P] = "log1p",
    [REC_OP_MODULO] = "modulo",       [REC_OP_CATEGORIFY] = "categorify",
};

const char *rec_op_name(rec_op_kind k) {
    return (unsigned)k < REC_OP_COUNT ? OP_NAMES[k] : "?";
}

int rec_op_kind_from_name(const char *name) {
    for (int k = 0; k < REC_OP_COUNT; k++)
        if (strcmp(name, OP_NAMES[k]) == 0) return k;
    return -1;
}

/* Logit(x, eps): t = clamp(x, eps, 1-eps); log(t / (1-t)). NaN stays NaN. */
double rec_ref_logit(double x, double eps) {
    double t = x;
    if (x < eps) t = eps;
    else if (x > 1.0 - eps) t = 1.0 - eps;
    return log(t / (1.0 - t));
}

/* BoxCox(x, lambda): for x > 0, log(x) when lambda == 0, else (x^lambda - 1) / lambda;
 * x <= 0 (and NaN) is left unchanged. */
double rec_ref_boxcox(double x, double lambda) {
    if (!(x > 0)) return x;
    return lambda == 0 ? log(x) : (pow(x, lambda) - 1.0) / lambda;
}

/* log(1 + x): the dense transform of the facebookresearch/dlrm Criteo preprocessing
 * (applied after clamping at 0), in double like the other float ops, so that the executors
 * round one correctly rounded value to float on the CPU and on a GPU (gops.h's rec_g_log1p:
 * the C library's log1pf is not correctly rounded, nor is CUDA's, and they differ). It is
 * as fast as log1pf here. x < -1 gives NaN, -1 gives -inf. */
double rec_ref_log1p(double x) { return log1p(x); }

/* Onehot(x, lower, upper, num_class): step = (upper-lower)/num_class,
 * idx = int((x-lower)/step) truncated toward zero; idx outside [0, num_class) -> 0.
 * Writes num_class floats. NaN selects class 0 (the artifact's int() of NaN is undefined;
 * we pin it). */
void rec_ref_onehot(double x, double lower, double upper, int32_t num_class, float *out) {
    double step = (upper - lower) / num_class;
    double q = (x - lower) / step;
    int32_t idx = 0;
    if (q >= 0 && q < (double)num_class) idx = (int32_t)q;
    for (int32_t i = 0; i < num_class; i++) out[i] = 0.0f;
    out[idx] = 1.0f;
}

/* Bucketize(x, borders), CPU rule: index = lower_bound(borders, x); if index >= n-1 return
 * index; else return x < borders[index+1] ? index : index+1. (The extra step lets a border
 * repeated twice put values equal to it in the upper bucket.) NaN compares false
 * everywhere, so lower_bound stops at 0 and NaN lands in bucket 0 or 1. */
int64_t rec_ref_bucketize(double x, const double *borders, int32_t n_borders) {
    int32_t index = 0;
    while (index < n_borders && borders[index] < x) index++; /* lower_bound */
    if (index >= n_borders - 1) return index;
    return x < borders[index + 1] ? index : index + 1;
}

/* Floor modulo: the result is in [0, divisor) for every x, negative ones included. */
int64_t rec_ref_modulo(int64_t x, int64_t divisor) {
    int64_t r = x % divisor;
    return r < 0 ? r + divisor : r;
}

/* MapID(x, map), CPU rule: x >= |map| -> 0, else map[x]; we also send x < 0 to 0 (the
 * CPU UDF indexes unsigned; the GPU one maps negatives to 0). */
int64_t rec_ref_map_id(int64_t x, const int64_t *map, int64_t map_len) {
    if (x < 0 || x >= map_len) return 0;
    return map[x];
}

/* Thomas Wang's 64-bit mix (folly::hash::twang_mix64). */
uint64_t rec_twang_mix64(uint64_t k) { return rec_g_twang(k); }

/* folly::hash::hash_128_to_64: Murmur-inspired combination of two 64-bit words. */
uint64_t rec_hash_128_to_64(uint64_t upper, uint64_t lower) { return rec_g_hash128(upper, lower); }

/* computeMultiperAndShift(divisor, precision = 63) of the Velox sigrid_hash UDF:
 * l = ceil(log2 d); low = 2^(64+l) / d; high = (2^(64+l) + 2^(64+l-63)) / d; halve both
 * while low/2 < high/2 and l > 0. Returns (high, l). Computed in exact integer arithmetic
 * (the UDF's ceil(std::log2(d)) agrees for every d < 2^53; we take the exact value). */
void rec_sigrid_magic(int64_t max_value, uint64_t *multiplier, int *shift) {
    uint64_t d = (uint64_t)max_value;
    int l = 0;
    while (l < 63 && ((uint64_t)1 << l) < d) l++;
    unsigned __int128 one = 1;
    unsigned __int128 low = (one << (64 + l)) / d;
    unsigned __int128 high = ((one << (64 + l)) + (one << (64 + l - 63))) / d;
    while (low / 2 < high / 2 && l > 0) {
        low /= 2;
        high /= 2;
        l--;
    }
    *multiplier = (uint64_t)high;
    *shift = l;
}

/* SigridHash(x, salt, maxValue), CPU (Velox/folly) definition:
 *   hashed = hash_combine(salt, twang_mix64(x)) = hash_128_to_64(salt, twang_mix64(x))
 *            (folly's hash_combine with std::hash, the identity on integers);
 *   maxValue == 1 -> 0;
 *   maxValue > 1  -> sign = hashed >> 63 (arithmetic);
 *                    q = sign ^ ((multiplier * (sign ^ hashed)) >> (64 + shift));
 *                    hashed - q * maxValue
 * which is the floor-mod of the signed hash by maxValue via multiply-shift division, so the
 * result is in [0, maxValue). The GPU variant of the artifact hashes differently (FNV-1a
 * over the bytes) and is not bit-identical; rectrain uses this CPU definition everywhere. */
int64_t rec_ref_sigrid_hash(int64_t x, int64_t salt, int64_t max_value) {
    if (max_value == 1) return 0;
    int64_t hashed = (int64_t)rec_hash_128_to_64((uint64_t)salt, rec_twang_mix64((uint64_t)x));
    uint64_t multiplier;
    int shift;
    rec_sigrid_magic(max_value, &multiplier, &shift);
    return rec_g_floor_mod(hashed, max_value, multiplier, shift);
}
