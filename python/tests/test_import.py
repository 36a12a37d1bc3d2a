"""The package imports and works without torch and numpy, and importing it imports neither;
the torch backend is registered through the package's entry point."""

from __future__ import annotations

import subprocess
import sys

import pytest


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_import_without_torch_or_numpy():
    p = run(
        "import sys\n"
        "sys.modules['torch'] = None\n"  # makes `import torch` fail, as if not installed
        "sys.modules['numpy'] = None\n"
        "import hccl\n"
        "hccl.init()\n"
        "b = bytearray(b'\\x01\\x02\\x03\\x04')\n"
        "hccl.allreduce(b, op=hccl.MAX)\n"
        "assert bytes(b) == b'\\x01\\x02\\x03\\x04', b\n"
        "hccl.finalize()\n"
        "print('ok')\n"
    )
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr


def test_import_does_not_import_torch():
    p = run("import sys, hccl; print('torch' in sys.modules, 'numpy' in sys.modules)")
    assert p.returncode == 0 and p.stdout.strip() == "False False", p.stdout + p.stderr


def test_entry_point_registers_the_backend():
    pytest.importorskip("torch")
    p = run(
        "from importlib.metadata import entry_points\n"
        "eps = [e for e in entry_points(group='torch.distributed.backends') if e.name == 'hccl']\n"
        "assert eps and eps[0].value == 'hccl.torch:register', eps\n"
        "import torch.distributed as dist\n"
        "dist.Backend._ensure_backend_registered('hccl')\n"
        "assert dist.Backend.backend_capability['hccl'] == ['cpu']\n"
        "print('ok')\n"
    )
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr


SINGLE_RANK = """
import os
for k in ["RANK", "WORLD_SIZE", "HCCL_RANK", "HCCL_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
          "PMI_RANK", "MASTER_ADDR", "MASTER_PORT"]:
    os.environ.pop(k, None)
import hccl

def raises(exc, word, fn):
    try:
        fn()
    except exc as e:
        assert word in str(e), e
    else:
        raise SystemExit(f"no {exc.__name__}")

c = hccl.init()
assert (c.rank, c.size) == (0, 1)
raises(RuntimeError, "already", hccl.init)
hccl.finalize()
raises(RuntimeError, "hccl.init", lambda: hccl.allreduce(bytearray(4)))
raises(ValueError, "both", lambda: hccl.init(size=2))
print("ok")
"""


def test_single_rank_without_a_launcher():
    p = run(SINGLE_RANK)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stdout + p.stderr
