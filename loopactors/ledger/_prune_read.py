"""``--prune`` of a large file: only the attempts of the pruning window are held, and a long
error among them only as what the pruner keeps of it.

The parsed ledger (``parse_ledger``) holds every attempt; the pruned ledger keeps the last
``window`` of them. Here the file is read twice a block at a time with ``--summary``'s
reader (``_summary_read``): the attempts are validated and counted, then those of the
window are kept as decoded, an error string of a long attempt as ``--inject`` keeps it
(``_inject_read._PrunedTrace``: its first ``maxTraceLines`` lines as UTF-8, the rest
counted). The window goes through ``parse_ledger`` as a ledger of its own with each such
error left out (so every other value is checked as the whole read checks it), then is
collapsed as ``prune_ledger`` collapses it (``_inject_read._Window``, comparing a long error
through its signature's grams), and a long error is written a piece at a time
(``_js.LongText``): one huge error is held once, as its kept lines (docs/ledger.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import msgspec

from ._facts import ABSENT
from ._inject_read import _Dropped, _PrunedTrace, _Window
from ._model import Attempt, Ledger, LedgerError, PruneConfig, parse_ledger, validate_prune_config
from ._summary import collapse_into
from ._summary_read import _NUMBER, _TEXT, _GiveUp, _read_ledger, _Text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["read_pruned_ledger"]


class _Attempts:
    """Attempts validated as ``_summary_read.StreamedSummary`` validates them; those from
    ``start`` on kept as decoded (a long one's error as :class:`_PrunedTrace`)."""

    __slots__ = ("count", "kept", "limit", "start")

    def __init__(self, start: int, limit: int = 1) -> None:
        self.start = start
        self.limit = limit
        self.count = 0
        self.kept: list[dict[str, Any]] = []

    def add(self, attempt: dict[str, Any]) -> None:
        get = attempt.get
        tokens = get("tokensUsed", ABSENT)
        error = get("error")
        if (
            type(get("action")) not in _TEXT
            or type(get("outcome")) not in _TEXT
            or (type(error) not in _TEXT and type(error) is not _PrunedTrace)
            or (tokens is not ABSENT and type(tokens) not in _NUMBER)
            or type(get("repeated")) not in _NUMBER
        ):
            raise _GiveUp
        if self.count >= self.start:
            self.kept.append(attempt)
        self.count += 1

    def sink(self) -> _PrunedTrace | _Dropped:
        """A long attempt's error string: pruned in the window, dropped before it."""
        return _PrunedTrace(self.limit) if self.count >= self.start else _Dropped()


class _Groups(_Window):
    """``prune_ledger``'s collapse of the window: each group's first attempt (its index in
    the window) with its pruned error, and the attempts collapsed into it."""

    __slots__ = ("groups",)

    def __init__(self, limit: int, threshold: float) -> None:
        super().__init__(0, limit, threshold)
        self.groups: list[tuple[int, object, list[int]]] = []

    def began(self, error: object) -> None:
        self.groups.append((self.count - 1, error, []))

    def collapsed(self) -> None:
        self.groups[-1][2].append(self.count - 1)


def _whole(value: float) -> int:
    """A prune setting as a count, whatever it is (one the checks refuse is refused after
    the ledger is read, as the whole read refuses it)."""
    try:
        return max(1, int(value))
    except (OverflowError, ValueError, TypeError):
        return 1


def read_pruned_ledger(
    read: Callable[[int], bytes], rewind: Callable[[], object], prune: PruneConfig
) -> Ledger | None:
    """``prune_ledger(parse_ledger(text), prune)`` of the ledger JSON ``read(n)`` returns
    from its start (``rewind()`` starts it again), or None where ``parse_ledger`` must read
    the whole ledger (input the block reader gives up on). A long error of the result is a
    :class:`_js.LongText` (``write_json`` writes it as the string it stands for)."""
    counted = _Attempts(1 << 62)
    text = _Text(read)
    text.error_sink = _Dropped
    try:
        _read_ledger(text, counted.add)
    except _GiveUp:
        return None
    try:
        keep = int(prune.window)
    except (OverflowError, ValueError, TypeError):
        keep = 0  # refused by validate_prune_config below, after the ledger is read
    rewind()
    start = max(0, counted.count - keep) if keep > 0 else counted.count
    attempts = _Attempts(start, _whole(prune.max_trace_lines))
    others: dict[str, object] = {}
    text = _Text(read)
    text.error_sink = attempts.sink
    try:
        goal = _read_ledger(text, attempts.add, others)
    except _GiveUp:
        return None  # the file changed between the reads
    if attempts.count != counted.count:
        return None
    kept = attempts.kept
    del attempts, text
    # The window as a ledger of its own, each long error left out: the checks of the whole
    # read, on what is small.
    window = [
        {**attempt, "error": ""} if type(attempt.get("error")) is _PrunedTrace else attempt
        for attempt in kept
    ]
    ledger: dict[str, object] = {"goal": goal}
    if "startedAt" in others:
        ledger["startedAt"] = others["startedAt"]
    ledger["attempts"] = window
    try:
        parsed = parse_ledger(json.dumps(ledger))
    except LedgerError:
        return None  # what the whole read refuses: its message then
    del ledger, window
    validate_prune_config(prune)
    groups = _Groups(int(prune.max_trace_lines), prune.similarity_threshold)
    for attempt in kept:
        groups.add(attempt)
    out: list[Attempt] = []
    for index, error, collapsed in groups.groups:
        head = parsed.attempts[index]
        if isinstance(head.error, str):
            head = msgspec.structs.replace(head, error=error)
        for later in collapsed:
            head = collapse_into(head, parsed.attempts[later])
        out.append(head)
    return Ledger(goal=parsed.goal, started_at=parsed.started_at, attempts=tuple(out))
