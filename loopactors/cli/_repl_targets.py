"""What the REPL acts on: an embedded runtime, or a node over the wire, behind one protocol.

:class:`LoopControl` is what both offer alike (``Runtime`` and ``NodeClient`` implement it),
so the REPL's status, stop, pause and resume are written once, in :class:`_Target`; only
starting a loop, its history, code loops and events differ by target.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol

import trio

from ..client import NodeClient
from ..codeloop import CodeLoops, answer_code, code_request
from ..loops import AnyEvent, LoopState, RoundRecord
from ..runtime import Gap, Runtime
from ..storage import parse_store, store_kind
from ._loop_control import LoopControl

__all__ = ["EmbeddedTarget", "RemoteTarget", "Target"]


class Target(Protocol):
    """What the REPL needs of a node: an embedded runtime or a connection to one."""

    where: str
    keeps_running: bool

    async def start(self, text: str, worker: str | None) -> LoopState: ...
    async def stop(self, loop_id: str) -> LoopState: ...
    async def pause(self, loop_id: str) -> LoopState: ...
    async def resume(self, loop_id: str) -> LoopState: ...
    async def get(self, loop_id: str) -> LoopState: ...
    async def loops(self, *, live_only: bool = False) -> list[LoopState]: ...
    async def history(self, loop_id: str) -> list[RoundRecord]: ...
    async def code(self, action: str, **fields: Any) -> CodeLoops: ...
    def events(self) -> AsyncIterator[AnyEvent | Gap]: ...


class _Target:
    """The commands both targets share, written once over their :class:`LoopControl`."""

    #: The REPL's list of loops shows at most this many.
    LIST_LIMIT = 100
    #: Outputs in a history: whole (None), or their first characters.
    output_head: int | None = None

    def __init__(self, control: LoopControl) -> None:
        self.control = control

    async def resolve(self, loop_id: str) -> str:
        """The loop id a person typed, as the target needs it (a remote node resolves a
        unique prefix itself)."""
        return loop_id

    async def stop(self, loop_id: str) -> LoopState:
        return await self.control.stop(await self.resolve(loop_id))

    async def pause(self, loop_id: str) -> LoopState:
        return await self.control.pause(await self.resolve(loop_id))

    async def resume(self, loop_id: str) -> LoopState:
        return await self.control.resume(await self.resolve(loop_id))

    async def get(self, loop_id: str) -> LoopState:
        return await self.control.get(await self.resolve(loop_id))

    async def loops(self, *, live_only: bool = False) -> list[LoopState]:
        return await self.control.loops(live_only=live_only, limit=self.LIST_LIMIT)

    async def history(self, loop_id: str) -> list[RoundRecord]:
        loop_id = await self.resolve(loop_id)
        return (await self.control.recorded(loop_id, output_head=self.output_head))[1]


class EmbeddedTarget(_Target):
    keeps_running = False

    def __init__(self, runtime: Runtime) -> None:
        super().__init__(runtime)
        self.rt = runtime
        self.background: trio.Nursery | None = None  # where code loops run
        url = parse_store(runtime.config.store)
        kind = store_kind(url)
        #: The store is in this process: its loops are gone once you leave.
        self.keeps_nothing = kind.in_process
        local = kind.local_dir(url, Path(runtime.config.state_dir))
        self.where = (
            f"embedded node ({url.scheme} store: nothing is kept after you leave)"
            if kind.in_process
            else f"embedded node ({url.scheme} store in {local or url.redacted})"
        )

    async def resolve(self, loop_id: str) -> str:
        # Every loop id a person typed goes through resolve_loop_id: a unique prefix will do.
        return await self.rt.resolve_loop_id(loop_id)

    async def start(self, text: str, worker: str | None) -> LoopState:
        return await (await self.rt.start(text, worker=worker)).status()

    async def code(self, action: str, **fields: Any) -> CodeLoops:
        assert self.background is not None, "set when the session starts"
        return await answer_code(code_request(action, **fields), self.rt, self.background)

    async def events(self) -> AsyncIterator[AnyEvent | Gap]:
        with self.rt.subscribe() as sub:
            async for event in sub:
                yield event


class RemoteTarget(_Target):
    keeps_running = True
    output_head = 60  # a node never sends whole outputs in one frame (/output fetches one)

    def __init__(self, node: NodeClient) -> None:
        super().__init__(node)
        self.node = node
        self.where = f"node {node.info.node_id} at {node.url}"

    @property
    def closing_reason(self) -> str | None:
        return self.node.closing_reason

    async def start(self, text: str, worker: str | None) -> LoopState:
        return await self.node.start(text, worker=worker)

    async def code(self, action: str, **fields: Any) -> CodeLoops:
        return await self.node.request(code_request(action, **fields), CodeLoops)

    async def events(self) -> AsyncIterator[AnyEvent | Gap]:
        async with await self.node.subscribe() as sub:
            async for event in sub:
                yield event
