#!/usr/bin/env bash
# Runs every check of the project: formatting, lints, unit, integration and C/C++ tests, and
# the Python package's pytest suite, and each fuzz target for 20 seconds.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo fmt --all --check
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace
scripts/python_tests.sh
scripts/fuzz.sh 20
