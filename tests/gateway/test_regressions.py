"""Defects found in review, each pinned: hostile clients must never take the gateway down."""

from __future__ import annotations

import functools
import socket
import struct
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import pytest
import trio
from trio_websocket import open_websocket_url, serve_websocket

from loopactors.client import ConnectionLost, connect
from loopactors.gateway import GatewaySettings, _http, open_gateway
from loopactors.loops import LoopPaused
from loopactors.runtime import Gap, open_runtime
from loopactors.runtime._events import EventBus
from tests.hang import HANG

from .conftest import LiveNode, RawClient, node_config, open_raw

UPGRADE = (
    b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)


async def test_a_reset_during_the_upgrade_never_crashes_the_gateway(live_node: LiveNode) -> None:
    async with connect(live_node.url, token=live_node.token) as good:
        for _ in range(15):  # more than the node's restart intensity, had each been a crash
            sock = trio.socket.socket()
            await sock.connect(("127.0.0.1", live_node.gateway.port))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            await sock.send(UPGRADE)
            sock.close()
            await trio.sleep(0.01)
        await trio.sleep(0.2)
        assert await good.ping() > 0  # the same connection: the gateway never restarted
    assert (await live_node.gateway.statistics()).port == live_node.gateway.port


async def test_deeply_nested_json_is_bad_json(live_node: LiveNode) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    async with connect(live_node.url, token=live_node.token) as good:
        async with open_raw_ws(live_node) as raw:
            reply = await raw.ask('{"type": "ping", "id": 1, "x": ' + deep + "}")
            assert reply["code"] == "invalid_request"  # the unknown field, found first
            start = '{"type": "start", "id": 2, "text": "|loop| a", "options": {"a": '
            reply = await raw.ask(start + deep + "}}")  # options take any JSON: decoded deep
            assert reply["code"] == "bad_json"
            assert "nested too deeply" in reply["message"]
        async with open_websocket_url(live_node.url) as ws:  # before hello, too
            reply = await RawClient(ws).ask('{"type": "hello", "id": 1, "client": ' + deep + "}")
            assert reply["type"] == "error"  # and the id reader survives the nesting too
        assert await good.ping() > 0


def open_raw_ws(node: LiveNode) -> AbstractAsyncContextManager[RawClient]:
    return open_raw(node)


@pytest.fixture
def gateway_settings() -> GatewaySettings:
    return GatewaySettings(port=0, max_inflight_requests=8, max_subscriptions=4, send_timeout=1)


async def test_a_client_that_never_reads_meets_the_inflight_cap(live_node: LiveNode) -> None:
    async with open_websocket_url(live_node.url, message_queue_size=0) as ws:
        raw = RawClient(ws)
        await raw.send({"type": "hello", "id": 0, "protocol": 1, "token": live_node.token})
        big = "x" * 50_000  # replies that fill the socket buffers quickly
        for i in range(400):
            await raw.send({"type": "start", "id": i + 1, "text": "|loop| " + big})
        await trio.sleep(1)
        stats = await live_node.gateway.statistics()
        assert stats.rejected_frames > 0  # too_many_requests once 8 replies are waiting


async def test_concurrent_subscribes_respect_the_limit(live_node: LiveNode) -> None:
    handle = live_node.runtime.handle(await live_node.runtime.start("|loop:1| one"))
    await handle.wait()
    async with open_raw_ws(live_node) as raw:
        for i in range(40):
            request = {"type": "subscribe", "id": i, "loop_id": handle.loop_id, "replay": True}
            await raw.send(request)
        replies: list[dict[str, object]] = []
        while len(replies) < 40:
            frame = await raw.receive()
            if frame["type"] in {"ok", "error"}:
                replies.append(frame)
    assert sum(r["type"] == "ok" for r in replies) == 4
    assert {r["code"] for r in replies if r["type"] == "error"} == {"too_many_subscriptions"}
    assert (await live_node.gateway.statistics()).subscriptions == 0  # closed with the socket


async def test_start_options_may_not_set_reserved_fields(live_node: LiveNode) -> None:
    async with open_raw_ws(live_node) as raw:
        for key in ("worker", "loop_id", "loop", "parent_id"):
            request = {"type": "start", "id": 1, "text": "|loop| x", "options": {key: "v"}}
            reply = await raw.ask(request)
            assert reply["code"] == "invalid_request", reply
            assert key in reply["message"]


async def test_the_client_skips_frames_it_does_not_know(tmp_path: Path) -> None:
    """A newer node's event type must not blow up an older client."""

    async def fake_node(request):  # type: ignore[no-untyped-def]
        ws = await request.accept()
        await ws.get_message()  # hello
        await ws.send_message(
            '{"type":"ok","id":0,"data":{"protocol":1,"node_id":"x","version":"9",'
            '"capabilities":[],"default_worker":"scripted","limits":{"max_frame_bytes":1,'
            '"max_subscriptions":1,"max_requests_per_second":1.0,"max_inflight_requests":1,'
            '"subscriber_queue":1,"slow_subscriber":"gap"}}}'
        )
        message = await ws.get_message()  # ping
        await ws.send_message('{"type":"event","subscription":"s1","event":{"type":"new"}}')
        await ws.send_message('{"type":"brand_new_frame"}')
        request_id = message.split('"id":')[1].split(",")[0].split("}")[0]
        await ws.send_message('{"type":"ok","id":' + request_id + ',"data":{"time":1.0}}')
        await ws.get_message()

    async with trio.open_nursery() as nursery:
        server = await nursery.start(serve_websocket, fake_node, "127.0.0.1", 0, None)
        async with connect(f"ws://127.0.0.1:{server.port}", token="t") as node:
            assert await node.ping() == 1.0
        nursery.cancel_scope.cancel()


async def test_a_gap_is_never_reported_twice_or_as_zero() -> None:
    bus = EventBus()
    sub = bus.subscribe("a", queue_size=1)
    for i in range(3):
        bus.publish(LoopPaused(loop_id="a", at=float(i), round=i))
    assert await sub.receive() == LoopPaused(loop_id="a", at=0.0, round=0)
    got: list[object] = []

    async def reader() -> None:
        for _ in range(2):
            got.append(await sub.receive())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        await trio.lowlevel.checkpoint()  # the reader saw the pending gap, is at its checkpoint
        bus.publish(LoopPaused(loop_id="a", at=3.0, round=3))
    assert got == [Gap(missed=2, loop_id="a"), LoopPaused(loop_id="a", at=3.0, round=3)]


async def test_a_lost_node_is_a_clear_error_not_an_exception_group(tmp_path: Path) -> None:
    async with open_runtime(node_config(tmp_path)) as runtime:
        gateway_cm = open_gateway(runtime, GatewaySettings(port=0))
        gateway = await gateway_cm.__aenter__()
        token = gateway.token_path.read_text().strip()
        with pytest.raises(ConnectionLost):
            async with connect(gateway.url, token=token) as node:
                sub = await node.subscribe()
                await gateway_cm.__aexit__(None, None, None)
                async for _ in sub:
                    pass


async def _ping_into_the_nodes_close(port: int) -> None:
    """Say hello with a bad token (the node closes) and answer its Close with a Ping."""
    from wsproto import ConnectionType, WSConnection
    from wsproto.events import AcceptConnection, CloseConnection, Request, TextMessage

    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        ws = WSConnection(ConnectionType.CLIENT)
        await stream.send_all(ws.send(Request(host="127.0.0.1", target="/")))
        hello = '{"type": "hello", "id": 0, "protocol": 1, "token": "wrong-token-0123456789"}'
        with trio.fail_after(HANG):
            while True:
                ws.receive_data(await stream.receive_some(65536) or None)
                events = list(ws.events())
                if any(isinstance(e, AcceptConnection) for e in events):
                    await stream.send_all(ws.send(TextMessage(data=hello)))
                if any(isinstance(e, CloseConnection) for e in events):
                    break
        # The node is now closing (it sent Close): a Ping here is owed no Pong.
        mask = b"\x01\x02\x03\x04"
        payload = bytes(b ^ mask[i % 4] for i, b in enumerate(b"ping"))
        await stream.send_all(b"\x89\x84" + mask + payload)  # FIN + Ping, masked, 4 bytes
        with trio.move_on_after(0.5):
            while await stream.receive_some(65536):
                pass


async def test_a_ping_while_the_node_closes_never_crashes_the_gateway(
    live_node: LiveNode,
) -> None:
    async with connect(live_node.url, token=live_node.token) as good:
        for _ in range(15):  # more than the node's restart intensity, had each been a crash
            await _ping_into_the_nodes_close(live_node.gateway.port)
        assert await good.ping() > 0  # the same connection: the gateway never restarted
    assert (await live_node.gateway.statistics()).port == live_node.gateway.port


@pytest.mark.parametrize("server_closes", [True, False], ids=["closes", "never-answers"])
async def test_an_unanswered_upgrade_fails_the_connect_within_its_timeout(
    server_closes: bool, autojump_clock: trio.testing.MockClock
) -> None:
    """trio-websocket waits for the upgrade's answer without a deadline, even after the
    server closed the connection: ``connect`` (and so a reconnecting client) hung for ever."""
    read = trio.Event()

    async def mute(stream: trio.SocketStream) -> None:
        await stream.receive_some(4096)  # the upgrade request, never answered
        read.set()
        if not server_closes:
            await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, mute, 0, host="127.0.0.1")
        )
        url = f"ws://127.0.0.1:{listeners[0].socket.getsockname()[1]}"
        with pytest.raises(ConnectionLost, match=r"cannot connect to .*within 5 s"):
            async with connect(url, token="t" * 20, timeout=5):
                pass
        nursery.cancel_scope.cancel()


async def test_an_upgrade_read_as_the_gateway_shuts_down_gets_503(live_node: LiveNode) -> None:
    """Handed to the websocket server just before the shutdown: refused with a 503 the
    client can retry, never a close without an answer."""
    from loopactors.gateway._gateway import Gateway

    gateway_ref = live_node.runtime.node.whereis("gateway")
    assert gateway_ref is not None
    gateway = gateway_ref._cell.actor
    assert isinstance(gateway, Gateway)
    hand_over = gateway.http._hand_over

    async def then_shut_down(stream: trio.SocketStream, raw: bytes, remote: str) -> None:
        gateway.accepting = False  # the shutdown, after the head was read and found an upgrade
        await hand_over(stream, raw, remote)

    gateway.http._hand_over = then_shut_down  # type: ignore[method-assign]
    try:
        with pytest.raises(ConnectionLost, match="refused with HTTP 503: the node is shutting"):
            async with connect(live_node.url, token=live_node.token, timeout=HANG):
                pass
    finally:
        gateway.http._hand_over = hand_over  # type: ignore[method-assign]
        gateway.accepting = True


async def test_an_upgrade_the_websocket_server_does_not_take_in_time_gets_503(
    live_node: LiveNode,
) -> None:
    """The websocket server does not come round to an upgrade (a starved process): the
    connection was held unanswered until the gateway stopped, and its client waited for
    ever. It gets a 503 the client can retry instead."""
    from loopactors.gateway._gateway import Gateway

    gateway_ref = live_node.runtime.node.whereis("gateway")
    assert gateway_ref is not None
    gateway = gateway_ref._cell.actor
    assert isinstance(gateway, Gateway)
    http, hand_over = gateway.http, gateway.http._hand_over
    upgrades, handshake_timeout = http.upgrades, gateway.admission.handshake_timeout

    async def to_a_server_that_never_accepts(
        stream: trio.SocketStream, raw: bytes, remote: str
    ) -> None:
        # After the head was read (within the real handshake timeout): nobody accepts from
        # this listener, and a short wait for it keeps the test quick.
        http.upgrades = _http.UpgradeListener()
        gateway.admission.handshake_timeout = 0.01
        await hand_over(stream, raw, remote)

    http._hand_over = to_a_server_that_never_accepts  # type: ignore[method-assign]
    try:
        with pytest.raises(ConnectionLost, match="refused with HTTP 503: the node is busy"):
            async with connect(live_node.url, token=live_node.token, timeout=HANG):
                pass
    finally:
        http._hand_over = hand_over  # type: ignore[method-assign]
        http.upgrades, gateway.admission.handshake_timeout = upgrades, handshake_timeout
    async with connect(live_node.url, token=live_node.token) as client:  # served again
        assert await client.ping() > 0
