"""Reports read from the ledger and git: the hand-off record and a loop's status."""

from __future__ import annotations

import datetime as dt

import msgspec

from ._events import CodeRoundFinished, RoundInterrupted
from ._git import LoopGit
from ._handoff import HandOff, RoundLine, render_handoff
from ._lease import LeaseRecord, read_lease
from ._ledger import CodeLedger
from ._model import CodeLoopState

__all__ = [
    "CodeLoopStatus",
    "build_handoff",
    "loop_status",
    "rejected_branches",
    "rounds_finished",
    "run_summary",
    "write_handoff",
]

#: How much of a round's reason the run's summary line quotes.
_REASON_HEAD = 200


async def rejected_branches(git: LoopGit) -> list[str]:
    """Round branches still there: merged ones are deleted, so these were not merged."""
    branches = await git.loop_branches()
    return sorted(b for b in branches if b != git.candidate)


def _round_lines(ledger: CodeLedger) -> list[RoundLine]:
    lines: dict[int, RoundLine] = {}
    for event in ledger.read_events():
        if isinstance(event, CodeRoundFinished):
            validation = {True: "passed", False: "failed", None: "not run"}[event.validation_passed]
            lines[event.round] = RoundLine(
                round=event.round,
                branch=event.branch or "",
                outcome="merged" if event.merged else f"not merged: {event.reason or ''}",
                validation=validation,
                verdict=event.verdict or "-",
            )
        elif isinstance(event, RoundInterrupted):
            lines[event.round] = RoundLine(
                round=event.round,
                branch=event.branch or "",
                outcome=f"interrupted: {event.reason or ''}",
                validation="-",
                verdict="-",
            )
    return [lines[n] for n in sorted(lines)]


async def build_handoff(ledger: CodeLedger, git: LoopGit, state: CodeLoopState) -> HandOff:
    candidate = await git.rev(git.candidate) or state.candidate_commit
    base = state.base_branch or state.base_commit
    base_commit = await git.rev(base) or state.base_commit
    stat = await git.diff_stat(base_commit, candidate) if candidate and base_commit else ""
    return HandOff(
        slug=state.slug,
        objective=state.objective,
        status=state.status,
        rounds=state.round,
        merged_rounds=state.merged_rounds,
        max_rounds=state.max_rounds,
        deadline=state.deadline,
        active_gate=state.active_gate,
        reason=state.reason,
        candidate_branch=git.candidate,
        candidate_commit=candidate,
        base=base,
        diff_stat=stat,
        rounds_table=tuple(_round_lines(ledger)),
        last_validation_passed=state.last_validation_passed,
        pending_approvals=state.pending_approvals,
        rejected_branches=tuple(await rejected_branches(git)),
        next_action=state.next_action,
        written_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    )


async def write_handoff(ledger: CodeLedger, git: LoopGit, state: CodeLoopState) -> HandOff:
    """Build the hand-off record and write it to ``HANDOFF.md``."""
    handoff = await build_handoff(ledger, git, state)
    ledger.write_text(ledger.handoff_path, render_handoff(handoff))
    return handoff


class CodeLoopStatus(msgspec.Struct, frozen=True, kw_only=True):
    """A read-only view of one loop: its state, who holds it, what is left to inspect."""

    state: CodeLoopState
    ledger: str
    lease: LeaseRecord | None
    pending_control: str | None
    rejected_branches: tuple[str, ...]


async def loop_status(ledger: CodeLedger, git: LoopGit) -> CodeLoopStatus:
    return CodeLoopStatus(
        state=ledger.read_state(),
        ledger=str(ledger.dir),
        lease=read_lease(ledger.dir),
        pending_control=ledger.pending_control(),
        rejected_branches=tuple(await rejected_branches(git)),
    )


def rounds_finished(ledger: CodeLedger, *, after: int = 0) -> list[CodeRoundFinished]:
    """The outcome of each round numbered above ``after``, in order (the last record of a
    round counts)."""
    found: dict[int, CodeRoundFinished] = {}
    for event in ledger.read_events():
        if isinstance(event, CodeRoundFinished) and event.round > after:
            found[event.round] = event
    return [found[number] for number in sorted(found)]


def run_summary(state: CodeLoopState, finished: list[CodeRoundFinished]) -> str:
    """The last line of ``loopactors code run``: where the loop stands, and what the rounds of
    this run did, naming each one not merged and why (a gate's reason, such as the round
    limit, would otherwise be all that shows of the last round)."""
    gate = f" ({state.active_gate}: {state.reason})" if state.active_gate else ""
    line = f"{state.slug}: {state.status}{gate} after round {state.round}"
    if finished:
        merged = sum(1 for event in finished if event.merged)
        count = len(finished)
        line += f"; this run: {count} round{'s' if count != 1 else ''}, {merged} merged"
        failed = [event for event in finished if not event.merged]
        if failed:
            reasons = "; ".join(
                f"round {event.round}: {_head(event.reason or 'no reason recorded')}"
                for event in failed
            )
            line += f"; not merged: {reasons}"
    return line + "; not pushed"


def _head(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _REASON_HEAD else text[: _REASON_HEAD - 3] + "..."
