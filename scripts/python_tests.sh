#!/usr/bin/env bash
# The Python package's tests: a virtual environment (target/pyvenv, reused when present) with
# numpy, pytest and torch from the package index, the package built and installed from source
# with `pip install ./python` (maturin builds the extension), then the pytest suite with 2 and
# 4 rank processes.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/pyvenv
python=${PYTHON:-python3}
if [ ! -x "$venv/bin/python" ]; then
    mkdir -p target
    "$python" -m venv "$venv"
fi
"$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
"$venv/bin/python" -m pip install -q --disable-pip-version-check numpy pytest torch
"$venv/bin/python" -m pip install -q --disable-pip-version-check ./python
# Run from the repository root so `import hccl` finds the installed package, not python/hccl.
"$venv/bin/pytest" -q -p no:cacheprovider python/tests --ranks 2,4 "$@"
