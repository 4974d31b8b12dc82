#!/usr/bin/env bash
# mpi_speedup.sh — the same work on 1 and on 2 MPI ranks of this machine (docs/distributed.md):
#   scan     lmpress analyze configs/quickstart.cfg --variant w4-g32: stories260K's per-linear
#            sensitivity scan (35 units over 592 evaluation windows);
#   compare  lmpress compare tools/bench/mpi/smollm2-4.cfg: 4 SmolLM2 variants (RTN and GPTQ).
# Each is run with `mpirun -n 1` and `mpirun -n 2`, alternately, --runs times, in two settings:
#   1 thread   OPENBLAS_NUM_THREADS=1 for every rank: the same work per rank, so the printed
#              tables must be the same, and are checked (tests/test_mpi.c checks the reports
#              exactly);
#   all cores  lmpress's default: each rank's BLAS gets the cores per rank (2 threads for 1 rank,
#              1 each for 2 ranks here).  GPTQ's numbers then differ between the two in the last
#              bits of OpenBLAS's sums, which its rounding decisions amplify (the thread count,
#              not the ranks: the same happens with one process), so only the RTN rows are
#              compared.
# (stories260K's config asks for one thread itself, so the scan has only the first setting.)
# The wall times go to OUT/mpi.md.  --bind-to none: a rank may use every core.
#
#   tools/bench/mpi_speedup.sh [--runs N] [--only scan|compare] [OUT_DIR]   (default 1, both,
#   build-bench/mpi; LMPRESS=build-dev/lmpress for another build)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
runs=1 only=scan,compare out=
while [ $# -gt 0 ]; do
    case $1 in
        --runs) runs=$2; shift 2 ;;
        --only) only=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        -*) echo "mpi_speedup.sh: unknown option $1 (--help)" >&2; exit 2 ;;
        *) out=$1; shift ;;
    esac
done
lmpress=${LMPRESS:-$root/build/lmpress}
out=${out:-$root/build-bench/mpi}
mkdir -p "$out"
command -v mpirun >/dev/null || { echo "mpi_speedup.sh: no mpirun (apt-get install openmpi-bin libopenmpi-dev, then rebuild)" >&2; exit 1; }
mpirun=(mpirun --bind-to none --oversubscribe)
[ "$(id -u)" = 0 ] && mpirun+=(--allow-run-as-root)
[ -f "$root/models/cache/SmolLM2-135M-Instruct.Q4_1.gguf" ] || "$root/tools/fetch_smollm2.sh" >/dev/null

declare -A cmd=(
    [scan]="analyze $root/configs/quickstart.cfg --variant w4-g32 --json"
    [compare]="compare $root/tools/bench/mpi/smollm2-4.cfg --json"
)
md=$out/mpi.md
{
    echo "# 1 against 2 MPI ranks ($(date -u +%F), $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))"
    echo
    echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo
    echo "| work | BLAS threads | run | 1 rank s | 2 ranks s | speed-up |"
    echo "|---|---|---:|---:|---:|---:|"
} > "$md"
# rows of a printed table without the time and memory columns: the scan's whole table but its
# cost line; the compare's variant rows (all cores: RTN's only), sorted (a compare prints each row
# as its variant finishes, so the order of the rows depends on the ranks)
numbers() {
    case $1 in
        scan) grep -v '^cost' "$2" ;;
        compare-1) grep -E '^(rtn|gptq)' "$2" | awk '{print $1,$2,$3,$4,$5,$6}' | sort ;;
        compare-auto) grep -E '^rtn' "$2" | awk '{print $1,$2,$3,$4,$5,$6}' | sort ;;
    esac
}
for work in ${only//,/ }; do
    settings="1 auto"
    [ "$work" = scan ] && settings=1
    for threads in $settings; do
        for r in $(seq 1 "$runs"); do
            declare -A wall=()
            for k in 1 2; do
                log=$out/$work-t$threads-$k-$r
                echo "+ ${mpirun[*]} -n $k $lmpress ${cmd[$work]} $log.json  (BLAS threads: $threads)" >&2
                t0=$(date +%s.%N)
                if [ "$threads" = 1 ]; then
                    OPENBLAS_NUM_THREADS=1 "${mpirun[@]}" -x OPENBLAS_NUM_THREADS -n "$k" "$lmpress" ${cmd[$work]} "$log.json" > "$log.txt" 2> "$log.err"
                else
                    "${mpirun[@]}" -n "$k" "$lmpress" ${cmd[$work]} "$log.json" > "$log.txt" 2> "$log.err"
                fi
                wall[$k]=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
            done
            what=$work
            [ "$work" = compare ] && what=compare-$threads
            [ "$(numbers "$what" "$out/$work-t$threads-1-$r.txt")" = "$(numbers "$what" "$out/$work-t$threads-2-$r.txt")" ] ||
                { echo "mpi_speedup.sh: $work, BLAS threads $threads: the 1- and 2-rank tables differ" >&2; exit 1; }
            awk -v w="$work" -v t="$threads" -v r="$r" -v a="${wall[1]}" -v b="${wall[2]}" \
                'BEGIN { printf "| %s | %s | %d | %.1f | %.1f | %.2f |\n", w, t == 1 ? "1 per rank" : "the cores per rank", r, a, b, a / b }' >> "$md"
        done
    done
done
echo >> "$md"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$md"
cat "$md"
