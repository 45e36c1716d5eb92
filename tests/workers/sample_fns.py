"""Round functions for the python worker tests (``python:tests.workers.sample_fns:NAME``)."""

from __future__ import annotations

from typing import Any

import trio

from loopactors.workers import RoundContext, RoundRequest, RoundResult


def make_request(**changes: Any) -> RoundRequest:
    """A round request with plain defaults, for every worker test."""
    fields: dict[str, Any] = {
        "loop_id": "loop-1",
        "round": 1,
        "rounds": 3,
        "mode": "fresh",
        "prompt": "do the task",
        "task": "do the task",
        "worker": "scripted",
    }
    fields.update(changes)
    return RoundRequest(**fields)


async def echo(request: RoundRequest, context: RoundContext | None) -> str:
    return f"round {request.round}: {request.prompt}"


async def full_result(request: RoundRequest, context: RoundContext | None) -> RoundResult:
    return RoundResult(status="completed", output="done", tokens=42)


async def boom(request: RoundRequest, context: RoundContext | None) -> str:
    raise ValueError("no luck this round")


async def wrong_type(request: RoundRequest, context: RoundContext | None) -> object:
    return 42


async def forever(request: RoundRequest, context: RoundContext | None) -> str:
    await trio.sleep_forever()
    raise AssertionError("unreachable")


async def starts_child(request: RoundRequest, context: RoundContext | None) -> str:
    assert context is not None
    child = await context.start("child task", rounds=2)
    return f"started {child}"


def not_async(request: RoundRequest, context: RoundContext | None) -> str:
    return "sync"


class Echoer:
    """An instance with ``async def __call__`` is accepted, as is a method through its class."""

    async def __call__(self, request: RoundRequest, context: RoundContext | None) -> str:
        return "called"

    @staticmethod
    async def static(request: RoundRequest, context: RoundContext | None) -> str:
        return "static"


echoer = Echoer()
NOT_CALLABLE = 3
