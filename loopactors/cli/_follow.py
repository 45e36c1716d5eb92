"""Following loops on a display until they end: `run`, `replay` and `resume`, here or on a
node (``--connect``), written once over the one loop vocabulary (``loops.LoopControl``)."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, NoReturn

import trio

from ..loops import Gap, LoopControl, LoopFinished, LoopState, Phase
from ..runtime import new_loop_id
from ..workers import kill_worker_groups
from ._progress import JsonLines, Progress, final_table
from ._tables import print_rows

__all__ = ["PHASE_EXIT", "ctrl_c_leaves", "follow", "leave_now", "start_and_follow"]

#: The exit code of a loop's final phase; `resume` returns the most severe of its loops'.
PHASE_EXIT: dict[Phase, int] = {
    "complete": 0,
    "escalated": 2,
    "cancelled": 3,
    "interrupted": 4,
    "error": 1,
}


def leave_now() -> NoReturn:
    # No grace for workers still being stopped: SIGKILL their process groups, then leave.
    kill_worker_groups()
    raise KeyboardInterrupt


@contextlib.asynccontextmanager
async def ctrl_c_leaves() -> AsyncIterator[None]:
    """Around a runtime's whole life: a Ctrl-C that :func:`follow` does not read (while the
    runtime starts, or stops after its loops ended: a worker may still be in its grace period)
    leaves at once, exit 130. So do SIGTERM and SIGHUP (the terminal closed) at any time:
    by default they would end the process and leave the workers' process groups running."""
    with (
        trio.open_signal_receiver(signal.SIGINT) as sigint,
        trio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP) as ended,
    ):
        async with trio.open_nursery() as nursery:

            async def on_signal(signals: AsyncIterator[int]) -> None:
                async for _ in signals:
                    leave_now()

            nursery.start_soon(on_signal, sigint)
            nursery.start_soon(on_signal, ended)
            yield
            nursery.cancel_scope.cancel()


async def start_and_follow(
    control: LoopControl,
    start: Callable[[str], Awaitable[LoopState]],
    display: JsonLines | Progress,
    *,
    on_node: bool,
) -> LoopState:
    """`run` and `replay`: start a loop under an id chosen here (``start`` is given it) and
    follow it until it ends; its final state."""
    loop_id = new_loop_id()
    # Subscribed before the start, so that no event is missed: to the loop's own events
    # here; a node takes subscriptions to the loops it has only, so there to every loop's.
    async with control.subscribe(None if on_node else loop_id) as events:
        state = await start(loop_id)
        [final] = await follow([state.loop_id], events, display, control)
    return final


async def follow(
    loop_ids: list[str], events: Any, display: JsonLines | Progress, control: LoopControl
) -> list[LoopState]:
    """Show events until every loop in ``loop_ids`` finished; Ctrl-C stops them, a second
    Ctrl-C leaves at once (what was committed stays committed and resumable)."""
    get, stop = control.get, control.stop
    pending = set(loop_ids)
    for loop_id in loop_ids:
        state = await get(loop_id)
        if isinstance(display, Progress):
            display.track(state)
        if state.terminal:
            pending.discard(loop_id)
    with trio.open_signal_receiver(signal.SIGINT) as sigint:
        async with trio.open_nursery() as nursery:

            async def on_ctrl_c() -> None:
                presses = 0
                async for _ in sigint:
                    presses += 1
                    if presses > 1:
                        leave_now()
                    display.note("stopping (press Ctrl-C again to leave at once)")
                    for loop_id in loop_ids:
                        # Not awaited here: a stop waits out a worker's grace period, and
                        # a second Ctrl-C must be read meanwhile.
                        nursery.start_soon(stop, loop_id)

            nursery.start_soon(on_ctrl_c)
            if isinstance(display, Progress):
                display.__enter__()
            try:
                while pending:
                    event = await events.__anext__()
                    if getattr(event, "loop_id", None) not in loop_ids and not isinstance(
                        event, Gap
                    ):
                        continue  # another loop's event (a subscription to all loops)
                    display.show(event)
                    if isinstance(event, LoopFinished):
                        pending.discard(event.loop_id)
                    elif isinstance(event, Gap):  # the finish may be among the missed events
                        pending = {i for i in pending if not (await get(i)).terminal}
            finally:
                if isinstance(display, Progress):
                    display.__exit__(None, None, None)
            nursery.cancel_scope.cancel()
    final = [await get(loop_id) for loop_id in loop_ids]
    if isinstance(display, Progress):
        print_rows(display.console, final_table(final, title="how the loops ended"))
    return final
