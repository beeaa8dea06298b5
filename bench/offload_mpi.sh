#!/bin/sh
# Offloading under mpirun (docs/offload.md, "Under mpirun"): 2 ranks of one thread train the
# small DLRM from TSV with configs/criteo_heavy.json on multi-hot rows, where preprocessing is
# the bottleneck (each rank prepares every global batch), without workers and with one
# prep-worker of one thread: every piece remote at p'2 and at p'3, half at p'3, --offload auto
# (its first run profiles into a fresh store, the others start from it), and every piece
# remote at p'2 from a worker that keeps no answers (--keep-mb 0: it makes each piece for each
# rank, the design without a shared pool). REPS rounds, the
# configurations alternating within each; a fresh worker for each run. Prints the medians of
# samples/s (rank 0's), their ratio to no workers, the pieces the worker made and answered
# again for the other rank, and the ceiling auto measured: Gthp, the 2 ranks training alone.
# PIN 0: nothing is pinned, so where the worker has no cores of its own (a 2-core machine) it
# takes them from the ranks. PIN 1: the ranks share core 0 and the worker has core 1, as a
# trainer host and a CPU host would (scaled down; the local runs leave core 1 idle).
# Usage: bench/offload_mpi.sh [ROWS=80000] [STEPS=60] [REPS=3] [PIN=0]   (from the repo root)
set -eu
ROWS=${1:-80000}; STEPS=${2:-60}; REPS=${3:-3}; PIN=${4:-0}
RANKS=""; WORKER=""
if [ "$PIN" = 1 ]; then
    command -v taskset >/dev/null || { echo "PIN 1 needs taskset (util-linux)" >&2; exit 1; }
    [ "$(nproc)" -ge 2 ] || { echo "PIN 1 needs 2 cores" >&2; exit 1; }
    RANKS="taskset -c 0"; WORKER="taskset -c 1"
fi
R=$(pwd)/build/rectrain
[ -x "$R" ] || { echo "build first: make build" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "needs Open MPI (scripts/install-deps.sh)" >&2; exit 1; }
W=$(mktemp -d "${TMPDIR:-/tmp}/rectrain-offmpi-XXXXXX")
PORT=$((30000 + $$ % 20000))
WPID=""
cleanup() { [ -n "$WPID" ] && kill "$WPID" 2>/dev/null; rm -rf "$W"; }
trap cleanup EXIT INT TERM
export REC_PROGRESS=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
"$R" gen --rows "$ROWS" --scale 0.01 --multi-hot --out "$W/d.tsv" >/dev/null 2>&1
run() { # NAME [ARGS...]: one mpirun job, with a fresh worker when ARGS are given
    name=$1; shift
    if [ $# -gt 0 ]; then
        $WORKER "$R" prep-worker --listen "tcp://127.0.0.1:$PORT" --threads 1 --keep-mb "$KEEP" 2>"$W/$name.wlog" &
        WPID=$!
        sleep 0.5
        set -- --workers "tcp://127.0.0.1:$PORT" "$@"
    fi
    $RANKS mpirun -np 2 --oversubscribe --bind-to none "$R" train --data "$W/d.tsv" --spec configs/criteo_heavy.json \
        --config configs/dlrm_small.json --threads 1 --no-shuffle --steps "$STEPS" --json "$@" 2>"$W/$name.err" |
        grep '^{"model"' > "$W/$name.json" || { cat "$W/$name.err" >&2; exit 1; }
    if [ -n "$WPID" ]; then kill "$WPID"; wait "$WPID" || true; WPID=""; fi
}
KEEP=256
run auto_first --offload auto --offload-store "$W/store.json"
for k in $(seq 1 "$REPS"); do
    run "local_$k"
    run "p2_$k" --offload 1 --offload-at p2
    run "p3_$k" --offload 1 --offload-at p3
    run "half_$k" --offload 0.5 --offload-at p3
    run "auto_$k" --offload auto --offload-store "$W/store.json"
    KEEP=0
    run "nokeep_$k" --offload 1 --offload-at p2
    KEEP=256
done

python3 - "$W" "$REPS" "$STEPS" "$(nproc)" "$PIN" <<'EOF'
import json, re, statistics, sys
w, reps, steps, cores, pin = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5] == "1"
def js(n): return json.load(open(f"{w}/{n}.json"))
def med(p): return statistics.median(js(f"{p}_{k}")["samples_per_s"] for k in range(1, reps + 1))
def counts(p):
    made = again = 0
    for k in range(1, reps + 1):
        m = re.search(r"stopped after (\d+) pieces?, and (\d+) answered again", open(f"{w}/{p}_{k}.wlog").read())
        if m: made, again = made + int(m.group(1)), again + int(m.group(2))
    return made // reps, again // reps
a = js("auto_first")["offload"]
base = med("local")
where = "ranks on core 0, worker on core 1" if pin else f"nothing pinned, {cores} cores"
print(f"offload under mpirun: 2 ranks x 1 thread + 1 worker x 1 thread ({where}), criteo_heavy, "
      f"{steps} steps of 1024, samples/s (rank 0), median of {reps}")
print(f"  auto's profile: Gthp {a['gthp']:.0f} rows/s (the ranks training alone: the ceiling), "
      f"Lthp {a['lthp']:.0f} (with their own preprocessing), Rthp {a['rthp'][0]:.0f} / {a['rthp'][1]:.0f} / "
      f"{a['rthp'][2]:.0f} (everything remote at p'1 / p'2 / p'3)")
print(f"  {'run':<24}{'samples/s':>10}{'vs none':>9}{'worker made':>13}{'answered again':>16}")
for p, what in (("local", "no workers"), ("p2", "all remote at p'2"), ("p3", "all remote at p'3"),
                ("half", "half remote at p'3"), ("auto", "--offload auto"),
                ("nokeep", "p'2, --keep-mb 0")):
    m = med(p)
    made, again = counts(p) if p != "local" else ("", "")
    print(f"  {what:<24}{m:>10.0f}{m / base:>8.2f}x{made:>13}{again:>16}")
d = js("auto_1")["offload"]["decision"]
print(f"  auto chose: {'offload ' + format(d['ratio'], '.0%') + ' at ' + d['point'] if d['offload'] else 'no offload'}")
EOF
