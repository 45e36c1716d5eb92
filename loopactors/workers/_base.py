"""What runs one round: the worker interface, its request and its result.

A worker is ``prompt in -> RoundResult out``. The Dispatcher owns time: it runs each worker in
a cancel scope with the round's timeout, measures the duration and turns a timeout into
``timed_out``. A worker only has to return (completed or failed) and let cancellation through.
"""

from __future__ import annotations

import abc
import builtins
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

import msgspec
import trio

# At run time, not only for type checkers: msgspec resolves RoundRequest's annotations (so
# the transport can decode one) in this module.
from .._workspaces import record_agent_workspace
from ..loops import CheckRecord, LoopControl, Mode

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from types import TracebackType

    from ..agent import Entry, FullPlan, MicroPlan
    from ..loops import AnyEvent, Gap, LoopState, RoundRecord

_log = logging.getLogger(__name__)

__all__ = [
    "ChildLoop",
    "LoopEvents",
    "RoundContext",
    "RoundRequest",
    "RoundResult",
    "Worker",
    "WorkerStatus",
]

#: ``deferred``: the provider's usage or rate limit said "not now"; the same round runs
#: again at ``deferred_until`` (not a failure: see docs/agent-clis.md).
WorkerStatus = Literal["completed", "failed", "timed_out", "cancelled", "deferred"]


class RoundRequest(msgspec.Struct, gc=False, frozen=True, kw_only=True):
    loop_id: str
    round: int
    rounds: int
    mode: Mode
    #: The full prompt for this round (seed + separator + task, or the task alone).
    prompt: str
    #: The loop's task text, without any seed.
    task: str
    #: The worker spec string the loop was started with.
    worker: str
    #: What the loop is for, if the user said (``objective="..."``): a worker that finds it
    #: met reports ``done`` and the loop completes early.
    objective: str | None = None
    #: Working directory for the round (a code loop's worktree); ``None``: the process's own.
    cwd: str | None = None
    #: Extra environment for the round (a code loop's ``LOOPACTORS_WORKTREE`` and friends).
    env: dict[str, str] = msgspec.field(default_factory=dict)
    #: The agent session to resume (a coding-agent CLI's own session id, from the previous
    #: round of an ``inherit`` loop), or ``None``.
    session: str | None = None
    #: What that session had cost so far, as the CLI last reported it (kinds whose CLI
    #: reports a session's running total: the round's cost is the difference).
    session_cost_usd: float | None = None
    #: The loop's ``until`` check and its timeout: run by the runtime after a completed round,
    #: in the worker's workspace (:meth:`Worker.workspace_of`).
    until: str | None = None
    until_timeout: float = 600.0
    #: Bytes of the output that are kept (``max_output_bytes``), and where to write the whole
    #: of a longer one (``keep_full_outputs``): set by the Dispatcher for workers that keep
    #: only that much while the output streams in (``Worker.bounds_output``).
    max_output_bytes: int | None = None
    whole_output_at: str | None = None

    #: Idempotency key ``loop_id:round``: the same round dispatched again has the same key.
    @property
    def key(self) -> str:
        return f"{self.loop_id}:{self.round}"


class RoundResult(msgspec.Struct, gc=False, frozen=True, kw_only=True):
    status: WorkerStatus
    output: str = ""
    error: str | None = None
    tokens: int = 0
    duration: float = 0.0
    #: The worker says the loop's objective is met: the loop completes after this round.
    done: bool = False
    #: What the round said and did, as plain data (the agent worker's conversation: one
    #: entry per message with its flags); kept with the round record. Empty for other workers.
    transcript: tuple[dict[str, Any], ...] = ()
    #: What this round cost in US dollars (never a session's running total).
    cost_usd: float = 0.0
    #: The running cost total of the agent session after this round, for kinds whose CLI
    #: reports one (Claude Code's ``total_cost_usd``); ``None`` otherwise.
    session_cost_usd: float | None = None
    #: The agent CLI's own session id (resumed by the next round of an ``inherit`` loop).
    session_id: str | None = None
    #: Workspace progress measured around the round (coding-agent CLI kinds): files changed
    #: in the working tree, new commits, and whether anything moved. ``progress`` ``None``:
    #: not measured, the no-progress rule compares outputs.
    files_changed: int | None = None
    commits: int | None = None
    progress: bool | None = None
    #: With status ``deferred``: UNIX time the round may run again.
    deferred_until: float | None = None
    #: The account the round ran on, ``KIND:FINGERPRINT`` (coding-agent CLI kinds): what
    #: its cost counts against in the daily budgets.
    account: str | None = None
    #: The loop's ``until`` check after the round (set by whoever ran the round: the
    #: Dispatcher, or a transport's worker process).
    check: CheckRecord | None = None


class ChildLoop(Protocol):
    """A loop started by a round's :meth:`RoundContext.start_child` (the runtime's
    ``LoopHandle`` is one). Deprecated with it: ``start`` returns the child's state, and the
    context's ``get``, ``wait``, ``stop`` and ``history`` take its id."""

    @property
    def loop_id(self) -> str: ...

    async def status(self) -> LoopState: ...

    async def wait(self) -> LoopState: ...

    async def stop(self, *, after_round: bool = False) -> LoopState: ...

    async def history(self) -> list[RoundRecord]: ...


class LoopEvents(Protocol):
    """Live events of loops: iterate with ``async for``; close by leaving the ``async with``
    (or ``with``)."""

    def __enter__(self) -> LoopEvents: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...

    async def __aenter__(self) -> LoopEvents: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None: ...

    def __aiter__(self) -> AsyncIterator[AnyEvent | Gap]: ...


class RoundContext(LoopControl, Protocol):
    """The one way a worker touches the runtime during a round: typed, implemented by the
    runtime (``runtime/_api.py``). A worker gets ``None`` where there is no runtime (a
    transport's worker process, a code loop's own round). Workers never import the runtime.

    It speaks the one loop vocabulary (``loops.LoopControl``: ``start``, ``get``, ``list``,
    ``history``, ``stop``, ``pause``, ``resume``, ``wait``, ``subscribe``) over the node's
    loops; its ``start`` starts a child loop of the round's loop (stopped with its parent,
    never repeating an ancestor's task).
    """

    #: The round's loop and its round number.
    @property
    def loop_id(self) -> str: ...

    @property
    def round(self) -> int: ...

    def subscribe(self, loop_id: str | None = None) -> LoopEvents:
        """Live events of one loop, or of every loop, from now on (``async with``)."""
        ...

    @property
    def child_workers(self) -> tuple[str, ...]:
        """Worker specs the operator lets a model choose for a child loop (the configuration's
        ``child_workers``); otherwise a model's child runs its parent's own spec."""
        ...

    @property
    def node_paths(self) -> tuple[str, ...]:
        """The node's own state: its state directory (its token, its store) and a token file
        kept elsewhere. An agent's tools never reach them and its sandbox hides them
        (docs/security.md, agent tools)."""
        ...

    # The spellings before the one vocabulary, kept for one release (they warn).

    async def start_child(self, text: str, **options: Any) -> ChildLoop:
        """Deprecated: :meth:`start` (which returns the child's state)."""
        ...

    async def get_loop(self, loop_id: str) -> LoopState:
        """Deprecated: :meth:`get`."""
        ...

    async def list_loops(self) -> builtins.list[LoopState]:
        """Deprecated: :meth:`list`."""
        ...

    async def loop_history(self, loop_id: str) -> builtins.list[RoundRecord]:
        """Deprecated: :meth:`history`."""
        ...

    async def stop_loop(self, loop_id: str) -> LoopState:
        """Deprecated: :meth:`stop`."""
        ...

    async def apply_compaction(
        self, plan: MicroPlan | FullPlan, view: tuple[Entry, ...]
    ) -> tuple[Entry, ...]:
        """Have the runtime apply an agent's compaction plan to ``view`` (the entries it was
        made on); raises when the runtime could not (the agent then applies it itself)."""
        ...

    def agent_step(self, tool: str, detail: str) -> None:
        """A tool call of a coding-agent CLI in this round: published live, not stored."""
        ...

    def process_group_started(self, pgid: int, cgroup: str | None = None) -> None:
        """A subprocess of this round leads process group ``pgid`` (its own session), in
        ``cgroup`` if it has one of its own: the runtime lists them durably, so that after a
        crash it ends them before it runs the round again."""
        ...

    def process_group_ended(self, pgid: int) -> None:
        """The round is done with process group ``pgid``."""
        ...


class Worker(abc.ABC):
    """Runs one round. Subclasses set ``kind`` and implement :meth:`run`."""

    kind: ClassVar[str]
    #: The worker keeps at most the request's ``max_output_bytes`` of its output while the
    #: round runs (and writes the whole to ``whole_output_at``); the Dispatcher then sets them.
    bounds_output: ClassVar[bool] = False

    @abc.abstractmethod
    async def run(self, request: RoundRequest, context: RoundContext | None) -> RoundResult:
        """Run the round. Must let ``trio.Cancelled`` through (that is how a stop arrives)."""

    def workspace_of(self, request: RoundRequest) -> str | None:
        """The directory the round works in (where the loop's ``until`` check runs);
        ``None``: the process's own working directory."""
        return request.cwd

    def run_at_once(self, request: RoundRequest) -> RoundResult | None:
        """The round's result on the spot, for a worker whose round waits for nothing and
        takes no time; ``None`` (the default) when the round needs :meth:`run`.

        The runtime runs such a round where it dispatches it: no task, cancel scope or
        timeout of its own (there is nothing to wait for, to cancel midway or to time out).
        """
        return None

    def waits_only(
        self, request: RoundRequest
    ) -> tuple[float, Callable[[RoundRequest], RoundResult]] | None:
        """For a round that does nothing but wait a fixed time, after which its result is
        ready on the spot: that time in seconds, and what gives the result then (called
        with the request). ``None`` (the default): the round needs :meth:`run`.

        The runtime holds such a round as an entry of a timer heap, not a task: no task,
        cancel scope or round context while it waits (a stop or its timeout still ends it).
        """
        return None


#: Workspaces this process could not list (said once each).
_UNLISTED: set[Path] = set()


async def list_workspace(workspace: Path) -> None:
    """List ``workspace`` as one an agent writes in, so that configuration found there later
    is not trusted unchecked (docs/configuration.md, "Files"); a list that cannot be written
    is logged (once per workspace and process), not fatal."""
    try:
        await trio.to_thread.run_sync(record_agent_workspace, workspace)
    except OSError as exc:
        if workspace in _UNLISTED:
            return
        _UNLISTED.add(workspace)
        _log.warning(
            "cannot list %s as an agent's workspace (%s): configuration files found there "
            "will not be checked",
            workspace,
            exc,
        )
