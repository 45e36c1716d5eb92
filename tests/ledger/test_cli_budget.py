"""``--budget-from-pattern`` and the daily cap through a fake ``loop-cost`` first on PATH."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loopactors.ledger._cli import main
from tests.hang import HANG

from .test_cli_process import CONTEXT

FAILED = "loop-context failed: "
LEDGER = json.dumps(
    {
        "goal": "g",
        "attempts": [{"action": "a", "outcome": "failure", "error": "E", "tokensUsed": 9500}],
    }
)

# Enough of loop-cost 1.2.0 for the tests: two patterns, the real error texts, and switches
# (environment variables) for the broken-output cases.
FAKE = """
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(json.dumps(args) + "\\n")
mode = os.environ.get("FAKE_MODE", "")
if mode == "silent-fail":
    sys.exit(3)
if mode == "empty":
    sys.exit(0)
if mode == "garbage":
    print("not json"); sys.exit(0)
pattern = args[args.index("--pattern") + 1]
level = args[args.index("--level") + 1]
caps = {"ci-sweeper": (9500, 6508, 1000000), "tiny": (100, None, 50)}
if pattern not in caps:
    print(f"Unknown pattern: {pattern}. Use --list for ids.", file=sys.stderr); sys.exit(1)
if level not in ("L1", "L2", "L3"):
    print(f"Invalid level: {level}. Valid: L1, L2, L3", file=sys.stderr); sys.exit(1)
realistic, caching, cap = caps[pattern]
out = {"patternId": pattern, "scenarios": {"realistic": {"tokensPerRun": realistic},
       "action": {"tokensPerRun": 200000}, "report": {"tokensPerRun": 50000}}}
if mode != "no-cap":
    out["suggestedDailyCap"] = cap
if "--with-caching" in args and caching is not None:
    out["scenarios"]["caching"] = {"tokensPerRun": caching}
print(json.dumps(out, indent=2))
"""


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Install the fake; returns its argument log (one JSON list per call)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "loop-cost"
    exe.write_text(f"#!{sys.executable}\n{FAKE}", encoding="utf-8")
    exe.chmod(0o755)
    log = tmp_path / "calls.log"
    log.touch()
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_LOG", str(log))
    monkeypatch.chdir(tmp_path)
    return log


def calls(log: Path) -> list[list[str]]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def run(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> tuple[int, str, str]:
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(LEDGER.encode())))
    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_budget_from_pattern(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, fake: Path
) -> None:
    code, out, _ = run(capsys, monkeypatch, ["--check", "--budget-from-pattern", "ci-sweeper"])
    assert (code, out) == (
        2,
        "ESCALATE [token-budget] — Token budget reached (9500 ≥ 9500). Escalating to avoid "
        "cost blowup.\n",
    )
    assert calls(fake) == [["--pattern", "ci-sweeper", "--level", "L1", "--json"]]


def test_budget_lookup_arguments(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, fake: Path
) -> None:
    args = ["--budget-from-pattern", "ci-sweeper", "--budget-scenario", "caching", "--budget-level",
            "L2", "--budget-cadence", "1h", "--budget-conservative", "--summary"]  # fmt: skip
    assert run(capsys, monkeypatch, args)[0] == 0  # resolved for every operation
    assert calls(fake)[-1] == [
        "--pattern", "ci-sweeper", "--level", "L2", "--cadence", "1h", "--conservative",
        "--with-caching", "--json",
    ]  # fmt: skip
    # Absent scenario and level (flag at the end) fall back to the defaults.
    run(capsys, monkeypatch, ["--check", "--budget-from-pattern", "ci-sweeper", "--budget-level"])
    assert calls(fake)[-1] == ["--pattern", "ci-sweeper", "--level", "L1", "--json"]
    code, out, _ = run(
        capsys, monkeypatch, ["--check", "--budget-from-pattern", "ci-sweeper", "--budget-scenario"]
    )
    assert code == 2
    assert "[token-budget]" in out


def test_explicit_token_budget_wins(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, fake: Path
) -> None:
    args = ["--check", "--budget-from-pattern", "nope", "--token-budget", "100000"]
    assert run(capsys, monkeypatch, args)[0] == 0
    assert calls(fake) == []


@pytest.mark.parametrize(
    "case",
    [
        (["--budget-scenario", "noop"], "",
         "Invalid --budget-scenario: noop. Valid: realistic, action, report, caching"),
        (["--budget-scenario", ""], "",
         "Invalid --budget-scenario: . Valid: realistic, action, report, caching"),
        ([], "silent-fail", "loop-cost exited with code 3."),
        ([], "empty", "loop-cost produced no output."),
        ([], "garbage", "loop-cost produced output that could not be parsed as JSON."),
        (["--budget-level", ""], "", "Invalid level: . Valid: L1, L2, L3"),
        (["--budget-scenario", "caching", "--budget-from-pattern", "tiny"], "",
         "loop-cost output missing scenarios.caching.tokensPerRun. This pattern may be "
         "missing stable_fraction in registry.yaml."),
        (["--budget-from-pattern", "not-a-pattern"], "",
         "Unknown pattern: not-a-pattern. Use --list for ids."),
    ],
)  # fmt: skip
def test_budget_errors(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    fake: Path,
    case: tuple[list[str], str, str],
) -> None:
    args, mode, message = case
    monkeypatch.setenv("FAKE_MODE", mode)
    result = run(capsys, monkeypatch, ["--prune", "--budget-from-pattern", "ci-sweeper", *args])
    assert result == (1, "", f"{FAILED}{message}\n")


def test_resolved_budget_is_checked_by_the_breaker(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    exe = bindir / "loop-cost"
    exe.write_text('#!/bin/sh\necho \'{"scenarios": {"realistic": {"tokensPerRun": 1.5}}}\'\n')
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", str(bindir))
    code, _, err = run(capsys, monkeypatch, ["--check", "--budget-from-pattern", "x"])
    assert (code, err) == (
        1,
        f"{FAILED}tokenBudget must be a positive integer; got 1.5. "
        "An invalid value would switch this rule off.\n",
    )
    # Not range-checked when the breaker does not run.
    assert run(capsys, monkeypatch, ["--summary", "--budget-from-pattern", "x"])[0] == 0


def test_missing_loop_cost(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert run(capsys, monkeypatch, ["--check", "--budget-from-pattern", "ci-sweeper"]) == (
        1,
        "",
        f"{FAILED}Resolving a budget from a pattern requires @cobusgreyling/loop-cost. "
        "Install it, or run from the loop-engineering monorepo.\n",
    )


def test_daily_budget(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, fake: Path
) -> None:
    args = ["--check", "--daily-budget-from-pattern", "tiny", "--daily-state-dir", "state"]
    code, out, _ = run(capsys, monkeypatch, args)
    assert (code, out) == (
        2,
        'ESCALATE [daily-budget] — Daily token spend for pattern "tiny" reached 9500 (cap 50). '
        "Escalating to avoid cost blowup.\n",
    )
    assert calls(fake) == [["--pattern", "tiny", "--level", "L1", "--json"]]
    code, out, _ = run(capsys, monkeypatch, [*args, "--json"])
    assert code == 2
    assert list(json.loads(out)) == [
        "iterations", "tokensUsed", "shouldContinue", "escalate", "trigger", "reason",
    ]  # fmt: skip
    assert json.loads(out)["tokensUsed"] == 9500  # still the run's tokens
    assert json.loads(Path("state/daily-spend.tiny.json").read_text())["tokensUsedToday"] == 19000


def test_daily_budget_errors_after_recording(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, fake: Path
) -> None:
    monkeypatch.setenv("FAKE_MODE", "no-cap")
    code, _, err = run(capsys, monkeypatch, ["--check", "--daily-budget-from-pattern", "tiny"])
    assert (code, err) == (1, f"{FAILED}loop-cost output missing suggestedDailyCap.\n")
    assert Path(".loop-context/daily-spend.tiny.json").exists()
    monkeypatch.setenv("FAKE_MODE", "")
    code, _, err = run(capsys, monkeypatch, ["--check", "--daily-budget-from-pattern", "zzz"])
    assert err == f"{FAILED}Unknown pattern: zzz. Use --list for ids.\n"


def test_daily_budget_skipped_when_already_escalating(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, fake: Path
) -> None:
    args = ["--check", "--daily-budget-from-pattern", "unknown", "--max-iterations", "1"]
    code, out, _ = run(capsys, monkeypatch, args)
    assert code == 2
    assert "[max-iterations]" in out
    assert calls(fake) == []  # the cap is never looked up, so the unknown pattern goes unnoticed
    assert Path(".loop-context/daily-spend.unknown.json").exists()


def test_fake_loop_cost_in_a_real_process(fake: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [*CONTEXT, "--check", "--budget-from-pattern", "nope"],
        input=LEDGER, capture_output=True, text=True, timeout=HANG, check=False,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )  # fmt: skip
    assert (result.returncode, result.stdout, result.stderr) == (
        1,
        "",
        f"{FAILED}Unknown pattern: nope. Use --list for ids.\n",
    )
