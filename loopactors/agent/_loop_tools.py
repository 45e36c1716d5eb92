"""Tools that let an agent start and steer child loops, and run a sub-agent.

Loop tools (``loop_start``, ``loop_status``, ``loop_list``, ``loop_history``, ``loop_output``,
``loop_cancel``) work through a ``loops.LoopControl``, the one loop vocabulary, which the
agent worker builds from the round's context over its own loop's children: a child loop lives
in its parent loop's scope (stopping the parent stops it) and counts against the runtime's tree
cap. An agent sees and steers only its own loop's children.

The sub-agent tool (``agent``) runs a child agent with a fresh transcript and a budget of
``SUBAGENT_MAX_ITERATIONS`` model calls, in the same workspace; the call waits for its answer
and its tokens are added to the parent's. Given a ``starter`` (the agent worker gives one
inside the runtime) the child is a one-round child loop dispatched like any round, in the
parent loop's scope; without one it is a :func:`run_agent` inside the tool call, in the
parent's cancel scope, with the core tools. Either way cancelling the parent cancels it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from ..errors import LoopactorsError
from ..loops import LoopControl, LoopState
from ._core_tools import core_tools
from ._llm import ChatModel
from ._loop import SUBAGENT_MAX_ITERATIONS, AgentConfig, AgentResult, run_agent
from ._sandbox import BashMode
from ._tools import Tool, ToolContext, ToolError, ToolFunction, ToolSet

__all__ = ["ChildLoops", "SubAgentRun", "SubAgentStarter", "loop_tools", "subagent_tool"]

_HEAD = 200


#: Deprecated name (kept for one release) of what the loop tools take: ``loops.LoopControl``
#: over the round's own loop's children (``get`` raises for any other loop).
ChildLoops = LoopControl


@attrs.frozen(kw_only=True)
class SubAgentRun:
    """How a sub-agent run by a :data:`SubAgentStarter` ended."""

    completed: bool
    output: str
    error: str | None = None
    #: Everything its model calls cost (one total: a round reports no split).
    tokens: int = 0


#: Runs a sub-agent on a task and waits for it (the agent worker's: a child loop).
SubAgentStarter = Callable[[str], Awaitable[SubAgentRun]]


def _describe(state: LoopState) -> str:
    spec = state.spec
    return (
        f"{state.loop_id}: {state.phase}, round {state.completed_rounds}/{spec.rounds} "
        f"completed, {state.tokens_used} tokens, worker {spec.worker}, task {spec.task[:_HEAD]!r}"
    )


def _head(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= _HEAD else flat[:_HEAD] + " ..."


@attrs.frozen
class _LoopTools:
    control: LoopControl

    async def start(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        task = str(arguments.get("task", "")).strip()
        if not task:
            raise ToolError("loop_start needs a task")
        rounds = arguments.get("rounds", 3)
        mode = arguments.get("mode", "inherit")
        if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 1:
            raise ToolError(f"rounds must be an integer >= 1, got {rounds!r}")
        if mode not in ("inherit", "fresh"):
            raise ToolError(f"mode must be inherit or fresh, got {mode!r}")
        worker = arguments.get("worker")
        text = f"|loop:{rounds},{mode}| {task}"
        try:
            state = await self.control.start(text, worker=str(worker) if worker else None)
        except LoopactorsError as exc:
            raise ToolError(f"loop not started: {exc}") from None
        return "started " + _describe(state)

    async def status(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        return _describe(await self._child(arguments))

    async def list(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        children = await self.control.list()
        return "\n".join(_describe(s) for s in children) if children else "no child loops"

    async def history(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        state = await self._child(arguments)
        rounds = await self.control.history(state.loop_id)
        lines = [
            f"round {r.round}: {r.status}, {r.tokens} tokens: {_head(r.output or r.error or '')}"
            for r in rounds
        ]
        return "\n".join(lines) if lines else f"{state.loop_id} has no rounds yet"

    async def output(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        state = await self._child(arguments)
        rounds = await self.control.history(state.loop_id)
        wanted = arguments.get("round")
        chosen = [r for r in rounds if r.round == wanted] if wanted else rounds[-1:]
        if not chosen:
            raise ToolError(f"{state.loop_id} has no round {wanted or ''}".rstrip())
        record = chosen[0]
        return record.output or f"(round {record.round} {record.status}: {record.error or ''})"

    async def cancel(self, arguments: Mapping[str, Any], context: ToolContext) -> str:
        state = await self._child(arguments)
        try:
            stopped = await self.control.stop(state.loop_id)
        except LoopactorsError as exc:
            raise ToolError(f"cannot stop {state.loop_id}: {exc}") from None
        return "stopped " + _describe(stopped)

    async def _child(self, arguments: Mapping[str, Any]) -> LoopState:
        loop_id = str(arguments.get("loop_id", ""))
        try:
            return await self.control.get(loop_id)
        except LoopactorsError as exc:
            raise ToolError(str(exc)) from None


def _params(required: list[str], **properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required}


_ID = {"type": "string", "description": "a child loop's id"}


def loop_tools(control: LoopControl) -> list[Tool]:
    """The six loop tools, bound to one round's view of its loop's children."""
    tools = _LoopTools(control)
    return [
        Tool(
            name="loop_start",
            description=(
                "Start a child loop: a task run for several rounds by a worker, in the "
                "background. Returns its id; it is stopped when this loop stops."
            ),
            parameters=_params(
                ["task"],
                task={"type": "string"},
                rounds={"type": "integer", "description": "1-50, default 3"},
                mode={"type": "string", "enum": ["inherit", "fresh"]},
                worker={
                    "type": "string",
                    "description": (
                        "leave out: the child runs this loop's own worker; otherwise one of "
                        "the worker specs the operator allows (child_workers)"
                    ),
                },
            ),
            run=tools.start,
        ),
        _child_tool("loop_status", tools.status, "Phase and progress of a child loop."),
        Tool(
            name="loop_list",
            description="The child loops this loop started.",
            parameters=_params([]),
            run=tools.list,
        ),
        _child_tool(
            "loop_history",
            tools.history,
            "The rounds of a child loop, with the head of each output.",
        ),
        _child_tool(
            "loop_output",
            tools.output,
            "The full output of one round of a child loop (default: its last).",
            round={"type": "integer"},
        ),
        _child_tool(
            "loop_cancel", tools.cancel, "Stop a child loop now (its running round is cancelled)."
        ),
    ]


def _child_tool(
    name: str, run: ToolFunction, description: str, **properties: dict[str, Any]
) -> Tool:
    """A tool about one child loop: it takes the child's ``loop_id`` (and ``properties``)."""
    return Tool(
        name=name,
        description=description,
        parameters=_params(["loop_id"], loop_id=_ID, **properties),
        run=run,
    )


def _add_tokens(context: ToolContext, result: AgentResult | SubAgentRun) -> None:
    if context.tokens is None:
        return
    if isinstance(result, SubAgentRun):
        context.tokens.delegated_tokens += result.tokens
        return
    context.tokens.prompt_tokens += result.tokens.prompt_tokens
    context.tokens.completion_tokens += result.tokens.completion_tokens
    context.tokens.calls += result.tokens.calls
    context.tokens.calls_without_usage += result.tokens.calls_without_usage
    context.tokens.delegated_tokens += result.tokens.delegated_tokens


def subagent_tool(
    model: ChatModel,
    config: AgentConfig | None = None,
    *,
    starter: SubAgentStarter | None = None,
    bash: BashMode = "on",
    node_paths: Sequence[Path] = (),
) -> Tool:
    """The ``agent`` tool: a child agent for a self-contained sub-task (see module docstring).

    ``starter`` runs the child elsewhere (a child loop); without it the child runs inline with
    ``model`` and ``config``, which defaults to the parent's defaults with
    ``SUBAGENT_MAX_ITERATIONS``, and core tools whose ``bash`` is the given mode and which
    keep out of ``node_paths`` (the node's state directory and token file).
    """
    child_config = config or AgentConfig(max_iterations=SUBAGENT_MAX_ITERATIONS)

    async def run(arguments: Mapping[str, Any], context: ToolContext) -> str:
        task = str(arguments.get("task", "")).strip()
        if not task:
            raise ToolError("the agent tool needs a task")
        result: AgentResult | SubAgentRun
        if starter is not None:
            try:
                result = await starter(task)
            except LoopactorsError as exc:
                raise ToolError(f"the sub-agent was not started: {exc}") from None
            completed = result.completed
        else:
            result = await run_agent(
                task,
                model=model,
                tools=ToolSet(core_tools(bash=bash, node_paths=node_paths)),
                workspace=context.workspace,
                config=child_config,
            )
            completed = result.status != "failed"
        _add_tokens(context, result)
        if not completed:
            raise ToolError(
                f"the sub-agent failed: {result.error}; its last answer: {result.output}"
            )
        return result.output or "(the sub-agent finished without an answer)"

    return Tool(
        name="agent",
        description=(
            "Hand a self-contained sub-task to a sub-agent with the same tools and workspace "
            "but a fresh context; it returns its final answer. Say everything it needs in task."
        ),
        parameters=_params(["task"], task={"type": "string"}),
        run=run,
        timeout=None,  # bounded by its own iteration budget, and by this run's cancel scope
    )
