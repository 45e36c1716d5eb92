"""Python workers for the deferral tests: ``python:tests.runtime.defer_fns:NAME``."""

from __future__ import annotations

import time

from loopactors.workers import RoundContext, RoundRequest, RoundResult

#: (loop id, round, UNIX time) of every call, in order.
CALLS: list[tuple[str, int, float]] = []
#: Seconds the limit of `limited_once` lasts.
WAIT = {"seconds": 0.4}


async def limited_once(request: RoundRequest, context: RoundContext | None) -> RoundResult:
    """The first call of each loop meets a limit; later calls complete (with progress)."""
    CALLS.append((request.loop_id, request.round, time.time()))
    if sum(1 for loop, _, _ in CALLS if loop == request.loop_id) == 1:
        return RoundResult(
            status="deferred",
            deferred_until=time.time() + WAIT["seconds"],
            error="usage limit reached",
            tokens=7,
            cost_usd=0.01,
        )
    return RoundResult(
        status="completed", output=f"round {request.round}", tokens=10, progress=True
    )


async def always_limited(request: RoundRequest, context: RoundContext | None) -> RoundResult:
    CALLS.append((request.loop_id, request.round, time.time()))
    return RoundResult(status="deferred", deferred_until=time.time() + 3600, error="limit")


async def idle_agent(request: RoundRequest, context: RoundContext | None) -> RoundResult:
    """A different reply each round, but nothing changed in the workspace."""
    return RoundResult(status="completed", output=f"thinking {request.round * 'x'}", progress=False)


async def committing_agent(request: RoundRequest, context: RoundContext | None) -> RoundResult:
    """The same reply each round, but a commit each time."""
    return RoundResult(status="completed", output="done", commits=1, progress=True)
