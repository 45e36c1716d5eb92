"""The command worker: one subprocess per round, the way coding agents' CLIs plug in.

Spec: ``command:ARGV``, split with :func:`shlex.split` and never run through a shell. The prompt
goes on stdin, the round's identity in ``LOOPACTORS_*`` environment variables (plus the
request's ``env``; it runs in the request's ``cwd`` if one is set), and stdout is the output:
only its last ``max_output_bytes`` are held while it streams in (the whole goes to a file
with ``keep_full_outputs``), so a worker printing gigabytes costs no more memory than that.
A last stdout line ``{"loopactors": {"tokens": N}}`` reports tokens and is removed.

The child gets its own session, so a stop reaches everything it started: SIGTERM to the whole
process group, ``kill_grace`` seconds, then SIGKILL to whatever of the group is left.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import shlex
import shutil
import signal
import subprocess
import weakref
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated, ClassVar

import attrs
import msgspec
import trio

from ..errors import WorkerSpecError
from . import _cgroup
from ._base import RoundContext, RoundRequest, RoundResult, Worker
from ._groups import WorkerGroups
from ._kinds import WorkerKind
from ._output import OutputTail

__all__ = ["KIND", "CommandWorker", "GroupStopper", "kill_worker_groups"]

log = logging.getLogger("loopactors.workers")

_STDERR_TAIL = 2000
_STDERR_KEPT = 64 * 1024  # bytes of stderr held while the worker runs (the tail is used)
#: Without a limit in the request (a worker run outside a runtime): kept whole, in practice.
_UNBOUNDED = 1 << 62
_CHUNK = 1 << 16
_CGROUP_EMPTY_WAIT = 1.0
_JOIN_WAIT = 5.0  # seconds a worker's shell may take to join its cgroup before it is checked
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
    """Stops one child's process group: SIGTERM, up to ``grace`` seconds, then SIGKILL; and
    with it the child's cgroup (``_cgroup``) if it has one, which also holds the processes
    that left the group (setsid).

    It runs twice at most: as run_process's ``deliver_cancel``, which trio cancels as soon as
    the group leader exits, and then after run_process, for descendants that outlived the
    leader. The deadline is set once, so the two together never wait more than ``grace``.
    """

    grace: float
    pgid: int | None = None
    deadline: float | None = None
    #: Told the group id (and the cgroup's path, if any) as soon as the child runs (the
    #: runtime lists them durably).
    on_started: Callable[[int, str | None], None] | None = None
    cgroup: Path | None = None

    def started(self, process: trio.Process | None = None) -> None:
        # run_process reports its Process through the ``task_status`` protocol; that is how we
        # learn the group id even when deliver_cancel never runs (leader gone, pipe held open).
        if process is not None:
            self.pgid = process.pid  # start_new_session: the child leads its own group
            _running.add(self)
            if self.on_started is not None:
                self.on_started(process.pid, str(self.cgroup) if self.cgroup else None)

    def _alive(self) -> bool:
        assert self.pgid is not None
        return _group_exists(self.pgid) or (
            self.cgroup is not None and not _cgroup.cgroup_empty(self.cgroup)
        )

    def _signal(self, signum: int) -> None:
        assert self.pgid is not None
        _signal_group(self.pgid, signum)
        if self.cgroup is not None:
            _cgroup.signal_cgroup(self.cgroup, signum)

    def kill_now(self) -> None:
        """SIGKILL the group now; a stop waiting out its grace returns at once."""
        self.deadline = -math.inf
        if self.pgid is not None:
            self._signal(signal.SIGKILL)

    async def unless_left(self) -> None:
        """After the child ended: return, unless :func:`kill_worker_groups` killed it. Then the
        process is leaving and cancels this task next; the round did not fail on its own and
        must not be recorded as failed (it stays resumable), so nothing is reported."""
        if self.deadline == -math.inf:
            await trio.sleep_forever()

    async def deliver_cancel(self, process: trio.Process) -> None:
        if self.pgid is None:  # cancelled before the runner heard of the process
            self.started(process)
        await self.stop()

    async def stop(self) -> None:
        if self.pgid is None or (self.deadline is None and not self._alive()):
            _running.discard(self)
            return
        if self.deadline is None:
            self.deadline = trio.current_time() + self.grace
            self._signal(signal.SIGTERM)
        # Polling: nothing can notify us when a group that is not our child disappears.
        while self._alive():
            left = self.deadline - trio.current_time()
            if left <= 0:
                break
            await trio.sleep(min(_POLL, left))
        self._signal(signal.SIGKILL)
        if self.cgroup is not None:
            # Killed, not yet gone: a moment, so that the cgroup can be removed.
            with trio.move_on_after(_CGROUP_EMPTY_WAIT):
                while not _cgroup.cgroup_empty(self.cgroup):  # noqa: ASYNC110 - polling
                    await trio.sleep(_POLL / 5)
        _running.discard(self)


async def _confirm_cgroup(stopper: GroupStopper, cgroup: Path, pid: int) -> None:
    """Look that the worker's process joined its cgroup (the shell it starts as does that
    before it runs the program); if it could not, the group alone stops it, as elsewhere."""
    with trio.move_on_after(_JOIN_WAIT):
        while (done := _cgroup.joined(cgroup, pid)) is None:  # noqa: ASYNC110 - polling
            await trio.sleep(_POLL / 10)
        if not done:
            _cgroup.not_joined(cgroup)
            stopper.cgroup = None


async def _drain(stream: trio.abc.ReceiveStream, into: OutputTail) -> None:
    """Read ``stream`` to its end into ``into`` (file writes, if any, in a thread)."""
    while chunk := await stream.receive_some(_CHUNK):
        if into.writes(len(chunk)):
            await trio.to_thread.run_sync(into.feed, chunk)
        else:
            into.feed(chunk)
    into.close()


def _to_argv(words: Iterable[str]) -> tuple[str, ...]:
    return tuple(words)


@attrs.frozen
class CommandWorker(Worker):
    """Runs ``argv`` once per round; a non-zero exit is a failed round with the stderr tail."""

    kind: ClassVar[str] = "command"
    bounds_output: ClassVar[bool] = True

    argv: tuple[str, ...] = attrs.field(converter=_to_argv)
    kill_grace: float = attrs.field(default=5.0, kw_only=True)
    #: Where a round without a runtime (on a ``loopactors worker``) lists its process group.
    groups: WorkerGroups | None = attrs.field(default=None, kw_only=True, eq=False)
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

    def _group_listing(
        self, request: RoundRequest, context: RoundContext | None
    ) -> tuple[Callable[[int, str | None], None] | None, Callable[[int], None] | None]:
        """Who lists the round's process group while it runs: the runtime, a ``loopactors
        worker`` process's list, or nobody (``python -m``, tests)."""
        if context is not None:
            return context.process_group_started, context.process_group_ended
        if self.groups is not None:
            listed = functools.partial(self.groups.started, request.loop_id, request.round)
            return listed, self.groups.ended
        return None, None

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
        cgroup = _cgroup.new_cgroup()
        argv: list[str] | tuple[str, ...] = self.argv
        executable = self.executable
        if cgroup is not None and not _cgroup.runs_directly(executable):
            _cgroup.leave(cgroup)  # let the exec itself fail, as without a cgroup
            cgroup = None
        if cgroup is not None:
            argv = _cgroup.join_argv(cgroup, executable, self.argv)
            executable = argv[0]
        on_started, on_ended = self._group_listing(request, context)
        stopper = GroupStopper(self.kill_grace, on_started=on_started, cgroup=cgroup)
        limit = request.max_output_bytes or _UNBOUNDED
        whole_at = Path(request.whole_output_at) if request.whole_output_at else None
        stdout = OutputTail(limit, whole_at=whole_at)
        stderr = OutputTail(_STDERR_KEPT)
        try:
            async with trio.open_nursery() as nursery:
                try:
                    process: trio.Process = await nursery.start(
                        functools.partial(
                            trio.run_process,
                            argv,
                            executable=executable,
                            stdin=request.prompt.encode("utf-8"),
                            stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE,
                            check=False,
                            env=env,
                            cwd=request.cwd,
                            start_new_session=True,
                            deliver_cancel=stopper.deliver_cancel,
                        )
                    )
                except OSError as exc:
                    # It never started: the program vanished or lost its execute bit since
                    # parsing.
                    return RoundResult(
                        status="failed", error=f"cannot run {self.executable}: {exc}"
                    )
                stopper.started(process)
                if cgroup is not None:
                    nursery.start_soon(_confirm_cgroup, stopper, cgroup, process.pid)
                assert process.stdout is not None  # both are pipes
                assert process.stderr is not None
                nursery.start_soon(_drain, process.stderr, stderr)
                await _drain(process.stdout, stdout)
                await stopper.unless_left()
            _running.discard(stopper)
        except BaseException:
            stdout.close()
            with trio.CancelScope(shield=True):
                await stopper.stop()
            raise
        finally:
            if on_ended is not None and stopper.pgid is not None:
                on_ended(stopper.pgid)
            if cgroup is not None:
                _cgroup.leave(cgroup)
        returncode = process.returncode
        if stdout.whole_error is not None:  # the round itself is fine: the cut line says less
            log.warning("cannot keep the whole output of %s: %s", request.key, stdout.whole_error)
        output, tokens, met = split_tokens_line(stdout.text())
        if returncode == 0:
            return RoundResult(status="completed", output=output, tokens=tokens, done=met)
        tail = stderr.kept.decode("utf-8", errors="replace").rstrip()[-_STDERR_TAIL:]
        error = f"exit code {returncode}" + (f": {tail}" if tail else "")
        return RoundResult(status="failed", output=output, error=error, tokens=tokens)


def _check_form(argv: str) -> None:
    try:
        words = shlex.split(argv)
    except ValueError as exc:
        raise WorkerSpecError(f"command worker argv {argv!r} cannot be split: {exc}") from None
    if not words:
        raise WorkerSpecError("command worker needs an argv after 'command:'")


KIND = WorkerKind(
    name="command",
    build=lambda options, kill_grace: CommandWorker.from_spec(options, kill_grace=kill_grace),
    local_resources=True,  # the executable must exist where the rounds run
    check_form=_check_form,
    served_by_default=True,
    reports_cost=False,  # its rounds' cost_usd is always 0
)
