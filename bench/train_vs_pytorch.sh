#!/bin/sh
# rectrain vs PyTorch (Debian's python3-torch) on the same generated rows, in one run:
#  1. quality: DLRM (configs/dlrm_kaggle.json: SGD, batch 2048) trained one epoch on the first 90%
#     of ROWS generated rows (tables scaled by SCALE), AUC on the last 10%, beside the oracle AUC
#     of the rows' true click probabilities;
#  2. speed: the Kaggle-shaped DLRM with the Kaggle table sizes, STEPS steps at batch 2048 on 2
#     threads, samples/s of both and the ratio.
# Usage: bench/train_vs_pytorch.sh [ROWS=1000000] [SCALE=0.05] [STEPS=100]   (from the repo root)
# CHART=FILE.png: also both throughputs as a bar chart.
set -eu
ROWS=${1:-1000000}; SCALE=${2:-0.05}; STEPS=${3:-100}
R=build/rectrain
. bench/torch_peer.sh
need_torch
need_sklearn
need_blas
W=$(mktemp -d "${TMPDIR:-/tmp}/rectrain-vs-torch-XXXXXX"); trap 'rm -rf "$W"' EXIT
export REC_PROGRESS=0


echo "== quality: $ROWS rows, scale $SCALE, dlrm_kaggle config, 1 epoch, holdout 10%" >&2
quality_rows "$ROWS" "$SCALE" "$W"
$R train --config configs/dlrm_kaggle.json --data "$W/q.rshard" --holdout 0.1 --oracle "$W/q.prob" --threads 2 --json > "$W/q.rt"
$PY dev/torch_dlrm.py --tsv "$W/q.tsv" --spec "$W/q.json" --config configs/dlrm_kaggle.json --holdout 0.1 --threads 2 --json > "$W/q.pt"

echo "== speed: Kaggle table sizes, $STEPS steps at batch 2048, 2 threads" >&2
$R gen --rows 400000 --scale 1 --seed 2 --out "$W/s.tsv" >/dev/null
scaled_spec 1 "$W/s.json"
$R prep --spec "$W/s.json" --in "$W/s.tsv" --out "$W/s.rshard" >/dev/null 2>&1
$R train --config configs/dlrm_kaggle.json --data "$W/s.rshard" --steps "$STEPS" --threads 2 --json > "$W/s.rt"
$PY dev/torch_dlrm.py --tsv "$W/s.tsv" --spec "$W/s.json" --config configs/dlrm_kaggle.json --holdout 0 --steps "$STEPS" --threads 2 --json > "$W/s.pt"

rt_auc=$(val auc "$W/q.rt"); pt_auc=$(val auc "$W/q.pt"); oracle=$(val oracle_auc "$W/q.rt")
rt_sps=$(val samples_per_s "$W/s.rt"); pt_sps=$(val samples_per_s "$W/s.pt")
printf '\n%-28s %12s %12s\n' "" rectrain pytorch
printf '%-28s %12s %12s   (oracle %s)\n' "test AUC (same rows)" "$rt_auc" "$pt_auc" "$oracle"
printf '%-28s %12s %12s   (ratio %s)\n' "samples/s, Kaggle DLRM" "$rt_sps" "$pt_sps" "$(echo "$rt_sps $pt_sps" | awk '{printf "%.2f", $1 / $2}')"
echo "{\"rectrain_auc\": $rt_auc, \"pytorch_auc\": $pt_auc, \"oracle_auc\": $oracle, \"auc_diff\": $(echo "$rt_auc $pt_auc" | awk '{printf "%.6f", $1 - $2}'), \"rectrain_samples_per_s\": $rt_sps, \"pytorch_samples_per_s\": $pt_sps}"
if [ -n "${CHART:-}" ]; then
    printf 'model\trectrain\tPyTorch\nKaggle DLRM, batch 2048\t%s\t%s\n' "$rt_sps" "$pt_sps" > "$W/chart.tsv"
    $R plot --table "$W/chart.tsv" --out "$CHART" --title "Training throughput, 2 threads" --ylabel "samples/s"
fi
