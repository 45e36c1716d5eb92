"""MCP servers over stdio as deferred tools, with a real MCP server child process."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from loopactors.agent import (
    ChatClient,
    McpServer,
    ModelSettings,
    ToolContext,
    ToolError,
    ToolSet,
    core_tools,
    load_mcp_config,
    open_mcp_tools,
    run_agent,
)
from loopactors.errors import AgentError, WorkerSpecError
from loopactors.workers import AgentWorker, parse_worker

from .chat_server import ChatServer, completion

SERVER = McpServer(
    name="calc", command=sys.executable, args=[str(Path(__file__).parent / "mcp_server.py")]
)


async def test_mcp_tools_are_deferred_and_run_on_the_server(tmp_path: Path) -> None:
    async with open_mcp_tools([SERVER]) as tools:
        assert [t.name for t in tools] == ["calc__add", "calc__divide"]
        assert all(t.deferred for t in tools)
        assert tools[0].description == "[MCP calc] Add two integers."
        assert tools[0].parameters["required"] == ["a", "b"]
        context = ToolContext(workspace=tmp_path, tools=ToolSet(tools))
        assert await tools[0].run({"a": 2, "b": 3}, context) == "5"
        with pytest.raises(ToolError, match="Error executing tool divide"):
            await tools[1].run({"a": 1, "b": 0}, context)

        replies = [
            completion(calls=[("s", "search_tools", {"query": "add integers"})]),
            completion(
                calls=[("e", "execute_tool", {"name": "calc__add", "arguments": {"a": 40, "b": 2}})]
            ),
            completion("40 + 2 = 42"),
        ]
        with ChatServer(replies) as server:
            settings = ModelSettings(base_url=server.base_url, model="m")
            async with ChatClient(settings) as model:
                result = await run_agent(
                    "add", model=model, tools=ToolSet([*core_tools(), *tools]), workspace=tmp_path
                )
    assert result.output == "40 + 2 = 42"
    results = [e.message.content for e in result.transcript.entries if e.message.role == "tool"]
    assert json.loads(results[0].splitlines()[0])["name"] == "calc__add"
    assert results[1] == "42"
    offered = {t["function"]["name"] for t in server.requests[0]["tools"]}
    assert "calc__add" not in offered
    assert "execute_tool" in offered


async def test_a_server_that_cannot_start_is_reported(tmp_path: Path) -> None:
    broken = McpServer(name="broken", command=sys.executable, args=["-c", "raise SystemExit(3)"])
    with pytest.raises(AgentError, match="MCP server 'broken'"):
        async with open_mcp_tools([broken]):
            pass


def test_config_file_and_worker_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "mcp.json"
    config.write_text(
        json.dumps({"mcpServers": {"calc": {"command": SERVER.command, "args": list(SERVER.args)}}})
    )
    assert load_mcp_config(config) == [SERVER]
    worker = parse_worker(f"agent:model=m,base_url=http://localhost:1/v1,mcp={config}")
    assert isinstance(worker, AgentWorker)
    assert worker.mcp_servers == (SERVER,)
    (tmp_path / "bad.json").write_text('{"mcpServers": {"x": {"args": []}}}')
    with pytest.raises(WorkerSpecError, match=r"MCP server 'x' in .* needs a 'command'"):
        parse_worker(f"agent:model=m,base_url=http://localhost:1/v1,mcp={tmp_path / 'bad.json'}")
    with pytest.raises(WorkerSpecError, match="cannot read MCP config"):
        parse_worker(f"agent:model=m,base_url=http://localhost:1/v1,mcp={tmp_path / 'none.json'}")
