"""A real chat-completions HTTP server on loopback, answering from a script.

It runs in a thread (``http.server``), so the client under test talks real HTTP over a real
socket. Each request takes the next scripted reply: a completion (sent as JSON, or as an SSE
stream when the request asks for one), an explicit SSE stream (optionally cut before its end),
or an error status. A reply may also be a function of the request body,
for tests where the answer depends on what was asked. Every request body and its headers are
kept for assertions.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import attrs


@attrs.frozen
class Reply:
    status: int = 200
    body: dict[str, Any] | None = None
    #: SSE ``data:`` payloads (dicts are JSON-encoded); ``[DONE]`` is added unless ``cut``.
    chunks: list[dict[str, Any] | str] | None = None
    #: Stop the stream before its end: ``close`` ends the body early, ``reset`` breaks the
    #: chunked encoding (the client sees a protocol error).
    cut: str | None = None
    headers: dict[str, str] = attrs.field(factory=dict)
    #: Seconds to wait before each streamed event (a slow model).
    delay: float = 0.0


Script = Reply | Callable[[dict[str, Any]], Reply]


def usage(prompt: int, completion: int = 5) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion}


def completion(
    content: str = "",
    *,
    calls: list[tuple[str, str, dict[str, Any]]] = (),  # type: ignore[assignment]
    prompt_tokens: int = 100,
    finish: str | None = None,
) -> Reply:
    """A non-streamed reply with text and/or tool calls ``(id, name, arguments)``."""
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
            for i, n, a in calls
        ]
    reason = finish or ("tool_calls" if calls else "stop")
    return Reply(
        body={
            "choices": [{"index": 0, "message": message, "finish_reason": reason}],
            "usage": usage(prompt_tokens),
        }
    )


def stream(
    texts: list[str],
    *,
    calls: list[tuple[str, str, str]] = (),  # type: ignore[assignment]
    prompt_tokens: int = 100,
    cut: str | None = None,
) -> Reply:
    """A streamed reply: one chunk per text piece, then tool-call fragments
    ``(id, name, arguments_fragment)`` (same id = same call), then finish and usage."""
    chunks: list[dict[str, Any] | str] = [
        {"choices": [{"index": 0, "delta": {"content": t}}]} for t in texts
    ]
    indices: dict[str, int] = {}
    for call_id, name, fragment in calls:
        first = call_id not in indices
        index = indices.setdefault(call_id, len(indices))
        delta: dict[str, Any] = {"index": index, "function": {"arguments": fragment}}
        if first:
            delta.update(id=call_id, type="function")
            delta["function"]["name"] = name
        chunks.append({"choices": [{"index": 0, "delta": {"tool_calls": [delta]}}]})
    if cut is None:
        reason = "tool_calls" if calls else "stop"
        chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
        chunks.append({"choices": [], "usage": usage(prompt_tokens)})
    return Reply(chunks=chunks, cut=cut)


def as_stream(reply: Reply) -> Reply:
    """A JSON completion as the stream a server sends when the request asked for one."""
    body = reply.body or {}
    choice = body["choices"][0]
    message = choice["message"]
    chunks: list[dict[str, Any] | str] = []
    if message.get("content"):
        chunks.append({"choices": [{"index": 0, "delta": {"content": message["content"]}}]})
    for index, tool_call in enumerate(message.get("tool_calls") or []):
        delta = {"index": index, **tool_call}
        chunks.append({"choices": [{"index": 0, "delta": {"tool_calls": [delta]}}]})
    finish = {"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}
    chunks.append({"choices": [finish]})
    chunks.append({"choices": [], "usage": body["usage"]})
    return Reply(chunks=chunks)


class ChatServer:
    """``with ChatServer(script) as server:`` then point a client at ``server.base_url``."""

    def __init__(self, script: Sequence[Script] = ()) -> None:
        self.script: list[Script] = list(script)
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.unexpected = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def __enter__(self) -> ChatServer:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def add(self, *replies: Script) -> None:
        with self._lock:
            self.script.extend(replies)

    def _next(self, body: dict[str, Any], headers: dict[str, str]) -> Reply:
        with self._lock:
            self.requests.append(body)
            self.headers.append(headers)
            if not self.script:
                self.unexpected += 1
                return Reply(status=500, body={"error": {"message": "no scripted reply left"}})
            step = self.script.pop(0)
        return step(body) if callable(step) else step

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass  # quiet test output

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path != "/v1/chat/completions":
                    self._json(404, {"error": {"message": f"no route {self.path}"}}, {})
                    return
                reply = server._next(body, dict(self.headers.items()))
                if body.get("stream") and reply.status == 200 and reply.chunks is None:
                    reply = as_stream(reply)
                if reply.chunks is None:
                    self._json(reply.status, reply.body or {}, reply.headers)
                else:
                    self._stream(reply)

            def _json(self, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def _events(self, reply: Reply) -> Iterator[bytes]:
                for chunk in reply.chunks or []:
                    payload = chunk if isinstance(chunk, str) else json.dumps(chunk)
                    yield f"data: {payload}\n\n".encode()
                if reply.cut is None:
                    yield b"data: [DONE]\n\n"

            def _stream(self, reply: Reply) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.send_header("Connection", "close")
                self.end_headers()
                for event in self._events(reply):
                    time.sleep(reply.delay)
                    try:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                        self.wfile.flush()
                    except OSError:
                        return  # the client went away (a cancelled call)
                if reply.cut == "reset":
                    self.wfile.write(b"ff\r\npartial")  # a chunk that never completes
                    self.wfile.flush()
                else:
                    self.wfile.write(b"0\r\n\r\n")
                self.close_connection = True

        return Handler
