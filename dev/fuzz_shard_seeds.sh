#!/bin/sh
# Writes the seeds of the .rshard fuzz target (tests/fuzz/seeds/fuzz_shard/) with this
# build's `rectrain gen` and `rectrain prep`: a 3-feature spec (a table of 5e9 rows, so 64-bit
# ids; a vocabulary; a 7-row table) over one-hot, multi-hot and label-less rows, and the
# 26-feature criteo_vocab spec. Each file is one option byte (fuzz_shard.c: fix every
# checksum, rows per read) and then the shard. Rerun when the .rshard format changes.
#   dev/fuzz_shard_seeds.sh        # from the repository root, after make build
set -eu
cd "$(dirname "$0")/.."
R=$PWD/build/rectrain
OUT=$PWD/tests/fuzz/seeds/fuzz_shard
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
cat >"$T/small.json" <<'SPEC'
{
  "format": "rectrain-prep", "version": 1, "name": "fuzz_small",
  "tables": {"C1": {"rows": 5000000000}, "C2": {"rows": "auto"}, "C3": {"rows": 7}},
  "dense": [
    {"name": "I1", "input": "I1", "ops": [{"op": "fill_null", "value": 0}, {"op": "clamp", "min": 0}, {"op": "cast", "to": "f32"}, {"op": "log1p"}]}
  ],
  "sparse": [
    {"name": "C1", "input": "C1", "table": "C1", "ops": [{"op": "fill_null", "value": 0}, {"op": "modulo", "divisor": 5000000000}]},
    {"name": "C2", "input": "C2", "table": "C2", "ops": [{"op": "fill_null", "value": 0}, {"op": "categorify", "min_count": 1}]},
    {"name": "C3", "input": "C3", "table": "C3", "ops": [{"op": "fill_null", "value": 0}, {"op": "modulo", "divisor": 7}]}
  ]
}
SPEC
"$R" gen --rows 12 --out "$T/a.tsv" --seed 3 >/dev/null
"$R" gen --rows 9 --out "$T/m.tsv" --seed 4 --multi-hot --scale 0.00001 >/dev/null
"$R" gen --rows 7 --out "$T/t.tsv" --seed 5 --test-format >/dev/null
"$R" prep --spec "$T/small.json" --in "$T/a.tsv" --out "$T/s.rshard" --group-rows 5 >/dev/null
"$R" prep --spec "$T/small.json" --in "$T/m.tsv" --out "$T/sm.rshard" --group-rows 2 >/dev/null
"$R" prep --spec "$T/small.json" --in "$T/t.tsv" --out "$T/st.rshard" --group-rows 7 --test-format >/dev/null
"$R" prep --spec configs/criteo_vocab.json --in "$T/a.tsv" --out "$T/v.rshard" --group-rows 5 >/dev/null
# seed NAME OPTION-BYTE SHARD
seed() { { printf "\\$(printf %03o "$2")"; cat "$3"; } >"$OUT/$1"; }
mkdir -p "$OUT"
seed wide_single_g5 $((7 | 2 << 3)) "$T/s.rshard"       # 3 rows per read
seed wide_single_nofix 0 "$T/s.rshard"                  # no checksum fixed, 1 row per read
seed multihot_g2 7 "$T/sm.rshard"
seed nolabel_g7 $((7 | 31 << 3)) "$T/st.rshard"         # 32 rows per read
seed criteo26_vocab_g5 $((7 | 4 << 3)) "$T/v.rshard"
ls -l "$OUT"
