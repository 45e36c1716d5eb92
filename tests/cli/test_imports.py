"""The quick commands import only what they use (see the note in cli/_commands.py).

Each command runs in a fresh interpreter, which then reports the modules it loaded: trio,
the runtime's actors, the workers and agent, the gateway and client, the REPL and
importlib.metadata cost start-up time and are not needed to read a state directory.
The interpreter runs without the `site` module (`-S`, this process's `sys.path` given as
PYTHONPATH): a site-packages `.pth` file may import `typing` or `importlib.metadata` at
start-up, which would hide what the command itself loads. Modules present before the
command's import are not counted either.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loopactors.loops import LoopSpec, LoopState, RoundRecord
from loopactors.storage import SqliteBackend, Write
from tests.hang import HANG

#: A bare interpreter that still finds what this one finds (see the module's docstring).
BARE = [sys.executable, "-S"]
BARE_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}

NEVER = [
    "trio",
    "loopactors.actors",
    "loopactors.runtime._api",
    "loopactors.runtime._runner",
    "loopactors.workers",
    "loopactors.agent",
    "loopactors.gateway",
    "loopactors.client",
    "loopactors.stress._run",
    "loopactors.cli._repl",
    "prompt_toolkit",
    "httpx",
    "coredis",
    "psycopg",
    "importlib.metadata",
]


def loaded_by(*argv: str) -> tuple[int, str, list[str]]:
    code = (
        "import sys, json; before = set(sys.modules); from loopactors.cli import main; "
        "code = main(sys.argv[1:]); "
        f"print(json.dumps([code, [m for m in {NEVER!r} if m in sys.modules.keys() - before]]), "
        "file=sys.stderr)"
    )
    result = subprocess.run(
        [*BARE, "-c", code, *argv], capture_output=True, text=True, timeout=HANG, check=True,
        env=BARE_ENV,
    )  # fmt: skip
    exit_code, loaded = json.loads(result.stderr.strip().splitlines()[-1])
    return exit_code, result.stdout, loaded


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    backend = SqliteBackend(tmp_path / "loopactors.db")
    state = LoopState(loop_id="l1", spec=LoopSpec(task="t", rounds=2), phase="complete")
    record = RoundRecord(loop_id="l1", round=1, status="completed", output="out")
    backend.commit([Write(state=state, round=record)])
    backend.close()
    return tmp_path


@pytest.mark.parametrize(
    "argv",
    [
        ["status"],
        ["status", "l1"],
        ["status", "--json"],
        ["history", "l1"],
        ["history", "l1", "--json"],
    ],
)
def test_reading_a_state_directory_loads_no_runtime(state_dir: Path, argv: list[str]) -> None:
    code, out, loaded = loaded_by(*argv, "--state", str(state_dir))
    assert code == 0
    assert "l1" in out
    assert loaded == []


@pytest.mark.parametrize("argv", [["--help"], ["version"], ["status", "--help"]])
def test_help_and_version_load_no_runtime(argv: list[str]) -> None:
    code, out, loaded = loaded_by(*argv)
    assert code == 0
    assert out
    assert loaded == []


def test_the_worker_command_still_lists_its_kinds() -> None:
    # Its options load the workers (they name the kinds): only when it is the command.
    code, out, loaded = loaded_by("worker", "--help")
    assert code == 0
    assert "--kinds" in out
    assert "scripted" in out
    assert "loopactors.workers" in loaded


def test_context_check_on_a_small_ledger_loads_no_msgspec(tmp_path: Path) -> None:
    # loop-context's everyday call: the standard library reads the ledger (start-up).
    ledger = tmp_path / "ledger.json"
    attempts = [{"iteration": 1, "outcome": "failure", "error": "E: x", "tokensUsed": 5}]
    ledger.write_text(json.dumps({"goal": "g", "attempts": attempts}))
    code = (
        "import sys; before = set(sys.modules); from loopactors.cli import main; "
        "code = main(sys.argv[1:]); "
        "print(code, sorted(m for m in ('msgspec', 'typing', 'inspect', 'decimal', "
        "'loopactors.ledger._model') if m in sys.modules.keys() - before), file=sys.stderr)"
    )
    result = subprocess.run(
        [*BARE, "-c", code, "context", "--check", "--json", "-f", str(ledger)],
        capture_output=True, text=True, timeout=HANG, check=True, env=BARE_ENV,
    )  # fmt: skip
    assert json.loads(result.stdout)["trigger"] == "ok"
    assert result.stderr.strip().splitlines()[-1] == "0 []"
