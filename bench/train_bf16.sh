#!/bin/sh
# bf16 against fp32 on the CPU (train.precision, --precision), in one run:
#  1. quality: the quality run of bench/train_vs_pytorch.sh (ROWS generated rows, tables scaled
#     by SCALE, configs/dlrm_kaggle.json, 1 epoch on the first 90%), test AUC of both, and of
#     bf16 products with bf16 tables under each rounding of the updated rows;
#  2. loss curve: STEPS steps at batch 2048 on the same batches in both precisions; the largest
#     gap between the two curves' means over windows of 100 steps, relative to fp32's, and both
#     curves (means over 20 steps) as a PNG;
#  3. speed: `rectrain bench train --precision both` (Kaggle table sizes, batch 2048, 2 threads),
#     the split of the step for each precision and the ratio, beside oneDNN's matmul ceilings.
# Usage: bench/train_bf16.sh [ROWS=1000000] [SCALE=0.05] [STEPS=2000]   (from the repo root)
# CHART=FILE.png: where the loss curves go (default: bf16_loss.png in the current directory).
set -eu
ROWS=${1:-1000000}; SCALE=${2:-0.05}; STEPS=${3:-2000}
CHART=${CHART:-bf16_loss.png}
R=build/rectrain
. bench/torch_peer.sh  # scaled_spec (python3 and json only)
W=$(mktemp -d "${TMPDIR:-/tmp}/rectrain-bf16-XXXXXX"); trap 'rm -rf "$W"' EXIT
export REC_PROGRESS=0

echo "== quality: $ROWS rows, scale $SCALE, dlrm_kaggle config, 1 epoch, holdout 10%" >&2
quality_rows "$ROWS" "$SCALE" "$W"
rm -f "$W/q.tsv"
for P in fp32 bf16; do
    $R train --config configs/dlrm_kaggle.json --data "$W/q.rshard" --holdout 0.1 --oracle "$W/q.prob" --threads 2 \
        --precision "$P" --json > "$W/q_$P.rt"
done
for RND in stochastic nearest; do # bf16 products and bf16 tables, each rounding of the updated rows
    $PY -c 'import json, sys; c = json.load(open("configs/dlrm_kaggle.json"))
c["embedding"].update(precision="bf16", rounding=sys.argv[1]); json.dump(c, open(sys.argv[2], "w"))' "$RND" "$W/t16_$RND.json"
    $R train --config "$W/t16_$RND.json" --data "$W/q.rshard" --holdout 0.1 --threads 2 --precision bf16 --json \
        > "$W/q_t16_$RND.rt"
done

CROWS=$((STEPS * 2048 + 2048))
echo "== loss curve: $STEPS steps at batch 2048 ($CROWS rows, scale $SCALE)" >&2
$R gen --rows "$CROWS" --scale "$SCALE" --seed 3 --out "$W/c.tsv" >/dev/null
$R prep --spec "$W/q.json" --in "$W/c.tsv" --out "$W/c.rshard" >/dev/null 2>&1
rm -f "$W/c.tsv"
for P in fp32 bf16; do
    $R train --config configs/dlrm_kaggle.json --data "$W/c.rshard" --steps "$STEPS" --threads 2 --precision "$P" \
        --loss-log "$W/c_$P.log" > /dev/null
done
# window means of both curves: the largest relative gap over 100-step windows, and a TSV of
# 20-step means to plot
paste "$W/c_fp32.log" "$W/c_bf16.log" | awk -v tsv="$W/curve.tsv" '
    BEGIN { print "step\tfp32\tbf16" > tsv }
    $1 != $3 { print "the two loss logs disagree on the step at line " NR > "/dev/stderr"; exit 1 }
    { a += $2; b += $4; n++; pa += $2; pb += $4; pn++
      if (pn == 20) { printf "%d\t%.6f\t%.6f\n", $1, pa / pn, pb / pn > tsv; pa = pb = pn = 0 }
      if (n == 100) { g = (b - a) / a; if (g < 0) g = -g; if (g > worst) { worst = g; at = $1 }
                      if (g > 0) { sum += g; k++ } a = b = n = 0 } }
    END { printf "%.6f %d %.6f\n", worst, at, k ? sum / k : 0 }' > "$W/gap"
$R plot --table "$W/curve.tsv" --lines --out "$CHART" --title "Kaggle DLRM training loss, fp32 and bf16 (means over 20 steps)" \
    --ylabel "loss (binary cross-entropy)" 2>/dev/null

echo "== speed: bench train --precision both" >&2
$R bench train --precision both --threads 2 --rows 400000 --steps 50 --reps 5 --json > "$W/speed.txt"
grep -v '^{' "$W/speed.txt"

a32=$(val auc "$W/q_fp32.rt"); a16=$(val auc "$W/q_bf16.rt")
set -- $(cat "$W/gap")
printf '\n%-44s %10s %10s\n' "" fp32 bf16
printf '%-44s %10s %10s   (oracle %s; bf16 - fp32 %s)\n' "test AUC, quality run (same rows, 1 epoch)" "$a32" "$a16" \
    "$(val oracle_auc "$W/q_fp32.rt")" "$(echo "$a16 $a32" | awk '{printf "%+.5f", $1 - $2}')"
printf '%-44s %10s %10s\n' "samples/s of that run" "$(val samples_per_s "$W/q_fp32.rt")" "$(val samples_per_s "$W/q_bf16.rt")"
for RND in stochastic nearest; do
    printf '%-44s %21s   (bf16 - fp32 %s)\n' "  + bf16 tables, $RND rounding" "$(val auc "$W/q_t16_$RND.rt")" \
        "$(echo "$(val auc "$W/q_t16_$RND.rt") $a32" | awk '{printf "%+.5f", $1 - $2}')"
done
printf '%-44s %21s\n' "loss curves over $STEPS steps: largest gap" "$(echo "$1" | awk '{printf "%.3f%%", 100 * $1}') (window ending at step $2; mean $(echo "$3" | awk '{printf "%.3f%%", 100 * $1}'))"
echo "loss curves: $CHART"
echo "{\"auc_fp32\": $a32, \"auc_bf16\": $a16, \"auc_bf16_tables_stochastic\": $(val auc "$W/q_t16_stochastic.rt"), \
\"auc_bf16_tables_nearest\": $(val auc "$W/q_t16_nearest.rt"), \"auc_diff\": $(echo "$a16 $a32" | awk '{printf "%.6f", $1 - $2}'), \"curve_steps\": $STEPS, \"curve_max_gap\": $1, \"curve_mean_gap\": $3, \"bf16_speedup\": $(val bf16_speedup "$W/speed.txt")}"
