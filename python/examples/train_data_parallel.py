"""Data-parallel training as the HCCL guides write it: torchrun environment,
``init_process_group("hccl")``, parameters broadcast from rank 0, gradients averaged with
``hccl.allreduce``, gradient accumulation over micro-batches.

    torchrun --nproc-per-node 4 train_data_parallel.py
"""

import torch
import torch.distributed as dist

import hccl

dist.init_process_group(backend="hccl", init_method="env://")
rank, world = dist.get_rank(), dist.get_world_size()
hccl.init()  # the same ranks, for hccl.allreduce on the gradients

torch.manual_seed(rank)  # different initial weights on purpose: the broadcast fixes them
model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
for param in model.parameters():
    dist.broadcast(param.data, src=0)

opt = torch.optim.SGD(model.parameters(), lr=0.01)
accumulation = 4
gen = torch.Generator().manual_seed(100 + rank)
for step in range(10):
    opt.zero_grad()
    for micro in range(accumulation):
        x = torch.randn(8, 20, generator=gen)
        y = x.sum(dim=1, keepdim=True)
        loss = torch.nn.functional.mse_loss(model(x), y) / accumulation
        loss.backward()  # gradients accumulate over the micro-batches
    for param in model.parameters():
        local_grad = param.grad
        hccl.allreduce(local_grad, op=hccl.SUM)
        local_grad /= world
    opt.step()
    if rank == 0:
        print(f"step {step} loss {loss.item() * accumulation:.4f}")

# Every rank must hold the same parameters.
flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
ref = flat.clone()
dist.broadcast(ref, src=0)
assert torch.equal(flat, ref), "parameters diverged across ranks"
print(f"rank {rank}: parameters identical on all {world} ranks")
hccl.finalize()
dist.destroy_process_group()
