# Sourced by the benches: small_spec NAME prints the prep spec they train on, Criteo's 13 dense
# features (log1p of the clamped value) and 26 categorical ones folded by modulo into tables of
# 240..5000 rows (table c has 50 + 190 c), so that `rectrain gen` rows give a model that trains
# in seconds.
small_spec() {
    printf '{"format": "rectrain-prep", "version": 1, "name": "%s", "tables": {' "$1"
    for c in $(seq 1 26); do printf '%s"C%d": {"rows": %d}' "$([ "$c" = 1 ] || echo ', ')" "$c" $((50 + 190 * c)); done
    printf '}, "dense": ['
    for i in $(seq 1 13); do
        printf '%s{"name": "I%d", "input": "I%d", "ops": [{"op": "fill_null", "value": 0}, {"op": "clamp", "min": 0}, ' \
            "$([ "$i" = 1 ] || echo ', ')" "$i" "$i"
        printf '{"op": "cast", "to": "f32"}, {"op": "log1p"}]}'
    done
    printf '], "sparse": ['
    for c in $(seq 1 26); do
        printf '%s{"name": "C%d", "input": "C%d", "table": "C%d", "ops": [{"op": "fill_null", "value": 0}, ' \
            "$([ "$c" = 1 ] || echo ', ')" "$c" "$c" "$c"
        printf '{"op": "modulo", "divisor": %d}]}' $((50 + 190 * c))
    done
    printf ']}\n'
}
