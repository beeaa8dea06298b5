/* The learning-rate schedule of model.h: linear warmup, then polynomial decay to a floor, as
 * MLPerf's DLRM reference (facebookresearch/dlrm, dlrm_s_pytorch.py, LRPolicyScheduler.get_lr;
 * there the power is fixed at 2 and the floor is an absolute 1e-7 rather than a scale). */
#include <math.h>

#include "rectrain/model.h"

/* The factor on the base rates at optimizer step `step` (0-based; a negative step counts as
 * 0). Warmup takes precedence, so a schedule whose decay starts inside the warmup (which the
 * config validation refuses) still rises first. Between warmup and decay_start the scale is 1
 * (dlrm keeps the last warmup rate there, (W/W) = 1 as well). Decay at step t runs from
 * ((decay_steps)/decay_steps)^power = 1 at t = decay_start down towards 1/decay_steps^power,
 * floored at end_scale; from decay_start + decay_steps on it is end_scale. */
double rec_lr_scale(const rec_lr_schedule *s, int64_t step) {
    const int64_t t = step < 0 ? 0 : step;
    if (t + 1 <= s->warmup_steps) return (double)(t + 1) / (double)s->warmup_steps;
    if (s->decay_steps > 0 && t >= s->decay_start) {
        const int64_t end = s->decay_start + s->decay_steps;
        if (t >= end) return s->end_scale;
        const double frac = (double)(end - t) / (double)s->decay_steps;
        return fmax(s->end_scale, pow(frac, s->power));
    }
    return 1.0;
}
