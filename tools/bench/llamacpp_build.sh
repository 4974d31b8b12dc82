#!/usr/bin/env bash
# llamacpp_build.sh — build llama.cpp's llama-perplexity, llama-quantize and llama-imatrix from
# the llama-cpp-python source distribution on PyPI, as a reference for lmpress's numbers
# (llamacpp_kld.sh, llamacpp_quantize.sh). A benchmark helper: not part of the tests or CI.
#
#   tools/bench/llamacpp_build.sh [DIR]            (default DIR: build-llamacpp/ at the repo root)
#
# Why the sdist: it vendors a whole llama.cpp tree (vendor/llama.cpp) and PyPI is reachable where
# GitHub may not be. The version is pinned below so results can be reproduced; the llama.cpp
# commit it vendors is printed at the end when the sdist records it.
#
# Steps (each skipped when already done, so rerunning is cheap):
#   python3 -m pip download --no-binary :all: --no-deps -d DIR/sdist llama-cpp-python==VERSION
#   tar -xzf DIR/sdist/llama_cpp_python-VERSION.tar.gz -C DIR/src
#   cmake -S DIR/src/llama_cpp_python-VERSION/vendor/llama.cpp -B DIR/build \
#         -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE=ON \
#         -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
#         -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
#         -DLLAMA_BUILD_TOOLS=ON
#   cmake --build DIR/build --config Release -j2 --target llama-perplexity llama-quantize llama-imatrix
#
# The binaries end up in DIR/build/bin/ (DIR/build-portable/bin/ after a fallback, see step 3-4);
# DIR/bin links to the one that runs here, and the benchmarks use that. Logs: DIR/cmake-configure.log, DIR/cmake-build.log.
# Environment: LLAMA_CPP_PYTHON_VERSION overrides the pinned version, JOBS the -j (default 2).
# On 2 cores (AMD EPYC) the first run takes about 11 minutes (45 s download, 10.5 min build).
set -euo pipefail

LLAMA_CPP_PYTHON_VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}
JOBS=${JOBS:-2}
TARGETS=(llama-perplexity llama-quantize llama-imatrix)

root=$(cd "$(dirname "$0")/../.." && pwd)
dir=${1:-$root/build-llamacpp}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
sdist_dir=$dir/sdist
src_parent=$dir/src
src=$src_parent/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION
lsrc=$src/vendor/llama.cpp
bld=$dir/build
tarball=$sdist_dir/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz

die() { echo "llamacpp_build.sh: $*" >&2; exit 1; }
exec 3>&1   # the terminal, for "+ command" lines of commands whose output goes to a log
run() { echo "+ $*" >&3; "$@"; }

command -v python3 >/dev/null || die "python3 not found"
command -v cmake >/dev/null || die "cmake not found (apt-get install cmake)"

# 1. The source distribution.
if [ -f "$tarball" ]; then
    echo "sdist: $tarball (already downloaded)"
else
    mkdir -p "$sdist_dir"
    run python3 -m pip download --no-binary :all: --no-deps -d "$sdist_dir" \
        "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" ||
        die "pip download of llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION failed (is PyPI reachable?)"
    [ -f "$tarball" ] || die "pip succeeded but $tarball is not there (sdist renamed?): $(ls "$sdist_dir")"
fi

# 2. Unpack (into a temporary folder first, so an interrupted tar is not taken for a done one).
if [ -f "$lsrc/CMakeLists.txt" ]; then
    echo "source: $lsrc (already unpacked)"
else
    mkdir -p "$src_parent"
    rm -rf "$src" "$src.tmp"
    mkdir "$src.tmp"
    run tar -xzf "$tarball" -C "$src.tmp" || die "cannot unpack $tarball"
    mv "$src.tmp/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION" "$src"
    rmdir "$src.tmp"
    [ -f "$lsrc/CMakeLists.txt" ] || die "no vendor/llama.cpp/CMakeLists.txt in $tarball"
fi

# 3-4. Configure and build only the three tools (make/ninja skip what is up to date).
# native=ON builds for this processor; a hypervisor may report features (AVX-512, AMX) that the
# guest cannot execute, so step 5 runs the result and falls back to a portable build (native=OFF,
# in DIR/build-portable) when it dies on an illegal instruction.
build_tools() {  # build_tools BUILD_DIR NATIVE(ON|OFF)
    local b=$1 native=$2
    if [ -f "$b/CMakeCache.txt" ] &&
       grep -q "^CMAKE_HOME_DIRECTORY:INTERNAL=$lsrc\$" "$b/CMakeCache.txt"; then
        echo "configure: $b (already configured)"
    else
        rm -rf "$b"
        echo "configure log: $dir/cmake-configure.log"
        run cmake -S "$lsrc" -B "$b" \
            -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DGGML_NATIVE="$native" \
            -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
            -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
            -DLLAMA_BUILD_TOOLS=ON >"$dir/cmake-configure.log" 2>&1 ||
            { tail -n 30 "$dir/cmake-configure.log" >&2; rm -f "$b/CMakeCache.txt"
              die "cmake configure failed, see $dir/cmake-configure.log"; }
    fi
    echo "build log: $dir/cmake-build.log"
    local start; start=$(date +%s)
    run cmake --build "$b" --config Release -j"$JOBS" --target "${TARGETS[@]}" \
        >"$dir/cmake-build.log" 2>&1 ||
        { tail -n 40 "$dir/cmake-build.log" >&2; die "cmake build failed, see $dir/cmake-build.log"; }
    echo "build: $(( $(date +%s) - start )) s (GGML_NATIVE=$native)"
}

# runs_here BUILD_DIR: llama-quantize makes a Q4_0 file of the tiny Llama-3 fixture and
# llama-perplexity runs on it (a second's work): that exercises the CPU kernels a benchmark uses,
# the repacked Q4_0 ones included, which on an Intel Xeon VM that reports AMX die at once in a
# native build (seen 2026-11-29).  Exit status 132 (SIGILL): instructions this CPU cannot run.
runs_here() {
    local rc=0 q4="$dir/smoke-q4_0.gguf"
    "$1/bin/llama-quantize" "$root/tests/fixtures/arch/llama3/model.gguf" "$q4" Q4_0 1 \
        >"$dir/smoke.log" 2>&1 || rc=$?
    [ "$rc" = 0 ] && { "$1/bin/llama-perplexity" -m "$q4" \
        -f "$root/models/stories260K/tinystories-synth-eval.txt" -c 32 --chunks 2 -t 1 \
        >>"$dir/smoke.log" 2>&1 || rc=$?; }
    rm -f "$q4"
    [ "$rc" -lt 128 ]
}

build_tools "$bld" ON
if ! runs_here "$bld"; then
    echo "llamacpp_build.sh: the native build dies on a signal on this processor (SIGILL: an instruction it cannot run; $dir/smoke.log);"
    echo "  building a portable one (GGML_NATIVE=OFF) in $dir/build-portable: slower kernels, same results"
    bld=$dir/build-portable
    build_tools "$bld" OFF
    runs_here "$bld" || die "the portable build fails too, see $dir/smoke.log"
fi

for t in "${TARGETS[@]}"; do
    [ -x "$bld/bin/$t" ] || die "build finished but $bld/bin/$t is missing"
done
commit=$(grep -rhoE 'LLAMA_COMMIT[^"]*"[0-9a-f]{7,40}' "$bld/common/build-info.cpp" 2>/dev/null |
         grep -oE '[0-9a-f]{7,40}$' | head -n 1 || true)
ln -sfn "$bld/bin" "$dir/bin"   # the one path the benchmarks use, whichever build runs here
echo "llama-cpp-python $LLAMA_CPP_PYTHON_VERSION${commit:+ (llama.cpp $commit)}; binaries (also $dir/bin/):"
for t in "${TARGETS[@]}"; do echo "  $bld/bin/$t"; done
