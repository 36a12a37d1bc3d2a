"""One rank of the DDP benchmark (started by run.py under torchrun): the step time (forward,
backward with DDP's gradient all-reduce, SGD step) of an MLP with about 10 M parameters, with
backend hccl and backend gloo in the same processes, alternating in rounds. Rank 0 prints one
JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(1024, 2048), torch.nn.ReLU(),
        torch.nn.Linear(2048, 2048), torch.nn.ReLU(),
        torch.nn.Linear(2048, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 1024),
    )


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batch", type=int, default=32)
    a = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("hccl")
    gloo = dist.new_group(backend="gloo")
    rank = dist.get_rank()
    nets = {"hccl": DDP(model()), "gloo": DDP(model(), process_group=gloo)}
    params = sum(q.numel() for q in nets["hccl"].parameters())
    opts = {k: torch.optim.SGD(m.parameters(), lr=1e-3) for k, m in nets.items()}
    x = torch.randn(a.batch, 1024, generator=torch.Generator().manual_seed(rank))
    y = torch.randn(a.batch, 1024, generator=torch.Generator().manual_seed(100 + rank))

    def step(k: str) -> None:
        opts[k].zero_grad()
        torch.nn.functional.mse_loss(nets[k](x), y).backward()
        opts[k].step()

    for k in nets:
        for _ in range(2):
            step(k)
    times = {k: [] for k in nets}
    for _ in range(a.rounds):
        for k in nets:
            dist.barrier(group=gloo)
            t0 = time.perf_counter()
            for _ in range(a.steps):
                step(k)
            times[k].append((time.perf_counter() - t0) / a.steps)
    same = all(
        torch.equal(u, v) or torch.allclose(u, v, rtol=1e-4, atol=1e-6)
        for u, v in zip(nets["hccl"].parameters(), nets["gloo"].parameters())
    )
    if rank == 0:
        print(json.dumps({
            "ranks": dist.get_world_size(),
            "params": params,
            "batch": a.batch,
            "hccl_ms": statistics.median(times["hccl"]) * 1e3,
            "gloo_ms": statistics.median(times["gloo"]) * 1e3,
            "params_match": same,
        }))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
