"""Fuzzing the core tools' confinement: generated paths and globs never reach outside.

The layout is tests/agent/test_workspace_escapes.py's (a workspace next to a directory of
secrets, with symlinks pointing out in every way). Paths and globs are built from the pieces
an escape is made of; whatever a tool answers, no secret's name or content appears in it,
nothing outside changes, and a failure is a tool error (what the model reads), never another
exception. CI runs a short version; ``just fuzz`` runs long (LOOPACTORS_FUZZ_EXAMPLES).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopactors.agent import ToolContext, ToolError, ToolSet, core_tools
from tests.hang import HANG

from ..agent.test_workspace_escapes import SECRET, SECRET_NAME, make_layout

# Fewer than the other suites by default: each example runs six tools on a real file tree.
EXAMPLES = int(os.environ.get("LOOPACTORS_FUZZ_EXAMPLES", "40"))

PIECES = [
    "..",
    ".",
    "",
    "*",
    "**",
    "?",
    "[o]*",
    "src",
    "file_out",
    "dir_out",
    "root_out",
    "rel_out",
    "loop",
    "dangling",
    "pipe",
    "outside",
    "deeper",
    "etc",
    "passwd",
    SECRET_NAME,
    "outside-*",
    "~",
]
paths = st.builds(
    lambda lead, parts: lead + "/".join(parts),
    st.sampled_from(["", "/", "./", "../"]),
    st.lists(st.sampled_from(PIECES), min_size=1, max_size=6),
)

ESCAPING_NAMES = ("file_out", "dir_out", "src/root_out", "src/rel_out", "loop/", "pipe")


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> tuple[ToolContext, Path]:
    workspace = make_layout(tmp_path_factory.mktemp("fuzz"))
    context = ToolContext(workspace=workspace, tools=ToolSet(core_tools(bash="off")))
    return context, workspace.parent / "outside"


def outside_state(outside: Path) -> list[tuple[str, str]]:
    return sorted(
        (str(path), path.read_text() if path.is_file() else "") for path in outside.rglob("*")
    )


async def answer(context: ToolContext, tool_name: str, arguments: Mapping[str, object]) -> None:
    tool = context.tools.get(tool_name)
    assert tool is not None
    with trio.fail_after(HANG):  # blocking on a FIFO would fail here
        try:
            text = await tool.run(arguments, context)
        except ToolError as exc:
            text = str(exc)  # the argument is echoed in an error; an outside name only so
            listed = []
        else:
            listed = text.splitlines() if tool_name in ("glob", "grep") else []
    assert SECRET not in text
    assert "root:x:" not in text  # /etc/passwd's content
    for line in listed:  # nothing is listed through a symlink that points out
        assert not line.startswith(ESCAPING_NAMES), line


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(path=paths, glob=paths)
def test_no_tool_reaches_outside_the_workspace(
    layout: tuple[ToolContext, Path], path: str, glob: str
) -> None:
    context, outside = layout
    before = outside_state(outside)

    async def main() -> None:
        for tool_name, arguments in (
            ("read", {"path": path}),
            ("glob", {"pattern": glob}),
            ("grep", {"pattern": "SECRET|root", "path": path}),
            ("grep", {"pattern": "SECRET|root", "glob": glob}),
            ("edit", {"path": path, "old_string": SECRET, "new_string": "owned"}),
            ("write", {"path": path, "content": "owned"}),
        ):
            await answer(context, tool_name, arguments)

    trio.run(main)
    assert outside_state(outside) == before
