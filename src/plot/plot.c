/* Charts as PNG with Cairo (plot.h): one drawing routine for line, point and bar charts, and
 * the readers of what they show (a run's metrics as JSON lines, a table as TSV). */
#include <cairo.h>
#include <cjson/cJSON.h>
#include <fontconfig/fontconfig.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rectrain/core.h"
#include "rectrain/plot.h"

enum { W = 960, H = 560, MAX_SERIES = 8 };
enum { LINE, POINTS, BARS };

typedef struct series {
    const char *name;
    const double *x, *y;     /* BARS: y only, one value per category */
    int n, style, right;     /* right: on the second y axis */
} series;

typedef struct chart {
    const char *title, *xlabel, *ylabel, *y2label;
    series s[MAX_SERIES];
    int ns;
    int diagonal;            /* draw y = x (calibration) */
    const char *const *cats; /* BARS: the categories' labels */
    int ncat;
} chart;

static const double COLORS[MAX_SERIES][3] = {{0.12, 0.47, 0.71}, {1.00, 0.50, 0.05}, {0.17, 0.63, 0.17},
                                             {0.84, 0.15, 0.16}, {0.58, 0.40, 0.74}, {0.55, 0.34, 0.29},
                                             {0.89, 0.47, 0.76}, {0.50, 0.50, 0.50}};

/* A "nice" tick step for the range: 1, 2 or 5 times a power of ten, about 6 ticks. */
static double tick_step(double lo, double hi) {
    const double raw = (hi - lo) / 6, p = pow(10, floor(log10(raw))), f = raw / p;
    return (f < 1.5 ? 1 : f < 3.5 ? 2 : f < 7.5 ? 5 : 10) * p;
}

/* The range of the finite values of the series on one axis, widened to whole ticks. */
static void range_of(const chart *c, int xaxis, int right, double *lo, double *hi) {
    *lo = INFINITY, *hi = -INFINITY;
    for (int i = 0; i < c->ns; i++) {
        const series *s = &c->s[i];
        if (!xaxis && s->right != right) continue;
        for (int k = 0; k < s->n; k++) {
            const double v = xaxis ? s->x[k] : s->y[k];
            if (isfinite(v)) *lo = fmin(*lo, v), *hi = fmax(*hi, v);
        }
        if (!xaxis && s->style == BARS) *lo = fmin(*lo, 0); /* bars stand on zero */
    }
    if (!isfinite(*lo)) *lo = 0, *hi = 1;
    if (*hi - *lo < 1e-12 * fmax(1, fabs(*hi))) { /* one value: a margin of a tenth of it around it */
        const double pad = fmax(fabs(*hi) * 0.1, xaxis ? 1 : 1e-3);
        *lo -= pad, *hi += pad;
    }
    const double st = tick_step(*lo, *hi);
    *lo = floor(*lo / st) * st, *hi = ceil(*hi / st) * st;
}

static void text(cairo_t *cr, double x, double y, const char *t, double size, double ax, double ay, int bold) {
    cairo_select_font_face(cr, "sans-serif", CAIRO_FONT_SLANT_NORMAL, bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
    cairo_set_font_size(cr, size);
    cairo_text_extents_t e;
    cairo_font_extents_t f; /* vertical placement by the font's box, so that labels line up */
    cairo_text_extents(cr, t, &e);
    cairo_font_extents(cr, &f);
    cairo_move_to(cr, x - e.width * ax - e.x_bearing, y - (f.ascent + f.descent) * ay + f.ascent);
    cairo_show_text(cr, t);
}

static void tick_label(char *buf, size_t cap, double v, double step) {
    if (fabs(v) < step * 1e-9) v = 0;
    if (fabs(v) >= 1e6 || (fabs(v) > 0 && fabs(v) < 1e-3)) snprintf(buf, cap, "%.3g", v);
    else if (step >= 1) snprintf(buf, cap, "%.0f", v);
    else snprintf(buf, cap, "%.*f", (int)ceil(-log10(step)), v);
}

static rec_status draw(const chart *c, const char *png) {
    cairo_surface_t *sf = cairo_image_surface_create(CAIRO_FORMAT_RGB24, W, H);
    cairo_t *cr = cairo_create(sf);
    const int bars = c->ncat > 0, two = c->y2label != NULL;
    const double L = 90, R = W - (two ? 90 : 30), T = 64, B = H - 70;
    double x0, x1, y0, y1, z0 = 0, z1 = 1;
    if (bars) x0 = -0.5, x1 = c->ncat - 0.5;
    else range_of(c, 1, 0, &x0, &x1);
    range_of(c, 0, 0, &y0, &y1);
    if (two) range_of(c, 0, 1, &z0, &z1);
    if (c->diagonal) { /* one scale on both axes */
        x0 = y0 = fmin(x0, y0);
        x1 = y1 = fmax(x1, y1);
    }
#define PX(v) (L + ((v) - x0) / (x1 - x0) * (R - L))
#define PY(v, right) (B - ((v) - ((right) ? z0 : y0)) / ((right) ? z1 - z0 : y1 - y0) * (B - T))
    cairo_set_source_rgb(cr, 1, 1, 1);
    cairo_paint(cr);
    /* grid, ticks and their labels */
    char buf[64];
    cairo_set_line_width(cr, 1);
    const double ys = tick_step(y0, y1);
    for (double v = y0; v <= y1 + ys * 1e-6; v += ys) {
        cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
        cairo_move_to(cr, L, PY(v, 0)), cairo_line_to(cr, R, PY(v, 0)), cairo_stroke(cr);
        cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
        tick_label(buf, sizeof buf, v, ys);
        text(cr, L - 8, PY(v, 0), buf, 12, 1, 0.5, 0);
    }
    if (two) {
        const double zs = tick_step(z0, z1);
        for (double v = z0; v <= z1 + zs * 1e-6; v += zs) {
            tick_label(buf, sizeof buf, v, zs);
            text(cr, R + 8, PY(v, 1), buf, 12, 0, 0.5, 0);
        }
    }
    if (bars) {
        for (int k = 0; k < c->ncat; k++) text(cr, PX(k), B + 8, c->cats[k], 12, 0.5, 0, 0);
    } else {
        const double xs = tick_step(x0, x1);
        for (double v = x0; v <= x1 + xs * 1e-6; v += xs) {
            cairo_set_source_rgb(cr, 0.9, 0.9, 0.9);
            cairo_move_to(cr, PX(v), T), cairo_line_to(cr, PX(v), B), cairo_stroke(cr);
            cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
            tick_label(buf, sizeof buf, v, xs);
            text(cr, PX(v), B + 8, buf, 12, 0.5, 0, 0);
        }
    }
    cairo_set_source_rgb(cr, 0.2, 0.2, 0.2);
    cairo_rectangle(cr, L, T, R - L, B - T);
    cairo_stroke(cr);
    if (c->diagonal) {
        cairo_set_source_rgb(cr, 0.5, 0.5, 0.5);
        const double dash = 6;
        cairo_set_dash(cr, &dash, 1, 0);
        cairo_move_to(cr, PX(x0), PY(x0, 0)), cairo_line_to(cr, PX(x1), PY(x1, 0)), cairo_stroke(cr);
        cairo_set_dash(cr, NULL, 0, 0);
    }
    /* the series */
    int nbars = 0, bar = 0;
    for (int i = 0; i < c->ns; i++) nbars += c->s[i].style == BARS;
    for (int i = 0; i < c->ns; i++) {
        const series *s = &c->s[i];
        cairo_set_source_rgb(cr, COLORS[i][0], COLORS[i][1], COLORS[i][2]);
        cairo_set_line_width(cr, 2);
        if (s->style == BARS) {
            const double w = 0.8 / nbars;
            for (int k = 0; k < s->n; k++)
                if (isfinite(s->y[k])) {
                    const double a = PX(k - 0.4 + bar * w), b = PX(k - 0.4 + (bar + 1) * w);
                    cairo_rectangle(cr, a, PY(s->y[k], 0), b - a - 1, PY(fmax(y0, 0), 0) - PY(s->y[k], 0));
                    cairo_fill(cr);
                }
            bar++;
            continue;
        }
        int pen = 0;
        for (int k = 0; k < s->n; k++) {
            if (!isfinite(s->x[k]) || !isfinite(s->y[k])) {
                pen = 0;
                continue;
            }
            const double px = PX(s->x[k]), py = PY(s->y[k], s->right);
            if (s->style == POINTS) cairo_new_sub_path(cr), cairo_arc(cr, px, py, 4.5, 0, 2 * M_PI);
            else if (pen) cairo_line_to(cr, px, py);
            else cairo_move_to(cr, px, py);
            pen = 1;
        }
        if (s->style == POINTS) cairo_fill(cr);
        else cairo_stroke(cr);
        if (s->style == LINE && s->n == 1 && isfinite(s->x[0]) && isfinite(s->y[0])) { /* a lone point: a dot */
            cairo_arc(cr, PX(s->x[0]), PY(s->y[0], s->right), 3.5, 0, 2 * M_PI);
            cairo_fill(cr);
        }
        if (s->style == POINTS && s->n > 1) { /* joined thinly, to show the curve */
            cairo_set_line_width(cr, 1);
            for (int k = 0; k < s->n; k++)
                if (isfinite(s->x[k]) && isfinite(s->y[k]))
                    (k ? cairo_line_to : cairo_move_to)(cr, PX(s->x[k]), PY(s->y[k], s->right));
            cairo_stroke(cr);
        }
    }
    /* titles and the legend */
    cairo_set_source_rgb(cr, 0, 0, 0);
    text(cr, W / 2.0, 12, c->title, 18, 0.5, 0, 1);
    text(cr, (L + R) / 2, H - 22, c->xlabel, 14, 0.5, 1, 0);
    cairo_save(cr);
    cairo_translate(cr, 22, (T + B) / 2), cairo_rotate(cr, -M_PI / 2);
    text(cr, 0, 0, c->ylabel, 14, 0.5, 0.5, 0);
    cairo_restore(cr);
    if (two) {
        cairo_save(cr);
        cairo_translate(cr, W - 22, (T + B) / 2), cairo_rotate(cr, M_PI / 2);
        text(cr, 0, 0, c->y2label, 14, 0.5, 0.5, 0);
        cairo_restore(cr);
    }
    if (c->ns > 1 || c->diagonal) { /* one row under the title, centred: it hides no data */
        const int n = c->ns + c->diagonal;
        const char *name[MAX_SERIES + 1];
        double w[MAX_SERIES + 1], total = 0;
        cairo_set_font_size(cr, 13);
        for (int i = 0; i < n; i++) {
            name[i] = i == c->ns ? "perfect calibration" : c->s[i].name;
            cairo_text_extents_t e;
            cairo_text_extents(cr, name[i], &e);
            w[i] = 24 + e.x_advance + 24;
            total += w[i];
        }
        double x = (W - total) / 2;
        for (int i = 0; i < n; i++) {
            if (i == c->ns) cairo_set_source_rgb(cr, 0.5, 0.5, 0.5);
            else cairo_set_source_rgb(cr, COLORS[i][0], COLORS[i][1], COLORS[i][2]);
            cairo_rectangle(cr, x, 39, 18, 10);
            cairo_fill(cr);
            cairo_set_source_rgb(cr, 0, 0, 0);
            text(cr, x + 24, 44, name[i], 13, 0, 0.5, 0);
            x += w[i];
        }
    }
#undef PX
#undef PY
    cairo_surface_flush(sf);
    const cairo_status_t st = cairo_surface_write_to_png(sf, png);
    cairo_destroy(cr);
    cairo_surface_destroy(sf);
    /* the font caches cairo and fontconfig keep for the process, released: a chart is drawn
     * now and then, and a leak checker sees no memory left behind */
    cairo_debug_reset_static_data();
    FcFini();
    if (st != CAIRO_STATUS_SUCCESS)
        return rec_errorf(REC_EIO, "cannot write the chart %s: %s", png, cairo_status_to_string(st));
    return REC_OK;
}

/* ---- a run's metrics ------------------------------------------------------------------------ */

typedef struct column {
    double *v;
    int n, cap;
} column;

static rec_status push(column *c, double v) {
    if (c->n == c->cap) {
        const int cap = c->cap ? 2 * c->cap : 256;
        double *q = realloc(c->v, sizeof(double) * (size_t)cap);
        if (!q) return rec_errorf(REC_ENOMEM, "plot: out of memory");
        c->v = q, c->cap = cap;
    }
    c->v[c->n++] = v;
    return REC_OK;
}

enum { T_STEP, T_LOSS, T_RATE, E_STEP, E_AUC, E_LOSS, C_PRED, C_CTR, COLS };

static double num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* One JSON line of the metrics into the columns. */
static rec_status read_record(const char *path, int line, const char *text, column *col) {
    cJSON *o = cJSON_Parse(text);
    const cJSON *g = o ? cJSON_GetObjectItemCaseSensitive(o, "group") : NULL;
    const cJSON *st = o ? cJSON_GetObjectItemCaseSensitive(o, "step") : NULL;
    rec_status s = REC_OK;
    if (!cJSON_IsObject(o) || !cJSON_IsString(g) || !cJSON_IsNumber(st))
        s = rec_errorf(REC_EINVAL, "%s:%d: not a metrics record (a JSON object with \"step\" and \"group\", as train "
                       "--metrics writes)", path, line);
    else if (!strcmp(g->valuestring, "train")) {
        s = push(&col[T_STEP], st->valuedouble);
        if (!s) s = push(&col[T_LOSS], num(o, "loss"));
        if (!s) s = push(&col[T_RATE], num(o, "samples_per_s"));
    } else if (!strcmp(g->valuestring, "eval")) {
        s = push(&col[E_STEP], st->valuedouble);
        if (!s) s = push(&col[E_AUC], num(o, "auc"));
        if (!s) s = push(&col[E_LOSS], num(o, "logloss"));
    } else if (!strcmp(g->valuestring, "calibration")) { /* the last curve is the one drawn */
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(o, "buckets"), *it;
        col[C_PRED].n = col[C_CTR].n = 0;
        cJSON_ArrayForEach(it, b) {
            if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) < 2) {
                s = rec_errorf(REC_EINVAL, "%s:%d: a calibration bucket is [predicted, observed, rows]", path, line);
                break;
            }
            const cJSON *p = cJSON_GetArrayItem(it, 0), *y = cJSON_GetArrayItem(it, 1);
            s = push(&col[C_PRED], cJSON_IsNumber(p) ? p->valuedouble : NAN);
            if (!s) s = push(&col[C_CTR], cJSON_IsNumber(y) ? y->valuedouble : NAN);
            if (s) break;
        }
    }
    cJSON_Delete(o);
    return s;
}

const char *const rec_plot_files[] = {"loss.png", "eval.png", "calibration.png", NULL};

rec_status rec_plot_run(const char *metrics, const char *dir, FILE *log) {
    FILE *f = fopen(metrics, "r");
    if (!f) return rec_errorf(REC_EIO, "cannot read the metrics %s: %s", metrics, strerror(errno));
    column col[COLS] = {{0}};
    char *line = NULL;
    size_t cap = 0;
    rec_status s = REC_OK;
    for (int n = 1; !s && getline(&line, &cap, f) > 0; n++)
        if (line[strspn(line, " \t\r\n")]) s = read_record(metrics, n, line, col);
    free(line);
    fclose(f);
    char path[3][1200], wrote[3800] = "";
    if (!s && col[T_STEP].n == 0)
        s = rec_errorf(REC_EINVAL, "%s holds no training records (\"group\": \"train\"): nothing to chart", metrics);
    if (!s) {
        snprintf(path[0], sizeof path[0], "%s/loss.png", dir);
        chart c = {"Training loss", "step", "loss (binary cross-entropy, mean since the last point)",
                   "samples/s", {{"training loss", col[T_STEP].v, col[T_LOSS].v, col[T_STEP].n, LINE, 0},
                                 {"samples/s (right axis)", col[T_STEP].v, col[T_RATE].v, col[T_STEP].n, LINE, 1}},
                   2, 0, NULL, 0};
        s = draw(&c, path[0]);
        snprintf(wrote, sizeof wrote, "%s", path[0]);
    }
    if (!s && col[E_STEP].n > 0) {
        snprintf(path[1], sizeof path[1], "%s/eval.png", dir);
        chart c = {"Evaluation", "step", "AUC", "logloss",
                   {{"AUC", col[E_STEP].v, col[E_AUC].v, col[E_STEP].n, POINTS, 0},
                    {"logloss (right axis)", col[E_STEP].v, col[E_LOSS].v, col[E_STEP].n, POINTS, 1}},
                   2, 0, NULL, 0};
        s = draw(&c, path[1]);
        snprintf(wrote + strlen(wrote), sizeof wrote - strlen(wrote), ", %s", path[1]);
    }
    if (!s && col[C_PRED].n > 0) {
        snprintf(path[2], sizeof path[2], "%s/calibration.png", dir);
        chart c = {"Calibration (final evaluation, rows in 10 equal groups by prediction)", "predicted CTR (mean of the group)",
                   "observed CTR", NULL, {{"groups of rows", col[C_PRED].v, col[C_CTR].v, col[C_PRED].n, POINTS, 0}},
                   1, 1, NULL, 0};
        s = draw(&c, path[2]);
        snprintf(wrote + strlen(wrote), sizeof wrote - strlen(wrote), ", %s", path[2]);
    }
    for (int k = 0; k < COLS; k++) free(col[k].v);
    if (!s && log) fprintf(log, "charts: %s\n", wrote);
    return s;
}

/* ---- a table ---------------------------------------------------------------------------------- */

enum { MAX_BARS = 64 };

/* A TSV table: the header's names (label column, then series), each row's first cell, and
 * each series' numbers in a column. */
typedef struct table {
    char *names[MAX_SERIES + 1];
    int nser;
    char **first;  /* (rows) */
    int *line;     /* (rows) each row's line in the file */
    int nrow, cap;
    column val[MAX_SERIES];
} table;

static void table_free(table *t) {
    for (int k = 0; k <= MAX_SERIES; k++) free(t->names[k]);
    for (int r = 0; r < t->nrow; r++) free(t->first[r]);
    free(t->first);
    free(t->line);
    for (int k = 0; k < MAX_SERIES; k++) free(t->val[k].v);
}

static rec_status table_row(table *t, const char *path, int n, char *line) {
    char *save, *cell = strtok_r(line, "\t", &save);
    if (t->nrow == t->cap) {
        const int cap = t->cap ? 2 * t->cap : 64;
        char **q = realloc(t->first, sizeof(char *) * (size_t)cap);
        if (q) t->first = q;
        int *ln = q ? realloc(t->line, sizeof(int) * (size_t)cap) : NULL;
        if (!ln) return rec_errorf(REC_ENOMEM, "plot: out of memory reading %s", path);
        t->line = ln, t->cap = cap;
    }
    t->line[t->nrow] = n;
    if (!(t->first[t->nrow] = strdup(cell ? cell : ""))) return rec_errorf(REC_ENOMEM, "plot: out of memory reading %s", path);
    t->nrow++;
    for (int k = 0; k < t->nser; k++) {
        cell = strtok_r(NULL, "\t", &save);
        char *end = NULL;
        const double v = cell ? strtod(cell, &end) : NAN;
        if (!cell || end == cell || *end)
            return rec_errorf(REC_EINVAL, "%s:%d: column %d (%s) is '%s', not a number", path, n, k + 2, t->names[k + 1],
                              cell ? cell : "(missing)");
        if (!isfinite(v)) /* nothing to draw: a chart of it would be blank, or lack a point unsaid */
            return rec_errorf(REC_EINVAL, "%s:%d: column %d (%s) is '%s', not a finite number; a chart draws finite "
                              "values only: fix or drop the row", path, n, k + 2, t->names[k + 1], cell);
        REC_TRY(push(&t->val[k], v));
    }
    return REC_OK;
}

/* Reads a TSV with a header row naming a first column and 1..MAX_SERIES numeric series. */
static rec_status table_read(table *t, const char *path) {
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "r");
    if (!f) return rec_errorf(REC_EIO, "cannot read the table %s: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    rec_status s = REC_OK;
    for (int n = 1; !s && getline(&line, &cap, f) > 0; n++) {
        line[strcspn(line, "\r\n")] = 0;
        if (!line[0]) continue;
        if (n > 1) {
            s = table_row(t, path, n, line);
            continue;
        }
        char *save, *cell = strtok_r(line, "\t", &save);
        for (int k = 0; cell && k <= MAX_SERIES; k++, cell = strtok_r(NULL, "\t", &save)) t->names[k] = strdup(cell);
        for (t->nser = 0; t->nser < MAX_SERIES && t->names[t->nser + 1]; t->nser++) {}
        if (t->nser < 1 || cell)
            s = rec_errorf(REC_EINVAL, "%s:1: the header names a label column and 1 to %d series, tab-separated", path,
                           MAX_SERIES);
    }
    free(line);
    fclose(f);
    if (!s && t->nrow == 0) s = rec_errorf(REC_EINVAL, "%s: no rows under the header to chart", path);
    return s;
}

rec_status rec_plot_bars(const char *tsv, const char *png, const char *title, const char *ylabel, FILE *log) {
    table t;
    rec_status s = table_read(&t, tsv);
    if (!s && t.nrow > MAX_BARS) s = rec_errorf(REC_EINVAL, "%s: %d rows; a bar chart shows at most %d", tsv, t.nrow, MAX_BARS);
    if (!s) {
        chart c = {title, t.names[0], ylabel, NULL, {{0}}, t.nser, 0, (const char *const *)t.first, t.nrow};
        for (int k = 0; k < t.nser; k++) c.s[k] = (series){t.names[k + 1], NULL, t.val[k].v, t.nrow, BARS, 0};
        s = draw(&c, png);
    }
    table_free(&t);
    if (!s && log) fprintf(log, "chart: %s\n", png);
    return s;
}

rec_status rec_plot_lines(const char *tsv, const char *png, const char *title, const char *ylabel, FILE *log) {
    table t;
    rec_status s = table_read(&t, tsv);
    column x = {0};
    for (int r = 0; !s && r < t.nrow; r++) {
        char *end = NULL;
        const double v = strtod(t.first[r], &end);
        if (end == t.first[r] || *end || !isfinite(v))
            s = rec_errorf(REC_EINVAL, "%s:%d: column 1 (%s) is '%s', not a %snumber (a line chart's x)", tsv, t.line[r],
                           t.names[0], t.first[r], end == t.first[r] || *end ? "" : "finite ");
        else s = push(&x, v);
    }
    if (!s) {
        chart c = {title, t.names[0], ylabel, NULL, {{0}}, t.nser, 0, NULL, 0};
        for (int k = 0; k < t.nser; k++) c.s[k] = (series){t.names[k + 1], x.v, t.val[k].v, t.nrow, LINE, 0};
        s = draw(&c, png);
    }
    free(x.v);
    table_free(&t);
    if (!s && log) fprintf(log, "chart: %s\n", png);
    return s;
}
