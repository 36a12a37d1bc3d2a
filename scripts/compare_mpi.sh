#!/usr/bin/env bash
# Compares our testers with their Open MPI counterparts (bench/mpi_OP.c) on the same ranks and
# sizes. For each operation: REPEATS rounds of ours and MPI's back to back under the same mpirun
# (the order alternating between rounds), then a table of medians — ours ÷ MPI bus bandwidth,
# and latencies beside this machine's floor (bench/shm_pingpong.c: one cache line between two
# processes) for small sizes — and a plot through hccl_plot. Ends with a summary per operation.
#
# usage: scripts/compare_mpi.sh [--op OP[,OP...]] [-n RANKS] [-b MIN] [-e MAX] [-f FACTOR]
#            [-i ITERS] [-s SMALL_ITERS] [-w WARMUP] [-r REPEATS] [-o OUT.png] [--mem MEM]
#   OP: all_reduce all_gather broadcast reduce_scatter reduce alltoall scatter send_recv barrier,
#       or all (the default). fp32 sum, root 0.
#   MEM: where our testers' buffers live (their --mem): device (the default, aclrtMalloc), host,
#       or both (interleaved with MPI's runs, one table per memory; Barrier, bufferless, runs once).
#   defaults: 2 ranks, 8 B .. 64M (factor 2), 20 timed iterations per size (SMALL_ITERS = 1000
#       up to 1 MiB, where 20 iterations last a millisecond or less and a wake-up or a
#       migration decides the row), 5 warm-up, 3 repeats.
#   OUT.png (default /tmp/compare_mpi.png) is the plot of a single operation; with several, each
#       goes to OUT_OP.png. Barrier moves no data and has no plot.
# Environment: HCCL_TOOLS_BIN, a directory holding the testers and hccl_plot (default: cargo
# build --release here). Exit status 1 when a run fails or a result check fails.
set -euo pipefail
cd "$(dirname "$0")/.."

all_ops=(all_reduce all_gather broadcast reduce_scatter reduce alltoall scatter send_recv barrier)
ranks=2 min=8 max=64M factor=2 iters=20 small_iters=1000 warmup=5 repeats=3 mem=device
out=/tmp/compare_mpi.png ops=()
small_max=1048576 # sizes up to this run with SMALL_ITERS
latency_max=4096  # sizes up to this are compared with the ping-pong round trip

usage() { sed -n '8,20p' "$0" >&2; exit 2; }
while [ $# -gt 0 ]; do
    opt=$1
    case $opt in
        --op=*) val=${opt#--op=}; opt=--op ;;
        -h|--help) usage ;;
        --op|-n|-b|-e|-f|-i|-s|-w|-r|-o|--mem)
            [ $# -ge 2 ] || { echo "compare_mpi: $opt needs a value" >&2; usage; }
            val=$2; shift ;;
        *) echo "compare_mpi: unknown option '$opt'" >&2; usage ;;
    esac
    shift
    case $opt in
        --op) IFS=, read -r -a more <<< "$val"; ops+=("${more[@]}") ;;
        -n) ranks=$val ;; -b) min=$val ;; -e) max=$val ;; -f) factor=$val ;;
        -i) iters=$val ;; -s) small_iters=$val ;; -w) warmup=$val ;; -r) repeats=$val ;;
        -o) out=$val ;; --mem) mem=$val ;;
    esac
done
case $mem in
    device|host) mems=("$mem") ;;
    both) mems=(device host) ;;
    *) echo "compare_mpi: --mem must be device, host or both" >&2; usage ;;
esac
for v in ranks factor iters small_iters repeats; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "compare_mpi: $v must be a positive integer" >&2; exit 2; }
done
[[ $warmup =~ ^[0-9]+$ ]] || { echo "compare_mpi: warm-up must be a non-negative integer" >&2; exit 2; }
[ "$factor" -ge 2 ] || { echo "compare_mpi: the factor must be at least 2" >&2; exit 2; }
if [ ${#ops[@]} -eq 0 ] || [[ " ${ops[*]} " == *" all "* ]]; then ops=("${all_ops[@]}"); fi
for op in "${ops[@]}"; do
    [[ " ${all_ops[*]} " == *" $op "* ]] || { echo "compare_mpi: unknown operation '$op'" >&2; usage; }
done

bytes() { # 64M -> 67108864, same 1024-based suffixes as the testers
    local v=${1^^}
    [[ $v =~ ^[0-9]+[KMG]?$ ]] || { echo "compare_mpi: invalid size '$1'" >&2; exit 2; }
    case $v in
        *K) echo $(( ${v%K} << 10 )) ;;
        *M) echo $(( ${v%M} << 20 )) ;;
        *G) echo $(( ${v%G} << 30 )) ;;
        *) echo $(( 10#$v )) ;;
    esac
}
min_b=$(bytes "$min")
max_b=$(bytes "$max")
[ "$min_b" -ge 1 ] && [ "$max_b" -ge "$min_b" ] || { echo "compare_mpi: need 1 <= MIN <= MAX" >&2; exit 2; }
# The sweep, split where the iteration count changes: the first size above small_max starts
# the second band.
large_b=0 nsizes=0
for (( s = min_b; s <= max_b; s *= factor )); do
    nsizes=$(( nsizes + 1 ))
    if [ "$s" -gt "$small_max" ] && [ "$large_b" -eq 0 ]; then large_b=$s; fi
done

for tool in mpirun mpicc; do
    command -v $tool >/dev/null || { echo "compare_mpi: $tool not found (scripts/setup.sh installs openmpi-bin and libopenmpi-dev)" >&2; exit 1; }
done
if [ -n "${HCCL_TOOLS_BIN:-}" ]; then
    bin=$HCCL_TOOLS_BIN
else
    targets=(--bin hccl_plot)
    for op in "${ops[@]}"; do targets+=(--bin "${op}_test"); done
    cargo build --release -q -p hccl-tools "${targets[@]}"
    bin=${CARGO_TARGET_DIR:-target}/release
fi

work=$(mktemp -d /tmp/compare_mpi.XXXXXX)
mkdir -p "$(dirname "$out")"
progs=(shm_pingpong)
for op in "${ops[@]}"; do progs+=("mpi_$op"); done
bench/build.sh "$work" "${progs[@]}"
launch=(mpirun --oversubscribe -n "$ranks")
[ "$(id -u)" -eq 0 ] && launch=(mpirun --allow-run-as-root --oversubscribe -n "$ranks")

# The floor: median round trip of REPEATS ping-pongs.
rtts=()
for (( k = 1; k <= repeats; k++ )); do
    "$work/shm_pingpong" > "$work/floor.$k.txt" 2>> "$work/floor.err" ||
        { echo "compare_mpi: shm_pingpong failed: $(cat "$work/floor.err")" >&2; exit 1; }
    rtts+=("$(awk 'NR == 2 { print $2 }' "$work/floor.$k.txt")")
done
floor=$(printf '%s\n' "${rtts[@]}" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')
cpus=$(awk 'NR == 2 { print $5 }' "$work/floor.1.txt")
printf 'latency floor: one 64-byte cache line between two processes (bench/shm_pingpong.c, CPUs %s):\n' "$cpus"
printf '  round trip %s us, one way %s us (median of %d runs: %s; each the median of 100-trip batches)\n' \
    "$floor" "$(awk -v r="$floor" 'BEGIN { printf "%.3f", r / 2 }')" "$repeats" "${rtts[*]}"
printf '  hccl/rtt and mpi/rtt below: a mean latency over that round trip, sizes up to %d B\n\n' "$latency_max"

mpi_name() {
    case $1 in
        all_reduce) echo MPI_Allreduce ;; all_gather) echo MPI_Allgather ;;
        broadcast) echo MPI_Bcast ;; reduce_scatter) echo MPI_Reduce_scatter_block ;;
        reduce) echo MPI_Reduce ;; alltoall) echo MPI_Alltoall ;; scatter) echo MPI_Scatter ;;
        send_recv) echo MPI_Sendrecv ;; barrier) echo MPI_Barrier ;;
    esac
}

# Runs one side (hccl or mpi) of OP for repeat K: both bands, rows appended to one file.
run_side() {
    local side=$1 op=$2 k=$3 prog
    local common=(-f "$factor" -w "$warmup" -d fp32 -o sum)
    case $side in
        hccl_*) prog=$bin/${op}_test; common+=(--mem "${side#hccl_}") ;;
        mpi) prog=$work/mpi_$op ;;
    esac
    local txt=$work/$op.$side.$k.txt err=$work/$op.$side.$k.err
    local bands=()
    if [ "$op" = barrier ]; then
        bands=("-b 8 -e 8 -n $small_iters")
    elif [ "$small_iters" = "$iters" ] || [ "$min_b" -gt "$small_max" ]; then
        bands=("-b $min_b -e $max_b -n $iters")
    else
        local small_e=$(( max_b < small_max ? max_b : small_max ))
        bands=("-b $min_b -e $small_e -n $small_iters")
        [ "$large_b" -gt 0 ] && bands+=("-b $large_b -e $max_b -n $iters")
    fi
    : > "$txt"
    for band in "${bands[@]}"; do
        # shellcheck disable=SC2086 # a band is several flags
        timeout 1800 "${launch[@]}" "$prog" $band "${common[@]}" >> "$txt" 2>> "$err" || true
    done
    local rows want=$nsizes
    [ "$op" = barrier ] && want=1
    rows=$(grep -Ec '^ *[0-9]+ .*(success|failed|NULL) *$' "$txt" || true)
    if [ "$rows" -eq 0 ]; then
        echo "compare_mpi: $side $op (repeat $k) printed no rows; its stderr:" >&2
        tail -n 20 "$err" >&2
        exit 1
    elif [ "$rows" -lt "$want" ]; then
        echo "compare_mpi: $side $op (repeat $k) stopped after $rows of $want sizes; see $err" >&2
    fi
}

status=0
summary=()
multi=$(( ${#ops[@]} > 1 ))
for op in "${ops[@]}"; do
    # A Barrier has no buffers (the tester allocates none in either memory), so the memory
    # kind changes nothing: it runs once per repeat, and its table says so.
    opmems=("${mems[@]}")
    [ "$op" = barrier ] && opmems=("${mems[0]}")
    sides=(mpi)
    for m in "${opmems[@]}"; do sides+=("hccl_$m"); done
    for (( k = 1; k <= repeats; k++ )); do
        # Each repeat starts the rotation one place further, so no side always runs first.
        order=()
        for (( j = 0; j < ${#sides[@]}; j++ )); do
            order+=("${sides[(j + k) % ${#sides[@]}]}")
        done
        for side in "${order[@]}"; do
            echo "== $op repeat $k/$repeats: $side" >&2
            run_side "$side" "$op" "$k"
        done
    done
    for m in "${opmems[@]}"; do
    files=()
    for (( k = 1; k <= repeats; k++ )); do
        files+=("side=hccl" "rep=$k" "$work/$op.hccl_$m.$k.txt" "side=mpi" "rep=$k" "$work/$op.mpi.$k.txt")
    done
    case $op in
        all_reduce|reduce_scatter|reduce) what="fp32 sum" ;;
        barrier) what="no payload" ;;
        *) what=fp32 ;;
    esac
    memnote=
    [ ${#opmems[@]} -gt 1 ] && memnote=" ($m memory)"
    [ ${#opmems[@]} -lt ${#mems[@]} ] && memnote=" (no buffers: one run for every memory)"
    echo "== $op: ${op}_test$memnote vs $(mpi_name "$op"), $ranks processes, $what, medians of $repeats interleaved repeats"
    # Rows of every repeat -> medians per size; also writes the median tables for the plot.
    label=$op
    [ ${#opmems[@]} -gt 1 ] && label=$op/$m
    line=$(awk -v R="$repeats" -v floor="$floor" -v lat="$latency_max" -v op="$label" \
        -v hmed="$work/$op.hccl_$m.median.txt" -v mmed="$work/$op.mpi.median.txt" '
        function median(a, n,   i, j, x) {
            for (i = 2; i <= n; i++) {
                x = a[i]
                for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]
                a[j + 1] = x
            }
            return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
        }
        function verdict(s, sz,   k, v, c) {
            v = "success"
            for (k = 1; k <= R; k++) {
                c = ck[s, sz, k]
                if (c == "") c = "missing"
                if (c == "failed" || c == "missing") return c
                if (c == "NULL") v = "NULL"
            }
            return v
        }
        $1 ~ /^[0-9]+$/ && NF >= 5 {
            if (!(($1) in seen)) { seen[$1] = 1; order[++n] = $1 }
            t[side, $1, rep] = $2; bw[side, $1, rep] = $4; ck[side, $1, rep] = $5
        }
        END {
            printf "%12s %11s %11s %11s %11s %9s %13s %9s %9s %8s %8s\n", "size(B)", "hccl_us",
                "mpi_us", "hccl_busbw", "mpi_busbw", "hccl/mpi", "range", "hccl/rtt", "mpi/rtt",
                "hccl", "mpi"
            print "data_size bus_bandwidth" > hmed
            print "data_size bus_bandwidth" > mmed
            lo_all = 1e300
            for (i = 1; i <= n; i++) {
                sz = order[i]; m = 0
                lo = 1e300; hi = 0
                for (k = 1; k <= R; k++) {
                    if (!(("hccl", sz, k) in t) || !(("mpi", sz, k) in t)) continue
                    m++
                    ht[m] = t["hccl", sz, k]; mt[m] = t["mpi", sz, k]
                    hb[m] = bw["hccl", sz, k]; mb[m] = bw["mpi", sz, k]
                    # The ratio of each repeat, computed as that of the medians below (so
                    # that the median lies within the range, whatever the printed precision).
                    r = (mb[m] > 0) ? hb[m] / mb[m] : ((ht[m] > 0) ? mt[m] / ht[m] : -1)
                    if (r >= 0) {
                        if (r < lo) lo = r
                        if (r > hi) hi = r
                    }
                }
                if (m == 0) continue
                if (hi == 0) lo = 0
                h_us = median(ht, m); m_us = median(mt, m)
                h_bw = median(hb, m); m_bw = median(mb, m)
                # Same bytes and bus factor on both sides: the bandwidth ratio; for a barrier
                # (no bytes) the inverse ratio of the times.
                ratio = (m_bw > 0) ? h_bw / m_bw : ((h_us > 0) ? m_us / h_us : 0)
                small = (sz + 0 <= lat + 0 && floor > 0)
                printf "%12d %11.2f %11.2f %11.4f %11.4f %9.2f %6.2f..%-5.2f %9s %9s %8s %8s\n",
                    sz, h_us, m_us, h_bw, m_bw, ratio, lo, hi,
                    small ? sprintf("%.1f", h_us / floor) : "-",
                    small ? sprintf("%.1f", m_us / floor) : "-",
                    verdict("hccl", sz), verdict("mpi", sz)
                if (verdict("hccl", sz) ~ /failed|missing/ || verdict("mpi", sz) ~ /failed|missing/)
                    failed = 1
                if (h_bw > 0) print sz, h_bw > hmed
                if (m_bw > 0) print sz, m_bw > mmed
                if (ratio > 0) {
                    lr += log(ratio); nr++
                    if (ratio < lo_all) { lo_all = ratio; lo_sz = sz }
                    if (ratio > hi_all) { hi_all = ratio; hi_sz = sz }
                }
            }
            if (nr) printf "geometric mean of hccl/mpi over %d sizes: %.2f\n", nr, exp(lr / nr)
            # One summary line for the caller on the last output line.
            printf "@summary %-15s %5d %8.2f %8.2f %12s %8.2f %12s %7s\n", op, nr,
                nr ? exp(lr / nr) : 0, nr ? lo_all : 0, nr ? lo_sz : "-", nr ? hi_all : 0,
                nr ? hi_sz : "-", failed ? "FAILED" : "ok"
        }' "${files[@]}")
    printf '%s\n' "$line" | grep -v '^@summary'
    sumline=$(printf '%s\n' "$line" | grep '^@summary' | cut -c10-)
    summary+=("$sumline")
    [[ $sumline == *FAILED* ]] && status=1
    if [ "$op" != barrier ]; then
        png=$out
        if [ "$multi" -eq 1 ]; then png=${out%.png}_$op.png; fi
        if [ ${#mems[@]} -gt 1 ]; then png=${png%.png}_$m.png; fi
        "$bin/hccl_plot" -o "$png" --title "$op $what, $m memory, $ranks processes, medians of $repeats" \
            "$work/$op.hccl_$m.median.txt=hccl ${op}_test" --ref "$work/$op.mpi.median.txt=Open MPI $(mpi_name "$op")" >&2
        echo "plot: $png"
    fi
    echo
    done
done

echo "== summary: hccl/mpi bus bandwidth (barrier: time), medians of $repeats repeats, $ranks processes"
printf '%-15s %5s %8s %8s %12s %8s %12s %7s\n' op sizes geomean min "at(B)" max "at(B)" checks
printf '%s\n' "${summary[@]}"
echo "raw outputs in $work" >&2
exit $status
