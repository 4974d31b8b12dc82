#!/usr/bin/env bash
# rotation_ablation.sh — which of model.rotate's rotations helps or hurts which RTN row on
# SmolLM2-135M-Instruct (issue 39): configs/smollm2-w4a4-rotated.cfg's calibration, evaluation
# windows and seed, its rotate group replaced by each case below, and two RTN variants, so that
# no calibration is needed and a case is one reference evaluation and two variant evaluations
# (a few minutes on 2 cores):
#   rtn-w3-g64  3-bit asymmetric weights in groups of 64, weight-only (configs/smollm2-awq.cfg's grid)
#   rtn-w4a4    4-bit symmetric weights per channel, 4-bit dynamic per-token inputs
# Cases (ROTATE group):
#   none         no rotation
#   r1           R1 = randomized Hadamard (9 x 9 random orthogonal (x) H_64), fused
#   r1-orth      R1 = a dense seeded random orthogonal 576 x 576, fused
#   r2           R2 = randomized Hadamard of each head's 64 values (v and o), fused
#   r4           R4 = online Hadamard on down_proj's input (its inverse fused into down_proj)
#   r1-r2        R1 + R2 (configs/smollm2-w4a4-rotated-r12.cfg)
#   r1-r2-r4     R1 + R2 + R4 (configs/smollm2-w4a4-rotated.cfg)
#   r1orth-r2    R1 dense orthogonal + R2 Hadamard
#   r1full-r2    R1 "full_hadamard" (every entry ±1/24: Paley's 36 x 36 (x) H_16) + R2 Hadamard
#   r1full-r2-r4 the same and R4
#
#   tools/bench/rotation_ablation.sh [OUT_DIR] [CASE ...]   (default build-bench/rotation-ablation, every case)
#
# Writes OUT/CASE.cfg, OUT/CASE.json, OUT/CASE.md (lmpress compare), then OUT/ablation.md: one
# row per case with each variant's KLD and ppl.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-$root/build-bench/rotation-ablation}
[ $# -gt 0 ] && shift
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(none r1 r1-orth r2 r4 r1-r2 r1-r2-r4 r1orth-r2 r1full-r2 r1full-r2-r4)
lmpress=${LMPRESS:-$root/build/lmpress}
src=$root/configs/smollm2-w4a4-rotated.cfg
mkdir -p "$out"
rotate_of() {
    case $1 in
        none) echo "" ;;
        r1) echo 'r1 = "hadamard";' ;;
        r1-orth) echo 'r1 = "orthogonal";' ;;
        r2) echo 'r2 = "hadamard";' ;;
        r4) echo 'r4 = true;' ;;
        r1-r2) echo 'r1 = "hadamard"; r2 = "hadamard";' ;;
        r1-r2-r4) echo 'r1 = "hadamard"; r2 = "hadamard"; r4 = true;' ;;
        r1orth-r2) echo 'r1 = "orthogonal"; r2 = "hadamard";' ;;
        r1full-r2) echo 'r1 = "full_hadamard"; r2 = "hadamard";' ;;
        r1full-r2-r4) echo 'r1 = "full_hadamard"; r2 = "hadamard"; r4 = true;' ;;
        *) echo "rotation_ablation.sh: unknown case '$1'" >&2; exit 2 ;;
    esac
}
for c in "${cases[@]}"; do
    rot=$(rotate_of "$c")
    cfg=$out/$c.cfg
    # the source config's model group with this case's rotate, its windows, and two RTN variants
    python3 - "$src" "$cfg" "$rot" "$root/configs" <<'EOF'
import re, sys
src, dst, rot, cfgdir = sys.argv[1:5]
text = open(src).read()
model = re.search(r'model = \{.*?\n\};\n', text, re.S).group(0)
path = re.search(r'path = "([^"]+)"', model).group(1)
rotate = f'\n  rotate = {{ {rot} seed = 0; }};' if rot else ''
body = text[text.index('backend = '):text.index('variants = (')]
body = body.replace('"../data/', f'"{cfgdir}/../data/')
open(dst, 'w').write(f'# written by tools/bench/rotation_ablation.sh from configs/smollm2-w4a4-rotated.cfg\n'
                      f'model = {{\n  path = "{cfgdir}/{path}";{rotate}\n}};\n\n{body}'
                      'variants = (\n  { name = "q4_1-dequant"; },\n'
                      '  { name = "rtn-w3-g64";\n'
                      '    pipeline = ( { strategy = "rtn"; params = { bits = 3; sym = false; granularity = "group"; group_size = 64; }; } ); },\n'
                      '  { name = "rtn-w4a4";\n'
                      '    pipeline = ( { strategy = "rtn"; params = { bits = 4; sym = true; granularity = "channel"; act = "dynamic_token"; act_bits = 4; }; } ); }\n'
                      ');\n')
EOF
    [ -f "$out/$c.json" ] && continue
    echo "+ $lmpress compare $cfg" >&2
    "$lmpress" compare "$cfg" --json "$out/$c.json.tmp" --md "$out/$c.md" > "$out/$c.log" 2>&1 ||
        { tail -n 20 "$out/$c.log" >&2; exit 1; }
    mv "$out/$c.json.tmp" "$out/$c.json"
done
python3 - "$out" "${cases[@]}" <<'EOF' > "$out/ablation.md"
import json, sys
out, cases = sys.argv[1], sys.argv[2:]
print("| rotation | rtn-w3-g64 kld | rtn-w3-g64 ppl | rtn-w4a4 kld | rtn-w4a4 ppl | reference ppl |")
print("|:---|---:|---:|---:|---:|---:|")
for c in cases:
    j = json.load(open(f"{out}/{c}.json"))
    ev = {v["name"]: v["eval"]["wiki.test.raw"] for v in j["variants"]}
    print(f"| {c} | {ev['rtn-w3-g64']['kld']:.5f} | {ev['rtn-w3-g64']['ppl']:.4f} | {ev['rtn-w4a4']['kld']:.5f} "
          f"| {ev['rtn-w4a4']['ppl']:.4f} | {ev['q4_1-dequant']['ppl']:.4f} |")
EOF
cat "$out/ablation.md"
