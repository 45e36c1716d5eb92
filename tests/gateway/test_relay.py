"""Two nodes on one PostgreSQL store: a client connected to node A follows, and stops, a loop
node B runs, over a real websocket (docs/multinode.md)."""

from __future__ import annotations

from pathlib import Path

import trio

from loopactors.client import connect
from loopactors.gateway import GatewaySettings, open_gateway
from loopactors.loops import AnyEvent, LoopFinished, RoundFinished
from loopactors.runtime import Gap, open_runtime
from tests.hang import HANG

from .conftest import node_config


async def test_a_client_on_one_node_sees_another_nodes_loop_whole_and_stops_it(
    tmp_path: Path, postgres_url: str
) -> None:
    a_config = node_config(tmp_path / "a", store=postgres_url, lease_ttl=2.0)
    b_config = node_config(tmp_path / "b", store=postgres_url, lease_ttl=2.0)
    async with (
        open_runtime(a_config) as a,
        open_gateway(a, GatewaySettings(port=0)) as gateway,
        open_runtime(b_config) as b,
    ):
        token = gateway.token_path.read_text().strip()
        async with connect(gateway.url, token=token) as client:
            # Run by B; followed through A, from its start (replay) and from now on (plain).
            state = await b.start("|loop:4,fresh| relayed", worker="scripted:latency=0.2")
            replayed: list[AnyEvent] = []
            plain: list[AnyEvent] = []
            async with (
                await client.subscribe(state.loop_id, replay=True) as events,
                await client.subscribe(state.loop_id) as live,
            ):
                with trio.fail_after(HANG):
                    async for event in events:
                        assert not isinstance(event, Gap)
                        replayed.append(event)
                        if isinstance(event, LoopFinished):
                            break
                    async for event in live:
                        assert not isinstance(event, Gap)
                        plain.append(event)
                        if isinstance(event, LoopFinished):
                            break
            stored = await b.stored_events(state.loop_id)
            assert replayed == stored  # no gap, no repeat
            assert any(isinstance(e, RoundFinished) for e in plain)
            assert plain == stored[len(stored) - len(plain) :]

            # A stop sent to A for a loop B runs: B stops it, and A's client sees it end.
            long = await b.start("|loop:50| long on b", worker="scripted:latency=0.2")
            async with await client.subscribe(long.loop_id) as live:
                stopped = await client.stop(long.loop_id)
                assert stopped.phase == "cancelled"
                with trio.fail_after(HANG):
                    async for event in live:
                        if isinstance(event, LoopFinished):
                            assert event.phase == "cancelled"
                            break
