#!/usr/bin/env bash
# Runs every check of the project: formatting, lints, the API docs (no warnings), unit,
# integration and C/C++ tests, the Python package's pytest suite, and each fuzz target for 20
# seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo fmt --all --check
cargo clippy --workspace --all-targets -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps
cargo test --workspace
fi_info -p verbs >/dev/null 2>&1 || echo "SKIPPED: net plugin over the verbs provider (fi_info -p verbs finds no RDMA device)"
scripts/python_tests.sh
scripts/fuzz.sh 20
