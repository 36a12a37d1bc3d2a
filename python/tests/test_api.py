"""The Python API: every operation × type × reduce op against numpy, in place and out=,
non-blocking requests, sub-communicators, buffer kinds and bad input; each check runs on every
rank of one job per rank count (workers/api_checks.py)."""

from __future__ import annotations

import os

import pytest

from launch import HERE, launch
from workers import checks

import workers.api_checks  # noqa: F401  (registers the checks)

NAMES = checks.names("workers.api_checks")
_RUNS = {}


def job(n: int):
    if n not in _RUNS:
        _RUNS[n] = launch(os.path.join(HERE, "workers", "api_checks.py"), n, timeout=600)
    return _RUNS[n]


@pytest.mark.parametrize("name", NAMES)
def test_api(nranks, name):
    ranks = job(nranks)
    for r in ranks:
        assert r.report, f"rank {r.rank} wrote no report\n{r.describe()}"
        assert r.report.get(name) == "ok", f"rank {r.rank}: {r.report.get(name)}\n{r.describe()}"


def test_ranks_exit_cleanly(nranks):
    for r in job(nranks):
        assert r.code == 0, r.describe()
