"""Refs, calls and replies: how other tasks reach an actor incarnation.

``ActorRef`` is the address of one incarnation; ``PendingReply`` is a call waiting for its
answer, parked without a checkpoint race (the caller parks only after its message is in the
mailbox). The mailbox loop and the incarnation itself (``_Cell``) live in :mod:`._actor`.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import attrs
import outcome
import trio

from ..errors import ActorNotRunning, CallTimeout, CallToSelf, MailboxFull

if TYPE_CHECKING:
    from ._actor import _Cell

__all__ = ["DEFAULT_MAILBOX_SIZE", "ActorRef", "ActorStatistics", "ErrorReply", "PendingReply"]

M = TypeVar("M")

DEFAULT_MAILBOX_SIZE = 1024


class PendingReply:
    """A call waiting for its reply.

    Handlers normally just return the reply. A handler that must answer later (after a batch
    commit, say) calls :meth:`Actor.defer_reply` and later :meth:`reply` or :meth:`fail` on
    the object it got. If the actor exits first, the caller gets :class:`CallFailed`.
    """

    __slots__ = ("_cell", "_deferred", "_done", "_result", "_task", "message")

    def __init__(self, message: object) -> None:
        self.message = message
        # The caller parks only after its message is in the mailbox; until then a reply is
        # kept in _result (the mailbox may have been full, so the caller was not parked yet).
        self._task: trio.lowlevel.Task | None = None
        self._result: outcome.Outcome[Any] | None = None
        self._done = False
        self._deferred = False
        self._cell: _Cell | None = None

    @property
    def done(self) -> bool:
        """True once answered, or once the caller stopped waiting (timeout or cancellation)."""
        return self._done

    def reply(self, value: object) -> None:
        """Answer the call. Silently dropped if the caller already gave up."""
        self._resolve(outcome.Value(value))

    def fail(self, error: BaseException) -> None:
        """Make the caller's ``call`` raise ``error``."""
        self._resolve(outcome.Error(error))

    def _resolve(self, result: outcome.Outcome[Any]) -> None:
        if self._done:
            return
        self._done = True
        if self._cell is not None and self._cell.deferred is not None:
            self._cell.deferred.discard(self)
        if self._task is None:
            self._result = result
        else:
            trio.lowlevel.reschedule(self._task, result)

    def _abandon(self, _: object) -> trio.lowlevel.Abort:
        # The caller was cancelled (or timed out) while parked: a later reply is dropped.
        self._done = True
        if self._cell is not None and self._cell.deferred is not None:
            self._cell.deferred.discard(self)
        return trio.lowlevel.Abort.SUCCEEDED


@attrs.frozen
class ErrorReply:
    """Return this from a handler to make the caller's ``call`` raise ``error``.

    A handler that *raises* crashes its actor (the supervisor decides what follows); one that
    returns ``ErrorReply`` refuses this one request and goes on serving.
    """

    error: BaseException


@attrs.frozen
class ActorStatistics:
    """A snapshot of one actor incarnation, as returned by :meth:`ActorRef.statistics`."""

    name: str
    alive: bool
    mailbox_capacity: float
    mailbox_used: int
    senders_waiting: int
    deferred_replies: int


_current_task = trio.lowlevel.current_task


def _cast_to_self(cell: _Cell, message: object) -> None:
    if not cell.alive:
        raise ActorNotRunning(f"actor {cell.name!r} is not running")
    if cell.overflow is None:
        cell.overflow = collections.deque()
    limit = max(cell.capacity, DEFAULT_MAILBOX_SIZE)
    if len(cell.overflow) >= limit:
        raise MailboxFull(
            f"actor {cell.name!r} cast to itself {limit} times without handling them; its "
            "self-queue is full"
        )
    cell.overflow.append(message)


class ActorRef(Generic[M]):
    """The address of one actor incarnation (like an Erlang pid).

    ``cast`` sends without waiting for an answer; ``call`` waits for the handler's return
    value. Once the incarnation has exited, both raise :class:`ActorNotRunning`; use a name
    (:meth:`Node.ref`) to follow an actor across restarts.
    """

    __slots__ = ("_cell", "_mailbox")

    def __init__(self, cell: _Cell) -> None:
        self._cell = cell
        self._mailbox = cell.mailbox

    @property
    def name(self) -> str:
        return self._cell.name

    @property
    def alive(self) -> bool:
        return self._cell.alive

    def statistics(self) -> ActorStatistics:
        mailbox = self._mailbox
        return ActorStatistics(
            name=self._cell.name,
            alive=self._cell.alive,
            mailbox_capacity=mailbox.capacity,
            mailbox_used=mailbox.used if self._cell.alive else 0,
            senders_waiting=mailbox.senders_waiting,
            deferred_replies=len(self._cell.deferred or ()),
        )

    def __repr__(self) -> str:
        state = "alive" if self._cell.alive else "exited"
        return f"<ActorRef {self._cell.name!r} {state}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ActorRef) and other._cell is self._cell

    def __hash__(self) -> int:
        return id(self._cell)

    def cast_nowait(self, message: M) -> None:
        """Put ``message`` in the mailbox or raise :class:`MailboxFull`. Never blocks."""
        if self._cell.task is _current_task():
            _cast_to_self(self._cell, message)
            return
        try:
            self._mailbox.put_nowait(message)
        except trio.WouldBlock:
            raise MailboxFull(
                f"mailbox of actor {self._cell.name!r} is full "
                f"({self._cell.capacity} messages); use `await cast(...)` to wait for room"
            ) from None
        except trio.BrokenResourceError:
            raise self._not_running() from None

    async def cast(self, message: M) -> None:
        """Send ``message`` without waiting for it to be handled.

        With room in the mailbox this returns at once *without a schedule point* (so a
        producer can fill the mailbox and the actor can drain it in one batch); when the
        mailbox is full it waits for room, which is the backpressure. An actor casting to its
        own mailbox never blocks: its self-casts go to a self-queue that is handled first,
        in order (Erlang orders messages per sender, and this keeps a busy mailbox from
        starving them).
        """
        cell = self._cell
        if cell.task is _current_task():
            _cast_to_self(cell, message)
            return
        try:
            self._mailbox.put_nowait(message)
        except trio.WouldBlock:
            pass
        except trio.BrokenResourceError:
            raise self._not_running() from None
        else:
            return
        try:
            await self._mailbox.put(message)
        except trio.BrokenResourceError:
            raise self._not_running() from None

    async def call(self, message: M, timeout: float | None = 5.0) -> Any:
        """Send ``message`` and wait for the handler's return value.

        Raises :class:`CallTimeout` after ``timeout`` seconds (``None`` waits as long as the
        actor lives); :class:`CallFailed` if the actor crashes, stops or restarts before it
        replies (the crash is the ``__cause__``); :class:`ActorNotRunning` if it has already
        exited; :class:`CallToSelf` when an actor calls itself.
        """
        cell = self._cell
        if cell.task is trio.lowlevel.current_task():
            raise CallToSelf(
                f"actor {cell.name!r} called itself from its own handler, which would wait "
                "forever; cast to itself or call a helper method directly instead"
            )
        if timeout is None:
            return await self._call(message)
        if not (timeout >= 0):
            raise ValueError(f"call timeout must be >= 0 seconds or None, got {timeout!r}")
        with trio.move_on_after(timeout):
            return await self._call(message)
        raise CallTimeout(
            f"actor {cell.name!r} did not reply within {timeout} s "
            f"(message {type(message).__name__})"
        )

    async def _call(self, message: M) -> Any:
        pending = PendingReply(message)
        try:
            self._mailbox.put_nowait(pending)
        except trio.WouldBlock:
            try:
                await self._mailbox.put(pending)
            except trio.BrokenResourceError:
                raise self._not_running() from None
        except trio.BrokenResourceError:
            raise self._not_running() from None
        if pending._result is not None:
            return pending._result.unwrap()
        pending._task = trio.lowlevel.current_task()
        return await trio.lowlevel.wait_task_rescheduled(pending._abandon)

    def _not_running(self) -> ActorNotRunning:
        reason = self._cell.exit_reason
        why = f" (it crashed: {reason!r})" if reason is not None else ""
        return ActorNotRunning(f"actor {self._cell.name!r} is not running{why}")
