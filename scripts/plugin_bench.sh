#!/usr/bin/env bash
# AllReduce through the net plugin beside the built-in TCP link, interleaved in the same run:
# 2 network-namespace hosts × 1 rank (scripts/netns.sh, needs root), unshaped veth, libfabric's
# tcp provider. Prints one all_reduce_test result line per round and link.
#
# Usage: scripts/plugin_bench.sh [SIZE [ROUNDS [ITERS [WARMUP]]]]   (default 64M 3 5 2)
# Build first: cargo build --release -p hccl-tools -p hccl-net-ofi
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
size=${1:-64M} rounds=${2:-3} iters=${3:-5} warm=${4:-2}
target="${CARGO_TARGET_DIR:-$root/target}/release"
bin="$target/all_reduce_test" plugin="$target/libhccl_net_ofi.so"
[ -x "$bin" ] && [ -f "$plugin" ] || { echo "build first: cargo build --release -p hccl-tools -p hccl-net-ofi" >&2; exit 1; }
if [ -z "${NS_0:-}" ]; then
    exec "$root/scripts/netns.sh" run 2 -- "$0" "$size" "$rounds" "$iters" "$warm"
fi
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
port=29500
# one SETTING: one job with HCCL_NET_PLUGIN=SETTING; prints rank 0's result line.
one() {
    port=$((port + 1))
    local common=(env "HCCL_NET_PLUGIN=$1" FI_PROVIDER=tcp "HCCL_ROOT_ADDR=$IP_0:$port"
        HCCL_WORLD_SIZE=2 "HCCL_JOB_ID=plugin-bench-$port")
    ip netns exec "$NS_1" "${common[@]}" HCCL_RANK=1 nice -n 5 "$bin" -b "$size" -e "$size" \
        -n "$iters" -w "$warm" >/dev/null 2>&1 &
    local peer=$!
    ip netns exec "$NS_0" "${common[@]}" HCCL_RANK=0 nice -n 5 "$bin" -b "$size" -e "$size" \
        -n "$iters" -w "$warm" >"$out" 2>&1
    wait "$peer"
    grep -E '^ *[0-9]' "$out" | tail -1
}
date -u +"measured %Y-%m-%d %H:%M UTC; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "columns: data_size(Bytes) aveg_time(us) alg_bandwidth(GB/s) bus_bandwidth(GB/s) check_result"
for r in $(seq "$rounds"); do
    echo "round $r built-in TCP: $(one none)"
    echo "round $r net plugin:   $(one "$plugin")"
done
