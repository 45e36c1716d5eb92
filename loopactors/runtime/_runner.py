"""The LoopRunner: one actor per live loop, owner of that loop's state machine.

Everything that can change a loop (a round's result, a stop, a pause, a timer) arrives as a
message, so the mailbox serialises it: no lock, no pending queue, no sweeper (rolebox's W6/W7).
Every message that refers to a round carries its number, and every timer an epoch: stale ones
are ignored. Each step is committed before its side effect: the intent to run round k (key
``loop_id:k``) before the Dispatcher hears of it, the round's record together with the next
phase, so a crash at any point resumes from the last commit without losing or repeating a
recorded round.

The module is longer than most on purpose: it is one state machine, and keeping every
transition in one class, read top to bottom, is what makes it checkable.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from typing import Any, Literal

import msgspec
import trio

from ..actors import Actor, ErrorReply
from ..errors import ActorError, ActorNotRunning, CallFailed
from ..loops import (
    AnyEvent,
    LoopFinished,
    LoopInterrupted,
    LoopPaused,
    LoopRecovered,
    LoopResumed,
    LoopState,
    Phase,
    Prompt,
    RoundFinished,
    RoundRecord,
    RoundStatus,
    RoundSummary,
    build_prompt,
    defer_round,
    deferred_wait,
    next_phase,
    no_completed_round,
    normalize_output,
    round_intent,
    stale_rounds_after,
)
from ..storage import Write
from ..workers import RoundRequest, RoundResult, check_worker_spec
from ._ledger import attempt_of
from ._messages import (
    Advance,
    CancelRound,
    CancelTimers,
    CheckRound,
    Commit,
    ControlLoop,
    Dispatch,
    Escalate,
    ForgetLedger,
    Forward,
    GetLoop,
    GetRounds,
    LoopEnded,
    PromptReady,
    RecordAttempt,
    RoundDone,
    RoundWhere,
    Schedule,
    WhereIsRound,
)
from ._wiring import BREAKER, COORDINATOR, DISPATCHER, RunnerDeps, runner_name, services_of

__all__ = ["LoopRunner", "RunnerFactory", "Watchdog"]

#: Extra time past the round timeout before the runner gives up on hearing back (W18).
WATCHDOG_GRACE = 30.0


class Watchdog(msgspec.Struct, gc=False, frozen=True):
    """A runner's watchdog timer went off; ``timer`` tells a superseded one apart."""

    timer: int


#: Watchdog timer ids, unique in the process: a timer a crashed incarnation left pending
#: never passes for one of its successor's.
_TIMER_IDS = itertools.count(1)

#: A loop whose runner crashes this many times within RUNNER_CRASH_WINDOW seconds ends in
#: ``error`` instead of taking its supervisor (and every other loop) down with it.
MAX_RUNNER_RESTARTS = 5
RUNNER_CRASH_WINDOW = 60.0

#: What a runner meets when a runtime service it uses is down or crashed under it: not the
#: loop's fault, so not counted towards MAX_RUNNER_RESTARTS. The service's restart restarts
#: the runners after it anyway (rest_for_one), and recovery resumes the loop.
SERVICE_DOWN = (ActorNotRunning, CallFailed)


class RunnerFactory:
    """Makes the runner of one loop: with its initial state the first time, and then (after
    a crash) with none, so the new incarnation reloads the last committed state. Past
    :data:`MAX_RUNNER_RESTARTS` the new incarnation only ends the loop in ``error``."""

    __slots__ = ("deps", "excused", "initial", "loop_id", "made", "recovered", "restarts")

    def __init__(
        self, loop_id: str, deps: RunnerDeps, initial: LoopState | None, *, recovered: bool
    ) -> None:
        self.loop_id = loop_id
        self.deps = deps
        self.initial = initial
        self.recovered = recovered
        self.restarts: list[float] = []  # when this loop's runner was restarted
        self.made = False
        #: Exits caused by a runtime service being down (SERVICE_DOWN): restarts not counted.
        self.excused = 0

    def __call__(self) -> LoopRunner:
        first, self.made = not self.made, True
        initial, self.initial = self.initial, None
        recovered, self.recovered = self.recovered, True
        runner = LoopRunner(self.loop_id, self.deps, initial, recovered=recovered)
        runner.factory = self
        if self.excused:
            self.excused -= 1
        elif not first:  # every later call is a restart after a crash
            now = trio.current_time()
            self.restarts = [t for t in self.restarts if t > now - RUNNER_CRASH_WINDOW]
            self.restarts.append(now)
            if len(self.restarts) > MAX_RUNNER_RESTARTS:
                runner.give_up = (
                    f"its runner crashed {len(self.restarts)} times within "
                    f"{RUNNER_CRASH_WINDOW:.0f} s"
                )
        return runner


class LoopRunner(Actor[Any]):
    mailbox_size = 64

    def __init__(
        self, loop_id: str, deps: RunnerDeps, initial: LoopState | None, *, recovered: bool
    ) -> None:
        self.loop_id = loop_id
        self.deps = deps
        self.state: LoopState = initial  # type: ignore[assignment]  # set in on_start if None
        self.recovered = recovered
        self.epoch = 0
        self.round_started = 0.0
        self.seed_source: Literal["task", "previous_output"] = "task"
        self._first_round = False
        #: Round summaries for the final event (loaded from the store after a restart).
        self.summary: dict[int, RoundSummary] = {}
        self._unsaved: list[AnyEvent] = []
        #: Set by the factory when this loop's runners keep crashing: end it in error.
        self.give_up: str | None = None
        #: When (trio time) the round in flight has waited too long, and the one watchdog
        #: timer pending with Timers (its deadline and id). A round does not schedule a
        #: timer of its own: the pending one, if it goes off early, is moved to the due time.
        self._watchdog_due = 0.0
        self._timer_at: float | None = None
        self._timer_id = 0  # ids come from _TIMER_IDS: unique across incarnations too
        #: ``state.last_output`` as the no-progress fuse compares it, once computed.
        self._last_normalized: str | None = None
        self.factory: RunnerFactory | None = None

    # -- lifecycle -------------------------------------------------------------------------

    async def on_start(self) -> None:
        try:
            await self._start()
        except SERVICE_DOWN:
            self._excuse()
            raise

    async def on_stop(self, reason: BaseException | None) -> None:
        if isinstance(reason, SERVICE_DOWN):
            self._excuse()
        # Its pending timers (a watchdog, an inter-round delay) would go off for nobody, or,
        # after a crash, for the next incarnation, whose epochs start again at 0. That one
        # registers under this name only once this one has exited, so its own timers are
        # scheduled after this cancellation.
        with contextlib.suppress(ActorError):  # waits only when full; Timers never waits
            await services_of(self.node).timers.cast(CancelTimers(runner_name(self.loop_id)))

    def _excuse(self) -> None:
        if self.factory is not None:
            self.factory.excused += 1

    async def _start(self) -> None:
        self.svc = services_of(self.node)
        if self.state is None or self.recovered:
            # A recovery's snapshot may be stale: the loop's previous runner may have
            # finished it after the snapshot was read, and then a second runner would run
            # its last round again (found by `loopactors stress`). The store has the truth:
            # it applies every write queued before a read.
            state = await self.svc.store.call(GetLoop(self.loop_id), self.deps.call_timeout)
            if state is None:
                self.stop()
                return
            self.state = state
        if self.state.terminal:
            self.svc.coordinator.cast_nowait(LoopEnded(self.state))
            self.stop()
            return
        if self.give_up is not None:
            if self.state.phase == "awaiting_worker":
                await self.svc.dispatcher.cast(CancelRound(self._key))
            await self._finish(
                "error", record=self._unfinished_round("failed"), reason=self.give_up
            )
            return
        if self.recovered and self.state.phase != "activating":
            # The rounds so far, for the summary the loop's final event carries.
            rounds: list[RoundRecord] = await self.svc.store.call(
                GetRounds(self.loop_id), self.deps.call_timeout
            )
            self.summary = {r.round: _summary(r) for r in rounds}
        self.ref.cast_nowait(Advance(self.epoch))

    async def handle(self, message: Any) -> Any:
        kind = type(message)
        state = self.state
        if kind is PromptReady:
            if message.epoch == self.epoch and state.phase == "dispatching":
                await self._dispatch_round(message.prompt)
        elif kind is RoundDone:
            if state.phase == "awaiting_worker" and message.round == state.round:
                await self._round_done(message.result)
        elif kind is Advance:
            if message.epoch == self.epoch and not state.terminal:
                await self._step()
        elif kind is Escalate:
            if message.epoch == self.epoch and state.phase == "dispatching":
                verdict = message.verdict
                await self._finish("escalated", reason=verdict.reason, trigger=verdict.trigger)
        elif kind is Watchdog:
            if message.timer == self._timer_id:
                self._timer_at = None
                if state.phase == "awaiting_worker":
                    if trio.current_time() < self._watchdog_due:
                        # Early: it was armed for an earlier round. Wait for this one's.
                        await self._schedule_watchdog(self._watchdog_due)
                    else:
                        await self._watchdog_fired()
        elif kind is ControlLoop:
            return await self._control(message)
        else:
            return ErrorReply(TypeError(f"a loop runner does not accept {kind.__name__}"))
        return None

    def _unfinished_round(self, status: RoundStatus) -> RoundRecord | None:
        """The record that closes a round left in flight when the loop ends without it."""
        if self.state.phase != "awaiting_worker":
            return None
        return RoundRecord(
            loop_id=self.loop_id,
            round=self.state.round,
            status=status,
            error="the loop ended while this round was in flight",
        )

    async def _watchdog_fired(self) -> None:
        """No result within the round timeout plus a grace: is the round still somewhere?

        Queued for a slot, or running for less than its timeout, it gets more time; lost
        (the Dispatcher does not know it) or overdue, it is cancelled and timed out (W18).
        """
        spec = self.state.spec
        where: RoundWhere = await self.svc.dispatcher.call(
            WhereIsRound(self._key), self.deps.call_timeout
        )
        if where.queued:
            await self._arm_watchdog()
            return
        budget = spec.round_timeout + WATCHDOG_GRACE
        if where.running_for is not None and where.running_for < budget:
            await self._arm_watchdog(budget - where.running_for)
            return
        await self.svc.dispatcher.cast(CancelRound(self._key))
        await self._round_done(
            RoundResult(
                status="timed_out",
                error="no result reached the loop within the round timeout plus "
                f"{WATCHDOG_GRACE:.0f} s; the round was cancelled",
                duration=time.time() - self.round_started,
            )
        )

    @property
    def _key(self) -> str:
        return f"{self.loop_id}:{self.state.round}"

    # -- driving the loop ------------------------------------------------------------------
    #
    # One round is a pipeline of casts: runner -> Breaker -> ContextBuilder -> runner (prompt) ->
    # Store (intent, durable) -> Dispatcher -> worker -> runner (result) -> Store. The runner
    # wakes twice per round and never waits on a reply; the Store performs the side effect
    # that must follow a commit (dispatching the round, publishing its events) only once the
    # commit is durable.

    async def _step(self) -> None:
        """Take the next step from the committed phase; also how a recovered loop resumes."""
        phase = self.state.phase
        recovered, self.recovered = self.recovered, False
        if recovered:
            problem = worker_problem(
                self.state.spec.worker, self.deps.kill_grace, here=not self.deps.remote_workers
            )
            if problem is not None:
                # The one case a loop cannot resume: say so at once (rolebox's W19).
                await self._finish(
                    "interrupted",
                    record=self._unfinished_round("cancelled"),
                    reason=problem,
                    events=(interrupted_event(self.state, problem),),
                )
                return
            if phase != "activating":
                self._unsaved.append(
                    LoopRecovered(
                        loop_id=self.loop_id, at=time.time(), phase=phase, round=self.state.round
                    )
                )
        if phase in ("activating", "dispatching"):
            await self._prepare_round()
        elif phase == "awaiting_worker":
            # Dispatched before the restart: dispatch again under the same key. The store
            # upserts the round by key, so it is recorded once whichever run reports.
            self.round_started = time.time()
            prompt = build_prompt(self.state)
            self.seed_source = prompt.seed_source
            await self.svc.dispatcher.cast(self._dispatch_message(prompt))
            await self._arm_watchdog()
            if self._unsaved:
                await self._commit(self.state)
        elif phase in ("summarizing", "finalizing"):
            await self._decide((), None)
        elif self._unsaved:  # paused: nothing to do until resume, but log the recovery
            await self._commit(self.state)

    async def _prepare_round(self) -> None:
        """Ask the Breaker about the next round; it goes on to the ContextBuilder if all is well."""
        state = self.state
        now = time.time()
        wait = deferred_wait(state, now)
        if wait is not None:
            # A usage limit holds this round back (also after a crash): wake at its reset.
            self.epoch += 1
            await self._schedule(trio.current_time() + wait, Advance(self.epoch))
            return
        if state.phase == "activating":
            state = state.moved("dispatching")
        # Round 1 is prepared until its intent commits, which announces the loop (also
        # after a pause before round 1, or a restart).
        self._first_round = state.round == 1
        if not state.started_at:
            state = msgspec.structs.replace(state, started_at=now)
        self.state = state  # in memory only: committed with the round's intent
        self.epoch += 1
        await self.svc.breaker.cast(CheckRound(state, now, self.epoch))

    async def _dispatch_round(self, prompt: Prompt) -> None:
        state = self.state
        now = time.time()
        record, events = round_intent(state, prompt, now, first=self._first_round)
        self._first_round = False
        self.round_started = now
        self.seed_source = prompt.seed_source
        # The Store dispatches the round once its intent is durable.
        dispatch = Forward(DISPATCHER, self._dispatch_message(prompt))
        running = state.moved("awaiting_worker", deferred_until=None, defer_reason=None)
        await self._commit(running, record, events, then=(dispatch,))
        await self._arm_watchdog()

    def _dispatch_message(self, prompt: Prompt) -> Dispatch:
        state = self.state
        spec = state.spec
        request = RoundRequest(
            loop_id=self.loop_id,
            round=state.round,
            rounds=spec.rounds,
            mode=spec.mode,
            prompt=prompt.text,
            task=spec.task,
            worker=spec.worker,
            objective=spec.objective,
            session=state.agent_session if spec.mode == "inherit" else None,
        )
        return Dispatch(request, spec.round_timeout)

    async def _arm_watchdog(self, after: float | None = None) -> None:
        """(Re)arm the watchdog of the round in flight: it goes off ``after`` seconds from now.

        A timer already pending that goes off no later is kept (when it goes off before the
        round is due, it is moved to the due time), so a loop whose rounds finish in time
        has one timer pending, not one per round.
        """
        self.epoch += 1
        if after is None:
            after = self.state.spec.round_timeout + WATCHDOG_GRACE
        due = self._watchdog_due = trio.current_time() + after
        if self._timer_at is None or self._timer_at > due:
            await self._schedule_watchdog(due)

    async def _schedule_watchdog(self, deadline: float) -> None:
        self._timer_id = next(_TIMER_IDS)  # the timer pending until now, if any, is superseded
        self._timer_at = deadline
        await self._schedule(deadline, Watchdog(self._timer_id))

    async def _schedule(self, deadline: float, message: Watchdog | Advance) -> None:
        # Waits only when the Timers mailbox is full (a burst of starts): backpressure, where
        # cast_nowait would crash this runner and, repeated, end its loop in error.
        await self.svc.timers.cast(Schedule(deadline, runner_name(self.loop_id), message))

    async def _round_done(self, result: RoundResult) -> None:
        state = self.state
        status = result.status
        if status == "deferred":
            await self._round_deferred(result)
            return
        if status == "cancelled":
            # Nobody here asked for it (a stop finishes the loop before the result comes).
            status = "failed"
        record = RoundRecord(
            loop_id=self.loop_id,
            round=state.round,
            status=status,
            seed_source=self.seed_source,
            output=result.output,
            error=result.error if status != "completed" else None,
            tokens=result.tokens,
            started_at=self.round_started,
            duration=result.duration,
            transcript=result.transcript,
            cost_usd=result.cost_usd,
            session_id=result.session_id,
            files_changed=result.files_changed,
            commits=result.commits,
        )
        self.summary[record.round] = _summary(record)
        # The Breaker's ledger; sent before the next CheckRound, so it is there in time.
        await self.svc.breaker.cast(
            RecordAttempt(self.loop_id, attempt_of(record, state.spec.task))
        )
        if status == "completed":
            normalized = normalize_output(result.output)
            previous = self._last_normalized
            if previous is None and state.last_output is not None:
                previous = normalize_output(state.last_output)
            self._last_normalized = normalized
            changes: dict[str, Any] = {
                "completed_rounds": state.completed_rounds + 1,
                "last_output": result.output,
                # Compared as same_output() does, normalizing each output only once.
                "stale_rounds": stale_rounds_after(
                    state, progress=result.progress, same_output=previous == normalized
                ),
                "progress_measure": "output" if result.progress is None else "workspace",
                "consecutive_failures": 0,
            }
        else:
            changes = {"consecutive_failures": state.consecutive_failures + 1}
        if result.session_id is not None:
            changes["agent_session"] = result.session_id
        self.state = state.moved(
            "summarizing",
            tokens_used=state.tokens_used + result.tokens,
            cost_usd=state.cost_usd + result.cost_usd,
            deferrals=0,
            **changes,
        )
        finished = RoundFinished(
            loop_id=self.loop_id,
            at=time.time(),
            round=record.round,
            rounds=state.spec.rounds,
            status=status,
            duration=result.duration,
            tokens=result.tokens,
            error=record.error,
            cost_usd=result.cost_usd,
            files_changed=result.files_changed,
            commits=result.commits,
        )
        if status == "completed" and result.done:
            # The worker found the objective met: the loop is complete now (rolebox's W3).
            reason = f"objective met in round {record.round}"
            await self._finish("complete", record=record, events=(finished,), reason=reason)
            return
        await self._decide((finished,), record)

    async def _round_deferred(self, result: RoundResult) -> None:
        """A usage or rate limit held the round back: not a failure, the same round later."""
        waiting, record, deferred = defer_round(
            self.state,
            until=result.deferred_until,
            reason=result.error or "usage limit",
            now=time.time(),
            tokens=result.tokens,
            cost_usd=result.cost_usd,
        )
        if result.session_id is not None:
            waiting = msgspec.structs.replace(waiting, agent_session=result.session_id)
        record = msgspec.structs.replace(
            record, started_at=self.round_started, duration=result.duration
        )
        self.summary[record.round] = _summary(record)
        if waiting.stop_requested is not None:  # a stop after the round: the wait is moot
            self.state = waiting
            await self._finish(
                "cancelled", record=record, events=(deferred,), reason="stopped by request"
            )
            return
        if waiting.pause_requested:  # paused at this round; resume waits out the limit
            paused = waiting.moved("paused", pause_requested=False)
            note = LoopPaused(loop_id=self.loop_id, at=time.time(), round=paused.round)
            await self._commit(paused, record, (deferred, note))
            return
        await self._commit(waiting, record, (deferred,))
        await self._prepare_round()

    async def _decide(self, events: tuple[AnyEvent, ...], record: RoundRecord | None) -> None:
        """After a round: complete, cancelled (stop after round), paused, or the next round."""
        state = self.state
        nxt = next_phase(state)
        if nxt in ("complete", "cancelled"):
            await self._finish(nxt, record=record, events=events)
            return
        if nxt == "escalated":  # the cap, with no completed round
            verdict = no_completed_round(state, record.error if record is not None else None)
            await self._finish(
                nxt, record=record, events=events, reason=verdict.reason, trigger=verdict.trigger
            )
            return
        if nxt == "paused":
            paused = state.moved("paused", round=state.round + 1, pause_requested=False)
            note = LoopPaused(loop_id=self.loop_id, at=time.time(), round=paused.round)
            await self._commit(paused, record, (*events, note))
            return
        # The next round's intent is committed after this write, so its dispatch (which
        # waits for that commit) also waits for this one: no need to wait here.
        await self._commit(state.moved("dispatching", round=state.round + 1), record, events)
        await self._next_round()

    async def _next_round(self) -> None:
        delay = self.state.spec.inter_round_delay
        if delay <= 0:
            await self._prepare_round()
            return
        self.epoch += 1
        deadline = trio.current_time() + delay
        await self._schedule(deadline, Advance(self.epoch))

    async def _finish(
        self,
        phase: Phase,
        *,
        record: RoundRecord | None = None,
        events: tuple[AnyEvent, ...] = (),
        reason: str | None = None,
        trigger: str | None = None,
        wait: bool = False,
    ) -> None:
        state = self.state
        if phase == "complete":
            state = state.moved("finalizing")
        final = state.moved(phase, reason=reason, trigger=trigger)
        summary = dict(self.summary)
        if record is not None:
            summary[record.round] = _summary(record)
        done = LoopFinished(
            loop_id=self.loop_id,
            at=time.time(),
            phase=phase,
            rounds=state.spec.rounds,
            completed_rounds=final.completed_rounds,
            summary=tuple(summary[n] for n in sorted(summary)),
            reason=reason,
            trigger=trigger,
        )
        self.epoch += 1
        ended = Forward(COORDINATOR, LoopEnded(final))
        forget = Forward(BREAKER, ForgetLedger(self.loop_id))
        await self._commit(final, record, (*events, done), then=(ended, forget), wait=wait)
        self.stop()

    # -- commands --------------------------------------------------------------------------

    async def _control(self, message: ControlLoop) -> LoopState:
        """Commands answer once their effect is durable."""
        state = self.state
        command = message.command
        if command == "status" or state.terminal:
            return state
        now = time.time()
        if command == "stop":
            if message.stop_mode == "after_round" and state.phase == "awaiting_worker":
                after = state.moved(state.phase, stop_requested="after_round")
                await self._commit(after, wait=True)
                return self.state
            record = None
            if state.phase == "awaiting_worker":
                # Cancel the round's scope now; its result, if any, arrives to nobody.
                await self.svc.dispatcher.cast(CancelRound(self._key))
                record = RoundRecord(
                    loop_id=self.loop_id,
                    round=state.round,
                    status="cancelled",
                    seed_source=self.seed_source,
                    started_at=self.round_started,
                    duration=time.time() - self.round_started,
                    error="stopped",
                )
                self.state = state.moved(state.phase, stop_requested="now")
            await self._finish("cancelled", record=record, reason="stopped by request", wait=True)
            return self.state
        if command == "pause":
            if state.phase == "awaiting_worker":
                await self._commit(state.moved(state.phase, pause_requested=True), wait=True)
            elif state.phase in ("activating", "dispatching"):
                self.epoch += 1  # a round being prepared, or a pending Advance, is now stale
                paused = state.moved("paused", pause_requested=False)
                note = LoopPaused(loop_id=self.loop_id, at=now, round=paused.round)
                await self._commit(paused, None, (note,), wait=True)
            return self.state
        # resume
        if state.phase == "paused":
            resumed = state.moved("dispatching")
            back = LoopResumed(loop_id=self.loop_id, at=now, round=resumed.round)
            await self._commit(resumed, None, (back,), wait=True)
            await self._next_round()
        elif state.pause_requested:
            await self._commit(state.moved(state.phase, pause_requested=False), wait=True)
        return self.state

    # -- durability ------------------------------------------------------------------------

    async def _commit(
        self,
        state: LoopState,
        record: RoundRecord | None = None,
        events: tuple[AnyEvent, ...] | list[AnyEvent] = (),
        *,
        then: tuple[Forward, ...] = (),
        wait: bool = False,
    ) -> None:
        """Hand a step to the Store; with ``wait``, return only once it is durable.

        Events are published by the Store after the commit, never before.
        """
        saved = (*self._unsaved, *events) if self._unsaved else tuple(events)
        self._unsaved.clear()
        commit = Commit(Write(state=state, round=record, events=saved), then)
        self.state = state
        if wait:
            # No timeout: a commit waits as long as the Store lives, through a full disk
            # (the Store retries it); giving up would restart this runner and run the round
            # in flight again.
            await self.svc.store.call(commit, None)
        else:
            await self.svc.store.cast(commit)


def _summary(record: RoundRecord) -> RoundSummary:
    return RoundSummary(round=record.round, status=record.status, duration=record.duration)


def interrupted_event(state: LoopState, reason: str) -> LoopInterrupted:
    return LoopInterrupted(
        loop_id=state.loop_id,
        at=time.time(),
        round=state.round,
        rounds=state.spec.rounds,
        reason=reason,
    )


def worker_problem(spec: str, kill_grace: float, *, here: bool = True) -> str | None:
    """Why a loop's worker cannot run (None if it can): the only reason a loop is
    ``interrupted`` on recovery."""
    try:
        check_worker_spec(spec, kill_grace=kill_grace, here=here)
    except Exception as exc:
        return f"its worker {spec!r} can no longer be used: {exc}"
    return None
