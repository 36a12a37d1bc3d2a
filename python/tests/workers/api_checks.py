"""Checks of the Python API, run by every rank (see test_api.py). Every rank can compute every
other rank's input, so each result is compared with numpy's own reduction of all inputs."""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import hccl  # noqa: E402
from workers.checks import check, run_all  # noqa: E402

RANK = int(os.environ.get("RANK", "0"))
SIZE = int(os.environ.get("WORLD_SIZE", "1"))

INTS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
FLOATS = [np.float16, np.float32, np.float64]
OPS = {
    "sum": hccl.SUM,
    "prod": hccl.PROD,
    "max": hccl.MAX,
    "min": hccl.MIN,
    "avg": hccl.AVG,
}
COUNT = 37


def data(rank: int, dt, op: str, count: int = COUNT) -> np.ndarray:
    """Rank `rank`'s input: small values whose sums and products are exact in every type."""
    i = np.arange(count)
    if op == "prod":
        v = 1 + (i + rank) % 2
    else:
        v = (i * 7 + rank * 3) % 11
        if np.issubdtype(dt, np.signedinteger) or np.issubdtype(dt, np.floating):
            v = v - 5
    return v.astype(dt)


def reference(dt, op: str, count: int = COUNT) -> np.ndarray:
    xs = np.stack([data(r, dt, op, count).astype(np.float64) for r in range(SIZE)])
    f = {
        "sum": lambda a: a.sum(0),
        "prod": lambda a: a.prod(0),
        "max": lambda a: a.max(0),
        "min": lambda a: a.min(0),
        "avg": lambda a: a.sum(0) / SIZE,
    }[op]
    return f(xs).astype(dt)


def same(got: np.ndarray, want: np.ndarray, what: str) -> None:
    if got.dtype != want.dtype or got.shape != want.shape or not np.array_equal(got, want):
        raise AssertionError(f"{what}: got {got!r}, want {want!r}")


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """bfloat16 bit patterns of float32 values that bfloat16 holds exactly."""
    return (x.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def comm() -> hccl.Communicator:
    return hccl.default_communicator()


# -- every operation × type × reduce op -------------------------------------------------------


def _allreduce_case(dt, op: str) -> None:
    x = data(RANK, dt, op)
    hccl.allreduce(x, op=OPS[op])
    same(x, reference(dt, op), f"allreduce {np.dtype(dt).name} {op}")


for _dt in INTS + FLOATS:
    for _op in OPS:
        if _op == "avg" and _dt in INTS:
            continue

        def _case(dt=_dt, op=_op) -> None:
            _allreduce_case(dt, op)

        _case.__name__ = f"allreduce_{np.dtype(_dt).name}_{_op}"
        check(_case)

for _op in OPS:

    def _bf16(op=_op) -> None:
        x = to_bf16_bits(data(RANK, np.float32, op))
        hccl.allreduce(x, op=OPS[op], dtype=hccl.bfloat16)
        same(x, to_bf16_bits(reference(np.float32, op)), f"allreduce bfloat16 {op}")

    _bf16.__name__ = f"allreduce_bfloat16_{_op}"
    check(_bf16)


@check
def allreduce_out_leaves_input() -> None:
    x = data(RANK, np.float32, "sum")
    keep = x.copy()
    out = np.zeros_like(x)
    hccl.allreduce(x, op=hccl.SUM, out=out)
    same(out, reference(np.float32, "sum"), "out")
    same(x, keep, "input")


@check
def allreduce_reads_a_readonly_input_into_out() -> None:
    x = data(RANK, np.int32, "max")
    x.setflags(write=False)
    out = np.empty_like(x)
    hccl.allreduce(x, op=hccl.MAX, out=out)
    same(out, reference(np.int32, "max"), "out")


@check
def allreduce_empty() -> None:
    x = np.zeros(0, np.float32)
    hccl.allreduce(x)


for _dt in [np.int8, np.int32, np.uint64, np.float16, np.float64]:
    for _root in range(4):

        def _bcast(dt=_dt, root=_root) -> None:
            root %= SIZE
            x = data(RANK, dt, "sum")
            hccl.broadcast(x, root=root)
            same(x, data(root, dt, "sum"), f"broadcast from {root}")

        _bcast.__name__ = f"broadcast_{np.dtype(_dt).name}_root{_root}"
        check(_bcast)

for _op in OPS:
    for _dt in [np.int32, np.uint8, np.float32, np.float16]:
        if _op == "avg" and _dt in INTS:
            continue

        def _reduce(dt=_dt, op=_op) -> None:
            root = SIZE - 1
            x = data(RANK, dt, op)
            keep = x.copy()
            hccl.reduce(x, root=root, op=OPS[op])
            same(x, reference(dt, op) if RANK == root else keep, f"reduce {op}")

        _reduce.__name__ = f"reduce_{np.dtype(_dt).name}_{_op}"
        check(_reduce)


@check
def reduce_out() -> None:
    x = data(RANK, np.float64, "min")
    out = np.full_like(x, 99)
    hccl.reduce(x, root=0, op=hccl.MIN, out=out)
    if RANK == 0:
        same(out, reference(np.float64, "min"), "out on root")
    else:
        same(out, np.full_like(x, 99), "out elsewhere")


for _dt in [np.int8, np.int64, np.float16, np.float32, np.uint16]:

    def _allgather(dt=_dt) -> None:
        x = data(RANK, dt, "sum")
        out = np.zeros(SIZE * COUNT, dt)
        hccl.allgather(x, out)
        same(out, np.concatenate([data(r, dt, "sum") for r in range(SIZE)]), "allgather")

    _allgather.__name__ = f"allgather_{np.dtype(_dt).name}"
    check(_allgather)

for _op in OPS:
    for _dt in [np.int16, np.float32, np.float64]:
        if _op == "avg" and _dt in INTS:
            continue

        def _rs(dt=_dt, op=_op) -> None:
            x = data(RANK, dt, op, SIZE * COUNT)
            out = np.zeros(COUNT, dt)
            hccl.reduce_scatter(x, out, op=OPS[op])
            want = reference(dt, op, SIZE * COUNT)[RANK * COUNT : (RANK + 1) * COUNT]
            same(out, want, f"reduce_scatter {op}")

        _rs.__name__ = f"reduce_scatter_{np.dtype(_dt).name}_{_op}"
        check(_rs)


def _blocks(rank: int, dt, counts) -> np.ndarray:
    """Rank `rank`'s AlltoAll input: block p (counts[p] elements) holds 1000*rank + 10*p + i."""
    return np.concatenate(
        [(1000 * rank + 10 * p + np.arange(c)).astype(dt) for p, c in enumerate(counts)]
        or [np.zeros(0, dt)]
    )


@check
def alltoall_even() -> None:
    c = 3
    x = _blocks(RANK, np.int32, [c] * SIZE)
    out = np.zeros_like(x)
    hccl.alltoall(x, out)
    want = np.concatenate([(1000 * p + 10 * RANK + np.arange(c)).astype(np.int32) for p in range(SIZE)])
    same(out, want, "alltoall")


@check
def alltoallv_uneven() -> None:
    # Rank r sends r + p + 1 elements to rank p (and 0 to itself when r == p == 0 ... never).
    send = [RANK + p + 1 for p in range(SIZE)]
    recv = [p + RANK + 1 for p in range(SIZE)]
    x = _blocks(RANK, np.float64, send)
    out = np.zeros(sum(recv), np.float64)
    hccl.alltoallv(x, send, out, recv)
    want = np.concatenate(
        [(1000 * p + 10 * RANK + np.arange(recv[p])).astype(np.float64) for p in range(SIZE)]
    )
    same(out, want, "alltoallv")


@check
def alltoallv_with_displacements_and_empty_blocks() -> None:
    send = [0 if p == 0 else 2 for p in range(SIZE)]
    recv = [0 if RANK == 0 else 2 for _ in range(SIZE)]
    x = np.full(4 * SIZE, -1, np.int64)
    sd = [4 * p + 1 for p in range(SIZE)]
    for p in range(SIZE):
        x[sd[p] : sd[p] + send[p]] = 100 * RANK + p
    out = np.full(4 * SIZE, -7, np.int64)
    rd = [4 * p for p in range(SIZE)]
    hccl.alltoallv(x, send, out, recv, sd, rd)
    want = np.full(4 * SIZE, -7, np.int64)
    for p in range(SIZE):
        want[rd[p] : rd[p] + recv[p]] = 100 * p + RANK
    same(out, want, "alltoallv displs")


@check
def scatter_from_each_root() -> None:
    for root in range(SIZE):
        out = np.zeros(COUNT, np.float32)
        src = np.arange(SIZE * COUNT, dtype=np.float32) + 100 * root if RANK == root else None
        hccl.scatter(src, out, root=root)
        same(out, (np.arange(RANK * COUNT, (RANK + 1) * COUNT) + 100 * root).astype(np.float32), "scatter")


@check
def gather_to_each_root() -> None:
    for root in range(SIZE):
        x = data(RANK, np.int16, "sum")
        out = np.zeros(SIZE * COUNT, np.int16) if RANK == root else None
        hccl.gather(x, out, root=root)
        if RANK == root:
            same(out, np.concatenate([data(r, np.int16, "sum") for r in range(SIZE)]), "gather")


@check
def send_recv_ring() -> None:
    nxt, prv = (RANK + 1) % SIZE, (RANK - 1) % SIZE
    x = data(RANK, np.float32, "sum")
    got = np.zeros_like(x)
    if RANK % 2 == 0:
        hccl.send(x, dest=nxt)
        hccl.recv(got, src=prv)
    else:
        hccl.recv(got, src=prv)
        hccl.send(x, dest=nxt)
    same(got, data(prv, np.float32, "sum"), "recv")


@check
def isend_irecv_ring_large() -> None:
    # Everyone sends first: the two requests start together, so this cannot deadlock.
    nxt, prv = (RANK + 1) % SIZE, (RANK - 1) % SIZE
    x = np.arange(1 << 20, dtype=np.float32) + RANK
    got = np.zeros_like(x)
    s = hccl.isend(x, dest=nxt)
    r = hccl.irecv(got, src=prv)
    assert r.wait() is True and s.wait() is True
    assert s.test() and r.done and r.error is None
    same(got, np.arange(1 << 20, dtype=np.float32) + prv, "irecv")


@check
def barrier_and_async_barrier() -> None:
    hccl.barrier()
    req = hccl.barrier(async_op=True)
    assert req.wait(timeout=60)


@check
def async_collectives_complete_in_order() -> None:
    xs = [data(RANK, np.float32, "sum") for _ in range(5)]
    reqs = [hccl.allreduce(x, op=hccl.SUM, async_op=True) for x in xs]
    y = data(RANK, np.int64, "max")
    hccl.allreduce(y, op=hccl.MAX)  # issued after: runs after them on every rank
    for r in reqs:
        assert r.wait()
    for x in xs:
        same(x, reference(np.float32, "sum"), "async allreduce")
    same(y, reference(np.int64, "max"), "blocking after async")


@check
def async_every_collective() -> None:
    c = comm()
    a = data(RANK, np.float64, "avg")
    b = data(RANK, np.int32, "sum")
    g = np.zeros(SIZE * COUNT, np.int32)
    rs_in = data(RANK, np.float32, "sum", SIZE * COUNT)
    rs_out = np.zeros(COUNT, np.float32)
    reqs = [
        c.allreduce(a, hccl.AVG, async_op=True),
        c.broadcast(b, 0, async_op=True),
        c.allgather(data(RANK, np.int32, "sum"), g, async_op=True),
        c.reduce_scatter(rs_in, rs_out, hccl.SUM, async_op=True),
        c.barrier(async_op=True),
    ]
    for r in reqs:
        r.wait()
    same(a, reference(np.float64, "avg"), "async avg")
    same(b, data(0, np.int32, "sum"), "async bcast")
    same(g, np.concatenate([data(r, np.int32, "sum") for r in range(SIZE)]), "async allgather")
    same(rs_out, reference(np.float32, "sum", SIZE * COUNT)[RANK * COUNT : (RANK + 1) * COUNT], "async rs")


@check
def request_dropped_before_completion_keeps_its_buffer() -> None:
    x = data(RANK, np.float32, "sum")
    hccl.allreduce(x, async_op=True)  # request dropped at once
    hccl.barrier()  # issued after it, so it has finished when this returns
    same(x, reference(np.float32, "sum"), "dropped request")


@check
def wait_with_timeout_returns_false_then_true() -> None:
    if RANK > 1:
        return
    c = comm()
    # A second communicator carries the go-ahead, so rank 1 sends only after rank 0 has seen
    # its short wait run out.
    with c.split([0, 1]) as side:
        token = np.zeros(1, np.int8)
        if RANK == 0:
            x = np.zeros(4, np.float32)
            r = c.irecv(x, src=1)
            assert r.wait(timeout=0.05) is False
            assert not r.test() and r.error is None
            side.send(token, dest=1)
            assert r.wait(timeout=60) is True
            same(x, np.ones(4, np.float32), "late recv")
        else:
            side.recv(token, src=0)
            c.isend(np.ones(4, np.float32), dest=0).wait()


@check
def bytearray_and_memoryview_buffers() -> None:
    b = bytearray([RANK + 1] * 8)
    hccl.allreduce(b)
    assert bytes(b) == bytes([SIZE * (SIZE + 1) // 2] * 8), bytes(b)
    f = bytearray(np.full(4, RANK + 1, np.float32).tobytes())
    hccl.allreduce(memoryview(f).cast("f"))
    same(np.frombuffer(f, np.float32), np.full(4, SIZE * (SIZE + 1) / 2, np.float32), "memoryview")
    g = bytearray(np.full(4, RANK + 1, np.float32).tobytes())
    hccl.allreduce(g, dtype=hccl.float32)
    same(np.frombuffer(g, np.float32), np.full(4, SIZE * (SIZE + 1) / 2, np.float32), "dtype=")
    hccl.allreduce(g, dtype="float32", op=hccl.MAX)


@check
def multidimensional_arrays() -> None:
    x = np.full((3, 4, 5), RANK, np.int64)
    hccl.allreduce(x)
    same(x, np.full((3, 4, 5), SIZE * (SIZE - 1) // 2, np.int64), "3-d")


@check
def torch_tensors_through_the_api() -> None:
    try:
        import torch
    except ImportError:
        return
    for dt in [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.uint8]:
        t = torch.full((17,), RANK + 1, dtype=dt)
        hccl.allreduce(t)
        want = torch.full((17,), SIZE * (SIZE + 1) // 2, dtype=dt)
        assert torch.equal(t, want), (dt, t)
    p = torch.nn.Parameter(torch.full((3,), float(RANK)))
    hccl.broadcast(p, root=0)
    assert torch.equal(p.detach(), torch.zeros(3))
    t = torch.full((8,), float(RANK + 1), dtype=torch.bfloat16)
    hccl.allreduce(t, op=hccl.AVG)
    assert torch.equal(t, torch.full((8,), (SIZE + 1) / 2, dtype=torch.bfloat16)), t


@check
def sub_communicator() -> None:
    c = comm()
    members = [r for r in range(SIZE) if r % 2 == RANK % 2]
    with c.split(members) as sub:
        assert sub.size == len(members) and sub.rank == members.index(RANK)
        x = np.array([RANK], np.int64)
        sub.allreduce(x)
        same(x, np.array([sum(members)], np.int64), "sub allreduce")
        y = np.zeros(len(members), np.int64)
        sub.allgather(np.array([RANK], np.int64), y)
        same(y, np.array(members, np.int64), "sub allgather")
    # The parent still works, and so does a second split of the same ranks.
    with c.split(list(range(SIZE))[::-1]) as rev:
        assert rev.rank == SIZE - 1 - RANK
        z = np.array([1.5], np.float64)
        rev.allreduce(z)
        same(z, np.array([1.5 * SIZE]), "reversed sub")


@check
def communicator_from_root_info_over_the_default_one() -> None:
    c = comm()
    info = bytearray(hccl.get_root_info() if RANK == 0 else bytes(hccl.ROOT_INFO_BYTES))
    c.broadcast(info, root=0)
    with hccl.Communicator(SIZE, RANK, bytes(info), timeout=60) as c2:
        assert (c2.rank, c2.size) == (RANK, SIZE)
        assert abs(c2.timeout - 60) < 1e-9
        x = np.ones(3, np.float32)
        c2.allreduce(x)
        same(x, np.full(3, SIZE, np.float32), "root-info comm")
    try:
        c2.allreduce(np.ones(1, np.float32))
    except hccl.HcclUnavailable as e:
        assert isinstance(e, hccl.HcclError) and e.code == 7, e
    else:
        raise AssertionError("a destroyed communicator accepted an operation")
    c2.destroy()  # again: nothing


@check
def communicator_from_rank_table() -> None:
    import json
    import tempfile

    job = os.environ.get("HCCL_JOB_ID", "local")
    # One server, no device addresses: rank 0 rendezvouses on a local socket named after the
    # table, so the job id in server_id keeps concurrent runs apart.
    table = {
        "status": "completed",
        "version": "1.0",
        "server_count": "1",
        "server_list": [
            {
                "server_id": f"node-{job}",
                "device": [{"device_id": str(r), "rank_id": str(r)} for r in range(SIZE)],
            }
        ],
    }
    path = os.path.join(tempfile.gettempdir(), f"hccl-ranktable-{job}.json")
    if RANK == 0:
        with open(path, "w") as f:
            json.dump(table, f)
    hccl.barrier()
    with hccl.Communicator.from_rank_table(path, RANK, timeout=60) as c:
        assert (c.rank, c.size) == (RANK, SIZE)
        x = np.array([RANK + 1], np.int32)
        c.allreduce(x, op=hccl.PROD)
        same(x, np.array([np.prod(np.arange(1, SIZE + 1))], np.int32), "rank-table comm")
    hccl.barrier()
    if RANK == 0:
        os.remove(path)
    try:
        hccl.Communicator.from_rank_table(path + ".missing", RANK, timeout=5)
    except hccl.HcclError as e:
        assert "missing" in str(e), e
    else:
        raise AssertionError("a missing rank table was accepted")


# -- bad input: every rank raises the same error before anything is sent ----------------------


def _raises(exc, words, fn) -> None:
    try:
        fn()
    except exc as e:
        msg = str(e)
        for w in words:
            assert w in msg, f"{w!r} not in {msg!r}"
        return
    raise AssertionError(f"no {exc.__name__} raised")


@check
def bad_input_raises_naming_the_argument() -> None:
    a = np.zeros((4, 4), np.float32)
    _raises(ValueError, ["'buf'", "contiguous"], lambda: hccl.allreduce(a[:, 1]))
    ro = np.zeros(4, np.float32)
    ro.setflags(write=False)
    _raises(ValueError, ["'buf'", "read-only"], lambda: hccl.allreduce(ro))
    _raises(ValueError, ["'out'", "read-only"], lambda: hccl.allreduce(np.zeros(4, np.float32), out=ro))
    _raises(TypeError, ["'out'", "int32", "float32"],
            lambda: hccl.allreduce(np.zeros(4, np.float32), out=np.zeros(4, np.int32)))
    _raises(ValueError, ["'out'", "bytes"],
            lambda: hccl.allreduce(np.zeros(4, np.float32), out=np.zeros(5, np.float32)))
    _raises(ValueError, ["'out'"], lambda: hccl.allgather(np.zeros(4, np.float32), np.zeros(4, np.float32)))
    _raises(ValueError, ["'buf'", "size"],
            lambda: hccl.reduce_scatter(np.zeros(3, np.float32), np.zeros(2, np.float32)))
    _raises(ValueError, ["'root'", "out of range"], lambda: hccl.broadcast(np.zeros(2), root=SIZE))
    _raises(ValueError, ["'dest'"], lambda: hccl.isend(np.zeros(2), dest=-1))
    _raises(TypeError, ["AVG"], lambda: hccl.allreduce(np.zeros(2, np.int32), op=hccl.AVG))
    _raises(ValueError, ["'op'"], lambda: hccl.allreduce(np.zeros(2, np.int32), op=17))
    _raises(TypeError, ["'buf'", "str"], lambda: hccl.allreduce("abc"))
    _raises(TypeError, ["'buf'", "not a buffer"], lambda: hccl.allreduce(3.5))
    _raises(TypeError, ["'buf'", "element type"], lambda: hccl.allreduce(np.zeros(2, np.complex64)))
    _raises(ValueError, ["'buf'", "whole number"],
            lambda: hccl.allreduce(bytearray(6), dtype=hccl.float32))
    _raises(TypeError, ["'dtype'"], lambda: hccl.allreduce(bytearray(8), dtype="float7"))
    _raises(ValueError, ["'send_counts'"],
            lambda: hccl.alltoallv(np.zeros(4), [1], np.zeros(4), [1] * SIZE))
    _raises(ValueError, ["'out'", "beyond"],
            lambda: hccl.alltoallv(np.zeros(4 * SIZE), [1] * SIZE, np.zeros(1), [1] * SIZE))
    try:
        import torch
    except ImportError:
        return
    _raises(ValueError, ["'buf'", "meta"], lambda: hccl.allreduce(torch.zeros(3, device="meta")))
    _raises(ValueError, ["'buf'", "contiguous"], lambda: hccl.allreduce(torch.zeros(4, 4).t()))
    _raises(TypeError, ["'out'", "int32", "float32"],
            lambda: hccl.allreduce(torch.zeros(4), out=torch.zeros(4, dtype=torch.int32)))


@check
def still_usable_after_bad_input() -> None:
    x = data(RANK, np.float32, "sum")
    hccl.allreduce(x)
    same(x, reference(np.float32, "sum"), "after errors")


@check
def error_classes() -> None:
    assert issubclass(hccl.HcclTimeoutError, TimeoutError)
    assert issubclass(hccl.HcclConnectionError, ConnectionError)
    assert issubclass(hccl.HcclInvalidArgument, ValueError)
    for cls in (hccl.HcclTimeoutError, hccl.HcclConnectionError, hccl.HcclInvalidArgument,
                hccl.HcclNotSupported, hccl.HcclUnavailable):
        assert issubclass(cls, hccl.HcclError) and issubclass(cls, RuntimeError)


if __name__ == "__main__":
    run_all(setup=lambda: hccl.init(timeout=60), teardown=hccl.finalize)
