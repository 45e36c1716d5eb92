"""What is kept of a round's output: at most ``max_output_bytes`` (docs/configuration.md).

The cut itself is the workers' (``workers/_output.py``): a command worker keeps only that
much while its output streams in; the Dispatcher cuts every other worker's output the same
way when the round ends.
"""

from __future__ import annotations

from pathlib import Path

from .._util import open_private
from ..workers import cap_output, is_cut

__all__ = ["cap_output", "is_cut", "keep_whole"]


def keep_whole(output: str, path: Path) -> None:
    """Write a cut output whole (blocking: run it in a thread)."""
    with open_private(path, "w") as out:  # 0600 in 0700 directories: docs/security.md
        out.write(output)
