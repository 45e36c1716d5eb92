"""A directory flipped to a symlink mid-call never lets a file tool out (docs/security.md).

The tools checked a path, then opened it by name: a second process that swaps a directory of
the workspace for a symlink to the outside between the two made ``read`` return an outside
file (752 times in 15,305 tries), ``grep`` search it and ``write`` overwrite it. Every
component is now opened relative to a directory descriptor without following a symlink
(``openat2`` with ``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS``, or a walk of ``O_NOFOLLOW``
opens where the kernel has no ``openat2``), and the tools read and write what they opened.

Here a real second process flips ``ws/d`` between a directory and a symlink to the secrets as
fast as it can while each tool is called TRIES times: no call may return, list or change a
byte outside. The flipper's count of flips and the tools' refusals show the race was run.
"""

from __future__ import annotations

import collections
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopactors.agent import ToolContext, ToolError, ToolSet, _workspace, core_tools
from loopactors.agent._tools import inside_workspace
from tests.hang import HANG

TRIES = 10_000
SECRET = "OUTSIDE-SECRET-5d1c"
OUTSIDE_ONLY = "only-outside.txt"

FLIPPER = """
import os, shutil, sys, time
ws, outside, count_file = sys.argv[1], sys.argv[2], sys.argv[3]
d, real = os.path.join(ws, "d"), os.path.join(ws, "d_real")
flips = 0
print("ready", flush=True)
while not os.path.exists(os.path.join(ws, "..", "stop")):
    try:
        os.rename(d, real)
    except OSError:  # a write made a new 'd' meanwhile, or 'd_real' is in the way
        if os.path.islink(d):
            os.unlink(d)
        elif os.path.isdir(real):
            shutil.rmtree(real)
        continue
    try:
        os.symlink(outside, d)
        flips += 1
        os.unlink(d)
    except OSError:
        pass
    try:
        os.rename(real, d)
    except OSError:
        shutil.rmtree(real)
    time.sleep(0.0002)  # 'd' a directory for a moment: the tools get through now and then
with open(count_file, "w") as f:
    f.write(str(flips))
"""


@pytest.fixture(params=["openat2", "walk"])
def resolver(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Both ways of opening: the kernel's ``openat2`` (skipped where it has none) and the
    descriptor walk used without it."""
    if request.param == "openat2":
        if not _workspace.openat2_available():
            pytest.skip("this kernel has no openat2")
    else:
        monkeypatch.setattr(_workspace, "_OPENAT2", False)
    return str(request.param)


@pytest.fixture
def flipping(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f").write_text(f"{SECRET}\n")
    (outside / OUTSIDE_ONLY).write_text(f"{SECRET}\n")
    workspace = tmp_path / "ws"
    (workspace / "d").mkdir(parents=True)
    (workspace / "d" / "f").write_text("inside\n")
    count_file = tmp_path / "flips"
    process = subprocess.Popen(
        [sys.executable, "-c", FLIPPER, str(workspace), str(outside), str(count_file)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "ready"
    try:
        yield workspace, outside
    finally:
        (tmp_path / "stop").touch()
        process.wait(timeout=HANG)
        process.stdout.close()
    assert int(count_file.read_text()) > 0  # the race was run, not just set up


async def _tries(
    workspace: Path, tool_name: str, arguments: dict[str, Any]
) -> tuple[list[str], int]:
    ctx = ToolContext(workspace=workspace, tools=ToolSet(core_tools(bash="off")))
    tool = ctx.tools.get(tool_name)
    assert tool is not None
    answers: list[str] = []
    refused = 0
    for n in range(TRIES):
        args = {key: value.replace("{n}", str(n)) for key, value in arguments.items()}
        try:
            answers.append(await tool.run(args, ctx))
        except ToolError:
            refused += 1
    return answers, refused


async def test_read_never_returns_an_outside_file(resolver: str, flipping: Any) -> None:
    workspace, _ = flipping
    answers, refused = await _tries(workspace, "read", {"path": "d/f"})
    leaks = [a for a in answers if SECRET in a]
    assert len(leaks) == 0, f"{len(leaks)} of {TRIES} reads leaked"
    assert answers  # some reads got through ...
    assert refused  # ... and some were refused mid-flip


async def test_write_never_changes_an_outside_file(resolver: str, flipping: Any) -> None:
    workspace, outside = flipping
    answers, refused = await _tries(workspace, "write", {"path": "d/f", "content": "written {n}\n"})
    assert (outside / "f").read_text() == f"{SECRET}\n"
    assert sorted(p.name for p in outside.iterdir()) == sorted(["f", OUTSIDE_ONLY])
    assert answers
    assert refused


async def test_grep_never_searches_an_outside_file(resolver: str, flipping: Any) -> None:
    workspace, _ = flipping
    answers, _ = await _tries(workspace, "grep", {"pattern": "SECRET|inside", "path": "d"})
    leaks = [a for a in answers if SECRET in a]
    assert len(leaks) == 0, f"{len(leaks)} of {TRIES} greps leaked"
    assert any("inside" in a for a in answers), collections.Counter(answers).most_common(5)


async def test_grep_of_the_workspace_never_searches_an_outside_file(
    resolver: str, flipping: Any
) -> None:
    workspace, _ = flipping
    answers, _ = await _tries(workspace, "grep", {"pattern": "SECRET|inside"})
    leaks = [a for a in answers if SECRET in a or OUTSIDE_ONLY in a]
    assert len(leaks) == 0, f"{len(leaks)} of {TRIES} greps leaked"
    assert any("inside" in a for a in answers), collections.Counter(answers).most_common(5)


async def test_glob_never_lists_an_outside_name(resolver: str, flipping: Any) -> None:
    workspace, _ = flipping
    answers, _ = await _tries(workspace, "glob", {"pattern": "**/*"})
    leaks = [a for a in answers if OUTSIDE_ONLY in a]
    assert len(leaks) == 0, f"{len(leaks)} of {TRIES} globs leaked"
    assert any("d/f" in a for a in answers)


def test_inside_workspace_never_raises_a_raw_os_error(flipping: Any) -> None:
    """Resolving while the directory flips gave ``OSError: [Errno 22]`` now and then."""
    workspace, _ = flipping
    refused = 0
    for _ in range(TRIES):
        try:
            inside_workspace(workspace, "d/f")
        except ToolError:
            refused += 1
    assert refused  # some calls met the symlink
