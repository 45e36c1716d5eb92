"""The Redis transport's settings (``redis://`` and ``rediss://``), as the runtime's
registry of transports reads them: the URL's form, checked without loading the Redis client.

Pure functions, no I/O.
"""

from __future__ import annotations

import urllib.parse
from typing import TYPE_CHECKING

from .._util import redact_url
from ..errors import ConfigError
from ..runtime import DispatchSettings, TransportKind

if TYPE_CHECKING:
    from ..runtime import RoundTransport

__all__ = ["IN_PROCESS", "REDIS", "check_transport", "redact_url"]

#: The default transport: rounds run inside the node's process.
IN_PROCESS = "inprocess"
REDIS_SCHEMES = ("redis", "rediss")


def check_transport(value: str) -> str:
    """``inprocess``, or a Redis URL (``redis://[:PASSWORD@]HOST:PORT/DB``, ``rediss://`` for TLS).

    Raises:
        ConfigError: naming the value (with any password hidden) and what is accepted.
    """
    if value == IN_PROCESS:
        return value
    parts = urllib.parse.urlsplit(value)
    problem = None
    if parts.scheme not in REDIS_SCHEMES:
        problem = "the scheme must be redis:// or rediss:// (TLS)"
    elif not parts.hostname:
        problem = "it names no host"
    else:
        try:
            parts.port  # noqa: B018 - raises on a port that is not a number
        except ValueError:
            problem = "its port is not a number"
        db = parts.path.strip("/")
        if problem is None and db and not db.isdigit():
            problem = f"its database must be a number, got {db!r}"
    if problem is not None:
        raise ConfigError(
            f"bad transport {redact_url(value)!r}: {problem}; accepted: {IN_PROCESS!r} or "
            "redis://[:PASSWORD@]HOST:PORT/DB (rediss:// for TLS)"
        )
    return value


def _check_redis(url: str) -> None:
    check_transport(url)


def _open_redis(url: str, settings: DispatchSettings) -> RoundTransport:
    from ._node import RedisTransport  # noqa: PLC0415 - coredis loads only when one is opened

    return RedisTransport(
        url,
        max_output_bytes=settings.max_output_bytes,
        node_name=settings.node_name,
        may_publish=settings.may_dispatch,
    )


#: The Redis transport, registered by the runtime under ``redis`` and ``rediss``.
REDIS = TransportKind(name="redis", check=_check_redis, open=_open_redis)
