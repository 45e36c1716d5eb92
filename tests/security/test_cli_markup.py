"""Data shown by the CLI is text, never Rich markup nor terminal control (docs/security.md).

A task holding ``[/]`` made ``status`` fail for the whole state directory (and
``status --connect`` for every token holder), an output holding it broke ``history``, and
``[link=file:///...]`` or ``[bold red]`` from a model were interpreted in the operator's
terminal. Every view now shows data as ``Text`` and turns control characters (ESC, BEL, C1
controls, bidirectional overrides) into visible ``\\xNN`` escapes.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console

from loopactors.cli._progress import Progress, final_table
from loopactors.cli._tables import print_rows, terminal_safe
from loopactors.loops import AgentStep, LoopState, RoundFinished, RoundStarted
from loopactors.transport._status import StreamBacklog, TransportStatus, render
from loopactors.transport._wire import Heartbeat
from tests.hang import HANG

MARKUP = "[/] [link=file:///x]click[/link] [bold red]boom[/bold red] [/nope]"
# Clear the screen, an OSC 8 hyperlink, a bell, a C1 CSI, a right-to-left override.
ESCAPES = "\x1b[2J\x1b]8;;file:///etc/passwd\x07here\x1b]8;;\x07\x07\x9b31m\u202e"
INJECTED = ("\x1b[2J", "\x1b]8;", "\x07", "\x9b", "\u202e")
HOSTILE = f"{MARKUP} {ESCAPES}"


def _assert_shown_as_text(out: str, *, whole: bool = True) -> None:
    """``whole``: the value is shown whole (not cut to a head before its escapes)."""
    for literal in ("[/]", "[link=file:///x]", "[bold red]"):
        assert literal in out, (literal, out)
    for sequence in INJECTED:
        assert sequence not in out, (sequence, out)
    if whole:
        assert "[/nope]" in out
        assert "\\x1b[2J" in out  # the escape is shown, made harmless


def _terminal(width: int = 400) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=width, force_terminal=True, color_system="truecolor"), out


def test_terminal_safe_keeps_text_and_shows_controls() -> None:
    assert terminal_safe("plain [b] text\tand\nlines") == "plain [b] text\tand\nlines"
    assert terminal_safe("\x1b[31m\x07\x9b\u202e\u2066") == "\\x1b[31m\\x07\\x9b\\u202e\\u2066"


def _state(task: str, reason: str) -> LoopState:
    from loopactors.loops._syntax import parse_loop

    spec = parse_loop(f"|loop:3| {task}").spec()
    return LoopState(
        loop_id="deadbeef-0123456789abcdef", spec=spec, phase="escalated", reason=reason
    )


def test_the_live_table_the_lines_and_the_closing_table_show_data_as_text() -> None:
    console, out = _terminal()
    state = _state(HOSTILE, HOSTILE)
    with Progress(console) as progress:
        progress.track(state)
        progress.show(
            RoundStarted(
                loop_id=state.loop_id, round=1, rounds=3, seed_source="task", at=time.time()
            )
        )
        progress.show(
            AgentStep(loop_id=state.loop_id, round=1, tool="read", detail=HOSTILE, at=time.time())
        )
    print_rows(console, final_table([state], title=f"title {MARKUP}"))
    _assert_shown_as_text(out.getvalue())

    plain = io.StringIO()
    lines = Progress(Console(file=plain, width=400, force_terminal=False))
    lines.track(state)
    lines.show(
        RoundFinished(
            loop_id=state.loop_id, round=1, rounds=3, status="failed", error=HOSTILE,
            duration=1.0, at=time.time(),
        )
    )  # fmt: skip
    lines.note(HOSTILE)
    assert "\x1b" not in plain.getvalue()
    assert "[/]" in plain.getvalue()


def test_the_redis_status_tables_show_names_as_text() -> None:
    console, out = _terminal()
    status = TransportStatus(
        workers=[Heartbeat(name=HOSTILE, kinds=(MARKUP,), slots=1, in_flight=0, at=time.time())],
        streams=[StreamBacklog(stream=HOSTILE, waiting=0, pending=0)],
    )
    for table in render(status):
        console.print(table)
    _assert_shown_as_text(out.getvalue())


def test_the_repl_says_data_as_text(capsys: pytest.CaptureFixture[str]) -> None:
    from loopactors.cli._repl import Repl

    Repl.say(None, HOSTILE)  # type: ignore[arg-type]
    _assert_shown_as_text(capsys.readouterr().out)


CLI = [sys.executable, "-m", "loopactors"]


def test_run_status_and_history_show_markup_and_escapes_as_text(tmp_path: Path) -> None:
    """Real processes, with Rich told it writes to a terminal (``FORCE_COLOR``)."""
    state = tmp_path / "state"
    output = tmp_path / "output.txt"
    output.write_text(HOSTILE + "\n")
    env = {**os.environ, "FORCE_COLOR": "1", "COLUMNS": "400", "TERM": "xterm-256color"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*CLI, *args], capture_output=True, text=True, timeout=HANG, check=False, env=env
        )

    run = cli(
        "run", f"|loop:1| {HOSTILE}", "--state", str(state), "--worker", f"command:cat {output}"
    )
    assert run.returncode == 0, run.stderr
    assert "Traceback" not in run.stderr
    _assert_shown_as_text(run.stdout)

    status = cli("status", "--state", str(state))
    assert status.returncode == 0, status.stderr
    _assert_shown_as_text(status.stdout)

    loop_id = subprocess.run(
        [*CLI, "status", "--state", str(state), "--json"],
        capture_output=True, text=True, timeout=HANG, check=True,
    ).stdout.split('"loop_id":"')[1].split('"')[0]  # fmt: skip
    history = cli("history", loop_id, "--state", str(state))
    assert history.returncode == 0, history.stderr
    _assert_shown_as_text(history.stdout)
    assert "file:///x" in history.stdout


def test_status_and_history_over_the_connection_show_markup_as_text(tmp_path: Path) -> None:
    """``status --connect`` failed for every token holder when one loop's task held ``[/]``."""
    from ..gateway.test_cli_node import NodeProcess

    output = tmp_path / "output.txt"
    output.write_text(HOSTILE + "\n")
    node = NodeProcess(tmp_path / "state", "--worker", f"command:cat {output}")
    env = {**os.environ, "FORCE_COLOR": "1", "COLUMNS": "400", "TERM": "xterm-256color"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*CLI, *args, "--connect", node.url, "--state", str(node.state)],
            capture_output=True, text=True, timeout=120, check=False, env=env,
        )  # fmt: skip

    try:
        run = cli("run", f"|loop:1| {HOSTILE}")
        assert run.returncode == 0, run.stderr
        _assert_shown_as_text(run.stdout)
        status = cli("status")
        assert status.returncode == 0, status.stderr
        _assert_shown_as_text(status.stdout)
        loop_id = cli("status", "--json").stdout.split('"loop_id":"')[1].split('"')[0]
        history = cli("history", loop_id)
        assert history.returncode == 0, history.stderr
        _assert_shown_as_text(history.stdout, whole=False)  # a head of the output
    finally:
        assert node.terminate() == 0
