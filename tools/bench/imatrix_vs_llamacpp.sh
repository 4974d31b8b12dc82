#!/usr/bin/env bash
# imatrix_vs_llamacpp.sh — `lmpress imatrix` against llama.cpp's llama-imatrix on one model and
# text with the same chunking, then llama-quantize with each file: are the importance matrices the
# same, and does llama-quantize choose the same scales with ours as with llama-imatrix's?  A
# benchmark (docs/imatrix.md has its figures), not part of the tests or CI.  Build the llama.cpp
# tools first with tools/bench/llamacpp_build.sh.
#
#   tools/bench/imatrix_vs_llamacpp.sh [options] MODEL.gguf TEXT [OUT_DIR]
#
#   OUT_DIR       default build-llamacpp/imatrix-vs; outputs that exist there are kept
#   -c CTX        chunk size (llama-imatrix -c, lmpress imatrix -c), default 512
#   --chunks N    the first N chunks of TEXT, default 10
#   -t N          threads for both tools, default 2
#   --type T      llama-quantize's type, default Q4_K_M
#   --bin DIR     where the llama.cpp tools are (default build-llamacpp/bin)
#   --lmpress P   the lmpress binary (default build/lmpress)
#   --llama-opts "O.."  extra options for llama-imatrix, default "-nr" (no weight repacking: the
#                 native build's AMX / repacked CPU kernels died with Illegal instruction on this
#                 machine kind; the plain kernels give llama.cpp's own products); "" for none
#   --kld TEXT    also measure each quantized file against MODEL on TEXT with
#                 lmpress eval Q --kl-divergence-base MODEL --text TEXT --seq-len CTX
#                 --max-windows W (W: --kld-windows, default 8)
#
# What it runs (each command is printed; the logs are next to the outputs):
#   llama-imatrix -m MODEL -f TEXT -c CTX --chunks N -t T -nr -o OUT/llama.imatrix.gguf
#   lmpress imatrix MODEL --calib TEXT -c CTX --chunks N --threads T -o OUT/lmpress.imatrix.gguf
#   imatrix_compare.py imatrix OUT/lmpress.imatrix.gguf OUT/llama.imatrix.gguf
#   llama-quantize --allow-requantize [--imatrix F] MODEL OUT/{none,llama,lmpress}.TYPE.gguf TYPE T
#   imatrix_compare.py quant OUT/lmpress.TYPE.gguf OUT/llama.TYPE.gguf   (and none vs llama)
# Chunking: both tokenize the file (one trailing newline dropped) with BOS when the model's
# tokenizer adds one, cut floor(n / CTX) chunks, replace each chunk's first token by BOS (when it
# adds one), and sum x^2 over every token of every chunk.  What still differs is the arithmetic:
# llama.cpp's forward multiplies the model's quantized weights (Q4_1 for the bundled SmolLM2) with
# activations it quantizes itself (Q8_1 on the CPU) and keeps the KV cache in F16; lmpress runs the
# dequantized weights in F32 throughout.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
ctx=512
chunks=10
threads=2
type=Q4_K_M
bin=$root/build-llamacpp/bin
lmpress=$root/build/lmpress
kld_text=
kld_windows=8
llama_opts=-nr

die() { echo "imatrix_vs_llamacpp.sh: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

while [ $# -gt 0 ]; do
    case $1 in
        -c|--ctx-size) ctx=$2; shift 2 ;;
        --chunks) chunks=$2; shift 2 ;;
        -t|--threads) threads=$2; shift 2 ;;
        --type) type=$2; shift 2 ;;
        --bin) bin=$2; shift 2 ;;
        --lmpress) lmpress=$2; shift 2 ;;
        --kld) kld_text=$2; shift 2 ;;
        --llama-opts) llama_opts=$2; shift 2 ;;
        --kld-windows) kld_windows=$2; shift 2 ;;
        -h|--help) usage ;;
        --) shift; break ;;
        -*) die "unknown option $1 (see --help)" ;;
        *) break ;;
    esac
done
[ $# -ge 2 ] && [ $# -le 3 ] || usage
model=$1 text=$2 out=${3:-$root/build-llamacpp/imatrix-vs}
[ -f "$model" ] || die "no model $model"
[ -f "$text" ] || die "no text $text"
for t in llama-quantize llama-imatrix; do
    [ -x "$bin/$t" ] || die "$bin/$t missing: run tools/bench/llamacpp_build.sh first (or pass --bin)"
done
[ -x "$lmpress" ] || die "$lmpress missing: build lmpress first (tools/setup.sh)"
pydeps=$root/build/pydeps
PYTHONPATH=$pydeps /usr/bin/python3 -c 'import gguf, numpy' 2>/dev/null ||
    die "the gguf package is missing from $pydeps (tools/test.sh unpacks it there)"
mkdir -p "$out"

# Prints and runs COMMAND, its output into LOG; the seconds it took into $took.  A command
# whose OUTPUT exists already is not run again (reruns are cheap; delete OUT_DIR to redo).
timed() {  # OUTPUT LOG COMMAND...
    local output=$1 log=$2; shift 2
    if [ -s "$output" ]; then echo "have $output"; took="(kept)"; return 0; fi
    echo "+ $*"
    local t0=$SECONDS
    "$@" >"$log" 2>&1 || { tail -20 "$log" >&2; die "failed (log: $log)"; }
    took=$((SECONDS - t0))
}

# shellcheck disable=SC2086  # llama_opts: words
timed "$out/llama.imatrix.gguf" "$out/llama.imatrix.log" "$bin/llama-imatrix" -m "$model" -f "$text" -c "$ctx" --chunks "$chunks" \
    -t "$threads" $llama_opts -o "$out/llama.imatrix.gguf"
echo "  llama-imatrix: ${took} s; $(grep -o 'Final estimate: PPL = [0-9.]*' "$out/llama.imatrix.log" || true)"
timed "$out/lmpress.imatrix.gguf" "$out/lmpress.imatrix.log" "$lmpress" --threads "$threads" imatrix "$model" --calib "$text" -c "$ctx" \
    --chunks "$chunks" -o "$out/lmpress.imatrix.gguf"
echo "  lmpress imatrix: ${took} s; $(grep -o 'second-half ppl [0-9.]*' "$out/lmpress.imatrix.log" || true)"

echo "== the two importance matrices (lmpress's against llama-imatrix's) =="
PYTHONPATH=$pydeps /usr/bin/python3 "$root/tools/bench/imatrix_compare.py" imatrix \
    "$out/lmpress.imatrix.gguf" "$out/llama.imatrix.gguf"

for who in none llama lmpress; do
    args=()
    [ "$who" = none ] || args=(--imatrix "$out/$who.imatrix.gguf")
    timed "$out/$who.$type.gguf" "$out/$who.$type.log" "$bin/llama-quantize" --allow-requantize "${args[@]}" "$model" \
        "$out/$who.$type.gguf" "$type" "$threads"
done
echo "== llama-quantize $type with lmpress's imatrix against with llama-imatrix's =="
PYTHONPATH=$pydeps /usr/bin/python3 "$root/tools/bench/imatrix_compare.py" quant \
    "$out/lmpress.$type.gguf" "$out/llama.$type.gguf"
echo "== for scale: $type without an imatrix against with llama-imatrix's =="
PYTHONPATH=$pydeps /usr/bin/python3 "$root/tools/bench/imatrix_compare.py" quant \
    "$out/none.$type.gguf" "$out/llama.$type.gguf"
ls -l "$out"/*."$type".gguf
if [ -n "$kld_text" ]; then
    echo "== each $type file against $model on $kld_text ($kld_windows windows of $ctx) =="
    for who in none llama lmpress; do
        timed "$out/$who.$type.kld.json" "$out/$who.$type.kld.log" sh -c "\"\$0\" --threads $threads eval \"\$1\" \
            --kl-divergence-base \"\$2\" --text \"\$3\" --seq-len $ctx --max-windows $kld_windows --json > \"\$4.tmp\" && mv \"\$4.tmp\" \"\$4\"" \
            "$lmpress" "$out/$who.$type.gguf" "$model" "$kld_text" "$out/$who.$type.kld.json"
        PYTHONPATH=$pydeps /usr/bin/python3 "$root/tools/bench/imatrix_compare.py" kld "$who" "$out/$who.$type.kld.json"
    done
fi
