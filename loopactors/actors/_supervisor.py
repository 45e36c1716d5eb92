"""Supervisors: restart strategies on trio nurseries (docs/actors.md#supervisors).

A supervisor is itself an actor. Its children run as tasks in its nursery, each inside a
cancel scope of its own (the hard kill). Child exits arrive as messages, so restarts,
dynamic starts and terminations are serialised by the supervisor's mailbox, with no locks.
"""

from __future__ import annotations

import collections
import contextlib
import math
from collections.abc import Sequence
from typing import Any

import msgspec
import trio

from ..errors import ActorError, ChildStartError, RestartIntensityExceeded, SupervisorError
from ._actor import Actor, StartFailed, _Cell, new_cell, run_actor
from ._childspec import (
    DEFAULT_SHUTDOWN,
    STRATEGIES,
    Backoff,
    ChildInfo,
    ChildSpec,
    GetStatistics,
    StartChild,
    StartChildren,
    Strategy,
    SupervisorStatistics,
    TerminateChild,
    WhichChildren,
)
from ._ref import ActorRef, ErrorReply

__all__ = ["Supervisor"]


class _ChildExited(msgspec.Struct, frozen=True):
    child_id: str
    incarnation: int
    reason: BaseException | None


class _RestartDue(msgspec.Struct, frozen=True):
    child_ids: tuple[str, ...]


def _check_mailbox(spec: ChildSpec, actor: Actor[Any]) -> None:
    if isinstance(actor, Supervisor) and spec.mailbox_size is not None:
        raise ValueError(
            f"child {spec.id!r} is a supervisor, whose mailbox is unbounded so that child "
            "exits never wait; leave its mailbox_size unset"
        )


class _Child:
    """A supervisor's record of one child, kept across its incarnations."""

    __slots__ = (
        "cell",
        "dynamic",
        "exited",
        "incarnation",
        "is_supervisor",
        "spec",
        "stopping",
        "supervisor",
    )

    def __init__(self, spec: ChildSpec, supervisor: ActorRef[Any]) -> None:
        self.spec = spec
        self.supervisor = supervisor
        self.cell: _Cell | None = None
        # Made only when a stop waits for the exit; most children never need one.
        self.exited: trio.Event | None = None
        self.incarnation = 0
        self.stopping = False
        self.is_supervisor = False
        self.dynamic = False  # started at run time (StartChild) rather than from the spec list

    @property
    def running(self) -> bool:
        return self.cell is not None

    @property
    def grace(self) -> float:
        if self.spec.shutdown is not None:
            return self.spec.shutdown
        return math.inf if self.is_supervisor else DEFAULT_SHUTDOWN

    def on_exit(self, cell: _Cell, reason: BaseException | None, ran: bool) -> None:
        """run_actor's exit hook (a bound method: cheaper per child than a closure)."""
        if self.spec.name is not None and cell.node is not None:
            cell.node.registry.unregister(self.spec.name, cell)
        if self.cell is not cell:
            return  # cannot happen while the supervisor waits for each exit; be safe anyway
        self.cell = None
        if self.exited is not None:
            self.exited.set()
        if not ran:
            return  # a failed start is reported by _start; a cancelled tree needs no news
        # The supervisor's mailbox is unbounded, so this never waits; it fails only when the
        # supervisor itself is gone, and then nobody needs to hear about this child.
        with contextlib.suppress(ActorError):
            self.supervisor.cast_nowait(_ChildExited(self.spec.id, self.incarnation, reason))


def _start_error(spec: ChildSpec, failure: StartFailed) -> BaseException:
    if isinstance(failure.cause, ActorError):
        return failure.cause  # e.g. NameTaken: clearest as it is
    error = ChildStartError(f"child {spec.id!r} failed to start: {failure.cause!r}", spec.id)
    error.__cause__ = failure.cause
    return error


class _BatchStart:
    """The children of one :class:`StartChildren` request that have not reported yet."""

    __slots__ = ("all_reported", "results", "waiting")

    def __init__(self, results: list[Any]) -> None:
        self.results = results
        self.waiting = 0
        self.all_reported = trio.Event()

    def report(self, index: int, result: ActorRef[Any] | StartFailed) -> None:
        self.results[index] = result
        self.waiting -= 1
        if not self.waiting:
            self.all_reported.set()


class _BatchStatus:
    """The ``task_status`` of one child of a batch: its start is reported to the batch."""

    __slots__ = ("batch", "index")

    def __init__(self, batch: _BatchStart, index: int) -> None:
        self.batch = batch
        self.index = index

    def started(self, value: Any = None) -> None:  # run_actor passes the child's ref
        self.batch.report(self.index, value)


class Supervisor(Actor[Any]):
    """Starts children in order, restarts them by strategy, stops them in reverse order.

    ``strategy``: ``one_for_one`` restarts the failed child alone; ``one_for_all`` stops the
    others (in reverse order) and restarts all; ``rest_for_one`` does that for the failed
    child and those started after it. More than ``max_restarts`` restarts within
    ``max_seconds`` means the problem is not transient: the supervisor stops every child and
    fails to its parent with :class:`RestartIntensityExceeded`, exactly once.
    """

    # Child exits must never wait on the supervisor's own mailbox.
    mailbox_size = math.inf
    # Children run as tasks in the supervisor's nursery.
    uses_nursery = True

    def __init__(
        self,
        children: Sequence[ChildSpec] = (),
        *,
        strategy: Strategy = "one_for_one",
        max_restarts: int = 3,
        max_seconds: float = 5.0,
        backoff: Backoff | None = None,
    ) -> None:
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}; got {strategy!r}")
        if max_restarts < 0 or not (max_seconds > 0):
            raise ValueError(
                f"need max_restarts >= 0 and max_seconds > 0; got {max_restarts}, {max_seconds}"
            )
        ids = [spec.id for spec in children]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise ValueError(f"child ids must be unique; repeated: {', '.join(duplicates)}")
        self.strategy = strategy
        self.max_restarts = max_restarts
        self.max_seconds = max_seconds
        self.backoff = backoff
        self._specs = list(children)
        self._children: dict[str, _Child] = {}
        self._restart_times: collections.deque[float] = collections.deque()
        self._restarts_total = 0
        self._keeping_sleepers = False

    # -- lifecycle -------------------------------------------------------------------------

    async def on_start(self) -> None:
        for spec in self._specs:
            child = _Child(spec, self.ref)
            self._children[spec.id] = child
            try:
                await self._start(child)
            except StartFailed as failure:
                await self._stop_all()
                raise ChildStartError(
                    f"supervisor {self.name!r} could not start child {spec.id!r}: "
                    f"{failure.cause!r}",
                    spec.id,
                ) from failure.cause

    async def on_stop(self, reason: BaseException | None) -> None:
        await self._stop_all()

    async def handle(self, message: Any) -> Any:
        kind = type(message)
        if kind is _ChildExited:
            await self._child_exited(message)
        elif kind is _RestartDue:
            await self._start_group(
                [self._children[i] for i in message.child_ids if i in self._children]
            )
        elif kind is StartChild:
            return await self._start_dynamic(message.spec)
        elif kind is StartChildren:
            return await self._start_dynamic_batch(message.specs)
        elif kind is TerminateChild:
            child = self._children.get(message.child_id)
            if child is None:
                return ErrorReply(
                    SupervisorError(f"supervisor {self.name!r} has no child {message.child_id!r}")
                )
            await self._stop_child(child)
            del self._children[message.child_id]
        elif kind is WhichChildren:
            return [
                ChildInfo(
                    c.spec.id,
                    c.spec.name,
                    c.spec.restart,
                    c.running,
                    c.cell.ref if c.cell is not None else None,
                    c.is_supervisor,
                    max(0, c.incarnation - 1),
                )
                for c in self._children.values()
            ]
        elif kind is GetStatistics:
            running = sum(1 for c in self._children.values() if c.running)
            return SupervisorStatistics(len(self._children), running, self._restarts_total)
        else:
            return ErrorReply(
                TypeError(
                    f"supervisor {self.name!r} got {kind.__name__}; it accepts StartChild, "
                    "TerminateChild, WhichChildren and GetStatistics"
                )
            )
        return None

    # -- starting and stopping children ----------------------------------------------------

    async def _start_dynamic(self, spec: ChildSpec) -> Any:
        if spec.id in self._children:
            return ErrorReply(
                SupervisorError(f"supervisor {self.name!r} already has a child {spec.id!r}")
            )
        child = _Child(spec, self.ref)
        child.dynamic = True
        self._children[spec.id] = child
        try:
            ref = await self._start(child)
        except StartFailed as failure:
            del self._children[spec.id]
            return ErrorReply(_start_error(spec, failure))
        return ref

    async def _start_dynamic_batch(
        self, specs: tuple[ChildSpec, ...]
    ) -> list[ActorRef[Any] | BaseException]:
        """Start several children side by side: every ``on_start`` runs in the same scheduler
        pass, where one ``nursery.start`` after another would take a pass each."""
        results: list[ActorRef[Any] | BaseException | None] = [None] * len(specs)
        batch = _BatchStart(results)
        sleepers: list[tuple[_Child, Actor[Any], _Cell, int]] = []
        for index, spec in enumerate(specs):
            if spec.id in self._children:
                results[index] = SupervisorError(
                    f"supervisor {self.name!r} already has a child {spec.id!r}"
                )
                continue
            child = _Child(spec, self.ref)
            child.dynamic = True
            try:
                actor, cell = self._incarnate(child)
            except StartFailed as failure:
                results[index] = _start_error(spec, failure)
                continue
            self._children[spec.id] = child
            batch.waiting += 1
            if actor.task_while_idle:
                self.nursery.start_soon(
                    self._run_batched, child, actor, cell, batch, index, name=cell.name
                )
            else:
                sleepers.append((child, actor, cell, index))
        if sleepers:
            self.nursery.start_soon(self._run_sleepers, sleepers, batch, name=self.name)
        if batch.waiting:
            await batch.all_reported.wait()
        for index, result in enumerate(results):
            if isinstance(result, StartFailed):
                del self._children[specs[index].id]
                results[index] = _start_error(specs[index], result)
        return results  # type: ignore[return-value]  # every slot is filled by now

    async def _run_batched(
        self,
        child: _Child,
        actor: Actor[Any],
        cell: _Cell,
        batch: _BatchStart,
        index: int,
        *,
        scope: trio.CancelScope | None = None,
    ) -> None:
        try:
            await run_actor(actor, cell, child.on_exit, _BatchStatus(batch, index), scope)
        except StartFailed as failure:
            child.cell = None
            batch.report(index, failure)

    async def _run_sleepers(
        self, sleepers: list[tuple[_Child, Actor[Any], _Cell, int]], batch: _BatchStart
    ) -> None:
        """Start children that hold no task while idle one after another in this one task:
        each returns from :func:`run_actor` once it sleeps, so a task apiece would only be
        spawned to end at once (recovering 50,000 loops spawned 50,000 such tasks). One
        that does not sleep at once (a handler that waits) holds up those after it, not
        their start's outcome. They share one cancel scope, their kill switch while they
        start (a scope each cost 4-5 us): a kill cancels it, and the rest go on in a new one.
        """
        todo = iter(sleepers)
        killed = True
        while killed:
            killed = False
            with trio.CancelScope() as scope:
                for child, actor, cell, index in todo:
                    await self._run_batched(child, actor, cell, batch, index, scope=scope)
                    if scope.cancel_called:
                        killed = True
                        break

    async def _start(self, child: _Child) -> ActorRef[Any]:
        """Start one incarnation and return its ref once its ``on_start`` returned.

        The child may already have exited by then (it may finish its work at once).
        """
        actor, cell = self._incarnate(child)
        try:
            await self.nursery.start(run_actor, actor, cell, child.on_exit, name=cell.name)
        except StartFailed:
            child.cell = None
            raise
        return cell.ref

    def _incarnate(self, child: _Child) -> tuple[Actor[Any], _Cell]:
        """Make the child's next incarnation (actor, cell, registered name), not yet running."""
        spec = child.spec
        node = self._cell.node
        try:
            # Any failure to even create the child (a factory bug, a taken name, a bad
            # mailbox size) is a failed start, handled like an on_start failure.
            actor = spec.factory()
            _check_mailbox(spec, actor)
            name = spec.name or f"{self.name}/{spec.id}"
            cell = new_cell(name, spec.mailbox_size, node, actor)
            if spec.name is not None and node is not None:
                node.registry.register(spec.name, cell)
        except Exception as exc:
            raise StartFailed(exc) from exc
        if not actor.task_while_idle and not self._keeping_sleepers:
            self._keeping_sleepers = True
            self.nursery.start_soon(self._end_sleepers_with_us)
        child.incarnation += 1
        child.is_supervisor = isinstance(actor, Supervisor)
        child.stopping = False
        child.exited = None
        child.cell = cell
        return actor, cell

    async def _end_sleepers_with_us(self) -> None:
        """Children that hold no task while idle (``task_while_idle = False``) are not
        cancelled with this nursery, having no task in it: when it is cancelled (a hard
        kill, or this tree cancelled from outside), they end here, as a cancelled task
        would. A graceful stop has stopped every child before."""
        try:
            await trio.sleep_forever()
        finally:
            for child in self._children.values():
                cell = child.cell
                if cell is not None and cell.dormant:
                    cell.end_dormant("was cancelled", ran=False)

    async def _stop_child(self, child: _Child) -> None:
        """Graceful stop within the child's grace, then hard cancel. Idempotent."""
        cell = child.cell
        if cell is None:
            return
        child.stopping = True
        exited = child.exited = trio.Event()
        cell.request_stop()
        grace = child.grace
        if grace == 0:
            cell.kill()
        elif grace != math.inf:
            with trio.move_on_after(grace):
                await exited.wait()
            cell.kill()
        await exited.wait()

    async def _stop_all(self) -> None:
        for child in reversed(list(self._children.values())):
            await self._stop_child(child)

    # -- failures --------------------------------------------------------------------------

    async def _child_exited(self, message: _ChildExited) -> None:
        child = self._children.get(message.child_id)
        if child is None or child.incarnation != message.incarnation or child.stopping:
            return  # we stopped it ourselves, or it is an older incarnation
        restart = child.spec.restart
        if restart == "temporary" or (restart == "transient" and message.reason is None):
            # A child that will not run again is forgotten if it was started at run time
            # (as OTP's simple_one_for_one does): one child per loop must not pile up.
            if restart == "temporary" or child.dynamic:
                del self._children[message.child_id]
            return
        await self._restart(child, message.reason)

    async def _restart(self, failed: _Child, reason: BaseException | None) -> None:
        now = trio.current_time()
        times = self._restart_times
        times.append(now)
        while times and times[0] < now - self.max_seconds:
            times.popleft()
        if len(times) > self.max_restarts:
            await self._stop_all()
            raise RestartIntensityExceeded(
                f"supervisor {self.name!r} gave up: more than {self.max_restarts} restarts "
                f"within {self.max_seconds} s; last failure was child {failed.spec.id!r}: "
                f"{reason!r}",
                supervisor=self.name,
                child_id=failed.spec.id,
                last_cause=reason,
            ) from reason
        self._restarts_total += 1
        group = self._group(failed)
        for child in reversed(group):
            if child is not failed:
                await self._stop_child(child)
        for child in group:
            if child.spec.restart == "temporary" and child is not failed:
                del self._children[child.spec.id]  # OTP: temporary children are not restarted
        group = [c for c in group if c.spec.id in self._children]
        delay = self.backoff.delay(len(times)) if self.backoff is not None else 0.0
        if delay > 0:
            self.nursery.start_soon(self._restart_later, tuple(c.spec.id for c in group), delay)
        else:
            await self._start_group(group)

    def _group(self, failed: _Child) -> list[_Child]:
        children = list(self._children.values())
        if self.strategy == "one_for_one":
            return [failed]
        if self.strategy == "one_for_all":
            return children
        return children[children.index(failed) :]

    async def _restart_later(self, child_ids: tuple[str, ...], delay: float) -> None:
        await trio.sleep(delay)
        with contextlib.suppress(ActorError):  # the supervisor is stopping: no restart then
            self.ref.cast_nowait(_RestartDue(child_ids))

    async def _start_group(self, group: list[_Child]) -> None:
        for child in group:
            if child.running:
                continue
            try:
                await self._start(child)
            except StartFailed as failure:
                # A failed restart is one more failure of that child: it counts towards the
                # intensity and the strategy decides again, through the same path as a crash.
                # Behind what is already queued, not in the self-queue (handled first): a
                # child whose restart fails because a sibling is down must not starve the
                # messages that bring the sibling back (found by `loopactors stress`).
                self._cell.mailbox.put_nowait(
                    _ChildExited(child.spec.id, child.incarnation, failure.cause)
                )
                return
