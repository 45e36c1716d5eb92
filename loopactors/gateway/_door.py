"""The node's port for the node's whole life, so that it can say "not now" (``/healthz``).

``loopactors node`` opens the port before the runtime (which may take a while to recover its
loops) and closes it after the runtime stopped. In between, each connection goes to the
gateway when one is serving (:meth:`Door.serving`), and otherwise gets a short ``503``: a
health check sees ``503 starting`` or ``503 shutting down`` rather than a refused connection
(which a load balancer cannot tell from a dead machine), and a websocket client gets a
``503`` answer to its upgrade, a clean refusal it retries later. The same happens while a
crashed gateway is being restarted.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Literal

import trio

from ._admission import Admission, descriptor_budget
from ._http import HttpRequest, HttpResponse, SplitServer, UpgradeListener
from ._settings import GatewaySettings

__all__ = ["Door", "open_door"]

DoorState = Literal["starting", "serving", "shutting down"]


class Door:
    """Where each connection to the node's port goes (see the module docstring)."""

    def __init__(self, listeners: list[trio.SocketListener], admission: Admission) -> None:
        self.listeners = listeners
        self.admission = admission
        self.port: int = listeners[0].socket.getsockname()[1]
        self.state: DoorState = "starting"
        self._server: SplitServer | None = None
        # Answers while no gateway serves: health and every request get 503, upgrades too.
        self._unready = SplitServer(
            UpgradeListener(), self._respond, lambda: False, admission, self._why
        )

    async def serve(self, stream: trio.SocketStream) -> None:
        server = self._server
        await (server if server is not None else self._unready).serve(stream)

    @contextlib.contextmanager
    def serving(self, server: SplitServer) -> Iterator[None]:
        """Hand new connections to ``server`` for the duration of the block."""
        self._server = server
        if self.state == "starting":
            self.state = "serving"
        try:
            yield
        finally:
            self._server = None
            if self.state == "serving":  # the gateway restarts: back to "starting"
                self.state = "starting"

    def shutting_down(self) -> None:
        """From now on ``/healthz`` answers 503, whatever still serves."""
        self.state = "shutting down"

    def _why(self) -> str:
        return f"the node is {self.state}: try again in a moment"

    async def _respond(self, request: HttpRequest) -> HttpResponse:
        headers = (("Cache-Control", "no-store"), ("Retry-After", "1"))
        if request.target.partition("?")[0] == "/healthz":
            return HttpResponse.text(503, self.state, headers=headers)
        return HttpResponse.text(503, self._why(), headers=headers)


@contextlib.asynccontextmanager
async def open_door(settings: GatewaySettings) -> AsyncIterator[Door]:
    """Listen on ``settings``' address for the duration of the block (every connection
    counted by one :class:`Admission`, as a gateway of its own does)."""
    listeners = await trio.open_tcp_listeners(settings.port, host=settings.host)
    door = Door(listeners, Admission(settings, descriptor_budget(settings.fd_reserve)))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(door.admission.serve, listeners, door.serve, nursery)
        try:
            yield door
        finally:
            nursery.cancel_scope.cancel()
