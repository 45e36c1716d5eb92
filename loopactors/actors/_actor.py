"""Actors, their mailboxes, and the refs other tasks use to reach them.

An actor is one trio task that owns a bounded mailbox (see :mod:`._mailbox`) and handles one
message at a time. Each incarnation of an actor has its own :class:`_Cell`; a restart makes a
new cell, so a ref made before the restart reports the old incarnation as exited
(docs/actors.md). Names (see :mod:`._node`) resolve to the live incarnation instead.

The hot path is the mailbox loop in :func:`_message_loop`: it awaits once, then drains what is
already queued with ``take`` (no await), because one await per message costs ~15x more than a
non-blocking receive.
"""

from __future__ import annotations

import abc
import collections
import contextlib
import math
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import outcome
import trio

from ..errors import ActorNotRunning, CallFailed
from ._faults import active_faults
from ._mailbox import EMPTY, Mailbox
from ._ref import DEFAULT_MAILBOX_SIZE, ActorRef, ErrorReply, PendingReply

if TYPE_CHECKING:
    from ._node import Node

__all__ = ["Actor"]

M = TypeVar("M")


class _StopSignal:
    """Wakes an idle actor whose stop was requested; never reaches a handler."""

    __slots__ = ()


_STOP = _StopSignal()


class _CrashSignal:
    """Makes the actor raise ``error`` as if a handler had: fault injection for tests."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


class _Cell:
    """One incarnation of an actor: its mailbox and its liveness."""

    __slots__ = (
        "actor",
        "alive",
        "capacity",
        "current",
        "deferred",
        "dormant",
        "exit_hook",
        "exit_reason",
        "home",
        "killed",
        "mailbox",
        "name",
        "node",
        "overflow",
        "ref",
        "scope",
        "stop_requested",
        "task",
    )

    def __init__(self, name: str, capacity: float, node: Node | None) -> None:
        self.name = name
        self.capacity = capacity
        self.node = node
        self.mailbox = Mailbox(capacity)
        self.alive = True
        self.stop_requested = False
        self.task: trio.lowlevel.Task | None = None
        self.current: PendingReply | None = None
        # Made on first use: most actors never defer a reply nor fill their own mailbox, and
        # an idle actor's size matters when a node holds tens of thousands of them.
        self.deferred: set[PendingReply] | None = None
        # Self-casts that found the mailbox full: an actor never blocks on its own mailbox.
        self.overflow: collections.deque[object] | None = None
        self.exit_reason: BaseException | None = None
        # The scope a hard kill cancels: the actor's nursery while it runs.
        self.scope: trio.CancelScope | None = None
        self.killed = False
        self.actor: Actor[Any] | None = None
        self.ref: ActorRef[Any] = ActorRef(self)
        # For an actor that holds no task while idle (Actor.task_while_idle = False): whether
        # it waits without one now, the nursery its next spell runs in, and run_actor's exit
        # hook, called when the last spell ends it.
        self.dormant = False
        self.home: _Home | None = None
        self.exit_hook: ExitHook | None = None

    def request_stop(self) -> None:
        """Ask the actor to exit after the message it is handling (a graceful stop)."""
        if self.stop_requested or not self.alive:
            return
        self.stop_requested = True
        # With a full mailbox the actor is busy, and its loop checks the flag after each message.
        with contextlib.suppress(trio.WouldBlock, trio.BrokenResourceError):
            self.mailbox.put_nowait(_STOP)

    def kill(self) -> None:
        """Hard stop: cancel whatever the actor is doing, its hooks included."""
        self.killed = True
        if self.scope is not None:
            self.scope.cancel()
        elif self.dormant:
            self.end_dormant("was killed", ran=True)

    def sleep(self) -> None:
        """Wait for the next message without a task (the mailbox is empty): it wakes us."""
        self.dormant = True
        self.overflow = None  # empty now: its deque is made again on the next self-cast
        self.mailbox.sleep(self)

    def wake(self) -> None:
        """A message arrived while we held no task: run a spell in our home nursery."""
        self.dormant = False
        home = self.home
        try:
            if home is not None:
                home.run(self)
                return
        except RuntimeError:  # the nursery is closed: the tree it belonged to is gone
            pass
        self.end_dormant("was cancelled", ran=False)

    def end_dormant(self, how: str, *, ran: bool) -> None:
        """End an incarnation that holds no task now (killed, or its tree cancelled)."""
        if self.mailbox.sleeper is self:
            self.mailbox.sleeper = None
        self.dormant = False
        self.die(None, how)
        hook, self.exit_hook = self.exit_hook, None
        if hook is not None:
            hook(self, None, ran)
        self.actor = None
        self.home = None

    def die(self, reason: BaseException | None, how: str) -> None:
        """Mark the incarnation exited and fail every call still waiting on it.

        Runs without a checkpoint, so no sender can slip a message in between the drain and
        the close.
        """
        if not self.alive:
            return
        self.alive = False
        self.exit_reason = reason
        waiting: list[PendingReply] = []
        mailbox = self.mailbox
        if not mailbox.closed:
            while (message := mailbox.take()) is not EMPTY:
                if type(message) is PendingReply:
                    waiting.append(message)
            mailbox.close()
        if self.overflow:
            waiting.extend(m for m in self.overflow if type(m) is PendingReply)
            self.overflow = None
        if self.current is not None:
            waiting.append(self.current)
            self.current = None
        if self.deferred:
            waiting.extend(self.deferred)
            self.deferred = None
        for pending in waiting:
            error = CallFailed(f"actor {self.name!r} {how} before it replied", reason)
            error.__cause__ = reason
            pending.fail(error)


class Actor(abc.ABC, Generic[M]):
    """Base class for actors: subclass it and implement :meth:`handle`.

    State lives in the instance. A supervisor makes a fresh instance (from the child spec's
    factory) for every restart, so a restart never sees the crashed incarnation's state.
    Inside the hooks ``self.ref`` and ``self.node`` are available, and ``self.nursery`` for
    classes that set ``uses_nursery = True``.

    Hooks, all optional except :meth:`handle`:

    - :meth:`on_start` runs before the first message; the actor counts as started (and the
      supervisor moves on to the next child) only once it returns.
    - :meth:`handle` handles one message; for a ``call`` its return value is the reply. An
      exception crashes this actor only; its supervisor decides what happens next.
    - :meth:`on_drained` runs each time the mailbox has been drained (a batch boundary), the
      place for group commits.
    - :meth:`on_stop` runs after the actor left its message loop (a stop, a crash or
      :meth:`stop`), before its background tasks are cancelled, so it can wind them down.
      It does not run when the actor is hard-killed.
    """

    #: Mailbox capacity used when the child spec does not set one.
    mailbox_size: ClassVar[float] = DEFAULT_MAILBOX_SIZE
    #: Give this actor a nursery for background tasks (``self.nursery``). Off by default:
    #: a nursery costs ~600 bytes per idle actor, which adds up at 10,000 loops.
    uses_nursery: ClassVar[bool] = False
    #: Hold a task (parked on the mailbox) while idle. False: an idle actor is only data
    #: (its instance, cell and mailbox); each message that finds it idle starts a task (a
    #: "spell", in the nursery it was started in) that drains the mailbox and ends. For
    #: actors that mostly wait and are many (a loop's runner): an idle task costs ~5 KB and
    #: a start or recovery of tens of thousands pays for each. Such an actor must be started
    #: by a :class:`Supervisor` (which ends it if its tree is cancelled while it holds no
    #: task), have no nursery, and a mailbox of at least one message.
    task_while_idle: ClassVar[bool] = True

    _cell: _Cell
    _nursery: trio.Nursery

    async def on_start(self) -> None:
        """Called once before the first message."""

    @abc.abstractmethod
    async def handle(self, message: M) -> Any:
        """Handle one message; the return value answers a ``call``."""

    async def on_drained(self) -> None:
        """Called after each batch, when the mailbox is empty (only if overridden)."""

    async def on_stop(self, reason: BaseException | None) -> None:
        """Called on the way out; ``reason`` is the crash, or ``None`` for a normal stop."""

    @property
    def ref(self) -> ActorRef[M]:
        """This incarnation's own ref."""
        return self._cell.ref

    @property
    def name(self) -> str:
        return self._cell.name

    @property
    def node(self) -> Node:
        """The node this actor runs on (for name lookups)."""
        node = self._cell.node
        if node is None:
            raise RuntimeError(f"actor {self._cell.name!r} runs outside a node")
        return node

    @property
    def nursery(self) -> trio.Nursery:
        """A nursery for this actor's background tasks (needs ``uses_nursery = True``).

        They are cancelled when the actor exits; an exception in one crashes the actor.
        """
        nursery: trio.Nursery | None = getattr(self, "_nursery", None)
        if nursery is None:
            raise RuntimeError(
                f"{type(self).__name__} has no nursery; set `uses_nursery = True` on the class"
            )
        return nursery

    @property
    def in_call(self) -> bool:
        """True while handling a message that arrived by ``call`` (a reply is expected)."""
        return self._cell.current is not None

    def stop(self) -> None:
        """Leave the message loop after the current message: a normal exit."""
        self._cell.request_stop()

    def defer_reply(self) -> PendingReply:
        """Answer the call being handled later, through the returned :class:`PendingReply`."""
        cell = self._cell
        pending = cell.current
        if pending is None:
            raise RuntimeError("defer_reply() works only while handling a call")
        pending._deferred = True
        pending._cell = cell
        if cell.deferred is None:
            cell.deferred = set()
        cell.deferred.add(pending)
        return pending


async def _message_loop(cell: _Cell, actor: Actor[Any]) -> bool:
    """Handle messages until a stop; True when, instead, the actor went to sleep without its
    task (``task_while_idle = False`` and nothing queued)."""
    receive = cell.mailbox.get
    take = cell.mailbox.take
    handle = actor.handle
    drained_hook = type(actor).on_drained is not Actor.on_drained
    sleeps = not actor.task_while_idle
    while not cell.stop_requested:
        # The self-queue is filled only by this task (in on_start, a handler or on_drained),
        # so it is looked at before going idle and after each message.
        if cell.overflow:
            message = cell.overflow.popleft()
        elif sleeps:
            message = take()
            if message is EMPTY:
                cell.sleep()  # no checkpoint since take(): no message can slip in between
                return True
        else:
            message = await receive()
        while True:
            kind = type(message)
            if kind is PendingReply:
                await _serve_call(cell, handle, message)  # type: ignore[arg-type]
            elif kind is _StopSignal:
                return False
            elif kind is _CrashSignal:
                raise message.error  # type: ignore[attr-defined]
            else:
                await handle(message)
            if cell.stop_requested:
                return False
            if cell.overflow:
                message = cell.overflow.popleft()  # self-casts first, in order
                continue
            message = take()
            if message is EMPTY:
                break
        if drained_hook:
            await actor.on_drained()
    return False


async def _serve_call(cell: _Cell, handle: Any, pending: PendingReply) -> None:
    cell.current = pending
    result = await handle(pending.message)
    cell.current = None
    if pending._deferred:
        return
    if type(result) is ErrorReply:
        pending._resolve(outcome.Error(result.error))
    else:
        pending._resolve(outcome.Value(result))


def _split_exit(exc: BaseException) -> tuple[BaseException | None, bool]:
    """Classify what ended an actor: (crash cause or None, was it a cancellation)."""
    if isinstance(exc, trio.Cancelled):
        return None, True
    if isinstance(exc, BaseExceptionGroup):
        cancelled, rest = exc.split(trio.Cancelled)
        if rest is None:
            return None, True
        leaves = list(_leaves(rest))
        return (leaves[0] if len(leaves) == 1 else rest), cancelled is not None
    return exc, False


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    found: list[BaseException] = []
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            found.extend(_leaves(exc))
        else:
            found.append(exc)
    return found


class StartFailed(Exception):
    """Internal: carries an on_start failure out of :func:`run_actor`."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(repr(cause))
        self.cause = cause


ExitHook = Callable[["_Cell", "BaseException | None", bool], None]


# `async with` on a stateless null context costs nothing per actor; shared by all of them.
_NO_NURSERY: contextlib.nullcontext[None] = contextlib.nullcontext()


async def run_actor(  # noqa: PLR0915 - one lifecycle, read top to bottom
    actor: Actor[Any],
    cell: _Cell,
    on_exit: ExitHook | None = None,
    task_status: trio.TaskStatus[ActorRef[Any]] = trio.TASK_STATUS_IGNORED,
    scope: trio.CancelScope | None = None,
) -> BaseException | None:
    """Run one incarnation to its end.

    Reports the ref through ``task_status`` once ``on_start`` returned. Returns ``None`` after
    a normal exit or a kill (:meth:`_Cell.kill`) and the crash otherwise; raises
    :class:`StartFailed` when ``on_start`` failed or was killed, and re-raises cancellation
    from outside (after failing pending calls) so that enclosing scopes see it.

    ``on_exit(cell, reason, ran)`` is called last, whatever happened; ``ran`` is false when the
    actor never started or was cancelled from outside (nobody is left to react to it). It is
    a hook rather than a wrapper coroutine because every frame counts in an idle actor.

    ``scope``: the caller's cancel scope, used as this actor's kill switch instead of a
    scope of its own (4-5 us each: a supervisor starting thousands of actors that hold no
    task while idle starts them one after another in one task, under one scope). A kill
    then cancels it: this call absorbs the cancellation, as its own scope would, and the
    caller must leave that scope before its next checkpoint (``scope.cancel_called``).
    """
    if scope is not None and actor.uses_nursery:
        raise ValueError(f"{type(actor).__name__} has a nursery: it needs a scope of its own")
    cell.task = trio.lowlevel.current_task()
    cell.actor = actor
    actor._cell = cell
    faults = active_faults.get()
    if faults is not None:  # off unless a test or `loopactors stress` turned it on
        faults.arm(actor, cell.name)
    crash: BaseException | None = None
    started = ran = stop_hook_ran = slept = False
    if not actor.task_while_idle:
        cell.exit_hook = on_exit
    # No more locals than needed: a parked actor's frame holds them all (10,000 actors).
    lent = scope is not None
    try:
        with trio.CancelScope() if scope is None else contextlib.nullcontext(scope) as scope:  # noqa: PLR1704
            cell.scope = scope  # the kill switch
            if cell.killed:
                scope.cancel()
            nursery_cm = trio.open_nursery() if actor.uses_nursery else _NO_NURSERY
            async with nursery_cm as nursery:
                if nursery is not None:
                    actor._nursery = nursery
                try:
                    await actor.on_start()
                except Exception as exc:
                    cell.die(exc, "failed to start")
                    raise StartFailed(exc) from exc
                started = True
                task_status.started(cell.ref)
                if not actor.task_while_idle:
                    # Only now: until started(), the task runs in the starter's nursery.
                    cell.home = _home_of(trio.lowlevel.current_task().parent_nursery)
                try:
                    slept = await _message_loop(cell, actor) and _still_asleep(cell)
                except Exception as exc:
                    crash = exc
                if not slept:
                    # Pending calls fail now, before on_stop, which may take a while.
                    cell.die(crash, "crashed" if crash is not None else "stopped")
                    # on_stop runs while background tasks still live, so it can wind them
                    # down (a supervisor stops its children here, gracefully, in reverse order).
                    stop_hook_ran = True
                    crash = await _on_stop(actor, crash)
                    if nursery is not None:
                        nursery.cancel_scope.cancel()
        ran = started
    except trio.Cancelled:
        if not (lent and cell.killed and scope is not None and scope.cancel_called):
            cell.die(None, "was cancelled")  # from outside, as below
            raise
        ran = started  # a kill through the lent scope: absorbed, as by a scope of our own
    except BaseException as exc:
        cause, cancelled = _split_exit(exc)
        if isinstance(cause, StartFailed):
            crash = cause.cause
            raise cause from cause.cause
        if cause is None or not isinstance(cause, Exception):
            # Cancellation from outside, KeyboardInterrupt and friends are not crashes.
            cell.die(cause, "was cancelled" if cancelled else "was interrupted")
            raise
        if not started:
            # A background task crashed while on_start ran: that is a failed start.
            crash = cause
            cell.die(cause, "failed to start")
            raise StartFailed(cause) from cause
        # A background task crashed: its nursery has already cancelled everything else.
        crash = crash or cause
        cell.die(crash, "crashed")
        if not stop_hook_ran and not cell.killed:
            with trio.CancelScope() as scope:
                cell.scope = scope
                crash = await _on_stop(actor, crash)
        ran = True
    finally:
        cell.scope = None
        cell.task = None
        if not slept:  # asleep, it lives on as data; its next message starts a _spell
            cell.exit_hook = None
            cell.die(None, "was killed")  # a no-op unless a kill interrupted it
            if on_exit is not None:
                on_exit(cell, crash, ran)
            # Let go of the actor (and the task, above): the cell (kept by its refs) would
            # otherwise hold them in a cycle that only a full garbage collection frees, and
            # a busy node ends thousands of actors a second.
            cell.actor = None
    if not started:
        raise StartFailed(ActorNotRunning(f"actor {cell.name!r} was killed while starting"))
    return crash


def _still_asleep(cell: _Cell) -> bool:
    """After the message loop put the actor to sleep: False if a kill came meanwhile (the
    kill then found a task, so it only cancelled a scope that no checkpoint saw)."""
    if not cell.killed:
        return True
    cell.mailbox.sleeper = None
    cell.dormant = False
    return False


#: Spell tasks kept waiting for the next wake, per home nursery.
MAX_IDLE_SPELL_TASKS = 1024


class _Home:
    """Where actors without a task of their own run their spells: a nursery, and the spell
    tasks idle in it. A wake hands a spell to an idle task (a reschedule, as a parked actor
    is woken) rather than spawning one (~2-3x the cost): rounds of zero-latency loops wake
    their runner twice each."""

    __slots__ = ("__weakref__", "idle", "nursery")

    def __init__(self, nursery: trio.Nursery) -> None:
        self.nursery = nursery
        self.idle: list[trio.lowlevel.Task] = []

    def run(self, cell: _Cell) -> None:
        if self.idle:
            # (Named after the actor it first ran: renaming it at every wake cost more.)
            _reschedule(self.idle.pop(), outcome.Value(cell))
        else:
            self.nursery.start_soon(self._spells, cell, name=cell.name)

    async def _spells(self, cell: _Cell) -> None:
        """Run this spell, then those handed over while this task waits idle (at most
        MAX_IDLE_SPELL_TASKS wait; they end with the nursery)."""
        idle = self.idle
        task = trio.lowlevel.current_task()

        def abort(_: Any) -> trio.lowlevel.Abort:
            idle.remove(task)
            return trio.lowlevel.Abort.SUCCEEDED

        next_cell: _Cell | None = cell
        del cell
        # A kill cancels this scope, and with it the task (absorbed here; the next wake
        # starts another). One scope for the task's life: entering one per spell cost
        # more than the rest of a short spell.
        with trio.CancelScope() as scope:
            # A new task may start in a nursery being cancelled: its first spell looks. A
            # task woken from the idle list was not cancelled while idle (its abort would
            # have taken it off the list), and a cancellation after its wake is met at the
            # spell's first checkpoint, as a parked actor's task meets it.
            fresh = True
            while next_cell is not None:
                await _spell(next_cell, scope, fresh)
                fresh = False
                next_cell = None
                if scope.cancel_called or len(idle) >= MAX_IDLE_SPELL_TASKS:
                    return
                idle.append(task)
                next_cell = await trio.lowlevel.wait_task_rescheduled(abort)


_homes: weakref.WeakKeyDictionary[trio.Nursery, _Home] = weakref.WeakKeyDictionary()


def _home_of(nursery: trio.Nursery | None) -> _Home | None:
    if nursery is None:
        return None
    home = _homes.get(nursery)
    if home is None:
        home = _homes[nursery] = _Home(nursery)
    return home


_reschedule = trio.lowlevel.reschedule


async def _spell(cell: _Cell, scope: trio.CancelScope, fresh: bool = False) -> None:
    """One wake of an actor that holds no task while idle: drain its mailbox in this task,
    then sleep again or, after a stop, a crash or a kill, end the incarnation as
    :func:`run_actor` would (``on_stop``, then the exit hook).

    ``scope`` is the spell task's own (one for the task's life, not one per spell): the
    actor's kill switch while the spell runs. A kill thus ends the task too, which the
    task's owner sees as ``scope.cancel_called``.
    """
    actor = cell.actor
    if actor is None or not cell.alive:
        return
    cell.task = trio.lowlevel.current_task()
    crash: BaseException | None = None
    slept = False
    ran = True
    try:
        if cell.killed:  # killed between the wake and now: as if parked when killed
            return
        if fresh:
            # Its tree cancelled between the wake and now: it ends as a parked task would,
            # without handling the message (a supervisor stopping may have sent it).
            await trio.lowlevel.checkpoint_if_cancelled()
        cell.scope = scope
        try:
            slept = await _message_loop(cell, actor) and _still_asleep(cell)
        except Exception as exc:
            crash = exc
        if not slept:
            cell.die(crash, "crashed" if crash is not None else "stopped")
            crash = await _on_stop(actor, crash)
    except BaseException as exc:
        if not (cell.killed and scope.cancel_called):  # else: a kill, reported as one
            # No nursery: only cancellation from outside and KeyboardInterrupt get here.
            cause, cancelled = _split_exit(exc)
            cell.die(cause, "was cancelled" if cancelled else "was interrupted")
            ran = False
        raise
    finally:
        cell.scope = None
        cell.task = None
        if not slept:
            cell.die(None, "was killed")  # a no-op unless a kill interrupted it
            hook, cell.exit_hook = cell.exit_hook, None
            if hook is not None:
                hook(cell, crash, ran)
            cell.actor = None
            cell.home = None


async def _on_stop(actor: Actor[Any], crash: BaseException | None) -> BaseException | None:
    try:
        await actor.on_stop(crash)
    except Exception as exc:
        return crash or exc
    return crash


def new_cell(name: str, capacity: float | None, node: Node | None, actor: Actor[Any]) -> _Cell:
    size = actor.mailbox_size if capacity is None else capacity
    if not (size == math.inf or (isinstance(size, int) and size >= 0)):
        raise ValueError(f"mailbox size must be an int >= 0 or math.inf, got {size!r}")
    if not actor.task_while_idle:
        if actor.uses_nursery:
            raise ValueError(
                f"{type(actor).__name__} sets task_while_idle = False and uses_nursery = True:"
                " a nursery needs a task to hold it; choose one of them"
            )
        if size < 1:
            raise ValueError(
                f"{type(actor).__name__} sets task_while_idle = False with a mailbox of "
                f"{size}: a message must be queued to wake it; give it room for one"
            )
    return _Cell(name, size, node)
