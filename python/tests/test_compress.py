"""Gradient compression from Python: hccl.allreduce(compression=...), comm.stats(), and DDP
training with the hccl.torch.hooks compression hooks (200 steps, fixed seed, final loss within
2% of the uncompressed run for fp16/bf16/int8 and 5% for top-k 1% with error feedback) on
backends "hccl" and "gloo" (workers/compress_checks.py)."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("numpy")

from launch import HERE, launch  # noqa: E402
from workers import checks  # noqa: E402

import workers.compress_checks  # noqa: E402,F401  (registers the checks)

NAMES = checks.names("workers.compress_checks")
_RUNS = {}


@pytest.mark.parametrize("name", NAMES)
def test_compress(name):
    # One job of 2 processes (the DDP set-up) serves every check.
    if not _RUNS:
        _RUNS[2] = launch(os.path.join(HERE, "workers", "compress_checks.py"), 2, timeout=900)
    for r in _RUNS[2]:
        assert r.report, f"rank {r.rank} wrote no report\n{r.describe()}"
        assert r.report.get(name) == "ok", f"rank {r.rank}: {r.report.get(name)}\n{r.describe()}"
