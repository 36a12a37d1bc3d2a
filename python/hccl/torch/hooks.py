"""DDP communication hooks that compress gradients: fp16, bf16, int8 (per-block absmax scales)
and top-k, with error feedback kept per gradient bucket.

Each hook compresses its bucket (after adding what compression dropped from that bucket last
time), all-gathers the compressed bytes, and decodes and sums every rank's part in rank order
in float32, so every rank ends with the same averaged gradient, bit for bit. Only
``all_gather`` of a ``uint8`` tensor is used, so the hooks work on any backend: ``"hccl"`` and
``"gloo"`` alike. ::

    from hccl.torch import hooks
    state = hooks.CompressionState(process_group=None)     # the default group
    ddp.register_comm_hook(state, hooks.int8_hook)         # or fp16_hook, bf16_hook, topk_hook

``CompressionState(block=256, ratio=0.01, error_feedback=True, momentum=0.0)``: ``block`` is
the number of elements sharing an int8 scale, ``ratio`` the share of elements top-k sends.

``momentum`` (DGC-style momentum correction, for SGD with momentum): the hook keeps a velocity
per bucket, ``u = momentum * u + grad``, and compresses ``u`` (plus the error-feedback residual)
instead of the raw gradient; with top-k, the velocity is zeroed where elements were sent, so
momentum does not keep pushing values the other ranks already applied. Use it with the
optimizer's own momentum off (``SGD(momentum=0)``): the averaged result already carries the
momentum. Without it, top-k with error feedback under an optimizer's momentum applies delayed
residuals with momentum and drifts away from the uncompressed run. ::

    state = hooks.CompressionState(ratio=0.01, momentum=0.9)
    ddp.register_comm_hook(state, hooks.topk_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)                 # no momentum here
"""

import math
from typing import Callable, Dict, List, Optional

import torch
import torch.distributed as dist

__all__ = [
    "CompressionState",
    "fp16_hook",
    "bf16_hook",
    "int8_hook",
    "topk_hook",
]


class CompressionState:
    """Settings and per-bucket error-feedback residuals of the compression hooks."""

    def __init__(
        self,
        process_group: Optional[dist.ProcessGroup] = None,
        *,
        block: int = 256,
        ratio: float = 0.01,
        error_feedback: bool = True,
        momentum: float = 0.0,
    ) -> None:
        if not isinstance(block, int) or not 1 <= block <= 65536:
            raise ValueError(f"block must be an integer in 1..65536, not {block!r}")
        if not (0.0 < ratio <= 1.0):
            raise ValueError(f"ratio must be in (0, 1], not {ratio!r}")
        if not (0.0 <= momentum < 1.0):
            raise ValueError(f"momentum must be in [0, 1), not {momentum!r}")
        self.process_group = process_group
        self.block = block
        self.ratio = ratio
        self.error_feedback = error_feedback
        self.momentum = momentum
        self.residuals: Dict[int, torch.Tensor] = {}
        self.velocities: Dict[int, torch.Tensor] = {}

    def _residual(self, index: int, like: torch.Tensor) -> Optional[torch.Tensor]:
        if not self.error_feedback:
            return None
        r = self.residuals.get(index)
        # DDP rebuilds its buckets after the first iteration: a bucket of another size starts
        # over.
        if r is None or r.shape != like.shape:
            r = torch.zeros_like(like, dtype=torch.float32)
            self.residuals[index] = r
        return r

    def _velocity(self, index: int, like: torch.Tensor) -> Optional[torch.Tensor]:
        if self.momentum == 0.0:
            return None
        u = self.velocities.get(index)
        if u is None or u.shape != like.shape:
            u = torch.zeros_like(like, dtype=torch.float32)
            self.velocities[index] = u
        return u


# Codecs: encode(x, state) -> uint8 payload (the same length on every rank for the same bucket);
# decode(payload, n, state) -> float32 values.


def _half_codec(dtype: torch.dtype):
    def encode(x: torch.Tensor, state: CompressionState) -> torch.Tensor:
        return x.to(dtype).view(torch.uint8)

    def decode(p: torch.Tensor, n: int, state: CompressionState) -> torch.Tensor:
        return p.view(dtype).to(torch.float32)

    return encode, decode


def _int8_encode(x: torch.Tensor, state: CompressionState) -> torch.Tensor:
    n, b = x.numel(), state.block
    blocks = -(-n // b)
    xb = torch.zeros(blocks * b, dtype=torch.float32)
    xb[:n] = x
    xb = xb.view(blocks, b)
    amax = xb.abs().amax(dim=1)
    scale = amax / 127.0
    inv = torch.where(amax > 0, 127.0 / amax, torch.zeros_like(amax))
    q = torch.round(xb * inv[:, None]).clamp_(-127, 127).to(torch.int8).reshape(-1)[:n]
    return torch.cat([scale.view(torch.uint8), q.view(torch.uint8)])


def _int8_decode(p: torch.Tensor, n: int, state: CompressionState) -> torch.Tensor:
    b = state.block
    blocks = -(-n // b)
    scale = p[: 4 * blocks].view(torch.float32)
    q = p[4 * blocks :].view(torch.int8).to(torch.float32)
    out = torch.zeros(blocks * b, dtype=torch.float32)
    out[:n] = q
    return (out.view(blocks, b) * scale[:, None]).reshape(-1)[:n]


def _topk_count(n: int, state: CompressionState) -> int:
    return min(n, max(1, math.ceil(state.ratio * n))) if n else 0


def _topk_encode(x: torch.Tensor, state: CompressionState) -> torch.Tensor:
    k = _topk_count(x.numel(), state)
    idx = torch.topk(x.abs(), k, sorted=False).indices.sort().values.to(torch.int32)
    vals = x[idx.long()].to(torch.float32)
    return torch.cat([idx.view(torch.uint8), vals.view(torch.uint8)])


def _topk_decode(p: torch.Tensor, n: int, state: CompressionState) -> torch.Tensor:
    k = _topk_count(n, state)
    idx = p[: 4 * k].view(torch.int32).long()
    vals = p[4 * k :].view(torch.float32)
    out = torch.zeros(n, dtype=torch.float32)
    out.index_add_(0, idx, vals)
    return out





def _hook(codec: tuple, name: str, doc: str, sparse: bool = False) -> Callable:
    encode, decode = codec

    # Real (not postponed) annotations: DDP checks them against dist.GradBucket and
    # torch.futures.Future[torch.Tensor].
    def hook(
        state: CompressionState, bucket: dist.GradBucket
    ) -> torch.futures.Future[torch.Tensor]:
        group = state.process_group
        world = dist.get_world_size(group)
        grad = bucket.buffer()
        if grad.dtype != torch.float32 or grad.device.type != "cpu":
            raise TypeError(
                f"compression hooks take float32 CPU gradients, not {grad.dtype} on {grad.device}"
            )
        x = grad.detach().clone()
        velocity = state._velocity(bucket.index(), x)
        if velocity is not None:
            velocity.mul_(state.momentum).add_(x)
            x.copy_(velocity)
        residual = state._residual(bucket.index(), x)
        if residual is not None:
            x.add_(residual)
        payload = encode(x, state).contiguous()
        if residual is not None or (velocity is not None and sparse):
            sent = decode(payload, x.numel(), state)
            if residual is not None:
                residual.copy_(x - sent)
            if velocity is not None and sparse:
                # Momentum factor masking: what was sent stops accumulating momentum here.
                velocity.masked_fill_(sent != 0, 0.0)
        parts: List[torch.Tensor] = [torch.empty_like(payload) for _ in range(world)]
        fut = dist.all_gather(parts, payload, group=group, async_op=True).get_future()

        def finish(_f: torch.futures.Future) -> torch.Tensor:
            total = torch.zeros(x.numel(), dtype=torch.float32)
            for p in parts:  # rank order: the same sum on every rank
                total.add_(decode(p, x.numel(), state))
            grad.copy_(total.div_(world).view_as(grad))
            return grad

        return fut.then(finish)

    hook.__name__ = hook.__qualname__ = name
    hook.__doc__ = doc
    return hook


fp16_hook = _hook(_half_codec(torch.float16), "fp16_hook",
                  "Gradients as IEEE half precision (round to nearest even).")
bf16_hook = _hook(_half_codec(torch.bfloat16), "bf16_hook",
                  "Gradients as bfloat16 (round to nearest even).")
int8_hook = _hook((_int8_encode, _int8_decode), "int8_hook",
                  "Gradients as int8 with one float32 scale (absmax / 127) per state.block elements.")
topk_hook = _hook((_topk_encode, _topk_decode), "topk_hook",
                  "The state.ratio share of gradient elements of largest magnitude, as (index, value).",
                  sparse=True)
