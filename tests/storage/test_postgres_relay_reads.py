"""What a node's relay asks of a PostgreSQL store: nothing about the loops it has
first-hand (docs/multinode.md), one read for the loops other nodes own; and that a node
alone on the store tells nobody of its events."""

from __future__ import annotations

from typing import Any

import trio

from loopactors.loops import AnyEvent, LoopFinished, RoundStarted
from loopactors.storage._pg_commands import Routes
from loopactors.storage._postgres import Holding, Lease, PostgresBackend


class Recorded(Routes):
    """Routes that note the parameters of each statement they send."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.asked: list[tuple[Any, ...]] = []

    async def _sql(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        self.asked.append(params)
        return await super()._sql(query, *params)


async def test_the_relay_reads_nothing_of_loops_owned_here_or_ended_here(
    postgres_url: str,
) -> None:
    PostgresBackend(postgres_url, node_id="").close()  # the tables
    published: list[AnyEvent] = []
    holding = Holding("me")
    holding.fences["mine"] = 1  # a loop this node owns
    routes = Recorded(
        postgres_url, shown="the test store", node_id="me", timeout=30.0, holding=holding
    )
    try:
        # A loop run here to its end: its last event was published on this node's bus.
        routes.local_event(
            LoopFinished(loop_id="ended", at=1.0, phase="complete", rounds=1, completed_rounds=1)
        )
        await routes._relay_once({"mine", "ended"}, published.append)
        assert routes.asked == []
        # A loop this node neither owns nor ran is asked about, alone.
        await routes._relay_once({"mine", "ended", "elsewhere"}, published.append)
        assert routes.asked == [("me", ["elsewhere"])]
        assert published == []  # no such loop in the store: nothing to relay
    finally:
        routes.close()


async def test_a_node_alone_on_the_store_tells_nobody_of_its_events(postgres_url: str) -> None:
    a = await trio.to_thread.run_sync(lambda: Lease(postgres_url, shown="the test store", name="a"))
    routes = Routes(
        postgres_url, shown="the test store", node_id=a.node_id, timeout=30.0, holding=a.holding
    )
    event = RoundStarted(loop_id="x", at=1.0, round=1, rounds=1, seed_source="task")
    try:
        assert a.holding.alone()
        routes.local_event(event)
        assert not routes._local_events.is_set()  # no NOTIFY nobody would hear
        async with trio.open_nursery() as nursery:
            nursery.start_soon(routes._hear)
            # Another node's routes open: it says so, and this node hears it at once.
            other = Routes(postgres_url, shown="the test store", node_id="b", timeout=30.0)
            with trio.fail_after(30):  # a failure's bound only: heard in milliseconds
                while a.holding.alone():
                    await trio.sleep(0.01)
            other.close()
            nursery.cancel_scope.cancel()
        routes.local_event(event)
        assert routes._local_events.is_set()
        # The lease's counts: another node's lease is counted at each renewal, and once it
        # left, this node is alone again.
        b = await trio.to_thread.run_sync(
            lambda: Lease(postgres_url, shown="the test store", name="b")
        )
        assert b.holding.peers == 1
        assert a.renew()
        assert a.holding.peers == 1
        assert not a.holding.alone()
        b.release()
        assert a.renew()
        assert a.holding.alone()
    finally:
        routes.close()
        a.release()
