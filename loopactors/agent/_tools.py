"""Tools: what a tool is, the set an agent is offered, and the two meta tools.

A tool has a name, a description, a JSON-schema for its arguments and an async function
``(arguments, context) -> text``. Raising :class:`ToolError` makes an error result the model
sees (and micro compaction keeps whole). *Direct* tools are offered to the model on every call;
*deferred* ones are not, and are reached through two direct meta tools, ``search_tools`` and
``execute_tool``, so the offered list stays small however many tools are registered.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs

from ..errors import AgentError
from ._usage import TokenTotals

__all__ = ["Tool", "ToolContext", "ToolError", "ToolSet", "inside_workspace"]

SEARCH_TOOLS = "search_tools"
EXECUTE_TOOL = "execute_tool"
_SEARCH_LIMIT = 8


class ToolError(AgentError):
    """A tool failed in a way the model should read and react to (an error result)."""


@attrs.frozen
class ToolContext:
    """What a tool may use: the workspace it is confined to, the set it belongs to, and the
    run's token totals (a tool that calls a model, like the sub-agent, adds to them)."""

    workspace: Path
    tools: ToolSet
    tokens: TokenTotals | None = None
    #: Set for the commands a tool runs, over the process's own (e.g. a code round's
    #: ``LOOPACTORS_WORKTREE``, ``LOOPACTORS_BRANCH``, ``LOOPACTORS_LEDGER``).
    env: Mapping[str, str] = attrs.field(factory=dict)


ToolFunction = Callable[[Mapping[str, Any], ToolContext], Awaitable[str]]


@attrs.frozen(kw_only=True)
class Tool:
    name: str
    description: str
    #: JSON schema of the arguments object.
    parameters: Mapping[str, Any]
    run: ToolFunction
    deferred: bool = False
    #: Seconds before the call is cancelled and answered with a timeout error; None: no limit.
    timeout: float | None = 120.0

    def __attrs_post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", self.name):
            raise AgentError(
                f"tool name {self.name!r} must be 1-64 letters, digits, '_' or '-' "
                "(what chat-completions providers accept)"
            )

    def schema(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry for this tool."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }


def inside_workspace(workspace: Path, path: str) -> Path:
    """``path`` (relative to the workspace, or absolute) resolved, refused when outside.

    Raises:
        ToolError: the path resolves (symlinks followed) outside the workspace, holds a NUL, or
            cannot be resolved (never a raw ``OSError``).
    """
    if "\0" in path:
        raise ToolError(f"path {path!r} holds a NUL character; give a file name")
    root = workspace.resolve()
    try:
        target = (root / path).resolve()
    except (OSError, RuntimeError) as exc:  # a symlink loop, or a path changing meanwhile
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ToolError(f"cannot resolve path {path!r}: {reason}; try again") from None
    if target != root and not target.is_relative_to(root):
        raise ToolError(f"path {path!r} is outside the workspace {root}; use a path inside it")
    return target


async def _search(arguments: Mapping[str, Any], context: ToolContext) -> str:
    query = str(arguments.get("query", ""))
    found = context.tools.search(query)
    if not found:
        return f"no deferred tool matches {query!r}"
    return "\n".join(json.dumps(tool.schema()["function"]) for tool in found)


async def _execute(arguments: Mapping[str, Any], context: ToolContext) -> str:
    name = str(arguments.get("name", ""))
    tool = context.tools.get(name)
    if tool is None or not tool.deferred:
        raise ToolError(f"no deferred tool named {name!r}; find one with {SEARCH_TOOLS}")
    inner = arguments.get("arguments", {})
    if isinstance(inner, str):
        try:
            inner = json.loads(inner or "{}")
        except ValueError as exc:
            raise ToolError(f"arguments for {name!r} are not JSON: {exc}") from None
    if not isinstance(inner, Mapping):
        raise ToolError(f"arguments for {name!r} must be a JSON object")
    return await tool.run(inner, context)


_META = (
    Tool(
        name=SEARCH_TOOLS,
        description=(
            "Search the extra tools that are not listed directly. Words match names and "
            "descriptions; 'select:a,b' fetches tools by exact name. Returns their schemas."
        ),
        parameters={
            "type": "object",
            "properties": {"query": {"type": "string"}},
            "required": ["query"],
        },
        run=_search,
    ),
    Tool(
        name=EXECUTE_TOOL,
        description=f"Run an extra tool found with {SEARCH_TOOLS}, by name, with its arguments.",
        parameters={
            "type": "object",
            "properties": {"name": {"type": "string"}, "arguments": {"type": "object"}},
            "required": ["name", "arguments"],
        },
        run=_execute,
    ),
)


class ToolSet:
    """The tools of one agent, by name (names are unique, compared case-insensitively)."""

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.add(tool)

    def add(self, tool: Tool) -> None:
        """Register a tool (user tools from Python come in here).

        Raises:
            AgentError: the name is taken (case-insensitively) or is a meta tool's.
        """
        key = tool.name.casefold()
        if key in self._tools or key in (SEARCH_TOOLS, EXECUTE_TOOL):
            raise AgentError(f"a tool named {tool.name!r} is already registered")
        self._tools[key] = tool

    def get(self, name: str) -> Tool | None:
        """Exact name first, then case-insensitive; the meta tools when deferred ones exist."""
        tool = self._tools.get(name.casefold())
        if tool is not None:
            return tool
        if self.has_deferred():
            return next((t for t in _META if t.name == name.casefold()), None)
        return None

    def has_deferred(self) -> bool:
        return any(tool.deferred for tool in self._tools.values())

    def offered(self) -> list[Tool]:
        """What the model is shown: direct tools, plus the meta tools if any are deferred."""
        direct = [tool for tool in self._tools.values() if not tool.deferred]
        return direct + list(_META) if self.has_deferred() else direct

    def schemas(self) -> list[dict[str, Any]]:
        return [tool.schema() for tool in self.offered()]

    def search(self, query: str) -> list[Tool]:
        """Deferred tools ranked by how many query words their name or description holds."""
        deferred = [tool for tool in self._tools.values() if tool.deferred]
        if query.startswith("select:"):
            names = {name.strip().casefold() for name in query[7:].split(",")}
            return [tool for tool in deferred if tool.name.casefold() in names]
        words = [word.casefold() for word in re.findall(r"\w+", query)]
        scored = []
        for tool in deferred:
            text = f"{tool.name} {tool.description}".casefold()
            score = sum(text.count(word) for word in words) + sum(
                3 for word in words if word in tool.name.casefold()
            )
            if score:
                scored.append((score, tool.name, tool))
        scored.sort(key=lambda item: (-item[0], item[1]))
        return [tool for _, _, tool in scored[:_SEARCH_LIMIT]]
