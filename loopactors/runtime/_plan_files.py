"""Plan and prompt files read from disk, blocking and without trio: what ``build_spec``
checks at a loop's start, and what ``_plans`` reads for each round in a worker thread."""

from __future__ import annotations

from pathlib import Path

from ..errors import LoopSyntaxError
from ..loops import Plan, parse_plan

__all__ = ["MAX_PLAN_BYTES", "read_plan_now", "read_task_now"]

#: The largest plan or prompt file read (a bigger one is refused, naming the limit).
MAX_PLAN_BYTES = 1 << 20


def _read(path: str, what: str) -> str:
    file = Path(path)
    try:
        size = file.stat().st_size
        if size > MAX_PLAN_BYTES:
            raise LoopSyntaxError(
                f"the {what} {path} has {size} bytes; at most {MAX_PLAN_BYTES} are read"
            )
        return file.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise LoopSyntaxError(f"the {what} {path} is not UTF-8 text") from None
    except OSError as exc:
        raise LoopSyntaxError(f"cannot read the {what} {path}: {exc.strerror or exc}") from None


def read_plan_now(path: str) -> Plan:
    """The plan at ``path`` (blocking; :func:`read_plan` runs it in a thread).

    Raises:
        LoopSyntaxError: unreadable, or not a plan (the message says what is accepted).
    """
    return parse_plan(_read(path, "plan"), path)


def read_task_now(path: str) -> str:
    """The task in the prompt file at ``path`` (blocking).

    Raises:
        LoopSyntaxError: unreadable or empty.
    """
    task = _read(path, "prompt file").strip()
    if not task:
        raise LoopSyntaxError(f"the prompt file {path} is empty: write the loop's task in it")
    return task
