"""Copy every loop of one store into another (``loopactors store copy``, docs/multinode.md).

Plain blocking code over two :class:`StoreBackend` objects, so any pair of stores works:
a SQLite directory into a PostgreSQL database (the usual move into a cluster), one database
into another, or back. The caller keeps runtimes off both stores while it runs (the
directory lock of a SQLite store, the lease of a PostgreSQL one).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import msgspec

from ..errors import StoreError
from ..loops import LoopState
from ._base import StoreBackend, Write

__all__ = ["CopyReport", "copy_loops"]

#: Loops read from the source at a time (one page of ``list_loops``).
PAGE = 500
#: Writes in one commit to the target: a few thousand rows in one transaction (one round
#: trip on PostgreSQL), well under what either engine takes in one statement.
COMMIT_WRITES = 2_000
#: Conflicting ids named in the refusal (the rest are counted).
CONFLICTS_SHOWN = 5


class CopyReport(msgspec.Struct, frozen=True, kw_only=True):
    """What a copy moved (or, with ``dry_run``, would move)."""

    loops: int = 0
    rounds: int = 0
    events: int = 0
    #: Notifications still queued in the source: not copied (they belong to the source's
    #: delivery queue; a node on the source delivers them, see docs/multinode.md).
    queued_notifications: int = 0
    dry_run: bool = False

    def note(self) -> str:
        verb = "would copy" if self.dry_run else "copied"
        text = (
            f"{verb} {self.loops} loop{'s' * (self.loops != 1)}, "
            f"{self.rounds} round{'s' * (self.rounds != 1)} and "
            f"{self.events} event{'s' * (self.events != 1)}"
        )
        if self.queued_notifications:
            text += (
                f"; {self.queued_notifications} queued notification"
                f"{'s' * (self.queued_notifications != 1)} of the source not copied"
            )
        return text


def _all_loops(source: StoreBackend) -> Iterator[LoopState]:
    after: tuple[float, str] | None = None
    while True:
        page = source.list_loops(limit=PAGE, after=after)
        yield from page
        if len(page) < PAGE:
            return
        after = (page[-1].created_at, page[-1].loop_id)


def copy_loops(
    source: StoreBackend,
    target: StoreBackend,
    *,
    dry_run: bool = False,
    progress: Callable[[CopyReport], None] | None = None,
) -> CopyReport:
    """Copy every loop of ``source`` (state, round records, event log) into ``target``.

    Nothing is written unless every loop id is free in the target: a loop the target
    already holds is never overwritten (the refusal names the first few). The events'
    notifications are not queued again (``Write.notify``). After the writes the target is
    read back, and a loop whose rounds or events did not all arrive is an error.

    Raises:
        StoreError: an id is taken in the target, a read or commit failed, or the read-back
            disagrees (what was committed before stays: copying into a fresh store is
            the way to start over).
    """
    ids = [state.loop_id for state in _all_loops(source)]
    taken = [loop_id for loop_id in ids if target.get_loop(loop_id) is not None]
    if taken:
        shown = ", ".join(taken[:CONFLICTS_SHOWN])
        more = f" and {len(taken) - CONFLICTS_SHOWN} more" if len(taken) > CONFLICTS_SHOWN else ""
        raise StoreError(
            f"{len(taken)} of the {len(ids)} loops to copy are already in the target store "
            f"({shown}{more}); nothing was copied (a loop is never overwritten)"
        )
    report = CopyReport(queued_notifications=source.statistics().notifications, dry_run=dry_run)
    expected: dict[str, tuple[int, int]] = {}
    batch: list[Write] = []
    for loop_id in ids:
        state = source.get_loop(loop_id)
        if state is None:  # pruned since the listing
            continue
        rounds = source.rounds(loop_id)
        events = tuple(source.events(loop_id))
        expected[loop_id] = (len(rounds), len(events))
        report = msgspec.structs.replace(
            report,
            loops=report.loops + 1,
            rounds=report.rounds + len(rounds),
            events=report.events + len(events),
        )
        if dry_run:
            continue
        # The loop's whole history in one batch: its state row, each round, its event log
        # in order, so a failed commit leaves no loop half copied.
        batch += [Write(state=state, round=record, notify=False) for record in rounds]
        batch.append(Write(state=state, events=events, notify=False))
        if len(batch) >= COMMIT_WRITES:
            target.commit(batch)
            batch = []
            if progress is not None:
                progress(report)
    if batch:
        target.commit(batch)
    if not dry_run:
        _check_arrived(target, expected)
    return report


def _check_arrived(target: StoreBackend, expected: dict[str, tuple[int, int]]) -> None:
    missing = [
        loop_id
        for loop_id, (rounds, events) in expected.items()
        if target.get_loop(loop_id) is None
        or len(target.rounds(loop_id)) != rounds
        or len(target.events(loop_id)) != events
    ]
    if missing:
        raise StoreError(
            f"{len(missing)} copied loops read back different from the source "
            f"({', '.join(missing[:CONFLICTS_SHOWN])}); the target store is not a faithful copy"
        )
