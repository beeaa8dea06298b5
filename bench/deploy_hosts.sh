#!/bin/sh
# `rectrain cluster` across two "hosts" (docs/deploy.md): network namespaces A and B joined by
# a veth pair, mpirun starting every process through an rsh agent that enters the namespace
# (../shared/recipes/mpi-across-namespaces.md). One command each, launched from A:
#  1. Bagpipe: the oracle and an embedding server on A, two trainers on B; the loss log against
#     `rectrain cluster` of the same job on one machine (cmp);
#  2. FastFlow: a prep-worker on A, the trainer on B; the same;
#  3. the wire: every TCP stream between A and B captured during 1 (bench/sniff.py): each
#     ZeroMQ greeting's mechanism, and rectrain frames in clear; the same count on loopback for
#     a one-machine --insecure job, which shows what the capture would find;
#  4. intruders from B while a job runs: a client in plain text and one with another job's keys,
#     against the job's oracle: both refused, and the job's losses unchanged;
#  5. kill -9 of an embedding server, a prep-worker (each launched from B, so the process is on
#     the other host) and a trainer (launched from A): seconds until the command returned, the
#     message, and the job's processes left on either host;
#  6. Ctrl-C (SIGINT to the launcher's process group): the same.
# Sets up and tears down everything itself (root, iproute2, Open MPI, python3).
# Usage: bench/deploy_hosts.sh [ROWS=12000]   (from the repo root)
set -eu
ROWS=${1:-12000}
R=$(pwd)/build/rectrain; SRC=$(pwd)
[ -x "$R" ] || { echo "build first: make build" >&2; exit 1; }
command -v ip >/dev/null || { echo "needs iproute2 (apt-get install iproute2)" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "needs Open MPI (scripts/install-deps.sh)" >&2; exit 1; }
W=$(mktemp -d "${TMPDIR:-/tmp}/rectrain-deploy-XXXXXX")
NA=rdA$$; NB=rdB$$; A=192.168.78.1; B=192.168.78.2
cleanup() { ip netns del "$NA" 2>/dev/null || true; ip netns del "$NB" 2>/dev/null || true; rm -rf "$W"; }
trap cleanup EXIT INT TERM
. "$(dirname "$0")/netns_pair.sh"
netns_pair "$NA" "$NB" $A $B
netns_rsh "$W/nsrsh" $A "$NA" $B "$NB"
export REC_PROGRESS=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
PORT=$((20000 + $$ % 20000))
cd "$W"

# data: generated rows, ids folded into tables of 240..5000 rows
. "$SRC/bench/small_spec.sh"
small_spec deploy > spec.json
"$R" gen --rows "$ROWS" --out d.tsv >/dev/null 2>&1
"$R" prep --spec spec.json --in d.tsv --out d.rshard >/dev/null 2>&1
MODEL=$SRC/configs/dlrm_small.json
# a cluster config: NAME EPOCHS EXTRA-KEYS (one machine: the base port; across: "hosts")
cfg() {
    printf '{"format": "rectrain-cluster", "version": 1, "model": "%s", "batch": 256, "epochs": %d, "shuffle": false, "threads": 1, "peer_timeout": 30, %s}\n' \
        "$MODEL" "$2" "$3" > "$1"
}
BAG='"data": "d.rshard", "embservers": 1, "trainers": 2, "cache": {"rows": 6000}'
FF='"data": "d.tsv", "spec": "spec.json", "embservers": 0, "prep_workers": 1, "offload": "0.5"'
ACROSS='"network": "192.168.78.0/24", "hosts": {"embservers": ["'$A'"], "oracles": ["'$A'"], "prep_workers": ["'$A'"], "trainers": ["'$B'"]}'
cfg bag_one.json 1 "$BAG, \"base_port\": $PORT"
cfg ff_one.json 1 "$FF, \"base_port\": $((PORT + 10))"
cfg bag.json 1 "$BAG, $ACROSS"
cfg ff.json 1 "$FF, $ACROSS"
cfg bag_long.json 40 "$BAG, $ACROSS"
cfg ff_long.json 40 "$FF, $ACROSS"
MCA="OMPI_MCA_plm_rsh_agent=$W/nsrsh OMPI_MCA_btl=tcp,self OMPI_MCA_btl_tcp_if_include=192.168.78.0/24 OMPI_MCA_oob_tcp_if_include=192.168.78.0/24"
# across: NS CONFIG ARGS... (the launcher in namespace NS)
across() { ns=$1; shift; ip netns exec "$ns" env $MCA "$R" cluster "$@"; }
fails=0
verdict() { if [ "$1" = 0 ]; then echo "  ok: $2"; else echo "  FAILED: $2"; fails=$((fails + 1)); fi; }
left() { pgrep -f "$R cluster $1" | wc -l || true; }

echo "1. Bagpipe: oracle and embedding server on $A, 2 trainers on $B"
"$R" cluster bag_one.json --loss-log bag_one.loss > bag_one.out 2>&1
ip netns exec "$NA" python3 "$SRC/bench/sniff.py" "v$NA" wire.json & SNIFF=$!
sleep 0.5
t0=$(date +%s.%N)
across "$NA" bag.json --loss-log bag.loss > bag.out 2>&1
t1=$(date +%s.%N)
kill -TERM $SNIFF; wait $SNIFF
rc=0; cmp -s bag_one.loss bag.loss || rc=$?; verdict $rc "$(wc -l < bag.loss) steps, loss log byte-identical to one machine's ($(echo "$t1 - $t0" | bc) s)"
grep '^cluster: across' bag.out | sed 's/^/  /'

echo "2. FastFlow: prep-worker on $A, trainer on $B"
"$R" cluster ff_one.json --loss-log ff_one.loss > ff_one.out 2>&1
across "$NA" ff.json --loss-log ff.loss > ff.out 2>&1
rc=0; cmp -s ff_one.loss ff.loss || rc=$?; verdict $rc "$(wc -l < ff.loss) steps, loss log byte-identical to one machine's"
grep 'workers made' ff.out | sed 's/^/  /'

echo "3. the wire between $A and $B during 1"
cfg plain.json 1 "$BAG, \"host\": \"$A\", \"base_port\": $((PORT + 20))"
ip netns exec "$NA" python3 "$SRC/bench/sniff.py" lo wire_plain.json & SNIFF=$!
sleep 0.5
ip netns exec "$NA" "$R" cluster plain.json --insecure > plain.out 2>&1
kill -TERM $SNIFF; wait $SNIFF
python3 - <<'EOF' || fails=$((fails + 1))
import json, sys
w, p = json.load(open("wire.json")), json.load(open("wire_plain.json"))
print(f"  across hosts: {w['streams']} TCP streams, {w['bytes']} bytes; ZeroMQ greetings {w['mechanisms']}; "
      f"rectrain frames in clear: {w['frames_in_clear']}")
print(f"  control, one machine --insecure on loopback: {p['streams']} streams; greetings {p['mechanisms']}; "
      f"frames in clear: {p['frames_in_clear']}")
ok = w["frames_in_clear"] == 0 and set(w["mechanisms"]) == {"CURVE"} and p["frames_in_clear"] > 0
print("  ok: no frame in clear, every ZeroMQ stream CURVE" if ok else "  FAILED: the wire carries data in clear")
sys.exit(0 if ok else 1)
EOF

echo "4. intruders from $B against a running job"
cfg bag_one40.json 40 "$BAG, \"base_port\": $((PORT + 30))"
"$R" cluster bag_one40.json --loss-log long_one.loss > long_one.out 2>&1
across "$NA" bag_long.json --loss-log long.loss > long.out 2>&1 & JOB=$!
for i in $(seq 1 300); do grep -q '^cluster: across' long.out 2>/dev/null && break; sleep 0.1; done
ORACLE=$(sed -n 's/.*oracle 0 on [0-9.]* at \(tcp:[^,;]*\).*/\1/p' long.out)
SERVER=$(sed -n 's/.*embedding server 0 on [0-9.]* at \(tcp:[^,;]*\).*/\1/p' long.out)
rc=0; ip netns exec "$NB" "$R" train --oracle-cacher "$ORACLE" --embservers "$SERVER" --insecure --peer-timeout 2 > plain_client.out 2>&1 || rc=$?
verdict $((rc == 0)) "a client in plain text: $(tail -1 plain_client.out | cut -c1-160)"
"$R" keygen --out other_svc >/dev/null; "$R" keygen --out other_client >/dev/null
cp other_svc/self.pub other_client/server.pub
rc=0; ip netns exec "$NB" "$R" train --oracle-cacher "$ORACLE" --embservers "$SERVER" --keys other_client --peer-timeout 2 > key_client.out 2>&1 || rc=$?
verdict $((rc == 0)) "a client with another job's keys: $(tail -1 key_client.out | cut -c1-160)"
wait $JOB || true
rc=0; cmp -s long_one.loss long.loss || rc=$?
verdict $rc "the job went on: $(wc -l < long.loss) steps, byte-identical to one machine's"
grep "refused" long.out | sed 's/^/  the job logged: /' | cut -c1-200

echo "5. kill -9 on the other host"
# kill NS CONFIG ROLE RANK: launch from NS, kill -9 the process of world rank RANK once training runs
killrun() {
    rm -f k.loss
    across "$1" "$2" --loss-log k.loss > k.out 2>&1 & JOB=$!
    for i in $(seq 1 300); do [ -s k.loss ] && break; sleep 0.05; done
    pid=$(for p in $(pgrep -f "$R cluster $2"); do tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$4" && echo $p; done | head -1)
    t0=$(date +%s.%N); kill -9 "$pid"; wait $JOB || true; t1=$(date +%s.%N)
    s=$(echo "$t1 - $t0" | bc); msg=$(grep '^rectrain cluster:' k.out | tail -1)
    rc=0; { echo "$msg" | grep -q "$3" && [ "$(echo "$s < 5" | bc)" = 1 ] && [ "$(left "$2")" = 0 ]; } || rc=1
    verdict $rc "$3: stopped in $s s, $(left "$2") processes left: $(echo "$msg" | cut -c1-200)"
}
killrun "$NB" bag_long.json "embedding server 0" 0
killrun "$NB" ff_long.json "prep-worker 0" 0
killrun "$NA" bag_long.json "trainer 1" 3

echo "6. Ctrl-C"
setsid sh -c "exec ip netns exec $NA env $MCA $R cluster bag_long.json --loss-log c.loss" > c.out 2>&1 & JOB=$!
for i in $(seq 1 300); do [ -s c.loss ] && break; sleep 0.05; done
t0=$(date +%s.%N); env kill -INT -- "-$JOB"; wait $JOB || true; t1=$(date +%s.%N)
s=$(echo "$t1 - $t0" | bc)
rc=0; { grep -q "stopped by SIGINT" c.out && [ "$(left bag_long.json)" = 0 ]; } || rc=1
verdict $rc "stopped in $s s, $(left bag_long.json) processes left: $(grep '^rectrain cluster:' c.out | tail -1 | cut -c1-160)"

echo "$fails failed"
exit $((fails > 0))
