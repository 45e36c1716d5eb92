"""Glob patterns never run a backtracking engine (issue: ``*a`` x 24 + ``*b`` froze a node).

``glob``'s ``pattern`` and ``grep``'s ``glob`` were translated to Python ``re`` regexes, which
backtrack while holding the GIL: over a file named ``a`` x 40 the worst pattern runs for
longer than anyone waits, and the whole node stopped answering. They are now matched by RE2
(linear in the name, whatever the pattern), and a pattern over the length or wildcard bound
is a tool error naming the bound. docs/security.md, agent tools promise 3.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from loopactors.agent import ToolContext, ToolError, ToolSet, core_tools
from loopactors.agent._workspace import GLOB_MAX_CHARS, GLOB_MAX_WILDCARDS, compile_glob
from loopactors.runtime import RuntimeConfig, open_runtime

from ..agent.chat_server import ChatServer, completion

WORST = "*a" * 24 + "*b"
VICTIM = "a" * 40


def test_the_worst_pattern_is_matched_in_linear_time() -> None:
    """With ``re`` one ``fullmatch`` of this pair takes (by the count of its backtracking)
    more than C(40, 24) steps; it now returns, and says no."""
    matcher = compile_glob(WORST)
    assert matcher.fullmatch(VICTIM) is None
    assert compile_glob("sub/" + WORST).fullmatch("sub/" + VICTIM) is None
    assert matcher.fullmatch(VICTIM + "b") is not None


@pytest.mark.parametrize(
    ("pattern", "name", "matches"),
    [
        ("*.py", "a.py", True),
        ("*.py", "d/a.py", False),
        ("**/*.py", "d/e/a.py", True),
        ("**/*.py", "a.py", True),
        ("d/**", "d/e/f", True),
        ("?.txt", "a.txt", True),
        ("?.txt", "/.txt", False),
        ("[ab].txt", "b.txt", True),
        ("[!ab].txt", "c.txt", True),
        ("[!ab].txt", "a.txt", False),
        ("a[+-0]b", "a/b", False),  # a range holding '/' never matches a separator
        ("a[+-0]b", "a.b", True),
        ("a[!x]b", "a/b", False),
        ("[]].txt", "].txt", True),
        ("[.txt", "[.txt", True),  # an unclosed bracket is itself
        ("a\\b", "a\\b", True),
        ("(x)+", "(x)+", True),
    ],
)
def test_glob_semantics_are_kept(pattern: str, name: str, matches: bool) -> None:
    assert (compile_glob(pattern).fullmatch(name) is not None) is matches


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("x" * (GLOB_MAX_CHARS + 1), f"longer than {GLOB_MAX_CHARS} characters"),
        ("*a" * (GLOB_MAX_WILDCARDS + 1), f"more than {GLOB_MAX_WILDCARDS} wildcards"),
        ("?" * (GLOB_MAX_WILDCARDS + 1), f"more than {GLOB_MAX_WILDCARDS} wildcards"),
    ],
)
async def test_a_pattern_over_the_bounds_is_a_clear_tool_error(
    tmp_path: Path, pattern: str, message: str
) -> None:
    ctx = ToolContext(workspace=tmp_path, tools=ToolSet(core_tools()))
    calls = (("glob", {"pattern": pattern}), ("grep", {"pattern": "x", "glob": pattern}))
    for tool, arguments in calls:
        found = ctx.tools.get(tool)
        assert found is not None
        with pytest.raises(ToolError, match=message):
            await found.run(arguments, ctx)


async def test_the_tools_answer_the_worst_pattern_while_trio_keeps_running(
    tmp_path: Path,
) -> None:
    """Many victims, so the walk takes a while; a heartbeat task ticks while it runs."""
    for n in range(200):
        (tmp_path / f"{VICTIM}{n:03}").write_text("a\n")
    (tmp_path / VICTIM).write_text("a\n")
    (tmp_path / (VICTIM + "b")).write_text("found me\n")
    ctx = ToolContext(workspace=tmp_path, tools=ToolSet(core_tools()))
    ticks = 0

    async def heartbeat() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await trio.lowlevel.checkpoint()

    glob, grep = ctx.tools.get("glob"), ctx.tools.get("grep")
    assert glob is not None
    assert grep is not None
    async with trio.open_nursery() as nursery:
        nursery.start_soon(heartbeat)
        listed = await glob.run({"pattern": WORST}, ctx)
        found = await grep.run({"pattern": "found", "glob": WORST}, ctx)
        nursery.cancel_scope.cancel()
    assert listed == VICTIM + "b"
    assert found == f"{VICTIM}b:1:found me"
    assert ticks > 0


async def test_an_agent_loop_asking_for_the_worst_glob_finishes_its_round(tmp_path: Path) -> None:
    """In a runtime: the model's glob returns to it and the loop completes, while the runtime
    answers."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / VICTIM).write_text("a\n")
    replies = [
        completion(calls=[("g", "glob", {"pattern": WORST})]),
        completion(calls=[("h", "grep", {"pattern": "a", "glob": WORST})]),
        completion("nothing there"),
    ]
    config = RuntimeConfig(store="sqlite", state_dir=tmp_path / "state", shutdown_grace=5.0)
    with ChatServer(replies) as server:
        spec = f"agent:model=m,base_url={server.base_url},workspace={workspace},stream=false"
        async with open_runtime(config) as runtime:
            handle = runtime.handle(await runtime.start("|loop:1| find it", worker=spec))
            assert len(await runtime.list()) == 1
            state = await handle.wait()
            rounds = await handle.history()
    assert state.phase == "complete", state
    assert [r.status for r in rounds] == ["completed"]
    last = server.requests[-1]["messages"]
    tool_results = [message["content"] for message in last if message["role"] == "tool"]
    assert tool_results == [f"no file matches {WORST!r}", "no match"]
