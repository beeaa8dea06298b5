/* NumPy .npy export of one float32 array (train.h).
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
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "rectrain/train.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "rec_npy_write writes the float image as '<f4' and needs a little-endian host"
#endif

enum { NPY_MAX_DIMS = 8, NPY_PREAMBLE = 10, NPY_ALIGN = 64 };

/* Writes data (shape[0] x ... x shape[ndim-1] floats, C order) to PATH.tmp and renames it
 * over PATH, so PATH is never seen half written; the temporary is removed on failure.
 * REC_EINVAL for ndim outside [0, 8] or a negative or overflowing shape, REC_EIO with the path
 * and strerror for any failure to create, write, close or rename. data may be NULL when the
 * array is empty. */
rec_status rec_npy_write(const char *path, const float *data, int ndim, const int64_t *shape) {
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
    size_t plen = strlen(path);
    char tmp[4096];
    if (plen + 5 > sizeof tmp)
        return rec_errorf(REC_EINVAL, "%s: .npy export: path longer than %zu bytes", path, sizeof tmp - 5);
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);

    FILE *f = fopen(tmp, "wb");
    if (!f) return rec_errorf(REC_EIO, "%s: cannot create the .npy file: %s", tmp, strerror(errno));
    int ok = fwrite(pre, 1, sizeof pre, f) == sizeof pre && fwrite(header, 1, (size_t)hlen, f) == (size_t)hlen &&
             (count == 0 || fwrite(data, sizeof(float), count, f) == count);
    int err = ok ? 0 : errno;
    if (fclose(f) != 0 && ok) {
        ok = 0;
        err = errno;
    }
    if (!ok) {
        remove(tmp);
        return rec_errorf(REC_EIO, "%s: cannot write the .npy file: %s", tmp, strerror(err));
    }
    if (rename(tmp, path) != 0) {
        err = errno;
        remove(tmp);
        return rec_errorf(REC_EIO, "%s: cannot rename %s into place: %s", path, tmp, strerror(err));
    }
    return REC_OK;
}
