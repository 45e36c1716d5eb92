"""Embed the loop runtime in a trio program: start loops, follow them, steer them.

    python examples/embedded_loops.py

Runs on an in-memory store with two loops: one whose rounds are done by a Python function of
this program, one on the scripted worker that is paused, resumed and then stopped.
"""

from __future__ import annotations

import trio

from loopactors import open_runtime
from loopactors.loops import RoundFinished
from loopactors.workers import RoundContext, RoundRequest


async def improve(request: RoundRequest, context: RoundContext | None) -> str:
    """One round: the prompt carries the previous round's output (inherit mode)."""
    previous = request.prompt.split("\n\n---\n\n")[0] if request.round > 1 else ""
    return f"{previous} +{request.round}".strip()


async def main() -> list[str]:
    lines: list[str] = []
    async with open_runtime(store="memory") as rt:
        # A loop whose worker is a function of this program (any importable async callable).
        # `start` returns the loop's first state; the other verbs take its id.
        writer = await rt.start("|loop:4| extend the draft", worker="python:__main__:improve")
        # A slower loop on the scripted worker, to pause, resume and stop.
        slow = await rt.start("|loop:10,fresh| poll the build", worker="scripted:latency=0.05")

        async with trio.open_nursery() as nursery:

            async def follow_writer() -> None:
                # From the loop's first event on, even those before this line ran.
                async for event in rt.handle(writer).history_and_events():
                    if isinstance(event, RoundFinished):
                        lines.append(f"writer: {event.note()}")

            nursery.start_soon(follow_writer)
            final = await rt.wait(writer.loop_id)

        lines.append(f"writer finished: {final.phase}, last output {final.last_output!r}")

        await rt.pause(slow.loop_id)  # the round in flight finishes, then nothing is dispatched
        state = await rt.handle(slow).wait_phase("paused")
        lines.append(f"slow loop {state.phase} after {state.completed_rounds} round(s)")
        await rt.resume(slow.loop_id)
        await trio.sleep(0.12)
        stopped = await rt.stop(slow.loop_id)
        lines.append(f"slow loop stopped: {stopped.phase}")
        history = await rt.history(slow.loop_id)
        lines.append("slow loop rounds: " + ", ".join(f"{r.round}:{r.status}" for r in history))
    return lines


if __name__ == "__main__":
    for line in trio.run(main):
        print(line)
