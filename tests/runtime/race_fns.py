"""Python workers for the review tests (python:tests.runtime.race_fns:NAME)."""

from __future__ import annotations

from typing import Any

import trio

STATE: dict[str, Any] = {}


def reset() -> None:
    STATE.clear()
    STATE["a_cancelled"] = trio.Event()
    STATE["children"] = []
    STATE["started_at"] = {}


async def child_a(request: Any, context: Any) -> str:
    try:
        await trio.sleep(1000)
    finally:
        STATE["a_cancelled"].set()
    return "never"


async def parent_fn(request: Any, context: Any) -> str:
    if request.round == 1:
        a = await context.start("|loop:5| child A", worker="python:tests.runtime.race_fns:child_a")
        STATE["children"].append(a)
        await STATE["a_cancelled"].wait()
        # The parent's round is still running while the coordinator stops its children.
        b = await context.start("|loop:3| child B", worker="scripted:latency=1")
        STATE["children"].append(b)
    await trio.sleep(1000)
    return "parent"


async def timed(request: Any, context: Any) -> str:
    STATE["started_at"][request.loop_id] = trio.current_time()
    await trio.sleep(1.0)
    return f"out {'x' * request.round}"
