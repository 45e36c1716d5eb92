"""The pure parts: transport settings, redacted URLs, backoff, the wire format, status tables."""

from __future__ import annotations

import io
import subprocess
import sys

import msgspec
import pytest
from rich.console import Console

from loopactors.errors import ConfigError
from loopactors.runtime import (
    DispatchSettings,
    InProcessTransport,
    RuntimeConfig,
    open_transport,
    transport_kind,
)
from loopactors.transport import IN_PROCESS, RedisTransport, check_transport, redact_url
from loopactors.transport._backoff import RetryDelays
from loopactors.transport._status import StreamBacklog, TransportStatus, render
from loopactors.transport._wire import (
    Heartbeat,
    RoundOrder,
    RoundReport,
    decode_order,
    decode_report,
    encode,
    rounds_stream,
)
from loopactors.workers import RoundRequest, RoundResult


@pytest.mark.parametrize(
    "url",
    [
        "inprocess",
        "redis://127.0.0.1:6379/0",
        "redis://:secret@redis.internal:6379/3",
        "rediss://worker:secret@redis.internal:6380/0?ssl_ca_certs=/etc/ca.pem",
        "redis://localhost",
    ],
)
def test_accepted_transports(url: str) -> None:
    assert check_transport(url) == url


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://:secret@h:1/0", "the scheme must be redis:// or rediss://"),
        ("redis://", "it names no host"),
        ("redis://h:port/0", "its port is not a number"),
        ("redis://:secret@h:1/zero", "its database must be a number, got 'zero'"),
    ],
)
def test_refused_transports_say_why_and_never_show_the_password(url: str, problem: str) -> None:
    with pytest.raises(ConfigError, match="accepted: 'inprocess' or redis://") as info:
        check_transport(url)
    assert problem in str(info.value)
    assert "secret" not in str(info.value)


def test_a_config_refuses_a_bad_transport_and_hides_the_password_in_its_repr() -> None:
    with pytest.raises(ConfigError, match="bad transport"):
        RuntimeConfig(transport="tcp://h:1")
    config = RuntimeConfig(transport="rediss://:hunter2@h:6380/0")
    assert "hunter2" not in repr(config)
    assert "rediss://***@h:6380/0" in repr(config)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://h:1/0", "redis://h:1/0"),
        ("redis://:pw@h:1/0", "redis://***@h:1/0"),
        ("rediss://user:pw@h/0?ssl_ca_certs=/ca.pem", "rediss://***@h/0?ssl_ca_certs=/ca.pem"),
        ("redis://h:1/0?password=pw&db=1", "redis://h:1/0?password=***&db=1"),
    ],
)
def test_redacted_urls(url: str, shown: str) -> None:
    assert redact_url(url) == shown


def test_the_default_transport_is_in_process_and_loads_no_redis_client() -> None:
    assert transport_kind(IN_PROCESS).rounds_here
    assert isinstance(open_transport(IN_PROCESS, DispatchSettings()), InProcessTransport)
    assert RuntimeConfig().transport == IN_PROCESS
    assert not transport_kind("redis://:pw@h:1/0").rounds_here
    remote = open_transport("redis://:pw@h:1/0", DispatchSettings(max_output_bytes=99))
    assert isinstance(remote, RedisTransport)
    assert remote.max_output_bytes == 99
    assert "pw" not in repr(remote)


def test_backoff_doubles_up_to_its_cap_and_starts_short_after_a_success() -> None:
    backoff = RetryDelays(first=0.1, cap=0.5)
    assert [backoff.next_delay() for _ in range(5)] == [0.1, 0.2, 0.4, 0.5, 0.5]
    assert backoff.failures == 5
    backoff.reset()
    assert (backoff.next_delay(), backoff.failures) == (0.1, 1)
    with pytest.raises(ValueError, match="0 < first <= cap"):
        RetryDelays(first=1, cap=0.5)


def test_an_order_and_a_report_cross_the_wire_unchanged() -> None:
    request = RoundRequest(
        loop_id="l1",
        round=2,
        rounds=3,
        mode="inherit",
        prompt="seed\n---\ntask",
        task="task",
        worker="command:./agent.sh",
        objective="tests pass",
        cwd="/srv/work",
        env={"LOOPACTORS_BRANCH": "loop/s/r001"},
    )
    order = RoundOrder(request=request, timeout=30.0, published_at=1.5)
    back = decode_order(encode(order))
    assert back.request == request
    assert back.request.key == request.key == "l1:2"
    assert (back.timeout, back.published_at) == (30.0, 1.5)
    result = RoundResult(status="completed", output="ok", transcript=({"role": "user"},))
    report = RoundReport(key="l1:2", result=result, worker="w")
    back_report = decode_report(encode(report))
    assert back_report == report
    assert back_report.result == result
    assert rounds_stream("command") == "loopactors:rounds:command"


def test_an_order_with_a_bad_mode_is_refused() -> None:
    raw = encode(
        {
            "request": {
                "loop_id": "l",
                "round": 1,
                "rounds": 1,
                "mode": "sideways",
                "prompt": "p",
                "task": "t",
                "worker": "scripted",
            },
            "timeout": 1.0,
            "published_at": 0.0,
        }
    )
    with pytest.raises(msgspec.ValidationError, match="mode"):
        decode_order(raw)


def test_status_tables_show_workers_and_backlog() -> None:
    status = TransportStatus(
        workers=[Heartbeat(name="w1", kinds=("command",), slots=4, in_flight=2, at=100.0)],
        streams=[StreamBacklog(stream="loopactors:rounds:command", waiting=7, pending=2)],
    )
    out = io.StringIO()
    console = Console(file=out, width=120)
    for table in render(status, now=103.5):
        console.print(table)
    text = out.getvalue()
    assert "w1" in text
    assert "3.5 s ago" in text
    assert "loopactors:rounds:command" in text


def test_public_names_are_exported_and_show_their_public_module() -> None:
    from loopactors import transport

    assert len(set(transport.__all__)) == len(transport.__all__)
    for name in transport.__all__:
        assert hasattr(transport, name), name
    assert transport.RedisTransport.__module__ == "loopactors.transport"
    assert transport.serve_worker.__module__ == "loopactors.transport"
    assert transport.REDIS.name == "redis"


def test_the_runtime_and_the_cli_start_without_loading_the_redis_client() -> None:
    code = (
        "import sys, loopactors.runtime, loopactors.cli._commands; "
        "from loopactors.runtime import RuntimeConfig; RuntimeConfig(transport='redis://h/0'); "
        "print('coredis' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "False"
