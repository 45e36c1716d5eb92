"""Where the REPL's loops live: an embedded runtime, or a node over the wire.

Both are acted on through the one loop vocabulary (``loops.LoopControl``: ``Runtime`` and
``NodeClient`` implement it alike); :class:`Place` adds only what differs between them, as
data: where they are, whether loops outlive the session, how much of an output a history
holds, and how a code loop's request is answered.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import trio

from ..client import NodeClient
from ..codeloop import CodeLoops, answer_code, code_request
from ..loops import LoopControl, RoundRecord
from ..runtime import Runtime
from ..storage import parse_store, store_kind

__all__ = ["Place", "embedded", "on_node"]


@attrs.define(kw_only=True)
class Place:
    control: LoopControl
    #: Said when the session starts and under ``/loops``.
    where: str
    #: The node's URL (``None``: embedded).
    url: str | None = None
    #: The node's default worker spec (what a loop started without one runs).
    default_worker: str
    #: Loops go on running after the session ends (a node); else they stop with it.
    keeps_running: bool
    #: Nothing is kept after the session (the memory store).
    keeps_nothing: bool = False
    #: A round's whole output (a node's history holds output heads only).
    output: Callable[[str, int], Awaitable[RoundRecord]]
    #: A code loop's request (``codeloop.code_request``) and its answer.
    code: Callable[..., Awaitable[CodeLoops]]
    #: Why the node closed the connection, once it did.
    closing_reason: Callable[[], str | None] = lambda: None
    #: Where an embedded runtime runs code loops (set when the session starts).
    background: trio.Nursery | None = None


def embedded(runtime: Runtime) -> Place:
    url = parse_store(runtime.config.store)
    kind = store_kind(url)
    local = kind.local_dir(url, Path(runtime.config.state_dir))
    place = Place(
        control=runtime,
        where=f"embedded node ({url.scheme} store: nothing is kept after you leave)"
        if kind.in_process
        else f"embedded node ({url.scheme} store in {local or url.redacted})",
        default_worker=runtime.config.worker,
        keeps_running=False,
        keeps_nothing=kind.in_process,
        output=runtime.output,
        code=lambda action, **fields: _code_here(place, runtime, action, **fields),
    )
    return place


async def _code_here(place: Place, runtime: Runtime, action: str, **fields: Any) -> CodeLoops:
    assert place.background is not None, "set when the session starts"
    return await answer_code(code_request(action, **fields), runtime, place.background)


def on_node(node: NodeClient) -> Place:
    async def code(action: str, **fields: Any) -> CodeLoops:
        return await node.request(code_request(action, **fields), CodeLoops)

    return Place(
        control=node,
        where=f"node {node.info.node_id} at {node.url}",
        url=node.url,
        default_worker=node.info.default_worker,
        keeps_running=True,
        output=node.output,
        code=code,
        closing_reason=lambda: node.closing_reason,
    )
