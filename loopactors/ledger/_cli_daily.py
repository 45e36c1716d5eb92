"""The CLI's side effects: the locked daily-spend state file and the
``--on-exceed`` hook (docs/ledger.md)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from ._breaker import (
    DailySpend,
    decode_daily_spend,
    encode_daily_spend,
    record_daily_spend,
    utc_day,
)
from ._cli_args import CliError
from ._js import encode_json
from ._model import BreakerDecision

__all__ = ["HOOK_TIMEOUT", "LOCK_STALE_SECONDS", "add_daily_spend", "run_hook"]

#: Both the stale age and the wait deadline, as in the reference (30 000 ms).
LOCK_STALE_SECONDS = 30.0
#: The reference waits for the hook without limit; a hung hook would hang every check.
HOOK_TIMEOUT = 10.0


def _acquire(lock: Path, pattern: str) -> None:
    deadline = time.time() + LOCK_STALE_SECONDS
    while True:
        try:
            # O_EXCL makes creation atomic: exactly one process wins the lock file.
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666)
        except FileExistsError:
            pass
        else:
            os.close(fd)
            return
        try:
            age = time.time() - lock.stat().st_mtime
        except FileNotFoundError:
            continue  # released between our open and stat: try again at once
        if age > LOCK_STALE_SECONDS:
            # A crashed holder: reclaim. Another waiter may have removed it already.
            lock.unlink(missing_ok=True)
            continue
        if time.time() > deadline:
            raise CliError(
                f'Timed out waiting for daily-spend lock on "{pattern}". If no other '
                f"loop-context process is running, delete {lock} manually."
            )
        time.sleep(random.uniform(0.015, 0.05))


def add_daily_spend(state_dir: str | None, pattern: str, delta: int | float) -> DailySpend:
    """Add ``delta`` to today's (UTC) total for ``pattern`` under the per-pattern lock."""
    if state_dir is None:
        # The reference crashes here with Node's TypeError; same text, same exit 1.
        raise CliError(
            'The "path" argument must be of type string or an instance of Buffer or URL. '
            "Received undefined"
        )
    directory = Path(state_dir)
    # os.makedirs("") fails like Node's mkdirSync(""); Path("") would mean ".".
    os.makedirs(state_dir, exist_ok=True)
    lock = directory / f".daily-spend.{pattern}.lock"
    state_file = directory / f"daily-spend.{pattern}.json"
    # The lock file is the reference's protocol (so both tools can share a state directory).
    # Its stale-lock reclaim can race when two waiters reclaim at once, so loopactors
    # processes also take a kernel lock around the whole step: it dies with its holder, so
    # it can never be stale, and only one of them is ever in here.
    with (directory / f".daily-spend.{pattern}.flock").open("a") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        _acquire(lock, pattern)
        try:
            try:
                previous = decode_daily_spend(state_file.read_bytes())
            except OSError:
                previous = None  # missing or unreadable: the day starts at 0
            state = record_daily_spend(previous, utc_day(time.time()), delta)
            os.makedirs(state_dir, exist_ok=True)
            # Written aside and renamed: a crash mid-write never leaves half a state file.
            partial = state_file.with_name(f".{state_file.name}.{os.getpid()}.tmp")
            partial.write_text(encode_daily_spend(state), encoding="utf-8")
            os.replace(partial, state_file)
            return state
        finally:
            lock.unlink(missing_ok=True)


def _wait_for_group(pgid: int, deadline: float) -> bool:
    """True once no process of the group is left; False if the deadline came first."""
    while True:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # a member changed identity: not ours to wait for
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)


def run_hook(command: str, decision: BreakerDecision, timeout: float = HOOK_TIMEOUT) -> None:
    """Pipe the decision (compact JSON) to ``sh -c command``; never fails the check.

    stdout/stderr are inherited, so the hook prints before the decision line. A hook still
    running after ``timeout`` seconds is killed with its whole process group.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    payload = encode_json(decision, indent=None).encode("utf-8")
    try:
        # Own session, so a timeout can kill what the shell started too.
        proc = subprocess.Popen(command, shell=True, stdin=subprocess.PIPE, start_new_session=True)
    except OSError as exc:
        print(f"loop-context: --on-exceed hook failed to start: {exc}", file=sys.stderr)
        return
    deadline = time.monotonic() + timeout
    try:
        # communicate() ignores EPIPE, so a hook that never reads stdin is fine.
        proc.communicate(payload, timeout=timeout)
        # Like the reference, wait for what the hook left running (it may hold our stdout
        # open), but only within the same bound.
        finished = _wait_for_group(proc.pid, deadline)
    except subprocess.TimeoutExpired:
        finished = False
    if not finished:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        print(
            f"loop-context: --on-exceed hook killed after {timeout:g} s.",
            file=sys.stderr,
        )
