"""The loop tables at 60, 80 and 200 columns on a terminal, and as plain text in a pipe."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pexpect  # type: ignore[import-untyped]
import pytest
import trio
from rich.console import Console

from loopactors.cli._progress import Progress, final_table
from loopactors.cli._tables import print_rows, short_ids
from loopactors.loops import LoopSpec, LoopState, RoundStarted
from loopactors.runtime import RuntimeConfig, open_runtime
from tests.hang import HANG

# Ids as the runtime makes them: one second's hex time, then 16 hex of randomness.
IDS = ["692d8a1b-0f3e5a7c9b1d2e4f", "692d8a1b-77aa00c4e2b1d9a3", "692d8a1c-5be2c0d4e6f81327"]


NEXT = "the next version"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "loopactors", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=HANG, check=False)


def states() -> list[LoopState]:
    return [
        LoopState(
            loop_id=IDS[0], spec=LoopSpec(task=f"draft the release notes for {NEXT}", rounds=5),
            phase="complete", completed_rounds=5, tokens_used=1234,
        ),
        LoopState(
            loop_id=IDS[1], spec=LoopSpec(task="refactor the store, one step at a time", rounds=20),
            phase="awaiting_worker", round=8, completed_rounds=7, tokens_used=99,
        ),
        LoopState(
            loop_id=IDS[2], spec=LoopSpec(task="run the flaky integration tests", rounds=5),
            phase="escalated", completed_rounds=2, reason="the same error three times in a row: "
            "ImportError: no module named flaky_plugin", trigger="stagnation",
        ),
    ]  # fmt: skip


def render(renderable: object, *, width: int, terminal: bool = True) -> list[str]:
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=terminal, color_system=None)
    console.print(renderable)
    return out.getvalue().splitlines()


@pytest.mark.parametrize("width", [60, 80, 200])
def test_the_loop_table_fits_the_terminal_and_keeps_each_task(width: int) -> None:
    lines = render(final_table(states()), width=width)
    assert all(len(line) <= width for line in lines), lines
    header = next(line for line in lines if line.startswith("loop "))
    assert "task" in header
    assert "phase" in header
    for state, short in zip(states(), short_ids(IDS), strict=True):
        (row,) = [line for line in lines if short in line]
        assert row.startswith(short)
        assert state.phase in row
        assert f"{state.completed_rounds}/{state.spec.rounds}" in row
        # At least the task's first words, even beside an awaiting_worker row.
        assert " ".join(state.spec.task.split()[:2]) in row
    if width >= 80:
        assert "reason" in header
        assert "the same error" in "\n".join(lines)
    if width == 200:
        assert "tokens" in header
        assert "draft the release notes for the next version" in "\n".join(lines)
        assert "…" not in "\n".join(lines)


def test_ids_are_shown_by_a_tail_that_tells_them_apart() -> None:
    assert short_ids(IDS) == ["9b1d2e4f", "e2b1d9a3", "e6f81327"]
    # Two ids sharing their last 8 characters: one more, until they differ.
    twins = ["1-00000000a1234567", "2-00000000b1234567"]
    assert short_ids(twins) == ["a1234567", "b1234567"]  # 8 is the least shown
    close = ["1-0000000aa1234567", "2-0000000ba1234567"]
    assert short_ids(close) == ["aa1234567", "ba1234567"]
    # Ids a caller chose are shown whole.
    assert short_ids(["nightly-review", IDS[0]]) == ["nightly-review", "9b1d2e4f"]


def test_without_a_terminal_the_table_is_plain_text_with_whole_values() -> None:
    out = io.StringIO()
    print_rows(Console(file=out, width=80), final_table(states(), title="3 loop(s)"))
    lines = out.getvalue().splitlines()
    assert lines[0] == "3 loop(s)"
    assert lines[1].split() == ["loop", "task", "phase", "done", "tokens", "cost", "reason"]
    assert not any(ch in "\n".join(lines) for ch in "…│┃━─")
    assert lines[2].startswith(IDS[0] + "  draft the release notes for the next version")
    assert "awaiting_worker" in lines[3]
    assert lines[4].endswith("ImportError: no module named flaky_plugin")
    assert all(line == line.rstrip() for line in lines)


@pytest.mark.parametrize("width", [60, 80])
def test_the_live_table_fits_too(width: int) -> None:
    out = io.StringIO()
    progress = Progress(Console(file=out, width=width, force_terminal=True, color_system=None))
    for state in states():
        progress.track(state)
    progress.show(RoundStarted(loop_id=IDS[1], at=1.0, round=8, rounds=20, seed_source="previous"))
    lines = render(progress._table(), width=width)
    assert all(len(line) <= width for line in lines), lines
    row = next(line for line in lines if "e2b1d9a3" in line)
    # The words of `status` and the dashboard: the loop's phase, and rounds completed.
    assert "awaiting_worker" in row
    assert "7/20" in row
    assert "refactor" in row
    if width == 80:
        assert "r8 running" in row


def test_the_tail_a_table_shows_names_the_loop(tmp_path: Path) -> None:
    async def make() -> list[str]:
        async with open_runtime(RuntimeConfig(store="sqlite", state_dir=tmp_path)) as rt:
            done = [
                rt.handle(await rt.start("|loop:1| first")),
                rt.handle(await rt.start("|loop:1| second")),
            ]
            for handle in done:
                await handle.wait()
            ids = [h.loop_id for h in done]
            # The runtime (and so a node's requests) takes the tail too.
            assert await rt.resolve_loop_id(short_ids(ids)[1]) == ids[1]
            return ids

    ids = trio.run(make)
    tails = short_ids(ids)
    shown = cli("status", tails[0], "--state", str(tmp_path), "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["loop_id"] == ids[0]
    history = cli("history", tails[1], "--state", str(tmp_path), "--json")
    assert json.loads(history.stdout)["loop"]["loop_id"] == ids[1]
    # In a pipe the table is plain text, the ids whole, titled with what it lists.
    table = cli("status", "--state", str(tmp_path))
    lines = table.stdout.splitlines()
    assert lines[0] == f"2 loop(s) in {tmp_path}, 0 live"
    assert {line.split()[0] for line in lines[2:]} == set(ids)


def test_the_demo_closing_table_fits_an_80_by_24_terminal() -> None:
    child = pexpect.spawn(
        sys.executable, ["-m", "loopactors", "demo", "--fast"],
        dimensions=(24, 80), encoding="utf-8", timeout=600, env={**os.environ, "TERM": "xterm"},
    )  # fmt: skip
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", child.before).replace("\r", "")
    closing = text[text.rindex("how the loops ended") :].splitlines()
    assert all(len(line) <= 80 for line in closing), closing
    rows = [line for line in closing if re.match(r"[0-9a-f]{8} ", line)]
    assert len(rows) == 4
    for row, task in zip(rows, ["draft the", "review the", "refactor the", "run the"], strict=True):
        assert task in row
    assert "cancelled" in rows[2]
