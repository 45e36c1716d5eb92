"""What a test reads of another process in /proc (Linux)."""

from __future__ import annotations

from pathlib import Path


def _stat(pid: int) -> list[str] | None:
    """``/proc/PID/stat`` from the state field on (the name may hold spaces and parens)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()


def alive(pid: int) -> bool:
    """Running or sleeping: a zombie (dead, waiting to be reaped) does not count."""
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def start_time(pid: int) -> int:
    """The process's start time in clock ticks since boot."""
    fields = _stat(pid)
    assert fields is not None, f"no process {pid}"
    return int(fields[19])
