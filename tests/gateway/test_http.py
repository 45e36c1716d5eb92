"""Plain HTTP on the node's port: health, metrics, the dashboard's files, and bad requests
that must cost their own connection only (websocket clients go on undisturbed)."""

from __future__ import annotations

import os
import signal
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families
from trio_websocket import open_websocket_url

from loopactors.client import ConnectionLost, connect
from loopactors.gateway import GatewaySettings, _http, _node, open_door, open_gateway
from loopactors.gateway._web import dashboard_files
from loopactors.runtime import open_runtime
from tests.hang import HANG

from .conftest import LiveNode, RawClient, node_config, open_raw


@pytest.fixture
async def http(live_node: LiveNode) -> AsyncIterator[httpx.AsyncClient]:
    base = f"http://127.0.0.1:{live_node.gateway.port}"
    async with httpx.AsyncClient(base_url=base, timeout=HANG) as client:
        yield client


async def raw_http(node: LiveNode, data: bytes) -> bytes:
    """Send ``data`` on a fresh TCP connection and read the whole answer."""
    stream = await trio.open_tcp_stream("127.0.0.1", node.gateway.port)
    answer = b""
    async with stream:
        try:
            await stream.send_all(data)
            await stream.send_eof()  # all sent: a head cut short stays cut short
            with trio.fail_after(HANG):
                while chunk := await stream.receive_some(65536):
                    answer += chunk
        except trio.BrokenResourceError:  # reset by the node: what came before is the answer
            pass
    return answer


async def test_healthz_says_ok_without_a_token(http: httpx.AsyncClient) -> None:
    reply = await http.get("/healthz")
    assert reply.status_code == 200
    assert reply.text == "ok\n"
    assert reply.headers["content-type"] == "text/plain; charset=utf-8"
    head = await http.head("/healthz")
    assert head.status_code == 200
    assert head.content == b""


async def test_the_node_stops_listening_at_shutdown(live_node: LiveNode) -> None:
    await live_node.gateway.shutdown("maintenance")
    with pytest.raises(OSError, match="connect"):
        await trio.open_tcp_stream("127.0.0.1", live_node.gateway.port)


async def test_healthz_is_503_while_the_runtime_is_not_whole(
    live_node: LiveNode, http: httpx.AsyncClient
) -> None:
    assert (await http.get("/healthz")).status_code == 200
    await live_node.runtime.node.terminate_child("coordinator")  # loops cannot be served now
    reply = await http.get("/healthz")
    assert reply.status_code == 503
    assert reply.text == "unavailable\n"
    assert reply.headers["cache-control"] == "no-store"


async def test_metrics_need_the_token(live_node: LiveNode, http: httpx.AsyncClient) -> None:
    missing = await http.get("/metrics")
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"].startswith("Bearer")
    assert "Authorization: Bearer" in missing.text
    wrong = await http.get("/metrics", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401
    basic = await http.get("/metrics", headers={"Authorization": f"Basic {live_node.token}"})
    assert basic.status_code == 401
    assert live_node.token not in missing.text + wrong.text


async def test_metrics_expose_every_family_with_labels_and_type(
    live_node: LiveNode, http: httpx.AsyncClient
) -> None:
    runtime = live_node.runtime
    done = runtime.handle(await runtime.start("|loop:2,fresh| counted", worker="scripted:tokens=7"))
    await done.wait()
    failing = runtime.handle(await runtime.start("|loop:1| fails", worker="scripted:fail_every=1"))
    await failing.wait()
    paused = runtime.handle(await runtime.start("|loop:50| waits", worker="scripted:latency=0.05"))
    await paused.pause()
    await paused.wait_phase("paused")

    reply = await http.get("/metrics", headers={"Authorization": f"Bearer {live_node.token}"})
    assert reply.status_code == 200
    assert reply.headers["content-type"].startswith("text/plain; version=")
    families = {f.name: f for f in text_string_to_metric_families(reply.text)}

    expected = {
        "loopactors_loops": ("gauge", {"phase"}),
        "loopactors_rounds": ("counter", {"status", "worker_kind"}),
        "loopactors_round_duration_seconds": ("histogram", {"worker_kind"}),
        "loopactors_tokens": ("counter", {"worker_kind"}),
        "loopactors_cost_usd": ("counter", set()),
        "loopactors_actor_restarts": ("counter", {"actor"}),
        "loopactors_store_commit_seconds": ("histogram", set()),
        "loopactors_gateway_connections": ("gauge", set()),
        "loopactors_events_dropped": ("counter", set()),
        "loopactors_notifications": ("counter", {"outcome"}),
        "loopactors_notifications_queued": ("gauge", set()),
        "loopactors_daily_cost_usd": ("gauge", {"account"}),
        "process_cpu_seconds": ("counter", set()),
        "process_resident_memory_bytes": ("gauge", set()),
    }
    for name, (kind, labels) in expected.items():
        assert name in families, f"{name} missing from /metrics"
        family = families[name]
        assert family.type == kind, name
        for sample in family.samples:
            assert labels <= set(sample.labels), (name, sample)

    def value(name: str, **labels: str) -> float:
        family = families[name.removesuffix("_total").removesuffix("_count")]
        return sum(
            s.value
            for s in family.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
        )

    assert value("loopactors_loops", phase="complete") >= 1
    ended = ("complete", "cancelled", "interrupted", "escalated", "error")
    assert sum(value("loopactors_loops", phase=p) for p in ended) == 2
    assert value("loopactors_loops", phase="paused") == 1
    assert value("loopactors_rounds_total", status="completed", worker_kind="scripted") >= 2
    assert value("loopactors_rounds_total", status="failed", worker_kind="scripted") >= 1
    assert value("loopactors_tokens_total", worker_kind="scripted") >= 14
    assert value("loopactors_round_duration_seconds_count", worker_kind="scripted") >= 3
    assert value("loopactors_store_commit_seconds_count") > 0
    assert value("loopactors_actor_restarts_total", actor="store") == 0
    assert {s.labels["actor"] for s in families["loopactors_actor_restarts"].samples} >= {
        "store",
        "coordinator",
        "gateway",
    }


async def test_metrics_count_connections(live_node: LiveNode, http: httpx.AsyncClient) -> None:
    headers = {"Authorization": f"Bearer {live_node.token}"}
    async with open_raw(live_node), open_raw(live_node):
        text = (await http.get("/metrics", headers=headers)).text
    gauge = next(
        f
        for f in text_string_to_metric_families(text)
        if f.name == "loopactors_gateway_connections"
    )
    assert gauge.samples[0].value == 2


async def test_the_dashboard_is_served_with_its_content_types(http: httpx.AsyncClient) -> None:
    page = await http.get("/")
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert "default-src 'self'" in page.headers["content-security-policy"]
    assert "<html" in page.text.lower()
    kinds = {".js": "text/javascript", ".css": "text/css", ".html": "text/html"}
    names = dashboard_files()
    assert any(name.endswith(".js") for name in names)
    for name in names:
        reply = await http.get(f"/{name}")
        assert reply.status_code == 200, name
        suffix = "." + name.rpartition(".")[2]
        if suffix in kinds:
            assert reply.headers["content-type"].startswith(kinds[suffix]), name
    query = await http.get("/?x=1")
    assert query.status_code == 200
    missing = await http.get("/nothing.js")
    assert missing.status_code == 404
    assert "/healthz" in missing.text


async def test_other_methods_are_refused(http: httpx.AsyncClient) -> None:
    for method in ("POST", "PUT", "DELETE", "OPTIONS"):
        reply = await http.request(method, "/", content=b"x" * 100)
        assert reply.status_code == 405, method
        assert reply.headers["allow"] == "GET, HEAD"
        assert method in reply.text


@pytest.mark.parametrize(
    "path",
    [
        "/../etc/passwd",
        "/%2e%2e/etc/passwd",
        "/%2E%2E%2Fetc%2Fpasswd",
        "/..%2f..%2fpyproject.toml",
        "/x/../index.html",
        "/%5c..%5cetc",
        "/%00index.html",
        "/%ff%fe",
        "//etc/passwd",
    ],
)
async def test_path_traversal_is_refused(live_node: LiveNode, path: str) -> None:
    answer = await raw_http(live_node, f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    status = answer.split(b" ", 2)[1]
    assert status == b"400", answer[:200]
    assert b"bad path" in answer
    assert b"root:" not in answer
    assert b"[project]" not in answer


async def test_oversized_and_malformed_heads_get_clean_errors(live_node: LiveNode) -> None:
    long_line = b"GET /" + b"a" * (_http.MAX_REQUEST_LINE + 10) + b" HTTP/1.1\r\n\r\n"
    assert (await raw_http(live_node, long_line)).startswith(b"HTTP/1.1 414 ")
    big_header = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * _http.MAX_HEAD_BYTES + b"\r\n\r\n"
    assert (await raw_http(live_node, big_header)).startswith(b"HTTP/1.1 431 ")
    garbage = b"\x16\x03\x01\x02\x00 not http at all\r\n\r\n"
    assert (await raw_http(live_node, garbage)).startswith(b"HTTP/1.1 400 ")
    no_host = b"GET / HTTP/1.1\r\n\r\n"
    assert (await raw_http(live_node, no_host)).startswith(b"HTTP/1.1 400 ")
    # A connection that closes before its head is whole gets no answer, and costs nothing.
    assert await raw_http(live_node, b"GET / HT") == b""


@pytest.mark.parametrize("gateway_settings", [GatewaySettings(port=0, handshake_timeout=0.5)])
async def test_slowloris_is_cut_off_and_websocket_clients_go_on(live_node: LiveNode) -> None:
    async with open_raw(live_node) as before:
        slow = await trio.open_tcp_stream("127.0.0.1", live_node.gateway.port)
        async with slow:
            await slow.send_all(b"GET /healthz HTTP/1.1\r\n")
            for _ in range(3):  # a header line now and then, never the end of the head
                await trio.sleep(0.1)
                await slow.send_all(b"X-Slow: 1\r\n")
            # Meanwhile a websocket client connects and is served, and the first goes on.
            async with open_raw(live_node) as during:
                assert (await during.ask({"type": "ping", "id": 1}))["type"] == "ok"
            answer = b""
            with trio.fail_after(HANG):
                while chunk := await slow.receive_some(4096):
                    answer += chunk
        assert answer.startswith(b"HTTP/1.1 408 ")
        assert (await before.ask({"type": "ping", "id": 2}))["type"] == "ok"


async def test_bad_http_never_disturbs_websocket_clients(live_node: LiveNode) -> None:
    async with open_raw(live_node) as client:
        sub = await client.ask({"type": "subscribe", "id": 1})
        assert sub["type"] == "ok"
        post = await raw_http(
            live_node, b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello"
        )
        assert post.startswith(b"HTTP/1.1 405 ")
        for path in (b"/%2e%2e/", b"/../etc/passwd"):
            answer = await raw_http(live_node, b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n\r\n")
            assert answer.startswith(b"HTTP/1.1 400 ")
        long_line = await raw_http(live_node, b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\n\r\n")
        assert long_line.startswith(b"HTTP/1.1 414 ")
        big_header = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 20_000 + b"\r\n\r\n"
        assert (await raw_http(live_node, big_header)).startswith(b"HTTP/1.1 431 ")
        await raw_http(live_node, b"\r\n\r\n\r\n")
        await client.send({"type": "start", "id": 2, "text": "|loop:1| still here"})
        kinds = set()
        with trio.fail_after(HANG):
            while "ok" not in kinds or "event" not in kinds:
                kinds.add((await client.receive())["type"])


async def test_websocket_upgrades_work_on_any_path(live_node: LiveNode) -> None:
    async with open_websocket_url(f"{live_node.url}/any/path?x=1") as ws:
        raw = RawClient(ws)
        reply = await raw.ask({"type": "hello", "id": 0, "protocol": 1, "token": live_node.token})
        assert reply["type"] == "ok"
        assert "statistics" in reply["data"]["capabilities"]


async def test_statistics_request_reports_the_node(live_node: LiveNode) -> None:
    handle = live_node.runtime.handle(
        await live_node.runtime.start("|loop:2| stats", worker="scripted:tokens=3")
    )
    await handle.wait()
    async with open_raw(live_node) as client:
        reply = await client.ask({"type": "statistics", "id": 1})
    assert reply["type"] == "ok", reply
    stats = reply["data"]
    assert stats["loops"] == {"complete": 1}
    assert stats["rounds"] == {"completed": 2}
    assert stats["tokens"] == 6
    assert stats["connections"] == 1
    assert stats["commit_seconds"]["sum"] > 0
    paths = {actor["path"]: actor for actor in stats["actors"]}
    assert {"store", "coordinator", "loops", "gateway"} <= set(paths)
    assert paths["loops"]["supervisor"] is True
    assert all(actor["restarts"] == 0 for actor in stats["actors"])


async def test_healthz_is_503_while_starting_and_for_the_whole_shutdown(tmp_path: Path) -> None:
    """`loopactors node`'s port (serve_node's door) is open before the runtime and after it:
    plain HTTP gets 503 then, and a websocket client a clean refusal it survives."""
    settings = GatewaySettings(port=0)
    async with open_door(settings) as door:
        url = f"ws://127.0.0.1:{door.port}"
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{door.port}") as http:

            async def health() -> tuple[int, str]:
                reply = await http.get("/healthz")
                return reply.status_code, reply.text

            assert await health() == (503, "starting\n")
            page = await http.get("/")
            assert page.status_code == 503
            assert page.headers["retry-after"] == "1"
            assert "the node is starting" in page.text
            with pytest.raises(ConnectionLost, match="503"):
                async with connect(url, token="t" * 20):
                    pass
            async with open_runtime(node_config(tmp_path)) as runtime:
                assert await health() == (503, "starting\n")  # the runtime is not served yet
                async with open_gateway(runtime, settings, door=door) as gateway:
                    assert gateway.port == door.port
                    assert await health() == (200, "ok\n")
                    token = gateway.token_path.read_text().strip()
                    # A request waits 5 s at most: the ping after the shutdown fails then.
                    async with connect(url, token=token, reconnect=True, timeout=5) as client:
                        assert await client.ping() > 0
                        door.shutting_down()  # what serve_node does on SIGTERM, first
                        assert await health() == (503, "shutting down\n")
                        assert await gateway.shutdown() == 1
                        assert await health() == (503, "shutting down\n")
                        # The client's reconnection meets 503 refusals and stays whole.
                        with pytest.raises(ConnectionLost):
                            await client.ping()
                        assert client.reconnects == 0
                # No gateway any more; the runtime is still stopping.
                assert await health() == (503, "shutting down\n")
                with pytest.raises(ConnectionLost, match="503"):
                    async with connect(url, token=token):
                        pass
            assert await health() == (503, "shutting down\n")
    with pytest.raises(OSError, match="connect"):
        await trio.open_tcp_stream("127.0.0.1", door.port)


async def test_a_gateway_shut_down_on_a_door_leaves_it_saying_so(tmp_path: Path) -> None:
    settings = GatewaySettings(port=0)
    async with (
        open_door(settings) as door,
        open_runtime(node_config(tmp_path)) as runtime,
        open_gateway(runtime, settings, door=door) as gateway,
    ):
        base = f"http://127.0.0.1:{door.port}"
        async with httpx.AsyncClient(base_url=base) as http:
            assert (await http.get("/healthz")).status_code == 200
            await gateway.shutdown()
            reply = await http.get("/healthz")
            assert (reply.status_code, reply.text) == (503, "shutting down\n")


async def test_serve_node_answers_503_while_its_runtime_opens_and_closes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """serve_node (what `loopactors node` runs), with the runtime's opening and closing held
    open by the test: the port answers throughout, 503 until served and from the signal on."""
    opening, closing = trio.Event(), trio.Event()

    @asynccontextmanager
    async def held_runtime(config: Any, **kw: Any) -> AsyncIterator[Any]:
        await opening.wait()  # recovering loops, say
        async with open_runtime(config, **kw) as runtime:
            yield runtime
            await closing.wait()  # stopping loops, flushing the store

    monkeypatch.setattr(_node, "open_runtime", held_runtime)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings = GatewaySettings(port=port)
    async with trio.open_nursery() as nursery, httpx.AsyncClient() as http:

        async def health() -> tuple[int, str]:
            with trio.fail_after(HANG):
                while True:
                    try:
                        reply = await http.get(f"http://127.0.0.1:{port}/healthz")
                        return reply.status_code, reply.text.strip()
                    except httpx.ConnectError:  # not listening yet
                        await trio.sleep(0.01)

        ended = trio.Event()

        async def node() -> None:
            await _node.serve_node(node_config(tmp_path), settings)
            ended.set()

        nursery.start_soon(node)
        assert await health() == (503, "starting")
        opening.set()
        with trio.fail_after(HANG):
            while await health() != (200, "ok"):
                await trio.sleep(0.01)
        os.kill(os.getpid(), signal.SIGTERM)  # serve_node's own signal receiver takes it
        with trio.fail_after(HANG):
            while await health() != (503, "shutting down"):
                await trio.sleep(0.01)
        await trio.sleep(0.2)
        assert not ended.is_set()
        assert await health() == (503, "shutting down")  # the runtime is still closing
        closing.set()
        with trio.fail_after(HANG):
            await ended.wait()
    with pytest.raises(OSError, match="connect"):
        await trio.open_tcp_stream("127.0.0.1", port)
