/* rectrain bench embed --device cuda: the GPU embedding engine (cuda.h) on the models of the
 * CPU bench (embed_models.h), batches resident on the GPU, kernels timed with events.
 *
 * Per model it checks the fused forward against the CPU engine on the first batch (the
 * largest relative error per table, outputs poisoned with NaN first), then times forward per
 * batch for: the default plan; every uniform plan (one schedule for all tables, RecFlex's
 * "identical schedule" baseline: the best of them, and warp-per-bag t32v4, FBGEMM's mapping);
 * the plan the two-stage tuner picks; and forward + backward + SGD update for the tuned and
 * the best uniform plan. GB/s in FBGEMM's definition, (sum over tables of B·L·E + B·E) × 4
 * bytes / time, beside the device's copy bandwidth measured in the same run.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_embed_cuda.h"
#include "cli.h"
#include "embed_models.h"
#include "rectrain/cuda.h"
#include "rectrain/embed.h"

/* Largest over tables of ||gpu - ref|| / ||ref|| on batch b's output (B, W); -1 if any element
 * was not written (still NaN) or is not finite. */
static double forward_error(const float *gpu, const float *ref, int B, int F, const int *dims) {
    int W = 0;
    for (int f = 0; f < F; f++) W += dims[f];
    double worst = 0;
    for (int f = 0, col = 0; f < F; col += dims[f], f++) {
        double num = 0, den = 0;
        for (int r = 0; r < B; r++)
            for (int c = 0; c < dims[f]; c++) {
                const double x = gpu[(size_t)r * W + col + c], y = ref[(size_t)r * W + col + c];
                if (!isfinite(x)) return -1;
                num += (x - y) * (x - y), den += y * y;
            }
        const double e = den > 0 ? sqrt(num / den) : sqrt(num);
        if (e > worst) worst = e;
    }
    return worst;
}

static rec_status bench_model_cuda(const char *name, int B, int nb, int reps, double kscale, const char *dump_dir,
                                   const char *plan_out, double copy_gbps, int json) {
    rec_rng rng;
    rec_rng_seed(&rng, 1000, (uint64_t)name[0]);
    bmodel m;
    if (bmodel_make(&m, name, B, kscale, &rng)) return rec_errorf(REC_EINVAL, "unknown model '%s'", name);
    const float lr = 0.01f;
    rec_embed_config cfg = {m.F, m.rows, m.dims, REC_POOL_SUM, rec_sparse_opt_defaults(REC_SPARSE_SGD, lr), B, 0, 1, 0, 0, REC_ROUND_STOCHASTIC};
    rec_embed *e = NULL;
    rec_cuda_embed *g = NULL;
    rec_cuda_batch **d = calloc((size_t)nb, sizeof *d);
    rec_batch *b = calloc((size_t)nb, sizeof *b);
    float *out = NULL, *dout = NULL, *h_out = NULL, *h_ref = NULL, *h_dout = NULL;
    int *plan = NULL;
    rec_status s = d && b ? REC_OK : rec_errorf(REC_ENOMEM, "bench embed: out of memory");
    if (!s) s = rec_embed_init(&e, &cfg);
    for (int i = 0; !s && i < nb; i++) s = make_batch(&b[i], &m, &rng, 0, 0);
    const int W = s ? 0 : rec_embed_out_width(e);
    const size_t n_out = (size_t)B * (size_t)W;
    if (!s) s = rec_alloc((void **)&h_out, n_out * sizeof(float), "bench outputs");
    if (!s) s = rec_alloc((void **)&h_ref, n_out * sizeof(float), "bench reference outputs");
    if (!s) s = rec_alloc((void **)&h_dout, n_out * sizeof(float), "bench output gradients");
    if (!s) s = rec_alloc((void **)&plan, (size_t)m.F * sizeof(int), "bench plan");
    for (size_t i = 0; !s && i < n_out; i++) h_dout[i] = (float)(rec_rng_uniform(&rng) - 0.5) * 1e-3f;
    if (!s && dump_dir && bmodel_dump(dump_dir, &m, b, nb, h_dout, W, lr))
        s = rec_errorf(REC_EIO, "%s: cannot write the dump for the PyTorch peer", dump_dir);
    if (!s) s = rec_cuda_embed_init(&g, &cfg, e);
    if (!s) s = rec_cuda_alloc((void **)&out, n_out * sizeof(float), "bench outputs");
    if (!s) s = rec_cuda_alloc((void **)&dout, n_out * sizeof(float), "bench output gradients");
    if (!s) s = rec_cuda_upload(dout, h_dout, n_out * sizeof(float));
    for (int i = 0; !s && i < nb; i++) {
        s = rec_cuda_batch_new(&d[i]);
        if (!s) s = rec_cuda_batch_load(g, d[i], &b[i], 0);
    }
    double ids = 0, bytes = 0;
    for (int i = 0; !s && i < nb; i++)
        for (int f = 0; f < m.F; f++) {
            const double L = (double)rec_batch_nnz(&b[i], f);
            ids += L, bytes += (L + B) * m.dims[f] * 4.0;
        }
    ids /= nb, bytes /= nb;
    /* Parity on the first batch under the default plan. */
    double err = NAN;
    if (!s) s = rec_embed_forward(e, &b[0], 0, h_ref);
    if (!s) s = rec_cuda_fill(out, n_out, NAN);
    if (!s) s = rec_cuda_embed_forward(g, d[0], out);
    if (!s) s = rec_cuda_embed_sync(g);
    if (!s) s = rec_cuda_download(h_out, out, n_out * sizeof(float));
    if (!s) {
        err = forward_error(h_out, h_ref, B, m.F, m.dims);
        if (err < 0 || err > 1e-5)
            s = rec_errorf(REC_EINVAL, "bench embed %s: the GPU forward does not match the CPU engine (relative error %g%s)",
                           m.name, err, err < 0 ? ": unwritten or non-finite outputs" : "");
    }
    double def_f = 0, uni_f = INFINITY, warp_f = 0, tun_f = 0, tun_fb = 0, uni_fb = 0;
    int uni_s = 0;
    rec_cuda_tune_report rep = {0};
    char nm[16];
    if (!s) {
        fprintf(stderr, "bench embed --device cuda %s: %d tables, batch %d, %.2fM ids per batch, forward max rel. error %.2g\n",
                m.name, m.F, B, ids * 1e-6, err);
        s = rec_cuda_embed_time(g, d, nb, out, dout, lr, 0, reps, &def_f);
    }
    for (int u = 0; !s && u < REC_CUDA_N_SCHED; u++) {
        double t;
        rec_cuda_embed_set_uniform(g, u);
        s = rec_cuda_embed_time(g, d, nb, out, dout, lr, 0, reps, &t);
        if (!s && t < uni_f) uni_f = t, uni_s = u;
        if (!s && u == 5) warp_f = t;  /* t32v4: a warp per bag */
        if (!s) fprintf(stderr, "  uniform %-6s fwd %.4f ms\n", rec_cuda_sched_name(u, nm, sizeof nm), t * 1e3);
    }
    if (!s) {
        rec_cuda_embed_set_uniform(g, uni_s);
        s = rec_cuda_embed_time(g, d, nb, out, dout, lr, 1, reps, &uni_fb);
    }
    const double t0 = rec_now();
    if (!s) rec_cuda_embed_set_default(g);
    if (!s) s = rec_cuda_embed_tune(g, d, nb, out, reps, &rep);
    const double tune_s = rec_now() - t0;
    if (!s) s = rec_cuda_embed_time(g, d, nb, out, dout, lr, 0, reps, &tun_f);
    if (!s) s = rec_cuda_embed_time(g, d, nb, out, dout, lr, 1, reps, &tun_fb);
    int occ = 0;
    if (!s) rec_cuda_embed_get_plan(g, plan, &occ);
    if (!s && plan_out) s = rec_cuda_plan_save(plan_out, m.F, m.rows, m.dims, plan, occ);
    if (!s) {
        int used[REC_CUDA_N_SCHED] = {0};
        for (int f = 0; f < m.F; f++) used[plan[f]]++;
        static const char *const WIN[] = {"per-table (slot time)", "per-table (slot time + tail)", "start plan",
                                          "best uniform", "default"};
        fprintf(stderr, "  tuned in %.2f s (%d local rounds x %d occupancies): %s plan at occupancy %d won; global stage ms:",
                tune_s, rep.rounds, rep.n_occ, WIN[rep.winner], occ);
        for (int k = 0; k < rep.n_occ; k++) fprintf(stderr, " occ %d %.4f,", rep.occ[k], rep.occ_s[k] * 1e3);
        fprintf(stderr, " start %.4f, uniform %.4f; refinement: %d of %d groups changed in %d timings, %.3fx\n  tuned plan:",
                rep.start_s * 1e3, rep.uniform_s * 1e3, rep.refine_changed, rep.refine_groups, rep.refine_trials,
                rep.refine_gain);
        for (int u = 0; u < REC_CUDA_N_SCHED; u++)
            if (used[u]) fprintf(stderr, " %s x%d", rec_cuda_sched_name(u, nm, sizeof nm), used[u]);
        fputc('\n', stderr);
        printf("%-7s fwd ms: default %.4f | best uniform (%s) %.4f | warp-per-bag %.4f | tuned %.4f  => tuned vs uniform "
               "%.2fx, vs warp %.2fx | fwd+bwd+update ms: uniform %.4f, tuned %.4f | %.0f GB/s of %.0f copy\n",
               m.name, def_f * 1e3, rec_cuda_sched_name(uni_s, nm, sizeof nm), uni_f * 1e3, warp_f * 1e3, tun_f * 1e3,
               uni_f / tun_f, warp_f / tun_f, uni_fb * 1e3, tun_fb * 1e3, bytes / tun_f * 1e-9, copy_gbps);
        if (json)
            printf("{\"model\": \"%s\", \"device\": \"cuda\", \"tables\": %d, \"batch\": %d, \"ids_per_batch\": %s, "
                   "\"bytes_per_batch\": %s, \"fwd_rel_err\": %s, \"default_fwd_s\": %s, \"uniform_fwd_s\": %s, "
                   "\"uniform_sched\": \"%s\", \"warp_fwd_s\": %s, \"tuned_fwd_s\": %s, \"uniform_fwdbwd_s\": %s, "
                   "\"tuned_fwdbwd_s\": %s, \"occupancy\": %d, \"tune_winner\": %d, \"tune_s\": %s, \"gb_per_s\": %s, \"copy_gbps\": %s}\n",
                   m.name, m.F, B, cli_jnum("%.0f", ids), cli_jnum("%.0f", bytes), cli_jnum("%.3g", err),
                   cli_jnum("%.6g", def_f), cli_jnum("%.6g", uni_f), rec_cuda_sched_name(uni_s, nm, sizeof nm),
                   cli_jnum("%.6g", warp_f), cli_jnum("%.6g", tun_f), cli_jnum("%.6g", uni_fb), cli_jnum("%.6g", tun_fb), occ,
                   rep.winner, cli_jnum("%.3f", tune_s), cli_jnum("%.1f", bytes / tun_f * 1e-9), cli_jnum("%.1f", copy_gbps));
        fflush(stdout);
    }
    for (int i = 0; d && i < nb; i++) rec_cuda_batch_free(d[i]);
    for (int i = 0; b && i < nb; i++) rec_batch_free(&b[i]);
    rec_cuda_embed_free(g);
    rec_cuda_free(out), rec_cuda_free(dout);
    rec_free(h_out), rec_free(h_ref), rec_free(h_dout), rec_free(plan);
    free(d), free(b);
    rec_embed_free(e);
    bmodel_free(&m);
    return s;
}

int bench_embed_cuda(const char *cmd, const char *model, int batch, int nb, int reps, double kscale, const char *dump_dir,
                     const char *plan_out, int json) {
    char dev[256];
    rec_status s = rec_cuda_probe(dev, sizeof dev);
    if (s) return cli_fail(cmd, s);
    double gbps = 0;
    s = rec_cuda_copy_gbps((size_t)1 << 30, &gbps);
    if (s) return cli_fail(cmd, s);
    printf("device: %s; device-to-device copy %.0f GB/s (read + write, 1 GiB)\n", dev, gbps);
    if (json) printf("{\"device\": \"%s\", \"copy_gbps\": %s}\n", dev, cli_jnum("%.1f", gbps));
    static const char *const ALL[] = {"kaggle", "A", "B", "C", "D", "E"};
    for (size_t i = 0; i < sizeof ALL / sizeof ALL[0]; i++) {
        if (strcmp(model, "all") && strcmp(model, ALL[i])) continue;
        const int B = batch ? batch : i == 0 ? 2048 : 512;
        s = bench_model_cuda(ALL[i], B, nb, reps, kscale, dump_dir, plan_out, gbps, json);
        if (s) return cli_fail(cmd, s);
    }
    return CLI_OK;
}
