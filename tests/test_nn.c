/* The dense side (nn.h) against its references and formulas.
 *
 *  - the oneDNN linear layer against the float64 scalar reference (linear_ref.c), forward and
 *    backward, ReLU on and off, on shapes with B = 1, In = 1 and odd widths (13, 17, 513),
 *    outputs poisoned with NaN first so unwritten elements fail; in bf16 too (the reference
 *    on bf16-rounded operands), emulated and, where the CPU has them, on native kernels;
 *  - bf16 rounding against its frexp/ldexp reference;
 *  - finite differences in float64 for the reference linear layer, the interactions (dot with
 *    and without self-interaction, cat) and the loss, after checking the float paths against
 *    those references;
 *  - the optimizers against their PyTorch formulas over several steps;
 *  - the MLP's flat layout, init statistics, and its forward/backward against chained
 *    reference layers;
 *  - every rejection with its message;
 *  - and, printed only, forward+backward GFLOP/s of the Kaggle DLRM MLPs at B = 2048 with 1
 *    and 2 threads beside oneDNN's sgemm on 2048x512x512.
 *
 * Tolerance (fp32 vs fp64 reference): |got - ref| <= 1e-5 * S, where S is the same
 * expression evaluated on absolute values (sum |x||w| + |b| for a dot product). fp32
 * summation of K terms in any order errs by at most ~K * 2^-24 * S and typically by
 * sqrt(K) * 2^-24 * S (6e-8 * 23 = 1.4e-6 * S at K = 513), so 1e-5 * S passes every correct
 * ordering with margin, while a dropped term, a wrong index or an unwritten (NaN) element
 * fails. Scaling by S instead of |ref| keeps cancellation (ref near 0) from failing a correct
 * result.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "numcheck.h"
#include "rectrain/core.h"
#include "rectrain/nn.h"

/* ---- linear: oneDNN vs reference ------------------------------------------------------------ */

/* A float64 copy of a (n), each value rounded to bf16 by the reference rounding when bf16, of
 * the absolute values if absval. */
static double *to_f64_p(const float *a, size_t n, int absval, int bf16) {
    double *d = to_f64(a, n, absval);
    for (size_t i = 0; bf16 && i < n; i++) d[i] = rec_bf16_ref(d[i]);
    return d;
}

/* bf16: the reference is the float64 layer on operands rounded to bf16 (x, W, and dy for the
 * products; db sums the unrounded dy), so the same 1e-5 * S bound holds, and the result must
 * also differ from the unrounded fp32 reference somewhere (the rounding happened). */
static void linear_case(rec_dnn *dnn, int B, int in, int out, int relu, rec_precision prec) {
    rec_linear *l;
    const int bf = prec == REC_PRECISION_BF16;
    rec_status s = rec_linear_init(&l, dnn, in, out, relu, B + 3, prec);
    CHECK(s == REC_OK, "linear init %d %d: %s", in, out, rec_errmsg());
    if (s != REC_OK) return;
    size_t nx = (size_t)B * in, nw = (size_t)out * in, ny = (size_t)B * out;
    float *x = malloc(nx * 4), *W = malloc(nw * 4), *b = malloc(out * 4), *y = malloc(ny * 4);
    float *dy = malloc(ny * 4), *dx = malloc(nx * 4), *dW = malloc(nw * 4), *db = malloc(out * 4);
    fill_uniform(x, nx, -1, 1);
    fill_uniform(W, nw, -0.5f, 0.5f);
    fill_uniform(b, out, -0.5f, 0.5f);
    fill_uniform(dy, ny, -1, 1);
    poison(y, ny);
    poison(dx, nx);
    poison(dW, nw);
    poison(db, out);
    CHECK(rec_linear_forward(l, B, x, W, b, y) == REC_OK, "forward: %s", rec_errmsg());
    CHECK(rec_linear_backward(l, B, x, W, y, dy, dx, dW, db) == REC_OK, "backward: %s", rec_errmsg());

    double *xd = to_f64_p(x, nx, 0, bf), *Wd = to_f64_p(W, nw, 0, bf), *bd = to_f64(b, out, 0), *dyd = to_f64_p(dy, ny, 0, bf);
    double *xa = to_f64_p(x, nx, 1, bf), *Wa = to_f64_p(W, nw, 1, bf), *ba = to_f64(b, out, 1), *dya = to_f64_p(dy, ny, 1, bf);
    double *yr = malloc(ny * 8), *yS = malloc(ny * 8);
    rec_linear_forward_ref(B, in, out, relu, xd, Wd, bd, yr);
    rec_linear_forward_ref(B, in, out, 0, xa, Wa, ba, yS);
    int bad = count_bad("y", y, yr, yS, ny, 1e-5);
    CHECK(bad == 0, "%s forward B %d in %d out %d relu %d: %d of %zu elements off", rec_precision_name(prec), B, in,
          out, relu, bad, ny);

    /* Backward on the layer's own y, so the ReLU mask is the one the layer saw. */
    double *yd = to_f64(y, ny, 0);
    double *dxr = malloc(nx * 8), *dWr = malloc(nw * 8), *dbr = malloc(out * 8);
    double *dxS = malloc(nx * 8), *dWS = malloc(nw * 8), *dbS = malloc(out * 8);
    rec_linear_backward_ref(B, in, out, relu, xd, Wd, yd, dyd, dxr, dWr, dbr);
    rec_linear_backward_ref(B, in, out, relu, xa, Wa, yd, dya, dxS, dWS, dbS);
    if (bf) { /* db from the unrounded dy */
        double *dyu = to_f64(dy, ny, 0), *dyua = to_f64(dy, ny, 1), *t1 = malloc(nx * 8), *t2 = malloc(nw * 8);
        rec_linear_backward_ref(B, in, out, relu, xd, Wd, yd, dyu, t1, t2, dbr);
        rec_linear_backward_ref(B, in, out, relu, xa, Wa, yd, dyua, t1, t2, dbS);
        free(dyu), free(dyua), free(t1), free(t2);
    }
    bad = count_bad("dx", dx, dxr, dxS, nx, 1e-5) + count_bad("dW", dW, dWr, dWS, nw, 1e-5) +
          count_bad("db", db, dbr, dbS, out, 1e-5);
    CHECK(bad == 0, "%s backward B %d in %d out %d relu %d: %d elements off", rec_precision_name(prec), B, in, out,
          relu, bad);

    if (bf && in >= 13) { /* the same layer in fp32 is farther off than the bound somewhere */
        double *xu = to_f64(x, nx, 0), *Wu = to_f64(W, nw, 0), *yu = malloc(ny * 8);
        rec_linear_forward_ref(B, in, out, relu, xu, Wu, bd, yu);
        int off = 0;
        for (size_t i = 0; i < ny; i++) off += fabs(y[i] - yu[i]) > 1e-5 * yS[i];
        CHECK(off > 0, "bf16 forward B %d in %d out %d equals the unrounded fp32 result: no rounding happened", B, in, out);
        free(xu), free(Wu), free(yu);
    }

    /* dx = NULL skips the data gradient and leaves dW alone. */
    poison(dW, nw);
    CHECK(rec_linear_backward(l, B, x, W, y, dy, NULL, dW, db) == REC_OK, "backward without dx");
    CHECK(count_bad("dW(no dx)", dW, dWr, dWS, nw, 1e-5) == 0, "dW with dx = NULL");

    free(x), free(W), free(b), free(y), free(dy), free(dx), free(dW), free(db);
    free(xd), free(Wd), free(bd), free(dyd), free(xa), free(Wa), free(ba), free(dya);
    free(yr), free(yS), free(yd), free(dxr), free(dWr), free(dbr), free(dxS), free(dWS), free(dbS);
    rec_linear_free(l);
}

static void test_linear_vs_ref(rec_dnn *dnn) {
    static const int shapes[][3] = {{1, 1, 1},   {1, 13, 512}, {7, 13, 17},  {33, 17, 13},
                                    {2, 1, 9},   {5, 9, 1},    {64, 513, 17}, {3, 513, 513},
                                    {128, 256, 64}, {17, 64, 16}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int relu = 0; relu < 2; relu++)
            linear_case(dnn, shapes[i][0], shapes[i][1], shapes[i][2], relu, REC_PRECISION_FP32);
}

/* bf16 on every path this CPU has: emulated always, native where oneDNN has the kernels. */
static void test_linear_bf16(rec_dnn *dnn) {
    static const int shapes[][3] = {{1, 1, 1}, {7, 13, 17}, {5, 9, 1}, {64, 513, 17}, {3, 513, 513}, {128, 256, 64}};
    const int kernels = rec_dnn_bf16_kernels(dnn), native = rec_dnn_bf16_native(dnn);
    const char *isa = rec_dnn_isa();
    printf("  bf16 products: oneDNN ISA %s, bf16 kernels %s, used by default %s\n", isa, kernels ? "yes" : "no",
           native ? "yes" : "no");
    CHECK(native == (kernels && strstr(isa, "amx") != NULL), "ISA %s: the bf16 kernels are used by default on AMX only",
          isa);
    for (int path = 0; path <= kernels; path++) {
        rec_dnn_set_bf16_native(dnn, path);
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            for (int relu = 0; relu < 2; relu++)
                linear_case(dnn, shapes[i][0], shapes[i][1], shapes[i][2], relu, REC_PRECISION_BF16);
    }
    rec_dnn_set_bf16_native(dnn, 1);
    CHECK(rec_dnn_bf16_native(dnn) == kernels, "set_bf16_native(1) cannot add kernels the CPU lacks");
    rec_dnn_set_bf16_native(dnn, native);
    rec_linear *l = (rec_linear *)1;
    CHECK_ERR(rec_linear_init(&l, dnn, 3, 3, 0, 8, (rec_precision)7), REC_EINVAL, "unknown precision 7");
    double g;
    rec_status s = rec_dnn_matmul_gflops(dnn, REC_PRECISION_BF16, 64, 64, 64, 3, &g);
    CHECK(kernels ? s == REC_OK && g > 0 : s == REC_EUNSUPPORTED && strstr(rec_errmsg(), "no bf16 matmul on this CPU"),
          "bf16 matmul rate: status %d, %.1f GFLOP/s", (int)s, g);
    CHECK(rec_dnn_matmul_gflops(dnn, REC_PRECISION_FP32, 64, 64, 64, 3, &g) == REC_OK && g > 0, "fp32 matmul rate");
}

/* Rounding to bf16: the fast bit trick against the reference from frexp/ldexp, on the edge
 * cases (ties both ways, the largest finite value, overflow, subnormals, signed zero, inf,
 * NaN) and on 200k random bit patterns. */
static void test_bf16_rounding(void) {
    const float cases[] = {0.0f, -0.0f, 1.0f, 1.0f + 0x1p-8f, 1.0f + 0x3p-8f, 1.0f + 0x1p-9f, -1.0f - 0x1p-8f,
                           0x1.fep127f, 0x1.ff0p127f, 0x1.fefffep127f, 3.4028235e38f, 0x1p-126f, 0x1p-133f,
                           0x1p-134f, 0x3p-135f, 1e-45f, INFINITY, -INFINITY, 0.1f, -2.5e-3f, 65504.0f};
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        float got = rec_bf16_to_float(rec_bf16_bits(cases[i]));
        double ref = rec_bf16_ref(cases[i]);
        if (!(got == ref && !signbit(got) == !signbit(ref))) {
            if (!bad) fprintf(stderr, "  bf16(%a): got %a ref %a\n", cases[i], got, ref);
            bad++;
        }
    }
    CHECK(bad == 0, "bf16 rounding of the edge cases: %d wrong", bad);
    CHECK(rec_bf16_to_float(rec_bf16_bits(1.0f + 0x1p-8f)) == 1.0f, "tie rounds to even (down)");
    CHECK(rec_bf16_to_float(rec_bf16_bits(1.0f + 0x3p-8f)) == 1.0f + 0x1p-6f, "tie rounds to even (up)");
    CHECK(isinf(rec_bf16_to_float(rec_bf16_bits(0x1.ff0p127f))), "overflow past the largest bf16 gives inf");
    CHECK(isnan(rec_bf16_to_float(rec_bf16_bits(NAN))) && isnan(rec_bf16_to_float(rec_bf16_bits(-NAN))), "NaN stays NaN");
    union { uint32_t u; float f; } v = {0x7f800001u}; /* a signalling NaN whose payload would round to inf */
    CHECK(isnan(rec_bf16_to_float(rec_bf16_bits(v.f))), "NaN with a low payload stays NaN");
    bad = 0;
    for (int i = 0; i < 200000; i++) {
        union { uint32_t u; float f; } r = {(uint32_t)rec_rng_u64(&g_rng)};
        if (isnan(r.f)) continue;
        float got = rec_bf16_to_float(rec_bf16_bits(r.f));
        if (!(got == rec_bf16_ref(r.f))) {
            if (!bad) fprintf(stderr, "  bf16(%a): got %a ref %a\n", r.f, got, rec_bf16_ref(r.f));
            bad++;
        }
    }
    CHECK(bad == 0, "bf16 rounding of random values: %d of 200000 wrong", bad);
    float a[5] = {1.0f + 0x1p-8f, 0.1f, -3.0f, 1e30f, 0.0f}, o[5];
    uint16_t h[5];
    rec_bf16_round(a, 5, o);
    rec_bf16_pack(a, 5, h);
    bad = 0;
    for (int i = 0; i < 5; i++) bad += o[i] != rec_bf16_ref(a[i]) || rec_bf16_to_float(h[i]) != o[i];
    CHECK(bad == 0, "rec_bf16_round / rec_bf16_pack agree with the reference");
}

/* Batch sizes come and go (more than the cache holds), results stay right, and a batch over
 * max_batch is refused with an actionable message. */
static void test_linear_cache_and_errors(rec_dnn *dnn) {
    rec_linear *l;
    CHECK(rec_linear_init(&l, dnn, 5, 3, 1, 8, REC_PRECISION_FP32) == REC_OK, "init");
    float x[8 * 5], W[15], b[3], y[8 * 3];
    fill_uniform(x, 40, -1, 1);
    fill_uniform(W, 15, -1, 1);
    fill_uniform(b, 3, -1, 1);
    static const int Bs[] = {8, 1, 2, 3, 4, 5, 8, 1};
    int bad = 0;
    for (size_t t = 0; t < sizeof Bs / sizeof Bs[0]; t++) {
        int B = Bs[t];
        poison(y, 24);
        CHECK(rec_linear_forward(l, B, x, W, b, y) == REC_OK, "forward B %d", B);
        for (int i = 0; i < B; i++)
            for (int j = 0; j < 3; j++) {
                double s = b[j];
                for (int k = 0; k < 5; k++) s += (double)x[i * 5 + k] * W[j * 5 + k];
                s = s > 0 ? s : 0;
                bad += !(fabs(y[i * 3 + j] - s) <= 1e-5 * (1 + fabs(s)));
            }
    }
    CHECK(bad == 0, "cached primitives across batch sizes: %d wrong", bad);
    CHECK_ERR(rec_linear_forward(l, 9, x, W, b, y), REC_EINVAL, "raise max_batch");
    CHECK_ERR(rec_linear_forward(l, 0, x, W, b, y), REC_EINVAL, "batch 0 outside");
    rec_linear_free(l);
    rec_linear *l2 = (rec_linear *)1;
    CHECK_ERR(rec_linear_init(&l2, dnn, 0, 3, 0, 8, REC_PRECISION_FP32), REC_EINVAL, "widths must be >= 1");
    CHECK(l2 == NULL, "out set to NULL on failure");
    CHECK_ERR(rec_linear_init(&l2, dnn, 3, 3, 0, 0, REC_PRECISION_FP32), REC_EINVAL, "max_batch must be >= 1");
    rec_dnn *d2;
    CHECK_ERR(rec_dnn_init(&d2, -1), REC_EINVAL, "n_threads is -1");
}

/* ---- finite differences ------------------------------------------------------------------ */

/* Central difference of f at p[i] with step h (f must read p). */
#define FD(f, p, i, h) \
    ((p)[i] += (h), fp = (f), (p)[i] -= 2 * (h), fm = (f), (p)[i] += (h), (fp - fm) / (2 * (h)))

static int fd_close(double a, double n) { return fabs(a - n) <= 1e-6 * (1.0 + fabs(n)); }

/* Scalar objective sum_k r_k y_k of the reference layer, so dL/dy = r. */
static double lin_obj(int B, int in, int out, int relu, const double *x, const double *W, const double *b,
                      const double *r, double *y) {
    rec_linear_forward_ref(B, in, out, relu, x, W, b, y);
    double s = 0;
    for (int k = 0; k < B * out; k++) s += r[k] * y[k];
    return s;
}

static void test_linear_fd(void) {
    for (int relu = 0; relu < 2; relu++) {
        const int B = 4, in = 5, out = 3;
        double x[20], W[15], b[3], r[12], y[12], dx[20], dW[15], db[3], fp, fm;
        for (int i = 0; i < 20; i++) x[i] = rec_rng_uniform(&g_rng) * 2 - 1;
        for (int i = 0; i < 15; i++) W[i] = rec_rng_uniform(&g_rng) * 2 - 1;
        for (int i = 0; i < 3; i++) b[i] = rec_rng_uniform(&g_rng) - 0.5;
        for (int i = 0; i < 12; i++) r[i] = rec_rng_uniform(&g_rng) * 2 - 1;
        rec_linear_forward_ref(B, in, out, relu, x, W, b, y);
        int active = 0;
        for (int i = 0; i < 12; i++) active += y[i] > 0;
        CHECK(!relu || (active > 0 && active < 12), "ReLU case has both signs (%d of 12 active)", active);
        rec_linear_backward_ref(B, in, out, relu, x, W, y, r, dx, dW, db);
        const double h = 1e-6;
        int bad = 0;
        for (int i = 0; i < 20; i++) bad += !fd_close(dx[i], FD(lin_obj(B, in, out, relu, x, W, b, r, y), x, i, h));
        for (int i = 0; i < 15; i++) bad += !fd_close(dW[i], FD(lin_obj(B, in, out, relu, x, W, b, r, y), W, i, h));
        for (int i = 0; i < 3; i++) bad += !fd_close(db[i], FD(lin_obj(B, in, out, relu, x, W, b, r, y), b, i, h));
        CHECK(bad == 0, "linear reference gradients vs finite differences (relu %d): %d off", relu, bad);
    }
}

/* ---- interaction -------------------------------------------------------------------------- */

static double int_obj(rec_interact_kind k, int self, int B, int F, int E, const double *x, const double *emb,
                      const double *r, double *out) {
    rec_interact_forward_ref(k, self, B, F, E, x, emb, out);
    int D = rec_interact_dim(k, self, F, E);
    double s = 0;
    for (int i = 0; i < B * D; i++) s += r[i] * out[i];
    return s;
}

/* bf16: against the references on bf16-rounded operands (x, emb, and dout for the products;
 * the pass-through slices of dout unrounded), and off the unrounded reference somewhere. */
static void interact_case(rec_interact_kind kind, int self, int B, int F, int E, rec_precision prec) {
    const int D = rec_interact_dim(kind, self, F, E), bf = prec == REC_PRECISION_BF16 && kind == REC_INTERACT_DOT;
    size_t nx = (size_t)B * E, ne = (size_t)B * F * E, no = (size_t)B * D;
    float *x = malloc(nx * 4 + 4), *emb = malloc(ne * 4 + 4), *out = malloc(no * 4 + 4);
    float *dout = malloc(no * 4 + 4), *dx = malloc(nx * 4 + 4), *demb = malloc(ne * 4 + 4);
    fill_uniform(x, nx, -1, 1);
    fill_uniform(emb, ne, -1, 1);
    fill_uniform(dout, no, -1, 1);
    poison(out, no);
    poison(dx, nx);
    poison(demb, ne);
    CHECK(rec_interact_forward(kind, self, prec, B, F, E, x, emb, out) == REC_OK, "forward");
    CHECK(rec_interact_backward(kind, self, prec, B, F, E, x, emb, dout, dx, demb) == REC_OK, "backward");
    double *xd = to_f64_p(x, nx, 0, bf), *ed = to_f64_p(emb, ne, 0, bf), *gd = to_f64_p(dout, no, 0, bf);
    double *xa = to_f64_p(x, nx, 1, bf), *ea = to_f64_p(emb, ne, 1, bf), *ga = to_f64_p(dout, no, 1, bf);
    for (int b = 0; bf && b < B; b++) /* the pass-through slice dout[0:E] goes to dx as it is */
        for (int e = 0; e < E; e++) gd[(size_t)b * D + e] = dout[(size_t)b * D + e], ga[(size_t)b * D + e] = fabs(dout[(size_t)b * D + e]);
    double *o = malloc(no * 8 + 8), *oS = malloc(no * 8 + 8), *dxr = malloc(nx * 8 + 8), *der = malloc(ne * 8 + 8);
    double *dxS = malloc(nx * 8 + 8), *deS = malloc(ne * 8 + 8);
    rec_interact_forward_ref(kind, self, B, F, E, xd, ed, o);
    rec_interact_forward_ref(kind, self, B, F, E, xa, ea, oS);
    rec_interact_backward_ref(kind, self, B, F, E, xd, ed, gd, dxr, der);
    rec_interact_backward_ref(kind, self, B, F, E, xa, ea, ga, dxS, deS);
    for (int b = 0; bf && b < B; b++) /* ... and x to out */
        for (int e = 0; e < E; e++) o[(size_t)b * D + e] = x[(size_t)b * E + e], oS[(size_t)b * D + e] = fabs(x[(size_t)b * E + e]);
    int bad = count_bad("out", out, o, oS, no, 1e-5) + count_bad("dx", dx, dxr, dxS, nx, 1e-5) +
              count_bad("demb", demb, der, deS, ne, 1e-5);
    CHECK(bad == 0, "interaction kind %d self %d %s B %d F %d E %d vs reference: %d off", kind, self,
          rec_precision_name(prec), B, F, E, bad);
    if (bf && E >= 8 && F >= 2) {
        double *xu = to_f64(x, nx, 0), *eu = to_f64(emb, ne, 0), *ou = malloc(no * 8 + 8);
        rec_interact_forward_ref(kind, self, B, F, E, xu, eu, ou);
        int off = 0;
        for (size_t i = 0; i < no; i++) off += fabs(out[i] - ou[i]) > 1e-5 * oS[i];
        CHECK(off > 0, "bf16 interaction B %d F %d E %d equals the unrounded one: no rounding happened", B, F, E);
        free(xu), free(eu), free(ou);
    }
    /* A row's first E outputs are x itself; for dot, the first pair is T1 . T0 = emb0 . x. */
    if (B > 0 && F > 0) {
        CHECK(memcmp(out, x, (size_t)E * 4) == 0, "out starts with x");
        if (kind == REC_INTERACT_DOT) {
            double s = 0;
            for (int e = 0; e < E; e++) s += xd[e] * ed[e];
            CHECK(fabs(o[E + (self ? 1 : 0)] - s) < 1e-12, "first off-diagonal pair is Z[1][0] (dlrm li/lj order)");
            if (self) {
                double s0 = 0;
                for (int e = 0; e < E; e++) s0 += xd[e] * xd[e];
                CHECK(fabs(o[E] - s0) < 1e-12, "self-interaction starts with Z[0][0]");
            }
        }
    }

    /* Finite differences of the reference (bilinear, so central differences are exact up to
     * rounding). Small shapes only. */
    if (no <= 4000) {
        double *r = gd, fp, fm, h = 1e-6;
        int fbad = 0;
        for (size_t i = 0; i < nx; i++) fbad += !fd_close(dxr[i], FD(int_obj(kind, self, B, F, E, xd, ed, r, o), xd, i, h));
        for (size_t i = 0; i < ne; i++) fbad += !fd_close(der[i], FD(int_obj(kind, self, B, F, E, xd, ed, r, o), ed, i, h));
        CHECK(fbad == 0, "interaction reference vs finite differences kind %d self %d: %d off", kind, self, fbad);
    }
    free(x), free(emb), free(out), free(dout), free(dx), free(demb);
    free(xd), free(ed), free(gd), free(xa), free(ea), free(ga), free(o), free(oS), free(dxr), free(der), free(dxS), free(deS);
}

static void test_interact(void) {
    CHECK(rec_interact_dim(REC_INTERACT_DOT, 0, 26, 16) == 16 + 27 * 26 / 2, "Kaggle dot width");
    CHECK(rec_interact_dim(REC_INTERACT_DOT, 0, 26, 16) == 367, "Kaggle dot width is 367");
    CHECK(rec_interact_dim(REC_INTERACT_DOT, 1, 26, 16) == 367 + 27, "with self-interaction");
    CHECK(rec_interact_dim(REC_INTERACT_CAT, 0, 26, 16) == 16 + 26 * 16, "cat width");
    for (int kind = 0; kind < 2; kind++)
        for (int self = 0; self < 2; self++)
            for (int p = 0; p < 2; p++) {
                const rec_precision prec = p ? REC_PRECISION_BF16 : REC_PRECISION_FP32;
                interact_case((rec_interact_kind)kind, self, 3, 4, 5, prec);
                interact_case((rec_interact_kind)kind, self, 2, 1, 1, prec);
                interact_case((rec_interact_kind)kind, self, 1, 0, 3, prec);
                interact_case((rec_interact_kind)kind, self, 64, 26, 16, prec);
            }
    float v[4] = {0};
    CHECK_ERR(rec_interact_forward(REC_INTERACT_DOT, 0, REC_PRECISION_FP32, 1, 1, 0, v, v, v), REC_EINVAL, "E 0");
    CHECK_ERR(rec_interact_backward((rec_interact_kind)7, 0, REC_PRECISION_FP32, 1, 1, 1, v, v, v, v, v), REC_EINVAL,
              "unknown interaction kind 7");
}

/* ---- loss --------------------------------------------------------------------------------- */

static void test_loss(void) {
    enum { B = 37 };
    float z[B], y[B], dz[B];
    double zd[B], yd[B], dr[B], fp, fm;
    for (int i = 0; i < B; i++) {
        z[i] = (float)(rec_rng_uniform(&g_rng) * 12 - 6);
        y[i] = (float)(i % 3 == 0);
        if (i == 5) y[i] = 0.25f;  /* soft labels are allowed */
        zd[i] = z[i];
        yd[i] = y[i];
    }
    double loss;
    poison(dz, B);
    CHECK(rec_bce_forward_backward(B, z, y, &loss, dz) == REC_OK, "bce");
    double lr = rec_bce_ref(B, zd, yd, dr);
    CHECK(fabs(loss - lr) <= 1e-12 * fabs(lr), "loss %.17g vs reference %.17g", loss, lr);
    int bad = 0;
    for (int i = 0; i < B; i++) bad += !(fabs(dz[i] - dr[i]) <= 1e-7 * fabs(dr[i]) + 1e-12);
    CHECK(bad == 0, "dlogits vs reference: %d off", bad);
    int fbad = 0;
    for (int i = 0; i < B; i++) fbad += !fd_close(dr[i], FD(rec_bce_ref(B, zd, yd, NULL), zd, i, 1e-6));
    CHECK(fbad == 0, "loss reference vs finite differences: %d off", fbad);

    float z1[1] = {0}, y1[1] = {1}, d1[1];
    CHECK(rec_bce_forward_backward(1, z1, y1, &loss, d1) == REC_OK && fabs(loss - log(2.0)) < 1e-15 &&
              d1[0] == -0.5f, "z = 0, y = 1: loss ln 2 (%.17g), grad -1/2 (%g)", loss, d1[0]);
    /* Extremes stay finite: the stable form never takes log(0) or overflows exp. */
    float zx[4] = {1000, -1000, 1000, -1000}, yx[4] = {1, 0, 0, 1}, dx[4];
    CHECK(rec_bce_forward_backward(4, zx, yx, &loss, dx) == REC_OK, "extremes");
    CHECK(fabs(loss - 500.0) < 1e-9, "two confident mistakes at |z| = 1000 cost 1000 each: mean %g", loss);
    CHECK(dx[0] == 0 && dx[1] == 0 && dx[2] == 0.25f && dx[3] == -0.25f, "extreme grads %g %g %g %g", dx[0], dx[1],
          dx[2], dx[3]);
    CHECK(rec_bce_forward_backward(2, zx, yx, &loss, NULL) == REC_OK && loss < 1e-300, "loss without grads: %g", loss);
    float ybad[1] = {2};
    CHECK_ERR(rec_bce_forward_backward(1, z1, ybad, &loss, d1), REC_EINVAL, "labels must lie in [0, 1]");
    ybad[0] = NAN;
    CHECK_ERR(rec_bce_forward_backward(1, z1, ybad, &loss, d1), REC_EINVAL, "label 0 is nan");
    CHECK_ERR(rec_bce_forward_backward(0, z1, y1, &loss, d1), REC_EINVAL, "batch size 0");
}

/* ---- optimizers ----------------------------------------------------------------------------- */

static void test_optimizers(void) {
    enum { N = 11, STEPS = 5 };
    for (int kind = 0; kind < 3; kind++) {
        rec_dense_opt_config c = rec_dense_opt_defaults((rec_opt_kind)kind, 0.05f);
        rec_dense_opt *o;
        CHECK(rec_dense_opt_init(&o, &c, N) == REC_OK, "init kind %d: %s", kind, rec_errmsg());
        float p[N], g[N];
        double pd[N], s[N] = {0}, m[N] = {0}, v[N] = {0};
        fill_uniform(p, N, -1, 1);
        for (int i = 0; i < N; i++) pd[i] = p[i];
        int bad = 0;
        for (int t = 1; t <= STEPS; t++) {
            fill_uniform(g, N, -2, 2);
            g[3] = 0.0f;  /* a zero gradient moves nothing under SGD and Adagrad at step 1 */
            CHECK(rec_dense_opt_step(o, p, g, N) == REC_OK, "step");
            for (int i = 0; i < N; i++) {
                double gi = g[i];
                if (kind == REC_OPT_SGD) {
                    pd[i] -= 0.05 * gi;
                } else if (kind == REC_OPT_ADAGRAD) {
                    s[i] += gi * gi;
                    pd[i] -= 0.05 * gi / (sqrt(s[i]) + 1e-10);
                } else {
                    m[i] = 0.9 * m[i] + 0.1 * gi;
                    v[i] = 0.999 * v[i] + 0.001 * gi * gi;
                    double mh = m[i] / (1 - pow(0.9, t)), vh = v[i] / (1 - pow(0.999, t));
                    pd[i] -= 0.05 * mh / (sqrt(vh) + 1e-8);
                }
                bad += !(fabs(p[i] - pd[i]) <= 1e-6 * (1 + fabs(pd[i])));
            }
        }
        CHECK(bad == 0, "optimizer %d vs formula over %d steps: %d off", kind, STEPS, bad);
        CHECK(rec_dense_opt_steps(o) == STEPS, "step count");
        CHECK_ERR(rec_dense_opt_step(o, p, g, N - 1), REC_EINVAL, "initialised for 11");
        rec_dense_opt_free(o);
    }
    /* Adam's first step moves every parameter with a nonzero gradient by ~lr against its sign
     * (bias correction makes m/sqrt(v) = g/|g|); Adagrad's first step likewise. */
    for (int kind = 1; kind < 3; kind++) {
        rec_dense_opt_config c = rec_dense_opt_defaults((rec_opt_kind)kind, 0.01f);
        rec_dense_opt *o;
        CHECK(rec_dense_opt_init(&o, &c, 3) == REC_OK, "init");
        float p[3] = {0, 0, 0}, g[3] = {3.0f, -0.001f, 0.0f};
        rec_dense_opt_step(o, p, g, 3);
        CHECK(fabsf(p[0] + 0.01f) < 1e-6f && fabsf(p[1] - 0.01f) < 1e-4f && p[2] == 0.0f,
              "first step of kind %d: %g %g %g", kind, p[0], p[1], p[2]);
        rec_dense_opt_free(o);
    }
    rec_dense_opt *o = (rec_dense_opt *)1;
    rec_dense_opt_config c = rec_dense_opt_defaults(REC_OPT_ADAM, 0.0f);
    CHECK_ERR(rec_dense_opt_init(&o, &c, 4), REC_EINVAL, "lr is 0");
    CHECK(o == NULL, "out NULL on failure");
    c = rec_dense_opt_defaults(REC_OPT_ADAM, 1e-3f);
    c.beta2 = 1.0f;
    CHECK_ERR(rec_dense_opt_init(&o, &c, 4), REC_EINVAL, "beta2 is 1");
    c = rec_dense_opt_defaults(REC_OPT_ADAGRAD, 1e-3f);
    c.eps = -1;
    CHECK_ERR(rec_dense_opt_init(&o, &c, 4), REC_EINVAL, "eps is -1");
    c.kind = (rec_opt_kind)9;
    CHECK_ERR(rec_dense_opt_init(&o, &c, 4), REC_EINVAL, "unknown kind 9");
    c = rec_dense_opt_defaults(REC_OPT_SGD, NAN);
    CHECK_ERR(rec_dense_opt_init(&o, &c, 4), REC_EINVAL, "finite number > 0");
}

/* ---- MLP -------------------------------------------------------------------------------------- */

static void test_mlp_layout(rec_dnn *dnn) {
    const int sizes[] = {13, 512, 256, 64, 16};
    rec_mlp *m;
    CHECK(rec_mlp_init(&m, dnn, sizes, 5, 1, 32, REC_PRECISION_FP32, 42) == REC_OK, "init: %s", rec_errmsg());
    size_t P = 0;
    for (int l = 0; l < 4; l++) P += (size_t)sizes[l] * sizes[l + 1] + sizes[l + 1];
    CHECK(P == 13 * 512 + 512 + 512 * 256 + 256 + 256 * 64 + 64 + 64 * 16 + 16, "formula");
    CHECK(rec_mlp_n_params(m) == P, "P = %zu, want %zu", rec_mlp_n_params(m), P);
    CHECK(rec_mlp_layers(m) == 4 && rec_mlp_in(m) == 13 && rec_mlp_out(m) == 16, "shape accessors");
    /* Views tile the block exactly: each starts where the previous ends, the last ends at P. */
    float *p = rec_mlp_params(m), *g = rec_mlp_grads(m), *at = p;
    int tiled = 1;
    for (int l = 0; l < 4; l++) {
        tiled &= rec_mlp_weight(m, l) == at;
        at += (size_t)sizes[l] * sizes[l + 1];
        tiled &= rec_mlp_bias(m, l) == at;
        at += sizes[l + 1];
        tiled &= rec_mlp_grad_weight(m, l) - g == rec_mlp_weight(m, l) - p;
        tiled &= rec_mlp_grad_bias(m, l) - g == rec_mlp_bias(m, l) - p;
    }
    CHECK(tiled && at == p + P, "views are contiguous, disjoint and cover the block");
    CHECK(g + P <= p || p + P <= g, "parameter and gradient blocks do not overlap");
    /* Init statistics: W std sqrt(2/(in+out)), b std sqrt(1/out) (dlrm create_mlp). */
    for (int l = 0; l < 2; l++) {
        size_t n = (size_t)sizes[l] * sizes[l + 1];
        double s2 = 0, want = 2.0 / (sizes[l] + sizes[l + 1]);
        const float *W = rec_mlp_weight(m, l);
        for (size_t i = 0; i < n; i++) s2 += (double)W[i] * W[i];
        CHECK(fabs(s2 / n / want - 1) < 0.06, "layer %d W variance %g, want %g", l, s2 / n, want);
        double b2 = 0;
        const float *b = rec_mlp_bias(m, l);
        for (int i = 0; i < sizes[l + 1]; i++) b2 += (double)b[i] * b[i];
        /* sample variance b2/out over want 1/out is b2; 0.3 is > 3 sigma at out = 256 */
        CHECK(fabs(b2 - 1) < 0.3, "layer %d b variance %g, want %g", l,
              b2 / sizes[l + 1], 1.0 / sizes[l + 1]);
    }
    /* Same seed, same parameters; another seed, others. */
    rec_mlp *m2, *m3;
    CHECK(rec_mlp_init(&m2, dnn, sizes, 5, 1, 32, REC_PRECISION_FP32, 42) == REC_OK && rec_mlp_init(&m3, dnn, sizes, 5, 1, 32, REC_PRECISION_FP32, 43) == REC_OK, "init");
    CHECK(memcmp(rec_mlp_params(m2), p, P * 4) == 0, "deterministic init");
    CHECK(memcmp(rec_mlp_params(m3), p, P * 4) != 0, "seed changes init");
    rec_mlp_free(m2);
    rec_mlp_free(m3);

    /* After a backward every gradient is written; one memset zeroes the lot. */
    float x[32 * 13], dy[32 * 16];
    fill_uniform(x, 32 * 13, -1, 1);
    fill_uniform(dy, 32 * 16, -1, 1);
    poison(g, P);
    const float *y;
    CHECK(rec_mlp_forward(m, 32, x, &y) == REC_OK && rec_mlp_backward(m, 32, x, dy, NULL) == REC_OK, "fwd/bwd");
    size_t nan = 0, nonzero = 0;
    for (size_t i = 0; i < P; i++) nan += isnan(g[i]), nonzero += g[i] != 0;
    CHECK(nan == 0 && nonzero > P / 4, "backward overwrote every gradient (%zu NaN, %zu nonzero)", nan, nonzero);
    memset(g, 0, P * sizeof(float));
    size_t nz = 0;
    for (size_t i = 0; i < P; i++) nz += g[i] != 0;
    CHECK(nz == 0, "one memset zeroes all gradients");
    rec_mlp_free(m);

    CHECK_ERR(rec_mlp_init(&m, dnn, sizes, 1, 1, 32, REC_PRECISION_FP32, 1), REC_EINVAL, "at least 2 sizes");
    const int badsz[] = {13, 0, 4};
    CHECK_ERR(rec_mlp_init(&m, dnn, badsz, 3, 1, 32, REC_PRECISION_FP32, 1), REC_EINVAL, "size 1 is 0");
}

/* MLP forward/backward against the chained float64 reference layers. */
static void test_mlp_vs_ref(rec_dnn *dnn, int last_relu) {
    enum { B = 9, L = 3 };
    const int sizes[L + 1] = {13, 17, 8, 3};
    rec_mlp *m;
    CHECK(rec_mlp_init(&m, dnn, sizes, L + 1, last_relu, B, REC_PRECISION_FP32, 7) == REC_OK, "init");
    float x[B * 13], dy[B * 3], dx[B * 13];
    fill_uniform(x, B * 13, -1, 1);
    fill_uniform(dy, B * 3, -1, 1);
    const float *y;
    poison(dx, B * 13);
    CHECK(rec_mlp_forward(m, B, x, &y) == REC_OK && rec_mlp_backward(m, B, x, dy, dx) == REC_OK, "fwd/bwd");
    double *a[L + 1], *da[L + 1];
    a[0] = to_f64(x, B * 13, 0);
    for (int l = 0; l < L; l++) {
        a[l + 1] = malloc(sizeof(double) * B * sizes[l + 1]);
        double *W = to_f64(rec_mlp_weight(m, l), (size_t)sizes[l] * sizes[l + 1], 0), *b = to_f64(rec_mlp_bias(m, l), sizes[l + 1], 0);
        rec_linear_forward_ref(B, sizes[l], sizes[l + 1], l < L - 1 || last_relu, a[l], W, b, a[l + 1]);
        free(W), free(b);
    }
    int bad = 0;
    for (int i = 0; i < B * 3; i++) bad += !(fabs(y[i] - a[L][i]) <= 1e-5 * (1 + fabs(a[L][i])));
    CHECK(bad == 0, "MLP forward vs reference (last_relu %d): %d off", last_relu, bad);
    da[L] = to_f64(dy, B * 3, 0);
    bad = 0;
    for (int l = L - 1; l >= 0; l--) {
        size_t nw = (size_t)sizes[l] * sizes[l + 1];
        double *W = to_f64(rec_mlp_weight(m, l), nw, 0), *dW = malloc(nw * 8), *db = malloc(sizes[l + 1] * 8);
        da[l] = malloc(sizeof(double) * B * sizes[l]);
        rec_linear_backward_ref(B, sizes[l], sizes[l + 1], l < L - 1 || last_relu, a[l], W, a[l + 1], da[l + 1], da[l], dW, db);
        const float *gW = rec_mlp_grad_weight(m, l), *gb = rec_mlp_grad_bias(m, l);
        for (size_t i = 0; i < nw; i++) bad += !(fabs(gW[i] - dW[i]) <= 1e-5 * (1 + fabs(dW[i])));
        for (int i = 0; i < sizes[l + 1]; i++) bad += !(fabs(gb[i] - db[i]) <= 1e-5 * (1 + fabs(db[i])));
        free(W), free(dW), free(db);
    }
    for (int i = 0; i < B * 13; i++) bad += !(fabs(dx[i] - da[0][i]) <= 1e-5 * (1 + fabs(da[0][i])));
    CHECK(bad == 0, "MLP backward vs reference (last_relu %d): %d off", last_relu, bad);
    for (int l = 0; l <= L; l++) free(a[l]), free(da[l]);
    CHECK_ERR(rec_mlp_forward(m, B + 1, x, &y), REC_EINVAL, "raise max_batch");
    rec_mlp_free(m);
}

/* ---- throughput (printed, not asserted) ------------------------------------------------------- */

/* Forward + backward FLOPs: 2 B In Out each for y, dW and (when computed) dx. */
static double mlp_flops(const int *sizes, int n, int B, int need_dx) {
    double f = 0;
    for (int l = 0; l + 1 < n; l++) f += 2.0 * B * sizes[l] * sizes[l + 1] * ((l > 0 || need_dx) ? 3 : 2);
    return f;
}

static double bench_mlp(rec_dnn *dnn, const int *sizes, int n, int last_relu, int need_dx, int B, int reps) {
    rec_mlp *m;
    if (rec_mlp_init(&m, dnn, sizes, n, last_relu, B, REC_PRECISION_FP32, 1) != REC_OK) return 0;
    float *x = malloc((size_t)B * sizes[0] * 4), *dy = malloc((size_t)B * sizes[n - 1] * 4), *dx = malloc((size_t)B * sizes[0] * 4);
    fill_uniform(x, (size_t)B * sizes[0], -1, 1);
    fill_uniform(dy, (size_t)B * sizes[n - 1], -1e-3f, 1e-3f);
    double t[32];
    const float *y;
    for (int r = -2; r < reps; r++) {
        double t0 = rec_now();
        rec_mlp_forward(m, B, x, &y);
        rec_mlp_backward(m, B, x, dy, need_dx ? dx : NULL);
        if (r >= 0) t[r] = rec_now() - t0;
    }
    free(x), free(dy), free(dx);
    rec_mlp_free(m);
    return mlp_flops(sizes, n, B, need_dx) / rec_median(t, reps) * 1e-9;
}

static double bench_sgemm(rec_dnn *dnn, int M, int N, int K, int reps) {
    float *A = malloc((size_t)M * K * 4), *Bm = malloc((size_t)K * N * 4), *C = malloc((size_t)M * N * 4);
    fill_uniform(A, (size_t)M * K, -1, 1);
    fill_uniform(Bm, (size_t)K * N, -1, 1);
    double t[32];
    for (int r = -2; r < reps; r++) {
        double t0 = rec_now();
        rec_dnn_sgemm(dnn, M, N, K, A, Bm, C);
        if (r >= 0) t[r] = rec_now() - t0;
    }
    free(A), free(Bm), free(C);
    return 2.0 * M * N * K / rec_median(t, reps) * 1e-9;
}

static void bench(void) {
    const int B = 2048, reps = 9;
    const int bot[] = {13, 512, 256, 64, 16};
    const int top_in = rec_interact_dim(REC_INTERACT_DOT, 0, 26, 16);  /* 16 + 27*26/2 = 367 */
    const int top[] = {top_in, 512, 256, 1};
    printf("dense fwd+bwd throughput, B %d (median of %d; GFLOP/s):\n", B, reps);
    printf("  threads  sgemm 2048x512x512  bottom 13-512-256-64-16  top %d-512-256-1\n", top_in);
    for (int th = 1; th <= 2; th++) {
        rec_dnn *dnn;
        if (rec_dnn_init(&dnn, th) != REC_OK) continue;
        double g = bench_sgemm(dnn, 2048, 512, 512, reps);
        double gb = bench_mlp(dnn, bot, 5, 1, 0, B, reps);
        double gt = bench_mlp(dnn, top, 4, 0, 1, B, reps);
        printf("  %7d  %18.1f  %23.1f  %16.1f\n", th, g, gb, gt);
        rec_dnn_free(dnn);
    }
    /* The interaction is single-threaded readable loops; show that it is small beside the MLPs. */
    const int F = 26, E = 16, D = top_in;
    float *x = malloc((size_t)B * E * 4), *emb = malloc((size_t)B * F * E * 4), *out = malloc((size_t)B * D * 4);
    float *dx = malloc((size_t)B * E * 4), *demb = malloc((size_t)B * F * E * 4);
    fill_uniform(x, (size_t)B * E, -1, 1);
    fill_uniform(emb, (size_t)B * F * E, -1, 1);
    double t[32];
    for (int r = -2; r < reps; r++) {
        double t0 = rec_now();
        rec_interact_forward(REC_INTERACT_DOT, 0, REC_PRECISION_FP32, B, F, E, x, emb, out);
        rec_interact_backward(REC_INTERACT_DOT, 0, REC_PRECISION_FP32, B, F, E, x, emb, out, dx, demb);
        if (r >= 0) t[r] = rec_now() - t0;
    }
    printf("  dot interaction fwd+bwd, B %d F %d E %d, 1 thread: %.2f ms\n", B, F, E, rec_median(t, reps) * 1e3);
    free(x), free(emb), free(out), free(dx), free(demb);
}

int main(void) {
    rec_rng_seed(&g_rng, 2024, 0);
    rec_dnn *dnn;
    rec_status s = rec_dnn_init(&dnn, 2);
    CHECK(s == REC_OK, "rec_dnn_init: %s", rec_errmsg());
    if (s != REC_OK) return check_report();
    CHECK(rec_dnn_threads(dnn) == 2, "thread count kept");
    test_bf16_rounding();
    test_linear_vs_ref(dnn);
    test_linear_bf16(dnn);
    test_linear_cache_and_errors(dnn);
    test_linear_fd();
    test_interact();
    test_loss();
    test_optimizers();
    test_mlp_layout(dnn);
    test_mlp_vs_ref(dnn, 0);
    test_mlp_vs_ref(dnn, 1);
    rec_dnn_free(dnn);
    if (getenv("REC_NN_BENCH")) bench(); /* timing figures on request; `rectrain bench mlp` is to come */
    return check_report();
}
