#!/usr/bin/env bash
# Runs our all_reduce_test and Open MPI's MPI_Allreduce on the same ranks and sizes, back to back
# under mpirun, then prints a ratio table and writes a PNG through hccl_plot.
#
# usage: scripts/compare_mpi.sh [-n RANKS] [-b MIN] [-e MAX] [-i ITERS] [-o OUT.png]
#   defaults: 2 ranks, 8 B .. 64M (factor 2), 20 iterations, /tmp/compare_mpi.png
# Environment: MPI_ALLREDUCE_SRC (default ../shared/bench/mpi_allreduce.c), HCCL_TOOLS_BIN (a
# directory holding all_reduce_test and hccl_plot; default: cargo build --release here).
set -euo pipefail
cd "$(dirname "$0")/.."
ranks=2 min=8 max=64M iters=20 out=/tmp/compare_mpi.png
while getopts "n:b:e:i:o:h" opt; do
    case $opt in
        n) ranks=$OPTARG ;;
        b) min=$OPTARG ;;
        e) max=$OPTARG ;;
        i) iters=$OPTARG ;;
        o) out=$OPTARG ;;
        *) sed -n '2,8p' "$0" >&2; exit 2 ;;
    esac
done

bytes() { # 64M -> 67108864, same 1024-based suffixes as the tester
    local v=${1^^}
    case $v in
        *K) echo $(( ${v%K} << 10 )) ;;
        *M) echo $(( ${v%M} << 20 )) ;;
        *G) echo $(( ${v%G} << 30 )) ;;
        *) echo $(( v )) ;;
    esac
}
min_b=$(bytes "$min") max_b=$(bytes "$max")

for tool in mpirun mpicc; do
    command -v $tool >/dev/null || { echo "compare_mpi: $tool not found (apt-get install openmpi-bin libopenmpi-dev)" >&2; exit 1; }
done
src=${MPI_ALLREDUCE_SRC:-../shared/bench/mpi_allreduce.c}
[ -f "$src" ] || { echo "compare_mpi: $src not found; set MPI_ALLREDUCE_SRC" >&2; exit 1; }
if [ -n "${HCCL_TOOLS_BIN:-}" ]; then
    bin=$HCCL_TOOLS_BIN
else
    cargo build --release -q -p hccl-tools --bin all_reduce_test --bin hccl_plot
    bin=${CARGO_TARGET_DIR:-target}/release
fi

work=$(mktemp -d /tmp/compare_mpi.XXXXXX)
mpicc -O2 -o "$work/mpi_allreduce" "$src"
launch=(mpirun --oversubscribe -n "$ranks")
[ "$(id -u)" -eq 0 ] && launch=(mpirun --allow-run-as-root --oversubscribe -n "$ranks")

echo "== hccl all_reduce_test, $ranks ranks, fp32 sum, $min .. $max, -n $iters" >&2
"${launch[@]}" "$bin/all_reduce_test" -b "$min" -e "$max" -f 2 -d fp32 -o sum -n "$iters" -w 3 \
    --csv "$work/hccl.csv" > "$work/hccl.txt"
echo "== Open MPI MPI_Allreduce, same ranks and sizes" >&2
"${launch[@]}" "$work/mpi_allreduce" "$min_b" "$max_b" "$iters" > "$work/mpi.txt"

# Join on the size: hccl CSV columns 6 (data_size), 8 (time), 10 (bus bw), 11 (check);
# mpi_allreduce columns 1 (bytes), 2 (time), 4 (bus bw), 5 (check).
awk 'NR == FNR { if (FNR > 1) { split($0, f, ","); t[f[6]] = f[8]; bw[f[6]] = f[10]; ck[f[6]] = f[11] } next }
    FNR == 1 {
        printf "%12s %12s %12s %12s %12s %10s %8s %6s\n", "size(B)", "hccl_us", "mpi_us",
            "hccl_busbw", "mpi_busbw", "hccl/mpi", "hccl", "mpi"
        next
    }
    ($1 in t) {
        # Same bytes and bus factor on both sides: the bandwidth ratio is the inverse time ratio.
        r = (t[$1] > 0) ? $2 / t[$1] : 0
        printf "%12d %12.2f %12.2f %12.4f %12.4f %10.2f %8s %6s\n", $1, t[$1], $2, bw[$1], $4, r, ck[$1], $5
        if (r > 0) { lr += log(r); n++ }
    }
    END { if (n) printf "geometric mean of hccl/mpi bus bandwidth over %d sizes: %.2f\n", n, exp(lr / n) }' \
    "$work/hccl.csv" "$work/mpi.txt"

"$bin/hccl_plot" -o "$out" --title "all_reduce fp32 sum, $ranks ranks" \
    "$work/hccl.csv=hccl ($ranks processes)" --ref "$work/mpi.txt=Open MPI MPI_Allreduce" >&2
echo "raw outputs in $work" >&2
