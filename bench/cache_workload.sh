# The workload of the Bagpipe link bench (bench/cache_link.sh, bench/curve_cost.sh), sourced:
# cache_workload DIR ROWS writes DIR/spec.json (criteo_standard with the Kaggle tables / 4),
# DIR/model.json (a DLRM with 64-dim embeddings, concatenation, a small top MLP: embedding
# traffic dominates, as in Bagpipe's setting) and DIR/d.rshard (ROWS multi-hot rows). Needs $R.
cache_workload() {
cw_dir=$1; cw_rows=$2
python3 - "$cw_dir" <<'PYEOF'
import json, sys
w = sys.argv[1]
s = json.load(open("configs/criteo_standard.json"))
rows = {}
for k, v in s["tables"].items():
    v["rows"] = max(2, (v["rows"] + 3) // 4); rows[k] = v["rows"]
for sp in s["sparse"]:
    for op in sp["ops"]:
        if op.get("op") == "modulo": op["divisor"] = rows[sp["table"]]
json.dump(s, open(f"{w}/spec.json", "w"))
m = json.load(open("configs/dlrm_small.json"))
m.update(name="dlrm_cat64", bottom_mlp=[64], top_mlp=[64, 1], interaction={"kind": "cat"})
m["embedding"]["dim"] = 64
json.dump(m, open(f"{w}/model.json", "w"))
PYEOF
"$R" gen --rows "$cw_rows" --multi-hot --out "$cw_dir/d.tsv" >/dev/null 2>&1
"$R" prep --spec "$cw_dir/spec.json" --in "$cw_dir/d.tsv" --out "$cw_dir/d.rshard" >/dev/null 2>&1
rm -f "$cw_dir/d.tsv"
}
