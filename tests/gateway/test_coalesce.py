"""The ``coalesce`` subscription: the latest state of each changed loop, batched, never a gap.

What the dashboard's table rides on (docs/protocol.md, "Or states, coalesced").
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from loopactors.gateway import GatewaySettings
from tests.hang import HANG

from .conftest import LiveNode, open_raw

LOOPS = 20
ROUNDS = 5


# A queue of 5 events: an all-loop event subscription falls behind at once, the states never.
@pytest.mark.parametrize("gateway_settings", [GatewaySettings(port=0, subscriber_queue=5)])
async def test_each_changed_loop_comes_once_per_batch_until_its_final_state(
    live_node: LiveNode,
) -> None:
    async with open_raw(live_node) as client:
        sub = await client.ask({"type": "subscribe", "id": 1, "coalesce": 0.2})
        assert sub["type"] == "ok", sub
        sid = sub["data"]["subscription"]
        events = await client.ask({"type": "subscribe", "id": 2})
        events_sid = events["data"]["subscription"]
        with live_node.runtime.bus.changes() as published:
            handles = [
                live_node.runtime.handle(
                    await live_node.runtime.start(
                        f"|loop:{ROUNDS},fresh| job {n}", worker="scripted:latency=0.01"
                    )
                )
                for n in range(LOOPS)
            ]
            latest: dict[str, dict[str, Any]] = {}
            frames = 0
            states = 0
            gaps = 0
            with trio.fail_after(HANG):
                while len(latest) < LOOPS or any(s["phase"] != "complete" for s in latest.values()):
                    frame = await client.receive()
                    if frame.get("subscription") == events_sid:
                        gaps += frame["type"] == "gap"
                        continue
                    assert frame["type"] == "states", frame
                    assert frame["subscription"] == sid
                    ids = [s["loop_id"] for s in frame["loops"]]
                    assert len(ids) == len(set(ids)), "a loop twice in one batch"
                    frames += 1
                    states += len(ids)
                    for state in frame["loops"]:
                        old = latest.get(state["loop_id"])
                        assert old is None or old["updated_at"] <= state["updated_at"]
                        latest[state["loop_id"]] = state
            assert published.take()  # the runtime did publish events meanwhile
        assert set(latest) == {h.loop_id for h in handles}
        assert all(s["completed_rounds"] == ROUNDS for s in latest.values())
        assert gaps > 0  # the event subscription fell behind; the states did not
        # 12 state events per loop (start, 5 x 2 rounds, finish) were coalesced.
        assert states < LOOPS * (2 + 2 * ROUNDS) / 2, (frames, states)
        reply = await client.ask({"type": "unsubscribe", "id": 3, "subscription": sid})
        assert reply["data"]["delivered"] == states
        assert reply["data"]["missed"] == 0


async def test_one_loops_states_and_the_limits_in_hello(live_node: LiveNode) -> None:
    async with open_raw(live_node, hello=False) as client:
        hello = await client.ask(
            {"type": "hello", "id": 0, "protocol": 1, "token": live_node.token}
        )
        assert "coalesce" in hello["data"]["capabilities"]
        assert hello["data"]["limits"]["max_status_loops"] == 1000
        handle = live_node.runtime.handle(
            await live_node.runtime.start("|loop:2| one", worker="scripted:latency=0.2")
        )
        other = live_node.runtime.handle(
            await live_node.runtime.start("|loop:2| other", worker="scripted:latency=0.01")
        )
        sub = await client.ask(
            {"type": "subscribe", "id": 1, "loop_id": handle.loop_id, "coalesce": 0.05}
        )
        assert sub["data"]["loop_id"] == handle.loop_id, sub
        with trio.fail_after(HANG):
            while True:
                frame = await client.receive()
                assert [s["loop_id"] for s in frame["loops"]] == [handle.loop_id]
                if frame["loops"][0]["phase"] == "complete":
                    break
        assert (await other.wait()).phase == "complete"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"coalesce": 0}, "coalesce must be from 0.05 to 60 seconds"),
        ({"coalesce": 61}, "coalesce must be from 0.05 to 60 seconds"),
        ({"coalesce": 1, "replay": True, "loop_id": "x"}, "replay and coalesce"),
        ({"coalesce": "fast"}, "Expected `float | null`, got `str` - at `$.coalesce`"),
    ],
)
async def test_bad_coalesce_is_refused(
    live_node: LiveNode, fields: dict[str, object], message: str
) -> None:
    async with open_raw(live_node) as client:
        reply = await client.ask({"type": "subscribe", "id": 1, **fields})
        assert reply["type"] == "error"
        assert reply["code"] == "invalid_request"
        assert message in reply["message"]
        assert (await client.ask({"type": "ping", "id": 2}))["type"] == "ok"
