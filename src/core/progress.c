/* Progress: a line redrawn on a terminal, whole lines at an interval elsewhere (core.h). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rectrain/core.h"

static void human(double v, char *buf, size_t n) {
    if (v >= 1e9) snprintf(buf, n, "%.2fG", v / 1e9);
    else if (v >= 1e6) snprintf(buf, n, "%.2fM", v / 1e6);
    else if (v >= 1e4) snprintf(buf, n, "%.1fk", v / 1e3);
    else snprintf(buf, n, "%.0f", v);
}

void rec_progress_init(rec_progress *p, const char *label, const char *unit, double total) {
    const char *env = getenv("REC_PROGRESS"), *every = getenv("REC_PROGRESS_EVERY");
    memset(p, 0, sizeof *p);
    p->label = label;
    p->unit = unit;
    p->total = total;
    p->t_start = p->t_last = rec_now();
    p->enabled = !(env && strcmp(env, "0") == 0);
    if (!isatty(STDERR_FILENO)) {
        p->every = every ? atof(every) : 30;
        if (!(p->every > 0)) p->every = 30;
    }
}

void rec_progress_update(rec_progress *p, double done, const char *extra) {
    p->done = done;
    if (!p->enabled) return;
    const double now = rec_now();
    if (now - p->t_last < (p->every > 0 ? p->every : 0.1)) return;
    p->t_last = now;
    const double el = now - p->t_start, rate = el > 0 ? done / el : 0;
    char d[32], t[32] = "", r[32], eta[32] = "";
    human(done, d, sizeof d);
    human(rate, r, sizeof r);
    if (p->total > 0) {
        t[0] = '/';
        human(p->total, t + 1, sizeof t - 1);
        if (rate > 0) snprintf(eta, sizeof eta, "  ETA %.0fs", (p->total - done) / rate);
    }
    fprintf(stderr, "%s%s  %s%s %s  %s %s/s%s%s%s%s", p->every > 0 ? "" : "\r\033[K", p->label, d, t, p->unit, r,
            p->unit, eta, extra ? "  " : "", extra ? extra : "", p->every > 0 ? "\n" : "");
    p->drawn = p->every == 0;
    fflush(stderr);
}

void rec_progress_clear(rec_progress *p) {
    if (!p->drawn) return;
    fprintf(stderr, "\r\033[K");
    fflush(stderr);
    p->drawn = 0;
}

void rec_progress_finish(rec_progress *p) { rec_progress_clear(p); }
