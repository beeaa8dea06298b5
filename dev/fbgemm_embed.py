"""FBGEMM peer of `rectrain bench embed`: the same tables and batches through FBGEMM's CPU
table-batched embedding (TBE: SplitTableBatchedEmbeddingBagsCodegen on the host, the kernels
TorchRec's EmbeddingBagCollection runs on CPU), sum pooling, with exact SGD fused into the
backward pass at the bench's learning rate.

Reads the dump of `rectrain bench embed --model M --dump DIR` (format in bench/bench_embed.c;
dev/torch_embed.py reads the same) and times, per batch,
  forward:                 one TBE call over all tables, output (B, sum E);
  forward+backward+update: the same, then out.backward(dout), which updates the rows in place,
reporting the median over --reps passes of the mean seconds per batch, as JSON on stdout.
--precision fp16 stores the tables in fp16 (FBGEMM's CPU TBE trains fp32 and fp16 tables).

Runs in the virtual environment bench/embed_vs_fbgemm.sh makes (torch and fbgemm-gpu-cpu from
PyPI; never a dependency of rectrain):
  VENV/bin/python dev/fbgemm_embed.py DIR [--reps 3] [--threads 2] [--precision fp32|fp16]
"""
import argparse
import json
import math
import sys

import numpy as np
import torch
import fbgemm_gpu  # noqa: F401  (registers the operators)
from fbgemm_gpu.split_embedding_configs import EmbOptimType, SparseType
from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation, PoolingMode
from fbgemm_gpu.split_table_batched_embeddings_ops_training import (ComputeDevice,
                                                                    SplitTableBatchedEmbeddingBagsCodegen)

import embed_dump


def tbe_batch(B, tabs):
    """A batch as TBE input: indices of every table one after another, and T * B + 1 offsets
    into them (table-major)."""
    idx, offs, base = [], [], 0
    for ids, off in tabs:
        idx.append(ids)
        offs.append(off[:B] + base)
        base += len(ids)
    offs.append(np.array([base], dtype=np.int64))
    return B, torch.from_numpy(np.concatenate(idx)), torch.from_numpy(np.concatenate(offs))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--precision", choices=("fp32", "fp16"), default="fp32")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    m, raw, dout = embed_dump.load(a.dir)
    tables, lr = m["tables"], m["lr"]
    batches = [tbe_batch(B, tabs) for B, tabs in raw]
    dout = torch.from_numpy(dout)
    tbe = SplitTableBatchedEmbeddingBagsCodegen(
        embedding_specs=[(r, d, EmbeddingLocation.HOST, ComputeDevice.CPU) for r, d in tables],
        optimizer=EmbOptimType.EXACT_SGD, learning_rate=lr, pooling_mode=PoolingMode.SUM,
        weights_precision=SparseType.FP16 if a.precision == "fp16" else SparseType.FP32,
        output_dtype=SparseType.FP32)
    with torch.no_grad():  # as rectrain and the PyTorch peer initialise: U(-1/sqrt(R), 1/sqrt(R))
        for t, (w, (r, _)) in enumerate(zip(tbe.split_embedding_weights(), tables)):
            w.copy_(torch.empty(w.shape).uniform_(-math.sqrt(1.0 / r), math.sqrt(1.0 / r)).to(w.dtype))

    def timed(step):
        return embed_dump.timed(batches, step, a.reps)

    def fwd(B, idx, off):
        with torch.no_grad():
            tbe(idx, off)

    def fwd_bwd(B, idx, off):
        tbe(idx, off).backward(dout[:B])

    res = {"peer": f"fbgemm_gpu {fbgemm_gpu.__version__} CPU TBE ({a.precision} tables), torch {torch.__version__}",
           "model": m["name"], "threads": a.threads, "precision": a.precision,
           "fwd_s": timed(fwd), "fwdbwd_s": timed(fwd_bwd)}
    print(f"fbgemm peer {m['name']} ({a.precision}): fwd {res['fwd_s'] * 1e3:.3f} ms, fwd+bwd+update "
          f"{res['fwdbwd_s'] * 1e3:.3f} ms per batch", file=sys.stderr)
    print(json.dumps(res))


if __name__ == "__main__":
    main()
