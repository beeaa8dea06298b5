#!/bin/sh
# rectrain vs PyTorch (Debian's python3-torch) on the dense layers alone, in one run: every MLP
# of CONFIG timed by `rectrain bench mlp`, then the same stacks by dev/torch_mlp.py at the same
# batch size, thread count, passes and repetitions. Run it several times: the machine is noisy.
# Usage: bench/mlp_vs_pytorch.sh [CONFIG=configs/dlrm_kaggle.json] [THREADS=2]   (from the repo root)
set -eu
CONFIG=${1:-configs/dlrm_kaggle.json}; THREADS=${2:-2}
. bench/torch_peer.sh
need_torch
need_blas
OUT=$(mktemp "${TMPDIR:-/tmp}/rectrain-mlp-XXXXXX"); trap 'rm -f "$OUT"' EXIT
build/rectrain bench mlp --config "$CONFIG" --threads "$THREADS" --json > "$OUT"
head -n -1 "$OUT"
tail -n 1 "$OUT" | $PY dev/torch_mlp.py
