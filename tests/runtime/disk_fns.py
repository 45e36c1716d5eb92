"""A python worker for the full-disk tests: ``python:tests.runtime.disk_fns:big``."""

from __future__ import annotations

import os
from pathlib import Path

from loopactors.workers import RoundContext, RoundRequest

#: Each round's output: big enough that a few dozen fill a small disk.
OUTPUT_BYTES = 150_000


async def big(request: RoundRequest, context: RoundContext | None) -> str:
    # Every run of a round is noted outside the small disk, to count runs.
    with Path(os.environ["DISK_TEST_RUNS"]).open("a") as runs:  # noqa: ASYNC230 - tiny
        runs.write(f"{request.round}\n")
    return f"round {request.round} " + "x" * OUTPUT_BYTES


async def huge(request: RoundRequest, context: RoundContext | None) -> str:
    """``HUGE_BYTES`` bytes: a start line, then é (two bytes each) to the end."""
    size = int(os.environ["HUGE_BYTES"])
    return "start\n" + "é" * ((size - 6) // 2)
