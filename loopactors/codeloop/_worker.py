"""A code round as a runtime worker, so the Dispatcher runs it and the Store records it.

The runtime loop of a code loop has the ledger directory as its task and this worker
(:data:`CODE_ROUND_WORKER`, a ``python:`` spec) as its worker: each of its rounds is one code
round. The round runs under the lease this process holds for the loop (taken by
:meth:`CodeLoop.run <loopactors.codeloop.CodeLoop.run>`), or under one it takes for the round
(a runtime that resumed the loop on its own after a crash).

The result: ``completed`` when the round merged into the candidate, ``failed`` (with the
reason) when it did not, so the runtime's breaker sees rejected rounds as failures; and
``completed`` with ``done`` once the loop dispatches nothing more (a gate tripped, paused,
stopped, completed), which ends the runtime loop.
"""

from __future__ import annotations

from pathlib import Path

import trio
from trio.lowlevel import RunVar

from ..errors import LeaseHeld, LoopactorsError
from ..workers import RoundContext, RoundRequest, RoundResult
from ._git import LoopGit
from ._lease import acquire_lease, held_lease, lease_kept, new_owner, release_lease
from ._ledger import LOOP_DIR, CodeLedger
from ._orchestration import parse_orchestration
from ._round import CodeRound, RoundOutcome

__all__ = ["CODE_ROUND_WORKER", "code_round", "ledger_of_task", "round_lock"]

CODE_ROUND_WORKER = "python:loopactors.codeloop:code_round"


def ledger_of_task(task: str) -> CodeLedger:
    """The ledger a code loop's runtime task names (``<repo>/.loop/<slug>``)."""
    path = Path(task)
    if not path.is_absolute() or path.parent.name != LOOP_DIR:
        raise LoopactorsError(f"a code round's task is its ledger directory, not {task!r}")
    return CodeLedger(path.parent.parent, path.name)


def load_orchestration(ledger: CodeLedger) -> str:
    try:
        return ledger.orchestration_path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise LoopactorsError(f"{ledger.orchestration_path} is missing") from None


async def run_one_round(ledger: CodeLedger, owner: str) -> RoundOutcome:
    """One round of the loop (or none, if a gate is closed); the caller holds the lease."""
    orchestration = parse_orchestration(load_orchestration(ledger), slug=ledger.slug)
    return await CodeRound(ledger, LoopGit(ledger.root, ledger.slug), orchestration, owner).run()


#: Per trio run: one lock per ledger, held while a round of it runs in this process.
_round_locks: RunVar[dict[Path, trio.Lock]] = RunVar("codeloop_round_locks")


def round_lock(ledger: CodeLedger) -> trio.Lock:
    """Held by a round of ``ledger`` while it runs here: waiting for it is waiting for the
    round's clean-up too (a stopped round ends in the Dispatcher after its loop did)."""
    try:
        locks = _round_locks.get()
    except LookupError:
        locks = {}
        _round_locks.set(locks)
    return locks.setdefault(ledger.dir.resolve(), trio.Lock())


async def code_round(request: RoundRequest, context: RoundContext | None) -> RoundResult:
    """The runtime worker of code loops (see the module docstring)."""
    try:
        ledger = ledger_of_task(request.task)
    except LoopactorsError as exc:
        return RoundResult(status="failed", error=f"{type(exc).__name__}: {exc}")
    async with round_lock(ledger):
        return await _code_round(ledger)


async def _code_round(ledger: CodeLedger) -> RoundResult:
    try:
        lease = held_lease(ledger.dir)
        own = None
        if lease is None:
            own = lease = acquire_lease(ledger.dir, owner=new_owner())
        try:
            async with lease_kept(own):
                outcome = await run_one_round(ledger, lease.owner)
        finally:
            if own is not None:
                release_lease(own)
    except LeaseHeld as exc:
        return RoundResult(status="failed", error=f"LeaseHeld: {exc}")
    except LoopactorsError as exc:
        return RoundResult(status="failed", error=f"{type(exc).__name__}: {exc}")
    text = outcome.summary
    if outcome.round is not None:
        text = f"round {outcome.round}: {text}"
    if outcome.stopped:
        return RoundResult(
            status="completed", output=f"{text}; loop {outcome.state.status}", done=True
        )
    if outcome.merged:
        return RoundResult(status="completed", output=text)
    return RoundResult(status="failed", output=text, error=text)
