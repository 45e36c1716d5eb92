"""The Dispatcher: runs rounds on workers, each in its own cancel scope.

Rounds run as tasks in the Dispatcher's nursery. Each round's result goes to its loop's
runner, looked up by name when the round ends, so a runner that restarted meanwhile still
gets it. A round whose worker only waits before it answers (``Worker.waits_only``, the
scripted worker's latency) is held as data instead: an entry of one heap, ended by one task
when its wait or its timeout is over (a recovery of 50,000 such loops had 50,000 round tasks).

Where a round runs is the transport's business (``_round_transport``): in process (the
default, ``_inprocess``: concurrency limits, a deadline from when the round holds its slots),
or on worker processes behind Redis, which time the round themselves (a round counts as
queued for the runner's watchdog until its transport says it began).
"""

from __future__ import annotations

import collections
import contextvars
import heapq
import itertools
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import msgspec
import outcome
import trio

from ..actors import Actor, ErrorReply, Node
from ..errors import ActorError, MailboxFull
from ..loops import AnyEvent, RoundWaiting, WorkerSpec
from ..workers import RoundContext, RoundRequest, RoundResult
from ._inprocess import InProcessTransport
from ._messages import (
    CancelRound,
    Dispatch,
    RoundDone,
    RoundsRecorded,
    RoundWhere,
    WhereIsRound,
)
from ._outputs import cap_output, is_cut, keep_whole
from ._round_transport import RoundRun, RoundTransport
from ._wiring import deliver, runner_name

log = logging.getLogger("loopactors.runtime")

__all__ = ["Dispatcher"]

#: How many not-yet-dispatched cancelled round keys the Dispatcher remembers, and for how
#: long (seconds): a stop overtakes its round's Dispatch by a group commit at most, and a
#: key must not outlive its loop (an id may be used again once the loop is pruned).
CANCELLED_MEMORY = 100_000
CANCELLED_TTL = 600.0
#: Seconds a round of a transport that knows its workers waits before the Dispatcher looks
#: whether a live worker serves its kind (and between two looks).
UNSERVED_GRACE = 10.0

#: Round tasks kept waiting for the next round.
MAX_IDLE_ROUND_TASKS = 1024


@attrs.define(eq=False)
class _Waiting:
    """A round whose worker only waits (``Worker.waits_only``): no task, only this entry
    of the Dispatcher's heap until it is due (its wait, or its timeout, is over) or
    cancelled. ``began`` is trio time, ``began_at`` monotonic (as a ``RoundRun``'s)."""

    dispatch: Dispatch
    began: float
    began_at: float
    times_out: bool
    #: Lets go what the round holds; with ``True`` its result (``RoundTransport.start_wait``).
    end: Callable[[RoundRequest, bool], RoundResult | None]


class Dispatcher(Actor[Any]):
    uses_nursery = True
    mailbox_size = 16_384

    def __init__(
        self,
        *,
        context_factory: Callable[[Node, str, int], RoundContext] | None = None,
        transport: Callable[[], RoundTransport] = InProcessTransport,
        max_output_bytes: int = 1 << 20,
        outputs_dir: Path | None = None,
        publish: Callable[[AnyEvent], None] | None = None,
        unserved_grace: float | None = None,
    ) -> None:
        """``max_output_bytes``: what is kept of each output (:func:`cap_output`);
        ``outputs_dir``: where an output that was cut is also written whole."""
        self._max_output = max_output_bytes
        self._outputs_dir = outputs_dir
        self._publish = publish
        self._unserved_grace = UNSERVED_GRACE if unserved_grace is None else unserved_grace
        self._transport = transport()
        self._context_factory = context_factory
        self._running: dict[str, RoundRun | _Waiting] = {}
        #: The waiting rounds by when they are due: (due, order, round). A cancelled one
        #: stays until it is due or the heap is rebuilt (``_dropped`` of them in it).
        self._waits: list[tuple[float, int, _Waiting]] = []
        self._waits_order = itertools.count()
        self._waits_changed = trio.Event()
        self._dropped = 0
        self._stopping: set[str] = set()  # rounds cancelled on request (not by a timeout)
        # Keys cancelled before their Dispatch arrived (a stop can overtake the Dispatch,
        # which the Store forwards only once the round's intent is durable).
        self._cancelled: collections.OrderedDict[str, float] = collections.OrderedDict()
        self.rounds_started = 0
        #: Round tasks waiting for their next round, the most recently idle last.
        self._idle: list[trio.lowlevel.Task] = []
        self._context: contextvars.Context  # what a round task starts from (set in on_start)

    async def handle(self, message: Any) -> Any:
        kind = type(message)
        if kind is Dispatch:
            key = message.request.key
            if key in self._running:
                return None  # same idempotency key: the running round will report once
            cancelled_at = self._cancelled.pop(key, None)
            if cancelled_at is not None and trio.current_time() - cancelled_at < CANCELLED_TTL:
                return None
            started = time.monotonic()
            answered = self._transport.run_at_once(message.request)
            if answered is not None:
                self.rounds_started += 1
                await self._finish(message.request, answered, time.monotonic() - started)
                return None
            wait = self._transport.start_wait(message.request)
            if wait is not None:
                self.rounds_started += 1
                self._hold(key, message, *wait, started)
                return None
            run = RoundRun(
                trio.CancelScope(), message.timeout, self._context_factory, self.node, started
            )
            self._running[key] = run
            self.rounds_started += 1
            if self._idle:
                # A task that ran an earlier round takes this one (cheaper than a new task,
                # and fewer objects for the garbage collector), in a fresh copy of the
                # context a new task would get: a round never sees an earlier one's
                # context variables.
                task = self._idle.pop()
                task.context = self._context.copy()
                task.name = f"round {key}"  # as a new task would be named, for task dumps
                trio.lowlevel.reschedule(task, outcome.Value((message, run)))
            else:
                self.nursery.start_soon(self._round_task, message, run, name=f"round {key}")
            return None
        if kind is RoundsRecorded:
            self._transport.recorded(message.keys)
            return None
        if kind is WhereIsRound:
            round_run = self._running.get(message.key)
            if round_run is None:
                return RoundWhere()
            if isinstance(round_run, _Waiting):
                return RoundWhere(running_for=trio.current_time() - round_run.began)
            if round_run.began is None:
                return RoundWhere(queued=True)  # waiting for a slot, or run elsewhere
            return RoundWhere(running_for=trio.current_time() - round_run.began)
        if kind is CancelRound:
            self._cancel(message.key)
            return None
        return ErrorReply(TypeError(f"the dispatcher does not accept {kind.__name__}"))

    def _cancel(self, key: str) -> None:
        """Stop the round with this key: running, waiting, or not dispatched yet."""
        running = self._running.get(key)
        self._transport.cancel(key)
        if isinstance(running, _Waiting):
            self._drop(running)
            request = running.dispatch.request
            running.end(request, False)
            ended = RoundResult(status="cancelled", error="round cancelled")
            self._finish_soon(request, ended, time.monotonic() - running.began_at)
        elif running is not None:
            self._stopping.add(key)
            running.scope.cancel()
        else:
            now = trio.current_time()
            self._cancelled[key] = now
            self._cancelled.move_to_end(key)
            cancelled = self._cancelled
            while cancelled and (
                len(cancelled) > CANCELLED_MEMORY
                or now - next(iter(cancelled.values())) >= CANCELLED_TTL
            ):
                cancelled.popitem(last=False)  # the oldest first

    async def on_start(self) -> None:
        self._context = contextvars.copy_context()
        await self.nursery.start(self._transport.serve)
        self.nursery.start_soon(self._end_waits)

    async def on_stop(self, reason: BaseException | None) -> None:
        # Rounds in flight are cancelled (subprocesses get SIGTERM, then SIGKILL); their loops
        # stay in awaiting_worker in the store and are dispatched again on recovery.
        # Waiting rounds are only data: they go with this actor.
        for key, run in self._running.items():
            if isinstance(run, RoundRun):
                self._stopping.add(key)
                run.scope.cancel()

    def _hold(
        self,
        key: str,
        dispatch: Dispatch,
        wait: float,
        end: Callable[[RoundRequest, bool], RoundResult | None],
        started: float,
    ) -> None:
        """Hold a round that only waits: due when its wait is over, or at its timeout if
        that comes first (as a round task's deadline would end its worker's sleep)."""
        now = trio.current_time()
        times_out = wait >= dispatch.timeout
        due = now + (dispatch.timeout if times_out else wait)
        waiting = _Waiting(dispatch, now, started, times_out, end)
        self._running[key] = waiting
        waits = self._waits
        if not waits or due < waits[0][0]:
            self._waits_changed.set()  # sooner than what _end_waits sleeps until
        heapq.heappush(waits, (due, next(self._waits_order), waiting))

    def _drop(self, waiting: _Waiting) -> None:
        """A waiting round ends before it is due: its heap entry is let go (rebuilt without
        such entries once they are half of it, so they never outnumber the others)."""
        del self._running[waiting.dispatch.request.key]
        self._dropped += 1
        waits = self._waits
        if self._dropped > len(waits) // 2:
            running = self._running
            waits[:] = [w for w in waits if running.get(w[2].dispatch.request.key) is w[2]]
            heapq.heapify(waits)
            self._dropped = 0

    async def _end_waits(self) -> None:
        """End the waiting rounds as they fall due: one task for all of them."""
        waits = self._waits  # rebuilt in place only
        running = self._running
        while True:
            changed = self._waits_changed
            if waits:
                with trio.move_on_at(waits[0][0]):
                    await changed.wait()
            else:
                await changed.wait()
            if changed.is_set():
                self._waits_changed = trio.Event()
            now = trio.current_time()
            while waits and waits[0][0] <= now:
                waiting = heapq.heappop(waits)[2]
                request = waiting.dispatch.request
                if running.get(request.key) is not waiting:
                    self._dropped -= 1  # cancelled (and answered) before it was due
                    continue
                del running[request.key]
                result = waiting.end(request, not waiting.times_out)
                if result is None:
                    result = RoundResult(
                        status="timed_out",
                        error=f"round took longer than its timeout of {waiting.dispatch.timeout} s",
                    )
                duration = result.duration or time.monotonic() - waiting.began_at
                self._finish_soon(request, result, duration)

    async def _round_task(self, dispatch: Dispatch, run: RoundRun) -> None:
        """Run this round, then the ones handed over while it waits idle.

        At most MAX_IDLE_ROUND_TASKS wait: a burst of rounds leaves that many tasks behind at
        most, each a few kilobytes. An idle task keeps nothing of its last round (not its
        request, whose prompt may be large, nor its context variables). They end with the
        Dispatcher.
        """
        idle = self._idle
        task = trio.lowlevel.current_task()

        def abort(_: Any) -> trio.lowlevel.Abort:
            idle.remove(task)
            return trio.lowlevel.Abort.SUCCEEDED

        job: tuple[Dispatch, RoundRun] | None = (dispatch, run)
        del dispatch, run
        while job is not None:
            await self._run(*job)
            job = None
            if len(idle) >= MAX_IDLE_ROUND_TASKS:
                return
            task.context = self._context  # from its next step on; handle() gives it a copy
            idle.append(task)  # handle() hands it a round with reschedule()
            job = await trio.lowlevel.wait_task_rescheduled(abort)

    async def _run(self, dispatch: Dispatch, run: RoundRun) -> None:
        """The one round body, whatever the transport: a stop cancels the round's scope, and
        a transport that times the round here gives the scope its deadline."""
        request = dispatch.request
        key = request.key
        result: RoundResult | None = None
        timed_out = False
        scope = run.scope
        watch = None
        if self._transport.knows_workers and self._publish is not None:
            watch = trio.CancelScope()
            self.nursery.start_soon(self._tell_if_unserved, request, watch)
        try:
            with scope:
                result = await self._transport.run(request, run)
            if result is None:
                timed_out = not scope.cancel_called or key not in self._stopping
        except Exception as exc:  # a worker or transport bug must not crash the Dispatcher
            result = RoundResult(status="failed", error=f"{type(exc).__name__}: {exc}")
        finally:
            if watch is not None:
                watch.cancel()
            del self._running[key]
            self._stopping.discard(key)
        if result is None:
            result = (
                RoundResult(
                    status="timed_out",
                    error=f"round took longer than its timeout of {dispatch.timeout} s",
                )
                if timed_out
                else RoundResult(status="cancelled", error="round cancelled")
            )
        # A duration the transport measured (where the round ran), else this one.
        await self._finish(request, result, result.duration or time.monotonic() - run.began_at)

    async def _tell_if_unserved(self, request: RoundRequest, watch: trio.CancelScope) -> None:
        """A round no live worker can take waits silently on its stream: say so (a live
        ``RoundWaiting``) once it has waited ``unserved_grace`` seconds, and again after a
        worker served its kind and is gone (docs/scale-out.md). Ended by ``watch``."""
        kind = WorkerSpec.parse(request.worker).kind
        told = False
        with watch:
            while True:
                await trio.sleep(self._unserved_grace)
                try:
                    serving = await self._transport.serving(kind)
                except Exception:  # only a note is lost: never the Dispatcher
                    log.exception("cannot tell whether a worker serves %r", kind)
                    return
                if serving is None:
                    continue  # the transport cannot read its workers now (and logs why)
                if not serving and not told and self._publish is not None:
                    reason = (
                        f"no live worker serves {kind!r}; it runs once one does (start one "
                        f"with `loopactors worker --redis URL --kinds {kind}`)"
                    )
                    at = time.time()
                    self._publish(
                        RoundWaiting(
                            loop_id=request.loop_id, at=at, round=request.round, reason=reason
                        )
                    )
                told = not serving

    async def _finish(self, request: RoundRequest, result: RoundResult, duration: float) -> None:
        changes: dict[str, Any] = {"duration": duration}
        if len(result.output) * 4 > self._max_output:  # may be too long: check off the loop
            changes["output"] = await trio.to_thread.run_sync(self._cap, request, result.output)
        done = RoundDone(request.loop_id, request.round, msgspec.structs.replace(result, **changes))
        # Nobody there: the loop ended, or its runner is restarting and will dispatch again.
        await deliver(self.node, runner_name(request.loop_id), done)

    def _finish_soon(self, request: RoundRequest, result: RoundResult, duration: float) -> None:
        """:meth:`_finish` without waiting here: at once if nothing has to be waited for (an
        output to cap off the loop, a full mailbox), else in a task of its own."""
        if len(result.output) * 4 <= self._max_output:
            ref = self.node.whereis(runner_name(request.loop_id))
            if ref is None:
                return  # as in deliver(): nobody needs it
            done = RoundDone(
                request.loop_id, request.round, msgspec.structs.replace(result, duration=duration)
            )
            try:
                ref.cast_nowait(done)
            except MailboxFull:
                pass
            except ActorError:
                return
            else:
                return
        self.nursery.start_soon(self._finish, request, result, duration)

    def _cap(self, request: RoundRequest, output: str) -> str:
        if is_cut(output, self._max_output):  # by the worker, which kept the whole itself
            return output
        kept_at = None
        if self._outputs_dir is not None and len(output.encode("utf-8", "surrogatepass")) > (
            self._max_output
        ):
            kept_at = self._outputs_dir / request.loop_id / f"{request.round}.txt"
            try:
                keep_whole(output, kept_at)
            except OSError as exc:
                log.warning("cannot keep the whole output of %s: %s", request.key, exc)
                kept_at = None
        return cap_output(output, self._max_output, kept_at=kept_at)
