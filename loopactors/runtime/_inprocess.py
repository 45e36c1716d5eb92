"""The in-process transport (the default): rounds run on worker backends in the node's
process, behind a global concurrency limit and one per worker kind, each timed from the
moment it holds its slots (waiting for a slot is no part of a round's time)."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

import msgspec
import trio

from ..workers import RoundContext, RoundRequest, RoundResult, Worker, parse_worker, run_check
from ._round_transport import RoundRun, RoundTransport
from ._transports import DispatchSettings

__all__ = ["InProcessTransport", "Slots"]

log = logging.getLogger("loopactors.runtime")


class InProcessTransport(RoundTransport):
    """Rounds run in the node's process."""

    def __init__(self, settings: DispatchSettings | None = None) -> None:
        settings = settings or DispatchSettings()
        self._limit = Slots(settings.max_concurrent)
        self._kind_limits = {kind: Slots(n) for kind, n in settings.max_per_kind.items()}
        self._kill_grace = settings.kill_grace
        self._max_output = settings.max_output_bytes
        self._outputs_dir = settings.outputs_dir
        self._workers: dict[str, Worker] = {}
        #: How a waiting round of each worker spec ends (:meth:`start_wait`): one per spec,
        #: so that a round held as a timer holds no object of its own for it.
        self._wait_ends: dict[str, Callable[[RoundRequest, bool], RoundResult | None]] = {}

    def worker(self, spec: str) -> Worker:
        """The backend of a spec, built once."""
        worker = self._workers.get(spec)
        if worker is None:
            worker = self._workers[spec] = parse_worker(spec, kill_grace=self._kill_grace)
        return worker

    def _take_slots_nowait(self, kind_limit: Slots | None) -> bool:
        """Take the global slot and the worker kind's, both or neither."""
        if not self._limit.take_nowait():
            return False
        if kind_limit is not None and not kind_limit.take_nowait():
            self._limit.release()
            return False
        return True

    def run_at_once(self, request: RoundRequest) -> RoundResult | None:
        """Run here a round whose worker answers on the spot (``Worker.run_at_once``, a
        zero-latency scripted worker): no round task, cancel scope or deadline, nothing to
        wait for (see docs/benchmarks.md). ``None``: the round runs in a task, as every
        other does (also when it would have to wait for a concurrency slot, or has an
        ``until`` check to run after it)."""
        worker = self._taskless_worker(request)
        if worker is None:
            return None
        kind_limit = self._kind_limits.get(worker.kind)
        if not self._take_slots_nowait(kind_limit):
            return None  # behind the rounds that wait for a slot
        try:
            result = worker.run_at_once(request)
        except Exception as exc:  # a worker bug must not crash the Dispatcher
            result = RoundResult(status="failed", error=f"{type(exc).__name__}: {exc}")
        finally:  # nobody can have started waiting for a slot meanwhile: no checkpoint
            if kind_limit is not None:
                kind_limit.release()
            self._limit.release()
        return result

    def _taskless_worker(self, request: RoundRequest) -> Worker | None:
        """The worker of a round that may go without a task of its own; ``None`` when it has
        an ``until`` check to run after it, or its worker cannot be built (the round's run
        reports that as the round's failure)."""
        if request.until is not None:
            return None
        try:
            return self.worker(request.worker)
        except Exception:
            return None

    def start_wait(
        self, request: RoundRequest
    ) -> tuple[float, Callable[[RoundRequest, bool], RoundResult | None]] | None:
        """A round whose worker only waits (``Worker.waits_only``, the scripted worker's
        latency) begins now, holding its slots, as data rather than a task; ``None``: it
        runs in a task (also when it would have to wait for a slot, or has an ``until``
        check to run after it)."""
        worker = self._taskless_worker(request)
        if worker is None:
            return None
        wait = worker.waits_only(request)
        kind_limit = self._kind_limits.get(worker.kind)
        if wait is None or not self._take_slots_nowait(kind_limit):
            return None
        delay, answer_of = wait
        end = self._wait_ends.get(request.worker)
        if end is None:
            bounded = self._bounded if worker.bounds_output else None

            def end(request: RoundRequest, answer: bool) -> RoundResult | None:
                if kind_limit is not None:
                    kind_limit.release()
                self._limit.release()
                if not answer:
                    return None
                try:
                    return answer_of(request if bounded is None else bounded(request))
                except Exception as exc:  # a worker bug must not crash the Dispatcher
                    return RoundResult(status="failed", error=f"{type(exc).__name__}: {exc}")

            self._wait_ends[request.worker] = end
        return delay, end

    async def run(self, request: RoundRequest, run: RoundRun) -> RoundResult | None:
        worker = self.worker(request.worker)
        kind_limit = self._kind_limits.get(worker.kind)
        # Free slots are taken at once, and the round begins (its deadline set) now.
        slots_held = self._take_slots_nowait(kind_limit)
        if slots_held:
            run.begin(trio.current_time(), time.monotonic())
        else:
            await self._limit.take()
        try:
            if kind_limit is not None and not slots_held:
                await kind_limit.take()
            try:
                if not slots_held:
                    run.begin(trio.current_time(), time.monotonic())
                context = run.context(request)
                if worker.bounds_output:
                    request = self._bounded(request)
                return await self._checked(worker, request, context, run.scope)
            finally:
                if kind_limit is not None:
                    kind_limit.release()
        finally:
            self._limit.release()

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

    def _bounded(self, request: RoundRequest) -> RoundRequest:
        whole_at = None
        if self._outputs_dir is not None:
            whole_at = str(self._outputs_dir / request.loop_id / f"{request.round}.txt")
        return msgspec.structs.replace(
            request, max_output_bytes=self._max_output, whole_output_at=whole_at
        )


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
