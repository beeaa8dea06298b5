#!/usr/bin/python3
"""PyTorch peer of `rectrain bench mlp`: the same MLPs, timed the same way.

Reads the JSON summary line of `rectrain bench mlp --json` (stdin or --bench FILE) and, for
every MLP in it, builds the same stack (torch.nn.Linear per layer, ReLU after every layer but
the last, and after the last when "last_relu"), then times, on random inputs at the same batch
size and thread count: the forward, and forward + backward (weight gradients, and the input
gradient when "input_grad"), `steps` passes per repetition, median of `reps` repetitions,
after one warm-up repetition. Prints a table of both, and with --json one JSON line.

  build/rectrain bench mlp --json | tail -n 1 | /usr/bin/python3 dev/torch_mlp.py [--json]
"""
import argparse
import json
import statistics
import sys
import time

import torch


def build(sizes, last_relu):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2 or last_relu:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def median_time(fn, steps, reps):
    fn()  # warm-up (primitive creation)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(steps):
            fn()
        times.append((time.perf_counter() - t0) / steps)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", help="file with the `rectrain bench mlp --json` line (default: stdin)")
    ap.add_argument("--json", action="store_true", help="print a JSON summary as the last line")
    a = ap.parse_args()
    text = open(a.bench).read() if a.bench else sys.stdin.read()
    lines = [l for l in text.splitlines() if l.startswith("{")]
    if not lines:
        sys.exit("torch_mlp.py: no JSON line from `rectrain bench mlp --json` in the input")
    rt = json.loads(lines[-1])
    B, steps, reps = rt["batch"], rt["steps"], rt["reps"]
    torch.set_num_threads(rt["threads"])
    torch.manual_seed(1)
    rows, total_pt, total_rt = [], 0.0, 0.0
    for m in rt["mlps"]:
        net = build(m["sizes"], m["last_relu"])
        x = torch.rand(B, m["sizes"][0]) * 2 - 1
        x.requires_grad_(m["input_grad"])
        dy = torch.rand(B, m["sizes"][-1]) * 2 - 1

        def fwd():
            with torch.no_grad():
                net(x)

        def fwdbwd():
            net.zero_grad(set_to_none=False)
            if x.grad is not None:
                x.grad = None
            net(x).backward(dy)

        t_f, t_fb = median_time(fwd, steps, reps), median_time(fwdbwd, steps, reps)
        total_pt += t_fb
        total_rt += m["fwdbwd_ms"] / 1e3
        rows.append((m["name"], "-".join(map(str, m["sizes"])), m["fwd_ms"], t_f * 1e3, m["fwdbwd_ms"], t_fb * 1e3))
    print(f"rectrain vs PyTorch {torch.__version__}: {rt['model']}, batch {B}, {rt['threads']} threads, "
          f"{steps} passes x {reps} reps (median ms per batch)")
    print(f"  {'mlp':<10} {'sizes':<24} {'fwd rectrain':>12} {'fwd torch':>10} {'ratio':>6} "
          f"{'f+b rectrain':>12} {'f+b torch':>10} {'ratio':>6}")
    for name, sizes, rf, pf, rfb, pfb in rows:
        print(f"  {name:<10} {sizes:<24} {rf:12.3f} {pf:10.3f} {pf / rf:5.2f}x {rfb:12.3f} {pfb:10.3f} {pfb / rfb:5.2f}x")
    print(f"  all MLPs, forward + backward: rectrain {B / total_rt:.0f} samples/s, PyTorch {B / total_pt:.0f} samples/s, "
          f"ratio {total_pt / total_rt:.2f}x")
    if a.json:
        print(json.dumps({"model": rt["model"], "batch": B, "threads": rt["threads"], "torch": torch.__version__,
                          "rectrain_samples_per_s": round(B / total_rt, 1), "torch_samples_per_s": round(B / total_pt, 1),
                          "ratio": round(total_pt / total_rt, 3),
                          "mlps": [{"name": r[0], "torch_fwd_ms": round(r[3], 4), "torch_fwdbwd_ms": round(r[5], 4)}
                                   for r in rows]}))


if __name__ == "__main__":
    main()
