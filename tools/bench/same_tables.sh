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
# SAME_CONFIGS="quickstart w8a8-compare" runs only those configs (the learning ones,
# autoround-compare and finetune-compare, take most of the time).
#
# SAME_REDUCE="--calib 16 --eval 4 --lambada 0" runs each side's config through
# tools/bench/reduce_config.py with those arguments first (fewer windows, the same pipelines and
# parameters): the learning configs then take minutes, not hours, and still compare bit for bit.
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
    grep -q 'path = "../models/stories260K/' "$cfg" || continue # the model, not only its texts
    name=$(basename "$cfg" .cfg)
    if [ -n "${SAME_CONFIGS:-}" ] && ! [[ " $SAME_CONFIGS " == *" $name "* ]]; then continue; fi
    old_cfg="$old_src/$cfg" new_cfg="$cfg" tag=""
    if [ -n "${SAME_REDUCE:-}" ]; then
        # beside each side's own config, so its relative paths still hold
        tag=".reduced"
        old_cfg="$old_src/configs/.same-$name.cfg" new_cfg="configs/.same-$name.cfg"
        # shellcheck disable=SC2086
        { build_old && "$py" tools/bench/reduce_config.py "$old_src/$cfg" "$old_cfg" $SAME_REDUCE &&
            "$py" tools/bench/reduce_config.py "$cfg" "$new_cfg" $SAME_REDUCE; } ||
            { echo "   FAILED to reduce $cfg"; bad=$((bad + 1)); continue; }
    fi
    a="$out/$name$tag.$sha.json" b="$out/$name$tag.new.json"
    if [ "${SAME_REUSE:-1}" != 0 ] && [ -s "$a" ]; then
        echo "== $name ($sha: table kept from an earlier run)"
    else
        # each side runs the config of its own tree, so a config the change edited (a default
        # made explicit) runs as each side shipped it
        build_old || exit 1
        echo "== $name ($sha)"
        nice -n 19 "$old" --quiet compare "$old_cfg" --json "$a" >/dev/null ||
            { echo "   FAILED to run"; bad=$((bad + 1)); continue; }
    fi
    echo "== $name (this build: $new)"
    nice -n 19 "$new" --quiet compare "$new_cfg" --json "$b" >/dev/null ||
        { echo "   FAILED to run"; bad=$((bad + 1)); continue; }
    [ -z "$tag" ] || rm -f "$new_cfg"
    "$new" diff "$a" "$b" --class exact >"$out/$name$tag.diff.txt" ||
        { echo "   beyond the exact floors: $out/$name$tag.diff.txt"; bad=$((bad + 1)); continue; }
    "$py" - "$a" "$b" <<'EOF' || bad=$((bad + 1))
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
notes = set()
def stages_same(name, x, y):
    # the same strategies in the same order; a parameter whose recorded value changed (a default
    # the change unified, a knob it added) is listed as a note, since the numbers decide
    if [s["strategy"] for s in x] != [t["strategy"] for t in y]: return False
    for s, t in zip(x, y):
        for k in sorted(set(s["params"]) | set(t["params"])):
            if s["params"].get(k, "(absent)") != t["params"].get(k, "(absent)"):
                notes.add("%s.%s: %s -> %s" % (s["strategy"], k, s["params"].get(k, "(absent)"),
                                               t["params"].get(k, "(absent)")))
    return True
def numbers(v):
    keep = {k: v.get(k) for k in ("bits_per_weight", "eval", "lambada")}
    keep["linears"] = [(l["name"], l["skipped"], l["weight_bits"], l["act"], l["sparsity"]) for l in v.get("linears", [])]
    return json.dumps(keep, sort_keys=True)
va, vb = a["variants"], b["variants"]
diff = [x["name"] for x, y in zip(va, vb)
        if x["name"] != y["name"] or numbers(x) != numbers(y) or not stages_same(x["name"], x["stages"], y["stages"])]
if len(va) != len(vb) or diff:
    print("   NOT bit-identical:", len(va), "vs", len(vb), "variants; differing:", ", ".join(diff))
    sys.exit(1)
print("   %d variants bit-identical (sums, bits per weight, LAMBADA, per-linear outcomes)" % len(va))
for n in sorted(notes): print("   note: recorded parameter changed, numbers not:", n)
EOF
done
echo "same_tables.sh: $bad config(s) differ"
exit $bad
