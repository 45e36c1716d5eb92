"""Backpressure and fan-out: slow subscribers are told what they missed, fast ones miss nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
from trio_websocket import ConnectionClosed, open_websocket_url

from loopactors.client import connect
from loopactors.gateway import GatewaySettings, open_gateway
from loopactors.loops import LoopFinished
from loopactors.runtime import Gap, open_runtime
from tests.hang import HANG

from .conftest import LiveNode, RawClient, node_config


@pytest.fixture
def gateway_settings() -> GatewaySettings:
    return GatewaySettings(port=0, subscriber_queue=5)


def accounted(frames: list[dict[str, Any]]) -> int:
    """Events a subscriber saw, plus those its gaps said it missed."""
    return sum(f["missed"] if f["type"] == "gap" else f["type"] == "event" for f in frames)


async def test_a_slow_subscriber_gets_a_gap_and_never_slows_the_loops(live_node: LiveNode) -> None:
    async with open_websocket_url(live_node.url, message_queue_size=0) as ws:
        raw = RawClient(ws)
        await raw.ask({"type": "hello", "id": 0, "protocol": 1, "token": live_node.token})
        assert (await raw.ask({"type": "subscribe", "id": 1}))["type"] == "ok"
        # The client reads nothing while 40 loops run to the end.
        handles = [
            live_node.runtime.handle(await live_node.runtime.start("|loop:5,fresh| busy"))
            for _ in range(40)
        ]
        with trio.fail_after(HANG):
            for handle in handles:
                assert (await handle.wait()).phase == "complete"
        # Read until every event is either seen or counted missed (no guessed drain time).
        total = 40 * (1 + 5 * 2 + 1)  # loop started, round started/finished x5, loop finished
        frames: list[dict[str, Any]] = []
        with trio.fail_after(HANG):
            while accounted(frames) < total:
                frames.append(await raw.receive())
    gaps = [f for f in frames if f["type"] == "gap"]
    assert gaps, "a subscriber that fell behind must be told"
    assert accounted(frames) == total
    stats = await live_node.gateway.statistics()
    assert stats.gaps >= 1


async def test_disconnect_policy_closes_a_slow_subscriber(tmp_path: Path) -> None:
    settings = GatewaySettings(port=0, subscriber_queue=2, slow_subscriber="disconnect")
    async with (
        open_runtime(node_config(tmp_path)) as runtime,
        open_gateway(runtime, settings) as gateway,
        open_websocket_url(gateway.url, message_queue_size=0) as ws,
    ):
        token = gateway.token_path.read_text().strip()
        raw = RawClient(ws)
        await raw.ask({"type": "hello", "id": 0, "protocol": 1, "token": token})
        await raw.ask({"type": "subscribe", "id": 1})
        handles = [runtime.handle(await runtime.start("|loop:5,fresh| busy")) for _ in range(20)]
        for handle in handles:
            await handle.wait()
        frames = []
        with trio.fail_after(HANG), pytest.raises(ConnectionClosed) as closed:
            while True:
                frames.append(await raw.receive())
        assert closed.value.reason is not None
        assert closed.value.reason.code == 1008
        assert any(f["type"] == "closing" and "too slow" in f["reason"] for f in frames)
        # The node goes on serving everyone else.
        async with connect(gateway.url, token=token) as node:
            assert await node.ping() > 0


async def test_many_clients_subscribed_while_many_loops_run(tmp_path: Path) -> None:
    """200 clients, each starting 5 of 1,000 loops and following them with replay, while 10
    more follow every loop: no client that keeps up loses or repeats an event."""
    clients, per_client, watchers, rounds = 200, 5, 10, 2
    loops = clients * per_client
    per_loop = ["loop_started"] + ["round_started", "round_finished"] * rounds + ["loop_finished"]
    settings = GatewaySettings(port=0, subscriber_queue=100_000)
    async with (
        open_runtime(node_config(tmp_path, event_queue_size=100_000)) as runtime,
        open_gateway(runtime, settings) as gateway,
    ):
        token = gateway.token_path.read_text().strip()
        watched: list[int] = []
        followed: dict[str, list[str]] = {}
        ready = trio.Semaphore(0)
        go = trio.Event()

        async def watcher() -> None:
            async with connect(gateway.url, token=token) as node:
                async with await node.subscribe(queue_size=100_000) as events:
                    ready.release()
                    seen = done = 0
                    async for event in events:
                        assert not isinstance(event, Gap)
                        seen += 1
                        done += isinstance(event, LoopFinished)
                        if done == loops:
                            break
                watched.append(seen)

        async def client(n: int) -> None:
            async with connect(gateway.url, token=token) as node:
                ready.release()
                await go.wait()
                for i in range(per_client):
                    state = await node.start(f"|loop:{rounds},fresh| job {n}.{i}")
                    kinds = followed[state.loop_id] = []
                    async with await node.subscribe(state.loop_id, replay=True) as events:
                        async for event in events:
                            assert not isinstance(event, Gap)
                            kinds.append(str(type(event).__struct_config__.tag))
                            if isinstance(event, LoopFinished):
                                break

        with trio.fail_after(HANG):
            async with trio.open_nursery() as nursery:
                for _ in range(watchers):
                    nursery.start_soon(watcher)
                for n in range(clients):
                    nursery.start_soon(client, n)
                for _ in range(watchers + clients):
                    await ready.acquire()
                assert (await gateway.statistics()).connections == watchers + clients
                go.set()
    assert len(followed) == loops
    assert all(kinds == per_loop for kinds in followed.values())
    assert watched == [loops * len(per_loop)] * watchers
