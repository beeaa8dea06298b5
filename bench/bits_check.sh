#!/usr/bin/env bash
# Proves that a refactor changed no bit: every run below is made by the binary of an old
# revision and by the new one, with the same command line on the same data, each in a folder
# of its own, and their loss logs (the "step loss" lines of --loss-log) must be byte-identical
# and the parameters of the models they leave (--ckpt, rectrain export) and their final AUCs
# (--json's last line) equal:
#   kaggle_t1_shuffle, kaggle_t1_file, kaggle_t2_shuffle, kaggle_t2_file
#             the Kaggle DLRM (configs/dlrm_kaggle.json) at 1 and 2 threads, --shuffle and
#             --no-shuffle
#   dcn       configs/dcn_small.json
#   bf16      the Kaggle DLRM with --precision bf16 (bf16 products)
#   mpi2      mpirun -np 2 rectrain train --plan-shards with OPER's plan (rectrain plan)
#   cluster   rectrain cluster with one trainer (as configs/cluster_dlrm.json); its AUC is
#             `rectrain eval` of the model it leaves (the cache trainer does not evaluate)
#   workers   train --workers with one rectrain prep-worker on loopback (TSV data, half the
#             pieces offloaded at p3)
#   rraw      train on a .rraw (prep --raw) with --spec
# and each of them again as "NAME+resume": RESUME_AT steps with a checkpoint, then the same
# command with --steps STEPS --resume (--steps as the run's total; a binary that counts them
# past the resumed step ends elsewhere, and the table's note says so). The cluster's resume
# is a --durable job of services started by hand: an oracle planning RESUME_AT batches, then
# one planning STEPS, and the trainer again with --resume (the cluster command cannot resume).
# The data (generated TSV, tables folded to 240..5000 rows; a .rshard, a .rraw, an evaluation
# .rshard) and the sharding plan are made once, by the old binary; the configs are this
# checkout's. Prints `case | old | new | same?` (steps logged, digests of the step lines and of
# the parameters, the AUC) and where the runs that differ part; exits 1 when any case differs
# or fails, 2 on a usage error.
# Usage: bench/bits_check.sh OLD_REV [NEW_BIN=./build/rectrain]   (from the repo root)
#   builds OLD_REV (any git revision) in a temporary git worktree (cmake Release, target
#   rectrain_cli; CMAKE_ARGS are added to its configure), or takes OLD_BIN=PATH, a binary
#   built already (OLD_REV is then only its name in the table, "-" will do).
# Environment: SPEED=N also times the Kaggle DLRM at 2 threads and 2 ranks, N alternating
#   repetitions of SPEED_STEPS (36) steps, and prints medians of samples/s and new/old.
#   ROWS (training rows, default 80000), STEPS (16), RESUME_AT (8), TIMEOUT
#   (seconds a command may take, default 300), JOBS (build jobs, default 2), KEEP=1 keeps
#   the work folder (its path is printed) to look at the runs.
# After a refactor: bench/bits_check.sh BASE_COMMIT (the commit before it); every row must
# say "yes". The model digest (every parameter, rectrain export) matters: a one-ulp change of
# a learning rate can leave the 9-digit losses and the AUC as they were, not the parameters.
set -u
[ $# -ge 1 ] && [ $# -le 2 ] || { sed -n '/^# Usage/,/^set -u/{/^set/!p}' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
OLD_REV=$1
NEW_BIN=$(realpath "${2:-./build/rectrain}") || exit 2
ROWS=${ROWS:-80000}; EVAL_ROWS=8000; STEPS=${STEPS:-16}; RESUME_AT=${RESUME_AT:-8}; TIMEOUT=${TIMEOUT:-300}
SRC=$(cd "$(dirname "$0")/.." && pwd)
[ -x "$NEW_BIN" ] || { echo "bits_check: no binary $NEW_BIN: build first (make build) or name one" >&2; exit 2; }
[ "$RESUME_AT" -lt "$STEPS" ] || { echo "bits_check: RESUME_AT ($RESUME_AT) must be under STEPS ($STEPS)" >&2; exit 2; }
for c in mpirun timeout md5sum; do
    command -v $c >/dev/null || { echo "bits_check: needs $c (scripts/install-deps.sh)" >&2; exit 2; }
done
START=$(date +%s)
W=$(mktemp -d "${TMPDIR:-/tmp}/rectrain-bits-XXXXXX")
OLD_TREE=""   # the old revision's worktree, when this script made one
BG=""         # background services still running
cleanup() {
    stop_services
    [ -z "$OLD_TREE" ] || git -C "$SRC" worktree remove --force "$OLD_TREE" 2>/dev/null || true
    git -C "$SRC" worktree prune 2>/dev/null || true
    if [ "${KEEP:-0}" = 1 ]; then echo "bits_check: runs kept in $W" >&2; else rm -rf "$W"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
export REC_PROGRESS=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN=(mpirun --oversubscribe -np 2 --bind-to none)
KAGGLE=$SRC/configs/dlrm_kaggle.json
PORT=$((20000 + $$ % 30000))   # each service gets the next; two runs never share one

say() { echo "bits_check: $*" >&2; }

build_old() {
    if [ -n "${OLD_BIN:-}" ]; then
        OLD_BIN=$(realpath "$OLD_BIN") && [ -x "$OLD_BIN" ] || { say "OLD_BIN: no binary ${OLD_BIN}"; exit 2; }
        return
    fi
    OLD_TREE=$W/old
    git -C "$SRC" worktree add --detach "$OLD_TREE" "$OLD_REV" >/dev/null 2>"$W/build.log" ||
        { cat "$W/build.log" >&2; say "cannot check out $OLD_REV"; exit 2; }
    say "building $OLD_REV ($(git -C "$OLD_TREE" log --oneline -1)) in $OLD_TREE/build"
    # shellcheck disable=SC2086  # CMAKE_ARGS: words
    { cmake -S "$OLD_TREE" -B "$OLD_TREE/build" -DCMAKE_BUILD_TYPE=Release ${CMAKE_ARGS:-} &&
      cmake --build "$OLD_TREE/build" -j "${JOBS:-2}" --target rectrain_cli; } >>"$W/build.log" 2>&1 ||
        { tail -30 "$W/build.log" >&2; say "building $OLD_REV failed"; exit 1; }
    OLD_BIN=$OLD_TREE/build/rectrain
}

# The data: Criteo-like rows, every table folded by a modulo to 240..5000 rows so that a step
# of the Kaggle DLRM takes a fraction of a second, whatever its config's sizes; the rows
# after the first ROWS (the same planted model) are the evaluation set.
. "$(dirname "$0")/small_spec.sh"

make_data() {
    local R=$OLD_BIN D=$W/data
    mkdir -p "$D" && small_spec bits > "$D/spec.json" || exit 1
    { "$R" gen --rows $((ROWS + EVAL_ROWS)) --out "$D/all.tsv" &&
      head -n "$ROWS" "$D/all.tsv" > "$D/d.tsv" && tail -n +$((ROWS + 1)) "$D/all.tsv" > "$D/e.tsv" &&
      "$R" prep --spec "$D/spec.json" --in "$D/d.tsv" --out "$D/d.rshard" &&
      "$R" prep --spec "$D/spec.json" --in "$D/e.tsv" --out "$D/e.rshard" &&
      "$R" prep --raw --in "$D/d.tsv" --out "$D/d.rraw" &&
      "$R" plan --data "$D/d.rshard" --ranks 2 --config "$KAGGLE" --out "$D/plan.json"; } >"$D/log" 2>&1 ||
        { tail -5 "$D/log" >&2; say "making the data failed"; exit 1; }
}

next_port() { PORT=$((PORT + 1)); }

# A service in the background until stop_services (or the script's end): NAME COMMAND...
service() {
    local name=$1; shift
    "$@" >"$name.log" 2>&1 &
    BG="$BG $!"
}
stop_services() {
    for p in $BG; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    BG=""
}

# One training command, in the current folder: full (STEPS steps), or resume (RESUME_AT steps,
# then the same command to STEPS with --resume). Leaves `loss`, `out` and the model in ck/.
# MODE COMMAND...
steps_run() {
    local mode=$1; shift
    set -- "$@" --ckpt ck --loss-log loss --json
    if [ "$mode" = resume ]; then
        timeout "$TIMEOUT" "$@" --steps "$RESUME_AT" >out1 2>err1 || { echo "first $RESUME_AT steps: exit $?" > fail; return 1; }
        set -- "$@" --resume
    fi
    timeout "$TIMEOUT" "$@" --steps "$STEPS" >out 2>err || { echo "exit $?" > fail; return 1; }
}

# The digest of every parameter of the model a run left in ck/ (BIN export: .npy files).
model_digest() {
    timeout "$TIMEOUT" "$1" export --ckpt ck --out npy >/dev/null 2>err_export || { echo "export: exit $?" > fail; return 1; }
    cat npy/*.npy | md5sum | cut -c1-8 > model
}

# The case kinds: MODE BIN [OPTIONS...], run in the run's folder.
kind_train() {
    local mode=$1 bin=$2; shift 2
    steps_run "$mode" "$bin" train --data "$W/data/d.rshard" --eval "$W/data/e.rshard" "$@"
}
kind_rraw() {
    local mode=$1 bin=$2; shift 2
    steps_run "$mode" "$bin" train --data "$W/data/d.rraw" --spec "$W/data/spec.json" --eval "$W/data/e.rshard" "$@"
}
kind_mpi() {
    local mode=$1 bin=$2; shift 2
    steps_run "$mode" "${MPIRUN[@]}" "$bin" train --data "$W/data/d.rshard" --eval "$W/data/e.rshard" \
        --plan-shards "$W/data/plan.json" "$@"
}
kind_workers() {
    local mode=$1 bin=$2; shift 2
    next_port; local ep=tcp://127.0.0.1:$PORT
    service worker "$bin" prep-worker --listen "$ep" --threads 1
    steps_run "$mode" "$bin" train --data "$W/data/d.tsv" --spec "$W/data/spec.json" --eval "$W/data/e.rshard" \
        --workers "$ep" --offload 0.5 --offload-at p3 --offload-store none "$@"
    local rc=$?
    stop_services
    return "$rc"
}

# The cluster's job, as configs/cluster_dlrm.json: the small DLRM, batch 4096, a bagpipe cache
# of 1M rows, 2 embedding servers, 1 trainer of 1 thread.
CL_MODEL=$SRC/configs/dlrm_small.json; CL_BATCH=4096; CL_ROWS=1048576; CL_DEPTH=4
kind_cluster() {
    local mode=$1 bin=$2
    if [ "$mode" = full ]; then
        PORT=$((PORT + 8))
        cat > c.json <<EOF
{"format": "rectrain-cluster", "version": 1, "data": "$W/data/d.rshard", "model": "$CL_MODEL",
 "batch": $CL_BATCH, "epochs": 1, "steps": $STEPS, "shuffle": true,
 "cache": {"policy": "bagpipe", "rows": $CL_ROWS, "lookahead": 0, "prefetch_depth": $CL_DEPTH},
 "embservers": 2, "threads": 1, "host": "127.0.0.1", "base_port": $PORT, "peer_timeout": 30,
 "loss_log": "loss", "ckpt": "ck"}
EOF
        timeout "$TIMEOUT" "$bin" cluster c.json --json >out1 2>err1 || { echo "exit $?" > fail; return 1; }
    else
        cluster_resume "$bin" || return 1
    fi
    timeout "$TIMEOUT" "$bin" eval --ckpt ck --data "$W/data/e.rshard" --threads 1 --json >out 2>err ||
        { echo "eval: exit $?" > fail; return 1; }
}
# A --durable job of services started here: the trainer ends after the oracle's RESUME_AT
# batches, then resumes (--resume) from the servers' last commit with an oracle of STEPS.
cluster_resume() {
    local bin=$1 s0 s1 orc rc=0
    next_port; s0=tcp://127.0.0.1:$PORT; next_port; s1=tcp://127.0.0.1:$PORT; next_port; orc=tcp://127.0.0.1:$PORT
    service server0 "$bin" embserver --listen "$s0"
    service server1 "$bin" embserver --listen "$s1"
    local oracle=("$bin" oracle --listen "$orc" --data "$W/data/d.rshard" --cache-rows "$CL_ROWS" --shuffle 1
                  --policy bagpipe --config "$CL_MODEL" --batch "$CL_BATCH" --epochs 1 --prefetch-depth "$CL_DEPTH")
    local trainer=(timeout "$TIMEOUT" "$bin" train --oracle-cacher "$orc" --embservers "$s0,$s1" --threads 1
                   --peer-timeout 30 --config "$CL_MODEL" --loss-log loss --ckpt ck --json)
    service oracle1 "${oracle[@]}" --steps "$RESUME_AT"
    local o1=${BG##* }
    "${trainer[@]}" --durable >out1 2>err1 || { rc=$?; echo "first $RESUME_AT steps: exit $rc" > fail; }
    kill "$o1" 2>/dev/null; wait "$o1" 2>/dev/null; BG=${BG% *}
    if [ "$rc" = 0 ]; then
        service oracle2 "${oracle[@]}" --steps "$STEPS"
        "${trainer[@]}" --resume >out2 2>err2 || { rc=$?; echo "resumed: exit $rc" > fail; }
    fi
    stop_services
    return "$rc"
}

# What a run leaves, for the table: "N steps DIGEST model DIGEST auc AUC", or "FAILED (why)".
summary() {
    local d=$1
    if [ -e "$d/fail" ]; then echo "FAILED ($(cat "$d/fail"))"; return; fi
    grep -E '^[0-9]+ ' "$d/loss" > "$d/steps" 2>/dev/null
    local n auc
    n=$(wc -l < "$d/steps")
    auc=$(grep '^{' "$d/out" | tail -1 | sed -n 's/.*"auc": \([-+0-9.eE]*\).*/\1/p')
    echo "$n steps $(md5sum < "$d/steps" | cut -c1-8) model $(cat "$d/model") auc ${auc:-none}"
}

# Both runs of a case summarised: true when their step lines, models and AUCs are the same.
same_runs() {
    local d=$1 a b
    a=$(summary "$d/old"); b=$(summary "$d/new")
    ROWS_OUT="$ROWS_OUT$(printf '%-24s | %-46s | %-46s | ' "${d##*/}" "$a" "$b")"
    [ ! -e "$d/old/fail" ] && [ ! -e "$d/new/fail" ] && cmp -s "$d/old/steps" "$d/new/steps" &&
        [ "${a#* steps }" = "${b#* steps }" ] && [ "${a##* }" != none ]
}

# Where a case's runs part: the first differing step line, else the model or the AUC.
diff_note() {
    local d=$1 at
    [ ! -e "$d/old/fail" ] && [ ! -e "$d/new/fail" ] || return
    at=$(cmp "$d/old/steps" "$d/new/steps" 2>&1 | grep -v EOF | sed -n 's/.*line \([0-9]*\).*/\1/p')
    if [ -n "$at" ]; then at="the losses differ from step $(sed -n "${at}p" "$d/old/steps" | cut -d' ' -f1)"
    elif ! cmp -s "$d/old/steps" "$d/new/steps"; then at="the number of steps differs"
    elif ! cmp -s "$d/old/model" "$d/new/model"; then at="the same losses; the model's parameters differ"
    else at="the same losses and model; the AUC differs"; fi
    NOTES="$NOTES${d##*/}: $at
"
}

# A resumed run ends at STEPS when --steps counts the run's total; says which do not.
resume_note() {
    local d=$1 side last ends=""
    for side in old new; do
        last=$(tail -1 "$d/$side/steps" 2>/dev/null | cut -d' ' -f1)
        [ -z "$last" ] || [ "$last" = "$STEPS" ] || ends="$ends, $side at step $last"
    done
    [ -z "$ends" ] || NOTES="$NOTES${d##*/}: resumed with --steps $STEPS, the run ends ${ends#, } (--steps counted past the resumed step, not as the run's total)
"
}

FAILED=0; NOTES=""; ROWS_OUT=""
# One case, old then new: NAME MODE KIND [OPTIONS...]
check() {
    local name=$1 mode=$2 kind=$3; shift 3
    local label=$name side bin same=yes
    [ "$mode" = resume ] && label=$name+resume
    for side in old new; do
        [ $side = old ] && bin=$OLD_BIN || bin=$NEW_BIN
        mkdir -p "$W/runs/$label/$side" && cd "$W/runs/$label/$side" || exit 1
        { "kind_$kind" "$mode" "$bin" "$@" && model_digest "$bin"; } || { say "$label ($side): $(cat fail); its stderr ends:"; tail -n 3 err* >&2; }
        cd "$W" || exit 1
    done
    same_runs "$W/runs/$label" || { same=no; FAILED=1; diff_note "$W/runs/$label"; }
    ROWS_OUT="$ROWS_OUT$same
"
    [ "$mode" = full ] || resume_note "$W/runs/$label"
    say "$label: $same"
}

build_old
say "old: $OLD_BIN; new: $NEW_BIN; work folder $W"
make_data
for mode in full resume; do
    check kaggle_t1_shuffle "$mode" train --config "$KAGGLE" --threads 1 --shuffle
    check kaggle_t1_file    "$mode" train --config "$KAGGLE" --threads 1 --no-shuffle
    check kaggle_t2_shuffle "$mode" train --config "$KAGGLE" --threads 2 --shuffle
    check kaggle_t2_file    "$mode" train --config "$KAGGLE" --threads 2 --no-shuffle
    check dcn               "$mode" train --config "$SRC/configs/dcn_small.json" --threads 1
    check bf16              "$mode" train --config "$KAGGLE" --threads 1 --precision bf16
    check mpi2              "$mode" mpi --config "$KAGGLE" --threads 1
    check cluster           "$mode" cluster
    check workers           "$mode" workers --config "$KAGGLE" --threads 1
    check rraw              "$mode" rraw --config "$KAGGLE" --threads 1
done

# SPEED=N: samples/s of the Kaggle DLRM at 2 threads and of 2 ranks, N repetitions with the
# binaries alternating (old, new, old, ...), SPEED_STEPS steps each; the medians and new/old.
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
rate() { grep '^{' out | tail -1 | sed -n 's/.*"samples_per_s": \([0-9.eE+-]*\).*/\1/p'; }
speed() {
    local name=$1 kind=$2; shift 2
    local rep side bin
    for rep in $(seq 1 "$SPEED"); do
        for side in old new; do
            [ $side = old ] && bin=$OLD_BIN || bin=$NEW_BIN
            mkdir -p "$W/speed/$name/$side.$rep" && cd "$W/speed/$name/$side.$rep" || exit 1
            STEPS=$SPEED_STEPS "kind_$kind" full "$bin" "$@" && rate >> "$W/speed/$name/$side" ||
                say "speed $name ($side): $(cat fail 2>/dev/null)"
            cd "$W" || exit 1
        done
    done
    local o n
    o=$(median < "$W/speed/$name/old"); n=$(median < "$W/speed/$name/new")
    SPEED_OUT="$SPEED_OUT$(printf '%-12s | %12.0f | %12.0f | %.3f' "$name" "$o" "$n" "$(awk -v n="$n" -v o="$o" 'BEGIN {print n / o}')")
"
}
SPEED=${SPEED:-0}; SPEED_STEPS=${SPEED_STEPS:-36}; SPEED_OUT=""
if [ "$SPEED" -gt 0 ]; then
    speed kaggle_t2 train --config "$KAGGLE" --threads 2 --shuffle
    speed mpi2 mpi --config "$KAGGLE" --threads 1
fi

printf '\n%-24s | %-46s | %-46s | %s\n' case "old ($OLD_REV)" new "same?"
printf '%s' "$ROWS_OUT"
[ -z "$NOTES" ] || printf '\nnotes:\n%s' "$NOTES"
[ -z "$SPEED_OUT" ] || printf '\nsamples/s, medians of %d (%d steps, binaries alternating)\n%-12s | %12s | %12s | %s\n%s' \
    "$SPEED" "$SPEED_STEPS" case old new new/old "$SPEED_OUT"
echo
echo "$ROWS rows, $STEPS steps (resumed at $RESUME_AT); $(($(date +%s) - START)) s in all"
[ $FAILED = 0 ] && echo "no bit changed" || echo "DIFFERENT: the rows marked no"
exit $FAILED
