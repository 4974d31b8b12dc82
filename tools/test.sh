#!/usr/bin/env bash
# test.sh — set up, build, and run every test suite with ctest (2 in parallel).
# The suites need ../shared/ beside the repository (WikiText-2 for the reference comparison).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
cd build
ctest --output-on-failure -j2 "$@"
