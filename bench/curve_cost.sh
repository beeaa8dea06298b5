#!/bin/sh
# What CurveZMQ costs (docs/security.md): the same runs with CURVE (keys) and in plain text
# (--insecure), alternating, REPS times each; medians and their ratio.
#   cache    the Bagpipe link bench (bench/cache_link.sh's workload): `rectrain cluster` with the
#            servers behind `rectrain bench link` (1 Gbit/s, 100 us), policies bagpipe and none
#            (none moves every row of every batch: the most traffic); ms per step. Twice: every
#            process on both cores (shared), and split as on separate hosts, like the offload
#            bench: the trainer on core 0, the servers, oracle and links on core 1 (split)
#   offload  the offload bench (bench/offload_sweep.sh heavy): the trainer on core 0, one
#            prep-worker on core 1, every piece made by the worker at p'3; samples/s
# The last line is JSON with every median and ratio (curve / plain: ms per step, and plain /
# curve: samples/s, so that 1.10 is 10% slower with CURVE).
# Usage: bench/curve_cost.sh [REPS] [CACHE_ROWS] [CACHE_STEPS] [OFFLOAD_ROWS] [OFFLOAD_STEPS]   (repo root)
set -eu
REPS=${1:-5}; CROWS=${2:-200000}; CSTEPS=${3:-200}; OROWS=${4:-60000}; OSTEPS=${5:-60}
R=$(pwd)/build/rectrain
[ -x "$R" ] || { echo "build first: make build" >&2; exit 1; }
command -v taskset >/dev/null || { echo "needs taskset (util-linux)" >&2; exit 1; }
[ "$(nproc)" -ge 2 ] || { echo "needs 2 cores: one for the trainer, one for the worker" >&2; exit 1; }
W=$(mktemp -d "${TMPDIR:-/tmp}/rectrain-curve-XXXXXX")
PORT=$((30000 + $$ % 20000))
WPIDS=""
cleanup() { for p in $WPIDS; do kill "$p" 2>/dev/null || true; done; rm -rf "$W"; }
trap cleanup EXIT INT TERM
export REC_PROGRESS=0

# the cache bench: the cluster makes its own keys (CURVE) unless --insecure
. "$(dirname "$0")/cache_workload.sh"
cache_workload "$W" "$CROWS"
cat > "$W/c.json" <<JSON
{"format": "rectrain-cluster", "version": 1, "data": "$W/d.rshard", "model": "$W/model.json",
 "batch": 512, "epochs": 1, "shuffle": false, "steps": $CSTEPS, "embservers": 2, "threads": 1,
 "base_port": $PORT, "peer_timeout": 60, "cache": {"policy": "bagpipe", "rows": 1048576}}
JSON
cluster() { # NAME POLICY shared|split [--insecure]
    name=$1; pol=$2; place=$3; shift 3
    if [ "$place" = shared ]; then
        "$R" cluster "$W/c.json" --policy "$pol" --link 1,100 --json "$@" 2>"$W/$name.err" | grep '^{"steps"' > "$W/$name.json" ||
            { cat "$W/$name.err" >&2; exit 1; }
        return
    fi
    # split: everything starts on core 1; the trainer (every thread) moves to core 0 once it runs
    taskset -c 1 "$R" cluster "$W/c.json" --policy "$pol" --link 1,100 --json "$@" 2>"$W/$name.err" |
        grep '^{"steps"' > "$W/$name.json" &
    cpid=$!
    t=""; i=0
    while [ -z "$t" ] && [ $i -lt 1000 ]; do
        t=$(pgrep -f "^rectrain train --oracle-cacher tcp://127.0.0.1:$((PORT + 2)) " | head -1 || true); i=$((i + 1)); sleep 0.005
    done
    [ -n "$t" ] && taskset -a -cp 0 "$t" >/dev/null
    wait $cpid || { cat "$W/$name.err" >&2; exit 1; }
    [ -n "$t" ] || { echo "split: the trainer was not found to move to core 0" >&2; exit 1; }
}

# the offload bench: a worker speaking CURVE and one speaking plain text, both on core 1
"$R" gen --rows "$OROWS" --scale 0.01 --multi-hot --out "$W/o.tsv" >/dev/null 2>&1
"$R" keygen --out "$W/svc" >/dev/null && "$R" keygen --out "$W/tr" >/dev/null
cp "$W/tr/self.pub" "$W/svc/allow/tr.pub" && cp "$W/svc/self.pub" "$W/tr/server.pub"
taskset -c 1 "$R" prep-worker --listen "tcp://127.0.0.1:$((PORT + 40))" --threads 1 2>"$W/wp.log" &
WPIDS="$!"
taskset -c 1 "$R" prep-worker --listen "tcp://127.0.0.1:$((PORT + 41))" --threads 1 --keys "$W/svc" 2>"$W/wc.log" &
WPIDS="$WPIDS $!"
sleep 0.5
offload() { # NAME PORT [--keys DIR]
    name=$1; p=$2; shift 2
    taskset -c 0 "$R" train --data "$W/o.tsv" --spec configs/criteo_heavy.json --config configs/dlrm_small.json --threads 1 \
        --no-shuffle --steps "$OSTEPS" --workers "tcp://127.0.0.1:$p" --offload 1 --offload-at p3 --loss-log "$W/$name.loss" \
        --json "$@" 2>"$W/$name.err" | grep '^{"model"' > "$W/$name.json" || { cat "$W/$name.err" >&2; exit 1; }
}

for k in $(seq 1 "$REPS"); do
    for pol in bagpipe none; do
        for place in shared split; do
            cluster "${pol}_${place}_plain_$k" $pol $place --insecure
            cluster "${pol}_${place}_curve_$k" $pol $place
        done
    done
    offload "off_plain_$k" $((PORT + 40))
    offload "off_curve_$k" $((PORT + 41)) --keys "$W/tr"
done

python3 - "$W" "$REPS" <<'EOF'
import filecmp, json, statistics, sys
w, reps = sys.argv[1], int(sys.argv[2])
load = lambda n: json.load(open(f"{w}/{n}.json"))
med = lambda xs: statistics.median(xs)
res = {}
print(f"CurveZMQ against plain text, medians of {reps} alternating runs")
print(f"{'run':<28} {'plain':>10} {'curve':>10} {'ratio':>7}")
for pol in ("bagpipe", "none"):
    for place in ("shared", "split"):
        n = f"{pol}_{place}"
        ms = {m: med([1e3 * load(f"{n}_{m}_{k}")["seconds"] / load(f"{n}_{m}_{k}")["steps"] for k in range(1, reps + 1)])
              for m in ("plain", "curve")}
        kb = load(f"{n}_curve_1")["per_step"]
        ratio = ms["curve"] / ms["plain"]
        res[f"cache_{n}"] = {"ms_per_step_plain": ms["plain"], "ms_per_step_curve": ms["curve"], "ratio": ratio,
                             "kb_per_step": (kb["fetch_crit_bytes"] + kb["fetch_bg_bytes"] + kb["write_bytes"]) / 1e3}
        print(f"{'cache ' + pol + ' ' + place + ', ms/step':<28} {ms['plain']:10.2f} {ms['curve']:10.2f} {ratio:7.3f}")
sps = {m: med([load(f"off_{m}_{k}")["samples_per_s"] for k in range(1, reps + 1)]) for m in ("plain", "curve")}
remote = min(load(f"off_curve_{k}")["offload"]["pieces_remote"] for k in range(1, reps + 1))
ratio = sps["plain"] / sps["curve"]
res["offload_p3"] = {"samples_per_s_plain": sps["plain"], "samples_per_s_curve": sps["curve"], "ratio": ratio,
                     "min_pieces_remote_curve": remote}
print(f"{'offload p3, samples/s':<28} {sps['plain']:10.0f} {sps['curve']:10.0f} {ratio:7.3f}")
same = all(filecmp.cmp(f"{w}/off_plain_1.loss", f"{w}/off_{m}_{k}.loss", shallow=False)
           for m in ("plain", "curve") for k in range(1, reps + 1))
print(f"offload losses, every run: {'bitwise equal' if same else 'DIFFER'}; pieces made remotely with CURVE: >= {remote}")
worst = max(r["ratio"] for r in res.values())
print(f"worst: CURVE {100 * (worst - 1):.1f}% slower than plain text")
print(json.dumps({"bench": "curve_cost", "reps": reps, "runs": res, "worst_ratio": worst, "offload_losses_equal": same}))
EOF
