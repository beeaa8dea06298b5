"""python/rectrain against the documented .rshard layout (include/rectrain/shard.h), read here
with numpy alone: every batch in file order equals the file's rows bitwise (labels, dense
values, offsets, ids of both widths, single- and multi-hot groups); the shuffled order is a
permutation of them, the same for 1 and 3 threads and for two readers, another for another
seed or epoch, in batches of the asked size; batches outlive the next batch and their reader
(list(reader), garbage collection at every allocation); bad paths are refused with the reason in
Python's words, and a wrong REC_LIB with the package's OSError. Makes its shards with the CLI
($REC_CLI). Prints `N passed, N failed` last, exits 1 on a failure."""
import ctypes.util
import gc
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import rectrain  # noqa: E402

passed = failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAILED:", what)


def pad(x):
    return (x + 63) & ~63


def read_layout(path):
    """The shard's rows in file order, parsed from the documented layout: labels (N,),
    dense (N, Dn), per feature (offsets (N + 1,), ids)."""
    b = np.fromfile(path, np.uint8)
    u64 = lambda o: int(b[o:o + 8].view(np.uint64)[0])
    i64 = lambda o: int(b[o:o + 8].view(np.int64)[0])
    i32 = lambda o: int(b[o:o + 4].view(np.int32)[0])
    assert bytes(b[:8]) == b"RSHARD01" and bytes(b[-8:]) == b"RSHDEND1"
    body = 64
    dn, F = i32(body + 64), i32(body + 68)
    R = [i64(body + 88 + 72 * f + 64) for f in range(F)]
    foot = u64(len(b) - 16)
    ng, ent = u64(foot), int(b[foot + 20:foot + 24].view(np.uint32)[0])
    labels, dense, offs, ids = [], [], [[] for _ in range(F)], [[] for _ in range(F)]
    base = [0] * F
    for g in range(ng):
        e = foot + 24 + g * ent
        off, n = u64(e), i64(e + 16)
        nnz = [i64(e + 32 + 8 * f) for f in range(F)]
        flags = b[e + 32 + 8 * F:e + 32 + 9 * F]
        labels.append(b[off:off + 4 * n].view(np.float32))
        o = off + pad(4 * n)
        dense.append(b[o:o + 4 * n * dn].view(np.float32).reshape(n, dn))
        o += pad(4 * n * dn)
        for f in range(F):
            if flags[f] & 1:
                of = np.arange(n + 1, dtype=np.int64)
            else:
                of = b[o:o + 8 * (n + 1)].view(np.int64)
                o += pad(8 * (n + 1))
            w = 4 if R[f] <= 2 ** 31 else 8
            ids[f].append(b[o:o + w * nnz[f]].view(np.int32 if w == 4 else np.int64))
            o += pad(w * nnz[f])
            offs[f].append(of[1:] + base[f])
            base[f] += nnz[f]
    offs = [np.concatenate([[0]] + o) for o in offs]
    return np.concatenate(labels), np.concatenate(dense), offs, [np.concatenate(i) for i in ids]


def rows_of(batches):
    """Every row as bytes (label, dense, each feature's ids), in the order read."""
    out = []
    for bt in batches:
        for r in range(len(bt)):
            parts = [bt.labels[r:r + 1].tobytes(), bt.dense[r].tobytes()]
            parts += [i[o[r]:o[r + 1]].astype(np.int64).tobytes() for o, i in zip(bt.offsets, bt.ids)]
            out.append(b"|".join(parts))
    return out


def copies(reader):
    """The reader's batches, each copied as it is taken (what list(reader) must equal)."""
    out = []
    for bt in reader:
        out.append(rectrain.Batch(bt.labels.copy(), bt.dense.copy(), [o.copy() for o in bt.offsets],
                                  [i.copy() for i in bt.ids], bt.names))
    return out


def same_rows(a, b):
    """Two lists of batches hold the same rows, bitwise, in the same batches."""
    return len(a) == len(b) and all(len(x) == len(y) and rows_of([x]) == rows_of([y]) for x, y in zip(a, b))


def test_batches_outlive(shards):
    """Batches kept past the next batch, past their reader's end and under garbage collection
    at every allocation: list(reader) equals the batches copied as read, and a first batch
    taken from a reader that is then dropped, while other readers fill and free the same
    sizes of memory, still reads as the file's first rows (labels, dense, offsets, ids)."""
    want = [copies(rectrain.ShardReader(p, batch=4096)) for p in shards]
    got = [list(rectrain.ShardReader(p, batch=4096)) for p in shards]
    check(all(same_rows(g, w) for g, w in zip(got, want)), "list(reader) equals the batches copied as read")
    shuffled = copies(rectrain.ShardReader(shards[1], batch=1000, shuffle=True, seed=3))
    check(same_rows(list(rectrain.ShardReader(shards[1], batch=1000, shuffle=True, seed=3)), shuffled),
          "list(reader) of a shuffled order equals the batches copied as read")
    thresholds = gc.get_threshold()
    gc.set_threshold(1, 1, 1)
    try:
        for p, w in zip(shards, want):
            first = next(iter(rectrain.ShardReader(p, batch=4096)))  # its reader is dropped here
            gc.collect()
            for q in shards * 2:  # other readers of the same batch size, then of others
                for _ in rectrain.ShardReader(q, batch=4096, shuffle=True, seed=5):
                    pass
                list(rectrain.ShardReader(q, batch=999))
                gc.collect()
            check(same_rows([first], w[:1]), f"{os.path.basename(p)}: a first batch outlives its reader "
                  f"(label sum {float(first.labels.sum())}, want {float(w[0].labels.sum())})")
    finally:
        gc.set_threshold(*thresholds)


def test_other_library():
    """REC_LIB naming a library that is not rectrain's reader: the package's OSError, naming the
    library and REC_LIB, not ctypes' AttributeError; then the right library loads again."""
    libc = ctypes.util.find_library("c")
    saved, env = rectrain.reader._LIB, os.environ.get("REC_LIB")
    rectrain.reader._LIB, os.environ["REC_LIB"] = None, libc
    try:
        rectrain.ShardReader("x.rshard")
        check(False, "REC_LIB naming libc refused")
    except OSError as e:
        check(libc in str(e) and "not rectrain's reader library" in str(e) and "REC_LIB" in str(e),
              f"REC_LIB naming libc: {e}")
    except Exception as e:  # noqa: BLE001 -- what the package raised instead
        check(False, f"REC_LIB naming libc: {type(e).__name__}: {e}")
    finally:
        rectrain.reader._LIB = saved
        if env is None:
            del os.environ["REC_LIB"]
        else:
            os.environ["REC_LIB"] = env


def main():
    cli, src = os.environ["REC_CLI"], os.environ["REC_SOURCE_DIR"]
    with tempfile.TemporaryDirectory() as d:
        subprocess.run([cli, "gen", "--rows", "30000", "--out", f"{d}/d.tsv"], check=True, capture_output=True)
        shards = []
        for spec in ("criteo_vocab", "criteo_rap"):  # single-hot; lists (multi-hot groups)
            out = f"{d}/{spec}.rshard"
            subprocess.run([cli, "prep", "--spec", f"{src}/configs/{spec}.json", "--in", f"{d}/d.tsv", "--out", out],
                           check=True, capture_output=True)
            shards.append(out)
        for path in shards:
            name = os.path.basename(path)
            labels, dense, offs, ids = read_layout(path)
            N = len(labels)
            got = copies(rectrain.ShardReader(path, batch=4096))
            sizes = [len(b) for b in got]
            check(sizes == [4096] * (N // 4096) + ([N % 4096] if N % 4096 else []), f"{name}: batch sizes {sizes}")
            r0, same = 0, True
            for bt in got:
                n = len(bt)
                same &= np.array_equal(bt.labels.view(np.uint32), labels[r0:r0 + n].view(np.uint32))
                same &= np.array_equal(bt.dense.view(np.uint32), dense[r0:r0 + n].view(np.uint32))
                for f in range(len(offs)):
                    a, e = offs[f][r0], offs[f][r0 + n]
                    same &= np.array_equal(bt.offsets[f], offs[f][r0:r0 + n + 1] - a)
                    same &= bt.ids[f].dtype == ids[f].dtype and np.array_equal(bt.ids[f], ids[f][a:e])
                r0 += n
            multi = any(not np.array_equal(np.diff(o), np.ones(N, np.int64)) for o in offs)
            check(same and r0 == N, f"{name}: file order equals the documented layout's rows, bitwise")
            print(f"{name}: {N} rows, {len(offs)} features, multi-hot: {multi}")
            want = sorted(rows_of(got))
            s1 = rows_of(copies(rectrain.ShardReader(path, batch=1000, shuffle=True, seed=7)))
            s3 = rows_of(copies(rectrain.ShardReader(path, batch=1000, shuffle=True, seed=7, threads=3)))
            check(sorted(s1) == want, f"{name}: the shuffled order holds every row once")
            check(s1 == s3, f"{name}: 3 loader threads give the order of 1")
            check(s1 != rows_of(got), f"{name}: shuffled differs from file order")
            s2 = rows_of(copies(rectrain.ShardReader(path, batch=1000, shuffle=True, seed=8)))
            s4 = rows_of(copies(rectrain.ShardReader(path, batch=1000, shuffle=True, seed=7, epoch=1)))
            check(s2 != s1 and s4 != s1, f"{name}: another seed, another epoch: other orders")
        check(multi, "the second shard has multi-hot features")
        both = copies(rectrain.ShardReader(shards[:1] * 2, batch=5000))
        check(sum(len(b) for b in both) == 2 * len(read_layout(shards[0])[0]), "a list of shards reads as one")
        test_batches_outlive(shards)
        raw = f"{d}/d.rraw"
        subprocess.run([cli, "prep", "--raw", "--in", f"{d}/d.tsv", "--out", raw], check=True, capture_output=True)
        for bad, why in ((f"{d}/none.rshard", "none.rshard"), ([], "no data set named"),
                         (f"{d}/d.tsv", f"{d}/d.tsv is a TSV or another file, not a .rshard"),
                         (raw, f"{raw} is a .rraw of raw columns, not a .rshard"),
                         ([shards[0], f"{d}/d.tsv"], f"{d}/d.tsv is a TSV")):
            try:
                rectrain.ShardReader(bad)
                check(False, f"{bad} refused")
            except ValueError as e:
                check(why in str(e), f"{bad} refused naming it: {e}")
                # ShardReader takes no spec: the advice is the prep command, not --spec / prep_spec
                check("prep_spec" not in str(e) and "(--spec" not in str(e), f"{bad}: refused in the CLI's words: {e}")
        test_other_library()
        for kw, why in (({"batch": 0}, "batch 0"), ({"threads": 0}, "threads 0"), ({"epoch": -1}, "epoch -1")):
            try:
                rectrain.ShardReader(shards[0], **kw)
                check(False, f"{kw} refused")
            except ValueError as e:
                check(why in str(e), f"{kw} refused naming it: {e}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
