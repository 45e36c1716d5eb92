"""Commands and events across two nodes on one PostgreSQL store (docs/multinode.md,
docs/benchmarks.md): what a command costs when the node it is sent to routes it to the
loop's owner, against the owner applying it itself, and how late another node's follower
sees an event (of one loop, or of every loop).

    python bench/routing.py                      # a throwaway server, 200 commands each
    python bench/routing.py --commands 500 --store postgresql://...   # (fresh schema!)

Two runtimes in this process (A and B, each with its own lease and connections, as two
nodes); B runs ``--loops`` loops whose rounds wait an hour. Commands: ``--commands``
pause-then-resume pairs, each command timed on the monotonic clock, sent to B (local) and
to A (routed to B: insert, NOTIFY, B applies it and answers, A reads the answer). Events:
a loop of ``--rounds`` quick rounds on B followed on A, by its id and by a subscription of
every loop (``cluster``); each event's delay is from its publication on B's bus to its
arrival on A's subscription (the same process: one clock). Children: ``--commands`` starts
of a child of one of B's loops, sent to B and to A (routed to B, which admits it). Idle:
with a follower of every loop on A and nothing running, how often A reads the events
table for it in ``--idle`` seconds, and how long a read takes. Goals: a routed command at
most 20 ms at the median, an event relayed within 50 ms at the median.
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
from loopactors.runtime import Gap, Runtime, RuntimeConfig, Subscription, open_runtime
from loopactors.storage._pg_commands import _CLUSTER_EVENTS, Routes

WAITS = "scripted:latency=3600"


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


async def _children(via: Runtime, parents: list[str], count: int, tag: str) -> list[float]:
    took: list[float] = []
    for n in range(count):
        parent = parents[n % len(parents)]
        start = time.perf_counter()
        await via.start(f"|loop:50| child {tag} {n}", parent_id=parent, worker=WAITS)
        took.append(time.perf_counter() - start)
    return took


async def _idle_reads(routes: Routes, seconds: float) -> list[float]:
    """The relay's reads for a follower of every loop in ``seconds`` with nothing running:
    how long each took."""
    took: list[float] = []
    sql = routes._sql

    async def timed(query: str, *params: Any) -> list[tuple[Any, ...]]:
        start = time.perf_counter()
        try:
            return await sql(query, *params)
        finally:
            if query == _CLUSTER_EVENTS:
                took.append(time.perf_counter() - start)

    routes._sql = timed  # type: ignore[method-assign]
    try:
        await trio.sleep(seconds)
    finally:
        routes._sql = sql  # type: ignore[method-assign]
    return took


async def run(store: str, root: Path, args: argparse.Namespace) -> dict[str, Any]:
    loops, commands, rounds = args.loops, args.commands, args.rounds
    published: dict[tuple[str, float, str], float] = {}

    def on_b(event: AnyEvent) -> None:
        published[(event.loop_id, event.at, type(event).__name__)] = time.perf_counter()

    async with (
        open_runtime(_config(store, root / "a")) as a,
        open_runtime(_config(store, root / "b"), observer=on_b) as b,
    ):
        ids = [(await b.start(f"|loop:50| waits {i}", worker=WAITS)).loop_id
               for i in range(loops)]  # fmt: skip
        await trio.sleep(0.5)  # every loop in its round
        local = await _commands(b, ids, commands)
        routed = await _commands(a, ids, commands)
        # At most 14 children of each parent on each side (max_tree_loops 30).
        parents = ids[: max(1, -(-commands // 14))]
        local_children = await _children(b, parents, commands, "b")
        routed_children = await _children(a, parents, commands, "a")
        routes = a._routes
        assert isinstance(routes, Routes)
        with a.subscribe(None, cluster=True, queue_size=10_000) as everything:
            # The relay's first read (where it starts) is made meanwhile.
            idle_reads = await _idle_reads(routes, args.idle)
            follow = await b.start(f"|loop:{rounds}| followed", worker="scripted:latency=0.01")
            delays: list[float] = []
            cluster_delays: list[float] = []
            with a.subscribe(follow.loop_id) as events:
                async with trio.open_nursery() as nursery:  # both read as events come
                    for sub, into in ((events, delays), (everything, cluster_delays)):
                        nursery.start_soon(_delays, sub, follow.loop_id, published, into)
        for loop_id in ids:
            await b.stop(loop_id)
    return {
        "local": local,
        "routed": routed,
        "local_children": local_children,
        "routed_children": routed_children,
        "relayed": delays,
        "relayed_cluster": cluster_delays,
        "idle_reads": idle_reads,
        "idle": args.idle,
    }


async def _delays(
    events: Subscription,
    loop_id: str,
    published: dict[tuple[str, float, str], float],
    delays: list[float],
) -> None:
    """The delay of each event of loop ``loop_id`` from its publication on B, into
    ``delays``, until the loop's end (other loops' events are skipped)."""
    async for event in events:
        if isinstance(event, Gap):
            raise SystemExit(f"the follower fell behind: {event}")
        if event.loop_id != loop_id:
            continue
        key = (event.loop_id, event.at, type(event).__name__)
        if key in published:
            delays.append(time.perf_counter() - published[key])
        if isinstance(event, LoopFinished):
            return


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--loops", type=int, default=20)
    parser.add_argument("--commands", type=int, default=200, help="pause/resume pairs (200)")
    parser.add_argument("--rounds", type=int, default=200, help="rounds of the followed loop")
    parser.add_argument("--store", help="a postgresql:// URL (default: a throwaway server)")
    parser.add_argument("--idle", type=float, default=20.0, help="idle seconds watched (20)")
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
            row = trio.run(run, store, Path(tmp), args)
        print(f"{'what':<42}{'count':>7}{'median ms':>10}{'p95 ms':>9}{'max ms':>9}")
        for name, key in (
            ("command applied by its owner", "local"),
            ("command routed to the owner", "routed"),
            ("child started by its parent's owner", "local_children"),
            ("child start routed to the parent's owner", "routed_children"),
            ("event relayed to a loop's follower", "relayed"),
            ("event relayed to a follower of every loop", "relayed_cluster"),
            ("idle read for a follower of every loop", "idle_reads"),
        ):
            values = row[key]
            print(f"{name:<42}{len(values):>7} {_ms(values) if values else ''}")
        reads = len(row["idle_reads"]) / row["idle"]
        print(f"# idle: {reads:.2f} reads of the events table per second for every-loop followers")
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
