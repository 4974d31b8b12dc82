#!/usr/bin/env bash
# solver_spread.sh — how far do GPTQ's and SparseGPT's results move when only the rounding of
# their Hessians changes?  The measurement behind the "solver" tolerance of `lmpress diff`
# (docs/backends.md, "Tolerances").
#
#   tools/bench/solver_spread.sh [BUILD_DIR] [OUT_DIR]        (defaults: build, spread-out)
#
# For each config, its GPTQ / SparseGPT variants run on the cpu backend once as they are and
# once per seed with calibration.hessian_jitter = SPREAD_JITTER (default 1e-6: every entry of H
# times 1 + 1e-6 r, r uniform in [-1, 1), the size of the difference between two f32 summation
# orders; CLBlast's against OpenBLAS's measures about 4e-7 rms, docs/backends.md), and each
# jittered table is compared with the plain one by `lmpress diff`.  The "worst solver" line of
# each comparison is the spread.  SPREAD_CONFIGS (default: w4a16-compare, sparse-compare and,
# when the model is there, smollm2-w4a16 and smollm2-sparse), SPREAD_SEEDS (default "1 2 3").
# The SmolLM2 configs are reduced as tools/bench/switch_backends.sh reduces them (SWITCH_CALIB,
# SWITCH_EVAL, SWITCH_LAMBADA), so the spread is measured on the same runs the switch compares.
set -uo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
out=${2:-spread-out}
lmpress="$build/lmpress"
[ -x "$lmpress" ] || { echo "solver_spread.sh: build first ($lmpress missing)" >&2; exit 1; }
mkdir -p "$out"
configs=${SPREAD_CONFIGS:-configs/w4a16-compare.cfg configs/sparse-compare.cfg configs/smollm2-w4a16.cfg configs/smollm2-sparse.cfg}
for cfg in $configs; do
  tag=$(basename "$cfg" .cfg)
  reduce=()
  case $tag in smollm2-*)
    [ -e models/cache/SmolLM2-135M-Instruct.Q4_1.gguf ] || { echo "== $tag: skipped, no SmolLM2 (tools/fetch_smollm2.sh)"; continue; }
    reduce=(--calib "${SWITCH_CALIB:-4}" --eval "${SWITCH_EVAL:-2}" --lambada "${SWITCH_LAMBADA:-20}") ;;
  esac
  python3 tools/bench/reduce_config.py "$cfg" "$out/$tag-plain.cfg" --solver-only "${reduce[@]}" || exit 1
  nice -n 19 "$lmpress" -q compare "$out/$tag-plain.cfg" --json "$out/$tag-plain.json" > /dev/null || exit 1
  for seed in ${SPREAD_SEEDS:-1 2 3}; do
    python3 tools/bench/reduce_config.py "$cfg" "$out/$tag-j$seed.cfg" --solver-only "${reduce[@]}" \
      --jitter "${SPREAD_JITTER:-1e-6}" --seed "$seed" || exit 1
    nice -n 19 "$lmpress" -q compare "$out/$tag-j$seed.cfg" --json "$out/$tag-j$seed.json" > /dev/null || exit 1
    "$lmpress" diff "$out/$tag-plain.json" "$out/$tag-j$seed.json" > "$out/$tag-j$seed-diff.txt" 2>&1
    echo "$tag seed $seed: $(grep '^worst solver' "$out/$tag-j$seed-diff.txt")" | tee -a "$out/spread.txt"
  done
done
