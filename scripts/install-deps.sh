#!/bin/sh
# Installs the Debian packages rectrain builds and tests with; does nothing for those already
# present. Needs root (or sudo) only when something is missing.
set -eu
PKGS="build-essential cmake pkg-config zlib1g-dev libcjson-dev libdnnl-dev libopenmpi-dev openmpi-bin libzmq3-dev libprotobuf-c-dev protobuf-c-compiler libcairo2-dev libglpk-dev libxgboost-dev python3 python3-numpy"
# Fuzzing (docs/development.md) uses clang's libFuzzer, and its OpenMP runtime for the engine.
[ "${REC_FUZZ:-0}" = 1 ] && PKGS="$PKGS clang libclang-rt-dev libomp-dev"

missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "install-deps: installing$missing" >&2
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
