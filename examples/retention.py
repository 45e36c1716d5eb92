"""Keep the store small: prune finished loops by hand, or let ``retention_days`` do it.

    python examples/retention.py

Runs three loops on a SQLite store in a temporary directory, pauses one, then prunes every
finished loop (a dry run first). The paused loop is live, so it stays. A runtime opened with
``retention_days`` prunes on its own: at start, then every hour.
"""

from __future__ import annotations

import tempfile

import trio

from loopactors import open_runtime
from loopactors.errors import LoopNotFound


async def main(state_dir: str) -> list[str]:
    lines: list[str] = []
    async with open_runtime(state_dir=state_dir, store="sqlite", retention_days=30) as rt:
        done = [await rt.start(f"|loop:2| task {n}") for n in range(2)]
        for state in done:
            await rt.wait(state.loop_id)
        paused = await rt.start("|loop:5| long task", worker="scripted:latency=0.05")
        await rt.pause(paused.loop_id)
        await rt.handle(paused).wait_phase("paused")
        await trio.sleep(0.01)  # "older than 0 seconds": let the clock pass the loops' end

        lines.append(f"dry run: {(await rt.prune(0, dry_run=True)).note()}")
        lines.append(f"prune: {(await rt.prune(0)).note()}")
        try:
            await rt.history(done[0].loop_id)
        except LoopNotFound:
            lines.append("a pruned loop's history: not found")
        left = [s.phase for s in await rt.list()]
        lines.append(f"left: {left}")
        await rt.stop(paused.loop_id)
    return lines


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as state:
        for line in trio.run(main, state):
            print(line)
