"""Python workers the runtime tests name as ``python:tests.runtime.round_fns:NAME``."""

from __future__ import annotations

import contextvars
from typing import Any

import trio

from loopactors.workers import RoundContext, RoundRequest, RoundResult

#: Prompts seen, per loop id, in order.
PROMPTS: dict[str, list[str]] = {}
#: How many rounds run at this moment, and the most ever seen at once.
RUNNING = {"now": 0, "peak": 0}
#: Handles of child loops started by `spawn_child`, per parent loop id.
CHILDREN: dict[str, list[Any]] = {}


async def record(request: RoundRequest, context: RoundContext | None) -> str:
    PROMPTS.setdefault(request.loop_id, []).append(request.prompt)
    return f"output of round {request.round}: {'x' * request.round}"


async def slow_counted(request: RoundRequest, context: RoundContext | None) -> str:
    RUNNING["now"] += 1
    RUNNING["peak"] = max(RUNNING["peak"], RUNNING["now"])
    try:
        await trio.sleep(1.0)
    finally:
        RUNNING["now"] -= 1
    return f"done {'y' * request.round}"


async def one_second(request: RoundRequest, context: RoundContext | None) -> str:
    """A round that runs in a task (a scripted worker's wait would not: it is data)."""
    await trio.sleep(1.0)
    return f"slept in round {request.round}"


async def one_minute(request: RoundRequest, context: RoundContext | None) -> str:
    await trio.sleep(60.0)
    return f"slept long in round {request.round}"


async def constant(request: RoundRequest, context: RoundContext | None) -> str:
    return f"Round {request.round} at 10:0{request.round}: nothing new"


async def spend(request: RoundRequest, context: RoundContext | None) -> RoundResult:
    return RoundResult(status="completed", output="z" * request.round, tokens=400)


async def spawn_child(request: RoundRequest, context: RoundContext | None) -> str:
    assert context is not None
    if request.round == 1:
        child = await context.start("|loop:5| child task", worker="scripted:latency=1")
        CHILDREN.setdefault(request.loop_id, []).append(child)
    await trio.sleep(1.0)
    return f"parent round {request.round} {'p' * request.round}"


async def spawn_same_task(request: RoundRequest, context: RoundContext | None) -> str:
    assert context is not None
    try:
        await context.start(f"|loop:2| {request.task}", worker="scripted")
    except Exception as exc:
        return f"refused: {exc}"
    return "started"


async def spawn_other(request: RoundRequest, context: RoundContext | None) -> str:
    assert context is not None
    try:
        await context.start("|loop:2| a different task", worker="scripted")
    except Exception as exc:
        return f"refused: {exc}"
    return "started"


async def deaf(request: RoundRequest, context: RoundContext | None) -> str:
    """A round that will not be cancelled: the Dispatcher's timeout cannot end it."""
    with trio.CancelScope(shield=True):
        await trio.sleep(10_000)
    return "too late"


async def deaf_from_round_3(request: RoundRequest, context: RoundContext | None) -> str:
    """Rounds 1 and 2 take 5 s each; round 3 will not be cancelled."""
    if request.round < 3:
        await trio.sleep(5)
        return f"round {request.round} done"
    return await deaf(request, context)


async def same_error(request: RoundRequest, context: RoundContext | None) -> RoundResult:
    return RoundResult(
        status="failed",
        output=f"attempt {'a' * request.round}",
        error=f"ValueError: bad value at /srv/app/module_{request.round}.py line {request.round}",
    )


_WORDS = ["amber", "birch", "cedar", "delta", "ember", "fjord", "glade", "harbor", "island"]


async def same_action(request: RoundRequest, context: RoundContext | None) -> RoundResult:
    word = _WORDS[request.round % len(_WORDS)]
    return RoundResult(
        status="failed",
        output="apply the usual fix to the parser",
        error=f"{word} {word.upper()} {word[::-1]} quite different failure {word * 3}",
    )


#: Set by `set_context_var`; a round must never see an earlier round's value.
ROUND_VAR: contextvars.ContextVar[str | None] = contextvars.ContextVar("round_var", default=None)
#: What `set_context_var` saw at its start, and the trio task each round ran in, per call.
SEEN_VAR: list[str | None] = []
ROUND_TASKS: list[int] = []
#: The name of the trio task each round ran in.
ROUND_TASK_NAMES: list[str] = []


async def set_context_var(request: RoundRequest, context: RoundContext | None) -> str:
    SEEN_VAR.append(ROUND_VAR.get())
    ROUND_TASKS.append(id(trio.lowlevel.current_task()))
    ROUND_TASK_NAMES.append(trio.lowlevel.current_task().name)
    ROUND_VAR.set(f"{request.loop_id}:{request.round}")
    await trio.lowlevel.checkpoint()
    return f"set in round {request.round} {'v' * request.round}"


async def slow_to_stop(request: RoundRequest, context: RoundContext | None) -> str:
    """A round that takes 30 s and, cancelled, 3 s more to wind down: a node's shutdown
    lasts that long (within its grace)."""
    try:
        await trio.sleep(30)
    finally:
        with trio.CancelScope(shield=True):
            await trio.sleep(3)
    return "done"


async def spend_dollars(request: RoundRequest, context: RoundContext | None) -> RoundResult:
    """Each round costs $0.40."""
    return RoundResult(status="completed", output="z" * request.round, cost_usd=0.4)


async def spend_on_account(request: RoundRequest, context: RoundContext | None) -> RoundResult:
    """Each round costs $0.40 on account ``test:acct`` (as the CLI kinds report theirs)."""
    return RoundResult(
        status="completed", output="w" * request.round, cost_usd=0.4, account="test:acct"
    )
