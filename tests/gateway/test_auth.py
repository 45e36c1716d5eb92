"""Tokens: made at first start with 0600, required on every connection, never logged."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import pytest
from trio_websocket import ConnectionClosed, open_websocket_url

from loopactors.client import RemoteError, connect
from loopactors.errors import ConfigError
from loopactors.gateway import GatewaySettings, open_gateway
from loopactors.gateway._auth import check_listen, load_token, parse_listen
from loopactors.runtime import open_runtime

from .conftest import LiveNode, RawClient, node_config


def test_token_is_created_once_with_owner_only_permissions(tmp_path: Path) -> None:
    token, path = load_token(tmp_path / "state")
    assert len(token) >= 40
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_token(tmp_path / "state") == (token, path)


def test_an_explicit_token_file_is_read_and_checked(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "tok"
    path.write_text("s3cret-long-enough\n")
    path.chmod(0o600)
    with caplog.at_level(logging.WARNING, logger="loopactors.gateway"):
        assert load_token(tmp_path, path) == ("s3cret-long-enough", path)
    assert caplog.records == []
    path.chmod(0o644)  # others may read it: served, with a warning that never shows the token
    with caplog.at_level(logging.WARNING, logger="loopactors.gateway"):
        assert load_token(tmp_path, path) == ("s3cret-long-enough", path)
    assert "can be read by other users (mode 644)" in caplog.text
    assert "chmod 600" in caplog.text
    assert "s3cret" not in caplog.text
    path.write_text("s3cret\n")  # 6 characters: guessable, refused
    with pytest.raises(ConfigError, match="has 6 characters; a node's token needs at least 16"):
        load_token(tmp_path, path)
    path.write_bytes(b"\xff\xfe-not-utf-8-but-long-enough\n")
    with pytest.raises(ConfigError, match="is not UTF-8 text"):
        load_token(tmp_path, path)
    path.write_text("\n")
    with pytest.raises(ConfigError, match="one non-empty line"):
        load_token(tmp_path, path)
    with pytest.raises(ConfigError, match="cannot read"):
        load_token(tmp_path, tmp_path / "missing")


def test_non_loopback_needs_an_explicit_token_file() -> None:
    for host in ("127.0.0.1", "::1", "localhost", "127.5.5.5"):
        check_listen(host, explicit_token_file=False)
    with pytest.raises(ConfigError, match="not a loopback address"):
        check_listen("0.0.0.0", explicit_token_file=False)
    check_listen("0.0.0.0", explicit_token_file=True)


def test_listen_address_parsing() -> None:
    assert parse_listen("127.0.0.1:8765") == ("127.0.0.1", 8765)
    assert parse_listen("[::1]:9") == ("::1", 9)
    for bad in ("8765", "host:", "host:99999", ":80"):
        with pytest.raises(ConfigError):
            parse_listen(bad)


async def test_open_gateway_refuses_a_public_address_without_token_file(tmp_path: Path) -> None:
    async with open_runtime(node_config(tmp_path)) as runtime:
        with pytest.raises(ConfigError, match="--token-file"):
            async with open_gateway(runtime, GatewaySettings(host="0.0.0.0", port=0)):
                pass


async def test_wrong_token_closes_with_policy_error_and_is_not_logged(
    live_node: LiveNode, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="loopactors.gateway")
    with pytest.raises(RemoteError) as info:
        async with connect(live_node.url, token="guess-" + "x" * 30):
            pass
    assert info.value.code == "unauthorized"
    async with open_websocket_url(live_node.url) as ws:
        raw = RawClient(ws)
        reply = await raw.ask({"type": "hello", "id": 1, "protocol": 1, "token": "nope-secret"})
        assert reply == {
            "type": "error",
            "id": 1,
            "code": "unauthorized",
            "message": "wrong or missing token",
        }
        assert (await raw.receive())["type"] == "closing"
        with pytest.raises(ConnectionClosed) as closed:
            await ws.get_message()
        assert closed.value.reason is not None
        assert closed.value.reason.code == 1008
    assert "refused a connection" in caplog.text
    assert "nope-secret" not in caplog.text
    assert "guess-" not in caplog.text
    assert (await live_node.gateway.statistics()).auth_failures == 2


async def test_missing_token_and_requests_before_hello_are_refused(live_node: LiveNode) -> None:
    async with open_websocket_url(live_node.url) as ws:
        raw = RawClient(ws)
        assert (await raw.ask({"type": "hello", "id": 1, "protocol": 1}))["code"] == "unauthorized"
    async with open_websocket_url(live_node.url) as ws:
        raw = RawClient(ws)
        reply = await raw.ask({"type": "status", "id": 1})
        assert reply["code"] == "hello_required"
    async with open_websocket_url(live_node.url) as ws:
        raw = RawClient(ws)
        hello = {"type": "hello", "id": 1, "protocol": 99, "token": live_node.token}
        reply = await raw.ask(hello)
        assert reply["code"] == "unsupported_protocol"
        assert "protocol 1" in reply["message"]


async def test_bearer_header_authenticates(live_node: LiveNode) -> None:
    header = [(b"authorization", f"Bearer {live_node.token}".encode())]
    async with open_websocket_url(live_node.url, extra_headers=header) as ws:
        raw = RawClient(ws)
        assert (await raw.ask({"type": "hello", "id": 1, "protocol": 1}))["type"] == "ok"
        assert (await raw.ask({"type": "ping", "id": 2}))["type"] == "ok"
    wrong = [(b"authorization", b"Bearer nope")]
    async with open_websocket_url(live_node.url, extra_headers=wrong) as ws:
        raw = RawClient(ws)
        assert (await raw.receive())["code"] == "unauthorized"


@pytest.fixture
def gateway_settings() -> GatewaySettings:
    # Long enough that a client which says hello at once is never cut off on a loaded machine.
    return GatewaySettings(port=0, max_connections=2, hello_timeout=5.0)


async def test_connection_limit_and_hello_timeout(live_node: LiveNode) -> None:
    async with (
        connect(live_node.url, token=live_node.token),
        connect(live_node.url, token=live_node.token),
        open_websocket_url(live_node.url) as ws,
    ):
        reply = await RawClient(ws).receive()
        assert reply["code"] == "too_many_connections"
    assert (await live_node.gateway.statistics()).refused_connections == 1
    async with open_websocket_url(live_node.url) as ws:  # says nothing: closed after 5 s
        closing = await RawClient(ws).receive()
        assert closing["type"] == "closing"
        assert "no hello" in closing["reason"]


async def test_a_bad_first_frame_is_answered_then_closed(live_node: LiveNode) -> None:
    async with open_websocket_url(live_node.url) as ws:
        raw = RawClient(ws)
        reply = await raw.ask('{"type": "hello", "id": 7, "protocol": "one"}')
        assert reply["code"] == "invalid_request"
        assert reply["id"] == 7
        assert (await raw.receive())["type"] == "closing"
