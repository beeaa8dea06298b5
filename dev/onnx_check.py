"""Checks an ONNX model written by `rectrain export --format onnx` and scores rows with ONNX
Runtime: onnx.checker with full_check (types and shapes inferred through every node), then,
given the inputs `rectrain predict --feed-out FEED` wrote and predict's own output, each row's
probability against predict's (max absolute difference; the "nan" lines of rows predict skipped
with --bad-rows skip are left out, as the feed leaves those rows out), and ONNX Runtime's speed
on the CPU. A model whose weights are in a side file (ONNX external data) is read with it.

usage: python dev/onnx_check.py MODEL.onnx [--feed FEED --preds PREDS.tsv] [--tol 1e-5]
                                [--threads T] [--latency-rows N] [--json]

Needs onnx, onnxruntime and numpy (bench/onnx_vs_predict.sh makes a venv with them).
Exit status 0 when every check passes, 1 otherwise. The last stdout line with --json is one
JSON object: rows, max_abs_diff, rows_per_s, latency_ms (median of one batch of
--latency-rows rows), ort_version."""
import argparse
import json
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort


def read_feed(path):
    """The batches of a feed file (layout in src/train/feed.c): a list of input dicts."""
    raw = open(path, "rb").read()
    if raw[:8] != b"RECFEED1":
        sys.exit(f"{path}: not a feed file (no RECFEED1 magic); write one with rectrain predict --feed-out")
    pos = 8

    def i64(n):
        nonlocal pos
        a = np.frombuffer(raw, dtype="<i8", count=n, offset=pos)
        pos += 8 * n
        return a

    dn, f = (int(v) for v in i64(2))
    batches = []
    while True:
        b = int(i64(1)[0])
        if b == 0:
            break
        dense = np.frombuffer(raw, dtype="<f4", count=b * dn, offset=pos).reshape(b, dn)
        pos += 4 * b * dn
        feed = {"dense": dense}
        for k in range(f):
            nnz = int(i64(1)[0])
            feed[f"offsets_{k}"] = i64(b + 1)
            feed[f"ids_{k}"] = i64(nnz)
        batches.append(feed)
    if pos != len(raw):
        sys.exit(f"{path}: {len(raw) - pos} bytes after the end record")
    return batches


def read_preds(path):
    """predict's probabilities, the first column of its --out, without the lines of rows it
    skipped (--bad-rows skip writes "nan" there, so that line k stays about input line k; the
    feed holds only the rows scored), and how many such lines there were."""
    p = np.loadtxt(path, dtype=np.float64, usecols=0, ndmin=1)
    scored = ~np.isnan(p)
    return p[scored], int(len(p) - scored.sum())


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--feed")
    ap.add_argument("--preds")
    ap.add_argument("--tol", type=float, default=1e-5)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--latency-rows", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()

    # by path: the checker reads external data where it is (a loaded model over 2 GiB cannot be checked)
    onnx.checker.check_model(a.model, full_check=True)
    model = onnx.load(a.model, load_external_data=False)
    print(f"checker: {a.model} passes onnx.checker (full_check), opset "
          f"{model.opset_import[0].version}, IR {model.ir_version}")
    if not a.feed:
        return 0
    so = ort.SessionOptions()
    if a.threads:
        so.intra_op_num_threads = a.threads
    sess = ort.InferenceSession(a.model, so, providers=["CPUExecutionProvider"])
    names = {i.name for i in sess.get_inputs()}
    batches = read_feed(a.feed)
    for feed in batches:
        if set(feed) != names:
            sys.exit(f"{a.feed}: inputs {sorted(set(feed) ^ names)} differ from the model's; "
                     "write the feed with the same data and spec as the model's")
    sess.run(["probability"], batches[0])  # warm-up
    t0 = time.perf_counter()
    probs = [sess.run(["probability"], feed)[0] for feed in batches]
    secs = time.perf_counter() - t0
    p = np.concatenate(probs)
    rows = len(p)
    # latency: one request of --latency-rows rows (the first rows of the first batch), median
    first = batches[0]
    n = min(a.latency_rows, first["dense"].shape[0])
    one = {"dense": first["dense"][:n]}
    for k in [key[4:] for key in first if key.startswith("ids_")]:
        off = first[f"offsets_{k}"]
        one[f"offsets_{k}"] = off[:n + 1]
        one[f"ids_{k}"] = first[f"ids_{k}"][:off[n]]
    lat = []
    for _ in range(200):
        t = time.perf_counter()
        sess.run(["probability"], one)
        lat.append(time.perf_counter() - t)
    lat_ms = float(np.median(lat) * 1e3)
    out = {"rows": rows, "rows_per_s": rows / secs, "latency_ms": lat_ms, "latency_rows": n,
           "ort_version": ort.__version__}
    ok = True
    if a.preds:
        ref, skipped = read_preds(a.preds)
        if len(ref) != rows:
            sys.exit(f"{a.preds}: {len(ref)} rows scored ({skipped} nan lines of rows predict skipped left out), the "
                     f"feed {rows}; give predict's output of the same run (its --out with its --feed-out)")
        diff = np.abs(p.astype(np.float64) - ref)
        worst = int(np.argmax(diff)) if rows else 0
        out["max_abs_diff"] = float(diff.max()) if rows else 0.0
        ok = bool(np.all(np.isfinite(p))) and out["max_abs_diff"] <= a.tol
        print(f"compare: {rows} rows, max |p_ort - p_predict| = {out['max_abs_diff']:.3g} (row {worst}: "
              f"{p[worst]:.9g} vs {ref[worst]:.9g}){f', {skipped} nan lines of rows predict skipped' if skipped else ''}"
              f", tolerance {a.tol:g}: {'ok' if ok else 'FAILED'}")
    print(f"onnxruntime {ort.__version__}: {rows} rows in {secs:.3f} s = {rows / secs:.0f} rows/s "
          f"(batches of {batches[0]['dense'].shape[0]}); latency of one {n}-row request {lat_ms:.3f} ms (median of 200)")
    if a.json:
        print(json.dumps(out))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
