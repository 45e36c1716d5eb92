"""The low findings: loop ids, the inter-round delay across a restart, the dashboard's token on
a command line, the state directory's modes, an undecodable row, an empty database file.

docs/security.md, "State directory, full disk and outputs".
"""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import trio
import trio.lowlevel

from loopactors.errors import AdmissionRefused, LoopactorsError
from loopactors.loops import LoopSpec, LoopState, after_round, on_recovery
from loopactors.loops.steps import Run, Wake
from loopactors.runtime import open_runtime
from loopactors.workers import RoundResult
from tests.hang import HANG

from ..runtime.conftest import memory_config, sqlite_config

# -- loop ids ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "loop_id", ["../../x", "/etc/x", "a\0b", "a/b", "..", ".hidden", "-x", "", " ", "x" * 129]
)
async def test_a_loop_id_outside_the_grammar_is_refused_at_admission(
    tmp_path: Path, loop_id: str
) -> None:
    config = sqlite_config(tmp_path / "state", keep_full_outputs=True, max_output_bytes=10)
    async with open_runtime(config) as runtime:
        with pytest.raises(AdmissionRefused, match="is not a valid loop id"):
            await runtime.start("|loop:1| x", loop_id=loop_id, worker="scripted:output=" + "y" * 50)
        assert await runtime.list() == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state"]  # noqa: ASYNC240


@pytest.mark.parametrize(
    "loop_id", ["alpha-1", "code:fix-flaky-tests", "6745a3b2-0123456789abcdef", "A.b_c"]
)
async def test_ids_in_the_grammar_are_taken(
    autojump_clock: trio.testing.MockClock, loop_id: str
) -> None:
    async with open_runtime(memory_config()) as runtime:
        handle = runtime.handle(await runtime.start("|loop:1| x", loop_id=loop_id))
        assert (await handle.wait()).phase == "complete"


# -- the inter-round delay ----------------------------------------------------------------------


def test_the_inter_round_delay_is_stored_as_a_due_time_and_kept_by_a_recovery() -> None:
    spec = LoopSpec(task="t", rounds=3, inter_round_delay=600.0)
    state = LoopState(loop_id="l", spec=spec, phase="awaiting_worker", started_at=1.0)
    report = RoundResult(status="completed", output="one", duration=1.0)
    run, effects = after_round(Run(state=state), report, now=1000.0)
    assert run.state.phase == "dispatching"
    assert run.state.deferred_until == 1600.0
    assert [e for e in effects if isinstance(e, Wake)] == [Wake(600.0)]
    # A runner recovering the loop (a restart) 10 s later waits the 590 s left.
    recovered, effects = on_recovery(Run(state=run.state), None, now=1010.0)
    assert [e for e in effects if isinstance(e, Wake)] == [Wake(590.0)]
    assert recovered.state.round == 2


async def test_a_restart_between_rounds_keeps_the_delay(tmp_path: Path) -> None:
    """Real time: a lower bound only (round 2 must not start before the delay is over)."""
    delay = 2.0
    config = sqlite_config(tmp_path / "state", worker="scripted")
    async with open_runtime(config) as runtime:
        handle = runtime.handle(await runtime.start("|loop:2| x", inter_round_delay=delay))
        while len(await handle.history()) < 1 or (await handle.history())[0].status != "completed":
            await trio.sleep(0.01)
        first = (await handle.history())[0]
    async with open_runtime(config) as runtime:
        state = await runtime.handle(handle.loop_id).wait()
        rounds = await runtime.handle(handle.loop_id).history()
    assert state.phase == "complete"
    assert first.duration is not None
    assert rounds[1].started_at >= first.started_at + first.duration + delay - 0.05


# -- dashboard --open -------------------------------------------------------------------------


def test_dashboard_open_never_puts_the_token_on_a_command_line(tmp_path: Path) -> None:
    """The browser gets a page file (0600, in a 0700 directory) that sends it on; the file
    is gone once the browser has read it."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    token = "a-token-of-thirty-two-characters!"
    (state / "node.token").write_text(token)
    (state / "node.token").chmod(0o600)
    seen = tmp_path / "seen"
    browser = tmp_path / "browser.sh"
    browser.write_text(
        "#!/bin/sh\n"
        f'printf "%s" "$*" > {seen}.argv\n'
        f'page="${{1#file://}}"; stat -c %a "$page" > {seen}.mode\n'
        f'stat -c %a "$(dirname "$page")" > {seen}.dirmode\n'
        f'sleep 0.1; cat "$page" > {seen}.page\n'
    )
    browser.chmod(0o700)
    env = {**os.environ, "BROWSER": str(browser)}
    run = subprocess.run(
        [sys.executable, "-m", "loopactors", "dashboard", "--open", "--state", str(state),
         "--connect", "ws://127.0.0.1:9"],
        capture_output=True, text=True, timeout=HANG, check=False, env=env,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    argv = Path(f"{seen}.argv").read_text()
    assert token not in argv
    assert "token" not in argv
    assert argv.startswith("file://")
    assert Path(f"{seen}.mode").read_text().strip() == "600"
    assert Path(f"{seen}.dirmode").read_text().strip() == "700"
    page = Path(f"{seen}.page").read_text()
    assert "location.replace" in page
    assert "http://127.0.0.1:9/#token=" in page
    assert not Path(argv.removeprefix("file://")).exists()  # removed once read


# -- modes of what the state directory holds -----------------------------------------------------


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_a_new_state_directory_is_private(tmp_path: Path) -> None:
    state = tmp_path / "state"
    config = sqlite_config(state, keep_full_outputs=True, max_output_bytes=10)
    async with open_runtime(config) as runtime:
        handle = runtime.handle(
            await runtime.start("|loop:1| x", worker="scripted:output=" + "y" * 50)
        )
        await handle.wait()
        assert _mode(state / "loopactors.db-wal") == 0o600
    assert _mode(state) == 0o700
    assert _mode(state / "loopactors.db") == 0o600
    outputs = state / "outputs"
    kept = [p for p in outputs.rglob("*") if p.is_file()]
    assert kept
    for path in [outputs, *outputs.rglob("*")]:
        assert _mode(path) == (0o700 if path.is_dir() else 0o600), path


async def test_an_existing_readable_store_is_left_alone_and_warned_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "state"
    async with open_runtime(sqlite_config(state)):
        pass
    state.chmod(0o755)
    (state / "loopactors.db").chmod(0o644)
    with caplog.at_level(logging.WARNING):
        async with open_runtime(sqlite_config(state)):
            pass
    assert _mode(state) == 0o755
    assert _mode(state / "loopactors.db") == 0o644
    warned = [r.getMessage() for r in caplog.records if "other users" in r.getMessage()]
    assert len(warned) == 1, caplog.text
    assert "chmod 700" in warned[0]
    assert "chmod 600" in warned[0]


# -- a row that does not decode, an empty database -----------------------------------------------


async def test_an_undecodable_row_is_skipped_naming_its_loop(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    state = tmp_path / "state"
    config = sqlite_config(state, worker="scripted:latency=0.05")
    async with open_runtime(config) as runtime:
        good = runtime.handle(await runtime.start("|loop:3| good", loop_id="good-1"))
        bad = runtime.handle(await runtime.start("|loop:3| bad", loop_id="bad-1"))
        await trio.lowlevel.checkpoint()
    assert good.loop_id
    assert bad.loop_id
    with sqlite3.connect(state / "loopactors.db") as conn:
        conn.execute("UPDATE loops SET state = ? WHERE loop_id = 'bad-1'", (b'{"not": "a state"',))
    with caplog.at_level(logging.ERROR):
        async with open_runtime(config) as runtime:
            final = await runtime.handle("good-1").wait()
            listed = [s.loop_id for s in await runtime.list()]
    assert final.phase == "complete"
    assert listed == ["good-1"]
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("'bad-1'" in e and "does not decode" in e for e in errors), errors


async def test_an_empty_database_file_is_refused(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "loopactors.db").write_bytes(b"")
    with pytest.raises(LoopactorsError, match="is an empty file"):
        async with open_runtime(sqlite_config(state)):
            pass
    assert (state / "loopactors.db").stat().st_size == 0  # left as it was
    status = subprocess.run(  # noqa: ASYNC221 - the runtime is closed
        [sys.executable, "-m", "loopactors", "status", "--state", str(state)],
        capture_output=True, text=True, timeout=HANG, check=False,
    )  # fmt: skip
    assert status.returncode == 1
    assert "is an empty file" in status.stderr
