"""``loopactors context`` as a real process: start-up imports, stdin, exit codes, wiring."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.hang import HANG

ROOT = Path(__file__).resolve().parents[2]
#: The ledger CLI in its own interpreter, independent of the top-level dispatcher.
CONTEXT = [
    sys.executable,
    "-c",
    "import sys; from loopactors.ledger._cli import main; sys.exit(main(sys.argv[1:]))",
]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
LEDGER = json.dumps(
    {
        "goal": "g",
        "attempts": [{"action": f"a{i}", "outcome": "failure", "error": "E"} for i in range(3)],
    }
)


def context(
    *args: str, stdin: str = "", cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CONTEXT, *args], input=stdin, capture_output=True, text=True, env=ENV, cwd=cwd,
        timeout=HANG, check=False,
    )  # fmt: skip


def test_start_up_imports_no_trio_rich_or_runtime() -> None:
    code = (
        "import sys, io; from loopactors.cli import main; out = sys.stdout; "
        "sys.stdout = io.StringIO(); rc = main(['context', '--help']); sys.stdout = out; "
        "print(rc, *(m in sys.modules for m in ('trio', 'rich', 'loopactors.runtime')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=HANG,
        check=True,
    )  # fmt: skip
    assert result.stdout.split() == ["0", "False", "False", "False"]


def test_ledger_cli_imports_no_trio_rich_or_runtime() -> None:
    code = (
        "import sys, io; from loopactors.ledger._cli import main; "
        'sys.stdin = io.TextIOWrapper(io.BytesIO(b\'{"goal":"g","attempts":[]}\')); '
        "out = sys.stdout; sys.stdout = io.StringIO(); rc = main(['--check']); sys.stdout = out; "
        "print(rc, *(m in sys.modules for m in ('trio', 'rich', 'loopactors.runtime')))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=ENV, timeout=HANG,
        check=True,
    )  # fmt: skip
    assert result.stdout.split() == ["0", "False", "False", "False"]


def test_python_m_loopactors_context() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "loopactors", "context", "--check"], input=LEDGER,
        capture_output=True, text=True, env=ENV, timeout=HANG, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stdout.startswith("ESCALATE [stagnation] — ")


def test_exit_codes_and_streams(tmp_path: Path) -> None:
    escalate = context("--check", stdin=LEDGER)
    assert (escalate.returncode, escalate.stderr) == (0 + 2, "")
    assert escalate.stdout == (
        'ESCALATE [stagnation] — Same error repeated 3\u00d7 in a row (threshold 3): "E". '
        "Escalating instead of retrying.\n"
    )
    ok = context("--check", "--stagnation", "4", stdin=LEDGER)
    assert (ok.returncode, ok.stdout) == (
        0,
        "CONTINUE [ok] — Within limits — cleared to continue.\n",
    )
    error = context("--check", "--no-progress", "0", stdin=LEDGER)
    assert (error.returncode, error.stdout, error.stderr) == (
        1, "", 'loop-context failed: --no-progress must be a positive integer; got "0".\n',
    )  # fmt: skip
    empty = context("--check")
    assert empty.returncode == 1
    assert "No ledger provided." in empty.stderr
    path = tmp_path / "run.json"
    path.write_text(LEDGER, encoding="utf-8")
    status = context("-f", str(path))
    assert status.returncode == 2
    assert status.stdout.endswith(
        "\nCircuit breaker: ESCALATE [stagnation]\n"
        '  Same error repeated 3\u00d7 in a row (threshold 3): "E". '
        "Escalating instead of retrying.\n"
    )
    assert context("--inject", "-f", str(path)).returncode == 0
    assert json.loads(context("--prune", "-f", str(path)).stdout)["attempts"][0]["repeated"] == 3
    assert context("--help").stdout.startswith("loop-context — ")
