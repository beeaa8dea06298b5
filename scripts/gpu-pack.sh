#!/bin/sh
# Packs what a GPU machine without this project's Debian packages needs to run the GPU checks
# into .gpu/pack.tar.xz (ignored by git): the rectrain binary, the CUDA test programs, and every shared
# library they load except the C runtime's own (libc, libm, libstdc++, ... come from the
# machine). Then: bench/gpu_check.sh there. Usage: scripts/gpu-pack.sh [BUILD=build]
set -eu
BUILD=${1:-build}
rm -rf .gpu; mkdir -p .gpu/bin .gpu/lib
grep -qx '/.gpu/' .git/info/exclude 2>/dev/null || echo '/.gpu/' >> .git/info/exclude
for p in rectrain test_cuda_parity test_cuda_host test_gprep; do cp "$BUILD/$p" .gpu/bin/; done
for p in .gpu/bin/*; do ldd "$p"; done | awk '$3 ~ /^\// { print $3 }' | sort -u |
    grep -Ev '/(libc|libm|libdl|librt|libpthread|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' |
    while read -r l; do cp -L "$l" .gpu/lib/; done
strip .gpu/bin/* .gpu/lib/* 2>/dev/null || true
tar -C .gpu -cJf .gpu/pack.tar.xz bin lib && rm -rf .gpu/bin .gpu/lib   # ~12 MB: the device call carries 64 MiB
du -sh .gpu/pack.tar.xz
