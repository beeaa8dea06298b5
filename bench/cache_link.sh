#!/bin/sh
# Disaggregated training over a slow network (Bagpipe's Fig. 9 and 15 on this machine): the
# embedding servers behind `rectrain bench link` (1 Gbit/s, 100 us one way, this kernel has no
# netem), a trainer with a cache of CACHE rows, and per policy the step time and the bytes per
# step, on the critical path and in the background:
#   ideal    bagpipe with a zero-cost link (the same processes, every fetch free)
#   bagpipe  the Oracle Cacher's lookahead (L chosen from the capacity), prefetch depth 4
#   none     every row of a batch fetched before it and written back after it
#   static   the hottest rows of the first 256 batches stay (FAE-like), the others as none
#   lru      least recently used, at the same capacity
# Workload: multi-hot Criteo rows (MLPerf DLRMv2 list sizes, Kaggle tables / 4), a DLRM with
# 64-dim embeddings, concatenation and a small top MLP: embedding traffic dominates, as in
# Bagpipe's setting (GPUs train the dense part fast). The trainer trains with one thread.
# Every configuration runs REPS times, in turns; medians. The last line is JSON.
# Usage: bench/cache_link.sh [ROWS] [BATCH] [STEPS] [REPS] [CACHE]   (repo root)
# CHART=FILE.png: also the step time per policy as a bar chart.
set -eu
ROWS=${1:-300000}; BATCH=${2:-512}; STEPS=${3:-300}; REPS=${4:-3}; CACHE=${5:-1048576}
R=$(pwd)/build/rectrain
[ -x "$R" ] || { echo "build first: make build" >&2; exit 1; }
W=$(mktemp -d "${TMPDIR:-/tmp}/rectrain-cache-XXXXXX")
trap 'rm -rf "$W"' EXIT INT TERM
export REC_PROGRESS=0
. "$(dirname "$0")/cache_workload.sh"
cache_workload "$W" "$ROWS"
PORT=$((31000 + $$ % 20000))
cat > "$W/c.json" <<JSON
{"format": "rectrain-cluster", "version": 1, "data": "$W/d.rshard", "model": "$W/model.json",
 "batch": $BATCH, "epochs": 1, "shuffle": false, "steps": $STEPS, "embservers": 2, "threads": 1,
 "base_port": $PORT, "peer_timeout": 60, "cache": {"policy": "bagpipe", "rows": $CACHE}}
JSON
run() { # NAME POLICY LINK
    "$R" cluster "$W/c.json" --policy "$2" --link "$3" --json 2>"$W/$1.err" | grep '^{"steps"' > "$W/$1.json" ||
        { cat "$W/$1.err" >&2; exit 1; }
}
for k in $(seq 1 "$REPS"); do
    run "ideal_$k" bagpipe 0,0
    for p in bagpipe none static lru; do run "${p}_$k" $p 1,100; done
done
python3 - "$W" "$REPS" "$BATCH" "$CACHE" <<'PYEOF'
import json, statistics, sys
w, reps, batch, cache = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def runs(n): return [json.load(open(f"{w}/{n}_{k}.json")) for k in range(1, reps + 1)]
print(f"cache over a 1 Gbit/s, 100 us link: batch {batch}, cache {cache} rows, medians of {reps}")
print(f"{'policy':>8} {'ms/step':>8} {'samples/s':>10} {'stall s':>8} {'crit rows':>10} {'crit KB':>8} "
      f"{'ahead rows':>10} {'ahead KB':>9} {'write KB':>9}")
res = {}
for p in ("ideal", "bagpipe", "none", "static", "lru"):
    r = runs(p)
    ms = statistics.median(1e3 * x["seconds"] / x["steps"] for x in r)
    st = r[0]["per_step"]
    res[p] = {"ms_per_step": ms, "samples_per_s": statistics.median(x["samples_per_s"] for x in r),
              "stall_s": statistics.median(x["stall_s"] for x in r), "lookahead": r[0]["lookahead"], **st}
    print(f"{p:>8} {ms:8.2f} {res[p]['samples_per_s']:10.0f} {res[p]['stall_s']:8.2f} {st['fetch_crit_rows']:10.0f} "
          f"{st['fetch_crit_bytes']/1e3:8.1f} {st['fetch_bg_rows']:10.0f} {st['fetch_bg_bytes']/1e3:9.1f} "
          f"{st['write_bytes']/1e3:9.1f}")
b = res["bagpipe"]["ms_per_step"]
print(f"bagpipe (L {res['bagpipe']['lookahead']}): {res['none']['ms_per_step']/b:.2f}x faster than no cache, "
      f"{res['static']['ms_per_step']/b:.2f}x static, {res['lru']['ms_per_step']/b:.2f}x lru; "
      f"{b/res['ideal']['ms_per_step']:.2f}x the ideal's step time")
with open(f"{w}/chart.tsv", "w") as c:
    c.write("policy\tms per step\n" + "".join(f"{p}\t{res[p]['ms_per_step']:.3f}\n" for p in res))
print(json.dumps({"bench": "cache_link", "batch": batch, "cache_rows": cache, "policies": res,
                  "speedup_vs_none": res["none"]["ms_per_step"] / b, "vs_ideal": b / res["ideal"]["ms_per_step"]}))
PYEOF
if [ -n "${CHART:-}" ]; then
    "$R" plot --table "$W/chart.tsv" --out "$CHART" --ylabel "ms per step" \
        --title "Embedding servers behind 1 Gbit/s, 100 us: step time by cache policy"
fi
