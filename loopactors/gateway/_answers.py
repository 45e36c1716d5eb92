"""Answers to the requests that do not touch a connection's own state. Errors become frames.

Every request but ``subscribe``/``unsubscribe`` (which belong to their connection) is answered
through the gateway's table of requests: the protocol's own (:func:`protocol_requests`, one
function each below) and those applications add, alike. :func:`error_frame` turns what any
of them raised into the protocol's error frame, with the code its error class carries.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, cast

import attrs
import msgspec

from ..errors import LoopactorsError
from ..loops import LoopState, RoundRecord, output_heads, shown
from ..runtime import breaker_standing
from ._errors import Refusal
from ._protocol import (
    PROTOCOL_REQUESTS,
    Error,
    ErrorCode,
    History,
    LoopOwners,
    LoopStatus,
    NodeStatistics,
    Output,
    Owners,
    Pause,
    Pong,
    Replay,
    RequestId,
    Resume,
    Rounds,
    Start,
    Status,
    Stop,
)

if TYPE_CHECKING:
    import trio

    from ..runtime import Runtime
    from ._extensions import NodeRequest
    from ._gateway import Gateway

__all__ = ["answer", "error_frame", "headed", "is_refusal", "kind_of", "protocol_requests"]

#: Start options a client may not set: fields of ``start`` itself, or not for the wire.
_RESERVED_OPTIONS = frozenset({"loop", "worker", "loop_id", "parent_id"})

Respond = Callable[[Any, "Gateway"], Awaitable[Any]]


@attrs.frozen
class ProtocolRequest:
    """One of the protocol's own requests as a ``NodeRequest``, like an application's: its
    frame, its reply's data and its answer, which may also read the gateway's settings and
    figures."""

    frame: type[msgspec.Struct]
    reply: type[msgspec.Struct]
    gateway: Gateway
    respond: Respond

    async def answer(self, request: Any, runtime: Runtime, background: trio.Nursery) -> Any:
        return await self.respond(request, self.gateway)


def protocol_requests(gateway: Gateway) -> dict[str, NodeRequest]:
    """The protocol's own requests that ``answer`` serves (``subscribe`` and ``unsubscribe``
    belong to their connection), by type."""
    return {
        kind: ProtocolRequest(frame, reply, gateway, _RESPONSES[kind])
        for frame, reply in PROTOCOL_REQUESTS
        if (kind := str(frame.__struct_config__.tag)) in _RESPONSES
    }


async def answer(request: Any, gateway: Gateway) -> Any:
    """The ``ok`` data of ``request``, or an exception for :func:`error_frame`."""
    served = gateway.served.get(kind_of(request))
    if served is None:  # pragma: no cover - the decoder knows the same types
        raise Refusal("unknown_type", f"no handler for {kind_of(request)}")
    return await served.answer(request, gateway.runtime, gateway.nursery)


def error_frame(request_id: RequestId | None, exc: Exception) -> Error:
    """The error frame of what answering a request raised: a refusal's own code, or the code
    the error's class carries (``LoopactorsError.protocol_code``), else ``internal``."""
    if isinstance(exc, Refusal):
        return Error(id=request_id, code=exc.code, message=exc.message)
    code = _code_of(exc)
    if code is None:
        return Error(id=request_id, code="internal", message=f"internal error: {exc!r}")
    message = _text(exc)
    if code == "unavailable":
        message = f"the runtime could not answer now, try again: {message}"
    return Error(id=request_id, code=code, message=message)


def is_refusal(exc: Exception) -> bool:
    """True for an error that answers a request as designed (not a bug to log)."""
    return isinstance(exc, Refusal) or _code_of(exc) is not None


def _code_of(exc: Exception) -> ErrorCode | None:
    code = exc.protocol_code if isinstance(exc, LoopactorsError) else None
    return cast("ErrorCode | None", code)


def kind_of(request: Any) -> str:
    return str(type(request).__struct_config__.tag)


async def _loop_id(loop_id: str, gateway: Gateway) -> str:
    """The whole id of a loop named by its id or any unique prefix of it (docs/protocol.md)."""
    return await gateway.runtime.resolve_loop_id(loop_id)


async def _status(request: Status, gateway: Gateway) -> LoopStatus:
    rt = gateway.runtime
    settings = gateway.settings
    if request.loop_id is not None:
        # get() takes a prefix too, asking the store to resolve it only when no loop has the
        # whole id given: one call to the Store per request, not two (docs/benchmarks.md).
        state = await rt.get(request.loop_id)
        return LoopStatus(loops=[headed(state, _check_head(request.output_head))])
    head = _check_head(request.output_head)
    limit = settings.default_status_loops if request.limit is None else request.limit
    if not 1 <= limit <= settings.max_status_loops:
        raise Refusal(
            "invalid_request",
            f"limit must be from 1 to {settings.max_status_loops}, got {limit}",
        )
    after = _cursor(request.after) if request.after is not None else None
    loops = await rt.list(live_only=request.live_only, limit=limit + 1, after=after)
    page = loops[:limit]
    more = len(loops) > limit
    return LoopStatus(
        loops=[headed(state, head) for state in page],
        next=f"{page[-1].created_at!r}/{page[-1].loop_id}" if more else None,
    )


async def _owners(request: Owners, gateway: Gateway) -> LoopOwners:
    most = gateway.settings.max_status_loops
    if len(request.loop_ids) > most:
        raise Refusal(
            "invalid_request",
            f"owners takes at most {most} loop ids (max_status_loops), got "
            f"{len(request.loop_ids)}: ask in several requests",
        )
    return LoopOwners(owners=await gateway.runtime.owners(request.loop_ids))


async def _hello(request: Any, gateway: Gateway) -> Any:
    raise Refusal("invalid_request", "hello was already sent on this connection")


async def _ping(request: Any, gateway: Gateway) -> Pong:
    return Pong(time=time.time())


async def _stop(request: Stop, gateway: Gateway) -> LoopState:
    loop_id = await _loop_id(request.loop_id, gateway)
    return shown(await gateway.runtime.stop(loop_id, after_round=request.after_round))


async def _pause(request: Pause, gateway: Gateway) -> LoopState:
    return shown(await gateway.runtime.pause(await _loop_id(request.loop_id, gateway)))


async def _resume(request: Resume, gateway: Gateway) -> LoopState:
    return shown(await gateway.runtime.resume(await _loop_id(request.loop_id, gateway)))


async def _statistics(request: Any, gateway: Gateway) -> NodeStatistics:
    return await gateway.metrics.statistics(gateway)


async def _start(request: Start, gateway: Gateway) -> LoopState:
    if (request.text is None) == (request.spec is None):
        raise Refusal("invalid_request", "start takes exactly one of text (|loop...| text) or spec")
    reserved = sorted(set(request.options) & _RESERVED_OPTIONS)
    if reserved:
        raise Refusal(
            "invalid_request",
            f"options may not set {', '.join(reserved)}: worker and loop_id are fields of "
            "start itself, and a loop started over the wire has no parent",
        )
    loop = request.text if request.text is not None else request.spec
    assert loop is not None
    state = await gateway.runtime.start(
        loop, worker=request.worker, loop_id=request.loop_id, **request.options
    )
    return shown(state)


async def _replay(request: Replay, gateway: Gateway) -> LoopState:
    reserved = sorted(set(request.options) & _RESERVED_OPTIONS)
    if reserved:
        raise Refusal("invalid_request", f"options may not set {', '.join(reserved)}")
    state = await gateway.runtime.replay(
        await _loop_id(request.loop_id, gateway),
        request.round,
        worker=request.worker,
        new_loop_id=request.loop_id_new,
        **request.options,
    )
    return shown(state)


def _cursor(text: str) -> tuple[float, str]:
    """A ``next`` token back: ``CREATED_AT/LOOP_ID``."""
    created, slash, loop_id = text.partition("/")
    try:
        value = float(created)
    except ValueError:
        value = math.nan
    if not slash or not loop_id or not math.isfinite(value):
        raise Refusal(
            "invalid_request",
            f"after must be the next of an earlier status answer, got {text[:80]!r}",
        )
    return value, loop_id


def _check_head(head: int) -> int:
    if head < 0:
        raise Refusal("invalid_request", f"output_head must be >= 0, got {head}")
    return head


def headed(state: LoopState, head: int) -> LoopState:
    """Never a whole output in a status answer: a frame must stay small whatever a worker
    printed (docs/protocol.md); never a notification URL's secrets."""
    return shown(output_heads(state, [], head)[0])


async def _history(request: History, gateway: Gateway) -> Rounds:
    head = _check_head(request.output_head)  # bad input before the lookup
    # Read whole: the breaker's counts compare whole outputs and errors; the answer is cut.
    state, records = await gateway.runtime.recorded(await _loop_id(request.loop_id, gateway))
    breaker = breaker_standing(state, records, time.time())
    state, rounds = output_heads(state, records, head)
    return Rounds(loop=shown(state), rounds=rounds, breaker=breaker)


async def _output(request: Output, gateway: Gateway) -> RoundRecord:
    return await gateway.runtime.output(await _loop_id(request.loop_id, gateway), request.round)


def _text(exc: BaseException) -> str:
    # KeyError (LoopNotFound's base) quotes its message in str(); the message is args[0].
    return str(exc.args[0]) if exc.args else str(exc)


#: How each of the protocol's own requests is answered, by type.
_RESPONSES: dict[str, Respond] = {
    "hello": _hello,
    "ping": _ping,
    "start": _start,
    "replay": _replay,
    "stop": _stop,
    "pause": _pause,
    "resume": _resume,
    "status": _status,
    "history": _history,
    "output": _output,
    "statistics": _statistics,
    "owners": _owners,
}
