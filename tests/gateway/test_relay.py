"""Nodes on one PostgreSQL store: a client connected to node A follows, and stops, a loop
node B runs, and goes on following it on node C, over a real websocket (docs/multinode.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import trio

from loopactors.client import connect
from loopactors.gateway import GatewaySettings, open_gateway
from loopactors.loops import AnyEvent, LoopFinished, RoundFinished
from loopactors.runtime import Gap, open_runtime
from loopactors.storage._pg_commands import Routes
from tests.hang import HANG

from .conftest import LiveNode, node_config, open_raw


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


async def test_a_client_moving_to_a_third_node_misses_nothing_and_sees_nothing_twice(
    tmp_path: Path, postgres_url: str
) -> None:
    """Following node B's loop on node A, then, after a reconnect, on node C with ``after``
    the last ``seq`` it got: every stored event once, in order, across the two nodes."""
    configs = {
        name: node_config(tmp_path / name, store=postgres_url, lease_ttl=2.0) for name in "abc"
    }
    async with (
        open_runtime(configs["a"]) as a,
        open_gateway(a, GatewaySettings(port=0)) as a_gateway,
        open_runtime(configs["b"]) as b,
        open_runtime(configs["c"]) as c,
        open_gateway(c, GatewaySettings(port=0)) as c_gateway,
    ):
        on_a = LiveNode(a, a_gateway, a_gateway.token_path.read_text().strip())
        on_c = LiveNode(c, c_gateway, c_gateway.token_path.read_text().strip())
        state = await b.start("|loop:10,fresh| moving", worker="scripted:latency=0.2")
        request = {"type": "subscribe", "id": 1, "loop_id": state.loop_id, "replay": True}
        first: list[dict[str, Any]] = []
        async with open_raw(on_a) as raw:
            assert (await raw.ask(request))["type"] == "ok"
            finished = 0
            while finished < 2:  # mid-loop: rounds 3 to 10 are still to run
                frame = await raw.receive()
                assert frame["type"] == "event", frame
                first.append(frame)
                finished += frame["event"]["type"] == "round_finished"
        last = max(f["seq"] for f in first if f["seq"] is not None)
        async with open_raw(on_c) as raw:
            assert (await raw.ask({**request, "after": last}))["type"] == "ok"
            # Still running on B: C relays its next events live, after its replay's read.
            assert not (await c.get(state.loop_id)).terminal
            second: list[dict[str, Any]] = []
            while not second or second[-1]["event"]["type"] != "loop_finished":
                frame = await raw.receive()
                assert frame["type"] == "event", frame
                second.append(frame)
        stored = msgspec.json.decode(msgspec.json.encode(await b.stored_events(state.loop_id)))
        got = [f for f in first + second if f["seq"] is not None]  # live-only ones have none
        assert [f["seq"] for f in got] == list(range(1, len(stored) + 1))
        assert [f["event"] for f in got] == stored


async def test_a_client_following_every_loop_on_one_node_sees_the_other_nodes_loops(
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
        async with (
            connect(gateway.url, token=token) as client,
            await client.subscribe() as events,  # every loop, as status --follow does
            await client.watch(every=0.05) as states,  # every loop's states, as the dashboard
        ):
            routes = a._routes
            assert isinstance(routes, Routes)
            with trio.fail_after(HANG):
                while routes._horizon is None:  # the relay's first read: where it starts
                    await trio.sleep(0.01)
            state = await b.start("|loop:3,fresh| on b", worker="scripted:latency=0.1")
            got: list[AnyEvent] = []
            with trio.fail_after(HANG):
                async for event in events:
                    assert not isinstance(event, Gap)
                    got.append(event)
                    if isinstance(event, LoopFinished):
                        break
                phases: list[str] = []
                async for batch in states:
                    phases.extend(s.phase for s in batch if s.loop_id == state.loop_id)
                    if "complete" in phases:
                        break
            assert got == await b.stored_events(state.loop_id)
