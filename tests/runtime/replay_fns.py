"""Python workers for the replay tests: ``python:tests.runtime.replay_fns:NAME``."""

from __future__ import annotations

from loopactors.workers import RoundContext, RoundRequest, RoundResult

#: (worker, prompt) of every call, in order.
SEEN: list[tuple[str, str]] = []


async def first_model(request: RoundRequest, context: RoundContext | None) -> RoundResult:
    SEEN.append(("first", request.prompt))
    return RoundResult(
        status="completed", output=f"first model, round {request.round * 'i'}", tokens=100
    )


async def second_model(request: RoundRequest, context: RoundContext | None) -> RoundResult:
    SEEN.append(("second", request.prompt))
    return RoundResult(status="completed", output="second model's answer", tokens=40)
