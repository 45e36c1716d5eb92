"""``--connect``: the one reading of a node's address, for every command.

A node serves its websocket API on any path of its port, beside its dashboard (docs/node.md),
so ``http(s)://`` (as copied from the dashboard) names the same node as ``ws(s)://``, and a
bare ``HOST:PORT`` is the loopback-typical shorthand.
"""

from __future__ import annotations

import urllib.parse

from ..errors import ConfigError

__all__ = ["ACCEPTED", "node_ws_url"]

ACCEPTED = "ws://HOST:PORT, wss://HOST:PORT, http(s)://HOST:PORT or HOST:PORT"
_SCHEMES = {"ws": "ws", "wss": "wss", "http": "ws", "https": "wss"}


def node_ws_url(text: str) -> str:
    """``text`` as the node's websocket URL (``ws://`` or ``wss://``).

    Raises:
        ConfigError: ``text`` is none of the accepted forms (the message names them).
    """
    given = text.strip()
    if "://" not in given:
        given = _bare(given, text)
    try:
        parts = urllib.parse.urlsplit(given)
        port = parts.port
    except ValueError:
        raise _refused(text, "its port is not a number from 1 to 65535") from None
    scheme = _SCHEMES.get(parts.scheme.lower())
    if scheme is None:
        raise _refused(text, f"the scheme {parts.scheme!r} is not a node's")
    if not parts.hostname:
        raise _refused(text, "it names no host")
    if port == 0:
        raise _refused(text, "its port is not a number from 1 to 65535")
    # The fragment of a dashboard address holds the token: never sent, never kept.
    return urllib.parse.urlunsplit((scheme, parts.netloc, parts.path, parts.query, ""))


def _bare(given: str, text: str) -> str:
    host, colon, port = given.rpartition(":")
    if not colon or not host or not port.isdigit():
        raise _refused(text, "it is not HOST:PORT")
    if ":" in host and not (host.startswith("[") and host.endswith("]")):
        raise _refused(text, "an IPv6 host goes in brackets, [::1]:PORT")
    return f"ws://{host}:{port}"


def _refused(text: str, why: str) -> ConfigError:
    return ConfigError(f"--connect takes a node's address, {ACCEPTED}; got {text!r} ({why})")
