#!/usr/bin/env bash
# Soak test (tests/suite/soak.rs): random collectives, sizes, data types, roots and communicators
# (a 4-rank world and its 2-rank sub-communicators) on 4 processes and on 4 threads, every
# result checked against the reference, a rank killed at random moments; survivors must fail
# within the timeouts and start the next job cleanly, and descriptors, threads and memfds
# must return to their baseline after every round. Prints one SOAK summary line.
#
# Usage: scripts/soak.sh DURATION     (seconds, or with a suffix: 90s, 10m, 1h)
set -euo pipefail
cd "$(dirname "$0")/.."
dur=${1:?usage: scripts/soak.sh DURATION (e.g. 600, 10m, 1h)}
case "$dur" in
    *h) secs=$((${dur%h} * 3600)) ;;
    *m) secs=$((${dur%m} * 60)) ;;
    *s) secs=${dur%s} ;;
    *) secs=$dur ;;
esac
export HCCL_SOAK_SECONDS="$secs" HCCL_EXEC_TIMEOUT=5 HCCL_CONNECT_TIMEOUT=10
cargo test --test suite --no-run
exec cargo test --test suite -- --ignored --exact soak::soak --nocapture
