"""Durable state: loops, their round records and event logs.

General layout: ``_base`` (the :class:`StoreBackend` interface and its records), ``_kinds``
(stores by URL: the registry of :class:`StoreKind`), ``_copy`` (one store's loops into
another), ``_memory`` (dicts, for tests and demos), ``_sqlite`` (one WAL-mode SQLite file),
``_postgres`` (a PostgreSQL database shared by nodes; psycopg is imported only when one is
opened). All are private; this module is the public surface, and :func:`open_store` opens a
store by URL.
"""

from __future__ import annotations

from pathlib import Path

from .._util import fix_public_module
from ._base import COMMIT_BUCKETS as COMMIT_BUCKETS
from ._base import DB_FILENAME as DB_FILENAME
from ._base import PRUNE_BATCH as PRUNE_BATCH
from ._base import CommitLatency as CommitLatency
from ._base import NodeLease as NodeLease
from ._base import PruneReport as PruneReport
from ._base import QueuedNotification as QueuedNotification
from ._base import StoreBackend as StoreBackend
from ._base import StoreStatistics as StoreStatistics
from ._base import Write as Write
from ._base import summary_of as summary_of
from ._copy import CopyReport as CopyReport
from ._copy import copy_loops as copy_loops
from ._kinds import DURABILITIES as DURABILITIES
from ._kinds import CommandRoutes as CommandRoutes
from ._kinds import Durability as Durability
from ._kinds import Placement as Placement
from ._kinds import StoreKind as StoreKind
from ._kinds import StoreUrl as StoreUrl
from ._kinds import check_durability as check_durability
from ._kinds import check_store as check_store
from ._kinds import open_store as open_store
from ._kinds import parse_store as parse_store
from ._kinds import register_store as register_store
from ._kinds import store_kind as store_kind
from ._kinds import unregister_store as unregister_store
from ._memory import MemoryBackend as MemoryBackend
from ._sqlite import SqliteBackend as SqliteBackend

__all__ = [
    "COMMIT_BUCKETS",
    "DB_FILENAME",
    "DURABILITIES",
    "PRUNE_BATCH",
    "CommandRoutes",
    "CommitLatency",
    "CopyReport",
    "Durability",
    "MemoryBackend",
    "NodeLease",
    "Placement",
    "PruneReport",
    "QueuedNotification",
    "SqliteBackend",
    "StoreBackend",
    "StoreKind",
    "StoreStatistics",
    "StoreUrl",
    "Write",
    "check_durability",
    "check_store",
    "copy_loops",
    "open_backend",
    "open_store",
    "parse_store",
    "register_store",
    "store_kind",
    "summary_of",
    "unregister_store",
]


def open_backend(
    url: str, state_dir: Path | None, *, durability: Durability = "normal"
) -> StoreBackend:
    """Open the store ``url`` names for reading and writing (see :func:`open_store`):
    ``memory``, ``sqlite`` (``<state_dir>/loopactors.db``, the directory created if
    missing), ``sqlite:DIR``, ``postgresql://...`` or a registered scheme; its commits as
    durable as ``durability`` says."""
    backend = open_store(url, state_dir, durability=durability)
    assert backend is not None  # only a read-only open finds nothing
    return backend


fix_public_module(globals(), __all__)
