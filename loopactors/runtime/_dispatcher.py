"""The Dispatcher: runs rounds on workers, each in its own cancel scope.

Rounds run as tasks in the Dispatcher's nursery, behind a global concurrency limit and one per
worker kind. Each round's result goes to its loop's runner, looked up by name when the round
ends, so a runner that restarted meanwhile still gets it.

Where a round runs is the transport's business: in process (the default), or on worker
processes behind Redis, which time the round themselves (a remote round counts as queued
for the runner's watchdog until its result arrives).
"""

from __future__ import annotations

import collections
import contextvars
import logging
import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import msgspec
import outcome
import trio

from ..actors import Actor, ErrorReply, Node
from ..transport import InProcessTransport, RemoteTransport, RoundTransport
from ..workers import RoundContext, RoundRequest, RoundResult, Worker, run_check
from ._messages import CancelRound, Dispatch, RoundDone, RoundWhere, WhereIsRound
from ._outputs import cap_output, is_cut, keep_whole
from ._wiring import deliver, runner_name

log = logging.getLogger("loopactors.runtime")

__all__ = ["Dispatcher"]

#: How many not-yet-dispatched cancelled round keys the Dispatcher remembers, and for how
#: long (seconds): a stop overtakes its round's Dispatch by a group commit at most, and a
#: key must not outlive its loop (an id may be used again once the loop is pruned).
CANCELLED_MEMORY = 100_000
CANCELLED_TTL = 600.0

#: Round tasks kept waiting for the next round.
MAX_IDLE_ROUND_TASKS = 1024


class Dispatcher(Actor[Any]):
    uses_nursery = True
    mailbox_size = 16_384

    def __init__(
        self,
        *,
        max_concurrent: int,
        max_per_kind: Mapping[str, int],
        kill_grace: float,
        context_factory: Callable[[Node, str, int], RoundContext] | None = None,
        transport: Callable[[], RoundTransport] = InProcessTransport,
        max_output_bytes: int = 1 << 20,
        outputs_dir: Path | None = None,
    ) -> None:
        """``max_output_bytes``: what is kept of each output (:func:`cap_output`);
        ``outputs_dir``: where an output that was cut is also written whole."""
        self._max_output = max_output_bytes
        self._outputs_dir = outputs_dir
        self._transport = transport()
        made = self._transport
        self._remote = made if isinstance(made, RemoteTransport) else None
        self._limit = Slots(max_concurrent)
        self._kind_limits = {kind: Slots(n) for kind, n in max_per_kind.items()}
        self._kill_grace = kill_grace
        self._context_factory = context_factory
        self._workers: dict[str, Worker] = {}
        self._running: dict[str, trio.CancelScope] = {}
        self._stopping: set[str] = set()  # rounds cancelled on request (not by a timeout)
        self._started: dict[str, float] = {}  # when each running round got its slots
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
            if self._remote is None and message.request.until is None:
                answered = self._answer_at_once(message.request)
                if answered is not None:
                    self.rounds_started += 1
                    await self._finish(message.request, *answered)
                    return None
            scope = trio.CancelScope()
            self._running[key] = scope
            self.rounds_started += 1
            if self._remote is not None:
                self.nursery.start_soon(self._run_remote, message, scope, name=f"round {key}")
            elif self._idle:
                # A task that ran an earlier round takes this one (cheaper than a new task,
                # and fewer objects for the garbage collector), in a fresh copy of the
                # context a new task would get: a round never sees an earlier one's
                # context variables.
                task = self._idle.pop()
                task.context = self._context.copy()
                task.name = f"round {key}"  # as a new task would be named, for task dumps
                trio.lowlevel.reschedule(task, outcome.Value((message, scope)))
            else:
                self.nursery.start_soon(self._round_task, message, scope, name=f"round {key}")
            return None
        if kind is WhereIsRound:
            if message.key not in self._running:
                return RoundWhere()
            started = self._started.get(message.key)
            if started is None:
                return RoundWhere(queued=True)  # waiting for a concurrency slot
            return RoundWhere(running_for=trio.current_time() - started)
        if kind is CancelRound:
            running = self._running.get(message.key)
            if self._remote is not None:
                self._remote.cancel(message.key)
            if running is not None:
                self._stopping.add(message.key)
                running.cancel()
            else:
                now = trio.current_time()
                self._cancelled[message.key] = now
                self._cancelled.move_to_end(message.key)
                cancelled = self._cancelled
                while cancelled and (
                    len(cancelled) > CANCELLED_MEMORY
                    or now - next(iter(cancelled.values())) >= CANCELLED_TTL
                ):
                    cancelled.popitem(last=False)  # the oldest first
            return None
        return ErrorReply(TypeError(f"the dispatcher does not accept {kind.__name__}"))

    async def on_start(self) -> None:
        self._context = contextvars.copy_context()
        await self.nursery.start(self._transport.serve)

    async def on_stop(self, reason: BaseException | None) -> None:
        # Rounds in flight are cancelled (subprocesses get SIGTERM, then SIGKILL); their loops
        # stay in awaiting_worker in the store and are dispatched again on recovery.
        for key, scope in self._running.items():
            self._stopping.add(key)
            scope.cancel()

    def worker(self, spec: str) -> Worker:
        worker = self._workers.get(spec)
        if worker is None:
            worker = self._workers[spec] = self._transport.worker(spec, kill_grace=self._kill_grace)
        return worker

    def _take_slots_nowait(self, kind_limit: Slots | None) -> bool:
        """Take the global slot and the worker kind's, both or neither."""
        if not self._limit.take_nowait():
            return False
        if kind_limit is not None and not kind_limit.take_nowait():
            self._limit.release()
            return False
        return True

    def _answer_at_once(self, request: RoundRequest) -> tuple[RoundResult, float] | None:
        """Run here a round whose worker answers on the spot (``Worker.run_at_once``, a
        zero-latency scripted worker): no round task, cancel scope or deadline, nothing to
        wait for (see docs/benchmarks.md). ``None``: the round runs in a task, as every
        other does (also when it would have to wait for a concurrency slot)."""
        try:
            worker = self.worker(request.worker)
        except Exception:
            return None  # the round task reports it as the round's failure
        kind_limit = self._kind_limits.get(worker.kind)
        if not self._take_slots_nowait(kind_limit):
            return None  # behind the rounds that wait for a slot
        started = time.monotonic()
        try:
            result = worker.run_at_once(request)
        except Exception as exc:  # a worker bug must not crash the Dispatcher
            result = RoundResult(status="failed", error=f"{type(exc).__name__}: {exc}")
        finally:  # nobody can have started waiting for a slot meanwhile: no checkpoint
            if kind_limit is not None:
                kind_limit.release()
            self._limit.release()
        if result is None:
            return None
        return result, time.monotonic() - started

    async def _round_task(self, dispatch: Dispatch, scope: trio.CancelScope) -> None:
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

        job: tuple[Dispatch, trio.CancelScope] | None = (dispatch, scope)
        del dispatch, scope
        while job is not None:
            await self._run(*job)
            job = None
            if len(idle) >= MAX_IDLE_ROUND_TASKS:
                return
            task.context = self._context  # from its next step on; handle() gives it a copy
            idle.append(task)  # handle() hands it a round with reschedule()
            job = await trio.lowlevel.wait_task_rescheduled(abort)

    async def _run(self, dispatch: Dispatch, scope: trio.CancelScope) -> None:
        request = dispatch.request
        key = request.key
        started = time.monotonic()
        result: RoundResult | None = None
        timed_out = False
        try:
            worker = self.worker(request.worker)
            kind_limit = self._kind_limits.get(worker.kind)
            # One cancel scope per round: a stop cancels it, and its deadline is the round
            # timeout, set once the round holds its slots (waiting for a slot is no part of
            # a round's time). Free slots are taken at once, and the deadline is then set
            # before the scope is entered (cheaper than moving it once entered).
            slots_held = self._take_slots_nowait(kind_limit)
            if slots_held:
                self._started[key] = now = trio.current_time()
                scope.deadline = now + dispatch.timeout
            with scope:
                if not slots_held:
                    await self._limit.take()
                try:
                    if kind_limit is not None and not slots_held:
                        await kind_limit.take()
                    try:
                        started = time.monotonic()
                        if not slots_held:
                            self._started[key] = now = trio.current_time()
                            scope.deadline = now + dispatch.timeout
                        context = None
                        if self._context_factory is not None:
                            context = self._context_factory(
                                self.node, request.loop_id, request.round
                            )
                        if worker.bounds_output:
                            request = self._bounded(request)
                        result = await self._checked(worker, request, context, scope)
                    finally:
                        if kind_limit is not None:
                            kind_limit.release()
                finally:
                    self._limit.release()
            if result is None:
                timed_out = not scope.cancel_called or key not in self._stopping
        except Exception as exc:  # a worker bug must not crash the Dispatcher
            result = RoundResult(status="failed", error=f"{type(exc).__name__}: {exc}")
        finally:
            del self._running[key]
            self._started.pop(key, None)
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
        await self._finish(request, result, time.monotonic() - started)

    async def _checked(
        self,
        worker: Worker,
        request: RoundRequest,
        context: RoundContext | None,
        scope: trio.CancelScope,
    ) -> RoundResult:
        """Run the round, then (a completed round of a loop with one) its ``until`` check."""
        result = await worker.run(request, context)
        if request.until is None or result.status != "completed":
            return result
        scope.deadline = math.inf  # the check has a timeout of its own; a stop still ends it
        check = await run_check(
            request.until,
            cwd=worker.workspace_of(request),
            timeout=request.until_timeout,
            kill_grace=self._kill_grace,
            env={
                "LOOPACTORS_LOOP_ID": request.loop_id,
                "LOOPACTORS_ROUND": str(request.round),
                **request.env,
            },
            max_output_bytes=self._max_output,
        )
        return msgspec.structs.replace(result, check=check)

    async def _run_remote(self, dispatch: Dispatch, scope: trio.CancelScope) -> None:
        request = dispatch.request
        result: RoundResult | None = None
        started = time.monotonic()
        try:
            with scope:
                assert self._remote is not None  # only remote rounds come here
                # Cut where the round runs (no whole output is kept there).
                bounded = msgspec.structs.replace(request, max_output_bytes=self._max_output)
                result = await self._remote.run_remote(bounded, dispatch.timeout)
        except Exception as exc:  # a transport bug must not crash the Dispatcher
            result = RoundResult(status="failed", error=f"{type(exc).__name__}: {exc}")
        finally:
            del self._running[request.key]
            self._stopping.discard(request.key)
        if result is None:
            result = RoundResult(status="cancelled", error="round cancelled")
        # The duration measured where the round ran.
        await self._finish(request, result, result.duration or time.monotonic() - started)

    async def _finish(self, request: RoundRequest, result: RoundResult, duration: float) -> None:
        changes: dict[str, Any] = {"duration": duration}
        if len(result.output) * 4 > self._max_output:  # may be too long: check off the loop
            changes["output"] = await trio.to_thread.run_sync(self._cap, request, result.output)
        done = RoundDone(request.loop_id, request.round, msgspec.structs.replace(result, **changes))
        # Nobody there: the loop ended, or its runner is restarting and will dispatch again.
        await deliver(self.node, runner_name(request.loop_id), done)

    def _bounded(self, request: RoundRequest) -> RoundRequest:
        whole_at = None
        if self._outputs_dir is not None:
            whole_at = str(self._outputs_dir / request.loop_id / f"{request.round}.txt")
        return msgspec.structs.replace(
            request, max_output_bytes=self._max_output, whole_output_at=whole_at
        )

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


class Slots:
    """A concurrency limit: ``total`` slots, taken in FIFO order when they are scarce.

    A ``trio.CapacityLimiter`` tracks which task borrows each token; rounds only need a
    count, and this costs a third as much per round.
    """

    __slots__ = ("_waiting", "total", "used")

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0
        self._waiting = trio.lowlevel.ParkingLot()

    def take_nowait(self) -> bool:
        """Take a slot if one is free and nobody waits for one; no checkpoint."""
        if self.used < self.total and not self._waiting:
            self.used += 1
            return True
        return False

    async def take(self) -> None:
        """Take a slot, waiting behind earlier waiters (a checkpoint either way)."""
        if self.take_nowait():
            await trio.lowlevel.checkpoint()
            return
        await self._waiting.park()  # woken by release(), which hands its slot over

    def release(self) -> None:
        if self._waiting:
            self._waiting.unpark()  # the slot passes to the oldest waiter
        else:
            self.used -= 1
