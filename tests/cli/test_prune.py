"""`loopactors prune` on real SQLite state directories."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loopactors.cli._commands import main
from loopactors.cli._prune import parse_duration
from loopactors.errors import ConfigError
from loopactors.loops._events import LoopFinished, RoundStarted
from loopactors.loops._model import TERMINAL_PHASES, LoopSpec, LoopState, Phase, RoundRecord
from loopactors.runtime._lock import lock_state_dir
from loopactors.storage import Write, open_backend
from tests.hang import HANG

DAY = 86_400.0
SPEC = LoopSpec(task="some task", rounds=3)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30d", 30 * DAY),
        ("12h", 12 * 3_600),
        ("90m", 90 * 60),
        ("3600s", 3_600),
        ("3600", 3_600),
        ("0", 0),
        ("1.5h", 5_400),
        (" 2D ", 2 * DAY),
        (".5d", DAY / 2),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "text",
    # Digits of other scripts too (Arabic-Indic, fullwidth): float() would read them.
    ["", "d", "-5", "5w", "1e3", "inf", "nan", "3 days", "1h30m", "\u0663\u0660d", "\uff13\uff10"],
)
def test_parse_duration_refuses_naming_what_is_accepted(text: str) -> None:
    with pytest.raises(ConfigError, match=r"invalid duration .*; accepted: a number of seconds"):
        parse_duration(text)


@pytest.mark.parametrize("text", ["36501d", "99999999999999d", "9" * 400])
def test_parse_duration_refuses_more_than_a_hundred_years(text: str) -> None:
    with pytest.raises(ConfigError, match=r"is too long; accepted: .*up to 36500d") as info:
        parse_duration(text)
    assert len(str(info.value)) < 200  # a long input is cut in the message


def loop(loop_id: str, phase: Phase, days_ago: float) -> list[Write]:
    at = time.time() - days_ago * DAY
    state = LoopState(
        loop_id=loop_id, spec=SPEC, phase=phase, round=2, created_at=at, updated_at=at
    )
    final = (
        (LoopFinished(loop_id=loop_id, at=at, phase=phase, rounds=3, completed_rounds=2),)
        if phase in TERMINAL_PHASES
        else ()
    )
    return [
        Write(
            state=state,
            round=RoundRecord(loop_id=loop_id, round=n, status="completed", output="x"),
            events=(RoundStarted(loop_id=loop_id, at=at, round=n, rounds=3, seed_source="task"),),
        )
        for n in (1, 2)
    ] + [Write(state=state, events=final)]


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    backend = open_backend("sqlite", tmp_path)
    backend.commit(
        [
            *loop("old", "complete", 40),
            *loop("old-failed", "error", 31),
            *loop("recent", "cancelled", 2),
            *loop("old-paused", "paused", 90),
        ]
    )
    backend.close()
    return tmp_path


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def stored_ids(state_dir: Path) -> set[str]:
    backend = open_backend("sqlite", state_dir)
    try:
        return {s.loop_id for s in backend.list_loops()}
    finally:
        backend.close()


def test_dry_run_then_prune(state_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    everything = stored_ids(state_dir)
    code, out, _ = run(
        capsys, "prune", "--older-than", "30d", "--state", str(state_dir), "--dry-run"
    )
    assert code == 0
    assert out.startswith("would remove 2 loops, 4 rounds, 6 events (loops that finished before ")
    assert out.rstrip().endswith(f"in {state_dir}")
    assert stored_ids(state_dir) == everything

    args = ("prune", "--older-than", "30d", "--state", str(state_dir), "--json")
    code, out, _ = run(capsys, *args)
    assert code == 0
    report = json.loads(out)
    assert {k: report[k] for k in ("dry_run", "loops", "rounds", "events")} == {
        "dry_run": False,
        "loops": 2,
        "rounds": 4,
        "events": 6,
    }
    assert report["before"] == pytest.approx(time.time() - 30 * DAY, abs=60)
    assert stored_ids(state_dir) == {"recent", "old-paused"}  # paused: live, however old

    code, _, err = run(capsys, "history", "old-failed", "--state", str(state_dir))
    assert code == 1
    assert "no loop 'old-failed'" in err
    code, out, _ = run(capsys, "prune", "--older-than", "30d", "--state", str(state_dir))
    assert (code, out.split(" (")[0]) == (0, "removed 0 loops, 0 rounds, 0 events")


def test_bad_duration_is_a_usage_error(state_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "prune", "--older-than", "a month", "--state", str(state_dir))
    assert code == 64
    assert "argument --older-than: invalid duration 'a month'; accepted: " in err
    assert "30d, 12h, 90m, 3600s" in err
    code, _, err = run(capsys, "prune", "--state", str(state_dir))
    assert code == 64
    assert "--older-than" in err
    assert len(stored_ids(state_dir)) == 4


def test_a_state_directory_without_a_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "missing"
    code, out, _ = run(capsys, "prune", "--older-than", "1d", "--state", str(missing))
    assert (code, out.strip()) == (0, f"nothing to prune: no store in {missing}")
    assert not missing.exists()  # nothing made


def test_prune_refuses_a_directory_a_runtime_holds_but_a_dry_run_reads_it(
    state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with lock_state_dir(state_dir):
        code, _, err = run(capsys, "prune", "--older-than", "1d", "--state", str(state_dir))
        assert code == 1
        assert "is in use by another loopactors runtime" in err
        assert "retention_days" in err
        args = ("prune", "--older-than", "1d", "--state", str(state_dir), "--dry-run")
        code, out, _ = run(capsys, *args)
        assert code == 0
        assert out.startswith("would remove 3 loops")
    assert len(stored_ids(state_dir)) == 4


def test_prune_a_loop_the_command_line_ran(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cli = [sys.executable, "-m", "loopactors"]
    ran = subprocess.run(
        [*cli, "run", "|loop:2| hello", "--state", str(tmp_path), "--json"],
        capture_output=True,
        text=True,
        timeout=HANG,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    loop_id = json.loads(ran.stdout.splitlines()[-1])["loop_id"]
    time.sleep(0.01)  # the cutoff is strict: let the wall clock pass the loop's end
    pruned = subprocess.run(
        [*cli, "prune", "--older-than", "0", "--state", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=HANG,
        check=False,
    )
    assert pruned.returncode == 0, pruned.stderr
    assert pruned.stdout.startswith("removed 1 loop, 2 rounds, ")
    assert stored_ids(tmp_path) == set()
    code, _, err = run(capsys, "history", loop_id, "--state", str(tmp_path))
    assert code == 1
    assert f"no loop {loop_id!r}" in err
