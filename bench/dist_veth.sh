#!/bin/sh
# Two ranks on two "hosts": network namespaces joined by a veth pair, mpirun over TCP only
# (../shared/recipes/mpi-across-namespaces.md). Trains STEPS steps of a small DLRM (row-wise
# Adagrad on the tables, SGD on the dense layers) on ROWS generated rows as 2 ranks across
# the pair and as one process, and prints the largest relative gap between their per-step
# losses, their AUCs and the 2-rank step time split. Sets up and tears down everything itself
# (root, iproute2). Usage: bench/dist_veth.sh [ROWS=60000] [STEPS=200]   (from the repo root)
set -eu
ROWS=${1:-60000}; STEPS=${2:-200}
R=$(pwd)/build/rectrain
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
netns_pair "$NA" "$NB" $A $B
# mpirun's "rsh agent": enters the namespace of the host it is asked for
cat > "$W/nsrsh" <<EOF
#!/bin/sh
host=\$1; shift
case \$host in $A) ns=$NA;; $B) ns=$NB;; *) exit 1;; esac
exec ip netns exec \$ns sh -c "\$*"
EOF
chmod +x "$W/nsrsh"

# data: generated rows, ids folded into tables of 240..5000 rows
cd "$W"
{
    printf '{"format": "rectrain-prep", "version": 1, "name": "small", "tables": {'
    for c in $(seq 1 26); do printf '%s"C%d": {"rows": %d}' "$([ $c = 1 ] || echo ', ')" $c $((50 + 190 * c)); done
    printf '}, "dense": ['
    for i in $(seq 1 13); do
        printf '%s{"name": "I%d", "input": "I%d", "ops": [{"op": "fill_null", "value": 0}, {"op": "clamp", "min": 0}, ' \
            "$([ $i = 1 ] || echo ', ')" $i $i
        printf '{"op": "cast", "to": "f32"}, {"op": "log1p"}]}'
    done
    printf '], "sparse": ['
    for c in $(seq 1 26); do
        printf '%s{"name": "C%d", "input": "C%d", "table": "C%d", "ops": [{"op": "fill_null", "value": 0}, ' \
            "$([ $c = 1 ] || echo ', ')" $c $c $c
        printf '{"op": "modulo", "divisor": %d}]}' $((50 + 190 * c))
    done
    printf ']}\n'
} > spec.json
cat > model.json <<'EOF'
{"format": "rectrain-model", "version": 1, "name": "dlrm_rw", "model": "dlrm", "tables": "data",
 "embedding": {"dim": 16, "pooling": "sum"}, "bottom_mlp": [64, 16], "top_mlp": [64, 1],
 "interaction": {"kind": "dot", "self": false},
 "optimizer": {"dense": {"kind": "sgd", "lr": 0.1}, "sparse": {"kind": "rowwise_adagrad", "lr": 0.05}},
 "train": {"batch_size": 256, "epochs": 1, "seed": 3}}
EOF
"$R" gen --rows "$ROWS" --out d.tsv >/dev/null 2>&1
"$R" prep --spec spec.json --in d.tsv --out d.rshard >/dev/null 2>&1
COMMON="--data $W/d.rshard --config $W/model.json --holdout 0.1 --batch 256 --threads 1 --steps $STEPS --json"

"$R" train $COMMON --loss-log "$W/one.txt" > one.json 2>/dev/null
ip netns exec "$NA" mpirun --mca plm_rsh_agent "$W/nsrsh" --mca btl tcp,self \
    --mca osc pt2pt --mca btl_tcp_if_include 192.168.77.0/24 --mca oob_tcp_if_include 192.168.77.0/24 \
    -H $A:1,$B:1 -np 2 "$R" train $COMMON --loss-log "$W/two.txt" > two.json 2> two.err ||
    { cat two.err >&2; exit 1; }

python3 - "$STEPS" <<'EOF'
import json, sys
steps = int(sys.argv[1])
def losses(p): return [float(l.split()[1]) for l in open(p) if l.strip()]
def summary(p): return json.loads([l for l in open(p) if l.startswith('{"model"')][-1])
a, b = losses("one.txt"), losses("two.txt")
one, two = summary("one.json"), summary("two.json")
gap = max(abs(x - y) / abs(x) for x, y in zip(a, b))
ms = two["step_ms"]
print(f"2 ranks in two network namespaces (veth, TCP) vs one process, {steps} steps of batch 256")
print(f"  per-step losses: {len(a)} and {len(b)} steps, largest relative gap {gap:.2e} (criterion 1e-4)")
print(f"  AUC: one process {one['auc']:.6f}, 2 ranks {two['auc']:.6f} (gap {abs(one['auc'] - two['auc']):.1e})")
print(f"  2-rank step (ms): local {ms['local']:.3f}, fetch {ms['fetch']:.3f}, dense {ms['dense']:.3f}, "
      f"all-reduce {ms['allreduce']:.3f}, exchange {ms['exchange']:.3f}; "
      f"sent {two['sent_bytes_per_step'] / 1e6:.3f} MB/step (plan {two['plan_sent_bytes_per_step'] / 1e6:.3f})")
print(f"  samples/s: one process {one['samples_per_s']:.0f}, 2 ranks over veth {two['samples_per_s']:.0f}")
sys.exit(0 if len(a) == len(b) == steps and gap <= 1e-4 else 1)
EOF
