"""``loopactors stress``: the command line of the stress run and the kill trials."""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..errors import ConfigError

# The run's modules (and trio, rich, the runtime) load in main(): the command line imports
# this module to build its parser, for every command.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from ._flood import FloodOptions
    from ._report import StressReport
    from ._run import StressOptions, Tally

__all__ = ["add_parser", "main"]

EXIT_OK = 0
EXIT_VIOLATED = 1


def add_parser(commands: Any) -> None:
    """Register ``stress`` on the CLI's subcommands."""
    stress = commands.add_parser(
        "stress",
        help="run many loops at once (with crashes, stops or SIGKILLs) and check every invariant",
    )
    stress.add_argument(
        "--loops", type=int, metavar="N", help="loops (100; 4 with --gateway-flood)"
    )
    stress.add_argument(
        "--rounds", type=int, metavar="M", help="rounds each (5; 12 with --gateway-flood)"
    )
    stress.add_argument(
        "--worker", metavar="SPEC",
        help="(scripted; with --gateway-flood a command that sleeps 0.2 s)",
    )  # fmt: skip
    stress.add_argument(
        "--store", metavar="URL", help="memory unless --state; sqlite, postgresql://..."
    )
    stress.add_argument("--state", type=Path, metavar="DIR", help="the state directory")
    stress.add_argument(
        "--crash-rate", type=float, default=0.0, metavar="P",
        help="fraction of actor messages that crash the actor handling them (0)",
    )  # fmt: skip
    stress.add_argument(
        "--stop-rate", type=float, default=0.0, metavar="P",
        help="fraction of loops stopped at a random round (0)",
    )  # fmt: skip
    stress.add_argument(
        "--kill-trials", type=int, default=0, metavar="K",
        help="run in a child process on sqlite, SIGKILL it K times, resume, then check",
    )  # fmt: skip
    stress.add_argument("--seed", type=int, help="random seed (printed in the report)")
    stress.add_argument(
        "--stall-timeout", type=float, default=60.0, metavar="S",
        help="seconds without progress before the remaining loops count as stuck (60)",
    )  # fmt: skip
    stress.add_argument("--json", action="store_true", help="print the report as one JSON object")
    flood = stress.add_argument_group(
        "gateway flood", "a node process on loopback under abusive connections (docs/stress.md)"
    )
    flood.add_argument(
        "--gateway-flood", action="store_true",
        help="run the loops on a node process while flooding its port; check that a token "
        "holder's status stays answered and that every round completes",
    )  # fmt: skip
    flood.add_argument(
        "--connections", type=int, default=600, metavar="N",
        help="connections held at once: idle, half-sent heads, upgraded without hello (600)",
    )  # fmt: skip
    flood.add_argument(
        "--churners", type=int, default=4, metavar="N",
        help="tasks opening and closing connections as fast as they go (4)",
    )  # fmt: skip
    flood.add_argument(
        "--descriptors", type=int, default=400, metavar="N", help="the node's ulimit -n (400)"
    )
    flood.add_argument(
        "--flood-seconds", type=float, default=60.0, metavar="S",
        help="the flood ends with the loops, or after S seconds (a failure) (60)",
    )  # fmt: skip
    flood.add_argument(
        "--status-bound", type=float, default=10.0, metavar="S",
        help="a token holder's status must be answered within S seconds (10)",
    )  # fmt: skip
    # Internal: the child process of a kill trial.
    stress.add_argument("--task-prefix", default="", help=argparse.SUPPRESS)
    stress.add_argument("--kill-child", action="store_true", help=argparse.SUPPRESS)


def options_of(args: argparse.Namespace) -> StressOptions:
    from ..storage import store_kind  # noqa: PLC0415 - see the note on the imports
    from ._run import StressOptions  # noqa: PLC0415

    durable = args.state is not None or args.kill_trials
    store: str = args.store or ("sqlite" if durable else "memory")
    in_process = store_kind(store).in_process
    if in_process and args.state is not None:
        raise ConfigError(f"--state is for a durable store (sqlite, ...), not {store}")
    if args.kill_trials and in_process:
        raise ConfigError(f"kill trials need a durable store (the {store} store dies with them)")
    if args.kill_trials < 0:
        raise ConfigError(f"--kill-trials must be >= 0, got {args.kill_trials}")
    options = StressOptions(
        loops=100 if args.loops is None else args.loops,
        rounds=5 if args.rounds is None else args.rounds,
        worker=args.worker or "scripted",
        store=store,
        state_dir=args.state,
        crash_rate=args.crash_rate,
        stop_rate=args.stop_rate,
        seed=args.seed if args.seed is not None else random.randrange(2**31),
        stall_timeout=args.stall_timeout,
        task_prefix=args.task_prefix,
    )
    if args.kill_trials and options.state_dir is None:
        raise ConfigError("kill trials need --state DIR (a fresh directory keeps them apart)")
    options.check()
    return options


def main(args: argparse.Namespace) -> int:
    """Run ``loopactors stress``; 0 when every invariant holds, 1 otherwise."""
    import trio  # noqa: PLC0415 - see the note on the imports

    from ._kill import run_kill_trials  # noqa: PLC0415

    if args.gateway_flood:
        return _flood(args)
    options = options_of(args)
    if args.kill_child:
        trio.run(_child, options)
        return EXIT_OK
    if args.kill_trials:
        report = run_kill_trials(options, args.kill_trials, progress=sys.stderr)
    else:
        with _progress_bar(options, quiet=args.json) as show:
            report = trio.run(_run, options, show)
    _print(report, as_json=args.json)
    return EXIT_OK if report.ok else EXIT_VIOLATED


def flood_options_of(args: argparse.Namespace) -> FloodOptions:
    from ._flood import DEFAULT_WORKER, FloodOptions  # noqa: PLC0415 - see the note on the imports

    other = [
        flag
        for flag, value in (
            ("--store", args.store),
            ("--crash-rate", args.crash_rate),
            ("--stop-rate", args.stop_rate),
            ("--kill-trials", args.kill_trials),
        )
        if value
    ]
    if other:
        raise ConfigError(
            f"--gateway-flood runs a node process of its own: {', '.join(other)} "
            "cannot go with it (--loops, --rounds, --worker, --state and the flood's "
            "options can)"
        )
    options = FloodOptions(
        connections=args.connections,
        churners=args.churners,
        loops=4 if args.loops is None else args.loops,
        rounds=12 if args.rounds is None else args.rounds,
        worker=args.worker or DEFAULT_WORKER,
        descriptors=args.descriptors,
        seconds=args.flood_seconds,
        status_bound=args.status_bound,
        state_dir=args.state,
    )
    options.check()
    return options


def _flood(args: argparse.Namespace) -> int:
    import msgspec  # noqa: PLC0415 - see the note on the imports

    from ._flood import render_flood_report, run_gateway_flood  # noqa: PLC0415

    report = run_gateway_flood(flood_options_of(args))
    if args.json:
        print(json.dumps(msgspec.to_builtins(report)))
    else:
        print(render_flood_report(report))
    return EXIT_OK if report.ok else EXIT_VIOLATED


async def _run(options: StressOptions, show: Any) -> StressReport:
    from ._run import run_stress  # noqa: PLC0415 - see the note on the imports

    return await run_stress(options, progress=show)


async def _child(options: StressOptions) -> None:
    from ._kill import child_progress  # noqa: PLC0415 - see the note on the imports
    from ._run import run_stress  # noqa: PLC0415

    await run_stress(options, progress=child_progress(), progress_interval=0.01)


@contextlib.contextmanager
def _progress_bar(options: StressOptions, *, quiet: bool) -> Iterator[Callable[[Tally], None]]:
    """A progress bar on stderr: rounds completed, and loops finished."""
    from rich.console import Console  # noqa: PLC0415 - see the note on the imports
    from rich.progress import (  # noqa: PLC0415
        BarColumn,
        MofNCompleteColumn,
        TextColumn,
        TimeElapsedColumn,
    )
    from rich.progress import Progress as ProgressBar  # noqa: PLC0415

    bar = ProgressBar(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        disable=quiet,
    )
    task = bar.add_task("rounds", total=options.loops * options.rounds)

    def show(tally: Tally) -> None:
        done = f"loops done {len(tally.finished)}/{options.loops}, rounds"
        bar.update(task, completed=tally.rounds_done, description=done)

    with bar:
        yield show


def _print(report: StressReport, *, as_json: bool) -> None:
    import msgspec  # noqa: PLC0415 - see the note on the imports

    from ._report import render_report  # noqa: PLC0415

    if as_json:
        data = msgspec.to_builtins(report)
        print(json.dumps(data))
    else:
        print(render_report(report))
