#!/usr/bin/env bash
# same_tables.sh — "a change leaves every shipped stories260K table as it was": builds git
# revision REV (default HEAD~1) in a temporary worktree, runs every configs/*.cfg whose model is
# the bundled stories260K with it and with BUILD_DIR's lmpress, and compares the two tables:
#   - `lmpress diff --class exact`: every variant within the exact class's floors;
#   - the JSON's raw sums (nll, kld, top-1 hits, tokens, windows), bits per weight, LAMBADA and
#     each linear's recorded outcome, which must be equal to the last bit.
# Timings, peak memory and run metadata are not compared.
#
#   tools/bench/same_tables.sh [REV] [BUILD_DIR] [OUT_DIR]     (defaults: HEAD~1, build, same-out)
#
# The old build's tables are kept in OUT_DIR and reused (SAME_REUSE=0 reruns them), so checking
# a series of changes against one revision runs the old side once.
# Exit status: the number of configs whose tables differ (or failed to run).
set -uo pipefail
cd "$(dirname "$0")/../.."
rev=${1:-HEAD~1}
build=${2:-build}
out=${3:-same-out}
new="$build/lmpress"
[ -x "$new" ] || { echo "same_tables.sh: build first ($new missing)" >&2; exit 1; }
py=${LMP_PYTHON:-python3}
mkdir -p "$out"
sha=$(git rev-parse --short "$rev") || exit 1
old_src="$out/src-$sha"
old="$old_src/build/lmpress"
build_old() {
    [ -x "$old" ] && return 0
    rm -rf "$old_src" && git worktree prune
    git worktree add -f --detach "$old_src" "$rev" >/dev/null || return 1
    cmake -S "$old_src" -B "$old_src/build" -DLMP_WITH_CUDA=OFF -DLMP_WITH_OPENCL=OFF \
          -DLMP_BUILD_TESTS=OFF >"$out/build-$sha.log" 2>&1 &&
        make -C "$old_src/build" -j"$(nproc)" >>"$out/build-$sha.log" 2>&1 ||
        { echo "same_tables.sh: building $rev failed, see $out/build-$sha.log" >&2; return 1; }
}

bad=0
for cfg in configs/*.cfg; do
    grep -q 'models/stories260K/' "$cfg" || continue
    name=$(basename "$cfg" .cfg)
    a="$out/$name.$sha.json" b="$out/$name.new.json"
    if [ "${SAME_REUSE:-1}" != 0 ] && [ -s "$a" ]; then
        echo "== $name ($sha: table kept from an earlier run)"
    else
        # each side runs the config of its own tree, so a config the change edited (a default
        # made explicit) runs as each side shipped it
        build_old || exit 1
        echo "== $name ($sha)"
        nice -n 19 "$old" --quiet compare "$old_src/$cfg" --json "$a" >/dev/null ||
            { echo "   FAILED to run"; bad=$((bad + 1)); continue; }
    fi
    echo "== $name (this build: $new)"
    nice -n 19 "$new" --quiet compare "$cfg" --json "$b" >/dev/null ||
        { echo "   FAILED to run"; bad=$((bad + 1)); continue; }
    "$new" diff "$a" "$b" --class exact >"$out/$name.diff.txt" ||
        { echo "   beyond the exact floors: $out/$name.diff.txt"; bad=$((bad + 1)); continue; }
    "$py" - "$a" "$b" <<'EOF' || bad=$((bad + 1))
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
def stages_same(x, y):
    # every parameter the old build recorded has the same value now; a parameter the change
    # added (a new knob at its default) is listed, not counted as a difference
    if len(x) != len(y): return False
    for s, t in zip(x, y):
        if s["strategy"] != t["strategy"]: return False
        if any(t["params"].get(k, object()) != v for k, v in s["params"].items()): return False
        added.update(k for k in t["params"] if k not in s["params"])
    return True
def numbers(v):
    keep = {k: v.get(k) for k in ("bits_per_weight", "eval", "lambada")}
    keep["linears"] = [(l["name"], l["skipped"], l["weight_bits"], l["act"], l["sparsity"]) for l in v.get("linears", [])]
    return json.dumps(keep, sort_keys=True)
added = set()
va, vb = a["variants"], b["variants"]
diff = [x["name"] for x, y in zip(va, vb)
        if x["name"] != y["name"] or numbers(x) != numbers(y) or not stages_same(x["stages"], y["stages"])]
if len(va) != len(vb) or diff:
    print("   NOT bit-identical:", len(va), "vs", len(vb), "variants; differing:", ", ".join(diff))
    sys.exit(1)
print("   %d variants bit-identical (sums, bits per weight, LAMBADA, per-linear outcomes)%s"
      % (len(va), "; parameters added at their defaults: " + ", ".join(sorted(added)) if added else ""))
EOF
done
echo "same_tables.sh: $bad config(s) differ"
exit $bad
