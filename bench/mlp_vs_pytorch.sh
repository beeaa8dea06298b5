#!/bin/sh
# rectrain vs PyTorch (Debian's python3-torch) on the dense layers alone, in one run: every MLP
# of CONFIG timed by `rectrain bench mlp`, then the same stacks by dev/torch_mlp.py at the same
# batch size, thread count, passes and repetitions. Run it several times: the machine is noisy.
# Usage: bench/mlp_vs_pytorch.sh [CONFIG=configs/dlrm_kaggle.json] [THREADS=2]   (from the repo root)
set -eu
CONFIG=${1:-configs/dlrm_kaggle.json}; THREADS=${2:-2}
PY=/usr/bin/python3
$PY -c 'import torch' 2>/dev/null || { echo "$0: the PyTorch peer needs Debian's python3-torch: apt-get install python3-torch" >&2; exit 2; }
# Debian's torch does its matmuls through libblas.so.3: the reference BLAS unless OpenBLAS is
# installed (3 GFLOP/s against ~130 on this machine), and OpenBLAS 0.3.21 takes this CPU for a
# Prescott unless told its core type.
[ -e /usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3 ] || {
    echo "$0: the PyTorch peer would run on the reference BLAS: apt-get install libopenblas0-pthread" >&2; exit 2; }
export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-SkylakeX}
OUT=$(mktemp "${TMPDIR:-/tmp}/rectrain-mlp-XXXXXX"); trap 'rm -f "$OUT"' EXIT
build/rectrain bench mlp --config "$CONFIG" --threads "$THREADS" --json > "$OUT"
head -n -1 "$OUT"
tail -n 1 "$OUT" | $PY dev/torch_mlp.py
