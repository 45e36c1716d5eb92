"""The command worker: one subprocess per round, the way coding agents' CLIs plug in.

Spec: ``command:ARGV``, split with :func:`shlex.split` and never run through a shell. The prompt
goes on stdin, the round's identity in ``LOOPACTORS_*`` environment variables (plus the
request's ``env``; it runs in the request's ``cwd`` if one is set), and stdout is the output.
A last stdout line ``{"loopactors": {"tokens": N}}`` reports tokens and is removed.

The child gets its own session, so a stop reaches everything it started: SIGTERM to the whole
process group, ``kill_grace`` seconds, then SIGKILL to whatever of the group is left.
"""

from __future__ import annotations

import contextlib
import math
import os
import shlex
import shutil
import signal
import weakref
from collections.abc import Callable, Iterable
from typing import Annotated, ClassVar

import attrs
import msgspec
import trio

from ..errors import WorkerSpecError
from ._base import RoundContext, RoundRequest, RoundResult, Worker

__all__ = ["CommandWorker", "GroupStopper", "kill_worker_groups"]

_STDERR_TAIL = 2000
_POLL = 0.05  # how often a stop looks whether the group is gone during the grace period


class _Tokens(msgspec.Struct, forbid_unknown_fields=True):
    tokens: Annotated[int, msgspec.Meta(ge=0)] = 0
    done: bool = False


class _Report(msgspec.Struct, forbid_unknown_fields=True):
    loopactors: _Tokens


_report_decoder = msgspec.json.Decoder(_Report)


def split_tokens_line(stdout: str) -> tuple[str, int, bool]:
    """Remove a last line ``{"loopactors": {"tokens": N, "done": true}}`` (either key may be
    left out) from ``stdout``; return the rest, N and done. Anything else, even nearly that
    shape, stays in the output."""
    body = stdout.removesuffix("\n")
    head, newline, last = body.rpartition("\n")
    if '"loopactors"' not in last:  # cheap test before decoding
        return stdout, 0, False
    try:
        report = _report_decoder.decode(last)
    except msgspec.ValidationError:
        return stdout, 0, False
    except msgspec.DecodeError:
        return stdout, 0, False
    return head + newline, report.loopactors.tokens, report.loopactors.done


def _signal_group(pgid: int, signum: int) -> None:
    # Gone already, or (PermissionError) its id now belongs to someone else's group.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _group_exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


#: The process groups of this process's command workers that have not been seen to end.
_running: weakref.WeakSet[GroupStopper] = weakref.WeakSet()


def kill_worker_groups() -> int:
    """SIGKILL, now, the process group of every command worker (and validation command) this
    process started and has not seen end; a stop in its grace period ends at once. For a
    second Ctrl-C: leave now, leave nothing running. Returns how many groups were signalled."""
    stoppers = list(_running)
    for stopper in stoppers:
        stopper.kill_now()
    return len(stoppers)


@attrs.define(eq=False)  # compared by identity: kept in a set while its group runs
class GroupStopper:
    """Stops one child's process group: SIGTERM, up to ``grace`` seconds, then SIGKILL.

    It runs twice at most: as run_process's ``deliver_cancel``, which trio cancels as soon as
    the group leader exits, and then after run_process, for descendants that outlived the
    leader. The deadline is set once, so the two together never wait more than ``grace``.
    """

    grace: float
    pgid: int | None = None
    deadline: float | None = None
    #: Told the group id as soon as the child runs (the runtime lists it durably).
    on_started: Callable[[int], None] | None = None

    def started(self, process: trio.Process | None = None) -> None:
        # run_process reports its Process through the ``task_status`` protocol; that is how we
        # learn the group id even when deliver_cancel never runs (leader gone, pipe held open).
        if process is not None:
            self.pgid = process.pid  # start_new_session: the child leads its own group
            _running.add(self)
            if self.on_started is not None:
                self.on_started(process.pid)

    def kill_now(self) -> None:
        """SIGKILL the group now; a stop waiting out its grace returns at once."""
        self.deadline = -math.inf
        if self.pgid is not None:
            _signal_group(self.pgid, signal.SIGKILL)

    async def deliver_cancel(self, process: trio.Process) -> None:
        await self.stop()

    async def stop(self) -> None:
        if self.pgid is None or (self.deadline is None and not _group_exists(self.pgid)):
            _running.discard(self)
            return
        if self.deadline is None:
            self.deadline = trio.current_time() + self.grace
            _signal_group(self.pgid, signal.SIGTERM)
        # Polling: nothing can notify us when a group that is not our child disappears.
        while _group_exists(self.pgid):
            left = self.deadline - trio.current_time()
            if left <= 0:
                break
            await trio.sleep(min(_POLL, left))
        _signal_group(self.pgid, signal.SIGKILL)
        _running.discard(self)


def _to_argv(words: Iterable[str]) -> tuple[str, ...]:
    return tuple(words)


@attrs.frozen
class CommandWorker(Worker):
    """Runs ``argv`` once per round; a non-zero exit is a failed round with the stderr tail."""

    kind: ClassVar[str] = "command"

    argv: tuple[str, ...] = attrs.field(converter=_to_argv)
    kill_grace: float = attrs.field(default=5.0, kw_only=True)
    #: ``argv[0]`` resolved when the worker is made, so a missing program fails at start.
    executable: str = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        if not self.argv:
            raise WorkerSpecError("command worker needs a program to run, as in command:ARGV")
        if not (math.isfinite(self.kill_grace) and self.kill_grace >= 0):
            raise WorkerSpecError(
                f"command worker kill_grace must be seconds >= 0, got {self.kill_grace!r}"
            )
        found = shutil.which(self.argv[0])
        if found is None:
            raise WorkerSpecError(
                f"command worker executable {self.argv[0]!r} not found: it must be on PATH "
                "or be the path of an executable file"
            )
        # Absolute, so a later change of working directory cannot lose it.
        object.__setattr__(self, "executable", os.path.abspath(found))

    @classmethod
    def from_spec(cls, argv: str, *, kill_grace: float = 5.0) -> CommandWorker:
        """Build from the text after ``command:``."""
        try:
            words = shlex.split(argv)
        except ValueError as exc:
            raise WorkerSpecError(f"command worker argv {argv!r} cannot be split: {exc}") from None
        return cls(words, kill_grace=kill_grace)

    async def run(self, request: RoundRequest, context: RoundContext | None) -> RoundResult:
        env = {
            **os.environ,
            "LOOPACTORS_LOOP_ID": request.loop_id,
            "LOOPACTORS_ROUND": str(request.round),
            "LOOPACTORS_ROUNDS": str(request.rounds),
            "LOOPACTORS_MODE": request.mode,
            **({"LOOPACTORS_OBJECTIVE": request.objective} if request.objective else {}),
            **request.env,
        }
        stopper = GroupStopper(
            self.kill_grace, on_started=context.process_group_started if context else None
        )
        try:
            done = await trio.run_process(
                self.argv,
                executable=self.executable,
                stdin=request.prompt.encode("utf-8"),
                capture_stdout=True,
                capture_stderr=True,
                check=False,
                env=env,
                cwd=request.cwd,
                start_new_session=True,
                deliver_cancel=stopper.deliver_cancel,
                task_status=stopper,
            )
            _running.discard(stopper)
        except BaseException as exc:
            if stopper.pgid is None and isinstance(exc, OSError):
                # It never started: the program vanished or lost its execute bit since parsing.
                return RoundResult(status="failed", error=f"cannot run {self.executable}: {exc}")
            with trio.CancelScope(shield=True):
                await stopper.stop()
            raise
        finally:
            if context is not None and stopper.pgid is not None:
                context.process_group_ended(stopper.pgid)
        output, tokens, met = split_tokens_line(done.stdout.decode("utf-8", errors="replace"))
        if done.returncode == 0:
            return RoundResult(status="completed", output=output, tokens=tokens, done=met)
        stderr = done.stderr.decode("utf-8", errors="replace").rstrip()[-_STDERR_TAIL:]
        error = f"exit code {done.returncode}" + (f": {stderr}" if stderr else "")
        return RoundResult(status="failed", output=output, error=error, tokens=tokens)
