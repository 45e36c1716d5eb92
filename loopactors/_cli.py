"""The `loopactors` command line.

Exit codes (also in the README): 0 complete (or success), 1 error, 2 escalated, 3 cancelled,
4 interrupted, 64 bad usage, 130 interrupted by a second Ctrl-C.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec
import trio
from rich.console import Console
from rich.table import Table

from . import __version__
from ._demo import run_demo
from ._progress import JsonLines, Progress, final_table
from .errors import LoopactorsError, LoopNotFound
from .ledger import encode_json
from .loops._events import LoopFinished
from .loops._model import LoopState, Phase, RoundRecord
from .runtime import Gap, LoopHandle, Runtime, RuntimeConfig, load_config, open_runtime
from .runtime._coordinator import new_loop_id
from .runtime._ledger import ledger_of
from .storage import DB_FILENAME, open_backend

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 64
EXIT_ABORTED = 130

#: The exit code of a loop's final phase; `resume` returns the most severe of its loops'.
PHASE_EXIT: dict[Phase, int] = {
    "complete": 0,
    "escalated": 2,
    "cancelled": 3,
    "interrupted": 4,
    "error": 1,
}
_SEVERITY = ["complete", "escalated", "cancelled", "interrupted", "error"]

_json = msgspec.json.Encoder()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="loopactors",
        description=(
            "A runtime for long-running AI-agent loops, built as a tree of supervised trio actors."
        ),
    )
    parser.add_argument("--version", action="version", version=f"loopactors {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = commands.add_parser(
        "demo", help="run several loops side by side on embedded defaults (no network, no key)"
    )
    demo.add_argument("--fast", action="store_true", help="no delays (for scripts and tests)")

    run = commands.add_parser("run", help="run one loop in the foreground")
    run.add_argument("text", help='the loop, e.g. "|loop:3,fresh| review this module"')
    run.add_argument("--worker", help="worker spec (scripted, command:ARGV, python:MOD:FN)")
    _state_options(run, allow_memory=True)
    run.add_argument("--round-timeout", type=float, metavar="S")
    run.add_argument("--inter-round-delay", type=float, metavar="S")
    run.add_argument("--max-concurrent", type=int, metavar="N", help="rounds in flight at once")
    breaker = run.add_argument_group("run-ledger breaker (loop-context's rules)")
    breaker.add_argument("--stagnation", type=int, metavar="N", help="same error N times (3)")
    breaker.add_argument("--frustration", type=int, metavar="N", help="same action N times (3)")
    breaker.add_argument(
        "--no-progress", type=int, metavar="N", help="N failed rounds in a row (3)"
    )
    breaker.add_argument("--token-budget", type=int, metavar="N", help="tokens for the loop")
    breaker.add_argument(
        "--similarity", type=float, metavar="F", help="how alike counts as the same (0.85)"
    )
    breaker.add_argument(
        "--inject-ledger",
        action="store_true",
        help="prepend the ledger's Loop Context block to each round's prompt",
    )

    commands.add_parser(
        "context",
        help="loop-context's command line (--check, --prune, --inject, --summary, --status)",
        add_help=False,
    )
    ledger = commands.add_parser("ledger", help="a loop's run ledger in loop-context's JSON")
    ledger_commands = ledger.add_subparsers(dest="ledger_command", metavar="ACTION")
    export = ledger_commands.add_parser("export", help="print a loop's ledger as JSON")
    export.add_argument("loop_id")
    _state_options(export, allow_memory=False)

    resume = commands.add_parser("resume", help="resume every unfinished loop and run them")
    _state_options(resume, allow_memory=False)

    status = commands.add_parser("status", help="show loops (or one loop) in a state directory")
    status.add_argument("loop_id", nargs="?")
    _state_options(status, allow_memory=False)

    history = commands.add_parser("history", help="show the rounds of one loop")
    history.add_argument("loop_id")
    _state_options(history, allow_memory=False)

    commands.add_parser("version", help="print the installed version")
    return parser


def _state_options(parser: argparse.ArgumentParser, *, allow_memory: bool) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--state", type=Path, metavar="DIR", help="state directory (.loopactors)")
    if allow_memory:
        group.add_argument(
            "--store", choices=["memory", "sqlite"], help="memory: nothing is kept after exit"
        )
    parser.add_argument("--config", type=Path, metavar="FILE", help="a loopactors.toml file")
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on bad usage; 2 means "escalated" here
        code = exc.code if isinstance(exc.code, int) else EXIT_ERROR
        return EXIT_USAGE if code == 2 else code
    try:
        return _dispatch(parser, args)
    except LoopactorsError as exc:
        print(f"loopactors: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return EXIT_ABORTED


def _dispatch(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.command == "version":
        print(f"loopactors {__version__}")
        return EXIT_OK
    if args.command == "demo":
        return trio.run(run_demo, args.fast)
    if args.command == "run":
        return trio.run(_run, args)
    if args.command == "resume":
        return trio.run(_resume, args)
    if args.command == "status":
        return _status(args)
    if args.command == "history":
        return _history(args)
    if args.command == "ledger" and args.ledger_command == "export":
        return _export_ledger(args)
    parser.print_help(sys.stdout)
    return EXIT_OK


def _config(args: argparse.Namespace, **flags: Any) -> RuntimeConfig:
    config = load_config(args.config)
    store = getattr(args, "store", None)
    return config.replace(state_dir=args.state, store=store, **flags)


async def _run(args: argparse.Namespace) -> int:
    config = _config(
        args,
        round_timeout=args.round_timeout,
        inter_round_delay=args.inter_round_delay,
        max_concurrent_rounds=args.max_concurrent,
    )
    async with open_runtime(config) as rt:
        loop_id = new_loop_id()
        display: JsonLines | Progress = JsonLines() if args.json else Progress()
        breaker = {
            "stagnation_threshold": args.stagnation,
            "frustration_threshold": args.frustration,
            "max_consecutive_failures": args.no_progress,
            "max_tokens": args.token_budget,
            "similarity_threshold": args.similarity,
            "inject_ledger": args.inject_ledger or None,
        }
        with rt.subscribe(loop_id) as events:  # before start: no event can be missed
            handle = await rt.start(args.text, worker=args.worker, loop_id=loop_id, **breaker)
            final = await _follow(rt, [handle], events, display)
        return PHASE_EXIT[final[0].phase]


async def _resume(args: argparse.Namespace) -> int:
    config = _config(args)
    display: JsonLines | Progress = JsonLines() if args.json else Progress()
    # Read before the runtime starts: it resumes these at once, and some may end (or be
    # found impossible to resume) before a query made afterwards could see them live.
    backend = _read_store(args)
    live = backend.list_loops(live_only=True) if backend is not None else []
    if backend is not None:
        backend.close()
    if not live:
        display.note(f"nothing to resume in {config.state_dir}")
        return EXIT_OK
    display.note(f"resuming {len(live)} loop(s) from {config.state_dir}")
    async with open_runtime(config) as rt:
        with rt.subscribe() as events:
            handles = [rt.handle(state.loop_id) for state in live]
            for state, handle in zip(live, handles, strict=True):
                if state.phase == "paused":  # `resume` means all of them, paused ones too
                    await handle.resume()
            final = await _follow(rt, handles, events, display)
        return max((PHASE_EXIT[s.phase] for s in final), key=_severity)


def _severity(code: int) -> int:
    phase = next(p for p, c in PHASE_EXIT.items() if c == code)
    return _SEVERITY.index(phase)


async def _follow(
    rt: Runtime, handles: list[LoopHandle], events: Any, display: JsonLines | Progress
) -> list[LoopState]:
    """Show events until every loop in ``handles`` finished; Ctrl-C stops them, a second
    Ctrl-C leaves at once (what was committed stays committed and resumable)."""
    pending = {h.loop_id for h in handles}
    for handle in handles:
        state = await handle.status()
        if isinstance(display, Progress):
            display.track(state)
        if state.terminal:
            pending.discard(handle.loop_id)
    with trio.open_signal_receiver(signal.SIGINT) as sigint:
        async with trio.open_nursery() as nursery:

            async def on_ctrl_c() -> None:
                presses = 0
                async for _ in sigint:
                    presses += 1
                    if presses > 1:
                        raise KeyboardInterrupt
                    display.note("stopping (press Ctrl-C again to leave at once)")
                    for handle in handles:
                        await handle.stop()

            nursery.start_soon(on_ctrl_c)
            if isinstance(display, Progress):
                display.__enter__()
            try:
                while pending:
                    event = await events.receive()
                    display.show(event)
                    if isinstance(event, LoopFinished):
                        pending.discard(event.loop_id)
                    elif isinstance(event, Gap):  # the finish may be among the missed events
                        pending = {h for h in pending if not (await rt.get(h)).terminal}
            finally:
                if isinstance(display, Progress):
                    display.__exit__(None, None, None)
            nursery.cancel_scope.cancel()
    final = [await h.status() for h in handles]
    if isinstance(display, Progress):
        display.console.print(final_table(final))
    return final


def _read_store(args: argparse.Namespace) -> Any:
    config = _config(args)
    state_dir = Path(config.state_dir)
    if not (state_dir / DB_FILENAME).exists():
        return None
    return open_backend("sqlite", state_dir)


def _status(args: argparse.Namespace) -> int:
    # Read-only: opening a runtime would resume the loops, which `status` must not do.
    backend = _read_store(args)
    try:
        if args.loop_id is not None:
            state = backend.get_loop(args.loop_id) if backend is not None else None
            if state is None:
                raise LoopNotFound(f"no loop {args.loop_id!r} in {_config(args).state_dir}")
            states = [state]
        else:
            states = backend.list_loops() if backend is not None else []
    finally:
        if backend is not None:
            backend.close()
    if args.json:
        payload = states[0] if args.loop_id is not None else states
        print(_json.encode(payload).decode())
        return EXIT_OK
    console = Console()
    if not states:
        console.print(f"no loops in {_config(args).state_dir}")
        return EXIT_OK
    console.print(final_table(states))
    return EXIT_OK


def _stored_loop(args: argparse.Namespace) -> tuple[LoopState, list[RoundRecord]]:
    """A loop and its rounds, read straight from the store (no runtime, nothing resumed)."""
    backend = _read_store(args)
    try:
        state = backend.get_loop(args.loop_id) if backend is not None else None
        if state is None:
            raise LoopNotFound(f"no loop {args.loop_id!r} in {_config(args).state_dir}")
        rounds: list[RoundRecord] = backend.rounds(args.loop_id)
    finally:
        if backend is not None:
            backend.close()
    return state, rounds


def _history(args: argparse.Namespace) -> int:
    state, rounds = _stored_loop(args)
    if args.json:
        print(_json.encode({"loop": state, "rounds": rounds}).decode())
        return EXIT_OK
    table = Table(title=f"{state.loop_id}: {state.phase}, {state.completed_rounds} completed")
    for column in ("round", "status", "duration", "output"):
        table.add_column(column)
    for record in rounds:
        duration = "?" if record.duration is None else f"{record.duration:.2f}s"
        head = " ".join((record.output or record.error or "").split())[:60]
        table.add_row(str(record.round), record.status, duration, head)
    Console().print(table)
    return EXIT_OK


def _export_ledger(args: argparse.Namespace) -> int:
    """Write a loop's ledger in loop-context's JSON, so either tool can read it."""
    state, rounds = _stored_loop(args)
    print(encode_json(msgspec.to_builtins(ledger_of(state, rounds))))
    return EXIT_OK
