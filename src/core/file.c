/* Whole-file reads for the small JSON documents rectrain loads, folders made, and files
 * written whole or not at all (core.h). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rectrain/core.h"

void rec_paths_name(const char *const *paths, int n, char *buf, size_t cap) {
    if (n <= 1) snprintf(buf, cap, "%s", n == 1 ? paths[0] : "");
    else snprintf(buf, cap, "%s (and %d more file%s)", paths[0], n - 1, n > 2 ? "s" : "");
}

void rec_line_col(const char *text, size_t pos, int64_t *line, int64_t *col) {
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < pos; i++) {
        if (text[i] == '\n') ++*line, *col = 1;
        else ++*col;
    }
}

rec_status rec_json_invalid(rec_status status, const char *origin, const char *text, size_t len, const char *end) {
    if (!text) text = "", len = 0;
    const size_t off = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
    int64_t line, col;
    rec_line_col(text, off, &line, &col);
    size_t last = len;
    while (last > 0 && strchr(" \t\r\n", text[last - 1])) last--; /* strchr finds the NUL too */
    const int whole = last > 0 && (text[last - 1] == '}' || text[last - 1] == ']');
    return rec_errorf(status, "%s: not valid JSON near line %lld, column %lld; %s", origin, (long long)line,
                      (long long)col, whole ? "check the brackets, commas and quotes there"
                                            : "it ends before its closing bracket: a file cut short? write it whole");
}

rec_status rec_read_file(const char *path, const char *what, size_t max_bytes, char **out, size_t *len_out) {
    *out = NULL;
    *len_out = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return rec_errorf(REC_EIO, "%s: cannot open the %s: %s", path, what, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) { /* fopen opens a directory; reading it fails */
        fclose(f);
        return rec_errorf(REC_EIO, "%s: is a directory, not a %s file; give the path of the file itself", path, what);
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            if (cap >= max_bytes) {
                free(buf);
                fclose(f);
                return rec_errorf(REC_EINVAL, "%s: a %s over %zu MiB is not plausible", path, what, max_bytes >> 20);
            }
            const size_t ncap = cap ? 2 * cap : 65536;
            char *nb = realloc(buf, ncap + 1);
            if (!nb) {
                free(buf);
                fclose(f);
                return rec_errorf(REC_ENOMEM, "%s: out of memory reading the %s", path, what);
            }
            buf = nb;
            cap = ncap;
        }
        const size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    const int err = ferror(f) ? errno : 0;
    fclose(f);
    if (err) {
        free(buf);
        return rec_errorf(REC_EIO, "%s: error reading the %s: %s", path, what, strerror(err));
    }
    buf[len] = '\0';
    *out = buf;
    *len_out = len;
    return REC_OK;
}

rec_status rec_mkdir_p(const char *dir, const char *what) {
    size_t n = strlen(dir);
    char *p = malloc(n + 1);
    if (!p) return rec_errorf(REC_ENOMEM, "%s: out of memory", dir);
    memcpy(p, dir, n + 1);
    rec_status s = REC_OK;
    for (size_t i = 1; i <= n && !s; i++) { /* each prefix that ends a component */
        if (p[i] != '/' && p[i] != 0) continue;
        char keep = p[i];
        p[i] = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            s = rec_errorf(REC_EIO, "%s: cannot create the %s (%s: %s)", dir, what, p, strerror(errno));
        p[i] = keep;
    }
    free(p);
    struct stat st;
    if (!s && (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)))
        s = rec_errorf(REC_EIO, "%s: exists and is not a directory; choose another %s", dir, what);
    return s;
}

/* The folder of path into buf: "." for a bare name, "/" for a file at the root. */
static void dir_of(const char *path, char *buf, size_t cap) {
    const char *slash = strrchr(path, '/');
    if (!slash) snprintf(buf, cap, ".");
    else snprintf(buf, cap, "%.*s", (int)(slash - path) + (slash == path), path);
}

/* ---- files written whole or not at all ------------------------------------------------------ */

static void atomic_free(rec_atomic_file *a) {
    free(a->path);
    free(a->tmp);
    a->path = a->tmp = NULL;
    a->fd = -1;
    a->direct = 0;
}

/* Whether PATH's folder is, once its links are resolved, /dev or /proc or under them: there
 * /dev/stdout (a link to /proc/self/fd/1) resolves to whatever the shell redirected, a
 * regular file too, and a rename would replace the link itself. */
static int in_system_folder(const char *path) {
    char dir[PATH_MAX], real[PATH_MAX];
    dir_of(path, dir, sizeof dir);
    if (!realpath(dir, real)) return 0;
    return !strcmp(real, "/dev") || !strncmp(real, "/dev/", 5) || !strcmp(real, "/proc") || !strncmp(real, "/proc/", 6);
}

rec_status rec_atomic_open(rec_atomic_file *a, const char *path) {
    const size_t n = strlen(path);
    struct stat st;
    const int exists = stat(path, &st) == 0;
    *a = (rec_atomic_file){.fd = -1};
    if (exists && S_ISDIR(st.st_mode)) /* the rename at the end would fail */
        return rec_errorf(REC_EINVAL, "%s: is a directory; give the path of the file to write (DIR/NAME)", path);
    a->direct = exists && (!S_ISREG(st.st_mode) || in_system_folder(path));
    a->path = malloc(n + 1);
    a->tmp = malloc(n + 5);
    if (!a->path || !a->tmp) {
        atomic_free(a);
        return rec_errorf(REC_ENOMEM, "%s: out of memory", path);
    }
    memcpy(a->path, path, n + 1);
    memcpy(a->tmp, path, n + 1);
    if (!a->direct) memcpy(a->tmp + n, ".tmp", 5);
    /* direct: no O_CREAT (it exists) and no O_TRUNC (a device or FIFO has nothing to cut; a
     * file behind /dev/stdout was cut by the shell's '>', or is appended to by its '>>') */
    const int append = a->direct && S_ISREG(st.st_mode) ? O_APPEND : 0;
    a->fd = a->direct ? open(path, O_WRONLY | append | O_CLOEXEC)
                      : open(a->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (a->fd < 0) {
        rec_status s = rec_errorf(REC_EIO, "%s: cannot %s: %s; check that the directory exists and is writable",
                                  a->tmp, a->direct ? "open for writing" : "create", strerror(errno));
        atomic_free(a);
        return s;
    }
    return REC_OK;
}

rec_status rec_atomic_commit(rec_atomic_file *a) {
    rec_status s = REC_OK;
    if (!a->direct && fsync(a->fd) != 0) s = rec_errorf(REC_EIO, "%s: fsync failed: %s", a->tmp, strerror(errno));
    if (close(a->fd) != 0 && !s) s = rec_errorf(REC_EIO, "%s: close failed: %s", a->tmp, strerror(errno));
    a->fd = -1;
    if (a->direct) {
        atomic_free(a);
        return s;
    }
    if (!s && rename(a->tmp, a->path) != 0)
        s = rec_errorf(REC_EIO, "%s: cannot rename %s to it: %s", a->path, a->tmp, strerror(errno));
    if (s) {
        unlink(a->tmp);
    } else { /* make the rename itself durable */
        char dir[PATH_MAX];
        dir_of(a->path, dir, sizeof dir);
        const int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dfd >= 0) {
            (void)fsync(dfd);
            close(dfd);
        }
    }
    atomic_free(a);
    return s;
}

void rec_atomic_abort(rec_atomic_file *a) {
    if (a->tmp && a->fd >= 0) {
        close(a->fd);
        if (!a->direct) unlink(a->tmp);
    }
    atomic_free(a);
}

rec_status rec_atomic_fopen(rec_atomic_file *a, const char *path, FILE **f) {
    *f = NULL;
    REC_TRY(rec_atomic_open(a, path));
    const int fd = dup(a->fd);
    *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (*f) return REC_OK;
    const rec_status s = rec_errorf(REC_EIO, "%s: cannot set up writing: %s", a->tmp, strerror(errno));
    if (fd >= 0) close(fd);
    rec_atomic_abort(a);
    return s;
}

/* The status of writes to f: s when set, else REC_EIO when `bad`, naming errno `e`. */
static rec_status stream_status(int bad, int e, const char *path, const char *what, rec_status s) {
    if (!s && bad)
        s = rec_errorf(REC_EIO, "%s: cannot write the %s: %s", path, what,
                       e ? strerror(e) : "a write failed (is the disk full?)");
    return s;
}

rec_status rec_stream_flush(FILE *f, const char *path, const char *what, rec_status s) {
    const int earlier = errno;
    errno = 0;
    if (fflush(f) != 0) return stream_status(1, errno, path, what, s);
    return stream_status(ferror(f), earlier, path, what, s);
}

rec_status rec_stream_close(FILE *f, const char *path, const char *what, rec_status s) {
    if (!f) return s;
    const int earlier = errno; /* a failed fwrite's reason (EFBIG), when the writer went on unchecked */
    errno = 0;
    int bad = fflush(f) != 0;
    int e = errno;
    if (!bad && ferror(f)) bad = 1, e = earlier;
    errno = 0;
    bad |= fclose(f) != 0;
    return stream_status(bad, e ? e : errno, path, what, s);
}

rec_status rec_atomic_fclose(rec_atomic_file *a, FILE *f, const char *what, rec_status s) {
    s = rec_stream_close(f, a->tmp, what, s);
    if (s) {
        rec_atomic_abort(a);
        return s;
    }
    return rec_atomic_commit(a);
}

int rec_write_full(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n > 0) {
        const ssize_t k = write(fd, c, n);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) {
            if (k == 0) errno = EIO;
            return 0;
        }
        c += k;
        n -= (size_t)k;
    }
    return 1;
}

rec_status rec_atomic_write(const char *path, const char *what, const void *p, size_t n) {
    rec_atomic_file a;
    REC_TRY(rec_atomic_open(&a, path));
    if (!rec_write_full(a.fd, p, n)) {
        const rec_status s = rec_errorf(REC_EIO, "%s: cannot write the %s: %s", a.tmp, what, strerror(errno));
        rec_atomic_abort(&a);
        return s;
    }
    return rec_atomic_commit(&a);
}

rec_status rec_json_write(const char *path, const char *what, cJSON *root) {
    char *text = root ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text) return rec_errorf(REC_ENOMEM, "%s: out of memory writing the %s", path, what);
    const rec_status s = rec_atomic_write(path, what, text, strlen(text));
    cJSON_free(text);
    return s;
}
