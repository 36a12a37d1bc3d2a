"""AllReduce of numpy arrays with nothing but hccl and numpy.

Run with any launcher, for example ``hcclrun -n 4 python numpy_allreduce.py`` or
``torchrun --nproc-per-node 4 numpy_allreduce.py``.
"""

import numpy as np

import hccl

hccl.init()
rank, size = hccl.get_rank(), hccl.get_size()

local = np.arange(8, dtype=np.float32) * (rank + 1)
total = np.empty_like(local)
hccl.allreduce(local, op=hccl.SUM, out=total)

expected = np.arange(8, dtype=np.float32) * (size * (size + 1) / 2)
assert np.array_equal(total, expected), (total, expected)
print(f"rank {rank}/{size}: sum = {total.tolist()}")
hccl.finalize()
