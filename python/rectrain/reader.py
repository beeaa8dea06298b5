"""ShardReader: ctypes over include/rectrain/reader.h (see the package's docstring)."""
import ctypes
import ctypes.util
import os

import numpy as np

_LIB = None


def library_path():
    """Where librectrain_reader.so is taken from: $REC_LIB, else a build folder of the
    checkout this package sits in, else the system's library path."""
    env = os.environ.get("REC_LIB")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for build in ("build", "build2", "build-asan"):
        p = os.path.join(here, "..", "..", build, "librectrain_reader.so")
        if os.path.exists(p):
            return os.path.normpath(p)
    return ctypes.util.find_library("rectrain_reader") or "librectrain_reader.so"


def _lib():
    global _LIB
    if _LIB is not None:
        return _LIB
    path = library_path()
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise OSError(f"rectrain: cannot load {path} ({e}); build rectrain (make) and set REC_LIB to its "
                      "build/librectrain_reader.so") from None
    P, I64, I32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int32
    sig = {
        "rec_reader_open": (ctypes.c_int, [ctypes.POINTER(P), ctypes.POINTER(ctypes.c_char_p), ctypes.c_int, I64,
                                           ctypes.c_int, ctypes.c_uint64, I64, ctypes.c_int]),
        "rec_reader_close": (None, [P]),
        "rec_reader_rows": (I64, [P]),
        "rec_reader_n_dense": (I32, [P]),
        "rec_reader_n_sparse": (I32, [P]),
        "rec_reader_table_rows": (I64, [P, I32]),
        "rec_reader_next": (ctypes.c_int, [P, ctypes.POINTER(I64)]),
        "rec_reader_labels": (ctypes.POINTER(ctypes.c_float), [P]),
        "rec_reader_dense": (ctypes.POINTER(ctypes.c_float), [P]),
        "rec_reader_offsets": (ctypes.POINTER(I64), [P, I32]),
        "rec_reader_ids": (P, [P, I32, ctypes.POINTER(ctypes.c_int)]),
        "rec_errmsg": (ctypes.c_char_p, []),
    }
    for name, (res, args) in sig.items():
        f = getattr(lib, name, None)
        if f is None:  # another library, or an older build of this one
            raise OSError(f"rectrain: {path} has no {name}: it is not rectrain's reader library (or one built "
                          "before this package); set REC_LIB to a build's librectrain_reader.so, or unset it to "
                          "use this checkout's build/") from None
        f.restype, f.argtypes = res, args
    _LIB = lib
    return lib


class Batch:
    """One batch: labels (n,), dense (n, Dn), and per sparse feature offsets (n + 1,) and ids;
    its own arrays, which outlive the reader and the batches after it."""

    def __init__(self, labels, dense, offsets, ids, names):
        self.labels, self.dense, self.offsets, self.ids, self.names = labels, dense, offsets, ids, names

    def __len__(self):
        return len(self.labels)

    def to_embedding_bags(self):
        """[(ids, offsets)] as torch int64 tensors, one per feature, for nn.EmbeddingBag
        (offsets without the final total, as EmbeddingBag takes them)."""
        import torch
        return [(torch.from_numpy(i.astype(np.int64)), torch.from_numpy(o[:-1].copy())) for i, o in zip(self.ids, self.offsets)]

    def to_kjt(self):
        """A torchrec KeyedJaggedTensor of the sparse features (keys f0..fF-1 unless named)."""
        import torch
        from torchrec.sparse.jagged_tensor import KeyedJaggedTensor
        values = np.concatenate([i.astype(np.int64) for i in self.ids])
        lengths = np.concatenate([np.diff(o) for o in self.offsets])
        return KeyedJaggedTensor.from_lengths_sync(keys=list(self.names), values=torch.from_numpy(values),
                                                   lengths=torch.from_numpy(lengths.astype(np.int32)))


class ShardReader:
    """Iterates a .rshard's batches as `rectrain train` reads them: batch rows each (the last
    one shorter), in file order or, with shuffle, the order of (seed, epoch). Several shards,
    read as one data set: a list of paths. threads: the loader's (gather and checksums)."""

    def __init__(self, path, batch=2048, shuffle=False, seed=1, epoch=0, threads=1):
        self._lib = _lib()
        paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)
        names = (ctypes.c_char_p * len(paths))(*[os.fsencode(p) for p in paths])
        h = ctypes.c_void_p()
        if self._lib.rec_reader_open(ctypes.byref(h), names, len(paths), int(batch), int(bool(shuffle)), int(seed),
                                     int(epoch), int(threads)) != 0:
            raise ValueError(self._lib.rec_errmsg().decode())
        self._h = h
        self.rows = self._lib.rec_reader_rows(h)
        self.n_dense = self._lib.rec_reader_n_dense(h)
        self.n_sparse = self._lib.rec_reader_n_sparse(h)
        self.table_rows = [self._lib.rec_reader_table_rows(h, f) for f in range(self.n_sparse)]
        self.names = [f"f{f}" for f in range(self.n_sparse)]

    def close(self):
        if getattr(self, "_h", None):
            self._lib.rec_reader_close(self._h)
            self._h = None

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __iter__(self):
        return self

    def __next__(self):
        if not self._h:
            raise StopIteration
        n = ctypes.c_int64()
        if self._lib.rec_reader_next(self._h, ctypes.byref(n)) != 0:
            raise ValueError(self._lib.rec_errmsg().decode())
        n = n.value
        if n == 0:
            raise StopIteration
        lib, h = self._lib, self._h
        labels = _owned(lib.rec_reader_labels(h), (n,))
        dense = _owned(lib.rec_reader_dense(h), (n, self.n_dense))
        offsets, ids = [], []
        for f in range(self.n_sparse):
            o = _owned(lib.rec_reader_offsets(h, f), (n + 1,))
            w = ctypes.c_int()
            p = lib.rec_reader_ids(h, f, ctypes.byref(w))
            t = ctypes.c_int32 if w.value == 4 else ctypes.c_int64
            ids.append(_owned(ctypes.cast(p, ctypes.POINTER(t)), (int(o[-1]),)))
            offsets.append(o)
        return Batch(labels, dense, offsets, ids, self.names)


def _owned(ptr, shape):
    """A numpy copy of the loader's array at ptr: the loader reuses its batch memory for the
    batches after and frees it with the reader, and a batch must outlive both."""
    if 0 in shape:
        return np.zeros(shape, np.dtype(ptr._type_))  # as_array refuses a zero-size array
    return np.ctypeslib.as_array(ptr, shape=shape).copy()
