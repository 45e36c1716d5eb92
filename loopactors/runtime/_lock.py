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

from .._util import private_dirs
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
def lock_state_dir(state_dir: Path) -> Iterator[tuple[int, int]]:
    """One runtime per state directory: two would both resume the same loops.

    Both the directory itself and its ``runtime.lock`` are locked (``flock``): a lock file
    deleted or replaced under a running runtime lets no second one in (the directory's lock
    still holds), and the first stops when its watch sees it (``watch_state_dir``). Yields
    the lock file's identity (device, inode) for that watch.
    """
    try:
        private_dirs(state_dir)
        directory = os.open(state_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise StoreError(
            f"cannot use the state directory {state_dir}: {exc}{disk_full_hint(exc)}"
        ) from None
    try:
        try:
            fcntl.flock(directory, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _in_use(state_dir) from None
        try:
            # Unbuffered: a write the disk has no room for fails here, not again at close.
            handle = (state_dir / LOCK_FILE).open("a+b", buffering=0)
        except OSError as exc:
            raise StoreError(
                f"cannot use the state directory {state_dir}: {exc}{disk_full_hint(exc)}"
            ) from None
        with handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # an older version holds the file's lock alone
                raise _in_use(state_dir) from None
            try:
                handle.seek(0)
                handle.truncate()
                handle.write(f"pid {os.getpid()}".encode())
            except OSError as exc:
                fcntl.flock(handle, fcntl.LOCK_UN)
                raise StoreError(
                    f"cannot write the lock file {state_dir / LOCK_FILE}: "
                    f"{exc}{disk_full_hint(exc)}"
                ) from None
            info = os.fstat(handle.fileno())
            try:
                yield info.st_dev, info.st_ino
            finally:
                with contextlib.suppress(OSError):
                    handle.truncate(0)
                fcntl.flock(handle, fcntl.LOCK_UN)
    finally:
        os.close(directory)  # its lock goes with it


def _in_use(state_dir: Path) -> StoreError:
    try:
        holder = (state_dir / LOCK_FILE).read_text("utf-8", "replace").strip()
    except OSError:
        holder = ""
    return StoreError(
        f"the state directory {state_dir} is in use by another loopactors runtime "
        f"({holder or 'another process'}); {_node_hint(state_dir)}stop it first, or use "
        "another --state directory"
    )


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
async def watch_state_dir(
    state_dir: Path, *database: Path, lock: tuple[int, int] | None = None
) -> AsyncIterator[None]:
    """Every :data:`STATE_CHECK_SECONDS`, check that ``state_dir`` and the ``database``
    files are the directory and files (same device and inode) they were on entry, and
    ``runtime.lock`` the file ``lock`` says (the one ``lock_state_dir`` locked). If one was
    deleted or replaced, what the runtime commits would be lost with the old file (or the
    lock no longer says who holds the directory): the block is cancelled (no more work is
    taken) and :class:`StateDirectoryLost` is raised from it."""
    files = {path: _identity(path) for path in (state_dir, *database)}
    if lock is not None:
        files[state_dir / LOCK_FILE] = lock
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
    if lost and lost[0].startswith(str(state_dir / LOCK_FILE)):
        raise StateDirectoryLost(
            f"{lost[0]} while the runtime ran: it stopped taking work, as the lock file says "
            "which runtime holds the directory (no second runtime could open it meanwhile: "
            "the directory itself stays locked); start it again"
        )
    if lost:
        raise StateDirectoryLost(
            f"{lost[0]} while the runtime ran: it stopped taking work; what it committed "
            "since is lost with the old file (restore the directory from a backup, or start "
            "afresh)"
        )
