"""How a node's gateway listens and what it allows each connection.

The settings are the configuration's ``[node]`` table (:class:`~loopactors.runtime.NodeSettings`);
``GatewaySettings`` is the gateway's name for them.
"""

from __future__ import annotations

from ..runtime import NodeSettings

__all__ = ["GatewaySettings"]

GatewaySettings = NodeSettings
