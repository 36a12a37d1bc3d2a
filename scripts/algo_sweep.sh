#!/usr/bin/env bash
# Checks the algorithm selector against measurement: times every algorithm that can run an
# operation, each forced with HCCL_ALGO="level0:NA;level1:NAME", beside the selector's own
# choice (no HCCL_ALGO), in REPEATS interleaved rounds under the same mpirun settings. Prints,
# per size, the median time of each (the fastest marked *), the algorithm the selector picked
# (from its INFO log line) and the selector's median over the best median (1.00: it picked the
# fastest; above 1: that much slower). Ends with the geometric mean of that ratio per operation.
#
# usage: scripts/algo_sweep.sh [--op OP[,OP...]] [-n RANKS] [-b MIN] [-e MAX] [-f FACTOR]
#            [-i ITERS] [-w WARMUP] [-r REPEATS] [--mem MEM]
#   OP: all_reduce all_gather reduce_scatter broadcast reduce alltoall, or all (the default).
#       fp32 sum, root 0. Scatter has a single algorithm and is not swept.
#   MEM: device (the default, aclrtMalloc) or host (malloc), as the testers' --mem.
#   defaults: 4 ranks, 64K .. 4M (factor 2), 20 timed iterations, 5 warm-up, 3 repeats.
# Environment: HCCL_TOOLS_BIN, a directory holding the testers (default: cargo build --release
# here). Exit status 1 when a run fails or a result check fails.
set -euo pipefail
cd "$(dirname "$0")/.."

all_ops=(all_reduce all_gather reduce_scatter broadcast reduce alltoall)
ranks=4 min=64K max=4M factor=2 iters=20 warmup=5 repeats=3 mem=device ops=()

usage() { sed -n '9,16p' "$0" >&2; exit 2; }
while [ $# -gt 0 ]; do
    opt=$1
    case $opt in
        --op=*) val=${opt#--op=}; opt=--op ;;
        -h|--help) usage ;;
        --op|-n|-b|-e|-f|-i|-w|-r|--mem)
            [ $# -ge 2 ] || { echo "algo_sweep: $opt needs a value" >&2; usage; }
            val=$2; shift ;;
        *) echo "algo_sweep: unknown option '$opt'" >&2; usage ;;
    esac
    shift
    case $opt in
        --op) IFS=, read -r -a more <<< "$val"; ops+=("${more[@]}") ;;
        -n) ranks=$val ;; -b) min=$val ;; -e) max=$val ;; -f) factor=$val ;;
        -i) iters=$val ;; -w) warmup=$val ;; -r) repeats=$val ;; --mem) mem=$val ;;
    esac
done
case $mem in device|host) ;; *) echo "algo_sweep: --mem must be device or host" >&2; usage ;; esac
for v in ranks factor iters repeats; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "algo_sweep: $v must be a positive integer" >&2; exit 2; }
done
[[ $warmup =~ ^[0-9]+$ ]] || { echo "algo_sweep: warm-up must be a non-negative integer" >&2; exit 2; }
[ "$factor" -ge 2 ] || { echo "algo_sweep: the factor must be at least 2" >&2; exit 2; }
[ "$ranks" -ge 2 ] || { echo "algo_sweep: algorithms differ only from 2 ranks up" >&2; exit 2; }
if [ ${#ops[@]} -eq 0 ] || [[ " ${ops[*]} " == *" all "* ]]; then ops=("${all_ops[@]}"); fi
for op in "${ops[@]}"; do
    [[ " ${all_ops[*]} " == *" $op "* ]] || { echo "algo_sweep: unknown or unswept operation '$op'" >&2; usage; }
done

# The HCCL_ALGO level1 names of the algorithms that can run each operation (src/algo/spec.rs).
algos_of() {
    case $1 in
        all_reduce) echo fullmesh ring H-D_R tree hier ;;
        all_gather) echo fullmesh ring H-D_R bruck hier ;;
        reduce_scatter) echo fullmesh ring H-D_R hier ;;
        broadcast|reduce) echo fullmesh ring hier ;;
        alltoall) echo fullmesh pairwise ;;
    esac
}

if [ -n "${HCCL_TOOLS_BIN:-}" ]; then
    bin=$HCCL_TOOLS_BIN
else
    targets=()
    for op in "${ops[@]}"; do targets+=(--bin "${op}_test"); done
    cargo build --release -q -p hccl-tools "${targets[@]}"
    bin=${CARGO_TARGET_DIR:-target}/release
fi
command -v mpirun >/dev/null || { echo "algo_sweep: mpirun not found (scripts/setup.sh installs openmpi-bin)" >&2; exit 1; }
launch=(mpirun --oversubscribe -n "$ranks")
[ "$(id -u)" -eq 0 ] && launch=(mpirun --allow-run-as-root --oversubscribe -n "$ranks")
work=$(mktemp -d /tmp/algo_sweep.XXXXXX)
common=(-b "$min" -e "$max" -f "$factor" -n "$iters" -w "$warmup" -d fp32 -o sum --mem "$mem")

# One run of OP with algorithm A ("auto": the selector's) for repeat K: "A size us" rows.
run() {
    local op=$1 a=$2 k=$3 err=$work/$op.$a.$k.err
    local env=(env -u HCCL_ALGO)
    [ "$a" = auto ] || env=(env "HCCL_ALGO=level0:NA;level1:$a")
    "${env[@]}" timeout 1800 "${launch[@]}" "$bin/${op}_test" "${common[@]}" 2> "$err" |
        awk -v a="$a" '$NF == "success" { print a, $1, $2; next }
                       $NF == "failed" { bad = 1 } END { exit bad }' ||
        { echo "algo_sweep: $op with $a (repeat $k) failed or printed a failed check; see $err" >&2; return 1; }
}

status=0
summary=()
for op in "${ops[@]}"; do
    read -r -a algos <<< "$(algos_of "$op")"
    cands=(auto "${algos[@]}")
    rows=$work/$op.rows
    : > "$rows"
    for (( k = 1; k <= repeats; k++ )); do
        # Each repeat starts the rotation one place further, so no algorithm always runs first.
        for (( j = 0; j < ${#cands[@]}; j++ )); do
            a=${cands[(j + k) % ${#cands[@]}]}
            echo "== $op repeat $k/$repeats: $a" >&2
            run "$op" "$a" "$k" >> "$rows" || status=1
        done
    done
    # The selector's pick per size, from rank 0's INFO line (one short run per size).
    picks=$work/$op.picks
    : > "$picks"
    for size in $(awk '$1 == "auto" { print $2 }' "$rows" | sort -nu); do
        pick=$(env -u HCCL_ALGO HCCL_LOG_LEVEL=INFO timeout 600 "${launch[@]}" "$bin/${op}_test" \
                   -b "$size" -e "$size" -n 1 -w 0 -c 0 --mem "$mem" 2>&1 |
               sed -n 's/.* rank 0: .* uses the \([a-z_]*\) algorithm (cheapest.*/\1/p' | head -n 1)
        echo "$size ${pick:-small}" >> "$picks"
    done
    echo "== $op: $ranks processes, $mem memory, fp32, time per call in us, medians of $repeats interleaved repeats"
    line=$(awk -v cands="${cands[*]}" -v op="$op" '
        function median(list,   n, v, i, j, t) {
            n = split(list, v, " ")
            for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j - 1] + 0 > v[j] + 0; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
            return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
        }
        FNR == NR { pick[$1] = $2; next }
        { t[$1, $2] = t[$1, $2] " " $3; sizes[$2] = 1 }
        END {
            nc = split(cands, c, " ")
            printf "%10s", "size(B)"
            for (i = 1; i <= nc; i++) printf " %10s", c[i]
            printf " %10s %10s\n", "pick", "auto/best"
            ns = 0
            for (s in sizes) sz[++ns] = s + 0
            for (i = 2; i <= ns; i++) for (j = i; j > 1 && sz[j - 1] > sz[j]; j--) { x = sz[j]; sz[j] = sz[j - 1]; sz[j - 1] = x }
            logsum = 0; counted = 0
            for (k = 1; k <= ns; k++) {
                s = sz[k]; best = -1
                for (i = 1; i <= nc; i++) {
                    m[i] = ((c[i], s) in t) ? median(t[c[i], s]) : -1
                    if (m[i] >= 0 && (best < 0 || m[i] < best)) best = m[i]
                }
                printf "%10d", s
                for (i = 1; i <= nc; i++) {
                    if (m[i] < 0) printf " %10s", "-"
                    else printf " %9.2f%s", m[i], (m[i] == best ? "*" : " ")
                }
                r = (m[1] > 0 && best > 0) ? m[1] / best : 0
                p = "?"
                if (s in pick) p = pick[s]
                rs = "-"
                if (r > 0) rs = sprintf("%.2f", r)
                printf " %10s %10s\n", p, rs
                if (r > 0) { logsum += log(r); counted++ }
            }
            if (counted) printf "%s %d %.2f\n", op, counted, exp(logsum / counted) > "/dev/stderr"
        }' "$picks" "$rows" 2> "$work/$op.summary")
    echo "$line"
    [ -s "$work/$op.summary" ] && summary+=("$(cat "$work/$op.summary")")
    echo
done
echo "== summary: the selector's median time over the fastest algorithm's, $ranks processes"
printf '%-15s %6s %10s\n' op sizes geomean
for s in "${summary[@]}"; do
    read -r op n g <<< "$s"
    printf '%-15s %6s %10s\n' "$op" "$n" "$g"
done
echo "raw outputs in $work"
exit $status
