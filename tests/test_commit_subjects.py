""".ci/check-commit-subjects: CI fails on a commit subject over 72 characters after a base."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / ".ci" / "check-commit-subjects"
ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
}


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=repo, env=ENV, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def commit(repo: Path, message: str) -> str:
    git(repo, "commit", "--allow-empty", "-q", "-m", message)
    return git(repo, "rev-parse", "--short", "HEAD")


def check(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=repo, capture_output=True, text=True, check=False
    )


def test_ci_runs_the_check() -> None:
    assert ".ci/check-commit-subjects" in (ROOT / ".ci" / "run").read_text().splitlines()


def test_subjects_after_the_base_are_checked_and_older_ones_are_not(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    commit(tmp_path, "x" * 90)  # before the base: history stays as it is
    base = commit(tmp_path, "the base")
    commit(tmp_path, "y" * 72 + "\n\nA body line may be as long as it likes " + "z" * 80)
    assert check(tmp_path, base).returncode == 0

    too_long = commit(tmp_path, "é" * 73)
    failed = check(tmp_path, base)
    assert failed.returncode == 1
    assert f"{too_long} (73 characters)" in failed.stderr
    assert "x" * 90 not in failed.stderr


def test_a_base_missing_from_the_clone_is_an_error_saying_so(tmp_path: Path) -> None:
    git(tmp_path, "init", "-q")
    commit(tmp_path, "only")
    failed = check(tmp_path, "1234567")
    assert failed.returncode == 2
    assert "1234567 is not in this clone" in failed.stderr
    assert "--unshallow" in failed.stderr


def test_this_repositorys_own_history_passes() -> None:
    # What .ci/run checks; a subject published too long is listed in PUBLISHED_LONG.
    base = subprocess.run(
        ["git", "rev-parse", "--quiet", "--verify", "1363478^{commit}"],
        cwd=ROOT,
        capture_output=True,
        check=False,
    )
    if base.returncode != 0:
        pytest.skip("not a whole clone of the repository")
    done = check(ROOT)
    assert done.returncode == 0, done.stderr
