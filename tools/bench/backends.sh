#!/usr/bin/env bash
# backends.sh — the backend benchmarks of docs/backends.md, in one command:
#
#   tools/bench/backends.sh [BUILD_DIR] [OUT_DIR]        (defaults: build, bench-out)
#
#   1. bench_backends: square GEMM GFLOP/s of every usable backend against the CPU's peak;
#   2. the compare table of configs/quickstart.cfg on each usable backend (`lmpress compare
#      --backend NAME`), wall time and the largest difference to the CPU's table;
#   3. GPTQ on SmolLM2-135M on each usable backend, when the model is in models/cache
#      (tools/fetch_smollm2.sh): a reduced configs/smollm2-w4a16.cfg (BENCH_SMOLLM2_WINDOWS
#      calibration and evaluation windows, default 8 and 8), timed;
#   4. per block (bench_backends --block): GPTQ's statistics and the block's outputs over 4
#      windows of 256 tokens on stories260K (all 5 blocks) and SmolLM2-135M (its first 2 blocks,
#      when present), op by op and on the device block path: ms and MB moved host<->device per
#      block (BENCH_BLOCK=0 skips it).
#
# BENCH_BACKENDS (default "cpu opencl cuda") picks the backends, BENCH_SIZES the GEMM sizes
# (default 256,512,1024,2048), BENCH_SECONDS the time per GEMM size (default 0.5).  Backends whose
# probe says no are reported and skipped.  Everything runs under `nice -n 19`.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
out=${2:-bench-out}
mkdir -p "$out"
backends=${BENCH_BACKENDS:-cpu opencl cuda}
lmpress="$build/lmpress"
[ -x "$lmpress" ] && [ -x "$build/tools/bench/bench_backends" ] || {
  echo "backends.sh: build first: cmake -S . -B $build && cmake --build $build" >&2
  exit 1
}

echo "== machine"
{ date -u; lscpu | grep -E 'Model name|^CPU\(s\)|Thread|MHz' || true; clinfo -l 2>/dev/null || true
  nvidia-smi -L 2>/dev/null || true; } | tee "$out/machine.txt"

usable=()
for b in $backends; do
  if "$lmpress" plugins 2>/dev/null | awk -v b="backend $b " 'index($0, b) == 1 {f = 1; next} f && /usable here/ {print; exit}' | grep -q '^  usable here'; then
    usable+=("$b")
  else
    echo "backend $b: not usable here (lmpress plugins says why)"
  fi
done

echo "== GEMM"
sizes=${BENCH_SIZES:-256,512,1024,2048}
nice -n 19 "$build/tools/bench/bench_backends" --backends "$(IFS=,; echo "${usable[*]}")" \
  --sizes "$sizes" --seconds "${BENCH_SECONDS:-0.5}" --md | tee "$out/gemm.md"

# compare CONFIG TAG: the table on every usable backend, timed, and the worst difference to cpu.
compare() {
  local cfg=$1 tag=$2
  for b in "${usable[@]}"; do
    echo "== $tag on $b"
    local t0 t1
    t0=$(date +%s.%N)
    nice -n 19 "$lmpress" -q compare "$cfg" --backend "$b" --json "$out/$tag-$b.json" --md "$out/$tag-$b.md" >/dev/null
    t1=$(date +%s.%N)
    printf '%s %s wall %.1f s\n' "$tag" "$b" "$(echo "$t1 - $t0" | bc)" | tee -a "$out/times.txt"
    cat "$out/$tag-$b.md"
  done
  for b in "${usable[@]}"; do
    [ "$b" = cpu ] && continue
    "$lmpress" diff "$out/$tag-cpu.json" "$out/$tag-$b.json" || true   # the floors; switch_backends.sh adds noise
  done | tee "$out/$tag-diff.txt"
}

compare configs/quickstart.cfg quickstart

smol=models/cache/SmolLM2-135M-Instruct.Q4_1.gguf
if [ -f "$smol" ] && [ -f configs/smollm2-w4a16.cfg ]; then
  w=${BENCH_SMOLLM2_WINDOWS:-8}
  cfg=$out/smollm2-gptq.cfg
  python3 tools/bench/reduce_config.py configs/smollm2-w4a16.cfg "$cfg" --calib "$w" --eval "$w" --lambada 0 \
    --variants q4_1-dequant,gptq-w4-g128
  compare "$cfg" smollm2-gptq
else
  echo "== SmolLM2 GPTQ: skipped (needs $smol from tools/fetch_smollm2.sh and configs/smollm2-w4a16.cfg)"
fi
if [ "${BENCH_BLOCK:-1}" != 0 ]; then
  echo "== per block: op by op and on the device"
  blk_models=(models/stories260K/stories260K.bin:5)
  [ -f "$smol" ] && blk_models+=("$smol:2")
  for mb in "${blk_models[@]}"; do
    nice -n 19 "$build/tools/bench/bench_backends" --backends "$(IFS=,; echo "${usable[*]}")" --sizes 64 --seconds 0.05 \
      --md --block "${mb%:*}" --blocks "${mb##*:}" --tokens 256 --windows 4 | sed -n '/^# per block/,$p'
  done | tee "$out/blocks.md"
fi
echo "backends.sh: results in $out/"
