#!/bin/sh
# The GPU session's one run (on the lent device machine, from the repo root): the binaries and
# their shared libraries built on a development machine travel in .gpu/ (made by
# scripts/gpu-pack.sh); this runs the parity tests, then the embedding benchmark, and prints
# the tables last. Writes logs to $OUT when set. PREP=0, RAP=0, EMBED=0, TRAIN=0, MEMCHECK=0 leave a
# part out; PARTS and PEER pass to bench/train_gpu.sh.
set -u
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
FELL_BACK= # the new paths that failed their check: the benchmarks ran the old ones, and the run fails
[ -f .gpu/pack.tar.xz ] && tar -C .gpu -xJf .gpu/pack.tar.xz
# cuBLASLt (opened by the GPU model at run time): the toolkit's, else the one PyTorch's wheels bring.
LT=$(ls -d /usr/local/cuda/lib64 2>/dev/null; python3 -c 'import nvidia.cublas; print(list(nvidia.cublas.__path__)[0] + "/lib")' 2>/dev/null || true)
export LD_LIBRARY_PATH="$PWD/.gpu/lib$(printf ':%s' $LT)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
ls $LT 2>/dev/null | grep -m1 cublasLt || echo "no libcublasLt found in: $LT"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
B=.gpu/bin
echo "== parity"
REC_CLI=$PWD/$B/rectrain REC_SOURCE_DIR=$PWD timeout 60 $B/test_cuda_host > "$OUT/host.txt" 2>&1; tail -n 3 "$OUT/host.txt"
timeout 90 $B/test_cuda_parity ${PARITY_CASES:-24} > "$OUT/parity.txt" 2>&1; prc=$?; echo "parity rc $prc"; tail -n 12 "$OUT/parity.txt"
# The batched cuBLASLt interaction (the fallback of the fused kernels) on the DLRM cases.
REC_CUDA_INTERACT=gemm timeout 60 $B/test_cuda_parity 0 > "$OUT/parity_gemm.txt" 2>&1; grc=$?
echo "parity, cuBLASLt interaction, rc $grc"; grep -E '^DLRM|passed' "$OUT/parity_gemm.txt"
if [ $prc != 0 ] && [ $grc = 0 ]; then echo "THE FUSED INTERACTION FAILS PARITY: the benchmarks run the cuBLASLt one"; export REC_CUDA_INTERACT=gemm; FELL_BACK="$FELL_BACK interaction"; fi
# The bf16 layers' outputs written in bf16 by cuBLASLt (no fp32 copies): against keeping fp32 copies.
if [ $prc != 0 ]; then
    REC_CUDA_MLP=plain timeout 90 $B/test_cuda_parity ${PARITY_CASES:-24} > "$OUT/parity_plain.txt" 2>&1; mrc=$?
    echo "parity, MLP with fp32 activations (REC_CUDA_MLP=plain), rc $mrc"; tail -n 3 "$OUT/parity_plain.txt"
    if [ $mrc = 0 ]; then echo "THE BF16 ACTIVATIONS FAIL PARITY: the benchmarks keep fp32 copies"; export REC_CUDA_MLP=plain; FELL_BACK="$FELL_BACK mlp"; fi
fi
REC_BIN=$B/rectrain timeout ${STAGED_TIMEOUT:-150} bench/staged_check.sh ${STAGED_ROWS:-200000} > "$OUT/staged.txt" 2>&1
src=$?; echo "staged input (batches gathered on the GPU) against the host's packing rc $src"; cat "$OUT/staged.txt"
if [ $src != 0 ]; then echo "THE STAGED INPUT FAILS: the benchmarks pack batches on the host"; export REC_CUDA_INPUT=host; FELL_BACK="$FELL_BACK input"; fi
REC_SOURCE_DIR=$PWD timeout 120 $B/test_gprep > "$OUT/gprep.txt" 2>&1; echo "GPU preprocessing parity rc $?"; tail -n 6 "$OUT/gprep.txt"
if [ "${MEMCHECK:-1}" = 1 ] && command -v compute-sanitizer >/dev/null; then
    timeout ${MEMCHECK_TIMEOUT:-60} compute-sanitizer --tool memcheck --print-limit 5 $B/test_cuda_parity ${MEMCHECK_CASES:-1} > "$OUT/memcheck.txt" 2>&1
    echo "memcheck rc $?"; grep -E 'ERROR SUMMARY|Invalid|passed' "$OUT/memcheck.txt" | head -n 6
    # the staged input's kernels (gather from staged windows), on a short multi-hot training run
    M=$(mktemp -d "${TMPDIR:-/tmp}/rectrain-mc-XXXXXX")
    $B/rectrain gen --rows 20000 --scale 0.01 --seed 9 --multi-hot --out "$M/d.tsv" >/dev/null 2>&1
    $B/rectrain prep --spec configs/criteo_standard.json --in "$M/d.tsv" --out "$M/d.rshard" >/dev/null 2>&1
    REC_PROGRESS=0 timeout ${MEMCHECK_TIMEOUT:-60} compute-sanitizer --tool memcheck --print-limit 5 $B/rectrain train \
        --config configs/dlrm_kaggle.json --data "$M/d.rshard" --batch 4096 --epochs 2 --device cuda > "$OUT/memcheck_staged.txt" 2>&1
    echo "memcheck, staged input rc $?"; grep -E 'ERROR SUMMARY|Invalid' "$OUT/memcheck_staged.txt" | head -n 4; rm -rf "$M"
fi
if [ "${PREP:-1}" = 1 ]; then
echo "== GPU preprocessing (ops on the GPU, parsing on the CPUs) against the CPUs"
for sp in criteo_standard criteo_rap criteo_heavy; do
    REC_SOURCE_DIR=$PWD timeout 100 $B/rectrain bench prep --spec configs/$sp.json --rows ${PREP_ROWS:-1M} --reps 3 \
        --threads $(nproc) --multi-hot --device cuda 2>&1 | tail -n 4
done
echo "== the same, rows parsed beforehand: the operators alone (copies to the GPU and back included)"
for sp in criteo_standard criteo_rap criteo_heavy; do
    REC_SOURCE_DIR=$PWD timeout 100 $B/rectrain bench prep --spec configs/$sp.json --rows ${PREP_ROWS:-1M} --reps 3 \
        --threads $(nproc) --multi-hot --parsed --device cuda 2>&1 | tail -n 3
done
REC_SOURCE_DIR=$PWD timeout 120 $B/rectrain bench prep --spec configs/criteo_rap.json --rows 200k --reps 1 --multi-hot \
    --device cuda --latencies "$OUT/latencies.tsv" 2>&1 | tail -n 1
fi
if [ "${RAP:-1}" = 1 ]; then
echo "== RAP end to end: training from raw columns, ops on the GPU, against the shard and prep-then-train"
for cf in configs/dlrm_kaggle.json configs/dlrm_terabyte.json; do
    REC_BIN=$B/rectrain timeout ${RAP_TIMEOUT:-240} bench/rap_train.sh ${RAP_ROWS:-3000000} configs/criteo_heavy.json "$cf" 16384 \
        > "$OUT/rap_$(basename "$cf" .json).txt" 2>&1; echo "rap $cf rc $?"; tail -n 16 "$OUT/rap_$(basename "$cf" .json).txt"
done
fi
if [ "${EMBED:-1}" = 1 ]; then
echo "== embedding bench"
REC_BIN=$B/rectrain timeout 220 bench/embed_gpu.sh "${MODELS:-kaggle A B C D E}" "${REPS:-3}" > "$OUT/embed.txt" 2> "$OUT/embed.err"
echo "embed rc $?"; grep -E 'tuned in|fwd ms' "$OUT/embed.err" | tail -n 14; cat "$OUT/embed.txt"
fi
if [ "${TRAIN:-1}" = 1 ]; then
    echo "== training"
    REC_BIN=$B/rectrain timeout ${TRAIN_TIMEOUT:-200} bench/train_gpu.sh > "$OUT/train.txt" 2> "$OUT/train.err"
    echo "train rc $?"; tail -n 40 "$OUT/train.err"; cat "$OUT/train.txt"
fi
if [ -n "$FELL_BACK" ]; then echo "FAILED CHECKS (the benchmarks above ran the old paths):$FELL_BACK"; exit 1; fi
