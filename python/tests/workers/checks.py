"""A tiny registry of checks that every rank runs in the same order; results go to the JSON
report the launcher reads ($HCCL_TEST_REPORT)."""

from __future__ import annotations

import json
import os
import traceback
from typing import Callable, Dict, List, Tuple

_CHECKS: List[Tuple[str, str, Callable[[], None]]] = []


def check(fn: Callable[[], None]) -> Callable[[], None]:
    _CHECKS.append((fn.__module__, fn.__name__, fn))
    return fn


def names(module: str) -> List[str]:
    """The checks the module named `module` registered, in order."""
    return [n for m, n, _ in _CHECKS if m == module]


def run_all(setup: Callable[[], None] = lambda: None, teardown: Callable[[], None] = lambda: None) -> None:
    results: Dict[str, str] = {}
    try:
        setup()
        for _, name, fn in _CHECKS:
            try:
                fn()
                results[name] = "ok"
            except BaseException:  # noqa: BLE001 - the report carries it
                results[name] = traceback.format_exc()
        teardown()
    finally:
        with open(os.environ["HCCL_TEST_REPORT"], "w") as f:
            json.dump(results, f)
