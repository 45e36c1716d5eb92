"""A worker kind added with no edit under ``loopactors/``: registered by a call or by an
entry point, it runs loops, is refused with its own message, and its capabilities (a
workspace pinned to the shell's directory) are asked of it, never of its name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loopactors.errors import WorkerSpecError
from loopactors.runtime import RuntimeConfig, open_runtime
from loopactors.workers import (
    check_worker_spec,
    in_workspace,
    parse_worker,
    served_by_default,
    worker_kind,
    worker_kinds,
)

from .conftest import installed


async def test_a_loop_runs_on_a_kind_registered_by_path(reverse_kind: str) -> None:
    assert "reverse" in worker_kinds()
    assert "reverse" not in served_by_default()  # it said so: a worker process runs it if told
    async with open_runtime(RuntimeConfig(store="memory")) as rt:
        handle = rt.handle(await rt.start("|loop:2,fresh| stressed", worker="reverse:shout=yes"))
        final = await handle.wait()
        history = await handle.history()
    assert final.phase == "complete"
    assert [record.output for record in history] == ["DESSERTS", "DESSERTS"]
    assert [record.tokens for record in history] == [8, 8]


async def test_a_bad_spec_of_the_kind_is_refused_with_the_kinds_own_message(
    reverse_kind: str,
) -> None:
    async with open_runtime(RuntimeConfig(store="memory")) as rt:
        with pytest.raises(WorkerSpecError, match="reverse worker option 'loud' is unknown"):
            await rt.start("|loop:1| x", worker="reverse:loud=yes")
    with pytest.raises(WorkerSpecError, match=r"unknown worker kind 'reversed'.*reverse"):
        parse_worker("reversed")


def test_its_capabilities_are_what_the_core_asks(reverse_kind: str, tmp_path: Path) -> None:
    kind = worker_kind("reverse:shout=yes")
    assert kind is not None
    assert kind.workspace == "round"
    assert kind.stable_spec
    assert check_worker_spec("reverse", here=False) is kind
    pinned = in_workspace("reverse:shout=yes", tmp_path)
    assert pinned == f"reverse:shout=yes,workspace={tmp_path.resolve()}"
    assert in_workspace(pinned, "/elsewhere") == pinned  # the spec wins


def test_an_installed_kind_runs_from_the_command_line_in_the_shells_directory(
    tmp_path: Path,
) -> None:
    """Through its entry point only; ``loopactors run`` pins its workspace to the current
    directory because the kind says its rounds run in one, as it does for a coding CLI."""
    env = installed(
        tmp_path / "site",
        "loopactors.worker_kinds",
        "reverse",
        "tests.extensions.reverse_kind:KIND",
    )
    here = tmp_path / "here"
    here.mkdir()
    done = subprocess.run(
        [
            *(sys.executable, "-m", "loopactors", "run", "|loop:1| olleh"),
            *("--worker", "reverse", "--store", "memory", "--json"),
        ],
        cwd=here,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    started = json.loads(done.stdout.splitlines()[0])
    assert started["worker"] == f"reverse:workspace={here.resolve()}"
    assert (here / "round-1.txt").read_text() == "hello"
