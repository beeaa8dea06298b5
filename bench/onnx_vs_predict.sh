#!/bin/sh
# ONNX Runtime vs `rectrain predict` on the same rows, for every model kind the ONNX export
# writes: ROWS generated multi-hot rows (MLPerf DLRMv2 bag sizes, tables scaled by SCALE),
# prepared with the vocabulary spec, one short training run per model, `export --format onnx`,
# `predict --feed-out` (the rows predict scores, as the graph's inputs), then dev/onnx_check.py:
# onnx.checker with full_check, every row's probability from ONNX Runtime against predict's
# (max absolute difference, must be <= 1e-5), ONNX Runtime's rows/s (batches of 4096) and the
# latency of one 1-row request on the CPU, beside predict's own rows/s (which includes
# reading the shard and printing the probabilities).
# Models: dlrm_small (dot, sum), dlrm cat + mean pooling, dcn_small, deepfm_small (mean pooling),
# wide_deep_small. Not here: DLRM's dot interaction with "self": true, whose squared norms
# (1e4 after 60 steps) make fp32 itself the limit: predict and the graph were each 1.1e-5 from
# the float64 result and 1.2e-5 from each other (docs/commands.md).
# Usage: bench/onnx_vs_predict.sh [ROWS=100000] [SCALE=0.001] [STEPS=60]   (from the repo root)
# The venv with onnx, onnxruntime and numpy (PyPI) is made on first use in
# ${REC_ONNX_VENV:-$HOME/.cache/rectrain/onnx-venv}. ORT_THREADS=N pins ONNX Runtime's threads.
set -eu
ROWS=${1:-100000}; SCALE=${2:-0.001}; STEPS=${3:-60}
R=build/rectrain
VENV=${REC_ONNX_VENV:-$HOME/.cache/rectrain/onnx-venv}
if ! "$VENV/bin/python" -c 'import onnx, onnxruntime, numpy' 2>/dev/null; then
    echo "== making $VENV (pip install onnx onnxruntime numpy)" >&2
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q onnx onnxruntime numpy
fi
PY=$VENV/bin/python
[ -x "$R" ] || { echo "onnx_vs_predict: $R missing; build first (README)" >&2; exit 1; }
W=$(mktemp -d "${TMPDIR:-/tmp}/rectrain-onnx-XXXXXX"); trap 'rm -rf "$W"' EXIT
export REC_PROGRESS=0

echo "== $ROWS multi-hot rows, scale $SCALE, criteo_vocab spec" >&2
$R gen --rows "$ROWS" --multi-hot --scale "$SCALE" --seed 7 --out "$W/d.tsv" >/dev/null 2>&1
$R prep --spec configs/criteo_vocab.json --in "$W/d.tsv" --out "$W/d.rshard" >/dev/null 2>&1
# DLRM with the cat interaction and MEAN pooling, and DeepFM with MEAN pooling, from the small configs
sed -e 's/"name": "dlrm_small"/"name": "dlrm_cat_mean"/' -e 's/"pooling": "sum"/"pooling": "mean"/' \
    -e 's/"kind": "dot"/"kind": "cat"/' configs/dlrm_small.json > "$W/dlrm_cat_mean.json"
sed -e 's/"name": "deepfm_small"/"name": "deepfm_mean"/' -e 's/"pooling": "sum"/"pooling": "mean"/' \
    configs/deepfm_small.json > "$W/deepfm_mean.json"
fail=0
printf '%-16s %8s %13s %11s %15s %11s\n' model rows max_abs_diff "ort rows/s" "predict rows/s" "latency ms" > "$W/table"
for cfg in configs/dlrm_small.json "$W/dlrm_cat_mean.json" configs/dcn_small.json "$W/deepfm_mean.json" \
           configs/wide_deep_small.json; do
    name=$(basename "$cfg" .json)
    echo "== $name: train $STEPS steps, export, predict, onnxruntime" >&2
    $R train --config "$cfg" --data "$W/d.rshard" --steps "$STEPS" --ckpt "$W/$name" >/dev/null 2>&1
    $R export --ckpt "$W/$name" --format onnx --out "$W/$name.onnx"
    $R predict --ckpt "$W/$name" --data "$W/d.rshard" --out "$W/$name.tsv" --feed-out "$W/$name.feed" --json \
        2>/dev/null | tail -n 1 > "$W/$name.pj"
    if ! $PY dev/onnx_check.py "$W/$name.onnx" --feed "$W/$name.feed" --preds "$W/$name.tsv" \
            ${ORT_THREADS:+--threads "$ORT_THREADS"} --json > "$W/$name.out"; then
        fail=1
    fi
    grep -v '^{' "$W/$name.out" >&2
    tail -n 1 "$W/$name.out" | $PY -c 'import json, sys; j = json.load(sys.stdin); p = json.load(open(sys.argv[2]))
print("%-16s %8d %13.3g %11.0f %15.0f %11.3f" % (sys.argv[1], j["rows"], j["max_abs_diff"], j["rows_per_s"], p["samples_per_s"], j["latency_ms"]))' \
        "$name" "$W/$name.pj" >> "$W/table"
done
echo
cat "$W/table"
[ "$fail" = 0 ] && echo "onnx_vs_predict: every model within 1e-5 of predict" || echo "onnx_vs_predict: FAILED" >&2
exit "$fail"
