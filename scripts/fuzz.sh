#!/bin/sh
# Builds every libFuzzer target tests/fuzz/fuzz_*.c with clang (fuzzer + ASan + UBSan) against
# the library sources under src/, and runs each for SECONDS (default 600) with a corpus in
# build-fuzz/corpus/NAME, as many at a time as there are cores. Exits non-zero if any target
# fails to build or finds a crash.
#   scripts/fuzz.sh [SECONDS]
# Needs clang, libclang-rt-dev, libomp-dev and Open MPI (REC_FUZZ=1 scripts/install-deps.sh). CC
# overrides clang. Seeds: tests/fuzz/seeds/NAME/* when that folder exists; fuzz_tsv also gets
# a few generated Criteo lines, fuzz_spec and fuzz_model the shipped configs/*.json.
# tests/fuzz/NAME.dict, when present, is passed as the target's dictionary. A crashing input
# is kept in build-fuzz/artifacts/NAME/.
set -eu
SECONDS_PER_TARGET=${1:-600}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=$ROOT/build-fuzz
CC=${CC:-}
if [ -z "$CC" ]; then
    for c in clang clang-14 clang-15 clang-16; do
        if command -v "$c" >/dev/null 2>&1; then CC=$c; break; fi
    done
fi
[ -n "$CC" ] || { echo "fuzz.sh: clang not found (REC_FUZZ=1 scripts/install-deps.sh)" >&2; exit 2; }
JOBS=$(nproc 2>/dev/null || echo 2)

SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
# the TensorBoard event protobufs, generated as the CMake build does
mkdir -p "$OUT/proto"
protoc-c --c_out="$OUT/proto" --proto_path="$ROOT/src/train/proto" tb_event.proto
# Open MPI's flags, as its compiler wrapper would add them (src/sharding/, the cache trainer):
# every library source is compiled, and a target that reaches one links with libmpi.
MPI_CFLAGS=$(pkg-config --cflags ompi-c 2>/dev/null || mpicc --showme:compile 2>/dev/null) ||
    { echo "fuzz.sh: Open MPI not found (scripts/install-deps.sh)" >&2; exit 2; }
MPI_LIBS=$(pkg-config --libs ompi-c 2>/dev/null || mpicc --showme:link)
INC="-I$ROOT/include -I$ROOT/tests -I$OUT/proto $(pkg-config --cflags cairo fontconfig libprotobuf-c) $MPI_CFLAGS"
for d in $(find "$ROOT/src" -type d); do INC="$INC -I$d"; done
CFLAGS="-std=gnu11 -O1 -g -fno-omit-frame-pointer -march=x86-64-v3 -fopenmp -Wno-unused-parameter $SAN $INC"
LIBS="-lz -lcjson -lglpk -lxgboost -lm -lpthread $(pkg-config --libs cairo fontconfig libprotobuf-c) $MPI_LIBS"

mkdir -p "$OUT/obj" "$OUT/bin"
rm -f "$OUT/obj"/*.o "$OUT/libfuzz.a"
export CC CFLAGS OUT ROOT
# Library objects, instrumented for coverage. A source that does not compile (someone's
# work in progress, or one that needs an optional dependency) is reported and left out;
# a target that needs it then fails to link, which counts as a failure.
{ find "$ROOT/src" -name '*.c'; echo "$OUT/proto/tb_event.pb-c.c"; } | sort | xargs -P "$JOBS" -I{} sh -c '
    src={}; obj="$OUT/obj/$(echo "${src#$ROOT/src/}" | tr / _ | sed "s/\.c$/.o/")"
    $CC $CFLAGS -fsanitize=fuzzer-no-link -c "$src" -o "$obj" 2>"$obj.log" ||
        echo "fuzz.sh: warning: $src does not compile, left out (see $obj.log)" >&2'
ar rcs "$OUT/libfuzz.a" "$OUT"/obj/*.o

status=0
built=""
for t in "$ROOT"/tests/fuzz/fuzz_*.c; do
    [ -e "$t" ] || continue
    name=$(basename "$t" .c)
    if $CC $CFLAGS -fsanitize=fuzzer "$t" "$OUT/libfuzz.a" $LIBS -o "$OUT/bin/$name"; then
        built="$built $name"
    else
        echo "fuzz.sh: $name: build failed" >&2
        status=1
    fi
done

# A few valid lines in both formats (the first byte is the fuzzer's option byte).
seed_tsv() {
    dir=$1
    i=0
    for flags in 0 1 2 3 129; do
        for row in 1 2 3; do
            i=$((i + 1))
            {
                printf "\\$(printf %03o "$flags")"
                if [ $((flags & 1)) = 1 ]; then printf '%s\t' $((row % 2)); fi
                printf '%s\t' "$row" "" "-$row" "12" "" "0" "45" "1234567" "" "3" "" "9" "-1"
                printf '%s\t' 68fd1e64 80e26c9b fb936136 7b4723c4 25c83c98 7e0ccccf de7995b8 \
                    1f89b562 a73ee510 a8cd5504 b2cb9c98 37c9c164 2824a5f6 1adce6ef 8ba8b39a \
                    891b62e7 e5ba7672 f54016b9 21ddcdc9 b1252a9d 07b5194c "" 3a171ecb c5c50484 \
                    e8b83407
                printf '9727dd16\n'
                if [ "$row" = 3 ]; then printf '%s\n' "1	2	3"; fi
            } >"$dir/seed$i"
        done
    done
    printf '\003' >"$dir/empty"
}

# One target: its corpus from the seeds, SECONDS_PER_TARGET of fuzzing; a failure leaves
# $OUT/NAME.failed (targets run JOBS at a time, one core each).
run_one() {
    name=$1
    corpus=$OUT/corpus/$name
    art=$OUT/artifacts/$name
    mkdir -p "$corpus" "$art"
    extra=""
    if [ "$name" = fuzz_tsv ]; then seed_tsv "$corpus"; fi
    # cJSON is not instrumented: without whole valid specs as seeds (and room for them) the
    # JSON fuzzers never get past the syntax (fuzz_spec: 40 edges instead of ~670).
    case $name in
    fuzz_spec | fuzz_model) cp "$ROOT"/configs/*.json "$corpus"/; extra="-max_len=16384" ;;
    fuzz_shard | fuzz_rawcols | fuzz_shardplan) extra="-max_len=16384" ;; # room to grow past the largest seed (12 KB)
    esac
    if [ -d "$ROOT/tests/fuzz/seeds/$name" ]; then cp "$ROOT/tests/fuzz/seeds/$name"/* "$corpus"/ 2>/dev/null || true; fi
    if [ -f "$ROOT/tests/fuzz/$name.dict" ]; then extra="$extra -dict=$ROOT/tests/fuzz/$name.dict"; fi
    echo "fuzz.sh: running $name for ${SECONDS_PER_TARGET}s" >&2
    # shellcheck disable=SC2086
    if ! "$OUT/bin/$name" -max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=4096 $extra \
        -print_final_stats=1 -artifact_prefix="$art/" "$corpus" >"$OUT/$name.log" 2>&1; then
        echo "fuzz.sh: $name FAILED (log: $OUT/$name.log, inputs: $art/)" >&2
        tail -40 "$OUT/$name.log" >&2
        touch "$OUT/$name.failed"
    else
        echo "fuzz.sh: $name ok ($(grep -o 'stat::number_of_executed_units: [0-9]*' "$OUT/$name.log" | grep -o '[0-9]*$') runs)" >&2
    fi
}

rm -f "$OUT"/*.failed
n=0
for name in $built; do
    run_one "$name" &
    n=$((n + 1))
    if [ "$n" -ge "$JOBS" ]; then wait; n=0; fi
done
wait
for name in $built; do
    if [ -e "$OUT/$name.failed" ]; then status=1; fi
done
exit $status
