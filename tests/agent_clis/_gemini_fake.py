"""A fake of the Gemini API on loopback (``generateContent`` / ``streamGenerateContent``).

It answers the agent's conversation from a script of :class:`ModelTurn` (text, function calls,
usage, or an HTTP error) and keeps every conversation request, so a test sees what the agent
sent. Side requests (no tools: the CLI's routing and summaries) get a short text.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from ._fakes import FakeServer, Request, Response
from ._openai_fake import ModelTurn


def gemini_error(
    status: int,
    code: str,
    message: str,
    *,
    retry_delay: str | None = None,
    quota_id: str | None = None,
) -> Response:
    """A Google API error body (``{"error": {"code", "message", "status", "details"}}``).

    ``retry_delay`` (e.g. ``"3600s"``) adds the ``google.rpc.RetryInfo`` detail a quota error
    carries, ``quota_id`` (e.g. ``"GenerateRequestsPerDayPerProjectPerModel"``) its
    ``google.rpc.QuotaFailure``.
    """
    details: list[dict[str, Any]] = []
    if quota_id is not None:
        details.append(
            {
                "@type": "type.googleapis.com/google.rpc.QuotaFailure",
                "violations": [{"quotaMetric": "generate_requests", "quotaId": quota_id}],
            }
        )
    if retry_delay is not None:
        details.append(
            {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": retry_delay}
        )
    error = {"code": status, "message": message, "status": code, "details": details}
    return Response(status, [{"error": error}])


class GeminiFake:
    def __init__(self, turns: list[ModelTurn] | None = None, *, done_text: str = "Done.") -> None:
        self.turns = list(turns or [])
        self.done_text = done_text
        #: The ``contents`` of every conversation request, in order.
        self.conversations: list[list[dict[str, Any]]] = []
        self.server = FakeServer(self.handle)
        self._lock = threading.Lock()
        self._release = threading.Event()

    def release(self) -> None:
        """Let delayed answers go (a test ending while a turn is held back)."""
        self._release.set()

    @property
    def url(self) -> str:
        return self.server.url

    def handle(self, request: Request) -> Response:
        path = request.path.split("?", 1)[0]
        if request.method != "POST" or ":" not in path:
            return Response(404, {"error": {"code": 404, "message": path, "status": "NOT_FOUND"}})
        body = request.body if isinstance(request.body, dict) else {}
        method = path.rsplit(":", 1)[1]
        if method == "countTokens":
            return Response(200, {"totalTokens": 10})
        if body.get("tools"):
            with self._lock:
                self.conversations.append(body.get("contents", []))
                turn = self.turns.pop(0) if self.turns else ModelTurn(text=self.done_text)
        else:
            turn = ModelTurn(text=_side_answer(body), input_tokens=5, output_tokens=1)
        if turn.delay:
            self._release.wait(turn.delay)
        if turn.error is not None:
            return turn.error
        parts: list[dict[str, Any]] = []
        if turn.text:
            parts.append({"text": turn.text})
        for name, args in turn.tools:
            parts.append({"functionCall": {"name": name, "args": args}})
        answer = {
            "candidates": [
                {
                    "content": {"role": "model", "parts": parts},
                    "finishReason": "STOP",
                    "index": 0,
                }
            ],
            "usageMetadata": {
                "promptTokenCount": turn.input_tokens,
                "candidatesTokenCount": turn.output_tokens,
                "cachedContentTokenCount": turn.cached_tokens,
                "totalTokenCount": turn.input_tokens + turn.output_tokens,
            },
            "modelVersion": "gemini-fake",
        }
        if method == "streamGenerateContent":
            return Response(200, events=[(None, answer)])
        return Response(200, answer)


def _side_answer(body: dict[str, Any]) -> str:
    """A JSON answer when the CLI asks for one (its model router), else a word."""
    config = body.get("generationConfig") or {}
    if config.get("responseMimeType") == "application/json":
        return json.dumps({"reasoning": "simple", "model_choice": "flash", "complexity": "low"})
    return "ok"
