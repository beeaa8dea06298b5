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
import sys

import torch

import embed_dump


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
    m, raw, dout = embed_dump.load(a.dir)
    tables, lr = m["tables"], m["lr"]
    # EmbeddingBag takes the B start offsets (the last bag ends at len(ids)).
    batches = [(B, [(torch.from_numpy(i.copy()).to(dev), torch.from_numpy(o[:B].copy()).to(dev)) for i, o in tabs])
               for B, tabs in raw]
    dout = torch.from_numpy(dout).to(dev)
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
        return embed_dump.timed(batches, step, a.reps, torch.cuda.synchronize if a.device == "cuda" else None)

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
