"""The lease: one owner runs a code loop's rounds at a time, across processes (CodeShell 4).

``LEASE.json`` holds the owner and an expiry; it is read and written only under an exclusive
``flock`` of ``LEASE.lock``, so of two processes racing to take it exactly one wins. The owner
renews it while it works; a crashed owner stops renewing, and its lease is free once expired
(at once if it was held by a process on this host that no longer exists).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import attrs
import msgspec
import trio

from .._util import pid_exists
from ..errors import LeaseHeld
from ._ledger import write_atomic

__all__ = [
    "DEFAULT_TTL",
    "Lease",
    "LeaseRecord",
    "acquire_lease",
    "held_lease",
    "keep_lease",
    "lease_kept",
    "new_owner",
    "read_lease",
    "release_lease",
    "renew_lease",
]

DEFAULT_TTL = 60.0
LEASE_FILE = "LEASE.json"
LOCK_FILE = "LEASE.lock"


class LeaseRecord(msgspec.Struct, frozen=True, kw_only=True):
    owner: str
    host: str
    pid: int
    acquired_at: float
    expires_at: float

    def stale(self, now: float) -> bool:
        """Expired, or held by a process of this host that is gone."""
        return now >= self.expires_at or (
            self.host == socket.gethostname() and not pid_exists(self.pid)
        )


@attrs.frozen
class Lease:
    """A lease this process holds (returned by :func:`acquire_lease`)."""

    dir: Path
    owner: str
    ttl: float


#: Leases this process holds, by ledger directory: a round run under a held lease uses it.
_held: dict[Path, Lease] = {}


def new_owner() -> str:
    """An owner id: host, pid and a random part (two owners in one process differ)."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / LOCK_FILE).open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # held only for a read and a write
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def read_lease(directory: Path) -> LeaseRecord | None:
    try:
        return msgspec.json.decode((directory / LEASE_FILE).read_bytes(), type=LeaseRecord)
    except (FileNotFoundError, msgspec.DecodeError):
        return None


def _describe(record: LeaseRecord) -> str:
    left = record.expires_at - time.time()
    return f"{record.owner} (pid {record.pid} on {record.host}, expires in {left:.0f} s)"


def acquire_lease(directory: Path, *, owner: str, ttl: float = DEFAULT_TTL) -> Lease:
    """Take the lease of the loop whose ledger is ``directory``.

    Raises:
        LeaseHeld: another owner holds a lease that is neither expired nor orphaned.
    """
    with _locked(directory):
        now = time.time()
        current = read_lease(directory)
        if current is not None and current.owner != owner and not current.stale(now):
            raise LeaseHeld(
                f"a round of this loop is running: its lease is held by {_describe(current)}"
            )
        _write(
            directory,
            owner,
            ttl,
            now,
            now if current is None or current.owner != owner else current.acquired_at,
        )
    lease = Lease(directory.resolve(), owner, ttl)
    _held[lease.dir] = lease
    return lease


def _write(directory: Path, owner: str, ttl: float, now: float, acquired: float) -> None:
    record = LeaseRecord(
        owner=owner,
        host=socket.gethostname(),
        pid=os.getpid(),
        acquired_at=acquired,
        expires_at=now + ttl,
    )
    write_atomic(directory / LEASE_FILE, msgspec.json.encode(record))


def renew_lease(lease: Lease) -> None:
    """Push the expiry out by ``ttl``. Raises :class:`LeaseHeld` if someone else took it."""
    with _locked(lease.dir):
        now = time.time()
        current = read_lease(lease.dir)
        if current is None or current.owner != lease.owner:
            _held.pop(lease.dir, None)
            holder = _describe(current) if current else "nobody"
            raise LeaseHeld(f"the lease was lost (now held by {holder})")
        _write(lease.dir, lease.owner, lease.ttl, now, current.acquired_at)


def release_lease(lease: Lease) -> None:
    """Give the lease up (a no-op if it was lost meanwhile)."""
    _held.pop(lease.dir, None)
    with _locked(lease.dir):
        current = read_lease(lease.dir)
        if current is not None and current.owner == lease.owner:
            (lease.dir / LEASE_FILE).unlink(missing_ok=True)


def held_lease(directory: Path) -> Lease | None:
    """The lease this process holds on that ledger, if any."""
    return _held.get(directory.resolve())


@contextlib.asynccontextmanager
async def lease_kept(lease: Lease | None) -> AsyncIterator[None]:
    """Renew ``lease`` (if any) in the background while the block runs. An error of the
    block comes out as itself, not wrapped in an exception group."""
    try:
        async with trio.open_nursery() as nursery:
            if lease is not None:
                nursery.start_soon(keep_lease, lease)
            yield
            nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        leaves = [e for e in _leaves(group) if not isinstance(e, trio.Cancelled)]
        if len(leaves) == 1:
            raise leaves[0] from None
        raise


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    found: list[BaseException] = []
    for exc in group.exceptions:
        found.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return found


async def keep_lease(lease: Lease) -> None:
    """Renew ``lease`` every third of its ttl until cancelled; raise :class:`LeaseHeld` if it
    was lost (the caller's nursery then cancels the work done under it)."""
    while True:
        await trio.sleep(lease.ttl / 3)
        renew_lease(lease)
