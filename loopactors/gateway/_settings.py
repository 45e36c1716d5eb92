"""How a node's gateway listens and what it allows each connection: the configuration's
``[node]`` table, which the gateway owns (the runtime's configuration carries it by name,
``RuntimeConfig.section``; registered in ``runtime/_config.py`` by path, loaded only when a file
has the table or the node starts). Light: attrs only, so reading a configuration stays cheap.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import attrs

from .._util import positive_setting

if TYPE_CHECKING:
    from ..runtime import RuntimeConfig

__all__ = ["SECTION", "GatewaySettings", "NodeSettings", "gateway_settings"]

#: The configuration table the gateway's settings are read from.
SECTION = "node"


@attrs.frozen(kw_only=True)
class GatewaySettings:
    """How `loopactors node` listens and what its gateway allows (``[node]`` in the
    configuration file; flags override). Every limit is per connection unless its name says
    otherwise; each overflow is answered with an error frame (or, for connections, a refusal),
    never a crash."""

    host: str = "127.0.0.1"
    #: 0 picks a free port (tests); the bound port is in the gateway's statistics.
    port: int = 8765
    #: The operator's token file; None means ``<state_dir>/node.token`` (created on demand).
    token_file: Path | None = None
    #: Frames larger than this are refused with ``frame_too_large``; four times this closes
    #: the connection (1009) before the frame is even read whole.
    max_frame_bytes: int = attrs.field(default=1 << 20, validator=positive_setting)
    max_connections: int = attrs.field(default=1_000, validator=positive_setting)
    #: Connections still to send ``hello`` (per node): past it new ones are refused, so that
    #: clients without a token cannot crowd out those with one.
    max_unauthenticated: int = attrs.field(default=500, validator=positive_setting)
    max_subscriptions: int = attrs.field(default=64, validator=positive_setting)
    max_requests_per_second: float = attrs.field(default=5_000.0, validator=positive_setting)
    request_burst: int = attrs.field(default=1_000, validator=positive_setting)
    #: Requests of one connection being answered at once.
    max_inflight_requests: int = attrs.field(default=256, validator=positive_setting)
    #: Events queued per subscription before the client is told it missed some.
    subscriber_queue: int = attrs.field(default=1_000, validator=positive_setting)
    #: What happens to a subscriber that falls behind: a ``gap`` frame with the count of
    #: missed events, or the connection closed (1008).
    slow_subscriber: Literal["gap", "disconnect"] = "gap"
    #: Largest ``limit`` of a ``status`` request for all loops (and its default).
    max_status_loops: int = attrs.field(default=1_000, validator=positive_setting)
    default_status_loops: int = attrs.field(default=100, validator=positive_setting)
    #: Seconds a new connection has to send ``hello``.
    hello_timeout: float = attrs.field(default=10.0, validator=positive_setting)
    #: Seconds a new TCP connection has to send its whole request head (the websocket
    #: upgrade); and how many may be doing so at once (per node: a new one past it drops
    #: the oldest).
    handshake_timeout: float = attrs.field(default=5.0, validator=positive_setting)
    max_handshaking: int = attrs.field(default=64, validator=positive_setting)
    #: File descriptors the gateway leaves for the runtime's own work (store, workers,
    #: model connections): its sockets never take more than the process's limit minus these.
    fd_reserve: int = attrs.field(default=256, validator=positive_setting)
    #: A websocket ping every ``ping_interval`` s; no pong within ``ping_timeout`` s closes
    #: the connection (a half-open peer is found and cleaned up).
    ping_interval: float = attrs.field(default=20.0, validator=positive_setting)
    ping_timeout: float = attrs.field(default=20.0, validator=positive_setting)
    #: A client that takes longer than this to accept one write (a frame, or the frames
    #: queued for it at once) is disconnected.
    send_timeout: float = attrs.field(default=30.0, validator=positive_setting)
    #: On a shared store (PostgreSQL), a node whose lease ended (``LeaseLost``) exits (exit
    #: code 75) instead of registering again as a new incarnation (docs/multinode.md).
    exit_on_lease_lost: bool = False

    def replace(self, **changes: Any) -> GatewaySettings:
        """A copy with the changes that are not None (flags that were not given)."""
        return attrs.evolve(self, **{k: v for k, v in changes.items() if v is not None})

    def protected_paths(self) -> tuple[Path, ...]:
        """Files no worker may touch (docs/security.md): the token file, when it is not the
        state directory's own (which is protected with the directory)."""
        return (self.token_file,) if self.token_file is not None else ()

    def relative_to(self, folder: Path) -> GatewaySettings:
        """A token file named relative to the configuration file that names it."""
        if self.token_file is None or self.token_file.is_absolute():
            return self
        return attrs.evolve(self, token_file=folder / self.token_file)


# Resolved here: the package shows the class as loopactors.gateway's, where the names its
# annotations use are not defined (the configuration's converter reads them).
attrs.resolve_types(GatewaySettings)


def gateway_settings(config: RuntimeConfig) -> GatewaySettings:
    """The configuration's ``[node]`` table (its defaults if the file has none)."""
    return config.section(SECTION, GatewaySettings)


#: The name these settings had before the gateway owned them (kept for one release).
NodeSettings = GatewaySettings
