"""The core tools on a real workspace, and the tool set's meta tools."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

from loopactors.agent import Tool, ToolContext, ToolError, ToolSet, core_tools
from loopactors.errors import AgentError
from tests.hang import HANG
from tests.processes import alive


def context(workspace: Path, extra: list[Tool] = ()) -> ToolContext:  # type: ignore[assignment]
    return ToolContext(workspace=workspace, tools=ToolSet([*core_tools(), *extra]))


async def call(ctx: ToolContext, tool_name: str, **arguments: Any) -> str:
    tool = ctx.tools.get(tool_name)
    assert tool is not None
    return await tool.run(arguments, ctx)


async def wait_dead(pid: int) -> None:
    with trio.fail_after(HANG):  # SIGKILL is delivered asynchronously
        while alive(pid):
            await trio.sleep(0.01)


async def test_read_write_edit(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    assert await call(ctx, "write", path="pkg/a.txt", content="one\ntwo\nthree\n") == (
        "wrote 14 chars to pkg/a.txt"
    )
    assert await call(ctx, "read", path="pkg/a.txt") == "     1\tone\n     2\ttwo\n     3\tthree"
    assert await call(ctx, "read", path="pkg/a.txt", offset=2, limit=1) == (
        "     2\ttwo\n[1 more lines; read on with offset]"
    )
    await call(ctx, "edit", path="pkg/a.txt", old_string="two", new_string="2")
    assert (tmp_path / "pkg/a.txt").read_text() == "one\n2\nthree\n"
    with pytest.raises(ToolError, match="not found"):
        await call(ctx, "edit", path="pkg/a.txt", old_string="two", new_string="x")
    (tmp_path / "b.txt").write_text("x x x")
    with pytest.raises(ToolError, match="occurs 3 times"):
        await call(ctx, "edit", path="b.txt", old_string="x", new_string="y")
    await call(ctx, "edit", path="b.txt", old_string="x", new_string="y", replace_all=True)
    assert (tmp_path / "b.txt").read_text() == "y y y"
    with pytest.raises(ToolError, match="cannot read 'missing'"):
        await call(ctx, "read", path="missing")
    with pytest.raises(ToolError, match="'path' is required"):
        await call(ctx, "read")


async def test_paths_outside_the_workspace_are_refused(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (tmp_path / "secret").write_text("no")
    (workspace / "link").symlink_to(tmp_path / "secret")
    ctx = context(workspace)
    for path in ("../secret", str(tmp_path / "secret"), "link"):
        with pytest.raises(ToolError, match="outside the workspace"):
            await call(ctx, "read", path=path)
    with pytest.raises(ToolError, match="outside the workspace"):
        await call(ctx, "write", path="../escape", content="x")
    assert not (tmp_path / "escape").exists()
    with pytest.raises(ToolError, match="inside the workspace"):
        await call(ctx, "glob", pattern="../*")


async def test_glob_and_grep(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src/a.py").write_text("def alpha():\n    return 1\n")
    (tmp_path / "src/b.py").write_text("def beta():\n    return alpha()\n")
    (tmp_path / "notes.md").write_text("alpha notes\n")
    ctx = context(tmp_path)
    assert await call(ctx, "glob", pattern="**/*.py") == "src/a.py\nsrc/b.py"
    assert await call(ctx, "glob", pattern="*.rs") == "no file matches '*.rs'"
    assert await call(ctx, "grep", pattern=r"alpha\(") == (
        "src/a.py:1:def alpha():\nsrc/b.py:2:    return alpha()"
    )
    assert await call(ctx, "grep", pattern="alpha", glob="*.md") == "notes.md:1:alpha notes"
    assert await call(ctx, "grep", pattern="alpha", path="src/a.py") == "src/a.py:1:def alpha():"
    with pytest.raises(ToolError, match="not a valid regular expression"):
        await call(ctx, "grep", pattern="(")


async def test_bash_runs_in_the_workspace_and_reports_failures(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    where = await trio.Path(tmp_path).resolve()
    assert await call(ctx, "bash", command="pwd; echo err >&2") == f"{where}\nerr\n"
    assert await call(ctx, "bash", command="true") == "(no output)"
    with pytest.raises(ToolError, match="exit code 3\nbroken"):
        await call(ctx, "bash", command="echo broken; exit 3")


async def test_bash_gets_the_round_environment(tmp_path: Path) -> None:
    """A code round's LOOPACTORS_* variables reach the commands an agent runs."""
    ctx = attrs.evolve(context(tmp_path), env={"LOOPACTORS_BRANCH": "loop/x/r001"})
    assert await call(ctx, "bash", command="echo $LOOPACTORS_BRANCH; echo $HOME") == (
        f"loop/x/r001\n{os.environ['HOME']}\n"
    )


async def test_bash_timeout_kills_the_whole_process_group(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    script = "sleep 30 & echo $! > child.pid; sleep 30"
    with pytest.raises(ToolError, match=r"timed out after 0\.5s"):
        await call(ctx, "bash", command=script, timeout=0.5)
    await wait_dead(int((tmp_path / "child.pid").read_text()))


async def test_bash_cancelled_kills_the_process_group(tmp_path: Path) -> None:
    ctx = context(tmp_path)
    pid_file = tmp_path / "child.pid"
    async with trio.open_nursery() as nursery:
        bash = functools.partial(
            call, ctx, "bash", command="sleep 3600 & echo $! > child.pid; wait"
        )
        nursery.start_soon(bash)
        with trio.fail_after(HANG):  # cancelled once the child is there, not after a guess
            while not pid_file.exists() or not pid_file.read_text().strip():
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    await wait_dead(int(pid_file.read_text()))


async def shout(arguments: Mapping[str, Any], ctx: ToolContext) -> str:
    return str(arguments["text"]).upper()


SHOUT = Tool(
    name="shout",
    description="Upper-case some text.",
    parameters={"type": "object", "properties": {"text": {"type": "string"}}},
    run=shout,
    deferred=True,
)


async def test_deferred_tools_are_reached_through_the_meta_tools(tmp_path: Path) -> None:
    ctx = context(tmp_path, [SHOUT])
    offered = [tool.name for tool in ctx.tools.offered()]
    assert "shout" not in offered
    assert offered[-2:] == ["search_tools", "execute_tool"]
    found = await call(ctx, "search_tools", query="upper case text")
    assert json.loads(found)["name"] == "shout"
    assert json.loads(await call(ctx, "search_tools", query="select:shout"))["name"] == "shout"
    assert (
        await call(ctx, "search_tools", query="database") == "no deferred tool matches 'database'"
    )
    assert await call(ctx, "execute_tool", name="shout", arguments={"text": "hi"}) == "HI"
    assert await call(ctx, "execute_tool", name="shout", arguments='{"text": "yo"}') == "YO"
    with pytest.raises(ToolError, match="no deferred tool named 'read'"):
        await call(ctx, "execute_tool", name="read", arguments={})
    assert "search_tools" not in [t.name for t in ToolSet(core_tools()).offered()]


def test_tool_names_are_checked_and_unique() -> None:
    with pytest.raises(AgentError, match="must be 1-64 letters"):
        Tool(name="bad name", description="", parameters={}, run=shout)
    tools = ToolSet(core_tools())
    with pytest.raises(AgentError, match="already registered"):
        tools.add(Tool(name="READ", description="", parameters={}, run=shout))
    assert tools.get("Read") is tools.get("read")
