/* Helpers of the tests that drive the built `rectrain` binary (test_cli.c, test_train.c):
 * run a command line in a scratch directory with its output captured, name files in that
 * directory, compare files, read the JSON summary line. Single-threaded test programs only
 * (static buffers). */
#ifndef RECTRAIN_TEST_CLIRUN_H
#define RECTRAIN_TEST_CLIRUN_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

static const char *cli, *src;
static char dir[256];
static char out[1 << 16]; /* output (stdout + stderr) of the last command */

/* The shell command that runs `rectrain ARGS` in the scratch directory, then `tail`. */
static inline void cli_command(char *cmd, size_t cap, const char *fmt, va_list ap, const char *tail) {
    char args[2048];
    vsnprintf(args, sizeof args, fmt, ap);
    snprintf(cmd, cap, "cd %s && REC_PROGRESS=0 exec %s %s%s", dir, cli, args, tail);
}

/* Runs `rectrain ARGS` (formatted) with output captured into `out`; returns the exit code. */
static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run(const char *fmt, ...) {
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    cli_command(cmd, sizeof cmd, fmt, ap, " 2>&1");
    va_end(ap);
    return check_capture(cmd, out, sizeof out);
}

static inline pid_t spawn_command(const char *cmd) {
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Starts `rectrain ARGS` (formatted, with its own redirections) in the scratch directory
 * without waiting; returns its pid (the shell execs it, so signals reach rectrain). */
static inline pid_t spawn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline pid_t spawn(const char *fmt, ...) {
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    cli_command(cmd, sizeof cmd, fmt, ap, "");
    va_end(ap);
    return spawn_command(cmd);
}

/* The same for any command line CMD (formatted; e.g. `mpirun ... rectrain ...`). */
static inline pid_t spawn_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline pid_t spawn_sh(const char *fmt, ...) {
    char cmd[2048], full[2600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    snprintf(full, sizeof full, "cd %s && exec %s", dir, cmd);
    return spawn_command(full);
}

/* Before a test's `mpirun`: 1 when mpirun is there, with what it needs to run as root set and
 * LeakSanitizer kept off Open MPI's allocations (they outlive MPI_Finalize: not ours to
 * report); else 0, having said that `what` is skipped. */
static __attribute__((unused)) int clirun_mpi_ready(const char *what) {
    if (system("command -v mpirun >/dev/null") != 0) {
        printf("mpirun not found: %s skipped\n", what);
        return 0;
    }
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    char asan[512];
    snprintf(asan, sizeof asan, "%s:detect_leaks=0", getenv("ASAN_OPTIONS") ? getenv("ASAN_OPTIONS") : "");
    setenv("ASAN_OPTIONS", asan, 1);
    return 1;
}

static char *path(const char *name) {
    static char p[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", dir, name);
    return p[k];
}

/* Reads file `name` of the scratch directory into `out` (the output of a spawned command). */
static inline void read_out(const char *name) {
    FILE *f = fopen(path(name), "r");
    size_t n = f ? fread(out, 1, sizeof out - 1, f) : 0;
    out[n] = 0;
    if (f) fclose(f);
}

static inline long file_size(const char *name) {
    FILE *f = fopen(path(name), "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

/* Do files a and b hold the same bytes (or, with prefix, does b begin with all of a's)? */
static inline int compare_files(const char *a, const char *b, int prefix) {
    FILE *fa = fopen(path(a), "rb"), *fb = fopen(path(b), "rb");
    int same = fa && fb;
    while (same) {
        int x = fgetc(fa), y = fgetc(fb);
        if (x == EOF && prefix) break;
        if (x != y) same = 0;
        if (x == EOF || y == EOF) break;
    }
    if (fa) fclose(fa);
    if (fb) fclose(fb);
    return same;
}
static inline int same_file(const char *a, const char *b) { return compare_files(a, b, 0); }

/* The "step loss" lines of loss log `name` of the scratch directory into loss (at most cap);
 * their count. */
static inline int read_loss_log(const char *name, double *loss, int cap) {
    FILE *f = fopen(path(name), "r");
    int n = 0;
    long long step;
    double v;
    while (f && n < cap && fscanf(f, "%lld %lf", &step, &v) == 2) loss[n++] = v;
    if (f) fclose(f);
    return n;
}

/* The worst relative difference of the first n losses of two loss logs (a NaN is the worst),
 * or INFINITY when either holds fewer than `need` (<= 4096) lines. */
static inline double loss_log_gap(const char *a, const char *b, int need, int n) {
    static double x[4096], y[4096];
    double worst = 0;
    if (need > 4096 || read_loss_log(a, x, need) != need || read_loss_log(b, y, need) != need) return INFINITY;
    for (int i = 0; i < n; i++) {
        const double d = fabs(x[i] - y[i]) / fabs(x[i]);
        worst = d > worst || d != d ? d : worst;
    }
    return worst;
}

/* The lines of file `name` of the scratch directory, or -1 when it cannot be read. */
static inline int lines_of(const char *name) {
    FILE *f = fopen(path(name), "r");
    int n = 0;
    for (int c; f && (c = fgetc(f)) != EOF;) n += c == '\n';
    if (f) fclose(f);
    return f ? n : -1;
}

/* The value of "key": in the last line of `out` (a JSON summary), or -1. */
static __attribute__((unused)) double json_num(const char *key) {
    char *last = out + strlen(out);
    while (last > out && last[-1] == '\n') *--last = 0;
    while (last > out && last[-1] != '\n') last--;
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\": ", key);
    const char *p = strstr(last, pat);
    return p ? atof(p + strlen(pat)) : -1;
}

/* Sets cli, src and a fresh scratch dir; returns 0, or 77 (skip) when CTest's REC_CLI /
 * REC_SOURCE_DIR are not set, or 1 when the directory cannot be made. */
static int clirun_setup(const char *name) {
    cli = getenv("REC_CLI");
    src = getenv("REC_SOURCE_DIR");
    if (!cli || !src) {
        printf("REC_CLI / REC_SOURCE_DIR not set: skipped\n");
        return 77;
    }
    snprintf(dir, sizeof dir, "%s/%s_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", name);
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    return 0;
}

/* A criteo_standard-like spec in the scratch directory: table c (1..26) has rows + step * c rows,
 * its ids floor-mod that. */
static inline void write_spec(const char *name, int rows, int step) {
    FILE *f = fopen(path(name), "w");
    if (!f) return;
    fprintf(f, "{\"format\": \"rectrain-prep\", \"version\": 1, \"name\": \"small\", \"tables\": {");
    for (int c = 1; c <= 26; c++) fprintf(f, "%s\"C%d\": {\"rows\": %d}", c > 1 ? ", " : "", c, rows + step * c);
    fprintf(f, "}, \"dense\": [");
    for (int i = 1; i <= 13; i++)
        fprintf(f, "%s{\"name\": \"I%d\", \"input\": \"I%d\", \"ops\": [{\"op\": \"fill_null\", \"value\": 0}, "
                   "{\"op\": \"clamp\", \"min\": 0}, {\"op\": \"cast\", \"to\": \"f32\"}, {\"op\": \"log1p\"}]}",
                i > 1 ? ", " : "", i, i);
    fprintf(f, "], \"sparse\": [");
    for (int c = 1; c <= 26; c++)
        fprintf(f, "%s{\"name\": \"C%d\", \"input\": \"C%d\", \"table\": \"C%d\", \"ops\": [{\"op\": \"fill_null\", "
                   "\"value\": 0}, {\"op\": \"modulo\", \"divisor\": %d}]}", c > 1 ? ", " : "", c, c, c, rows + step * c);
    fprintf(f, "]}\n");
    fclose(f);
}

static void clirun_cleanup(void) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

#endif
