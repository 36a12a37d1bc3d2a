"""A rank dies (SIGKILL) or stalls (SIGSTOP) in the middle of a stream of all-reduces; every
other rank must raise within the timeout (see test_faults.py).

usage: fault_peer.py {torch|api} {kill|stop} TIMEOUT_SECONDS
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import sys
import threading
import time

MODE, HOW, TIMEOUT = sys.argv[1], sys.argv[2], float(sys.argv[3])
RANK = int(os.environ["RANK"])
SIZE = int(os.environ["WORLD_SIZE"])
VICTIM = SIZE - 1

if MODE == "torch":
    import torch
    import torch.distributed as dist

    dist.init_process_group("hccl", timeout=datetime.timedelta(seconds=TIMEOUT))
    buf = torch.ones(4 << 20)

    def op() -> None:
        dist.all_reduce(buf)
else:
    import numpy as np

    import hccl

    hccl.init(timeout=TIMEOUT)
    buf = np.ones(4 << 20, np.float32)

    def op() -> None:
        hccl.allreduce(buf)

for _ in range(3):
    op()
if RANK == VICTIM:
    sig = signal.SIGKILL if HOW == "kill" else signal.SIGSTOP
    # Fault injection: the signal lands while the all-reduces below are running.
    threading.Timer(0.2, lambda: os.kill(os.getpid(), sig)).start()
report = {}
last = time.monotonic()
try:
    while True:
        op()
        last = time.monotonic()
        buf[:] = 1
except BaseException as e:  # noqa: BLE001 - reported
    report = {
        "raised": type(e).__name__,
        "mro": [c.__name__ for c in type(e).__mro__],
        "message": str(e),
        "elapsed": time.monotonic() - last,
    }
with open(os.environ["HCCL_TEST_REPORT"], "w") as f:
    json.dump(report, f)
os._exit(0)
