#!/usr/bin/python3
"""PyTorch peer of `rectrain train` for the quality and speed comparisons of the training issue.

Reads the same Criteo TSV that `rectrain prep` turned into a shard, preprocesses it as the
facebookresearch/dlrm pipeline does (dense: log(1 + max(x, 0)); sparse: hex id floor-mod the
table size taken from the prep spec's `modulo` op), and trains the DLRM of a rectrain model
config (bottom/top MLPs, dot interaction without self-interaction, sum-pooled EmbeddingBags
with sparse gradients, SGD as dlrm_s_pytorch.py uses) on the same rows in the same order with
the same batch size, then reports the AUC of the last --holdout share of the rows (sklearn)
and the training throughput. Initialisation follows dlrm_s_pytorch.py (MLP weights
N(0, sqrt(2/(m+n))), biases N(0, sqrt(1/m)), embeddings U(-sqrt(1/R), sqrt(1/R))).

  /usr/bin/python3 dev/torch_dlrm.py --tsv train.tsv --spec spec.json --config configs/dlrm_kaggle.json \
      --holdout 0.1 [--threads 2] [--steps N] [--json]

Speed runs on a GPU: --device cuda keeps the model and the rows on the GPU (timing ends with
torch.cuda.synchronize(), the first --warmup steps untimed); --synthetic N draws N rows instead
of reading a TSV (labels Bernoulli(0.25), dense log1p of small integers, ids skewed towards low
rows, floor(R u^(4/3))) with the spec's table sizes; --batch overrides the config's.
"""
import argparse
import json
import math
import sys
import time

import numpy as np
import torch
from sklearn.metrics import roc_auc_score


def load_tsv(path, divisors):
    """Label (N,), dense (N, 13) float32 after log1p(max(x,0)), sparse (N, 26) int64 ids mod divisors."""
    labels, dense, sparse = [], [], []
    with open(path) as f:
        for line in f:
            fields = line.rstrip("\n").split("\t")
            labels.append(float(fields[0]))
            dense.append([max(int(x), 0) if x else 0 for x in fields[1:14]])
            sparse.append([int(x, 16) if x else 0 for x in fields[14:40]])
    y = np.asarray(labels, dtype=np.float32)
    x = np.log1p(np.asarray(dense, dtype=np.float32))
    s = np.asarray(sparse, dtype=np.uint64)
    d = np.asarray(divisors, dtype=np.uint64)
    s = (s % d).astype(np.int64)  # ids are non-negative: floor-mod == %
    return y, x, s


def load_rshard(path):
    """The same arrays from a .rshard through rectrain's Python reader (python/rectrain), in file
    order: what prep's spec made of the rows, for the peer's own model."""
    import rectrain
    ys, xs, ss = [], [], []
    for b in rectrain.ShardReader(path, batch=65536):
        for o in b.offsets:
            if not np.array_equal(np.diff(o), np.ones(len(b), np.int64)):
                sys.exit(f"{path}: a multi-hot feature; this peer trains one id a feature")
        ys.append(b.labels.copy()), xs.append(b.dense.copy())
        ss.append(np.stack([i.astype(np.int64) for i in b.ids], axis=1))
    return np.concatenate(ys), np.concatenate(xs), np.concatenate(ss)


def spec_divisors(spec_path):
    spec = json.load(open(spec_path))
    out = []
    for feat in spec["sparse"]:
        div = [op["divisor"] for op in feat["ops"] if op["op"] == "modulo"]
        if len(div) != 1:
            sys.exit(f"{spec_path}: feature {feat['name']} has no single modulo op; this peer runs criteo_standard-style specs")
        out.append(div[0])
    return out


def mlp(sizes, last_relu):
    layers = []
    for i in range(len(sizes) - 1):
        lin = torch.nn.Linear(sizes[i], sizes[i + 1])
        m, n = sizes[i + 1], sizes[i]
        with torch.no_grad():
            lin.weight.normal_(0.0, math.sqrt(2.0 / (m + n)))
            lin.bias.normal_(0.0, math.sqrt(1.0 / m))
        layers.append(lin)
        if i < len(sizes) - 2 or last_relu:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


class DLRM(torch.nn.Module):
    def __init__(self, n_dense, rows, dim, bottom, top):
        super().__init__()
        self.bottom = mlp([n_dense] + bottom, True)
        self.emb = torch.nn.ModuleList()
        for r in rows:
            e = torch.nn.EmbeddingBag(r, dim, mode="sum", sparse=True)
            with torch.no_grad():
                e.weight.uniform_(-math.sqrt(1.0 / r), math.sqrt(1.0 / r))
            self.emb.append(e)
        F = len(rows)
        self.li, self.lj = zip(*[(i, j) for i in range(F + 1) for j in range(i)])
        self.top = mlp([dim + (F + 1) * F // 2] + top, False)

    def forward(self, dense, ids):
        B = dense.shape[0]
        h = self.bottom(dense)
        offsets = torch.arange(B, dtype=torch.int64, device=dense.device)
        e = [bag(ids[:, f].contiguous(), offsets) for f, bag in enumerate(self.emb)]
        T = torch.stack([h] + e, dim=1)
        Z = torch.bmm(T, T.transpose(1, 2))
        z = torch.cat([h, Z[:, self.li, self.lj]], dim=1)
        return self.top(z).squeeze(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tsv")
    ap.add_argument("--rshard", help="read a .rshard (made with --spec) through python/rectrain instead of --tsv")
    ap.add_argument("--synthetic", type=int, default=0, help="draw N rows instead of reading --tsv")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--batch", type=int, default=0, help="batch size (default: the config's)")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"],
                    help="bf16: the forward under torch.autocast(bfloat16), fp32 master weights")
    ap.add_argument("--warmup", type=int, default=-1, help="untimed first steps (default: 10 on cuda, 0 on cpu)")
    ap.add_argument("--spec", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--holdout", type=float, default=0.1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=0, help="stop after N steps (speed runs)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if not a.tsv and not a.synthetic and not a.rshard:
        sys.exit("give --tsv FILE, --rshard FILE or --synthetic N")
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("dev/torch_dlrm.py: --device cuda, but this torch sees no GPU")
    dev = torch.device(a.device)
    warmup = a.warmup if a.warmup >= 0 else (10 if a.device == "cuda" else 0)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    cfg = json.load(open(a.config))
    if cfg["model"] != "dlrm" or cfg.get("interaction", {}).get("kind", "dot") != "dot":
        sys.exit("this peer trains DLRM with dot interaction")
    opt = cfg.get("optimizer", {})
    if opt.get("dense", {}).get("kind", "sgd") != "sgd" or opt.get("sparse", {}).get("kind", "sgd") != "sgd":
        sys.exit("this peer uses SGD for both dense and sparse parameters, as dlrm_s_pytorch.py does")
    lr_d, lr_s = opt.get("dense", {}).get("lr", 0.1), opt.get("sparse", {}).get("lr", 0.1)
    B = a.batch or cfg.get("train", {}).get("batch_size", 2048)
    epochs = cfg.get("train", {}).get("epochs", 1)
    dim = cfg["embedding"]["dim"]

    t0 = time.time()
    divisors = spec_divisors(a.spec)
    if a.synthetic:
        rng = np.random.default_rng(a.seed)
        n = a.synthetic
        y = (rng.random(n) < 0.25).astype(np.float32)
        x = np.log1p(rng.integers(0, 100, size=(n, 13)).astype(np.float32))
        u = rng.random((n, len(divisors)))
        s = np.minimum((np.asarray(divisors, dtype=np.float64) * u ** (4.0 / 3.0)).astype(np.int64),
                       np.asarray(divisors, dtype=np.int64) - 1)
    elif a.rshard:
        y, x, s = load_rshard(a.rshard)
    else:
        y, x, s = load_tsv(a.tsv, divisors)
    N = len(y)
    n_eval = int(math.floor(N * a.holdout)) if a.holdout > 0 else 0
    n_train = N - n_eval
    print(f"torch peer: read {N} rows in {time.time() - t0:.1f} s", file=sys.stderr)

    model = DLRM(x.shape[1], divisors, dim, cfg["bottom_mlp"], cfg["top_mlp"]).to(dev)
    dense_p = [p for n, p in model.named_parameters() if not n.startswith("emb")]
    sparse_p = [p for n, p in model.named_parameters() if n.startswith("emb")]
    opt_d = torch.optim.SGD(dense_p, lr=lr_d)
    opt_s = torch.optim.SGD(sparse_p, lr=lr_s)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    yt, xt, st = torch.from_numpy(y).to(dev), torch.from_numpy(x).to(dev), torch.from_numpy(s).to(dev)

    def sync():
        if a.device == "cuda":
            torch.cuda.synchronize()

    steps, rows, t_train = 0, 0, 0.0
    for ep in range(epochs):
        t1 = time.time()
        for r0 in range(0, n_train, B):
            if steps == warmup and warmup > 0:  # the timed part starts here
                sync()
                t1, rows = time.time(), 0
            r1 = min(r0 + B, n_train)
            with torch.autocast(a.device, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
                logits = model(xt[r0:r1], st[r0:r1])
            loss = loss_fn(logits.float(), yt[r0:r1])
            opt_d.zero_grad()
            opt_s.zero_grad()
            loss.backward()
            opt_d.step()
            opt_s.step()
            steps += 1
            rows += r1 - r0
            if a.steps and steps >= a.steps:
                break
        sync()
        t_train += time.time() - t1
        if a.steps and steps >= a.steps:
            break
    sps = rows / t_train
    out = {"peer": "pytorch " + torch.__version__, "device": a.device, "rows": rows, "steps": steps, "batch": B,
           "threads": a.threads,
           "precision": a.precision, "seconds": round(t_train, 3), "samples_per_s": round(sps, 1),
           "loss": float(loss.detach())}
    if n_eval:
        with torch.no_grad():
            preds = []
            for r0 in range(n_train, N, 8192):
                preds.append(model(xt[r0:r0 + 8192], st[r0:r0 + 8192]).cpu().numpy())
        p = np.concatenate(preds)
        out["auc"] = round(float(roc_auc_score(y[n_train:], p)), 6)
        out["eval_rows"] = n_eval
    print(f"torch peer: {rows} rows in {t_train:.2f} s: {sps:.0f} samples/s" +
          (f", auc {out['auc']:.5f}" if n_eval else ""), file=sys.stderr)
    if a.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
