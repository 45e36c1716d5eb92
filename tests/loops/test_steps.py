"""The LoopRunner's decisions (loops.steps), as plain functions: no trio, no actors.

Properties over generated loop states, round results and commands: a round is recorded once
with the loop's counters moved accordingly, a loop ends with exactly one commit carrying its
final event (every round's summary in it), commands keep the phase machine legal, and the
one cancelled-loop builder closes a round in flight.
"""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from loopactors.loops import (
    CheckRecord,
    LoopFinished,
    LoopPaused,
    LoopRecovered,
    LoopResumed,
    LoopSpec,
    LoopStarted,
    LoopState,
    LoopWaiting,
    Phase,
    Prompt,
    RoundDeferred,
    RoundFinished,
    RoundRecord,
    RoundStarted,
    RoundSummary,
    after_round,
    build_prompt,
    cancel_loop,
    dispatch_round,
    finish,
    on_control,
    on_give_up,
    on_recovery,
    resume_step,
)
from loopactors.loops import steps as fx

NOW = 1_700_000_000.0


class RoundResult(msgspec.Struct, frozen=True, kw_only=True):
    """A round's result as a decision reads it (``loops.steps.RoundReport``); the workers'
    ``RoundResult`` has these fields, but importing workers would load trio."""

    status: Any
    output: str = ""
    error: str | None = None
    tokens: int = 0
    duration: float = 0.0
    done: bool = False
    transcript: tuple[dict[str, Any], ...] = ()
    cost_usd: float = 0.0
    session_id: str | None = None
    session_cost_usd: float | None = None
    files_changed: int | None = None
    commits: int | None = None
    progress: bool | None = None
    deferred_until: float | None = None
    check: CheckRecord | None = None
    account: str | None = None


specs = st.builds(
    LoopSpec,
    task=st.sampled_from(["TASK", "fix it"]),
    rounds=st.integers(1, 6),
    mode=st.sampled_from(["inherit", "fresh"]),
    inter_round_delay=st.sampled_from([0.0, 2.5]),
)


@st.composite
def live_states(draw: st.DrawFn, phases: tuple[str, ...] | None = None) -> LoopState:
    spec = draw(specs)
    # (``finalizing`` lasts only inside the commit that completes a loop.)
    live = ("activating", "dispatching", "awaiting_worker", "summarizing", "paused")
    phase = draw(st.sampled_from(phases or live))
    round_number = draw(st.integers(1, spec.rounds))
    completed = draw(st.integers(0, round_number - 1))
    return LoopState(
        loop_id="L1",
        spec=spec,
        phase=phase,  # type: ignore[arg-type]
        round=round_number,
        completed_rounds=completed,
        last_output=draw(st.none() | st.sampled_from(["out", "round 3 of 5: out"])),
        stale_rounds=draw(st.integers(0, 1)),
        consecutive_failures=draw(st.integers(0, 2)),
        tokens_used=draw(st.integers(0, 1000)),
        stop_requested=draw(st.none() | st.just("after_round")),
        pause_requested=draw(st.booleans()),
        started_at=NOW - 10,
    )


results = st.builds(
    RoundResult,
    status=st.sampled_from(["completed", "failed", "timed_out", "cancelled", "deferred"]),
    output=st.sampled_from(["", "out", "other"]),
    error=st.none() | st.just("boom"),
    tokens=st.integers(0, 500),
    duration=st.floats(0, 100),
    done=st.booleans(),
    cost_usd=st.sampled_from([0.0, 0.25]),
    session_id=st.none() | st.just("s-1"),
    progress=st.none() | st.booleans(),
    deferred_until=st.none() | st.just(NOW + 60),
)

STATUSES = st.sampled_from(["completed", "failed"])

# What a runner keeps: one summary per round, by round.
summaries = st.lists(st.integers(1, 6), max_size=4, unique=True).flatmap(
    lambda rounds: st.tuples(
        *(
            st.builds(
                RoundSummary, round=st.just(n), status=st.sampled_from(["completed", "failed"])
            )
            for n in sorted(rounds)
        )
    ).map(list)
)


def saves(effects: list[fx.Effect]) -> list[fx.Save]:
    return [e for e in effects if isinstance(e, fx.Save)]


def finished_events(effects: list[fx.Effect]) -> list[LoopFinished]:
    return [ev for s in saves(effects) for ev in s.events if isinstance(ev, LoopFinished)]


def assert_well_ended(run: fx.Run, effects: list[fx.Effect], phase: str) -> LoopFinished:
    """A loop ends with one commit of its final state carrying LoopFinished (last), telling
    the runtime once it is durable, and the runner stops after it."""
    (ending,) = [s for s in saves(effects) if s.state.terminal]
    assert ending.state.phase == phase
    assert ending.then == (fx.Ended(ending.state),)
    assert isinstance(ending.events[-1], LoopFinished)
    done = ending.events[-1]
    assert done.phase == phase
    assert done.completed_rounds == ending.state.completed_rounds
    rounds = [s.round for s in done.summary]
    assert rounds == sorted(set(rounds))
    if ending.record is not None:
        assert (ending.record.round, ending.record.status) in {
            (s.round, s.status) for s in done.summary
        }
    assert effects[-1] == fx.Halt()
    assert fx.Invalidate() in effects
    assert run.state == ending.state
    return done


# -- after a round ------------------------------------------------------------------------


@given(live_states(("awaiting_worker",)), results, summaries)
def test_a_round_result_is_recorded_once_and_moves_the_counters(
    state: LoopState, result: RoundResult, summary: list[RoundSummary]
) -> None:
    before = fx.Run(state=state, summary=tuple(summary), round_started=NOW - 5)
    run, effects = after_round(before, result, NOW)
    records = [s.record for s in saves(effects) if s.record is not None]
    assert len(records) == 1
    (record,) = records
    assert (record.loop_id, record.round) == (state.loop_id, state.round)
    assert run.state.tokens_used == state.tokens_used + result.tokens
    assert run.state.loop_id == state.loop_id
    if result.status == "deferred":
        assert record.status == "deferred"
        assert run.state.completed_rounds == state.completed_rounds
        assert run.state.consecutive_failures == state.consecutive_failures
        assert not any(isinstance(e, fx.RecordAttempt) for e in effects)  # not an attempt
        assert any(isinstance(ev, RoundDeferred) for s in saves(effects) for ev in s.events)
        if not state.stop_requested:
            assert run.state.round == state.round or run.state.terminal
        return
    # The ledger hears of the attempt before anything is committed.
    assert effects[0] == fx.RecordAttempt(record)
    expected = "failed" if result.status == "cancelled" else result.status
    assert record.status == expected
    events = [ev for s in saves(effects) for ev in s.events]
    assert [ev.round for ev in events if isinstance(ev, RoundFinished)] == [state.round]
    if expected == "completed":
        assert run.state.completed_rounds == state.completed_rounds + 1
        assert run.state.consecutive_failures == 0
        assert run.state.last_output == result.output
    else:
        assert run.state.completed_rounds == state.completed_rounds
        assert run.state.consecutive_failures == state.consecutive_failures + 1
    assert_next_step(state, run, effects, objective_met=expected == "completed" and result.done)


def assert_next_step(
    state: LoopState, run: fx.Run, effects: list[fx.Effect], *, objective_met: bool
) -> None:
    """What follows a recorded round: the objective, the cap, a stop, a pause, or the next."""
    if objective_met:
        done = assert_well_ended(run, effects, "complete")
        assert done.reason == f"objective met in round {state.round}"
    elif state.round >= state.spec.rounds:  # the cap: a success only with a completed round
        if run.state.completed_rounds:
            assert_well_ended(run, effects, "complete")
        else:
            done = assert_well_ended(run, effects, "escalated")
            assert done.trigger == "no_completed_round"
    elif state.stop_requested is not None:
        assert_well_ended(run, effects, "cancelled")
    elif state.pause_requested:
        assert run.state.phase == "paused"
        assert run.state.round == state.round + 1
        assert isinstance(saves(effects)[-1].events[-1], LoopPaused)
    else:
        assert run.state.phase == "dispatching"
        assert run.state.round == state.round + 1
        nxt = effects[-1]
        if state.spec.inter_round_delay > 0:
            assert nxt == fx.Wake(state.spec.inter_round_delay)
        else:
            assert isinstance(nxt, fx.CheckRound)
            assert nxt.state.round == state.round + 1


@given(live_states(("dispatching",)), st.booleans())
def test_a_rounds_intent_is_committed_before_its_dispatch(state: LoopState, first: bool) -> None:
    prompt = Prompt(text="TASK", seed_source="task")
    run, effects = dispatch_round(fx.Run(state=state, announce=first), prompt, NOW)
    save, watch = effects
    assert isinstance(save, fx.Save)
    assert save == fx.Save(
        state=run.state, record=save.record, events=save.events, then=(fx.Dispatch(prompt),)
    )
    assert watch == fx.ArmWatchdog()
    assert run.state.phase == "awaiting_worker"
    assert isinstance(save, fx.Save)
    assert save.record is not None
    assert save.record.status == "running"
    kinds = [type(ev) for ev in save.events]
    assert kinds == ([LoopStarted] if first else []) + [RoundStarted]
    assert (run.announce, run.round_started) == (False, NOW)


# -- commands -------------------------------------------------------------------------------


@given(live_states(), st.sampled_from(["stop", "pause", "resume", "status"]), summaries)
def test_commands_keep_the_phase_machine_legal_and_wait_for_durability(
    state: LoopState, command: Any, summary: list[RoundSummary]
) -> None:
    before = fx.Run(state=state, summary=tuple(summary), round_started=NOW - 3)
    run, effects = on_control(before, command, "now", NOW)
    if command == "status":
        assert (run, effects) == (before, [])
        return
    for save in saves(effects):
        assert save.wait  # a command is answered once its effect is durable
    if command == "stop":
        done = assert_well_ended(run, effects, "cancelled")
        assert done.reason == "stopped by request"
        if state.phase == "awaiting_worker":
            assert effects[0] == fx.CancelInFlight()  # the round's scope first
            (ending,) = saves(effects)
            assert ending.record is not None
            assert (ending.record.status, ending.record.error) == ("cancelled", "stopped")
            assert ending.record.duration == 3.0
            assert run.state.stop_requested == "now"
        else:
            assert fx.CancelInFlight() not in effects
    elif command == "pause":
        if state.phase == "awaiting_worker":
            assert run.state.pause_requested
            assert run.state.phase == "awaiting_worker"
        elif state.phase in ("activating", "dispatching"):
            assert run.state.phase == "paused"
            assert effects[0] == fx.Invalidate()  # a round being prepared is now stale
        else:
            assert effects == []
    elif state.phase == "paused":
        assert run.state.phase == "dispatching"
        assert isinstance(saves(effects)[0].events[-1], LoopResumed)
    elif state.pause_requested:
        assert not run.state.pause_requested
    else:
        assert effects == []


@given(live_states(("awaiting_worker",)))
def test_stop_after_the_round_only_marks_the_state(state: LoopState) -> None:
    run, effects = on_control(fx.Run(state=state), "stop", "after_round", NOW)
    assert effects == [fx.Save(state=run.state, wait=True)]
    assert run.state.stop_requested == "after_round"
    assert run.state.phase == "awaiting_worker"


# -- ending and recovery --------------------------------------------------------------------


@given(live_states(("dispatching", "summarizing")), summaries)
def test_finish_commits_the_final_state_once(state: LoopState, summary: list[RoundSummary]) -> None:
    # The breaker escalates before a round; a loop completes after one.
    phase: Phase = "escalated" if state.phase == "dispatching" else "complete"
    run, effects = finish(fx.Run(state=state, summary=tuple(summary)), phase, NOW, reason="r")
    done = assert_well_ended(run, effects, phase)
    assert {s.round for s in done.summary} == {s.round for s in summary}


@given(live_states(), st.sampled_from(["run.sh is gone", None]))
def test_recovery_waits_for_a_worker_that_cannot_be_built_else_notes_it(
    state: LoopState, problem: str | None
) -> None:
    run, effects = on_recovery(fx.Run(state=state), problem, NOW, retry=30.0)
    if problem is not None:
        # Nothing ends and nothing is lost: the same phase, round and session, a reason.
        why = f"waiting for its worker: {problem}"
        (save,) = saves(effects)
        assert save.record is None
        assert save.then == ()
        assert effects == [save, fx.Wake(30.0)]
        waiting = run.state
        assert waiting.phase == state.phase
        assert waiting.reason == why
        assert msgspec.structs.replace(waiting, reason=state.reason, updated_at=0.0) == (
            msgspec.structs.replace(state, updated_at=0.0)
        )
        assert [type(e) for e in save.events] == [LoopWaiting]
        # Looked at again, still broken: no second record or event, another wait.
        again, more = on_recovery(run, problem, NOW + 30, retry=30.0)
        assert (again.state, more) == (waiting, [fx.Wake(30.0)])
        # Mended: the loop goes on from its phase, as any recovered loop, without the reason.
        mended, steps = on_recovery(run, None, NOW + 60, retry=30.0)
        expected = on_recovery(fx.Run(state=state), None, NOW + 60, retry=30.0)[0]
        assert mended.state.reason == expected.state.reason
        assert mended.state.phase == expected.state.phase
        assert all(not (s.state.reason or "").startswith("waiting") for s in saves(steps))
        return
    events = [ev for s in saves(effects) for ev in s.events]
    notes = [ev for ev in (*run.unsaved, *events) if isinstance(ev, LoopRecovered)]
    assert len(notes) == (0 if state.phase == "activating" else 1)
    if state.phase == "awaiting_worker":  # dispatched again under the same key
        assert isinstance(effects[0], fx.Dispatch)
        assert effects[1] == fx.ArmWatchdog()


@given(live_states())
def test_giving_up_ends_the_loop_in_error(state: LoopState) -> None:
    run, effects = on_give_up(fx.Run(state=state), "crashed 6 times", NOW)
    assert_well_ended(run, effects, "error")
    assert (fx.CancelInFlight() in effects) == (state.phase == "awaiting_worker")


@given(live_states(("paused",)))
def test_a_paused_loop_does_nothing_until_resumed(state: LoopState) -> None:
    assert resume_step(fx.Run(state=state), NOW) == (fx.Run(state=state), [])


# -- the one cancelled-loop builder ----------------------------------------------------------


@given(live_states(), st.lists(st.integers(1, 6), max_size=4, unique=True))
def test_cancel_loop_closes_the_round_in_flight_and_sums_up_every_round(
    state: LoopState, numbers: list[int]
) -> None:
    stored = [RoundRecord(loop_id="L1", round=n, status="completed", started_at=n) for n in numbers]
    if state.phase == "awaiting_worker":
        stored.append(
            RoundRecord(loop_id="L1", round=state.round, status="running", started_at=NOW - 1)
        )
    final, record, events = cancel_loop(state, "nobody runs it", NOW, rounds=stored)
    done = events[-1]
    assert isinstance(done, LoopFinished)
    assert final.phase == "cancelled"
    assert final.reason == "nobody runs it"
    assert done == LoopFinished(
        loop_id="L1",
        at=NOW,
        phase="cancelled",
        rounds=state.spec.rounds,
        completed_rounds=state.completed_rounds,
        summary=done.summary,
        reason="nobody runs it",
    )
    if state.phase == "awaiting_worker":
        assert record is not None
        assert (record.round, record.status) == (state.round, "cancelled")
        assert record.started_at == NOW - 1  # what the intent recorded is kept
        assert record.error == "the loop ended while this round was in flight: nobody runs it"
        # The round started on the stream is closed on it, before the loop's end.
        assert events[:-1] == (
            RoundFinished(
                loop_id="L1",
                at=NOW,
                round=state.round,
                rounds=state.spec.rounds,
                status="cancelled",
                duration=None,
                error=record.error,
            ),
        )
    else:
        assert record is None
        assert events == (done,)
    expected = {n: "completed" for n in numbers}
    if record is not None:
        expected[record.round] = "cancelled"
    assert [(s.round, s.status) for s in done.summary] == sorted(expected.items())


def test_cancel_loop_may_mark_the_stop() -> None:
    state = LoopState(loop_id="L1", spec=LoopSpec(task="T"), phase="dispatching")
    final, _, _ = cancel_loop(state, "stopped", NOW, stop_requested="now")
    assert final.stop_requested == "now"
    assert msgspec.structs.replace(final, stop_requested=None, updated_at=0.0) == (
        msgspec.structs.replace(state, phase="cancelled", reason="stopped", updated_at=0.0)
    )


def test_a_round_keeps_its_sessions_running_cost_for_the_next_one() -> None:
    state = LoopState(loop_id="L", spec=LoopSpec(task="T", rounds=3), phase="awaiting_worker")
    result = RoundResult(
        status="completed", output="o", cost_usd=0.25, session_id="s1", session_cost_usd=0.75
    )
    run, effects = fx.after_round(fx.Run(state=state), result, NOW)
    assert run.state.agent_session == "s1"
    assert run.state.agent_session_cost == 0.75
    assert run.state.cost_usd == 0.25  # the round's cost, not the session's total
    (save,) = [e for e in effects if isinstance(e, fx.Save)][:1]
    assert save.record is not None
    assert (save.record.cost_usd, save.record.session_cost_usd) == (0.25, 0.75)
    # a deferred round (a limit) keeps the session's total too
    deferred = RoundResult(status="deferred", cost_usd=0.1, session_id="s1", session_cost_usd=0.85)
    run, _ = fx.after_round(fx.Run(state=state), deferred, NOW)
    assert (run.state.agent_session_cost, run.state.cost_usd) == (0.85, 0.1)


def test_a_failed_check_goes_into_the_next_prompt_the_same_after_a_restart() -> None:
    spec = LoopSpec(task="T", rounds=5, until="pytest -q")
    state = LoopState(loop_id="L", spec=spec, phase="awaiting_worker")
    failed = CheckRecord(command="pytest -q", exit_code=1, duration=2.0, output="1 failed\n")
    result = RoundResult(status="completed", output="o", done=True, check=failed)
    run, _ = fx.after_round(fx.Run(state=state), result, NOW)
    after = run.state
    assert (after.failing_checks, after.unverified_claims) == (1, 1)
    assert after.phase == "dispatching"  # a claim the check refutes does not complete
    prompt = build_prompt(after)
    assert prompt.text.startswith("o\n\n---\n\nT\n\n---\n\nThe loop's check `pytest -q` failed")
    assert "failed after round 1 " in prompt.text
    assert "(exited with 1, 2.0 s)" in prompt.text
    assert "```text\n1 failed\n```" in prompt.text
    # a round dispatched again after a crash builds the same prompt from the committed state
    in_flight = after.moved("awaiting_worker")
    assert build_prompt(in_flight).text == prompt.text
    passed = CheckRecord(command="pytest -q", exit_code=0, duration=1.0)
    ok = RoundResult(status="completed", output="p", check=passed)
    run, _ = fx.after_round(fx.Run(state=in_flight), ok, NOW)
    assert run.state.phase == "complete"
    assert run.state.reason == "objective met: the check `pytest -q` passed after round 2"
