"""Property: a supervisor under random crash sequences behaves exactly like OTP's model.

Hypothesis draws a tree (strategy, restart types, intensity) and a timed sequence of child
exits; a small pure model of OTP's rules predicts which children start how often and whether
the supervisor gives up. The run must match the model, and leave no task behind.
"""

from __future__ import annotations

from collections import Counter, deque
from typing import Any

import attrs
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopactors.actors import ChildSpec, Restart, Strategy, open_node
from loopactors.errors import RestartIntensityExceeded
from loopactors.testing import inject_crash

from .helpers import Quit, Worker, all_tasks


@attrs.frozen
class Scenario:
    strategy: Strategy
    restarts: tuple[Restart, ...]
    max_restarts: int
    max_seconds: float
    # (seconds since the previous event, child index, crash or normal exit)
    events: tuple[tuple[float, int, bool], ...]


scenarios = st.builds(
    Scenario,
    strategy=st.sampled_from(["one_for_one", "one_for_all", "rest_for_one"]),
    restarts=st.lists(
        st.sampled_from(["permanent", "transient", "temporary"]), min_size=1, max_size=4
    ).map(tuple),
    max_restarts=st.integers(0, 4),
    max_seconds=st.sampled_from([1.0, 2.5, 5.0]),
    events=st.lists(
        st.tuples(st.sampled_from([0.0, 0.5, 1.0, 3.0]), st.integers(0, 3), st.booleans()),
        max_size=12,
    ).map(tuple),
)


@attrs.define
class Prediction:
    starts: Counter[int]
    escalated_at: int | None  # index of the event that made the supervisor give up


def predict(s: Scenario) -> Prediction:
    """OTP's supervisor rules, written plainly."""
    n = len(s.restarts)
    present = list(range(n))  # child order; temporary children leave it
    running = set(present)
    starts: Counter[int] = Counter(dict.fromkeys(range(n), 1))
    times: deque[float] = deque()
    now = 0.0
    for index, (gap, target, crash) in enumerate(s.events):
        now += gap
        child = target % n
        if child not in running:
            continue  # the test skips events aimed at a child that is not running
        running.discard(child)
        kind = s.restarts[child]
        if kind == "temporary" or (kind == "transient" and not crash):
            if kind == "temporary":
                present.remove(child)
            continue
        times.append(now)
        while times and times[0] < now - s.max_seconds:
            times.popleft()
        if len(times) > s.max_restarts:
            return Prediction(starts, index)
        if s.strategy == "one_for_one":
            group = [child]
        elif s.strategy == "one_for_all":
            group = list(present)
        else:
            group = present[present.index(child) :]
        for other in group:
            if other != child and s.restarts[other] == "temporary":
                present.remove(other)
                running.discard(other)
        for member in group:
            if member in present:
                starts[member] += 1
                running.add(member)
    return Prediction(starts, None)


async def run_scenario(s: Scenario) -> Prediction:
    starts: Counter[int] = Counter()

    def factory(i: int) -> Any:
        def make() -> Worker:
            starts[i] += 1
            return Worker(str(i))

        return make

    n = len(s.restarts)
    children = [
        ChildSpec(f"c{i}", factory(i), restart=s.restarts[i], name=f"c{i}") for i in range(n)
    ]
    escalated_at: int | None = None
    current = -1
    try:
        async with open_node(
            children,
            strategy=s.strategy,
            max_restarts=s.max_restarts,
            max_seconds=s.max_seconds,
        ) as node:
            for current, (gap, target, crash) in enumerate(s.events):  # noqa: B007
                await trio.sleep(gap)
                name = f"c{target % n}"
                ref = node.whereis(name)
                if ref is None:
                    continue
                if crash:
                    inject_crash(node, name)
                else:
                    ref.cast_nowait(Quit())
                await trio.testing.wait_all_tasks_blocked()
    except RestartIntensityExceeded:
        escalated_at = current
    # Invariant: nothing of the tree is left running, whatever happened.
    assert all_tasks(trio.lowlevel.current_task()) == []
    return Prediction(starts, escalated_at)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios)
def test_supervisor_matches_the_otp_model(scenario: Scenario) -> None:
    expected = predict(scenario)
    actual = trio.run(run_scenario, scenario, clock=trio.testing.MockClock(autojump_threshold=0))
    assert actual.escalated_at == expected.escalated_at
    assert actual.starts == expected.starts
