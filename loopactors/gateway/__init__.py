"""The standalone node's websocket API: protocol, Gateway actor, node, and a Python client.

General layout: ``_protocol`` (every frame as a msgspec Struct, the JSON Schema), ``_auth``
(the token, where a node may listen), ``_limits``, ``_settings``, ``_connection`` (one client),
``_extensions`` (requests an application adds, such as
``code``), ``_gateway`` (the actor), ``_node`` (open_gateway, serve_node), ``_client`` (connect),
``_http`` (HTTP beside the websocket), ``_web`` (health, metrics, dashboard), ``_door`` (the
node's port for its whole life).

The names load their module on first use: a configuration's ``[node]`` table is read with
``_settings`` alone, without the websocket server, the client or trio.
"""

from .._lazy import lazy_names
from .._util import fix_public_module

TYPE_CHECKING = False

if TYPE_CHECKING:
    from ._auth import TOKEN_FILENAME as TOKEN_FILENAME
    from ._auth import parse_listen as parse_listen
    from ._client import NodeClient as NodeClient
    from ._client import RemoteStates as RemoteStates
    from ._client import RemoteSubscription as RemoteSubscription
    from ._client import Subscribing as Subscribing
    from ._client import connect as connect
    from ._door import Door as Door
    from ._door import open_door as open_door
    from ._errors import Refusal as Refusal
    from ._extensions import NodeRequest as NodeRequest
    from ._extensions import forget_node_request as forget_node_request
    from ._extensions import node_requests as node_requests
    from ._extensions import register_node_request as register_node_request
    from ._gateway import Gateway as Gateway
    from ._gateway import GatewayStatistics as GatewayStatistics
    from ._node import GatewayHandle as GatewayHandle
    from ._node import open_gateway as open_gateway
    from ._node import serve_node as serve_node
    from ._protocol import PROTOCOL_VERSION as PROTOCOL_VERSION
    from ._protocol import json_schema as json_schema
    from ._settings import GatewaySettings as GatewaySettings
    from ._settings import NodeSettings as NodeSettings
    from ._settings import gateway_settings as gateway_settings

__all__ = [
    "PROTOCOL_VERSION",
    "TOKEN_FILENAME",
    "Door",
    "Gateway",
    "GatewayHandle",
    "GatewaySettings",
    "GatewayStatistics",
    "NodeClient",
    "NodeRequest",
    "NodeSettings",
    "Refusal",
    "RemoteStates",
    "RemoteSubscription",
    "Subscribing",
    "connect",
    "forget_node_request",
    "gateway_settings",
    "json_schema",
    "node_requests",
    "open_door",
    "open_gateway",
    "parse_listen",
    "register_node_request",
    "serve_node",
]

_HOMES = {
    "Door": "_door",
    "Gateway": "_gateway",
    "GatewayHandle": "_node",
    "GatewaySettings": "_settings",
    "GatewayStatistics": "_gateway",
    "NodeClient": "_client",
    "NodeRequest": "_extensions",
    "NodeSettings": "_settings",
    "PROTOCOL_VERSION": "_protocol",
    "Refusal": "_errors",
    "RemoteStates": "_client",
    "RemoteSubscription": "_client",
    "Subscribing": "_client",
    "TOKEN_FILENAME": "_auth",
    "connect": "_client",
    "forget_node_request": "_extensions",
    "gateway_settings": "_settings",
    "json_schema": "_protocol",
    "node_requests": "_extensions",
    "open_door": "_door",
    "open_gateway": "_node",
    "parse_listen": "_auth",
    "register_node_request": "_extensions",
    "serve_node": "_node",
}

__getattr__, __dir__ = lazy_names(__name__, _HOMES, __all__, fix=fix_public_module)
