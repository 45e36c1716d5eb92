"""A replay subscription numbers its events by their place in the loop's log, and ``after``
resumes from one: a client that reconnects, to the same node or to the one that took its
store over, misses no event and sees none twice (docs/protocol.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from loopactors.client import connect
from loopactors.gateway import GatewaySettings, open_gateway
from loopactors.loops import AnyEvent, LoopFinished, RoundStarted
from loopactors.runtime import Gap, open_runtime
from loopactors.workers import RoundContext, RoundRequest
from tests.hang import HANG

from .conftest import LiveNode, RawClient, node_config, open_raw


async def _frames_until_finished(raw: RawClient) -> list[dict[str, Any]]:
    frames: list[dict[str, Any]] = []
    while True:
        frame = await raw.receive()
        if frame["type"] == "event":
            frames.append(frame)
            if frame["event"]["type"] == "loop_finished":
                return frames


async def test_replayed_and_live_events_carry_their_place_and_after_skips(
    live_node: LiveNode,
) -> None:
    runtime = live_node.runtime
    handle = runtime.handle(await runtime.start("|loop:3| count", worker="scripted"))
    await handle.wait()
    stored = await runtime.stored_events(handle.loop_id)
    assert len(stored) >= 8
    async with open_raw(live_node) as raw:
        for after in (0, 3, len(stored)):
            request = {"type": "subscribe", "id": 1, "loop_id": handle.loop_id}
            reply = await raw.ask({**request, "replay": True, "after": after})
            assert reply["type"] == "ok", reply
            frames = []
            for _ in range(len(stored) - after):
                frames.append(await raw.receive())
            assert [f["seq"] for f in frames] == list(range(after + 1, len(stored) + 1))
            assert [f["event"]["at"] for f in frames] == [e.at for e in stored[after:]]
            sid = reply["data"]["subscription"]
            assert (await raw.ask({"type": "unsubscribe", "id": 2, "subscription": sid}))[
                "type"
            ] == "ok"
        # Live events go on numbering where the stored ones stopped.
        live = runtime.handle(await runtime.start("|loop:2| more", worker="scripted:latency=0.05"))
        request = {"type": "subscribe", "id": 3, "loop_id": live.loop_id, "replay": True}
        assert (await raw.ask(request))["type"] == "ok"
        frames = await _frames_until_finished(raw)
        assert [f["seq"] for f in frames] == list(range(1, len(frames) + 1))
        assert len(frames) == len(await runtime.stored_events(live.loop_id))
        # Without replay, events are not numbered.
        other = runtime.handle(
            await runtime.start("|loop:1| plain", worker="scripted:latency=0.05")
        )
        request = {"type": "subscribe", "id": 4, "loop_id": other.loop_id}
        assert (await raw.ask(request))["type"] == "ok"
        assert all(f.get("seq") is None for f in await _frames_until_finished(raw))


async def stepping(request: RoundRequest, context: RoundContext | None) -> str:
    """A round that reports two tool calls live (``agent_step``: never stored)."""
    assert context is not None
    await trio.sleep(0.05)  # round 1's steps come after the test subscribed
    context.agent_step("read", "a.py")
    context.agent_step("write", "a.py")
    return f"round {request.round} of {request.rounds}: edited"


async def test_live_only_events_take_no_place_in_the_log(live_node: LiveNode) -> None:
    """Agent steps reach a replay subscriber but are not stored: numbering them too would
    make a renewal's after skip stored events never received (or be refused as past them)."""
    runtime = live_node.runtime
    async with open_raw(live_node) as raw:
        state = await runtime.start(
            "|loop:2,fresh| edit",
            worker="python:tests.gateway.test_subscribe_after:stepping",
            stale_rounds_limit=100,
        )
        request = {"type": "subscribe", "id": 1, "loop_id": state.loop_id, "replay": True}
        assert (await raw.ask(request))["type"] == "ok"
        frames = await _frames_until_finished(raw)
    stored = await runtime.stored_events(state.loop_id)
    steps = [f for f in frames if f["event"]["type"] == "agent_step"]
    assert len(steps) == 4
    assert all(f.get("seq") is None for f in steps)
    numbered = [f for f in frames if f["event"]["type"] != "agent_step"]
    assert [f["seq"] for f in numbered] == list(range(1, len(stored) + 1))
    assert [f["event"]["at"] for f in numbered] == [e.at for e in stored]


async def flurry(request: RoundRequest, context: RoundContext | None) -> str:
    """A round that reports many tool calls at once: more than a small queue holds."""
    assert context is not None
    await trio.sleep(0.05)  # round 1's steps come after the test subscribed
    for n in range(20 if request.round == 1 else 0):  # round 2's end is not dropped
        context.agent_step("read", f"f{n}.py")
    return f"round {request.round} of {request.rounds}: read"


@pytest.mark.parametrize("gateway_settings", [GatewaySettings(port=0, subscriber_queue=4)])
async def test_a_gap_of_live_only_events_moves_no_place(live_node: LiveNode) -> None:
    """Steps dropped for a slow subscriber are counted in its gap, but only the stored
    events it missed move the numbering: the next frame's seq is still its place."""
    runtime = live_node.runtime
    async with open_raw(live_node) as raw:
        state = await runtime.start(
            "|loop:2,fresh| read",
            worker="python:tests.gateway.test_subscribe_after:flurry",
            stale_rounds_limit=100,
        )
        request = {"type": "subscribe", "id": 1, "loop_id": state.loop_id, "replay": True}
        assert (await raw.ask(request))["type"] == "ok"
        frames: list[dict[str, Any]] = []
        with trio.fail_after(HANG):
            while not frames or frames[-1].get("event", {}).get("type") != "loop_finished":
                frames.append(await raw.receive())
    assert any(f["type"] == "gap" for f in frames)
    stored = await runtime.stored_events(state.loop_id)

    def key(event: dict[str, Any]) -> tuple[Any, ...]:
        return event["type"], event.get("round"), event["at"]

    log = [key(msgspec.to_builtins(e)) for e in stored]
    numbered = [f for f in frames if f.get("seq") is not None]
    assert numbered
    assert [f["seq"] for f in numbered] == [log.index(key(f["event"])) + 1 for f in numbered]


async def test_after_out_of_place_is_refused_by_name(live_node: LiveNode) -> None:
    handle = live_node.runtime.handle(
        await live_node.runtime.start("|loop:1| x", worker="scripted")
    )
    await handle.wait()
    stored = len(await live_node.runtime.stored_events(handle.loop_id))
    base = {"type": "subscribe", "id": 1, "loop_id": handle.loop_id}
    async with open_raw(live_node) as raw:
        for request, says in (
            ({**base, "after": 2}, "after needs replay"),
            ({**base, "replay": True, "after": -1}, "after must be 0 or more, got -1"),
            ({**base, "replay": True, "after": stored + 1}, f"past the {stored} events stored"),
        ):
            reply = await raw.ask(request)
            assert reply["type"] == "error"
            assert reply["code"] == "invalid_request"
            assert says in reply["message"]
        assert (await raw.ask({"type": "status", "id": 5}))["type"] == "ok"  # still serving


async def test_a_client_moved_to_the_node_that_took_over_sees_every_event_once(
    tmp_path: Path, postgres_url: str
) -> None:
    """Node A stops mid-loop; node B (another state directory, the same PostgreSQL store)
    takes the store over behind the same address; the client's replay subscription,
    renewed on B after the last event it got, yields the loop's whole log exactly once."""
    token = "t" * 40
    token_file = tmp_path / "token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    leave_a = trio.Event()

    async def node_a(*, task_status: trio.TaskStatus[int]) -> None:
        config = node_config(tmp_path / "a", store=postgres_url)
        settings = GatewaySettings(port=0, token_file=token_file)
        async with open_runtime(config) as a, open_gateway(a, settings) as gateway:
            task_status.started(gateway.port)
            await leave_a.wait()
            await gateway.shutdown("moving")
        # Out of the block: A's rounds stopped, its loops left live, its lease left.

    seen: list[AnyEvent] = []
    async with trio.open_nursery() as nursery:
        port = await nursery.start(node_a)
        url = f"ws://127.0.0.1:{port}"
        async with connect(url, token=token, reconnect=True, max_backoff=0.05) as client:
            state = await client.start("|loop:4,fresh| move", worker="scripted:latency=0.2")
            events = await client.subscribe(state.loop_id, replay=True)
            with trio.fail_after(HANG):
                async for event in events:
                    assert not isinstance(event, Gap)
                    seen.append(event)
                    if isinstance(event, RoundStarted) and event.round == 2:
                        break
                # What the subscription asks B for: the events after the last one it got.
                assert events.seq == len(seen)
                assert events._subscribe_request().after == len(seen)
                leave_a.set()
                while nursery.child_tasks:  # A is gone
                    await trio.sleep(0.01)
            b_config = node_config(tmp_path / "b", store=postgres_url)
            b_settings = GatewaySettings(port=port, token_file=token_file)
            async with open_runtime(b_config) as b, open_gateway(b, b_settings):
                with trio.fail_after(HANG):
                    async for event in events:
                        assert not isinstance(event, Gap)
                        seen.append(event)
                        if isinstance(event, LoopFinished):
                            break
                assert client.reconnects >= 1
                stored = await b.stored_events(state.loop_id)
    assert seen == stored
    assert isinstance(seen[-1], LoopFinished)
    assert seen[-1].phase == "complete"
