"""The daily-spend state file and its lock (spec §10.2), and the ``--on-exceed`` hook (§11)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from loopactors.ledger import BreakerDecision, utc_day
from loopactors.ledger import _cli_daily as daily
from loopactors.ledger._cli import main
from loopactors.ledger._cli_args import CliError
from tests.hang import HANG, PROMPT

from .test_cli_process import CONTEXT, ENV


def ledger(tokens: int, n: int = 1) -> str:
    attempts = [{"action": f"a{i}", "outcome": "failure", "tokensUsed": tokens} for i in range(n)]
    return json.dumps({"goal": "g", "attempts": attempts})


DECISION = BreakerDecision(
    iterations=3,
    tokens_used=0,
    should_continue=False,
    escalate=True,
    trigger="no-progress",
    reason="r",
)


def test_state_file_format_and_roll_over(tmp_path: Path) -> None:
    state_file = tmp_path / "s" / "daily-spend.p.json"
    assert daily.add_daily_spend(str(tmp_path / "s"), "p", 100).tokens_used_today == 100
    assert state_file.read_text() == (
        f'{{\n  "date": "{utc_day(time.time())}",\n  "tokensUsedToday": 100\n}}'
    )
    assert daily.add_daily_spend(str(tmp_path / "s"), "p", -30).tokens_used_today == 70
    state_file.write_text('{"date": "2000-01-01", "tokensUsedToday": 999}')
    assert daily.add_daily_spend(str(tmp_path / "s"), "p", 5).tokens_used_today == 5
    state_file.write_text("corrupt")
    assert daily.add_daily_spend(str(tmp_path / "s"), "p", 7).tokens_used_today == 7
    assert not (tmp_path / "s" / ".daily-spend.p.lock").exists()
    # Patterns never share a file.
    assert daily.add_daily_spend(str(tmp_path / "s"), "q", 1).tokens_used_today == 1


def test_state_dir_errors(tmp_path: Path) -> None:
    with pytest.raises(CliError, match='The "path" argument must be of type string'):
        daily.add_daily_spend(None, "p", 1)
    with pytest.raises(FileNotFoundError):
        daily.add_daily_spend("", "p", 1)


def test_missing_state_dir_value_via_cli(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(ledger(1).encode())))
    args = [
        "--check",
        "--max-iterations",
        "1",
        "--daily-budget-from-pattern",
        "p",
        "--daily-state-dir",
    ]
    assert main(args) == 1
    assert capsys.readouterr().err.startswith('loop-context failed: The "path" argument')


def test_stale_lock_is_reclaimed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lock = tmp_path / ".daily-spend.p.lock"
    lock.touch()
    old = time.time() - 31
    os.utime(lock, (old, old))

    def never(seconds: float) -> None:
        raise AssertionError("a stale lock is reclaimed at once, never waited for")

    monkeypatch.setattr(time, "sleep", never)
    assert daily.add_daily_spend(str(tmp_path), "p", 3).tokens_used_today == 3
    assert not lock.exists()


def test_fresh_lock_is_waited_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(daily, "LOCK_STALE_SECONDS", 0.3)
    lock = tmp_path / ".daily-spend.p.lock"
    lock.touch()
    # The lock's age is measured as the code measures it: from its (coarse) file time.
    touched = lock.stat().st_mtime
    assert daily.add_daily_spend(str(tmp_path), "p", 3).tokens_used_today == 3
    assert time.time() - touched > 0.3


def test_lock_timeout_when_others_keep_it_fresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(daily, "LOCK_STALE_SECONDS", 0.3)
    lock = tmp_path / ".daily-spend.p.lock"
    lock.touch()
    stop = threading.Event()

    def keep_fresh() -> None:
        while not stop.is_set():
            lock.touch()
            time.sleep(0.01)

    thread = threading.Thread(target=keep_fresh)
    thread.start()
    try:
        with pytest.raises(CliError) as info:
            daily.add_daily_spend(str(tmp_path), "p", 3)
    finally:
        stop.set()
        thread.join()
    assert str(info.value) == (
        'Timed out waiting for daily-spend lock on "p". If no other loop-context process is '
        f"running, delete {lock} manually."
    )


WORKER = """
import io, sys
from loopactors.ledger._cli import main
text = sys.stdin.read()
for _ in range(int(sys.argv[1])):
    sys.stdin = io.TextIOWrapper(io.BytesIO(text.encode()))
    assert main(["--check", "--max-iterations", "1", "--daily-budget-from-pattern", "p",
                 "--daily-state-dir", sys.argv[2]]) == 2
"""


def test_concurrent_processes_lose_no_increment(tmp_path: Path) -> None:
    rounds, workers = 40, 3
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, str(rounds), str(tmp_path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            env=ENV,
            text=True,
        )
        for _ in range(workers)
    ]
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write(ledger(1000))
        proc.stdin.close()
    assert [proc.wait(timeout=HANG) for proc in procs] == [0] * workers
    state = json.loads((tmp_path / "daily-spend.p.json").read_text())
    assert state["tokensUsedToday"] == rounds * workers * 1000


def test_two_concurrent_cli_checks(tmp_path: Path) -> None:
    args = ["--check", "--json", "--max-iterations", "1", "--daily-budget-from-pattern", "p"]
    procs = [
        subprocess.Popen(
            [*CONTEXT, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=tmp_path,
            env=ENV,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [proc.communicate(ledger(1000), timeout=HANG)[0] for proc in procs]
    assert [json.loads(out)["trigger"] for out in outs] == ["max-iterations"] * 2
    state = json.loads((tmp_path / ".loop-context" / "daily-spend.p.json").read_text())
    assert state["tokensUsedToday"] == 2000


# -- --on-exceed -----------------------------------------------------------------------------


def test_hook_gets_compact_json_before_the_decision_line(tmp_path: Path) -> None:
    out_file = tmp_path / "payload.json"
    hook = f"cat > {out_file}; echo hook-ran; exit 7"
    result = subprocess.run(
        [*CONTEXT, "--check", "--max-iterations", "1", "--on-exceed", hook],
        input=ledger(5),
        capture_output=True,
        text=True,
        env=ENV,
        timeout=HANG,
        check=False,
    )
    assert result.returncode == 2  # the hook's own status is ignored
    assert result.stdout == (
        "hook-ran\nESCALATE [max-iterations] — Iteration cap reached (1 ≥ 1). Escalating.\n"
    )
    assert out_file.read_text() == (
        '{"iterations":1,"tokensUsed":5,"shouldContinue":false,"escalate":true,'
        '"trigger":"max-iterations","reason":"Iteration cap reached (1 ≥ 1). Escalating."}'
    )


def test_hook_that_ignores_a_large_payload(tmp_path: Path) -> None:
    text = json.dumps(
        {"goal": "g", "attempts": [{"outcome": "failure", "error": "x" * 500_000}] * 3}
    )
    result = subprocess.run(
        [*CONTEXT, "--check", "--on-exceed", "exit 1"],
        input=text,
        capture_output=True,
        text=True,
        env=ENV,
        timeout=HANG,
        check=False,
    )
    assert result.returncode == 2
    assert result.stdout.startswith("ESCALATE [stagnation]")


def test_hook_runs_only_on_escalation_in_check(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    for args in (["--check"], ["--status", "--max-iterations", "1"]):
        result = subprocess.run(
            [*CONTEXT, *args, "--on-exceed", f"touch {marker}"],
            input=ledger(5),
            capture_output=True,
            text=True,
            env=ENV,
            timeout=HANG,
            check=False,
        )
        assert result.returncode in (0, 2)
    assert not marker.exists()


def test_hook_time_bound(capfd: pytest.CaptureFixture[str]) -> None:
    started = time.monotonic()
    daily.run_hook("sleep 3600 & sleep 3600", DECISION, timeout=0.5)
    assert time.monotonic() - started < PROMPT
    assert capfd.readouterr().err == "loop-context: --on-exceed hook killed after 0.5 s.\n"
    assert daily.HOOK_TIMEOUT == 10


def test_hook_that_cannot_start(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError("spawn /bin/sh ENOENT")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    daily.run_hook("whatever", DECISION)
    assert capsys.readouterr().err == (
        "loop-context: --on-exceed hook failed to start: spawn /bin/sh ENOENT\n"
    )


def test_a_hook_that_leaves_a_background_process_is_still_bounded(tmp_path: Path) -> None:
    import time as _time

    from loopactors.ledger._cli_daily import run_hook
    from loopactors.ledger._model import BreakerDecision

    marker = tmp_path / "pid"
    decision = BreakerDecision(
        iterations=3, tokens_used=0, should_continue=False, escalate=True,
        trigger="stagnation", reason="r",
    )  # fmt: skip
    started = _time.monotonic()
    run_hook(f"sleep 3600 & echo $! > {marker}", decision, timeout=0.5)
    assert _time.monotonic() - started < PROMPT
    pid = int(marker.read_text())
    deadline = _time.monotonic() + HANG
    while _time.monotonic() < deadline:  # killed with its group (PID 1 reaps it soon after)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
            break
        _time.sleep(0.05)
    else:
        raise AssertionError("the hook's background process survived")


def test_concurrent_waiters_reclaiming_a_stale_lock_lose_no_increment(tmp_path: Path) -> None:
    # A holder that crashed left its lock file behind: every waiter sees it stale at once.
    lock = tmp_path / ".daily-spend.p.lock"
    lock.write_text("")
    old = time.time() - 120
    os.utime(lock, (old, old))
    workers = 6
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, "5", str(tmp_path)],
            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, env=ENV, text=True,
        )
        for _ in range(workers)
    ]  # fmt: skip
    for proc in procs:
        assert proc.stdin is not None
        proc.stdin.write(ledger(1000))
        proc.stdin.close()
    assert [proc.wait(timeout=HANG) for proc in procs] == [0] * workers
    state = json.loads((tmp_path / "daily-spend.p.json").read_text())
    assert state["tokensUsedToday"] == 5 * workers * 1000
