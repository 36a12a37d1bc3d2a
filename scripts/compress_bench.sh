#!/usr/bin/env bash
# Compressed vs uncompressed AllReduce across 2 network-namespace hosts × 2 rank processes
# (shared memory inside a host), host links shaped by the caller, one all_reduce_test run per
# method in the same session. Run as root from the repository root:
#
#   cargo build --release -p hccl-tools
#   scripts/netns.sh run 2 --rate 1gbit -- scripts/compress_bench.sh [SIZE] [METHODS...]
#
# SIZE defaults to 64M; METHODS to "none int8 fp16 bf16 topk:0.01". Each run prints its table
# (rel_l2_error: relative L2 error of the result against the exact sum; check_result: every
# rank got the same bytes); a summary line per method follows.
set -euo pipefail
size=${1:-64M}
shift || true
methods=("$@")
[ ${#methods[@]} -gt 0 ] || methods=(none int8 fp16 bf16 topk:0.01)
bin=${BIN:-target/release/all_reduce_test}
: "${NS_0:?run inside scripts/netns.sh run 2}" "${NS_1:?}" "${IP_0:?}"
port=$((20000 + RANDOM % 20000))
for m in "${methods[@]}"; do
    job=$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')
    pids=()
    out=$(mktemp)
    for rank in 0 1 2 3; do
        host=$((rank / 2))
        ns_var=NS_$host
        extra=()
        [ "$m" = none ] || extra=(--compress "$m")
        ip netns exec "${!ns_var}" env HCCL_ROOT_ADDR="$IP_0:$port" RANK=$rank WORLD_SIZE=4 \
            LOCAL_RANK=$((rank % 2)) LOCAL_WORLD_SIZE=2 HCCL_JOB_ID="$job" \
            "$bin" -b "$size" -e "$size" -n 5 -w 2 "${extra[@]}" \
            > "$( [ $rank = 0 ] && echo "$out" || echo /dev/null )" &
        pids+=($!)
    done
    status=0
    for p in "${pids[@]}"; do wait "$p" || status=$?; done
    echo "== $m"
    cat "$out"
    rm -f "$out"
    [ $status = 0 ] || { echo "method $m failed ($status)" >&2; exit $status; }
    port=$((port + 1))
done
