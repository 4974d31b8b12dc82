#!/usr/bin/env bash
# quality_vs_llamacpp.sh — lmpress's GGUF files against llama-quantize's at the same types,
# measured twice: by lmpress's compare (configs/smollm2-vs-llamacpp.cfg, llama.cpp's files as
# external variants in the same table) and by llama.cpp itself (llama-perplexity
# --kl-divergence against the F32 model).  A benchmark, not a test: about an hour on 2 cores.
# docs/results.md "Quality at equal size" has its output.
#
#   tools/bench/quality_vs_llamacpp.sh [--chunks N] [OUT_DIR]     (default 40, build-bench/)
#
# Steps (each command is printed; what exists is kept, so a rerun is cheap):
#   1. llama.cpp's tools from the llama-cpp-python sdist (tools/bench/llamacpp_build.sh);
#   2. lmpress's F32 export of the base (the f32 variant), the file llama.cpp starts from;
#   3. llama-imatrix on the calibration lmpress uses (the first 16 windows of 512 tokens of
#      WikiText-2 validation), then llama-quantize from the F32 file: Q4_0, IQ4_NL and Q5_0 with
#      the importance matrix, Q8_0 (which takes none), each with --pure and the token embedding
#      kept F32, so that every file differs from lmpress's only in its block linears; and
#      llama.cpp's Q4_K_M and Q3_K_M recipes with the matrix (the embedding kept F32);
#   4. lmpress compare of the whole config, every lmpress variant written as GGUF;
#   5. tools/bench/llamacpp_kld.sh: every file against the F32 base on the first N windows of
#      512 tokens of WikiText-2 test.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
chunks=40
if [ "${1:-}" = --chunks ]; then chunks=$2; shift 2; fi
out=${1:-$root/build-bench}
dir=$out/vs-llamacpp
bin=$root/build-llamacpp/bin
lmpress=${LMPRESS:-$root/build/lmpress}
cfg=$root/configs/smollm2-vs-llamacpp.cfg
mkdir -p "$dir"
run() { echo "+ $*" >&2; "$@"; }

[ -x "$bin/llama-perplexity" ] || run "$root/tools/bench/llamacpp_build.sh"
base=$dir/f32.gguf
# (from configs/smollm2-gguf.cfg, the same model: this config's external variants are not made yet)
[ -f "$base" ] || run "$lmpress" --quiet compare "$root/configs/smollm2-gguf.cfg" --variant f32 --output-dir "$dir"
imat=$dir/imatrix-wiki.valid-c512-chunks16.gguf
[ -f "$imat" ] || run "$bin/llama-imatrix" -m "$base" -f "$root/data/wikitext-2/wiki.valid.tokens" -c 512 --chunks 16 \
    -t 2 -o "$imat" > "$dir/imatrix.log" 2>&1
quant() { # NAME TYPE [llama-quantize options]
    local name=$1 type=$2; shift 2
    [ -f "$dir/$name.gguf" ] || run "$bin/llama-quantize" --pure --token-embedding-type f32 "$@" "$base" \
        "$dir/$name.gguf" "$type" 2 > "$dir/$name.log" 2>&1
}
for t in Q4_0 IQ4_NL Q5_0; do quant "llama-$t-imat" $t --imatrix "$imat"; done
quant llama-Q8_0 Q8_0
# llama.cpp's own _M recipes (not --pure: its per-tensor mix, the token embedding kept F32)
for t in Q4_K_M Q3_K_M; do
    [ -f "$dir/llama-$t-imat.gguf" ] || run "$bin/llama-quantize" --token-embedding-type f32 --imatrix "$imat" "$base" \
        "$dir/llama-$t-imat.gguf" $t 2 > "$dir/llama-$t-imat.log" 2>&1
done
# every variant that GGUF can hold, written; the 3-bit int grids (no GGUF type) only measured
[ -f "$dir/compare.json" ] || run "$lmpress" compare "$cfg" --variant '[!g]*' --variant 'gptq-[!i]*' \
    --variant 'gptq-iq4*' --output-dir "$dir" --json "$dir/compare.json" --md "$dir/compare.md"
[ -f "$dir/compare-3bit.json" ] || run "$lmpress" compare "$cfg" --variant 'gptq-int3-*' \
    --json "$dir/compare-3bit.json" --md "$dir/compare-3bit.md"
models=()
# (gptq-int3-g32 is left out: GGUF has no 3-bit type for rows of 576, so its file holds F32 weights)
for v in rtn-q4_0 rtn-q4_0-imp rtn-q4_0-imatrix gptq-q4_0-imp rtn-iq4_nl-imp gptq-iq4_nl-imp gptq-iq4_nl-imatrix \
    gptq-q5_0-imp gptq-mix-imp gptq-Q4_K_M-imp gptq-Q3_K_M-imp rtn-q8_0 gptq-q8_0; do
    models+=("lmpress-$v=$dir/$v.gguf")
done
for q in Q4_0-imat IQ4_NL-imat Q5_0-imat Q4_K_M-imat Q3_K_M-imat Q8_0; do models+=("llama-quantize-$q=$dir/llama-$q.gguf"); done
run "$root/tools/bench/llamacpp_kld.sh" --chunks "$chunks" --out "$dir/kld" --md "$dir/kld.md" \
    "$base" "$root/data/wikitext-2/wiki.test.raw" "${models[@]}"
