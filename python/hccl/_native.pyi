"""Type stubs of the extension module (documentation lives in the docstrings)."""

from typing import Any, Dict, Optional, Sequence, Union

Buffer = Any
"""A C-contiguous buffer: numpy array, torch CPU tensor, bytearray, memoryview, or an object
with the buffer protocol or ``__dlpack__``."""

DType = Any
"""``hccl.DataType`` (or its code), a name such as ``"float32"``, a numpy or torch dtype."""

ROOT_INFO_BYTES: int

def get_root_info() -> bytes: ...
def _register_errors(base: type, by_code: dict) -> None: ...
def _set_default(comm: Optional["Communicator"]) -> None: ...
def _get_default() -> Optional["Communicator"]: ...

class Request:
    def wait(self, timeout: Optional[float] = None) -> bool: ...
    def test(self) -> bool: ...
    @property
    def done(self) -> bool: ...
    @property
    def error(self) -> Optional[BaseException]: ...
    def _on_done(self, callback: Any) -> None: ...

class Communicator:
    def __init__(
        self,
        size: int,
        rank: int,
        root_info: bytes,
        *,
        timeout: Optional[float] = None,
        name: Optional[str] = None,
    ) -> None: ...
    @staticmethod
    def from_env(
        size: Optional[int] = None, rank: Optional[int] = None, *, timeout: Optional[float] = None
    ) -> "Communicator": ...
    @staticmethod
    def from_rank_table(
        path: str, rank: int, *, timeout: Optional[float] = None
    ) -> "Communicator": ...
    def split(self, ranks: Sequence[int], *, timeout: Optional[float] = None) -> "Communicator": ...
    @property
    def rank(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def name(self) -> str: ...
    @property
    def timeout(self) -> Optional[float]: ...
    def destroy(self) -> None: ...
    def __enter__(self) -> "Communicator": ...
    def __exit__(self, *exc: Any) -> bool: ...
    def allreduce(
        self,
        buf: Buffer,
        op: int = 0,
        *,
        out: Optional[Buffer] = None,
        async_op: bool = False,
        dtype: Optional[DType] = None,
        compression: Optional[str] = None,
        residual: Optional[Buffer] = None,
        compress_level0: bool = False,
    ) -> Optional[Request]: ...
    def stats(self) -> Dict[str, Union[int, float]]: ...
    def reset_stats(self) -> None: ...
    def broadcast(
        self, buf: Buffer, root: int = 0, *, async_op: bool = False, dtype: Optional[DType] = None
    ) -> Optional[Request]: ...
    def reduce(
        self,
        buf: Buffer,
        root: int = 0,
        op: int = 0,
        *,
        out: Optional[Buffer] = None,
        async_op: bool = False,
        dtype: Optional[DType] = None,
    ) -> Optional[Request]: ...
    def allgather(
        self, buf: Buffer, out: Buffer, *, async_op: bool = False, dtype: Optional[DType] = None
    ) -> Optional[Request]: ...
    def reduce_scatter(
        self,
        buf: Buffer,
        out: Buffer,
        op: int = 0,
        *,
        async_op: bool = False,
        dtype: Optional[DType] = None,
    ) -> Optional[Request]: ...
    def alltoall(
        self, buf: Buffer, out: Buffer, *, async_op: bool = False, dtype: Optional[DType] = None
    ) -> Optional[Request]: ...
    def alltoallv(
        self,
        buf: Buffer,
        send_counts: Sequence[int],
        out: Buffer,
        recv_counts: Sequence[int],
        send_displs: Optional[Sequence[int]] = None,
        recv_displs: Optional[Sequence[int]] = None,
        *,
        async_op: bool = False,
        dtype: Optional[DType] = None,
    ) -> Optional[Request]: ...
    def scatter(
        self,
        buf: Optional[Buffer],
        out: Buffer,
        root: int = 0,
        *,
        async_op: bool = False,
        dtype: Optional[DType] = None,
    ) -> Optional[Request]: ...
    def gather(
        self,
        buf: Buffer,
        out: Optional[Buffer] = None,
        root: int = 0,
        *,
        async_op: bool = False,
        dtype: Optional[DType] = None,
    ) -> Optional[Request]: ...
    def send(self, buf: Buffer, dest: int) -> None: ...
    def recv(self, buf: Buffer, src: int) -> None: ...
    def isend(self, buf: Buffer, dest: int) -> Request: ...
    def irecv(self, buf: Buffer, src: int) -> Request: ...
    def flush(self) -> None: ...
    def barrier(self, *, async_op: bool = False) -> Optional[Request]: ...

def allreduce(
    buf: Buffer,
    op: int = 0,
    *,
    out: Optional[Buffer] = None,
    async_op: bool = False,
    dtype: Optional[DType] = None,
    compression: Optional[str] = None,
    residual: Optional[Buffer] = None,
    compress_level0: bool = False,
) -> Optional[Request]: ...
def broadcast(
    buf: Buffer, root: int = 0, *, async_op: bool = False, dtype: Optional[DType] = None
) -> Optional[Request]: ...
def reduce(
    buf: Buffer,
    root: int = 0,
    op: int = 0,
    *,
    out: Optional[Buffer] = None,
    async_op: bool = False,
    dtype: Optional[DType] = None,
) -> Optional[Request]: ...
def allgather(
    buf: Buffer, out: Buffer, *, async_op: bool = False, dtype: Optional[DType] = None
) -> Optional[Request]: ...
def reduce_scatter(
    buf: Buffer, out: Buffer, op: int = 0, *, async_op: bool = False, dtype: Optional[DType] = None
) -> Optional[Request]: ...
def alltoall(
    buf: Buffer, out: Buffer, *, async_op: bool = False, dtype: Optional[DType] = None
) -> Optional[Request]: ...
def alltoallv(
    buf: Buffer,
    send_counts: Sequence[int],
    out: Buffer,
    recv_counts: Sequence[int],
    send_displs: Optional[Sequence[int]] = None,
    recv_displs: Optional[Sequence[int]] = None,
    *,
    async_op: bool = False,
    dtype: Optional[DType] = None,
) -> Optional[Request]: ...
def scatter(
    buf: Optional[Buffer],
    out: Buffer,
    root: int = 0,
    *,
    async_op: bool = False,
    dtype: Optional[DType] = None,
) -> Optional[Request]: ...
def gather(
    buf: Buffer,
    out: Optional[Buffer] = None,
    root: int = 0,
    *,
    async_op: bool = False,
    dtype: Optional[DType] = None,
) -> Optional[Request]: ...
def send(buf: Buffer, dest: int) -> None: ...
def recv(buf: Buffer, src: int) -> None: ...
def isend(buf: Buffer, dest: int) -> Request: ...
def irecv(buf: Buffer, src: int) -> Request: ...
def barrier(*, async_op: bool = False) -> Optional[Request]: ...
