#!/bin/sh
# rectrain's embedding engine vs PyTorch's nn.EmbeddingBag loop (dev/torch_embed.py, Debian's
# python3-torch) on the same tables and batches, in one run, for the Kaggle DLRM and RecFlex's
# models A-E; then the whole table: naive / uniform / separately tuned / tuned, and the ratios
# the embedding issue asks for (geometric means over A-E).
# Usage: bench/embed_vs_pytorch.sh [MODELS="kaggle A B C D E"] [REPS=3]   (from the repo root)
# CHART=FILE.png: also the tuned forward+backward time beside PyTorch's, per model, as a bar chart.
set -eu
MODELS=${1:-"kaggle A B C D E"}; REPS=${2:-3}
R=build/rectrain
. bench/torch_peer.sh
need_torch   # nn.EmbeddingBag does not multiply matrices: no BLAS needed
W=$(mktemp -d "${TMPDIR:-/tmp}/rectrain-embed-vs-torch-XXXXXX"); trap 'rm -rf "$W"' EXIT
val() { echo "$2" | sed -n "s/.*\"$1\": \"*\([^,\"}]*\).*/\1/p" | tail -n 1; }
printf '%s\n' "model naive_fwd uniform_fwd separate_fwd tuned_fwd uniform_fb separate_fb tuned_fb torch_fb gbs rows oracle" > "$W/t"
for M in $MODELS; do
    $R bench embed --model "$M" --reps "$REPS" --dump "$W/$M" --json > "$W/$M.rt"
    cat "$W/$M.rt" >&2
    $PY dev/torch_embed.py "$W/$M" --reps "$REPS" > "$W/$M.pt"
    J=$(grep '"model"' "$W/$M.rt"); P=$(cat "$W/$M.pt")
    echo "$M $(val naive_fwd_s "$J") $(val uniform_fwd_s "$J") $(val separate_fwd_s "$J") $(val tuned_fwd_s "$J") \
$(val uniform_fwdbwd_s "$J") $(val separate_fwdbwd_s "$J") $(val tuned_fwdbwd_s "$J") $(val fwdbwd_s "$P") \
$(val gb_per_s "$J") $(val rows_per_s "$J") $(val oracle_fwd_gain "$J")" >> "$W/t"
    rm -rf "${W:?}/$M"
done
grep -h gather_ceiling "$W"/*.rt | head -n 1
awk 'NR == 1 { next }
     { printf "%-7s naive/tuned fwd %5.2fx | tuned vs uniform fwd %5.2fx fwd+bwd %5.2fx | vs separate fwd %5.2fx fwd+bwd %5.2fx | vs pytorch fwd+bwd %6.2fx | %6.2f GB/s %7.1f Mrows/s\n",
              $1, $2 / $5, $3 / $5, $6 / $8, $4 / $5, $7 / $8, $9 / $8, $10, $11 / 1e6
       if ($1 != "kaggle") { n++; gu += log($3 / $5); gub += log($6 / $8); gs += log($4 / $5); gsb += log($7 / $8); go += log($12) } }
     END { if (n) printf "geomean over A-E (%d models): tuned vs best uniform fwd %.3fx, fwd+bwd %.3fx; tuned vs separately tuned fwd %.3fx, fwd+bwd %.3fx; per-table oracle vs best uniform fwd %.3fx\n",
                         n, exp(gu / n), exp(gub / n), exp(gs / n), exp(gsb / n), exp(go / n) }' "$W/t"
if [ -n "${CHART:-}" ]; then
    awk 'BEGIN { print "model\trectrain (tuned)\tPyTorch EmbeddingBag" } NR > 1 { printf "%s\t%.4f\t%.4f\n", $1, $8 * 1e3, $9 * 1e3 }' \
        "$W/t" > "$W/chart.tsv"
    $R plot --table "$W/chart.tsv" --out "$CHART" --title "Embedding forward+backward per batch (2 threads, SGD)" \
        --ylabel "ms per batch"
fi
