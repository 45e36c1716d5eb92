"""Requests an application adds to the node protocol (docs/protocol.md, "Requests added by
applications"). The gateway knows only this shape, never the application: code loops add
``code`` this way (``codeloop.CODE_REQUEST``), so the gateway does not import them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol, Union

import attrs
import msgspec

from .._plugins import Registry
from ..errors import ConfigError
from ._protocol import CLIENT_FRAMES

if TYPE_CHECKING:
    import trio

    from ..runtime import Runtime

__all__ = [
    "AddedRequests",
    "NodeRequest",
    "forget_node_request",
    "node_requests",
    "register_node_request",
]


class NodeRequest(Protocol):
    """One request a node serves besides its own: the frame a client sends (a msgspec Struct
    tagged on ``type`` with an ``id`` field), the data of its ``ok`` reply, and the answer.
    ``answer`` may start background work in ``background`` (the gateway's nursery); what it
    raises becomes an error frame like any request's (``LoopactorsError`` subclasses have
    stable codes). The frame forbids unknown fields, like the protocol's own."""

    @property
    def frame(self) -> type[msgspec.Struct]: ...

    @property
    def reply(self) -> type[msgspec.Struct]: ...

    async def answer(
        self, request: Any, runtime: Runtime, background: trio.Nursery
    ) -> msgspec.Struct: ...


_REQUESTS: Registry[NodeRequest] = Registry("node request", group="loopactors.node_requests")


def register_node_request(name: str, request: NodeRequest | str) -> None:
    """Have ``loopactors node`` serve ``request`` (or the :class:`NodeRequest` that
    ``"module:attr"`` names, imported when a node starts), as it serves code loops' ``code``.

    Raises:
        ValueError: ``name`` is registered already.
    """
    _REQUESTS.register(name, request)


def forget_node_request(name: str) -> None:
    """Undo :func:`register_node_request` (a test's own request)."""
    _REQUESTS.unregister(name)


def node_requests() -> list[NodeRequest]:
    """Every request registered, by call or in the entry-point group
    ``loopactors.node_requests``, by name."""
    return [_REQUESTS[name] for name in _REQUESTS.names()]


def request_tag(frame: type[msgspec.Struct]) -> str:
    return str(frame.__struct_config__.tag)


def check_extensions(extensions: Sequence[NodeRequest]) -> dict[str, NodeRequest]:
    """The added requests by type, after checking each can share the protocol's frames."""
    taken = {request_tag(frame) for frame in CLIENT_FRAMES}
    by_tag: dict[str, NodeRequest] = {}
    for extension in extensions:
        frame = extension.frame
        config = frame.__struct_config__
        if config.tag_field != "type" or not isinstance(config.tag, str):
            raise ConfigError(
                f"an added request's frame must be tagged on 'type' with a string tag; "
                f"{frame.__name__} is not"
            )
        if not config.forbid_unknown_fields:  # like the protocol's own: a typo is an error
            raise ConfigError(
                f"an added request's frame must forbid unknown fields; {frame.__name__} does not"
            )
        if "id" not in frame.__struct_fields__:
            raise ConfigError(f"an added request's frame needs an 'id' field; {frame.__name__}")
        tag = request_tag(frame)
        if tag in taken or tag in by_tag:
            raise ConfigError(f"the node protocol already has a request of type {tag!r}")
        by_tag[tag] = extension
    return by_tag


@attrs.frozen
class AddedRequests:
    """What a gateway serves besides its own requests, and how it reads any client frame."""

    #: The added requests by their ``type``.
    by_type: dict[str, NodeRequest]
    #: Every request type a client may send, the protocol's own first.
    types: list[str]
    #: JSON text to a request Struct (msgspec's errors for a frame that is none of them).
    decode: Callable[[str], Any]

    @classmethod
    def of(cls, extensions: Sequence[NodeRequest]) -> AddedRequests:
        by_type = check_extensions(extensions)
        frames = CLIENT_FRAMES + tuple(added.frame for added in by_type.values())
        decoder = msgspec.json.Decoder(Union[frames])  # noqa: UP007 - a union built at run time
        types = [request_tag(frame) for frame in frames]
        return cls(by_type=by_type, types=types, decode=decoder.decode)
