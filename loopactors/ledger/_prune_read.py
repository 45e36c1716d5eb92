"""``--prune`` of a large file: only the attempts of the pruning window are held.

The parsed ledger (``parse_ledger``) holds every attempt; the pruned ledger keeps the last
``window`` of them. Here the file is read twice a block at a time with ``--summary``'s
reader (``_summary_read``): the attempts are validated and counted, then those of the
window are kept as decoded and given, with the goal and ``startedAt``, to ``parse_ledger``
and ``prune_ledger`` as a ledger of their own. A huge error in the window is still held
whole, several times (the decoded text, its JSON, the parsed and the pruned copies and the
output: docs/ledger.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable

from ._facts import ABSENT
from ._model import Ledger, LedgerError, PruneConfig, parse_ledger
from ._summary import prune_ledger
from ._summary_read import _NUMBER, _TEXT, _GiveUp, _Pieces, _read_ledger, _Text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["read_pruned_ledger"]


class _Dropped:
    """A long attempt's error string counted, not kept (it is checked as JSON as it goes)."""

    __slots__ = ()

    def add(self, piece: str) -> None:
        pass

    def result(self) -> str:
        return ""


class _Attempts:
    """Attempts validated as ``_summary_read.StreamedSummary`` validates them; those from
    ``start`` on kept as decoded."""

    __slots__ = ("count", "kept", "start")

    def __init__(self, start: int) -> None:
        self.start = start
        self.count = 0
        self.kept: list[dict[str, Any]] = []

    def add(self, attempt: dict[str, Any]) -> None:
        get = attempt.get
        tokens = get("tokensUsed", ABSENT)
        if (
            type(get("action")) not in _TEXT
            or type(get("outcome")) not in _TEXT
            or type(get("error")) not in _TEXT
            or (tokens is not ABSENT and type(tokens) not in _NUMBER)
            or type(get("repeated")) not in _NUMBER
        ):
            raise _GiveUp
        if self.count >= self.start:
            self.kept.append(attempt)
        self.count += 1

    def sink(self) -> _Pieces | _Dropped:
        """A long attempt's error string: whole in the window, dropped before it."""
        return _Pieces() if self.count >= self.start else _Dropped()


def read_pruned_ledger(
    read: Callable[[int], bytes], rewind: Callable[[], object], prune: PruneConfig
) -> Ledger | None:
    """``prune_ledger(parse_ledger(text), prune)`` of the ledger JSON ``read(n)`` returns
    from its start (``rewind()`` starts it again), or None where ``parse_ledger`` must read
    the whole ledger (input the block reader gives up on)."""
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
        keep = 0  # refused by prune_ledger below, after the ledger is read
    rewind()
    attempts = _Attempts(max(0, counted.count - keep) if keep > 0 else counted.count)
    others: dict[str, object] = {}
    text = _Text(read)
    text.error_sink = attempts.sink
    try:
        goal = _read_ledger(text, attempts.add, others)
    except _GiveUp:
        return None  # the file changed between the reads
    if attempts.count != counted.count:
        return None
    ledger: dict[str, object] = {"goal": goal}
    if "startedAt" in others:
        ledger["startedAt"] = others["startedAt"]
    ledger["attempts"] = attempts.kept
    del others, attempts, text
    # One copy at a time of a long error in the window: decoded, as JSON, parsed.
    data = json.dumps(ledger)
    del ledger
    try:
        parsed = parse_ledger(data)
    except LedgerError:
        return None  # what the whole read refuses: its message then
    del data
    return prune_ledger(parsed, prune)
