"""hccl: HCCL's collective communication for Python, on host CPUs.

Ranks are processes (or threads) of one or several hosts; they exchange through shared memory
inside a host and TCP between hosts. Run a script under a launcher (``hcclrun -n 4``,
``torchrun --nproc-per-node 4``, ``mpirun -np 4``, ``srun -n 4``) and::

    import numpy as np
    import hccl

    hccl.init()                                  # rank and size from the launcher
    grad = np.full(1024, hccl.get_rank(), dtype=np.float32)
    hccl.allreduce(grad, op=hccl.SUM)            # in place, on every rank
    right = (hccl.get_rank() + 1) % hccl.get_size()
    left = (hccl.get_rank() - 1) % hccl.get_size()
    got = np.empty_like(grad)
    reqs = [hccl.isend(grad, dest=right), hccl.irecv(got, src=left)]
    for r in reqs:
        r.wait()
    hccl.finalize()

Buffers are numpy arrays, torch CPU tensors, ``bytearray``/``memoryview`` or anything with the
buffer protocol or ``__dlpack__``; they must be C-contiguous. Operations work in place unless
``out=`` is given, block unless ``async_op=True`` (which returns a :class:`Request`), and
release the interpreter while the library waits or moves data. Errors from the library raise
:class:`HcclError` subclasses; a dead peer raises within the execution timeout.

``torch.distributed.init_process_group(backend="hccl")`` uses this library for CPU tensors
once the package is installed (see :mod:`hccl.torch`).
"""

from __future__ import annotations

import enum
from typing import Optional

from . import _native
from ._native import (
    ROOT_INFO_BYTES,
    Communicator,
    Request,
    allgather,
    allreduce,
    alltoall,
    alltoallv,
    barrier,
    broadcast,
    gather,
    get_root_info,
    irecv,
    isend,
    recv,
    reduce,
    reduce_scatter,
    scatter,
    send,
)
from .errors import (
    BY_CODE as _BY_CODE,
    HcclConnectionError,
    HcclError,
    HcclInvalidArgument,
    HcclNotSupported,
    HcclTimeoutError,
    HcclUnavailable,
)

_native._register_errors(HcclError, dict(_BY_CODE))

__version__ = "0.1.0"


class ReduceOp(enum.IntEnum):
    """Reduction operators. ``AVG`` is a sum followed by a division by the number of ranks
    (floating-point types only)."""

    SUM = 0
    PROD = 1
    MAX = 2
    MIN = 3
    AVG = 4


SUM = ReduceOp.SUM
PROD = ReduceOp.PROD
MAX = ReduceOp.MAX
MIN = ReduceOp.MIN
AVG = ReduceOp.AVG


class DataType(enum.IntEnum):
    """Element types, valued as HCCL's ``HcclDataType``. Operations take the element type from
    the buffer; ``dtype=`` reinterprets a raw buffer (for example a ``bytearray``)."""

    INT8 = 0
    INT16 = 1
    INT32 = 2
    FP16 = 3
    FP32 = 4
    INT64 = 5
    UINT64 = 6
    UINT8 = 7
    UINT16 = 8
    UINT32 = 9
    FP64 = 10
    BFP16 = 11

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return _ITEMSIZE[self]


_ITEMSIZE = {
    DataType.INT8: 1,
    DataType.UINT8: 1,
    DataType.INT16: 2,
    DataType.UINT16: 2,
    DataType.FP16: 2,
    DataType.BFP16: 2,
    DataType.INT32: 4,
    DataType.UINT32: 4,
    DataType.FP32: 4,
    DataType.INT64: 8,
    DataType.UINT64: 8,
    DataType.FP64: 8,
}

int8 = DataType.INT8
int16 = DataType.INT16
int32 = DataType.INT32
int64 = DataType.INT64
uint8 = DataType.UINT8
uint16 = DataType.UINT16
uint32 = DataType.UINT32
uint64 = DataType.UINT64
float16 = DataType.FP16
bfloat16 = DataType.BFP16
float32 = DataType.FP32
float64 = DataType.FP64


def init(
    size: Optional[int] = None,
    rank: Optional[int] = None,
    *,
    timeout: Optional[float] = None,
) -> Communicator:
    """Creates the default communicator that the module-level operations use, and returns it.

    With ``size`` and ``rank`` omitted they come from the launcher's variables (``hcclrun``'s
    ``HCCL_RANK``/``HCCL_WORLD_SIZE``, torchrun's ``RANK``/``WORLD_SIZE``, Open MPI's,
    MPICH's, Slurm's ``SLURM_PROCID``/``SLURM_NTASKS`` inside an ``srun`` step); without a
    launcher the process is a single rank. Rank 0 serves the root info to the others at
    ``HCCL_ROOT_ADDR`` or ``MASTER_ADDR``/``MASTER_PORT`` (``MASTER_PORT + 1`` under
    torchrun), under Slurm on the step's first node, else on this host, at a port derived
    from the job. ``timeout`` (seconds)
    bounds every wait for peers (default ``HCCL_CONNECT_TIMEOUT``/``HCCL_EXEC_TIMEOUT``).
    """
    if _native._get_default() is not None:
        raise RuntimeError("hccl is already initialised; call hccl.finalize() first")
    comm = Communicator.from_env(size, rank, timeout=timeout)
    _native._set_default(comm)
    return comm


def finalize() -> None:
    """Destroys the default communicator (after its outstanding operations). Does nothing if
    there is none."""
    comm = _native._get_default()
    _native._set_default(None)
    if comm is not None:
        comm.destroy()


def is_initialized() -> bool:
    """Whether :func:`init` has created the default communicator."""
    return _native._get_default() is not None


def default_communicator() -> Communicator:
    """The default communicator (raises if :func:`init` has not been called)."""
    comm = _native._get_default()
    if comm is None:
        raise RuntimeError("hccl is not initialised: call hccl.init() first")
    return comm


def get_rank() -> int:
    """This process's rank in the default communicator."""
    return default_communicator().rank


def get_size() -> int:
    """Number of ranks of the default communicator."""
    return default_communicator().size


get_world_size = get_size

__all__ = [
    "AVG",
    "MAX",
    "MIN",
    "PROD",
    "ROOT_INFO_BYTES",
    "SUM",
    "Communicator",
    "DataType",
    "HcclConnectionError",
    "HcclError",
    "HcclInvalidArgument",
    "HcclNotSupported",
    "HcclTimeoutError",
    "HcclUnavailable",
    "ReduceOp",
    "Request",
    "allgather",
    "allreduce",
    "alltoall",
    "alltoallv",
    "barrier",
    "bfloat16",
    "broadcast",
    "default_communicator",
    "finalize",
    "float16",
    "float32",
    "float64",
    "gather",
    "get_rank",
    "get_root_info",
    "get_size",
    "get_world_size",
    "init",
    "int16",
    "int32",
    "int64",
    "int8",
    "irecv",
    "is_initialized",
    "isend",
    "recv",
    "reduce",
    "reduce_scatter",
    "scatter",
    "send",
    "uint16",
    "uint32",
    "uint64",
    "uint8",
]
