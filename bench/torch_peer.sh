# Sourced by bench/*_vs_pytorch.sh and the train benches: the PyTorch peer's interpreter and
# what it needs, the quality run's rows, and reading a value from a JSON summary.
# Debian's python3-torch does its matmuls through libblas.so.3, which is the reference BLAS
# (about 3 GFLOP/s on this machine, against ~130 with OpenBLAS) unless OpenBLAS is installed;
# and OpenBLAS 0.3.21 takes this CPU for a Prescott unless told its core type. A peer whose
# dense layers run on the reference BLAS is not a peer: need_blas refuses to measure one.
# REC_PEER_PY and REC_PEER_BLAS stand in for the interpreter and OpenBLAS's libblas in
# tests/test_bench_scripts.c, which checks every refusal.
PY="${REC_PEER_PY:-/usr/bin/python3}"
BLAS="${REC_PEER_BLAS:-/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3}"

need_torch() {
    $PY -c 'import torch, numpy' 2>/dev/null || {
        echo "$0: the PyTorch peer needs Debian's python3-torch: apt-get install python3-torch python3-numpy" >&2; exit 2; }
}

need_torch_gpu() { # the GPU scripts: a PyTorch built with CUDA that sees the device
    $PY -c 'import torch, numpy, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null || {
        echo "$0: the GPU peer needs a PyTorch that sees the GPU (set REC_PEER_PY to its python)" >&2; exit 2; }
}

need_sklearn() { # the AUC of the peer's predictions
    $PY -c 'import sklearn' 2>/dev/null || {
        echo "$0: the PyTorch peer's AUC needs scikit-learn: apt-get install python3-sklearn" >&2; exit 2; }
}

need_blas() {
    [ -e "$BLAS" ] || {
        echo "$0: the PyTorch peer would multiply on the reference BLAS: apt-get install libopenblas0-pthread" >&2; exit 2; }
    export OPENBLAS_CORETYPE="${OPENBLAS_CORETYPE:-SkylakeX}"
}

scaled_spec() { # spec.json for `rectrain gen --scale $1` into $2: the criteo_standard pipeline with
    # its 26 Kaggle tables scaled by $1 (at least 2 rows each)
    $PY - "$1" > "$2" <<'PYEOF'
import json, sys
K = [1460,583,10131227,2202608,305,24,12517,633,3,93145,5683,8351593,3194,27,14992,5461306,10,5652,2173,4,7046547,18,15,286181,105,142572]
s = float(sys.argv[1]); rows = [max(2, int(round(k * s))) for k in K]
dense = [{"name": f"I{i}", "input": f"I{i}", "ops": [{"op": "fill_null", "value": 0}, {"op": "clamp", "min": 0},
          {"op": "cast", "to": "f32"}, {"op": "log1p"}]} for i in range(1, 14)]
sparse = [{"name": f"C{c}", "input": f"C{c}", "table": f"C{c}", "ops": [{"op": "fill_null", "value": 0},
           {"op": "modulo", "divisor": rows[c - 1]}]} for c in range(1, 27)]
print(json.dumps({"format": "rectrain-prep", "version": 1, "name": "criteo_scaled",
                  "tables": {f"C{c}": {"rows": rows[c - 1]} for c in range(1, 27)}, "dense": dense, "sparse": sparse}))
PYEOF
}

val() { # val KEY FILE: the last value of "KEY" in FILE's JSON (a number, or a string's text)
    sed -n "s/.*\"$1\": \"*\([^,\"}]*\).*/\1/p" "$2" | tail -n 1
}

quality_rows() { # quality_rows ROWS SCALE DIR: the train benches' quality rows, `$R gen --seed 1`
    # with tables scaled by SCALE: DIR/q.tsv, DIR/q.prob (true probabilities), DIR/q.json (the
    # spec) and DIR/q.rshard
    $R gen --rows "$1" --scale "$2" --seed 1 --out "$3/q.tsv" --prob-out "$3/q.prob" >/dev/null
    scaled_spec "$2" "$3/q.json"
    $R prep --spec "$3/q.json" --in "$3/q.tsv" --out "$3/q.rshard" >/dev/null 2>&1
}
