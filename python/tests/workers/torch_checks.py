"""Checks of the torch.distributed backend "hccl", run by every rank (see test_torch.py).

The default group uses backend "hccl" (initialised without `import hccl`: torch finds it
through the package's entry point); a gloo group of the same ranks computes the reference for
every operation in the same run.
"""

from __future__ import annotations

import datetime
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

from workers.checks import check, run_all  # noqa: E402

RANK = int(os.environ.get("RANK", "0"))
SIZE = int(os.environ.get("WORLD_SIZE", "1"))
GLOO = None  # the reference group, set in setup()
R = dist.ReduceOp


def inp(rank: int, dt: torch.dtype, n: int = 29, op=None) -> torch.Tensor:
    i = torch.arange(n)
    if op == R.PRODUCT:
        v = 1 + (i + rank) % 2
    else:
        v = (i * 5 + rank * 3) % 9 - (4 if dt.is_floating_point or dt.is_signed else 0)
    return v.to(dt)


def same(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    if a.dtype != b.dtype or a.shape != b.shape or not torch.equal(a, b):
        raise AssertionError(f"{what}: hccl {a!r} vs reference {b!r}")


def both(fn):
    """Runs fn(group) on the hccl default group and on the gloo group; returns both results."""
    return fn(None), fn(GLOO)


DTYPES = [torch.float32, torch.float64, torch.int32, torch.int64, torch.float16, torch.bfloat16,
          torch.int8, torch.uint8]

for _dt in DTYPES:
    for _op in [R.SUM, R.PRODUCT, R.MIN, R.MAX, R.AVG]:
        if _op == R.AVG and not _dt.is_floating_point:
            continue

        def _ar(dt=_dt, op=_op) -> None:
            def run(g):
                t = inp(RANK, dt, op=op)
                if g is GLOO and op == R.AVG:
                    # gloo has no AVG: its sum divided by the rank count is the reference.
                    dist.all_reduce(t, R.SUM, group=g)
                    return (t.double() / SIZE).to(dt)
                if g is GLOO and dt in (torch.float16, torch.bfloat16):
                    # Reference in float32, rounded once, as hccl's kernels do.
                    t32 = t.float()
                    dist.all_reduce(t32, op, group=g)
                    return t32.to(dt)
                dist.all_reduce(t, op, group=g)
                return t

            a, b = both(run)
            same(a, b, f"all_reduce {dt} {op}")

        _ar.__name__ = f"all_reduce_{str(_dt)[6:]}_{str(_op).split('.')[-1]}"
        check(_ar)


@check
def broadcast_from_every_root() -> None:
    for root in range(SIZE):
        for dt in (torch.float32, torch.int64, torch.bfloat16):
            def run(g, root=root, dt=dt):
                t = inp(RANK, dt)
                dist.broadcast(t, src=root, group=g)
                return t
            a, b = both(run)
            same(a, b, f"broadcast {root} {dt}")


@check
def reduce_to_every_root() -> None:
    for root in range(SIZE):
        for op in (R.SUM, R.MAX):
            def run(g, root=root, op=op):
                t = inp(RANK, torch.float32)
                dist.reduce(t, dst=root, op=op, group=g)
                return t
            a, b = both(run)
            if RANK == root:
                same(a, b, f"reduce {root} {op}")


@check
def all_gather_list() -> None:
    def run(g):
        outs = [torch.zeros(3, 4, dtype=torch.int32) for _ in range(SIZE)]
        dist.all_gather(outs, inp(RANK, torch.int32, 12).view(3, 4), group=g)
        return torch.stack(outs)
    a, b = both(run)
    same(a, b, "all_gather")


@check
def all_gather_into_tensor() -> None:
    def run(g):
        out = torch.zeros(SIZE * 7, dtype=torch.float64)
        dist.all_gather_into_tensor(out, inp(RANK, torch.float64, 7), group=g)
        return out
    a, b = both(run)
    same(a, b, "all_gather_into_tensor")


@check
def reduce_scatter_list() -> None:
    def run(g):
        out = torch.zeros(5, dtype=torch.float32)
        ins = [inp(RANK * 10 + p, torch.float32, 5) for p in range(SIZE)]
        if g is GLOO:
            # Reference: all_reduce of the concatenation, own block.
            full = torch.cat(ins)
            dist.all_reduce(full, group=g)
            return full[RANK * 5 : (RANK + 1) * 5].clone()
        dist.reduce_scatter(out, ins, group=g)
        return out
    a, b = both(run)
    same(a, b, "reduce_scatter")


@check
def reduce_scatter_tensor_sum_and_avg() -> None:
    for op in (R.SUM, R.AVG, R.MAX):
        def run(g, op=op):
            x = inp(RANK, torch.float32, SIZE * 6)
            if g is GLOO:
                dist.all_reduce(x, R.SUM if op == R.AVG else op, group=g)
                blk = x[RANK * 6 : (RANK + 1) * 6].clone()
                return blk / SIZE if op == R.AVG else blk
            out = torch.zeros(6)
            dist.reduce_scatter_tensor(out, x, op=op, group=g)
            return out
        a, b = both(run)
        same(a, b, f"reduce_scatter_tensor {op}")


@check
def all_to_all_list_even() -> None:
    def run(g):
        ins = [torch.full((3,), float(100 * RANK + p)) for p in range(SIZE)]
        outs = [torch.zeros(3) for p in range(SIZE)]
        dist.all_to_all(outs, ins, group=g)
        return torch.cat(outs)
    a, b = both(run)
    same(a, b, "all_to_all")


@check
def all_to_all_list_uneven() -> None:
    # gloo needs equal sizes here: the reference is what every rank knows the others send.
    ins = [torch.full((RANK + p + 1,), float(100 * RANK + p)) for p in range(SIZE)]
    outs = [torch.zeros(p + RANK + 1) for p in range(SIZE)]
    dist.all_to_all(outs, ins)
    for p, o in enumerate(outs):
        same(o, torch.full((p + RANK + 1,), float(100 * p + RANK)), f"all_to_all from {p}")


@check
def all_to_all_single_even() -> None:
    def run(g):
        x = torch.arange(SIZE * 4, dtype=torch.int64) + 1000 * RANK
        out = torch.zeros_like(x)
        dist.all_to_all_single(out, x, group=g)
        return out
    a, b = both(run)
    same(a, b, "all_to_all_single even")


@check
def all_to_all_single_uneven_rows() -> None:
    def run(g):
        ins_split = [RANK + p for p in range(SIZE)]
        outs_split = [p + RANK for p in range(SIZE)]
        x = torch.arange(sum(ins_split) * 3, dtype=torch.float32).view(-1, 3) + 1000 * RANK
        out = torch.zeros(sum(outs_split), 3)
        dist.all_to_all_single(out, x, outs_split, ins_split, group=g)
        return out
    a, b = both(run)
    same(a, b, "all_to_all_single uneven")


@check
def gather_to_every_root() -> None:
    for root in range(SIZE):
        def run(g, root=root):
            outs = [torch.zeros(6) for _ in range(SIZE)] if RANK == root else None
            dist.gather(inp(RANK, torch.float32, 6), outs, dst=root, group=g)
            return torch.stack(outs) if outs else torch.zeros(0)
        a, b = both(run)
        same(a, b, f"gather {root}")


@check
def scatter_from_every_root() -> None:
    for root in range(SIZE):
        def run(g, root=root):
            out = torch.zeros(4, dtype=torch.int64)
            ins = [torch.arange(4) + 10 * p + 100 * root for p in range(SIZE)] if RANK == root else None
            dist.scatter(out, ins, src=root, group=g)
            return out
        a, b = both(run)
        same(a, b, f"scatter {root}")


@check
def send_recv_isend_irecv() -> None:
    nxt, prv = (RANK + 1) % SIZE, (RANK - 1) % SIZE
    x = torch.full((1000,), float(RANK))
    got = torch.zeros(1000)
    if RANK % 2 == 0:
        dist.send(x, nxt)
        dist.recv(got, prv)
    else:
        dist.recv(got, prv)
        dist.send(x, nxt)
    same(got, torch.full((1000,), float(prv)), "send/recv")
    big = torch.arange(1 << 20, dtype=torch.float32) + RANK
    got = torch.zeros_like(big)
    s = dist.isend(big, nxt)
    r = dist.irecv(got, prv)
    s.wait()
    r.wait()
    same(got, torch.arange(1 << 20, dtype=torch.float32) + prv, "isend/irecv")


@check
def batch_isend_irecv_ring() -> None:
    nxt, prv = (RANK + 1) % SIZE, (RANK - 1) % SIZE
    x = torch.full((300_000,), float(RANK))
    got = torch.zeros_like(x)
    got2 = torch.zeros(5, dtype=torch.int32)
    ops = [
        dist.P2POp(dist.irecv, got, prv),
        dist.P2POp(dist.isend, x, nxt),
        dist.P2POp(dist.isend, torch.full((5,), RANK, dtype=torch.int32), prv),
        dist.P2POp(dist.irecv, got2, nxt),
    ]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    same(got, torch.full((300_000,), float(prv)), "batch recv")
    same(got2, torch.full((5,), nxt, dtype=torch.int32), "batch recv 2")


@check
def barrier_and_monitored_sequence() -> None:
    dist.barrier()
    w = dist.barrier(async_op=True)
    w.wait()


@check
def async_work_and_future() -> None:
    ts = [inp(RANK, torch.float32) for _ in range(4)]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    futs = [w.get_future() for w in works]
    ref = inp(RANK, torch.float32)
    dist.all_reduce(ref, group=GLOO)
    for w, f in zip(works, futs):
        assert w.wait()
        res = f.wait()
        assert isinstance(res, list) and res[0] is not None
    for t in ts:
        same(t, ref, "async all_reduce")
    chained = dist.all_reduce(inp(RANK, torch.float32), async_op=True).get_future().then(
        lambda f: f.value()[0] * 2
    )
    same(chained.wait(), ref * 2, "future then")
    w = dist.broadcast(torch.zeros(3), src=0, async_op=True)
    assert w.wait()


@check
def new_group_subsets() -> None:
    evens = list(range(0, SIZE, 2))
    g = dist.new_group(evens)  # the default backend: hccl
    g2 = dist.new_group(list(range(SIZE))[::-1])
    if RANK in evens:
        t = torch.tensor([float(RANK)])
        dist.all_reduce(t, group=g)
        same(t, torch.tensor([float(sum(evens))]), "new_group")
        assert dist.get_backend(g) == "hccl"
    t = torch.tensor([RANK + 1])
    dist.all_reduce(t, op=R.MAX, group=g2)
    same(t, torch.tensor([SIZE]), "reversed group")
    dist.destroy_process_group(g)
    dist.destroy_process_group(g2)


@check
def coalesced_forms() -> None:
    from torch.distributed.distributed_c10d import _coalescing_manager

    ts = [inp(RANK, torch.float32, 5 + k) for k in range(3)]
    with _coalescing_manager(async_ops=True) as cm:
        for t in ts:
            dist.all_reduce(t)
    cm.wait()
    refs = [inp(RANK, torch.float32, 5 + k) for k in range(3)]
    for r in refs:
        dist.all_reduce(r, group=GLOO)
    for t, r in zip(ts, refs):
        same(t, r, "coalesced all_reduce")
    outs = [torch.zeros(SIZE * 4) for _ in range(2)]
    with _coalescing_manager(async_ops=True) as cm:
        for k, o in enumerate(outs):
            dist.all_gather_into_tensor(o, torch.full((4,), float(RANK + k)))
    cm.wait()
    for k, o in enumerate(outs):
        same(o, torch.cat([torch.full((4,), float(r + k)) for r in range(SIZE)]), "coalesced ag")


@check
def functional_collectives() -> None:
    import torch.distributed._functional_collectives as fc

    g = dist.group.WORLD
    x = inp(RANK, torch.float32)
    ref = inp(RANK, torch.float32)
    dist.all_reduce(ref, group=GLOO)
    same(fc.wait_tensor(fc.all_reduce(x, "sum", g)), ref, "functional all_reduce")
    ag = fc.wait_tensor(fc.all_gather_tensor(torch.full((2,), float(RANK)), 0, g))
    same(ag, torch.cat([torch.full((2,), float(r)) for r in range(SIZE)]), "functional all_gather")
    rs = fc.wait_tensor(fc.reduce_scatter_tensor(torch.ones(SIZE * 3), "sum", 0, g))
    same(rs, torch.full((3,), float(SIZE)), "functional reduce_scatter")


@check
def dtensor_on_cpu_mesh() -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (SIZE,))
    full = torch.arange(SIZE * 4 * 3, dtype=torch.float32).view(SIZE * 4, 3)
    d = distribute_tensor(full, mesh, [Shard(0)])
    same(d.to_local(), full[RANK * 4 : (RANK + 1) * 4], "shard")
    same(d.full_tensor(), full, "full_tensor")
    r = d.redistribute(mesh, [Replicate()])
    same(r.to_local(), full, "redistribute")
    s = (d * 2).sum()
    same(s.full_tensor(), full.sum() * 2, "sum")


@check
def other_devices_raise_naming_the_device() -> None:
    # torch runs meta tensors through its own meta kernels, so the backend is called directly.
    from torch._C._distributed_c10d import AllreduceOptions

    be = dist.group.WORLD._get_backend(torch.device("cpu"))
    be = getattr(be, "wrapped_pg", be)  # TORCH_DISTRIBUTED_DEBUG=DETAIL wraps it
    assert type(be).__name__ == "ProcessGroupHCCL", type(be)
    try:
        be.allreduce([torch.zeros(3, device="meta")], AllreduceOptions())
    except ValueError as e:
        assert "meta" in str(e), str(e)
    else:
        raise AssertionError("meta tensor accepted")
    x = torch.ones(2)
    dist.all_reduce(x)  # still usable
    same(x, torch.full((2,), float(SIZE)), "after error")


@check
def unsupported_reduce_op_raises() -> None:
    try:
        dist.all_reduce(torch.ones(2, dtype=torch.int32), op=R.BAND)
    except Exception as e:  # noqa: BLE001
        assert "BAND" in str(e), str(e)
    else:
        raise AssertionError("BAND accepted")


@check
def destroy_and_init_again() -> None:
    # Last check: afterwards only the new hccl group exists. No gloo group is created again:
    # gloo itself does not come up a second time on the same store address here (pure gloo
    # hangs the same way), and TORCH_DISTRIBUTED_DEBUG=DETAIL wraps every group with a gloo
    # helper, so that mode skips this check.
    if os.environ.get("TORCH_DISTRIBUTED_DEBUG") == "DETAIL":
        return
    dist.destroy_process_group()
    dist.init_process_group("hccl", timeout=datetime.timedelta(seconds=60))
    t = torch.tensor([float(RANK)])
    dist.all_reduce(t)
    same(t, torch.tensor([float(SIZE * (SIZE - 1) / 2)]), "after re-init")
    assert dist.get_backend() == "hccl"
    w = dist.all_reduce(torch.ones(3), async_op=True)
    w.wait()


def setup() -> None:
    global GLOO
    assert "hccl" not in sys.modules, "the test must not import hccl itself"
    dist.init_process_group("hccl", timeout=datetime.timedelta(seconds=60))
    GLOO = dist.new_group(backend="gloo")


if __name__ == "__main__":
    run_all(setup=setup, teardown=dist.destroy_process_group)
