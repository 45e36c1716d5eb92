"""`loopactors context` next to the real reference, loop-context 1.5.0 from npm, under node.

The summary's grouping is exact but not the reference's quadratic scan, and the breaker reads
ledger JSON its own way, so both are compared with the reference itself on ledgers made to
sit near the similarity threshold. The reference is looked for where ``bench/ledger.py`` and
``.ci/run`` install it (``$XDG_CACHE_HOME/loopactors/loop-context-1.5.0``, ``~/.cache`` by
default); without node or that install the tests are skipped.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.hang import HANG

_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
_SCRIPT = (
    _CACHE / "loopactors/loop-context-1.5.0/node_modules/@cobusgreyling/loop-context/dist/cli.js"
)
_NODE = shutil.which("node")

pytestmark = pytest.mark.skipif(
    _NODE is None or not _SCRIPT.exists(),
    reason="the reference (node and loop-context 1.5.0, installed by .ci/run) is not available",
)


def _errors(count: int, seed: int) -> list[str]:
    """Variants of a few errors (a word or two changed): many pairs sit near 0.85."""
    rng = random.Random(seed)
    words = ["".join(rng.choice("abcdefgh") for _ in range(rng.randint(2, 7))) for _ in range(30)]
    bases = [[rng.choice(words) for _ in range(rng.randint(3, 8))] for _ in range(6)]
    errors = []
    for _ in range(count):
        text = list(rng.choice(bases))
        for _ in range(rng.choice([0, 0, 1, 1, 2])):
            text[rng.randrange(len(text))] = rng.choice(words)
        form = rng.choice(["Error: {}", "TypeError: {} at /app/src/{}.js:12:5", "{} 0x1f{}"])
        errors.append(form.format(" ".join(text), rng.choice(words)))
    return errors


def _ledger(errors: list[str], seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    return {
        "goal": "g",
        "attempts": [
            {"iteration": i + 1, "action": rng.choice(["fix a", "fix b", f"try {i}"]),
             "outcome": rng.choice(["failure", "failure", "failure", "success", "noop"]),
             "error": error, "tokensUsed": rng.choice([0, 10, 2.5])}
            for i, error in enumerate(errors)
        ],
    }  # fmt: skip


def _run(command: list[str], path: Path, *args: str) -> tuple[int, str]:
    result = subprocess.run(
        [*command, *args, "-f", str(path)], capture_output=True, text=True, timeout=HANG,
        check=False,
    )  # fmt: skip
    return result.returncode, result.stdout


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_summary_groups_like_the_reference(tmp_path: Path, seed: int) -> None:
    path = tmp_path / "ledger.json"
    path.write_text(json.dumps(_ledger(_errors(150, seed), seed)))
    ours = _run([sys.executable, "-m", "loopactors", "context"], path, "--summary", "--json")
    reference = _run([str(_NODE), str(_SCRIPT)], path, "--summary", "--json")
    assert ours == reference
    # Not a trivial case: some errors were grouped, and not all into one group.
    groups = json.loads(ours[1])["distinctErrors"]
    assert 1 < len(groups) < json.loads(ours[1])["failures"]


@pytest.mark.parametrize(
    "errors",
    [
        ["Error: connect ECONNREFUSED 127.0.0.1:5432"] * 6,
        [f"Error: attempt {i} failed at /x/{i}.js:{i}:1" for i in range(8)],
        ["E: a b c d", "E: a b c e", "E: a b c d", "E: a b c d"],
    ],
)
def test_check_decides_like_the_reference(tmp_path: Path, errors: list[str]) -> None:
    path = tmp_path / "ledger.json"
    ledger = _ledger(errors, 0)
    for attempt in ledger["attempts"]:
        attempt["outcome"] = "failure"
    path.write_text(json.dumps(ledger))
    for flags in (["--check", "--json"], ["--check", "--no-progress", "50"]):
        ours = _run([sys.executable, "-m", "loopactors", "context"], path, *flags)
        assert ours == _run([str(_NODE), str(_SCRIPT)], path, *flags)
