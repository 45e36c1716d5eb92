"""How a node's gateway listens and what it allows each connection."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import attrs

__all__ = ["GatewaySettings"]


def _positive(_: Any, attribute: attrs.Attribute[Any], value: float) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name} must be > 0, got {value!r}")


@attrs.frozen(kw_only=True)
class GatewaySettings:
    """Every limit is per connection unless its name says otherwise; each overflow is answered
    with an error frame (or, for connections, a refusal), never a crash."""

    host: str = "127.0.0.1"
    #: 0 picks a free port (tests); the bound port is in the gateway's statistics.
    port: int = 8765
    #: The operator's token file; None means ``<state_dir>/node.token`` (created on demand).
    token_file: Path | None = None
    #: Frames larger than this are refused with ``frame_too_large``; four times this closes
    #: the connection (1009) before the frame is even read whole.
    max_frame_bytes: int = attrs.field(default=1 << 20, validator=_positive)
    max_connections: int = attrs.field(default=1_000, validator=_positive)
    #: Connections still to send ``hello`` (per node): past it new ones are refused, so that
    #: clients without a token cannot crowd out those with one.
    max_unauthenticated: int = attrs.field(default=500, validator=_positive)
    max_subscriptions: int = attrs.field(default=64, validator=_positive)
    max_requests_per_second: float = attrs.field(default=5_000.0, validator=_positive)
    request_burst: int = attrs.field(default=1_000, validator=_positive)
    #: Requests of one connection being answered at once.
    max_inflight_requests: int = attrs.field(default=256, validator=_positive)
    #: Events queued per subscription before the client is told it missed some.
    subscriber_queue: int = attrs.field(default=1_000, validator=_positive)
    #: What happens to a subscriber that falls behind: a ``gap`` frame with the count of
    #: missed events, or the connection closed (1008).
    slow_subscriber: Literal["gap", "disconnect"] = "gap"
    #: Largest ``limit`` of a ``status`` request for all loops (and its default).
    max_status_loops: int = attrs.field(default=1_000, validator=_positive)
    default_status_loops: int = attrs.field(default=100, validator=_positive)
    #: Seconds a new connection has to send ``hello``.
    hello_timeout: float = attrs.field(default=10.0, validator=_positive)
    #: A websocket ping every ``ping_interval`` s; no pong within ``ping_timeout`` s closes
    #: the connection (a half-open peer is found and cleaned up).
    ping_interval: float = attrs.field(default=20.0, validator=_positive)
    ping_timeout: float = attrs.field(default=20.0, validator=_positive)
    #: A client that takes longer than this to accept one frame is disconnected.
    send_timeout: float = attrs.field(default=30.0, validator=_positive)

    def replace(self, **changes: Any) -> GatewaySettings:
        """A copy with the changes that are not None (flags that were not given)."""
        return attrs.evolve(self, **{k: v for k, v in changes.items() if v is not None})
