"""The LoopRunner: one actor per live loop, the interpreter of that loop's decisions.

Everything that can change a loop (a round's result, a stop, a pause, a timer) arrives as a
message, so the mailbox serialises it: no lock, no pending queue, no sweeper (rolebox's W6/W7).
Every message that refers to a round carries its number, and every timer an epoch: stale ones
are ignored. What to do about a message is decided by a pure function of ``loops/steps.py``
(after a round, on finish, on a command, on recovery), which returns the runner's new
knowledge and the effects to perform; this actor performs them, in order. Each step is
committed before its side effect: the intent to run round k (key ``loop_id:k``) before the
Dispatcher hears of it, the round's record together with the next phase, so a crash at any
point resumes from the last commit without losing or repeating a recorded round.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from typing import Any

import attrs
import msgspec
import trio

from ..actors import Actor, ErrorReply
from ..errors import ActorError, ActorNotRunning, CallFailed, LoopsFenced
from ..loops import (
    LoopSpec,
    LoopState,
    Prompt,
    RoundRecord,
    RoundSummary,
    Step,
    after_round,
    check_feedback,
    dispatch_round,
    finish,
    on_control,
    on_give_up,
    on_recovery,
    resume_step,
)
from ..loops import Run as RunnerKnowledge
from ..loops import steps as effects
from ..storage import Write, summary_of
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
from ._plans import plan_progress
from ._wiring import (
    BREAKER,
    COORDINATOR,
    DISPATCHER,
    RunnerDeps,
    Services,
    runner_name,
    services_of,
)

__all__ = ["LoopRunner", "Resumed", "RunnerFactory", "Watchdog"]

#: What a runner's attributes hold until its on_start sets them.
_UNSET: Any = None

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


@attrs.define(eq=False)
class RunnerFactory:
    """Makes the runner of one loop: with its initial state the first time, and then (after
    a crash) with none, so the new incarnation reloads the last committed state. Past
    :data:`MAX_RUNNER_RESTARTS` the new incarnation only ends the loop in ``error``."""

    loop_id: str
    deps: RunnerDeps
    initial: LoopState | None
    recovered: bool = attrs.field(kw_only=True)
    resumed: Resumed | None = attrs.field(default=None, kw_only=True)
    #: When this loop's runner was restarted.
    restarts: list[float] = attrs.field(init=False, factory=list)
    made: bool = attrs.field(init=False, default=False)
    #: Exits caused by a runtime service being down (SERVICE_DOWN): restarts not counted.
    excused: int = attrs.field(init=False, default=0)

    def __call__(self) -> LoopRunner:
        first, self.made = not self.made, True
        initial, self.initial = self.initial, None
        recovered, self.recovered = self.recovered, True
        resumed, self.resumed = self.resumed, None  # a restart reads the store again
        runner = LoopRunner(self.loop_id, self.deps, initial, recovered=recovered, resumed=resumed)
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


class Resumed(msgspec.Struct, gc=False, frozen=True):
    """What a recovery that read the store itself hands a loop's first runner, so that the
    runner need not read it again: the loop's rounds so far (for the summary its final
    event carries) and whether its worker can still be used (see :func:`worker_problem`).

    Only for a snapshot that cannot be stale: one read while no runner was alive (the
    runtime's start); after a Coordinator restart, runners read their loop themselves.
    """

    summary: tuple[RoundSummary, ...]
    worker_problem: str | None


class LoopRunner(Actor[Any]):
    mailbox_size = 64
    #: A loop that waits (for its round, its delay, a retry) is data, not a parked task: its
    #: timers are in the node's one Timers heap, its round in a Dispatcher task only while
    #: it runs, and a message that finds the runner idle runs it in a short task.
    task_while_idle = False

    def __init__(
        self,
        loop_id: str,
        deps: RunnerDeps,
        initial: LoopState | None,
        *,
        recovered: bool,
        resumed: Resumed | None = None,
    ) -> None:
        self.loop_id = loop_id
        self.deps = deps
        self._initial = initial
        self._resumed = resumed
        #: What this runner knows of its loop (set in on_start): the decisions' input. Every
        #: attribute is made here, in one order, so that the instances of tens of thousands
        #: of runners share their attribute keys (one set later made each one a dict).
        self.run: RunnerKnowledge = _UNSET
        self.svc: Services = _UNSET
        self.recovered = recovered
        self.epoch = 0
        #: Set by the factory when this loop's runners keep crashing: end it in error.
        self.give_up: str | None = None
        #: When (trio time) the round in flight has waited too long, and the one watchdog
        #: timer pending with Timers (its deadline and id). A round does not schedule a
        #: timer of its own: the pending one, if it goes off early, is moved to the due time.
        self._watchdog_due = 0.0
        self._timer_at: float | None = None
        self._timer_id = 0  # ids come from _TIMER_IDS: unique across incarnations too
        self.factory: RunnerFactory | None = None

    @property
    def state(self) -> LoopState:
        return self.run.state

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
        state, self._initial = self._initial, None  # kept by nothing else: let it go
        resumed = self._resumed
        if state is None or (self.recovered and resumed is None):
            # A recovery's snapshot may be stale: the loop's previous runner may have
            # finished it after the snapshot was read, and then a second runner would run
            # its last round again (found by `loopactors stress`). The store has the truth:
            # it applies every write queued before a read. (A snapshot read while no runner
            # was alive comes with ``resumed``: nobody can have changed the loop since.)
            state = await self.svc.store.call(GetLoop(self.loop_id), self.deps.call_timeout)
            if state is None:
                self.stop()
                return
        self.run = RunnerKnowledge(state=state)
        if state.terminal:
            self.svc.coordinator.cast_nowait(LoopEnded(state))
            self.stop()
            return
        if self.give_up is not None:
            await self._perform(on_give_up(self.run, self.give_up, time.time()))
            return
        if self.recovered and state.phase != "activating":
            # The rounds so far, for the summary the loop's final event carries.
            if resumed is not None:
                summary = resumed.summary
            else:
                rounds: list[RoundRecord] = await self.svc.store.call(
                    GetRounds(self.loop_id), self.deps.call_timeout
                )
                by_round = {r.round: summary_of(r) for r in rounds}
                summary = tuple(by_round[n] for n in sorted(by_round))
            self.run = msgspec.structs.replace(self.run, summary=summary)
        self.ref.cast_nowait(Advance(self.epoch))

    async def handle(self, message: Any) -> Any:
        kind = type(message)
        state = self.run.state
        if kind is PromptReady:
            if message.epoch == self.epoch and state.phase == "dispatching":
                await self._perform(dispatch_round(self.run, message.prompt, time.time()))
        elif kind is RoundDone:
            if state.phase == "awaiting_worker" and message.round == state.round:
                plan = await plan_progress(state) if state.spec.plan is not None else None
                if self.run.state is state:  # nothing moved while the plan was read
                    await self._perform(
                        after_round(self.run, message.result, time.time(), plan=plan)
                    )
        elif kind is Advance:
            if message.epoch == self.epoch and not state.terminal:
                await self._step()
        elif kind is Escalate:
            if message.epoch == self.epoch and state.phase == "dispatching":
                verdict = message.verdict
                await self._perform(
                    finish(
                        self.run,
                        "escalated",
                        time.time(),
                        reason=verdict.reason,
                        trigger=verdict.trigger,
                    )
                )
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
            # Commands answer once their effect is durable (their commits wait).
            command = on_control(self.run, message.command, message.stop_mode, time.time())
            await self._perform(command)
            return self.run.state
        else:
            return ErrorReply(TypeError(f"a loop runner does not accept {kind.__name__}"))
        return None

    async def _step(self) -> None:
        """Take the next step from the committed phase; also how a recovered loop resumes."""
        recovered, self.recovered = self.recovered, False
        now = time.time()
        if recovered:
            resumed, self._resumed = self._resumed, None
            if resumed is not None:
                problem = resumed.worker_problem
            else:
                problem = worker_problem(
                    self.run.state.spec.worker,
                    self.deps.kill_grace,
                    here=not self.deps.remote_workers,
                )
            # The state as the store holds it: a step that saves it unchanged (its recovery
            # note only) writes no row for it.
            stored = self.run.state
            step = on_recovery(self.run, problem, now, retry=self.deps.worker_retry)
            await self._perform(step, stored=stored)
            # Waiting for its worker: the next wake-up looks again (docs/node.md).
            self.recovered = problem is not None
        else:
            await self._perform(resume_step(self.run, now))

    async def _watchdog_fired(self) -> None:
        """No result within the round timeout plus a grace: is the round still somewhere?

        Queued for a slot, or running for less than its timeout, it gets more time; lost
        (the Dispatcher does not know it) or overdue, it is cancelled and timed out (W18).
        """
        spec = self.run.state.spec
        where: RoundWhere = await self.svc.dispatcher.call(
            WhereIsRound(self._key), self.deps.call_timeout
        )
        if where.queued:
            await self._arm_watchdog()
            return
        budget = _round_budget(spec) + WATCHDOG_GRACE
        if where.running_for is not None and where.running_for < budget:
            await self._arm_watchdog(budget - where.running_for)
            return
        await self.svc.dispatcher.cast(CancelRound(self._key))
        now = time.time()
        result = RoundResult(
            status="timed_out",
            error="no result reached the loop within the round timeout plus "
            f"{WATCHDOG_GRACE:.0f} s; the round was cancelled",
            duration=now - self.run.round_started,
        )
        await self._perform(after_round(self.run, result, now))

    @property
    def _key(self) -> str:
        return f"{self.loop_id}:{self.run.state.round}"

    # -- performing effects ----------------------------------------------------------------
    #
    # One round is a pipeline of casts: runner -> Breaker -> ContextBuilder -> runner (prompt)
    # -> Store (intent, durable) -> Dispatcher -> worker -> runner (result) -> Store. The
    # runner wakes twice per round and never waits on a reply; the Store performs the side
    # effect that must follow a commit (dispatching the round, publishing its events) only
    # once the commit is durable.

    async def _perform(self, step: Step, *, stored: LoopState | None = None) -> None:
        """Take a decision's new knowledge, then perform its effects in order (``stored``:
        the state the store holds, if known)."""
        self.run, todo = step
        for effect in todo:
            if isinstance(effect, effects.Save):
                await self._commit(effect, stored=effect.state is stored)
            elif isinstance(effect, effects.CheckRound):
                self.epoch += 1
                await self.svc.breaker.cast(CheckRound(effect.state, effect.now, self.epoch))
            elif isinstance(effect, effects.RecordAttempt):
                attempt = attempt_of(effect.record, self.run.state.spec.task)
                await self.svc.breaker.cast(RecordAttempt(self.loop_id, attempt))
            elif isinstance(effect, effects.Dispatch):
                await self.svc.dispatcher.cast(self._dispatch_message(effect.prompt))
            elif isinstance(effect, effects.ArmWatchdog):
                await self._arm_watchdog()
            elif isinstance(effect, effects.Wake):
                self.epoch += 1
                await self._schedule(trio.current_time() + effect.after, Advance(self.epoch))
            elif isinstance(effect, effects.CancelInFlight):
                await self.svc.dispatcher.cast(CancelRound(self._key))
            elif isinstance(effect, effects.Invalidate):
                self.epoch += 1
            elif isinstance(effect, effects.Halt):
                self.stop()
            else:  # a new effect needs its line here
                raise TypeError(f"the runner cannot perform {type(effect).__name__}")

    def _dispatch_message(self, prompt: Prompt) -> Dispatch:
        state = self.run.state
        spec = state.spec
        request = RoundRequest(
            loop_id=self.loop_id,
            round=state.round,
            rounds=spec.rounds,
            mode=spec.mode,
            prompt=prompt.text,
            task=(spec.task if state.round_task is None else state.round_task)
            + check_feedback(state),
            worker=spec.worker,
            objective=spec.objective,
            session=state.agent_session if spec.mode == "inherit" else None,
            session_cost_usd=state.agent_session_cost if spec.mode == "inherit" else None,
            until=spec.until,
            until_timeout=spec.until_timeout,
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
            after = _round_budget(self.run.state.spec) + WATCHDOG_GRACE
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
        # Its own name (the registered string): not one more copy per timer.
        await self.svc.timers.cast(Schedule(deadline, self.name, message))

    async def _commit(self, save: effects.Save, *, stored: bool = False) -> None:
        """Hand a step to the Store; with ``save.wait``, return only once it is durable
        (``stored``: its state is the one the store holds already).

        Events are published by the Store after the commit, never before; so are the
        forwards (``then``): the round's dispatch, the loop's end.
        """
        then: list[Forward] = []
        for after in save.then:
            if isinstance(after, effects.Dispatch):
                then.append(Forward(DISPATCHER, self._dispatch_message(after.prompt)))
            else:
                then.append(Forward(COORDINATOR, LoopEnded(after.final)))
                then.append(Forward(BREAKER, ForgetLedger(self.loop_id)))
        write = Write(state=save.state, round=save.record, events=save.events, state_stored=stored)
        commit = Commit(write, tuple(then))
        if save.wait:
            # No timeout: a commit waits as long as the Store lives, through a full disk
            # (the Store retries it); giving up would restart this runner and run the round
            # in flight again.
            try:
                await self.svc.store.call(commit, None)
            except LoopsFenced:
                # Not this node's loop any more (a shared store): nothing of it was
                # written, nothing it forwards happens; it ends here, not restarted.
                self.stop()
        else:
            await self.svc.store.cast(commit)


def _round_budget(spec: LoopSpec) -> float:
    """The longest a round may take where it runs: its timeout, then its ``until`` check's."""
    return spec.round_timeout + (spec.until_timeout if spec.until is not None else 0.0)


def worker_problem(spec: str, kill_grace: float, *, here: bool = True) -> str | None:
    """Why a loop's worker cannot be built now (None if it can): what a recovered loop
    waits out, and what ``loopactors resume`` refuses to start with."""
    try:
        check_worker_spec(spec, kill_grace=kill_grace, here=here)
    except Exception as exc:
        return f"{spec!r} cannot be built: {exc}"
    return None
