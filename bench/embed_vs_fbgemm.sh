#!/bin/sh
# rectrain's embedding engine vs FBGEMM's CPU table-batched embedding (dev/fbgemm_embed.py: the
# kernels TorchRec runs on CPU) on the same tables, batches and SGD, in one run, for the Kaggle
# DLRM and RecFlex's models A-E: per model the tuned forward and forward+backward+update of
# `rectrain bench embed` beside FBGEMM's with fp32 tables, and rectrain's bf16 tables beside
# FBGEMM's fp16 tables (its CPU TBE trains fp32 and fp16, not bf16), the ratios, and their
# geometric means; and TorchRec's sharded EmbeddingBagCollection (dev/torchrec_embed.py) on the
# fp32 tables, if torchrec installs.
# The peer runs in its own virtual environment, made on the first run: torch and fbgemm-gpu-cpu
# from PyPI (several GB with torch's CUDA libraries), in REC_FBGEMM_VENV (default
# ~/.cache/rectrain/fbgemm-venv). None of it is a dependency of rectrain.
# Usage: bench/embed_vs_fbgemm.sh [MODELS="kaggle A B C D E"] [REPS=3]   (from the repo root)
# CHART=FILE.png: also the forward+backward+update times as a bar chart.
set -eu
MODELS=${1:-"kaggle A B C D E"}; REPS=${2:-3}
R=build/rectrain
[ -x "$R" ] || { echo "build first: make build" >&2; exit 1; }
V=${REC_FBGEMM_VENV:-$HOME/.cache/rectrain/fbgemm-venv}
if ! "$V/bin/python" -c "import fbgemm_gpu" 2>/dev/null; then
    echo "embed_vs_fbgemm: making the peer's environment in $V (torch, fbgemm-gpu-cpu from PyPI)" >&2
    python3 -m venv "$V" && "$V/bin/pip" install -q "torch==2.14.*" "fbgemm-gpu-cpu==1.9.0" || {
        echo "embed_vs_fbgemm: cannot install the FBGEMM peer into $V (python3-venv and PyPI needed)" >&2; exit 2; }
fi
# TorchRec's EmbeddingBagCollection (sharded on CPU: the same TBE with TorchRec's planner and
# input path) if it installs: torchrec 1.9.2 without its pinned deps, then the ones it imports.
TR=1
"$V/bin/python" -c "import torchrec" 2>/dev/null || {
    "$V/bin/pip" install -q torchrec==1.9.2 --no-deps && \
        "$V/bin/pip" install -q tensordict iopath pyre-extensions torchmetrics typing-inspect && \
        "$V/bin/python" -c "import torchrec" 2>/dev/null; } || {
    TR=0; echo "embed_vs_fbgemm: TorchRec does not install into $V; its column is left out" >&2; }
W=$(mktemp -d "${TMPDIR:-/tmp}/rectrain-embed-vs-fbgemm-XXXXXX"); trap 'rm -rf "$W"' EXIT
export REC_PROGRESS=0
val() { sed -n "s/.*\"$1\": \"*\([^,\"}]*\).*/\1/p" "$2" | tail -n 1; }
printf '%s\n' "model rt_fwd rt_fb fb32_fwd fb32_fb rt16_fwd rt16_fb fb16_fwd fb16_fb" > "$W/t"
for M in $MODELS; do
    $R bench embed --model "$M" --reps "$REPS" --dump "$W/$M" --json 2>"$W/$M.log" | grep '"model"' > "$W/$M.rt"
    $R bench embed --model "$M" --reps "$REPS" --precision bf16 --json 2>>"$W/$M.log" | grep '"model"' > "$W/$M.rt16"
    for P in fp32 fp16; do
        "$V/bin/python" dev/fbgemm_embed.py "$W/$M" --reps "$REPS" --precision "$P" > "$W/$M.$P"
    done
    if [ "$TR" = 1 ]; then
        "$V/bin/python" dev/torchrec_embed.py "$W/$M" --reps "$REPS" 2>"$W/$M.trlog" | grep '"peer"' > "$W/$M.tr" || {
            tail -n 3 "$W/$M.trlog" >&2; exit 1; }
        echo "$M $(val tuned_fwd_s "$W/$M.rt") $(val tuned_fwdbwd_s "$W/$M.rt") $(val fwd_s "$W/$M.tr") $(val fwdbwd_s "$W/$M.tr")" \
            >> "$W/tr"
    fi
    echo "$M $(val tuned_fwd_s "$W/$M.rt") $(val tuned_fwdbwd_s "$W/$M.rt") $(val fwd_s "$W/$M.fp32") \
$(val fwdbwd_s "$W/$M.fp32") $(val tuned_fwd_s "$W/$M.rt16") $(val tuned_fwdbwd_s "$W/$M.rt16") $(val fwd_s "$W/$M.fp16") \
$(val fwdbwd_s "$W/$M.fp16")" >> "$W/t"
    rm -rf "${W:?}/$M"
done
echo "$(head -n 1 "$W/$M.fp32" | sed -n 's/.*"peer": "\([^"]*\)".*/\1/p'); ms per batch, 2 threads, medians of $REPS"
echo "32-bit tables: rectrain fp32 vs FBGEMM fp32; 16-bit tables: rectrain bf16 vs FBGEMM fp16 (its CPU TBE has no bf16)"
awk 'NR == 1 { printf "%-7s | %9s %9s %6s %9s %9s %6s | %9s %9s %6s %9s %9s %6s\n", "model", "rt fwd", "fbgemm", "ratio",
                      "rt f+b+u", "fbgemm", "ratio", "rt16 fwd", "fbgemm16", "ratio", "rt16 fbu", "fbgemm16", "ratio"; next }
     { printf "%-7s | %9.3f %9.3f %5.2fx %9.3f %9.3f %5.2fx | %9.3f %9.3f %5.2fx %9.3f %9.3f %5.2fx\n", $1,
              $2 * 1e3, $4 * 1e3, $4 / $2, $3 * 1e3, $5 * 1e3, $5 / $3, $6 * 1e3, $8 * 1e3, $8 / $6, $7 * 1e3, $9 * 1e3, $9 / $7
       n++; gf += log($4 / $2); gb += log($5 / $3); hf += log($8 / $6); hb += log($9 / $7) }
     END { printf "geomean over %d models: fp32 tables fwd %.2fx, fwd+bwd+update %.2fx; 16-bit tables fwd %.2fx, "\
                  "fwd+bwd+update %.2fx (FBGEMM time / rectrain time)\n", n, exp(gf / n), exp(gb / n), exp(hf / n), exp(hb / n) }' "$W/t"
if [ "$TR" = 1 ]; then
    echo "$(head -n 1 "$W/$M.tr" | sed -n 's/.*"peer": "\([^"]*\)".*/\1/p'), table-wise, fused exact SGD, fp32 tables"
    awk 'BEGIN { printf "%-7s | %9s %9s %6s %9s %9s %6s\n", "model", "rt fwd", "torchrec", "ratio", "rt f+b+u", "torchrec", "ratio" }
         { printf "%-7s | %9.3f %9.3f %5.2fx %9.3f %9.3f %5.2fx\n", $1, $2 * 1e3, $4 * 1e3, $4 / $2, $3 * 1e3, $5 * 1e3, $5 / $3
           n++; f += log($4 / $2); b += log($5 / $3) }
         END { printf "geomean over %d models: fwd %.2fx, fwd+bwd+update %.2fx (TorchRec time / rectrain time)\n", n,
                      exp(f / n), exp(b / n) }' "$W/tr"
fi
if [ -n "${CHART:-}" ]; then
    awk 'BEGIN { print "model\trectrain fp32\tFBGEMM fp32\trectrain bf16\tFBGEMM fp16" }
         NR > 1 { printf "%s\t%.4f\t%.4f\t%.4f\t%.4f\n", $1, $3 * 1e3, $5 * 1e3, $7 * 1e3, $9 * 1e3 }' "$W/t" > "$W/chart.tsv"
    $R plot --table "$W/chart.tsv" --out "$CHART" --ylabel "ms per batch" \
        --title "Embedding forward+backward+update (SGD), 2 threads: rectrain vs FBGEMM CPU TBE"
fi
