"""TorchRec peer of `rectrain bench embed`: the same tables and batches through TorchRec's
EmbeddingBagCollection as TorchRec users train it on CPU — sharded by DistributedModelParallel
(one process, a gloo group of one, the planner's plan for a CPU topology) with exact SGD fused
into the backward at the bench's learning rate, sum pooling, fp32 tables.

Reads the dump of `rectrain bench embed --model M --dump DIR` (dev/embed_dump.py) and times,
per batch, the forward (a KeyedJaggedTensor of every feature in, the pooled (B, sum E) out)
and forward+backward+update, medians over --reps passes, as JSON on stdout.

Runs in the virtual environment of bench/embed_vs_fbgemm.sh with torchrec added (torchrec
1.9.2 --no-deps, then tensordict, iopath, pyre-extensions, torchmetrics, typing-inspect):
  VENV/bin/python dev/torchrec_embed.py DIR [--reps 3] [--threads 2]
"""
import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.distributed as dist

import embed_dump


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    dist.init_process_group("gloo", rank=0, world_size=1)
    import torchrec
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor
    from torchrec.distributed import DistributedModelParallel
    from torchrec.distributed.embeddingbag import EmbeddingBagCollectionSharder
    from torchrec.distributed.planner import EmbeddingShardingPlanner, ParameterConstraints, Topology
    from torchrec.distributed.types import ShardingType

    m, raw, dout = embed_dump.load(a.dir)
    tables, lr = m["tables"], m["lr"]
    keys = [f"f{t}" for t in range(len(tables))]
    # initialised as rectrain's tables: U(-1/sqrt(R), 1/sqrt(R))
    ebc = EmbeddingBagCollection(
        tables=[EmbeddingBagConfig(name=f"t{t}", embedding_dim=d, num_embeddings=r, feature_names=[keys[t]],
                                   init_fn=lambda w, r=r: torch.nn.init.uniform_(w, -math.sqrt(1.0 / r), math.sqrt(1.0 / r)))
                for t, (r, d) in enumerate(tables)], device=torch.device("meta"))
    sharder = EmbeddingBagCollectionSharder(fused_params={"optimizer": EmbOptimType.EXACT_SGD, "learning_rate": lr})
    # table-wise for every table: the fused TBE with its in-backward SGD (data-parallel tables,
    # which a one-rank planner may pick, would need a separate dense optimizer)
    only_tw = {f"t{t}": ParameterConstraints(sharding_types=[ShardingType.TABLE_WISE.value]) for t in range(len(tables))}
    planner = EmbeddingShardingPlanner(topology=Topology(world_size=1, compute_device="cpu"), constraints=only_tw)
    plan = planner.plan(ebc, [sharder])
    model = DistributedModelParallel(ebc, device=torch.device("cpu"), plan=plan, sharders=[sharder])

    def kjt(B, tabs):
        return B, KeyedJaggedTensor(keys=keys, values=torch.from_numpy(np.concatenate([ids for ids, _ in tabs])),
                                    lengths=torch.from_numpy(np.concatenate([np.diff(off[:B + 1]) for _, off in tabs])))

    batches = [kjt(B, tabs) for B, tabs in raw]
    dout = torch.from_numpy(dout)

    def fwd(B, x):
        with torch.no_grad():
            model(x).values()

    def fwd_bwd(B, x):
        model(x).values().backward(dout[:B])

    def table0():
        w = next(v for k, v in model.state_dict().items() if k.endswith("t0.weight"))
        return (w.local_shards()[0].tensor if hasattr(w, "local_shards") else w).detach().clone()

    before = table0()  # the fused SGD must update the rows in the backward, or the timing means nothing
    fwd_bwd(*batches[0])
    if torch.equal(before, table0()):
        sys.exit("torchrec peer: a backward left table 0 unchanged; the fused optimizer is not running")

    res = {"peer": f"torchrec {torchrec.__version__} EmbeddingBagCollection, DistributedModelParallel on CPU, "
                   f"torch {torch.__version__}", "model": m["name"], "threads": a.threads, "tables": len(tables),
           "sharding": sorted({str(s.sharding_type) for p in plan.plan.values() for s in p.values()}),
           "fwd_s": embed_dump.timed(batches, fwd, a.reps), "fwdbwd_s": embed_dump.timed(batches, fwd_bwd, a.reps)}
    print(f"torchrec peer {m['name']}: fwd {res['fwd_s'] * 1e3:.3f} ms, fwd+bwd+update {res['fwdbwd_s'] * 1e3:.3f} ms "
          f"per batch", file=sys.stderr)
    print(json.dumps(res))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
