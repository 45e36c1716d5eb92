"""Fakes of OpenAI's APIs on loopback: the Responses API (Codex) and Chat Completions (aider).

Both answer from a script of :class:`ModelTurn` (text, tool calls, usage, or an HTTP error)
and keep every conversation request, so a test sees what the agent sent (its earlier turns
after a resume, the tool results it got back).
"""

from __future__ import annotations

import itertools
import json
import threading
from typing import Any

import attrs

from ._fakes import FakeServer, Request, Response


@attrs.define
class ModelTurn:
    """One scripted model answer: text and tool calls (name, arguments), or an HTTP error."""

    text: str = ""
    tools: list[tuple[str, dict[str, Any]]] = attrs.Factory(list)
    input_tokens: int = 100
    output_tokens: int = 20
    cached_tokens: int = 0
    error: Response | None = None
    #: Seconds to hold the answer back (a round still running when the test stops it).
    delay: float = 0.0


def openai_error(status: int, kind: str, message: str, **fields: Any) -> Response:
    """An OpenAI-style error body (``{"error": {"type", "message", ...}}``)."""
    headers = {k.replace("_", "-"): str(v) for k, v in fields.pop("headers", {}).items()}
    return Response(
        status, {"error": {"type": kind, "code": kind, "message": message, **fields}}, headers
    )


class _ScriptedFake:
    def __init__(self, turns: list[ModelTurn] | None, done_text: str) -> None:
        self.turns = list(turns or [])
        self.done_text = done_text
        #: The request bodies of the agent's conversation, in order.
        self.conversations: list[dict[str, Any]] = []
        self.server = FakeServer(self.handle)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._release = threading.Event()

    @property
    def url(self) -> str:
        return self.server.url

    def release(self) -> None:
        """Let delayed answers go (a test ending while a turn is held back)."""
        self._release.set()

    def next_turn(self, body: dict[str, Any]) -> ModelTurn:
        with self._lock:
            self.conversations.append(body)
            turn = self.turns.pop(0) if self.turns else ModelTurn(text=self.done_text)
        if turn.delay:
            self._release.wait(turn.delay)
        return turn

    def handle(self, request: Request) -> Response:  # pragma: no cover - overridden
        raise NotImplementedError


class ResponsesFake(_ScriptedFake):
    """The Responses API (``POST /v1/responses``, streamed as server-sent events).

    Tool calls are ``function_call`` output items; the agent sends their results back as
    ``function_call_output`` input items in the next request.
    """

    def __init__(self, turns: list[ModelTurn] | None = None, *, done_text: str = "Done.") -> None:
        super().__init__(turns, done_text)

    def handle(self, request: Request) -> Response:
        path = request.path.split("?", 1)[0]
        if request.method != "POST" or not path.endswith("/responses"):
            return Response(404, {"error": {"type": "not_found", "message": path}})
        body = request.body if isinstance(request.body, dict) else {}
        turn = self.next_turn(body)
        if turn.error is not None:
            return turn.error
        n = next(self._ids)
        response_id = f"resp_{n:04d}"
        events: list[tuple[str | None, Any]] = [
            (
                "response.created",
                {"type": "response.created", "response": {"id": response_id}},
            )
        ]
        items: list[dict[str, Any]] = []
        if turn.text:
            item_id = f"msg_{n:04d}"
            added = {"type": "message", "id": item_id, "role": "assistant", "content": []}
            events.append(
                (
                    "response.output_item.added",
                    {"type": "response.output_item.added", "output_index": 0, "item": added},
                )
            )
            events.append(
                (
                    "response.output_text.delta",
                    {"type": "response.output_text.delta", "item_id": item_id, "delta": turn.text},
                )
            )
            items.append(
                {
                    "type": "message",
                    "id": item_id,
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": turn.text, "annotations": []}],
                }
            )
        for i, (name, arguments) in enumerate(turn.tools):
            items.append(
                {
                    "type": "function_call",
                    "id": f"fc_{n:04d}_{i}",
                    "call_id": f"call_{n:04d}_{i}",
                    "name": name,
                    "arguments": json.dumps(arguments),
                }
            )
        for index, item in enumerate(items):
            events.append(
                (
                    "response.output_item.done",
                    {"type": "response.output_item.done", "output_index": index, "item": item},
                )
            )
        usage = {
            "input_tokens": turn.input_tokens,
            "input_tokens_details": {"cached_tokens": turn.cached_tokens},
            "output_tokens": turn.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": turn.input_tokens + turn.output_tokens,
        }
        events.append(
            (
                "response.completed",
                {
                    "type": "response.completed",
                    "response": {"id": response_id, "status": "completed", "usage": usage},
                },
            )
        )
        return Response(200, events=events)


class ChatCompletionsFake(_ScriptedFake):
    """Chat Completions (``POST /v1/chat/completions``, plain JSON or streamed chunks)."""

    def __init__(self, turns: list[ModelTurn] | None = None, *, done_text: str = "Done.") -> None:
        super().__init__(turns, done_text)

    def handle(self, request: Request) -> Response:
        path = request.path.split("?", 1)[0]
        if request.method != "POST" or not path.endswith("/chat/completions"):
            return Response(404, {"error": {"type": "not_found", "message": path}})
        body = request.body if isinstance(request.body, dict) else {}
        if _asks_for_commit_message(body):  # aider's side request after an edit
            turn = ModelTurn(text="Change hello.txt", input_tokens=50, output_tokens=5)
        else:
            turn = self.next_turn(body)
        if turn.error is not None:
            return turn.error
        n = next(self._ids)
        calls = [
            {
                "index": i,
                "id": f"call_{n:04d}_{i}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
            for i, (name, arguments) in enumerate(turn.tools)
        ]
        usage = {
            "prompt_tokens": turn.input_tokens,
            "completion_tokens": turn.output_tokens,
            "total_tokens": turn.input_tokens + turn.output_tokens,
            "prompt_tokens_details": {"cached_tokens": turn.cached_tokens},
        }
        message: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
        if calls:
            message["tool_calls"] = calls
        finish = "tool_calls" if calls else "stop"
        base = {"id": f"chatcmpl-{n:04d}", "created": 1_700_000_000, "model": body.get("model")}
        if body.get("stream"):
            # aider runs with --no-stream; a streamed request means the adapter changed.
            return Response(400, {"error": {"type": "invalid_request", "message": "no streams"}})
        return Response(
            200,
            {
                **base,
                "object": "chat.completion",
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage,
            },
        )


def _asks_for_commit_message(body: dict[str, Any]) -> bool:
    messages = body.get("messages") or []
    first = messages[0].get("content") if messages and isinstance(messages[0], dict) else ""
    return isinstance(first, str) and "commit message" in first.lower()
