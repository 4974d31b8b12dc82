#!/usr/bin/env bash
# switch_backends.sh — "switching backend.name in any shipped config gives the same results":
# every configs/*.cfg run with --backend cpu and with --backend NAME, the two tables checked by
# `lmpress diff` (each variant within the tolerance of its class, docs/backends.md).
#
#   tools/bench/switch_backends.sh NAME [BUILD_DIR] [OUT_DIR]     (defaults: build, switch-out)
#
# SWITCH_CONFIGS picks configs (default: every configs/*.cfg).  The SmolLM2 configs run reduced
# unless SWITCH_FULL=1: SWITCH_CALIB calibration windows (default 4), SWITCH_EVAL evaluation
# windows (default 2) and SWITCH_LAMBADA LAMBADA passages (default 20), every variant as shipped
# (tools/bench/reduce_config.py), because on a CPU-only OpenCL runtime (PoCL) they would take
# hours at full size.  A config whose model is missing is reported and passed over.  Everything
# runs under `nice -n 19`; each table, its time and the diff land in OUT_DIR.  Exit status: the
# number of configs whose tables differ beyond tolerance (or failed).
set -uo pipefail
cd "$(dirname "$0")/../.."
name=${1:?usage: switch_backends.sh NAME [BUILD_DIR] [OUT_DIR]}
build=${2:-build}
out=${3:-switch-out}
lmpress="$build/lmpress"
[ -x "$lmpress" ] || { echo "switch_backends.sh: build first ($lmpress missing)" >&2; exit 1; }
mkdir -p "$out"
configs=${SWITCH_CONFIGS:-$(ls configs/*.cfg)}
failed=0
for cfg in $configs; do
  tag=$(basename "$cfg" .cfg)
  model=$(grep -oE '(^|[^_[:alnum:]])path *= *"[^"]*"' "$cfg" | head -1 | sed 's/.*"\(.*\)"/\1/')
  if [ -n "$model" ] && [ ! -e "$(dirname "$cfg")/$model" ]; then
    echo "== $tag: skipped, no model $(dirname "$cfg")/$model (tools/fetch_smollm2.sh)"
    continue
  fi
  run=$cfg
  case $tag in smollm2-*)
    if [ "${SWITCH_FULL:-0}" != 1 ]; then
      run=$out/$tag-reduced.cfg
      python3 tools/bench/reduce_config.py "$cfg" "$run" --calib "${SWITCH_CALIB:-4}" \
        --eval "${SWITCH_EVAL:-2}" --lambada "${SWITCH_LAMBADA:-20}" || { failed=$((failed + 1)); continue; }
    fi ;;
  esac
  for b in cpu "$name"; do
    t0=$(date +%s)
    if ! nice -n 19 "$lmpress" -q compare "$run" --backend "$b" --json "$out/$tag-$b.json" > "$out/$tag-$b.txt" 2>&1; then
      echo "== $tag on $b: FAILED (see $out/$tag-$b.txt)"
      failed=$((failed + 1))
      continue 2
    fi
    echo "$tag $b $(( $(date +%s) - t0 )) s" | tee -a "$out/times.txt"
  done
  echo "== $tag: $name against cpu"
  "$lmpress" diff "$out/$tag-cpu.json" "$out/$tag-$name.json" > "$out/$tag-diff.txt" 2>&1 || failed=$((failed + 1))
  tail -4 "$out/$tag-diff.txt"
done
echo "switch_backends.sh: $failed config(s) beyond tolerance or failed; results in $out/"
exit "$failed"
