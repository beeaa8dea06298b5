#!/bin/sh
# The five systems composed (docs/composition.md): one small run of each cell of the table, on
# each way of training it applies to — one process, 2 ranks under mpirun (OPER's sharding),
# a Bagpipe job (`rectrain cluster`: an embedding server, the oracle, one trainer), and the GPU
# where this machine has one — printing for each its samples/s and final loss, or the refusal
# it gets before any work. A reader sees the matrix hold; the tests check each cell's numbers
# (bitwise to one process where the maths allow).
# loss: `train --json`'s mean loss of the run's epoch (a Bagpipe trainer's: its last step's).
# Data: ROWS generated Criteo rows (`gen`), their ids folded into 26 tables of 240 to 5000 rows,
# as a .rshard, a .rraw and the TSV; the Kaggle DLRM's shape at dim 16 (configs/*_small.json),
# batch 256, STEPS steps (a cell that resumes: half, then --resume to STEPS).
# Usage: bench/compose.sh [ROWS=60000] [STEPS=200]   (from the repo root; needs Open MPI)
set -eu
ROWS=${1:-60000}; STEPS=${2:-200}; HALF=$((STEPS / 2))
R=$(pwd)/build/rectrain; SRC=$(pwd)
[ -x "$R" ] || { echo "build first: make build" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "needs Open MPI (scripts/install-deps.sh)" >&2; exit 1; }
W=$(mktemp -d "${TMPDIR:-/tmp}/rectrain-compose-XXXXXX")
PIDS=""
cleanup() { for p in $PIDS; do kill "$p" 2>/dev/null || true; done; rm -rf "$W"; }
trap cleanup EXIT INT TERM
export REC_PROGRESS=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
PORT=$((20000 + $$ % 20000))
cd "$W"

# ---- data and models -------------------------------------------------------------------------
. "$SRC/bench/small_spec.sh"
small_spec compose > spec.json
"$R" gen --rows "$ROWS" --out d.tsv >/dev/null 2>&1
"$R" prep --spec spec.json --in d.tsv --out d.rshard >/dev/null 2>&1
"$R" prep --raw --in d.tsv --out d.rraw >/dev/null 2>&1
# the small configs, and dlrm_small with each optimizer pair (dense + sparse)
for m in dlrm dcn deepfm wide_deep; do cp "$SRC/configs/${m}_small.json" "$m.json"; done
python3 - <<'EOF'
import json
base = json.load(open("dlrm.json"))
for name, dense, sparse in (("sgd", "sgd", "sgd"), ("adam", "adam", "adagrad")):
    c = dict(base, name="dlrm_" + name)
    c["optimizer"] = {"dense": {"kind": dense, "lr": 0.1 if dense == "sgd" else 0.001},
                      "sparse": {"kind": sparse, "lr": 0.05}}
    json.dump(c, open(f"opt_{name}.json", "w"))
c = dict(base, name="dlrm_bf16", train=dict(base["train"], precision="bf16"))
json.dump(c, open("bf16.json", "w"))
c = dict(base, name="dlrm_bf16_tables", embedding=dict(base["embedding"], precision="bf16"))
json.dump(c, open("bf16_tables.json", "w"))
EOF

# ---- the ways of training ----------------------------------------------------------------------
COMMON="--batch 256 --threads 1 --no-shuffle --json"
SHARD="--data d.rshard"
printf '%-15s %-34s %-8s %10s %9s  %s\n' "trained by" "cell" "result" "samples/s" "loss" "note"

# Prints one line of the table from a run's output OUT (its JSON summary, or its error).
report() { # WHO CELL RC OUT [NOTE]
    who=$1 cell=$2 rc=$3 out=$4 note=${5:-}
    if [ "$rc" = 0 ]; then
        python3 - "$who" "$cell" "$out" "$note" <<'EOF'
import json, sys
who, cell, out, note = sys.argv[1:]
js = [l for l in open(out) if l.startswith("{") and '"samples_per_s"' in l]
j = json.loads(js[-1]) if js else {}
sps = f"{j['samples_per_s']:>10.0f}" if "samples_per_s" in j else f"{'-':>10}"
loss = f"{j['loss']:>9.4f}" if "loss" in j else f"{'-':>9}"
auc = f"auc {j['auc']:.4f}; " if "auc" in j else ""
print(f"{who:<15} {cell:<34} {'ok':<8} {sps} {loss}  {auc}{note}")
EOF
    else
        why=$(grep -v '^{' "$out" | tail -1 | cut -c1-160)
        printf '%-15s %-34s %-8s %10s %9s  %s\n' "$who" "$cell" "FAILED" "-" "-" "$why"
        FAILED=$((FAILED + 1))
    fi
}
FAILED=0

# A refusal expected before any work: prints its reason; a run that does not refuse fails.
refused() { # WHO CELL CMD...
    who=$1 cell=$2; shift 2
    if "$@" > r.out 2>&1; then
        printf '%-15s %-34s %-8s\n' "$who" "$cell" "FAILED: trained, the table says refused"; FAILED=$((FAILED + 1))
    else
        printf '%-15s %-34s %-8s %10s %9s  %s\n' "$who" "$cell" "refused" "-" "-" "$(grep -m1 '^rectrain' r.out | cut -c1-200)"
    fi
}

one() { # CELL ARGS...: one process
    cell=$1; shift
    rc=0; "$R" train $COMMON "$@" > o.out 2>&1 || rc=$?
    report "one process" "$cell" $rc o.out
}
ranks() { # CELL ARGS...: 2 ranks under mpirun
    cell=$1; shift
    rc=0; timeout 300 mpirun -np 2 --oversubscribe --bind-to none "$R" train $COMMON "$@" > m.out 2>&1 || rc=$?
    report "mpirun -np 2" "$cell" $rc m.out
}
cluster_config() { # JSON-KEYS: c.json, a Bagpipe job with those keys, on the next free ports
    PORT=$((PORT + 10))
    printf '{"format": "rectrain-cluster", "version": 1, "batch": 256, "steps": %d, "shuffle": false, "threads": 1, "base_port": %d, "peer_timeout": 60, "cache": {"rows": 6000}, %s}\n' \
        "$STEPS" "$PORT" "$1" > c.json
}
bagpipe() { # CELL JSON-KEYS ARGS...: rectrain cluster, the config's keys given as JSON text
    cell=$1; cluster_config "$2"; shift 2
    rc=0; timeout 300 "$R" cluster c.json --json --insecure "$@" > b.out 2>&1 || rc=$?
    report "bagpipe" "$cell" $rc b.out
}
worker() { # a prep-worker on PORT+5 (FastFlow's remote CPU), stopped by the caller
    PORT=$((PORT + 10))
    "$R" prep-worker --listen "tcp://127.0.0.1:$((PORT + 5))" --threads 1 --insecure 2>/dev/null & WPID=$!
    PIDS="$PIDS $WPID"
}

# ---- one process and mpirun: every column ------------------------------------------------------
for way in one ranks; do
    $way "shard, dlrm, adagrad+rw-adagrad" $SHARD --config dlrm.json --steps $STEPS
    $way ".rraw + spec (RAP)" --data d.rraw --spec spec.json --config dlrm.json --steps $STEPS
    $way "tsv + spec" --data d.tsv --spec spec.json --config dlrm.json --steps $STEPS
    worker
    $way "tsv + --workers, --offload auto" --data d.tsv --spec spec.json --config dlrm.json --steps $STEPS \
        --workers "tcp://127.0.0.1:$((PORT + 5))" --insecure
    kill "$WPID" 2>/dev/null || true
    for m in dcn deepfm wide_deep; do $way "model $m" $SHARD --config $m.json --steps $STEPS; done
    $way "sgd + sgd" $SHARD --config opt_sgd.json --steps $STEPS
    $way "adam + adagrad" $SHARD --config opt_adam.json --steps $STEPS
    $way "--precision bf16" $SHARD --config dlrm.json --steps $STEPS --precision bf16
    rm -rf ck npy
    $way "--ckpt, --npy" $SHARD --config dlrm.json --steps $HALF --ckpt ck --npy npy
    rc=0; "$R" export --ckpt ck --format onnx --out m.onnx --overwrite > x.out 2>&1 || rc=$?
    report "$( [ $way = one ] && echo 'one process' || echo 'mpirun -np 2')" "  export --format onnx" $rc x.out "$(ls npy | wc -l) .npy files"
    $way "--resume (half, then the rest)" $SHARD --config dlrm.json --steps $STEPS --ckpt ck --resume
    $way "--holdout 0.1 (eval)" $SHARD --config dlrm.json --steps $STEPS --holdout 0.1
done
one "bf16 tables" $SHARD --config bf16_tables.json --steps $STEPS
ranks "bf16 tables" $SHARD --config bf16_tables.json --steps $STEPS
one "--tune (RecFlex)" $SHARD --config dlrm.json --steps $STEPS --tune
refused "mpirun -np 2" "--tune (RecFlex)" mpirun -np 2 --oversubscribe --bind-to none "$R" train $COMMON $SHARD \
    --config dlrm.json --steps 2 --tune

# ---- Bagpipe: the oracle reads the data, the trainers hold a cache ------------------------------
bagpipe "shard, dlrm" '"data": "d.rshard", "model": "dlrm.json"'
bagpipe ".rraw + spec (RAP)" '"data": "d.rraw", "spec": "spec.json", "model": "dlrm.json"'
bagpipe "tsv + spec, 1 prep-worker" '"data": "d.tsv", "spec": "spec.json", "prep_workers": 1, "model": "dlrm.json"'
bagpipe "model dcn" '"data": "d.rshard", "model": "dcn.json"'
bagpipe "sgd + sgd" '"data": "d.rshard", "model": "opt_sgd.json"'
bagpipe "adam + adagrad" '"data": "d.rshard", "model": "opt_adam.json"'
rm -rf bck bnpy
bagpipe "--ckpt, --npy" '"data": "d.rshard", "model": "dlrm.json"' --ckpt bck --npy bnpy
bagpipe "bf16 (train.precision)" '"data": "d.rshard", "model": "bf16.json"'
bagpipe "bf16 tables" '"data": "d.rshard", "model": "bf16_tables.json"'
bagpipe "--eval (at the end)" '"data": "d.rshard", "model": "dlrm.json"' --eval d.rshard
bagpipe "2 trainers (mpirun)" '"data": "d.rshard", "model": "dlrm.json", "trainers": 2'
bagpipe "model deepfm" '"data": "d.rshard", "model": "deepfm.json"'
bagpipe "model wide_deep" '"data": "d.rshard", "model": "wide_deep.json"'

# ---- the GPU ------------------------------------------------------------------------------------
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    one "GPU: shard, dlrm" $SHARD --config dlrm.json --steps $STEPS --device cuda
    one "GPU: .rraw, --prep-device cuda" --data d.rraw --spec spec.json --config dlrm.json --steps $STEPS \
        --device cuda --prep-device cuda
    one "GPU: --precision bf16" $SHARD --config dlrm.json --steps $STEPS --device cuda --precision bf16
else
    printf '%-15s %-34s %-8s\n' "GPU" "(every cell)" "skipped: no NVIDIA GPU here"
fi
echo "($FAILED failed)"
[ "$FAILED" = 0 ]
