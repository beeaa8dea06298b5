#!/bin/sh
# The PyTorch peer (dev/torch_dlrm.py, facebookresearch/dlrm's model and pipeline) fed two ways
# on the same rows: from its own TSV parsing, and from `rectrain prep`'s shard through the
# Python reader (python/rectrain). Same seed, holdout and config; prints both AUCs and their
# difference (docs/python.md). Needs a python with torch, numpy and scikit-learn (REC_PEER_PY).
# Usage: bench/reader_vs_tsv.sh [ROWS=200000] [SCALE=0.05]   (from the repo root, after make)
set -eu
ROWS=${1:-200000}; SCALE=${2:-0.05}
R=${REC_BIN:-build/rectrain}
. bench/torch_peer.sh
need_torch
need_sklearn
W=$(mktemp -d "${TMPDIR:-/tmp}/rectrain-reader-XXXXXX"); trap 'rm -rf "$W"' EXIT
export REC_PROGRESS=0 PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" REC_LIB="${REC_LIB:-$PWD/build/librectrain_reader.so}"
$R gen --rows "$ROWS" --scale "$SCALE" --seed 3 --out "$W/d.tsv" >/dev/null
scaled_spec "$SCALE" "$W/s.json"
$R prep --spec "$W/s.json" --in "$W/d.tsv" --out "$W/d.rshard" >/dev/null 2>&1
for src in tsv rshard; do
    [ $src = tsv ] && in="--tsv $W/d.tsv" || in="--rshard $W/d.rshard"
    $PY dev/torch_dlrm.py $in --spec "$W/s.json" --config configs/dlrm_kaggle.json --holdout 0.1 --json > "$W/$src.json"
done
a=$(val auc "$W/tsv.json"); b=$(val auc "$W/rshard.json")
printf '%-40s %s\n%-40s %s\n%-40s %s\n' "peer AUC, own TSV parsing" "$a" "peer AUC, rectrain shard via python/" "$b" \
    "difference" "$(echo "$a $b" | awk '{printf "%+.6f", $2 - $1}')"
