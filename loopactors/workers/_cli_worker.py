"""The shared worker of the coding-agent CLI kinds (``claude``, ``codex``, ...).

One round is one run of the CLI in the loop's workspace, as a process group with the command
worker's stop semantics (SIGTERM, ``kill_grace``, SIGKILL). The kind's adapter
(:mod:`._cli_adapter`) builds the command line and reads the output; this module does what
every kind shares: the environment (``LOOPACTORS_*``, enclosing-session markers removed,
provider keys passed through and never stored), the session to resume, the completion promise,
usage limits (a deferred round, and a hold on the other loops of the same kind and account),
tool calls as live steps, and the workspace progress (git: files changed and new commits;
elsewhere a bounded fingerprint). See docs/agent-clis.md.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import attrs
import trio

from ..errors import WorkerSpecError
from ..loops import WorkerSpec
from ._base import RoundContext, RoundRequest, RoundResult, Worker, list_workspace
from ._budget import daily_hold, record_spend
from ._cli_adapter import (
    AgentStep,
    CliAdapter,
    CliOptions,
    CliOutcome,
    CliRound,
    cli_adapter,
    parse_cli_options,
)
from ._command import GroupStopper
from ._kinds import WorkerKind, workspace_path
from ._output import LineSplitter

__all__ = [
    "CliAgentWorker",
    "CliWorkerKind",
    "account_fingerprint",
    "clear_limit_holds",
    "cli_worker_kind",
    "cost_of_round",
    "hold_limit",
    "limit_hold",
    "promise_claimed",
    "promise_instruction",
]

log = logging.getLogger("loopactors.workers")

_STDERR_TAIL = 4000
#: The longest stdout line read from a CLI (a JSON event with a tool's whole result can be
#: large); a longer one is skipped and said so, so one endless line costs this much memory
#: at most. A client's frame cap is the same (docs/security.md).
MAX_LINE_BYTES = 64 << 20
#: Seconds a limit without a reset time holds the round back (the worker's ``backoff=`` key).
DEFAULT_BACKOFF = 60.0
#: Markers of an enclosing agent session: a nested CLI refuses to start, or behaves as a
#: sub-session, when it sees them. Removed for every kind.
SESSION_MARKERS = (
    "CLAUDECODE",
    "CLAUDE_CODE_ENTRYPOINT",
    "CLAUDE_CODE_SSE_PORT",
    "CLAUDE_AGENT_SDK_VERSION",
    "CLAUDE_CODE_SESSION_ID",
    "CODEX_SANDBOX",
    "CODEX_SANDBOX_NETWORK_DISABLED",
    "GEMINI_CLI",
)
#: Files looked at, at most, for a workspace that is not a git repository.
FINGERPRINT_FILES = 5000
_HASHED_BYTES = 1 << 20  # per dirty file, for the git snapshot


def promise_instruction(objective: str, word: str) -> str:
    """The text added to a round's prompt when the loop has an objective (documented)."""
    return (
        f"\n\nObjective of this loop: {objective}\n"
        f"When, and only when, the objective is fully met, end your final reply with a "
        f"line that holds only <promise>{word}</promise>. Do not write that tag otherwise."
    )


def cost_of_round(session_total: float, earlier: float | None) -> float:
    """What a round cost when the CLI reports its session's running total: the total less
    what the session had cost before the round (``earlier``: ``None`` for a new session, or
    one whose earlier total is not known). A total below ``earlier`` means the CLI started
    counting again: all of it is this round's. Never negative."""
    if earlier is None or session_total < earlier:
        return max(session_total, 0.0)
    return session_total - earlier


_FENCE = re.compile(r"^[ \t]{0,3}(```|~~~)")


def promise_claimed(reply: str, word: str) -> bool:
    """Whether ``reply`` claims the objective met (docs/agent-clis.md, Completion): its last
    non-empty line is ``<promise>WORD</promise>`` alone (surrounding whitespace aside), and
    that line is not inside a fenced code block. A tag in a sentence, in quotes or
    backticks, in a quoted line (``>``) or in a code block is only a mention of it."""
    lines = reply.splitlines()
    last = len(lines) - 1
    while last >= 0 and not lines[last].strip():
        last -= 1
    if last < 0 or lines[last].strip() != f"<promise>{word}</promise>":
        return False
    fences = sum(1 for line in lines[:last] if _FENCE.match(line))
    return fences % 2 == 0  # an odd count: the tag is inside a block left open


# -- usage limits shared by the loops of one kind and account -------------------------------

#: (kind, account) -> (UNIX time the limit resets, reason).
_HOLDS: dict[tuple[str, str], tuple[float, str]] = {}


def limit_hold(kind: str, account: str) -> tuple[float, str] | None:
    held = _HOLDS.get((kind, account))
    if held is not None and held[0] <= time.time():
        del _HOLDS[(kind, account)]
        return None
    return held


def hold_limit(kind: str, account: str, until: float, reason: str) -> None:
    """Hold back the rounds of ``kind`` and ``account`` until ``until`` (UNIX time)."""
    _HOLDS[(kind, account)] = (until, reason)


def account_fingerprint(*values: str) -> str:
    """An account's name in a hold: a hash of its endpoint and key, never the key itself."""
    digest = hashlib.sha256()
    for value in values:
        digest.update(f"{value}\0".encode())
    return digest.hexdigest()[:16]


def clear_limit_holds() -> None:
    """Forget every hold (tests; a user who knows the limit was lifted)."""
    _HOLDS.clear()


def _account(adapter: CliAdapter, options: CliOptions, env: dict[str, str]) -> str:
    if options.account:
        return options.account
    digest = hashlib.sha256()
    for name in adapter.account_env:
        digest.update(f"{name}={env.get(name, '')}\0".encode())
    return digest.hexdigest()[:16]  # never the key itself


# -- workspace progress ---------------------------------------------------------------------


@attrs.frozen
class _Snapshot:
    head: str | None  # None: not a git repository (or no commit yet)
    git: bool
    dirty: dict[str, str]  # path -> content digest (git), or {"": fingerprint} (elsewhere)


async def _git(workspace: str, *args: str) -> tuple[int, str]:
    done = await trio.run_process(
        ["git", "-C", workspace, *args],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
        env={**os.environ, "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"},
    )
    return done.returncode, done.stdout.decode("utf-8", "replace")


def _digest(path: Path) -> str:
    try:
        with path.open("rb") as f:
            return hashlib.sha256(f.read(_HASHED_BYTES)).hexdigest()
    except OSError:
        return "gone"


def _fingerprint(root: str) -> str:
    """Path, size and modification time of at most FINGERPRINT_FILES files (``.git`` and
    ``node_modules`` skipped): changes when a file is written, added or removed."""
    digest = hashlib.sha256()
    seen = 0
    for base, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in (".git", "node_modules", "__pycache__"))
        for name in sorted(files):
            path = os.path.join(base, name)
            try:
                st = os.stat(path)
            except OSError:
                continue
            digest.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
            seen += 1
            if seen >= FINGERPRINT_FILES:
                return digest.hexdigest()
    return digest.hexdigest()


async def snapshot(workspace: str) -> _Snapshot:
    code, out = await _git(workspace, "rev-parse", "--is-inside-work-tree")
    if code != 0 or out.strip() != "true":
        return _Snapshot(None, False, {"": await trio.to_thread.run_sync(_fingerprint, workspace)})
    code, head = await _git(workspace, "rev-parse", "--verify", "-q", "HEAD")
    _, status = await _git(workspace, "status", "--porcelain=v1", "-z", "--untracked-files=all")
    _, top = await _git(workspace, "rev-parse", "--show-toplevel")
    paths = [entry[3:] for entry in status.split("\0") if len(entry) > 3][:FINGERPRINT_FILES]
    root = Path(top.strip() or workspace)

    def digests() -> dict[str, str]:
        return {p: _digest(root / p) for p in paths}

    return _Snapshot(
        head.strip() or None if code == 0 else None, True, await trio.to_thread.run_sync(digests)
    )


async def progress_since(workspace: str, before: _Snapshot) -> tuple[int, int, bool]:
    """(files changed, new commits, progress) since ``before``: a file counts once whether it
    changed in the working tree, in a new commit, or both."""
    after = await snapshot(workspace)
    if not before.git or not after.git:
        moved = before.dirty != after.dirty
        return int(moved), 0, moved
    paths = before.dirty.keys() | after.dirty.keys()
    changed = {p for p in paths if before.dirty.get(p) != after.dirty.get(p)}
    commits = 0
    if after.head is not None and after.head != before.head:
        span = after.head if before.head is None else f"{before.head}..{after.head}"
        code, out = await _git(workspace, "rev-list", "--count", span)
        commits = int(out.strip()) if code == 0 and out.strip().isdigit() else 1
        if before.head is not None:  # what the new commits changed counts too
            code, out = await _git(workspace, "diff", "--name-only", "-z", before.head, after.head)
            if code == 0:
                changed.update(p for p in out.split("\0") if p)
    files = len(changed)
    return files, commits, files > 0 or commits > 0


# -- the worker -----------------------------------------------------------------------------


def _step_publisher(context: RoundContext | None) -> Callable[[AgentStep], None]:
    if context is None:
        return lambda step: None
    publish = context.agent_step
    return lambda step: publish(step.tool, step.detail)


_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]+)?")


@attrs.frozen(slots=False)  # not slotted: each instance sets ``kind`` to its adapter's
class CliAgentWorker(Worker):
    """One run of a coding-agent CLI per round; the kind's adapter does the CLI's part."""

    kind: ClassVar[str] = "cli"

    adapter: CliAdapter
    options: CliOptions
    kill_grace: float = 5.0
    #: The resolved binary (absolute), found when the spec is parsed: missing is refused then.
    executable: str = attrs.field(init=False)
    backoff: float = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        object.__setattr__(self, "kind", self.adapter.kind)
        name = self.options.binary or self.adapter.binary
        found = shutil.which(name)
        if found is None:
            raise WorkerSpecError(
                f"{self.adapter.kind} worker: the {name!r} executable was not found "
                f"{'(binary=' + name + ')' if self.options.binary else 'on PATH'}; install it "
                f"with `{self.adapter.install}` or name it with binary=PATH"
            )
        object.__setattr__(self, "executable", os.path.abspath(found))
        backoff = self.options.extra.get("backoff", str(DEFAULT_BACKOFF))
        if not _NUMBER.fullmatch(backoff) or float(backoff) <= 0:
            raise WorkerSpecError(
                f"{self.adapter.kind} worker backoff must be seconds > 0, got {backoff!r}"
            )
        object.__setattr__(self, "backoff", float(backoff))
        workspace = self.options.workspace
        if workspace is not None and not Path(workspace).is_dir():
            raise WorkerSpecError(
                f"{self.adapter.kind} worker workspace {workspace!r} is not a directory"
            )

    @classmethod
    def from_spec(cls, kind: str, rest: str, *, kill_grace: float = 5.0) -> CliAgentWorker:
        adapter = cli_adapter(kind)
        if adapter is None:
            raise WorkerSpecError(f"unknown CLI worker kind {kind!r}")
        return cls(adapter, parse_cli_options(adapter, rest), kill_grace=kill_grace)

    def environment(self, request: RoundRequest) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in SESSION_MARKERS}
        for name in self.adapter.strip_env:
            env.pop(name, None)
        env.update(
            {
                "LOOPACTORS_LOOP_ID": request.loop_id,
                "LOOPACTORS_ROUND": str(request.round),
                "LOOPACTORS_ROUNDS": str(request.rounds),
                "LOOPACTORS_MODE": request.mode,
                **({"LOOPACTORS_OBJECTIVE": request.objective} if request.objective else {}),
                **request.env,
            }
        )
        return env

    def workspace(self, request: RoundRequest) -> str:
        return os.path.abspath(request.cwd or self.options.workspace or os.getcwd())

    def workspace_of(self, request: RoundRequest) -> str | None:
        return self.workspace(request)

    async def run(self, request: RoundRequest, context: RoundContext | None) -> RoundResult:
        env = self.environment(request)
        account = _account(self.adapter, self.options, env)
        held = daily_hold(self.kind, account) or limit_hold(self.kind, account)
        if held is not None:  # another loop of this kind and account met the limit: one wait
            return RoundResult(
                status="deferred", deferred_until=held[0], error=f"held back: {held[1]}"
            )
        workspace = self.workspace(request)
        await list_workspace(Path(workspace))
        resume = request.session if request.mode == "inherit" and self.adapter.resumes else None
        promise = (
            promise_instruction(request.objective, self.options.promise)
            if request.objective
            else ""
        )
        # A resumed session has the earlier rounds already: the task alone, not the seed.
        prompt = (request.task if resume else request.prompt) + promise
        before = await snapshot(workspace)
        outcome = await self._run_round(prompt, resume, env, workspace, context)
        if resume is not None and outcome.session_missing:
            # The session is gone: a new one, with the full prompt (seed and task) instead.
            outcome = await self._run_round(request.prompt + promise, None, env, workspace, context)
        files, commits, moved = await progress_since(workspace, before)
        cost, session_cost = outcome.cost_usd, None
        if self.adapter.session_total_cost:
            session_cost = outcome.cost_usd
            earlier = request.session_cost_usd if outcome.session_id == resume else None
            cost = cost_of_round(session_cost, earlier)
        record_spend(self.kind, account, cost)
        common: dict[str, Any] = {
            "account": f"{self.kind}:{account}",
            "tokens": outcome.tokens,
            "cost_usd": cost,
            "session_cost_usd": session_cost,
            "session_id": outcome.session_id,
            "files_changed": files,
            "commits": commits,
            "progress": moved,
        }
        if outcome.limit is not None:
            until = outcome.limit.until
            if until is None or until <= time.time():
                until = time.time() + self.backoff
            _HOLDS[(self.kind, account)] = (until, outcome.limit.reason)
            return RoundResult(
                status="deferred", deferred_until=until, error=outcome.limit.reason, **common
            )
        if outcome.is_error:
            return RoundResult(
                status="failed",
                output=outcome.reply,
                error=outcome.error or "the CLI reported an error",
                **common,
            )
        done = bool(request.objective) and promise_claimed(outcome.reply, self.options.promise)
        return RoundResult(status="completed", output=outcome.reply, done=done, **common)

    async def _run_round(
        self,
        prompt: str,
        resume: str | None,
        env: dict[str, str],
        workspace: str,
        context: RoundContext | None,
    ) -> CliOutcome:
        command = self.adapter.command(CliRound(prompt, self.options, resume, workspace))
        return await self._run_cli(
            command.argv, {**env, **command.env}, command.stdin, workspace, context
        )

    async def _run_cli(
        self,
        argv: tuple[str, ...],
        env: dict[str, str],
        stdin: bytes | None,
        workspace: str,
        context: RoundContext | None,
    ) -> CliOutcome:
        parser = self.adapter.parser()
        publish = _step_publisher(context)
        stopper = GroupStopper(self.kill_grace)
        stderr_tail = bytearray()
        lines = LineSplitter(MAX_LINE_BYTES)
        try:
            process = await trio.lowlevel.open_process(
                [self.executable, *argv[1:]],
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                cwd=workspace,
                start_new_session=True,
            )
        except OSError as exc:
            return CliOutcome(is_error=True, error=f"cannot run {self.executable}: {exc}")
        stopper.started(process)
        try:
            async with trio.open_nursery() as nursery:
                if stdin is not None:
                    nursery.start_soon(_feed, process, stdin)
                nursery.start_soon(_tail, process, stderr_tail)
                assert process.stdout is not None
                async for chunk in process.stdout:
                    for line in lines.feed(chunk):
                        for step in parser.feed(line.decode("utf-8", "replace")):
                            publish(step)
                last = lines.end()
                if last is not None:
                    for step in parser.feed(last.decode("utf-8", "replace")):
                        publish(step)
                await process.wait()
                await stopper.unless_left()
        except BaseException:
            with trio.CancelScope(shield=True):
                await stopper.stop()
                await process.wait()
            raise
        # Descendants that outlived the CLI (a server it started) go with the round.
        with trio.CancelScope(shield=True):
            await stopper.stop()
        stderr = stderr_tail.decode("utf-8", "replace").strip()
        outcome = parser.finish(process.returncode or 0, stderr)
        if lines.dropped:
            note = (
                f"{lines.dropped} line(s) of {self.executable}'s output longer than "
                f"{MAX_LINE_BYTES >> 20} MiB were skipped"
            )
            if outcome.is_error and outcome.limit is None:  # a skipped result is why, maybe
                return attrs.evolve(outcome, error=f"{outcome.error or 'error'} ({note})")
            where = f"loop {context.loop_id} round {context.round}: " if context else ""
            log.warning("%s%s", where, note)
        return outcome


async def _feed(process: trio.Process, data: bytes) -> None:
    assert process.stdin is not None
    async with process.stdin:
        with contextlib.suppress(trio.BrokenResourceError):  # the CLI does not read stdin
            await process.stdin.send_all(data)


async def _tail(process: trio.Process, tail: bytearray) -> None:
    assert process.stderr is not None
    async for chunk in process.stderr:
        tail += chunk
        del tail[:-_STDERR_TAIL]


@attrs.frozen(kw_only=True)
class CliWorkerKind(WorkerKind):
    """A coding-agent CLI kind: its adapter, and the worker every such kind shares."""

    adapter: CliAdapter


def cli_worker_kind(adapter: CliAdapter, *, reports_cost: bool = True) -> CliWorkerKind:
    """The worker kind of a CLI adapter, to register like any kind; ``reports_cost``
    ``False`` for a CLI that says nothing of what a run cost."""

    def build(options: str, kill_grace: float) -> Worker:
        return CliAgentWorker(adapter, parse_cli_options(adapter, options), kill_grace=kill_grace)

    def check_form(options: str) -> None:
        parse_cli_options(adapter, options)

    def pin_workspace(spec: str, directory: str | Path) -> str:
        read = WorkerSpec.parse(spec)
        if parse_cli_options(adapter, read.options).workspace is not None:
            return spec
        path = workspace_path(directory)
        # args= takes the rest of the spec: the workspace goes before it
        head, args, tail = read.options.partition("args=")
        head = head.rstrip(",")
        options = ",".join(part for part in (head, f"workspace={path}", args + tail) if part)
        return f"{read.kind}:{options}"

    return CliWorkerKind(
        name=adapter.kind,
        adapter=adapter,
        build=build,
        local_resources=True,  # the CLI's binary must be installed where the rounds run
        check_form=check_form,
        workspace="round",
        pin_workspace=pin_workspace,
        reports_cost=reports_cost,
    )
