"""A Python client of a node: typed methods mirroring the protocol, events as async iterators.

async with connect("ws://127.0.0.1:8765", token=token) as node:
    state = await node.start("|loop:3| review this module")
    async with node.subscribe(state.loop_id) as events:
        async for event in events:
            print(event.note())

``NodeClient`` speaks the one vocabulary of ``loops.LoopControl`` (``start``, ``get``, ``list``,
``history``, ``stop``, ``pause``, ``resume``, ``subscribe``, ``wait``), as an embedded
``Runtime`` does.
"""

from __future__ import annotations

import builtins
import contextlib
import itertools
import os
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import msgspec
import trio
from trio_websocket import (
    ConnectionClosed,
    ConnectionRejected,
    HandshakeError,
    WebSocketConnection,
    connect_websocket_url,
)

from .._util import backoff_delay, former_name
from ..errors import ConnectionLost, RemoteError
from ..loops import LoopControl, LoopFinished, LoopSpec, LoopState, RoundRecord
from ..runtime import Gap
from . import _pong  # noqa: F401 - no Pong after our Close (see the module)
from ._protocol import (
    PROTOCOL_VERSION,
    Closing,
    Error,
    EventFrame,
    GapFrame,
    Hello,
    History,
    LoopOwners,
    LoopStatus,
    NodeInfo,
    NodeStatistics,
    Output,
    Owners,
    Pause,
    Ping,
    Pong,
    Replay,
    Resume,
    Rounds,
    Start,
    States,
    Statistics,
    Status,
    Stop,
    Subscribed,
    Unsubscribe,
    Unsubscribed,
)
from ._subscription import RemoteStates, RemoteSubscription

__all__ = ["NodeClient", "RemoteStates", "RemoteSubscription", "Subscribing", "connect"]

T = TypeVar("T")

#: Environment variable read for the token when ``connect`` is not given one.
TOKEN_ENV = "LOOPACTORS_TOKEN"


class _OkRaw(msgspec.Struct, frozen=True, kw_only=True, tag="ok", tag_field="type"):
    id: int | str
    data: msgspec.Raw


_decode_frame = msgspec.json.Decoder(
    _OkRaw | Error | EventFrame | GapFrame | States | Closing
).decode
_encode = msgspec.json.Encoder().encode


class _Pending:
    __slots__ = ("done", "error", "on_ok", "raw")

    def __init__(self, on_ok: Callable[[msgspec.Raw], None] | None) -> None:
        self.done = trio.Event()
        self.raw: msgspec.Raw | None = None
        self.error: Exception | None = None
        #: Run by the reader as it reads the reply, before it reads the next frame.
        self.on_ok = on_ok


@attrs.define(eq=False, slots=False)
class NodeClient:
    """One connection to a node (made by :func:`connect`)."""

    url: str
    _token: str
    client_name: str = attrs.field(kw_only=True)
    timeout: float = attrs.field(kw_only=True)
    reconnect: bool = attrs.field(kw_only=True)
    max_backoff: float = attrs.field(kw_only=True)
    info: NodeInfo = attrs.field(init=False)
    reconnects: int = attrs.field(init=False, default=0)
    closing_reason: str | None = attrs.field(init=False, default=None)
    _ws: WebSocketConnection | None = attrs.field(init=False, default=None)
    _ids: Iterator[int] = attrs.field(init=False, factory=lambda: itertools.count(1))
    _pending: dict[int | str, _Pending] = attrs.field(init=False, factory=dict)
    _subscriptions: dict[str, RemoteSubscription | RemoteStates] = attrs.field(
        init=False, factory=dict
    )
    _closed: bool = attrs.field(init=False, default=False)
    _connected: trio.Event = attrs.field(init=False, factory=trio.Event)

    def __repr__(self) -> str:
        return f"<NodeClient {self.url}>"  # never the token

    @property
    def connected(self) -> bool:
        return self._ws is not None and self._ws.closed is None

    # -- the protocol's requests ---------------------------------------------------------

    async def ping(self) -> float:
        """The node's wall clock (a round trip proves the node is serving)."""
        pong = await self._request(Ping(id=0), Pong)
        return pong.time

    async def start(
        self,
        loop: str | LoopSpec,
        *,
        worker: str | None = None,
        loop_id: str | None = None,
        **options: Any,
    ) -> LoopState:
        """Start a loop from ``|loop...|`` text or a :class:`LoopSpec`; its first state."""
        if isinstance(loop, LoopSpec):
            request = Start(id=0, spec=loop, worker=worker, loop_id=loop_id, options=options)
        else:
            request = Start(id=0, text=loop, worker=worker, loop_id=loop_id, options=options)
        return await self._request(request, LoopState)

    async def replay(
        self,
        loop_id: str,
        round_number: int,
        *,
        worker: str | None = None,
        new_loop_id: str | None = None,
        **options: Any,
    ) -> LoopState:
        """Run a recorded round again on the node as a new loop (docs/replay.md); its first
        state."""
        request = Replay(
            id=0,
            loop_id=loop_id,
            round=round_number,
            worker=worker,
            loop_id_new=new_loop_id,
            options=options,
        )
        return await self._request(request, LoopState)

    async def stop(self, loop_id: str, *, after_round: bool = False) -> LoopState:
        return await self._request(Stop(id=0, loop_id=loop_id, after_round=after_round), LoopState)

    async def pause(self, loop_id: str) -> LoopState:
        return await self._request(Pause(id=0, loop_id=loop_id), LoopState)

    async def resume(self, loop_id: str) -> LoopState:
        return await self._request(Resume(id=0, loop_id=loop_id), LoopState)

    async def get(self, loop_id: str) -> LoopState:
        """The loop's state; a unique prefix of its id will do (the node resolves it)."""
        status = await self._request(Status(id=0, loop_id=loop_id), LoopStatus)
        return status.loops[0]

    async def list(
        self, *, live_only: bool = False, limit: int | None = None
    ) -> builtins.list[LoopState]:
        """Loops in the node's store, newest first: the first ``limit`` (the node's default
        page if None)."""
        request = Status(id=0, live_only=live_only, limit=limit)
        return (await self._request(request, LoopStatus)).loops

    loops = former_name("NodeClient.loops", list)

    async def loop_pages(
        self, *, live_only: bool = False, page: int | None = None
    ) -> AsyncIterator[builtins.list[LoopState]]:
        """Every loop in the node's store, newest first, one page (``page`` loops, the
        node's default if None) at a time."""
        after: str | None = None
        while True:
            request = Status(id=0, live_only=live_only, limit=page, after=after)
            answer = await self._request(request, LoopStatus)
            yield answer.loops
            if answer.next is None:
                return
            after = answer.next

    async def history(
        self, loop_id: str, *, output_head: int | None = None
    ) -> builtins.list[RoundRecord]:
        """The loop's rounds in order, each output cut to ``output_head`` characters (the
        node's default, 200, if None: a node never sends whole outputs in one frame;
        :meth:`output` fetches one whole)."""
        return (await self.history_reply(loop_id, output_head=output_head)).rounds

    async def history_reply(self, loop_id: str, *, output_head: int | None = None) -> Rounds:
        """The node's whole answer to ``history``: the loop, its rounds (outputs cut as in
        :meth:`history`) and the breaker's standing."""
        request = History(id=0, loop_id=loop_id)
        if output_head is not None:
            request = History(id=0, loop_id=loop_id, output_head=output_head)
        return await self._request(request, Rounds)

    async def recorded(
        self, loop_id: str, *, output_head: int | None = None
    ) -> tuple[LoopState, builtins.list[RoundRecord]]:
        """The loop and its rounds, each output cut to ``output_head`` characters (the
        node's default, 200, if None: a node never sends whole outputs in one frame)."""
        answer = await self.history_reply(loop_id, output_head=output_head)
        return answer.loop, answer.rounds

    async def output(self, loop_id: str, round: int) -> RoundRecord:
        return await self._request(Output(id=0, loop_id=loop_id, round=round), RoundRecord)

    def subscribe(
        self, loop_id: str | None = None, *, replay: bool = False, queue_size: int = 1000
    ) -> Subscribing:
        """Events of one loop, or of every loop (``None``), from now on; with ``replay`` (one
        loop) its stored events first, so none is missed. ``async with node.subscribe(...)
        as events``; ``await node.subscribe(...)`` gives the open subscription itself."""
        return Subscribing(RemoteSubscription(self, loop_id, queue_size, replay=replay))

    async def watch(self, loop_id: str | None = None, *, every: float = 0.5) -> RemoteStates:
        """The latest state of each loop that changed (one loop, or every loop), in batches
        at most ``every`` seconds apart (0.05 to 60): a view of thousands of loops that
        never falls behind. ``async for states in watch``; ``async with`` unsubscribes."""
        watch = RemoteStates(self, loop_id, every, opened_at=await self.ping())
        await self._open(watch)
        return watch

    async def statistics(self) -> NodeStatistics:
        """The node's figures now (loops by phase, rounds, store, connections, actors)."""
        return await self._request(Statistics(id=0), NodeStatistics)

    async def owners(self, loop_ids: Sequence[str]) -> dict[str, str | None] | None:
        """The node incarnation owning each of these loops (None: no node does, it waits to
        be claimed; or no such loop), on a store several nodes share; None on a store of
        the node's own, or from a node that cannot tell (no ``owners`` capability)."""
        if "owners" not in self.info.capabilities:
            return None
        step = self.info.limits.max_status_loops
        found: dict[str, str | None] = {}
        for start in range(0, len(loop_ids), step):
            chunk = list(loop_ids[start : start + step])
            answer = await self._request(Owners(id=0, loop_ids=chunk), LoopOwners)
            if answer.owners is None:
                return None
            found.update(answer.owners)
        return found

    async def request(self, request: msgspec.Struct, reply: type[T]) -> T:
        """A request the node serves besides the protocol's own (``gateway.NodeRequest``,
        such as ``codeloop.code_request(...)``); its ``ok`` data as ``reply``. The id is set
        here."""
        return await self._request(request, reply)

    async def wait(self, loop_id: str) -> LoopState:
        """Wait until the loop is in a terminal phase; its final state."""
        async with self.subscribe(loop_id, replay=True) as events:
            state = await self.get(loop_id)
            while not state.terminal:
                event = await events.__anext__()
                if isinstance(event, (LoopFinished, Gap)):
                    state = await self.get(loop_id)
            return state

    # -- plumbing --------------------------------------------------------------------------

    async def _open(self, sub: RemoteSubscription | RemoteStates) -> None:
        def register(raw: msgspec.Raw) -> None:
            # In the reader, before the frames after the reply: the first events follow it.
            reply = msgspec.json.decode(raw, type=Subscribed)
            sub.subscription = reply.subscription
            if not sub.closed:
                self._subscriptions[reply.subscription] = sub

        await self._request(sub._subscribe_request(), Subscribed, on_ok=register)
        if sub.closed:  # closed while being renewed: the node's side goes too
            with contextlib.suppress(RemoteError, ConnectionLost):
                await self._request(Unsubscribe(id=0, subscription=sub.subscription), Unsubscribed)

    async def _request(
        self,
        request: Any,
        data_type: type[T],
        *,
        on_ok: Callable[[msgspec.Raw], None] | None = None,
    ) -> T:
        ws = self._ws
        if ws is None or ws.closed is not None:
            if not self.reconnect or self._closed:
                raise ConnectionLost(f"not connected to {self.url}")
            with trio.move_on_after(self.timeout):
                while (ws := self._ws) is None or ws.closed is not None:
                    if self._connected.is_set():  # the drop is not noticed yet
                        await trio.sleep(0.01)
                    else:
                        await self._connected.wait()
            if ws is None or ws.closed is not None:
                raise ConnectionLost(f"could not reconnect to {self.url} in {self.timeout:g} s")
        request_id = next(self._ids)
        request = msgspec.structs.replace(request, id=request_id)
        pending = self._pending[request_id] = _Pending(on_ok)
        try:
            try:
                await ws.send_message(_encode(request).decode())
            except ConnectionClosed:
                raise ConnectionLost(f"the connection to {self.url} closed") from None
            with trio.move_on_after(self.timeout) as scope:
                await pending.done.wait()
            if scope.cancelled_caught:
                raise ConnectionLost(f"no answer from {self.url} within {self.timeout:g} s")
        finally:
            self._pending.pop(request_id, None)
        if pending.error is not None:
            raise pending.error
        assert pending.raw is not None
        return msgspec.json.decode(pending.raw, type=data_type)

    async def _connection(
        self, *, task_status: trio.TaskStatus[WebSocketConnection] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """One websocket connection, for as long as it lasts, in a nursery of its own.

        trio-websocket runs a connection's reader in the nursery it is given, and that reader
        raises ``ConnectionRejected`` into it when the upgrade is refused (a node answers 503
        while it starts or shuts down): here that costs this attempt, never the client.
        """
        started = unanswered = False
        try:
            async with trio.open_nursery() as nursery:
                # trio-websocket waits for the upgrade's answer without a deadline, even
                # when the server closed the connection without one: never longer than
                # ``timeout`` here, or connecting (and reconnecting) could hang for ever.
                with trio.move_on_after(self.timeout) as opening:
                    ws = await connect_websocket_url(
                        nursery,
                        self.url,
                        max_message_size=64 << 20,
                        # The token in the upgrade request too: a node never counts such a
                        # connection against its cap of connections still to say hello.
                        extra_headers=[(b"authorization", f"Bearer {self._token}".encode())],
                    )
                if opening.cancelled_caught:
                    unanswered = True
                    nursery.cancel_scope.cancel()
                else:
                    started = True
                    task_status.started(ws)
        except BaseExceptionGroup as group:
            matched, rest = group.split(_CONNECT_ERRORS)
            if rest is not None:
                raise
            if not started and matched is not None:
                raise ConnectionLost(
                    f"cannot connect to {self.url}: {_describe(_first(matched))}"
                ) from None
        except _CONNECT_ERRORS as exc:
            if not started:
                raise ConnectionLost(f"cannot connect to {self.url}: {_describe(exc)}") from None
        if unanswered:
            raise ConnectionLost(
                f"cannot connect to {self.url}: no answer to the websocket upgrade "
                f"within {self.timeout:g} s"
            )

    async def _handshake(self, nursery: trio.Nursery) -> None:
        ws: WebSocketConnection = await nursery.start(self._connection)
        hello = Hello(id=0, protocol=PROTOCOL_VERSION, token=self._token, client=self.client_name)
        try:
            with trio.fail_after(self.timeout):
                await ws.send_message(_encode(hello).decode())
                frame = _decode_frame(await ws.get_message())
        except (msgspec.DecodeError, RecursionError):
            await ws.aclose()
            raise ConnectionLost(f"{self.url} does not speak the loopactors protocol") from None
        except ConnectionClosed as exc:
            raise ConnectionLost(f"{self.url} closed the connection: {exc.reason}") from None
        except trio.TooSlowError:
            await ws.aclose()
            raise ConnectionLost(f"no hello answer from {self.url}") from None
        if isinstance(frame, Error):
            await ws.aclose()
            raise RemoteError(frame.code, frame.message)
        if not isinstance(frame, _OkRaw):
            await ws.aclose()
            raise ConnectionLost(f"{self.url} did not answer hello")
        self.info = msgspec.json.decode(frame.data, type=NodeInfo)
        self._ws = ws
        self._connected.set()

    async def _run(self, nursery: trio.Nursery) -> None:
        """Read frames; on a drop, fail what waits and (if asked) reconnect with backoff."""
        while True:
            assert self._ws is not None
            try:
                await self._read(self._ws)
            except ConnectionClosed:
                pass
            except Exception as exc:  # a bug here must end this connection, not the program
                self.closing_reason = f"client error: {exc!r}"
                with trio.move_on_after(2.0):
                    await self._ws.aclose()
            self._connected = trio.Event()
            for pending in self._pending.values():
                pending.error = ConnectionLost(f"the connection to {self.url} closed")
                pending.done.set()
            if self._closed or not self.reconnect:
                for sub in self._subscriptions.values():
                    sub._end()
                return
            await self._reconnect(nursery)

    async def _reconnect(self, nursery: trio.Nursery) -> None:
        tries = 0
        while True:
            if self._closed:
                return
            try:
                await self._handshake(nursery)
                break
            except (ConnectionLost, RemoteError):
                tries += 1
                await trio.sleep(backoff_delay(tries, first=0.05, cap=self.max_backoff))
        self.reconnects += 1
        subs = list(self._subscriptions.values())
        self._subscriptions.clear()
        # Events sent while disconnected are not replayed (history has the rounds); a
        # watch of states reads again what changed meanwhile.
        nursery.start_soon(self._resubscribe, subs)

    async def _resubscribe(self, subs: builtins.list[RemoteSubscription | RemoteStates]) -> None:
        for sub in subs:
            try:
                await self._open(sub)
            except (RemoteError, ConnectionLost):
                sub._end()
        # Every subscription renewed first: a catch-up may read many pages.
        for watch in subs:
            if isinstance(watch, RemoteStates) and watch.subscription in self._subscriptions:
                try:
                    await watch._catch_up()
                except ConnectionLost:
                    pass  # renewed, and caught up again, by the next reconnect
                except RemoteError as exc:  # the node would not answer: the watch ends
                    watch.failure = exc
                    await watch.aclose()

    async def _read(self, ws: WebSocketConnection) -> None:
        while True:
            try:
                frame = _decode_frame(await ws.get_message())
            except (msgspec.DecodeError, RecursionError):
                continue  # a frame this client does not know (a newer node's event type, ...)
            if isinstance(frame, States):
                watch = self._subscriptions.get(frame.subscription)
                if isinstance(watch, RemoteStates):
                    watch._offer_states(frame.loops)
            elif isinstance(frame, EventFrame | GapFrame):
                sub = self._subscriptions.get(frame.subscription)
                if isinstance(sub, RemoteSubscription):
                    if isinstance(frame, EventFrame):
                        sub._offer(frame.event, frame.seq)
                    else:
                        sub._offer(Gap(missed=frame.missed, loop_id=sub.loop_id))
            elif isinstance(frame, Closing):
                self.closing_reason = frame.reason
            else:
                pending = self._pending.get(frame.id) if frame.id is not None else None
                if pending is None:
                    continue  # an answer nobody waits for any more (timed out)
                if isinstance(frame, Error):
                    pending.error = RemoteError.for_code(frame.code, frame.message)
                else:
                    pending.raw = frame.data
                    if pending.on_ok is not None:
                        pending.on_ok(frame.data)
                pending.done.set()

    async def aclose(self) -> None:
        self._closed = True
        if self._ws is not None:
            await self._ws.aclose()


class Subscribing:
    """A subscription about to be opened on the node (:meth:`NodeClient.subscribe`):
    ``async with`` opens it and unsubscribes at the end, ``await`` opens it and returns it
    (then ``async with`` it, or ``aclose()`` it)."""

    __slots__ = ("subscription",)

    def __init__(self, subscription: RemoteSubscription) -> None:
        self.subscription = subscription

    async def _open(self) -> RemoteSubscription:
        await self.subscription.client._open(self.subscription)
        return self.subscription

    def __await__(self) -> Generator[Any, None, RemoteSubscription]:
        return self._open().__await__()

    async def __aenter__(self) -> RemoteSubscription:
        return await self._open()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.subscription.aclose()


if TYPE_CHECKING:  # a node's client speaks the one vocabulary (checked by mypy)
    _control: type[LoopControl] = NodeClient


#: How an attempt to connect can fail (or a connection end, for its reader).
_CONNECT_ERRORS = (OSError, HandshakeError, trio.TooSlowError, ConnectionClosed)


def _first(group: BaseExceptionGroup[BaseException]) -> BaseException:
    leaf = group.exceptions[0]
    return _first(leaf) if isinstance(leaf, BaseExceptionGroup) else leaf


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRejected):  # its str() is a tuple with every header
        body = exc.body.decode("utf-8", "replace").strip() if exc.body else ""
        return f"refused with HTTP {exc.status_code}" + (f": {body}" if body else "")
    return str(exc)


@asynccontextmanager
async def connect(
    url: str,
    *,
    token: str | None = None,
    client_name: str = "loopactors.client",
    timeout: float = 30.0,
    reconnect: bool = False,
    max_backoff: float = 10.0,
) -> AsyncIterator[NodeClient]:
    """Connect to a node for the duration of the block.

    ``token`` defaults to ``$LOOPACTORS_TOKEN``. With ``reconnect`` a dropped connection is
    made again with exponential backoff (up to ``max_backoff`` s between tries) and the
    subscriptions are renewed; requests in flight when it dropped fail with
    :class:`~loopactors.errors.ConnectionLost`, and events sent while it was down are not
    replayed. Without it, a drop ends every subscription with ``ConnectionLost``.

    Raises:
        ConnectionLost: the node cannot be reached, or refuses the upgrade (``503``
            while it starts or shuts down), or answers neither it nor ``hello`` within
            ``timeout`` seconds.
        RemoteError: the node refused the connection (``unauthorized``, ...).
    """
    if token is None:
        token = os.environ.get(TOKEN_ENV)
    if not token:
        raise RemoteError("unauthorized", f"no token given (pass token= or set ${TOKEN_ENV})")
    client = NodeClient(
        url,
        token,
        client_name=client_name,
        timeout=timeout,
        reconnect=reconnect,
        max_backoff=max_backoff,
    )
    # Errors of the block (and of the handshake) are raised outside the nursery, as they
    # are: inside it trio would wrap them in an ExceptionGroup.
    error: BaseException | None = None
    async with trio.open_nursery() as nursery:
        try:
            await client._handshake(nursery)
        except BaseException as exc:
            error = exc
        else:
            nursery.start_soon(client._run, nursery)
            try:
                yield client
            except BaseException as exc:
                error = exc
            finally:
                with trio.CancelScope(shield=True), trio.move_on_after(2.0):
                    await client.aclose()
        # Not cancelled at once: the websocket's reader task closes the socket once the close
        # handshake is over (cancelled earlier, it could leave the socket open).
        client._closed = True
        nursery.cancel_scope.deadline = min(nursery.cancel_scope.deadline, trio.current_time() + 2)
    if error is not None:
        raise error
