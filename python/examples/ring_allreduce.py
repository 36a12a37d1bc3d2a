"""A hand-written ring AllReduce over hccl.isend/hccl.irecv on numpy arrays: a reduce-scatter
pass, then an allgather pass, each in size - 1 steps of one chunk to the right neighbour.

Run with any launcher, for example ``hcclrun -n 4 python ring_allreduce.py``.
"""

import numpy as np

import hccl

hccl.init()
rank, size = hccl.get_rank(), hccl.get_size()
right, left = (rank + 1) % size, (rank - 1) % size

data = np.random.default_rng(rank).integers(-100, 100, 1 << 16).astype(np.float32)
original = data.copy()
chunks = np.array_split(data, size)  # views into data
incoming = np.empty_like(chunks[0])

# Reduce-scatter: after size - 1 steps chunk (rank + 1) % size holds the full sum.
for step in range(size - 1):
    send_idx = (rank - step) % size
    recv_idx = (rank - step - 1) % size
    buf = incoming[: len(chunks[recv_idx])]
    s = hccl.isend(chunks[send_idx], dest=right)
    r = hccl.irecv(buf, src=left)
    s.wait()
    r.wait()
    chunks[recv_idx] += buf

# Allgather: pass the reduced chunks around the ring.
for step in range(size - 1):
    send_idx = (rank - step + 1) % size
    recv_idx = (rank - step) % size
    s = hccl.isend(chunks[send_idx], dest=right)
    r = hccl.irecv(chunks[recv_idx], src=left)
    s.wait()
    r.wait()

hccl.barrier()

# Check against the library's own AllReduce of the same data.
check = original.copy()
hccl.allreduce(check, op=hccl.SUM)
assert np.array_equal(data, check), "ring result differs from hccl.allreduce"
print(f"rank {rank}/{size}: ring AllReduce of {data.size} floats matches hccl.allreduce")
hccl.finalize()
