"""Verified completion (a loop's ``until`` check, run after every completed round in the
workspace) and the dollar budget (docs/loops.md). Real shell commands, a real SQLite store."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import trio

from loopactors.errors import LoopSyntaxError
from loopactors.loops import RoundFinished, parse_loop
from loopactors.runtime import open_runtime
from loopactors.workers._check import check_until

from ..hang import HANG, PROMPT
from .conftest import sqlite_config


def writer(ws: Path, at_round: int) -> str:
    """A command worker that creates ``ws/done.txt`` in round ``at_round``."""
    script = (
        f'if [ "$LOOPACTORS_ROUND" = {at_round} ]; then touch {shlex.quote(str(ws))}/done.txt; '
        'fi; echo "worked on round $LOOPACTORS_ROUND"'
    )
    return f"command:sh -c {shlex.quote(script)}"


def alive(pid: int) -> bool:
    """A process that has not ended (a zombie waiting to be reaped has)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


def check_for(ws: Path) -> str:
    return f"test -f {shlex.quote(str(ws))}/done.txt || {{ echo 'done.txt is missing'; exit 3; }}"


def test_the_activation_takes_an_until_check() -> None:
    parsed = parse_loop('|loop:30 until="pytest -q"| fix the tests')
    assert parsed.until == "pytest -q"
    assert parsed.spec().until == "pytest -q"
    with pytest.raises(LoopSyntaxError, match="the until check is empty"):
        parse_loop('|loop:3 until=""| t')


async def test_the_check_passing_completes_the_loop_and_its_failures_reach_the_prompt(
    tmp_path: Path,
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    seen: list[object] = []
    async with open_runtime(sqlite_config(tmp_path / "state"), observer=seen.append) as rt:
        handle = rt.handle(
            await rt.start(
                "|loop:10| make done.txt",
                worker=writer(ws, 3),
                until=check_for(ws),
                stale_rounds_limit=10,
            )
        )
        final = await handle.wait()
        history = await handle.history()
    assert final.phase == "complete", final.reason
    assert final.reason == f"objective met: the check `{check_for(ws)}` passed after round 3"
    assert [r.check.exit_code if r.check else None for r in history] == [3, 3, 0]
    first = history[0].check
    assert first is not None
    assert first.output == "done.txt is missing\n"
    assert first.duration >= 0
    assert not first.passed
    # the failure went into the next round's prompt, by the documented template
    assert "done.txt is missing" not in history[0].prompt
    assert (
        f"The loop's check `{check_for(ws)}` failed after round 1 (exited with 3, "
        in history[1].prompt
    )
    assert "```text\ndone.txt is missing\n```" in history[1].prompt
    assert "The loop is complete when this check passes." in history[1].prompt
    assert "failed after round 2" in history[2].prompt
    assert "failed after round 1" not in history[2].prompt  # only the last check's
    finished = [e for e in seen if isinstance(e, RoundFinished)]
    assert [e.check.exit_code if e.check else None for e in finished] == [3, 3, 0]
    assert final.failing_checks == 0
    assert final.last_check is not None
    assert final.last_check.passed


async def test_claims_of_done_the_check_refutes_escalate(tmp_path: Path) -> None:
    async with open_runtime(sqlite_config(tmp_path / "state")) as rt:
        handle = rt.handle(
            await rt.start(
                "|loop:10| claim it",
                worker="scripted:done_at=2",
                until="false",
                max_unverified_claims=3,
            )
        )
        final = await handle.wait()
        history = await handle.history()
    assert final.phase == "escalated"
    assert final.trigger == "unverified_claims"
    assert "3 rounds in a row claimed the objective met while the check `false` failed" in (
        final.reason or ""
    )
    assert [r.unverified_claim for r in history] == [False, True, True, True]
    assert final.completed_rounds == 4


async def test_rounds_running_out_before_the_check_passes_is_no_success(tmp_path: Path) -> None:
    async with open_runtime(sqlite_config(tmp_path / "state")) as rt:
        handle = rt.handle(await rt.start("|loop:2| try", worker="scripted", until="exit 1"))
        final = await handle.wait()
    assert final.phase == "escalated"
    assert final.trigger == "until_not_met"
    assert final.reason == "the 2 rounds ran out and the check `exit 1` still failed after round 2"


async def test_a_check_past_its_timeout_is_ended_and_recorded(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    check = f"sleep 300 & echo $! > {shlex.quote(str(pidfile))}; wait"
    async with open_runtime(sqlite_config(tmp_path / "state", kill_grace=1.0)) as rt:
        handle = rt.handle(
            await rt.start("|loop:1| t", worker="scripted", until=check, until_timeout=0.5)
        )
        final = await handle.wait()
        (record,) = await handle.history()
    assert final.trigger == "until_not_met"
    assert record.check is not None
    assert record.check.exit_code is None
    assert record.check.error == "timed out after 0.5 s"
    assert not alive(int(pidfile.read_text()))  # its process group went with it


async def test_a_stop_during_the_check_ends_it_and_the_loop(tmp_path: Path) -> None:
    started = tmp_path / "started"
    pidfile = tmp_path / "pid"
    check = (
        f"sleep 300 & echo $! > {shlex.quote(str(pidfile))}; "
        f"touch {shlex.quote(str(started))}; wait"
    )
    async with open_runtime(sqlite_config(tmp_path / "state", kill_grace=1.0)) as rt:
        handle = rt.handle(
            await rt.start("|loop:3| t", worker="scripted:latency=0.01", until=check)
        )
        while not started.exists():  # the check is running
            await trio.sleep(0.02)
        final = await handle.stop()
    assert final.phase == "cancelled"
    assert not alive(int(pidfile.read_text()))


@pytest.mark.parametrize(
    ("until", "says"),
    [
        ("no-such-command-xyz --flag", "'no-such-command-xyz' was not found on PATH"),
        ("./missing.sh", "'./missing.sh' is not an executable file"),
        ("'unbalanced", "cannot be read"),
    ],
)
async def test_a_check_that_cannot_start_is_refused_at_admission(
    tmp_path: Path, until: str, says: str
) -> None:
    async with open_runtime(sqlite_config(tmp_path / "state")) as rt:
        with pytest.raises(LoopSyntaxError, match=says):
            await rt.start("|loop:2| t", worker="scripted", until=until)
        with pytest.raises(LoopSyntaxError, match="until_timeout must be a finite number > 0"):
            await rt.start("|loop:2| t", worker="scripted", until="true", until_timeout=0)
        assert await rt.list() == []


async def test_a_dollar_budget_stops_the_loop_before_a_round_over_it(tmp_path: Path) -> None:
    async with open_runtime(sqlite_config(tmp_path / "state")) as rt:
        handle = rt.handle(
            await rt.start(
                "|loop:10| spend",
                worker="python:tests.runtime.round_fns:spend_dollars",
                max_cost_usd=1.0,
            )
        )
        final = await handle.wait()
        history = await handle.history()
        with pytest.raises(LoopSyntaxError, match="max_cost_usd must be a finite number > 0"):
            await rt.start("|loop:2| t", max_cost_usd=0)
    # $0.40 a round: after round 3 the loop has spent $1.20, at or over $1.00
    assert [r.round for r in history] == [1, 2, 3]
    assert final.phase == "escalated"
    assert final.trigger == "cost_budget"
    assert final.reason == "$1.2000 spent of a budget of $1.0000"


async def test_an_until_timeout_without_a_check_is_refused_not_ignored(tmp_path: Path) -> None:
    async with open_runtime(sqlite_config(tmp_path / "state")) as rt:
        with pytest.raises(LoopSyntaxError, match="no until check to time: add --until CMD"):
            await rt.start("|loop:1| t", worker="scripted", until_timeout=5.0)
        spec = rt.build_spec('|loop:1 until="true"| t', until_timeout=5.0)
    assert (spec.until, spec.until_timeout) == ("true", 5.0)


@pytest.mark.parametrize("worker", ["scripted", "command:true", "codex", "gemini", "agent"])
async def test_a_dollar_budget_for_a_worker_that_reports_no_cost_is_refused(
    tmp_path: Path, worker: str
) -> None:
    # Its rounds' cost_usd is always 0: the budget would never be reached. Said, naming the
    # budgets that do hold for it, instead of a cap that is not one.
    kind = worker.partition(":")[0]
    async with open_runtime(sqlite_config(tmp_path / "state")) as rt:
        with pytest.raises(LoopSyntaxError) as info:
            await rt.start("|loop:2| t", worker=worker, max_cost_usd=5.0)
        assert await rt.list() == []
    said = str(info.value)
    assert f"max_cost_usd cannot be kept for a {kind} loop" in said
    assert "--token-budget N" in said
    assert "claude, aider" in said


async def test_a_node_wide_dollar_budget_does_not_refuse_such_loops(tmp_path: Path) -> None:
    config = sqlite_config(tmp_path / "state").replace(breaker={"max_cost_usd": 5.0})
    async with open_runtime(config) as rt:
        final = await (rt.handle(await rt.start("|loop:1| t", worker="scripted"))).wait()
    assert final.phase == "complete"


async def test_the_watchdog_gives_a_round_its_checks_time_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A check that runs longer than the round timeout plus the watchdog's grace, within its
    # own timeout: the round is not taken for lost, and the check's pass completes the loop.
    monkeypatch.setattr("loopactors.runtime._runner.WATCHDOG_GRACE", 0.3)
    async with open_runtime(sqlite_config(tmp_path / "state")) as rt:
        handle = rt.handle(
            await rt.start(
                "|loop:1| t",
                worker="scripted",
                until="sleep 1.5",
                round_timeout=0.2,
                until_timeout=30,
            )
        )
        final = await handle.wait()
        (record,) = await handle.history()
    assert record.status == "completed", record.error
    assert record.check is not None
    assert record.check.passed
    assert final.phase == "complete", final.reason


@pytest.mark.parametrize("how", ["timeout", "stop"])
async def test_a_check_that_ends_at_sigterm_is_not_waited_for_kill_grace(
    tmp_path: Path, how: str
) -> None:
    # `sleep` ends at SIGTERM: neither the timeout nor a stop waits out kill_grace (HANG here)
    # for a group whose only process is already gone.
    started = tmp_path / "started"
    check = f"touch {shlex.quote(str(started))}; exec sleep 300"
    async with open_runtime(sqlite_config(tmp_path / "state", kill_grace=HANG)) as rt:
        timeout = 0.5 if how == "timeout" else HANG
        handle = rt.handle(
            await rt.start("|loop:1| t", worker="scripted", until=check, until_timeout=timeout)
        )
        if how == "stop":
            while not started.exists():  # the check is running
                await trio.sleep(0.02)
            before = trio.current_time()
            final = await handle.stop()
            assert trio.current_time() - before < PROMPT
            assert final.phase == "cancelled"
            return
        final = await handle.wait()
        (record,) = await handle.history()
    assert final.trigger == "until_not_met"
    assert record.check is not None
    assert record.check.error == "timed out after 0.5 s"
    assert record.check.duration < PROMPT


@pytest.mark.parametrize(
    "until",
    [
        "exec pytest -q",
        "(cd . && true)",
        "( cd . && true )",
        "{ true; }",
        "command -v sh",
        "eval true",
        "ulimit -t 600; true",
        "umask 022 && true",
        ">/dev/null true",
        "2>&1 true",
        "! false",
        "pwd",
    ],
)
def test_a_check_in_any_shell_form_is_not_refused_as_a_missing_command(until: str) -> None:
    # The shell runs it (/bin/sh -c): its builtins, a subshell, a redirection first are
    # commands too, not programs to find on PATH.
    check_until(until, None)


def test_a_missing_program_after_an_opening_parenthesis_is_still_refused() -> None:
    with pytest.raises(ValueError, match="'pyest' was not found on PATH"):
        check_until("(pyest -q)", None)
