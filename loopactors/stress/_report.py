"""The stress report: invariants read back from the store, and the figures around them.

Pure: no trio, no runtime. :func:`check_loops` takes what a store holds (loop states, their
round records and event logs) and says which promise, if any, was broken.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Mapping, Sequence

import msgspec

from ..loops import AnyEvent, LoopState, RoundFinished, RoundRecord

__all__ = [
    "InvariantCheck",
    "KillTotals",
    "KillTrial",
    "StoredLoop",
    "StressReport",
    "check_loops",
    "percentile",
    "render_report",
]

#: At most this many offending loops are named per invariant (the count is always exact).
MAX_EXAMPLES = 5


class StoredLoop(msgspec.Struct, frozen=True, kw_only=True):
    """One loop as read back from the store."""

    state: LoopState
    rounds: tuple[RoundRecord, ...]
    events: tuple[AnyEvent, ...] = ()


class InvariantCheck(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    description: str
    checked: int
    violations: int
    examples: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.violations == 0


class _RoundRate:
    """Completed rounds per second, for a record of both (0 when no time passed)."""

    __slots__ = ()
    rounds_completed: int
    seconds: float

    @property
    def rounds_per_s(self) -> float:
        return self.rounds_completed / self.seconds if self.seconds > 0 else 0.0


class KillTrial(msgspec.Struct, _RoundRate, frozen=True, kw_only=True):
    trial: int
    #: False when the child finished (or failed) before the kill came.
    killed: bool
    #: Rounds the child reported done when it was killed.
    rounds_at_kill: int
    seconds: float
    exit_code: int | None = None
    #: Loops this trial added to the store (admitted before the kill), and completed rounds
    #: it added, read from the store after it.
    loops_admitted: int = 0
    rounds_completed: int = 0


class KillTotals(msgspec.Struct, _RoundRate, frozen=True, kw_only=True):
    """The kill trials and the resume after them, taken together."""

    #: ``--loops``: the new loops each trial's child starts.
    loops_per_trial: int
    #: Loops the resume found live (left by the children) and completed rounds it added.
    resumed_loops: int
    resume_rounds: int
    resume_seconds: float
    #: Every loop in the store, and every completed round, over the trials and the resume.
    loops: int
    rounds_completed: int
    seconds: float


class StressReport(msgspec.Struct, frozen=True, kw_only=True):
    loops: int
    rounds_per_loop: int
    worker: str
    store: str
    crash_rate: float
    stop_rate: float
    seed: int
    seconds: float
    rounds_completed: int
    rounds_per_s: float
    p50_transition_ms: float | None
    p99_transition_ms: float | None
    peak_rss_mb: float
    faults_injected: int
    actor_restarts: int
    phases: dict[str, int]
    invariants: tuple[InvariantCheck, ...]
    kill_trials: tuple[KillTrial, ...] = ()
    kill_totals: KillTotals | None = None
    ok: bool = False


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (0..1) by nearest rank; ``None`` for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.5) - 1))]


def _numbers(rounds: Iterable[RoundRecord]) -> list[int]:
    return [record.round for record in rounds]


def _completed_events(events: Iterable[AnyEvent]) -> collections.Counter[int]:
    return collections.Counter(
        e.round for e in events if isinstance(e, RoundFinished) and e.status == "completed"
    )


def check_loops(
    loops: Sequence[StoredLoop], *, rounds: int, expected_loops: int | None = None
) -> list[InvariantCheck]:
    """Every promise the runtime makes about loops, checked over what the store holds.

    ``rounds`` is how many rounds each loop was asked for; ``expected_loops`` how many loops
    were started (the store must hold each of them).
    """
    problems: dict[str, list[str]] = collections.defaultdict(list)
    counts = collections.Counter[str]()

    def check(name: str, holds: bool, loop_id: str, detail: str) -> None:
        counts[name] += 1
        if not holds:
            problems[name].append(f"{loop_id}: {detail}")

    for loop in loops:
        state, records = loop.state, loop.rounds
        numbers = _numbers(records)
        loop_id = state.loop_id
        check("not_live", state.terminal, loop_id, f"left in phase {state.phase}")
        duplicates = sorted(n for n, c in collections.Counter(numbers).items() if c > 1)
        check("recorded_once", not duplicates, loop_id, f"rounds {duplicates} recorded twice")
        completed = [r.round for r in records if r.status == "completed"]
        finished_twice = sorted(n for n, c in _completed_events(loop.events).items() if c > 1)
        check(
            "finished_once",
            not finished_twice,
            loop_id,
            f"rounds {finished_twice} reported completed twice in the event log",
        )
        if state.terminal:
            running = [r.round for r in records if r.status == "running"]
            check("none_running", not running, loop_id, f"rounds {running} still running")
        check(
            "completed_count",
            len(completed) == state.completed_rounds,
            loop_id,
            f"{len(completed)} completed rounds recorded, state says {state.completed_rounds}",
        )
        if state.phase == "complete":
            check(
                "complete_has_every_round",
                sorted(numbers) == list(range(1, rounds + 1)) and len(completed) == rounds,
                loop_id,
                f"complete with rounds {sorted(numbers)} ({len(completed)} completed)",
            )
        if state.phase == "cancelled":
            check(
                "cancelled_keeps_rounds",
                sorted(numbers) == list(range(1, len(numbers) + 1))
                and completed == list(range(1, len(completed) + 1)),
                loop_id,
                f"cancelled with rounds {sorted(numbers)}, completed {completed}",
            )
    violations = {name: len(found) for name, found in problems.items()}
    if expected_loops is not None:
        # Every loop started is checked: one missing loop is one violation.
        counts["all_stored"] = expected_loops
        if len(loops) != expected_loops:
            problems["all_stored"].append(
                f"{len(loops)} loops in the store, {expected_loops} started"
            )
            violations["all_stored"] = max(1, expected_loops - len(loops))
    return [
        InvariantCheck(
            name=name,
            description=INVARIANTS[name],
            checked=counts[name],
            violations=violations.get(name, 0),
            examples=tuple(problems[name][:MAX_EXAMPLES]),
        )
        for name in INVARIANTS
        if counts[name] or problems[name]
    ]


INVARIANTS: Mapping[str, str] = {
    "all_stored": "every loop started is in the store",
    "not_live": "no loop left live",
    "recorded_once": "no round recorded twice",
    "finished_once": "no round reported completed twice (event log)",
    "none_running": "no finished loop has a round still running",
    "completed_count": "the state's completed rounds match the records",
    "complete_has_every_round": "every complete loop has rounds 1..M, each once",
    "cancelled_keeps_rounds": "cancelled loops keep their completed rounds (1..k, in order)",
}


def phase_counts(states: Iterable[LoopState]) -> dict[str, int]:
    return dict(sorted(collections.Counter(s.phase for s in states).items()))


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} ms"


def render_report(report: StressReport) -> str:
    """The report as text, one figure a line, the invariants last."""
    totals = report.kill_totals
    settings = (
        f"worker {report.worker}, {report.store} store, crash rate {report.crash_rate}, "
        f"stop rate {report.stop_rate}, seed {report.seed}"
    )
    if totals is None:
        lines = [
            f"stress: {report.loops} loops x {report.rounds_per_loop} rounds, {settings}",
            f"  rounds completed     {report.rounds_completed}",
            f"  rounds/s             {report.rounds_per_s:.0f} (in {report.seconds:.2f} s)",
        ]
        run = ""
    else:
        trials = len(report.kill_trials)
        lines = [
            f"stress: {trials} kill trial{'s' if trials != 1 else ''}, each starting "
            f"{totals.loops_per_trial} loops x {report.rounds_per_loop} rounds in a child "
            f"process SIGKILLed at a random round, then a resume of what they left; {settings}",
        ]
        for trial in report.kill_trials:
            how = (
                f"SIGKILL after {trial.rounds_at_kill} rounds"
                if trial.killed
                else f"finished before the kill (exit {trial.exit_code})"
            )
            lines.append(
                f"  kill trial {trial.trial:<9} {trial.loops_admitted} loops admitted, "
                f"{trial.rounds_completed} rounds completed in {trial.seconds:.2f} s "
                f"({trial.rounds_per_s:.0f} rounds/s), {how}"
            )
        resume_rate = (
            totals.resume_rounds / totals.resume_seconds if totals.resume_seconds > 0 else 0.0
        )
        lines += [
            f"  resume               {totals.resumed_loops} loops resumed, "
            f"{totals.resume_rounds} rounds completed in {totals.resume_seconds:.2f} s "
            f"({resume_rate:.0f} rounds/s)",
            f"  in total             {totals.loops} loops, {totals.rounds_completed} rounds "
            f"completed in {totals.seconds:.2f} s ({totals.rounds_per_s:.0f} rounds/s)",
        ]
        run = ", in the resume"
    lines += [
        f"  round transition     p50 {_ms(report.p50_transition_ms)}, "
        f"p99 {_ms(report.p99_transition_ms)}{run}",
        f"  peak RSS             {report.peak_rss_mb:.0f} MB{run}",
        f"  faults injected      {report.faults_injected} (actor crashes caused by "
        f"--crash-rate{run})",
        f"  actor restarts       {report.actor_restarts} (actors started again by their "
        f"supervisor or by recovery{run}: one fault can restart several"
        + ("; a trial's SIGKILL ends a whole process, counted above, not here)" if run else ")"),
        "  loops per phase      "
        + (", ".join(f"{phase} {n}" for phase, n in report.phases.items()) or "none"),
    ]
    lines.append("invariants (read back from the store):")
    for inv in report.invariants:
        mark = "ok  " if inv.ok else "FAIL"
        lines.append(f"  {mark} {inv.description} ({inv.checked} checked)")
        lines.extend(f"       {example}" for example in inv.examples)
        if inv.violations > len(inv.examples):
            lines.append(f"       ... {inv.violations} violations in all")
    lines.append("all invariants hold" if report.ok else "INVARIANTS VIOLATED")
    return "\n".join(lines)
