"""The agent worker: one round is one :func:`loopactors.agent.run_agent` on the round's prompt.

Spec: ``agent[:model=NAME,base_url=URL,max_iterations=N,workspace=DIR,context_window=N,
stream=true|false,timeout=SECONDS,mcp=CONFIG.json]``. Missing ``base_url`` / ``model`` come from
``LOOPACTORS_LLM_BASE_URL`` / ``LOOPACTORS_LLM_MODEL``; the API key only ever comes from
``LOOPACTORS_LLM_API_KEY`` (a spec is stored with the loop, so a key in it would land in the
store: it is refused). Everything is checked when the spec is parsed, so a loop with a bad
agent spec is refused at start, not in round 1.

Tools: the core set, the sub-agent tool ``agent`` (inside the runtime each sub-agent is a
one-round ``fresh`` child loop of the round's loop, dispatched like any round, whose worker is
:meth:`AgentWorker.subagent_spec`), the tools of the MCP servers in the
``mcp=`` config (deferred), and (deferred, behind ``search_tools`` /
``execute_tool``) the loop tools for child loops of this round's loop. The round's tokens are
the provider-reported totals of its model calls (sub-agents included); its transcript goes with
the result into the round record (``loopactors history --transcript``).
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

import attrs
import trio

from ..agent import (
    BASH_MODES,
    SUBAGENT_MAX_ITERATIONS,
    AgentConfig,
    AgentHooks,
    AgentResult,
    BashMode,
    ChatClient,
    CompactionConfig,
    McpServer,
    MessageQueue,
    ModelSettings,
    SubAgentRun,
    ToolCall,
    ToolDecision,
    ToolSet,
    core_tools,
    find_bwrap,
    load_mcp_config,
    loop_tools,
    open_mcp_tools,
    run_agent,
    subagent_tool,
)
from ..errors import AgentError, LoopactorsError, WorkerSpecError
from ..loops import WorkerSpec
from ._agent_loops import RoundLoops
from ._base import RoundContext, RoundRequest, RoundResult, Worker, list_workspace
from ._budget import daily_hold
from ._cli_adapter import step_detail
from ._cli_worker import account_fingerprint, hold_limit, limit_hold
from ._kinds import WorkerKind, workspace_path

__all__ = ["KIND", "LIMIT_BACKOFF", "AgentWorker", "in_workspace"]

#: Seconds a round waits after a limit whose server did not say how long (the CLI kinds'
#: default ``backoff=``; the runner's own backoff grows from there on repeats).
LIMIT_BACKOFF = 60.0

_FORM = (
    "agent[:model=NAME,base_url=URL,max_iterations=N,workspace=DIR,context_window=N,"
    "stream=true|false,timeout=SECONDS,mcp=CONFIG.json,bash=on|sandbox|off]"
)
_OPTIONS = (
    "base_url",
    "bash",
    "context_window",
    "max_iterations",
    "mcp",
    "model",
    "stream",
    "timeout",
    "workspace",
)
#: Marks a sub-agent's task: a child loop may not repeat an ancestor's task word for word.
SUBAGENT_PREFIX = "[sub-agent] "
#: Seconds a cancelled sub-agent call waits for its child loop to be stopped.
_STOP_PATIENCE = 5.0
_UNSIGNED_INT = re.compile(r"[1-9][0-9]*")
_DECIMAL = re.compile(r"[0-9]+(?:\.[0-9]*)?")


def _int(name: str, value: str) -> int:
    if not _UNSIGNED_INT.fullmatch(value):
        raise WorkerSpecError(f"agent worker {name} must be an integer >= 1, got {value!r}")
    return int(value)


def _options(text: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for item in text.split(",") if text else []:
        name, equals, value = item.partition("=")
        if name == "api_key":
            raise WorkerSpecError(
                "agent worker api_key cannot be given in the spec (specs are stored with the "
                "loop); set LOOPACTORS_LLM_API_KEY instead"
            )
        if not equals or not value:
            raise WorkerSpecError(
                f"agent worker option {item!r} is not NAME=VALUE; expected {_FORM}"
            )
        if name not in _OPTIONS:
            raise WorkerSpecError(
                f"agent worker option {name!r} is unknown; accepted options: {', '.join(_OPTIONS)}"
            )
        if name in values:
            raise WorkerSpecError(f"agent worker option {name!r} is given twice")
        values[name] = value
    return values


def in_workspace(spec: str, directory: str | Path) -> str:
    """``spec`` (an agent worker spec) with ``workspace=`` set to ``directory``, unless the spec
    names one already (the spec wins: it is what the loop was started with).

    Raises:
        WorkerSpecError: ``spec`` is not an agent worker spec.
    """
    read = WorkerSpec.parse(spec)
    if read.kind != "agent":
        raise WorkerSpecError(f"a workspace applies to the agent worker only, not to {spec!r}")
    if "workspace" in _options(read.options):
        return spec
    path = workspace_path(directory)
    rest = read.options
    return f"agent:{rest},workspace={path}" if rest else f"agent:workspace={path}"


@attrs.frozen
class _ChildLoopSubAgent:
    """Runs a sub-agent as a one-round child loop of the round's loop and waits for it."""

    context: RoundContext
    spec: str

    async def __call__(self, task: str) -> SubAgentRun:
        # One round (a failed round is not retried), the task alone as the prompt.
        started = await self.context.start(
            f"|loop:1,fresh| {SUBAGENT_PREFIX}{task}", worker=self.spec
        )
        try:
            state = await self.context.wait(started.loop_id)
        except BaseException:
            # Cancelled (a stop, a round timeout): the child must not outlive the call.
            with trio.move_on_after(_STOP_PATIENCE, shield=True):
                with contextlib.suppress(LoopactorsError):
                    await self.context.stop(started.loop_id)
            raise
        rounds = await self.context.history(started.loop_id)
        last = rounds[-1] if rounds else None
        if state.phase == "complete" and last is not None and last.status == "completed":
            return SubAgentRun(completed=True, output=last.output, tokens=state.tokens_used)
        if last is None or last.status == "completed":
            error = f"child loop {state.loop_id} ended {state.phase}: {state.reason}"
        else:
            error = f"its round in child loop {state.loop_id} {last.status}: {last.error}"
        return SubAgentRun(
            completed=False,
            output=last.output if last is not None else "",
            error=error,
            tokens=state.tokens_used,
        )


class _LiveSteps(AgentHooks):
    """Each tool call, as it is about to run, published live as an ``agent_step`` event (as
    the coding-agent CLI kinds do), so `run`, the REPL and a node's subscribers see it."""

    def __init__(self, context: RoundContext) -> None:
        self.context = context

    async def before_tools_batch(self, calls: Sequence[ToolCall]) -> Sequence[ToolDecision] | None:
        for call in calls:
            try:
                arguments = json.loads(call.arguments)
            except ValueError:
                arguments = None
            self.context.agent_step(call.name, step_detail(arguments))
        return None  # approves them all: this hook only watches


@attrs.frozen(kw_only=True)
class AgentWorker(Worker):
    """Runs the agent loop once per round, in ``workspace`` with the core tools."""

    kind: ClassVar[str] = "agent"

    settings: ModelSettings
    config: AgentConfig = attrs.field(factory=AgentConfig)
    workspace: Path = attrs.field(factory=Path.cwd, converter=Path)
    #: MCP servers started for each round; their tools are deferred.
    mcp_servers: tuple[McpServer, ...] = ()
    #: How the bash tool runs commands: ``on`` (as the node's user), ``sandbox``
    #: (bubblewrap: docs/agent.md), ``off`` (no bash tool).
    bash: BashMode = "on"

    @classmethod
    def from_spec(cls, text: str) -> AgentWorker:
        """Build from the text after ``agent:`` (empty: everything from the environment)."""
        values = _options(text)
        model_options: dict[str, object] = {}
        if "stream" in values:
            if values["stream"] not in ("true", "false"):
                raise WorkerSpecError(
                    f"agent worker stream must be true or false, got {values['stream']!r}"
                )
            model_options["stream"] = values["stream"] == "true"
        if "timeout" in values:
            if not _DECIMAL.fullmatch(values["timeout"]) or float(values["timeout"]) <= 0:
                raise WorkerSpecError(
                    f"agent worker timeout must be seconds > 0, got {values['timeout']!r}"
                )
            model_options["timeout"] = float(values["timeout"])
        try:
            settings = ModelSettings.from_env(
                base_url=values.get("base_url"), model=values.get("model"), **model_options
            )
        except AgentError as exc:
            raise WorkerSpecError(f"agent worker: {exc}") from None
        config = AgentConfig()
        if "max_iterations" in values:
            config = attrs.evolve(
                config, max_iterations=_int("max_iterations", values["max_iterations"])
            )
        if "context_window" in values:
            window = _int("context_window", values["context_window"])
            compaction = CompactionConfig(
                context_window=window, output_reserve=min(8192, window // 8)
            )
            config = attrs.evolve(config, compaction=compaction)
        workspace = Path(values.get("workspace", ".")).resolve()
        if not workspace.is_dir():
            raise WorkerSpecError(f"agent worker workspace {str(workspace)!r} is not a directory")
        servers: list[McpServer] = []
        if "mcp" in values:
            try:
                servers = load_mcp_config(values["mcp"])
            except AgentError as exc:
                raise WorkerSpecError(f"agent worker: {exc}") from None
        bash = values.get("bash", "on")
        if bash not in BASH_MODES:
            raise WorkerSpecError(
                f"agent worker bash must be one of {', '.join(BASH_MODES)}, got {bash!r}"
            )
        if bash == "sandbox":
            try:
                find_bwrap()
            except AgentError as exc:
                raise WorkerSpecError(f"agent worker: {exc}") from None
        return cls(
            settings=settings,
            config=config,
            workspace=workspace,
            mcp_servers=tuple(servers),
            bash=bash,
        )

    def subagent_spec(self) -> str | None:
        """The worker spec of a sub-agent: this worker's model, endpoint, workspace, context
        window, stream and timeout, with the sub-agent's iteration budget (no API key: it
        comes from the environment). ``None`` when a value cannot be written in a spec."""
        values = {
            "model": self.settings.model,
            "base_url": self.settings.base_url,
            "workspace": str(self.workspace),
            "max_iterations": str(SUBAGENT_MAX_ITERATIONS),
            "stream": "true" if self.settings.stream else "false",
            "timeout": repr(self.settings.timeout),
        }
        window = self.config.compaction.context_window
        if window != CompactionConfig().context_window:
            values["context_window"] = str(window)
        if self.bash != "on":
            values["bash"] = self.bash
        if any("," in value for value in values.values()):
            return None
        spec = "agent:" + ",".join(f"{name}={value}" for name, value in values.items())
        try:
            type(self).from_spec(spec.partition(":")[2])
        except WorkerSpecError:
            return None
        return spec

    def workspace_of(self, request: RoundRequest) -> str | None:
        return request.cwd or str(self.workspace)

    async def run(self, request: RoundRequest, context: RoundContext | None) -> RoundResult:
        # One wait per endpoint and key: a limit met by one loop holds back the others.
        account = account_fingerprint(self.settings.base_url, self.settings.api_key or "")
        held = daily_hold(self.kind, account) or limit_hold(self.kind, account)
        if held is not None:
            return RoundResult(
                status="deferred", deferred_until=held[0], error=f"held back: {held[1]}"
            )
        result = await self._run(request, context)
        if result.limit is None:
            output = result.output
            if result.handoff:
                output += f"\n\n[hand-off] {result.handoff}"
            return RoundResult(
                status=result.status,
                output=output,
                error=result.error,
                tokens=result.tokens.total,
                transcript=tuple(result.transcript.to_builtins()),
            )
        # A rate or usage limit that outlasted the retries: the round waits, as the CLI
        # kinds' do (docs/agent-clis.md, Usage and rate limits).
        now = time.time()
        after = result.limit.retry_after
        until = now + (after if after else LIMIT_BACKOFF)
        reason = str(result.limit)[:300]
        hold_limit(self.kind, account, until, reason)
        return RoundResult(
            status="deferred",
            deferred_until=until,
            error=reason,
            tokens=result.tokens.total,
            transcript=tuple(result.transcript.to_builtins()),
        )

    async def _run(self, request: RoundRequest, context: RoundContext | None) -> AgentResult:
        await list_workspace(self.workspace)
        queue = MessageQueue()
        async with (
            ChatClient(self.settings) as model,
            open_mcp_tools(self.mcp_servers) as mcp_tools,
            trio.open_nursery() as nursery,
        ):
            spec = self.subagent_spec() if context is not None else None
            starter = _ChildLoopSubAgent(context, spec) if context and spec else None
            node_paths = [Path(d) for d in context.node_paths] if context is not None else []
            tools = ToolSet(
                [
                    *core_tools(bash=self.bash, node_paths=node_paths),
                    subagent_tool(model, starter=starter, bash=self.bash, node_paths=node_paths),
                    *mcp_tools,
                ]
            )
            loops = None
            applier = None
            if context is not None:
                loops = RoundLoops(context, nursery=nursery, queue=queue, spec=request.worker)
                # The runtime's ContextBuilder applies compaction plans (the agent applies
                # one itself when that fails).
                applier = context.apply_compaction
                # Deferred: reached through search_tools/execute_tool, the offered list stays small.
                for tool in loop_tools(loops):
                    tools.add(attrs.evolve(tool, deferred=True))
            result = await run_agent(
                request.prompt,
                model=model,
                tools=tools,
                workspace=self.workspace,
                config=self.config,
                queue=queue,
                background=loops.pending if loops is not None else None,
                env=request.env,
                applier=applier,
                hooks=[_LiveSteps(context)] if context is not None else [],
            )
            nursery.cancel_scope.cancel()
        return result


KIND = WorkerKind(
    name="agent",
    build=lambda options, kill_grace: AgentWorker.from_spec(options),
    workspace="spec",
    pin_workspace=in_workspace,
    served_by_default=True,
    reports_cost=False,  # its rounds' cost_usd is always 0
)
