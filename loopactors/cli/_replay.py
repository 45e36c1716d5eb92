"""`loopactors replay LOOP_ID --round K --worker W` (here, or on a node with --connect), and
`history LOOP_ID --compare REPLAY_ID`'s option (docs/replay.md)."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import ConnectionLost
from ._progress import JsonLines, Progress

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..loops import LoopControl, LoopState
    from ..runtime import RuntimeConfig

__all__ = ["add_parser", "replay"]


def add_parser(
    commands: Any, history: argparse.ArgumentParser, state_options: Any, connect_options: Any
) -> None:
    replay = commands.add_parser(
        "replay",
        help="run a recorded round again on another worker, as a new loop linked to it",
    )
    replay.add_argument("loop_id")
    replay.add_argument(
        "--round", type=int, required=True, metavar="K", help="the round to run again"
    )
    replay.add_argument("--worker", help="the worker to run it on (default: the original loop's)")
    state_options(replay, allow_memory=False)
    connect_options(replay)
    history.add_argument(
        "--compare",
        metavar="REPLAY_ID",
        help="show the replayed round beside this replay's (output head, tokens, cost, check)",
    )


def replay(args: argparse.Namespace, config: RuntimeConfig, token: str | None) -> int:
    """Start the replay and follow it to its end; exit as `run` does."""
    import trio  # noqa: PLC0415 - see the note on the imports in _commands

    if token is not None:
        return trio.run(_on_node, args, token)
    return trio.run(_here, args, config)


async def _replay(
    control: LoopControl,
    replay: Callable[..., Awaitable[LoopState]],
    args: argparse.Namespace,
    *,
    on_node: bool,
    started: list[str],
) -> LoopState:
    """The replay, started by ``replay`` (``Runtime.replay`` or ``NodeClient.replay``) and
    followed to its end on ``control``; its id goes into ``started`` once it started."""
    from ._follow import start_and_follow  # noqa: PLC0415 - see the note on the imports

    display: JsonLines | Progress = JsonLines() if args.json else Progress()

    async def start(chosen: str) -> LoopState:
        state = await replay(args.loop_id, args.round, worker=args.worker, new_loop_id=chosen)
        started.append(state.loop_id)
        _say(display, args, state.loop_id)
        return state

    return await start_and_follow(control, start, display, on_node=on_node)


async def _here(args: argparse.Namespace, config: RuntimeConfig) -> int:
    from ..runtime import open_runtime  # noqa: PLC0415
    from ._follow import PHASE_EXIT, ctrl_c_leaves  # noqa: PLC0415

    async with ctrl_c_leaves(), open_runtime(config) as rt:
        final = await _replay(rt, rt.replay, args, on_node=False, started=[])
    return PHASE_EXIT[final.phase]


async def _on_node(args: argparse.Namespace, token: str) -> int:
    from ..client import connect  # noqa: PLC0415
    from ._follow import PHASE_EXIT  # noqa: PLC0415

    started: list[str] = []
    try:
        async with connect(args.connect, token=token, client_name="loopactors replay") as node:
            final = await _replay(node, node.replay, args, on_node=True, started=started)
    except* ConnectionLost as lost:
        if not started:
            raise
        loop_id = started[0]
        raise ConnectionLost(
            f"lost the node at {args.connect} ({lost.exceptions[0]}); replay {loop_id} stays "
            f"on the node: compare with `loopactors history {args.loop_id} --compare "
            f"{loop_id} --connect {args.connect}`"
        ) from None
    return PHASE_EXIT[final.phase]


def _say(display: JsonLines | Progress, args: argparse.Namespace, loop_id: str) -> None:
    display.note(
        f"replaying round {args.round} of {args.loop_id} as loop {loop_id}; compare with "
        f"`loopactors history {args.loop_id} --compare {loop_id}`"
    )
