"""Durable state: loops, their round records and event logs.

General layout: ``_base`` (the :class:`StoreBackend` interface and its records), ``_memory``
(dicts, for tests and demos), ``_sqlite`` (one WAL-mode SQLite file). All are private; this
module is the public surface, and :func:`open_backend` picks a backend by name.
"""

from __future__ import annotations

from pathlib import Path

from .._util import fix_public_module, private_dirs
from ..errors import StoreError
from ._base import COMMIT_BUCKETS as COMMIT_BUCKETS
from ._base import PRUNE_BATCH as PRUNE_BATCH
from ._base import CommitLatency as CommitLatency
from ._base import PruneReport as PruneReport
from ._base import QueuedNotification as QueuedNotification
from ._base import StoreBackend as StoreBackend
from ._base import StoreStatistics as StoreStatistics
from ._base import Write as Write
from ._base import summary_of as summary_of
from ._memory import MemoryBackend as MemoryBackend
from ._sqlite import SqliteBackend as SqliteBackend

__all__ = [
    "COMMIT_BUCKETS",
    "PRUNE_BATCH",
    "CommitLatency",
    "MemoryBackend",
    "PruneReport",
    "QueuedNotification",
    "SqliteBackend",
    "StoreBackend",
    "StoreStatistics",
    "Write",
    "open_backend",
    "summary_of",
]

DB_FILENAME = "loopactors.db"
_KINDS = ("memory", "sqlite")


def open_backend(kind: str, state_dir: Path | None) -> StoreBackend:
    """Open the backend named ``kind``: ``memory``, or ``sqlite`` in ``state_dir``.

    The SQLite file is ``<state_dir>/loopactors.db``; ``state_dir`` is created if missing.
    """
    if kind == "memory":
        return MemoryBackend()
    if kind == "sqlite":
        if state_dir is None:
            raise StoreError("the sqlite store needs a state directory")
        try:
            private_dirs(state_dir)
        except OSError as exc:
            raise StoreError(f"cannot create the state directory {state_dir}: {exc}") from exc
        return SqliteBackend(state_dir / DB_FILENAME)
    raise StoreError(f"unknown store kind {kind!r}; accepted: {', '.join(_KINDS)}")


fix_public_module(globals(), __all__)
