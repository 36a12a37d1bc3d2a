#!/usr/bin/env bash
# Runs the rank suites under AddressSanitizer and ThreadSanitizer, and the C programs of ctests/
# under valgrind; fails on any report.
#
#   scripts/sanitize.sh [asan] [tsan] [valgrind]      (all three when none is named)
#
# Not part of CI (scripts/test.sh): each sanitizer rebuilds the standard library and the crates
# with its instrumentation, so a full run takes well over half an hour on 2 cores (see the
# README for measured times).
#
# - asan, tsan: `cargo +nightly test` with RUSTFLAGS=-Zsanitizer=<s> and -Zbuild-std, over the
#   library's unit tests and the thread-rank and process-rank suites (ranks as threads of one
#   process, as processes over shared memory, as processes over TCP, the error paths, the small-message path,
#   the thread write path of large operations and eager rooted sends).
#   -Zbuild-std rebuilds std with the same instrumentation: without it ThreadSanitizer cannot
#   see the synchronisation inside std (Mutex, Condvar, channels, thread join) and reports
#   false races, and AddressSanitizer misses errors inside std. It needs the nightly rust-src
#   component (installed here when missing). The process-rank tests re-execute the sanitized
#   test binary, so every rank process is checked too. Instrumented ranks run many times
#   slower, more so on a loaded machine: HCCL_TEST_TIME_SCALE (default here 10) stretches the
#   tests' time budgets, the peer and connect timeouts they give child ranks, and the bounds
#   within which a rank must fail at such a timeout.
# - valgrind: builds the programs that tests/suite/ctests.rs runs, and the CANN-style thread
#   program and stream-overlap program of tests/suite/install_prefix.rs, against the debug libhccl.so (and
#   libascendcl.so) and runs each under memcheck (errors and definite leaks fail; the library's process-wide
#   registries, still reachable at exit, do not). fork_ranks.c is checked for errors only: its
#   children inherit the parent's rendezvous thread's allocations without the thread, which
#   memcheck reports as definitely lost in every child.
set -euo pipefail
cd "$(dirname "$0")/.."
modes=("$@")
[ ${#modes[@]} -gt 0 ] || modes=(asan tsan valgrind)
host=$(rustc -vV | sed -n 's/^host: //p')
# Modules of the integration test binary (tests/suite/) that run ranks in this process or in
# re-executed children: the collectives on threads, shared memory and TCP, the error paths and
# input bounds, the small-message path, the thread write path of large operations, and eager
# rooted sends. Libtest matches each filter as a substring of `module::test`.
suites=(coll_threads:: coll_shm:: coll_tcp:: faults:: bounds:: small_path:: large_threads:: eager::)
# The algo:: unit tests simulate schedules symbolically for up to thousands of ranks: pure
# arithmetic on safe Rust in one thread, which would take hours instrumented and has nothing
# for a sanitizer to find.
skip=(--skip algo::)

if ! rustup component list --toolchain nightly --installed 2>/dev/null | grep -q '^rust-src'; then
    rustup component add rust-src --toolchain nightly
fi

sanitized() {
    local san=$1 start
    shift
    start=$(date +%s)
    echo "sanitize: $san: building and testing"
    # --target keeps the flags away from build scripts; a target dir per sanitizer keeps the
    # instrumented builds apart from the normal ones.
    local flags="-Zsanitizer=$san -Cforce-frame-pointers=yes"
    export HCCL_TEST_TIME_SCALE=${HCCL_TEST_TIME_SCALE:-10}
    local cargo=(cargo +nightly test -Zbuild-std --target "$host" --target-dir "target/sanitize-$san"
        -p hccl)
    RUSTFLAGS=$flags "${cargo[@]}" --lib "$@" -- "${skip[@]}"
    RUSTFLAGS=$flags "${cargo[@]}" --test suite "$@" -- "${suites[@]}"
    echo "sanitize: $san: clean in $(($(date +%s) - start))s"
}

# Builds ctests/<src> against the debug libraries and runs it under memcheck.
#   memcheck SRC STD LEAK-CHECK "ARGS" [EXTRA COMPILER FLAGS...]
memcheck() {
    local src=$1 std=$2 leaks=$3 args=$4 lib=$PWD/target/debug cc=cc
    shift 4
    [[ $src == *.c ]] || cc=c++
    $cc -std="$std" -O2 -g -Iinclude "ctests/$src" -o "$out/${src%.*}" \
        -L"$lib" -Wl,-rpath,"$lib" -lhccl "$@"
    echo "sanitize: valgrind: $src $args"
    # shellcheck disable=SC2086 # ARGS is a list of words
    HCCL_CONNECT_TIMEOUT=120 HCCL_EXEC_TIMEOUT=600 \
        valgrind --quiet --error-exitcode=99 --trace-children=yes --leak-check="$leaks" \
        --show-leak-kinds=definite --errors-for-leak-kinds=definite "$out/${src%.*}" $args
}

valgrind_c() {
    local start
    start=$(date +%s)
    command -v valgrind >/dev/null || {
        echo "sanitize: valgrind is not installed (apt-get install valgrind)" >&2
        exit 1
    }
    cargo build -p hccl -p ascendcl --lib
    out=$(mktemp -d)
    trap 'rm -rf "$out"' RETURN
    memcheck abi_layout.c c11 full ""
    memcheck threads_collectives.c c99 full "" -pthread
    memcheck fork_ranks.c c99 no ""
    memcheck config_init.cpp c++11 full "" -pthread
    memcheck cann_threads.cc c++14 full "4" -lascendcl -pthread
    memcheck overlap.cc c++14 full "2 1" -lascendcl -pthread
    echo "sanitize: valgrind: clean in $(($(date +%s) - start))s"
}

for m in "${modes[@]}"; do
    case $m in
        asan) ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 sanitized address ;;
        tsan) TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 sanitized thread ;;
        valgrind) valgrind_c ;;
        *)
            echo "usage: $0 [asan] [tsan] [valgrind]" >&2
            exit 2
            ;;
    esac
done
