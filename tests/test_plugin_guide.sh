#!/usr/bin/env bash
# test_plugin_guide — every C block of docs/plugin-guide.md is compiled, so the guide cannot name a
# function that does not exist (tests/CMakeLists.txt):
#
#   tests/test_plugin_guide.sh SOURCE_DIR BUILD_DIR
#
# The guide fences its C blocks with one of (any other ```c block fails this test):
#   c plugin-guide-snippet NAME   the blocks of one NAME, joined in order, are one source file,
#                                 built into a shared object against include/ and plugins/common/
#                                 with -Werror=implicit-function-declaration and -Wl,-z,defs (an
#                                 undefined function or symbol fails the build); one that exports
#                                 lmp_plugin_entry is then loaded by `lmpress plugins`, which must
#                                 list it with no "[not loaded]" line;
#   c plugin-guide-excerpt NAME   every line of the block, its trailing /* */ comment and
#                                 indentation dropped, appears in that order among the lines of
#                                 snippet NAME, or of the repository's file NAME (a path);
#   c plugin-guide-suite          a check suite: compiled (-fsyntax-only) against core/, tests/
#                                 and check's headers.
set -uo pipefail
src=${1:?usage: test_plugin_guide.sh SOURCE_DIR BUILD_DIR}
build=${2:?usage: test_plugin_guide.sh SOURCE_DIR BUILD_DIR}
src=$(cd "$src" && pwd)
build=$(cd "$build" && pwd)
guide=${LMP_PLUGIN_GUIDE:-$src/docs/plugin-guide.md}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/lmp-guide.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
python=${LMP_PYTHON:-/usr/bin/python3}
[ -x "$python" ] || python=python3
cc=${CC:-cc}
unset LMP_PLUGIN_PATH

# Split the guide into $tmp/snippets/NAME.c, $tmp/excerpts/K.NAME (the name with / as %), $tmp/suite/K.c.
"$python" - "$guide" "$tmp" <<'PY' || fail "cannot split $guide"
import os, re, sys
guide, out = sys.argv[1], sys.argv[2]
for d in ("snippets", "excerpts", "suite"):
    os.makedirs(os.path.join(out, d))
text = open(guide, encoding="utf-8").read().split("\n")
i, k, bad = 0, 0, []
snippets = {}
while i < len(text):
    m = re.match(r"^```c(\s.*)?$", text[i])
    if not m:
        i += 1
        continue
    tag, start = (m.group(1) or "").split(), i + 1
    i += 1
    body = []
    while i < len(text) and text[i] != "```":
        body.append(text[i])
        i += 1
    if i >= len(text):
        sys.exit("%s:%d: an unclosed ```c block" % (guide, start))
    i += 1
    k += 1
    kind = tag[0] if tag else ""
    if kind == "plugin-guide-snippet" and len(tag) == 2:
        snippets.setdefault(tag[1], []).append('#line %d "%s"' % (start + 1, guide))
        snippets[tag[1]] += body
    elif kind == "plugin-guide-excerpt" and len(tag) == 2:
        open(os.path.join(out, "excerpts", "%02d.%s" % (k, tag[1].replace("/", "%"))), "w").write("\n".join(body) + "\n")
    elif kind == "plugin-guide-suite" and len(tag) == 1:
        open(os.path.join(out, "suite", "%02d.c" % k), "w").write('#line %d "%s"\n' % (start + 1, guide) + "\n".join(body) + "\n")
    else:
        bad.append("%s:%d: ```c %s: not one of plugin-guide-snippet NAME, plugin-guide-excerpt NAME, plugin-guide-suite" % (guide, start, " ".join(tag)))
for name, lines in snippets.items():
    open(os.path.join(out, "snippets", name + ".c"), "w").write("\n".join(lines) + "\n")
if bad:
    sys.exit("\n".join(bad))
print("%d C blocks: %d snippets (%s)" % (k, len(snippets), ", ".join(sorted(snippets))))
PY

ls "$tmp"/snippets/*.c >/dev/null 2>&1 || fail "the guide has no plugin-guide-snippet block"
mkdir -p "$tmp/plugins" "$tmp/objs"
entries=()
for f in "$tmp"/snippets/*.c; do
  name=$(basename "$f" .c)
  out=$tmp/objs/guide-$name.so
  if grep -q "lmp_plugin_entry" "$f"; then out=$tmp/plugins/lmp-strategy-guide_$name.so; entries+=("$name"); fi
  "$cc" -std=c11 -Wall -Werror=implicit-function-declaration -Werror=int-conversion -I"$src/include" -I"$src/plugins/common" \
    -shared -fPIC -fvisibility=hidden -Wl,-z,defs "$f" -o "$out" -lm > "$tmp/cc-$name.log" 2>&1 \
    || { cat "$tmp/cc-$name.log"; fail "snippet $name does not build"; }
done
((${#entries[@]})) || fail "no snippet exports lmp_plugin_entry: nothing is loaded"

# Load the plugins among them with the built lmpress.
"$build/lmpress" plugins --plugin-path "$tmp/plugins" > "$tmp/plugins.out" 2>&1
rc=$?
for name in "${entries[@]}"; do
  grep -q "^strategy [^ ]* .*$tmp/plugins/lmp-strategy-guide_$name.so" "$tmp/plugins.out" \
    || { grep -A2 "not loaded" "$tmp/plugins.out"; fail "snippet $name was not loaded by lmpress plugins"; }
done
if grep -q "\[not loaded\]" "$tmp/plugins.out"; then grep "not loaded" "$tmp/plugins.out"; fail "a plugin failed to load"; fi
[ "$rc" = 0 ] || fail "lmpress plugins exited $rc"

# Excerpts: their lines, in order, in the snippet or the file they quote.
for e in "$tmp"/excerpts/*; do
  [ -e "$e" ] || continue
  target=$(basename "$e"); target=${target#*.}; target=${target//%//}
  if [ -f "$tmp/snippets/$target.c" ]; then file=$tmp/snippets/$target.c
  elif [ -f "$src/$target" ]; then file=$src/$target
  else fail "an excerpt quotes $target: no such snippet or file"; fi
  "$python" - "$e" "$file" "$target" <<'PY' || fail "an excerpt of $target is not in it"
import re, sys
def norm(line):
    line = re.sub(r"/\*.*?\*/\s*$", "", line).strip()
    return re.sub(r"\s+", " ", line)
exc = [norm(l) for l in open(sys.argv[1]) if norm(l)]
src = [norm(l) for l in open(sys.argv[2])]
pos = 0
for line in exc:
    try:
        pos = src.index(line, pos) + 1
    except ValueError:
        sys.exit("the line %r is not in %s (after line %d)" % (line, sys.argv[3], pos))
PY
done

# The test-suite example: compiled against the suites' headers.
check_cflags=$(pkg-config --cflags check 2>/dev/null)
for f in "$tmp"/suite/*.c; do
  [ -e "$f" ] || continue
  # shellcheck disable=SC2086
  "$cc" -std=c11 -D_GNU_SOURCE -Werror=implicit-function-declaration -fsyntax-only -I"$src/include" -I"$src/core" \
    -I"$src/tests" $check_cflags -DLMP_SOURCE_DIR="\"$src\"" -DLMP_DATA_DIR="\"$src/data\"" \
    -DLMP_BINARY_DIR="\"$build\"" -DLMP_TEST_PLUGIN_DIR="\"$build/test-plugins\"" -DLMP_CLI="\"$build/lmpress\"" \
    "$f" > "$tmp/suite.log" 2>&1 || { cat "$tmp/suite.log"; fail "the guide's test suite example does not compile"; }
done
echo "test_plugin_guide: every C block of the guide built; loaded: ${entries[*]}"
