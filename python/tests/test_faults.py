"""Faults: a rank killed or stalled in the middle of all-reduces makes every other rank raise
within the timeout (through torch.distributed and through the Python API)."""

from __future__ import annotations

import os

import pytest

from launch import HERE, launch

TIMEOUT = 5.0


@pytest.mark.parametrize("mode", ["torch", "api"])
@pytest.mark.parametrize("how", ["kill", "stop"])
def test_dead_or_stalled_peer_raises_on_every_survivor(nranks, mode, how):
    if mode == "torch":
        pytest.importorskip("torch")
    ranks = launch(
        os.path.join(HERE, "workers", "fault_peer.py"),
        nranks,
        [mode, how, str(TIMEOUT)],
        timeout=240,
        reap=(nranks - 1,),
    )
    for r in ranks[:-1]:
        rep = r.report
        assert rep.get("raised"), f"rank {r.rank} did not raise\n{r.describe()}"
        assert "HcclError" in rep["mro"], rep
        # Within the timeout (plus scheduling slack on a loaded machine).
        assert rep["elapsed"] < TIMEOUT + 10, rep
        if how == "stop":
            assert "HcclTimeoutError" in rep["mro"] or "HcclConnectionError" in rep["mro"], rep
