"""One rank of the all-reduce benchmark (started by run.py under torchrun).

Times ``dist.all_reduce`` (fp32 sum) on backend hccl and on backend gloo in the same processes,
size by size, alternating the two in rounds so both see the same machine; and the Python API's
``Communicator.allreduce`` of an 8-byte numpy array. Rank 0 prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch
import torch.distributed as dist


def iters_for(nbytes: int, scale: float) -> int:
    return max(5, int(min(2000, (64 << 20) // max(nbytes, 1) // 4) * scale))


def time_block(fn, iters: int) -> float:
    dist.barrier(group=GLOO)
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / iters


def main() -> None:
    global GLOO
    p = argparse.ArgumentParser()
    p.add_argument("--sizes", default="8,1024,65536,1048576,16777216,67108864")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--scale", type=float, default=1.0, help="multiplies iteration counts")
    a = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("hccl")
    GLOO = dist.new_group(backend="gloo")
    rank, n = dist.get_rank(), dist.get_world_size()
    groups = {"hccl": None, "gloo": GLOO}
    rows = []
    for nbytes in (int(s) for s in a.sizes.split(",")):
        count = max(1, nbytes // 4)
        t = torch.full((count,), float(rank + 1))
        iters = iters_for(nbytes, a.scale)
        times = {k: [] for k in groups}
        for name, g in groups.items():
            for _ in range(3):
                dist.all_reduce(t, group=g)
        for _ in range(a.rounds):
            for name, g in groups.items():
                times[name].append(time_block(lambda g=g: dist.all_reduce(t, group=g), iters))
        ok = {}
        for name, g in groups.items():
            t.fill_(float(rank + 1))
            dist.all_reduce(t, group=g)
            ok[name] = bool(torch.all(t == n * (n + 1) / 2))
        row = {"bytes": count * 4, "iters": iters}
        for name in groups:
            dt = statistics.median(times[name])
            alg = count * 4 / dt / 1e9
            row[name] = {"us": dt * 1e6, "busbw": alg * 2 * (n - 1) / n, "ok": ok[name]}
        rows.append(row)
    # The Python API on the same communicator: hccl.Communicator.allreduce of 8 bytes.
    comm = dist.group.WORLD._get_backend(torch.device("cpu")).comm
    x = np.ones(2, np.float32)
    for _ in range(100):
        comm.allreduce(x)
    api = []
    for _ in range(a.rounds):
        api.append(time_block(lambda: comm.allreduce(x), int(5000 * a.scale) or 100))
    if rank == 0:
        print(json.dumps({"ranks": n, "rows": rows, "api_8B_us": statistics.median(api) * 1e6}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
