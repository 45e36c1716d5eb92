"""The transport a setting names."""

from __future__ import annotations

from ._base import InProcessTransport, RoundTransport
from ._url import IN_PROCESS, check_transport

__all__ = ["transport_for"]


def transport_for(setting: str) -> RoundTransport:
    """``inprocess`` or a Redis URL (checked; see :func:`check_transport`)."""
    if check_transport(setting) == IN_PROCESS:
        return InProcessTransport()
    from ._node import RedisTransport  # noqa: PLC0415 - coredis loads only when asked for

    return RedisTransport(setting)
