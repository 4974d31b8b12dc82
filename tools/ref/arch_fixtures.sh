#!/usr/bin/env bash
# arch_fixtures.sh — remake tests/fixtures/arch/ (issue 33 point 6) with pinned PyPI packages.
#
#   tools/ref/arch_fixtures.sh [NAME ...]          make the named fixtures (default: all)
#   tools/ref/arch_fixtures.sh --check [NAME ...]  run tools/ref/arch_ref_check.py instead
#
# Steps (each skipped when already done, so rerunning is cheap):
#   1. build/arch-venv: python3 -m venv + pip install of the PINNED versions below (torch's PyPI
#      wheel pulls CUDA libraries, about 5 GB; everything runs on the CPU).
#   2. build/arch-venv4: transformers 4 for the hf4/ cross-check (arch_ref_check.py): a venv of
#      its own holding transformers 4 and its dependencies (not torch), which then sees
#      build/arch-venv's torch through a .pth file (no second torch download).
#   3. build/arch-llamacpp/src: convert_hf_to_gguf.py, conversion/ and gguf-py/ from the
#      llama-cpp-python sdist (pip download --no-binary :all: --no-deps, as ggml_quant_ref.sh;
#      or the tarball $LMP_LLAMACPP_SDIST names).  The converter is run, never committed.
#   4. build/arch-venv/bin/python tools/ref/arch_fixtures.py --converter build/arch-llamacpp/src NAME...
#
# On 2 cores: the first install takes 10-20 min (download); each fixture about 10-20 s.
set -euo pipefail

TORCH_VERSION=2.15.0
TRANSFORMERS_VERSION=5.24.0
SAFETENSORS_VERSION=0.8.0
NUMPY_VERSION=2.4.6
SENTENCEPIECE_VERSION=0.2.3
TOKENIZERS_VERSION=0.23.3
PROTOBUF_VERSION=7.36.2
TRANSFORMERS4_VERSION=4.57.6
TOKENIZERS4_VERSION=0.22.2
HUB4_VERSION=0.36.0
LLAMA_CPP_PYTHON_VERSION=${LLAMA_CPP_PYTHON_VERSION:-0.3.36}

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
venv=$root/build/arch-venv
venv4=$root/build/arch-venv4
conv=$root/build/arch-llamacpp
die() { echo "arch_fixtures.sh: $*" >&2; exit 1; }

check=0
if [ "${1:-}" = "--check" ]; then check=1; shift; fi

# 1. the transformers 5 venv
stamp=$venv/.arch-pins
pins="torch==$TORCH_VERSION transformers==$TRANSFORMERS_VERSION safetensors==$SAFETENSORS_VERSION numpy==$NUMPY_VERSION sentencepiece==$SENTENCEPIECE_VERSION tokenizers==$TOKENIZERS_VERSION protobuf==$PROTOBUF_VERSION"
if [ "$(cat "$stamp" 2>/dev/null)" != "$pins" ]; then
    command -v python3 >/dev/null || die "python3 not found"
    [ -x "$venv/bin/python" ] || python3 -m venv "$venv" || die "python3 -m venv $venv failed"
    echo "arch_fixtures.sh: installing $pins into $venv (slow the first time)"
    # shellcheck disable=SC2086
    "$venv/bin/pip" install --quiet $pins pyyaml tqdm >"$venv.log" 2>&1 ||
        die "pip install failed, see $venv.log"
    echo "$pins" >"$stamp"
fi

# 2. the transformers 4 venv (torch and numpy come from the first one)
stamp4=$venv4/.arch-pins
pins4="transformers==$TRANSFORMERS4_VERSION tokenizers==$TOKENIZERS4_VERSION huggingface-hub==$HUB4_VERSION numpy==$NUMPY_VERSION safetensors==$SAFETENSORS_VERSION"
if [ "$(cat "$stamp4" 2>/dev/null)" != "$pins4" ]; then
    [ -x "$venv4/bin/python" ] || python3 -m venv "$venv4" || die "python3 -m venv $venv4 failed"
    site5=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    site4=$("$venv4/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    rm -f "$site4/zz-arch-venv.pth"
    # shellcheck disable=SC2086
    "$venv4/bin/pip" install --quiet $pins4 >"$venv4.log" 2>&1 ||
        die "pip install of $pins4 failed, see $venv4.log"
    # only now (pip must not see transformers 5): torch from the first venv.  A .pth entry comes
    # after the venv's own site-packages, so transformers 4 shadows transformers 5.
    echo "$site5" >"$site4/zz-arch-venv.pth"
    echo "$pins4" >"$stamp4"
fi

# 3. the converter from the llama-cpp-python sdist
cstamp=$conv/src/.llama-cpp-python-version
if [ "$(cat "$cstamp" 2>/dev/null)" != "$LLAMA_CPP_PYTHON_VERSION" ]; then
    mkdir -p "$conv"
    tmp=$(mktemp -d "$conv/fetch.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    tarball=${LMP_LLAMACPP_SDIST:-}
    if [ -z "$tarball" ] && [ -f "$conv/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz" ]; then
        tarball=$conv/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz
    fi
    if [ -n "$tarball" ]; then
        [ -f "$tarball" ] || die "LMP_LLAMACPP_SDIST=$tarball is not a file"
    else
        python3 -m pip download --quiet --no-binary :all: --no-deps -d "$tmp" \
            "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" >"$tmp/pip.log" 2>&1 ||
            die "pip download of llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION failed: $(tail -n 1 "$tmp/pip.log")"
        tarball=$tmp/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz
        [ -f "$tarball" ] || die "pip succeeded but $tarball is not there (sdist renamed?)"
    fi
    prefix=llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION/vendor/llama.cpp
    mkdir "$tmp/src"
    tar -xzf "$tarball" -C "$tmp/src" --strip-components=3 \
        "$prefix/LICENSE" "$prefix/convert_hf_to_gguf.py" "$prefix/conversion" "$prefix/gguf-py" 2>"$tmp/tar.log" ||
        die "cannot extract the converter from $tarball: $(grep -m 1 . "$tmp/tar.log")"
    echo "$LLAMA_CPP_PYTHON_VERSION" >"$tmp/src/.llama-cpp-python-version"
    rm -rf "$conv/src"
    mv "$tmp/src" "$conv/src"
    rm -rf "$tmp"
    trap - EXIT
fi

# 4. the fixtures, or the check
export PYTHONHASHSEED=0 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
export HF_HUB_OFFLINE=1 TRANSFORMERS_NO_ADVISORY_WARNINGS=1
if [ $check = 1 ]; then
    exec nice -n 10 "$venv/bin/python" "$here/arch_ref_check.py" --converter "$conv/src" \
        --python4 "$venv4/bin/python" "$@"
fi
exec nice -n 10 "$venv/bin/python" "$here/arch_fixtures.py" --converter "$conv/src" \
    --llama-cpp-python "$LLAMA_CPP_PYTHON_VERSION" --python4 "$venv4/bin/python" "$@"
