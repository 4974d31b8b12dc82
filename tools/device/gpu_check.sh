#!/usr/bin/env bash
# gpu_check.sh — the prepared GPU check of the cuda backend (issue 35): on a bare, offline GPU
# machine with CUDA, cmake and python3 (torch, transformers, numpy) but no Debian development
# packages, build lmpress against the packages tools/device/pack.sh packed, verify the cuda backend
# and time it against the CPU, all within ten minutes.
#
#   tools/device/gpu_check.sh [--pack DIR] [--out DIR] [--work DIR] [--deadline S]
#   tools/device/gpu_check.sh --dry-run [--reuse-build BUILD_DIR] [...]
#
# Run it there as one command under `timeout`, e.g. through the device tool:
#   timeout 580 bash tools/device/gpu_check.sh            (with carry: ["device-pack"])
#
# Steps, in order of what matters most; each has its own time budget (seconds, below), cut to
# what is left of the whole run's deadline (--deadline, default 540 s, leaving the device call's
# 600 s room to send results back; a dry run that builds everything: 1800 s and 1200 s for the
# build, for a small machine), so that a slow step cannot eat the ones after it:
#   machine      (10)  GPU, driver, nvcc, CPU, python and torch versions
#   unpack       (40)  the pack's .debs into WORK/prefix (dpkg-deb -x; Debian's alternatives
#                      recreated as links; .pc files pointed at the prefix), then a probe program
#                      compiled, linked and run against libconfig, PCRE2, OpenBLAS, LAPACKE and
#                      check, whose headers and libraries must come from the prefix
#   build        (240) cmake against the prefix, the cuda backend for the present GPU
#                      (LMP_CUDA_ARCHITECTURES from nvidia-smi's compute capability), the targets
#                      the steps below run
#   conformance  (120) tests/test_backend_conformance on cuda (ops, probe, end to end), which
#                      must report cuda as tested, not skipped
#   block        (60)  the device block path (issue 41): tests/test_backend_block on cuda (a block's
#                      statistics and outputs against the cpu's per-op path on stories260K, Qwen3
#                      and Gemma 2; it must run, not skip), and bench_backends --block on
#                      stories260K: per block, time and bytes moved host<->device, op by op and
#                      on the block path (the synth step adds the same table at 7B width)
#   compare      (200) configs/quickstart.cfg on cpu, on cpu with jitter (the noise tables) and
#                      on cuda: tools/bench/switch_backends.sh, `lmpress diff` within the
#                      tolerances of docs/backends.md
#   throughput   (90)  bench_backends GEMM, `lmpress eval` tokens/s and bench_gptq on
#                      stories260K, cuda and cpu
#   synth        (180) a real-width synthetic model (Llama-2-7B's dim 4096 and hidden 11008, 2
#                      layers, vocab 8192; tools/bench/make_llama7b_shaped.py): GPTQ seconds per
#                      block (bench_gptq, 16 windows of 512 tokens) and eval tokens/s, cuda and cpu
#                      ($GC_SYNTH_LAYERS layers instead of 2)
#   peer         (120) llm-compressor's GPTQ on the same model and windows, if the pack's wheels
#                      install (tools/bench/llmc_oneshot.py), as a peer timing per block
# A step that fails is recorded and the next one runs; steps that need a failed step's result
# are skipped, saying so.  Exit status: 0 if no step failed or ran out of time.
#
# Results: OUT/gpu_check.log (everything printed), OUT/gpu_check.json (steps, their status and
# seconds, and the measured numbers: see write_json) and OUT/gpu_check_details.tar.gz (the
# compare tables and diffs, the bench outputs), where OUT is --out, else $OUT (set by the device
# tool), else device-check-out/.  The JSON is rewritten after every step, so a run stopped by an
# outer timeout still leaves what it measured.  Build trees and models go to WORK (default
# /tmp/lmpress-gpu-check), outside OUT, whose files the device tool sends back.
#
# --dry-run rehearses every step but the CUDA ones on a machine without a GPU (CI runs it as the
# ctest test_gpu_check_dry_run): the packages are really unpacked into a prefix and built against
# (without CUDA), and the cpu halves of the steps run on tiny inputs.  --reuse-build BUILD_DIR
# (dry run only) builds only the plugin that links OpenBLAS and LAPACKE against the prefix and
# takes the programs for the cpu steps from BUILD_DIR, which the same CI run has just built from
# the same sources: a full second build would take CI's two cores many minutes and test the
# compiler, not the prefix.
set -uo pipefail
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
root=$(cd "$(dirname "$0")/../.." && pwd)

# ---- the steps (each run as `gpu_check.sh __step NAME` under its own timeout) ----------------
# State passed to them through the environment: GC_MODE (gpu or dry-run), GC_WORK, GC_PACK,
# GC_BUILD (the build whose programs the steps run), GC_PREFIX, GC_LIBS (the prefix's library
# folders), GC_PY (a python3 with numpy), GC_NPROC.

metric() { printf '%s\t%s\n' "$1" "$2" >> "$GC_WORK/metrics.tsv"; echo "  metric $1 = $2"; }
# with_prefix CMD...: run CMD with the prefix's libraries first on the loader's path.  Only the
# lmpress programs (and scripts that run them) get them: torch and numpy keep the machine's own
# libgfortran & co.
with_prefix() { LD_LIBRARY_PATH="$GC_LIBS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }
# now, elapsed T0: wall-clock seconds (date +%s.%N), and the seconds since T0 with two decimals.
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.2f", b - a}'; }
# The device backend under test: cuda.  GC_DEVICE=opencl runs the GPU-mode steps after the build
# on PoCL instead, to rehearse them (`gpu_check.sh __step NAME`) on a machine without a GPU.
: "${GC_DEVICE:=cuda}"
backends() { if [ "$GC_MODE" = gpu ]; then echo "$GC_DEVICE cpu"; else echo cpu; fi; }

step_machine() {
  uname -a; nproc; free -g | head -2
  grep -m1 "model name" /proc/cpuinfo || true
  metric cpu_cores "$(nproc)"
  metric cpu_model "$(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //')"
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi -L || true
    local q
    q=$(nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
    echo "nvidia-smi: $q"
    metric gpu "$(echo "$q" | cut -d, -f1 | xargs)"
    metric gpu_compute_cap "$(echo "$q" | cut -d, -f2 | xargs)"
    metric gpu_driver "$(echo "$q" | cut -d, -f3 | xargs)"
    metric gpu_memory "$(echo "$q" | cut -d, -f4 | xargs)"
  else
    echo "nvidia-smi: not found"
    [ "$GC_MODE" = gpu ] && { echo "no nvidia-smi: is this the GPU machine?"; return 1; }
  fi
  local nvcc
  if nvcc=$(find_nvcc); then
    "$nvcc" --version | tail -2
    metric nvcc "$("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
    # The cuda plugin links cudart, cuBLAS and cuSOLVER from the toolkit: if the build cannot find
    # them, this line says whether the toolkit has them at all.
    echo "toolkit libraries: $(find "$(dirname "$(dirname "$(readlink -f "$nvcc")")")"/ -maxdepth 3 \
      \( -name 'libcublas.so*' -o -name 'libcusolver.so*' -o -name 'libcudart.so*' \) -printf '%f\n' 2>/dev/null | sort -u | tr '\n' ' ')"
  fi
  for t in cmake ninja gcc cc pkg-config dpkg-deb; do printf '%-10s %s\n' "$t" "$(command -v $t || echo missing)"; done
  "$GC_PY" --version
  "$GC_PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())' 2>&1 | tail -1 || true
  return 0
}

find_nvcc() {
  local c
  for c in "$(command -v nvcc 2>/dev/null)" /usr/local/cuda/bin/nvcc /usr/local/cuda-*/bin/nvcc; do
    [ -n "$c" ] && [ -x "$c" ] && { echo "$c"; return 0; }
  done
  return 1
}

step_unpack() {
  local p=$GC_PREFIX deb n=0
  rm -rf "$p"
  mkdir -p "$p"
  for deb in "$GC_PACK"/debs/*.deb; do
    [ -f "$deb" ] || { echo "no .deb files in $GC_PACK/debs: run tools/device/pack.sh here first"; return 1; }
    if command -v dpkg-deb >/dev/null; then
      dpkg-deb -x "$deb" "$p" || return 1
    else # a .deb is an ar archive holding data.tar.*: ar (binutils, beside any C compiler) and tar
      local member z=""
      member=$(ar t "$deb" | grep '^data\.tar') || { echo "$deb: no data.tar member"; return 1; }
      case $member in *.xz) z=-J ;; *.gz) z=-z ;; *.zst) z=--zstd ;; esac
      ar p "$deb" "$member" | tar -x $z -C "$p" || return 1
    fi
    n=$((n + 1))
  done
  echo "unpacked $n packages into $p"
  local lib=$p/usr/lib/x86_64-linux-gnu ob=openblas-pthread
  # Debian's alternatives, made by the packages' postinst scripts that dpkg-deb -x does not run
  # (libopenblas0-pthread, libopenblas-pthread-dev): relative links, so the prefix can move.
  ln -sf $ob/libblas.so.3 "$lib/libblas.so.3"
  ln -sf $ob/liblapack.so.3 "$lib/liblapack.so.3"
  ln -sf $ob/libopenblas.so.0 "$lib/libopenblas.so.0"
  ln -sf $ob/libblas.so "$lib/libblas.so"
  ln -sf $ob/liblapack.so "$lib/liblapack.so"
  ln -sf $ob/libopenblas.so "$lib/libopenblas.so"
  ln -sf ../$ob/pkgconfig/openblas.pc "$lib/pkgconfig/openblas.pc"
  ln -sf ../$ob/pkgconfig/blas-openblas.pc "$lib/pkgconfig/blas.pc"
  ln -sf ../$ob/pkgconfig/lapack-openblas.pc "$lib/pkgconfig/lapack.pc"
  ln -sf $ob/cblas.h "$p/usr/include/x86_64-linux-gnu/cblas.h"
  # The .pc files name /usr; point their path variables at the prefix.
  find "$p" -name '*.pc' -type f -exec sed -i "s#^\([a-z_]*\)=/usr#\1=$p/usr#" {} +
  probe_prefix
}

# The pkg-config the build uses: the prefix's pkgconf (the GPU machine may have none), searching
# the prefix's .pc files only, so that nothing resolves from the machine's own /usr.
pc() { with_prefix env PKG_CONFIG_PATH= PKG_CONFIG_LIBDIR="$GC_PREFIX/usr/lib/x86_64-linux-gnu/pkgconfig:$GC_PREFIX/usr/share/pkgconfig" \
         "$GC_PREFIX/usr/bin/pkgconf" "$@"; }
prefix_cpath() { echo "$GC_PREFIX/usr/include:$GC_PREFIX/usr/include/x86_64-linux-gnu"; }

# A program calling one function of each library, compiled with the prefix's flags; its headers
# (gcc -M) and its libraries (ldd) must resolve inside the prefix.  On the GPU machine this fails
# in seconds, with the missing piece named, instead of minutes into the build.
probe_prefix() {
  local d=$GC_WORK/probe mods="libconfig libpcre2-8 libutf8proc openblas lapacke check" f
  mkdir -p "$d"
  cat > "$d/probe.c" <<'EOF'
#define PCRE2_CODE_UNIT_WIDTH 8
#include <cblas.h>
#include <check.h>
#include <lapacke.h>
#include <libconfig.h>
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <utf8proc.h>
int main(void)
{
    config_t cfg;
    config_init(&cfg);
    int ok = config_read_string(&cfg, "x = 2;") == CONFIG_TRUE;
    config_destroy(&cfg);
    int err;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR) "\\d+", PCRE2_ZERO_TERMINATED, 0, &err, &off, NULL);
    ok = ok && re;
    pcre2_code_free(re);
    float a[4] = {4, 2, 2, 3}, x[2] = {1, 1}, y[2] = {0, 0};
    cblas_sgemv(CblasRowMajor, CblasNoTrans, 2, 2, 1.0f, a, 2, x, 1, 0.0f, y, 1);
    ok = ok && y[0] == 6 && y[1] == 5;
    ok = ok && LAPACKE_spotrf(LAPACK_ROW_MAJOR, 'L', 2, a, 2) == 0 && a[0] == 2;
    ok = ok && srunner_create(suite_create("probe")) != NULL;
    utf8proc_uint8_t *nfc = utf8proc_NFC((const utf8proc_uint8_t *)"e\xcc\x81"); /* e + U+0301 -> U+00E9 */
    ok = ok && nfc && nfc[0] == 0xc3 && nfc[1] == 0xa9 && nfc[2] == 0;
    free(nfc);
    printf("probe: libconfig, PCRE2, utf8proc, OpenBLAS, LAPACKE, check %s\n", ok ? "work" : "FAILED");
    return !ok;
}
EOF
  local cflags libs
  cflags=$(pc --cflags $mods) || { echo "pkg-config cannot resolve: $mods"; return 1; }
  libs=$(pc --libs $mods) || return 1
  echo "pkg-config --cflags: $cflags"
  echo "pkg-config --libs: $libs"
  local cc
  cc=$(command -v cc || command -v gcc) || { echo "no C compiler (cc, gcc)"; return 1; }
  CPATH=$(prefix_cpath) "$cc" $cflags -M "$d/probe.c" > "$d/probe.d" || return 1
  for f in cblas.h check.h lapacke.h libconfig.h pcre2.h utf8proc.h; do
    grep -q "$GC_PREFIX/[^ ]*/$f" "$d/probe.d" || { echo "$f does not come from the prefix but from $(grep -o "[^ ]*/$f" "$d/probe.d")"; return 1; }
  done
  CPATH=$(prefix_cpath) "$cc" $cflags -o "$d/probe" "$d/probe.c" $libs || return 1
  with_prefix "$d/probe" || return 1
  # Every library the probe loads, directly or through another (liblapacke needs libblas.so.3 and
  # liblapack.so.3 through the alternatives links above), must come from the prefix: on a machine
  # that has them in /usr (this one, in a dry run) a missing link would otherwise go unseen.
  for f in libconfig.so libpcre2-8.so libutf8proc.so libopenblas.so liblapacke.so libblas.so liblapack.so libtmglib.so \
           libgfortran.so libquadmath.so; do
    with_prefix ldd "$d/probe" | grep "$f" | grep -q "$GC_PREFIX" ||
      { with_prefix ldd "$d/probe"; echo "$f is not loaded from the prefix (ldd above)"; return 1; }
  done
  echo "headers and libraries resolve inside $GC_PREFIX"
}

step_build() {
  local b=$GC_WORK/build gen=() cuda=() targets
  command -v cmake >/dev/null || { echo "no cmake"; return 1; }
  command -v ninja >/dev/null && gen=(-G Ninja)
  if [ "$GC_MODE" = gpu ]; then
    local nvcc cap arch
    nvcc=$(find_nvcc) || { echo "no nvcc"; return 1; }
    cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
    arch=${cap:-native}
    echo "cuda: $nvcc, LMP_CUDA_ARCHITECTURES=$arch"
    metric cuda_architectures "$arch"
    cuda=(-DLMP_WITH_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" -DCUDAToolkit_ROOT="$(dirname "$(dirname "$nvcc")")"
          -DLMP_CUDA_ARCHITECTURES="$arch")
    targets="lmpress test_backend_conformance test_backend_block bench_gptq bench_backends"
  else
    cuda=(-DLMP_WITH_CUDA=OFF)
    targets="lmpress test_backend_conformance test_backend_block bench_gptq bench_backends"
    # With a tree to reuse, only the plugin that links the prefix's OpenBLAS and LAPACKE (see the
    # header); the cpu steps run the reused tree's programs.
    [ -n "${GC_REUSE:-}" ] && targets="lmp_backend_cpu"
  fi
  targets=${GC_TARGETS:-$targets}   # a narrower set, to try the build step alone (e.g. lmp_backend_cuda)
  rm -rf "$b"
  # pkg-config is the prefix's pkgconf, run through a wrapper that sets its search path and the
  # loader path its libpkgconf needs; CPATH and LIBRARY_PATH make gcc (and nvcc's host compiler)
  # find the headers and libraries that pkg-config's flags do not name (lapacke.h in
  # /usr/include, which Debian's lapacke.pc leaves to the system's default).
  cat > "$GC_WORK/pkg-config" <<EOF
#!/bin/sh
# gpu_check.sh's pkg-config: the unpacked prefix's pkgconf over the prefix's .pc files only.
LD_LIBRARY_PATH="$GC_LIBS\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" PKG_CONFIG_PATH= \\
PKG_CONFIG_LIBDIR="$GC_PREFIX/usr/lib/x86_64-linux-gnu/pkgconfig:$GC_PREFIX/usr/share/pkgconfig" \\
  exec "$GC_PREFIX/usr/bin/pkgconf" "\$@"
EOF
  chmod +x "$GC_WORK/pkg-config"
  export CPATH LIBRARY_PATH
  CPATH=$(prefix_cpath)
  LIBRARY_PATH=$GC_LIBS
  local t0
  t0=$(now)
  with_prefix cmake -S "$root" -B "$b" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DPKG_CONFIG_EXECUTABLE="$GC_WORK/pkg-config" \
    -DLMP_WITH_OPENCL=OFF -DLMP_WITH_MPI=OFF "${cuda[@]}" || return 1
  metric build_configure_s "$(elapsed "$t0")"
  t0=$(now)
  # shellcheck disable=SC2086
  with_prefix cmake --build "$b" -j"$GC_NPROC" --target $targets || return 1
  metric build_s "$(elapsed "$t0")"
  # The plugin that links OpenBLAS/LAPACKE must load them from the prefix.
  local loaded
  loaded=$(with_prefix ldd "$b/plugins/lmp-backend-cpu.so" | grep -E "libopenblas|liblapacke")
  echo "$loaded"
  [ "$(echo "$loaded" | grep -c "=> $GC_PREFIX/")" = 2 ] ||
    { echo "the cpu backend does not load OpenBLAS and LAPACKE from the prefix (ldd above)"; return 1; }
  if [ "$GC_MODE" = gpu ]; then
    [ -f "$b/plugins/lmp-backend-cuda.so" ] || { echo "the cuda backend was not built (see cmake's output)"; return 1; }
    with_prefix "$b/lmpress" plugins > "$GC_WORK/plugins.txt" 2>&1
    grep -q '^backend cuda ' "$GC_WORK/plugins.txt" || cat "$GC_WORK/plugins.txt"   # lmpress itself failed
    awk '/^backend cuda /{f=1; print; next} f && /^backend /{exit} f' "$GC_WORK/plugins.txt"
    awk '/^backend cuda /{f=1; next} f && /^backend /{exit} f && /usable here/' "$GC_WORK/plugins.txt" | grep -q '^  usable here' ||
      { echo "the cuda backend is built but not usable here (reason above)"; return 1; }
  fi
  return 0
}

step_conformance() {
  local log=$GC_WORK/details/conformance.txt
  if [ "$GC_MODE" = gpu ]; then
    (cd "$GC_BUILD" && with_prefix ./tests/test_backend_conformance) 2>&1 | tee "$log"
    local st=${PIPESTATUS[0]}
    grep -q "conformance: backend $GC_DEVICE .*usable here: tested" "$log" || { echo "$GC_DEVICE was not tested"; return 1; }
    metric "conformance_$GC_DEVICE" "$([ "$st" = 0 ] && echo pass || echo fail)"
    return "$st"
  fi
  # Dry run: the cpu backend alone, held to cpu_ref.c.  PoCL's OpenCL device (there in a full
  # build here) is hidden, as test_probe_without_device hides it, so that no end-to-end run on it
  # starts: that would take CI minutes.
  mkdir -p "$GC_WORK/no-icd"
  (cd "$GC_BUILD" && OCL_ICD_VENDORS="$GC_WORK/no-icd" CUDA_VISIBLE_DEVICES='' with_prefix ./tests/test_backend_conformance) 2>&1 |
    tee "$log" | grep -E "^conformance:|%:|Checks" | head -20
  local st=${PIPESTATUS[0]}
  metric conformance_cpu "$([ "$st" = 0 ] && echo pass || echo fail)"
  return "$st"
}

# block_table MODEL BLOCKS TOKENS WINDOWS KEY BACKENDS: bench_backends --block's table (per block:
# ms, MB to the device, MB back; op by op and on the block path), its rows as metrics.
block_table() {
  local log=$GC_WORK/details/block-$5.md
  with_prefix "$GC_BUILD/tools/bench/bench_backends" --backends "$6" --sizes 64 --seconds 0.05 --md \
    --block "$1" --blocks "$2" --tokens "$3" --windows "$4" 2>&1 | tee "$log" || return 1
  # | backend | path | windows x tokens | blocks | ms | MB to device | MB to host | diff |
  awk -F'|' 'NF > 8 && $3 ~ /per-op|block/ {for (i = 2; i <= 8; i++) gsub(/ /, "", $i);
    printf "%s_%s\t%s ms, %s MB to the device, %s MB back per block\n", $2, $3, $6, $7, $8}' "$log" |
    while IFS=$'\t' read -r k v; do metric "${5}_block_${k}" "$(echo "$v" | tr -s ' ')"; done
  grep -q '| block |' "$log"
}

step_block() {
  local st=0 m=$root/models/stories260K/stories260K.bin
  if [ "$GC_MODE" = gpu ]; then
    local log=$GC_WORK/details/test_backend_block.txt
    (cd "$GC_BUILD" && with_prefix ./tests/test_backend_block "$GC_DEVICE") 2>&1 | tee "$log" | grep -E "outputs|SKIP|Checks"
    st=${PIPESTATUS[0]}
    [ "$st" = 77 ] && { echo "the $GC_DEVICE block path was skipped, not tested"; st=1; }
    metric "block_conformance_$GC_DEVICE" "$([ "$st" = 0 ] && echo pass || echo fail)"
    block_table "$m" 5 256 16 stories260K "$GC_DEVICE,cpu" || st=1
  else
    # Dry run: the table's code on the cpu backend alone (it has no block path: one row).
    block_table "$m" 2 64 2 stories260K cpu
    grep -q '| cpu | per-op |' "$GC_WORK/details/block-stories260K.md" || st=1
  fi
  return $st
}

step_compare() {
  local cfg=configs/quickstart.cfg name=$GC_DEVICE out=$GC_WORK/details/compare seeds="1 2"
  mkdir -p "$out"
  if [ "$GC_MODE" != gpu ]; then
    # Dry run: a quickstart with 2 calibration and 2 evaluation windows and three variants,
    # compared on cpu against itself through the same script and the same `lmpress diff`.
    cfg=$GC_WORK/quickstart-dry.cfg
    "$GC_PY" "$root/tools/bench/reduce_config.py" "$root/configs/quickstart.cfg" "$cfg" --calib 2 --eval 2 \
      --variants fp32,w4-g32,w8a8-static || return 1
    name=cpu seeds=1
  fi
  local t0 st
  t0=$(now)
  SWITCH_CONFIGS=$cfg SWITCH_REUSE=0 SWITCH_NOISE_SEEDS=$seeds with_prefix bash "$root/tools/bench/switch_backends.sh" "$name" "$GC_BUILD" "$out"
  st=$?
  metric compare_s "$(elapsed "$t0")"
  local tag
  tag=$(basename "$cfg" .cfg)
  [ -f "$out/$tag-diff.txt" ] && cat "$out/$tag-diff.txt"
  metric compare_within_tolerance "$([ "$st" = 0 ] && echo yes || echo no)"
  # lmpress diff's summary lines: the largest difference per class, and the count beyond.
  local class
  for class in exact rounding solver; do
    metric "compare_largest_$class" "$(sed -n "s/^largest $class *differences: //p" "$out/$tag-diff.txt" 2>/dev/null | tail -1)"
  done
  metric compare_summary "$(grep 'beyond tolerance' "$out/$tag-diff.txt" 2>/dev/null | tail -1)"
  sed 's/ s$//' "$out/times.txt" 2>/dev/null | while read -r what secs; do metric "compare_${what#"$tag"-}_s" "$secs"; done
  return "$st"
}

# eval_rate MODEL TEXT SEQ WINDOWS BACKEND KEY: `lmpress eval`'s scored tokens per second.
eval_rate() {
  local t0 j
  t0=$(now)
  j=$(with_prefix "$GC_BUILD/lmpress" eval "$1" --backend "$5" --text "$2" --seq-len "$3" --max-windows "$4" --json) || return 1
  local secs
  secs=$(elapsed "$t0")
  echo "$j"
  metric "${6}_ppl" "$(echo "$j" | sed -n 's/.*"ppl": *\([0-9.eE+-]*\).*/\1/p')"
  metric "${6}_tokens_per_s" "$(echo "$j" | sed -n 's/.*"scored": *\([0-9]*\).*/\1/p' | awk -v s="$secs" '{printf "%.0f", $1 / s}')"
}

# gptq_time MODEL TEXT WINDOWS SEQ BACKEND KEY LAYERS: bench_gptq's total, and per block.
gptq_time() {
  local log=$GC_WORK/details/bench_gptq-$6.txt total
  with_prefix "$GC_BUILD/tools/bench/bench_gptq" "$1" --text "$2" --windows "$3" --seq-len "$4" --backend "$5" 2>&1 |
    tee "$log" || return 1
  total=$(awk '$1 == "total" {print $2}' "$log")
  [ -n "$total" ] || return 1
  metric "${6}_gptq_total_s" "$total"
  metric "${6}_gptq_per_block_s" "$(awk -v t="$total" -v l="$7" 'BEGIN {printf "%.3f", t / l}')"
}

step_throughput() {
  local st=0 b m=$root/models/stories260K sizes=1024,2048,4096 windows=64 gw=32
  [ "$GC_MODE" = gpu ] || { sizes=128,256; windows=4; gw=2; }
  with_prefix "$GC_BUILD/tools/bench/bench_backends" --backends "$(backends | tr ' ' ,)" --sizes "$sizes" \
    --seconds 0.3 --md 2>&1 | tee "$GC_WORK/details/gemm.md" || st=1
  for b in $(backends); do
    eval_rate "$m/stories260K.bin" "$m/tinystories-synth-eval.txt" 256 "$windows" "$b" "stories260K_eval_$b" || st=1
    gptq_time "$m/stories260K.bin" "$m/tinystories-synth-calib.txt" "$gw" 256 "$b" "stories260K_$b" 5 || st=1
  done
  return $st
}

# The synthetic model: real width, few layers.  Written once per WORK folder (the peer step reads
# the same one).
synth_args() {
  if [ "$GC_MODE" = gpu ]; then
    echo "--layers ${GC_SYNTH_LAYERS:-2} --dim 4096 --hidden 11008 --heads 32 --vocab 8192 --seq-len 4096"
  else
    echo "--layers 1 --dim 256 --hidden 688 --heads 4 --vocab 512 --seq-len 512"
  fi
}
synth_layers() { synth_args | awk '{print $2}'; }
synth_windows() { if [ "$GC_MODE" = gpu ]; then echo "16 512"; else echo "2 128"; fi; }

step_synth() {
  local model=$GC_WORK/synth st=0 b t0 text=$root/data/wikitext-2/wiki.valid.tokens
  read -r w seq < <(synth_windows)
  t0=$(now)
  # shellcheck disable=SC2046
  "$GC_PY" "$root/tools/bench/make_llama7b_shaped.py" "$model" $(synth_args) | tail -1 || return 1
  metric synth_generate_s "$(elapsed "$t0")"
  metric synth_shape "$(synth_args)"
  metric synth_calibration "$w windows x $seq tokens of wiki.valid.tokens"
  for b in $(backends); do
    gptq_time "$model" "$text" "$w" "$seq" "$b" "synth_$b" "$(synth_layers)" || st=1
    eval_rate "$model" "$text" "$seq" 4 "$b" "synth_eval_$b" || st=1
  done
  # the block path at real width: per block, op by op against whole blocks on the device (4
  # windows: the op-by-op row stages 7B-wide weights per op and window, and comes last in the step)
  [ "$GC_MODE" = gpu ] && { block_table "$model" "$(synth_layers)" "$seq" 4 synth "$GC_DEVICE" || st=1; }
  return $st
}

step_peer() {
  local site=$GC_WORK/site model=$GC_WORK/synth
  ls "$GC_PACK"/wheels/*.whl >/dev/null 2>&1 || { echo "SKIP: no wheels in $GC_PACK/wheels (pack.sh with PACK_WHEELS=1)"; return 77; }
  [ -f "$model/config.json" ] || { echo "SKIP: no synthetic model (the synth step failed)"; return 77; }
  rm -rf "$site"
  # Installed into a folder of their own, not over the machine's packages; one version of each
  # (pip stops at two).  The dry run installs them for the GPU machine's CPython 3.12, whatever
  # python3 runs here, which checks the set (tags, one version each) but cannot import it.
  local target=()
  [ "$GC_MODE" = gpu ] || target=(--python-version 3.12 --implementation cp --platform manylinux2014_x86_64)
  "$GC_PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
    "${target[@]}" "$GC_PACK"/wheels/*.whl || { echo "the wheels did not install"; return 1; }
  echo "installed $(find "$site" -maxdepth 1 -name '*.dist-info' | wc -l) wheels into $site"
  PYTHONPATH=$site "$GC_PY" -c 'import torch' 2>/dev/null || { echo "SKIP: $GC_PY has no torch: llm-compressor cannot run here"; return 77; }
  PYTHONPATH=$site "$GC_PY" -c 'import llmcompressor' || { echo "llmcompressor does not import"; return 1; }
  read -r w seq < <(synth_windows)
  # make_llama7b_shaped.py writes tokenizer.json alone; without a tokenizer_config.json naming a
  # class, AutoTokenizer would build a Llama tokenizer from config.json's model_type instead of
  # reading that file.  Written only now: the lmpress steps above read the folder as generated.
  [ -f "$model/tokenizer_config.json" ] || echo '{"tokenizer_class": "PreTrainedTokenizerFast"}' > "$model/tokenizer_config.json"
  PYTHONUNBUFFERED=1 PYTHONPATH=$site "$GC_PY" "$root/tools/bench/llmc_oneshot.py" --model "$model" \
    --text "$root/data/wikitext-2/wiki.valid.tokens" --windows "$w" --seq-len "$seq" --method gptq --bits 4 \
    --strategy channel --actorder none --threads "$GC_NPROC" --json "$GC_WORK/details/llmc.json" || return 1
  local s
  s=$("$GC_PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["compress_s"])' "$GC_WORK/details/llmc.json")
  metric llmc_gptq_total_s "$s"
  metric llmc_gptq_per_block_s "$(awk -v t="$s" -v l="$(synth_layers)" 'BEGIN {printf "%.3f", t / l}')"
  metric llmc_settings "4-bit symmetric per channel, actorder none (lmpress bench_gptq: 4-bit asymmetric per channel)"
}

# ---- the driver --------------------------------------------------------------------------

write_json() {
  "$GC_PY" - "$GC_WORK/steps.tsv" "$GC_WORK/metrics.tsv" "$GC_OUT/gpu_check.json" "$GC_MODE" "$1" <<'EOF'
import json, os, sys, time
steps_f, metrics_f, out, mode, finished = sys.argv[1:6]
def rows(path):
    try:
        with open(path) as f:
            return [l.rstrip("\n").split("\t") for l in f if l.strip()]
    except OSError:
        return []
def value(key, v):
    if any(k in key for k in ("nvcc", "driver", "compute_cap", "architectures")):
        return v  # versions stay strings: 13.10 is not 13.1
    try:
        return float(v) if any(c in v for c in ".eE") else int(v)
    except ValueError:
        return v
steps = [{"name": r[0], "status": r[1], "seconds": float(r[2]), "budget_s": int(r[3]), "note": r[4] if len(r) > 4 else ""}
         for r in rows(steps_f)]
doc = {"check": "tools/device/gpu_check.sh", "mode": mode, "finished": finished == "1",
       "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
       "git": os.environ.get("GC_GIT", ""),
       "ok": all(s["status"] in ("ok", "skipped") for s in steps),
       "steps": steps, "metrics": {r[0]: value(r[0], r[1]) for r in rows(metrics_f) if len(r) > 1}}
tmp = out + ".tmp"
with open(tmp, "w") as f:
    json.dump(doc, f, indent=1)
    f.write("\n")
os.replace(tmp, out)
EOF
}

# run_step NAME BUDGET [NEEDS]: the step under its budget, cut to the time left; NEEDS names a
# step that must have passed.
declare -A status
run_step() {
  local name=$1 budget=$2 needs=${3:-} left t0 st secs note=""
  left=$(( deadline - $(date +%s) - 15 ))   # 15 s kept for the JSON and the details archive
  echo
  echo "==== $name (budget ${budget} s, ${left} s left of the run)"
  if [ -n "$needs" ] && [ "${status[$needs]:-}" != ok ]; then
    status[$name]=skipped
    note="needs $needs, which did not pass"
  elif [ "$left" -lt 10 ]; then
    status[$name]=skipped
    note="out of time: the run's deadline came first"
  else
    [ "$budget" -gt "$left" ] && budget=$left
    t0=$(now)
    timeout -k 5 "$budget" bash "$self" __step "$name" 2>&1 | tee "$GC_WORK/step-$name.txt"
    st=${PIPESTATUS[0]}
    secs=$(elapsed "$t0")
    case $st in
      0) status[$name]=ok ;;
      77) status[$name]=skipped; note=$(grep -m1 '^SKIP: ' "$GC_WORK/step-$name.txt" | sed 's/^SKIP: //') ;;
      124|137) status[$name]=timeout; note="stopped after its budget of $budget s" ;;
      *) status[$name]=failed; note="exit status $st: $(grep -v '^  metric ' "$GC_WORK/step-$name.txt" | tail -n 1 | cut -c1-200)" ;;
    esac
  fi
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "${status[$name]}" "${secs:-0}" "$budget" "$(printf '%s' "$note" | tr '\t\n' '  ')" \
    >> "$GC_WORK/steps.tsv"
  echo "==== $name: ${status[$name]}${note:+ ($note)}${secs:+, $secs s}"
  write_json 0
}

if [ "${1:-}" = __step ]; then
  "step_$2"
  exit $?
fi

mode=gpu pack=$root/device-pack out=${OUT:-} work="" reuse="" deadline_s=""
while [ $# -gt 0 ]; do
  case $1 in
    --dry-run) mode=dry-run ;;
    --pack) pack=$2; shift ;;
    --out) out=$2; shift ;;
    --work) work=$2; shift ;;
    --reuse-build) reuse=$2; shift ;;
    --deadline) deadline_s=$2; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$reuse" ] && [ "$mode" != dry-run ] && { echo "gpu_check.sh: --reuse-build is for --dry-run only" >&2; exit 2; }
[ -n "$reuse" ] && { [ -x "$reuse/lmpress" ] || { echo "gpu_check.sh: $reuse/lmpress is not built" >&2; exit 2; }; }
out=${out:-$root/device-check-out}
# 540 s on the GPU machine (the device tool's command limit is 600 s); a dry run that builds
# everything on two cores needs far longer.
[ -z "$deadline_s" ] && if [ "$mode" = dry-run ] && [ -z "$reuse" ]; then deadline_s=1800; else deadline_s=540; fi
work=${work:-${TMPDIR:-/tmp}/lmpress-gpu-check$([ "$mode" = dry-run ] && echo -dry)}
mkdir -p "$out" "$work/details" || exit 2
pack=$(cd "$pack" 2>/dev/null && pwd) || { echo "gpu_check.sh: no pack folder (run tools/device/pack.sh first)" >&2; exit 2; }

# A python3 with numpy for the generator, the config reducer and the JSON: the machine's python3
# (on the GPU machine the one with torch), else Debian's.
py=""
for c in ${LMP_PYTHON:-} python3 /usr/bin/python3; do
  command -v "$c" >/dev/null && "$c" -c 'import numpy' 2>/dev/null && { py=$(command -v "$c"); break; }
done
[ -n "$py" ] || { echo "gpu_check.sh: no python3 with numpy" >&2; exit 2; }

export GC_MODE=$mode GC_WORK=$work GC_PACK=$pack GC_OUT=$out GC_PY=$py GC_REUSE=$reuse
GC_NPROC=$(nproc 2>/dev/null || echo 2)
# The dry run shares a small CI machine: two compile jobs at most.
[ "$mode" = dry-run ] && [ "$GC_NPROC" -gt 2 ] && GC_NPROC=2
export GC_PREFIX=$work/prefix GC_NPROC
export GC_LIBS=$GC_PREFIX/usr/lib/x86_64-linux-gnu:$GC_PREFIX/usr/lib/x86_64-linux-gnu/openblas-pthread
export GC_BUILD=${reuse:-$work/build}
GC_BUILD=$(cd "$(dirname "$GC_BUILD")" && pwd)/$(basename "$GC_BUILD")
GC_GIT=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo "?")
export GC_GIT
rm -f "$work/steps.tsv" "$work/metrics.tsv" "$out/gpu_check.json" "$out/gpu_check_details.tar.gz"
deadline=$(( $(date +%s) + deadline_s ))

exec > >(tee "$out/gpu_check.log") 2>&1
tee_pid=$!
echo "gpu_check.sh: mode $mode, git $GC_GIT, pack $pack, work $work, out $out, deadline ${deadline_s} s"
[ -n "$reuse" ] && echo "gpu_check.sh: the cpu steps run the programs of $reuse; the prefix build compiles the cpu backend only"
cd "$root" || exit 2
run_step machine 10
run_step unpack 40
# A full build on a small machine (a dry run without --reuse-build) takes minutes, not seconds.
run_step build "$([ "$mode" = dry-run ] && [ -z "$reuse" ] && echo 1200 || echo 240)" unpack
run_step conformance 120 build
run_step block 60 build
run_step compare 200 build
run_step throughput 90 build
run_step synth 180 build
run_step peer 120 synth
write_json 1
tar -czf "$out/gpu_check_details.tar.gz" -C "$work" details 2>/dev/null
echo
echo "==== summary ($mode, $(date -u +%Y-%m-%dT%H:%M:%SZ))"
column -t -s $'\t' "$work/steps.tsv" 2>/dev/null || cat "$work/steps.tsv"
echo "results: $out/gpu_check.log, $out/gpu_check.json, $out/gpu_check_details.tar.gz"
failed=$(awk -F'\t' '$2 == "failed" || $2 == "timeout"' "$work/steps.tsv" | wc -l)
echo "gpu_check.sh: $failed step(s) failed or ran out of time"
# Let tee write the log's last lines before the script's own exit status is returned.
exec >&- 2>&-
wait "$tee_pid" 2>/dev/null
[ "$failed" = 0 ]
