#!/bin/sh
# llama7b_shaped.sh — the 7B-shaped memory benchmark (issue: memory bounded by one block).
#
#   tools/bench/llama7b_shaped.sh [BUILD_DIR]      # default build/
#
# Writes the checkpoint if it is missing (python3 with numpy; 13.5 GB in build-bench/), then runs
# `lmpress compare configs/llama7b-shaped.cfg` under /usr/bin/time and keeps its report, log and
# the machine's description in build-bench/llama7b-shaped-run/.  About an hour on 2 cores.
# Then the export: RTN W4 g128 written as a compressed-tensors folder (4.5 GB) by `lmpress run
# --output`, and that folder read back by `lmpress eval` on the same 2 windows, whose ppl must be
# the variant's (about 20 min more).
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

# The export, and the exported folder evaluated on the same windows.
/usr/bin/time -v "$build/lmpress" run "$root/configs/llama7b-shaped.cfg" --variant rtn-w4-g128 \
    --output "$out/rtn-w4-g128-hf" --json "$out/export-report.json" 2> "$out/export-log.txt"
/usr/bin/time -v "$build/lmpress" eval "$out/rtn-w4-g128-hf" --text "$root/data/wikitext-2/wiki.test.raw" \
    --seq-len 512 --max-windows 2 --json > "$out/export-eval.json" 2> "$out/export-eval-log.txt"
grep -E "kept for the export|written to|Maximum resident" "$out/export-log.txt"
grep "Maximum resident" "$out/export-eval-log.txt"
cat "$out/export-eval.json"
