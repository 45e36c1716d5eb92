"""The command line's node side: `loopactors node`, the loop commands on any target, and
`run --connect`."""

from __future__ import annotations

import argparse
import functools
import os
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from .._logs import add_log_format, configure_logging
from ..errors import ConfigError, ConnectionLost
from ._loop_control import (
    LoopCommands,
    pause_loop,
    resume_loop,
    show_history,
    show_status,
    stop_loop,
)
from ._progress import JsonLines, Progress

# The agent, client, gateway and runtime load where they are used: `status` and `history`
# on a state directory (and `--help`, which builds every parser) need none of them.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..runtime import RuntimeConfig

__all__ = ["loop_command", "on_node", "read_token", "remote_run", "run_node"]


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
    node.add_argument(
        "--exit-on-lease-lost",
        action="store_const",
        const=True,
        help="on a shared store, exit (75) when this node's lease ends instead of "
        "registering again as a new incarnation",
    )
    add_log_format(node)
    state_options(node, allow_memory=True, with_state=True)

    repl = commands.add_parser("repl", help="steer loops interactively (embedded or --connect)")
    repl.add_argument("--worker", help="default worker of new loops")
    state_options(repl, allow_memory=True, with_state=True)
    connect_options(repl)


def run_node(args: argparse.Namespace, config: RuntimeConfig) -> int:
    import trio  # noqa: PLC0415 - see the note on the imports

    from ..gateway import gateway_settings, parse_listen, serve_node  # noqa: PLC0415
    from .schema import node_extensions  # noqa: PLC0415

    configure_logging(args.log_format)
    host, port = parse_listen(args.listen) if args.listen else (None, None)
    settings = gateway_settings(config).replace(  # the [node] table, then the flags
        host=host,
        port=port,
        token_file=args.token_file,
        slow_subscriber=args.slow_subscriber,
        max_requests_per_second=args.rate_limit,
        exit_on_lease_lost=args.exit_on_lease_lost,
    )
    serve = functools.partial(serve_node, extensions=node_extensions())
    # The runtime protects the token file the flags name too (RuntimeConfig.protected_paths).
    return trio.run(serve, config.replace(node=settings), settings)


async def on_node(args: argparse.Namespace, token: str) -> int:
    """A loop command (``status``, ``history``, ``stop``, ``pause``, ``resume LOOP_ID``) on a
    node: the same command as on a state directory, over the node's ``NodeClient``."""
    from ..client import connect  # noqa: PLC0415 - see the note on the imports

    client_name = f"loopactors {args.command}"
    async with connect(args.connect, token=token, client_name=client_name) as node:
        return await loop_command(node, args)


def loop_command(
    control: LoopCommands, args: argparse.Namespace, *, local: RuntimeConfig | None = None
) -> Coroutine[Any, Any, int]:
    """The loop command ``args`` names, on ``control``: a node's client, or (with the
    ``local`` configuration) the state directory's ``StoredLoops``. The command is the same
    for both; only what a state directory adds (its path, its transport) differs."""
    if args.command == "status":
        if local is None:
            return show_status(control, args, empty="no loops")
        return show_status(
            control,
            args,
            empty=f"no loops in {local.state_dir}",
            transport=local.transport,
            budget=local.budget,
        )
    if args.command == "history":
        # Over the wire: output heads only (a node never sends whole outputs in one frame).
        return show_history(control, args, output_head=None if local else 60)
    if args.command == "stop":
        return stop_loop(control, args)
    if args.command == "pause":
        return pause_loop(control, args)
    if args.command == "resume":
        return resume_loop(control, args)
    raise AssertionError(f"{args.command} is no loop command")


async def remote_run(args: argparse.Namespace, token: str, options: dict[str, Any]) -> int:
    """Start a loop on a node and follow it here; Ctrl-C stops it on the node."""
    from ..client import connect  # noqa: PLC0415 - see the note on the imports
    from ..loops import LoopState  # noqa: PLC0415
    from ._follow import PHASE_EXIT, start_and_follow  # noqa: PLC0415

    display: JsonLines | Progress = JsonLines() if args.json else Progress()
    loop_id: str | None = None
    try:
        async with connect(args.connect, token=token, client_name="loopactors run") as node:

            async def start(chosen: str) -> LoopState:
                nonlocal loop_id
                state = await node.start(args.text, worker=args.worker, loop_id=chosen, **options)
                loop_id = state.loop_id
                return state

            final = await start_and_follow(node, start, display, on_node=True)
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
    return PHASE_EXIT[final.phase]
