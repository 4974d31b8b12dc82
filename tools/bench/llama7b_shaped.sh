#!/bin/sh
# llama7b_shaped.sh — the 7B-shaped memory benchmark (issue: memory bounded by one block).
#
#   tools/bench/llama7b_shaped.sh [BUILD_DIR]      # default build/
#
# Writes the checkpoint if it is missing (python3 with numpy; 13.5 GB in build-bench/), then runs
# `lmpress compare configs/llama7b-shaped.cfg` under /usr/bin/time and keeps its report, log and
# the machine's description in build-bench/llama7b-shaped-run/.  About an hour on 2 cores.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
out=$root/build-bench/llama7b-shaped-run
model=$root/build-bench/llama7b-shaped
py=${LMP_PYTHON:-python3}
mkdir -p "$out"
if [ ! -f "$model/config.json" ]; then
    /usr/bin/time -f "checkpoint written in %e s, peak %M KB" "$py" "$root/tools/bench/make_llama7b_shaped.py" "$model"
fi
{ uname -a; nproc; free -g; lscpu | grep -i "model name"; git -C "$root" rev-parse HEAD; } > "$out/machine.txt" 2>&1
/usr/bin/time -v "$build/lmpress" compare "$root/configs/llama7b-shaped.cfg" --verbose \
    --json "$out/report.json" --md "$out/report.md" 2> "$out/log.txt"
tail -n 30 "$out/log.txt"
cat "$out/report.md"
