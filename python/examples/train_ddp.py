"""The same model trained with DistributedDataParallel over backend "hccl", accumulating
gradients with ``no_sync()``. No ``import hccl``: torch finds the backend by its entry point.

    torchrun --nproc-per-node 4 train_ddp.py
"""

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group(backend="hccl")
rank, world = dist.get_rank(), dist.get_world_size()

torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
accumulation = 4
gen = torch.Generator().manual_seed(100 + rank)
for step in range(10):
    opt.zero_grad()
    for micro in range(accumulation):
        x = torch.randn(8, 20, generator=gen)
        y = x.sum(dim=1, keepdim=True)
        if micro < accumulation - 1:
            with model.no_sync():  # accumulate locally, no communication
                (torch.nn.functional.mse_loss(model(x), y) / accumulation).backward()
        else:  # the last micro-batch all-reduces the accumulated gradients
            loss = torch.nn.functional.mse_loss(model(x), y) / accumulation
            loss.backward()
    opt.step()
    if rank == 0:
        print(f"step {step} loss {loss.item() * accumulation:.4f}")

flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
ref = flat.clone()
dist.broadcast(ref, src=0)
assert torch.equal(flat, ref), "parameters diverged across ranks"
print(f"rank {rank}: parameters identical on all {world} ranks")
dist.destroy_process_group()
