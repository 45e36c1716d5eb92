"""Plain HTTP beside the websocket API, on the same port.

Every TCP connection's request head is read here first (within the handshake limits of
``_admission``: ``handshake_timeout`` seconds, ``max_handshaking`` at once; and
``MAX_HEAD_BYTES``, parsed by h11). A websocket upgrade, on any path, is handed on untouched
to the websocket server through :class:`UpgradeListener`, with the bytes already read played
back first; anything else is one HTTP request answered by the ``respond`` function the
gateway gives (``_web``), then the connection is closed. A client that is slow, malformed or
oversized costs its own connection only: it never reaches the websocket server.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import h11
import trio

from ._admission import Admission

__all__ = [
    "MAX_HEAD_BYTES",
    "MAX_REQUEST_LINE",
    "HttpRequest",
    "HttpResponse",
    "SplitServer",
    "UpgradeListener",
]

log = logging.getLogger("loopactors.gateway")

#: A request head (request line and headers) larger than this is refused (431).
MAX_HEAD_BYTES = 16 * 1024
#: A request line longer than this is refused (414).
MAX_REQUEST_LINE = 8 * 1024
#: Seconds an HTTP response may take to be sent before the connection is dropped.
SEND_TIMEOUT = 10.0

_REASONS = {
    200: "OK",
    204: "No Content",
    304: "Not Modified",
    400: "Bad Request",
    401: "Unauthorized",
    404: "Not Found",
    405: "Method Not Allowed",
    408: "Request Timeout",
    414: "URI Too Long",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    503: "Service Unavailable",
}


@attrs.frozen
class HttpRequest:
    method: str
    #: The request target as sent (path and query, percent-encoded).
    target: str
    #: Header names in lower case; a repeated header keeps its last value.
    headers: dict[str, str]
    remote: str

    @property
    def is_websocket_upgrade(self) -> bool:
        upgrade = self.headers.get("upgrade", "").lower()
        return "websocket" in upgrade


@attrs.frozen
class HttpResponse:
    status: int
    body: bytes = b""
    content_type: str = "text/plain; charset=utf-8"
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def text(cls, status: int, text: str, **kw: Any) -> HttpResponse:
        return cls(status, (text + "\n").encode(), **kw)

    def encode(self, *, head_only: bool = False) -> bytes:
        lines = [
            f"HTTP/1.1 {self.status} {_REASONS.get(self.status, 'Unknown')}",
            f"Content-Type: {self.content_type}",
            f"Content-Length: {len(self.body)}",
            "Connection: close",
            "X-Content-Type-Options: nosniff",
            *(f"{name}: {value}" for name, value in self.headers),
        ]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return head if head_only else head + self.body


Respond = Callable[[HttpRequest], Awaitable[HttpResponse]]


class _ReplayStream(trio.abc.Stream):
    """A TCP stream whose first bytes (the request head, already read) are given again."""

    def __init__(self, stream: trio.SocketStream, buffered: bytes, remote: str) -> None:
        self.stream = stream
        self._buffered = buffered
        self._remote = remote
        self.closed = trio.Event()

    def __repr__(self) -> str:  # the websocket layer names a stream it cannot place by repr
        return self._remote

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._buffered:
            size = len(self._buffered) if max_bytes is None else max_bytes
            data, self._buffered = self._buffered[:size], self._buffered[size:]
            await trio.lowlevel.checkpoint()
            return data
        return await self.stream.receive_some(max_bytes)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.stream.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        await self.stream.send_eof()

    async def aclose(self) -> None:
        self.closed.set()
        await self.stream.aclose()


class UpgradeListener(trio.abc.Listener[trio.abc.Stream]):
    """What the websocket server accepts from: the upgrade requests :class:`SplitServer`
    found, one stream each, the request head still to be read."""

    def __init__(self) -> None:
        self._send, self._recv = trio.open_memory_channel[trio.abc.Stream](0)

    async def accept(self) -> trio.abc.Stream:
        try:
            return await self._recv.receive()
        except trio.EndOfChannel:
            raise trio.ClosedResourceError("the gateway stopped listening") from None

    async def aclose(self) -> None:
        self._recv.close()
        await trio.lowlevel.checkpoint()


@attrs.define(eq=False, slots=False)
class SplitServer:
    """Reads each connection's request head and sends it the websocket or the HTTP way."""

    upgrades: UpgradeListener
    respond: Respond
    accepting: Callable[[], bool]
    admission: Admission
    #: What a websocket upgrade is told while ``accepting()`` is false (with a 503).
    refusal: Callable[[], str] = lambda: "the node is shutting down"
    #: Set when the websocket server stops: connections handed to it are over.
    stopped: trio.Event = attrs.field(init=False, factory=trio.Event)
    #: Counted since this server started.
    http_requests: int = attrs.field(init=False, default=0)
    http_errors: int = attrs.field(init=False, default=0)

    async def serve(self, stream: trio.SocketStream) -> None:
        """One TCP connection (a handler for ``Admission.serve``, which closes it after)."""
        remote = _peer(stream)
        head: HttpRequest | HttpResponse | None = None
        raw = b""
        async with self.admission.handshake() as handshake:
            head, raw = await _read_head(stream, remote)
        if handshake.dropped:  # made room for a newer connection: closed without a word
            return
        if handshake.timed_out:  # slowloris, or a client that connected and said nothing
            self.http_errors += 1
            with trio.move_on_after(1.0):  # a short reply at most: it is not worth more
                await _send(stream, HttpResponse.text(408, "the request head took too long"))
            return
        if isinstance(head, HttpResponse):  # a malformed or oversized head: refused
            self.http_errors += 1
            await _send(stream, head)
            return
        if head is None:  # closed before a whole head came
            return
        if head.is_websocket_upgrade:
            if not self.accepting():  # a refusal the client can retry, not a reset
                await _send(
                    stream, HttpResponse.text(503, self.refusal(), headers=(("Retry-After", "1"),))
                )
                return
            await self._hand_over(stream, raw, remote)
            return
        self.http_requests += 1
        try:
            response = await self.respond(head)
        except Exception:
            log.exception("internal error answering %s %s", head.method, head.target)
            response = HttpResponse.text(500, "internal error; the node logged it")
        if response.status >= 400:
            self.http_errors += 1
        await _send(stream, response, head_only=head.method == "HEAD")

    async def _hand_over(self, stream: trio.SocketStream, raw: bytes, remote: str) -> None:
        replay = _ReplayStream(stream, raw, remote)
        handed = False
        with trio.move_on_after(self.admission.handshake_timeout):
            with contextlib.suppress(trio.BrokenResourceError):  # the server stopped
                await self.upgrades._send.send(replay)
                handed = True
        if not handed:
            # A 503 the client retries, rather than a connection held unanswered until the
            # gateway stops (a client waits for the upgrade's answer), or closed without one.
            busy = "the node is busy: try again in a moment"
            await _send(stream, HttpResponse.text(503, busy, headers=(("Retry-After", "1"),)))
            return
        # The websocket server owns the stream now; it closes it when the client is done, or
        # the server stops (then this ends too, and the admission closes the stream).
        async with trio.open_nursery() as nursery:
            for event in (replay.closed, self.stopped):
                nursery.start_soon(_first_of, event, nursery.cancel_scope)


async def _first_of(event: trio.Event, scope: trio.CancelScope) -> None:
    await event.wait()
    scope.cancel()


async def _read_head(
    stream: trio.SocketStream, remote: str
) -> tuple[HttpRequest | HttpResponse | None, bytes]:
    parser = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD_BYTES)
    raw = bytearray()
    while True:
        try:
            event = parser.next_event()
        except h11.RemoteProtocolError as exc:
            return _refusal(exc, bytes(raw)), bytes(raw)
        if event is h11.NEED_DATA:
            try:
                data = await stream.receive_some(4096)
            except trio.BrokenResourceError:
                return None, bytes(raw)
            if not data:
                return None, bytes(raw)
            raw += data
            line_end = raw.find(b"\r\n")
            if (line_end if line_end >= 0 else len(raw)) > MAX_REQUEST_LINE:
                return HttpResponse.text(
                    414, f"the request line is longer than {MAX_REQUEST_LINE} bytes"
                ), bytes(raw)
            if len(raw) > MAX_HEAD_BYTES and b"\r\n\r\n" not in raw[: MAX_HEAD_BYTES + 4]:
                return _too_large(), bytes(raw)
            parser.receive_data(data)
            continue
        if isinstance(event, h11.Request):
            headers = {
                name.decode("latin-1").lower(): value.decode("latin-1")
                for name, value in event.headers
            }
            request = HttpRequest(
                method=event.method.decode("latin-1"),
                target=event.target.decode("latin-1"),
                headers=headers,
                remote=remote,
            )
            return request, bytes(raw)
        return None, bytes(raw)  # ConnectionClosed before a request


def _refusal(exc: h11.RemoteProtocolError, raw: bytes) -> HttpResponse:
    status = exc.error_status_hint
    first_line = raw.split(b"\r\n", 1)[0]
    if status == 431 and len(first_line) > MAX_REQUEST_LINE:
        return HttpResponse.text(414, "the request line is too long")
    if status == 431:
        return _too_large()
    return HttpResponse.text(400, f"malformed HTTP request: {exc}")


def _too_large() -> HttpResponse:
    return HttpResponse.text(431, f"the request head is larger than {MAX_HEAD_BYTES} bytes")


async def _send(
    stream: trio.SocketStream, response: HttpResponse, *, head_only: bool = False
) -> None:
    """Send ``response`` and close the connection; a client that does not read is dropped."""
    with trio.move_on_after(SEND_TIMEOUT), contextlib.suppress(trio.BrokenResourceError):
        await stream.send_all(response.encode(head_only=head_only))
        with contextlib.suppress(trio.ClosedResourceError):
            await stream.send_eof()
        # Let the client read the response before the close: unread bytes of its request
        # (a body we do not take) would make the close a reset that can destroy the reply.
        with trio.move_on_after(1.0):
            while await stream.receive_some(4096):
                pass
    with contextlib.suppress(trio.BrokenResourceError):
        await trio.aclose_forcefully(stream)


def _peer(stream: trio.SocketStream) -> str:
    try:
        host, port, *_ = stream.socket.getpeername()
    except (OSError, ValueError):
        return "?"
    return f"[{host}]:{port}" if ":" in str(host) else f"{host}:{port}"
