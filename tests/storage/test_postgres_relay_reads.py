"""What a node's relay asks of a PostgreSQL store: nothing about the loops it has
first-hand (docs/multinode.md), one read for the loops other nodes own."""

from __future__ import annotations

from typing import Any

from loopactors.loops import AnyEvent, LoopFinished
from loopactors.storage._pg_commands import Routes
from loopactors.storage._postgres import PostgresBackend


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
    routes = Recorded(
        postgres_url, shown="the test store", node_id="me", timeout=30.0, owned={"mine"}
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
