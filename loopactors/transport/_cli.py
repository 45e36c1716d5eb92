"""The ``worker`` command, the ``--transport`` option, and the transport part of ``status``.

Kept here so the main command line only wires them in.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
from pathlib import Path
from typing import Any

from .._logs import add_log_format, configure_logging
from .._util import terminal_safe
from ..errors import ConfigError
from ._url import IN_PROCESS, check_transport, redact_url

_log = logging.getLogger("loopactors.worker")

# trio and the wire format (which loads the workers) are imported where they are used:
# `loopactors status` and `--help` build the parser from here and must start fast.

__all__ = [
    "WORKER_HELP",
    "add_parsers",
    "add_transport_option",
    "add_worker_options",
    "print_status",
    "run_worker",
    "status_data",
]

#: The commands that start a node (and so a Dispatcher) or read its state.
TRANSPORT_COMMANDS = ("run", "resume", "node", "status")


WORKER_HELP = "run rounds for a node on this machine, taken from Redis"


def add_parsers(commands: Any, *, worker_options: bool = True) -> None:
    """``--transport`` on the commands that take it, and the ``worker`` command (its options
    only with ``worker_options``: they name the worker kinds, which loads the workers)."""
    for name in TRANSPORT_COMMANDS:
        parser = commands.choices.get(name)
        if parser is not None:
            add_transport_option(parser)
    worker = commands.add_parser("worker", help=WORKER_HELP)
    if worker_options:
        add_worker_options(worker)


def add_transport_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--transport",
        metavar="URL",
        help="inprocess (default) or redis://[:PASSWORD@]HOST:PORT/DB (rediss:// for "
        "TLS): run rounds on `loopactors worker` processes",
    )


def _runnable_kinds() -> tuple[str, ...]:
    """Every kind a worker process can run, those it runs by default first."""
    from ..workers import served_by_default, worker_kinds  # noqa: PLC0415 - loads the workers

    default = served_by_default()
    return (*default, *(kind for kind in worker_kinds() if kind not in default))


def add_worker_options(worker: argparse.ArgumentParser) -> None:
    # The kinds a worker process runs unless told otherwise, and every kind it can run: the
    # coding-agent CLI kinds run only when named (their binary must be installed there).
    from ..workers import served_by_default  # noqa: PLC0415

    default = ",".join(served_by_default())

    worker.add_argument(
        "--redis",
        metavar="URL",
        help="redis://[:PASSWORD@]HOST:PORT/DB or rediss://... (or $LOOPACTORS_REDIS)",
    )
    worker.add_argument(
        "--kinds",
        default=default,
        metavar="K,K",
        help=f"the worker kinds this process runs (default {default}; "
        f"accepted: {','.join(_runnable_kinds())})",
    )
    worker.add_argument("--slots", type=int, default=4, metavar="N", help="rounds at once (4)")
    worker.add_argument("--name", metavar="NAME", help="consumer name (HOST-PID)")
    add_log_format(worker)
    worker.add_argument(
        "--kill-grace", type=float, default=5.0, metavar="S", help="SIGTERM to SIGKILL (5 s)"
    )
    worker.add_argument(
        "--idle-timeout",
        type=float,
        default=15.0,
        metavar="S",
        help="a round held this long without a heartbeat is taken over (15 s)",
    )
    worker.add_argument(
        "--heartbeat", type=float, default=1.0, metavar="S", help="seconds between beats (1)"
    )
    worker.add_argument(
        "--groups-dir",
        metavar="DIR",
        help="where the command rounds' process groups are listed, so that the machine's "
        "next worker process ends them if this one is killed "
        "($XDG_STATE_HOME/loopactors/worker-groups)",
    )
    worker.add_argument(
        "--max-deliveries",
        type=int,
        default=5,
        metavar="N",
        help="a round whose workers died more often than this fails instead of running again (5)",
    )


def run_worker(args: argparse.Namespace) -> int:
    import trio  # noqa: PLC0415 - see the note on the imports

    from ..workers import default_worker_groups_dir  # noqa: PLC0415

    # coredis loads only here
    from ._redis import REFUSED, find_error  # noqa: PLC0415
    from ._worker import WorkerSettings, default_worker_name, serve_worker  # noqa: PLC0415

    url = args.redis or os.environ.get("LOOPACTORS_REDIS")
    if not url:
        raise ConfigError("`loopactors worker` needs --redis URL (or $LOOPACTORS_REDIS)")
    if check_transport(url) == IN_PROCESS:
        raise ConfigError("--redis takes a redis:// or rediss:// URL")
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    accepted = _runnable_kinds()
    unknown = sorted(set(kinds) - set(accepted))
    if unknown or not kinds:
        raise ConfigError(
            f"unknown worker kind(s) {', '.join(unknown) or '(none given)'} in --kinds; "
            f"accepted: {', '.join(accepted)}"
        )
    try:
        settings = WorkerSettings(
            url=url,
            kinds=kinds,
            slots=args.slots,
            name=args.name or default_worker_name(),
            kill_grace=args.kill_grace,
            heartbeat=args.heartbeat,
            idle_timeout=args.idle_timeout,
            max_deliveries=args.max_deliveries,
            groups_dir=Path(args.groups_dir) if args.groups_dir else default_worker_groups_dir(),
        )
    except ValueError as exc:
        raise ConfigError(f"bad worker option: {exc}") from exc
    # Command rounds see which worker runs them (their environment is this process's).
    os.environ["LOOPACTORS_WORKER_NAME"] = settings.name
    configure_logging(args.log_format)

    async def main() -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(serve_worker, settings)
                async for signum in signals:  # rounds held are taken over by the other workers
                    _log.info(
                        "worker %s stopping on %s: the rounds it runs are stopped, and taken "
                        "over by the other workers",
                        settings.name,
                        signal.Signals(signum).name,
                    )
                    nursery.cancel_scope.cancel()
                    break
        _log.info("worker %s stopped", settings.name)

    try:
        trio.run(main)
    except BaseException as exc:
        refused = find_error(exc, REFUSED)
        if refused is None:
            raise
        raise ConfigError(f"redis {redact_url(url)} refused this worker: {refused}") from None
    return 0


def print_status(transport: str, *, console: Any) -> None:
    """The workers and per-stream backlog of a Redis transport (nothing for in-process)."""
    if transport == IN_PROCESS:
        return
    status = _read_status(transport)
    if isinstance(status, BaseException):
        console.print(f"redis {redact_url(transport)} unreachable: {type(status).__name__}")
        return
    from ._status import render, unserved  # noqa: PLC0415

    for table in render(status):
        console.print(table)
    for line in unserved(status):
        console.print(terminal_safe(line), markup=False, highlight=False)


def status_data(transport: str) -> dict[str, Any] | None:
    """The transport part of ``status --json``: workers (with ``dead_since``) and streams,
    or ``{"unreachable": ...}``; None for in-process."""
    if transport == IN_PROCESS:
        return None
    status = _read_status(transport)
    if isinstance(status, BaseException):
        return {"redis": redact_url(transport), "unreachable": type(status).__name__}
    import msgspec  # noqa: PLC0415

    from ._status import unserved  # noqa: PLC0415

    data: dict[str, Any] = msgspec.to_builtins(status)
    return {"redis": redact_url(transport), **data, "unserved": unserved(status)}


def _read_status(transport: str) -> Any:
    import trio  # noqa: PLC0415 - see the note on the imports

    from ._redis import RETRIED, client_name, open_redis  # noqa: PLC0415 - coredis loads only here
    from ._status import collect  # noqa: PLC0415

    async def read() -> Any:
        with trio.move_on_after(5):
            async with open_redis(transport, name=client_name("status")) as client:
                try:  # inside the client's block, where errors are not yet grouped
                    return await collect(client)
                except RETRIED as exc:
                    return exc
        return TimeoutError("no answer within 5 s")

    return trio.run(read)
