"""Drive a loopactors node over its websocket API (``loopactors node``).

async with connect("ws://127.0.0.1:8765", token=token) as node:
    state = await node.start("|loop:3| review this module")
    final = await node.wait(state.loop_id)
"""

from .errors import ConnectionLost, RemoteError
from .gateway import NodeClient, RemoteStates, RemoteSubscription, Subscribing, connect

__all__ = [
    "ConnectionLost",
    "NodeClient",
    "RemoteError",
    "RemoteStates",
    "RemoteSubscription",
    "Subscribing",
    "connect",
]
