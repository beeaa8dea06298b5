#!/usr/bin/python3
"""Golden values of the four rectrain models (include/rectrain/model.h) from PyTorch.

Builds small DLRM (dot, dot + self-interaction with weighted bags, cat), DCN, DeepFM and
Wide&Deep models in PyTorch exactly as model.h defines them, with embeddings as
torch.nn.EmbeddingBag fed offsets/indices, and writes tests/data/golden_v1.bin: per model
case its config, 11 batches, the initial parameters (by their model.h names), the step-0
logits, loss and every parameter's gradient, and the 10 losses of training on batches 1..10
under three optimizer combinations. tests/test_golden.c rebuilds each model in C, loads the
parameters and compares.

Run (Debian's python3-torch 1.13, not the pyenv python):
    /usr/bin/python3 dev/golden_models.py            # writes tests/data/golden_v1.bin
The output is deterministic (same bytes on every run: float32, one thread, fixed seeds).

Semantics held to (model.h, embed.h, nn.h):
  * pooling: EmbeddingBag mode 'sum' or 'mean' (empty bag -> zeros, no gradient);
    per_sample_weights only with 'sum' (torch supports no other).
  * DLRM: bottom MLP with ReLU after every layer; dot interaction T = [h; e] (B, F+1, E),
    Z = T T^T, out = [h, Z[li, lj]] in dlrm_s_pytorch.py's li/lj order; top MLP with ReLU
    after every layer but the last.
  * DCN: x0 = [x | e flat]; x_{l+1} = x0 * (x_l . w_l) + b_l + x_l; deep MLP with ReLU after
    every layer; logit = final([x_L | d]).
  * DeepFM: first = sum_f pooled lin_f + dense_linear(x); fm = 1/2 sum_e[(sum_f e)^2 -
    sum_f e^2]; deep([x | e flat]) with the last layer linear. Wide&Deep: DeepFM without fm.
  * loss: mean BCE-with-logits.
  * optimizers (each combination starts from the same initial parameters; the loss of a step
    is computed before its update):
      opt_sgd:     dense torch.optim.SGD lr 0.1      + sparse SGD lr 0.1
      opt_adagrad: dense torch.optim.Adagrad lr 0.05 + sparse torch.optim.Adagrad lr 0.05
                   (eps 1e-10; on the dense table gradient it leaves untouched rows unchanged,
                   which equals torch's sparse-gradient Adagrad and embed.h's ADAGRAD)
      opt_adam:    dense torch.optim.Adam lr 0.01 + sparse row-wise Adagrad lr 0.05 by hand
                   (FBGEMM EXACT_ROWWISE_ADAGRAD: s[r] += mean_e g^2;
                   w[r] -= lr g / (sqrt(s[r]) + 1e-8), rows a bag touched), with the
                   schedule warmup 3, decay_start 5, decay_steps 4, power 2, end_scale 0.1
                   (rec_lr_scale's formula as a torch LambdaLR on both optimizers).

Binary format "RECGOLD1" version 1 (little-endian; tests/golden.h reads it):
    char magic[8] = "RECGOLD1"; u32 version = 1; u32 n_records;
    n_records times:
        u16 name_len; char name[name_len] (no NUL);
        u8 dtype (0 f32, 1 i64, 2 f64, 3 u8 text); u8 ndim; i64 dims[ndim];
        data: prod(dims) elements of the dtype, raw
Records (CASE one of the names in "cases", OPT one of the names in "opts"):
    cases                        u8 text, case names separated by '\\n'
    opts                         u8 text, optimizer combo names separated by '\\n'
    CASE/config                  i64 (11): kind (0 dlrm, 1 dcn, 2 deepfm, 3 wide_deep), Dn, F,
                                 E, pooling (0 sum, 1 mean), interaction (0 dot, 1 cat),
                                 self_interaction, weighted bags (0/1), cross_layers, B,
                                 n_batches
    CASE/rows                    i64 (F) table rows
    CASE/bottom, CASE/top, CASE/deep   i64 (n) layer widths as model.h (may be empty)
    CASE/batchK/label            f32 (B)            K = 0 .. n_batches-1
    CASE/batchK/dense            f32 (B, Dn)
    CASE/batchK/sparseF/offsets  i64 (B+1)
    CASE/batchK/sparseF/indices  i64 (nnz)
    CASE/batchK/sparseF/weights  f32 (nnz)          weighted cases only
    CASE/param/NAME              f32, NAME as model.h ("emb.0.weight", "bottom.1.bias", ...)
    CASE/step0/logits            f32 (B)            on batch 0
    CASE/step0/loss              f32 (1)
    CASE/bf16/step0/logits       f32 (B)  the same forward under torch.autocast("cpu", bfloat16):
    CASE/bf16/step0/loss         f32 (1)  linear/matmul/bmm in bf16, the loss on the fp32 logits
    CASE/grad/NAME               f32, same shape as the parameter (tables: dense (R, E) grads)
    CASE/OPT/config              f64 (9): dense kind (0 SGD, 1 Adagrad, 2 Adam), dense lr,
                                 sparse kind (0 SGD, 1 Adagrad, 2 row-wise Adagrad), sparse
                                 lr, warmup_steps, decay_start, decay_steps, power, end_scale
    CASE/OPT/lr_scales           f64 (10) the schedule's scale at steps 0..9 (LambdaLR's)
    CASE/OPT/losses              f32 (10) losses of the steps on batches 1..10
"""
import os
import struct
import sys
import warnings

import numpy as np
import torch
import torch.nn.functional as Fn

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)

DN, ROWS, E, B = 3, [7, 1, 13, 5], 4, 8
N_BATCHES = 11
KINDS = {"dlrm": 0, "dcn": 1, "deepfm": 2, "wide_deep": 3}

# name, kind, pooling, interaction, self_interaction, weighted, layers, seed
CASES = [
    dict(name="dlrm_dot", kind="dlrm", pooling="sum", interaction="dot", self_int=0,
         weighted=0, bottom=[8, 4], top=[8, 1], deep=[], cross=0, seed=101),
    dict(name="dlrm_dot_self_w", kind="dlrm", pooling="sum", interaction="dot", self_int=1,
         weighted=1, bottom=[8, 4], top=[8, 1], deep=[], cross=0, seed=102),
    dict(name="dlrm_cat_mean", kind="dlrm", pooling="mean", interaction="cat", self_int=0,
         weighted=0, bottom=[8, 4], top=[8, 1], deep=[], cross=0, seed=103),
    dict(name="dcn", kind="dcn", pooling="sum", interaction="dot", self_int=0,
         weighted=0, bottom=[], top=[], deep=[8], cross=2, seed=104),
    dict(name="deepfm_mean", kind="deepfm", pooling="mean", interaction="dot", self_int=0,
         weighted=0, bottom=[], top=[], deep=[8, 1], cross=0, seed=105),
    dict(name="wide_deep", kind="wide_deep", pooling="sum", interaction="dot", self_int=0,
         weighted=0, bottom=[], top=[], deep=[8, 1], cross=0, seed=106),
]

# name, dense kind, dense lr, sparse kind, sparse lr, schedule
OPTS = [
    dict(name="opt_sgd", dense=0, dense_lr=0.1, sparse=0, sparse_lr=0.1,
         sched=(0, 0, 0, 2.0, 0.0)),
    dict(name="opt_adagrad", dense=1, dense_lr=0.05, sparse=1, sparse_lr=0.05,
         sched=(0, 0, 0, 2.0, 0.0)),
    dict(name="opt_adam", dense=2, dense_lr=0.01, sparse=2, sparse_lr=0.05,
         sched=(3, 5, 4, 2.0, 0.1)),
]
TRAIN_STEPS = N_BATCHES - 1


def lr_scale(sched, t):
    """rec_lr_scale (model.h) at optimizer step t."""
    warmup, decay_start, decay_steps, power, end_scale = sched
    if t + 1 <= warmup:
        return (t + 1) / warmup
    if decay_steps > 0 and decay_start <= t < decay_start + decay_steps:
        return max(end_scale, ((decay_start + decay_steps - t) / decay_steps) ** power)
    if decay_steps > 0 and t >= decay_start + decay_steps:
        return end_scale
    return 1.0


class Cross(torch.nn.Module):
    """One DCN cross layer (Wang et al. 2017, eq. 3): y = x0 * (x . w) + b + x."""

    def __init__(self, d):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(d))
        self.bias = torch.nn.Parameter(torch.zeros(d))

    def forward(self, x0, x):
        return x0 * (x @ self.weight).unsqueeze(1) + self.bias + x


def mlp(sizes):
    return torch.nn.ModuleList(
        [torch.nn.Linear(sizes[i], sizes[i + 1]) for i in range(len(sizes) - 1)])


def run_mlp(layers, x, last_relu):
    for i, l in enumerate(layers):
        x = l(x)
        if last_relu or i + 1 < len(layers):
            x = torch.relu(x)
    return x


class Model(torch.nn.Module):
    """The four models of model.h; parameter names are model.h's."""

    def __init__(self, c):
        super().__init__()
        self.c = c
        F = len(ROWS)
        self.emb = torch.nn.ModuleList(
            [torch.nn.EmbeddingBag(r, E, mode=c["pooling"]) for r in ROWS])
        kind = c["kind"]
        if kind == "dlrm":
            self.bottom = mlp([DN] + c["bottom"])
            if c["interaction"] == "dot":
                d = E + (F + 1) * F // 2 + ((F + 1) if c["self_int"] else 0)
            else:
                d = E + F * E
            self.top = mlp([d] + c["top"])
        elif kind == "dcn":
            d0 = DN + F * E
            self.cross = torch.nn.ModuleList([Cross(d0) for _ in range(c["cross"])])
            self.deep = mlp([d0] + c["deep"])
            self.final = torch.nn.Linear(d0 + c["deep"][-1], 1)
        else:
            self.lin = torch.nn.ModuleList(
                [torch.nn.EmbeddingBag(r, 1, mode=c["pooling"]) for r in ROWS])
            self.deep = mlp([DN + F * E] + c["deep"])
            self.dense_linear = torch.nn.Linear(DN, 1)

    def pooled(self, tables, batch):
        out = []
        for f, t in enumerate(tables):
            sp = batch["sparse"][f]
            w = sp.get("weights")
            out.append(t(sp["indices"], sp["offsets"][:-1],
                         per_sample_weights=w))
        return torch.stack(out, 1)  # (B, F, dim)

    def forward(self, batch):
        c, x = self.c, batch["dense"]
        e = self.pooled(self.emb, batch)  # (B, F, E)
        Bn, F = e.shape[0], e.shape[1]
        if c["kind"] == "dlrm":
            h = run_mlp(self.bottom, x, last_relu=True)  # (B, E)
            if c["interaction"] == "dot":
                T = torch.cat([h.unsqueeze(1), e], 1)  # (B, F+1, E)
                Z = torch.bmm(T, T.transpose(1, 2))
                off = 1 if c["self_int"] else 0
                li = [i for i in range(F + 1) for j in range(i + off)]
                lj = [j for i in range(F + 1) for j in range(i + off)]
                z = torch.cat([h, Z[:, li, lj]], 1)
            else:
                z = torch.cat([h, e.reshape(Bn, F * E)], 1)
            return run_mlp(self.top, z, last_relu=False).squeeze(1)
        x0 = torch.cat([x, e.reshape(Bn, F * E)], 1)  # (B, D0)
        if c["kind"] == "dcn":
            xl = x0
            for layer in self.cross:
                xl = layer(x0, xl)
            d = run_mlp(self.deep, x0, last_relu=True)
            return self.final(torch.cat([xl, d], 1)).squeeze(1)
        first = self.pooled(self.lin, batch).sum((1, 2)) + self.dense_linear(x).squeeze(1)
        deep = run_mlp(self.deep, x0, last_relu=False).squeeze(1)
        logit = first + deep
        if c["kind"] == "deepfm":
            fm = 0.5 * (e.sum(1) ** 2 - (e ** 2).sum(1)).sum(1)
            logit = logit + fm
        return logit

    def sparse_params(self):
        ps = list(self.emb.parameters())
        if hasattr(self, "lin"):
            ps += list(self.lin.parameters())
        return ps

    def dense_params(self):
        sp = {id(p) for p in self.sparse_params()}
        return [p for p in self.parameters() if id(p) not in sp]


def init_params(model, rs):
    """Draws every parameter from rs in named_parameters order (any distribution will do:
    the fixture stores the values)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("emb.") or name.startswith("lin."):
                v = rs.normal(0.0, 0.3, size=p.shape)
            elif p.dim() == 2:
                v = rs.normal(0.0, 1.0 / np.sqrt(p.shape[1]), size=p.shape)
            elif name.startswith("cross."):
                v = rs.normal(0.0, 0.2, size=p.shape)
            else:
                v = rs.normal(0.0, 0.1, size=p.shape)
            p.copy_(torch.from_numpy(v.astype(np.float32)))


def make_batch(rs, k, weighted):
    """B rows: labels, dense N(0, 1), and per feature bags of 0..3 ids with (forced) an empty
    bag, a bag holding one id twice, and ids repeated across bags (small tables make those
    likely; checked below)."""
    F = len(ROWS)
    label = rs.randint(0, 2, size=B).astype(np.float32)
    dense = rs.normal(0.0, 1.0, size=(B, DN)).astype(np.float32)
    sparse = []
    for f in range(F):
        bags = []
        for b in range(B):
            n = int(rs.randint(0, 4))
            bags.append([int(i) for i in rs.randint(0, ROWS[f], size=n)])
        empty_row, dup_row = (f + k) % B, (f + k + 3) % B
        bags[empty_row] = []
        i = int(rs.randint(0, ROWS[f]))
        bags[dup_row] = [i, int(rs.randint(0, ROWS[f])), i]
        other = (dup_row + 1) % B
        if other == empty_row:
            other = (other + 1) % B
        bags[other] = bags[other][:2] + [i]
        flat = [i for bag in bags for i in bag]
        across = any(set(bags[a]) & set(bags[b2]) for a in range(B) for b2 in range(a + 1, B))
        assert across and len(flat) > len(set(flat)), (k, f)
        offsets = np.cumsum([0] + [len(bag) for bag in bags]).astype(np.int64)
        sp = {"offsets": offsets, "indices": np.array(flat, dtype=np.int64)}
        if weighted:
            sp["weights"] = rs.uniform(0.25, 1.5, size=len(flat)).astype(np.float32)
        sparse.append(sp)
    return {"label": label, "dense": dense, "sparse": sparse}


def to_torch(batch):
    return {
        "label": torch.from_numpy(batch["label"]),
        "dense": torch.from_numpy(batch["dense"]),
        "sparse": [{k: torch.from_numpy(v) for k, v in sp.items()} for sp in batch["sparse"]],
    }


def touched_rows(batch, f):
    sp = batch["sparse"][f]
    t = torch.zeros(ROWS[f], dtype=torch.bool)
    t[sp["indices"]] = True
    return t


class Writer:
    def __init__(self):
        self.records = []

    def add(self, name, arr, dtype=None):
        if isinstance(arr, torch.Tensor):
            arr = arr.detach().numpy()
        arr = np.asarray(arr, dtype=dtype)
        code = {np.dtype(np.float32): 0, np.dtype(np.int64): 1, np.dtype(np.float64): 2,
                np.dtype(np.uint8): 3}[arr.dtype]
        if arr.ndim == 0:
            arr = arr.reshape(1)
        self.records.append((name, code, arr))

    def text(self, name, s):
        self.add(name, np.frombuffer(s.encode(), dtype=np.uint8))

    def bytes(self):
        out = [b"RECGOLD1", struct.pack("<II", 1, len(self.records))]
        names = set()
        for name, code, arr in self.records:
            assert name not in names, name
            names.add(name)
            nb = name.encode()
            out.append(struct.pack("<H", len(nb)) + nb + struct.pack("<BB", code, arr.ndim))
            out.append(struct.pack("<%dq" % arr.ndim, *arr.shape))
            out.append(arr.astype(arr.dtype.newbyteorder("<")).tobytes())
        return b"".join(out)


def build(c):
    torch.manual_seed(0)  # the Module constructors draw; init_params overwrites everything
    model = Model(c)
    init_params(model, np.random.RandomState(c["seed"]))
    return model


def train(c, opt, init_state, batches):
    """The 10 losses of opt on batches 1..10 from init_state, and LambdaLR's scales."""
    model = build(c)
    model.load_state_dict(init_state)
    dense, sparse = model.dense_params(), model.sparse_params()
    if opt["dense"] == 0:
        dopt = torch.optim.SGD(dense, lr=opt["dense_lr"])
    elif opt["dense"] == 1:
        dopt = torch.optim.Adagrad(dense, lr=opt["dense_lr"])
    else:
        dopt = torch.optim.Adam(dense, lr=opt["dense_lr"])
    if opt["sparse"] == 0:
        sopt = torch.optim.SGD(sparse, lr=opt["sparse_lr"])
    elif opt["sparse"] == 1:
        sopt = torch.optim.Adagrad(sparse, lr=opt["sparse_lr"], eps=1e-10)
    else:
        # Row-wise Adagrad by hand; an SGD shell holds the lr the scheduler sets.
        sopt = torch.optim.SGD(sparse, lr=opt["sparse_lr"])
        rowwise_state = [torch.zeros(p.shape[0]) for p in sparse]
    lam = lambda t: lr_scale(opt["sched"], t)
    # LambdaLR warns when the row-wise shell's step() is never called; harmless here.
    warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step")
    scheds = [torch.optim.lr_scheduler.LambdaLR(o, lam) for o in (dopt, sopt)]
    losses, scales = [], []
    n_emb = len(ROWS)
    for k in range(1, N_BATCHES):
        tb = to_torch(batches[k])
        scales.append(dopt.param_groups[0]["lr"] / opt["dense_lr"])
        assert abs(scales[-1] - lam(k - 1)) < 1e-12
        assert abs(sopt.param_groups[0]["lr"] / opt["sparse_lr"] - lam(k - 1)) < 1e-12
        dopt.zero_grad()
        sopt.zero_grad()
        loss = Fn.binary_cross_entropy_with_logits(model(tb), tb["label"])
        losses.append(loss.item())
        loss.backward()
        dopt.step()
        if opt["sparse"] == 2:
            lr = sopt.param_groups[0]["lr"]
            with torch.no_grad():
                for i, p in enumerate(sparse):
                    g, s = p.grad, rowwise_state[i]
                    touched = touched_rows(tb, i % n_emb)
                    s[touched] += (g[touched] ** 2).mean(1)
                    p[touched] -= lr * g[touched] / (s[touched].sqrt() + 1e-8).unsqueeze(1)
        else:
            sopt.step()
        for s in scheds:
            s.step()
    return np.array(losses, dtype=np.float32), np.array(scales, dtype=np.float64)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    path = os.path.join(root, "tests", "data", "golden_v1.bin")
    w = Writer()
    w.text("cases", "\n".join(c["name"] for c in CASES))
    w.text("opts", "\n".join(o["name"] for o in OPTS))
    for c in CASES:
        n = c["name"]
        model = build(c)
        w.add(n + "/config", [KINDS[c["kind"]], DN, len(ROWS), E,
                              0 if c["pooling"] == "sum" else 1,
                              0 if c["interaction"] == "dot" else 1, c["self_int"],
                              c["weighted"], c["cross"], B, N_BATCHES], np.int64)
        w.add(n + "/rows", ROWS, np.int64)
        for key in ("bottom", "top", "deep"):
            w.add(n + "/" + key, np.array(c[key], dtype=np.int64))
        rs = np.random.RandomState(1000 + c["seed"])
        batches = [make_batch(rs, k, c["weighted"]) for k in range(N_BATCHES)]
        for k, bt in enumerate(batches):
            pre = "%s/batch%d/" % (n, k)
            w.add(pre + "label", bt["label"])
            w.add(pre + "dense", bt["dense"])
            for f, sp in enumerate(bt["sparse"]):
                for key in ("offsets", "indices", "weights"):
                    if key in sp:
                        w.add(pre + "sparse%d/%s" % (f, key), sp[key])
        init_state = {k: v.clone() for k, v in model.state_dict().items()}
        for name, p in model.named_parameters():
            w.add(n + "/param/" + name, p)
        tb = to_torch(batches[0])
        logits = model(tb)
        loss = Fn.binary_cross_entropy_with_logits(logits, tb["label"])
        loss.backward()
        w.add(n + "/step0/logits", logits)
        w.add(n + "/step0/loss", loss)
        for name, p in model.named_parameters():
            w.add(n + "/grad/" + name, p.grad)
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            logits16 = model(tb)
        loss16 = Fn.binary_cross_entropy_with_logits(logits16.float(), tb["label"])
        w.add(n + "/bf16/step0/logits", logits16.float())
        w.add(n + "/bf16/step0/loss", loss16)
        summary = []
        for o in OPTS:
            losses, scales = train(c, o, init_state, batches)
            w.add("%s/%s/config" % (n, o["name"]),
                  [o["dense"], o["dense_lr"], o["sparse"], o["sparse_lr"], *o["sched"]],
                  np.float64)
            w.add("%s/%s/lr_scales" % (n, o["name"]), scales)
            w.add("%s/%s/losses" % (n, o["name"]), losses)
            summary.append("%s %.4f -> %.4f" % (o["name"], losses[0], losses[-1]))
        n_params = sum(p.numel() for p in model.parameters())
        print("%-16s %4d params  step0 loss %.5f  %s" % (n, n_params, loss.item(),
                                                         "  ".join(summary)))
    data = w.bytes()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data)
    print("wrote %s: %d records, %d bytes" % (os.path.relpath(path, root), len(w.records),
                                               len(data)))


if __name__ == "__main__":
    sys.exit(main())
