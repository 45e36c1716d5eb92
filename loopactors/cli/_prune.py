"""`loopactors prune`: remove finished loops from a state directory's store, offline."""

from __future__ import annotations

import argparse
import re
import time
from typing import Any

import msgspec

from ..errors import ConfigError, StoreError
from ..storage import PruneReport

# The runtime loads only when a prune runs: the command line imports this module to build
# its parser, for every command.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..runtime import RuntimeConfig
    from ..storage import StoreBackend

__all__ = ["add_parser", "parse_duration", "prune"]

_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3_600.0, "d": 86_400.0}
_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)([smhd]?)", re.ASCII)  # no other scripts' digits
ACCEPTED = (
    "a number of seconds, or a number followed by s, m, h or d (30d, 12h, 90m, 3600s), up to 36500d"
)


def parse_duration(text: str) -> float:
    """Seconds in ``text``: ``30d``, ``12h``, ``90m``, ``3600s`` or plain seconds (``3600``)."""
    match = _DURATION.fullmatch(text.strip().lower())
    shown = text if len(text) <= 40 else text[:40] + "..."
    if match is None:
        raise ConfigError(f"invalid duration {shown!r}; accepted: {ACCEPTED}")
    number, unit = match.groups()
    seconds = float(number) * _UNITS[unit]
    from ..runtime import MAX_AGE  # noqa: PLC0415 - see the note on the imports

    if not seconds <= MAX_AGE:  # also catches inf from a very long number
        raise ConfigError(f"duration {shown!r} is too long; accepted: {ACCEPTED}")
    return seconds


def _duration_argument(text: str) -> float:
    try:
        return parse_duration(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None  # a usage error, exit 64


def add_parser(commands: Any, state_options: Any) -> None:
    parser = commands.add_parser(
        "prune", help="remove finished loops older than a duration from a state directory"
    )
    parser.add_argument(
        "--older-than",
        required=True,
        type=_duration_argument,
        metavar="DURATION",
        help="loops that finished longer ago than this: 30d, 12h, 90m, 3600s or seconds",
    )
    parser.add_argument("--dry-run", action="store_true", help="only count what would be removed")
    state_options(parser, allow_memory=False)


def prune(args: argparse.Namespace, config: RuntimeConfig) -> int:
    """Prune the store of ``config`` directly (no runtime is started).

    A dry run only reads, like `status`, so it works beside a running node. A real prune
    writes, so, like an offline `stop`, it takes the store's directory lock: a running node
    prunes its own store with ``retention_days``.
    """
    from ._loop_control import StoredLoops  # noqa: PLC0415 - see the note on the imports

    stored = StoredLoops(lambda: config)
    before = time.time() - args.older_than
    existing = stored.open_store(missing_ok=True)
    if existing is None:
        report = PruneReport(before=before, dry_run=args.dry_run)  # nothing stored, nothing made
    elif args.dry_run:
        report = _prune(existing, before, dry_run=True)
    else:
        existing.close()
        try:
            lock = stored.lock()
            lock.__enter__()
        except StoreError as exc:
            if "in use" not in str(exc):
                raise
            raise StoreError(
                f"{exc}; a running node prunes its own store with retention_days "
                "(docs/configuration.md)"
            ) from None
        try:
            report = _prune(stored.open_to_write(), before, dry_run=False)
        finally:
            lock.__exit__(None, None, None)
    if args.json:
        print(msgspec.json.encode(report).decode())
    elif existing is None:
        print(f"nothing to prune: no store in {stored.where}")
    else:
        cutoff = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(before))
        print(f"{report.note()} (loops that finished before {cutoff}) in {stored.where}")
    return 0


def _prune(backend: StoreBackend, before: float, *, dry_run: bool) -> PruneReport:
    try:
        return backend.prune(before, dry_run=dry_run)
    finally:
        backend.close()
