#!/bin/sh
# rectrain's GPU embedding engine against PyTorch's per-table nn.EmbeddingBag loop on the same
# GPU (dev/torch_embed.py --device cuda), same tables and batches, for the Kaggle DLRM and
# RecFlex's models A-E; then the table and the ratios the GPU issue asks for (geometric means
# over A-E): tuned vs PyTorch, tuned vs the best uniform schedule and vs warp-per-bag, with GB/s
# in FBGEMM's definition beside the device's copy bandwidth from the same run.
# Usage: bench/embed_gpu.sh [MODELS="kaggle A B C D E"] [REPS=5]   (from the repo root, on a GPU)
# REC_BIN: the rectrain binary (default build/rectrain); REC_PEER_PY: python with CUDA torch.
set -eu
MODELS=${1:-"kaggle A B C D E"}; REPS=${2:-5}
R=${REC_BIN:-build/rectrain}
REC_PEER_PY=${REC_PEER_PY:-python3}   # the GPU machines' python holds torch
. bench/torch_peer.sh
need_torch_gpu
W=$(mktemp -d "${TMPDIR:-/tmp}/rectrain-embed-gpu-XXXXXX"); trap 'rm -rf "$W"' EXIT
val() { echo "$2" | sed -n "s/.*\"$1\": \"*\([^,\"}]*\).*/\1/p" | tail -n 1; }
: > "$W/t"
for M in $MODELS; do
    $R bench embed --device cuda --model "$M" --reps "$REPS" --dump "$W/$M" --json > "$W/$M.rt"
    cat "$W/$M.rt" >&2
    $PY dev/torch_embed.py "$W/$M" --reps "$REPS" --device cuda > "$W/$M.pt"
    J=$(grep '"model"' "$W/$M.rt"); P=$(cat "$W/$M.pt")
    echo "$M $(val default_fwd_s "$J") $(val uniform_fwd_s "$J") $(val warp_fwd_s "$J") $(val tuned_fwd_s "$J") \
$(val uniform_fwdbwd_s "$J") $(val tuned_fwdbwd_s "$J") $(val fwd_s "$P") $(val fwdbwd_s "$P") $(val gb_per_s "$J") \
$(val copy_gbps "$J") $(val uniform_sched "$J") $(val fwd_rel_err "$J")" >> "$W/t"
    rm -rf "${W:?}/$M"
done
grep -h '"device"' "$W"/*.rt | head -n 1
awk '{ printf "%-7s tuned fwd %8.4f ms fwd+bwd %8.4f ms | vs pytorch fwd %6.2fx fwd+bwd %6.2fx | vs best uniform (%s) %5.2fx, vs warp-per-bag %5.2fx, vs default %5.2fx | %5.0f GB/s of %5.0f copy | err %s\n",
              $1, $5 * 1e3, $7 * 1e3, $8 / $5, $9 / $7, $12, $3 / $5, $4 / $5, $2 / $5, $10, $11, $13
       if ($1 != "kaggle") { n++; gp += log($8 / $5); gpb += log($9 / $7); gu += log($3 / $5); gw += log($4 / $5) } }
     END { if (n) printf "geomean over A-E (%d models): tuned vs pytorch fwd %.2fx, fwd+bwd %.2fx; tuned vs best uniform fwd %.3fx, vs warp-per-bag %.3fx\n",
                         n, exp(gp / n), exp(gpb / n), exp(gu / n), exp(gw / n) }' "$W/t"
