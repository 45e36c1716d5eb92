"""A node request added with no edit under ``loopactors/``: registered by its path, a node
started as ``loopactors node`` starts one serves it over a real websocket, names it in
hello and in its schema, and answers its errors with the codes their classes carry."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest

from loopactors import errors
from loopactors.cli.schema import node_extensions, node_schema
from loopactors.client import connect
from loopactors.errors import RemoteError
from loopactors.gateway import GatewaySettings, open_gateway
from loopactors.gateway._protocol import ErrorCode
from loopactors.runtime import RuntimeConfig, open_runtime

from .tail_request import Tail, Tailed


async def test_a_registered_request_answers_over_a_websocket(
    tail_request: str, tmp_path: Path
) -> None:
    config = RuntimeConfig(store="memory", state_dir=tmp_path)
    async with (
        open_runtime(config) as runtime,
        open_gateway(runtime, GatewaySettings(port=0), extensions=node_extensions()) as gateway,
        connect(gateway.url, token=gateway.token_path.read_text().strip()) as client,
    ):
        assert {"tail", "code"} <= set(client.info.capabilities)
        handle = runtime.handle(
            await runtime.start("|loop:2,fresh| say", worker="scripted:output=last {round}")
        )
        await handle.wait()
        prefix = handle.loop_id[:10]
        tailed = await client.request(Tail(id=0, loop_id=prefix), Tailed)
        assert tailed == Tailed(loop_id=handle.loop_id, phase="complete", last_output="last 2")

        with pytest.raises(RemoteError) as missing:  # LoopNotFound's code: its class says
            await client.request(Tail(id=0, loop_id="nosuchloop"), Tailed)
        assert missing.value.code == "not_found"

        running = runtime.handle(await runtime.start("|loop:1| wait", worker="scripted:latency=60"))
        with pytest.raises(RemoteError) as refused:  # the request's own error class
            await client.request(Tail(id=0, loop_id=running.loop_id), Tailed)
        assert refused.value.code == "rejected"
        assert "no last output yet" in refused.value.message
        await running.stop()


def test_the_nodes_schema_names_the_request_and_its_reply(tail_request: str) -> None:
    schema = node_schema()
    assert schema["reply_data"]["tail"] == {"$ref": "#/$defs/Tailed"}
    assert "Tail" in schema["$defs"]


def test_every_wire_code_an_error_class_carries_is_one_of_the_protocols() -> None:
    codes = set(typing.get_args(ErrorCode))
    carried = {
        cls.protocol_code
        for name in errors.__all__
        if isinstance(cls := getattr(errors, name), type)
        and issubclass(cls, errors.LoopactorsError)
        and cls.protocol_code is not None
    }
    assert carried <= codes
    assert {"rejected", "not_found", "invalid_request", "unavailable"} <= carried
