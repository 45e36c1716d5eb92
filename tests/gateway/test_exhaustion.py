"""Clients without the token cannot lock out those with it (docs/security.md, Gateway).

Idle, half-open, never-upgrading and flooding connections on loopback against a real node:
a token holder still gets in and is answered, and the node's own work goes on.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from trio_websocket import open_websocket_url

from loopactors.client import connect
from loopactors.gateway import GatewaySettings, _admission, _gateway, open_gateway
from loopactors.gateway._limits import DescriptorBudget
from loopactors.runtime import open_runtime
from tests.hang import HANG

from .conftest import LiveNode, RawClient, node_config


@pytest.fixture
def gateway_settings() -> GatewaySettings:
    return GatewaySettings(port=0, max_unauthenticated=3, hello_timeout=30.0)


async def test_a_token_in_the_upgrade_request_is_never_refused_by_the_hello_cap(
    live_node: LiveNode,
) -> None:
    """Three idle connections fill the cap of those still to say hello; a client with the
    token (``connect`` sends it as ``Authorization: Bearer``) still gets in, a client without
    is refused, and a wrong token in the header does not pass for a right one."""
    async with (
        open_websocket_url(live_node.url),
        open_websocket_url(live_node.url),
        open_websocket_url(live_node.url),
    ):
        async with connect(live_node.url, token=live_node.token) as node:
            assert await node.list() == []
        header = [(b"authorization", f"Bearer {live_node.token}".encode())]
        async with open_websocket_url(live_node.url, extra_headers=header) as ws:
            raw = RawClient(ws)
            assert (await raw.ask({"type": "hello", "id": 1, "protocol": 1}))["type"] == "ok"
        for headers in ([], [(b"authorization", b"Bearer wrong-token")]):
            async with open_websocket_url(live_node.url, extra_headers=headers) as ws:
                reply = await RawClient(ws).receive()
                assert reply["code"] == "too_many_connections"
                assert "still to say hello" in reply["message"]
    statistics = await live_node.gateway.statistics()
    assert statistics.refused_connections == 2


# -- connections that never upgrade ----------------------------------------------------------


def small_budget(capacity: int) -> Callable[[int], DescriptorBudget]:
    """A descriptor budget of ``capacity`` sockets, whatever this process's limit is."""
    return lambda reserve: DescriptorBudget(limit=capacity, in_use=0, reserve=0)


@asynccontextmanager
async def node_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, capacity: int | None = None, **settings: Any
) -> AsyncIterator[LiveNode]:
    if capacity is not None:
        monkeypatch.setattr(_gateway, "descriptor_budget", small_budget(capacity))
    gateway_settings = GatewaySettings(port=0, **settings)
    async with (
        open_runtime(node_config(tmp_path)) as runtime,
        open_gateway(runtime, gateway_settings) as gateway,
    ):
        yield LiveNode(runtime, gateway, gateway.token_path.read_text().strip())


async def raw_socket(node: LiveNode, data: bytes = b"") -> trio.SocketStream:
    stream = await trio.open_tcp_stream("127.0.0.1", node.gateway.port)
    if data:
        await stream.send_all(data)
    return stream


async def closed_by_peer(stream: trio.SocketStream) -> bool:
    """The node closed it (after a short HTTP answer such as a 408, perhaps)."""
    with trio.move_on_after(HANG):
        try:
            while await stream.receive_some(1024):
                pass
        except trio.BrokenResourceError:  # reset
            pass
        return True
    return False


async def wait_for(predicate: Callable[[], Awaitable[bool]]) -> None:
    with trio.fail_after(HANG):
        while not await predicate():
            await trio.sleep(0.02)


async def test_idle_sockets_are_dropped_oldest_first_and_token_holders_get_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Sockets that never send a request: at most ``max_handshaking`` are held, and once the
    oldest has had ``DROP_AGE`` a new one drops it, so a token holder always gets through;
    one log line, no traceback."""
    monkeypatch.setattr(_admission, "DROP_AGE", 0.05)
    async with node_with(
        tmp_path, monkeypatch, max_handshaking=4, handshake_timeout=60.0
    ) as live_node:
        idle = [await raw_socket(live_node) for _ in range(12)]
        await trio.sleep(0.1)  # they have all had their chance to send a request
        async with connect(live_node.url, token=live_node.token) as node:
            assert await node.list() == []
        assert await closed_by_peer(idle[0])  # the oldest was dropped to make room
        statistics = await live_node.gateway.statistics()
        assert statistics.dropped_connections >= 1
        assert statistics.sockets <= 4 + 9  # handshaking, or waiting for a turn
        for stream in idle:
            await stream.aclose()
    dropped = [r for r in caplog.records if "dropped the oldest connection" in r.getMessage()]
    assert len(dropped) == 1
    assert "Traceback" not in caplog.text


async def test_a_burst_of_honest_clients_is_served_not_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """60 clients connecting at once through 4 handshake slots: each sends its request at
    once, so none has been handshaking long enough to be dropped; they take turns."""
    async with node_with(tmp_path, monkeypatch, max_handshaking=4) as live_node:

        async def client() -> None:
            async with connect(live_node.url, token=live_node.token) as node:
                await node.ping()

        async with trio.open_nursery() as nursery:
            for _ in range(60):
                nursery.start_soon(client)
        assert (await live_node.gateway.statistics()).dropped_connections == 0


async def test_a_silent_or_slow_request_is_closed_after_the_handshake_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with node_with(tmp_path, monkeypatch, handshake_timeout=0.3) as live_node:
        silent = await raw_socket(live_node)
        slow = await raw_socket(live_node, b"GET / HTTP/1.1\r\nHost: x\r\n")  # never ends
        assert await closed_by_peer(silent)
        assert await closed_by_peer(slow)
        assert (await live_node.gateway.statistics()).handshake_timeouts == 2


async def test_a_socket_the_peer_closes_is_closed_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not after the handshake timeout (60 s here): as soon as the peer's close arrives."""
    async with node_with(tmp_path, monkeypatch, handshake_timeout=60.0) as live_node:
        baseline = (await live_node.gateway.statistics()).sockets
        streams = [await raw_socket(live_node, b"GET / HTT") for _ in range(5)]

        async def counted(n: int) -> bool:
            return (await live_node.gateway.statistics()).sockets == n

        await wait_for(lambda: counted(baseline + 5))
        for stream in streams:
            await stream.aclose()
        await wait_for(lambda: counted(baseline))
        assert (await live_node.gateway.statistics()).handshake_timeouts == 0


async def test_plain_http_is_answered_and_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with node_with(tmp_path, monkeypatch) as live_node:
        stream = await raw_socket(live_node, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        reply = b""
        with trio.fail_after(HANG):
            while chunk := await stream.receive_some(4096):
                reply += chunk
        assert reply.startswith(b"HTTP/1.1 ")
        await stream.aclose()


async def test_the_descriptor_budget_is_never_exceeded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """With room for 8 sockets: idle ones get at most a quarter (2) and are dropped for new
    ones; token holders fill the rest; past it a new connection waits (it is not accepted,
    so it costs the node no descriptor) until one closes, then it is served."""
    async with node_with(tmp_path, monkeypatch, capacity=8) as live_node:
        idle = [await raw_socket(live_node) for _ in range(6)]
        release, ninth_served = trio.Event(), trio.Event()

        async def hold(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
            async with connect(live_node.url, token=live_node.token) as node:
                await node.ping()
                task_status.started()
                await release.wait()

        async def ninth() -> None:
            async with connect(live_node.url, token=live_node.token, timeout=HANG) as node:
                await node.ping()
                ninth_served.set()

        async with trio.open_nursery() as nursery:
            for _ in range(8):
                await nursery.start(hold)
            statistics = await live_node.gateway.statistics()
            assert statistics.sockets == statistics.socket_capacity == 8
            nursery.start_soon(ninth)
            await trio.sleep(0.5)
            assert not ninth_served.is_set()  # it waits in the backlog
            assert (await live_node.gateway.statistics()).sockets == 8
            release.set()  # room again: the ninth is served
        assert ninth_served.is_set()
        for stream in idle:
            await stream.aclose()
    budget = [r for r in caplog.records if r.getMessage().startswith("the gateway holds all 8")]
    assert len(budget) == 1
    assert "Traceback" not in caplog.text
