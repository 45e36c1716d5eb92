"""The messages the gateway's actor answers (a standalone node's ``GatewayActor``)."""

from __future__ import annotations

import msgspec

__all__ = ["GatewayShutdown", "GetGatewayStatistics"]


class GetGatewayStatistics(msgspec.Struct, frozen=True):
    """Reply: the gateway's ``GatewayStatistics``."""


class GatewayShutdown(msgspec.Struct, frozen=True):
    """Stop accepting connections, tell each client ``reason`` and close it (1001).

    Reply: the number of connections closed.
    """

    reason: str = "the node is shutting down"
