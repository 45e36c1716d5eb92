"""One runtime per state directory: two would both resume the same loops."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from ..errors import StoreError

__all__ = ["LOCK_FILE", "lock_state_dir"]

LOCK_FILE = "runtime.lock"


@contextlib.contextmanager
def lock_state_dir(state_dir: Path) -> Iterator[None]:
    """One runtime per state directory: two would both resume the same loops."""
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        handle = (state_dir / LOCK_FILE).open("a+")
    except OSError as exc:
        raise StoreError(f"cannot use the state directory {state_dir}: {exc}") from exc
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise StoreError(
                f"the state directory {state_dir} is in use by another loopactors runtime "
                f"({holder}); stop it first, or use another --state directory"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        try:
            yield
        finally:
            handle.truncate(0)
            fcntl.flock(handle, fcntl.LOCK_UN)
