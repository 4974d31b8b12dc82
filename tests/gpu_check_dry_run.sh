#!/usr/bin/env bash
# test_gpu_check_dry_run — tools/device/gpu_check.sh --dry-run, as CI runs it (tests/CMakeLists.txt):
#
#   tests/gpu_check_dry_run.sh SOURCE_DIR BUILD_DIR
#
# The prepared GPU check can only be run for real on a GPU machine lent now and then; this test
# makes sure that when one is, the script's every non-CUDA step already works: the Debian packages
# unpack into a prefix, pkg-config, the headers and the libraries resolve there, lmpress's cpu
# backend builds and loads against it, and the cpu halves of the conformance, compare, throughput
# and synthetic-model steps run and land in the JSON.
#
# The packages: SOURCE_DIR/device-pack when tools/device/pack.sh has made it, else downloaded by
# pack.sh into BUILD_DIR/gpu-check-pack (Debian packages only: PACK_WHEELS=0, so the peer step
# skips).  Where they cannot be had (no network, no apt) the test skips with exit 77, saying why.
# BUILD_DIR's programs are reused for the cpu steps (--reuse-build; gpu_check.sh's header says
# why), so the test takes about a minute on two cores.
set -uo pipefail
src=${1:?usage: gpu_check_dry_run.sh SOURCE_DIR BUILD_DIR}
build=${2:?usage: gpu_check_dry_run.sh SOURCE_DIR BUILD_DIR}
build=$(cd "$build" && pwd)

pack=$src/device-pack
if ! ls "$pack"/debs/*.deb >/dev/null 2>&1; then
  pack=$build/gpu-check-pack
  if ! ls "$pack"/debs/*.deb >/dev/null 2>&1; then
    if ! command -v apt-get >/dev/null; then
      echo "SKIP: no apt-get here to download the Debian packages (tools/device/pack.sh)"; exit 77
    fi
    if ! PACK_WHEELS=0 bash "$src/tools/device/pack.sh" "$pack" > "$build/gpu-check-pack.log" 2>&1; then
      echo "SKIP: the Debian packages could not be downloaded (no network or stale apt lists?):"
      tail -n 3 "$build/gpu-check-pack.log"
      exit 77
    fi
  fi
fi

out=$build/gpu-check-dry-out
rm -rf "$out"
bash "$src/tools/device/gpu_check.sh" --dry-run --reuse-build "$build" --pack "$pack" --work "$build/gpu-check-dry" \
  --out "$out" --deadline 240
st=$?
echo "gpu_check.sh --dry-run: exit status $st"

# The JSON must say what the log says: finished, every step that the dry run rehearses passed,
# and the numbers each step measures are there.
python3 - "$out/gpu_check.json" <<'PY' || exit 1
import json, sys
doc = json.load(open(sys.argv[1]))
bad = []
if doc.get("mode") != "dry-run" or not doc.get("finished"):
    bad.append("mode %r, finished %r" % (doc.get("mode"), doc.get("finished")))
steps = {s["name"]: s for s in doc["steps"]}
for name in ("machine", "unpack", "build", "conformance", "block", "compare", "throughput", "synth"):
    if steps.get(name, {}).get("status") != "ok":
        bad.append("step %s: %s" % (name, steps.get(name)))
if steps.get("peer", {}).get("status") not in ("ok", "skipped"):
    bad.append("step peer: %s" % steps.get("peer"))
m = doc["metrics"]
for key in ("conformance_cpu", "compare_within_tolerance", "stories260K_eval_cpu_tokens_per_s",
            "stories260K_cpu_gptq_per_block_s", "synth_cpu_gptq_per_block_s", "synth_eval_cpu_tokens_per_s",
            "stories260K_block_cpu_per-op"):
    if key not in m:
        bad.append("metric %s missing" % key)
if m.get("conformance_cpu") != "pass" or m.get("compare_within_tolerance") != "yes":
    bad.append("conformance %r, compare %r" % (m.get("conformance_cpu"), m.get("compare_within_tolerance")))
if not doc.get("ok"):
    bad.append("ok is false")
for b in bad:
    print("gpu_check.json:", b)
sys.exit(1 if bad else 0)
PY
[ "$st" = 0 ] || exit 1
echo "test_gpu_check_dry_run: passed"
