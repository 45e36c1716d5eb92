"""Supervisors: start/stop order, strategies x restart types, intensity, shutdown, dynamics."""

from __future__ import annotations

import functools
import math
from collections import Counter
from typing import Any

import pytest
import trio
import trio.testing

from loopactors.actors import (
    Actor,
    Backoff,
    ChildSpec,
    Node,
    Restart,
    Strategy,
    Supervisor,
    SupervisorRef,
    open_node,
)
from loopactors.errors import ChildStartError, RestartIntensityExceeded, SupervisorError
from loopactors.testing import inject_crash

from .helpers import Boom, Ping, Quit, Sleep, Worker


def specs(
    log: list[tuple[str, str]],
    starts: Counter[str],
    labels: str = "abc",
    restart: dict[str, Restart] | None = None,
    shutdown: float | None = None,
) -> list[ChildSpec]:
    def factory(label: str) -> Any:
        def make() -> Worker:
            starts[label] += 1
            return Worker(label, log)

        return make

    restart = restart or {}
    return [
        ChildSpec(
            label,
            factory(label),
            restart=restart.get(label, "permanent"),
            name=label,
            shutdown=shutdown,
        )
        for label in labels
    ]


async def settle() -> None:
    await trio.testing.wait_all_tasks_blocked()


async def test_children_start_in_order_and_stop_in_reverse() -> None:
    log: list[tuple[str, str]] = []
    starts: Counter[str] = Counter()
    async with open_node(specs(log, starts)) as node:
        assert [label for label, _ in log] == ["a", "b", "c"]
        assert node.registry.names() == ["a", "b", "c"]
    assert log == [
        ("a", "start"),
        ("b", "start"),
        ("c", "start"),
        ("c", "stop"),
        ("b", "stop"),
        ("a", "stop"),
    ]


async def test_a_child_is_started_only_when_its_start_hook_returned(
    autojump_clock: trio.testing.MockClock,
) -> None:
    events: list[tuple[str, float]] = []

    class Slow(Actor[Any]):
        def __init__(self, label: str) -> None:
            self.label = label

        async def on_start(self) -> None:
            events.append((self.label + " begins", trio.current_time()))
            await trio.sleep(1.0)
            events.append((self.label + " ready", trio.current_time()))

        async def handle(self, message: Any) -> Any:
            return None

    children = [ChildSpec(x, functools.partial(Slow, x)) for x in ("a", "b")]
    async with open_node(children):
        pass
    assert [e for e, _ in events] == ["a begins", "a ready", "b begins", "b ready"]
    assert events[2][1] >= events[1][1]


EXPECTED_RESTARTED = {
    "one_for_one": {"a": 1, "b": 2, "c": 1},
    "one_for_all": {"a": 2, "b": 2, "c": 2},
    "rest_for_one": {"a": 1, "b": 2, "c": 2},
}


@pytest.mark.parametrize("strategy", ["one_for_one", "one_for_all", "rest_for_one"])
@pytest.mark.parametrize("restart", ["permanent", "transient", "temporary"])
@pytest.mark.parametrize("exit_kind", ["crash", "normal"])
async def test_strategy_and_restart_type(
    strategy: Strategy, restart: Restart, exit_kind: str
) -> None:
    log: list[tuple[str, str]] = []
    starts: Counter[str] = Counter()
    children = specs(log, starts, restart={"b": restart})
    async with open_node(children, strategy=strategy) as node:
        b = node.whereis("b")
        assert b is not None
        if exit_kind == "crash":
            inject_crash(node, "b")
        else:
            await b.call(Quit())
        await settle()
        restarted = restart == "permanent" or (restart == "transient" and exit_kind == "crash")
        if restarted:
            assert dict(starts) == EXPECTED_RESTARTED[strategy]
            new_b = node.whereis("b")
            assert new_b is not None
            assert new_b != b
            assert new_b.alive
        else:
            assert dict(starts) == {"a": 1, "b": 1, "c": 1}
            assert node.whereis("b") is None
        ids = [c.id for c in await node.supervisor.which_children()]
        assert ids == (["a", "c"] if restart == "temporary" and not restarted else ["a", "b", "c"])
        stats = await node.supervisor.statistics()
        assert stats.restarts == (1 if restarted else 0)
        # The children that were not restarted are the same incarnations, untouched.
        for label in "ac":
            ref = node.whereis(label)
            assert ref is not None
            assert ref.alive


async def test_one_for_all_stops_the_others_in_reverse_then_restarts_in_order() -> None:
    log: list[tuple[str, str]] = []
    starts: Counter[str] = Counter()
    async with open_node(specs(log, starts), strategy="one_for_all") as node:
        log.clear()
        inject_crash(node, "b")
        await settle()
        assert log == [
            ("b", "crash"),
            ("c", "stop"),
            ("a", "stop"),
            ("a", "start"),
            ("b", "start"),
            ("c", "start"),
        ]


async def test_rest_for_one_restarts_the_failed_child_and_those_after_it() -> None:
    log: list[tuple[str, str]] = []
    starts: Counter[str] = Counter()
    async with open_node(specs(log, starts, "abcd"), strategy="rest_for_one") as node:
        log.clear()
        inject_crash(node, "b")
        await settle()
        assert log == [
            ("b", "crash"),
            ("d", "stop"),
            ("c", "stop"),
            ("b", "start"),
            ("c", "start"),
            ("d", "start"),
        ]


def nested(
    log: list[tuple[str, str]],
    starts: Counter[str],
    sup_starts: Counter[str],
    max_restarts: int = 3,
    max_seconds: float = 5.0,
) -> ChildSpec:
    def make() -> Supervisor:
        sup_starts["inner"] += 1
        return Supervisor(
            specs(log, starts, "xy"), max_restarts=max_restarts, max_seconds=max_seconds
        )

    return ChildSpec("inner", make, name="inner")


async def test_intensity_exceeded_escalates_exactly_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[tuple[str, str]] = []
    starts: Counter[str] = Counter()
    sup_starts: Counter[str] = Counter()
    async with open_node(
        [nested(log, starts, sup_starts, max_restarts=2)], max_restarts=10
    ) as node:
        for _ in range(3):
            inject_crash(node, "x")
            await settle()
        # Three crashes within the window: two restarts, then the inner supervisor gave up.
        # Its parent saw one failure and restarted it once (a fresh tree: x and y again).
        assert sup_starts["inner"] == 2
        assert (await node.supervisor.statistics()).restarts == 1
        assert starts == Counter({"x": 4, "y": 2})
        inner = node.whereis("inner")
        assert inner is not None
        assert inner.alive


async def test_intensity_error_names_supervisor_child_and_cause(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[tuple[str, str]] = []
    starts: Counter[str] = Counter()
    with pytest.raises(RestartIntensityExceeded) as info:
        async with open_node(specs(log, starts, "ab"), max_restarts=1, name="root") as node:
            inject_crash(node, "b")
            await settle()
            inject_crash(node, "b")
            await trio.sleep_forever()  # the node's failure cancels the block
    error = info.value
    assert error.supervisor == "root"
    assert error.child_id == "b"
    assert "more than 1 restarts within 5.0 s" in str(error)
    assert "child 'b'" in str(error)
    # Everything was stopped in reverse order before the error left the node.
    assert log[-2:] == [("b", "crash"), ("a", "stop")]


async def test_crashes_spread_beyond_the_window_never_escalate(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log: list[tuple[str, str]] = []
    starts: Counter[str] = Counter()
    async with open_node(specs(log, starts, "a"), max_restarts=1, max_seconds=5.0) as node:
        for _ in range(6):
            inject_crash(node, "a")
            await settle()
            await trio.sleep(5.5)
        assert starts["a"] == 7


async def test_zero_max_restarts_escalates_on_first_failure() -> None:
    log: list[tuple[str, str]] = []
    starts: Counter[str] = Counter()
    with pytest.raises(RestartIntensityExceeded):
        async with open_node(specs(log, starts, "a"), max_restarts=0) as node:
            inject_crash(node, "a")
            await trio.sleep_forever()
    assert starts["a"] == 1


class Stubborn(Actor[Any]):
    """Ignores graceful stops for ``linger`` seconds in its stop hook."""

    def __init__(self, linger: float, record: list[str]) -> None:
        self.linger = linger
        self.record = record

    async def handle(self, message: Any) -> Any:
        return None

    async def on_stop(self, reason: BaseException | None) -> None:
        try:
            await trio.sleep(self.linger)
            self.record.append("finished cleanly")
        except trio.Cancelled:
            self.record.append(f"killed at {trio.current_time():.1f}")
            raise


@pytest.mark.parametrize(
    ("shutdown", "linger", "expected"),
    [
        (2.0, 1.0, "finished cleanly"),  # within the grace
        (2.0, 10.0, "killed at 2.0"),  # grace, then hard cancel
        (0.0, 10.0, "killed at 0.0"),  # immediate
        (math.inf, 30.0, "finished cleanly"),  # waits as long as it takes
    ],
)
async def test_shutdown_grace_then_hard_cancel(
    autojump_clock: trio.testing.MockClock, shutdown: float, linger: float, expected: str
) -> None:
    record: list[str] = []
    async with open_node(shutdown_grace=100.0) as node:
        await node.start_child(ChildSpec("s", lambda: Stubborn(linger, record), shutdown=shutdown))
        start = trio.current_time()
        await node.terminate_child("s")
        assert trio.current_time() - start == pytest.approx(min(shutdown, linger))
    assert record == [expected]


async def test_a_busy_handler_is_killed_after_the_grace(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_node() as node:
        ref = await node.start_child(ChildSpec("w", lambda: Worker("w"), shutdown=1.0))
        await ref.cast(Sleep(100.0))
        await settle()
        before = trio.current_time()
        await node.terminate_child("w")
        assert trio.current_time() - before == pytest.approx(1.0)
        assert not ref.alive


async def test_node_shutdown_grace_bounds_the_whole_tree(
    autojump_clock: trio.testing.MockClock,
) -> None:
    record: list[str] = []
    before = trio.current_time()
    async with open_node(
        [ChildSpec("s", lambda: Stubborn(100.0, record), shutdown=math.inf)], shutdown_grace=3.0
    ):
        pass
    assert trio.current_time() - before == pytest.approx(3.0)
    assert record == ["killed at 3.0"]


async def test_nested_supervisors_stop_depth_first_in_reverse() -> None:
    log: list[tuple[str, str]] = []
    starts: Counter[str] = Counter()
    inner = ChildSpec("inner", lambda: Supervisor(specs(log, starts, "xy")))
    outer = [*specs(log, starts, "a"), inner, *specs(log, starts, "b")]
    async with open_node(outer):
        assert [label for label, _ in log] == ["a", "x", "y", "b"]
        log.clear()
    assert log == [("b", "stop"), ("y", "stop"), ("x", "stop"), ("a", "stop")]


async def test_dynamic_children(actor_node: Node) -> None:
    log: list[tuple[str, str]] = []
    sup = actor_node.supervisor
    refs = []
    for i in range(5):
        spec = ChildSpec(f"loop-{i}", functools.partial(Worker, str(i), log))
        refs.append(await sup.start_child(spec))
    assert len(await sup.which_children()) == 5
    with pytest.raises(SupervisorError, match="already has a child 'loop-0'"):
        await sup.start_child(ChildSpec("loop-0", lambda: Worker("dup", log)))
    await sup.terminate_child("loop-2")
    assert not refs[2].alive
    assert [c.id for c in await sup.which_children()] == ["loop-0", "loop-1", "loop-3", "loop-4"]
    with pytest.raises(SupervisorError, match="has no child 'loop-2'"):
        await sup.terminate_child("loop-2")
    # A temporary child that crashes is forgotten, not restarted.
    temp = await sup.start_child(ChildSpec("t", lambda: Worker("t", log), restart="temporary"))
    await temp.cast(Quit())
    await settle()
    assert "t" not in [c.id for c in await sup.which_children()]


async def test_dynamic_child_start_failure_is_reported_and_survived(actor_node: Node) -> None:
    class Broken(Actor[Any]):
        async def on_start(self) -> None:
            raise Boom("cannot start")

        async def handle(self, message: Any) -> Any:
            return None

    with pytest.raises(ChildStartError, match="child 'bad' failed to start") as info:
        await actor_node.start_child(ChildSpec("bad", Broken))
    assert isinstance(info.value.__cause__, Boom)
    assert await actor_node.supervisor.which_children() == []
    ok = await actor_node.spawn(lambda: Worker("ok"))
    assert await ok.call(Ping(1)) == Ping(1)


async def test_static_child_start_failure_stops_the_started_ones_in_reverse() -> None:
    log: list[tuple[str, str]] = []
    starts: Counter[str] = Counter()

    class Broken(Actor[Any]):
        async def on_start(self) -> None:
            raise Boom("cannot start")

        async def handle(self, message: Any) -> Any:
            return None

    children = [*specs(log, starts, "ab"), ChildSpec("bad", Broken), *specs(log, starts, "c")]
    with pytest.raises(ChildStartError, match="could not start child 'bad'") as info:
        async with open_node(children):
            pytest.fail("the block must not run")
    assert info.value.child_id == "bad"
    assert log == [("a", "start"), ("b", "start"), ("b", "stop"), ("a", "stop")]


async def test_failed_restart_counts_towards_intensity(
    autojump_clock: trio.testing.MockClock,
) -> None:
    attempts: list[float] = []

    class FailsAfterFirst(Actor[Any]):
        async def on_start(self) -> None:
            attempts.append(trio.current_time())
            if len(attempts) > 1:
                raise Boom("restart fails")

        async def handle(self, message: Any) -> Any:
            return None

    with pytest.raises(RestartIntensityExceeded) as info:
        async with open_node([ChildSpec("f", FailsAfterFirst, name="f")], max_restarts=3) as node:
            inject_crash(node, "f")
            await trio.sleep_forever()
    assert len(attempts) == 4  # the first start, then three failed restarts
    assert isinstance(info.value.last_cause, Boom)


async def test_restart_backoff_delays_restarts(autojump_clock: trio.testing.MockClock) -> None:
    started_at: list[float] = []

    class Timed(Actor[Any]):
        async def on_start(self) -> None:
            started_at.append(trio.current_time())

        async def handle(self, message: Any) -> Any:
            return None

    backoff = Backoff(initial=1.0, factor=2.0, maximum=3.0)
    async with open_node(
        [ChildSpec("t", Timed, name="t")], max_restarts=10, max_seconds=100.0, backoff=backoff
    ) as node:
        gaps = []
        for _ in range(3):
            crashed_at = trio.current_time()
            inject_crash(node, "t")
            await settle()
            assert node.whereis("t") is None  # waiting out the backoff
            while node.whereis("t") is None:
                await trio.sleep(0.125)
            gaps.append(started_at[-1] - crashed_at)
    assert gaps == [1.0, 2.0, 3.0]
    assert Backoff().delay(1) == 0.1
    assert Backoff().delay(100) == 10.0


async def test_supervisor_refuses_unknown_messages(actor_node: Node) -> None:
    with pytest.raises(TypeError, match="accepts StartChild, TerminateChild"):
        await actor_node.supervisor.ref.call(Ping())


def test_bad_specs_are_rejected() -> None:
    with pytest.raises(ValueError, match="restart must be one of permanent, transient, temporary"):
        ChildSpec("x", lambda: Worker("x"), restart="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="shutdown must be grace seconds >= 0"):
        ChildSpec("x", lambda: Worker("x"), shutdown=-1)
    with pytest.raises(ValueError, match="strategy must be one of"):
        Supervisor(strategy="all_for_one")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="repeated: x"):
        Supervisor([ChildSpec("x", lambda: Worker("x")), ChildSpec("x", lambda: Worker("y"))])
    with pytest.raises(ValueError, match="max_restarts >= 0"):
        Supervisor(max_restarts=-1)


async def test_supervisor_ref_wraps_a_child_supervisor(actor_node: Node) -> None:
    ref = await actor_node.start_child(ChildSpec("sub", Supervisor))
    sub = SupervisorRef(ref)
    worker = await sub.start_child(ChildSpec("w", lambda: Worker("w")))
    assert await worker.call(Ping(5)) == Ping(5)
    info = await actor_node.supervisor.which_children()
    assert info[0].is_supervisor
    assert info[0].running


async def test_start_children_starts_several_with_one_request(actor_node: Node) -> None:
    log: list[tuple[str, str]] = []

    class Broken(Actor[Any]):
        async def on_start(self) -> None:
            raise Boom("no")

        async def handle(self, message: Any) -> Any:
            return None

    results = await actor_node.supervisor.start_children(
        [
            ChildSpec("a", functools.partial(Worker, "a", log)),
            ChildSpec("bad", Broken),
            ChildSpec("b", functools.partial(Worker, "b", log)),
            ChildSpec("a", functools.partial(Worker, "again", log)),  # the id is taken
        ]
    )
    assert sorted(label for label, _ in log) == ["a", "b"]  # the bad one and the repeat not
    assert isinstance(results[1], ChildStartError)
    assert isinstance(results[3], SupervisorError)
    for ref in (results[0], results[2]):
        assert not isinstance(ref, BaseException)
        assert ref.alive
        assert await ref.call(Ping(1)) == Ping(1)
    assert [c.id for c in await actor_node.supervisor.which_children()] == ["a", "b"]
    assert await actor_node.supervisor.start_children([]) == []
