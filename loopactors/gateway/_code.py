"""Code loops over the node protocol: the ``code`` request, acted on with loopactors.codeloop.

A code loop lives in a repository on the node's machine (``repo`` is a path there). ``run``
answers at once and runs the rounds in the gateway's nursery, under the loop's lease; their
progress is the runtime loop's events (subscribe to all loops), and ``status`` reads the
ledger. A gateway restart cancels a run in progress; the ledger's reconciliation picks the
loop up at the next ``run``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

from ..codeloop import CodeLoop, open_code_loop, render_handoff
from ..errors import LoopactorsError
from ._errors import Refusal
from ._protocol import Code, CodeLoops

if TYPE_CHECKING:
    import trio

    from ..runtime import Runtime

__all__ = ["answer_code"]

log = logging.getLogger("loopactors.gateway")


async def answer_code(request: Code, runtime: Runtime, background: trio.Nursery) -> CodeLoops:
    """Do what a ``code`` request asks; the loops' status after it, and what happened."""
    repo = Path(request.repo)
    if request.action == "status" and request.slug is None:
        loops = await CodeLoop.all(repo)
        return CodeLoops(loops=[await loop.status() for loop in loops])
    if request.slug is None:
        raise Refusal("invalid_request", f"code {request.action} needs a slug")
    loop = await open_code_loop(request.slug, path=repo)
    message: str | None = None
    if request.action == "init":
        if request.objective is None:
            raise Refusal("invalid_request", "code init needs an objective")
        await loop.init(
            objective=request.objective,
            executor=request.executor,
            reviewer=request.reviewer,
            validate=request.validate,
            max_rounds=request.max_rounds,
            deadline=request.deadline,
            attendance=request.attendance,
            force=request.force,
        )
    elif request.action == "run":
        state = loop.state()  # a clear error now for a loop that does not exist
        if state.status != "ready":
            raise Refusal(
                "rejected",
                f"code loop {request.slug} is {state.status} ({state.reason or 'no reason'}); "
                "resume it first",
            )
        background.start_soon(_run, loop, runtime, request.rounds)
        rounds = request.rounds
        message = f"running {'until a gate stops it' if rounds is None else f'{rounds} round(s)'}"
    elif request.action == "pause":
        message = await loop.pause()
    elif request.action == "resume":
        message = await loop.resume(max_rounds=request.max_rounds, deadline=request.deadline)
    elif request.action == "stop":
        message = await loop.stop()
    elif request.action == "handoff":
        message = render_handoff(await loop.handoff())
    return CodeLoops(loops=[await loop.status()], message=message)


async def _run(loop: CodeLoop, runtime: Runtime, rounds: int | None) -> None:
    try:
        state = await loop.run(runtime, rounds=rounds)
    except LoopactorsError as exc:
        log.warning("code loop %s did not run: %s", loop.slug, exc)
    except Exception:  # a bug in one run must not crash the gateway
        log.exception("code loop %s failed", loop.slug)
    else:
        log.info("code loop %s is %s after round %d", loop.slug, state.status, state.round)
