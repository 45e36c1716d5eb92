"""``loopactors history LOOP_ID --round N``: one round's whole output, from a state directory
or from a node (whose ``history`` sends output heads only)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

from tests.gateway.test_cli_node import NodeProcess
from tests.hang import HANG

CLI = [sys.executable, "-m", "loopactors"]

# A round that prints 300 numbered lines, far more than any table or output head shows, and
# a terminal escape that must reach the screen as text.
PRINTS = "print(chr(10).join(f'line {n}' for n in range(1, 301)) + chr(10) + chr(27) + '[2J')"
LINES = "\n".join(f"line {n}" for n in range(1, 301)) + "\n"
WHOLE = LINES + "\\x1b[2J\n"
WORKER = "command:" + shlex.join([sys.executable, "-c", PRINTS])


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=HANG, check=False)


def test_one_rounds_whole_output_from_a_state_directory(tmp_path: Path) -> None:
    run = cli("run", "|loop:2| count", "--worker", WORKER, "--state", str(tmp_path), "--json")
    assert run.returncode == 0, run.stderr
    loop_id = json.loads(run.stdout.splitlines()[-1])["loop_id"]
    shown = cli("history", loop_id[:8], "--round", "2", "--state", str(tmp_path))
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout == WHOLE
    record = json.loads(
        cli("history", loop_id, "--round", "1", "--state", str(tmp_path), "--json").stdout
    )
    # --json gives the output as recorded, the escape too.
    assert (record["round"], record["status"], record["output"]) == (
        1, "completed", LINES + "\x1b[2J\n"
    )  # fmt: skip
    missing = cli("history", loop_id, "--round", "3", "--state", str(tmp_path))
    assert missing.returncode == 1
    assert "has no round 3 (rounds 1..2)" in missing.stderr
    bad = cli("history", loop_id, "--round", "0", "--state", str(tmp_path))
    assert bad.returncode == 64
    assert "argument --round: a round number (1, 2, ...), not '0'" in bad.stderr


def test_one_rounds_whole_output_from_a_node(tmp_path: Path) -> None:
    node = NodeProcess(tmp_path / "node", "--worker", WORKER)
    try:
        run = node.cli("run", "|loop:1| count", "--json")
        assert run.returncode == 0, run.stderr
        loop_id = json.loads(run.stdout.splitlines()[-1])["loop_id"]
        heads = json.loads(node.cli("history", loop_id, "--json").stdout)
        assert len(heads["rounds"][0]["output"]) < len(WHOLE)  # the table's heads only
        shown = node.cli("history", loop_id, "--round", "1")
        assert shown.returncode == 0, shown.stderr
        assert shown.stdout == WHOLE
    finally:
        assert node.terminate() == 0
