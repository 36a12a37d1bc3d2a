#!/usr/bin/env bash
# Builds the comparison programs of this directory into OUT_DIR: the MPI counterparts of the
# testers and the A/B of library builds (mpicc), the shared-memory ping-pong and the single-copy
# floor (cc).
#
# usage: bench/build.sh OUT_DIR [PROGRAM...]
#   PROGRAM: mpi_all_reduce, mpi_all_gather, mpi_broadcast, mpi_reduce_scatter, mpi_reduce,
#   mpi_alltoall, mpi_scatter, mpi_send_recv, mpi_barrier, shm_pingpong, cma_floor, lib_ab
#   (default: all of them)
# BENCH_WERROR=1 turns compiler warnings into errors (the tests build so).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
[ $# -ge 1 ] || { sed -n '6,9p' "$0" >&2; exit 2; }
out=$1
shift
progs=("$@")
if [ ${#progs[@]} -eq 0 ]; then
    progs=(shm_pingpong cma_floor lib_ab)
    for src in "$here"/mpi_*.c; do
        name=$(basename "$src" .c)
        [ "$name" = mpi_bench ] || progs+=("$name")
    done
fi
mkdir -p "$out"
flags=(-O2 -std=c11 -Wall -Wextra ${BENCH_WERROR:+-Werror})
pids=()
for p in "${progs[@]}"; do
    [ -f "$here/$p.c" ] && [ "$p" != mpi_bench ] || { echo "bench/build.sh: no program $p" >&2; exit 2; }
    case $p in
        mpi_*|lib_ab)
            command -v mpicc >/dev/null || { echo "bench/build.sh: mpicc not found (scripts/setup.sh installs libopenmpi-dev)" >&2; exit 1; }
            ;;
    esac
    case $p in
        mpi_*)
            mpicc "${flags[@]}" -o "$out/$p" "$here/$p.c" "$here/mpi_bench.c" &
            ;;
        lib_ab)
            mpicc "${flags[@]}" -I"$here/../include" -o "$out/$p" "$here/$p.c" -ldl &
            ;;
        *) cc "${flags[@]}" -o "$out/$p" "$here/$p.c" & ;;
    esac
    pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
exit $status
