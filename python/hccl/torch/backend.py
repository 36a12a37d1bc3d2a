"""The c10d backend: a Python subclass of torch's ``Backend`` over an :class:`hccl.Communicator`.

Blocking calls (``asyncOp`` false in the options torch passes) run on the calling thread with
the interpreter released and return a finished Work. ``async_op=True`` calls go to the
communicator's in-order queue and progress without the caller; the Work's ``wait()`` blocks
until the operation is over and ``get_future()`` completes when it does. Sends and receives are
gathered into one batch that starts when the caller waits on one of them (or issues another
operation), so any exchange pattern the ranks mirror completes.

Semantics the library lacks are built here: AVG (a sum, then a division), ``gather`` (one batch
of point-to-point transfers to the root), lists of output tensors (one contiguous operation,
then copies), uneven ``all_to_all`` (AlltoAllV), the coalesced forms (one operation per tensor,
in order, one Work for all).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable, List, Optional, Sequence

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Backend as _C10dBackend
from torch._C._distributed_c10d import ReduceOp as _ReduceOp
from torch.futures import Future

import hccl
from hccl import Communicator

__all__ = ["ProcessGroupHCCL", "register"]

_RED = _ReduceOp.RedOpType
_OPS = {
    _RED.SUM: hccl.SUM,
    _RED.AVG: hccl.AVG,
    _RED.PRODUCT: hccl.PROD,
    _RED.MIN: hccl.MIN,
    _RED.MAX: hccl.MAX,
}


def _op(opts: Any) -> int:
    red = opts.reduceOp.op
    try:
        return int(_OPS[red])
    except KeyError:
        raise ValueError(
            f"backend hccl: reduce op {red.name} is not supported (SUM, AVG, PRODUCT, MIN, MAX)"
        ) from None


def _cpu(t: torch.Tensor, what: str) -> torch.Tensor:
    if t.device.type != "cpu":
        raise ValueError(
            f"backend hccl: {what} is on device '{t.device}'; hccl works on CPU tensors only"
        )
    return t


class _Work(dist.Work):
    """A Work over hccl requests (None: finished when created)."""

    def __init__(
        self,
        reqs: Sequence[Optional[hccl.Request]],
        result: List[torch.Tensor],
        after: Optional[Callable[[], None]] = None,
    ) -> None:
        super().__init__()
        self._reqs = [r for r in reqs if r is not None] if reqs else ()
        self._result = result
        self._after = after
        self._error: Optional[BaseException] = None

    def _finish(self) -> None:
        if self._after is not None:
            after, self._after = self._after, None
            after()

    def wait(self, timeout: timedelta = timedelta(0)) -> bool:
        limit = timeout.total_seconds() if timeout else None
        try:
            for r in self._reqs:
                if not r.wait(limit or None):
                    raise TimeoutError(
                        f"backend hccl: operation not finished within {timeout} (Work.wait)"
                    )
            self._finish()
        except BaseException as e:
            self._error = e
            raise
        return True

    def is_completed(self) -> bool:
        return all(r.test() for r in self._reqs)

    def is_success(self) -> bool:
        return self.is_completed() and self.exception() is None

    def exception(self) -> Optional[BaseException]:
        if self._error is not None:
            return self._error
        for r in self._reqs:
            if r.error is not None:
                return r.error
        return None

    def result(self) -> List[torch.Tensor]:
        return self._result

    def get_future(self) -> Future:
        fut: Future = Future()
        if not self._reqs:
            self._finish()
            fut.set_result(self._result)
            return fut
        left = [len(self._reqs)]
        failed: List[BaseException] = []

        def done(err: Optional[BaseException]) -> None:
            if err is not None:
                failed.append(err)
            left[0] -= 1
            if left[0] == 0:
                if failed:
                    fut.set_exception(failed[0])
                else:
                    try:
                        self._finish()
                        fut.set_result(self._result)
                    except BaseException as e:
                        fut.set_exception(e)

        for r in self._reqs:
            r._on_done(done)
        return fut


# The backends alive in this process. torch keeps only the C++ side of a backend that it wraps
# (TORCH_DISTRIBUTED_DEBUG=DETAIL wraps every one): without this reference the Python object,
# and with it every override, would be gone. Released by shutdown()/abort().
_LIVE: "set[ProcessGroupHCCL]" = set()


class ProcessGroupHCCL(_C10dBackend):
    """The ``"hccl"`` backend of one process group (CPU tensors)."""

    def __init__(self, store: dist.Store, rank: int, size: int, timeout: timedelta) -> None:
        super().__init__(rank, size)
        # Every member adds 1: the ranks of one init draw 1..size, those of a re-init (after
        # destroy_process_group, same store) size+1..2*size, so all agree on the generation.
        gen = (store.add("hccl/joined", 1) - 1) // size
        key = f"hccl/root_info/{gen}"
        if rank == 0:
            info = hccl.get_root_info()
            store.set(key, info)
        else:
            info = store.get(key)
        secs = timeout.total_seconds() if timeout else None
        self._comm = Communicator(size, rank, bytes(info), timeout=secs or None)
        self._rank = rank
        self._size = size
        self._seq = 0
        self._coalesced: Optional[List[Optional[hccl.Request]]] = None
        _LIVE.add(self)

    # -- identity -------------------------------------------------------------------------

    @property
    def comm(self) -> Communicator:
        """The hccl communicator of this group."""
        return self._comm

    def getBackendName(self) -> str:  # noqa: N802 (torch's name)
        return "hccl"

    @property
    def supports_coalescing(self) -> bool:
        return True

    def _get_sequence_number_for_group(self) -> int:
        return self._seq

    def _set_sequence_number_for_group(self) -> None:
        # Every rank starts at 0 and counts the same collectives.
        self._seq = 0

    def shutdown(self) -> None:
        _LIVE.discard(self)
        self._comm.destroy()

    def abort(self) -> None:
        _LIVE.discard(self)
        self._comm.destroy()

    # -- plumbing -------------------------------------------------------------------------

    def _work(
        self,
        reqs: Sequence[Optional[hccl.Request]],
        result: List[torch.Tensor],
        after: Optional[Callable[[], None]] = None,
    ) -> dist.Work:
        self._seq += 1
        if self._coalesced is not None:
            self._coalesced.extend(reqs)
            if after is not None:
                # Copies into output lists must follow the operation even when coalesced.
                for r in reqs:
                    if r is not None:
                        r.wait()
                after()
            return _Work([], result)
        w = _Work(reqs, result, after)
        if after is not None and not reqs:
            w._finish()
        return w

    def start_coalescing(self) -> None:
        self._coalesced = []

    def end_coalescing(self) -> dist.Work:
        reqs, self._coalesced = self._coalesced or [], None
        self._comm.flush()
        return _Work(reqs, [])

    # -- collectives ----------------------------------------------------------------------

    def allreduce(self, tensors: List[torch.Tensor], opts: Any) -> dist.Work:
        op = _op(opts)
        if not opts.asyncOp and self._coalesced is None:
            # The blocking fast path (dist.all_reduce without async_op): nothing to queue.
            # The extension checks the device and names it in its error.
            for t in tensors:
                self._comm.allreduce(t, op)
            self._seq += 1
            return _Work((), tensors)
        reqs = [self._comm.allreduce(t, op, async_op=True) for t in tensors]
        return self._work(reqs, tensors)

    def allreduce_coalesced(self, tensors: List[torch.Tensor], opts: Any) -> dist.Work:
        return self.allreduce(tensors, opts)

    def broadcast(self, tensors: List[torch.Tensor], opts: Any) -> dist.Work:
        a = opts.asyncOp
        root = opts.rootRank
        reqs = [self._comm.broadcast(t, root, async_op=a) for t in tensors]
        return self._work(reqs, tensors)

    def reduce(self, tensors: List[torch.Tensor], opts: Any) -> dist.Work:
        op = _op(opts)
        a = opts.asyncOp
        reqs = [
            self._comm.reduce(_cpu(t, "tensor"), opts.rootRank, op, async_op=a) for t in tensors
        ]
        return self._work(reqs, tensors)

    def allgather(
        self,
        outputs: List[List[torch.Tensor]],
        inputs: List[torch.Tensor],
        opts: Any,
    ) -> dist.Work:
        reqs = []
        copies = []
        for outs, inp in zip(outputs, inputs):
            inp = _cpu(inp, "input tensor").contiguous()
            if len(outs) != self._size:
                raise ValueError(
                    f"backend hccl: all_gather needs {self._size} output tensors, got {len(outs)}"
                )
            flat = torch.empty((self._size,) + tuple(inp.shape), dtype=inp.dtype)
            reqs.append(self._comm.allgather(inp, flat, async_op=opts.asyncOp))
            copies.append((flat, outs))

        def after() -> None:
            for flat, outs in copies:
                for i, o in enumerate(outs):
                    o.copy_(flat[i].view_as(o))

        return self._work(reqs, [o for outs in outputs for o in outs], after)

    def allgather_coalesced(
        self,
        outputs: List[List[torch.Tensor]],
        inputs: List[torch.Tensor],
        opts: Any,
    ) -> dist.Work:
        return self.allgather(outputs, inputs, opts)

    def all_gather_single(
        self, output: torch.Tensor, input: torch.Tensor, opts: Any
    ) -> dist.Work:
        req = self._comm.allgather(
            _cpu(input, "input tensor"), _cpu(output, "output tensor"), async_op=opts.asyncOp
        )
        return self._work([req], [output])

    # torch < 2.6 name of the same operation
    _allgather_base = all_gather_single

    def all_gather_single_coalesced(
        self, outputs: List[torch.Tensor], inputs: List[torch.Tensor], opts: Any
    ) -> dist.Work:
        reqs = [
            self._comm.allgather(_cpu(i, "input tensor"), _cpu(o, "output tensor"), async_op=True)
            for o, i in zip(outputs, inputs)
        ]
        return self._work(reqs, outputs)

    def gather(
        self,
        outputs: List[List[torch.Tensor]],
        inputs: List[torch.Tensor],
        opts: Any,
    ) -> dist.Work:
        root = opts.rootRank
        inp = _cpu(inputs[0], "input tensor").contiguous()
        if self._rank != root:
            req = self._comm.gather(inp, None, root, async_op=opts.asyncOp)
            return self._work([req], [])
        outs = outputs[0]
        if len(outs) != self._size:
            raise ValueError(
                f"backend hccl: gather needs {self._size} output tensors on the root, "
                f"got {len(outs)}"
            )
        flat = torch.empty((self._size,) + tuple(inp.shape), dtype=inp.dtype)
        req = self._comm.gather(inp, flat, root, async_op=opts.asyncOp)

        def after() -> None:
            for i, o in enumerate(outs):
                o.copy_(flat[i].view_as(o))

        return self._work([req], outs, after)

    def scatter(
        self,
        outputs: List[torch.Tensor],
        inputs: List[List[torch.Tensor]],
        opts: Any,
    ) -> dist.Work:
        root = opts.rootRank
        out = _cpu(outputs[0], "output tensor")
        buf = None
        if self._rank == root:
            ins = inputs[0]
            if len(ins) != self._size:
                raise ValueError(
                    f"backend hccl: scatter needs {self._size} input tensors on the root, "
                    f"got {len(ins)}"
                )
            buf = torch.cat([_cpu(t, "input tensor").reshape(-1) for t in ins])
        target = out if out.is_contiguous() else torch.empty_like(out, memory_format=torch.contiguous_format)
        req = self._comm.scatter(buf, target, root, async_op=opts.asyncOp)
        after = (lambda: out.copy_(target)) if target is not out else None
        return self._work([req], [out], after)

    def reduce_scatter(
        self,
        outputs: List[torch.Tensor],
        inputs: List[List[torch.Tensor]],
        opts: Any,
    ) -> dist.Work:
        op = _op(opts)
        reqs = []
        for out, ins in zip(outputs, inputs):
            if len(ins) != self._size:
                raise ValueError(
                    f"backend hccl: reduce_scatter needs {self._size} input tensors, got {len(ins)}"
                )
            buf = torch.cat([_cpu(t, "input tensor").reshape(-1) for t in ins])
            reqs.append(
                self._comm.reduce_scatter(buf, _cpu(out, "output tensor"), op, async_op=opts.asyncOp)
            )
        return self._work(reqs, outputs)

    def reduce_scatter_single(
        self, output: torch.Tensor, input: torch.Tensor, opts: Any
    ) -> dist.Work:
        req = self._comm.reduce_scatter(
            _cpu(input, "input tensor"),
            _cpu(output, "output tensor"),
            _op(opts),
            async_op=opts.asyncOp,
        )
        return self._work([req], [output])

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_single_coalesced(
        self, outputs: List[torch.Tensor], inputs: List[torch.Tensor], opts: Any
    ) -> dist.Work:
        op = _op(opts)
        reqs = [
            self._comm.reduce_scatter(
                _cpu(i, "input tensor"), _cpu(o, "output tensor"), op, async_op=True
            )
            for o, i in zip(outputs, inputs)
        ]
        return self._work(reqs, outputs)

    def alltoall(
        self, outputs: List[torch.Tensor], inputs: List[torch.Tensor], opts: Any
    ) -> dist.Work:
        if len(inputs) != self._size or len(outputs) != self._size:
            raise ValueError(
                f"backend hccl: all_to_all needs {self._size} input and output tensors"
            )
        send = torch.cat([_cpu(t, "input tensor").reshape(-1) for t in inputs])
        sc = [t.numel() for t in inputs]
        rc = [t.numel() for t in outputs]
        recv = torch.empty(sum(rc), dtype=send.dtype)
        req = self._comm.alltoallv(send, sc, recv, rc, async_op=opts.asyncOp)

        def after() -> None:
            at = 0
            for o, c in zip(outputs, rc):
                o.copy_(recv[at : at + c].view_as(o))
                at += c

        return self._work([req], outputs, after)

    def all_to_all_single(
        self,
        output: torch.Tensor,
        input: torch.Tensor,
        output_split_sizes: List[int],
        input_split_sizes: List[int],
        opts: Any,
    ) -> dist.Work:
        _cpu(input, "input tensor")
        _cpu(output, "output tensor")
        n = self._size
        if not output_split_sizes and not input_split_sizes:
            req = self._comm.alltoall(input, output, async_op=opts.asyncOp)
            return self._work([req], [output])
        in_row = input[0].numel() if input.dim() > 0 and input.shape[0] else 0
        out_row = output[0].numel() if output.dim() > 0 and output.shape[0] else 0
        in_rows = list(input_split_sizes) or [input.shape[0] // n] * n
        out_rows = list(output_split_sizes) or [output.shape[0] // n] * n
        sc = [r * in_row for r in in_rows]
        rc = [r * out_row for r in out_rows]
        req = self._comm.alltoallv(input, sc, output, rc, async_op=opts.asyncOp)
        return self._work([req], [output])

    def barrier(self, opts: Any) -> dist.Work:
        return self._work([self._comm.barrier(async_op=opts.asyncOp)], [])

    # -- point to point -------------------------------------------------------------------

    def send(self, tensors: List[torch.Tensor], dst: int, tag: int) -> dist.Work:
        reqs = [self._comm.isend(_cpu(t, "tensor"), dst) for t in tensors]
        return self._work(reqs, tensors)

    def recv(self, tensors: List[torch.Tensor], src: int, tag: int) -> dist.Work:
        reqs = [self._comm.irecv(_cpu(t, "tensor"), src) for t in tensors]
        return self._work(reqs, tensors)

    def recv_anysource(self, tensors: List[torch.Tensor], tag: int) -> dist.Work:
        raise NotImplementedError(
            "backend hccl: recv without a source rank is not supported; give src="
        )


def _create(store: dist.Store, rank: int, size: int, timeout: timedelta) -> ProcessGroupHCCL:
    return ProcessGroupHCCL(store, rank, size, timeout)


def register() -> None:
    """Registers ``"hccl"`` with torch.distributed for CPU tensors (idempotent). Called by
    torch through this package's entry point, and on ``import hccl.torch``."""
    if "HCCL" in dist.Backend._plugins:
        return
    dist.Backend.register_backend("hccl", _create, devices=["cpu"])
