#!/usr/bin/env bash
# ggml_quant_ref.sh — build tools/ref/ggml_quant_ref.c, the test fixture that runs ggml's own
# reference quantizers, against ggml's source from the llama-cpp-python sdist on PyPI.
#
#   tools/ref/ggml_quant_ref.sh [DIR]        (default DIR: build/ggml-ref/ at the repo root)
#
# The result is DIR/ggml_quant_ref (usage in ggml_quant_ref.c).  Why the sdist: it vendors a whole
# llama.cpp tree and PyPI is reachable where GitHub may not be (as tools/bench/llamacpp_build.sh).
# Only the dozen ggml files the harness needs are extracted: ggml.c (ggml_quantize_chunk, the
# type table), ggml-quants.c (the quantizers) and the headers they include; the C++ rest of
# ggml-base is replaced by ggml_quant_ref_stubs.c.  They are compiled -O2 -std=c11 with no
# -march and -ffp-contract=off: the quantize_* and dequantize_row_* paths of ggml-quants.c are
# plain C whatever the flags (its SIMD lives in ggml-cpu, which is not built), and forbidding
# fused multiply-adds keeps their results the same on every host (x86-64 has none without
# -march; aarch64 would fuse by default).
#
# Steps (each skipped when already done, so rerunning is cheap):
#   python3 -m pip download --no-binary :all: --no-deps llama-cpp-python==VERSION (to a temporary
#       folder, removed after extraction), or the tarball $LMP_LLAMACPP_SDIST names
#   tar -xzf TARBALL -C DIR/src  the needed members only
#   cc -c ggml.c ggml-quants.c; cc ggml_quant_ref.c ggml_quant_ref_stubs.c + the objects
#
# Environment: LMP_LLAMACPP_SDIST reuses a local llama_cpp_python-VERSION.tar.gz instead of
# downloading it (76 MB); LLAMA_CPP_PYTHON_VERSION overrides the pinned version.  Log: DIR/build.log.
# On 2 cores: about 10 s from a local tarball, plus the download otherwise.
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
CC=${CC:-cc}
CFLAGS_REF=(-O2 -std=c11 -ffp-contract=off -D_GNU_SOURCE)

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
dir=${1:-$root/build/ggml-ref}

die() { echo "ggml_quant_ref.sh: $*" >&2; exit 1; }

mkdir -p "$dir" || die "cannot create $dir"
dir=$(cd "$dir" && pwd)
src=$dir/src
ggml=$src/ggml
obj=$dir/obj
bin=$dir/ggml_quant_ref
log=$dir/build.log
stamp=$src/.llama-cpp-python-version

# The members of the sdist the harness needs, relative to its vendor/llama.cpp/ (LICENSE: ggml's
# MIT licence travels with its code).
members=(LICENSE
         ggml/include/ggml.h ggml/include/gguf.h ggml/include/ggml-cpu.h ggml/include/ggml-backend.h
         ggml/include/ggml-alloc.h
         ggml/src/ggml.c ggml/src/ggml-quants.c ggml/src/ggml-quants.h ggml/src/ggml-common.h
         ggml/src/ggml-impl.h ggml/src/ggml-threading.h ggml/src/ggml-version.h.in
         ggml/src/ggml-cpu/ggml-cpu-impl.h)

# 1 + 2. The sources, fetched and extracted unless this version's already are.
if [ "$(cat "$stamp" 2>/dev/null)" != "$LLAMA_CPP_PYTHON_VERSION" ]; then
    tmp=$(mktemp -d "$dir/fetch.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    tarball=${LMP_LLAMACPP_SDIST:-}
    if [ -n "$tarball" ]; then
        [ -f "$tarball" ] || die "LMP_LLAMACPP_SDIST=$tarball is not a file"
    else
        command -v python3 >/dev/null || die "python3 not found (needed to fetch llama-cpp-python from PyPI)"
        python3 -m pip download --quiet --no-binary :all: --no-deps -d "$tmp" \
            "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" >"$tmp/pip.log" 2>&1 ||
            die "pip download of llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION failed (is PyPI reachable?): $(tail -n 1 "$tmp/pip.log")"
        tarball=$tmp/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz
        [ -f "$tarball" ] || die "pip succeeded but $tarball is not there (sdist renamed?)"
    fi
    prefix=llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp
    mkdir "$tmp/src"
    tar -xzf "$tarball" -C "$tmp/src" --strip-components=3 "${members[@]/#/$prefix/}" 2>"$tmp/tar.log" ||
        die "cannot extract ggml's sources from $tarball: $(grep -m 1 . "$tmp/tar.log")"
    echo "$LLAMA_CPP_PYTHON_VERSION" >"$tmp/src/.llama-cpp-python-version"
    # swapped in whole, so an interrupted run is never taken for a done one
    rm -rf "$src" "$obj" "$bin"
    mv "$tmp/src" "$src"
    rm -rf "$tmp"
    trap - EXIT
fi

# 3. ggml's two C files, once per extraction (two compilers at a time).  ggml-version.h is what
# ggml's CMake would configure from ggml-version.h.in; only ggml_version() reads it.
if [ ! -f "$obj/ggml.o" ] || [ ! -f "$obj/ggml-quants.o" ]; then
    rm -rf "$obj" && mkdir -p "$obj"
    sed -e "s/@GGML_VERSION@/llama-cpp-python-$LLAMA_CPP_PYTHON_VERSION/" -e "s/@GGML_BUILD_COMMIT@/unknown/" \
        "$ggml/src/ggml-version.h.in" >"$obj/ggml-version.h"
    inc=(-I"$obj" -I"$ggml/include" -I"$ggml/src")
    : >"$log"
    "$CC" "${CFLAGS_REF[@]}" "${inc[@]}" -c "$ggml/src/ggml.c" -o "$obj/ggml.o.tmp" >>"$log" 2>&1 & p1=$!
    "$CC" "${CFLAGS_REF[@]}" "${inc[@]}" -c "$ggml/src/ggml-quants.c" -o "$obj/ggml-quants.o.tmp" >>"$log" 2>&1 & p2=$!
    ok=1
    wait $p1 || ok=0
    wait $p2 || ok=0
    [ $ok = 1 ] || die "compiling ggml.c / ggml-quants.c failed, see $log"
    mv "$obj/ggml.o.tmp" "$obj/ggml.o"
    mv "$obj/ggml-quants.o.tmp" "$obj/ggml-quants.o"
fi

# 4. The harness, whenever it (or its stubs, or this script) is newer than the binary.
stale=0
for f in "$here/ggml_quant_ref.c" "$here/ggml_quant_ref_stubs.c" "$here/ggml_quant_ref.sh" "$obj/ggml.o" "$obj/ggml-quants.o"; do
    [ "$bin" -nt "$f" ] || stale=1
done
if [ $stale = 1 ]; then
    "$CC" "${CFLAGS_REF[@]}" -Wall -Wextra -I"$ggml/include" -I"$ggml/src" -o "$bin.tmp" \
        "$here/ggml_quant_ref.c" "$here/ggml_quant_ref_stubs.c" "$obj/ggml.o" "$obj/ggml-quants.o" -lm >>"$log" 2>&1 ||
        die "building the harness failed, see $log"
    mv "$bin.tmp" "$bin"
fi
echo "ggml_quant_ref.sh: $bin (ggml from llama-cpp-python $LLAMA_CPP_PYTHON_VERSION)"
