"""A small tmpfs for tests that need a full or a read-only disk (root with mount rights only)."""

from __future__ import annotations

import contextlib
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest


def _mount(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["mount", *args], capture_output=True, text=True, check=False)


@contextlib.contextmanager
def small_tmpfs(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` (``"2m"``) mounted at ``path``; the test is skipped, with the reason,
    where this process may not mount one."""
    path.mkdir(parents=True, exist_ok=True)
    try:
        done = _mount("-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path))
    except FileNotFoundError:
        pytest.skip("no mount command on this machine: cannot make a small disk")
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip()}): needs root")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def remount_read_only(path: Path) -> None:
    done = _mount("-o", "remount,ro", str(path))
    assert done.returncode == 0, done.stderr
