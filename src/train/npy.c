/* NumPy .npy export (export.h): one float32 array as a .npy file, and a model's parameters as a
 * folder of them that appears whole or not at all.
 *
 * Format version 1.0 (numpy/lib/format.py; NEP 1, "A simple file format for NumPy arrays"):
 *
 *   "\x93NUMPY" | major 1 | minor 0 | u16 little-endian HEADER_LEN | header | data
 *
 * The header is the text of a Python dict literal, exactly as numpy writes it,
 *   {'descr': '<f4', 'fortran_order': False, 'shape': (3, 5), }
 * ("(7,)" for one dimension, "()" for none), padded with spaces and ended by '\n' so that
 * 10 + HEADER_LEN is a multiple of 64 and the data start aligned, as numpy's own writer does
 * (ARRAY_ALIGN = 64 in format.py, for memory mapping; readers accept any padding). The data
 * are the raw float32 values in C order, which on a little-endian host is the memory image of
 * the array. */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "rectrain/core.h"
#include "rectrain/export.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "rec_npy_write writes the float image as '<f4' and needs a little-endian host"
#endif

enum { NPY_MAX_DIMS = 8, NPY_PREAMBLE = 10, NPY_ALIGN = 64 };

/* Writes data (shape[0] x ... x shape[ndim-1] floats, C order) to PATH.tmp and renames it
 * over PATH, so PATH is never seen half written; the temporary is removed on failure.
 * REC_EINVAL for ndim outside [0, 8] or a negative or overflowing shape, REC_EIO with the path
 * and strerror for any failure to create, write, close or rename. data may be NULL when the
 * array is empty. */
/* count floats to f, from data or widened from data16, a chunk at a time. */
static int write_values(FILE *f, const float *data, const uint16_t *data16, size_t count) {
    if (!data16) return count == 0 || fwrite(data, sizeof(float), count, f) == count;
    float buf[4096];
    for (size_t i = 0; i < count;) {
        const size_t k = count - i < 4096 ? count - i : 4096;
        for (size_t q = 0; q < k; q++) buf[q] = rec_bf16_to_float(data16[i + q]);
        if (fwrite(buf, sizeof(float), k, f) != k) return 0;
        i += k;
    }
    return 1;
}

rec_status rec_npy_write(const char *path, const float *data, const uint16_t *data16, int ndim, const int64_t *shape) {
    if (ndim < 0 || ndim > NPY_MAX_DIMS)
        return rec_errorf(REC_EINVAL, "%s: .npy export of a %d-dimensional array; supported are 0 to %d dimensions",
                          path, ndim, NPY_MAX_DIMS);
    /* the dict: at most ~70 bytes of fixed text plus 8 x (19 digits + ", ") */
    char header[512];
    int len = snprintf(header, sizeof header, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
    size_t count = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0 || (shape[d] > 0 && count > SIZE_MAX / sizeof(float) / (size_t)shape[d]))
            return rec_errorf(REC_EINVAL, "%s: .npy export: dimension %d is %lld; sizes must be >= 0 and fit in memory",
                              path, d, (long long)shape[d]);
        count *= (size_t)shape[d];
        len += snprintf(header + len, sizeof header - (size_t)len, d == 0 ? "%lld" : ", %lld", (long long)shape[d]);
    }
    len += snprintf(header + len, sizeof header - (size_t)len, "%s), }", ndim == 1 ? "," : "");
    /* pad with spaces so that the preamble + header + '\n' ends on a 64-byte boundary */
    int total = NPY_PREAMBLE + len + 1;
    total = (total + NPY_ALIGN - 1) / NPY_ALIGN * NPY_ALIGN;
    const int hlen = total - NPY_PREAMBLE;
    memset(header + len, ' ', (size_t)(hlen - 1 - len));
    header[hlen - 1] = '\n';

    unsigned char pre[NPY_PREAMBLE] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0,
                                       (unsigned char)(hlen & 0xff), (unsigned char)(hlen >> 8)};
    rec_atomic_file a;
    FILE *f;
    REC_TRY(rec_atomic_fopen(&a, path, &f));
    if (fwrite(pre, 1, sizeof pre, f) == sizeof pre && fwrite(header, 1, (size_t)hlen, f) == (size_t)hlen)
        write_values(f, data, data16, count); /* a failed write is seen by the close */
    return rec_atomic_fclose(&a, f, ".npy file", REC_OK);
}

/* ---- a model's parameters as a folder of .npy files ------------------------------------------
 *
 * The folder is written as DIR.tmp beside DIR and renamed to DIR only once every file is in
 * it, so a failure (a full disk, a file too large, a stop) leaves no DIR with some of the
 * parameters, which a reader would take for a whole export. An existing DIR with files in it
 * is refused unless the caller allows replacing it (--overwrite), and even then only when it
 * holds nothing but what an earlier export wrote there. Names alone cannot tell that (a user's
 * own mydata.npy and config.json look like an export's), so every export writes the list of its
 * files first, as EXPORT_LIST, and a folder without that list is never emptied: a slip of the
 * shell (--npy ~) deletes nothing. */

#define EXPORT_LIST "rectrain_export.json"

/* An export's list of files, read from its folder or made for a new export. */
typedef struct export_list {
    cJSON *root;        /* NULL: no list (the folder is no export's) */
    const cJSON *files; /* root's "files": an array of plain names */
} export_list;

static void list_free(export_list *l) {
    cJSON_Delete(l->root);
    l->root = NULL;
    l->files = NULL;
}

/* l->files checked: an array of names without '/' (an export writes only into its folder). */
static int list_valid(const export_list *l) {
    if (!cJSON_IsArray(l->files)) return 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, l->files) {
        if (!cJSON_IsString(it) || !it->valuestring[0] || strchr(it->valuestring, '/') ||
            !strcmp(it->valuestring, ".") || !strcmp(it->valuestring, ".."))
            return 0;
    }
    return 1;
}

/* DIR/EXPORT_LIST into *l; no file there leaves l->root NULL and is no error. */
static rec_status list_read(const char *dir, export_list *l) {
    l->root = NULL;
    l->files = NULL;
    char path[4096 + sizeof EXPORT_LIST + 1];
    snprintf(path, sizeof path, "%s/" EXPORT_LIST, dir);
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? REC_OK : rec_errorf(REC_EIO, "%s: cannot look at it: %s", path, strerror(errno));
    char *text = NULL;
    size_t len = 0;
    REC_TRY(rec_read_file(path, "export's list of files", 1 << 20, &text, &len));
    l->root = cJSON_ParseWithLength(text, len);
    free(text);
    l->files = cJSON_GetObjectItemCaseSensitive(l->root, "files");
    if (list_valid(l)) return REC_OK;
    list_free(l);
    return rec_errorf(REC_EINVAL, "%s: not the list of files an export writes (an object whose \"files\" is an array "
                      "of names); %s is left as it is: choose another directory", path, dir);
}

/* Whether the export of list l wrote `name`: the list itself, a listed file, or with tmp_too
 * the NAME.tmp a write goes through (left by an export that was killed). */
static int list_has(const export_list *l, const char *name, int tmp_too) {
    if (!l->root) return 0;
    if (!strcmp(name, EXPORT_LIST)) return 1;
    const size_t n = strlen(name);
    const cJSON *it;
    cJSON_ArrayForEach(it, l->files) {
        const size_t k = strlen(it->valuestring);
        if (!strcmp(name, it->valuestring) ||
            (tmp_too && n == k + 4 && !strncmp(name, it->valuestring, k) && !strcmp(name + k, ".tmp")))
            return 1;
    }
    return 0;
}

/* The list of what exporting m writes: NAME.npy per parameter and config.json. */
static rec_status list_make(const rec_model *m, export_list *l) {
    l->root = cJSON_CreateObject();
    cJSON *files = l->root ? cJSON_AddArrayToObject(l->root, "files") : NULL;
    int ok = files && cJSON_AddStringToObject(l->root, "written_by", "rectrain export") != NULL;
    const rec_tensor *ts;
    const int n = rec_model_tensors(m, &ts);
    char name[300];
    for (int i = 0; i < n && ok; i++) {
        if (ts[i].role != REC_TENSOR_PARAM) continue;
        snprintf(name, sizeof name, "%s.npy", ts[i].name);
        ok = cJSON_AddItemToArray(files, cJSON_CreateString(name));
    }
    ok = ok && cJSON_AddItemToArray(files, cJSON_CreateString("config.json"));
    l->files = files;
    if (ok) return REC_OK;
    list_free(l);
    return rec_errorf(REC_ENOMEM, "out of memory for the export's list of files");
}

/* Counts the entries of folder `dir` into *entries and copies the first one that the export
 * of list l did not write (another name, or not a regular file) into foreign (cap bytes; ""
 * when none). With `clear`, and only when every entry is the export's, removes them all and
 * then the folder. -1 with errno when the folder cannot be read or a removal fails, else 0. */
static int scan_export_dir(const char *dir, const export_list *l, int clear, int64_t *entries, char *foreign,
                           size_t cap) {
    *entries = 0;
    foreign[0] = 0;
    DIR *d = opendir(dir);
    if (!d) return -1;
    const size_t dn = strlen(dir);
    char *p = malloc(dn + 2 + 256);
    if (!p) {
        closedir(d);
        errno = ENOMEM;
        return -1;
    }
    int rc = 0;
    for (int pass = 0; pass < 1 + clear && rc == 0; pass++) { /* look first; remove on a second pass */
        if (pass == 1) {
            if (foreign[0]) break;
            rewinddir(d);
        }
        const struct dirent *e;
        while (rc == 0 && (e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            snprintf(p, dn + 2 + 256, "%s/%s", dir, e->d_name);
            if (pass == 1) {
                if (unlink(p) != 0) rc = -1;
                continue;
            }
            (*entries)++;
            struct stat st;
            if (!foreign[0] && (!list_has(l, e->d_name, clear) || lstat(p, &st) != 0 || !S_ISREG(st.st_mode)))
                snprintf(foreign, cap, "%s", e->d_name);
        }
    }
    const int err = errno;
    free(p);
    closedir(d);
    if (rc == 0 && clear && !foreign[0] && rmdir(dir) != 0) return -1;
    errno = err;
    return rc;
}

/* Removes folder `dir` when it holds only what the export listed in it wrote (and the list);
 * -1 with errno, or with *foreign set to what else it holds, when it does not go. */
static int clear_export_dir(const char *dir, char *foreign, size_t cap) {
    export_list l;
    int64_t entries;
    foreign[0] = 0;
    if (list_read(dir, &l) != REC_OK) {
        snprintf(foreign, cap, "%s", EXPORT_LIST);
        return -1;
    }
    const int rc = scan_export_dir(dir, &l, 1, &entries, foreign, cap);
    list_free(&l);
    return rc != 0 || foreign[0] ? -1 : 0;
}

/* DIR without trailing slashes into dir, and DIR.tmp into tmp (each `cap` bytes). */
static rec_status export_paths(const char *path, char *dir, char *tmp, size_t cap) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    if (n == 0 || (n == 1 && path[0] == '/') || n + 5 > cap)
        return rec_errorf(REC_EINVAL, "'%s': not a usable export directory; give a path such as weights/", path);
    memcpy(dir, path, n);
    dir[n] = 0;
    snprintf(tmp, cap, "%s.tmp", dir);
    return REC_OK;
}

/* Why DIR (holding n entries, `foreign` the first that its export did not write, `listed`
 * whether it holds an export's list) cannot take this export; REC_OK when it can. */
static rec_status refuse_dir(const char *dir, int64_t n, const char *foreign, int listed, int overwrite) {
    if (n > 0 && foreign[0] && !listed) /* before advising --overwrite, which would not take it */
        return rec_errorf(REC_EINVAL, "%s: holds '%s' and no " EXPORT_LIST " (the list an export keeps of the files it "
                          "wrote), so it is not an earlier export: only an export's own files are replaced; choose "
                          "another directory (or, if it is an export from before that list was kept, remove it "
                          "yourself)", dir, foreign);
    if (n > 0 && foreign[0])
        return rec_errorf(REC_EINVAL, "%s: holds '%s', which the export there did not write (" EXPORT_LIST " lists "
                          "its files); only those are replaced: move it away, or choose another directory", dir, foreign);
    if (n > 0 && !overwrite)
        return rec_errorf(REC_EINVAL, "%s: exists and holds an earlier export (%lld file%s); add --overwrite to "
                          "replace it with this one, or choose another directory", dir, (long long)n, rec_s(n));
    return REC_OK;
}

/* Everything rec_export_npy checks before it writes a byte (see rec_export_check); leaves
 * DIR.tmp made and empty when `keep_tmp`, removes it otherwise. */
static rec_status export_prepare(const char *dir, const char *tmp, int overwrite, int keep_tmp) {
    char foreign[300];
    int64_t n = 0;
    struct stat st;
    if (lstat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            return rec_errorf(REC_EIO, "%s: exists and is not a directory; choose another export directory", dir);
        export_list l;
        REC_TRY(list_read(dir, &l));
        const int listed = l.root != NULL, rc = scan_export_dir(dir, &l, 0, &n, foreign, sizeof foreign);
        list_free(&l);
        if (rc != 0) return rec_errorf(REC_EIO, "%s: cannot read the export directory: %s", dir, strerror(errno));
        REC_TRY(refuse_dir(dir, n, foreign, listed, overwrite));
    } else if (errno != ENOENT && errno != ENOTDIR) { /* ENOTDIR: rec_mkdir_p says which part is a file */
        return rec_errorf(REC_EIO, "%s: cannot look at the export directory: %s", dir, strerror(errno));
    }
    /* left by an export that was killed: cleared, if it holds only what that export listed */
    if (lstat(tmp, &st) == 0 && (!S_ISDIR(st.st_mode) || clear_export_dir(tmp, foreign, sizeof foreign) != 0))
        return rec_errorf(REC_EIO, "%s: is in the way of the export (written there, then renamed to %s) and is not "
                          "the remains of one; remove it, or choose another directory", tmp, dir);
    REC_TRY(rec_mkdir_p(tmp, "export directory"));
    if (!keep_tmp) rmdir(tmp);
    return REC_OK;
}

rec_status rec_export_check(const char *path, int overwrite) {
    char dir[4096], tmp[4096];
    REC_TRY(export_paths(path, dir, tmp, sizeof dir));
    return export_prepare(dir, tmp, overwrite, 0);
}

/* config.json: the model's canonical config, one line. */
static rec_status write_config_json(const rec_model *m, const char *path) {
    char *json = rec_model_config_to_json(rec_model_get_config(m));
    if (!json) return rec_errorf(REC_ENOMEM, "%s: out of memory for the config JSON", path);
    FILE *fp = fopen(path, "wb");
    rec_status s = fp ? REC_OK : rec_errorf(REC_EIO, "%s: cannot create: %s", path, strerror(errno));
    if (fp) {
        const size_t len = strlen(json);
        int bad = fwrite(json, 1, len, fp) != len || fputc('\n', fp) == EOF;
        int err = bad ? errno : 0;
        if (fclose(fp) != 0 && !bad) {
            bad = 1;
            err = errno;
        }
        if (bad) s = rec_errorf(REC_EIO, "%s: cannot write: %s", path, strerror(err));
    }
    free(json);
    return s;
}

/* Every PARAM tensor as DIR.tmp/NAME.npy (float32, C order, rec_npy_write) and the canonical
 * config as DIR.tmp/config.json, after the list of them (EXPORT_LIST); then an earlier export
 * in DIR is removed (overwrite) and DIR.tmp renamed to DIR. On any failure DIR.tmp is removed
 * and DIR is as it was. */
rec_status rec_export_npy(const rec_model *m, const char *path, int overwrite) {
    if (!m || !path) return rec_errorf(REC_EINVAL, "rec_export_npy: model and directory are required");
    char dir[4096], tmp[4096], file[4096 + 128];
    REC_TRY(export_paths(path, dir, tmp, sizeof dir));
    REC_TRY(export_prepare(dir, tmp, overwrite, 1));
    export_list l;
    rec_status s = list_make(m, &l);
    if (!s) { /* first: a DIR.tmp left by a kill holds it and is known for an export's */
        snprintf(file, sizeof file, "%s/" EXPORT_LIST, tmp);
        s = rec_json_write(file, "export's list of files", cJSON_Duplicate(l.root, 1));
    }
    const rec_tensor *ts;
    const int n = rec_model_tensors(m, &ts);
    for (int i = 0; i < n && !s; i++) {
        if (ts[i].role != REC_TENSOR_PARAM) continue;
        snprintf(file, sizeof file, "%s/%s.npy", tmp, ts[i].name);
        s = rec_npy_write(file, ts[i].data, ts[i].data16, ts[i].ndim, ts[i].shape);
    }
    if (!s) {
        snprintf(file, sizeof file, "%s/config.json", tmp);
        s = write_config_json(m, file);
    }
    char foreign[300];
    int64_t entries;
    if (s) { /* no partial export: what was written goes */
        scan_export_dir(tmp, &l, 1, &entries, foreign, sizeof foreign);
        list_free(&l);
        return s;
    }
    list_free(&l);
    /* An earlier export in DIR makes way (export_prepare refused anything else in it); an
     * empty DIR is simply removed. */
    struct stat st;
    if (lstat(dir, &st) == 0 && rmdir(dir) != 0 && clear_export_dir(dir, foreign, sizeof foreign) != 0)
        return rec_errorf(REC_EIO, "%s: cannot remove the earlier export to put the new one in its place (%s); "
                          "the new export is complete in %s", dir, foreign[0] ? "it holds other files now"
                          : strerror(errno), tmp);
    if (rename(tmp, dir) != 0) {
        s = rec_errorf(REC_EIO, "%s: cannot rename %s to it: %s", dir, tmp, strerror(errno));
        clear_export_dir(tmp, foreign, sizeof foreign);
    }
    return s;
}
