#!/bin/sh
# The GPU session's one run (on the lent device machine, from the repo root): the binaries and
# their shared libraries built on a development machine travel in .gpu/ (made by
# scripts/gpu-pack.sh); this runs the parity tests, then the embedding benchmark, and prints
# the tables last. Writes logs to $OUT when set.
set -u
OUT=${OUT:-/tmp/gpu-out}; mkdir -p "$OUT"
[ -f .gpu/pack.tar.xz ] && tar -C .gpu -xJf .gpu/pack.tar.xz
export LD_LIBRARY_PATH="$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
B=.gpu/bin
echo "== parity"
REC_CLI=$PWD/$B/rectrain REC_SOURCE_DIR=$PWD timeout 60 $B/test_cuda_host > "$OUT/host.txt" 2>&1; tail -n 3 "$OUT/host.txt"
timeout 90 $B/test_cuda_parity ${PARITY_CASES:-24} > "$OUT/parity.txt" 2>&1; echo "parity rc $?"; tail -n 12 "$OUT/parity.txt"
if command -v compute-sanitizer >/dev/null; then
    timeout 90 compute-sanitizer --tool memcheck --print-limit 5 $B/test_cuda_parity 2 > "$OUT/memcheck.txt" 2>&1
    echo "memcheck rc $?"; grep -E 'ERROR SUMMARY|Invalid|passed' "$OUT/memcheck.txt" | head -n 6
fi
echo "== embedding bench"
REC_BIN=$B/rectrain timeout 220 bench/embed_gpu.sh "${MODELS:-kaggle A B C D E}" "${REPS:-3}" > "$OUT/embed.txt" 2> "$OUT/embed.err"
echo "embed rc $?"; tail -n 30 "$OUT/embed.err" | grep -v '^{' | tail -n 24; cat "$OUT/embed.txt"
