"""Answers to the requests that do not touch a connection's own state. Errors become frames.

Every request but ``subscribe``/``unsubscribe`` (which belong to their connection) is answered
here from the runtime; :func:`error_frame` turns what any of them raised into the protocol's
error frame with its stable code.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

import msgspec

from ..errors import (
    ActorNotRunning,
    AdmissionRefused,
    CallFailed,
    CallTimeout,
    CodeLoopError,
    CodeLoopNotFound,
    ConfigError,
    InvalidRequest,
    LoopNotFound,
    LoopSyntaxError,
    ReplayError,
    WorkerSpecError,
)
from ..loops import LoopState, RoundRecord, output_heads, shown
from ..runtime import breaker_standing
from ._errors import Refusal
from ._protocol import (
    Error,
    ErrorCode,
    Hello,
    History,
    LoopStatus,
    Output,
    Pause,
    Ping,
    Pong,
    Replay,
    RequestId,
    Resume,
    Rounds,
    Start,
    Statistics,
    Status,
    Stop,
)

if TYPE_CHECKING:
    from ._gateway import Gateway

__all__ = ["answer", "error_frame", "headed", "is_refusal", "kind_of"]

#: Start options a client may not set: fields of ``start`` itself, or not for the wire.
_RESERVED_OPTIONS = frozenset({"loop", "worker", "loop_id", "parent_id"})

#: The requests whose ``loop_id`` names an existing loop (``start`` chooses a new one).
_TAKES_A_LOOP_ID = (Status, Stop, Pause, Resume, History, Output, Replay)

#: What each error means on the wire (the first match wins); anything else is ``internal``.
_CODES: tuple[tuple[tuple[type[Exception], ...], ErrorCode], ...] = (
    ((InvalidRequest,), "invalid_request"),
    ((LoopNotFound, CodeLoopNotFound), "not_found"),
    (
        (
            CodeLoopError,
            LoopSyntaxError,
            WorkerSpecError,
            AdmissionRefused,
            ConfigError,
            ReplayError,
        ),
        "rejected",
    ),
    ((ActorNotRunning, CallFailed, CallTimeout), "unavailable"),
)


async def answer(request: Any, gateway: Gateway) -> Any:
    """The ``ok`` data of ``request``, or an exception for :func:`error_frame`."""
    rt = gateway.runtime
    settings = gateway.settings
    if isinstance(request, History) and request.output_head < 0:  # bad input before lookup
        raise Refusal("invalid_request", f"output_head must be >= 0, got {request.output_head}")
    if isinstance(request, _TAKES_A_LOOP_ID) and request.loop_id is not None:
        # The whole id or any unique prefix of it (docs/protocol.md).
        request = msgspec.structs.replace(
            request, loop_id=await rt.resolve_loop_id(request.loop_id)
        )
    if isinstance(request, Status):
        head = _check_head(request.output_head)
        if request.loop_id is not None:
            return LoopStatus(loops=[headed(await rt.get(request.loop_id), head)])
        limit = settings.default_status_loops if request.limit is None else request.limit
        if not 1 <= limit <= settings.max_status_loops:
            raise Refusal(
                "invalid_request",
                f"limit must be from 1 to {settings.max_status_loops}, got {limit}",
            )
        after = _cursor(request.after) if request.after is not None else None
        loops = await rt.loops(live_only=request.live_only, limit=limit + 1, after=after)
        page = loops[:limit]
        more = len(loops) > limit
        return LoopStatus(
            loops=[headed(state, head) for state in page],
            next=f"{page[-1].created_at!r}/{page[-1].loop_id}" if more else None,
        )
    if isinstance(request, Ping):
        return Pong(time=time.time())
    if isinstance(request, Start):
        return shown(await _start(request, gateway))
    if isinstance(request, Replay):
        return shown(await _replay(request, gateway))
    if isinstance(request, Stop):
        return shown(await rt.handle(request.loop_id).stop(after_round=request.after_round))
    if isinstance(request, Pause):
        return shown(await rt.handle(request.loop_id).pause())
    if isinstance(request, Resume):
        return shown(await rt.handle(request.loop_id).resume())
    if isinstance(request, History):
        return await _history(request, gateway)
    if isinstance(request, Output):
        return await _output(request, gateway)
    if isinstance(request, Statistics):
        return await gateway.metrics.statistics(gateway)
    if isinstance(request, Hello):
        raise Refusal("invalid_request", "hello was already sent on this connection")
    added = gateway.added.by_type.get(kind_of(request))
    if added is not None:  # a request an application added (gateway.NodeRequest)
        return await added.answer(request, rt, gateway.nursery)
    raise Refusal("unknown_type", f"no handler for {kind_of(request)}")  # pragma: no cover


def error_frame(request_id: RequestId | None, exc: Exception) -> Error:
    if isinstance(exc, Refusal):
        return Error(id=request_id, code=exc.code, message=exc.message)
    for types, code in _CODES:
        if isinstance(exc, types):
            message = _text(exc)
            if code == "unavailable":
                message = f"the runtime could not answer now, try again: {message}"
            return Error(id=request_id, code=code, message=message)
    return Error(id=request_id, code="internal", message=f"internal error: {exc!r}")


def is_refusal(exc: Exception) -> bool:
    """True for an error that answers a request as designed (not a bug to log)."""
    return isinstance(exc, Refusal) or any(isinstance(exc, types) for types, _ in _CODES)


def kind_of(request: Any) -> str:
    return str(type(request).__struct_config__.tag)


async def _start(request: Start, gateway: Gateway) -> Any:
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
    handle = await gateway.runtime.start(
        loop, worker=request.worker, loop_id=request.loop_id, **request.options
    )
    return await handle.status()


async def _replay(request: Replay, gateway: Gateway) -> LoopState:
    reserved = sorted(set(request.options) & _RESERVED_OPTIONS)
    if reserved:
        raise Refusal("invalid_request", f"options may not set {', '.join(reserved)}")
    handle = await gateway.runtime.replay(
        request.loop_id,
        request.round,
        worker=request.worker,
        new_loop_id=request.loop_id_new,
        **request.options,
    )
    return await handle.status()


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
    head = _check_head(request.output_head)
    # Read whole: the breaker's counts compare whole outputs and errors; the answer is cut.
    state, records = await gateway.runtime.recorded(request.loop_id)
    breaker = breaker_standing(state, records, time.time())
    state, rounds = output_heads(state, records, head)
    return Rounds(loop=shown(state), rounds=rounds, breaker=breaker)


async def _output(request: Output, gateway: Gateway) -> RoundRecord:
    return await gateway.runtime.output(request.loop_id, request.round)


def _text(exc: BaseException) -> str:
    # KeyError (LoopNotFound's base) quotes its message in str(); the message is args[0].
    return str(exc.args[0]) if exc.args else str(exc)
