"""A round's validation: the repository's own check (e.g. its test command) in the worktree.

The command is an argv (split like a shell would, never run by one). A relative program path
(``./check.sh``, ``tools/test``) names a file of the repository, so it is taken from the
round's worktree. On timeout the whole process group gets SIGTERM, then SIGKILL, as a stopped
command worker does.
"""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path

import trio

from ..workers import GroupStopper
from ._orchestration import Orchestration

__all__ = ["run_validation"]

_TAIL = 4000
KILL_GRACE = 5.0


async def run_validation(
    orchestration: Orchestration, worktree: Path, env: dict[str, str]
) -> tuple[bool, str]:
    """Run the validation command; return whether it passed and a report (exit code,
    duration, the tail of its output)."""
    argv = shlex.split(orchestration.validate)
    if "/" in argv[0] and not os.path.isabs(argv[0]):
        argv[0] = str(worktree / argv[0])
    timeout = orchestration.validate_timeout
    stopper = GroupStopper(KILL_GRACE)
    started = time.monotonic()
    with trio.move_on_after(timeout) as scope:
        try:
            done = await trio.run_process(
                argv,
                cwd=worktree,
                stdin=b"",
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                env={**os.environ, **env},
                start_new_session=True,
                deliver_cancel=stopper.deliver_cancel,
                task_status=stopper,
            )
        except OSError as exc:
            return False, f"cannot run {argv[0]}: {exc}"
        finally:
            with trio.CancelScope(shield=True):
                await stopper.stop()  # descendants that outlived the command
    if scope.cancelled_caught:
        return False, f"timed out after {timeout:g} s (the command was stopped)"
    seconds = time.monotonic() - started
    output = (done.stdout + done.stderr).decode("utf-8", errors="replace")[-_TAIL:]
    return done.returncode == 0, f"exit code {done.returncode} after {seconds:.1f} s\n\n{output}"
