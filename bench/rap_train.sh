#!/bin/sh
# RAP end to end (paper 002, §6): the same rows trained one epoch four ways, in one run:
#  shard      from the preprocessed .rshard (the ideal: no preprocessing in the loop);
#  sequential prep the .rraw into a shard on PREP_DEVICE, then train from it (the two times added);
#  corun      from the .rraw with the spec's ops on PREP_DEVICE during training (--prep-device):
#             on a GPU, RAP's plan (capacities measured on the running model, Algorithm 1);
#  streams    the same with the plan off (REC_CUDA_CORUN=off): the executors' low-priority
#             streams beside the training's, ungated (RAP's "CUDA stream" baseline);
#  cpu prep   from the .rraw with the ops on the CPUs.
# Prints each run's seconds and samples/s as its --json gives them (the work, not start-up),
# corun / shard (RAP: 0.968 of the ideal) and corun / sequential (RAP: 1.99x), and whether the
# co-run's loss log is the shard's bit for bit; then the co-run's plan, predicted and measured
# exposed latency as its log gives them.
# The .rraw is parsed once beforehand (prep --raw), untimed: RAP's input is parsed columns.
# Usage: bench/rap_train.sh [ROWS=1000000] [SPEC=configs/criteo_heavy.json] [CONFIG=configs/dlrm_kaggle.json]
#        [BATCH=16384]   (from the repo root)
# REC_BIN: the binary (default build/rectrain); DEVICE: where the model trains (default cuda);
# PREP_DEVICE: where the ops run (default cuda); THREADS: --threads (default all CPUs).
set -eu
ROWS=${1:-1000000}; SPEC=${2:-configs/criteo_heavy.json}; CONFIG=${3:-configs/dlrm_kaggle.json}; BATCH=${4:-16384}
R=${REC_BIN:-build/rectrain}; DEVICE=${DEVICE:-cuda}; PD=${PREP_DEVICE:-cuda}; T=${THREADS:-$(nproc)}
W=$(mktemp -d "${TMPDIR:-/tmp}/rectrain-rap-XXXXXX")
trap 'rm -rf "$W"' EXIT
trap 'exit 130' INT TERM # an interrupt ends the script, through the EXIT trap's clean-up
export REC_PROGRESS=0

echo "== $ROWS multi-hot rows, spec $SPEC, config $CONFIG, batch $BATCH, training on $DEVICE, ops on $PD" >&2
$R gen --rows "$ROWS" --scale 0.05 --seed 4 --multi-hot --out "$W/d.tsv" >/dev/null 2>&1
$R prep --raw --in "$W/d.tsv" --out "$W/d.rraw" --threads "$T" >/dev/null 2>&1
rm -f "$W/d.tsv"
train() { # train OUT LOG ARGS...: one epoch, file order (so that every run reads the same batches)
    out=$1; log=$2; shift 2
    $R train --config "$CONFIG" --batch "$BATCH" --epochs 1 --no-shuffle --threads "$T" --device "$DEVICE" \
        --loss-log "$W/$log" --json "$@" > "$W/$out.json" 2> "$W/$out.err" || { cat "$W/$out.err" >&2; exit 1; }
}
$R prep --spec "$SPEC" --in "$W/d.rraw" --out "$W/d.rshard" --threads "$T" --device "$PD" --json \
    > "$W/prep.json" 2> "$W/prep.err" || { cat "$W/prep.err" >&2; exit 1; }
train shard shard.log --data "$W/d.rshard"
train corun corun.log --data "$W/d.rraw" --spec "$SPEC" --prep-device "$PD"
REC_CUDA_CORUN=off train streams streams.log --data "$W/d.rraw" --spec "$SPEC" --prep-device "$PD"
train cpuprep cpu.log --data "$W/d.rraw" --spec "$SPEC"
# each command's own seconds (its --json): the work, without the process's start and the model's set-up
field() { sed -n "s/.*\"$2\": \([0-9.e+-]*\).*/\1/p" "$W/$1.json" | head -n 1; }
prep=$(field prep seconds); shard=$(field shard seconds); corun=$(field corun seconds); cpu=$(field cpuprep seconds)
streams=$(field streams seconds)
seq=$(echo "$prep $shard" | awk '{printf "%.3f", $1 + $2}')
rate() { echo "$ROWS $1" | awk '{printf "%.0f", $1 / $2}'; }
printf '%-40s %10s %12s %12s\n' "run (seconds from --json)" seconds samples/s "input wait"
printf '%-40s %10s %12s %12s\n' "from the shard (ideal)" "$shard" "$(rate "$shard")" "$(field shard input_wait_s)"
printf '%-40s %10s %12s %12s   (prep %s s)\n' "prep on $PD, then train (sequential)" "$seq" "$(rate "$seq")" "-" "$prep"
printf '%-40s %10s %12s %12s\n' "from the .rraw, ops on $PD (co-run)" "$corun" "$(rate "$corun")" "$(field corun input_wait_s)"
printf '%-40s %10s %12s %12s\n' "  the same, ungated streams" "$streams" "$(rate "$streams")" "$(field streams input_wait_s)"
printf '%-40s %10s %12s %12s\n' "from the .rraw, ops on the CPUs" "$cpu" "$(rate "$cpu")" "$(field cpuprep input_wait_s)"
echo "co-run / shard: $(echo "$shard $corun" | awk '{printf "%.3f", $1 / $2}') (RAP: 0.968); co-run / sequential:" \
    "$(echo "$seq $corun" | awk '{printf "%.2fx", $1 / $2}') (RAP: 1.99x)"
cmp -s "$W/shard.log" "$W/corun.log" && echo "loss logs: co-run = shard, bit for bit" || echo "loss logs: co-run DIFFERS from shard"
cmp -s "$W/shard.log" "$W/cpu.log" || echo "loss logs: CPU prep DIFFERS from shard"
cmp -s "$W/shard.log" "$W/streams.log" || echo "loss logs: ungated streams DIFFER from shard"
grep 'co-run' "$W/corun.err" || true
