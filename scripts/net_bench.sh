#!/usr/bin/env bash
# Benchmarks the libfabric net plugin (libhccl_net_ofi.so) through its C interface beside
# libfabric's own fi_pingpong on the same provider, in the same run: two processes on this host
# (loopback) and two network-namespace hosts (scripts/netns.sh, needs root). 8 B ping-pong
# latency and 64 MiB ping-pong bandwidth; everything runs under nice. The plugin runs with its
# default endpoint type and again with HCCL_NET_OFI_ENDPOINT=rdm; fi_pingpong with connected
# (-e msg) and reliable-datagram (-e rdm) endpoints.
#
# Usage: scripts/net_bench.sh [--provider NAME] [--lat-iters N] [--bw-iters N] [--no-netns]
# (fi_rma_bw is not in Debian's libfabric-bin; fi_pingpong is the provider's reference.)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
prov=tcp lat=2000 bw=5 netns=1
while [ $# -gt 0 ]; do
    case "$1" in
        --provider) prov="$2"; shift 2 ;;
        --lat-iters) lat="$2"; shift 2 ;;
        --bw-iters) bw="$2"; shift 2 ;;
        --no-netns) netns=0; shift ;;
        -h|--help) sed -n '2,9p' "$0"; exit 0 ;;
        *) echo "net_bench.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
command -v fi_pingpong >/dev/null || { echo "fi_pingpong missing: run scripts/setup.sh" >&2; exit 1; }
cd "$root"
target="${CARGO_TARGET_DIR:-$root/target}"
cargo build --release -q -p hccl-net-ofi
bench="$target/release/net_bench"
cc -std=c11 -O2 -Wall -Wextra -Werror -Iinclude net-ofi/ctests/net_bench.c -o "$bench" -ldl
plugin="$target/release/libhccl_net_ofi.so"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export FI_PROVIDER="$prov"

# run_pair LABEL SERVER_PREFIX CLIENT_PREFIX SERVER_ADDR: the plugin, then fi_pingpong.
run_pair() {
    local label=$1 sp=$2 cp=$3 addr=$4 spid
    echo "== $label (provider $prov) =="
    for ept in default rdm; do
        local env=(env)
        [ "$ept" = rdm ] && env=(env HCCL_NET_OFI_ENDPOINT=rdm)
        echo "-- plugin, endpoint type: $ept"
        rm -f "$work/handle"
        $sp "${env[@]}" nice -n 10 "$bench" "$plugin" listen "$work/handle" "$lat" "$bw" >"$work/plugin.out" &
        spid=$!
        $cp "${env[@]}" nice -n 10 "$bench" "$plugin" connect "$work/handle" "$lat" "$bw"
        wait "$spid"
        cat "$work/plugin.out"
    done
    for size in 8 67108864; do
        local iters=$lat
        [ "$size" -gt 8 ] && iters=$bw
        for em in msg:msg rdm:msg rdm:tagged; do
            local ep=${em%%:*} mode=${em##*:}
            $sp nice -n 10 fi_pingpong -p "$prov" -e "$ep" -m "$mode" -I "$iters" -S "$size" >"$work/pp.out" 2>&1 &
            spid=$!
            # The server needs a moment to bind; the client retries until it answers.
            local ok=0
            for _ in $(seq 50); do
                if $cp nice -n 10 fi_pingpong -p "$prov" -e "$ep" -m "$mode" -I "$iters" -S "$size" "$addr" >"$work/ppc.out" 2>&1; then
                    ok=1
                    break
                fi
                sleep 0.2
            done
            wait "$spid" || true
            if [ "$ok" = 1 ]; then
                awk -v m="$ep/$mode" 'NR==2 { printf "fi_pingpong %-10s %9s B  %6s round trips  %10s us/xfer  %10s MB/s\n", m, $1, $2, $7, $6 }' "$work/ppc.out"
            else
                echo "fi_pingpong $ep/$mode $size B: failed: $(tail -1 "$work/ppc.out")"
            fi
        done
    done
}

date -u +"measured %Y-%m-%d %H:%M UTC; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
run_pair "loopback: 2 processes on this host" "" "" 127.0.0.1
if [ "$netns" = 1 ]; then
    scripts/netns.sh run 2 -- bash -c "$(declare -f run_pair); \
        bench='$bench' plugin='$plugin' work='$work' lat='$lat' bw='$bw' prov='$prov'; \
        run_pair \"2 namespace hosts (veth, unshaped)\" \"ip netns exec \$NS_0\" \"ip netns exec \$NS_1\" \"\$IP_0\""
fi
