"""Showing loops as they run: a live table on a terminal, plain lines otherwise, or JSON.

Used by ``loopactors run``, ``resume`` and ``demo``. The display only reads events; it never
slows a loop (its subscription is bounded like any other).
"""

from __future__ import annotations

import sys
import time
from typing import IO

import attrs
import msgspec
from rich.console import Console
from rich.live import Live

from .._util import terminal_safe
from ..loops import (
    AgentStep,
    AnyEvent,
    Gap,
    LoopFinished,
    LoopInterrupted,
    LoopPaused,
    LoopRecovered,
    LoopResumed,
    LoopStarted,
    LoopState,
    RoundDeferred,
    RoundFinished,
    RoundStarted,
    RoundWaiting,
)
from ._tables import Column, Rows, short_ids

__all__ = ["JsonLines", "Progress", "final_table"]

_encoder = msgspec.json.Encoder()


class JsonLines:
    """One JSON object per event on stdout, nothing else."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stdout

    def show(self, event: AnyEvent | Gap) -> None:
        self.stream.write(_encoder.encode(event).decode() + "\n")
        self.stream.flush()

    def note(self, text: str) -> None:
        """Narration is not an event: on stderr, so stdout stays pure JSON lines."""
        print(terminal_safe(text), file=sys.stderr)


@attrs.define
class _Row:
    loop_id: str
    task: str
    rounds: int
    round: int = 0
    completed: int = 0
    phase: str = "activating"
    last: str = ""
    started: float = attrs.field(factory=time.monotonic)
    ended: float | None = None


class Progress:
    """A live table (on a terminal) or the reference's ``[loop-progress ...]`` lines."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console(stderr=False)
        self.rows: dict[str, _Row] = {}
        self.live: Live | None = None

    def __enter__(self) -> Progress:
        if self.console.is_terminal:
            self.live = Live(self._table(), console=self.console, refresh_per_second=8)
            self.live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live is not None:
            self.live.update(self._table())
            self.live.__exit__(None, None, None)

    def track(self, state: LoopState) -> None:
        self.rows.setdefault(
            state.loop_id,
            _Row(
                state.loop_id,
                state.spec.task,
                state.spec.rounds,
                round=state.round,
                completed=state.completed_rounds,
                phase=state.phase,
            ),
        )

    def note(self, text: str) -> None:
        self.console.print(terminal_safe(text), markup=False, highlight=False)

    def show(self, event: AnyEvent | Gap) -> None:
        if isinstance(event, Gap):
            self.note(f"(display fell behind: {event.missed} events not shown)")
            return
        row = self.rows.get(event.loop_id)
        if row is not None:
            self._apply(row, event)
        if self.live is not None:
            if isinstance(event, RoundWaiting):  # worth a line above the table
                self.note(f"{event.loop_id}: {event.note()}")
            self.live.update(self._table())
        else:
            self.note(f"{event.loop_id}: {event.note()}")

    def _apply(self, row: _Row, event: AnyEvent) -> None:
        # The phase words are the loop's own (as `status` and the dashboard show them).
        if isinstance(event, LoopStarted | LoopResumed):
            row.phase = "dispatching"
        elif isinstance(event, RoundStarted):
            row.round = event.round
            row.phase = "awaiting_worker"
            row.last = f"r{event.round} running"
        elif isinstance(event, RoundFinished):
            if event.status == "completed":
                row.completed += 1
            row.phase = "dispatching"
            row.last = f"r{event.round} {event.status}"
            if event.tasks_total is not None:
                row.last += f", tasks {event.tasks_done}/{event.tasks_total}"
        elif isinstance(event, LoopFinished):
            row.phase = event.phase
            row.ended = time.monotonic()
        elif isinstance(event, AgentStep):
            row.last = _head(f"r{event.round} {event.tool} {event.detail}", 40)
        elif isinstance(event, RoundDeferred):
            row.phase = "dispatching"
            row.last = f"r{event.round} deferred until {_clock(event.until)}"
        elif isinstance(event, LoopPaused):
            row.phase = "paused"
        elif isinstance(event, LoopRecovered):
            row.phase = event.phase
        elif isinstance(event, LoopInterrupted):
            row.phase = "interrupted"

    def _table(self) -> Rows:
        columns = [
            Column("loop", shorten=short_ids),
            Column("task", flex=True, least=16),
            Column("phase"),
            Column("done", justify="right"),
            Column("last", flex=True, drop=1, least=16),
        ]
        rows = [
            [
                row.loop_id,
                row.task,
                row.phase,
                f"{row.completed}/{row.rounds}",
                row.last,
            ]
            for row in self.rows.values()
        ]
        return Rows(columns, rows, title="loops")


def tasks_of(state: LoopState) -> str:
    """`` tasks 3/7`` for a plan-driven loop (docs/plans.md), else nothing."""
    if state.tasks_total is None:
        return ""
    return f" tasks {state.tasks_done}/{state.tasks_total}"


def cost_of(state: LoopState) -> str:
    """What the loop spent, and of what budget (``max_cost_usd``) if it has one."""
    spent = f"${state.cost_usd:.4f}" if state.cost_usd else "-"
    budget = state.spec.max_cost_usd
    return spent if budget is None else f"{spent} of ${budget:.2f}"


def final_table(
    states: list[LoopState], *, title: str = "loops", owners: dict[str, str] | None = None
) -> Rows:
    """One row per loop with its outcome: the closing table of ``run``, ``resume`` and
    ``demo``, and ``status``'s table; with ``owners`` (a shared store), a column naming the
    node that owns each loop."""
    columns = [
        Column("loop", shorten=short_ids),
        Column("task", flex=True, least=16),
        Column("phase"),
        Column("done", justify="right"),
        Column("tokens", drop=2, justify="right"),
        Column("cost", drop=3, justify="right"),
        Column("reason", flex=True, drop=1, least=16),
    ]
    if owners is not None:
        columns.insert(3, Column("node", drop=2))
    rows = []
    now = time.time()
    for state in states:
        reason = state.reason or state.trigger or ""
        if state.deferred_until is not None and not state.terminal and state.deferred_until > now:
            # A due time passed is not a wait (a loop paused in its inter-round delay keeps
            # it; a resume starts the delay again).
            reason = f"waiting until {_clock(state.deferred_until)}: {state.defer_reason or ''}"
        row = [
            state.loop_id,
            state.spec.task,
            state.phase,
            f"{state.completed_rounds}/{state.spec.rounds}" + tasks_of(state),
            str(state.tokens_used),
            cost_of(state),
            reason,
        ]
        if owners is not None:
            row.insert(3, owners.get(state.loop_id, "-"))
        rows.append(row)
    return Rows(columns, rows, title=title)


def _clock(at: float) -> str:
    """A UNIX time as local date and time, to the second."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


def _head(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"
