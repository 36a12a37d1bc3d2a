#!/usr/bin/env bash
# Times this working tree's libhccl.so against another revision's, and against Open MPI, inside
# one launch (bench/lib_ab.c): both builds run in the same processes, in alternating rounds, so
# they see the same placement of the ranks. Across launches small-message times here move by up
# to 2x; within one launch a few percent between builds shows.
#
# usage: scripts/ab_libs.sh [--base REV] [--ranks N] [--no-mpi] [LIB_AB_OPTION...]
#   REV: the revision to compare with (default HEAD), built from a temporary git worktree into
#       target/ab (kept, so that the next run with the same revision rebuilds little).
#   N: ranks (default 2; --oversubscribe lets them outnumber the cores).
#   --no-mpi: leave Open MPI out of the table.
#   LIB_AB_OPTION: passed on to lib_ab: -o OP -b BYTES -n ITERS -R ROUNDS -w WARMUP -r ROOT
#       (see bench/lib_ab.c; defaults: all_reduce, 16 B, 20 rounds of 10000 calls).
# The table's first row is the base revision, the second this working tree; median_vs_first
# below 1 means the working tree is faster. Exit status: lib_ab's (1 when a check failed).
set -euo pipefail
cd "$(dirname "$0")/.."

base=HEAD ranks=2 mpi=(mpi) pass=()
while [ $# -gt 0 ]; do
    case $1 in
        --base|--ranks)
            [ $# -ge 2 ] || { echo "ab_libs: $1 needs a value" >&2; exit 2; }
            if [ "$1" = --base ]; then base=$2; else ranks=$2; fi
            shift 2 ;;
        --no-mpi) mpi=(); shift ;;
        -h|--help) sed -n '7,15p' "$0" >&2; exit 2 ;;
        *) pass+=("$1"); shift ;;
    esac
done
[[ $ranks =~ ^[1-9][0-9]*$ ]] || { echo "ab_libs: ranks must be a positive integer" >&2; exit 2; }
rev=$(git rev-parse --verify --quiet "$base^{commit}") ||
    { echo "ab_libs: unknown revision '$base'" >&2; exit 2; }
for tool in mpirun mpicc; do
    command -v "$tool" >/dev/null ||
        { echo "ab_libs: $tool not found (scripts/setup.sh installs Open MPI)" >&2; exit 1; }
done

work=$(mktemp -d /tmp/ab_libs.XXXXXX)
tree="$work/tree"
cleanup() {
    git worktree remove --force "$tree" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

target=$(cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
echo "ab_libs: building $base ($rev) and the working tree" >&2
git worktree add --detach --quiet "$tree" "$rev"
CARGO_TARGET_DIR="$target/ab" cargo build --release -q -p hccl --lib \
    --manifest-path "$tree/Cargo.toml"
cargo build --release -q -p hccl --lib
# lib_ab loads each path once: two distinct files, named for the table.
cp "$target/ab/release/libhccl.so" "$work/base-${rev:0:10}.so"
cp "$target/release/libhccl.so" "$work/working-tree.so"
bench/build.sh "$work/bin" lib_ab

launch=(mpirun --oversubscribe -n "$ranks")
[ "$(id -u)" -eq 0 ] && launch=(mpirun --allow-run-as-root --oversubscribe -n "$ranks")
"${launch[@]}" "$work/bin/lib_ab" "${pass[@]}" \
    "$work/base-${rev:0:10}.so" "$work/working-tree.so" "${mpi[@]}"
