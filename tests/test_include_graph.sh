#!/usr/bin/env bash
# test_include_graph — no #include cycle among core/'s folders (tests/CMakeLists.txt):
#
#   tests/test_include_graph.sh SOURCE_DIR
#
# Runs tools/dev/include_graph.py on SOURCE_DIR: it fails, naming the folders of the cycle and an
# include that makes each edge, when a file in one of core/'s folders includes a header of a
# folder above it (docs/architecture.md, "Layering").  First the script is shown a made-up tree
# with a two-folder cycle, so that a script that stopped seeing cycles fails here too.  About
# a second or two (python3 starting).
set -uo pipefail
src=${1:?usage: test_include_graph.sh SOURCE_DIR}
fail() { echo "FAIL: $*"; exit 1; }
py=$(command -v python3) || { echo "SKIP: no python3"; exit 77; }
script=$src/tools/dev/include_graph.py
tmp=$(mktemp -d "${TMPDIR:-/tmp}/lmp-include-graph.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# The control: core/low/a.h includes "high/b.h", core/high/b.c includes "low/a.h" (and a header
# next to it, which is not an edge).
mkdir -p "$tmp/core/low" "$tmp/core/high"
printf '#include "high/b.h"\n' > "$tmp/core/low/a.h"
printf '#include "b.h"\n#include "low/a.h"\n#include "lmpress/plugin.h"\n' > "$tmp/core/high/b.c"
: > "$tmp/core/high/b.h"
out=$("$py" "$script" "$tmp" 2>&1); rc=$?
[ "$rc" = 1 ] || fail "a two-folder cycle was not reported (exit $rc): $out"
grep -q 'cycle among core/ folders: high low' <<<"$out" || fail "the cycle's folders are not named: $out"
grep -q 'low -> high: core/low/a.h includes "high/b.h"' <<<"$out" || fail "the include is not named: $out"
# Without the upward include the made-up tree is acyclic.
: > "$tmp/core/low/a.h"
out=$("$py" "$script" "$tmp" 2>&1) || fail "an acyclic tree was reported: $out"

# The real tree.
out=$("$py" "$script" --order "$src" 2>&1); rc=$?
echo "$out"
[ "$rc" = 0 ] || fail "core/'s folders include each other in a cycle (docs/architecture.md, Layering)"
echo "PASS"
