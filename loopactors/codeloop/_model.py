"""The code loop's state: its statuses, the legal moves between them, the slug. Pure, no trio.

One round walks ``ready -> running -> validating -> reviewing`` and ends in ``ready``,
``waiting_review``, ``completed`` or ``blocked``. ``paused`` and ``stopped`` come from the user;
``completed`` and ``stopped`` are terminal. Every change goes through :func:`check_status`, so
a ``paused`` or ``blocked`` loop cannot be sent to ``running`` by mistake (CodeShell 1).
"""

from __future__ import annotations

import re
import time
from typing import Literal

import msgspec

from ..errors import CodeLoopStateError, SlugError

__all__ = [
    "DISPATCHABLE",
    "IN_ROUND",
    "TERMINAL",
    "Attendance",
    "CodeLoopState",
    "CodeStatus",
    "check_slug",
    "check_status",
    "round_name",
]

CodeStatus = Literal[
    "ready",
    "running",
    "validating",
    "reviewing",
    "paused",
    "waiting_review",
    "completed",
    "stopped",
    "blocked",
]
Attendance = Literal["attended", "unattended"]

TERMINAL: frozenset[CodeStatus] = frozenset({"completed", "stopped"})
#: Statuses a round is in flight in: only the lease holder may see them, and after a crash
#: they are what reconciliation finds.
IN_ROUND: frozenset[CodeStatus] = frozenset({"running", "validating", "reviewing"})
#: The only status a round may start from.
DISPATCHABLE: frozenset[CodeStatus] = frozenset({"ready"})

_ROUND_END: frozenset[CodeStatus] = frozenset({"ready", "waiting_review", "completed", "blocked"})
_VALIDATING: frozenset[CodeStatus] = frozenset({"validating"})
_REVIEWING: frozenset[CodeStatus] = frozenset({"reviewing"})
_MOVES: dict[CodeStatus, frozenset[CodeStatus]] = {
    # ready -> waiting_review / blocked: a gate tripped before a round.
    "ready": frozenset({"running", "paused", "stopped", "waiting_review", "blocked"}),
    # A round ends early (executor failed, nothing committed, interrupted) in any round end.
    "running": _VALIDATING | _ROUND_END,
    "validating": _REVIEWING | _ROUND_END,
    "reviewing": _ROUND_END,
    "paused": frozenset({"ready", "stopped"}),
    "waiting_review": frozenset({"ready", "stopped"}),
    "blocked": frozenset({"ready", "stopped"}),
    "completed": frozenset(),
    "stopped": frozenset(),
}

_SLUG = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
MAX_SLUG = 64


def check_slug(slug: str) -> str:
    """Return ``slug`` if it is lowercase kebab-case, else raise :class:`SlugError`.

    The pattern admits no ``/``, ``.`` or ``..``, so a slug can never leave ``.loop/``.
    """
    if not isinstance(slug, str) or len(slug) > MAX_SLUG or not _SLUG.fullmatch(slug):
        raise SlugError(
            f"slug {slug!r} is not lowercase kebab-case: use a-z, 0-9 and single inner hyphens "
            f"(like fix-flaky-tests), at most {MAX_SLUG} characters"
        )
    return slug


def round_name(number: int) -> str:
    """``r001`` for round 1: the round's branch and receipt directory name."""
    return f"r{number:03d}"


def check_status(current: CodeStatus, new: CodeStatus) -> CodeStatus:
    """Return ``new`` if the loop may go from ``current`` to it, else raise
    :class:`CodeLoopStateError` naming the statuses it may go to."""
    if new in _MOVES[current]:
        return new
    if current in TERMINAL:
        raise CodeLoopStateError(f"the loop is {current}; a {current} loop never changes again")
    allowed = ", ".join(sorted(_MOVES[current]))
    raise CodeLoopStateError(
        f"a code loop cannot go from {current} to {new}; it may go to {allowed}"
    )


class CodeLoopState(msgspec.Struct, frozen=True, kw_only=True):
    """``STATE.json``: the loop's snapshot. Written only by the lease holder."""

    slug: str
    objective: str
    attendance: Attendance
    status: CodeStatus = "ready"
    #: The last round started (0 before the first); the next round is ``round + 1``.
    round: int = 0
    max_rounds: int | None = None
    #: ISO-8601 with a zone, compared for real before each round.
    deadline: str | None = None
    candidate_branch: str = ""
    #: The branch the candidate was cut from (e.g. main) and its commit then.
    base_branch: str | None = None
    base_commit: str = ""
    candidate_commit: str = ""
    #: Rounds in a row without progress (candidate advanced, or validation newly passing).
    no_progress_rounds: int = 0
    last_validation_passed: bool | None = None
    merged_rounds: int = 0
    #: Items the workers asked a human to approve (``NEEDS-APPROVAL:`` lines).
    pending_approvals: tuple[str, ...] = ()
    #: The gate that stopped the loop, and why, when it is waiting_review or blocked.
    active_gate: str | None = None
    reason: str | None = None
    next_action: str = "run_next_round"
    created_at: float = 0.0
    updated_at: float = 0.0
    version: int = 1

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL

    def moved(self, status: CodeStatus, **changes: object) -> CodeLoopState:
        """A copy in ``status`` (checked) with ``changes`` and ``updated_at`` now."""
        check_status(self.status, status)
        return msgspec.structs.replace(self, status=status, updated_at=time.time(), **changes)
