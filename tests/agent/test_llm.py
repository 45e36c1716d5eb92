"""The chat-completions client against a real HTTP server on loopback."""

from __future__ import annotations

import datetime
import email.utils
import json

import httpx
import pytest
import trio

from loopactors.agent import Message
from loopactors.agent._llm import ChatClient, ModelSettings, _retry_after
from loopactors.agent._wire import StreamAccumulator
from loopactors.errors import AgentError, ModelError
from tests.hang import HANG

from .chat_server import ChatServer, Reply, completion, stream

HELLO = [Message(role="system", content="be brief"), Message(role="user", content="hi")]
TOOLS = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}]


def settings(server: ChatServer, **options: object) -> ModelSettings:
    options.setdefault("backoff", 0.01)
    return ModelSettings(base_url=server.base_url, model="test-model", **options)  # type: ignore[arg-type]


async def test_plain_completion_with_tool_calls_and_usage() -> None:
    reply = completion("let me look", calls=[("c1", "read", {"path": "a.txt"})], prompt_tokens=42)
    with ChatServer([reply]) as server:
        async with ChatClient(settings(server, stream=False, api_key="sk-secret")) as client:
            answer = await client.complete(HELLO, TOOLS, max_tokens=50)
    assert answer.content == "let me look"
    assert [(c.id, c.name, json.loads(c.arguments)) for c in answer.tool_calls] == [
        ("c1", "read", {"path": "a.txt"})
    ]
    assert answer.finish_reason == "tool_calls"
    assert answer.usage is not None
    assert (answer.usage.prompt_tokens, answer.usage.completion_tokens) == (42, 5)
    body = server.requests[0]
    assert body["model"] == "test-model"
    assert body["tools"] == TOOLS
    assert body["max_tokens"] == 50
    assert "stream" not in body
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
    ]
    assert server.headers[0]["Authorization"] == "Bearer sk-secret"


async def test_streamed_text_and_tool_call_fragments() -> None:
    reply = stream(
        ["Hel", "lo"],
        calls=[("c1", "read", '{"pa'), ("c1", "read", 'th": "x"}'), ("c2", "bash", "{}")],
        prompt_tokens=77,
    )
    seen: list[str] = []
    with ChatServer([reply]) as server:
        async with ChatClient(settings(server)) as client:
            answer = await client.complete(HELLO, on_text=seen.append)
    assert seen == ["Hel", "lo"]
    assert answer.content == "Hello"
    assert [(c.id, c.name, c.arguments) for c in answer.tool_calls] == [
        ("c1", "read", '{"path": "x"}'),
        ("c2", "bash", "{}"),
    ]
    assert not answer.interrupted
    assert answer.usage is not None
    assert answer.usage.prompt_tokens == 77
    assert server.requests[0]["stream"] is True
    assert "Authorization" not in server.headers[0]


async def test_429_then_success_is_retried_honouring_retry_after() -> None:
    busy = Reply(status=429, body={"error": {"message": "slow down"}}, headers={"Retry-After": "0"})
    with ChatServer([busy, Reply(status=503, body={}), completion("ok")]) as server:
        async with ChatClient(settings(server, stream=False)) as client:
            answer = await client.complete(HELLO)
    assert answer.content == "ok"
    assert len(server.requests) == 3


async def test_retries_run_out_with_the_providers_message() -> None:
    busy = Reply(status=429, body={"error": {"message": "rate limited, tier 1"}})
    with ChatServer([busy, busy, busy]) as server:
        async with ChatClient(settings(server, max_retries=2)) as client:
            with pytest.raises(ModelError, match=r"after 3 attempts.*rate limited, tier 1") as info:
                await client.complete(HELLO)
    assert info.value.status == 429


async def test_client_errors_fail_at_once_and_never_show_the_key() -> None:
    bad = Reply(status=401, body={"error": {"message": "invalid api key"}})
    with ChatServer([bad]) as server:
        async with ChatClient(settings(server, api_key="sk-secret")) as client:
            with pytest.raises(ModelError, match=r"HTTP 401.*invalid api key") as info:
                await client.complete(HELLO)
    assert len(server.requests) == 1
    assert "sk-secret" not in str(info.value)
    assert "sk-secret" not in repr(client.settings)


@pytest.mark.parametrize("cut", ["close", "reset"])
async def test_a_cut_stream_keeps_the_partial_text_and_complete_calls_only(cut: str) -> None:
    reply = stream(
        ["partial ", "answer"],
        calls=[("c1", "read", '{"path": "a"}'), ("c2", "write", '{"path": "b", "con')],
        cut=cut,
    )
    with ChatServer([reply]) as server:
        async with ChatClient(settings(server)) as client:
            answer = await client.complete(HELLO)
    assert answer.interrupted
    assert answer.content == "partial answer"
    assert [c.id for c in answer.tool_calls] == ["c1"]
    assert answer.usage is None


async def test_a_stream_that_never_answers_is_retried() -> None:
    with ChatServer([stream([], cut="close"), stream(["fine"])]) as server:
        async with ChatClient(settings(server)) as client:
            answer = await client.complete(HELLO)
    assert answer.content == "fine"
    assert len(server.requests) == 2


async def test_connection_refused_is_retried_then_fails() -> None:
    with ChatServer() as server:
        url = server.base_url
    client = ChatClient(ModelSettings(base_url=url, model="m", backoff=0.01, max_retries=1))
    async with client:
        with pytest.raises(ModelError, match="after 2 attempts: ConnectError"):
            await client.complete(HELLO)


def test_settings_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOOPACTORS_LLM_BASE_URL", raising=False)
    monkeypatch.delenv("LOOPACTORS_LLM_MODEL", raising=False)
    with pytest.raises(AgentError, match="LOOPACTORS_LLM_BASE_URL"):
        ModelSettings.from_env()
    monkeypatch.setenv("LOOPACTORS_LLM_BASE_URL", "http://localhost:1/v1/")
    monkeypatch.setenv("LOOPACTORS_LLM_MODEL", "env-model")
    monkeypatch.setenv("LOOPACTORS_LLM_API_KEY", "sk-env")
    found = ModelSettings.from_env()
    assert (found.base_url, found.model, found.api_key) == (
        "http://localhost:1/v1",
        "env-model",
        "sk-env",
    )
    assert ModelSettings.from_env(model="flag-model").model == "flag-model"
    with pytest.raises(AgentError, match="timeout must be a number > 0"):
        ModelSettings.from_env(timeout=0)


def test_stream_accumulator_ignores_noise() -> None:
    acc = StreamAccumulator()
    for line in [": keep-alive", "event: ping", "data: not json", "data: 3", ""]:
        assert acc.feed_line(line) == ""
    assert acc.chunks == 0
    reply = acc.reply()
    assert reply.interrupted
    assert reply.content == ""


async def test_an_error_object_in_the_stream_fails_with_the_providers_message() -> None:
    broken = Reply(
        chunks=[
            {"choices": [{"index": 0, "delta": {"content": "Hel"}}]},
            {"error": {"message": "The server had an error processing your request", "code": 500}},
        ]
    )
    seen: list[str] = []
    with ChatServer([broken, stream(["never asked for"])]) as server:
        async with ChatClient(settings(server)) as client:
            with pytest.raises(ModelError, match="carried an error: The server had an error"):
                await client.complete(HELLO, on_text=seen.append)
    assert seen == ["Hel"]
    assert len(server.requests) == 1  # not retried, and not continued as a cut reply


async def test_an_error_event_before_any_answer_is_not_taken_for_an_empty_stream() -> None:
    broken = Reply(chunks=['{"error": "quota exceeded"}'], cut="close")
    with ChatServer([broken]) as server:
        async with ChatClient(settings(server)) as client:
            with pytest.raises(ModelError, match="carried an error: quota exceeded"):
                await client.complete(HELLO)
    assert len(server.requests) == 1


async def test_retry_after_ms_is_honoured_before_retry_after() -> None:
    # Our own backoff (30 s) and Retry-After (40 s) would blow the 5 s budget: only
    # retry-after-ms (20 ms) lets the call finish in time.
    busy = Reply(
        status=429,
        body={"error": {"message": "slow down"}},
        headers={"retry-after-ms": "20", "Retry-After": "40"},
    )
    with ChatServer([busy, completion("ok")]) as server:
        async with ChatClient(settings(server, stream=False, backoff=30.0)) as client:
            with trio.fail_after(HANG):
                answer = await client.complete(HELLO)
    assert answer.content == "ok"
    assert len(server.requests) == 2


def test_retry_after_headers_are_read_in_the_sdks_order() -> None:
    def after(**headers: str) -> float | None:
        response = httpx.Response(429, headers={k.replace("_", "-"): v for k, v in headers.items()})
        return _retry_after(response)

    assert after(retry_after_ms="1500", retry_after="9") == 1.5
    assert after(retry_after_ms="soon", retry_after="9") == 9.0
    assert after(retry_after="2.5") == 2.5
    assert after(retry_after="Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # a date in the past
    future = email.utils.format_datetime(
        datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=100), usegmt=True
    )
    assert 90 < (after(retry_after=future) or 0) <= 100
    assert after(retry_after="whenever") is None
    assert after() is None


async def test_a_json_chunk_over_several_data_lines_is_joined() -> None:
    chunk = {"choices": [{"index": 0, "delta": {"content": "joined"}}]}
    text = json.dumps(chunk, indent=1)  # one event, one ``data:`` line per JSON line
    multi = Reply(chunks=[text.replace("\n", "\ndata: "), {"choices": [], "usage": {}}])
    with ChatServer([multi]) as server:
        async with ChatClient(settings(server)) as client:
            answer = await client.complete(HELLO)
    assert answer.content == "joined"
    assert not answer.interrupted


def test_stream_accumulator_follows_the_sse_event_rules() -> None:
    acc = StreamAccumulator()
    lines = [
        'data: {"choices": [{"delta":',
        "data:{",
        'data: "content": "a\\nb"}}]}',
        "",
        "event: ping",
        "id: 7",
        ": comment",
        'data: {"choices": [{"delta": {"content": "c"}, "finish_reason": "stop"}]}',
    ]
    deltas = [acc.feed_line(line) for line in lines]
    assert deltas == ["", "", "", "a\nb", "", "", "", ""]
    assert acc.end_event() == "c"  # the body ended without the final blank line
    assert acc.end_event() == ""
    # A lenient server's one chunk per line inside one event still counts.
    for line in ['data: {"choices": [{"delta": {"content": "d"}}]}', "data: [1]", ""]:
        acc.feed_line(line)
    reply = acc.reply()
    assert (reply.content, reply.finish_reason, reply.interrupted) == ("a\nbcd", "stop", False)
