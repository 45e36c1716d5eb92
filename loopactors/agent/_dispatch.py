"""The Act stage's tool round: resolve, approve, run concurrently, settle, commit in call order.

Whatever happens (a denied call, a failing tool, a timeout, cancellation of the whole run) the
assistant message and exactly one result per call are committed together, in call order, before
any error or cancellation leaves this module: the transcript never holds an orphan tool call.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import trio

from ._core_tools import cap_output
from ._hooks import AgentHooks, HookError, ToolDecision
from ._tools import Tool, ToolContext, ToolError, ToolSet
from ._transcript import Message, ToolCall, Transcript

__all__ = ["ToolRound", "run_tool_round"]

INTERRUPTED = "not run to the end: the run was cancelled or a hook refused the round"


@attrs.define
class ToolRound:
    """What a committed round tells the loop."""

    results: list[Message]
    #: Per tool name, whether its calls failed (in call order), for failure streaks.
    outcomes: list[tuple[str, bool]]


def _error(call: ToolCall, text: str) -> Message:
    return Message(role="tool", tool_call_id=call.id, name=call.name, content=text, is_error=True)


async def _run_one(tool: Tool, arguments: Mapping[str, Any], context: ToolContext) -> str:
    if tool.timeout is None:
        return await tool.run(arguments, context)
    with trio.move_on_after(tool.timeout):
        return await tool.run(arguments, context)
    raise ToolError(f"tool {tool.name!r} timed out after {tool.timeout:g}s")


async def run_tool_round(
    assistant: Message,
    *,
    tools: ToolSet,
    context: ToolContext,
    transcript: Transcript,
    hooks: Sequence[AgentHooks],
    output_limit: int,
    on_event: Callable[[str, str], None],
) -> ToolRound:
    calls = assistant.tool_calls
    results, ready = _resolve(calls, tools)

    async def run(index: int, tool: Tool, arguments: Mapping[str, Any]) -> None:
        call = calls[index]
        on_event("tool_started", call.name)
        try:
            text = await _run_one(tool, arguments, context)
            result = Message(
                role="tool",
                tool_call_id=call.id,
                name=call.name,
                content=cap_output(text, output_limit),
            )
        except ToolError as exc:
            result = _error(call, cap_output(str(exc), output_limit))
        except Exception as exc:  # a tool's bug is the model's error result, not the run's end
            result = _error(call, f"tool {call.name!r} failed: {type(exc).__name__}: {exc}")
        results[index] = result
        on_event("tool_ended", f"{call.name}: {'error' if result.is_error else 'ok'}")

    deferred: HookError | None = None
    try:
        decisions = await _approve(hooks, [calls[i] for i, _, _ in ready])
        for (index, _, _), decision in zip(ready, decisions, strict=True):
            if not decision.allowed:
                results[index] = _error(calls[index], f"denied: {decision.reason or 'by a hook'}")
        approved = [item for item, d in zip(ready, decisions, strict=True) if d.allowed]
        await trio.lowlevel.checkpoint()
        async with trio.open_nursery() as nursery:
            for index, tool, arguments in approved:
                nursery.start_soon(run, index, tool, arguments)
        settled = [result for result in results if result is not None]
        for call, result in zip(calls, settled, strict=True):
            for hook in hooks:
                try:
                    await hook.after_tool(call, result)
                except Exception as exc:
                    deferred = deferred or HookError("after_tool", exc)
    finally:
        # Cancelled, or a hook failed closed: every call still gets a result, then commit.
        final = [
            r if r is not None else _error(calls[i], INTERRUPTED) for i, r in enumerate(results)
        ]
        transcript.commit_tool_round(assistant, final)
    for hook in hooks:
        try:
            await hook.after_tools_batch(calls, final)
        except Exception as exc:
            raise HookError("after_tools_batch", exc) from exc
    if deferred is not None:
        raise deferred
    return ToolRound(results=final, outcomes=[(r.name or "", r.is_error) for r in final])


async def _approve(hooks: Sequence[AgentHooks], calls: list[ToolCall]) -> list[ToolDecision]:
    decisions = [ToolDecision(True)] * len(calls)
    if not calls:
        return decisions
    for hook in hooks:
        try:
            answer = await hook.before_tools_batch(calls)
        except Exception as exc:
            raise HookError("before_tools_batch", exc) from exc
        if answer is None:
            continue
        if len(answer) != len(calls):
            raise HookError(
                "before_tools_batch",
                ValueError(f"returned {len(answer)} decisions for {len(calls)} calls"),
            )
        # A call stays allowed only if every hook allows it; the first denial's reason wins.
        decisions = [d if not d.allowed else a for d, a in zip(decisions, answer, strict=True)]
    return decisions


def _resolve(
    calls: Sequence[ToolCall], tools: ToolSet
) -> tuple[list[Message | None], list[tuple[int, Tool, Mapping[str, Any]]]]:
    """Error results for calls that cannot run (bad id, unknown tool, bad arguments), and
    the runnable ones with their tool and parsed arguments."""
    results: list[Message | None] = [None] * len(calls)
    ready: list[tuple[int, Tool, Mapping[str, Any]]] = []
    seen: set[str] = set()
    for index, call in enumerate(calls):
        tool = tools.get(call.name)
        if not call.id or call.id in seen:
            results[index] = _error(call, f"tool call id {call.id!r} is empty or repeated")
        elif tool is None:
            names = ", ".join(t.name for t in tools.offered())
            results[index] = _error(call, f"Tool {call.name!r} not found; available: {names}")
        else:
            try:
                arguments = json.loads(call.arguments or "{}")
            except ValueError as exc:
                arguments = None
                results[index] = _error(call, f"arguments are not valid JSON: {exc}")
            if arguments is not None and not isinstance(arguments, dict):
                results[index] = _error(call, "arguments must be a JSON object")
            elif arguments is not None:
                ready.append((index, tool, arguments))
        seen.add(call.id)
    return results, ready
