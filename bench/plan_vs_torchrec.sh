#!/bin/sh
# OPER against TorchRec's own sharding plans, on the same tables and sampled batches, with
# TorchRec planning at several batches per rank (its planner's batch_size; BATCHES, default
# "2048 8192 65536/N": 2048 and 8192 a rank, and a global batch of 65536 split over N ranks),
# each plan beside OPER's at the same global batch (the batch per rank x N):
#  1. predicted: TorchRec 1.9.2's planner (dev/torchrec_plan.py --batch-per-rank, its default
#     topology, 8 ranks per host) at 8, 64 and 1024 ranks, for the Kaggle table sizes
#     (configs/criteo_standard.json, configs/dlrm_kaggle.json: dim 16) and the Terabyte recipe's
#     (MLPerf's 26 tables of 3 to 40M rows, configs/dlrm_terabyte.json: dim 128), scored by
#     `rectrain plan --simulate --torchrec DIR` beside every rectrain plan, one call per rank
#     count and batch per rank (DIR holds TorchRec's plans for that batch per rank), on ROWS
#     generated rows (`gen --scale 4` folded into the Terabyte sizes by modulo); a global batch
#     over ROWS is skipped (the default ROWS, 8192 x 1024, holds the largest). Prints each
#     `--simulate` table, then one summary line per plan pair;
#  2. trained: for each of RANKS (default "2 4 veth": 2 ranks, 4 ranks sharing 2 cores, and 2
#     ranks on two network namespaces joined by veth, TCP only; Kaggle sizes, the Kaggle DLRM,
#     TROWS generated rows, `--threads 1`) and each batch per rank: a first row-wise run, whose
#     units build OPER's plan for that global batch; then the row-wise plan (the calibration),
#     OPER's and TorchRec's, REPS runs each (default 5), each plan first in turn, STEPS steps
#     at 2048 a rank and as many samples at larger batches (at least 6 steps); each plan
#     predicted with the row-wise runs' median units and cache terms (plan --slice-ns,
#     --lookup-ns, --get-ns, --miss-ns, --rep-row-ns, --cache-mb: measured under the ranks' own
#     sharing of the cores, so --ranks-per-core stays 1) and its own runs' median bandwidths.
#     Prints per rank count: each plan's median samples/s and rank 0's median embedding time
#     (local + fetch + exchange, less the exchange's wait for the slowest rank, "skew", shown
#     beside), each with its spread over the plan's runs (max / min - 1: the machine's noise),
#     the predicted max-rank embedding time, their ratio, the worst rank's bytes sent against
#     the plan's, and samples/s over that of TorchRec's plan for the batch.
# Every prediction and OPER plan goes through predict() below, which runs `rectrain plan`.
# rectrain commands it runs: gen, prep, plan (--kind row --out, --out, --simulate --torchrec,
# --score), and `mpirun -np N rectrain train --plan-shards --json --threads 1`.
# Usage: bench/plan_vs_torchrec.sh VENV [ROWS=8388608] [STEPS=24]   (from the repo root)
#   VENV: a virtual environment with torch 2.14, fbgemm-gpu-cpu 1.9.0 and torchrec 1.9.2
#   (docs/distributed.md, "Bringing a TorchRec plan").
#   PART=predicted or PART=trained runs one part alone; BATCHES="2048 8192 65536/N" the
#   batches per rank (B/N: a global batch B); TROWS=400000 the trained part's rows; RANKS and
#   REPS (above); veth needs root and iproute2.
#   KEEP=DIR keeps the plans and data there, and a later run with the same KEEP reuses them
#   (TorchRec's plans when their "planner" names the same ranks, batch per rank and dim).
# Time on this 2-core machine while a CI run shared it: the predicted part 22 min the first
# time (TorchRec's planner takes 2-4.5 min a plan at 1024 ranks, two at once), 6 min again with
# KEEP's plans; the trained part, 9 x 16 runs of `train` at the defaults, 45 min.
set -eu
VENV=${1:?usage: bench/plan_vs_torchrec.sh VENV [ROWS] [STEPS]}; ROWS=${2:-8388608}; STEPS=${3:-24}
BATCHES=${BATCHES:-2048 8192 65536/N}; TROWS=${TROWS:-400000}; PART=${PART:-all}
RANKS=${RANKS:-2 4 veth}; REPS=${REPS:-5}
R=$(pwd)/build/rectrain
PY="$VENV/bin/python"
[ -x "$R" ] || { echo "build first: make build" >&2; exit 1; }
[ -x "$PY" ] || { echo "$PY: no python in the virtual environment $VENV" >&2; exit 1; }
"$PY" -c "import torchrec" 2>/dev/null || { echo "$PY: cannot import torchrec (docs/distributed.md, \"Bringing a TorchRec plan\")" >&2; exit 1; }
case $PART in all|predicted|trained) ;; *) echo "PART=$PART: all, predicted or trained" >&2; exit 1;; esac
command -v mpirun >/dev/null || [ "$PART" = predicted ] || { echo "needs Open MPI (scripts/install-deps.sh)" >&2; exit 1; }
if [ -n "${KEEP:-}" ]; then W=$KEEP; mkdir -p "$W"; else W=$(mktemp -d "${TMPDIR:-/tmp}/rectrain-trp-XXXXXX"); trap 'rm -rf "$W"' EXIT; fi
export REC_PROGRESS=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
NPROC=$(nproc)
KSPEC=configs/criteo_standard.json KCONF=configs/dlrm_kaggle.json

# The one prediction command: `rectrain plan` on DATA's sampled global batches of BATCH for
# RANKS, with the rest of the arguments (--simulate, --score, --kind, --out, calibration).
predict() { # DATA CONFIG RANKS BATCH ARGS...
    data=$1 config=$2 ranks=$3 batch=$4; shift 4
    "$R" plan --data "$data" --config "$config" --ranks "$ranks" --batch "$batch" "$@"
}

per_rank() { # B N: the batch per rank B, or for B/N (a global batch B) B / N
    case $1 in */N) echo $(( ${1%/N} / $2 ));; *) echo "$1";; esac
}

# TorchRec's plan for N ranks at PER_RANK a rank in OUT, unless a kept run's OUT says it
# planned the same ranks, batch per rank and dim.
tr_plan() { # SPEC CONFIG N PER_RANK OUT
    mkdir -p "$(dirname "$5")"
    if [ -s "$5" ] && python3 - "$5" "$2" "$3" "$4" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1])).get("planner", {})
dim = json.load(open(sys.argv[2]))["embedding"]["dim"]
sys.exit(0 if (p.get("world_size"), p.get("batch_size_per_rank"), p.get("embedding_dim")) ==
         (int(sys.argv[3]), int(sys.argv[4]), dim) else 1)
EOF
    then echo "torchrec_plan: $3 ranks, batch $4 per rank: kept $5" >&2; return 0; fi
    OMP_NUM_THREADS=1 "$PY" dev/torchrec_plan.py --spec "$1" --config "$2" --ranks "$3" --batch-per-rank "$4" \
        --out "$5" 2>"$5.log" || { cat "$5.log" >&2; return 1; }
    grep '^torchrec_plan:' "$5.log" >&2
}

# Runs the lines of FILE ("SPEC CONFIG N PER_RANK OUT") through tr_plan, NPROC at a time (the
# planner is one Python thread; nothing is timed while it runs).
tr_plans() { # FILE
    pids="" k=0
    while read -r spec config n b out; do
        tr_plan "$spec" "$config" "$n" "$b" "$out" & pids="$pids $!" k=$((k + 1))
        [ "$k" -lt "$NPROC" ] && continue
        for p in $pids; do wait "$p" || exit 1; done; pids="" k=0
    done < "$1"
    for p in $pids; do wait "$p" || exit 1; done
}

gen_data() { # NAME SPEC ROWS [GEN ARGS...]: $W/NAME-ROWS.rshard, kept when there
    name=$1 spec=$2 rows=$3; shift 3
    f="$W/$name-$rows.rshard"
    [ -s "$f" ] && return 0
    "$R" gen --rows "$rows" "$@" --out "$W/$name.tsv" >/dev/null 2>&1
    "$R" prep --spec "$spec" --in "$W/$name.tsv" --out "$f.tmp" >/dev/null 2>&1 && mv "$f.tmp" "$f"
    rm -f "$W/$name.tsv"
}

# MLPerf DLRM's Terabyte tables (day_0..23 hashed modulo 40M): the sizes TorchRec's DLRM example uses
TB_ROWS=40000000,39060,17295,7424,20265,3,7122,1543,63,40000000,3067956,405282,10,2209,11938,155,4,976,14,40000000,40000000,40000000,590152,12973,108,36
python3 - "$TB_ROWS" "$KSPEC" > "$W/terabyte.json" <<'EOF'
import json, sys
rows = [int(x) for x in sys.argv[1].split(",")]
s = json.load(open(sys.argv[2]))
s["name"] = "criteo_terabyte_sizes"
for k, ft in enumerate(s["sparse"]):
    s["tables"][ft["table"]]["rows"] = rows[k]
    ft["ops"] = [op if op["op"] != "modulo" else {"op": "modulo", "divisor": rows[k]} for op in ft["ops"]]
json.dump(s, sys.stdout, indent=1)
EOF

predicted() {
    gen_data kaggle "$KSPEC" "$ROWS"
    gen_data terabyte "$W/terabyte.json" "$ROWS" --scale 4
    mkdir -p "$W/pred"
    : > "$W/pred/jobs"; : > "$W/pred/index"
    for n in 1024 64 8; do # the slow plans first, two at a time
        seen=""
        for b in $BATCHES; do
            pr=$(per_rank "$b" "$n")
            case " $seen " in *" $pr "*) continue;; esac # 65536/8 is 8192
            seen="$seen $pr"
            for set in kaggle terabyte; do
                if [ $set = kaggle ]; then spec=$KSPEC conf=$KCONF; else spec=$W/terabyte.json conf=configs/dlrm_terabyte.json; fi
                echo "$spec $conf $n $pr $W/pred/$set-b$pr/torchrec-$n.json" >> "$W/pred/jobs"
                echo "$set $n $pr $conf" >> "$W/pred/index"
            done
        done
    done
    tr_plans "$W/pred/jobs"
    sort -k1,1 -k2,2n -k3,3n "$W/pred/index" | while read -r set n pr conf; do
        g=$((pr * n)) f="$W/pred/$set-n$n-b$pr.txt"
        echo
        echo "== predicted: $set sizes, $n ranks, TorchRec planned for $pr a rank: global batch $g"
        if [ "$g" -gt "$ROWS" ]; then echo "skipped: $ROWS rows hold no global batch of $g (ROWS)" | tee "$f"; continue; fi
        predict "$W/$set-$ROWS.rshard" "$conf" "$n" "$g" --simulate --torchrec "$W/pred/$set-b$pr" > "$f" 2>&1 ||
            { cat "$f" >&2; exit 1; }
        cat "$f"
    done
    echo
    echo "== predicted: TorchRec's plan for each batch per rank beside OPER's, same global batch"
    python3 - "$W/pred" <<'EOF'
import json, re, sys
d = sys.argv[1]
rows = sorted((l.split()[0], int(l.split()[1]), int(l.split()[2])) for l in open(f"{d}/index"))
print(f"  {'tables':<9}{'ranks':>6}{'batch/rank':>11}{'global':>9}  {'TorchRec plan':<44}{'its step':>10}"
      f"{'OPER step':>11}{'bound':>9}{'OPER vs TorchRec':>18}{'best any plan could':>21}")
for s, n, pr in rows:
    txt = open(f"{d}/{s}-n{n}-b{pr}.txt").read()
    if txt.startswith("skipped"):
        print(f"  {s:<9}{n:>6}{pr:>11}{pr * n:>9}  {txt.strip()}")
        continue
    step = {m.group(1): float(m.group(2)) for m in
            re.finditer(r"^(oper|torchrec) +(?:\S+ +){6}([0-9.]+) ", txt, re.M)}
    lb = float(re.search(r"the lower bound \(([0-9.]+) ms\)", txt).group(1))
    kinds = {}
    for tp in json.load(open(f"{d}/{s}-b{pr}/torchrec-{n}.json"))["table_plans"].values():
        kinds[tp["sharding_type"]] = kinds.get(tp["sharding_type"], 0) + 1
    plan = ", ".join(f"{v} {k}" for k, v in sorted(kinds.items()))
    t, o = step["torchrec"], step["oper"]
    print(f"  {s:<9}{n:>6}{pr:>11}{pr * n:>9}  {plan:<44}{t:>8.3f}ms{o:>9.3f}ms{lb:>7.3f}ms{t / o:>17.2f}x{t / lb:>20.2f}x")
print("  (max-rank predicted embedding step on the default machine of `rectrain plan`; bound: the lower bound\n"
      "   every plan is held to; best any plan could: TorchRec's step over that bound)")
EOF
}

# One training run: TAG.out (the --json summary) and TAG.err; NP "veth" is 2 ranks on two
# network namespaces joined by a veth pair (bench/netns_pair.sh), TCP only.
train() { # TAG PLAN NP BATCH STEPS
    if [ "$3" = veth ]; then
        set -- "$1" "$2" 2 "$4" "$5"
        launch="ip netns exec $NA mpirun --mca plm_rsh_agent $W/nsrsh --mca btl tcp,self --mca osc pt2pt \
            --mca btl_tcp_if_include 192.168.77.0/24 --mca oob_tcp_if_include 192.168.77.0/24 -H $HA:1,$HB:1"
    else launch="mpirun --oversubscribe"; fi
    $launch -np "$3" --bind-to none "$R" train --data "$TDATA" --config "$KCONF" --batch "$4" \
        --steps "$5" --epochs 10000 --json --threads 1 --plan-shards "$2" 2>"$W/$1.err" |
        grep '^{"model"' > "$W/$1.out" || { cat "$W/$1.err" >&2; exit 1; }
}

veth_up() { # the two "hosts" of RANKS' veth, torn down on exit
    command -v ip >/dev/null || { echo "RANKS=veth needs iproute2 (apt-get install iproute2)" >&2; exit 1; }
    NA=rtpA$$ NB=rtpB$$ HA=192.168.77.1 HB=192.168.77.2
    trap 'ip netns del $NA 2>/dev/null; ip netns del $NB 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$W"' EXIT INT TERM
    . "$(dirname "$0")/netns_pair.sh"
    netns_pair "$NA" "$NB" $HA $HB
    netns_rsh "$W/nsrsh" $HA "$NA" $HB "$NB"
}

# Medians over RUN FILES of the calibration's flags for `rectrain plan`: the executor's work
# per unit, the cache terms and the bandwidths, measured under the ranks' own sharing of the
# cores (so --ranks-per-core stays 1).
calibration() { # FILES...
    python3 - "$@" <<'PY'
import json, statistics as st, sys
js = [json.load(open(f)) for f in sys.argv[1:]]
m = lambda f: st.median(f(j) for j in js)
u = {k: m(lambda j: j["unit_ns"][k]) for k in ("slice_id", "owner_record", "fetched_row", "miss", "rep_row")}
print("--slice-ns %.3f --lookup-ns %.3f --get-ns %.3f --miss-ns %.3f --rep-row-ns %.3f --cache-mb %.3f"
      % (u["slice_id"], u["owner_record"], u["fetched_row"], u["miss"], u["rep_row"], m(lambda j: j["cache_mb"])),
      "--bw-p2p %.4f --bw-ar %.4f" % (m(lambda j: j["gbps"]["p2p"]), m(lambda j: j["gbps"]["allreduce"])))
PY
}

trained() {
    gen_data ktrain "$KSPEC" "$TROWS"
    TDATA="$W/ktrain-$TROWS.rshard"
    mkdir -p "$W/train"
    case " $RANKS " in *" veth "*) veth_up;; esac
    for np in $RANKS; do
        n=$np; [ "$np" = veth ] && n=2
        for b in $BATCHES; do
            pr=$(per_rank "$b" "$n") g=$(( $(per_rank "$b" "$n") * n ))
            steps=$(( STEPS * 2048 / pr )); [ "$steps" -ge 6 ] || steps=6
            t="$W/train/n$np-b$pr"
            echo "$np ranks, batch $pr a rank (global $g), $steps steps" >&2
            tr_plan "$KSPEC" "$KCONF" "$n" "$pr" "$t-torchrec.json"
            predict "$TDATA" "$KCONF" "$n" "$g" --kind row --out "$t-row.json" >/dev/null 2>&1
            train "train/n$np-b$pr-row-0" "$t-row.json" "$np" "$g" "$steps" # a first calibration, for OPER's search
            cal=$(calibration "$t-row-0.out")
            predict "$TDATA" "$KCONF" "$n" "$g" $cal --out "$t-oper.json" >/dev/null 2>&1
            order="row oper torchrec"
            for rep in $(seq 1 "$REPS"); do # each plan first in turn
                for p in $order; do train "train/n$np-b$pr-$p-$rep" "$t-$p.json" "$np" "$g" "$steps"; done
                order="${order#* } ${order%% *}"
            done
            units=$(calibration $(seq -f "$t-row-%g.out" 1 "$REPS")) # the calibration: the row-wise runs' medians
            units=${units%% --bw-p2p*}
            for p in row oper torchrec; do # predicted with it and the plan's own runs' bandwidths
                gbps=$(calibration $(seq -f "$t-$p-%g.out" 1 "$REPS")); gbps="--bw-p2p${gbps#* --bw-p2p}"
                predict "$TDATA" "$KCONF" "$n" "$g" --score "$t-$p.json" $units $gbps > "$t-$p.pred" 2>&1 ||
                    { cat "$t-$p.pred" >&2; exit 1; }
            done
        done
    done
    python3 - "$W/train" "$NPROC" "$REPS" "$RANKS" $BATCHES <<'EOF'
import json, re, statistics as st, sys
d, nproc, reps, ranks, batches = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split(), sys.argv[5:]
per_rank = lambda b, n: int(b[:-2]) // n if b.endswith("/N") else int(b)
spread = lambda xs: max(xs) / min(xs) - 1
for np in ranks:
    n = 2 if np == "veth" else int(np)
    where = "over veth between two namespaces" if np == "veth" else f"{max(1, n // nproc)} a core"
    print(f"\n== trained at {n} ranks ({where}): Kaggle sizes, the Kaggle DLRM, medians of {reps} runs")
    print(f"  {'plan':<10}{'batch/rank':>11}{'global':>8}{'steps':>6}{'samples/s':>11}{'spread':>8}{'embed ms':>10}"
          f"{'spread':>8}{'skew ms':>9}{'predicted':>11}{'ratio':>7}{'bytes':>8}{'vs TorchRec':>13}  layout")
    for b in dict.fromkeys(per_rank(b, n) for b in batches):
        t = f"{d}/n{np}-b{b}"
        row = {}
        for p in ("row", "oper", "torchrec"):
            js = [json.load(open(f"{t}-{p}-{r}.out")) for r in range(1, reps + 1)]
            sps = [j["samples_per_s"] for j in js]
            emb = [j["step_ms"]["local"] + j["step_ms"]["fetch"] + j["step_ms"]["exchange"] - j["step_ms"]["skew"] for j in js]
            pred = float(re.search(r"lower max step than \S+ \(\w+: ([0-9.]+) ms", open(f"{t}-{p}.pred").read()).group(1))
            kinds = {}
            for tp in json.load(open(f"{t}-{p}.json")).get("table_plans", {}).values():
                kinds[tp["sharding_type"]] = kinds.get(tp["sharding_type"], 0) + 1
            row[p] = dict(sps=st.median(sps), sps_sp=spread(sps), emb=st.median(emb), emb_sp=spread(emb),
                          skew=st.median(j["step_ms"]["skew"] for j in js), pred=pred, steps=js[0]["steps"],
                          worst=max(j["worst_sent_vs_plan"]["deviation"] for j in js),
                          layout=", ".join(f"{v} {k}" for k, v in sorted(kinds.items())) or
                          "rectrain's " + json.load(open(f"{t}-{p}.json")).get("kind", "?"))
        row["row"]["layout"] += " (the calibration)"
        for p in ("row", "oper", "torchrec"):
            r = row[p]
            vs = f"{r['sps'] / row['torchrec']['sps']:.2f}x" if p != "torchrec" else ""
            print(f"  {p:<10}{b:>11}{b * n:>8}{r['steps']:>6}{r['sps']:>11.0f}{100 * r['sps_sp']:>7.0f}%{r['emb']:>10.3f}"
                  f"{100 * r['emb_sp']:>7.0f}%{r['skew']:>9.3f}{r['pred']:>11.3f}{r['emb'] / r['pred']:>7.2f}"
                  f"{100 * r['worst']:>7.1f}%{vs:>13}  {r['layout']}")
print("  (rank 0's medians; spread: the plan's own runs, max / min - 1, the machine's noise on that figure;\n"
      "   embed ms = local + fetch + exchange - skew, the exchange's wait for the slowest rank; predicted = the\n"
      "   plan's busiest rank, `plan --score` with the row-wise runs' median work per unit and cache terms\n"
      "   (measured under the same sharing of the cores) and the plan's runs' median bandwidths; ratio = embed /\n"
      "   predicted; bytes: the worst rank's |sent / predicted - 1|; vs TorchRec: samples/s over TorchRec's plan's)")
EOF
}

[ "$PART" = trained ] || predicted
[ "$PART" = predicted ] || trained
