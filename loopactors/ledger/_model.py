"""The ledger's data: frozen msgspec Structs with loop-context's JSON names, and the config
checks (docs/ledger.md).

Python attributes are snake_case; ``rename="camel"`` gives loop-context's keys on the wire
(``tokensUsed``, ``shouldContinue``). Optional attempt keys default to ``UNSET`` so a key that
was absent stays absent on output, as JavaScript omits ``undefined``.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from ..errors import LoopactorsError
from ._js import WHITESPACE
from ._rules import (
    FRUSTRATION_THRESHOLD,
    MAX_ITERATIONS,
    MAX_TRACE_LINES,
    NO_PROGRESS_THRESHOLD,
    SIMILARITY_THRESHOLD,
    STAGNATION_THRESHOLD,
    WINDOW,
    assert_positive_integer,
    assert_similarity_threshold,
    check_limits,
)

__all__ = [
    "Attempt",
    "AttemptSummary",
    "BreakerConfig",
    "BreakerDecision",
    "ErrorGroup",
    "Ledger",
    "LedgerError",
    "PruneConfig",
    "Trigger",
    "assert_positive_integer",
    "assert_similarity_threshold",
    "parse_ledger",
    "validate_breaker_config",
    "validate_prune_config",
]

Trigger = Literal[
    "ok",
    "stagnation",
    "frustration",
    "no-progress",
    "token-budget",
    "max-iterations",
    "daily-budget",
]

_NO_LEDGER = "No ledger provided. Pass --ledger <file.json> or pipe JSON on stdin."
_INVALID_LEDGER = "Invalid ledger: expected { goal: string, attempts: Attempt[] }."


class LedgerError(LoopactorsError, ValueError):
    """Ledger text that cannot be used (empty, not JSON, or not a ledger)."""


class Attempt(msgspec.Struct, gc=False, frozen=True, kw_only=True, rename="camel"):
    """One attempt; every key is optional because the reference never validates attempts.

    Field order is the reference's usual key order, and ``repeated`` comes last as the pruner
    appends it.
    """

    #: Informational only: kept as written, whatever its type (a script may write an epoch
    #: number as the timestamp, or a string iteration).
    iteration: Any = UNSET
    timestamp: Any = UNSET
    action: str | UnsetType | None = UNSET
    #: ``success``, ``failure`` or ``noop``; other values are kept (each function reads them
    #: its own way, docs/ledger.md, "Attempts").
    outcome: str | UnsetType | None = UNSET
    error: str | UnsetType | None = UNSET
    tokens_used: int | float | UnsetType | None = UNSET
    repeated: int | float | UnsetType | None = UNSET


class Ledger(msgspec.Struct, gc=False, frozen=True, kw_only=True, rename="camel"):
    """A loop's goal and its attempts, oldest first; unknown top-level keys are ignored."""

    goal: str
    #: Carried through by the pruner as it is, whatever its type; otherwise unused.
    started_at: Any = UNSET
    attempts: tuple[Attempt, ...]


class BreakerConfig(msgspec.Struct, gc=False, frozen=True, kw_only=True, rename="camel"):
    max_iterations: int = MAX_ITERATIONS
    stagnation_threshold: int = STAGNATION_THRESHOLD
    frustration_threshold: int = FRUSTRATION_THRESHOLD
    no_progress_threshold: int = NO_PROGRESS_THRESHOLD
    similarity_threshold: float = SIMILARITY_THRESHOLD
    #: ``None``: no cap.
    token_budget: int | None = None


class PruneConfig(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    max_trace_lines: int = MAX_TRACE_LINES
    window: int = WINDOW
    similarity_threshold: float = SIMILARITY_THRESHOLD


class BreakerDecision(msgspec.Struct, gc=False, frozen=True, kw_only=True, rename="camel"):
    """The breaker's answer; the field order is the reference's JSON key order."""

    iterations: int
    tokens_used: int | float
    should_continue: bool
    escalate: bool
    trigger: Trigger
    reason: str


class ErrorGroup(msgspec.Struct, frozen=True, kw_only=True):
    #: The signature of the group's first member: later members are compared with it.
    signature: str
    count: int
    #: The first line of the first member's raw error, trimmed.
    sample: str


class AttemptSummary(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    total_attempts: int
    successes: int
    failures: int
    noops: int
    tokens_used: int | float
    #: Most frequent first; ties keep creation order.
    distinct_errors: tuple[ErrorGroup, ...]
    #: Unique actions in first-seen order; ``None`` is a missing action.
    actions_tried: tuple[str | None, ...]


def parse_ledger(text: str | bytes) -> Ledger:
    """Read ledger JSON as the reference does (docs/ledger.md, "Reading a ledger"): strict JSON, so
    no ``NaN``."""
    raw = text.encode() if isinstance(text, str) else text
    if not raw.decode(errors="replace").strip(WHITESPACE):
        raise LedgerError(_NO_LEDGER)
    try:
        return msgspec.json.decode(raw, type=Ledger)
    except msgspec.ValidationError as exc:
        message = str(exc)
        # Problems with the top level get the reference's message; problems inside an
        # attempt (which the reference would crash on) keep msgspec's, which names the path.
        if "at `$.attempts[" in message:
            raise LedgerError(f"Invalid attempt: {message}") from None
        raise LedgerError(_INVALID_LEDGER) from None
    except msgspec.DecodeError as exc:
        raise LedgerError(str(exc)) from None


def validate_breaker_config(config: BreakerConfig) -> None:
    """The first failing check raises :class:`ConfigError` (docs/ledger.md, "Config checks")."""
    check_limits(config)


def validate_prune_config(config: PruneConfig) -> None:
    """The prune config's checks, in order (docs/ledger.md, "Config checks")."""
    assert_positive_integer(config.max_trace_lines, "maxTraceLines")
    assert_positive_integer(config.window, "window")
    assert_similarity_threshold(config.similarity_threshold)
