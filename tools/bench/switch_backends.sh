#!/usr/bin/env bash
# switch_backends.sh — "switching backend.name in any shipped config gives the same results":
# every configs/*.cfg run with --backend cpu and with --backend NAME, and the two tables checked
# by `lmpress diff` against noise tables: the same config on the cpu backend with its `jitter`
# diagnostic (seeds SWITCH_NOISE_SEEDS, default "1 2"; jitter SWITCH_JITTER, default 1e-6), which
# shows how far each number moves when only the rounding changes (docs/backends.md).
# Two seeds can underestimate a chaotic variant's spread (GPTQ on very little calibration data):
# before calling a number beyond tolerance a backend error, rerun with SWITCH_NOISE_SEEDS="1 2 3 4"
# (the tables already made are kept); cpu-only seeds widen the bound only where rounding alone
# moves the number that far.
#
#   tools/bench/switch_backends.sh NAME [BUILD_DIR] [OUT_DIR]     (defaults: build, switch-out)
#
# SWITCH_CONFIGS picks configs (default: every configs/*.cfg).  The SmolLM2 configs run reduced
# unless SWITCH_FULL=1: SWITCH_CALIB calibration windows (default 2), SWITCH_EVAL evaluation
# windows (default 1) and SWITCH_LAMBADA LAMBADA passages (default 10), every variant as shipped
# (tools/bench/reduce_config.py), because on a CPU-only OpenCL runtime (PoCL) they would take
# hours at full size.  A config whose model is missing is reported and passed over.  A table
# already in OUT_DIR is kept (SWITCH_REUSE=0 reruns it), so an interrupted run resumes.
# Everything runs under `nice -n 19`; tables, times and diffs land in OUT_DIR.  Exit status: the
# number of configs whose tables differ beyond tolerance or failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
name=${1:?usage: switch_backends.sh NAME [BUILD_DIR] [OUT_DIR]}
build=${2:-build}
out=${3:-switch-out}
lmpress="$build/lmpress"
[ -x "$lmpress" ] || { echo "switch_backends.sh: build first ($lmpress missing)" >&2; exit 1; }
mkdir -p "$out"
configs=${SWITCH_CONFIGS:-$(ls configs/*.cfg)}
# table SUFFIX CONFIG [--backend NAME]: one compare --json of config $tag, timed, unless already there
table() {
  local what=$tag-$1 cfg=$2 t0
  shift 2
  [ "${SWITCH_REUSE:-1}" = 1 ] && [ -s "$out/$what.json" ] && return 0
  t0=$(date +%s)
  nice -n 19 "$lmpress" -q compare "$cfg" "$@" --json "$out/$what.json.tmp" > "$out/$what.txt" 2>&1 &&
    mv "$out/$what.json.tmp" "$out/$what.json" && echo "$what $(( $(date +%s) - t0 )) s" | tee -a "$out/times.txt"
}

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
      python3 tools/bench/reduce_config.py "$cfg" "$run" --calib "${SWITCH_CALIB:-2}" \
        --eval "${SWITCH_EVAL:-1}" --lambada "${SWITCH_LAMBADA:-10}" || { failed=$((failed + 1)); continue; }
    fi ;;
  esac
  noise=()
  ok=1
  table cpu "$run" --backend cpu || ok=0
  for seed in ${SWITCH_NOISE_SEEDS:-1 2}; do
    [ $ok = 1 ] || break
    python3 tools/bench/reduce_config.py "$run" "$out/$tag-noise$seed.cfg" --cpu-jitter "${SWITCH_JITTER:-1e-6}" \
      --jitter-seed "$seed" && table "noise$seed" "$out/$tag-noise$seed.cfg" || ok=0
    noise+=(--noise "$out/$tag-noise$seed.json")
  done
  [ $ok = 1 ] && { table "$name" "$run" --backend "$name" || ok=0; }
  if [ $ok = 0 ]; then
    echo "== $tag: a run FAILED (see $out/$tag-*.txt)"
    failed=$((failed + 1))
    continue
  fi
  echo "== $tag: $name against cpu"
  "$lmpress" diff "$out/$tag-cpu.json" "$out/$tag-$name.json" "${noise[@]}" > "$out/$tag-diff.txt" 2>&1 || failed=$((failed + 1))
  tail -n 4 "$out/$tag-diff.txt"
done
echo "switch_backends.sh: $failed config(s) beyond tolerance or failed; results in $out/"
exit "$failed"
