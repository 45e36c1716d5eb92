"""`loopactors store copy`: move a store's loops into another store, offline
(docs/multinode.md, "Moving a SQLite store into PostgreSQL")."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any

import msgspec

from ..errors import ConfigError, StoreError
from ..storage import DB_FILENAME, CopyReport, StoreUrl, parse_store, store_kind

# The runtime loads only when a copy runs: the command line imports this module to build
# its parser, for every command.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..storage import StoreBackend

__all__ = ["add_parser", "store_command"]


def add_parser(commands: Any) -> None:
    store = commands.add_parser("store", help="act on a whole store (copy it into another)")
    actions = store.add_subparsers(dest="store_command", metavar="ACTION")
    copy = actions.add_parser(
        "copy",
        help="copy every loop of one store into another (a SQLite directory into PostgreSQL)",
    )
    copy.add_argument(
        "--from",
        dest="source",
        required=True,
        metavar="URL",
        help="the store to copy: a state directory, sqlite:DIR or postgresql://...",
    )
    copy.add_argument(
        "--to",
        dest="target",
        required=True,
        metavar="URL",
        help="the store to copy into (created if missing): a directory, sqlite:DIR or "
        "postgresql://...",
    )
    copy.add_argument(
        "--dry-run", action="store_true", help="only count what would be copied, write nothing"
    )
    copy.add_argument("--json", action="store_true", help="machine-readable output")


def store_command(args: argparse.Namespace) -> int:
    if args.store_command != "copy":
        raise ConfigError("`loopactors store` needs an action; accepted: copy")
    report = copy_store(args.source, args.target, dry_run=args.dry_run)
    if args.json:
        print(msgspec.json.encode(report).decode())
    else:
        print(f"{report.note()}: {_shown(args.source)} -> {_shown(args.target)}")
    return 0


def copy_store(source: str, target: str, *, dry_run: bool = False) -> CopyReport:
    """Copy every loop of the store ``source`` names into the one ``target`` names, with
    no runtime on a directory meanwhile: a store in a directory is locked as a node locks
    it; a shared one is written under a lease of this command's own, so nodes running on
    it meanwhile claim the copied live loops only once the copy ends (docs/multinode.md).

    Raises:
        ConfigError: a URL is not a store's, names an in-process store, or both name one.
        StoreError: the source does not exist, a store is in use, or the copy failed.
    """
    from ..runtime import lock_state_dir  # noqa: PLC0415 - see the note on the imports
    from ..storage import copy_loops, open_backend, open_store  # noqa: PLC0415

    urls = [_url(source, "--from"), _url(target, "--to")]
    dirs = [store_kind(url).local_dir(url, Path()) for url in urls]
    if urls[0].text == urls[1].text or (dirs[0] is not None and _same_dir(dirs[0], dirs[1])):
        raise ConfigError(f"--from and --to name the same store ({urls[0].redacted})")
    if dirs[0] is not None and not (dirs[0] / DB_FILENAME).is_file():
        raise StoreError(f"no store to copy in {dirs[0]} (no loopactors.db there)")
    with contextlib.ExitStack() as held:
        for url, local in zip(urls, dirs, strict=True):
            if local is not None and not (dry_run and url is urls[1]):
                held.enter_context(lock_state_dir(local))
        found = open_store(urls[0], None, read_only=True)
        if found is None:
            raise StoreError(f"no store to copy at {urls[0].redacted}")
        found.close()
        # Opened to write: a shared store is then held under this command's lease.
        reader = held.enter_context(_closing(open_backend(urls[0].text, None)))
        if dry_run:
            missing = dirs[1] is not None and not (dirs[1] / DB_FILENAME).is_file()
            writer = None if missing else open_store(urls[1], None, read_only=True)
            if writer is None:  # nothing there yet: every id is free
                from ..storage import MemoryBackend  # noqa: PLC0415

                writer = MemoryBackend()
        else:
            writer = open_backend(urls[1].text, None)
        held.enter_context(_closing(writer))
        shown: list[CopyReport] = []

        def progress(report: CopyReport) -> None:  # a long copy into a server shows it moves
            if sys.stderr.isatty():
                shown.append(report)
                print(f"\r{report.note()} so far", end="", file=sys.stderr, flush=True)

        try:
            return copy_loops(reader, writer, dry_run=dry_run, progress=progress)
        finally:
            if shown:
                print(file=sys.stderr)


def _url(text: str, flag: str) -> StoreUrl:
    if ":" not in text and text not in ("sqlite", "memory"):
        text = f"sqlite:{text}"  # a bare name is a directory here, even one named like a scheme
    url = parse_store(text)
    kind = store_kind(url)
    if kind.in_process:
        raise ConfigError(
            f"{flag} {url.redacted!r} is a store in this process's memory, gone at exit; "
            "accepted: a directory, sqlite:DIR or postgresql://..."
        )
    if kind.local_files and not url.rest:
        raise ConfigError(
            f"{flag} {url.redacted!r} names no directory; give it: sqlite:DIR or the directory"
        )
    problem = None if kind.check is None else kind.check(url)
    if problem is not None:
        raise ConfigError(f"bad store for {flag} {url.redacted!r}: {problem}")
    return url


def _same_dir(one: Path, other: Path | None) -> bool:
    return other is not None and one.expanduser().resolve() == other.expanduser().resolve()


def _shown(text: str) -> str:
    return parse_store(text).redacted


@contextlib.contextmanager
def _closing(backend: StoreBackend) -> Any:
    try:
        yield backend
    finally:
        backend.close()
