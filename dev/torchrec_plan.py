"""TorchRec's sharding plan for a spec's tables, as JSON that `rectrain plan --score` and
`mpirun ... rectrain train --plan-shards` read (docs/distributed.md, "Bringing a TorchRec plan").

Runs TorchRec's EmbeddingShardingPlanner with its default Topology for N ranks, 8 per host
(local_world_size 8; compute_device "cuda" by default: the planner builds its cost model and
sharding options for GPUs from constants, with no GPU present), on an EmbeddingBagCollection
of the spec's tables (rows from the spec's "tables", in the order of its sparse features;
embedding dim from the model config's "embedding": {"dim"}), built on the meta device so no
table is allocated. TorchRec's planner takes the batch per rank (its `batch_size`): give it as
--batch-per-rank B, or as --global-batch G (`rectrain plan --batch`: B = G / N, which must
divide); the default is the model config's batch size as the global batch. Pooling factor 1
(one id per feature, as Criteo) unless --pooling. Writes
  {"table_plans": {"t0": {"sharding_type": "table_wise", "ranks": [5],
                          "shards": [{"rank": 5, "offsets": [0, 0], "sizes": [1460, 16]}]}, ...},
   "planner": {...what made it}}
with tables named t0..tK-1 (the spec's sparse features in order) and every shard's offsets and
sizes as [row, column], read from each table's ParameterSharding (sharding_spec.shards'
shard_offsets, shard_sizes, placement rank); data_parallel tables have "shards": null.

--rows R1,R2,... gives the table sizes instead of a spec whose tables are "auto" (sized by
`rectrain prep`'s vocabularies): e.g. the Terabyte recipe's, as `rectrain inspect` prints them.

Usage (TorchRec 1.9.2 in its own virtual environment, see docs/distributed.md):
  VENV/bin/python dev/torchrec_plan.py --spec configs/criteo_standard.json \
      --config configs/dlrm_kaggle.json --ranks 64 --batch-per-rank 1024 --out plans/torchrec-64.json
"""
import argparse
import json
import os
import sys
import time


def table_rows(spec_path, rows_arg):
    """The sparse features' tables' rows, in the order of the spec's sparse features."""
    with open(spec_path) as f:
        spec = json.load(f)
    tables = spec.get("tables", {})
    feats = spec.get("sparse", [])
    if not feats:
        sys.exit(f"{spec_path}: $.sparse: no sparse features")
    rows = []
    for k, ft in enumerate(feats):
        t = ft.get("table", ft.get("name"))
        r = tables.get(t, {}).get("rows")
        rows.append(r)
    if rows_arg:
        given = [int(x) for x in rows_arg.split(",")]
        if len(given) != len(rows):
            sys.exit(f"--rows: {len(given)} sizes for the spec's {len(rows)} sparse features")
        rows = given
    for k, r in enumerate(rows):
        if not isinstance(r, int) or r < 1:
            sys.exit(f"{spec_path}: $.sparse[{k}]: its table's rows are {r!r}; give the sizes with --rows "
                     "(rectrain inspect DATA.rshard prints them)")
    return rows


def per_rank_batch(ap, a, cfg):
    """(batch per rank, global batch): TorchRec plans for the one, rectrain's --batch is the other."""
    if a.batch is not None:
        ap.error("--batch is ambiguous: give --batch-per-rank B (TorchRec's planner's batch_size) or "
                 "--global-batch G (rectrain plan --batch; B = G / N)")
    if a.ranks < 1:
        ap.error(f"--ranks {a.ranks}: needs at least 1")
    if a.batch_per_rank is not None:
        if a.batch_per_rank < 1:
            ap.error(f"--batch-per-rank {a.batch_per_rank}: needs at least 1")
        return a.batch_per_rank, a.batch_per_rank * a.ranks
    g = a.global_batch if a.global_batch is not None else cfg.get("train", {}).get("batch_size", 2048)
    if g < a.ranks or g % a.ranks:
        ap.error(f"global batch {g} does not divide into {a.ranks} ranks' equal batches; "
                 "give --batch-per-rank or a multiple of --ranks")
    return g // a.ranks, g


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spec", required=True, help="prep spec (its tables and sparse features)")
    ap.add_argument("--config", required=True, help="model config (its embedding dim)")
    ap.add_argument("--ranks", type=int, required=True, help="N, the world size")
    b = ap.add_mutually_exclusive_group()
    b.add_argument("--batch-per-rank", type=int, default=None, metavar="B",
                   help="each rank's batch: TorchRec's planner's batch_size")
    b.add_argument("--global-batch", type=int, default=None, metavar="G",
                   help="the global batch, as rectrain plan --batch: B = G / N (default: the config's batch size)")
    ap.add_argument("--batch", default=None, help=argparse.SUPPRESS)  # said as ambiguous, below
    ap.add_argument("--rows", default=None, help="table sizes, comma-separated, instead of the spec's")
    ap.add_argument("--local", type=int, default=8, help="ranks per host (default 8)")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="the topology's compute device")
    ap.add_argument("--pooling", type=float, default=1.0, help="ids per sample per feature (default 1)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()

    rows = table_rows(a.spec, a.rows)
    with open(a.config) as f:
        cfg = json.load(f)
    dim = cfg["embedding"]["dim"]
    per_rank, batch = per_rank_batch(ap, a, cfg)

    import torch
    import torchrec
    from torchrec import EmbeddingBagCollection, EmbeddingBagConfig
    from torchrec.distributed.planner import EmbeddingShardingPlanner, Topology
    from torchrec.distributed.planner.types import ParameterConstraints
    from torchrec.distributed.sharding_plan import get_default_sharders

    names = [f"t{k}" for k in range(len(rows))]
    ebc = EmbeddingBagCollection(
        tables=[EmbeddingBagConfig(name=n, embedding_dim=dim, num_embeddings=r, feature_names=[f"f{k}"])
                for k, (n, r) in enumerate(zip(names, rows))],
        device=torch.device("meta"))
    topo = Topology(world_size=a.ranks, compute_device=a.device, local_world_size=min(a.local, a.ranks))
    constraints = {n: ParameterConstraints(pooling_factors=[a.pooling]) for n in names}
    planner = EmbeddingShardingPlanner(topology=topo, batch_size=per_rank, constraints=constraints, debug=False)
    t0 = time.time()
    plan = planner.plan(ebc, get_default_sharders())
    took = time.time() - t0

    out = {}
    mod = plan.plan[""]
    for n in names:
        ps = mod[n]
        shards = None
        if ps.sharding_spec is not None:
            shards = []
            for sm in ps.sharding_spec.shards:
                shards.append({"rank": sm.placement.rank(), "offsets": list(sm.shard_offsets),
                               "sizes": list(sm.shard_sizes)})
        out[n] = {"sharding_type": ps.sharding_type, "compute_kernel": ps.compute_kernel,
                  "ranks": list(ps.ranks) if ps.ranks is not None else None, "shards": shards}
    doc = {"table_plans": out,
           "planner": {"torchrec": getattr(torchrec, "__version__", "?"), "torch": torch.__version__,
                       "world_size": a.ranks, "local_world_size": topo.local_world_size,
                       "compute_device": a.device, "batch_size_per_rank": per_rank, "global_batch": batch,
                       "embedding_dim": dim, "pooling_factor": a.pooling, "spec": os.path.basename(a.spec),
                       "seconds": round(took, 2)}}
    tmp = a.out + ".tmp"
    with open(tmp, "w") as f:
        f.write("{\"table_plans\": {\n")
        items = list(out.items())
        for i, (n, tp) in enumerate(items):
            f.write(f"  {json.dumps(n)}: {json.dumps(tp)}{',' if i + 1 < len(items) else ''}\n")
        f.write("},\n \"planner\": " + json.dumps(doc["planner"]) + "}\n")
    os.replace(tmp, a.out)
    kinds = {}
    for tp in out.values():
        kinds[tp["sharding_type"]] = kinds.get(tp["sharding_type"], 0) + 1
    print(f"torchrec_plan: {a.ranks} ranks, {len(rows)} tables of dim {dim}, batch {per_rank} per rank: "
          + ", ".join(f"{v} {k}" for k, v in sorted(kinds.items())) + f" ({took:.1f} s) -> {a.out}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
