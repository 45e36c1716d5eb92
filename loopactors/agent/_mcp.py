"""MCP servers over stdio as deferred tools (the official ``mcp`` package, optional extra).

The ``mcp`` SDK builds on anyio and runs under trio as it is. :func:`open_mcp_tools` starts
each configured server as a child process, lists its tools, and yields them as *deferred*
tools named ``SERVER__TOOL`` (reached through ``search_tools`` / ``execute_tool``, so a server
with many tools does not crowd the offered list). Leaving the block stops the servers.

Configuration is the common ``mcpServers`` JSON shape::

    {"mcpServers": {"files": {"command": "python", "args": ["server.py"], "env": {"K": "V"}}}}
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from ..errors import AgentError
from ._tools import Tool, ToolContext, ToolError

__all__ = ["McpServer", "load_mcp_config", "open_mcp_tools"]

_NAME = re.compile(r"[^A-Za-z0-9_-]")


def _strings(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(items)


@attrs.frozen(kw_only=True)
class McpServer:
    name: str
    command: str
    args: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    env: Mapping[str, str] | None = None
    cwd: str | None = None


def load_mcp_config(path: str | os.PathLike[str]) -> list[McpServer]:
    """Servers from an ``{"mcpServers": {NAME: {command, args, env, cwd}}}`` JSON file.

    Raises:
        AgentError: unreadable file, not that shape, or a server without a command.
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise AgentError(f"cannot read MCP config {str(path)!r}: {exc}") from None
    servers = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise AgentError(f"MCP config {str(path)!r} needs an object under 'mcpServers'")
    found = []
    for name, entry in servers.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("command"), str):
            raise AgentError(f"MCP server {name!r} in {str(path)!r} needs a 'command' string")
        args = entry.get("args", [])
        if not (isinstance(args, list) and all(isinstance(a, str) for a in args)):
            raise AgentError(f"MCP server {name!r}: 'args' must be a list of strings")
        found.append(
            McpServer(
                name=name,
                command=entry["command"],
                args=args,
                env=entry.get("env"),
                cwd=entry.get("cwd"),
            )
        )
    return found


def _text(result: Any) -> str:
    parts = []
    for block in getattr(result, "content", None) or []:
        text = getattr(block, "text", None)
        parts.append(text if isinstance(text, str) else f"[{getattr(block, 'type', 'content')}]")
    return "\n".join(parts)


def _tool(server: str, session: Any, described: Any) -> Tool:
    remote = str(described.name)

    async def run(arguments: Mapping[str, Any], context: ToolContext) -> str:
        result = await session.call_tool(remote, dict(arguments))
        if not hasattr(result, "content"):
            raise ToolError(f"MCP tool {remote!r} asked for input, which is not supported here")
        text = _text(result)
        if getattr(result, "is_error", False):
            raise ToolError(text or f"MCP tool {remote!r} failed")
        return text

    return Tool(
        name=_NAME.sub("_", f"{server}__{remote}")[:64],
        description=f"[MCP {server}] {described.description or remote}",
        parameters=dict(described.input_schema or {"type": "object"}),
        run=run,
        deferred=True,
    )


@contextlib.asynccontextmanager
async def open_mcp_tools(servers: Sequence[McpServer]) -> AsyncIterator[list[Tool]]:
    """Start the servers and yield their tools (deferred); the servers stop on exit.

    Raises:
        AgentError: the ``mcp`` package is not installed (``pip install 'loopactors[mcp]'``),
            or a server could not be started or initialised.
    """
    if not servers:
        yield []
        return
    try:
        from mcp import ClientSession, StdioServerParameters  # noqa: PLC0415 (optional extra)
        from mcp.client.stdio import stdio_client  # noqa: PLC0415
    except ImportError:
        raise AgentError(
            "MCP servers need the mcp package: pip install 'loopactors[mcp]'"
        ) from None
    tools: list[Tool] = []
    failure: AgentError | None = None
    async with contextlib.AsyncExitStack() as stack:
        # The servers' stderr (tracebacks of failing tools) would clutter the runtime's own.
        devnull = open(os.devnull, "w")  # noqa: SIM115, ASYNC230 (closed by the stack; never blocks)
        errlog = stack.enter_context(devnull)
        for server in servers:
            params = StdioServerParameters(
                command=server.command,
                args=list(server.args),
                env=dict(server.env) if server.env is not None else None,
                cwd=server.cwd,
            )
            try:
                read, write = await stack.enter_async_context(stdio_client(params, errlog=errlog))
                session = await stack.enter_async_context(ClientSession(read, write))
                await session.initialize()
                listed = await session.list_tools()
            except Exception as exc:
                # Raised after the stack is closed: inside it, the SDK's task groups would
                # wrap the error in an exception group.
                failure = AgentError(
                    f"MCP server {server.name!r} ({server.command}) could not start: "
                    f"{type(exc).__name__}: {exc}"
                )
                break
            tools.extend(_tool(server.name, session, described) for described in listed.tools)
        if failure is None:
            yield tools
    if failure is not None:
        raise failure
