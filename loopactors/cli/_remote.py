"""The command line's node side: `loopactors node`, `stop`, and `--connect` for the others."""

from __future__ import annotations

import argparse
import functools
import os
import time
from pathlib import Path
from typing import Any

import msgspec
from rich.console import Console
from rich.table import Table

from .._logs import add_log_format, configure_logging
from ..errors import ConfigError, ConnectionLost, LoopNotFound, StoreError
from ..loops import LoopState, RoundRecord, cancel_loop
from ..storage import DB_FILENAME, Write, open_backend
from ._progress import JsonLines, Progress, final_table

# The agent, client, gateway and runtime load where they are used: `status` and `history`
# on a state directory (and `--help`, which builds every parser) need none of them.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..client import NodeClient
    from ..runtime import RuntimeConfig

__all__ = [
    "print_history",
    "read_token",
    "remote_history",
    "remote_pause",
    "remote_resume",
    "remote_run",
    "remote_status",
    "remote_stop",
    "run_node",
    "stop",
]

_json = msgspec.json.Encoder()


def read_token(args: argparse.Namespace, state_dir: Path) -> str:
    """``--token-file``, else ``$LOOPACTORS_TOKEN``, else the state directory's node token."""
    token_file: Path | None = args.token_file
    if token_file is not None:
        try:
            return token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(
                f"cannot read --token-file {args.token_file}: {exc.strerror}"
            ) from None
    token = os.environ.get("LOOPACTORS_TOKEN")
    if token:
        return token
    from ..gateway import TOKEN_FILENAME  # noqa: PLC0415 - see the note on the imports

    local = state_dir / TOKEN_FILENAME
    if local.exists():
        return local.read_text(encoding="utf-8").strip()
    raise ConfigError(
        f"no token to connect with: pass --token-file FILE, set LOOPACTORS_TOKEN, or run where "
        f"the node's state directory ({local}) is readable"
    )


def add_parsers(commands: Any, state_options: Any, connect_options: Any) -> None:
    """The parsers of `stop`, `node` and `repl` (the commands that can reach a node)."""
    stop = commands.add_parser("stop", help="stop a loop (on a node with --connect)")
    stop.add_argument("loop_id")
    stop.add_argument(
        "--after-round", action="store_true", help="let the round in flight finish first"
    )
    state_options(stop, allow_memory=False)
    connect_options(stop)

    pause = commands.add_parser(
        "pause", help="pause a loop on a node (--connect): its round finishes, no next one"
    )
    pause.add_argument("loop_id")
    state_options(pause, allow_memory=False)
    connect_options(pause)

    node = commands.add_parser("node", help="serve the runtime over a websocket API")
    node.add_argument(
        "--listen", metavar="HOST:PORT", help="(127.0.0.1:8765, or [node] host and port)"
    )
    node.add_argument("--token-file", type=Path, metavar="F", help="the token clients must send")
    node.add_argument("--worker", help="default worker of new loops (scripted)")
    node.add_argument(
        "--slow-subscriber",
        choices=["gap", "disconnect"],
        help="a client behind on its events is told what it missed (gap) or disconnected",
    )
    node.add_argument(
        "--rate-limit",
        type=float,
        metavar="N",
        help="requests per second per connection (5000)",
    )
    add_log_format(node)
    state_options(node, allow_memory=True, with_state=True)

    repl = commands.add_parser("repl", help="steer loops interactively (embedded or --connect)")
    repl.add_argument("--worker", help="default worker of new loops")
    state_options(repl, allow_memory=True, with_state=True)
    connect_options(repl)


def run_node(args: argparse.Namespace, config: RuntimeConfig) -> int:
    import trio  # noqa: PLC0415 - see the note on the imports

    from ..gateway import parse_listen, serve_node  # noqa: PLC0415
    from .schema import node_extensions  # noqa: PLC0415

    configure_logging(args.log_format)
    host, port = parse_listen(args.listen) if args.listen else (None, None)
    settings = config.node.replace(  # the configuration's [node] table, then the flags
        host=host,
        port=port,
        token_file=args.token_file,
        slow_subscriber=args.slow_subscriber,
        max_requests_per_second=args.rate_limit,
    )
    serve = functools.partial(serve_node, extensions=node_extensions())
    return trio.run(serve, config, settings)


async def remote_status(args: argparse.Namespace, token: str) -> int:
    from ..client import connect  # noqa: PLC0415 - see the note on the imports

    async with connect(args.connect, token=token, client_name="loopactors status") as node:
        if args.loop_id:
            states = [await node.get(args.loop_id)]
        else:  # every loop, a page (the node's default size) at a time
            states = [state async for page in node.loop_pages() for state in page]
    return _print_states(args, states)


async def remote_history(args: argparse.Namespace, token: str) -> int:
    from ..client import connect  # noqa: PLC0415 - see the note on the imports

    async with connect(args.connect, token=token, client_name="loopactors history") as node:
        rounds = await node.history(args.loop_id, output_head=60)
    return print_history(args, rounds.loop, rounds.rounds)


async def remote_stop(args: argparse.Namespace, token: str) -> int:
    from ..client import connect  # noqa: PLC0415 - see the note on the imports

    async with connect(args.connect, token=token, client_name="loopactors stop") as node:
        state = await node.stop(args.loop_id, after_round=args.after_round)
    return _report_stop(args, state)


async def remote_pause(args: argparse.Namespace, token: str) -> int:
    from ..client import connect  # noqa: PLC0415 - see the note on the imports

    async with connect(args.connect, token=token, client_name="loopactors pause") as node:
        state = await node.pause(args.loop_id)
    if args.json:
        print(_json.encode(state).decode())
    elif state.phase == "paused":
        print(f"{state.loop_id}: paused at round {state.round}")
    elif state.pause_requested:
        print(
            f"{state.loop_id}: pauses once round {state.round} (running now) is recorded; "
            "no next round is dispatched"
        )
    else:
        print(f"{state.loop_id}: already {state.phase}")
    return 0


async def remote_resume(args: argparse.Namespace, token: str) -> int:
    from ..client import connect  # noqa: PLC0415 - see the note on the imports

    async with connect(args.connect, token=token, client_name="loopactors resume") as node:
        state = await node.resume(args.loop_id)
    if args.json:
        print(_json.encode(state).decode())
    elif state.terminal:
        print(f"{state.loop_id}: already {state.phase}")
    else:
        print(f"{state.loop_id}: {state.phase}, round {state.round} (resumed)")
    return 0


async def remote_run(args: argparse.Namespace, token: str, options: dict[str, Any]) -> int:
    """Start a loop on a node and follow it here; Ctrl-C stops it on the node."""
    from ..client import connect  # noqa: PLC0415 - see the note on the imports
    from ._follow import PHASE_EXIT, follow  # noqa: PLC0415

    display: JsonLines | Progress = JsonLines() if args.json else Progress()
    loop_id: str | None = None
    try:
        async with (
            connect(args.connect, token=token, client_name="loopactors run") as node,
            await node.subscribe() as events,
        ):
            state = await node.start(args.text, worker=args.worker, **options)
            loop_id = state.loop_id
            final = await follow(
                [state.loop_id], events, display, get=node.get, stop=_stopper(node)
            )
    except* ConnectionLost as lost:
        if loop_id is None:
            raise
        # The loop lives on the node, not in this process: say where it went on.
        raise ConnectionLost(
            f"lost the node at {args.connect} ({lost.exceptions[0]}); loop {loop_id} stays "
            f"on the node: follow it with `loopactors status {loop_id} --connect "
            f"{args.connect}` (or `history`), stop it with `loopactors stop {loop_id} "
            f"--connect {args.connect}`"
        ) from None
    return PHASE_EXIT[final[0].phase]


def _stopper(node: NodeClient) -> Any:
    async def stop(loop_id: str) -> None:
        await node.stop(loop_id)

    return stop


def stop(args: argparse.Namespace, config: RuntimeConfig) -> int:
    """Stop a loop in a state directory no runtime is running (the loop ends cancelled)."""
    state_dir = Path(config.state_dir)
    if not (state_dir / DB_FILENAME).exists():
        raise LoopNotFound(f"no loop {args.loop_id!r} in {state_dir} (no store there)")
    try:
        from ..runtime import lock_state_dir  # noqa: PLC0415 - see the note on the imports

        lock = lock_state_dir(state_dir)
        lock.__enter__()
    except StoreError as exc:
        raise StoreError(f"{exc}; to stop a loop of a running node use --connect URL") from None
    try:
        backend = open_backend("sqlite", state_dir)
        try:
            state = backend.get_loop(backend.resolve_loop_id(args.loop_id, where=str(state_dir)))
            if state is None:
                raise LoopNotFound(f"no loop {args.loop_id!r} in {state_dir}")
            if not state.terminal:
                state = _cancel(backend, state)
        finally:
            backend.close()
    finally:
        lock.__exit__(None, None, None)
    return _report_stop(args, state)


def _cancel(backend: Any, state: LoopState) -> LoopState:
    rounds: list[RoundRecord] = backend.rounds(state.loop_id)
    reason = "stopped while no runtime was running it"
    # The round it had in flight, if any, is closed as the runtime's stop would.
    final, record, event = cancel_loop(
        state, reason, time.time(), rounds=rounds, stop_requested="now"
    )
    backend.commit([Write(state=final, round=record, events=(event,))])
    return final


def _report_stop(args: argparse.Namespace, state: LoopState) -> int:
    if args.json:
        print(_json.encode(state).decode())
    elif state.phase == "cancelled":
        print(f"{state.loop_id}: cancelled after {state.completed_rounds} completed round(s)")
    elif state.stop_requested == "after_round":
        print(f"{state.loop_id}: stops after the round in flight (round {state.round})")
    else:
        print(f"{state.loop_id}: already {state.phase}")
    return 0


def _print_states(args: argparse.Namespace, states: list[LoopState]) -> int:
    if args.json:
        payload: Any = states[0] if args.loop_id is not None else states
        print(_json.encode(payload).decode())
        return 0
    console = Console()
    if not states:
        console.print("no loops")
        return 0
    console.print(final_table(states))
    return 0


def print_history(args: argparse.Namespace, state: LoopState, rounds: list[RoundRecord]) -> int:
    if args.json:
        print(_json.encode({"loop": state, "rounds": rounds}).decode())
        return 0
    table = Table(title=f"{state.loop_id}: {state.phase}, {state.completed_rounds} completed")
    for column in ("round", "status", "duration", "output"):
        table.add_column(column)
    for record in rounds:
        duration = "?" if record.duration is None else f"{record.duration:.2f}s"
        head = " ".join((record.output or record.error or "").split())[:60]
        table.add_row(str(record.round), record.status, duration, head)
    Console().print(table)
    if getattr(args, "transcript", False):
        for record in rounds:
            if record.transcript:
                print(f"\n=== round {record.round} transcript")
                from ..agent import format_transcript  # noqa: PLC0415 - see the note on imports

                print(format_transcript(record.transcript))
    return 0
