#!/usr/bin/env bash
# llamacpp_quantize.sh — make llama.cpp's own quantized baselines of a base F32 (or F16) GGUF:
# Q4_0, Q4_1 and Q8_0 by llama-quantize, and Q4_0, Q4_1 again with an importance matrix
# computed by llama-imatrix on calibration text. A benchmark helper for comparing lmpress with
# llama.cpp (measure the results with tools/bench/llamacpp_kld.sh): not part of the tests or CI.
# Build the tools first with tools/bench/llamacpp_build.sh.
#
#   tools/bench/llamacpp_quantize.sh [options] BASE.gguf CALIB_TEXT [OUT_DIR]
#
#   OUT_DIR       default build-llamacpp/quant
#   -c CTX        imatrix context size, default 512
#   --chunks N    imatrix: only the first N windows of CALIB_TEXT (default 100; 0 = all)
#   -t N          threads, default 2
#   --types "T.." plain types, default "Q4_0 Q4_1 Q8_0"
#   --imatrix-types "T.."   types made with the importance matrix, default "Q4_0 Q4_1"
#   --pure        pass --pure to llama-quantize (every weight matrix in the chosen type, the
#                 token embedding and output included),
#                 file names get "-pure". Without it llama.cpp's own mix applies: the output
#                 matrix (or the token embedding when it is tied, as in SmolLM2) gets Q6_K, or
#                 Q8_0 where its rows are not a multiple of 256 (SmolLM2: 576), and with an
#                 importance matrix Q4_0 puts the first n_layer/8 ffn_down at Q4_1 (SmolLM2: 3
#                 of 30); norms stay F32.
#   --bin DIR     where the tools are (default build-llamacpp/bin)
#
# What it runs (each command is printed; outputs that exist are kept, so reruns are cheap):
#   llama-imatrix -m BASE -f CALIB_TEXT -o OUT_DIR/STEM.imatrix-CALIB-cCTX-chunksN.gguf \
#                 -c CTX -t N [--chunks N]
#   llama-quantize [--pure] BASE OUT_DIR/STEM-Q4_0.gguf Q4_0 N           (and Q4_1, Q8_0)
#   llama-quantize [--pure] --imatrix IMATRIX BASE OUT_DIR/STEM-Q4_0-imat.gguf Q4_0 N  (and Q4_1)
# STEM is the base's file name without .gguf. Each tool's log is next to its output (.log).
# At the end it prints the NAME=FILE list to hand to llamacpp_kld.sh.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
ctx=512
chunks=100
threads=2
types="Q4_0 Q4_1 Q8_0"
imat_types="Q4_0 Q4_1"
pure=0
bin=$root/build-llamacpp/bin

die() { echo "llamacpp_quantize.sh: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

while [ $# -gt 0 ]; do
    case $1 in
        -c|--ctx-size) ctx=$2; shift 2 ;;
        --chunks) chunks=$2; shift 2 ;;
        -t|--threads) threads=$2; shift 2 ;;
        --types) types=$2; shift 2 ;;
        --imatrix-types) imat_types=$2; shift 2 ;;
        --pure) pure=1; shift ;;
        --bin) bin=$2; shift 2 ;;
        -h|--help) usage ;;
        --) shift; break ;;
        -*) die "unknown option $1 (see --help)" ;;
        *) break ;;
    esac
done
[ $# -ge 2 ] && [ $# -le 3 ] || usage
base=$1 calib=$2 out=${3:-$root/build-llamacpp/quant}
[ -f "$base" ] || die "no base model $base"
[ -f "$calib" ] || die "no calibration text $calib"
case $chunks in ''|*[!0-9]*) die "--chunks wants a number" ;; esac
for t in llama-quantize llama-imatrix; do
    [ -x "$bin/$t" ] || die "$bin/$t missing: run tools/bench/llamacpp_build.sh first (or pass --bin)"
done
mkdir -p "$out"
stem=$(basename "$base" .gguf)
qargs=()
suffix=
if [ "$pure" = 1 ]; then qargs=(--pure); suffix=-pure; fi

# Run a command that writes OUTPUT, unless OUTPUT exists; the log goes to OUTPUT.log.
# The command is printed with SHOWN (the final name) in place of OUTPUT.
make_file() {  # OUTPUT SHOWN COMMAND...
    local output=$1 shown=$2; shift 2
    if [ -s "$output" ]; then
        echo "have $output"
        return 0
    fi
    local a line="+"
    for a in "$@"; do [ "$a" = "$output" ] && a=$shown; line+=" $a"; done
    echo "$line"
    local t0=$SECONDS
    if ! "$@" >"$output.log" 2>&1; then
        tail -n 20 "$output.log" >&2
        rm -f "$output"
        die "failed, see $output.log"
    fi
    [ -s "$output" ] || die "the command wrote no $output (see $output.log)"
    echo "  $(( SECONDS - t0 )) s, $(du -h "$output" | cut -f1)"
}

pairs=()

# The importance matrix (only when some type wants it).
if [ -n "${imat_types// /}" ]; then
    n=$chunks; [ "$n" != 0 ] || n=all
    imatrix=$out/$stem.imatrix-$(basename "$calib")-c$ctx-chunks$n.gguf
    chunk_args=()
    [ "$chunks" = 0 ] || chunk_args=(--chunks "$chunks")
    make_file "$imatrix" "$imatrix" "$bin/llama-imatrix" -m "$base" -f "$calib" -o "$imatrix" \
        -c "$ctx" -t "$threads" "${chunk_args[@]}"
fi

# llama-quantize writes its output as it goes: write to a temporary name, then rename.
quantize() {  # NAME OUTPUT TYPE [--imatrix FILE]
    local name=$1 output=$2 type=$3; shift 3
    if [ ! -s "$output" ]; then
        make_file "$output.tmp" "$output" "$bin/llama-quantize" "${qargs[@]}" "$@" "$base" "$output.tmp" \
            "$type" "$threads"
        mv "$output.tmp" "$output"
        mv "$output.tmp.log" "$output.log"
    else
        echo "have $output"
    fi
    pairs+=("$name=$output")
}

for t in $types; do
    quantize "$t$suffix" "$out/$stem-$t$suffix.gguf" "$t"
done
for t in $imat_types; do
    quantize "$t-imat$suffix" "$out/$stem-$t-imat$suffix.gguf" "$t" --imatrix "$imatrix"
done

echo
echo "models (for tools/bench/llamacpp_kld.sh BASE TEXT NAME=FILE ...):"
printf '  %s\n' "${pairs[@]}"
