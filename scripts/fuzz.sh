#!/usr/bin/env bash
# Builds every fuzz target of fuzz/ once (cargo-fuzz, nightly, AddressSanitizer, overflow
# checks on) and runs each for SECONDS (default 20), starting from the checked-in seeds and the
# corpus of earlier runs. Targets run side by side, one per core (FUZZ_JOBS overrides): each
# fuzzer is single-threaded. A crash fails the script with the input saved under
# fuzz/artifacts/<target>/: reproduce it with `cargo +nightly fuzz run <target> <file>` and turn
# it into a regular unit test beside the parser.
#
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]        (all targets when none is named)
# CI runs `scripts/fuzz.sh 20` from scripts/test.sh. Longer campaigns: scripts/fuzz.sh 1800 env
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
shift || true
start=$(date +%s)
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
cargo +nightly fuzz build
if [ $# -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo +nightly fuzz list)
fi
jobs=${FUZZ_JOBS:-$(nproc)}

# One target's run, its output kept in $logs/<target>.log and its exit status in .rc.
run_one() {
    local t=$1
    mkdir -p "fuzz/corpus/$t"
    local extra=()
    [ -d "fuzz/seeds/$t" ] && extra+=("fuzz/seeds/$t")
    local opts=(-max_total_time="$secs" -max_len=8192 -timeout=10 -print_final_stats=1)
    [ -f "fuzz/dict/$t.dict" ] && opts+=(-dict="fuzz/dict/$t.dict")
    local rc=0
    cargo +nightly fuzz run "$t" "fuzz/corpus/$t" "${extra[@]}" -- "${opts[@]}" \
        >"$logs/$t.log" 2>&1 || rc=$?
    echo "$rc" >"$logs/$t.rc"
}

running=0
for t in "${targets[@]}"; do
    if [ "$running" -ge "$jobs" ]; then
        wait -n || true
        running=$((running - 1))
    fi
    echo "fuzz: $t for ${secs}s"
    run_one "$t" &
    running=$((running + 1))
done
wait

failed=0
for t in "${targets[@]}"; do
    rc=$(cat "$logs/$t.rc" 2>/dev/null || echo missing)
    if [ "$rc" != 0 ]; then
        tail -n 60 "$logs/$t.log" >&2
        echo "fuzz: $t FAILED (exit $rc); the input is in fuzz/artifacts/$t/" >&2
        failed=1
        continue
    fi
    echo "fuzz: $t"
    grep -E '^(Done|stat::number_of_executed_units)' "$logs/$t.log" || true
done
[ "$failed" = 0 ] || exit 1
echo "fuzz: ${#targets[@]} targets x ${secs}s, ${jobs} at a time, $(($(date +%s) - start))s including the build"
