"""One websocket client of the node: handshake, requests, subscriptions, backpressure.

Each connection runs three kinds of task in its own nursery: the reader (frames in, one task
per request being answered), the writer (frames out, in order, what is queued at once in one
write, each write within ``send_timeout``), and one pump per subscription (events from the
runtime's bounded queue to the writer). A client that stops reading fills its subscriptions'
queues, never the loops: the runtime counts what it could not queue and the pump sends that
count as a ``gap`` frame.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, NoReturn

import msgspec
import trio
from trio_websocket import ConnectionClosed, WebSocketConnection

from .. import __version__
from .._util import closed_on_failure
from ..errors import ActorNotRunning, CallFailed, CallTimeout, StoreError
from ..loops import AgentStep, AnyEvent, RoundWaiting
from ..runtime import Changes, Gap, Subscription
from ._answers import answer, error_frame, headed, is_refusal, kind_of
from ._auth import token_matches
from ._errors import Refusal
from ._limits import TokenBucket
from ._protocol import (
    CAPABILITIES,
    MAX_COALESCE,
    MIN_COALESCE,
    PROTOCOL_VERSION,
    STATES_PER_FRAME,
    Closing,
    Error,
    EventFrame,
    GapFrame,
    Hello,
    Limits,
    NodeInfo,
    Ok,
    RequestId,
    States,
    Subscribe,
    Subscribed,
    Unsubscribe,
    Unsubscribed,
)

if TYPE_CHECKING:
    from ._gateway import Gateway

__all__ = ["Connection"]

log = logging.getLogger("loopactors.gateway")

#: Websocket close codes (RFC 6455).
CLOSE_GOING_AWAY = 1001
CLOSE_PROTOCOL_ERROR = 1002
CLOSE_POLICY = 1008
CLOSE_TRY_AGAIN_LATER = 1013

_encode = msgspec.json.Encoder().encode


class _IdOnly(msgspec.Struct):
    """Enough of a bad frame to answer it under its id."""

    id: RequestId | None = None


_decode_id = msgspec.json.Decoder(_IdOnly).decode


def frame_text(frame: msgspec.Struct) -> str:
    return _encode(frame).decode()


#: The events told live but never stored: they have no place in the loop's log.
_LIVE_ONLY = (AgentStep, RoundWaiting)


#: The most queued frames one write sends together (the writer's queue holds 64).
WRITE_BATCH = 64

SendFrames = Callable[[list[str]], Awaitable[None]]


def frames_sender(ws: WebSocketConnection) -> SendFrames:
    """What sends several text frames in one write to the socket: one system call and one
    pass through the stream for a burst of replies or events, where ``send_message`` makes
    one of each per frame (most of the node's CPU per event, docs/benchmarks.md). The frames
    are made by the connection's own wsproto state (so a negotiated extension applies) and
    written under its send lock, as ``send_message`` does; a websocket without those parts
    (another version of trio-websocket) gets one ``send_message`` per frame."""
    proto = getattr(ws, "_wsproto", None)
    lock = getattr(ws, "_stream_lock", None)
    stream = getattr(ws, "_stream", None)
    abort = getattr(ws, "_abort_web_socket", None)
    if proto is None or lock is None or stream is None or abort is None:

        async def one_by_one(texts: list[str]) -> None:
            for text in texts:
                await ws.send_message(text)

        return one_by_one

    from wsproto.events import TextMessage  # noqa: PLC0415 - trio-websocket's own wsproto

    async def batched(texts: list[str]) -> None:
        if len(texts) == 1:
            await ws.send_message(texts[0])
            return
        if ws.closed is not None:
            raise ConnectionClosed(ws.closed)
        data = b"".join(proto.send(TextMessage(data=text)) for text in texts)
        async with lock:
            try:
                await stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                await abort()
                raise ConnectionClosed(ws.closed) from None

    return batched


class Connection:
    def __init__(self, gateway: Gateway, ws: WebSocketConnection, header_token: str | None):
        self.gateway = gateway
        self.ws = ws
        remote = ws.remote
        self.remote = remote if isinstance(remote, str) else f"{remote.address}:{remote.port}"
        self.authenticated = False
        #: Counted by the gateway among the connections still to say hello (not when the
        #: upgrade request carried the right token).
        self.counted_unauthenticated = True
        self.settings = gateway.settings
        self._header_token = header_token
        self._send, self._recv = trio.open_memory_channel[str](64)
        self._subs: dict[str, tuple[Subscription | Changes, trio.CancelScope]] = {}
        #: Event frames sent per subscription, replayed ones included (``unsubscribe``).
        self._delivered: dict[str, int] = {}
        self._sub_ids = itertools.count(1)
        self._inflight = 0
        self._opening = 0  # subscriptions being opened (not in _subs yet)
        self._bucket = TokenBucket(
            self.settings.max_requests_per_second, self.settings.request_burst, trio.current_time()
        )
        self._nursery: trio.Nursery | None = None
        #: The requests this connection answers itself (the rest: ``_answers.answer``).
        self._own: dict[str, Callable[[Any], Awaitable[tuple[Any, Any]]]] = {
            "subscribe": self._subscribe,
            "unsubscribe": self._unsubscribe,
        }

    @property
    def subscriptions(self) -> int:
        return len(self._subs)

    # -- life cycle --------------------------------------------------------------------------

    async def run(self) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._write_loop)
                try:
                    if await self._handshake():
                        nursery.start_soon(self._heartbeat)
                        await self._read_loop()
                except ConnectionClosed:
                    pass
                nursery.cancel_scope.cancel()
        finally:
            for sub, scope in self._subs.values():
                scope.cancel()
                sub.close()
            self._subs.clear()
            self._delivered.clear()

    async def close(self, code: int, reason: str) -> None:
        """Tell the client why, close the websocket, and end this connection's tasks."""
        with trio.move_on_after(2.0) as scope:
            scope.shield = True
            try:
                await self.ws.send_message(frame_text(Closing(reason=reason)))
                await self.ws.aclose(code, reason[:120])
            except ConnectionClosed:
                pass
        if self._nursery is not None:
            self._nursery.cancel_scope.cancel()

    async def _handshake(self) -> bool:
        """Read ``hello`` (within ``hello_timeout``), check the token and the version."""
        settings = self.settings
        if self._header_token is not None and not token_matches(
            self.gateway.token, self._header_token
        ):
            return await self._refuse_auth()
        with trio.move_on_after(settings.hello_timeout):
            message = await self.ws.get_message()
            try:
                hello = self._decode(message)
            except Refusal as exc:
                error = Error(id=_id_of(message), code=exc.code, message=exc.message)
                await self._reply_now(error)
                await self.close(CLOSE_PROTOCOL_ERROR, "the first frame must be hello")
                return False
            if not isinstance(hello, Hello):
                await self._reply_now(
                    Error(
                        id=hello.id,
                        code="hello_required",
                        message=f"the first request must be hello, not {kind_of(hello)}",
                    )
                )
                await self.close(CLOSE_POLICY, "hello required")
                return False
            offered = hello.token if hello.token is not None else self._header_token
            checked = hello.token is not None or self._header_token is None
            if checked and not token_matches(self.gateway.token, offered):
                return await self._refuse_auth(hello.id)
            if hello.protocol != PROTOCOL_VERSION:
                await self._reply_now(
                    Error(
                        id=hello.id,
                        code="unsupported_protocol",
                        message=(
                            f"protocol {hello.protocol} is not spoken here; "
                            f"this node speaks protocol {PROTOCOL_VERSION}"
                        ),
                    )
                )
                await self.close(CLOSE_PROTOCOL_ERROR, "unsupported protocol")
                return False
            self.authenticated = True
            self.gateway.note_authenticated(self, hello.client)
            await self._reply_now(Ok(id=hello.id, data=self._node_info()))
            return True
        await self.close(CLOSE_POLICY, f"no hello within {settings.hello_timeout:g} s")
        return False

    async def _refuse_auth(self, request_id: RequestId | None = None) -> bool:
        # Logged without the token: a log is no place for a secret, even a wrong one.
        self.gateway.admission.notice(
            "unauthorized", f"refused a connection from {self.remote}: wrong or missing token"
        )
        self.gateway.auth_failures += 1
        await self._reply_now(
            Error(id=request_id, code="unauthorized", message="wrong or missing token")
        )
        await self.close(CLOSE_POLICY, "unauthorized")
        return False

    def _node_info(self) -> NodeInfo:
        return NodeInfo(
            protocol=PROTOCOL_VERSION,
            node_id=self.gateway.node_id,
            version=__version__,
            capabilities=[*CAPABILITIES, *self.gateway.added.by_type],
            default_worker=self.gateway.runtime.config.worker,
            # Each limit a client is told is the setting of the same name.
            limits=msgspec.convert(self.settings, Limits, from_attributes=True),
        )

    # -- frames in ---------------------------------------------------------------------------

    async def _read_loop(self) -> NoReturn:
        assert self._nursery is not None
        while True:
            message = await self.ws.get_message()
            self.gateway.requests += 1
            try:
                request = self._admit(message)
            except Refusal as exc:
                self.gateway.rejected_frames += 1
                await self._reply(Error(id=_id_of(message), code=exc.code, message=exc.message))
                continue
            self._inflight += 1
            self._nursery.start_soon(self._answer, request)

    def _admit(self, message: str | bytes) -> Any:
        """The request in ``message`` if this connection may have it answered now."""
        if not self.gateway.accepting:
            raise Refusal(
                "shutting_down",
                "the node is shutting down: this request was not run (loops stay resumable); "
                "reconnect once it is back",
            )
        if not self._bucket.take(trio.current_time()):
            raise Refusal(
                "rate_limited",
                f"more than {self.settings.max_requests_per_second:g} requests per second "
                f"(bursts of {self.settings.request_burst}); slow down",
            )
        request = self._decode(message)
        if self._inflight >= self.settings.max_inflight_requests:
            raise Refusal(
                "too_many_requests",
                f"{self._inflight} requests of this connection are still being answered "
                f"(at most {self.settings.max_inflight_requests}); wait for replies",
            )
        return request

    def _decode(self, message: str | bytes) -> Any:
        if isinstance(message, bytes):
            raise Refusal("bad_frame", "binary frames are not accepted; send JSON text frames")
        if len(message) > self.settings.max_frame_bytes:
            raise Refusal(
                "frame_too_large",
                f"a frame of {len(message)} characters is over the limit of "
                f"{self.settings.max_frame_bytes}",
            )
        try:
            return self.gateway.added.decode(message)
        except msgspec.ValidationError as exc:
            text = str(exc)
            if text.endswith("`$.type`") or "missing required field `type`" in text:
                raise Refusal(
                    "unknown_type",
                    f"{text}; accepted types: {', '.join(self.gateway.added.types)}",
                ) from None
            raise Refusal("invalid_request", text) from None
        except msgspec.DecodeError as exc:
            raise Refusal("bad_json", f"not a JSON object: {exc}") from None
        except RecursionError:
            raise Refusal("bad_json", "the JSON is nested too deeply") from None

    async def _answer(self, request: Any) -> None:
        # Counted until the reply is queued: a client that never reads must meet the cap,
        # not pile up answered requests waiting for room in the writer's queue.
        try:
            frame, after = await self._outcome(request)
            await self._reply(frame)
        finally:
            self._inflight -= 1
        if after is not None:
            after()

    async def _outcome(self, request: Any) -> tuple[Ok | Error, Any]:
        data: Any
        try:
            own = self._own.get(kind_of(request))
            if own is not None:
                data, after = await own(request)
            else:
                data, after = await answer(request, self.gateway), None
            return Ok(id=request.id, data=data), after
        except Exception as exc:
            if not is_refusal(exc):  # a bug must cost one request, never the node
                log.exception("internal error answering %s from %s", kind_of(request), self.remote)
            return error_frame(request.id, exc), None

    async def _subscribe(self, request: Subscribe) -> tuple[Subscribed, Any]:
        if len(self._subs) + self._opening >= self.settings.max_subscriptions:
            raise Refusal(
                "too_many_subscriptions",
                f"this connection already has {len(self._subs) + self._opening} subscriptions "
                f"(at most {self.settings.max_subscriptions}); unsubscribe first",
            )
        self._opening += 1  # counted from here: the awaits below let other requests in
        try:
            return await self._open_subscription(request)
        finally:
            self._opening -= 1

    async def _open_subscription(self, request: Subscribe) -> tuple[Subscribed, Any]:
        if request.replay and request.loop_id is None:
            raise Refusal("invalid_request", "replay needs a loop_id (one loop's stored events)")
        coalesce = request.coalesce
        if coalesce is not None and not MIN_COALESCE <= coalesce <= MAX_COALESCE:
            raise Refusal(
                "invalid_request",
                f"coalesce must be from {MIN_COALESCE:g} to {MAX_COALESCE:g} seconds (or null "
                f"for every event), got {coalesce!r}",
            )
        if request.after and not request.replay:
            raise Refusal(
                "invalid_request",
                "after needs replay: it skips that many of the loop's stored events",
            )
        if request.after < 0:
            raise Refusal("invalid_request", f"after must be 0 or more, got {request.after}")
        if coalesce is not None and request.replay:
            raise Refusal(
                "invalid_request",
                "replay and coalesce do not go together: replay sends a loop's stored events, "
                "coalesce sends states and no events",
            )
        if request.loop_id is not None:  # not_found for an unknown loop; a prefix will do
            loop_id = await self.gateway.runtime.resolve_loop_id(request.loop_id)
            request = msgspec.structs.replace(request, loop_id=loop_id)
        if coalesce is not None:
            return self._open_states(request.loop_id, coalesce)
        # Every loop: those other nodes of a shared store run too (docs/multinode.md).
        sub = self.gateway.runtime.subscribe(
            request.loop_id, queue_size=self.settings.subscriber_queue, cluster=True
        )
        stored: list[AnyEvent] = []
        if request.replay:
            assert request.loop_id is not None
            # Subscribed first, read second: an event is in one or both, never neither.
            with closed_on_failure(sub):
                stored = await self.gateway.runtime.stored_events(request.loop_id)
            if request.after > len(stored):
                sub.close()
                raise Refusal(
                    "invalid_request",
                    f"after {request.after} is past the {len(stored)} events stored for "
                    f"{request.loop_id}",
                )
        sid = f"s{next(self._sub_ids)}"
        scope = trio.CancelScope()
        self._subs[sid] = (sub, scope)
        self._delivered[sid] = 0

        def start_pump() -> None:  # after the reply is queued: no event before "subscribed"
            assert self._nursery is not None
            self._nursery.start_soon(
                self._pump, sid, sub, scope, stored, request.after if request.replay else None
            )

        return Subscribed(subscription=sid, loop_id=request.loop_id), start_pump

    def _open_states(self, loop_id: str | None, interval: float) -> tuple[Subscribed, Any]:
        changes = self.gateway.runtime.changes(loop_id, cluster=True)
        sid = f"s{next(self._sub_ids)}"
        scope = trio.CancelScope()
        self._subs[sid] = (changes, scope)
        self._delivered[sid] = 0

        def start_pump() -> None:  # after the reply is queued, as for events
            assert self._nursery is not None
            self._nursery.start_soon(self._pump_states, sid, changes, scope, interval)

        return Subscribed(subscription=sid, loop_id=loop_id), start_pump

    async def _pump_states(
        self, sid: str, changes: Changes, scope: trio.CancelScope, interval: float
    ) -> None:
        """At most one ``states`` batch per ``interval``: each changed loop once, as it is
        when read (so a loop that changed many times costs one state)."""
        runtime = self.gateway.runtime
        with scope:
            sent_at = -math.inf
            while True:
                await changes.wait()
                await trio.sleep_until(sent_at + interval)
                sent_at = trio.current_time()
                loop_ids = changes.take()
                for first in range(0, len(loop_ids), STATES_PER_FRAME):
                    chunk = loop_ids[first : first + STATES_PER_FRAME]
                    try:
                        states = await runtime.states(chunk)
                    except (ActorNotRunning, CallFailed, CallTimeout, StoreError):
                        # The store is restarting, or waits for disk space: these go with the
                        # next batch, an interval later.
                        changes.mark(loop_ids[first:])
                        break
                    if states:
                        frame = States(subscription=sid, loops=[headed(s, 200) for s in states])
                        await self._send.send(frame_text(frame))
                        self._delivered[sid] += len(states)

    async def _unsubscribe(self, request: Unsubscribe) -> tuple[Unsubscribed, None]:
        entry = self._subs.pop(request.subscription, None)
        if entry is None:
            raise Refusal(
                "not_found",
                f"no subscription {request.subscription!r} on this connection "
                f"(open: {', '.join(self._subs) or 'none'})",
            )
        sub, scope = entry
        scope.cancel()
        sub.close()
        delivered = self._delivered.pop(request.subscription, 0)
        data = Unsubscribed(
            subscription=request.subscription, delivered=delivered, missed=sub.missed
        )
        return data, None

    # -- frames out --------------------------------------------------------------------------

    async def _reply_now(self, frame: Ok | Error) -> None:
        """Answer at once, not through the writer: for the handshake, whose error replies
        must reach the client before the ``closing`` frame that follows them."""
        with contextlib.suppress(ConnectionClosed):
            await self.ws.send_message(frame_text(frame))

    async def _reply(self, frame: Ok | Error) -> None:
        await self._send.send(frame_text(frame))

    async def _pump(
        self,
        sid: str,
        sub: Subscription,
        scope: trio.CancelScope,
        stored: list[AnyEvent],
        after: int | None,
    ) -> None:
        """Send the stored events past ``after``, then the live ones; with ``after`` (a
        replay) each numbered by its place in the loop's log."""
        with scope:
            seq = after
            for event in stored[after or 0 :]:
                if seq is not None:
                    seq += 1
                frame = EventFrame(subscription=sid, event=event, seq=seq)
                await self._send.send(frame_text(frame))
                self._delivered[sid] += 1
            seen = set(stored)
            seq = None if seq is None else len(stored)
            async for item in sub:
                if item in seen:
                    continue
                if isinstance(item, Gap):
                    if seq is not None:  # the missed stored events had their places
                        seq += item.missed - item.unstored
                    self.gateway.gaps += 1
                    self.gateway.events_dropped += item.missed
                    if self.settings.slow_subscriber == "disconnect":
                        log.warning("disconnecting %s: it fell behind its events", self.remote)
                        await self.close(
                            CLOSE_POLICY, f"too slow: missed {item.missed} events of {sid}"
                        )
                        return
                    text = frame_text(GapFrame(subscription=sid, missed=item.missed))
                    await self._send.send(text)
                    continue
                place = None
                if seq is not None and not isinstance(item, _LIVE_ONLY):
                    # Only stored events have a place: a live-only one (an agent step)
                    # counted would make a renewal's after skip stored events never seen.
                    seq += 1
                    place = seq
                frame = EventFrame(subscription=sid, event=item, seq=place)
                await self._send.send(frame_text(frame))
                self._delivered[sid] += 1

    async def _write_loop(self) -> None:
        send = frames_sender(self.ws)
        async for text in self._recv:
            texts = [text]
            # What else is queued already goes in the same write, still in order.
            with contextlib.suppress(trio.WouldBlock, trio.EndOfChannel):
                while len(texts) < WRITE_BATCH:
                    texts.append(self._recv.receive_nowait())
            with trio.move_on_after(self.settings.send_timeout) as scope:
                try:
                    await send(texts)
                except ConnectionClosed:
                    break
            if scope.cancelled_caught:
                log.warning(
                    "disconnecting %s: a frame waited %gs", self.remote, self.settings.send_timeout
                )
                await self.close(CLOSE_POLICY, "too slow to read")
                break
            self.gateway.frames_out += len(texts)
        assert self._nursery is not None
        self._nursery.cancel_scope.cancel()

    async def _heartbeat(self) -> None:
        while True:
            await trio.sleep(self.settings.ping_interval)
            with trio.move_on_after(self.settings.ping_timeout) as scope:
                try:
                    await self.ws.ping()
                except ConnectionClosed:
                    break
            if scope.cancelled_caught:
                log.warning(
                    "closing %s: no pong within %gs", self.remote, self.settings.ping_timeout
                )
                break
        assert self._nursery is not None
        self._nursery.cancel_scope.cancel()


def _id_of(message: str | bytes) -> RequestId | None:
    try:
        return _decode_id(message).id
    except (msgspec.DecodeError, TypeError, RecursionError):
        return None
