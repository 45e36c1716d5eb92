"""What is kept of a round's output: at most ``max_output_bytes`` (docs/configuration.md)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["cap_output", "keep_whole"]


def cap_output(output: str, limit: int, *, kept_at: Path | None = None) -> str:
    """``output`` if it is at most ``limit`` bytes (UTF-8); else its last ``limit`` bytes
    (whole characters) after one line that says what was dropped and where the whole is."""
    if len(output) * 4 <= limit:  # no character is longer than 4 bytes: fits for sure
        return output
    data = output.encode("utf-8", "surrogatepass")
    if len(data) <= limit:
        return output
    tail = data[-limit:].decode("utf-8", "ignore")
    where = f"; whole output in {kept_at}" if kept_at is not None else ""
    return (
        f"[output cut: the first {len(data) - limit} of {len(data)} bytes were dropped "
        f"(max_output_bytes = {limit}){where}]\n{tail}"
    )


def keep_whole(output: str, path: Path) -> None:
    """Write a cut output whole (blocking: run it in a thread)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(output, encoding="utf-8", errors="surrogatepass")
