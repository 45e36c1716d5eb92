"""No Pong after our own Close: a hostile or unlucky peer must not end a connection's tasks.

trio-websocket answers every Ping from its reader task. When the Ping arrives after this side
sent Close (a node refusing a bad token, a client leaving while the node's heartbeat pings),
wsproto refuses to send the Pong and raises ``LocalProtocolError`` in the reader task, which
takes down the nursery the connection runs in: the whole Gateway on the node's side (every
client's connection with it), the ``connect`` block on the client's. RFC 6455 (5.5.2) owes no
Pong once a Close is sent, so such a Ping is dropped here. Imported for its effect by the
gateway and the client; tests/gateway/test_regressions.py pins it.
"""

from __future__ import annotations

from typing import Any

from trio_websocket import WebSocketConnection
from wsproto.connection import ConnectionState

_answer_ping = WebSocketConnection._handle_ping_event


async def _answer_ping_while_open(self: WebSocketConnection, event: Any) -> None:
    # Checked and sent with no await between: the state cannot change in the meantime.
    if self._wsproto.state is ConnectionState.OPEN:
        await _answer_ping(self, event)


WebSocketConnection._handle_ping_event = _answer_ping_while_open  # type: ignore[method-assign]
