"""The model client: OpenAI-compatible chat completions over httpx (which runs on trio).

Retries with exponential backoff (and ``retry-after-ms`` / ``Retry-After`` when the server sends
one) on 429, 5xx and connection failures that happened before any answer arrived; any other
status fails at once. An ``error`` object inside a stream fails the call with the provider's
message (it is not a cut reply).
A stream cut after data arrived is not retried: the partial reply comes back flagged
``interrupted`` and the agent loop decides (it asks the model to continue).

The API key travels only in the ``Authorization`` header: it is not in ``repr``, errors, events
or anything stored.
"""

from __future__ import annotations

import datetime
import email.utils
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import attrs
import httpx
import trio

from .._util import backoff_delay
from ..errors import AgentError, ModelError
from ._transcript import Message
from ._wire import ChatReply, StreamAccumulator, decode_reply, encode_messages

__all__ = ["ChatClient", "ChatModel", "ModelSettings"]

ENV_BASE_URL = "LOOPACTORS_LLM_BASE_URL"
ENV_MODEL = "LOOPACTORS_LLM_MODEL"
ENV_API_KEY = "LOOPACTORS_LLM_API_KEY"
_RETRY_STATUSES = frozenset({408, 409, 429})
_ERROR_TAIL = 500


class ChatModel(Protocol):
    """What the agent loop needs from a model: one chat completion."""

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] = (),
        *,
        on_text: Callable[[str], None] | None = None,
        max_tokens: int | None = None,
    ) -> ChatReply: ...


def _positive(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise AgentError(f"model setting {attribute.name} must be a number > 0, got {value!r}")


@attrs.frozen(kw_only=True)
class ModelSettings:
    """Where the model is and how patiently to talk to it."""

    base_url: str
    model: str
    api_key: str | None = attrs.field(default=None, repr=False)
    #: Seconds without a byte from the server (per read), and to connect.
    timeout: float = attrs.field(default=300.0, validator=_positive)
    connect_timeout: float = attrs.field(default=10.0, validator=_positive)
    max_retries: int = attrs.field(default=4)
    #: First backoff in seconds; doubles per retry, capped at ``backoff_cap``.
    backoff: float = attrs.field(default=1.0, validator=_positive)
    backoff_cap: float = attrs.field(default=30.0, validator=_positive)
    stream: bool = True
    temperature: float | None = None

    @max_retries.validator
    def _check_retries(self, attribute: attrs.Attribute[int], value: int) -> None:
        if value < 0:
            raise AgentError(f"model setting max_retries must be >= 0, got {value!r}")

    @classmethod
    def from_env(
        cls, *, base_url: str | None = None, model: str | None = None, **options: Any
    ) -> ModelSettings:
        """Explicit values first, then ``LOOPACTORS_LLM_BASE_URL`` / ``_MODEL`` / ``_API_KEY``.

        Raises:
            AgentError: no base URL or no model from either source.
        """
        base_url = base_url or os.environ.get(ENV_BASE_URL)
        model = model or os.environ.get(ENV_MODEL)
        if not base_url or not model:
            raise AgentError(
                "the agent needs a model endpoint: give base_url= and model= (worker options) "
                f"or set {ENV_BASE_URL} and {ENV_MODEL} "
                "(e.g. http://localhost:11434/v1 and a model name for Ollama)"
            )
        options.setdefault("api_key", os.environ.get(ENV_API_KEY) or None)
        return cls(base_url=base_url.rstrip("/"), model=model, **options)


def _provider_message(response: httpx.Response) -> str:
    try:
        data = response.json()
    except ValueError:
        return response.text[-_ERROR_TAIL:].strip()
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])[:_ERROR_TAIL]
    if isinstance(error, str):
        return error[:_ERROR_TAIL]
    return json.dumps(data)[:_ERROR_TAIL]


def _retry_after(response: httpx.Response) -> float | None:
    """Seconds the server asks us to wait: ``retry-after-ms`` first (as the official OpenAI
    SDK reads it), then ``retry-after`` in seconds or as an HTTP date, then the provider's
    own as a LiteLLM proxy passes them on (``llm_provider-retry-after-ms``,
    ``llm_provider-retry-after``); None when absent or unreadable (our own backoff then
    applies)."""
    for prefix in ("", "llm_provider-"):
        milliseconds = response.headers.get(f"{prefix}retry-after-ms")
        if milliseconds is not None:
            try:
                return max(float(milliseconds) / 1000, 0.0)
            except ValueError:
                pass
        value = response.headers.get(f"{prefix}retry-after")
        if value is not None:
            seconds = _seconds_or_date(value)
            if seconds is not None:
                return seconds
    return None


def _is_limit(status: int | None, message: str, after: float | None) -> bool:
    """A rate or usage limit, not a failure: 429, a quota, or a server saying when to retry."""
    return status == 429 or after is not None or "quota" in message.lower()


def _seconds_or_date(value: str) -> float | None:
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max((when - datetime.datetime.now(datetime.UTC)).total_seconds(), 0.0)


class _Retry(Exception):
    def __init__(self, message: str, status: int | None, after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.after = after


class ChatClient:
    """A :class:`ChatModel` for one endpoint; close it (``async with``) to free connections."""

    def __init__(
        self, settings: ModelSettings, *, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self.settings = settings
        headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
        self._http = httpx.AsyncClient(
            base_url=settings.base_url,
            headers=headers,
            timeout=httpx.Timeout(settings.timeout, connect=settings.connect_timeout),
            transport=transport,
        )

    async def __aenter__(self) -> ChatClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] = (),
        *,
        on_text: Callable[[str], None] | None = None,
        max_tokens: int | None = None,
    ) -> ChatReply:
        """One chat completion, retried on 429/5xx/connection failures.

        Raises:
            ModelError: a non-retryable status, or the retries ran out; the message carries
                the provider's own error text and the status.
        """
        settings = self.settings
        body: dict[str, Any] = {"model": settings.model, "messages": encode_messages(messages)}
        if tools:
            body["tools"] = list(tools)
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        if settings.temperature is not None:
            body["temperature"] = settings.temperature
        if settings.stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        attempt = 0
        while True:
            try:
                if settings.stream:
                    return await self._streamed(body, on_text)
                return await self._plain(body)
            except _Retry as retry:
                attempt += 1
                if attempt > settings.max_retries:
                    raise ModelError(
                        f"model call failed after {attempt} attempts: {retry}",
                        retry.status,
                        rate_limited=_is_limit(retry.status, str(retry), retry.after),
                        retry_after=retry.after,
                    ) from None
                delay = backoff_delay(attempt, first=settings.backoff, cap=settings.backoff_cap)
                if retry.after:  # the server's wait replaces ours (0 or absent: ours)
                    delay = min(retry.after, settings.backoff_cap)
                await trio.sleep(delay)

    def _check(self, response: httpx.Response, text: str | None = None) -> None:
        if response.status_code < 400:
            return
        message = f"HTTP {response.status_code} from {self.settings.base_url}: " + (
            text if text is not None else _provider_message(response)
        )
        if response.status_code in _RETRY_STATUSES or response.status_code >= 500:
            raise _Retry(message, response.status_code, _retry_after(response))
        # A quota answered with another status (403, 402) is a limit all the same.
        raise ModelError(message, response.status_code, rate_limited="quota" in message.lower())

    async def _plain(self, body: dict[str, Any]) -> ChatReply:
        try:
            response = await self._http.post("/chat/completions", json=body)
        except httpx.TransportError as exc:
            raise _Retry(f"{type(exc).__name__}: {exc}", None) from None
        self._check(response)
        try:
            data = response.json()
        except ValueError:
            raise _Retry("the response body is not JSON", response.status_code) from None
        return decode_reply(data)

    async def _streamed(
        self, body: dict[str, Any], on_text: Callable[[str], None] | None
    ) -> ChatReply:
        stream = StreamAccumulator()
        try:
            async with self._http.stream("POST", "/chat/completions", json=body) as response:
                if response.status_code >= 400:
                    await response.aread()
                    self._check(response, _provider_message(response))
                # No break at [DONE]: leaving httpx's nested line iterators early leaks
                # them; servers end the body right after [DONE] anyway.
                async for line in response.aiter_lines():
                    delta = stream.feed_line(line)
                    if delta and on_text is not None:
                        on_text(delta)
                delta = stream.end_event()  # a last event without its blank line
                if delta and on_text is not None:
                    on_text(delta)
        except httpx.TransportError as exc:
            if stream.chunks == 0 and stream.error is None:
                raise _Retry(f"{type(exc).__name__}: {exc}", None) from None
            # Cut mid-answer: keep what arrived (the reply says it was interrupted).
        if stream.error is not None:
            # The provider reported a failure inside the stream (as the official SDK does,
            # this is the provider's error, not a cut reply to continue).
            raise ModelError(
                f"the model's stream from {self.settings.base_url} carried an error: "
                f"{stream.error[:_ERROR_TAIL]}"
            )
        if stream.chunks == 0 and not stream.done:
            raise _Retry("the stream ended before any answer arrived", None)
        return stream.reply()
