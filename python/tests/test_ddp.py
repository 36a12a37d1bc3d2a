"""DistributedDataParallel over "hccl": 20 steps bit-identical on every rank and within 1e-5
of gloo from the same seed; no_sync() accumulation against one process over all the data
(workers/ddp_checks.py)."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

from launch import HERE, launch  # noqa: E402
from workers import checks  # noqa: E402

import workers.ddp_checks  # noqa: E402,F401  (registers the checks)

NAMES = checks.names("workers.ddp_checks")
_RUNS = {}


@pytest.mark.parametrize("name", NAMES)
def test_ddp(nranks, name):
    if nranks not in _RUNS:
        _RUNS[nranks] = launch(os.path.join(HERE, "workers", "ddp_checks.py"), nranks, timeout=600)
    for r in _RUNS[nranks]:
        assert r.report, f"rank {r.rank} wrote no report\n{r.describe()}"
        assert r.report.get(name) == "ok", f"rank {r.rank}: {r.report.get(name)}\n{r.describe()}"
