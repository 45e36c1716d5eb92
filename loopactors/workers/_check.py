"""A loop's ``until`` check: one shell command run in the loop's workspace after a round.

It runs as the command worker's rounds do: ``/bin/sh -c CMD`` in its own process group, so a
stop (or its timeout) ends everything it started (SIGTERM, ``kill_grace``, SIGKILL); stdout and
stderr together are kept as a round's output is, the last ``max_output_bytes`` of them. See
docs/loops.md, Verified completion.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import trio

from ..loops import CheckRecord
from ._command import GroupStopper
from ._output import OutputTail

__all__ = ["SHELL", "check_until", "run_check"]

SHELL = "/bin/sh"
#: Words a shell runs itself (POSIX reserved words and builtins, dash's and bash's usual
#: ones): nothing to find on PATH.
_SHELL_WORDS = frozenset(
    {"!", "(", "{", ".", ":", "[", "[[", "alias", "break", "case", "cd", "command",
     "continue", "env", "eval", "exec", "exit", "export", "false", "for", "getopts", "hash",
     "if", "kill", "local", "printf", "pwd", "read", "readonly", "return", "set", "shift",
     "source", "test", "time", "times", "trap", "true", "type", "ulimit", "umask", "unalias",
     "unset", "until", "wait", "while"}
)  # fmt: skip
#: A redirection before the command (``>/dev/null pytest``, ``2>&1 make``): the shell's.
_REDIRECTION = re.compile(r"^\d*[<>]")
_DEFAULT_KEPT = 1 << 20


def check_until(command: str, workspace: str | None) -> None:
    """Refuse (``ValueError``, saying why) a check that cannot start: an empty command,
    unbalanced quotes, or a first word that is neither a shell word nor an executable found
    on PATH (or, with a ``/``, relative to ``workspace``). Run at admission, so a typo is an
    error then, never a check that fails every round."""
    if not command.strip():
        raise ValueError('the until check is empty: give a command, e.g. until="pytest -q"')
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise ValueError(f"the until check {command!r} cannot be read: {exc}") from None
    if not words:
        raise ValueError(f"the until check {command!r} has no command")
    # A subshell's or group's opening "(" / "{" may be written against the command.
    first = words[0].lstrip("({") or words[0]
    if first in _SHELL_WORDS or "=" in first or _REDIRECTION.match(first):
        return  # a builtin, VAR=value or a redirection before the command: the shell's
    if not Path(SHELL).exists():
        raise ValueError(f"the until check needs {SHELL}, which is not there")
    if "/" in first:
        path = Path(first) if os.path.isabs(first) else Path(workspace or ".") / first
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ValueError(
                f"the until check's command {first!r} is not an executable file (looked at {path})"
            )
        return
    if shutil.which(first) is None:
        raise ValueError(
            f"the until check's command {first!r} was not found on PATH; install it, or give "
            "its path"
        )


async def run_check(
    command: str,
    *,
    cwd: str | None,
    timeout: float,
    kill_grace: float,
    env: dict[str, str] | None = None,
    max_output_bytes: int | None = None,
) -> CheckRecord:
    """Run ``command`` with ``/bin/sh -c`` in ``cwd``; at most ``timeout`` seconds. A
    cancellation (a stop) ends its process group and goes on up."""
    kept = OutputTail(max_output_bytes or _DEFAULT_KEPT)
    started = time.monotonic()
    stopper = GroupStopper(kill_grace)
    try:
        process = await trio.lowlevel.open_process(
            [SHELL, "-c", command],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    except OSError as exc:
        return CheckRecord(
            command=command,
            exit_code=None,
            duration=time.monotonic() - started,
            error=f"could not start: {exc}",
        )
    stopper.started(process)
    timed_out = False
    try:
        with trio.move_on_after(timeout) as scope:
            assert process.stdout is not None
            async for chunk in process.stdout:
                kept.feed(chunk)
            await process.wait()
        timed_out = scope.cancelled_caught
    finally:
        with trio.CancelScope(shield=True):  # what it started goes with it
            async with trio.open_nursery() as nursery:
                # Reaped while it is stopped: an unreaped leader keeps its group "alive", and
                # the stop would wait out all of kill_grace for a check that ended at SIGTERM.
                nursery.start_soon(process.wait)
                await stopper.stop()
    await stopper.unless_left()
    duration = time.monotonic() - started
    if timed_out:
        return CheckRecord(
            command=command,
            exit_code=None,
            duration=duration,
            output=kept.text(),
            error=f"timed out after {timeout:g} s",
        )
    code = process.returncode
    return CheckRecord(
        command=command,
        exit_code=code if code is not None and code >= 0 else None,
        duration=duration,
        output=kept.text(),
        error=None if code is not None and code >= 0 else f"ended by signal {-(code or 0)}",
    )
