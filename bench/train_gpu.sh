#!/bin/sh
# rectrain on the GPU (--device cuda), in one run on a GPU machine:
#  1. quality: the Kaggle-config DLRM trained one epoch on the first 90% of ROWS generated rows
#     (tables scaled by SCALE) on the CPU, on the GPU in fp32 and on the GPU with bf16 products:
#     test AUC of each on the last 10%;
#  2. speed: the Kaggle-shaped DLRM with the Kaggle table sizes at batch 2048 and 16384, fp32
#     and bf16: samples/s of `rectrain bench train --device cuda` (the share of step time per part
#     too) beside PyTorch's DLRM at the same precision (dev/torch_dlrm.py --device cuda, rows
#     drawn on the GPU; bf16 under torch.autocast) and the ratio.
# Usage: bench/train_gpu.sh [ROWS=1000000] [SCALE=0.05] [STEPS=200]   (from the repo root)
# REC_BIN: the rectrain binary (default build/rectrain); REC_PEER_PY: python with CUDA torch.
set -eu
ROWS=${1:-1000000}; SCALE=${2:-0.05}; STEPS=${3:-200}
R=${REC_BIN:-build/rectrain}
REC_PEER_PY=${REC_PEER_PY:-python3}   # the GPU machines' python holds torch
. bench/torch_peer.sh
need_torch_gpu
W=$(mktemp -d "${TMPDIR:-/tmp}/rectrain-train-gpu-XXXXXX"); trap 'rm -rf "$W"' EXIT
export REC_PROGRESS=0

echo "== quality: $ROWS rows, scale $SCALE, dlrm_kaggle config, 1 epoch, holdout 10%" >&2
quality_rows "$ROWS" "$SCALE" "$W"
$R train --config configs/dlrm_kaggle.json --data "$W/q.rshard" --holdout 0.1 --oracle "$W/q.prob" --json > "$W/cpu.rt"
$R train --config configs/dlrm_kaggle.json --data "$W/q.rshard" --holdout 0.1 --oracle "$W/q.prob" --device cuda \
    --json > "$W/gpu.rt"
$R train --config configs/dlrm_kaggle.json --data "$W/q.rshard" --holdout 0.1 --oracle "$W/q.prob" --device cuda \
    --precision bf16 --json > "$W/bf16.rt"

echo "== speed: Kaggle table sizes, $STEPS steps, batch 2048 and 16384" >&2
$R gen --rows 2000000 --scale 1 --seed 2 --out "$W/s.tsv" >/dev/null
scaled_spec 1 "$W/s.json"
$R prep --spec "$W/s.json" --in "$W/s.tsv" --out "$W/s.rshard" >/dev/null 2>&1
rm -f "$W/s.tsv"
for P in fp32 bf16; do
    for B in 2048 16384; do
        N=$STEPS; [ "$B" -gt 2048 ] && N=$((STEPS / 4))
        $R bench train --device cuda --precision "$P" --config configs/dlrm_kaggle.json --data "$W/s.rshard" --batch "$B" \
            --steps "$N" --reps 3 --json > "$W/$P$B.rt"
        $PY dev/torch_dlrm.py --synthetic 2000000 --spec "$W/s.json" --config configs/dlrm_kaggle.json --holdout 0 \
            --device cuda --precision "$P" --batch "$B" --steps $((N + 10)) --json > "$W/$P$B.pt"
        grep -v '^{' "$W/$P$B.rt" >&2
    done
done
cpu=$(val auc "$W/cpu.rt")
printf '\n%-34s %10s %10s %10s\n' "" CPU "GPU fp32" "GPU bf16"
printf '%-34s %10s %10s %10s   (oracle %s)\n' "test AUC (same rows)" "$cpu" "$(val auc "$W/gpu.rt")" "$(val auc "$W/bf16.rt")" \
    "$(val oracle_auc "$W/cpu.rt")"
printf '%-34s %10s %10s %10s\n' "  minus the CPU's" "" "$(echo "$(val auc "$W/gpu.rt") $cpu" | awk '{printf "%+.5f", $1 - $2}')" \
    "$(echo "$(val auc "$W/bf16.rt") $cpu" | awk '{printf "%+.5f", $1 - $2}')"
printf '%-34s %10s %10s %10s\n' "samples/s of that run" "$(val samples_per_s "$W/cpu.rt")" "$(val samples_per_s "$W/gpu.rt")" \
    "$(val samples_per_s "$W/bf16.rt")"
printf '\n%-34s %12s %12s %8s\n' "Kaggle DLRM on the GPU, samples/s" rectrain pytorch ratio
for P in fp32 bf16; do
    for B in 2048 16384; do
        a=$(val samples_per_s "$W/$P$B.rt"); b=$(val samples_per_s "$W/$P$B.pt")
        printf '%-34s %12s %12s %8s\n' "$P, batch $B" "$a" "$b" "$(echo "$a $b" | awk '{printf "%.2fx", $1 / $2}')"
    done
done
