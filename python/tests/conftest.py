"""Shared pytest set-up: the rank counts the multi-process tests run with (``--ranks``)."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def pytest_addoption(parser):
    parser.addoption(
        "--ranks",
        default="2,4",
        help="comma-separated process counts the multi-process tests run with (default 2,4)",
    )


def pytest_generate_tests(metafunc):
    if "nranks" in metafunc.fixturenames:
        ranks = [int(x) for x in metafunc.config.getoption("--ranks").split(",") if x]
        metafunc.parametrize("nranks", ranks, ids=[f"{n}ranks" for n in ranks], scope="module")
