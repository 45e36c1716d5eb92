"""Requests an application adds to the node protocol (gateway.NodeRequest): served only by a
gateway given them, named in hello's capabilities and the schema, checked when added."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio

from loopactors.client import connect
from loopactors.codeloop import CODE_REQUEST, CodeLoops, code_request
from loopactors.errors import ConfigError
from loopactors.gateway import GatewaySettings, json_schema, open_gateway
from loopactors.runtime import Runtime, open_runtime

from ..codeloop.toyrepo import make_repo
from .conftest import LiveNode, node_config, open_raw


class Echo(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    tag="echo",
    tag_field="type",
    forbid_unknown_fields=True,
):
    id: int | str
    text: str


class Echoed(msgspec.Struct, frozen=True, kw_only=True):
    text: str
    loops: int


class EchoRequest:
    frame = Echo
    reply = Echoed

    async def answer(self, request: Any, runtime: Runtime, background: trio.Nursery) -> Echoed:
        return Echoed(text=request.text.upper(), loops=len(await runtime.list()))


async def test_an_added_request_is_served_and_named(tmp_path: Path) -> None:
    async with (
        open_runtime(node_config(tmp_path)) as runtime,
        open_gateway(runtime, GatewaySettings(port=0), extensions=[EchoRequest()]) as gateway,
    ):
        token = gateway.token_path.read_text().strip()
        node = LiveNode(runtime, gateway, token)
        async with connect(gateway.url, token=token) as client:
            assert client.info.capabilities[-1] == "echo"
            assert "code" not in client.info.capabilities  # not given: not served
            echoed = await client.request(Echo(id=0, text="hi"), Echoed)
            assert echoed == Echoed(text="HI", loops=0)
        async with open_raw(node) as raw:
            bad = await raw.ask({"type": "echo", "id": 2})
            assert bad["code"] == "invalid_request"
            assert "text" in bad["message"]
            typo = await raw.ask({"type": "echo", "id": 4, "text": "a", "txet": "b"})
            assert typo["code"] == "invalid_request"
            unknown = await raw.ask({"type": "code", "id": 3, "action": "status"})
            assert unknown["code"] == "unknown_type"
            assert unknown["message"].endswith("statistics, owners, echo")  # added ones last


async def test_the_node_serves_code_loops_through_the_extension(
    live_node: LiveNode, tmp_path: Path
) -> None:
    async with connect(live_node.url, token=live_node.token) as client:
        assert "code" in client.info.capabilities
        repo = make_repo(tmp_path)
        listed = await client.request(code_request("status", repo=str(repo)), CodeLoops)
        assert listed == CodeLoops(loops=[])


class NoId(msgspec.Struct, frozen=True, tag="noid", tag_field="type", forbid_unknown_fields=True):
    text: str


class Untagged(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    id: int


class Clash(
    msgspec.Struct, frozen=True, tag="status", tag_field="type", forbid_unknown_fields=True
):
    id: int


class Lax(msgspec.Struct, frozen=True, tag="lax", tag_field="type"):
    id: int


def added(frame: type[msgspec.Struct]) -> Any:
    class Added(EchoRequest):
        pass

    Added.frame = frame  # type: ignore[assignment]
    return Added()


@pytest.mark.parametrize(
    ("extensions", "message"),
    [
        ([added(NoId)], "needs an 'id' field; NoId"),
        ([added(Untagged)], "tagged on 'type' with a string tag; Untagged is not"),
        ([added(Clash)], "already has a request of type 'status'"),
        ([added(Lax)], "must forbid unknown fields; Lax does not"),
        ([CODE_REQUEST, CODE_REQUEST], "already has a request of type 'code'"),
    ],
)
async def test_a_request_that_cannot_join_the_protocol_is_refused(
    tmp_path: Path, extensions: list[Any], message: str
) -> None:
    async with open_runtime(node_config(tmp_path)) as runtime:
        with pytest.raises(ConfigError, match=message):
            async with open_gateway(runtime, GatewaySettings(port=0), extensions=extensions):
                pass


def test_the_schema_names_added_requests_only_when_given() -> None:
    plain = json_schema()
    assert "echo" not in plain["reply_data"]
    assert "Code" not in plain["$defs"]
    with_echo = json_schema([(Echo, Echoed)])
    assert with_echo["reply_data"]["echo"] == {"$ref": "#/$defs/Echoed"}
    assert {"$ref": "#/$defs/Echo"} in with_echo["client_frame"]["anyOf"]
