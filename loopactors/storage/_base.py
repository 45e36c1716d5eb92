"""The store backend interface: durable loops, rounds and event logs.

Backends are plain blocking objects; the Store actor calls them from a worker thread and
batches the writes of many loops into one :meth:`StoreBackend.commit` (group commit).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

import msgspec

from ..loops._events import AnyEvent
from ..loops._model import LoopState, RoundRecord

__all__ = ["StoreBackend", "StoreStatistics", "Write"]


class Write(msgspec.Struct, gc=False, frozen=True, kw_only=True):
    """One loop's step: its new state, the round it recorded, the events it emitted.

    All three land in the same transaction, so a crash never separates a round record from
    the phase that follows it.
    """

    state: LoopState
    round: RoundRecord | None = None
    events: tuple[AnyEvent, ...] = ()


class StoreStatistics(msgspec.Struct, frozen=True, kw_only=True):
    loops: int
    live_loops: int
    rounds: int
    events: int
    commits: int
    writes: int


class StoreBackend(abc.ABC):
    """Durable state. Every method is blocking; none is called concurrently with another."""

    kind: str

    @abc.abstractmethod
    def commit(self, writes: Sequence[Write]) -> None:
        """Apply every write in one transaction, all or nothing.

        A loop's state is replaced; a round record is upserted by ``(loop_id, round)`` (so a
        round re-run under the same idempotency key is recorded once); events are appended
        to the loop's log in order.
        """

    @abc.abstractmethod
    def get_loop(self, loop_id: str) -> LoopState | None: ...

    @abc.abstractmethod
    def list_loops(self, *, live_only: bool = False, limit: int | None = None) -> list[LoopState]:
        """Loops, newest first (by ``created_at``); only non-terminal ones if ``live_only``."""

    @abc.abstractmethod
    def rounds(self, loop_id: str) -> list[RoundRecord]:
        """A loop's round records, by round number."""

    @abc.abstractmethod
    def events(self, loop_id: str) -> list[AnyEvent]:
        """A loop's event log, in the order it was appended."""

    @abc.abstractmethod
    def statistics(self) -> StoreStatistics: ...

    @abc.abstractmethod
    def close(self) -> None: ...
