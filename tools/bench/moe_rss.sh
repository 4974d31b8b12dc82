#!/bin/sh
# moe_rss.sh — issue 37's memory benchmark: a mixture of experts' block streamed a group of
# experts at a time (memory.expert_group_mb), peak RSS against the number of experts.
#
#   tools/bench/moe_rss.sh [BUILD_DIR]            # default build/
#
# Environment (all optional):
#   MOE_MODELS   which checkpoints, default "dsv3-e16 dsv3-e64 qwen3-30b-a3b":
#                dsv3-eN         DeepSeek-V3's widths, one sparse layer of N routed experts
#                qwen3-30b-a3b   Qwen3-30B-A3B's widths, 128 experts, 2 layers
#   MOE_VARIANTS default "rtn gptq" (W4 g128; gptq with its default true_sequential)
#   MOE_GROUP_MB default "1024" (memory.expert_group_mb; "0" holds every block whole: the code
#                path before streaming, for a "before" row; mind the memory it takes)
#   LMP_PYTHON   a python3 with numpy for the generator (default python3)
#
# Checkpoints go to build-bench/moe-<model>/ (bf16 safetensors; dsv3-e64 is 5.6 GB, dsv3-e16
# 1.5 GB, qwen3-30b-a3b 2.5 GB), written when missing by tools/bench/make_moe_shaped.py.  Each
# run is `lmpress compare` of one variant (2 calibration windows of 128 tokens, 2 evaluation
# windows of 128) under /usr/bin/time -v; its log, report and config are kept in
# build-bench/moe-rss/, and one table row per run is printed: peak RSS, wall time, and the
# variant's compression and evaluation seconds from its report.  Runs are one after the other.
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
py=${LMP_PYTHON:-python3}
out=$root/build-bench/moe-rss
mkdir -p "$out"
{ uname -a; nproc; free -g; lscpu | grep -Ei "model name|^model:|family"; git -C "$root" rev-parse HEAD; } \
    > "$out/machine.txt" 2>&1

checkpoint() { # $1: model name -> its folder, written when missing
    dir=$root/build-bench/moe-$1
    if [ ! -f "$dir/config.json" ]; then
        case $1 in
            dsv3-e*) args="--shape deepseek-v3 --experts ${1#dsv3-e} --layers 1" ;;
            qwen3-30b-a3b) args="--shape qwen3-30b-a3b --experts 128 --layers 2" ;;
            *) echo "moe_rss.sh: unknown model $1" >&2; exit 2 ;;
        esac
        # shellcheck disable=SC2086
        /usr/bin/time -f "checkpoint $1 written in %e s, peak %M KB" "$py" "$root/tools/bench/make_moe_shaped.py" \
            "$dir" $args >&2
    fi
    echo "$dir"
}

printf '| model | variant | memory.expert_group_mb | peak RSS (MB) | wall (s) | compress (s) | eval (s) |\n'
printf '|---|---|---|---|---|---|---|\n'
for model in ${MOE_MODELS:-dsv3-e16 dsv3-e64 qwen3-30b-a3b}; do
    dir=$(checkpoint "$model")
    for group in ${MOE_GROUP_MB:-1024}; do
        for variant in ${MOE_VARIANTS:-rtn gptq}; do
            tag=$model-$variant-g$group
            cfg=$out/$tag.cfg
            cat > "$cfg" <<CFG
model = { path = "$dir"; };
backend = { name = "cpu"; };
memory = { expert_group_mb = $group; };
calibration = { text = "$root/models/stories260K/tinystories-synth-calib.txt"; samples = 2; seq_len = 128; };
eval = { texts = [ "$root/models/stories260K/tinystories-synth-eval.txt" ]; seq_len = 128; max_windows = 2; };
seed = 1234;
variants = (
  { name = "rtn"; pipeline = ( { strategy = "rtn"; params = { bits = 4; granularity = "group"; group_size = 128; }; } ); },
  { name = "gptq"; pipeline = ( { strategy = "gptq"; params = { bits = 4; granularity = "group"; group_size = 128; }; } ); }
);
CFG
            /usr/bin/time -v "$build/lmpress" compare "$cfg" --variant "$variant" --verbose --json "$out/$tag.json" \
                > "$out/$tag.out" 2> "$out/$tag.log" || { echo "moe_rss.sh: $tag failed, see $out/$tag.log" >&2; tail -n 5 "$out/$tag.log" >&2; continue; }
            rss=$(awk -F': ' '/Maximum resident set size/ {printf "%.0f", $2 / 1024}' "$out/$tag.log")
            wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {print $2}' "$out/$tag.log" |
                   awk -F: '{s = 0; for (i = 1; i <= NF; i++) s = s * 60 + $i; printf "%.0f", s}')
            secs=$("$py" -c 'import json,sys; v=json.load(open(sys.argv[1]))["variants"][0]; print("%.1f | %.1f" % (v["seconds"], v["eval_seconds"]))' \
                   "$out/$tag.json" 2>/dev/null || echo "? | ?")
            printf '| %s | %s | %s | %s | %s | %s |\n' "$model" "$variant" "$group" "$rss" "$wall" "$secs"
        done
    done
done
