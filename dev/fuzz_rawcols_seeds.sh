#!/bin/sh
# Writes the seeds of the .rraw fuzz target (tests/fuzz/seeds/fuzz_rawcols/) with this build's
# `rectrain gen` and `rectrain prep --raw`: one-hot rows (32-bit ints and ids, implied
# offsets), multi-hot rows, label-less rows, and rows with 64-bit ints and ids. Each file is one
# option byte (fuzz_rawcols.c: which checksums to fix, rows per read) and then the file. Rerun
# when the .rraw format changes.
#   dev/fuzz_rawcols_seeds.sh        # from the repository root, after make build (R=BINARY)
set -eu
cd "$(dirname "$0")/.."
R=${R:-$PWD/build/rectrain}
OUT=$PWD/tests/fuzz/seeds/fuzz_rawcols
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
"$R" gen --rows 12 --out "$T/a.tsv" --seed 3 >/dev/null
"$R" gen --rows 9 --out "$T/m.tsv" --seed 4 --multi-hot --scale 0.00001 >/dev/null
"$R" gen --rows 7 --out "$T/t.tsv" --seed 5 --test-format >/dev/null
# two rows beyond 32 bits: I1 of 2^40, C1 of 16 hex digits; a missing field and a list
{
    head -n 3 "$T/a.tsv"
    printf '1\t1099511627776'; for i in $(seq 2 13); do printf '\t%s' "$i"; done
    printf '\tffffffffffff0001'; for i in $(seq 2 25); do printf '\t%08x' "$i"; done; printf '\t\n'
    printf '0\t-5'; for i in $(seq 2 13); do printf '\t'; done
    printf '\t0a,0b,0c'; for i in $(seq 2 26); do printf '\t%08x' "$i"; done; printf '\n'
} >"$T/w.tsv"
"$R" prep --raw --in "$T/a.tsv" --out "$T/a.rraw" --group-rows 5 >/dev/null
"$R" prep --raw --in "$T/m.tsv" --out "$T/m.rraw" --group-rows 2 >/dev/null
"$R" prep --raw --in "$T/t.tsv" --out "$T/t.rraw" --group-rows 7 --format test >/dev/null
"$R" prep --raw --in "$T/w.tsv" --out "$T/w.rraw" --group-rows 3 >/dev/null
# seed NAME OPTION-BYTE FILE
seed() { { printf "\\$(printf %03o "$2")"; cat "$3"; } >"$OUT/$1"; }
mkdir -p "$OUT"
seed onehot_g5 $((7 | 2 << 3)) "$T/a.rraw"   # 3 rows per read
seed onehot_nofix 0 "$T/a.rraw"              # no checksum fixed, 1 row per read
seed multihot_g2 7 "$T/m.rraw"
seed nolabel_g7 $((7 | 31 << 3)) "$T/t.rraw" # 32 rows per read
seed wide_g3 $((7 | 1 << 3)) "$T/w.rraw"
ls -l "$OUT"
