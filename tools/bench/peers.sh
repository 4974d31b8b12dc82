#!/usr/bin/env bash
# peers.sh — lmpress against its peers on the same work: llm-compressor (GPTQ; SmoothQuant +
# W8A8) and llama.cpp's llama-perplexity (evaluation throughput), on SmolLM2-135M-Instruct (the
# bundled default model), both tools on the same thread count and the same calibration tokens.
# A benchmark, not a test: on 2 idle cores the default (3 runs of each, 16 and 128 windows)
# takes a few hours, most of it the 128-window GPTQ runs.
#
#   tools/bench/peers.sh [--runs N] [--windows "16 128"] [--only gptq|sq|eval|formats|awq|rotations[,...]]
#                        [--actorder weight|none] [--eval-windows N] [--threads N]
#                        [--computes "f32 bf16"] [OUT_DIR]
#   (defaults: 3 runs, 16 and 128 windows, gptq, sq and eval, actorder weight (llm-compressor's
#   default), 40 evaluation windows, 2 threads, both computes, OUT_DIR build-bench/peers)
#   LMPRESS=build-dev/lmpress tools/bench/peers.sh ...     (default build/lmpress)
#   LLMC_VENV=build/other-venv ...                         (default build/llmc-venv)
#   LLMC_PIP='llmcompressor==0.14.0.1' ...                 (what pip installs into the venv)
#   GPTQ_CASES=g64 ...                                     (the GPTQ cases: default "channel g64")
#   LLMC_CASES="awq-rtn-w4-g64 rtn-w4a4" ...               (--only awq / rotations: only these cases;
#                                                           default all, see steps 5 and 6)
#
# Steps (each command is printed; what exists is kept, so a rerun is cheap and --runs 5 after
# --runs 3 runs only runs 4 and 5; delete OUT_DIR, or a case's folder, to start over):
#   0. build/llmc-venv: python3 -m venv, pip install llmcompressor (PyPI's torch, with its CUDA
#      wheels: ~6 GB) unless it imports already; the versions are printed and recorded.
#      lmpress run writes the unmodified model (the Q4_1 GGUF dequantized: what every lmpress
#      variant starts from) as a float32 Hugging Face folder OUT/base-hf, llm-compressor's input,
#      and as OUT/f32.gguf, llama.cpp's.  Check: the first 2 windows of 512 tokens of WikiText-2
#      validation give the same token count and perplexity in `lmpress eval` and in torch on
#      OUT/base-hf (tools/bench/llmc_oneshot.py --check-ppl): same tokens, same model.
#   1. GPTQ W4 symmetric, per channel and in groups of 64 (llm-compressor's W4A16 preset, groups
#      of 128, does not divide SmolLM2's 576 columns), on the first N windows of 512 tokens of
#      data/wikitext-2/wiki.valid.tokens for each N of --windows, cut as lmpress cuts them
#      (sequentially from the start, no BOS: SmolLM2's tokenizer adds none): lmpress run
#      (tools/bench/peers/gptq.cfg, whose header says how each setting mirrors llm-compressor's)
#      and tools/bench/llmc_oneshot.py (oneshot + GPTQModifier), alternately A B A B ...
#      Each case in each compute of --computes: "f32" (the cases as named) and "bf16" (cases
#      named ...-bf16-wN): lmpress with backend.params.compute = "bf16" (its forward's GEMMs in
#      bf16 with f32 sums, docs/backends.md "bf16 compute") against llm-compressor on the model
#      loaded with torch_dtype = bfloat16 (llmc_oneshot.py --dtype bfloat16), same windows and
#      threads.  The processor's model name, its bf16 flags and OpenBLAS's core are recorded.
#   2. SmoothQuant (alpha 0.5) + W8A8 (int8 per-channel weights, int8 dynamic per-token
#      activations): tools/bench/peers/sq.cfg against SmoothQuantModifier + QuantizationModifier
#      (scheme W8A8), the same way.
#      After 1 and 2, quality: one lmpress compare of both tools' saved folders (external
#      variants: lmpress reads llm-compressor's compressed-tensors pack-/int-quantized output)
#      against the unmodified model on the first --eval-windows windows of 512 tokens of
#      WikiText-2 test: KLD, ppl, top-1.
#   3. Evaluation throughput on OUT/f32.gguf and wiki.test.raw, alternately: lmpress eval
#      --seq-len 512 --max-windows E --score-second-half against llama-perplexity -c 512
#      --chunks E -t THREADS, and both again on 1 window (startup: load + tokenize + 1 window),
#      so that the marginal rate (E-1)*512 / (t_E - t_1) leaves the startup out.  Both forward
#      the same E windows of 512 tokens (llama-perplexity splits the text into chunks exactly as
#      lmpress cuts windows; no BOS) and score the same E*255 predictions (each window's second
#      half: --score-second-half; the counts are checked), and both perplexities are checked
#      against torch's on the same windows and predictions.
#   4. (--only formats; not in the default set) the floating-point formats of issue 38, quality
#      only (no timing, so machine load does not matter): llm-compressor (tools/bench/llmc_oneshot.py,
#      one run each, on the first 4 windows of 512 tokens of WikiText-2 validation) writes
#      FP8_DYNAMIC (E4M3 weights per channel, dynamic per-token E4M3 inputs), E4M3 weights in
#      128 x 128 blocks (FP8_BLOCK's weights, no input quantization), NVFP4A16, NVFP4 (W4A4), and an FP8 E4M3
#      static per-tensor kv_cache_scheme alone (llm-compressor 0.14.0.1 with transformers 5.24
#      calibrates it but writes no kv_cache_scheme: docs/results.md); then one lmpress compare on the windows of
#      configs/smollm2-fp.cfg (the first 4 windows of 512 tokens of WikiText-2 test) of those
#      folders (lmpress reads float-quantized FP8, nvfp4-pack-quantized and kv_cache_scheme
#      folders; NVFP4 W4A4's inputs as act = "nvfp4" with the file's input_global_scale) beside
#      lmpress's own variants of the same schemes (tools/bench/peers/formats.cfg), calibrated on
#      the same 4 windows: OUT/formats/quality.md.
#   5. (--only awq; not in the default set) AWQ, quality only: llm-compressor 0.14's AWQModifier
#      (its inferred Llama mappings, duo scaling, 20-point grid) then QuantizationModifier (RTN) or
#      GPTQModifier (actorder none, as lmpress's gptq default), int4 and int3 asymmetric weights
#      in groups of 64 (128 does not divide SmolLM2's 576 columns; llm-compressor's own W4A16_ASYM
#      preset is groups of 128), calibrated on the first 2 windows of 512 tokens of WikiText-2
#      validation: 1024 tokens, as many as lmpress's awq stage searches on (configs/smollm2-awq.cfg:
#      sample_tokens = 1024 of its 8 windows; llm-compressor's search takes every calibration
#      token, and on all 8 windows it did not finish in a session on a shared 2-core machine; the GPTQ after
#      it sees the same 2 windows, lmpress's gptq the config's 8; the case awq-gptq-w4-g64-w8
#      calibrates both on all 8 windows, as lmpress's gptq).  One lmpress compare of the saved
#      folders (external variants) on configs/smollm2-awq.cfg's evaluation windows (the first 2
#      windows of 512 tokens of WikiText-2 test, 25 LAMBADA passages) against the Q4_1 GGUF
#      dequantized, as that config's reference: OUT/awq/quality.md, to set beside the config's rows.
#   6. (--only rotations; not in the default set) W4A4 after llm-compressor's rotations: 4-bit
#      symmetric weights per channel (RTN or GPTQ) and 4-bit symmetric dynamic per-token inputs, as
#      configs/smollm2-w4a4.cfg, with no rotation (RTN, GPTQ), after SpinQuantModifier (R1 + R2,
#      fixed random-hadamard: a deterministic Hadamard of 576 cannot be built; RTN, GPTQ) and
#      after QuIPModifier ("v": an online rotation of every linear's input; RTN).  Same calibration and evaluation
#      windows as step 5 (configs/smollm2-w4a4.cfg's): OUT/rotations/quality.md.  A folder whose
#      transform_config holds an online transform (QuIP's input rotation; SpinQuant's R3 / R4) is
#      left out of the compare with the reason printed: lmpress does not apply online transforms
#      read from a folder.
#
# Measured (OUT/peers.md; ratio = llm-compressor's (or llama.cpp's) time over lmpress's, the
# median of the per-pair ratios, > 1: lmpress is faster):
#   compress s  the compression step alone: lmpress's own time of the variant (JSON "seconds":
#               calibration forwards, statistics, the solver, propagation) and the wall time of
#               the oneshot() call (tracing, calibration forwards, smoothing / GPTQ, propagation);
#   total s     the whole command's wall time: lmpress run (load, tokenize, compress, a token
#               evaluation of 64 tokens, write the folder) and the python process (import torch
#               and llm-compressor, tokenize, load, oneshot, save_pretrained);
#   CPU s       user + system seconds of the whole command (both tools have THREADS threads,
#               so CPU s / wall s says how many of them each kept busy).
# Run it on an otherwise idle machine: with another job on the cores, torch's OpenMP threads
# (spinning at every barrier of GPTQ's column loop) slowed llm-compressor's GPTQ solver 10-60x
# here, far more than lmpress; the load average at the start and end is recorded.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
runs=3 windows="16 128" only=gptq,sq,eval actorder=weight eval_windows=40 threads=2 computes="f32 bf16" out=
while [ $# -gt 0 ]; do
    case $1 in
        --runs) runs=$2; shift 2 ;;
        --windows) windows=$2; shift 2 ;;
        --only) only=$2; shift 2 ;;
        --actorder) actorder=$2; shift 2 ;;
        --eval-windows) eval_windows=$2; shift 2 ;;
        --threads) threads=$2; shift 2 ;;
        --computes) computes=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        -*) echo "peers.sh: unknown option $1 (--help)" >&2; exit 2 ;;
        *) out=$1; shift ;;
    esac
done
case $actorder in weight|none) ;; *) echo "peers.sh: --actorder weight|none" >&2; exit 2 ;; esac
for c in $computes; do
    case $c in f32|bf16) ;; *) echo "peers.sh: --computes takes f32 and bf16" >&2; exit 2 ;; esac
done
for s in ${only//,/ }; do
    case $s in gptq|sq|eval|formats|awq|rotations) ;; *) echo "peers.sh: --only takes gptq, sq, eval, formats, awq, rotations (comma-separated)" >&2; exit 2 ;; esac
done
want() { case ",$only," in *,$1,*) return 0 ;; esac; return 1; }
out=$(mkdir -p "${out:-$root/build-bench/peers}" && cd "${out:-$root/build-bench/peers}" && pwd)
lmpress=${LMPRESS:-$root/build/lmpress}
venv=${LLMC_VENV:-$root/build/llmc-venv}
py=$venv/bin/python
oneshot=$root/tools/bench/llmc_oneshot.py
bin=$root/build-llamacpp/bin
model=$root/models/cache/SmolLM2-135M-Instruct.Q4_1.gguf
calib=$root/data/wikitext-2/wiki.valid.tokens
test=$root/data/wikitext-2/wiki.test.raw
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads MKL_NUM_THREADS=$threads TOKENIZERS_PARALLELISM=false
mkdir -p "$out/cfg"
load0=$(cut -d' ' -f1 /proc/loadavg)
run() { echo "+ $*" >&2; "$@"; }
# timed TIMEFILE LOG CMD...: CMD's output to LOG, "wall user sys" seconds to TIMEFILE
timed() {
    local tf=$1 log=$2 TIMEFORMAT='%R %U %S'
    shift 2
    echo "+ $* > $log" >&2
    if ! { time "$@" > "$log" 2>&1; } 2> "$tf.tmp"; then
        tail -n 20 "$log" >&2
        echo "peers.sh: failed: $* (log: $log)" >&2
        exit 1
    fi
    mv "$tf.tmp" "$tf"
}
# cfg_head SAMPLES [COMPUTE]: model, backend, calibration and a token evaluation (lmpress needs one)
cfg_head() {
    cat <<EOF
# written by tools/bench/peers.sh
model = { path = "$model"; };
backend = { name = "cpu"; params = { threads = $threads; compute = "${2:-f32}"; }; };
calibration = { text = "$calib"; samples = $1; seq_len = 512; sampling = "sequential"; };
eval = { texts = [ "$test" ]; seq_len = 64; max_windows = 1; };
seed = 1234;
EOF
}

# ---- 0. set-up ----
[ -f "$model" ] || run "$root/tools/fetch_smollm2.sh"
[ -x "$lmpress" ] || { echo "peers.sh: no lmpress at $lmpress (build it, or set LMPRESS)" >&2; exit 1; }
if ! { [ -x "$py" ] && "$py" -c 'import llmcompressor' 2> /dev/null; }; then
    run python3 -m venv "$venv"
    run "$venv/bin/pip" install "${LLMC_PIP:-llmcompressor}"
fi
"$py" - > "$out/versions.json" <<'EOF'
import json
from importlib.metadata import version
print(json.dumps({n: version(n) for n in ("llmcompressor", "torch", "transformers", "compressed-tensors")}))
EOF
echo "peers.sh: $(cat "$out/versions.json"); $("$lmpress" --version 2>&1 | head -n 1)" >&2
{ cfg_head 1; echo 'variants = ( { name = "f32"; } );'; } > "$out/cfg/base.cfg"
[ -f "$out/base-hf/model.safetensors" ] ||
    timed "$out/base-hf.time" "$out/base-hf.log" "$lmpress" run "$out/cfg/base.cfg" --output "$out/base-hf"
[ -f "$out/check-calib-torch.json" ] ||
    run "$py" "$oneshot" --model "$out/base-hf" --text "$calib" --check-ppl 2 --threads "$threads" \
        > "$out/check-calib-torch.json"
[ -f "$out/check-calib-lmpress.json" ] ||
    run "$lmpress" eval "$model" --text "$calib" --seq-len 512 --max-windows 2 --json > "$out/check-calib-lmpress.json"
python3 - "$out/check-calib-lmpress.json" "$out/check-calib-torch.json" <<'EOF'
import json, sys
a, b = (json.loads(open(p).read().strip().splitlines()[-1]) for p in sys.argv[1:3])
rel = abs(a["ppl"] - b["ppl"]) / a["ppl"]
print(f"peers.sh: calibration text: lmpress {a['tokens']} tokens, ppl(2 windows) {a['ppl']:.6f}; "
      f"torch {b['tokens']} tokens, ppl {b['ppl']:.6f} (relative difference {rel:.1e})", file=sys.stderr)
if a["tokens"] != b["tokens"] or rel > 1e-4:
    sys.exit("peers.sh: the two tools do not read the same calibration tokens or model")
EOF

# pair KIND CASE SAMPLES LMP_VARIANT COMPUTE LLMC_ARGS...: the A/B series of one case
pair() {
    local kind=$1 case=$2 n=$3 variant=$4 compute=$5 d=$out/$1/$2
    shift 5
    [ "$compute" = bf16 ] && set -- "$@" --dtype bfloat16
    mkdir -p "$d"
    { cfg_head "$n" "$compute"; echo "@include \"$root/tools/bench/peers/$kind.cfg\""; } > "$out/cfg/$kind-$case.cfg"
    run "$lmpress" check "$out/cfg/$kind-$case.cfg" > /dev/null
    local r
    for r in $(seq 1 "$runs"); do
        [ -f "$d/lmpress-r$r.time" ] ||
            timed "$d/lmpress-r$r.time" "$d/lmpress-r$r.log" "$lmpress" run "$out/cfg/$kind-$case.cfg" \
                --variant "$variant" --output "$d/lmpress-out" --json "$d/lmpress-r$r.json"
        [ -f "$d/llmc-r$r.time" ] ||
            timed "$d/llmc-r$r.time" "$d/llmc-r$r.log" "$py" "$oneshot" --model "$out/base-hf" --text "$calib" \
                --windows "$n" --threads "$threads" --out "$d/llmc-out" --json "$d/llmc-r$r.json" "$@"
    done
}
# quality KIND: lmpress compare of every saved folder of KIND against the unmodified model
quality() {
    local kind=$1 cfg=$out/cfg/quality-$1.cfg d
    {
        echo "# written by tools/bench/peers.sh"
        echo "model = { path = \"$model\"; };"
        echo "backend = { name = \"cpu\"; params = { threads = $threads; }; };"
        echo "eval = { texts = [ \"$test\" ]; seq_len = 512; max_windows = $eval_windows; };"
        echo "seed = 1234;"
        echo "variants = ("
        echo "  { name = \"f32\"; }"
        for d in "$out/$kind"/*/; do
            d=${d%/}
            for t in lmpress llmc; do
                [ -f "$d/$t-out/config.json" ] && echo "  ,{ name = \"$t-${d##*/}\"; model = \"$d/$t-out\"; }"
            done
        done
        echo ");"
    } > "$cfg.new"
    # rerun when the variants changed or a folder was rewritten since
    if [ -f "$out/$kind/quality.json" ] && cmp -s "$cfg.new" "$cfg" &&
        [ -z "$(find "$out/$kind" -name config.json -newer "$out/$kind/quality.json")" ]; then
        rm "$cfg.new"
        return
    fi
    mv "$cfg.new" "$cfg"
    run "$lmpress" compare "$cfg" --json "$out/$kind/quality.json" --md "$out/$kind/quality.md" \
        > "$out/$kind/quality.log" 2>&1 || { tail -n 20 "$out/$kind/quality.log" >&2; exit 1; }
}

# ---- 1. GPTQ W4 ----
if want gptq; then
    sfx=; [ "$actorder" = none ] && sfx=-noact
    for n in $windows; do
        for c in $computes; do
            cs=; [ "$c" = bf16 ] && cs=-bf16
            case " ${GPTQ_CASES:-channel g64} " in *" channel "*)
                pair gptq "channel$sfx$cs-w$n" "$n" "gptq-w4-channel$sfx" "$c" --method gptq --strategy channel \
                    --actorder "$actorder" ;; esac
            case " ${GPTQ_CASES:-channel g64} " in *" g64 "*)
                pair gptq "g64$sfx$cs-w$n" "$n" "gptq-w4-g64$sfx" "$c" --method gptq --strategy group --group-size 64 \
                    --actorder "$actorder" ;; esac
        done
    done
    quality gptq
fi

# ---- 2. SmoothQuant + W8A8 ----
if want sq; then
    for n in $windows; do pair sq "w8a8-w$n" "$n" sq-w8a8 f32 --method sq-w8a8 --alpha 0.5; done
    quality sq
fi

# ---- 3. evaluation throughput ----
if want eval; then
    [ -x "$bin/llama-perplexity" ] || run "$root/tools/bench/llamacpp_build.sh"
    [ -f "$out/f32.gguf" ] ||
        timed "$out/f32.gguf.time" "$out/f32.gguf.log" "$lmpress" run "$out/cfg/base.cfg" --output "$out/f32.gguf"
    d=$out/eval
    mkdir -p "$d"
    [ -f "$d/torch-check-e$eval_windows.json" ] ||
        run "$py" "$oneshot" --model "$out/base-hf" --text "$test" --check-ppl "$eval_windows" --threads "$threads" \
            > "$d/torch-check-e$eval_windows.json"
    for r in $(seq 1 "$runs"); do
        for e in "$eval_windows" 1; do
            [ -f "$d/lmpress-e$e-r$r.time" ] ||
                timed "$d/lmpress-e$e-r$r.time" "$d/lmpress-e$e-r$r.log" "$lmpress" eval "$out/f32.gguf" \
                    --text "$test" --seq-len 512 --max-windows "$e" --score-second-half --json
            [ -f "$d/llama-e$e-r$r.time" ] ||
                timed "$d/llama-e$e-r$r.time" "$d/llama-e$e-r$r.log" "$bin/llama-perplexity" -m "$out/f32.gguf" \
                    -f "$test" -c 512 --chunks "$e" -t "$threads"
        done
    done
fi

# ---- 4. the floating-point formats (quality only) ----
if want formats; then
    d=$out/formats
    mkdir -p "$d"
    for m in fp8-dynamic fp8-block-a16 nvfp4a16 nvfp4 kv-fp8; do
        extra=
        [ -f "$d/llmc-$m/config.json" ] ||
            timed "$d/llmc-$m.time" "$d/llmc-$m.log" "$py" "$oneshot" --model "$out/base-hf" --text "$calib" \
                --windows 4 --threads "$threads" --method "$m" $extra --out "$d/llmc-$m" --json "$d/llmc-$m.json"
    done
    cfg=$out/cfg/formats.cfg
    {
        echo "# written by tools/bench/peers.sh"
        echo "model = { path = \"$model\"; };"
        echo "backend = { name = \"cpu\"; params = { threads = $threads; }; };"
        echo "calibration = { text = \"$calib\"; samples = 4; seq_len = 512; sampling = \"sequential\"; };"
        echo "eval = { texts = [ \"$test\" ]; seq_len = 512; max_windows = 4; };"
        echo "seed = 1234;"
        echo "variants = ("
        echo "  { name = \"f32\"; }"
        echo "@include \"$root/tools/bench/peers/formats.cfg\""
        for m in fp8-dynamic fp8-block-a16 nvfp4a16 nvfp4 kv-fp8; do
            echo "  ,{ name = \"llmc-$m\"; model = \"$d/llmc-$m\"; }"
        done
        echo ");"
    } > "$cfg"
    run "$lmpress" check "$cfg" > /dev/null
    [ -f "$d/quality.json" ] ||
        run "$lmpress" compare "$cfg" --json "$d/quality.json" --md "$d/quality.md" > "$d/quality.log" 2>&1 ||
        { tail -n 20 "$d/quality.log" >&2; exit 1; }
    cat "$d/quality.md"
fi

# llmc_step STEP CASE:ARGS...: llm-compressor's oneshot for each case (once; kept), then one lmpress
# compare of the folders lmpress can read, on configs/smollm2-awq.cfg's windows: OUT/STEP/quality.md
llmc_step() {
    local step=$1 d=$out/$1 c name args readable=()
    shift
    mkdir -p "$d"
    for c in "$@"; do
        name=${c%%:*} args=${c#*:}
        case " ${LLMC_CASES:-$name} " in *" $name "*) ;; *) continue ;; esac
        # shellcheck disable=SC2086  # args: the case's options, split on spaces
        [ -f "$d/llmc-$name/config.json" ] ||
            timed "$d/llmc-$name.time" "$d/llmc-$name.log" "$py" "$oneshot" --model "$out/base-hf" --text "$calib" \
                --windows 8 --threads "$threads" $args --out "$d/llmc-$name" --json "$d/llmc-$name.json"
        # online transforms (QuIP's input rotation, SpinQuant's R3 / R4) are not applied by lmpress
        if online=$(python3 - "$d/llmc-$name/config.json" <<'PYEOF'
import json, sys
qc = json.load(open(sys.argv[1])).get("quantization_config", {})
groups = (qc.get("transform_config") or {}).get("config_groups") or {}
online = sorted({f"{g}: {a['location']}" for g, s in groups.items() for a in s.get("apply", [])
                 if a.get("location") not in ("weight_input", "weight_output")})
print("; ".join(online))
sys.exit(1 if online else 0)
PYEOF
        ); then
            readable+=("$name")
        else
            echo "peers.sh: $d/llmc-$name left out of the compare: online transforms ($online) are not applied by lmpress" >&2
            echo "$online" > "$d/llmc-$name.online"
        fi
    done
    local cfg=$out/cfg/$step.cfg
    {
        echo "# written by tools/bench/peers.sh: configs/smollm2-awq.cfg's calibration and evaluation windows"
        echo "model = { path = \"$model\"; };"
        echo "backend = { name = \"cpu\"; params = { threads = $threads; }; };"
        echo "calibration = { text = \"$calib\"; samples = 8; seq_len = 512; sampling = \"sequential\"; };"
        echo "eval = { texts = [ \"$test\" ]; seq_len = 512; max_windows = 2;"
        echo "         lambada = \"$root/data/lambada/lambada_test.jsonl\"; lambada_max = 25; };"
        echo "seed = 1234;"
        echo "variants = ("
        echo "  { name = \"q4_1-dequant\"; }"
        for name in "${readable[@]}"; do
            echo "  ,{ name = \"llmc-$name\"; model = \"$d/llmc-$name\"; }"
        done
        echo ");"
    } > "$cfg"
    run "$lmpress" check "$cfg" > /dev/null
    # compared again when the set of folders changed (quality.cfg: the config of quality.json)
    if ! { [ -f "$d/quality.json" ] && cmp -s "$cfg" "$d/quality.cfg"; }; then
        rm -f "$d/quality.json"
        run "$lmpress" compare "$cfg" --json "$d/quality.json" --md "$d/quality.md" > "$d/quality.log" 2>&1 ||
            { tail -n 20 "$d/quality.log" >&2; exit 1; }
        cp "$cfg" "$d/quality.cfg"
    fi
    cat "$d/quality.md"
}

# ---- 5. AWQ (quality only) ----
if want awq; then
    llmc_step awq \
        "awq-rtn-w4-g64:--windows 2 --method awq --quantizer rtn --bits 4 --strategy group --group-size 64 --asym" \
        "awq-gptq-w4-g64:--windows 2 --method awq --quantizer gptq --actorder none --bits 4 --strategy group --group-size 64 --asym" \
        "awq-rtn-w3-g64:--windows 2 --method awq --quantizer rtn --bits 3 --strategy group --group-size 64 --asym" \
        "awq-gptq-w3-g64:--windows 2 --method awq --quantizer gptq --actorder none --bits 3 --strategy group --group-size 64 --asym" \
        "awq-gptq-w4-g64-w8:--method awq --quantizer gptq --actorder none --bits 4 --strategy group --group-size 64 --asym"
fi

# ---- 6. rotations + W4A4 (quality only) ----
if want rotations; then
    llmc_step rotations \
        "rtn-w4a4:--method quant --quantizer rtn --bits 4 --strategy channel --act-bits 4" \
        "spinquant-rtn-w4a4:--method spinquant --rotations R1,R2 --quantizer rtn --bits 4 --strategy channel --act-bits 4" \
        "quip-rtn-w4a4:--method quip --quantizer rtn --bits 4 --strategy channel --act-bits 4" \
        "spinquant-gptq-w4a4:--method spinquant --rotations R1,R2 --quantizer gptq --actorder none --bits 4 --strategy channel --act-bits 4" \
        "gptq-w4a4:--method quant --quantizer gptq --actorder none --bits 4 --strategy channel --act-bits 4"
fi

# ---- summary ----
PEERS_LOAD0=$load0 python3 - "$out" "$threads" "$eval_windows" "$lmpress" <<'EOF' > "$out/peers.md"
import glob, json, os, re, statistics as st, sys
out, threads, E, lmpress = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]

def med(xs):
    return st.median(xs) if xs else None

def f(x, p=2):
    return "–" if x is None else f"{x:.{p}f}"

def last(p):  # the JSON object on the last line of a command's output
    return json.loads(open(p).read().strip().splitlines()[-1])

def times(p):
    w, u, s = (float(x) for x in open(p).read().split())
    return w, u + s

cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
flags = next((l.split(":", 1)[1].split() for l in open("/proc/cpuinfo") if l.startswith("flags")), [])
bf16_flags = " ".join(x for x in flags if x in ("avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "avx2")) or "none"
try:
    import ctypes
    ob = ctypes.CDLL("libopenblas.so.0")
    ob.openblas_get_corename.restype = ctypes.c_char_p
    corename = ob.openblas_get_corename().decode()
except OSError:
    corename = "?"
ver = json.load(open(f"{out}/versions.json"))
print("# lmpress against llm-compressor and llama.cpp (tools/bench/peers.sh)\n")
print(f"SmolLM2-135M-Instruct (Q4_1 GGUF dequantized to f32); {threads} threads each; "
      f"{os.cpu_count()} cores, {cpu} (flags: {bf16_flags}; OpenBLAS core {corename}"
      f"{', OPENBLAS_CORETYPE=' + os.environ['OPENBLAS_CORETYPE'] if os.environ.get('OPENBLAS_CORETYPE') else ''}); load average (1 min) at the start {os.environ.get('PEERS_LOAD0', '?')}, "
      f"at the end {os.getloadavg()[0]:.2f} (run it on an otherwise idle machine).  ")
print("llm-compressor " + ver["llmcompressor"] + ", torch " + ver["torch"] + ", transformers "
      + ver["transformers"] + ", compressed-tensors " + ver["compressed-tensors"] + f"; lmpress {lmpress}.  ")
a = last(f"{out}/check-calib-lmpress.json")
b = last(f"{out}/check-calib-torch.json")
print(f"Calibration text: {a['tokens']} tokens in lmpress and {b['tokens']} in torch (no BOS); first 2 windows' "
      f"ppl {a['ppl']:.6f} / {b['ppl']:.6f}.\n")
print("ratio = llm-compressor (llama.cpp) over lmpress, median of the per-pair ratios: > 1, lmpress faster.\n")

NOTES = {
    "gptq": "Cases: channel = per output channel, g64 = groups of 64 inputs; both symmetric int4 "
            "(scale absmax/7.5), act-order by decreasing H_jj unless the case ends in -noact "
            "(llm-compressor's default actorder \"static\" = \"weight\"), every group's scale from the "
            "weights before GPTQ (llm-compressor's observer runs first), damp 0.01, block 128, a whole "
            "layer's linears from one calibration pass, the quantized layer's outputs propagated; "
            "-wN: N windows of 512 tokens of WikiText-2 validation (tools/bench/peers/gptq.cfg).",
    "sq": "SmoothQuant alpha 0.5 on the linears the norms feed (q,k,v; gate,up), then int8 symmetric "
          "per-channel weights (absmax/127.5) and int8 dynamic per-token activations, every block "
          "linear; statistics from the float model (tools/bench/peers/sq.cfg).  llm-compressor's "
          "smoothing uses each channel's max-min and 2*max|W|, lmpress's max|X| and max|W|.",
}
for kind, title in (("gptq", "GPTQ W4 symmetric"), ("sq", "SmoothQuant + W8A8 (dynamic per-token activations)")):
    cases = sorted(glob.glob(f"{out}/{kind}/*/"), key=lambda c: (int(c.rstrip("/").rsplit("-w", 1)[1]), c))
    if not cases:
        continue
    q = {}
    if os.path.exists(f"{out}/{kind}/quality.json"):
        qj = json.load(open(f"{out}/{kind}/quality.json"))
        for v in qj["variants"]:
            ev = next(iter(v["eval"].values()))
            q[v["name"]] = (ev["kld"], ev["ppl"], ev["top1"])
    print(f"## {title}\n")
    print(NOTES[kind] + "\n")
    if "f32" in q:
        print(f"Unmodified model: ppl {q['f32'][1]:.4f} on the first {E} windows of 512 tokens of WikiText-2 test "
              "(KLD, ppl, top-1 below on the same windows, lmpress reading each tool's saved folder).\n")
    print("| case | runs | compress s lmpress | compress s llmc | ratio | total s lmpress | total s llmc | ratio "
          "| CPU s lmpress | CPU s llmc | CPU ratio | KLD lmpress | KLD llmc | ppl lmpress | ppl llmc | top-1 % lmpress | top-1 % llmc |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c in cases:
        name = c.rstrip("/").rsplit("/", 1)[1]
        rows = []
        for lt in sorted(glob.glob(f"{c}lmpress-r*.time")):
            r = re.search(r"-r(\d+)\.time$", lt).group(1)
            ct = f"{c}llmc-r{r}.time"
            if not os.path.exists(ct):
                continue
            lc = json.load(open(f"{c}lmpress-r{r}.json"))["variants"][0]["seconds"]
            mc = json.load(open(f"{c}llmc-r{r}.json"))["compress_s"]
            (lw, lcpu), (mw, mcpu) = times(lt), times(ct)
            rows.append((lc, mc, lw, mw, lcpu, mcpu))
        if not rows:
            continue
        col = list(zip(*rows))
        ratio = lambda i, j: med([x[j] / x[i] for x in rows])
        kl, km = q.get(f"lmpress-{name}", (None,) * 3), q.get(f"llmc-{name}", (None,) * 3)
        print(f"| {name} | {len(rows)} | {f(med(col[0]))} | {f(med(col[1]))} | {f(ratio(0, 1))} | {f(med(col[2]))} | "
              f"{f(med(col[3]))} | {f(ratio(2, 3))} | {f(med(col[4]))} | {f(med(col[5]))} | {f(ratio(4, 5))} | "
              f"{f(kl[0], 5)} | {f(km[0], 5)} | {f(kl[1], 4)} | {f(km[1], 4)} | "
              f"{f(kl[2] and 100 * kl[2])} | {f(km[2] and 100 * km[2])} |")
    print()

d = f"{out}/eval"
if os.path.isdir(d):
    print(f"## Evaluation throughput: lmpress eval against llama-perplexity\n")
    tc = glob.glob(f"{d}/torch-check-e{E}.json")
    tj = last(tc[0]) if tc else None
    lj = sorted(glob.glob(f"{d}/lmpress-e{E}-r*.log"))
    scored_lmpress = last(lj[0]).get("scored") if lj else None
    print(f"F32 GGUF written by lmpress, WikiText-2 test, {E} windows (chunks) of 512 tokens, -t {threads}.  "
          f"Both forward {E * 512} tokens and score the second half of each window ({E * 255} predictions; "
          f"lmpress eval --score-second-half scored {scored_lmpress}).  tok/s = tokens forwarded per wall second; "
          f"marginal = ({E}-1)*512 / (t_{E} - t_1): without the startup (load, tokenize).\n")
    print("| tool | runs | wall s, {E} windows | wall s, 1 window | tok/s | marginal tok/s | marginal tok/s per thread | CPU s | ppl | torch, same definition |".replace("{E}", str(E)))
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    res = {}
    for tool in ("lmpress", "llama"):
        wE = [times(p) for p in sorted(glob.glob(f"{d}/{tool}-e{E}-r*.time"))]
        w1 = [times(p) for p in sorted(glob.glob(f"{d}/{tool}-e1-r*.time"))]
        if not wE:
            continue
        ppl = None
        if tool == "lmpress":
            ppl = last(sorted(glob.glob(f"{d}/lmpress-e{E}-r*.log"))[0])["ppl"]
            ref = tj and tj["ppl_second_half"]
        else:
            m = re.search(r"Final estimate: PPL = ([0-9.]+)", open(sorted(glob.glob(f"{d}/llama-e{E}-r*.log"))[0]).read())
            ppl = m and float(m.group(1))
            ref = tj and tj["ppl_second_half"]
        tE, t1 = med([w for w, _ in wE]), med([w for w, _ in w1])
        marg = (E - 1) * 512 / (tE - t1) if t1 is not None and tE > t1 else None
        res[tool] = (tE, marg)
        print(f"| {'lmpress eval' if tool == 'lmpress' else 'llama-perplexity'} | {len(wE)} | {f(tE)} | {f(t1)} | "
              f"{f(E * 512 / tE, 1)} | {f(marg, 1)} | {f(marg and marg / threads, 1)} | {f(med([c for _, c in wE]))} | "
              f"{f(ppl, 4)} | {f(ref, 4)} |")
    pairs = []
    for p in sorted(glob.glob(f"{d}/lmpress-e{E}-r*.time")):
        q2 = p.replace("/lmpress-", "/llama-")
        if os.path.exists(q2):
            pairs.append(times(q2)[0] / times(p)[0])
    if pairs:
        print(f"\nWall-time ratio llama-perplexity / lmpress eval ({E} windows), median of {len(pairs)} pairs: "
              f"{med(pairs):.2f}" + (f"; marginal-rate ratio lmpress / llama.cpp {res['lmpress'][1] / res['llama'][1]:.2f}"
                                     if all(res.get(t, (0, None))[1] for t in ("lmpress", "llama")) else "") + ".")
EOF
cat "$out/peers.md"
