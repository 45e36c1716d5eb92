"""Shared helpers for the agent-CLI tests: real CLIs against provider fakes on loopback.

- :class:`FakeServer`: a threaded HTTP server on 127.0.0.1 that logs every request and answers
  with a handler; :class:`SSE` writes server-sent events.
- :class:`AnthropicFake`: the Anthropic Messages API (streaming SSE, tool_use, usage) driven by
  a script of turns.
- :func:`cli_binary` installs (once, cached) and finds a pinned CLI; :func:`quiet_env` is the
  environment that keeps a CLI on loopback (telemetry and update checks off, no proxies).
- :func:`git_workspace` makes a real git repository with one commit.
"""

from __future__ import annotations

import http.server
import itertools
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest

REPO = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("LOOPACTORS_TEST_CLIS", Path.home() / ".cache/loopactors-test-clis"))


def _pins() -> dict[str, tuple[str, str, str]]:
    """name -> (package, version, binary), read from the installer so there is one list."""
    pins = {}
    text = (REPO / ".ci/install-agent-clis").read_text()
    block = text.split("pins=(", 1)[1].split(")", 1)[0]
    for line in block.splitlines():
        words = line.strip().strip('"').split()
        if len(words) == 4:
            pins[words[0]] = (words[1], words[2], words[3])
    return pins


def cli_binary(name: str) -> Path:
    """The pinned CLI ``name``, installed into the cache on first use.

    Skips (with the reason) only when npm itself is missing; a failed install fails.
    """
    package, version, binary = _pins()[name]
    path = CACHE / f"{name}-{version}" / "node_modules" / ".bin" / binary
    if not path.exists():
        if shutil.which("npm") is None:
            pytest.skip(f"npm is not installed: cannot install {package}@{version}")
        subprocess.run([str(REPO / ".ci/install-agent-clis"), name], check=True, timeout=600)
    return path


#: Switches that keep the CLIs from calling home (each CLI documents its own).
QUIET = {
    "DISABLE_TELEMETRY": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_BUG_COMMAND": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "CLAUDE_CODE_DISABLE_TERMINAL_TITLE": "1",
    "DISABLE_COST_WARNINGS": "1",
    "DISABLE_NON_ESSENTIAL_MODEL_CALLS": "1",
    "CLAUDE_CODE_ENABLE_TELEMETRY": "0",
    "OTEL_SDK_DISABLED": "true",
    "NO_UPDATE_NOTIFIER": "1",
    "DO_NOT_TRACK": "1",
}


def quiet_env(home: Path, **extra: str) -> dict[str, str]:
    """A clean environment for a CLI: PATH, a private HOME, the quiet switches, ``extra``.

    Proxy variables are left out, so nothing is routed off the machine; a private HOME keeps
    the CLIs' config and session files inside the test.
    """
    home.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_DATA_HOME": str(home / ".local/share"),
        "LANG": "C.UTF-8",
        "NO_PROXY": "127.0.0.1,localhost",
        **QUIET,
    }
    env.update(extra)
    return env


def git_workspace(path: Path, files: dict[str, str] | None = None) -> Path:
    """A git repository at ``path`` with ``files`` committed (one commit)."""
    path.mkdir(parents=True, exist_ok=True)
    for name, text in (files or {"README.md": "workspace\n"}).items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "start"], check=True)
    return path


# --- a loopback HTTP server ---------------------------------------------------------------


@attrs.define
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: Any  # decoded JSON, or the raw text when not JSON


@attrs.define
class Response:
    status: int = 200
    body: bytes | str | dict[str, Any] | list[Any] = b""
    headers: dict[str, str] = attrs.Factory(dict)
    #: Server-sent events, written one after the other (instead of ``body``).
    events: list[tuple[str | None, Any]] | None = None


Handler = Callable[[Request], Response]


class _QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # A CLI stopped mid-request (the stop tests) drops its connection: expected there.
        exc = sys.exc_info()[1]
        if not isinstance(exc, (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)


class FakeServer:
    """A threaded HTTP server on 127.0.0.1; every request is logged in ``requests``."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        outer = self

        class _H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _any(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length).decode("utf-8", "replace") if length else ""
                try:
                    body: Any = json.loads(raw) if raw else None
                except ValueError:
                    body = raw
                request = Request(
                    self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body
                )
                with outer._lock:
                    outer.requests.append(request)
                try:
                    response = outer.handler(request)
                except Exception as exc:  # a broken script shows as a 500 with the reason
                    response = Response(500, {"error": f"fake failed: {exc!r}"})
                self._send(response)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _any

            def _send(self, response: Response) -> None:
                self.send_response(response.status)
                for name, value in response.headers.items():
                    self.send_header(name, value)
                if response.events is not None:
                    self.send_header("content-type", "text/event-stream")
                    self.send_header("cache-control", "no-cache")
                    self.send_header("connection", "close")
                    self.end_headers()
                    for event, data in response.events:
                        chunk = (f"event: {event}\n" if event else "") + (
                            f"data: {json.dumps(data)}\n\n"
                        )
                        self.wfile.write(chunk.encode())
                        self.wfile.flush()
                    self.close_connection = True
                    return
                body = response.body
                if isinstance(body, (dict, list)):
                    body = json.dumps(body)
                    self.send_header("content-type", "application/json")
                data = body.encode() if isinstance(body, str) else body
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = _QuietServer(("127.0.0.1", 0), _H)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    @contextmanager
    def running(self) -> Iterator[FakeServer]:
        thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._server.shutdown()
            self._server.server_close()
            thread.join(5)


# --- the Anthropic Messages API ------------------------------------------------------------


@attrs.define
class Turn:
    """One scripted model answer: text and tool calls, or an HTTP error."""

    text: str = ""
    tools: list[tuple[str, dict[str, Any]]] = attrs.Factory(list)
    usage: dict[str, int] = attrs.Factory(
        lambda: {"input_tokens": 100, "output_tokens": 20, "cache_read_input_tokens": 0}
    )
    error: Response | None = None


class AnthropicFake:
    """The Messages API (``POST /v1/messages``, streaming or not) answering from ``turns``.

    A request of the agent's conversation (it carries tools) takes the next turn; once the
    script is used up it gets ``done_text``. Side requests (no tools: titles, summaries) get a
    short text. ``conversations`` keeps the ``messages`` of every conversation request, so a
    test can see what the agent sent (an earlier session's turns after a resume).
    """

    def __init__(self, turns: list[Turn] | None = None, *, done_text: str = "Done.") -> None:
        self.turns = list(turns or [])
        self.done_text = done_text
        self.conversations: list[list[dict[str, Any]]] = []
        #: Every answered message request: (UNIX time, model, usage billed), for tests that
        #: check what a round cost.
        self.billed: list[tuple[float, str, dict[str, int]]] = []
        self.server = FakeServer(self.handle)
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return self.server.url

    def handle(self, request: Request) -> Response:
        path = request.path.split("?", 1)[0]
        if request.method == "HEAD" or path in ("/", ""):
            return Response(200, {})
        if path.endswith("/count_tokens"):
            return Response(200, {"input_tokens": 10})
        if not path.endswith("/v1/messages"):
            return Response(404, {"type": "error", "error": {"type": "not_found_error"}})
        body = request.body if isinstance(request.body, dict) else {}
        if body.get("tools"):
            with self._lock:
                self.conversations.append(body.get("messages", []))
                turn = self.turns.pop(0) if self.turns else Turn(text=self.done_text)
        else:
            turn = Turn(text="ok", usage={"input_tokens": 5, "output_tokens": 1})
        if turn.error is not None:
            return turn.error
        return self._answer(turn, body)

    def _answer(self, turn: Turn, body: dict[str, Any]) -> Response:
        n = next(self._ids)
        blocks: list[dict[str, Any]] = []
        if turn.text:
            blocks.append({"type": "text", "text": turn.text})
        for i, (name, tool_input) in enumerate(turn.tools):
            blocks.append(
                {"type": "tool_use", "id": f"toolu_{n:04d}_{i}", "name": name, "input": tool_input}
            )
        stop = "tool_use" if turn.tools else "end_turn"
        usage = {
            "input_tokens": 0,
            "output_tokens": 0,
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 0,
            **turn.usage,
        }
        model = str(body.get("model", "claude-fake"))
        with self._lock:
            self.billed.append((time.time(), model, usage))
        message = {
            "id": f"msg_{n:04d}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": blocks,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": usage,
        }
        if not body.get("stream"):
            return Response(200, message)
        start = {
            **message,
            "content": [],
            "stop_reason": None,
            "usage": {**usage, "output_tokens": 1},
        }
        events: list[tuple[str | None, Any]] = [
            ("message_start", {"type": "message_start", "message": start})
        ]
        for index, block in enumerate(blocks):
            if block["type"] == "text":
                events.append(
                    (
                        "content_block_start",
                        {
                            "type": "content_block_start",
                            "index": index,
                            "content_block": {"type": "text", "text": ""},
                        },
                    )
                )
                delta = {"type": "text_delta", "text": block["text"]}
            else:
                events.append(
                    (
                        "content_block_start",
                        {
                            "type": "content_block_start",
                            "index": index,
                            "content_block": {**block, "input": {}},
                        },
                    )
                )
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            events.append(
                (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
            )
            events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        events.append(
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {"output_tokens": usage["output_tokens"]},
                },
            )
        )
        events.append(("message_stop", {"type": "message_stop"}))
        return Response(200, events=events)


#: US dollars per token of the model a cost test pins (``claude-sonnet-4-5``), as Claude Code
#: prices it: input, output, cache reads, cache writes.
SONNET_PRICES = {
    "input_tokens": 3e-6,
    "output_tokens": 15e-6,
    "cache_read_input_tokens": 0.3e-6,
    "cache_creation_input_tokens": 3.75e-6,
}


def billed_between(fake: AnthropicFake, start: float, end: float) -> float:
    """What the requests the fake answered from ``start`` to ``end`` (UNIX times) cost,
    priced at :data:`SONNET_PRICES` (the fake checks the model)."""
    total = 0.0
    for at, model, usage in fake.billed:
        if start <= at < end:
            assert model == "claude-sonnet-4-5", model
            total += sum(SONNET_PRICES[k] * usage.get(k, 0) for k in SONNET_PRICES)
    return total


def anthropic_error(status: int, kind: str, message: str, **headers: str) -> Response:
    """An Anthropic API error response (e.g. 429 ``rate_limit_error`` with ``retry-after``)."""
    return Response(
        status, {"type": "error", "error": {"type": kind, "message": message}}, headers=headers
    )
