"""DistributedDataParallel over backend "hccl" (see test_ddp.py): 20 training steps of a small
MLP with hccl and with gloo from the same seed; no_sync() gradient accumulation against a
single-process computation over every rank's data."""

from __future__ import annotations

import datetime
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from workers.checks import check, run_all  # noqa: E402

RANK = int(os.environ.get("RANK", "0"))
SIZE = int(os.environ.get("WORLD_SIZE", "1"))
GLOO = None
STEPS = 20


def mlp() -> torch.nn.Module:
    torch.manual_seed(1234)
    return torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 4),
    )


def batch(rank: int, step: int):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(16, 32, generator=g), torch.randn(16, 4, generator=g)


def train(group) -> torch.nn.Module:
    model = mlp()
    if RANK != 0:
        # Different starting points: DDP's broadcast from rank 0 must make them equal.
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.5 * RANK)
    ddp = DDP(model, process_group=group, bucket_cap_mb=0.01)  # several buckets
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    for step in range(STEPS):
        x, y = batch(RANK, step)
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
    return model


def flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


@check
def ddp_20_steps_bit_identical_across_ranks_and_close_to_gloo() -> None:
    h = flat(train(None))
    g = flat(train(GLOO))
    every = [torch.zeros_like(h) for _ in range(SIZE)]
    dist.all_gather(every, h, group=GLOO)
    for r, other in enumerate(every):
        assert torch.equal(other, h), f"rank {r}'s parameters differ from rank {RANK}'s"
    rel = ((h - g).abs() / g.abs().clamp_min(1e-3)).max().item()
    assert torch.allclose(h, g, rtol=1e-5, atol=1e-6), f"hccl vs gloo: max relative diff {rel}"


@check
def no_sync_accumulation_matches_one_process_over_all_data() -> None:
    micro = 3
    model = mlp()
    ddp = DDP(model, bucket_cap_mb=0.01)
    for k in range(micro):
        x, y = batch(RANK, 100 + k)
        if k < micro - 1:
            with ddp.no_sync():
                torch.nn.functional.mse_loss(ddp(x), y).backward()
        else:
            torch.nn.functional.mse_loss(ddp(x), y).backward()
    got = [p.grad.clone() for p in model.parameters()]
    # One process, every rank's micro-batches: DDP averages over ranks, sums over micro-batches.
    ref = mlp()
    for r in range(SIZE):
        for k in range(micro):
            x, y = batch(r, 100 + k)
            torch.nn.functional.mse_loss(ref(x), y).backward()
    for a, p in zip(got, ref.parameters()):
        want = p.grad / SIZE
        assert torch.allclose(a, want, rtol=1e-5, atol=1e-6), (a - want).abs().max()


def setup() -> None:
    global GLOO
    dist.init_process_group("hccl", timeout=datetime.timedelta(seconds=60))
    GLOO = dist.new_group(backend="gloo")


if __name__ == "__main__":
    run_all(setup=setup, teardown=dist.destroy_process_group)
