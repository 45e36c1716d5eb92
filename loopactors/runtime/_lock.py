"""One runtime per state directory (two would both resume the same loops), and a watch that
the directory it started with is still the one on disk."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import trio

from ..errors import StateDirectoryLost, StoreError

__all__ = ["LOCK_FILE", "STATE_CHECK_SECONDS", "lock_state_dir", "watch_state_dir"]

LOCK_FILE = "runtime.lock"
#: Written by a node serving the state directory: the URL it listens on.
NODE_URL_FILE = "node.url"


def _node_hint(state_dir: Path) -> str:
    try:
        url = (state_dir / NODE_URL_FILE).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        url = ""
    if url:
        return f"a node serves it: act on it there with --connect {url}, or "
    return "if a node (`loopactors node`) serves it, act on it there with --connect URL; or "


#: How often a running runtime looks whether its state directory is still there.
STATE_CHECK_SECONDS = 1.0

log = logging.getLogger("loopactors.runtime")


def disk_full_hint(exc: OSError) -> str:
    """`` (the disk is full: ...)`` for ENOSPC and EDQUOT, else nothing."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return " (the disk is full: free some space, then run again; nothing committed is lost)"
    return ""


@contextlib.contextmanager
def lock_state_dir(state_dir: Path) -> Iterator[None]:
    """One runtime per state directory: two would both resume the same loops."""
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        # Unbuffered: a write the disk has no room for fails here, not again at close.
        handle = (state_dir / LOCK_FILE).open("a+b", buffering=0)
    except OSError as exc:
        raise StoreError(
            f"cannot use the state directory {state_dir}: {exc}{disk_full_hint(exc)}"
        ) from None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().decode("utf-8", "replace").strip() or "another process"
            raise StoreError(
                f"the state directory {state_dir} is in use by another loopactors runtime "
                f"({holder}); {_node_hint(state_dir)}stop it first, or use another --state "
                "directory"
            ) from None
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(f"pid {os.getpid()}".encode())
        except OSError as exc:
            fcntl.flock(handle, fcntl.LOCK_UN)
            raise StoreError(
                f"cannot write the lock file {state_dir / LOCK_FILE}: {exc}{disk_full_hint(exc)}"
            ) from None
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                handle.truncate(0)
            fcntl.flock(handle, fcntl.LOCK_UN)


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _lost(state_dir: Path, files: dict[Path, tuple[int, int] | None]) -> str | None:
    for path, identity in files.items():
        now = _identity(path)
        if now is None:
            return f"{path} was deleted"
        if now != identity:
            return f"{path} was replaced (another file or directory is there now)"
    return None


@contextlib.asynccontextmanager
async def watch_state_dir(state_dir: Path, database: Path) -> AsyncIterator[None]:
    """Every :data:`STATE_CHECK_SECONDS`, check that ``state_dir`` and ``database`` are the
    directory and file (same device and inode) they were on entry. If either was deleted or
    replaced, what the runtime commits would be lost with the old file: the block is
    cancelled (no more work is taken) and :class:`StateDirectoryLost` is raised from it."""
    files = {state_dir: _identity(state_dir), database: _identity(database)}
    lost: list[str] = []
    async with trio.open_nursery() as nursery:

        async def watch() -> None:
            while True:
                await trio.sleep(STATE_CHECK_SECONDS)
                problem = _lost(state_dir, files)
                if problem is not None:
                    log.error("%s under the running runtime: stopping (exit 1)", problem)
                    lost.append(problem)
                    nursery.cancel_scope.cancel()
                    return

        nursery.start_soon(watch)
        try:
            yield
        finally:
            nursery.cancel_scope.cancel()
    if lost:
        raise StateDirectoryLost(
            f"{lost[0]} while the runtime ran: it stopped taking work; what it committed "
            "since is lost with the old file (restore the directory from a backup, or start "
            "afresh)"
        )
