"""The Gateway actor: the standalone node's websocket API, a child of the node's supervisor.

It owns the listening socket and, in its nursery, every connection. Connections talk to the
runtime through :class:`~loopactors.runtime.Runtime` like an embedding program would. A
restart of the gateway (or of an actor before it in the tree, which ``rest_for_one`` restarts
it with) drops the connections; clients reconnect (``loopactors.client`` can do it for them).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import msgspec
import trio
from trio_websocket import (
    ConnectionClosed,
    WebSocketConnection,
    WebSocketRequest,
    WebSocketServer,
)

from .._logs import log_fields
from ..actors import Actor
from ..runtime import Runtime
from . import _pong  # noqa: F401 - no Pong after our Close (see the module)
from ._admission import Admission, descriptor_budget
from ._answers import protocol_requests
from ._auth import token_matches
from ._connection import CLOSE_GOING_AWAY, CLOSE_TRY_AGAIN_LATER, Connection, frame_text
from ._door import Door
from ._extensions import AddedRequests, NodeRequest
from ._http import SplitServer, UpgradeListener
from ._messages import GatewayShutdown, GetGatewayStatistics
from ._metrics import NodeMetrics
from ._protocol import Error
from ._settings import GatewaySettings
from ._web import WebRoutes

__all__ = ["Gateway", "GatewayStatistics"]

log = logging.getLogger("loopactors.gateway")


class GatewayStatistics(msgspec.Struct, frozen=True, kw_only=True):
    host: str
    port: int
    accepting: bool
    connections: int
    subscriptions: int
    #: Counted since this gateway incarnation started.
    requests: int
    frames_out: int
    rejected_frames: int
    auth_failures: int
    refused_connections: int
    gaps: int
    #: TCP connections open (websocket, HTTP or still handshaking), and the most there may be.
    sockets: int = 0
    socket_capacity: int = 0
    #: Connections closed for sending no whole request head in time, or dropped (oldest
    #: first) to make room for new ones; accepts that failed for want of descriptors.
    handshake_timeouts: int = 0
    dropped_connections: int = 0
    accept_errors: int = 0


class Gateway(Actor[GetGatewayStatistics | GatewayShutdown]):
    uses_nursery = True

    def __init__(
        self,
        runtime: Runtime,
        settings: GatewaySettings,
        token: str,
        node_id: str,
        metrics: NodeMetrics | None = None,
        *,
        added: AddedRequests | None = None,
        door: Door | None = None,
    ) -> None:
        self.runtime = runtime
        #: Requests served besides the protocol's own (``code`` on a ``loopactors node``).
        self.added = added if added is not None else AddedRequests.of(())
        #: Every request ``answer`` serves, by type: the protocol's own, then the added ones.
        self.served: dict[str, NodeRequest] = {**protocol_requests(self), **self.added.by_type}
        #: Made by ``open_gateway`` so that its counters outlive a restart of this actor.
        self.metrics = metrics if metrics is not None else NodeMetrics(runtime)
        self.settings = settings
        self.token = token
        self.node_id = node_id
        self.port = settings.port
        self.accepting = False
        self.connections: set[Connection] = set()
        self.requests = 0
        self.frames_out = 0
        self.rejected_frames = 0
        self.auth_failures = 0
        self.refused_connections = 0
        self.unauthenticated = 0
        self.gaps = 0
        #: Events subscribers of this gateway missed because they fell behind.
        self.events_dropped = 0
        self._listener = trio.CancelScope()
        #: The node's port when ``serve_node`` opened it before the runtime (it outlives
        #: this actor); None: this gateway listens on its own.
        self.door = door
        self.admission = (
            door.admission
            if door is not None
            else Admission(settings, descriptor_budget(settings.fd_reserve))
        )

    async def on_start(self) -> None:
        self.port = await self.nursery.start(self._listen)
        self.nursery.start_soon(self.metrics.run)
        self.nursery.start_soon(self.metrics.sample_rates)
        self.accepting = True
        host = _host_text(self.settings.host)
        log.info("listening on ws://%s:%d", host, self.port, extra=log_fields("listening"))
        # The address only: `loopactors dashboard` prints it with the token.
        log.info("dashboard at http://%s:%d/", host, self.port, extra=log_fields("dashboard"))

    async def _listen(self, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        with self._listener:
            # Each connection's request head is read first (_http): websocket upgrades, on any
            # path, go on to the websocket server; plain HTTP is answered by _web.
            upgrades = UpgradeListener()
            server = WebSocketServer(
                self._serve,
                [upgrades],  # type: ignore[list-item]  # any trio Listener serves
                handler_nursery=self.nursery,  # connections outlive the listener at shutdown
                # Frames over max_frame_bytes get an error and the connection goes on; only a
                # far larger one is cut off by the websocket layer itself (close code 1009).
                max_message_size=4 * self.settings.max_frame_bytes,
                message_queue_size=16,
            )
            self.http = SplitServer(
                upgrades, WebRoutes(self), lambda: self.accepting, self.admission
            )
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(server.run)
                    if self.door is not None:
                        with self.door.serving(self.http):
                            task_status.started(self.door.port)
                            await trio.sleep_forever()
                    listeners = await trio.open_tcp_listeners(
                        self.settings.port, host=self.settings.host
                    )
                    task_status.started(listeners[0].socket.getsockname()[1])
                    # Every TCP connection is counted from accept to close (_admission).
                    await self.admission.serve(listeners, self.http.serve, self.nursery)
            finally:
                self.http.stopped.set()

    async def handle(self, message: GetGatewayStatistics | GatewayShutdown) -> Any:
        if isinstance(message, GetGatewayStatistics):
            return self.statistics()
        return await self._shutdown(message.reason)

    def statistics(self) -> GatewayStatistics:
        return GatewayStatistics(
            host=self.settings.host,
            port=self.port,
            accepting=self.accepting,
            connections=len(self.connections),
            subscriptions=sum(c.subscriptions for c in self.connections),
            requests=self.requests,
            frames_out=self.frames_out,
            rejected_frames=self.rejected_frames,
            auth_failures=self.auth_failures,
            refused_connections=self.refused_connections,
            gaps=self.gaps,
            sockets=self.admission.open,
            socket_capacity=self.admission.budget.capacity,
            handshake_timeouts=self.admission.timed_out,
            dropped_connections=self.admission.dropped,
            accept_errors=self.admission.accept_errors,
        )

    async def _shutdown(self, reason: str) -> int:
        if self.door is not None:  # the node goes away: its port says so until it closes
            self.door.shutting_down()
        self._listener.cancel()
        self.accepting = False
        connections = list(self.connections)
        async with trio.open_nursery() as nursery:
            for connection in connections:
                nursery.start_soon(connection.close, CLOSE_GOING_AWAY, reason)
        return len(connections)

    async def _serve(self, request: WebSocketRequest) -> None:
        # Runs in the gateway's nursery: nothing one client does may escape from here, or it
        # would crash the gateway (and every other client's connection with it).
        try:
            await self._serve_one(request)
        except ConnectionClosed:
            pass  # the client went away (during the upgrade, or in a close we did not await)
        except Exception:
            log.exception("a connection ended with an unexpected error")

    async def _serve_one(self, request: WebSocketRequest) -> None:
        header_token = _bearer(request)
        if not self.accepting:  # shut down since its request head was read: say so
            with trio.move_on_after(2.0), contextlib.suppress(ConnectionClosed):
                await request.reject(
                    503,
                    extra_headers=[(b"Retry-After", b"1")],
                    body=b"the node is shutting down",
                )
            return
        # A valid token in the upgrade request proves the client before hello: such a
        # connection is never refused or counted as one still to say hello.
        proven = header_token is not None and token_matches(self.token, header_token)
        ws = await request.accept()
        refusal = self._refusal(proven=proven)
        if refusal is not None:
            self.refused_connections += 1
            # One line per condition every 10 s: a flood must not flood the log too.
            self.admission.notice("refused", f"refused {_endpoint(ws)}: {refusal}")
            error = Error(id=None, code="too_many_connections", message=refusal)
            with trio.move_on_after(2.0), contextlib.suppress(ConnectionClosed):
                await ws.send_message(frame_text(error))
                await ws.aclose(CLOSE_TRY_AGAIN_LATER, "too many connections")
            return
        connection = Connection(self, ws, header_token)
        self.connections.add(connection)
        connection.counted_unauthenticated = not proven
        self.unauthenticated += not proven
        try:
            await connection.run()
        finally:
            self.connections.discard(connection)
            if connection.counted_unauthenticated:
                self.unauthenticated -= 1
            log.debug("connection from %s closed", connection.remote)

    def _refusal(self, *, proven: bool) -> str | None:
        """Why a new connection cannot be served now, if it cannot (``proven``: it gave the
        right token in its upgrade request)."""
        if len(self.connections) >= self.settings.max_connections:
            return f"the node serves at most {self.settings.max_connections} connections"
        if not proven and self.unauthenticated >= self.admission.max_unauthenticated:
            # Connections that never say hello must not crowd out those that do.
            return (
                f"{self.unauthenticated} connections are still to say hello "
                f"(at most {self.admission.max_unauthenticated}); try again later"
            )
        return None

    def healthy(self) -> bool:
        """Serving: accepting connections, with the runtime's store and coordinator up."""
        return (
            self.accepting
            and (self.door is None or self.door.state == "serving")
            and self.runtime.serving()
        )

    def note_authenticated(self, connection: Connection, client: str | None) -> None:
        if connection.counted_unauthenticated:
            connection.counted_unauthenticated = False
            self.unauthenticated -= 1
        log.info("client %s connected from %s", client or "?", connection.remote)


def _bearer(request: WebSocketRequest) -> str | None:
    for name, value in request.headers:
        if name.lower() == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" else ""
    return None


def _endpoint(ws: WebSocketConnection) -> str:
    remote = ws.remote
    return remote if isinstance(remote, str) else f"{remote.address}:{remote.port}"


def _host_text(host: str) -> str:
    return f"[{host}]" if ":" in host else host
