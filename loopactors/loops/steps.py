"""The LoopRunner's decisions, as pure functions: state in, new state and effects out.

No trio, no I/O. Each function takes what the runner knows (:class:`Run`: the committed
``LoopState`` and a few things kept in memory) and an input (a round's result, a command, a
recovery), and returns the new :class:`Run` and the :data:`Effect` s to perform, in order.
``runtime/_runner.py`` only interprets effects (commits, casts, timers), so every rule about
what happens to a loop lives here and is tested without trio (``tests/loops/test_steps.py``).

A new rule is one new decision here plus, when it needs the outside world, one new effect
and its line in the runner's interpreter.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol

import msgspec

from ._events import (
    AnyEvent,
    LoopFinished,
    LoopPaused,
    LoopRecovered,
    LoopResumed,
    LoopWaiting,
    RoundFinished,
    RoundSummary,
)
from ._model import CheckRecord, LoopState, Phase, RoundRecord, RoundStatus, StopMode
from ._rules import (
    Prompt,
    build_prompt,
    defer_round,
    deferred_wait,
    next_phase,
    no_completed_round,
    normalize_output,
    round_intent,
    stale_rounds_after,
)

__all__ = [
    "ArmWatchdog",
    "CancelInFlight",
    "CheckRound",
    "Control",
    "Dispatch",
    "Effect",
    "Ended",
    "Halt",
    "Invalidate",
    "PlanProgress",
    "RecordAttempt",
    "RoundReport",
    "Run",
    "Save",
    "Step",
    "Wake",
    "after_round",
    "cancel_loop",
    "decide",
    "dispatch_round",
    "finish",
    "finished_event",
    "next_round",
    "on_control",
    "on_give_up",
    "on_recovery",
    "prepare_round",
    "resume_step",
]


# -- what the runner knows ----------------------------------------------------------------


class Run(msgspec.Struct, frozen=True, kw_only=True):
    """The runner's knowledge of its loop: the last state it committed (or is about to), and
    what it keeps in memory about the round in flight and the rounds so far."""

    state: LoopState
    #: Every round's summary so far, by round (one each), for the final event (reloaded from
    #: the store after a restart).
    summary: tuple[RoundSummary, ...] = ()
    #: The round in flight: where its prompt's seed came from, and when it started (UNIX).
    seed_source: Literal["task", "previous_output"] = "task"
    round_started: float = 0.0
    #: Round 1 is being prepared: its intent announces the loop (``LoopStarted``).
    announce: bool = False
    #: ``state.last_output`` as the no-progress fuse compares it, once computed.
    last_normalized: str | None = None
    #: Events to go with the next commit (a recovery's note).
    unsaved: tuple[AnyEvent, ...] = ()
    #: The prompt of the round in flight (recorded with the round).
    prompt: str = ""
    #: This runner is waiting out the inter-round delay on its own clock: the next round's
    #: preparation does not wait again for the due time stored with it (``delayed``).
    waited_delay: bool = False


class RoundReport(Protocol):
    """What a round's result says (the workers' ``RoundResult`` is one)."""

    @property
    def status(self) -> Literal["completed", "failed", "timed_out", "cancelled", "deferred"]: ...
    @property
    def output(self) -> str: ...
    @property
    def error(self) -> str | None: ...
    @property
    def tokens(self) -> int: ...
    @property
    def duration(self) -> float: ...
    @property
    def done(self) -> bool: ...
    @property
    def transcript(self) -> tuple[dict[str, Any], ...]: ...
    @property
    def cost_usd(self) -> float: ...
    @property
    def session_id(self) -> str | None: ...
    @property
    def session_cost_usd(self) -> float | None: ...
    @property
    def files_changed(self) -> int | None: ...
    @property
    def commits(self) -> int | None: ...
    @property
    def progress(self) -> bool | None: ...
    @property
    def deferred_until(self) -> float | None: ...
    @property
    def check(self) -> CheckRecord | None: ...
    @property
    def account(self) -> str | None: ...


# -- effects --------------------------------------------------------------------------------


class Dispatch(msgspec.Struct, gc=False, frozen=True):
    """Run the round in flight with ``prompt`` (sent once the commit carrying it is durable)."""

    prompt: Prompt


class Ended(msgspec.Struct, gc=False, frozen=True):
    """The loop reached ``final``, a terminal state: the runtime forgets it (the Coordinator
    and the Breaker's ledger), once the commit carrying it is durable."""

    final: LoopState


class Save(msgspec.Struct, gc=False, frozen=True, kw_only=True):
    """Commit ``state`` (with the round's ``record`` and ``events``); then ``then``. With
    ``wait``, the runner waits until the commit is durable (a command's answer)."""

    state: LoopState
    record: RoundRecord | None = None
    events: tuple[AnyEvent, ...] = ()
    then: tuple[Dispatch | Ended, ...] = ()
    wait: bool = False


class RecordAttempt(msgspec.Struct, gc=False, frozen=True):
    """Add the finished round ``record`` to the loop's run ledger (the Breaker's)."""

    record: RoundRecord


class CheckRound(msgspec.Struct, gc=False, frozen=True):
    """Ask the Breaker about round ``state.round`` (it goes on to build the prompt)."""

    state: LoopState
    now: float


class Wake(msgspec.Struct, gc=False, frozen=True):
    """Take the next step ``after`` seconds from now (an inter-round delay, a usage limit)."""

    after: float


class ArmWatchdog(msgspec.Struct, gc=False, frozen=True):
    """Watch the round in flight: past its timeout and a grace, ask where it is."""


class CancelInFlight(msgspec.Struct, gc=False, frozen=True):
    """Cancel the round in flight (its result, if one comes, is for nobody)."""


class Invalidate(msgspec.Struct, gc=False, frozen=True):
    """Make every wake-up and answer already on its way stale (a new epoch)."""


class Halt(msgspec.Struct, gc=False, frozen=True):
    """The loop ended: the runner stops."""


Effect = (
    Dispatch
    | Ended
    | Save
    | RecordAttempt
    | CheckRound
    | Wake
    | ArmWatchdog
    | CancelInFlight
    | Invalidate
    | Halt
)

#: What every decision returns: the runner's new knowledge and the effects, in order.
Step = tuple[Run, list[Effect]]

Control = Literal["stop", "pause", "resume", "status"]


# -- helpers ----------------------------------------------------------------------------------


def _summary(record: RoundRecord) -> RoundSummary:
    return RoundSummary(round=record.round, status=record.status, duration=record.duration)


def _round(summary: RoundSummary) -> int:
    return summary.round


def _with_summary(
    summary: tuple[RoundSummary, ...], record: RoundRecord | None
) -> tuple[RoundSummary, ...]:
    """The summaries by round (a later one of the same round replaces it), in order."""
    if record is not None and (not summary or summary[-1].round < record.round):
        return (*summary, _summary(record))  # a new round: the usual case
    by_round = {s.round: s for s in summary}
    if record is not None:
        by_round[record.round] = _summary(record)
    return tuple(by_round[n] for n in sorted(by_round))


def _save(
    run: Run,
    state: LoopState,
    record: RoundRecord | None = None,
    events: Sequence[AnyEvent] = (),
    *,
    then: tuple[Dispatch | Ended, ...] = (),
    wait: bool = False,
) -> tuple[Run, Save]:
    """A commit of ``state``, carrying the events not saved yet first."""
    save = Save(state=state, record=record, events=(*run.unsaved, *events), then=then, wait=wait)
    return msgspec.structs.replace(run, state=state, unsaved=()), save


def _in_flight_record(state: LoopState, status: RoundStatus, why: str) -> RoundRecord | None:
    """The record that closes a round left in flight when the loop ends without it."""
    if state.phase != "awaiting_worker":
        return None
    return RoundRecord(loop_id=state.loop_id, round=state.round, status=status, error=why)


# -- ending -----------------------------------------------------------------------------------


def finished_event(
    state: LoopState,
    final: LoopState,
    summary: tuple[RoundSummary, ...],
    now: float,
) -> LoopFinished:
    return LoopFinished(
        loop_id=state.loop_id,
        at=now,
        phase=final.phase,
        rounds=state.spec.rounds,
        completed_rounds=final.completed_rounds,
        summary=summary,
        reason=final.reason,
        trigger=final.trigger,
    )


def finish(
    run: Run,
    phase: Phase,
    now: float,
    *,
    record: RoundRecord | None = None,
    events: Sequence[AnyEvent] = (),
    reason: str | None = None,
    trigger: str | None = None,
    wait: bool = False,
) -> Step:
    """End the loop in ``phase`` (terminal): one commit with the round's record, its events
    and ``LoopFinished``; then the runtime forgets the loop and the runner stops."""
    state = run.state
    if phase == "complete":
        state = state.moved("finalizing")
    final = state.moved(phase, reason=reason, trigger=trigger)
    summary = _with_summary(run.summary, record)
    done = finished_event(state, final, summary, now)
    return _ended(run, final, record, (*events, done), wait=wait)


def _ended(
    run: Run,
    final: LoopState,
    record: RoundRecord | None,
    events: Sequence[AnyEvent],
    *,
    wait: bool,
) -> Step:
    run = msgspec.structs.replace(run, summary=_with_summary(run.summary, record))
    run, save = _save(run, final, record, events, then=(Ended(final),), wait=wait)
    return run, [Invalidate(), save, Halt()]


def cancel_loop(
    state: LoopState,
    reason: str,
    now: float,
    *,
    rounds: Sequence[RoundRecord | RoundSummary] = (),
    in_flight: RoundRecord | None = None,
    stop_requested: StopMode | None = None,
) -> tuple[LoopState, RoundRecord | None, tuple[AnyEvent, ...]]:
    """A live loop cancelled: its final state, the record that closes the round it had in
    flight (``in_flight`` if given, else a ``cancelled`` one naming ``reason``; ``None`` when
    no round was in flight), and its events: the ``RoundFinished`` (``cancelled``) that closes
    that round on the stream, then the ``LoopFinished`` with every round's summary (``rounds``
    as stored). The one way to cancel: the runner's stop, the Coordinator's end of a loop
    without a runner, and ``loopactors stop`` on a state directory all build it here."""
    if in_flight is None:
        in_flight = _in_flight_record(
            state, "cancelled", f"the loop ended while this round was in flight: {reason}"
        )
        stored = [r for r in rounds if isinstance(r, RoundRecord) and r.round == state.round]
        if in_flight is not None and stored:  # keep what its intent recorded (seed, start)
            in_flight = msgspec.structs.replace(
                stored[-1], status="cancelled", error=in_flight.error
            )
    before = state
    if stop_requested is not None:
        before = state.moved(state.phase, stop_requested=stop_requested)
    final = before.moved("cancelled", reason=reason, trigger=None)
    summaries = tuple(
        sorted((r if isinstance(r, RoundSummary) else _summary(r) for r in rounds), key=_round)
    )
    summary = _with_summary(summaries, in_flight)
    done = finished_event(before, final, summary, now)
    if in_flight is None:
        return final, None, (done,)
    # Every round_started is closed by a round_finished (docs/protocol.md), a cancelled one too.
    closed = RoundFinished(
        loop_id=state.loop_id,
        at=now,
        round=in_flight.round,
        rounds=state.spec.rounds,
        status="cancelled",
        duration=in_flight.duration,
        error=in_flight.error,
    )
    return final, in_flight, (closed, done)


# -- a round ----------------------------------------------------------------------------------


def prepare_round(run: Run, now: float) -> Step:
    """Before round ``state.round``: wait out a usage limit, or ask the Breaker (in memory
    only: the state is committed with the round's intent)."""
    state = run.state
    if run.waited_delay:  # the inter-round delay was waited out here, on the runner's clock
        run = msgspec.structs.replace(run, waited_delay=False)
        wait = None
    else:
        wait = deferred_wait(state, now)
    if wait is not None:  # a usage limit or the delay holds this round back (after a crash too)
        return run, [Wake(wait)]
    if state.phase == "activating":
        state = state.moved("dispatching")
    if not state.started_at:
        state = msgspec.structs.replace(state, started_at=now)
    # Round 1 is prepared until its intent commits, which announces the loop (also after a
    # pause before round 1, or a restart).
    run = msgspec.structs.replace(run, state=state, announce=state.round == 1)
    return run, [CheckRound(state, now)]


def dispatch_round(run: Run, prompt: Prompt, now: float) -> Step:
    """The prompt is ready: commit the round's intent; the round is dispatched once durable."""
    state = run.state
    record, events = round_intent(state, prompt, now, first=run.announce)
    running = state.moved(
        "awaiting_worker", deferred_until=None, defer_reason=None, round_task=prompt.task
    )
    if prompt.tasks_total is not None:  # the plan as read for this round
        running = msgspec.structs.replace(
            running, tasks_done=prompt.tasks_done, tasks_total=prompt.tasks_total
        )
    run = msgspec.structs.replace(
        run,
        announce=False,
        round_started=now,
        seed_source=prompt.seed_source,
        prompt=prompt.text,
    )
    run, save = _save(run, running, record, events, then=(Dispatch(prompt),))
    return run, [save, ArmWatchdog()]


def next_round(run: Run, now: float) -> Step:
    """The next round: at once, or after the loop's inter-round delay. The delay's due time
    is in the committed state (``delayed``), so a runner that recovers the loop after a
    restart waits out what is left; this runner waits on its own clock."""
    delay = run.state.spec.inter_round_delay
    if delay <= 0:
        return prepare_round(run, now)
    wait = max(delay, deferred_wait(run.state, now) or 0.0)  # a usage limit may hold longer
    return msgspec.structs.replace(run, waited_delay=True), [Wake(wait)]


def delayed(state: LoopState, now: float) -> dict[str, object]:
    """The changes that hold the next round back by the loop's inter-round delay, stored as
    a due time (``deferred_until``) like a usage limit's; none without a delay."""
    delay = state.spec.inter_round_delay
    if delay <= 0 or (state.deferred_until is not None and state.deferred_until > now + delay):
        return {}  # no delay, or a usage limit holds the round back longer
    return {"deferred_until": now + delay, "defer_reason": f"inter-round delay of {delay:g}s"}


class PlanProgress(msgspec.Struct, gc=False, frozen=True):
    """A plan-driven loop's plan as read after a round: tasks done and in all."""

    done: int
    total: int

    @property
    def complete(self) -> bool:
        return self.total > 0 and self.done >= self.total


def after_round(
    run: Run, result: RoundReport, now: float, *, plan: PlanProgress | None = None
) -> Step:
    """Round ``state.round``'s result arrived: record it, then the loop's next step.

    ``plan``: a plan-driven loop's plan as read after the round (``None``: no plan, or it
    could not be read). A round that ticked a task made progress; one that leaves every
    task done completes the loop, as a worker's ``done`` does.
    """
    if result.status == "deferred":
        return _round_deferred(run, result, now)
    state = run.state
    # A cancelled result nobody here asked for (a stop finishes the loop before it comes).
    status: RoundStatus = "failed" if result.status == "cancelled" else result.status
    record = RoundRecord(
        loop_id=state.loop_id,
        round=state.round,
        status=status,
        seed_source=run.seed_source,
        output=result.output,
        error=result.error if status != "completed" else None,
        tokens=result.tokens,
        started_at=run.round_started,
        duration=result.duration,
        transcript=result.transcript,
        cost_usd=result.cost_usd,
        session_id=result.session_id,
        session_cost_usd=result.session_cost_usd,
        files_changed=result.files_changed,
        commits=result.commits,
        account=result.account,
        prompt=run.prompt,
        tasks_done=None if plan is None else plan.done,
        tasks_total=None if plan is None else plan.total,
    )
    changes: dict[str, object]
    if plan is not None:
        changes = {"tasks_done": plan.done, "tasks_total": plan.total}
        ticked = state.tasks_done is not None and plan.done > state.tasks_done
    else:
        changes, ticked = {}, False
    # The loop's `until` check decides completion where there is one: a claim of done (the
    # worker's, or every task of the plan ticked) that the check refutes is unverified.
    plan_done = plan is not None and plan.complete
    claimed = status == "completed" and (result.done or plan_done)
    check = _check_of(state, result, status)
    changes |= _check_changes(state, check, claimed=claimed)
    verified = None if check is None else check.passed  # None: no check ran
    unverified = claimed and verified is False
    record = msgspec.structs.replace(record, check=check, unverified_claim=unverified)
    last_normalized = run.last_normalized
    if status == "completed":
        normalized = normalize_output(result.output)
        previous = last_normalized
        if previous is None and state.last_output is not None:
            previous = normalize_output(state.last_output)
        last_normalized = normalized
        # A ticked task is progress, whatever the output or the workspace say.
        progress = True if ticked else result.progress
        changes |= {
            "completed_rounds": state.completed_rounds + 1,
            "last_output": result.output,
            "stale_rounds": stale_rounds_after(
                state, progress=progress, same_output=previous == normalized
            ),
            "progress_measure": "output" if result.progress is None else "workspace",
            "consecutive_failures": 0,
        }
    else:
        changes["consecutive_failures"] = state.consecutive_failures + 1
    if result.session_id is not None:
        changes["agent_session"] = result.session_id
        changes["agent_session_cost"] = result.session_cost_usd
    summarizing = state.moved(
        "summarizing",
        tokens_used=state.tokens_used + result.tokens,
        cost_usd=state.cost_usd + result.cost_usd,
        deferrals=0,
        **changes,
    )
    finished = RoundFinished(
        loop_id=state.loop_id,
        at=now,
        round=record.round,
        rounds=state.spec.rounds,
        status=status,
        duration=result.duration,
        tokens=result.tokens,
        error=record.error,
        cost_usd=result.cost_usd,
        files_changed=result.files_changed,
        commits=result.commits,
        tasks_done=record.tasks_done,
        tasks_total=record.tasks_total,
        check=check,
        unverified_claim=unverified,
    )
    run = msgspec.structs.replace(
        run,
        state=summarizing,
        summary=_with_summary(run.summary, record),
        last_normalized=last_normalized,
    )
    # The Breaker's ledger first: there before the next round's check.
    attempt: list[Effect] = [RecordAttempt(record)]
    if state.spec.until is not None:
        # Complete when the check passes (and, for a plan-driven loop, every task is done).
        if verified and (state.spec.plan is None or plan_done):
            reason = (
                f"objective met: the check `{state.spec.until}` passed after round {record.round}"
            )
            run, effects = finish(
                run, "complete", now, record=record, events=(finished,), reason=reason
            )
        else:
            run, effects = decide(run, now, record=record, events=(finished,))
    # Every task of the plan done counts as the worker's claim that the objective is met.
    elif claimed:
        # The worker found the objective met: the loop is complete now (rolebox's W3).
        reason = f"objective met in round {record.round}"
        if plan_done and not result.done:
            assert plan is not None
            reason = (
                f"every task of the plan {state.spec.plan} is done "
                f"({plan.done}/{plan.total}) in round {record.round}"
            )
        run, effects = finish(
            run, "complete", now, record=record, events=(finished,), reason=reason
        )
    else:
        run, effects = decide(run, now, record=record, events=(finished,))
    return run, attempt + effects


def _check_of(state: LoopState, result: RoundReport, status: RoundStatus) -> CheckRecord | None:
    """The ``until`` check of a completed round of a loop with one, with its round."""
    if status != "completed" or state.spec.until is None or result.check is None:
        return None
    return msgspec.structs.replace(result.check, round=state.round)


def _check_changes(
    state: LoopState, check: CheckRecord | None, *, claimed: bool
) -> dict[str, object]:
    """What the loop's ``until`` check after a round changes in its state: the check the next
    prompt shows, failures in a row, and claims of done in a row that it refuted."""
    if check is None:
        return {}
    return {
        "last_check": check,
        "failing_checks": 0 if check.passed else state.failing_checks + 1,
        "unverified_claims": state.unverified_claims + 1 if claimed and not check.passed else 0,
    }


def _round_deferred(run: Run, result: RoundReport, now: float) -> Step:
    """A usage or rate limit held the round back: not a failure, the same round later."""
    waiting, record, deferred = defer_round(
        run.state,
        until=result.deferred_until,
        reason=result.error or "usage limit",
        now=now,
        tokens=result.tokens,
        cost_usd=result.cost_usd,
    )
    if result.session_id is not None:
        waiting = msgspec.structs.replace(
            waiting, agent_session=result.session_id, agent_session_cost=result.session_cost_usd
        )
    record = msgspec.structs.replace(
        record,
        started_at=run.round_started,
        duration=result.duration,
        session_id=result.session_id,
        session_cost_usd=result.session_cost_usd,
        account=result.account,
    )
    run = msgspec.structs.replace(run, state=waiting, summary=_with_summary(run.summary, record))
    if waiting.stop_requested is not None:  # a stop after the round: the wait is moot
        return finish(
            run, "cancelled", now, record=record, events=(deferred,), reason="stopped by request"
        )
    if waiting.pause_requested:  # paused at this round; resume waits out the limit
        paused = waiting.moved("paused", pause_requested=False)
        note = LoopPaused(loop_id=waiting.loop_id, at=now, round=paused.round)
        run, save = _save(run, paused, record, (deferred, note))
        return run, [save]
    run, save = _save(run, waiting, record, (deferred,))
    run, effects = prepare_round(run, now)
    return run, [save, *effects]


def decide(
    run: Run, now: float, *, record: RoundRecord | None = None, events: Sequence[AnyEvent] = ()
) -> Step:
    """After a round (state ``summarizing``): complete (escalated when the cap is reached
    without one completed round), cancelled (a stop after the round), paused, or the next
    round."""
    state = run.state
    nxt = next_phase(state)
    last = state.last_check
    if nxt == "complete" and state.spec.until is not None and (last is None or not last.passed):
        # The rounds ran out before the check passed: not a success (it passing completes
        # the loop at once, in after_round).
        how = "never ran" if last is None else f"still failed after round {state.round}"
        return finish(
            run,
            "escalated",
            now,
            record=record,
            events=events,
            reason=f"the {state.spec.rounds} rounds ran out and the check `{state.spec.until}` "
            f"{how}",
            trigger="until_not_met",
        )
    if nxt == "complete" and state.spec.plan is not None and not _plan_all_done(state):
        # The rounds ran out with tasks of the plan still open: not a success either (every
        # task done completes the loop at once, in after_round; docs/plans.md).
        progress = (
            "could not be read"
            if state.tasks_total is None
            else f"has {state.tasks_total - (state.tasks_done or 0)} of its "
            f"{state.tasks_total} tasks still open"
        )
        return finish(
            run,
            "escalated",
            now,
            record=record,
            events=events,
            reason=f"the {state.spec.rounds} rounds ran out and the plan {state.spec.plan} "
            f"{progress}",
            trigger="plan_not_done",
        )
    if nxt in ("complete", "cancelled"):
        return finish(run, nxt, now, record=record, events=events)
    if nxt == "escalated":  # the cap, with no completed round
        verdict = no_completed_round(state, record.error if record is not None else None)
        return finish(
            run,
            nxt,
            now,
            record=record,
            events=events,
            reason=verdict.reason,
            trigger=verdict.trigger,
        )
    if nxt == "paused":
        paused = state.moved("paused", round=state.round + 1, pause_requested=False)
        note = LoopPaused(loop_id=state.loop_id, at=now, round=paused.round)
        run, save = _save(run, paused, record, (*events, note))
        return run, [save]
    # The next round's intent is committed after this write, so its dispatch (which waits
    # for that commit) also waits for this one: no need to wait here.
    following = state.moved("dispatching", round=state.round + 1, **delayed(state, now))
    run, save = _save(run, following, record, events)
    run, effects = next_round(run, now)
    return run, [save, *effects]


def _plan_all_done(state: LoopState) -> bool:
    """Whether a plan-driven loop's plan, as last read, has every task done."""
    total = state.tasks_total
    return total is not None and state.tasks_done is not None and state.tasks_done >= total


# -- recovery -------------------------------------------------------------------------------


#: How a waiting loop's ``reason`` starts (see :func:`on_recovery`).
WAITING_FOR_WORKER = "waiting for its worker: "


def on_recovery(run: Run, worker_problem: str | None, now: float, *, retry: float = 30.0) -> Step:
    """A loop resumed by a new runner (a restart, a recovery). When its worker cannot be
    built (``worker_problem``: a program not on PATH, a module that does not import, often
    a passing mistake) it waits in its phase, its session and rounds untouched, with the
    problem as its ``reason``, and is looked at again after ``retry`` seconds; only a stop
    ends it. Else it goes on from its committed phase, with a ``LoopRecovered`` note (unless
    it had not started yet)."""
    state = run.state
    if worker_problem is not None:
        why = f"{WAITING_FOR_WORKER}{worker_problem}"
        if state.reason == why:  # still the same: nothing new to record or tell
            return run, [Wake(retry)]
        waiting = state.moved(state.phase, reason=why)
        told = LoopWaiting(
            loop_id=state.loop_id, at=now, round=state.round, rounds=state.spec.rounds, reason=why
        )
        run, save = _save(run, waiting, None, (told,))
        return run, [save, Wake(retry)]
    if state.reason is not None and state.reason.startswith(WAITING_FOR_WORKER):
        run = msgspec.structs.replace(run, state=state.moved(state.phase, reason=None))
    # (A cleared reason is committed with the next save: each phase's next step makes one.)
    if state.phase != "activating":
        note = LoopRecovered(loop_id=state.loop_id, at=now, phase=state.phase, round=state.round)
        run = msgspec.structs.replace(run, unsaved=(*run.unsaved, note))
    return resume_step(run, now)


def on_give_up(run: Run, reason: str, now: float) -> Step:
    """The loop's runners keep crashing: end it in ``error`` (its round in flight, if any,
    cancelled and recorded ``failed``) rather than take every other loop down with it."""
    effects: list[Effect] = []
    if run.state.phase == "awaiting_worker":
        effects.append(CancelInFlight())
    record = _in_flight_record(run.state, "failed", "the loop ended while this round was in flight")
    run, ending = finish(run, "error", now, record=record, reason=reason)
    return run, effects + ending


def resume_step(run: Run, now: float) -> Step:
    """The next step from the committed phase (how every wake-up, and a recovery, go on).
    A round dispatched before a restart is dispatched again under the same key (the store
    records it once, whichever run reports)."""
    state = run.state
    phase = state.phase
    if phase in ("activating", "dispatching"):
        return prepare_round(run, now)
    if phase == "awaiting_worker":
        prompt = build_prompt(state)
        run = msgspec.structs.replace(
            run, round_started=now, seed_source=prompt.seed_source, prompt=prompt.text
        )
        effects: list[Effect] = [Dispatch(prompt), ArmWatchdog()]
        if run.unsaved:
            run, save = _save(run, state)
            effects.append(save)
        return run, effects
    if phase in ("summarizing", "finalizing"):
        return decide(run, now)
    if run.unsaved:  # paused: nothing to do until resume, but log the recovery
        run, save = _save(run, state)
        return run, [save]
    return run, []


# -- commands -------------------------------------------------------------------------------


def on_control(run: Run, command: Control, stop_mode: StopMode, now: float) -> Step:
    """A command (answered with the state once its effect is durable: its commits wait)."""
    state = run.state
    if command == "status" or state.terminal:
        return run, []
    if command == "stop":
        if stop_mode == "after_round" and state.phase == "awaiting_worker":
            run, save = _save(
                run, state.moved(state.phase, stop_requested="after_round"), wait=True
            )
            return run, [save]
        effects: list[Effect] = []
        in_flight = None
        if state.phase == "awaiting_worker":
            # Cancel the round's scope now; its result, if any, arrives to nobody.
            effects.append(CancelInFlight())
            in_flight = RoundRecord(
                loop_id=state.loop_id,
                round=state.round,
                status="cancelled",
                seed_source=run.seed_source,
                started_at=run.round_started,
                duration=now - run.round_started,
                error="stopped",
            )
        final, record, events = cancel_loop(
            state,
            "stopped by request",
            now,
            rounds=run.summary,
            in_flight=in_flight,
            stop_requested="now" if in_flight is not None else None,
        )
        run, ending = _ended(run, final, record, events, wait=True)
        return run, effects + ending
    if command == "pause":
        if state.phase == "awaiting_worker":
            run, save = _save(run, state.moved(state.phase, pause_requested=True), wait=True)
            return run, [save]
        if state.phase in ("activating", "dispatching"):
            paused = state.moved("paused", pause_requested=False)
            note = LoopPaused(loop_id=state.loop_id, at=now, round=paused.round)
            # A round being prepared, or a pending wake-up, is now stale.
            run, save = _save(run, paused, None, (note,), wait=True)
            return run, [Invalidate(), save]
        return run, []
    # resume
    if state.phase == "paused":
        resumed = state.moved("dispatching", **delayed(state, now))
        back = LoopResumed(loop_id=state.loop_id, at=now, round=resumed.round)
        run, save = _save(run, resumed, None, (back,), wait=True)
        run, effects = next_round(run, now)
        return run, [save, *effects]
    if state.pause_requested:
        run, save = _save(run, state.moved(state.phase, pause_requested=False), wait=True)
        return run, [save]
    return run, []
