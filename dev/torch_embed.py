#!/usr/bin/python3
"""PyTorch peer of `rectrain bench embed`: the same tables and batches through a loop of
per-table torch.nn.EmbeddingBag (mode="sum", sparse=True gradients) with torch.optim.SGD, the
way facebookresearch/dlrm's dlrm_s_pytorch.py runs its embeddings.

Reads the dump of `rectrain bench embed --model M --dump DIR` (format in bench/bench_embed.c):
DIR/model.json, DIR/batches.bin and DIR/dout.bin, and times, per batch,
  forward:                 one EmbeddingBag call per table, outputs concatenated (B, sum E);
  forward+backward+update: the same, then out.backward(dout) and SGD.step() on the sparse
                           gradients (zero_grad first),
reporting the median over --reps passes of the mean seconds per batch, as JSON on stdout.

  /usr/bin/python3 dev/torch_embed.py DIR [--reps 3] [--threads 2] [--device cpu|cuda]

With --device cuda the tables, ids and gradients live on the GPU and each timed pass ends with
torch.cuda.synchronize() (the launches are asynchronous).
"""
import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch


def read_batches(path, F, n):
    raw = np.fromfile(path, dtype=np.int64)
    pos, out = 0, []
    for _ in range(n):
        B = int(raw[pos]); pos += 1
        tabs = []
        for _ in range(F):
            nnz = int(raw[pos]); pos += 1
            off = raw[pos:pos + B + 1]; pos += B + 1
            idx = raw[pos:pos + nnz]; pos += nnz
            # EmbeddingBag takes the B start offsets (the last bag ends at len(idx)).
            tabs.append((torch.from_numpy(idx.copy()), torch.from_numpy(off[:B].copy())))
        out.append((B, tabs))
    if pos != len(raw):
        sys.exit(f"{path}: {len(raw) - pos} trailing values; the dump does not match model.json")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    a = ap.parse_args()
    dev = torch.device(a.device)
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("dev/torch_embed.py: --device cuda, but this torch sees no GPU")
    torch.set_num_threads(a.threads)
    m = json.load(open(os.path.join(a.dir, "model.json")))
    tables = m["tables"]
    F, nb, lr = len(tables), m["batches"], m["lr"]
    batches = [(B, [(i.to(dev), o.to(dev)) for i, o in tabs])
               for B, tabs in read_batches(os.path.join(a.dir, "batches.bin"), F, nb)]
    W = sum(d for _, d in tables)
    dout = torch.from_numpy(np.fromfile(os.path.join(a.dir, "dout.bin"), dtype=np.float32).reshape(m["batch"], W)).to(dev)
    bags = torch.nn.ModuleList()
    for r, d in tables:
        e = torch.nn.EmbeddingBag(r, d, mode="sum", sparse=True)
        with torch.no_grad():
            e.weight.uniform_(-math.sqrt(1.0 / r), math.sqrt(1.0 / r))
        bags.append(e)
    bags = bags.to(dev)
    opt = torch.optim.SGD(bags.parameters(), lr=lr)

    def forward(tabs):
        return torch.cat([bag(idx, off) for bag, (idx, off) in zip(bags, tabs)], dim=1)

    def timed(step):
        t = []
        for rep in range(-1, a.reps):
            t0 = time.perf_counter()
            for B, tabs in batches:
                step(B, tabs)
            if a.device == "cuda":
                torch.cuda.synchronize()
            if rep >= 0:
                t.append((time.perf_counter() - t0) / nb)
        return float(np.median(t))

    def fwd(B, tabs):
        with torch.no_grad():
            forward(tabs)

    def fwd_bwd(B, tabs):
        opt.zero_grad()
        out = forward(tabs)
        out.backward(dout[:B])
        opt.step()

    res = {"peer": "pytorch " + torch.__version__ + " nn.EmbeddingBag loop", "model": m["name"], "threads": a.threads, "device": a.device,
           "fwd_s": timed(fwd), "fwdbwd_s": timed(fwd_bwd)}
    print(f"torch peer {m['name']}: fwd {res['fwd_s'] * 1e3:.2f} ms, fwd+bwd+update {res['fwdbwd_s'] * 1e3:.2f} ms per batch",
          file=sys.stderr)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
