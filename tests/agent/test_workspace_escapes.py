"""Every path-like argument of every core tool stays in the workspace (docs/security.md).

A workspace sits next to a directory of secrets, with symlinks that point out (to a file, to a
directory, to ``/``), a symlink loop, a FIFO and, where this machine lets us make one, a device.
Each tool is driven at each of them: nothing outside is read, listed, written or blocked on.
tests/fuzz/test_workspace_fuzz.py throws generated paths and globs at the same layout.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from loopactors.agent import ToolContext, ToolError, ToolSet, core_tools
from loopactors.agent._sandbox import find_bwrap
from loopactors.errors import AgentError
from tests.hang import HANG, PROMPT

SECRET = "TOPSECRET-7f3a"
SECRET_NAME = "outside-marker.txt"


def make_layout(tmp_path: Path) -> Path:
    """``tmp_path/outside`` holds the secrets; ``tmp_path/ws`` is the workspace."""
    outside = tmp_path / "outside"
    (outside / "deeper").mkdir(parents=True)
    (outside / SECRET_NAME).write_text(f"{SECRET}\n")
    (outside / "deeper" / SECRET_NAME).write_text(f"{SECRET}\n")
    workspace = tmp_path / "ws"
    (workspace / "src").mkdir(parents=True)
    (workspace / "src" / "ok.py").write_text("print('inside')\n")
    (workspace / "file_out").symlink_to(outside / SECRET_NAME)
    (workspace / "dir_out").symlink_to(outside)
    (workspace / "src" / "root_out").symlink_to("/")
    (workspace / "src" / "rel_out").symlink_to("../../outside")
    (workspace / "loop").symlink_to(".")
    (workspace / "dangling").symlink_to("nothing-here")
    (workspace / "inside_link").symlink_to("src/ok.py")
    os.mkfifo(workspace / "pipe")
    return workspace


def context(workspace: Path, bash: Any = "on") -> ToolContext:
    return ToolContext(workspace=workspace, tools=ToolSet(core_tools(bash=bash)))


async def call(ctx: ToolContext, tool_name: str, **arguments: Any) -> str:
    tool = ctx.tools.get(tool_name)
    assert tool is not None
    with trio.fail_after(HANG):  # a tool that blocks (on a FIFO, say) fails here, not hangs
        return await tool.run(arguments, ctx)


ESCAPING_PATHS = [
    "../outside/" + SECRET_NAME,
    "src/../../outside/" + SECRET_NAME,
    "file_out",
    "dir_out/" + SECRET_NAME,
    "dir_out/deeper/" + SECRET_NAME,
    "src/root_out/etc/passwd",
    "src/rel_out/" + SECRET_NAME,
    "loop/dir_out/" + SECRET_NAME,
    "/etc/passwd",
]


@pytest.mark.parametrize("path", ESCAPING_PATHS)
async def test_read_write_edit_refuse_every_escape(tmp_path: Path, path: str) -> None:
    workspace = make_layout(tmp_path)
    ctx = context(workspace)
    before = sorted(p.name for p in (tmp_path / "outside").rglob("*"))
    for tool, extra in (
        ("read", {}),
        ("write", {"content": "owned"}),
        ("edit", {"old_string": SECRET, "new_string": "owned"}),
    ):
        with pytest.raises(ToolError, match="outside the workspace"):
            await call(ctx, tool, path=path, **extra)
    assert (tmp_path / "outside" / SECRET_NAME).read_text() == f"{SECRET}\n"
    assert sorted(p.name for p in (tmp_path / "outside").rglob("*")) == before


@pytest.mark.parametrize(
    "pattern",
    ["../*", "../outside/*", "../../../../../../etc/passwd", "/etc/passwd", "/etc/*", "~/*"],
)
async def test_glob_patterns_that_leave_are_refused(tmp_path: Path, pattern: str) -> None:
    ctx = context(make_layout(tmp_path))
    with pytest.raises(ToolError, match="must stay inside the workspace"):
        await call(ctx, "glob", pattern=pattern)
    with pytest.raises(ToolError, match="must stay inside the workspace"):
        await call(ctx, "grep", pattern=SECRET, glob=pattern)


@pytest.mark.parametrize(
    "pattern",
    ["**/*", "*", "dir_out/*", "dir_out/**/*", "src/rel_out/*", "src/root_out/etc/*", "**/*.txt"],
)
async def test_nothing_is_listed_or_searched_through_an_escaping_symlink(
    tmp_path: Path, pattern: str
) -> None:
    ctx = context(make_layout(tmp_path))
    listed = await call(ctx, "glob", pattern=pattern)
    assert SECRET_NAME not in listed
    assert "passwd" not in listed
    assert "pipe" not in listed
    found = await call(ctx, "grep", pattern=SECRET, glob=pattern)
    assert found == "no match"
    found = await call(ctx, "grep", pattern="root", glob=pattern)
    assert "passwd" not in found


async def test_listing_keeps_what_is_inside_including_inside_symlinks(tmp_path: Path) -> None:
    ctx = context(make_layout(tmp_path))
    assert await call(ctx, "glob", pattern="**/*") == "inside_link\nsrc/ok.py"
    assert await call(ctx, "grep", pattern="inside") == "src/ok.py:1:print('inside')"
    assert await call(ctx, "read", path="inside_link") == "     1\tprint('inside')"


@pytest.mark.parametrize("path", ["dir_out", "src/root_out", "../outside", "/"])
async def test_grep_path_must_be_inside(tmp_path: Path, path: str) -> None:
    ctx = context(make_layout(tmp_path))
    with pytest.raises(ToolError, match="outside the workspace"):
        await call(ctx, "grep", pattern=SECRET, path=path)


async def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    ctx = context(make_layout(tmp_path))
    for tool, extra in (
        ("read", {}),
        ("write", {"content": "x"}),
        ("edit", {"old_string": "a", "new_string": "b"}),
    ):
        with pytest.raises(ToolError, match="'pipe' is a FIFO"):
            await call(ctx, tool, path="pipe", **extra)
    assert await call(ctx, "grep", pattern="x", path="pipe") == "no match"
    assert await call(ctx, "grep", pattern="x", glob="pipe") == "no match"
    assert await call(ctx, "glob", pattern="pipe") == "no file matches 'pipe'"


async def test_a_device_is_refused(tmp_path: Path) -> None:
    workspace = make_layout(tmp_path)
    (workspace / "zero").symlink_to("/dev/zero")  # points out: refused as outside
    ctx = context(workspace)
    with pytest.raises(ToolError, match="outside the workspace"):
        await call(ctx, "read", path="zero")
    try:
        os.mknod(workspace / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("this machine does not allow making a device node (needs CAP_MKNOD)")
    for tool, extra in (("read", {}), ("write", {"content": "x"})):
        with pytest.raises(ToolError, match="'null' is a device"):
            await call(ctx, tool, path="null", **extra)
    assert await call(ctx, "glob", pattern="null") == "no file matches 'null'"


async def test_a_directory_and_a_missing_file_are_clear_errors(tmp_path: Path) -> None:
    ctx = context(make_layout(tmp_path))
    with pytest.raises(ToolError, match="'src' is a directory"):
        await call(ctx, "read", path="src")
    with pytest.raises(ToolError, match="cannot read 'missing'"):
        await call(ctx, "read", path="missing")
    with pytest.raises(ToolError, match="cannot read 'dangling'"):
        await call(ctx, "read", path="dangling")
    with pytest.raises(ToolError, match="holds a NUL"):
        await call(ctx, "read", path="src/ok.py\0")


async def test_read_stops_at_the_byte_limit(tmp_path: Path, monkeypatch: Any) -> None:
    from loopactors.agent import _workspace

    monkeypatch.setattr(_workspace.read_regular, "__defaults__", (64,))
    (tmp_path / "big.txt").write_text("x" * 50 + "\n" + "y" * 100 + "\n")
    ctx = context(tmp_path)
    text = await call(ctx, "read", path="big.txt")
    assert text.endswith("[file is 152 bytes; only the first 64 were read]")
    with pytest.raises(ToolError, match="over the 64 bytes edit handles"):
        await call(ctx, "edit", path="big.txt", old_string="x", new_string="z")


# -- grep's regular expressions --------------------------------------------------------------


async def test_a_catastrophic_pattern_neither_freezes_the_node_nor_outlives_a_stop(
    tmp_path: Path,
) -> None:
    """``(a+)+$`` against a line of a's followed by 'b' takes Python's re about 2^n steps
    holding the GIL; RE2 takes linear time, so the event loop keeps running meanwhile and a
    cancelled call returns at once."""
    (tmp_path / "bad.txt").write_text(("a" * 32 + "b\n") * 300)
    ctx = context(tmp_path)
    ticks = 0

    async def heartbeat() -> None:
        nonlocal ticks
        while True:
            await trio.sleep(0.01)
            ticks += 1

    started = time.monotonic()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(heartbeat)
        assert await call(ctx, "grep", pattern="(a+)+$") == "no match"
        hits = await call(ctx, "grep", pattern="(a+)+b$")
        assert hits.startswith(f"bad.txt:1:{'a' * 32}b\nbad.txt:2:")
        assert hits.endswith("\n[more than 200 matches; narrow the search]")
        nursery.cancel_scope.cancel()
    # A backtracking engine would take ages (2^32 steps a line), not merely long.
    assert time.monotonic() - started < PROMPT, "the grep took long: is the engine linear?"

    big = tmp_path / "many"
    big.mkdir()
    for n in range(200):
        (big / f"f{n}.txt").write_text("a" * 32 + "b\n")
    with trio.move_on_after(0.05):  # a stop arrives as a cancellation
        await call(ctx, "grep", pattern="(a+)+$", path="many")
    assert time.monotonic() - started < PROMPT


@pytest.mark.parametrize(
    ("pattern", "why"),
    [(r"(a)\1", "invalid escape"), ("(?=a)", "invalid perl operator"), ("(", "missing")],
)
async def test_unsupported_patterns_get_a_clear_error(
    tmp_path: Path, pattern: str, why: str
) -> None:
    ctx = context(tmp_path)
    with pytest.raises(ToolError, match=f"not a valid regular expression for grep: {why}.*RE2"):
        await call(ctx, "grep", pattern=pattern)


# -- bash --------------------------------------------------------------------------------------


async def test_bash_off_offers_no_bash_and_bad_modes_are_refused(tmp_path: Path) -> None:
    assert "bash" not in [tool.name for tool in ToolSet(core_tools(bash="off")).offered()]
    with pytest.raises(AgentError, match="bash must be one of on, sandbox, off, got 'maybe'"):
        core_tools(bash="maybe")  # type: ignore[arg-type]


async def test_bash_never_sees_the_model_key(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setenv("LOOPACTORS_LLM_API_KEY", "sk-not-for-commands")
    ctx = context(tmp_path)
    assert await call(ctx, "bash", command="echo ${LOOPACTORS_LLM_API_KEY:-unset}") == "unset\n"


def _has_bwrap() -> bool:
    try:
        find_bwrap()
    except AgentError:
        return False
    return True


needs_bwrap = pytest.mark.skipif(not _has_bwrap(), reason="bubblewrap (bwrap) is not installed")


@needs_bwrap
async def test_sandboxed_bash_writes_only_the_workspace_and_sees_nothing_else(
    tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setenv("LOOPACTORS_LLM_API_KEY", "sk-not-for-commands")
    workspace = make_layout(tmp_path)
    outside = tmp_path / "outside"
    ctx = context(workspace, bash="sandbox")
    assert await call(ctx, "bash", command="echo made > made.txt; cat made.txt") == "made\n"
    assert (workspace / "made.txt").read_text() == "made\n"
    for command in (
        f"cat {outside / SECRET_NAME}",
        f"cat dir_out/{SECRET_NAME}",
        f"ls {outside}",
        f"echo owned > {outside / 'new.txt'}",
        "echo owned > /etc/owned",
        f"ls {Path.home()}",
    ):
        with pytest.raises(ToolError, match=r"exit code [12]"):
            await call(ctx, "bash", command=command)
    assert not await trio.Path(outside / "new.txt").exists()
    assert not await trio.Path("/etc/owned").exists()
    assert await call(ctx, "bash", command="echo ${LOOPACTORS_LLM_API_KEY:-unset}") == "unset\n"
    # its own process namespace: the node's processes are not there to signal
    assert str(os.getpid()) not in await call(ctx, "bash", command="ls /proc")
    # no network: only the loopback device, down
    assert await call(ctx, "bash", command="cat /proc/net/dev | tail -n +3 | cut -d: -f1") == (
        "    lo\n"
    )


@needs_bwrap
async def test_sandboxed_bash_timeout_still_kills_everything(tmp_path: Path) -> None:
    ctx = context(tmp_path, bash="sandbox")
    with pytest.raises(ToolError, match=r"timed out after 0\.5s"):
        await call(ctx, "bash", command="sleep 30 & sleep 30", timeout=0.5)
