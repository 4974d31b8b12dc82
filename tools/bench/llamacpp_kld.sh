#!/usr/bin/env bash
# llamacpp_kld.sh — measure GGUF models against a base GGUF with llama.cpp's own KL divergence
# (llama-perplexity --kl-divergence), one markdown table row per model. A benchmark helper for
# comparing lmpress with llama.cpp's quantizers: not part of the tests or CI.
# Build the tools first with tools/bench/llamacpp_build.sh.
#
#   tools/bench/llamacpp_kld.sh [options] BASE.gguf TEXT NAME=FILE.gguf [NAME=FILE.gguf ...]
#
#   -c CTX        context (window) size, default 512
#   --chunks N    use only the first N windows of TEXT (default, or 0: all of it)
#   -t N          threads, default 2
#   --bin DIR     where llama-perplexity is (default build-llamacpp/bin)
#   --out DIR     logits, logs and tables (default build-llamacpp/kld)
#   --logits F    base logits file (default: in --out, named after base, text, ctx and chunks)
#   --md FILE     also write the table to FILE
#   --force       rerun models whose log is already there
#
# What it runs (printed as it goes):
#   1. once per base+text+ctx+chunks (kept in --out and reused; the file is large: about
#      2 bytes x vocabulary x CTX/2 per window, 25 MB per 512-token window for a 49k vocabulary):
#        llama-perplexity -m BASE -f TEXT -c CTX -t N [--chunks N] --kl-divergence-base LOGITS
#   2. for every NAME=FILE (the tokens come from LOGITS, so no -f):
#        llama-perplexity -m FILE -c CTX -t N --kl-divergence-base LOGITS --kl-divergence
#      Each run's log is kept in --out (NAME.<key>.<model key>.log, the model key from the
#      model's path, size and modification time) and reused unless --force or the logits are
#      newer than it.
#
# llama-perplexity scores the second half of every CTX window only (CTX/2 - 1 tokens each: the
# first half is context), so its PPL is not the same number as a full-window perplexity.
#
# Columns. The three sizes come from the GGUF header (read by a few lines of python3 below,
# no packages needed; tensor bytes from each tensor's type and shape):
#   blk b/w    bits per weight of the 2-D tensors of the blocks (blk.N.*: attention and MLP
#              linears), the quantity lmpress's bits/w column counts (docs/evaluation.md)
#   all b/w    all tensor bytes x 8 / all parameters (embeddings and norms included): what
#              llama.cpp itself prints as "file size = ... MiB (x BPW)" when it loads a model
#   file b/w   GGUF file size x 8 / all parameters (header and tokenizer included)
# and the rest as llama-perplexity prints them (tools/perplexity/perplexity.cpp, kl_divergence()):
#   PPL(Q)     "Mean PPL(Q)"; ratio "Mean PPL(Q)/PPL(base)"
#   KLD        "Mean KLD" ± its uncertainty; 99.9 % / median KLD: percentiles over tokens
#   RMS Δp     "RMS Δp" (probability of the right token, percent)
#   same top   "Same top p": tokens whose argmax agrees with the base, percent
#   time s     wall time of that llama-perplexity run
#
# Floors to read the numbers against (SmolLM2-135M, -c 512, 20 chunks):
#   - the base against its own logits file gives PPL ratio 1.0010, KLD 0.000000 and same top
#     99.98 %, not exactly 1 and 100 %: the file stores log-probabilities as 16-bit integers, so
#     "Mean PPL(base)" (from the file) is 0.1 % below the base run's own "Final estimate".
#   - llama.cpp's CPU matmuls with quantized weights quantize the activations to 8 bits too
#     (Q8_0 / Q8_1 / Q8_K), so weights identical to the base's still give KLD 0.0029 (SmolLM2's
#     Q4_1 file against its own dequantization to F32). lmpress's weight-only variants run
#     fake-quantized weights in f32 (docs/design.md), without that floor.
#
# Cost: wiki.test.raw is 592 windows of 512 SmolLM2 tokens; the logits file is then 14 GB.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
ctx=512
chunks=
threads=2
bin=$root/build-llamacpp/bin
out=$root/build-llamacpp/kld
logits=
md=
force=0

die() { echo "llamacpp_kld.sh: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

while [ $# -gt 0 ]; do
    case $1 in
        -c|--ctx-size) ctx=$2; shift 2 ;;
        --chunks) chunks=$2; shift 2 ;;
        -t|--threads) threads=$2; shift 2 ;;
        --bin) bin=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --logits) logits=$2; shift 2 ;;
        --md) md=$2; shift 2 ;;
        --force) force=1; shift ;;
        -h|--help) usage ;;
        --) shift; break ;;
        -*) die "unknown option $1 (see --help)" ;;
        *) break ;;
    esac
done
[ $# -ge 3 ] || usage
base=$1 text=$2
shift 2
[ -f "$base" ] || die "no base model $base"
[ -f "$text" ] || die "no text $text"
ppl=$bin/llama-perplexity
[ -x "$ppl" ] || die "$ppl missing: run tools/bench/llamacpp_build.sh first (or pass --bin)"
case $ctx in ''|*[!0-9]*) die "-c wants a number" ;; esac
case $chunks in *[!0-9]*) die "--chunks wants a number" ;; esac
[ "$chunks" != 0 ] || chunks=
for pair in "$@"; do
    case $pair in *=*) ;; *) die "expected NAME=FILE.gguf, got $pair" ;; esac
    [ -f "${pair#*=}" ] || die "no model ${pair#*=} (for ${pair%%=*})"
done
mkdir -p "$out"

# Time a command (wall seconds into $elapsed) with its output into a log file; on failure
# remove the file REMOVE (a partial logits file) and stop.
elapsed=0
timed() {  # LOG REMOVE COMMAND...
    local log=$1 remove=$2; shift 2
    echo "+ $*" | tee "$log.cmd"
    local t0 t1 rc=0
    t0=$(date +%s.%N)
    "$@" >"$log.tmp" 2>&1 || rc=$?
    if [ "$rc" != 0 ]; then
        tail -n 20 "$log.tmp" >&2
        [ -z "$remove" ] || rm -f "$remove"
        die "llama-perplexity failed (exit status $rc), see $log.tmp"
    fi
    t1=$(date +%s.%N)
    elapsed=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    echo "# wall time: $elapsed s" >>"$log.tmp"
    mv "$log.tmp" "$log"
}

# The cache key: the base and the text (path, size, modification time), ctx and chunks.
fid() { printf '%s:%s:%s' "$(realpath "$1")" "$(stat -c %s "$1")" "$(stat -c %Y "$1")"; }
key=$(printf '%s|%s|%s|%s' "$(fid "$base")" "$(fid "$text")" "$ctx" "${chunks:-all}" |
      sha1sum | cut -c1-10)
stem="$(basename "$base" .gguf).$(basename "$text").c$ctx.chunks${chunks:-all}.$key"
[ -n "$logits" ] || logits=$out/$stem.logits
chunk_args=()
[ -z "$chunks" ] || chunk_args=(--chunks "$chunks")

# 1. The base's logits.
base_log=$out/$stem.base.log
if [ -s "$logits" ] && [ -f "$base_log" ]; then
    echo "base logits: $logits (cached)"
else
    rm -f "$logits"
    timed "$base_log" "$logits" "$ppl" -m "$base" -f "$text" -c "$ctx" -t "$threads" "${chunk_args[@]}" \
        --kl-divergence-base "$logits"
    [ -s "$logits" ] || die "llama-perplexity wrote no $logits (see $base_log)"
    echo "base: $elapsed s, logits $(du -h "$logits" | cut -f1)"
fi

# Bits per weight from a GGUF header: prints "BLK ALL FILE" (see the columns above).
gguf_bits() {
    python3 - "$1" <<'PY'
import os, struct, sys
# ggml_type -> (elements per block, bytes per block), from ggml/src/ggml.c's type_traits
T = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24), 8: (32, 34),
     9: (32, 36), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176), 14: (256, 210),
     15: (256, 292), 16: (256, 66), 17: (256, 74), 18: (256, 98), 19: (256, 50), 20: (32, 18),
     21: (256, 110), 22: (256, 82), 23: (256, 136), 24: (1, 1), 25: (1, 2), 26: (1, 4),
     27: (1, 8), 28: (1, 8), 29: (256, 56), 30: (1, 2), 34: (256, 54), 35: (256, 66),
     39: (32, 17)}
f = open(sys.argv[1], "rb")
def rd(fmt):
    return struct.unpack("<" + fmt, f.read(struct.calcsize("<" + fmt)))[0]
def rstr():
    return f.read(rd("Q")).decode("utf-8", "replace")
SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
def rval(t):
    if t == 8:
        return rstr()
    if t == 9:
        et, n = rd("I"), rd("Q")
        if et in SCALAR:
            f.seek(n * struct.calcsize("<" + SCALAR[et]), 1)
        else:
            for _ in range(n):
                rval(et)
        return None
    return rd(SCALAR[t])
if f.read(4) != b"GGUF":
    sys.exit("not a GGUF file")
rd("I")
n_t, n_kv = rd("Q"), rd("Q")
for _ in range(n_kv):
    k = rstr()
    v = rval(rd("I"))
tensors = []
for _ in range(n_t):
    name = rstr()
    dims = [rd("Q") for _ in range(rd("I"))]
    typ, off = rd("I"), rd("Q")
    tensors.append((name, dims, typ, off))
ne_all = nb_all = ne_blk = nb_blk = 0
for name, dims, typ, off in tensors:
    ne = 1
    for d in dims:
        ne *= d
    if typ not in T:
        sys.exit("unknown ggml type %d (tensor %s)" % (typ, name))
    bs, ts = T[typ]
    nb = ne // bs * ts
    ne_all += ne; nb_all += nb
    if name.startswith("blk.") and len([d for d in dims if d > 1]) == 2:
        ne_blk += ne; nb_blk += nb
print("%.3f %.3f %.3f" % (8.0 * nb_blk / max(ne_blk, 1), 8.0 * nb_all / ne_all,
                          8.0 * os.path.getsize(sys.argv[1]) / ne_all))
PY
}

# Pull the numbers out of one log; prints a markdown row (without the time column).
row() {  # NAME MODEL LOG
    local bits
    bits=$(gguf_bits "$2") || die "cannot read the GGUF header of $2"
    awk -v name="$1" -v bits="$bits" '
        function num(s) { gsub(/[^0-9.eE+-]/, "", s); return s }
        /^Mean PPL\(Q\) /       { split($0, a, ":"); split(a[2], b, "±"); pplq = num(b[1]); pplq_u = num(b[2]) }
        /^Mean PPL\(Q\)\/PPL/   { split($0, a, ":"); split(a[2], b, "±"); ratio = num(b[1]) }
        /^Mean +KLD:/           { split($0, a, ":"); split(a[2], b, "±"); kld = num(b[1]); kld_u = num(b[2]) }
        /^99\.9% +KLD:/         { split($0, a, ":"); k999 = num(a[2]) }
        /^Median +KLD:/         { split($0, a, ":"); kmed = num(a[2]) }
        /^RMS Δp/               { split($0, a, ":"); split(a[2], b, "±"); rms = num(b[1]) }
        /^Same top p:/          { split($0, a, ":"); split(a[2], b, "±"); same = num(b[1]); same_u = num(b[2]) }
        END {
            if (kld == "" || same == "") exit 1
            split(bits, w, " ")
            printf "| %s | %s | %s | %s | %s ± %s | %s | %s ± %s | %s | %s | %s | %s ± %s |",
                   name, w[1], w[2], w[3], pplq, pplq_u, ratio, kld, kld_u, k999, kmed, rms,
                   same, same_u
        }' "$3"
}

header="| model | blk b/w | all b/w | file b/w | PPL(Q) | PPL ratio | KLD | 99.9% KLD | median KLD | RMS Δp % | same top % | time s |"
sep="|---|---|---|---|---|---|---|---|---|---|---|---|"
rows=()
base_ppl=
for pair in "$@"; do
    name=${pair%%=*} model=${pair#*=}
    mkey=$(fid "$model" | sha1sum | cut -c1-8)
    log=$out/$(printf '%s' "$name" | tr -c 'A-Za-z0-9._-' '_').$key.$mkey.log
    if [ "$force" = 0 ] && [ -f "$log" ] && [ "$log" -nt "$model" ] && [ "$log" -nt "$logits" ] &&
       grep -q '^Same top p:' "$log"; then
        echo "$name: $log (cached)"
    else
        timed "$log" "" "$ppl" -m "$model" -c "$ctx" -t "$threads" \
            --kl-divergence-base "$logits" --kl-divergence
        grep -q '^Same top p:' "$log" ||
            die "$name: no KL divergence summary in $log (fewer than 100 tokens scored?)"
    fi
    t=$(sed -n 's/^# wall time: \(.*\) s$/\1/p' "$log" | tail -n 1)
    r=$(row "$name" "$model" "$log") || die "$name: cannot parse $log"
    rows+=("$r $t |")
    echo "$name: ${t} s"
    [ -n "$base_ppl" ] || base_ppl=$(sed -n 's/^Mean PPL(base) *: *\([0-9.]*\).*/\1/p' "$log")
done

{
    echo
    echo "base $(basename "$base"): PPL(base) $base_ppl; text $(basename "$text"), -c $ctx," \
         "chunks ${chunks:-all}; llama-perplexity from $bin"
    echo
    echo "$header"
    echo "$sep"
    printf '%s\n' "${rows[@]}"
} | tee "$out/$stem.table.md"
[ -z "$md" ] || cp "$out/$stem.table.md" "$md"
echo "(table also in $out/$stem.table.md)" >&2
