"""The LoopRunner: one actor per live loop, owner of that loop's state machine.

Everything that can change a loop (a round's result, a stop, a pause, a timer) arrives as a
message, so the mailbox serialises it: no lock, no pending queue, no sweeper (rolebox's W6/W7).
Every message that refers to a round carries its number, and every timer an epoch: stale ones
are ignored. Each step is committed before its side effect: the intent to run round k (key
``loop_id:k``) before the Dispatcher hears of it, the round's record together with the next
phase, so a crash at any point resumes from the last commit without losing or repeating a
recorded round.
"""

from __future__ import annotations

import time
import weakref
from typing import TYPE_CHECKING, Any

import attrs
import msgspec
import trio

from ..actors import Actor, ErrorReply, NamedRef, Node
from ..loops._events import (
    AnyEvent,
    LoopFinished,
    LoopInterrupted,
    LoopPaused,
    LoopRecovered,
    LoopResumed,
    LoopStarted,
    RoundFinished,
    RoundStarted,
    RoundSummary,
)
from ..loops._model import LoopState, Phase, RoundRecord
from ..loops._rules import Prompt, Verdict, build_prompt, next_phase, same_output
from ..messages import (
    Advance,
    BuildPrompt,
    CancelRound,
    CheckRound,
    Commit,
    ControlLoop,
    Dispatch,
    GetLoop,
    GetRounds,
    LoopEnded,
    RoundDone,
    Schedule,
)
from ..storage import Write
from ..workers import RoundRequest, RoundResult, parse_worker
from ._dispatcher import runner_name

if TYPE_CHECKING:
    from ._events import EventBus

__all__ = ["LoopRunner", "RunnerDeps", "RunnerFactory", "Services", "Watchdog", "services_of"]

#: Extra time past the round timeout before the runner gives up on hearing back (W18).
WATCHDOG_GRACE = 30.0


class Watchdog(msgspec.Struct, frozen=True):
    epoch: int
    round: int


class Services:
    """Refs to the runtime's named actors on one node (they follow restarts)."""

    __slots__ = ("breaker", "compactor", "coordinator", "dispatcher", "store", "timers")

    def __init__(self, node: Node) -> None:
        self.store: NamedRef[Any] = node.ref("store")
        self.breaker: NamedRef[Any] = node.ref("breaker")
        self.compactor: NamedRef[Any] = node.ref("compactor")
        self.dispatcher: NamedRef[Any] = node.ref("dispatcher")
        self.timers: NamedRef[Any] = node.ref("timers")
        self.coordinator: NamedRef[Any] = node.ref("coordinator")


_services: weakref.WeakKeyDictionary[Node, Services] = weakref.WeakKeyDictionary()


def services_of(node: Node) -> Services:
    """One shared :class:`Services` per node (a memo, not a registry: names stay per node)."""
    found = _services.get(node)
    if found is None:
        found = _services[node] = Services(node)
    return found


@attrs.frozen
class RunnerDeps:
    """What every runner needs besides the services: the event bus and a few settings."""

    bus: EventBus
    kill_grace: float
    call_timeout: float = 60.0


class RunnerFactory:
    """Makes the runner of one loop: with its initial state the first time, and then (after
    a crash) with none, so the new incarnation reloads the last committed state."""

    __slots__ = ("deps", "initial", "loop_id", "recovered")

    def __init__(
        self, loop_id: str, deps: RunnerDeps, initial: LoopState | None, *, recovered: bool
    ) -> None:
        self.loop_id = loop_id
        self.deps = deps
        self.initial = initial
        self.recovered = recovered

    def __call__(self) -> LoopRunner:
        initial, self.initial = self.initial, None
        recovered, self.recovered = self.recovered, True
        return LoopRunner(self.loop_id, self.deps, initial, recovered=recovered)


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
        self._unsaved: list[AnyEvent] = []

    # -- lifecycle -------------------------------------------------------------------------

    async def on_start(self) -> None:
        self.svc = services_of(self.node)
        if self.state is None:
            state = await self.svc.store.call(GetLoop(self.loop_id), self.deps.call_timeout)
            if state is None:
                self.stop()
                return
            self.state = state
        if self.state.terminal:
            self.svc.coordinator.cast_nowait(LoopEnded(self.state))
            self.stop()
            return
        self.ref.cast_nowait(Advance(self.epoch))

    async def handle(self, message: Any) -> Any:
        kind = type(message)
        if kind is Advance:
            if message.epoch == self.epoch and not self.state.terminal:
                await self._step()
        elif kind is RoundDone:
            if self.state.phase == "awaiting_worker" and message.round == self.state.round:
                await self._round_done(message.result)
        elif kind is Watchdog:
            if (
                message.epoch == self.epoch
                and self.state.phase == "awaiting_worker"
                and message.round == self.state.round
            ):
                await self.svc.dispatcher.cast(CancelRound(self._key))
                await self._round_done(
                    RoundResult(
                        status="timed_out",
                        error="no result reached the loop within the round timeout plus "
                        f"{WATCHDOG_GRACE:.0f} s; the round was cancelled",
                        duration=time.time() - self.round_started,
                    )
                )
        elif kind is ControlLoop:
            return await self._control(message)
        else:
            return ErrorReply(TypeError(f"a loop runner does not accept {kind.__name__}"))
        return None

    @property
    def _key(self) -> str:
        return f"{self.loop_id}:{self.state.round}"

    # -- driving the loop ------------------------------------------------------------------

    async def _step(self) -> None:
        """Take the next step from the committed phase; also how a recovered loop resumes."""
        phase = self.state.phase
        recovered, self.recovered = self.recovered, False
        if recovered:
            problem = worker_problem(self.state.spec.worker, self.deps.kill_grace)
            if problem is not None:
                # The one case a loop cannot resume: say so at once (rolebox's W19).
                await self._finish(
                    "interrupted",
                    reason=problem,
                    events=(interrupted_event(self.state, problem),),
                )
                return
            if phase != "activating":
                recovered_event = LoopRecovered(
                    loop_id=self.loop_id, at=time.time(), phase=phase, round=self.state.round
                )
                self._publish((recovered_event,))
                self._unsaved.append(recovered_event)  # kept in the log with the next commit
        if phase in ("activating", "dispatching"):
            await self._start_round()
        elif phase == "awaiting_worker":
            # Dispatched before the restart: dispatch again under the same key. The store
            # upserts the round by key, so it is recorded once whichever run reports.
            self._dispatch(build_prompt(self.state))
        elif phase in ("summarizing", "finalizing"):
            await self._decide((), None)
        # paused: nothing to do until resume

    async def _start_round(self) -> None:
        state = self.state
        now = time.time()
        if state.phase == "activating":
            state = state.moved("dispatching", started_at=now)
        verdict: Verdict | None = await self.svc.breaker.call(
            CheckRound(state, now), self.deps.call_timeout
        )
        if verdict is not None:
            self.state = state
            await self._finish("escalated", reason=verdict.reason, trigger=verdict.trigger)
            return
        prompt: Prompt = await self.svc.compactor.call(BuildPrompt(state), self.deps.call_timeout)
        record = RoundRecord(
            loop_id=self.loop_id,
            round=state.round,
            status="running",
            seed_source=prompt.seed_source,
            started_at=now,
        )
        events: list[AnyEvent] = []
        if self.state.phase == "activating":
            spec = state.spec
            events.append(
                LoopStarted(
                    loop_id=self.loop_id,
                    at=now,
                    rounds=spec.rounds,
                    mode=spec.mode,
                    worker=spec.worker,
                    parent_id=spec.parent_id,
                )
            )
        events.append(
            RoundStarted(
                loop_id=self.loop_id,
                at=now,
                round=state.round,
                rounds=state.spec.rounds,
                seed_source=prompt.seed_source,
            )
        )
        # The intent is durable before the Dispatcher hears of the round.
        await self._commit(state.moved("awaiting_worker"), record, events)
        self._dispatch(prompt)

    def _dispatch(self, prompt: Prompt) -> None:
        state = self.state
        spec = state.spec
        self.round_started = time.time()
        request = RoundRequest(
            loop_id=self.loop_id,
            round=state.round,
            rounds=spec.rounds,
            mode=spec.mode,
            prompt=prompt.text,
            task=spec.task,
            worker=spec.worker,
        )
        self.svc.dispatcher.cast_nowait(Dispatch(request, spec.round_timeout))
        self.epoch += 1
        self.svc.timers.cast_nowait(
            Schedule(
                trio.current_time() + spec.round_timeout + WATCHDOG_GRACE,
                runner_name(self.loop_id),
                Watchdog(self.epoch, state.round),
            )
        )

    async def _round_done(self, result: RoundResult) -> None:
        state = self.state
        status = result.status
        if status == "cancelled":
            # Nobody here asked for it (a stop finishes the loop before the result comes).
            status = "failed"
        record = RoundRecord(
            loop_id=self.loop_id,
            round=state.round,
            status=status,
            seed_source="task"
            if state.spec.mode == "fresh" or not state.last_output
            else "previous_output",
            output=result.output,
            error=result.error if status != "completed" else None,
            tokens=result.tokens,
            started_at=self.round_started,
            duration=result.duration,
        )
        if status == "completed":
            changes: dict[str, Any] = {
                "completed_rounds": state.completed_rounds + 1,
                "last_output": result.output,
                "stale_rounds": state.stale_rounds + 1
                if same_output(state.last_output, result.output)
                else 0,
                "consecutive_failures": 0,
            }
        else:
            changes = {"consecutive_failures": state.consecutive_failures + 1}
        self.state = state.moved(
            "summarizing", tokens_used=state.tokens_used + result.tokens, **changes
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
        )
        await self._decide((finished,), record)

    async def _decide(self, events: tuple[AnyEvent, ...], record: RoundRecord | None) -> None:
        """After a round: complete, cancelled (stop after round), paused, or the next round."""
        state = self.state
        nxt = next_phase(state)
        if nxt in ("complete", "cancelled"):
            await self._finish(nxt, record=record, events=events)
            return
        now = time.time()
        if nxt == "paused":
            paused = state.moved("paused", round=state.round + 1, pause_requested=False)
            await self._commit(
                paused,
                record,
                (*events, LoopPaused(loop_id=self.loop_id, at=now, round=paused.round)),
            )
            return
        await self._commit(state.moved("dispatching", round=state.round + 1), record, events)
        self._schedule_next()

    def _schedule_next(self) -> None:
        self.epoch += 1
        delay = self.state.spec.inter_round_delay
        if delay <= 0:
            self.ref.cast_nowait(Advance(self.epoch))
        else:
            self.svc.timers.cast_nowait(
                Schedule(
                    trio.current_time() + delay, runner_name(self.loop_id), Advance(self.epoch)
                )
            )

    async def _finish(
        self,
        phase: Phase,
        *,
        record: RoundRecord | None = None,
        events: tuple[AnyEvent, ...] = (),
        reason: str | None = None,
        trigger: str | None = None,
    ) -> None:
        state = self.state
        if phase == "complete":
            state = state.moved("finalizing")
        final = state.moved(phase, reason=reason, trigger=trigger)
        rounds: list[RoundRecord] = await self.svc.store.call(
            GetRounds(self.loop_id), self.deps.call_timeout
        )
        by_number = {r.round: r for r in rounds}
        if record is not None:
            by_number[record.round] = record
        summary = tuple(
            RoundSummary(round=r.round, status=r.status, duration=r.duration)
            for _, r in sorted(by_number.items())
        )
        done = LoopFinished(
            loop_id=self.loop_id,
            at=time.time(),
            phase=phase,
            rounds=state.spec.rounds,
            completed_rounds=final.completed_rounds,
            summary=summary,
            reason=reason,
            trigger=trigger,
        )
        await self._commit(final, record, (*events, done))
        self.epoch += 1
        self.svc.coordinator.cast_nowait(LoopEnded(final))
        self.stop()

    # -- commands --------------------------------------------------------------------------

    async def _control(self, message: ControlLoop) -> LoopState:
        state = self.state
        command = message.command
        if command == "status" or state.terminal:
            return state
        now = time.time()
        if command == "stop":
            if message.stop_mode == "after_round" and state.phase == "awaiting_worker":
                await self._commit(state.moved(state.phase, stop_requested="after_round"))
                return self.state
            record = None
            if state.phase == "awaiting_worker":
                # Cancel the round's scope now; its result, if any, arrives to nobody.
                self.svc.dispatcher.cast_nowait(CancelRound(self._key))
                record = RoundRecord(
                    loop_id=self.loop_id,
                    round=state.round,
                    status="cancelled",
                    started_at=self.round_started,
                    duration=time.time() - self.round_started,
                    error="stopped",
                )
                self.state = state.moved(state.phase, stop_requested="now")
            await self._finish("cancelled", record=record, reason="stopped by request")
            return self.state
        if command == "pause":
            if state.phase == "awaiting_worker":
                await self._commit(state.moved(state.phase, pause_requested=True))
            elif state.phase in ("activating", "dispatching"):
                self.epoch += 1  # a pending Advance is now stale
                paused = state.moved("paused", pause_requested=False)
                await self._commit(
                    paused, None, (LoopPaused(loop_id=self.loop_id, at=now, round=paused.round),)
                )
            return self.state
        # resume
        if state.phase == "paused":
            resumed = state.moved("dispatching")
            await self._commit(
                resumed, None, (LoopResumed(loop_id=self.loop_id, at=now, round=resumed.round),)
            )
            self._schedule_next()
        elif state.pause_requested:
            await self._commit(state.moved(state.phase, pause_requested=False))
        return self.state

    # -- durability ------------------------------------------------------------------------

    async def _commit(
        self,
        state: LoopState,
        record: RoundRecord | None = None,
        events: tuple[AnyEvent, ...] | list[AnyEvent] = (),
    ) -> None:
        events = tuple(events)
        saved = (*self._unsaved, *events)
        await self.svc.store.call(
            Commit(Write(state=state, round=record, events=saved)), self.deps.call_timeout
        )
        self._unsaved.clear()
        self.state = state
        self._publish(events)

    def _publish(self, events: tuple[AnyEvent, ...]) -> None:
        for event in events:
            self.deps.bus.publish(event)


def interrupted_event(state: LoopState, reason: str) -> LoopInterrupted:
    return LoopInterrupted(
        loop_id=state.loop_id,
        at=time.time(),
        round=state.round,
        rounds=state.spec.rounds,
        reason=reason,
    )


def worker_problem(spec: str, kill_grace: float) -> str | None:
    """Why a loop's worker cannot run (None if it can): the only reason a loop is
    ``interrupted`` on recovery."""
    try:
        parse_worker(spec, kill_grace=kill_grace)
    except Exception as exc:
        return f"its worker {spec!r} can no longer be used: {exc}"
    return None
