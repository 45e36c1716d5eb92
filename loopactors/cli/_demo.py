"""`loopactors demo`: the main job on embedded defaults, no network, no key.

Four loops run side by side on the scripted worker, with a SQLite store in a temporary
directory. One is stopped mid-way, a runtime actor (the Dispatcher) is crashed on purpose and
supervision plus recovery carry on, and a closing table shows what happened. The exit code is
0 only if every loop ended as planned with each round recorded exactly once.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ..actors import SupervisorRef
from ..loops import LoopFinished, RoundFinished
from ..runtime import RuntimeConfig, open_runtime
from ..testing import inject_crash
from ._progress import Progress, final_table
from ._tables import print_rows

LOOPS = [
    ("|loop:5| draft the release notes", "scripted:latency={lat}", "complete"),
    ("|loop:4,fresh| review the parser module", "scripted:latency={lat}", "complete"),
    # Its rounds never go at zero latency: the stop is sent when round 3 finishes and must
    # land before round 6 does, even on a loaded machine with `--fast`.
    ("|loop:6| refactor the store, one step at a time", "scripted:latency={slow}", "cancelled"),
    ("|loop:5| run the flaky integration tests", "scripted:latency={lat},fail_every=3", "complete"),
]


async def run_demo(fast: bool = False) -> int:
    latency = 0.0 if fast else 0.35
    progress = Progress()
    with tempfile.TemporaryDirectory(prefix="loopactors-demo-") as tmp:
        config = RuntimeConfig(state_dir=Path(tmp), store="sqlite", shutdown_grace=5.0)
        async with open_runtime(config) as rt:
            progress.note(f"loopactors demo: 4 loops, scripted worker, SQLite store in {tmp}")
            handles = []
            with rt.subscribe() as events:
                for text, worker, _ in LOOPS:
                    spec = worker.format(lat=latency, slow=max(latency, 0.3))
                    state = await rt.start(text, worker=spec)
                    progress.track(state)
                    handles.append(rt.handle(state))
                crashed = stopped = False
                finished = 0
                with progress:
                    while finished < len(handles):
                        event = await events.receive()
                        progress.show(event)
                        if isinstance(event, LoopFinished):
                            finished += 1
                        if not isinstance(event, RoundFinished):
                            continue
                        if not crashed and event.round == 2:
                            crashed = True
                            progress.note(
                                "crashing the Dispatcher on purpose: its supervisor restarts "
                                "it, and the loops resume from their last committed step"
                            )
                            inject_crash(rt.node, "dispatcher")
                        if not stopped and event.loop_id == handles[2].loop_id and event.round == 3:
                            stopped = True
                            progress.note(f"stopping {handles[2].loop_id} mid-way")
                            await handles[2].stop()
            final = [await h.get() for h in handles]
            restarts = (await rt.node.supervisor.statistics()).restarts
            loops = rt.node.whereis("loops")
            if loops is not None:
                restarts += (await SupervisorRef(loops).statistics()).restarts
            print_rows(progress.console, final_table(final, title="how the loops ended"))
            ok = True
            for handle, state, (_, _, expected) in zip(handles, final, LOOPS, strict=True):
                rounds = [r.round for r in await handle.history()]
                if state.phase != expected or rounds != sorted(set(rounds)):
                    ok = False
                    progress.note(
                        f"unexpected: {state.loop_id} ended {state.phase}, rounds {rounds}"
                    )
            progress.note(
                f"actor restarts survived: {restarts}; every round recorded exactly once: "
                f"{'yes' if ok else 'NO'}"
            )
    return 0 if ok else 1


__all__ = ["run_demo"]
