"""A node request from outside the package, as a third party writes one: its frame, its
reply and its answer, with an error class that carries its own wire code."""

from __future__ import annotations

from typing import Any

import msgspec
import trio

from loopactors.errors import LoopactorsError
from loopactors.runtime import Runtime


class NotFinished(LoopactorsError):
    """The loop has no last word yet."""

    protocol_code = "rejected"


class Tail(
    msgspec.Struct,
    frozen=True,
    kw_only=True,
    tag="tail",
    tag_field="type",
    forbid_unknown_fields=True,
):
    """The last output of a finished loop (its id or a unique prefix of it)."""

    id: int | str
    loop_id: str


class Tailed(msgspec.Struct, frozen=True, kw_only=True):
    loop_id: str
    phase: str
    last_output: str | None


class TailRequest:
    frame = Tail
    reply = Tailed

    async def answer(self, request: Any, runtime: Runtime, background: trio.Nursery) -> Tailed:
        state = await runtime.get(await runtime.resolve_loop_id(request.loop_id))
        if state.phase not in ("complete", "cancelled", "escalated", "error", "interrupted"):
            raise NotFinished(f"loop {state.loop_id} is {state.phase}: no last output yet")
        return Tailed(loop_id=state.loop_id, phase=state.phase, last_output=state.last_output)


TAIL = TailRequest()
