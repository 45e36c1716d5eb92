"""The chat-completions wire format, pure: request bodies, replies, and streamed chunks.

Speaks the OpenAI ``/v1/chat/completions`` dialect that OpenAI, vLLM, Ollama, llama.cpp
server and LM Studio share: ``messages`` with ``tool_calls`` / ``tool_call_id``, function
``tools``, and server-sent events whose ``delta`` carries text and tool-call fragments keyed by
``index``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from ._transcript import Message, ToolCall
from ._usage import ModelUsage

__all__ = ["ChatReply", "StreamAccumulator", "decode_reply", "encode_messages", "usage_of"]


class ChatReply(msgspec.Struct, frozen=True, kw_only=True):
    """One model answer: text and/or tool calls."""

    content: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    #: ``stop``, ``tool_calls``, ``length`` (output truncated), or None when not said.
    finish_reason: str | None = None
    usage: ModelUsage | None = None
    #: The stream was cut before it ended: ``content`` is what arrived, and only tool calls
    #: whose arguments arrived complete are kept.
    interrupted: bool = False

    def message(self) -> Message:
        return Message(role="assistant", content=self.content, tool_calls=self.tool_calls)


def encode_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    body: list[dict[str, Any]] = []
    for message in messages:
        item: dict[str, Any] = {"role": message.role, "content": message.content}
        if message.tool_calls:
            item["content"] = message.content or None
            item["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in message.tool_calls
            ]
        if message.role == "tool":
            item["tool_call_id"] = message.tool_call_id
        body.append(item)
    return body


def usage_of(data: object) -> ModelUsage | None:
    if not isinstance(data, Mapping):
        return None
    details = data.get("prompt_tokens_details")
    cached = details.get("cached_tokens", 0) if isinstance(details, Mapping) else 0
    try:
        return ModelUsage(
            prompt_tokens=int(data.get("prompt_tokens") or 0),
            completion_tokens=int(data.get("completion_tokens") or 0),
            cached_tokens=int(cached or 0),
        )
    except (TypeError, ValueError):
        return None


def _calls(raw: object) -> tuple[ToolCall, ...]:
    calls: list[ToolCall] = []
    for index, item in enumerate(raw if isinstance(raw, list) else []):
        function = item.get("function", {}) if isinstance(item, Mapping) else {}
        arguments = function.get("arguments") or "{}"
        if not isinstance(arguments, str):  # a few servers send an object
            arguments = json.dumps(arguments)
        calls.append(
            ToolCall(
                id=str(item.get("id") or f"call_{index}"),
                name=str(function.get("name") or ""),
                arguments=arguments,
            )
        )
    return tuple(calls)


def decode_reply(data: Mapping[str, Any]) -> ChatReply:
    """A non-streamed response body."""
    choices = data.get("choices") or [{}]
    choice = choices[0] if isinstance(choices[0], Mapping) else {}
    message = choice.get("message") or {}
    return ChatReply(
        content=str(message.get("content") or ""),
        tool_calls=_calls(message.get("tool_calls")),
        finish_reason=choice.get("finish_reason"),
        usage=usage_of(data.get("usage")),
    )


def _complete_json(text: str) -> bool:
    try:
        json.loads(text or "{}")
    except ValueError:
        return False
    return True


def _json_or_none(text: str) -> object:
    try:
        return json.loads(text)
    except ValueError:
        return None


def _error_message(error: object) -> str:
    """The provider's words from an ``error`` member (an object with ``message``, or text)."""
    if isinstance(error, Mapping) and error.get("message"):
        return str(error["message"])
    if isinstance(error, str) and error:
        return error
    return f"an error without a message: {json.dumps(error)[:200]}"


class StreamAccumulator:
    """Builds a :class:`ChatReply` from the lines of a streamed response (server-sent events).

    Lines are assembled into events as the SSE format says: ``data:`` lines accumulate (joined
    by newlines) until a blank line ends the event, so a JSON chunk may span several lines.
    An event whose JSON is an object with an ``error`` member is the provider reporting a
    failure mid-stream: it is kept in :attr:`error` and every later event is ignored.
    """

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, dict[str, str]] = {}
        self.finish_reason: str | None = None
        self.usage: ModelUsage | None = None
        self.done = False
        self.chunks = 0
        #: The provider's message when the stream carried an error object.
        self.error: str | None = None
        self._data: list[str] = []
        self._event = ""

    def feed_line(self, line: str) -> str:
        """Take one SSE line; returns the text delta of the event it ended (possibly empty)."""
        if not line:
            return self.end_event()
        if line.startswith(":"):
            return ""  # a comment (keep-alive)
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        return ""  # ``id:``, ``retry:`` and unknown fields mean nothing here

    def end_event(self) -> str:
        """Dispatch the event assembled so far (a blank line, or the end of the body)."""
        lines, event = self._data, self._event
        self._data, self._event = [], ""
        if not lines:
            return ""
        payload = "\n".join(lines).strip()
        if payload == "[DONE]":
            self.done = True
            return ""
        try:
            chunks = [json.loads(payload)]
        except ValueError:
            # Not one JSON text: a lenient server may put one chunk per line in one event.
            chunks = [_json_or_none(line) for line in lines]
        return "".join(self._take(chunk, event) for chunk in chunks)

    def _take(self, chunk: object, event: str) -> str:
        if not isinstance(chunk, dict) or self.error is not None:
            return ""
        if chunk.get("error") or event == "error":
            self.error = _error_message(chunk.get("error", chunk))
            return ""
        self.chunks += 1
        if chunk.get("usage"):
            self.usage = usage_of(chunk["usage"])
        delta_text = ""
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("content"):
                delta_text += str(delta["content"])
            for fragment in delta.get("tool_calls") or []:
                slot = self.calls.setdefault(
                    int(fragment.get("index", len(self.calls))),
                    {"id": "", "name": "", "arguments": ""},
                )
                function = fragment.get("function") or {}
                slot["id"] = slot["id"] or str(fragment.get("id") or "")
                slot["name"] = slot["name"] or str(function.get("name") or "")
                slot["arguments"] += str(function.get("arguments") or "")
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        if delta_text:
            self.text.append(delta_text)
        return delta_text

    def reply(self) -> ChatReply:
        interrupted = not self.done and self.finish_reason is None
        calls = tuple(
            ToolCall(
                id=slot["id"] or f"call_{index}",
                name=slot["name"],
                arguments=slot["arguments"] or "{}",
            )
            for index, slot in sorted(self.calls.items())
            if not interrupted or (slot["name"] and _complete_json(slot["arguments"]))
        )
        return ChatReply(
            content="".join(self.text),
            tool_calls=calls,
            finish_reason=self.finish_reason,
            usage=self.usage,
            interrupted=interrupted,
        )
