"""Gates, progress and verdicts: what decides whether a round may start, whether it counted,
and whether its review passed. Pure, no trio.

CodeShell stored a free-text deadline and a max round count and checked neither, and left
"progress" undefined (CodeShell 2). Here the deadline is an ISO-8601 time with a zone compared
with the clock, the round count is checked, and progress is measurable: the candidate branch
advanced, or validation passes where it failed before.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Literal

import attrs

from .._util import count_of
from ..errors import GateClosed, OrchestrationError
from ._model import CodeLoopState, CodeStatus

__all__ = [
    "NO_PROGRESS_LIMIT",
    "Gate",
    "ReviewVerdict",
    "check_gates",
    "check_settings",
    "dispatch_refusal",
    "is_progress",
    "parse_approvals",
    "parse_deadline",
    "parse_verdict",
    "require_dispatchable",
]

#: Rounds in a row without progress that stop the loop (the reference's "two rounds").
NO_PROGRESS_LIMIT = 2

GateName = Literal["deadline", "max_rounds", "no_progress", "approval", "breaker", "safety"]


@attrs.frozen
class Gate:
    """A tripped gate: its name, why, and the status the loop stops in."""

    name: GateName
    reason: str
    status: CodeStatus


def parse_deadline(text: str) -> dt.datetime:
    """An ISO-8601 time that names its zone (``Z`` or ``+02:00``), as an aware datetime."""
    try:
        when = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        raise OrchestrationError(
            f"deadline {text!r} is not an ISO-8601 time; write it like 2026-12-01T06:00:00Z "
            "or 2026-12-01T07:00:00+01:00"
        ) from None
    if when.tzinfo is None or when.utcoffset() is None:
        raise OrchestrationError(
            f"deadline {text!r} has no time zone, so it could mean any moment; add one, "
            "like 2026-12-01T06:00:00Z or 2026-12-01T07:00:00+01:00"
        )
    return when


def check_settings(
    *, attendance: str, max_rounds: int | None, deadline: str | None
) -> dt.datetime | None:
    """Check the gates a loop is started with; return the parsed deadline.

    An unattended loop must have a deadline or a round limit: nobody is there to stop it.
    """
    if attendance not in ("attended", "unattended"):
        raise OrchestrationError(
            f"attendance {attendance!r} is unknown; accepted: attended, unattended"
        )
    if max_rounds is not None and (isinstance(max_rounds, bool) or max_rounds < 1):
        raise OrchestrationError(f"max rounds must be an integer >= 1, got {max_rounds!r}")
    when = parse_deadline(deadline) if deadline is not None else None
    if attendance == "unattended" and max_rounds is None and when is None:
        raise OrchestrationError(
            "an unattended loop needs a deadline or a maximum number of rounds, or nobody "
            "would ever stop it: give --deadline ISO or --max-rounds N"
        )
    return when


def dispatch_refusal(state: CodeLoopState) -> str | None:
    """Why no round may start from this status (None: it may)."""
    if state.status == "ready":
        return None
    if state.status in ("running", "validating", "reviewing"):
        return f"round {state.round} is still {state.status}"
    detail = f" ({state.active_gate}: {state.reason})" if state.active_gate else ""
    return f"the loop is {state.status}{detail}; a {state.status} loop dispatches nothing"


def check_gates(state: CodeLoopState, now: dt.datetime) -> Gate | None:
    """The first gate that forbids the next round, or None.

    Deadline and round limit leave the work for review (``waiting_review``); no progress and
    an attended loop's open approvals need a human (``blocked`` / ``waiting_review``).
    """
    if state.deadline is not None and now >= parse_deadline(state.deadline):
        return Gate("deadline", f"the deadline {state.deadline} has passed", "waiting_review")
    if state.max_rounds is not None and state.round >= state.max_rounds:
        return Gate(
            "max_rounds",
            f"{state.round} of {count_of(state.max_rounds, 'round')} "
            + ("is" if state.round == 1 else "are")
            + " done",
            "waiting_review",
        )
    if state.no_progress_rounds >= NO_PROGRESS_LIMIT:
        return Gate(
            "no_progress",
            f"{state.no_progress_rounds} rounds in a row made no progress (the candidate did "
            "not advance and validation did not newly pass)",
            "blocked",
        )
    if state.attendance == "attended" and state.pending_approvals:
        return Gate(
            "approval",
            f"{len(state.pending_approvals)} item(s) wait for approval (attended: stop and ask)",
            "waiting_review",
        )
    return None


def require_dispatchable(state: CodeLoopState, now: dt.datetime) -> None:
    """Raise :class:`GateClosed` if a round may not start now (status, then gates)."""
    refusal = dispatch_refusal(state)
    if refusal is not None:
        raise GateClosed(refusal)
    gate = check_gates(state, now)
    if gate is not None:
        raise GateClosed(f"gate {gate.name}: {gate.reason}")


def is_progress(
    *, merged: bool, validation_passed: bool | None, last_validation_passed: bool | None
) -> bool:
    """Progress: the candidate advanced, or validation passes where it failed last time."""
    return merged or (validation_passed is True and last_validation_passed is False)


@attrs.frozen
class ReviewVerdict:
    approved: bool
    reason: str


_VERDICT = re.compile(r"^\s*VERDICT:\s*(\w+)\s*$", re.IGNORECASE | re.MULTILINE)


def parse_verdict(review: str) -> ReviewVerdict:
    """A reviewer's verdict: a line ``VERDICT: approve`` or ``VERDICT: reject`` (any case),
    reasons after it. No verdict line, an unknown word, or two lines that disagree: reject."""
    found = list(_VERDICT.finditer(review))
    if not found:
        return ReviewVerdict(False, "no verdict")
    words = {match.group(1).lower() for match in found}
    if not words <= {"approve", "reject"}:
        odd = ", ".join(sorted(words - {"approve", "reject"}))
        return ReviewVerdict(False, f"unknown verdict {odd!r} (accepted: approve, reject)")
    if len(words) > 1:
        return ReviewVerdict(False, "conflicting verdicts (both approve and reject)")
    last = found[-1]
    reason = review[last.end() :].strip() or review[: found[0].start()].strip()
    approved = words == {"approve"}
    return ReviewVerdict(approved, reason or ("approved" if approved else "rejected"))


_APPROVAL = re.compile(r"^\s*NEEDS-APPROVAL:\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)


def parse_approvals(output: str) -> list[str]:
    """Items a worker asks a human to approve: lines ``NEEDS-APPROVAL: what``."""
    return [match.group(1) for match in _APPROVAL.finditer(output)]
