"""Exceptions raised by hccl.

Every error the library reports is an :class:`HcclError` carrying the ``HcclResult`` code
(``code``), its name (``kind``) and the library's message, which names the communicator, the
rank, the operation and, where one is involved, the peer. Subclasses also derive from the
matching built-in exception, so ``except TimeoutError`` catches a timed-out operation.

Bad arguments detected before anything is sent (a read-only or non-contiguous output buffer,
mismatched element types, wrong sizes, a tensor on another device) raise plain ``ValueError``
or ``TypeError`` naming the argument.
"""

from __future__ import annotations

__all__ = [
    "HcclError",
    "HcclTimeoutError",
    "HcclConnectionError",
    "HcclInvalidArgument",
    "HcclNotSupported",
    "HcclUnavailable",
]


class HcclError(RuntimeError):
    """An error reported by the library.

    Attributes:
        message: the library's message.
        code: the ``HcclResult`` value (``HCCL_E_TIMEOUT`` = 9, ...).
        kind: the name of the code (``"Timeout"``, ``"TcpTransfer"``, ...).
    """

    def __init__(self, message: str, code: int = 4, kind: str = "Internal") -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.kind = kind

    def __str__(self) -> str:
        return f"{self.message} [HcclResult {self.code}: {self.kind}]"


class HcclTimeoutError(HcclError, TimeoutError):
    """A peer did not arrive within the timeout (``HCCL_EXEC_TIMEOUT`` or ``timeout=``)."""


class HcclConnectionError(HcclError, ConnectionError):
    """A peer was lost or could not be reached (its process died, its link broke)."""


class HcclInvalidArgument(HcclError, ValueError):
    """The library rejected an argument (for example ranks that disagree on an operation)."""


class HcclNotSupported(HcclError, NotImplementedError):
    """The operation is not supported for these arguments (for example a reduction of an
    8-bit float type)."""


class HcclUnavailable(HcclError):
    """The communicator cannot be used (destroyed, or busy in another thread)."""


#: HcclResult code -> exception class.
BY_CODE = {
    1: HcclInvalidArgument,
    2: HcclInvalidArgument,
    5: HcclNotSupported,
    7: HcclUnavailable,
    9: HcclTimeoutError,
    11: HcclConnectionError,
    13: HcclConnectionError,
    19: HcclConnectionError,
    21: HcclConnectionError,
}
