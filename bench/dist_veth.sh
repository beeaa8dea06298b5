#!/bin/sh
# Two ranks on two "hosts": network namespaces joined by a veth pair, mpirun over TCP only
# (../shared/recipes/mpi-across-namespaces.md), against the same two ranks on shared memory
# and against one process:
#  1. a small DLRM (SGD on the tables and the dense layers), batch 256, STEPS
#     steps on ROWS generated rows: the largest relative gap between the per-step losses of 2
#     ranks over veth and of one process, the AUCs, and each 2-rank run's step split with its
#     exposed communication (time inside blocking MPI calls);
#  2. the Kaggle DLRM (configs/dlrm_kaggle.json, Kaggle table sizes), global batch 2048, 2 ranks
#     x 1 thread, K_STEPS steps: over veth and on shared memory, REPS alternating repetitions
#     with one sharding plan (rectrain plan), medians of samples/s and their ratio.
# Every mpirun gets --bind-to none: each "host" would bind its rank to its first core, and
# both hosts' first core is this machine's core 0 (train warns when ranks take turns so).
# Sets up and tears down everything itself (root, iproute2).
# Usage: bench/dist_veth.sh [ROWS=60000] [STEPS=200] [K_STEPS=60] [REPS=3]   (from the repo root)
set -eu
ROWS=${1:-60000}; STEPS=${2:-200}; K_STEPS=${3:-60}; REPS=${4:-3}
R=$(pwd)/build/rectrain; SRC=$(pwd)
[ -x "$R" ] || { echo "build first: make build" >&2; exit 1; }
command -v ip >/dev/null || { echo "needs iproute2 (apt-get install iproute2)" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "needs Open MPI (scripts/install-deps.sh)" >&2; exit 1; }
W=$(mktemp -d "${TMPDIR:-/tmp}/rectrain-veth-XXXXXX")
NA=rtA$$; NB=rtB$$; A=192.168.77.1; B=192.168.77.2
cleanup() { ip netns del "$NA" 2>/dev/null || true; ip netns del "$NB" 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT INT TERM
export REC_PROGRESS=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# the two hosts
. "$(dirname "$0")/netns_pair.sh"
. "$(dirname "$0")/small_spec.sh"
netns_pair "$NA" "$NB" $A $B
netns_rsh "$W/nsrsh" $A "$NA" $B "$NB"

# data: generated rows, ids folded into tables of 240..5000 rows
cd "$W"
small_spec small > spec.json
cat > model.json <<'EOF'
{"format": "rectrain-model", "version": 1, "name": "dlrm_rw", "model": "dlrm", "tables": "data",
 "embedding": {"dim": 16, "pooling": "sum"}, "bottom_mlp": [64, 16], "top_mlp": [64, 1],
 "interaction": {"kind": "dot", "self": false},
 "optimizer": {"dense": {"kind": "sgd", "lr": 0.1}, "sparse": {"kind": "sgd", "lr": 0.1}},
 "train": {"batch_size": 256, "epochs": 1, "seed": 3}}
EOF
"$R" gen --rows "$ROWS" --out d.tsv >/dev/null 2>&1
"$R" prep --spec spec.json --in d.tsv --out d.rshard >/dev/null 2>&1
COMMON="--data $W/d.rshard --config $W/model.json --holdout 0.1 --batch 256 --threads 1 --steps $STEPS --json"

# two ranks over the veth pair, or on shared memory: NAME TRAIN-ARGS... (its JSON into NAME.json)
veth() {
    name=$1; shift
    ip netns exec "$NA" mpirun --mca plm_rsh_agent "$W/nsrsh" --mca btl tcp,self --mca osc pt2pt \
        --mca btl_tcp_if_include 192.168.77.0/24 --mca oob_tcp_if_include 192.168.77.0/24 --bind-to none \
        -H $A:1,$B:1 -np 2 "$R" train "$@" 2> "$W/$name.err" | grep '^{"model"' > "$W/$name.json" ||
        { cat "$W/$name.err" >&2; exit 1; }
}
shm() {
    name=$1; shift
    mpirun -np 2 --bind-to none "$R" train "$@" 2> "$W/$name.err" | grep '^{"model"' > "$W/$name.json" ||
        { cat "$W/$name.err" >&2; exit 1; }
}
"$R" train $COMMON --loss-log "$W/one.txt" > one.json 2>/dev/null
veth two $COMMON --loss-log "$W/two.txt"
shm two_shm $COMMON

# part 2: the Kaggle DLRM, one plan for both transports
"$R" gen --rows 120000 --out k.tsv >/dev/null 2>&1
"$R" prep --spec "$SRC/configs/criteo_standard.json" --in k.tsv --out k.rshard >/dev/null 2>&1
rm -f k.tsv
"$R" plan --data k.rshard --ranks 2 --config "$SRC/configs/dlrm_kaggle.json" --out k_plan.json >/dev/null 2>&1
KAGGLE="--data $W/k.rshard --config $SRC/configs/dlrm_kaggle.json --plan-shards $W/k_plan.json --threads 1 --steps $K_STEPS --json"
for k in $(seq 1 "$REPS"); do
    veth "k_veth_$k" $KAGGLE
    shm "k_shm_$k" $KAGGLE
done

python3 - "$STEPS" "$K_STEPS" "$REPS" <<'EOF'
import json, statistics, sys
steps, ksteps, reps = (int(a) for a in sys.argv[1:4])
def losses(p): return [float(l.split()[1]) for l in open(p) if l.strip()]
def summary(p): return json.loads([l for l in open(p) if l.startswith('{"model"')][-1])
def split(j):
    ms = j["step_ms"]
    step = 1e3 * j["batch"] / j["samples_per_s"]
    return (f"step {step:.2f} ms: local {ms['local']:.2f}, fetch {ms['fetch']:.2f}, dense {ms['dense']:.2f}, "
            f"all-reduce {ms['allreduce']:.2f}, exchange {ms['exchange']:.2f}; exposed communication "
            f"{ms['exposed_comm']:.2f} ms ({100 * ms['exposed_comm'] / step:.0f}% of the step)")
a, b = losses("one.txt"), losses("two.txt")
one, two, shm = summary("one.json"), summary("two.json"), summary("two_shm.json")
gap = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print(f"1. small DLRM, batch 256, {steps} steps: 2 ranks in two network namespaces (veth, TCP) vs one process")
print(f"  per-step losses: {len(a)} and {len(b)} steps, largest relative gap {gap:.2e} (criterion 1e-6, SGD: docs/distributed.md)")
print(f"  AUC: one process {one['auc']:.6f}, 2 ranks {two['auc']:.6f} (gap {abs(one['auc'] - two['auc']):.1e})")
print(f"  veth:          {split(two)}")
print(f"  shared memory: {split(shm)}")
print(f"  samples/s: one process {one['samples_per_s']:.0f}, 2 ranks over veth {two['samples_per_s']:.0f}, on shared "
      f"memory {shm['samples_per_s']:.0f} (veth / shared memory {two['samples_per_s'] / shm['samples_per_s']:.2f})")
v = [summary(f"k_veth_{k}.json") for k in range(1, reps + 1)]
m = [summary(f"k_shm_{k}.json") for k in range(1, reps + 1)]
mv = statistics.median(j["samples_per_s"] for j in v)
mm = statistics.median(j["samples_per_s"] for j in m)
runs = lambda js: ", ".join("%.0f" % j["samples_per_s"] for j in js)
print(f"2. Kaggle DLRM, global batch 2048, 2 ranks x 1 thread, {ksteps} steps, one plan, medians of {reps}")
print(f"  veth:          {mv:8.0f} samples/s  ({runs(v)})")
print(f"  shared memory: {mm:8.0f} samples/s  ({runs(m)})")
print(f"  ratio {mv / mm:.2f} (criterion >= 0.9)")
print(f"  veth (last):          {split(v[-1])}")
print(f"  shared memory (last): {split(m[-1])}")
sys.exit(0 if len(a) == len(b) == steps and gap <= 1e-6 else 1)
EOF
