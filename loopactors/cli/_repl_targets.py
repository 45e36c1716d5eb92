"""What the REPL acts on: an embedded runtime, or a node over the wire, behind one protocol."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

import msgspec
import trio

from ..client import NodeClient
from ..errors import CodeLoopError
from ..gateway import Code, CodeLoops, Refusal, answer_code
from ..loops import AnyEvent, LoopState, RoundRecord
from ..runtime import Gap, Runtime

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


class EmbeddedTarget:
    # Every loop id a person typed goes through resolve_loop_id: a unique prefix will do
    # (a remote node resolves them itself).
    keeps_running = False

    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime
        self.background: trio.Nursery | None = None  # where code loops run
        self.where = f"embedded node ({runtime.config.store} store in {runtime.config.state_dir})"

    async def start(self, text: str, worker: str | None) -> LoopState:
        return await (await self.rt.start(text, worker=worker)).status()

    async def stop(self, loop_id: str) -> LoopState:
        return await self.rt.handle(await self.rt.resolve_loop_id(loop_id)).stop()

    async def pause(self, loop_id: str) -> LoopState:
        return await self.rt.handle(await self.rt.resolve_loop_id(loop_id)).pause()

    async def resume(self, loop_id: str) -> LoopState:
        return await self.rt.handle(await self.rt.resolve_loop_id(loop_id)).resume()

    async def get(self, loop_id: str) -> LoopState:
        return await self.rt.get(await self.rt.resolve_loop_id(loop_id))

    async def loops(self, *, live_only: bool = False) -> list[LoopState]:
        return await self.rt.loops(live_only=live_only, limit=100)

    async def history(self, loop_id: str) -> list[RoundRecord]:
        return await self.rt.history(await self.rt.resolve_loop_id(loop_id))

    async def code(self, action: str, **fields: Any) -> CodeLoops:
        assert self.background is not None, "set when the session starts"
        request = msgspec.convert({"id": 0, "action": action, **fields}, Code)
        try:
            return await answer_code(request, self.rt, self.background)
        except Refusal as exc:  # the node's wording, here as an error of this session
            raise CodeLoopError(exc.message) from None

    async def events(self) -> AsyncIterator[AnyEvent | Gap]:
        with self.rt.subscribe() as sub:
            async for event in sub:
                yield event


class RemoteTarget:
    keeps_running = True

    def __init__(self, node: NodeClient) -> None:
        self.node = node
        self.where = f"node {node.info.node_id} at {node.url}"

    @property
    def closing_reason(self) -> str | None:
        return self.node.closing_reason

    async def start(self, text: str, worker: str | None) -> LoopState:
        return await self.node.start(text, worker=worker)

    async def stop(self, loop_id: str) -> LoopState:
        return await self.node.stop(loop_id)

    async def pause(self, loop_id: str) -> LoopState:
        return await self.node.pause(loop_id)

    async def resume(self, loop_id: str) -> LoopState:
        return await self.node.resume(loop_id)

    async def get(self, loop_id: str) -> LoopState:
        return await self.node.get(loop_id)

    async def loops(self, *, live_only: bool = False) -> list[LoopState]:
        return await self.node.loops(live_only=live_only)

    async def history(self, loop_id: str) -> list[RoundRecord]:
        return (await self.node.history(loop_id, output_head=60)).rounds

    async def code(self, action: str, **fields: Any) -> CodeLoops:
        return await self.node.code(action, **fields)

    async def events(self) -> AsyncIterator[AnyEvent | Gap]:
        async with await self.node.subscribe() as sub:
            async for event in sub:
                yield event
