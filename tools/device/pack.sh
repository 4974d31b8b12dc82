#!/usr/bin/env bash
# pack.sh — everything tools/device/gpu_check.sh needs on a bare, offline GPU machine that this
# machine can fetch, in one ignored folder that travels with the working tree (the device tool's
# `carry`).  Run it here, where Debian's archive and PyPI are reachable:
#
#   tools/device/pack.sh [PACK_DIR]            (default: device-pack, ignored by .gitignore)
#
# PACK_DIR gets:
#   debs/      the Debian packages the build links against (libconfig, PCRE2, OpenBLAS + LAPACKE,
#              check + subunit) with their runtime libraries, and pkgconf (the GPU machine may
#              have no pkg-config).  Downloaded with `apt-get download` (no root, nothing is
#              installed); gpu_check.sh unpacks them with `dpkg-deb -x` into a prefix of its own,
#              because the GPU machine's system is not ours to change and its glibc may be newer
#              (these are Debian 12 builds against glibc 2.36, which newer glibcs still run).
#   wheels/    llm-compressor and the pure-Python packages it imports that the GPU machine's image
#              lacks (its torch, transformers, accelerate, numpy ... are used as they are), for the
#              peer timing.  Optional: PACK_WHEELS=0 leaves them out; a failed download is
#              reported and the pack is made without them.
#   MANIFEST.txt  what is in the pack (name, size, sha256) and what travels in-tree instead.
#
# The smallest inputs travel in-tree, not in the pack: models/stories260K (1.7 MB, tracked) and
# the generator of the real-width synthetic model, tools/bench/make_llama7b_shaped.py (numpy only;
# gpu_check.sh runs it there with a reduced layer count, so no weights have to travel).
#
# The pack must stay under 64 MiB (the device tool's limit on what travels, the tracked tree
# included): the script checks both and fails if either is over.  Rerunning replaces the pack.
set -euo pipefail
cd "$(dirname "$0")/../.."
pack=${1:-device-pack}
limit_bytes=$((64 * 1024 * 1024))

# The Debian packages, worked out with `apt-cache depends --no-recommends` from the libraries
# CMakeLists.txt asks pkg-config for (libconfig, libpcre2-8, libutf8proc, openblas, lapacke, check):
#   libconfig-dev -> libconfig9 (+ pkg-config: pkgconf below)
#   libpcre2-dev  -> libpcre2-8-0, -16-0, -32-0, libpcre2-posix3 (only -8 is used; the -dev
#                    package's .so links point at all four, so all four come)
#   libutf8proc-dev -> libutf8proc2 (tokenizer.json's NFC/NFKC normalizers)
#   check         -> libsubunit-dev -> libsubunit0 (check's .pc Requires libsubunit)
#   libopenblas-dev -> libopenblas0, libopenblas-pthread-dev -> libopenblas0-pthread
#                    -> libgfortran5 -> libquadmath0  (the pthread variant, as setup.sh gets)
#   liblapacke-dev -> liblapacke, libtmglib-dev -> libtmglib3 (liblapacke.so.3 NEEDs
#                    libtmglib.so.3, liblapack.so.3 and libblas.so.3, the last two from
#                    libopenblas0-pthread through Debian's alternatives, which gpu_check.sh
#                    recreates as links in the prefix)
#   pkgconf -> pkgconf-bin -> libpkgconf3
# Assumed present on any machine that has a C compiler (so not packed): libc6, libc6-dev,
# libgcc-s1, gcc-12-base (documentation only), mawk (check's checkmk script, unused).
debs=(libconfig-dev libconfig9
      libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3
      libutf8proc-dev libutf8proc2
      check libsubunit-dev libsubunit0
      libopenblas-dev libopenblas0 libopenblas-pthread-dev libopenblas0-pthread libgfortran5 libquadmath0
      liblapacke-dev liblapacke libtmglib-dev libtmglib3
      pkgconf pkgconf-bin libpkgconf3)
assumed_present="libc6 libc6-dev libc-dev libgcc-s1 gcc-12-base mawk"

# llm-compressor and what it imports beyond the GPU machine's image (KINDS.md's package list:
# torch 2.11, transformers 5.17, accelerate 1.15, numpy, pyarrow, pandas, tqdm, ... are there).
# llmcompressor 0.14.0.1 is the version tools/bench/peers.sh measured; it asks for torch
# 2.10-2.14 and transformers 5.15-5.17, which the image's versions satisfy.  The rest are the
# versions its Requires-Dist named on 2026-11-28 (compressed-tensors is pinned ==0.19.0 by it).
wheels=(llmcompressor==0.14.0.1 compressed-tensors==0.19.0 loguru==0.7.3 datasets==5.2.0 dill==0.4.1
        multiprocess==0.70.19 auto-round==0.15.1 pydantic==2.14.4 pydantic-core==2.50.5
        annotated-types==0.8.0 typing-inspection==0.4.5 typing-extensions==4.16.0)

die() { echo "pack.sh: $*" >&2; exit 1; }

# Each package's direct dependencies must be in the list or assumed present: a check that the
# list above still matches the archive (a new Debian point release can add a dependency).
# apt-cache prints an alternative as "|Depends: a" lines closed by a "Depends: b" line, and a
# virtual package (<libblas.so.3>) with its providers on the indented lines after it; a group is
# satisfied when any of its names or providers is packed or assumed present.
check_closure() {
  # One apt-cache call for all of them (each call reads the whole cache: a second or more); its
  # output starts each package's block with the package's name on a line of its own.
  apt-cache depends --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces --no-enhances \
      "${debs[@]}" 2>/dev/null | awk -v have=" ${debs[*]} $assumed_present " '
    function judge() {
      if (n && !ok) { printf "pack.sh: %s depends on one of%s, none packed or assumed present\n", pkg, names; bad = 1 }
      n = 0; ok = 0; names = ""; closing = 0
    }
    function add(name) {
      gsub(/[<>]/, "", name); n++; names = names " " name
      if (index(have, " " name " ")) ok = 1
    }
    /^[^ ]/ { judge(); pkg = $1; next }
    /^ *\|?Depends: / { if (closing) judge(); add($NF); closing = ($0 !~ /\|Depends:/); next }
    /^    [^ ]/ { add($1); next }
    END { judge(); exit bad }' >&2
}

command -v apt-get >/dev/null || die "apt-get is missing: the pack is made on a Debian machine"
tmp=$(mktemp -d "${pack%/}.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/debs" "$tmp/wheels"

echo "pack.sh: checking the package list against apt-cache" >&2
check_closure || die "the package list is incomplete (see above); add the packages to debs=() in $0"

echo "pack.sh: apt-get download ${#debs[@]} packages" >&2
# As root apt drops to the user _apt, who cannot write into a mktemp folder: download as root.
sandbox=()
[ "$(id -u)" = 0 ] && sandbox=(-o APT::Sandbox::User=root)
(cd "$tmp/debs" && apt-get -q "${sandbox[@]}" download "${debs[@]}" >/dev/null) ||
  die "apt-get download failed (no network, or stale lists: run apt-get update)"

wheel_note="not packed (PACK_WHEELS=0)"
if [ "${PACK_WHEELS:-1}" = 1 ]; then
  echo "pack.sh: pip download ${#wheels[@]} wheels for CPython 3.12, manylinux x86-64" >&2
  # --no-deps: the list above is the whole closure beyond the GPU machine's image; pip on this
  # machine could not resolve against that image anyway.
  if python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
       --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
       -d "$tmp/wheels" "${wheels[@]}" >/dev/null 2>"$tmp/pip.err"; then
    wheel_note="packed"
  else
    echo "pack.sh: the wheels could not be downloaded; the pack is made without them (the peer" \
         "timing will skip):" >&2
    tail -n 3 "$tmp/pip.err" >&2
    rm -rf "$tmp/wheels"/*
    wheel_note="download failed: $(tail -n 1 "$tmp/pip.err")"
  fi
fi
rm -f "$tmp/pip.err"

{
  echo "# device pack made by tools/device/pack.sh on $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "# source: $(. /etc/os-release && echo "$PRETTY_NAME"), git $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  echo "# wheels: $wheel_note"
  echo "# in-tree, not packed: models/stories260K, tools/bench/make_llama7b_shaped.py, data/"
  (cd "$tmp" && find debs wheels -type f -printf '%s %p\n' | sort -k2 | while read -r size file; do
     echo "$file $size $(sha256sum "$file" | cut -d' ' -f1)"; done)
} > "$tmp/MANIFEST.txt"

# The limit: the pack alone, and the pack with the tracked tree (both travel in one call).
pack_bytes=$(du -sb "$tmp" | cut -f1)
tree_bytes=$(git ls-files -z | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s + 0}')
echo "pack.sh: pack $((pack_bytes / 1024)) KiB, tracked tree $((tree_bytes / 1024)) KiB, limit $((limit_bytes / 1024)) KiB" >&2
[ "$pack_bytes" -lt "$limit_bytes" ] || die "the pack is over 64 MiB"
[ $((pack_bytes + tree_bytes)) -lt "$limit_bytes" ] ||
  die "the pack and the tracked tree together are over 64 MiB: the device tool would refuse them"

rm -rf "$pack"
mv "$tmp" "$pack"
trap - EXIT
echo "pack.sh: $pack ready ($(du -sh "$pack" | cut -f1)); on the GPU machine: tools/device/gpu_check.sh --pack $pack" >&2
