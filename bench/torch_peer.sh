# Sourced by bench/*_vs_pytorch.sh: the PyTorch peer's interpreter and what it needs.
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
