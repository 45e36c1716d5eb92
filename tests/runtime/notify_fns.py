"""Python workers for the notification tests: ``python:tests.runtime.notify_fns:NAME``."""

from __future__ import annotations

from loopactors.workers import RoundContext, RoundRequest, RoundResult


async def costly(request: RoundRequest, context: RoundContext | None) -> RoundResult:
    """A dime a round, with a different reply each time."""
    return RoundResult(status="completed", output="spent " + "x" * request.round, cost_usd=0.1)
