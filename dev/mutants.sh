#!/bin/sh
# Mutation sweep of the embedding engine's tests: each mutant below changes one line of
# src/embed (the Nth line holding a fixed string, through a sed substitution), rebuilds
# test_embed and test_embed_sched in build/, runs both, and restores the line. A mutant the
# tests do not notice is SURVIVED: a gap in the tests, unless the change is equivalent (the
# EQUIV column says why it cannot change a result). Prints a line per mutant and a count.
#   dev/mutants.sh            # from the repository root, after cmake -B build (about 15 min)
# The working tree must be clean in src/embed; every file is restored, also on interrupt.
set -eu
cd "$(dirname "$0")/.."
[ -d build ] || { echo "mutants.sh: configure build/ first (make build)" >&2; exit 2; }
git diff --quiet -- src/embed || { echo "mutants.sh: src/embed has uncommitted changes" >&2; exit 2; }
trap 'git checkout -q -- src/embed; exit 130' INT TERM

# file ~ fixed string on the line ~ Nth such line ~ sed substitution ~ why it is equivalent (or -)
MUTANTS='
pool.c~if (j->check && (uint64_t)id >= (uint64_t)R) return k + q;~1~s/id >= (uint64_t)R/id > (uint64_t)R/~-
pool.c~if (j->check && (uint64_t)id >= (uint64_t)R) return k;~1~s/id >= (uint64_t)R/id > (uint64_t)R/~-
pool.c~if (j->check && (uint64_t)id >= (uint64_t)R) return k;~2~s/id >= (uint64_t)R/id > (uint64_t)R/~-
pool.c~if (j->check && (uint64_t)id >= (uint64_t)R) return k + q;~2~s/id >= (uint64_t)R/id > (uint64_t)R/~-
pool.c~if (j->check && (uint64_t)id >= (uint64_t)R) return k;~3~s/id >= (uint64_t)R/id > (uint64_t)R/~-
pool.c~if (j->check && (uint64_t)id >= (uint64_t)t[i].R) {~1~s/id >= (uint64_t)t/id > (uint64_t)t/~-
pool.c~if (j->check && (uint64_t)id >= (uint64_t)R) return k;~2~s/(uint64_t)id >= (uint64_t)R/id >= R/~-
pool.c~if (j->check && (uint64_t)id >= (uint64_t)R) return k;~3~s/(uint64_t)id >= (uint64_t)R/id >= R/~-
pool.c~L > 0 ? a->v[v] / L : a->v[v]~1~s/L > 0 ? a->v\[v\] \/ L : a->v\[v\]/a->v[v]/~-
pool.c~L > 0 ? a->s[c] / L : a->s[c]~1~s/L > 0 ? a->s\[c\] \/ L : a->s\[c\]/a->s[c]/~-
pool.c~if (j->mean && hi > lo) {~1~s/if (j->mean \&\& hi > lo)/if (0)/~-
forward.c~if ((uint64_t)id >= (uint64_t)e->rows[f]) {~1~s/id >= /id > /~-
forward.c~for (int64_t k = 1; k <= parts && b0 < B; k++) {~1~s/k <= parts/k < parts/~-
forward.c~const int64_t c1 = B - c0 > chunk ? c0 + chunk : B;~1~s/B - c0 > chunk ? c0 + chunk : B/c0 + chunk/~-
forward.c~if (neg >= 0 && off[b1] <= j->nnz_cap) {~1~s/off\[b1\] <= j->nnz_cap/off[b1] <= j->nnz_cap + 1/~-
forward.c~if (neg >= 0 && off[b1] <= j->nnz_cap) {~1~s/neg >= 0 \&\& //~-
forward.c~if (c0 >= B) break;~1~s/c0 >= B/c0 > B/~c0 == B gives the empty chunk [B, B)
forward.c~for (; w < walks; w++) e->walk[w].v~1~s/w < walks;/w < walks - 1;/~every call drains its walks, so a walk left over is already empty
embed_impl.h~return lo >= 0 && lo <= hi && hi <= j->nnz_cap;~1~s/hi <= j->nnz_cap/hi <= j->nnz_cap + 1/~-
embed_impl.h~return lo >= 0 && lo <= hi && hi <= j->nnz_cap;~1~s/lo >= 0 \&\& //~-
backward.c~for (int shift = 0; shift < 64 && (maxid >> shift) != 0; shift += 8) {~1~s/shift < 64/shift < 16/~-
backward.c~for (int shift = 0; shift < 64 && (maxid >> shift) != 0; shift += 8) {~1~s/shift < 64/shift < 24/~-
backward.c~for (int64_t i = 0; i < n; i++) t[count[~1~s/& 255\]++\]/\& 255]]/~-
backward.c~if (check && (uint64_t)id >= (uint64_t)R) {~1~s/id >= /id > /~-
backward.c~if ((uint64_t)rec_jagged_id(j, k) >= (uint64_t)R) {~1~s/>= (uint64_t)R/> (uint64_t)R/~-
backward.c~if (mean) c /= L;~1~s/if (mean) c \/= L;/;/~-
backward.c~if (mean) c /= L;~2~s/if (mean) c \/= L;/;/~-
backward.c~if (mean) coef /= L;~1~s/if (mean) coef \/= L;/;/~-
backward.c~S[id] += sq / (float)E;~1~s/sq \/ (float)E/sq/~-
backward.c~while (i < n && s[i].id == id) i++;~1~s/while (i < n \&\& s\[i\].id == id) i++;/i++;/~-
backward.c~for (int64_t r = 0; r < R; r++) h[r + 1] += h[r];~1~s/r < R;/r < R - 1;/~h[R] is never read: ids are below R
backward.c~for (int64_t id = 0; id < R; id++) {~1~s/id < R;/id < R - 1;/~-
backward.c~if (++*epoch == 0) {~1~s/== 0)/== 0 \&\& 0)/~-
backward.c~memset(stamp, 0, (size_t)e->drow_stride~1~s/memset(stamp, 0, /memset(stamp, 0, 0 * /~-
backward.c~if (n * 8 > R) {~1~s/n \* 8 > R/n * 8 >= R/~both branches update the same rows, in another order
backward.c~for (int64_t id = 0; id < R; id++)~2~s/id < R;/id < R - 1;/~-
backward.c~for (int64_t i = 0; i < n; i++) {~1~s/i = 0;/i = 1;/~-
sched.c~if (x > max || (*q && *q != ~1~s/x > max/x > max + 1/~-
sched.c~&& v >= REC_EMBED_GRAIN_MIN))~1~s/ \&\& v >= REC_EMBED_GRAIN_MIN//~-
sched.c~if (!bad && *p) bad = "the end of the schedule";~1~s/if (!bad \&\& \*p) bad/if (0) bad/~-
plan.c~if (!cJSON_IsString(v) || strlen(v->valuestring) != 16) return 0;~1~s/!= 16/> 16/~-
plan.c~return *end == ~1~s/return \*end == .*;/return 1;/~-
plan.c~if (!cJSON_IsNumber(ver) || ver->valuedouble != 1)~1~s/ver->valuedouble != 1/ver->valuedouble < 1/~-
embed.c~if (c->rows[f] < 1)~1~s/< 1/< 0/~-
embed.c~if (c->dims[f] < 1)~1~s/< 1/< 0/~-
embed.c~if (!(o->lr > 0.0f) || isinf(o->lr))~1~s/ || isinf(o->lr)//~-
embed.c~if (c->max_batch < 1)~1~s/< 1/< 0/~-
embed.c~if (c->threads < 0)~1~s/< 0/< -1/~-
embed.c~if (b->n < 0)~1~s/if (b->n < 0)/if (0)/~-
embed.c~if (first_feature < 0 || (int64_t)first_feature + e->F > b->n_sparse)~1~s/> b->n_sparse/> b->n_sparse + 1/~-
'

echo "$MUTANTS" | while IFS='~' read -r file text nth subst why; do
    [ -n "$file" ] || continue
    f=src/embed/$file
    line=$(grep -nF -- "$text" "$f" | sed -n "${nth}p" | cut -d: -f1)
    if [ -z "$line" ]; then echo "STALE     $file: no line $nth holding '$text'"; continue; fi
    sed -i "${line}${subst}" "$f"
    if git diff --quiet -- "$f"; then echo "STALE     $file:$line: '$subst' changes nothing"; continue; fi
    verdict=SURVIVED
    if ! cmake --build build -j2 --target test_embed test_embed_sched >/dev/null 2>&1; then
        verdict=NOBUILD
    elif ! timeout 300 ./build/test_embed >/dev/null 2>&1 || ! timeout 300 ./build/test_embed_sched >/dev/null 2>&1; then
        verdict=KILLED
    fi
    git checkout -q -- "$f"
    [ "$verdict" = SURVIVED ] && [ "$why" != - ] && verdict="EQUIV"
    printf '%-9s %s:%s  %s%s\n' "$verdict" "$file" "$line" "$subst" "$([ "$why" != - ] && echo "  ($why)")"
done | tee /tmp/rectrain-mutants.txt
cmake --build build -j2 --target test_embed test_embed_sched >/dev/null
echo "mutants: $(grep -c '^KILLED' /tmp/rectrain-mutants.txt) killed, $(grep -c '^SURVIVED' /tmp/rectrain-mutants.txt) survived," \
     "$(grep -c '^EQUIV' /tmp/rectrain-mutants.txt) equivalent, $(grep -c -E '^(STALE|NOBUILD)' /tmp/rectrain-mutants.txt) stale or broken"
grep -q '^SURVIVED' /tmp/rectrain-mutants.txt && exit 1
exit 0
