"""The torch.distributed backend "hccl": every operation compared with the gloo backend's
result in the same run, new_group, async Work and futures, coalesced and functional forms,
DTensor, other devices, re-initialisation (workers/torch_checks.py)."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

from launch import HERE, launch  # noqa: E402
from workers import checks  # noqa: E402

import workers.torch_checks  # noqa: E402,F401  (registers the checks)

NAMES = checks.names("workers.torch_checks")
_RUNS = {}


def job(n: int, debug: str = ""):
    key = (n, debug)
    if key not in _RUNS:
        env = {"TORCH_DISTRIBUTED_DEBUG": debug} if debug else {}
        _RUNS[key] = launch(os.path.join(HERE, "workers", "torch_checks.py"), n, env=env, timeout=900)
    return _RUNS[key]


@pytest.mark.parametrize("name", NAMES)
def test_torch(nranks, name):
    for r in job(nranks):
        assert r.report, f"rank {r.rank} wrote no report\n{r.describe()}"
        assert r.report.get(name) == "ok", f"rank {r.rank}: {r.report.get(name)}\n{r.describe()}"


def test_torch_ranks_exit_cleanly(nranks):
    for r in job(nranks):
        assert r.code == 0, r.describe()


def test_debug_detail_mode(nranks):
    """TORCH_DISTRIBUTED_DEBUG=DETAIL wraps the backend and checks every collective's
    fingerprint across ranks; it needs the backend's sequence numbers."""
    if nranks != 2:
        pytest.skip("one rank count is enough")
    for r in job(nranks, "DETAIL"):
        assert r.report, f"rank {r.rank} wrote no report\n{r.describe()}"
        bad = {k: v for k, v in r.report.items() if v != "ok"}
        assert not bad, f"rank {r.rank}: {bad}\n{r.describe()}"
