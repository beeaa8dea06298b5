"""The dump `rectrain bench embed --dump DIR` writes (format in bench/bench_embed.c), as the
embedding peers (dev/torch_embed.py, dev/fbgemm_embed.py) read it, and their timing loop."""
import json
import os
import sys
import time

import numpy as np


def load(d):
    """model.json, the batches and the output gradient of dump directory d: (model, batches,
    dout), batches a list of (B, [(ids, offsets)] per table) as int64 numpy arrays, offsets
    (B + 1) starting at 0, dout (batch, sum of dims) float32."""
    m = json.load(open(os.path.join(d, "model.json")))
    F, n = len(m["tables"]), m["batches"]
    path = os.path.join(d, "batches.bin")
    raw = np.fromfile(path, dtype=np.int64)
    pos, batches = 0, []
    for _ in range(n):
        B = int(raw[pos]); pos += 1
        tabs = []
        for _ in range(F):
            nnz = int(raw[pos]); pos += 1
            off = raw[pos:pos + B + 1]; pos += B + 1
            tabs.append((raw[pos:pos + nnz], off)); pos += nnz
        batches.append((B, tabs))
    if pos != len(raw):
        sys.exit(f"{path}: {len(raw) - pos} trailing values; the dump does not match model.json")
    W = sum(dim for _, dim in m["tables"])
    dout = np.fromfile(os.path.join(d, "dout.bin"), dtype=np.float32).reshape(m["batch"], W)
    return m, batches, dout


def timed(batches, step, reps, sync=None):
    """Median over reps passes (after one untimed) of the mean seconds per batch of step(*batch)."""
    t = []
    for rep in range(-1, reps):
        t0 = time.perf_counter()
        for b in batches:
            step(*b)
        if sync:
            sync()
        if rep >= 0:
            t.append((time.perf_counter() - t0) / len(batches))
    return float(np.median(t))
