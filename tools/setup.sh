#!/usr/bin/env bash
# setup.sh — install the Debian packages lmpress needs (only those missing), then configure and
# build it in ./build.  Safe to rerun: an up-to-date tree rebuilds nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

# Build tools and the libraries docs/design.md chooses: libconfig (configs), PCRE2 (the configs'
# "re:" patterns, tokenizer.json Split regexes), utf8proc (NFC/NFKC normalizers), check + subunit (tests),
# OpenBLAS + LAPACKE (CPU backend), an OpenCL ICD loader + headers, CLBlast and PoCL (the opencl
# backend, run on the CPU by PoCL where there is no GPU); python3-numpy runs the reference scripts
# some tests call; Open MPI spreads compare and analyze over processes and machines (optional:
# without it lmpress builds as one process, and tests/test_mpi skips); chromium opens the HTML
# report headless in tests/test_report_html (without it that check skips).  The cuda backend is
# built when the CUDA toolkit (nvcc) is already there.  libdnnl-dev (oneDNN) runs the CPU backend's
# compute = "bf16" (AMX / AVX-512-BF16; without it the backend builds and runs bf16 configs in f32).
packages=(gcc make cmake pkg-config libconfig-dev libpcre2-dev libutf8proc-dev check libsubunit-dev libopenblas-dev liblapacke-dev
          libdnnl-dev
          ocl-icd-opencl-dev opencl-headers libclblast-dev pocl-opencl-icd clinfo
          python3 python3-numpy python3-pip libopenmpi-dev openmpi-bin chromium)

say() { echo "setup: $*" >&2; }

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  say "${#missing[@]} of ${#packages[@]} Debian packages missing: ${missing[*]}"
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  say "apt-get update"
  $sudo apt-get update -qq
  say "apt-get install ${missing[*]} (a minute or more on a fresh machine)"
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  say "installed ${missing[*]}"
else
  say "all ${#packages[@]} Debian packages present (${packages[*]})"
fi

jobs=$(nproc 2>/dev/null || echo 2)
mkdir -p build
log=build/setup.log
say "configuring build/ (cmake, Release; CUDA when nvcc is there); log: $log"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >"$log" 2>&1 || { tail -n 20 "$log" >&2; say "cmake failed, see $log"; exit 1; }
grep -E "^-- (lmpress|.*backend|.*CUDA|.*OpenCL|.*MPI)" "$log" | sed 's/^-- /setup:   /' >&2 || true
# make's "[ 42%]" lines, shown at each tenth: a full build is several minutes on two cores
say "building with $jobs jobs (a first build takes minutes on a few cores; an up-to-date tree seconds)"
start=$(date +%s)
shown=-10
cmake --build build -j"$jobs" 2>&1 | tee -a "$log" | while IFS= read -r line; do
  [[ $line =~ ^\[\ *([0-9]+)%\] ]] || continue
  p=${BASH_REMATCH[1]}
  if ((p >= shown + 10 || (p == 100 && shown < 100))); then
    shown=$((p - p % 10))
    printf 'setup:   %3d %% built (%d s)\n' "$p" $(($(date +%s) - start)) >&2
  fi
done || { tail -n 30 "$log" >&2; say "the build failed, see $log"; exit 1; }
say "built build/lmpress and build/plugins/ in $(( $(date +%s) - start )) s"
