"""Round transports by name: which transport a ``transport`` setting names (docs/scale-out.md).

The runtime owns the interface (:mod:`._round_transport`); each transport is an adapter
behind it, named by the setting: ``inprocess`` (the default, :mod:`._inprocess`) or a URL
whose scheme was registered (``redis://`` and ``rediss://``: ``loopactors.transport``). A
transport registers through :func:`register_transport`, or an entry point in the group
``loopactors.transports``, as a third party's would; the runtime never imports one. Light on
purpose: a configuration is checked here without loading the workers or trio.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import attrs

from .._plugins import Registry
from .._util import redact_url
from ..errors import ConfigError

if TYPE_CHECKING:
    from ._round_transport import RoundTransport

__all__ = [
    "DispatchSettings",
    "TransportKind",
    "check_transport",
    "forget_transport",
    "open_transport",
    "redact_url",
    "register_transport",
    "transport_kind",
]


@attrs.frozen(kw_only=True)
class DispatchSettings:
    """What a transport is opened with (the runtime's configuration)."""

    max_concurrent: int = 64
    max_per_kind: Mapping[str, int] = attrs.field(factory=dict)
    kill_grace: float = 5.0
    #: What is kept of each output; where an output that was cut is also written whole.
    max_output_bytes: int = 1 << 20
    outputs_dir: Path | None = None
    #: The node's name (``RuntimeConfig.node_name``): a transport shared by several nodes
    #: routes each round's result to the node that waits for it.
    node_name: str | None = None
    #: Whether the node may hand a round to another process now (its lease on a shared
    #: store cannot have ended: ``StoreKind.lease_valid``); None: always.
    may_dispatch: Callable[[], bool] | None = None


@attrs.frozen(kw_only=True)
class TransportKind:
    """A transport a setting may name: its form checked without opening anything, and how to
    open one."""

    #: ``inprocess``, or the URL scheme (``redis``).
    name: str
    #: Raises :class:`ConfigError` naming the value and what is accepted.
    check: Callable[[str], None]
    open: Callable[[str, DispatchSettings], RoundTransport]
    #: Rounds run in this process, so what a worker spec names must exist here.
    rounds_here: bool = False


def _check_in_process(setting: str) -> None:
    pass  # the bare name is its whole form


def _open_in_process(setting: str, settings: DispatchSettings) -> RoundTransport:
    from ._inprocess import InProcessTransport  # noqa: PLC0415 - trio and the workers

    return InProcessTransport(settings)


#: The default: rounds run in the node's process (checked without loading trio or workers).
IN_PROCESS = TransportKind(
    name="inprocess", check=_check_in_process, open=_open_in_process, rounds_here=True
)

_TRANSPORTS: Registry[TransportKind] = Registry("transport", group="loopactors.transports")
# The built-in transports, registered as a third party's are (Redis imported on first use).
_TRANSPORTS.register("inprocess", IN_PROCESS)
_TRANSPORTS.register("redis", "loopactors.transport:REDIS")
_TRANSPORTS.register("rediss", "loopactors.transport:REDIS")


def register_transport(name: str, kind: TransportKind | str) -> None:
    """Make ``name`` (a URL scheme, or a bare name like ``inprocess``) a transport setting,
    served by ``kind`` or by the :class:`TransportKind` ``"module:attr"`` names.

    Raises:
        ValueError: ``name`` is registered already.
    """
    _TRANSPORTS.register(name, kind)


def forget_transport(name: str) -> None:
    """Undo :func:`register_transport` (a test's own transport)."""
    _TRANSPORTS.unregister(name)


def transport_kind(setting: str) -> TransportKind:
    """The transport ``setting`` names, its form checked.

    Raises:
        ConfigError: naming the value (any password hidden) and what is accepted.
    """
    name = setting.partition("://")[0] if "://" in setting else setting
    kind = _TRANSPORTS.get(name)
    if kind is None:
        accepted = ", ".join(n if n == "inprocess" else f"{n}://..." for n in _TRANSPORTS.names())
        raise ConfigError(
            f"bad transport {redact_url(setting)!r}: unknown transport {name!r}; "
            f"accepted: {accepted}"
        )
    kind.check(setting)
    return kind


def check_transport(setting: str) -> str:
    """``setting`` if it names a transport in a form it accepts (see :func:`transport_kind`)."""
    transport_kind(setting)
    return setting


def open_transport(setting: str, settings: DispatchSettings) -> RoundTransport:
    """The transport ``setting`` names, opened (its :meth:`RoundTransport.serve` not yet run)."""
    return transport_kind(setting).open(setting, settings)
