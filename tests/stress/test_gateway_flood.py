"""``loopactors stress --gateway-flood``: the gateway soak as a command (docs/stress.md).

Each run starts a real node process on loopback; the small ones here take 3-5 s (a node
start, a few command-worker rounds and the flood around them). The long soak is
tests/gateway/test_soak.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loopactors.cli import main
from loopactors.errors import ConfigError
from loopactors.stress._flood import FloodOptions


def test_a_small_flood_holds_every_check_and_exits_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "stress", "--gateway-flood", "--connections", "150", "--loops", "2",
            "--rounds", "3", "--state", str(tmp_path / "state"), "--json",
        ]
    )  # fmt: skip
    report = json.loads(capsys.readouterr().out)
    assert code == 0, report
    assert report["ok"] is True
    assert report["url"].startswith("ws://127.0.0.1:")  # loopback only
    assert report["connections_held"] == 150
    assert report["churned"] > 0
    assert report["status_checks"] >= 1
    assert report["status_max_s"] < 10
    assert report["rounds_completed"] == 6
    assert report["phases"] == {"complete": 2}
    assert {check["name"] for check in report["checks"]} == {
        "flood_ran", "status_in_time", "rounds_completed", "node_alive", "no_traceback",
        "log_rate_limited",
    }  # fmt: skip
    assert all(check["violations"] == 0 for check in report["checks"])
    assert "serving ws://127.0.0.1:" in (tmp_path / "state" / "flood-node.log").read_text()


def test_failed_rounds_fail_the_run_with_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "stress", "--gateway-flood", "--connections", "30", "--loops", "1",
            "--rounds", "2", "--worker", "command:false",
        ]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 1
    assert "FAIL every round of every loop completed" in out
    assert "CHECKS FAILED" in out


def test_flood_options_are_checked(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stress", "--gateway-flood", "--crash-rate", "0.1"]) == 1
    assert "--crash-rate cannot go with it" in capsys.readouterr().err
    assert main(["stress", "--gateway-flood", "--descriptors", "100"]) == 1
    assert "fd_reserve" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="--connections must be from 0 to 20000"):
        FloodOptions(connections=10**6).check()
    with pytest.raises(ConfigError, match="--flood-seconds must be seconds > 0"):
        FloodOptions(seconds=float("nan")).check()
