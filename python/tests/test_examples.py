"""Every example in python/examples runs and checks its own result."""

from __future__ import annotations

import os

import pytest

from launch import EXAMPLES, launch, torchrun


@pytest.mark.parametrize("example", ["numpy_allreduce.py", "ring_allreduce.py"])
def test_numpy_examples(nranks, example):
    ranks = launch(os.path.join(EXAMPLES, example), nranks, timeout=300)
    for r in ranks:
        assert r.code == 0, r.describe()
        assert f"rank {r.rank}/{nranks}" in r.out, r.describe()


@pytest.mark.parametrize("example", ["train_data_parallel.py", "train_ddp.py"])
def test_torch_examples_under_torchrun(nranks, example):
    pytest.importorskip("torch")
    p = torchrun(os.path.join(EXAMPLES, example), nranks, timeout=600)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-8000:]
    assert p.stdout.count("parameters identical") == nranks, p.stdout + p.stderr[-4000:]
