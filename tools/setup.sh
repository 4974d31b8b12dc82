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
# built when the CUDA toolkit (nvcc) is already there.
packages=(gcc make cmake pkg-config libconfig-dev libpcre2-dev libutf8proc-dev check libsubunit-dev libopenblas-dev liblapacke-dev
          ocl-icd-opencl-dev opencl-headers libclblast-dev pocl-opencl-icd clinfo
          python3 python3-numpy python3-pip libopenmpi-dev openmpi-bin chromium)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}" >&2
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

jobs=$(nproc 2>/dev/null || echo 2)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$jobs" >/dev/null
echo "setup: built build/lmpress and build/plugins/" >&2
