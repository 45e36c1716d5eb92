"""The node protocol's ``code`` request: its frames and its answer, added to a node by
``open_gateway(..., extensions=[CODE_REQUEST])`` (the ``loopactors node`` command does).

The gateway knows nothing of code loops: a request an application adds carries its own frame
(a msgspec Struct tagged on ``type``, with an ``id``), the data of its ``ok`` reply, and how a
node answers it (``gateway.NodeRequest``; docs/protocol.md, "Requests added by applications").

A code loop lives in a repository on the node's machine (``repo`` is a path there). ``run``
answers at once and runs the rounds in the gateway's nursery, under the loop's lease; their
progress is the runtime loop's events (subscribe to all loops), and ``status`` reads the
ledger. A gateway restart cancels a run in progress; the ledger's reconciliation picks the
loop up at the next ``run``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

import msgspec

from ..errors import GateClosed, InvalidRequest, LoopactorsError
from ._handoff import render_handoff
from ._loop import CodeLoop, open_code_loop
from ._report import CodeLoopStatus

if TYPE_CHECKING:
    import trio

    from ..runtime import Runtime

__all__ = ["CODE_REQUEST", "Code", "CodeLoops", "answer_code", "code_request"]

log = logging.getLogger("loopactors.gateway")


class Code(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    tag="code",
    tag_field="type",
    forbid_unknown_fields=True,
):
    """Act on a code loop of a repository on the node's machine (``loopactors code``'s
    controls). ``init`` takes the settings below; ``run`` runs ``rounds`` rounds (null: until a
    gate stops the loop) in the background and answers at once; ``resume`` may set new gates;
    ``status`` without a slug lists every code loop of the repository."""

    id: int | str
    action: Literal["init", "run", "status", "pause", "resume", "stop", "handoff"]
    repo: str = "."
    slug: str | None = None
    objective: str | None = None
    executor: str | None = None
    reviewer: str | None = None
    validate: str | None = None
    max_rounds: int | None = None
    deadline: str | None = None
    attendance: Literal["attended", "unattended"] = "attended"
    force: bool = False
    rounds: int | None = 1


class CodeLoops(msgspec.Struct, frozen=True, kw_only=True):
    """Code loops after a ``code`` request, and what it did (or the hand-off, rendered)."""

    loops: list[CodeLoopStatus]
    message: str | None = None


def code_request(action: str, **fields: Any) -> Code:
    """A ``code`` request (``fields`` are its fields; the client sets the id)."""
    return msgspec.convert({"id": 0, "action": action, **fields}, Code)


async def answer_code(request: Code, runtime: Runtime, background: trio.Nursery) -> CodeLoops:
    """Do what a ``code`` request asks; the loops' status after it, and what happened."""
    repo = Path(request.repo)
    if request.action == "status" and request.slug is None:
        loops = await CodeLoop.all(repo)
        return CodeLoops(loops=[await loop.status() for loop in loops])
    if request.slug is None:
        raise InvalidRequest(f"code {request.action} needs a slug")
    loop = await open_code_loop(request.slug, path=repo)
    message: str | None = None
    if request.action == "init":
        if request.objective is None:
            raise InvalidRequest("code init needs an objective")
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
            raise GateClosed(
                f"code loop {request.slug} is {state.status} ({state.reason or 'no reason'}); "
                "resume it first"
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


class _CodeRequest:
    """The ``code`` request as a ``gateway.NodeRequest``."""

    frame = Code
    reply = CodeLoops

    async def answer(self, request: Any, runtime: Runtime, background: trio.Nursery) -> CodeLoops:
        return await answer_code(request, runtime, background)


#: Give it to ``open_gateway`` / ``serve_node`` (``extensions=``) to serve ``code``.
CODE_REQUEST: Final = _CodeRequest()
