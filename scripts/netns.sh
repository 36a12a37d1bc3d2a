#!/usr/bin/env bash
# A test bed of K "hosts" on one machine: K network namespaces, each with one veth link
# ("eth0") plugged into a private bridge, addresses 198.18.0.1 … 198.18.0.K/24 (198.18.0.0/15 is
# the range set aside for benchmarking), optionally also 2001:2::1 … 2001:2::K/64 (2001:2::/48,
# the IPv6 benchmarking range of RFC 5180; nothing here touches any other range), optional tc
# shaping per host link. Every object is named with a per-invocation prefix so parallel test
# runs never collide, and everything made is removed again — on `down`, on exit of `run`
# (trap), and by `gc` for sets whose owning process died without cleaning up.
#
# Usage (root, iproute2):
#   netns.sh up K [--owner PID] [--ipv6] [--rate RATE] [--delay DELAY] [--shape I=RATE[/DELAY]]...
#       Creates the bed and prints shell assignments: NETNS_PREFIX, NETNS_HOSTS, NS_<i>, IP_<i>,
#       DEV_<i> (i = 0..K-1), and with --ipv6 also IP6_<i>. --owner: the bed is removed by `gc`
#       once PID has exited (default: the caller's parent). --ipv6: every host's eth0 also gets
#       the IPv6 address IP6_<i>, usable at once (no duplicate address detection). --rate/--delay
#       shape every host link, --shape one host link (both directions; tbf for rate, netem for
#       delay).
#   netns.sh down PREFIX          Removes the bed PREFIX (kills what still runs inside it).
#   netns.sh exec PREFIX I CMD... Runs CMD inside host I of bed PREFIX.
#   netns.sh run K [up options] -- CMD...
#       Creates a bed, runs CMD with the assignments above in its environment, removes the bed
#       however CMD ends, and exits with CMD's status.
#   netns.sh gc                   Removes beds whose owner has exited.
set -Eeuo pipefail

STATE=/run/hccl-netns
SUBNET=198.18.0
# Host i gets ${SUBNET6}<i+1>, the number written in decimal so that it reads like the IPv4
# one (2001:2::12 beside 198.18.0.12); distinct decimal numbers stay distinct as hex groups.
SUBNET6=2001:2::
IP=$(command -v ip || echo /usr/sbin/ip)
TC=$(command -v tc || echo /usr/sbin/tc)

die() {
    echo "netns.sh: $*" >&2
    exit 2
}

need_root() {
    [ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces)"
    [ -x "$IP" ] || die "iproute2 'ip' not found"
}

ns_name() { echo "${1}h${2}"; }
veth_name() { echo "${1}v${2}"; }

# Applies rate and/or delay to egress of DEV, run with the given command prefix.
shape_dev() {
    local dev=$1 rate=$2 delay=$3
    shift 3
    if [ -n "$delay" ]; then
        if ! "$@" "$TC" qdisc add dev "$dev" root handle 1: netem delay "$delay" 2>/dev/null; then
            die "cannot add a ${delay} delay on $dev: this kernel lacks the netem qdisc (CONFIG_NET_SCH_NETEM)"
        fi
        if [ -n "$rate" ]; then
            "$@" "$TC" qdisc add dev "$dev" parent 1:1 handle 10: tbf rate "$rate" burst 256kb latency 100ms
        fi
    elif [ -n "$rate" ]; then
        # Burst: enough for one 1 ms tick at 10 Gbit/s, so shaped rates are reached with ~64 KB
        # TSO segments; queue up to 100 ms before dropping.
        "$@" "$TC" qdisc add dev "$dev" root tbf rate "$rate" burst 256kb latency 100ms
    fi
}

cmd_down() {
    local p=$1
    [[ "$p" =~ ^hc[0-9a-f]{6}$ ]] || die "not a bed prefix: $p"
    local ns pids
    for ns in $("$IP" netns list 2>/dev/null | awk '{print $1}' | grep "^${p}h" || true); do
        pids=$("$IP" netns pids "$ns" 2>/dev/null || true)
        # Only processes of this bed's namespaces, each by its id.
        for pid in $pids; do kill -9 "$pid" 2>/dev/null || true; done
        "$IP" netns del "$ns" 2>/dev/null || true
    done
    for dev in $("$IP" -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep "^${p}" || true); do
        "$IP" link del "$dev" 2>/dev/null || true
    done
    rm -f "$STATE/$p.owner"
}

cmd_gc() {
    [ -d "$STATE" ] || return 0
    local f p owner
    for f in "$STATE"/*.owner; do
        [ -e "$f" ] || continue
        p=$(basename "$f" .owner)
        owner=$(cat "$f" 2>/dev/null || echo 0)
        if [ "$owner" -le 0 ] 2>/dev/null || ! kill -0 "$owner" 2>/dev/null; then
            cmd_down "$p"
        fi
    done
}

cmd_up() {
    local k=$1
    shift
    [[ "$k" =~ ^[0-9]+$ ]] && [ "$k" -ge 1 ] && [ "$k" -le 200 ] || die "host count must be 1..200, got $k"
    local owner=$PPID rate="" delay="" ipv6=0
    declare -A srate sdelay
    while [ $# -gt 0 ]; do
        case "$1" in
        --owner) owner=$2; shift 2 ;;
        --ipv6) ipv6=1; shift ;;
        --rate) rate=$2; shift 2 ;;
        --delay) delay=$2; shift 2 ;;
        --shape)
            local spec=$2 i rd
            i=${spec%%=*}
            rd=${spec#*=}
            [[ "$i" =~ ^[0-9]+$ ]] && [ "$i" -lt "$k" ] || die "--shape $spec: host index out of range"
            srate[$i]=${rd%%/*}
            if [[ "$rd" == */* ]]; then sdelay[$i]=${rd#*/}; fi
            shift 2
            ;;
        *) die "unknown option $1" ;;
        esac
    done
    mkdir -p "$STATE"
    cmd_gc
    local p
    p=hc$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')
    echo "$owner" >"$STATE/$p.owner"
    # From here on any failure (a failed command or die) leaves no half-made bed behind.
    trap 'rc=$?; [ $rc -eq 0 ] || cmd_down '"$p"' >/dev/null 2>&1' EXIT
    # No multicast snooping: IPv6 neighbour discovery uses multicast, which must reach every
    # host whether or not the bridge has seen its membership report yet.
    "$IP" link add "${p}br" type bridge mcast_snooping 0
    "$IP" link set "${p}br" up
    echo "NETNS_PREFIX=$p"
    echo "NETNS_HOSTS=$k"
    local i ns veth r d
    for ((i = 0; i < k; i++)); do
        ns=$(ns_name "$p" "$i")
        veth=$(veth_name "$p" "$i")
        "$IP" netns add "$ns"
        "$IP" link add "$veth" type veth peer name "${veth}p"
        "$IP" link set "${veth}p" netns "$ns"
        "$IP" -n "$ns" link set "${veth}p" name eth0
        "$IP" link set "$veth" master "${p}br"
        "$IP" link set "$veth" up
        "$IP" -n "$ns" link set lo up
        "$IP" -n "$ns" addr add "$SUBNET.$((i + 1))/24" dev eth0
        "$IP" -n "$ns" link set eth0 up
        if [ "$ipv6" -eq 1 ]; then
            # A machine whose defaults disable IPv6 may hand that on to new namespaces.
            "$IP" netns exec "$ns" sh -c 'echo 0 >/proc/sys/net/ipv6/conf/eth0/disable_ipv6' ||
                die "cannot enable IPv6 in host $i (kernel without IPv6?)"
            # nodad: the address is usable at once instead of "tentative" until duplicate
            # address detection ends (nothing else on this private bridge can own it).
            "$IP" -n "$ns" addr add "${SUBNET6}$((i + 1))/64" dev eth0 nodad
            # A check, not a wait: with nodad the address must already be usable. (The
            # link-local address may still be tentative; nothing here uses it.)
            if [ -n "$("$IP" -n "$ns" -6 addr show dev eth0 to "${SUBNET6}$((i + 1))/128" tentative)" ]; then
                die "IPv6 address of host $i is still tentative"
            fi
        fi
        r=${srate[$i]:-$rate}
        d=${sdelay[$i]:-$delay}
        if [ -n "$r$d" ]; then
            # Both directions of the host's link: into the host (bridge port) and out of it.
            shape_dev "$veth" "$r" "$d"
            shape_dev eth0 "$r" "$d" "$IP" netns exec "$ns"
        fi
        echo "NS_$i=$ns"
        echo "IP_$i=$SUBNET.$((i + 1))"
        if [ "$ipv6" -eq 1 ]; then echo "IP6_$i=${SUBNET6}$((i + 1))"; fi
        echo "DEV_$i=$veth"
    done
    trap - EXIT
}

main() {
    [ $# -ge 1 ] || die "usage: netns.sh up|down|exec|run|gc ..."
    local sub=$1
    shift
    need_root
    case "$sub" in
    up)
        [ $# -ge 1 ] || die "usage: netns.sh up K [options]"
        cmd_up "$@"
        ;;
    down)
        [ $# -eq 1 ] || die "usage: netns.sh down PREFIX"
        cmd_down "$1"
        ;;
    exec)
        [ $# -ge 3 ] || die "usage: netns.sh exec PREFIX I CMD..."
        local p=$1 i=$2
        shift 2
        exec "$IP" netns exec "$(ns_name "$p" "$i")" "$@"
        ;;
    run)
        [ $# -ge 1 ] || die "usage: netns.sh run K [options] -- CMD..."
        local args=()
        while [ $# -gt 0 ] && [ "$1" != "--" ]; do
            args+=("$1")
            shift
        done
        [ $# -ge 2 ] || die "run: missing -- CMD"
        shift
        local out
        out=$(cmd_up "${args[@]}" --owner $$)
        local prefix
        prefix=$(echo "$out" | sed -n 's/^NETNS_PREFIX=//p')
        trap 'cmd_down '"$prefix"'' EXIT
        trap 'exit 130' INT TERM
        local rc=0
        (
            while IFS= read -r line; do export "${line?}"; done <<<"$out"
            "$@"
        ) || rc=$?
        exit "$rc"
        ;;
    gc) cmd_gc ;;
    *) die "unknown command $sub" ;;
    esac
}

main "$@"
