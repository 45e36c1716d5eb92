"""Clients without the token cannot lock out those with it (docs/security.md, Gateway).

Idle, half-open, never-upgrading and flooding connections on loopback against a real node:
a token holder still gets in and is answered, and the node's own work goes on.
"""

from __future__ import annotations

import pytest
from trio_websocket import open_websocket_url

from loopactors.client import connect
from loopactors.gateway import GatewaySettings

from .conftest import LiveNode, RawClient


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
            assert await node.loops() == []
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
