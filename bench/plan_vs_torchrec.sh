#!/bin/sh
# OPER against TorchRec's own sharding plans, on the same tables and sampled batches:
#  1. predicted: TorchRec 1.9.2's planner (dev/torchrec_plan.py, its default topology, 8 ranks
#     per host) at 8, 64 and 1024 ranks, global batch 65536, scored by `rectrain plan
#     --simulate --torchrec DIR` beside every rectrain plan, for the Kaggle table sizes
#     (configs/criteo_standard.json, configs/dlrm_kaggle.json: dim 16) and the Terabyte
#     recipe's (MLPerf's 26 tables of 3 to 40M rows, configs/dlrm_terabyte.json: dim 128), on
#     ROWS generated rows (`gen --scale 4` folded into the Terabyte sizes by modulo);
#  2. trained: OPER's and TorchRec's plans for 2 and 4 ranks (Kaggle sizes, the Kaggle DLRM,
#     global batch 2048, STEPS steps) by `mpirun ... train --plan-shards`, rank 0's measured
#     step split and bytes sent beside the plan's predictions (embedding ms on the busiest
#     rank, with the bandwidths the job measured; bytes sent per rank), and beside the same
#     prediction calibrated with the executor's work per unit measured by a row-wise run at
#     as many ranks (plan --slice-ns, --lookup-ns, --get-ns, --ranks-per-core). The measured
#     embedding time leaves out the wait for the slowest rank at the exchange (its "skew"
#     column: the dense work's jitter between ranks, the same under every plan).
# Usage: bench/plan_vs_torchrec.sh VENV [ROWS=400000] [STEPS=40]   (from the repo root)
#   VENV: a virtual environment with torch 2.14, fbgemm-gpu-cpu 1.9.0 and torchrec 1.9.2
#   (docs/distributed.md, "Bringing a TorchRec plan"). KEEP=DIR keeps the plans and data there.
set -eu
VENV=${1:?usage: bench/plan_vs_torchrec.sh VENV [ROWS] [STEPS]}; ROWS=${2:-400000}; STEPS=${3:-40}
R=$(pwd)/build/rectrain
PY="$VENV/bin/python"
[ -x "$R" ] || { echo "build first: make build" >&2; exit 1; }
[ -x "$PY" ] || { echo "$PY: no python in the virtual environment $VENV" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "needs Open MPI (scripts/install-deps.sh)" >&2; exit 1; }
if [ -n "${KEEP:-}" ]; then W=$KEEP; mkdir -p "$W"; else W=$(mktemp -d "${TMPDIR:-/tmp}/rectrain-trp-XXXXXX"); trap 'rm -rf "$W"' EXIT; fi
export REC_PROGRESS=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# MLPerf DLRM's Terabyte tables (day_0..23 hashed modulo 40M): the sizes TorchRec's DLRM example uses
TB_ROWS=40000000,39060,17295,7424,20265,3,7122,1543,63,40000000,3067956,405282,10,2209,11938,155,4,976,14,40000000,40000000,40000000,590152,12973,108,36
python3 - "$TB_ROWS" > "$W/terabyte.json" <<'EOF'
import json, sys
rows = [int(x) for x in sys.argv[1].split(",")]
s = json.load(open("configs/criteo_standard.json"))
s["name"] = "criteo_terabyte_sizes"
for k, ft in enumerate(s["sparse"]):
    s["tables"][ft["table"]]["rows"] = rows[k]
    ft["ops"] = [op if op["op"] != "modulo" else {"op": "modulo", "divisor": rows[k]} for op in ft["ops"]]
json.dump(s, sys.stdout, indent=1)
EOF
"$R" gen --rows "$ROWS" --out "$W/k.tsv" >/dev/null 2>&1
"$R" prep --spec configs/criteo_standard.json --in "$W/k.tsv" --out "$W/kaggle.rshard" >/dev/null 2>&1
"$R" gen --rows "$ROWS" --scale 4 --out "$W/t.tsv" >/dev/null 2>&1
"$R" prep --spec "$W/terabyte.json" --in "$W/t.tsv" --out "$W/terabyte.rshard" >/dev/null 2>&1
rm -f "$W/k.tsv" "$W/t.tsv"

plans() { # NAME SPEC CONFIG BATCH RANKS...
    name=$1 spec=$2 config=$3 batch=$4; shift 4
    mkdir -p "$W/$name"
    for n in "$@"; do
        "$PY" dev/torchrec_plan.py --spec "$spec" --config "$config" --ranks "$n" --batch "$batch" \
            --out "$W/$name/torchrec-$n.json" 2>"$W/$name/torchrec-$n.log" || { cat "$W/$name/torchrec-$n.log" >&2; exit 1; }
        grep '^torchrec_plan:' "$W/$name/torchrec-$n.log" >&2
    done
}
plans kaggle configs/criteo_standard.json configs/dlrm_kaggle.json 65536 8 64 1024
plans terabyte "$W/terabyte.json" configs/dlrm_terabyte.json 65536 8 64 1024
plans train configs/criteo_standard.json configs/dlrm_kaggle.json 2048 2 4

echo "== predicted: Kaggle sizes (dim 16), global batch 65536"
"$R" plan --data "$W/kaggle.rshard" --config configs/dlrm_kaggle.json --simulate --ranks 8,64,1024 --batch 65536 \
    --torchrec "$W/kaggle"
echo
echo "== predicted: Terabyte sizes (dim 128), global batch 65536"
"$R" plan --data "$W/terabyte.rshard" --config configs/dlrm_terabyte.json --simulate --ranks 8,64,1024 --batch 65536 \
    --torchrec "$W/terabyte"

echo
echo "== trained: Kaggle sizes, the Kaggle DLRM, global batch 2048, $STEPS steps"
COMMON="--data $W/kaggle.rshard --config configs/dlrm_kaggle.json --steps $STEPS --json --threads 1"
train() { # TAG PLAN NP
    mpirun -np "$3" --oversubscribe --bind-to none "$R" train $COMMON --plan-shards "$2" 2>"$W/$1.err" |
        grep '^{"model"' > "$W/$1.out" || { cat "$W/$1.err" >&2; exit 1; }
}
NPROC=$(nproc)
for np in 2 4; do
    "$R" plan --data "$W/kaggle.rshard" --config configs/dlrm_kaggle.json --ranks "$np" --out "$W/oper-$np.json" >/dev/null 2>&1
    "$R" plan --data "$W/kaggle.rshard" --config configs/dlrm_kaggle.json --ranks "$np" --kind row --out "$W/row-$np.json" \
        >/dev/null 2>&1
    train "row-$np" "$W/row-$np.json" "$np" # the calibration: the executor's work per unit on this machine
    units=$(python3 -c "import json,sys; u=json.load(open(sys.argv[1]))['unit_ns']; \
print('--slice-ns %.3f --lookup-ns %.3f --get-ns %.3f' % (u['slice_id'], u['owner_record'], u['fetched_row']))" "$W/row-$np.out")
    cores=$(python3 -c "print(max(1.0, $np / $NPROC))")
    for p in oper "train/torchrec"; do
        f="$W/$p-$np.json"
        tag=$(echo "$p" | sed 's|train/||')-$np
        train "$tag" "$f" "$np"
        gbps=$(python3 -c "import json,sys; g=json.load(open(sys.argv[1]))['gbps']; \
print('--bw-p2p %.4f --bw-ar %.4f' % (g['p2p'], g['allreduce']))" "$W/$tag.out")
        # the plan predicted with the calibration's units, this job's bandwidths and the ranks per core
        "$R" plan --data "$W/kaggle.rshard" --config configs/dlrm_kaggle.json --ranks "$np" --batch 2048 --score "$f" \
            $units $gbps --ranks-per-core "$cores" > "$W/$tag.pred" 2>&1 || { cat "$W/$tag.pred" >&2; exit 1; }
    done
done
python3 - "$W" <<'EOF'
import json, re, sys
w = sys.argv[1]
cols = ["local", "fetch", "dense", "allreduce", "exchange", "skew"]
print(f"  {'run':<14}{'samples/s':>10}" + "".join(f"{c:>11}" for c in cols) +
      f"{'embed ms':>10}{'predicted':>10}{'calibrated':>11}{'ratio':>7}{'sent MB':>9}{'predicted':>10}{'worst rank':>12}")
for np in (2, 4):
    u = json.load(open(f"{w}/row-{np}.out"))["unit_ns"]
    print(f"  calibrated on the row-wise plan at {np} ranks: {u['slice_id']:.1f} ns a slice id, "
          f"{u['owner_record']:.1f} ns an owner's record, {u['fetched_row']:.1f} ns a fetched row")
    for p in ("oper", "torchrec"):
        j = json.load(open(f"{w}/{p}-{np}.out"))
        log = open(f"{w}/{p}-{np}.err").read()
        pred = float(re.search(r"predicted per step: ([0-9.]+) ms", log).group(1))
        cal = float(re.search(r"lower max step than \S+ \(\w+: ([0-9.]+) ms", open(f"{w}/{p}-{np}.pred").read()).group(1))
        ms = j["step_ms"]
        emb = ms["local"] + ms["fetch"] + ms["exchange"] - ms["skew"]
        worst = j["worst_sent_vs_plan"]
        print(f"  {f'{np} ranks {p}':<14}{j['samples_per_s']:>10.0f}" + "".join(f"{ms[c]:>9.3f}ms" for c in cols) +
              f"{emb:>10.3f}{pred:>10.3f}{cal:>11.3f}{emb / cal:>7.2f}{j['sent_bytes_per_step'] / 1e6:>9.3f}"
              f"{j['plan_sent_bytes_per_step'] / 1e6:>10.3f}{'r%d %.1f%%' % (worst['rank'], 100 * worst['deviation']):>12}")
print("  (rank 0's split and bytes; embed ms = local + fetch + exchange - skew (the exchange's wait for the slowest\n"
      "   rank); predicted = the plan's busiest rank,\n"
      "   the job's own prediction; calibrated = the same with the row-wise run's work per unit (plan --slice-ns,\n"
      "   --lookup-ns, --get-ns), the job's bandwidths and the ranks per core; ratio = embed / calibrated;\n"
      "   worst rank: |sent / predicted - 1| over all ranks)")
EOF
