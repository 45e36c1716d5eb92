"""Real notification receivers on loopback: an HTTP server (apprise's json:// and form://)
on trio, and an SMTP server (mailto://) from aiosmtpd in its own thread."""

from __future__ import annotations

import contextlib
import functools
import socket
import threading
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from email import message_from_bytes
from typing import Any

import h11
import trio
from aiosmtpd.controller import Controller


def free_port() -> int:
    """A port nothing listens on now (a receiver that is down)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class HttpReceiver:
    """Keeps every request's path, headers and body; :meth:`wait_for` waits for a count."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self._changed = trio.Event()

    async def wait_for(self, count: int) -> None:
        while len(self.requests) < count:
            await self._changed.wait()

    def bodies(self) -> list[bytes]:
        return [body for _, _, body in self.requests]

    def forms(self) -> list[dict[str, str]]:
        return [dict(urllib.parse.parse_qsl(body.decode())) for body in self.bodies()]

    async def _serve(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        with contextlib.suppress(trio.BrokenResourceError, h11.RemoteProtocolError):
            while True:
                request: h11.Request | None = None
                body = b""
                while True:
                    event = conn.next_event()
                    if event is h11.NEED_DATA:
                        data = await stream.receive_some(65536)
                        conn.receive_data(data)
                        if not data and conn.their_state is not h11.DONE:
                            return
                        continue
                    if isinstance(event, h11.Request):
                        request = event
                    elif isinstance(event, h11.Data):
                        body += bytes(event.data)
                    elif isinstance(event, h11.EndOfMessage):
                        break
                    elif isinstance(event, h11.ConnectionClosed):
                        return
                assert request is not None
                headers = {k.decode().lower(): v.decode() for k, v in request.headers}
                self.requests.append((request.target.decode(), headers, body))
                self._changed.set()
                self._changed = trio.Event()
                reply = h11.Response(
                    status_code=200, headers=[("content-length", "2"), ("connection", "close")]
                )
                await stream.send_all(conn.send(reply) or b"")
                await stream.send_all(conn.send(h11.Data(data=b"ok")) or b"")
                await stream.send_all(conn.send(h11.EndOfMessage()) or b"")
                return


@contextlib.asynccontextmanager
async def http_receiver(port: int | None = None) -> AsyncIterator[tuple[HttpReceiver, int]]:
    """An HTTP receiver on 127.0.0.1 (``port``, or a free one) for the block's duration."""
    receiver = HttpReceiver()
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(
            functools.partial(trio.serve_tcp, receiver._serve, port or 0, host="127.0.0.1")
        )
        bound = listeners[0].socket.getsockname()[1]
        yield receiver, bound
        nursery.cancel_scope.cancel()


class _Mailbox:
    def __init__(self) -> None:
        self.messages: list[Any] = []
        self.arrived = threading.Condition()

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        with self.arrived:
            self.messages.append(message_from_bytes(envelope.content))
            self.arrived.notify_all()
        return "250 Message accepted for delivery"

    def wait_for(self, count: int) -> None:
        with self.arrived:
            self.arrived.wait_for(lambda: len(self.messages) >= count)


@contextlib.contextmanager
def smtp_receiver(port: int | None = None) -> Iterator[tuple[_Mailbox, int]]:
    """An SMTP server on 127.0.0.1 (aiosmtpd, in its own thread) for the block's duration."""
    mailbox = _Mailbox()
    controller = Controller(mailbox, hostname="127.0.0.1", port=port or free_port())
    controller.start()
    try:
        yield mailbox, controller.port
    finally:
        controller.stop()
