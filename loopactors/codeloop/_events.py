"""``RUNS.jsonl``: typed, append-only events that are enough to rebuild ``STATE.json``.

Every event records who wrote it (``actor``: the lease owner, or ``user``), the status before
and after, the round, and the branch and commit it concerns (CodeShell 5, 12). Each kind adds
the fields its change touched, and :func:`rebuild_state` folds them back into the state.
"""

from __future__ import annotations

import msgspec

from ..errors import CodeLoopStateError
from ._model import CodeLoopState, CodeStatus, check_status

__all__ = [
    "AnyCodeEvent",
    "CodeRoundFinished",
    "GateTripped",
    "Initialized",
    "RoundInterrupted",
    "RoundStarted",
    "SettingsChanged",
    "StatusChanged",
    "apply_event",
    "decode_event",
    "encode_event",
    "event_type",
    "rebuild_state",
]


class _Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type"):
    at: float
    actor: str
    prev_status: CodeStatus | None
    status: CodeStatus
    round: int
    reason: str | None = None
    branch: str | None = None
    commit: str | None = None
    next_action: str = "run_next_round"

    @property
    def type(self) -> str:
        """The event's tag (``"round_started"``, ...), as written to the ledger."""
        return str(type(self).__struct_config__.tag)


class Initialized(_Event, frozen=True, kw_only=True, tag="initialized"):
    """A new loop (or one re-initialised with force): the whole initial state."""

    state: CodeLoopState


class RoundStarted(_Event, frozen=True, kw_only=True, tag="round_started"):
    """The intent of a round, written before its branch exists (``commit``: its base)."""


class StatusChanged(_Event, frozen=True, kw_only=True, tag="transition"):
    """Any other move: a phase of the round, pause, resume, stop."""

    active_gate: str | None = None


class RoundInterrupted(_Event, frozen=True, kw_only=True, tag="round_interrupted"):
    """A round found in flight after a crash that could not be resumed; its branch is kept."""


class CodeRoundFinished(_Event, frozen=True, kw_only=True, tag="round_finished"):
    """A round's outcome and the counters it moved."""

    merged: bool
    validation_passed: bool | None
    verdict: str | None
    progress: bool
    no_progress_rounds: int
    last_validation_passed: bool | None
    merged_rounds: int
    candidate_commit: str
    pending_approvals: tuple[str, ...] = ()


class GateTripped(_Event, frozen=True, kw_only=True, tag="gate_tripped"):
    """A gate stopped the loop at a safe point (status waiting_review or blocked)."""

    active_gate: str


class SettingsChanged(_Event, frozen=True, kw_only=True, tag="settings_changed"):
    """Gates changed on resume (a new max rounds or deadline); no-progress starts over."""

    max_rounds: int | None
    deadline: str | None
    #: What stays pending (a resume approves what was pending: it is cleared).
    pending_approvals: tuple[str, ...] = ()


AnyCodeEvent = (
    Initialized
    | RoundStarted
    | StatusChanged
    | RoundInterrupted
    | CodeRoundFinished
    | GateTripped
    | SettingsChanged
)

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(AnyCodeEvent)


def encode_event(event: AnyCodeEvent) -> bytes:
    return _encoder.encode(event)


def decode_event(line: bytes | str) -> AnyCodeEvent:
    return _decoder.decode(line)


def apply_event(state: CodeLoopState | None, event: AnyCodeEvent) -> CodeLoopState:
    """The state after ``event``: the one way the ledger changes a state, so that
    :func:`rebuild_state` over ``RUNS.jsonl`` always gives back ``STATE.json``.

    Raises:
        CodeLoopStateError: the event's status move is illegal, or it does not start from the
            current status (a writer that lost track of the state).
    """
    if isinstance(event, Initialized):
        return event.state
    if state is None:
        raise CodeLoopStateError(f"a {event_type(event)} event needs an initialised loop")
    if event.prev_status != state.status:
        raise CodeLoopStateError(
            f"a {event_type(event)} event from {event.prev_status} does not apply to a loop "
            f"that is {state.status}"
        )
    if event.status != state.status or state.terminal:
        check_status(state.status, event.status)
    changes: dict[str, object] = {
        "status": event.status,
        "round": event.round,
        "updated_at": event.at,
        "reason": event.reason,
        "next_action": event.next_action,
    }
    if isinstance(event, StatusChanged | GateTripped):
        changes["active_gate"] = event.active_gate
    elif isinstance(event, CodeRoundFinished):
        changes.update(_carried(event, _ROUND_FINISHED), active_gate=None)
    elif isinstance(event, SettingsChanged):
        changes.update(_carried(event, _SETTINGS_CHANGED), no_progress_rounds=0)
    return msgspec.structs.replace(state, **changes)


#: The state's fields these events carry, taken over as they are.
_ROUND_FINISHED = (
    "no_progress_rounds",
    "last_validation_passed",
    "merged_rounds",
    "candidate_commit",
    "pending_approvals",
)
_SETTINGS_CHANGED = ("max_rounds", "deadline", "pending_approvals")


def _carried(event: AnyCodeEvent, names: tuple[str, ...]) -> dict[str, object]:
    return {name: getattr(event, name) for name in names}


def event_type(event: AnyCodeEvent) -> str:
    return type(event).__struct_config__.tag  # type: ignore[return-value]


def rebuild_state(events: list[AnyCodeEvent]) -> CodeLoopState | None:
    """The state the events describe: from the last ``initialized`` on, event by event."""
    state: CodeLoopState | None = None
    for event in events:
        if state is None and not isinstance(event, Initialized):
            continue  # events before any initialisation describe no state
        state = apply_event(state, event)
    return state
