"""Commands and events across two nodes on one PostgreSQL store (docs/multinode.md,
docs/benchmarks.md): what a command costs when the node it is sent to routes it to the
loop's owner, against the owner applying it itself, and how late another node's follower
sees an event.

    python bench/routing.py                      # a throwaway server, 200 commands each
    python bench/routing.py --commands 500 --store postgresql://...   # (fresh schema!)

Two runtimes in this process (A and B, each with its own lease and connections, as two
nodes); B runs ``--loops`` loops whose rounds wait an hour. Commands: ``--commands``
pause-then-resume pairs, each command timed on the monotonic clock, sent to B (local) and
to A (routed to B: insert, NOTIFY, B applies it and answers, A reads the answer). Events:
a loop of ``--rounds`` quick rounds on B followed on A; each event's delay is from its
publication on B's bus to its publication on A's (the same process: one clock). Goals:
a routed command at most 20 ms at the median, an event relayed within 50 ms at the median.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

from loopactors.loops import AnyEvent, LoopFinished
from loopactors.runtime import Gap, Runtime, RuntimeConfig, open_runtime


def _config(store: str, state_dir: Path) -> RuntimeConfig:
    return RuntimeConfig(store=store, state_dir=state_dir, shutdown_grace=5.0, max_rounds=10_000)


def _ms(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))]
    return f"{statistics.median(ordered) * 1e3:>9.2f}{p95 * 1e3:>9.2f}{ordered[-1] * 1e3:>9.2f}"


async def _commands(via: Runtime, loop_ids: list[str], count: int) -> list[float]:
    took: list[float] = []
    for n in range(count):
        loop_id = loop_ids[n % len(loop_ids)]
        for command in (via.pause, via.resume):
            start = time.perf_counter()
            await command(loop_id)
            took.append(time.perf_counter() - start)
    return took


async def run(store: str, root: Path, loops: int, commands: int, rounds: int) -> dict[str, Any]:
    published: dict[tuple[str, float, str], float] = {}

    def on_b(event: AnyEvent) -> None:
        published[(event.loop_id, event.at, type(event).__name__)] = time.perf_counter()

    async with (
        open_runtime(_config(store, root / "a")) as a,
        open_runtime(_config(store, root / "b"), observer=on_b) as b,
    ):
        ids = [(await b.start(f"|loop:50| waits {i}", worker="scripted:latency=3600")).loop_id
               for i in range(loops)]  # fmt: skip
        await trio.sleep(0.5)  # every loop in its round
        local = await _commands(b, ids, commands)
        routed = await _commands(a, ids, commands)
        delays: list[float] = []
        follow = await b.start(f"|loop:{rounds}| followed", worker="scripted:latency=0.01")
        with a.subscribe(follow.loop_id) as events:
            async for event in events:
                if isinstance(event, Gap):
                    raise SystemExit(f"the follower fell behind: {event}")
                key = (event.loop_id, event.at, type(event).__name__)
                if key in published:
                    delays.append(time.perf_counter() - published[key])
                if isinstance(event, LoopFinished):
                    break
        for loop_id in ids:
            await b.stop(loop_id)
    return {"local": local, "routed": routed, "relayed": delays}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--loops", type=int, default=20)
    parser.add_argument("--commands", type=int, default=200, help="pause/resume pairs (200)")
    parser.add_argument("--rounds", type=int, default=200, help="rounds of the followed loop")
    parser.add_argument("--store", help="a postgresql:// URL (default: a throwaway server)")
    args = parser.parse_args()
    server = None
    store = args.store
    if store is None:
        from tests.postgres import PostgresServer, _bin_dir  # noqa: PLC0415 - the tests' server

        bin_dir = _bin_dir()
        if bin_dir is None:
            raise SystemExit("no PostgreSQL server binaries (initdb, pg_ctl); pass --store")
        server = PostgresServer(bin_dir)
        server.start()
        store = server.fresh_url()
    try:
        with tempfile.TemporaryDirectory(prefix="loopactors-routing-") as tmp:
            row = trio.run(run, store, Path(tmp), args.loops, args.commands, args.rounds)
        print(f"{'what':<34}{'count':>7}{'median ms':>10}{'p95 ms':>9}{'max ms':>9}")
        for name, key in (
            ("command applied by its owner", "local"),
            ("command routed to the owner", "routed"),
            ("event relayed to another node", "relayed"),
        ):
            values = row[key]
            print(f"{name:<34}{len(values):>7} {_ms(values)}")
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
