"""The package's structure figures stay within their targets (docs/architecture.md,
"Measured targets"): .ci/structure counts them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.hang import HANG

ROOT = Path(__file__).resolve().parent.parent


def test_the_structure_figures_are_within_their_targets() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / ".ci" / "structure")],
        capture_output=True, text=True, timeout=HANG, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    figures = dict(line.split(": ", 1) for line in result.stdout.splitlines())
    assert set(figures) == {
        "private imports across packages",
        "functions of 80+ lines",
        "duplicated blocks (pairs)",
    }


def test_the_counts_find_what_they_count(tmp_path: Path) -> None:
    # Each count on a package made to have one of each: the script is not vacuous.
    package = tmp_path / "loopactors"
    (package / "a").mkdir(parents=True)
    (package / "b").mkdir()
    body = "\n".join(f"    x{i} = {i}" for i in range(85))
    block = "\n".join(f"y{i} = {i} * 2" for i in range(7))
    (package / "a" / "_inner.py").write_text(f"def long():\n{body}\n\n{block}\n")
    (package / "b" / "mod.py").write_text(f"from ..a._inner import long\n\n{block}\n")
    (tmp_path / ".ci").mkdir()
    (tmp_path / ".ci" / "structure").write_text((ROOT / ".ci" / "structure").read_text())
    result = subprocess.run(
        [sys.executable, str(tmp_path / ".ci" / "structure"), "--list"],
        capture_output=True, text=True, timeout=HANG, check=False,
    )  # fmt: skip
    assert result.returncode == 0
    assert "private imports across packages: 1" in result.stdout
    assert "loopactors.b.mod -> loopactors.a._inner" in result.stdout
    assert "functions of 80+ lines: 1" in result.stdout
    assert "duplicated blocks (pairs): 1" in result.stdout
    assert "a/_inner.py:88 ~ b/mod.py:3" in result.stdout
