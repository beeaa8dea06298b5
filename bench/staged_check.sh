#!/bin/sh
# Staged input on the GPU (train --device cuda from a shuffled .rshard: each window copied once,
# every batch gathered on the GPU) against the host's gathering and packing (REC_CUDA_INPUT=host):
# the same rows in the same order, so the loss logs must agree bit for bit. One-hot and multi-hot
# shards (lists of every length, empty ones), batches inside a window, straddling windows and
# larger than one (several staging slots); and a .rraw whose spec's ops run during training
# (--prep-device, RAP's path: on the GPU with DEVICE=cuda).
# Usage: bench/staged_check.sh [ROWS=200000]   (from the repo root; REC_BIN: the binary,
#        DEVICE: cuda by default; DEVICE=cpu checks the script where there is no GPU)
set -eu
ROWS=${1:-200000}
R=${REC_BIN:-build/rectrain}; DEVICE=${DEVICE:-cuda}; PD=cpu; [ "$DEVICE" = cuda ] && PD=cuda
W=$(mktemp -d "${TMPDIR:-/tmp}/rectrain-staged-XXXXXX")
trap 'rm -rf "$W"' EXIT
trap 'exit 130' INT TERM
export REC_PROGRESS=0
fail=0
compare() { # compare WHAT ARGS...: train twice, host-packed and staged; the loss logs must agree
    what=$1; shift
    for input in host staged; do
        REC_CUDA_INPUT=$input $R train --config configs/dlrm_kaggle.json --epochs 2 --eval-every 0 --device "$DEVICE" \
            --loss-log "$W/$input.log" --json "$@" > "$W/$input.json" 2> "$W/$input.err" ||
            { echo "$what, $input: failed"; tail -n 3 "$W/$input.err"; fail=1; }
    done
    if cmp -s "$W/host.log" "$W/staged.log"; then
        echo "$what: staged = host, bit for bit ($(wc -l < "$W/staged.log") loss lines)"
    else
        echo "$what: staged DIFFERS from host"; fail=1
    fi
    grep -h "gathered on the GPU" "$W/staged.err" | head -n 1
}
for hot in one multi; do
    flag=; [ $hot = multi ] && flag=--multi-hot
    $R gen --rows "$ROWS" --scale 0.01 --seed 9 $flag --out "$W/d.tsv" >/dev/null 2>&1
    $R prep --spec configs/criteo_standard.json --in "$W/d.tsv" --out "$W/$hot.rshard" >/dev/null 2>&1
    for batch in 4096 50000 150000; do compare "$hot-hot shard, batch $batch" --data "$W/$hot.rshard" --batch $batch; done
done
$R prep --raw --in "$W/d.tsv" --out "$W/d.rraw" >/dev/null 2>&1
compare "multi-hot .rraw, ops on $PD, batch 16384" --spec configs/criteo_standard.json --data "$W/d.rraw" \
    --prep-device "$PD" --batch 16384
exit $fail
