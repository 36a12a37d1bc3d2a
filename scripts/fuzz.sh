#!/usr/bin/env bash
# Builds every fuzz target of fuzz/ once (cargo-fuzz, nightly, AddressSanitizer, overflow
# checks on) and runs each for SECONDS (default 20), starting from the checked-in seeds and the
# corpus of earlier runs. A crash stops the script with the input saved under
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
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo +nightly fuzz build
if [ $# -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo +nightly fuzz list)
fi
for t in "${targets[@]}"; do
    mkdir -p "fuzz/corpus/$t"
    extra=()
    [ -d "fuzz/seeds/$t" ] && extra+=("fuzz/seeds/$t")
    opts=(-max_total_time="$secs" -max_len=8192 -timeout=10 -print_final_stats=1)
    [ -f "fuzz/dict/$t.dict" ] && opts+=(-dict="fuzz/dict/$t.dict")
    echo "fuzz: $t for ${secs}s"
    if ! cargo +nightly fuzz run "$t" "fuzz/corpus/$t" "${extra[@]}" -- "${opts[@]}" >"$log" 2>&1; then
        tail -n 60 "$log" >&2
        echo "fuzz: $t FAILED; the input is in fuzz/artifacts/$t/" >&2
        exit 1
    fi
    grep -E '^(Done|stat::number_of_executed_units)' "$log" || true
done
echo "fuzz: ${#targets[@]} targets x ${secs}s, $(($(date +%s) - start))s including the build"
