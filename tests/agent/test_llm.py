"""The chat-completions client against a real HTTP server on loopback."""

from __future__ import annotations

import json

import pytest

from loopactors.agent import Message
from loopactors.agent._llm import ChatClient, ModelSettings
from loopactors.agent._wire import StreamAccumulator
from loopactors.errors import AgentError, ModelError

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
