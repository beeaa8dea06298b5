/* The output guard: no command writes a file it reads (core.h, DESIGN.md "CLI contract"). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "rectrain/core.h"

static void add(rec_guard *g, int kind, const char *opt, const char *path, const char *const *names) {
    if (!path || !path[0] || !strcmp(path, "-")) return; /* not given, or stdout */
    if (g->n == g->cap) {
        const int cap = g->cap ? 2 * g->cap : 32;
        rec_guard_entry *e = realloc(g->e, sizeof *e * (size_t)cap);
        if (!e) {
            g->no_memory = 1; /* refused at check: a guard that silently skipped a path would be no guard */
            return;
        }
        g->e = e;
        g->cap = cap;
    }
    g->e[g->n++] = (rec_guard_entry){kind, opt, path, names};
}

void rec_guard_in(rec_guard *g, const char *opt, const char *path) { add(g, REC_GUARD_IN, opt, path, NULL); }

void rec_guard_ins(rec_guard *g, const char *opt, const char *const *paths, int n) {
    for (int k = 0; k < n; k++) rec_guard_in(g, opt, paths[k]);
}

void rec_guard_out(rec_guard *g, const char *opt, const char *path) { add(g, REC_GUARD_OUT, opt, path, NULL); }

void rec_guard_dir(rec_guard *g, const char *opt, const char *dir, const char *const *names) {
    add(g, names ? REC_GUARD_DIR : REC_GUARD_TREE, opt, dir, names);
}

/* An absolute path with its "." and ".." components and repeated slashes taken out, in place
 * (for the part of a path that does not exist, which holds no links to resolve). */
static void lexical(char *p) {
    char *out = p;
    for (const char *in = p; *in;) {
        while (*in == '/') in++;
        const char *end = strchr(in, '/');
        const size_t len = end ? (size_t)(end - in) : strlen(in);
        if (len == 0 || (len == 1 && in[0] == '.')) {
        } else if (len == 2 && in[0] == '.' && in[1] == '.') {
            while (out > p && *--out != '/') {
            }
        } else {
            *out++ = '/';
            memmove(out, in, len);
            out += len;
        }
        in += len;
    }
    if (out == p) *out++ = '/';
    *out = 0;
}

/* `path` resolved (links, ., ..) as far as it exists: its longest existing prefix made real,
 * the rest appended as written, so that two spellings of a file that does not exist yet (or
 * of one in a folder to be made) compare equal. */
static void canonical(const char *path, char *buf, size_t cap) {
    char head[PATH_MAX], real[PATH_MAX];
    if (snprintf(head, sizeof head, "%s", path) >= (int)sizeof head) {
        snprintf(buf, cap, "%s", path);
        return;
    }
    size_t n = strlen(head);
    while (n > 1 && head[n - 1] == '/') head[--n] = 0;
    for (;;) {
        const int is_path = head[0] != 0;
        if (realpath(is_path ? head : ".", real)) {
            const char *rest = path + strlen(head);
            while (*rest == '/') rest++;
            const int root = !strcmp(real, "/");
            if (!*rest) snprintf(buf, cap, "%s", real);
            else snprintf(buf, cap, "%s/%s", root ? "" : real, rest);
            lexical(buf);
            return;
        }
        char *slash = strrchr(head, '/');
        if (!is_path) break;
        if (!slash) head[0] = 0;              /* "a" -> the working folder */
        else if (slash == head) head[1] = 0;  /* "/a" -> "/" */
        else *slash = 0;
    }
    snprintf(buf, cap, "%s", path);
}

/* Whether a and b are one file: the same device and inode when both exist (a hard link, a
 * symbolic link, ./x and ../d/x all compare equal), else the same canonical path (a file to be
 * made may be one that exists, through a folder to be made and ..). */
static int same_file(const char *a, const char *b) {
    struct stat sa, sb;
    const int ea = stat(a, &sa) == 0, eb = stat(b, &sb) == 0;
    if (ea && eb) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    /* one or both to be made: newdir/../x is x once newdir exists */
    char ca[2 * PATH_MAX], cb[2 * PATH_MAX];
    canonical(a, ca, sizeof ca);
    canonical(b, cb, sizeof cb);
    return strcmp(ca, cb) == 0;
}

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Whether `path` is `dir` or lies anywhere under it, after resolving both. */
static int under(const char *path, const char *dir) {
    char cp[2 * PATH_MAX], cd[2 * PATH_MAX];
    canonical(path, cp, sizeof cp);
    canonical(dir, cd, sizeof cd);
    const size_t n = strlen(cd);
    return !strncmp(cp, cd, n) && (cp[n] == 0 || cp[n] == '/' || (n == 1 && cd[0] == '/'));
}

/* Whether writing `target` (and the ".tmp" beside it that atomic writes go through) would
 * replace `in`; `what` says which of the two. */
static int writes_file(const char *target, const char *in, char *what, size_t cap) {
    char tmp[3 * PATH_MAX + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", target);
    if (same_file(target, in)) return snprintf(what, cap, "%s", target), 1;
    if (same_file(tmp, in)) return snprintf(what, cap, "%s", tmp), 1;
    return 0;
}

/* Whether output e writes over `path` (a file or folder another option names). On a hit,
 * `what` says which of e's files it is. */
static int clobbers(const rec_guard_entry *e, const char *path, char *what, size_t cap) {
    char f[3 * PATH_MAX];
    switch (e->kind) {
    case REC_GUARD_OUT:
        return writes_file(e->path, path, what, cap);
    case REC_GUARD_DIR: /* a file where the folder goes, then NAME in it; NAME* is a prefix (events files) */
        if (same_file(e->path, path) && !is_dir(path)) return snprintf(what, cap, "%s", e->path), 1;
        for (const char *const *n = e->names; *n; n++) {
            const size_t len = strlen(*n);
            if (len && (*n)[len - 1] == '*') {
                const char *slash = strrchr(path, '/');
                snprintf(f, sizeof f, "%.*s", slash ? (int)(slash - path) + (slash == path) : 1, slash ? path : ".");
                if (!strncmp(slash ? slash + 1 : path, *n, len - 1) && same_file(f, e->path))
                    return snprintf(what, cap, "%s", path), 1;
                continue;
            }
            snprintf(f, sizeof f, "%s/%s", e->path, *n);
            if (writes_file(f, path, what, cap)) return 1;
        }
        return 0;
    default: /* REC_GUARD_TREE: the folder is replaced whole (written as DIR.tmp, then renamed) */
        snprintf(f, sizeof f, "%s.tmp", e->path);
        if (under(path, e->path)) return snprintf(what, cap, "%s", e->path), 1;
        if (under(path, f)) return snprintf(what, cap, "%s", f), 1;
        return 0;
    }
}

/* Whether outputs a and b would write the same file: a writes over one of b's files, or b
 * over one of a's. A folder's files are its names (not its prefixes); a whole folder is its
 * path. */
static int collide(const rec_guard_entry *a, const rec_guard_entry *b, char *what, size_t cap) {
    for (int pass = 0; pass < 2; pass++) {
        const rec_guard_entry *x = pass ? b : a, *y = pass ? a : b; /* does x write over y's files? */
        if (y->kind != REC_GUARD_DIR) {
            if (clobbers(x, y->path, what, cap)) return 1;
            continue;
        }
        for (const char *const *n = y->names; *n; n++) {
            char f[3 * PATH_MAX];
            if ((*n)[0] && (*n)[strlen(*n) - 1] == '*') continue;
            snprintf(f, sizeof f, "%s/%s", y->path, *n);
            if (clobbers(x, f, what, cap)) return 1;
        }
    }
    return 0;
}

static rec_status check(const rec_guard *g) {
    if (g->no_memory)
        return rec_errorf(REC_ENOMEM, "out of memory listing the %d files of this command to check that none it "
                          "writes is one it reads", g->n + 1);
    char what[4 * PATH_MAX];
    /* Inputs first: an output over an input is named as such even where it is also over
     * another output. An option that names a file both read and written updates it in place
     * on purpose (train --resume's checkpoint, --tune's --plan) and is not compared with
     * itself. */
    for (int i = 0; i < g->n; i++) {
        const rec_guard_entry *o = &g->e[i];
        for (int k = 0; k < g->n && o->kind != REC_GUARD_IN; k++) {
            const rec_guard_entry *x = &g->e[k];
            if (x->kind == REC_GUARD_IN && strcmp(x->opt, o->opt) && clobbers(o, x->path, what, sizeof what))
                return rec_errorf(REC_EINVAL, "%s %s would write %s, which is %s %s, an input of this command; give %s "
                                  "another path (no command writes a file it reads)", o->opt, o->path, what, x->opt,
                                  x->path, o->opt);
        }
    }
    for (int i = 0; i < g->n; i++) {
        const rec_guard_entry *o = &g->e[i];
        for (int k = i + 1; k < g->n && o->kind != REC_GUARD_IN; k++) {
            const rec_guard_entry *x = &g->e[k];
            if (x->kind != REC_GUARD_IN && strcmp(x->opt, o->opt) && collide(o, x, what, sizeof what))
                return rec_errorf(REC_EINVAL, "%s %s and %s %s would both write %s; give each output its own path",
                                  o->opt, o->path, x->opt, x->path, what);
        }
    }
    return REC_OK;
}

rec_status rec_guard_check(rec_guard *g) {
    const rec_status s = check(g);
    free(g->e);
    *g = (rec_guard){0};
    return s;
}
