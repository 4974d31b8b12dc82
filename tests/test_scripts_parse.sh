#!/usr/bin/env bash
# test_scripts_parse — every Python and shell script of the project parses (tests/CMakeLists.txt):
#
#   tests/test_scripts_parse.sh SOURCE_DIR
#
# The reference scripts (tools/ref), the benchmarks (tools/bench) and the setup are run by hand
# or by CI steps that skip without their packages, so a script a merge left broken (an elif with
# no body) would otherwise go unseen until someone remakes a fixture.  Python files are parsed
# with ast (nothing runs, nothing is imported, no bytecode is written); shell files with bash -n.
# First a broken file of each kind must be reported, so that a check that stopped seeing errors
# fails here too.  Needs python3 (skips without it).
set -uo pipefail
src=${1:?usage: test_scripts_parse.sh SOURCE_DIR}
fail() { echo "FAIL: $*"; exit 1; }
py=$(command -v python3) || { echo "SKIP: no python3"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/lmp-scripts-parse.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
parse_py() { "$py" -c 'import ast, sys
for p in sys.argv[1:]:
    try:
        ast.parse(open(p, encoding="utf-8").read(), p)
    except SyntaxError as e:
        print(f"{p}:{e.lineno}: {e.msg}"); sys.exit(1)' "$@"; }

# The controls
printf 'if True:\n    x = 1\nelif False:\nelse:\n    pass\n' > "$tmp/bad.py"
parse_py "$tmp/bad.py" >/dev/null && fail "a Python file with an empty elif was not reported"
printf 'if true; then\n' > "$tmp/bad.sh"
bash -n "$tmp/bad.sh" 2>/dev/null && fail "a shell file with an unclosed if was not reported"

# The project's scripts
n=0
while IFS= read -r -d '' f; do
    parse_py "$f" || fail "$f does not parse"
    n=$((n + 1))
done < <(find "$src/tools" "$src/tests" "$src/.ci" -name '*.py' -type f -print0 2>/dev/null)
while IFS= read -r -d '' f; do
    bash -n "$f" 2>"$tmp/err" || fail "$f does not parse: $(head -n 1 "$tmp/err")"
    n=$((n + 1))
done < <(find "$src/tools" "$src/tests" "$src/.ci" \( -name '*.sh' -o -name run \) -type f -print0 2>/dev/null)
[ "$n" -gt 20 ] || fail "only $n scripts found under $src: wrong source folder?"
echo "PASS: $n scripts parse"
