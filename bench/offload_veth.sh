#!/bin/sh
# A prep-worker on another "host": two network namespaces joined by a veth pair (a real TCP
# path, ../shared/recipes/mpi-across-namespaces.md). The worker listens on host B's address
# and reads the same files (the namespaces share the file system, as hosts share storage);
# the trainer on host A offloads half of the pieces at each point p'1, p'2, p'3 and trains
# STEPS steps on ROWS generated rows. Prints, per point, the pieces made remotely, the bytes
# that crossed the pair and whether the losses equal a local-only run's, bit for bit. Sets up
# and tears down everything itself (root, iproute2).
# Usage: bench/offload_veth.sh [ROWS=60000] [STEPS=50]   (from the repo root)
set -eu
ROWS=${1:-60000}; STEPS=${2:-50}
R=$(pwd)/build/rectrain
[ -x "$R" ] || { echo "build first: make build" >&2; exit 1; }
command -v ip >/dev/null || { echo "needs iproute2 (apt-get install iproute2)" >&2; exit 1; }
W=$(mktemp -d "${TMPDIR:-/tmp}/rectrain-oveth-XXXXXX")
NA=roA$$; NB=roB$$; A=192.168.78.1; B=192.168.78.2; PORT=5555
WPID=""
cleanup() {
    [ -n "$WPID" ] && kill "$WPID" 2>/dev/null && wait "$WPID" 2>/dev/null
    ip netns del "$NA" 2>/dev/null || true; ip netns del "$NB" 2>/dev/null || true; rm -rf "$W"
}
trap cleanup EXIT INT TERM
export REC_PROGRESS=0

. "$(dirname "$0")/netns_pair.sh"
netns_pair "$NA" "$NB" $A $B

"$R" gen --rows "$ROWS" --scale 0.01 --out "$W/d.tsv" >/dev/null 2>&1
# off loopback the worker and the trainer speak CurveZMQ (docs/security.md): a pair each
"$R" keygen --out "$W/svc" >/dev/null && "$R" keygen --out "$W/tr" >/dev/null
cp "$W/tr/self.pub" "$W/svc/allow/tr.pub" && cp "$W/svc/self.pub" "$W/tr/server.pub"
ip netns exec "$NB" "$R" prep-worker --listen "tcp://$B:$PORT" --threads 1 --keys "$W/svc" 2>"$W/worker.log" &
WPID=$!
sleep 0.5
train() { # NAME ARGS...
    name=$1; shift
    ip netns exec "$NA" "$R" train --data "$W/d.tsv" --spec configs/criteo_standard.json --config configs/dlrm_small.json \
        --no-shuffle --steps "$STEPS" --loss-log "$W/$name.loss" --json "$@" 2>"$W/$name.err" | grep '^{"model"' \
        > "$W/$name.json" || { cat "$W/$name.err" >&2; exit 1; }
}
train local
echo "offload across a veth pair: trainer on $A, prep-worker on $B:$PORT, 50% of the pieces remote"
printf '%-6s %14s %14s %12s %12s %s\n' point pieces_remote pieces_local MB_in MB_out losses
for p in p1 p2 p3; do
    train "$p" --workers "tcp://$B:$PORT" --keys "$W/tr" --offload 0.5 --offload-at $p
    same=$(cmp -s "$W/local.loss" "$W/$p.loss" && echo "equal to local, bitwise" || echo DIFFER)
    python3 - "$W/$p.json" "$p" "$same" <<'EOF'
import json, sys
o = json.load(open(sys.argv[1]))["offload"]
print(f"{sys.argv[2]:<6} {o['pieces_remote']:14d} {o['pieces_local']:14d} {o['bytes_in']/1e6:12.2f} {o['bytes_out']/1e6:12.2f} {sys.argv[3]}")
EOF
    [ "$same" = DIFFER ] && exit 1
done
grep -q "job " "$W/worker.log" && echo "worker log: $(grep -c 'job ' "$W/worker.log") job(s) served"
