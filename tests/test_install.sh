#!/usr/bin/env bash
# test_install — `cmake --install` makes an lmpress that a plugin builds against (tests/CMakeLists.txt):
#
#   tests/test_install.sh SOURCE_DIR BUILD_DIR
#
# Installs BUILD_DIR into a temporary prefix, checks the layout (bin/lmpress, the headers, the
# plugins in lib/lmpress/plugins, lib/pkgconfig/lmpress.pc), builds a strategy outside the tree
# with nothing but `pkg-config --cflags lmpress` (plugin.h and the installed wgrid.h, calling
# wgrid_quantize_linear so the helper header is exercised), and has the installed lmpress find its
# own plugins in the install (not in BUILD_DIR) and load the new one with `plugins --plugin-path`.
# The prefix is then moved: the install is relocatable (the .pc file and the binary find their
# files relative to themselves).  Takes a few seconds.
set -uo pipefail
src=${1:?usage: test_install.sh SOURCE_DIR BUILD_DIR}
build=${2:?usage: test_install.sh SOURCE_DIR BUILD_DIR}
build=$(cd "$build" && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/lmp-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
command -v pkg-config >/dev/null || { echo "SKIP: no pkg-config"; exit 77; }
cc=${CC:-cc}
command -v "$cc" >/dev/null || { echo "SKIP: no C compiler ($cc)"; exit 77; }
unset LMP_PLUGIN_PATH

prefix=$tmp/prefix
cmake --install "$build" --prefix "$prefix" > "$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; fail "cmake --install"; }
for f in bin/lmpress include/lmpress/plugin.h include/lmpress/plugin_kquants.h include/lmpress/common/wgrid.h \
         lib/lmpress/plugins/lmp-strategy-rtn.so lib/lmpress/plugins/lmp-backend-cpu.so lib/pkgconfig/lmpress.pc; do
  [ -e "$prefix/$f" ] || fail "the install has no $f (layout: $(cd "$prefix" && find . -type f | sort | tr '\n' ' '))"
done
# The loader's test plugins (fake-*, ctor-*) are not part of an install.
if ls "$prefix"/lib/lmpress/plugins | grep -qv '^lmp-'; then fail "non-plugin files installed: $(ls "$prefix"/lib/lmpress/plugins)"; fi

# A plugin written outside the tree, built against the install alone.
mkdir -p "$tmp/mine/plugins"
cat > "$tmp/mine/outoftree.c" <<'CSRC'
#include "lmpress/plugin.h"
#include "wgrid.h"

enum { P_GRID = 0, P_COUNT = WGRID_COUNT };
static const lmp_param_spec params[P_COUNT] = {WGRID_PARAMS(4, 8, "weight bits, 2..8")};

static uint32_t needs(void *self, const lmp_value *p) { (void)self; return wgrid_needs(p); }

static int apply(void *self, const lmp_host *host, void *hctx, lmp_block *blk)
{
    void *bs = NULL;
    const lmp_backend_i *be = host->backend(hctx, &bs);
    for (int i = 0; i < blk->n_linears; i++) {
        lmp_linear *l = &blk->linears[i];
        lmp_wspec spec;
        if (!l->params || !wgrid_spec_for(l->params, l->in, &spec)) continue;
        int st = wgrid_quantize_linear(host, hctx, be, bs, &spec, NULL, blk, i);
        if (st) return st;
        l->weight_bits = wgrid_weight_bits(&spec, l->out, l->in);
    }
    return LMP_OK;
}

static const lmp_strategy_i vtable = {.struct_size = sizeof(lmp_strategy_i), .needs = needs, .apply = apply};
static const lmp_plugin_desc desc = {
    .struct_size = sizeof(lmp_plugin_desc), .abi_major = LMP_ABI_MAJOR, .abi_minor = LMP_ABI_MINOR,
    .kind = LMP_PLUGIN_STRATEGY, .name = "outoftree", .version = "0.0.1",
    .summary = "built against an installed lmpress", .params = params, .n_params = P_COUNT, .vtable = &vtable};

LMP_EXPORT const lmp_plugin_desc *lmp_plugin_entry(void) { return &desc; }
CSRC
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
cflags=$(pkg-config --cflags lmpress) || fail "pkg-config --cflags lmpress"
libs=$(pkg-config --libs lmpress) || fail "pkg-config --libs lmpress"
case "$cflags" in *"$src"*|*"$build"*) fail "the .pc file points into the source or build tree: $cflags";; esac
# shellcheck disable=SC2086
"$cc" -std=c11 -Wall -Werror=implicit-function-declaration $cflags -shared -fPIC -fvisibility=hidden \
  "$tmp/mine/outoftree.c" -o "$tmp/mine/plugins/lmp-strategy-outoftree.so" $libs > "$tmp/cc.log" 2>&1 \
  || { cat "$tmp/cc.log"; fail "the out-of-tree plugin does not build against the installed header"; }

check_listing() { # $1: the prefix the installed lmpress lies in now
  local out=$tmp/plugins.out
  (cd "$tmp" && "$1/bin/lmpress" plugins --plugin-path "$tmp/mine/plugins") > "$out" 2>&1 \
    || { cat "$out"; fail "the installed lmpress plugins failed"; }
  local path_line; path_line=$(grep '^search path:' "$out")
  case "$path_line" in *"$1/lib/lmpress/plugins"*) ;; *) fail "the install's plugin folder is not searched: $path_line";; esac
  case "$path_line" in *"$build"*) fail "the installed lmpress searches the build tree: $path_line";; esac
  grep -q "^strategy outoftree 0.0.1 .*$tmp/mine/plugins/lmp-strategy-outoftree.so" "$out" || { cat "$out"; fail "outoftree not loaded"; }
  grep -q "^strategy rtn .*$1/lib/lmpress/plugins/lmp-strategy-rtn.so" "$out" || { cat "$out"; fail "rtn not loaded from the install"; }
  grep -q "^backend cpu .*$1/lib/lmpress/plugins/lmp-backend-cpu.so" "$out" || { cat "$out"; fail "cpu backend not loaded from the install"; }
  if grep -q '\[not loaded\]' "$out"; then cat "$out"; fail "a plugin failed to load"; fi
}
check_listing "$prefix"

# Relocatable: the same files under another prefix still find each other.
mv "$prefix" "$tmp/moved"
check_listing "$tmp/moved"
export PKG_CONFIG_PATH=$tmp/moved/lib/pkgconfig
pkg-config --cflags lmpress | grep -q "$tmp/moved" || fail "the moved .pc file does not follow: $(pkg-config --cflags lmpress)"
echo "test_install: installed, built an out-of-tree plugin with pkg-config, loaded it with the installed lmpress"
