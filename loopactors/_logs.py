"""How `loopactors node` and `loopactors worker` log: human-readable lines, or JSON lines.

With ``--log-format json`` each record is one JSON object on one line: ``ts`` (UTC, ISO 8601),
``level``, ``event`` (a stable name of what happened, e.g. ``loop_started``; else the
logger's name), ``loop_id`` where the record is about a loop, and ``message``; ``error``
holds a traceback when there is one. Code names the event and the loop with
``log.info(..., extra=log_fields("loop_started", loop_id))``.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
from typing import Any, Literal

__all__ = ["LOG_FORMATS", "JsonFormatter", "add_log_format", "configure_logging", "log_fields"]

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")

_TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def add_log_format(parser: Any) -> None:
    """``--log-format text|json`` on a command that logs (``node``, ``worker``)."""
    parser.add_argument(
        "--log-format",
        choices=LOG_FORMATS,
        default="text",
        help="text (default) or json: one object per line (ts, level, event, loop_id, message)",
    )


def log_fields(event: str, loop_id: str | None = None) -> dict[str, Any]:
    """The ``extra`` of a log call: what happened, and to which loop."""
    fields: dict[str, Any] = {"event": event}
    if loop_id is not None:
        fields["loop_id"] = loop_id
    return fields


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "event": getattr(record, "event", record.name),
        }
        loop_id = getattr(record, "loop_id", None)
        if loop_id is not None:
            entry["loop_id"] = loop_id
        entry["message"] = record.getMessage()
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False, default=str)


def configure_logging(log_format: LogFormat = "text", level: int = logging.INFO) -> None:
    """Log to stderr in ``log_format`` (replacing any handler set before)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(_TEXT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
