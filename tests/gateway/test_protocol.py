"""Round trips of every request over a real websocket, and the answers to bad input."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from loopactors.cli.schema import node_schema
from loopactors.client import RemoteError, connect
from loopactors.gateway import GatewaySettings
from loopactors.loops import AnyEvent, LoopFinished, LoopPaused, RoundFinished
from loopactors.runtime import Gap
from tests.hang import HANG

from .conftest import LiveNode, open_raw

SCHEMA = Path(__file__).parents[2] / "docs" / "protocol.schema.json"


def test_published_schema_is_current() -> None:
    """docs/protocol.schema.json is generated from the code: regenerate it with
    `python -m loopactors.cli.schema > docs/protocol.schema.json` when this fails."""
    assert json.loads(SCHEMA.read_text()) == json.loads(json.dumps(node_schema()))


async def test_every_request_round_trips(live_node: LiveNode) -> None:
    async with connect(live_node.url, token=live_node.token) as node:
        assert node.info.capabilities
        assert node.info.default_worker == "scripted"
        assert await node.ping() > 0
        state = await node.start(
            "|loop:3,fresh| count", worker="scripted:latency=0.2", round_timeout=60
        )
        assert state.spec.round_timeout == 60
        async with await node.subscribe(state.loop_id) as events:
            paused = await node.pause(state.loop_id)
            assert paused.pause_requested or paused.phase == "paused"
            async for event in events:
                if isinstance(event, LoopPaused):
                    break
            assert (await node.get(state.loop_id)).phase == "paused"
            await node.resume(state.loop_id)
            final = await node.stop(state.loop_id, after_round=True)
            assert final.stop_requested == "after_round"
            async for event in events:
                if isinstance(event, LoopFinished):
                    break
        final = await node.get(state.loop_id)
        assert final.phase == "cancelled"
        history = await node.history_reply(state.loop_id, output_head=3)
        assert history.loop.loop_id == state.loop_id
        assert all(len(r.output) <= 3 for r in history.rounds)
        first = await node.output(state.loop_id, 1)
        assert len(first.output) > 3
        listed = await node.list()
        assert [s.loop_id for s in listed] == [state.loop_id]
        assert await node.list(live_only=True) == []
        assert "owners" in node.info.capabilities
        assert await node.owners([state.loop_id]) is None  # a store of its own: no owners


async def test_structured_spec_and_breaker_options(live_node: LiveNode) -> None:
    from loopactors.loops import LoopSpec

    async with connect(live_node.url, token=live_node.token) as node:
        spec = LoopSpec(task="structured", rounds=2, mode="fresh")
        state = await node.start(spec, stagnation_threshold=5, max_tokens=1000)
        assert state.spec.rounds == 2
        assert state.spec.stagnation_threshold == 5
        assert state.spec.max_tokens == 1000
        assert (await node.wait(state.loop_id)).phase == "complete"


async def test_stop_now_cancels_the_round_in_flight(live_node: LiveNode) -> None:
    async with connect(live_node.url, token=live_node.token) as node:
        state = await node.start("|loop:3| slow", worker="scripted:latency=30")
        async with await node.subscribe(state.loop_id) as events:
            with trio.fail_after(HANG):
                while (await node.get(state.loop_id)).phase != "awaiting_worker":
                    await trio.sleep(0.01)
            stopped = await node.stop(state.loop_id)
            assert stopped.phase == "cancelled"
            seen = [e async for e in _until_finished(events)]
        assert isinstance(seen[-1], LoopFinished)
        assert seen[-1].phase == "cancelled"


async def _until_finished(
    events: AsyncIterator[AnyEvent | Gap],
) -> AsyncIterator[AnyEvent | Gap]:
    async for event in events:
        yield event
        if isinstance(event, LoopFinished):
            return


async def test_errors_have_stable_codes(live_node: LiveNode) -> None:
    async with connect(live_node.url, token=live_node.token) as node:
        with pytest.raises(RemoteError) as info:
            await node.get("nope")
        assert info.value.code == "not_found"
        with pytest.raises(RemoteError) as info:
            await node.start("|loop:0| bad")
        assert info.value.code == "rejected"
        assert "below 1" in info.value.message
        with pytest.raises(RemoteError) as info:
            await node.start("|loop:2| x", worker="nosuch")
        assert info.value.code == "rejected"
        assert "accepted kinds" in info.value.message
        with pytest.raises(RemoteError) as info:
            await node.start("|loop:2| x", bogus=1)
        assert info.value.code == "rejected"
        with pytest.raises(RemoteError) as info:
            await node.output("nope", 1)
        assert info.value.code == "not_found"
        state = await node.start("|loop:1| one")
        await node.wait(state.loop_id)
        with pytest.raises(RemoteError) as info:
            await node.output(state.loop_id, 7)
        assert info.value.code == "not_found"
        assert "rounds 1..1" in info.value.message
        with pytest.raises(RemoteError) as info:
            await node.subscribe("nope")
        assert info.value.code == "not_found"


@pytest.mark.parametrize(
    ("frame", "code"),
    [
        ("{not json", "bad_json"),
        ("[1, 2]", "invalid_request"),
        ('{"type": "launch", "id": 5}', "unknown_type"),
        ('{"id": 5}', "unknown_type"),
        ('{"type": "stop", "id": 5}', "invalid_request"),
        ('{"type": "stop", "id": 5, "loop_id": 42}', "invalid_request"),
        ('{"type": "status", "id": 5, "extra": true}', "invalid_request"),
        ('{"type": "status", "id": 5, "limit": 0}', "invalid_request"),
        ('{"type": "history", "id": 5, "loop_id": "x", "output_head": -1}', "invalid_request"),
        ('{"type": "start", "id": 5}', "invalid_request"),
        (
            '{"type": "start", "id": 5, "text": "|loop| a", "spec": {"task": "b"}}',
            "invalid_request",
        ),
        ('{"type": "start", "id": 5, "spec": {"task": "b", "rounds": "3"}}', "invalid_request"),
        ('{"type": "unsubscribe", "id": 5, "subscription": "s9"}', "not_found"),
        ('{"type": "hello", "id": 5, "protocol": 1}', "invalid_request"),
        (b"\x00binary", "bad_frame"),
    ],
)
async def test_malformed_frames_get_an_error_and_the_connection_goes_on(
    live_node: LiveNode, frame: str | bytes, code: str
) -> None:
    async with open_raw(live_node) as raw:
        reply = await raw.ask(frame)
        assert reply["type"] == "error"
        assert reply["code"] == code, reply
        assert reply["message"]
        if code not in {"bad_json", "bad_frame"} and frame != "[1, 2]":
            assert reply["id"] == 5
        assert (await raw.ask({"type": "ping", "id": 6}))["type"] == "ok"


@pytest.fixture
def gateway_settings() -> GatewaySettings:
    return GatewaySettings(
        port=0,
        max_frame_bytes=2_000,
        max_subscriptions=2,
        max_requests_per_second=50,
        request_burst=20,
    )


async def test_oversized_frame_is_refused(live_node: LiveNode) -> None:
    async with open_raw(live_node) as raw:
        big = json.dumps({"type": "start", "id": 1, "text": "|loop| " + "x" * 3_000})
        reply = await raw.ask(big)
        assert reply["code"] == "frame_too_large"
        assert "2000" in reply["message"]
        assert (await raw.ask({"type": "ping", "id": 2}))["type"] == "ok"


async def test_subscription_limit(live_node: LiveNode) -> None:
    async with connect(live_node.url, token=live_node.token) as node:
        await node.subscribe()
        await node.subscribe()
        with pytest.raises(RemoteError) as info:
            await node.subscribe()
        assert info.value.code == "too_many_subscriptions"


async def test_request_rate_limit(live_node: LiveNode) -> None:
    async with open_raw(live_node) as raw:
        for i in range(60):
            await raw.send({"type": "ping", "id": i})
        replies = [await raw.receive() for _ in range(60)]
    codes = [r.get("code") for r in replies if r["type"] == "error"]
    assert codes
    assert set(codes) == {"rate_limited"}
    assert sum(r["type"] == "ok" for r in replies) >= 20  # the burst always passes
    assert sorted(r["id"] for r in replies) == list(range(60))  # one reply per request


async def test_wrong_types_in_reply_never_crash_the_node(live_node: LiveNode) -> None:
    async with open_raw(live_node) as raw:
        for frame in ['{"type": "ping", "id": [1]}', '{"type": "ping", "id": null}', "null", "1"]:
            reply = await raw.ask(frame)
            assert reply["type"] == "error"
        assert (await raw.ask({"type": "ping", "id": 1}))["type"] == "ok"
    stats = await live_node.gateway.statistics()
    assert stats.rejected_frames >= 4


async def test_events_arrive_in_order(live_node: LiveNode) -> None:
    async with (
        connect(live_node.url, token=live_node.token) as node,
        await node.subscribe() as events,
    ):
        state = await node.start("|loop:4,fresh| go")
        seen = [e async for e in _until_finished(events)]
    rounds = [e.round for e in seen if isinstance(e, RoundFinished)]
    assert rounds == [1, 2, 3, 4]
    assert all(e.loop_id == state.loop_id for e in seen)


async def test_a_retried_start_with_the_same_loop_id_returns_that_loop(
    live_node: LiveNode,
) -> None:
    start = {
        "type": "start",
        "text": "|loop:2| once only",
        "worker": "scripted:latency=30",
        "loop_id": "my-job-1",
    }
    async with open_raw(live_node) as raw:
        # Two starts back to back: the second arrives while the first is being admitted.
        await raw.send({**start, "id": 1})
        await raw.send({**start, "id": 2})
        answers = {r["id"]: r for r in [await raw.receive(), await raw.receive()]}
        assert {a["type"] for a in answers.values()} == {"ok"}, answers
        assert {a["data"]["loop_id"] for a in answers.values()} == {"my-job-1"}
        with trio.fail_after(HANG):
            while True:
                state = (await raw.ask({"type": "status", "id": 3, "loop_id": "my-job-1"}))["data"][
                    "loops"
                ][0]
                if state["phase"] == "awaiting_worker":
                    break
                await trio.sleep(0.01)
        # A retry once the loop runs (the first answer was lost) gets the loop as it is.
        again = await raw.ask({**start, "id": 4})
        assert again["type"] == "ok", again
        assert (again["data"]["loop_id"], again["data"]["phase"]) == ("my-job-1", "awaiting_worker")
        assert again["data"]["round"] == 1
        # Another spec under the same id stays an error.
        other = await raw.ask({**start, "id": 5, "text": "|loop:2| something else"})
        assert other["type"] == "error"
        assert other["code"] == "rejected"
        assert (
            "already used by a loop that is awaiting_worker with another spec" in (other["message"])
        )
        listed = await raw.ask({"type": "status", "id": 6})
        assert [s["loop_id"] for s in listed["data"]["loops"]] == ["my-job-1"]
        await raw.ask({"type": "stop", "id": 7, "loop_id": "my-job-1"})
        # Finished: the same start still answers with that loop (its final state).
        done = await raw.ask({**start, "id": 8})
        assert (done["data"]["loop_id"], done["data"]["phase"]) == ("my-job-1", "cancelled")


async def test_a_request_read_while_the_node_shuts_down_is_refused_as_such(
    live_node: LiveNode,
) -> None:
    async with open_raw(live_node) as raw:
        gateway_ref = live_node.runtime.node.whereis("gateway")
        assert gateway_ref is not None
        from loopactors.gateway._gateway import Gateway

        gateway = gateway_ref._cell.actor  # the Gateway actor: shutting down from here on
        assert isinstance(gateway, Gateway)
        gateway.accepting = False
        refused = await raw.ask({"type": "ping", "id": 1})
        assert refused["type"] == "error"
        assert refused["code"] == "shutting_down"
        assert "not run" in refused["message"]
        gateway.accepting = True


async def test_unsubscribe_counts_replayed_and_live_events_sent(live_node: LiveNode) -> None:
    async with open_raw(live_node) as raw:
        started = await raw.ask({"type": "start", "id": 1, "text": "|loop:2| count"})
        loop_id = started["data"]["loop_id"]
        async with connect(live_node.url, token=live_node.token) as node:
            await node.wait(loop_id)
        await raw.send({"type": "subscribe", "id": 2, "loop_id": loop_id, "replay": True})
        frames = [await raw.receive() for _ in range(1 + 6)]  # the reply, then six events
        assert frames[0]["type"] == "ok"
        kinds = [f["event"]["type"] for f in frames[1:]]
        assert kinds[0] == "loop_started"
        assert kinds[-1] == "loop_finished"
        sid = frames[0]["data"]["subscription"]
        done = await raw.ask({"type": "unsubscribe", "id": 3, "subscription": sid})
        assert done["data"] == {"subscription": sid, "delivered": 6, "missed": 0}


async def test_permessage_deflate_is_declined_and_the_connection_works_uncompressed(
    live_node: LiveNode,
) -> None:
    # As a browser or the `websockets` library offers it: the node answers without the
    # extension (docs/protocol.md), so frames stay uncompressed and the connection works.
    host, port = live_node.url.removeprefix("ws://").rsplit(":", 1)
    stream = await trio.open_tcp_stream(host, int(port))
    async with stream:
        await stream.send_all(
            (
                f"GET / HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                "Sec-WebSocket-Version: 13\r\n"
                "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n"
            ).encode()
        )
        head = b""
        with trio.fail_after(HANG):
            while b"\r\n\r\n" not in head:
                head += await stream.receive_some(4096)
    status, *headers = head.split(b"\r\n\r\n")[0].decode().split("\r\n")
    assert status.startswith("HTTP/1.1 101")
    assert not [h for h in headers if h.lower().startswith("sec-websocket-extensions")]


async def test_requests_take_any_unique_loop_id_prefix(live_node: LiveNode) -> None:
    async with open_raw(live_node) as raw:
        for n, loop_id in enumerate(("alpha-1", "alpha-2", "beta-7")):
            start = {"type": "start", "id": n, "text": f"|loop:3| {loop_id}", "loop_id": loop_id}
            await raw.ask({**start, "worker": "scripted:latency=30"})
        status = await raw.ask({"type": "status", "id": 10, "loop_id": "bet"})
        assert status["data"]["loops"][0]["loop_id"] == "beta-7"
        paused = await raw.ask({"type": "pause", "id": 11, "loop_id": "beta"})
        assert paused["data"]["loop_id"] == "beta-7"
        sub = await raw.ask({"type": "subscribe", "id": 12, "loop_id": "b"})
        assert sub["data"]["loop_id"] == "beta-7"
        for frame in (
            {"type": "stop", "id": 13, "loop_id": "alpha"},
            {"type": "subscribe", "id": 14, "loop_id": "alpha"},
            {"type": "history", "id": 15, "loop_id": "al"},
        ):
            ambiguous = await raw.ask(frame)
            assert ambiguous["type"] == "error", ambiguous
            assert ambiguous["code"] == "not_found"
            assert "matches several loops" in ambiguous["message"]
            assert "alpha-1, alpha-2" in ambiguous["message"]
        stopped = await raw.ask({"type": "stop", "id": 16, "loop_id": "alpha-2"})
        assert stopped["data"]["phase"] == "cancelled"


async def test_status_pages_and_heads(live_node: LiveNode) -> None:
    """Status answers come in pages with a cursor, and carry a head of each output only."""
    rt = live_node.runtime
    started = [
        rt.handle(await rt.start("|loop:1| page me", worker="scripted:output=" + "z" * 500))
        for _ in range(5)
    ]
    for handle in started:
        await handle.wait()
    async with connect(live_node.url, token=live_node.token) as node:
        pages = [page async for page in node.loop_pages(page=2)]
        assert [len(page) for page in pages] == [2, 2, 1]
        listed = [state.loop_id for page in pages for state in page]
        assert listed == [state.loop_id for state in await rt.list()]  # newest first, once
        assert all(len(s.last_output or "") == 200 for page in pages for s in page)
        one = await node.get(started[0].loop_id)
        assert one.last_output == "z" * 200
        whole = await node.output(started[0].loop_id, 1)
        assert whole.output == "z" * 500
    async with open_raw(live_node) as raw:
        bad = await raw.ask({"type": "status", "id": 9, "after": "nonsense"})
        assert bad["type"] == "error"
        assert bad["code"] == "invalid_request"
        few = await raw.ask({"type": "owners", "id": 11, "loop_ids": ["x"]})
        assert few == {"type": "ok", "id": 11, "data": {"owners": None}}


async def test_a_stop_mid_round_closes_the_round_on_the_stream(live_node: LiveNode) -> None:
    """docs/protocol.md: every round_started is followed by its round_finished, a round a
    stop cancelled too; the node's figures (the dashboard's, /metrics') count it."""
    async with connect(live_node.url, token=live_node.token) as node:
        state = await node.start("|loop:3| long", worker="scripted:latency=3600")
        async with await node.subscribe(state.loop_id, replay=True) as events:
            seen: list[AnyEvent] = []
            async for event in events:
                assert not isinstance(event, Gap)
                seen.append(event)
                if event.type == "round_started":
                    await node.stop(state.loop_id)
                if isinstance(event, LoopFinished):
                    break
        assert [e.type for e in seen] == [
            "loop_started",
            "round_started",
            "round_finished",
            "loop_finished",
        ]
        closed = seen[2]
        assert isinstance(closed, RoundFinished)
        assert (closed.round, closed.status, closed.error) == (1, "cancelled", "stopped")
        assert closed.duration is not None
        assert closed.duration >= 0
        assert seen[3].phase == "cancelled"  # type: ignore[union-attr]
        stats = await node.statistics()
        assert stats.rounds == {"cancelled": 1}
        history = await node.history(state.loop_id)
        assert [(r.round, r.status) for r in history] == [(1, "cancelled")]
