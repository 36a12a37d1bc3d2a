"""Starts N rank processes of a Python script the way torchrun would (RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) and collects what each rank reports."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from typing import Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(os.path.dirname(HERE), "examples")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Rank:
    rank: int
    code: Optional[int]
    out: str
    err: str
    report: Dict = field(default_factory=dict)

    def describe(self) -> str:
        return (
            f"--- rank {self.rank} exit {self.code}\n"
            f"--- stdout:\n{self.out[-4000:]}\n--- stderr:\n{self.err[-6000:]}"
        )


def launch(
    script: str,
    n: int,
    args: List[str] = (),
    env: Optional[Dict[str, str]] = None,
    timeout: float = 300.0,
    reap: tuple = (),
) -> List[Rank]:
    """Runs `script` as `n` ranks; each may write a JSON report to $HCCL_TEST_REPORT. Ranks
    in `reap` are killed once all the others have exited (a stopped victim, for example)."""
    tmp = tempfile.mkdtemp(prefix="hccl-pytest-")
    base = dict(os.environ)
    base.update(
        {
            "WORLD_SIZE": str(n),
            "LOCAL_WORLD_SIZE": str(n),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(free_port()),
            # hccl.init() serves its root info apart from torch's store on MASTER_PORT.
            "HCCL_ROOT_ADDR": f"127.0.0.1:{free_port()}",
            "HCCL_JOB_ID": uuid.uuid4().hex,
            "PYTHONUNBUFFERED": "1",
        }
    )
    for k in ("TORCHELASTIC_RUN_ID", "HCCL_RANK", "HCCL_WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
              "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE"):
        base.pop(k, None)
    # One intra-op thread per rank, as torchrun sets for several ranks per host: more would
    # oversubscribe the cores the ranks' collectives poll on.
    base.setdefault("OMP_NUM_THREADS", "1")
    base.update(env or {})
    procs = []
    for r in range(n):
        e = dict(base, RANK=str(r), LOCAL_RANK=str(r),
                 HCCL_TEST_REPORT=os.path.join(tmp, f"rank{r}.json"))
        procs.append(
            subprocess.Popen(
                [sys.executable, script, *args],
                env=e,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    deadline = time.monotonic() + timeout
    if reap:
        for r, p in enumerate(procs):
            if r not in reap:
                try:
                    p.wait(timeout=max(1.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    pass
        for r in reap:
            procs[r].kill()
    ranks = []
    for r, p in enumerate(procs):
        try:
            out, err = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out, err = p.communicate()
            err += f"\n[launch] killed after {timeout} s"
        rep = {}
        path = os.path.join(tmp, f"rank{r}.json")
        if os.path.exists(path):
            with open(path) as f:
                rep = json.load(f)
        ranks.append(Rank(r, p.returncode, out, err, rep))
    return ranks


def torchrun(script: str, n: int, args: List[str] = (), timeout: float = 300.0) -> subprocess.CompletedProcess:
    """Runs `script` under the real torchrun (python -m torch.distributed.run --standalone)."""
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    for k in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "HCCL_ROOT_ADDR"):
        env.pop(k, None)
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone",
         f"--nproc-per-node={n}", script, *args],
        env=env, capture_output=True, text=True, timeout=timeout,
    )
