"""torch.distributed backend ``"hccl"`` for CPU tensors.

After ``pip install``, an unmodified script works::

    import torch.distributed as dist
    dist.init_process_group(backend="hccl")      # env:// (torchrun, or MASTER_ADDR/PORT...)
    dist.all_reduce(torch.ones(4))

torch finds the backend through the ``torch.distributed.backends`` entry point of this package
(which calls :func:`register`), so the script needs no ``import hccl``. Importing this module
also registers it. Each process group (``new_group`` included) gets its own communicator; its
rank 0 creates the root info and shares it through the group's store. The ``timeout`` given to
``init_process_group``/``new_group`` is the communicator's execution timeout: a dead peer makes
every other rank's operation raise within it.
"""

from __future__ import annotations

from .backend import ProcessGroupHCCL, register

__all__ = ["ProcessGroupHCCL", "register"]

register()
