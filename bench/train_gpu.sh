#!/bin/sh
# rectrain on the GPU (--device cuda), in one run on a GPU machine:
#  1. quality: the Kaggle-config DLRM trained one epoch on the first 90% of ROWS generated rows
#     (tables scaled by SCALE) on the CPU, on the GPU in fp32, on the GPU with bf16 products and
#     on the GPU with bf16 tables (stochastic rounding): test AUC of each on the last 10%;
#  2. speed: the Kaggle-shaped DLRM with the Kaggle table sizes at batch 2048 and 16384, fp32
#     and bf16: samples/s of `rectrain bench train --device cuda` (the share of step time per part
#     too) beside PyTorch's DLRM at the same precision (dev/torch_dlrm.py --device cuda, rows
#     drawn on the GPU; bf16 under torch.autocast) and the ratio;
#  3. the MLPerf DLRM shape (configs/dlrm_terabyte.json: dim 128, bottom 512-256-128, top
#     1024-1024-512-256-1) on the same Kaggle tables (4.3B parameters) at batch 65536, likewise.
# Usage: bench/train_gpu.sh [ROWS=1000000] [SCALE=0.05] [STEPS=200]   (from the repo root)
# REC_BIN: the rectrain binary (default build/rectrain); REC_PEER_PY: python with CUDA torch;
# PARTS: which of "quality kaggle mlperf" to run (default all); PEER=0: rectrain alone.
set -eu
ROWS=${1:-1000000}; SCALE=${2:-0.05}; STEPS=${3:-200}
R=${REC_BIN:-build/rectrain}
REC_PEER_PY=${REC_PEER_PY:-python3}   # the GPU machines' python holds torch
PARTS=${PARTS:-quality kaggle mlperf}; PEER=${PEER:-1}
. bench/torch_peer.sh
[ "$PEER" = 1 ] && need_torch_gpu
has() { case " $PARTS " in *" $1 "*) return 0;; esac; return 1; }
W=$(mktemp -d "${TMPDIR:-/tmp}/rectrain-train-gpu-XXXXXX"); trap 'rm -rf "$W"' EXIT
export REC_PROGRESS=0

if has quality; then
echo "== quality: $ROWS rows, scale $SCALE, dlrm_kaggle config, 1 epoch, holdout 10%" >&2
quality_rows "$ROWS" "$SCALE" "$W"
$R train --config configs/dlrm_kaggle.json --data "$W/q.rshard" --holdout 0.1 --oracle "$W/q.prob" --json > "$W/cpu.rt"
$R train --config configs/dlrm_kaggle.json --data "$W/q.rshard" --holdout 0.1 --oracle "$W/q.prob" --device cuda \
    --json > "$W/gpu.rt"
$R train --config configs/dlrm_kaggle.json --data "$W/q.rshard" --holdout 0.1 --oracle "$W/q.prob" --device cuda \
    --precision bf16 --json > "$W/bf16.rt"
# bf16 tables (stochastic rounding) with fp32 products: the tables' own effect on AUC
python3 -c 'import json, sys; c = json.load(open("configs/dlrm_kaggle.json"))
c["embedding"].update(precision="bf16", rounding="stochastic"); json.dump(c, open(sys.argv[1], "w"))' "$W/t16.json"
$R train --config "$W/t16.json" --data "$W/q.rshard" --holdout 0.1 --oracle "$W/q.prob" --device cuda --json > "$W/t16.rt"
fi

# speed CONFIG BATCH PRECISION STEPS NAME: rectrain's bench train and, with PEER=1, PyTorch's.
speed() {
    $R bench train --device cuda --precision "$3" --config "$1" --data "$W/s.rshard" --batch "$2" \
        --steps "$4" --reps 3 --json > "$W/$5.rt"
    grep -v '^{' "$W/$5.rt" >&2
    [ "$PEER" = 1 ] || return 0
    $PY dev/torch_dlrm.py --synthetic 2000000 --spec "$W/s.json" --config "$1" --holdout 0 \
        --device cuda --precision "$3" --batch "$2" --steps $(($4 + 10)) --json > "$W/$5.pt"
    echo "  $5: rectrain $(val samples_per_s "$W/$5.rt"), pytorch $(val samples_per_s "$W/$5.pt")" >&2
}
row() { # row LABEL NAME
    a=$(val samples_per_s "$W/$2.rt"); b=$([ -f "$W/$2.pt" ] && val samples_per_s "$W/$2.pt" || echo -)
    printf '%-34s %12s %12s %8s\n' "$1" "$a" "$b" "$(echo "$a $b" | awk '$2 + 0 > 0 {printf "%.2fx", $1 / $2}')"
}

echo "== speed: Kaggle table sizes" >&2
$R gen --rows 2000000 --scale 1 --seed 2 --out "$W/s.tsv" >/dev/null
scaled_spec 1 "$W/s.json"
$R prep --spec "$W/s.json" --in "$W/s.tsv" --out "$W/s.rshard" >/dev/null 2>&1
rm -f "$W/s.tsv"
# The host's side of the input: the shuffled loader alone, on one thread and on all (what a GPU run gives it).
for T in 1 $(nproc); do
    echo "loader, batch 16384, $T thread(s): $($R bench loader --data "$W/s.rshard" --batch 16384 --reps 3 --threads "$T" | grep shuffled)" >&2
done
# ... and with the host's half of each GPU step's input (staging, packing, block map): the most samples/s it can feed
for B in 16384 65536; do
    echo "loader + GPU staging, batch $B, $(nproc) threads:" >&2
    $R bench loader --data "$W/s.rshard" --batch "$B" --reps 3 --threads "$(nproc)" --gpu-host | grep -E 'shuffled|staged' >&2
done
if has mlperf; then
    echo "== MLPerf shape (dlrm_terabyte.json) on the Kaggle tables, batch 65536" >&2
    for P in bf16 fp32; do speed configs/dlrm_terabyte.json 65536 "$P" 20 "m$P"; done
    # and with bf16 tables (half the tables' bytes): rectrain alone
    python3 -c 'import json, sys; c = json.load(open("configs/dlrm_terabyte.json"))
c["embedding"].update(precision="bf16"); json.dump(c, open(sys.argv[1], "w"))' "$W/mt16.json"
    SAVED=$PEER; PEER=0; speed "$W/mt16.json" 65536 bf16 20 mt16
    # the new paths' own gains, same run: batches packed on the host, and fp32 copies of the activations
    (export REC_CUDA_INPUT=host; speed configs/dlrm_terabyte.json 65536 bf16 20 mhost)
    (export REC_CUDA_MLP=plain; speed configs/dlrm_terabyte.json 65536 bf16 20 mplain); PEER=$SAVED
fi
if has kaggle; then
    for P in fp32 bf16; do
        for B in 2048 16384; do
            N=$STEPS; [ "$B" -gt 2048 ] && N=$((STEPS / 4))
            speed configs/dlrm_kaggle.json "$B" "$P" "$N" "k$P$B"
        done
    done
fi
if has quality; then
cpu=$(val auc "$W/cpu.rt")
printf '\n%-34s %10s %10s %10s\n' "" CPU "GPU fp32" "GPU bf16"
printf '%-34s %10s %10s %10s   (oracle %s)\n' "test AUC (same rows)" "$cpu" "$(val auc "$W/gpu.rt")" "$(val auc "$W/bf16.rt")" \
    "$(val oracle_auc "$W/cpu.rt")"
printf '%-34s %10s %10s %10s\n' "  minus the CPU's" "" "$(echo "$(val auc "$W/gpu.rt") $cpu" | awk '{printf "%+.5f", $1 - $2}')" \
    "$(echo "$(val auc "$W/bf16.rt") $cpu" | awk '{printf "%+.5f", $1 - $2}')"
printf '%-34s %10s %10s %10s\n' "samples/s of that run" "$(val samples_per_s "$W/cpu.rt")" "$(val samples_per_s "$W/gpu.rt")" \
    "$(val samples_per_s "$W/bf16.rt")"
printf '%-34s %10s %10s %10s\n' "GPU, bf16 tables (fp32 products)" "" "$(val auc "$W/t16.rt")" \
    "$(echo "$(val auc "$W/t16.rt") $(val auc "$W/gpu.rt")" | awk '{printf "%+.5f vs fp32", $1 - $2}')"
fi
printf '\n%-34s %12s %12s %8s\n' "DLRM on the GPU, samples/s" rectrain pytorch ratio
if has kaggle; then
    for P in fp32 bf16; do for B in 2048 16384; do row "Kaggle, $P, batch $B" "k$P$B"; done; done
fi
if has mlperf; then
    for P in fp32 bf16; do row "MLPerf shape, $P, batch 65536" "m$P"; done
    row "  bf16 with bf16 tables" mt16
    row "  bf16, batches packed on the host" mhost
    row "  bf16, fp32 activation copies" mplain
fi
