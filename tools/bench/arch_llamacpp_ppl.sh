#!/usr/bin/env bash
# arch_llamacpp_ppl.sh — lmpress's GGUF exports of every architecture fixture
# (tests/fixtures/arch; the mixtures of experts mixtral, qwen2moe and qwen3moe when named) run by
# llama.cpp's own llama-perplexity, beside lmpress's perplexity of
# the same file on the same tokens.  A benchmark, not a test (issue 33, point 6): a few minutes on
# 2 cores once llama.cpp is built.  docs/architectures.md, "llama.cpp on lmpress's exports", has
# its output.
#
#   tools/bench/arch_llamacpp_ppl.sh [--ctx N] [OUT_DIR] [FIXTURE ...]   (default 256, build-bench/arch-ppl)
#
# For each fixture:
#   1. lmpress compare on a generated config: the unmodified model ("f32") and GPTQ W4 on GGUF's
#      Q4_0 blocks ("gptq-q4_0", calibrated on 8 windows of the text), each exported with
#      --output-dir as OUT/NAME/<variant>.gguf.  The source is the fixture's Hugging Face folder
#      (hf5/; SentencePiece families take their vocabulary from the converter's model.gguf),
#      but Mistral's: its GGUF export from hf5/ is refused (llama.cpp's llama runs no sliding
#      window), so it starts from the converter's model.gguf, which means full attention.
#   2. llama-perplexity -m FILE -f TEXT -c N --chunks 1: one chunk of N tokens (the fixtures'
#      context is 256), its second half scored.  One chunk, because llama-perplexity puts BOS
#      at the start of every chunk while lmpress's windows are cut from one tokenization; the
#      first window is the same tokens in both.
#   3. lmpress eval FILE --text TEXT --seq-len N --max-windows 1 --score-second-half: the same
#      window, the same half scored.
#   4. For the GPTQ file, a control: llama-quantize --allow-requantize FILE F32 (llama.cpp's own
#      dequantization of the Q4_0 blocks) through llama-perplexity again.
# Prints a Markdown table: fixture, variant, lmpress ppl, llama.cpp ppl, relative difference.
# llama-perplexity sometimes exits 0 without its last lines (its asynchronous log loses them at
# exit): a run without "Final estimate" is repeated, up to five times.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
ctx=256
if [ "${1:-}" = --ctx ]; then ctx=$2; shift 2; fi
out=${1:-$root/build-bench/arch-ppl}
[ $# -gt 0 ] && shift
fixtures=("$@")
[ ${#fixtures[@]} -gt 0 ] || fixtures=(llama3 qwen2 qwen2-yarn qwen3 mistral gemma gemma2 gemma3 phi3 glm glm4 ernie4_5 gpt2)
bin=${LLAMACPP_BIN:-$root/build-llamacpp/bin}
lmpress=${LMPRESS:-$root/build/lmpress}
text=$root/models/stories260K/tinystories-synth-eval.txt
fix=$root/tests/fixtures/arch
threads=${THREADS:-2}
# llama-perplexity's options (LLAMACPP_PPL_ARGS replaces them):
#   --no-repack: llama.cpp's native build (GGML_NATIVE) repacks Q4_0 / Q8_0 weights for its
#     AVX-512 / AMX kernels, which die with an illegal instruction on a VM that advertises AMX
#     without enabling it; the plain kernels compute the same dot products.
#   -fa off -ctk f32 -ctv f32: no flash attention and an f32 KV cache, so that llama.cpp's
#     attention is f32 as lmpress's (its defaults, flash attention with f16 K and V, move the
#     perplexity by about 1e-4 relative here).
ppl_args=${LLAMACPP_PPL_ARGS---no-repack -fa off -ctk f32 -ctv f32}
mkdir -p "$out"
run() { echo "+ $*" >&2; "$@"; }
[ -x "$bin/llama-perplexity" ] || { echo "arch_llamacpp_ppl: no $bin/llama-perplexity (tools/bench/llamacpp_build.sh)" >&2; exit 1; }

# A small text: the first 24 KB of the synthetic TinyStories evaluation text (more than 2 x N
# tokens for every fixture's vocabulary, which llama-perplexity requires).
small=$out/text.txt
head -c 24000 "$text" > "$small"

# llama-perplexity on FILE (retried when its log lost the result, see above); prints the ppl or "".
llamacpp_ppl() {
    local g=$1 log=$2 lc=""
    for attempt in 1 2 3 4 5; do
        run "$bin/llama-perplexity" -m "$g" -f "$small" -c "$ctx" --chunks 1 -t "$threads" $ppl_args > "$log" 2>&1 || break
        lc=$(sed -n 's/.*Final estimate: PPL = \([0-9.eE+-]*\).*/\1/p' "$log")
        [ -n "$lc" ] && break
    done
    echo "$lc"
}
rel() { python3 -c "print(f'{abs($1 - $2) / $2:.2e}')"; }

rows=()
for f in "${fixtures[@]}"; do
    src=$fix/$f/hf5 tok=""
    case $f in mistral) src=$fix/$f/model.gguf ;; esac
    case $f in gemma|gemma2|gemma3|phi3|ernie4_5|mixtral) tok="tokenizer = \"$fix/$f/model.gguf\";" ;; esac
    cfg=$out/$f.cfg
    cat > "$cfg" <<EOF
# made by tools/bench/arch_llamacpp_ppl.sh
model = { path = "$src"; $tok };
backend = { name = "cpu"; };
calibration = { text = "$small"; samples = 8; seq_len = 64; };
eval = { texts = [ "$small" ]; seq_len = 64; max_windows = 4; };
seed = 1;
variants = (
  { name = "f32"; },
  { name = "gptq-q4_0"; pipeline = ( { strategy = "gptq"; params = { format = "q4_0"; }; } ); }
);
EOF
    [ -f "$out/$f/gptq-q4_0.gguf" ] || run "$lmpress" --quiet compare "$cfg" --output-dir "$out/$f" > "$out/$f.compare.txt"
    for v in f32 gptq-q4_0; do
        g=$out/$f/$v.gguf
        lc=$(llamacpp_ppl "$g" "$out/$f-$v.llamacpp.log")
        lm=$(run "$lmpress" --quiet --threads "$threads" eval "$g" --text "$small" --seq-len "$ctx" --max-windows 1 \
                 --score-second-half --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["ppl"])')
        # the control for a quantized file: llama-quantize's own F32 dequantization of it, in
        # llama.cpp (its Q4_0 matmuls quantize the activations to Q8_0 blocks; F32 ones do not)
        deq="-" deq_rel="-"
        if [ "$v" != f32 ]; then
            d=$out/$f/$v-dequantized-f32.gguf
            [ -f "$d" ] || run "$bin/llama-quantize" --allow-requantize "$g" "$d" F32 > "$out/$f-$v.quantize.log" 2>&1
            dq=$(llamacpp_ppl "$d" "$out/$f-$v-f32.llamacpp.log")
            [ -n "$dq" ] && deq=$(printf %.4f "$dq") deq_rel=$(rel "$dq" "$lm")
        fi
        if [ -z "$lc" ]; then
            echo "arch_llamacpp_ppl: llama-perplexity failed on $g (see $out/$f-$v.llamacpp.log)" >&2
            rows+=("| $f | $v | $(printf %.4f "$lm") | failed | - | $deq | $deq_rel |")
            continue
        fi
        rows+=("| $f | $v | $(printf %.4f "$lm") | $(printf %.4f "$lc") | $(rel "$lc" "$lm") | $deq | $deq_rel |")
    done
done
echo
echo "one chunk of $ctx tokens of $(basename "$text") (first 24 KB), second half scored; llama-perplexity $ppl_args"
echo
echo "| fixture | variant | lmpress ppl | llama.cpp ppl | relative difference | llama.cpp on llama-quantize's F32 of the file | relative difference |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: |"
printf '%s\n' "${rows[@]}"
