#!/usr/bin/env bash
# smollm2_vs_llamacpp.sh — lmpress's GGUF files against llama-quantize's, measured by llama.cpp
# itself (llama-perplexity --kl-divergence against the F32 model).  A benchmark, not a test:
# about an hour on 2 cores.  docs/results.md "lmpress's GGUF files in llama.cpp" has its output.
#
#   tools/bench/smollm2_vs_llamacpp.sh [--chunks N] [OUT_DIR]     (default 40, build-bench/)
#
# Steps (each command is printed; what exists is kept, so a rerun is cheap):
#   1. llama.cpp's tools from the llama-cpp-python sdist (tools/bench/llamacpp_build.sh);
#   2. lmpress compare configs/smollm2-gguf.cfg --output-dir OUT/smollm2-gguf: the F32 base, RTN
#      and GPTQ on q4_0 / q4_1, each written as GGUF;
#   3. llama-imatrix on the calibration lmpress used (the first 64 windows of 512 tokens of
#      WikiText-2 validation), then llama-quantize from the same F32 file: Q4_0 and Q4_1, plain
#      and with the importance matrix, with --pure and the token embedding kept F32, so that
#      every file differs from lmpress's only in its block linears; and llama.cpp's default
#      recipe with the matrix (its own embedding type and ffn_down mix) for reference;
#   4. tools/bench/llamacpp_kld.sh: every file against the F32 base on the first N windows of
#      512 tokens of WikiText-2 test.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
chunks=40
if [ "${1:-}" = --chunks ]; then chunks=$2; shift 2; fi
out=${1:-$root/build-bench}
bin=$root/build-llamacpp/bin
lmpress=${LMPRESS:-$root/build/lmpress}
mkdir -p "$out/quant"
run() { echo "+ $*" >&2; "$@"; }

[ -x "$bin/llama-perplexity" ] || run "$root/tools/bench/llamacpp_build.sh"
[ -f "$out/smollm2-gguf/gptq-q4_0-act.gguf" ] ||
    run "$lmpress" compare "$root/configs/smollm2-gguf.cfg" --variant f32 --variant 'rtn-q4_*' \
        --variant 'gptq-q4_*' --output-dir "$out/smollm2-gguf" --json "$out/smollm2-gguf.json" --md "$out/smollm2-gguf.md"
base=$out/smollm2-gguf/f32.gguf
imat=$out/quant/imatrix-wiki.valid-c512-chunks64.gguf
[ -f "$imat" ] || run "$bin/llama-imatrix" -m "$base" -f "$root/data/wikitext-2/wiki.valid.tokens" -c 512 --chunks 64 \
    -t 2 -o "$imat" > "$out/quant/imatrix.log" 2>&1
quant() { # NAME TYPE [llama-quantize options]
    local name=$1 type=$2; shift 2
    [ -f "$out/quant/$name.gguf" ] || run "$bin/llama-quantize" "$@" "$base" "$out/quant/$name.gguf" "$type" 2 \
        > "$out/quant/$name.log" 2>&1
}
for t in Q4_0 Q4_1; do
    quant "llama-$t" $t --pure --token-embedding-type f32
    quant "llama-$t-imat" $t --pure --token-embedding-type f32 --imatrix "$imat"
done
quant llama-Q4_0-imat-default Q4_0 --imatrix "$imat"
models=()
for v in rtn-q4_0 gptq-q4_0 gptq-q4_0-act rtn-q4_1 gptq-q4_1; do models+=("lmpress-$v=$out/smollm2-gguf/$v.gguf"); done
for q in Q4_0 Q4_0-imat Q4_0-imat-default Q4_1 Q4_1-imat; do models+=("llama-quantize-$q=$out/quant/llama-$q.gguf"); done
run "$root/tools/bench/llamacpp_kld.sh" --chunks "$chunks" --out "$out/kld" --md "$out/smollm2-vs-llamacpp.md" \
    "$base" "$root/data/wikitext-2/wiki.test.raw" "${models[@]}"
