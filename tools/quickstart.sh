#!/usr/bin/env bash
# quickstart.sh — set up, build, and compare fp32 with five RTN variants of the bundled
# stories260K (configs/quickstart.cfg).  Extra arguments go to `lmpress compare`.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
exec build/lmpress compare configs/quickstart.cfg "$@"
