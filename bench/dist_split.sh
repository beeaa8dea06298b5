#!/bin/sh
# Distributed training on this machine, in one run: the Kaggle DLRM (configs/dlrm_kaggle.json,
# the Kaggle table sizes of configs/criteo_standard.json, global batch 2048) on ROWS generated
# rows, STEPS steps per run:
#  1. efficiency: 1 process x 2 threads against 2 ranks x 1 thread (OPER, one-sided gets),
#     REPS alternating repetitions, medians of samples/s and their ratio;
#  2. OPER against the all-to-all-v baseline (--fetch alltoall), 2 and 4 ranks side by side:
#     rank 0's step time split (local lookups, remote fetch, dense, all-reduce, gradient
#     exchange), the bytes it sent per step beside the plan's prediction, and the rank furthest
#     from its prediction.
# Usage: bench/dist_split.sh [ROWS=400000] [STEPS=60] [REPS=3]   (from the repo root)
set -eu
ROWS=${1:-400000}; STEPS=${2:-60}; REPS=${3:-3}
R=$(pwd)/build/rectrain
[ -x "$R" ] || { echo "build first: make build" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "needs Open MPI (scripts/install-deps.sh)" >&2; exit 1; }
W=$(mktemp -d "${TMPDIR:-/tmp}/rectrain-dist-XXXXXX"); trap 'rm -rf "$W"' EXIT
export REC_PROGRESS=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
"$R" gen --rows "$ROWS" --out "$W/d.tsv" >/dev/null 2>&1
"$R" prep --spec configs/criteo_standard.json --in "$W/d.tsv" --out "$W/d.rshard" >/dev/null 2>&1
rm -f "$W/d.tsv"
COMMON="--data $W/d.rshard --config configs/dlrm_kaggle.json --steps $STEPS --json"
one() { "$R" train $COMMON --threads 2 2>/dev/null | grep '^{"model"' > "$W/$1.json"; }
ranks() { # NP NAME EXTRA...
    np=$1; name=$2; shift 2
    mpirun -np "$np" --oversubscribe --bind-to none "$R" train $COMMON --threads 1 "$@" 2>"$W/$name.err" |
        grep '^{"model"' > "$W/$name.json" || { cat "$W/$name.err" >&2; exit 1; }
}
for k in $(seq 1 "$REPS"); do
    one "one_$k"
    ranks 2 "two_$k"
done
for np in 2 4; do
    ranks "$np" "oper_$np"
    ranks "$np" "a2a_$np" --fetch alltoall
done

python3 - "$W" "$REPS" "$STEPS" <<'EOF'
import json, statistics, sys
w, reps, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def load(n): return json.load(open(f"{w}/{n}.json"))
one = statistics.median(load(f"one_{k}")["samples_per_s"] for k in range(1, reps + 1))
two = statistics.median(load(f"two_{k}")["samples_per_s"] for k in range(1, reps + 1))
print(f"Kaggle DLRM, global batch 2048, {steps} steps per run, medians of {reps}")
print(f"  1 process x 2 threads: {one:9.0f} samples/s")
print(f"  2 ranks x 1 thread:    {two:9.0f} samples/s   ratio {two / one:.2f} (criterion >= 0.8)")
print()
cols = ["local", "fetch", "dense", "allreduce", "exchange"]
print(f"  {'run':<18}{'samples/s':>10}" + "".join(f"{c:>11}" for c in cols) +
      f"{'sent MB':>10}{'plan MB':>10}{'worst rank':>12}")
for np in (2, 4):
    for name, label in ((f"oper_{np}", f"{np} ranks oper"), (f"a2a_{np}", f"{np} ranks all2all")):
        j = load(name)
        ms = j["step_ms"]
        worst = j["worst_sent_vs_plan"]
        print(f"  {label:<18}{j['samples_per_s']:>10.0f}" + "".join(f"{ms[c]:>9.3f}ms" for c in cols) +
              f"{j['sent_bytes_per_step'] / 1e6:>10.3f}{j['plan_sent_bytes_per_step'] / 1e6:>10.3f}"
              f"{'r%d %.1f%%' % (worst['rank'], 100 * worst['deviation']) if name.startswith('oper') else '-':>12}")
print("  (step split and bytes are rank 0's; worst rank: |sent / predicted - 1| over all ranks, gets only)")
EOF
