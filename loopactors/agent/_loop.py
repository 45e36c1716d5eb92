"""``run_agent``: Receive -> Compact -> Reason -> Act -> back to Receive, until Receive ends it.

- **Receive** drains the inbox. It is the only normal exit: nothing waking was drained and the
  last Act ran no tools (a final answer alone never ends the run; a message that arrived while
  the model answered is handled in the same run). With background work pending (the
  ``background`` probe) the run waits for a wake-up, bounded by ``idle_wait``, and on the
  deadline completes with a hand-off note instead of waiting forever.
- The iteration budget counts **model calls** only and is checked between Receive and Compact,
  so a final answer on the last allowed call still completes.
- **Compact** applies the planner's decision (``_compaction``); **Reason** calls the model;
  **Act** commits the final answer or runs the tool round (``_dispatch``).
- Each stage emits ``stage_started`` / ``stage_ended`` in pairs, even on error.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import attrs
import msgspec
import trio

from ..errors import AgentError, ModelError
from ._compact_stage import CompactStage, MicroApplier, apply_locally
from ._compaction import CompactionConfig
from ._dispatch import run_tool_round
from ._hooks import AgentHooks, HookError
from ._llm import ChatModel
from ._queue import MessageQueue, QueuedMessage
from ._tools import ToolContext, ToolSet
from ._transcript import Message, Transcript
from ._usage import TokenTotals, UsageTracker
from ._wire import ChatReply

__all__ = [
    "DEFAULT_MAX_ITERATIONS",
    "SUBAGENT_MAX_ITERATIONS",
    "AgentConfig",
    "AgentEvent",
    "AgentResult",
    "MaxIterationsExceeded",
    "run_agent",
]

DEFAULT_MAX_ITERATIONS = 500
SUBAGENT_MAX_ITERATIONS = 200
DEFAULT_SYSTEM_PROMPT = (
    "You are a coding agent working in a workspace directory. Use the tools to read, search, "
    "edit files and run commands; paths are relative to the workspace. Work step by step, "
    "check your changes (run the tests when there are some), and finish with a short answer "
    "saying what you did."
)
CONTINUE_AFTER_CUT = (
    "Your previous reply was cut off before it ended. Continue exactly where it stopped; "
    "re-issue any tool call that did not run."
)


class MaxIterationsExceeded(AgentError):
    """The run used its budget of model calls without reaching a final answer."""


class AgentEvent(msgspec.Struct, frozen=True):
    """Something the run did, for progress displays and logs (never holds the API key)."""

    kind: str
    detail: str = ""


@attrs.frozen(kw_only=True)
class AgentConfig:
    max_iterations: int = DEFAULT_MAX_ITERATIONS
    system_prompt: str = DEFAULT_SYSTEM_PROMPT
    compaction: CompactionConfig = attrs.field(factory=CompactionConfig)
    #: A tool failing this many times in a row makes a waking warning; again at each multiple.
    failure_streak: int = 3
    #: Consecutive cut or length-truncated replies continued before the run fails.
    max_continuations: int = 2
    #: Longest wait for background work with nothing else to do, then a hand-off.
    idle_wait: float = 300.0
    tool_output_limit: int = 30_000

    def __attrs_post_init__(self) -> None:
        if self.max_iterations < 1:
            raise AgentError(f"max_iterations must be >= 1, got {self.max_iterations}")


@attrs.define(kw_only=True)
class AgentResult:
    status: Literal["completed", "failed"]
    #: The last final answer (possibly rewritten by after_agent).
    output: str
    error: str | None
    transcript: Transcript
    tokens: TokenTotals
    #: Model calls made (the iteration budget's unit).
    iterations: int
    #: Set when an idle wait reached its deadline with background work still pending.
    handoff: str | None = None
    events: list[AgentEvent] = attrs.field(factory=list)
    #: The model's rate or usage limit that outlasted the retries (the round is then
    #: deferred, not failed, by the agent worker), if that is why it failed.
    limit: ModelError | None = None


def _reminder(text: str) -> str:
    text = text.strip()
    if text.startswith("<system-reminder>"):
        return text  # already wrapped by its producer: never wrap twice
    return f"<system-reminder>\n{text}\n</system-reminder>"


@attrs.define(kw_only=True)
class _Run:
    model: ChatModel
    summary_model: ChatModel
    tools: ToolSet
    context: ToolContext
    config: AgentConfig
    transcript: Transcript
    queue: MessageQueue
    hooks: Sequence[AgentHooks]
    background: Callable[[], bool] | None
    on_event: Callable[[AgentEvent], None] | None
    applier: MicroApplier = apply_locally
    usage: UsageTracker = attrs.field(factory=UsageTracker)
    totals: TokenTotals = attrs.field(factory=TokenTotals)
    events: list[AgentEvent] = attrs.field(factory=list)
    iterations: int = 0
    output: str = ""
    transient: list[Message] = attrs.field(factory=list)
    compaction: CompactStage = attrs.field(init=False)
    continuations: int = 0
    streaks: dict[str, int] = attrs.field(factory=dict)
    handoff: str | None = None

    def __attrs_post_init__(self) -> None:
        self.compaction = CompactStage(
            config=self.config.compaction,
            transcript=self.transcript,
            usage=self.usage,
            totals=self.totals,
            summary_model=self.summary_model,
            workspace=self.context.workspace,
            emit=self.emit,
            applier=self.applier,
        )

    def emit(self, kind: str, detail: str = "") -> None:
        event = AgentEvent(kind, detail)
        self.events.append(event)
        if self.on_event is not None:
            self.on_event(event)

    def stream_text(self, delta: str) -> None:
        """Streamed answer text goes to ``on_event`` live (not kept in the result's events)."""
        if self.on_event is not None:
            self.on_event(AgentEvent("text", delta))

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        self.emit("stage_started", name)
        status = "error"
        try:
            yield
            status = "done"
        finally:
            self.emit("stage_ended", f"{name}: {status}")

    async def soft_hook(self, name: str, *args: Any) -> None:
        """Run a hook whose errors are recorded and ignored (see the policy table)."""
        for hook in self.hooks:
            try:
                await getattr(hook, name)(*args)
            except Exception as exc:
                self.emit("hook_failed", f"{name}: {type(exc).__name__}: {exc}")

    async def hard_hook(self, name: str, *args: Any) -> list[Any]:
        answers = []
        for hook in self.hooks:
            try:
                answers.append(await getattr(hook, name)(*args))
            except Exception as exc:
                raise HookError(name, exc) from exc
        return answers

    # -- Receive ---------------------------------------------------------------------------

    def receive(self) -> bool:
        """Drain the inbox into the transcript; True when something waking was drained."""
        drained = self.queue.drain_all()
        for item in drained:
            if item.kind == "prompt":
                if item.text:  # an empty prompt only drives the loop
                    self.transcript.append(Message(role="user", content=item.text))
            elif item.visible:
                message = Message(role="user", content=_reminder(item.text))
                if item.persisted:
                    self.transcript.append(message)
                else:
                    self.transient.append(message)
        if drained:
            self.emit("received", f"{len(drained)} message(s)")
        if any(item.kind == "prompt" and item.text for item in drained):
            self.compaction.note_work()
        return any(item.wakes for item in drained)

    async def idle(self) -> bool:
        """Wait (bounded) for a wake-up while background work is pending; False on deadline."""
        woken = trio.Event()
        # Armed before the first await: nothing can be pushed between the drain and here.
        self.queue.on_wake(woken.set)
        try:
            with trio.move_on_after(self.config.idle_wait):
                self.emit("idle", "waiting for background work")
                await woken.wait()
                return True
        finally:
            self.queue.on_wake(None)
        self.handoff = (
            f"background work was still pending after {self.config.idle_wait:g}s of waiting; "
            "the run ended without its results"
        )
        self.emit("handoff", self.handoff)
        return False

    # -- Compact -----------------------------------------------------------------------------

    async def compact(self) -> None:
        """The Compact stage: hooks around the compaction stage's one attempt."""
        reading = self.compaction.reading()
        if reading is None:
            return  # this reading was already acted on
        await self.soft_hook("before_compact", reading)
        action = "failed"
        try:
            action = await self.compaction.run(reading)
        finally:
            await self.soft_hook("after_compact", action)

    # -- Reason and Act ----------------------------------------------------------------------

    async def reason(self) -> ChatReply:
        view = [*self.transcript.model_view(), *self.transient]
        self.transient.clear()
        await self.hard_hook("before_model", view)
        reply = await self.model.complete(view, self.tools.schemas(), on_text=self.stream_text)
        self.iterations += 1
        self.totals.add(reply.usage)
        await self.hard_hook("after_model", reply)
        return reply

    async def act(self, reply: ChatReply) -> bool:
        """Commit the reply (running its tools); True when tools ran."""
        cut = reply.interrupted or (reply.finish_reason == "length" and not reply.tool_calls)
        if cut:
            self.continuations += 1
            if self.continuations > self.config.max_continuations:
                raise AgentError(
                    f"the model's reply was cut off {self.continuations} times in a row "
                    "(stream interrupted or output limit reached)"
                )
            self.queue.push(
                QueuedMessage(kind="defer", text=CONTINUE_AFTER_CUT, source="continuation")
            )
        else:
            self.continuations = 0
        # The report covers the view plus this reply: everything up to the assistant message.
        self.usage.report(reply.usage, covered=len(self.transcript) + 1)
        if not reply.tool_calls:
            answer = reply.content
            if not cut:
                for rewritten in await self.hard_hook("after_agent", answer):
                    answer = rewritten if rewritten is not None else answer
                self.output = answer
            if answer:  # never an empty assistant message
                self.transcript.append(Message(role="assistant", content=answer))
            return False
        done = await run_tool_round(
            reply.message(),
            tools=self.tools,
            context=self.context,
            transcript=self.transcript,
            hooks=self.hooks,
            output_limit=self.config.tool_output_limit,
            on_event=self.emit,
        )
        self.count_failures(done.outcomes)
        self.compaction.note_work()
        return True

    def count_failures(self, outcomes: list[tuple[str, bool]]) -> None:
        """Per-tool failure streaks; a waking warning at each multiple of the threshold."""
        limit = self.config.failure_streak
        for name, failed in outcomes:
            streak = self.streaks[name] = self.streaks.get(name, 0) + 1 if failed else 0
            if failed and streak % limit == 0:
                advice = (
                    "Consider a different approach."
                    if streak == limit
                    else "Stop calling it the same way: change approach or explain the blocker."
                )
                text = f"Warning: tool {name!r} has failed {streak} times in a row. {advice}"
                self.emit("tool_failure_warning", text)
                self.queue.push(
                    QueuedMessage(kind="defer", text=text, source="tool_failure_warning")
                )

    # -- the loop ------------------------------------------------------------------------------

    async def run(self) -> None:
        has_tool_calls = False
        started = False
        while True:
            with self.stage("receive"):
                woken = self.receive()
            if not woken and not has_tool_calls:
                pending = self.background is not None and self.background()
                if pending and await self.idle():
                    continue
                return
            if self.iterations >= self.config.max_iterations:
                raise MaxIterationsExceeded(
                    f"the agent used its budget of {self.config.max_iterations} model calls "
                    "without finishing"
                )
            if not started:
                started = True
                await self.soft_hook("before_agent", self.transcript.model_view())
            with self.stage("compact"):
                await self.compact()
            with self.stage("reason"):
                reply = await self.reason()
            with self.stage("act"):
                has_tool_calls = await self.act(reply)


async def run_agent(
    prompt: str | None,
    *,
    model: ChatModel,
    tools: ToolSet,
    workspace: str | os.PathLike[str] = ".",
    config: AgentConfig | None = None,
    transcript: Transcript | None = None,
    queue: MessageQueue | None = None,
    hooks: Sequence[AgentHooks] = (),
    summary_model: ChatModel | None = None,
    background: Callable[[], bool] | None = None,
    on_event: Callable[[AgentEvent], None] | None = None,
    env: Mapping[str, str] | None = None,
    applier: MicroApplier | None = None,
) -> AgentResult:
    """Run the agent until Receive ends it; see the module docstring.

    ``prompt`` is queued as a prompt (``None``: only what is already in ``queue``). Pass your
    own ``transcript`` to keep it even if the run is cancelled (it is consistent whenever the
    run stops). Errors that end the run (model errors after retries, a failing hook whose
    policy is to fail, the iteration budget, compaction that cannot recover) come back as a
    ``failed`` result; cancellation propagates. ``applier`` applies micro compaction plans
    (default: in this task; the agent worker passes one that asks the runtime's ContextBuilder).
    """
    config = config or AgentConfig()
    transcript = transcript if transcript is not None else Transcript()
    queue = queue if queue is not None else MessageQueue()
    if not any(entry.message.role == "system" for entry in transcript.entries):
        transcript.append(Message(role="system", content=config.system_prompt))
    if prompt is not None:
        queue.push(QueuedMessage(kind="prompt", text=prompt))
    totals = TokenTotals()
    run = _Run(
        model=model,
        summary_model=summary_model or model,
        tools=tools,
        context=ToolContext(
            workspace=Path(workspace), tools=tools, tokens=totals, env=dict(env or {})
        ),
        totals=totals,
        config=config,
        transcript=transcript,
        queue=queue,
        hooks=hooks,
        background=background,
        on_event=on_event,
        applier=applier or apply_locally,
    )
    error: str | None = None
    limit: ModelError | None = None
    try:
        await run.run()
    except AgentError as exc:
        error = str(exc)
        if isinstance(exc, ModelError) and exc.rate_limited:
            limit = exc
        run.emit("failed", error)
        await run.soft_hook("on_error", exc)
    return AgentResult(
        status="failed" if error else "completed",
        output=run.output,
        error=error,
        transcript=transcript,
        tokens=run.totals,
        iterations=run.iterations,
        handoff=run.handoff,
        events=run.events,
        limit=limit,
    )
