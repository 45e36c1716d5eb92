"""Connections that go away badly, a node that restarts, and a shutdown that says goodbye."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import trio
from trio_websocket import ConnectionClosed, open_websocket_url

from loopactors.client import ConnectionLost, connect
from loopactors.gateway import GatewaySettings, open_gateway
from loopactors.runtime import open_runtime
from tests.hang import HANG

from .conftest import LiveNode, RawClient, node_config


async def _wait_connections(node: LiveNode, count: int) -> None:
    with trio.fail_after(HANG):
        while (await node.gateway.statistics()).connections != count:
            await trio.sleep(0.01)


async def test_abrupt_disconnects_are_cleaned_up(live_node: LiveNode) -> None:
    for _ in range(5):
        stream = await trio.open_tcp_stream("127.0.0.1", live_node.gateway.port)
        await stream.send_all(b"GET / HTTP/1.1\r\nHost: x\r\n")  # half a handshake, then gone
        await stream.aclose()
    async with open_websocket_url(live_node.url) as ws:
        raw = RawClient(ws)
        await raw.ask({"type": "hello", "id": 0, "protocol": 1, "token": live_node.token})
        await raw.ask({"type": "subscribe", "id": 1})
        await raw.send({"type": "ping", "id": 2})
        # The TCP connection is cut without a close handshake.
        tcp = ws._stream
        assert isinstance(tcp, trio.SocketStream)
        linger_zero = b"\x01\x00\x00\x00\x00\x00\x00\x00"  # close() sends a reset
        tcp.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger_zero)
        await tcp.aclose()
    await _wait_connections(live_node, 0)
    stats = await live_node.gateway.statistics()
    assert stats.subscriptions == 0
    handle = live_node.runtime.handle(await live_node.runtime.start("|loop:2,fresh| still serving"))
    assert (await handle.wait()).phase == "complete"
    async with connect(live_node.url, token=live_node.token) as node:
        assert await node.ping() > 0


@pytest.fixture
def gateway_settings() -> GatewaySettings:
    # A live client's pong comes within 2 s even on a loaded machine; a half-open one never.
    return GatewaySettings(port=0, ping_interval=0.2, ping_timeout=2.0)


async def test_a_half_open_peer_is_found_by_the_heartbeat(live_node: LiveNode) -> None:
    """A peer that completed the handshake and then went silent (no pong) is closed."""
    stream = await trio.open_tcp_stream("127.0.0.1", live_node.gateway.port)
    await stream.send_all(
        b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    response = await stream.receive_some(4096)
    assert b"101" in response.split(b"\r\n")[0]
    await _wait_connections(live_node, 1)
    # Say hello (a masked text frame), then never answer a ping again.
    await stream.send_all(
        _masked_text(f'{{"type":"hello","id":1,"protocol":1,"token":"{live_node.token}"}}')
    )
    await _wait_connections(live_node, 0)  # ping_timeout later, the node let go
    await stream.aclose()


def _masked_text(text: str) -> bytes:
    payload = text.encode()
    assert len(payload) < 126
    mask = b"\x01\x02\x03\x04"
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return bytes([0x81, 0x80 | len(payload)]) + mask + masked


async def test_shutdown_tells_clients_and_a_reconnecting_client_comes_back(
    tmp_path: Path,
) -> None:
    settings = GatewaySettings(port=0)
    async with open_runtime(node_config(tmp_path)) as runtime:
        async with open_gateway(runtime, settings) as gateway:
            token = gateway.token_path.read_text().strip()
            port = gateway.port
            async with open_websocket_url(gateway.url) as ws:
                raw = RawClient(ws)
                await raw.ask({"type": "hello", "id": 0, "protocol": 1, "token": token})
                assert await gateway.shutdown("maintenance") == 1
                closing = await raw.receive()
                assert closing == {"type": "closing", "reason": "maintenance"}
                with pytest.raises(ConnectionClosed) as closed:
                    await ws.get_message()
                assert closed.value.reason is not None
                assert closed.value.reason.code == 1001
            assert not (await gateway.statistics()).accepting
            with pytest.raises(ConnectionLost):
                async with connect(gateway.url, token=token, timeout=2):
                    pass
        # A new gateway on the same port; a reconnecting client finds the next one after it
        # is replaced, and renews its subscription there.
        async with (
            open_gateway(runtime, GatewaySettings(port=port)) as gateway,
            connect(gateway.url, token=token, reconnect=True, max_backoff=0.1) as node,
        ):
            first = node.info.node_id
            events = await node.subscribe()
            await gateway.shutdown("restart")
            await runtime.node.terminate_child("gateway")
            async with open_gateway(runtime, GatewaySettings(port=port)):
                with trio.fail_after(HANG):
                    state = await node.start("|loop:1| after the restart")
                    assert node.info.node_id != first
                    assert node.reconnects == 1
                    async for event in events:
                        if getattr(event, "loop_id", None) == state.loop_id:
                            break


async def test_owners_of_more_loops_than_a_status_page_are_refused(tmp_path: Path) -> None:
    settings = GatewaySettings(port=0, max_status_loops=3)
    async with (
        open_runtime(state_dir=tmp_path) as runtime,
        open_gateway(runtime, settings) as gateway,
    ):
        token = gateway.token_path.read_text().strip()
        async with open_websocket_url(gateway.url) as ws:
            hello = {"type": "hello", "id": 0, "protocol": 1, "token": token}
            await ws.send_message(json.dumps(hello))
            assert '"ok"' in str(await ws.get_message())
            await ws.send_message('{"type": "owners", "id": 1, "loop_ids": ["a", "b", "c", "d"]}')
            refused = str(await ws.get_message())
        assert '"invalid_request"' in refused
        assert "owners takes at most 3 loop ids (max_status_loops), got 4" in refused
        # The client asks in pages of that size (a store of its own: no owners at all).
        async with connect(gateway.url, token=token) as client:
            assert await client.owners(["a", "b", "c", "d"]) is None
