"""A real node on loopback: the runtime, its Gateway on a free port, and raw websocket access."""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import msgspec
import pytest
import trio
from trio_websocket import WebSocketConnection, open_websocket_url

from loopactors.cli.schema import node_extensions
from loopactors.gateway import GatewayHandle, GatewaySettings, open_gateway
from loopactors.runtime import Runtime, RuntimeConfig, open_runtime
from tests.hang import HANG


@attrs.frozen
class LiveNode:
    runtime: Runtime
    gateway: GatewayHandle
    token: str

    @property
    def url(self) -> str:
        return self.gateway.url


def node_config(state_dir: Path, **changes: Any) -> RuntimeConfig:
    return RuntimeConfig(store="memory", state_dir=state_dir, shutdown_grace=5.0).replace(**changes)


@pytest.fixture
def gateway_settings() -> GatewaySettings:
    return GatewaySettings(port=0)


@pytest.fixture
async def live_node(tmp_path: Path, gateway_settings: GatewaySettings) -> AsyncIterator[LiveNode]:
    async with (
        open_runtime(node_config(tmp_path)) as runtime,
        open_gateway(runtime, gateway_settings, extensions=node_extensions()) as gateway,
    ):
        token = gateway.token_path.read_text().strip()
        yield LiveNode(runtime, gateway, token)


class RawClient:
    """Frames by hand, for the cases a well-behaved client never sends."""

    def __init__(self, ws: WebSocketConnection) -> None:
        self.ws = ws

    async def send(self, frame: Any) -> None:
        await self.ws.send_message(frame if isinstance(frame, str | bytes) else _json(frame))

    async def receive(self) -> dict[str, Any]:
        with trio.fail_after(HANG):
            message = await self.ws.get_message()
        result: dict[str, Any] = msgspec.json.decode(message)
        return result

    async def ask(self, frame: Any) -> dict[str, Any]:
        await self.send(frame)
        return await self.receive()


def _json(frame: Any) -> str:
    return msgspec.json.encode(frame).decode()


@asynccontextmanager
async def open_raw(node: LiveNode, *, hello: bool = True) -> AsyncIterator[RawClient]:
    async with open_websocket_url(node.url) as ws:
        raw = RawClient(ws)
        if hello:
            reply = await raw.ask({"type": "hello", "id": 0, "protocol": 1, "token": node.token})
            assert reply["type"] == "ok", reply
        yield raw


@pytest.fixture(autouse=True)
def _collect_test_client_sockets() -> Iterator[None]:
    yield
    gc.collect()  # so the warning below is raised here, under this directory's filter


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # trio-websocket's client leaves its socket to the garbage collector when the server
    # closes first (what these tests provoke on purpose with raw frames); the warning that
    # follows at collection time is about the test client, not the node.
    for item in items:
        if "tests/gateway" in str(item.path):
            item.add_marker(
                pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
            )
